//! The Console's read models over a run larger than a page can draw: every count is the
//! run's, the drawing is bounded to the newest nodes, and the preferred tip is always drawn.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::console_support;
use crate::protocol_support;

use protocol_support::*;
use workrail::projections::console::LIST_MAX;
use workrail::protocol::ConsoleLookup;
use workrail::store::memfs::MemFs;

#[test]
fn a_run_over_the_node_budget_draws_its_newest_nodes_and_its_older_preferred_tip() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let root = start(&wr, "project.demo");
    let implement = wr.continue_workflow(ack(&root, "planned", vec![])).unwrap();
    let decide = wr
        .continue_workflow(ack(&implement, "implemented", vec![]))
        .unwrap();
    assert_eq!(pending(&decide), "decide");
    // More forks of the root than the page draws: each rewind to the first response and its
    // ack adds a node beside the others.
    let forks = LIST_MAX + 5;
    for i in 0..forks {
        let again = wr.continue_workflow(rehydrate(&root.state_token)).unwrap();
        wr.continue_workflow(ack(&again, &format!("fork {i}"), vec![]))
            .unwrap();
    }
    // The old `decide` node is acked without its loop decision: a blocked attempt, the most
    // recent activity of the run, so that old leaf becomes the preferred tip.
    let blocked = wr
        .continue_workflow(ack(&decide, "decided nothing", vec![]))
        .unwrap();
    assert!(
        !blocked.blockers.is_empty(),
        "blocked without the loop decision"
    );
    let session = decide.session.session_id.to_string();
    let ConsoleLookup::Found(view) = wr.console_session(&session) else {
        panic!("the session is found");
    };
    let run = &view.runs[0];
    let total = 3 + forks;
    assert_eq!(run.node_count, total, "the run's own count");
    assert!(run.nodes_cut);
    let tip = run.preferred_tip.clone().expect("a preferred tip");
    let drawn_tips: Vec<_> = run.nodes.iter().filter(|n| n.is_tip).collect();
    assert_eq!(drawn_tips.len(), 1, "the tip is drawn once");
    assert_eq!(drawn_tips[0].node_id, tip);
    assert_eq!(drawn_tips[0].blocked_attempts, 1);
    assert_eq!(
        run.nodes.len(),
        LIST_MAX + 1,
        "the newest nodes, and the older tip"
    );
    // Every edge drawn joins two drawn nodes.
    let drawn: std::collections::HashSet<&str> =
        run.nodes.iter().map(|n| n.node_id.as_str()).collect();
    for e in &run.edges {
        assert!(drawn.contains(e.from.as_str()) && drawn.contains(e.to.as_str()));
    }
}

/// decision: D171
/// A session with a parallel step: its lanes are not runs of the session of their own in the
/// list (one run, three lanes), and the parent run's view groups them under the step's node
/// with each lane's status, summary and files and the fan-in's conflicts.
#[test]
fn lanes_are_grouped_under_their_parallel_step_and_counted_as_lanes() {
    use console_support::lanes::*;
    let fs = MemFs::new();
    let wr = open_memory(&fs, "fail-on-conflict");
    let fan = to_fan_out(&wr);
    for (i, status, files) in [
        (1, "completed", &["src/lib.rs"][..]),
        (0, "completed", &["src/lib.rs", "src/a.rs"][..]),
        (2, "failed", &["src/lib.rs"][..]),
    ] {
        finish_lane(
            &wr,
            &fan.lanes[i],
            &LaneEnd {
                status,
                summary: &format!("Lane {} {status}.", i + 1),
                files,
                notes: "Handed in.",
            },
        );
    }
    let session = fan.session.session_id.to_string();
    let rows = wr.console_sessions(&|_| None).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!((rows[0].runs, rows[0].lanes), (1, 3));
    assert_eq!(rows[0].workflows, ["project.fan"]);
    assert_eq!(rows[0].labels.len(), 1, "{:?}", rows[0].labels);
    let ConsoleLookup::Found(view) = wr.console_session(&session) else {
        panic!("the session is found");
    };
    let parent = view.runs.iter().find(|r| r.lane_of.is_none()).unwrap();
    assert_eq!(view.runs.len(), 4, "the parent run and its three lanes");
    assert_eq!(parent.lane_groups.len(), 1);
    let group = &parent.lane_groups[0];
    assert_eq!(group.step_id.as_deref(), Some("fan-out"));
    assert_eq!(group.merge_strategy.as_deref(), Some("fail-on-conflict"));
    let node = parent
        .nodes
        .iter()
        .find(|n| n.node_id == group.node_id)
        .unwrap();
    assert_eq!(node.lanes, 3);
    let statuses: Vec<&str> = group.lanes.iter().map(|l| l.status.as_str()).collect();
    assert_eq!(statuses, ["completed", "completed", "failed"]);
    assert_eq!(group.lanes[2].summary.as_deref(), Some("Lane 3 failed."));
    assert_eq!(group.completed_order, [2, 1, 3]);
    // A failed lane's files are not merged: only lanes 2 and 1 conflict, in recorded order.
    assert_eq!(group.conflicts.len(), 1, "{:?}", group.conflicts);
    let conflict = &group.conflicts[0];
    assert_eq!(conflict.file, "src/lib.rs");
    assert_eq!(conflict.lanes, [2, 1]);
    assert_eq!(conflict.resolution, "user-resolved");
    assert_eq!(conflict.applied_from, None);
    for (i, lane) in group.lanes.iter().enumerate() {
        let run = view.runs.iter().find(|r| r.run_id == lane.run_id).unwrap();
        let of = run.lane_of.as_ref().unwrap();
        assert_eq!(
            (
                of.index,
                of.parent_node_id.as_str(),
                of.parent_run_id.as_str()
            ),
            (i as u32 + 1, group.node_id.as_str(), parent.run_id.as_str())
        );
    }
}

//! The Console's read models over a run larger than a page can draw: every count is the
//! run's, the drawing is bounded to the newest nodes, and the preferred tip is always drawn.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod protocol_support;

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

//! The incremental projection (`Projector`, what each server process keeps per session) equals
//! the two-pass reference at every prefix of real logs, whatever the chunks it is extended by:
//! forks, blocked attempts, checkpoints, preference changes, gaps, capability observations.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use proptest::prelude::*;
use protocol_support::*;
use workrail::projections::{Projector, TipPolicy, project, project_in_two_passes};
use workrail::store::memfs::MemFs;
use workrail_spec::closed::{EdgeKind, OutputChannel};
use workrail_spec::event::{EventData, SessionEvent};
use workrail_spec::ids::NodeId;
use workrail_spec::tools::ContinueWorkflowInput;

/// A session with a loop, a fork from an old node, a blocked attempt, a checkpoint, a preference
/// change and a never-stop gap.
fn busy_log() -> Vec<SessionEvent> {
    let fs = MemFs::new();
    let wr = open(&fs);
    let s0 = start(&wr, "project.demo");
    let s1 = wr.continue_workflow(ack(&s0, "planned", vec![])).unwrap();
    let s2 = wr
        .continue_workflow(ack(&s1, "implemented", vec![]))
        .unwrap();
    // Blocked: the decision needs its loop-control artifact.
    let blocked = wr.continue_workflow(ack(&s2, "decided", vec![])).unwrap();
    assert!(!blocked.blockers.is_empty());
    let s3 = wr
        .continue_workflow(ack(&blocked, "decided", vec![loop_control("continue")]))
        .unwrap();
    wr.checkpoint_workflow(workrail_spec::tools::CheckpointWorkflowInput {
        state_token: s3.state_token.clone(),
        checkpoint_token: s3.checkpoint_token.clone().unwrap(),
        output: workrail_spec::tools::OutputInput {
            notes_markdown: Some("halfway".into()),
            artifacts: vec![],
        },
    })
    .unwrap();
    // A preference change to never-stop, then a decision without its artifact: a gap.
    let never_stop = ContinueWorkflowInput {
        preferences: vec![workrail_spec::event::PreferenceDelta::Autonomy(
            workrail_spec::closed::Autonomy::FullAutoNeverStop,
        )],
        ..ack(&s3, "implemented again", vec![])
    };
    let s4 = wr.continue_workflow(never_stop).unwrap();
    let _gap = wr
        .continue_workflow(ack(&s4, "decided without the artifact", vec![]))
        .unwrap();
    // A fork from the first node, after a rehydrate.
    let back = wr.continue_workflow(rehydrate(&s0.state_token)).unwrap();
    let f1 = wr
        .continue_workflow(ack(&back, "planned differently", vec![]))
        .unwrap();
    wr.continue_workflow(ack(&f1, "implemented the fork", vec![]))
        .unwrap();
    // A second run in the same session is not possible through start; the log is enough.
    session_events(&wr, &s0)
}

#[test]
fn extending_event_by_event_equals_the_two_pass_projection_at_every_prefix() {
    let log = busy_log();
    assert!(log.len() > 30, "{} events", log.len());
    let mut projector = Projector::default();
    for end in 1..=log.len() {
        projector.extend(&log[..end]).unwrap();
        let reference = project_in_two_passes(&log[..end], TipPolicy::Latest);
        assert_eq!(
            **projector.projection(),
            reference,
            "prefix of {end} events"
        );
        assert!(reference.anomalies.is_empty());
    }
    assert_eq!(
        project(&log, TipPolicy::Latest),
        project_in_two_passes(&log, TipPolicy::Latest)
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        // A few cases in CI (each builds a session); more with WORKRAIL_PROPTEST_CASES.
        std::env::var("WORKRAIL_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24)
    ))]

    /// Any chunking of the log gives the same projection as projecting it whole.
    #[test]
    fn any_chunking_gives_the_same_projection(cuts in proptest::collection::vec(1usize..12, 1..20)) {
        let log = busy_log();
        let mut projector = Projector::default();
        let mut end = 0;
        for cut in cuts {
            end = (end + cut).min(log.len());
            projector.extend(&log[..end]).unwrap();
            prop_assert_eq!(
                &**projector.projection(),
                &project_in_two_passes(&log[..end], TipPolicy::Latest)
            );
        }
    }
}

/// A session grown by `moves`: each acks (with the loop decision when the step needs it) or
/// rehydrates a node picked among every response so far, so old nodes fork again and again.
fn forking_log(moves: &[(usize, bool)]) -> Vec<SessionEvent> {
    let fs = MemFs::new();
    let wr = open(&fs);
    let mut seen = vec![start(&wr, "project.demo")];
    for &(pick, acks) in moves {
        let from = seen[pick % seen.len()].clone();
        if acks && pick % 7 == 5 {
            // A checkpoint: a checkpoint edge and node under `from`, again and again.
            if let Some(checkpoint_token) = from.checkpoint_token.clone()
                && let Ok(out) =
                    wr.checkpoint_workflow(workrail_spec::tools::CheckpointWorkflowInput {
                        state_token: from.state_token.clone(),
                        checkpoint_token,
                        output: workrail_spec::tools::OutputInput {
                            notes_markdown: Some("checkpointed".into()),
                            artifacts: vec![],
                        },
                    })
            {
                seen.push(out);
            }
            continue;
        }
        let input = if !acks || from.ack_token.is_none() {
            rehydrate(&from.state_token)
        } else if pending(&from).contains("decide") {
            ack(&from, "decided", vec![loop_control("continue")])
        } else if pick % 4 == 3 {
            // No notes: a later fork from the same node may give it notes under its children.
            let mut input = ack(&from, "", vec![]);
            if let Some(output) = input.output.as_mut() {
                output.notes_markdown = None;
            }
            input
        } else {
            ack(&from, "done", vec![])
        };
        if let Ok(out) = wr.continue_workflow(input) {
            seen.push(out);
        }
    }
    session_events(&wr, &seen[0])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("WORKRAIL_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24)
    ))]

    /// Forks from any node at any time: extended one call's events at a time, the preferred tip
    /// (settled within the subtree of the latest activity) equals the whole-log reference.
    /// decision: D215
    /// decision: D216
    #[test]
    fn forks_anywhere_keep_the_preferred_tip_of_the_whole_log(
        moves in proptest::collection::vec((0usize..64, proptest::bool::weighted(0.8)), 1..40)
    ) {
        let log = forking_log(&moves);
        let mut projector = Projector::default();
        for end in 1..=log.len() {
            projector.extend(&log[..end]).unwrap();
            let reference = project_in_two_passes(&log[..end], TipPolicy::Latest);
            prop_assert_eq!(&**projector.projection(), &reference, "prefix of {} events", end);
        }
        // The slot walks equal the walk that looks every parent up.
        for view in projector.projection().runs.values() {
            for node in view.dag.nodes.keys() {
                let mut naive = Vec::new();
                let mut current = Some(node.clone());
                while let Some(id) = current {
                    current = view.dag.nodes.get(&id).and_then(|n| n.parent.clone());
                    naive.push(id);
                }
                let walked: Vec<NodeId> = view.upwards(node).cloned().collect();
                prop_assert_eq!(&walked, &naive);
                let (count, noted) = view.noted_upwards(node);
                let noted: Vec<NodeId> = noted.cloned().collect();
                prop_assert_eq!(count, noted.len());
                let naive_noted: Vec<NodeId> = naive
                    .into_iter()
                    .filter(|n| {
                        view.current_output(n, OutputChannel::Recap)
                            .is_some_and(|o| o.notes)
                    })
                    .collect();
                prop_assert_eq!(noted, naive_noted);
                // D215: the newest node of each subtree, and every path question.
                let mut subtree = vec![node.clone()];
                let mut newest = &view.dag.nodes[node];
                while let Some(id) = subtree.pop() {
                    let info = &view.dag.nodes[&id];
                    if info.created_index > newest.created_index {
                        newest = info;
                    }
                    subtree.extend(info.children.iter().cloned());
                }
                prop_assert_eq!(
                    view.dag.newest_in_subtree(node).map(|n| &n.node_id),
                    Some(&newest.node_id)
                );
                for other in view.dag.nodes.keys() {
                    let mut above = view.upwards(other);
                    prop_assert_eq!(view.is_on_path(node, other), above.any(|n| n == node));
                }
                // D216: the edge questions against a scan of the edges and the log.
                for kind in [EdgeKind::AckedStep, EdgeKind::Checkpoint] {
                    let scanned = view
                        .dag
                        .edges()
                        .filter(|e| e.edge_kind == kind && &e.from_node_id == node)
                        .count();
                    prop_assert_eq!(view.dag.edges_out(node, kind), scanned);
                }
                let first_in = log.iter().position(|e| {
                    matches!(e.data(), EventData::EdgeCreated(edge) if &edge.to_node_id == node)
                });
                prop_assert!(view.dag.edges_indexed());
                prop_assert_eq!(view.dag.first_edge_in(node), first_in);
            }
        }
    }
}

/// The edges a projection holds by slot (D234) are the log's `edge_created` events of each run,
/// in order, their ends' ids as written; an edge whose end is not a node of the run (a log no
/// WorkRail wrote) is kept whole.
/// decision: D234
#[test]
fn edges_held_by_slot_are_the_logs_own_in_order() {
    use workrail::projections::DagEdge;
    let log = busy_log();
    let expected = |log: &[SessionEvent], run: &workrail_spec::ids::RunId| -> Vec<DagEdge> {
        log.iter()
            .filter(|e| e.scope().run_id() == Some(run))
            .filter_map(|e| match e.data() {
                EventData::EdgeCreated(edge) => Some(DagEdge {
                    edge_kind: edge.edge_kind,
                    from_node_id: edge.from_node_id.clone(),
                    to_node_id: edge.to_node_id.clone(),
                    cause: edge.cause.kind,
                }),
                _ => None,
            })
            .collect()
    };
    let projection = project(&log, TipPolicy::Latest);
    for (run, view) in &projection.runs {
        let edges: Vec<DagEdge> = view.dag.edges().collect();
        assert!(edges.len() >= 4, "{edges:?}");
        assert_eq!(edges, expected(&log, run));
        assert_eq!(view.dag.edge_count(), edges.len());
    }
    // One edge now names a node no event creates: it is kept as written, in its place.
    let at = log
        .iter()
        .position(|e| matches!(e.data(), EventData::EdgeCreated(_)))
        .unwrap();
    let mut json = log[at].to_value().unwrap();
    json["data"]["toNodeId"] = serde_json::json!("node_nowhere");
    // The stored key follows its recipe, as another writer's would.
    let key = json["dedupeKey"].as_str().unwrap().to_owned();
    let to = key
        .split("->")
        .nth(1)
        .unwrap()
        .split(':')
        .next()
        .unwrap()
        .to_owned();
    json["dedupeKey"] = serde_json::json!(key.replace(&format!("->{to}:"), "->node_nowhere:"));
    let mut foreign = log.clone();
    foreign[at] = SessionEvent::from_value(json).unwrap();
    let projection = project(&foreign, TipPolicy::Latest);
    for (run, view) in &projection.runs {
        let edges: Vec<DagEdge> = view.dag.edges().collect();
        assert_eq!(edges, expected(&foreign, run));
        assert!(!view.dag.edges_indexed());
        assert!(
            edges
                .iter()
                .any(|e| e.to_node_id.as_str() == "node_nowhere"),
            "{edges:?}"
        );
    }
}

/// A log no WorkRail wrote (events reordered so a node appears before its run): the incremental
/// path declines and `project` falls back to the two-pass projection, anomalies included.
#[test]
fn a_log_the_incremental_path_declines_is_projected_whole() {
    let mut log = busy_log();
    log.swap(0, 1);
    let mut projector = Projector::default();
    assert!(projector.extend(&log).is_err());
    assert_eq!(
        project(&log, TipPolicy::Latest),
        project_in_two_passes(&log, TipPolicy::Latest)
    );
}

/// D214: a replay's shorter prefix gets a projection of its own beside the live one. The live
/// projection stays as it was (the same value, not projected again), a second replay of the same
/// prefix is answered from the first's, and both are what projecting that log whole gives.
/// decision: D214
#[test]
fn a_replayed_prefix_is_projected_beside_the_live_log_once() {
    use std::sync::Arc;
    use workrail::protocol::facts::{ProjectionMemo, projection_bytes};
    use workrail::store::Events;
    use workrail_spec::ids::SessionId;

    let events = busy_log();
    let session = SessionId::parse(events[0].session_id().as_str()).unwrap();
    let memo = ProjectionMemo::with_budget(usize::MAX);
    let live = memo
        .facts(&session, Events::Slice(&events))
        .unwrap()
        .projection;
    assert_eq!(memo.held(), (1, projection_bytes(events.len())));
    for cut in [1, events.len() / 3, events.len() - 1] {
        let prefix = &events[..cut];
        let first = memo
            .facts(&session, Events::Slice(prefix))
            .unwrap()
            .projection;
        assert_eq!(
            *first,
            project(prefix, TipPolicy::Latest),
            "prefix of {cut}"
        );
        let again = memo
            .facts(&session, Events::Slice(prefix))
            .unwrap()
            .projection;
        assert!(
            Arc::ptr_eq(&first, &again),
            "a second replay of the prefix of {cut} is answered from the first's projection"
        );
        assert_eq!(
            memo.held(),
            (1, projection_bytes(events.len()) + projection_bytes(cut)),
            "both projections are counted against the budget"
        );
        let after = memo
            .facts(&session, Events::Slice(&events))
            .unwrap()
            .projection;
        assert!(
            Arc::ptr_eq(&live, &after),
            "the live projection is kept across a replay of the prefix of {cut}"
        );
    }
    // The log grows after replays: it is extended from the live projection, as before.
    assert_eq!(
        *memo
            .facts(&session, Events::Slice(&events))
            .unwrap()
            .projection,
        project(&events, TipPolicy::Latest)
    );
}

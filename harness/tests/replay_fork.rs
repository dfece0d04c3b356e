//! Replays and forks, hammered: one ack replayed 100 times (and again after later activity and
//! after a restart) returns byte-identical responses and writes nothing; N fork attempts from one
//! node (rehydrate the old stateToken, advance, repeat) create N distinct sibling branches, each
//! fresh attempt distinct, with the preferred tip on the newest branch unless later activity on
//! an older branch makes that one the latest (locks §1.2, §2). Every step is also checked
//! against the model by the driver.
//!
//! Guards against: replays that recompute (status, tokens or recap drifting as the log grows),
//! replays or rehydrates that write, a used attempt handed out again, forks that reuse or
//! overwrite a branch, and a preferred tip that ignores last activity.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use workrail_harness::fixture::{ArtifactSpec, OutputSpec};
use workrail_harness::ops::{self, Op};
use workrail_harness::system::System;
use workrail_harness::{Harness, InProcess};
use workrail_spec::closed::{EdgeCauseKind, EdgeKind};
use workrail_spec::ids::NodeId;
use workrail_spec::token::TokenParts;

fn adv(node: u8, notes: u8, artifacts: &[ArtifactSpec]) -> Op {
    Op::Advance {
        node,
        output: OutputSpec {
            notes: Some(notes),
            artifacts: artifacts.to_vec(),
            context: None,
        },
        prefs: None,
    }
}

fn run(h: &mut Harness<InProcess>, ops: &[Op]) {
    if let Err(e) = h.run(ops) {
        panic!("{e}");
    }
}

/// lock: L-TOKEN-ACK-IDEMPOTENT, L-TOKEN-REPLAY-FACTS, L-TOKEN-REHYDRATE-PURE
#[test]
fn one_ack_replayed_100_times_is_byte_identical_and_writes_nothing() {
    let mut h = Harness::new(InProcess::new(11));
    run(
        &mut h,
        &[
            Op::Start { prefs: None },
            adv(0, 1, &[]),
            adv(0, 2, &[]),
            adv(0, 3, &[]), // blocked: no loop control
            adv(0, 4, &[ArtifactSpec::LoopContinue]),
        ],
    );
    let replay_all = |h: &mut Harness<InProcess>| {
        for recorded in h.world.acks.clone() {
            let before = h.sys.fs.snapshot();
            for _ in 0..100 {
                let again = h.sys.continue_workflow(&recorded.input).unwrap();
                assert_eq!(serde_json::to_string(&again).unwrap(), recorded.response);
            }
            assert_eq!(h.sys.fs.snapshot(), before, "a replay wrote to the store");
        }
    };
    replay_all(&mut h);
    // Later activity (advances, a fork, a checkpoint) and a restart change no replay.
    run(
        &mut h,
        &[
            adv(0, 5, &[]),
            adv(3, 6, &[]),
            Op::Checkpoint { node: 0, notes: 1 },
            Op::Restart,
        ],
    );
    replay_all(&mut h);
    // And the driver's own checked replays (model included) agree.
    let replays: Vec<Op> = (0..h.world.acks.len() as u8)
        .map(|ack| Op::ReplayAck {
            ack,
            other_output: ack % 2 == 0,
        })
        .collect();
    run(&mut h, &replays);
}

fn node_of(token: &str) -> NodeId {
    TokenParts::parse(token)
        .unwrap()
        .payload()
        .unwrap()
        .node_id()
        .clone()
}

/// Forks `n` times from the node `back` steps behind the newest one, checking each fork.
fn fork_n(n: usize, back: u8, seed: u64) {
    let mut h = Harness::new(InProcess::new(seed));
    run(
        &mut h,
        &[
            Op::Start { prefs: None },
            adv(0, 1, &[]),
            adv(0, 2, &[]),
            adv(0, 3, &[ArtifactSpec::LoopStop]),
        ],
    );
    let from = h.world.nodes.len() - 1 - usize::from(back);
    let from_imp = h.world.nodes[from].imp.clone();
    let run_ids = h.world.runs[0].clone();
    let step_children = |h: &Harness<InProcess>| {
        let loaded = h
            .sys
            .workrail
            .sessions()
            .load(&run_ids.impl_session)
            .unwrap();
        let projection = workrail::projections::project(
            &loaded.events,
            workrail::projections::TipPolicy::Latest,
        );
        projection.runs[&run_ids.impl_run]
            .dag
            .edges
            .iter()
            .filter(|e| e.edge_kind == EdgeKind::AckedStep && e.from_node_id == from_imp)
            .count()
    };
    let before = step_children(&h);
    let mut branches: Vec<NodeId> = Vec::new();
    let mut attempts = std::collections::BTreeSet::new();
    for i in 0..n {
        // The agent rewinds: rehydrate the old stateToken, then ack with the fresh attempt.
        let sel = (h.world.nodes.len() - 1 - from) as u8;
        run(&mut h, &[Op::Rehydrate { node: sel }]);
        let sel = (h.world.nodes.len() - 1 - from) as u8;
        // Artifacts that satisfy whichever step is pending, so every ack advances.
        let all = [ArtifactSpec::LoopStop, ArtifactSpec::Verification];
        run(&mut h, &[adv(sel, 10 + i as u8, &all)]);
        let recorded = h.world.acks.last().unwrap().clone();
        let ack = recorded.input.ack_token.clone().unwrap();
        assert!(attempts.insert(ack), "an attempt was handed out twice");
        let response: workrail_spec::tools::ExecutionOutput =
            serde_json::from_str(&recorded.response).unwrap();
        let child = node_of(&response.state_token);
        assert!(!branches.contains(&child), "a fork reused a branch");
        branches.push(child.clone());
        // The newest branch is the preferred tip.
        let loaded = h
            .sys
            .workrail
            .sessions()
            .load(&run_ids.impl_session)
            .unwrap();
        let projection = workrail::projections::project(
            &loaded.events,
            workrail::projections::TipPolicy::Latest,
        );
        let view = &projection.runs[&run_ids.impl_run];
        assert_eq!(view.preferred_tip.as_ref(), Some(&child), "fork {i}");
        let children: Vec<_> = view
            .dag
            .edges
            .iter()
            .filter(|e| e.edge_kind == EdgeKind::AckedStep && e.from_node_id == from_imp)
            .collect();
        assert_eq!(children.len(), before + branches.len());
        // Every ack after the first step child is a non-tip advance (a fork).
        for (k, e) in children.iter().enumerate() {
            let expected = if k == 0 {
                EdgeCauseKind::IdempotentReplay
            } else {
                EdgeCauseKind::NonTipAdvance
            };
            assert_eq!(e.cause.kind, expected);
        }
    }
    // Activity on the oldest fork makes it the preferred tip again (last activity wins): a
    // checkpoint on it (a new leaf under it), then an advance.
    let oldest = h
        .world
        .nodes
        .iter()
        .position(|x| x.imp == branches[0])
        .unwrap();
    let sel = (h.world.nodes.len() - 1 - oldest) as u8;
    run(
        &mut h,
        &[Op::Checkpoint {
            node: sel,
            notes: 1,
        }],
    );
    let checkpoint = h.world.nodes.last().unwrap().imp.clone();
    let loaded = h
        .sys
        .workrail
        .sessions()
        .load(&run_ids.impl_session)
        .unwrap();
    let projection =
        workrail::projections::project(&loaded.events, workrail::projections::TipPolicy::Latest);
    assert_eq!(
        projection.runs[&run_ids.impl_run].preferred_tip.as_ref(),
        Some(&checkpoint)
    );
}

/// lock: L-DAG-NON-TIP-AUTO-FORK, L-TOKEN-ACK-ATTEMPTS, L-TIP-LAST-ACTIVITY, L-TIP-TIE-BREAK, L-DAG-NO-FORK-EDGE-KIND
#[test]
fn eight_forks_from_one_node_are_eight_branches() {
    fork_n(8, 2, 21);
}

proptest! {
    #![proptest_config(ops::config(8))]

    /// lock: L-DAG-NON-TIP-AUTO-FORK, L-TOKEN-ACK-ATTEMPTS, L-TIP-LAST-ACTIVITY
    #[test]
    fn n_forks_from_any_node_are_n_branches(n in 1usize..7, back in 0u8..4, seed in any::<u64>()) {
        fork_n(n, back, seed);
    }
}

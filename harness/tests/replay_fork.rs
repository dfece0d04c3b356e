//! Replays and forks, hammered: one ack replayed 100 times (and again after later activity and
//! after a restart) returns byte-identical responses and writes nothing; N fork attempts from one
//! node (rehydrate the old stateToken, advance, repeat) create N distinct sibling branches, each
//! fresh attempt distinct, with the preferred tip on the newest branch unless later activity on
//! an older branch makes that one the latest (locks §1.2, §2). Every step is also checked
//! against the model by the driver.
//!
//! The same over a workflow in the WorkRail 3.x language (`fixture::LANGUAGE_JSON`, decision
//! D139) whose acks carry context deltas: a replay after later context changes (on the same
//! branch and on forks) still answers the recorded facts, and a node's pending step keeps the
//! bindings (and so the title and prompt) frozen when it became pending; forks from one node
//! with other contexts are distinct siblings, each walking its own context.
//!
//! Guards against: replays that recompute (status, tokens or recap drifting as the log grows),
//! replays or rehydrates that write, a used attempt handed out again, forks that reuse or
//! overwrite a branch, a preferred tip that ignores last activity, and (in the language) a
//! replay or rehydrate that re-walks or re-renders over the run's current context.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::Value;
use workrail::store::memfs::MemFs;
use workrail_harness::fixture::{ArtifactSpec, ContextSpec, OutputSpec};
use workrail_harness::generated::language_fixture_workflow;
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
    let h = Harness::new(InProcess::new(seed));
    let prefix = [
        Op::Start { prefs: None },
        adv(0, 1, &[]),
        adv(0, 2, &[]),
        adv(0, 3, &[ArtifactSpec::LoopStop]),
    ];
    // Artifacts that satisfy whichever step is pending, so every ack advances.
    let all = [ArtifactSpec::LoopStop, ArtifactSpec::Verification];
    fork_n_on(h, &prefix, n, back, |i| OutputSpec {
        notes: Some(10 + i as u8),
        artifacts: all.to_vec(),
        context: None,
    });
}

/// Runs `prefix`, then forks `n` times from the node `back` steps behind the newest one, the
/// i-th fork sending `output(i)`, checking each fork. Returns the pending step of each fork's
/// new node (`None`: complete).
fn fork_n_on(
    mut h: Harness<InProcess>,
    prefix: &[Op],
    n: usize,
    back: u8,
    output: impl Fn(usize) -> OutputSpec,
) -> Vec<Option<String>> {
    run(&mut h, prefix);
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
            &loaded.events().all().unwrap(),
            workrail::projections::TipPolicy::Latest,
        );
        projection.runs[&run_ids.impl_run]
            .dag
            .edges()
            .filter(|e| e.edge_kind == EdgeKind::AckedStep && e.from_node_id == from_imp)
            .count()
    };
    let before = step_children(&h);
    let mut branches: Vec<NodeId> = Vec::new();
    let mut pending = Vec::new();
    let mut attempts = std::collections::BTreeSet::new();
    for i in 0..n {
        // The agent rewinds: rehydrate the old stateToken, then ack with the fresh attempt.
        let sel = (h.world.nodes.len() - 1 - from) as u8;
        run(&mut h, &[Op::Rehydrate { node: sel }]);
        let sel = (h.world.nodes.len() - 1 - from) as u8;
        let advanced = h.world.stats.advanced;
        run(
            &mut h,
            &[Op::Advance {
                node: sel,
                output: output(i),
                prefs: None,
            }],
        );
        assert_eq!(
            h.world.stats.advanced,
            advanced + 1,
            "fork {i} did not advance"
        );
        let recorded = h.world.acks.last().unwrap().clone();
        let ack = recorded.input.ack_token.clone().unwrap();
        assert!(attempts.insert(ack), "an attempt was handed out twice");
        let response: workrail_spec::tools::ExecutionOutput =
            serde_json::from_str(&recorded.response).unwrap();
        let child = node_of(&response.state_token);
        pending.push(response.pending.as_ref().map(|p| p.step_id.to_string()));
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
            &loaded.events().all().unwrap(),
            workrail::projections::TipPolicy::Latest,
        );
        let view = &projection.runs[&run_ids.impl_run];
        assert_eq!(view.preferred_tip.as_ref(), Some(&child), "fork {i}");
        let children: Vec<_> = view
            .dag
            .edges()
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
            assert_eq!(e.cause, expected);
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
    let projection = workrail::projections::project(
        &loaded.events().all().unwrap(),
        workrail::projections::TipPolicy::Latest,
    );
    assert_eq!(
        projection.runs[&run_ids.impl_run].preferred_tip.as_ref(),
        Some(&checkpoint)
    );
    pending
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

// -------------------------------------------------------------------------------------------
// A workflow in the language
// -------------------------------------------------------------------------------------------

fn language_harness(seed: u64) -> Harness<InProcess> {
    let workflow = language_fixture_workflow();
    let sys = InProcess::with_catalog(MemFs::new(), seed, workflow.catalog());
    Harness::with_workflow(sys, workflow)
}

/// `mode` (0 `fast`, 1 `slow`), `flag` (0 true, 1 false), `items` (1 `["api"]`, 2 `["api",
/// "ui"]`, 3 `"api"`) as `ContextSpec` spells them.
fn ctx(mode: Option<u8>, flag: Option<u8>, items: Option<u8>) -> ContextSpec {
    ContextSpec {
        mode,
        flag,
        rounds: None,
        items,
    }
}

/// An ack of node `node` (0: the newest) with notes `Recap {notes}` and a context delta.
fn adv_ctx(node: u8, notes: u8, context: ContextSpec) -> Op {
    Op::Advance {
        node,
        output: OutputSpec {
            notes: Some(notes),
            artifacts: vec![],
            context: Some(context),
        },
        prefs: None,
    }
}

fn pending_of(response: &str) -> Value {
    serde_json::from_str::<Value>(response).unwrap()["pending"].clone()
}

/// lock: L-TOKEN-ACK-IDEMPOTENT, L-TOKEN-REPLAY-FACTS, L-TOKEN-REHYDRATE-PURE
/// decision: D139, D141, D143
#[test]
fn a_replay_in_the_language_answers_the_recorded_facts_after_later_context_changes() {
    let mut h = language_harness(41);
    run(
        &mut h,
        &[
            Op::Start { prefs: None },
            adv_ctx(0, 1, ctx(Some(1), None, None)), // deep-dive, bound to mode slow
            adv_ctx(0, 1, ctx(None, None, Some(3))), // blocked: items is not an array
            adv_ctx(0, 1, ctx(Some(0), None, Some(2))), // review api (item 0)
            adv_ctx(0, 2, ctx(None, None, None)),    // review ui (item 1)
            adv_ctx(0, 2, ctx(None, None, None)),    // summary
            adv_ctx(0, 5, ctx(Some(1), None, None)), // blocked: the summary wants "Recap 2"
        ],
    );
    assert_eq!(h.world.stats.blocked, 2);
    // What each recorded ack answered.
    let recorded: Vec<String> = h.world.acks.iter().map(|a| a.response.clone()).collect();
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
    // Later context changes: on the tip (mode fast, one item, loop flag off), a fork from the
    // survey with the other mode and other items, a fork from the first review with the loop
    // array replaced, a checkpoint, a restart.
    // The nodes so far: survey, deep dive, review api, review ui, summary.
    assert_eq!(h.world.nodes.len(), 5);
    let (survey, first_review) = (0, 2);
    let sel = |h: &Harness<InProcess>, node: usize| (h.world.nodes.len() - 1 - node) as u8;
    run(&mut h, &[adv_ctx(0, 2, ctx(Some(0), Some(1), Some(1)))]);
    let s = sel(&h, survey);
    run(&mut h, &[adv_ctx(s, 3, ctx(Some(0), Some(0), Some(1)))]);
    let r = sel(&h, first_review);
    run(
        &mut h,
        &[
            adv_ctx(r, 4, ctx(Some(1), None, Some(1))),
            Op::Checkpoint { node: 0, notes: 1 },
            Op::Restart,
        ],
    );
    assert!(h.world.stats.forks >= 2, "{:?}", h.world.stats);
    replay_all(&mut h);
    // Every node an ack created still shows the pending step it was created with (its frozen
    // bindings): the deep dive says mode slow although the run's mode is fast now, and the
    // reviews name the items of the array they were bound from.
    for (i, response) in recorded.iter().enumerate() {
        let out: workrail_spec::tools::ExecutionOutput = serde_json::from_str(response).unwrap();
        let node = node_of(&out.state_token);
        let token = h.world.state_tokens[&node].clone();
        let again = h
            .sys
            .continue_workflow(&workrail_spec::tools::ContinueWorkflowInput {
                state_token: Some(token),
                ack_token: None,
                context: None,
                output: None,
                preferences: vec![],
                preset: None,
            })
            .unwrap();
        assert_eq!(
            serde_json::to_value(&again.pending).unwrap(),
            pending_of(response),
            "ack {i}: a rehydrate shows another pending step than the ack answered"
        );
    }
    let prompts: Vec<String> = recorded
        .iter()
        .map(|r| {
            pending_of(r)["prompt"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert!(prompts[0].contains("in mode slow"), "{prompts:?}");
    assert!(
        prompts[2].starts_with("Review api (item 0)."),
        "{prompts:?}"
    );
    assert!(prompts[3].starts_with("Review ui (item 1)."), "{prompts:?}");
    // And the driver's own checked replays (model included) agree, notes changed or not.
    let replays: Vec<Op> = (0..h.world.acks.len() as u8)
        .map(|ack| Op::ReplayAck {
            ack,
            other_output: ack % 2 == 0,
        })
        .collect();
    run(&mut h, &replays);
}

/// The run of the language workflow the forks start from: survey, deep dive (mode slow), the
/// two reviews, the summary pending.
fn language_prefix() -> [Op; 5] {
    [
        Op::Start { prefs: None },
        adv_ctx(0, 1, ctx(Some(1), None, None)),
        adv_ctx(0, 1, ctx(None, None, None)),
        adv_ctx(0, 2, ctx(None, None, None)),
        adv_ctx(0, 2, ctx(None, None, None)),
    ]
}

/// The i-th fork's output: notes that pass every check of the workflow ("Recap 2: did the
/// step."), and a context that alternates the mode and the items.
fn language_fork_output(i: usize) -> OutputSpec {
    OutputSpec {
        notes: Some(2),
        artifacts: vec![],
        context: Some(ctx(Some((i % 2) as u8), Some(0), Some(1 + (i % 2) as u8))),
    }
}

/// lock: L-DAG-NON-TIP-AUTO-FORK, L-TOKEN-ACK-ATTEMPTS, L-TIP-LAST-ACTIVITY, L-TIP-TIE-BREAK
/// decision: D139
#[test]
fn six_forks_with_other_contexts_from_the_survey_are_six_branches() {
    let pending = fork_n_on(
        language_harness(42),
        &language_prefix(),
        6,
        4,
        language_fork_output,
    );
    // Each branch walked its own delta: `fast` skips the deep dive and enters the loop.
    let expected: Vec<Option<String>> = (0..6)
        .map(|i| Some(["review", "deep-dive"][i % 2].to_owned()))
        .collect();
    assert_eq!(pending, expected);
}

proptest! {
    #![proptest_config(ops::config(8))]

    /// lock: L-DAG-NON-TIP-AUTO-FORK, L-TOKEN-ACK-ATTEMPTS, L-TIP-LAST-ACTIVITY
    /// decision: D139
    #[test]
    fn n_forks_with_other_contexts_from_any_node_of_a_language_run_are_n_branches(
        n in 1usize..7,
        back in 0u8..5,
        seed in any::<u64>(),
    ) {
        fork_n_on(language_harness(seed), &language_prefix(), n, back, language_fork_output);
    }
}

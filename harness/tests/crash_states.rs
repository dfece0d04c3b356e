//! Crash at every mutating I/O point of a command, under every unsynced-data policy, restart,
//! and require the old truth, the new truth, or (only when a power cut tore the close+pins
//! write) exactly the locked fail-fast state that `workrail repair` turns into the new truth;
//! never anything in between, and the interrupted call is safely repeatable afterwards (locks §1
//! "Append transaction protocol", "Crash-state intent"; D49, D51).
//!
//! The same over workflows in the WorkRail 3.x language (decision D139): a hand-written one
//! (`fixture::LANGUAGE_JSON`: run conditions on a step and a loop, a `forEach` loop over a
//! context array, validation criteria) and generated ones (`language::workflow`), whose prefixes
//! and crashed acks carry context deltas, so a crash can fall between the context an ack records
//! and the walk it decided (the pending step's frozen bindings).
//!
//! Guards against: commit orders that leave partial truth, acknowledged writes that a power cut
//! loses, pin-on-load repair or salvage of an unpinned segment, retries after a crash that
//! advance twice or not at all, and (in the language) a context, a skip trace or bindings
//! committed apart from the advance that read them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::Value;
use workrail_harness::crash::{CrashReport, check_crashes, check_crashes_on, policies};
use workrail_harness::fixture::{ArtifactSpec, ContextSpec, OutputSpec};
use workrail_harness::generated::{
    GENERATED_FILE, GENERATED_ID, WorkflowUnderTest, language_fixture_workflow,
};
use workrail_harness::language;
use workrail_harness::ops::{self, Op, PrefSpec};

fn adv(artifacts: &[ArtifactSpec]) -> Op {
    Op::Advance {
        node: 0,
        output: OutputSpec {
            notes: Some(1),
            artifacts: artifacts.to_vec(),
            context: None,
        },
        prefs: None,
    }
}

fn prefix() -> Vec<Op> {
    vec![
        Op::Start { prefs: None },
        adv(&[]),
        adv(&[]),
        Op::Start { prefs: None },
    ]
}

/// lock: L-STORE-CRASH-BEFORE-CLOSE, L-STORE-CRASH-BEFORE-PINS, L-STORE-CRASH-AFTER-PINS, L-STORE-APPEND-ONLY-MUTATION, L-TOKEN-ACK-IDEMPOTENT
#[test]
fn an_interrupted_advance_recovers_old_new_or_fails_fast() {
    // An ack that creates a node with a new snapshot and an artifact output, in a session next
    // to another one.
    let mut ops = prefix();
    ops.push(Op::Rehydrate { node: 0 });
    let last = Op::Advance {
        node: 0,
        output: OutputSpec {
            notes: Some(2),
            artifacts: vec![ArtifactSpec::LoopContinue, ArtifactSpec::Note(1)],
            context: None,
        },
        prefs: Some(PrefSpec::Both(2, 1)),
    };
    let report = check_crashes(&ops, &last, 7, &policies(7)).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        report.points >= 8
            && report.old_truth > 0
            && report.new_truth > 0
            && report.torn_then_repaired > 0,
        "every outcome class must be reached: {report:?}"
    );
}

/// lock: L-STORE-CRASH-BEFORE-CLOSE, L-STORE-CRASH-AFTER-PINS, L-DAG-CHECKPOINT-NO-ADVANCE, L-TOKEN-CHECKPOINT-IDEMPOTENT
#[test]
fn an_interrupted_checkpoint_recovers_old_or_new() {
    // A checkpoint introduces no snapshot (it reuses its parent's), so it has no pins and no
    // fail-fast state.
    let report = check_crashes(
        &prefix(),
        &Op::Checkpoint { node: 2, notes: 1 },
        8,
        &policies(8),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        report.points > 0
            && report.old_truth > 0
            && report.new_truth > 0
            && report.torn_then_repaired == 0,
        "{report:?}"
    );
}

/// lock: L-STORE-CRASH-BEFORE-CLOSE, L-STORE-CRASH-AFTER-PINS
#[test]
fn an_interrupted_start_leaves_no_session_or_the_acknowledged_one() {
    let report = check_crashes(
        &prefix(),
        &Op::Start {
            prefs: Some(PrefSpec::Risk(2)),
        },
        9,
        &policies(9),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // A new session's manifest becomes durable only when its directory entry is synced, the
    // start's last operation: every crash before it leaves no session at all (the start was
    // never acknowledged), and the power cut after the prefix showed that an acknowledged start
    // survives. A torn close+pins write is never reachable: its file is not there.
    assert!(
        report.points > 0
            && report.old_truth == 4 * report.points as u32
            && report.new_truth == 0
            && report.torn_then_repaired == 0,
        "{report:?}"
    );
}

/// lock: L-STORE-CRASH-BEFORE-CLOSE, L-STORE-CRASH-AFTER-PINS
#[test]
fn an_interrupted_blocked_ack_recovers_old_or_new() {
    // decide without loop control: blocked, so no node and no snapshot.
    let mut ops = prefix();
    ops.extend([adv(&[]), adv(&[])]);
    let report =
        check_crashes(&ops, &adv(&[]), 10, &policies(10)).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        report.points > 0
            && report.old_truth > 0
            && report.new_truth > 0
            && report.torn_then_repaired == 0,
        "{report:?}"
    );
}

fn last_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<u8>(), ops::output_strategy(), proptest::option::of((0u8..3).prop_map(PrefSpec::Autonomy)))
            .prop_map(|(node, output, prefs)| Op::Advance { node, output, prefs }),
        1 => (any::<u8>(), 0u8..4).prop_map(|(node, notes)| Op::Checkpoint { node, notes }),
        1 => Just(Op::Start { prefs: None }),
        1 => ops::op_strategy(),
    ]
}

proptest! {
    #![proptest_config(ops::config(4))]

    /// lock: L-STORE-CRASH-BEFORE-CLOSE, L-STORE-CRASH-BEFORE-PINS, L-STORE-CRASH-AFTER-PINS, L-STORE-APPEND-ONLY-MUTATION
    #[test]
    fn every_crash_point_of_a_generated_command_is_old_new_or_fail_fast(
        ops in ops::ops_strategy(10),
        last in last_op(),
        seed in any::<u64>(),
    ) {
        check_crashes(&ops, &last, seed, &policies(seed)).map_err(TestCaseError::fail)?;
    }
}

// -------------------------------------------------------------------------------------------
// Workflows in the language
// -------------------------------------------------------------------------------------------

/// An ack of the newest node with notes `Recap {notes}` and a context delta.
fn adv_with(notes: u8, context: ContextSpec) -> Op {
    Op::Advance {
        node: 0,
        output: OutputSpec {
            notes: Some(notes),
            artifacts: vec![],
            context: Some(context),
        },
        prefs: None,
    }
}

/// `mode` (0 `fast`, 1 `slow`), `flag` (0 true, 1 false), `items` (1 `["api"]`, 2 `["api",
/// "ui"]`, 3 `"api"`: not an array) as `ContextSpec` spells them.
fn ctx(mode: Option<u8>, flag: Option<u8>, items: Option<u8>) -> ContextSpec {
    ContextSpec {
        mode,
        flag,
        rounds: None,
        items,
    }
}

/// A second session first, then a run of the language workflow whose survey ack sent `mode:
/// slow` (so `deep-dive` is pending, its prompt bound to `slow`).
fn language_prefix() -> Vec<Op> {
    vec![
        Op::Start { prefs: None },
        adv_with(1, ctx(Some(0), None, None)),
        Op::Start { prefs: None },
        adv_with(1, ctx(Some(1), None, Some(2))),
    ]
}

fn crash_language(ops: &[Op], last: &Op, seed: u64) -> CrashReport {
    check_crashes_on(
        language_fixture_workflow(),
        ops,
        last,
        seed,
        &policies(seed),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// lock: L-STORE-CRASH-BEFORE-CLOSE, L-STORE-CRASH-BEFORE-PINS, L-STORE-CRASH-AFTER-PINS, L-TOKEN-ACK-IDEMPOTENT
/// decision: D139, D141
#[test]
fn an_interrupted_advance_into_a_for_each_loop_recovers_old_new_or_fails_fast() {
    // The ack of `deep-dive` replaces the items (the walk enters the loop over the new array
    // and binds its first item into the new node's snapshot) and changes `mode`: the context
    // it records, the loop's trace entries and the bound snapshot commit together or not at
    // all.
    let report = crash_language(
        &language_prefix(),
        &adv_with(3, ctx(Some(0), Some(0), Some(1))),
        31,
    );
    assert!(
        report.points >= 8
            && report.old_truth > 0
            && report.new_truth > 0
            && report.torn_then_repaired > 0,
        "every outcome class must be reached: {report:?}"
    );
}

/// lock: L-STORE-CRASH-BEFORE-CLOSE, L-STORE-CRASH-AFTER-PINS, L-TOKEN-ACK-IDEMPOTENT
/// decision: D139, D143
#[test]
fn an_interrupted_ack_blocked_by_validation_criteria_recovers_old_or_new() {
    // `flag: false` skips the loop (a recorded skip), so `summary` is pending; its ack with
    // notes that fail the summary's rule (and a context delta) is blocked: no node, no
    // snapshot, so no fail-fast state.
    let mut ops = language_prefix();
    ops.push(adv_with(1, ctx(None, Some(1), None)));
    let report = crash_language(&ops, &adv_with(5, ctx(Some(0), Some(0), None)), 32);
    assert!(
        report.points > 0
            && report.old_truth > 0
            && report.new_truth > 0
            && report.torn_then_repaired == 0,
        "{report:?}"
    );
}

/// lock: L-STORE-CRASH-BEFORE-CLOSE, L-STORE-CRASH-AFTER-PINS
/// decision: D141
#[test]
fn an_interrupted_ack_blocked_by_a_malformed_loop_array_recovers_old_or_new() {
    // The delta makes `items` a string: the walk that would enter the loop blocks the ack.
    let report = crash_language(
        &language_prefix(),
        &adv_with(2, ctx(None, Some(0), Some(3))),
        33,
    );
    assert!(
        report.points > 0
            && report.old_truth > 0
            && report.new_truth > 0
            && report.torn_then_repaired == 0,
        "{report:?}"
    );
}

/// lock: L-STORE-CRASH-BEFORE-CLOSE, L-STORE-CRASH-BEFORE-PINS, L-STORE-CRASH-AFTER-PINS, L-DAG-NON-TIP-AUTO-FORK
/// decision: D139, D141
#[test]
fn an_interrupted_fork_with_other_context_recovers_old_new_or_fails_fast() {
    // After the run went on through the loop, the survey is acknowledged again with `mode:
    // fast` (a fork): the new branch skips the deep dive and binds the first item anew.
    let mut ops = language_prefix();
    ops.extend([
        adv_with(1, ctx(None, None, None)),
        adv_with(2, ctx(None, None, None)),
    ]);
    // The newest nodes: review ui (0), review api (1), deep-dive (2), survey (3).
    let last = Op::Advance {
        node: 3,
        output: OutputSpec {
            notes: Some(4),
            artifacts: vec![],
            context: Some(ctx(Some(0), None, Some(2))),
        },
        prefs: Some(PrefSpec::Autonomy(1)),
    };
    let report = crash_language(&ops, &last, 34);
    assert!(
        report.points > 0
            && report.old_truth > 0
            && report.new_truth > 0
            && report.torn_then_repaired > 0,
        "every outcome class must be reached: {report:?}"
    );
}

fn language_last_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u8..4, ops::language_output_strategy(), proptest::option::of((0u8..3).prop_map(PrefSpec::Autonomy)))
            .prop_map(|(node, output, prefs)| Op::Advance { node, output, prefs }),
        1 => (any::<u8>(), 0u8..4).prop_map(|(node, notes)| Op::Checkpoint { node, notes }),
        1 => Just(Op::Start { prefs: None }),
    ]
}

proptest! {
    #![proptest_config(ops::config(8))]

    /// lock: L-STORE-CRASH-BEFORE-CLOSE, L-STORE-CRASH-BEFORE-PINS, L-STORE-CRASH-AFTER-PINS, L-STORE-APPEND-ONLY-MUTATION
    /// decision: D139
    #[test]
    fn every_crash_point_of_a_command_on_a_workflow_in_the_language_is_old_new_or_fail_fast(
        (json, context) in language::workflow(),
        ops in ops::language_ops_strategy(10),
        last in language_last_op(),
        seed in any::<u64>(),
    ) {
        let workflow = WorkflowUnderTest::compile(GENERATED_ID, GENERATED_FILE, &json)
            .map_err(TestCaseError::fail)?
            .with_start_context(context.clone());
        check_crashes_on(Arc::new(workflow), &ops, &last, seed, &policies(seed)).map_err(|e| {
            TestCaseError::fail(format!("{e}\nworkflow: {json}\nstart context: {context:?}"))
        })?;
    }
}

/// The hand-written workflow reaches what the crash tests above rely on: the deep dive bound to
/// the `mode` the survey's ack sent, the loop over the items the start sent, and both kinds of
/// blocked ack.
#[test]
fn the_language_workflow_reaches_its_constructs() {
    use workrail::store::memfs::MemFs;
    use workrail_harness::{Harness, InProcess};
    let workflow = language_fixture_workflow();
    let sys = InProcess::with_catalog(MemFs::new(), 30, workflow.catalog());
    let mut h = Harness::with_workflow(sys, workflow);
    let mut ops = language_prefix();
    ops.extend([
        adv_with(1, ctx(None, None, Some(3))), // blocked: items is not an array
        adv_with(1, ctx(None, None, None)),    // review api
        adv_with(1, ctx(None, None, None)),    // review ui
        adv_with(1, ctx(None, None, None)),    // summary
        adv_with(5, ctx(None, None, None)),    // blocked: summary wants "Recap 2"
        adv_with(2, ctx(None, None, None)),    // complete
    ]);
    h.run(&ops).unwrap_or_else(|e| panic!("{e}"));
    let prompts: Vec<Value> = h
        .world
        .acks
        .iter()
        .map(|a| serde_json::from_str::<Value>(&a.response).unwrap()["pending"].clone())
        .collect();
    let titles: Vec<&str> = prompts
        .iter()
        .map(|p| p["title"].as_str().unwrap_or("(complete)"))
        .collect();
    assert_eq!(
        titles,
        [
            "Review api",
            "Deep dive",
            "Deep dive",
            "Review api",
            "Review ui",
            "Summary",
            "Summary",
            "(complete)"
        ]
    );
    assert!(
        prompts[1]["prompt"]
            .as_str()
            .unwrap()
            .contains("in mode slow")
    );
    assert!(
        prompts[4]["prompt"]
            .as_str()
            .unwrap()
            .starts_with("Review ui (item 1).")
    );
    assert_eq!((h.world.stats.blocked, h.world.stats.completed), (2, 1));
}

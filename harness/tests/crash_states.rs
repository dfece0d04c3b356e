//! Crash at every mutating I/O point of a command, under every unsynced-data policy, restart,
//! and require the old truth, the new truth, or (only when a power cut tore the close+pins
//! write) exactly the locked fail-fast state that `workrail repair` turns into the new truth;
//! never anything in between, and the interrupted call is safely repeatable afterwards (locks §1
//! "Append transaction protocol", "Crash-state intent"; D49, D51).
//!
//! Guards against: commit orders that leave partial truth, acknowledged writes that a power cut
//! loses, pin-on-load repair or salvage of an unpinned segment, and retries after a crash that
//! advance twice or not at all.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use workrail_harness::crash::{check_crashes, policies};
use workrail_harness::fixture::{ArtifactSpec, OutputSpec};
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

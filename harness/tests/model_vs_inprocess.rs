//! The model against the production use-cases (`Workrail` over `MemFs`): generated command
//! sequences (start, rehydrate current and old tokens, advance with and without valid contract
//! artifacts and loop decisions, replays, forks from older tokens, checkpoints and their replays,
//! preference changes on acks, restarts, a second writer holding the lock), with every
//! observable compared after every command: responses, the durable DAG (through an id
//! bijection), preferred tips, run status, gaps, outputs, attempts and preferences.
//!
//! Guards against any drift between the executable model and production, and against writes
//! from reads (rehydrate, replays) and from refused writes (a busy session).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use workrail_harness::driver::check_sequences;
use workrail_harness::fixture::{ArtifactSpec, OutputSpec};
use workrail_harness::ops::{self, Op, PrefSpec};
use workrail_harness::{Harness, InProcess};

fn run(ops: &[Op], seed: u64) -> workrail_harness::Stats {
    let mut h = Harness::new(InProcess::new(seed));
    if let Err(e) = h.run(ops) {
        panic!("{e}");
    }
    h.world.stats
}

fn out(notes: u8, artifacts: &[ArtifactSpec]) -> OutputSpec {
    OutputSpec {
        notes: Some(notes),
        artifacts: artifacts.to_vec(),
        context: None,
    }
}

fn adv(node: u8, output: OutputSpec) -> Op {
    Op::Advance {
        node,
        output,
        prefs: None,
    }
}

/// lock: L-TOKEN-REHYDRATE-PURE, L-TOKEN-ACK-IDEMPOTENT, L-TOKEN-REPLAY-FACTS, L-DAG-NON-TIP-AUTO-FORK, L-TIP-LAST-ACTIVITY, L-STATUS-FROM-TIP, L-STATUS-COMPLETE, L-STATUS-BLOCKED, L-WRITER-BUSY, L-TOKEN-CHECKPOINT-IDEMPOTENT
#[test]
fn a_walk_through_every_command_matches_the_model() {
    use ArtifactSpec::*;
    // Selectors count back from the newest node (0 = the latest response's node).
    let ops = vec![
        Op::Start { prefs: None }, // R: plan
        Op::Rehydrate { node: 0 },
        adv(0, out(1, &[])),                // R -> A: implement
        adv(0, out(2, &[])),                // A -> B: decide
        adv(0, out(3, &[])),                // no loop control: blocked
        adv(0, out(3, &[LoopBadDecision])), // malformed: blocked
        adv(0, out(4, &[LoopContinue])),    // B -> C: implement, iteration 1
        Op::ReplayAck {
            ack: 2,
            other_output: true,
        },
        Op::Rehydrate { node: 2 },            // A's old stateToken
        adv(2, out(5, &[])),                  // fork: A -> D
        Op::Checkpoint { node: 1, notes: 1 }, // C -> E (checkpoint)
        Op::ReplayCheckpoint { checkpoint: 0 },
        Op::SecondWriter {
            node: 0,
            checkpoint: false,
        },
        Op::SecondWriter {
            node: 0,
            checkpoint: true,
        },
        Op::Restart,
        adv(0, out(6, &[])),             // E -> F: decide, iteration 1
        adv(0, out(7, &[LoopContinue])), // continue at the last iteration: loop limit
        adv(0, out(7, &[LoopStop])),     // F -> G: verify
        adv(0, out(8, &[])),             // no report: blocked
        adv(0, out(8, &[Verification])), // G -> H: wrap
        adv(0, out(9, &[Note(1)])),      // H -> I: complete
        Op::Rehydrate { node: 0 },
        Op::Checkpoint { node: 0, notes: 2 }, // a checkpoint after completion
        Op::Start {
            prefs: Some(PrefSpec::Autonomy(2)),
        }, // never-stop
        adv(0, out(1, &[])),
        adv(0, out(1, &[])), // decide
        Op::Advance {
            node: 0,
            output: out(1, &[]),
            prefs: Some(PrefSpec::Autonomy(0)),
        }, // guided ack: blocked, and guided stays recorded on the node (D43)
        adv(0, out(1, &[])), // still guided: blocked again
        Op::Advance {
            node: 0,
            output: out(1, &[]),
            prefs: Some(PrefSpec::Both(2, 2)),
        }, // never-stop + aggressive: a gap, the loop exits, and a preference warning
        Op::ReplayAck {
            ack: 0,
            other_output: false,
        },
    ];
    let stats = run(&ops, 1);
    assert!(
        stats.advanced == 11
            && stats.blocked >= 6
            && stats.forks >= 1
            && stats.completed >= 1
            && stats.replays == 2
            && stats.checkpoints == 2
            && stats.checkpoint_replays == 1
            && stats.writer_busy == 2
            && stats.with_preferences == 2
            && stats.skipped == 0,
        "the walk did not reach every state it is written for: {stats:?}"
    );
}

/// lock: L-TOKEN-REHYDRATE-PURE, L-TOKEN-ACK-IDEMPOTENT, L-TOKEN-REPLAY-FACTS, L-DAG-NON-TIP-AUTO-FORK, L-TIP-LAST-ACTIVITY, L-STATUS-FROM-TIP, L-WRITER-BUSY, L-TOKEN-CHECKPOINT-IDEMPOTENT
#[test]
fn generated_sequences_match_the_model() {
    let stats = match check_sequences(ops::config(2), 24, InProcess::new) {
        Ok(stats) => stats,
        Err(e) => panic!("{e}"),
    };
    // The generator must reach the states the properties are about, or they hold vacuously.
    assert!(
        stats.advanced > 0
            && stats.blocked > 0
            && stats.forks > 0
            && stats.replays > 0
            && stats.checkpoints > 0
            && stats.writer_busy > 0
            && stats.with_preferences > 0
            && stats.restarts > 0,
        "the generated sequences missed a kind of command: {stats:?}"
    );
}

/// Preferences sent with acks (D43), on both sides: a blocked ack records its change on the
/// attempted node (and its warning above the recommendation), its replay is byte-identical, the
/// retry and the child inherit the change, and a later change on a node with children leaves
/// those children alone.
/// lock: L-PREF-NODE-ATTACHED, L-PREF-WARNINGS
#[test]
fn preferences_sent_with_acks_match_the_model() {
    use ArtifactSpec::*;
    use workrail_model::NodeRef;
    use workrail_spec::closed::{Autonomy, RiskPolicy};
    use workrail_spec::event::{EffectivePreferences, EventData};
    let ops = vec![
        Op::Start { prefs: None },
        adv(0, out(1, &[])), // R -> A
        adv(0, out(2, &[])), // A -> B (decide)
        Op::Advance {
            node: 0,
            output: out(3, &[]),
            prefs: Some(PrefSpec::Risk(2)),
        }, // no decision, aggressive: blocked, recorded on B with a warning
        Op::ReplayAck {
            ack: 2,
            other_output: true,
        },
        adv(0, out(4, &[LoopStop])), // B -> C (verify), inherits aggressive
        Op::Advance {
            node: 1,
            output: out(5, &[]),
            prefs: Some(PrefSpec::Autonomy(2)),
        }, // fork from B in never-stop: a gap, B -> D, a new warning on D
        Op::Advance {
            node: 2,
            output: out(6, &[]),
            prefs: Some(PrefSpec::Risk(0)),
        }, // back on B, guided + conservative: blocked, C and D keep theirs
        Op::Restart,
        Op::Rehydrate { node: 0 },
        Op::Rehydrate { node: 1 },
    ];
    let mut h = Harness::new(InProcess::new(3));
    if let Err(e) = h.run(&ops) {
        panic!("{e}");
    }
    let w = &h.world;
    assert!(
        w.stats.with_preferences == 3
            && w.stats.blocked == 2
            && w.stats.forks == 1
            && w.stats.replays == 1
            && w.stats.skipped == 0,
        "{:?}",
        w.stats
    );
    let at = |i: usize| NodeRef {
        session_id: w.runs[0].model_session.clone(),
        run_id: w.runs[0].model_run.clone(),
        node_id: w.nodes[i].model.clone(),
    };
    let prefs = |i: usize| w.model.effective_preferences(&at(i)).unwrap();
    let p = |autonomy, risk_policy| EffectivePreferences {
        autonomy,
        risk_policy,
    };
    // Nodes in order: R, A, B, C, D.
    assert_eq!(
        prefs(2),
        p(Autonomy::Guided, RiskPolicy::Conservative),
        "B, last changed"
    );
    assert_eq!(
        prefs(3),
        p(Autonomy::Guided, RiskPolicy::Aggressive),
        "C kept its snapshot"
    );
    assert_eq!(
        prefs(4),
        p(Autonomy::FullAutoNeverStop, RiskPolicy::Aggressive),
        "D too"
    );
    // Both blocked plans hold the change on B, right before nothing but B's own records.
    let events = w.model.events(&w.runs[0].model_session).unwrap();
    let changes_on_b = events
        .iter()
        .filter(|e| {
            e.scope().node_id() == Some(&w.nodes[2].model)
                && matches!(e.data(), EventData::PreferencesChanged(_))
        })
        .count();
    assert_eq!(changes_on_b, 2);
}

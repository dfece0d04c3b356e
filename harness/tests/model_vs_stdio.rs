//! The model against the built `workrail mcp` server over stdio: the same generated command
//! sequences and checks as `model_vs_inprocess.rs` (one suite, compiled per implementation),
//! spoken as newline-delimited JSON-RPC to a server with a temporary `WORKRAIL_DATA_DIR` and
//! `WORKRAIL_WORKFLOW_DIRS`; restarts are new server processes, the second writer is an OS lock
//! taken by the test process, and "nothing was written" is a byte fingerprint of the data
//! directory. Fewer cases: every case spawns processes.
//!
//! Guards against drift between the use-cases and what an agent actually sees through the MCP
//! server (argument parsing, result mapping, text-first rendering, process restarts, OS locks).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use workrail_harness::driver::check_sequences;
use workrail_harness::fixture::{ArtifactSpec, OutputSpec};
use workrail_harness::ops::{self, Op};
use workrail_harness::{Harness, Stdio};

fn adv(node: u8, artifacts: &[ArtifactSpec]) -> Op {
    Op::Advance {
        node,
        output: OutputSpec {
            notes: Some(1),
            artifacts: artifacts.to_vec(),
            context: None,
        },
        prefs: None,
    }
}

/// lock: L-TOKEN-REHYDRATE-PURE, L-TOKEN-ACK-IDEMPOTENT, L-DAG-NON-TIP-AUTO-FORK, L-WRITER-BUSY, L-TOKEN-CHECKPOINT-IDEMPOTENT
#[test]
fn a_walk_over_stdio_matches_the_model() {
    use ArtifactSpec::*;
    let ops = vec![
        Op::Start { prefs: None },
        adv(0, &[]),
        adv(0, &[]),
        adv(0, &[]), // blocked: no loop control
        adv(0, &[LoopStop]),
        Op::ReplayAck {
            ack: 0,
            other_output: true,
        },
        Op::Rehydrate { node: 2 },
        adv(2, &[]), // fork
        Op::Checkpoint { node: 0, notes: 1 },
        Op::ReplayCheckpoint { checkpoint: 0 },
        Op::SecondWriter {
            node: 0,
            checkpoint: false,
        },
        Op::Restart,
        Op::ReplayAck {
            ack: 1,
            other_output: false,
        },
        adv(0, &[]),
    ];
    let mut h = Harness::new(Stdio::new());
    if let Err(e) = h.run(&ops) {
        panic!("{e}");
    }
    let stats = &h.world.stats;
    assert!(
        stats.forks == 1 && stats.blocked == 2 && stats.writer_busy == 1 && stats.replays == 2,
        "{stats:?}"
    );
}

/// lock: L-TOKEN-REHYDRATE-PURE, L-TOKEN-ACK-IDEMPOTENT, L-TOKEN-REPLAY-FACTS, L-DAG-NON-TIP-AUTO-FORK, L-TIP-LAST-ACTIVITY, L-STATUS-FROM-TIP, L-WRITER-BUSY
#[test]
fn generated_sequences_over_stdio_match_the_model() {
    let stats = match check_sequences(ops::config(8), 16, |_| Stdio::new()) {
        Ok(stats) => stats,
        Err(e) => panic!("{e}"),
    };
    assert!(
        stats.advanced > 0 && stats.replays + stats.blocked + stats.forks > 0,
        "{stats:?}"
    );
}

proptest::proptest! {
    #![proptest_config(ops::config(16))]

    /// Generated workflows (`workrail_harness::generated`) served from a workflow file by the
    /// real server: the same comparison as `model_vs_generated.rs`, through what an agent sees.
    #[test]
    fn generated_workflows_over_stdio_match_the_model(
        json in workrail_harness::generated::workflow_json(),
        ops in ops::ops_strategy(16),
    ) {
        use workrail_harness::generated::{GENERATED_FILE, GENERATED_ID, WorkflowUnderTest};
        let workflow = WorkflowUnderTest::compile(GENERATED_ID, GENERATED_FILE, &json)
            .map_err(proptest::test_runner::TestCaseError::fail)?;
        let sys = Stdio::with_workflows(&[(GENERATED_FILE, json.as_str())]);
        let mut h = Harness::with_workflow(sys, std::sync::Arc::new(workflow));
        h.run(&ops).map_err(|e| {
            proptest::test_runner::TestCaseError::fail(format!("{e}\nworkflow: {json}"))
        })?;
    }
}

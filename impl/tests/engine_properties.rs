//! Property test of loop control against a small reference model: for any `maxIterations`, any
//! script of agent decisions (continue, stop, missing, invalid) and any autonomy, the engine
//! visits exactly the step instances the model predicts, never starts an iteration at or past
//! `maxIterations`, leaves the state untouched whenever it blocks, and reports one gap per
//! never-stop failure.
//!
//! Guards against off-by-one loop bounds and against missing/invalid control output ever being
//! read as an implicit exit in blocking modes. Cases: `WORKRAIL_PROPTEST_CASES` (default 64).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use proptest::sample::select;
use serde_json::json;
use workrail::compiler::{CompileContext, compile};
use workrail::engine::{self, AdvanceOutcome};
use workrail_spec::closed::{Autonomy, DecisionTraceKind};
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::snapshot::{EngineState, Pending};
use workrail_spec::tools::OutputInput;

fn config() -> ProptestConfig {
    let cases = std::env::var("WORKRAIL_PROPTEST_CASES")
        .ok()
        .map(|raw| {
            raw.trim().parse::<u32>().unwrap_or_else(|_| {
                panic!("WORKRAIL_PROPTEST_CASES must be an unsigned integer, got {raw:?}")
            })
        })
        .unwrap_or(64);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Say {
    Continue,
    Stop,
    Missing,
    Invalid,
}

fn workflow(max: u32) -> CompiledWorkflowSnapshotV1 {
    let src = json!({
        "id": "project.prop", "name": "Prop", "description": "Loop property.",
        "conditions": [{"id": "go", "kind": "loop_control", "continueWhen": "continue"}],
        "steps": [
            {"type": "loop", "loopId": "pass", "while": {"kind": "condition_ref", "conditionId": "go"}, "maxIterations": max, "body": [
                {"id": "work", "title": "Work", "prompt": "Work."},
                {"id": "decide", "title": "Decide", "prompt": "Decide.", "output": {"contractRef": "wr.contracts.loop_control"}}
            ]},
            {"id": "after", "title": "After", "prompt": "Done."}
        ]
    });
    compile(&src, &CompileContext::load("project"))
        .unwrap()
        .snapshot
}

fn output(say: Say) -> OutputInput {
    let artifact = match say {
        Say::Continue => {
            json!({"kind": "wr.loop_control", "loopId": "pass", "decision": "continue"})
        }
        Say::Stop => json!({"kind": "wr.loop_control", "loopId": "pass", "decision": "stop"}),
        Say::Invalid => json!({"kind": "wr.loop_control", "loopId": "pass", "decision": "perhaps"}),
        Say::Missing => return OutputInput::default(),
    };
    OutputInput {
        notes_markdown: None,
        artifacts: vec![artifact.as_object().unwrap().clone()],
    }
}

fn key(state: &EngineState) -> String {
    match state {
        EngineState::Running {
            pending: Pending::Some { step },
            ..
        } => step.instance_key().to_string(),
        EngineState::Complete => "complete".into(),
        other => panic!("{other:?}"),
    }
}

/// The reference: visited instance keys, blocked attempts, recorded gaps.
fn model(max: u32, script: &[Say], blocking: bool) -> (Vec<String>, usize, usize) {
    let mut visited = vec!["pass@0::work".to_owned(), "pass@0::decide".to_owned()];
    let (mut blocked, mut gaps, mut i) = (0, 0, 0);
    let mut exited = false;
    for say in script {
        match say {
            Say::Stop => exited = true,
            Say::Missing | Say::Invalid if blocking => blocked += 1,
            Say::Missing | Say::Invalid => {
                gaps += 1;
                exited = true;
            }
            Say::Continue if i + 1 < max => {
                i += 1;
                visited.push(format!("pass@{i}::work"));
                visited.push(format!("pass@{i}::decide"));
            }
            Say::Continue if blocking => blocked += 1,
            Say::Continue => {
                gaps += 1;
                exited = true;
            }
        }
        if exited {
            break;
        }
    }
    visited.push("after".into());
    (visited, blocked, gaps)
}

proptest! {
    #![proptest_config(config())]

    /// lock: L-LOOP-MAX-ITERATIONS, L-LOOP-INCREMENT, L-LOOP-LIMIT-ERROR, L-LOOP-MISSING-CONTROL-BLOCKING, L-LOOP-MISSING-CONTROL-NEVER-STOP, L-LOOP-TERMINATION-REASON, L-TRACE-LOOP-EXITED
    #[test]
    fn loop_control_matches_the_reference_model(
        max in 1u32..6,
        script in proptest::collection::vec(select(&[Say::Continue, Say::Stop, Say::Missing, Say::Invalid][..]), 0..12),
        autonomy in select(Autonomy::ALL),
    ) {
        let c = workflow(max);
        let blocking = autonomy.is_blocking();
        let (expected, expected_blocked, expected_gaps) = model(max, &script, blocking);
        let mut state = engine::start(&c, &EngineState::Init).unwrap().state;
        let mut visited = vec![key(&state)];
        let (mut blocked, mut gaps, mut exits) = (0, 0, 0);
        let mut script = script.into_iter();
        while key(&state) != "after" {
            let say = if key(&state).ends_with("::work") { None } else { Some(script.next().unwrap_or(Say::Stop)) };
            let out = say.map_or_else(OutputInput::default, output);
            match engine::advance(&c, &state, &out, autonomy).unwrap() {
                AdvanceOutcome::Blocked(b) => {
                    prop_assert!(blocking, "never-stop must not block");
                    prop_assert!(b.blocker_report().is_ok());
                    blocked += 1;
                }
                AdvanceOutcome::Advanced(t) | AdvanceOutcome::Complete(t) => {
                    let EngineState::Running { loop_stack, .. } = &t.state else { panic!() };
                    prop_assert!(loop_stack.iter().all(|f| f.iteration < max));
                    gaps += t.gaps.len();
                    exits += t.trace.iter().filter(|e| e.kind == DecisionTraceKind::ExitedLoop).count();
                    state = t.state;
                    visited.push(key(&state));
                }
            }
        }
        prop_assert_eq!(visited, expected);
        prop_assert_eq!(blocked, expected_blocked);
        prop_assert_eq!(gaps, expected_gaps);
        prop_assert_eq!(exits, 1);
    }
}

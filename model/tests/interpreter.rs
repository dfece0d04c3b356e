//! The model's interpreter over compiled workflows: pending-step selection, loops, conditions,
//! loop control and required outputs.
//!
//! Guards against the classic loop bugs the locks were written to prevent: off-by-one
//! iterations (1-based indices, `maxIterations` read as a max index), an iteration counter bumped
//! mid-body, a missing or malformed `wr.loop_control` silently ending the loop, a `continue` past
//! the limit silently stopping (or spinning), and a step's required output going unchecked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::json;
use workrail_model::interpreter::{self, Finding, Progress};
use workrail_spec::blocker::BlockerPointer;
use workrail_spec::closed::{Autonomy, GapSeverity};
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::reason::{ContractViolationReason, GapReason, UnexpectedReason};
use workrail_spec::snapshot::EngineState;
use workrail_spec::tools::OutputInput;

const GUIDED_MODE: Autonomy = Autonomy::Guided;
const NEVER: Autonomy = Autonomy::FullAutoNeverStop;

fn moved(progress: Progress) -> (EngineState, Vec<(Finding, GapSeverity)>) {
    match progress {
        Progress::Moved {
            state, disclosed, ..
        } => (state, disclosed),
        Progress::Blocked { blocker, .. } => panic!("unexpectedly blocked: {blocker:?}"),
    }
}

/// The pending step as its StepInstanceKey (`loop@i/...::step`), or `complete`.
fn key(state: &EngineState) -> String {
    match state.pending_step() {
        Some(step) => step.instance_key().to_string(),
        None if state.is_complete() => "complete".into(),
        None => "no pending step".into(),
    }
}

/// Acks the pending step with `output` and expects to move on.
fn next(
    wf: &CompiledWorkflowSnapshotV1,
    state: &EngineState,
    output: &OutputInput,
    mode: Autonomy,
) -> EngineState {
    let (state, disclosed) = moved(interpreter::ack(wf, state, output, mode).unwrap());
    assert!(disclosed.is_empty(), "unexpected gaps: {disclosed:?}");
    state
}

fn reason(finding: &Finding) -> GapReason {
    finding.reason.gap_reason()
}

const MISSING: GapReason =
    GapReason::ContractViolation(ContractViolationReason::MissingRequiredOutput);
const INVALID: GapReason =
    GapReason::ContractViolation(ContractViolationReason::InvalidRequiredOutput);
const LIMIT: GapReason = GapReason::Unexpected(UnexpectedReason::InvariantViolation);

fn loop_contract() -> BlockerPointer {
    BlockerPointer::OutputContract {
        contract_ref: "wr.contracts.loop_control".into(),
    }
}

#[test]
fn a_sequence_runs_in_order_then_completes() {
    let wf = linear();
    let (mut state, _) = moved(interpreter::start(&wf, GUIDED_MODE).unwrap());
    let mut seen = vec![key(&state)];
    while !state.is_complete() {
        state = next(&wf, &state, &no_output(), GUIDED_MODE);
        seen.push(key(&state));
    }
    assert_eq!(seen, ["a", "b", "c", "complete"]);
    assert_eq!(
        interpreter::ack(&wf, &state, &no_output(), GUIDED_MODE),
        Err(interpreter::InterpreterError::NothingPending)
    );
}

/// lock: L-LOOP-ITERATION-ZERO-BASED, L-LOOP-INCREMENT, L-LOOP-CONTINUE-RULE, L-LOOP-CONTROL-ARTIFACT
#[test]
fn loop_control_iterations_are_zero_based_and_increment_only_between_iterations() {
    let wf = looping(3);
    let (mut state, _) = moved(interpreter::start(&wf, GUIDED_MODE).unwrap());
    let mut seen = vec![key(&state)];
    let decisions = ["continue", "continue", "stop"];
    let mut decision = decisions.iter();
    while !state.is_complete() {
        let output = match state.pending_step().unwrap().step_id.as_str() {
            "decide" => loop_decision("pass", decision.next().unwrap()),
            _ => no_output(),
        };
        state = next(&wf, &state, &output, GUIDED_MODE);
        seen.push(key(&state));
    }
    assert_eq!(
        seen,
        [
            "intro",
            "pass@0::work",
            "pass@0::decide",
            "pass@1::work",
            "pass@1::decide",
            "pass@2::work",
            "pass@2::decide",
            "outro",
            "complete"
        ]
    );
}

/// lock: L-LOOP-MAX-ITERATIONS, L-LOOP-LIMIT-ERROR, L-LOOP-TERMINATION-REASON
#[test]
fn continuing_at_the_last_allowed_iteration_fails_as_data() {
    let wf = looping(2);
    let (mut state, _) = moved(interpreter::start(&wf, GUIDED_MODE).unwrap());
    for output in [
        no_output(),
        no_output(),
        loop_decision("pass", "continue"),
        no_output(),
    ] {
        state = next(&wf, &state, &output, GUIDED_MODE);
    }
    assert_eq!(key(&state), "pass@1::decide");
    // Blocking mode: a typed INVARIANT_VIOLATION blocker naming loop, iteration and max, plus
    // the critical gap the reason table always records for `unexpected:*`.
    match interpreter::ack(&wf, &state, &loop_decision("pass", "continue"), GUIDED_MODE).unwrap() {
        Progress::Blocked { blocker, gaps, .. } => {
            assert_eq!(reason(&blocker), LIMIT);
            assert_eq!(
                blocker.pointer,
                BlockerPointer::WorkflowStep {
                    step_id: step_id("decide")
                }
            );
            assert!(
                blocker
                    .message
                    .contains("loopId=pass iteration=1 maxIterations=2"),
                "{}",
                blocker.message
            );
            assert_eq!(gaps, vec![(blocker.clone(), GapSeverity::Critical)]);
        }
        other => panic!("expected blocked, got {other:?}"),
    }
    // Never-stop: a critical unexpected gap, and the loop stops (never a silent stop).
    let (after, gaps) =
        moved(interpreter::ack(&wf, &state, &loop_decision("pass", "continue"), NEVER).unwrap());
    assert_eq!(key(&after), "outro");
    assert_eq!(gaps.len(), 1);
    assert_eq!(
        (reason(&gaps[0].0), gaps[0].1),
        (LIMIT, GapSeverity::Critical)
    );
    // `stop` at the last iteration is the normal exit.
    let stopped = next(&wf, &state, &loop_decision("pass", "stop"), GUIDED_MODE);
    assert_eq!(key(&stopped), "outro");
}

/// lock: L-LOOP-MISSING-CONTROL-BLOCKING, L-LOOP-MISSING-CONTROL-NEVER-STOP, L-LOOP-CONTRACT-CONTROL
#[test]
fn missing_or_invalid_loop_control_never_exits_the_loop_implicitly() {
    let wf = looping(3);
    let (mut state, _) = moved(interpreter::start(&wf, GUIDED_MODE).unwrap());
    state = next(&wf, &state, &no_output(), GUIDED_MODE);
    state = next(&wf, &state, &no_output(), GUIDED_MODE);
    assert_eq!(key(&state), "pass@0::decide");
    let bad_decision = loop_decision("pass", "maybe");
    let wrong_loop = loop_decision("other", "stop");
    let extra_field = OutputInput {
        notes_markdown: None,
        artifacts: vec![artifact(
            json!({"kind": "wr.loop_control", "loopId": "pass", "decision": "stop", "why": 1}),
        )],
    };
    let long_summary = OutputInput {
        notes_markdown: None,
        artifacts: vec![artifact(
            json!({"kind": "wr.loop_control", "loopId": "pass", "decision": "stop", "summary": "x".repeat(513)}),
        )],
    };
    for (output, expected) in [
        (no_output(), MISSING),
        (bad_decision, INVALID),
        (wrong_loop, INVALID), // D45: a decision for another loop is an invalid output
        (extra_field, INVALID),
        (long_summary, INVALID),
    ] {
        match interpreter::ack(&wf, &state, &output, GUIDED_MODE).unwrap() {
            Progress::Blocked { blocker, gaps, .. } => {
                assert_eq!(reason(&blocker), expected, "{output:?}");
                assert_eq!(blocker.pointer, loop_contract());
                assert!(gaps.is_empty(), "contract violations block without a gap");
            }
            other => panic!("expected blocked for {output:?}, got {other:?}"),
        }
        // Never-stop: one critical contract_violation gap, then treated as `stop`.
        let (after, gaps) = moved(interpreter::ack(&wf, &state, &output, NEVER).unwrap());
        assert_eq!(key(&after), "outro");
        assert_eq!(gaps.len(), 1, "{gaps:?}");
        assert_eq!(
            (reason(&gaps[0].0), gaps[0].1),
            (expected, GapSeverity::Critical)
        );
    }
    // The last artifact naming the loop decides.
    let two = OutputInput {
        notes_markdown: None,
        artifacts: vec![
            artifact(json!({"kind": "wr.loop_control", "loopId": "pass", "decision": "stop"})),
            artifact(json!({"kind": "wr.loop_control", "loopId": "pass", "decision": "continue"})),
        ],
    };
    assert_eq!(key(&next(&wf, &state, &two, GUIDED_MODE)), "pass@1::work");
    // D45: a bad one is never skipped over, even before a valid last one.
    let bad_then_good = OutputInput {
        notes_markdown: None,
        artifacts: vec![
            artifact(json!({"kind": "wr.loop_control", "loopId": "other", "decision": "stop"})),
            artifact(json!({"kind": "wr.loop_control", "loopId": "pass", "decision": "continue"})),
        ],
    };
    match interpreter::ack(&wf, &state, &bad_then_good, GUIDED_MODE).unwrap() {
        Progress::Blocked { blocker, .. } => assert_eq!(reason(&blocker), INVALID),
        other => panic!("expected blocked, got {other:?}"),
    }
}

/// lock: L-LOOP-TERMINATION-REASON, L-LOOP-MAX-ITERATIONS
#[test]
fn always_false_loops_run_zero_times_and_always_true_loops_end_at_the_limit() {
    let wf = workflow(
        vec![
            compiled_step("x", None),
            compiled_step("y", None),
            compiled_step("z", None),
        ],
        vec![l("skipped"), l("spin"), s("z")],
        vec![
            compiled_loop("skipped", "never", 5, vec![s("x")]),
            compiled_loop("spin", "always", 2, vec![s("y")]),
        ],
    );
    let (state, _) = moved(interpreter::start(&wf, GUIDED_MODE).unwrap());
    assert_eq!(key(&state), "spin@0::y");
    let state = next(&wf, &state, &no_output(), GUIDED_MODE);
    assert_eq!(key(&state), "spin@1::y");
    // A fixed `always_true` loop is a bounded repeat: its last iteration ends it with "max
    // iterations reached", in every mode, with nothing to report (D73). Only an explicit
    // `continue` decision at the limit is the loop-limit failure.
    for mode in [GUIDED_MODE, NEVER] {
        let (after, gaps) = moved(interpreter::ack(&wf, &state, &no_output(), mode).unwrap());
        assert_eq!((key(&after), gaps.len()), ("z".to_owned(), 0));
    }
}

/// lock: L-LOOP-ITERATION-ZERO-BASED, L-LOOP-BODY-INDEX
#[test]
fn nested_loops_keep_one_frame_each_with_its_body_index() {
    let wf = workflow(
        vec![
            compiled_step("w", None),
            compiled_step("inner_done", None),
            compiled_step("outer_done", None),
        ],
        vec![l("outer")],
        vec![
            compiled_loop("outer", "ctl", 2, vec![l("inner"), s("outer_done")]),
            compiled_loop("inner", "ctl", 2, vec![s("w"), s("inner_done")]),
        ],
    );
    let (mut state, _) = moved(interpreter::start(&wf, GUIDED_MODE).unwrap());
    let mut seen = vec![key(&state)];
    let script = [
        no_output(),                        // w
        loop_decision("inner", "continue"), // inner_done@0
        no_output(),                        // w
        loop_decision("inner", "stop"),     // inner_done@1
        loop_decision("outer", "continue"), // outer_done@0
        no_output(),                        // w
        loop_decision("inner", "stop"),     // inner_done@0 of outer@1
    ];
    for output in &script {
        state = next(&wf, &state, output, GUIDED_MODE);
        seen.push(key(&state));
    }
    assert_eq!(
        seen,
        [
            "outer@0/inner@0::w",
            "outer@0/inner@0::inner_done",
            "outer@0/inner@1::w",
            "outer@0/inner@1::inner_done",
            "outer@0::outer_done",
            "outer@1/inner@0::w",
            "outer@1/inner@0::inner_done",
            "outer@1::outer_done",
        ]
    );
    let EngineState::Running { loop_stack, .. } = &state else {
        panic!()
    };
    assert_eq!(loop_stack.len(), 1);
    assert_eq!((loop_stack[0].iteration, loop_stack[0].body_index), (1, 1));
    // Both loops end in one ack when each gets its decision.
    let inner_last = {
        let mut s = state.clone();
        s = next(&wf, &s, &loop_decision("outer", "stop"), GUIDED_MODE);
        s
    };
    assert_eq!(key(&inner_last), "complete");
}

/// lock: L-REASON-BLOCKING-MODES, L-REASON-NEVER-STOP
#[test]
fn a_missing_required_output_blocks_in_blocking_modes_and_is_a_gap_in_never_stop() {
    let wf = workflow(
        vec![
            compiled_step("report", Some("wr.contracts.findings")),
            compiled_step("after", None),
        ],
        vec![s("report"), s("after")],
        vec![],
    );
    let (state, _) = moved(interpreter::start(&wf, GUIDED_MODE).unwrap());
    for mode in [Autonomy::Guided, Autonomy::FullAutoStopOnUserDeps] {
        match interpreter::ack(&wf, &state, &notes("done"), mode).unwrap() {
            Progress::Blocked { blocker, gaps, .. } => {
                assert_eq!(reason(&blocker), MISSING);
                assert_eq!(
                    blocker.pointer,
                    BlockerPointer::OutputContract {
                        contract_ref: "wr.contracts.findings".into()
                    }
                );
                assert!(gaps.is_empty());
            }
            other => panic!("expected blocked, got {other:?}"),
        }
    }
    let (after, gaps) = moved(interpreter::ack(&wf, &state, &notes("done"), NEVER).unwrap());
    assert_eq!(key(&after), "after");
    assert_eq!(
        (reason(&gaps[0].0), gaps[0].1),
        (MISSING, GapSeverity::Critical)
    );
    let with_artifact = OutputInput {
        notes_markdown: None,
        artifacts: vec![artifact(json!({"kind": "wr.findings", "items": []}))],
    };
    assert_eq!(
        key(&next(&wf, &state, &with_artifact, GUIDED_MODE)),
        "after"
    );
}

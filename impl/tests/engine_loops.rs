//! Loop semantics of the interpreter exactly as locked: 0-based iterations, `maxIterations` as a
//! count, increments only when the next iteration starts, exactly one termination reason, the
//! loop-limit failure as data, 0-iteration loops, nested loops, and complete decision traces.
//!
//! Guards against the off-by-one class (a loop that runs maxIterations+1 times or stops one
//! early), silent loop skips, and pending/loop-stack disagreement in snapshots.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Map, Value, json};
use workrail::compiler::{CompileContext, compile};
use workrail::engine::{self, AdvanceOutcome, EngineError, FindingDetail, Transition};
use workrail_spec::blocker::{BlockerCode, BlockerPointer};
use workrail_spec::closed::{Autonomy, DecisionTraceKind, GapSeverity};
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::event::TraceRef;
use workrail_spec::ids::TraceId;
use workrail_spec::skey::StepInstanceKey;
use workrail_spec::snapshot::{EngineState, Pending};
use workrail_spec::tools::OutputInput;

const GUIDED: Autonomy = Autonomy::Guided;
const NEVER_STOP: Autonomy = Autonomy::FullAutoNeverStop;

fn compiled(steps: Value, conditions: Value) -> CompiledWorkflowSnapshotV1 {
    let src = json!({"id": "project.loops", "name": "Loops", "description": "Loop semantics.", "conditions": conditions, "steps": steps});
    compile(&src, &CompileContext::load("project"))
        .unwrap_or_else(|e| panic!("{e}"))
        .snapshot
}

fn step(id: &str) -> Value {
    json!({"id": id, "title": id, "prompt": format!("Do {id}.")})
}

fn decide(id: &str) -> Value {
    json!({"id": id, "title": id, "prompt": "Decide.", "output": {"contractRef": "wr.contracts.loop_control"}})
}

fn lp(loop_id: &str, condition: &str, max: u32, body: Value) -> Value {
    json!({"type": "loop", "loopId": loop_id, "while": {"kind": "condition_ref", "conditionId": condition}, "maxIterations": max, "body": body})
}

fn control(loop_id: &str, decision: &str) -> OutputInput {
    let artifact: Map<String, Value> = json!({"kind": "wr.loop_control", "loopId": loop_id, "decision": decision, "summary": "why"})
        .as_object()
        .unwrap()
        .clone();
    OutputInput {
        notes_markdown: None,
        artifacts: vec![artifact],
    }
}

fn none() -> OutputInput {
    OutputInput::default()
}

/// The pending step's instance key, or "complete".
fn at(state: &EngineState) -> String {
    match state {
        EngineState::Complete => "complete".into(),
        EngineState::Running {
            pending: Pending::Some { step },
            ..
        } => step.instance_key().to_string(),
        other => panic!("unexpected state {other:?}"),
    }
}

fn transition(outcome: AdvanceOutcome) -> Transition {
    match outcome {
        AdvanceOutcome::Advanced(t) | AdvanceOutcome::Complete(t) => t,
        AdvanceOutcome::Blocked(b) => panic!("unexpectedly blocked: {b:?}"),
    }
}

fn ack(
    c: &CompiledWorkflowSnapshotV1,
    state: &EngineState,
    output: OutputInput,
    autonomy: Autonomy,
) -> Transition {
    transition(engine::advance(c, state, &output, autonomy).unwrap())
}

fn kinds(t: &Transition) -> Vec<DecisionTraceKind> {
    t.trace.iter().map(|e| e.kind).collect()
}

fn control_loop(max: u32) -> CompiledWorkflowSnapshotV1 {
    compiled(
        json!([
            lp("pass", "go", max, json!([step("work"), decide("decide")])),
            step("after")
        ]),
        json!([{"id": "go", "kind": "loop_control", "continueWhen": "continue"}]),
    )
}

/// lock: L-LOOP-ITERATION-ZERO-BASED, L-LOOP-INCREMENT, L-SNAPSHOT-LOOPPATH-MATCHES-STACK
#[test]
fn iterations_are_zero_based_and_increment_only_when_the_next_iteration_starts() {
    let c = control_loop(3);
    let t = engine::start(&c, &EngineState::Init).unwrap();
    assert_eq!(at(&t.state), "pass@0::work");
    let t = ack(&c, &t.state, none(), GUIDED);
    // Mid-body: still iteration 0.
    assert_eq!(at(&t.state), "pass@0::decide");
    let EngineState::Running {
        loop_stack,
        pending: Pending::Some { step },
        ..
    } = &t.state
    else {
        panic!()
    };
    assert_eq!(loop_stack.len(), 1);
    assert_eq!((loop_stack[0].iteration, loop_stack[0].body_index), (0, 1));
    assert_eq!(step.loop_path[0].iteration, loop_stack[0].iteration);
    let t = ack(&c, &t.state, control("pass", "continue"), GUIDED);
    assert_eq!(at(&t.state), "pass@1::work");
    let t = ack(&c, &t.state, none(), GUIDED);
    let t = ack(&c, &t.state, control("pass", "stop"), GUIDED);
    assert_eq!(at(&t.state), "after");
    let EngineState::Running {
        completed,
        loop_stack,
        ..
    } = &t.state
    else {
        panic!()
    };
    assert!(loop_stack.is_empty());
    // Both iterations ended, so their instances left the completed set (D62).
    assert!(completed.is_empty(), "{completed:?}");
}

/// The completed step instances of the snapshot, as canonical keys.
fn completed_keys(state: &EngineState) -> Vec<String> {
    match state {
        EngineState::Running { completed, .. } => {
            completed.keys().iter().map(ToString::to_string).collect()
        }
        _ => Vec::new(),
    }
}

/// Decision D62: the completed set holds the instances of the iterations still running and of
/// the steps outside loops; an iteration's instances leave it when the iteration ends (the next
/// iteration starts or the loop exits), so a snapshot's size does not grow with the iteration
/// count.
#[test]
fn an_ended_iteration_leaves_the_completed_set_so_snapshots_stay_bounded() {
    let c = compiled(
        json!([
            step("first"),
            lp("pass", "go", 500, json!([step("work"), decide("decide")])),
            step("after")
        ]),
        json!([{"id": "go", "kind": "loop_control", "continueWhen": "continue"}]),
    );
    let t = engine::start(&c, &EngineState::Init).unwrap();
    let mut t = ack(&c, &t.state, none(), GUIDED);
    assert_eq!(completed_keys(&t.state), ["first"]);
    let mut sizes = Vec::new();
    for iteration in 0..499 {
        assert_eq!(at(&t.state), format!("pass@{iteration}::work"));
        t = ack(&c, &t.state, none(), GUIDED);
        assert_eq!(
            completed_keys(&t.state),
            ["first".to_owned(), format!("pass@{iteration}::work")]
        );
        t = ack(&c, &t.state, control("pass", "continue"), GUIDED);
        assert_eq!(completed_keys(&t.state), ["first"]);
        sizes.push(serde_json::to_vec(&t.state).unwrap().len());
    }
    // Only the iteration numbers' digits may grow (`pass@1` to `pass@499`, twice).
    let (first, largest) = (sizes[0], sizes.iter().copied().max().unwrap());
    assert!(
        largest <= first + 4,
        "a snapshot grew with the iteration count: {largest} bytes against {first}"
    );
    // A snapshot written before D62 still lists ended iterations; it advances all the same.
    let mut older = t.state.clone();
    if let EngineState::Running { completed, .. } = &mut older {
        completed.insert(StepInstanceKey::parse("pass@0::work").unwrap());
        completed.insert(StepInstanceKey::parse("pass@0::decide").unwrap());
    }
    older.check().unwrap();
    let from_older = ack(&c, &older, none(), GUIDED);
    assert_eq!(at(&from_older.state), "pass@499::decide");
    t = ack(&c, &t.state, none(), GUIDED);
    assert_eq!(from_older.trace, t.trace);
    t = ack(&c, &t.state, control("pass", "stop"), GUIDED);
    assert_eq!(at(&t.state), "after");
    assert_eq!(completed_keys(&t.state), ["first"]);
}

/// lock: L-LOOP-MAX-ITERATIONS, L-LOOP-LIMIT-ERROR, L-LOOP-TERMINATION-REASON
#[test]
fn exactly_max_iterations_run_then_a_continue_is_a_loop_limit_blocker() {
    let c = control_loop(3);
    let mut state = engine::start(&c, &EngineState::Init).unwrap().state;
    for iteration in 0..3 {
        assert_eq!(at(&state), format!("pass@{iteration}::work"));
        state = ack(&c, &state, none(), GUIDED).state;
        if iteration < 2 {
            state = ack(&c, &state, control("pass", "continue"), GUIDED).state;
        }
    }
    assert_eq!(at(&state), "pass@2::decide");
    let AdvanceOutcome::Blocked(blocked) =
        engine::advance(&c, &state, &control("pass", "continue"), GUIDED).unwrap()
    else {
        panic!("a continue at iteration maxIterations-1 must block in guided mode");
    };
    let finding = &blocked.findings[0];
    assert_eq!(finding.reason.to_string(), "unexpected:invariant_violation");
    assert_eq!(
        finding.detail,
        FindingDetail::LoopLimit {
            loop_id: "pass".parse().unwrap(),
            iteration: 2,
            max_iterations: 3,
            step_id: "decide".parse().unwrap()
        }
    );
    assert!(
        finding.message.contains("maxIterations is 3"),
        "{}",
        finding.message
    );
    assert!(
        finding.suggested_fix.contains("'stop'"),
        "{}",
        finding.suggested_fix
    );
    assert_eq!(
        finding.gap_severity(),
        Some(GapSeverity::Critical),
        "unexpected:* always records a critical gap"
    );
    let report = blocked.blocker_report().unwrap();
    assert_eq!(report.blockers()[0].code, BlockerCode::InvariantViolation);
    assert_eq!(
        report.blockers()[0].pointer,
        BlockerPointer::WorkflowStep {
            step_id: "decide".parse().unwrap()
        }
    );
    // The state did not move: stopping now is accepted.
    let t = ack(&c, &state, control("pass", "stop"), GUIDED);
    assert_eq!(at(&t.state), "after");
}

/// lock: L-LOOP-LIMIT-ERROR, L-REASON-NEVER-STOP, L-LOOP-TERMINATION-REASON
#[test]
fn in_never_stop_the_loop_limit_is_a_critical_gap_and_the_loop_ends() {
    let c = control_loop(1);
    let state = engine::start(&c, &EngineState::Init).unwrap().state;
    let state = ack(&c, &state, none(), NEVER_STOP).state;
    let t = ack(&c, &state, control("pass", "continue"), NEVER_STOP);
    assert_eq!(at(&t.state), "after");
    assert_eq!(t.gaps.len(), 1);
    assert_eq!(
        t.gaps[0].reason.to_string(),
        "unexpected:invariant_violation"
    );
    assert!(matches!(
        t.gaps[0].detail,
        FindingDetail::LoopLimit {
            iteration: 0,
            max_iterations: 1,
            ..
        }
    ));
    assert_eq!(t.gaps[0].gap_severity(), Some(GapSeverity::Critical));
    let exited = t
        .trace
        .iter()
        .find(|e| e.kind == DecisionTraceKind::ExitedLoop)
        .unwrap();
    assert!(
        exited.summary.contains("max iterations reached"),
        "{}",
        exited.summary
    );
}

/// lock: L-LOOP-MAX-ITERATIONS, L-LOOP-TERMINATION-REASON
#[test]
fn max_iterations_one_runs_the_body_once() {
    let c = control_loop(1);
    let state = engine::start(&c, &EngineState::Init).unwrap().state;
    assert_eq!(at(&state), "pass@0::work");
    let state = ack(&c, &state, none(), GUIDED).state;
    let t = ack(&c, &state, control("pass", "stop"), GUIDED);
    assert_eq!(at(&t.state), "after");
    assert_eq!(
        kinds(&t),
        [
            DecisionTraceKind::EvaluatedCondition,
            DecisionTraceKind::ExitedLoop,
            DecisionTraceKind::SelectedNextStep
        ]
    );
    assert!(
        t.trace[1]
            .summary
            .contains("after 1 iteration(s): its condition evaluated false"),
        "{}",
        t.trace[1].summary
    );
}

/// lock: L-LOOP-TERMINATION-REASON, L-LOOP-MAX-ITERATIONS
#[test]
fn a_fixed_true_condition_ends_at_max_iterations_without_failure() {
    let c = compiled(
        json!([lp("twice", "yes", 2, json!([step("x")])), step("after")]),
        json!([{"id": "yes", "kind": "always_true"}]),
    );
    let t = engine::start(&c, &EngineState::Init).unwrap();
    assert_eq!(
        kinds(&t),
        [
            DecisionTraceKind::EnteredLoop,
            DecisionTraceKind::EvaluatedCondition,
            DecisionTraceKind::SelectedNextStep
        ]
    );
    assert_eq!(at(&t.state), "twice@0::x");
    let t = ack(&c, &t.state, none(), GUIDED);
    assert_eq!(at(&t.state), "twice@1::x");
    let t = ack(&c, &t.state, none(), GUIDED);
    assert_eq!(at(&t.state), "after");
    assert!(t.gaps.is_empty());
    let exited = t
        .trace
        .iter()
        .find(|e| e.kind == DecisionTraceKind::ExitedLoop)
        .unwrap();
    assert!(
        exited
            .summary
            .contains("after 2 iteration(s): max iterations reached"),
        "{}",
        exited.summary
    );
}

/// lock: L-TRACE-LOOP-ZERO-ITERATIONS, L-TRACE-LOOP-ENTERED, L-TRACE-LOOP-CONDITION, L-TRACE-LOOP-EXITED
#[test]
fn a_zero_iteration_loop_is_traced_and_its_body_never_runs() {
    let c = compiled(
        json!([
            step("before"),
            lp("skipped", "no", 3, json!([step("body")])),
            step("after")
        ]),
        json!([{"id": "no", "kind": "always_false"}]),
    );
    let t = engine::start(&c, &EngineState::Init).unwrap();
    let t = ack(&c, &t.state, none(), GUIDED);
    assert_eq!(at(&t.state), "after");
    assert_eq!(
        kinds(&t),
        [
            DecisionTraceKind::EnteredLoop,
            DecisionTraceKind::EvaluatedCondition,
            DecisionTraceKind::ExitedLoop,
            DecisionTraceKind::SelectedNextStep
        ]
    );
    assert_eq!(
        t.trace[1].refs.as_ref().unwrap()[0],
        TraceRef::LoopId {
            loop_id: "skipped".parse().unwrap()
        }
    );
    assert!(
        t.trace[1]
            .refs
            .as_ref()
            .unwrap()
            .contains(&TraceRef::ConditionId {
                condition_id: "no".parse().unwrap()
            })
    );
    assert!(
        t.trace[2].summary.contains("after 0 iteration(s)"),
        "{}",
        t.trace[2].summary
    );
    let EngineState::Running { completed, .. } = &t.state else {
        panic!()
    };
    assert!(
        completed
            .keys()
            .iter()
            .all(|k| k.step_id.as_str() != "body")
    );
    let t = ack(&c, &t.state, none(), GUIDED);
    assert_eq!(at(&t.state), "complete");
}

/// lock: L-TRACE-LOOP-ZERO-ITERATIONS
#[test]
fn a_workflow_of_skipped_loops_completes_on_start() {
    let c = compiled(
        json!([lp("skipped", "no", 1, json!([step("body")]))]),
        json!([{"id": "no", "kind": "always_false"}]),
    );
    let t = engine::start(&c, &EngineState::Init).unwrap();
    assert_eq!(t.state, EngineState::Complete);
    assert_eq!(
        kinds(&t),
        [
            DecisionTraceKind::EnteredLoop,
            DecisionTraceKind::EvaluatedCondition,
            DecisionTraceKind::ExitedLoop
        ]
    );
}

/// lock: L-TRACE-BUDGETS, L-TRACE-TRUNCATION
#[test]
fn long_traces_are_bounded_in_order() {
    let loops: Vec<Value> = (0..10)
        .map(|i| lp(&format!("l{i}"), "no", 1, json!([step(&format!("s{i}"))])))
        .chain([step("end")])
        .collect();
    let c = compiled(
        Value::Array(loops),
        json!([{"id": "no", "kind": "always_false"}]),
    );
    let t = engine::start(&c, &EngineState::Init).unwrap();
    assert_eq!(t.trace.len(), 31);
    let event = t.trace_event(TraceId::parse("trace_abc").unwrap()).unwrap();
    assert_eq!(event.entries.len(), 25);
    assert_eq!(event.entries[..], t.trace[..25]);
}

/// lock: L-LOOP-ITERATION-ZERO-BASED, L-SKEY-FORMAT, L-SNAPSHOT-LOOP-UNIQUE
#[test]
fn nested_loops_restart_the_inner_iteration_per_outer_iteration() {
    let inner = lp("inner", "yes", 2, json!([step("x")]));
    let c = compiled(
        json!([
            lp("outer", "go", 2, json!([inner, decide("decide")])),
            step("end")
        ]),
        json!([{"id": "go", "kind": "loop_control", "continueWhen": "continue"}, {"id": "yes", "kind": "always_true"}]),
    );
    let mut t = engine::start(&c, &EngineState::Init).unwrap();
    let mut visited = vec![at(&t.state)];
    while at(&t.state) != "end" {
        let output = if at(&t.state).ends_with("::decide") {
            let outer_iteration = at(&t.state).starts_with("outer@0");
            control("outer", if outer_iteration { "continue" } else { "stop" })
        } else {
            none()
        };
        t = ack(&c, &t.state, output, GUIDED);
        t.state.check().unwrap();
        visited.push(at(&t.state));
    }
    assert_eq!(
        visited,
        [
            "outer@0/inner@0::x",
            "outer@0/inner@1::x",
            "outer@0::decide",
            "outer@1/inner@0::x",
            "outer@1/inner@1::x",
            "outer@1::decide",
            "end"
        ]
    );
}

/// Decision D62 in nested loops: an inner iteration's instances leave when that iteration
/// ends; the outer iteration's own instances stay until the outer iteration ends.
#[test]
fn nested_iterations_leave_the_completed_set_when_each_ends() {
    let inner = lp("inner", "yes", 2, json!([step("x"), step("y")]));
    let c = compiled(
        json!([
            lp(
                "outer",
                "go",
                2,
                json!([step("prep"), inner, decide("decide")])
            ),
            step("end")
        ]),
        json!([{"id": "go", "kind": "loop_control", "continueWhen": "continue"}, {"id": "yes", "kind": "always_true"}]),
    );
    let mut t = engine::start(&c, &EngineState::Init).unwrap();
    let mut held = Vec::new();
    while at(&t.state) != "end" {
        let here = at(&t.state);
        let output = if here.ends_with("::decide") {
            control(
                "outer",
                if here.starts_with("outer@0") {
                    "continue"
                } else {
                    "stop"
                },
            )
        } else {
            none()
        };
        t = ack(&c, &t.state, output, GUIDED);
        held.push(format!("{here} -> {}", completed_keys(&t.state).join(" ")));
    }
    assert_eq!(
        held,
        [
            "outer@0::prep -> outer@0::prep",
            "outer@0/inner@0::x -> outer@0/inner@0::x outer@0::prep",
            "outer@0/inner@0::y -> outer@0::prep",
            "outer@0/inner@1::x -> outer@0/inner@1::x outer@0::prep",
            "outer@0/inner@1::y -> outer@0::prep",
            "outer@0::decide -> ",
            "outer@1::prep -> outer@1::prep",
            "outer@1/inner@0::x -> outer@1/inner@0::x outer@1::prep",
            "outer@1/inner@0::y -> outer@1::prep",
            "outer@1/inner@1::x -> outer@1/inner@1::x outer@1::prep",
            "outer@1/inner@1::y -> outer@1::prep",
            "outer@1::decide -> ",
        ]
    );
}

/// lock: L-LOOP-CONTINUE-RULE
#[test]
fn continue_when_stop_inverts_the_decision() {
    let c = compiled(
        json!([
            lp("pass", "until_done", 3, json!([decide("decide")])),
            step("after")
        ]),
        json!([{"id": "until_done", "kind": "loop_control", "continueWhen": "stop"}]),
    );
    let state = engine::start(&c, &EngineState::Init).unwrap().state;
    let t = ack(&c, &state, control("pass", "stop"), GUIDED);
    assert_eq!(at(&t.state), "pass@1::decide");
    let t = ack(&c, &t.state, control("pass", "continue"), GUIDED);
    assert_eq!(at(&t.state), "after");
}

/// lock: L-TRACE-REFS, L-TRACE-LOOP-CONDITION
#[test]
fn condition_evaluations_carry_loop_condition_and_iteration_refs() {
    let c = control_loop(3);
    let state = engine::start(&c, &EngineState::Init).unwrap().state;
    let state = ack(&c, &state, none(), GUIDED).state;
    let t = ack(&c, &state, control("pass", "continue"), GUIDED);
    let evaluated = &t.trace[0];
    assert_eq!(evaluated.kind, DecisionTraceKind::EvaluatedCondition);
    assert_eq!(
        evaluated.refs.as_deref().unwrap(),
        [
            TraceRef::LoopId {
                loop_id: "pass".parse().unwrap()
            },
            TraceRef::ConditionId {
                condition_id: "go".parse().unwrap()
            },
            TraceRef::Iteration { value: 0 }
        ]
    );
    assert!(
        evaluated.summary.contains("decision 'continue'"),
        "{}",
        evaluated.summary
    );
    let selected = &t.trace[1];
    assert_eq!(selected.kind, DecisionTraceKind::SelectedNextStep);
    assert!(
        selected
            .refs
            .as_deref()
            .unwrap()
            .contains(&TraceRef::Iteration { value: 1 })
    );
}

/// lock: L-SNAPSHOT-PENDING-UNION, L-SNAPSHOT-NO-PENDING-IN-COMPLETED
#[test]
fn a_linear_workflow_runs_to_complete() {
    let c = compiled(json!([step("a"), step("b")]), json!([]));
    let t = engine::start(&c, &EngineState::Init).unwrap();
    assert_eq!(kinds(&t), [DecisionTraceKind::SelectedNextStep]);
    let t = ack(&c, &t.state, none(), GUIDED);
    assert_eq!(at(&t.state), "b");
    let outcome = engine::advance(&c, &t.state, &none(), GUIDED).unwrap();
    let AdvanceOutcome::Complete(done) = outcome else {
        panic!("expected complete")
    };
    assert_eq!(done.state, EngineState::Complete);
    assert!(done.state.pending_step().is_none());
}

/// lock: L-ERR-NO-PANIC, L-REASON-UNEXPECTED
#[test]
fn impossible_states_are_errors_not_panics() {
    let c = compiled(json!([step("a")]), json!([]));
    assert_eq!(
        engine::advance(&c, &EngineState::Init, &none(), GUIDED),
        Err(EngineError::NotStarted)
    );
    assert_eq!(
        engine::advance(&c, &EngineState::Complete, &none(), GUIDED),
        Err(EngineError::AlreadyComplete)
    );
    let running = engine::start(&c, &EngineState::Init).unwrap().state;
    assert_eq!(
        engine::start(&c, &running),
        Err(EngineError::AlreadyStarted)
    );
    // A state of another workflow (pending step unknown here).
    let other = compiled(json!([step("zzz")]), json!([]));
    let foreign = engine::start(&other, &EngineState::Init).unwrap().state;
    let err = engine::advance(&c, &foreign, &none(), GUIDED).unwrap_err();
    assert!(matches!(err, EngineError::Inconsistent(_)), "{err:?}");
    assert_eq!(err.reason().to_string(), "unexpected:invariant_violation");
}

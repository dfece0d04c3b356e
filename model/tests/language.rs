//! The model's reading of the workflow language (decision D139): `runCondition` over the run's
//! context and loop variables, the context-driven loop kinds, frozen bindings, and
//! `validationCriteria` at an ack; and, through the model's operations, which context a walk
//! reads and when it is recorded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::{Map, Value, json};
use workrail_model::interpreter::{self, Finding, Progress, Skipped};
use workrail_model::{AckAt, Command, Model, NodeRef, Observation, StartRun};
use workrail_spec::blocker::BlockerPointer;
use workrail_spec::closed::{Autonomy, WorkflowSourceKind};
use workrail_spec::compiled::{
    CompiledLoop, CompiledStep, CompiledWorkflowSnapshotV1, Condition, LoopVars, LoopWhile,
    ValidationCriterion,
};
use workrail_spec::event::EventData;
use workrail_spec::ids::NodeId;
use workrail_spec::reason::{ContractViolationReason, GapReason};
use workrail_spec::snapshot::EngineState;
use workrail_spec::tools::OutputInput;

const GUIDED_MODE: Autonomy = Autonomy::Guided;
const NEVER: Autonomy = Autonomy::FullAutoNeverStop;

fn ctx(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

fn cond(v: Value) -> Condition {
    serde_json::from_value(v).unwrap()
}

fn when(step: &str, condition: Value) -> CompiledStep {
    let mut s = compiled_step(step, None);
    s.language.run_condition = Some(cond(condition));
    s
}

fn reading(step: &str, reads: &[&str]) -> CompiledStep {
    let mut s = compiled_step(step, None);
    s.language.context_reads = reads.iter().map(|r| (*r).to_owned()).collect();
    s
}

fn context_loop(id: &str, while_: LoopWhile, max: u32, body: Vec<&str>) -> CompiledLoop {
    let for_each = matches!(while_, LoopWhile::ForEach { .. });
    CompiledLoop {
        loop_id: loop_id(id),
        while_,
        max_iterations: max,
        body: body.into_iter().map(s).collect(),
        run_condition: None,
        vars: LoopVars {
            iteration_var: Some("currentIteration".into()),
            item_var: for_each.then(|| "currentItem".into()),
            index_var: for_each.then(|| "currentIndex".into()),
        },
        kept: Default::default(),
    }
}

fn moved(progress: Progress) -> (EngineState, Vec<interpreter::Skip>) {
    match progress {
        Progress::Moved { state, skipped, .. } => (state, skipped),
        Progress::Blocked { blocker, .. } => panic!("unexpectedly blocked: {blocker:?}"),
    }
}

fn blocked(progress: Progress) -> Finding {
    match progress {
        Progress::Blocked { blocker, .. } => blocker,
        Progress::Moved { state, .. } => panic!("unexpectedly moved to {}", key(&state)),
    }
}

fn key(state: &EngineState) -> String {
    match state.pending_step() {
        Some(step) => step.instance_key().to_string(),
        None if state.is_complete() => "complete".into(),
        None => "no pending step".into(),
    }
}

/// Drives `wf` from the start with `start` context and the per-ack deltas merged in turn,
/// returning every pending position.
fn drive(wf: &CompiledWorkflowSnapshotV1, start: Value, deltas: &[Value]) -> Vec<String> {
    let mut context = ctx(start);
    let (mut state, _) = moved(interpreter::start_with(wf, GUIDED_MODE, &context).unwrap());
    let mut seen = vec![key(&state)];
    let mut deltas = deltas.iter();
    while !state.is_complete() {
        if let Some(delta) = deltas.next() {
            context = workrail_spec::context::merge_context(&context, &ctx(delta.clone())).unwrap();
        }
        let progress =
            interpreter::ack_with(wf, &state, &notes("done"), GUIDED_MODE, &context).unwrap();
        state = moved(progress).0;
        seen.push(key(&state));
        assert!(seen.len() < 100, "runaway: {seen:?}");
    }
    seen
}

/// decision: D139
#[test]
fn a_step_whose_run_condition_fails_is_skipped_and_the_skip_names_the_values_read() {
    let wf = workflow(
        vec![
            compiled_step("a", None),
            when(
                "fast",
                json!({"op": "equals", "var": "mode", "value": "fast"}),
            ),
            when(
                "slow",
                json!({"op": "not_equals", "var": "mode", "value": "fast"}),
            ),
            compiled_step("z", None),
        ],
        vec![s("a"), s("fast"), s("slow"), s("z")],
        vec![],
    );
    assert_eq!(
        drive(&wf, json!({"mode": " FAST "}), &[]),
        ["a", "fast", "z", "complete"]
    );
    assert_eq!(
        drive(&wf, json!({"mode": "slow"}), &[]),
        ["a", "slow", "z", "complete"]
    );
    // The delta of the ack that leaves `a` is what the walk reads.
    assert_eq!(
        drive(&wf, json!({"mode": "slow"}), &[json!({"mode": "fast"})]),
        ["a", "fast", "z", "complete"]
    );
    let (state, _) =
        moved(interpreter::start_with(&wf, GUIDED_MODE, &ctx(json!({"mode": "slow"}))).unwrap());
    let (_, skipped) = moved(
        interpreter::ack_with(
            &wf,
            &state,
            &notes("a"),
            GUIDED_MODE,
            &ctx(json!({"mode": "slow"})),
        )
        .unwrap(),
    );
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].subject, Skipped::Step(step_id("fast")));
    assert_eq!(
        skipped[0].explanation,
        "mode equals \"fast\" (read mode = \"slow\")"
    );
}

/// decision: D139
#[test]
fn a_loop_whose_run_condition_fails_never_runs() {
    let mut lp = context_loop("rep", LoopWhile::Count { count: 2 }, 5, vec!["body"]);
    lp.run_condition = Some(cond(json!({"op": "truthy", "var": "wanted"})));
    let wf = workflow(
        vec![compiled_step("body", None), compiled_step("z", None)],
        vec![l("rep"), s("z")],
        vec![lp],
    );
    assert_eq!(drive(&wf, json!({}), &[]), ["z", "complete"]);
    assert_eq!(
        drive(&wf, json!({"wanted": "yes"}), &[]),
        ["rep@0::body", "rep@1::body", "z", "complete"]
    );
}

/// decision: D139
#[test]
fn a_count_loop_runs_its_count_capped_by_max_iterations() {
    let wf = |count, max| {
        workflow(
            vec![compiled_step("body", None)],
            vec![l("rep")],
            vec![context_loop(
                "rep",
                LoopWhile::Count { count },
                max,
                vec!["body"],
            )],
        )
    };
    assert_eq!(
        drive(&wf(3, 10), json!({}), &[]),
        ["rep@0::body", "rep@1::body", "rep@2::body", "complete"]
    );
    assert_eq!(
        drive(&wf(3, 2), json!({}), &[]),
        ["rep@0::body", "rep@1::body", "complete"]
    );
    assert_eq!(drive(&wf(0, 2), json!({}), &[]), ["complete"]);
}

/// decision: D139
#[test]
fn a_while_loop_is_checked_before_every_body_step_and_leaves_as_soon_as_it_fails() {
    let condition = cond(json!({"op": "equals", "var": "more", "value": true}));
    let wf = workflow(
        vec![
            compiled_step("draft", None),
            compiled_step("review", None),
            compiled_step("z", None),
        ],
        vec![l("edit"), s("z")],
        vec![context_loop(
            "edit",
            LoopWhile::ContextWhile { condition },
            5,
            vec!["draft", "review"],
        )],
    );
    // Two full iterations, then the ack of `draft` says stop: `review` of iteration 2 never runs.
    assert_eq!(
        drive(
            &wf,
            json!({"more": "true"}),
            &[
                json!({}),
                json!({}),
                json!({}),
                json!({}),
                json!({"more": false})
            ]
        ),
        [
            "edit@0::draft",
            "edit@0::review",
            "edit@1::draft",
            "edit@1::review",
            "edit@2::draft",
            "z",
            "complete"
        ]
    );
    // Never true: never entered.
    assert_eq!(drive(&wf, json!({}), &[]), ["z", "complete"]);
    // Always true: `maxIterations` ends it quietly.
    let seen = drive(&wf, json!({"more": true}), &[]);
    assert_eq!(seen.len(), 5 * 2 + 2, "{seen:?}");
    assert_eq!(seen[seen.len() - 2..], ["z", "complete"]);
}

/// decision: D139
#[test]
fn an_until_loop_runs_until_its_condition_holds_and_sees_its_iteration_1_based() {
    let condition = cond(json!({"op": "gte", "var": "currentIteration", "value": 3}));
    let wf = workflow(
        vec![compiled_step("try", None)],
        vec![l("retry")],
        vec![context_loop(
            "retry",
            LoopWhile::ContextUntil { condition },
            10,
            vec!["try"],
        )],
    );
    assert_eq!(
        drive(&wf, json!({}), &[]),
        ["retry@0::try", "retry@1::try", "complete"]
    );
}

/// decision: D139
#[test]
fn a_for_each_loop_binds_item_index_and_iteration_into_the_pending_step() {
    let mut body = reading(
        "visit",
        &["currentItem", "currentIndex", "currentIteration"],
    );
    body.language.run_condition = Some(cond(
        json!({"op": "not_equals", "var": "currentItem", "value": "skip"}),
    ));
    let wf = workflow(
        vec![body],
        vec![l("each")],
        vec![context_loop(
            "each",
            LoopWhile::ForEach {
                items: "slices".into(),
            },
            10,
            vec!["visit"],
        )],
    );
    let context = ctx(json!({"slices": ["api", "skip", "ui"]}));
    let (state, _) = moved(interpreter::start_with(&wf, GUIDED_MODE, &context).unwrap());
    let pending = state.pending_step().unwrap();
    assert_eq!(
        pending.bindings.0,
        ctx(json!({"currentItem": "api", "currentIndex": 0, "currentIteration": 1}))
    );
    let (state, skipped) =
        moved(interpreter::ack_with(&wf, &state, &notes("x"), GUIDED_MODE, &context).unwrap());
    assert_eq!(key(&state), "each@2::visit");
    assert_eq!(
        state.pending_step().unwrap().bindings.0,
        ctx(json!({"currentItem": "ui", "currentIndex": 2, "currentIteration": 3}))
    );
    assert_eq!(skipped.len(), 1);
    assert_eq!(skipped[0].loop_path[0].iteration, 1);
}

/// decision: D139
#[test]
fn a_step_binds_what_it_reads_that_is_set() {
    let wf = workflow(
        vec![reading("a", &["ticket", "absent"])],
        vec![s("a")],
        vec![],
    );
    let context = ctx(json!({"ticket": {"id": 7}, "other": 1}));
    let (state, _) = moved(interpreter::start_with(&wf, GUIDED_MODE, &context).unwrap());
    assert_eq!(
        state.pending_step().unwrap().bindings.0,
        ctx(json!({"ticket": {"id": 7}}))
    );
}

/// decision: D139
#[test]
fn a_loop_reading_a_missing_context_value_blocks_or_is_disclosed_and_skipped() {
    let wf = workflow(
        vec![compiled_step("a", None), compiled_step("visit", None)],
        vec![s("a"), l("each")],
        vec![context_loop(
            "each",
            LoopWhile::CountVar {
                var: "rounds".into(),
            },
            10,
            vec!["visit"],
        )],
    );
    let (state, _) = moved(interpreter::start_with(&wf, GUIDED_MODE, &Map::new()).unwrap());
    let finding =
        blocked(interpreter::ack_with(&wf, &state, &notes("a"), GUIDED_MODE, &Map::new()).unwrap());
    assert_eq!(
        finding.reason.gap_reason(),
        GapReason::ContractViolation(ContractViolationReason::MissingRequiredOutput)
    );
    assert!(matches!(finding.pointer, BlockerPointer::ContextKey { .. }));
    assert!(finding.message.contains("a number"), "{}", finding.message);
    // A string is the wrong type: an invalid value rather than a missing one.
    let wrong = ctx(json!({"rounds": "2"}));
    let finding =
        blocked(interpreter::ack_with(&wf, &state, &notes("a"), GUIDED_MODE, &wrong).unwrap());
    assert_eq!(
        finding.reason.gap_reason(),
        GapReason::ContractViolation(ContractViolationReason::InvalidRequiredOutput)
    );
    // Never-stop: disclosed, and the loop does not run.
    match interpreter::ack_with(&wf, &state, &notes("a"), NEVER, &Map::new()).unwrap() {
        Progress::Moved {
            state, disclosed, ..
        } => {
            assert!(state.is_complete());
            assert_eq!(disclosed.len(), 1);
        }
        other => panic!("{other:?}"),
    }
    // With the value: two rounds.
    let rounds = ctx(json!({"rounds": 2}));
    let (state, _) =
        moved(interpreter::ack_with(&wf, &state, &notes("a"), GUIDED_MODE, &rounds).unwrap());
    assert_eq!(key(&state), "each@0::visit");
}

fn validated(criterion: Value) -> CompiledWorkflowSnapshotV1 {
    let mut step = compiled_step("write", None);
    step.language.validation = Some(serde_json::from_value(criterion).unwrap());
    workflow(vec![step], vec![s("write")], vec![])
}

fn verdict(
    wf: &CompiledWorkflowSnapshotV1,
    output: &OutputInput,
    context: Value,
) -> Option<Finding> {
    let (state, _) =
        moved(interpreter::start_with(wf, GUIDED_MODE, &ctx(context.clone())).unwrap());
    match interpreter::ack_with(wf, &state, output, GUIDED_MODE, &ctx(context)).unwrap() {
        Progress::Blocked { blocker, .. } => Some(blocker),
        Progress::Moved { .. } => None,
    }
}

/// decision: D139, D153
#[test]
fn validation_criteria_judge_the_notes_and_quote_the_failed_rules() {
    let contains = validated(
        json!({"kind": "contains", "value": "## Risks", "message": "Add a ## Risks section."}),
    );
    assert!(verdict(&contains, &notes("## Plan\n## Risks\n"), json!({})).is_none());
    let finding = verdict(&contains, &notes("## plan\n## risks"), json!({})).unwrap();
    assert_eq!(
        finding.reason.gap_reason(),
        GapReason::ContractViolation(ContractViolationReason::InvalidRequiredOutput)
    );
    assert!(finding.message.contains("Add a ## Risks section."));
    assert!(finding.message.contains("write"));
    let missing = verdict(&contains, &no_output(), json!({})).unwrap();
    assert_eq!(
        missing.reason.gap_reason(),
        GapReason::ContractViolation(ContractViolationReason::MissingRequiredOutput)
    );

    let length = validated(json!({"kind": "length", "min": 3, "max": 5}));
    assert!(verdict(&length, &notes("abcd"), json!({})).is_none());
    assert!(verdict(&length, &notes("ab"), json!({})).is_some());
    assert!(verdict(&length, &notes("abcdef"), json!({})).is_some());
    // Measured in UTF-16 code units: one astral character counts 2.
    assert!(verdict(&length, &notes("a\u{1F600}"), json!({})).is_none());

    let regex =
        validated(json!({"kind": "regex", "pattern": "^status: (ok|done)$", "flags": "im"}));
    assert!(verdict(&regex, &notes("intro\nStatus: OK"), json!({})).is_none());
    let strict = validated(json!({"kind": "regex", "pattern": "^status: ok$"}));
    assert!(verdict(&strict, &notes("intro\nStatus: OK"), json!({})).is_some());

    // A rule whose condition does not hold is not applied.
    let conditional = validated(json!({"kind": "contains", "value": "tests",
        "when": {"op": "equals", "var": "kind", "value": "code"}}));
    assert!(verdict(&conditional, &notes("docs only"), json!({"kind": "docs"})).is_none());
    assert!(verdict(&conditional, &notes("docs only"), json!({"kind": "code"})).is_some());

    let any = validated(json!({"kind": "any", "any": [
        {"kind": "contains", "value": "yes"}, {"kind": "contains", "value": "no"}]}));
    assert!(verdict(&any, &notes("no"), json!({})).is_none());
    assert!(verdict(&any, &notes("maybe"), json!({})).is_some());
    let not = validated(json!({"kind": "not", "criterion": {"kind": "contains", "value": "TODO"}}));
    assert!(verdict(&not, &notes("done"), json!({})).is_none());
    assert!(verdict(&not, &notes("TODO later"), json!({})).is_some());
    let all = validated(json!({"kind": "all", "all": [
        {"kind": "contains", "value": "a", "message": "need a"},
        {"kind": "contains", "value": "b", "message": "need b"}]}));
    // Each failed rule is its own blocker (decision D153).
    let (state, _) = moved(interpreter::start_with(&all, GUIDED_MODE, &Map::new()).unwrap());
    match interpreter::ack_with(&all, &state, &notes("c"), GUIDED_MODE, &Map::new()).unwrap() {
        Progress::Blocked { blocker, also, .. } => {
            assert!(blocker.message.contains("need a"), "{}", blocker.message);
            assert_eq!(also.len(), 1, "{also:?}");
            assert!(also[0].message.contains("need b"), "{}", also[0].message);
        }
        Progress::Moved { .. } => panic!("the notes fail both rules"),
    }
}

/// decision: D139
#[test]
fn a_failed_validation_in_never_stop_is_disclosed_and_the_step_completes() {
    let wf = validated(json!({"kind": "contains", "value": "x"}));
    let (state, _) = moved(interpreter::start_with(&wf, NEVER, &Map::new()).unwrap());
    match interpreter::ack_with(&wf, &state, &notes("y"), NEVER, &Map::new()).unwrap() {
        Progress::Moved {
            state, disclosed, ..
        } => {
            assert!(state.is_complete());
            assert_eq!(disclosed.len(), 1);
        }
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Through the model's operations
// ---------------------------------------------------------------------------------------------

fn node(id: &NodeId) -> NodeRef {
    NodeRef {
        session_id: sid("s"),
        run_id: rid("r"),
        node_id: id.clone(),
    }
}

fn ack(model: &Model, at: &NodeId, delta: Option<Value>) -> (Model, Observation) {
    let attempt_id = model.current_ack_attempt(&node(at)).unwrap();
    model
        .apply(&Command::Advance(AckAt {
            node: node(at),
            attempt_id,
            output: notes("done"),
            preferences: vec![],
            context: delta.map(ctx),
        }))
        .unwrap()
}

fn contexts(model: &Model) -> Vec<Map<String, Value>> {
    model
        .events(&sid("s"))
        .unwrap()
        .iter()
        .filter_map(|e| match e.data() {
            EventData::ContextSet(c) => Some(c.context.clone()),
            _ => None,
        })
        .collect()
}

/// decision: D139
#[test]
fn the_model_records_the_merged_context_an_advance_read_and_freezes_what_a_node_shows() {
    let wf = workflow(
        vec![
            compiled_step("a", None),
            {
                let mut b = reading("b", &["mode"]);
                b.language.run_condition = Some(cond(
                    json!({"op": "in", "var": "mode", "values": ["x", "y"]}),
                ));
                b
            },
            compiled_step("z", None),
        ],
        vec![s("a"), s("b"), s("z")],
        vec![],
    );
    let (model, obs) = Model::new(GUIDED)
        .apply(&Command::Start(Box::new(StartRun {
            session_id: sid("s"),
            run_id: rid("r"),
            workflow: wf,
            source_kind: WorkflowSourceKind::Project,
            source_ref: "workflows/test.json".into(),
            session_baseline: None,
            preferences: Vec::new(),
            context: ctx(json!({"mode": "x", "ticket": 1})),
        })))
        .unwrap();
    let Observation::Started { root, .. } = obs else {
        panic!("{obs:?}")
    };
    assert_eq!(contexts(&model), [ctx(json!({"mode": "x", "ticket": 1}))]);
    // Branch 1: no delta, so `b` runs and freezes mode = "x"; nothing new is recorded.
    let (model, obs) = ack(&model, &root, None);
    let Observation::Advanced {
        to_node_id: b1,
        pending,
        ..
    } = obs
    else {
        panic!("{obs:?}")
    };
    assert_eq!(pending.unwrap().bindings.0, ctx(json!({"mode": "x"})));
    assert_eq!(contexts(&model).len(), 1);
    // Branch 2 from the root (a rewind): the delta makes `b` skip; the merge is recorded.
    let (model, obs) = ack(&model, &root, Some(json!({"mode": "q", "ticket": null})));
    let Observation::Advanced { pending, .. } = obs else {
        panic!("{obs:?}")
    };
    assert_eq!(pending.unwrap().step_id, step_id("z"));
    assert_eq!(contexts(&model).last().unwrap(), &ctx(json!({"mode": "q"})));
    // The first branch's node still shows what it froze.
    let (_, obs) = model.apply(&Command::Rehydrate(node(&b1))).unwrap();
    let Observation::Rehydrated { pending, .. } = obs else {
        panic!("{obs:?}")
    };
    assert_eq!(pending.unwrap().bindings.0, ctx(json!({"mode": "x"})));
}

/// decision: D139
#[test]
fn a_blocked_attempt_records_no_context() {
    let mut step = compiled_step("a", None);
    step.language.validation = Some(ValidationCriterion::Contains {
        value: "ok".into(),
        message: None,
        when: None,
    });
    let wf = workflow(vec![step], vec![s("a")], vec![]);
    let (model, obs) = Model::new(GUIDED)
        .apply(&Command::Start(Box::new(StartRun {
            session_id: sid("s"),
            run_id: rid("r"),
            workflow: wf,
            source_kind: WorkflowSourceKind::Project,
            source_ref: "workflows/test.json".into(),
            session_baseline: None,
            preferences: Vec::new(),
            context: Map::new(),
        })))
        .unwrap();
    let Observation::Started { root, .. } = obs else {
        panic!("{obs:?}")
    };
    let (model, obs) = ack(&model, &root, Some(json!({"k": 1})));
    assert!(matches!(obs, Observation::Blocked { .. }), "{obs:?}");
    assert!(contexts(&model).is_empty());
}

//! The control flow of the workflow language at run time (decision D139 and D140 to D144),
//! driven through the protocol: run conditions with every operator, the four loop kinds with
//! their variables, validation criteria, the three confirmation forms, assessments and their
//! consequences, fragments and markers frozen into a node's prompt, first-match branches and
//! attempt budgets, each deterministic under replay, rewind and fork.
//!
//! Guards against a walk that reads a context other than the recorded one, a skip that leaves
//! no trace, a loop off by one or reading its count once only, a prompt that changes when a
//! later call on another branch moves the context, a validation failure that does not block
//! (or does not become a gap in never-stop), and an agent looping on a blocked step forever.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use std::sync::Arc;

use protocol_support::{ack, pending, rehydrate, session_events};
use serde_json::{Map, Value, json};
use workrail::entropy::SeededEntropy;
use workrail::protocol::{CatalogLoader, Workrail};
use workrail::sources::memory::MemorySource;
use workrail::sources::{Catalog, WorkflowSource};
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail_spec::blocker::{BlockerCode, BlockerPointer};
use workrail_spec::closed::{Autonomy, DecisionTraceKind, NextIntent, WorkflowSourceKind};
use workrail_spec::compiled::ConfirmationKind;
use workrail_spec::error::ErrorCode;
use workrail_spec::event::{EventData, PreferenceDelta, TraceEntry, TraceRef};
use workrail_spec::tools::{
    ContinueWorkflowInput, ExecutionKind, ExecutionOutput, StartWorkflowInput,
};

const CONDITIONS: &str = r#"{
  "id": "project.conditions", "name": "Conditions", "description": "One step per operator.",
  "steps": [
    {"id": "s-equals", "title": "equals", "prompt": "x", "runCondition": {"var": "mode", "equals": "FAST"}},
    {"id": "s-not-equals", "title": "not_equals", "prompt": "x", "runCondition": {"var": "mode", "not_equals": "fast"}},
    {"id": "s-gt", "title": "gt", "prompt": "x", "runCondition": {"var": "n", "gt": 2}},
    {"id": "s-gte", "title": "gte", "prompt": "x", "runCondition": {"var": "n", "gte": 4}},
    {"id": "s-lt", "title": "lt", "prompt": "x", "runCondition": {"var": "n", "lt": 3}},
    {"id": "s-lte", "title": "lte", "prompt": "x", "runCondition": {"var": "n", "lte": 3}},
    {"id": "s-contains", "title": "contains", "prompt": "x", "runCondition": {"var": "title", "contains": "BUG"}},
    {"id": "s-starts", "title": "startsWith", "prompt": "x", "runCondition": {"var": "title", "startsWith": "feat"}},
    {"id": "s-ends", "title": "endsWith", "prompt": "x", "runCondition": {"var": "title", "endsWith": "12"}},
    {"id": "s-matches", "title": "matches", "prompt": "x", "runCondition": {"var": "title", "matches": "bug \\d+"}},
    {"id": "s-in", "title": "in", "prompt": "x", "runCondition": {"var": "size", "in": ["s", "m"]}},
    {"id": "s-truthy", "title": "truthy", "prompt": "x", "runCondition": {"var": "flag"}},
    {"id": "s-and", "title": "and", "prompt": "x", "runCondition": {"and": [{"var": "n", "gt": 1}, {"var": "flag"}]}},
    {"id": "s-or", "title": "or", "prompt": "x", "runCondition": {"or": [{"var": "flag"}, {"var": "size", "equals": "l"}]}},
    {"id": "s-not", "title": "not", "prompt": "x", "runCondition": {"not": {"var": "flag"}}},
    {"id": "last", "title": "Last", "prompt": "x"}
  ]
}"#;

const LOOPS: &str = r#"{
  "id": "project.loops", "name": "Loops", "description": "The four loop kinds.",
  "steps": [
    {"id": "plan", "title": "Plan", "prompt": "Plan."},
    {"type": "loop", "id": "while-loop", "title": "While", "runCondition": {"var": "kind", "equals": "while"},
     "loop": {"type": "while", "condition": {"var": "more", "equals": true}, "maxIterations": 3},
     "body": [{"id": "w-step", "title": "W", "prompt": "While pass {{currentIteration}}."}]},
    {"type": "loop", "id": "until-loop", "title": "Until", "runCondition": {"var": "kind", "equals": "until"},
     "loop": {"type": "until", "condition": {"var": "done", "equals": true}, "maxIterations": 5},
     "body": [{"id": "u-step", "title": "U", "prompt": "Until pass {{currentIteration}}."}]},
    {"type": "loop", "id": "for-loop", "title": "For", "runCondition": {"var": "kind", "equals": "for"},
     "loop": {"type": "for", "count": 2, "maxIterations": 5},
     "body": [{"id": "f-step", "title": "F", "prompt": "For pass {{currentIteration}}."}]},
    {"type": "loop", "id": "count-loop", "title": "Count", "runCondition": {"var": "kind", "equals": "count"},
     "loop": {"type": "for", "count": "retries", "maxIterations": 5, "iterationVar": "attempt"},
     "body": [{"id": "c-step", "title": "C", "prompt": "Attempt {{attempt}}."}]},
    {"type": "loop", "id": "each-loop", "title": "Each", "runCondition": {"var": "kind", "equals": "each"},
     "loop": {"type": "forEach", "items": "slices", "maxIterations": 2},
     "body": [
       {"id": "e-impl", "title": "Slice {{currentIndex}}", "prompt": "Build {{currentItem.name}} ({{currentIndex}}, pass {{currentIteration}})."},
       {"id": "e-review", "title": "Review", "prompt": "Review {{currentItem.name}}.", "runCondition": {"var": "currentIndex", "gte": 1}}
     ]},
    {"id": "after", "title": "After", "prompt": "Wrap up."}
  ]
}"#;

const EACH_FIRST: &str = r#"{
  "id": "project.each_first", "name": "Each first", "description": "A forEach loop reached at start.",
  "steps": [
    {"type": "loop", "id": "each", "title": "Each", "loop": {"type": "forEach", "items": "files", "maxIterations": 10},
     "body": [{"id": "file", "title": "File", "prompt": "Handle {{currentItem}}."}]}
  ]
}"#;

const VALIDATE: &str = r#"{
  "id": "project.validate", "name": "Validate", "description": "One step per rule kind.",
  "steps": [
    {"id": "v-contains", "title": "Contains", "prompt": "x", "validationCriteria": [{"type": "contains", "value": "Summary", "message": "Add a Summary section."}]},
    {"id": "v-regex", "title": "Regex", "prompt": "x", "validationCriteria": [{"type": "regex", "pattern": "^ticket-\\d+$", "flags": "im"}]},
    {"id": "v-length", "title": "Length", "prompt": "x", "validationCriteria": [{"type": "length", "min": 10, "max": 40, "message": "Keep it between 10 and 40 characters."}]},
    {"id": "v-schema", "title": "Schema", "prompt": "x", "validationCriteria": [{"type": "schema", "schema": {"type": "object", "required": ["ok"]}, "message": "Send a JSON object with ok."}]},
    {"id": "v-compose", "title": "Compose", "prompt": "x", "validationCriteria": {"and": [
        {"or": [{"type": "contains", "value": "PASS"}, {"type": "contains", "value": "SKIP"}]},
        {"not": {"type": "contains", "value": "FAIL"}}
    ]}},
    {"id": "v-when", "title": "When", "prompt": "x", "validationCriteria": [{"type": "contains", "value": "Risk", "message": "Name the risk.", "condition": {"var": "strict", "equals": true}}]},
    {"id": "done", "title": "Done", "prompt": "x"}
  ]
}"#;

const CONFIRM: &str = r#"{
  "id": "project.confirm", "name": "Confirm", "description": "The three confirmation forms.",
  "steps": [
    {"id": "c-bool", "title": "Bool", "prompt": "x", "requireConfirmation": true},
    {"id": "c-cond", "title": "Cond", "prompt": "x", "requireConfirmation": {"var": "risk", "equals": "high"}},
    {"id": "c-kind", "title": "Kind", "prompt": "x", "requireConfirmation": {"kind": "human_approval", "condition": {"var": "risk", "equals": "high"}}},
    {"id": "c-eval", "title": "Eval", "prompt": "x", "requireConfirmation": {"kind": "coordinator_eval"}}
  ]
}"#;

const ASSESS: &str = r#"{
  "id": "project.assess", "name": "Assess", "description": "An assessment gate with a consequence.",
  "assessments": [{"id": "readiness", "purpose": "Ready to hand off", "dimensions": [
    {"id": "confidence", "purpose": "How sure", "levels": ["low", "medium", "high"]},
    {"id": "coverage", "purpose": "Tests", "levels": ["none", "full"], "required": false}
  ]}],
  "steps": [
    {"id": "gate", "title": "Gate", "prompt": "Judge readiness.", "assessmentRefs": ["readiness"],
     "assessmentConsequences": [{"when": {"anyEqualsLevel": "low"}, "effect": {"kind": "require_followup", "guidance": "Collect one more piece of evidence."}}]},
    {"id": "handoff", "title": "Handoff", "prompt": "Hand off."}
  ]
}"#;

const FRAGMENTS: &str = r#"{
  "id": "project.fragments", "name": "Fragments", "description": "Markers and conditional fragments.",
  "steps": [
    {"id": "a", "title": "Ticket {{ticket.id}}", "prompt": "Work on {{ticket.title}} for {{user}}.",
     "promptFragments": [{"id": "fast", "when": {"var": "mode", "equals": "fast"}, "text": "Be quick, {{user}}."}]},
    {"id": "b", "title": "B", "prompt": "Report to {{user}} ({{missing}}).",
     "promptFragments": [{"id": "slow", "when": {"var": "mode", "equals": "slow"}, "text": "Take your time."}]}
  ]
}"#;

const BRANCH: &str = r#"{
  "id": "project.branch", "name": "Branch", "description": "First match wins.",
  "steps": [
    {"id": "intake", "title": "Intake", "prompt": "Size the work."},
    {"type": "branch", "id": "by-size", "branches": [
      {"when": {"var": "size", "in": ["s", "m"]}, "steps": [{"id": "quick", "title": "Quick", "prompt": "Quick path."}]},
      {"when": {"var": "size", "in": ["m", "l"]}, "steps": [{"id": "big", "title": "Big", "prompt": "Big path."}]}
    ], "default": [{"id": "ask", "title": "Ask", "prompt": "Ask for the size."}]},
    {"id": "end", "title": "End", "prompt": "End."}
  ]
}"#;

const FREE_DECISION: &str = r#"{
  "id": "project.free_decision", "name": "Free decision", "description": "A decision outside any loop.",
  "steps": [
    {"id": "init", "title": "Init", "prompt": "Decide.", "outputContract": {"contractRef": "wr.contracts.loop_control"}},
    {"id": "next", "title": "Next", "prompt": "Go on."}
  ]
}"#;

const BUDGET: &str = r#"{
  "id": "project.budget", "name": "Budget", "description": "Two blocked attempts, then the user.",
  "maxAttempts": 2,
  "steps": [
    {"id": "report", "title": "Report", "prompt": "Report.", "validationCriteria": [{"type": "contains", "value": "VERIFIED", "message": "Say VERIFIED once you verified."}]},
    {"id": "end", "title": "End", "prompt": "End.", "notesOptional": true}
  ]
}"#;

const REVISIT: &str = r#"{
  "id": "project.revisit", "name": "Revisit", "description": "Skipped top-level items run later.",
  "steps": [
    {"id": "gather", "title": "Gather", "prompt": "Gather."},
    {"id": "early", "title": "Early", "prompt": "Early.", "runCondition": {"var": "ready", "equals": true}},
    {"type": "loop", "id": "retry", "title": "Retry", "runCondition": {"var": "retry", "equals": true},
     "loop": {"type": "for", "count": 1, "maxIterations": 2},
     "body": [{"id": "again", "title": "Again", "prompt": "Again."}]},
    {"id": "middle", "title": "Middle", "prompt": "Middle."},
    {"id": "late", "title": "Late", "prompt": "Late.", "runCondition": {"var": "ready", "equals": true}},
    {"id": "wrap", "title": "Wrap", "prompt": "Wrap."}
  ]
}"#;

const LANGUAGE_DECISIONS: &str = r#"{
  "id": "project.language_decisions", "name": "Language decisions", "description": "Decisions as the language writes them.",
  "steps": [
    {"type": "loop", "id": "review-loop", "title": "Review",
     "loop": {"type": "while", "conditionSource": {"kind": "artifact_contract", "contractRef": "wr.contracts.loop_control", "loopId": "review-pass"}, "maxIterations": 5},
     "body": [
       {"id": "review", "title": "Review", "prompt": "Review."},
       {"id": "decide", "title": "Decide", "prompt": "Send {\"kind\": \"wr.loop_control\", \"decision\": \"continue\"} or stop.", "outputContract": {"contractRef": "wr.contracts.loop_control"}}
     ]},
    {"id": "after", "title": "After", "prompt": "Wrap up."}
  ]
}"#;

const NATIVE_DECISIONS: &str = r#"{
  "id": "project.native_decisions", "name": "Native decisions", "description": "Decisions as the native spelling writes them.",
  "conditions": [{"id": "again", "kind": "loop_control", "continueWhen": "continue"}],
  "steps": [
    {"type": "loop", "loopId": "work", "while": {"kind": "condition_ref", "conditionId": "again"}, "maxIterations": 5,
     "body": [
       {"id": "decide", "title": "Decide", "prompt": "Work, then decide.", "output": {"contractRef": "wr.contracts.loop_control"}}
     ]},
    {"id": "after", "title": "After", "prompt": "Wrap up."}
  ]
}"#;

fn catalog() -> CatalogLoader {
    Arc::new(|| {
        let project = MemorySource::new(WorkflowSourceKind::Project)
            .with("project/workflows/conditions.json", CONDITIONS)
            .with("project/workflows/loops.json", LOOPS)
            .with("project/workflows/each_first.json", EACH_FIRST)
            .with("project/workflows/validate.json", VALIDATE)
            .with("project/workflows/confirm.json", CONFIRM)
            .with("project/workflows/assess.json", ASSESS)
            .with("project/workflows/fragments.json", FRAGMENTS)
            .with("project/workflows/branch.json", BRANCH)
            .with("project/workflows/budget.json", BUDGET)
            .with("project/workflows/revisit.json", REVISIT)
            .with("project/workflows/free_decision.json", FREE_DECISION)
            .with(
                "project/workflows/language_decisions.json",
                LANGUAGE_DECISIONS,
            )
            .with("project/workflows/native_decisions.json", NATIVE_DECISIONS);
        let sources: Vec<&dyn WorkflowSource> = vec![&project];
        Arc::new(Catalog::load(&sources))
    })
}

fn open(fs: &MemFs) -> Workrail {
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    Workrail::with_parts(shared, catalog(), Arc::new(SeededEntropy::new(11))).unwrap()
}

fn object(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap()
}

fn start(wr: &Workrail, workflow: &str, context: Value, autonomy: Autonomy) -> ExecutionOutput {
    try_start(wr, workflow, context, autonomy).unwrap()
}

fn try_start(
    wr: &Workrail,
    workflow: &str,
    context: Value,
    autonomy: Autonomy,
) -> Result<ExecutionOutput, workrail_spec::error::ErrorEnvelope> {
    wr.start_workflow(StartWorkflowInput {
        workflow_id: workflow.into(),
        context: Some(object(context)),
        preferences: vec![PreferenceDelta::Autonomy(autonomy)],
        preset: None,
    })
}

/// Acknowledges the pending step with `notes`, `artifacts` and a `context` delta.
fn next(
    wr: &Workrail,
    out: &ExecutionOutput,
    notes: &str,
    artifacts: Vec<Value>,
    context: Value,
) -> ExecutionOutput {
    wr.continue_workflow(with_context(ack(out, notes, artifacts), context))
        .unwrap()
}

fn with_context(input: ContinueWorkflowInput, context: Value) -> ContinueWorkflowInput {
    let context = object(context);
    ContinueWorkflowInput {
        context: (!context.is_empty()).then_some(context),
        ..input
    }
}

fn prompt(out: &ExecutionOutput) -> &str {
    out.pending.as_ref().map_or("", |p| p.prompt.as_str())
}

fn blockers(out: &ExecutionOutput) -> Vec<(BlockerCode, String)> {
    out.blockers
        .iter()
        .map(|b| (b.code, b.message.as_str().to_owned()))
        .collect()
}

/// The steps a run visits when every step is acknowledged with plain notes.
fn visit(wr: &Workrail, mut out: ExecutionOutput) -> Vec<String> {
    let mut seen = Vec::new();
    while let Some(p) = &out.pending {
        seen.push(p.step_id.to_string());
        out = next(wr, &out, "done", vec![], json!({}));
        assert_eq!(out.kind, ExecutionKind::Ok, "{:?}", out.blockers);
    }
    seen
}

/// Every decision trace entry of the session, in log order.
fn trace(wr: &Workrail, out: &ExecutionOutput) -> Vec<TraceEntry> {
    session_events(wr, out)
        .iter()
        .filter_map(|e| match e.data() {
            EventData::DecisionTraceAppended(t) => Some(t.entries.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

fn names_step(entry: &TraceEntry, step: &str) -> bool {
    entry
        .refs
        .iter()
        .flat_map(|refs| refs.iter())
        .any(|r| matches!(r, TraceRef::StepId { step_id } if step_id.as_str() == step))
}

/// decision: D139
#[test]
fn every_operator_skips_and_runs_a_step_and_each_decision_is_traced() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let runs = [
        (
            json!({"mode": " fast ", "n": 3, "title": "Fix bug 12", "size": "l", "flag": false}),
            vec![
                "s-equals",
                "s-gt",
                "s-lte",
                "s-contains",
                "s-ends",
                "s-matches",
                "s-or",
                "s-not",
            ],
        ),
        (
            json!({"mode": "slow", "n": 4, "title": "feat: add 12 things", "size": "m", "flag": true}),
            vec![
                "s-not-equals",
                "s-gt",
                "s-gte",
                "s-starts",
                "s-in",
                "s-truthy",
                "s-and",
                "s-or",
            ],
        ),
        (
            json!({"n": 1, "title": "docs", "size": "s", "flag": 0}),
            vec!["s-not-equals", "s-lt", "s-lte", "s-in", "s-not"],
        ),
    ];
    let mut ran = std::collections::BTreeSet::new();
    let mut skipped = std::collections::BTreeSet::new();
    for (context, mut expected) in runs {
        let out = start(&wr, "project.conditions", context.clone(), Autonomy::Guided);
        let seen = visit(&wr, out.clone());
        expected.push("last");
        assert_eq!(seen, expected, "{context}");
        let entries = trace(&wr, &out);
        for (i, step) in CONDITIONS_STEPS.iter().enumerate() {
            let decided: Vec<&TraceEntry> = entries
                .iter()
                .filter(|e| e.kind == DecisionTraceKind::EvaluatedCondition && names_step(e, step))
                .collect();
            assert_eq!(decided.len(), 1, "{step} is decided once: {entries:?}");
            let summary = &decided[0].summary;
            if seen.iter().any(|s| s == step) {
                assert!(
                    summary.contains("runs: its runCondition holds"),
                    "{summary}"
                );
                ran.insert(i);
            } else {
                assert!(
                    summary.contains("skipped: its runCondition is false"),
                    "{summary}"
                );
                skipped.insert(i);
            }
            assert!(
                summary.contains("(read "),
                "the values read are named: {summary}"
            );
        }
    }
    // Every operator both skipped and ran a step.
    assert_eq!(ran.len(), CONDITIONS_STEPS.len());
    assert_eq!(skipped.len(), CONDITIONS_STEPS.len());
}

const CONDITIONS_STEPS: [&str; 15] = [
    "s-equals",
    "s-not-equals",
    "s-gt",
    "s-gte",
    "s-lt",
    "s-lte",
    "s-contains",
    "s-starts",
    "s-ends",
    "s-matches",
    "s-in",
    "s-truthy",
    "s-and",
    "s-or",
    "s-not",
];

/// decision: D141
#[test]
fn while_and_until_loops_decide_before_every_iteration_over_the_recorded_context() {
    let fs = MemFs::new();
    let wr = open(&fs);
    // while: the condition holds at entry, still holds after pass 1, is false after pass 2.
    let out = start(
        &wr,
        "project.loops",
        json!({"kind": "while", "more": true}),
        Autonomy::Guided,
    );
    let out = next(&wr, &out, "planned", vec![], json!({}));
    assert_eq!(pending(&out), "w-step");
    assert_eq!(prompt(&out), "While pass 1.");
    let out = next(&wr, &out, "one", vec![], json!({}));
    assert_eq!(prompt(&out), "While pass 2.");
    let out = next(&wr, &out, "two", vec![], json!({"more": false}));
    assert_eq!(pending(&out), "after");
    // while whose condition is false at entry runs no iteration.
    let out = start(
        &wr,
        "project.loops",
        json!({"kind": "while", "more": false}),
        Autonomy::Guided,
    );
    let out = next(&wr, &out, "planned", vec![], json!({}));
    assert_eq!(pending(&out), "after");
    // until: runs until its condition holds.
    let out = start(
        &wr,
        "project.loops",
        json!({"kind": "until"}),
        Autonomy::Guided,
    );
    let out = next(&wr, &out, "planned", vec![], json!({}));
    assert_eq!(prompt(&out), "Until pass 1.");
    let out = next(&wr, &out, "one", vec![], json!({"done": false}));
    assert_eq!(prompt(&out), "Until pass 2.");
    let out = next(&wr, &out, "two", vec![], json!({"done": true}));
    assert_eq!(pending(&out), "after");
    let entries = trace(&wr, &out);
    assert!(
        entries.iter().any(|e| e.kind == DecisionTraceKind::EvaluatedCondition
            && e.summary.contains("Loop 'until-loop' before iteration 2: false (until done equals true (read done = true): holds)")),
        "{entries:#?}"
    );
}

/// decision: D141
#[test]
fn for_loops_count_from_a_number_or_read_a_context_key_each_iteration() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let out = start(
        &wr,
        "project.loops",
        json!({"kind": "for"}),
        Autonomy::Guided,
    );
    let seen = visit(&wr, out);
    assert_eq!(seen, ["plan", "f-step", "f-step", "after"]);
    // `for` over a context key: 2 at entry, raised to 3 during the run.
    let out = start(
        &wr,
        "project.loops",
        json!({"kind": "count", "retries": 2}),
        Autonomy::Guided,
    );
    let out = next(&wr, &out, "planned", vec![], json!({}));
    assert_eq!(prompt(&out), "Attempt 1.");
    let out = next(&wr, &out, "one", vec![], json!({"retries": 3}));
    assert_eq!(prompt(&out), "Attempt 2.");
    let out = next(&wr, &out, "two", vec![], json!({}));
    assert_eq!(prompt(&out), "Attempt 3.");
    let out = next(&wr, &out, "three", vec![], json!({}));
    assert_eq!(pending(&out), "after");
}

/// decision: D139, D141
#[test]
fn for_each_binds_item_and_index_for_prompts_and_conditions_and_stops_at_max_iterations() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let slices = json!([{"name": "auth"}, {"name": "billing"}, {"name": "search"}]);
    let out = start(
        &wr,
        "project.loops",
        json!({"kind": "each", "slices": slices}),
        Autonomy::Guided,
    );
    let out = next(&wr, &out, "planned", vec![], json!({}));
    assert_eq!(pending(&out), "e-impl");
    assert_eq!(out.pending.as_ref().unwrap().title, "Slice 0");
    assert_eq!(prompt(&out), "Build auth (0, pass 1).");
    // Index 0: the review is skipped by its condition on the loop's index.
    let out = next(&wr, &out, "built auth", vec![], json!({}));
    assert_eq!(prompt(&out), "Build billing (1, pass 2).");
    let out = next(&wr, &out, "built billing", vec![], json!({}));
    assert_eq!(pending(&out), "e-review");
    assert_eq!(prompt(&out), "Review billing.");
    // Three items, but maxIterations is 2: the loop stops while its condition still holds.
    let out = next(&wr, &out, "reviewed", vec![], json!({}));
    assert_eq!(pending(&out), "after");
    let entries = trace(&wr, &out);
    assert!(
        entries
            .iter()
            .any(|e| e.kind == DecisionTraceKind::ExitedLoop
                && e.summary
                    .contains("max iterations reached while its condition still held")),
        "{entries:#?}"
    );
    assert!(
        entries.iter().any(|e| names_step(e, "e-review")
            && e.summary.contains("skipped")
            && e.summary.contains("currentIndex = 0")),
        "{entries:#?}"
    );
}

/// decision: D141
#[test]
fn a_loop_without_its_context_value_is_an_error_at_start_and_a_blocker_at_an_advance() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let err = try_start(&wr, "project.each_first", json!({}), Autonomy::Guided).unwrap_err();
    assert_eq!(err.code, ErrorCode::ValidationError);
    assert!(err.message.contains("context.files"), "{}", err.message);
    assert!(err.suggestion.contains("\"files\""), "{}", err.suggestion);
    let details = err.details.unwrap();
    assert_eq!(details["contextKey"], "files");
    assert_eq!(details["expectedType"], "array");
    let ok = start(
        &wr,
        "project.each_first",
        json!({"files": ["a.rs"]}),
        Autonomy::Guided,
    );
    assert_eq!(prompt(&ok), "Handle a.rs.");

    // At an advance: blocked, naming the key and the type; then fixed through `context`.
    let out = start(
        &wr,
        "project.loops",
        json!({"kind": "each"}),
        Autonomy::Guided,
    );
    let blocked = next(&wr, &out, "planned", vec![], json!({}));
    assert_eq!(blocked.kind, ExecutionKind::Blocked);
    assert_eq!(blocked.blockers[0].code, BlockerCode::MissingRequiredOutput);
    assert!(matches!(
        &blocked.blockers[0].pointer,
        BlockerPointer::ContextKey { key } if key.as_str() == "slices"
    ));
    let wrong = next(&wr, &blocked, "planned", vec![], json!({"slices": "auth"}));
    assert_eq!(wrong.blockers[0].code, BlockerCode::InvalidRequiredOutput);
    assert!(
        wrong.blockers[0]
            .message
            .as_str()
            .contains("it holds a string"),
        "{}",
        wrong.blockers[0].message.as_str()
    );
    let fixed = next(
        &wr,
        &wrong,
        "planned",
        vec![],
        json!({"slices": [{"name": "x"}]}),
    );
    assert_eq!(prompt(&fixed), "Build x (0, pass 1).");

    // In never-stop the gap is disclosed and the loop does not run.
    let out = start(
        &wr,
        "project.loops",
        json!({"kind": "each"}),
        Autonomy::FullAutoNeverStop,
    );
    let went_on = next(&wr, &out, "planned", vec![], json!({}));
    assert_eq!(went_on.kind, ExecutionKind::Ok);
    assert_eq!(pending(&went_on), "after");
    assert!(
        went_on
            .warnings
            .iter()
            .any(|w| w.code == "gap_recorded" && w.message.contains("missing_required_output")),
        "{:?}",
        went_on.warnings
    );
}

/// decision: D143
#[test]
fn validation_rules_block_in_guided_mode_and_pass_when_met() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let out = start(
        &wr,
        "project.validate",
        json!({"strict": true}),
        Autonomy::Guided,
    );
    let cases: [(&str, &str, &str, &str); 6] = [
        (
            "v-contains",
            "no heading",
            "Add a Summary section.",
            "## Summary\nAll good.",
        ),
        (
            "v-regex",
            "nothing here",
            "/^ticket-\\d+$/im",
            "Notes\nTICKET-42\nmore",
        ),
        (
            "v-length",
            "short",
            "Keep it between 10 and 40 characters.",
            "just the right length",
        ),
        (
            "v-schema",
            "{\"ok\": 1",
            "Send a JSON object with ok.",
            "{\"ok\": true}",
        ),
        (
            "v-compose",
            "PASS but FAIL too",
            "this must not hold",
            "SKIP: nothing to do",
        ),
        ("v-when", "no word", "Name the risk.", "Risk: none"),
    ];
    let mut out = out;
    for (step, bad, quoted, good) in cases {
        assert_eq!(pending(&out), step);
        let blocked = next(&wr, &out, bad, vec![], json!({}));
        assert_eq!(blocked.kind, ExecutionKind::Blocked, "{step}");
        let (code, message) = &blockers(&blocked)[0];
        assert_eq!(*code, BlockerCode::InvalidRequiredOutput, "{step}");
        assert!(message.contains(quoted), "{step}: {message}");
        assert!(
            matches!(&blocked.blockers[0].pointer, BlockerPointer::WorkflowStep { step_id } if step_id.as_str() == step)
        );
        out = next(&wr, &blocked, good, vec![], json!({}));
        assert_eq!(out.kind, ExecutionKind::Ok, "{step}: {:?}", out.blockers);
    }
    assert_eq!(pending(&out), "done");

    // Missing notes are a missing output; a rule whose condition is false is skipped.
    let out = start(
        &wr,
        "project.validate",
        json!({"strict": false}),
        Autonomy::Guided,
    );
    let blocked = wr
        .continue_workflow(ContinueWorkflowInput {
            output: None,
            ..ack(&out, "", vec![])
        })
        .unwrap();
    assert_eq!(blocked.blockers[0].code, BlockerCode::MissingRequiredOutput);
    let mut out = blocked;
    for notes in [
        "Summary",
        "ticket-1",
        "long enough notes",
        "{\"ok\": 1}",
        "PASS",
        "no word needed",
    ] {
        out = next(&wr, &out, notes, vec![], json!({}));
        assert_eq!(out.kind, ExecutionKind::Ok, "{notes}: {:?}", out.blockers);
    }
    assert_eq!(pending(&out), "done");
}

/// decision: D143
#[test]
fn validation_failures_are_gaps_in_never_stop() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let out = start(
        &wr,
        "project.validate",
        json!({}),
        Autonomy::FullAutoNeverStop,
    );
    let went_on = next(&wr, &out, "no heading", vec![], json!({}));
    assert_eq!(went_on.kind, ExecutionKind::Ok);
    assert_eq!(pending(&went_on), "v-regex");
    assert!(
        went_on.warnings.iter().any(|w| w.code == "gap_recorded"
            && w.message.contains("invalid_required_output")
            && w.message.contains("Add a Summary section.")),
        "{:?}",
        went_on.warnings
    );
}

/// decision: D144
#[test]
fn the_three_confirmation_forms_decide_from_the_frozen_bindings() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let expect = |out: &ExecutionOutput, required: bool, kind: Option<ConfirmationKind>| {
        let p = out.pending.as_ref().unwrap();
        assert_eq!(p.require_confirmation, required, "{}", p.step_id);
        assert_eq!(p.confirmation_kind, kind, "{}", p.step_id);
        assert_eq!(
            out.next_intent == NextIntent::AwaitUserConfirmation,
            required,
            "{}",
            p.step_id
        );
    };
    for (risk, gated) in [("high", true), ("low", false)] {
        let out = start(
            &wr,
            "project.confirm",
            json!({"risk": risk}),
            Autonomy::Guided,
        );
        expect(&out, true, None);
        let out = next(&wr, &out, "ok", vec![], json!({}));
        expect(&out, gated, None);
        let out = next(&wr, &out, "ok", vec![], json!({}));
        expect(
            &out,
            gated,
            gated.then_some(ConfirmationKind::HumanApproval),
        );
        let text = workrail::protocol::render_text(&out);
        assert_eq!(text.contains("human operator's approval"), gated, "{text}");
        let out = next(&wr, &out, "ok", vec![], json!({}));
        expect(&out, true, Some(ConfirmationKind::CoordinatorEval));
    }
}

/// decision: D143
#[test]
fn assessments_are_required_validated_and_a_consequence_keeps_the_step_pending() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let out = start(&wr, "project.assess", json!({}), Autonomy::Guided);
    assert!(prompt(&out).contains("## Assessment\n"), "{}", prompt(&out));
    let missing = next(&wr, &out, "judged", vec![], json!({}));
    assert_eq!(missing.blockers[0].code, BlockerCode::MissingRequiredOutput);
    assert!(
        missing.blockers[0]
            .suggested_fix
            .as_ref()
            .unwrap()
            .as_str()
            .contains("\"assessmentId\":\"readiness\""),
        "{:?}",
        missing.blockers[0].suggested_fix
    );
    let assessment = |level: &str| json!({"kind": "wr.assessment", "assessmentId": "readiness", "dimensions": {"confidence": level}});
    let invalid = next(
        &wr,
        &missing,
        "judged",
        vec![assessment("certain")],
        json!({}),
    );
    assert_eq!(invalid.blockers[0].code, BlockerCode::InvalidRequiredOutput);
    assert!(
        invalid.blockers[0]
            .message
            .as_str()
            .contains("not one of its levels"),
        "{}",
        invalid.blockers[0].message.as_str()
    );
    let low = next(&wr, &invalid, "judged", vec![assessment("low")], json!({}));
    assert_eq!(low.kind, ExecutionKind::Blocked);
    let message = low.blockers[0].message.as_str();
    assert!(
        message.contains("'confidence' as 'low'")
            && message.contains("Collect one more piece of evidence."),
        "{message}"
    );
    assert_eq!(pending(&low), "gate", "the step stays pending");
    // A new assessment that no longer triggers the consequence lets the step through
    // (levels match ignoring case).
    let through = next(
        &wr,
        &low,
        "more evidence",
        vec![assessment("HIGH")],
        json!({}),
    );
    assert_eq!(through.kind, ExecutionKind::Ok, "{:?}", through.blockers);
    assert_eq!(pending(&through), "handoff");
}

/// decision: D139, D140
#[test]
fn markers_and_fragments_are_frozen_into_each_node_across_forks_and_later_context() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let root = start(
        &wr,
        "project.fragments",
        json!({"ticket": {"id": "T-1", "title": "Login bug"}, "user": "ada", "mode": "fast"}),
        Autonomy::Guided,
    );
    assert_eq!(root.pending.as_ref().unwrap().title, "Ticket T-1");
    assert_eq!(
        prompt(&root),
        "Work on Login bug for ada.\n\nBe quick, ada."
    );
    let b1 = next(
        &wr,
        &root,
        "done",
        vec![],
        json!({"user": "bob", "mode": "slow"}),
    );
    assert_eq!(
        prompt(&b1),
        "Report to bob ([unset: missing]).\n\nTake your time."
    );
    // A fork from the root with another context: its own node, its own prompt.
    let fork = wr.continue_workflow(with_context(
        protocol_support::ack(&root, "again", vec![]),
        json!({"user": "cy", "mode": "fast"}),
    ));
    // The root's ackToken was used: the same token replays, so fork with a fresh one.
    let fork = fork.unwrap();
    assert_eq!(
        prompt(&fork),
        prompt(&b1),
        "a replay answers from the record"
    );
    let fresh_root = wr.continue_workflow(rehydrate(&root.state_token)).unwrap();
    let b2 = next(
        &wr,
        &fresh_root,
        "again",
        vec![],
        json!({"user": "cy", "mode": "fast"}),
    );
    assert_eq!(prompt(&b2), "Report to cy ([unset: missing]).");
    // The run's context moved on (user = cy), yet every node shows what it froze.
    let again_root = wr.continue_workflow(rehydrate(&root.state_token)).unwrap();
    assert!(
        again_root
            .pending
            .as_ref()
            .unwrap()
            .prompt
            .starts_with("Work on Login bug for ada.\n\nBe quick, ada."),
        "{}",
        prompt(&again_root)
    );
    let again_b1 = wr.continue_workflow(rehydrate(&b1.state_token)).unwrap();
    assert!(
        prompt(&again_b1).starts_with("Report to bob ([unset: missing]).\n\nTake your time."),
        "{}",
        prompt(&again_b1)
    );
}

/// decision: D144
#[test]
fn a_branch_takes_the_first_matching_case_or_its_default() {
    let fs = MemFs::new();
    let wr = open(&fs);
    for (size, expected) in [
        (json!("s"), vec!["intake", "quick", "end"]),
        // Both cases match "m": the first wins.
        (json!("m"), vec!["intake", "quick", "end"]),
        (json!("l"), vec!["intake", "big", "end"]),
        (json!("xl"), vec!["intake", "ask", "end"]),
    ] {
        let out = start(
            &wr,
            "project.branch",
            json!({"size": size}),
            Autonomy::Guided,
        );
        assert_eq!(visit(&wr, out), expected, "{size}");
    }
}

/// decision: D142
#[test]
fn a_spent_attempt_budget_makes_the_next_blocked_attempt_a_user_only_dependency() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let out = start(&wr, "project.budget", json!({}), Autonomy::Guided);
    let first = next(&wr, &out, "draft", vec![], json!({}));
    assert_eq!(first.blockers[0].code, BlockerCode::InvalidRequiredOutput);
    // The author's message, then the rule itself: a message may only hint at what it checks.
    let (_, message) = &blockers(&first)[0];
    assert!(
        message.contains(
            "Say VERIFIED once you verified. (the rule: the notes must contain \"VERIFIED\" (exact case).)"
        ),
        "{message}"
    );
    let second = next(&wr, &first, "draft 2", vec![], json!({}));
    assert_eq!(second.blockers[0].code, BlockerCode::InvalidRequiredOutput);
    // Two blocked attempts spent the budget: the third is the user's.
    let third = next(&wr, &second, "draft 3", vec![], json!({}));
    assert_eq!(blockers(&third).len(), 1);
    let (code, message) = &blockers(&third)[0];
    assert_eq!(*code, BlockerCode::UserOnlyDependency);
    assert!(
        message.contains("blocked 2 time(s)")
            && message.contains("Say VERIFIED once you verified."),
        "{message}"
    );
    let fourth = next(&wr, &third, "draft 4", vec![], json!({}));
    assert_eq!(fourth.blockers[0].code, BlockerCode::UserOnlyDependency);
    // An acknowledgement that passes every check still completes the step.
    let done = next(&wr, &fourth, "VERIFIED with the user", vec![], json!({}));
    assert_eq!(done.kind, ExecutionKind::Ok);
    assert_eq!(pending(&done), "end");
    // `notesOptional`: no notes and no warning about them.
    let end = wr
        .continue_workflow(ContinueWorkflowInput {
            output: None,
            ..ack(&done, "", vec![])
        })
        .unwrap();
    assert!(end.is_complete);
    assert!(!end.warnings.iter().any(|w| w.code == "notes_missing"));
}

/// decision: D139
#[test]
fn replaying_an_advance_returns_identical_bytes() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let out = start(
        &wr,
        "project.loops",
        json!({"kind": "each", "slices": [{"name": "a"}, {"name": "b"}]}),
        Autonomy::Guided,
    );
    let input = with_context(ack(&out, "planned", vec![]), json!({"note": 1}));
    let first = wr.continue_workflow(input.clone()).unwrap();
    // The run's context changes on another branch; the replay still answers from the record.
    let fresh = wr.continue_workflow(rehydrate(&out.state_token)).unwrap();
    let _other = next(&wr, &fresh, "other", vec![], json!({"slices": []}));
    let again = wr.continue_workflow(input).unwrap();
    assert_eq!(
        serde_json::to_vec(&first).unwrap(),
        serde_json::to_vec(&again).unwrap()
    );
    assert_eq!(prompt(&again), "Build a (0, pass 1).");
    // A blocked attempt replays identically too.
    let blocked_in = with_context(ack(&first, "x", vec![]), json!({"slices": "none"}));
    let _ = wr.continue_workflow(blocked_in.clone()).unwrap();
    let b1 = wr.continue_workflow(blocked_in.clone()).unwrap();
    assert_eq!(b1.kind, ExecutionKind::Blocked);
    assert_eq!(b1.blockers[0].code, BlockerCode::InvalidRequiredOutput);
    let b2 = wr.continue_workflow(blocked_in).unwrap();
    assert_eq!(
        serde_json::to_vec(&b1).unwrap(),
        serde_json::to_vec(&b2).unwrap()
    );
}

/// decision: D141
#[test]
fn a_decision_outside_any_loop_is_checked_and_decides_nothing() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let out = start(&wr, "project.free_decision", json!({}), Autonomy::Guided);
    let missing = next(&wr, &out, "decided", vec![], json!({}));
    assert_eq!(missing.blockers[0].code, BlockerCode::MissingRequiredOutput);
    let decision = json!({"kind": "wr.loop_control", "loopId": "anything", "decision": "stop"});
    let done = next(&wr, &missing, "decided", vec![decision], json!({}));
    assert_eq!(done.kind, ExecutionKind::Ok, "{:?}", done.blockers);
    assert_eq!(pending(&done), "next");
}

/// A top-level step or loop skipped by its run condition runs later, out of order, once a call
/// makes the condition true: the first such item in sequence order first, then the forward walk
/// goes on from where it was, as the language selects "the first item not done whose condition
/// holds". Each revisit is traced; a rewind to a node before the context changed walks forward
/// from that node's own state, and a replay answers the recorded step.
///
/// decision: D154
#[test]
fn a_skipped_top_level_item_runs_once_a_later_call_makes_its_condition_true() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let out = start(&wr, "project.revisit", json!({}), Autonomy::Guided);
    assert_eq!(pending(&out), "gather");
    let at_middle = next(&wr, &out, "gathered", vec![], json!({}));
    assert_eq!(pending(&at_middle), "middle", "early and retry are skipped");
    let revisit = next(
        &wr,
        &at_middle,
        "middle done",
        vec![],
        json!({"ready": true, "retry": true}),
    );
    assert_eq!(
        pending(&revisit),
        "early",
        "the first skipped item whose condition holds now"
    );
    let mut seen = vec![pending(&revisit).to_owned()];
    let mut out = revisit.clone();
    while out.pending.is_some() {
        out = next(&wr, &out, "done", vec![], json!({}));
        if out.pending.is_some() {
            seen.push(pending(&out).to_owned());
        }
    }
    assert_eq!(
        seen,
        ["early", "again", "late", "wrap"],
        "then the skipped loop, then forward from where the walk was (middle is not run again)"
    );
    let entries = trace(&wr, &out);
    let revisited: Vec<&str> = entries
        .iter()
        .filter(|e| e.summary.contains("runs now, out of order"))
        .map(|e| &*e.summary)
        .collect();
    assert_eq!(revisited.len(), 2, "{revisited:?}");
    assert!(
        revisited[0].starts_with("Step 'early'") && revisited[0].contains("ready"),
        "{revisited:?}"
    );
    assert!(revisited[1].starts_with("Loop 'retry'"), "{revisited:?}");

    // A replay of the ack that made the condition true answers the recorded step.
    let replayed = wr
        .continue_workflow(with_context(
            ack(&at_middle, "middle done", vec![]),
            json!({"ready": true, "retry": true}),
        ))
        .unwrap();
    assert_eq!(pending(&replayed), "early");
    assert_eq!(replayed.state_token, revisit.state_token);

    // A rewind to `middle` that leaves the context alone walks forward from that node.
    let old = wr
        .continue_workflow(rehydrate(&at_middle.state_token))
        .unwrap();
    let fork = wr
        .continue_workflow(with_context(ack(&old, "middle again", vec![]), json!({})))
        .unwrap();
    // The run's context is now `ready: true` (set on the other branch, locks §18.2), so the
    // fork revisits too: the context is the run's, the revisit list the node's.
    assert_eq!(pending(&fork), "early");
}

/// A snapshot recorded before decision D154 (no `revisit`) walks forward only: a run in flight
/// keeps the behaviour it started with.
///
/// decision: D154
#[test]
fn a_snapshot_without_revisit_walks_forward_only() {
    use workrail::compiler::{CompileContext, compile};
    use workrail::engine::{self, AdvanceOutcome, BranchFacts};
    use workrail_spec::snapshot::EngineState;
    let compiled = compile(
        &serde_json::from_str::<Value>(REVISIT).unwrap(),
        &CompileContext::load("project"),
    )
    .unwrap()
    .snapshot;
    let started = engine::start_with(&compiled, &EngineState::Init, &Map::new()).unwrap();
    let facts = BranchFacts::default();
    let AdvanceOutcome::Advanced(at_middle) = engine::advance_on(
        &compiled,
        &started.state,
        &Default::default(),
        Autonomy::Guided,
        &facts,
    )
    .unwrap() else {
        panic!("gather advances")
    };
    let EngineState::Running { revisit, .. } = &at_middle.state else {
        panic!("running")
    };
    assert!(revisit.is_some(), "the skips are remembered");
    let ready = BranchFacts {
        context: object(json!({"ready": true, "retry": true})),
        ..BranchFacts::default()
    };
    let next_of = |state: &EngineState| match engine::advance_on(
        &compiled,
        state,
        &Default::default(),
        Autonomy::Guided,
        &ready,
    )
    .unwrap()
    {
        AdvanceOutcome::Advanced(t) => t.state.pending_step().map(|p| p.step_id.to_string()),
        other => panic!("{other:?}"),
    };
    assert_eq!(next_of(&at_middle.state).as_deref(), Some("early"));
    let EngineState::Running {
        completed,
        loop_stack,
        pending,
        ..
    } = at_middle.state.clone()
    else {
        panic!("running")
    };
    let recorded_before = EngineState::Running {
        completed,
        loop_stack,
        pending,
        revisit: None,
    };
    assert_eq!(next_of(&recorded_before).as_deref(), Some("late"));
}

/// A decision of a workflow written in the language is read as the language reads it: without
/// `loopId` it names the enclosing loop, the loop's `conditionSource.loopId` names it too, and a
/// `metadata` object is allowed; what the agent sent is what is recorded. A `loopId` naming no
/// such loop, and malformed `metadata`, still block with the field named.
///
/// decision: D209
#[test]
fn a_language_decision_may_leave_the_loop_out_name_its_label_and_carry_metadata() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let out = start(
        &wr,
        "project.language_decisions",
        json!({}),
        Autonomy::Guided,
    );
    assert_eq!(pending(&out), "review");
    let at_decide = next(&wr, &out, "reviewed", vec![], json!({}));
    assert_eq!(pending(&at_decide), "decide");
    let example = &at_decide.pending.as_ref().unwrap().required_artifact;
    assert_eq!(
        example.as_ref().unwrap().example["loopId"],
        "review-loop",
        "inside the loop the example names it"
    );

    // As the workflow's prompt shows it, with the language's metadata.
    let plain = json!({"kind": "wr.loop_control", "decision": "continue",
        "metadata": {"reason": "Two findings open.", "issuesFound": 2, "iterationIndex": 0, "confidence": 70}});
    let again = next(&wr, &at_decide, "continue", vec![plain.clone()], json!({}));
    assert_eq!(again.kind, ExecutionKind::Ok, "{:?}", blockers(&again));
    assert_eq!(pending(&again), "review", "the decision continued the loop");
    let recorded: Vec<Value> = session_events(&wr, &again)
        .iter()
        .filter_map(|e| match e.data() {
            EventData::NodeOutputAppended(o) => serde_json::to_value(&o.payload).ok(),
            _ => None,
        })
        .filter(|p| p["payloadKind"] == "artifact_ref")
        .collect();
    assert!(!recorded.is_empty(), "the artifact is recorded");

    // Malformed metadata, then a loop the workflow does not have: blocked, the field named.
    let at_decide = next(&wr, &again, "reviewed", vec![], json!({}));
    let bad =
        json!({"kind": "wr.loop_control", "decision": "stop", "metadata": {"confidence": 140}});
    let blocked = next(&wr, &at_decide, "stop", vec![bad], json!({}));
    let found = blockers(&blocked);
    assert_eq!(found[0].0, BlockerCode::InvalidRequiredOutput, "{found:?}");
    assert!(found[0].1.contains("metadata.confidence"), "{found:?}");
    let other = json!({"kind": "wr.loop_control", "loopId": "other", "decision": "stop"});
    let blocked = next(&wr, &blocked, "stop", vec![other], json!({}));
    let found = blockers(&blocked);
    assert!(
        found[0]
            .1
            .contains("does not match the enclosing loop 'review-loop'"),
        "{found:?}"
    );

    // The loop's conditionSource label names it.
    let labelled = json!({"kind": "wr.loop_control", "loopId": "review-pass", "decision": "stop"});
    let done = next(&wr, &blocked, "stop", vec![labelled], json!({}));
    assert_eq!(done.kind, ExecutionKind::Ok, "{:?}", blockers(&done));
    assert_eq!(pending(&done), "after", "the decision stopped the loop");
}

/// Outside any loop a language decision decides nothing, and the example shown names no loop
/// (the pack's example loop is not one of the workflow's); the language's form passes.
///
/// decision: D209
#[test]
fn a_language_decision_outside_any_loop_shows_and_takes_no_loop_id() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let out = start(&wr, "project.free_decision", json!({}), Autonomy::Guided);
    let example = &out.pending.as_ref().unwrap().required_artifact;
    let example = &example.as_ref().unwrap().example;
    assert!(example.get("loopId").is_none(), "{example}");
    let missing = next(&wr, &out, "decided", vec![], json!({}));
    let fix = missing.blockers[0].suggested_fix.as_ref().unwrap().as_str();
    assert!(
        fix.contains("wr.loop_control") && !fix.contains("loopId"),
        "{fix}"
    );
    let plain = json!({"kind": "wr.loop_control", "decision": "stop", "metadata": {"reason": "Nothing to loop over."}});
    let done = next(&wr, &missing, "decided", vec![plain], json!({}));
    assert_eq!(done.kind, ExecutionKind::Ok, "{:?}", blockers(&done));
    assert_eq!(pending(&done), "next");
}

/// The native spelling keeps the locked contract: `loopId` is required and names the enclosing
/// loop, and no other field is allowed.
///
/// lock: L-LOOP-CONTROL-ARTIFACT
/// decision: D209
#[test]
fn a_native_decision_still_names_its_loop_and_nothing_else() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let out = start(&wr, "project.native_decisions", json!({}), Autonomy::Guided);
    let plain = json!({"kind": "wr.loop_control", "decision": "continue"});
    let blocked = next(&wr, &out, "decided", vec![plain], json!({}));
    let found = blockers(&blocked);
    assert_eq!(found[0].0, BlockerCode::InvalidRequiredOutput, "{found:?}");
    assert!(found[0].1.contains("loopId"), "{found:?}");
    let with_metadata = json!({"kind": "wr.loop_control", "loopId": "work", "decision": "continue", "metadata": {"reason": "x"}});
    let blocked = next(&wr, &blocked, "decided", vec![with_metadata], json!({}));
    let found = blockers(&blocked);
    assert!(found[0].1.contains("metadata"), "{found:?}");
    let named = json!({"kind": "wr.loop_control", "loopId": "work", "decision": "stop"});
    let done = next(&wr, &blocked, "decided", vec![named], json!({}));
    assert_eq!(done.kind, ExecutionKind::Ok, "{:?}", blockers(&done));
    assert_eq!(pending(&done), "after");
}

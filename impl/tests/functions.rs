//! Function definitions in rewind and resumption context (locks §5): `functionDefinitions` at
//! workflow, loop and step scope, `functionReferences`, their pinning in the compiled snapshot,
//! and their expansion into `pending.prompt`, ordered and bounded.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use std::sync::Arc;

use protocol_support::{ack, loop_control, pending, rehydrate};
use serde_json::{Value, json};
use workrail::compiler::error::CompileErrorCode;
use workrail::compiler::{CompileContext, compile};
use workrail::entropy::SeededEntropy;
use workrail::protocol::Workrail;
use workrail::sources::memory::MemorySource;
use workrail::sources::{Catalog, WorkflowSource};
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail_spec::budget::{FUNCTION_DEFINITIONS_MAX_BYTES, TRUNCATION_MARKER};
use workrail_spec::closed::WorkflowSourceKind;
use workrail_spec::compiled::{CompiledWarningCode, FunctionScope};
use workrail_spec::tools::{ExecutionOutput, StartWorkflowInput};

/// Definitions at all three scopes: `cite` is defined by the workflow and shadowed by the loop;
/// `slice` belongs to one step; `unused_helper` is referenced nowhere.
fn functions_workflow() -> Value {
    json!({
        "id": "project.functions",
        "name": "Functions",
        "description": "Definitions at every scope.",
        "functionDefinitions": [
            {"name": "update_log", "definition": "Append one line to DECISIONS.md: what you decided and why."},
            {"name": "cite", "definition": "Name the document a claim comes from.",
             "parameters": [{"name": "source", "type": "string", "required": true, "description": "a URL or a file path"}]},
            {"name": "unused_helper", "definition": "Never referenced."}
        ],
        "conditions": [{"id": "again", "kind": "loop_control", "continueWhen": "continue"}],
        "steps": [
            {"id": "plan", "title": "Plan", "prompt": "Plan the work, then call update_log()."},
            {"type": "loop", "loopId": "build", "while": {"kind": "condition_ref", "conditionId": "again"}, "maxIterations": 3,
             "functionDefinitions": [{"name": "cite", "scope": "loop", "definition": "Name the test that proves the slice."}],
             "body": [
                {"id": "implement", "title": "Implement", "prompt": "Implement the next slice.",
                 "functionReferences": ["update_log()", "cite()", "slice()"],
                 "functionDefinitions": [{"name": "slice", "definition": "A change that builds and passes its tests on its own."}]},
                {"id": "decide", "title": "Decide", "prompt": "Decide whether another slice is needed.", "output": {"contractRef": "wr.contracts.loop_control"}}
             ]},
            {"id": "wrap", "title": "Wrap up", "prompt": "Summarize; cite() every source."}
        ]
    })
}

fn compiled(src: &Value) -> workrail::compiler::Compiled {
    compile(src, &CompileContext::load("project")).unwrap_or_else(|e| panic!("{e}"))
}

fn names(step: &workrail_spec::compiled::CompiledStep) -> Vec<(FunctionScope, &str)> {
    step.functions
        .iter()
        .map(|f| (f.scope, f.name.as_str()))
        .collect()
}

/// lock: L-COMPILE-FUNCTIONS-PINNED
#[test]
fn referenced_definitions_are_resolved_per_step_and_pinned_in_the_hash() {
    let c = compiled(&functions_workflow());
    let step = |id: &str| {
        c.snapshot
            .step(&workrail_spec::ids::StepId::parse(id).unwrap())
            .unwrap()
            .clone()
    };
    // A call in the prompt text references; the nearest scope wins; order is (scope, name).
    assert_eq!(
        names(&step("plan")),
        [(FunctionScope::Workflow, "update_log")]
    );
    assert_eq!(
        names(&step("implement")),
        [
            (FunctionScope::Step, "slice"),
            (FunctionScope::Loop, "cite"),
            (FunctionScope::Workflow, "update_log"),
        ]
    );
    assert_eq!(
        step("implement").functions[1].definition,
        "Name the test that proves the slice."
    );
    // Outside the loop, the workflow's `cite` is the visible one.
    assert_eq!(names(&step("wrap")), [(FunctionScope::Workflow, "cite")]);
    assert_eq!(
        step("wrap").functions[0].parameters[0].name,
        "source",
        "parameters are pinned too"
    );
    assert!(names(&step("decide")).is_empty());
    // The definitions are in the snapshot's own prompt: nothing outside it is needed.
    assert!(
        step("implement")
            .prompt
            .ends_with("## Functions\n- slice(): A change that builds and passes its tests on its own.\n- cite(): Name the test that proves the slice.\n- update_log(): Append one line to DECISIONS.md: what you decided and why."),
        "{}",
        step("implement").prompt
    );
    assert!(
        step("wrap")
            .prompt
            .contains("- cite(source: string): Name the document a claim comes from.\n  - source: a URL or a file path")
    );
    // An unreferenced definition is reported, not pinned.
    assert!(c.snapshot.body.compiled_warnings.iter().any(|w| {
        w.code == CompiledWarningCode::UnusedFunction
            && w.pointer.as_deref() == Some("/functionDefinitions/2")
    }));
    // Changing a referenced definition, or the wiring, changes workflowHash.
    let mut edited = functions_workflow();
    edited["steps"][1]["functionDefinitions"][0]["definition"] = json!("Name the failing test.");
    assert_ne!(compiled(&edited).workflow_hash, c.workflow_hash);
    let mut rewired = functions_workflow();
    rewired["steps"][1]["body"][0]["functionReferences"] = json!(["cite()", "slice()"]);
    let rewired = compiled(&rewired);
    assert_ne!(rewired.workflow_hash, c.workflow_hash);
    let implement = rewired
        .snapshot
        .step(&workrail_spec::ids::StepId::parse("implement").unwrap())
        .unwrap();
    assert_eq!(
        names(implement),
        [
            (FunctionScope::Step, "slice"),
            (FunctionScope::Loop, "cite")
        ]
    );
}

/// lock: L-VERSION-ADDITIVE-ONLY
#[test]
fn steps_without_functions_serialize_exactly_as_before_the_field_existed() {
    // `functions` is an optional field added within schema version 1: absent when empty, so
    // every workflow compiled before it keeps its bytes and its hash.
    let mut plain = functions_workflow();
    plain.as_object_mut().unwrap().remove("functionDefinitions");
    plain["steps"][1]
        .as_object_mut()
        .unwrap()
        .remove("functionDefinitions");
    let body = plain["steps"][1]["body"][0].as_object_mut().unwrap();
    body.remove("functionDefinitions");
    body.remove("functionReferences");
    let c = compiled(&plain);
    let text = String::from_utf8(c.canonical.bytes().to_vec()).unwrap();
    assert!(!text.contains("\"functions\""), "{text}");
    // A reader of this version accepts the snapshot with and without the field.
    let with = compiled(&functions_workflow());
    for bytes in [&c.canonical, &with.canonical] {
        let text = std::str::from_utf8(bytes.bytes()).unwrap();
        workrail_spec::compiled::CompiledWorkflowSnapshotV1::from_json_str(text).unwrap();
    }
}

#[test]
fn unknown_and_malformed_references_are_compile_errors_with_pointers() {
    let mut src = functions_workflow();
    src["steps"][0]["functionReferences"] = json!(["slice()", "not a name"]);
    let errors = compile(&src, &CompileContext::load("project")).unwrap_err();
    let unknown = errors
        .errors()
        .iter()
        .find(|e| e.code == CompileErrorCode::InvalidValue)
        .expect("a malformed reference is rejected");
    assert_eq!(unknown.pointer, "/steps/0/functionReferences/1");
    // `slice` is defined by a step inside the loop: not visible from `plan`. Both problems are
    // reported at once only when the list parses, so fix the malformed one and compile again.
    src["steps"][0]["functionReferences"] = json!(["slice()"]);
    let errors = compile(&src, &CompileContext::load("project")).unwrap_err();
    let e = &errors.errors()[0];
    assert_eq!(e.code, CompileErrorCode::UnknownFunction);
    assert_eq!(e.pointer, "/steps/0/functionReferences/0");
    assert!(e.suggestion.contains("`update_log()`"), "{}", e.suggestion);
    // A definition that restates the wrong scope, or a name twice in one scope.
    let mut src = functions_workflow();
    src["functionDefinitions"][0]["scope"] = json!("step");
    let errors = compile(&src, &CompileContext::load("project")).unwrap_err();
    let e = &errors.errors()[0];
    assert_eq!(
        (e.code, e.pointer.as_str()),
        (
            CompileErrorCode::InvalidValue,
            "/functionDefinitions/0/scope"
        )
    );
    let mut src = functions_workflow();
    src["functionDefinitions"][1]["name"] = json!("update_log");
    let errors = compile(&src, &CompileContext::load("project")).unwrap_err();
    let e = &errors.errors()[0];
    assert_eq!(
        (e.code, e.pointer.as_str()),
        (CompileErrorCode::DuplicateId, "/functionDefinitions/1/name")
    );
    assert!(
        e.message.contains("/functionDefinitions/0"),
        "{}",
        e.message
    );
}

fn open(fs: &MemFs, workflow: &Value) -> Workrail {
    let text = workflow.to_string();
    let loader: workrail::protocol::CatalogLoader = Arc::new(move || {
        let project = MemorySource::new(WorkflowSourceKind::Project)
            .with("project/workflows/functions.json", &text);
        let sources: Vec<&dyn WorkflowSource> = vec![&project];
        Arc::new(Catalog::load(&sources))
    });
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    Workrail::with_parts(shared, loader, Arc::new(SeededEntropy::new(7))).unwrap()
}

fn start(wr: &Workrail, id: &str) -> ExecutionOutput {
    wr.start_workflow(StartWorkflowInput {
        workflow_id: id.into(),
        context: None,
        preferences: vec![],
        preset: None,
    })
    .unwrap()
}

fn prompt(out: &ExecutionOutput) -> &str {
    &out.pending.as_ref().unwrap().prompt
}

/// lock: L-COMPILE-FUNCTIONS-REHYDRATE, L-COMPILE-FUNCTIONS-ORDER
#[test]
fn a_rehydration_expands_the_definitions_into_the_prompt_at_a_tip_and_at_a_rewind() {
    let fs = MemFs::new();
    let wr = open(&fs, &functions_workflow());
    let first = start(&wr, "project.functions");
    assert_eq!(pending(&first), "plan");
    let second = wr
        .continue_workflow(ack(&first, "Planned: three slices.", vec![]))
        .unwrap();
    assert_eq!(pending(&second), "implement");

    // At a tip: the pending step's definitions, step scope, then loop, then workflow.
    let at_tip = wr
        .continue_workflow(rehydrate(&second.state_token))
        .unwrap();
    let text = prompt(&at_tip);
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle:?} missing from {text}"))
    };
    assert!(
        at("- slice(): ") < at("- cite(): Name the test")
            && at("- cite(): ") < at("- update_log(): ")
    );
    // In the text, never as separate fields: the pending view has only its usual members.
    let pending_json = serde_json::to_value(at_tip.pending.as_ref().unwrap()).unwrap();
    let keys: Vec<&str> = pending_json
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert!(
        keys.iter()
            .all(|k| !k.to_ascii_lowercase().contains("function")),
        "{keys:?}"
    );

    let third = wr
        .continue_workflow(ack(&second, "Implemented slice one.", vec![]))
        .unwrap();
    assert_eq!(pending(&third), "decide");
    let _fourth = wr
        .continue_workflow(ack(
            &third,
            "Decided to continue.",
            vec![loop_control("continue")],
        ))
        .unwrap();

    // A rewind to the start: the pending step `plan` shows its own definition first; the recap
    // shows the preferred branch below it (plan, implement and decide were done), so the
    // definitions `implement` references follow, minus what `plan` already shows, ordered by
    // scope then name.
    let rewound = wr.continue_workflow(rehydrate(&first.state_token)).unwrap();
    assert!(rewound.recap.is_some());
    let text = prompt(&rewound);
    let own = text.find("## Functions\n- update_log(): ").expect(text);
    let branch = text
        .find("## Functions in the branch context\n- slice(): A change that builds and passes its tests on its own.\n- cite(): Name the test that proves the slice.")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(own < branch);
    assert_eq!(
        text.matches("- update_log(): ").count(),
        1,
        "a definition is shown once: {text}"
    );
    // The same call again is byte-identical (rehydration is deterministic and writes nothing).
    let again = wr.continue_workflow(rehydrate(&first.state_token)).unwrap();
    assert_eq!(prompt(&again), text);
    // An advance response shows the step's own definitions as well.
    assert!(prompt(&second).contains("## Functions\n- slice(): "));
}

/// lock: L-COMPILE-FUNCTIONS-TRUNCATION
#[test]
fn definitions_over_the_budget_are_cut_with_the_marker_and_an_omission_note() {
    let definitions: Vec<Value> = (0..30)
        .map(|i| json!({"name": format!("f{i:02}"), "definition": format!("{i:02} {}", "word ".repeat(60))}))
        .collect();
    let refs: Vec<String> = (0..30).map(|i| format!("f{i:02}()")).collect();
    let src = json!({
        "id": "project.many_functions",
        "name": "Many functions",
        "description": "More definitions than the budget holds.",
        "functionDefinitions": definitions,
        "steps": [{"id": "work", "title": "Work", "prompt": "Work.", "functionReferences": refs}]
    });
    let c = compiled(&src);
    let step = &c.snapshot.body.steps[0];
    assert_eq!(step.functions.len(), 30, "every reference is pinned whole");
    let section = &step.prompt[step.prompt.find("## Functions").unwrap()..];
    assert!(
        section.len() <= FUNCTION_DEFINITIONS_MAX_BYTES,
        "{}",
        section.len()
    );
    let (body, note) = section
        .rsplit_once(&format!("{TRUNCATION_MARKER}\n"))
        .expect("the canonical marker ends the cut text");
    let shown = step
        .functions
        .iter()
        .filter(|f| body.contains(&format!("- {}(): {}", f.name, f.definition)))
        .count();
    assert!(shown > 0 && shown < 30);
    assert_eq!(
        note,
        format!("Omitted {} function definitions.", 30 - shown)
    );
    // The first definitions in include order are the ones shown.
    assert!(body.contains("- f00(): "));
    assert!(!body.contains("- f29(): "));
}

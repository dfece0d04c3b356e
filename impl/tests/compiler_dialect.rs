//! The WorkRail 3.x spelling of the workflow language compiles into the pinned snapshot with
//! nothing silently dropped: every field either shapes what runs, is shown to the agent in the
//! locked section order, or is kept verbatim (and shown by `inspect_workflow`); v1-era fields
//! load with a warning naming their v2 spelling; legacy-id workflows keep unknown fields while
//! namespaced ones refuse them; routine templates, parallel steps, audit and verification steps
//! expand as 3.x runs them; and the new refs, contracts and feature resolve.
//!
//! Guards against the state before: `workrail validate` refused every workflow written for
//! WorkRail 3.x, the two-step README example included (for `version`).
//!
//! The fixtures are in `fixtures/workflows/language/`; the compiled goldens next to them are
//! regenerated with `WORKRAIL_BLESS=1 cargo test -p workrail --test suite compiler_dialect::`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use workrail::compiler::error::{CompileErrorCode as Code, CompileErrors};
use workrail::compiler::library::WorkflowLibrary;
use workrail::compiler::{CompileContext, Compiled, compile};
use workrail::engine::contract::validator;
use workrail::entropy::SeededEntropy;
use workrail::protocol::{CatalogLoader, Workrail};
use workrail::sources::memory::MemorySource;
use workrail::sources::{Catalog, WorkflowSource};
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail_spec::closed::{StepSource, WorkflowKind, WorkflowSourceKind};
use workrail_spec::compiled::{
    CompiledStep, CompiledWarningCode, CompiledWorkflowSnapshotV1, Condition,
};
use workrail_spec::jcs::to_canonical_string;
use workrail_spec::tools::{
    ContinueWorkflowInput, ExecutionOutput, InspectMode, InspectWorkflowInput, OutputInput,
    StartWorkflowInput,
};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/workflows/language")
}

fn fixture(name: &str) -> Value {
    serde_json::from_str(&fs::read_to_string(dir().join(format!("{name}.json"))).unwrap()).unwrap()
}

/// The library of the fixture routines (as a project source would hold them).
fn library(routines: &[Value]) -> Arc<WorkflowLibrary> {
    let texts: Vec<String> = routines.iter().map(Value::to_string).collect();
    Arc::new(WorkflowLibrary::from_documents(
        texts.iter().map(|t| (false, t.as_str())),
    ))
}

fn ctx() -> CompileContext {
    CompileContext::load("project").with_library(library(&[fixture("routine-checklist")]))
}

fn compiled(source: &Value) -> Compiled {
    compile(source, &ctx()).unwrap_or_else(|e| panic!("does not compile:\n{e}"))
}

fn rejected(source: &Value) -> CompileErrors {
    compile(source, &ctx()).expect_err("the source must be rejected")
}

fn step<'s>(snapshot: &'s CompiledWorkflowSnapshotV1, id: &str) -> &'s CompiledStep {
    snapshot
        .body
        .steps
        .iter()
        .find(|s| s.step_id.as_str() == id)
        .unwrap_or_else(|| panic!("no step {id}"))
}

fn warnings(c: &Compiled, code: CompiledWarningCode) -> Vec<(String, String)> {
    c.snapshot
        .body
        .compiled_warnings
        .iter()
        .filter(|w| w.code == code)
        .map(|w| (w.pointer.clone().unwrap_or_default(), w.message.clone()))
        .collect()
}

/// Asserts that `needles` appear in `haystack` in this order.
fn in_order(haystack: &str, needles: &[&str]) {
    let mut at = 0;
    for needle in needles {
        let found = haystack[at..]
            .find(needle)
            .unwrap_or_else(|| panic!("{needle:?} missing after byte {at} of:\n{haystack}"));
        at += found + needle.len();
    }
}

/// decision: D146
#[test]
fn content_fields_render_in_the_locked_section_order() {
    let c = compiled(&fixture("content"));
    let first = step(&c.snapshot, "collect");
    in_order(
        &first.prompt,
        &[
            "## Role\nYou are a release engineer",
            "## Workflow rules\n- Describe changes by what a user notices",
            "- Never promise a date",
            "## Before you start\n",
            "- The release is tagged in the repository.",
            "## Questions to settle first\n",
            "- Which audience reads these notes",
            "## References\n",
            "- Style guide (`docs/style.md`, in the workspace; authoritative: follow it): House style",
            "- Older notes (`notes/`, relative to the workflow package; background)",
            "## Guidance\n- Skip merges that only touch tests.",
            "Collect every change merged since the previous tag.",
            "## Files\n",
            "## Function calls\n",
            "- list_changes() with {\"from\":\"v4.1\"}",
            "## Metrics\nAfter each commit",
            "## Functions\n- list_changes(from: string)",
        ],
    );
    // The call pins the definition it calls (no `unused_function` warning).
    assert_eq!(first.functions.len(), 1);
    assert!(warnings(&c, CompiledWarningCode::UnusedFunction).is_empty());
    // Workflow sections are shown once, on the first step.
    let draft = step(&c.snapshot, "draft");
    assert!(
        !draft.prompt.contains("## Workflow rules"),
        "{}",
        draft.prompt
    );
    // subagent_guidance reaches the promptBlocks step, with its ref, and not the prompt step.
    assert!(
        draft
            .prompt
            .contains("Delegate only to generic WorkRail executors")
    );
    assert!(
        draft
            .injected_refs
            .iter()
            .any(|r| r.ref_id == "wr.refs.parallelize_cognition_serialize_synthesis")
    );
    assert!(
        !first
            .prompt
            .contains("Delegate only to generic WorkRail executors")
    );
    // metricsProfile coding: the commit line everywhere, the final report only on the last
    // working step (the final loop's last body step that is not its decision step).
    for s in &c.snapshot.body.steps {
        assert!(s.prompt.contains("metrics_commit_shas"), "{}", s.step_id);
        let last = s.step_id.as_str() == "revise";
        assert_eq!(s.prompt.contains("metrics_outcome"), last, "{}", s.step_id);
    }
}

/// decision: D146
#[test]
fn display_only_fields_are_kept_verbatim_and_renamed_fields_take_effect() {
    let source = fixture("content");
    let c = compiled(&source);
    let body = &c.snapshot.body;
    for key in [
        "version",
        "about",
        "examples",
        "validatedAgainstSpecVersion",
        "extensionPoints",
        "modelTier",
        "metricsProfile",
    ] {
        assert_eq!(body.kept.get(key), source.get(key), "{key}");
    }
    let collect = step(&c.snapshot, "collect");
    assert_eq!(
        collect.language.kept.get("modelTier"),
        Some(&json!("lightweight"))
    );
    assert_eq!(
        collect.language.kept.get("hasValidation"),
        Some(&json!(false))
    );
    assert_eq!(body.loops[0].loop_id.as_str(), "polish");
    assert_eq!(
        body.loops[0].kept.get("title"),
        Some(&json!("Polish until approved"))
    );
    // recommendedPreferences is recommendations; outputContract is output.contractRef.
    assert_eq!(
        serde_json::to_value(&body.recommendations).unwrap(),
        json!({"recommendedAutonomy": "guided"})
    );
    let draft = step(&c.snapshot, "draft");
    assert_eq!(
        draft.output.as_ref().unwrap().contract_ref.as_deref(),
        Some("wr.contracts.coding_handoff")
    );
    assert!(
        body.contracts
            .iter()
            .any(|p| p.contract_ref == "wr.contracts.coding_handoff")
    );
}

/// decision: D146
#[test]
fn v1_era_fields_warn_with_their_v2_spelling() {
    let c = compiled(&fixture("content"));
    let v1 = warnings(&c, CompiledWarningCode::V1Field);
    let pointers: Vec<&str> = v1.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        pointers,
        vec![
            "/recommendedPreferences",
            "/steps/0/guidance",
            "/steps/0/hasValidation",
            "/steps/1/outputContract",
            "/steps/2/id",
            "/version",
        ]
    );
    for (pointer, spelling) in [
        ("/recommendedPreferences", "`recommendations`"),
        ("/steps/0/guidance", "`promptBlocks.constraints`"),
        ("/steps/1/outputContract", "`output.contractRef`"),
        ("/steps/2/id", "`loopId`"),
        ("/version", "`workflowHash`"),
    ] {
        let message = &v1.iter().find(|(p, _)| p == pointer).unwrap().1;
        assert!(message.contains(spelling), "{pointer}: {message}");
    }
    // Two spellings of one field that disagree are an error, not a silent choice.
    let mut both = fixture("content");
    both["recommendations"] = json!({"recommendedAutonomy": "full_auto_never_stop"});
    let errs = rejected(&both);
    assert!(
        errs.find(Code::InvalidValue, "/recommendedPreferences")
            .is_some(),
        "{errs}"
    );
    let mut both = fixture("content");
    both["steps"][1]["output"] = json!({"contractRef": "wr.contracts.review_verdict"});
    assert!(
        rejected(&both)
            .find(Code::InvalidValue, "/steps/1/outputContract")
            .is_some()
    );
}

/// An artifact asked for but not required has no v2 spelling: it is an output hint, and the
/// field is kept.
#[test]
fn an_optional_output_contract_is_a_hint_and_is_kept() {
    let mut source = fixture("content");
    source["steps"][1]["outputContract"]["required"] = json!(false);
    let c = compiled(&source);
    let draft = step(&c.snapshot, "draft");
    let output = draft.output.as_ref().unwrap();
    assert_eq!(output.contract_ref, None);
    assert!(output.hints["artifact"].contains("wr.contracts.coding_handoff"));
    assert_eq!(
        draft.language.kept.get("outputContract"),
        Some(&json!({"contractRef": "wr.contracts.coding_handoff", "required": false}))
    );
}

/// decision: D148
#[test]
fn verification_and_audit_inject_steps_after_their_step() {
    let c = compiled(&fixture("content"));
    let ids: Vec<&str> = c
        .snapshot
        .body
        .steps
        .iter()
        .map(|s| s.step_id.as_str())
        .collect();
    assert_eq!(
        ids,
        vec![
            "collect",
            "draft",
            "draft__verification",
            "draft__audit",
            "revise",
            "decide"
        ]
    );
    let verify = step(&c.snapshot, "draft__verification");
    assert_eq!(verify.title, "Verify: Draft the notes");
    assert!(
        verify.prompt.contains("```bash\nmake notes-lint\n```"),
        "{}",
        verify.prompt
    );
    assert_eq!(verify.provenance.source, StepSource::TemplateInjected);
    assert_eq!(
        verify.provenance.origin_id.as_deref(),
        Some("draft#verification")
    );
    let audit = step(&c.snapshot, "draft__audit");
    assert!(
        audit
            .prompt
            .contains("- Every entry names a user-visible effect.")
    );
    assert_eq!(audit.provenance.origin_id.as_deref(), Some("draft#audit"));
}

/// decision: D147; lock: L-NS-LEGACY-RUNNABLE
#[test]
fn a_legacy_workflow_keeps_fields_neither_spelling_defines_with_warnings() {
    let source = fixture("legacy_fields");
    let c = compiled(&source);
    let body = &c.snapshot.body;
    for key in ["tips", "tags", "examples", "version"] {
        assert_eq!(body.kept.get(key), source.get(key), "{key}");
    }
    assert_eq!(
        body.steps[0].language.kept.get("expectedOutput"),
        Some(&json!("Three short lines."))
    );
    let kept = warnings(&c, CompiledWarningCode::UnknownFieldKept);
    let pointers: Vec<&str> = kept.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        pointers,
        vec!["/examples", "/steps/0/expectedOutput", "/tags", "/tips"]
    );
    assert_eq!(warnings(&c, CompiledWarningCode::LegacyWorkflowId).len(), 1);
}

/// decision: D147; lock: L-AUTHOR-NO-INLINE-SCHEMA
#[test]
fn a_namespaced_workflow_refuses_fields_outside_both_spellings() {
    let mut source = fixture("legacy_fields");
    source["id"] = json!("project.standup_notes");
    let errs = rejected(&source);
    for pointer in ["/tips", "/tags", "/steps/0/expectedOutput"] {
        assert!(
            errs.find(Code::UnknownField, pointer).is_some(),
            "{pointer}: {errs}"
        );
    }
    assert!(
        errs.find(Code::WrongType, "/examples/0").is_some(),
        "{errs}"
    );
    // Inline schemas stay errors in legacy workflows too.
    let mut legacy = fixture("legacy_fields");
    legacy["outputSchema"] = json!({"type": "object"});
    let errs = rejected(&legacy);
    assert!(
        errs.find(Code::InlineSchema, "/outputSchema").is_some(),
        "{errs}"
    );
}

/// The README's "Create Your Own" shape (a legacy id and `version`) loads warn-only.
#[test]
fn the_create_your_own_shape_loads_with_warnings() {
    let c = compiled(&fixture("create_your_own"));
    assert_eq!(c.snapshot.body.steps.len(), 2);
    assert_eq!(warnings(&c, CompiledWarningCode::LegacyWorkflowId).len(), 1);
    assert_eq!(warnings(&c, CompiledWarningCode::V1Field).len(), 1);
    assert_eq!(c.snapshot.body.kept.get("version"), Some(&json!("1.0.0")));
}

/// decision: D145
#[test]
fn a_routine_template_expands_the_routine_in_place() {
    let c = compiled(&fixture("routine_caller"));
    let ids: Vec<&str> = c
        .snapshot
        .body
        .steps
        .iter()
        .map(|s| s.step_id.as_str())
        .collect();
    assert_eq!(ids, vec!["build", "check__walk", "check__write"]);
    let walk = step(&c.snapshot, "check__walk");
    assert_eq!(walk.title, "Check the feature branch");
    // A placeholder takes its argument; braces around anything else stay as written.
    assert!(
        walk.prompt.contains(
            "Check the feature branch item by item; a JSON note looks like {\"item\": 1}."
        ),
        "{}",
        walk.prompt
    );
    // The routine's metaGuidance becomes guidance of every expanded step.
    assert!(
        walk.prompt
            .contains("## Guidance\n- Report each unchecked item with the reason.")
    );
    let write = step(&c.snapshot, "check__write");
    assert!(
        write.prompt.contains("to checklist.md (12 items at most)"),
        "{}",
        write.prompt
    );
    assert!(
        write
            .prompt
            .contains("- Keep the file short.\n- Report each unchecked item")
    );
    for s in [walk, write] {
        assert_eq!(s.provenance.source, StepSource::TemplateInjected);
        assert_eq!(
            s.provenance.origin_id.as_deref(),
            Some("wr.templates.routine.checklist")
        );
        assert_eq!(
            s.language.kept.get("routineWorkflowId"),
            Some(&json!("project.routine-checklist"))
        );
    }
    assert_eq!(
        walk.language.kept.get("templateCaller"),
        Some(&json!({"title": "Run the checklist", "requireConfirmation": false}))
    );
}

/// decision: D145; lock: L-NS-WR-RESERVED, L-NS-DISCOVERY-SORT
#[test]
fn a_routine_answers_after_the_namespace_rename_and_bundled_routines_answer_first() {
    // `--fix` renames `wr.routine-checklist` outside the bundled source to
    // `project.routine_checklist`: the template still finds it.
    let mut renamed = fixture("routine-checklist");
    renamed["id"] = json!("project.routine_checklist");
    let ctx = CompileContext::load("project").with_library(library(&[renamed]));
    let c = compile(&fixture("routine_caller"), &ctx).unwrap();
    assert_eq!(
        c.snapshot.body.steps[1]
            .language
            .kept
            .get("routineWorkflowId"),
        Some(&json!("project.routine_checklist"))
    );
    // A bundled routine of the same name answers before any other source's.
    let mut bundled = fixture("routine-checklist");
    bundled["id"] = json!("wr.routine-checklist");
    bundled["steps"][0]["title"] = json!("Bundled check of {deliverable}");
    let bundled_text = bundled.to_string();
    let project_text = fixture("routine-checklist").to_string();
    let caller_text = fixture("routine_caller").to_string();
    let core = MemorySource::new(WorkflowSourceKind::Bundled).with("bundled/r.json", &bundled_text);
    let project = MemorySource::new(WorkflowSourceKind::Project)
        .with("project/workflows/r.json", &project_text)
        .with("project/workflows/caller.json", &caller_text);
    let sources: Vec<&dyn WorkflowSource> = vec![&core, &project];
    let catalog = Catalog::load(&sources);
    assert!(catalog.problems().is_empty(), "{:?}", catalog.problems());
    let caller = catalog.get("project.ship_feature").unwrap();
    assert_eq!(
        caller.compiled.snapshot.body.steps[1].title,
        "Bundled check of the feature branch"
    );
    // Discovery lists routines as routines, after the workflows of their namespace.
    let kinds: Vec<(String, WorkflowKind)> = catalog
        .summaries()
        .into_iter()
        .map(|s| (s.workflow_id.to_string(), s.kind))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("project.ship_feature".to_owned(), WorkflowKind::Workflow),
            (
                "project.routine-checklist".to_owned(),
                WorkflowKind::Routine
            ),
            ("wr.routine-checklist".to_owned(), WorkflowKind::Routine),
        ]
    );
}

/// decision: D145; lock: L-HASH-INPUTS
#[test]
fn an_edit_of_a_routine_changes_the_hash_of_every_workflow_that_expands_it() {
    let caller_text = fixture("routine_caller").to_string();
    let load = |routine: &Value| {
        let routine_text = routine.to_string();
        let project = MemorySource::new(WorkflowSourceKind::Project)
            .with("project/workflows/r.json", &routine_text)
            .with("project/workflows/caller.json", &caller_text);
        let sources: Vec<&dyn WorkflowSource> = vec![&project];
        let cache = workrail::sources::CatalogCache::new();
        cache
            .load(&sources)
            .get("project.ship_feature")
            .unwrap()
            .compiled
            .workflow_hash
            .clone()
    };
    let before = load(&fixture("routine-checklist"));
    let mut edited = fixture("routine-checklist");
    edited["steps"][1]["prompt"] = json!("Write the result to {reportFile}.");
    assert_ne!(before, load(&edited));
    assert_eq!(before, load(&fixture("routine-checklist")));
}

/// decision: D145
#[test]
fn routine_calls_fail_with_specific_errors() {
    // A placeholder without an argument.
    let mut missing = fixture("routine_caller");
    missing["steps"][1]["templateCall"]["args"] = json!({"deliverable": "x"});
    let errs = rejected(&missing);
    let e = errs
        .find(Code::MissingField, "/steps/1/templateCall/args")
        .unwrap_or_else(|| panic!("{errs}"));
    assert!(
        e.message.contains("`{reportFile}`") && e.message.contains("`{maxItems}`"),
        "{}",
        e.message
    );
    // An argument that cannot be text.
    let mut wrong = fixture("routine_caller");
    wrong["steps"][1]["templateCall"]["args"]["deliverable"] = json!(["a"]);
    assert!(
        rejected(&wrong)
            .find(Code::WrongType, "/steps/1/templateCall/args")
            .is_some()
    );
    // A routine no source defines: the known templates are listed.
    let mut unknown = fixture("routine_caller");
    unknown["steps"][1]["templateCall"]["templateId"] = json!("wr.templates.routine.nope");
    let errs = rejected(&unknown);
    let e = errs
        .find(Code::UnknownTemplate, "/steps/1/templateCall/templateId")
        .unwrap_or_else(|| panic!("{errs}"));
    assert!(
        e.suggestion.contains("wr.templates.routine.checklist"),
        "{}",
        e.suggestion
    );
    assert!(
        e.suggestion.contains("wr.templates.capability_probe"),
        "{}",
        e.suggestion
    );
    // Routines may not nest.
    let mut nested = fixture("routine-checklist");
    nested["steps"][0] = json!({"id": "inner", "title": "I", "templateCall": {"templateId": "wr.templates.routine.checklist"}});
    let ctx = CompileContext::load("project").with_library(library(&[nested]));
    let errs = compile(&fixture("routine_caller"), &ctx).unwrap_err();
    let e = errs
        .find(Code::InvalidValue, "/steps/1/templateCall")
        .unwrap();
    assert!(e.message.contains("may not nest"), "{}", e.message);
    // An expanded id over the step id budget names the caller's id.
    let mut long = fixture("routine_caller");
    long["steps"][1]["id"] = json!("c".repeat(60));
    assert!(
        rejected(&long)
            .find(Code::InvalidId, "/steps/1/id")
            .is_some()
    );
    // A builtin template called from a step expands like `type: template_call`.
    let probe = json!({"id": "project.p", "name": "P", "description": "d", "steps": [
        {"id": "probe", "title": "Probe", "templateCall": {"templateId": "wr.templates.capability_probe", "args": {"capability": "web_browsing", "when": "lazy_on_first_use"}}}
    ]});
    let c = compiled(&probe);
    assert_eq!(
        c.snapshot.body.steps[0].step_id.as_str(),
        "capability_probe_web_browsing"
    );
}

/// decision: D148
#[test]
fn a_parallel_step_is_a_spawn_step_and_a_synthesis_step() {
    let c = compiled(&fixture("parallel_review"));
    let ids: Vec<&str> = c
        .snapshot
        .body
        .steps
        .iter()
        .map(|s| s.step_id.as_str())
        .collect();
    assert_eq!(ids, vec!["prepare", "fan-out", "fan-out__synthesis"]);
    let spawn = step(&c.snapshot, "fan-out");
    assert_eq!(spawn.title, "Review in parallel");
    assert_eq!(spawn.provenance.source, StepSource::Authored);
    assert!(spawn.prompt.contains("start one subagent for each"));
    // One delegation is conditional, so every delegation is a fragment, in the authored order
    // (the unconditional ones without a condition); none is part of the prompt itself.
    assert!(!spawn.prompt.contains("### Delegation"), "{}", spawn.prompt);
    let fragments = &spawn.language.prompt_fragments;
    let ids: Vec<&str> = fragments.iter().map(|f| f.fragment_id.as_str()).collect();
    assert_eq!(ids, ["delegation-1", "delegation-2", "delegation-3"]);
    let texts: String = fragments
        .iter()
        .map(|f| f.text.as_str())
        .collect::<Vec<_>>()
        .join("\n\n");
    in_order(
        &texts,
        &[
            "### Delegation 1: project.routine-checklist",
            "- Workflow: `project.routine-checklist`",
            "- Goal: Check correctness against the fact sheet.",
            "- Model tier: mid",
            "  - `facts`: the current value of this run's context `factSheet`",
            "  - `deliverable`: `the change`",
            "### Delegation 2: project.routine-checklist",
            "- Goal: run `project.routine-checklist` with the inputs below",
            "- Allowed tools: read_file, grep",
            "- Inputs: none",
            "### Delegation 3: project.security_pass",
        ],
    );
    assert_eq!(fragments[0].when, None);
    assert_eq!(fragments[1].when, None);
    assert_eq!(
        fragments[2].when,
        Some(Condition::Equals {
            var: "touchesAuth".into(),
            value: json!(true)
        })
    );
    // The delegations stay structured for server-tracked lanes.
    let kept = &spawn.language.kept["parallel"];
    assert_eq!(kept["synthesisStepId"], json!("fan-out__synthesis"));
    let delegations = kept["delegations"].as_array().unwrap();
    assert_eq!(delegations.len(), 3);
    assert_eq!(delegations[0]["workflowId"], json!("wr.routine-checklist"));
    assert_eq!(
        delegations[0]["resolvedWorkflowId"],
        json!("project.routine-checklist")
    );
    assert_eq!(delegations[2].get("resolvedWorkflowId"), None);
    assert_eq!(
        warnings(&c, CompiledWarningCode::UnresolvedDelegation)
            .iter()
            .map(|(p, _)| p.as_str())
            .collect::<Vec<_>>(),
        vec!["/steps/1/parallelDelegations/2/workflowId"]
    );
    let synthesis = step(&c.snapshot, "fan-out__synthesis");
    assert_eq!(synthesis.title, "Synthesis: Review in parallel");
    assert!(
        synthesis
            .prompt
            .starts_with("Merge the three reviews into one verdict.")
    );
    assert_eq!(
        synthesis.output.as_ref().unwrap().contract_ref.as_deref(),
        Some("wr.contracts.review_verdict")
    );
    assert_eq!(synthesis.provenance.source, StepSource::TemplateInjected);
    assert_eq!(
        synthesis.provenance.origin_id.as_deref(),
        Some("fan-out#synthesis")
    );
    // The synthesis contract's spelling is the authored one: no v1 warning for it.
    assert!(warnings(&c, CompiledWarningCode::V1Field).is_empty());
}

/// decision: D148
#[test]
fn delegation_conditions_lower_to_the_condition_set() {
    let with_condition = |condition: Value| {
        let mut source = fixture("parallel_review");
        source["steps"][1]["parallelDelegations"][2]["runCondition"] = condition;
        compile(&source, &ctx())
    };
    let cases = [
        (
            json!({"var": "mode"}),
            Condition::Truthy { var: "mode".into() },
        ),
        (
            json!({"var": "n", "gte": 2}),
            Condition::Gte {
                var: "n".into(),
                value: serde_json::Number::from(2),
            },
        ),
        (
            json!({"var": "tags", "contains": "auth"}),
            Condition::Contains {
                var: "tags".into(),
                value: "auth".into(),
            },
        ),
        (
            json!({"not": {"var": "kind", "in": ["a", "b"]}}),
            Condition::Not {
                condition: Box::new(Condition::In {
                    var: "kind".into(),
                    values: vec![json!("a"), json!("b")],
                }),
            },
        ),
        (
            json!({"and": [{"var": "a", "startsWith": "x"}, {"or": [{"var": "b", "matches": "^y"}, {"var": "c", "not_equals": 1}]}]}),
            Condition::And {
                all: vec![
                    Condition::StartsWith {
                        var: "a".into(),
                        value: "x".into(),
                    },
                    Condition::Or {
                        any: vec![
                            Condition::Matches {
                                var: "b".into(),
                                pattern: "^y".into(),
                            },
                            Condition::NotEquals {
                                var: "c".into(),
                                value: json!(1),
                            },
                        ],
                    },
                ],
            },
        ),
    ];
    for (written, lowered) in cases {
        let c = with_condition(written.clone()).unwrap_or_else(|e| panic!("{written}: {e}"));
        let spawn = step(&c.snapshot, "fan-out");
        let conditional = spawn
            .language
            .prompt_fragments
            .iter()
            .find_map(|f| f.when.as_ref());
        assert_eq!(conditional, Some(&lowered), "{written}");
    }
    for bad in [
        json!({"var": "a", "like": "x"}),
        json!({"var": "a", "gt": "3"}),
        json!(7),
    ] {
        // The delegation's condition is read by the language's one condition reader, whose
        // error points into the condition.
        let errs = with_condition(bad.clone()).expect_err("invalid condition");
        assert!(
            errs.0.iter().any(|e| e
                .pointer
                .starts_with("/steps/1/parallelDelegations/2/runCondition")),
            "{bad}: {errs}"
        );
    }
}

/// The builtins the 3.x corpus names exist: each ref embeds, each contract pack resolves and
/// its example validates against its schema.
#[test]
fn every_new_ref_and_contract_pack_resolves() {
    let refs = [
        "wr.refs.notes_first_durability",
        "wr.refs.parallelize_cognition_serialize_synthesis",
        "wr.refs.synthesis_under_disagreement",
        "wr.refs.adversarial_challenge_rules",
    ];
    let contracts = [
        "wr.contracts.coding_handoff",
        "wr.contracts.discovery_handoff",
        "wr.contracts.differentiation_handoff",
        "wr.contracts.shaping_handoff",
        "wr.contracts.review_verdict",
        "wr.contracts.gate_verdict",
    ];
    let steps: Vec<Value> = refs
        .iter()
        .enumerate()
        .map(|(i, r)| json!({"id": format!("r{i}"), "title": "R", "promptBlocks": {"constraints": [[{"kind": "ref", "refId": r}]]}}))
        .chain(contracts.iter().enumerate().map(|(i, c)| {
            json!({"id": format!("c{i}"), "title": "C", "prompt": "Hand over.", "outputContract": {"contractRef": c}})
        }))
        .collect();
    let source = json!({"id": "project.builtins", "name": "B", "description": "d", "steps": steps});
    let c = compiled(&source);
    for (i, r) in refs.iter().enumerate() {
        let s = step(&c.snapshot, &format!("r{i}"));
        assert_eq!(s.injected_refs[0].ref_id, *r);
    }
    for (i, contract) in contracts.iter().enumerate() {
        let s = step(&c.snapshot, &format!("c{i}"));
        assert_eq!(
            s.output.as_ref().unwrap().contract_ref.as_deref(),
            Some(*contract)
        );
        let pack = c.snapshot.contract(contract).unwrap();
        let compiled_schema = validator(&pack.schema).unwrap();
        assert!(
            compiled_schema.is_valid(&pack.example),
            "{contract}: example invalid"
        );
        // A bare `{kind}` is not enough: every pack requires its fields.
        assert!(
            !compiled_schema.is_valid(&json!({"kind": pack.artifact_kind})),
            "{contract}"
        );
    }
}

/// decision: D146
#[test]
fn inspect_workflow_shows_the_kept_fields() {
    let legacy = fixture("legacy_fields").to_string();
    let loader: CatalogLoader = Arc::new(move || {
        let project = MemorySource::new(WorkflowSourceKind::Project)
            .with("project/workflows/standup.json", &legacy);
        let sources: Vec<&dyn WorkflowSource> = vec![&project];
        Arc::new(Catalog::load(&sources))
    });
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    let wr = Workrail::with_parts(fs, loader, Arc::new(SeededEntropy::new(5))).unwrap();
    let out = wr
        .inspect_workflow(InspectWorkflowInput {
            workflow_id: "standup-notes".into(),
            mode: InspectMode::Preview,
        })
        .unwrap();
    assert_eq!(
        out.kept.get("tips"),
        Some(&json!(["Keep each line under one sentence."]))
    );
    assert_eq!(
        out.steps[0].kept.get("expectedOutput"),
        Some(&json!("Three short lines."))
    );
    assert!(out.warnings.iter().any(|w| w.code == "unknown_field_kept"));
    let text = workrail::mcp::render::inspect_text(&out);
    assert!(
        text.contains("Kept fields (shown here, no effect on a run):"),
        "{text}"
    );
    assert!(
        text.contains("\n- tips: [\"Keep each line under one sentence.\"]"),
        "{text}"
    );
    assert!(
        text.contains("\nKept fields:\n- expectedOutput: \"Three short lines.\""),
        "{text}"
    );
}

fn open(documents: Vec<(&'static str, String)>) -> Workrail {
    let loader: CatalogLoader = Arc::new(move || {
        let mut project = MemorySource::new(WorkflowSourceKind::Project);
        for (name, text) in &documents {
            project = project.with(name, text);
        }
        let sources: Vec<&dyn WorkflowSource> = vec![&project];
        Arc::new(Catalog::load(&sources))
    });
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    Workrail::with_parts(fs, loader, Arc::new(SeededEntropy::new(9))).unwrap()
}

fn ack(out: &ExecutionOutput, artifacts: Vec<Value>) -> ContinueWorkflowInput {
    ContinueWorkflowInput {
        state_token: Some(out.state_token.clone()),
        ack_token: out.ack_token.clone(),
        context: None,
        output: Some(OutputInput {
            notes_markdown: Some("Done.".into()),
            artifacts: artifacts
                .into_iter()
                .map(|a| a.as_object().unwrap().clone())
                .collect(),
        }),
        preferences: vec![],
        preset: None,
    }
}

/// The expanded routine and the parallel step run: a run walks every compiled step, the
/// synthesis step enforcing its contract, to completion.
#[test]
fn routine_and_parallel_workflows_run_to_completion() {
    let wr = open(vec![
        (
            "project/workflows/r.json",
            fixture("routine-checklist").to_string(),
        ),
        (
            "project/workflows/caller.json",
            fixture("routine_caller").to_string(),
        ),
        (
            "project/workflows/parallel.json",
            fixture("parallel_review").to_string(),
        ),
    ]);
    for (id, expected) in [
        (
            "project.ship_feature",
            vec!["build", "check__walk", "check__write"],
        ),
        (
            "project.parallel_review",
            vec!["prepare", "fan-out", "fan-out__synthesis"],
        ),
    ] {
        let mut out = wr
            .start_workflow(StartWorkflowInput {
                workflow_id: id.into(),
                context: None,
                preferences: vec![],
                preset: None,
            })
            .unwrap();
        let mut seen = Vec::new();
        while let Some(pending) = out.pending.clone() {
            seen.push(pending.step_id.to_string());
            let artifacts = if pending.step_id.as_str() == "fan-out__synthesis" {
                vec![
                    json!({"kind": "wr.review_verdict", "verdict": "clean", "confidence": "high", "findings": [], "summary": "No issues."}),
                ]
            } else {
                Vec::new()
            };
            out = wr.continue_workflow(ack(&out, artifacts)).unwrap();
            assert!(out.blockers.is_empty(), "{id}: {:?}", out.blockers);
        }
        assert!(out.is_complete, "{id}");
        assert_eq!(seen, expected, "{id}");
    }
}

/// Pretty JSON with keys in canonical (JCS) order and a trailing newline.
fn pretty_canonical(value: &Value) -> String {
    let canonical: Value = serde_json::from_str(&to_canonical_string(value).unwrap()).unwrap();
    let mut text = serde_json::to_string_pretty(&canonical).unwrap();
    text.push('\n');
    text
}

/// lock: L-HASH-WORKFLOW, L-COMPILE-PURE
#[test]
fn dialect_fixtures_compile_to_their_committed_snapshots_and_hashes() {
    let bless = std::env::var_os("WORKRAIL_BLESS").is_some_and(|v| v == "1");
    let mut problems = Vec::new();
    for name in [
        "content",
        "legacy_fields",
        "routine_caller",
        "parallel_review",
        "create_your_own",
    ] {
        let c = compiled(&fixture(name));
        for (path, expected) in [
            (
                dir().join(format!("{name}.compiled.json")),
                pretty_canonical(&c.snapshot.to_value().unwrap()),
            ),
            (
                dir().join(format!("{name}.hash")),
                format!("{}\n", c.workflow_hash),
            ),
        ] {
            let committed = fs::read_to_string(&path).unwrap_or_default();
            if committed == expected {
                continue;
            }
            if bless {
                fs::write(&path, &expected).unwrap();
            } else {
                problems.push(path.display().to_string());
            }
        }
    }
    assert!(
        problems.is_empty(),
        "drifted: {problems:?}; regenerate with WORKRAIL_BLESS=1 cargo test -p workrail --test suite compiler_dialect::"
    );
}

/// decision: D146
#[test]
fn each_metrics_profile_asks_for_what_it_measures_where_it_measures_it() {
    let source = |profile: &str| {
        json!({"id": "project.m", "name": "M", "description": "d", "metricsProfile": profile,
            "steps": [{"id": "a", "title": "A", "prompt": "Do A."}, {"id": "b", "title": "B", "prompt": "Do B."}]})
    };
    for (profile, first, last) in [
        (
            "coding",
            Some("metrics_commit_shas"),
            "metrics_lines_removed",
        ),
        ("review", None, "metrics_pr_numbers"),
        ("research", None, "metrics_outcome"),
        ("design", None, "metrics_outcome"),
        ("ticket", None, "metrics_outcome"),
    ] {
        let c = compiled(&source(profile));
        let (a, b) = (
            &c.snapshot.body.steps[0].prompt,
            &c.snapshot.body.steps[1].prompt,
        );
        assert_eq!(a.contains("## Metrics"), first.is_some(), "{profile}: {a}");
        if let Some(needle) = first {
            assert!(
                a.contains(needle) && !a.contains("metrics_outcome"),
                "{profile}: {a}"
            );
        }
        assert!(
            b.contains("## Metrics") && b.contains(last),
            "{profile}: {b}"
        );
        assert!(
            b.contains("`success`, `partial`, `abandoned` or `error`"),
            "{profile}: {b}"
        );
        assert_eq!(
            c.snapshot.body.kept.get("metricsProfile"),
            Some(&json!(profile))
        );
    }
    let none = compiled(&source("none"));
    assert!(
        none.snapshot
            .body
            .steps
            .iter()
            .all(|s| !s.prompt.contains("## Metrics"))
    );
    assert!(
        rejected(&source("sales"))
            .find(Code::InvalidValue, "/metricsProfile")
            .is_some()
    );
}

/// decision: D146
#[test]
fn workflow_sections_go_to_the_first_step_in_walk_order_and_calls_need_definitions() {
    // A workflow that opens with a loop shows its sections on the loop's first body step.
    let mut source = fixture("content");
    let steps = source["steps"].as_array().unwrap().clone();
    source["steps"] = json!([steps[2], steps[0]]);
    let c = compiled(&source);
    assert!(
        step(&c.snapshot, "revise")
            .prompt
            .contains("## Workflow rules")
    );
    assert!(
        !step(&c.snapshot, "collect")
            .prompt
            .contains("## Workflow rules")
    );
    // A call of a function no scope defines is `unknown_function` at the call's name.
    let mut unknown = fixture("content");
    unknown["steps"][0]["functionCalls"] = json!([{"name": "summarize", "args": {}}]);
    let errs = rejected(&unknown);
    assert!(
        errs.find(Code::UnknownFunction, "/steps/0/functionCalls/0/name")
            .is_some(),
        "{errs}"
    );
}

/// decision: D145
#[test]
fn a_routine_template_in_a_template_call_step_names_the_step_form() {
    let source = json!({"id": "project.t", "name": "T", "description": "d", "steps": [
        {"type": "template_call", "templateId": "wr.templates.routine.checklist", "args": {}}
    ]});
    let errs = rejected(&source);
    let e = errs
        .find(Code::UnknownTemplate, "/steps/0/templateId")
        .unwrap_or_else(|| panic!("{errs}"));
    assert!(
        e.suggestion.contains("\"templateCall\""),
        "{}",
        e.suggestion
    );
}

/// decision: D145
#[test]
fn a_problem_inside_a_routine_is_reported_at_the_call_naming_the_routine() {
    let mut broken = fixture("routine-checklist");
    broken["steps"][1]["askForFiles"] = json!("yes");
    let ctx = CompileContext::load("project").with_library(library(&[broken]));
    let errs = compile(&fixture("routine_caller"), &ctx).unwrap_err();
    let e = errs
        .find(Code::WrongType, "/steps/1/templateCall")
        .unwrap_or_else(|| panic!("{errs}"));
    assert!(
        e.message.starts_with(
            "routine `project.routine-checklist` step `write` (at `/askForFiles` there):"
        ),
        "{}",
        e.message
    );
    assert_eq!(e.fix, None);
}

/// decision: D146
#[test]
fn extension_point_bindings_take_the_declared_default() {
    let mut source = fixture("content");
    source["steps"][0]["prompt"] =
        json!("Collect the changes, then have {{wr.bindings.tone_review}} check the wording.");
    let c = compiled(&source);
    assert!(
        step(&c.snapshot, "collect")
            .prompt
            .contains("then have project.routine-tone check the wording."),
        "{}",
        step(&c.snapshot, "collect").prompt
    );
    source["steps"][0]["prompt"] = json!("Ask {{wr.bindings.nobody}}.");
    let errs = rejected(&source);
    let e = errs
        .find(Code::InvalidValue, "/steps/0/prompt")
        .unwrap_or_else(|| panic!("{errs}"));
    assert!(e.suggestion.contains("tone_review"), "{}", e.suggestion);
}

/// A routine step that references a function the routine defines at its workflow level compiles
/// in the caller, which defines no such function, and renders that function under `## Functions`
/// in the expanded step; a step's own definition of the name wins; an unknown reference is
/// still refused.
///
/// decision: D162
#[test]
fn a_routine_carries_the_functions_its_steps_reference() {
    let routine = json!({
        "id": "project.routine-logged",
        "name": "Logged routine",
        "description": "Keeps a log while it works.",
        "version": "1.0.0",
        "functionDefinitions": [
            {"name": "update_log", "definition": "Append one line to work.log saying what changed.", "scope": "workflow"},
            {"name": "unused", "definition": "Never referenced."}
        ],
        "steps": [
            {"id": "work", "title": "Work", "prompt": "Do the work.", "functionReferences": ["update_log()"]},
            {"id": "own", "title": "Own", "prompt": "Finish.", "functionReferences": ["update_log()"],
             "functionDefinitions": [{"name": "update_log", "definition": "Write the final line of work.log."}]}
        ]
    });
    let caller = json!({
        "id": "logged-caller",
        "name": "Caller",
        "description": "Calls the logged routine.",
        "version": "1.0.0",
        "steps": [{"id": "run", "title": "Run it", "templateCall": {"templateId": "wr.templates.routine.logged", "args": {}}}]
    });
    let ctx = CompileContext::load("project").with_library(library(std::slice::from_ref(&routine)));
    let c = compile(&caller, &ctx).unwrap_or_else(|e| panic!("does not compile:\n{e}"));
    let work = step(&c.snapshot, "run__work");
    assert!(
        work.prompt.contains("## Functions") && work.prompt.contains("Append one line to work.log"),
        "{}",
        work.prompt
    );
    assert!(!work.prompt.contains("Never referenced"), "{}", work.prompt);
    let own = step(&c.snapshot, "run__own");
    assert!(
        own.prompt.contains("Write the final line of work.log"),
        "{}",
        own.prompt
    );
    assert!(!own.prompt.contains("Append one line"), "{}", own.prompt);

    let mut broken = routine;
    broken["steps"][0]["functionReferences"] = json!(["missing_fn()"]);
    let ctx = CompileContext::load("project").with_library(library(&[broken]));
    let refused = compile(&caller, &ctx).expect_err("an unknown reference is refused");
    assert!(refused.to_string().contains("missing_fn"), "{refused}");
}

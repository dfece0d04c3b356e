//! Every class of source workflow the compiler must reject, with the JSON pointer of the
//! offending field, a message saying what is wrong, a suggestion, and the deterministic
//! auto-fix where one exists.
//!
//! Guards against rejections that are vague ("invalid workflow"), point at the wrong field,
//! stop at the first problem, or silently accept something the locks forbid (inline schemas,
//! templating, `wr.*` outside bundled sources, loops without `maxIterations`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use workrail::compiler::error::{AutoFix, CompileError, CompileErrorCode as Code, CompileErrors};
use workrail::compiler::{CompileContext, compile, compile_str};
use workrail_spec::error::ErrorCode;

fn base() -> Value {
    json!({
        "id": "project.sample",
        "name": "Sample",
        "description": "A sample workflow.",
        "steps": [{"id": "a", "title": "A", "prompt": "Do A."}]
    })
}

fn with_steps(steps: Value) -> Value {
    let mut v = base();
    v["steps"] = steps;
    v
}

fn rejected(src: &Value) -> CompileErrors {
    compile(src, &CompileContext::load("project")).expect_err("the source must be rejected")
}

fn find<'e>(errs: &'e CompileErrors, code: Code, pointer: &str) -> &'e CompileError {
    errs.find(code, pointer)
        .unwrap_or_else(|| panic!("no {code:?} at {pointer}; got:\n{errs}"))
}

fn replace(path: &str, value: Value) -> Option<AutoFix> {
    Some(AutoFix::Replace {
        path: path.to_owned(),
        value,
    })
}

fn remove(path: &str) -> Option<AutoFix> {
    Some(AutoFix::Remove {
        path: path.to_owned(),
    })
}

fn loop_workflow(loop_step: Value, conditions: Value) -> Value {
    let mut v = with_steps(json!([loop_step]));
    v["conditions"] = conditions;
    v
}

fn decision_step(id: &str) -> Value {
    json!({"id": id, "title": "Decide", "prompt": "Decide.", "output": {"contractRef": "wr.contracts.loop_control"}})
}

/// lock: L-AUTHOR-TOP-LEVEL
#[test]
fn wrong_types_name_the_field_and_the_expected_type() {
    let mut src = base();
    src["steps"] = json!({"a": 1});
    src["name"] = json!(7);
    let errs = rejected(&src);
    let steps = find(&errs, Code::WrongType, "/steps");
    assert!(
        steps.message.contains("must be an array"),
        "{}",
        steps.message
    );
    let name = find(&errs, Code::WrongType, "/name");
    assert!(
        name.message.contains("must be a string, found a number"),
        "{}",
        name.message
    );
    assert_eq!(name.fix, None);
}

/// lock: L-AUTHOR-TOP-LEVEL, L-AUTHOR-STEP-KINDS
#[test]
fn missing_required_fields_are_reported_where_they_belong() {
    let src = json!({"id": "project.x", "steps": [{"id": "a", "prompt": "Do A."}]});
    let errs = rejected(&src);
    assert!(
        find(&errs, Code::MissingField, "/name")
            .message
            .contains("`name`")
    );
    assert!(
        find(&errs, Code::MissingField, "/description")
            .suggestion
            .contains("description")
    );
    let title = find(&errs, Code::MissingField, "/steps/0/title");
    assert!(title.message.contains("`title`"), "{}", title.message);
}

/// lock: L-AUTHOR-TOP-LEVEL
#[test]
fn every_problem_is_collected_in_document_order() {
    let mut src = base();
    src["extra"] = json!(true);
    src["steps"] = json!([
        {"id": "Bad Id", "title": "A", "prompt": "Do A."},
        {"id": "b", "title": "B"},
        {"id": "c", "title": "C", "prompt": "Do C.", "output": {"contractRef": "wr.contracts.nope"}}
    ]);
    let errs = rejected(&src);
    let pointers: Vec<&str> = errs.errors().iter().map(|e| e.pointer.as_str()).collect();
    assert_eq!(
        pointers,
        [
            "/steps/0/id",
            "/steps/1/promptBlocks",
            "/steps/2/output/contractRef",
            "/extra"
        ]
    );
}

/// lock: L-AUTHOR-TOP-LEVEL
#[test]
fn unknown_fields_are_removed_or_renamed_deterministically() {
    let mut src = base();
    src["author"] = json!("me");
    src["steps"][0]["Require-Confirmation"] = json!(true);
    let errs = rejected(&src);
    let author = find(&errs, Code::UnknownField, "/author");
    assert!(
        author
            .suggestion
            .contains("allows only: id, name, description"),
        "{}",
        author.suggestion
    );
    assert_eq!(author.fix, remove("/author"));
    let near = find(&errs, Code::UnknownField, "/steps/0/Require-Confirmation");
    assert!(
        near.message.contains("did you mean `requireConfirmation`"),
        "{}",
        near.message
    );
    assert_eq!(
        near.fix,
        Some(AutoFix::Move {
            from: "/steps/0/Require-Confirmation".into(),
            path: "/steps/0/requireConfirmation".into()
        })
    );
}

/// lock: L-AUTHOR-VERIFY-INSTRUCTIONAL
/// decision: D139
#[test]
fn verify_stays_instructional_while_validation_criteria_are_enforced() {
    let mut src = base();
    src["steps"][0] = json!({"id": "a", "title": "A", "promptBlocks": {"goal": "g", "verify": ["The summary names every file."]}});
    let compiled = compile(&src, &CompileContext::load("project")).expect("compiles");
    let step = &compiled.snapshot.body.steps[0];
    assert!(
        step.prompt
            .contains("## Verify\n- The summary names every file.")
    );
    assert_eq!(step.language.validation, None, "verify is never checked");
    assert_eq!(step.output, None);
    src["steps"][0]["validationCriteria"] = json!({"type": "contains", "value": "done"});
    let compiled = compile(&src, &CompileContext::load("project")).expect("compiles");
    assert!(
        compiled.snapshot.body.steps[0]
            .language
            .validation
            .is_some()
    );
}

/// lock: L-AUTHOR-VERIFY-INSTRUCTIONAL
#[test]
fn v1_only_fields_get_tailored_advice() {
    // A loop step has no `validationCriteria` in either spelling (a normal step does).
    let src = loop_workflow(
        json!({"type": "loop", "loopId": "l", "while": {"kind": "condition_ref", "conditionId": "c"}, "maxIterations": 2, "body": [decision_step("d")], "validationCriteria": [{"type": "contains", "value": "done"}]}),
        json!([{"id": "c", "kind": "loop_control", "continueWhen": "continue"}]),
    );
    let errs = rejected(&src);
    let e = find(&errs, Code::UnknownField, "/steps/0/validationCriteria");
    assert!(e.message.contains("v1 field"), "{}", e.message);
    assert!(
        e.suggestion.contains("wr.contracts.verification_report"),
        "{}",
        e.suggestion
    );
    assert_eq!(e.fix, remove("/steps/0/validationCriteria"));
}

/// lock: L-ID-DELIMITER-SAFE, L-ID-AUTOFIX
#[test]
fn step_ids_must_be_delimiter_safe_with_the_auto_fix() {
    let src = with_steps(
        json!([{"id": "Phase 1: Triage", "title": "T", "prompt": "x"}, {"id": "a@b/c", "title": "U", "prompt": "y"}]),
    );
    let errs = rejected(&src);
    let e = find(&errs, Code::InvalidId, "/steps/0/id");
    assert!(e.message.contains("[a-z0-9_-]+"), "{}", e.message);
    assert_eq!(e.fix, replace("/steps/0/id", json!("phase_1__triage")));
    assert_eq!(
        find(&errs, Code::InvalidId, "/steps/1/id").fix,
        replace("/steps/1/id", json!("a_b_c"))
    );
}

/// lock: L-ID-DELIMITER-SAFE, L-ID-CONDITION-ID, L-ID-AUTOFIX
#[test]
fn loop_and_condition_ids_must_be_delimiter_safe() {
    let src = loop_workflow(
        json!({"type": "loop", "loopId": "Outer:Loop", "while": {"kind": "condition_ref", "conditionId": "Go On"}, "maxIterations": 2, "body": [{"id": "a", "title": "A", "prompt": "x"}]}),
        json!([{"id": "Go On", "kind": "always_true"}]),
    );
    let errs = rejected(&src);
    assert_eq!(
        find(&errs, Code::InvalidId, "/steps/0/loopId").fix,
        replace("/steps/0/loopId", json!("outer_loop"))
    );
    assert_eq!(
        find(&errs, Code::InvalidId, "/conditions/0/id").fix,
        replace("/conditions/0/id", json!("go_on"))
    );
    // The bad condition id is still known, so the loop does not also report it as unknown.
    assert!(
        errs.find(Code::UnknownCondition, "/steps/0/while/conditionId")
            .is_none()
    );
}

/// lock: L-ID-WORKFLOW-FORMAT, L-ID-AUTOFIX
#[test]
fn workflow_ids_follow_the_namespace_format() {
    let mut src = base();
    src["id"] = json!("Team.Bug-Review.v2");
    let errs = rejected(&src);
    let e = find(&errs, Code::InvalidId, "/id");
    assert!(e.message.contains("exactly one dot"), "{}", e.message);
    assert_eq!(e.fix, replace("/id", json!("project.bug_review_v2")));
}

/// lock: L-NS-LEGACY-CREATE-REJECTED, L-NS-RENAME-SUGGESTION
#[test]
fn legacy_ids_are_rejected_when_authoring_with_the_suggested_id() {
    let mut src = base();
    src["id"] = json!("Bug-Investigation");
    let errs = compile(&src, &CompileContext::authoring("user")).unwrap_err();
    let e = find(&errs, Code::LegacyId, "/id");
    assert!(e.message.contains("legacy"), "{}", e.message);
    assert_eq!(e.fix, replace("/id", json!("user.bug_investigation")));
    // Loading the same source only warns (see compiler_pipeline).
    assert!(compile(&src, &CompileContext::load("user")).is_ok());
}

/// lock: L-NS-WR-RESERVED, L-NS-WR-READ-ONLY
#[test]
fn wr_ids_are_rejected_outside_the_bundled_source() {
    let mut src = base();
    src["id"] = json!("wr.bug_investigation");
    let errs = rejected(&src);
    let e = find(&errs, Code::ReservedNamespace, "/id");
    assert!(e.message.contains("reserved"), "{}", e.message);
    assert!(e.suggestion.contains("Fork it"), "{}", e.suggestion);
    assert_eq!(e.fix, replace("/id", json!("project.bug_investigation")));
    assert!(compile(&src, &CompileContext::bundled()).is_ok());
}

/// lock: L-NS-WR-RESERVED
#[test]
fn bundled_workflows_must_use_the_wr_namespace() {
    let errs = compile(&base(), &CompileContext::bundled()).unwrap_err();
    assert_eq!(
        find(&errs, Code::InvalidId, "/id").fix,
        replace("/id", json!("wr.sample"))
    );
}

/// lock: L-SKEY-ROUNDTRIP, L-ID-AUTOFIX
#[test]
fn duplicate_step_ids_are_rejected_with_a_free_rename() {
    let src = with_steps(json!([
        {"id": "a", "title": "A", "prompt": "x"},
        {"id": "a_2", "title": "B", "prompt": "y"},
        {"id": "a", "title": "C", "prompt": "z"}
    ]));
    let errs = rejected(&src);
    let e = find(&errs, Code::DuplicateId, "/steps/2/id");
    assert!(e.message.contains("first at /steps/0"), "{}", e.message);
    assert_eq!(e.fix, replace("/steps/2/id", json!("a_3")));
}

/// lock: L-COMPILE-TEMPLATE-IN-PLACE
#[test]
fn a_template_expansion_cannot_reuse_an_authored_step_id() {
    let src = with_steps(json!([
        {"id": "capability_probe_delegation", "title": "Mine", "prompt": "x"},
        {"type": "template_call", "templateId": "wr.templates.capability_probe", "args": {"capability": "delegation", "when": "early_if_required"}}
    ]));
    let errs = rejected(&src);
    let e = find(&errs, Code::DuplicateId, "/steps/1");
    assert!(e.suggestion.contains("template call"), "{}", e.suggestion);
    assert_eq!(e.fix, remove("/steps/1"));
}

/// lock: L-LOOP-SHAPE
#[test]
fn duplicate_loop_ids_are_rejected() {
    let inner = json!({"type": "loop", "loopId": "l", "while": {"kind": "condition_ref", "conditionId": "t"}, "maxIterations": 1, "body": [{"id": "b", "title": "B", "prompt": "x"}]});
    let outer = json!({"type": "loop", "loopId": "l", "while": {"kind": "condition_ref", "conditionId": "t"}, "maxIterations": 2, "body": [{"id": "a", "title": "A", "prompt": "x"}, inner]});
    let errs = rejected(&loop_workflow(
        outer,
        json!([{"id": "t", "kind": "always_true"}]),
    ));
    assert_eq!(
        find(&errs, Code::DuplicateId, "/steps/0/body/1/loopId").fix,
        replace("/steps/0/body/1/loopId", json!("l_2"))
    );
}

/// lock: L-ID-CONDITION-ID
#[test]
fn duplicate_condition_ids_are_rejected() {
    let mut src = base();
    src["conditions"] =
        json!([{"id": "c", "kind": "always_true"}, {"id": "c", "kind": "always_false"}]);
    let errs = rejected(&src);
    assert_eq!(
        find(&errs, Code::DuplicateId, "/conditions/1/id").fix,
        replace("/conditions/1/id", json!("c_1"))
    );
}

/// lock: L-AUTHOR-TEMPLATES
#[test]
fn unknown_templates_and_bad_arguments_are_rejected() {
    let src = with_steps(json!([
        {"type": "template_call", "templateId": "capability_probe", "args": {}},
        {"type": "template_call", "templateId": "wr.templates.capability_probe", "args": {"capability": "terminal", "extra": 1}},
        {"type": "template_call", "templateId": "wr.templates.capability_probe", "args": {"capability": "Web_Browsing", "when": "early_if_required"}}
    ]));
    let errs = rejected(&src);
    assert_eq!(
        find(&errs, Code::UnknownTemplate, "/steps/0/templateId").fix,
        replace(
            "/steps/0/templateId",
            json!("wr.templates.capability_probe")
        )
    );
    let bad = find(&errs, Code::InvalidValue, "/steps/1/args/capability");
    assert!(
        bad.message.contains("delegation, web_browsing"),
        "{}",
        bad.message
    );
    assert_eq!(
        find(&errs, Code::MissingField, "/steps/1/args/when").fix,
        None
    );
    assert_eq!(
        find(&errs, Code::UnknownField, "/steps/1/args/extra").fix,
        remove("/steps/1/args/extra")
    );
    assert_eq!(
        find(&errs, Code::InvalidValue, "/steps/2/args/capability").fix,
        replace("/steps/2/args/capability", json!("web_browsing"))
    );
}

/// lock: L-AUTHOR-STEP-KINDS
#[test]
fn unknown_step_types_are_rejected() {
    let errs = rejected(&with_steps(json!([{"type": "branching", "id": "p"}])));
    let e = find(&errs, Code::InvalidValue, "/steps/0/type");
    assert!(
        e.message.contains("loop, parallel, template_call"),
        "{}",
        e.message
    );
}

/// lock: L-AUTHOR-FEATURES
#[test]
fn unknown_features_are_rejected_with_the_namespaced_fix() {
    let mut src = base();
    src["features"] = json!(["mode_guidance", {"id": "wr.features.telepathy"}, 3]);
    let errs = rejected(&src);
    assert_eq!(
        find(&errs, Code::UnknownFeature, "/features/0").fix,
        replace("/features/0", json!("wr.features.mode_guidance"))
    );
    let e = find(&errs, Code::UnknownFeature, "/features/1/id");
    assert!(
        e.suggestion.contains("wr.features.capabilities"),
        "{}",
        e.suggestion
    );
    assert_eq!(e.fix, None);
    find(&errs, Code::WrongType, "/features/2");
}

/// lock: L-AUTHOR-FEATURE-CONFIG
#[test]
fn toggle_features_take_no_config() {
    let mut src = base();
    src["features"] = json!([{"id": "wr.features.durable_recap_guidance", "config": {}}]);
    let errs = rejected(&src);
    let e = find(&errs, Code::FeatureConfigNotAllowed, "/features/0/config");
    assert_eq!(
        e.fix,
        replace("/features/0", json!("wr.features.durable_recap_guidance"))
    );
}

/// lock: L-AUTHOR-FEATURE-CONFIG
#[test]
fn feature_configs_are_validated_per_feature() {
    let mut src = base();
    src["features"] = json!([
        {"id": "wr.features.capabilities", "config": {"probeVisibility": "Expanded", "color": "red"}},
        {"id": "wr.features.output_contracts", "config": {"enforce": "never"}}
    ]);
    let errs = rejected(&src);
    assert_eq!(
        find(
            &errs,
            Code::InvalidValue,
            "/features/0/config/probeVisibility"
        )
        .fix,
        replace("/features/0/config/probeVisibility", json!("expanded"))
    );
    assert_eq!(
        find(&errs, Code::UnknownField, "/features/0/config/color").fix,
        remove("/features/0/config/color")
    );
    let e = find(&errs, Code::InvalidValue, "/features/1/config/enforce");
    assert!(
        e.message
            .contains("block_in_blocking_modes_gap_in_never_stop"),
        "{}",
        e.message
    );
}

/// lock: L-COMPILE-FEATURE-ORDER
#[test]
fn the_same_feature_with_two_configs_is_a_conflict() {
    let mut src = base();
    src["features"] = json!([
        {"id": "wr.features.mode_guidance", "config": {"detail": "full"}},
        "wr.features.mode_guidance"
    ]);
    let errs = rejected(&src);
    let e = find(&errs, Code::ConflictingFeature, "/features/1");
    assert!(e.message.contains("first at /features/0"), "{}", e.message);
    assert_eq!(e.fix, remove("/features/1"));
}

/// lock: L-AUTHOR-CONTRACT-PACKS
#[test]
fn unknown_contract_packs_are_rejected() {
    let mut src = base();
    src["steps"][0]["output"] = json!({"contractRef": "wr.contracts.loopcontrol"});
    let errs = rejected(&src);
    let e = find(&errs, Code::UnknownContract, "/steps/0/output/contractRef");
    assert!(
        e.suggestion.contains("wr.contracts.loop_control"),
        "{}",
        e.suggestion
    );
}

/// lock: L-AUTHOR-NO-INLINE-SCHEMA
#[test]
fn inline_schemas_and_schema_pointers_are_rejected() {
    let src = with_steps(json!([
        {"id": "a", "title": "A", "prompt": "x", "output": {"schema": {"type": "object"}}},
        {"id": "b", "title": "B", "prompt": "x", "output": {"schemaRef": "./schemas/findings.json"}},
        {"id": "c", "title": "C", "prompt": "x", "output": {"contractRef": "https://example.com/findings.schema.json"}},
        {"id": "d", "title": "D", "prompt": "x", "outputSchema": {"type": "object"}}
    ]));
    let errs = rejected(&src);
    for pointer in [
        "/steps/0/output/schema",
        "/steps/1/output/schemaRef",
        "/steps/3/outputSchema",
    ] {
        let e = find(&errs, Code::InlineSchema, pointer);
        assert!(
            e.suggestion.contains("output.contractRef"),
            "{}",
            e.suggestion
        );
        assert_eq!(e.fix, remove(pointer));
    }
    let url = find(&errs, Code::InlineSchema, "/steps/2/output/contractRef");
    assert!(url.message.contains("URLs"), "{}", url.message);
}

/// lock: L-AUTHOR-REFS-CLOSED
#[test]
fn refs_must_be_known_wr_refs() {
    let src = with_steps(json!([{"id": "a", "title": "A", "promptBlocks": {
        "constraints": [[{"kind": "ref", "refId": "wr.refs.nope"}]],
        "procedure": [[{"kind": "ref", "refId": "docs/append_only_truth.md"}]],
        "verify": [[{"kind": "ref", "refId": "https://example.com/x"}]]
    }}]));
    let errs = rejected(&src);
    let unknown = find(
        &errs,
        Code::UnknownRef,
        "/steps/0/promptBlocks/constraints/0/0/refId",
    );
    assert!(
        unknown.suggestion.contains("wr.refs.append_only_truth"),
        "{}",
        unknown.suggestion
    );
    let path = find(
        &errs,
        Code::UnknownRef,
        "/steps/0/promptBlocks/procedure/0/0/refId",
    );
    assert!(
        path.message.contains("file path or URL"),
        "{}",
        path.message
    );
    assert_eq!(path.fix, None);
    find(
        &errs,
        Code::UnknownRef,
        "/steps/0/promptBlocks/verify/0/0/refId",
    );
}

/// lock: L-AUTHOR-NO-TEMPLATING
/// decision: D140
#[test]
fn templating_beyond_context_markers_is_rejected_in_refs_and_prompts() {
    let src = with_steps(json!([
        {"id": "a", "title": "A", "promptBlocks": {"goal": [{"kind": "ref", "refId": "wr.refs.{{name}}"}]}},
        {"id": "b", "title": "B", "prompt": "Fix ticket {{ticketId + 1}} now."},
        {"id": "c", "title": "C", "prompt": "Fix ticket {{ticketId}} in {{repo.path}}."}
    ]));
    let errs = rejected(&src);
    let r = find(
        &errs,
        Code::Templating,
        "/steps/0/promptBlocks/goal/0/refId",
    );
    assert!(r.message.contains("templating"), "{}", r.message);
    let p = find(&errs, Code::Templating, "/steps/1/prompt");
    assert!(
        p.message.contains("evaluates no expressions"),
        "{}",
        p.message
    );
    // A plain context marker is substituted from the pending step's bindings, never rejected.
    assert!(
        !errs.0.iter().any(|e| e.pointer.starts_with("/steps/2")),
        "{errs:?}"
    );
}

/// lock: L-AUTHOR-REFS-PLACEMENT, L-AUTHOR-PROMPT-VALUE
#[test]
fn refs_outside_goal_constraints_procedure_verify_are_rejected() {
    let ref_part = json!([{"kind": "ref", "refId": "wr.refs.append_only_truth"}]);
    let mut src = with_steps(json!([
        {"id": "a", "title": "A", "prompt": ref_part.clone()},
        {"id": "b", "title": "B", "promptBlocks": {"goal": "g", "outputRequired": {"notesMarkdown": ref_part.clone()}}},
        {"id": "c", "title": "C", "agentRole": ref_part.clone(), "prompt": "x"}
    ]));
    src["agentRole"] = ref_part;
    let errs = rejected(&src);
    for pointer in [
        "/steps/0/prompt/0",
        "/steps/1/promptBlocks/outputRequired/notesMarkdown",
        "/steps/2/agentRole",
        "/agentRole",
    ] {
        let e = find(&errs, Code::RefPlacement, pointer);
        assert!(
            e.message
                .contains("goal, constraints, procedure and verify"),
            "{}",
            e.message
        );
    }
}

/// lock: L-AUTHOR-PROMPT-VALUE
#[test]
fn prompt_parts_are_a_closed_non_empty_union() {
    let src = with_steps(json!([{"id": "a", "title": "A", "promptBlocks": {
        "goal": [],
        "constraints": [[{"kind": "image", "url": "x"}]],
        "procedure": [[{"kind": "text", "text": "t", "refId": "wr.refs.append_only_truth"}]]
    }}]));
    let errs = rejected(&src);
    find(&errs, Code::InvalidValue, "/steps/0/promptBlocks/goal");
    find(
        &errs,
        Code::InvalidValue,
        "/steps/0/promptBlocks/constraints/0/0/kind",
    );
    find(
        &errs,
        Code::UnknownField,
        "/steps/0/promptBlocks/constraints/0/0/url",
    );
    assert_eq!(
        find(
            &errs,
            Code::UnknownField,
            "/steps/0/promptBlocks/procedure/0/0/refId"
        )
        .fix,
        remove("/steps/0/promptBlocks/procedure/0/0/refId")
    );
}

/// lock: L-AUTHOR-REFS-BUDGETS, L-BUDGET-UTF8-BYTES
#[test]
fn a_step_over_the_ref_byte_cap_is_a_validation_error() {
    let many: Vec<Value> = (0..6)
        .map(|_| json!([{"kind": "ref", "refId": "wr.refs.modes_semantics"}]))
        .collect();
    let src = with_steps(json!([{"id": "a", "title": "A", "promptBlocks": {"constraints": many}}]));
    let errs = rejected(&src);
    let e = find(&errs, Code::RefBudgetExceeded, "/steps/0/promptBlocks");
    assert!(
        e.message.contains("per-step cap of 2048 bytes"),
        "{}",
        e.message
    );
    assert!(e.suggestion.contains("fewer refs"), "{}", e.suggestion);
}

/// lock: L-AUTHOR-CONDITIONS, L-LOOP-SHAPE
#[test]
fn loops_must_reference_a_declared_condition() {
    let src = loop_workflow(
        json!({"type": "loop", "loopId": "l", "while": {"kind": "condition_ref", "conditionId": "keep_going"}, "maxIterations": 2, "body": [{"id": "a", "title": "A", "prompt": "x"}]}),
        json!([{"id": "other", "kind": "always_true"}]),
    );
    let errs = rejected(&src);
    let e = find(&errs, Code::UnknownCondition, "/steps/0/while/conditionId");
    assert!(e.suggestion.contains("other"), "{}", e.suggestion);
}

/// lock: L-AUTHOR-CONDITIONS
#[test]
fn condition_kinds_are_a_closed_set() {
    let mut src = base();
    src["conditions"] = json!([
        {"id": "a", "kind": "expression", "expr": "ctx.done == false"},
        {"id": "b", "kind": "loop_control"},
        {"id": "c", "kind": "always_true", "continueWhen": "stop"}
    ]);
    let errs = rejected(&src);
    let e = find(&errs, Code::InvalidValue, "/conditions/0/kind");
    assert!(
        e.message
            .contains("always_false, always_true, loop_control"),
        "{}",
        e.message
    );
    find(&errs, Code::UnknownField, "/conditions/0/expr");
    assert_eq!(
        find(&errs, Code::MissingField, "/conditions/1/continueWhen").fix,
        Some(AutoFix::Add {
            path: "/conditions/1/continueWhen".into(),
            value: json!("continue")
        })
    );
    assert_eq!(
        find(&errs, Code::UnknownField, "/conditions/2/continueWhen").fix,
        remove("/conditions/2/continueWhen")
    );
}

/// lock: L-LOOP-SHAPE, L-LOOP-MAX-ITERATIONS
#[test]
fn loops_without_a_valid_max_iterations_are_rejected() {
    let body = json!([{"id": "a", "title": "A", "prompt": "x"}]);
    let cond = json!([{"id": "t", "kind": "always_true"}]);
    let missing = loop_workflow(
        json!({"type": "loop", "loopId": "l", "while": {"kind": "condition_ref", "conditionId": "t"}, "body": body}),
        cond.clone(),
    );
    let e = rejected(&missing);
    let e = find(&e, Code::MissingMaxIterations, "/steps/0/maxIterations");
    assert!(e.message.contains("no default"), "{}", e.message);
    assert_eq!(e.fix, None);
    let zero = loop_workflow(
        json!({"type": "loop", "loopId": "l", "while": {"kind": "condition_ref", "conditionId": "t"}, "maxIterations": 0, "body": body}),
        cond.clone(),
    );
    assert_eq!(
        find(
            &rejected(&zero),
            Code::InvalidValue,
            "/steps/0/maxIterations"
        )
        .fix,
        replace("/steps/0/maxIterations", json!(1))
    );
    let huge = loop_workflow(
        json!({"type": "loop", "loopId": "l", "while": {"kind": "condition_ref", "conditionId": "t"}, "maxIterations": 5000, "body": body}),
        cond.clone(),
    );
    assert_eq!(
        find(
            &rejected(&huge),
            Code::InvalidValue,
            "/steps/0/maxIterations"
        )
        .fix,
        replace("/steps/0/maxIterations", json!(1000))
    );
    let float = loop_workflow(
        json!({"type": "loop", "loopId": "l", "while": {"kind": "condition_ref", "conditionId": "t"}, "maxIterations": 2.5, "body": body}),
        cond,
    );
    find(&rejected(&float), Code::WrongType, "/steps/0/maxIterations");
}

/// lock: L-LOOP-SHAPE
#[test]
fn loop_bodies_and_step_lists_must_not_be_empty() {
    let src = loop_workflow(
        json!({"type": "loop", "loopId": "l", "while": {"kind": "condition_ref", "conditionId": "t"}, "maxIterations": 1, "body": []}),
        json!([{"id": "t", "kind": "always_true"}]),
    );
    find(&rejected(&src), Code::InvalidValue, "/steps/0/body");
    find(
        &rejected(&with_steps(json!([]))),
        Code::InvalidValue,
        "/steps",
    );
}

/// lock: L-LOOP-CONTRACT-CONTROL, L-LOOP-NO-CONTEXT-CONTROL
#[test]
fn loop_control_loops_need_a_final_decision_step() {
    let cond = json!([{"id": "go", "kind": "loop_control", "continueWhen": "continue"}]);
    let no_decision = loop_workflow(
        json!({"type": "loop", "loopId": "l", "while": {"kind": "condition_ref", "conditionId": "go"}, "maxIterations": 3, "body": [{"id": "a", "title": "A", "prompt": "x"}]}),
        cond.clone(),
    );
    let errs = rejected(&no_decision);
    let e = find(&errs, Code::LoopDecisionStep, "/steps/0/body");
    assert!(
        e.suggestion.contains("wr.contracts.loop_control"),
        "{}",
        e.suggestion
    );
    let not_last = loop_workflow(
        json!({"type": "loop", "loopId": "l", "while": {"kind": "condition_ref", "conditionId": "go"}, "maxIterations": 3, "body": [decision_step("d"), {"id": "a", "title": "A", "prompt": "x"}]}),
        cond,
    );
    let errs = rejected(&not_last);
    assert!(
        find(
            &errs,
            Code::LoopDecisionStep,
            "/steps/0/body/0/output/contractRef"
        )
        .message
        .contains("not the last step")
    );
    find(&errs, Code::LoopDecisionStep, "/steps/0/body");
}

/// lock: L-LOOP-CONTRACT-CONTROL
#[test]
fn a_decision_step_outside_a_loop_control_loop_is_rejected() {
    let outside = with_steps(json!([decision_step("d")]));
    let e = rejected(&outside);
    assert!(
        find(&e, Code::LoopDecisionStep, "/steps/0/output/contractRef")
            .message
            .contains("not inside a loop")
    );
    let fixed = loop_workflow(
        json!({"type": "loop", "loopId": "l", "while": {"kind": "condition_ref", "conditionId": "t"}, "maxIterations": 3, "body": [decision_step("d")]}),
        json!([{"id": "t", "kind": "always_true"}]),
    );
    let e = rejected(&fixed);
    assert!(
        find(
            &e,
            Code::LoopDecisionStep,
            "/steps/0/body/0/output/contractRef"
        )
        .message
        .contains("would be ignored")
    );
}

/// lock: L-AUTHOR-STEP-KINDS, L-AUTHOR-PROMPTBLOCKS
#[test]
fn a_step_has_exactly_one_of_prompt_and_prompt_blocks() {
    let src = with_steps(json!([
        {"id": "a", "title": "A", "prompt": "x", "promptBlocks": {"goal": "g"}},
        {"id": "b", "title": "B"},
        {"id": "c", "title": "C", "promptBlocks": {}}
    ]));
    let errs = rejected(&src);
    // The fix never deletes the prompt's text (see the test below).
    assert_eq!(find(&errs, Code::InvalidValue, "/steps/0/prompt").fix, None);
    find(&errs, Code::MissingField, "/steps/1/promptBlocks");
    assert!(
        find(&errs, Code::MissingField, "/steps/2/promptBlocks")
            .message
            .contains("no blocks")
    );
}

/// lock: L-CAP-CLOSED-SET, L-CAP-REQUIREMENTS
#[test]
fn capabilities_are_a_closed_set_with_closed_requirements() {
    let mut src = base();
    src["capabilities"] = json!({"terminal": "required", "web_browsing": "mandatory"});
    let errs = rejected(&src);
    let e = find(&errs, Code::UnknownField, "/capabilities/terminal");
    assert!(e.message.contains("baseline tools"), "{}", e.message);
    let r = find(&errs, Code::InvalidValue, "/capabilities/web_browsing");
    assert!(
        r.message.contains("required, preferred, disabled"),
        "{}",
        r.message
    );
}

/// lock: L-AUTHOR-TOP-LEVEL
#[test]
fn invalid_json_text_is_an_error_as_data() {
    let errs =
        compile_str("{\"id\": \"project.x\",", &CompileContext::load("project")).unwrap_err();
    let e = find(&errs, Code::InvalidJson, "");
    assert!(e.message.contains("line 1"), "{}", e.message);
}

/// lock: L-ERR-ENVELOPE, L-ERR-SELF-CORRECTING
#[test]
fn errors_convert_to_the_unified_envelope() {
    let mut src = base();
    src["steps"][0]["id"] = json!("A B");
    let envelope = rejected(&src).to_envelope("project/workflows/sample.json");
    assert_eq!(envelope.code, ErrorCode::WorkflowInvalid);
    assert!(
        envelope.message.contains("project/workflows/sample.json"),
        "{}",
        envelope.message
    );
    assert!(
        envelope.suggestion.contains("Use `a_b`"),
        "{}",
        envelope.suggestion
    );
    let details = envelope.details.unwrap();
    assert_eq!(details["errorCount"], 1);
    assert_eq!(details["errors"][0]["pointer"], "/steps/0/id");
    assert_eq!(
        details["errors"][0]["fix"],
        json!({"op": "replace", "path": "/steps/0/id", "value": "a_b"})
    );
}

/// lock: L-GAP-NON-ASSUMABLE-CHOICE
#[test]
fn non_assumable_choices_are_a_closed_set_and_user_only_dependencies_cannot_be_required() {
    let errs = rejected(&with_steps(json!([
        {"id": "a", "title": "A", "prompt": "Do A.", "nonAssumableChoices": ["irreversible_action", "whatever"]},
        {"id": "b", "title": "B", "prompt": "Do B.", "nonAssumableChoices": "scope_boundary"},
        {"id": "c", "title": "C", "prompt": "Do C.", "output": {"contractRef": "wr.contracts.user_only_dependency"}}
    ])));
    let kind = find(&errs, Code::InvalidValue, "/steps/0/nonAssumableChoices/1");
    assert!(
        kind.message.contains("preference_tradeoff") && kind.message.contains("`whatever`"),
        "{}",
        kind.message
    );
    find(&errs, Code::WrongType, "/steps/1/nonAssumableChoices");
    let required = find(&errs, Code::InvalidValue, "/steps/2/output/contractRef");
    assert!(
        required.message.contains("cannot be required"),
        "{}",
        required.message
    );
    assert!(required.suggestion.contains("nonAssumableChoices"));
    assert_eq!(required.fix, remove("/steps/2/output/contractRef"));
}

/// Applies one RFC 6902 `move` (what the prompt + promptBlocks fix is).
fn apply_move(doc: &mut Value, from: &str, path: &str) {
    let (from_parent, from_key) = from.rsplit_once('/').unwrap();
    let moved = doc
        .pointer_mut(from_parent)
        .and_then(Value::as_object_mut)
        .and_then(|o| o.remove(from_key))
        .expect("the move's source exists");
    let (parent, key) = path.rsplit_once('/').unwrap();
    match doc
        .pointer_mut(parent)
        .expect("the move's target parent exists")
    {
        Value::Object(o) => {
            o.insert(key.to_owned(), moved);
        }
        Value::Array(a) => a.insert(key.parse().unwrap(), moved),
        other => panic!("cannot move into {other}"),
    }
}

/// The fix for a step with both `prompt` and `promptBlocks` keeps the prompt's text: into the
/// goal when there is none, else first in the procedure; never deleted.
#[test]
fn prompt_and_prompt_blocks_autofix_keeps_the_prompt_text() {
    let text = "Read the failing test output first.";
    for (blocks, lands_in) in [
        (
            json!({"constraints": ["Be brief."]}),
            "/steps/0/promptBlocks/goal",
        ),
        (
            json!({"goal": "Fix it.", "procedure": ["Run the tests."]}),
            "/steps/0/promptBlocks/procedure/0",
        ),
    ] {
        let mut src =
            with_steps(json!([{"id": "a", "title": "A", "prompt": text, "promptBlocks": blocks}]));
        let errs = rejected(&src);
        let both = find(&errs, Code::InvalidValue, "/steps/0/prompt");
        let Some(AutoFix::Move { from, path }) = both.fix.clone() else {
            panic!("expected a move, got {:?}", both.fix);
        };
        assert_eq!(
            (from.as_str(), path.as_str()),
            ("/steps/0/prompt", lands_in)
        );
        apply_move(&mut src, &from, &path);
        let compiled = compile(&src, &CompileContext::load("project")).expect("the fix compiles");
        assert!(
            compiled.snapshot.body.steps[0].prompt.contains(text),
            "{}",
            compiled.snapshot.body.steps[0].prompt
        );
    }
    // A goal and no procedure list: no single move keeps the text, so no fix deletes it.
    let src = with_steps(
        json!([{"id": "a", "title": "A", "prompt": text, "promptBlocks": {"goal": "Fix it."}}]),
    );
    let errs = rejected(&src);
    let both = find(&errs, Code::InvalidValue, "/steps/0/prompt");
    assert_eq!(both.fix, None);
    assert!(
        both.suggestion.contains("move the text"),
        "{}",
        both.suggestion
    );
}

/// The `WORKFLOW_INVALID` envelope says the first problem in its message and its fix in the
/// suggestion, once each (a text rendering shows the message, then "Next:" and the suggestion).
#[test]
fn the_invalid_workflow_envelope_says_the_fix_once() {
    let mut src = base();
    src["steps"] = json!([{"id": "a", "title": "A", "prompt": "x", "bogus": 1}]);
    let errs = rejected(&src);
    let first = &errs.errors()[0];
    let envelope = errs.to_envelope("project/sample.json");
    assert!(
        envelope.message.contains(&first.message),
        "{}",
        envelope.message
    );
    assert!(
        !envelope.message.contains(&first.suggestion),
        "the fix belongs to the suggestion only: {}",
        envelope.message
    );
    assert!(envelope.suggestion.starts_with(&first.suggestion));
}

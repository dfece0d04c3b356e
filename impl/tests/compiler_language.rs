//! The control flow of the workflow language, compile side (decision D139): every construct
//! lowers into the snapshot's `language` / loop fields exactly, the language's precedence rules
//! are applied (with a warning naming what it ignores), and every malformed construct is a
//! compile error with the pointer of the offending field and, where one exists, a fix.
//!
//! Guards against a construct that compiles into nothing (a condition silently dropped, a loop
//! whose kind is guessed), against lowering that disagrees with the language (which operator
//! wins, which loop variables exist, what `{}` means), and against errors without a pointer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use workrail::compiler::error::{AutoFix, CompileErrorCode as Code, CompileErrors};
use workrail::compiler::{CompileContext, Compiled, compile};
use workrail_spec::compiled::{
    CompiledCondition, CompiledStep, CompiledWarningCode, Condition, ConfirmationKind, LoopVars,
    LoopWhile, SequenceItem, ValidationCriterion,
};

fn workflow(steps: Value) -> Value {
    json!({"id": "project.lang", "name": "Lang", "description": "d", "steps": steps})
}

fn compiled(src: &Value) -> Compiled {
    compile(src, &CompileContext::load("project")).unwrap_or_else(|e| panic!("must compile:\n{e}"))
}

fn rejected(src: &Value) -> CompileErrors {
    compile(src, &CompileContext::load("project")).expect_err("must be rejected")
}

fn step<'c>(c: &'c Compiled, id: &str) -> &'c CompiledStep {
    c.snapshot
        .body
        .steps
        .iter()
        .find(|s| s.step_id.as_str() == id)
        .unwrap()
}

fn run_condition(cond: Value) -> Option<Condition> {
    let c = compiled(&workflow(json!([
        {"id": "s", "title": "S", "prompt": "x", "runCondition": cond}
    ])));
    step(&c, "s").language.run_condition.clone()
}

fn cond(v: Value) -> Condition {
    serde_json::from_value(v).unwrap()
}

/// decision: D139
#[test]
fn every_operator_lowers_into_the_closed_condition_set() {
    let cases = [
        (
            json!({"var": "m", "equals": "fast"}),
            json!({"op": "equals", "var": "m", "value": "fast"}),
        ),
        (
            json!({"var": "m", "not_equals": ["a"]}),
            json!({"op": "not_equals", "var": "m", "value": ["a"]}),
        ),
        (
            json!({"var": "n", "gt": 1}),
            json!({"op": "gt", "var": "n", "value": 1}),
        ),
        (
            json!({"var": "n", "gte": 1.5}),
            json!({"op": "gte", "var": "n", "value": 1.5}),
        ),
        (
            json!({"var": "n", "lt": 2}),
            json!({"op": "lt", "var": "n", "value": 2}),
        ),
        (
            json!({"var": "n", "lte": 2}),
            json!({"op": "lte", "var": "n", "value": 2}),
        ),
        (
            json!({"var": "t", "contains": "bug"}),
            json!({"op": "contains", "var": "t", "value": "bug"}),
        ),
        (
            json!({"var": "t", "contains": 42}),
            json!({"op": "contains", "var": "t", "value": "42"}),
        ),
        (
            json!({"var": "t", "startsWith": "fix"}),
            json!({"op": "starts_with", "var": "t", "value": "fix"}),
        ),
        (
            json!({"var": "t", "endsWith": ".rs"}),
            json!({"op": "ends_with", "var": "t", "value": ".rs"}),
        ),
        (
            json!({"var": "t", "matches": "^v[0-9]+$"}),
            json!({"op": "matches", "var": "t", "pattern": "^v[0-9]+$"}),
        ),
        (
            json!({"var": "t", "in": ["a", 1, null]}),
            json!({"op": "in", "var": "t", "values": ["a", 1, null]}),
        ),
        (
            json!({"var": "flag"}),
            json!({"op": "truthy", "var": "flag"}),
        ),
        (
            json!({"and": [{"var": "a"}, {"or": [{"var": "b"}, {"not": {"var": "c"}}]}]}),
            json!({"op": "and", "all": [
                {"op": "truthy", "var": "a"},
                {"op": "or", "any": [
                    {"op": "truthy", "var": "b"},
                    {"op": "not", "condition": {"op": "truthy", "var": "c"}}
                ]}
            ]}),
        ),
    ];
    for (source, expected) in cases {
        assert_eq!(
            run_condition(source.clone()),
            Some(cond(expected)),
            "{source}"
        );
    }
    // `{}` always holds: the step carries no condition at all.
    assert_eq!(run_condition(json!({})), None);
}

/// decision: D139
#[test]
fn the_first_operator_in_the_language_order_wins_and_the_rest_is_a_warning() {
    let c = compiled(&workflow(json!([
        {"id": "s", "title": "S", "prompt": "x",
         "runCondition": {"var": "n", "gt": 5, "equals": 3, "and": [{"var": "x"}]}},
        {"id": "t", "title": "T", "prompt": "x",
         "runCondition": {"or": [{"var": "a"}], "and": [{"var": "b"}], "not": {"var": "c"}}}
    ])));
    assert_eq!(
        step(&c, "s").language.run_condition,
        Some(cond(json!({"op": "equals", "var": "n", "value": 3})))
    );
    assert_eq!(
        step(&c, "t").language.run_condition,
        Some(cond(
            json!({"op": "and", "all": [{"op": "truthy", "var": "b"}]})
        ))
    );
    let warnings = &c.snapshot.body.compiled_warnings;
    let s = warnings
        .iter()
        .find(|w| w.pointer.as_deref() == Some("/steps/0/runCondition"))
        .unwrap();
    assert_eq!(s.code, CompiledWarningCode::LanguageIgnored);
    assert!(
        s.message.contains("`equals`") && s.message.contains("`gt`, `and`"),
        "{}",
        s.message
    );
    let t = warnings
        .iter()
        .find(|w| w.pointer.as_deref() == Some("/steps/1/runCondition"))
        .unwrap();
    assert!(
        t.message.contains("decided by `and`") && t.message.contains("`or`, `not`"),
        "{}",
        t.message
    );
}

/// decision: D139
#[test]
fn malformed_conditions_are_errors_with_pointers_and_fixes() {
    let errs = rejected(&workflow(json!([
        {"id": "a", "title": "A", "prompt": "x", "runCondition": {"var": "m", "notEquals": "x"}},
        {"id": "b", "title": "B", "prompt": "x", "runCondition": {"var": "m", "in": "x"}},
        {"id": "c", "title": "C", "prompt": "x", "runCondition": {"var": "m", "matches": "(?=a)"}},
        {"id": "d", "title": "D", "prompt": "x", "runCondition": {"and": [{}, {"var": "m"}]}},
        {"id": "e", "title": "E", "prompt": "x", "runCondition": {"var": "m", "gt": "3"}},
        {"id": "f", "title": "F", "prompt": "x", "runCondition": {"equals": 3}},
        {"id": "g", "title": "G", "prompt": "x", "runCondition": "yes"},
        {"id": "h", "title": "H", "prompt": "x", "runCondition": {"var": "m", "between": [1, 2]}}
    ])));
    let near = errs
        .find(Code::UnknownField, "/steps/0/runCondition/notEquals")
        .unwrap();
    assert_eq!(
        near.fix,
        Some(AutoFix::Move {
            from: "/steps/0/runCondition/notEquals".into(),
            path: "/steps/0/runCondition/not_equals".into()
        })
    );
    assert!(
        errs.find(Code::WrongType, "/steps/1/runCondition/in")
            .is_some()
    );
    // A pattern that does not compile is a warning, never an error (decision D153).
    assert!(
        errs.find(Code::InvalidValue, "/steps/2/runCondition/matches")
            .is_none()
    );
    let empty = errs
        .find(Code::InvalidValue, "/steps/3/runCondition/and/0")
        .unwrap();
    assert_eq!(
        empty.fix,
        Some(AutoFix::Remove {
            path: "/steps/3/runCondition/and/0".into()
        })
    );
    assert!(
        errs.find(Code::WrongType, "/steps/4/runCondition/gt")
            .is_some()
    );
    assert!(
        errs.find(Code::MissingField, "/steps/5/runCondition/var")
            .is_some()
    );
    assert!(
        errs.find(Code::WrongType, "/steps/6/runCondition")
            .is_some()
    );
    let unknown = errs
        .find(Code::UnknownField, "/steps/7/runCondition/between")
        .unwrap();
    assert_eq!(
        unknown.fix,
        Some(AutoFix::Remove {
            path: "/steps/7/runCondition/between".into()
        })
    );
}

/// decision: D139
#[test]
fn the_three_confirmation_forms_lower_into_flag_condition_and_kind() {
    let c = compiled(&workflow(json!([
        {"id": "a", "title": "A", "prompt": "x", "requireConfirmation": true},
        {"id": "b", "title": "B", "prompt": "x", "requireConfirmation": {"var": "risk", "equals": "high"}},
        {"id": "c", "title": "C", "prompt": "x", "requireConfirmation": {"kind": "human_approval"}},
        {"id": "d", "title": "D", "prompt": "x", "requireConfirmation": {"kind": "coordinator_eval", "condition": {"var": "gate"}}},
        {"id": "e", "title": "E", "prompt": "x", "requireConfirmation": false}
    ])));
    let a = step(&c, "a");
    assert!(a.require_confirmation && a.language.confirm_when.is_none());
    let b = step(&c, "b");
    assert!(b.require_confirmation);
    assert_eq!(
        b.language.confirm_when,
        Some(cond(
            json!({"op": "equals", "var": "risk", "value": "high"})
        ))
    );
    assert_eq!(b.language.context_reads, ["risk"]);
    let cc = step(&c, "c");
    assert!(cc.require_confirmation);
    assert_eq!(
        cc.language.confirmation_kind,
        Some(ConfirmationKind::HumanApproval)
    );
    let d = step(&c, "d");
    assert_eq!(
        d.language.confirmation_kind,
        Some(ConfirmationKind::CoordinatorEval)
    );
    assert_eq!(
        d.language.confirm_when,
        Some(cond(json!({"op": "truthy", "var": "gate"})))
    );
    assert!(!step(&c, "e").require_confirmation);
    let errs = rejected(&workflow(json!([
        {"id": "a", "title": "A", "prompt": "x", "requireConfirmation": {"kind": "robot"}},
        {"id": "b", "title": "B", "prompt": "x", "requireConfirmation": "yes"}
    ])));
    assert!(
        errs.find(Code::InvalidValue, "/steps/0/requireConfirmation/kind")
            .is_some()
    );
    assert!(
        errs.find(Code::WrongType, "/steps/1/requireConfirmation")
            .is_some()
    );
}

/// decision: D139
#[test]
fn validation_criteria_lower_rules_compositions_and_conditions() {
    let c = compiled(&workflow(json!([
        {"id": "a", "title": "A", "prompt": "x", "validationCriteria": [
            {"type": "contains", "value": "Summary", "message": "Add a Summary."},
            {"type": "regex", "pattern": "^## ", "flags": "m"},
            {"type": "length", "min": 10, "max": 500, "condition": {"var": "strict"}},
            {"type": "schema", "schema": {"type": "object", "required": ["ok"]}}
        ]},
        {"id": "b", "title": "B", "prompt": "x", "validationCriteria":
            {"or": [{"type": "contains", "value": "PASS"}, {"not": {"type": "contains", "value": "FAIL"}}]}},
        {"id": "c", "title": "C", "prompt": "x", "validationCriteria": {"type": "contains", "value": "ok"}}
    ])));
    let a = step(&c, "a").language.validation.clone().unwrap();
    let expected: ValidationCriterion = serde_json::from_value(json!({"kind": "all", "all": [
        {"kind": "contains", "value": "Summary", "message": "Add a Summary."},
        {"kind": "regex", "pattern": "^## ", "flags": "m"},
        {"kind": "length", "min": 10, "max": 500, "when": {"op": "truthy", "var": "strict"}},
        {"kind": "schema", "schema": {"type": "object", "required": ["ok"]}}
    ]}))
    .unwrap();
    assert_eq!(a, expected);
    let b = step(&c, "b").language.validation.clone().unwrap();
    let expected: ValidationCriterion = serde_json::from_value(json!({"kind": "any", "any": [
        {"kind": "contains", "value": "PASS"},
        {"kind": "not", "criterion": {"kind": "contains", "value": "FAIL"}}
    ]}))
    .unwrap();
    assert_eq!(b, expected);
    assert!(matches!(
        step(&c, "c").language.validation,
        Some(ValidationCriterion::Contains { .. })
    ));
    // What is checked is spelled out in the prompt.
    assert!(
        step(&c, "a")
            .prompt
            .contains("## Notes checks\nWorkRail checks output.notesMarkdown"),
        "{}",
        step(&c, "a").prompt
    );
    assert!(
        step(&c, "a").prompt.contains("- Add a Summary.")
            || step(&c, "a")
                .prompt
                .contains("the notes contain \"Summary\"")
    );
    let errs = rejected(&workflow(json!([
        {"id": "a", "title": "A", "prompt": "x", "validationCriteria": [{"type": "regex", "pattern": "a", "flags": "gg"}]},
        {"id": "b", "title": "B", "prompt": "x", "validationCriteria": [{"type": "schema", "schema": {"type": 12}}]},
        {"id": "c", "title": "C", "prompt": "x", "validationCriteria": [{"type": "size", "value": "a"}]},
        {"id": "d", "title": "D", "prompt": "x", "validationCriteria": [{"type": "length"}]},
        {"id": "e", "title": "E", "prompt": "x", "validationCriteria": [{"type": "contains", "value": "a", "extra": 1}]}
    ])));
    assert!(
        errs.find(Code::InvalidValue, "/steps/0/validationCriteria/0")
            .is_some()
    );
    assert!(
        errs.find(Code::InvalidValue, "/steps/1/validationCriteria/0/schema")
            .is_some()
    );
    assert!(
        errs.find(Code::InvalidValue, "/steps/2/validationCriteria/0/type")
            .is_some()
    );
    assert!(
        errs.find(Code::MissingField, "/steps/3/validationCriteria/0/min")
            .is_some()
    );
    assert!(
        errs.find(Code::UnknownField, "/steps/4/validationCriteria/0/extra")
            .is_some()
    );
}

fn loop_step(loop_config: Value, body: Value) -> Value {
    workflow(json!([
        {"id": "first", "title": "First", "prompt": "Start."},
        {"type": "loop", "id": "work-loop", "title": "Work", "loop": loop_config, "body": body}
    ]))
}

/// decision: D139
#[test]
fn the_four_loop_kinds_lower_with_the_languages_default_variables() {
    let body = json!([{"id": "inner", "title": "Inner", "prompt": "Item {{currentItem}} at {{currentIndex}}, pass {{currentIteration}}."}]);
    let cases = [
        (
            json!({"type": "while", "condition": {"var": "more"}, "maxIterations": 4}),
            LoopWhile::ContextWhile {
                condition: cond(json!({"op": "truthy", "var": "more"})),
            },
            4,
            false,
        ),
        (
            json!({"type": "until", "condition": {"var": "done", "equals": true}}),
            LoopWhile::ContextUntil {
                condition: cond(json!({"op": "equals", "var": "done", "value": true})),
            },
            100,
            false,
        ),
        (
            json!({"type": "for", "count": 3, "maxIterations": 5}),
            LoopWhile::Count { count: 3 },
            5,
            false,
        ),
        (
            json!({"type": "for", "count": "retries", "maxIterations": 5, "iterationVar": "attempt"}),
            LoopWhile::CountVar {
                var: "retries".into(),
            },
            5,
            false,
        ),
        (
            json!({"type": "forEach", "items": "slices", "maxIterations": 20}),
            LoopWhile::ForEach {
                items: "slices".into(),
            },
            20,
            true,
        ),
    ];
    for (config, expected, max, for_each) in cases {
        let c = compiled(&loop_step(config.clone(), body.clone()));
        let l = &c.snapshot.body.loops[0];
        assert_eq!(l.loop_id.as_str(), "work-loop");
        assert_eq!(l.while_, expected, "{config}");
        assert_eq!(l.max_iterations, max, "{config}");
        let iteration = config
            .get("iterationVar")
            .and_then(Value::as_str)
            .unwrap_or("currentIteration");
        assert_eq!(
            l.vars,
            LoopVars {
                iteration_var: Some(iteration.into()),
                item_var: for_each.then(|| "currentItem".into()),
                index_var: for_each.then(|| "currentIndex".into()),
            }
        );
        assert_eq!(l.kept.get("title"), Some(&json!("Work")));
        assert_eq!(
            step(&c, "inner").language.context_reads,
            ["currentIndex", "currentItem", "currentIteration"]
        );
    }
}

/// decision: D139
#[test]
fn a_body_given_as_a_step_id_moves_that_step_into_the_loop() {
    let c = compiled(&workflow(json!([
        {"id": "setup", "title": "Setup", "prompt": "Set up."},
        {"type": "loop", "id": "retry-loop", "title": "Retry", "loop": {"type": "for", "count": 2, "maxIterations": 3}, "body": "attempt"},
        {"id": "attempt", "title": "Attempt", "prompt": "Try once."},
        {"id": "wrap", "title": "Wrap", "prompt": "Done."}
    ])));
    let body = &c.snapshot.body;
    assert_eq!(
        body.sequence,
        vec![
            SequenceItem::Step {
                step_id: "setup".parse().unwrap()
            },
            SequenceItem::Loop {
                loop_id: "retry-loop".parse().unwrap()
            },
            SequenceItem::Step {
                step_id: "wrap".parse().unwrap()
            },
        ]
    );
    assert_eq!(
        body.loops[0].body,
        vec![SequenceItem::Step {
            step_id: "attempt".parse().unwrap()
        }]
    );
    let errs = rejected(&workflow(json!([
        {"type": "loop", "id": "l", "title": "L", "loop": {"type": "for", "count": 1}, "body": "nowhere"}
    ])));
    let e = errs.find(Code::InvalidValue, "/steps/0/body").unwrap();
    assert!(e.message.contains("nowhere"), "{}", e.message);
}

/// decision: D139
#[test]
fn a_while_loop_with_a_loop_control_step_is_a_loop_control_loop() {
    let decide = json!({"id": "decide", "title": "Decide", "prompt": "Decide.", "outputContract": {"contractRef": "wr.contracts.loop_control"}});
    for config in [
        json!({"type": "while", "conditionSource": {"kind": "artifact_contract", "contractRef": "wr.contracts.loop_control", "loopId": "label_only"}, "maxIterations": 3}),
        json!({"type": "while", "maxIterations": 3, "condition": {"var": "ignored"}}),
    ] {
        let c = compiled(&loop_step(
            config.clone(),
            json!([{"id": "work", "title": "Work", "prompt": "Work."}, decide.clone()]),
        ));
        let l = &c.snapshot.body.loops[0];
        assert_eq!(
            l.while_,
            LoopWhile::ConditionRef {
                condition_id: "work-loop".parse().unwrap()
            },
            "{config}"
        );
        assert!(matches!(
            c.snapshot.body.conditions.as_slice(),
            [CompiledCondition::LoopControl { condition_id, .. }] if condition_id.as_str() == "work-loop"
        ));
        assert_eq!(
            step(&c, "decide")
                .output
                .as_ref()
                .and_then(|o| o.contract_ref.as_deref()),
            Some("wr.contracts.loop_control")
        );
    }
    // An explicit context source wins over the decision step, which is then misplaced.
    let errs = rejected(&loop_step(
        json!({"type": "while", "conditionSource": {"kind": "context_variable", "condition": {"var": "more"}}}),
        json!([{"id": "work", "title": "Work", "prompt": "Work."}, decide]),
    ));
    assert!(
        errs.find(
            Code::LoopDecisionStep,
            "/steps/1/body/1/outputContract/contractRef"
        )
        .is_some(),
        "{errs}"
    );
    let errs = rejected(&loop_step(
        json!({"type": "while"}),
        json!([{"id": "work", "title": "Work", "prompt": "Work."}]),
    ));
    assert!(
        errs.find(Code::MissingField, "/steps/1/loop/condition")
            .is_some()
    );
}

/// decision: D139
#[test]
fn assessments_compile_sorted_with_their_references_checked() {
    let src = json!({
        "id": "project.assess", "name": "A", "description": "d",
        "assessments": [
            {"id": "risk", "purpose": "How risky", "dimensions": [{"id": "impact", "purpose": "Blast radius", "levels": ["low", "high"]}]},
            {"id": "readiness", "purpose": "Ready to ship", "dimensions": [
                {"id": "confidence", "purpose": "Confidence", "levels": ["low", "medium", "high"]},
                {"id": "tests", "purpose": "Tests", "levels": ["none", "some", "full"], "required": false}
            ]}
        ],
        "steps": [{"id": "gate", "title": "Gate", "prompt": "Judge.", "assessmentRefs": ["readiness"],
                   "assessmentConsequences": [{"when": {"anyEqualsLevel": "low"}, "effect": {"kind": "require_followup", "guidance": "Gather more evidence."}}]}]
    });
    let c = compiled(&src);
    let ids: Vec<&str> = c
        .snapshot
        .body
        .assessments
        .iter()
        .map(|a| a.assessment_id.as_str())
        .collect();
    assert_eq!(ids, ["readiness", "risk"]);
    assert!(!c.snapshot.body.assessments[0].dimensions[1].required);
    let gate = step(&c, "gate");
    assert_eq!(gate.language.assessment_refs, ["readiness"]);
    assert_eq!(
        gate.language.assessment_consequences[0].guidance,
        "Gather more evidence."
    );
    assert!(gate.prompt.contains("## Assessment\n"), "{}", gate.prompt);
    assert!(
        gate.prompt.contains("\"assessmentId\":\"readiness\""),
        "{}",
        gate.prompt
    );
    let mut bad = src.clone();
    bad["steps"][0]["assessmentRefs"] = json!(["readyness"]);
    bad["steps"][0]["assessmentConsequences"][0]["when"]["anyEqualsLevel"] = json!("dire");
    let errs = rejected(&bad);
    assert!(
        errs.find(Code::InvalidValue, "/steps/0/assessmentRefs/0")
            .is_some()
    );
    let mut bad = src.clone();
    bad["steps"][0]["assessmentConsequences"][0]["when"]["anyEqualsLevel"] = json!("dire");
    let errs = rejected(&bad);
    let level = errs
        .find(
            Code::InvalidValue,
            "/steps/0/assessmentConsequences/0/when/anyEqualsLevel",
        )
        .unwrap();
    assert!(level.suggestion.contains("low"), "{}", level.suggestion);
    let mut bad = src;
    bad["steps"][0]
        .as_object_mut()
        .unwrap()
        .remove("assessmentRefs");
    let errs = rejected(&bad);
    assert!(
        errs.find(Code::MissingField, "/steps/0/assessmentRefs")
            .is_some()
    );
}

/// decision: D139, D140
#[test]
fn fragments_and_markers_become_context_reads() {
    let c = compiled(&workflow(json!([
        {"id": "s", "title": "Ticket {{ticket.id}}", "prompt": "Work on {{ticket.title}} in {{repo}}.",
         "requireConfirmation": {"var": "risk", "equals": "high"},
         "promptFragments": [
            {"id": "fast", "when": {"var": "mode", "equals": "fast"}, "text": "Be brief about {{scope}}."},
            {"id": "always", "text": "Cite sources."}
         ]}
    ])));
    let s = step(&c, "s");
    assert_eq!(
        s.language.context_reads,
        ["mode", "repo", "risk", "scope", "ticket"]
    );
    assert_eq!(s.language.prompt_fragments.len(), 2);
    assert_eq!(s.language.prompt_fragments[0].fragment_id, "fast");
    assert!(s.language.prompt_fragments[1].when.is_none());
    // The compiled prompt keeps the markers: they are rendered from frozen bindings.
    assert!(s.prompt.contains("{{ticket.title}}"));
    let errs = rejected(&workflow(json!([
        {"id": "s", "title": "S", "prompt": "x", "promptFragments": [
            {"id": "a", "text": "one"}, {"id": "a", "text": "two"}
        ]}
    ])));
    assert!(
        errs.find(Code::DuplicateId, "/steps/0/promptFragments/1/id")
            .is_some()
    );
}

/// decision: D140
#[test]
fn expressions_in_braces_are_kept_verbatim_only_in_legacy_workflows() {
    let mut src = workflow(json!([
        {"id": "s", "title": "S", "prompt": "Item {{index + 1}} of {{total}}."}
    ]));
    assert!(
        rejected(&src)
            .find(Code::Templating, "/steps/0/prompt")
            .is_some()
    );
    src["id"] = json!("legacy-flow");
    let c = compiled(&src);
    assert_eq!(step(&c, "s").language.context_reads, ["total"]);
    assert!(step(&c, "s").prompt.contains("{{index + 1}}"));
}

/// decision: D144
#[test]
fn a_branch_lowers_into_first_match_run_conditions() {
    let c = compiled(&workflow(json!([
        {"type": "branch", "id": "by-size",
         "branches": [
            {"when": {"var": "size", "equals": "small"}, "steps": [{"id": "quick", "title": "Quick", "prompt": "Quick."}]},
            {"when": {"var": "size", "equals": "large"}, "steps": [
                {"id": "plan", "title": "Plan", "prompt": "Plan.", "runCondition": {"var": "planned", "not_equals": true}},
                {"id": "build", "title": "Build", "prompt": "Build."}
            ]}
         ],
         "default": [{"id": "ask", "title": "Ask", "prompt": "Ask for the size."}]},
        {"id": "wrap", "title": "Wrap", "prompt": "Wrap."}
    ])));
    let small = json!({"op": "equals", "var": "size", "value": "small"});
    let large = json!({"op": "equals", "var": "size", "value": "large"});
    assert_eq!(
        step(&c, "quick").language.run_condition,
        Some(cond(small.clone()))
    );
    assert_eq!(
        step(&c, "plan").language.run_condition,
        Some(cond(json!({"op": "and", "all": [
            large.clone(),
            {"op": "not", "condition": {"op": "or", "any": [small.clone()]}},
            {"op": "not_equals", "var": "planned", "value": true}
        ]})))
    );
    assert_eq!(
        step(&c, "build").language.run_condition,
        Some(cond(json!({"op": "and", "all": [
            large.clone(),
            {"op": "not", "condition": {"op": "or", "any": [small.clone()]}}
        ]})))
    );
    assert_eq!(
        step(&c, "ask").language.run_condition,
        Some(cond(
            json!({"op": "not", "condition": {"op": "or", "any": [small, large]}})
        ))
    );
    assert_eq!(step(&c, "wrap").language.run_condition, None);
    assert_eq!(
        step(&c, "build").language.kept.get("branch"),
        Some(&json!([{"branch": "by-size", "case": "1"}]))
    );
    let order: Vec<&str> = c
        .snapshot
        .body
        .steps
        .iter()
        .map(|s| s.step_id.as_str())
        .collect();
    assert_eq!(order, ["quick", "plan", "build", "ask", "wrap"]);
}

/// decision: D142
#[test]
fn attempt_budgets_and_notes_optional_lower_onto_each_step() {
    let c = compiled(&json!({
        "id": "project.budget", "name": "B", "description": "d", "maxAttempts": 3,
        "steps": [
            {"id": "a", "title": "A", "prompt": "x"},
            {"id": "b", "title": "B", "prompt": "x", "maxAttempts": 1, "notesOptional": true}
        ]
    }));
    assert_eq!(step(&c, "a").language.max_attempts, Some(3));
    assert_eq!(step(&c, "b").language.max_attempts, Some(1));
    assert!(step(&c, "b").language.notes_optional);
    assert!(!step(&c, "a").language.notes_optional);
    let errs = rejected(&workflow(json!([
        {"id": "a", "title": "A", "prompt": "x", "maxAttempts": 0}
    ])));
    assert_eq!(
        errs.find(Code::InvalidValue, "/steps/0/maxAttempts")
            .unwrap()
            .fix,
        Some(AutoFix::Replace {
            path: "/steps/0/maxAttempts".into(),
            value: json!(1)
        })
    );
}

/// decision: D139
#[test]
fn output_contract_is_the_languages_spelling_of_output_contract_ref() {
    let c = compiled(&loop_step(
        json!({"type": "while", "maxIterations": 2}),
        json!([{"id": "decide", "title": "Decide", "prompt": "Decide.", "outputContract": {"contractRef": "wr.contracts.loop_control", "required": true}}]),
    ));
    assert!(step(&c, "decide").output.is_some());
    // `output` and `outputContract` naming different contracts is an error; `required: false`
    // is an output hint, not a requirement (decision D146).
    let errs = rejected(&workflow(json!([
        {"id": "a", "title": "A", "prompt": "x", "output": {"contractRef": "wr.contracts.verification_report"},
         "outputContract": {"contractRef": "wr.contracts.workflow_divergence"}}
    ])));
    assert!(
        errs.find(Code::InvalidValue, "/steps/0/outputContract")
            .is_some()
    );
    let c = compiled(&workflow(json!([
        {"id": "b", "title": "B", "prompt": "x", "outputContract": {"contractRef": "wr.contracts.verification_report", "required": false}}
    ])));
    let b = step(&c, "b");
    assert!(b.output.as_ref().is_some_and(|o| o.contract_ref.is_none()));
    assert!(b.language.kept.contains_key("outputContract"));
}

/// lock: L-VERSION-ADDITIVE-ONLY
/// decision: D139
#[test]
fn a_workflow_without_language_fields_serializes_no_language() {
    let c = compiled(&workflow(
        json!([{"id": "a", "title": "A", "prompt": "Do A."}]),
    ));
    let json = serde_json::to_value(&c.snapshot).unwrap();
    assert!(json["steps"][0].get("language").is_none(), "{json}");
    assert!(json.get("assessments").is_none());
}

/// decision: D141
#[test]
fn a_decision_outside_any_loop_is_allowed_only_in_the_languages_spelling() {
    let c = compiled(&workflow(json!([
        {"id": "init", "title": "Init", "prompt": "Decide.", "outputContract": {"contractRef": "wr.contracts.loop_control"}},
        {"id": "next", "title": "Next", "prompt": "Go on."}
    ])));
    let warning = c
        .snapshot
        .body
        .compiled_warnings
        .iter()
        .find(|w| w.pointer.as_deref() == Some("/steps/0/outputContract/contractRef"))
        .unwrap();
    assert_eq!(warning.code, CompiledWarningCode::LanguageIgnored);
    assert!(
        warning.message.contains("decides nothing"),
        "{}",
        warning.message
    );
    let errs = rejected(&workflow(json!([
        {"id": "init", "title": "Init", "prompt": "Decide.", "output": {"contractRef": "wr.contracts.loop_control"}}
    ])));
    assert!(
        errs.find(Code::LoopDecisionStep, "/steps/0/output/contractRef")
            .is_some()
    );
}

/// A `matches` pattern that does not compile loads with a warning and never matches, as the
/// language evaluates it (the workflow is not refused).
///
/// decision: D153
#[test]
fn a_pattern_that_does_not_compile_warns_and_never_matches() {
    let src = json!({"id": "pattern-check", "name": "P", "description": "D", "steps": [
        {"id": "a", "title": "A", "prompt": "x", "runCondition": {"var": "m", "matches": "(unclosed"}},
        {"id": "b", "title": "B", "prompt": "y"}
    ]});
    let compiled = compile(&src, &CompileContext::load("project")).expect("loads");
    let warning = compiled
        .snapshot
        .body
        .compiled_warnings
        .iter()
        .find(|w| w.pointer.as_deref() == Some("/steps/0/runCondition/matches"))
        .expect("a warning at the pattern");
    assert!(
        warning.message.contains("never holds"),
        "{}",
        warning.message
    );
    let condition = compiled.snapshot.body.steps[0]
        .language
        .run_condition
        .clone()
        .expect("kept");
    let context = json!({"m": "(unclosed"});
    assert!(!condition.evaluate(context.as_object().unwrap()));
}

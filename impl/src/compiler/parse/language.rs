//! The control flow of the workflow language (WorkRail 3.x's spelling, decision D139, and the
//! first-match `branch`): run conditions, confirmation rules, validation criteria, assessments
//! and their consequences, conditional prompt fragments, attempt budgets, `notesOptional`, loops
//! of the form `{type: loop, id, loop: {...}, body}` and `branch` steps.
//!
//! Conditions are lowered here into the closed `Condition` set with the language's precedence:
//! with `var`, the first operator in the order `equals`, `not_equals`, `gt`, `gte`, `lt`, `lte`,
//! `contains`, `startsWith`, `endsWith`, `matches`, `in` decides (a bare `var` is truthiness);
//! without `var`, `and`, then `or`, then `not`. Every other operator written beside the deciding
//! one is ignored by the language, so it is a `language_ignored` warning naming it. `{}` holds
//! always; an unknown operator, a malformed operand or a `{}` nested in `and`/`or`/`not` (which
//! makes the whole condition false in the language) is a compile error.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};
use workrail_spec::compiled::{
    AssessmentConsequence, AssessmentDefinition, AssessmentDimension, CompiledWarning,
    CompiledWarningCode, Condition, ConfirmationKind, FunctionScope, LoopVars, LoopWhile,
    PromptFragment, ValidationCriterion,
};
use workrail_spec::ids::{ConditionId, LoopId, StepId};

use super::fields::{Fields, array, non_blank, one_of, string, type_name};
use super::{Parser, delimiter_safe, functions};
use crate::builtins::contracts::LOOP_CONTROL;
use crate::compiler::error::{AutoFix, CompileError, CompileErrorCode as Code, child, index};
use crate::compiler::language::{
    ConditionSource, LoopLang, PendingWhile, StepLang, WorkflowLanguage, and,
};
use crate::compiler::source::{
    ConditionKind, LoopStep, NormalStep, SourceCondition, SourceOutput, SourceStep,
};

/// The comparison operators of a `var` condition, in the order the language tries them.
const COMPARISONS: &[&str] = &[
    "equals",
    "not_equals",
    "gt",
    "gte",
    "lt",
    "lte",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "in",
];
const LOGICAL: &[&str] = &["and", "or", "not"];

/// The language's default `maxIterations` (its schema's default).
pub(crate) const DEFAULT_MAX_ITERATIONS: u32 = 100;
/// The largest `maxAttempts` a step or workflow may declare.
pub(crate) const MAX_ATTEMPTS_LIMIT: u32 = 100;

fn warn(p: &mut Parser<'_>, pointer: &str, message: String) {
    p.warnings.push(CompiledWarning {
        code: CompiledWarningCode::LanguageIgnored,
        message,
        pointer: Some(pointer.to_owned()),
    });
}

fn normalized(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// A condition of the language (`runCondition`, `when`, `loop.condition`, ...). `Some(None)` is
/// `{}`, which always holds; `None` means an error was reported.
pub(super) fn condition(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
) -> Option<Option<Condition>> {
    match value.as_object() {
        Some(map) if map.is_empty() => Some(None),
        Some(_) => condition_node(p, value, pointer).map(Some),
        None => {
            p.error(CompileError::new(
                Code::WrongType,
                pointer,
                format!(
                    "a condition must be a JSON object, found {}.",
                    type_name(value)
                ),
                "Write e.g. `{\"var\": \"mode\", \"equals\": \"fast\"}`, `{\"and\": [...]}` or `{}` (always).",
            ));
            None
        }
    }
}

fn condition_node(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<Condition> {
    let Some(map) = value.as_object() else {
        p.error(CompileError::new(
            Code::WrongType,
            pointer,
            format!(
                "a condition must be a JSON object, found {}.",
                type_name(value)
            ),
            "Write e.g. `{\"var\": \"mode\", \"equals\": \"fast\"}`.",
        ));
        return None;
    };
    if map.is_empty() {
        p.error(
            CompileError::new(
                Code::InvalidValue,
                pointer,
                "an empty condition `{}` inside `and`, `or` or `not` is malformed: the language evaluates the whole condition as false.",
                "Remove it, or write the test it should make.",
            )
            .with_fix(AutoFix::Remove {
                path: pointer.to_owned(),
            }),
        );
        return None;
    }
    let mut ok = true;
    for key in map.keys() {
        if key == "var" || COMPARISONS.contains(&key.as_str()) || LOGICAL.contains(&key.as_str()) {
            continue;
        }
        ok = false;
        let at = child(pointer, key);
        let near = COMPARISONS
            .iter()
            .chain(LOGICAL)
            .find(|k| normalized(k) == normalized(key));
        let mut error = CompileError::new(
            Code::UnknownField,
            at.clone(),
            format!(
                "`{key}` is not a condition operator; a condition has `var` with one of {}, or `and`, `or`, `not`.",
                COMPARISONS.join(", ")
            ),
            match near {
                Some(near) => format!("Rename `{key}` to `{near}`."),
                None => "Remove it, or use one of the operators listed.".to_owned(),
            },
        );
        error = error.with_fix(match near {
            Some(near) if !map.contains_key(*near) => AutoFix::Move {
                from: at,
                path: child(pointer, near),
            },
            _ => AutoFix::Remove { path: at },
        });
        p.error(error);
    }
    if !ok {
        return None;
    }
    match map.get("var") {
        Some(var) => var_condition(p, map, var, pointer),
        None => logical_condition(p, map, pointer),
    }
}

fn var_condition(
    p: &mut Parser<'_>,
    map: &Map<String, Value>,
    var: &Value,
    pointer: &str,
) -> Option<Condition> {
    let var_at = child(pointer, "var");
    let var = non_blank(p, var, &var_at, "a condition's `var`")?.to_owned();
    let written: Vec<&str> = COMPARISONS
        .iter()
        .copied()
        .filter(|op| map.contains_key(*op))
        .collect();
    let ignored: Vec<&str> = written
        .iter()
        .skip(1)
        .copied()
        .chain(LOGICAL.iter().copied().filter(|op| map.contains_key(*op)))
        .collect();
    if !ignored.is_empty() {
        let decides = written
            .first()
            .map_or("truthiness of `var`".to_owned(), |op| format!("`{op}`"));
        warn(
            p,
            pointer,
            format!(
                "this condition on `{var}` is decided by {decides}; the language ignores {} written beside it.",
                ignored
                    .iter()
                    .map(|op| format!("`{op}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    let Some(op) = written.first().copied() else {
        return Some(Condition::Truthy { var });
    };
    let at = child(pointer, op);
    let operand = map.get(op)?;
    let number = |p: &mut Parser<'_>| match operand {
        Value::Number(n) => Some(n.clone()),
        other => {
            p.error(CompileError::new(
                Code::WrongType,
                at.clone(),
                format!("`{op}` compares with a number, found {}.", type_name(other)),
                format!("Write a JSON number, e.g. `\"{op}\": 3`."),
            ));
            None
        }
    };
    let text = |p: &mut Parser<'_>| match operand {
        Value::String(s) => Some(s.clone()),
        // The language compares a number or a boolean operand by its text.
        Value::Number(_) | Value::Bool(_) => {
            Some(workrail_spec::condition::js_string(Some(operand)))
        }
        other => {
            p.error(CompileError::new(
                Code::WrongType,
                at.clone(),
                format!("`{op}` takes a string, found {}.", type_name(other)),
                format!("Write a string, e.g. `\"{op}\": \"draft\"`."),
            ));
            None
        }
    };
    Some(match op {
        "equals" => Condition::Equals {
            var,
            value: operand.clone(),
        },
        "not_equals" => Condition::NotEquals {
            var,
            value: operand.clone(),
        },
        "gt" => Condition::Gt {
            var,
            value: number(p)?,
        },
        "gte" => Condition::Gte {
            var,
            value: number(p)?,
        },
        "lt" => Condition::Lt {
            var,
            value: number(p)?,
        },
        "lte" => Condition::Lte {
            var,
            value: number(p)?,
        },
        "contains" => Condition::Contains {
            var,
            value: text(p)?,
        },
        "startsWith" => Condition::StartsWith {
            var,
            value: text(p)?,
        },
        "endsWith" => Condition::EndsWith {
            var,
            value: text(p)?,
        },
        "matches" => {
            let pattern = text(p)?;
            if let Err(e) = workrail_spec::condition::pattern_compiles(&pattern) {
                p.error(CompileError::new(
                    Code::InvalidValue,
                    at,
                    format!("`matches` pattern `{pattern}` does not compile: {e}"),
                    "Fix the regular expression (no look-around or back-references); it is matched case-insensitively against the value's text.",
                ));
                return None;
            }
            Condition::Matches { var, pattern }
        }
        _ => match operand {
            Value::Array(values) => Condition::In {
                var,
                values: values.clone(),
            },
            other => {
                p.error(CompileError::new(
                    Code::WrongType,
                    at,
                    format!("`in` takes an array of values, found {}.", type_name(other)),
                    "Write e.g. `\"in\": [\"small\", \"medium\"]`.",
                ));
                return None;
            }
        },
    })
}

fn logical_condition(
    p: &mut Parser<'_>,
    map: &Map<String, Value>,
    pointer: &str,
) -> Option<Condition> {
    let written: Vec<&str> = LOGICAL
        .iter()
        .copied()
        .filter(|op| map.contains_key(*op))
        .collect();
    let Some(op) = written.first().copied() else {
        let ops: Vec<&str> = COMPARISONS
            .iter()
            .copied()
            .filter(|op| map.contains_key(*op))
            .collect();
        p.error(CompileError::new(
            Code::MissingField,
            child(pointer, "var"),
            format!(
                "this condition has `{}` but no `var` naming the context value to test.",
                ops.join("`, `")
            ),
            "Add `\"var\": \"<context key>\"`.",
        ));
        return None;
    };
    let ignored: Vec<String> = written
        .iter()
        .skip(1)
        .chain(COMPARISONS.iter().filter(|c| map.contains_key(**c)))
        .map(|op| format!("`{op}`"))
        .collect();
    if !ignored.is_empty() {
        warn(
            p,
            pointer,
            format!(
                "this condition is decided by `{op}`; the language ignores {} written beside it.",
                ignored.join(", ")
            ),
        );
    }
    let at = child(pointer, op);
    let operand = map.get(op)?;
    if op == "not" {
        return condition_node(p, operand, &at).map(|c| Condition::Not {
            condition: Box::new(c),
        });
    }
    let items = array(p, operand, &at, &format!("`{op}`"))?;
    let mut parts = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        match condition_node(p, item, &index(&at, i)) {
            Some(c) => parts.push(c),
            None => ok = false,
        }
    }
    ok.then_some(match op {
        "and" => Condition::And { all: parts },
        _ => Condition::Or { any: parts },
    })
}

/// `requireConfirmation`: a boolean, a condition, or `{kind, condition?}`.
pub(crate) struct Confirmation {
    pub required: bool,
    pub when: Option<Condition>,
    pub kind: Option<ConfirmationKind>,
}

pub(super) fn confirmation(
    p: &mut Parser<'_>,
    value: Option<&Value>,
    pointer: &str,
) -> Option<Confirmation> {
    let none = Confirmation {
        required: false,
        when: None,
        kind: None,
    };
    let Some(value) = value else {
        return Some(none);
    };
    match value {
        Value::Bool(b) => Some(Confirmation {
            required: *b,
            ..none
        }),
        Value::Object(map) if map.contains_key("kind") => {
            let f = Fields::new(
                p,
                value,
                pointer,
                "a `requireConfirmation` rule",
                &["kind", "condition"],
            )?;
            let kind = f
                .req(p, "kind", "Add `kind`: coordinator_eval or human_approval.")
                .and_then(|v| {
                    one_of(
                        p,
                        v,
                        &f.at("kind"),
                        "`requireConfirmation.kind`",
                        &["coordinator_eval", "human_approval"],
                    )
                })
                .and_then(ConfirmationKind::parse);
            let when = f
                .opt("condition")
                .map(|v| condition(p, v, &f.at("condition")));
            f.finish(p);
            Some(Confirmation {
                required: true,
                when: match when {
                    Some(w) => w?,
                    None => None,
                },
                kind: Some(kind?),
            })
        }
        Value::Object(_) => condition(p, value, pointer).map(|when| Confirmation {
            required: true,
            when,
            kind: None,
        }),
        other => {
            p.error(CompileError::new(
                Code::WrongType,
                pointer,
                format!(
                    "`requireConfirmation` must be true or false, a condition, or `{{kind, condition?}}`, found {}.",
                    type_name(other)
                ),
                "Write `true`, `false`, a condition such as `{\"var\": \"risk\", \"equals\": \"high\"}`, or `{\"kind\": \"human_approval\"}`.",
            ));
            None
        }
    }
}

/// A positive attempt budget (`maxAttempts`).
pub(super) fn max_attempts(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<u32> {
    match value.as_u64() {
        Some(n) if (1..=u64::from(MAX_ATTEMPTS_LIMIT)).contains(&n) => u32::try_from(n).ok(),
        _ => {
            let mut error = CompileError::new(
                Code::InvalidValue,
                pointer,
                format!(
                    "`maxAttempts` must be a whole number from 1 to {MAX_ATTEMPTS_LIMIT}, found {value}."
                ),
                "Write how many blocked attempts the agent may make before the user must step in, e.g. 3.",
            );
            if let Some(n) = value.as_u64() {
                let fixed = n.clamp(1, u64::from(MAX_ATTEMPTS_LIMIT));
                error = error.with_fix(AutoFix::Replace {
                    path: pointer.to_owned(),
                    value: Value::from(fixed),
                });
            }
            p.error(error);
            None
        }
    }
}

fn boolean(p: &mut Parser<'_>, value: &Value, pointer: &str, what: &str) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        other => {
            p.error(CompileError::new(
                Code::WrongType,
                pointer,
                format!("{what} must be true or false, found {}.", type_name(other)),
                "Write `true` or `false`.",
            ));
            None
        }
    }
}

/// The language fields of a normal step (`requireConfirmation` is read by the caller).
pub(super) fn step_fields(
    p: &mut Parser<'_>,
    f: &Fields<'_>,
    confirmation: Option<&Confirmation>,
) -> Option<StepLang> {
    let run_condition = f
        .opt("runCondition")
        .map(|v| condition(p, v, &f.at("runCondition")));
    let validation = f
        .opt("validationCriteria")
        .map(|v| validation_criteria(p, v, &f.at("validationCriteria")));
    let assessment_refs = f
        .opt("assessmentRefs")
        .map(|v| assessment_refs(p, v, &f.at("assessmentRefs")));
    let consequences = f
        .opt("assessmentConsequences")
        .map(|v| consequences(p, v, &f.at("assessmentConsequences")));
    let fragments = f
        .opt("promptFragments")
        .map(|v| fragments(p, v, &f.at("promptFragments")));
    let notes_optional = f
        .opt("notesOptional")
        .map(|v| boolean(p, v, &f.at("notesOptional"), "`notesOptional`"));
    let max_attempts = f
        .opt("maxAttempts")
        .map(|v| max_attempts(p, v, &f.at("maxAttempts")));
    Some(StepLang {
        run_condition: run_condition.unwrap_or(Some(None))?,
        confirm_when: confirmation.and_then(|c| c.when.clone()),
        confirmation_kind: confirmation.and_then(|c| c.kind),
        validation: match validation {
            Some(v) => Some(v?),
            None => None,
        },
        assessment_refs: assessment_refs.unwrap_or(Some(Vec::new()))?,
        assessment_consequences: consequences.unwrap_or(Some(Vec::new()))?,
        prompt_fragments: fragments.unwrap_or(Some(Vec::new()))?,
        max_attempts: match max_attempts {
            Some(m) => Some(m?),
            None => None,
        },
        notes_optional: notes_optional.unwrap_or(Some(false))?,
        kept: BTreeMap::new(),
    })
}

/// `outputContract: {contractRef, required?}`, the language's spelling of `output.contractRef`.
/// `None` when an error was reported.
pub(super) fn output_contract(
    p: &mut Parser<'_>,
    f: &Fields<'_>,
    output: Option<Option<SourceOutput>>,
) -> Option<Option<SourceOutput>> {
    let Some(value) = f.opt("outputContract") else {
        return output.map_or(Some(None), |o| o.map(Some));
    };
    let pointer = f.at("outputContract");
    if output.is_some() {
        p.error(
            CompileError::new(
                Code::InvalidValue,
                pointer.clone(),
                "a step has both `output` and `outputContract`; they name the same requirement.",
                "Keep `output.contractRef` and remove `outputContract`.",
            )
            .with_fix(AutoFix::Remove { path: pointer }),
        );
        return None;
    }
    let c = Fields::new(
        p,
        value,
        &pointer,
        "`outputContract`",
        &["contractRef", "required"],
    )?;
    let contract = c.req(
        p,
        "contractRef",
        "Add `contractRef`, e.g. `wr.contracts.loop_control`.",
    );
    if let Some(required) = c.opt("required")
        && required != &Value::Bool(true)
    {
        p.error(
            CompileError::new(
                Code::InvalidValue,
                c.at("required"),
                "an output contract is always required: the step cannot complete without its artifact.",
                "Remove `required`, or remove the contract and describe the output in the prompt.",
            )
            .with_fix(AutoFix::Remove {
                path: c.at("required"),
            }),
        );
    }
    c.finish(p);
    let contract = contract?;
    let mut object = Map::new();
    object.insert("contractRef".to_owned(), contract.clone());
    super::prompt::output(p, &Value::Object(object), &pointer).map(Some)
}

fn validation_criteria(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
) -> Option<ValidationCriterion> {
    match value {
        Value::Array(items) if items.is_empty() => Some(ValidationCriterion::Regex {
            pattern: r"\S".to_owned(),
            flags: None,
            message: Some("The notes are empty.".to_owned()),
            when: None,
        }),
        Value::Array(items) => {
            let mut all = Vec::new();
            let mut ok = true;
            for (i, item) in items.iter().enumerate() {
                let at = index(pointer, i);
                let rule = match item {
                    Value::String(pattern) => regex_rule(p, pattern, None, &at),
                    _ => rule(p, item, &at),
                };
                match rule {
                    Some(r) => all.push(r),
                    None => ok = false,
                }
            }
            ok.then_some(ValidationCriterion::All { all })
        }
        _ => criterion(p, value, pointer),
    }
}

/// A rule (`{type, ...}`) or a composition (`{and}`, `{or}`, `{not}`; `{}` always holds).
fn criterion(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<ValidationCriterion> {
    let Some(map) = value.as_object() else {
        p.error(CompileError::new(
            Code::WrongType,
            pointer,
            format!(
                "a validation criterion must be a rule object or an `and`/`or`/`not` composition, found {}.",
                type_name(value)
            ),
            "Write e.g. `{\"type\": \"contains\", \"value\": \"Summary\", \"message\": \"Add a Summary section\"}`.",
        ));
        return None;
    };
    if map.contains_key("type") {
        return rule(p, value, pointer);
    }
    let f = Fields::new(
        p,
        value,
        pointer,
        "a validation composition",
        &["and", "or", "not"],
    )?;
    let written: Vec<&str> = LOGICAL
        .iter()
        .copied()
        .filter(|op| f.opt(op).is_some())
        .collect();
    f.finish(p);
    let Some(op) = written.first().copied() else {
        return (map.is_empty()).then_some(ValidationCriterion::All { all: Vec::new() });
    };
    if written.len() > 1 {
        warn(
            p,
            pointer,
            format!(
                "this validation composition is decided by `{op}`; the language ignores {} written beside it.",
                written[1..]
                    .iter()
                    .map(|o| format!("`{o}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    let at = child(pointer, op);
    let operand = map.get(op)?;
    if op == "not" {
        return criterion(p, operand, &at).map(|c| ValidationCriterion::Not {
            criterion: Box::new(c),
        });
    }
    let items = array(p, operand, &at, &format!("`{op}`"))?;
    let mut parts = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        match criterion(p, item, &index(&at, i)) {
            Some(c) => parts.push(c),
            None => ok = false,
        }
    }
    ok.then_some(match op {
        "and" => ValidationCriterion::All { all: parts },
        _ => ValidationCriterion::Any { any: parts },
    })
}

const RULE_FIELDS: &[&str] = &[
    "type",
    "value",
    "pattern",
    "flags",
    "min",
    "max",
    "message",
    "schema",
    "condition",
];

fn rule(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<ValidationCriterion> {
    let f = Fields::new(p, value, pointer, "a validation rule", RULE_FIELDS)?;
    let kind = f
        .req(p, "type", "Add `type`: contains, regex, length or schema.")
        .and_then(|v| {
            one_of(
                p,
                v,
                &f.at("type"),
                "validation rule `type`",
                &["contains", "regex", "length", "schema"],
            )
        });
    let message = f
        .opt("message")
        .map(|v| non_blank(p, v, &f.at("message"), "a rule's `message`").map(str::to_owned));
    let when = f
        .opt("condition")
        .map(|v| condition(p, v, &f.at("condition")));
    let relevant: &[&str] = match kind {
        Some("contains") => &["value"],
        Some("regex") => &["pattern", "flags"],
        Some("length") => &["min", "max"],
        Some("schema") => &["schema"],
        _ => &["value", "pattern", "flags", "min", "max", "schema"],
    };
    for field in ["value", "pattern", "flags", "min", "max", "schema"] {
        if f.opt(field).is_some() && !relevant.contains(&field) {
            warn(
                p,
                &f.at(field),
                format!(
                    "`{field}` has no effect on a `{}` rule; the language ignores it.",
                    kind.unwrap_or("?")
                ),
            );
        }
    }
    let built = match kind? {
        "contains" => f
            .req(p, "value", "Add the `value` the notes must contain.")
            .and_then(|v| string(p, v, &f.at("value"), "a `contains` rule's `value`"))
            .map(|v| ValidationCriterion::Contains {
                value: v.to_owned(),
                message: None,
                when: None,
            }),
        "regex" => {
            let pattern = f
                .req(p, "pattern", "Add the regular expression as `pattern`.")
                .and_then(|v| string(p, v, &f.at("pattern"), "a `regex` rule's `pattern`"));
            let flags = f
                .opt("flags")
                .map(|v| string(p, v, &f.at("flags"), "a `regex` rule's `flags`"));
            let flags = match flags {
                Some(fl) => Some(fl?),
                None => None,
            };
            regex_rule(p, pattern?, flags, pointer)
        }
        "length" => {
            let bound = |p: &mut Parser<'_>, key: &str| -> Option<Option<u64>> {
                match f.opt(key) {
                    None => Some(None),
                    Some(v) => match v.as_u64() {
                        Some(n) => Some(Some(n)),
                        None => {
                            p.error(CompileError::new(
                                Code::WrongType,
                                f.at(key),
                                format!(
                                    "a `length` rule's `{key}` must be a whole number of characters, found {v}."
                                ),
                                format!("Write e.g. `\"{key}\": 200`."),
                            ));
                            None
                        }
                    },
                }
            };
            let (min, max) = (bound(p, "min"), bound(p, "max"));
            let (min, max) = (min?, max?);
            if min.is_none() && max.is_none() {
                p.error(CompileError::new(
                    Code::MissingField,
                    f.at("min"),
                    "a `length` rule needs `min`, `max` or both.",
                    "Add e.g. `\"min\": 200`.",
                ));
                None
            } else {
                Some(ValidationCriterion::Length {
                    min,
                    max,
                    message: None,
                    when: None,
                })
            }
        }
        _ => {
            let schema = f.req(p, "schema", "Add the JSON Schema the notes must satisfy.");
            match schema {
                Some(schema @ Value::Object(_)) => {
                    match crate::engine::contract::validator(schema) {
                        Ok(_) => Some(ValidationCriterion::Schema {
                            schema: schema.clone(),
                            message: None,
                            when: None,
                        }),
                        Err(e) => {
                            p.error(CompileError::new(
                                Code::InvalidValue,
                                f.at("schema"),
                                format!("the rule's JSON Schema is not valid: {e}"),
                                "Fix the schema (draft 2020-12; no remote or file references).",
                            ));
                            None
                        }
                    }
                }
                Some(other) => {
                    p.error(CompileError::new(
                        Code::WrongType,
                        f.at("schema"),
                        format!(
                            "a `schema` rule's `schema` must be a JSON Schema object, found {}.",
                            type_name(other)
                        ),
                        "Write the schema as an object, e.g. `{\"type\": \"object\"}`.",
                    ));
                    None
                }
                None => None,
            }
        }
    };
    f.finish(p);
    let message = match message {
        Some(m) => Some(m?),
        None => None,
    };
    let when = match when {
        Some(w) => w?,
        None => None,
    };
    Some(with_message_and_when(built?, message, when))
}

fn with_message_and_when(
    rule: ValidationCriterion,
    new_message: Option<String>,
    new_when: Option<Condition>,
) -> ValidationCriterion {
    use ValidationCriterion as V;
    match rule {
        V::Contains { value, .. } => V::Contains {
            value,
            message: new_message,
            when: new_when,
        },
        V::Regex { pattern, flags, .. } => V::Regex {
            pattern,
            flags,
            message: new_message,
            when: new_when,
        },
        V::Length { min, max, .. } => V::Length {
            min,
            max,
            message: new_message,
            when: new_when,
        },
        V::Schema { schema, .. } => V::Schema {
            schema,
            message: new_message,
            when: new_when,
        },
        other => other,
    }
}

fn regex_rule(
    p: &mut Parser<'_>,
    pattern: &str,
    flags: Option<&str>,
    pointer: &str,
) -> Option<ValidationCriterion> {
    if let Err(e) = crate::engine::validation::regex(pattern, flags) {
        p.error(CompileError::new(
            Code::InvalidValue,
            pointer,
            format!("the rule's regular expression `{pattern}` does not compile: {e}"),
            "Fix the pattern (no look-around or back-references) and use only the flags g, i, m, s, u, y, each once.",
        ));
        return None;
    }
    Some(ValidationCriterion::Regex {
        pattern: pattern.to_owned(),
        flags: flags.filter(|f| !f.is_empty()).map(str::to_owned),
        message: None,
        when: None,
    })
}

fn string_list(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    what: &str,
) -> Option<Vec<String>> {
    let items = array(p, value, pointer, what)?;
    let mut out: Vec<String> = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let at = index(pointer, i);
        match non_blank(p, item, &at, what) {
            Some(s) if out.iter().any(|o| o == s) => {
                p.error(
                    CompileError::new(
                        Code::DuplicateId,
                        at.clone(),
                        format!("{what} lists `{s}` twice."),
                        "Remove the repeat.",
                    )
                    .with_fix(AutoFix::Remove { path: at }),
                );
                ok = false;
            }
            Some(s) => out.push(s.to_owned()),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn assessment_refs(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<Vec<String>> {
    let refs = string_list(p, value, pointer, "`assessmentRefs`")?;
    if refs.is_empty() {
        p.error(
            CompileError::new(
                Code::InvalidValue,
                pointer,
                "`assessmentRefs` is empty.",
                "Name at least one assessment declared in the workflow's `assessments`, or remove the field.",
            )
            .with_fix(AutoFix::Remove {
                path: pointer.to_owned(),
            }),
        );
        return None;
    }
    Some(refs)
}

fn consequences(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
) -> Option<Vec<AssessmentConsequence>> {
    let items = array(p, value, pointer, "`assessmentConsequences`")?;
    let mut out = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        match consequence(p, item, &index(pointer, i)) {
            Some(c) => out.push(c),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn consequence(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<AssessmentConsequence> {
    let f = Fields::new(
        p,
        value,
        pointer,
        "an assessment consequence",
        &["when", "effect"],
    )?;
    let when = f
        .req(p, "when", "Add `when: {\"anyEqualsLevel\": \"<level>\"}`.")
        .and_then(|v| {
            let w = Fields::new(
                p,
                v,
                &f.at("when"),
                "a consequence's `when`",
                &["anyEqualsLevel", "forAssessment"],
            )?;
            let level = w
                .req(
                    p,
                    "anyEqualsLevel",
                    "Add the level that triggers the follow-up.",
                )
                .and_then(|v| non_blank(p, v, &w.at("anyEqualsLevel"), "`anyEqualsLevel`"))
                .map(str::to_owned);
            let scoped = w.opt("forAssessment").map(|v| {
                non_blank(p, v, &w.at("forAssessment"), "`forAssessment`").map(str::to_owned)
            });
            w.finish(p);
            Some((
                level?,
                match scoped {
                    Some(s) => Some(s?),
                    None => None,
                },
            ))
        });
    let guidance = f
        .req(
            p,
            "effect",
            "Add `effect: {\"kind\": \"require_followup\", \"guidance\": \"...\"}`.",
        )
        .and_then(|v| {
            let e = Fields::new(
                p,
                v,
                &f.at("effect"),
                "a consequence's `effect`",
                &["kind", "guidance"],
            )?;
            let kind = e
                .req(p, "kind", "Add `\"kind\": \"require_followup\"`.")
                .and_then(|v| {
                    one_of(
                        p,
                        v,
                        &e.at("kind"),
                        "a consequence's `effect.kind`",
                        &["require_followup"],
                    )
                });
            let guidance = e
                .req(p, "guidance", "Add the follow-up `guidance` for the agent.")
                .and_then(|v| non_blank(p, v, &e.at("guidance"), "`guidance`"))
                .map(str::to_owned);
            e.finish(p);
            kind?;
            guidance
        });
    f.finish(p);
    let (level, scoped) = when?;
    Some(AssessmentConsequence {
        any_equals_level: level,
        for_assessment: scoped,
        guidance: guidance?,
    })
}

fn fragments(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<Vec<PromptFragment>> {
    let items = array(p, value, pointer, "`promptFragments`")?;
    let mut out: Vec<PromptFragment> = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let at = index(pointer, i);
        let Some(f) = Fields::new(p, item, &at, "a prompt fragment", &["id", "when", "text"])
        else {
            ok = false;
            continue;
        };
        let id = f
            .req(p, "id", "Add a fragment `id` matching [a-z][a-z0-9_-]*.")
            .and_then(|v| delimiter_safe(p, v, &f.at("id"), "fragment id"));
        let when = f.opt("when").map(|v| condition(p, v, &f.at("when")));
        let text = f
            .req(p, "text", "Add the fragment's `text`.")
            .and_then(|v| super::prompt::free_text(p, v, &f.at("text"), "a fragment's `text`"));
        f.finish(p);
        match (id, when.unwrap_or(Some(None)), text) {
            (Some(id), Some(when), Some(text)) => {
                if out.iter().any(|o| o.fragment_id == id) {
                    p.error(CompileError::new(
                        Code::DuplicateId,
                        child(&at, "id"),
                        format!("fragment id `{id}` is used twice in this step."),
                        "Give each fragment of a step its own id.",
                    ));
                    ok = false;
                } else {
                    out.push(PromptFragment {
                        fragment_id: id,
                        when,
                        text,
                    });
                }
            }
            _ => ok = false,
        }
    }
    ok.then_some(out)
}

/// The workflow-level language fields (`assessments`, `maxAttempts`).
pub(super) fn workflow_fields(p: &mut Parser<'_>, f: &Fields<'_>) -> WorkflowLanguage {
    let assessments = f
        .opt("assessments")
        .and_then(|v| assessments(p, v, &f.at("assessments")))
        .unwrap_or_default();
    let max_attempts = f
        .opt("maxAttempts")
        .and_then(|v| max_attempts(p, v, &f.at("maxAttempts")));
    WorkflowLanguage {
        assessments,
        max_attempts,
        warnings: Vec::new(),
    }
}

fn assessments(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
) -> Option<Vec<AssessmentDefinition>> {
    let items = array(p, value, pointer, "`assessments`")?;
    let mut out: Vec<AssessmentDefinition> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = index(pointer, i);
        let Some(a) = assessment(p, item, &at) else {
            continue;
        };
        if out.iter().any(|o| o.assessment_id == a.assessment_id) {
            p.error(CompileError::new(
                Code::DuplicateId,
                child(&at, "id"),
                format!("assessment id `{}` is declared twice.", a.assessment_id),
                "Give each assessment its own id.",
            ));
            continue;
        }
        out.push(a);
    }
    out.sort_by(|a, b| a.assessment_id.cmp(&b.assessment_id));
    Some(out)
}

fn bounded_text(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    what: &str,
    max_chars: usize,
) -> Option<String> {
    let s = non_blank(p, value, pointer, what)?;
    if s.chars().count() > max_chars {
        p.error(CompileError::new(
            Code::InvalidValue,
            pointer,
            format!("{what} is longer than {max_chars} characters."),
            format!("Shorten {what} to at most {max_chars} characters."),
        ));
        return None;
    }
    Some(s.to_owned())
}

fn assessment(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<AssessmentDefinition> {
    let f = Fields::new(
        p,
        value,
        pointer,
        "an assessment",
        &["id", "purpose", "dimensions"],
    )?;
    let id = f
        .req(p, "id", "Add the assessment's `id`.")
        .and_then(|v| bounded_text(p, v, &f.at("id"), "an assessment `id`", 64));
    let purpose = f
        .req(
            p,
            "purpose",
            "Add what the assessment is for, as `purpose`.",
        )
        .and_then(|v| bounded_text(p, v, &f.at("purpose"), "an assessment's `purpose`", 256));
    let dimensions = f
        .req(p, "dimensions", "Add at least one dimension.")
        .and_then(|v| {
            let at = f.at("dimensions");
            let items = array(p, v, &at, "`dimensions`")?;
            if items.is_empty() {
                p.error(CompileError::new(
                    Code::InvalidValue,
                    at.clone(),
                    "an assessment needs at least one dimension.",
                    "Add a dimension `{id, purpose, levels}`.",
                ));
                return None;
            }
            let mut out: Vec<AssessmentDimension> = Vec::new();
            let mut ok = true;
            for (i, item) in items.iter().enumerate() {
                let at = index(&at, i);
                match dimension(p, item, &at) {
                    Some(d) if out.iter().any(|o| o.dimension_id == d.dimension_id) => {
                        p.error(CompileError::new(
                            Code::DuplicateId,
                            child(&at, "id"),
                            format!("dimension id `{}` is used twice.", d.dimension_id),
                            "Give each dimension of an assessment its own id.",
                        ));
                        ok = false;
                    }
                    Some(d) => out.push(d),
                    None => ok = false,
                }
            }
            ok.then_some(out)
        });
    f.finish(p);
    Some(AssessmentDefinition {
        assessment_id: id?,
        purpose: purpose?,
        dimensions: dimensions?,
    })
}

fn dimension(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<AssessmentDimension> {
    let f = Fields::new(
        p,
        value,
        pointer,
        "an assessment dimension",
        &["id", "purpose", "levels", "required"],
    )?;
    let id = f
        .req(p, "id", "Add the dimension's `id`.")
        .and_then(|v| bounded_text(p, v, &f.at("id"), "a dimension `id`", 64));
    let purpose = f
        .req(p, "purpose", "Add what the dimension rates, as `purpose`.")
        .and_then(|v| bounded_text(p, v, &f.at("purpose"), "a dimension's `purpose`", 256));
    let levels = f
        .req(
            p,
            "levels",
            "Add at least two `levels`, e.g. [\"low\", \"high\"].",
        )
        .and_then(|v| string_list(p, v, &f.at("levels"), "`levels`"));
    let levels = match levels {
        Some(l) if l.len() < 2 => {
            p.error(CompileError::new(
                Code::InvalidValue,
                f.at("levels"),
                "a dimension needs at least two levels.",
                "Add the levels an agent chooses from, e.g. [\"low\", \"medium\", \"high\"].",
            ));
            None
        }
        other => other,
    };
    let required = f
        .opt("required")
        .map(|v| boolean(p, v, &f.at("required"), "a dimension's `required`"));
    f.finish(p);
    Some(AssessmentDimension {
        dimension_id: id?,
        purpose: purpose?,
        levels: levels?,
        required: required.unwrap_or(Some(true))?,
    })
}

const LOOP_STEP: &[&str] = &[
    "type",
    "id",
    "title",
    "loop",
    "body",
    "runCondition",
    "requireConfirmation",
    "functionDefinitions",
    "notesOptional",
];
const LOOP_CONFIG: &[&str] = &[
    "type",
    "condition",
    "items",
    "count",
    "maxIterations",
    "iterationVar",
    "itemVar",
    "indexVar",
    "conditionSource",
];

/// Whether a `type: "loop"` step is written in the language's form (`id` and `loop`) rather
/// than WorkRail's own (`loopId` and `while`).
pub(super) fn is_language_loop(map: &Map<String, Value>) -> bool {
    map.contains_key("loop") || (map.contains_key("id") && !map.contains_key("loopId"))
}

fn variable_name(p: &mut Parser<'_>, value: &Value, pointer: &str, what: &str) -> Option<String> {
    let raw = string(p, value, pointer, what)?;
    if functions::is_identifier(raw) {
        return Some(raw.to_owned());
    }
    p.error(CompileError::new(
        Code::InvalidId,
        pointer,
        format!(
            "{what} `{raw}` must be an identifier: a letter or `_`, then letters, digits or `_`."
        ),
        "Rename it, e.g. `currentSlice`.",
    ));
    None
}

/// A loop in the language's form: `{type: loop, id, title, loop: {...}, body, ...}`.
pub(super) fn loop_step(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<LoopStep> {
    let f = Fields::new(p, value, pointer, "a loop step", LOOP_STEP)?;
    let loop_id = f
        .req(p, "id", "Add the loop's `id` matching [a-z0-9_-]+.")
        .and_then(|v| delimiter_safe(p, v, &f.at("id"), "loop `id`"))
        .and_then(|raw| LoopId::parse(&raw).ok());
    let mut kept = BTreeMap::new();
    let title = f
        .req(p, "title", "Add a short `title`.")
        .and_then(|v| non_blank(p, v, &f.at("title"), "loop `title`"));
    if let Some(title) = title {
        kept.insert("title".to_owned(), Value::from(title));
    }
    for inert in ["requireConfirmation", "notesOptional"] {
        // A loop is never the pending step, so the language gives these no effect on it.
        if let Some(v) = f.opt(inert) {
            kept.insert(inert.to_owned(), v.clone());
        }
    }
    let run_condition = f
        .opt("runCondition")
        .map(|v| condition(p, v, &f.at("runCondition")));
    let config = f
        .req(
            p,
            "loop",
            "Add `loop: {\"type\": \"while\" | \"until\" | \"for\" | \"forEach\", ...}`.",
        )
        .and_then(|v| loop_config(p, v, &f.at("loop"), &mut kept));
    let functions = match f.opt("functionDefinitions") {
        None => Some(Vec::new()),
        Some(v) => functions::definitions(p, v, &f.at("functionDefinitions"), FunctionScope::Loop),
    };
    let (body, body_ref) = match f.req(
        p,
        "body",
        "Add a non-empty `body` array of steps, or the id of a step.",
    ) {
        Some(Value::String(raw)) => match StepId::parse(raw) {
            Ok(id) => (Some(Vec::new()), Some((id, f.at("body")))),
            Err(_) => {
                p.error(CompileError::new(
                    Code::InvalidId,
                    f.at("body"),
                    format!("loop `body` `{raw}` is not a step id ([a-z0-9_-]+)."),
                    "Write the id of a top-level step, or a list of steps.",
                ));
                (None, None)
            }
        },
        Some(v) => (
            Some(super::step::steps(p, v, &f.at("body"), "loop `body`")),
            None,
        ),
        None => (None, None),
    };
    f.finish(p);
    let (max_iterations, while_, pending, vars) = config?;
    Some(LoopStep {
        loop_id: loop_id?,
        condition_id: None,
        max_iterations,
        functions: functions?,
        body: body?,
        pointer: pointer.to_owned(),
        language: Box::new(LoopLang {
            while_,
            pending,
            body_ref,
            run_condition: run_condition.unwrap_or(Some(None))?,
            vars,
            kept,
        }),
    })
}

type LoopConfig = (u32, Option<LoopWhile>, Option<Box<PendingWhile>>, LoopVars);

fn loop_config(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    kept: &mut BTreeMap<String, Value>,
) -> Option<LoopConfig> {
    let f = Fields::new(p, value, pointer, "a loop's `loop`", LOOP_CONFIG)?;
    let kind = f
        .req(p, "type", "Add `type`: while, until, for or forEach.")
        .and_then(|v| {
            one_of(
                p,
                v,
                &f.at("type"),
                "loop `type`",
                &["while", "until", "for", "forEach"],
            )
        });
    let max_iterations = match f.opt("maxIterations") {
        Some(v) => super::step::max_iterations(p, v, &f.at("maxIterations")),
        None => Some(DEFAULT_MAX_ITERATIONS),
    };
    let name = |p: &mut Parser<'_>, key: &str| {
        f.opt(key)
            .map(|v| variable_name(p, v, &f.at(key), &format!("`{key}`")))
    };
    let iteration_var = name(p, "iterationVar");
    let item_var = name(p, "itemVar");
    let index_var = name(p, "indexVar");
    let Some(kind) = kind else {
        f.finish(p);
        return None;
    };
    let relevant: &[&str] = match kind {
        "while" | "until" => &["condition", "conditionSource"],
        "for" => &["count"],
        _ => &["items", "itemVar", "indexVar"],
    };
    for field in [
        "condition",
        "conditionSource",
        "count",
        "items",
        "itemVar",
        "indexVar",
    ] {
        if f.opt(field).is_some() && !relevant.contains(&field) {
            warn(
                p,
                &f.at(field),
                format!("`{field}` has no effect on a `{kind}` loop; the language ignores it."),
            );
        }
    }
    let mut ok = true;
    let (while_, pending) = match kind {
        "while" | "until" => {
            let cond = f
                .opt("condition")
                .map(|v| condition(p, v, &f.at("condition")));
            let cond = match cond {
                Some(Some(c)) => Some(c),
                Some(None) => {
                    ok = false;
                    None
                }
                None => None,
            };
            let source = f
                .opt("conditionSource")
                .map(|v| condition_source(p, v, &f.at("conditionSource"), kept));
            let source = match source {
                Some(Some(s)) => Some(s),
                Some(None) => {
                    ok = false;
                    None
                }
                None => None,
            };
            (
                None,
                Some(Box::new(PendingWhile {
                    until: kind == "until",
                    condition: cond,
                    source,
                    pointer: pointer.to_owned(),
                })),
            )
        }
        "for" => match f.req(
            p,
            "count",
            "Add `count`: a number of iterations, or a context key holding one.",
        ) {
            Some(Value::String(key)) if !key.trim().is_empty() => {
                (Some(LoopWhile::CountVar { var: key.clone() }), None)
            }
            Some(Value::Number(n)) => match n.as_u64().filter(|n| *n <= 1000) {
                Some(count) => (
                    Some(LoopWhile::Count {
                        count: u32::try_from(count).unwrap_or(1000),
                    }),
                    None,
                ),
                None => {
                    p.error(CompileError::new(
                        Code::InvalidValue,
                        f.at("count"),
                        format!("`count` must be a whole number from 0 to 1000, found {n}."),
                        "Write a whole number of iterations.",
                    ));
                    ok = false;
                    (None, None)
                }
            },
            Some(other) => {
                p.error(CompileError::new(
                    Code::WrongType,
                    f.at("count"),
                    format!(
                        "`count` must be a number, or the name of a context key holding one, found {}.",
                        type_name(other)
                    ),
                    "Write e.g. `\"count\": 3` or `\"count\": \"retries\"`.",
                ));
                ok = false;
                (None, None)
            }
            None => {
                ok = false;
                (None, None)
            }
        },
        _ => match f
            .req(
                p,
                "items",
                "Add `items`: the context key holding the array to iterate.",
            )
            .and_then(|v| non_blank(p, v, &f.at("items"), "`items`"))
        {
            Some(items) => (
                Some(LoopWhile::ForEach {
                    items: items.to_owned(),
                }),
                None,
            ),
            None => {
                ok = false;
                (None, None)
            }
        },
    };
    f.finish(p);
    let for_each = kind == "forEach";
    let vars = LoopVars {
        iteration_var: Some(iteration_var.unwrap_or(Some("currentIteration".to_owned()))?),
        item_var: if for_each {
            Some(item_var.unwrap_or(Some("currentItem".to_owned()))?)
        } else {
            None
        },
        index_var: if for_each {
            Some(index_var.unwrap_or(Some("currentIndex".to_owned()))?)
        } else {
            None
        },
    };
    if !ok {
        return None;
    }
    Some((max_iterations?, while_, pending, vars))
}

fn condition_source(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    kept: &mut BTreeMap<String, Value>,
) -> Option<ConditionSource> {
    let f = Fields::new(
        p,
        value,
        pointer,
        "a loop's `conditionSource`",
        &["kind", "contractRef", "loopId", "condition"],
    )?;
    let kind = f
        .req(
            p,
            "kind",
            "Add `kind`: artifact_contract or context_variable.",
        )
        .and_then(|v| {
            one_of(
                p,
                v,
                &f.at("kind"),
                "`conditionSource.kind`",
                &["artifact_contract", "context_variable"],
            )
        });
    let source = match kind {
        Some("artifact_contract") => {
            let contract = f
                .req(
                    p,
                    "contractRef",
                    "Add `\"contractRef\": \"wr.contracts.loop_control\"`.",
                )
                .and_then(|v| {
                    one_of(
                        p,
                        v,
                        &f.at("contractRef"),
                        "`conditionSource.contractRef`",
                        &[LOOP_CONTROL],
                    )
                });
            if f.opt("condition").is_some() {
                warn(
                    p,
                    &f.at("condition"),
                    "`condition` has no effect on an `artifact_contract` source; the loop_control decision decides.".to_owned(),
                );
            }
            // The decision artifact names the loop by its `id`; the label is kept for
            // `inspect_workflow`.
            if let Some(label) = f.opt("loopId") {
                kept.insert("conditionSourceLoopId".to_owned(), label.clone());
            }
            contract.map(|_| ConditionSource::ArtifactContract)
        }
        Some(_) => {
            for key in ["contractRef", "loopId"] {
                if f.opt(key).is_some() {
                    warn(
                        p,
                        &f.at(key),
                        format!(
                            "`{key}` has no effect on a `context_variable` source; the language ignores it."
                        ),
                    );
                }
            }
            f.req(
                p,
                "condition",
                "Add the `condition` tested over the context.",
            )
            .and_then(|v| condition(p, v, &f.at("condition")))
            .map(ConditionSource::ContextVariable)
        }
        None => None,
    };
    f.finish(p);
    source
}

/// Whether a step is a `branch` (first-match `when` cases plus `default`).
pub(super) fn is_branch(value: &Value) -> bool {
    value.get("type").and_then(Value::as_str) == Some("branch")
}

/// A `branch`: `{type: branch, id, branches: [{when, steps}], default?}`, lowered into the run
/// conditions of its steps (case i runs when its `when` holds and no earlier one does; `default`
/// runs when none does) and spliced into the enclosing list in order.
pub(super) fn branch(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Vec<SourceStep> {
    let Some(f) = Fields::new(
        p,
        value,
        pointer,
        "a branch step",
        &["type", "id", "branches", "default"],
    ) else {
        return Vec::new();
    };
    let id = f
        .req(p, "id", "Add the branch's `id` matching [a-z0-9_-]+.")
        .and_then(|v| delimiter_safe(p, v, &f.at("id"), "branch `id`"));
    let mut cases: Vec<(Option<Condition>, Vec<SourceStep>, String)> = Vec::new();
    let mut ok = true;
    if let Some(items) = f
        .req(
            p,
            "branches",
            "Add `branches: [{\"when\": {...}, \"steps\": [...]}]`.",
        )
        .and_then(|v| array(p, v, &f.at("branches"), "`branches`"))
    {
        if items.is_empty() {
            p.error(CompileError::new(
                Code::InvalidValue,
                f.at("branches"),
                "`branches` is empty.",
                "Add at least one `{when, steps}` case.",
            ));
            ok = false;
        }
        for (i, item) in items.iter().enumerate() {
            let at = index(&f.at("branches"), i);
            let Some(c) = Fields::new(p, item, &at, "a branch case", &["when", "steps"]) else {
                ok = false;
                continue;
            };
            let when = c
                .req(p, "when", "Add the case's `when` condition.")
                .and_then(|v| condition(p, v, &c.at("when")));
            let steps = c
                .req(p, "steps", "Add the case's `steps`.")
                .map(|v| super::step::steps(p, v, &c.at("steps"), "a branch case's `steps`"));
            c.finish(p);
            match (when, steps) {
                (Some(when), Some(steps)) => cases.push((when, steps, i.to_string())),
                _ => ok = false,
            }
        }
    } else {
        ok = false;
    }
    let default = f
        .opt("default")
        .map(|v| super::step::steps(p, v, &f.at("default"), "a branch's `default`"));
    f.finish(p);
    let (Some(id), true) = (id, ok) else {
        return Vec::new();
    };
    let whens: Vec<Condition> = cases
        .iter()
        .map(|(w, _, _)| w.clone().unwrap_or(Condition::And { all: Vec::new() }))
        .collect();
    let none_of = |n: usize| -> Option<Condition> {
        (n > 0).then(|| Condition::Not {
            condition: Box::new(Condition::Or {
                any: whens[..n].to_vec(),
            }),
        })
    };
    let mut out = Vec::new();
    let count = cases.len();
    for (i, (when, steps, case)) in cases.into_iter().enumerate() {
        let guard = and([when, none_of(i)]);
        for step in steps {
            out.extend(guarded(p, step, guard.clone(), &id, &case));
        }
    }
    for step in default.unwrap_or_default() {
        out.extend(guarded(p, step, none_of(count), &id, "default"));
    }
    out
}

/// `step` with `guard` added to its run condition and its branch case recorded.
fn guarded(
    p: &mut Parser<'_>,
    step: SourceStep,
    guard: Option<Condition>,
    branch: &str,
    case: &str,
) -> Option<SourceStep> {
    let mark = |kept: &mut BTreeMap<String, Value>| {
        let entry = serde_json::json!({"branch": branch, "case": case});
        match kept.get_mut("branch") {
            Some(Value::Array(path)) => path.insert(0, entry),
            _ => {
                kept.insert("branch".to_owned(), Value::Array(vec![entry]));
            }
        }
    };
    match step {
        SourceStep::Normal(mut n) => {
            n.language.run_condition = and([guard, n.language.run_condition.take()]);
            mark(&mut n.language.kept);
            Some(SourceStep::Normal(n))
        }
        SourceStep::Loop(mut l) => {
            l.language.run_condition = and([guard, l.language.run_condition.take()]);
            mark(&mut l.language.kept);
            Some(SourceStep::Loop(l))
        }
        SourceStep::TemplateCall(call) => {
            p.error(CompileError::new(
                Code::InvalidValue,
                call.pointer(),
                "a `template_call` cannot sit in a `branch`: its injected steps carry no run condition.",
                "Move the call out of the branch, or write the step it stands for inside the case.",
            ));
            None
        }
    }
}

/// What parsing leaves to the whole workflow: `body` references resolved (the referenced
/// top-level step moves into the loop), `while`/`until` loops resolved into loop-control loops
/// (a synthesized `loop_control` condition named after the loop) or context loops, and every
/// step's assessment references checked against the declared assessments.
pub(super) fn finish(
    p: &mut Parser<'_>,
    steps: &mut Vec<SourceStep>,
    conditions: &mut Vec<SourceCondition>,
    workflow: &WorkflowLanguage,
) {
    resolve_body_refs(p, steps);
    resolve_loops(p, steps, conditions);
    check_assessments(p, steps, &workflow.assessments);
}

fn resolve_body_refs(p: &mut Parser<'_>, steps: &mut Vec<SourceStep>) {
    let mut wanted: BTreeMap<StepId, (usize, String)> = BTreeMap::new();
    for (i, step) in steps.iter().enumerate() {
        if let SourceStep::Loop(l) = step
            && let Some((id, at)) = &l.language.body_ref
        {
            if let Some((_, first)) = wanted.get(id) {
                p.error(CompileError::new(
                    Code::DuplicateId,
                    at.clone(),
                    format!("step `{id}` is already the body of another loop (at {first})."),
                    "Give each loop its own body step.",
                ));
                continue;
            }
            wanted.insert(id.clone(), (i, at.clone()));
        }
    }
    if wanted.is_empty() {
        return;
    }
    let mut slots: Vec<Option<SourceStep>> = std::mem::take(steps).into_iter().map(Some).collect();
    let mut bodies: BTreeMap<usize, SourceStep> = BTreeMap::new();
    for slot in &mut slots {
        let target = match slot {
            Some(SourceStep::Normal(n)) => wanted.remove(&n.id).map(|(loop_index, _)| loop_index),
            _ => None,
        };
        if let Some(loop_index) = target
            && let Some(step) = slot.take()
        {
            bodies.insert(loop_index, step);
        }
    }
    for (id, (_, at)) in &wanted {
        p.error(CompileError::new(
            Code::InvalidValue,
            at.clone(),
            format!("loop `body` names step `{id}`, which is not a top-level step of this workflow (a loop, a template call or a step inside another loop cannot be referenced)."),
            "Name a top-level normal step, or write the body as a list of steps.",
        ));
    }
    // Loops keep their places; a referenced step leaves its own and becomes the loop's body.
    for (i, slot) in slots.into_iter().enumerate() {
        let Some(mut step) = slot else {
            continue;
        };
        if let SourceStep::Loop(l) = &mut step
            && let Some(body) = bodies.remove(&i)
        {
            l.body = vec![body];
        }
        steps.push(step);
    }
}

fn resolve_loops(
    p: &mut Parser<'_>,
    steps: &mut [SourceStep],
    conditions: &mut Vec<SourceCondition>,
) {
    for step in steps {
        let SourceStep::Loop(l) = step else {
            continue;
        };
        resolve_loops(p, &mut l.body, conditions);
        let Some(pending) = l.language.pending.take() else {
            continue;
        };
        let has_decision_step = l.body.iter().any(|s| {
            matches!(s, SourceStep::Normal(n)
                if n.output.as_ref().and_then(|o| o.contract_ref) == Some(LOOP_CONTROL))
        });
        let context = match (&pending.source, has_decision_step) {
            (Some(ConditionSource::ArtifactContract), _) => None,
            (Some(ConditionSource::ContextVariable(c)), _) => Some(c.clone()),
            (None, true) => None,
            (None, false) => match &pending.condition {
                Some(c) => Some(c.clone()),
                None => {
                    // Whether a decision step decides is only known once the body is.
                    p.error(CompileError::new(
                        Code::MissingField,
                        child(&pending.pointer, "condition"),
                        format!(
                            "loop `{}` needs `condition` (tested over the context before every iteration), `conditionSource`, or a body step whose `outputContract` is `{LOOP_CONTROL}`.",
                            l.loop_id
                        ),
                        "Add e.g. `\"condition\": {\"var\": \"status\", \"not_equals\": \"done\"}`, or end the body with a decision step.",
                    ));
                    continue;
                }
            },
        };
        match context {
            Some(condition) => {
                let condition = condition.unwrap_or(Condition::And { all: Vec::new() });
                l.language.while_ = Some(if pending.until {
                    LoopWhile::ContextUntil { condition }
                } else {
                    LoopWhile::ContextWhile { condition }
                });
            }
            None => {
                // A loop-control loop: the decision step's `wr.loop_control` artifact decides
                // (for `until` too: the decision says continue or stop).
                let Ok(id) = ConditionId::parse(l.loop_id.as_str()) else {
                    continue;
                };
                if conditions.iter().any(|c| c.id == id) {
                    p.error(CompileError::new(
                        Code::DuplicateId,
                        child(&l.pointer, "id"),
                        format!("loop `{}` decides with a loop_control condition named after it, but `conditions[]` already declares `{id}`.", l.loop_id),
                        "Rename the loop or the declared condition.",
                    ));
                    continue;
                }
                if pending.condition.is_some() && pending.source.is_none() {
                    // The decision step decides; the language ignores `condition` then.
                    p.warnings.push(CompiledWarning {
                        code: CompiledWarningCode::LanguageIgnored,
                        message: format!(
                            "loop `{}` ends with a `{LOOP_CONTROL}` decision step, which decides whether it continues; its `condition` is ignored.",
                            l.loop_id
                        ),
                        pointer: Some(child(&pending.pointer, "condition")),
                    });
                }
                conditions.push(SourceCondition {
                    id: id.clone(),
                    kind: ConditionKind::LoopControl {
                        continue_when: workrail_spec::closed::LoopDecision::Continue,
                    },
                    pointer: pending.pointer.clone(),
                });
                l.condition_id = Some(id);
            }
        }
    }
}

fn check_assessments(p: &mut Parser<'_>, steps: &[SourceStep], declared: &[AssessmentDefinition]) {
    for step in steps {
        match step {
            SourceStep::Normal(n) => check_step_assessments(p, n, declared),
            SourceStep::Loop(l) => check_assessments(p, &l.body, declared),
            SourceStep::TemplateCall(_) => {}
        }
    }
}

fn check_step_assessments(p: &mut Parser<'_>, n: &NormalStep, declared: &[AssessmentDefinition]) {
    let lang = &n.language;
    let at = |field: &str| child(&n.pointer, field);
    let names: Vec<&str> = declared.iter().map(|a| a.assessment_id.as_str()).collect();
    for (i, r) in lang.assessment_refs.iter().enumerate() {
        if !names.contains(&r.as_str()) {
            p.error(CompileError::new(
                Code::InvalidValue,
                index(&at("assessmentRefs"), i),
                format!("step `{}` references assessment `{r}`, which the workflow's `assessments` does not declare.", n.id),
                if names.is_empty() {
                    "Declare it in the workflow's `assessments`, or remove the reference.".to_owned()
                } else {
                    format!("Use one of: {}.", names.join(", "))
                },
            ));
        }
    }
    if lang.assessment_consequences.is_empty() {
        return;
    }
    if lang.assessment_refs.is_empty() {
        p.error(CompileError::new(
            Code::MissingField,
            at("assessmentRefs"),
            format!("step `{}` declares `assessmentConsequences` but no `assessmentRefs`: nothing would be assessed.", n.id),
            "Add `assessmentRefs` naming the assessment the consequences read.",
        ));
        return;
    }
    let mut seen = BTreeSet::new();
    for (i, c) in lang.assessment_consequences.iter().enumerate() {
        let c_at = index(&at("assessmentConsequences"), i);
        let scope: Vec<&AssessmentDefinition> = declared
            .iter()
            .filter(|a| match &c.for_assessment {
                Some(only) => &a.assessment_id == only,
                None => lang.assessment_refs.contains(&a.assessment_id),
            })
            .collect();
        if let Some(only) = &c.for_assessment
            && !lang.assessment_refs.contains(only)
        {
            p.error(CompileError::new(
                Code::InvalidValue,
                child(&child(&c_at, "when"), "forAssessment"),
                format!("`forAssessment` `{only}` is not one of this step's `assessmentRefs`."),
                format!("Use one of: {}.", lang.assessment_refs.join(", ")),
            ));
            continue;
        }
        let levels: BTreeSet<&str> = scope
            .iter()
            .flat_map(|a| a.dimensions.iter().flat_map(|d| d.levels.iter()))
            .map(String::as_str)
            .collect();
        if !levels.contains(c.any_equals_level.as_str()) {
            p.error(CompileError::new(
                Code::InvalidValue,
                child(&child(&c_at, "when"), "anyEqualsLevel"),
                format!(
                    "level `{}` is not a level of any dimension of the assessments this consequence reads.",
                    c.any_equals_level
                ),
                format!(
                    "Use one of: {}.",
                    levels.iter().copied().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        if !seen.insert((c.any_equals_level.clone(), c.for_assessment.clone())) {
            p.error(
                CompileError::new(
                    Code::DuplicateId,
                    c_at.clone(),
                    "this consequence repeats the trigger (level and assessment) of an earlier one.",
                    "Merge the two consequences' guidance into one.",
                )
                .with_fix(AutoFix::Remove { path: c_at }),
            );
        }
    }
}

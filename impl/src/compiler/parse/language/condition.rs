//! Conditions of the workflow language lowered into the closed `Condition` set (decision D140):
//! with `var`, the first operator in the order `equals`, `not_equals`, `gt`, `gte`, `lt`, `lte`,
//! `contains`, `startsWith`, `endsWith`, `matches`, `in` decides (a bare `var` is truthiness);
//! without `var`, `and`, then `or`, then `not`. Every other operator written beside the deciding
//! one is ignored by the language, so it is a `language_ignored` warning naming it. `{}` holds
//! always; an unknown operator, a malformed operand or a `{}` nested in `and`/`or`/`not` (which
//! makes the whole condition false in the language) is a compile error.

use serde_json::{Map, Value};

use crate::compiler::error::{AutoFix, CompileError, CompileErrorCode as Code, child, index};
use crate::compiler::parse::Parser;
use crate::compiler::parse::fields::{array, non_blank, type_name};
use workrail_spec::compiled::Condition;

use super::warn;

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
pub(crate) const LOGICAL: &[&str] = &["and", "or", "not"];

pub(crate) fn normalized(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// A condition of the language (`runCondition`, `when`, `loop.condition`, ...). `Some(None)` is
/// `{}`, which always holds; `None` means an error was reported.
pub(crate) fn condition(
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
            // The language evaluates a pattern that does not compile as "no match" (decision
            // D153): the workflow loads, and the warning says why the condition never holds.
            if let Err(e) = workrail_spec::condition::pattern_compiles(&pattern) {
                warn(
                    p,
                    &at,
                    format!(
                        "`matches` pattern `{pattern}` does not compile ({e}), so this condition never holds; fix the regular expression (no look-around or back-references; it is matched case-insensitively against the value's text)."
                    ),
                );
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

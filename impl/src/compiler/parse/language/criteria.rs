//! `validationCriteria`: a rule, a list of rules (all must hold), or an `and`/`or`/`not`
//! composition, lowered into `ValidationCriterion` (decision D143).

use serde_json::Value;

use crate::compiler::error::{CompileError, CompileErrorCode as Code, child, index};
use crate::compiler::parse::Parser;
use crate::compiler::parse::fields::{Fields, array, non_blank, one_of, string, type_name};
use workrail_spec::compiled::{Condition, ValidationCriterion};

use super::condition::{LOGICAL, condition};
use super::warn;

pub(crate) fn validation_criteria(
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

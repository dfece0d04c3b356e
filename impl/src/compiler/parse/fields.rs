//! Reading JSON objects field by field, so every problem gets a pointer: unknown fields (with a
//! rename fix when the key is a near miss), inline schema fields, v1-only fields, wrong types.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use workrail_spec::compiled::{CompiledWarning, CompiledWarningCode};

use super::Parser;
use crate::compiler::error::{AutoFix, CompileError, CompileErrorCode as Code, child};

/// v1 fields the v2 compiler does not accept, with what to do instead.
const V1_FIELDS: &[(&str, &str)] = &[
    (
        "validationCriteria",
        "v2 enforces outputs through contracts: declare `output.contractRef` (e.g. `wr.contracts.verification_report`) and describe the checks in `promptBlocks.verify`.",
    ),
    (
        "runCondition",
        "v2 has no per-step run conditions; model repetition with a `type: \"loop\"` step and a condition from `conditions[]`.",
    ),
    ("guidance", "Put guidance into `promptBlocks.constraints`."),
    (
        "version",
        "v2 pins workflows by their compiled hash; remove `version`.",
    ),
];

/// An object being read: remembers which keys are allowed so the rest can be reported.
pub(super) struct Fields<'a> {
    map: &'a Map<String, Value>,
    pointer: String,
    what: &'static str,
    allowed: &'a [&'a str],
}

impl<'a> Fields<'a> {
    /// Starts reading `value` as an object; reports `wrong_type` otherwise.
    pub(super) fn new(
        p: &mut Parser<'_>,
        value: &'a Value,
        pointer: &str,
        what: &'static str,
        allowed: &'a [&'a str],
    ) -> Option<Self> {
        let Some(map) = value.as_object() else {
            p.error(CompileError::new(
                Code::WrongType,
                pointer,
                format!("{what} must be a JSON object, found {}.", type_name(value)),
                format!(
                    "Write {what} as an object with the fields: {}.",
                    allowed.join(", ")
                ),
            ));
            return None;
        };
        Some(Self {
            map,
            pointer: pointer.to_owned(),
            what,
            allowed,
        })
    }

    pub(super) fn pointer(&self) -> &str {
        &self.pointer
    }

    pub(super) fn at(&self, key: &str) -> String {
        child(&self.pointer, key)
    }

    pub(super) fn opt(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key)
    }

    /// A required field; reports `missing_field` (with `hint` as the suggestion) when absent.
    pub(super) fn req(&self, p: &mut Parser<'_>, key: &str, hint: &str) -> Option<&'a Value> {
        let value = self.opt(key);
        if value.is_none() {
            p.error(CompileError::new(
                Code::MissingField,
                self.at(key),
                format!("{} is missing the required field `{key}`.", self.what),
                hint,
            ));
        }
        value
    }

    /// [`Fields::finish`], except in a legacy-id workflow (locks §7: legacy workflows load
    /// warn-only), where a field neither spelling defines is returned to be kept verbatim, with
    /// an `unknown_field_kept` warning. Inline schemas stay errors everywhere.
    pub(super) fn finish_keeping(self, p: &mut Parser<'_>) -> BTreeMap<String, Value> {
        if !p.lenient {
            self.finish(p);
            return BTreeMap::new();
        }
        let mut kept = BTreeMap::new();
        for (key, value) in self.map {
            if self.allowed.contains(&key.as_str()) {
                continue;
            }
            let error = unknown_field(key, &self.pointer, self.what, self.allowed);
            if error.code == Code::InlineSchema {
                p.error(error);
                continue;
            }
            p.warn(CompiledWarning {
                code: CompiledWarningCode::UnknownFieldKept,
                message: format!(
                    "`{key}` is not a field of {} in either workflow spelling; this legacy-id workflow keeps it verbatim (shown by inspect_workflow) and it has no effect.",
                    self.what
                ),
                pointer: Some(child(&self.pointer, key)),
            });
            kept.insert(key.clone(), value.clone());
        }
        kept
    }

    /// Reports every key that is not allowed.
    pub(super) fn finish(self, p: &mut Parser<'_>) {
        for key in self.map.keys() {
            if self.allowed.contains(&key.as_str()) {
                continue;
            }
            p.error(unknown_field(key, &self.pointer, self.what, self.allowed));
        }
    }
}

fn normalized(key: &str) -> String {
    key.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

fn unknown_field(key: &str, pointer: &str, what: &str, allowed: &[&str]) -> CompileError {
    let at = child(pointer, key);
    let remove = AutoFix::Remove { path: at.clone() };
    if key == "$ref" || key.to_ascii_lowercase().contains("schema") {
        return CompileError::new(
            Code::InlineSchema,
            at.clone(),
            format!(
                "`{key}` in {what}: workflows cannot define or point to output schemas (inline schemas, project files, URLs, registries)."
            ),
            "Declare the requirement with `output.contractRef` naming a WorkRail contract pack (`wr.contracts.*`); if no pack fits, describe the output in `promptBlocks.outputRequired` and ask for a new pack.",
        )
        .with_fix(remove);
    }
    if let Some((_, advice)) = V1_FIELDS.iter().find(|(name, _)| *name == key) {
        return CompileError::new(
            Code::UnknownField,
            at,
            format!("`{key}` is a v1 field that the v2 authoring model does not accept ({what})."),
            *advice,
        )
        .with_fix(remove);
    }
    let wanted = normalized(key);
    if let Some(near) = allowed.iter().find(|a| normalized(a) == wanted) {
        return CompileError::new(
            Code::UnknownField,
            at.clone(),
            format!("unknown field `{key}` in {what}; did you mean `{near}`?"),
            format!("Rename `{key}` to `{near}`."),
        )
        .with_fix(AutoFix::Move {
            from: at,
            path: child(pointer, near),
        });
    }
    CompileError::new(
        Code::UnknownField,
        at,
        format!("unknown field `{key}` in {what}."),
        format!("Remove it; {what} allows only: {}.", allowed.join(", ")),
    )
    .with_fix(remove)
}

/// The JSON type name used in messages.
pub(super) use workrail_spec::artifact::json_type as type_name;

/// Reads a string; reports `wrong_type` otherwise.
pub(super) fn string<'v>(
    p: &mut Parser<'_>,
    value: &'v Value,
    pointer: &str,
    what: &str,
) -> Option<&'v str> {
    match value.as_str() {
        Some(s) => Some(s),
        None => {
            p.error(CompileError::new(
                Code::WrongType,
                pointer,
                format!("{what} must be a string, found {}.", type_name(value)),
                format!("Write {what} as a JSON string."),
            ));
            None
        }
    }
}

/// Reads a non-blank string.
pub(super) fn non_blank<'v>(
    p: &mut Parser<'_>,
    value: &'v Value,
    pointer: &str,
    what: &str,
) -> Option<&'v str> {
    let s = string(p, value, pointer, what)?;
    if s.trim().is_empty() {
        p.error(CompileError::new(
            Code::InvalidValue,
            pointer,
            format!("{what} must not be empty."),
            format!("Write a non-empty {what}."),
        ));
        return None;
    }
    Some(s)
}

/// Reads an array; reports `wrong_type` otherwise.
pub(super) fn array<'v>(
    p: &mut Parser<'_>,
    value: &'v Value,
    pointer: &str,
    what: &str,
) -> Option<&'v Vec<Value>> {
    match value.as_array() {
        Some(a) => Some(a),
        None => {
            p.error(CompileError::new(
                Code::WrongType,
                pointer,
                format!("{what} must be an array, found {}.", type_name(value)),
                format!("Write {what} as a JSON array."),
            ));
            None
        }
    }
}

/// Reads a string from a closed set; reports `invalid_value` with the allowed values, and a
/// case-fix when the value matches one ignoring case.
pub(super) fn one_of<'s>(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    what: &str,
    allowed: &[&'s str],
) -> Option<&'s str> {
    let s = string(p, value, pointer, what)?;
    if let Some(hit) = allowed.iter().find(|a| **a == s) {
        return Some(hit);
    }
    let mut err = CompileError::new(
        Code::InvalidValue,
        pointer,
        format!("{what} `{s}` is not one of: {}.", allowed.join(", ")),
        format!("Use one of: {}.", allowed.join(", ")),
    );
    if let Some(hit) = allowed.iter().find(|a| normalized(a) == normalized(s)) {
        err = err.with_fix(AutoFix::Replace {
            path: pointer.to_owned(),
            value: Value::from(*hit),
        });
    }
    p.error(err);
    None
}

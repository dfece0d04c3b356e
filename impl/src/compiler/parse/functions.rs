//! `functionDefinitions` (workflow, loop and step scope) and a step's `functionReferences`
//! (locks §5 "Function definitions in rewind/resumption context"): define an instruction once,
//! reference it by name from many steps.

use std::collections::BTreeSet;

use serde_json::Value;
use workrail_spec::compiled::{
    CompiledFunction, FunctionParameter, FunctionParameterType, FunctionScope,
};

use super::Parser;
use super::fields::{Fields, array, non_blank, one_of, string};
use crate::compiler::error::{AutoFix, CompileError, CompileErrorCode as Code, index};
use crate::compiler::source::{FunctionRef, SourceFunction};

const DEFINITION: &[&str] = &["name", "definition", "parameters", "scope"];
const PARAMETER: &[&str] = &["name", "type", "required", "description", "enum", "default"];

/// Whether `name` is a function or parameter name: a JavaScript-style identifier.
pub(crate) fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 64
}

fn identifier(p: &mut Parser<'_>, value: &Value, pointer: &str, what: &str) -> Option<String> {
    let raw = string(p, value, pointer, what)?;
    if is_identifier(raw) {
        return Some(raw.to_owned());
    }
    let fixed: String = raw
        .trim_end_matches("()")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let mut error = CompileError::new(
        Code::InvalidId,
        pointer,
        format!(
            "{what} `{raw}` must be an identifier: a letter or `_`, then letters, digits or `_` (at most 64)."
        ),
        "Rename it to an identifier such as `update_log`.",
    );
    if is_identifier(&fixed) {
        error = error.with_fix(AutoFix::Replace {
            path: pointer.to_owned(),
            value: Value::from(fixed),
        });
    }
    p.error(error);
    None
}

/// A `functionDefinitions` array declared at `scope`. Names are unique within one array.
pub(super) fn definitions(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    scope: FunctionScope,
) -> Option<Vec<SourceFunction>> {
    let items = array(p, value, pointer, "`functionDefinitions`")?;
    let mut out: Vec<SourceFunction> = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let at = index(pointer, i);
        match definition(p, item, &at, scope) {
            Some(def) => {
                if let Some(first) = out.iter().find(|d| d.function.name == def.function.name) {
                    p.error(CompileError::new(
                        Code::DuplicateId,
                        child_of(&at, "name"),
                        format!(
                            "function `{}` is defined twice in this `functionDefinitions` (first at {}).",
                            def.function.name, first.pointer
                        ),
                        "Keep one definition per name in a scope; an inner scope (loop, step) may redefine a name to shadow an outer one.",
                    ));
                    ok = false;
                } else {
                    out.push(def);
                }
            }
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn child_of(pointer: &str, key: &str) -> String {
    crate::compiler::error::child(pointer, key)
}

fn definition(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    scope: FunctionScope,
) -> Option<SourceFunction> {
    let f = Fields::new(p, value, pointer, "a function definition", DEFINITION)?;
    let name = f
        .req(p, "name", "Add `name`, an identifier such as `update_log`.")
        .and_then(|v| identifier(p, v, &f.at("name"), "function `name`"));
    let definition = f
        .req(
            p,
            "definition",
            "Add `definition`: what the function means, in the words the agent should follow.",
        )
        .and_then(|v| non_blank(p, v, &f.at("definition"), "function `definition`"))
        .map(str::to_owned);
    let parameters = match f.opt("parameters") {
        None => Some(Vec::new()),
        Some(v) => parameters(p, v, &f.at("parameters")),
    };
    // `scope` only restates where the definition is written; a different value would mislead.
    let scope_ok = match f.opt("scope") {
        None => true,
        Some(v) => {
            let allowed: Vec<&str> = FunctionScope::ALL.iter().map(|s| s.as_str()).collect();
            match one_of(p, v, &f.at("scope"), "function `scope`", &allowed) {
                Some(s) if s == scope.as_str() => true,
                Some(s) => {
                    p.error(
                        CompileError::new(
                            Code::InvalidValue,
                            f.at("scope"),
                            format!(
                                "function `scope` says `{s}` but the definition is written at {} scope; the place it is written decides its scope.",
                                scope.as_str()
                            ),
                            format!(
                                "Remove `scope`, or move the definition to the `functionDefinitions` of a {s}."
                            ),
                        )
                        .with_fix(AutoFix::Remove { path: f.at("scope") }),
                    );
                    false
                }
                None => false,
            }
        }
    };
    f.finish(p);
    if !scope_ok {
        return None;
    }
    Some(SourceFunction {
        function: CompiledFunction {
            name: name?,
            scope,
            definition: definition?,
            parameters: parameters?,
        },
        pointer: pointer.to_owned(),
    })
}

fn parameters(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<Vec<FunctionParameter>> {
    let items = array(p, value, pointer, "function `parameters`")?;
    let mut out: Vec<FunctionParameter> = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let at = index(pointer, i);
        match parameter(p, item, &at) {
            Some(param) if out.iter().any(|o| o.name == param.name) => {
                p.error(CompileError::new(
                    Code::DuplicateId,
                    child_of(&at, "name"),
                    format!("parameter `{}` is listed twice.", param.name),
                    "Keep one entry per parameter name.",
                ));
                ok = false;
            }
            Some(param) => out.push(param),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn parameter(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<FunctionParameter> {
    let f = Fields::new(p, value, pointer, "a function parameter", PARAMETER)?;
    let name = f
        .req(p, "name", "Add the parameter's `name`.")
        .and_then(|v| identifier(p, v, &f.at("name"), "parameter `name`"));
    let allowed: Vec<&str> = FunctionParameterType::ALL
        .iter()
        .map(|t| t.as_str())
        .collect();
    let param_type = f
        .req(
            p,
            "type",
            "Add `type`: string, number, boolean, array or object.",
        )
        .and_then(|v| one_of(p, v, &f.at("type"), "parameter `type`", &allowed))
        .and_then(FunctionParameterType::parse);
    let required = match f.opt("required") {
        None => Some(false),
        Some(Value::Bool(b)) => Some(*b),
        Some(_) => {
            p.error(CompileError::new(
                Code::WrongType,
                f.at("required"),
                "parameter `required` must be true or false.",
                "Write `true` or `false`.",
            ));
            None
        }
    };
    let description = match f.opt("description") {
        None => Some(None),
        Some(v) => string(p, v, &f.at("description"), "parameter `description`")
            .map(|s| Some(s.to_owned())),
    };
    let enum_values = match f.opt("enum") {
        None => Some(Vec::new()),
        Some(v) => enum_values(p, v, &f.at("enum")),
    };
    let default = f.opt("default").cloned();
    f.finish(p);
    Some(FunctionParameter {
        name: name?,
        param_type: param_type?,
        required: required?,
        description: description?,
        allowed: enum_values?,
        default,
    })
}

fn enum_values(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<Vec<Value>> {
    let items = array(p, value, pointer, "parameter `enum`")?;
    let scalar = |v: &Value| v.is_string() || v.is_number() || v.is_boolean();
    match items.iter().position(|v| !scalar(v)) {
        _ if items.is_empty() => {
            p.error(CompileError::new(
                Code::InvalidValue,
                pointer,
                "parameter `enum` is empty.",
                "List at least one allowed value, or remove `enum`.",
            ));
            None
        }
        Some(i) => {
            p.error(CompileError::new(
                Code::WrongType,
                index(pointer, i),
                "parameter `enum` values must be strings, numbers or booleans.",
                "Replace the value with a string, number or boolean.",
            ));
            None
        }
        None => Some(items.clone()),
    }
}

/// A step's `functionReferences`: names written `name()` (or `name`), each once.
pub(super) fn references(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
) -> Option<Vec<FunctionRef>> {
    let items = array(p, value, pointer, "`functionReferences`")?;
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let at = index(pointer, i);
        let Some(raw) = string(p, item, &at, "a function reference") else {
            ok = false;
            continue;
        };
        let name = raw.strip_suffix("()").unwrap_or(raw);
        if !is_identifier(name) {
            p.error(CompileError::new(
                Code::InvalidValue,
                at,
                format!("function reference `{raw}` must be a function name followed by `()`, e.g. `update_log()`."),
                "Write the name of a function from a `functionDefinitions` visible to this step (the step's own, an enclosing loop's or the workflow's), followed by `()`.",
            ));
            ok = false;
            continue;
        }
        if seen.insert(name.to_owned()) {
            out.push(FunctionRef {
                name: name.to_owned(),
                pointer: at,
            });
        }
    }
    ok.then_some(out)
}

//! The step-level prompt content of the WorkRail 3.x spelling (`guidance`, `askForFiles`,
//! `functionCalls`, `modelTier`, `hasValidation`), and the steps a step's `verification` and
//! `audit` inject after it (as 3.x runs them: a verification step, then an audit step, each with
//! the step's `runCondition`, notes optional).

use serde_json::{Map, Value, json};
use workrail_spec::closed::StepSource;
use workrail_spec::compiled::StepProvenance;

use super::Parser;
use super::fields::{Fields, array, non_blank, one_of, string, type_name};
use super::legacy::{FieldLevel, MODEL_TIERS, strings, warn_v1};
use crate::compiler::content::{FunctionCall, StepExtras};
use crate::compiler::error::{CompileError, CompileErrorCode as Code, child, index};
use crate::compiler::source::{FunctionRef, NormalStep, SourceStep};

/// Reads a normal step's 3.x content fields.
pub(super) fn step(p: &mut Parser<'_>, f: &Fields<'_>) -> StepExtras {
    let mut extras = StepExtras::default();
    if let Some(v) = f.opt("guidance") {
        let at = f.at("guidance");
        warn_v1(p, FieldLevel::Step, "guidance", &at);
        extras.guidance = strings(p, v, &at, "`guidance`").unwrap_or_default();
    }
    if let Some(v) = f.opt("askForFiles") {
        extras.ask_for_files =
            super::language::boolean(p, v, &f.at("askForFiles"), "`askForFiles`").unwrap_or(false);
    }
    if let Some(v) = f.opt("hasValidation") {
        let at = f.at("hasValidation");
        warn_v1(p, FieldLevel::Step, "hasValidation", &at);
        if super::language::boolean(p, v, &at, "`hasValidation`").is_some() {
            extras.kept.insert("hasValidation".to_owned(), v.clone());
        }
    }
    if let Some(v) = f.opt("modelTier")
        && one_of(p, v, &f.at("modelTier"), "`modelTier`", MODEL_TIERS).is_some()
    {
        extras.kept.insert("modelTier".to_owned(), v.clone());
    }
    if let Some(v) = f.opt("functionCalls") {
        extras.function_calls = function_calls(p, v, &f.at("functionCalls"));
    }
    extras
}

/// The references a step's `functionCalls` make (so the called definitions are pinned with
/// the step and an unknown name is an `unknown_function` error), added to `refs` once per name.
pub(super) fn call_refs(refs: &mut Vec<FunctionRef>, extras: &StepExtras, pointer: &str) {
    for (i, call) in extras.function_calls.iter().enumerate() {
        if refs.iter().any(|r| r.name == call.name) {
            continue;
        }
        refs.push(FunctionRef {
            name: call.name.clone(),
            pointer: index(&child(pointer, "functionCalls"), i) + "/name",
        });
    }
}

fn function_calls(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Vec<FunctionCall> {
    let Some(items) = array(p, value, pointer, "`functionCalls`") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = index(pointer, i);
        let Some(c) = Fields::new(p, item, &at, "a function call", &["name", "args"]) else {
            continue;
        };
        let name = c
            .req(p, "name", "Add the called function's `name`.")
            .and_then(|v| string(p, v, &c.at("name"), "the function call `name`"))
            .map(str::to_owned);
        let args = match c.req(
            p,
            "args",
            "Add `args` (an object; `{}` when the call takes none).",
        ) {
            Some(Value::Object(m)) => Some(m.clone()),
            Some(other) => {
                p.error(CompileError::new(
                    Code::WrongType,
                    c.at("args"),
                    format!("`args` must be an object, found {}.", type_name(other)),
                    "Write the arguments as an object, e.g. `{\"target\": \"src\"}`.",
                ));
                None
            }
            None => None,
        };
        c.finish(p);
        if let (Some(name), Some(args)) = (name, args) {
            if !super::functions::is_identifier(&name) {
                p.error(CompileError::new(
                    Code::InvalidId,
                    format!("{at}/name"),
                    format!("function call name `{name}` must be an identifier."),
                    "Name a function of `functionDefinitions`.",
                ));
                continue;
            }
            out.push(FunctionCall { name, args });
        }
    }
    out
}

/// A parsed normal step, followed by the steps its `verification` and `audit` inject.
pub(super) fn with_virtual_steps(
    p: &mut Parser<'_>,
    step: NormalStep,
    source: &Value,
    pointer: &str,
) -> SourceStep {
    let mut out = Vec::new();
    for (field, title, default_prompt) in [
        ("verification", "Verify", VERIFY_PROMPT),
        ("audit", "Audit", ""),
    ] {
        let Some(config) = source.get(field) else {
            continue;
        };
        let at = child(pointer, field);
        let Some(prompt) = virtual_prompt(p, field, config, &at, &step.title, default_prompt)
        else {
            continue;
        };
        let mut virtual_step = json!({
            "id": format!("{}__{field}", step.id),
            "title": format!("{title}: {}", step.title),
            "prompt": prompt,
            "notesOptional": true,
        });
        if let (Some(map), Some(condition)) =
            (virtual_step.as_object_mut(), source.get("runCondition"))
        {
            map.insert("runCondition".into(), condition.clone());
        }
        if let Some(mut derived) = derived_step(p, &virtual_step, &at) {
            derived.extras.provenance = Some(StepProvenance {
                source: StepSource::TemplateInjected,
                origin_id: Some(format!("{}#{field}", step.id)),
            });
            out.push(SourceStep::Normal(Box::new(derived)));
        }
    }
    if out.is_empty() {
        return SourceStep::Normal(Box::new(step));
    }
    out.insert(0, SourceStep::Normal(Box::new(step)));
    SourceStep::Group(out)
}

/// Parses a step the compiler wrote (its own JSON) as a normal step at `pointer`, the authored
/// item it comes from. Auto-fixes are dropped: they would edit fields the author did not write.
pub(super) fn derived_step(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<NormalStep> {
    let before = p.errors.len();
    let parsed = super::step::normal(p, value, pointer);
    for error in &mut p.errors[before..] {
        error.fix = None;
    }
    parsed
}

/// [`derived_step`] for a step copied from another file (a routine): its problems are
/// reported at `pointer` (the call), saying which file and step they come from.
pub(super) fn foreign_step(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    origin: &str,
) -> Option<NormalStep> {
    let before = p.errors.len();
    let parsed = derived_step(p, value, pointer);
    for error in &mut p.errors[before..] {
        let inner = error
            .pointer
            .strip_prefix(pointer)
            .unwrap_or(&error.pointer);
        error.message = format!("{origin} (at `{inner}` there): {}", error.message);
        error.pointer = pointer.to_owned();
    }
    parsed
}

const VERIFY_PROMPT: &str = "Run the verification this workspace uses for the work of the previous step (its tests, build or checks) and report each failure with its output; the step is done only when they pass or each failure is explained.";

fn virtual_prompt(
    p: &mut Parser<'_>,
    field: &str,
    config: &Value,
    pointer: &str,
    title: &str,
    default_prompt: &str,
) -> Option<String> {
    let allowed: &[&str] = if field == "audit" {
        &["prompt", "rubric"]
    } else {
        &["command", "prompt"]
    };
    let f = Fields::new(
        p,
        config,
        pointer,
        if field == "audit" {
            "`audit`"
        } else {
            "`verification`"
        },
        allowed,
    )?;
    let text = |p: &mut Parser<'_>, key: &str| {
        f.opt(key)
            .and_then(|v| non_blank(p, v, &f.at(key), &format!("`{field}.{key}`")))
            .map(str::to_owned)
    };
    let prompt = text(p, "prompt");
    let command = text(p, "command");
    let rubric = f
        .opt("rubric")
        .and_then(|v| strings(p, v, &f.at("rubric"), "`audit.rubric`"));
    f.finish(p);
    if let Some(prompt) = prompt {
        return Some(prompt);
    }
    Some(match (field, command, rubric) {
        ("verification", Some(command), _) => format!(
            "Run this command to verify the previous step's work and report its result; the step is done only when it succeeds or each failure is explained:\n\n```bash\n{command}\n```"
        ),
        ("audit", _, rubric) => {
            let mut text = format!(
                "Audit the results of \"{title}\": check that the work is complete and correct, and say whether it passes or what must change."
            );
            if let Some(rubric) = rubric.filter(|r| !r.is_empty()) {
                text.push_str("\n\nJudge it against this rubric:");
                for line in rubric {
                    text.push_str(&format!("\n- {line}"));
                }
            }
            text
        }
        _ => default_prompt.to_owned(),
    })
}

/// `args` of a template call as a map (an absent `args` is empty).
pub(super) fn args_map(
    p: &mut Parser<'_>,
    value: Option<&Value>,
    pointer: &str,
) -> Option<Map<String, Value>> {
    match value {
        None => Some(Map::new()),
        Some(Value::Object(m)) => Some(m.clone()),
        Some(other) => {
            p.error(CompileError::new(
                Code::WrongType,
                pointer,
                format!("`args` must be an object, found {}.", type_name(other)),
                "Write the arguments as an object, e.g. `{\"deliverableName\": \"design.md\"}`.",
            ));
            None
        }
    }
}

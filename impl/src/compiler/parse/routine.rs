//! A step's `templateCall` (the WorkRail 3.x spelling of a template call, written on a step
//! with `id` and `title`): a builtin template (`wr.templates.capability_probe`), or a routine
//! template `wr.templates.routine.<name>` that expands, at compile time, the steps of the routine
//! workflow `*.routine-<name>` of the workflow sources (bundled first).
//!
//! As 3.x expands a routine: each routine step becomes a step with id `<caller id>__<routine
//! step id>` (decision D145: 3.x joins them with `.`, which step ids here may not contain),
//! `{arg}` placeholders in its `title` and `prompt` take the call's `args` (a missing argument is
//! an error), the routine's `metaGuidance` is appended to its `guidance`, and the caller's
//! `runCondition` applies to every expanded step that has none of its own. A routine may not call
//! templates itself. The expanded steps are parsed like authored ones and carry
//! `provenance: {source: template_injected, originId: <templateId>}` and the routine's id in
//! `kept.routineWorkflowId`. A routine step's reference to a function the routine defines at
//! its workflow level carries that definition into the expanded step (D162).

use serde_json::{Map, Value};
use workrail_spec::closed::StepSource;
use workrail_spec::compiled::StepProvenance;
use workrail_spec::ids::{IdStatus, StepId};

use super::Parser;
use super::content::{args_map, foreign_step};
use super::fields::{Fields, string, type_name};
use crate::builtins::routines::{ROUTINE_TEMPLATE_PREFIX, template_routine_name};
use crate::builtins::templates::{self, TEMPLATE_PREFIX};
use crate::compiler::error::{CompileError, CompileErrorCode as Code, child};
use crate::compiler::source::SourceStep;

/// Fields of a step that calls a template (anything else belongs to the expanded steps).
const CALLER: &[&str] = &[
    "id",
    "title",
    "templateCall",
    "runCondition",
    "requireConfirmation",
    "notesOptional",
    "agentRole",
];

/// `wr.templates.parallel_lanes`: the v2 spelling of a parallel step (decision D177).
pub const PARALLEL_LANES: &str = "wr.templates.parallel_lanes";

/// The arguments of `wr.templates.parallel_lanes`, and the parallel step field each becomes.
const PARALLEL_LANES_ARGS: &[(&str, &str)] = &[
    ("lanes", "parallelDelegations"),
    ("mergeStrategy", "mergeStrategy"),
    ("allowPartialResults", "allowPartialResults"),
    ("synthesis", "synthesis"),
];

/// Compiles a `wr.templates.parallel_lanes` call as the parallel step it spells, with every
/// problem reported where the author wrote it (under `templateCall/args`).
fn parallel_lanes(
    p: &mut Parser<'_>,
    caller: &Value,
    args: Map<String, Value>,
    pointer: &str,
) -> Option<SourceStep> {
    let args_at = child(&child(pointer, "templateCall"), "args");
    let mut step = Map::new();
    step.insert("type".into(), Value::from("parallel"));
    for key in [
        "id",
        "title",
        "runCondition",
        "requireConfirmation",
        "notesOptional",
    ] {
        if let Some(v) = caller.get(key) {
            step.insert(key.into(), v.clone());
        }
    }
    let mut ok = true;
    for (name, value) in args {
        match PARALLEL_LANES_ARGS.iter().find(|(arg, _)| *arg == name) {
            Some((_, field)) => {
                step.insert((*field).into(), value);
            }
            None => {
                ok = false;
                p.error(CompileError::new(
                    Code::UnknownField,
                    child(&args_at, &name),
                    format!("`{name}` is not an argument of `{PARALLEL_LANES}`."),
                    "Its arguments are `lanes` (the delegations: `{workflowId, goal?, runCondition?, contextMapping?, args?}`), `mergeStrategy` (`concatenate`, `workspace` or `fail-on-conflict`), `allowPartialResults` and `synthesis` (`{prompt?, outputContract?}`).",
                ));
            }
        }
    }
    let (errors, warnings) = (p.errors.len(), p.warnings.len());
    let parsed = super::parallel::step(p, &Value::Object(step), pointer);
    // Problems inside the arguments point where the author wrote them.
    let remap = |at: &str| -> String {
        for (arg, field) in PARALLEL_LANES_ARGS {
            let spelled = child(pointer, field);
            if let Some(rest) = at.strip_prefix(&spelled)
                && (rest.is_empty() || rest.starts_with('/'))
            {
                return format!("{}{rest}", child(&args_at, arg));
            }
        }
        at.to_owned()
    };
    for error in &mut p.errors[errors..] {
        error.pointer = remap(&error.pointer);
        error.message = error.message.replace("`parallelDelegations`", "`lanes`");
    }
    for warning in &mut p.warnings[warnings..] {
        if let Some(at) = warning.pointer.as_mut() {
            *at = remap(at);
        }
    }
    if ok { parsed } else { None }
}

/// A step written with `templateCall`.
pub(super) fn call(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<SourceStep> {
    let f = Fields::new(p, value, pointer, "a step with `templateCall`", CALLER)?;
    let caller_id = f
        .req(
            p,
            "id",
            "Add a step `id` matching [a-z0-9_-]+ (it prefixes the expanded step ids).",
        )
        .and_then(|v| super::step::step_id(p, v, &f.at("id")));
    if let Some(v) = f.opt("title") {
        super::fields::non_blank(p, v, &f.at("title"), "step `title`");
    }
    let call_at = f.at("templateCall");
    let call = f.req(p, "templateCall", "Add `templateCall: {templateId, args}`.")?;
    let c = Fields::new(p, call, &call_at, "`templateCall`", &["templateId", "args"])?;
    let template_id = c
        .req(
            p,
            "templateId",
            "Add `templateId`, e.g. `wr.templates.routine.design-review`.",
        )
        .and_then(|v| string(p, v, &c.at("templateId"), "`templateId`"))
        .map(str::to_owned);
    let args = args_map(p, c.opt("args"), &c.at("args"));
    c.finish(p);
    let kept: Map<String, Value> = ["title", "requireConfirmation", "notesOptional", "agentRole"]
        .iter()
        .filter_map(|k| f.opt(k).map(|v| ((*k).to_owned(), v.clone())))
        .collect();
    f.finish(p);
    let (template_id, args) = (template_id?, args?);
    if template_id == PARALLEL_LANES {
        return parallel_lanes(p, value, args, pointer);
    }
    if templates::find(&template_id).is_some() {
        // A builtin template: the same call as `{"type": "template_call", ...}`.
        let mut builtin = Map::new();
        builtin.insert("type".into(), Value::from("template_call"));
        builtin.insert("templateId".into(), Value::from(template_id));
        builtin.insert("args".into(), Value::Object(args));
        return super::step::template_call(p, &Value::Object(builtin), &call_at)
            .map(SourceStep::TemplateCall);
    }
    let Some(name) = template_routine_name(&template_id) else {
        unknown_template(p, &template_id, &child(&call_at, "templateId"));
        return None;
    };
    let Some(entry) = p.ctx.library.routine(name).cloned() else {
        unknown_template(p, &template_id, &child(&call_at, "templateId"));
        return None;
    };
    let routine = entry.source.as_ref()?;
    let caller_id = caller_id?;
    let steps = routine_steps(p, routine, entry.workflow_id.as_str(), &call_at)?;
    let mut out = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let Some(expanded) = expand_step(
            p,
            step,
            Expansion {
                caller_id: &caller_id,
                routine_id: entry.workflow_id.as_str(),
                meta_guidance: routine.get("metaGuidance"),
                routine_functions: routine.get("functionDefinitions"),
                args: &args,
                caller: value,
                caller_at: pointer,
                call_at: &call_at,
                index: i,
            },
        ) else {
            continue;
        };
        let lenient = p.lenient;
        p.lenient = entry.workflow_id.id_status() == IdStatus::Legacy;
        let warnings = p.warnings.len();
        let step_id = step.get("id").and_then(Value::as_str).unwrap_or_default();
        let origin = format!("routine `{}` step `{step_id}`", entry.workflow_id);
        let parsed = foreign_step(p, &expanded, &call_at, &origin);
        // The routine's own warnings (its 3.x fields) belong to the routine's file.
        p.warnings.truncate(warnings);
        p.lenient = lenient;
        let Some(mut parsed) = parsed else { continue };
        parsed.extras.provenance = Some(StepProvenance {
            source: StepSource::TemplateInjected,
            origin_id: Some(template_id.clone()),
        });
        parsed.extras.kept.insert(
            "routineWorkflowId".to_owned(),
            Value::from(entry.workflow_id.as_str()),
        );
        if i == 0 && !kept.is_empty() {
            parsed
                .extras
                .kept
                .insert("templateCaller".to_owned(), Value::Object(kept.clone()));
        }
        out.push(SourceStep::Normal(Box::new(parsed)));
    }
    if out.len() != steps.len() {
        return None;
    }
    Some(SourceStep::Group(out))
}

/// A routine template named in a `{"type": "template_call"}` step: reported (a routine's
/// expanded step ids need the calling step's `id`) with the step form to use. `true` when it
/// was one.
pub(super) fn routine_from_template_call(p: &mut Parser<'_>, raw: &str, pointer: &str) -> bool {
    if template_routine_name(raw).is_none() {
        return false;
    }
    p.error(CompileError::new(
        Code::UnknownTemplate,
        pointer,
        format!("`{raw}` is a routine template: it is called from a step with an `id` (which prefixes the expanded step ids), not from a `template_call` step."),
        format!("Write the step as `{{\"id\": \"<step id>\", \"title\": \"...\", \"templateCall\": {{\"templateId\": \"{raw}\", \"args\": {{...}}}}}}`."),
    ));
    true
}

fn unknown_template(p: &mut Parser<'_>, raw: &str, pointer: &str) {
    let mut known: Vec<String> = templates::TEMPLATES
        .iter()
        .map(|t| t.template_id.to_owned())
        .collect();
    known.extend(p.ctx.library.routine_template_ids());
    let message = if raw.starts_with(ROUTINE_TEMPLATE_PREFIX) {
        format!(
            "`{raw}` names a routine that no workflow source defines (a routine is a workflow with id `<namespace>.routine-{}`).",
            raw.trim_start_matches(ROUTINE_TEMPLATE_PREFIX)
        )
    } else if raw.starts_with(TEMPLATE_PREFIX) {
        format!("`{raw}` is not a WorkRail template.")
    } else {
        format!("`{raw}` is not a template id (`wr.templates.*`).")
    };
    p.error(CompileError::new(
        Code::UnknownTemplate,
        pointer,
        message,
        format!(
            "Use one of: {}; or add the routine workflow to a workflow source (a project's `workflows/` directory, a directory of WORKRAIL_WORKFLOW_DIRS, or ~/.workrail/workflows).",
            known.join(", ")
        ),
    ));
}

/// The routine's steps, checked for what an expansion needs.
fn routine_steps<'r>(
    p: &mut Parser<'_>,
    routine: &'r Value,
    routine_id: &str,
    call_at: &str,
) -> Option<&'r Vec<Value>> {
    let problem = |p: &mut Parser<'_>, what: String| {
        p.error(CompileError::new(
            Code::InvalidValue,
            call_at,
            format!("routine `{routine_id}` cannot be expanded: {what}."),
            format!("Fix the routine `{routine_id}` (validate its file with `workrail validate`)."),
        ));
    };
    let Some(steps) = routine.get("steps").and_then(Value::as_array) else {
        problem(p, "it has no `steps` array".to_owned());
        return None;
    };
    if steps.is_empty() {
        problem(p, "its `steps` are empty".to_owned());
        return None;
    }
    for (i, step) in steps.iter().enumerate() {
        if step.get("templateCall").is_some()
            || step.get("type").and_then(Value::as_str) == Some("template_call")
        {
            problem(
                p,
                format!("its step {i} calls a template, and routines may not nest"),
            );
            return None;
        }
        if step.get("type").is_some() {
            problem(
                p,
                format!("its step {i} is not a plain step (`type` is set)"),
            );
            return None;
        }
    }
    Some(steps)
}

struct Expansion<'a> {
    caller_id: &'a StepId,
    routine_id: &'a str,
    meta_guidance: Option<&'a Value>,
    /// The routine's workflow-level `functionDefinitions`.
    routine_functions: Option<&'a Value>,
    args: &'a Map<String, Value>,
    caller: &'a Value,
    caller_at: &'a str,
    call_at: &'a str,
    index: usize,
}

/// One routine step as the expanded step's JSON.
fn expand_step(p: &mut Parser<'_>, step: &Value, x: Expansion<'_>) -> Option<Value> {
    let Some(map) = step.as_object() else {
        p.error(CompileError::new(
            Code::InvalidValue,
            x.call_at,
            format!(
                "routine `{}` step {} is not an object.",
                x.routine_id, x.index
            ),
            format!("Fix the routine `{}`.", x.routine_id),
        ));
        return None;
    };
    let mut out = map.clone();
    let step_id = map.get("id").and_then(Value::as_str).unwrap_or_default();
    let id = format!("{}__{step_id}", x.caller_id);
    if step_id.is_empty() || StepId::parse(&id).is_err() {
        p.error(CompileError::new(
            Code::InvalidId,
            child(x.caller_at, "id"),
            format!(
                "expanding routine `{}` gives step id `{id}`, which is not a valid step id ([a-z0-9_-]+, at most {} characters).",
                x.routine_id,
                StepId::MAX_LEN
            ),
            "Shorten the calling step's `id` (it prefixes every expanded step id).",
        ));
        return None;
    }
    out.insert("id".into(), Value::from(id));
    for key in ["title", "prompt"] {
        if let Some(Value::String(text)) = map.get(key) {
            let substituted = substitute(p, text, &x, step_id, key)?;
            out.insert(key.into(), Value::from(substituted));
        }
    }
    if let Some(Value::Array(meta)) = x.meta_guidance
        && !meta.is_empty()
    {
        let mut guidance = match map.get("guidance") {
            Some(Value::Array(g)) => g.clone(),
            _ => Vec::new(),
        };
        guidance.extend(meta.iter().cloned());
        out.insert("guidance".into(), Value::Array(guidance));
    }
    if !out.contains_key("runCondition")
        && let Some(condition) = x.caller.get("runCondition")
    {
        out.insert("runCondition".into(), condition.clone());
    }
    carry_routine_functions(&mut out, x.routine_functions);
    Some(Value::Object(out))
}

/// The routine's workflow-level `functionDefinitions` that an expanded step references and does
/// not define itself become its own (decision D162): the caller's workflow knows nothing of
/// them, so without this the caller is refused for a reference only the routine can resolve.
fn carry_routine_functions(step: &mut Map<String, Value>, routine: Option<&Value>) {
    let Some(Value::Array(defined)) = routine else {
        return;
    };
    let referenced: Vec<String> = match step.get("functionReferences") {
        Some(Value::Array(refs)) => refs
            .iter()
            .filter_map(Value::as_str)
            .map(|r| r.strip_suffix("()").unwrap_or(r).to_owned())
            .collect(),
        _ => return,
    };
    let name_of = |d: &Value| d.get("name").and_then(Value::as_str).map(str::to_owned);
    let mut own = match step.get("functionDefinitions") {
        Some(Value::Array(own)) => own.clone(),
        _ => Vec::new(),
    };
    let before = own.len();
    for definition in defined {
        let Some(name) = name_of(definition) else {
            continue;
        };
        if !referenced.contains(&name) || own.iter().any(|d| name_of(d).as_ref() == Some(&name)) {
            continue;
        }
        let mut carried = definition.clone();
        // Defined for the routine's workflow, it is now the step's own.
        if let Some(map) = carried.as_object_mut() {
            map.remove("scope");
        }
        own.push(carried);
    }
    if own.len() > before {
        step.insert("functionDefinitions".into(), Value::Array(own));
    }
}

/// Replaces `{name}` (single braces around an identifier; `{{name}}` is left for the run's
/// context, and braces around anything else, such as a JSON example, stay as written) with the
/// call's argument `name`; every placeholder needs an argument that is a string, number or
/// boolean.
fn substitute(
    p: &mut Parser<'_>,
    text: &str,
    x: &Expansion<'_>,
    step_id: &str,
    field: &str,
) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut missing: Vec<String> = Vec::new();
    let mut wrong: Vec<String> = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        rest = &rest[open..];
        if rest.starts_with("{{") {
            // A context marker: copied through whole, braces included.
            let end = rest.find("}}").map_or(rest.len(), |e| e + 2);
            out.push_str(&rest[..end]);
            rest = &rest[end..];
            continue;
        }
        let placeholder = rest[1..]
            .find('}')
            .map(|close| &rest[1..=close])
            .filter(|name| super::functions::is_identifier(name));
        let Some(name) = placeholder else {
            // Not a placeholder (e.g. a JSON example): kept as written.
            out.push('{');
            rest = &rest[1..];
            continue;
        };
        match x.args.get(name) {
            Some(Value::String(s)) => out.push_str(s),
            Some(v @ (Value::Number(_) | Value::Bool(_))) => out.push_str(&v.to_string()),
            Some(_) => wrong.push(name.to_owned()),
            None => missing.push(name.to_owned()),
        }
        rest = &rest[name.len() + 2..];
    }
    out.push_str(rest);
    let args_at = child(x.call_at, "args");
    if !missing.is_empty() {
        p.error(CompileError::new(
            Code::MissingField,
            args_at.clone(),
            format!(
                "routine `{}` step `{step_id}` uses {} in its `{field}`, but the call's `args` do not define {}.",
                x.routine_id,
                missing.iter().map(|m| format!("`{{{m}}}`")).collect::<Vec<_>>().join(", "),
                if missing.len() == 1 { "it" } else { "them" }
            ),
            format!(
                "Add {} to `templateCall.args`.",
                missing.iter().map(|m| format!("`\"{m}\": \"...\"`")).collect::<Vec<_>>().join(", ")
            ),
        ));
    }
    if !wrong.is_empty() {
        p.error(CompileError::new(
            Code::WrongType,
            args_at,
            format!(
                "routine `{}` step `{step_id}` substitutes {} into text, but {} not a string, number or boolean ({}).",
                x.routine_id,
                wrong.iter().map(|m| format!("`{m}`")).collect::<Vec<_>>().join(", "),
                if wrong.len() == 1 { "it is" } else { "they are" },
                wrong
                    .iter()
                    .map(|m| type_name(x.args.get(m).unwrap_or(&Value::Null)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            "Pass text (or a number or boolean) for each placeholder argument.",
        ));
    }
    (missing.is_empty() && wrong.is_empty()).then_some(out)
}

//! Steps: normal steps, `template_call` steps and `type: "loop"` steps (locks §9 "Loops
//! authoring": delimiter-safe ids, explicit ordered body, required `maxIterations`, `while` as a
//! condition reference).

use std::collections::BTreeSet;

use serde_json::Value;
use workrail_spec::closed::{Capability, NonAssumableChoiceKind};
use workrail_spec::ids::{ConditionId, LoopId, StepId};

use super::fields::{Fields, array, non_blank, one_of, string, type_name};
use super::{Parser, delimiter_safe, functions, language, prompt};
use crate::builtins::templates::{self, CAPABILITY_PROBE, ProbeWhen, TEMPLATE_PREFIX};
use crate::compiler::MAX_LOOP_ITERATIONS;
use crate::compiler::error::{AutoFix, CompileError, CompileErrorCode as Code, index};
use crate::compiler::ids::suggest_step_id;
use crate::compiler::source::{
    LoopStep, NormalStep, PromptPart, PromptValue, SourceStep, StepBody, TemplateCall,
};
use workrail_spec::compiled::FunctionScope;

const NORMAL: &[&str] = &[
    "id",
    "title",
    "agentRole",
    "prompt",
    "promptBlocks",
    "requireConfirmation",
    "output",
    "nonAssumableChoices",
    "functionDefinitions",
    "functionReferences",
    // The workflow language's control flow (`parse/language.rs`).
    "runCondition",
    "validationCriteria",
    "assessmentRefs",
    "assessmentConsequences",
    "promptFragments",
    "notesOptional",
    "maxAttempts",
    // The 3.x spelling's content fields (`content.rs`, `legacy.rs`).
    "outputContract",
    "guidance",
    "askForFiles",
    "hasValidation",
    "functionCalls",
    "audit",
    "verification",
    "modelTier",
];
const TEMPLATE_CALL: &[&str] = &["type", "templateId", "args"];
const LOOP: &[&str] = &[
    "type",
    "loopId",
    "while",
    "maxIterations",
    "functionDefinitions",
    "body",
    // The 3.x spelling: the loop's `id` (v2: `loopId`) and `title` (kept).
    "id",
    "title",
    // Control-flow fields: accepted here, compiled by the language module.
    "loop",
    "runCondition",
    "requireConfirmation",
    "notesOptional",
];

/// A non-empty list of steps (`steps` or a loop `body`). Steps that fail to parse are left out
/// (their errors are recorded), so the rest can still be checked.
pub(super) fn steps(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    what: &str,
) -> Vec<SourceStep> {
    let Some(items) = array(p, value, pointer, what) else {
        return Vec::new();
    };
    if items.is_empty() {
        p.error(CompileError::new(
            Code::InvalidValue,
            pointer,
            format!("{what} is empty; a workflow and every loop body need at least one step."),
            "Add at least one step.",
        ));
    }
    items
        .iter()
        .enumerate()
        .flat_map(|(i, item)| {
            let at = index(pointer, i);
            if language::is_branch(item) {
                language::branch(p, item, &at)
            } else {
                step(p, item, &at).into_iter().collect()
            }
        })
        .collect()
}

fn step(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<SourceStep> {
    let Some(map) = value.as_object() else {
        p.error(CompileError::new(
            Code::WrongType,
            pointer,
            format!("a step must be a JSON object, found {}.", type_name(value)),
            "Write the step as an object: a normal step, `\"type\": \"template_call\"` or `\"type\": \"loop\"`.",
        ));
        return None;
    };
    match map.get("type") {
        None if map.contains_key("templateCall") => super::routine::call(p, value, pointer),
        None => normal(p, value, pointer)
            .map(|n| super::content::with_virtual_steps(p, n, value, pointer)),
        Some(t) => {
            let at = format!("{pointer}/type");
            match one_of(
                p,
                t,
                &at,
                "step `type`",
                &["branch", "loop", "parallel", "template_call"],
            )? {
                "loop" if language::is_language_loop(map) => {
                    language::loop_step(p, value, pointer).map(SourceStep::Loop)
                }
                "loop" => loop_step(p, value, pointer).map(SourceStep::Loop),
                "parallel" => super::parallel::step(p, value, pointer),
                "branch" => {
                    // `steps` splices branches into their list before a step is read.
                    p.error(CompileError::new(
                        Code::Internal,
                        pointer,
                        "a branch reached the single-step reader.",
                        "This is a WorkRail compiler bug; report it with the workflow source.",
                    ));
                    None
                }
                _ => template_call(p, value, pointer).map(SourceStep::TemplateCall),
            }
        }
    }
}

pub(super) fn step_id(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<StepId> {
    let raw = string(p, value, pointer, "step `id`")?;
    if let Ok(id) = StepId::parse(raw) {
        return Some(id);
    }
    let fixed = suggest_step_id(raw);
    p.error(
        CompileError::new(
            Code::InvalidId,
            pointer,
            format!("step id `{raw}` must match [a-z0-9_-]+ (1 to 64 characters; no `@`, `/` or `:`, which StepInstanceKeys use as delimiters)."),
            format!("Use `{fixed}`."),
        )
        .with_fix(AutoFix::Replace {
            path: pointer.to_owned(),
            value: Value::from(fixed),
        }),
    );
    None
}

pub(super) fn normal(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<NormalStep> {
    let f = Fields::new(p, value, pointer, "a step", NORMAL)?;
    let id = f
        .req(p, "id", "Add a step `id` matching [a-z0-9_-]+.")
        .and_then(|v| step_id(p, v, &f.at("id")));
    let title = f
        .req(p, "title", "Add a short `title`.")
        .and_then(|v| non_blank(p, v, &f.at("title"), "step `title`"))
        .map(str::to_owned);
    let agent_role = f
        .opt("agentRole")
        .map(|v| prompt::free_text(p, v, &f.at("agentRole"), "step `agentRole`"));
    let confirmation = language::confirmation(
        p,
        f.opt("requireConfirmation"),
        &f.at("requireConfirmation"),
    );
    let body = match (f.opt("prompt"), f.opt("promptBlocks")) {
        (Some(text), None) => {
            prompt::prompt_value(p, text, &f.at("prompt"), "step `prompt`", false)
                .map(|v| StepBody::Prompt(flatten(&v)))
        }
        (None, Some(blocks)) => {
            prompt::blocks(p, blocks, &f.at("promptBlocks")).map(StepBody::Blocks)
        }
        (Some(_), Some(blocks)) => {
            let mut error = CompileError::new(
                Code::InvalidValue,
                f.at("prompt"),
                "a step has both `prompt` and `promptBlocks`; it must have exactly one.",
                "Keep `promptBlocks` (structured) and move the text of `prompt` into it: into `goal` when it has none, else as the first `procedure` item.",
            );
            if let Some(fix) = keep_prompt_text(blocks, &f.at("prompt"), &f.at("promptBlocks")) {
                error = error.with_fix(fix);
            }
            p.error(error);
            None
        }
        (None, None) => {
            p.error(CompileError::new(
                Code::MissingField,
                f.at("promptBlocks"),
                "a step needs `prompt` (a string) or `promptBlocks` (goal, constraints, procedure, outputRequired, verify).",
                "Add `promptBlocks` with at least a `goal`.",
            ));
            None
        }
    };
    let mut extras = super::content::step(p, &f);
    let output = f
        .opt("output")
        .map(|v| prompt::output(p, v, &f.at("output")));
    let output = super::legacy::output_contract(p, &f, output, &mut extras.kept);
    let lang = language::step_fields(p, &f, confirmation.as_ref());
    let choices = match f.opt("nonAssumableChoices") {
        None => Some(BTreeSet::new()),
        Some(v) => non_assumable_choices(p, v, &f.at("nonAssumableChoices")),
    };
    let functions = match f.opt("functionDefinitions") {
        None => Some(Vec::new()),
        Some(v) => functions::definitions(p, v, &f.at("functionDefinitions"), FunctionScope::Step),
    };
    let mut function_refs = match f.opt("functionReferences") {
        None => Some(Vec::new()),
        Some(v) => functions::references(p, v, &f.at("functionReferences")),
    };
    if let Some(refs) = function_refs.as_mut() {
        super::content::call_refs(refs, &extras, pointer);
    }
    extras.kept.extend(f.finish_keeping(p));
    Some(NormalStep {
        id: id?,
        title: title?,
        agent_role: match agent_role {
            Some(r) => Some(r?),
            None => None,
        },
        require_confirmation: confirmation?.required,
        body: body?,
        output: match output {
            Some(o) => Some(o?),
            None => None,
        },
        non_assumable_choices: choices?,
        functions: functions?,
        function_refs: function_refs?,
        language: lang?,
        extras,
        pointer: pointer.to_owned(),
    })
}

/// `nonAssumableChoices`: the choices of this step only the user may make (locks §3
/// `NonAssumableChoiceKind`). Order and repeats do not matter: the set is what is compiled.
fn non_assumable_choices(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
) -> Option<BTreeSet<NonAssumableChoiceKind>> {
    let items = array(p, value, pointer, "`nonAssumableChoices`")?;
    let allowed: Vec<&str> = NonAssumableChoiceKind::ALL
        .iter()
        .map(|c| c.as_str())
        .collect();
    let mut out = BTreeSet::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        match one_of(
            p,
            item,
            &index(pointer, i),
            "a non-assumable choice",
            &allowed,
        )
        .and_then(NonAssumableChoiceKind::parse)
        {
            Some(choice) => {
                out.insert(choice);
            }
            None => ok = false,
        }
    }
    ok.then_some(out)
}

/// A text-only prompt value as one string (parts joined by a space).
fn flatten(value: &PromptValue) -> String {
    match value {
        PromptValue::Text(t) => t.clone(),
        PromptValue::Parts(parts) => parts
            .iter()
            .filter_map(|part| match part {
                PromptPart::Text(t) => Some(t.as_str()),
                PromptPart::Ref(_) => None,
            })
            .collect::<Vec<_>>()
            .join(" "),
    }
}

pub(super) fn template_call(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
) -> Option<TemplateCall> {
    let f = Fields::new(p, value, pointer, "a template_call step", TEMPLATE_CALL)?;
    let template = f
        .req(
            p,
            "templateId",
            "Add `templateId`, e.g. `wr.templates.capability_probe`.",
        )
        .and_then(|v| string(p, v, &f.at("templateId"), "`templateId`"))
        .and_then(|raw| {
            let found = templates::find(raw);
            if found.is_none()
                && super::routine::routine_from_template_call(p, raw, &f.at("templateId"))
            {
                return None;
            }
            if found.is_none() {
                let known: Vec<&str> = templates::TEMPLATES.iter().map(|t| t.template_id).collect();
                let tail = raw.rsplit('.').next().unwrap_or(raw);
                let mut err = CompileError::new(
                    Code::UnknownTemplate,
                    f.at("templateId"),
                    format!("`{raw}` is not a WorkRail template."),
                    format!("Use one of: {}.", known.join(", ")),
                );
                if let Some(near) = templates::find(&format!("{TEMPLATE_PREFIX}{tail}")) {
                    err = err.with_fix(AutoFix::Replace {
                        path: f.at("templateId"),
                        value: Value::from(near.template_id),
                    });
                }
                p.error(err);
            }
            found
        });
    let args = f.req(p, "args", "Add `args` with the template's arguments.");
    f.finish(p);
    let (template, args) = (template?, args?);
    let names: Vec<&str> = template.args.iter().map(|a| a.name).collect();
    let args_pointer = format!("{pointer}/args");
    let a = Fields::new(p, args, &args_pointer, "template `args`", &names)?;
    let mut values = Vec::new();
    for arg in template.args {
        let hint = format!("Add `{}`: one of {}.", arg.name, arg.allowed.join(", "));
        values.push(
            a.req(p, arg.name, &hint)
                .and_then(|v| one_of(p, v, &a.at(arg.name), arg.name, arg.allowed)),
        );
    }
    a.finish(p);
    // The registry has one template today; its args are read by name.
    match template.template_id {
        CAPABILITY_PROBE => {
            let capability = values
                .first()
                .copied()
                .flatten()
                .and_then(Capability::parse);
            let when = values.get(1).copied().flatten().and_then(ProbeWhen::parse);
            Some(TemplateCall::CapabilityProbe {
                capability: capability?,
                when: when?,
                pointer: pointer.to_owned(),
            })
        }
        _ => None,
    }
}

fn loop_step(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<LoopStep> {
    let f = Fields::new(p, value, pointer, "a loop step", LOOP)?;
    let id_field = super::legacy::loop_id_field(p, &f);
    let loop_id = f
        .req(p, id_field, "Add a `loopId` matching [a-z0-9_-]+.")
        .and_then(|v| delimiter_safe(p, v, &f.at(id_field), "`loopId`"))
        .and_then(|raw| LoopId::parse(&raw).ok());
    let mut kept = super::legacy::loop_kept(p, &f);
    let condition_id = f
        .req(
            p,
            "while",
            "Add `\"while\": {\"kind\": \"condition_ref\", \"conditionId\": \"...\"}`.",
        )
        .and_then(|v| while_ref(p, v, &f.at("while")));
    let max_iterations = match f.opt("maxIterations") {
        Some(v) => max_iterations(p, v, &f.at("maxIterations")),
        None => {
            p.error(CompileError::new(
                Code::MissingMaxIterations,
                f.at("maxIterations"),
                "a loop must declare `maxIterations` (a count of allowed iterations, at least 1); there is no default.",
                "Add `\"maxIterations\": N` with the most iterations this loop may ever need (e.g. 5).",
            ));
            None
        }
    };
    let functions = match f.opt("functionDefinitions") {
        None => Some(Vec::new()),
        Some(v) => functions::definitions(p, v, &f.at("functionDefinitions"), FunctionScope::Loop),
    };
    let body = f
        .req(p, "body", "Add a non-empty `body` array of steps.")
        .map(|v| steps(p, v, &f.at("body"), "loop `body`"));
    kept.extend(f.finish_keeping(p));
    Some(LoopStep {
        loop_id: loop_id?,
        condition_id: Some(condition_id?),
        max_iterations: max_iterations?,
        functions: functions?,
        body: body?,
        kept,
        pointer: pointer.to_owned(),
        language: Default::default(),
    })
}

pub(super) fn max_iterations(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<u32> {
    let fix = |n: u32| AutoFix::Replace {
        path: pointer.to_owned(),
        value: Value::from(n),
    };
    match value.as_u64() {
        Some(n) if (1..=u64::from(MAX_LOOP_ITERATIONS)).contains(&n) => u32::try_from(n).ok(),
        Some(0) => {
            p.error(
                CompileError::new(
                    Code::InvalidValue,
                    pointer,
                    "`maxIterations` is 0: it is a count of allowed iterations, so a loop that may run must allow at least 1.",
                    "Use at least 1.",
                )
                .with_fix(fix(1)),
            );
            None
        }
        Some(n) => {
            p.error(
                CompileError::new(
                    Code::InvalidValue,
                    pointer,
                    format!("`maxIterations` {n} exceeds the limit of {MAX_LOOP_ITERATIONS}."),
                    format!("Use at most {MAX_LOOP_ITERATIONS}."),
                )
                .with_fix(fix(MAX_LOOP_ITERATIONS)),
            );
            None
        }
        None => {
            p.error(CompileError::new(
                Code::WrongType,
                pointer,
                format!(
                    "`maxIterations` must be a positive integer, found {}.",
                    value
                ),
                "Write a whole number such as 5.",
            ));
            None
        }
    }
}

fn while_ref(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<ConditionId> {
    let f = Fields::new(
        p,
        value,
        pointer,
        "a loop `while`",
        &["kind", "conditionId"],
    )?;
    let kind = f
        .req(p, "kind", "Add `\"kind\": \"condition_ref\"`.")
        .and_then(|v| one_of(p, v, &f.at("kind"), "`while.kind`", &["condition_ref"]));
    let id = f
        .req(
            p,
            "conditionId",
            "Add the `conditionId` of a condition declared in `conditions[]`.",
        )
        .and_then(|v| delimiter_safe(p, v, &f.at("conditionId"), "`conditionId`"));
    f.finish(p);
    let (_, raw) = (kind?, id?);
    if p.condition(&raw).is_none() {
        let declared: Vec<String> = p.conditions.keys().cloned().collect();
        p.error(CompileError::new(
            Code::UnknownCondition,
            format!("{pointer}/conditionId"),
            format!("loop condition `{raw}` is not declared in `conditions[]`."),
            if declared.is_empty() {
                format!("Declare it: add `\"conditions\": [{{\"id\": \"{raw}\", \"kind\": \"loop_control\", \"continueWhen\": \"continue\"}}]`.")
            } else {
                format!("Declare it in `conditions[]`, or use one of: {}.", declared.join(", "))
            },
        ));
        return None;
    }
    ConditionId::parse(&raw).ok()
}

/// The auto-fix for a step with both `prompt` and `promptBlocks`: one move that keeps the prompt
/// text (into `goal` when there is none, else to the front of `procedure`). `None` when one
/// operation cannot do it (no `goal` slot and no `procedure` list); the suggestion says what to
/// do by hand, and nothing is deleted.
fn keep_prompt_text(blocks: &Value, prompt: &str, blocks_at: &str) -> Option<AutoFix> {
    let blocks = blocks.as_object()?;
    let path = if !blocks.contains_key("goal") {
        format!("{blocks_at}/goal")
    } else if blocks.get("procedure").is_some_and(Value::is_array) {
        format!("{blocks_at}/procedure/0")
    } else {
        return None;
    };
    Some(AutoFix::Move {
        from: prompt.to_owned(),
        path,
    })
}

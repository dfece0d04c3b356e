//! Loops in the language's form, `{type: loop, id, title, loop: {...}, body}` (decision D141),
//! and what is resolved once the whole workflow is parsed: a `body` naming a top-level step, and
//! whether a `while`/`until` loop decides by a `loop_control` decision step or over the context.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::compiler::error::{CompileError, CompileErrorCode as Code, child};
use crate::compiler::parse::Parser;
use crate::compiler::parse::fields::{Fields, non_blank, one_of, string, type_name};
use workrail_spec::compiled::{
    CompiledWarning, CompiledWarningCode, Condition, FunctionScope, LoopVars, LoopWhile,
};
use workrail_spec::ids::{ConditionId, LoopId, StepId};

use super::condition::condition;
use super::warn;
use crate::builtins::contracts::LOOP_CONTROL;
use crate::compiler::language::{ConditionSource, LoopLang, PendingWhile};
use crate::compiler::parse::{delimiter_safe, functions, step};
use crate::compiler::source::{ConditionKind, LoopStep, SourceCondition, SourceStep};

/// The language's default `maxIterations` (its schema's default).
pub(crate) const DEFAULT_MAX_ITERATIONS: u32 = 100;

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
pub(crate) fn is_language_loop(map: &Map<String, Value>) -> bool {
    map.contains_key("loop")
        || (map.contains_key("id") && !map.contains_key("loopId") && !map.contains_key("while"))
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
pub(crate) fn loop_step(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<LoopStep> {
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
        Some(v) => (Some(step::steps(p, v, &f.at("body"), "loop `body`")), None),
        None => (None, None),
    };
    // A legacy-id workflow keeps the fields neither spelling defines (decision D147).
    let unknown = f.finish_keeping(p);
    let (max_iterations, while_, pending, vars) = config?;
    Some(LoopStep {
        loop_id: loop_id?,
        condition_id: None,
        max_iterations,
        functions: functions?,
        body: body?,
        kept: unknown,
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
        Some(v) => step::max_iterations(p, v, &f.at("maxIterations")),
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

pub(crate) fn resolve_body_refs(
    p: &mut Parser<'_>,
    steps: &mut Vec<SourceStep>,
    raw_steps: Option<&Value>,
) {
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
    let failed_to_parse = |id: &StepId| {
        raw_steps.and_then(Value::as_array).is_some_and(|raw| {
            raw.iter().any(|s| {
                s.get("id").and_then(Value::as_str) == Some(id.as_str()) && s.get("type").is_none()
            })
        })
    };
    for (id, (_, at)) in &wanted {
        if failed_to_parse(id) {
            // Its own errors are reported; naming it again would only mislead.
            continue;
        }
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

pub(crate) fn resolve_loops(
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

/// A `wr.contracts.loop_control` contract written as the language's `outputContract` on a step
/// outside any loop: the language validates the artifact and lets it decide nothing, so it is a
/// warning here, not the error the native spelling gets.
pub(crate) fn free_standing_decisions(p: &mut Parser<'_>, steps: &[SourceStep]) {
    for step in steps {
        if let SourceStep::Normal(n) = step
            && n.language.output_contract
            && n.output.as_ref().and_then(|o| o.contract_ref) == Some(LOOP_CONTROL)
        {
            warn(
                p,
                &child(&child(&n.pointer, "outputContract"), "contractRef"),
                format!(
                    "step `{}` asks for a `{LOOP_CONTROL}` decision outside any loop: the artifact is still required and checked, but it decides nothing.",
                    n.id
                ),
            );
        }
    }
}

//! Cross-reference checks on the expanded tree: unique step and loop ids (template expansions
//! included), loop decision steps in place, and unused conditions (a warning).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use workrail_spec::compiled::{CompiledWarning, CompiledWarningCode};

use super::error::{AutoFix, CompileError, CompileErrorCode as Code, child};
use super::ir::{Item, LoopIr, StepIr, for_each_loop, for_each_step};
use super::source::{ConditionKind, SourceCondition};
use crate::builtins::contracts::LOOP_CONTROL;

/// The first free `<base>_<n>` (n from 2), for deterministic duplicate renames.
fn free_name(base: &str, taken: &BTreeSet<String>) -> String {
    (2..)
        .map(|n| format!("{base}_{n}"))
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or_else(|| format!("{base}_2"))
}

/// Step ids and loop ids are unique across the whole expanded workflow.
pub(crate) fn unique_ids(items: &[Item], errors: &mut Vec<CompileError>) {
    let mut all_steps = BTreeSet::new();
    for_each_step(items, &mut |s| {
        all_steps.insert(s.step_id.as_str().to_owned());
    });
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for_each_step(items, &mut |s: &StepIr| {
        let id = s.step_id.as_str();
        if let Some(first) = seen.get(id) {
            let authored = s.provenance.origin_id.is_none();
            let pointer = if authored {
                child(&s.pointer, "id")
            } else {
                s.pointer.clone()
            };
            let mut err = CompileError::new(
                Code::DuplicateId,
                pointer.clone(),
                format!(
                    "step id `{id}` is used twice (first at {first}); StepInstanceKeys need unique step ids."
                ),
                if authored {
                    "Rename one of the steps."
                } else {
                    "A template call expands to this id: remove the duplicate call or rename the authored step."
                },
            );
            err = err.with_fix(if authored {
                AutoFix::Replace {
                    path: pointer,
                    value: Value::from(free_name(id, &all_steps)),
                }
            } else {
                AutoFix::Remove { path: pointer }
            });
            errors.push(err);
        } else {
            seen.insert(id.to_owned(), s.pointer.clone());
        }
    });
    let mut all_loops = BTreeSet::new();
    for_each_loop(items, &mut |l| {
        all_loops.insert(l.loop_id.as_str().to_owned());
    });
    let mut seen_loops: BTreeMap<String, String> = BTreeMap::new();
    for_each_loop(items, &mut |l: &LoopIr| {
        let id = l.loop_id.as_str();
        if let Some(first) = seen_loops.get(id) {
            let pointer = child(&l.pointer, "loopId");
            errors.push(
                CompileError::new(
                    Code::DuplicateId,
                    pointer.clone(),
                    format!("loop id `{id}` is used twice (first at {first})."),
                    "Give each loop a unique `loopId`.",
                )
                .with_fix(AutoFix::Replace {
                    path: pointer,
                    value: Value::from(free_name(id, &all_loops)),
                }),
            );
        } else {
            seen_loops.insert(id.to_owned(), l.pointer.clone());
        }
    });
}

/// A `loop_control` loop ends with exactly the step that declares `wr.contracts.loop_control`,
/// and that contract appears nowhere else (the decision is read when the iteration ends, so
/// the decision step must be the last body item).
pub(crate) fn loop_decisions(
    items: &[Item],
    conditions: &[SourceCondition],
    errors: &mut Vec<CompileError>,
) {
    let kind_of = |l: &LoopIr| match &l.condition_id {
        Some(id) => conditions.iter().find(|c| &c.id == id).map(|c| c.kind),
        // A loop that decides over the context never reads a decision.
        None => Some(ConditionKind::AlwaysTrue),
    };
    check_list(items, None, &kind_of, errors);
}

fn check_list(
    items: &[Item],
    parent: Option<(&LoopIr, Option<ConditionKind>)>,
    kind_of: &impl Fn(&LoopIr) -> Option<ConditionKind>,
    errors: &mut Vec<CompileError>,
) {
    for (i, item) in items.iter().enumerate() {
        match item {
            Item::Step(step) if step.contract_ref == Some(LOOP_CONTROL) => {
                let last = i + 1 == items.len();
                let pointer = if step.provenance.origin_id.is_some() {
                    step.pointer.clone()
                } else if step.language.output_contract {
                    format!("{}/outputContract/contractRef", step.pointer)
                } else {
                    format!("{}/output/contractRef", step.pointer)
                };
                let problem = match parent {
                    // The language lets a decision outside any loop decide nothing (D141).
                    None if step.language.output_contract => None,
                    None => Some("it is not inside a loop".to_owned()),
                    Some((l, Some(ConditionKind::LoopControl { .. }))) if !last => Some(format!(
                        "it is not the last step of loop `{}`'s body (the decision is read when an iteration ends)",
                        l.loop_id
                    )),
                    Some((_, Some(ConditionKind::LoopControl { .. }))) | Some((_, None)) => None,
                    Some((l, Some(_))) => Some(match &l.condition_id {
                        Some(id) => format!(
                            "loop `{}` continues on a fixed condition (`{id}`), so the decision would be ignored",
                            l.loop_id
                        ),
                        None => format!(
                            "loop `{}` decides over the context (its `loop` condition, count or items), so the decision would be ignored",
                            l.loop_id
                        ),
                    }),
                };
                if let Some(problem) = problem {
                    errors.push(CompileError::new(
                        Code::LoopDecisionStep,
                        pointer,
                        format!("step `{}` declares `{LOOP_CONTROL}` but {problem}.", step.step_id),
                        "Make it the last step of a loop whose `while` names a `loop_control` condition, or remove its `contractRef`.",
                    ));
                }
            }
            Item::Step(_) => {}
            Item::Loop(l) => {
                let kind = kind_of(l);
                if matches!(kind, Some(ConditionKind::LoopControl { .. }))
                    && !matches!(l.body.last(), Some(Item::Step(s)) if s.contract_ref == Some(LOOP_CONTROL))
                {
                    errors.push(CompileError::new(
                        Code::LoopDecisionStep,
                        child(&l.pointer, "body"),
                        format!(
                            "loop `{}` continues on the `loop_control` condition `{}`, but its body does not end with a decision step.",
                            l.loop_id,
                            l.condition_id.as_ref().map_or("", |c| c.as_str())
                        ),
                        format!(
                            "Add a last body step with `\"output\": {{\"contractRef\": \"{LOOP_CONTROL}\"}}` that asks for the `wr.loop_control` decision (loopId `{}`).",
                            l.loop_id
                        ),
                    ));
                }
                check_list(&l.body, Some((l, kind)), kind_of, errors);
            }
        }
    }
}

/// Conditions that no loop references (a warning, not an error).
pub(crate) fn unused_conditions(
    items: &[Item],
    conditions: &[SourceCondition],
) -> Vec<CompiledWarning> {
    let mut used = BTreeSet::new();
    for_each_loop(items, &mut |l| {
        used.extend(l.condition_id.clone());
    });
    conditions
        .iter()
        .filter(|c| !used.contains(&c.id))
        .map(|c| CompiledWarning {
            code: CompiledWarningCode::UnusedCondition,
            message: format!("condition `{}` is declared but no loop uses it.", c.id),
            pointer: Some(c.pointer.clone()),
        })
        .collect()
}

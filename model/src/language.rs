//! The model's reading of the workflow language (decision D139): what a condition sees, when a
//! context-driven loop runs another iteration, which values a pending step freezes, and whether
//! an output passes a step's `validationCriteria`.
//!
//! Written from the decision and the language's published rules, independently of the engine:
//! - a condition reads the run's context (the call's merged context) overlaid with the loop
//!   variables of every enclosing loop, outermost first (the iteration 1-based, the index
//!   0-based, the item of a `for_each` loop at the iteration's index);
//! - a pending step freezes every loop variable bound around it and the values of its
//!   `contextReads`;
//! - a context-driven loop (`context_while`, `context_until`, `count`, `count_var`, `for_each`)
//!   runs iteration `i` while `i < maxIterations` and its rule holds for `i`: a condition over the
//!   scope at `i`, `i < count`, `i <` the number in the context, `i <` the array's length. The
//!   rule is checked again before every body item of a running iteration (as the language's
//!   loop kernel does), so a call whose context makes a `while` false leaves the loop at once;
//! - reaching `maxIterations` ends such a loop quietly: its rule never asked past the limit;
//! - a pending step needs the user's confirmation when it asks for one (`requireConfirmation`
//!   in any of its forms) and its confirmation condition, if any, holds over the values the
//!   step froze (decision D144).

use serde_json::{Map, Value};
use workrail_spec::compiled::{CompiledLoop, CompiledStep, LoopWhile, ValidationCriterion};
use workrail_spec::snapshot::{Bindings, LoopFrame};

/// Why a loop cannot be judged: its context value is absent or of the wrong type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingLoopContext {
    pub key: String,
    /// `"a number"` or `"an array"`.
    pub wanted: &'static str,
    /// The key holds a value of the wrong type (else it is absent or `null`).
    pub wrong_type: bool,
}

/// The loop variables bound inside `frames` (outermost first; an inner loop's shadow an outer's).
pub fn loop_overlay(
    context: &Map<String, Value>,
    frames: &[(&CompiledLoop, &LoopFrame)],
) -> Map<String, Value> {
    let mut overlay = Map::new();
    for (def, frame) in frames {
        bind_loop_vars(&mut overlay, context, def, frame.iteration);
    }
    overlay
}

/// The scope a condition sees inside `frames` (outermost first): `context` overlaid with each
/// loop's variables.
pub fn scope(
    context: &Map<String, Value>,
    frames: &[(&CompiledLoop, &LoopFrame)],
) -> Map<String, Value> {
    let mut scope = context.clone();
    scope.extend(loop_overlay(context, frames));
    scope
}

/// Binds one loop's variables for `iteration` into `overlay` (the item is read from the
/// variables bound so far, else from `context`).
pub fn bind_loop_vars(
    overlay: &mut Map<String, Value>,
    context: &Map<String, Value>,
    def: &CompiledLoop,
    iteration: u32,
) {
    if let Some(name) = &def.vars.iteration_var {
        overlay.insert(name.clone(), Value::from(iteration + 1));
    }
    if let LoopWhile::ForEach { items } = &def.while_
        && let Some(item) = overlay
            .get(items)
            .or_else(|| context.get(items))
            .and_then(Value::as_array)
            .and_then(|list| list.get(iteration as usize))
            .cloned()
    {
        if let Some(name) = &def.vars.item_var {
            overlay.insert(name.clone(), item);
        }
        if let Some(name) = &def.vars.index_var {
            overlay.insert(name.clone(), Value::from(iteration));
        }
    }
}

/// Whether a context-driven loop runs `iteration` (`None` for a `condition_ref` loop, which the
/// interpreter judges by its declared condition). `outer` is the scope of the enclosing loops.
pub fn runs_iteration(
    def: &CompiledLoop,
    iteration: u32,
    context: &Map<String, Value>,
    outer: &Map<String, Value>,
) -> Option<Result<bool, MissingLoopContext>> {
    if iteration >= def.max_iterations && !matches!(def.while_, LoopWhile::ConditionRef { .. }) {
        return Some(Ok(false));
    }
    let here = || {
        let mut s = outer.clone();
        bind_loop_vars(&mut s, context, def, iteration);
        s
    };
    Some(Ok(match &def.while_ {
        LoopWhile::ConditionRef { .. } => return None,
        LoopWhile::ContextWhile { condition } => condition.evaluate(&here()),
        LoopWhile::ContextUntil { condition } => !condition.evaluate(&here()),
        LoopWhile::Count { count } => iteration < *count,
        LoopWhile::CountVar { var } => match context.get(var) {
            Some(Value::Number(n)) => (iteration as f64) < n.as_f64().unwrap_or(0.0),
            other => {
                return Some(Err(MissingLoopContext {
                    key: var.clone(),
                    wanted: "a number",
                    wrong_type: other.is_some_and(|v| !v.is_null()),
                }));
            }
        },
        LoopWhile::ForEach { items } => match context.get(items) {
            Some(Value::Array(list)) => (iteration as usize) < list.len(),
            other => {
                return Some(Err(MissingLoopContext {
                    key: items.clone(),
                    wanted: "an array",
                    wrong_type: other.is_some_and(|v| !v.is_null()),
                }));
            }
        },
    }))
}

/// The values `step` freezes when it becomes pending: every loop variable bound around it, and
/// each of its `contextReads` the scope holds.
pub fn bindings(
    step: &CompiledStep,
    scope: &Map<String, Value>,
    overlay: &Map<String, Value>,
) -> Bindings {
    Bindings(
        step.language
            .context_reads
            .iter()
            .chain(overlay.keys())
            .filter_map(|k| scope.get(k).map(|v| (k.clone(), v.clone())))
            .collect(),
    )
}

/// Whether the pending `step`, with the values it froze, asks the agent to get the user's
/// confirmation before going on.
pub fn needs_confirmation(step: &CompiledStep, frozen: &Bindings) -> bool {
    step.require_confirmation
        && step
            .language
            .confirm_when
            .as_ref()
            .is_none_or(|condition| condition.evaluate(&frozen.0))
}

/// The failed rules of `criterion` against `notes` (empty when it passes), each as the rule's
/// message or a generated one. `scope` decides the rules' `when` conditions.
pub fn failed_rules(
    criterion: &ValidationCriterion,
    notes: &str,
    scope: &Map<String, Value>,
) -> Vec<String> {
    let applies = |when: &Option<workrail_spec::condition::Condition>| {
        when.as_ref().is_none_or(|c| c.evaluate(scope))
    };
    let said = |message: &Option<String>, fallback: String| message.clone().unwrap_or(fallback);
    match criterion {
        ValidationCriterion::Contains {
            value,
            message,
            when,
        } => {
            if !applies(when) || notes.contains(value.as_str()) {
                vec![]
            } else {
                vec![said(message, format!("the notes must contain {value:?}"))]
            }
        }
        ValidationCriterion::Regex {
            pattern,
            flags,
            message,
            when,
        } => {
            if !applies(when) || regex_matches(pattern, flags.as_deref(), notes) {
                vec![]
            } else {
                vec![said(
                    message,
                    format!("the notes must match the pattern {pattern}"),
                )]
            }
        }
        ValidationCriterion::Length {
            min,
            max,
            message,
            when,
        } => {
            if !applies(when) {
                return vec![];
            }
            // The language measures text in UTF-16 code units.
            let len = notes.encode_utf16().count() as u64;
            let mut out = Vec::new();
            if let Some(min) = min
                && len < *min
            {
                out.push(said(
                    message,
                    format!("the notes are shorter than {min} characters"),
                ));
            }
            if let Some(max) = max
                && len > *max
            {
                out.push(said(
                    message,
                    format!("the notes are longer than {max} characters"),
                ));
            }
            out
        }
        ValidationCriterion::Schema {
            schema,
            message,
            when,
        } => {
            if !applies(when) || schema_holds(schema, notes) {
                vec![]
            } else {
                vec![said(
                    message,
                    "the notes must be JSON matching the rule's schema".to_owned(),
                )]
            }
        }
        ValidationCriterion::All { all } => all
            .iter()
            .flat_map(|c| failed_rules(c, notes, scope))
            .collect(),
        ValidationCriterion::Any { any } => {
            let each: Vec<Vec<String>> =
                any.iter().map(|c| failed_rules(c, notes, scope)).collect();
            if any.is_empty() || each.iter().any(Vec::is_empty) {
                vec![]
            } else {
                // A failed `or` is one failed rule, naming what each branch missed.
                let missed: Vec<String> = each.into_iter().flatten().collect();
                vec![format!("none of these held: {}", missed.join(" | "))]
            }
        }
        ValidationCriterion::Not { criterion } => {
            if failed_rules(criterion, notes, scope).is_empty() {
                vec!["the notes must not satisfy the negated rule".to_owned()]
            } else {
                vec![]
            }
        }
    }
}

/// Whether `notes`, read as JSON, satisfy `schema` (draft 2020-12). Notes that are a JSON string
/// holding an object or an array are read once more when the schema asks for structure: an
/// object or array `type`, `properties` or `required`, here or in a branch of `oneOf`, `anyOf`
/// or `allOf` (decision D143).
fn schema_holds(schema: &Value, notes: &str) -> bool {
    let Ok(mut value) = serde_json::from_str::<Value>(notes) else {
        return false;
    };
    if let Value::String(inner) = &value
        && asks_for_structure(schema)
        && let Ok(decoded @ (Value::Object(_) | Value::Array(_))) =
            serde_json::from_str::<Value>(inner.trim())
    {
        value = decoded;
    }
    jsonschema::draft202012::new(schema).is_ok_and(|validator| validator.is_valid(&value))
}

fn asks_for_structure(schema: &Value) -> bool {
    let Some(map) = schema.as_object() else {
        return false;
    };
    let structured = |t: &Value| t.as_str().is_some_and(|t| t == "object" || t == "array");
    let typed = match map.get("type") {
        Some(Value::Array(types)) => types.iter().any(structured),
        Some(t) => structured(t),
        None => false,
    };
    typed
        || map.get("properties").is_some_and(Value::is_object)
        || map
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|r| !r.is_empty())
        || ["oneOf", "anyOf", "allOf"].iter().any(|k| {
            map.get(*k)
                .and_then(Value::as_array)
                .is_some_and(|branches| branches.iter().any(asks_for_structure))
        })
}

fn regex_matches(pattern: &str, flags: Option<&str>, text: &str) -> bool {
    let flags = flags.unwrap_or("");
    regex::RegexBuilder::new(pattern)
        .case_insensitive(flags.contains('i'))
        .multi_line(flags.contains('m'))
        .dot_matches_new_line(flags.contains('s'))
        .build()
        .is_ok_and(|re| re.is_match(text))
}

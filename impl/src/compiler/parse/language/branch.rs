//! The first-match `branch` of the Gosuto step spec (decision D144), lowered at parse time into
//! the run conditions of its steps.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::compiler::error::{CompileError, CompileErrorCode as Code, index};
use crate::compiler::parse::Parser;
use crate::compiler::parse::fields::{Fields, array};
use workrail_spec::compiled::Condition;

use super::condition::condition;
use crate::compiler::language::and;
use crate::compiler::parse::{delimiter_safe, step};
use crate::compiler::source::SourceStep;

/// Whether a step is a `branch` (first-match `when` cases plus `default`).
pub(crate) fn is_branch(value: &Value) -> bool {
    value.get("type").and_then(Value::as_str) == Some("branch")
}

/// A `branch`: `{type: branch, id, branches: [{when, steps}], default?}`, lowered into the run
/// conditions of its steps (case i runs when its `when` holds and no earlier one does; `default`
/// runs when none does) and spliced into the enclosing list in order.
pub(crate) fn branch(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Vec<SourceStep> {
    let Some(f) = Fields::new(
        p,
        value,
        pointer,
        "a branch step",
        &["type", "id", "branches", "default"],
    ) else {
        return Vec::new();
    };
    let id = f
        .req(p, "id", "Add the branch's `id` matching [a-z0-9_-]+.")
        .and_then(|v| delimiter_safe(p, v, &f.at("id"), "branch `id`"));
    let mut cases: Vec<(Option<Condition>, Vec<SourceStep>, String)> = Vec::new();
    let mut ok = true;
    if let Some(items) = f
        .req(
            p,
            "branches",
            "Add `branches: [{\"when\": {...}, \"steps\": [...]}]`.",
        )
        .and_then(|v| array(p, v, &f.at("branches"), "`branches`"))
    {
        if items.is_empty() {
            p.error(CompileError::new(
                Code::InvalidValue,
                f.at("branches"),
                "`branches` is empty.",
                "Add at least one `{when, steps}` case.",
            ));
            ok = false;
        }
        for (i, item) in items.iter().enumerate() {
            let at = index(&f.at("branches"), i);
            let Some(c) = Fields::new(p, item, &at, "a branch case", &["when", "steps"]) else {
                ok = false;
                continue;
            };
            let when = c
                .req(p, "when", "Add the case's `when` condition.")
                .and_then(|v| condition(p, v, &c.at("when")));
            let steps = c
                .req(p, "steps", "Add the case's `steps`.")
                .map(|v| step::steps(p, v, &c.at("steps"), "a branch case's `steps`"));
            c.finish(p);
            match (when, steps) {
                (Some(when), Some(steps)) => cases.push((when, steps, i.to_string())),
                _ => ok = false,
            }
        }
    } else {
        ok = false;
    }
    let default = f
        .opt("default")
        .map(|v| step::steps(p, v, &f.at("default"), "a branch's `default`"));
    f.finish(p);
    let (Some(id), true) = (id, ok) else {
        return Vec::new();
    };
    let whens: Vec<Condition> = cases
        .iter()
        .map(|(w, _, _)| w.clone().unwrap_or(Condition::And { all: Vec::new() }))
        .collect();
    let none_of = |n: usize| -> Option<Condition> {
        (n > 0).then(|| Condition::Not {
            condition: Box::new(Condition::Or {
                any: whens[..n].to_vec(),
            }),
        })
    };
    let mut out = Vec::new();
    let count = cases.len();
    for (i, (when, steps, case)) in cases.into_iter().enumerate() {
        let guard = and([when, none_of(i)]);
        for step in steps {
            out.extend(guarded(p, step, guard.clone(), &id, &case));
        }
    }
    for step in default.unwrap_or_default() {
        out.extend(guarded(p, step, none_of(count), &id, "default"));
    }
    out
}

/// `step` with `guard` added to its run condition and its branch case recorded.
fn guarded(
    p: &mut Parser<'_>,
    step: SourceStep,
    guard: Option<Condition>,
    branch: &str,
    case: &str,
) -> Option<SourceStep> {
    let mark = |kept: &mut BTreeMap<String, Value>| {
        let entry = serde_json::json!({"branch": branch, "case": case});
        match kept.get_mut("branch") {
            Some(Value::Array(path)) => path.insert(0, entry),
            _ => {
                kept.insert("branch".to_owned(), Value::Array(vec![entry]));
            }
        }
    };
    match step {
        SourceStep::Normal(mut n) => {
            n.language.run_condition = and([guard, n.language.run_condition.take()]);
            mark(&mut n.language.kept);
            Some(SourceStep::Normal(n))
        }
        SourceStep::Loop(mut l) => {
            l.language.run_condition = and([guard, l.language.run_condition.take()]);
            mark(&mut l.language.kept);
            Some(SourceStep::Loop(l))
        }
        // A parallel step or an expanded routine: every step it stands for is in the case.
        SourceStep::Group(steps) => Some(SourceStep::Group(
            steps
                .into_iter()
                .filter_map(|s| guarded(p, s, guard.clone(), branch, case))
                .collect(),
        )),
        SourceStep::TemplateCall(call) => {
            p.error(CompileError::new(
                Code::InvalidValue,
                call.pointer(),
                "a `template_call` cannot sit in a `branch`: its injected steps carry no run condition.",
                "Move the call out of the branch, or write the step it stands for inside the case.",
            ));
            None
        }
    }
}

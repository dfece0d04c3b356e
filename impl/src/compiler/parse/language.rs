//! The control flow of the workflow language (WorkRail 3.x's spelling, decision D139, and the
//! first-match `branch`): run conditions, confirmation rules, validation criteria, assessments
//! and their consequences, conditional prompt fragments, attempt budgets, `notesOptional`, loops
//! of the form `{type: loop, id, loop: {...}, body}` and `branch` steps.
//!
//! This file reads a step's language fields and finishes the workflow once every step is parsed;
//! `condition` lowers conditions, `criteria` validation criteria, `assessment` assessments and
//! their consequences, `loops` the language's loops, `branch` the first-match branch. Every
//! problem is a compile error with its pointer; a field or operator the language ignores where it
//! is written is a `language_ignored` warning.

use std::collections::BTreeMap;

use serde_json::Value;
use workrail_spec::compiled::{
    CompiledWarning, CompiledWarningCode, Condition, ConfirmationKind, PromptFragment,
};

use super::fields::{Fields, array, one_of, type_name};
use super::{Parser, delimiter_safe};
use crate::compiler::error::{AutoFix, CompileError, CompileErrorCode as Code, child, index};
use crate::compiler::language::{StepLang, WorkflowLanguage};
use crate::compiler::source::{SourceCondition, SourceStep};

mod assessment;
mod branch;
mod condition;
mod criteria;
mod loops;

pub(super) use self::branch::{branch, is_branch};
pub(super) use self::condition::condition;
pub(super) use self::loops::{is_language_loop, loop_step};

/// The largest `maxAttempts` a step or workflow may declare.
pub(crate) const MAX_ATTEMPTS_LIMIT: u32 = 100;

/// Records a `language_ignored` warning: something written that the language gives no effect.
pub(crate) fn warn(p: &mut Parser<'_>, pointer: &str, message: String) {
    p.warnings.push(CompiledWarning {
        code: CompiledWarningCode::LanguageIgnored,
        message,
        pointer: Some(pointer.to_owned()),
    });
}

/// `requireConfirmation`: a boolean, a condition, or `{kind, condition?}`.
pub(crate) struct Confirmation {
    pub required: bool,
    pub when: Option<Condition>,
    pub kind: Option<ConfirmationKind>,
}

pub(super) fn confirmation(
    p: &mut Parser<'_>,
    value: Option<&Value>,
    pointer: &str,
) -> Option<Confirmation> {
    let none = Confirmation {
        required: false,
        when: None,
        kind: None,
    };
    let Some(value) = value else {
        return Some(none);
    };
    match value {
        Value::Bool(b) => Some(Confirmation {
            required: *b,
            ..none
        }),
        Value::Object(map) if map.contains_key("kind") => {
            let f = Fields::new(
                p,
                value,
                pointer,
                "a `requireConfirmation` rule",
                &["kind", "condition"],
            )?;
            let kind = f
                .req(p, "kind", "Add `kind`: coordinator_eval or human_approval.")
                .and_then(|v| {
                    one_of(
                        p,
                        v,
                        &f.at("kind"),
                        "`requireConfirmation.kind`",
                        &["coordinator_eval", "human_approval"],
                    )
                })
                .and_then(ConfirmationKind::parse);
            let when = f
                .opt("condition")
                .map(|v| condition(p, v, &f.at("condition")));
            f.finish(p);
            Some(Confirmation {
                required: true,
                when: match when {
                    Some(w) => w?,
                    None => None,
                },
                kind: Some(kind?),
            })
        }
        Value::Object(_) => condition(p, value, pointer).map(|when| Confirmation {
            required: true,
            when,
            kind: None,
        }),
        other => {
            p.error(CompileError::new(
                Code::WrongType,
                pointer,
                format!(
                    "`requireConfirmation` must be true or false, a condition, or `{{kind, condition?}}`, found {}.",
                    type_name(other)
                ),
                "Write `true`, `false`, a condition such as `{\"var\": \"risk\", \"equals\": \"high\"}`, or `{\"kind\": \"human_approval\"}`.",
            ));
            None
        }
    }
}

/// A positive attempt budget (`maxAttempts`).
pub(super) fn max_attempts(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<u32> {
    match value.as_u64() {
        Some(n) if (1..=u64::from(MAX_ATTEMPTS_LIMIT)).contains(&n) => u32::try_from(n).ok(),
        _ => {
            let mut error = CompileError::new(
                Code::InvalidValue,
                pointer,
                format!(
                    "`maxAttempts` must be a whole number from 1 to {MAX_ATTEMPTS_LIMIT}, found {value}."
                ),
                "Write how many blocked attempts the agent may make before the user must step in, e.g. 3.",
            );
            if let Some(n) = value.as_u64() {
                let fixed = n.clamp(1, u64::from(MAX_ATTEMPTS_LIMIT));
                error = error.with_fix(AutoFix::Replace {
                    path: pointer.to_owned(),
                    value: Value::from(fixed),
                });
            }
            p.error(error);
            None
        }
    }
}

pub(crate) fn boolean(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    what: &str,
) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        other => {
            p.error(CompileError::new(
                Code::WrongType,
                pointer,
                format!("{what} must be true or false, found {}.", type_name(other)),
                "Write `true` or `false`.",
            ));
            None
        }
    }
}

/// The language fields of a normal step (`requireConfirmation` is read by the caller).
pub(super) fn step_fields(
    p: &mut Parser<'_>,
    f: &Fields<'_>,
    confirmation: Option<&Confirmation>,
) -> Option<StepLang> {
    let run_condition = f
        .opt("runCondition")
        .map(|v| condition(p, v, &f.at("runCondition")));
    let validation = f
        .opt("validationCriteria")
        .map(|v| criteria::validation_criteria(p, v, &f.at("validationCriteria")));
    let assessment_refs = f
        .opt("assessmentRefs")
        .map(|v| assessment::assessment_refs(p, v, &f.at("assessmentRefs")));
    let consequences = f
        .opt("assessmentConsequences")
        .map(|v| assessment::consequences(p, v, &f.at("assessmentConsequences")));
    let fragments = f
        .opt("promptFragments")
        .map(|v| fragments(p, v, &f.at("promptFragments")));
    let notes_optional = f
        .opt("notesOptional")
        .map(|v| boolean(p, v, &f.at("notesOptional"), "`notesOptional`"));
    let max_attempts = f
        .opt("maxAttempts")
        .map(|v| max_attempts(p, v, &f.at("maxAttempts")));
    Some(StepLang {
        run_condition: run_condition.unwrap_or(Some(None))?,
        confirm_when: confirmation.and_then(|c| c.when.clone()),
        confirmation_kind: confirmation.and_then(|c| c.kind),
        validation: match validation {
            Some(v) => Some(v?),
            None => None,
        },
        assessment_refs: assessment_refs.unwrap_or(Some(Vec::new()))?,
        assessment_consequences: consequences.unwrap_or(Some(Vec::new()))?,
        prompt_fragments: fragments.unwrap_or(Some(Vec::new()))?,
        max_attempts: match max_attempts {
            Some(m) => Some(m?),
            None => None,
        },
        notes_optional: notes_optional.unwrap_or(Some(false))?,
        kept: BTreeMap::new(),
        lanes: None,
        output_contract: f.opt("outputContract").is_some(),
    })
}

fn fragments(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<Vec<PromptFragment>> {
    let items = array(p, value, pointer, "`promptFragments`")?;
    let mut out: Vec<PromptFragment> = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let at = index(pointer, i);
        let Some(f) = Fields::new(p, item, &at, "a prompt fragment", &["id", "when", "text"])
        else {
            ok = false;
            continue;
        };
        let id = f
            .req(p, "id", "Add a fragment `id` matching [a-z][a-z0-9_-]*.")
            .and_then(|v| delimiter_safe(p, v, &f.at("id"), "fragment id"));
        let when = f.opt("when").map(|v| condition(p, v, &f.at("when")));
        let text = f
            .req(p, "text", "Add the fragment's `text`.")
            .and_then(|v| super::prompt::free_text(p, v, &f.at("text"), "a fragment's `text`"));
        f.finish(p);
        match (id, when.unwrap_or(Some(None)), text) {
            (Some(id), Some(when), Some(text)) => {
                if out.iter().any(|o| o.fragment_id == id) {
                    p.error(CompileError::new(
                        Code::DuplicateId,
                        child(&at, "id"),
                        format!("fragment id `{id}` is used twice in this step."),
                        "Give each fragment of a step its own id.",
                    ));
                    ok = false;
                } else {
                    out.push(PromptFragment {
                        fragment_id: id,
                        when,
                        text,
                    });
                }
            }
            _ => ok = false,
        }
    }
    ok.then_some(out)
}

/// The workflow-level language fields (`assessments`, `maxAttempts`).
pub(super) fn workflow_fields(p: &mut Parser<'_>, f: &Fields<'_>) -> WorkflowLanguage {
    let assessments = f
        .opt("assessments")
        .and_then(|v| assessment::assessments(p, v, &f.at("assessments")))
        .unwrap_or_default();
    let max_attempts = f
        .opt("maxAttempts")
        .and_then(|v| max_attempts(p, v, &f.at("maxAttempts")));
    WorkflowLanguage {
        assessments,
        max_attempts,
        warnings: Vec::new(),
    }
}

/// What parsing leaves to the whole workflow: `body` references resolved (the referenced
/// top-level step moves into the loop), `while`/`until` loops resolved into loop-control loops
/// (a synthesized `loop_control` condition named after the loop) or context loops, and every
/// step's assessment references checked against the declared assessments.
///
/// `raw_steps` is the source `steps` array: a `body` naming a step that failed to parse is not
/// reported again.
pub(super) fn finish(
    p: &mut Parser<'_>,
    steps: &mut Vec<SourceStep>,
    raw_steps: Option<&Value>,
    conditions: &mut Vec<SourceCondition>,
    workflow: &WorkflowLanguage,
) {
    loops::resolve_body_refs(p, steps, raw_steps);
    loops::resolve_loops(p, steps, conditions);
    loops::free_standing_decisions(p, steps);
    assessment::check_assessments(p, steps, &workflow.assessments);
}

//! The control flow of the workflow language between parsing and assembly (decision D139): the
//! parsed form of a step's and a loop's language fields, and their lowering into the compiled
//! `StepLanguage` and `CompiledLoop` fields.
//!
//! Parsing (`parse/language.rs`) already lowers every condition into the one closed operator set
//! and every rule into `ValidationCriterion`; what is left here needs the rendered prompt (the
//! context keys it reads) or the whole workflow (the default attempt budget).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use workrail_spec::compiled::{
    AssessmentConsequence, AssessmentDefinition, CompiledWarning, Condition, ConfirmationKind,
    LoopVars, LoopWhile, PromptFragment, StepLanguage, ValidationCriterion,
};
use workrail_spec::ids::StepId;

use crate::engine::render::{insert_before_functions, marker_roots};
use crate::engine::validation::{assessment_example, describe};

/// The most criteria a step's `## Notes checks` section lists.
const MAX_LISTED_CHECKS: usize = 8;

/// The workflow-level language fields.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkflowLanguage {
    /// Declared assessments, sorted by id.
    pub assessments: Vec<AssessmentDefinition>,
    /// `maxAttempts`: the attempt budget of every step that declares none.
    pub max_attempts: Option<u32>,
    /// Warnings found while parsing the language fields (ignored operators and fields).
    pub warnings: Vec<CompiledWarning>,
}

/// The language fields of one normal step, as parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepLang {
    pub run_condition: Option<Condition>,
    pub confirm_when: Option<Condition>,
    pub confirmation_kind: Option<ConfirmationKind>,
    pub validation: Option<ValidationCriterion>,
    pub assessment_refs: Vec<String>,
    pub assessment_consequences: Vec<AssessmentConsequence>,
    pub prompt_fragments: Vec<PromptFragment>,
    /// The step's own `maxAttempts` (the workflow's applies when absent).
    pub max_attempts: Option<u32>,
    pub notes_optional: bool,
    pub kept: BTreeMap<String, Value>,
    /// A parallel spawn step's lanes (decision D168).
    pub lanes: Option<Box<workrail_spec::compiled::ParallelLanes>>,
    /// The contract was written as the language's `outputContract` (errors point there, and a
    /// `wr.contracts.loop_control` contract outside any loop decides nothing, as in the
    /// language, instead of being an error).
    pub output_contract: bool,
}

/// How a `while`/`until` loop of the language decides, before the body is known (a loop whose
/// body has the `wr.contracts.loop_control` decision step is a loop-control loop).
#[derive(Debug, Clone, PartialEq)]
pub struct PendingWhile {
    /// `until` (the condition is inverted) rather than `while`.
    pub until: bool,
    /// `loop.condition` (`None` inside: `{}`, always).
    pub condition: Option<Option<Condition>>,
    /// `loop.conditionSource`.
    pub source: Option<ConditionSource>,
    /// Pointer of the loop's `loop` object, for errors.
    pub pointer: String,
}

/// `loop.conditionSource`.
#[derive(Debug, Clone, PartialEq)]
pub enum ConditionSource {
    /// `{kind: artifact_contract, contractRef: wr.contracts.loop_control, loopId?}`.
    ArtifactContract,
    /// `{kind: context_variable, condition}`.
    ContextVariable(Option<Condition>),
}

/// The language fields of a loop written in the language's form (`{type: loop, id, loop, body}`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LoopLang {
    /// How the loop decides, once known (`None` for a loop naming a declared condition, and
    /// while `pending` is being resolved).
    pub while_: Option<LoopWhile>,
    /// A `while`/`until` loop whose kind depends on its body (resolved after parsing).
    pub pending: Option<Box<PendingWhile>>,
    /// `body` written as the id of a top-level step, with the pointer of `body`.
    pub body_ref: Option<(StepId, String)>,
    pub run_condition: Option<Condition>,
    pub vars: LoopVars,
    pub kept: BTreeMap<String, Value>,
}

/// `Condition::And` of the conditions that are set (`None` when none is).
pub fn and(parts: impl IntoIterator<Item = Option<Condition>>) -> Option<Condition> {
    let mut all: Vec<Condition> = Vec::new();
    for part in parts.into_iter().flatten() {
        match part {
            Condition::And { all: inner } => all.extend(inner),
            other => all.push(other),
        }
    }
    match all.len() {
        0 => None,
        1 => all.pop(),
        _ => Some(Condition::And { all }),
    }
}

/// The compiled `language` of a step: the parsed fields plus the context keys its rendered
/// prompt reads (`{{key}}` markers of the prompt, the title and the fragments, and the keys the
/// fragment and confirmation conditions read), and the effective attempt budget.
pub(crate) fn step_language(
    lang: &StepLang,
    title: &str,
    prompt: &str,
    workflow: &WorkflowLanguage,
) -> StepLanguage {
    let mut reads: BTreeSet<String> = BTreeSet::new();
    reads.extend(marker_roots(prompt).map(str::to_owned));
    reads.extend(marker_roots(title).map(str::to_owned));
    for fragment in &lang.prompt_fragments {
        reads.extend(marker_roots(&fragment.text).map(str::to_owned));
        if let Some(when) = &fragment.when {
            reads.extend(when.reads().into_iter().map(str::to_owned));
        }
    }
    if let Some(when) = &lang.confirm_when {
        reads.extend(when.reads().into_iter().map(str::to_owned));
    }
    StepLanguage {
        run_condition: lang.run_condition.clone(),
        validation: lang.validation.clone(),
        confirm_when: lang.confirm_when.clone(),
        confirmation_kind: lang.confirmation_kind,
        assessment_refs: lang.assessment_refs.clone(),
        assessment_consequences: lang.assessment_consequences.clone(),
        prompt_fragments: lang.prompt_fragments.clone(),
        max_attempts: lang.max_attempts.or(workflow.max_attempts),
        notes_optional: lang.notes_optional,
        context_reads: reads.into_iter().collect(),
        kept: lang.kept.clone(),
        lanes: lang.lanes.clone(),
        language_loop_control: false,
    }
}

/// The compiled prompt with what the language checks at the acknowledgement spelled out
/// (decision D143): `## Assessment` (each referenced assessment, its dimensions and levels, and
/// an example artifact) and `## Notes checks` (the validation criteria), before the step's
/// `## Functions` section, which stays last.
pub(crate) fn with_requirements(
    prompt: String,
    lang: &StepLang,
    has_functions: bool,
    workflow: &WorkflowLanguage,
) -> String {
    let mut sections = Vec::new();
    let assessed: Vec<&AssessmentDefinition> = lang
        .assessment_refs
        .iter()
        .filter_map(|r| workflow.assessments.iter().find(|a| &a.assessment_id == r))
        .collect();
    if !assessed.is_empty() {
        let mut lines = vec![
            "Rate your work: send one `wr.assessment` artifact per assessment below in output.artifacts, each dimension at one of its levels.".to_owned(),
        ];
        for a in &assessed {
            lines.push(format!("- `{}`: {}", a.assessment_id, a.purpose));
            for d in &a.dimensions {
                lines.push(format!(
                    "  - `{}` ({}){}: {}",
                    d.dimension_id,
                    d.levels.join(" | "),
                    if d.required { "" } else { ", optional" },
                    d.purpose
                ));
            }
            lines.push(format!(
                "  - e.g. {}",
                workrail_spec::jcs::to_canonical_string(&assessment_example(a)).unwrap_or_default()
            ));
        }
        if !lang.assessment_consequences.is_empty() {
            lines.push(
                "Some ratings require a follow-up before this step completes; WorkRail says which when you acknowledge.".to_owned(),
            );
        }
        sections.push(format!("## Assessment\n{}", lines.join("\n")));
    }
    let governed = !lang.assessment_refs.is_empty();
    if let (Some(criterion), false) = (&lang.validation, governed) {
        let listed: Vec<String> = match criterion {
            ValidationCriterion::All { all } if !all.is_empty() => {
                all.iter().map(describe).collect()
            }
            other => vec![describe(other)],
        };
        let mut lines: Vec<String> = listed
            .iter()
            .take(MAX_LISTED_CHECKS)
            .map(|l| format!("- {l}"))
            .collect();
        if listed.len() > MAX_LISTED_CHECKS {
            lines.push(format!(
                "- and {} more check(s)",
                listed.len() - MAX_LISTED_CHECKS
            ));
        }
        sections.push(format!(
            "## Notes checks\nWorkRail checks output.notesMarkdown when you acknowledge this step (exact text, case-sensitive):\n{}",
            lines.join("\n")
        ));
    }
    if sections.is_empty() {
        return prompt;
    }
    insert_before_functions(&prompt, has_functions, &sections.join("\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn truthy(var: &str) -> Condition {
        Condition::Truthy { var: var.into() }
    }

    #[test]
    fn and_flattens_and_drops_absent_parts() {
        assert_eq!(and([None, None]), None);
        assert_eq!(and([None, Some(truthy("a"))]), Some(truthy("a")));
        let nested = and([Some(truthy("a")), Some(truthy("b"))]);
        assert_eq!(
            and([nested, Some(truthy("c"))]),
            Some(Condition::And {
                all: vec![truthy("a"), truthy("b"), truthy("c")]
            })
        );
    }
}

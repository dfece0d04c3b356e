//! Prompt content of the WorkRail 3.x spelling: what its fields add to a step, where the rendered
//! prompt shows it, and what is kept verbatim for `inspect_workflow`.
//!
//! Section order of a rendered prompt (the exact bytes are part of `workflowHash`; a section
//! appears only when non-empty, so workflows that use none of these fields render as before):
//!
//! 1. `## Role`
//! 2. first step only: `## Workflow rules` (`metaGuidance`), `## Before you start`
//!    (`preconditions`), `## Questions to settle first` (`clarificationPrompts`), `## References`
//!    (`references`)
//! 3. `## Guidance` (the step's `guidance`)
//! 4. the authored `prompt` text, then Goal, Constraints, Procedure, Output required, Verify
//! 5. `## Files` (`askForFiles`), `## Function calls` (`functionCalls`), `## Metrics`
//!    (`metricsProfile`)
//! 6. `## Functions` (referenced definitions)

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use workrail_spec::compiled::{CompiledWarning, PromptFragment, StepLanguage, StepProvenance};

use super::ir::{Item, StepIr, for_each_step_mut};
use super::source::{PromptPart, PromptValue};
use crate::builtins::contracts::LOOP_CONTROL;
use crate::builtins::features::{
    SUBAGENT_GUIDANCE_CONSTRAINTS, SUBAGENT_GUIDANCE_PROCEDURE, SUBAGENT_GUIDANCE_REF,
    SUBAGENT_GUIDANCE_VERIFY,
};

/// One `functionCalls` entry: a call with concrete arguments.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionCall {
    pub name: String,
    pub args: Map<String, Value>,
}

/// What a step's 3.x fields add to it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepExtras {
    /// `guidance`: shown before the prompt text.
    pub guidance: Vec<String>,
    /// `askForFiles: true`.
    pub ask_for_files: bool,
    pub function_calls: Vec<FunctionCall>,
    /// The workflow's own sections, set on the first step after expansion.
    pub workflow_sections: Vec<String>,
    /// The `metricsProfile` footer, set on the steps it applies to after expansion.
    pub metrics: Option<String>,
    /// Conditional text (parallel delegations with a `runCondition`).
    pub fragments: Vec<PromptFragment>,
    /// Fields kept verbatim for `inspect_workflow`.
    pub kept: BTreeMap<String, Value>,
    /// Set when the parser derived the step (a routine expansion, an audit, verification or
    /// synthesis step); `None` means authored.
    pub provenance: Option<StepProvenance>,
    /// A parallel spawn step's lanes (decision D168).
    pub lanes: Option<Box<workrail_spec::compiled::ParallelLanes>>,
}

impl StepExtras {
    /// The step's `language`: its fragments and kept fields.
    pub fn language(&self) -> StepLanguage {
        StepLanguage {
            prompt_fragments: self.fragments.clone(),
            kept: self.kept.clone(),
            lanes: self.lanes.clone(),
            ..Default::default()
        }
    }

    /// Sections shown before the authored prompt text.
    fn head(&self) -> Vec<String> {
        let mut out = self.workflow_sections.clone();
        if !self.guidance.is_empty() {
            out.push(section("Guidance", &bullets(&self.guidance)));
        }
        out
    }

    /// Sections shown after the prompt blocks, before `## Functions`.
    fn tail(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.ask_for_files {
            out.push(section(
                "Files",
                "Before you start, ask the user for the files this step needs (paths or contents) unless you already have them; name what you are missing and why.",
            ));
        }
        if !self.function_calls.is_empty() {
            let calls: Vec<String> = self
                .function_calls
                .iter()
                .map(|c| {
                    let args =
                        workrail_spec::jcs::to_canonical_string(&Value::Object(c.args.clone()))
                            .unwrap_or_default();
                    format!("{}() with {args}", c.name)
                })
                .collect();
            out.push(section(
                "Function calls",
                &format!(
                    "Apply these functions (defined under `## Functions`) with these arguments:\n{}",
                    bullets(&calls)
                ),
            ));
        }
        out.extend(self.metrics.clone());
        out
    }
}

/// The workflow-level 3.x content.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WorkflowExtras {
    pub meta_guidance: Vec<String>,
    pub preconditions: Vec<String>,
    pub clarification_prompts: Vec<String>,
    pub references: Vec<WorkflowReference>,
    pub metrics_profile: Option<MetricsProfile>,
    /// Fields kept verbatim (`version`, `about`, `examples`, ...), by name.
    pub kept: BTreeMap<String, Value>,
    /// Every warning the parser raised (v1-era fields, kept unknown fields, delegations).
    pub warnings: Vec<CompiledWarning>,
}

/// One `references` entry: a document the agent should know about (never inlined).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkflowReference {
    pub id: String,
    pub title: String,
    pub source: String,
    pub purpose: String,
    pub authoritative: bool,
    /// `package`: relative to where the workflow ships; otherwise the user's workspace.
    pub from_package: bool,
}

/// `metricsProfile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsProfile {
    Coding,
    Review,
    Research,
    Design,
    Ticket,
    None,
}

impl MetricsProfile {
    pub const ALL: &'static [(&'static str, Self)] = &[
        ("coding", Self::Coding),
        ("design", Self::Design),
        ("none", Self::None),
        ("research", Self::Research),
        ("review", Self::Review),
        ("ticket", Self::Ticket),
    ];

    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.iter().find(|(s, _)| *s == raw).map(|(_, p)| *p)
    }

    /// The `## Metrics` section of a step (`last`: the run's final working step), if any.
    fn footer(self, last: bool) -> Option<String> {
        const OUTCOME: &str = "set context `metrics_outcome` to exactly one of `success`, `partial`, `abandoned` or `error` (a classification, not a description)";
        let every = "After each commit, set context `metrics_commit_shas` to the full list of this run's commit SHAs so far: the value replaces the previous list, so always send all of them.";
        let body = match (self, last) {
            (Self::None, _)
            | (Self::Review | Self::Research | Self::Design | Self::Ticket, false) => {
                return None;
            }
            (Self::Coding, false) => every.to_owned(),
            (Self::Coding, true) => format!(
                "{every}\nThis is the final step: also {OUTCOME}, and set `metrics_pr_numbers` (PR numbers as integers, not URLs), `metrics_files_changed`, `metrics_lines_added` and `metrics_lines_removed` (integers)."
            ),
            (Self::Review, true) => format!(
                "This is the final step: {OUTCOME}, and set `metrics_pr_numbers` to the reviewed PR numbers (integers, not URLs)."
            ),
            (Self::Research | Self::Design | Self::Ticket, true) => {
                format!("This is the final step: {OUTCOME}.")
            }
        };
        Some(section("Metrics", &body))
    }
}

impl WorkflowExtras {
    /// The sections the workflow's first step shows.
    fn first_step_sections(&self) -> Vec<String> {
        let mut out = Vec::new();
        if !self.meta_guidance.is_empty() {
            out.push(section("Workflow rules", &bullets(&self.meta_guidance)));
        }
        if !self.preconditions.is_empty() {
            out.push(section(
                "Before you start",
                &format!(
                    "Check that these hold; if one does not, say so to the user before going on:\n{}",
                    bullets(&self.preconditions)
                ),
            ));
        }
        if !self.clarification_prompts.is_empty() {
            out.push(section(
                "Questions to settle first",
                &format!(
                    "Get answers to these (from the user or what you already know) before the work depends on them:\n{}",
                    bullets(&self.clarification_prompts)
                ),
            ));
        }
        if !self.references.is_empty() {
            let lines: Vec<String> = self
                .references
                .iter()
                .map(|r| {
                    let base = if r.from_package {
                        "relative to the workflow package"
                    } else {
                        "in the workspace"
                    };
                    let rule = if r.authoritative {
                        "authoritative: follow it"
                    } else {
                        "background"
                    };
                    format!(
                        "{} (`{}`, {base}; {rule}): {}",
                        r.title, r.source, r.purpose
                    )
                })
                .collect();
            out.push(section(
                "References",
                &format!(
                    "Read these documents when the step needs them (they are not included here):\n{}",
                    bullets(&lines)
                ),
            ));
        }
        out
    }
}

fn section(heading: &str, body: &str) -> String {
    format!("## {heading}\n{body}")
}

/// `- item` lines, continuation lines indented under the item text.
fn bullets(items: &[String]) -> String {
    items
        .iter()
        .map(|i| i.lines().collect::<Vec<_>>().join("\n  "))
        .map(|i| format!("- {i}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Composes a step's prompt from its role, the rendered prompt body (authored text and blocks)
/// and its extras, in the section order of this module's docs.
pub(crate) fn compose(role: Option<&str>, body: String, extras: &StepExtras) -> String {
    let mut parts: Vec<String> = Vec::new();
    if let Some(role) = role {
        parts.push(format!("## Role\n{role}"));
    }
    parts.extend(extras.head());
    parts.push(body);
    parts.extend(extras.tail());
    parts.retain(|p| !p.is_empty());
    parts.join("\n\n")
}

/// Places the workflow-level sections on the first step and the metrics footer on the steps it
/// applies to (every step for `coding`; the final working step: the last top-level step, or
/// when the workflow ends with a loop, the last body step that is not its decision step).
pub(crate) fn place_workflow_content(items: &mut [Item], workflow: &WorkflowExtras) {
    let sections = workflow.first_step_sections();
    if !sections.is_empty()
        && let Some(first) = first_step(items)
    {
        first.extras.workflow_sections = sections;
    }
    let Some(profile) = workflow.metrics_profile else {
        return;
    };
    let last = last_working_step(items).map(|s| s.step_id.clone());
    for_each_step_mut(items, &mut |step| {
        step.extras.metrics = profile.footer(Some(&step.step_id) == last.as_ref());
    });
}

fn first_step(items: &mut [Item]) -> Option<&mut StepIr> {
    match items.first_mut()? {
        Item::Step(step) => Some(step),
        Item::Loop(l) => first_step(&mut l.body),
    }
}

fn last_working_step(items: &[Item]) -> Option<&StepIr> {
    match items.last()? {
        Item::Step(step) => Some(step),
        Item::Loop(l) => l.body.iter().rev().find_map(|item| match item {
            Item::Step(s) if s.contract_ref != Some(LOOP_CONTROL) => Some(s.as_ref()),
            _ => None,
        }),
    }
}

/// `wr.features.subagent_guidance`: appends its constraints, procedure and checks to every step
/// written with `promptBlocks` (a step written as one `prompt` string is left as authored).
pub(crate) fn subagent_guidance(items: &mut [Item]) {
    for_each_step_mut(items, &mut |step| {
        if step.text.is_some() {
            return;
        }
        let b = &mut step.blocks;
        b.constraints.extend(
            SUBAGENT_GUIDANCE_CONSTRAINTS
                .iter()
                .map(|t| PromptValue::Text((*t).to_owned())),
        );
        b.constraints.push(PromptValue::Parts(vec![PromptPart::Ref(
            SUBAGENT_GUIDANCE_REF,
        )]));
        b.procedure.extend(
            SUBAGENT_GUIDANCE_PROCEDURE
                .iter()
                .map(|t| PromptValue::Text((*t).to_owned())),
        );
        b.verify.extend(
            SUBAGENT_GUIDANCE_VERIFY
                .iter()
                .map(|t| PromptValue::Text((*t).to_owned())),
        );
    });
}

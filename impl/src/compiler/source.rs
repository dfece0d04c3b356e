//! The authoring model: a source workflow as the compiler understands it after parsing.
//!
//! These types are produced by `parse` from a `serde_json::Value` (never by serde derive), so
//! that every rejection can be reported with its JSON pointer. Each node keeps the pointer it was
//! read from for the later phases' errors.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use workrail_spec::closed::{
    Capability, CapabilityRequirement, LoopDecision, NonAssumableChoiceKind,
};
use workrail_spec::compiled::{CompiledFunction, Recommendations};
use workrail_spec::ids::{ConditionId, LoopId, StepId, WorkflowId};

use super::content::{StepExtras, WorkflowExtras};
use crate::builtins::features::FeatureId;
use crate::builtins::templates::ProbeWhen;

/// A parsed source workflow.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceWorkflow {
    /// `None` only while errors are being collected (the workflow is then never compiled).
    pub id: Option<WorkflowId>,
    pub name: String,
    pub description: String,
    pub agent_role: Option<String>,
    pub recommendations: Recommendations,
    pub capabilities: BTreeMap<Capability, CapabilityRequirement>,
    pub features: Vec<SourceFeature>,
    pub conditions: Vec<SourceCondition>,
    /// Workflow-scoped `functionDefinitions`.
    pub functions: Vec<SourceFunction>,
    pub steps: Vec<SourceStep>,
    /// The workflow-language fields (`assessments`, `maxAttempts`) and their warnings.
    pub language: super::language::WorkflowLanguage,
    /// The 3.x spelling's workflow-level content, kept fields and warnings.
    pub extras: WorkflowExtras,
}

/// One `functionDefinitions` entry, its scope set from where it is written.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceFunction {
    pub function: CompiledFunction,
    pub pointer: String,
}

/// One `functionReferences` entry (the name without `()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionRef {
    pub name: String,
    pub pointer: String,
}

/// One `features[]` entry, its config already validated with defaults written in.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceFeature {
    pub feature: FeatureId,
    /// The canonical config (`{}` for toggle-only features).
    pub config: Value,
    pub pointer: String,
}

/// A condition definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceCondition {
    pub id: ConditionId,
    pub kind: ConditionKind,
    pub pointer: String,
}

/// The closed set of condition kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionKind {
    AlwaysTrue,
    AlwaysFalse,
    LoopControl { continue_when: LoopDecision },
}

/// A step of `steps[]` or of a loop `body[]`.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceStep {
    /// Boxed: a normal step is much larger than the other kinds.
    Normal(Box<NormalStep>),
    TemplateCall(TemplateCall),
    Loop(LoopStep),
    /// Steps the parser derived from one authored item, in order (a routine expansion, a
    /// parallel step's spawn and synthesis steps, a step followed by its verification and audit).
    Group(Vec<SourceStep>),
}

/// A normal step.
#[derive(Debug, Clone, PartialEq)]
pub struct NormalStep {
    pub id: StepId,
    pub title: String,
    pub agent_role: Option<String>,
    pub require_confirmation: bool,
    pub body: StepBody,
    pub output: Option<SourceOutput>,
    /// Choices only the user may make at this step (`nonAssumableChoices`, locks §3).
    pub non_assumable_choices: BTreeSet<NonAssumableChoiceKind>,
    /// Step-scoped `functionDefinitions`.
    pub functions: Vec<SourceFunction>,
    /// `functionReferences`, in authored order, each name once.
    pub function_refs: Vec<FunctionRef>,
    /// The workflow-language fields (run condition, validation, assessments, fragments, ...).
    pub language: super::language::StepLang,
    /// The 3.x spelling's content, kept fields and derived provenance.
    pub extras: StepExtras,
    pub pointer: String,
}

/// `prompt` or `promptBlocks` (exactly one).
#[derive(Debug, Clone, PartialEq)]
pub enum StepBody {
    Prompt(String),
    Blocks(SourceBlocks),
}

/// `promptBlocks`: the canonical block set (locks §9, contract "PromptBlocks").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceBlocks {
    pub goal: Option<PromptValue>,
    pub constraints: Vec<PromptValue>,
    pub procedure: Vec<PromptValue>,
    pub output_required: BTreeMap<String, String>,
    pub verify: Vec<PromptValue>,
    /// Pointer of the `promptBlocks` object (for ref budget errors).
    pub pointer: String,
}

/// `PromptValue = string | PromptParts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptValue {
    Text(String),
    Parts(Vec<PromptPart>),
}

/// One part of a `PromptParts` list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptPart {
    Text(String),
    /// A known `wr.refs.*` id (validated while parsing).
    Ref(&'static str),
}

/// A step's `output`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceOutput {
    /// A known `wr.contracts.*` pack (validated while parsing).
    pub contract_ref: Option<&'static str>,
    pub hints: BTreeMap<String, String>,
}

/// A `type: "template_call"` step, with its arguments validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplateCall {
    CapabilityProbe {
        capability: Capability,
        when: ProbeWhen,
        pointer: String,
    },
}

impl TemplateCall {
    pub fn pointer(&self) -> &str {
        match self {
            Self::CapabilityProbe { pointer, .. } => pointer,
        }
    }
}

/// A `type: "loop"` step.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopStep {
    pub loop_id: LoopId,
    /// The declared (or, for a loop-control loop of the language, synthesized) condition; `None`
    /// for a loop that decides over the context (`language.while_`).
    pub condition_id: Option<ConditionId>,
    pub max_iterations: u32,
    /// Loop-scoped `functionDefinitions`, visible to every step of the body (nested loops too).
    pub functions: Vec<SourceFunction>,
    pub body: Vec<SourceStep>,
    /// Loop fields kept verbatim (`title`).
    pub kept: BTreeMap<String, Value>,
    pub pointer: String,
    /// The workflow-language fields of a loop written in the language's form.
    pub language: Box<super::language::LoopLang>,
}

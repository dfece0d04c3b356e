//! The compiler's intermediate representation: the expanded step tree that features, contract
//! resolution and rendering work on before it is flattened into the compiled snapshot.

use std::collections::BTreeMap;

use workrail_spec::closed::{Capability, NonAssumableChoiceKind};
use workrail_spec::compiled::{CompiledFunction, StepProvenance};
use workrail_spec::ids::{ConditionId, LoopId, StepId};

use serde_json::Value;

use super::content::StepExtras;
use super::source::SourceBlocks;

/// One item of a step list: a step or a loop.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Item {
    Step(Box<StepIr>),
    Loop(LoopIr),
}

/// A step after template expansion.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StepIr {
    pub step_id: StepId,
    pub title: String,
    /// The effective role: the step's own, else the workflow's.
    pub agent_role: Option<String>,
    pub require_confirmation: bool,
    /// The authored `prompt` string (for steps without `promptBlocks`).
    pub text: Option<String>,
    /// Authored blocks plus everything features inject.
    pub blocks: SourceBlocks,
    pub contract_ref: Option<&'static str>,
    /// The capability a template-injected probe step observes.
    pub probe_capability: Option<Capability>,
    pub hints: BTreeMap<String, String>,
    /// Choices only the user may make at this step, sorted (compiled as `nonAssumableChoices`).
    pub non_assumable_choices: Vec<NonAssumableChoiceKind>,
    /// The function definitions the step references, resolved and ordered.
    pub functions: Vec<CompiledFunction>,
    pub provenance: StepProvenance,
    /// The 3.x spelling's content and kept fields.
    pub extras: StepExtras,
    /// The source pointer errors about this step refer to (the template call for expansions).
    pub pointer: String,
    /// The workflow-language fields (empty for template-injected steps).
    pub language: super::language::StepLang,
}

/// A loop after template expansion of its body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LoopIr {
    pub loop_id: LoopId,
    pub condition_id: Option<ConditionId>,
    pub max_iterations: u32,
    pub body: Vec<Item>,
    pub kept: BTreeMap<String, Value>,
    pub pointer: String,
    pub language: Box<super::language::LoopLang>,
}

/// Visits every step of a tree in document order (depth first).
pub(crate) fn for_each_step<'a>(items: &'a [Item], f: &mut impl FnMut(&'a StepIr)) {
    for item in items {
        match item {
            Item::Step(step) => f(step),
            Item::Loop(l) => for_each_step(&l.body, f),
        }
    }
}

/// Visits every step of a tree mutably, in document order.
pub(crate) fn for_each_step_mut(items: &mut [Item], f: &mut impl FnMut(&mut StepIr)) {
    for item in items {
        match item {
            Item::Step(step) => f(step),
            Item::Loop(l) => for_each_step_mut(&mut l.body, f),
        }
    }
}

/// Visits every loop of a tree in document order (outer before inner).
pub(crate) fn for_each_loop<'a>(items: &'a [Item], f: &mut impl FnMut(&'a LoopIr)) {
    for item in items {
        if let Item::Loop(l) = item {
            f(l);
            for_each_loop(&l.body, f);
        }
    }
}

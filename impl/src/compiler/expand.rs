//! Phase 1: template expansion in place (with provenance) and the probe steps injected for
//! `required` capabilities (locks §5 "Template expansion order", §9 "Capabilities + contracts
//! ergonomics").

use std::collections::BTreeSet;

use workrail_spec::closed::{
    Capability, CapabilityRequirement, NonAssumableChoiceKind, StepSource,
};
use workrail_spec::compiled::{CompiledWarning, CompiledWarningCode, StepProvenance};
use workrail_spec::ids::StepId;

use super::error::{CompileError, CompileErrorCode as Code, child};
use super::functions::{self, Scopes};
use super::ir::{Item, LoopIr, StepIr};
use super::source::{
    NormalStep, PromptPart, PromptValue, SourceBlocks, SourceFunction, SourceStep, SourceWorkflow,
    StepBody, TemplateCall,
};
use crate::builtins::templates::{self, CAPABILITY_PROBE, ProbeWhen, TemplateStep};

/// Expands `steps[]` into the IR tree; returns the tree and the warnings of probe injection.
pub(crate) fn expand(
    workflow: &SourceWorkflow,
    errors: &mut Vec<CompileError>,
) -> (Vec<Item>, Vec<CompiledWarning>) {
    let role = workflow.agent_role.as_deref();
    let mut warnings = Vec::new();
    let mut used = BTreeSet::new();
    let scopes = Scopes::workflow(&workflow.functions);
    let mut items = expand_list(&workflow.steps, role, &scopes, &mut used, errors);
    warnings.extend(functions::unused(all_functions(workflow), &used));
    let probed = authored_probes(&workflow.steps);
    // Injected probes go first, in Capability order (the template id is the same for all and the
    // capability order is the stable injection index).
    let mut injected = Vec::new();
    for (capability, requirement) in &workflow.capabilities {
        if *requirement != CapabilityRequirement::Required || probed.contains(capability) {
            continue;
        }
        let step = templates::capability_probe(*capability, ProbeWhen::EarlyIfRequired);
        let pointer = child("/capabilities", capability.as_str());
        match template_step(step, *capability, role, &pointer) {
            Ok(step) => injected.push(Item::Step(Box::new(step))),
            Err(e) => errors.push(*e),
        }
        warnings.push(CompiledWarning {
            code: CompiledWarningCode::CapabilityProbeInjected,
            message: format!(
                "`{}` is required: a `{CAPABILITY_PROBE}` step ({}) was injected at the start so a missing capability is found before any other work.",
                capability.as_str(),
                templates::probe_step_id(*capability),
            ),
            pointer: Some(pointer),
        });
    }
    injected.append(&mut items);
    (injected, warnings)
}

/// Capabilities the author already probes with an explicit template call (anywhere).
fn authored_probes(steps: &[SourceStep]) -> BTreeSet<Capability> {
    let mut out = BTreeSet::new();
    for step in steps {
        match step {
            SourceStep::TemplateCall(TemplateCall::CapabilityProbe { capability, .. }) => {
                out.insert(*capability);
            }
            SourceStep::Loop(l) => out.extend(authored_probes(&l.body)),
            SourceStep::Group(steps) => out.extend(authored_probes(steps)),
            SourceStep::Normal(_) => {}
        }
    }
    out
}

/// Every definition of the workflow, in document order (workflow, then depth first).
fn all_functions(workflow: &SourceWorkflow) -> Vec<&SourceFunction> {
    fn walk<'a>(steps: &'a [SourceStep], out: &mut Vec<&'a SourceFunction>) {
        for step in steps {
            match step {
                SourceStep::Normal(n) => out.extend(n.functions.iter()),
                SourceStep::Loop(l) => {
                    out.extend(l.functions.iter());
                    walk(&l.body, out);
                }
                SourceStep::Group(steps) => walk(steps, out),
                SourceStep::TemplateCall(_) => {}
            }
        }
    }
    let mut out: Vec<&SourceFunction> = workflow.functions.iter().collect();
    walk(&workflow.steps, &mut out);
    out
}

fn expand_list(
    steps: &[SourceStep],
    role: Option<&str>,
    scopes: &Scopes<'_>,
    used: &mut BTreeSet<String>,
    errors: &mut Vec<CompileError>,
) -> Vec<Item> {
    let mut out = Vec::new();
    for step in steps {
        match step {
            SourceStep::Normal(n) => {
                let mut ir = authored(n, role);
                let texts = step_texts(n);
                ir.functions = functions::resolve(
                    scopes,
                    &n.functions,
                    &n.function_refs,
                    &texts,
                    used,
                    errors,
                );
                out.push(Item::Step(Box::new(ir)));
            }
            SourceStep::TemplateCall(call) => match call {
                TemplateCall::CapabilityProbe {
                    capability,
                    when,
                    pointer,
                } => {
                    let step = templates::capability_probe(*capability, *when);
                    match template_step(step, *capability, role, pointer) {
                        Ok(step) => out.push(Item::Step(Box::new(step))),
                        Err(e) => errors.push(*e),
                    }
                }
            },
            SourceStep::Loop(l) => out.push(Item::Loop(LoopIr {
                loop_id: l.loop_id.clone(),
                condition_id: l.condition_id.clone(),
                max_iterations: l.max_iterations,
                body: expand_list(&l.body, role, &scopes.enter(&l.functions), used, errors),
                kept: l.kept.clone(),
                pointer: l.pointer.clone(),
                language: l.language.clone(),
            })),
            SourceStep::Group(steps) => out.extend(expand_list(steps, role, scopes, used, errors)),
        }
    }
    out
}

/// The authored text of a step, where a function call `name()` counts as a reference.
fn step_texts(step: &NormalStep) -> Vec<&str> {
    fn value_texts<'a>(value: &'a PromptValue, out: &mut Vec<&'a str>) {
        match value {
            PromptValue::Text(t) => out.push(t),
            PromptValue::Parts(parts) => out.extend(parts.iter().filter_map(|p| match p {
                PromptPart::Text(t) => Some(t.as_str()),
                PromptPart::Ref(_) => None,
            })),
        }
    }
    let mut out = Vec::new();
    match &step.body {
        StepBody::Prompt(text) => out.push(text.as_str()),
        StepBody::Blocks(b) => {
            for v in b
                .goal
                .iter()
                .chain(&b.constraints)
                .chain(&b.procedure)
                .chain(&b.verify)
            {
                value_texts(v, &mut out);
            }
            out.extend(b.output_required.values().map(String::as_str));
        }
    }
    out
}

fn authored(step: &NormalStep, workflow_role: Option<&str>) -> StepIr {
    let (text, mut blocks) = match &step.body {
        StepBody::Prompt(text) => (Some(text.clone()), SourceBlocks::default()),
        StepBody::Blocks(blocks) => (None, blocks.clone()),
    };
    // Canonical order is lexical by wire value, like every other compiled list.
    let mut choices: Vec<NonAssumableChoiceKind> =
        step.non_assumable_choices.iter().copied().collect();
    choices.sort_by_key(|c| c.as_str());
    if let Some(line) = crate::builtins::contracts::non_assumable_choices_line(&choices) {
        blocks.constraints.push(PromptValue::Text(line));
    }
    let output = step.output.clone().unwrap_or_default();
    StepIr {
        step_id: step.id.clone(),
        title: step.title.clone(),
        agent_role: step
            .agent_role
            .clone()
            .or_else(|| workflow_role.map(str::to_owned)),
        require_confirmation: step.require_confirmation,
        text,
        blocks,
        contract_ref: output.contract_ref,
        probe_capability: None,
        hints: output.hints,
        non_assumable_choices: choices,
        functions: Vec::new(),
        provenance: step.extras.provenance.clone().unwrap_or(StepProvenance {
            source: StepSource::Authored,
            origin_id: None,
        }),
        extras: step.extras.clone(),
        pointer: step.pointer.clone(),
        language: step.language.clone(),
    }
}

fn template_step(
    step: TemplateStep,
    capability: Capability,
    workflow_role: Option<&str>,
    pointer: &str,
) -> Result<StepIr, Box<CompileError>> {
    let step_id = StepId::parse(&step.step_id).map_err(|e| {
        Box::new(CompileError::new(
            Code::Internal,
            pointer,
            format!("template produced an invalid step id: {e}"),
            "This is a WorkRail bug; report it with the workflow source.",
        ))
    })?;
    let texts = |items: Vec<String>| items.into_iter().map(PromptValue::Text).collect();
    Ok(StepIr {
        step_id,
        title: step.title,
        agent_role: workflow_role.map(str::to_owned),
        require_confirmation: false,
        text: None,
        blocks: SourceBlocks {
            goal: Some(PromptValue::Text(step.goal)),
            constraints: texts(step.constraints),
            procedure: texts(step.procedure),
            output_required: [("notesMarkdown".to_owned(), step.notes)]
                .into_iter()
                .collect(),
            verify: texts(step.verify),
            pointer: pointer.to_owned(),
        },
        contract_ref: Some(step.contract_ref),
        probe_capability: Some(capability),
        hints: Default::default(),
        non_assumable_choices: Vec::new(),
        functions: Vec::new(),
        provenance: StepProvenance {
            source: StepSource::TemplateInjected,
            origin_id: Some(CAPABILITY_PROBE.to_owned()),
        },
        extras: Default::default(),
        pointer: pointer.to_owned(),
        language: Default::default(),
    })
}

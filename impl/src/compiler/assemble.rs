//! Phase 5: flattening the rendered tree into `CompiledWorkflowSnapshotV1` with the locked
//! orderings (locks §5): steps in document order, the top-level `sequence`, loops sorted by
//! `loopId` with authored body order, conditions by `conditionId`, contracts by `contractRef`,
//! features by `featureId`, warnings by `(code, pointer, message)`.

use std::collections::BTreeSet;

use serde_json::Value;
use workrail_spec::compiled::{
    CompiledCondition, CompiledContract, CompiledFeature, CompiledLoop, CompiledStep,
    CompiledWarning, CompiledWorkflowBody, CompiledWorkflowSnapshotV1, LoopWhile, SequenceItem,
    StepOutputSpec,
};
use workrail_spec::ids::WorkflowId;

use super::error::{CompileError, CompileErrorCode as Code};
use super::ir::{Item, LoopIr, StepIr};
use super::language::{WorkflowLanguage, step_language, with_requirements};
use super::render::render_step;
use super::source::{ConditionKind, SourceFeature, SourceWorkflow};
use crate::builtins::contracts;

/// Everything assembly needs besides the tree.
pub(crate) struct Parts<'a> {
    pub workflow: &'a SourceWorkflow,
    pub id: WorkflowId,
    pub features: Vec<&'a SourceFeature>,
    pub contracts: BTreeSet<&'static str>,
    pub warnings: Vec<CompiledWarning>,
}

fn sequence(items: &[Item]) -> Vec<SequenceItem> {
    items
        .iter()
        .map(|item| match item {
            Item::Step(s) => SequenceItem::Step {
                step_id: s.step_id.clone(),
            },
            Item::Loop(l) => SequenceItem::Loop {
                loop_id: l.loop_id.clone(),
            },
        })
        .collect()
}

fn flatten(
    items: &[Item],
    language: &WorkflowLanguage,
    steps: &mut Vec<CompiledStep>,
    loops: &mut Vec<CompiledLoop>,
    errors: &mut Vec<CompileError>,
) {
    for item in items {
        match item {
            Item::Step(step) => match compile_step(step, language) {
                Ok(s) => steps.push(s),
                Err(mut e) => errors.append(&mut e),
            },
            Item::Loop(l) => {
                match compile_loop(l) {
                    Ok(compiled) => loops.push(compiled),
                    Err(e) => errors.push(*e),
                }
                flatten(&l.body, language, steps, loops, errors);
            }
        }
    }
}

fn compile_step(
    step: &StepIr,
    workflow: &WorkflowLanguage,
) -> Result<CompiledStep, Vec<CompileError>> {
    let mut rendered = render_step(step)?;
    rendered.prompt = with_requirements(
        rendered.prompt,
        &step.language,
        !step.functions.is_empty(),
        workflow,
    );
    // The language's own fields and the 3.x content's (delegation fragments, kept fields) meet
    // here, so the reads of every fragment are counted once.
    let mut lang = step.language.clone();
    let extras = step.extras.language();
    lang.prompt_fragments.extend(extras.prompt_fragments);
    lang.kept.extend(extras.kept);
    if extras.lanes.is_some() {
        lang.lanes = extras.lanes;
    }
    let mut language = step_language(&lang, &step.title, &rendered.prompt, workflow);
    language.language_loop_control =
        lang.output_contract && step.contract_ref == Some(crate::builtins::contracts::LOOP_CONTROL);
    let output = (step.contract_ref.is_some() || !step.hints.is_empty()).then(|| StepOutputSpec {
        contract_ref: step.contract_ref.map(str::to_owned),
        hints: step.hints.clone(),
    });
    Ok(CompiledStep {
        step_id: step.step_id.clone(),
        title: step.title.clone(),
        require_confirmation: step.require_confirmation,
        agent_role: step.agent_role.clone(),
        prompt_blocks: rendered.blocks,
        prompt: rendered.prompt,
        output,
        provenance: step.provenance.clone(),
        injected_refs: rendered.refs,
        non_assumable_choices: step.non_assumable_choices.clone(),
        functions: step.functions.clone(),
        language,
    })
}

fn compile_loop(l: &LoopIr) -> Result<CompiledLoop, Box<CompileError>> {
    let while_ = match (&l.condition_id, &l.language.while_) {
        (Some(condition_id), _) => LoopWhile::ConditionRef {
            condition_id: condition_id.clone(),
        },
        (None, Some(native)) => native.clone(),
        (None, None) => {
            return Err(Box::new(internal(format!(
                "loop {} has no condition",
                l.loop_id
            ))));
        }
    };
    Ok(CompiledLoop {
        loop_id: l.loop_id.clone(),
        while_,
        max_iterations: l.max_iterations,
        body: sequence(&l.body),
        run_condition: l.language.run_condition.clone(),
        vars: l.language.vars.clone(),
        kept: l
            .kept
            .iter()
            .chain(&l.language.kept)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    })
}

/// Sorts order-free lists inside a JSON Schema (`required`, `enum`) so semantically equal
/// schemas hash the same (locks §5 "Embedded schema canonicalization"); object keys are
/// ordered by JCS itself.
pub fn normalize_schema(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if key == "required" || key == "enum" {
                    if let Value::Array(items) = v {
                        items.sort_by_key(|a| {
                            workrail_spec::jcs::to_canonical_string(a).unwrap_or_default()
                        });
                        items.dedup();
                    }
                } else {
                    normalize_schema(v);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize_schema),
        _ => {}
    }
}

fn internal(detail: impl std::fmt::Display) -> CompileError {
    CompileError::new(
        Code::Internal,
        "",
        format!("the compiled snapshot broke an invariant: {detail}"),
        "This is a WorkRail compiler bug; report it with the workflow source.",
    )
}

/// Builds and checks the snapshot.
pub(crate) fn assemble(
    items: &[Item],
    parts: Parts<'_>,
) -> Result<CompiledWorkflowSnapshotV1, Vec<CompileError>> {
    let mut steps = Vec::new();
    let mut loops = Vec::new();
    let mut errors = Vec::new();
    flatten(
        items,
        &parts.workflow.language,
        &mut steps,
        &mut loops,
        &mut errors,
    );
    if !errors.is_empty() {
        return Err(errors);
    }
    loops.sort_by(|a, b| a.loop_id.cmp(&b.loop_id));
    let mut conditions: Vec<CompiledCondition> = parts
        .workflow
        .conditions
        .iter()
        .map(|c| match c.kind {
            ConditionKind::AlwaysTrue => CompiledCondition::AlwaysTrue {
                condition_id: c.id.clone(),
            },
            ConditionKind::AlwaysFalse => CompiledCondition::AlwaysFalse {
                condition_id: c.id.clone(),
            },
            ConditionKind::LoopControl { continue_when } => CompiledCondition::LoopControl {
                condition_id: c.id.clone(),
                continue_when,
            },
        })
        .collect();
    conditions.sort_by(|a, b| a.condition_id().cmp(b.condition_id()));
    let contracts = parts
        .contracts
        .iter()
        .filter_map(|r| contracts::find(r))
        .map(|pack| {
            let mut schema = pack.schema();
            normalize_schema(&mut schema);
            CompiledContract {
                contract_ref: pack.contract_ref.to_owned(),
                artifact_kind: pack.artifact_kind.to_owned(),
                schema,
                example: pack.example(),
            }
        })
        .collect();
    let features = parts
        .features
        .iter()
        .map(|f| CompiledFeature {
            feature_id: f.feature.as_str().to_owned(),
            config: f.config.clone(),
        })
        .collect();
    let mut warnings = parts.warnings;
    warnings.sort_by(|a, b| {
        (a.code.as_str(), &a.pointer, &a.message).cmp(&(b.code.as_str(), &b.pointer, &b.message))
    });
    let w = parts.workflow;
    let body = CompiledWorkflowBody {
        workflow_id: parts.id,
        name: Some(w.name.clone()),
        description: Some(w.description.clone()),
        agent_role: w.agent_role.clone(),
        recommendations: w.recommendations.clone(),
        capabilities: w.capabilities.clone(),
        features,
        contracts,
        steps,
        sequence: sequence(items),
        conditions,
        loops,
        compiled_warnings: warnings,
        assessments: w.language.assessments.clone(),
        kept: w.extras.kept.clone(),
    };
    CompiledWorkflowSnapshotV1::new(body).map_err(|e| vec![internal(e)])
}

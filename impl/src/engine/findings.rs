//! Building findings: the reason code, blocker pointer, bounded message and fix, structured
//! details and the disposition in the effective mode.

use serde_json::{Map, Value};
use workrail_spec::blocker::BlockerPointer;
use workrail_spec::budget::{BLOCKER_MESSAGE_MAX_BYTES, BLOCKER_SUGGESTED_FIX_MAX_BYTES};
use workrail_spec::closed::{Autonomy, Capability, CapabilityRequirement, LoopDecision};
use workrail_spec::compiled::{
    CompiledCondition, CompiledContract, CompiledLoop, CompiledWorkflowSnapshotV1,
};
use workrail_spec::ids::StepId;
use workrail_spec::reason::{
    CapabilityMissingReason, ContractViolationReason, GapReason, ReasonCode, UnexpectedReason,
};

use super::contract::{ContractProblem, bounded};
use super::outcome::{Finding, FindingDetail};

fn finding(
    reason: GapReason,
    pointer: BlockerPointer,
    message: String,
    fix: String,
    detail: FindingDetail,
    autonomy: Autonomy,
    capability_required: bool,
) -> Finding {
    let reason = ReasonCode::new(reason);
    Finding {
        reason,
        pointer,
        message: bounded(&message, BLOCKER_MESSAGE_MAX_BYTES),
        suggested_fix: bounded(&fix, BLOCKER_SUGGESTED_FIX_MAX_BYTES),
        detail,
        disposition: reason.disposition(autonomy, capability_required),
    }
}

fn compact(value: &Value) -> String {
    workrail_spec::jcs::to_canonical_string(value).unwrap_or_default()
}

/// The contract's example, with `loopId` set to the enclosing loop for loop control.
fn example_for(contract: &CompiledContract, loop_id: Option<&str>) -> Value {
    let mut example = contract.example.clone();
    if let (Some(loop_id), Some(map)) = (loop_id, example.as_object_mut())
        && map.contains_key("loopId")
    {
        map.insert("loopId".into(), Value::from(loop_id));
    }
    example
}

/// The step's required output is missing (`problems` empty) or invalid.
pub(crate) fn contract(
    contract: &CompiledContract,
    step_id: &StepId,
    loop_id: Option<&str>,
    problems: Vec<ContractProblem>,
    autonomy: Autonomy,
) -> Finding {
    let mut example = example_for(contract, loop_id);
    // A probe step's example names the capability it probes.
    if let Some(probed) = workrail_spec::closed::Capability::ALL
        .iter()
        .find(|c| step_id.as_str() == crate::builtins::templates::probe_step_id(**c))
        && let Some(map) = example.as_object_mut()
        && map.contains_key("capability")
    {
        map.insert("capability".into(), Value::from(probed.as_str()));
    }
    let (reason, message, fix) = match problems.first() {
        None => (
            ContractViolationReason::MissingRequiredOutput,
            format!(
                "Step '{step_id}' requires a '{}' artifact in output.artifacts (contract {}), and none was sent.",
                contract.artifact_kind, contract.contract_ref
            ),
            format!(
                "Acknowledge the step again with this artifact filled in from your work: {}",
                compact(&example)
            ),
        ),
        Some(first) => (
            ContractViolationReason::InvalidRequiredOutput,
            format!(
                "Step '{step_id}': artifact {} ('{}') does not satisfy {} at '{}': {}",
                first.artifact_index,
                contract.artifact_kind,
                contract.contract_ref,
                first.instance_path,
                first.message
            ),
            format!(
                "Fix the fields listed in the details ({} problem(s)) and acknowledge again. A valid example: {}",
                problems.len(),
                compact(&example)
            ),
        ),
    };
    finding(
        GapReason::ContractViolation(reason),
        BlockerPointer::OutputContract {
            contract_ref: contract.contract_ref.clone(),
        },
        message,
        fix,
        FindingDetail::Contract {
            step_id: step_id.clone(),
            contract_ref: contract.contract_ref.clone(),
            artifact_kind: contract.artifact_kind.clone(),
            problems,
            example,
        },
        autonomy,
        false,
    )
}

/// A `loop_control` decision asked for an iteration past `maxIterations`.
pub(crate) fn loop_limit(
    def: &CompiledLoop,
    cond: &CompiledCondition,
    iteration: u32,
    step_id: StepId,
    autonomy: Autonomy,
) -> Finding {
    let stop = match cond {
        CompiledCondition::LoopControl {
            continue_when: LoopDecision::Stop,
            ..
        } => LoopDecision::Continue,
        _ => LoopDecision::Stop,
    };
    let max = def.max_iterations;
    finding(
        GapReason::Unexpected(UnexpectedReason::InvariantViolation),
        BlockerPointer::WorkflowStep {
            step_id: step_id.clone(),
        },
        format!(
            "Loop '{}' was asked to continue after iteration {iteration}, but maxIterations is {max} (iterations 0..{}), so iteration {max} cannot start.",
            def.loop_id,
            max.saturating_sub(1)
        ),
        format!(
            "Acknowledge '{step_id}' again with a wr.loop_control decision of '{stop}' and list what is left undone in output.notesMarkdown; if the loop genuinely needs more iterations, raise maxIterations in the workflow source and start a new run."
        ),
        FindingDetail::LoopLimit {
            loop_id: def.loop_id.clone(),
            iteration,
            max_iterations: max,
            step_id,
        },
        autonomy,
        false,
    )
}

/// Probe observations that report a declared capability unavailable.
pub(crate) fn capabilities(
    compiled: &CompiledWorkflowSnapshotV1,
    step_id: &StepId,
    artifacts: &[(usize, Map<String, Value>)],
    autonomy: Autonomy,
) -> Vec<Finding> {
    let mut out: Vec<Finding> = Vec::new();
    for (_, artifact) in artifacts {
        let capability = artifact
            .get("capability")
            .and_then(Value::as_str)
            .and_then(Capability::parse);
        let unavailable = artifact.get("status").and_then(Value::as_str) == Some("unavailable");
        let Some(capability) = capability else {
            continue;
        };
        let requirement = compiled.body.capabilities.get(&capability).copied();
        let required = match requirement {
            Some(CapabilityRequirement::Required) => true,
            Some(CapabilityRequirement::Preferred) => false,
            // Undeclared or disabled: nothing depends on it.
            _ => continue,
        };
        if !unavailable || out.iter().any(|f| matches!(f.detail, FindingDetail::Capability { capability: c, .. } if c == capability)) {
            continue;
        }
        let remediation = artifact
            .get("remediation")
            .and_then(Value::as_str)
            .map(|r| format!(" The agent suggested: {r}"))
            .unwrap_or_default();
        let (message, fix) = if required {
            (
                format!(
                    "The probe in step '{step_id}' reported '{capability}' unavailable, and this workflow requires it."
                ),
                format!(
                    "Make '{capability}' available to the agent (enable a tool that provides it) or supply the material it would fetch, then acknowledge the probe again with a new observation.{remediation}"
                ),
            )
        } else {
            (
                format!(
                    "The probe in step '{step_id}' reported '{capability}' unavailable; this workflow only prefers it and continues without it."
                ),
                format!(
                    "Nothing is required; enabling '{capability}' would let later steps use the enhanced path.{remediation}"
                ),
            )
        };
        out.push(finding(
            GapReason::CapabilityMissing(CapabilityMissingReason::RequiredCapabilityUnavailable),
            BlockerPointer::Capability { capability },
            message,
            fix,
            FindingDetail::Capability {
                capability,
                step_id: step_id.clone(),
            },
            autonomy,
            required,
        ));
    }
    out
}

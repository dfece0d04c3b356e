//! Building findings: the reason code, blocker pointer, bounded message and fix, structured
//! details and the disposition in the effective mode.

use serde_json::Value;
use workrail_spec::blocker::BlockerPointer;
use workrail_spec::budget::{BLOCKER_MESSAGE_MAX_BYTES, BLOCKER_SUGGESTED_FIX_MAX_BYTES};
use workrail_spec::closed::{
    Autonomy, Capability, CapabilityStatus, LoopDecision, NonAssumableChoiceKind,
    UserOnlyDependencyReason,
};
use workrail_spec::compiled::{CompiledCondition, CompiledContract, CompiledLoop, CompiledStep};
use workrail_spec::ids::{ContextKey, StepId};
use workrail_spec::reason::{
    CapabilityMissingReason, ContractViolationReason, GapReason, ReasonCode, UnexpectedReason,
};

use super::contract::{ContractProblem, bounded};
use super::outcome::{AssessmentFollowup, Finding, FindingDetail, LoopContextProblem};

pub(super) fn finding(
    reason: GapReason,
    pointer: BlockerPointer,
    message: String,
    fix: String,
    detail: FindingDetail,
    autonomy: Autonomy,
    subject_required: bool,
) -> Finding {
    let reason = ReasonCode::new(reason);
    Finding {
        reason,
        pointer,
        message: bounded(&message, BLOCKER_MESSAGE_MAX_BYTES),
        suggested_fix: bounded(&fix, BLOCKER_SUGGESTED_FIX_MAX_BYTES),
        detail,
        disposition: reason.disposition(autonomy, subject_required),
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

/// The example artifact a step's contract asks for, as blocked responses and the pending step
/// show it: `loopId` set to the enclosing loop, a probe's `capability` to the one it probes.
pub(crate) fn step_example(
    contract: &CompiledContract,
    step: &CompiledStep,
    loop_id: Option<&str>,
) -> Value {
    let step_id = &step.step_id;
    let mut example = example_for(contract, loop_id);
    // Outside any loop a decision written for the language names no loop (D209): the pack's
    // example loop would be one the workflow does not have.
    if step.language.language_loop_control
        && loop_id.is_none()
        && let Some(map) = example.as_object_mut()
    {
        map.remove("loopId");
    }
    if let Some(probed) = workrail_spec::closed::Capability::ALL
        .iter()
        .find(|c| step_id.as_str() == crate::builtins::templates::probe_step_id(**c))
        && let Some(map) = example.as_object_mut()
        && map.contains_key("capability")
    {
        // The pack's example is about another capability: its evidence would be false here,
        // and an agent copies what it is shown.
        map.insert("capability".into(), Value::from(probed.as_str()));
        map.insert(
            "evidence".into(),
            Value::from(crate::builtins::templates::probe_example_evidence(*probed)),
        );
    }
    example
}

#[cfg(feature = "test-mutations")]
thread_local! {
    static POINTER_NAMES_THE_KIND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// TEST-ONLY (feature `test-mutations`): while on, for the calling thread, a required output's
/// blocker points at the artifact kind (`wr.loop_control`) instead of its contract
/// (`wr.contracts.loop_control`): a planted bug only a comparison of pointer contents sees.
#[cfg(feature = "test-mutations")]
pub fn plant_contract_pointer_names_the_kind(on: bool) {
    POINTER_NAMES_THE_KIND.with(|c| c.set(on));
}

#[cfg(feature = "test-mutations")]
fn planted_pointer_names_the_kind() -> bool {
    POINTER_NAMES_THE_KIND.with(std::cell::Cell::get)
}

#[cfg(not(feature = "test-mutations"))]
#[inline(always)]
fn planted_pointer_names_the_kind() -> bool {
    false
}

/// The step's required output is missing (`problems` empty) or invalid.
pub(crate) fn contract(
    contract: &CompiledContract,
    step: &CompiledStep,
    loop_id: Option<&str>,
    problems: Vec<ContractProblem>,
    autonomy: Autonomy,
) -> Finding {
    let step_id = &step.step_id;
    let example = step_example(contract, step, loop_id);
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
    // TEST-ONLY planted bug: the pointer names the artifact kind instead of the contract.
    let contract_ref = if planted_pointer_names_the_kind() {
        contract.artifact_kind.clone()
    } else {
        contract.contract_ref.clone()
    };
    finding(
        GapReason::ContractViolation(reason),
        BlockerPointer::OutputContract { contract_ref },
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
        true,
    )
}

/// An optional report (an artifact WorkRail reads on any step: a capability observation, a
/// divergence marker, a user-only dependency) that does not satisfy its pack. `required` is true
/// for a user-only dependency, which asks to stop: judging it like a required output keeps a
/// malformed stop request from silently becoming an advance (decision D41); other reports are
/// disclosed as warnings (D42).
pub(crate) fn invalid_report(
    contract: &CompiledContract,
    step_id: &StepId,
    problems: Vec<ContractProblem>,
    autonomy: Autonomy,
    required: bool,
) -> Finding {
    let example = contract.example.clone();
    let first = problems.first().cloned().unwrap_or(ContractProblem {
        artifact_index: 0,
        instance_path: String::new(),
        message: "invalid".into(),
    });
    let consequence = if required {
        "so WorkRail cannot tell what the user must do"
    } else {
        "so it was not recorded"
    };
    finding(
        GapReason::ContractViolation(ContractViolationReason::InvalidRequiredOutput),
        BlockerPointer::OutputContract {
            contract_ref: contract.contract_ref.clone(),
        },
        format!(
            "Step '{step_id}': artifact {} ('{}') does not satisfy {} at '{}': {}; {consequence}.",
            first.artifact_index,
            contract.artifact_kind,
            contract.contract_ref,
            first.instance_path,
            first.message
        ),
        format!(
            "Fix the fields listed in the details ({} problem(s)) and acknowledge again, or leave the artifact out. A valid example: {}",
            problems.len(),
            compact(&example)
        ),
        FindingDetail::Contract {
            step_id: step_id.clone(),
            contract_ref: contract.contract_ref.clone(),
            artifact_kind: contract.artifact_kind.clone(),
            problems,
            example,
        },
        autonomy,
        required,
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
        true,
    )
}

fn capability_name(capability: Capability) -> &'static str {
    match capability {
        Capability::Delegation => "delegation (subagents)",
        Capability::WebBrowsing => "web browsing",
    }
}

/// A declared capability observed `unavailable` with enforcement-grade provenance. Blocks only
/// when the workflow requires it; a preferred one is a warning (contract "Probing and
/// degradation": degrade gracefully and surface a warning).
pub(crate) fn capability_unavailable(
    capability: Capability,
    step_id: &StepId,
    required: bool,
    remediation: Option<&str>,
    autonomy: Autonomy,
) -> Finding {
    let name = capability_name(capability);
    let remediation = remediation
        .map(|r| format!(" The agent suggested: {r}"))
        .unwrap_or_default();
    let (message, fix) = if required {
        (
            format!(
                "Step '{step_id}' observed '{capability}' unavailable, and this workflow requires it."
            ),
            format!(
                "Make {name} available to the agent (enable a tool that provides it) or supply the material it would fetch, then acknowledge again with a new `wr.capability_observation` of `{capability}` (`basis` `attempt`, `status` `available`).{remediation}"
            ),
        )
    } else {
        (
            format!(
                "Step '{step_id}' observed '{capability}' unavailable; this workflow only prefers it and continues on the sequential path."
            ),
            format!(
                "Nothing is required; enabling {name} would let later steps use the enhanced path.{remediation}"
            ),
        )
    };
    finding(
        GapReason::CapabilityMissing(CapabilityMissingReason::RequiredCapabilityUnavailable),
        BlockerPointer::Capability { capability },
        message,
        fix,
        FindingDetail::Capability {
            capability,
            step_id: step_id.clone(),
            status: CapabilityStatus::Unavailable,
        },
        autonomy,
        required,
    )
}

/// A step that depends on a required capability was acknowledged while the capability's
/// enforcement-grade status on the branch is `unknown` (or `unavailable`).
pub(crate) fn capability_dependency(
    capability: Capability,
    step_id: &StepId,
    status: CapabilityStatus,
    autonomy: Autonomy,
) -> Finding {
    let name = capability_name(capability);
    let observe = format!(
        "try {name} once in this step and acknowledge again with a `wr.capability_observation` artifact (`capability` `{capability}`, `basis` `attempt`, `status` from what happened, and the `evidence`); a claim without an attempt does not count"
    );
    let (detail, message, fix) = if status == CapabilityStatus::Unavailable {
        (
            CapabilityMissingReason::RequiredCapabilityUnavailable,
            format!(
                "Step '{step_id}' depends on '{capability}', which this workflow requires, but the latest attempt on this branch found it unavailable."
            ),
            format!("Make {name} available to the agent, then {observe}."),
        )
    } else {
        (
            CapabilityMissingReason::RequiredCapabilityUnknown,
            format!(
                "Step '{step_id}' depends on '{capability}', which this workflow requires, but no attempt on this branch has shown whether it works (the probe was skipped, or only a claim was reported)."
            ),
            format!("To find out, {observe}."),
        )
    };
    finding(
        GapReason::CapabilityMissing(detail),
        BlockerPointer::Capability { capability },
        message,
        fix,
        FindingDetail::Capability {
            capability,
            step_id: step_id.clone(),
            status,
        },
        autonomy,
        true,
    )
}

/// What the user must do for each reason, as the blocked response's fix.
fn user_only_fix(
    reason: UserOnlyDependencyReason,
    choice: Option<NonAssumableChoiceKind>,
) -> String {
    let ask = match reason {
        UserOnlyDependencyReason::NeedsUserSecretOrToken => {
            "Ask the user to provide the secret or token through their own secure channel; never invent, guess or print one.".to_owned()
        }
        UserOnlyDependencyReason::NeedsUserAccountAccess => {
            "Ask the user to grant the account access (sign in, grant the permission) or to do the step with their account.".to_owned()
        }
        UserOnlyDependencyReason::NeedsUserArtifact => {
            "Ask the user for the file, document or data described in the summary.".to_owned()
        }
        UserOnlyDependencyReason::NeedsUserChoice => format!(
            "Ask the user to decide ({}); record their decision in output.notesMarkdown.",
            choice.map_or("the choice", |c| c.as_str())
        ),
        UserOnlyDependencyReason::NeedsUserApproval => {
            "Ask the user for explicit approval and quote it in output.notesMarkdown.".to_owned()
        }
        UserOnlyDependencyReason::NeedsUserEnvironmentAction => {
            "Ask the user to perform the action in their environment (install, start or configure what the summary names).".to_owned()
        }
    };
    format!(
        "{ask} Then acknowledge this step again, with the new ackToken, without the `wr.user_only_dependency` artifact."
    )
}

/// The agent reported that only the user can unblock the step.
pub(crate) fn user_only_dependency(
    step_id: &StepId,
    reason: UserOnlyDependencyReason,
    choice: Option<NonAssumableChoiceKind>,
    summary: &str,
    autonomy: Autonomy,
) -> Finding {
    let what = match choice {
        Some(c) => format!("{reason}, {c}"),
        None => reason.as_str().to_owned(),
    };
    finding(
        GapReason::UserOnlyDependency(reason),
        BlockerPointer::WorkflowStep {
            step_id: step_id.clone(),
        },
        format!("Step '{step_id}' needs the user ({what}): {summary}"),
        user_only_fix(reason, choice),
        FindingDetail::UserOnlyDependency {
            step_id: step_id.clone(),
            reason,
            non_assumable_choice: choice,
        },
        autonomy,
        true,
    )
}

/// The step's `validationCriteria` failed (`issue` quotes the rule), or there are no notes to
/// check (`issue` is `None`).
pub(crate) fn validation(step_id: &StepId, issue: Option<&str>, autonomy: Autonomy) -> Finding {
    let (reason, message, fix, issue) = match issue {
        None => (
            ContractViolationReason::MissingRequiredOutput,
            format!(
                "Step '{step_id}' checks its output.notesMarkdown against validation rules, and no notes were sent."
            ),
            "Acknowledge the step again with output.notesMarkdown describing your work; the step's prompt says what the notes must contain.".to_owned(),
            "no notes".to_owned(),
        ),
        Some(issue) => (
            ContractViolationReason::InvalidRequiredOutput,
            format!("Step '{step_id}' notes fail a validation rule: {issue}"),
            "Revise output.notesMarkdown so that it meets the rule (the text is checked as sent: exact case unless the rule's flags say otherwise), then acknowledge again with the new ackToken and your whole output.".to_owned(),
            issue.to_owned(),
        ),
    };
    finding(
        GapReason::ContractViolation(reason),
        BlockerPointer::WorkflowStep {
            step_id: step_id.clone(),
        },
        message,
        fix,
        FindingDetail::Validation {
            step_id: step_id.clone(),
            issue,
        },
        autonomy,
        true,
    )
}

/// A required `wr.assessment` is missing (`missing`) or invalid (`issues`); `fix` says what a
/// valid one looks like.
pub(crate) fn assessment(
    step_id: &StepId,
    assessment_id: Option<&str>,
    missing: bool,
    issues: Vec<String>,
    fix: String,
    autonomy: Autonomy,
) -> Finding {
    let reason = if missing {
        ContractViolationReason::MissingRequiredOutput
    } else {
        ContractViolationReason::InvalidRequiredOutput
    };
    let message = format!("Step '{step_id}' needs an assessment: {}", issues.join(" "));
    finding(
        GapReason::ContractViolation(reason),
        BlockerPointer::WorkflowStep {
            step_id: step_id.clone(),
        },
        message,
        fix,
        FindingDetail::Assessment {
            step_id: step_id.clone(),
            assessment_id: assessment_id.map(str::to_owned),
            followup: None,
            issues,
        },
        autonomy,
        true,
    )
}

/// A consequence fired: a recorded level keeps the step pending until a follow-up is done.
pub(crate) fn followup(
    step_id: &StepId,
    assessment_id: &str,
    followup: AssessmentFollowup,
    autonomy: Autonomy,
) -> Finding {
    let message = format!(
        "Step '{step_id}' needs a follow-up before it can complete: assessment '{assessment_id}' rated '{}' as '{}'. {}",
        followup.dimension_id, followup.level, followup.guidance
    );
    let fix = format!(
        "Do the follow-up described, then assess again and acknowledge with a new `wr.assessment` artifact for '{assessment_id}'; the step completes once no rating triggers a follow-up (a rating of '{}' that still holds keeps it pending).",
        followup.level
    );
    finding(
        GapReason::ContractViolation(ContractViolationReason::InvalidRequiredOutput),
        BlockerPointer::WorkflowStep {
            step_id: step_id.clone(),
        },
        message,
        fix,
        FindingDetail::Assessment {
            step_id: step_id.clone(),
            assessment_id: Some(assessment_id.to_owned()),
            followup: Some(followup),
            issues: Vec::new(),
        },
        autonomy,
        true,
    )
}

/// A `for`/`forEach` loop reached by the walk after `step_id`'s ack cannot read its context
/// value (decision D141: missing is a missing required output, the wrong type an invalid one;
/// the pointer is the context key when it is delimiter-safe, else the acknowledged step).
pub(crate) fn loop_context(
    problem: LoopContextProblem,
    step_id: &StepId,
    autonomy: Autonomy,
) -> Finding {
    let reason = if problem.found.is_none() {
        ContractViolationReason::MissingRequiredOutput
    } else {
        ContractViolationReason::InvalidRequiredOutput
    };
    let pointer = match ContextKey::parse(&problem.key) {
        Ok(key) => BlockerPointer::ContextKey { key },
        Err(_) => BlockerPointer::WorkflowStep {
            step_id: step_id.clone(),
        },
    };
    let message = format!("After step '{step_id}', {}.", problem.describe());
    let fix = format!(
        "Acknowledge '{step_id}' again with your whole output and `context: {}` ({} {}), so the loop can decide its iterations.",
        problem.example(),
        if problem.expected == "array" {
            "an"
        } else {
            "a"
        },
        problem.expected
    );
    finding(
        GapReason::ContractViolation(reason),
        pointer,
        message,
        fix,
        FindingDetail::LoopContext(problem),
        autonomy,
        true,
    )
}

/// The step's attempt budget is spent: instead of the blocking `failed` findings the agent
/// could keep retrying, one user-only dependency that names them (decision D142).
pub(crate) fn attempt_budget(
    step_id: &StepId,
    max_attempts: u32,
    blocked_attempts: u32,
    failed: &[Finding],
    autonomy: Autonomy,
) -> Finding {
    let failed: Vec<String> = failed
        .iter()
        .map(|f| format!("{}: {}", f.reason.blocker_code(), f.message))
        .collect();
    let message = format!(
        "Step '{step_id}' was blocked {blocked_attempts} time(s) and its budget is {max_attempts} attempt(s), so the agent may not retry it alone. Still failing: {}",
        failed.join(" | ")
    );
    let fix = "Show the user the failed checks and ask how to proceed: fix the output together, or have the user change what the step needs (or switch the run to full_auto_never_stop to record the failures as gaps and go on). Then acknowledge again with the new ackToken; an acknowledgement that passes every check completes the step.".to_owned();
    finding(
        GapReason::UserOnlyDependency(UserOnlyDependencyReason::NeedsUserApproval),
        BlockerPointer::WorkflowStep {
            step_id: step_id.clone(),
        },
        message,
        fix,
        FindingDetail::AttemptBudget {
            step_id: step_id.clone(),
            max_attempts,
            blocked_attempts,
            failed,
        },
        autonomy,
        true,
    )
}

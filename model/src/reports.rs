//! User-only dependency reports (decision D41, locks §3 "User-only dependencies") and divergence
//! markers (decision D42, locks §1 "divergence_recorded"), written from the lock text.
//!
//! **User-only dependencies.** Any ack may carry `{kind: "wr.user_only_dependency", reason,
//! summary, nonAssumableChoice?, status?: needed|supplied}`: `reason` from the closed
//! `UserOnlyDependencyReason` set, `summary` non-empty and at most 1024 bytes, `nonAssumableChoice`
//! present iff the reason is `needs_user_choice`, and then one of the choices the step lists in
//! its `nonAssumableChoices` (locks §3: `needs_user_choice` exists only for a choice the workflow
//! marks non-assumable). A `needed` report (the default) is the reason
//! `user_only_dependency:<reason>` with pointer `workflow_step` (and details `{kind:
//! "non_assumable_choice", choice}` for a choice): blocked in the blocking modes, a critical gap
//! in never-stop. An invalid report is judged like an invalid required output
//! (`contract_violation:invalid_required_output`, pointer `output_contract
//! wr.contracts.user_only_dependency`, a required subject), so a malformed stop request never
//! silently advances. A `supplied` report resolves the branch's unresolved gaps of that reason
//! (and choice) by linkage: an `info` gap of the same reason and details for each.
//!
//! **Divergence markers.** `{kind: "workflow_divergence", reason, summary, relatedStepId?}`:
//! `reason` from the closed `DivergenceReason` set, `summary` non-empty and at most 1024 bytes,
//! `relatedStepId` a step of the workflow. On a step whose contract does not require markers an
//! invalid one is a `warning` gap (`contract_violation:invalid_required_output`) and is not
//! recorded; valid ones become `divergence_recorded` on the node the ack creates (a blocked
//! attempt drops them: they describe completed work). On a step whose contract requires markers
//! they are its required output, judged whole: one invalid marker makes the output invalid and
//! none is recorded, even when never-stop advances (D78).

use serde_json::{Map, Value};
use workrail_spec::blocker::{BlockerPointer, ReasonDetails};
use workrail_spec::budget::SUMMARY_MAX_BYTES;
use workrail_spec::closed::{
    Autonomy, DivergenceReason, GapSeverity, NonAssumableChoiceKind, UserOnlyDependencyReason,
};
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::event::{GapResolution, SessionEvent};
use workrail_spec::ids::{NodeId, RunId, StepId};
use workrail_spec::reason::{ContractViolationReason, GapReason, ReasonCode};
use workrail_spec::tools::OutputInput;

use crate::interpreter::Finding;
use crate::projections::{GapRecord, unresolved_gaps_in_run};

/// The artifact kind of a user-only dependency report.
pub const USER_DEPENDENCY_ARTIFACT_KIND: &str = "wr.user_only_dependency";
/// Its pack (no step may require it).
pub const USER_DEPENDENCY_CONTRACT_REF: &str = "wr.contracts.user_only_dependency";
/// The artifact kind of a divergence marker.
pub const DIVERGENCE_ARTIFACT_KIND: &str = "workflow_divergence";
/// Its pack.
pub const DIVERGENCE_CONTRACT_REF: &str = "wr.contracts.workflow_divergence";

/// A valid user-only dependency report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserDependency {
    pub reason: UserOnlyDependencyReason,
    pub choice: Option<NonAssumableChoiceKind>,
    pub supplied: bool,
}

/// A valid divergence marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    pub reason: DivergenceReason,
    pub summary: String,
    pub related_step_id: Option<StepId>,
}

fn of_kind<'a>(
    output: &'a OutputInput,
    kind: &'a str,
) -> impl Iterator<Item = &'a Map<String, Value>> + 'a {
    output
        .artifacts
        .iter()
        .filter(move |a| a.get("kind").and_then(Value::as_str) == Some(kind))
}

fn only_fields(artifact: &Map<String, Value>, fields: &[&str]) -> Result<(), String> {
    match artifact.keys().find(|k| !fields.contains(&k.as_str())) {
        Some(unknown) => Err(format!("unknown field {unknown}")),
        None => Ok(()),
    }
}

fn summary(artifact: &Map<String, Value>) -> Result<String, String> {
    artifact
        .get("summary")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && s.len() <= SUMMARY_MAX_BYTES)
        .map(str::to_owned)
        .ok_or_else(|| "summary must be a non-empty text of at most 1024 bytes".to_owned())
}

fn read_user_dependency(
    workflow: &CompiledWorkflowSnapshotV1,
    step: &StepId,
    artifact: &Map<String, Value>,
) -> Result<UserDependency, String> {
    only_fields(
        artifact,
        &["kind", "reason", "summary", "nonAssumableChoice", "status"],
    )?;
    let reason = artifact
        .get("reason")
        .and_then(Value::as_str)
        .and_then(UserOnlyDependencyReason::parse)
        .ok_or("reason is missing or not a user-only dependency reason")?;
    summary(artifact)?;
    let choice = match artifact.get("nonAssumableChoice") {
        None => None,
        Some(v) => Some(
            v.as_str()
                .and_then(NonAssumableChoiceKind::parse)
                .ok_or("nonAssumableChoice is not a non-assumable choice kind")?,
        ),
    };
    let supplied = match artifact.get("status").map(Value::as_str) {
        None | Some(Some("needed")) => false,
        Some(Some("supplied")) => true,
        Some(_) => return Err("status must be needed or supplied".into()),
    };
    let is_choice = reason == UserOnlyDependencyReason::NeedsUserChoice;
    match (is_choice, choice) {
        (true, None) => return Err("needs_user_choice names its nonAssumableChoice".into()),
        (false, Some(_)) => return Err("only needs_user_choice names a choice".into()),
        (true, Some(choice)) => {
            let listed = workflow
                .step(step)
                .is_some_and(|s| s.non_assumable_choices.contains(&choice));
            if !listed {
                return Err(format!(
                    "step {step} does not mark {choice} non-assumable: decide it and disclose the assumption"
                ));
            }
        }
        (false, None) => {}
    }
    Ok(UserDependency {
        reason,
        choice,
        supplied,
    })
}

fn read_divergence(
    workflow: &CompiledWorkflowSnapshotV1,
    artifact: &Map<String, Value>,
) -> Result<Divergence, String> {
    only_fields(artifact, &["kind", "reason", "summary", "relatedStepId"])?;
    let reason = artifact
        .get("reason")
        .and_then(Value::as_str)
        .and_then(DivergenceReason::parse)
        .ok_or("reason is missing or not a divergence reason")?;
    let summary = summary(artifact)?;
    let related_step_id = match artifact.get("relatedStepId") {
        None => None,
        Some(v) => {
            let id = v
                .as_str()
                .and_then(|s| StepId::parse(s).ok())
                .ok_or("relatedStepId is not a step id")?;
            if workflow.step(&id).is_none() {
                return Err(format!("relatedStepId {id} is not a step of this workflow"));
            }
            Some(id)
        }
    };
    Ok(Divergence {
        reason,
        summary,
        related_step_id,
    })
}

/// Every divergence marker of `output`, read against the workflow, in order.
pub fn read_divergences(
    workflow: &CompiledWorkflowSnapshotV1,
    output: &OutputInput,
) -> Vec<Result<Divergence, String>> {
    of_kind(output, DIVERGENCE_ARTIFACT_KIND)
        .map(|a| read_divergence(workflow, a))
        .collect()
}

fn step_requires(workflow: &CompiledWorkflowSnapshotV1, step: &StepId, pack: &str) -> bool {
    workflow
        .step(step)
        .and_then(|s| s.output.as_ref())
        .and_then(|o| o.contract_ref.as_deref())
        == Some(pack)
}

fn invalid_output(contract_ref: &str, message: String) -> Finding {
    Finding {
        reason: ReasonCode::new(GapReason::ContractViolation(
            ContractViolationReason::InvalidRequiredOutput,
        )),
        pointer: BlockerPointer::OutputContract {
            contract_ref: contract_ref.to_owned(),
        },
        message,
        details: None,
        found_moving: false,
        per_rule: false,
    }
}

/// What an ack's divergence markers lead to: the valid markers to record on the new node, and
/// (on a step that does not require markers) the `warning` finding for invalid ones.
pub fn divergences_at_ack(
    workflow: &CompiledWorkflowSnapshotV1,
    step: &StepId,
    output: &OutputInput,
) -> (Vec<Divergence>, Option<Finding>) {
    let readings = read_divergences(workflow, output);
    let invalid = readings.iter().find_map(|r| r.as_ref().err().cloned());
    let valid = readings.into_iter().filter_map(Result::ok).collect();
    if step_requires(workflow, step, DIVERGENCE_CONTRACT_REF) {
        // The markers are the step's required output, judged whole (D78): its own check
        // reports an invalid one, and an invalid output records none of them.
        return (if invalid.is_some() { Vec::new() } else { valid }, None);
    }
    let finding = invalid.map(|why| {
        invalid_output(
            DIVERGENCE_CONTRACT_REF,
            format!("an invalid {DIVERGENCE_ARTIFACT_KIND} was not recorded: {why}"),
        )
    });
    (valid, finding)
}

/// What an ack's user-only dependency reports find: the findings that block, the disclosures
/// (with their severities), and the branch's open gaps that `supplied` reports resolve.
#[allow(clippy::too_many_arguments)]
pub fn user_dependencies_at_ack(
    workflow: &CompiledWorkflowSnapshotV1,
    events: &[SessionEvent],
    run: &RunId,
    branch: &[NodeId],
    step: &StepId,
    output: &OutputInput,
    autonomy: Autonomy,
) -> (Vec<Finding>, Vec<(Finding, GapSeverity)>, Vec<GapRecord>) {
    let mut findings: Vec<Finding> = Vec::new();
    let mut supplied = Vec::new();
    for artifact in of_kind(output, USER_DEPENDENCY_ARTIFACT_KIND) {
        let finding = match read_user_dependency(workflow, step, artifact) {
            Err(why) => invalid_output(
                USER_DEPENDENCY_CONTRACT_REF,
                format!("an invalid {USER_DEPENDENCY_ARTIFACT_KIND}: {why}"),
            ),
            Ok(dependency) if dependency.supplied => {
                supplied.push(dependency);
                continue;
            }
            Ok(dependency) => Finding {
                reason: ReasonCode::new(GapReason::UserOnlyDependency(dependency.reason)),
                pointer: BlockerPointer::WorkflowStep {
                    step_id: step.clone(),
                },
                message: format!("step {step} needs the user: {}", dependency.reason.as_str()),
                details: dependency
                    .choice
                    .map(|choice| ReasonDetails::NonAssumableChoice { choice }),
                found_moving: false,
                per_rule: false,
            },
        };
        // Within one ack the same reason about the same subject is one finding.
        if !findings.iter().any(|f| {
            f.reason == finding.reason
                && f.pointer == finding.pointer
                && f.details == finding.details
        }) {
            findings.push(finding);
        }
    }
    let mut blocking = Vec::new();
    let mut disclosed = Vec::new();
    for finding in findings {
        let disposition = finding.reason.disposition(autonomy, true);
        if disposition.blocks {
            blocking.push(finding);
        } else if let Some(severity) = disposition.gap_severity {
            disclosed.push((finding, severity));
        }
    }
    let resolved = unresolved_gaps_in_run(events, run)
        .into_iter()
        .filter(|g| {
            matches!(g.resolution, GapResolution::Unresolved)
                && branch.contains(&g.node_id)
                && supplied.iter().any(|d| {
                    g.reason == GapReason::UserOnlyDependency(d.reason)
                        && g.details
                            == d.choice
                                .map(|choice| ReasonDetails::NonAssumableChoice { choice })
                })
        })
        .collect();
    (blocking, disclosed, resolved)
}

//! Capabilities at an acknowledgement (decisions D27, D39, D40; locks §1 "capability_observed",
//! §3 "Unified reason model" reason `capability_missing:*`, appendix "capability observation
//! provenance"), written from the lock text.
//!
//! **Observations.** Any ack may carry `wr.capability_observation` artifacts
//! `{capability, status: available|unavailable, evidence, remediation?, basis?: attempt|claim,
//! claimedBy?, failureCode?}`. A valid one becomes a `capability_observed` where the attempt
//! lands (the new node, or the attempted node when the ack is blocked), with provenance:
//! `basis: claim` is a `manual_claim` (weak; `claimedBy` defaults to `agent`); an attempt of the
//! probed capability on its probe step is `probe_step`; any other attempt is `attempted_use` in
//! a `workflow_step` (`failureCode` `unknown` when a failure names none). A probe step refuses a
//! claim about its own capability. An invalid observation is never recorded: on a step whose
//! contract requires observations it is an invalid required output, elsewhere a `warning` gap
//! (D42).
//!
//! **Dependencies.** A step *depends* on a capability iff the workflow declares the capability
//! `required`, the step is not a capability probe, and it comes after the capability's first
//! probe in compiled step order. Its status is decided by the ack's own strong observations (the
//! last one of the capability), else by the nearest node on the branch (the acknowledged one
//! first, then its ancestors) holding a strong observation, its latest by `EventIndex`
//! (`projections::branch_capability_status`). Without a strong `available` status, acking a dependent
//! step is `capability_missing:required_capability_unavailable` when the deciding observation
//! says `unavailable`, else `required_capability_unknown` (details `{kind: "capability",
//! capability}`, pointer `capability`). The reason table decides: blocked in the blocking modes;
//! in never-stop a critical gap, disclosed once per branch while an earlier `capability_missing`
//! disclosure of the same capability (whichever its reason) is unresolved on the branch (D77).
//!
//! **Reported unavailable (D75).** An ack whose own last strong observation of a `required`
//! capability says `unavailable` is `required_capability_unavailable` whatever its step (a probe
//! too): the reason is about the capability, and the reason table decides by the capability's
//! requirement alone (D39).
//!
//! **Preferred capabilities.** A strong `unavailable` observation of a `preferred` capability is
//! `required_capability_unavailable` about a subject the workflow does not require: a `warning`
//! gap in every mode (D39), disclosed once per branch likewise. Undeclared and disabled
//! capabilities are only recorded.
//!
//! **Resolution.** An ack whose last strong observation of a capability says `available`
//! resolves every unresolved `capability_missing` disclosure about that capability on the branch
//! where the attempt lands, each by an `info` gap of the same reason and details linking to it.

use serde_json::{Map, Value};
use workrail_spec::blocker::{BlockerPointer, ReasonDetails};
use workrail_spec::budget::LOOP_CONTROL_SUMMARY_MAX_BYTES;
use workrail_spec::closed::{
    AttemptContext, AttemptFailureCode, Autonomy, Capability, CapabilityRequirement,
    CapabilityStatus, ClaimValue, ClaimedBy, EnforcementGrade, GapSeverity, ProbeResult,
};
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::event::{GapResolution, Provenance, ProvenanceDetail, SessionEvent};
use workrail_spec::ids::{NodeId, RunId, StepId};
use workrail_spec::reason::{
    CapabilityMissingReason, ContractViolationReason, GapReason, ReasonCode,
};
use workrail_spec::tools::OutputInput;

use crate::interpreter::Finding;
use crate::projections::{GapRecord, RunDag, branch_capability_status, unresolved_gaps_in_run};

/// The artifact kind of a capability observation.
pub const OBSERVATION_ARTIFACT_KIND: &str = "wr.capability_observation";
/// The contract pack that validates capability observations.
pub const OBSERVATION_CONTRACT_REF: &str = "wr.contracts.capability_observation";
/// The template a `probe_step` provenance names.
pub const PROBE_TEMPLATE_ID: &str = "wr.templates.capability_probe";

/// The id prefix of every capability probe step (`capability_probe_<capability>`).
const PROBE_STEP_PREFIX: &str = "capability_probe_";

/// The capability a probe step observes, from its id.
fn probed_by(step: &StepId) -> Option<&str> {
    step.as_str().strip_prefix(PROBE_STEP_PREFIX)
}

/// A valid capability observation an ack reports, with the provenance it is recorded with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportedObservation {
    pub capability: Capability,
    pub status: CapabilityStatus,
    pub provenance: Provenance,
}

impl ReportedObservation {
    fn is_strong(&self) -> bool {
        self.provenance.enforcement_grade() == EnforcementGrade::Strong
    }
}

/// How one `wr.capability_observation` artifact reads at a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ObservationReading {
    Valid(ReportedObservation),
    /// Why the artifact is not a valid observation here.
    Invalid(String),
}

/// Every `wr.capability_observation` artifact of `output`, in order, read at `step`.
pub fn read_observations(step: &StepId, output: &OutputInput) -> Vec<ObservationReading> {
    output
        .artifacts
        .iter()
        .filter(|a| a.get("kind").and_then(Value::as_str) == Some(OBSERVATION_ARTIFACT_KIND))
        .map(|a| match read_one(step, a) {
            Ok(observation) => ObservationReading::Valid(observation),
            Err(why) => ObservationReading::Invalid(why),
        })
        .collect()
}

/// Whether `step`'s contract requires capability observations (a probe's does).
fn requires_observations(workflow: &CompiledWorkflowSnapshotV1, step: &StepId) -> bool {
    workflow
        .step(step)
        .and_then(|s| s.output.as_ref())
        .and_then(|o| o.contract_ref.as_deref())
        == Some(OBSERVATION_CONTRACT_REF)
}

/// Why the observations of `output` are not a valid required output at `step`, if they are not:
/// every one must be valid, and a probe's must include one about the capability it probes
/// (D76, as a loop's decision must name its loop, D45). `None` also when there are none (that
/// is a missing output, not an invalid one).
pub fn required_output_problem(step: &StepId, output: &OutputInput) -> Option<String> {
    let readings = read_observations(step, output);
    if let Some(why) = readings.iter().find_map(|r| match r {
        ObservationReading::Invalid(why) => Some(why.clone()),
        ObservationReading::Valid(_) => None,
    }) {
        return Some(why);
    }
    let probed = probed_by(step)?;
    let answered = readings
        .iter()
        .any(|r| matches!(r, ObservationReading::Valid(o) if o.capability.as_str() == probed));
    (!readings.is_empty() && !answered)
        .then(|| format!("the probe of {probed} needs an observation of {probed}"))
}

/// The observations an ack records at `step`, in order: its valid ones, except on a step that
/// requires observations and did not get a valid required output, where none is (D76: the
/// required output is judged whole, and the agent sends it again with the fix).
pub fn valid_observations(
    workflow: &CompiledWorkflowSnapshotV1,
    step: &StepId,
    output: &OutputInput,
) -> Vec<ReportedObservation> {
    if requires_observations(workflow, step) && required_output_problem(step, output).is_some() {
        return Vec::new();
    }
    read_observations(step, output)
        .into_iter()
        .filter_map(|r| match r {
            ObservationReading::Valid(o) => Some(o),
            ObservationReading::Invalid(_) => None,
        })
        .collect()
}

/// A non-empty string of at most 512 UTF-8 bytes (the pack's `evidence` and `remediation`).
fn bounded_text(value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|s| !s.is_empty() && s.len() <= LOOP_CONTROL_SUMMARY_MAX_BYTES)
}

fn read_one(step: &StepId, artifact: &Map<String, Value>) -> Result<ReportedObservation, String> {
    const FIELDS: [&str; 8] = [
        "kind",
        "capability",
        "status",
        "evidence",
        "remediation",
        "basis",
        "claimedBy",
        "failureCode",
    ];
    if let Some(unknown) = artifact.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!("unknown field {unknown}"));
    }
    let text = |field: &str| artifact.get(field).and_then(Value::as_str);
    let capability = text("capability")
        .and_then(Capability::parse)
        .ok_or("capability is missing or not a known capability")?;
    let available = match text("status") {
        Some("available") => true,
        Some("unavailable") => false,
        _ => return Err("status must be available or unavailable".into()),
    };
    if !artifact.get("evidence").is_some_and(bounded_text) {
        return Err("evidence must be a non-empty text of at most 512 bytes".into());
    }
    if artifact
        .get("remediation")
        .is_some_and(|v| !bounded_text(v))
    {
        return Err("remediation must be a non-empty text of at most 512 bytes".into());
    }
    let claim = match artifact.get("basis").map(Value::as_str) {
        None | Some(Some("attempt")) => false,
        Some(Some("claim")) => true,
        Some(_) => return Err("basis must be attempt or claim".into()),
    };
    let claimed_by = match artifact.get("claimedBy") {
        None => None,
        Some(v) => Some(
            v.as_str()
                .and_then(ClaimedBy::parse)
                .ok_or("claimedBy must be agent or user")?,
        ),
    };
    let failure_code = match artifact.get("failureCode") {
        None => None,
        Some(v) => Some(
            v.as_str()
                .and_then(AttemptFailureCode::parse)
                .ok_or("failureCode is not a known failure code")?,
        ),
    };
    if claimed_by.is_some() && !claim {
        return Err("claimedBy belongs to a claim".into());
    }
    if failure_code.is_some() && (claim || available) {
        return Err("failureCode belongs to a failed attempt".into());
    }
    let on_its_probe = probed_by(step) == Some(capability.as_str());
    if claim && on_its_probe {
        return Err(format!(
            "the probe of {capability} needs an attempt, not a claim"
        ));
    }
    let status = if available {
        CapabilityStatus::Available
    } else {
        CapabilityStatus::Unavailable
    };
    let result = if available {
        ProbeResult::Success
    } else {
        ProbeResult::Failure
    };
    let detail = if claim {
        ProvenanceDetail::ManualClaim {
            claimed_by: claimed_by.unwrap_or(ClaimedBy::Agent),
            claim: if available {
                ClaimValue::Available
            } else {
                ClaimValue::Unavailable
            },
        }
    } else if on_its_probe {
        ProvenanceDetail::ProbeStep {
            probe_template_id: PROBE_TEMPLATE_ID.to_owned(),
            probe_step_id: step.clone(),
            result,
        }
    } else {
        ProvenanceDetail::AttemptedUse {
            attempt_context: AttemptContext::WorkflowStep,
            result,
            failure_code: (!available).then(|| failure_code.unwrap_or(AttemptFailureCode::Unknown)),
        }
    };
    Ok(ReportedObservation {
        capability,
        status,
        provenance: Provenance { detail },
    })
}

/// The status an ack's own observations give `capability`: its last strong one, if any.
fn reported_status(
    reported: &[ReportedObservation],
    capability: Capability,
) -> Option<CapabilityStatus> {
    reported
        .iter()
        .rfind(|o| o.capability == capability && o.is_strong())
        .map(|o| o.status)
}

/// The required capabilities `step` depends on, in `Capability` order.
pub fn dependencies(workflow: &CompiledWorkflowSnapshotV1, step: &StepId) -> Vec<Capability> {
    if probed_by(step).is_some() {
        return Vec::new();
    }
    let position = |id: &StepId| workflow.body.steps.iter().position(|s| &s.step_id == id);
    let Some(at) = position(step) else {
        return Vec::new();
    };
    workflow
        .body
        .capabilities
        .iter()
        .filter(|(_, requirement)| **requirement == CapabilityRequirement::Required)
        .filter_map(|(capability, _)| {
            let first_probe = workflow
                .body
                .steps
                .iter()
                .position(|s| probed_by(&s.step_id) == Some(capability.as_str()))?;
            (at > first_probe).then_some(*capability)
        })
        .collect()
}

fn capability_reason(reason: CapabilityMissingReason) -> ReasonCode {
    ReasonCode::new(GapReason::CapabilityMissing(reason))
}

/// An unresolved disclosure (not itself a resolution) on `branch`.
fn open_disclosures(events: &[SessionEvent], run: &RunId, branch: &[NodeId]) -> Vec<GapRecord> {
    unresolved_gaps_in_run(events, run)
        .into_iter()
        .filter(|g| {
            matches!(g.resolution, GapResolution::Unresolved) && branch.contains(&g.node_id)
        })
        .collect()
}

/// What acknowledging `step` at `node` with the valid observations `reported` finds about
/// capabilities: the findings that block, and the disclosures (with their severities) to record.
#[allow(clippy::too_many_arguments)]
pub fn at_ack(
    workflow: &CompiledWorkflowSnapshotV1,
    events: &[SessionEvent],
    dag: &RunDag,
    run: &RunId,
    node: &NodeId,
    step: &StepId,
    reported: &[ReportedObservation],
    autonomy: Autonomy,
) -> (Vec<Finding>, Vec<(Finding, GapSeverity)>) {
    let branch = dag.ancestry(node);
    let open = open_disclosures(events, run, &branch);
    // One disclosure per capability and branch until resolved (D40, D77): whichever
    // `capability_missing` reason disclosed it, the capability is already disclosed.
    let already = |_: ReasonCode, details: &ReasonDetails| {
        open.iter().any(|g| {
            matches!(g.reason, GapReason::CapabilityMissing(_))
                && g.details.as_ref() == Some(details)
        })
    };
    let mut blocking = Vec::new();
    let mut disclosed = Vec::new();
    // The capabilities judged here: those the step depends on, and every required capability
    // the ack itself reports unavailable (D75: the reason is about the capability, so it arises
    // where the observation is reported, a probe included).
    let mut judged: Vec<Capability> = dependencies(workflow, step);
    for (capability, requirement) in &workflow.body.capabilities {
        if *requirement == CapabilityRequirement::Required
            && reported_status(reported, *capability) == Some(CapabilityStatus::Unavailable)
            && !judged.contains(capability)
        {
            judged.push(*capability);
        }
    }
    judged.sort();
    for capability in judged {
        let status = reported_status(reported, capability)
            .unwrap_or_else(|| branch_capability_status(events, dag, run, node, capability));
        let (reason, what) = match status {
            CapabilityStatus::Available => continue,
            CapabilityStatus::Unavailable => (
                CapabilityMissingReason::RequiredCapabilityUnavailable,
                "was observed unavailable",
            ),
            CapabilityStatus::Unknown => (
                CapabilityMissingReason::RequiredCapabilityUnknown,
                "is not shown available on this branch",
            ),
        };
        let reason = capability_reason(reason);
        let details = ReasonDetails::Capability { capability };
        let finding = Finding {
            reason,
            pointer: BlockerPointer::Capability { capability },
            message: format!(
                "step {step} needs the required capability {} and it {what}",
                capability.as_str()
            ),
            details: Some(details.clone()),
            found_moving: false,
            per_rule: false,
        };
        let disposition = reason.disposition(autonomy, true);
        if disposition.blocks {
            blocking.push(finding);
            continue;
        }
        if let (Some(severity), false) = (disposition.gap_severity, already(reason, &details)) {
            disclosed.push((finding, severity));
        }
    }
    // A preferred capability reported unavailable: the enhanced path was not applied (D39).
    let reason = capability_reason(CapabilityMissingReason::RequiredCapabilityUnavailable);
    for (capability, requirement) in &workflow.body.capabilities {
        if *requirement != CapabilityRequirement::Preferred
            || reported_status(reported, *capability) != Some(CapabilityStatus::Unavailable)
        {
            continue;
        }
        let details = ReasonDetails::Capability {
            capability: *capability,
        };
        let disposition = reason.disposition(autonomy, false);
        if let (Some(severity), false) = (disposition.gap_severity, already(reason, &details)) {
            disclosed.push((
                Finding {
                    reason,
                    pointer: BlockerPointer::Capability {
                        capability: *capability,
                    },
                    message: format!(
                        "the preferred capability {} was observed unavailable",
                        capability.as_str()
                    ),
                    details: Some(details),
                    found_moving: false,
                    per_rule: false,
                },
                severity,
            ));
        }
    }
    (blocking, disclosed)
}

/// The finding for invalid observations on a step that does not require them (D42): one
/// `warning` disclosure per ack, and none when every observation is valid.
pub fn invalid_optional(
    workflow: &CompiledWorkflowSnapshotV1,
    step: &StepId,
    output: &OutputInput,
) -> Option<Finding> {
    if requires_observations(workflow, step) {
        return None;
    }
    let why = read_observations(step, output)
        .into_iter()
        .find_map(|r| match r {
            ObservationReading::Invalid(why) => Some(why),
            ObservationReading::Valid(_) => None,
        })?;
    Some(Finding {
        reason: ReasonCode::new(GapReason::ContractViolation(
            ContractViolationReason::InvalidRequiredOutput,
        )),
        pointer: BlockerPointer::OutputContract {
            contract_ref: OBSERVATION_CONTRACT_REF.to_owned(),
        },
        message: format!("an invalid {OBSERVATION_ARTIFACT_KIND} was not recorded: {why}"),
        details: None,
        found_moving: false,
        per_rule: false,
    })
}

/// The gaps an ack's observations resolve on the branch ending at `landing`: every unresolved
/// `capability_missing` disclosure about a capability whose last strong observation in the ack
/// says `available`, with the gap it resolves.
pub fn resolved_by(
    events: &[SessionEvent],
    run: &RunId,
    landing: &[NodeId],
    reported: &[ReportedObservation],
) -> Vec<GapRecord> {
    open_disclosures(events, run, landing)
        .into_iter()
        .filter_map(|g| {
            let GapReason::CapabilityMissing(_) = g.reason else {
                return None;
            };
            let Some(ReasonDetails::Capability { capability }) = g.details else {
                return None;
            };
            (reported_status(reported, capability) == Some(CapabilityStatus::Available))
                .then_some(g)
        })
        .collect()
}

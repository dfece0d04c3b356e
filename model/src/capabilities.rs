//! Required capabilities at an acknowledgement (decision D40, locks §3 "Unified reason model",
//! reason `capability_missing:*`), written from the lock text.
//!
//! A step *depends* on a capability iff the workflow declares the capability `required`, the
//! step is not a capability probe, and it comes after the capability's first probe in compiled
//! step order. Acknowledging a dependent step while the branch has no strong `available`
//! observation of the capability is `capability_missing:required_capability_unknown`, about that
//! capability (`details {kind: "capability", capability}`, pointer `capability`). The reason
//! table decides: blocked in the blocking modes; in never-stop a gap, disclosed once per branch
//! while an earlier disclosure of the same capability is unresolved on the branch.
//!
//! The status on a branch is decided by the nearest node (the acknowledged one first, then its
//! ancestors) holding a strong observation of the capability: unlocked iff its latest strong
//! observation says `available` (`projections::capability_unlocked`).
//!
//! **Scope:** the model does not yet turn `wr.capability_observation` artifacts into
//! observations, and so never `required_capability_unavailable` either.

use workrail_spec::blocker::{BlockerPointer, ReasonDetails};
use workrail_spec::closed::{Autonomy, Capability, CapabilityRequirement, GapSeverity};
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::event::SessionEvent;
use workrail_spec::ids::{NodeId, RunId, StepId};
use workrail_spec::reason::{CapabilityMissingReason, GapReason, ReasonCode};

use crate::interpreter::Finding;
use crate::projections::{RunDag, capability_unlocked, unresolved_gaps_in_run};
use workrail_spec::closed::EnforcementGrade;
use workrail_spec::event::EventData;

/// Whether the branch ending at `branch[0]` shows `capability` available: the nearest node with
/// a strong observation decides.
fn unlocked_on(
    events: &[SessionEvent],
    run: &RunId,
    branch: &[NodeId],
    capability: Capability,
) -> bool {
    let strong_at = |node: &NodeId| {
        events.iter().any(|e| match e.data() {
            EventData::CapabilityObserved(o) => {
                e.scope().run_id() == Some(run)
                    && e.scope().node_id() == Some(node)
                    && o.capability == capability
                    && o.provenance.enforcement_grade() == EnforcementGrade::Strong
            }
            _ => false,
        })
    };
    branch
        .iter()
        .find(|n| strong_at(n))
        .is_some_and(|n| capability_unlocked(events, run, n, capability))
}

/// The id prefix of every capability probe step (`capability_probe_<capability>`).
const PROBE_STEP_PREFIX: &str = "capability_probe_";

/// The capability a probe step observes, from its id.
fn probed_by(step: &StepId) -> Option<&str> {
    step.as_str().strip_prefix(PROBE_STEP_PREFIX)
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

/// What acknowledging `step` at `node` finds about its required capabilities: the findings
/// that block, and the disclosures (with their severities) to record.
pub fn at_ack(
    workflow: &CompiledWorkflowSnapshotV1,
    events: &[SessionEvent],
    dag: &RunDag,
    run: &RunId,
    node: &NodeId,
    step: &StepId,
    autonomy: Autonomy,
) -> (Vec<Finding>, Vec<(Finding, GapSeverity)>) {
    let reason = ReasonCode::new(GapReason::CapabilityMissing(
        CapabilityMissingReason::RequiredCapabilityUnknown,
    ));
    let branch = dag.ancestry(node);
    let open = unresolved_gaps_in_run(events, run);
    let mut blocking = Vec::new();
    let mut disclosed = Vec::new();
    for capability in dependencies(workflow, step) {
        if unlocked_on(events, run, &branch, capability) {
            continue;
        }
        let details = ReasonDetails::Capability { capability };
        let finding = Finding {
            reason,
            pointer: BlockerPointer::Capability { capability },
            message: format!(
                "step {step} needs the required capability {} and nothing on this branch shows it available",
                capability.as_str()
            ),
            details: Some(details.clone()),
        };
        let disposition = reason.disposition(autonomy, true);
        if disposition.blocks {
            blocking.push(finding);
            continue;
        }
        let already = open.iter().any(|g| {
            g.reason == reason.gap_reason()
                && g.details.as_ref() == Some(&details)
                && branch.contains(&g.node_id)
        });
        if let (Some(severity), false) = (disposition.gap_severity, already) {
            disclosed.push((finding, severity));
        }
    }
    (blocking, disclosed)
}

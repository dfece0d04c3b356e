//! Capability status (locks §1 "capability_observed", appendix "capability observation
//! provenance"; `L-CAP-CURRENT-STATUS`, `L-CAP-WEAK-NO-UNLOCK`, `L-CAP-OBSERVED-ONLY`).
//!
//! The status of `(node, capability)` is the latest `capability_observed` for that pair by
//! `EventIndex`; with no observation it is `unknown`. Only strong provenance (`probe_step`,
//! `attempted_use`) is enforcement-grade. **Decision:** a required capability is *unlocked* at a
//! node iff the latest *strong* observation for the pair says `available`; weak observations
//! (`manual_claim`) inform the status shown to users but neither unlock nor re-lock.

use workrail_spec::closed::{Capability, CapabilityStatus, EnforcementGrade};
use workrail_spec::event::{EventData, SessionEvent};
use workrail_spec::ids::{EventIndex, NodeId, RunId};

use super::RunDag;

/// The latest observation of a capability at a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CapabilityObservation {
    pub status: CapabilityStatus,
    pub grade: EnforcementGrade,
    pub observed_at: EventIndex,
}

fn observations<'a>(
    events: &'a [SessionEvent],
    run_id: &'a RunId,
    node_id: &'a NodeId,
    capability: Capability,
) -> impl Iterator<Item = CapabilityObservation> + 'a {
    events.iter().filter_map(move |event| {
        let EventData::CapabilityObserved(obs) = event.data() else {
            return None;
        };
        let here =
            event.scope().run_id() == Some(run_id) && event.scope().node_id() == Some(node_id);
        (here && obs.capability == capability).then(|| CapabilityObservation {
            status: obs.status,
            grade: obs.provenance.enforcement_grade(),
            observed_at: event.event_index(),
        })
    })
}

/// The current status of `capability` at the node: the latest observation, or `unknown`.
pub fn capability_status(
    events: &[SessionEvent],
    run_id: &RunId,
    node_id: &NodeId,
    capability: Capability,
) -> CapabilityStatus {
    observations(events, run_id, node_id, capability)
        .max_by_key(|o| o.observed_at)
        .map_or(CapabilityStatus::Unknown, |o| o.status)
}

/// Whether a required capability is unlocked at the node: the latest strong observation says
/// `available`.
pub fn capability_unlocked(
    events: &[SessionEvent],
    run_id: &RunId,
    node_id: &NodeId,
    capability: Capability,
) -> bool {
    observations(events, run_id, node_id, capability)
        .filter(|o| o.grade == EnforcementGrade::Strong)
        .max_by_key(|o| o.observed_at)
        .is_some_and(|o| o.status == CapabilityStatus::Available)
}

/// The enforcement-grade status of `capability` on the branch ending at `node` (D27, D40): the
/// latest strong observation of the nearest node on its ancestry (the node itself first) that
/// holds one; `unknown` without one. Weak claims never count.
pub fn branch_capability_status(
    events: &[SessionEvent],
    dag: &RunDag,
    run_id: &RunId,
    node_id: &NodeId,
    capability: Capability,
) -> CapabilityStatus {
    dag.ancestry(node_id)
        .iter()
        .find_map(|n| {
            observations(events, run_id, n, capability)
                .filter(|o| o.grade == EnforcementGrade::Strong)
                .max_by_key(|o| o.observed_at)
        })
        .map_or(CapabilityStatus::Unknown, |o| o.status)
}

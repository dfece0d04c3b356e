//! Gaps and their resolution (locks §3 "Gaps: the never-stop disclosure primitive";
//! `L-GAP-RESOLVED-PROJECTION`).
//!
//! A gap is *resolved* iff a later `gap_recorded` (anywhere in the session) carries
//! `resolution: {kind: "resolves", resolvesGapId: <its id>}`. Nothing is ever mutated: a
//! resolving record is itself a gap, and is unresolved unless something later resolves it too
//! (a resolution is usually recorded with severity `info`, so it does not weigh on run status).

use workrail_spec::blocker::ReasonDetails;
use workrail_spec::closed::GapSeverity;
use workrail_spec::event::{EventData, GapResolution, SessionEvent};
use workrail_spec::ids::{EventIndex, GapId, NodeId, RunId};
use workrail_spec::reason::GapReason;

/// One `gap_recorded`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GapRecord {
    pub gap_id: GapId,
    pub run_id: RunId,
    pub node_id: NodeId,
    pub severity: GapSeverity,
    pub reason: GapReason,
    pub resolution: GapResolution,
    pub recorded_at: EventIndex,
    /// The structured details the reason's lock asks for (a loop limit's loop and iteration).
    pub details: Option<ReasonDetails>,
}

/// Every gap of the session, in `EventIndex` order.
pub fn gap_records(events: &[SessionEvent]) -> Vec<GapRecord> {
    events
        .iter()
        .filter_map(|event| {
            let EventData::GapRecorded(gap) = event.data() else {
                return None;
            };
            Some(GapRecord {
                gap_id: gap.gap_id.clone(),
                run_id: event.scope().run_id()?.clone(),
                node_id: event.scope().node_id()?.clone(),
                severity: gap.severity,
                reason: gap.reason,
                resolution: gap.resolution.clone(),
                recorded_at: event.event_index(),
                details: gap.details.clone(),
            })
        })
        .collect()
}

/// True iff a gap recorded after `gap` resolves it.
pub fn is_resolved(events: &[SessionEvent], gap: &GapRecord) -> bool {
    gap_records(events).iter().any(|later| {
        later.recorded_at > gap.recorded_at
            && matches!(&later.resolution,
                GapResolution::Resolves { resolves_gap_id } if *resolves_gap_id == gap.gap_id)
    })
}

/// The unresolved gaps of a run, in `EventIndex` order.
pub fn unresolved_gaps_in_run(events: &[SessionEvent], run_id: &RunId) -> Vec<GapRecord> {
    gap_records(events)
        .into_iter()
        .filter(|g| &g.run_id == run_id && !is_resolved(events, g))
        .collect()
}

/// The unresolved gaps recorded on one node, in `EventIndex` order.
pub fn unresolved_gaps_at_node(
    events: &[SessionEvent],
    run_id: &RunId,
    node_id: &NodeId,
) -> Vec<GapRecord> {
    unresolved_gaps_in_run(events, run_id)
        .into_iter()
        .filter(|g| &g.node_id == node_id)
        .collect()
}

//! Recorded ack attempts per node (locks §1 "advance_recorded"; `L-EVENT-ADVANCE-RECORDED`).
//!
//! `advance_recorded` is node-scoped (the node the agent attempted to advance) and keyed by
//! `attemptId`; a replay of an attempt returns its record, never a recomputation.

use workrail_spec::event::{AdvanceOutcome, EventData, SessionEvent};
use workrail_spec::ids::{AttemptId, EventIndex, NodeId, RunId};

/// One recorded attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    pub attempt_id: AttemptId,
    pub outcome: AdvanceOutcome,
    pub recorded_at: EventIndex,
}

/// The attempts recorded at a node, in `EventIndex` order.
pub fn advance_records(
    events: &[SessionEvent],
    run_id: &RunId,
    node_id: &NodeId,
) -> Vec<AttemptRecord> {
    events
        .iter()
        .filter(|e| e.scope().run_id() == Some(run_id) && e.scope().node_id() == Some(node_id))
        .filter_map(|e| match e.data() {
            EventData::AdvanceRecorded(record) => Some(AttemptRecord {
                attempt_id: record.attempt_id.clone(),
                outcome: record.outcome.clone(),
                recorded_at: e.event_index(),
            }),
            _ => None,
        })
        .collect()
}

/// The recorded outcome of `attempt_id` at the node, if that attempt was made.
pub fn advance_outcome(
    events: &[SessionEvent],
    run_id: &RunId,
    node_id: &NodeId,
    attempt_id: &AttemptId,
) -> Option<AttemptRecord> {
    advance_records(events, run_id, node_id)
        .into_iter()
        .find(|r| &r.attempt_id == attempt_id)
}

//! The preferred tip of a run (locks §2 "Preferred tip policy"; `L-TIP-*`).
//!
//! 1. Candidates are the run's leaves (nodes without children).
//! 2. A leaf's *last-activity* is the max `EventIndex` among the events that touch its reachable
//!    history, the history being the leaf and all its ancestors. An event touches the history
//!    when it is scoped to one of those nodes (`node_created`, outputs, gaps, capability
//!    observations, preference changes, divergences, decision traces, `advance_recorded`, and a
//!    node-scoped `observation_recorded`), or when it is an `edge_created` whose `toNodeId` is in
//!    the history. Edges leaving the history towards other branches do not touch it.
//! 3. The highest last-activity wins.
//! 4. Ties: the higher `node_created` index wins, then the lexically greater `NodeId`.
//!
//! **Decision (tie-break direction).** The lock names the tie-breakers but not their direction.
//! Both are taken as "latest": the later-created leaf wins, in line with "highest last-activity
//! wins" and with "latest tip of its branch" in the contract. The `NodeId` tie-break follows the
//! same direction (greater wins); since every event has its own `EventIndex`, two leaves never
//! share a `node_created` index in a well-formed log, so this last rule only makes the order total.
//! Wall-clock time is never used.

use std::collections::BTreeSet;

use workrail_spec::event::{EventData, SessionEvent};
use workrail_spec::ids::{EventIndex, NodeId};

use super::dag::RunDag;

/// A leaf with the values the policy compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreferredTip {
    pub node_id: NodeId,
    pub last_activity: EventIndex,
    /// The `node_created` index of the leaf.
    pub created_at: EventIndex,
}

/// The max `EventIndex` among the events touching `node_id`'s reachable history.
pub fn last_activity(
    events: &[SessionEvent],
    dag: &RunDag,
    node_id: &NodeId,
) -> Option<EventIndex> {
    let history: BTreeSet<NodeId> = dag.ancestry(node_id).into_iter().collect();
    if history.is_empty() {
        return None;
    }
    events
        .iter()
        .filter(|e| e.scope().run_id() == Some(&dag.run_id))
        .filter(|e| {
            let scoped_to_history = e.scope().node_id().is_some_and(|n| history.contains(n));
            let edge_into_history = matches!(
                e.data(),
                EventData::EdgeCreated(edge) if history.contains(&edge.to_node_id)
            );
            scoped_to_history || edge_into_history
        })
        .map(SessionEvent::event_index)
        .max()
}

/// Every leaf of the run with its last-activity, in `NodeId` order.
pub fn leaf_activities(events: &[SessionEvent], dag: &RunDag) -> Vec<PreferredTip> {
    dag.leaves()
        .into_iter()
        .filter_map(|leaf| {
            Some(PreferredTip {
                node_id: leaf.node_id.clone(),
                last_activity: last_activity(events, dag, &leaf.node_id)?,
                created_at: leaf.created_at,
            })
        })
        .collect()
}

/// The preferred tip, or `None` when the run has no nodes.
pub fn preferred_tip(events: &[SessionEvent], dag: &RunDag) -> Option<PreferredTip> {
    leaf_activities(events, dag).into_iter().max_by(|a, b| {
        (a.last_activity, a.created_at, &a.node_id).cmp(&(
            b.last_activity,
            b.created_at,
            &b.node_id,
        ))
    })
}

//! Effective preferences at a node (locks §4 "Durability + precedence"; contract
//! "Node-attached effective preferences"; `L-PREF-NODE-ATTACHED`, `L-PREF-PRECEDENCE`).
//!
//! Precedence: node-attached, then the session baseline, then the global defaults.
//!
//! The node-attached snapshot is the `effective` of the latest `preferences_changed` on the
//! node's ancestor chain that was in effect for the node. A change recorded on the node itself
//! always counts. A change recorded on a proper ancestor A counts only if it was recorded before
//! A's child on the path to the node was created. **Decision:** this reads "applies to descendant
//! nodes until another preference change occurs" together with "replaying an older stateToken
//! replays with the preference state that was effective at that node": a change made on A after a
//! rewind (a user changing modes on an older node, then forking) applies to the new branch, never
//! retroactively to branches that already existed (D43: a blocked ack records its change on the
//! attempted node, which may already have children).

use workrail_spec::event::{EffectivePreferences, EventData, SessionEvent};
use workrail_spec::ids::{EventIndex, NodeId};

use super::dag::RunDag;

/// The non-node layers of the precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreferenceDefaults {
    /// Copied from the global defaults when the session's work started (`L-PREF-GLOBAL-COPIED`).
    pub session_baseline: Option<EffectivePreferences>,
    pub global: EffectivePreferences,
}

/// The effective preferences at `node_id` (the defaults if the node is unknown or has none).
pub fn effective_preferences(
    events: &[SessionEvent],
    dag: &RunDag,
    node_id: &NodeId,
    defaults: &PreferenceDefaults,
) -> EffectivePreferences {
    let path = dag.ancestry(node_id);
    let mut latest: Option<(EventIndex, EffectivePreferences)> = None;
    for (i, holder) in path.iter().enumerate() {
        // For an ancestor, only changes made before the path towards the node continued.
        let cutoff = match i {
            0 => None,
            _ => dag.node(&path[i - 1]).map(|child| child.created_at),
        };
        for event in events {
            let EventData::PreferencesChanged(change) = event.data() else {
                continue;
            };
            let attached = event.scope().run_id() == Some(&dag.run_id)
                && event.scope().node_id() == Some(holder);
            let in_effect = cutoff.is_none_or(|c| event.event_index() < c);
            let later = latest.is_none_or(|(at, _)| event.event_index() > at);
            if attached && in_effect && later {
                latest = Some((event.event_index(), change.effective));
            }
        }
    }
    latest
        .map(|(_, effective)| effective)
        .or(defaults.session_baseline)
        .unwrap_or(defaults.global)
}

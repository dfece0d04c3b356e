//! Read-only facts about one run, derived from a prefix of committed events.
//!
//! Responses are pure functions of "the events committed when the response was first given"
//! (a prefix of the log), so replaying an attempt rebuilds byte-identical responses from
//! recorded facts without recomputing anything (locks §1.2 "Replay is fact-returning").

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use workrail_spec::closed::EdgeKind;
use workrail_spec::event::{AdvanceRecorded, EffectivePreferences, EventData, SessionEvent};
use workrail_spec::ids::{AttemptId, EventId, NodeId, RunId, SessionId};

use crate::projections::{
    NodeInfo, Projector, RunView, SessionProjection, TipPolicy, effective_preferences, project,
    project_in_two_passes,
};

/// How many sessions' latest projections [`ProjectionMemo`] keeps at most, whatever their size.
const MEMO_SESSIONS: usize = 64;

/// What a projection holds in memory per projected event, at most (D205): run DAG nodes and
/// edges, current outputs, positions. Measured at about 170 bytes per event on nested loops
/// (`impl/tests/projection_memory.rs` holds the estimate to at least what is held).
pub const PROJECTED_BYTES_PER_EVENT: usize = 200;

/// The estimated bytes of a projection of `applied` events.
pub fn projection_bytes(applied: usize) -> usize {
    applied
        .saturating_mul(PROJECTED_BYTES_PER_EVENT)
        .saturating_add(1024)
}

/// The projection of each session's latest log seen, kept extendable: the several reads of one
/// advance project the log once, and the next call on the same session projects only the events
/// appended since (a [`Projector`]). The key is the session, the log length and the last event's
/// id: committed events are append-only, so that names one exact log (a log rewritten under the
/// same length would have a different last event id).
///
/// Bounded by bytes (D205): once the projections' estimated bytes pass the budget (the
/// `projections` share of `WORKRAIL_CACHE_MB`), the least recently used leave first; the one
/// just used always stays, as the session cache keeps its newest (D94), so a long session is
/// extended, never projected whole on every call.
#[derive(Debug)]
pub struct ProjectionMemo {
    latest: Mutex<MemoInner>,
    budget: usize,
}

#[derive(Debug, Default)]
struct MemoInner {
    entries: HashMap<SessionId, Memoized>,
    /// The estimated bytes of every entry.
    bytes: usize,
    /// A counter: an entry's `used` is the value when it was last used.
    clock: u64,
}

/// The last event's id of the projected log, its projector, its estimated bytes and when it
/// was last used.
#[derive(Debug)]
struct Memoized {
    last: EventId,
    projector: Projector,
    bytes: usize,
    used: u64,
    /// The projection of the shorter prefix a replay last asked for (its length and last
    /// event id): resending an old token projects that prefix once, and neither it nor the
    /// next live call projects the whole log again (D214).
    replay: Option<(usize, EventId, Arc<SessionProjection>)>,
}

impl Memoized {
    fn bytes(&self) -> usize {
        projection_bytes(self.projector.applied())
            + self
                .replay
                .as_ref()
                .map_or(0, |(len, _, _)| projection_bytes(*len))
    }
}

impl Default for ProjectionMemo {
    fn default() -> Self {
        Self::with_budget(crate::store::CacheBudget::default().projections)
    }
}

impl MemoInner {
    /// Records `session`'s entry as just used with `bytes`, then evicts the least recently used
    /// others while over `budget`.
    fn settle(&mut self, session: &SessionId, bytes: usize, budget: usize) {
        self.clock += 1;
        let clock = self.clock;
        if let Some(entry) = self.entries.get_mut(session) {
            self.bytes = self.bytes.saturating_sub(entry.bytes).saturating_add(bytes);
            entry.bytes = bytes;
            entry.used = clock;
        }
        while self.bytes > budget || self.entries.len() > MEMO_SESSIONS {
            let oldest = self
                .entries
                .iter()
                .filter(|(id, _)| *id != session)
                .min_by_key(|(_, e)| e.used)
                .map(|(id, _)| id.clone());
            let Some(oldest) = oldest else {
                break;
            };
            if let Some(gone) = self.entries.remove(&oldest) {
                self.bytes = self.bytes.saturating_sub(gone.bytes);
            }
        }
    }
}

impl ProjectionMemo {
    /// A memo whose projections stay under `budget` estimated bytes (the newest excepted).
    pub fn with_budget(budget: usize) -> Self {
        Self {
            latest: Mutex::new(MemoInner::default()),
            budget,
        }
    }

    /// The sessions whose projections are kept, and their estimated bytes.
    pub fn held(&self) -> (usize, usize) {
        let inner = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        (inner.entries.len(), inner.bytes)
    }

    /// Facts of `events` like [`ProjectionMemo::facts`] when this session's projection is kept
    /// (then extended by what was appended), else projected once without keeping it: a pass
    /// over many sessions (`resume_session`'s first call) must not push out the projections of
    /// the sessions being advanced.
    pub fn facts_if_kept<'a>(&self, session: &SessionId, events: &'a [SessionEvent]) -> Facts<'a> {
        let kept = self
            .latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entries
            .contains_key(session);
        if kept {
            self.facts(session, events)
        } else {
            Facts::new(events)
        }
    }

    /// Facts of `events`, a session's log (or a prefix of it).
    pub fn facts<'a>(&self, session: &SessionId, events: &'a [SessionEvent]) -> Facts<'a> {
        let Some(last) = events.last() else {
            return Facts::new(events);
        };
        let mut inner = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = inner.entries.get_mut(session) {
            let applied = entry.projector.applied();
            if applied == events.len() && &entry.last == last.event_id() {
                let projection = Arc::clone(entry.projector.projection());
                let bytes = entry.bytes();
                inner.settle(session, bytes, self.budget);
                return Facts { events, projection };
            }
            // A shorter log is a replay's prefix (checked by its last id, as the live log is):
            // it gets its own slot, so the live projection stays for the calls that extend it.
            if events.len() < applied {
                let projection = match &entry.replay {
                    Some((len, id, projection))
                        if *len == events.len() && id == last.event_id() =>
                    {
                        Arc::clone(projection)
                    }
                    _ => {
                        let projection = project_prefix(events);
                        entry.replay = Some((
                            events.len(),
                            last.event_id().clone(),
                            Arc::clone(&projection),
                        ));
                        projection
                    }
                };
                let bytes = entry.bytes();
                inner.settle(session, bytes, self.budget);
                return Facts { events, projection };
            }
            // The same log, longer: project only what was appended.
            let extends = applied > 0
                && applied < events.len()
                && events[applied - 1].event_id() == &entry.last;
            if extends && entry.projector.extend(events).is_ok() {
                entry.last = last.event_id().clone();
                let projection = Arc::clone(entry.projector.projection());
                let bytes = entry.bytes();
                inner.settle(session, bytes, self.budget);
                return Facts { events, projection };
            }
        }
        let mut projector = Projector::default();
        let projection = match projector.extend(events) {
            Ok(()) => Arc::clone(projector.projection()),
            // A log the incremental path does not take is projected whole, every time.
            Err(_) => {
                if let Some(gone) = inner.entries.remove(session) {
                    inner.bytes = inner.bytes.saturating_sub(gone.bytes);
                }
                return Facts {
                    events,
                    projection: Arc::new(project_in_two_passes(events, TipPolicy::Latest)),
                };
            }
        };
        if let Some(gone) = inner.entries.insert(
            session.clone(),
            Memoized {
                last: last.event_id().clone(),
                projector,
                bytes: 0,
                used: 0,
                replay: None,
            },
        ) {
            inner.bytes = inner.bytes.saturating_sub(gone.bytes);
        }
        inner.settle(session, projection_bytes(events.len()), self.budget);
        Facts { events, projection }
    }
}

/// The projection of a replay's prefix, kept by no projector (nothing extends it).
fn project_prefix(events: &[SessionEvent]) -> Arc<SessionProjection> {
    let mut projector = Projector::default();
    match projector.extend(events) {
        Ok(()) => Arc::clone(projector.projection()),
        Err(_) => Arc::new(project_in_two_passes(events, TipPolicy::Latest)),
    }
}

/// The global defaults when nothing else applies (guided preset, locks §4).
pub const GLOBAL_DEFAULTS: EffectivePreferences = EffectivePreferences::GUIDED;

/// Facts of a session prefix.
#[derive(Debug)]
pub struct Facts<'a> {
    pub events: &'a [SessionEvent],
    pub projection: Arc<SessionProjection>,
}

impl<'a> Facts<'a> {
    pub fn new(events: &'a [SessionEvent]) -> Self {
        Self {
            events,
            projection: Arc::new(project(events, TipPolicy::Latest)),
        }
    }

    pub fn run(&self, run: &RunId) -> Option<&RunView> {
        self.projection.runs.get(run)
    }

    pub fn node(&self, run: &RunId, node: &NodeId) -> Option<&NodeInfo> {
        self.run(run).and_then(|r| r.dag.nodes.get(node))
    }

    /// Ack attempts recorded at `node`, in order, with the index of their record.
    pub fn advance_records(&self, node: &NodeId) -> Vec<(usize, &AdvanceRecorded)> {
        let Some(positions) = self.projection.advance_events.get(node) else {
            return Vec::new();
        };
        positions
            .iter()
            .filter_map(
                |&i| match self.events.get(i).map(|e| (e.data(), e.scope().node_id())) {
                    Some((EventData::AdvanceRecorded(a), Some(n))) if n == node => Some((i, a)),
                    _ => None,
                },
            )
            .collect()
    }

    /// The record of `attempt` at `node`, with its index in the log.
    pub fn advance_record(
        &self,
        node: &NodeId,
        attempt: &AttemptId,
    ) -> Option<(usize, &AdvanceRecorded)> {
        self.advance_records(node)
            .into_iter()
            .find(|(_, a)| &a.attempt_id == attempt)
    }

    /// Checkpoint edges leaving `node`.
    pub fn checkpoint_count(&self, run: &RunId, node: &NodeId) -> u64 {
        self.run(run)
            .map_or(0, |r| r.dag.edges_out(node, EdgeKind::Checkpoint) as u64)
    }

    /// Effective preferences at `node` (node-attached, else global defaults).
    pub fn preferences(&self, run: &RunId, node: &NodeId) -> EffectivePreferences {
        match self.run(run) {
            Some(view) => effective_preferences(view, node, None, GLOBAL_DEFAULTS),
            None => GLOBAL_DEFAULTS,
        }
    }

    /// The run's current durable context (the latest `context_set`), empty when none.
    pub fn context(&self, run: &RunId) -> Map<String, Value> {
        let Some(view) = self.run(run) else {
            return Map::new();
        };
        view.context_sets
            .iter()
            .rev()
            .filter_map(|&i| self.events.get(i))
            .find_map(|e| match (e.data(), e.scope().run_id()) {
                (EventData::ContextSet(c), Some(r)) if r == run => Some(c.context.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }

    /// The current recap notes of `node`, if any.
    pub fn recap_notes(&self, run: &RunId, node: &NodeId) -> Option<&str> {
        self.run(run)?.recap_notes(node)
    }
}

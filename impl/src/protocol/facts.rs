//! Read-only facts about one run, derived from a prefix of committed events.
//!
//! Responses are pure functions of "the events committed when the response was first given"
//! (a prefix of the log), so replaying an attempt rebuilds byte-identical responses from
//! recorded facts without recomputing anything (locks §1.2 "Replay is fact-returning").

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use workrail_spec::closed::EdgeKind;
use workrail_spec::event::{AdvanceRecorded, EffectivePreferences, EventData, SessionEvent};
use workrail_spec::ids::{AttemptId, EventId, NodeId, RunId, SessionId};

use crate::projections::{
    NodeInfo, Projector, RunView, SessionProjection, TipPolicy, Unsupported, effective_preferences,
    project, project_in_two_passes,
};
use crate::store::{Events, StoreError};

/// How many sessions' latest projections [`ProjectionMemo`] keeps at most, whatever their size.
const MEMO_SESSIONS: usize = 64;

/// What a projection holds in memory per projected event, at most (D205): run DAG nodes and
/// edges, current outputs, positions. Measured on nested loops at about 170 bytes per event
/// before D230 and 65 to 80 since (`impl/tests/projection_memory.rs` holds the estimate to at
/// least what is held and at most three times it).
pub const PROJECTED_BYTES_PER_EVENT: usize = 120;

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
    pub fn facts_if_kept<'a>(
        &self,
        session: &SessionId,
        events: Events<'a>,
    ) -> Result<Facts<'a>, StoreError> {
        let kept = self
            .latest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entries
            .contains_key(session);
        if kept {
            self.facts(session, events)
        } else {
            Facts::of(events)
        }
    }

    /// Facts of `events`, a session's log (or a prefix of it).
    pub fn facts<'a>(
        &self,
        session: &SessionId,
        events: Events<'a>,
    ) -> Result<Facts<'a>, StoreError> {
        let Some(last) = events.last()? else {
            return Ok(Facts::new_empty(events));
        };
        let last = last.event_id().clone();
        let mut inner = self.latest.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = inner.entries.get_mut(session) {
            let applied = entry.projector.applied();
            if applied == events.len() && entry.last == last {
                let projection = Arc::clone(entry.projector.projection());
                let bytes = entry.bytes();
                inner.settle(session, bytes, self.budget);
                return Ok(Facts { events, projection });
            }
            // A shorter log is a replay's prefix (checked by its last id, as the live log is):
            // it gets its own slot, so the live projection stays for the calls that extend it.
            if events.len() < applied {
                let projection = match &entry.replay {
                    Some((len, id, projection)) if *len == events.len() && *id == last => {
                        Arc::clone(projection)
                    }
                    _ => {
                        let projection = project_prefix(events)?;
                        entry.replay = Some((events.len(), last, Arc::clone(&projection)));
                        projection
                    }
                };
                let bytes = entry.bytes();
                inner.settle(session, bytes, self.budget);
                return Ok(Facts { events, projection });
            }
            // The same log, longer: project only what was appended.
            let extends = applied > 0
                && applied < events.len()
                && events
                    .get(applied - 1)?
                    .is_some_and(|e| e.event_id() == &entry.last);
            if extends && extend(&mut entry.projector, events)?.is_ok() {
                entry.last = last;
                let projection = Arc::clone(entry.projector.projection());
                let bytes = entry.bytes();
                inner.settle(session, bytes, self.budget);
                return Ok(Facts { events, projection });
            }
        }
        let mut projector = Projector::default();
        let projection = match extend(&mut projector, events)? {
            Ok(()) => Arc::clone(projector.projection()),
            // A log the incremental path does not take is projected whole, every time.
            Err(_) => {
                if let Some(gone) = inner.entries.remove(session) {
                    inner.bytes = inner.bytes.saturating_sub(gone.bytes);
                }
                return Ok(Facts {
                    events,
                    projection: Arc::new(project_in_two_passes(&events.all()?, TipPolicy::Latest)),
                });
            }
        };
        if let Some(gone) = inner.entries.insert(
            session.clone(),
            Memoized {
                last,
                projector,
                bytes: 0,
                used: 0,
                replay: None,
            },
        ) {
            inner.bytes = inner.bytes.saturating_sub(gone.bytes);
        }
        inner.settle(session, projection_bytes(events.len()), self.budget);
        Ok(Facts { events, projection })
    }
}

/// Applies the events of `events` that `projector` has not applied yet, a few plans at a time
/// when they have to be read again (D225). The outer error is a failed read; the inner one a log
/// the incremental path does not take.
fn extend(
    projector: &mut Projector,
    events: Events<'_>,
) -> Result<Result<(), Unsupported>, StoreError> {
    for chunk in events.chunks(projector.applied()) {
        let (start, chunk) = chunk?;
        if let Err(unsupported) = projector.extend_chunk(start, &chunk) {
            return Ok(Err(unsupported));
        }
    }
    Ok(Ok(()))
}

/// The projection of a replay's prefix, kept by no projector (nothing extends it).
fn project_prefix(events: Events<'_>) -> Result<Arc<SessionProjection>, StoreError> {
    let mut projector = Projector::default();
    Ok(match extend(&mut projector, events)? {
        Ok(()) => Arc::clone(projector.projection()),
        Err(_) => Arc::new(project_in_two_passes(&events.all()?, TipPolicy::Latest)),
    })
}

/// The global defaults when nothing else applies (guided preset, locks §4).
pub const GLOBAL_DEFAULTS: EffectivePreferences = EffectivePreferences::GUIDED;

/// Facts of a session prefix.
#[derive(Debug)]
pub struct Facts<'a> {
    pub events: Events<'a>,
    pub projection: Arc<SessionProjection>,
}

impl<'a> Facts<'a> {
    /// Facts of a slice of events, projected whole.
    pub fn new(events: &'a [SessionEvent]) -> Self {
        Self {
            events: Events::Slice(events),
            projection: Arc::new(project(events, TipPolicy::Latest)),
        }
    }

    /// Facts of `events`, projected without keeping the projector (read again a few plans at a
    /// time where the log no longer holds them).
    pub fn of(events: Events<'a>) -> Result<Self, StoreError> {
        Ok(Self {
            events,
            projection: project_prefix(events)?,
        })
    }

    fn new_empty(events: Events<'a>) -> Self {
        Self {
            events,
            projection: Arc::new(SessionProjection::default()),
        }
    }

    pub fn run(&self, run: &RunId) -> Option<&RunView> {
        self.projection.runs.get(run)
    }

    pub fn node(&self, run: &RunId, node: &NodeId) -> Option<&NodeInfo> {
        self.run(run).and_then(|r| r.dag.nodes.get(node))
    }

    /// Ack attempts recorded at `node`, in order, with the index of their record (read again
    /// from their segment when the log no longer holds them parsed).
    pub fn advance_records(
        &self,
        node: &NodeId,
    ) -> Result<Vec<(usize, AdvanceRecorded)>, StoreError> {
        let positions = self.projection.advance_positions(node);
        let mut records = Vec::with_capacity(positions.len());
        for &i in positions.iter() {
            let Some(event) = self.events.get(i)? else {
                continue;
            };
            if let (EventData::AdvanceRecorded(a), Some(n)) =
                (event.data(), event.scope().node_id())
                && n == node
            {
                records.push((i, a.clone()));
            }
        }
        Ok(records)
    }

    /// How many ack attempts are recorded at `node` (from the projection alone).
    pub fn advance_count(&self, node: &NodeId) -> usize {
        self.projection
            .advance_positions(node)
            .iter()
            .filter(|&&i| i < self.events.len())
            .count()
    }

    /// The record of `attempt` at `node`, with its index in the log.
    pub fn advance_record(
        &self,
        node: &NodeId,
        attempt: &AttemptId,
    ) -> Result<Option<(usize, AdvanceRecorded)>, StoreError> {
        Ok(self
            .advance_records(node)?
            .into_iter()
            .find(|(_, a)| &a.attempt_id == attempt))
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
    pub fn context(&self, run: &RunId) -> Result<Map<String, Value>, StoreError> {
        let Some(view) = self.run(run) else {
            return Ok(Map::new());
        };
        for &i in view.context_sets.iter().rev() {
            let Some(event) = self.events.get(i)? else {
                continue;
            };
            if let (EventData::ContextSet(c), Some(r)) = (event.data(), event.scope().run_id())
                && r == run
            {
                return Ok(c.context.clone());
            }
        }
        Ok(Map::new())
    }

    /// The current recap notes of `node`, if any: read from the log, where they stay (D226).
    pub fn recap_notes(
        &self,
        run: &RunId,
        node: &NodeId,
    ) -> Result<Option<Cow<'a, str>>, StoreError> {
        match self
            .run(run)
            .and_then(|view| view.recap_notes_position(node))
        {
            Some(position) => self.notes_at(position),
            None => Ok(None),
        }
    }

    /// The notes of the `node_output_appended` event at `position` in the log (`None` when that
    /// event is not a notes output: the projection was not built from this log).
    pub fn notes_at(&self, position: usize) -> Result<Option<Cow<'a, str>>, StoreError> {
        self.events.notes_at(position)
    }
}

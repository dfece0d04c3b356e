//! The append gate and the session cache as the caller holds them (D104): the gate (lock,
//! load, the caller's decision, append, under one lock) and the healthy views this process
//! keeps, refreshed by reading only the rows past them.

use std::sync::Arc;

use workrail_spec::ids::SessionId;

use super::PostgresBackend;
use super::append::{GateRead, prepare};
use super::health::{extend_with, validate};
use super::worker::Request;
use crate::store::error::StoreError;
use crate::store::load::LoadedSession;
use crate::store::session::{AppendPlan, AppendedEvent, SegmentLimits, SessionIntent};

/// An open append gate on PostgreSQL: a connection of the backend's holds the session's
/// advisory lock (session level) until the gate is dropped; the gate's view is the session as
/// of its last commit.
pub struct PgGate<'b> {
    backend: &'b PostgresBackend,
    id: u64,
    session: Arc<LoadedSession>,
    /// Set by a failed commit: what it left is unknown until the next gate reloads.
    poisoned: bool,
}

impl std::fmt::Debug for PgGate<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgGate")
            .field("session", &self.session.session_id)
            .field("poisoned", &self.poisoned)
            .finish_non_exhaustive()
    }
}

impl Drop for PgGate<'_> {
    fn drop(&mut self) {
        // Hand the up-to-date view to the cache unless a failed commit left it unknown.
        if !self.poisoned && self.session.event_count() > 0 {
            self.backend.remember(&self.session);
        }
        let id = self.id;
        // Waits for the release, so a gate closed is a lock free. A failed release closed the
        // gate's connection, which frees the lock as well: nothing to undo, but worth saying.
        if let Err(e) = self.backend.call(|reply| Request::GateClose { id, reply }) {
            tracing::warn!(
                session = %self.session.session_id,
                error = %e,
                "releasing the session's lock failed; the connection that held it was closed, which releases it"
            );
        }
    }
}

impl PgGate<'_> {
    /// The session as of the last commit (validated, healthy).
    pub fn session(&self) -> &LoadedSession {
        &self.session
    }

    /// A shared handle on the session as of the last commit.
    pub fn shared(&self) -> Arc<LoadedSession> {
        Arc::clone(&self.session)
    }

    /// Runs `alongside` (the durable writes the plan depends on), then commits the plan in one
    /// transaction on the gate's connection; the gate's view follows the commit.
    pub fn append_alongside<T>(
        &mut self,
        plan: AppendPlan,
        alongside: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<(Vec<AppendedEvent>, T), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned {
                session: self.session.session_id.clone(),
            });
        }
        let prepared = prepare(&self.session, plan, SegmentLimits::default())?;
        let beside = alongside()?;
        if prepared.fresh.is_empty() {
            return Ok((prepared.results, beside));
        }
        let session = self.session.session_id.clone();
        let id = self.id;
        let results = prepared.results.clone();
        let fresh: Vec<_> = prepared.fresh.iter().map(|(e, _)| e.clone()).collect();
        // Each record with where its line starts in the manifest as the file store would write
        // it, as validation lays the rows out: a page of them can then leave memory (D235).
        let mut at = self.session.manifest_committed_bytes;
        let mut records = Vec::with_capacity(prepared.records.len());
        for (record, text) in &prepared.records {
            records.push((record.clone(), Some(at)));
            at += text.len() as u64 + 1;
        }
        let bytes = at - self.session.manifest_committed_bytes;
        if let Err(e) = self.backend.call(|reply| Request::GateAppend {
            id,
            session,
            prepared,
            reply,
        }) {
            self.poisoned = true;
            return Err(e);
        }
        let view = Arc::make_mut(&mut self.session);
        view.commit_events(fresh);
        view.commit_records(records);
        view.manifest_committed_bytes += bytes;
        view.manifest_file_bytes = view.manifest_committed_bytes;
        Ok((results, beside))
    }
}

/// A cached view's freshness key: its manifest records and the bytes they spell.
fn key_of(loaded: &LoadedSession) -> (i64, i64) {
    (
        loaded.manifest.len() as i64,
        loaded.manifest_committed_bytes as i64,
    )
}

impl PostgresBackend {
    /// A healthy cached view of `session`, if this process holds one.
    fn cached(&self, session: &SessionId) -> Option<Arc<LoadedSession>> {
        self.sessions.get(session).filter(|c| {
            c.health.is_healthy() && c.manifest_file_bytes == c.manifest_committed_bytes
        })
    }

    /// Keeps a healthy view in the session cache.
    fn remember(&self, loaded: &Arc<LoadedSession>) {
        if loaded.health.is_healthy() {
            self.sessions.insert(
                loaded.session_id.clone(),
                Arc::clone(loaded),
                loaded.estimated_bytes(),
            );
        }
    }

    /// [`SessionBackend::load`] through this process's cache (D104): one query for the
    /// session's manifest, and the cached view while it is unchanged; else only the rows past
    /// the view ([`PostgresBackend::load_tail`]), or a full load; cached when healthy. Rows are append-only, so an unchanged manifest is an unchanged session (as
    /// the file store trusts an unchanged `manifest.jsonl` length, D60).
    pub fn load_cached(&self, session: &SessionId) -> Result<Arc<LoadedSession>, StoreError> {
        if let Some(cached) = self.cached(session) {
            let id = session.clone();
            let now = self.call(|reply| Request::Freshness { session: id, reply })?;
            if now == key_of(&cached) {
                return Ok(cached);
            }
            if let Some(loaded) = self.load_tail(cached)? {
                self.remember(&loaded);
                return Ok(loaded);
            }
        }
        let loaded = crate::store::backend::SessionBackend::load(self, session)?;
        self.remember(&loaded);
        Ok(loaded)
    }

    /// The session past the healthy view `cached`: only the new rows and the objects the new
    /// events reference are read, and only they are laid out and validated, resumed from the
    /// view (D222; before, the view's every record and event was serialized again and the
    /// whole session validated, so each change by another process cost the session's length).
    /// `None` (a full load decides) when the rows before the view's end are not all there or
    /// the result is not healthy, so every verdict other than healthy comes from a full read.
    /// The view leaves the cache first, so that when nothing else holds it, it is extended in
    /// place rather than copied.
    fn load_tail(
        &self,
        cached: Arc<LoadedSession>,
    ) -> Result<Option<Arc<LoadedSession>>, StoreError> {
        let session = cached.session_id.clone();
        let from = (cached.manifest.len() as i64, cached.event_count() as i64);
        self.forget_cached(&session);
        let id = session.clone();
        let Some(tail) = self.call(|reply| Request::Rows {
            session: id,
            from: Some(from),
            reply,
        })?
        else {
            return Ok(None);
        };
        Ok(extend_with(&session, cached, &tail)?.map(Arc::new))
    }

    /// Opens the append gate of `session`: its lock (waiting the bounded moment, then
    /// [`StoreError::Locked`]) and its validated rows; anything but healthy is an error.
    pub fn open_gate(
        &self,
        session: &SessionId,
        intent: SessionIntent,
    ) -> Result<PgGate<'_>, StoreError> {
        let wait = self.lock_wait;
        let id = session.clone();
        let cached = self.cached(session);
        let known = cached
            .as_ref()
            .map(|c| (key_of(c), (c.manifest.len() as i64, c.event_count() as i64)));
        let (gate_id, read) = self.call(|reply| Request::GateOpen {
            session: id,
            wait,
            known,
            reply,
        })?;
        // The gate owns the view while it is open; it goes back to the cache when it closes.
        self.forget_cached(session);
        let mut gate = PgGate {
            backend: self,
            id: gate_id,
            session: Arc::new(LoadedSession::empty(session.clone(), self.residency())),
            poisoned: false,
        };
        let image = match (read, cached) {
            (GateRead::Unchanged, Some(cached)) => {
                gate.session = cached;
                return Ok(gate);
            }
            (GateRead::Unchanged, None) => None,
            (GateRead::Image(image), _) => image,
            // Another process committed since the view: the rows past it extend it (D222).
            (GateRead::Tail(tail), cached) => {
                if let Some(cached) = cached
                    && let Some(loaded) = extend_with(session, cached, &tail)?
                {
                    gate.session = Arc::new(loaded);
                    return Ok(gate);
                }
                // Anything but a whole, healthy extension: every row decides. The gate's
                // lock keeps other writers out, so this read is as authoritative as its own.
                let id = session.clone();
                self.call(|reply| Request::Rows {
                    session: id,
                    from: None,
                    reply,
                })?
            }
        };
        let loaded = match image {
            Some(image) => validate(session, &image, self.residency())?,
            None => None,
        };
        match (loaded, intent) {
            (Some(loaded), _) => {
                if !loaded.health.is_healthy() {
                    return Err(StoreError::Unhealthy {
                        session: session.clone(),
                        health: loaded.health,
                    });
                }
                gate.session = Arc::new(loaded);
            }
            (None, SessionIntent::Create) => {}
            // Deleted (GC's transaction, D112) while this call waited for the lock, or since
            // its token was minted: nothing is written in its place (decision D130).
            (None, SessionIntent::Continue) => {
                return Err(StoreError::Deleted {
                    session: session.clone(),
                });
            }
        }
        Ok(gate)
    }
}

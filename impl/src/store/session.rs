//! The session store: the single durable mutation (`append`) behind the lock+health gate, and
//! the read side.
//!
//! Write path (locks §1 "Append transaction protocol"), all under `sessions/<id>/.lock`:
//! 1. write the plan's events to a temp file no other writer uses, fsync it, rename it to
//!    `events/<first>-<last>.jsonl`, fsync `events/`;
//! 2. append `segment_closed` (bounds, relative path, sha256, byte count) followed by one
//!    `snapshot_pinned` per snapshot the segment introduced to `manifest.jsonl`, in one write,
//!    and fsync it once (decision D49: close and pins are one durable step).
//!
//! A failed write is undone before the error is returned: the manifest is cut back to its
//! committed length and synced, so the error can say exactly what was committed.
//!
//! One plan is one segment: a segment is attested atomically, so splitting a plan across
//! segments would let a crash commit half a plan. The hybrid rotation thresholds (max events or
//! max bytes, first hit wins) therefore bound a plan, and every plan starts a new segment.
//!
//! Several processes share a data directory. Writers take the exclusive OS lock, waiting a
//! bounded moment for another writer; readers never block a healthy read, and a verdict that
//! the session is damaged is only given under the shared lock, so a reader never mistakes
//! another process's commit in flight for corruption (decision D50).
//!
//! The witness: [`AppendGate`] is minted only by [`SessionStore::with_append_gate`] after the lock
//! is held and the session is healthy, and it is lent to the caller's closure for the closure's
//! lifetime only. Code that holds only a [`SessionRead`] (rehydrate) has no way to append.

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use workrail_spec::dedupe::DedupeKey;
use workrail_spec::event::{EventData, SessionEvent};
use workrail_spec::ids::{EventIndex, ManifestIndex, SessionId, SnapshotRef};
use workrail_spec::jcs::{sha256, to_canonical_string};
use workrail_spec::manifest::{ManifestRecord, SegmentClosed, SnapshotPinned, segment_rel_path};

use super::cas::ObjectCheck;
use super::error::{Committed, StoreError};
use super::event_log::{DEFAULT_RESIDENT_EVENTS, FileSegments, MIN_RESIDENT_EVENTS, Residency};
use super::fs::{LockError, LockGuard, StoreFs};
use super::health::SessionHealth;
use super::layout;
use super::load::{LoadedSession, introduced_snapshots, load_session, load_session_past};
use super::object_cache::{CacheBudget, ObjectCache};

/// Plan size limits: the hybrid rotation thresholds (first hit wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentLimits {
    pub max_events: usize,
    pub max_bytes: usize,
}

impl Default for SegmentLimits {
    fn default() -> Self {
        // A real plan is a handful of events; these bounds only stop runaway plans.
        Self {
            max_events: 1000,
            max_bytes: 8 * 1024 * 1024,
        }
    }
}

/// The atomic unit of durable truth: events appended together or not at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendPlan {
    /// Events in order. Their `eventIndex` is assigned by the store (contiguous after the
    /// session's last committed event).
    pub events: Vec<SessionEvent>,
}

/// One event of a plan after append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendedEvent {
    pub event: SessionEvent,
    /// False when the dedupeKey was already committed: the existing event is returned and
    /// nothing was written for it (locks §1 "Idempotency via dedupeKey").
    pub newly_appended: bool,
}

/// The read side: everything rehydrate and projections need, and nothing that writes.
pub trait SessionRead {
    /// Loads a session with its health; `SessionNotFound` when it holds no committed truth.
    fn load(&self, session: &SessionId) -> Result<Arc<LoadedSession>, StoreError>;

    /// Loads a session for execution: anything but `healthy` is an error.
    fn load_healthy(&self, session: &SessionId) -> Result<Arc<LoadedSession>, StoreError> {
        let loaded = self.load(session)?;
        match &loaded.health {
            SessionHealth::Healthy => Ok(loaded),
            other => Err(StoreError::Unhealthy {
                session: session.clone(),
                health: other.clone(),
            }),
        }
    }

    /// Ids of every session directory, sorted.
    fn list_sessions(&self) -> Result<Vec<SessionId>, StoreError>;
}

/// What a writer expects of the session it opens a gate on (decision D130).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionIntent {
    /// The call creates the session (`start_workflow`, an import): an absent session is new
    /// and empty.
    Create,
    /// The call continues a session a token names: an absent session was deleted, and the gate
    /// answers [`StoreError::Deleted`] without creating anything in its place.
    Continue,
}

/// How long a call waits for another process's hold on a session lock before it answers
/// `SESSION_LOCKED` (a commit takes milliseconds; a waiting call is cheaper than a retry).
pub const DEFAULT_LOCK_WAIT: Duration = Duration::from_secs(2);

/// The durable session store.
pub struct SessionStore {
    fs: Arc<dyn StoreFs>,
    limits: SegmentLimits,
    lock_wait: Duration,
    /// Validated sessions, reused while the manifest length is unchanged (append-only file);
    /// bounded by a byte budget, least recently used out first.
    cache: ObjectCache<SessionId, LoadedSession>,
    /// When set, load also judges the CAS objects committed events reference (D53).
    objects: Option<ObjectCheck>,
    /// How many events a loaded session keeps parsed; the rest are read again from their
    /// segments (D225).
    residency: Residency,
}

impl fmt::Debug for SessionStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionStore")
            .field("fs", &self.fs)
            .field("limits", &self.limits)
            .field("lock_wait", &self.lock_wait)
            .finish_non_exhaustive()
    }
}

fn io_error(session: &SessionId, op: &'static str, e: io::Error) -> StoreError {
    StoreError::Io {
        session: Some(session.clone()),
        op,
        detail: e.to_string(),
    }
}

/// Polls `try_take` until it succeeds or `wait` has passed (the OS offers no timed flock).
pub(crate) fn with_backoff<T>(
    wait: Duration,
    mut try_take: impl FnMut() -> Result<T, LockError>,
) -> Result<Option<T>, io::Error> {
    let deadline = Instant::now() + wait;
    let mut pause = Duration::from_millis(1);
    loop {
        match try_take() {
            Ok(taken) => return Ok(Some(taken)),
            Err(LockError::Io(e)) => return Err(e),
            Err(LockError::Busy) => {}
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

#[cfg(feature = "test-mutations")]
thread_local! {
    /// TEST-ONLY planted bug switch (feature `test-mutations`): see [`SessionStore::plant_pins_before_close`].
    static PINS_BEFORE_CLOSE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(feature = "test-mutations")]
impl SessionStore {
    /// TEST-ONLY (feature `test-mutations`): while on, appends made *on the calling thread* write
    /// the `snapshot_pinned` records before `segment_closed` (a planted pin-after-close bug).
    /// Only the harness's mutation test turns it on, to prove the harness catches it.
    pub fn plant_pins_before_close(on: bool) {
        PINS_BEFORE_CLOSE.with(|c| c.set(on));
    }
}

impl SessionStore {
    pub fn new(fs: Arc<dyn StoreFs>) -> Self {
        Self::with_limits(fs, SegmentLimits::default())
    }

    pub fn with_limits(fs: Arc<dyn StoreFs>, limits: SegmentLimits) -> Self {
        Self {
            limits,
            lock_wait: DEFAULT_LOCK_WAIT,
            cache: ObjectCache::keeping_newest(CacheBudget::default().sessions),
            objects: None,
            residency: Residency {
                source: Some(Arc::new(FileSegments(Arc::clone(&fs)))),
                resident: DEFAULT_RESIDENT_EVENTS,
                recent: Arc::default(),
            },
            fs,
        }
    }

    /// The same store keeping at least `resident` (and at most about twice as many) of a
    /// loaded session's newest events parsed; older ones are read again from their segments
    /// when a call asks for them (D225). At least [`MIN_RESIDENT_EVENTS`].
    pub fn with_resident_events(mut self, resident: usize) -> Self {
        self.residency.resident = resident.max(MIN_RESIDENT_EVENTS);
        self
    }

    /// The same store judging, at load, the snapshots and pinned workflows that committed
    /// events reference: a session whose history cannot be rehydrated is not healthy (D53).
    pub fn with_object_check(mut self) -> Self {
        self.objects = Some(ObjectCheck::new(Arc::clone(&self.fs)));
        self
    }

    /// The same store keeping at most `budget` estimated bytes of loaded sessions, or the one
    /// most recently used session when it alone is larger (D94).
    pub fn with_cache_budget(mut self, budget: usize) -> Self {
        self.cache = ObjectCache::keeping_newest(budget);
        self
    }

    /// The session cache (sizes for benchmarks and tests).
    pub fn session_cache(&self) -> &ObjectCache<SessionId, LoadedSession> {
        &self.cache
    }

    /// The same store waiting at most `wait` for another process's hold on a session lock.
    pub fn with_lock_wait(mut self, wait: Duration) -> Self {
        self.lock_wait = wait;
        self
    }

    pub fn lock_wait(&self) -> Duration {
        self.lock_wait
    }

    pub fn fs(&self) -> &Arc<dyn StoreFs> {
        &self.fs
    }

    fn remember(&self, session: &Arc<LoadedSession>) {
        self.cache.insert(
            session.session_id.clone(),
            Arc::clone(session),
            session.estimated_bytes(),
        );
    }

    fn forget(&self, session: &SessionId) {
        self.cache.remove(session);
    }

    /// Loads from the cache when the manifest is unchanged, else from disk.
    ///
    /// A read never blocks on a healthy session. When another process holds the lock, the
    /// session is read as it is; only a verdict that it is damaged waits for the shared lock and
    /// is confirmed by a second read, because what looked like damage may be that process's
    /// commit in flight.
    fn load_inner(&self, session: &SessionId) -> Result<Option<Arc<LoadedSession>>, StoreError> {
        let manifest = layout::manifest_path(session);
        let len = self
            .fs
            .len(&manifest)
            .map_err(|e| io_error(session, "stat manifest", e))?;
        let cached = self.cache.get(session);
        if let Some(cached) = &cached
            // A torn tail may be cut and replaced by a record of the same length: only a view
            // without one is known to be current when the length matches.
            && ((cached.manifest_file_bytes == cached.manifest_committed_bytes
                && Some(cached.manifest_file_bytes) == len)
                || super::planted::is_planted(super::planted::PlantedBug::StaleSessionCache))
        {
            return Ok(Some(Arc::clone(cached)));
        }
        let lock_path = layout::lock_path(session);
        let loaded = match self.fs.try_lock_shared(&lock_path) {
            Ok(_shared) => self.load_past(session, cached)?,
            Err(LockError::Io(e)) => return Err(io_error(session, "lock session for reading", e)),
            Err(LockError::Busy) => {
                let optimistic = self.load_past(session, cached)?;
                let suspicious = optimistic.as_ref().is_some_and(|l| !l.health.is_healthy());
                if !suspicious
                    || super::planted::is_planted(super::planted::PlantedBug::UnlockedRead)
                {
                    optimistic
                } else {
                    let shared =
                        with_backoff(self.lock_wait, || self.fs.try_lock_shared(&lock_path))
                            .map_err(|e| io_error(session, "lock session for reading", e))?;
                    let Some(_shared) = shared else {
                        // Still being written: say so, never call it damaged.
                        return Err(StoreError::Locked {
                            session: session.clone(),
                        });
                    };
                    self.load_from_disk(session)?
                }
            }
        };
        match &loaded {
            Some(l) => self.remember(l),
            None => self.forget(session),
        }
        Ok(loaded)
    }

    /// Loads from disk what was appended past `cached` (the view this process holds) when that
    /// is a healthy extension of it, else the whole session (D219): another process's commit
    /// costs what it appended, not the session's length.
    ///
    /// The stale view leaves the cache first, so that when no call in flight holds it, it is
    /// extended in place rather than copied.
    fn load_past(
        &self,
        session: &SessionId,
        cached: Option<Arc<LoadedSession>>,
    ) -> Result<Option<Arc<LoadedSession>>, StoreError> {
        if let Some(view) = cached {
            self.forget(session);
            let past = load_session_past(&*self.fs, view, self.objects.as_ref())
                .map_err(|e| io_error(session, "load session", e))?;
            if let Some(past) = past {
                return Ok(Some(Arc::new(past)));
            }
        }
        self.load_from_disk(session)
    }

    fn load_from_disk(
        &self,
        session: &SessionId,
    ) -> Result<Option<Arc<LoadedSession>>, StoreError> {
        load_session(
            &*self.fs,
            session,
            self.objects.as_ref(),
            self.residency.clone(),
        )
        .map(|l| l.map(Arc::new))
        .map_err(|e| io_error(session, "load session", e))
    }

    /// Runs `f` with the append witness for `session`: takes the OS lock (waiting a bounded
    /// moment for another writer), loads and requires a healthy session, and lends the gate to
    /// `f`. The lock is released when `f` returns.
    ///
    /// `intent` says what an absent session means (decision D130): for [`SessionIntent::Create`]
    /// it is new and empty; for [`SessionIntent::Continue`] it was deleted, and the gate answers
    /// [`StoreError::Deleted`] having created nothing, not even a directory or a lock file.
    pub fn with_append_gate<T, E, F>(
        &self,
        session: &SessionId,
        intent: SessionIntent,
        f: F,
    ) -> Result<T, E>
    where
        E: From<StoreError>,
        F: for<'w> FnOnce(&mut AppendGate<'w>) -> Result<T, E>,
    {
        let dir = layout::session_dir(session);
        let lock = match intent {
            SessionIntent::Create => self.lock_to_create(session)?,
            SessionIntent::Continue => self.lock_to_continue(session)?,
        };
        // Under the exclusive lock nothing is in flight: this load is authoritative.
        let loaded = match (self.load_from_disk_or_cache(session)?, intent) {
            (Some(loaded), _) => loaded,
            (None, SessionIntent::Create) => Arc::new(LoadedSession::empty(
                session.clone(),
                self.residency.clone(),
            )),
            (None, SessionIntent::Continue) => {
                self.forget(session);
                return Err(StoreError::Deleted {
                    session: session.clone(),
                }
                .into());
            }
        };
        // The gate owns the session view while it is open (readers reload from disk), so
        // commits update it in place instead of copying it.
        self.forget(session);
        if !loaded.health.is_healthy() {
            return Err(StoreError::Unhealthy {
                session: session.clone(),
                health: loaded.health.clone(),
            }
            .into());
        }
        let mut gate = AppendGate {
            store: self,
            session: loaded,
            poisoned: false,
            _lock: lock,
        };
        // A torn, uncommitted manifest tail (an append whose fsync never completed) is cut
        // before anything new is appended, so it can never end up in the middle of the file.
        gate.discard_torn_manifest_tail(&dir)?;
        f(&mut gate)
    }

    /// The lock of a session this call creates: the directory is made first (the lock file
    /// lives in it), and made again when GC removed it meanwhile (a directory left without
    /// committed truth).
    fn lock_to_create(&self, session: &SessionId) -> Result<Box<dyn LockGuard>, StoreError> {
        let events = layout::events_dir(session);
        let create = || {
            self.fs.create_dir_durable(&events).map_err(|e| {
                StoreError::write(
                    Some(session),
                    "create the session directory",
                    &events,
                    &e,
                    Committed::Nothing,
                )
            })
        };
        create()?;
        let mut created = Ok(());
        let lock = with_backoff(self.lock_wait, || {
            match self.fs.try_lock(&layout::lock_path(session)) {
                Err(LockError::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
                    created = create();
                    match &created {
                        Ok(()) => Err(LockError::Busy),
                        Err(_) => Err(LockError::Io(e)),
                    }
                }
                other => other,
            }
        });
        created?;
        lock.map_err(|e| io_error(session, "lock session", e))?
            .ok_or_else(|| StoreError::Locked {
                session: session.clone(),
            })
    }

    /// The lock of a session this call continues: never created. No lock file means no session
    /// (GC renames a deleted session's directory away under its lock), unless the session's
    /// manifest is there without one (a directory copied by hand): then the lock file is made.
    fn lock_to_continue(&self, session: &SessionId) -> Result<Box<dyn LockGuard>, StoreError> {
        let lock_path = layout::lock_path(session);
        let lock = with_backoff(self.lock_wait, || {
            match self.fs.try_lock_existing(&lock_path) {
                Ok(Some(lock)) => Ok(Some(lock)),
                Ok(None) => match self.fs.len(&layout::manifest_path(session)) {
                    Ok(Some(_)) => self.fs.try_lock(&lock_path).map(Some),
                    Ok(None) => Ok(None),
                    Err(e) => Err(LockError::Io(e)),
                },
                Err(LockError::Io(e)) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            }
        })
        .map_err(|e| io_error(session, "lock session", e))?;
        match lock {
            Some(Some(lock)) => Ok(lock),
            Some(None) => {
                self.forget(session);
                Err(StoreError::Deleted {
                    session: session.clone(),
                })
            }
            None => Err(StoreError::Locked {
                session: session.clone(),
            }),
        }
    }

    /// Runs `f` holding the session's exclusive lock (waiting a bounded moment for it), for
    /// maintenance that is not an append (repair).
    pub(crate) fn with_exclusive_lock<T>(
        &self,
        session: &SessionId,
        f: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let _lock = with_backoff(self.lock_wait, || {
            self.fs.try_lock(&layout::lock_path(session))
        })
        .map_err(|e| io_error(session, "lock session", e))?
        .ok_or_else(|| StoreError::Locked {
            session: session.clone(),
        })?;
        f()
    }

    /// Validates the session from its bytes, bypassing the cache; `NotFound` without truth.
    pub(crate) fn load_fresh(&self, session: &SessionId) -> Result<Arc<LoadedSession>, StoreError> {
        self.load_from_disk(session)?
            .ok_or_else(|| StoreError::NotFound {
                session: session.clone(),
            })
    }

    pub(crate) fn forget_cached(&self, session: &SessionId) {
        self.forget(session);
    }

    /// The cached view when the manifest is unchanged, else a fresh load (caller holds a lock).
    fn load_from_disk_or_cache(
        &self,
        session: &SessionId,
    ) -> Result<Option<Arc<LoadedSession>>, StoreError> {
        let len = self
            .fs
            .len(&layout::manifest_path(session))
            .map_err(|e| io_error(session, "stat manifest", e))?;
        let cached = self.cache.get(session);
        if let Some(cached) = &cached
            && ((cached.manifest_file_bytes == cached.manifest_committed_bytes
                && Some(cached.manifest_file_bytes) == len)
                || super::planted::is_planted(super::planted::PlantedBug::StaleSessionCache))
        {
            return Ok(Some(Arc::clone(cached)));
        }
        self.load_past(session, cached)
    }
}

impl SessionRead for SessionStore {
    fn load(&self, session: &SessionId) -> Result<Arc<LoadedSession>, StoreError> {
        self.load_inner(session)?
            .ok_or_else(|| StoreError::NotFound {
                session: session.clone(),
            })
    }

    fn list_sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        let names = self
            .fs
            .list_dir(Path::new(layout::SESSIONS_DIR))
            .map_err(|e| StoreError::Io {
                session: None,
                op: "list sessions",
                detail: e.to_string(),
            })?;
        Ok(names
            .iter()
            .filter_map(|n| SessionId::parse(n).ok())
            .collect())
    }
}

/// The append witness: proof that the session lock is held and the session was healthy when
/// the gate opened. It cannot be built outside this module and cannot outlive the closure it is
/// lent to.
///
/// Used inside the closure that lends it, a witness works:
///
/// ```no_run
/// use workrail::store::{AppendGate, SessionIntent, SessionStore};
/// fn use_inside(store: &SessionStore, id: &workrail_spec::ids::SessionId) {
///     let _ = store.with_append_gate(id, SessionIntent::Create, |gate: &mut AppendGate<'_>| {
///         let _committed = gate.session().event_count();
///         Ok::<_, workrail::store::StoreError>(())
///     });
/// }
/// ```
///
/// The same code keeping the witness for later does not compile, so a stashed witness can never
/// reach an append, not even after a later gate re-locks the same session: the misuse is
/// rejected before any durable I/O because it is rejected before the program exists
/// (`tests/witness_lifetime.rs` checks that the compiler refuses it with the escape error, E0521,
/// and only that one: rustdoc compares the code pinned below only on a nightly toolchain).
///
/// ```compile_fail,E0521
/// use workrail::store::{AppendGate, SessionIntent, SessionStore};
/// fn stash(store: &SessionStore, id: &workrail_spec::ids::SessionId) {
///     let mut kept = None;
///     let _ = store.with_append_gate(id, SessionIntent::Create, |gate: &mut AppendGate<'_>| {
///         kept = Some(gate); // the witness cannot escape the gate's closure
///         Ok::<_, workrail::store::StoreError>(())
///     });
/// }
/// ```
pub struct AppendGate<'w> {
    store: &'w SessionStore,
    session: Arc<LoadedSession>,
    /// Set by any I/O failure: the gate refuses further appends (no retrying into unknown
    /// state); the next gate reloads and revalidates from disk.
    poisoned: bool,
    _lock: Box<dyn super::fs::LockGuard>,
}

impl fmt::Debug for AppendGate<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AppendGate")
            .field("session", &self.session.session_id)
            .field("poisoned", &self.poisoned)
            .finish_non_exhaustive()
    }
}

impl Drop for AppendGate<'_> {
    fn drop(&mut self) {
        // Hand the up-to-date view back to the cache unless an I/O failure left it unknown.
        if !self.poisoned && self.session.event_count() > 0 {
            self.store.remember(&self.session);
        }
    }
}

impl AppendGate<'_> {
    /// The session as of the last commit (validated, healthy).
    pub fn session(&self) -> &LoadedSession {
        &self.session
    }

    /// A shared handle on the session as of the last commit. Drop it before the next
    /// `append`, or that append copies the session to update it.
    pub fn shared(&self) -> Arc<LoadedSession> {
        Arc::clone(&self.session)
    }

    fn fs(&self) -> &dyn StoreFs {
        &*self.store.fs
    }

    fn io(&mut self, op: &'static str, e: io::Error) -> StoreError {
        self.poisoned = true;
        self.store.forget(&self.session.session_id);
        io_error(&self.session.session_id, op, e)
    }

    /// Poisons the gate for a failed write (the next gate reloads and revalidates from disk).
    fn failed(
        &mut self,
        op: &'static str,
        path: &Path,
        e: &io::Error,
        committed: Committed,
    ) -> StoreError {
        self.poisoned = true;
        self.store.forget(&self.session.session_id);
        StoreError::write(Some(&self.session.session_id), op, path, e, committed)
    }

    fn discard_torn_manifest_tail(&mut self, session_dir: &Path) -> Result<(), StoreError> {
        let committed = self.session.manifest_committed_bytes;
        let manifest = session_dir.join("manifest.jsonl");
        let actual = match self.fs().len(&manifest) {
            Ok(len) => len.unwrap_or(0),
            Err(e) => return Err(self.io("stat manifest", e)),
        };
        if actual <= committed {
            return Ok(());
        }
        // A cut, not a rewrite: a reader in another process sees the committed records whole
        // at every instant.
        if let Err(e) = self
            .fs()
            .set_len(&manifest, committed)
            .and_then(|()| self.fs().sync_file(&manifest))
        {
            return Err(self.failed(
                "cut a torn manifest tail",
                &manifest,
                &e,
                Committed::Nothing,
            ));
        }
        Arc::make_mut(&mut self.session).manifest_file_bytes = committed;
        Ok(())
    }

    /// The only durable mutation. Events whose dedupeKey is already committed are idempotent
    /// no-ops (returned as they were committed); the rest are committed together or not at all.
    pub fn append(&mut self, plan: AppendPlan) -> Result<Vec<AppendedEvent>, StoreError> {
        self.append_alongside(plan, || Ok(()))
            .map(|(appended, ())| appended)
    }

    /// [`AppendGate::append`], with `alongside` (a durable write the plan depends on: the
    /// snapshot its `node_created` introduces) done before the manifest attests the plan. Where
    /// the filesystem allows, `alongside` runs while the segment is written (decision D65);
    /// else first, as if called before `append`. When it fails nothing is attested: its error is
    /// returned (before the segment's, when both failed) and the session is unchanged.
    pub fn append_alongside<T: Send + 'static>(
        &mut self,
        plan: AppendPlan,
        alongside: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
    ) -> Result<(Vec<AppendedEvent>, T), StoreError> {
        if self.poisoned {
            return Err(StoreError::Poisoned {
                session: self.session.session_id.clone(),
            });
        }
        let NumberedPlan {
            results,
            fresh,
            segment,
        } = number_plan(&self.session, plan, &self.store.limits)?;
        if fresh.is_empty() {
            return alongside().map(|t| (results, t));
        }
        let t = self.commit(fresh, segment, alongside)?;
        Ok((results, t))
    }

    fn commit<T: Send + 'static>(
        &mut self,
        fresh: Vec<SessionEvent>,
        segment: String,
        alongside: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let session_id = self.session.session_id.clone();
        let first = fresh[0].event_index();
        let last = fresh[fresh.len() - 1].event_index();
        let events_dir = layout::events_dir(&session_id);
        let temp = layout::temp_segment_path(&session_id, first, last);
        let final_path = layout::segment_path(&session_id, first, last);
        let manifest = layout::manifest_path(&session_id);
        // The snapshots this plan introduces that no record pins yet: asked before anything is
        // written, since a pin out of memory is read again to be sure (D235).
        let mut to_pin: Vec<(SnapshotRef, usize)> = Vec::new();
        for (snapshot, i) in introduced_snapshots(&fresh) {
            if !self.session.is_pinned(&snapshot)? && !to_pin.iter().any(|(s, _)| *s == snapshot) {
                to_pin.push((snapshot, i));
            }
        }

        // 0) A new session's manifest exists, empty and durable, before its first segment
        //    (decision D131): event segments with no manifest beside them can then only mean a
        //    lost manifest, never a first commit cut short, and are never taken for "no session".
        //    Its first records replace it whole in step 2, so a first write is never torn.
        let is_new_manifest = self.session.manifest.is_empty();
        if is_new_manifest {
            let dir = layout::session_dir(&session_id);
            let created = self
                .fs()
                .append_synced(&manifest, b"")
                .map_err(|e| ("create the manifest", manifest.clone(), e))
                .and_then(|()| {
                    self.fs()
                        .sync_dir(&dir)
                        .map_err(|e| ("sync the session directory", dir, e))
                });
            if let Err((op, path, e)) = created {
                return Err(self.failed(op, &path, &e, Committed::Nothing));
            }
        }

        // 1) Segment: temp -> fsync -> rename -> fsync(dir). Until the manifest attests it, a
        //    segment is an orphan: nothing is committed if anything here fails. `alongside`
        //    (the plan's snapshot) is durable before step 2 too.
        let write_segment = || {
            self.fs()
                .write_new_synced(&temp, segment.as_bytes())
                .map_err(|e| ("write the event segment", temp.clone(), e))
                .and_then(|()| {
                    self.fs()
                        .rename(&temp, &final_path)
                        .map_err(|e| ("rename the event segment", final_path.clone(), e))
                })
                .and_then(|()| {
                    self.fs()
                        .sync_dir(&events_dir)
                        .map_err(|e| ("sync the events directory", events_dir.clone(), e))
                })
        };
        let (beside, written) = if self.fs().overlaps_writes() {
            super::overlap::both(alongside, write_segment)
        } else {
            match alongside() {
                Ok(t) => (Ok(t), write_segment()),
                Err(e) => return Err(e),
            }
        };
        let beside = match beside {
            Ok(t) => t,
            Err(e) => {
                if written.is_err() {
                    self.remove_orphan(&temp);
                }
                // Nothing is attested: the session is as it was (a written segment is an orphan
                // the next commit of these indices replaces).
                return Err(e);
            }
        };
        if let Err((op, path, e)) = written {
            self.remove_orphan(&temp);
            return Err(self.failed(op, &path, &e, Committed::Nothing));
        }

        // 2) Attest the segment and pin the snapshots it introduced, in one write and one
        //    fsync (D49): the records stay in locked order (close, then pins), each its own line.
        let mut next_manifest = self.session.manifest.len() as u64;
        let closed = ManifestRecord::SegmentClosed(SegmentClosed {
            manifest_index: manifest_index(next_manifest)?,
            session_id: session_id.clone(),
            first_event_index: first,
            last_event_index: last,
            segment_rel_path: segment_rel_path(first, last),
            sha256: sha256(segment.as_bytes()),
            bytes: segment.len() as u64,
        });
        next_manifest += 1;
        let close_line = record_line(&closed)?;
        let mut records = vec![closed];
        let mut pins = String::new();
        let mut pin_lines = Vec::with_capacity(to_pin.len());
        for (snapshot, i) in to_pin {
            let pin = ManifestRecord::SnapshotPinned(SnapshotPinned {
                manifest_index: manifest_index(next_manifest)?,
                session_id: session_id.clone(),
                event_index: fresh[i].event_index(),
                snapshot_ref: snapshot.clone(),
                created_by_event_id: fresh[i].event_id().clone(),
            });
            next_manifest += 1;
            let line = record_line(&pin)?;
            pin_lines.push(line.len() as u64);
            pins.push_str(&line);
            records.push(pin);
        }
        // TEST-ONLY planted bug (feature `test-mutations`, off unless a test thread opts in):
        // the pins come before the record that attests their segment.
        #[cfg(feature = "test-mutations")]
        let close_after_pins = PINS_BEFORE_CLOSE.with(std::cell::Cell::get);
        #[cfg(not(feature = "test-mutations"))]
        let close_after_pins = false;
        let transaction = if close_after_pins {
            format!("{pins}{close_line}")
        } else {
            format!("{close_line}{pins}")
        };
        let committed_len = self.session.manifest_committed_bytes;
        let attested = if is_new_manifest {
            self.attest_first(&manifest, transaction.as_bytes())
        } else {
            self.fs()
                .append_synced(&manifest, transaction.as_bytes())
                .map_err(|e| ("append to the manifest and sync it", manifest.clone(), e))
        };
        if let Err((op, path, e)) = attested {
            let committed = self.undo_manifest_append(&manifest, committed_len, is_new_manifest);
            return Err(self.failed(op, &path, &e, committed));
        }

        // Committed: update the gate's view (handed back to the cache when the gate closes).
        let view = Arc::make_mut(&mut self.session);
        view.commit_events(fresh);
        // Where each record's line starts, in the order written (D235).
        let (close_at, mut pin_at) = if close_after_pins {
            (committed_len + pins.len() as u64, committed_len)
        } else {
            (committed_len, committed_len + close_line.len() as u64)
        };
        let mut starts = vec![close_at];
        for len in pin_lines {
            starts.push(pin_at);
            pin_at += len;
        }
        view.commit_records(records.into_iter().zip(starts.into_iter().map(Some)));
        view.manifest_committed_bytes += transaction.len() as u64;
        view.manifest_file_bytes = view.manifest_committed_bytes;
        Ok(beside)
    }

    /// Removes a segment's temp file after a failed commit, best effort: an orphan is never
    /// read, whatever its name, and GC removes it once old (D63).
    fn remove_orphan(&self, temp: &Path) {
        if let Err(e) = self.fs().remove_file(temp) {
            tracing::debug!("a segment's temp file was not removed: {e}");
        }
    }

    /// A new session's first records replace its empty manifest whole (temp file, fsync,
    /// rename, fsync the session directory), so no crash leaves a torn first write: the
    /// manifest is empty (no session, the start was never answered) or complete (D131).
    fn attest_first(
        &self,
        manifest: &Path,
        transaction: &[u8],
    ) -> Result<(), (&'static str, std::path::PathBuf, io::Error)> {
        let dir = manifest.parent().unwrap_or(Path::new(""));
        let temp = dir.join(layout::temp_file_name(layout::MANIFEST_FILE));
        let written = self
            .fs()
            .write_new_synced(&temp, transaction)
            .map_err(|e| ("write the first manifest records", temp.clone(), e))
            .and_then(|()| {
                self.fs()
                    .rename(&temp, manifest)
                    .map_err(|e| ("rename the manifest into place", manifest.to_path_buf(), e))
            });
        if written.is_err()
            && let Err(e) = self.fs().remove_file(&temp)
        {
            // Never read (a temp name); GC removes it once old.
            tracing::debug!("a temp manifest was not removed: {e}");
        }
        written?;
        self.fs()
            .sync_dir(dir)
            .map_err(|e| ("sync the session directory", dir.to_path_buf(), e))
    }

    /// Undoes a manifest append whose write or fsync failed: cuts the manifest back to its
    /// committed length and makes the cut durable. `Committed::Nothing` when that worked; else
    /// the records may be on disk, whole or torn, and the next load decides.
    fn undo_manifest_append(
        &self,
        manifest: &Path,
        committed_len: u64,
        is_new_manifest: bool,
    ) -> Committed {
        let undone = self
            .fs()
            .set_len(manifest, committed_len)
            .and_then(|()| self.fs().sync_file(manifest));
        match undone {
            Ok(()) => Committed::Nothing,
            // A manifest this call created holds no truth once cut, even if its entry lingers.
            Err(_) if is_new_manifest => match self.fs().len(manifest) {
                Ok(Some(0) | None) => Committed::Nothing,
                _ => Committed::Unknown,
            },
            Err(_) => Committed::Unknown,
        }
    }
}

fn manifest_index(value: u64) -> Result<ManifestIndex, StoreError> {
    ManifestIndex::new(value).ok_or(StoreError::Internal {
        detail: "manifestIndex would exceed 2^53-1".into(),
    })
}

fn record_line(record: &ManifestRecord) -> Result<String, StoreError> {
    let mut line = to_canonical_string(record).map_err(|e| StoreError::Internal {
        detail: format!("manifest record is not canonicalizable: {e}"),
    })?;
    line.push('\n');
    Ok(line)
}

/// A plan numbered against a session, by the append rules every store shares.
#[derive(Debug)]
pub(crate) struct NumberedPlan {
    /// One per plan event, in plan order: committed dedupeKeys as they were committed
    /// (`newly_appended: false`), the rest as they will be.
    pub results: Vec<AppendedEvent>,
    /// The new events, numbered from the session's next EventIndex.
    pub fresh: Vec<SessionEvent>,
    /// Their segment: each event's JCS text and a newline (empty when nothing is new).
    pub segment: String,
}

/// The append rules: a plan has at least one event, all of `loaded`'s session and no dedupeKey
/// twice; a committed dedupeKey is a no-op; the rest are numbered contiguously and must fit the
/// segment limits. Any breach is `InvalidPlan` and nothing is written.
pub(crate) fn number_plan(
    loaded: &LoadedSession,
    plan: AppendPlan,
    limits: &SegmentLimits,
) -> Result<NumberedPlan, StoreError> {
    let session_id = &loaded.session_id;
    let invalid = |detail: String| StoreError::InvalidPlan {
        session: session_id.clone(),
        detail,
    };
    if plan.events.is_empty() {
        return Err(invalid("a plan needs at least one event".into()));
    }
    let mut seen: HashSet<DedupeKey> = HashSet::new();
    for event in &plan.events {
        if event.session_id() != session_id {
            return Err(invalid(format!(
                "event {} belongs to session {}",
                event.dedupe_key(),
                event.session_id()
            )));
        }
        if !seen.insert(event.dedupe_key()) {
            return Err(invalid(format!(
                "dedupeKey {} appears twice",
                event.dedupe_key()
            )));
        }
    }
    // Split into idempotent no-ops and new events; number the new ones.
    let mut results = Vec::with_capacity(plan.events.len());
    let mut fresh = Vec::new();
    let first = loaded.next_event_index();
    for event in plan.events {
        if let Some(existing) = loaded.event_by_dedupe_key(&event.dedupe_key())? {
            results.push(AppendedEvent {
                event: existing.into_owned(),
                newly_appended: false,
            });
            continue;
        }
        let index = EventIndex::new(first + fresh.len() as u64)
            .ok_or_else(|| invalid("eventIndex would exceed 2^53-1".into()))?;
        let event = event.with_event_index(index);
        results.push(AppendedEvent {
            event: event.clone(),
            newly_appended: true,
        });
        fresh.push(event);
    }
    let mut segment = String::new();
    for event in &fresh {
        let line = to_canonical_string(event).map_err(|e| invalid(e.to_string()))?;
        segment.push_str(&line);
        segment.push('\n');
    }
    if fresh.len() > limits.max_events || segment.len() > limits.max_bytes {
        return Err(invalid(format!(
            "plan of {} events / {} bytes exceeds the segment limits ({} events, {} bytes)",
            fresh.len(),
            segment.len(),
            limits.max_events,
            limits.max_bytes
        )));
    }
    Ok(NumberedPlan {
        results,
        fresh,
        segment,
    })
}

/// Snapshot refs the plan's `node_created` events introduce (for callers that must store the
/// snapshots in the CAS before appending).
pub fn plan_snapshot_refs(plan: &AppendPlan) -> Vec<SnapshotRef> {
    plan.events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::NodeCreated(n) => Some(n.snapshot_ref.clone()),
            _ => None,
        })
        .collect()
}

//! The storage seam at the level of the locks (decision D95): what a session backend must do,
//! whatever keeps the bytes. The file store (`sessions/<id>/…`, `snapshots/`, `keys/`) is one
//! implementation ([`FileBackend`]); PostgreSQL is another (`store/postgres`).
//!
//! Every operation speaks the spec's types: events and manifest records are the same values
//! (and the same canonical bytes) in every backend, so an export, a replay or a health verdict
//! does not depend on where a session lives. The protocol reaches either store through
//! [`super::Store`] (D100), whose append gate has the closure shape this trait cannot offer.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::ids::{SessionId, SnapshotRef, WorkflowHash};
use workrail_spec::snapshot::ExecutionSnapshotFileV1;

use super::cas::{PinnedWorkflowStore, SnapshotStore};
use super::error::{Committed, StoreError};
use super::fs::{LockError, StoreFs};
use super::health::SessionHealth;
use super::keyring::{Keyring, KeyringStore};
use super::layout;
use super::load::LoadedSession;
use super::session::{AppendPlan, AppendedEvent, SessionIntent, SessionRead, SessionStore};
use crate::entropy::Entropy;

/// A held session lock: while it lives, no append to that session commits (from any process
/// using the same backend), and a second [`SessionBackend::lock_session`] waits its bounded
/// moment and then fails with [`StoreError::Locked`] (`SESSION_LOCKED`). Dropping it releases
/// the lock.
pub struct SessionLock {
    session: SessionId,
    _held: Box<dyn Send>,
}

impl SessionLock {
    /// Wraps whatever keeps a backend's lock held until it is dropped.
    pub fn new(session: SessionId, held: Box<dyn Send>) -> Self {
        Self {
            session,
            _held: held,
        }
    }

    pub fn session(&self) -> &SessionId {
        &self.session
    }
}

impl fmt::Debug for SessionLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionLock")
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// Where sessions, their objects and the keyring live. Synchronous: the protocol is
/// synchronous, and a backend that needs an async client runs it on its own thread (D98).
pub trait SessionBackend: Send + Sync + fmt::Debug {
    /// A short name for messages and test output (`file`, `postgres`).
    fn kind(&self) -> &'static str;

    /// The only durable mutation, under the session lock and only when the session is healthy:
    /// events whose dedupeKey is already committed are returned as committed
    /// (`newly_appended: false`); the rest get the next EventIndex values and commit together
    /// with their `segment_closed` record and the pins of the snapshots they introduce, or
    /// nothing does. A busy lock past the bounded wait is [`StoreError::Locked`].
    fn append(
        &self,
        session: &SessionId,
        plan: AppendPlan,
    ) -> Result<Vec<AppendedEvent>, StoreError>;

    /// The session's validated prefix with its health; `NotFound` without committed truth.
    fn load(&self, session: &SessionId) -> Result<Arc<LoadedSession>, StoreError>;

    /// [`SessionBackend::load`] for execution: anything but `healthy` is an error.
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

    /// Holds the session's exclusive lock (for maintenance: repair, GC), waiting the bounded
    /// moment for another holder, then [`StoreError::Locked`].
    fn lock_session(&self, session: &SessionId) -> Result<SessionLock, StoreError>;

    /// Stores a snapshot under `sha256(JCS(file))`; an existing, intact one is kept.
    fn put_snapshot(&self, snapshot: &ExecutionSnapshotFileV1) -> Result<SnapshotRef, StoreError>;

    /// The snapshot, verified against its address: damage is `CorruptObject`, never returned.
    fn get_snapshot(&self, snapshot: &SnapshotRef) -> Result<ExecutionSnapshotFileV1, StoreError>;

    /// Pins a compiled workflow under its `workflowHash`.
    fn put_workflow(
        &self,
        compiled: &CompiledWorkflowSnapshotV1,
    ) -> Result<WorkflowHash, StoreError>;

    /// The pinned workflow, verified against its hash.
    fn get_workflow(&self, hash: &WorkflowHash) -> Result<CompiledWorkflowSnapshotV1, StoreError>;

    /// The token signing keyring, created with a fresh `current` key on first use. Two
    /// processes racing to create it end up with the same keys.
    fn load_or_create_keyring(&self, entropy: &dyn Entropy) -> Result<Keyring, StoreError>;

    /// Every session that holds committed truth or may (for resume and GC), sorted by id.
    fn list_sessions(&self) -> Result<Vec<SessionId>, StoreError>;
}

/// The file store behind the seam: delegates to [`SessionStore`] (with the object check of D53),
/// [`SnapshotStore`], [`PinnedWorkflowStore`] and [`KeyringStore`], unchanged.
#[derive(Debug)]
pub struct FileBackend {
    sessions: SessionStore,
    snapshots: SnapshotStore,
    workflows: PinnedWorkflowStore,
    keyring: KeyringStore,
}

impl FileBackend {
    pub fn new(fs: Arc<dyn StoreFs>) -> Self {
        Self {
            sessions: SessionStore::new(Arc::clone(&fs)).with_object_check(),
            snapshots: SnapshotStore::new(Arc::clone(&fs)),
            workflows: PinnedWorkflowStore::new(Arc::clone(&fs)),
            keyring: KeyringStore::new(fs),
        }
    }

    /// The same backend waiting at most `wait` for another holder of a session lock.
    pub fn with_lock_wait(mut self, wait: Duration) -> Self {
        self.sessions = self.sessions.with_lock_wait(wait);
        self
    }

    pub fn session_store(&self) -> &SessionStore {
        &self.sessions
    }
}

impl SessionBackend for FileBackend {
    fn kind(&self) -> &'static str {
        "file"
    }

    fn append(
        &self,
        session: &SessionId,
        plan: AppendPlan,
    ) -> Result<Vec<AppendedEvent>, StoreError> {
        self.sessions
            .with_append_gate(session, SessionIntent::Create, |gate| gate.append(plan))
    }

    fn load(&self, session: &SessionId) -> Result<Arc<LoadedSession>, StoreError> {
        SessionRead::load(&self.sessions, session)
    }

    fn lock_session(&self, session: &SessionId) -> Result<SessionLock, StoreError> {
        let fs = self.sessions.fs();
        let dir = layout::session_dir(session);
        fs.create_dir_durable(&dir).map_err(|e| {
            StoreError::write(
                Some(session),
                "create the session directory",
                &dir,
                &e,
                Committed::Nothing,
            )
        })?;
        let path = layout::lock_path(session);
        let deadline = Instant::now() + self.sessions.lock_wait();
        let mut pause = Duration::from_millis(1);
        loop {
            match fs.try_lock(&path) {
                Ok(guard) => return Ok(SessionLock::new(session.clone(), Box::new(guard))),
                Err(LockError::Io(e)) => {
                    return Err(StoreError::Io {
                        session: Some(session.clone()),
                        op: "lock session",
                        detail: e.to_string(),
                    });
                }
                Err(LockError::Busy) => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(StoreError::Locked {
                    session: session.clone(),
                });
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    fn put_snapshot(&self, snapshot: &ExecutionSnapshotFileV1) -> Result<SnapshotRef, StoreError> {
        self.snapshots.put(snapshot)
    }

    fn get_snapshot(&self, snapshot: &SnapshotRef) -> Result<ExecutionSnapshotFileV1, StoreError> {
        self.snapshots.get(snapshot)
    }

    fn put_workflow(
        &self,
        compiled: &CompiledWorkflowSnapshotV1,
    ) -> Result<WorkflowHash, StoreError> {
        self.workflows.put(compiled)
    }

    fn get_workflow(&self, hash: &WorkflowHash) -> Result<CompiledWorkflowSnapshotV1, StoreError> {
        self.workflows.get(hash)
    }

    fn load_or_create_keyring(&self, entropy: &dyn Entropy) -> Result<Keyring, StoreError> {
        self.keyring
            .load_or_create(entropy)
            .map(|held| held.keyring)
    }

    fn list_sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        let mut ids = SessionRead::list_sessions(&self.sessions)?;
        ids.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        Ok(ids)
    }
}

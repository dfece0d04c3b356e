//! The store a [`crate::protocol::Workrail`] runs on: the file store in the data directory or
//! PostgreSQL (decision D100). A closed set, so an enum: every method matches on it, and the
//! append gate keeps its closure shape (`store.with_append_gate(&id, intent, |gate| …)`), which a
//! trait object could not offer. Derived per-machine files (the projection cache, server
//! records, config) stay in the data directory whatever the store; the persisted resume index
//! lives with the sessions it summarizes (a file in the data directory, a row in PostgreSQL:
//! D115).

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::ids::{SessionId, Sha256Digest, SnapshotRef, WorkflowHash};
use workrail_spec::jcs::Canonical;
use workrail_spec::snapshot::ExecutionSnapshotFileV1;

use super::backend::SessionBackend;
use super::cas::{ArtifactStore, PinnedWorkflowStore, PreparedArtifact, SnapshotStore};
use super::error::StoreError;
use super::fs::StoreFs;
use super::keyring::{HeldKeyring, KeyringRecreated, KeyringStore, Refresh};
use super::layout;
use super::load::LoadedSession;
use super::object_cache::{CacheBudget, ObjectCache, SNAPSHOT_CACHE_ENTRIES, estimate};
use super::postgres::{PgGate, PostgresBackend, RESUME_INDEX_ROW};
use super::session::{
    AppendGate, AppendPlan, AppendedEvent, SessionIntent, SessionRead, SessionStore,
};
use crate::entropy::Entropy;

/// Sessions, objects and the keyring, in one of the two stores.
#[derive(Debug)]
pub enum Store {
    /// `sessions/`, `snapshots/`, `workflows/pinned/`, `artifacts/`, `keys/` in the data dir.
    Files(FileStores),
    /// One PostgreSQL schema (`impl/docs/store.md` "PostgreSQL").
    Postgres(PgStores),
}

/// The file store's parts, unchanged.
#[derive(Debug)]
pub struct FileStores {
    pub sessions: SessionStore,
    pub snapshots: SnapshotStore,
    pub pinned: PinnedWorkflowStore,
    pub artifacts: ArtifactStore,
    pub keys: KeyringStore,
    fs: Arc<dyn StoreFs>,
}

impl FileStores {
    pub fn fs(&self) -> &Arc<dyn StoreFs> {
        &self.fs
    }
}

/// PostgreSQL with this process's caches of the immutable objects it read.
#[derive(Debug)]
pub struct PgStores {
    backend: Arc<PostgresBackend>,
    snapshots: ObjectCache<Sha256Digest, ExecutionSnapshotFileV1>,
    workflows: ObjectCache<Sha256Digest, CompiledWorkflowSnapshotV1>,
}

impl PgStores {
    pub fn backend(&self) -> &Arc<PostgresBackend> {
        &self.backend
    }
}

/// The append witness of either store, lent to the closure of [`Store::with_append_gate`].
#[derive(Debug)]
pub enum Gate<'a, 'w> {
    Files(&'a mut AppendGate<'w>),
    Postgres(&'a mut PgGate<'w>),
}

impl Gate<'_, '_> {
    /// The session as of the last commit (validated, healthy).
    pub fn session(&self) -> &LoadedSession {
        match self {
            Gate::Files(g) => g.session(),
            Gate::Postgres(g) => g.session(),
        }
    }

    /// A shared handle on the session as of the last commit.
    pub fn shared(&self) -> Arc<LoadedSession> {
        match self {
            Gate::Files(g) => g.shared(),
            Gate::Postgres(g) => g.shared(),
        }
    }

    /// The only durable mutation (see [`AppendGate::append`]).
    pub fn append(&mut self, plan: AppendPlan) -> Result<Vec<AppendedEvent>, StoreError> {
        match self {
            Gate::Files(g) => g.append(plan),
            Gate::Postgres(g) => g.append_alongside(plan, || Ok(())).map(|(a, ())| a),
        }
    }

    /// [`Gate::append`] with `alongside` durable before the plan commits (D65 in the file
    /// store; before the transaction in PostgreSQL).
    pub fn append_alongside<T: Send + 'static>(
        &mut self,
        plan: AppendPlan,
        alongside: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
    ) -> Result<(Vec<AppendedEvent>, T), StoreError> {
        match self {
            Gate::Files(g) => g.append_alongside(plan, alongside),
            Gate::Postgres(g) => g.append_alongside(plan, alongside),
        }
    }
}

/// What a commit stores beside its plan, movable into the alongside closure.
#[derive(Debug, Clone)]
pub enum ObjectWriter {
    Files(SnapshotStore, ArtifactStore),
    Postgres(Arc<PostgresBackend>),
}

impl ObjectWriter {
    pub fn put_snapshot_canonical(
        &self,
        snapshot: &ExecutionSnapshotFileV1,
        canonical: &Canonical<ExecutionSnapshotFileV1>,
    ) -> Result<SnapshotRef, StoreError> {
        match self {
            ObjectWriter::Files(snapshots, _) => snapshots.put_canonical(snapshot, canonical),
            ObjectWriter::Postgres(backend) => {
                let snapshot_ref = SnapshotRef::from_digest(canonical.digest().clone());
                backend.put_snapshot_bytes(&snapshot_ref, canonical.bytes())?;
                Ok(snapshot_ref)
            }
        }
    }

    pub fn put_prepared_artifact(&self, artifact: &PreparedArtifact) -> Result<(), StoreError> {
        match self {
            ObjectWriter::Files(_, artifacts) => artifacts.put_prepared(artifact),
            ObjectWriter::Postgres(backend) => {
                backend.put_artifact(artifact.digest(), artifact.bytes())
            }
        }
    }
}

impl Store {
    /// The file store over `fs` (the data directory, or a test's filesystem).
    pub fn files(fs: Arc<dyn StoreFs>) -> Self {
        Store::Files(FileStores {
            sessions: SessionStore::new(Arc::clone(&fs)).with_object_check(),
            snapshots: SnapshotStore::new(Arc::clone(&fs)),
            pinned: PinnedWorkflowStore::new(Arc::clone(&fs)),
            artifacts: ArtifactStore::new(Arc::clone(&fs)),
            keys: KeyringStore::new(Arc::clone(&fs)),
            fs,
        })
    }

    /// PostgreSQL through a connected backend.
    pub fn postgres(backend: PostgresBackend) -> Self {
        let budget = CacheBudget::default();
        Store::Postgres(PgStores {
            backend: Arc::new(backend),
            snapshots: ObjectCache::new(budget.snapshots).with_max_entries(SNAPSHOT_CACHE_ENTRIES),
            workflows: ObjectCache::new(budget.workflows),
        })
    }

    /// Makes what a load of `session` found durable before a call is answered from it: a
    /// resend (or a retry after a kill) finds its call's record by its dedupe key, and that
    /// record may be the append of a writer killed before its fsync, which only the page cache
    /// holds; answered as it is, a power cut would lose an answered call (decision D207). On
    /// files, one fsync of the manifest (of another writer's append in flight too, which a
    /// power cut may tear as well: the state D49 accepts). PostgreSQL answers only from
    /// committed rows: nothing to do. A manifest gone meanwhile (GC deleted the session) has
    /// nothing left to make durable.
    pub fn sync_recorded(&self, session: &SessionId) -> Result<(), StoreError> {
        match self {
            Store::Files(f) => {
                let manifest = layout::manifest_path(session);
                match f.fs.sync_file(&manifest) {
                    // Reported as any failed commit is (errno, path, what is committed): the
                    // record was written by an earlier call and is not confirmed on disk.
                    Err(e) if e.kind() != io::ErrorKind::NotFound => Err(StoreError::write(
                        Some(session),
                        "make the recorded answer durable before repeating it",
                        &manifest,
                        &e,
                        super::error::Committed::Unknown,
                    )),
                    _ => Ok(()),
                }
            }
            Store::Postgres(_) => Ok(()),
        }
    }

    /// `file` or `postgres`.
    pub fn kind(&self) -> &'static str {
        match self {
            Store::Files(_) => "file",
            Store::Postgres(_) => "postgres",
        }
    }

    /// The PostgreSQL stores, when this is PostgreSQL (maintenance: repair and GC).
    pub fn postgres_stores(&self) -> Option<&PgStores> {
        match self {
            Store::Postgres(p) => Some(p),
            Store::Files(_) => None,
        }
    }

    /// The file store's parts (maintenance that only the file store has: repair, GC).
    pub fn file_stores(&self) -> Option<&FileStores> {
        match self {
            Store::Files(f) => Some(f),
            Store::Postgres(_) => None,
        }
    }

    /// The same store waiting at most `wait` for another holder of a session lock.
    pub fn with_lock_wait(self, wait: Duration) -> Self {
        match self {
            Store::Files(mut f) => {
                f.sessions = f.sessions.with_lock_wait(wait);
                Store::Files(f)
            }
            Store::Postgres(mut p) => {
                if let Some(backend) = Arc::get_mut(&mut p.backend) {
                    backend.set_lock_wait(wait);
                }
                Store::Postgres(p)
            }
        }
    }

    /// The same store with empty caches of these budgets.
    /// The same store keeping at least `resident` of a loaded session's newest events parsed;
    /// older ones are read again from their segments (D225), or on PostgreSQL from their rows
    /// (D227), when asked for.
    pub fn with_resident_events(self, resident: usize) -> Self {
        match self {
            Store::Files(mut f) => {
                f.sessions = f.sessions.with_resident_events(resident);
                Store::Files(f)
            }
            Store::Postgres(mut p) => {
                // Set when the store is built, before anything else holds its backend.
                if let Some(backend) = Arc::get_mut(&mut p.backend) {
                    backend.set_resident_events(resident);
                }
                Store::Postgres(p)
            }
        }
    }

    pub fn with_cache_budget(self, budget: CacheBudget) -> Self {
        match self {
            Store::Files(mut f) => {
                f.sessions = f.sessions.with_cache_budget(budget.sessions);
                f.snapshots = SnapshotStore::with_budget(Arc::clone(&f.fs), budget.snapshots);
                f.pinned = PinnedWorkflowStore::with_budget(Arc::clone(&f.fs), budget.workflows);
                Store::Files(f)
            }
            Store::Postgres(mut p) => {
                if let Some(backend) = Arc::get_mut(&mut p.backend) {
                    backend.set_cache_budget(budget.sessions);
                }
                p.snapshots =
                    ObjectCache::new(budget.snapshots).with_max_entries(SNAPSHOT_CACHE_ENTRIES);
                p.workflows = ObjectCache::new(budget.workflows);
                Store::Postgres(p)
            }
        }
    }

    /// The sizes of the caches: (sessions, snapshots, workflows), each as (entries, estimated
    /// bytes, budget).
    pub fn cache_sizes(&self) -> [(usize, usize, usize); 3] {
        fn size<K: std::hash::Hash + Eq, V>(c: &ObjectCache<K, V>) -> (usize, usize, usize) {
            (c.len(), c.bytes(), c.budget())
        }
        match self {
            Store::Files(f) => [
                size(f.sessions.session_cache()),
                size(f.snapshots.cache()),
                size(f.pinned.cache()),
            ],
            Store::Postgres(p) => [
                size(p.backend.session_cache()),
                size(&p.snapshots),
                size(&p.workflows),
            ],
        }
    }

    /// Runs `f` with the append witness for `session`: the session's lock (waiting a bounded
    /// moment), a healthy load (a new session is empty and healthy), then `f`; the lock is
    /// released when `f` returns.
    ///
    /// `intent` says what an absent session means: new for [`SessionIntent::Create`], deleted
    /// ([`StoreError::Deleted`], nothing created) for [`SessionIntent::Continue`] (D130).
    pub fn with_append_gate<T, E, F>(
        &self,
        session: &SessionId,
        intent: SessionIntent,
        f: F,
    ) -> Result<T, E>
    where
        E: From<StoreError>,
        F: for<'a, 'w> FnOnce(&mut Gate<'a, 'w>) -> Result<T, E>,
    {
        match self {
            Store::Files(files) => files
                .sessions
                .with_append_gate(session, intent, |gate| f(&mut Gate::Files(gate))),
            Store::Postgres(p) => {
                let mut gate = p.backend.open_gate(session, intent)?;
                f(&mut Gate::Postgres(&mut gate))
            }
        }
    }

    /// Drops this process's cached view of `session`.
    pub fn forget_cached(&self, session: &SessionId) {
        match self {
            Store::Files(f) => f.sessions.forget_cached(session),
            Store::Postgres(p) => p.backend.forget_cached(session),
        }
    }

    /// A handle on the object stores for a commit's alongside write.
    pub fn writer(&self) -> ObjectWriter {
        match self {
            Store::Files(f) => ObjectWriter::Files(f.snapshots.clone(), f.artifacts.clone()),
            Store::Postgres(p) => ObjectWriter::Postgres(Arc::clone(&p.backend)),
        }
    }

    pub fn snapshot(
        &self,
        snapshot: &SnapshotRef,
    ) -> Result<Arc<ExecutionSnapshotFileV1>, StoreError> {
        match self {
            Store::Files(f) => f.snapshots.get_shared(snapshot),
            Store::Postgres(p) => {
                if let Some(hit) = p.snapshots.get(snapshot.digest()) {
                    return Ok(hit);
                }
                let value = Arc::new(p.backend.get_snapshot(snapshot)?);
                let bytes = serde_json::to_vec(&*value).map_or(0, |b| b.len());
                p.snapshots.insert(
                    snapshot.digest().clone(),
                    Arc::clone(&value),
                    estimate(bytes),
                );
                Ok(value)
            }
        }
    }

    pub fn put_snapshot(
        &self,
        snapshot: &ExecutionSnapshotFileV1,
    ) -> Result<SnapshotRef, StoreError> {
        match self {
            Store::Files(f) => f.snapshots.put(snapshot),
            Store::Postgres(p) => p.backend.put_snapshot(snapshot),
        }
    }

    pub fn workflow(
        &self,
        hash: &WorkflowHash,
    ) -> Result<Arc<CompiledWorkflowSnapshotV1>, StoreError> {
        match self {
            Store::Files(f) => f.pinned.get_shared(hash),
            Store::Postgres(p) => {
                if let Some(hit) = p.workflows.get(hash.digest()) {
                    return Ok(hit);
                }
                let value = Arc::new(p.backend.get_workflow(hash)?);
                let bytes = serde_json::to_vec(&*value).map_or(0, |b| b.len());
                p.workflows
                    .insert(hash.digest().clone(), Arc::clone(&value), estimate(bytes));
                Ok(value)
            }
        }
    }

    pub fn put_workflow(
        &self,
        compiled: &CompiledWorkflowSnapshotV1,
    ) -> Result<WorkflowHash, StoreError> {
        match self {
            Store::Files(f) => f.pinned.put(compiled),
            Store::Postgres(p) => p.backend.put_workflow(compiled),
        }
    }

    pub fn put_workflow_canonical(
        &self,
        compiled: &CompiledWorkflowSnapshotV1,
        canonical: &Canonical<CompiledWorkflowSnapshotV1>,
    ) -> Result<WorkflowHash, StoreError> {
        match self {
            Store::Files(f) => f.pinned.put_canonical(compiled, canonical),
            Store::Postgres(p) => {
                let hash = WorkflowHash::from_digest(canonical.digest().clone());
                p.backend.put_workflow_bytes(&hash, canonical.bytes())?;
                Ok(hash)
            }
        }
    }

    /// Reads and verifies an artifact.
    pub fn artifact(&self, digest: &Sha256Digest) -> Result<serde_json::Value, StoreError> {
        match self {
            Store::Files(f) => f.artifacts.get(digest),
            Store::Postgres(p) => p.backend.get_artifact(digest),
        }
    }

    /// Stores an artifact; returns its digest and canonical byte length.
    pub fn put_artifact(
        &self,
        artifact: &super::cas::ArtifactObject,
    ) -> Result<(Sha256Digest, u64), StoreError> {
        let prepared = ArtifactStore::prepare(artifact)?;
        self.writer().put_prepared_artifact(&prepared)?;
        Ok((prepared.digest().clone(), prepared.bytes().len() as u64))
    }

    pub fn put_prepared_artifact(&self, artifact: &PreparedArtifact) -> Result<(), StoreError> {
        self.writer().put_prepared_artifact(artifact)
    }

    /// The keyring as this process holds it, created with a fresh key on first use.
    pub fn load_or_create_keyring(&self, entropy: &dyn Entropy) -> Result<HeldKeyring, StoreError> {
        match self {
            Store::Files(f) => f.keys.load_or_create(entropy),
            Store::Postgres(p) => p.backend.load_or_create_held(entropy),
        }
    }

    /// Compares the stored keyring with `held` (D66).
    pub fn refresh_keyring(&self, held: &HeldKeyring) -> Result<Refresh, StoreError> {
        match self {
            Store::Files(f) => f.keys.refresh(held),
            Store::Postgres(p) => p.backend.refresh_keyring(held),
        }
    }

    /// Explicit rotation: `current -> previous`, fresh `current`.
    pub fn rotate_keyring(&self, entropy: &dyn Entropy) -> Result<HeldKeyring, StoreError> {
        match self {
            Store::Files(f) => f.keys.rotate(entropy),
            Store::Postgres(p) => p.backend.rotate_keyring(entropy),
        }
    }

    /// The note a re-created keyring left (D54; the file store only: a PostgreSQL keyring row
    /// is created once, by whoever inserts it first).
    pub fn keyring_recreated(&self) -> Option<KeyringRecreated> {
        match self {
            Store::Files(f) => f.keys.recreated(),
            Store::Postgres(_) => None,
        }
    }

    /// The persisted `resume_session` index as stored (D64, D115), `None` when there is none:
    /// the file `cache/resume-index.v1.jsonl` of the data directory, or the PostgreSQL row
    /// `derived.resume-index.v1` that every process on the schema shares. Derived: the caller
    /// checks the bytes and treats an error as no index.
    pub fn read_resume_index(&self) -> io::Result<Option<Vec<u8>>> {
        match self {
            Store::Files(f) => f.fs.read(Path::new(layout::RESUME_INDEX_FILE)),
            Store::Postgres(p) => p
                .backend
                .derived(RESUME_INDEX_ROW)
                .map_err(|e| io::Error::other(e.to_string())),
        }
    }

    /// Replaces the persisted `resume_session` index with `bytes`, whole: in the file store a
    /// temp file unique to this writer, then a rename (atomic), no fsync (it is rebuildable); in
    /// PostgreSQL one upsert of the row under the store's timeout. Either way concurrent
    /// writers never tear it and the last one wins. The caller ignores a failure.
    pub fn write_resume_index(&self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Store::Files(f) => write_resume_index_file(f.fs.as_ref(), bytes),
            Store::Postgres(p) => p
                .backend
                .put_derived(RESUME_INDEX_ROW, bytes)
                .map_err(|e| io::Error::other(e.to_string())),
        }
    }

    /// Every session, with its manifest length as [`Store::manifest_lengths`] gives it: the
    /// listing and a `stat` each in the file store, one query in PostgreSQL.
    pub fn sessions_with_manifest_lengths(
        &self,
    ) -> Result<(Vec<SessionId>, Vec<ManifestLength>), StoreError> {
        match self {
            Store::Files(f) => {
                let ids = SessionRead::list_sessions(&f.sessions)?;
                let lengths = manifest_lengths_parallel(f.fs.as_ref(), &ids);
                Ok((ids, lengths))
            }
            Store::Postgres(p) => Ok(p
                .backend
                .manifest_lengths()?
                .into_iter()
                .map(|(id, len)| (id, Ok(Some(len))))
                .unzip()),
        }
    }

    /// Each session's manifest length (the resume index's freshness key): a `stat` each in the
    /// file store, one query in PostgreSQL (the length its rows spell as `manifest.jsonl`).
    pub fn manifest_lengths(&self, ids: &[SessionId]) -> Vec<ManifestLength> {
        match self {
            Store::Files(f) => manifest_lengths_parallel(f.fs.as_ref(), ids),
            Store::Postgres(p) => match p.backend.manifest_lengths() {
                Ok(rows) => {
                    let rows: std::collections::HashMap<SessionId, u64> =
                        rows.into_iter().collect();
                    ids.iter().map(|id| Ok(rows.get(id).copied())).collect()
                }
                Err(e) => ids
                    .iter()
                    .map(|_| Err(io::Error::other(e.to_string())))
                    .collect(),
            },
        }
    }
}

impl SessionRead for Store {
    fn load(&self, session: &SessionId) -> Result<Arc<LoadedSession>, StoreError> {
        match self {
            Store::Files(f) => SessionRead::load(&f.sessions, session),
            Store::Postgres(p) => p.backend.load_cached(session),
        }
    }

    fn list_sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        match self {
            Store::Files(f) => SessionRead::list_sessions(&f.sessions),
            Store::Postgres(p) => SessionBackend::list_sessions(&*p.backend),
        }
    }
}

/// A session's manifest length in bytes: `None` when it has none, `Err` when it could not be
/// read.
pub type ManifestLength = io::Result<Option<u64>>;
/// [`Store::write_resume_index`] in the data directory.
fn write_resume_index_file(fs: &dyn StoreFs, bytes: &[u8]) -> io::Result<()> {
    let dir = Path::new(layout::DATA_CACHE_DIR);
    fs.create_dir_all(dir)?;
    let final_name = Path::new(layout::RESUME_INDEX_FILE)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("resume-index");
    let tmp = dir.join(layout::temp_file_name(final_name));
    let written = fs
        .write_new(&tmp, bytes)
        .and_then(|()| fs.rename(&tmp, Path::new(layout::RESUME_INDEX_FILE)));
    if let Err(why) = &written
        && let Err(e) = fs.remove_file(&tmp)
    {
        // The write's error is what the caller reports; the temp file is swept by GC (D63).
        tracing::debug!(temp = %tmp.display(), write_error = %why, error = %e, "could not remove the resume index's temp file");
    }
    written
}

/// The length of each session's manifest (`Err`: it could not be read): a `stat` each,
/// relative to the sessions directory.
fn manifest_lengths(fs: &dyn StoreFs, ids: &[SessionId]) -> Vec<io::Result<Option<u64>>> {
    let files: Vec<String> = ids
        .iter()
        .map(|id| format!("{}/{}", id.as_str(), layout::MANIFEST_FILE))
        .collect();
    fs.lens_in(Path::new(layout::SESSIONS_DIR), &files)
}

/// [`manifest_lengths`] over two threads when there are many.
fn manifest_lengths_parallel(fs: &dyn StoreFs, ids: &[SessionId]) -> Vec<io::Result<Option<u64>>> {
    if ids.len() < 512 {
        return manifest_lengths(fs, ids);
    }
    let (first, second) = ids.split_at(ids.len() / 2);
    std::thread::scope(|scope| {
        let helper = scope.spawn(|| manifest_lengths(fs, second));
        let mut lengths = manifest_lengths(fs, first);
        match helper.join() {
            Ok(rest) => lengths.extend(rest),
            Err(_) => lengths.extend(manifest_lengths(fs, second)),
        }
        lengths
    })
}

//! Content-addressed stores: execution snapshots (key `sha256(JCS(file))`) and pinned compiled
//! workflows (key `workflowHash`) (locks §1 "Snapshot storage layout", §5).
//!
//! Objects are immutable: a put of an existing key writes nothing. Every get re-hashes what it
//! read, so a damaged object is reported as corruption, never returned.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::ids::{Sha256Digest, SnapshotRef, WorkflowHash};
use workrail_spec::jcs::{Canonical, sha256};
use workrail_spec::snapshot::ExecutionSnapshotFileV1;

use super::error::{Committed, StoreError};
use super::fs::StoreFs;
use super::layout;
use super::object_cache::{CacheBudget, ObjectCache, estimate};

/// Writes an immutable object durably and atomically: a temp file no other writer uses, fsync,
/// rename, fsync the directory. An object that is already there is checked byte for byte (a
/// damaged one is replaced), its modification time is refreshed (so GC's grace period keeps it
/// while the session that reuses it commits), and its directory entry is made durable all the
/// same: the writer that created it may have died before its directory fsync.
fn put_durable(fs: &dyn StoreFs, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new(""));
    fn failed<'a>(op: &'static str, at: &'a Path) -> impl Fn(std::io::Error) -> StoreError + 'a {
        move |e| StoreError::write(None, op, at, &e, Committed::Nothing)
    }
    let existing = fs
        .read(path)
        .map_err(failed("read the stored object", path))?;
    // An object already there is refreshed (or replaced when damaged) under its directory's
    // shared lock: GC's sweep judges an object's age and deletes it under the exclusive one, so
    // it never deletes an object between this check and its refresh (decision D133).
    let _shared = match existing {
        None => None,
        Some(_) => {
            let lock = layout::object_dir_lock_path(dir);
            let held = super::session::with_backoff(super::DEFAULT_LOCK_WAIT, || {
                fs.try_lock_shared_creating(&lock)
            })
            .map_err(failed("lock the object directory", &lock))?;
            match held {
                Some(held) => Some(held),
                None => {
                    return Err(failed("lock the object directory", &lock)(
                        std::io::Error::new(
                            std::io::ErrorKind::WouldBlock,
                            "gc kept the object directory locked; retry the call",
                        ),
                    ));
                }
            }
        }
    };
    if existing.as_deref() == Some(bytes) {
        // Fresh again for GC's grace period: a session is about to reference it. Gone since it
        // was read (a sweep that judged it before this call's lock): stored anew below.
        match fs.touch(path) {
            Ok(()) => {
                return fs
                    .sync_dir(dir)
                    .map_err(failed("sync the object directory", dir));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(failed("refresh the stored object", path)(e)),
        }
    }
    fs.create_dir_durable(dir)
        .map_err(failed("create the object directory", dir))?;
    let file_name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp: PathBuf = dir.join(layout::temp_file_name(&file_name));
    let written = fs
        .write_new_synced(&tmp, bytes)
        .map_err(failed("write a stored object", &tmp))
        .and_then(|()| {
            fs.rename(&tmp, path)
                .map_err(failed("rename a stored object into place", path))
        });
    if written.is_err()
        && let Err(e) = fs.remove_file(&tmp)
    {
        // Safe to leave: a temp file is never read, and GC removes it once old (D63).
        tracing::debug!("a stored object's temp file was not removed: {e}");
    }
    written?;
    fs.sync_dir(dir)
        .map_err(failed("sync the object directory", dir))
}

/// A value verified against its digest, and the length of the file it was read from (or
/// written to).
#[derive(Debug)]
pub struct Verified<T> {
    pub value: Arc<T>,
    pub file_len: u64,
}

impl<T> Verified<T> {
    fn new(value: T, file_len: usize) -> Arc<Self> {
        Arc::new(Self {
            value: Arc::new(value),
            file_len: file_len as u64,
        })
    }
}

/// The cached value of an object whose file is still there with the length it was verified at
/// (one `stat`, no read, parse or hash). A vanished file is reported as missing, as an uncached
/// read would; a file of another length is read and verified again.
fn still_on_disk<T>(
    fs: &dyn StoreFs,
    cache: &ObjectCache<Sha256Digest, Verified<T>>,
    digest: &Sha256Digest,
    path: &Path,
    what: &str,
) -> Result<Option<Arc<T>>, StoreError> {
    let Some(cached) = cache.get(digest) else {
        return Ok(None);
    };
    let len = fs.len(path).map_err(|e| StoreError::Io {
        session: None,
        op: "stat object",
        detail: e.to_string(),
    })?;
    match len {
        Some(len) if len == cached.file_len => Ok(Some(Arc::clone(&cached.value))),
        Some(_) => {
            cache.remove(digest);
            Ok(None)
        }
        None => {
            cache.remove(digest);
            Err(StoreError::MissingObject {
                what: what.to_owned(),
            })
        }
    }
}

/// Whether stored text is the object's canonical (JCS) form with this digest: then the object
/// parsed from it hashes to the digest without being serialized again. Every WorkRail writer
/// stores canonical bytes, so this is the common case; other bytes (an object written in
/// another but equivalent form) are judged by canonicalizing what they parse to.
fn is_canonical_form_of(text: &str, digest: &Sha256Digest) -> bool {
    &sha256(text.as_bytes()) == digest
}

fn read_object(fs: &dyn StoreFs, path: &Path, what: &str) -> Result<String, StoreError> {
    let bytes = fs
        .read(path)
        .map_err(|e| StoreError::Io {
            session: None,
            op: "read object",
            detail: e.to_string(),
        })?
        .ok_or_else(|| StoreError::MissingObject {
            what: what.to_owned(),
        })?;
    String::from_utf8(bytes).map_err(|e| StoreError::CorruptObject {
        what: what.to_owned(),
        detail: e.to_string(),
    })
}

/// The snapshot CAS (global to the data directory), with a bounded cache of verified
/// snapshots: a snapshot is read, parsed and re-hashed once per process (while it stays in the
/// cache), and a put keeps the value it wrote, so nothing reads back what it just wrote.
#[derive(Debug, Clone)]
pub struct SnapshotStore {
    fs: Arc<dyn StoreFs>,
    cache: Arc<ObjectCache<Sha256Digest, Verified<ExecutionSnapshotFileV1>>>,
}

impl SnapshotStore {
    pub fn new(fs: Arc<dyn StoreFs>) -> Self {
        Self::with_budget(fs, CacheBudget::default().snapshots)
    }

    /// A store whose cache holds at most `budget` estimated bytes.
    pub fn with_budget(fs: Arc<dyn StoreFs>, budget: usize) -> Self {
        Self {
            fs,
            cache: Arc::new(
                ObjectCache::new(budget)
                    .with_max_entries(super::object_cache::SNAPSHOT_CACHE_ENTRIES),
            ),
        }
    }

    /// The cache (sizes for benchmarks and tests).
    pub fn cache(&self) -> &ObjectCache<Sha256Digest, Verified<ExecutionSnapshotFileV1>> {
        &self.cache
    }

    pub fn put(&self, snapshot: &ExecutionSnapshotFileV1) -> Result<SnapshotRef, StoreError> {
        let canonical = Canonical::of(snapshot).map_err(|e| StoreError::Internal {
            detail: e.to_string(),
        })?;
        self.put_canonical(snapshot, &canonical)
    }

    /// [`SnapshotStore::put`] of a snapshot whose canonical form the caller already has.
    pub fn put_canonical(
        &self,
        snapshot: &ExecutionSnapshotFileV1,
        canonical: &Canonical<ExecutionSnapshotFileV1>,
    ) -> Result<SnapshotRef, StoreError> {
        let bytes = canonical.bytes();
        let snapshot_ref = SnapshotRef::from_digest(canonical.digest().clone());
        put_durable(&*self.fs, &layout::snapshot_path(&snapshot_ref), bytes)?;
        self.cache.insert(
            snapshot_ref.digest().clone(),
            Verified::new(snapshot.clone(), bytes.len()),
            estimate(bytes.len()),
        );
        Ok(snapshot_ref)
    }

    pub fn contains(&self, snapshot_ref: &SnapshotRef) -> Result<bool, StoreError> {
        self.fs
            .len(&layout::snapshot_path(snapshot_ref))
            .map(|l| l.is_some())
            .map_err(|e| StoreError::Io {
                session: None,
                op: "stat snapshot",
                detail: e.to_string(),
            })
    }

    pub fn get(&self, snapshot_ref: &SnapshotRef) -> Result<ExecutionSnapshotFileV1, StoreError> {
        self.get_shared(snapshot_ref).map(|s| (*s).clone())
    }

    /// The verified snapshot, shared with the cache.
    pub fn get_shared(
        &self,
        snapshot_ref: &SnapshotRef,
    ) -> Result<Arc<ExecutionSnapshotFileV1>, StoreError> {
        let path = layout::snapshot_path(snapshot_ref);
        let what = format!("snapshot {snapshot_ref}");
        if let Some(value) =
            still_on_disk(&*self.fs, &self.cache, snapshot_ref.digest(), &path, &what)?
        {
            return Ok(value);
        }
        let text = read_object(&*self.fs, &path, &what)?;
        let corrupt = |detail: String| StoreError::CorruptObject {
            what: what.clone(),
            detail,
        };
        let snapshot =
            ExecutionSnapshotFileV1::from_json_str(&text).map_err(|e| corrupt(e.to_string()))?;
        if !is_canonical_form_of(&text, snapshot_ref.digest()) {
            let actual = snapshot
                .snapshot_ref()
                .map_err(|e| corrupt(e.to_string()))?;
            if &actual != snapshot_ref {
                return Err(corrupt(format!("content hashes to {actual}")));
            }
        }
        let verified = Verified::new(snapshot, text.len());
        let snapshot = Arc::clone(&verified.value);
        self.cache.insert(
            snapshot_ref.digest().clone(),
            verified,
            estimate(text.len()),
        );
        Ok(snapshot)
    }

    pub fn list(&self) -> Result<Vec<SnapshotRef>, StoreError> {
        list_digests(&*self.fs, Path::new(layout::SNAPSHOTS_DIR))
            .map(|v| v.into_iter().map(SnapshotRef::from_digest).collect())
    }
}

fn list_digests(
    fs: &dyn StoreFs,
    dir: &Path,
) -> Result<Vec<workrail_spec::ids::Sha256Digest>, StoreError> {
    let names = fs.list_dir(dir).map_err(|e| StoreError::Io {
        session: None,
        op: "list objects",
        detail: e.to_string(),
    })?;
    Ok(names
        .iter()
        .filter_map(|n| n.strip_suffix(".json"))
        .filter_map(|hex| workrail_spec::ids::Sha256Digest::parse(&format!("sha256:{hex}")).ok())
        .collect())
}

/// Compiled workflows by `workflowHash`: the execution authority of every run.
/// The pinned workflow CAS, with a bounded cache of verified workflows (see [`SnapshotStore`]).
#[derive(Debug, Clone)]
pub struct PinnedWorkflowStore {
    fs: Arc<dyn StoreFs>,
    cache: Arc<ObjectCache<Sha256Digest, Verified<CompiledWorkflowSnapshotV1>>>,
}

impl PinnedWorkflowStore {
    pub fn new(fs: Arc<dyn StoreFs>) -> Self {
        Self::with_budget(fs, CacheBudget::default().workflows)
    }

    /// A store whose cache holds at most `budget` estimated bytes.
    pub fn with_budget(fs: Arc<dyn StoreFs>, budget: usize) -> Self {
        Self {
            fs,
            cache: Arc::new(ObjectCache::new(budget)),
        }
    }

    /// The cache (sizes for benchmarks and tests).
    pub fn cache(&self) -> &ObjectCache<Sha256Digest, Verified<CompiledWorkflowSnapshotV1>> {
        &self.cache
    }

    pub fn put(&self, compiled: &CompiledWorkflowSnapshotV1) -> Result<WorkflowHash, StoreError> {
        let canonical = Canonical::of(compiled).map_err(|e| StoreError::Internal {
            detail: e.to_string(),
        })?;
        self.put_canonical(compiled, &canonical)
    }

    /// [`PinnedWorkflowStore::put`] of a workflow whose canonical form the caller already has
    /// (as [`crate::compiler::Compiled`] keeps it).
    pub fn put_canonical(
        &self,
        compiled: &CompiledWorkflowSnapshotV1,
        canonical: &Canonical<CompiledWorkflowSnapshotV1>,
    ) -> Result<WorkflowHash, StoreError> {
        let bytes = canonical.bytes();
        let hash = WorkflowHash::from_digest(canonical.digest().clone());
        put_durable(&*self.fs, &layout::pinned_workflow_path(&hash), bytes)?;
        self.cache.insert(
            hash.digest().clone(),
            Verified::new(compiled.clone(), bytes.len()),
            estimate(bytes.len()),
        );
        Ok(hash)
    }

    pub fn get(&self, hash: &WorkflowHash) -> Result<CompiledWorkflowSnapshotV1, StoreError> {
        self.get_shared(hash).map(|c| (*c).clone())
    }

    /// The verified workflow, shared with the cache.
    pub fn get_shared(
        &self,
        hash: &WorkflowHash,
    ) -> Result<Arc<CompiledWorkflowSnapshotV1>, StoreError> {
        let path = layout::pinned_workflow_path(hash);
        let what = format!("pinned workflow {hash}");
        if let Some(value) = still_on_disk(&*self.fs, &self.cache, hash.digest(), &path, &what)? {
            return Ok(value);
        }
        let text = read_object(&*self.fs, &path, &what)?;
        let corrupt = |detail: String| StoreError::CorruptObject {
            what: what.clone(),
            detail,
        };
        let compiled =
            CompiledWorkflowSnapshotV1::from_json_str(&text).map_err(|e| corrupt(e.to_string()))?;
        if !is_canonical_form_of(&text, hash.digest()) {
            let actual = compiled
                .workflow_hash()
                .map_err(|e| corrupt(e.to_string()))?;
            if &actual != hash {
                return Err(corrupt(format!("content hashes to {actual}")));
            }
        }
        let verified = Verified::new(compiled, text.len());
        let compiled = Arc::clone(&verified.value);
        self.cache
            .insert(hash.digest().clone(), verified, estimate(text.len()));
        Ok(compiled)
    }

    pub fn list(&self) -> Result<Vec<WorkflowHash>, StoreError> {
        list_digests(&*self.fs, Path::new(layout::PINNED_WORKFLOWS_DIR))
            .map(|v| v.into_iter().map(WorkflowHash::from_digest).collect())
    }
}

#[derive(Debug)]
pub enum ObjectState {
    Intact,
    Missing,
    /// Present, but its bytes do not hash to its address (what was found).
    Damaged(String),
    /// It could not be read (permissions, EIO): not a verdict on its bytes.
    Unreadable(std::io::Error),
}

/// Most verified digests one process remembers; past it the set starts over (a re-check costs
/// one read, never a wrong answer).
const MAX_VERIFIED: usize = 1 << 16;

/// Checks the snapshots and pinned workflows a session's events reference, so that load's
/// health covers the whole session (decision D53). Objects are immutable: one that verified
/// once in this process is not read again, while a fresh process checks everything.
#[derive(Debug)]
pub struct ObjectCheck {
    fs: Arc<dyn StoreFs>,
    verified: Mutex<HashSet<Sha256Digest>>,
}

impl ObjectCheck {
    pub fn new(fs: Arc<dyn StoreFs>) -> Self {
        Self {
            fs,
            verified: Mutex::new(HashSet::new()),
        }
    }

    pub fn snapshot(&self, snapshot_ref: &SnapshotRef) -> ObjectState {
        self.check(
            snapshot_ref.digest(),
            &layout::snapshot_path(snapshot_ref),
            |text| {
                let snapshot =
                    ExecutionSnapshotFileV1::from_json_str(text).map_err(|e| e.to_string())?;
                let actual = snapshot.snapshot_ref().map_err(|e| e.to_string())?;
                Ok(actual.digest().clone())
            },
        )
    }

    pub fn workflow(&self, hash: &WorkflowHash) -> ObjectState {
        self.check(hash.digest(), &layout::pinned_workflow_path(hash), |text| {
            let compiled =
                CompiledWorkflowSnapshotV1::from_json_str(text).map_err(|e| e.to_string())?;
            let actual = compiled.workflow_hash().map_err(|e| e.to_string())?;
            Ok(actual.digest().clone())
        })
    }

    /// Stored bytes are the object's JCS form, so hashing them is the check; bytes in another
    /// (non-canonical) form are parsed and canonicalized before they are judged.
    fn check(
        &self,
        digest: &Sha256Digest,
        path: &Path,
        canonical_digest: impl Fn(&str) -> Result<Sha256Digest, String>,
    ) -> ObjectState {
        let verified = || self.verified.lock().unwrap_or_else(|p| p.into_inner());
        if verified().contains(digest) {
            return ObjectState::Intact;
        }
        let bytes = match self.fs.read(path) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return ObjectState::Missing,
            Err(e) => return ObjectState::Unreadable(e),
        };
        if &sha256(&bytes) != digest {
            let actual = std::str::from_utf8(&bytes)
                .map_err(|e| format!("not UTF-8: {e}"))
                .and_then(&canonical_digest);
            match actual {
                Ok(actual) if &actual == digest => {}
                Ok(actual) => return ObjectState::Damaged(format!("content hashes to {actual}")),
                Err(e) => return ObjectState::Damaged(e),
            }
        }
        let mut set = verified();
        if set.len() >= MAX_VERIFIED {
            set.clear();
        }
        set.insert(digest.clone());
        ObjectState::Intact
    }
}

/// An artifact ready to store: the canonical (JCS) form of a JSON object and its digest, made
/// only by [`ArtifactStore::prepare`].
#[derive(Debug, Clone)]
pub struct PreparedArtifact(Canonical<ArtifactObject>);

/// An agent's (or WorkRail's own) artifact: a JSON object.
pub type ArtifactObject = serde_json::Map<String, serde_json::Value>;

impl PreparedArtifact {
    pub fn digest(&self) -> &workrail_spec::ids::Sha256Digest {
        self.0.digest()
    }

    pub fn bytes(&self) -> &[u8] {
        self.0.bytes()
    }
}

/// Structured artifacts from agent outputs, by the digest of their JCS bytes (referenced from
/// `node_output_appended` as `artifact_ref`, never copied into events).
#[derive(Debug, Clone)]
pub struct ArtifactStore {
    fs: Arc<dyn StoreFs>,
}

impl ArtifactStore {
    pub const CONTENT_TYPE: &'static str = "application/json";

    pub fn new(fs: Arc<dyn StoreFs>) -> Self {
        Self { fs }
    }

    /// Stores an artifact durably; returns its digest and canonical byte length.
    pub fn put_object(
        &self,
        artifact: &ArtifactObject,
    ) -> Result<(workrail_spec::ids::Sha256Digest, u64), StoreError> {
        let prepared = Self::prepare(artifact)?;
        self.put_prepared(&prepared)?;
        Ok((prepared.digest().clone(), prepared.bytes().len() as u64))
    }

    /// An artifact's canonical bytes and their digest, without storing anything (a commit
    /// stores them beside its segment, decision D65).
    pub fn prepare(artifact: &ArtifactObject) -> Result<PreparedArtifact, StoreError> {
        Canonical::of(artifact)
            .map(PreparedArtifact)
            .map_err(|e| StoreError::Internal {
                detail: e.to_string(),
            })
    }

    /// Stores a prepared artifact durably (an existing one is verified and refreshed).
    pub fn put_prepared(&self, artifact: &PreparedArtifact) -> Result<(), StoreError> {
        put_durable(
            &*self.fs,
            &layout::artifact_path(artifact.digest()),
            artifact.bytes(),
        )
    }

    /// Reads and verifies an artifact.
    pub fn get(
        &self,
        digest: &workrail_spec::ids::Sha256Digest,
    ) -> Result<serde_json::Value, StoreError> {
        let what = format!("artifact {digest}");
        let text = read_object(&*self.fs, &layout::artifact_path(digest), &what)?;
        if &workrail_spec::jcs::sha256(text.as_bytes()) != digest {
            return Err(StoreError::CorruptObject {
                what,
                detail: "content does not match its digest".into(),
            });
        }
        workrail_spec::jcs::parse_strict(&text).map_err(|e| StoreError::CorruptObject {
            what,
            detail: e.to_string(),
        })
    }
}

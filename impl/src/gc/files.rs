//! GC's primitives on the file store: the data directory's sessions, objects and leftovers
//! (the rules are in `mod.rs`).
//!
//! - A session is deleted by one rename of its directory out of `sessions/` (to a `.tmp-`
//!   name), under its lock, then the removal of what was renamed (decision D130). A writer
//!   waiting on the lock then opens nothing at the session's path; one that already holds the
//!   old lock file sees it is no longer the one the path names.
//! - An object is judged old and deleted under its directory's exclusive lock (`<dir>/.lock`),
//!   which a writer refreshing an existing object holds shared (decision D133).

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use workrail_spec::error::ErrorEnvelope;
use workrail_spec::ids::{ServerId, SessionId, Sha256Digest};

use super::{
    Deleted, GcReport, GcStore, GcWarning, GcWarningCode, Listed, RetentionClock, Roots, Swept,
    io_envelope, is_old,
};
use crate::bundle::Progress;
use crate::protocol::Parts;
use crate::store::fs::{LockError, LockGuard, StoreFs};
use crate::store::{FileStores, LoadedSession, SessionRead, StoreError, layout, with_backoff};

/// How long a sweep holds an object directory's lock before it lets waiting writers in.
const SWEEP_HOLD: Duration = Duration::from_millis(20);
/// How long a sweep waits for writers to let it have an object directory's lock.
const SWEEP_LOCK_WAIT: Duration = Duration::from_secs(2);

pub(super) struct FileGc<'a> {
    parts: &'a Parts<'a>,
    files: &'a FileStores,
}

impl<'a> FileGc<'a> {
    pub(super) fn new(parts: &'a Parts<'a>, files: &'a FileStores) -> Self {
        Self { parts, files }
    }

    fn fs(&self) -> &dyn StoreFs {
        self.files.fs().as_ref()
    }
}

/// How removing a session directory went.
enum Removal {
    Done,
    /// The directory was not there: someone else removed it first.
    Gone,
    /// Moved out of reach (the session is gone) but not wholly removed: why.
    Unfinished(String),
}

/// Deletes a session directory: one atomic rename out of the session namespace, made durable,
/// then the removal of what was renamed (decision D130). The caller holds the session's lock.
fn remove_session_dir(fs: &dyn StoreFs, id: &SessionId) -> io::Result<Removal> {
    let sessions = Path::new(layout::SESSIONS_DIR);
    let trash = layout::deleting_session_dir(id);
    match fs.rename(&layout::session_dir(id), &trash) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Removal::Gone),
        Err(e) => return Err(e),
    }
    fs.sync_dir(sessions)?;
    Ok(match remove_trash(fs, &trash) {
        Ok(()) => Removal::Done,
        Err(e) => Removal::Unfinished(e.to_string()),
    })
}

/// Removes a directory renamed out of `sessions/`: nothing reaches it by a session's path, so
/// only another GC removing the same one can be in the way (once more, then it says why).
fn remove_trash(fs: &dyn StoreFs, trash: &Path) -> io::Result<()> {
    let first = fs.remove_dir_all(trash);
    let result = match first {
        Ok(()) => Ok(()),
        Err(_) => fs.remove_dir_all(trash),
    };
    if result.is_ok() {
        // Best effort: a removal lost at a crash leaves the same `.tmp-` directory again.
        if let Err(e) = fs.sync_dir(Path::new(layout::SESSIONS_DIR)) {
            tracing::debug!("gc: syncing sessions/ after a removal failed: {e}");
        }
    }
    result
}

impl GcStore for FileGc<'_> {
    fn sessions(&self, clock: &dyn RetentionClock) -> Result<Vec<Listed>, ErrorEnvelope> {
        let names = self
            .fs()
            .list_dir(Path::new(layout::SESSIONS_DIR))
            .map_err(|e| io_envelope("listing sessions", e))?;
        Ok(names
            .into_iter()
            // Deletions in progress (or left by a killed GC): leftovers, never sessions.
            .filter(|name| !layout::is_temp_file_name(name))
            .map(|name| {
                let last_activity = SessionId::parse(&name)
                    .ok()
                    .and_then(|id| clock.modified(&layout::manifest_path(&id)).ok().flatten());
                Listed {
                    name,
                    last_activity,
                }
            })
            .collect())
    }

    fn load(&self, id: &SessionId) -> Result<Arc<LoadedSession>, StoreError> {
        self.parts.store.load(id)
    }

    fn delete(&self, judged: &LoadedSession) -> Result<Deleted, ErrorEnvelope> {
        let fs = self.fs();
        let id = &judged.session_id;
        let lock = match fs.try_lock(&layout::lock_path(id)) {
            Ok(lock) => lock,
            Err(LockError::Busy) => return Ok(Deleted::Locked),
            // The directory is gone: another GC renamed it away first.
            Err(LockError::Io(e)) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Deleted::Gone);
            }
            Err(LockError::Io(e)) => return Err(io_envelope("locking a session", e)),
        };
        let now_loaded = match self.parts.store.load(id) {
            Ok(loaded) => loaded,
            Err(StoreError::NotFound { .. }) => return Ok(Deleted::Gone),
            Err(e) => return Err(e.to_envelope(false)),
        };
        let unchanged = now_loaded.health.is_healthy()
            && now_loaded.event_count() == judged.event_count()
            && now_loaded.manifest.len() == judged.manifest.len()
            && now_loaded.manifest_file_bytes == judged.manifest_file_bytes;
        if !unchanged {
            let healthy = now_loaded.health.is_healthy().then_some(now_loaded);
            return Ok(Deleted::Changed(healthy));
        }
        let removal = remove_session_dir(fs, id)
            .map_err(|e| io_envelope(&format!("deleting session {id}"), e))?;
        self.files.sessions.forget_cached(id);
        drop(lock);
        Ok(match removal {
            Removal::Done => Deleted::Yes { unfinished: None },
            Removal::Gone => Deleted::Gone,
            Removal::Unfinished(why) => Deleted::Yes {
                unfinished: Some(why),
            },
        })
    }

    fn after_deletions(&self) {
        // The persisted resume index (D64) summarizes the deleted sessions, notes included: it
        // goes with them (derived; the next resume_session rebuilds it).
        if let Err(e) = self.fs().remove_file(Path::new(layout::RESUME_INDEX_FILE)) {
            tracing::debug!("gc: the resume index was not removed: {e}");
        }
    }

    fn changed_since(
        &self,
        seen: &BTreeSet<SessionId>,
        retained: &[Arc<LoadedSession>],
    ) -> Result<bool, ErrorEnvelope> {
        let fs = self.fs();
        let names_now = fs
            .list_dir(Path::new(layout::SESSIONS_DIR))
            .map_err(|e| io_envelope("listing sessions", e))?;
        let new_session = names_now
            .iter()
            .filter_map(|n| SessionId::parse(n).ok())
            .any(|id| !seen.contains(&id));
        let mut grown = false;
        for loaded in retained {
            let len = fs
                .len(&layout::manifest_path(&loaded.session_id))
                .map_err(|e| io_envelope("checking a manifest", e))?;
            grown |= len != Some(loaded.manifest_file_bytes);
        }
        Ok(new_session || grown)
    }

    fn sweep(
        &self,
        roots: &Roots,
        clock: &dyn RetentionClock,
        dry_run: bool,
        progress: &dyn Progress,
    ) -> Result<Swept, ErrorEnvelope> {
        // A deletion a killed GC renamed away but did not make durable would come back at a
        // power cut, and its session's objects must not be gone by then: `sessions/` is made
        // durable before any object is judged (decision D200).
        // Without a `sessions/` directory there is no deletion to make durable.
        if !dry_run {
            match self.fs().sync_dir(Path::new(layout::SESSIONS_DIR)) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_envelope("syncing sessions/", e)),
            }
        }
        let snapshots = self
            .files
            .snapshots
            .list()
            .map_err(|e| e.to_envelope(false))?;
        let workflows = self.files.pinned.list().map_err(|e| e.to_envelope(false))?;
        let artifacts = list_artifacts(self.fs())?;
        progress.begin(
            "gc: sweeping",
            (snapshots.len() + workflows.len() + artifacts.len()) as u64,
        );
        let mut sweeper = ObjectSweeper {
            fs: self.fs(),
            clock,
            now: clock.now(),
            dry_run,
            progress,
            swept: Swept::default(),
        };
        let snapshots = sweeper.sweep(
            snapshots,
            |r| roots.snapshots.contains(r),
            layout::snapshot_path,
            Path::new(layout::SNAPSHOTS_DIR),
        )?;
        let workflows = sweeper.sweep(
            workflows,
            |h| roots.workflows.contains(h),
            layout::pinned_workflow_path,
            Path::new(layout::PINNED_WORKFLOWS_DIR),
        )?;
        let artifacts = sweeper.sweep(
            artifacts,
            |d| roots.artifacts.contains(d),
            layout::artifact_path,
            Path::new(layout::ARTIFACTS_DIR),
        )?;
        let mut swept = sweeper.swept;
        swept.snapshots = snapshots;
        swept.workflows = workflows;
        swept.artifacts = artifacts;
        Ok(swept)
    }

    fn leftovers(
        &self,
        report: &mut GcReport,
        seen: &BTreeSet<SessionId>,
        uncommitted: &[SessionId],
        clock: &dyn RetentionClock,
        dry_run: bool,
    ) -> Result<(), ErrorEnvelope> {
        let fs = self.fs();
        let now = clock.now();
        // Deletions a killed GC left half done: already out of every session's reach.
        let sessions = Path::new(layout::SESSIONS_DIR);
        let names = fs
            .list_dir(sessions)
            .map_err(|e| io_envelope("listing sessions", e))?;
        for name in names.iter().filter(|n| layout::is_temp_file_name(n)) {
            let trash = sessions.join(name);
            if !dry_run && let Err(e) = remove_trash(fs, &trash) {
                report.warnings.push(GcWarning::new(
                    GcWarningCode::DeletionUnfinished,
                    None,
                    format!(
                        "{} (what is left of a deleted session) could not be removed yet: {e}; the next gc tries again",
                        trash.display()
                    ),
                ));
                continue;
            }
            report
                .deleted_temp_files
                .push(trash.to_string_lossy().into_owned());
        }
        // Temp files of dead writers; sessions without truth go whole, below.
        let session_dirs: Vec<PathBuf> = seen
            .iter()
            .filter(|id| !uncommitted.contains(id))
            .flat_map(|id| [layout::events_dir(id), layout::cache_dir(id)])
            .collect();
        let mut temp_dirs: Vec<&Path> = vec![
            Path::new(layout::SNAPSHOTS_DIR),
            Path::new(layout::PINNED_WORKFLOWS_DIR),
            Path::new(layout::ARTIFACTS_DIR),
            Path::new(layout::KEYS_DIR),
            Path::new("config"),
            Path::new(layout::DATA_CACHE_DIR),
            Path::new(layout::SERVERS_DIR),
        ];
        temp_dirs.extend(session_dirs.iter().map(PathBuf::as_path));
        for dir in temp_dirs {
            report
                .deleted_temp_files
                .extend(sweep_temp_files(fs, clock, now, dry_run, dir)?);
        }
        for id in uncommitted {
            if self.delete_uncommitted_session(id, clock, now, dry_run)? {
                report.deleted_uncommitted_sessions.push(id.clone());
            }
        }
        Ok(())
    }
}

impl FileGc<'_> {
    /// Deletes a session directory that holds no committed truth and has not changed for
    /// [`CAS_GRACE`] (an empty one too, left by a kill right after its `mkdir`), under its
    /// session lock: a writer holds the lock from before its first write until its commit, and
    /// the directory changes with each write.
    fn delete_uncommitted_session(
        &self,
        id: &SessionId,
        clock: &dyn RetentionClock,
        now: SystemTime,
        dry_run: bool,
    ) -> Result<bool, ErrorEnvelope> {
        let fs = self.fs();
        let dir = layout::session_dir(id);
        let events = layout::events_dir(id);
        let events_old = |clock: &dyn RetentionClock| match clock.modified(&events) {
            Ok(None) => true,
            Ok(Some(_)) => is_old(clock, now, &events),
            Err(_) => false,
        };
        if !is_old(clock, now, &dir) || !events_old(clock) {
            return Ok(false);
        }
        // A dry run writes nothing, not even a lock file: it reports what it would try.
        if dry_run {
            return Ok(true);
        }
        let lock = match fs.try_lock(&layout::lock_path(id)) {
            Ok(lock) => lock,
            Err(LockError::Busy) => return Ok(false),
            Err(LockError::Io(e)) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(LockError::Io(e)) => return Err(io_envelope("locking a session", e)),
        };
        match self.parts.store.load(id) {
            Err(StoreError::NotFound { .. }) => {}
            // It committed meanwhile, or is damaged: not a leftover.
            Ok(_) => return Ok(false),
            Err(e) => return Err(e.to_envelope(false)),
        }
        if !events_old(clock) {
            return Ok(false);
        }
        let removal = remove_session_dir(fs, id)
            .map_err(|e| io_envelope(&format!("deleting uncommitted session {id}"), e))?;
        drop(lock);
        Ok(!matches!(removal, Removal::Gone))
    }
}

fn list_artifacts(fs: &dyn StoreFs) -> Result<Vec<Sha256Digest>, ErrorEnvelope> {
    let names = fs
        .list_dir(Path::new(layout::ARTIFACTS_DIR))
        .map_err(|e| io_envelope("listing artifacts", e))?;
    Ok(names
        .iter()
        .filter_map(|n| n.strip_suffix(".json"))
        .filter_map(|hex| Sha256Digest::parse(&format!("sha256:{hex}")).ok())
        .collect())
}

/// Deletes the temp files older than [`CAS_GRACE`] in `dir`: a writer renames its temp file
/// within moments, so an old one was left by a writer that died.
fn sweep_temp_files(
    fs: &dyn StoreFs,
    clock: &dyn RetentionClock,
    now: SystemTime,
    dry_run: bool,
    dir: &Path,
) -> Result<Vec<String>, ErrorEnvelope> {
    let names = match fs.list_dir(dir) {
        Ok(names) => names,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_envelope("listing a store directory", e)),
    };
    let mut deleted = Vec::new();
    for name in names.iter().filter(|n| layout::is_temp_file_name(n)) {
        let path = dir.join(name);
        if !is_old(clock, now, &path) {
            continue;
        }
        if !dry_run {
            match fs.remove_file(&path) {
                Ok(()) => {}
                // Another GC took it first.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_envelope("deleting a leftover temp file", e)),
            }
        }
        deleted.push(path.to_string_lossy().into_owned());
    }
    if !dry_run && !deleted.is_empty() {
        fs.sync_dir(dir)
            .map_err(|e| io_envelope("syncing a store directory", e))?;
    }
    Ok(deleted)
}

/// Deletes the records and lock files of servers that are not running (their lock is free)
/// and whose files are older than [`CAS_GRACE`], each under the record's lock (D86). The
/// records live in the data directory whatever the store.
pub(super) fn sweep_server_records(
    fs: &dyn StoreFs,
    clock: &dyn RetentionClock,
    now: SystemTime,
    dry_run: bool,
) -> Result<Vec<String>, ErrorEnvelope> {
    let dir = Path::new(layout::SERVERS_DIR);
    let names = fs
        .list_dir(dir)
        .map_err(|e| io_envelope("listing server records", e))?;
    let ids: BTreeSet<ServerId> = names
        .iter()
        .filter(|n| !layout::is_temp_file_name(n))
        .filter_map(|n| n.strip_suffix(".json").or_else(|| n.strip_suffix(".lock")))
        .filter_map(|stem| ServerId::parse(stem).ok())
        .collect();
    let mut deleted = Vec::new();
    for id in ids {
        let record = layout::server_record_path(&id);
        let lock_file = layout::server_lock_path(&id);
        let old = |p: &Path| fs.len(p).ok().flatten().is_none() || is_old(clock, now, p);
        if !old(&record) || !old(&lock_file) {
            continue;
        }
        // A dry run takes no lock that would create a file: a shared one on an existing lock
        // file only.
        let lock = if dry_run {
            match fs.try_lock_shared(&lock_file) {
                Err(LockError::Busy) => continue,
                Ok(guard) => guard,
                Err(LockError::Io(e)) => {
                    return Err(io_envelope("checking a server record's lock", e));
                }
            }
        } else {
            match fs.try_lock(&lock_file) {
                Ok(lock) => Some(lock),
                Err(LockError::Busy) => continue,
                // Another GC removed it first.
                Err(LockError::Io(e)) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(LockError::Io(e)) => {
                    return Err(io_envelope("locking a server record", e));
                }
            }
        };
        if !dry_run {
            fs.remove_file(&record)
                .and_then(|()| fs.remove_file(&lock_file))
                .map_err(|e| io_envelope("deleting a dead server's record", e))?;
        }
        drop(lock);
        deleted.push(record.to_string_lossy().into_owned());
    }
    if !dry_run && !deleted.is_empty() {
        fs.sync_dir(dir)
            .map_err(|e| io_envelope("syncing servers/", e))?;
    }
    Ok(deleted)
}

/// Sweeps the object directories, one at a time, under each directory's lock.
struct ObjectSweeper<'a> {
    fs: &'a dyn StoreFs,
    clock: &'a dyn RetentionClock,
    now: SystemTime,
    dry_run: bool,
    progress: &'a dyn Progress,
    swept: Swept,
}

impl ObjectSweeper<'_> {
    /// Takes `dir`'s exclusive lock (waiting for writers a bounded moment); `None` when
    /// writers kept it busy throughout.
    fn lock(&self, dir: &Path) -> Result<Option<Box<dyn LockGuard>>, ErrorEnvelope> {
        let path = layout::object_dir_lock_path(dir);
        with_backoff(SWEEP_LOCK_WAIT, || self.fs.try_lock(&path))
            .map_err(|e| io_envelope("locking an object directory", e))
    }

    /// Deletes the unmarked, not-young objects of one CAS directory; returns them. Each
    /// object's age is read and the object deleted under the directory's exclusive lock, so no
    /// writer refreshes it in between (decision D133); the lock is let go every
    /// [`SWEEP_HOLD`] so writers wait no longer than that.
    fn sweep<K: Clone>(
        &mut self,
        objects: Vec<K>,
        marked: impl Fn(&K) -> bool,
        path_of: impl Fn(&K) -> PathBuf,
        dir: &Path,
    ) -> Result<Vec<K>, ErrorEnvelope> {
        let mut deleted = Vec::new();
        let mut held: Option<(Box<dyn LockGuard>, Instant)> = None;
        let total = objects.len();
        for (done, object) in objects.into_iter().enumerate() {
            self.progress.advance(1);
            if marked(&object) {
                continue;
            }
            let path = path_of(&object);
            if !self.dry_run
                && held
                    .as_ref()
                    .is_none_or(|(_, at)| at.elapsed() > SWEEP_HOLD)
            {
                held = None;
                match self.lock(dir)? {
                    Some(lock) => held = Some((lock, Instant::now())),
                    None => {
                        self.swept.warnings.push(GcWarning::new(
                            GcWarningCode::SweepDeferred,
                            None,
                            format!(
                                "writers kept {} busy, so {} of its objects were not checked this time; run gc again",
                                dir.display(),
                                total - done
                            ),
                        ));
                        break;
                    }
                }
            }
            if !is_old(self.clock, self.now, &path) {
                self.swept.young += 1;
                continue;
            }
            if !self.dry_run {
                self.fs
                    .remove_file(&path)
                    .map_err(|e| io_envelope("deleting an unreachable object", e))?;
            }
            deleted.push(object);
        }
        drop(held);
        if !self.dry_run && !deleted.is_empty() {
            self.fs
                .sync_dir(dir)
                .map_err(|e| io_envelope("syncing a CAS directory", e))?;
        }
        Ok(deleted)
    }
}

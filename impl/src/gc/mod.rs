//! Session retention and CAS garbage collection (locks §2.2; `impl/docs/bundles.md`).
//!
//! One GC run:
//! 1. reads the retention config (`config/retention.json`, created with the defaults on the
//!    first real run): a TTL in days and an explicit keep list;
//! 2. loads and validates **every** session. Any corrupt or unknown-version session (or one
//!    that cannot be read) puts GC in **safe mode**: it deletes nothing at all and reports a
//!    structured warning naming the session and the reason;
//! 3. decides retention: kept sessions never expire; any other session expires when the time
//!    since its manifest's last modification (the append-only control stream changes with every
//!    commit) exceeds the TTL; a session whose age cannot be read is retained;
//! 4. deletes expired sessions first, each under its session lock and re-checked unchanged
//!    under it (the manifest goes first, so an interrupted delete leaves a session without
//!    truth, never a corrupt one);
//! 5. marks from the retained sessions only: their `snapshot_pinned` refs (no segment scan),
//!    the workflowHash of each of their runs, and the artifacts their outputs reference;
//! 6. sweeps unmarked snapshots, pinned workflows and artifacts, except objects younger than
//!    [`CAS_GRACE`] (a concurrent writer stores CAS objects just before the plan that references
//!    them), and only if no retained session changed while GC ran;
//! 7. removes what crashed writers left (decision D63), older than [`CAS_GRACE`]: temp files
//!    (`.tmp-*`) in the store's directories (the data directory's `cache/` included), and
//!    session directories that never committed (a first append killed before its manifest),
//!    each under its session lock;
//! 8. removes the records (and lock files) of servers that ended without removing them, older
//!    than [`CAS_GRACE`], each under the record's lock (decision D86): a live server holds it.
//!
//! When step 4 deleted a session, the persisted `resume_session` index
//! (`cache/resume-index.v1.jsonl`, D64) is removed too: it holds the deleted sessions' notes.
//! GC never reads it; otherwise it leaves it alone (derived, checked against each manifest).
//!
//! On PostgreSQL the same rules run over the rows (`postgres.rs`, decision D112): age is the
//! session's `last_activity`, a session is deleted in one transaction under its advisory lock,
//! and the sweep is one statement keeping objects stored within [`CAS_GRACE`].
//!
//! `dry_run` does all the reading and reports what would go, writing nothing. Time comes from
//! the [`RetentionClock`] port so tests control it.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use workrail_spec::closed::SessionHealthKind;
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::event::{EventData, OutputPayload};
use workrail_spec::ids::{ServerId, SessionId, Sha256Digest, SnapshotRef, WorkflowHash};
use workrail_spec::manifest::ManifestRecord;

mod os;
mod postgres;

pub use os::OsRetentionClock;

use crate::bundle::Progress;
use crate::protocol::Workrail;
use crate::store::fs::{LockError, StoreFs};
use crate::store::{LoadedSession, SessionHealth, SessionRead, StoreError, layout};

/// Where the retention config lives, relative to the data directory.
pub const RETENTION_CONFIG_PATH: &str = "config/retention.json";
/// The default TTL (locks §2.2 recommends 30 to 90 days).
pub const DEFAULT_TTL_DAYS: u64 = 60;
/// Unreachable CAS objects modified more recently than this are kept: a writer stores a
/// snapshot or pinned workflow just before the append plan that references it.
pub const CAS_GRACE: Duration = Duration::from_secs(60 * 60);

const DAY_SECS: u64 = 86_400;

/// `config/retention.json`: `{"ttlDays": 60, "keep": ["sess_..."]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetentionConfig {
    /// Sessions whose manifest is older than this many days are deleted.
    pub ttl_days: u64,
    /// Sessions that never expire.
    #[serde(default)]
    pub keep: Vec<SessionId>,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        Self {
            ttl_days: DEFAULT_TTL_DAYS,
            keep: Vec::new(),
        }
    }
}

fn io_envelope(op: &str, e: impl fmt::Display) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::StoreIoError,
        format!("gc: {op} failed: {e}"),
        "Check free disk space and the permissions of the WorkRail data directory, then run gc again; nothing unreachable-checked was deleted after the failure.",
        Retry::RetryableImmediate,
    )
}

impl RetentionConfig {
    /// Reads the config; `Ok(None)` when it does not exist.
    pub fn load(fs: &dyn StoreFs) -> Result<Option<Self>, ErrorEnvelope> {
        let Some(bytes) = fs
            .read(Path::new(RETENTION_CONFIG_PATH))
            .map_err(|e| io_envelope("reading the retention config", e))?
        else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            ErrorEnvelope::new(
                ErrorCode::ValidationError,
                format!("gc: {RETENTION_CONFIG_PATH} in the data directory is invalid: {e}"),
                r#"Fix it to the form {"ttlDays": 60, "keep": ["sess_..."]} (or delete it to get the defaults back); gc deleted nothing."#,
                Retry::NotRetryable,
            )
        })
    }

    /// Writes the config durably (temp, fsync, rename, fsync the directory).
    pub fn save(&self, fs: &dyn StoreFs) -> Result<(), ErrorEnvelope> {
        let path = Path::new(RETENTION_CONFIG_PATH);
        let dir = path.parent().unwrap_or(Path::new(""));
        let tmp = dir.join(crate::store::layout::temp_file_name("retention.json"));
        let mut text = serde_json::to_string_pretty(self)
            .map_err(|e| io_envelope("serializing the retention config", e))?;
        text.push('\n');
        fs.create_dir_durable(dir)
            .and_then(|()| fs.write_new(&tmp, text.as_bytes()))
            .and_then(|()| fs.sync_file(&tmp))
            .and_then(|()| fs.rename(&tmp, path))
            .and_then(|()| fs.sync_dir(dir))
            .map_err(|e| io_envelope("writing the retention config", e))
    }
}

/// The clock and file-time port of retention.
pub trait RetentionClock: Send + Sync + fmt::Debug {
    fn now(&self) -> SystemTime;
    /// The last modification time of a file (path relative to the data directory); `None`
    /// when it does not exist.
    fn modified(&self, path: &Path) -> io::Result<Option<SystemTime>>;
}

/// How to run GC.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcOptions {
    /// Report what would be deleted; write nothing (not even the default config).
    pub dry_run: bool,
    /// Overrides the config's `ttlDays` for this run.
    pub ttl_days: Option<u64>,
}

/// Why a session is retained or not (closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RetentionDecision {
    /// In the keep list: never expires.
    KeepListed,
    /// Younger than the TTL.
    WithinTtl,
    /// Older than the TTL: deleted (or, in a dry run or safe mode, would be).
    Expired,
    /// Expired, but another process held its lock: retained this time.
    Locked,
    /// Expired, but it changed while GC ran: retained this time.
    Changed,
    /// The directory holds no committed truth (e.g. a first append that never committed).
    NoCommittedTruth,
    /// Its manifest's modification time could not be read: retained.
    AgeUnknown,
    /// Not healthy: GC is in safe mode.
    Unhealthy,
}

/// What GC decided for one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionVerdict {
    pub session_id: SessionId,
    pub decision: RetentionDecision,
    /// Whole days since the manifest's last modification, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_days: Option<u64>,
    /// True when this run deleted it.
    pub deleted: bool,
}

/// Warning codes (closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GcWarningCode {
    /// Safe mode: a session's manifest or segments are corrupt.
    SafeModeCorruptSession,
    /// Safe mode: a session has a schema version this build does not read.
    SafeModeUnknownVersion,
    /// Safe mode: a session could not be read at all.
    SafeModeUnreadableSession,
    /// An expired session was locked by another process and was retained.
    SessionLocked,
    /// An expired session changed while GC ran and was retained.
    SessionChanged,
    /// A session's age could not be read; it was retained.
    SessionAgeUnknown,
    /// An entry under `sessions/` is not a session id; it was left alone.
    StrayEntry,
    /// Sessions changed while GC ran, so the CAS sweep was skipped (run gc again).
    SweepSkipped,
}

/// A structured GC warning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GcWarning {
    pub code: GcWarningCode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<SessionHealthKind>,
    /// The store's closed-set corruption reason, for safe-mode warnings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub message: String,
}

impl GcWarning {
    fn new(code: GcWarningCode, session_id: Option<SessionId>, message: String) -> Self {
        Self {
            code,
            session_id,
            health: None,
            reason: None,
            message,
        }
    }
}

/// What a GC run did (or, with `dry_run`, would do).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GcReport {
    pub dry_run: bool,
    pub ttl_days: u64,
    /// True when a corrupt or unreadable session stopped every deletion.
    pub safe_mode: bool,
    /// Every session and its verdict, by id.
    pub sessions: Vec<SessionVerdict>,
    /// Sessions deleted (dry run: that would be deleted).
    pub deleted_sessions: Vec<SessionId>,
    /// Unreachable CAS objects deleted (dry run: that would be deleted).
    pub deleted_snapshots: Vec<SnapshotRef>,
    pub deleted_pinned_workflows: Vec<WorkflowHash>,
    pub deleted_artifacts: Vec<Sha256Digest>,
    /// Session directories without committed truth, left by a first append that never
    /// committed, deleted (dry run: that would be deleted).
    pub deleted_uncommitted_sessions: Vec<SessionId>,
    /// Temp files crashed writers left (paths in the data directory), deleted (dry run: that
    /// would be deleted).
    pub deleted_temp_files: Vec<String>,
    /// Records (and lock files) of servers that ended without removing them, older than
    /// [`CAS_GRACE`] (decision D86), deleted (dry run: that would be deleted).
    pub deleted_server_records: Vec<String>,
    /// Unreachable objects kept because they are younger than [`CAS_GRACE`].
    pub young_objects_kept: usize,
    pub warnings: Vec<GcWarning>,
}

/// Everything a retained session keeps alive.
#[derive(Debug, Default)]
struct Roots {
    snapshots: HashSet<SnapshotRef>,
    workflows: HashSet<WorkflowHash>,
    artifacts: HashSet<Sha256Digest>,
}

impl Roots {
    /// Snapshots from the manifest's pins only (locks §2.2: no segment scan); workflows and
    /// artifacts from the validated events.
    fn add(&mut self, loaded: &LoadedSession) {
        for record in &loaded.manifest {
            if let ManifestRecord::SnapshotPinned(pin) = record {
                self.snapshots.insert(pin.snapshot_ref.clone());
            }
        }
        for event in &loaded.events {
            match event.data() {
                EventData::RunStarted(run) => {
                    self.workflows.insert(run.workflow_hash.clone());
                }
                EventData::NodeCreated(node) => {
                    self.workflows.insert(node.workflow_hash.clone());
                }
                EventData::NodeOutputAppended(output) => {
                    if let OutputPayload::ArtifactRef { sha256, .. } = &output.payload {
                        self.artifacts.insert(sha256.clone());
                    }
                }
                _ => {}
            }
        }
    }
}

struct Candidate {
    id: SessionId,
    loaded: Arc<LoadedSession>,
    verdict: usize,
}

/// Runs GC (see the module docs).
pub fn run(
    wr: &Workrail,
    options: &GcOptions,
    clock: &dyn RetentionClock,
    progress: &dyn Progress,
) -> Result<GcReport, ErrorEnvelope> {
    let parts = wr.parts();
    let Some(files) = parts.store.file_stores() else {
        return match parts.store.postgres_stores() {
            Some(pg) => postgres::run(wr, pg.backend(), options, clock, progress),
            None => Err(crate::protocol::invariant("gc: a store of neither kind")),
        };
    };
    let fs: &dyn StoreFs = files.fs().as_ref();
    let config = match RetentionConfig::load(fs)? {
        Some(config) => config,
        None => {
            let config = RetentionConfig::default();
            if !options.dry_run {
                config.save(fs)?;
            }
            config
        }
    };
    let ttl_days = options.ttl_days.unwrap_or(config.ttl_days);
    let ttl = Duration::from_secs(ttl_days.saturating_mul(DAY_SECS));
    let keep: HashSet<SessionId> = config.keep.into_iter().collect();
    let now = clock.now();
    let mut report = GcReport {
        dry_run: options.dry_run,
        ttl_days,
        safe_mode: false,
        sessions: Vec::new(),
        deleted_sessions: Vec::new(),
        deleted_snapshots: Vec::new(),
        deleted_pinned_workflows: Vec::new(),
        deleted_artifacts: Vec::new(),
        deleted_uncommitted_sessions: Vec::new(),
        deleted_temp_files: Vec::new(),
        deleted_server_records: Vec::new(),
        young_objects_kept: 0,
        warnings: Vec::new(),
    };

    // 1) Load and validate every session before anything is decided.
    let sessions_dir = Path::new(layout::SESSIONS_DIR);
    let names = fs
        .list_dir(sessions_dir)
        .map_err(|e| io_envelope("listing sessions", e))?;
    progress.begin("gc: validating sessions", names.len() as u64);
    let mut healthy: Vec<(SessionId, Arc<LoadedSession>)> = Vec::new();
    let mut seen: BTreeSet<SessionId> = BTreeSet::new();
    let mut uncommitted: Vec<SessionId> = Vec::new();
    for name in &names {
        progress.advance(1);
        let Ok(id) = SessionId::parse(name) else {
            report.warnings.push(GcWarning::new(
                GcWarningCode::StrayEntry,
                None,
                format!("sessions/{name} is not a session id; left alone"),
            ));
            continue;
        };
        seen.insert(id.clone());
        let verdict = |decision| SessionVerdict {
            session_id: id.clone(),
            decision,
            age_days: None,
            deleted: false,
        };
        match parts.store.load(&id) {
            Ok(loaded) if loaded.health.is_healthy() => healthy.push((id, loaded)),
            Ok(loaded) => {
                report.safe_mode = true;
                report.warnings.push(unhealthy_warning(&id, &loaded.health));
                report.sessions.push(verdict(RetentionDecision::Unhealthy));
            }
            Err(StoreError::NotFound { .. }) => {
                uncommitted.push(id.clone());
                report
                    .sessions
                    .push(verdict(RetentionDecision::NoCommittedTruth));
            }
            Err(e) => {
                report.safe_mode = true;
                report.warnings.push(GcWarning::new(
                    GcWarningCode::SafeModeUnreadableSession,
                    Some(id.clone()),
                    format!(
                        "safe mode: session {id} could not be validated ({e}); gc deletes nothing. To clear it: {}",
                        crate::store::how_to_clear(&id, SessionHealthKind::Healthy, None)
                    ),
                ));
                report.sessions.push(verdict(RetentionDecision::Unhealthy));
            }
        }
    }

    // 2) Retention decisions.
    let mut retained: Vec<Arc<LoadedSession>> = Vec::new();
    let mut expired: Vec<Candidate> = Vec::new();
    for (id, loaded) in healthy {
        let age = match clock.modified(&layout::manifest_path(&id)) {
            Ok(Some(modified)) => Some(now.duration_since(modified).unwrap_or_default()),
            Ok(None) | Err(_) => None,
        };
        let decision = if keep.contains(&id) {
            RetentionDecision::KeepListed
        } else {
            match age {
                None => {
                    report.warnings.push(GcWarning::new(
                        GcWarningCode::SessionAgeUnknown,
                        Some(id.clone()),
                        format!("session {id}: its manifest's modification time cannot be read; retained"),
                    ));
                    RetentionDecision::AgeUnknown
                }
                Some(age) if age > ttl => RetentionDecision::Expired,
                Some(_) => RetentionDecision::WithinTtl,
            }
        };
        report.sessions.push(SessionVerdict {
            session_id: id.clone(),
            decision,
            age_days: age.map(|a| a.as_secs() / DAY_SECS),
            deleted: false,
        });
        if decision == RetentionDecision::Expired {
            expired.push(Candidate {
                id,
                loaded,
                verdict: report.sessions.len() - 1,
            });
        } else {
            retained.push(loaded);
        }
    }
    if report.safe_mode {
        // No deletes at all: neither sessions nor CAS objects.
        report
            .sessions
            .sort_by(|a, b| a.session_id.cmp(&b.session_id));
        progress.finish();
        return Ok(report);
    }

    // 3) Sessions first, never after the CAS.
    let mut sweep_blocked = false;
    progress.begin("gc: deleting expired sessions", expired.len() as u64);
    for candidate in expired {
        progress.advance(1);
        if options.dry_run {
            report.deleted_sessions.push(candidate.id);
            continue;
        }
        match delete_session(&parts, fs, &candidate)? {
            Deleted::Yes => {
                report.sessions[candidate.verdict].deleted = true;
                report.deleted_sessions.push(candidate.id);
            }
            Deleted::Locked => {
                report.sessions[candidate.verdict].decision = RetentionDecision::Locked;
                report.warnings.push(GcWarning::new(
                    GcWarningCode::SessionLocked,
                    Some(candidate.id.clone()),
                    format!(
                        "session {} is expired but another WorkRail process holds its lock; retained this time",
                        candidate.id
                    ),
                ));
                retained.push(candidate.loaded);
            }
            Deleted::Changed(now_loaded) => {
                report.sessions[candidate.verdict].decision = RetentionDecision::Changed;
                report.warnings.push(GcWarning::new(
                    GcWarningCode::SessionChanged,
                    Some(candidate.id.clone()),
                    format!(
                        "session {} changed while gc ran; retained this time",
                        candidate.id
                    ),
                ));
                // Its new roots are not known to be complete: sweep nothing this time.
                sweep_blocked = true;
                retained.push(candidate.loaded);
                if let Some(now_loaded) = now_loaded {
                    retained.push(now_loaded);
                }
            }
        }
    }
    report
        .sessions
        .sort_by(|a, b| a.session_id.cmp(&b.session_id));
    if !report.deleted_sessions.is_empty() && !options.dry_run {
        // The persisted resume index (D64) summarizes the deleted sessions, notes included:
        // it goes with them (derived; the next resume_session rebuilds it). Best effort.
        if let Err(e) = fs.remove_file(Path::new(layout::RESUME_INDEX_FILE)) {
            tracing::debug!("gc: the resume index was not removed: {e}");
        }
    }

    // 4) Mark from the retained sessions.
    let mut roots = Roots::default();
    for loaded in &retained {
        roots.add(loaded);
    }

    // 5) Nothing may have changed under the marks: no new session, no retained session grown.
    if !options.dry_run && !sweep_blocked {
        let names_now = fs
            .list_dir(sessions_dir)
            .map_err(|e| io_envelope("listing sessions", e))?;
        let new_session = names_now
            .iter()
            .filter_map(|n| SessionId::parse(n).ok())
            .any(|id| !seen.contains(&id));
        let mut grown = false;
        for loaded in &retained {
            let len = fs
                .len(&layout::manifest_path(&loaded.session_id))
                .map_err(|e| io_envelope("checking a manifest", e))?;
            grown |= len != Some(loaded.manifest_file_bytes);
        }
        sweep_blocked = new_session || grown;
    }
    if sweep_blocked {
        report.warnings.push(GcWarning::new(
            GcWarningCode::SweepSkipped,
            None,
            "sessions changed while gc ran, so no CAS object was deleted this time; run gc again"
                .into(),
        ));
        progress.finish();
        return Ok(report);
    }

    // 6) Sweep.
    let snapshots = files.snapshots.list().map_err(|e| e.to_envelope(false))?;
    let workflows = files.pinned.list().map_err(|e| e.to_envelope(false))?;
    let artifacts = list_artifacts(fs)?;
    progress.begin(
        "gc: sweeping",
        (snapshots.len() + workflows.len() + artifacts.len()) as u64,
    );
    let mut sweeper = Sweeper {
        fs,
        clock,
        now,
        dry_run: options.dry_run,
        young: 0,
        progress,
    };
    report.deleted_snapshots = sweeper.sweep(
        snapshots,
        |r| roots.snapshots.contains(r),
        layout::snapshot_path,
        Path::new(layout::SNAPSHOTS_DIR),
    )?;
    report.deleted_pinned_workflows = sweeper.sweep(
        workflows,
        |h| roots.workflows.contains(h),
        layout::pinned_workflow_path,
        Path::new(layout::PINNED_WORKFLOWS_DIR),
    )?;
    report.deleted_artifacts = sweeper.sweep(
        artifacts,
        |d| roots.artifacts.contains(d),
        layout::artifact_path,
        Path::new(layout::ARTIFACTS_DIR),
    )?;
    report.young_objects_kept = sweeper.young;

    // 7) What crashed writers left.
    // Sessions without truth go whole, below.
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
            .extend(sweeper.sweep_temp_files(dir)?);
    }
    for id in uncommitted {
        if sweeper.delete_uncommitted_session(&id)? {
            report.deleted_uncommitted_sessions.push(id);
        }
    }
    // 8) Records of servers that ended without removing them (killed), decision D86.
    report.deleted_server_records = sweeper.sweep_server_records()?;
    progress.finish();
    Ok(report)
}

/// The safe-mode warning for a session that is not healthy.
fn unhealthy_warning(id: &SessionId, health: &SessionHealth) -> GcWarning {
    let corruption = health.corruption();
    let unknown = matches!(health, SessionHealth::UnknownVersion(_));
    GcWarning {
        code: if unknown {
            GcWarningCode::SafeModeUnknownVersion
        } else {
            GcWarningCode::SafeModeCorruptSession
        },
        session_id: Some(id.clone()),
        health: Some(health.kind()),
        reason: corruption.map(|c| c.reason.as_str().to_owned()),
        message: format!(
            "safe mode: session {id} is {}{}; gc deletes nothing until it is repaired or removed. To clear it: {}",
            health.kind(),
            corruption
                .map(|c| format!(
                    " ({} at manifest record {}: {})",
                    c.reason, c.manifest_index, c.detail
                ))
                .unwrap_or_default(),
            crate::store::how_to_clear(id, health.kind(), corruption.map(|c| c.reason.as_str()))
        ),
    }
}

enum Deleted {
    Yes,
    Locked,
    /// The session changed since it was validated (its current view, when healthy).
    Changed(Option<Arc<LoadedSession>>),
}

/// Deletes an expired session under its lock, after checking it is still what was validated.
/// The manifest goes first: an interrupted delete leaves a directory without truth.
fn delete_session(
    parts: &crate::protocol::Parts<'_>,
    fs: &dyn StoreFs,
    candidate: &Candidate,
) -> Result<Deleted, ErrorEnvelope> {
    let id = &candidate.id;
    let lock = match fs.try_lock(&layout::lock_path(id)) {
        Ok(lock) => lock,
        Err(LockError::Busy) => return Ok(Deleted::Locked),
        Err(LockError::Io(e)) => return Err(io_envelope("locking a session", e)),
    };
    let now_loaded = match parts.store.load(id) {
        Ok(loaded) => Some(loaded),
        Err(StoreError::NotFound { .. }) => None,
        Err(e) => return Err(e.to_envelope(false)),
    };
    let unchanged = now_loaded.as_ref().is_some_and(|l| {
        l.health.is_healthy()
            && l.events.len() == candidate.loaded.events.len()
            && l.manifest.len() == candidate.loaded.manifest.len()
            && l.manifest_file_bytes == candidate.loaded.manifest_file_bytes
    });
    if !unchanged {
        return Ok(Deleted::Changed(
            now_loaded.filter(|l| l.health.is_healthy()),
        ));
    }
    let dir = layout::session_dir(id);
    fs.remove_file(&layout::manifest_path(id))
        .and_then(|()| fs.sync_dir(&dir))
        .and_then(|()| fs.remove_dir_all(&dir))
        .and_then(|()| fs.sync_dir(Path::new(layout::SESSIONS_DIR)))
        .map_err(|e| io_envelope(&format!("deleting session {id}"), e))?;
    drop(lock);
    Ok(Deleted::Yes)
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

struct Sweeper<'a> {
    fs: &'a dyn StoreFs,
    clock: &'a dyn RetentionClock,
    now: SystemTime,
    dry_run: bool,
    young: usize,
    progress: &'a dyn Progress,
}

impl Sweeper<'_> {
    /// Whether `path` was last modified at least [`CAS_GRACE`] ago (a missing or unreadable
    /// entry is never old).
    fn is_old(&self, path: &Path) -> bool {
        match self.clock.modified(path) {
            Ok(Some(modified)) => self
                .now
                .duration_since(modified)
                .is_ok_and(|age| age >= CAS_GRACE),
            Ok(None) | Err(_) => false,
        }
    }

    /// Deletes the temp files older than [`CAS_GRACE`] in `dir`: a writer renames its temp file
    /// within moments, so an old one was left by a writer that died.
    fn sweep_temp_files(&mut self, dir: &Path) -> Result<Vec<String>, ErrorEnvelope> {
        let names = match self.fs.list_dir(dir) {
            Ok(names) => names,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io_envelope("listing a store directory", e)),
        };
        let mut deleted = Vec::new();
        for name in names.iter().filter(|n| layout::is_temp_file_name(n)) {
            let path = dir.join(name);
            if !self.is_old(&path) {
                continue;
            }
            if !self.dry_run {
                match self.fs.remove_file(&path) {
                    Ok(()) => {}
                    // Another GC took it first.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                    Err(e) => return Err(io_envelope("deleting a leftover temp file", e)),
                }
            }
            deleted.push(path.to_string_lossy().into_owned());
        }
        if !self.dry_run && !deleted.is_empty() {
            self.fs
                .sync_dir(dir)
                .map_err(|e| io_envelope("syncing a store directory", e))?;
        }
        Ok(deleted)
    }

    /// Deletes a session directory that holds no committed truth and has not changed for
    /// [`CAS_GRACE`], under its session lock (a writer holds the lock from before its first
    /// write until its commit, and the directory changes with each write).
    fn delete_uncommitted_session(&mut self, id: &SessionId) -> Result<bool, ErrorEnvelope> {
        let dir = layout::session_dir(id);
        let events = layout::events_dir(id);
        if !self.is_old(&dir) || !self.is_old(&events) {
            return Ok(false);
        }
        // A dry run writes nothing, not even a lock file: it reports what it would try.
        let lock = if self.dry_run {
            None
        } else {
            match self.fs.try_lock(&layout::lock_path(id)) {
                Ok(lock) => Some(lock),
                Err(LockError::Busy) => return Ok(false),
                Err(LockError::Io(e)) => return Err(io_envelope("locking a session", e)),
            }
        };
        let manifest = self
            .fs
            .len(&layout::manifest_path(id))
            .map_err(|e| io_envelope("checking a manifest", e))?;
        if manifest.is_some_and(|len| len > 0) || !self.is_old(&events) {
            return Ok(false);
        }
        if !self.dry_run {
            self.fs
                .remove_dir_all(&dir)
                .and_then(|()| self.fs.sync_dir(Path::new(layout::SESSIONS_DIR)))
                .map_err(|e| io_envelope(&format!("deleting uncommitted session {id}"), e))?;
        }
        drop(lock);
        Ok(true)
    }

    /// Deletes the records and lock files of servers that are not running (their lock is free)
    /// and whose files are older than [`CAS_GRACE`], each under the record's lock.
    fn sweep_server_records(&mut self) -> Result<Vec<String>, ErrorEnvelope> {
        let dir = Path::new(layout::SERVERS_DIR);
        let names = self
            .fs
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
            let old = |p: &Path| self.fs.len(p).ok().flatten().is_none() || self.is_old(p);
            if !old(&record) || !old(&lock_file) {
                continue;
            }
            // A dry run takes no lock that would create a file: a shared one on an existing
            // lock file only.
            let lock = if self.dry_run {
                match self.fs.try_lock_shared(&lock_file) {
                    Err(LockError::Busy) => continue,
                    Ok(guard) => guard,
                    Err(LockError::Io(e)) => {
                        return Err(io_envelope("checking a server record's lock", e));
                    }
                }
            } else {
                match self.fs.try_lock(&lock_file) {
                    Ok(lock) => Some(lock),
                    Err(LockError::Busy) => continue,
                    Err(LockError::Io(e)) => {
                        return Err(io_envelope("locking a server record", e));
                    }
                }
            };
            if !self.dry_run {
                self.fs
                    .remove_file(&record)
                    .and_then(|()| self.fs.remove_file(&lock_file))
                    .map_err(|e| io_envelope("deleting a dead server's record", e))?;
            }
            drop(lock);
            deleted.push(record.to_string_lossy().into_owned());
        }
        if !self.dry_run && !deleted.is_empty() {
            self.fs
                .sync_dir(dir)
                .map_err(|e| io_envelope("syncing servers/", e))?;
        }
        Ok(deleted)
    }

    /// Deletes the unmarked, not-young objects of one CAS directory; returns them.
    fn sweep<K: Clone>(
        &mut self,
        objects: Vec<K>,
        marked: impl Fn(&K) -> bool,
        path_of: impl Fn(&K) -> PathBuf,
        dir: &Path,
    ) -> Result<Vec<K>, ErrorEnvelope> {
        let mut deleted = Vec::new();
        for object in objects {
            self.progress.advance(1);
            if marked(&object) {
                continue;
            }
            let path = path_of(&object);
            let young = match self.clock.modified(&path) {
                Ok(Some(modified)) => self
                    .now
                    .duration_since(modified)
                    .map_or(true, |age| age < CAS_GRACE),
                // Gone already, or unreadable: leave it.
                Ok(None) | Err(_) => true,
            };
            if young {
                self.young += 1;
                continue;
            }
            if !self.dry_run {
                self.fs
                    .remove_file(&path)
                    .map_err(|e| io_envelope("deleting an unreachable object", e))?;
            }
            deleted.push(object);
        }
        if !self.dry_run && !deleted.is_empty() {
            self.fs
                .sync_dir(dir)
                .map_err(|e| io_envelope("syncing a CAS directory", e))?;
        }
        Ok(deleted)
    }
}

//! Session retention and CAS garbage collection (locks §2.2; `impl/docs/bundles.md`).
//!
//! One algorithm for both stores (decision D132): [`run`] holds every rule, and a store supplies
//! only the primitives of [`GcStore`] (`files.rs` for the data directory, `postgres.rs` for the
//! rows). One GC run:
//! 1. reads the retention config (`config/retention.json`, created with the defaults on the
//!    first real run): a TTL in days and an explicit keep list;
//! 2. loads and validates **every** session. Any corrupt or unknown-version session (or one
//!    that cannot be read) puts GC in **safe mode**: it deletes nothing at all and reports a
//!    structured warning naming the session and the reason;
//! 3. decides retention: kept sessions never expire; any other session expires when the time
//!    since its last activity (the manifest's modification time on files, `last_activity` on
//!    PostgreSQL) exceeds the TTL; a session whose age cannot be read is retained;
//! 4. deletes expired sessions first, each under its session lock and re-checked unchanged
//!    under it, in one atomic step the store provides (decision D130): a writer waiting on the
//!    lock then finds the session gone and answers `SESSION_NOT_FOUND`, never re-creating it;
//! 5. marks from the retained sessions only: their `snapshot_pinned` refs (no segment scan),
//!    the workflowHash of each of their runs, and the artifacts their outputs reference;
//! 6. sweeps unmarked snapshots, pinned workflows and artifacts, except objects younger than
//!    [`CAS_GRACE`] (a concurrent writer stores CAS objects just before the plan that references
//!    them), and only if no retained session changed while GC ran; an object's age is judged and
//!    the object deleted with no writer's refresh of it in between (decision D133);
//! 7. removes what crashed writers left (decision D63) — on files only: temp files, session
//!    directories that never committed, and the directories of deletions a killed GC left;
//! 8. removes the records (and lock files) of servers that ended without removing them, older
//!    than [`CAS_GRACE`], each under the record's lock (decision D86): a live server holds it.
//!
//! Several GC runs may overlap: a session another run deleted first is reported as
//! `already_deleted`, and every run exits with an honest report.
//!
//! `dry_run` does all the reading and reports what would go, writing nothing. Time comes from
//! the [`RetentionClock`] port so tests control it.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use workrail_spec::closed::SessionHealthKind;
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::event::{EventData, OutputPayload};
use workrail_spec::ids::{SessionId, Sha256Digest, SnapshotRef, WorkflowHash};

mod files;
mod os;
mod postgres;

pub use os::OsRetentionClock;

use crate::bundle::Progress;
use crate::protocol::Workrail;
use crate::store::fs::StoreFs;
use crate::store::{LoadedSession, SessionHealth, StoreError};

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
    /// Its last activity could not be read: retained.
    AgeUnknown,
    /// Expired, and deleted by another process (another GC, or by hand) while this GC ran.
    AlreadyDeleted,
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
    /// A deleted session's directory was moved out of reach but not wholly removed (the
    /// session is gone; the next GC removes the rest).
    DeletionUnfinished,
    /// Writers kept an object directory busy, so part of its sweep waits for the next GC.
    SweepDeferred,
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
    ///
    /// `Err` when earlier events cannot be read again now: the roots are then incomplete, and
    /// nothing may be swept (D225).
    fn add(&mut self, loaded: &LoadedSession) -> Result<(), crate::store::StoreError> {
        self.snapshots.extend(loaded.pinned_snapshots()?);
        for chunk in loaded.events().chunks(0) {
            let (_, events) = chunk?;
            for event in events.iter() {
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
        Ok(())
    }
}

/// What deleting one expired session came to.
enum Deleted {
    /// Deleted; `unfinished` says why some of what was moved out of reach is still on disk.
    Yes { unfinished: Option<String> },
    /// Another process held its lock past the wait: retained this time.
    Locked,
    /// It changed since it was validated (its current view, when known and healthy).
    Changed(Option<Arc<LoadedSession>>),
    /// Another process deleted it first.
    Gone,
}

/// One entry of the store's session listing.
struct Listed {
    /// The name as stored (a session id, or a stray entry to leave alone).
    name: String,
    /// When it last committed, when that can be read.
    last_activity: Option<SystemTime>,
}

/// What a sweep of the CAS deleted (or would delete).
#[derive(Default)]
struct Swept {
    snapshots: Vec<SnapshotRef>,
    workflows: Vec<WorkflowHash>,
    artifacts: Vec<Sha256Digest>,
    young: usize,
    warnings: Vec<GcWarning>,
}

/// The primitives a store gives GC; the rules are [`run`]'s, the same for every store.
trait GcStore {
    /// Every entry of the session listing, with its last activity.
    fn sessions(&self, clock: &dyn RetentionClock) -> Result<Vec<Listed>, ErrorEnvelope>;
    /// Loads and validates a session from all its stored bytes.
    fn load(&self, id: &SessionId) -> Result<Arc<LoadedSession>, StoreError>;
    /// Deletes an expired session, under its lock, only while it is still `judged`, in one
    /// atomic step (decision D130).
    fn delete(&self, judged: &LoadedSession) -> Result<Deleted, ErrorEnvelope>;
    /// After sessions were deleted: drop derived data that summarizes them, best effort.
    fn after_deletions(&self);
    /// Whether anything appeared or grew since `seen` were listed and `retained` validated.
    fn changed_since(
        &self,
        seen: &BTreeSet<SessionId>,
        retained: &[Arc<LoadedSession>],
    ) -> Result<bool, ErrorEnvelope>;
    /// Deletes the objects no root reaches and older than [`CAS_GRACE`] (decision D133).
    fn sweep(
        &self,
        roots: &Roots,
        clock: &dyn RetentionClock,
        dry_run: bool,
        progress: &dyn Progress,
    ) -> Result<Swept, ErrorEnvelope>;
    /// Removes what crashed writers left (decision D63); `uncommitted` lists the sessions
    /// without committed truth.
    fn leftovers(
        &self,
        report: &mut GcReport,
        seen: &BTreeSet<SessionId>,
        uncommitted: &[SessionId],
        clock: &dyn RetentionClock,
        dry_run: bool,
    ) -> Result<(), ErrorEnvelope>;
}

/// Runs GC (see the module docs).
pub fn run(
    wr: &Workrail,
    options: &GcOptions,
    clock: &dyn RetentionClock,
    progress: &dyn Progress,
) -> Result<GcReport, ErrorEnvelope> {
    let parts = wr.parts();
    let data: &dyn StoreFs = wr.data_fs().as_ref();
    if let Some(files) = parts.store.file_stores() {
        let store = files::FileGc::new(&parts, files);
        return run_on(&store, data, options, clock, progress);
    }
    match parts.store.postgres_stores() {
        Some(pg) => {
            let store = postgres::PgGc::new(pg.backend());
            run_on(&store, data, options, clock, progress)
        }
        None => Err(crate::protocol::invariant("gc: a store of neither kind")),
    }
}

fn run_on(
    store: &dyn GcStore,
    data: &dyn StoreFs,
    options: &GcOptions,
    clock: &dyn RetentionClock,
    progress: &dyn Progress,
) -> Result<GcReport, ErrorEnvelope> {
    let config = match RetentionConfig::load(data)? {
        Some(config) => config,
        None => {
            let config = RetentionConfig::default();
            if !options.dry_run {
                config.save(data)?;
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
    let listed = store.sessions(clock)?;
    progress.begin("gc: validating sessions", listed.len() as u64);
    let mut healthy: Vec<(SessionId, Arc<LoadedSession>, Option<SystemTime>)> = Vec::new();
    let mut seen: BTreeSet<SessionId> = BTreeSet::new();
    let mut uncommitted: Vec<SessionId> = Vec::new();
    for entry in listed {
        progress.advance(1);
        let Ok(id) = SessionId::parse(&entry.name) else {
            report.warnings.push(GcWarning::new(
                GcWarningCode::StrayEntry,
                None,
                format!(
                    "the session entry {:?} is not a session id; left alone",
                    entry.name
                ),
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
        match store.load(&id) {
            Ok(loaded) if loaded.health.is_healthy() => {
                healthy.push((id, loaded, entry.last_activity));
            }
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
    for (id, loaded, last_activity) in healthy {
        let age = last_activity.map(|at| now.duration_since(at).unwrap_or_default());
        let decision = if keep.contains(&id) {
            RetentionDecision::KeepListed
        } else {
            match age {
                None => {
                    report.warnings.push(GcWarning::new(
                        GcWarningCode::SessionAgeUnknown,
                        Some(id.clone()),
                        format!(
                            "session {id}: the time of its last activity cannot be read; retained"
                        ),
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
        match store.delete(&candidate.loaded)? {
            Deleted::Yes { unfinished } => {
                if let Some(why) = unfinished {
                    report.warnings.push(GcWarning::new(
                        GcWarningCode::DeletionUnfinished,
                        Some(candidate.id.clone()),
                        format!(
                            "session {} is deleted, but part of its directory could not be removed yet ({why}); the next gc removes it",
                            candidate.id
                        ),
                    ));
                }
                report.sessions[candidate.verdict].deleted = true;
                report.deleted_sessions.push(candidate.id);
            }
            Deleted::Gone => {
                report.sessions[candidate.verdict].decision = RetentionDecision::AlreadyDeleted;
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
        store.after_deletions();
    }

    // 4) Mark from the retained sessions.
    let mut roots = Roots::default();
    let mut unmarked = None;
    for loaded in &retained {
        if let Err(e) = roots.add(loaded) {
            unmarked = Some((loaded.session_id.clone(), e));
        }
    }
    if let Some((session, e)) = unmarked {
        report.warnings.push(GcWarning::new(
            GcWarningCode::SweepSkipped,
            Some(session),
            format!(
                "the events of a retained session could not be read again ({e}), so what it keeps alive is not known and no stored object was deleted this time; run gc again"
            ),
        ));
        progress.finish();
        return Ok(report);
    }

    // 5) Nothing may have changed under the marks: no new session, no retained session grown.
    if !options.dry_run && !sweep_blocked {
        sweep_blocked = store.changed_since(&seen, &retained)?;
    }
    if sweep_blocked {
        report.warnings.push(GcWarning::new(
            GcWarningCode::SweepSkipped,
            None,
            "sessions changed while gc ran, so no stored object was deleted this time; run gc again"
                .into(),
        ));
        progress.finish();
        return Ok(report);
    }

    // 6) Sweep.
    let swept = store.sweep(&roots, clock, options.dry_run, progress)?;
    report.deleted_snapshots = swept.snapshots;
    report.deleted_pinned_workflows = swept.workflows;
    report.deleted_artifacts = swept.artifacts;
    report.young_objects_kept = swept.young;
    report.warnings.extend(swept.warnings);

    // 7) What crashed writers left.
    store.leftovers(&mut report, &seen, &uncommitted, clock, options.dry_run)?;

    // 8) Records of servers that ended without removing them (killed), decision D86.
    report.deleted_server_records = files::sweep_server_records(data, clock, now, options.dry_run)?;
    progress.finish();
    Ok(report)
}

struct Candidate {
    id: SessionId,
    loaded: Arc<LoadedSession>,
    verdict: usize,
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

/// Whether `path` was last modified at least [`CAS_GRACE`] before `now` (a missing or
/// unreadable entry is never old).
fn is_old(clock: &dyn RetentionClock, now: SystemTime, path: &Path) -> bool {
    match clock.modified(path) {
        Ok(Some(modified)) => now
            .duration_since(modified)
            .is_ok_and(|age| age >= CAS_GRACE),
        Ok(None) | Err(_) => false,
    }
}

//! GC beside writers: deleting is writing, so it is attacked like the append path.
//!
//! Guards against, each found by attack on an earlier build:
//! - a writer waiting on a session's lock while GC deleted the session re-created the lock file,
//!   found no manifest, committed its advance as record 0 of an empty session in the deleted
//!   one's place and answered `INTERNAL_ERROR`; GC then failed with "Directory not empty" and
//!   left a `corrupt_head` session, after which every GC ran in safe mode (decision D130);
//! - the CAS sweep read an object's age, then removed it with nothing in between: a session
//!   started in that gap refreshed the object and lost its pinned workflow (decision D133);
//! - a session whose `manifest.jsonl` was lost while its segments remained read as "no
//!   session" to `inspect`, `export`, `repair` and `resume_session`, and GC deleted it as a
//!   crashed writer's leftover (decision D131);
//! - two GC runs at once: the one that lost a race exited 1 blaming disk space or permissions;
//! - an empty session directory (a kill right after its `mkdir`) was never removed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::bundle_support;
use crate::protocol_support;

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bundle_support::*;
use workrail::bundle::NoProgress;
use workrail::entropy::SeededEntropy;
use workrail::gc::{GcOptions, GcReport, OsRetentionClock, RetentionClock, RetentionDecision};
use workrail::protocol::Workrail;
use workrail::store::fs::{FileStamp, LockError, LockGuard, OsFs, StoreFs};
use workrail::store::memfs::MemFs;
use workrail::store::{PinnedWorkflowStore, layout};
use workrail_spec::error::ErrorCode;
use workrail_spec::ids::SessionId;
use workrail_spec::tools::ResumeSessionInput;

use protocol_support::{ack, catalog, rehydrate, start};

fn open_os(dir: &Path, seed: u64) -> Workrail {
    let fs: Arc<dyn StoreFs> = Arc::new(OsFs::new(dir));
    Workrail::with_parts(fs, catalog(), Arc::new(SeededEntropy::new(seed))).unwrap()
}

/// The real filesystem's file times, seen from `ahead` in the future (so a session committed
/// a moment ago is days old).
#[derive(Debug)]
struct Ahead {
    files: OsRetentionClock,
    ahead: Duration,
}

impl RetentionClock for Ahead {
    fn now(&self) -> SystemTime {
        SystemTime::now() + self.ahead
    }
    fn modified(&self, path: &Path) -> io::Result<Option<SystemTime>> {
        self.files.modified(path)
    }
}

fn days_ahead(dir: &Path, days: u64) -> Ahead {
    Ahead {
        files: OsRetentionClock::new(dir),
        ahead: DAY * days as u32,
    }
}

fn expire_all() -> GcOptions {
    GcOptions {
        dry_run: false,
        ttl_days: Some(1),
    }
}

/// The real filesystem, pausing the first change GC makes under one session's directory (the
/// deletion's first step, whatever it is) until a writer has had time to queue on the lock.
#[derive(Debug)]
struct PauseDeletion {
    inner: OsFs,
    session_dir: PathBuf,
    reached: Mutex<Option<Sender<()>>>,
    pause: Duration,
}

impl PauseDeletion {
    fn pause_here(&self, path: &Path) {
        if !path.starts_with(&self.session_dir) {
            return;
        }
        let reached = self.reached.lock().unwrap().take();
        if let Some(reached) = reached {
            reached.send(()).unwrap();
            std::thread::sleep(self.pause);
        }
    }
}

impl StoreFs for PauseDeletion {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn create_dir(&self, dir: &Path) -> io::Result<bool> {
        self.inner.create_dir(dir)
    }
    fn write_new(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_new(path, bytes)
    }
    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.inner.append(path, bytes)
    }
    fn set_len(&self, path: &Path, len: u64) -> io::Result<()> {
        self.inner.set_len(path, len)
    }
    fn sync_file(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_file(path)
    }
    fn touch(&self, path: &Path) -> io::Result<()> {
        self.inner.touch(path)
    }
    fn stamp(&self, path: &Path) -> Option<FileStamp> {
        self.inner.stamp(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.pause_here(from);
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        self.inner.read(path)
    }
    fn len(&self, path: &Path) -> io::Result<Option<u64>> {
        self.inner.len(path)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(dir)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.pause_here(path);
        self.inner.remove_file(path)
    }
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.pause_here(dir);
        self.inner.remove_dir_all(dir)
    }
    fn write_private(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_private(path, bytes)
    }
    fn try_lock(&self, path: &Path) -> Result<Box<dyn LockGuard>, LockError> {
        self.inner.try_lock(path)
    }
    fn try_lock_existing(&self, path: &Path) -> Result<Option<Box<dyn LockGuard>>, LockError> {
        self.inner.try_lock_existing(path)
    }
    fn try_lock_shared(&self, path: &Path) -> Result<Option<Box<dyn LockGuard>>, LockError> {
        self.inner.try_lock_shared(path)
    }
    fn create_dir_durable(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_durable(dir)
    }
}

/// A writer queued on the lock of a session GC is deleting finds it gone: `SESSION_NOT_FOUND`
/// saying it was deleted, nothing re-created in its place, and GC finishes cleanly (and so does
/// the next run: no safe mode). Two "processes": each opens its own lock files, so the OS locks
/// exclude them as they exclude processes.
///
/// lock: L-GC-RETENTION, L-WRITER-OS-LOCK
#[test]
fn a_writer_waiting_on_a_session_gc_deletes_finds_it_gone_and_recreates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = open_os(dir.path(), 1);
    let out = start(&server, "project.demo");
    let session = out.session.session_id.clone();
    let (reached, reached_rx) = channel();
    let gc_fs = Arc::new(PauseDeletion {
        inner: OsFs::new(dir.path()),
        session_dir: layout::session_dir(&session),
        reached: Mutex::new(Some(reached)),
        pause: Duration::from_millis(600),
    });
    let gc_wr = Workrail::with_parts(
        gc_fs.clone() as Arc<dyn StoreFs>,
        catalog(),
        Arc::new(SeededEntropy::new(2)),
    )
    .unwrap();
    let clock = days_ahead(dir.path(), 3);

    let advance = std::thread::spawn(move || {
        reached_rx.recv().unwrap();
        // GC holds the session's lock and is about to delete it: this call queues on the lock.
        server.continue_workflow(ack(&out, "done", vec![]))
    });
    let report = gc_wr.gc(&expire_all(), &clock, &NoProgress).unwrap();
    let answer = advance.join().unwrap();

    assert!(!report.safe_mode, "{:?}", report.warnings);
    assert_eq!(report.deleted_sessions, vec![session.clone()], "{report:?}");
    let err = answer.expect_err("the session is gone");
    assert_eq!(err.code, ErrorCode::SessionNotFound, "{err:?}");
    assert_eq!(
        err.details.as_ref().unwrap()["problem"],
        serde_json::json!("session_deleted"),
        "{err:?}"
    );
    assert!(err.message.contains("deleted"), "{}", err.message);
    assert!(
        !dir.path().join(layout::session_dir(&session)).exists(),
        "nothing took the deleted session's place"
    );
    let sessions: Vec<_> = std::fs::read_dir(dir.path().join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(
        sessions.is_empty(),
        "nothing left in sessions/: {sessions:?}"
    );
    let again = gc_wr.gc(&expire_all(), &clock, &NoProgress).unwrap();
    assert!(!again.safe_mode, "{:?}", again.warnings);
}

/// A retention clock that, the first time the sweep reads the age of `target`, lets a new
/// session that re-uses it start (as another process would at that instant) and waits a moment
/// for it, then answers the age it read before.
struct StartsASessionMidSweep {
    inner: TestClock,
    target: PathBuf,
    fired: AtomicBool,
    starter: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    started: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl std::fmt::Debug for StartsASessionMidSweep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartsASessionMidSweep")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

impl RetentionClock for StartsASessionMidSweep {
    fn now(&self) -> SystemTime {
        self.inner.now()
    }
    fn modified(&self, path: &Path) -> io::Result<Option<SystemTime>> {
        let read = self.inner.modified(path);
        if path == self.target && !self.fired.swap(true, Ordering::SeqCst) {
            let starter = self.starter.lock().unwrap().take().unwrap();
            std::thread::spawn(starter);
            let started = self.started.lock().unwrap().take().unwrap();
            // Long enough for an unhindered start to finish; a start held off by the sweep
            // finishes after the sweep lets go.
            let _ = started.recv_timeout(Duration::from_millis(1500));
        }
        read
    }
}

/// The sweep judges an unreachable pinned workflow old; at that instant a new session starts
/// on the same workflow and refreshes the stored object. The new session keeps its workflow:
/// either the refresh waits for the sweep and then stores the object anew, or the sweep sees it
/// fresh. Never a session whose pinned workflow is gone.
///
/// lock: L-GC-REACHABILITY
#[test]
fn a_session_started_while_the_sweep_judges_its_workflow_keeps_it() {
    let fs = MemFs::new();
    let wr = open_seeded(&fs, 11);
    let first = start(&wr, "project.demo");
    let workflow = events(&wr, &first.session.session_id)
        .iter()
        .find_map(|e| match e.data() {
            workrail_spec::event::EventData::RunStarted(run) => Some(run.workflow_hash.clone()),
            _ => None,
        })
        .expect("the session started a run");
    let target = layout::pinned_workflow_path(&workflow);
    let clock = TestClock::new();
    clock.set_session_age(&first.session.session_id, 90);

    let (started_tx, started_rx) = channel();
    let second: Arc<Mutex<Option<Result<_, _>>>> = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&second);
    let other = open_seeded(&fs, 12);
    let hook = StartsASessionMidSweep {
        inner: clock,
        target,
        fired: AtomicBool::new(false),
        starter: Mutex::new(Some(Box::new(move || {
            let out = other.start_workflow(workrail_spec::tools::StartWorkflowInput {
                workflow_id: "project.demo".into(),
                context: None,
                preferences: vec![],
                preset: None,
            });
            *slot.lock().unwrap() = Some(out);
            let _ = started_tx.send(());
        }))),
        started: Mutex::new(Some(started_rx)),
    };
    let report = wr.gc(&GcOptions::default(), &hook, &NoProgress).unwrap();
    assert!(
        hook.fired.load(Ordering::SeqCst),
        "the sweep judged the workflow"
    );
    assert_eq!(
        report.deleted_sessions,
        vec![first.session.session_id.clone()]
    );
    // The start finishes (it may have waited for the sweep).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let out = loop {
        if let Some(out) = second.lock().unwrap().take() {
            break out;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the start never finished"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let out = out.expect("the new session started");
    let fresh = open_seeded(&fs, 13);
    fresh
        .continue_workflow(rehydrate(&out.state_token))
        .expect("the new session rehydrates: its pinned workflow is there");
    PinnedWorkflowStore::new(Arc::new(fs.clone()))
        .get(&workflow)
        .expect("the workflow the new session pins is stored");
    let session = out.session.session_id.as_str().to_owned();
    let inspected = fresh.inspect_session(&session, false).unwrap();
    assert!(inspected.contains("healthy"), "{inspected}");
}

/// `manifest.jsonl` lost while the session's segments remain: `corrupt_head` /
/// `manifest_missing` to every reader and writer, and GC keeps it (safe mode), however old.
///
/// lock: L-GC-SAFE-MODE, L-GC-VALIDATED-FIRST
#[test]
fn a_session_whose_manifest_is_lost_is_corrupt_everywhere_and_gc_keeps_it() {
    let fs = MemFs::new();
    let wr = open_seeded(&fs, 21);
    let out = start(&wr, "project.demo");
    let next = wr.continue_workflow(ack(&out, "one", vec![])).unwrap();
    let session = out.session.session_id.clone();
    fs.remove_file(&layout::manifest_path(&session)).unwrap();
    let wr = open_seeded(&fs, 22);
    let id = session.as_str();

    let err = wr
        .continue_workflow(rehydrate(&next.state_token))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionCorrupt, "{err:?}");
    let inspected = wr.inspect_session(id, false).unwrap();
    assert!(
        inspected.contains("corrupt_head") && inspected.contains("manifest_missing"),
        "{inspected}"
    );
    let export = wr.export_session(id, &NoProgress).unwrap_err();
    assert_eq!(export.code, ErrorCode::SessionCorrupt, "{export:?}");
    let repair = wr.repair_session(id).unwrap_err();
    assert_eq!(repair.code, ErrorCode::SessionCorrupt, "{repair:?}");
    let resumed = wr
        .resume_session(ResumeSessionInput { query: None })
        .unwrap();
    assert_eq!(resumed.skipped_unhealthy_sessions, 1);
    assert_eq!(resumed.skipped_sessions[0].session_id, session);
    assert_eq!(
        resumed.skipped_sessions[0].reason.as_deref(),
        Some("manifest_missing")
    );

    let clock = TestClock::new();
    let report = wr.gc(&expire_all(), &clock, &NoProgress).unwrap();
    assert!(report.safe_mode, "{report:?}");
    assert!(report.deleted_sessions.is_empty());
    assert!(report.deleted_uncommitted_sessions.is_empty());
    assert_eq!(
        fs.files()
            .iter()
            .filter(|p| p.starts_with(layout::events_dir(&session)))
            .count(),
        2,
        "its segments are all still there"
    );
}

/// A new session's empty manifest is durable before its first segment (decision D131), so a
/// first commit cut short never looks like a lost manifest: the directory holds no session.
///
/// lock: L-STORE-COMMIT-SEGMENT
#[test]
fn a_first_commit_cut_short_leaves_an_empty_manifest_and_no_session() {
    // Crash after every operation of a first start until it commits.
    for op in 1..200 {
        let fs = MemFs::new();
        let wr = open_seeded(&fs, 7);
        let base = fs.ops();
        fs.crash_at(base + op);
        let started = wr.start_workflow(workrail_spec::tools::StartWorkflowInput {
            workflow_id: "project.demo".into(),
            context: None,
            preferences: vec![],
            preset: None,
        });
        if started.is_ok() && !fs.has_crashed() {
            return;
        }
        let after = fs.after_crash(workrail::store::memfs::UnsyncedData::Lost);
        let segments: Vec<PathBuf> = after
            .files()
            .into_iter()
            .filter(|p| {
                p.starts_with(layout::SESSIONS_DIR) && p.extension().is_some_and(|e| e == "jsonl")
            })
            .filter(|p| !p.ends_with(layout::MANIFEST_FILE))
            .collect();
        for segment in &segments {
            let session_dir = segment.parent().unwrap().parent().unwrap();
            assert!(
                after
                    .files()
                    .contains(&session_dir.join(layout::MANIFEST_FILE)),
                "crash at op {op}: a segment without a manifest beside it: {segment:?}"
            );
        }
        let wr = open_seeded(&after, 8);
        let clock = TestClock::new();
        let report = wr.gc(&GcOptions::default(), &clock, &NoProgress).unwrap();
        assert!(!report.safe_mode, "crash at op {op}: {:?}", report.warnings);
    }
    panic!("the start never committed");
}

/// Two GC runs at once over the same expired sessions both finish with an honest report: every
/// session is deleted by exactly one of them, the other says `already_deleted` (or `locked`).
///
/// lock: L-GC-RETENTION
#[test]
fn two_gc_runs_at_once_both_finish_and_delete_each_session_once() {
    let dir = tempfile::tempdir().unwrap();
    let wr = open_os(dir.path(), 31);
    let mut sessions: Vec<SessionId> = (0..24)
        .map(|_| start(&wr, "project.demo").session.session_id)
        .collect();
    sessions.sort();
    let runs: Vec<_> = (0..2)
        .map(|i| {
            let path = dir.path().to_path_buf();
            std::thread::spawn(move || {
                let wr = open_os(&path, 40 + i);
                let clock = days_ahead(&path, 3);
                wr.gc(&expire_all(), &clock, &NoProgress)
            })
        })
        .collect();
    let reports: Vec<GcReport> = runs
        .into_iter()
        .map(|r| r.join().unwrap().expect("each gc run succeeds"))
        .collect();
    let mut deleted: Vec<SessionId> = reports
        .iter()
        .flat_map(|r| r.deleted_sessions.clone())
        .collect();
    deleted.sort();
    let before = deleted.len();
    deleted.dedup();
    assert_eq!(before, deleted.len(), "no session deleted twice");
    for report in &reports {
        assert!(!report.safe_mode, "{:?}", report.warnings);
        for verdict in &report.sessions {
            if !verdict.deleted {
                assert!(
                    matches!(
                        verdict.decision,
                        RetentionDecision::AlreadyDeleted
                            | RetentionDecision::Locked
                            | RetentionDecision::NoCommittedTruth
                    ),
                    "{verdict:?}"
                );
            }
        }
    }
    // Whatever one run left locked by the other, a third run finishes.
    let last = open_os(dir.path(), 50)
        .gc(&expire_all(), &days_ahead(dir.path(), 3), &NoProgress)
        .unwrap();
    deleted.extend(last.deleted_sessions);
    deleted.sort();
    assert_eq!(deleted, sessions);
    let left: Vec<_> = std::fs::read_dir(dir.path().join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Session directories without committed truth and older than the grace period go, an empty
/// one (a kill right after its `mkdir`, before `events/`) included. On the real filesystem:
/// a path that does not exist has no modification time there.
///
/// lock: L-GC-RETENTION
#[test]
fn empty_and_uncommitted_session_directories_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let wr = open_os(dir.path(), 61);
    let empty = SessionId::parse("sess_0000000000000001").unwrap();
    let no_events = SessionId::parse("sess_0000000000000002").unwrap();
    let empty_manifest = SessionId::parse("sess_0000000000000003").unwrap();
    let at = |p: PathBuf| dir.path().join(p);
    std::fs::create_dir_all(at(layout::session_dir(&empty))).unwrap();
    std::fs::create_dir_all(at(layout::events_dir(&no_events))).unwrap();
    std::fs::create_dir_all(at(layout::events_dir(&empty_manifest))).unwrap();
    std::fs::write(at(layout::manifest_path(&empty_manifest)), b"").unwrap();
    let clock = days_ahead(dir.path(), 1);
    let report = wr.gc(&GcOptions::default(), &clock, &NoProgress).unwrap();
    assert!(!report.safe_mode, "{:?}", report.warnings);
    let mut gone = report.deleted_uncommitted_sessions.clone();
    gone.sort();
    assert_eq!(
        gone,
        vec![empty.clone(), no_events.clone(), empty_manifest.clone()]
    );
    let left: Vec<_> = std::fs::read_dir(dir.path().join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

//! The model is the production protocol (issue 35, item 3; decision D197): the store's calls
//! of its filesystem port during one acknowledged advance, recorded through a `StoreFs` that
//! logs every call, read as the model checker's operations (`workrail_model::storecheck::Op`)
//! and compared with the sequence the checker explores (`advance_ops`). A change to the commit
//! order in production that the model does not share fails here, so the checked protocol and
//! the shipped one cannot drift apart.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use workrail::bundle::NoProgress;
use workrail::entropy::SeededEntropy;
use workrail::gc::{GcOptions, RetentionClock};
use workrail::protocol::Workrail;
use workrail::store::fs::{FileStamp, LockError, LockGuard, StoreFs};
use workrail::store::memfs::MemFs;
use workrail_model::storecheck::{
    GC_DELETE, GcOp, Op, SweepStep, advance_ops, call_ops, resend_answered_ops, sweep_ops,
};
use workrail_spec::tools::{
    CheckpointWorkflowInput, ContinueWorkflowInput, OutputInput, StartWorkflowInput,
};

/// One call of the port: its name and path.
type Call = (&'static str, String);

#[derive(Debug)]
struct Recorder {
    inner: MemFs,
    log: Arc<Mutex<Vec<Call>>>,
}

impl Recorder {
    fn note(&self, what: &'static str, path: &Path) {
        self.log
            .lock()
            .unwrap()
            .push((what, path.to_string_lossy().into_owned()));
    }
}

/// A lock that notes its release.
#[derive(Debug)]
struct NotedGuard {
    _inner: Box<dyn LockGuard>,
    path: String,
    log: Arc<Mutex<Vec<Call>>>,
}

impl LockGuard for NotedGuard {}

impl Drop for NotedGuard {
    fn drop(&mut self) {
        if let Ok(mut log) = self.log.lock() {
            log.push(("unlock", self.path.clone()));
        }
    }
}

impl Recorder {
    fn guard(&self, path: &Path, inner: Box<dyn LockGuard>) -> Box<dyn LockGuard> {
        self.note("lock", path);
        Box::new(NotedGuard {
            _inner: inner,
            path: path.to_string_lossy().into_owned(),
            log: Arc::clone(&self.log),
        })
    }
}

impl StoreFs for Recorder {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.note("create_dir_all", dir);
        self.inner.create_dir_all(dir)
    }
    fn create_dir(&self, dir: &Path) -> io::Result<bool> {
        self.note("create_dir", dir);
        self.inner.create_dir(dir)
    }
    fn write_new(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.note("write_new", path);
        self.inner.write_new(path, bytes)
    }
    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.note("append", path);
        self.inner.append(path, bytes)
    }
    fn set_len(&self, path: &Path, len: u64) -> io::Result<()> {
        self.note("set_len", path);
        self.inner.set_len(path, len)
    }
    fn sync_file(&self, path: &Path) -> io::Result<()> {
        self.note("sync_file", path);
        self.inner.sync_file(path)
    }
    fn touch(&self, path: &Path) -> io::Result<()> {
        self.note("touch", path);
        self.inner.touch(path)
    }
    fn stamp(&self, path: &Path) -> Option<FileStamp> {
        self.inner.stamp(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.note("rename", to);
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.note("sync_dir", dir);
        self.inner.sync_dir(dir)
    }
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        self.note("read", path);
        self.inner.read(path)
    }
    fn len(&self, path: &Path) -> io::Result<Option<u64>> {
        self.note("len", path);
        self.inner.len(path)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.note("list_dir", dir);
        self.inner.list_dir(dir)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.note("remove_file", path);
        self.inner.remove_file(path)
    }
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.note("remove_dir_all", dir);
        self.inner.remove_dir_all(dir)
    }
    fn write_private(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.note("write_private", path);
        self.inner.write_private(path, bytes)
    }
    fn try_lock(&self, path: &Path) -> Result<Box<dyn LockGuard>, LockError> {
        let inner = self.inner.try_lock(path)?;
        Ok(self.guard(path, inner))
    }
    fn try_lock_existing(&self, path: &Path) -> Result<Option<Box<dyn LockGuard>>, LockError> {
        Ok(self
            .inner
            .try_lock_existing(path)?
            .map(|inner| self.guard(path, inner)))
    }
    fn try_lock_shared(&self, path: &Path) -> Result<Option<Box<dyn LockGuard>>, LockError> {
        self.note("lock_shared", path);
        self.inner.try_lock_shared(path)
    }
    fn create_dir_durable(&self, dir: &Path) -> io::Result<()> {
        self.note("create_dir_durable", dir);
        self.inner.create_dir_durable(dir)
    }
}

/// Reads the session directory's part of a trace as the model's operations: consecutive reads
/// of the manifest are the model's one `ReadManifest`; `write_new` is its `WriteNew` and
/// `WriteBytes` (a crash may leave the file created and empty); one `append` of the manifest is
/// its two halves (a crash may tear the write). The snapshot object's calls inside the commit
/// are the model's `put_durable` steps (decision D198); other calls outside the session
/// directory (the keyring, pinned workflows) are left out.
fn as_model_ops(trace: &[Call], session_dir: &str) -> Result<Vec<Op>, String> {
    let mut ops = Vec::new();
    for (what, path) in trace {
        if path == "snapshots" || path.starts_with("snapshots/") {
            let inside = ops.contains(&Op::Lock) && !ops.contains(&Op::Unlock);
            let op: &[Op] = match *what {
                // `put_durable` starts with a read; outside the commit a read or a stat of an
                // object is a reader's (the node's snapshot, rehydrated), which writes nothing.
                "read" if inside => &[Op::ReadObject],
                "read" | "len" => &[],
                // The directory exists in the model (made once, durably).
                "create_dir_durable" => &[],
                "lock_shared" => &[Op::LockObjects],
                "touch" => &[Op::TouchObject],
                "write_new" => &[Op::WriteObjectNew, Op::WriteObjectBytes],
                "sync_file" => &[Op::SyncObject],
                "rename" => &[Op::RenameObject],
                "sync_dir" => &[Op::SyncObjectDir],
                _ => return Err(format!("a call the model does not know: {what} {path}")),
            };
            ops.extend_from_slice(op);
            continue;
        }
        let Some(rest) = path.strip_prefix(session_dir) else {
            continue;
        };
        let rest = rest.trim_start_matches('/');
        let segment = rest.starts_with("events/");
        let op: &[Op] = match (*what, rest) {
            ("lock", ".lock") => &[Op::Lock],
            ("unlock", ".lock") => &[Op::Unlock],
            ("len" | "read", "manifest.jsonl") => {
                if ops.last() == Some(&Op::ReadManifest) {
                    &[]
                } else {
                    &[Op::ReadManifest]
                }
            }
            ("write_new", _) if segment => &[Op::WriteNew, Op::WriteBytes],
            ("sync_file", _) if segment => &[Op::SyncFile],
            ("rename", _) if segment => &[Op::Rename],
            ("sync_dir", "events") => &[Op::SyncDir],
            ("append", "manifest.jsonl") => &[Op::AppendManifestHalf, Op::AppendManifestRest],
            ("sync_file", "manifest.jsonl") => &[Op::SyncManifest],
            _ => return Err(format!("a call the model does not know: {what} {path}")),
        };
        ops.extend_from_slice(op);
    }
    // Before the lock, the server looks at the manifest's length to know whether the session
    // it holds in memory is current: a read like the model's reader's, never trusted for the
    // commit, which reads the manifest again under the lock. The commit starts at the lock.
    let start = ops.iter().position(|op| *op == Op::Lock).unwrap_or(0);
    if ops[..start].iter().any(|op| *op != Op::ReadManifest) {
        return Err(format!(
            "writes before the session's lock: {:?}",
            &ops[..start]
        ));
    }
    Ok(ops.split_off(start))
}

/// Reads a resend's trace as the model's steps: the manifest's reads without the lock are the
/// lookup of the dedupe key, its fsync is the model's, and the answer (no filesystem call) is
/// the last step; anything else of the session's (a lock, a write) is not a resend answered
/// from its record.
fn as_resend_ops(trace: &[Call], session_dir: &str) -> Result<Vec<Op>, String> {
    let manifest = format!("{session_dir}/manifest.jsonl");
    let mut ops = Vec::new();
    for (what, path) in trace {
        if !path.starts_with(session_dir) {
            continue;
        }
        match (*what, path == &manifest) {
            ("len" | "read", true) if ops.is_empty() => ops.push(Op::LookupRecorded),
            ("len" | "read", true) if ops.last() == Some(&Op::LookupRecorded) => {}
            ("sync_file", true) => ops.push(Op::SyncManifest),
            _ => return Err(format!("a resend called {what} {path}")),
        }
    }
    ops.push(Op::AnswerRecorded);
    Ok(ops)
}

fn recorded_workrail() -> (Workrail, Arc<Mutex<Vec<Call>>>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let fs = Arc::new(Recorder {
        inner: MemFs::new(),
        log: Arc::clone(&log),
    });
    let wr = Workrail::with_parts(
        fs as Arc<dyn StoreFs>,
        workrail_harness::fixture::catalog(),
        Arc::new(SeededEntropy::new(7)),
    )
    .unwrap();
    (wr, log)
}

/// decision: D197
/// lock: L-STORE-COMMIT-ATTEST
#[test]
fn an_advance_calls_the_store_in_the_order_the_model_checks() {
    let (wr, log) = recorded_workrail();
    let started = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: workrail_harness::fixture::WORKFLOW_ID.to_owned(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    let session_dir = format!("sessions/{}", started.session.session_id);
    for round in 0..3 {
        log.lock().unwrap().clear();
        let out = wr
            .continue_workflow(ContinueWorkflowInput {
                state_token: Some(started.state_token.clone()),
                ack_token: started.ack_token.clone(),
                output: Some(OutputInput {
                    notes_markdown: Some(format!("Round {round}.")),
                    artifacts: vec![],
                }),
                context: None,
                preferences: vec![],
                preset: None,
            })
            .unwrap();
        let trace = log.lock().unwrap().clone();
        let ops = as_model_ops(&trace, &session_dir).unwrap();
        if round == 0 {
            assert_eq!(
                ops,
                advance_ops(None),
                "production's advance is not the model's:\n{trace:#?}"
            );
        } else {
            // A resend of the same ack is answered from its record, found without the lock:
            // the manifest fsynced first (its writer may have died before its own fsync),
            // nothing written (decision D207).
            assert_eq!(
                as_resend_ops(&trace, &session_dir).unwrap(),
                resend_answered_ops(),
                "production's resend is not the model's:\n{trace:#?}"
            );
            assert!(out.pending.is_some());
        }
    }
}

/// A checkpoint and its resend: the checkpoint commits as the model's checkpoint (no object,
/// a segment closed, nothing pinned); the resend of the same checkpoint token is answered from
/// its record, the manifest fsynced first, nothing written.
/// decision: D207
#[test]
fn a_checkpoint_and_its_resend_call_the_store_as_the_model_checks() {
    let (wr, log) = recorded_workrail();
    let started = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: workrail_harness::fixture::WORKFLOW_ID.to_owned(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    let session_dir = format!("sessions/{}", started.session.session_id);
    let input = CheckpointWorkflowInput {
        state_token: started.state_token.clone(),
        checkpoint_token: started.checkpoint_token.clone().unwrap(),
        output: OutputInput {
            notes_markdown: Some("Halfway.".to_owned()),
            artifacts: vec![],
        },
    };
    for round in 0..2 {
        log.lock().unwrap().clear();
        wr.checkpoint_workflow(input.clone()).unwrap();
        let trace = log.lock().unwrap().clone();
        if round == 0 {
            assert_eq!(
                as_model_ops(&trace, &session_dir).unwrap(),
                call_ops(None, None),
                "production's checkpoint is not the model's:\n{trace:#?}"
            );
        } else {
            assert_eq!(
                as_resend_ops(&trace, &session_dir).unwrap(),
                resend_answered_ops(),
                "production's resent checkpoint is not the model's:\n{trace:#?}"
            );
        }
    }
}

/// Every file older than any grace period: the clock GC judges ages by. GC reads ages through
/// this port, not `StoreFs`, so the clock notes each read in the same log (decision D208):
/// the recorded trace has every age read in its place among the filesystem calls.
#[derive(Debug)]
struct AllOld {
    log: Arc<Mutex<Vec<Call>>>,
}

impl RetentionClock for AllOld {
    fn now(&self) -> std::time::SystemTime {
        std::time::SystemTime::now()
    }
    fn modified(&self, path: &Path) -> io::Result<Option<std::time::SystemTime>> {
        self.log
            .lock()
            .unwrap()
            .push(("modified", path.to_string_lossy().into_owned()));
        Ok(Some(std::time::UNIX_EPOCH))
    }
}

/// Reads GC's retention delete of `session_dir` in a trace as the model's steps: from the
/// session's lock to its release. The removal of the directory renamed away (and the fsync of
/// `sessions/` after it) is left out: the model drops the directory at the rename.
fn as_gc_delete(trace: &[Call], session_dir: &str) -> Result<Vec<GcOp>, String> {
    let lock = format!("{session_dir}/.lock");
    let start = trace
        .iter()
        .position(|(what, path)| *what == "lock" && *path == lock)
        .ok_or("gc never locked the session")?;
    let mut ops: Vec<GcOp> = Vec::new();
    let mut trash = false;
    for (what, path) in &trace[start..] {
        let op = match (*what, path.as_str()) {
            ("lock", p) if p == lock => GcOp::Lock,
            ("len" | "read" | "modified", p) if p.starts_with(session_dir) => GcOp::Judge,
            ("rename", p) if p.starts_with("sessions/.tmp-") && p.ends_with(&session_dir[9..]) => {
                GcOp::RenameAway
            }
            ("sync_dir", "sessions") if !trash => GcOp::SyncSessions,
            ("remove_dir_all", p) if p.starts_with("sessions/.tmp-") => {
                trash = true;
                continue;
            }
            ("sync_dir", "sessions") => continue,
            ("unlock", p) if p == lock => {
                ops.push(GcOp::Unlock);
                break;
            }
            _ => return Err(format!("a call the model does not know: {what} {path}")),
        };
        // Consecutive reads of the session are one judgment.
        if !(op == GcOp::Judge && ops.last() == Some(&GcOp::Judge)) {
            ops.push(op);
        }
    }
    Ok(ops)
}

/// Reads GC's sweep of `snapshots/` in a trace as the model's steps: the fsync of `sessions/`
/// before the object directories are listed, then the directory's lock, each object's age
/// read (the clock's note) and its unlink, the unlock and the directory's fsync.
fn as_sweep(trace: &[Call]) -> Result<Vec<SweepStep>, String> {
    let listed = trace
        .iter()
        .position(|(what, path)| *what == "list_dir" && path == "snapshots")
        .ok_or("gc never listed snapshots/")?;
    let mut ops = Vec::new();
    if trace[..listed].last() != Some(&("sync_dir", "sessions".to_owned())) {
        return Err(format!(
            "sessions/ is not made durable right before the sweep: {:?}",
            trace[..listed].last()
        ));
    }
    ops.push(SweepStep::SyncSessions);
    for (what, path) in &trace[listed..] {
        if !path.starts_with("snapshots") {
            continue;
        }
        match *what {
            "list_dir" => {}
            "lock" => ops.push(SweepStep::Lock),
            "modified" => ops.push(SweepStep::Judge),
            "remove_file" => ops.push(SweepStep::Unlink),
            "unlock" => ops.push(SweepStep::Unlock),
            "sync_dir" => {
                ops.push(SweepStep::SyncDir);
                break;
            }
            _ => return Err(format!("a call the model does not know: {what} {path}")),
        }
    }
    Ok(ops)
}

/// decision: D200
/// lock: L-STORE-COMMIT-ATTEST
#[test]
fn gc_deletes_and_sweeps_in_the_order_the_model_checks() {
    let (wr, log) = recorded_workrail();
    let started = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: workrail_harness::fixture::WORKFLOW_ID.to_owned(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    let session_dir = format!("sessions/{}", started.session.session_id);
    log.lock().unwrap().clear();
    let report = wr
        .gc(
            &GcOptions {
                dry_run: false,
                ttl_days: Some(1),
            },
            &AllOld {
                log: Arc::clone(&log),
            },
            &NoProgress,
        )
        .unwrap();
    assert_eq!(report.deleted_sessions.len(), 1, "{report:?}");
    assert_eq!(report.deleted_snapshots.len(), 1, "{report:?}");
    let trace = log.lock().unwrap().clone();
    assert_eq!(
        as_gc_delete(&trace, &session_dir).unwrap(),
        GC_DELETE,
        "production's retention delete is not the model's:\n{trace:#?}"
    );
    assert_eq!(
        as_sweep(&trace).unwrap(),
        sweep_ops(report.deleted_snapshots.len()),
        "production's sweep is not the model's:\n{trace:#?}"
    );
}

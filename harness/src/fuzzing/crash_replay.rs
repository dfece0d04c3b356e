//! The crash-state property of [`crate::crash`] at fuzzing speed: the same command sequence, the
//! same crash points, the same verdicts (old truth, new truth, or the locked fail-fast state
//! repaired to the new truth; after any of them the interrupted call again ends in the model's
//! after-state), with less work per crash point.
//!
//! [`crate::crash::check_crashes`] runs the last command once per crash point `k`, in a new
//! process that crashes at its `k`-th mutating operation. Here the last command runs once, on a
//! filesystem that records every mutating call ([`RecordingFs`]); the filesystem a crash at `k`
//! leaves is rebuilt by replaying the first calls of that record on a copy of the data directory
//! with the crash planned at `k` (`MemFs::crash_at_torn`, so the torn write and what each
//! unsynced-data policy keeps are `MemFs`'s own). The command does not know where it will crash,
//! so everything it does before operation `k` is what the recorded run did.
//!
//! Many crash points leave the same bytes (an unsynced temporary file is lost, a sync changes
//! nothing that a `Kept` crash keeps), so each distinct data directory is checked once. The
//! restarted process draws its ids from a seed derived from those bytes, which makes a repeated
//! check identical to the first, not merely similar.
//!
//! Everything here is deterministic (seeded entropy, `MemFs`), so the checked prefix, the
//! recorded command and the crash states already checked are remembered for the next inputs
//! that share them (libFuzzer's mutations often keep the seed and the prefix).
//!
//! The replay is checked against the recorded run before it is trusted: replayed to the end, it
//! must perform as many operations and leave the same files. When it does not (a command that
//! writes through another path), the input goes through [`crate::crash::check_crashes`] instead.
//! `tests/fuzz_regressions.rs` checks that both find the same crash points on the corpus.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use workrail::entropy::SeededEntropy;
use workrail::protocol::Workrail;
use workrail::store::fs::{LockError, LockGuard, StoreFs};
use workrail::store::memfs::{MemFs, UnsyncedData};
use workrail::store::{CorruptionReason, LoadedSession, SessionHealth, StoreError};
use workrail_spec::error::ErrorCode;
use workrail_spec::ids::SessionId;
use workrail_spec::tools::{CheckpointWorkflowInput, ContinueWorkflowInput, StartWorkflowInput};

use crate::crash::{advance_model, run_of};
use crate::driver::{Expect, Harness, Mode, Prepared, World, check_truth};
use crate::ops::Op;
use crate::system::{Fingerprint, InProcess, Reply, SIMULATED_LOCK_WAIT, System, open_workrail};

/// No command does more mutating operations than this (as in [`crate::crash`]).
const MAX_CRASH_POINTS: u64 = 500;

/// One call that changes a filesystem.
#[derive(Debug, Clone)]
enum FsCall {
    CreateDirAll(PathBuf),
    CreateDir(PathBuf),
    WriteNew(PathBuf, Vec<u8>),
    Append(PathBuf, Vec<u8>),
    SetLen(PathBuf, u64),
    SyncFile(PathBuf),
    Rename(PathBuf, PathBuf),
    SyncDir(PathBuf),
    RemoveFile(PathBuf),
    RemoveDirAll(PathBuf),
    WritePrivate(PathBuf, Vec<u8>),
    CreateDirDurable(PathBuf),
    /// An exclusive lock creates its lock file.
    Lock(PathBuf),
}

impl FsCall {
    /// Performs the call on `fs` (its result is the recorded call's: the same state, the same
    /// outcome).
    fn apply(&self, fs: &MemFs) {
        let _ = match self {
            Self::CreateDirAll(p) => fs.create_dir_all(p),
            Self::CreateDir(p) => fs.create_dir(p).map(|_| ()),
            Self::WriteNew(p, b) => fs.write_new(p, b),
            Self::Append(p, b) => fs.append(p, b),
            Self::SetLen(p, n) => fs.set_len(p, *n),
            Self::SyncFile(p) => fs.sync_file(p),
            Self::Rename(a, b) => fs.rename(a, b),
            Self::SyncDir(p) => fs.sync_dir(p),
            Self::RemoveFile(p) => fs.remove_file(p),
            Self::RemoveDirAll(p) => fs.remove_dir_all(p),
            Self::WritePrivate(p, b) => fs.write_private(p, b),
            Self::CreateDirDurable(p) => fs.create_dir_durable(p),
            Self::Lock(p) => fs
                .try_lock(p)
                .map(drop)
                .map_err(|_| io::ErrorKind::Other.into()),
        };
    }
}

/// `MemFs` with a record of every call that changes it.
#[derive(Debug, Clone)]
struct RecordingFs {
    inner: MemFs,
    calls: Arc<Mutex<Vec<FsCall>>>,
}

impl RecordingFs {
    fn record(&self, call: FsCall) {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(call);
    }

    fn calls(&self) -> Vec<FsCall> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl StoreFs for RecordingFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.record(FsCall::CreateDirAll(dir.to_path_buf()));
        self.inner.create_dir_all(dir)
    }
    fn create_dir(&self, dir: &Path) -> io::Result<bool> {
        self.record(FsCall::CreateDir(dir.to_path_buf()));
        self.inner.create_dir(dir)
    }
    fn write_new(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.record(FsCall::WriteNew(path.to_path_buf(), bytes.to_vec()));
        self.inner.write_new(path, bytes)
    }
    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.record(FsCall::Append(path.to_path_buf(), bytes.to_vec()));
        self.inner.append(path, bytes)
    }
    fn set_len(&self, path: &Path, len: u64) -> io::Result<()> {
        self.record(FsCall::SetLen(path.to_path_buf(), len));
        self.inner.set_len(path, len)
    }
    fn sync_file(&self, path: &Path) -> io::Result<()> {
        self.record(FsCall::SyncFile(path.to_path_buf()));
        self.inner.sync_file(path)
    }
    fn touch(&self, path: &Path) -> io::Result<()> {
        self.inner.touch(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.record(FsCall::Rename(from.to_path_buf(), to.to_path_buf()));
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.record(FsCall::SyncDir(dir.to_path_buf()));
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
        self.record(FsCall::RemoveFile(path.to_path_buf()));
        self.inner.remove_file(path)
    }
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.record(FsCall::RemoveDirAll(dir.to_path_buf()));
        self.inner.remove_dir_all(dir)
    }
    fn write_private(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.record(FsCall::WritePrivate(path.to_path_buf(), bytes.to_vec()));
        self.inner.write_private(path, bytes)
    }
    fn try_lock(&self, path: &Path) -> Result<Box<dyn LockGuard>, LockError> {
        self.record(FsCall::Lock(path.to_path_buf()));
        self.inner.try_lock(path)
    }
    fn try_lock_existing(&self, path: &Path) -> Result<Option<Box<dyn LockGuard>>, LockError> {
        // Creates nothing: nothing for a replay to repeat.
        self.inner.try_lock_existing(path)
    }
    fn try_lock_shared(&self, path: &Path) -> Result<Option<Box<dyn LockGuard>>, LockError> {
        self.inner.try_lock_shared(path)
    }
    fn create_dir_durable(&self, dir: &Path) -> io::Result<()> {
        // As one call: `MemFs` keeps what it knows to be durable, and so does its replay.
        self.record(FsCall::CreateDirDurable(dir.to_path_buf()));
        self.inner.create_dir_durable(dir)
    }
}

/// [`InProcess`] whose processes wait for no lock: one thread drives every simulated process, so
/// a lock another one holds is still held when any wait ends, and the call answers what it
/// answers after [`SIMULATED_LOCK_WAIT`], without sleeping first.
struct NoWait(InProcess);

impl NoWait {
    fn new(mut sys: InProcess) -> Self {
        sys.workrail = Self::reopen(&sys);
        Self(sys)
    }

    /// A `Workrail` like the one `sys` opened last (the same seed), without the lock wait.
    fn reopen(sys: &InProcess) -> Workrail {
        match open_workrail(&sys.fs, sys.process_seed()) {
            Ok(w) => w.with_lock_wait(std::time::Duration::ZERO),
            Err(e) => panic!("WorkRail does not reopen on its own data: {e:?}"),
        }
    }
}

impl System for NoWait {
    fn start(&mut self, input: &StartWorkflowInput) -> Reply {
        self.0.start(input)
    }
    fn continue_workflow(&mut self, input: &ContinueWorkflowInput) -> Reply {
        self.0.continue_workflow(input)
    }
    fn checkpoint(&mut self, input: &CheckpointWorkflowInput) -> Reply {
        self.0.checkpoint(input)
    }
    fn restart(&mut self) {
        self.0.restart();
        self.0.workrail = Self::reopen(&self.0);
    }
    fn hold_lock(&self, session: &SessionId) -> Box<dyn std::any::Any> {
        self.0.hold_lock(session)
    }
    fn load(&self, session: &SessionId) -> Result<Arc<LoadedSession>, StoreError> {
        self.0.load(session)
    }
    fn sessions(&self) -> Vec<SessionId> {
        self.0.sessions()
    }
    fn fingerprint(&self) -> Fingerprint {
        self.0.fingerprint()
    }
    fn name(&self) -> &'static str {
        self.0.name()
    }
}

/// splitmix64, as [`crate::crash`] mixes its seeds.
fn mix(seed: u64, salt: u64) -> u64 {
    let mut z = seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A data directory's identity: the SHA-256 of every file with its bytes and every directory,
/// with the facts a verdict depends on besides the data (whether the crash tore a write, whether
/// the policy tears unsynced bytes).
fn image_digest(fs: &MemFs, facts: [bool; 2]) -> [u8; 32] {
    let mut buf = Vec::new();
    let mut put = |bytes: &[u8]| {
        buf.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
        buf.extend_from_slice(bytes);
    };
    for (path, bytes) in fs.snapshot() {
        put(path.to_string_lossy().as_bytes());
        put(&bytes);
    }
    put(b"dirs");
    for dir in fs.durable_dirs() {
        put(dir.to_string_lossy().as_bytes());
    }
    put(&[u8::from(facts[0]), u8::from(facts[1])]);
    workrail_spec::jcs::sha256(&buf).bytes()
}

/// A few recent results of a deterministic computation, most recent first.
struct Recent<K, V> {
    entries: std::collections::VecDeque<(K, V)>,
}

impl<K: PartialEq, V: Clone> Recent<K, V> {
    const fn new() -> Self {
        Self {
            entries: std::collections::VecDeque::new(),
        }
    }

    fn get(&mut self, key: &K) -> Option<V> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        let hit = self.entries.remove(i)?;
        let value = hit.1.clone();
        self.entries.push_front(hit);
        Some(value)
    }

    fn put(&mut self, key: K, value: V) {
        self.entries.push_front((key, value));
        self.entries.truncate(REMEMBERED);
    }
}

/// How many prefixes and recorded commands are remembered.
const REMEMBERED: usize = 32;

/// The data directory and world after a checked prefix.
struct Prefixed {
    world: World,
    /// What a crash right after the prefix keeps of its data directory (everything).
    image: MemFs,
}

/// `prefix` run from `seed` and checked (every command, then a power cut after it). The run is
/// deterministic (seeded entropy, `MemFs`), so the next inputs that share it are given the
/// remembered one.
fn prefixed(prefix: &[Op], seed: u64) -> Result<Arc<Prefixed>, String> {
    type Key = (u64, Vec<Op>);
    static RECENT: Mutex<Recent<Key, Arc<Prefixed>>> = Mutex::new(Recent::new());
    let key = (seed, prefix.to_vec());
    if let Some(hit) = lock(&RECENT).get(&key) {
        return Ok(hit);
    }
    let mut base = Harness::new(NoWait::new(InProcess::new(seed)));
    base.run(prefix)?;
    // A power cut between commands loses nothing a response acknowledged (checked once per
    // distinct data directory: both policies usually leave the same bytes).
    let mut cuts: Vec<[u8; 32]> = Vec::new();
    for policy in [UnsyncedData::Lost, UnsyncedData::Kept] {
        let image = base.sys.0.fs.after_crash(policy);
        let digest = image_digest(&image, [false; 2]);
        if cuts.contains(&digest) {
            continue;
        }
        cuts.push(digest);
        let cut = InProcess::on(image, mix(seed, 1));
        check_truth(&cut, &base.world, None, None)
            .map_err(|e| format!("a power cut after {prefix:?} ({policy:?}) lost truth: {e}"))?;
    }
    let found = Arc::new(Prefixed {
        image: base.sys.0.fs.after_crash(UnsyncedData::Kept),
        world: base.world,
    });
    lock(&RECENT).put(key, Arc::clone(&found));
    Ok(found)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The last command run once, uninterrupted and checked, with the record of its changes.
struct Recorded {
    prepared: Prepared,
    /// The world just before the call.
    world: World,
    /// The data directory just before the call.
    before_call: MemFs,
    calls: Vec<FsCall>,
    /// Mutating operations of the call (crash points).
    points: u64,
    run: Option<usize>,
    /// Events of the run's session before the call.
    old_len: usize,
    known_sessions: Vec<SessionId>,
    /// The crash states already checked, by [`image_digest`].
    checked: Mutex<BTreeSet<[u8; 32]>>,
    /// The policies under which every crash point is checked.
    policies: Mutex<Vec<UnsyncedData>>,
}

/// What the last command of an input is.
#[derive(Clone)]
enum Last {
    /// It does not apply (e.g. a restart, or an ack of a complete node): nothing to crash.
    NotApplicable,
    Recorded(Arc<Recorded>),
    /// Its replay differs from its run: crashed the way [`crate::crash`] does.
    NotReplayable,
}

/// `last` after `prefix`, run once and checked (remembered like [`prefixed`]).
fn recorded(prefix: &[Op], last: &Op, seed: u64) -> Result<Last, String> {
    type Key = (u64, Vec<Op>, Op);
    static RECENT: Mutex<Recent<Key, Last>> = Mutex::new(Recent::new());
    let key = (seed, prefix.to_vec(), last.clone());
    if let Some(hit) = lock(&RECENT).get(&key) {
        return Ok(hit);
    }
    let base = prefixed(prefix, seed)?;
    // A process on the data directory, whose filesystem records every change.
    let process_seed = mix(seed, 2);
    let fs = base.image.after_crash(UnsyncedData::Kept);
    let recording = RecordingFs {
        inner: fs.clone(),
        calls: Arc::default(),
    };
    let mut sys = InProcess::on(fs, process_seed);
    sys.workrail = match Workrail::with_parts(
        Arc::new(recording.clone()),
        crate::fixture::catalog(),
        Arc::new(SeededEntropy::new(process_seed)),
    ) {
        Ok(w) => w.with_lock_wait(SIMULATED_LOCK_WAIT),
        Err(e) => return Err(format!("WorkRail does not open: {e:?}")),
    };
    let mut trial = Harness {
        sys,
        world: base.world.clone(),
        workflow: crate::generated::harness_workflow(),
    };
    let ops_before_prepare = trial.sys.fs.ops();
    let Some(prepared) = trial.prepare(last)? else {
        lock(&RECENT).put(key, Last::NotApplicable);
        return Ok(Last::NotApplicable);
    };
    // Preparing may rehydrate (which writes nothing); the call starts from what is there now.
    let before_call = trial.sys.fs.after_crash(UnsyncedData::Kept);
    let unchanged = trial.sys.fs.ops() == ops_before_prepare
        && before_call.snapshot() == trial.sys.fs.snapshot();
    let world = trial.world.clone();
    let run = run_of(&world, &prepared);
    let old_len = match run {
        Some(r) => trial
            .sys
            .load(&world.runs[r].impl_session)
            .map(|l| l.event_count())
            .map_err(|e| format!("cannot load the session before the crash: {e}"))?,
        None => 0,
    };
    let known_sessions: Vec<SessionId> = trial.sys.sessions();
    let calls_before = recording.calls().len();
    let ops_before = trial.sys.fs.ops();
    let reply = trial.call(&prepared);
    let points = trial.sys.fs.ops() - ops_before;
    let calls = recording.calls().split_off(calls_before);
    // Uninterrupted, the call is checked as a normal call.
    trial.settle(&prepared, &reply, Mode::Fresh)?;
    trial.check_truth()?;
    // The replay must be the run: the same operations, the same files.
    let replayed = before_call.after_crash(UnsyncedData::Kept);
    for call in &calls {
        call.apply(&replayed);
    }
    let found = if unchanged
        && points <= MAX_CRASH_POINTS
        && replayed.ops() == points
        && replayed.snapshot() == trial.sys.fs.snapshot()
    {
        Last::Recorded(Arc::new(Recorded {
            prepared,
            world,
            before_call,
            calls,
            points,
            run,
            old_len,
            known_sessions,
            checked: Mutex::default(),
            policies: Mutex::default(),
        }))
    } else {
        Last::NotReplayable
    };
    lock(&RECENT).put(key, found.clone());
    Ok(found)
}

/// [`crate::crash::check_crashes`] for one policy: `Ok` with the number of crash points when
/// every crash state of `last` after `prefix` is one of the locked outcomes.
pub fn check_crashes(
    prefix: &[Op],
    last: &Op,
    seed: u64,
    policy: UnsyncedData,
) -> Result<u64, String> {
    let recorded = match recorded(prefix, last, seed)? {
        Last::NotApplicable => return Ok(0),
        Last::NotReplayable => {
            return crate::crash::check_crashes(prefix, last, seed, &[policy]).map(|r| r.points);
        }
        Last::Recorded(r) => r,
    };
    if lock(&recorded.policies).contains(&policy) {
        return Ok(recorded.points);
    }
    let tears_unsynced = matches!(policy, UnsyncedData::Torn { .. });
    for k in 1..=recorded.points {
        // The write at the crash point lands a fraction of its bytes drawn per point.
        let salt = k * 16 + 2;
        let tear = (mix(seed, salt ^ 0x7EA2) % 1001) as u16;
        let crashed = recorded.before_call.after_crash(UnsyncedData::Kept);
        crashed.crash_at_torn(k, tear);
        for call in &recorded.calls {
            if crashed.has_crashed() {
                break;
            }
            call.apply(&crashed);
        }
        if !crashed.has_crashed() {
            return Err(format!(
                "the replay of {last:?} did not reach its crash point {k} of {}",
                recorded.points
            ));
        }
        let recovered = crashed.after_crash(policy);
        let torn_at_crash = policy != UnsyncedData::Lost && tear != 0 && tear != 1000;
        let digest = image_digest(&recovered, [torn_at_crash, tears_unsynced]);
        if lock(&recorded.checked).contains(&digest) {
            continue;
        }
        // The restarted process's ids come from the data it finds, so a check is a function of
        // the data alone.
        let mut seed_bytes = [0u8; 8];
        seed_bytes.copy_from_slice(&digest[..8]);
        let mut trial = Harness {
            sys: InProcess::on(recovered, mix(seed, u64::from_le_bytes(seed_bytes))),
            world: recorded.world.clone(),
            workflow: crate::generated::harness_workflow(),
        };
        after_crash(&mut trial, &recorded, torn_at_crash, policy).map_err(|e| {
            format!(
                "{e}\n  crash at mutating op {k} of {last:?} with {policy:?} (seed {seed}), after {prefix:?}"
            )
        })?;
        lock(&recorded.checked).insert(digest);
    }
    lock(&recorded.policies).push(policy);
    Ok(recorded.points)
}

/// How the restarted process `trial` (on what the crash left) found the data, checked as
/// [`crate::crash`] checks it.
fn after_crash(
    trial: &mut Harness<InProcess>,
    before: &Recorded,
    torn_at_crash: bool,
    policy: UnsyncedData,
) -> Result<(), String> {
    let prepared = &before.prepared;
    let old = check_truth(&trial.sys, &trial.world, None, None);
    if old.is_ok() {
        // Old truth: the same call again is a fresh call.
        let again = trial.call(prepared);
        trial.settle(prepared, &again, Mode::Fresh)?;
        return trial.check_truth();
    }
    let mut after = trial.world.clone();
    let new = advance_model(&mut after, prepared, &trial.sys, &before.known_sessions)
        .and_then(|()| check_truth(&trial.sys, &after, None, None));
    if new.is_ok() {
        trial.world = after;
        if !matches!(prepared.expect, Expect::Start { .. }) {
            // New truth: the same call again is a replay of what was recorded.
            let again = trial.call(prepared);
            trial.settle(prepared, &again, Mode::Repeat)?;
            trial.check_truth()?;
        }
        return Ok(());
    }
    if let Some(session) = fails_fast(trial, before)? {
        // Only a torn write can split close from its pins.
        if !torn_at_crash && !matches!(policy, UnsyncedData::Torn { .. }) {
            return Err(format!(
                "pins missing although no write was torn ({policy:?}): close and pins are one write (D49)"
            ));
        }
        let repaired = trial
            .sys
            .workrail
            .repair_session(session.as_str())
            .map_err(|e| format!("workrail repair refused a torn close+pins write: {e:?}"))?;
        if !repaired.contains("repaired") {
            return Err(format!("repair did not repair: {repaired}"));
        }
        let mut after = trial.world.clone();
        advance_model(&mut after, prepared, &trial.sys, &before.known_sessions)
            .and_then(|()| check_truth(&trial.sys, &after, None, None))
            .map_err(|e| format!("after repair the session is not the new truth: {e}"))?;
        trial.world = after;
        if !matches!(prepared.expect, Expect::Start { .. }) {
            let again = trial.call(prepared);
            trial.settle(prepared, &again, Mode::Repeat)?;
            trial.check_truth()?;
        }
        return Ok(());
    }
    Err(format!(
        "the restarted process found neither the old truth, nor the new truth, nor the locked fail-fast state\n  as old truth: {}\n  as new truth: {}",
        old.err().unwrap_or_default(),
        new.err().unwrap_or_default()
    ))
}

/// The locked fail-fast state (segment attested, pins missing): the session in that state.
fn fails_fast(
    trial: &mut Harness<InProcess>,
    before: &Recorded,
) -> Result<Option<SessionId>, String> {
    let missing_pins = |health: &SessionHealth| match health {
        SessionHealth::CorruptTail(c) | SessionHealth::CorruptHead(c) => {
            c.reason == CorruptionReason::MissingSnapshotPins
        }
        _ => false,
    };
    match before.run {
        Some(r) => {
            let session = trial.world.runs[r].impl_session.clone();
            let Ok(loaded) = trial.sys.load(&session) else {
                return Ok(None);
            };
            if !missing_pins(&loaded.health) || loaded.event_count() != before.old_len {
                return Ok(None);
            }
            // Every other run is untouched.
            check_truth(&trial.sys, &trial.world, Some(r), None)?;
            // Execution calls on the session fail fast, never with partial truth.
            let again = trial.call(&before.prepared);
            match &again {
                Err(e) if e.code == ErrorCode::SessionCorrupt => {}
                other => {
                    return Err(format!(
                        "the session lost its pins, but the interrupted call again returned {other:?}, not SESSION_CORRUPT"
                    ));
                }
            }
            let root = trial
                .world
                .nodes
                .iter()
                .find(|n| n.run == r)
                .map(|n| n.imp.clone());
            if let Some(token) = root.and_then(|n| trial.world.state_tokens.get(&n).cloned()) {
                let rehydrate =
                    trial
                        .sys
                        .continue_workflow(&workrail_spec::tools::ContinueWorkflowInput {
                            state_token: Some(token),
                            ack_token: None,
                            context: None,
                            output: None,
                            preferences: vec![],
                            preset: None,
                        });
                if !matches!(&rehydrate, Err(e) if e.code == ErrorCode::SessionCorrupt) {
                    return Err(format!(
                        "a rehydrate on a session without its pins returned {rehydrate:?}, not SESSION_CORRUPT"
                    ));
                }
            }
            Ok(Some(session))
        }
        None => {
            // An interrupted start: the one new session is the fail-fast one, with no usable
            // prefix; everything else is untouched.
            let fresh: Vec<SessionId> = trial
                .sys
                .sessions()
                .into_iter()
                .filter(|s| !before.known_sessions.contains(s))
                .filter(|s| trial.sys.load(s).is_ok())
                .collect();
            let [session] = fresh.as_slice() else {
                return Ok(None);
            };
            let Ok(loaded) = trial.sys.load(session) else {
                return Ok(None);
            };
            if !missing_pins(&loaded.health) || loaded.event_count() > 0 {
                return Ok(None);
            }
            check_truth(&trial.sys, &trial.world, None, Some(session))?;
            Ok(Some(session.clone()))
        }
    }
}

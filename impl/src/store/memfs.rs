//! An in-memory filesystem that models crashes, for the store's fault-injection tests and the
//! harness.
//!
//! Each file keeps two images: its **live** bytes (what reads see now) and its **synced** bytes
//! (what survives a crash). Directory entries too, for files and directories alike: a create or
//! rename is live at once but durable only after `sync_dir` of the parent, and a crash loses
//! every entry below a directory whose own entry was not durable. A fault plan stops the world
//! at the N-th mutating operation: that operation fails (a write or append may land torn: a
//! prefix of its bytes, of a length the plan chooses) and every later call fails, like a dead
//! process. [`MemFs::after_crash`] then builds the filesystem a restart would find. A failure
//! plan makes one operation fail with an OS error (`ENOSPC`, `EIO`, …) and lets the process go
//! on; a failed write may still have written a prefix, as a real short write does.
//!
//! Locks model `flock`: one exclusive holder or any number of shared holders.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::fs::{LockError, LockGuard, StoreFs};

/// What a crash leaves of bytes that were written but not synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnsyncedData {
    /// Everything unsynced is lost.
    Lost,
    /// The OS happened to flush everything (including a torn final write).
    Kept,
    /// Each file keeps a prefix of its unsynced tail: `keep_per_mille` thousandths of it.
    Torn { keep_per_mille: u16 },
}

#[derive(Debug, Clone, Default)]
struct Inode {
    live: Vec<u8>,
    synced: Vec<u8>,
}

/// Who holds a lock file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Exclusive,
    Shared(u32),
}

/// A planned I/O failure: the operation number, the OS error and, for a write, how much of it
/// lands before the error (thousandths).
#[derive(Debug, Clone, Copy)]
struct PlannedFailure {
    op: u64,
    errno: i32,
    written_per_mille: u16,
}

/// A writer parked in the middle of a write (see [`MemFs::pause_write_to`]).
#[derive(Debug, Default)]
struct Gate {
    written_per_mille: u16,
    released: Mutex<bool>,
    wake: std::sync::Condvar,
    reached: Mutex<bool>,
    arrived: std::sync::Condvar,
}

#[derive(Debug, Default)]
struct State {
    inodes: Vec<Inode>,
    live: BTreeMap<PathBuf, usize>,
    durable: BTreeMap<PathBuf, usize>,
    dirs: BTreeSet<PathBuf>,
    /// Directories whose own entry is durable in their parent.
    durable_dirs: BTreeSet<PathBuf>,
    locks: BTreeMap<PathBuf, Held>,
    ops: u64,
    crash_at: Option<u64>,
    /// How much of the write at the crash point lands (thousandths; default half).
    crash_tear_per_mille: u16,
    fail_at: Option<PlannedFailure>,
    pause_on: Option<(PathBuf, Arc<Gate>)>,
    crashed: bool,
    /// Every path read, in order (to prove what load never opens).
    reads: Vec<PathBuf>,
    /// Paths whose reads fail, with the OS error (a bad sector, a permission).
    unreadable: BTreeMap<PathBuf, i32>,
}

/// The crash-model filesystem. Clones share the same state.
#[derive(Debug, Clone, Default)]
pub struct MemFs {
    state: Arc<Mutex<State>>,
    /// What `create_dir_durable` knows to be durable (shared by clones; a restart after a crash
    /// starts with nothing known, like a new process).
    known_durable: Arc<super::fs::KnownDurable>,
    /// Whether commits overlap their independent writes here as on the real filesystem (off:
    /// one deterministic order of operations, which crash points and fault plans count on).
    overlaps_writes: bool,
}

fn crashed_error() -> io::Error {
    io::Error::other("simulated crash: the process is gone")
}

/// Outcome of counting one mutating operation against the fault plan.
enum Step {
    Proceed,
    /// This operation is the crash point; a write lands this many thousandths of its bytes.
    Crash {
        written_per_mille: u16,
    },
    /// This operation fails with an OS error; the filesystem keeps working. A write lands this
    /// many thousandths of its bytes first (a short write).
    Fail {
        errno: i32,
        written_per_mille: u16,
    },
    /// A write lands part of its bytes, then parks until the gate opens (another thread reads).
    Pause(Arc<Gate>),
}

impl MemFs {
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes every later read of `path` fail with the OS error `errno` (`None`: readable
    /// again).
    pub fn fail_reads_of(&self, path: &Path, errno: Option<i32>) {
        let mut s = self.lock();
        match errno {
            Some(errno) => s.unreadable.insert(path.to_path_buf(), errno),
            None => s.unreadable.remove(path),
        };
    }

    /// This filesystem, with commits overlapping their independent writes as on the real one
    /// (decision D65): fault plans then hit whichever write comes first.
    pub fn overlapping_writes(mut self) -> Self {
        self.overlaps_writes = true;
        self
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock can only come from a test assertion; keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Mutating operations performed so far (writes, appends, syncs, renames, removals).
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// The `op`-th mutating operation from now (1-based) crashes the process; a write at that
    /// point lands half its bytes.
    pub fn crash_at(&self, op: u64) {
        self.crash_at_torn(op, 500);
    }

    /// Like [`MemFs::crash_at`], with a write at the crash point landing `written_per_mille`
    /// thousandths of its bytes (0 = none, 1000 = all).
    pub fn crash_at_torn(&self, op: u64, written_per_mille: u16) {
        let mut s = self.lock();
        s.crash_at = Some(s.ops + op);
        s.crash_tear_per_mille = written_per_mille.min(1000);
    }

    /// The `op`-th mutating operation from now (1-based) fails with an I/O error (EIO), without
    /// crashing; a failed write lands nothing.
    pub fn fail_at(&self, op: u64) {
        self.fail_at_with(op, 5, 0);
    }

    /// The `op`-th mutating operation from now (1-based) fails with OS error `errno` (e.g. 28,
    /// `ENOSPC`), without crashing; a failed write first lands `written_per_mille` thousandths
    /// of its bytes, like a short write.
    pub fn fail_at_with(&self, op: u64, errno: i32, written_per_mille: u16) {
        let mut s = self.lock();
        s.fail_at = Some(PlannedFailure {
            op: s.ops + op,
            errno,
            written_per_mille: written_per_mille.min(1000),
        });
    }

    /// The next write or append to `path` lands `written_per_mille` thousandths of its bytes
    /// and then parks the writing thread until the returned [`Pause`] is released (or
    /// dropped), so another thread can look at the file mid-write, as a reader in another
    /// process can.
    pub fn pause_write_to(&self, path: &Path, written_per_mille: u16) -> Pause {
        let gate = Arc::new(Gate {
            written_per_mille: written_per_mille.min(1000),
            ..Gate::default()
        });
        self.lock().pause_on = Some((path.to_path_buf(), Arc::clone(&gate)));
        Pause { gate }
    }

    pub fn has_crashed(&self) -> bool {
        self.lock().crashed
    }

    /// The filesystem a restart finds after a crash (or a power cut at this instant).
    pub fn after_crash(&self, unsynced: UnsyncedData) -> MemFs {
        let s = self.lock();
        let mut inodes = Vec::with_capacity(s.inodes.len());
        for inode in &s.inodes {
            let survived = if inode.live.starts_with(&inode.synced) {
                let tail = inode.live.len() - inode.synced.len();
                let keep = match unsynced {
                    UnsyncedData::Lost => 0,
                    UnsyncedData::Kept => tail,
                    UnsyncedData::Torn { keep_per_mille } => {
                        tail * usize::from(keep_per_mille.min(1000)) / 1000
                    }
                };
                inode.live[..inode.synced.len() + keep].to_vec()
            } else if unsynced == UnsyncedData::Kept {
                inode.live.clone()
            } else {
                inode.synced.clone()
            };
            inodes.push(Inode {
                live: survived.clone(),
                synced: survived,
            });
        }
        // An entry survives only when every directory above it survived too.
        let reachable = |p: &Path| {
            p.ancestors()
                .skip(1)
                .filter(|a| !a.as_os_str().is_empty())
                .all(|a| s.durable_dirs.contains(a))
        };
        let dirs: BTreeSet<PathBuf> = s
            .durable_dirs
            .iter()
            .filter(|d| reachable(d))
            .cloned()
            .collect();
        let durable: BTreeMap<PathBuf, usize> = s
            .durable
            .iter()
            .filter(|(p, _)| reachable(p))
            .map(|(p, &ino)| (p.clone(), ino))
            .collect();
        let state = State {
            inodes,
            live: durable.clone(),
            durable,
            durable_dirs: dirs.clone(),
            dirs,
            crash_tear_per_mille: 500,
            ..State::default()
        };
        MemFs {
            state: Arc::new(Mutex::new(state)),
            known_durable: Arc::default(),
            overlaps_writes: self.overlaps_writes,
        }
    }

    /// Directories whose entries are all durable (for "this directory survives" checks).
    pub fn durable_dirs(&self) -> Vec<PathBuf> {
        self.lock().durable_dirs.iter().cloned().collect()
    }

    /// Rewrites a file's bytes in both images (for corruption tests).
    pub fn corrupt(&self, path: &Path, edit: impl FnOnce(&mut Vec<u8>)) {
        let mut s = self.lock();
        if let Some(&ino) = s.live.get(path) {
            let inode = &mut s.inodes[ino];
            edit(&mut inode.live);
            inode.synced = inode.live.clone();
        }
    }

    /// Every path read so far, in order.
    pub fn reads(&self) -> Vec<PathBuf> {
        self.lock().reads.clone()
    }

    /// Every live file path, sorted.
    pub fn files(&self) -> Vec<PathBuf> {
        self.lock().live.keys().cloned().collect()
    }

    /// A digest-free fingerprint of all live files (path and bytes), for "nothing changed" checks.
    /// Every directory that exists now.
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.lock().dirs.iter().cloned().collect()
    }

    pub fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let s = self.lock();
        s.live
            .iter()
            .map(|(p, &ino)| (p.clone(), s.inodes[ino].live.clone()))
            .collect()
    }
}

impl State {
    fn step(&mut self) -> io::Result<Step> {
        if self.crashed {
            return Err(crashed_error());
        }
        self.ops += 1;
        if self.crash_at == Some(self.ops) {
            self.crashed = true;
            return Ok(Step::Crash {
                written_per_mille: self.crash_tear_per_mille,
            });
        }
        if let Some(planned) = self.fail_at
            && planned.op == self.ops
        {
            self.fail_at = None;
            return Ok(Step::Fail {
                errno: planned.errno,
                written_per_mille: planned.written_per_mille,
            });
        }
        Ok(Step::Proceed)
    }

    fn check_alive(&self) -> io::Result<()> {
        if self.crashed {
            Err(crashed_error())
        } else {
            Ok(())
        }
    }

    fn parent_exists(&self, path: &Path) -> io::Result<()> {
        match path.parent() {
            Some(p) if p.as_os_str().is_empty() || self.dirs.contains(p) => Ok(()),
            None => Ok(()),
            Some(p) => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("directory {} does not exist", p.display()),
            )),
        }
    }

    fn new_inode(&mut self) -> usize {
        self.inodes.push(Inode::default());
        self.inodes.len() - 1
    }

    /// The inode behind `path`, created when missing.
    fn inode_for_write(&mut self, path: &Path, append: bool) -> io::Result<usize> {
        self.parent_exists(path)?;
        let ino = match self.live.get(path) {
            Some(&ino) => ino,
            None => {
                let ino = self.new_inode();
                self.live.insert(path.to_path_buf(), ino);
                ino
            }
        };
        if !append {
            self.inodes[ino].live.clear();
        }
        Ok(ino)
    }
}

fn prefix(bytes: &[u8], per_mille: u16) -> &[u8] {
    &bytes[..bytes.len() * usize::from(per_mille.min(1000)) / 1000]
}

fn outcome(step: Step) -> io::Result<bool> {
    match step {
        Step::Proceed | Step::Pause(_) => Ok(true),
        Step::Crash { .. } => Err(crashed_error()),
        Step::Fail { errno, .. } => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// Releases a writer parked by [`MemFs::pause_write_to`]; dropping it releases too.
#[derive(Debug)]
pub struct Pause {
    gate: Arc<Gate>,
}

impl Pause {
    /// Waits until the writer is parked mid-write (at most `timeout`); false if it never came.
    pub fn wait_until_parked(&self, timeout: std::time::Duration) -> bool {
        let reached = self.gate.reached.lock().unwrap_or_else(|p| p.into_inner());
        let (reached, _) = self
            .gate
            .arrived
            .wait_timeout_while(reached, timeout, |r| !*r)
            .unwrap_or_else(|p| p.into_inner());
        *reached
    }

    pub fn release(self) {}
}

impl Drop for Pause {
    fn drop(&mut self) {
        *self.gate.released.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.gate.wake.notify_all();
    }
}

impl Gate {
    fn park(&self) {
        *self.reached.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.arrived.notify_all();
        let released = self.released.lock().unwrap_or_else(|p| p.into_inner());
        let _released = self
            .wake
            .wait_while(released, |r| !*r)
            .unwrap_or_else(|p| p.into_inner());
    }
}

#[derive(Debug)]
struct MemLock {
    state: Arc<Mutex<State>>,
    path: PathBuf,
}

impl LockGuard for MemLock {}

impl Drop for MemLock {
    fn drop(&mut self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match s.locks.get(&self.path).copied() {
            Some(Held::Shared(n)) if n > 1 => {
                s.locks.insert(self.path.clone(), Held::Shared(n - 1));
            }
            _ => {
                s.locks.remove(&self.path);
            }
        }
    }
}

impl MemFs {
    /// A write or append: the whole of `bytes`, or what the fault plan lets land.
    fn write_bytes(&self, path: &Path, bytes: &[u8], append: bool) -> io::Result<()> {
        let mut s = self.lock();
        let mut step = s.step()?;
        if matches!(step, Step::Proceed)
            && s.pause_on.as_ref().is_some_and(|(p, _)| p == path)
            && let Some((_, gate)) = s.pause_on.take()
        {
            step = Step::Pause(gate);
        }
        let ino = s.inode_for_write(path, append)?;
        match step {
            Step::Proceed => {
                s.inodes[ino].live.extend_from_slice(bytes);
                Ok(())
            }
            Step::Crash { written_per_mille } => {
                s.inodes[ino]
                    .live
                    .extend_from_slice(prefix(bytes, written_per_mille));
                Err(crashed_error())
            }
            Step::Fail {
                errno,
                written_per_mille,
            } => {
                s.inodes[ino]
                    .live
                    .extend_from_slice(prefix(bytes, written_per_mille));
                Err(io::Error::from_raw_os_error(errno))
            }
            Step::Pause(gate) => {
                let half = prefix(bytes, gate.written_per_mille).len();
                s.inodes[ino].live.extend_from_slice(&bytes[..half]);
                drop(s);
                gate.park();
                let mut s = self.lock();
                s.check_alive()?;
                s.inodes[ino].live.extend_from_slice(&bytes[half..]);
                Ok(())
            }
        }
    }
}

impl StoreFs for MemFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.lock();
        s.check_alive()?;
        for ancestor in dir.ancestors() {
            if !ancestor.as_os_str().is_empty() {
                s.dirs.insert(ancestor.to_path_buf());
            }
        }
        Ok(())
    }

    fn create_dir(&self, dir: &Path) -> io::Result<bool> {
        let mut s = self.lock();
        if s.dirs.contains(dir) {
            s.check_alive()?;
            return Ok(false);
        }
        let step = s.step()?;
        outcome(step)?;
        s.parent_exists(dir)?;
        s.dirs.insert(dir.to_path_buf());
        Ok(true)
    }

    fn write_new(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.write_bytes(path, bytes, false)
    }

    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.write_bytes(path, bytes, true)
    }

    fn set_len(&self, path: &Path, len: u64) -> io::Result<()> {
        let mut s = self.lock();
        let step = s.step()?;
        outcome(step)?;
        let ino = *s
            .live
            .get(path)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        s.inodes[ino].live.resize(len, 0);
        Ok(())
    }

    fn sync_file(&self, path: &Path) -> io::Result<()> {
        let mut s = self.lock();
        let step = s.step()?;
        outcome(step)?;
        let ino = *s
            .live
            .get(path)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))?;
        let inode = &mut s.inodes[ino];
        inode.synced = inode.live.clone();
        Ok(())
    }

    fn overlaps_writes(&self) -> bool {
        self.overlaps_writes
    }

    fn touch(&self, path: &Path) -> io::Result<()> {
        // No clock here: only the file's existence matters to what this model checks.
        let s = self.lock();
        s.check_alive()?;
        match s.live.contains_key(path) {
            true => Ok(()),
            false => Err(io::Error::new(io::ErrorKind::NotFound, "no such file")),
        }
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.lock();
        let step = s.step()?;
        outcome(step)?;
        s.parent_exists(to)?;
        if s.dirs.contains(from) {
            self.known_durable.forget_below(from);
            // A directory moves whole. The model makes the move durable at once (GC's deletion
            // is the only directory rename, and an interrupted one is finished by the next GC).
            let moved = |p: &Path| to.join(p.strip_prefix(from).unwrap_or(p));
            let s = &mut *s;
            for map in [&mut s.live, &mut s.durable] {
                let inside: Vec<PathBuf> = map
                    .keys()
                    .filter(|p| p.starts_with(from))
                    .cloned()
                    .collect();
                for p in inside {
                    if let Some(ino) = map.remove(&p) {
                        map.insert(moved(&p), ino);
                    }
                }
            }
            for set in [&mut s.dirs, &mut s.durable_dirs] {
                let inside: Vec<PathBuf> = set
                    .iter()
                    .filter(|p| p.starts_with(from))
                    .cloned()
                    .collect();
                for p in inside {
                    set.remove(&p);
                    set.insert(moved(&p));
                }
            }
            return Ok(());
        }
        let ino = s
            .live
            .remove(from)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such file"))?;
        s.live.insert(to.to_path_buf(), ino);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.lock();
        let step = s.step()?;
        outcome(step)?;
        // As the OS: the directory is opened to be synced, and a missing one fails `ENOENT`.
        if !dir.as_os_str().is_empty() && !s.dirs.contains(dir) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("directory {} does not exist", dir.display()),
            ));
        }
        let in_dir = |p: &Path| p.parent() == Some(dir);
        let s = &mut *s;
        s.durable.retain(|p, _| !in_dir(p));
        for (p, &ino) in &s.live {
            if in_dir(p) {
                s.durable.insert(p.clone(), ino);
            }
        }
        s.durable_dirs.retain(|p| !in_dir(p));
        for p in &s.dirs {
            if in_dir(p) {
                s.durable_dirs.insert(p.clone());
            }
        }
        Ok(())
    }

    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        let mut s = self.lock();
        s.check_alive()?;
        s.reads.push(path.to_path_buf());
        if let Some(&errno) = s.unreadable.get(path) {
            return Err(io::Error::from_raw_os_error(errno));
        }
        Ok(s.live.get(path).map(|&ino| s.inodes[ino].live.clone()))
    }

    fn len(&self, path: &Path) -> io::Result<Option<u64>> {
        let s = self.lock();
        s.check_alive()?;
        Ok(s.live.get(path).map(|&ino| s.inodes[ino].live.len() as u64))
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let s = self.lock();
        s.check_alive()?;
        let mut names: BTreeSet<String> = BTreeSet::new();
        for p in s.live.keys().chain(s.dirs.iter()) {
            if p.parent() == Some(dir)
                && let Some(name) = p.file_name()
            {
                names.insert(name.to_string_lossy().into_owned());
            }
        }
        Ok(names.into_iter().collect())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut s = self.lock();
        let step = s.step()?;
        outcome(step)?;
        s.live.remove(path);
        Ok(())
    }

    fn create_dir_durable(&self, dir: &Path) -> io::Result<()> {
        super::fs::create_dir_durable_with(self, dir, &self.known_durable)
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.known_durable.forget_below(dir);
        let mut s = self.lock();
        let step = s.step()?;
        outcome(step)?;
        s.live.retain(|p, _| !p.starts_with(dir));
        s.durable.retain(|p, _| !p.starts_with(dir));
        s.dirs.retain(|p| !p.starts_with(dir));
        s.durable_dirs.retain(|p| !p.starts_with(dir));
        Ok(())
    }

    fn write_private(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        // Same protocol as the OS implementation: temp, sync, rename, sync the directory.
        let tmp = path.with_extension("tmp");
        self.write_new(&tmp, bytes)?;
        self.sync_file(&tmp)?;
        self.rename(&tmp, path)?;
        self.sync_dir(path.parent().unwrap_or(Path::new("")))
    }

    fn try_lock(&self, path: &Path) -> Result<Box<dyn LockGuard>, LockError> {
        let mut s = self.lock();
        s.check_alive().map_err(LockError::Io)?;
        if s.locks.contains_key(path) {
            return Err(LockError::Busy);
        }
        // Like the OS implementation, locking creates the (empty) lock file. It holds no truth,
        // so its creation is not a counted operation.
        if !s.live.contains_key(path) {
            s.parent_exists(path).map_err(LockError::Io)?;
            let ino = s.new_inode();
            s.live.insert(path.to_path_buf(), ino);
            s.durable.insert(path.to_path_buf(), ino);
        }
        s.locks.insert(path.to_path_buf(), Held::Exclusive);
        Ok(Box::new(MemLock {
            state: Arc::clone(&self.state),
            path: path.to_path_buf(),
        }))
    }

    fn try_lock_existing(&self, path: &Path) -> Result<Option<Box<dyn LockGuard>>, LockError> {
        let mut s = self.lock();
        s.check_alive().map_err(LockError::Io)?;
        if !s.live.contains_key(path) {
            return Ok(None);
        }
        if s.locks.contains_key(path) {
            return Err(LockError::Busy);
        }
        s.locks.insert(path.to_path_buf(), Held::Exclusive);
        Ok(Some(Box::new(MemLock {
            state: Arc::clone(&self.state),
            path: path.to_path_buf(),
        })))
    }

    fn try_lock_shared(&self, path: &Path) -> Result<Option<Box<dyn LockGuard>>, LockError> {
        let mut s = self.lock();
        s.check_alive().map_err(LockError::Io)?;
        if !s.live.contains_key(path) {
            return Ok(None);
        }
        let held = match s.locks.get(path) {
            None => Held::Shared(1),
            Some(Held::Shared(n)) => Held::Shared(n + 1),
            Some(Held::Exclusive) => return Err(LockError::Busy),
        };
        s.locks.insert(path.to_path_buf(), held);
        Ok(Some(Box::new(MemLock {
            state: Arc::clone(&self.state),
            path: path.to_path_buf(),
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsynced_bytes_and_entries_do_not_survive_a_crash() {
        let fs = MemFs::new();
        fs.create_dir_durable(Path::new("d")).unwrap();
        fs.write_new(Path::new("d/a"), b"hello").unwrap();
        fs.sync_file(Path::new("d/a")).unwrap();
        // The entry is not durable until the directory is synced.
        assert!(fs.after_crash(UnsyncedData::Kept).files().is_empty());
        fs.sync_dir(Path::new("d")).unwrap();
        fs.append(Path::new("d/a"), b" world").unwrap();
        let lost = fs.after_crash(UnsyncedData::Lost);
        assert_eq!(lost.read(Path::new("d/a")).unwrap().unwrap(), b"hello");
        let kept = fs.after_crash(UnsyncedData::Kept);
        assert_eq!(
            kept.read(Path::new("d/a")).unwrap().unwrap(),
            b"hello world"
        );
        let torn = fs.after_crash(UnsyncedData::Torn {
            keep_per_mille: 500,
        });
        assert_eq!(torn.read(Path::new("d/a")).unwrap().unwrap(), b"hello wo");
    }

    #[test]
    fn a_directory_survives_only_once_its_parent_is_synced() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("d/e")).unwrap();
        fs.write_new(Path::new("d/e/a"), b"x").unwrap();
        fs.sync_file(Path::new("d/e/a")).unwrap();
        fs.sync_dir(Path::new("d/e")).unwrap();
        // `d/e/a` is durable in `d/e`, but neither `d` nor `d/e` is durable in its parent.
        let cut = fs.after_crash(UnsyncedData::Kept);
        assert!(cut.files().is_empty());
        assert!(cut.list_dir(Path::new("")).unwrap().is_empty());
        fs.sync_dir(Path::new("")).unwrap();
        fs.sync_dir(Path::new("d")).unwrap();
        let cut = fs.after_crash(UnsyncedData::Lost);
        assert_eq!(cut.read(Path::new("d/e/a")).unwrap().unwrap(), b"x");
        // `create_dir_durable` syncs every parent it has not seen made durable.
        let fresh = MemFs::new();
        fresh.create_dir_durable(Path::new("p/q/r")).unwrap();
        let cut = fresh.after_crash(UnsyncedData::Lost);
        assert_eq!(
            cut.list_dir(Path::new("p/q")).unwrap(),
            vec!["r".to_owned()]
        );
    }

    /// As the real filesystem's `File::open` of the directory: syncing a missing directory
    /// fails `NotFound` (decision D200 relies on it being told apart).
    #[test]
    fn syncing_a_missing_directory_fails_not_found() {
        let fs = MemFs::new();
        let err = fs.sync_dir(Path::new("sessions")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        fs.create_dir_all(Path::new("sessions")).unwrap();
        fs.sync_dir(Path::new("sessions")).unwrap();
        fs.sync_dir(Path::new("")).unwrap();
        fs.remove_dir_all(Path::new("sessions")).unwrap();
        let err = fs.sync_dir(Path::new("sessions")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn an_injected_failure_can_land_a_short_write_and_the_process_goes_on() {
        let fs = MemFs::new();
        fs.create_dir_durable(Path::new("d")).unwrap();
        fs.fail_at_with(1, 28, 500);
        let err = fs.append(Path::new("d/a"), b"12345678").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(28));
        assert_eq!(fs.read(Path::new("d/a")).unwrap().unwrap(), b"1234");
        fs.set_len(Path::new("d/a"), 0).unwrap();
        fs.append(Path::new("d/a"), b"ok").unwrap();
        assert_eq!(fs.read(Path::new("d/a")).unwrap().unwrap(), b"ok");
    }

    #[test]
    fn shared_locks_exclude_only_the_exclusive_one() {
        let fs = MemFs::new();
        assert!(fs.try_lock_shared(Path::new(".lock")).unwrap().is_none());
        let exclusive = fs.try_lock(Path::new(".lock")).unwrap();
        assert!(matches!(
            fs.try_lock_shared(Path::new(".lock")),
            Err(LockError::Busy)
        ));
        drop(exclusive);
        let a = fs.try_lock_shared(Path::new(".lock")).unwrap().unwrap();
        let b = fs.try_lock_shared(Path::new(".lock")).unwrap().unwrap();
        assert!(matches!(
            fs.try_lock(Path::new(".lock")),
            Err(LockError::Busy)
        ));
        drop(a);
        assert!(matches!(
            fs.try_lock(Path::new(".lock")),
            Err(LockError::Busy)
        ));
        drop(b);
        assert!(fs.try_lock(Path::new(".lock")).is_ok());
    }

    #[test]
    fn crash_point_stops_the_world_and_tears_the_write() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("d")).unwrap();
        fs.crash_at(2);
        fs.write_new(Path::new("d/a"), b"1234").unwrap();
        assert!(fs.append(Path::new("d/a"), b"5678").is_err());
        assert!(fs.has_crashed());
        assert!(fs.read(Path::new("d/a")).is_err());
        assert!(fs.sync_file(Path::new("d/a")).is_err());
    }

    #[test]
    fn locks_are_exclusive_until_dropped() {
        let fs = MemFs::new();
        let guard = fs.try_lock(Path::new(".lock")).unwrap();
        assert!(matches!(
            fs.try_lock(Path::new(".lock")),
            Err(LockError::Busy)
        ));
        drop(guard);
        assert!(fs.try_lock(Path::new(".lock")).is_ok());
    }
}

//! An in-memory filesystem that models crashes, for the store's fault-injection tests and the
//! harness.
//!
//! Each file keeps two images: its **live** bytes (what reads see now) and its **synced** bytes
//! (what survives a crash). Directory entries too: a create or rename is live at once but durable
//! only after `sync_dir` of the parent. A fault plan stops the world at the N-th mutating
//! operation: that operation fails (a write or append may land torn: only a prefix of its bytes)
//! and every later call fails, like a dead process. [`MemFs::after_crash`] then builds the
//! filesystem a restart would find. Directories themselves are treated as durable once created
//! (the store still syncs parents; modelling directory creation adds no crash state the
//! protocol depends on).

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

#[derive(Debug, Default)]
struct State {
    inodes: Vec<Inode>,
    live: BTreeMap<PathBuf, usize>,
    durable: BTreeMap<PathBuf, usize>,
    dirs: BTreeSet<PathBuf>,
    locks: BTreeSet<PathBuf>,
    ops: u64,
    crash_at: Option<u64>,
    fail_at: Option<u64>,
    crashed: bool,
    /// Every path read, in order (to prove what load never opens).
    reads: Vec<PathBuf>,
}

/// The crash-model filesystem. Clones share the same state.
#[derive(Debug, Clone, Default)]
pub struct MemFs {
    state: Arc<Mutex<State>>,
}

fn crashed_error() -> io::Error {
    io::Error::other("simulated crash: the process is gone")
}

/// Outcome of counting one mutating operation against the fault plan.
enum Step {
    Proceed,
    /// This operation is the crash point.
    Crash,
    /// This operation fails with an I/O error; the filesystem keeps working.
    Fail,
}

impl MemFs {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock can only come from a test assertion; keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Mutating operations performed so far (writes, appends, syncs, renames, removals).
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// The `op`-th mutating operation from now (1-based) crashes the process.
    pub fn crash_at(&self, op: u64) {
        let mut s = self.lock();
        s.crash_at = Some(s.ops + op);
    }

    /// The `op`-th mutating operation from now (1-based) fails with an I/O error (e.g. a failed
    /// fsync), without crashing.
    pub fn fail_at(&self, op: u64) {
        let mut s = self.lock();
        s.fail_at = Some(s.ops + op);
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
        let state = State {
            inodes,
            live: s.durable.clone(),
            durable: s.durable.clone(),
            dirs: s.dirs.clone(),
            ..State::default()
        };
        MemFs {
            state: Arc::new(Mutex::new(state)),
        }
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
            return Ok(Step::Crash);
        }
        if self.fail_at == Some(self.ops) {
            self.fail_at = None;
            return Ok(Step::Fail);
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

    /// Writes `bytes` (or, when crashing, a torn half of them) to a file's live image.
    fn write_bytes(
        &mut self,
        path: &Path,
        bytes: &[u8],
        append: bool,
        step: Step,
    ) -> io::Result<()> {
        self.parent_exists(path)?;
        let ino = match self.live.get(path) {
            Some(&ino) => ino,
            None => {
                let ino = self.new_inode();
                self.live.insert(path.to_path_buf(), ino);
                ino
            }
        };
        let inode = &mut self.inodes[ino];
        if !append {
            inode.live.clear();
        }
        match step {
            Step::Proceed => {
                inode.live.extend_from_slice(bytes);
                Ok(())
            }
            Step::Crash => {
                inode.live.extend_from_slice(&bytes[..bytes.len() / 2]);
                Err(crashed_error())
            }
            Step::Fail => Err(io::Error::other("simulated write failure")),
        }
    }
}

fn outcome(step: Step) -> io::Result<bool> {
    match step {
        Step::Proceed => Ok(true),
        Step::Crash => Err(crashed_error()),
        Step::Fail => Err(io::Error::other("simulated I/O failure")),
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
        s.locks.remove(&self.path);
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

    fn write_new(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut s = self.lock();
        let step = s.step()?;
        s.write_bytes(path, bytes, false, step)
    }

    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut s = self.lock();
        let step = s.step()?;
        s.write_bytes(path, bytes, true, step)
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

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut s = self.lock();
        let step = s.step()?;
        outcome(step)?;
        s.parent_exists(to)?;
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
        let in_dir = |p: &Path| p.parent() == Some(dir);
        let s = &mut *s;
        s.durable.retain(|p, _| !in_dir(p));
        for (p, &ino) in &s.live {
            if in_dir(p) {
                s.durable.insert(p.clone(), ino);
            }
        }
        Ok(())
    }

    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        let mut s = self.lock();
        s.check_alive()?;
        s.reads.push(path.to_path_buf());
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

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        let mut s = self.lock();
        let step = s.step()?;
        outcome(step)?;
        s.live.retain(|p, _| !p.starts_with(dir));
        s.durable.retain(|p, _| !p.starts_with(dir));
        s.dirs.retain(|p| !p.starts_with(dir));
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
        if !s.locks.insert(path.to_path_buf()) {
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
        Ok(Box::new(MemLock {
            state: Arc::clone(&self.state),
            path: path.to_path_buf(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsynced_bytes_and_entries_do_not_survive_a_crash() {
        let fs = MemFs::new();
        fs.create_dir_all(Path::new("d")).unwrap();
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

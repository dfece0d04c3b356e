//! The filesystem port of the store.
//!
//! Every byte the store persists goes through [`StoreFs`], so tests can swap in the crash-model
//! filesystem ([`super::memfs::MemFs`]) and stop the world after any write, fsync, rename or
//! directory fsync. Paths are relative to the data directory root; implementations never see an
//! absolute path from stored records.
//!
//! Durability assumptions (see `impl/docs/store.md`): `sync_file` makes a file's bytes durable;
//! `rename` is atomic; a new directory entry (create or rename) is durable only after
//! `sync_dir` of its parent directory.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// An exclusive lock held on a lock file; released when dropped.
pub trait LockGuard: Send + fmt::Debug {}

/// Why a lock could not be taken.
#[derive(Debug)]
pub enum LockError {
    /// Another holder has it (another process, or another handle in this one).
    Busy,
    Io(io::Error),
}

/// The store's view of a filesystem. All paths are relative to the data directory.
pub trait StoreFs: Send + Sync + fmt::Debug {
    /// Creates a directory and its parents (no-op when it exists).
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Creates or truncates `path` and writes `bytes` (not yet durable).
    fn write_new(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// Appends `bytes` to `path`, creating it when missing (not yet durable).
    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// Makes the file's contents durable.
    fn sync_file(&self, path: &Path) -> io::Result<()>;
    /// Atomically renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the directory's entries (creates, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Reads a whole file; `Ok(None)` when it does not exist.
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>>;
    /// The file's length; `Ok(None)` when it does not exist.
    fn len(&self, path: &Path) -> io::Result<Option<u64>>;
    /// Names of the entries of a directory (empty when it does not exist), sorted.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Removes a file (no-op when missing).
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Removes a directory tree (no-op when missing).
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Writes a file readable and writable by the owner only (mode 0600 on Unix), durably.
    fn write_private(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// Takes an exclusive lock on `path` (creating the file), without waiting.
    fn try_lock(&self, path: &Path) -> Result<Box<dyn LockGuard>, LockError>;
}

/// The real filesystem under a root directory.
#[derive(Debug, Clone)]
pub struct OsFs {
    root: PathBuf,
}

impl OsFs {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn abs(&self, rel: &Path) -> PathBuf {
        self.root.join(rel)
    }
}

#[derive(Debug)]
struct OsLock {
    // The OS lock lives as long as this handle.
    _file: File,
}

impl LockGuard for OsLock {}

fn not_found_as_none<T>(result: io::Result<T>) -> io::Result<Option<T>> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

impl StoreFs for OsFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(self.abs(dir))
    }

    fn write_new(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut file = File::create(self.abs(path))?;
        file.write_all(bytes)
    }

    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.abs(path))?;
        file.write_all(bytes)
    }

    fn sync_file(&self, path: &Path) -> io::Result<()> {
        File::open(self.abs(path))?.sync_all()
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(self.abs(from), self.abs(to))
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(self.abs(dir))?.sync_all()
    }

    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        not_found_as_none(fs::read(self.abs(path)))
    }

    fn len(&self, path: &Path) -> io::Result<Option<u64>> {
        not_found_as_none(fs::metadata(self.abs(path)).map(|m| m.len()))
    }

    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let Some(entries) = not_found_as_none(fs::read_dir(self.abs(dir)))? else {
            return Ok(Vec::new());
        };
        let mut names = Vec::new();
        for entry in entries {
            names.push(entry?.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        not_found_as_none(fs::remove_file(self.abs(path))).map(drop)
    }

    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        not_found_as_none(fs::remove_dir_all(self.abs(dir))).map(drop)
    }

    fn write_private(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let abs = self.abs(path);
        let tmp = abs.with_extension("tmp");
        let mut options = OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let mut file = options.open(&tmp)?;
        #[cfg(unix)]
        {
            // An existing file keeps its old mode through `open`; force 0600.
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(fs::Permissions::from_mode(0o600))?;
        }
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, &abs)?;
        if let Some(parent) = abs.parent() {
            File::open(parent)?.sync_all()?;
        }
        Ok(())
    }

    fn try_lock(&self, path: &Path) -> Result<Box<dyn LockGuard>, LockError> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.abs(path))
            .map_err(LockError::Io)?;
        match file.try_lock() {
            Ok(()) => Ok(Box::new(OsLock { _file: file })),
            Err(fs::TryLockError::WouldBlock) => Err(LockError::Busy),
            Err(fs::TryLockError::Error(e)) => Err(LockError::Io(e)),
        }
    }
}

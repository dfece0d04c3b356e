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

use super::owner::{Part, Refusal};

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
///
/// Everything the store creates is private to the owner (directories 0700, files 0600 on Unix),
/// whatever the process umask.
pub trait StoreFs: Send + Sync + fmt::Debug {
    /// Creates a directory and its parents (no-op when it exists). Not durable by itself: see
    /// [`StoreFs::create_dir_durable`].
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Creates one directory whose parent exists; `Ok(false)` when it already existed. The new
    /// entry is durable only after `sync_dir` of the parent.
    fn create_dir(&self, dir: &Path) -> io::Result<bool>;
    /// Creates or truncates `path` and writes `bytes` (not yet durable).
    fn write_new(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// Appends `bytes` to `path` with one write, creating it when missing (not yet durable).
    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// Cuts `path` to `len` bytes (not yet durable: `sync_file` makes it so).
    fn set_len(&self, path: &Path, len: u64) -> io::Result<()>;
    /// Makes the file's contents durable.
    fn sync_file(&self, path: &Path) -> io::Result<()>;
    /// [`StoreFs::write_new`] then [`StoreFs::sync_file`]: the same two steps (and crash
    /// points), through one open file where the filesystem allows it.
    fn write_new_synced(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.write_new(path, bytes)?;
        self.sync_file(path)
    }
    /// [`StoreFs::append`] then [`StoreFs::sync_file`], as [`StoreFs::write_new_synced`].
    fn append_synced(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        self.append(path, bytes)?;
        self.sync_file(path)
    }
    /// Sets the file's modification time to now (GC's grace period protects a CAS object a
    /// writer is about to reference again).
    fn touch(&self, path: &Path) -> io::Result<()>;
    /// Whether a commit may run its independent durable writes (the snapshot object and the
    /// event segment) on two threads at once (decision D65). The real filesystem does; the crash
    /// model keeps one order of operations, so a crash point names the same operation every run.
    fn overlaps_writes(&self) -> bool {
        false
    }
    /// What identifies this version of `path` without reading it, when the filesystem can vouch
    /// for one; `None` (the default, and for a missing file) means: read it to know.
    fn stamp(&self, _path: &Path) -> Option<FileStamp> {
        None
    }
    /// Atomically renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the directory's entries (creates, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Reads a whole file; `Ok(None)` when it does not exist.
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>>;
    /// Reads a file from byte `offset` to its end (nothing when it is not longer); `Ok(None)`
    /// when it does not exist. A load past a view held in memory reads only the manifest's
    /// end this way (D219).
    fn read_from(&self, path: &Path, offset: u64) -> io::Result<Option<Vec<u8>>> {
        Ok(self.read(path)?.map(|mut bytes| {
            bytes.drain(
                ..bytes
                    .len()
                    .min(usize::try_from(offset).unwrap_or(usize::MAX)),
            );
            bytes
        }))
    }
    /// Reads `len` bytes of a file from byte `offset` (fewer when it is shorter); `Ok(None)` when
    /// it does not exist. A loaded session reads its earlier manifest records again this way
    /// (D235).
    fn read_range(&self, path: &Path, offset: u64, len: u64) -> io::Result<Option<Vec<u8>>> {
        Ok(self.read_from(path, offset)?.map(|mut bytes| {
            bytes.truncate(usize::try_from(len).unwrap_or(usize::MAX));
            bytes
        }))
    }
    /// The file's length; `Ok(None)` when it does not exist.
    fn len(&self, path: &Path) -> io::Result<Option<u64>>;
    /// [`len`](Self::len) of each of `files`, paths relative to `dir`, in order: what
    /// `resume_session` asks of every session's manifest at once, so a filesystem may look `dir`
    /// up once rather than once per file.
    fn lens_in(&self, dir: &Path, files: &[String]) -> Vec<io::Result<Option<u64>>> {
        files.iter().map(|f| self.len(&dir.join(f))).collect()
    }
    /// Names of the entries of a directory (empty when it does not exist), sorted.
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    /// Removes a file (no-op when missing).
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// Removes a directory tree (no-op when missing).
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Writes a file readable and writable by the owner only (mode 0600 on Unix), durably.
    fn write_private(&self, path: &Path, bytes: &[u8]) -> io::Result<()>;
    /// Why `path`, which holds a secret (the signing key or its directory), must not be used:
    /// another user owns it, it is a symbolic link, or group or others have a permission bit on
    /// it (decision D136). `Ok(None)` when it passes or does not exist, and on a filesystem
    /// without owners (the crash model).
    fn refuse_unless_private(&self, _path: &Path, _part: Part) -> io::Result<Option<Refusal>> {
        Ok(None)
    }
    /// Takes an exclusive lock on `path` (creating the file), without waiting.
    ///
    /// A lock is only held on the file `path` names when the call returns: one unlinked or
    /// replaced (renamed away) while the lock was being taken locks nothing anyone else will
    /// open, so it answers [`LockError::Busy`] and the caller's next try opens what the path
    /// names now (decision D130: GC deletes a session by renaming its directory under its lock).
    fn try_lock(&self, path: &Path) -> Result<Box<dyn LockGuard>, LockError>;
    /// [`StoreFs::try_lock`] on an existing lock file only: `Ok(None)` when `path` does not exist
    /// (never creating it, nor anything else), as a writer of a session it expects to exist asks.
    fn try_lock_existing(&self, path: &Path) -> Result<Option<Box<dyn LockGuard>>, LockError>;
    /// Takes a shared lock on an existing lock file, without waiting; `Ok(None)` when the file
    /// does not exist (no writer ever locked it, so there is nothing to wait for).
    fn try_lock_shared(&self, path: &Path) -> Result<Option<Box<dyn LockGuard>>, LockError>;
    /// A shared lock on `path`, creating the lock file when it does not exist yet (by taking and
    /// releasing the exclusive lock once), without waiting.
    fn try_lock_shared_creating(&self, path: &Path) -> Result<Box<dyn LockGuard>, LockError> {
        if let Some(shared) = self.try_lock_shared(path)? {
            return Ok(shared);
        }
        drop(self.try_lock(path)?);
        self.try_lock_shared(path)?.ok_or(LockError::Busy)
    }

    /// Creates `dir` and its missing parents and makes every entry on the way durable: the
    /// parent of each directory is fsynced unless this filesystem already knows that entry to
    /// be durable. Knowing is what keeps it cheap, and it is not the same as the directory
    /// existing: an earlier attempt (or another process) may have created it and failed or died
    /// before its parent fsync.
    fn create_dir_durable(&self, dir: &Path) -> io::Result<()> {
        create_dir_durable_with(self, dir, &KnownDurable::default())
    }
}

/// One version of a file as its metadata tells it: device, inode, length and the modification
/// and status-change times in nanoseconds. A file replaced by a rename gets another inode; one
/// changed in place, another time, unless within one timestamp tick: [`OsFs::stamp`] therefore
/// vouches only for files not changed in the last [`STAMP_SETTLE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    device: u64,
    inode: u64,
    len: u64,
    modified_ns: i128,
    changed_ns: i128,
}

/// How long ago a file must have changed for its stamp to vouch for it (coarse timestamps:
/// two writes within one tick can leave the same times).
pub const STAMP_SETTLE: std::time::Duration = std::time::Duration::from_secs(3);

/// Directory entries this process has made (or seen made) durable, so `create_dir_durable` syncs
/// each parent once per process instead of on every call.
#[derive(Debug, Default)]
pub struct KnownDurable(std::sync::Mutex<std::collections::HashSet<PathBuf>>);

impl KnownDurable {
    fn contains(&self, dir: &Path) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(dir)
    }

    fn insert(&self, dir: &Path) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(dir.to_path_buf());
    }

    /// Forgets `dir` and everything below it (after a removal).
    pub fn forget_below(&self, dir: &Path) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|d| !d.starts_with(dir));
    }
}

/// The body of [`StoreFs::create_dir_durable`] over a filesystem's own [`KnownDurable`].
pub fn create_dir_durable_with<F: StoreFs + ?Sized>(
    fs: &F,
    dir: &Path,
    known: &KnownDurable,
) -> io::Result<()> {
    let mut chain: Vec<&Path> = dir
        .ancestors()
        .filter(|a| !a.as_os_str().is_empty())
        .collect();
    chain.reverse();
    for component in chain {
        if known.contains(component) {
            continue;
        }
        fs.create_dir(component)?;
        if super::planted::is_planted(super::planted::PlantedBug::SkipDirectorySync) {
            continue;
        }
        fs.sync_dir(component.parent().unwrap_or(Path::new("")))?;
        known.insert(component);
    }
    Ok(())
}

/// Creates the data directory root private to its owner (0700 on Unix, whatever the umask),
/// tightens an existing root to 0700, and refuses a data directory another user could have
/// written (decision D136, [`super::owner::check_data_dir`]): a root owned by someone else, or
/// an entry in it that is someone else's or writable by others. Everything below a root that
/// passes is then unreachable for other local users, including the session lock files.
pub fn create_private_root(root: &Path) -> Result<(), super::owner::DataDirError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(root)?;
    super::owner::check_data_dir(root, true)
}

/// The real filesystem under a root directory.
#[derive(Debug, Clone)]
pub struct OsFs {
    root: PathBuf,
    known_durable: std::sync::Arc<KnownDurable>,
}

impl OsFs {
    /// Takes the exclusive lock on `file`, opened from `path`, and keeps it only while `path`
    /// still names that file (same device and inode): a file unlinked or renamed away between
    /// the open and the lock locks nothing another process will open (decision D130).
    fn lock_linked(&self, path: &Path, file: File) -> Result<Box<dyn LockGuard>, LockError> {
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => return Err(LockError::Busy),
            Err(fs::TryLockError::Error(e)) => return Err(LockError::Io(e)),
        }
        if !self.still_linked(path, &file).map_err(LockError::Io)? {
            return Err(LockError::Busy);
        }
        Ok(Box::new(OsLock { _file: file }))
    }

    #[cfg(unix)]
    fn still_linked(&self, path: &Path, file: &File) -> io::Result<bool> {
        use std::os::unix::fs::MetadataExt;
        let held = file.metadata()?;
        Ok(match fs::metadata(self.abs(path)) {
            Ok(named) => named.dev() == held.dev() && named.ino() == held.ino(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(e),
        })
    }

    #[cfg(not(unix))]
    fn still_linked(&self, path: &Path, _file: &File) -> io::Result<bool> {
        Ok(self.abs(path).exists())
    }
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            known_durable: std::sync::Arc::default(),
        }
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

/// Removes the temp file of a write that failed with `why`, best effort: the write's error is
/// what the caller reports; a temp file left behind is garbage GC sweeps (D63), never read.
fn remove_temp_after_failure(tmp: &Path, why: &io::Error) {
    match fs::remove_file(tmp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => tracing::debug!(
            temp = %tmp.display(),
            write_error = %why,
            error = %e,
            "could not remove the temp file of a failed write; GC sweeps it"
        ),
    }
}

/// Open options for a private (0600) file; the umask can only remove bits, so the mode holds.
fn private_file() -> OpenOptions {
    let mut options = OpenOptions::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options
}

fn private_dir_builder(recursive: bool) -> fs::DirBuilder {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(recursive);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
}

impl StoreFs for OsFs {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        private_dir_builder(true).create(self.abs(dir))
    }

    fn create_dir(&self, dir: &Path) -> io::Result<bool> {
        match private_dir_builder(false).create(self.abs(dir)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn write_new(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut file = private_file()
            .write(true)
            .create(true)
            .truncate(true)
            .open(self.abs(path))?;
        file.write_all(bytes)
    }

    fn append(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut file = private_file()
            .create(true)
            .append(true)
            .open(self.abs(path))?;
        file.write_all(bytes)
    }

    fn set_len(&self, path: &Path, len: u64) -> io::Result<()> {
        OpenOptions::new()
            .write(true)
            .open(self.abs(path))?
            .set_len(len)
    }

    fn sync_file(&self, path: &Path) -> io::Result<()> {
        File::open(self.abs(path))?.sync_all()
    }

    fn write_new_synced(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut file = private_file()
            .write(true)
            .create(true)
            .truncate(true)
            .open(self.abs(path))?;
        file.write_all(bytes)?;
        file.sync_all()
    }

    fn append_synced(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let mut file = private_file()
            .create(true)
            .append(true)
            .open(self.abs(path))?;
        file.write_all(bytes)?;
        file.sync_all()
    }

    fn touch(&self, path: &Path) -> io::Result<()> {
        OpenOptions::new()
            .write(true)
            .open(self.abs(path))?
            .set_modified(std::time::SystemTime::now())
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(self.abs(from), self.abs(to))
    }

    fn overlaps_writes(&self) -> bool {
        true
    }

    #[cfg(unix)]
    fn stamp(&self, path: &Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let meta = fs::metadata(self.abs(path)).ok()?;
        let ns = |secs: i64, nanos: i64| i128::from(secs) * 1_000_000_000 + i128::from(nanos);
        let changed_ns = ns(meta.ctime(), meta.ctime_nsec());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_nanos();
        let settled = i128::try_from(now).ok()? - changed_ns >= STAMP_SETTLE.as_nanos() as i128;
        settled.then_some(FileStamp {
            device: meta.dev(),
            inode: meta.ino(),
            len: meta.size(),
            modified_ns: ns(meta.mtime(), meta.mtime_nsec()),
            changed_ns,
        })
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(self.abs(dir))?.sync_all()
    }

    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        not_found_as_none(fs::read(self.abs(path)))
    }

    fn read_from(&self, path: &Path, offset: u64) -> io::Result<Option<Vec<u8>>> {
        use std::io::{Read, Seek, SeekFrom};
        let Some(mut file) = not_found_as_none(fs::File::open(self.abs(path)))? else {
            return Ok(None);
        };
        file.seek(SeekFrom::Start(offset))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    }

    fn read_range(&self, path: &Path, offset: u64, len: u64) -> io::Result<Option<Vec<u8>>> {
        use std::io::{Read, Seek, SeekFrom};
        let Some(mut file) = not_found_as_none(fs::File::open(self.abs(path)))? else {
            return Ok(None);
        };
        file.seek(SeekFrom::Start(offset))?;
        let mut bytes = Vec::with_capacity(usize::try_from(len).unwrap_or(0).min(1 << 20));
        file.take(len).read_to_end(&mut bytes)?;
        Ok(Some(bytes))
    }

    fn len(&self, path: &Path) -> io::Result<Option<u64>> {
        not_found_as_none(fs::metadata(self.abs(path)).map(|m| m.len()))
    }

    /// Each `stat` relative to `dir` opened once: at 10,000 sessions the path walk from the
    /// root was a third of the `stat`s' time.
    #[cfg(unix)]
    fn lens_in(&self, dir: &Path, files: &[String]) -> Vec<io::Result<Option<u64>>> {
        use rustix::fs::{AtFlags, Mode, OFlags};
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dir = match rustix::fs::open(self.abs(dir), flags, Mode::empty()) {
            Ok(dir) => dir,
            Err(rustix::io::Errno::NOENT) => return files.iter().map(|_| Ok(None)).collect(),
            Err(e) => return files.iter().map(|_| Err(e.into())).collect(),
        };
        files
            .iter()
            .map(
                |f| match rustix::fs::statat(&dir, f.as_str(), AtFlags::empty()) {
                    Ok(stat) => Ok(Some(u64::try_from(stat.st_size).unwrap_or(0))),
                    Err(rustix::io::Errno::NOENT) => Ok(None),
                    Err(e) => Err(e.into()),
                },
            )
            .collect()
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
        self.known_durable.forget_below(dir);
        not_found_as_none(fs::remove_dir_all(self.abs(dir))).map(drop)
    }

    fn create_dir_durable(&self, dir: &Path) -> io::Result<()> {
        create_dir_durable_with(self, dir, &self.known_durable)
    }

    fn write_private(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let abs = self.abs(path);
        let tmp = abs.with_file_name(crate::store::layout::temp_file_name(
            &abs.file_name().unwrap_or_default().to_string_lossy(),
        ));
        let mut file = private_file()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        let written = file
            .write_all(bytes)
            .and_then(|()| file.sync_all())
            .and_then(|()| fs::rename(&tmp, &abs));
        if let Err(e) = &written {
            remove_temp_after_failure(&tmp, e);
        }
        written?;
        if let Some(parent) = abs.parent() {
            File::open(parent)?.sync_all()?;
        }
        Ok(())
    }

    #[cfg(unix)]
    fn refuse_unless_private(&self, path: &Path, part: Part) -> io::Result<Option<Refusal>> {
        let abs = self.abs(path);
        let meta = match fs::symlink_metadata(&abs) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let found = super::owner::Ownership::of(&meta);
        Ok(
            super::owner::judge_secret(found, super::owner::effective_uid()).map(|problem| {
                Refusal {
                    data_dir: self.root.clone(),
                    path: abs,
                    part,
                    problem,
                }
            }),
        )
    }

    fn try_lock(&self, path: &Path) -> Result<Box<dyn LockGuard>, LockError> {
        let file = private_file()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.abs(path))
            .map_err(LockError::Io)?;
        self.lock_linked(path, file)
    }

    fn try_lock_existing(&self, path: &Path) -> Result<Option<Box<dyn LockGuard>>, LockError> {
        let file = match OpenOptions::new().write(true).open(self.abs(path)) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(LockError::Io(e)),
        };
        self.lock_linked(path, file).map(Some)
    }

    fn try_lock_shared(&self, path: &Path) -> Result<Option<Box<dyn LockGuard>>, LockError> {
        let file = match File::open(self.abs(path)) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(LockError::Io(e)),
        };
        match file.try_lock_shared() {
            Ok(()) => Ok(Some(Box::new(OsLock { _file: file }))),
            Err(fs::TryLockError::WouldBlock) => Err(LockError::Busy),
            Err(fs::TryLockError::Error(e)) => Err(LockError::Io(e)),
        }
    }
}

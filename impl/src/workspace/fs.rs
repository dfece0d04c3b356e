//! The operating system side of workspace discovery: reads git's files under a directory.

use std::io;
use std::path::{Path, PathBuf};

use super::{EntryKind, GitIdentity, Workspace, WorkspaceFs, discover};

/// Reads the real filesystem.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsWorkspaceFs;

impl WorkspaceFs for OsWorkspaceFs {
    fn kind(&self, path: &Path) -> io::Result<EntryKind> {
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => Ok(EntryKind::Dir),
            Ok(_) => Ok(EntryKind::File),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(EntryKind::Missing),
            Err(e) => Err(e),
        }
    }

    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>> {
        match std::fs::read(path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The workspace rooted at a fixed directory.
#[derive(Debug, Clone)]
pub struct DirWorkspace {
    dir: PathBuf,
}

impl DirWorkspace {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }
}

impl Workspace for DirWorkspace {
    fn git_identity(&self) -> Option<GitIdentity> {
        // Canonical, so the same repository hashes the same however it was reached.
        let dir = std::fs::canonicalize(&self.dir).ok()?;
        let identity = discover(&OsWorkspaceFs, &dir);
        tracing::debug!(dir = %dir.display(), found = identity.is_some(), "git workspace discovery");
        identity
    }
}

/// The process's working directory, looked up at each call (production).
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessWorkspace;

impl Workspace for ProcessWorkspace {
    fn git_identity(&self) -> Option<GitIdentity> {
        DirWorkspace::new(std::env::current_dir().ok()?).git_identity()
    }
}

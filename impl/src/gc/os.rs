//! The retention clock on the real filesystem and the system clock (the adapter behind
//! [`RetentionClock`]; GC's rules never touch either directly).

use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::RetentionClock;

/// The system clock and the real filesystem's modification times under a data directory.
#[derive(Debug, Clone)]
pub struct OsRetentionClock {
    root: PathBuf,
}

impl OsRetentionClock {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }
}

impl RetentionClock for OsRetentionClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn modified(&self, path: &Path) -> io::Result<Option<SystemTime>> {
        match std::fs::metadata(self.root.join(path)) {
            Ok(meta) => meta.modified().map(Some),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

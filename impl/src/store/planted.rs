//! TEST-ONLY planted bugs (feature `test-mutations`): each switch breaks one durability rule so
//! the harness can prove it notices. Off unless a test turns it on; without the feature every
//! switch is a constant `false` and compiles away.

/// A planted bug: one durability rule the store breaks while the switch is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlantedBug {
    /// New directories on the commit path are created without fsyncing their parent.
    SkipDirectorySync,
    /// Every writer uses the same temp file name for the same object.
    SharedTempName,
    /// A reader that sees damage while another process writes reports it without waiting for
    /// the shared lock to confirm it.
    UnlockedRead,
    /// A cached session view is served without checking the manifest length, so another
    /// process's commits are not seen (a stale cache entry).
    StaleSessionCache,
}

#[cfg(feature = "test-mutations")]
mod switches {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::PlantedBug;

    // Process-wide: the planted bugs act across threads (several stores on one data directory).
    static SKIP_DIRECTORY_SYNC: AtomicBool = AtomicBool::new(false);
    static SHARED_TEMP_NAME: AtomicBool = AtomicBool::new(false);
    static UNLOCKED_READ: AtomicBool = AtomicBool::new(false);
    static STALE_SESSION_CACHE: AtomicBool = AtomicBool::new(false);

    fn switch(bug: PlantedBug) -> &'static AtomicBool {
        match bug {
            PlantedBug::SkipDirectorySync => &SKIP_DIRECTORY_SYNC,
            PlantedBug::SharedTempName => &SHARED_TEMP_NAME,
            PlantedBug::UnlockedRead => &UNLOCKED_READ,
            PlantedBug::StaleSessionCache => &STALE_SESSION_CACHE,
        }
    }

    pub fn plant(bug: PlantedBug, on: bool) {
        switch(bug).store(on, Ordering::SeqCst);
    }

    pub fn is_planted(bug: PlantedBug) -> bool {
        switch(bug).load(Ordering::SeqCst)
    }
}

/// TEST-ONLY (feature `test-mutations`): turns a planted bug on or off for the whole process.
#[cfg(feature = "test-mutations")]
pub fn plant(bug: PlantedBug, on: bool) {
    switches::plant(bug, on);
}

#[cfg(feature = "test-mutations")]
pub(crate) fn is_planted(bug: PlantedBug) -> bool {
    switches::is_planted(bug)
}

#[cfg(not(feature = "test-mutations"))]
pub(crate) fn is_planted(_bug: PlantedBug) -> bool {
    false
}

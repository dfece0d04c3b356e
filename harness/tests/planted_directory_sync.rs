//! The crash check is not blind to directory entries: a store that creates the session and
//! object directories without fsyncing their parents (planted bug `SkipDirectorySync`, feature
//! `test-mutations`) loses acknowledged sessions at a power cut, and the check must say so.
//!
//! Its own test binary: the planted switch is process-wide.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use workrail::store::planted::{PlantedBug, plant};
use workrail_harness::crash::{check_crashes, policies};
use workrail_harness::ops::Op;

/// lock: L-STORE-ATOMIC-WRITE
#[test]
fn the_crash_check_catches_a_store_that_skips_directory_fsyncs() {
    // Sound store: the same check passes.
    let prefix = [Op::Start { prefs: None }];
    let last = Op::Start { prefs: None };
    check_crashes(&prefix, &last, 11, &policies(11)).unwrap_or_else(|e| panic!("{e}"));

    plant(PlantedBug::SkipDirectorySync, true);
    let caught = check_crashes(&prefix, &last, 11, &policies(11));
    plant(PlantedBug::SkipDirectorySync, false);
    let error = caught.expect_err("the planted skipped directory fsync went unnoticed");
    assert!(error.contains("lost truth"), "{error}");
}

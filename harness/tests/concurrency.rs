//! Several stores on one data directory at the same instant (`src/concurrency.rs`), and the
//! planted bugs those checks must catch (feature `test-mutations` of `workrail`): a reader that
//! reports damage without confirming it under the shared lock, and writers sharing one temp
//! file name. The switches are process-wide, so every test here holds `SERIAL`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;

use workrail::store::planted::{PlantedBug, plant};
use workrail_harness::concurrency::{racing_object_writers, reader_during_commit};

static SERIAL: Mutex<()> = Mutex::new(());

/// Fractions of the close+pins write that land before the writer parks: inside the close line,
/// just after it (close whole, pins missing), and inside the pins.
const FRACTIONS: [u16; 5] = [200, 560, 650, 800, 950];

struct Planted(PlantedBug);

impl Planted {
    fn on(bug: PlantedBug) -> Self {
        plant(bug, true);
        Self(bug)
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        plant(self.0, false);
    }
}

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// lock: L-STORE-COMMIT-UNDER-LOCK, L-HEALTH-CORRUPTION-CODES
#[test]
fn a_reader_never_reports_a_commit_in_flight_as_corruption() {
    let _serial = serial();
    let report = reader_during_commit(11, &FRACTIONS).unwrap();
    println!("reader during commit: {report:?}");
    assert_eq!(report.reads, FRACTIONS.len() as u32);
    assert_eq!(report.false_corruption, 0, "{report:?}");
    assert_eq!(
        report.locked, 0,
        "the reader waited for the commit: {report:?}"
    );
}

#[test]
fn the_check_catches_a_reader_that_reports_damage_without_the_shared_lock() {
    let _serial = serial();
    let _bug = Planted::on(PlantedBug::UnlockedRead);
    let report = reader_during_commit(11, &FRACTIONS).unwrap();
    assert!(
        report.false_corruption > 0,
        "the planted unlocked read went unnoticed: {report:?}"
    );
}

/// lock: L-SNAPSHOT-CAS-STORE
#[test]
fn writers_racing_on_one_object_never_collide() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let report = racing_object_writers(dir.path(), 8, 40);
    println!("racing object writers: {report:?}");
    assert_eq!(report.failed_puts, 0, "{report:?}");
    assert_eq!(report.damaged_objects, 0, "{report:?}");
    // No writer's temp file is left behind.
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("artifacts"))
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn the_check_catches_writers_sharing_a_temp_name() {
    let _serial = serial();
    let _bug = Planted::on(PlantedBug::SharedTempName);
    let dir = tempfile::tempdir().unwrap();
    let report = racing_object_writers(dir.path(), 8, 40);
    assert!(
        report.failed_puts + report.damaged_objects > 0,
        "the planted shared temp name went unnoticed: {report:?}"
    );
}

/// Caches never hide another process's commits.
#[test]
fn alternating_processes_see_each_others_commits() {
    let _serial = serial();
    workrail_harness::concurrency::alternating_processes_see_each_others_commits(3, 6).unwrap();
}

/// A cached session view served without the manifest check is caught.
#[test]
fn the_check_catches_a_stale_session_cache() {
    let _serial = serial();
    let _bug = Planted::on(PlantedBug::StaleSessionCache);
    let caught = workrail_harness::concurrency::alternating_processes_see_each_others_commits(3, 6);
    let error = caught.expect_err("the planted stale cache went unnoticed");
    assert!(error.contains("does not see"), "{error}");
}

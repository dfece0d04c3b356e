//! Real `workrail mcp` processes on one data directory (`src/multiproc.rs`): racing writers,
//! readers beside a writer, and a storm of `kill -9`. Each test prints one line of counts; every
//! count but `session_locked` must be 0.
//!
//! About 20 s per scenario by default; `WORKRAIL_MULTIPROC_SECS` (seconds of driving per
//! scenario), `WORKRAIL_MULTIPROC_SERVERS` (servers of the race) and `WORKRAIL_MULTIPROC_SEED`
//! change that. The scenarios run one at a time (they share the machine's cores).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;

use workrail_harness::multiproc::{self, Config, Report};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn config() -> Config {
    Config::from_env().unwrap()
}

fn assert_sound(report: &Report) {
    println!("{}", report.line());
    for locked in &report.locked_samples {
        println!("  allowed: {locked}");
    }
    let samples = report.samples.join("\n  ");
    assert_eq!(report.lost_events, 0, "{}\n  {samples}", report.line());
    assert_eq!(
        report.duplicate_attempts,
        0,
        "{}\n  {samples}",
        report.line()
    );
    assert_eq!(
        report.replay_mismatches,
        0,
        "{}\n  {samples}",
        report.line()
    );
    assert_eq!(report.false_corruption, 0, "{}\n  {samples}", report.line());
    assert_eq!(report.store_io_errors, 0, "{}\n  {samples}", report.line());
    assert_eq!(
        report.unhealthy_sessions,
        0,
        "{}\n  {samples}",
        report.line()
    );
    assert_eq!(report.stale_tokens, 0, "{}\n  {samples}", report.line());
    assert_eq!(report.damaged_objects, 0, "{}\n  {samples}", report.line());
    assert_eq!(report.other_errors, 0, "{}\n  {samples}", report.line());
    // Every lock-busy answer said it may be retried.
    assert_eq!(
        report.locked_not_retryable,
        0,
        "{}\n  {samples}",
        report.line()
    );
    assert_eq!(report.failures(), 0, "{}\n  {samples}", report.line());
    assert!(report.calls > 0 && report.sessions > 0, "{}", report.line());
}

/// lock: L-STORE-COMMIT-UNDER-LOCK, L-WRITER-OS-LOCK, L-WRITER-BUSY
#[test]
fn servers_racing_on_one_data_directory_lose_and_duplicate_nothing() {
    let _serial = serial();
    let report = multiproc::race(&config()).unwrap();
    assert_sound(&report);
}

#[test]
fn readers_beside_a_writer_never_see_corruption_or_miss_a_commit() {
    let _serial = serial();
    let report = multiproc::readers(&config()).unwrap();
    assert_sound(&report);
    assert!(report.cli_runs > 0, "{}", report.line());
}

/// lock: L-TOKEN-REPLAY-FACTS
#[test]
fn servers_killed_mid_call_lose_nothing_and_replays_return_the_recorded_response() {
    let _serial = serial();
    let report = multiproc::kill_storm(&config()).unwrap();
    assert_sound(&report);
    assert!(report.kills > 0, "{}", report.line());
}

/// The oracle is not blind: a commit removed from the manifest after it was answered is
/// counted as lost, and its token as stale, while the session itself stays healthy.
#[test]
fn the_checks_count_a_commit_that_vanished() {
    let _serial = serial();
    let report = multiproc::lost_commit_is_caught(&config()).unwrap();
    println!("{}", report.line());
    assert!(report.lost_events > 0, "{}", report.line());
    assert!(report.stale_tokens > 0, "{}", report.line());
    assert_eq!(report.unhealthy_sessions, 0, "{:?}", report.samples);
}

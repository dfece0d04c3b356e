//! Real `workrail mcp` processes on one data directory (`src/multiproc.rs`): racing writers,
//! readers beside a writer, a storm of `kill -9`, and that storm with `workrail gc --ttl-days 0`
//! deleting sessions under the clients. The storm's clients run the plain workflow and a
//! workflow in the WorkRail 3.x language (`src/multiproc/language.rs`), sending what each pending
//! step asks for. Each test prints one line of counts; every count but `session_locked` (and the
//! gc storm's allowed counts) must be 0.
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
    assert_eq!(
        report.language_mismatches,
        0,
        "{}\n  {samples}",
        report.line()
    );
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

/// Runs of the workflow in the language (a legacy id, a run condition, a `forEach` loop over the
/// start's context, validation criteria) are among the storm's runs, acknowledged under kills
/// with the notes and context their steps ask for, and none of them strays from the workflow's
/// control flow.
///
/// lock: L-TOKEN-REPLAY-FACTS
/// decision: D57
/// decision: D139
#[test]
fn servers_killed_mid_call_lose_nothing_and_replays_return_the_recorded_response() {
    let _serial = serial();
    let report = multiproc::kill_storm(&config()).unwrap();
    assert_sound(&report);
    assert!(report.kills > 0, "{}", report.line());
    // Old ackTokens sent again with new notes: each answered with the recorded response and a
    // notice that the new notes were not recorded (`silent_resends` is 0 above).
    assert!(report.changed_resends > 0, "{}", report.line());
    assert!(
        report.language_runs > 0 && report.language_acks > 0,
        "{}",
        report.line()
    );
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

/// A scenario's report, or `None` (saying why) where this machine cannot stage its faults: a
/// tmpfs needs root, the preloaded library a C compiler.
fn unless_unsupported(result: Result<Report, String>) -> Option<Report> {
    match result {
        Ok(report) => Some(report),
        Err(e) if e.contains("needs root") || e.contains("needs a C compiler") => {
            eprintln!("skipped: {e}");
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// Every session of a gc storm is whole or gone, every gc not killed succeeded (or stopped on
/// an allowed fault, saying so), and the oracle of every scenario holds.
fn assert_whole_or_gone(report: &Report) {
    print_gc_storm(report);
    let line = report.line();
    let samples = report.samples.join("\n  ");
    let gc_samples = report.gc_samples.join("\n  ");
    assert_eq!(report.half_deleted, 0, "{line}\n  {samples}");
    assert_eq!(report.gc_race_errors, 0, "{line}\n  {samples}");
    assert_eq!(report.gc_failures, 0, "{line}\n  {gc_samples}");
    assert_sound(report);
}

/// Prints a gc storm's report: its counts, the allowed answers and every failure sample.
fn print_gc_storm(report: &Report) {
    println!("{}", report.line());
    for deleted in &report.deleted_samples {
        println!("  allowed (deleted under use): {deleted}");
    }
    for gc in &report.gc_samples {
        println!("  gc: {gc}");
    }
    for sample in &report.samples {
        println!("  sample: {sample}");
    }
}

/// The kill storm's servers and clients while `workrail gc --ttl-days 0` processes (now and then
/// two at once, some `kill -9`ed mid-run) delete every session nobody holds locked: gc takes a
/// session's lock before it deletes it, so a deletion never meets an append (no lost event and
/// no stale token in any session that still exists, nothing half deleted), a deleted session
/// answers `SESSION_NOT_FOUND` and nothing else, every gc not killed exits 0, and a last gc
/// with the servers stopped is not in safe mode and deletes every expired session.
///
/// lock: L-GC-RETENTION, L-WRITER-OS-LOCK
#[test]
fn gc_deleting_sessions_under_killed_servers_leaves_every_session_whole_or_gone() {
    let _serial = serial();
    let report = multiproc::gc_storm(&config()).unwrap();
    assert_whole_or_gone(&report);
    let line = report.line();
    assert!(report.kills > 0 && report.gc_killed > 0, "{line}");
    // Runs of the workflow in the language were among the sessions deleted under use.
    assert!(
        report.language_runs > 0 && report.language_acks > 0,
        "{line}"
    );
    // Sessions were deleted, some of them under the clients using them.
    assert!(
        report.gc_deleted > 0 && report.sessions_deleted_under_use > 0,
        "{line}"
    );
}

/// The gc storm's checks are not blind: a deleter of the harness's own in place of `workrail
/// gc` (planted: under the session's lock it removes `manifest.jsonl`, then the whole directory
/// with the lock file, then releases the lock, so a server waiting for that lock makes the lock
/// file and an empty session again) is caught as half-deleted sessions or errors about deleted
/// sessions other than `SESSION_NOT_FOUND`.
#[test]
fn the_checks_catch_a_gc_that_deletes_the_lock_file() {
    let _serial = serial();
    let report = multiproc::gc_storm_with_a_buggy_deleter(&config()).unwrap();
    print_gc_storm(&report);
    assert!(report.planted_deletions > 0, "{}", report.line());
    assert!(
        report.half_deleted + report.gc_race_errors > 0,
        "{}",
        report.line()
    );
    assert!(report.failures() > 0, "{}", report.line());
}

/// decision: D168
#[test]
fn lanes_driven_from_several_servers_under_kill_9_are_never_lost() {
    let _serial = serial();
    let report = multiproc::lane_storm(&config()).unwrap();
    println!("{}", report.line());
    assert_sound(&report);
    assert!(report.kills > 0, "no server was killed: {}", report.line());
    assert!(
        report.lane_runs_completed > 0,
        "no run with lanes completed: {}",
        report.line()
    );
}

/// The lane checks are not blind: a lane left undriven is counted as lost at the fan-in.
///
/// decision: D169
#[test]
fn the_lane_checks_catch_a_lane_missing_at_the_fan_in() {
    let _serial = serial();
    let mut config = config();
    config.run_for = std::time::Duration::from_secs(3);
    let report = multiproc::lane_storm_with_an_undriven_lane(&config).unwrap();
    println!("{}", report.line());
    assert!(report.lanes_lost > 0, "{}", report.line());
}

/// A real full disk under servers killed mid-call: the data directory's filesystem is filled to
/// `ENOSPC` and freed again and again. Every call it refuses answers a clear retryable error
/// naming the full disk, sent again with the same arguments; a rehydrate is never refused; no
/// acknowledged advance is lost or recorded twice; and once the disk is free every session is
/// healthy and its latest node is acknowledged at the first try. Skipped, with the reason, where
/// the harness may not mount a tmpfs (it needs root).
///
/// lock: L-STORE-ATOMIC-WRITE, L-ERR-SELF-CORRECTING, L-TOKEN-REPLAY-FACTS
#[test]
fn a_disk_filled_and_freed_under_killed_servers_loses_nothing_and_every_session_goes_on() {
    let _serial = serial();
    let Some(report) = unless_unsupported(multiproc::disk_full(&config())) else {
        return;
    };
    assert_sound(&report);
    assert!(report.disk_fills > 0, "{}", report.line());
    assert!(report.disk_full_errors > 0, "{}", report.line());
    assert!(report.kills > 0, "{}", report.line());
}

/// `EIO` injected in bursts into the reads, writes and syncs of data files of servers killed
/// mid-call: every call it fails answers a clear retryable error naming it, sent again with the
/// same arguments; no failed read is taken for damage; no acknowledged advance is lost or
/// recorded twice; and once the bursts stop every session is healthy and its latest node is
/// acknowledged at the first try. Skipped, with the reason, where no C compiler builds the
/// preloaded library.
///
/// lock: L-STORE-ATOMIC-WRITE, L-ERR-SELF-CORRECTING, L-TOKEN-REPLAY-FACTS
#[test]
fn io_errors_injected_into_killed_servers_lose_nothing_and_every_session_goes_on() {
    let _serial = serial();
    let Some(report) = unless_unsupported(multiproc::io_errors(&config())) else {
        return;
    };
    assert_sound(&report);
    assert!(report.io_bursts > 0, "{}", report.line());
    assert!(report.io_fault_errors > 0, "{}", report.line());
    assert!(report.kills > 0, "{}", report.line());
}

/// The gc storm with `EIO` injected in bursts into every server and every other round of gc
/// processes: deleting is writing, so gc meets the same failed reads, writes and syncs as the
/// servers, and the clean rounds make sure deletions happen beside the faulted servers. A gc
/// may stop on a fault (saying so), but never deletes half a session, never takes a failed read
/// for damage, and the last gc, with the faults off, deletes every session; the servers' calls
/// answer as in the I/O error storm. Skipped, with the reason, where no C compiler builds the
/// preloaded library.
///
/// lock: L-STORE-COMMIT-UNDER-LOCK, L-ERR-SELF-CORRECTING
#[test]
fn gc_and_servers_under_injected_io_errors_leave_every_session_whole_or_gone() {
    let _serial = serial();
    let Some(report) = unless_unsupported(multiproc::gc_storm_with_io_errors(&config())) else {
        return;
    };
    assert_whole_or_gone(&report);
    let line = report.line();
    assert!(
        report.io_bursts > 0 && report.io_fault_errors > 0 && report.gc_deleted > 0,
        "{line}"
    );
}

/// The gc storm on a disk filled to `ENOSPC` and freed again and again: gc processes meet the
/// full disk mid-deletion as the servers meet it mid-commit. A gc may stop on it (saying so),
/// but never leaves half a session; the servers' calls answer as in the disk-full storm; the
/// last gc, with the disk free, deletes every session. Skipped, with the reason, where the
/// harness may not mount a tmpfs (it needs root).
///
/// lock: L-STORE-COMMIT-UNDER-LOCK, L-ERR-SELF-CORRECTING
#[test]
fn gc_and_servers_on_a_disk_filled_and_freed_leave_every_session_whole_or_gone() {
    let _serial = serial();
    let Some(report) = unless_unsupported(multiproc::gc_storm_on_a_full_disk(&config())) else {
        return;
    };
    assert_whole_or_gone(&report);
    let line = report.line();
    assert!(
        report.disk_fills > 0 && report.disk_full_errors > 0 && report.gc_deleted > 0,
        "{line}"
    );
}

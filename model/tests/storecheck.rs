//! The exhaustive check of the file store's protocol, and the planted bugs it must find.

use workrail_model::storecheck::{Config, Planted, explore};

const BUDGET: usize = 3_000_000;

/// The ordinary run: two writers of one call each (advance, checkpoint or fork), a reader, GC
/// (retention delete and CAS sweep), one power cut at any step; no process kills (the deep run
/// adds one kill of each actor).
fn config(planted: Option<Planted>) -> Config {
    Config {
        writers: 2,
        calls: 1,
        kills: 0,
        crashes: 1,
        planted,
        gc: true,
    }
}

/// decision: D185
/// decision: D199
#[test]
fn every_interleaving_of_two_writers_a_reader_gc_and_a_power_cut_keeps_every_property() {
    let outcome = explore(&config(None), BUDGET);
    println!("storecheck: {} states", outcome.states);
    assert!(outcome.violation.is_none(), "{:?}", outcome.violation);
    assert!(!outcome.truncated, "the budget cut the search short");
    assert!(outcome.states > 1000);
}

fn found(planted: Planted, expected: &str) {
    found_with(config(Some(planted)), expected);
}

fn found_with(config: Config, expected: &str) {
    let planted = config.planted;
    let outcome = explore(&config, BUDGET);
    let Some((broken, trace)) = outcome.violation else {
        panic!("{planted:?} was not found in {} states", outcome.states);
    };
    println!("{planted:?}: {broken}\n  trace: {trace:?}");
    assert_eq!(broken, expected);
}

#[test]
fn a_missing_directory_fsync_is_found() {
    found(
        Planted::SkipDirectorySync,
        "after a crash the session is neither healthy nor wholly absent",
    );
}

#[test]
fn the_close_pin_window_is_found() {
    found(
        Planted::PinsAfterClose,
        "after a crash the session is neither healthy nor wholly absent",
    );
}

#[test]
fn an_unlocked_reader_is_found() {
    found(
        Planted::UnlockedRead,
        "a reader reported a healthy session as corrupt",
    );
}

#[test]
fn gc_deleting_the_lock_file_is_found() {
    found(
        Planted::GcUnlinksLockFile,
        "two writers inside one session's commit",
    );
}

/// A writer stores its snapshot object inside the session's lock (`append_alongside`), so two
/// writers of one session never write one object's temp file at once: the planted shared temp
/// name breaks nothing here. It bites writers of two sessions storing the same object, which
/// this one-session model does not hold.
/// decision: D198
#[test]
fn shared_temp_names_cannot_collide_within_one_session() {
    let outcome = explore(&config(Some(Planted::SharedTempName)), BUDGET);
    assert!(outcome.violation.is_none(), "{:?}", outcome.violation);
    assert!(!outcome.truncated);
}

/// decision: D133
/// decision: D198
#[test]
fn a_sweep_that_checks_then_unlinks_without_the_lock_is_found() {
    found(
        Planted::SweepCheckThenUnlink,
        "after a crash a pinned object is missing or torn",
    );
}

/// decision: D200
#[test]
fn a_sweep_before_a_killed_deletion_is_durable_is_found() {
    // It takes a GC killed between its rename and its fsync of `sessions/`.
    found_with(
        Config {
            kills: 1,
            ..config(Some(Planted::SweepBeforeDeletionDurable))
        },
        "after a crash a pinned object is missing or torn",
    );
}

/// The deep run (`WORKRAIL_MC_DEEP=1`), the done-when: every actor may be killed once
/// at any step and restart, and every state is judged by every disk a power cut would leave
/// there (23,285,156 states, about 14 minutes; decision D199). A power cut the system then
/// runs on from, on top of the kills, did not finish in 25 minutes and is left out.
/// decision: D186
/// decision: D199
#[test]
fn the_deep_run_keeps_every_property() {
    if std::env::var_os("WORKRAIL_MC_DEEP").is_none() {
        return;
    }
    let outcome = explore(
        &Config {
            kills: 1,
            crashes: 0,
            ..config(None)
        },
        200_000_000,
    );
    println!("storecheck deep: {} states", outcome.states);
    assert!(outcome.violation.is_none(), "{:?}", outcome.violation);
    assert!(!outcome.truncated);
}

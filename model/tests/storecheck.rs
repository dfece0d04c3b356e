//! The exhaustive check of the file store's append protocol, and the planted bugs it must find.

use workrail_model::storecheck::{Config, Planted, explore};

const BUDGET: usize = 2_000_000;

fn config(planted: Option<Planted>) -> Config {
    Config {
        writers: 2,
        crashes: 1,
        planted,
        gc: true,
    }
}

/// decision: D185
#[test]
fn every_interleaving_of_two_writers_a_reader_and_a_crash_keeps_every_property() {
    let outcome = explore(&config(None), BUDGET);
    println!("storecheck: {} states", outcome.states);
    assert!(outcome.violation.is_none(), "{:?}", outcome.violation);
    assert!(outcome.states > 100 && outcome.states < BUDGET);
}

fn found(planted: Planted, expected: &str) {
    let outcome = explore(&config(Some(planted)), BUDGET);
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

/// The deep run (`WORKRAIL_MC_DEEP=1`): three crashes, restarts included.
/// decision: D186
#[test]
fn the_deep_run_with_three_crashes_keeps_every_property() {
    if std::env::var_os("WORKRAIL_MC_DEEP").is_none() {
        return;
    }
    let outcome = explore(
        &Config {
            writers: 2,
            crashes: 3,
            planted: None,
            gc: true,
        },
        50_000_000,
    );
    println!("storecheck deep: {} states", outcome.states);
    assert!(outcome.violation.is_none(), "{:?}", outcome.violation);
}

#[test]
fn gc_deleting_the_lock_file_is_found() {
    found(
        Planted::GcUnlinksLockFile,
        "two writers inside one session's commit",
    );
}

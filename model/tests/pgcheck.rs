//! The exhaustive check of the PostgreSQL store's protocol, and the planted bugs it must find.

use workrail_model::pgcheck::{Config, Outcome, Planted, explore};

const BUDGET: usize = 5_000_000;

fn deep() -> bool {
    std::env::var("WORKRAIL_MC_DEEP").is_ok_and(|v| v == "1")
}

/// decision: D201
#[test]
fn every_interleaving_of_two_writers_a_reader_and_gc_with_kills_keeps_every_property() {
    let config = Config::default();
    let outcome = explore(&config, BUDGET);
    println!("pgcheck: {} states ({config:?})", outcome.states);
    if let Some((broken, trace)) = &outcome.violation {
        let steps: Vec<String> = trace.iter().map(ToString::to_string).collect();
        panic!("{broken}:\n  {}", steps.join("\n  "));
    }
    assert!(outcome.states > 1_000 && outcome.states < BUDGET);
    not_vacuous(&outcome, 2);
}

/// The search reached what the properties are about: every advance acknowledged, a committed
/// GC delete, a writer told its session was deleted, a healthy load, every actor killed.
fn not_vacuous(outcome: &Outcome, advances: usize) {
    let r = outcome.reached;
    assert_eq!(r.most_acked, advances, "{r:?}");
    assert!(
        r.gc_deleted && r.writer_saw_deleted && r.reader_healthy && r.all_killed,
        "{r:?}"
    );
}

fn found(planted: Planted, expected: &str) {
    found_in(
        Config {
            planted: Some(planted),
            ..Config::default()
        },
        expected,
    );
}

fn found_in(config: Config, expected: &str) {
    let planted = config.planted;
    let outcome = explore(&config, BUDGET);
    let Some((broken, trace)) = outcome.violation else {
        panic!("{planted:?} was not found in {} states", outcome.states);
    };
    let steps: Vec<String> = trace.iter().map(ToString::to_string).collect();
    println!(
        "{planted:?}: {broken} ({} states)\n  {}",
        outcome.states,
        steps.join("\n  ")
    );
    assert_eq!(broken, expected);
}

/// decision: D201
#[test]
fn an_append_without_the_advisory_lock_is_found() {
    // Without GC, so the counterexample is the two writers'.
    found_in(
        Config {
            planted: Some(Planted::AppendWithoutLock),
            gc: false,
            ..Config::default()
        },
        "two appends interleaved in one session's log",
    );
}

/// decision: D201
#[test]
fn an_acknowledgement_before_commit_returns_is_found() {
    found(
        Planted::AckBeforeCommit,
        "an acknowledged advance is not committed",
    );
}

/// decision: D201
#[test]
fn gc_deleting_without_the_session_lock_is_found() {
    found(
        Planted::GcWithoutLock,
        "two transactions write one session at once",
    );
}

/// decision: D201
#[test]
fn a_load_without_one_snapshot_is_found() {
    found(
        Planted::LoadWithoutSnapshot,
        "a reader reported a healthy session as corrupt",
    );
}

/// The deep run (`WORKRAIL_MC_DEEP=1`): a postmaster restart on top of the bounded run, and two
/// advances a writer with GC, kills and a restart (the reader's load is one observable statement,
/// its snapshot, already met at every point by the bounded run).
/// decision: D202
#[test]
fn the_deep_run_with_two_advances_and_a_postmaster_restart_keeps_every_property() {
    if !deep() {
        println!("pgcheck deep run: skipped (set WORKRAIL_MC_DEEP=1)");
        return;
    }
    let runs = [
        Config {
            restarts: 1,
            ..Config::default()
        },
        Config {
            advances: 2,
            reader: false,
            restarts: 1,
            ..Config::default()
        },
    ];
    for config in runs {
        let budget = 4_000_000;
        let outcome = explore(&config, budget);
        println!("pgcheck deep: {} states ({config:?})", outcome.states);
        if let Some((broken, trace)) = &outcome.violation {
            let steps: Vec<String> = trace.iter().map(ToString::to_string).collect();
            panic!("{broken}:\n  {}", steps.join("\n  "));
        }
        assert!(outcome.states < budget, "the search did not finish");
        let r = outcome.reached;
        assert_eq!(
            r.most_acked,
            usize::from(config.writers * config.advances),
            "{r:?}"
        );
        assert!(
            r.gc_deleted && r.writer_saw_deleted && r.all_killed,
            "{r:?}"
        );
        assert_eq!(r.reader_healthy, config.reader, "{r:?}");
    }
}

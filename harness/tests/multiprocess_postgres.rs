//! Real `workrail mcp` processes on one PostgreSQL schema (issue 19, item 4; `src/multiproc.rs`
//! with [`Config::on_postgres`]): each server in a data directory of its own, so the database is
//! all they share, like servers on several machines. Racing writers on one run, readers beside
//! a writer, a storm of `kill -9` at seeded moments while clients keep advancing,
//! replaying, forking and starting runs, and that storm with `workrail gc --ttl-days 0`
//! deleting sessions under the clients. The oracle of `multiprocess.rs`, with the committed log read from the schema's rows:
//! every session healthy and continuable afterwards (every client's latest stateToken
//! rehydrates on a fresh server), nothing acknowledged lost, no attempt recorded twice, every
//! replay byte-identical, every object row hashing to its key. Each test prints one line of
//! counts; every count but `session_locked` must be 0.
//!
//! About 6 s of driving per scenario by default (`WORKRAIL_MULTIPROC_SECS` overrides it; the
//! seed is `WORKRAIL_MULTIPROC_SEED`, printed in the line). Needs
//! `WORKRAIL_TEST_POSTGRES=postgres://…` (`source .ci/postgres.sh`); without it the tests say
//! why and pass, except under `CI`, where they fail. Each scenario uses a schema of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Mutex;
use std::time::Duration;

use workrail_harness::multiproc::{self, Config, Outages, Report, SECS_ENV, outage_error_problem};
use workrail_harness::pg_cluster::{Cluster, own_cluster};
use workrail_harness::postgres::{Schema, Sql, plans_are_whole, postgres_url};
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Seconds of driving per scenario when `WORKRAIL_MULTIPROC_SECS` is unset.
const DEFAULT_SECS: u64 = 6;

fn config(schema: &Schema) -> Config {
    // Built (when stale) before a scenario's clock starts, not inside its driving time.
    let _ = workrail_harness::system::workrail_binary();
    let mut config = Config::from_env().unwrap();
    if std::env::var(SECS_ENV).map_or(true, |v| v.trim().is_empty()) {
        config.run_for = Duration::from_secs(DEFAULT_SECS);
    }
    config.on_postgres(&schema.url, &schema.name)
}

fn assert_sound(report: &Report) {
    println!("{}", report.line());
    for locked in &report.locked_samples {
        println!("  allowed: {locked}");
    }
    let samples = report.samples.join("\n  ");
    let counts = [
        ("lost_events", report.lost_events),
        ("duplicate_attempts", report.duplicate_attempts),
        ("replay_mismatches", report.replay_mismatches),
        ("false_corruption", report.false_corruption),
        ("store_io_errors", report.store_io_errors),
        ("unhealthy_sessions", report.unhealthy_sessions),
        ("stale_tokens", report.stale_tokens),
        ("damaged_objects", report.damaged_objects),
        ("other_errors", report.other_errors),
        ("locked_not_retryable", report.locked_not_retryable),
    ];
    for (name, count) in counts {
        assert_eq!(count, 0, "{name}: {}\n  {samples}", report.line());
    }
    assert_eq!(report.failures(), 0, "{}\n  {samples}", report.line());
    assert!(
        report.calls > 0 && report.sessions > 0 && report.acks > 0,
        "{}",
        report.line()
    );
}

/// Servers (8 by default) start runs at one instant and race on one run's ackTokens.
#[test]
fn servers_on_several_machines_racing_on_one_database_lose_and_duplicate_nothing() {
    let Some(url) = postgres_url(
        "servers_on_several_machines_racing_on_one_database_lose_and_duplicate_nothing",
    ) else {
        return;
    };
    let _serial = serial();
    let schema = Schema::new(&url, "race");
    let report = multiproc::race(&config(&schema)).unwrap();
    assert_sound(&report);
    assert!(
        report.ack_replays > 0,
        "no ackToken raced: {}",
        report.line()
    );
}

/// Reads on other machines (rehydrate, `resume_session`, `workrail export` and `workrail
/// inspect` as processes of their own) beside a writer never see corruption or miss a commit.
#[test]
fn readers_on_other_machines_beside_a_writer_never_see_corruption_or_miss_a_commit() {
    let Some(url) = postgres_url(
        "readers_on_other_machines_beside_a_writer_never_see_corruption_or_miss_a_commit",
    ) else {
        return;
    };
    let _serial = serial();
    let schema = Schema::new(&url, "readers");
    let report = multiproc::readers(&config(&schema)).unwrap();
    assert_sound(&report);
    assert!(report.cli_runs > 0, "{}", report.line());
}

/// Servers `kill -9`ed at seeded moments; a call cut off is sent again to the new server.
#[test]
fn servers_killed_on_one_database_lose_nothing_and_replays_return_the_recorded_response() {
    let Some(url) = postgres_url(
        "servers_killed_on_one_database_lose_nothing_and_replays_return_the_recorded_response",
    ) else {
        return;
    };
    let _serial = serial();
    let schema = Schema::new(&url, "storm");
    let report = multiproc::kill_storm(&config(&schema)).unwrap();
    assert_sound(&report);
    assert!(report.kills > 0, "{}", report.line());
}

/// Lanes driven from several servers on one database, under `kill -9`: none is lost.
///
/// decision: D168
#[test]
fn lanes_driven_from_servers_on_one_database_under_kill_9_are_never_lost() {
    let Some(url) =
        postgres_url("lanes_driven_from_servers_on_one_database_under_kill_9_are_never_lost")
    else {
        return;
    };
    let _serial = serial();
    let schema = Schema::new(&url, "lanes");
    let report = multiproc::lane_storm(&config(&schema)).unwrap();
    println!("{}", report.line());
    assert_sound(&report);
    assert!(report.kills > 0, "{}", report.line());
    assert!(report.lane_runs_completed > 0, "{}", report.line());
}

/// The oracle is not blind on PostgreSQL: an append cut from the schema after it was answered
/// (its events, its `segment_closed` record and everything after it, the next indices set back)
/// is counted as lost, and its token as stale, while the session itself stays healthy.
#[test]
fn the_checks_count_a_commit_that_vanished_from_the_database() {
    let Some(url) = postgres_url("the_checks_count_a_commit_that_vanished_from_the_database")
    else {
        return;
    };
    let _serial = serial();
    let schema = Schema::new(&url, "lost");
    let report = multiproc::lost_commit_is_caught(&config(&schema)).unwrap();
    println!("{}", report.line());
    assert!(report.lost_events > 0, "{}", report.line());
    assert!(report.stale_tokens > 0, "{}", report.line());
    assert_eq!(report.unhealthy_sessions, 0, "{:?}", report.samples);
}

/// The kill storm on one schema while `workrail gc --ttl-days 0` processes (on a machine of
/// their own; now and then two at once, some `kill -9`ed mid-run) delete every session nobody
/// holds locked: a deleted session answers `SESSION_NOT_FOUND` and nothing else, no session is
/// left half deleted (rows without committed records, events without a `segment_closed`
/// record), nothing acknowledged is lost from a session that still exists, every gc not killed
/// exits 0, and a last gc with the servers stopped is not in safe mode and deletes every
/// expired session.
///
/// lock: L-GC-RETENTION
#[test]
fn gc_deleting_sessions_on_one_database_under_killed_servers_leaves_every_session_whole_or_gone() {
    let Some(url) = postgres_url(
        "gc_deleting_sessions_on_one_database_under_killed_servers_leaves_every_session_whole_or_gone",
    ) else {
        return;
    };
    let _serial = serial();
    let schema = Schema::new(&url, "gc_storm");
    let report = multiproc::gc_storm(&config(&schema)).unwrap();
    println!("{}", report.line());
    for gc in &report.gc_samples {
        println!("  gc: {gc}");
    }
    for sample in &report.samples {
        println!("  sample: {sample}");
    }
    let line = report.line();
    let samples = report.samples.join("\n  ");
    let gc_samples = report.gc_samples.join("\n  ");
    assert_eq!(report.half_deleted, 0, "{line}\n  {samples}");
    assert_eq!(report.gc_race_errors, 0, "{line}\n  {samples}");
    assert_eq!(report.gc_failures, 0, "{line}\n  {gc_samples}");
    assert_sound(&report);
    assert!(report.kills > 0 && report.gc_runs > 0, "{line}");
    assert!(
        report.gc_deleted > 0 && report.sessions_deleted_under_use > 0,
        "{line}"
    );
}

// ---------------------------------------------------------------------------------------------
// The database killed mid-advance (a cluster of the test's own).

/// Seconds of driving of the outage scenario when `WORKRAIL_MULTIPROC_SECS` is unset.
const OUTAGE_SECS: u64 = 12;

fn outage_config(cluster: &Cluster, schema: &Schema, secs: u64) -> Config {
    let _ = workrail_harness::system::workrail_binary();
    let mut config = Config::from_env().unwrap();
    if std::env::var(SECS_ENV).map_or(true, |v| v.trim().is_empty()) {
        config.run_for = Duration::from_secs(secs);
    }
    config.on_postgres(&cluster.url(), &schema.name)
}

fn print_outage(report: &Report) {
    println!("{}", report.line());
    for fault in &report.faults {
        println!("  fault: {fault}");
    }
    for sample in &report.samples {
        println!("  sample: {sample}");
    }
}

/// Servers (4 by default) on one schema of a cluster of the test's own, their clients
/// advancing, replaying, forking and starting runs, while the database is killed (`kill -9` of
/// the postmaster, then a restart on the same data directory and port, or of the backend
/// serving a call, after which PostgreSQL recovers by itself) at seeded moments, several times.
/// Calls during an outage answer a clear retryable `STORE_IO_ERROR` and are sent again with the
/// same arguments; no server dies or is started again, each answers once the database is back,
/// and the oracle of every scenario holds (nothing lost, no attempt twice, replays
/// byte-identical, every session healthy and continuable, every object row hashing to its
/// key), with every plan whole in the rows.
#[test]
fn the_database_killed_mid_advance_leaves_every_server_serving_and_every_session_healthy() {
    let test =
        "the_database_killed_mid_advance_leaves_every_server_serving_and_every_session_healthy";
    let Some(cluster) = own_cluster(test) else {
        return;
    };
    let _serial = serial();
    let schema = Schema::new(&cluster.url(), "outage");
    let config = outage_config(&cluster, &schema, OUTAGE_SECS);
    let outages = Outages {
        faults: &cluster,
        plant_server_death: false,
    };
    let report = multiproc::db_outage(&config, &outages).unwrap();
    print_outage(&report);
    assert_sound(&report);
    let line = report.line();
    assert!(report.db_kills >= 3, "too few database kills: {line}");
    assert!(
        report.outage_errors > 0,
        "no call ever met an outage: {line}"
    );
    assert!(
        report.outage_retried_acks > 0,
        "no ack was retried after an outage: {line}"
    );
    assert_eq!(report.kills, 0, "{line}");
    plans_are_whole(&Sql::connect(&cluster.url()), &schema.name);
}

/// The outage checks are not blind: a server that dies when its database goes away (planted:
/// the harness kills one during the first outage and lets the client's next call start it
/// again) is counted.
#[test]
fn the_outage_checks_count_a_server_that_died_with_its_database() {
    let test = "the_outage_checks_count_a_server_that_died_with_its_database";
    let Some(cluster) = own_cluster(test) else {
        return;
    };
    let _serial = serial();
    let schema = Schema::new(&cluster.url(), "outage_planted");
    let config = outage_config(&cluster, &schema, 4);
    let outages = Outages {
        faults: &cluster,
        plant_server_death: true,
    };
    let report = multiproc::db_outage(&config, &outages).unwrap();
    print_outage(&report);
    assert!(report.servers_down > 0, "{}", report.line());
    assert!(report.failures() > 0, "{}", report.line());
}

/// What a client is told during an outage must be retryable, say to retry and name the
/// database: the check refuses an error that blames the disk, one marked not retryable, and
/// one without a suggestion to retry.
#[test]
fn an_outage_error_must_be_retryable_and_name_the_database() {
    let clear = ErrorEnvelope::new(
        ErrorCode::StoreIoError,
        "The database did not answer within 10000 ms during load session.",
        "Retry the same call; if it keeps failing, check that the PostgreSQL server is running.",
        Retry::RetryableAfterMs { after_ms: 1000 },
    );
    assert_eq!(outage_error_problem(&clear), None);
    let mut not_retryable = clear.clone();
    not_retryable.retry = Retry::NotRetryable;
    let mut no_advice = clear.clone();
    no_advice.suggestion = "Check that the PostgreSQL server is running.".to_owned();
    let blames_the_disk = ErrorEnvelope::new(
        ErrorCode::StoreIoError,
        "A filesystem operation failed during load session: connection refused.",
        "Retry the same call; if it keeps failing, check free disk space.",
        Retry::RetryableImmediate,
    );
    for envelope in [not_retryable, no_advice, blames_the_disk] {
        assert!(
            outage_error_problem(&envelope).is_some(),
            "{envelope:?} passed"
        );
    }
}

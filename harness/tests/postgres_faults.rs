//! The PostgreSQL session backend under real faults (issue 19, items 4 and 5, at the seam):
//! `workrail-store-driver` processes append to shared sessions through `SessionBackend` while
//! the test kills them (`kill -9`), kills the database server, terminates their connections,
//! or runs two of them as two "machines" on one database. Afterwards one oracle checks, with a
//! fresh backend and plain SQL:
//!
//! - every session loads `healthy`, its events contiguous from 0;
//! - every append a driver reported as committed is there (its last event at the reported
//!   index, with the reported eventId);
//! - every append is all or nothing: the `segment_closed` records of a session cover exactly
//!   its event rows, back to back from 0, and `sessions.next_event_index` agrees;
//! - a new append to every session still works (a fresh driver, one advance each).
//!
//! Each test works in a schema of its own (the server-kill test in a cluster of its own). The
//! shared database is `WORKRAIL_TEST_POSTGRES` (`source .ci/postgres.sh`); without it the tests
//! say why and pass, except under CI (`CI` set), where they fail. The server-kill test needs
//! PostgreSQL's `initdb` (`/usr/lib/postgresql/*/bin`), with the same rule. The random moments
//! are seeded (`WORKRAIL_FAULT_SEED`, printed by each test).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use workrail::store::postgres::PostgresBackend;
use workrail::store::{SessionBackend, SessionHealth};
use workrail_harness::pg_cluster::own_cluster;
use workrail_harness::postgres::{Sql, plans_are_whole};
use workrail_spec::ids::SessionId;

const DRIVER: &str = env!("CARGO_BIN_EXE_workrail-store-driver");

// ---------------------------------------------------------------------------------------------
// Seeded randomness.

struct Rng(u64);

impl Rng {
    fn seeded(test: &str) -> Self {
        let seed = std::env::var("WORKRAIL_FAULT_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x19_0405);
        eprintln!("{test}: WORKRAIL_FAULT_SEED={seed}");
        Self(seed ^ test.len() as u64)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Milliseconds in `lo..hi`.
    fn millis(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.next() % (hi - lo))
    }
}

/// The shared database, or `None` (and why) outside CI; under CI its absence fails.
fn postgres_url(test: &str) -> Option<String> {
    match std::env::var("WORKRAIL_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but WORKRAIL_TEST_POSTGRES is not: the PostgreSQL fault tests must run in CI (source .ci/postgres.sh to start a throwaway cluster)"
            );
            eprintln!(
                "{test}: skipped, WORKRAIL_TEST_POSTGRES is not set (set it to a postgres:// URL, e.g. from `source .ci/postgres.sh`)"
            );
            None
        }
    }
}

static SCHEMAS: AtomicUsize = AtomicUsize::new(0);

/// A schema of the test's own, dropped at the end.
struct Schema {
    url: String,
    name: String,
}

impl Schema {
    fn new(url: &str, test: &str) -> Self {
        let name = format!(
            "wrf_{test}_{}_{}",
            std::process::id(),
            SCHEMAS.fetch_add(1, Ordering::SeqCst)
        );
        Sql::connect(url).run(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"));
        Self {
            url: url.to_owned(),
            name,
        }
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        // Never panics (a panic while unwinding would abort the test binary).
        let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        runtime.block_on(async {
            if let Ok((client, connection)) =
                tokio_postgres::connect(&self.url, tokio_postgres::NoTls).await
            {
                tokio::spawn(connection);
                let _ = client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name))
                    .await;
            }
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Driver processes.

/// One `committed …` line of a driver.
#[derive(Debug, Clone)]
struct Report {
    session: String,
    index: u64,
    event_id: String,
    fresh: u64,
}

fn parse_report(line: &str) -> Option<Report> {
    let mut parts = line.strip_prefix("committed ")?.split(' ');
    let report = Report {
        session: parts.next()?.to_owned(),
        index: parts.next()?.parse().ok()?,
        event_id: parts.next()?.to_owned(),
        fresh: parts.next()?.parse().ok()?,
    };
    parts.next().is_none().then_some(report)
}

#[derive(Debug)]
struct Outcome {
    status: ExitStatus,
    reports: Vec<Report>,
    stderr: String,
}

impl Outcome {
    /// How many times the driver retried after a store error (`… retry <what>: <error>`).
    fn retries(&self) -> usize {
        self.stderr.matches(": retry ").count()
    }

    /// Of those, how many after a commit whose outcome was unknown (the connection lost
    /// during `COMMIT`).
    fn unknown_commits(&self) -> usize {
        self.stderr
            .lines()
            .filter(|l| l.contains(": retry ") && l.contains("may or may not be committed"))
            .count()
    }
}

struct Driver {
    tag: u32,
    child: Child,
    stdout: JoinHandle<Vec<Report>>,
    stderr: JoinHandle<String>,
}

#[derive(Clone)]
struct DriverSpec<'a> {
    url: &'a str,
    schema: &'a str,
    set: u8,
    sessions: u32,
    appends: u64,
    round_robin: bool,
    /// The working and data directory of a "machine" (a temp dir per driver when `None`).
    home: Option<&'a Path>,
}

impl DriverSpec<'_> {
    fn spawn(&self, tag: u32) -> Driver {
        let mut command = Command::new(DRIVER);
        command
            .args(["--url", self.url, "--schema", self.schema])
            .args(["--set", &self.set.to_string()])
            .args(["--sessions", &self.sessions.to_string()])
            .args(["--tag", &tag.to_string()])
            .args(["--appends", &self.appends.to_string()])
            .args(["--retries", "200"])
            .env_remove("WORKRAIL_TEST_POSTGRES")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if self.round_robin {
            command.args(["--order", "round-robin"]);
        }
        if let Some(home) = self.home {
            command
                .current_dir(home)
                .env("HOME", home)
                .env("WORKRAIL_DATA_DIR", home.join("data"));
        }
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("start {DRIVER}: {e}"));
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let stdout = std::thread::spawn(move || {
            // Only whole lines count: a line cut by kill -9 reports nothing.
            let mut reader = BufReader::new(out);
            let mut reports = Vec::new();
            let mut line = String::new();
            while reader.read_line(&mut line).unwrap_or(0) > 0 {
                if let Some(body) = line.strip_suffix('\n') {
                    let report = parse_report(body)
                        .unwrap_or_else(|| panic!("driver {tag}: unexpected line {body:?}"));
                    reports.push(report);
                }
                line.clear();
            }
            reports
        });
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = BufReader::new(err).read_to_string(&mut text);
            text
        });
        Driver {
            tag,
            child,
            stdout,
            stderr,
        }
    }
}

impl Driver {
    /// `kill -9`, then what it had reported.
    fn kill9(mut self) -> Outcome {
        // SIGKILL on Unix.
        let _ = self.child.kill();
        self.finish()
    }

    /// Waits for it to exit by itself (at most `limit`, then kills it and fails).
    fn wait(mut self, limit: Duration) -> Outcome {
        let deadline = Instant::now() + limit;
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let tag = self.tag;
                let outcome = self.kill9();
                panic!(
                    "driver {tag} did not finish within {limit:?}: {}",
                    outcome.stderr
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.finish()
    }

    fn finish(mut self) -> Outcome {
        let status = self.child.wait().unwrap();
        Outcome {
            status,
            reports: self.stdout.join().unwrap(),
            stderr: self.stderr.join().unwrap(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The oracle.

/// Session `i` of driver set `set` (the driver's own derivation).
fn session_id(set: u8, i: u32) -> SessionId {
    let mut e = [0x5d; 10];
    e[1] = set;
    e[2..6].copy_from_slice(&i.to_le_bytes());
    SessionId::from_entropy(&e)
}

/// Health, contiguity, every reported append present, all-or-nothing segments; returns the
/// number of events per session.
fn check_store(url: &str, schema: &str, reports: &[Report]) -> BTreeMap<String, u64> {
    let backend = PostgresBackend::connect(url, schema).unwrap();
    let listed: BTreeSet<String> = backend
        .list_sessions()
        .unwrap()
        .iter()
        .map(|s| s.as_str().to_owned())
        .collect();
    let mut events: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for name in &listed {
        let session = SessionId::parse(name).unwrap();
        let loaded = backend.load(&session).unwrap();
        assert_eq!(
            loaded.health,
            SessionHealth::Healthy,
            "session {name} is not healthy"
        );
        let ids: Vec<String> = loaded
            .events()
            .all()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, e)| {
                assert_eq!(e.event_index().get(), i as u64, "session {name}: a gap");
                e.event_id().to_string()
            })
            .collect();
        events.insert(name.clone(), ids);
    }
    for r in reports {
        let ids = events
            .get(&r.session)
            .unwrap_or_else(|| panic!("reported session {} is not listed", r.session));
        assert_eq!(
            ids.get(r.index as usize),
            Some(&r.event_id),
            "a reported append is missing: {r:?}"
        );
    }

    // All or nothing, in the rows themselves.
    let counts = plans_are_whole(&Sql::connect(url), schema);
    for (session, count) in &counts {
        assert_eq!(
            events.get(session).map(Vec::len),
            Some(*count as usize),
            "session {session}: the load and the rows disagree"
        );
    }
    counts
}

/// A fresh driver appends one advance to each of `sessions` sessions of `set`, all new.
fn check_new_appends(
    url: &str,
    schema: &str,
    set: u8,
    sessions: u32,
    before: &BTreeMap<String, u64>,
) {
    let spec = DriverSpec {
        url,
        schema,
        set,
        sessions,
        appends: 2 * u64::from(sessions),
        round_robin: true,
        home: None,
    };
    let outcome = spec.spawn(999_999).wait(Duration::from_secs(30));
    assert!(
        outcome.status.success(),
        "a new append after the faults failed: {}",
        outcome.stderr
    );
    let advances = &outcome.reports[sessions as usize..];
    assert_eq!(advances.len(), sessions as usize);
    let mut after = before.clone();
    for r in advances {
        assert_eq!(r.fresh, 3, "the new advance was not all new: {r:?}");
        let count = after.entry(r.session.clone()).or_insert(0);
        assert_eq!(
            r.index,
            *count + 2,
            "the new advance is not at the end: {r:?}"
        );
        *count += 3;
    }
    assert_eq!(check_store(url, schema, &outcome.reports), after);
}

/// Every session of the set that a driver touched: the oracle over all of them.
fn check_all(
    url: &str,
    schema: &str,
    set: u8,
    sessions: u32,
    reports: &[Report],
) -> BTreeMap<String, u64> {
    let counts = check_store(url, schema, reports);
    for name in counts.keys() {
        assert!(
            (0..sessions).any(|i| session_id(set, i).as_str() == name),
            "an unexpected session {name}"
        );
    }
    check_new_appends(url, schema, set, sessions, &counts);
    counts
}

// ---------------------------------------------------------------------------------------------
// 1. kill -9 of WorkRail processes mid-append.

/// Several rounds of three drivers on the same four sessions, each `kill -9`ed at a seeded
/// random moment: nothing they reported is lost, nothing is half-written, every session stays
/// healthy and appendable.
#[test]
fn drivers_killed_mid_append_lose_nothing_they_reported() {
    let test = "drivers_killed";
    let Some(url) = postgres_url(test) else {
        return;
    };
    let schema = Schema::new(&url, test);
    let mut rng = Rng::seeded(test);
    let spec = DriverSpec {
        url: &url,
        schema: &schema.name,
        set: 1,
        sessions: 4,
        appends: 0,
        round_robin: false,
        home: None,
    };
    let mut reports = Vec::new();
    let mut killed_with_reports = 0;
    for round in 0..4u32 {
        let drivers: Vec<(Duration, Driver)> = (0..3)
            .map(|k| (rng.millis(150, 900), spec.spawn(round * 10 + k)))
            .collect();
        let start = Instant::now();
        let mut drivers = drivers;
        drivers.sort_by_key(|(at, _)| *at);
        for (at, driver) in drivers {
            if let Some(left) = at.checked_sub(start.elapsed()) {
                std::thread::sleep(left);
            }
            let outcome = driver.kill9();
            assert!(
                outcome.status.code().is_none(),
                "a driver exited before it was killed: {:?} {}",
                outcome.status,
                outcome.stderr
            );
            killed_with_reports += usize::from(!outcome.reports.is_empty());
            reports.extend(outcome.reports);
        }
    }
    eprintln!(
        "{test}: {} appends reported by 12 drivers ({killed_with_reports} killed after reporting)",
        reports.len()
    );
    assert!(
        killed_with_reports >= 6,
        "too few drivers got to append before being killed"
    );
    check_all(&url, &schema.name, 1, 4, &reports);
}

// ---------------------------------------------------------------------------------------------
// 3. Connections terminated mid-append.

/// Three drivers append while their connections are terminated (`pg_terminate_backend`) every
/// few tens of milliseconds for 10 s: the drivers retry and finish, and the store is whole.
#[test]
fn connections_terminated_mid_append_lose_nothing() {
    let test = "connections_terminated";
    let Some(url) = postgres_url(test) else {
        return;
    };
    let schema = Schema::new(&url, test);
    let mut rng = Rng::seeded(test);
    let spec = DriverSpec {
        url: &url,
        schema: &schema.name,
        set: 3,
        sessions: 3,
        appends: 40,
        round_robin: false,
        home: None,
    };
    let drivers: Vec<Driver> = (0..3).map(|k| spec.spawn(300 + k)).collect();
    let sql = Sql::connect(&url);
    let target = format!(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'workrail-main:{}') t",
        schema.name
    );
    let mut terminated = 0i64;
    let mut outcomes = Vec::new();
    let mut drivers = drivers;
    // Terminations stop after a while so that a slow machine, where an append and a reconnect
    // take longer than the gap between two terminations, still finishes: what is judged is that
    // every append survives the terminations, not how fast the drivers recover.
    let started = Instant::now();
    let storm = Duration::from_secs(10);
    let deadline = started + Duration::from_secs(120);
    while !drivers.is_empty() {
        std::thread::sleep(rng.millis(20, 80));
        if started.elapsed() < storm {
            terminated += sql.rows(&target)[0].get::<_, i64>(0);
        }
        let mut running = Vec::new();
        for mut driver in drivers {
            if driver.child.try_wait().unwrap().is_some() {
                outcomes.push(driver.finish());
            } else {
                running.push(driver);
            }
        }
        drivers = running;
        assert!(
            Instant::now() < deadline,
            "the drivers did not finish in 120 s (terminations stopped after 10 s)"
        );
    }
    let mut reports = Vec::new();
    let (mut retries, mut unknown) = (0, 0);
    for outcome in outcomes {
        assert!(
            outcome.status.success(),
            "a driver gave up: {:?} {}",
            outcome.status,
            outcome.stderr
        );
        assert_eq!(outcome.reports.len(), 40);
        retries += outcome.retries();
        unknown += outcome.unknown_commits();
        reports.extend(outcome.reports);
    }
    eprintln!(
        "{test}: {terminated} connections terminated during 120 appends; the drivers retried {retries} calls ({unknown} after a COMMIT of unknown outcome)"
    );
    assert!(retries > 0, "no termination ever hit a driver's call");
    assert!(
        terminated >= 5,
        "too few connections were terminated to mean anything"
    );
    check_all(&url, &schema.name, 3, 3, &reports);
}

// ---------------------------------------------------------------------------------------------
// 4. Two "machines" on one database.

/// Two drivers with separate working and data directories append to the same sessions of one
/// database: the session lock serializes them (both append to shared sessions, every append
/// commits), and the events committed are exactly the sum of the new events each reported.
#[test]
fn two_machines_on_one_database_serialize_on_the_lock() {
    let test = "two_machines";
    let Some(url) = postgres_url(test) else {
        return;
    };
    let schema = Schema::new(&url, test);
    let homes = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let drivers: Vec<Driver> = homes
        .iter()
        .enumerate()
        .map(|(k, home)| {
            DriverSpec {
                url: &url,
                schema: &schema.name,
                set: 4,
                sessions: 3,
                appends: 40,
                round_robin: false,
                home: Some(home.path()),
            }
            .spawn(400 + k as u32)
        })
        .collect();
    let mut reports = Vec::new();
    let mut by_driver: Vec<BTreeSet<String>> = Vec::new();
    for driver in drivers {
        let outcome = driver.wait(Duration::from_secs(30));
        assert!(
            outcome.status.success(),
            "a machine failed: {}",
            outcome.stderr
        );
        assert_eq!(outcome.reports.len(), 40);
        by_driver.push(
            outcome
                .reports
                .iter()
                .filter(|r| r.fresh > 0)
                .map(|r| r.session.clone())
                .collect(),
        );
        reports.extend(outcome.reports);
    }
    assert!(
        by_driver[0].intersection(&by_driver[1]).next().is_some(),
        "the two machines never appended to the same session"
    );
    let counts = check_store(&url, &schema.name, &reports);
    let total: u64 = counts.values().sum();
    let reported: u64 = reports.iter().map(|r| r.fresh).sum();
    assert_eq!(
        total, reported,
        "the events committed differ from the sum of the events the machines reported"
    );
    eprintln!("{test}: {total} events from 80 appends of two machines");
    check_all(&url, &schema.name, 4, 3, &reports);
}

// ---------------------------------------------------------------------------------------------
// 2. The database server killed mid-transaction (a cluster of the test's own,
// `workrail_harness::pg_cluster`).

/// Three drivers append while the server is crashed and restarted, three times (twice
/// `pg_ctl stop -m immediate`, once `kill -9` of the postmaster): whatever a driver reported survived, no plan is half there, and
/// every session is healthy and appendable afterwards.
#[test]
fn server_killed_mid_transaction_keeps_every_plan_whole() {
    let test = "server_killed";
    let Some(cluster) = own_cluster(test) else {
        return;
    };
    let url = cluster.url();
    let mut rng = Rng::seeded(test);
    let spec = DriverSpec {
        url: &url,
        schema: "wrf_server_killed",
        set: 2,
        sessions: 4,
        appends: 0,
        round_robin: false,
        home: None,
    };
    // Migrate first, so no driver dies on a server that goes away during its first connect.
    drop(PostgresBackend::connect(&url, spec.schema).unwrap());
    let drivers: Vec<Driver> = (0..3).map(|k| spec.spawn(200 + k)).collect();
    for round in 0..3 {
        std::thread::sleep(rng.millis(300, 800));
        if round == 1 {
            cluster.kill_postmaster();
        } else {
            cluster.stop_immediate();
        }
        std::thread::sleep(rng.millis(50, 300));
        cluster.restart();
    }
    std::thread::sleep(Duration::from_millis(400));
    let mut reports = Vec::new();
    let mut survived = 0;
    let (mut retries, mut unknown) = (0, 0);
    for driver in drivers {
        let outcome = driver.kill9();
        retries += outcome.retries();
        unknown += outcome.unknown_commits();
        // A driver may give up during an outage (status 2); nothing else is acceptable.
        match outcome.status.code() {
            None => survived += 1,
            Some(2) => eprintln!("{test}: a driver gave up: {}", outcome.stderr.trim()),
            Some(_) => panic!("a driver failed: {:?} {}", outcome.status, outcome.stderr),
        }
        reports.extend(outcome.reports);
    }
    eprintln!(
        "{test}: {} appends reported across 3 server crashes, {survived} of 3 drivers still running; they retried {retries} calls ({unknown} after a COMMIT of unknown outcome)",
        reports.len()
    );
    assert!(!reports.is_empty());
    assert!(retries > 0, "no crash ever hit a driver's call");
    check_all(&url, spec.schema, 2, 4, &reports);
}

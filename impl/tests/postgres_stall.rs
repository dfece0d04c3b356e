//! A stalled PostgreSQL server never hangs a call without bound (decision D110): the server
//! processes serving a `Workrail`'s backend are stopped with `SIGSTOP`, the next call must come
//! back within a few seconds as a retryable `STORE_IO_ERROR` saying the database did not answer;
//! after `SIGCONT` the same call is retried and works, the session loads healthy from a fresh
//! backend with exactly the events of the calls that succeeded (nothing half-committed), and the
//! abandoned server processes are gone (their connections were closed, so their transactions
//! rolled back).
//!
//! Guards against: a statement or a read with no bound (a driver stuck for as long as the
//! server is stopped), a timeout that leaves the stalled connection in use (every later call
//! would stall too), and a timeout answered as a non-retryable or filesystem error.
//!
//! Needs `WORKRAIL_TEST_POSTGRES=postgres://…` (`source .ci/postgres.sh`) and the right to
//! signal the server's processes; without the URL the tests say why and pass, except under
//! `CI`, where they fail. Each test uses a schema of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::postgres_support;
use crate::protocol_support;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use postgres_support::{Schema, postgres_url};
use protocol_support::{ack, catalog, start};
use workrail::entropy::SeededEntropy;
use workrail::protocol::Workrail;
use workrail::store::SessionBackend;
use workrail::store::Store;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail::store::postgres::PostgresBackend;
use workrail_spec::error::{ErrorCode, Retry};
use workrail_spec::ids::SessionId;

impl Schema {
    fn query_pids(&self, sql: &str) -> Vec<i32> {
        self.with_client(async |c| {
            let rows = c.query(sql, &[]).await.unwrap();
            rows.iter().map(|r| r.get(0)).collect()
        })
    }

    /// The server processes serving this schema's backends (their `application_name` is
    /// `workrail-<role>:<schema>`).
    fn backend_pids(&self) -> Vec<i32> {
        self.query_pids(&format!(
            "SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'workrail-%:{}'",
            self.name
        ))
    }
}

/// Stopped server processes, continued when dropped (so a failed assertion never leaves the
/// shared cluster with stopped processes).
struct Stopped(Vec<i32>);

impl Stopped {
    fn stop(pids: Vec<i32>) -> Self {
        for pid in &pids {
            signal("-STOP", *pid);
        }
        Self(pids)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        for pid in &self.0 {
            signal("-CONT", *pid);
        }
    }
}

/// The parent of a server process: the postmaster.
fn parent_of(pid: i32) -> i32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

fn signal(which: &str, pid: i32) {
    let status = Command::new("kill")
        .args([which, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {which} {pid} failed");
}

fn workrail(schema: &Schema, limit: Duration) -> Workrail {
    // One worker: a stall closes the connections of the worker that met it (D110), and with one
    // every connection the backend holds is that worker's. With more, a worker the stalled call
    // never reached keeps its idle connection, served again once the server continues: since
    // D212 a call's keyring read goes to its session's worker, so the first worker's connection
    // (made at start) may be one.
    let backend = PostgresBackend::connect_with(&schema.url, &schema.name, limit, 1).unwrap();
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    Workrail::with_store(
        fs,
        Store::postgres(backend),
        catalog(),
        Arc::new(SeededEntropy::new(7)),
    )
    .unwrap()
}

#[test]
fn a_stopped_server_is_a_timely_retryable_error_and_the_session_recovers() {
    let Some(url) = postgres_url("a_stopped_server_is_a_timely_retryable_error", "stall") else {
        return;
    };
    let schema = Schema::new(&url, "wrs");
    let wr = workrail(&schema, Duration::from_secs(1));
    let first = start(&wr, "wr.coding_task");
    let session: SessionId = first.session.session_id.clone();
    let second = wr
        .continue_workflow(ack(&first, "Step 0 done.", vec![]))
        .unwrap();

    let pids = schema.backend_pids();
    assert!(!pids.is_empty(), "no server process serves the backend");
    // The postmaster too, so that no fresh connection gets around the stopped ones.
    let mut stop = pids.clone();
    stop.push(parent_of(pids[0]));
    let stopped = Stopped::stop(stop);
    let began = Instant::now();
    let err = wr
        .continue_workflow(ack(&second, "Step 1 done.", vec![]))
        .expect_err("a call to a stopped server answered");
    let took = began.elapsed();
    eprintln!("the stalled call answered after {took:?}: {}", err.message);
    assert!(
        took < Duration::from_secs(6),
        "the stalled call took {took:?} (bound 1 s)"
    );
    assert_eq!(err.code, ErrorCode::StoreIoError, "{err:?}");
    assert_ne!(err.retry, Retry::NotRetryable, "{err:?}");
    assert!(
        err.message.contains("did not answer"),
        "the message does not say the database did not answer: {}",
        err.message
    );
    assert!(
        err.suggestion.contains("WORKRAIL_STORE_TIMEOUT_MS"),
        "{}",
        err.suggestion
    );
    drop(stopped);

    // The same call again works once the server runs.
    let third = wr
        .continue_workflow(ack(&second, "Step 1 done.", vec![]))
        .unwrap();
    wr.continue_workflow(ack(&third, "Step 2 done.", vec![]))
        .unwrap();

    // The abandoned server processes end (their sockets were closed): nothing they began stays.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let alive: Vec<i32> = schema
            .backend_pids()
            .into_iter()
            .filter(|p| pids.contains(p))
            .collect();
        if alive.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "stopped server processes {alive:?} still serve the backend"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // A fresh backend finds the session healthy with the events of the calls that succeeded,
    // exactly as the file store has them after the same calls.
    let fresh = PostgresBackend::connect(&schema.url, &schema.name).unwrap();
    let loaded = fresh.load(&session).unwrap();
    assert!(loaded.health.is_healthy(), "{:?}", loaded.health);
    let files = protocol_support::open(&MemFs::new());
    let f1 = start(&files, "wr.coding_task");
    let f2 = files
        .continue_workflow(ack(&f1, "Step 0 done.", vec![]))
        .unwrap();
    let f3 = files
        .continue_workflow(ack(&f2, "Step 1 done.", vec![]))
        .unwrap();
    files
        .continue_workflow(ack(&f3, "Step 2 done.", vec![]))
        .unwrap();
    let expected = protocol_support::session_events(&files, &f1);
    assert_eq!(
        loaded.event_count(),
        expected.len(),
        "the stalled call left events behind or lost some"
    );
}

//! The database killed mid-advance under real `workrail mcp` servers (issue 19): the kill storm's
//! clients keep advancing, replaying, forking and starting runs on servers that all share one
//! PostgreSQL schema, while [`DatabaseFaults`] kills the database server at seeded moments and
//! brings it back on the same data directory and port. No WorkRail server is ever restarted.
//!
//! Beside the oracle of every scenario ([`super::finish`]), the outage's own:
//!
//! - a call during an outage answers `STORE_IO_ERROR`, retryable, naming the database (not the
//!   disk) and saying to retry ([`outage_error_problem`]; otherwise `unclear_outage_errors`); the client
//!   sends the same call again, after the delay its `retry` names, until the database is back;
//! - an ack retried that way answers once (a replay of what had committed, or its commit now):
//!   the ledger's `duplicate_attempts` and `lost_events` judge it (`outage_retried_acks` counts
//!   them);
//! - every server outlives every outage: none dies or is started again, and once the database is
//!   back each one answers a call at the first try (otherwise `servers_down`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::json;
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};

use super::{Answer, Config, Lab, Report, Rng, Slot, finish, lock, slots, storm_client};

/// Takes the shared database down and brings it back (`crate::pg_cluster::Cluster` is one).
pub trait DatabaseFaults: Sync {
    /// Kills the database server (or part of it) in outage `round`; says what was killed.
    fn kill(&self, round: u64, rng: &mut Rng) -> Result<String, String>;
    /// Brings it back on the same data directory and port; returns once it accepts
    /// connections.
    fn restore(&self) -> Result<(), String>;
}

/// The faults of one [`db_outage`] run.
pub struct Outages<'a> {
    pub faults: &'a dyn DatabaseFaults,
    /// Planted: during the first outage the harness itself kills one WorkRail server, as a
    /// server that dies with its database would; the checks must count it.
    pub plant_server_death: bool,
}

impl std::fmt::Debug for Outages<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outages")
            .field("plant_server_death", &self.plant_server_death)
            .finish_non_exhaustive()
    }
}

/// Up-time before each kill and down-time before each restore, in milliseconds.
const UP_MS: (u64, u64) = (300, 1000);
const DOWN_MS: (u64, u64) = (100, 800);
/// No kill starts later than this before the driving ends (clients keep retrying past the end
/// until the database is back).
const LAST_KILL_BEFORE_END: Duration = Duration::from_millis(1500);
/// The longest an outage error may ask a client to wait.
const LONGEST_RETRY_WAIT: Duration = Duration::from_secs(5);
/// A client retrying without a delay waits this long (it is free to retry at once).
const IMMEDIATE_RETRY: Duration = Duration::from_millis(50);

/// Why a `STORE_IO_ERROR` answered during a database outage is not the clear, retryable error a
/// client can act on: retryable (at once or after a delay), its suggestion saying to retry, the
/// message or the suggestion naming the database as the cause, and neither sending the reader to
/// the filesystem or the disk. `None` when it is.
pub fn outage_error_problem(envelope: &ErrorEnvelope) -> Option<String> {
    let mut problems = Vec::new();
    if envelope.code != ErrorCode::StoreIoError {
        problems.push(format!("code {} (STORE_IO_ERROR expected)", envelope.code));
    }
    if matches!(envelope.retry, Retry::NotRetryable) {
        problems.push("marked not retryable".to_owned());
    }
    if !envelope.suggestion.to_lowercase().contains("retry") {
        problems.push("the suggestion does not say to retry".to_owned());
    }
    let text = format!("{} {}", envelope.message, envelope.suggestion).to_lowercase();
    if !text.contains("database") && !text.contains("postgresql") {
        problems.push("neither message nor suggestion names the database".to_owned());
    }
    // The data directory holds no session on PostgreSQL: a text that sends the reader to the
    // filesystem or the disk sends them the wrong way (the data directory may still be named,
    // e.g. as where the file store would keep sessions instead).
    for misleading in ["filesystem", "disk"] {
        if text.contains(misleading) {
            problems.push(format!("it blames the {misleading}"));
        }
    }
    (!problems.is_empty()).then(|| {
        format!(
            "{}: {:?} / {:?}",
            problems.join(", "),
            envelope.message,
            envelope.suggestion
        )
    })
}

impl Lab {
    /// Counts a storage error of an outage; how long to wait before sending the same call
    /// again, or `None` (counted as unclear) when it must not be retried.
    pub(super) fn outage_error(&self, tool: &str, envelope: &ErrorEnvelope) -> Option<Duration> {
        let mut book = self.book();
        if let Some(problem) = outage_error_problem(envelope) {
            book.report.unclear_outage_errors += 1;
            book.report
                .sample(format!("{tool} during an outage: {problem}"));
            return None;
        }
        book.report.outage_errors += 1;
        Some(match envelope.retry {
            Retry::RetryableAfterMs { after_ms } => {
                Duration::from_millis(after_ms).min(LONGEST_RETRY_WAIT)
            }
            Retry::RetryableImmediate | Retry::NotRetryable => IMMEDIATE_RETRY,
        })
    }
}

/// Scenario 4 (PostgreSQL only): the database killed and brought back several times while the
/// servers keep serving; see the module docs.
pub fn db_outage(config: &Config, outages: &Outages<'_>) -> Result<Report, String> {
    if config.postgres.is_none() {
        return Err("db_outage runs on PostgreSQL only (Config::on_postgres)".to_owned());
    }
    let n = config.half();
    let mut lab = Lab::new(config, "db_outage", n)?;
    lab.outages = true;
    let slots = slots(n, &lab)?;
    lab.start_driving(config.run_for);
    let mut rng = Rng::new(config.seed);
    let first_kind = rng.below(2);
    let faulted = Mutex::new(Ok(()));
    std::thread::scope(|scope| {
        let (lab, slots, faulted) = (&lab, &slots, &faulted);
        let mut fault_rng = rng.split();
        scope.spawn(move || {
            let result = strike(lab, slots, outages, first_kind, &mut fault_rng);
            *lock(faulted) = result;
        });
        for (client, slot) in slots.iter().enumerate() {
            let mut rng = rng.split();
            scope.spawn(move || storm_client(lab, client, slot, &mut rng));
        }
    });
    if let Err(e) = std::mem::replace(&mut *lock(&faulted), Ok(())) {
        lab.other(e);
    }
    answer_after_outages(&lab, &slots);
    let mut report = finish(&lab, &slots)?;
    // Every server the harness had to start again (the first start of each slot aside).
    report.servers_down += slots
        .iter()
        .map(|slot| {
            slot.spawns
                .load(std::sync::atomic::Ordering::SeqCst)
                .saturating_sub(1)
        })
        .sum::<u64>();
    Ok(report)
}

/// The fault thread: kills and restores the database until shortly before the driving ends,
/// and leaves it up.
fn strike(
    lab: &Lab,
    slots: &[Slot],
    outages: &Outages<'_>,
    first_kind: u64,
    rng: &mut Rng,
) -> Result<(), String> {
    let millis =
        |rng: &mut Rng, (lo, hi): (u64, u64)| Duration::from_millis(lo + rng.below(hi - lo));
    for round in 0.. {
        std::thread::sleep(millis(rng, UP_MS));
        if lab.deadline.saturating_duration_since(Instant::now()) < LAST_KILL_BEFORE_END {
            return Ok(());
        }
        let killed_at = Instant::now();
        let what = outages.faults.kill(first_kind + round, rng)?;
        lab.book().report.db_kills += 1;
        if round == 0 && outages.plant_server_death {
            // Planted: a server that exits when its database goes away (the harness does not
            // mark it as killed, so the death is the server's own).
            if let Some(slot) = slots.first()
                && let Some(conn) = lock(&slot.conn).as_ref()
            {
                let _ = lock(&conn.child).kill();
            }
        }
        std::thread::sleep(millis(rng, DOWN_MS));
        outages.faults.restore()?;
        lab.book().report.faults.push(format!(
            "{what}; back after {} ms",
            killed_at.elapsed().as_millis()
        ));
    }
    Ok(())
}

/// Once the database is back for good, every server (the same process as at the start) answers
/// a rehydrate of its client's latest stateToken, or `resume_session`, at the first try.
fn answer_after_outages(lab: &Lab, slots: &[Slot]) {
    for (client, slot) in slots.iter().enumerate() {
        let conn = lock(&slot.conn).clone();
        let Some(conn) = conn.filter(|c| !c.is_dead()) else {
            let mut book = lab.book();
            book.report.servers_down += 1;
            book.report
                .sample(format!("server {client} is not running after the outages"));
            continue;
        };
        let token = lab
            .book()
            .latest
            .iter()
            .rev()
            .find(|((c, _), _)| *c == client)
            .map(|(_, token)| token.clone());
        let (tool, args) = match token {
            Some(token) => ("continue_workflow", json!({"stateToken": token})),
            None => ("resume_session", json!({})),
        };
        lab.book().report.calls += 1;
        let problem = match conn.call(tool, &args) {
            Ok(Answer::Ok(_)) => None,
            Ok(Answer::Err(e)) => Some(format!("{}: {}", e.code, e.message)),
            Err(e) => Some(format!("{e:?}")),
        };
        if let Some(problem) = problem {
            let mut book = lab.book();
            book.report.servers_down += 1;
            book.report.sample(format!(
                "server {client} did not answer {tool} once the database was back: {problem}"
            ));
        }
    }
}

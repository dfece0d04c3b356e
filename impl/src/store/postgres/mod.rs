//! The PostgreSQL session backend (issue 19): the [`SessionBackend`] seam over one PostgreSQL
//! schema. `impl/docs/store.md` "PostgreSQL" describes it.
//!
//! - **Threads (D98, D203).** The protocol is synchronous and runs inside the MCP server's
//!   tokio runtime, where blocking on another runtime would panic. The backend therefore owns
//!   worker threads, each running its own current-thread runtime and connections; each trait
//!   method sends a request over a channel to one of them and waits for the reply. A session's
//!   requests always go to the same worker (by its lock key), objects and the keyring to the
//!   worker of the session the calling thread last worked on (D212), so requests of different
//!   sessions run side by side while one session's keep their order.
//! - **Rows (D96).** Events and manifest records are stored one per row as the exact canonical
//!   text the file store writes as a line, so the manifest records (segment bounds, sha256 and
//!   byte counts of the segment text) are identical in both backends.
//! - **The append (D97)** is one transaction under `pg_try_advisory_xact_lock` of the session,
//!   retried for the bounded wait: health check, events, `segment_closed` and the pins commit
//!   together or not at all.
//! - **Health (D99)** is judged by the file store's own validator over an in-memory image of the
//!   rows (segments rebuilt from the events a `segment_closed` names), so every rule and every
//!   reason is the same.
//!
//! One job per module: this one holds the backend handle (connecting, the timeout, errors, the
//! seam's trait); `worker` the thread, its connections and the dispatch of requests; `read`
//! loading rows and lengths; `health` the validator over them; `append` the append transaction,
//! gates and lock guards as the thread runs them; `gate` the append gate and the session cache
//! as the caller holds them; `objects` snapshots, workflows and artifacts; `keyring` the keyring
//! row; `gc` GC's queries; `derived` derived rows (the resume index); `schema` the migrations;
//! `tls` the connector.

mod append;
mod derived;
mod gate;
mod gc;
mod health;
mod keyring;
mod objects;
mod read;
mod schema;
mod segments;
pub mod tls;
mod worker;

pub use derived::RESUME_INDEX_ROW;
pub use gate::PgGate;
pub use gc::{Deleted, Swept};
pub use schema::{MIGRATIONS, SCHEMA_VERSION, valid_schema_name};

use std::cell::Cell;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_postgres::Config;
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::ids::{SessionId, SnapshotRef, WorkflowHash};
use workrail_spec::snapshot::ExecutionSnapshotFileV1;

use super::backend::{SessionBackend, SessionLock};
use super::error::StoreError;
use super::event_log::{DEFAULT_RESIDENT_EVENTS, MIN_RESIDENT_EVENTS, Residency};
use super::keyring::Keyring;
use super::load::LoadedSession;
use super::session::{AppendPlan, AppendedEvent, DEFAULT_LOCK_WAIT};
use crate::entropy::Entropy;
use append::HeldLock;
use health::validate;
use worker::{Place, Reply, Request, run_worker};

/// The schema used when none is named.
pub const DEFAULT_SCHEMA: &str = "workrail";

/// How long connecting may take before it is an I/O error.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The variable bounding how long one call may wait for the database, in milliseconds.
pub const TIMEOUT_ENV: &str = "WORKRAIL_STORE_TIMEOUT_MS";

/// How long one call may wait for the database when [`TIMEOUT_ENV`] is unset (D110).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The variable naming how many worker threads (each with its own connections) a process runs.
pub const WORKERS_ENV: &str = "WORKRAIL_STORE_WORKERS";

/// Workers when [`WORKERS_ENV`] is unset (D203): enough that one HTTP server's agents overlap
/// their round trips, few enough that a data directory's servers stay far below PostgreSQL's
/// default of 100 connections (a worker connects only when a request first reaches it).
pub const DEFAULT_WORKERS: usize = 8;

/// The most workers [`WORKERS_ENV`] may ask for.
pub const MAX_WORKERS: usize = 32;

/// The value of [`WORKERS_ENV`], or [`DEFAULT_WORKERS`] when it is unset or empty; anything
/// but a whole number from 1 to [`MAX_WORKERS`] is an error naming the variable.
pub fn workers_from_env() -> Result<usize, StoreError> {
    parse_workers(std::env::var(WORKERS_ENV).ok().as_deref())
}

/// [`workers_from_env`] over the variable's value.
fn parse_workers(value: Option<&str>) -> Result<usize, StoreError> {
    match value {
        Some(text) if !text.trim().is_empty() => match text.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_WORKERS).contains(&n) => Ok(n),
            _ => Err(StoreError::Io {
                session: None,
                op: "read WORKRAIL_STORE_WORKERS",
                detail: format!(
                    "{WORKERS_ENV}={text:?} is not a number of worker threads from 1 to {MAX_WORKERS}; unset it for the default of {DEFAULT_WORKERS}"
                ),
            }),
        },
        _ => Ok(DEFAULT_WORKERS),
    }
}

/// The bound of [`TIMEOUT_ENV`], or [`DEFAULT_TIMEOUT`] when it is unset or empty; anything
/// but a whole number of milliseconds from 100 to 3,600,000 is an error naming the variable.
pub fn timeout_from_env() -> Result<Duration, StoreError> {
    match std::env::var(TIMEOUT_ENV) {
        Ok(text) if !text.trim().is_empty() => match text.trim().parse::<u64>() {
            Ok(ms) if (100..=3_600_000).contains(&ms) => Ok(Duration::from_millis(ms)),
            _ => Err(StoreError::Io {
                session: None,
                op: "read WORKRAIL_STORE_TIMEOUT_MS",
                detail: format!(
                    "{TIMEOUT_ENV}={text:?} is not a number of milliseconds from 100 to 3600000; unset it for the default of 10000"
                ),
            }),
        },
        _ => Ok(DEFAULT_TIMEOUT),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Bounds every connection of `config` (D110): the server cancels a statement, a lock wait or
/// an abandoned transaction after `limit`, and TCP keepalives and `tcp_user_timeout` end a
/// connection to a peer that went silent.
fn bound_config(config: &mut Config, limit: Duration) {
    let ms = millis(limit);
    let bounds = format!(
        "-c statement_timeout={ms} -c lock_timeout={ms} -c idle_in_transaction_session_timeout={}",
        ms.saturating_mul(6)
    );
    let options = match config.get_options() {
        Some(given) if !given.trim().is_empty() => format!("{given} {bounds}"),
        _ => bounds,
    };
    config.options(options);
    let probe = (limit / 2).max(Duration::from_secs(1));
    config
        .keepalives(true)
        .keepalives_idle(probe)
        .keepalives_interval(probe)
        .keepalives_retries(2)
        .tcp_user_timeout(limit);
}

/// A PostgreSQL error as a store error: retryable I/O (`STORE_IO_ERROR`), with the server's
/// SQLSTATE and message when it sent one. Never a panic.
pub(crate) fn sql_error(op: &'static str) -> impl Fn(tokio_postgres::Error) -> StoreError {
    move |e| StoreError::Database {
        session: None,
        op,
        detail: describe(&e),
    }
}

fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text.push_str(": ");
                text.push_str(&s.to_string());
                source = s.source();
            }
            text
        }
    }
}

fn stopped() -> StoreError {
    StoreError::Database {
        session: None,
        op: "reach the PostgreSQL backend",
        detail: "the backend's connection thread has stopped".into(),
    }
}

/// The advisory lock key of a session: the first 8 bytes of a SHA-256 of the schema and id.
fn lock_key(schema: &str, session: &SessionId) -> i64 {
    let digest = Sha256::digest(format!("workrail-session-lock:{schema}:{session}").as_bytes());
    let mut key = [0u8; 8];
    key.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(key)
}

/// The worker that handed out the gate or lock `id` (see [`Place::id`]).
fn spread_id(id: u64, count: usize) -> usize {
    (id % count.max(1) as u64) as usize
}

/// Tells one backend of a process from another (the thread's last worker names its backend).
static BACKEND_IDS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The backend and worker this thread last sent a session's request to (D212).
    static LAST_SESSION_WORKER: Cell<Option<(u64, usize)>> = const { Cell::new(None) };
}

/// The session store in one PostgreSQL schema.
pub struct PostgresBackend {
    /// This backend among the process's, for [`LAST_SESSION_WORKER`].
    id: u64,
    /// One channel per worker thread; empty once the backend is dropped.
    requests: Vec<mpsc::UnboundedSender<Request>>,
    workers: Vec<JoinHandle<()>>,
    /// How long one call may wait for the database (D110).
    limit: Duration,
    schema: String,
    lock_wait: Duration,
    /// Validated sessions this process loaded or committed (D94's budget, newest kept).
    sessions: super::object_cache::ObjectCache<SessionId, LoadedSession>,
    /// How a loaded session keeps its events: its newest parsed, the others read again from
    /// their rows (D227).
    residency: Residency,
}

impl fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("schema", &self.schema)
            .field("lock_wait", &self.lock_wait)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresBackend {
    fn drop(&mut self) {
        // Lock guards still hold senders, so the channels may stay open: ask each worker to
        // stop. Its connections close with it, which releases every lock they held.
        for requests in std::mem::take(&mut self.requests) {
            // A send fails only when the worker has already stopped: nothing to ask.
            let _ = requests.send(Request::Shutdown);
        }
        for worker in std::mem::take(&mut self.workers) {
            if worker.join().is_err() {
                tracing::warn!(
                    "a PostgreSQL backend thread panicked; its connections closed with it, which releases every lock they held"
                );
            }
        }
    }
}

impl PostgresBackend {
    /// Connects to `url` (`postgres://…`, TLS as its `sslmode` asks, D114), creates `schema` if needed and
    /// migrates it to [`SCHEMA_VERSION`]. A schema newer than this build is refused.
    pub fn connect(url: &str, schema: &str) -> Result<Self, StoreError> {
        Self::connect_with(url, schema, timeout_from_env()?, workers_from_env()?)
    }

    /// [`Self::connect`] with every call bounded by `limit` instead of [`TIMEOUT_ENV`]: a call
    /// the database does not answer in time is [`StoreError::Unanswered`] (retryable), and the
    /// backend's connections are closed and reopened by the next call (D110).
    pub fn connect_with_timeout(
        url: &str,
        schema: &str,
        limit: Duration,
    ) -> Result<Self, StoreError> {
        Self::connect_with(url, schema, limit, workers_from_env()?)
    }

    /// [`Self::connect_with_timeout`] with `workers` worker threads (at least one). The first
    /// connects and migrates the schema before the others start; the others connect when a
    /// request first reaches them.
    pub fn connect_with(
        url: &str,
        schema: &str,
        limit: Duration,
        workers: usize,
    ) -> Result<Self, StoreError> {
        let op = "connect to PostgreSQL";
        if !valid_schema_name(schema) {
            return Err(StoreError::Io {
                session: None,
                op,
                detail: format!(
                    "schema name {schema:?} is not a lower-case identifier ([a-z_][a-z0-9_]*)"
                ),
            });
        }
        let (url, tls) = tls::split_url(url).map_err(|detail| StoreError::Io {
            session: None,
            op,
            detail,
        })?;
        let connector = tls::connector(&tls).map_err(|detail| StoreError::Io {
            session: None,
            op,
            detail,
        })?;
        let mut config = Config::from_str(&url).map_err(sql_error(op))?;
        config.ssl_mode(tls.mode.negotiation());
        config.connect_timeout(CONNECT_TIMEOUT.min(limit));
        bound_config(&mut config, limit);
        let count = workers.clamp(1, MAX_WORKERS);
        let mut backend = Self {
            id: BACKEND_IDS.fetch_add(1, Ordering::Relaxed),
            requests: Vec::with_capacity(count),
            workers: Vec::with_capacity(count),
            schema: schema.to_owned(),
            limit,
            // A lock wait past the call's bound would be a stall, not `Locked`.
            lock_wait: DEFAULT_LOCK_WAIT.min(limit / 2),
            sessions: super::object_cache::ObjectCache::keeping_newest(
                super::object_cache::CacheBudget::default().sessions,
            ),
            residency: Residency::default(),
        };
        for index in 0..count {
            let (requests, receiver) = mpsc::unbounded_channel();
            let (ready, started) = std_mpsc::channel();
            let (config, connector, worker_schema) =
                (config.clone(), connector.clone(), schema.to_owned());
            let place = Place { index, count };
            let worker = std::thread::Builder::new()
                .name(format!("workrail-pg-{schema}-{index}"))
                .spawn(move || {
                    run_worker(
                        config,
                        (connector, tls.mode),
                        worker_schema,
                        limit,
                        place,
                        receiver,
                        ready,
                    )
                })
                .map_err(|e| StoreError::Io {
                    session: None,
                    op,
                    detail: format!("could not start a backend thread: {e}"),
                })?;
            backend.requests.push(requests);
            backend.workers.push(worker);
            // The first worker migrates the schema; the others start once it is in place.
            started.recv().map_err(|_| stopped())??;
        }
        backend.residency = Residency {
            source: Some(Arc::new(segments::PgSegments {
                requests: backend.requests.clone(),
                schema: schema.to_owned(),
            })),
            resident: DEFAULT_RESIDENT_EVENTS,
            recent: Arc::default(),
        };
        Ok(backend)
    }

    /// Keeps at least `resident` (and at most about twice as many) of a loaded session's
    /// newest events parsed; the others are read again from their rows when asked for (D227).
    /// Sessions already cached keep what they hold.
    pub fn set_resident_events(&mut self, resident: usize) {
        self.residency.resident = resident.max(MIN_RESIDENT_EVENTS);
    }

    /// How this backend's loaded sessions keep their events.
    pub(crate) fn residency(&self) -> Residency {
        self.residency.clone()
    }

    /// The same backend waiting at most `wait` for another holder of a session lock.
    pub fn with_lock_wait(mut self, wait: Duration) -> Self {
        self.lock_wait = wait;
        self
    }

    /// Waits at most `wait` for another holder of a session lock.
    pub fn set_lock_wait(&mut self, wait: Duration) {
        self.lock_wait = wait;
    }

    /// Empties the session cache and bounds it by `budget` estimated bytes.
    pub fn set_cache_budget(&mut self, budget: usize) {
        self.sessions = super::object_cache::ObjectCache::keeping_newest(budget);
    }

    /// This process's cache of validated sessions.
    pub fn session_cache(&self) -> &super::object_cache::ObjectCache<SessionId, LoadedSession> {
        &self.sessions
    }

    /// Drops the cached view of `session`.
    pub fn forget_cached(&self, session: &SessionId) {
        self.sessions.remove(session);
    }

    pub fn schema(&self) -> &str {
        &self.schema
    }

    /// How long a held session lock (a lock guard) may stay idle before this backend lets it
    /// go: the database ends a transaction idle for six times the call bound (D110), so a guard
    /// held by hand is released at five (D204).
    pub fn lock_hold_limit(&self) -> Duration {
        self.limit.saturating_mul(5)
    }

    /// How many worker threads this backend runs.
    pub fn workers(&self) -> usize {
        self.requests.len()
    }

    /// The worker that serves `session`'s requests (D203), from 0 to [`Self::workers`] less one.
    pub fn worker_for_session(&self, session: &SessionId) -> usize {
        spread_id(lock_key(&self.schema, session) as u64, self.requests.len())
    }

    /// Sends a request to the worker its subject belongs to ([`Self::worker_of`]) and waits
    /// for the answer.
    fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Request) -> Result<T, StoreError> {
        let (reply, answer) = std_mpsc::channel();
        let request = make(reply);
        let requests = self
            .requests
            .get(self.worker_of(&request))
            .ok_or_else(stopped)?;
        requests.send(request).map_err(|_| stopped())?;
        answer.recv().map_err(|_| stopped())?
    }

    /// The worker that serves this thread's object and keyring requests (D212): the one it last
    /// sent a session's request to, else the first.
    pub fn worker_for_objects(&self) -> usize {
        match LAST_SESSION_WORKER.with(Cell::get) {
            Some((backend, worker)) if backend == self.id && worker < self.requests.len() => worker,
            _ => 0,
        }
    }

    /// The worker a request goes to (D203, D212): a session's requests to one worker, so they
    /// keep their order and a gate's or lock's later requests find its connection (their ids
    /// carry the worker, [`Place::id`]); objects and the keyring to the worker of the session
    /// this thread last worked on ([`Self::worker_for_objects`]), so the calls of many sessions
    /// spread their object and keyring reads over the workers their sessions already use;
    /// the rest (lists, GC's scans, derived rows) to the first. A process serving one session
    /// still uses at most two connections besides its gate's.
    fn worker_of(&self, request: &Request) -> usize {
        let count = self.requests.len();
        match request {
            Request::Append { session, .. }
            | Request::Rows { session, .. }
            | Request::Lock { session, .. }
            | Request::GateOpen { session, .. }
            | Request::Freshness { session, .. }
            | Request::Segment { session, .. }
            | Request::ManifestRows { session, .. }
            | Request::DeleteSession { session, .. } => {
                let worker = self.worker_for_session(session);
                LAST_SESSION_WORKER.with(|last| last.set(Some((self.id, worker))));
                worker
            }
            Request::GateAppend { id, .. }
            | Request::GateClose { id, .. }
            | Request::Unlock { id, .. } => spread_id(*id, count),
            // Each is one statement outside any transaction the caller holds, and the caller
            // waits for its answer before its next request: any worker keeps their order.
            Request::PutObject { .. }
            | Request::GetObject { .. }
            | Request::Keyring { .. }
            | Request::SwapKeyring { .. } => self.worker_for_objects(),
            Request::List { .. }
            | Request::ManifestBytes { .. }
            | Request::Activity { .. }
            | Request::Sweep { .. }
            | Request::ReadDerived { .. }
            | Request::WriteDerived { .. }
            | Request::Shutdown => 0,
        }
    }
}

impl SessionBackend for PostgresBackend {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn append(
        &self,
        session: &SessionId,
        plan: AppendPlan,
    ) -> Result<Vec<AppendedEvent>, StoreError> {
        let wait = self.lock_wait;
        let session = session.clone();
        self.call(|reply| Request::Append {
            session,
            plan,
            wait,
            reply,
        })
    }

    fn load(&self, session: &SessionId) -> Result<Arc<LoadedSession>, StoreError> {
        let id = session.clone();
        let image = self.call(|reply| Request::Rows {
            session: id,
            from: None,
            reply,
        })?;
        let loaded = match image {
            Some(image) => validate(session, &image, self.residency())?,
            None => None,
        };
        loaded.map(Arc::new).ok_or_else(|| StoreError::NotFound {
            session: session.clone(),
        })
    }

    fn lock_session(&self, session: &SessionId) -> Result<SessionLock, StoreError> {
        let wait = self.lock_wait;
        let id = session.clone();
        let lock = self.call(|reply| Request::Lock {
            session: id,
            wait,
            reply,
        })?;
        let requests = self
            .requests
            .get(spread_id(lock, self.requests.len()))
            .cloned()
            .ok_or_else(stopped)?;
        Ok(SessionLock::new(
            session.clone(),
            Box::new(HeldLock { id: lock, requests }),
        ))
    }

    fn put_snapshot(&self, snapshot: &ExecutionSnapshotFileV1) -> Result<SnapshotRef, StoreError> {
        self.put_value(snapshot).map(SnapshotRef::from_digest)
    }

    fn get_snapshot(&self, snapshot: &SnapshotRef) -> Result<ExecutionSnapshotFileV1, StoreError> {
        self.get_verified(snapshot.digest())
    }

    fn put_workflow(
        &self,
        compiled: &CompiledWorkflowSnapshotV1,
    ) -> Result<WorkflowHash, StoreError> {
        self.put_value(compiled).map(WorkflowHash::from_digest)
    }

    fn get_workflow(&self, hash: &WorkflowHash) -> Result<CompiledWorkflowSnapshotV1, StoreError> {
        self.get_verified(hash.digest())
    }

    fn load_or_create_keyring(&self, entropy: &dyn Entropy) -> Result<Keyring, StoreError> {
        keyring::parse_keyring(&self.keyring_body(entropy)?)
    }

    fn list_sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        let names = self.call(|reply| Request::List { reply })?;
        Ok(names
            .iter()
            .filter_map(|n| SessionId::parse(n).ok())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// decision: D203
    #[test]
    fn the_worker_count_is_a_whole_number_from_one_to_the_maximum_or_the_default() {
        assert_eq!(parse_workers(None).unwrap(), DEFAULT_WORKERS);
        assert_eq!(parse_workers(Some(" ")).unwrap(), DEFAULT_WORKERS);
        assert_eq!(parse_workers(Some("1")).unwrap(), 1);
        assert_eq!(parse_workers(Some(" 32 ")).unwrap(), MAX_WORKERS);
        for bad in ["0", "33", "-1", "four", "2.5"] {
            let text = parse_workers(Some(bad)).unwrap_err().to_string();
            assert!(
                text.contains("WORKRAIL_STORE_WORKERS")
                    && text.contains("from 1 to 32")
                    && text.contains("unset it"),
                "{bad}: {text}"
            );
        }
    }

    /// decision: D203
    #[test]
    fn gate_and_lock_ids_route_back_to_the_worker_that_handed_them_out() {
        for count in [1, 2, 3, 8] {
            for index in 0..count {
                let place = worker::Place { index, count };
                for n in [1, 2, 7, 1_000] {
                    assert_eq!(spread_id(place.id(n), count), index);
                }
            }
        }
    }
}

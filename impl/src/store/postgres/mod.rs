//! The PostgreSQL session backend (issue 19, first slice): the [`SessionBackend`] seam over one
//! PostgreSQL schema. `impl/docs/store.md` "PostgreSQL" describes it.
//!
//! - **Threads (D98).** The protocol is synchronous and runs inside the MCP server's tokio
//!   runtime, where blocking on another runtime would panic. The backend therefore owns a thread
//!   running its own current-thread runtime and the connections; each trait method sends a
//!   request over a channel and waits for the reply.
//! - **Rows (D96).** Events and manifest records are stored one per row as the exact canonical
//!   text the file store writes as a line, so the manifest records (segment bounds, sha256 and
//!   byte counts of the segment text) are identical in both backends.
//! - **The append (D97)** is one transaction under `pg_try_advisory_xact_lock` of the session,
//!   retried for the bounded wait: health check, events, `segment_closed` and the pins commit
//!   together or not at all.
//! - **Health (D99)** is judged by the file store's own validator over an in-memory image of the
//!   rows (segments rebuilt from the events a `segment_closed` names), so every rule and every
//!   reason is the same.

mod gate;
mod schema;
pub mod tls;

pub use gate::PgGate;

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_postgres::{Client, Config, GenericClient};
use tokio_postgres_rustls::MakeRustlsConnect;
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::event::{EventData, SessionEvent};
use workrail_spec::ids::{ManifestIndex, SessionId, SnapshotRef, WorkflowHash};
use workrail_spec::jcs::{Canonical, sha256, to_canonical_string};
use workrail_spec::manifest::{ManifestRecord, SegmentClosed, SnapshotPinned, segment_rel_path};
use workrail_spec::snapshot::ExecutionSnapshotFileV1;

pub use schema::{MIGRATIONS, SCHEMA_VERSION, valid_schema_name};

use super::backend::{SessionBackend, SessionLock};
use super::cas::ObjectCheck;
use super::error::{Committed, StoreError};
use super::fs::StoreFs;
use super::keyring::{KEY_BYTES, Keyring, SigningKey};
use super::layout;
use super::load::{LoadedSession, introduced_snapshots, load_session};
use super::memfs::MemFs;
use super::session::{
    AppendPlan, AppendedEvent, DEFAULT_LOCK_WAIT, NumberedPlan, SegmentLimits, number_plan,
};
use crate::entropy::Entropy;

/// The schema used when none is named.
pub const DEFAULT_SCHEMA: &str = "workrail";

/// How long connecting may take before it is an I/O error.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The variable bounding how long one call may wait for the database, in milliseconds.
pub const TIMEOUT_ENV: &str = "WORKRAIL_STORE_TIMEOUT_MS";

/// How long one call may wait for the database when [`TIMEOUT_ENV`] is unset (D110).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

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

type Reply<T> = std_mpsc::Sender<Result<T, StoreError>>;

/// Which content-addressed table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ObjectTable {
    Snapshots,
    Workflows,
    Artifacts,
}

impl ObjectTable {
    fn name(self) -> &'static str {
        match self {
            Self::Snapshots => "snapshots",
            Self::Workflows => "workflows",
            Self::Artifacts => "artifacts",
        }
    }
}

/// A session's rows, read in one transaction: what load validates.
#[derive(Debug, Default)]
struct Image {
    /// Manifest record texts in `manifest_index` order.
    manifest: Vec<String>,
    /// Event texts with their `event_index`, ascending.
    events: Vec<(i64, String)>,
    /// The referenced snapshots and workflows that exist: (digest, text).
    snapshots: Vec<(String, String)>,
    workflows: Vec<(String, String)>,
}

enum Request {
    Append {
        session: SessionId,
        plan: AppendPlan,
        wait: Duration,
        reply: Reply<Vec<AppendedEvent>>,
    },
    Image {
        session: SessionId,
        reply: Reply<Option<Image>>,
    },
    Lock {
        session: SessionId,
        wait: Duration,
        reply: Reply<u64>,
    },
    Unlock {
        id: u64,
        reply: Reply<()>,
    },
    PutObject {
        table: ObjectTable,
        digest: String,
        body: String,
        reply: Reply<()>,
    },
    GetObject {
        table: ObjectTable,
        digest: String,
        reply: Reply<Option<String>>,
    },
    Keyring {
        candidate: Option<String>,
        reply: Reply<Option<String>>,
    },
    List {
        reply: Reply<Vec<String>>,
    },
    /// Opens an append gate: a connection of its own holding the session's advisory lock
    /// (session level) and the session's rows read under it.
    GateOpen {
        session: SessionId,
        wait: Duration,
        /// The manifest (records, bytes) of the caller's cached view: when the rows still have
        /// them, they are not read again.
        known: Option<(i64, i64)>,
        reply: Reply<(u64, GateRead)>,
    },
    /// The rows past a cached view (see [`fetch_tail`]), read in one snapshot.
    Tail {
        session: SessionId,
        manifest_from: i64,
        event_from: i64,
        reply: Reply<Option<Image>>,
    },
    /// The session's manifest (records, bytes): one query, the freshness key of a cached view.
    Freshness {
        session: SessionId,
        reply: Reply<(i64, i64)>,
    },
    /// Commits a plan prepared against the gate's view, on the gate's connection.
    GateAppend {
        id: u64,
        session: SessionId,
        prepared: Prepared,
        reply: Reply<()>,
    },
    /// Releases a gate's lock.
    GateClose {
        id: u64,
        reply: Reply<()>,
    },
    /// Each session's manifest length as the file store would write it (the resume index's
    /// freshness key).
    ManifestBytes {
        reply: Reply<Vec<(String, i64)>>,
    },
    /// Replaces the keyring row when it still holds `old` (a rotation); `false` when it did not.
    SwapKeyring {
        old: String,
        new: String,
        reply: Reply<bool>,
    },
    /// Each session's last activity, in milliseconds since the Unix epoch (GC, D112).
    Activity {
        reply: Reply<Vec<(String, i64)>>,
    },
    /// Deletes a session's rows in one transaction under its advisory lock, when its manifest
    /// still has `expect` (records, bytes) (GC, D112).
    DeleteSession {
        session: SessionId,
        expect: (i64, i64),
        wait: Duration,
        reply: Reply<Deleted>,
    },
    /// The unreferenced objects older than `grace`, deleted unless `dry_run` (GC, D112).
    Sweep {
        roots: [Vec<String>; 3],
        grace: Duration,
        dry_run: bool,
        reply: Reply<Swept>,
    },
    /// Ends the worker (the backend is dropped); its connections, lock guards' too, close.
    Shutdown,
}

/// What [`PostgresBackend::delete_session`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// The session's rows are gone.
    Yes,
    /// Another process held its lock past the wait: nothing was deleted.
    Locked,
    /// Its manifest rows are not what GC validated: nothing was deleted.
    Changed,
}

/// What [`PostgresBackend::sweep`] deleted (or, in a dry run, would delete): digests per table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    pub snapshots: Vec<String>,
    pub workflows: Vec<String>,
    pub artifacts: Vec<String>,
    /// Unreferenced objects kept because they are younger than the grace.
    pub young: usize,
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

/// The session store in one PostgreSQL schema.
pub struct PostgresBackend {
    requests: Option<mpsc::UnboundedSender<Request>>,
    worker: Option<JoinHandle<()>>,
    schema: String,
    lock_wait: Duration,
    /// Validated sessions this process loaded or committed (D94's budget, newest kept).
    sessions: super::object_cache::ObjectCache<SessionId, LoadedSession>,
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
        // Lock guards still hold senders, so the channel may stay open: ask the worker to stop.
        // Its connections close with it, which releases every lock they held.
        if let Some(requests) = self.requests.take() {
            let _ = requests.send(Request::Shutdown);
        }
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

impl PostgresBackend {
    /// Connects to `url` (`postgres://…`, TLS as its `sslmode` asks, D114), creates `schema` if needed and
    /// migrates it to [`SCHEMA_VERSION`]. A schema newer than this build is refused.
    pub fn connect(url: &str, schema: &str) -> Result<Self, StoreError> {
        Self::connect_with_timeout(url, schema, timeout_from_env()?)
    }

    /// [`Self::connect`] with every call bounded by `limit` instead of [`TIMEOUT_ENV`]: a call
    /// the database does not answer in time is [`StoreError::Unanswered`] (retryable), and the
    /// backend's connections are closed and reopened by the next call (D110).
    pub fn connect_with_timeout(
        url: &str,
        schema: &str,
        limit: Duration,
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
        let (requests, receiver) = mpsc::unbounded_channel();
        let (ready, started) = std_mpsc::channel();
        let worker_schema = schema.to_owned();
        let worker = std::thread::Builder::new()
            .name(format!("workrail-pg-{schema}"))
            .spawn(move || {
                run_worker(
                    config,
                    (connector, tls.mode),
                    worker_schema,
                    limit,
                    receiver,
                    ready,
                )
            })
            .map_err(|e| StoreError::Io {
                session: None,
                op,
                detail: format!("could not start the backend thread: {e}"),
            })?;
        let backend = Self {
            requests: Some(requests),
            worker: Some(worker),
            schema: schema.to_owned(),
            // A lock wait past the call's bound would be a stall, not `Locked`.
            lock_wait: DEFAULT_LOCK_WAIT.min(limit / 2),
            sessions: super::object_cache::ObjectCache::keeping_newest(
                super::object_cache::CacheBudget::default().sessions,
            ),
        };
        started.recv().map_err(|_| stopped())??;
        Ok(backend)
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

    fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Request) -> Result<T, StoreError> {
        let (reply, answer) = std_mpsc::channel();
        let requests = self.requests.as_ref().ok_or_else(stopped)?;
        requests.send(make(reply)).map_err(|_| stopped())?;
        answer.recv().map_err(|_| stopped())?
    }

    /// Each session's manifest length in bytes, by session id (one query).
    pub fn manifest_lengths_by_id(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.call(|reply| Request::ManifestBytes { reply })
    }

    /// Each session's last activity (the time of its last committed append), in milliseconds
    /// since the Unix epoch, by session id (D112).
    pub fn last_activity(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.call(|reply| Request::Activity { reply })
    }

    /// Deletes `session`'s rows (events, manifest, session) in one transaction under its
    /// advisory lock, when its manifest still holds `expect` = (records, bytes): never while
    /// another process appends, never a session that changed since it was judged (D112).
    pub fn delete_session(
        &self,
        session: &SessionId,
        expect: (i64, i64),
    ) -> Result<Deleted, StoreError> {
        let wait = self.lock_wait;
        let id = session.clone();
        let deleted = self.call(|reply| Request::DeleteSession {
            session: id,
            expect,
            wait,
            reply,
        })?;
        self.forget_cached(session);
        Ok(deleted)
    }

    /// Deletes, in one statement, the snapshots, workflows and artifacts whose digests are not
    /// in `roots` (snapshots, workflows, artifacts) and that were stored more than `grace` ago
    /// by the database's clock; with `dry_run` only lists them (D112).
    pub fn sweep(
        &self,
        roots: [Vec<String>; 3],
        grace: Duration,
        dry_run: bool,
    ) -> Result<Swept, StoreError> {
        self.call(|reply| Request::Sweep {
            roots,
            grace,
            dry_run,
            reply,
        })
    }

    fn get_object(&self, table: ObjectTable, digest: &str) -> Result<Option<String>, StoreError> {
        let digest = digest.to_owned();
        self.call(|reply| Request::GetObject {
            table,
            digest,
            reply,
        })
    }

    fn put_object(&self, table: ObjectTable, digest: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let body = String::from_utf8(bytes.to_vec()).map_err(|e| StoreError::Internal {
            detail: format!("canonical JSON is not UTF-8: {e}"),
        })?;
        let digest = digest.to_owned();
        self.call(|reply| Request::PutObject {
            table,
            digest,
            body,
            reply,
        })
    }
}

/// Hands out lock guards: dropping one asks the worker to end its transaction.
struct HeldLock {
    id: u64,
    requests: mpsc::UnboundedSender<Request>,
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        let (reply, answer) = std_mpsc::channel();
        if self
            .requests
            .send(Request::Unlock { id: self.id, reply })
            .is_ok()
        {
            // Wait for the release, so a lock dropped is a lock free.
            let _ = answer.recv();
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
        let image = self.call(|reply| Request::Image { session: id, reply })?;
        let loaded = match image {
            Some(image) => validate(session, &image)?,
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
        let requests = self.requests.clone().ok_or_else(stopped)?;
        Ok(SessionLock::new(
            session.clone(),
            Box::new(HeldLock { id: lock, requests }),
        ))
    }

    fn put_snapshot(&self, snapshot: &ExecutionSnapshotFileV1) -> Result<SnapshotRef, StoreError> {
        let canonical = Canonical::of(snapshot).map_err(|e| StoreError::Internal {
            detail: e.to_string(),
        })?;
        let digest = canonical.digest().clone();
        self.put_object(ObjectTable::Snapshots, digest.as_str(), canonical.bytes())?;
        Ok(SnapshotRef::from_digest(digest))
    }

    fn get_snapshot(&self, snapshot: &SnapshotRef) -> Result<ExecutionSnapshotFileV1, StoreError> {
        let what = format!("snapshot {snapshot}");
        let text = self
            .get_object(ObjectTable::Snapshots, snapshot.digest().as_str())?
            .ok_or_else(|| StoreError::MissingObject { what: what.clone() })?;
        let corrupt = |detail: String| StoreError::CorruptObject {
            what: what.clone(),
            detail,
        };
        let value =
            ExecutionSnapshotFileV1::from_json_str(&text).map_err(|e| corrupt(e.to_string()))?;
        if &sha256(text.as_bytes()) != snapshot.digest() {
            let actual = value.snapshot_ref().map_err(|e| corrupt(e.to_string()))?;
            if &actual != snapshot {
                return Err(corrupt(format!("content hashes to {actual}")));
            }
        }
        Ok(value)
    }

    fn put_workflow(
        &self,
        compiled: &CompiledWorkflowSnapshotV1,
    ) -> Result<WorkflowHash, StoreError> {
        let canonical = Canonical::of(compiled).map_err(|e| StoreError::Internal {
            detail: e.to_string(),
        })?;
        let digest = canonical.digest().clone();
        self.put_object(ObjectTable::Workflows, digest.as_str(), canonical.bytes())?;
        Ok(WorkflowHash::from_digest(digest))
    }

    fn get_workflow(&self, hash: &WorkflowHash) -> Result<CompiledWorkflowSnapshotV1, StoreError> {
        let what = format!("pinned workflow {hash}");
        let text = self
            .get_object(ObjectTable::Workflows, hash.digest().as_str())?
            .ok_or_else(|| StoreError::MissingObject { what: what.clone() })?;
        let corrupt = |detail: String| StoreError::CorruptObject {
            what: what.clone(),
            detail,
        };
        let value =
            CompiledWorkflowSnapshotV1::from_json_str(&text).map_err(|e| corrupt(e.to_string()))?;
        if &sha256(text.as_bytes()) != hash.digest() {
            let actual = value.workflow_hash().map_err(|e| corrupt(e.to_string()))?;
            if &actual != hash {
                return Err(corrupt(format!("content hashes to {actual}")));
            }
        }
        Ok(value)
    }

    fn load_or_create_keyring(&self, entropy: &dyn Entropy) -> Result<Keyring, StoreError> {
        if let Some(body) = self.call(|reply| Request::Keyring {
            candidate: None,
            reply,
        })? {
            return parse_keyring(&body);
        }
        // First use: offer a fresh keyring; whoever inserted first wins, and everyone reads
        // the row that won.
        let fresh = Keyring {
            current: fresh_key(entropy)?,
            previous: None,
        };
        let candidate = Some(encode_keyring(&fresh)?);
        let body = self
            .call(|reply| Request::Keyring { candidate, reply })?
            .ok_or_else(|| StoreError::Internal {
                detail: "the keyring row vanished right after it was created".into(),
            })?;
        parse_keyring(&body)
    }

    fn list_sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        let names = self.call(|reply| Request::List { reply })?;
        Ok(names
            .iter()
            .filter_map(|n| SessionId::parse(n).ok())
            .collect())
    }
}

// ---------------------------------------------------------------------------------------------
// The keyring row: the same JSON as keys/keyring.json.

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct KeyJson {
    key_id: String,
    secret: String,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct KeyringJson {
    v: u64,
    current: KeyJson,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous: Option<KeyJson>,
}

fn keyring_corrupt(detail: impl ToString) -> StoreError {
    StoreError::KeyringCorrupt {
        detail: detail.to_string(),
    }
}

fn parse_keyring(body: &str) -> Result<Keyring, StoreError> {
    let file: KeyringJson = serde_json::from_str(body).map_err(keyring_corrupt)?;
    if file.v != 1 {
        return Err(keyring_corrupt(format!(
            "keyring version {} is not supported (expected 1)",
            file.v
        )));
    }
    let decode = |key: KeyJson| -> Result<SigningKey, StoreError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(&key.secret)
            .map_err(keyring_corrupt)?;
        let secret: [u8; KEY_BYTES] = bytes
            .try_into()
            .map_err(|_| keyring_corrupt(format!("key {} is not {KEY_BYTES} bytes", key.key_id)))?;
        Ok(SigningKey {
            key_id: key.key_id,
            secret,
        })
    };
    Ok(Keyring {
        current: decode(file.current)?,
        previous: file.previous.map(decode).transpose()?,
    })
}

fn encode_keyring(keyring: &Keyring) -> Result<String, StoreError> {
    let encode = |key: &SigningKey| KeyJson {
        key_id: key.key_id.clone(),
        secret: URL_SAFE_NO_PAD.encode(key.secret),
    };
    serde_json::to_string_pretty(&KeyringJson {
        v: 1,
        current: encode(&keyring.current),
        previous: keyring.previous.as_ref().map(encode),
    })
    .map_err(|e| StoreError::Internal {
        detail: e.to_string(),
    })
}

/// A fresh key as the file keyring makes one: 32 random bytes, id `k_` + hex of the first four.
fn fresh_key(entropy: &dyn Entropy) -> Result<SigningKey, StoreError> {
    let mut secret = [0u8; KEY_BYTES];
    entropy.fill(&mut secret).map_err(|e| StoreError::Io {
        session: None,
        op: "generate signing key",
        detail: e.to_string(),
    })?;
    let id: String = secret[..4].iter().map(|b| format!("{b:02x}")).collect();
    Ok(SigningKey {
        key_id: format!("k_{id}"),
        secret,
    })
}

// ---------------------------------------------------------------------------------------------
// Health: the file store's validator over an in-memory image of the rows.

fn object_path(dir: &str, digest: &str) -> Option<std::path::PathBuf> {
    let hex = digest.strip_prefix("sha256:")?;
    Some(Path::new(dir).join(format!("{hex}.json")))
}

/// Judges a session's rows with the file store's rules (decision D99): the manifest rows become
/// `manifest.jsonl`, each `segment_closed` gets the segment text rebuilt from the event rows in
/// its bounds, and the referenced objects are laid out as in the CAS, so a changed, missing or
/// reordered row shows up as the same reason a damaged file would.
fn validate(session: &SessionId, image: &Image) -> Result<Option<LoadedSession>, StoreError> {
    validate_with(session, image, &[])
}

/// [`validate`], with the objects of `verified` taken as intact (they were verified by an
/// earlier load in this process, and objects are immutable: D53's rule).
fn validate_with(
    session: &SessionId,
    image: &Image,
    verified: &[workrail_spec::ids::Sha256Digest],
) -> Result<Option<LoadedSession>, StoreError> {
    let memory = |e: std::io::Error| StoreError::Internal {
        detail: format!("in-memory image: {e}"),
    };
    let fs = Arc::new(MemFs::new());
    let write = |path: &Path, bytes: &[u8]| -> Result<(), StoreError> {
        if let Some(parent) = path.parent() {
            fs.create_dir_all(parent).map_err(memory)?;
        }
        fs.write_new(path, bytes).map_err(memory)
    };
    let mut manifest = String::new();
    for body in &image.manifest {
        manifest.push_str(body);
        manifest.push('\n');
    }
    write(&layout::manifest_path(session), manifest.as_bytes())?;
    let dir = layout::session_dir(session);
    for body in &image.manifest {
        let Ok(ManifestRecord::SegmentClosed(seg)) = ManifestRecord::from_json_str(body) else {
            continue;
        };
        let (first, last) = (
            seg.first_event_index.get() as i64,
            seg.last_event_index.get() as i64,
        );
        let mut text = String::new();
        for (index, event) in &image.events {
            if (first..=last).contains(index) {
                text.push_str(event);
                text.push('\n');
            }
        }
        // Only a damaged manifest names one segment twice; the validator reports it.
        let _ = write(&dir.join(&seg.segment_rel_path), text.as_bytes());
    }
    for (digest, body) in &image.snapshots {
        if let Some(path) = object_path(layout::SNAPSHOTS_DIR, digest) {
            write(&path, body.as_bytes())?;
        }
    }
    for (digest, body) in &image.workflows {
        if let Some(path) = object_path(layout::PINNED_WORKFLOWS_DIR, digest) {
            write(&path, body.as_bytes())?;
        }
    }
    let objects = ObjectCheck::new(Arc::clone(&fs) as Arc<dyn StoreFs>);
    objects.assume_intact(verified);
    load_session(&*fs, session, Some(&objects)).map_err(|e| StoreError::Io {
        session: Some(session.clone()),
        op: "load session",
        detail: e.to_string(),
    })
}

/// What an append writes: the results in plan order, the new events, and their records.
struct Prepared {
    results: Vec<AppendedEvent>,
    fresh: Vec<(SessionEvent, String)>,
    records: Vec<(ManifestRecord, String)>,
}

/// The file store's append rules over a validated session: plan checks, dedupeKey no-ops,
/// numbering, the segment's `segment_closed` and the pins of the snapshots it introduces.
fn prepare(
    loaded: &LoadedSession,
    plan: AppendPlan,
    limits: SegmentLimits,
) -> Result<Prepared, StoreError> {
    let session_id = &loaded.session_id;
    let NumberedPlan {
        results,
        fresh,
        segment,
    } = number_plan(loaded, plan, &limits)?;
    if fresh.is_empty() {
        return Ok(Prepared {
            results,
            fresh: Vec::new(),
            records: Vec::new(),
        });
    }
    // Each event's text is its segment line without the newline.
    let lines: Vec<String> = segment.split_terminator('\n').map(str::to_owned).collect();
    let index = |value: u64| {
        ManifestIndex::new(value).ok_or(StoreError::Internal {
            detail: "manifestIndex would exceed 2^53-1".into(),
        })
    };
    let first_index = fresh[0].event_index();
    let last_index = fresh[fresh.len() - 1].event_index();
    let mut next = loaded.manifest.len() as u64;
    let mut records = vec![ManifestRecord::SegmentClosed(SegmentClosed {
        manifest_index: index(next)?,
        session_id: session_id.clone(),
        first_event_index: first_index,
        last_event_index: last_index,
        segment_rel_path: segment_rel_path(first_index, last_index),
        sha256: sha256(segment.as_bytes()),
        bytes: segment.len() as u64,
    })];
    next += 1;
    let mut newly_pinned: Vec<SnapshotRef> = Vec::new();
    for (snapshot, i) in introduced_snapshots(&fresh) {
        if loaded.is_pinned(&snapshot) || newly_pinned.contains(&snapshot) {
            continue;
        }
        records.push(ManifestRecord::SnapshotPinned(SnapshotPinned {
            manifest_index: index(next)?,
            session_id: session_id.clone(),
            event_index: fresh[i].event_index(),
            snapshot_ref: snapshot.clone(),
            created_by_event_id: fresh[i].event_id().clone(),
        }));
        next += 1;
        newly_pinned.push(snapshot);
    }
    let records = records
        .into_iter()
        .map(|r| {
            let text = to_canonical_string(&r).map_err(|e| StoreError::Internal {
                detail: format!("manifest record is not canonicalizable: {e}"),
            })?;
            Ok((r, text))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(Prepared {
        results,
        fresh: fresh.into_iter().zip(lines).collect(),
        records,
    })
}

// ---------------------------------------------------------------------------------------------
// The worker thread.

fn run_worker(
    config: Config,
    (tls, ssl_mode): (MakeRustlsConnect, tls::SslMode),
    schema: String,
    limit: Duration,
    mut requests: mpsc::UnboundedReceiver<Request>,
    ready: std_mpsc::Sender<Result<(), StoreError>>,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            let _ = ready.send(Err(StoreError::Io {
                session: None,
                op: "start the PostgreSQL backend",
                detail: e.to_string(),
            }));
            return;
        }
    };
    runtime.block_on(async move {
        let mut worker = Worker {
            config,
            tls,
            ssl_mode,
            schema,
            client: None,
            locks: HashMap::new(),
            next_lock: 0,
            gates: HashMap::new(),
            idle: Vec::new(),
            limit,
            tasks: Vec::new(),
        };
        let started = match tokio::time::timeout(limit, worker.start()).await {
            Ok(started) => started,
            Err(_) => Err(StoreError::Unanswered {
                op: "connect to PostgreSQL",
                after_ms: millis(limit),
            }),
        };
        let failed = started.is_err();
        let _ = ready.send(started);
        if failed {
            return;
        }
        while let Some(request) = requests.recv().await {
            if matches!(request, Request::Shutdown) {
                break;
            }
            worker.handle(request).await;
        }
    });
}

struct Worker {
    config: Config,
    /// The TLS connector for the URL's sslmode (D114), and that mode.
    tls: MakeRustlsConnect,
    ssl_mode: tls::SslMode,
    schema: String,
    /// The connection every request but the lock guards uses; reopened after it breaks.
    client: Option<Client>,
    /// Lock guards: each holds its own connection with an open transaction.
    locks: HashMap<u64, Client>,
    next_lock: u64,
    /// Open append gates: a connection holding a session-level advisory lock, and its key.
    gates: HashMap<u64, (Client, i64)>,
    /// Gate connections kept for the next gate (a connection costs a round trip or three).
    idle: Vec<Client>,
    /// How long one request may wait for the database (D110).
    limit: Duration,
    /// The tasks driving this worker's connections, aborted when a request stalls.
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Worker {
    async fn connect(&mut self, role: &str) -> Result<Client, StoreError> {
        let op = "connect to PostgreSQL";
        let mut config = self.config.clone();
        config.application_name(format!("workrail-{role}:{}", self.schema));
        let (client, connection) = config.connect(self.tls.clone()).await.map_err(|e| {
            let mut detail = describe(&e);
            if detail.contains("TLS") {
                detail = format!(
                    "{detail} (sslmode={}: {})",
                    self.ssl_mode.name(),
                    tls::handshake_hint(self.ssl_mode)
                );
            }
            StoreError::Database {
                session: None,
                op,
                detail,
            }
        })?;
        self.tasks.retain(|task| !task.is_finished());
        self.tasks.push(tokio::spawn(async move {
            // Ends when the connection closes; a broken connection shows up as `is_closed`.
            let _ = connection.await;
        }));
        client
            .batch_execute(&format!("SET search_path TO {}", self.schema))
            .await
            .map_err(sql_error(op))?;
        Ok(client)
    }

    async fn start(&mut self) -> Result<(), StoreError> {
        let mut client = self.connect("main").await?;
        schema::migrate(&mut client, &self.schema).await?;
        self.client = Some(client);
        Ok(())
    }

    async fn client(&mut self) -> Result<&mut Client, StoreError> {
        let broken = self.client.as_ref().is_none_or(Client::is_closed);
        if broken {
            self.client = None;
            let client = self.connect("main").await?;
            self.client = Some(client);
        }
        self.client.as_mut().ok_or_else(stopped)
    }

    /// Answers one request within [`Worker::limit`] (D110). A request the database does not
    /// answer in time is abandoned with [`StoreError::Unanswered`], and every connection of the
    /// worker is closed: the server rolls back what it had not committed, a held gate refuses
    /// to commit, and the next request connects afresh.
    async fn handle(&mut self, request: Request) {
        let limit = self.limit;
        let mut stalled = false;
        macro_rules! bounded {
            ($op:expr, $work:expr) => {{
                let outcome = tokio::time::timeout(limit, $work).await;
                match outcome {
                    Ok(result) => result,
                    Err(_) => {
                        stalled = true;
                        Err(StoreError::Unanswered {
                            op: $op,
                            after_ms: millis(limit),
                        })
                    }
                }
            }};
        }
        match request {
            Request::Append {
                session,
                plan,
                wait,
                reply,
            } => {
                let result = bounded!("append to the session", self.append(&session, plan, wait));
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::Image { session, reply } => {
                let result = bounded!("load session", self.image(&session));
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::Lock {
                session,
                wait,
                reply,
            } => {
                let result = bounded!("lock session", self.lock(&session, wait));
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::Unlock { id, reply } => {
                let client = self.locks.remove(&id);
                let result: Result<(), StoreError> = bounded!("unlock session", async {
                    if let Some(client) = client {
                        // Ending the transaction releases its advisory lock; a broken
                        // connection has released it already.
                        let _ = client.batch_execute("ROLLBACK").await;
                    }
                    Ok(())
                });
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::PutObject {
                table,
                digest,
                body,
                reply,
            } => {
                let result = bounded!("store an object", self.put_object(table, &digest, &body));
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::GetObject {
                table,
                digest,
                reply,
            } => {
                let result = bounded!("read an object", self.get_object(table, &digest));
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::Keyring { candidate, reply } => {
                let result = bounded!("load or create the keyring", self.keyring(candidate));
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::List { reply } => {
                let result = bounded!("list sessions", self.list());
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::GateOpen {
                session,
                wait,
                known,
                reply,
            } => {
                let result = bounded!("lock session", self.gate_open(&session, wait, known));
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::Tail {
                session,
                manifest_from,
                event_from,
                reply,
            } => {
                let result = bounded!(
                    "load session",
                    self.tail(&session, manifest_from, event_from)
                );
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::Freshness { session, reply } => {
                let result = bounded!("load session", async {
                    let client = self.client().await?;
                    freshness(&*client, &session).await
                });
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::GateAppend {
                id,
                session,
                prepared,
                reply,
            } => {
                let result = bounded!(
                    "append to the session",
                    self.gate_append(id, &session, &prepared)
                );
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::GateClose { id, reply } => {
                let gate = self.gates.remove(&id);
                let result: Result<Option<Client>, StoreError> =
                    bounded!("unlock session", async {
                        let Some((client, key)) = gate else {
                            return Ok(None);
                        };
                        let released = client
                            .query_one("SELECT pg_advisory_unlock($1)", &[&key])
                            .await
                            .is_ok_and(|row| row.get::<_, bool>(0));
                        // A connection whose unlock failed is dropped, and its lock with it.
                        Ok((released && !client.is_closed()).then_some(client))
                    });
                if let Ok(Some(client)) = result
                    && self.idle.len() < 2
                {
                    self.idle.push(client);
                }
                self.settle(stalled).await;
                let _ = reply.send(Ok(()));
            }
            Request::ManifestBytes { reply } => {
                let result = bounded!("read the manifest lengths", self.manifest_bytes());
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::SwapKeyring { old, new, reply } => {
                let result = bounded!("rotate the keyring", self.swap_keyring(&old, &new));
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::Activity { reply } => {
                let result = bounded!("read the sessions' last activity", self.activity());
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::DeleteSession {
                session,
                expect,
                wait,
                reply,
            } => {
                let result = bounded!(
                    "delete a session",
                    self.delete_session(&session, expect, wait)
                );
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::Sweep {
                roots,
                grace,
                dry_run,
                reply,
            } => {
                let result = bounded!(
                    "sweep unreferenced objects",
                    self.sweep(&roots, grace, dry_run)
                );
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::Shutdown => {}
        }
    }

    async fn activity(&mut self) -> Result<Vec<(String, i64)>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT session_id, (extract(epoch FROM last_activity) * 1000)::bigint
                 FROM sessions ORDER BY session_id",
                &[],
            )
            .await
            .map_err(sql_error("read the sessions' last activity"))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    async fn delete_session(
        &mut self,
        session: &SessionId,
        expect: (i64, i64),
        wait: Duration,
    ) -> Result<Deleted, StoreError> {
        let op = "delete a session";
        let key = lock_key(&self.schema, session);
        let client = self.client().await?;
        let tx = client.transaction().await.map_err(sql_error(op))?;
        if !try_lock(&tx, key, wait).await.map_err(sql_error(op))? {
            return Ok(Deleted::Locked);
        }
        // Under the lock nothing else commits to this session: the check is authoritative.
        if freshness(&tx, session).await? != expect {
            return Ok(Deleted::Changed);
        }
        for table in ["events", "manifest", "sessions"] {
            tx.execute(
                &format!("DELETE FROM {table} WHERE session_id = $1"),
                &[&session.as_str()],
            )
            .await
            .map_err(sql_error(op))?;
        }
        tx.commit().await.map_err(sql_error(op))?;
        Ok(Deleted::Yes)
    }

    async fn sweep(
        &mut self,
        roots: &[Vec<String>; 3],
        grace: Duration,
        dry_run: bool,
    ) -> Result<Swept, StoreError> {
        let op = "sweep unreferenced objects";
        let client = self.client().await?;
        let tables = [
            ObjectTable::Snapshots,
            ObjectTable::Workflows,
            ObjectTable::Artifacts,
        ];
        // One statement: one snapshot of the database, each table's old unreferenced rows
        // deleted (or listed) and the young ones counted.
        let mut parts = Vec::new();
        let mut selects = Vec::new();
        for (i, table) in tables.iter().enumerate() {
            let t = table.name();
            let p = i + 1;
            let old = format!(
                "{t} WHERE NOT (digest = ANY(${p}::text[])) AND created_at < now() - make_interval(secs => $4)"
            );
            parts.push(if dry_run {
                format!("g{p} AS (SELECT digest FROM {old})")
            } else {
                format!("g{p} AS (DELETE FROM {old} RETURNING digest)")
            });
            parts.push(format!(
                "y{p} AS (SELECT count(*) AS n FROM {t} WHERE NOT (digest = ANY(${p}::text[])) AND created_at >= now() - make_interval(secs => $4))"
            ));
            selects.push(format!("SELECT {p}, digest FROM g{p}"));
            selects.push(format!("SELECT -{p}, n::text FROM y{p}"));
        }
        let sql = format!("WITH {} {}", parts.join(", "), selects.join(" UNION ALL "));
        let secs = grace.as_secs_f64();
        let rows = client
            .query(&sql, &[&roots[0], &roots[1], &roots[2], &secs])
            .await
            .map_err(sql_error(op))?;
        let mut swept = Swept::default();
        for row in rows {
            let which: i32 = row.get(0);
            let text: String = row.get(1);
            match which {
                1 => swept.snapshots.push(text),
                2 => swept.workflows.push(text),
                3 => swept.artifacts.push(text),
                _ => swept.young += text.parse::<usize>().unwrap_or(0),
            }
        }
        for list in [
            &mut swept.snapshots,
            &mut swept.workflows,
            &mut swept.artifacts,
        ] {
            list.sort();
        }
        Ok(swept)
    }

    /// After a stalled request: closes every connection of the worker (their tasks are aborted,
    /// which closes the sockets), so nothing waits on the silent peer and the server, once it
    /// runs again, rolls back what it had not committed. Gates and lock guards keep their
    /// entries, now closed: a gate refuses to commit, and the next request connects afresh.
    async fn settle(&mut self, stalled: bool) {
        if !stalled {
            return;
        }
        self.client = None;
        self.idle.clear();
        for task in std::mem::take(&mut self.tasks) {
            task.abort();
            let _ = task.await;
        }
    }

    async fn tail(
        &mut self,
        session: &SessionId,
        manifest_from: i64,
        event_from: i64,
    ) -> Result<Option<Image>, StoreError> {
        let op = "load session";
        let client = self.client().await?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(sql_error(op))?;
        let image = fetch_tail(&tx, session, manifest_from, event_from).await;
        let _ = tx.rollback().await;
        image
    }

    async fn gate_open(
        &mut self,
        session: &SessionId,
        wait: Duration,
        known: Option<(i64, i64)>,
    ) -> Result<(u64, GateRead), StoreError> {
        let op = "lock session";
        let client = match self.idle.pop() {
            Some(client) if !client.is_closed() => client,
            _ => self.connect("gate").await?,
        };
        let key = lock_key(&self.schema, session);
        let deadline = Instant::now() + wait;
        let mut pause = Duration::from_millis(1);
        loop {
            let taken: bool = client
                .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
                .await
                .map_err(sql_error(op))?
                .get(0);
            if taken {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                self.idle.push(client);
                return Err(StoreError::Locked {
                    session: session.clone(),
                });
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(Duration::from_millis(20));
        }
        // Under the lock nothing else commits to this session: this read is authoritative.
        let read = match known {
            Some(known) => match freshness(&client, session).await {
                Ok(now) if now == known => Ok(GateRead::Unchanged),
                Ok(_) => fetch_image(&client, session).await.map(GateRead::Image),
                Err(e) => Err(e),
            },
            None => fetch_image(&client, session).await.map(GateRead::Image),
        };
        self.next_lock += 1;
        self.gates.insert(self.next_lock, (client, key));
        Ok((self.next_lock, read?))
    }

    async fn gate_append(
        &mut self,
        id: u64,
        session: &SessionId,
        prepared: &Prepared,
    ) -> Result<(), StoreError> {
        let op = "append to the session";
        let schema = self.schema.clone();
        let (client, _) = self
            .gates
            .get_mut(&id)
            .ok_or_else(|| StoreError::Internal {
                detail: "an append gate was used after it closed".into(),
            })?;
        if client.is_closed() {
            return Err(StoreError::Database {
                session: Some(session.clone()),
                op,
                detail: "the connection holding the session lock closed; nothing was committed"
                    .into(),
            });
        }
        let tx = client.transaction().await.map_err(sql_error(op))?;
        insert_prepared(&tx, session, prepared).await?;
        commit(tx, session, &schema).await
    }

    async fn manifest_bytes(&mut self) -> Result<Vec<(String, i64)>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT session_id, coalesce(sum(octet_length(body) + 1), 0)::bigint
                 FROM sessions LEFT JOIN manifest USING (session_id)
                 GROUP BY session_id ORDER BY session_id",
                &[],
            )
            .await
            .map_err(sql_error("read the manifest lengths"))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    async fn swap_keyring(&mut self, old: &str, new: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let changed = client
            .execute(
                "UPDATE keyring SET body = $2 WHERE id = 1 AND body = $1",
                &[&old, &new],
            )
            .await
            .map_err(sql_error("rotate the keyring"))?;
        Ok(changed == 1)
    }

    async fn image(&mut self, session: &SessionId) -> Result<Option<Image>, StoreError> {
        let op = "load session";
        let client = self.client().await?;
        // One snapshot of the database: an append is one transaction, so a reader sees it
        // whole or not at all, and never waits for a writer.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(sql_error(op))?;
        let image = fetch_image(&tx, session).await;
        let _ = tx.rollback().await;
        image
    }

    async fn append(
        &mut self,
        session: &SessionId,
        plan: AppendPlan,
        wait: Duration,
    ) -> Result<Vec<AppendedEvent>, StoreError> {
        let op = "append to the session";
        let key = lock_key(&self.schema, session);
        let schema = self.schema.clone();
        let client = self.client().await?;
        let tx = client.transaction().await.map_err(sql_error(op))?;
        if !try_lock(&tx, key, wait).await.map_err(sql_error(op))? {
            return Err(StoreError::Locked {
                session: session.clone(),
            });
        }
        // Under the lock nothing else commits to this session: this load is authoritative.
        let loaded = match fetch_image(&tx, session).await? {
            Some(image) => validate(session, &image)?,
            None => None,
        }
        .unwrap_or_else(|| LoadedSession::empty(session.clone()));
        if !loaded.health.is_healthy() {
            return Err(StoreError::Unhealthy {
                session: session.clone(),
                health: loaded.health.clone(),
            });
        }
        let prepared = prepare(&loaded, plan, SegmentLimits::default())?;
        if prepared.fresh.is_empty() {
            return Ok(prepared.results);
        }
        insert_prepared(&tx, session, &prepared).await?;
        commit(tx, session, &schema).await?;
        Ok(prepared.results)
    }

    async fn lock(&mut self, session: &SessionId, wait: Duration) -> Result<u64, StoreError> {
        let op = "lock session";
        let client = self.connect("lock").await?;
        // A guard is held by maintenance for as long as it needs: its idle transaction is not
        // ended by the server (the statements stay bounded).
        client
            .batch_execute("SET idle_in_transaction_session_timeout = 0; BEGIN")
            .await
            .map_err(sql_error(op))?;
        let key = lock_key(&self.schema, session);
        if !try_lock(&client, key, wait).await.map_err(sql_error(op))? {
            return Err(StoreError::Locked {
                session: session.clone(),
            });
        }
        self.next_lock += 1;
        self.locks.insert(self.next_lock, client);
        Ok(self.next_lock)
    }

    async fn put_object(
        &mut self,
        table: ObjectTable,
        digest: &str,
        body: &str,
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        // An existing object with other (damaged) bytes is replaced, as the file store does;
        // storing it again makes it young, so GC's sweep keeps it for its grace (D112): a
        // writer stores an object just before the plan that references it.
        let sql = format!(
            "INSERT INTO {t} (digest, body) VALUES ($1, $2)
             ON CONFLICT (digest) DO UPDATE SET body = EXCLUDED.body, created_at = now()",
            t = table.name()
        );
        client
            .execute(&sql, &[&digest, &body])
            .await
            .map_err(sql_error("store an object"))?;
        Ok(())
    }

    async fn get_object(
        &mut self,
        table: ObjectTable,
        digest: &str,
    ) -> Result<Option<String>, StoreError> {
        let client = self.client().await?;
        let sql = format!("SELECT body FROM {} WHERE digest = $1", table.name());
        let row = client
            .query_opt(&sql, &[&digest])
            .await
            .map_err(sql_error("read an object"))?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn keyring(&mut self, candidate: Option<String>) -> Result<Option<String>, StoreError> {
        let op = "load or create the keyring";
        let client = self.client().await?;
        if let Some(body) = candidate {
            client
                .execute(
                    "INSERT INTO keyring (id, body) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
                    &[&body],
                )
                .await
                .map_err(sql_error(op))?;
        }
        let row = client
            .query_opt("SELECT body FROM keyring WHERE id = 1", &[])
            .await
            .map_err(sql_error(op))?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn list(&mut self) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query("SELECT session_id FROM sessions ORDER BY session_id", &[])
            .await
            .map_err(sql_error("list sessions"))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}

/// Inserts a prepared plan's rows (the session row on its first append, the events, then its
/// manifest records) in `tx`.
async fn insert_prepared(
    tx: &tokio_postgres::Transaction<'_>,
    session: &SessionId,
    prepared: &Prepared,
) -> Result<(), StoreError> {
    let op = "append to the session";
    let write = |e: tokio_postgres::Error| StoreError::Database {
        session: Some(session.clone()),
        op,
        detail: format!("{}; nothing was committed", describe(&e)),
    };
    tx.execute(
        // The session's last activity (GC's retention, D112) moves with every commit.
        "INSERT INTO sessions (session_id) VALUES ($1)
         ON CONFLICT (session_id) DO UPDATE SET last_activity = now()",
        &[&session.as_str()],
    )
    .await
    .map_err(write)?;
    let insert_event = tx
        .prepare(
            "INSERT INTO events (session_id, event_index, event_id, dedupe_key, body)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .await
        .map_err(write)?;
    for (event, body) in &prepared.fresh {
        let index = event.event_index().get() as i64;
        tx.execute(
            &insert_event,
            &[
                &session.as_str(),
                &index,
                &event.event_id().as_str(),
                &event.dedupe_key().as_str(),
                body,
            ],
        )
        .await
        .map_err(write)?;
    }
    let insert_record = tx
        .prepare(
            "INSERT INTO manifest (session_id, manifest_index, kind, body)
             VALUES ($1, $2, $3, $4)",
        )
        .await
        .map_err(write)?;
    for (record, body) in &prepared.records {
        let index = record.manifest_index().get() as i64;
        tx.execute(
            &insert_record,
            &[&session.as_str(), &index, &record.kind().as_str(), body],
        )
        .await
        .map_err(write)?;
    }
    Ok(())
}

/// Commits an append transaction: a failed `COMMIT` may have reached the server, so what it
/// committed is unknown (the next load decides; a retry is idempotent by dedupeKey).
async fn commit(
    tx: tokio_postgres::Transaction<'_>,
    session: &SessionId,
    schema: &str,
) -> Result<(), StoreError> {
    tx.commit().await.map_err(|e| StoreError::Database {
        session: Some(session.clone()),
        op: "commit the append transaction",
        detail: format!(
            "{} on schema {schema}; {}",
            describe(&e),
            Committed::Unknown
        ),
    })
}

/// Tries the session's transaction-level advisory lock until it is taken or `wait` has passed.
async fn try_lock(
    client: &impl GenericClient,
    key: i64,
    wait: Duration,
) -> Result<bool, tokio_postgres::Error> {
    let deadline = Instant::now() + wait;
    let mut pause = Duration::from_millis(1);
    loop {
        let taken: bool = client
            .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&key])
            .await?
            .get(0);
        if taken {
            return Ok(true);
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

/// What a gate read under its lock.
enum GateRead {
    /// The manifest is as the caller's cached view has it.
    Unchanged,
    /// The session's rows (`None`: no session row yet).
    Image(Option<Image>),
}

/// The session's manifest as (records, bytes of `manifest.jsonl` they spell).
async fn freshness(
    client: &impl GenericClient,
    session: &SessionId,
) -> Result<(i64, i64), StoreError> {
    let row = client
        .query_one(
            "SELECT count(*)::bigint, coalesce(sum(octet_length(body) + 1), 0)::bigint
             FROM manifest WHERE session_id = $1",
            &[&session.as_str()],
        )
        .await
        .map_err(sql_error("check the session for changes"))?;
    Ok((row.get(0), row.get(1)))
}

/// Reads a session's rows and the objects its events reference. `None` without a session row.
async fn fetch_image(
    client: &impl GenericClient,
    session: &SessionId,
) -> Result<Option<Image>, StoreError> {
    let op = "load session";
    let id = session.as_str();
    let exists = client
        .query_opt("SELECT 1 FROM sessions WHERE session_id = $1", &[&id])
        .await
        .map_err(sql_error(op))?;
    if exists.is_none() {
        return Ok(None);
    }
    let manifest = client
        .query(
            "SELECT body FROM manifest WHERE session_id = $1 ORDER BY manifest_index",
            &[&id],
        )
        .await
        .map_err(sql_error(op))?
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    let events: Vec<(i64, String)> = client
        .query(
            "SELECT event_index, body FROM events WHERE session_id = $1 ORDER BY event_index",
            &[&id],
        )
        .await
        .map_err(sql_error(op))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let (snapshots, workflows) = fetch_objects(client, &events).await?;
    Ok(Some(Image {
        manifest,
        events,
        snapshots,
        workflows,
    }))
}

/// The snapshots and workflows `events` reference that exist: (digest, text) each.
type Objects = (Vec<(String, String)>, Vec<(String, String)>);

async fn fetch_objects(
    client: &impl GenericClient,
    events: &[(i64, String)],
) -> Result<Objects, StoreError> {
    let op = "load session";
    let mut snapshots = BTreeSet::new();
    let mut workflows = BTreeSet::new();
    for (_, body) in events {
        // An event that does not parse is reported by the validator.
        let Ok(event) = SessionEvent::from_json_str(body) else {
            continue;
        };
        match event.data() {
            EventData::NodeCreated(n) => {
                snapshots.insert(n.snapshot_ref.digest().as_str().to_owned());
            }
            EventData::RunStarted(r) => {
                workflows.insert(r.workflow_hash.digest().as_str().to_owned());
            }
            _ => {}
        }
    }
    let objects = |table: &'static str, digests: BTreeSet<String>| async move {
        let digests: Vec<String> = digests.into_iter().collect();
        let sql = format!("SELECT digest, body FROM {table} WHERE digest = ANY($1)");
        client
            .query(&sql, &[&digests])
            .await
            .map(|rows| {
                rows.iter()
                    .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
                    .collect::<Vec<_>>()
            })
            .map_err(sql_error(op))
    };
    let snapshots = objects("snapshots", snapshots).await?;
    let workflows = objects("workflows", workflows).await?;
    Ok((snapshots, workflows))
}

/// The rows past a cached view of `manifest_from` records and `event_from` events, and the
/// objects the new events reference; `None` when the session row is gone or the rows before
/// those positions are not all there (then only a full load can judge).
async fn fetch_tail(
    client: &impl GenericClient,
    session: &SessionId,
    manifest_from: i64,
    event_from: i64,
) -> Result<Option<Image>, StoreError> {
    let op = "load session";
    let id = session.as_str();
    let prefix = client
        .query_one(
            "SELECT (SELECT count(*) FROM manifest WHERE session_id = $1 AND manifest_index < $2),
                    (SELECT count(*) FROM events WHERE session_id = $1 AND event_index < $3)",
            &[&id, &manifest_from, &event_from],
        )
        .await
        .map_err(sql_error(op))?;
    if prefix.get::<_, i64>(0) != manifest_from || prefix.get::<_, i64>(1) != event_from {
        return Ok(None);
    }
    let manifest = client
        .query(
            "SELECT body FROM manifest WHERE session_id = $1 AND manifest_index >= $2
             ORDER BY manifest_index",
            &[&id, &manifest_from],
        )
        .await
        .map_err(sql_error(op))?
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    let events: Vec<(i64, String)> = client
        .query(
            "SELECT event_index, body FROM events WHERE session_id = $1 AND event_index >= $2
             ORDER BY event_index",
            &[&id, &event_from],
        )
        .await
        .map_err(sql_error(op))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let (snapshots, workflows) = fetch_objects(client, &events).await?;
    Ok(Some(Image {
        manifest,
        events,
        snapshots,
        workflows,
    }))
}

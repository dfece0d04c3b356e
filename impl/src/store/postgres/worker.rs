//! The backend's thread (D98): a current-thread tokio runtime owning the connections, answering
//! one request at a time, each within the store's timeout (D110). What each request does lives
//! with its subject (`read`, `append`, `objects`, `keyring`, `gc`, `derived`); this module
//! connects, dispatches and cleans up after a stall.

use std::collections::HashMap;
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_postgres::{Client, Config};
use tokio_postgres_rustls::MakeRustlsConnect;
use workrail_spec::ids::SessionId;

use super::append::{GateRead, Prepared};
use super::gc::{Deleted, Swept};
use super::objects::ObjectTable;
use super::read::{Image, freshness};
use super::{describe, millis, schema, sql_error, stopped, tls};
use crate::store::error::StoreError;
use crate::store::session::{AppendPlan, AppendedEvent};

/// Which of the backend's workers this is, of how many (D203).
#[derive(Debug, Clone, Copy)]
pub(super) struct Place {
    pub(super) index: usize,
    pub(super) count: usize,
}

impl Place {
    /// The `n`th id this worker hands out: ids of one worker are `index` modulo `count`, so a
    /// gate's or lock's later requests are routed back to the worker holding its connection.
    pub(super) fn id(self, n: u64) -> u64 {
        n.saturating_mul(self.count as u64)
            .saturating_add(self.index as u64)
    }
}

/// Where a request's answer goes.
pub(super) type Reply<T> = std_mpsc::Sender<Result<T, StoreError>>;

/// What the backend asks of its thread; each carries the channel its answer goes back on.
pub(super) enum Request {
    Append {
        session: SessionId,
        plan: AppendPlan,
        wait: Duration,
        reply: Reply<Vec<AppendedEvent>>,
    },
    /// A session's rows in one snapshot of the database: all of them (`from` = `None`, `None`
    /// without a session row), or those past a cached view of (records, events) (see
    /// [`super::read::fetch_rows`]).
    Rows {
        session: SessionId,
        from: Option<(i64, i64)>,
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
        /// The manifest (records, bytes) of the caller's cached view, and its (records, events)
        /// counts: when the rows still have them, they are not read again; when more were
        /// committed, only the rows past the view are read (D222).
        known: Option<((i64, i64), (i64, i64))>,
        reply: Reply<(u64, GateRead)>,
    },
    /// The session's manifest (records, bytes): one query, the freshness key of a cached view.
    Freshness {
        session: SessionId,
        reply: Reply<(i64, i64)>,
    },
    /// The event rows of committed segments, from which their text is rebuilt (D227).
    Segment {
        session: SessionId,
        first: i64,
        last: i64,
        reply: Reply<Vec<(i64, String)>>,
    },
    /// The bodies of the manifest rows `[first, first + count)`, in order: a page of records a
    /// loaded session reads again (D235).
    ManifestRows {
        session: SessionId,
        first: i64,
        count: i64,
        reply: Reply<Vec<String>>,
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
        reply: Reply<Vec<(String, Option<i64>)>>,
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
    /// The bytes of the derived row `name`, if there is one (D115).
    ReadDerived {
        name: &'static str,
        reply: Reply<Option<Vec<u8>>>,
    },
    /// Replaces the derived row `name` with `bytes` (one statement; the last writer wins).
    WriteDerived {
        name: &'static str,
        bytes: Vec<u8>,
        reply: Reply<()>,
    },
    /// Ends the worker (the backend is dropped); its connections, lock guards' too, close.
    Shutdown,
}

/// The thread's body: a current-thread runtime, for the first worker the first connection
/// (migrating the schema), then one request at a time until the backend is dropped.
pub(super) fn run_worker(
    config: Config,
    (tls, ssl_mode): (MakeRustlsConnect, tls::SslMode),
    schema: String,
    limit: Duration,
    place: Place,
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
            idle: IdleGates::default(),
            limit,
            tasks: Vec::new(),
            place,
        };
        // Only the first worker connects at once (and migrates); the others connect when a
        // request first reaches them, so idle workers hold no connection.
        let started = if place.index > 0 {
            Ok(())
        } else {
            match tokio::time::timeout(limit, worker.start()).await {
                Ok(started) => started,
                Err(_) => Err(StoreError::Unanswered {
                    op: "connect to PostgreSQL",
                    after_ms: millis(limit),
                }),
            }
        };
        let failed = started.is_err();
        let _ = ready.send(started);
        if failed {
            return;
        }
        loop {
            // A quiet worker still lets its spare gate connections go once they idled their time.
            let request = match tokio::time::timeout(IDLE_GATE_KEEP, requests.recv()).await {
                Ok(Some(request)) => request,
                Ok(None) => break,
                Err(_) => {
                    worker.idle.expire(Instant::now(), Client::is_closed);
                    continue;
                }
            };
            if matches!(request, Request::Shutdown) {
                break;
            }
            worker.idle.expire(Instant::now(), Client::is_closed);
            worker.handle(request).await;
        }
    });
}

/// The thread's state: its connections and the locks and gates they hold.
pub(super) struct Worker {
    pub(super) config: Config,
    /// The TLS connector for the URL's sslmode (D114), and that mode.
    pub(super) tls: MakeRustlsConnect,
    pub(super) ssl_mode: tls::SslMode,
    pub(super) schema: String,
    /// The connection every request but the lock guards uses; reopened after it breaks.
    pub(super) client: Option<Client>,
    /// Lock guards: each holds its own connection with an open transaction.
    pub(super) locks: HashMap<u64, Client>,
    pub(super) next_lock: u64,
    /// Open append gates: a connection holding a session-level advisory lock, and its key.
    pub(super) gates: HashMap<u64, (Client, i64)>,
    /// Gate connections kept for the next gates (D211).
    pub(super) idle: IdleGates<Client>,
    /// How long one request may wait for the database (D110).
    pub(super) limit: Duration,
    /// The tasks driving this worker's connections, aborted when a request stalls.
    pub(super) tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Which worker this is (its ids say so).
    pub(super) place: Place,
}

impl Worker {
    /// A new gate or lock id, routed back to this worker.
    pub(super) fn next_id(&mut self) -> u64 {
        self.next_lock += 1;
        self.place.id(self.next_lock)
    }

    pub(super) async fn connect(&mut self, role: &str) -> Result<Client, StoreError> {
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
            // Ends when the connection closes; a broken connection shows up as `is_closed`, and
            // the request that was using it reports the failure itself.
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "a PostgreSQL connection ended with an error");
            }
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

    pub(super) async fn client(&mut self) -> Result<&mut Client, StoreError> {
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
        // Bounded, settled, answered: every request but the two releases. A reply that cannot be
        // sent has no one waiting (the caller is gone), so there is no one to tell.
        macro_rules! answer {
            ($reply:expr, $op:expr, $work:expr) => {{
                let result = bounded!($op, $work);
                self.settle(stalled).await;
                let _ = $reply.send(result);
            }};
        }
        match request {
            Request::Append {
                session,
                plan,
                wait,
                reply,
            } => answer!(
                reply,
                "append to the session",
                self.append(&session, plan, wait)
            ),
            Request::Rows {
                session,
                from,
                reply,
            } => answer!(reply, "load session", self.rows(&session, from)),
            Request::Lock {
                session,
                wait,
                reply,
            } => answer!(reply, "lock session", self.lock(&session, wait)),
            Request::Unlock { id, reply } => {
                let client = self.locks.remove(&id);
                let result: Result<(), StoreError> = bounded!("unlock session", async {
                    if let Some(client) = client {
                        // Ending the transaction releases its advisory lock. A lock guard's
                        // connection is its own and closes here whatever the outcome, so a
                        // failed ROLLBACK leaves nothing held: the server ends the transaction,
                        // and its lock, with the connection.
                        client
                            .batch_execute("ROLLBACK")
                            .await
                            .map_err(sql_error("unlock session"))?;
                    }
                    Ok(())
                });
                if let Err(e) = &result {
                    // The guard's owner is dropping it and cannot act on this: said here.
                    tracing::warn!(
                        error = %e,
                        "ending a session lock's transaction failed; its connection was closed, which releases the lock"
                    );
                }
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::PutObject {
                table,
                digest,
                body,
                reply,
            } => answer!(
                reply,
                "store an object",
                self.put_object(table, &digest, &body)
            ),
            Request::GetObject {
                table,
                digest,
                reply,
            } => answer!(reply, "read an object", self.get_object(table, &digest)),
            Request::Keyring { candidate, reply } => {
                answer!(reply, "load or create the keyring", self.keyring(candidate))
            }
            Request::List { reply } => answer!(reply, "list sessions", self.list()),
            Request::GateOpen {
                session,
                wait,
                known,
                reply,
            } => answer!(reply, "lock session", self.gate_open(&session, wait, known)),
            Request::Freshness { session, reply } => answer!(reply, "load session", async {
                let client = self.client().await?;
                freshness(&*client, &session).await
            }),
            Request::Segment {
                session,
                first,
                last,
                reply,
            } => answer!(
                reply,
                "read an earlier segment",
                self.event_rows(&session, first, last)
            ),
            Request::ManifestRows {
                session,
                first,
                count,
                reply,
            } => answer!(
                reply,
                "read earlier manifest records",
                self.manifest_rows(&session, first, count)
            ),
            Request::GateAppend {
                id,
                session,
                prepared,
                reply,
            } => answer!(
                reply,
                "append to the session",
                self.gate_append(id, &session, &prepared)
            ),
            Request::GateClose { id, reply } => {
                let gate = self.gates.remove(&id);
                // Only a connection that released the lock cleanly goes back to the idle pool.
                // On any failure it is dropped here, which closes it: the server then ends
                // whatever it was in, the session lock included, and no later gate inherits a
                // connection in an unknown state.
                let result: Result<Option<Client>, StoreError> =
                    bounded!("unlock session", async {
                        let Some((client, key)) = gate else {
                            return Ok(None);
                        };
                        let op = "unlock session";
                        let row = client
                            .query_one("SELECT pg_advisory_unlock($1)", &[&key])
                            .await
                            .map_err(sql_error(op))?;
                        let released: bool = row.try_get(0).map_err(sql_error(op))?;
                        if !released {
                            return Err(StoreError::Database {
                                session: None,
                                op,
                                detail: "the gate's connection no longer held the session lock"
                                    .into(),
                            });
                        }
                        Ok((!client.is_closed()).then_some(client))
                    });
                let result = match result {
                    Ok(Some(client)) => {
                        self.idle.give(client, Instant::now());
                        Ok(())
                    }
                    Ok(None) => Ok(()),
                    Err(e) => Err(e),
                };
                self.settle(stalled).await;
                let _ = reply.send(result);
            }
            Request::ManifestBytes { reply } => {
                answer!(reply, "read the manifest lengths", self.manifest_bytes())
            }
            Request::SwapKeyring { old, new, reply } => {
                answer!(reply, "rotate the keyring", self.swap_keyring(&old, &new))
            }
            Request::Activity { reply } => {
                answer!(reply, "read the sessions' last activity", self.activity())
            }
            Request::DeleteSession {
                session,
                expect,
                wait,
                reply,
            } => answer!(
                reply,
                "delete a session",
                self.delete_session(&session, expect, wait)
            ),
            Request::Sweep {
                roots,
                grace,
                dry_run,
                reply,
            } => answer!(
                reply,
                "sweep unreferenced objects",
                self.sweep(&roots, grace, dry_run)
            ),
            Request::ReadDerived { name, reply } => {
                answer!(reply, "read derived data", self.read_derived(name))
            }
            Request::WriteDerived { name, bytes, reply } => answer!(
                reply,
                "write derived data",
                self.write_derived(name, &bytes)
            ),
            Request::Shutdown => {}
        }
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
            // Waits for the abort; the task's outcome (cancelled) is the point, not news.
            let _ = task.await;
        }
    }
}

/// How long a spare gate connection is kept unused before it is closed (D211).
pub(super) const IDLE_GATE_KEEP: Duration = Duration::from_secs(30);

/// The most spare gate connections one worker keeps (D211).
pub(super) const IDLE_GATES_MAX: usize = 16;

/// A worker's spare gate connections (D211): a gate that released its lock cleanly hands its
/// connection back, and the next gate takes the one used last, so the others age and are closed
/// once unused for [`IDLE_GATE_KEEP`]. Idle and open together never exceed the most gates the
/// worker had open at once (a connection is only made when none is spare), and at most
/// [`IDLE_GATES_MAX`] are kept.
#[derive(Debug)]
pub(super) struct IdleGates<C> {
    /// Oldest first: each with when it was handed back.
    spare: Vec<(C, Instant)>,
}

impl<C> Default for IdleGates<C> {
    fn default() -> Self {
        Self { spare: Vec::new() }
    }
}

impl<C> IdleGates<C> {
    /// The connection handed back last that is still open, if any; closed ones are dropped.
    pub(super) fn take(&mut self, closed: impl Fn(&C) -> bool) -> Option<C> {
        while let Some((conn, _)) = self.spare.pop() {
            if !closed(&conn) {
                return Some(conn);
            }
        }
        None
    }

    /// Keeps `conn` for the next gate; past [`IDLE_GATES_MAX`] the oldest spare is closed.
    pub(super) fn give(&mut self, conn: C, now: Instant) {
        self.spare.push((conn, now));
        if self.spare.len() > IDLE_GATES_MAX {
            self.spare.remove(0);
        }
    }

    /// Closes the spares unused for [`IDLE_GATE_KEEP`] by `now`, and those already closed.
    pub(super) fn expire(&mut self, now: Instant, closed: impl Fn(&C) -> bool) {
        self.spare.retain(|(conn, at)| {
            now.saturating_duration_since(*at) < IDLE_GATE_KEEP && !closed(conn)
        });
    }

    /// Closes every spare (after a stall, D110).
    pub(super) fn clear(&mut self) {
        self.spare.clear();
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.spare.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in connection: its number, and whether it is closed.
    type Conn = (u32, bool);

    fn closed(c: &Conn) -> bool {
        c.1
    }

    /// decision: D211
    #[test]
    fn spare_gate_connections_are_reused_newest_first_and_skip_closed_ones() {
        let mut idle = IdleGates::<Conn>::default();
        let now = Instant::now();
        assert_eq!(idle.take(closed), None);
        for n in 0..5 {
            idle.give((n, n == 3), now);
        }
        // The last handed back (4), then 3 is closed and dropped, then 2.
        assert_eq!(idle.take(closed), Some((4, false)));
        assert_eq!(idle.take(closed), Some((2, false)));
        assert_eq!(idle.len(), 2);
    }

    /// decision: D211
    #[test]
    fn spare_gate_connections_are_bounded_and_expire_when_unused() {
        let mut idle = IdleGates::<Conn>::default();
        let start = Instant::now();
        for n in 0..(IDLE_GATES_MAX as u32 + 4) {
            idle.give((n, false), start + Duration::from_secs(u64::from(n)));
        }
        assert_eq!(
            idle.len(),
            IDLE_GATES_MAX,
            "past the bound the oldest is closed"
        );
        // The oldest kept was handed back at 4 s; at 4 s + the keep time it has aged out, the
        // later ones not.
        idle.expire(start + Duration::from_secs(4) + IDLE_GATE_KEEP, closed);
        assert_eq!(idle.len(), IDLE_GATES_MAX - 1);
        idle.expire(start + Duration::from_secs(1_000) + IDLE_GATE_KEEP, closed);
        assert_eq!(
            idle.len(),
            0,
            "every spare unused for the keep time is closed"
        );
        idle.give((7, false), start);
        idle.clear();
        assert_eq!(idle.take(closed), None);
    }
}

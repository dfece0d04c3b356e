//! The harness on PostgreSQL (issue 19, item 4): a throwaway schema per test (or per generated
//! case), plain SQL beside the backend, a fingerprint of every table of a schema, and
//! [`OnPostgres`], the protocol use-cases on a schema as a [`System`] the state machine drives.
//!
//! The database is `WORKRAIL_TEST_POSTGRES` (`source .ci/postgres.sh`). Without it
//! [`postgres_url`] says why and the caller passes, except under CI (`CI` set), where it panics.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use workrail::entropy::SeededEntropy;
use workrail::protocol::{CatalogLoader, Workrail};
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail::store::postgres::PostgresBackend;
use workrail::store::{LoadedSession, SessionBackend, Store, StoreError};
use workrail_spec::error::ErrorEnvelope;
use workrail_spec::ids::SessionId;
use workrail_spec::tools::{CheckpointWorkflowInput, ContinueWorkflowInput, StartWorkflowInput};

use crate::fixture;
use crate::system::{Fingerprint, Reply, SIMULATED_LOCK_WAIT, System};

/// The shared database, or `None` (and why, on stderr) outside CI; under CI its absence panics.
pub fn postgres_url(test: &str) -> Option<String> {
    match std::env::var("WORKRAIL_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but WORKRAIL_TEST_POSTGRES is not: the harness's PostgreSQL tests must run in CI (source .ci/postgres.sh to start a throwaway cluster)"
            );
            eprintln!(
                "{test}: skipped, WORKRAIL_TEST_POSTGRES is not set (set it to a postgres:// URL, e.g. from `source .ci/postgres.sh`)"
            );
            None
        }
    }
}

/// Plain SQL on a connection of its own (its own single-threaded runtime).
pub struct Sql {
    runtime: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
}

impl std::fmt::Debug for Sql {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sql").finish_non_exhaustive()
    }
}

impl Sql {
    /// Connects, or panics naming the URL.
    pub fn connect(url: &str) -> Self {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(r) => r,
            Err(e) => panic!("a tokio runtime: {e}"),
        };
        let (client, connection) =
            match runtime.block_on(tokio_postgres::connect(url, tokio_postgres::NoTls)) {
                Ok(c) => c,
                Err(e) => panic!("connect to {url}: {e}"),
            };
        runtime.spawn(async move {
            let _ = connection.await;
        });
        Self { runtime, client }
    }

    /// Runs statements, or panics naming them.
    pub fn run(&self, sql: &str) {
        if let Err(e) = self.runtime.block_on(self.client.batch_execute(sql)) {
            panic!("{sql}: {e:?}");
        }
    }

    /// The rows of a query, or panics naming it.
    pub fn rows(&self, sql: &str) -> Vec<tokio_postgres::Row> {
        match self.runtime.block_on(self.client.query(sql, &[])) {
            Ok(rows) => rows,
            Err(e) => panic!("{sql}: {e:?}"),
        }
    }

    /// Every base table of `schema` but `derived`: its row count and an md5 of its rows (as
    /// text, one a line) ordered by its primary key (by the whole row when it has none), keyed
    /// `pg/<schema>/<table>`. `derived` holds caches any read may refresh, never truth (D115:
    /// `resume_session` writes its index there, as it writes the file store's
    /// `cache/resume-index.v1.jsonl`).
    pub fn fingerprint(&self, schema: &str) -> Fingerprint {
        let tables = self.rows(&format!(
            "SELECT c.relname::text, \
               (SELECT string_agg('t.' || quote_ident(a.attname), ', ' \
                                  ORDER BY array_position(i.indkey::int2[], a.attnum)) \
                  FROM pg_index i JOIN pg_attribute a \
                    ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
                 WHERE i.indrelid = c.oid AND i.indisprimary) \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = '{schema}' AND c.relkind IN ('r', 'p') \
               AND c.relname <> 'derived' \
             ORDER BY c.relname"
        ));
        let mut out = Fingerprint::new();
        for table in tables {
            let name: String = table.get(0);
            let key: Option<String> = table.get(1);
            let order = key.unwrap_or_else(|| "t::text".to_owned());
            let row = self.rows(&format!(
                "SELECT count(*)::text || ' ' || \
                        coalesce(md5(string_agg(t::text, E'\\n' ORDER BY {order})), '-') \
                 FROM \"{schema}\".\"{name}\" t"
            ));
            let summary: String = row[0].get(0);
            out.insert(
                PathBuf::from(format!("pg/{schema}/{name}")),
                summary.into_bytes(),
            );
        }
        out
    }
}

/// All or nothing, in the rows of `schema` (D97): every session's `segment_closed` records
/// follow each other from 0 and cover exactly its event rows, which are `0..n`, and
/// `sessions.next_event_index` is `n`; a half-committed plan panics naming the session. The
/// event count of every session with events.
pub fn plans_are_whole(sql: &Sql, schema: &str) -> BTreeMap<String, u64> {
    let mut segments: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for row in sql.rows(&format!(
        "SELECT session_id, body FROM \"{schema}\".manifest WHERE kind = 'segment_closed' \
         ORDER BY session_id, manifest_index"
    )) {
        let body: &str = row.get(1);
        let record: serde_json::Value = serde_json::from_str(body)
            .unwrap_or_else(|e| panic!("an unreadable segment_closed record ({e}): {body}"));
        let index = |field: &str| {
            record[field]
                .as_u64()
                .unwrap_or_else(|| panic!("a segment_closed record without {field}: {body}"))
        };
        let bounds = (index("firstEventIndex"), index("lastEventIndex"));
        segments.entry(row.get(0)).or_default().push(bounds);
    }
    let mut events: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for row in sql.rows(&format!(
        "SELECT session_id, event_index FROM \"{schema}\".events ORDER BY session_id, event_index"
    )) {
        let index: i64 = row.get(1);
        events.entry(row.get(0)).or_default().push(index as u64);
    }
    let next: BTreeMap<String, u64> = sql
        .rows(&format!(
            "SELECT session_id, next_event_index FROM \"{schema}\".sessions"
        ))
        .iter()
        .map(|row| (row.get(0), row.get::<_, i64>(1) as u64))
        .collect();
    assert_eq!(
        events.keys().collect::<Vec<_>>(),
        segments.keys().collect::<Vec<_>>(),
        "sessions with events and sessions with segment_closed records differ"
    );
    let mut counts = BTreeMap::new();
    for (session, indices) in &events {
        let mut covered = 0;
        for &(first, last) in &segments[session] {
            assert!(
                first == covered && last >= first,
                "session {session}: segment {first}-{last} does not follow 0..{covered}"
            );
            covered = last + 1;
        }
        let count = indices.len() as u64;
        assert_eq!(
            *indices,
            (0..count).collect::<Vec<_>>(),
            "session {session}: event rows are not 0..{count}"
        );
        assert_eq!(
            covered, count,
            "session {session}: segment_closed records cover 0..{covered}, the event rows 0..{count}: a half-committed plan"
        );
        assert_eq!(
            next.get(session),
            Some(&count),
            "session {session}: next_event_index"
        );
        counts.insert(session.clone(), count);
    }
    counts
}

static SCHEMAS: AtomicUsize = AtomicUsize::new(0);

/// A schema of the caller's own in the shared database: absent when made, dropped (with
/// everything in it) when dropped.
#[derive(Debug)]
pub struct Schema {
    pub url: String,
    pub name: String,
}

impl Schema {
    /// A new schema name for `test` (a short lower-case tag), unique in this process.
    pub fn new(url: &str, test: &str) -> Self {
        let name = format!(
            "wrh_{}_{}_{}",
            &test[..test.len().min(24)],
            std::process::id(),
            SCHEMAS.fetch_add(1, Ordering::SeqCst)
        );
        Sql::connect(url).run(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"));
        Self {
            url: url.to_owned(),
            name,
        }
    }

    /// A backend on this schema (creating its tables on first use).
    pub fn backend(&self) -> PostgresBackend {
        match PostgresBackend::connect(&self.url, &self.name) {
            Ok(b) => b,
            Err(e) => panic!("PostgreSQL schema {}: {e}", self.name),
        }
    }

    /// Every table's row count and contents digest (see [`Sql::fingerprint`]).
    pub fn fingerprint(&self, sql: &Sql) -> Fingerprint {
        sql.fingerprint(&self.name)
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

/// Opens a `Workrail` on `schema` (a new process: its own connections, caches and entropy
/// stream), with `fs` as its (otherwise unused) data directory and the harness's short lock
/// wait.
pub fn open_workrail_on(
    schema: &Schema,
    fs: &MemFs,
    seed: u64,
    catalog: CatalogLoader,
) -> Result<Workrail, ErrorEnvelope> {
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    Workrail::with_store(
        shared,
        Store::postgres(schema.backend()),
        catalog,
        Arc::new(SeededEntropy::new(seed)),
    )
    .map(|w| w.with_lock_wait(SIMULATED_LOCK_WAIT))
}

/// The protocol use-cases on a PostgreSQL schema of their own: the same [`System`] as
/// [`crate::InProcess`], with the database in place of `MemFs`. Restart is a new `Workrail` (new
/// backend, new connections, empty caches) on the same schema; a second writer is the session's
/// lock held by another backend (another "process"); "nothing was written" is every table's
/// fingerprint plus every byte of the `MemFs` data directory.
pub struct OnPostgres {
    // Dropped first: its connections close before the schema is dropped.
    pub workrail: Workrail,
    pub fs: MemFs,
    sql: Sql,
    pub schema: Schema,
    catalog: CatalogLoader,
    seed: u64,
    restarts: u64,
}

impl std::fmt::Debug for OnPostgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnPostgres")
            .field("schema", &self.schema.name)
            .field("seed", &self.seed)
            .field("restarts", &self.restarts)
            .finish_non_exhaustive()
    }
}

impl OnPostgres {
    /// A fresh schema in the database at `url`.
    pub fn new(url: &str, seed: u64) -> Self {
        Self::with_catalog(url, seed, fixture::catalog())
    }

    /// A fresh schema, serving another catalog.
    pub fn with_catalog(url: &str, seed: u64, catalog: CatalogLoader) -> Self {
        let schema = Schema::new(url, "model");
        let fs = MemFs::new();
        let workrail = match open_workrail_on(&schema, &fs, seed, catalog.clone()) {
            Ok(w) => w,
            Err(e) => panic!("WorkRail does not open on PostgreSQL: {e:?}"),
        };
        Self {
            workrail,
            fs,
            sql: Sql::connect(url),
            schema,
            catalog,
            seed,
            restarts: 0,
        }
    }

    /// A different entropy stream per process, like a real restart.
    fn process_seed(&self) -> u64 {
        self.seed
            .wrapping_mul(1_000_003)
            .wrapping_add(self.restarts)
    }
}

impl System for OnPostgres {
    fn start(&mut self, input: &StartWorkflowInput) -> Reply {
        self.workrail.start_workflow(input.clone())
    }

    fn continue_workflow(&mut self, input: &ContinueWorkflowInput) -> Reply {
        self.workrail.continue_workflow(input.clone())
    }

    fn checkpoint(&mut self, input: &CheckpointWorkflowInput) -> Reply {
        self.workrail.checkpoint_workflow(input.clone())
    }

    fn restart(&mut self) {
        self.restarts += 1;
        match open_workrail_on(
            &self.schema,
            &self.fs,
            self.process_seed(),
            self.catalog.clone(),
        ) {
            Ok(w) => self.workrail = w,
            Err(e) => panic!("WorkRail does not reopen on its own schema: {e:?}"),
        }
    }

    fn hold_lock(&self, session: &SessionId) -> Box<dyn std::any::Any> {
        // Another process: a backend of its own, holding the session's advisory lock. The
        // tuple drops the lock (waiting for its release) before the backend.
        let other = self.schema.backend();
        match other.lock_session(session) {
            Ok(lock) => Box::new((lock, other)),
            Err(e) => panic!("the harness could not take the lock of {session}: {e}"),
        }
    }

    fn load(&self, session: &SessionId) -> Result<Arc<LoadedSession>, StoreError> {
        self.workrail.sessions().load(session)
    }

    fn sessions(&self) -> Vec<SessionId> {
        self.workrail.sessions().list_sessions().unwrap_or_default()
    }

    fn fingerprint(&self) -> Fingerprint {
        let mut out = self.schema.fingerprint(&self.sql);
        out.extend(self.fs.snapshot());
        for dir in self.fs.dirs() {
            let mut key = dir.into_os_string();
            key.push("#meta");
            out.insert(key.into(), b"dir (no modes in the crash model)".to_vec());
        }
        out
    }

    fn name(&self) -> &'static str {
        "postgres"
    }
}

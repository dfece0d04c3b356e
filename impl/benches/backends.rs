//! The session backends side by side (prints figures, asserts nothing timed; run with
//! `cargo bench -p workrail --bench backends`):
//!
//! - advance-like appends (a snapshot put, then `node_created` + `edge_created` + a recap, the
//!   plan shape of `workrail-store-driver`) with 1, 4 and 16 sessions appended to at once, one
//!   thread and one backend per session (as one server process per agent would): p50, p99 and
//!   throughput, for the file store (`FileBackend` on `OsFs` over a temp dir) and PostgreSQL;
//! - real advances (`continue_workflow` with an ack of about 400 bytes of notes, through the
//!   protocol's use-cases: token checks, the engine, the snapshot, the append) on a loop
//!   workflow, with 1, 4 and 16 runs advanced at once, one thread and one `Workrail` (its own
//!   backend) per run, as one server process per agent would: p50, p99 and advances per second,
//!   for both stores;
//! - what `resume_session` must do cold: list 10,000 small sessions and load each of them,
//!   with a fresh backend.
//!
//! PostgreSQL is measured when `WORKRAIL_TEST_POSTGRES` names a database (`source
//! .ci/postgres.sh` starts a throwaway one; note it runs with `fsync=off`), each measurement in
//! a schema of its own, dropped afterwards. Sizes: `WORKRAIL_BENCH_APPENDS` (appends per
//! session, default 100), `WORKRAIL_BENCH_CONCURRENCY` (default `1,4,16`),
//! `WORKRAIL_BENCH_LIST_SESSIONS` (default 10000; 0 skips the listing).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

mod support;
use support::{NOTES_BODY, WORKFLOW};
use workrail::compiler::{CompileContext, compile};
use workrail::entropy::OsEntropy;
use workrail::protocol::{CatalogLoader, Workrail};
use workrail::sources::bundled::BundledSource;
use workrail::sources::memory::MemorySource;
use workrail::sources::{Catalog, WorkflowSource};
use workrail::store::fs::{OsFs, StoreFs};
use workrail::store::memfs::MemFs;
use workrail::store::postgres::PostgresBackend;
use workrail::store::{AppendPlan, FileBackend, SessionBackend};
use workrail_spec::closed::{EdgeCauseKind, EdgeKind, NodeKind, OutputChannel, WorkflowSourceKind};
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::event::*;
use workrail_spec::ids::*;
use workrail_spec::snapshot::{EnginePayloadV1, EngineState, ExecutionSnapshotFileV1};
use workrail_spec::tools::{
    ContinueWorkflowInput, ExecutionOutput, OutputInput, StartWorkflowInput,
};

// ---------------------------------------------------------------------------------------------
// Plans (the shape of `harness/src/bin/workrail-store-driver.rs`).

fn session_id(i: u32) -> SessionId {
    let mut e = [0x5b; 10];
    e[2..6].copy_from_slice(&i.to_le_bytes());
    SessionId::from_entropy(&e)
}

fn run() -> RunId {
    RunId::from_entropy(&[0xb0; 10])
}

fn root() -> NodeId {
    NodeId::from_entropy(&[0xa0; 10])
}

fn entropy(kind: u8, session: u32, counter: u32) -> [u8; 10] {
    let mut e = [kind; 10];
    e[1..5].copy_from_slice(&session.to_le_bytes());
    e[5..9].copy_from_slice(&counter.to_le_bytes());
    e
}

fn workflow() -> CompiledWorkflowSnapshotV1 {
    let source = json!({
        "id": "project.sample", "name": "Sample", "description": "Two steps.",
        "steps": [
            {"id": "one", "title": "One", "prompt": "Do one."},
            {"id": "two", "title": "Two", "prompt": "Do two."}
        ]
    });
    compile(&source, &CompileContext::load("project"))
        .unwrap()
        .snapshot
}

fn snapshot(session: u32, counter: u32) -> ExecutionSnapshotFileV1 {
    let mut digest = [0x77u8; 32];
    digest[..4].copy_from_slice(&session.to_le_bytes());
    digest[4..8].copy_from_slice(&counter.to_le_bytes());
    ExecutionSnapshotFileV1 {
        workflow_hash: WorkflowHash::from_digest(Sha256Digest::from_bytes(&digest)),
        engine_payload: EnginePayloadV1::new(EngineState::Init).unwrap(),
    }
}

fn ev(session: &SessionId, scope: EventScope, data: EventData, id: [u8; 10]) -> SessionEvent {
    SessionEvent::new(
        EventId::from_entropy(&id),
        EventIndex::ZERO,
        session.clone(),
        scope,
        data,
    )
    .unwrap()
}

fn start_plan(session: &SessionId, hash: &WorkflowHash, snap: SnapshotRef) -> AppendPlan {
    AppendPlan {
        events: vec![
            ev(
                session,
                EventScope::Session,
                EventData::SessionCreated(SessionCreated {}),
                [0xf0; 10],
            ),
            ev(
                session,
                EventScope::Run(run()),
                EventData::run_started(RunStarted {
                    workflow_id: WorkflowId::parse("project.sample").unwrap(),
                    workflow_hash: hash.clone(),
                    workflow_source_kind: WorkflowSourceKind::Project,
                    workflow_source_ref: "sample.json".into(),
                    lane: None,
                }),
                [0xf1; 10],
            ),
            ev(
                session,
                EventScope::Node(run(), root()),
                EventData::NodeCreated(NodeCreated {
                    node_kind: NodeKind::Step,
                    parent_node_id: None,
                    workflow_hash: hash.clone(),
                    snapshot_ref: snap,
                }),
                [0xf2; 10],
            ),
        ],
    }
}

fn advance_plan(
    session: &SessionId,
    hash: &WorkflowHash,
    snap: SnapshotRef,
    n: u32,
    counter: u32,
) -> AppendPlan {
    let node = NodeId::from_entropy(&entropy(0xc0, n, counter));
    let created = entropy(0xc1, n, counter);
    AppendPlan {
        events: vec![
            ev(
                session,
                EventScope::Node(run(), node.clone()),
                EventData::NodeCreated(NodeCreated {
                    node_kind: NodeKind::Step,
                    parent_node_id: Some(root()),
                    workflow_hash: hash.clone(),
                    snapshot_ref: snap,
                }),
                created,
            ),
            ev(
                session,
                EventScope::Run(run()),
                EventData::EdgeCreated(EdgeCreated {
                    edge_kind: EdgeKind::AckedStep,
                    from_node_id: root(),
                    to_node_id: node.clone(),
                    cause: EdgeCause {
                        kind: EdgeCauseKind::IntentionalFork,
                        event_id: EventId::from_entropy(&created),
                    },
                }),
                entropy(0xc2, n, counter),
            ),
            ev(
                session,
                EventScope::Node(run(), node),
                EventData::node_output_appended(NodeOutputAppended {
                    output_id: OutputId::from_entropy(&entropy(0xc3, n, counter)),
                    supersedes_output_id: None,
                    output_channel: OutputChannel::Recap,
                    payload: OutputPayload::notes(&format!(
                        "Step {counter} done; next: verify the change and record the outcome."
                    )),
                }),
                entropy(0xc4, n, counter),
            ),
        ],
    }
}

/// Starts session `n` (and pins the workflow): what every measured session begins with.
fn start(backend: &dyn SessionBackend, n: u32) -> WorkflowHash {
    let hash = backend.put_workflow(&workflow()).unwrap();
    let snap = backend.put_snapshot(&snapshot(n, 0)).unwrap();
    backend
        .append(&session_id(n), start_plan(&session_id(n), &hash, snap))
        .unwrap();
    hash
}

/// One advance: the snapshot put, then the append.
fn advance(backend: &dyn SessionBackend, hash: &WorkflowHash, n: u32, counter: u32) {
    let snap = backend.put_snapshot(&snapshot(n, counter)).unwrap();
    let appended = backend
        .append(
            &session_id(n),
            advance_plan(&session_id(n), hash, snap, n, counter),
        )
        .unwrap();
    assert!(appended.iter().all(|a| a.newly_appended));
}

// ---------------------------------------------------------------------------------------------
// The stores.

/// Opens a backend on one store (a temp dir, or a schema); every call opens another backend
/// on the same store, as another process would.
trait Store: Sync {
    fn name(&self) -> &'static str;
    fn open(&self) -> Box<dyn SessionBackend>;
    /// The protocol's use-cases on a backend of their own (another server process).
    fn workrail(&self) -> Workrail;
}

/// The bundled workflows and the bench's loop workflow.
fn catalog() -> CatalogLoader {
    Arc::new(|| {
        let bundled = BundledSource;
        let project = MemorySource::new(WorkflowSourceKind::Project)
            .with("project/workflows/bench.json", WORKFLOW);
        let sources: Vec<&dyn WorkflowSource> = vec![&bundled, &project];
        Arc::new(Catalog::load(&sources))
    })
}

fn ack_of(out: &ExecutionOutput, i: u32) -> ContinueWorkflowInput {
    let artifacts = match &out.pending {
        Some(p) if p.step_id.as_str() == "decide" => vec![
            json!({"kind": "wr.loop_control", "loopId": "work", "decision": "continue"})
                .as_object()
                .unwrap()
                .clone(),
        ],
        _ => vec![],
    };
    ContinueWorkflowInput {
        state_token: Some(out.state_token.clone()),
        ack_token: out.ack_token.clone(),
        context: None,
        output: Some(OutputInput {
            notes_markdown: Some(format!("Unit {i} done. {NOTES_BODY}")),
            artifacts,
        }),
        preferences: vec![],
        preset: None,
    }
}

struct Files {
    dir: tempfile::TempDir,
}

impl Files {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }
}

impl Store for Files {
    fn name(&self) -> &'static str {
        "file"
    }
    fn open(&self) -> Box<dyn SessionBackend> {
        let fs: Arc<dyn StoreFs> = Arc::new(OsFs::new(self.dir.path()));
        Box::new(FileBackend::new(fs))
    }
    fn workrail(&self) -> Workrail {
        let fs: Arc<dyn StoreFs> = Arc::new(OsFs::new(self.dir.path()));
        Workrail::with_store(
            Arc::clone(&fs),
            workrail::store::Store::files(fs),
            catalog(),
            Arc::new(OsEntropy),
        )
        .unwrap()
    }
}

struct Postgres {
    url: String,
    schema: String,
}

impl Postgres {
    fn new(url: &str, what: &str) -> Self {
        let schema = format!("wrb_{what}_{}", std::process::id());
        let store = Self {
            url: url.to_owned(),
            schema,
        };
        store.sql(&format!("DROP SCHEMA IF EXISTS {} CASCADE", store.schema));
        store
    }

    fn sql(&self, sql: &str) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(connection);
            client.batch_execute(sql).await.unwrap();
        });
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.sql(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.schema));
    }
}

impl Store for Postgres {
    fn name(&self) -> &'static str {
        "postgres"
    }
    fn open(&self) -> Box<dyn SessionBackend> {
        Box::new(PostgresBackend::connect(&self.url, &self.schema).unwrap())
    }
    fn workrail(&self) -> Workrail {
        let backend = PostgresBackend::connect(&self.url, &self.schema).unwrap();
        Workrail::with_store(
            Arc::new(MemFs::new()),
            workrail::store::Store::postgres(backend),
            catalog(),
            Arc::new(OsEntropy),
        )
        .unwrap()
    }
}

// ---------------------------------------------------------------------------------------------
// Measurements.

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

struct AppendFigures {
    p50: Duration,
    p99: Duration,
    /// p50 of each session's first and last tenth of appends: a load that grows with the
    /// session shows here.
    p50_first: Duration,
    p50_last: Duration,
    per_second: f64,
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

/// `sessions` threads, each with its own backend and session, `appends` advances each.
fn appends(store: &dyn Store, sessions: u32, appends: u32) -> AppendFigures {
    timed(
        sessions,
        appends,
        |n| {
            let backend = store.open();
            let hash = start(&*backend, n);
            (backend, hash, n)
        },
        |(backend, hash, n), counter| advance(&**backend, hash, *n, counter),
    )
}

/// `runs` threads, each with its own `Workrail` and run, `advances` acknowledged advances each.
fn protocol_advances(store: &dyn Store, runs: u32, advances: u32) -> AppendFigures {
    timed(
        runs,
        advances,
        |_| {
            let wr = store.workrail();
            let out = wr
                .start_workflow(StartWorkflowInput {
                    workflow_id: "project.bench".into(),
                    context: None,
                    preferences: vec![],
                    preset: None,
                })
                .unwrap();
            (wr, out)
        },
        |(wr, out), i| *out = wr.continue_workflow(ack_of(out, i)).unwrap(),
    )
}

/// `threads` threads, each set up by `setup` (untimed), then `steps` timed calls of `step`
/// (1-based), all starting together.
fn timed<S>(
    threads: u32,
    steps: u32,
    setup: impl Fn(u32) -> S + Sync,
    step: impl Fn(&mut S, u32) + Sync,
) -> AppendFigures {
    let begin = std::sync::Barrier::new(threads as usize);
    let (latencies, wall) = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|n| {
                let (begin, setup, step) = (&begin, &setup, &step);
                scope.spawn(move || {
                    let mut state = setup(n);
                    begin.wait();
                    let started = Instant::now();
                    let mut latencies = Vec::with_capacity(steps as usize);
                    for i in 1..=steps {
                        let t = Instant::now();
                        step(&mut state, i);
                        latencies.push(t.elapsed());
                    }
                    (latencies, started.elapsed())
                })
            })
            .collect();
        let mut all = Vec::new();
        let mut wall = Duration::ZERO;
        for worker in workers {
            let (latencies, elapsed) = worker.join().unwrap();
            all.push(latencies);
            wall = wall.max(elapsed);
        }
        (all, wall)
    });
    figures(latencies, wall)
}

/// The figures of per-thread latencies over a run that took `wall`.
fn figures(latencies: Vec<Vec<Duration>>, wall: Duration) -> AppendFigures {
    let count = latencies.first().map_or(0, Vec::len);
    let tenth = count.div_ceil(10);
    let p50_first = median(latencies.iter().flat_map(|l| l[..tenth].to_vec()).collect());
    let p50_last = median(
        latencies
            .iter()
            .flat_map(|l| l[l.len() - tenth..].to_vec())
            .collect(),
    );
    let mut latencies: Vec<Duration> = latencies.into_iter().flatten().collect();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    AppendFigures {
        p50: at(0.5),
        p99: at(0.99),
        p50_first,
        p50_last,
        per_second: latencies.len() as f64 / wall.as_secs_f64(),
    }
}

struct ListFigures {
    created: Duration,
    list: Duration,
    load: Duration,
}

/// Creates `count` small sessions (start + one advance, 16 writers), then with a fresh
/// backend lists them and loads every one.
fn list_and_load(store: &dyn Store, count: u32) -> ListFigures {
    let created = Instant::now();
    let writers = 16u32.min(count.max(1));
    std::thread::scope(|scope| {
        for w in 0..writers {
            scope.spawn(move || {
                let backend = store.open();
                let mut n = w;
                while n < count {
                    let hash = start(&*backend, n);
                    advance(&*backend, &hash, n, 1);
                    n += writers;
                }
            });
        }
    });
    let created = created.elapsed();
    let backend = store.open();
    let t = Instant::now();
    let ids = backend.list_sessions().unwrap();
    let list = t.elapsed();
    assert_eq!(ids.len(), count as usize);
    let t = Instant::now();
    for id in &ids {
        let loaded = backend.load_healthy(id).unwrap();
        assert_eq!(loaded.event_count(), 6);
    }
    ListFigures {
        created,
        list,
        load: t.elapsed(),
    }
}

fn main() {
    let per_session = (env_number("WORKRAIL_BENCH_APPENDS", 100) as u32).max(1);
    let list_count = env_number("WORKRAIL_BENCH_LIST_SESSIONS", 10_000) as u32;
    let levels: Vec<u32> = std::env::var("WORKRAIL_BENCH_CONCURRENCY")
        .unwrap_or_else(|_| "1,4,16".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .filter(|&v| v > 0)
        .collect();
    let url = std::env::var("WORKRAIL_TEST_POSTGRES")
        .ok()
        .filter(|u| !u.is_empty());
    if url.is_none() {
        println!(
            "PostgreSQL: not measured (set WORKRAIL_TEST_POSTGRES=postgres://…, e.g. `source .ci/postgres.sh`, to add it)"
        );
    }

    println!(
        "\nadvance-like appends (snapshot put + 3 events), {per_session} per session, one thread and backend per session"
    );
    println!(
        "{:<9} {:>8} {:>8} {:>9} {:>9} {:>13} {:>12} {:>10}",
        "store",
        "sessions",
        "appends",
        "p50 ms",
        "p99 ms",
        "p50 first10%",
        "p50 last10%",
        "appends/s"
    );
    for &sessions in &levels {
        let mut stores: Vec<Box<dyn Store>> = vec![Box::new(Files::new())];
        if let Some(url) = &url {
            stores.push(Box::new(Postgres::new(url, &format!("appends_{sessions}"))));
        }
        for store in &stores {
            let f = appends(&**store, sessions, per_session);
            println!(
                "{:<9} {:>8} {:>8} {:>9.2} {:>9.2} {:>13.2} {:>12.2} {:>10.0}",
                store.name(),
                sessions,
                sessions * per_session,
                ms(f.p50),
                ms(f.p99),
                ms(f.p50_first),
                ms(f.p50_last),
                f.per_second
            );
        }
    }

    println!(
        "\ncontinue_workflow advances (an ack with ~400 B of notes, through the use-cases), {per_session} per run, one thread and Workrail per run"
    );
    println!(
        "{:<9} {:>8} {:>8} {:>9} {:>9} {:>13} {:>12} {:>10}",
        "store",
        "runs",
        "advances",
        "p50 ms",
        "p99 ms",
        "p50 first10%",
        "p50 last10%",
        "advances/s"
    );
    for &runs in &levels {
        let mut stores: Vec<Box<dyn Store>> = vec![Box::new(Files::new())];
        if let Some(url) = &url {
            stores.push(Box::new(Postgres::new(url, &format!("advances_{runs}"))));
        }
        for store in &stores {
            let f = protocol_advances(&**store, runs, per_session);
            println!(
                "{:<9} {:>8} {:>8} {:>9.2} {:>9.2} {:>13.2} {:>12.2} {:>10.0}",
                store.name(),
                runs,
                runs * per_session,
                ms(f.p50),
                ms(f.p99),
                ms(f.p50_first),
                ms(f.p50_last),
                f.per_second
            );
        }
    }

    if list_count > 0 {
        println!(
            "\nresume cold: list {list_count} small sessions (6 events each) and load each, fresh backend"
        );
        println!(
            "{:<9} {:>9} {:>9} {:>10} {:>12}",
            "store", "create s", "list ms", "load all s", "per load ms"
        );
        let mut stores: Vec<Box<dyn Store>> = vec![Box::new(Files::new())];
        if let Some(url) = &url {
            stores.push(Box::new(Postgres::new(url, "list")));
        }
        for store in &stores {
            let f = list_and_load(&**store, list_count);
            println!(
                "{:<9} {:>9.1} {:>9.1} {:>10.2} {:>12.3}",
                store.name(),
                f.created.as_secs_f64(),
                ms(f.list),
                f.load.as_secs_f64(),
                ms(f.load) / f64::from(list_count)
            );
        }
    }
}

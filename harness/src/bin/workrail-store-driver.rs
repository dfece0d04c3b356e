//! `workrail-store-driver`: appends to sessions of a PostgreSQL store through the
//! `SessionBackend` seam in a loop, as advances would, for the fault tests of
//! `harness/tests/postgres_faults.rs` (a process to kill, a server to kill under it).
//!
//! ```text
//! workrail-store-driver [--url postgres://…] --schema NAME [--sessions N] [--set B]
//!                       [--tag T] [--appends M] [--retries R] [--pause-ms P] [--lock-wait-ms W]
//!                       [--order random|round-robin]
//! ```
//!
//! The URL defaults to `WORKRAIL_TEST_POSTGRES`. Sessions `0..N` of set `B` are the same ids in
//! every driver given the same set, so several drivers share them. The first append to a session
//! is its start plan (`session_created`, `run_started`, the root `node_created`), identical in
//! every driver, so only one of them commits it and the others get dedupeKey no-ops. Every
//! later append puts a snapshot of its own and then appends a `node_created` referencing it, an
//! `edge_created` from the root and a recap `node_output_appended`, with ids unique to this
//! driver's `--tag` and a counter. `--appends 0` appends until killed. Each append goes to a
//! session picked at random (seeded by the tag), or to the next one with `--order round-robin`.
//!
//! After each committed append it prints one line and flushes:
//!
//! ```text
//! committed <sessionId> <last eventIndex> <last eventId> <events newly appended>
//! ```
//!
//! A retryable store error (`Locked`, `Io`, `Write`) is retried with the same plan (a retry is
//! idempotent by dedupeKey) up to `--retries` times, each retry noted on stderr (`… retry <what>:
//! <error>`); then, or on any other error, the driver
//! prints why on stderr and exits with status 2 (retries exhausted) or 3 (not retryable).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;
use workrail::compiler::{CompileContext, compile};
use workrail::store::postgres::PostgresBackend;
use workrail::store::{AppendPlan, SessionBackend, StoreError};
use workrail_spec::closed::{EdgeCauseKind, EdgeKind, NodeKind, OutputChannel, WorkflowSourceKind};
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::event::*;
use workrail_spec::ids::*;
use workrail_spec::snapshot::{EnginePayloadV1, EngineState, ExecutionSnapshotFileV1};

struct Args {
    url: String,
    schema: String,
    sessions: u32,
    set: u8,
    tag: u32,
    appends: u64,
    retries: u32,
    pause: Duration,
    lock_wait: Duration,
    round_robin: bool,
}

fn usage(message: &str) -> ! {
    eprintln!(
        "workrail-store-driver: {message}\nusage: workrail-store-driver [--url postgres://…] --schema NAME [--sessions N] [--set B] [--tag T] [--appends M] [--retries R] [--pause-ms P] [--lock-wait-ms W] [--order random|round-robin]"
    );
    std::process::exit(64);
}

fn parse_args() -> Args {
    let mut args = Args {
        url: std::env::var("WORKRAIL_TEST_POSTGRES").unwrap_or_default(),
        schema: String::new(),
        sessions: 4,
        set: 0,
        tag: std::process::id(),
        appends: 0,
        retries: 100,
        pause: Duration::ZERO,
        lock_wait: Duration::from_secs(2),
        round_robin: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        let number = || -> u64 {
            value
                .parse()
                .unwrap_or_else(|_| usage(&format!("{flag}: not a number: {value}")))
        };
        match flag.as_str() {
            "--url" => args.url = value.clone(),
            "--schema" => args.schema = value.clone(),
            "--sessions" => args.sessions = u32::try_from(number()).unwrap_or(u32::MAX),
            "--set" => {
                args.set = u8::try_from(number()).unwrap_or_else(|_| usage("--set: 0..=255"))
            }
            "--tag" => args.tag = u32::try_from(number()).unwrap_or_else(|_| usage("--tag: a u32")),
            "--appends" => args.appends = number(),
            "--retries" => args.retries = u32::try_from(number()).unwrap_or(u32::MAX),
            "--pause-ms" => args.pause = Duration::from_millis(number()),
            "--lock-wait-ms" => args.lock_wait = Duration::from_millis(number()),
            "--order" => {
                args.round_robin = match value.as_str() {
                    "random" => false,
                    "round-robin" => true,
                    _ => usage("--order: random or round-robin"),
                }
            }
            _ => usage(&format!("unknown option {flag}")),
        }
    }
    if args.url.is_empty() {
        usage("no database: pass --url or set WORKRAIL_TEST_POSTGRES");
    }
    if args.schema.is_empty() {
        usage("--schema is required");
    }
    if args.sessions == 0 {
        usage("--sessions must be at least 1");
    }
    args
}

// ---------------------------------------------------------------------------------------------
// Plans: the shape of `impl/tests/store_backends.rs`'s start and advance plans.

/// Session `i` of set `set` (the same id in every driver).
fn session_id(set: u8, i: u32) -> SessionId {
    let mut e = [0x5d; 10];
    e[1] = set;
    e[2..6].copy_from_slice(&i.to_le_bytes());
    SessionId::from_entropy(&e)
}

fn run() -> RunId {
    RunId::from_entropy(&[0xb0; 10])
}

fn root() -> NodeId {
    NodeId::from_entropy(&[0xa0; 10])
}

/// An id unique to (`kind`, driver tag, counter).
fn entropy(kind: u8, tag: u32, counter: u32) -> [u8; 10] {
    let mut e = [kind; 10];
    e[1..5].copy_from_slice(&tag.to_le_bytes());
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
    match compile(&source, &CompileContext::load("project")) {
        Ok(compiled) => compiled.snapshot,
        Err(e) => fail(3, &format!("the sample workflow does not compile: {e}")),
    }
}

fn snapshot(tag: u32, counter: u32) -> ExecutionSnapshotFileV1 {
    let mut digest = [0x77u8; 32];
    digest[..4].copy_from_slice(&tag.to_le_bytes());
    digest[4..8].copy_from_slice(&counter.to_le_bytes());
    ExecutionSnapshotFileV1 {
        workflow_hash: WorkflowHash::from_digest(Sha256Digest::from_bytes(&digest)),
        engine_payload: match EnginePayloadV1::new(EngineState::Init) {
            Ok(payload) => payload,
            Err(e) => fail(3, &format!("engine payload: {e}")),
        },
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
    .unwrap_or_else(|e| fail(3, &format!("an event of the plan is invalid: {e}")))
}

/// The same in every driver: the first to commit it wins, the others get no-ops.
fn start_plan(session: &SessionId, hash: &WorkflowHash, root_snapshot: SnapshotRef) -> AppendPlan {
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
                    workflow_id: WorkflowId::parse("project.sample")
                        .unwrap_or_else(|e| fail(3, &e.to_string())),
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
                    snapshot_ref: root_snapshot,
                }),
                [0xf2; 10],
            ),
        ],
    }
}

/// A new node under the root (its snapshot put first), its edge and a recap.
fn advance_plan(
    session: &SessionId,
    hash: &WorkflowHash,
    snap: SnapshotRef,
    tag: u32,
    counter: u32,
) -> AppendPlan {
    let node = NodeId::from_entropy(&entropy(0xc0, tag, counter));
    let created = entropy(0xc1, tag, counter);
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
                entropy(0xc2, tag, counter),
            ),
            ev(
                session,
                EventScope::Node(run(), node),
                EventData::node_output_appended(NodeOutputAppended {
                    output_id: OutputId::from_entropy(&entropy(0xc3, tag, counter)),
                    supersedes_output_id: None,
                    output_channel: OutputChannel::Recap,
                    payload: OutputPayload::notes(&format!("driver {tag}: step {counter} done")),
                }),
                entropy(0xc4, tag, counter),
            ),
        ],
    }
}

// ---------------------------------------------------------------------------------------------

fn fail(code: u8, message: &str) -> ! {
    eprintln!("workrail-store-driver: {message}");
    std::process::exit(i32::from(code));
}

fn retryable(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Locked { .. }
            | StoreError::Io { .. }
            | StoreError::Database { .. }
            | StoreError::Write { .. }
    )
}

/// `op` until it succeeds, retrying retryable errors up to `retries` times with a short,
/// growing pause; exits the process when it cannot.
fn with_retries<T>(what: &str, retries: u32, mut op: impl FnMut() -> Result<T, StoreError>) -> T {
    let mut pause = Duration::from_millis(5);
    let mut attempt = 0u32;
    loop {
        match op() {
            Ok(value) => return value,
            Err(e) if retryable(&e) && attempt < retries => {
                attempt += 1;
                eprintln!("workrail-store-driver: retry {what}: {e}");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Err(e) if retryable(&e) => {
                fail(2, &format!("{what}: gave up after {attempt} retries: {e}"))
            }
            Err(e) => fail(3, &format!("{what}: {e}")),
        }
    }
}

/// splitmix64: which session each append goes to, seeded by the tag.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

fn main() -> ExitCode {
    let args = parse_args();
    let retries = args.retries;
    let backend = with_retries("connect", retries, || {
        PostgresBackend::connect(&args.url, &args.schema)
    })
    .with_lock_wait(args.lock_wait);
    let compiled = workflow();
    let hash = with_retries("put the workflow", retries, || {
        backend.put_workflow(&compiled)
    });
    let root_snapshot = with_retries("put the root snapshot", retries, || {
        backend.put_snapshot(&snapshot(0, 0))
    });
    let sessions: Vec<SessionId> = (0..args.sessions)
        .map(|i| session_id(args.set, i))
        .collect();
    let mut started = vec![false; sessions.len()];
    let mut rng = Rng(u64::from(args.tag) ^ 0x5eed);
    let mut counter = 0u32;
    let mut done = 0u64;
    let stdout = std::io::stdout();
    while args.appends == 0 || done < args.appends {
        let i = if args.round_robin {
            (done % sessions.len() as u64) as usize
        } else {
            (rng.next() % sessions.len() as u64) as usize
        };
        let session = &sessions[i];
        let plan = if started[i] {
            counter += 1;
            let snap = with_retries("put a snapshot", retries, || {
                backend.put_snapshot(&snapshot(args.tag, counter))
            });
            advance_plan(session, &hash, snap, args.tag, counter)
        } else {
            start_plan(session, &hash, root_snapshot.clone())
        };
        let results = with_retries(&format!("append to {session}"), retries, || {
            backend.append(session, plan.clone())
        });
        started[i] = true;
        let Some(last) = results.last() else {
            fail(3, "an append returned no events");
        };
        let fresh = results.iter().filter(|r| r.newly_appended).count();
        let line = format!(
            "committed {} {} {} {}\n",
            session,
            last.event.event_index().get(),
            last.event.event_id(),
            fresh
        );
        {
            let mut out = stdout.lock();
            if out
                .write_all(line.as_bytes())
                .and_then(|()| out.flush())
                .is_err()
            {
                // Nobody is listening any more: stop quietly.
                return ExitCode::SUCCESS;
            }
        }
        done += 1;
        if !args.pause.is_zero() {
            std::thread::sleep(args.pause);
        }
    }
    ExitCode::SUCCESS
}

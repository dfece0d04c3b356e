//! Shared helpers for the bundle and GC tests: WorkRail over `MemFs` with a chosen entropy seed,
//! random sessions driven through the real protocol, projections, and bundle re-assembly after
//! tampering. Needs `mod protocol_support;` beside it in the test crate.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::json;
use workrail::bundle::NoProgress;
use workrail::entropy::SeededEntropy;
use workrail::projections::{SessionProjection, TipPolicy, project};
use workrail::protocol::Workrail;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail_spec::bundle::{BundleExtras, ExportBundleV1};
use workrail_spec::event::SessionEvent;
use workrail_spec::ids::SessionId;
use workrail_spec::jcs::to_canonical_string;
use workrail_spec::tools::{
    CheckpointWorkflowInput, ContinueWorkflowInput, ExecutionOutput, OutputInput,
};

use crate::protocol_support::{catalog, loop_control, rehydrate, start};

/// The proptest case count: `WORKRAIL_PROPTEST_CASES`, default 64.
pub fn cases() -> u32 {
    std::env::var("WORKRAIL_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

pub fn config() -> ProptestConfig {
    ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// WorkRail over `fs` whose ids and keys come from `seed` (different seeds: different keyrings).
pub fn open_seeded(fs: &MemFs, seed: u64) -> Workrail {
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    Workrail::with_parts(shared, catalog(), Arc::new(SeededEntropy::new(seed))).unwrap()
}

/// One protocol action on a session's single run.
#[derive(Debug, Clone)]
pub enum Op {
    /// Ack the current node with notes; maybe a generic artifact; at the loop's decision step
    /// maybe a `wr.loop_control` artifact (`continue` or `stop`), else the step blocks.
    Advance {
        artifact: bool,
        decide: Option<bool>,
    },
    /// Rehydrate an earlier response (`back` responses ago) and ack from there: a fork.
    Fork { back: usize },
    /// Record a checkpoint at the current node.
    Checkpoint,
    /// Rehydrate the current node (writes nothing).
    Rehydrate,
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), prop::option::of(any::<bool>()))
            .prop_map(|(artifact, decide)| Op::Advance { artifact, decide }),
        2 => (0usize..6).prop_map(|back| Op::Fork { back }),
        1 => Just(Op::Checkpoint),
        1 => Just(Op::Rehydrate),
    ]
}

pub fn workflow() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        3 => Just("project.demo"),
        1 => Just("wr.coding_task"),
        1 => Just("wr.bug_investigation"),
    ]
}

/// A session built through the protocol, with every response and token it handed out.
#[derive(Debug, Clone)]
pub struct Built {
    pub session: SessionId,
    pub responses: Vec<ExecutionOutput>,
    pub tokens: Vec<String>,
}

impl Built {
    pub fn last(&self) -> &ExecutionOutput {
        self.responses.last().unwrap()
    }
}

fn remember(built: &mut Built, out: ExecutionOutput) {
    built.tokens.push(out.state_token.clone());
    built.tokens.extend(out.ack_token.clone());
    built.tokens.extend(out.checkpoint_token.clone());
    built.responses.push(out);
}

fn ack_input(
    from: &ExecutionOutput,
    step: usize,
    artifact: bool,
    decide: Option<bool>,
) -> ContinueWorkflowInput {
    let mut artifacts = Vec::new();
    if artifact {
        artifacts
            .push(json!({"kind": "test.note", "step": step, "text": format!("artifact {step}")}));
    }
    if from
        .pending
        .as_ref()
        .is_some_and(|p| p.step_id.as_str() == "decide")
        && let Some(again) = decide
    {
        artifacts.push(loop_control(if again { "continue" } else { "stop" }));
    }
    ContinueWorkflowInput {
        state_token: Some(from.state_token.clone()),
        ack_token: from.ack_token.clone(),
        context: None,
        output: Some(OutputInput {
            notes_markdown: Some(format!("Did step {step}.")),
            artifacts: artifacts
                .into_iter()
                .map(|a| a.as_object().unwrap().clone())
                .collect(),
        }),
        preferences: vec![],
        preset: None,
    }
}

/// Starts `workflow` and applies `ops`; every call must succeed.
pub fn build_session(wr: &Workrail, workflow: &str, ops: &[Op]) -> Built {
    let first = start(wr, workflow);
    let mut built = Built {
        session: first.session.session_id.clone(),
        responses: Vec::new(),
        tokens: Vec::new(),
    };
    remember(&mut built, first);
    let mut current = built.last().clone();
    for (step, op) in ops.iter().enumerate() {
        let next = match op {
            Op::Advance { artifact, decide } => {
                if current.ack_token.is_none() {
                    continue;
                }
                wr.continue_workflow(ack_input(&current, step, *artifact, *decide))
                    .unwrap()
            }
            Op::Fork { back } => {
                let n = built.responses.len();
                let from = built.responses[n - 1 - (back % n)].clone();
                let fresh = wr.continue_workflow(rehydrate(&from.state_token)).unwrap();
                remember(&mut built, fresh.clone());
                if fresh.ack_token.is_none() {
                    current = fresh;
                    continue;
                }
                wr.continue_workflow(ack_input(&fresh, step, false, Some(false)))
                    .unwrap()
            }
            Op::Checkpoint => {
                let Some(token) = current.checkpoint_token.clone() else {
                    continue;
                };
                wr.checkpoint_workflow(CheckpointWorkflowInput {
                    state_token: current.state_token.clone(),
                    checkpoint_token: token,
                    output: OutputInput {
                        notes_markdown: Some(format!("Checkpoint {step}.")),
                        artifacts: vec![],
                    },
                })
                .unwrap()
            }
            Op::Rehydrate => wr
                .continue_workflow(rehydrate(&current.state_token))
                .unwrap(),
        };
        remember(&mut built, next.clone());
        current = next;
    }
    built
}

pub fn events(wr: &Workrail, session: &SessionId) -> Vec<SessionEvent> {
    wr.sessions()
        .load(session)
        .unwrap()
        .events()
        .all()
        .unwrap()
        .into_owned()
}

pub fn projection(wr: &Workrail, session: &SessionId) -> SessionProjection {
    project(&events(wr, session), TipPolicy::Latest)
}

pub fn export(wr: &Workrail, session: &SessionId) -> workrail::bundle::ExportedBundle {
    wr.export_session(session.as_str(), &NoProgress).unwrap()
}

/// Parses without validating (for tampering).
pub fn parse_unchecked(text: &str) -> ExportBundleV1 {
    ExportBundleV1::from_json_str(text).unwrap()
}

/// Re-assembles a (tampered) bundle with a fresh, matching integrity manifest.
pub fn reassemble(bundle: ExportBundleV1) -> String {
    let body = bundle.body;
    let bundle = ExportBundleV1::assemble_with(
        body.bundle_id,
        body.exported_at,
        body.producer,
        body.session,
        BundleExtras {
            salvage: body.salvage,
            artifacts: body.artifacts,
        },
    )
    .unwrap();
    to_canonical_string(&bundle).unwrap()
}

/// The bundle JSON without its per-export fields (`bundleId`, `exportedAt`), with `to`
/// written for every occurrence of session id `from`. Under a remap (`from != to`) the segment
/// digests and byte counts and the integrity manifest are dropped too: segment bytes and the
/// JCS of events name the session, so they legitimately differ.
pub fn comparable(text: &str, from: &SessionId, to: &SessionId) -> serde_json::Value {
    let text = text.replace(from.as_str(), to.as_str());
    let mut value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let object = value.as_object_mut().unwrap();
    object.remove("bundleId");
    object.remove("exportedAt");
    if from != to {
        object.remove("integrity");
        for record in object["session"]["manifest"].as_array_mut().unwrap() {
            if record["kind"] == "segment_closed" {
                let record = record.as_object_mut().unwrap();
                record.remove("sha256");
                record.remove("bytes");
            }
        }
    }
    value
}

/// The retention clock under test control: `now`, and per-path modification times (paths not
/// set are `default_age` old).
#[derive(Debug)]
pub struct TestClock {
    pub now: std::time::SystemTime,
    pub default_age: std::time::Duration,
    pub times:
        std::sync::Mutex<std::collections::HashMap<std::path::PathBuf, std::time::SystemTime>>,
}

pub const DAY: std::time::Duration = std::time::Duration::from_secs(86_400);

impl TestClock {
    pub fn new() -> Self {
        Self {
            now: std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000),
            default_age: DAY * 400,
            times: std::sync::Mutex::new(std::collections::HashMap::new()),
        }
    }

    /// Makes `path` look modified `age` ago.
    pub fn set_age(&self, path: impl Into<std::path::PathBuf>, age: std::time::Duration) {
        self.times
            .lock()
            .unwrap()
            .insert(path.into(), self.now - age);
    }

    /// Makes a session's manifest look last modified `days` whole days (plus an hour) ago.
    pub fn set_session_age(&self, session: &SessionId, days: u64) {
        self.set_age(
            workrail::store::layout::manifest_path(session),
            DAY * days as u32 + std::time::Duration::from_secs(3600),
        );
    }
}

impl workrail::gc::RetentionClock for TestClock {
    fn now(&self) -> std::time::SystemTime {
        self.now
    }

    fn modified(&self, path: &std::path::Path) -> std::io::Result<Option<std::time::SystemTime>> {
        Ok(Some(
            self.times
                .lock()
                .unwrap()
                .get(path)
                .copied()
                .unwrap_or(self.now - self.default_age),
        ))
    }
}

/// A `MemFs` that records every removal, in order (to check the GC deletion order).
#[derive(Debug, Clone, Default)]
pub struct RecordingFs {
    pub inner: MemFs,
    pub removed: Arc<std::sync::Mutex<Vec<std::path::PathBuf>>>,
}

impl RecordingFs {
    pub fn new(inner: MemFs) -> Self {
        Self {
            inner,
            removed: Arc::default(),
        }
    }

    pub fn removed(&self) -> Vec<std::path::PathBuf> {
        self.removed.lock().unwrap().clone()
    }

    pub fn open(&self, seed: u64) -> Workrail {
        let shared: Arc<dyn StoreFs> = Arc::new(self.clone());
        Workrail::with_parts(shared, catalog(), Arc::new(SeededEntropy::new(seed))).unwrap()
    }
}

impl StoreFs for RecordingFs {
    fn create_dir_all(&self, dir: &std::path::Path) -> std::io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn create_dir(&self, dir: &std::path::Path) -> std::io::Result<bool> {
        self.inner.create_dir(dir)
    }
    fn create_dir_durable(&self, dir: &std::path::Path) -> std::io::Result<()> {
        self.inner.create_dir_durable(dir)
    }
    fn touch(&self, path: &std::path::Path) -> std::io::Result<()> {
        self.inner.touch(path)
    }
    fn set_len(&self, path: &std::path::Path, len: u64) -> std::io::Result<()> {
        self.inner.set_len(path, len)
    }
    fn try_lock_shared(
        &self,
        path: &std::path::Path,
    ) -> Result<Option<Box<dyn workrail::store::fs::LockGuard>>, workrail::store::fs::LockError>
    {
        self.inner.try_lock_shared(path)
    }
    fn write_new(&self, path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
        self.inner.write_new(path, bytes)
    }
    fn append(&self, path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
        self.inner.append(path, bytes)
    }
    fn sync_file(&self, path: &std::path::Path) -> std::io::Result<()> {
        self.inner.sync_file(path)
    }
    fn rename(&self, from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &std::path::Path) -> std::io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn read(&self, path: &std::path::Path) -> std::io::Result<Option<Vec<u8>>> {
        self.inner.read(path)
    }
    fn len(&self, path: &std::path::Path) -> std::io::Result<Option<u64>> {
        self.inner.len(path)
    }
    fn list_dir(&self, dir: &std::path::Path) -> std::io::Result<Vec<String>> {
        self.inner.list_dir(dir)
    }
    fn remove_file(&self, path: &std::path::Path) -> std::io::Result<()> {
        self.removed.lock().unwrap().push(path.to_path_buf());
        self.inner.remove_file(path)
    }
    fn remove_dir_all(&self, dir: &std::path::Path) -> std::io::Result<()> {
        self.removed.lock().unwrap().push(dir.to_path_buf());
        self.inner.remove_dir_all(dir)
    }
    fn write_private(&self, path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
        self.inner.write_private(path, bytes)
    }
    fn try_lock(
        &self,
        path: &std::path::Path,
    ) -> Result<Box<dyn workrail::store::fs::LockGuard>, workrail::store::fs::LockError> {
        self.inner.try_lock(path)
    }
    fn try_lock_existing(
        &self,
        path: &std::path::Path,
    ) -> Result<Option<Box<dyn workrail::store::fs::LockGuard>>, workrail::store::fs::LockError>
    {
        self.inner.try_lock_existing(path)
    }
}

/// Checks the locked deletion order: every session removal precedes every CAS removal.
pub fn sessions_removed_before_cas(removed: &[std::path::PathBuf]) -> bool {
    let is_session = |p: &std::path::PathBuf| p.starts_with(workrail::store::layout::SESSIONS_DIR);
    match removed.iter().position(|p| !is_session(p)) {
        Some(first_cas) => removed[first_cas..].iter().all(|p| !is_session(p)),
        None => true,
    }
}

/// Imports `text` with the default options.
pub fn import(
    wr: &Workrail,
    text: &str,
) -> Result<workrail::bundle::ImportReport, workrail_spec::error::ErrorEnvelope> {
    wr.import_bundle(
        text,
        &workrail::bundle::ImportOptions::default(),
        &NoProgress,
    )
}

/// Imports `text` into a WorkRail over `fs`, which must refuse it with `code`, say what to do
/// next, and write nothing.
pub fn assert_refused(
    fs: &MemFs,
    wr: &Workrail,
    text: &str,
    code: workrail_spec::error::ErrorCode,
) -> workrail_spec::error::ErrorEnvelope {
    let before = fs.snapshot();
    let err = import(wr, text).expect_err("the bundle must be refused");
    assert_eq!(err.code, code, "{}", err.message);
    assert!(!err.suggestion.is_empty());
    assert_eq!(fs.snapshot(), before, "a refused import wrote something");
    err
}

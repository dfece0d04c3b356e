//! Entry points of the cargo-fuzz targets in `fuzz/` (each target is a thin wrapper, the rustls
//! habit), also called by the regression tests in `tests/fuzz_regressions.rs`. Every function
//! panics when a property fails, which is how libFuzzer learns of a finding.
//!
//! | target | input | property |
//! |---|---|---|
//! | `token_decode` | any string | parse, payload decode and verification never panic; a token that parses has one spelling (re-encoding gives the same string, D12) |
//! | `workflow_compile` | any bytes as workflow JSON | the compiler never panics; a compiled workflow's hash is its snapshot's hash and compiling is deterministic |
//! | `session_load` | edits to a real session's manifest and segment files | load never panics, the health is always classified, the validated prefix is contiguous, and no execution call succeeds on an unhealthy session |
//! | `mcp_request` | tool calls with arbitrary JSON arguments (and real tokens) | the MCP dispatch never panics and never answers `INTERNAL_ERROR`; every error is an envelope |
//! | `crash_sequence` | commands, a crash point's policy | the crash-state harness's property ([`crate::crash`]) |
//! | `bundle_import` | JSON edits to a real export bundle | import never panics and never answers `INTERNAL_ERROR`; a refused import writes nothing; an accepted one is a healthy session whose re-minted tokens rehydrate |

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use arbitrary::Arbitrary;
use serde_json::{Map, Value};
use workrail::compiler::{CompileContext, compile_str};
use workrail::entropy::SeededEntropy;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail::store::{
    CorruptionReason, KeyringStore, SessionHealth, SessionRead, SessionStore, layout,
};
use workrail::tokens::TokenCodec;
use workrail_spec::closed::TokenKind;
use workrail_spec::error::ErrorCode;
use workrail_spec::ids::SessionId;
use workrail_spec::token::{TokenParts, format_token};
use workrail_spec::tools::{ContinueWorkflowInput, TOOL_NAMES};

use crate::Harness;
use crate::crash::{check_crashes, policies};
use crate::fixture::{self, ArtifactSpec, OutputSpec};
use crate::ops::Op;
use crate::system::InProcess;

mod attest;
mod crash_replay;
mod started;

// -------------------------------------------------------------------------------------------
// token_decode
// -------------------------------------------------------------------------------------------

fn codec() -> &'static TokenCodec {
    static CODEC: OnceLock<TokenCodec> = OnceLock::new();
    CODEC.get_or_init(|| {
        let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
        match KeyringStore::new(fs).load_or_create(&SeededEntropy::new(5)) {
            Ok(keyring) => TokenCodec::new(keyring.keyring),
            Err(e) => panic!("cannot create a keyring on MemFs: {e}"),
        }
    })
}

/// Tokens of every kind signed by the fuzz target's keyring (seeds that reach verification and
/// payload decoding).
pub fn seed_tokens() -> Vec<String> {
    use workrail_spec::token::{AttemptPayload, StatePayload, TokenPayload};
    let parse = |s: &str| workrail_spec::ids::SessionId::parse(s);
    let (Ok(session), Ok(run), Ok(node), Ok(attempt), Ok(hash)) = (
        parse("sess_0123456789abcdef"),
        workrail_spec::ids::RunId::parse("run_0123456789abcdef"),
        workrail_spec::ids::NodeId::parse("node_0123456789abcdef"),
        workrail_spec::ids::AttemptId::parse("att_0123456789abcdef"),
        workrail_spec::ids::WorkflowHash::parse(&format!("sha256:{}", "ab".repeat(32))),
    ) else {
        panic!("the seed ids do not parse");
    };
    let attempt = AttemptPayload {
        session_id: session.clone(),
        run_id: run.clone(),
        node_id: node.clone(),
        attempt_id: attempt,
    };
    [
        TokenPayload::State(StatePayload {
            session_id: session,
            run_id: run,
            node_id: node,
            workflow_hash: hash,
        }),
        TokenPayload::Ack(attempt.clone()),
        TokenPayload::Checkpoint(attempt),
    ]
    .iter()
    .map(|p| codec().mint(p))
    .collect()
}

/// Arbitrary strings through token parsing, payload decoding and verification.
pub fn token_decode(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(parts) = TokenParts::parse(&text)
        && let Ok(payload) = parts.payload()
    {
        assert_eq!(payload.kind(), parts.kind);
        let again = format_token(&payload, &parts.signature);
        assert_eq!(
            again, text,
            "a token that parses must have exactly one spelling"
        );
    }
    for kind in [TokenKind::State, TokenKind::Ack, TokenKind::Checkpoint] {
        if let Err(e) = codec().verify(&text, kind) {
            let envelope = e.to_envelope("stateToken");
            assert!(
                envelope.code.to_string().starts_with("TOKEN_"),
                "{envelope:?}"
            );
        }
    }
    let _ = workrail::tokens::normalize(&text);
}

// -------------------------------------------------------------------------------------------
// workflow_compile
// -------------------------------------------------------------------------------------------

/// Arbitrary bytes as authoring JSON, in both compile contexts.
pub fn workflow_compile(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    for ctx in [CompileContext::load("project"), CompileContext::bundled()] {
        let first = compile_str(&text, &ctx);
        if let Ok(compiled) = &first {
            match compiled.snapshot.workflow_hash() {
                Ok(hash) => assert_eq!(hash, compiled.workflow_hash, "workflowHash drifted"),
                Err(e) => panic!("a compiled workflow has no hash: {e}"),
            }
        }
        let second = compile_str(&text, &ctx);
        match (&first, &second) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "compiling is not deterministic"),
            (Err(_), Err(_)) => {}
            _ => panic!("compiling the same text twice disagreed"),
        }
    }
}

// -------------------------------------------------------------------------------------------
// session_load
// -------------------------------------------------------------------------------------------

/// A real data directory: its files, one session and a stateToken of it.
#[derive(Debug)]
struct BaseSession {
    files: Vec<(PathBuf, Vec<u8>)>,
    session: SessionId,
    state_token: String,
}

fn base_sessions() -> &'static [BaseSession] {
    static BASES: OnceLock<Vec<BaseSession>> = OnceLock::new();
    BASES.get_or_init(|| {
        let notes = |n| OutputSpec {
            notes: Some(n),
            artifacts: vec![],
            context: None,
        };
        let scripts: [&[Op]; 2] = [
            &[
                Op::Start { prefs: None },
                Op::Advance {
                    node: 0,
                    output: notes(1),
                    prefs: None,
                },
            ],
            &[
                Op::Start { prefs: None },
                Op::Advance {
                    node: 0,
                    output: notes(1),
                    prefs: None,
                },
                Op::Advance {
                    node: 0,
                    output: notes(2),
                    prefs: None,
                },
                Op::Advance {
                    node: 0,
                    output: OutputSpec {
                        notes: Some(3),
                        artifacts: vec![ArtifactSpec::LoopContinue],
                        context: None,
                    },
                    prefs: None,
                },
                Op::Checkpoint { node: 0, notes: 1 },
                Op::Advance {
                    node: 2,
                    output: notes(4),
                    prefs: None,
                },
            ],
        ];
        scripts
            .iter()
            .map(|ops| {
                let mut h = Harness::new(InProcess::new(3));
                if let Err(e) = h.run(ops) {
                    panic!("the fuzz base session does not build: {e}");
                }
                let session = h.world.runs[0].impl_session.clone();
                let state_token = h
                    .world
                    .state_tokens
                    .get(&h.world.nodes[0].imp)
                    .cloned()
                    .unwrap_or_default();
                BaseSession {
                    files: h.sys.fs.snapshot().into_iter().collect(),
                    session,
                    state_token,
                }
            })
            .collect()
    })
}

/// One edit to the session's files (file 0 is the manifest, then the segments in name order).
#[derive(Debug, Clone, Arbitrary)]
pub enum FileEdit {
    Truncate {
        file: u8,
        at: u16,
    },
    Flip {
        file: u8,
        at: u16,
        bit: u8,
    },
    Insert {
        file: u8,
        at: u16,
        bytes: Vec<u8>,
    },
    DropLine {
        file: u8,
        line: u8,
    },
    DuplicateLine {
        file: u8,
        line: u8,
    },
    SwapLines {
        file: u8,
        a: u8,
        b: u8,
    },
    ReplaceLine {
        file: u8,
        line: u8,
        bytes: Vec<u8>,
    },
    /// Replaces one JSON field of a line with another value (keeps the line parseable).
    SetField {
        file: u8,
        line: u8,
        field: u8,
        value: u32,
    },
    Remove {
        file: u8,
    },
    Rename {
        file: u8,
        first: u16,
        last: u16,
    },
    Raw {
        file: u8,
        bytes: Vec<u8>,
    },
    /// Recomputes a segment's attestation (sha256, bytes) after edits, so edits inside segments
    /// get past the digest check.
    Reattest {
        file: u8,
    },
}

/// The fuzz input of `session_load`.
#[derive(Debug, Clone, Arbitrary)]
pub struct SessionLoadInput {
    pub base: u8,
    pub edits: Vec<FileEdit>,
}

fn lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split_inclusive(|b| *b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

fn apply_edit(files: &mut [(PathBuf, Option<Vec<u8>>)], edit: &FileEdit) {
    if files.is_empty() {
        return;
    }
    let n = files.len();
    let pick = |f: u8| usize::from(f) % n;
    let with_lines = |bytes: &mut Vec<u8>, f: &mut dyn FnMut(&mut Vec<Vec<u8>>)| {
        let mut ls = lines(bytes);
        f(&mut ls);
        *bytes = ls.concat();
    };
    match edit {
        FileEdit::Truncate { file, at } => {
            if let Some(b) = &mut files[pick(*file)].1 {
                b.truncate(usize::from(*at) % (b.len() + 1));
            }
        }
        FileEdit::Flip { file, at, bit } => {
            if let Some(b) = &mut files[pick(*file)].1
                && !b.is_empty()
            {
                let i = usize::from(*at) % b.len();
                b[i] ^= 1 << (bit % 8);
            }
        }
        FileEdit::Insert { file, at, bytes } => {
            if let Some(b) = &mut files[pick(*file)].1 {
                let i = usize::from(*at) % (b.len() + 1);
                b.splice(i..i, bytes.iter().copied());
            }
        }
        FileEdit::DropLine { file, line } => {
            if let Some(b) = &mut files[pick(*file)].1 {
                with_lines(b, &mut |ls| {
                    if !ls.is_empty() {
                        ls.remove(usize::from(*line) % ls.len());
                    }
                });
            }
        }
        FileEdit::DuplicateLine { file, line } => {
            if let Some(b) = &mut files[pick(*file)].1 {
                with_lines(b, &mut |ls| {
                    if !ls.is_empty() {
                        let i = usize::from(*line) % ls.len();
                        ls.insert(i, ls[i].clone());
                    }
                });
            }
        }
        FileEdit::SwapLines { file, a, b: other } => {
            if let Some(b) = &mut files[pick(*file)].1 {
                with_lines(b, &mut |ls| {
                    if !ls.is_empty() {
                        let (x, y) = (usize::from(*a) % ls.len(), usize::from(*other) % ls.len());
                        ls.swap(x, y);
                    }
                });
            }
        }
        FileEdit::ReplaceLine { file, line, bytes } => {
            if let Some(b) = &mut files[pick(*file)].1 {
                with_lines(b, &mut |ls| {
                    if !ls.is_empty() {
                        let i = usize::from(*line) % ls.len();
                        ls[i] = bytes.clone();
                    }
                });
            }
        }
        FileEdit::SetField {
            file,
            line,
            field,
            value,
        } => {
            if let Some(b) = &mut files[pick(*file)].1 {
                with_lines(b, &mut |ls| {
                    if ls.is_empty() {
                        return;
                    }
                    let i = usize::from(*line) % ls.len();
                    let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(&ls[i]) else {
                        return;
                    };
                    set_field(&mut map, *field, *value);
                    if let Ok(mut text) =
                        workrail_spec::jcs::to_canonical_string(&Value::Object(map))
                    {
                        text.push('\n');
                        ls[i] = text.into_bytes();
                    }
                });
            }
        }
        FileEdit::Remove { file } => files[pick(*file)].1 = None,
        FileEdit::Rename { file, first, last } => {
            let i = pick(*file);
            if i > 0
                && let Some(parent) = files[i].0.parent().map(Path::to_path_buf)
            {
                files[i].0 = parent.join(format!("{first:08}-{last:08}.jsonl"));
            }
        }
        FileEdit::Raw { file, bytes } => files[pick(*file)].1 = Some(bytes.clone()),
        FileEdit::Reattest { file } => {
            let i = pick(*file);
            if i == 0 {
                return;
            }
            let (path, Some(segment)) = (&files[i].0, &files[i].1) else {
                return;
            };
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let digest = workrail_spec::jcs::sha256(segment).to_string();
            let size = segment.len() as u64;
            if let Some(manifest) = &mut files[0].1 {
                with_lines(manifest, &mut |ls| {
                    for l in ls.iter_mut() {
                        let Ok(Value::Object(mut map)) = serde_json::from_slice::<Value>(l) else {
                            continue;
                        };
                        let attests = map
                            .get("segmentRelPath")
                            .and_then(Value::as_str)
                            .is_some_and(|p| p.ends_with(&name));
                        if attests {
                            map.insert("sha256".into(), Value::String(digest.clone()));
                            map.insert("bytes".into(), Value::from(size));
                            if let Ok(mut text) =
                                workrail_spec::jcs::to_canonical_string(&Value::Object(map))
                            {
                                text.push('\n');
                                *l = text.into_bytes();
                            }
                        }
                    }
                });
            }
        }
    }
}

fn set_field(map: &mut Map<String, Value>, field: u8, value: u32) {
    let keys: Vec<String> = map.keys().cloned().collect();
    if keys.is_empty() {
        return;
    }
    let key = &keys[usize::from(field) % keys.len()];
    let replacement = match value % 4 {
        0 => Value::from(value / 4),
        1 => Value::String(format!("x{}", value / 4)),
        2 => Value::Null,
        _ => match map.get(key) {
            Some(Value::Number(n)) => Value::from(n.as_u64().unwrap_or(0).wrapping_add(1)),
            Some(Value::String(s)) => Value::String(format!("{s}0")),
            _ => Value::Bool(true),
        },
    };
    map.insert(key.clone(), replacement);
}

/// Edits a real session's files, loads it, and uses it.
pub fn session_load(input: &SessionLoadInput) {
    let bases = base_sessions();
    let base = &bases[usize::from(input.base) % bases.len()];
    let session_dir = layout::session_dir(&base.session);
    let fs = MemFs::new();
    let mut session_files: Vec<(PathBuf, Option<Vec<u8>>)> = Vec::new();
    for (path, bytes) in &base.files {
        if path.starts_with(&session_dir) && path.extension().is_some_and(|e| e == "jsonl") {
            session_files.push((path.clone(), Some(bytes.clone())));
        } else {
            write(&fs, path, bytes);
        }
    }
    // The manifest first, then the segments in name order.
    session_files.sort_by_key(|(p, _)| (!p.ends_with("manifest.jsonl"), p.clone()));
    for edit in input.edits.iter().take(16) {
        apply_edit(&mut session_files, edit);
    }
    for (path, bytes) in &session_files {
        if let Some(bytes) = bytes {
            write(&fs, path, bytes);
        }
    }
    // The server validates the session once (with the snapshots and pinned workflows its events
    // reference, D53), and the rehydrate below finds that validation in its cache. A reader of
    // the log alone must come to the same verdict (load is deterministic), except where the
    // server stopped at a damaged or missing object: there the log reader validates further.
    let workrail = match crate::system::open_workrail(&fs, 9) {
        Ok(w) => w,
        Err(e) => panic!("WorkRail does not open: {e:?}"),
    };
    let first = workrail.sessions().load(&base.session);
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    let log_only = SessionStore::new(shared).load(&base.session);
    match (&first, &log_only) {
        (Ok(a), Ok(b)) => {
            let (a_events, b_events) = match (a.events().all(), b.events().all()) {
                (Ok(a), Ok(b)) => (a, b),
                (Err(e), _) | (_, Err(e)) => panic!("a loaded session's events do not read: {e}"),
            };
            let at_object = a.health.corruption().is_some_and(|c| {
                matches!(
                    c.reason,
                    CorruptionReason::SnapshotMissing
                        | CorruptionReason::SnapshotDamaged
                        | CorruptionReason::WorkflowMissing
                        | CorruptionReason::WorkflowDamaged
                )
            });
            if at_object {
                assert!(
                    b_events.starts_with(&a_events),
                    "load is not deterministic: the log reader's prefix does not extend the server's"
                );
            } else {
                assert_eq!(a.health, b.health, "load is not deterministic");
                assert_eq!(a_events, b_events, "load is not deterministic");
            }
            for (i, e) in b_events.iter().enumerate() {
                assert_eq!(
                    e.event_index().get(),
                    i as u64,
                    "the validated prefix has a hole"
                );
                assert_eq!(e.session_id(), &base.session);
            }
            for health in [&a.health, &b.health] {
                match health {
                    SessionHealth::Healthy => {}
                    other => assert!(other.corruption().is_some(), "unclassified: {other:?}"),
                }
            }
        }
        (Err(a), Err(b)) => assert_eq!(a, b, "load is not deterministic"),
        _ => panic!("load is not deterministic: {first:?} vs {log_only:?}"),
    }
    // Execution never succeeds on an unhealthy session, and never panics on any.
    let reply = workrail.continue_workflow(ContinueWorkflowInput {
        state_token: Some(base.state_token.clone()),
        ack_token: None,
        context: None,
        output: None,
        preferences: vec![],
        preset: None,
    });
    let healthy = matches!(&first, Ok(l) if l.health.is_healthy());
    if !healthy {
        assert!(
            reply.is_err(),
            "rehydrate succeeded on a session that does not load healthy: {first:?}"
        );
    }
    if let Err(e) = &reply {
        assert_ne!(e.code, ErrorCode::InternalError, "{e:?}");
    }
}

fn write(fs: &MemFs, path: &Path, bytes: &[u8]) {
    let result = path
        .parent()
        .map_or(Ok(()), |p| fs.create_dir_all(p))
        .and_then(|()| fs.write_new(path, bytes))
        .and_then(|()| fs.sync_file(path));
    if let Err(e) = result {
        panic!("MemFs refused a write: {e}");
    }
}

// -------------------------------------------------------------------------------------------
// mcp_request
// -------------------------------------------------------------------------------------------

/// A JSON value, with leaves that can be real tokens or ids from earlier responses.
#[derive(Debug, Clone, Arbitrary)]
pub enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
    /// `stateToken` / `ackToken` / `checkpointToken` of the `response`-th successful response.
    Token {
        response: u8,
        which: u8,
    },
    WorkflowId,
    Artifact(ArtifactSpec),
}

/// A well-shaped argument object, so calls reach past argument validation.
#[derive(Debug, Clone, Arbitrary)]
pub enum Arguments {
    Any(Json),
    Start {
        workflow: Json,
        context: Option<Json>,
        preferences: Option<Json>,
    },
    Continue {
        state: Json,
        ack: Option<Json>,
        output: Option<OutputSpec>,
        context: Option<Json>,
        preferences: Option<Json>,
    },
    Checkpoint {
        state: Json,
        checkpoint: Json,
        notes: Option<String>,
    },
    Absent,
}

/// One `tools/call`.
#[derive(Debug, Clone, Arbitrary)]
pub struct McpCall {
    pub tool: u8,
    pub other_name: Option<String>,
    pub arguments: Arguments,
}

/// The fuzz input of `mcp_request`.
#[derive(Debug, Clone, Arbitrary)]
pub struct McpInput {
    pub calls: Vec<McpCall>,
}

fn to_value(json: &Json, responses: &[Value], depth: usize) -> Value {
    if depth > 6 {
        return Value::Null;
    }
    match json {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Int(i) => Value::from(*i),
        Json::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Json::Str(s) => Value::String(s.clone()),
        Json::Array(items) => Value::Array(
            items
                .iter()
                .take(8)
                .map(|j| to_value(j, responses, depth + 1))
                .collect(),
        ),
        Json::Object(fields) => Value::Object(
            fields
                .iter()
                .take(8)
                .map(|(k, v)| (k.clone(), to_value(v, responses, depth + 1)))
                .collect(),
        ),
        Json::Token { response, which } => {
            if responses.is_empty() {
                return Value::Null;
            }
            let r = &responses[usize::from(*response) % responses.len()];
            let key = ["stateToken", "ackToken", "checkpointToken"][usize::from(*which) % 3];
            r.get(key).cloned().unwrap_or(Value::Null)
        }
        Json::WorkflowId => Value::String(fixture::WORKFLOW_ID.into()),
        Json::Artifact(a) => Value::Object(a.to_json()),
    }
}

fn arguments(args: &Arguments, responses: &[Value]) -> Option<Value> {
    let v = |j: &Json| to_value(j, responses, 0);
    let mut map = Map::new();
    match args {
        Arguments::Absent => return None,
        Arguments::Any(j) => return Some(v(j)),
        Arguments::Start {
            workflow,
            context,
            preferences,
        } => {
            map.insert("workflowId".into(), v(workflow));
            if let Some(c) = context {
                map.insert("context".into(), v(c));
            }
            if let Some(p) = preferences {
                map.insert("preferences".into(), v(p));
            }
        }
        Arguments::Continue {
            state,
            ack,
            output,
            context,
            preferences,
        } => {
            map.insert("stateToken".into(), v(state));
            if let Some(a) = ack {
                map.insert("ackToken".into(), v(a));
            }
            if let Some(o) = output.as_ref().and_then(OutputSpec::to_input) {
                map.insert(
                    "output".into(),
                    serde_json::to_value(o).unwrap_or(Value::Null),
                );
            }
            if let Some(c) = context {
                map.insert("context".into(), v(c));
            }
            if let Some(p) = preferences {
                map.insert("preferences".into(), v(p));
            }
        }
        Arguments::Checkpoint {
            state,
            checkpoint,
            notes,
        } => {
            map.insert("stateToken".into(), v(state));
            map.insert("checkpointToken".into(), v(checkpoint));
            let mut output = Map::new();
            if let Some(n) = notes {
                output.insert("notesMarkdown".into(), Value::String(n.clone()));
            }
            map.insert("output".into(), Value::Object(output));
        }
    }
    Some(Value::Object(map))
}

/// Tool calls with arbitrary arguments through the MCP dispatch layer (no stdio), on a data
/// directory that holds a started run whose tokens the input can use (a copy of one started once
/// per process: [`started`]).
pub fn mcp_request(input: &McpInput) {
    let (workrail, start) = started::started();
    let mut responses: Vec<Value> = vec![start];
    for call in input.calls.iter().take(8) {
        let name = match &call.other_name {
            Some(n) if call.tool % 4 == 0 => n.clone(),
            _ => TOOL_NAMES[usize::from(call.tool) % TOOL_NAMES.len()].to_owned(),
        };
        let args = arguments(&call.arguments, &responses);
        let outcome = workrail::mcp::dispatch::call_tool(&workrail, &name, args);
        assert!(!outcome.text.is_empty(), "{name}: a result without text");
        if outcome.is_error {
            let envelope: workrail_spec::error::ErrorEnvelope =
                match serde_json::from_value(outcome.structured.clone()) {
                    Ok(e) => e,
                    Err(e) => panic!("{name}: an error result without an envelope ({e})"),
                };
            assert_ne!(
                envelope.code,
                ErrorCode::InternalError,
                "{name}: INTERNAL_ERROR: {}",
                envelope.message
            );
        } else {
            responses.push(outcome.structured);
        }
    }
    // Whatever happened, every session still loads healthy.
    for session in workrail.sessions().list_sessions().unwrap_or_default() {
        if let Ok(loaded) = workrail.sessions().load(&session) {
            assert!(loaded.health.is_healthy(), "{:?}", loaded.health);
        }
    }
}

// -------------------------------------------------------------------------------------------
// crash_sequence
// -------------------------------------------------------------------------------------------

/// The fuzz input of `crash_sequence`.
#[derive(Debug, Clone, Arbitrary)]
pub struct CrashInput {
    pub seed: u64,
    pub prefix: Vec<Op>,
    pub last: Op,
    pub policy: u8,
}

/// The crash-state property on an arbitrary command sequence (the last command's crash points
/// rebuilt by replaying one recorded run: [`crash_replay`]).
pub fn crash_sequence(input: &CrashInput) {
    let (prefix, policy) = crash_plan(input);
    if let Err(e) = crash_replay::check_crashes(&prefix, &input.last, input.seed, policy) {
        panic!("{e}");
    }
}

/// The crash points [`crash_sequence`] checked, and those [`crate::crash::check_crashes`] (which
/// runs the last command once per crash point) checks for the same input: the reference the
/// replay is tested against. `Err` when either finds a failure.
pub fn crash_sequence_points(input: &CrashInput) -> Result<(u64, u64), String> {
    let (prefix, policy) = crash_plan(input);
    let replayed = crash_replay::check_crashes(&prefix, &input.last, input.seed, policy)?;
    let reference = check_crashes(&prefix, &input.last, input.seed, &[policy])?;
    Ok((replayed, reference.points))
}

fn crash_plan(input: &CrashInput) -> (Vec<Op>, workrail::store::memfs::UnsyncedData) {
    let mut prefix = vec![Op::Start { prefs: None }];
    prefix.extend(input.prefix.iter().take(8).cloned());
    let all = policies(input.seed);
    (prefix, all[usize::from(input.policy) % all.len()])
}

// -------------------------------------------------------------------------------------------
// bundle_import
// -------------------------------------------------------------------------------------------

/// Real export bundles of the base sessions (their RFC 8785 text).
fn base_bundles() -> &'static [String] {
    static BUNDLES: OnceLock<Vec<String>> = OnceLock::new();
    BUNDLES.get_or_init(|| {
        base_sessions()
            .iter()
            .map(|base| {
                let fs = MemFs::new();
                for (path, bytes) in &base.files {
                    write(&fs, path, bytes);
                }
                let workrail = match crate::system::open_workrail(&fs, 4) {
                    Ok(w) => w,
                    Err(e) => panic!("WorkRail does not open: {e:?}"),
                };
                match workrail::bundle::export_session(
                    &workrail,
                    base.session.as_str(),
                    std::time::UNIX_EPOCH,
                    &workrail::bundle::NoProgress,
                ) {
                    Ok(exported) => exported.text,
                    Err(e) => panic!("the base session does not export: {e:?}"),
                }
            })
            .collect()
    })
}

/// One edit of a bundle's JSON; a path is a list of child choices (object key or array index,
/// each taken modulo the number of children).
#[derive(Debug, Clone, Arbitrary)]
pub enum JsonEdit {
    Set {
        path: Vec<u8>,
        value: Json,
    },
    Remove {
        path: Vec<u8>,
    },
    Duplicate {
        path: Vec<u8>,
    },
    /// Cut the serialized text at a byte offset.
    Truncate {
        at: u16,
    },
    /// Recomputes the integrity manifest of the bundle as edited so far (when it still parses
    /// as a bundle), so the edits get past the integrity check to the structural checks behind
    /// it (as `FileEdit::Reattest` does for session files).
    Reattest,
}

/// The fuzz input of `bundle_import`.
#[derive(Debug, Clone, Arbitrary)]
pub struct BundleInput {
    pub base: u8,
    pub edits: Vec<JsonEdit>,
    /// Import into the data directory the bundle came from (its session id collides).
    pub same_dir: bool,
    pub allow_salvage: bool,
}

/// The parent container of the node at `path`, and the child's key or index.
fn walk_to<'v>(root: &'v mut Value, path: &[u8]) -> Option<(&'v mut Value, usize)> {
    let (last, parents) = path.split_last()?;
    let mut here = root;
    for step in parents {
        here = match here {
            Value::Object(map) if !map.is_empty() => {
                let key = map.keys().nth(usize::from(*step) % map.len())?.clone();
                map.get_mut(&key)?
            }
            Value::Array(items) if !items.is_empty() => {
                let n = items.len();
                items.get_mut(usize::from(*step) % n)?
            }
            _ => return None,
        };
    }
    Some((here, usize::from(*last)))
}

fn edit_json(root: &mut Value, edit: &JsonEdit, base: &attest::Attested) {
    let (path, op) = match edit {
        JsonEdit::Set { path, .. } | JsonEdit::Remove { path } | JsonEdit::Duplicate { path } => {
            (path, edit)
        }
        JsonEdit::Truncate { .. } => return,
        JsonEdit::Reattest => {
            base.reattest(root);
            return;
        }
    };
    let Some((parent, choice)) = walk_to(root, &path[..path.len().min(12)]) else {
        return;
    };
    match parent {
        Value::Object(map) if !map.is_empty() => {
            let Some(key) = map.keys().nth(choice % map.len()).cloned() else {
                return;
            };
            match op {
                JsonEdit::Set { value, .. } => {
                    map.insert(key, to_value(value, &[], 0));
                }
                JsonEdit::Remove { .. } => {
                    map.remove(&key);
                }
                JsonEdit::Duplicate { .. } => {
                    if let Some(v) = map.get(&key).cloned() {
                        map.insert(format!("{key}2"), v);
                    }
                }
                JsonEdit::Truncate { .. } | JsonEdit::Reattest => {}
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let i = choice % items.len();
            match op {
                JsonEdit::Set { value, .. } => items[i] = to_value(value, &[], 0),
                JsonEdit::Remove { .. } => {
                    items.remove(i);
                }
                JsonEdit::Duplicate { .. } => {
                    let v = items[i].clone();
                    items.insert(i, v);
                }
                JsonEdit::Truncate { .. } | JsonEdit::Reattest => {}
            }
        }
        _ => {}
    }
}

/// The base bundles as JSON, with what their integrity entries attest.
fn base_attested() -> &'static [attest::Attested] {
    static ATTESTED: OnceLock<Vec<attest::Attested>> = OnceLock::new();
    ATTESTED.get_or_init(|| {
        base_bundles()
            .iter()
            .map(|text| attest::Attested::new(text))
            .collect()
    })
}

/// A base bundle (see [`BundleInput::base`]) as JSON, for building edits in tests.
pub fn base_bundle(base: u8) -> Value {
    let bundles = base_attested();
    bundles[usize::from(base) % bundles.len()].value.clone()
}

/// Imports an edited real bundle.
pub fn bundle_import(input: &BundleInput) {
    let _ = bundle_import_outcome(input);
}

/// [`bundle_import`], returning the refusal's code (after checking that the refusal wrote
/// nothing).
pub fn bundle_import_outcome(input: &BundleInput) -> Result<(), ErrorCode> {
    let bundles = base_bundles();
    let which = usize::from(input.base) % bundles.len();
    let mut text = bundles[which].clone();
    if !input.edits.is_empty() {
        let base = &base_attested()[which];
        let mut value = base.value.clone();
        for edit in input.edits.iter().take(8) {
            edit_json(&mut value, edit, base);
        }
        text = value.to_string();
        for edit in &input.edits {
            if let JsonEdit::Truncate { at } = edit {
                let mut cut = usize::from(*at) % (text.len() + 1);
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
            }
        }
    }
    let fs = MemFs::new();
    if input.same_dir {
        for (path, bytes) in &base_sessions()[which].files {
            write(&fs, path, bytes);
        }
    }
    let workrail = match crate::system::open_workrail(&fs, 6) {
        Ok(w) => w,
        Err(e) => panic!("WorkRail does not open: {e:?}"),
    };
    let before = fs.snapshot();
    let options = workrail::bundle::ImportOptions {
        allow_salvage: input.allow_salvage,
    };
    match workrail::bundle::import_bundle(&workrail, &text, &options, &workrail::bundle::NoProgress)
    {
        Err(e) => {
            assert_ne!(e.code, ErrorCode::InternalError, "{e:?}");
            assert_eq!(
                fs.snapshot(),
                before,
                "a refused import wrote to the data directory"
            );
            Err(e.code)
        }
        Ok(report) => {
            let loaded = match workrail.sessions().load(&report.session_id) {
                Ok(l) => l,
                Err(e) => panic!("an imported session does not load: {e}"),
            };
            assert!(loaded.health.is_healthy(), "{:?}", loaded.health);
            assert_eq!(loaded.event_count(), report.events);
            for run in &report.runs {
                let Some(resume) = &run.resume else { continue };
                let again = workrail.continue_workflow(ContinueWorkflowInput {
                    state_token: Some(resume.state_token.clone()),
                    ack_token: None,
                    context: None,
                    output: None,
                    preferences: vec![],
                    preset: None,
                });
                match again {
                    Ok(out) => assert_eq!(
                        serde_json::to_string(&out).ok(),
                        serde_json::to_string(resume).ok(),
                        "the re-minted tokens do not rehydrate to the import's response"
                    ),
                    Err(e) => panic!("the re-minted stateToken does not rehydrate: {e:?}"),
                }
            }
            Ok(())
        }
    }
}

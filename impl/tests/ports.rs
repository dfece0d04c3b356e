//! The persistence ports (locks §17 "Persistence ports", "Port interfaces", §16.4 "Quality
//! gates"): each exists, takes newtypes, returns `Result` with a closed-set error, and the
//! read-only port has no way to append.
//!
//! The signatures are checked by the compiler: each port method is bound to a function pointer
//! of the exact type the locks ask for, so a port that starts taking a bare `String` or returning
//! a panic-prone value stops this file from compiling.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;

use workrail::entropy::{Entropy, EntropyError, SeededEntropy};
use workrail::store::fs::{LockError, LockGuard, StoreFs};
use workrail::store::memfs::MemFs;
use workrail::store::{
    AppendGate, AppendPlan, AppendedEvent, CacheKey, CacheLookup, HeldKeyring, KeyringStore,
    LoadedSession, PinnedWorkflowStore, ProjectionCache, SessionRead, SessionStore, SnapshotStore,
    StoreError,
};
use workrail::tokens::{TokenCodec, TokenError};
use workrail_spec::closed::TokenKind;
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::error::ErrorCode;
use workrail_spec::ids::{SessionId, SnapshotRef, WorkflowHash};
use workrail_spec::snapshot::ExecutionSnapshotFileV1;
use workrail_spec::token::TokenPayload;

/// The append port's exact signature, for a gate of any lifetime.
fn append_port() {
    fn gate_append<'w>(
        gate: &mut AppendGate<'w>,
        plan: AppendPlan,
    ) -> Result<Vec<AppendedEvent>, StoreError> {
        AppendGate::<'w>::append(gate, plan)
    }
    let _ = gate_append;
}

/// lock: L-PURE-PORTS, L-PURE-RESULT
#[test]
fn every_port_exists_with_newtypes_in_and_closed_errors_out() {
    // Session store: load (with health: the validated prefix of any session), load a healthy
    // session, list, and append, which only an open gate can do.
    let _load: fn(&SessionStore, &SessionId) -> Result<Arc<LoadedSession>, StoreError> =
        <SessionStore as SessionRead>::load;
    let _load_healthy: fn(&SessionStore, &SessionId) -> Result<Arc<LoadedSession>, StoreError> =
        <SessionStore as SessionRead>::load_healthy;
    let _list: fn(&SessionStore) -> Result<Vec<SessionId>, StoreError> =
        <SessionStore as SessionRead>::list_sessions;
    append_port();
    // Snapshot CAS and pinned workflows, addressed by their digests.
    let _put_snapshot: fn(
        &SnapshotStore,
        &ExecutionSnapshotFileV1,
    ) -> Result<SnapshotRef, StoreError> = SnapshotStore::put;
    let _get_snapshot: fn(
        &SnapshotStore,
        &SnapshotRef,
    ) -> Result<ExecutionSnapshotFileV1, StoreError> = SnapshotStore::get;
    let _pin: fn(
        &PinnedWorkflowStore,
        &CompiledWorkflowSnapshotV1,
    ) -> Result<WorkflowHash, StoreError> = PinnedWorkflowStore::put;
    let _pinned: fn(
        &PinnedWorkflowStore,
        &WorkflowHash,
    ) -> Result<CompiledWorkflowSnapshotV1, StoreError> = PinnedWorkflowStore::get;
    // The projection cache: a lookup is a closed two-way answer, never an error to handle.
    let _cached: fn(&ProjectionCache, &SessionId, CacheKey) -> CacheLookup<serde_json::Value> =
        ProjectionCache::get::<serde_json::Value>;
    let _invalidate: fn(&ProjectionCache, &SessionId) -> Result<(), StoreError> =
        ProjectionCache::invalidate;
    // Keyring, crypto and randomness.
    let _keyring: fn(&KeyringStore, &dyn Entropy) -> Result<HeldKeyring, StoreError> =
        KeyringStore::load_or_create;
    let _verify: fn(&TokenCodec, &str, TokenKind) -> Result<TokenPayload, TokenError> =
        TokenCodec::verify;
    let _fill: fn(&SeededEntropy, &mut [u8]) -> Result<(), EntropyError> =
        <SeededEntropy as Entropy>::fill;
    // The data directory and its file locks.
    let _read: fn(&MemFs, &Path) -> std::io::Result<Option<Vec<u8>>> = <MemFs as StoreFs>::read;
    type Locked = Result<Box<dyn LockGuard>, LockError>;
    let _lock: fn(&MemFs, &Path) -> Locked = <MemFs as StoreFs>::try_lock;

    // Errors are data of a closed set, mapped to the unified envelope: no panic for a missing
    // session, a missing object or a bad token.
    let fs = MemFs::new();
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    let store = SessionStore::new(Arc::clone(&shared));
    let missing = SessionId::parse("sess_0000000000000000").unwrap();
    let e = store.load(&missing).unwrap_err();
    assert!(matches!(e, StoreError::NotFound { .. }), "{e:?}");
    assert_eq!(e.to_envelope(false).code, ErrorCode::SessionNotFound);
    let snapshots = SnapshotStore::new(Arc::clone(&shared));
    let absent = SnapshotRef::parse(&format!("sha256:{}", "0".repeat(64))).unwrap();
    assert!(snapshots.get(&absent).is_err());
    let held = KeyringStore::new(shared)
        .load_or_create(&SeededEntropy::new(1))
        .unwrap();
    let codec = TokenCodec::new(held.keyring.clone());
    assert!(codec.verify("st.v1.not-a-token", TokenKind::State).is_err());
}

/// A session reader with nothing but what `SessionRead` requires: it compiles only while the
/// read-only port has no append method, so code holding a `SessionRead` (as rehydration does)
/// cannot reach an append.
struct ReadOnly(SessionStore);

impl SessionRead for ReadOnly {
    fn load(&self, session: &SessionId) -> Result<Arc<LoadedSession>, StoreError> {
        self.0.load(session)
    }

    fn list_sessions(&self) -> Result<Vec<SessionId>, StoreError> {
        self.0.list_sessions()
    }
}

/// lock: L-PURE-READONLY-SPLIT
#[test]
fn the_read_port_cannot_append_and_appends_need_the_gate() {
    let fs = MemFs::new();
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    let reader = ReadOnly(SessionStore::new(shared));
    assert!(reader.list_sessions().unwrap().is_empty());
    // The only append is `AppendGate::append`, and a gate exists only inside
    // `SessionStore::with_append_gate` (the `compile_fail` doctest on `AppendGate` proves it
    // cannot be kept); `SessionRead` is implemented above without any append, so the read port
    // offers none.
    append_port();
    // Rehydration writes nothing at all: not a byte, a directory or a mode.
    let wr = workrail::protocol::Workrail::with_parts(
        Arc::new(fs.clone()),
        Arc::new(|| {
            let bundled = workrail::sources::bundled::BundledSource;
            let sources: Vec<&dyn workrail::sources::WorkflowSource> = vec![&bundled];
            Arc::new(workrail::sources::Catalog::load(&sources))
        }),
        Arc::new(SeededEntropy::new(3)),
    )
    .unwrap();
    let ids = wr.list_workflows(Default::default()).unwrap();
    let first = &ids.workflows[0].workflow_id;
    let out = wr
        .start_workflow(workrail_spec::tools::StartWorkflowInput {
            workflow_id: first.to_string(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    let before = (fs.snapshot(), fs.dirs(), fs.ops());
    wr.continue_workflow(workrail_spec::tools::ContinueWorkflowInput {
        state_token: Some(out.state_token.clone()),
        ack_token: None,
        context: None,
        output: None,
        preferences: vec![],
        preset: None,
    })
    .unwrap();
    assert_eq!((fs.snapshot(), fs.dirs(), fs.ops()), before);

    // And the rehydration path names no append: its functions and the modules only it uses.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/protocol");
    let body_of = |file: &str, name: &str| -> String {
        let text = std::fs::read_to_string(src.join(file)).unwrap();
        let start = text
            .find(&format!("fn {name}("))
            .unwrap_or_else(|| panic!("fn {name} moved out of {file}"));
        let open = start + text[start..].find('{').unwrap();
        let mut depth = 0;
        for (i, c) in text[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return text[start..open + i].to_owned();
                    }
                }
                _ => {}
            }
        }
        panic!("unbalanced fn {name} in {file}")
    };
    let mut path: Vec<(String, String)> = [
        ("advance.rs", "rehydrate"),
        ("advance.rs", "respond_at"),
        ("mod.rs", "node_context"),
        ("mod.rs", "pinned_drift"),
    ]
    .iter()
    .map(|(f, n)| (format!("{f}::{n}"), body_of(f, n)))
    .collect();
    for module in [
        "recap.rs",
        "guidance.rs",
        "functions.rs",
        "facts.rs",
        "respond.rs",
    ] {
        path.push((
            module.to_owned(),
            std::fs::read_to_string(src.join(module)).unwrap(),
        ));
    }
    for (name, code) in &path {
        for needle in [
            "with_append_gate",
            "AppendGate",
            ".append(",
            "append_alongside",
            ".put(",
        ] {
            assert!(
                !code.contains(needle),
                "the rehydration path ({name}) reaches an append (`{needle}`)"
            );
        }
    }
}

//! The protocol use-cases behind the MCP tools: start, continue (rehydrate / advance / replay /
//! fork) and checkpoint, plus discovery and inspection.
//!
//! - **Rehydrate** (no `ackToken`) reads through [`SessionRead`] only: it has no way to append.
//! - **Advance** commits one `AppendPlan` inside the store's lock+health gate.
//! - **Replay** of a recorded attempt rebuilds the response from the event-log prefix that
//!   existed when the attempt was recorded; it re-runs no selection or validation.
//! - Ids that must be stable under retries are derived ([`derive`]); see `impl/docs/protocol.md`.

mod advance;
mod checkpoint;
pub mod derive;
mod facts;
mod inspect;
mod recap;
mod respond;
mod start;

use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use workrail_spec::closed::TokenKind;
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::event::{EventData, EventScope, SessionEvent};
use workrail_spec::ids::{EventId, EventIndex, NodeId, SessionId, WorkflowHash};
use workrail_spec::snapshot::EngineState;
use workrail_spec::token::{AttemptPayload, StatePayload, TokenPayload};
use workrail_spec::tools::{
    CheckpointWorkflowInput, ContinueWorkflowInput, ExecutionOutput, InspectWorkflowInput,
    InspectWorkflowOutput, ListWorkflowsInput, ListWorkflowsOutput, StartWorkflowInput,
};

pub use self::facts::{Facts, GLOBAL_DEFAULTS};
pub use self::inspect::{RunSummary, SessionSummary};
pub use self::respond::{render_text, run_label};
use crate::entropy::{Entropy, OsEntropy};
use crate::projections::NodeInfo;
use crate::sources::{Catalog, SourceConfig, WorkflowSource};
use crate::store::fs::{OsFs, StoreFs};
use crate::store::{
    ArtifactStore, KeyringStore, LoadedSession, PinnedWorkflowStore, ProjectionCache, SessionRead,
    SessionStore, SnapshotStore, StoreError,
};
use crate::tokens::TokenCodec;

/// Global preference defaults, relative to the data directory.
pub const GLOBAL_PREFERENCES_FILE: &str = "config/preferences.json";

/// The environment variable naming the data directory.
pub const DATA_DIR_ENV: &str = "WORKRAIL_DATA_DIR";

/// Loads the workflow catalog (every call sees the sources as they are now).
pub type CatalogLoader = Arc<dyn Fn() -> Catalog + Send + Sync>;

/// How to open WorkRail.
#[derive(Clone)]
pub struct WorkrailConfig {
    pub data_dir: PathBuf,
    pub sources: SourceConfig,
    pub entropy: Arc<dyn Entropy>,
}

impl std::fmt::Debug for WorkrailConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkrailConfig")
            .field("data_dir", &self.data_dir)
            .field("sources", &self.sources)
            .finish_non_exhaustive()
    }
}

/// The platform data directory: `$XDG_DATA_HOME/workrail`, else `~/.local/share/workrail`
/// (macOS: `~/Library/Application Support/workrail`; Windows: `%APPDATA%\workrail`).
pub fn default_data_dir() -> Option<PathBuf> {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if cfg!(windows) {
        return var("APPDATA").map(|d| d.join("workrail"));
    }
    if cfg!(target_os = "macos") {
        return var("HOME").map(|h| h.join("Library/Application Support/workrail"));
    }
    var("XDG_DATA_HOME")
        .map(|d| d.join("workrail"))
        .or_else(|| var("HOME").map(|h| h.join(".local/share/workrail")))
}

impl WorkrailConfig {
    /// `WORKRAIL_DATA_DIR` or the platform data directory; workflow sources from the process
    /// environment (see `SourceConfig::from_process_env`).
    pub fn from_env() -> Result<Self, String> {
        let data_dir = std::env::var_os(DATA_DIR_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(default_data_dir)
            .ok_or_else(|| {
                format!("cannot find a data directory: set {DATA_DIR_ENV} to a writable directory")
            })?;
        let sources = SourceConfig::from_process_env()
            .map_err(|e| format!("cannot read the current directory: {e}"))?;
        Ok(Self {
            data_dir,
            sources,
            entropy: Arc::new(OsEntropy),
        })
    }
}

/// WorkRail: stores, tokens and workflow sources.
pub struct Workrail {
    fs: Arc<dyn StoreFs>,
    sessions: SessionStore,
    snapshots: SnapshotStore,
    pinned: PinnedWorkflowStore,
    artifacts: ArtifactStore,
    cache: ProjectionCache,
    keys: KeyringStore,
    codec: RwLock<TokenCodec>,
    entropy: Arc<dyn Entropy>,
    catalog: CatalogLoader,
}

impl std::fmt::Debug for Workrail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workrail")
            .field("sessions", &self.sessions)
            .finish_non_exhaustive()
    }
}

fn store_envelope(token_flow: bool) -> impl Fn(StoreError) -> ErrorEnvelope {
    move |e| e.to_envelope(token_flow)
}

/// A broken WorkRail invariant, reported as data (`unexpected:invariant_violation`).
pub(crate) fn invariant(message: impl Into<String>) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::InternalError,
        message,
        "This is a WorkRail bug, not something the caller did; report it with the call that caused it. Nothing partial was written.",
        Retry::NotRetryable,
    )
    .with_details(serde_json::json!({
        "reason": "unexpected:invariant_violation",
        "reasonCode": "unexpected:invariant_violation",
    }))
}

/// What export/import and GC use of a [`Workrail`] (see [`Workrail::parts`]).
pub(crate) struct Parts<'a> {
    pub sessions: &'a SessionStore,
    pub snapshots: &'a SnapshotStore,
    pub pinned: &'a PinnedWorkflowStore,
    pub artifacts: &'a ArtifactStore,
    pub entropy: &'a dyn Entropy,
    pub codec: TokenCodec,
}

/// A run's node, pinned workflow and snapshot state, as execution needs them.
pub(crate) struct NodeContext {
    pub loaded: Arc<LoadedSession>,
    pub compiled: CompiledWorkflowSnapshotV1,
    pub workflow_hash: WorkflowHash,
    pub state: EngineState,
}

impl Workrail {
    /// Opens WorkRail on the real filesystem; the data directory and keyring are created on
    /// first use.
    pub fn open(config: WorkrailConfig) -> Result<Workrail, ErrorEnvelope> {
        std::fs::create_dir_all(&config.data_dir).map_err(|e| {
            ErrorEnvelope::new(
                ErrorCode::StoreIoError,
                format!("cannot create the WorkRail data directory: {e}"),
                format!("Set {DATA_DIR_ENV} to a writable directory."),
                Retry::NotRetryable,
            )
        })?;
        let fs: Arc<dyn StoreFs> = Arc::new(OsFs::new(&config.data_dir));
        let sources = config.sources.clone();
        let catalog: CatalogLoader = Arc::new(move || {
            let sources = sources.sources();
            let refs: Vec<&dyn WorkflowSource> = sources.iter().map(|s| s.as_ref()).collect();
            Catalog::load(&refs)
        });
        Self::with_parts(fs, catalog, config.entropy)
    }

    /// Opens WorkRail over any filesystem and catalog (tests, harnesses).
    pub fn with_parts(
        fs: Arc<dyn StoreFs>,
        catalog: CatalogLoader,
        entropy: Arc<dyn Entropy>,
    ) -> Result<Workrail, ErrorEnvelope> {
        let keys = KeyringStore::new(Arc::clone(&fs));
        let keyring = keys
            .load_or_create(entropy.as_ref())
            .map_err(store_envelope(false))?;
        Ok(Self {
            fs: Arc::clone(&fs),
            sessions: SessionStore::new(Arc::clone(&fs)),
            snapshots: SnapshotStore::new(Arc::clone(&fs)),
            pinned: PinnedWorkflowStore::new(Arc::clone(&fs)),
            artifacts: ArtifactStore::new(Arc::clone(&fs)),
            cache: ProjectionCache::new(Arc::clone(&fs)),
            keys,
            codec: RwLock::new(TokenCodec::new(keyring)),
            entropy,
            catalog,
        })
    }

    fn codec(&self) -> TokenCodec {
        self.codec.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The session store's read side (projections, inspection).
    pub fn sessions(&self) -> &dyn SessionRead {
        &self.sessions
    }

    /// Explicit key rotation: `current -> previous`, fresh `current`.
    pub fn rotate_keys(&self) -> Result<(), ErrorEnvelope> {
        let keyring = self
            .keys
            .rotate(self.entropy.as_ref())
            .map_err(store_envelope(false))?;
        *self.codec.write().unwrap_or_else(|p| p.into_inner()) = TokenCodec::new(keyring);
        Ok(())
    }

    pub fn list_workflows(
        &self,
        _input: ListWorkflowsInput,
    ) -> Result<ListWorkflowsOutput, ErrorEnvelope> {
        Ok(ListWorkflowsOutput {
            workflows: (self.catalog)().summaries(),
        })
    }

    pub fn inspect_workflow(
        &self,
        input: InspectWorkflowInput,
    ) -> Result<InspectWorkflowOutput, ErrorEnvelope> {
        inspect::inspect_workflow(&(self.catalog)(), input)
    }

    pub fn start_workflow(
        &self,
        input: StartWorkflowInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope> {
        start::start(self, input)
    }

    /// With `ackToken`: advance (or replay a recorded attempt). Without: rehydrate, which
    /// writes nothing.
    pub fn continue_workflow(
        &self,
        input: ContinueWorkflowInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope> {
        let state = self.verify_state(&input.state_token)?;
        match &input.ack_token {
            None => {
                if input.output.is_some()
                    || input.context.is_some()
                    || !input.preferences.is_empty()
                {
                    return Err(ErrorEnvelope::new(
                        ErrorCode::ValidationError,
                        "continue_workflow: `output`, `context` and `preferences` are recorded only when you acknowledge a step, and this call has no `ackToken` (without it, continue_workflow only rehydrates and writes nothing).",
                        "Send the ackToken from the same response as this stateToken to complete the step with this output; or drop output/context/preferences to just recover the pending step.",
                        Retry::NotRetryable,
                    ));
                }
                advance::rehydrate(self, &state)
            }
            Some(ack) => {
                let ack = self.verify_attempt(ack, TokenKind::Ack, "ackToken", &state)?;
                advance::advance(self, &state, &ack, &input)
            }
        }
    }

    pub fn checkpoint_workflow(
        &self,
        input: CheckpointWorkflowInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope> {
        let state = self.verify_state(&input.state_token)?;
        let attempt = self.verify_attempt(
            &input.checkpoint_token,
            TokenKind::Checkpoint,
            "checkpointToken",
            &state,
        )?;
        checkpoint::checkpoint(self, &state, &attempt, &input)
    }

    /// Every run of a session at a glance (cached; derived, never truth).
    pub fn session_summary(
        &self,
        session_id: &SessionId,
    ) -> Result<inspect::SessionSummary, ErrorEnvelope> {
        let loaded = self
            .sessions
            .load(session_id)
            .map_err(store_envelope(false))?;
        Ok(inspect::session_summary(self, &loaded))
    }

    /// A human-readable view of a session: health, runs, DAG, preferred tips, status, outputs.
    pub fn inspect_session(&self, session_id: &str) -> Result<String, ErrorEnvelope> {
        inspect::inspect_session(self, session_id)
    }

    /// Exports a session as one self-verifying bundle (`impl/docs/bundles.md`); a
    /// `corrupt_tail` session exports its validated prefix with a salvage banner.
    pub fn export_session(
        &self,
        session_id: &str,
        progress: &dyn crate::bundle::Progress,
    ) -> Result<crate::bundle::ExportedBundle, ErrorEnvelope> {
        crate::bundle::export_session(self, session_id, std::time::SystemTime::now(), progress)
    }

    /// Validates a bundle completely, then imports it (as a new session id on collision) and
    /// re-mints tokens for the preferred tip of every run.
    pub fn import_bundle(
        &self,
        text: &str,
        options: &crate::bundle::ImportOptions,
        progress: &dyn crate::bundle::Progress,
    ) -> Result<crate::bundle::ImportReport, ErrorEnvelope> {
        crate::bundle::import_bundle(self, text, options, progress)
    }

    /// Retention and CAS garbage collection (`impl/docs/bundles.md`).
    pub fn gc(
        &self,
        options: &crate::gc::GcOptions,
        clock: &dyn crate::gc::RetentionClock,
        progress: &dyn crate::bundle::Progress,
    ) -> Result<crate::gc::GcReport, ErrorEnvelope> {
        crate::gc::run(self, options, clock, progress)
    }

    /// The stores, entropy and token codec, for `crate::bundle` and `crate::gc`.
    pub(crate) fn parts(&self) -> Parts<'_> {
        Parts {
            sessions: &self.sessions,
            snapshots: &self.snapshots,
            pinned: &self.pinned,
            artifacts: &self.artifacts,
            entropy: self.entropy.as_ref(),
            codec: self.codec(),
        }
    }

    fn verify_state(&self, raw: &str) -> Result<StatePayload, ErrorEnvelope> {
        match self.codec().verify(raw, TokenKind::State) {
            Ok(TokenPayload::State(p)) => Ok(p),
            Ok(_) => Err(invariant("a verified state token decoded to another kind")),
            Err(e) => Err(e.to_envelope("stateToken")),
        }
    }

    /// Verifies an ack or checkpoint token and that it belongs to the same node as `state`.
    fn verify_attempt(
        &self,
        raw: &str,
        kind: TokenKind,
        field: &str,
        state: &StatePayload,
    ) -> Result<AttemptPayload, ErrorEnvelope> {
        let attempt = match self.codec().verify(raw, kind) {
            Ok(TokenPayload::Ack(p) | TokenPayload::Checkpoint(p)) => p,
            Ok(TokenPayload::State(_)) => {
                return Err(invariant(
                    "a verified attempt token decoded to a state token",
                ));
            }
            Err(e) => return Err(e.to_envelope(field)),
        };
        if attempt.session_id != state.session_id
            || attempt.run_id != state.run_id
            || attempt.node_id != state.node_id
        {
            let describe = |run: &workrail_spec::ids::RunId, node: &NodeId, session: &SessionId| {
                self.describe_node(session, run, node)
            };
            let state_is = describe(&state.run_id, &state.node_id, &state.session_id);
            let attempt_is = describe(&attempt.run_id, &attempt.node_id, &attempt.session_id);
            let same_run = attempt.run_id == state.run_id && attempt.session_id == state.session_id;
            return Err(ErrorEnvelope::new(
                ErrorCode::TokenScopeMismatch,
                format!(
                    "`{field}` belongs to {attempt_is}, but `stateToken` belongs to {state_is}{}.",
                    if same_run { " (another step of the same run)" } else { " (another run)" }
                ),
                format!(
                    "Send the stateToken and the {field} that came in the SAME response; every response names its run beside its tokens. If unsure, call continue_workflow with only the stateToken of the run you mean to continue: it returns that run's current tokens."
                ),
                Retry::NotRetryable,
            )
            .with_details(serde_json::json!({
                "stateToken": {"sessionId": state.session_id, "runId": state.run_id, "nodeId": state.node_id, "run": state_is},
                field: {"sessionId": attempt.session_id, "runId": attempt.run_id, "nodeId": attempt.node_id, "run": attempt_is},
            })));
        }
        Ok(attempt)
    }

    /// `run "<label>" at step "<title>"` for error messages (best effort, read-only).
    fn describe_node(
        &self,
        session: &SessionId,
        run: &workrail_spec::ids::RunId,
        node: &NodeId,
    ) -> String {
        let fallback = format!("run {run}");
        let Ok(loaded) = self.sessions.load(session) else {
            return fallback;
        };
        let facts = Facts::new(&loaded.events);
        let (Some(view), Some(info)) = (facts.run(run), facts.node(run, node)) else {
            return fallback;
        };
        let Ok(compiled) = self.pinned.get(&view.dag.started.workflow_hash) else {
            return fallback;
        };
        let step = self
            .snapshots
            .get(&info.snapshot_ref)
            .ok()
            .and_then(|s| s.engine_payload.engine_state.pending_step().cloned())
            .and_then(|p| compiled.step(&p.step_id).map(|s| s.title.clone()))
            .unwrap_or_else(|| "(complete)".into());
        format!("run \"{}\" at step \"{step}\"", run_label(&compiled, run))
    }

    /// Loads what execution needs for the node a state token names, with the locked token
    /// checks (unknown node, workflow hash mismatch). `healthy` is required.
    fn node_context(&self, state: &StatePayload) -> Result<NodeContext, ErrorEnvelope> {
        let loaded = self
            .sessions
            .load_healthy(&state.session_id)
            .map_err(|e| match e {
                StoreError::NotFound { .. } => unknown_node(state),
                other => other.to_envelope(true),
            })?;
        let facts = Facts::new(&loaded.events);
        let view = facts
            .run(&state.run_id)
            .ok_or_else(|| unknown_node(state))?;
        let info: &NodeInfo = view
            .dag
            .nodes
            .get(&state.node_id)
            .ok_or_else(|| unknown_node(state))?;
        if view.dag.started.workflow_hash != state.workflow_hash {
            return Err(ErrorEnvelope::new(
                ErrorCode::TokenWorkflowHashMismatch,
                "stateToken names a workflow version (workflowHash) that is not the one this run is pinned to.",
                "Use the stateToken from the latest response of this run, or start the workflow again.",
                Retry::NotRetryable,
            ));
        }
        let compiled = self
            .pinned
            .get(&state.workflow_hash)
            .map_err(store_envelope(true))?;
        let snapshot = self
            .snapshots
            .get(&info.snapshot_ref)
            .map_err(store_envelope(true))?;
        if snapshot.workflow_hash != state.workflow_hash {
            return Err(invariant(
                "a node's snapshot is linked to another workflow than its run",
            ));
        }
        Ok(NodeContext {
            loaded: Arc::clone(&loaded),
            compiled,
            workflow_hash: state.workflow_hash.clone(),
            state: snapshot.engine_payload.engine_state,
        })
    }

    /// Whether the snapshot of `node` is complete (for run status).
    fn snapshot_complete(
        &self,
        facts: &Facts<'_>,
        run: &workrail_spec::ids::RunId,
        node: &NodeId,
    ) -> bool {
        facts
            .node(run, node)
            .and_then(|n| self.snapshots.get(&n.snapshot_ref).ok())
            .is_some_and(|s| s.engine_payload.engine_state.is_complete())
    }

    /// Global preference defaults: `config/preferences.json` in the data directory
    /// (`{"autonomy": …, "riskPolicy": …}`, both optional), else the guided preset. Read at each
    /// start and copied into the new run.
    fn global_preferences(
        &self,
    ) -> Result<workrail_spec::event::EffectivePreferences, ErrorEnvelope> {
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        struct GlobalConfig {
            autonomy: Option<workrail_spec::closed::Autonomy>,
            risk_policy: Option<workrail_spec::closed::RiskPolicy>,
        }
        let path = std::path::Path::new(GLOBAL_PREFERENCES_FILE);
        let Some(bytes) = self.fs.read(path).map_err(|e| {
            ErrorEnvelope::new(
                ErrorCode::StoreIoError,
                format!("cannot read {GLOBAL_PREFERENCES_FILE}: {e}"),
                "Check the data directory's permissions.",
                Retry::RetryableImmediate,
            )
        })?
        else {
            return Ok(GLOBAL_DEFAULTS);
        };
        let config: GlobalConfig = serde_json::from_slice(&bytes).map_err(|e| {
            ErrorEnvelope::new(
                ErrorCode::ValidationError,
                format!("{GLOBAL_PREFERENCES_FILE} in the data directory is invalid: {e}"),
                "Fix it to {\"autonomy\": \"guided\" | \"full_auto_stop_on_user_deps\" | \"full_auto_never_stop\", \"riskPolicy\": \"conservative\" | \"balanced\" | \"aggressive\"} (both optional), or delete it to use the guided preset.",
                Retry::NotRetryable,
            )
        })?;
        Ok(workrail_spec::event::EffectivePreferences {
            autonomy: config.autonomy.unwrap_or(GLOBAL_DEFAULTS.autonomy),
            risk_policy: config.risk_policy.unwrap_or(GLOBAL_DEFAULTS.risk_policy),
        })
    }

    /// A fresh, random event id.
    fn event_id(&self) -> Result<EventId, ErrorEnvelope> {
        self.entropy
            .id_bytes()
            .map(|b| EventId::from_entropy(&b))
            .map_err(|e| {
                ErrorEnvelope::new(
                    ErrorCode::StoreIoError,
                    e.to_string(),
                    "Retry the call.",
                    Retry::RetryableImmediate,
                )
            })
    }

    /// Builds an event for a plan (the store assigns its index).
    fn event(
        &self,
        session: &SessionId,
        scope: EventScope,
        data: EventData,
    ) -> Result<SessionEvent, ErrorEnvelope> {
        self.event_with_id(self.event_id()?, session, scope, data)
    }

    fn event_with_id(
        &self,
        id: EventId,
        session: &SessionId,
        scope: EventScope,
        data: EventData,
    ) -> Result<SessionEvent, ErrorEnvelope> {
        SessionEvent::new(id, EventIndex::ZERO, session.clone(), scope, data)
            .map_err(|e| invariant(format!("WorkRail built an invalid event: {e}")))
    }
}

fn unknown_node(state: &StatePayload) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::TokenUnknownNode,
        format!(
            "stateToken is signed by this WorkRail but names a session, run or node ({}) that is not in this data directory.",
            state.node_id
        ),
        "If the session lives in another WorkRail data directory, use that one (or import its exported bundle); otherwise start the workflow again with start_workflow.",
        Retry::NotRetryable,
    )
}

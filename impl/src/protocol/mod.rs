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
mod console;
pub mod derive;
pub mod facts;
mod functions;
mod guidance;
mod inspect;
mod lanes;
mod preferences;
mod recap;
mod replay_notice;
mod respond;
mod resume;
mod resume_index;
mod session;
mod start;
mod store_choice;

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
    InspectWorkflowOutput, ListWorkflowsInput, ListWorkflowsOutput, ResumeSessionInput,
    ResumeSessionOutput, StartWorkflowInput, Warning,
};

pub use self::console::ConsoleLookup;
pub use self::facts::{Facts, GLOBAL_DEFAULTS};
pub use self::inspect::{RunSummary, SessionSummary};
pub use self::lanes::HANDED_IN_TEXT_MAX_BYTES;
pub use self::respond::{render_text, run_label};
pub use self::store_choice::{STORE_ENV, STORE_SCHEMA_ENV, StoreChoice, redact};
use crate::entropy::{Entropy, OsEntropy};
use crate::features::{FEATURES_ENV, FeatureOverrides, Features};
use crate::projections::NodeInfo;
use crate::sources::{Catalog, SourceConfig, WorkflowSource};
use crate::store::fs::{OsFs, StoreFs};
use crate::store::{
    HeldKeyring, LoadedSession, ProjectionCache, Refresh, SessionRead, Store, StoreError,
};
use crate::tokens::TokenCodec;
use crate::workspace::fs::ProcessWorkspace;
use crate::workspace::{NoWorkspace, Workspace};

/// Global preference defaults, relative to the data directory.
pub const GLOBAL_PREFERENCES_FILE: &str = "config/preferences.json";

/// The environment variable naming the data directory.
pub const DATA_DIR_ENV: &str = "WORKRAIL_DATA_DIR";

/// The environment variable bounding how long a call waits for another server's hold on a
/// session lock, in milliseconds (default: [`crate::store::DEFAULT_LOCK_WAIT`]).
pub const LOCK_WAIT_ENV: &str = "WORKRAIL_LOCK_WAIT_MS";

fn lock_wait_from_env() -> Result<Option<std::time::Duration>, ErrorEnvelope> {
    let Some(raw) = std::env::var_os(LOCK_WAIT_ENV).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    raw.to_str()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&ms| ms <= 60_000)
        .map(|ms| Some(std::time::Duration::from_millis(ms)))
        .ok_or_else(|| {
            ErrorEnvelope::new(
                ErrorCode::ValidationError,
                format!(
                    "{LOCK_WAIT_ENV} is {raw:?}, not a whole number of milliseconds from 0 to 60000."
                ),
                format!("Set {LOCK_WAIT_ENV} to e.g. 2000, or unset it for the default."),
                Retry::NotRetryable,
            )
        })
}

/// Loads the workflow catalog (every call sees the sources as they are now).
pub type CatalogLoader = Arc<dyn Fn() -> Arc<Catalog> + Send + Sync>;

/// How to open WorkRail.
#[derive(Clone)]
pub struct WorkrailConfig {
    pub data_dir: PathBuf,
    pub sources: SourceConfig,
    pub entropy: Arc<dyn Entropy>,
    /// Feature flag overrides applied over `config/features.json` (from `WORKRAIL_FEATURES`).
    pub features: FeatureOverrides,
    /// Where runs start, for `observation_recorded` (the process's working directory).
    pub workspace: Arc<dyn Workspace>,
}

impl std::fmt::Debug for WorkrailConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkrailConfig")
            .field("data_dir", &self.data_dir)
            .field("sources", &self.sources)
            .field("features", &self.features)
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

/// The platform data directory: `$XDG_DATA_HOME/workrail`, else `~/.local/share/workrail`
/// (macOS: `~/Library/Application Support/workrail`; Windows: `%APPDATA%\\workrail`).
pub fn default_data_dir() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("workrail"))
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
        let features = match std::env::var(FEATURES_ENV) {
            Ok(value) => FeatureOverrides::parse_env(&value)?,
            Err(std::env::VarError::NotPresent) => FeatureOverrides::default(),
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(format!(
                    "{FEATURES_ENV} is not valid UTF-8; set it to a comma-separated list such as -resume_session"
                ));
            }
        };
        Ok(Self {
            data_dir,
            sources,
            entropy: Arc::new(OsEntropy),
            features,
            workspace: Arc::new(ProcessWorkspace),
        })
    }

    /// The same configuration with the git repositories of `WORKRAIL_WORKFLOW_REPOS` (or the
    /// reference's `WORKFLOW_GIT_REPOS`), synced into this data directory's cache (D178). Call
    /// it once the data directory is final.
    pub fn with_repos_from_env(mut self) -> Result<Self, String> {
        use crate::sources::git::{REPOS_ALIAS_ENV, REPOS_ENV, RepoCache, parse_repos};
        let value = std::env::var(REPOS_ENV)
            .ok()
            .or_else(|| std::env::var(REPOS_ALIAS_ENV).ok());
        if let Some(value) = value.filter(|v| !v.trim().is_empty()) {
            let specs = parse_repos(&value)?;
            self.sources = self
                .sources
                .with_repos(specs, RepoCache::of_data_dir(&self.data_dir));
        }
        Ok(self)
    }
}

/// WorkRail: stores, tokens and workflow sources.
pub struct Workrail {
    /// The data directory: derived per-machine files (projection cache, server records, config)
    /// whatever the store (the resume index lives with the sessions: D115).
    fs: Arc<dyn StoreFs>,
    /// Sessions, objects and the keyring: the file store or PostgreSQL (D100).
    store: Store,
    cache: ProjectionCache,
    /// The keyring this process holds (compared with the stored one on each use) and its codec.
    codec: RwLock<(HeldKeyring, TokenCodec)>,
    entropy: Arc<dyn Entropy>,
    catalog: CatalogLoader,
    features: Features,
    workspace: Arc<dyn Workspace>,
    /// The latest projection per session (derived, never truth).
    memo: facts::ProjectionMemo,
    /// `resume_session`'s summary of each session, by the manifest length it was made at.
    resume_index: crate::store::ObjectCache<SessionId, resume::IndexedSummary>,
    /// Each session's overview row, by the `manifest.jsonl` length it was made at: a long-running
    /// reader (the Console) reprojects only the sessions that changed.
    overviews: crate::store::ObjectCache<SessionId, (u64, SessionOverview)>,
    /// What the persisted resume index covers as this process last read or wrote it (`None`:
    /// not yet known), so an unchanged index is not written again.
    resume_on_disk: std::sync::Mutex<Option<resume_index::Coverage>>,
    /// The last `resume_session` that held no summary of some session: what it listed and
    /// left out, so an unchanged listing does not read the persisted index again.
    resume_last_call: std::sync::Mutex<Option<resume::LastCall>>,
}

impl std::fmt::Debug for Workrail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workrail")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

fn store_envelope(token_flow: bool) -> impl Fn(StoreError) -> ErrorEnvelope {
    move |e| e.to_envelope(token_flow)
}

/// A broken WorkRail invariant, reported as data (`unexpected:invariant_violation`).
/// A failed read of a session's earlier events (decision D225): their segment was read again
/// and could not be (I/O), was not what load validated (corrupt), or is gone (deleted).
pub(crate) fn read_failed(e: crate::store::StoreError) -> ErrorEnvelope {
    e.to_envelope(true)
}

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
    pub store: &'a Store,
    pub entropy: &'a dyn Entropy,
    pub codec: TokenCodec,
}

/// A run's node, pinned workflow and snapshot state, as execution needs them.
pub(crate) struct NodeContext {
    pub loaded: Arc<LoadedSession>,
    pub compiled: Arc<CompiledWorkflowSnapshotV1>,
    pub workflow_hash: WorkflowHash,
    pub state: EngineState,
}

impl Workrail {
    /// Opens WorkRail on the real filesystem; the data directory and keyring are created on
    /// first use.
    pub fn open(config: WorkrailConfig) -> Result<Workrail, ErrorEnvelope> {
        crate::store::fs::create_private_root(&config.data_dir)
            .map_err(|e| e.to_envelope(&config.data_dir))?;
        Self::open_created(config, &StoreChoice::Files)
    }

    /// [`Workrail::open`] on the chosen store: the data directory (created on first use) keeps
    /// the derived per-machine files whatever the store.
    pub fn open_on(config: WorkrailConfig, store: &StoreChoice) -> Result<Workrail, ErrorEnvelope> {
        if *store == StoreChoice::Files {
            return Self::open(config);
        }
        crate::store::fs::create_private_root(&config.data_dir)
            .map_err(|e| e.to_envelope(&config.data_dir))?;
        Self::open_created(config, store)
    }

    /// [`Workrail::open_existing`] on the chosen store. PostgreSQL is opened whenever it is
    /// reachable (connecting migrates its schema; the keyring row is made on first use).
    pub fn open_existing_on(
        config: WorkrailConfig,
        store: &StoreChoice,
    ) -> Result<Option<Workrail>, ErrorEnvelope> {
        match store {
            StoreChoice::Files => Self::open_existing(config),
            StoreChoice::Postgres { .. } => {
                // Read only: checked as it is, never tightened (D136).
                crate::store::owner::check_data_dir(&config.data_dir, false)
                    .map_err(|e| e.to_envelope(&config.data_dir))?;
                Self::open_created(config, store).map(Some)
            }
        }
    }

    /// Opens WorkRail on an existing data directory for reading only (the Console): `None`
    /// while the directory has no keyring yet (nothing was ever written there), and nothing is
    /// created, so a read-only caller never writes.
    pub fn open_existing(config: WorkrailConfig) -> Result<Option<Workrail>, ErrorEnvelope> {
        if !config
            .data_dir
            .join(crate::store::layout::KEYRING_FILE)
            .is_file()
        {
            return Ok(None);
        }
        // Read only: checked as it is, never tightened (D136).
        crate::store::owner::check_data_dir(&config.data_dir, false)
            .map_err(|e| e.to_envelope(&config.data_dir))?;
        Self::open_created(config, &StoreChoice::Files).map(Some)
    }

    /// [`Workrail::open`] once the data directory exists.
    fn open_created(
        config: WorkrailConfig,
        choice: &StoreChoice,
    ) -> Result<Workrail, ErrorEnvelope> {
        let fs: Arc<dyn StoreFs> = Arc::new(OsFs::new(&config.data_dir));
        let store = match choice.connect()? {
            None => Store::files(Arc::clone(&fs)),
            Some(backend) => Store::postgres(backend),
        };
        let sources = config.sources.clone();
        let cache = crate::sources::CatalogCache::new();
        let catalog: CatalogLoader = Arc::new(move || {
            let sources = sources.sources();
            let refs: Vec<&dyn WorkflowSource> = sources.iter().map(|s| s.as_ref()).collect();
            cache.load(&refs)
        });
        let lock_wait = lock_wait_from_env()?;
        let budget = crate::store::CacheBudget::from_env().map_err(|message| {
            ErrorEnvelope::new(
                ErrorCode::ValidationError,
                message,
                format!(
                    "Set {} to a whole number of MiB, or unset it for the default.",
                    crate::store::CACHE_MB_ENV
                ),
                Retry::NotRetryable,
            )
        })?;
        let resident = crate::store::resident_events_from_env().map_err(|message| {
            ErrorEnvelope::new(
                ErrorCode::ValidationError,
                message,
                format!(
                    "Set {} to a whole number of events (at least {}), or unset it for the default ({}).",
                    crate::store::RESIDENT_EVENTS_ENV,
                    crate::store::MIN_RESIDENT_EVENTS,
                    crate::store::DEFAULT_RESIDENT_EVENTS
                ),
                Retry::NotRetryable,
            )
        })?;
        let mut workrail = Self::with_store(fs, store, catalog, config.entropy)?
            .with_cache_budget(budget)
            .with_resident_events(resident)
            .with_feature_overrides(&config.features)
            .with_workspace(config.workspace);
        if let Some(wait) = lock_wait {
            workrail = workrail.with_lock_wait(wait);
        }
        Ok(workrail)
    }

    /// Opens WorkRail over any filesystem and catalog (tests, harnesses). Feature flags come
    /// from `config/features.json` on `fs`; no workspace is observed (see
    /// [`Workrail::with_workspace`]).
    pub fn with_parts(
        fs: Arc<dyn StoreFs>,
        catalog: CatalogLoader,
        entropy: Arc<dyn Entropy>,
    ) -> Result<Workrail, ErrorEnvelope> {
        let store = Store::files(Arc::clone(&fs));
        Self::with_store(fs, store, catalog, entropy)
    }

    /// Opens WorkRail on `store`, with `fs` as the data directory of the derived per-machine
    /// files (tests, harnesses, and [`Workrail::open`] with a PostgreSQL store).
    pub fn with_store(
        fs: Arc<dyn StoreFs>,
        store: Store,
        catalog: CatalogLoader,
        entropy: Arc<dyn Entropy>,
    ) -> Result<Workrail, ErrorEnvelope> {
        let held = store
            .load_or_create_keyring(entropy.as_ref())
            .map_err(store_envelope(false))?;
        let codec = TokenCodec::new(held.keyring.clone());
        let features = Features::load(fs.as_ref())?;
        Ok(Self {
            fs: Arc::clone(&fs),
            // Under `sessions/<id>/cache/` for the file store; in memory for PostgreSQL, whose
            // session ids must not make directories in the data directory (D101).
            cache: ProjectionCache::new(match &store {
                Store::Files(_) => Arc::clone(&fs),
                Store::Postgres(_) => Arc::new(crate::store::memfs::MemFs::new()),
            }),
            store,
            codec: RwLock::new((held, codec)),
            entropy,
            catalog,
            features,
            workspace: Arc::new(NoWorkspace),
            memo: facts::ProjectionMemo::default(),
            resume_index: crate::store::ObjectCache::new(
                crate::store::CacheBudget::default().resume,
            ),
            overviews: crate::store::ObjectCache::new(
                crate::store::CacheBudget::default().overviews,
            ),
            resume_on_disk: std::sync::Mutex::new(None),
            resume_last_call: std::sync::Mutex::new(None),
        })
    }

    /// The same WorkRail waiting at most `wait` for another process's hold on a session lock
    /// before answering `SESSION_LOCKED` (default [`crate::store::DEFAULT_LOCK_WAIT`], or
    /// `WORKRAIL_LOCK_WAIT_MS` for [`Workrail::open`]).
    pub fn with_lock_wait(mut self, wait: std::time::Duration) -> Self {
        self.store = self.store.with_lock_wait(wait);
        self
    }

    /// The same WorkRail with empty caches of these byte budgets (`WORKRAIL_CACHE_MB` for
    /// [`Workrail::open`]; `impl/docs/store.md` "Caches").
    /// The same WorkRail keeping at least `resident` of a loaded session's newest events
    /// parsed (`WORKRAIL_RESIDENT_EVENTS`, D225).
    pub fn with_resident_events(mut self, resident: usize) -> Self {
        self.store = self.store.with_resident_events(resident);
        self
    }

    pub fn with_cache_budget(mut self, budget: crate::store::CacheBudget) -> Self {
        self.store = self.store.with_cache_budget(budget);
        self.resume_index = crate::store::ObjectCache::new(budget.resume);
        self.overviews = crate::store::ObjectCache::new(budget.overviews);
        self.memo = facts::ProjectionMemo::with_budget(budget.projections);
        self
    }

    /// The projections this process keeps extendable between calls: (sessions, estimated
    /// bytes) (D205).
    pub fn projections_held(&self) -> (usize, usize) {
        self.memo.held()
    }

    /// The sizes of this process's caches: (sessions, snapshots, workflows), each as (entries,
    /// estimated bytes, budget).
    pub fn cache_sizes(&self) -> [(usize, usize, usize); 3] {
        self.store.cache_sizes()
    }

    /// The same WorkRail observing `workspace` when runs start.
    pub fn with_workspace(mut self, workspace: Arc<dyn Workspace>) -> Self {
        self.workspace = workspace;
        self
    }

    /// The same WorkRail with flag overrides applied (e.g. from `WORKRAIL_FEATURES`).
    pub fn with_feature_overrides(mut self, overrides: &FeatureOverrides) -> Self {
        self.features = self.features.with(overrides);
        self
    }

    /// The effective feature flags.
    pub fn features(&self) -> &Features {
        &self.features
    }

    /// The token codec of the keyring as it is on disk now: a rotation by another process (or
    /// `workrail keys rotate`) takes effect without a restart (decision D54).
    fn codec(&self) -> TokenCodec {
        let refreshed = {
            let held = self.codec.read().unwrap_or_else(|p| p.into_inner());
            match self.store.refresh_keyring(&held.0) {
                Ok(Refresh::Changed(newer) | Refresh::Restamped(newer)) => newer,
                Ok(Refresh::Unchanged | Refresh::Restored) => return held.1.clone(),
                Err(e) => {
                    // A damaged file must not stop a process that still holds good keys.
                    tracing::warn!("keeping the keyring this process holds: {e}");
                    return held.1.clone();
                }
            }
        };
        let codec = TokenCodec::new(refreshed.keyring.clone());
        *self.codec.write().unwrap_or_else(|p| p.into_inner()) = (refreshed, codec.clone());
        codec
    }

    /// Every run of `session` with its preferred tip and pinned workflow, from the projection
    /// calls on the session share.
    pub(crate) fn run_tips(
        &self,
        session: &SessionId,
    ) -> Result<Vec<(workrail_spec::ids::RunId, NodeId, WorkflowHash)>, ErrorEnvelope> {
        let loaded = self.store.load(session).map_err(|e| e.to_envelope(false))?;
        let facts = self
            .memo
            .facts(session, loaded.events())
            .map_err(|e| e.to_envelope(false))?;
        Ok(facts
            .projection
            .runs
            .iter()
            .filter_map(|(run_id, view)| {
                let tip = view.preferred_tip.clone()?;
                Some((run_id.clone(), tip, view.dag.started.workflow_hash.clone()))
            })
            .collect())
    }

    /// The session store's read side (projections, inspection).
    pub fn sessions(&self) -> &dyn SessionRead {
        &self.store
    }

    /// The store sessions, objects and the keyring live in.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Explicit key rotation: `current -> previous`, fresh `current`.
    pub fn rotate_keys(&self) -> Result<(), ErrorEnvelope> {
        let held = self
            .store
            .rotate_keyring(self.entropy.as_ref())
            .map_err(store_envelope(false))?;
        let codec = TokenCodec::new(held.keyring.clone());
        *self.codec.write().unwrap_or_else(|p| p.into_inner()) = (held, codec);
        Ok(())
    }

    pub fn list_workflows(
        &self,
        _input: ListWorkflowsInput,
    ) -> Result<ListWorkflowsOutput, ErrorEnvelope> {
        let catalog = (self.catalog)();
        let problems = catalog
            .problems()
            .iter()
            .inspect(|p| p.log_once())
            .map(crate::sources::SourceProblem::view)
            .collect();
        Ok(ListWorkflowsOutput {
            workflows: catalog.summaries(),
            problems,
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

    /// With `ackToken`: advance (or replay a recorded attempt); `stateToken` is then optional
    /// (decision D34). Without `ackToken`: rehydrate the `stateToken`'s node, which writes nothing.
    pub fn continue_workflow(
        &self,
        input: ContinueWorkflowInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope> {
        match (&input.state_token, &input.ack_token) {
            (None, None) => Err(ErrorEnvelope::new(
                ErrorCode::ValidationError,
                "continue_workflow needs a token: neither `ackToken` nor `stateToken` was sent.",
                "To complete the pending step, send the ackToken from the latest response of the run (stateToken is optional then). To only recover the pending step, send its stateToken. If you have neither, call resume_session to find the run again, or start the workflow with start_workflow.",
                Retry::NotRetryable,
            )
            .with_details(serde_json::json!({
                "tool": "continue_workflow",
                "field": "ackToken",
                "problem": "missing_field",
            }))),
            (Some(state), None) => {
                let state = self.verify_state(state)?;
                if input.output.is_some()
                    || input.context.is_some()
                    || !input.preferences.is_empty()
                    || input.preset.is_some()
                {
                    return Err(ErrorEnvelope::new(
                        ErrorCode::ValidationError,
                        "continue_workflow: `output`, `context`, `preferences` and `preset` are recorded only when you acknowledge a step, and this call has no `ackToken` (without it, continue_workflow only rehydrates and writes nothing).",
                        "Send the ackToken from the same response as this stateToken to complete the step with this output; or drop output/context/preferences/preset to just recover the pending step.",
                        Retry::NotRetryable,
                    ));
                }
                advance::rehydrate(self, &state)
            }
            (Some(state), Some(ack)) => {
                swapped(state, ack, TokenKind::Ack, "ackToken")?;
                let state = self.verify_state(state)?;
                let ack = self.verify_attempt(ack, TokenKind::Ack, "ackToken", &state)?;
                advance::advance(self, &state, &ack, &input)
            }
            (None, Some(ack)) => {
                let ack = self.verify_attempt_token(ack, TokenKind::Ack, "ackToken")?;
                let state = self.state_of_attempt(&ack)?;
                advance::advance(self, &state, &ack, &input)
            }
        }
    }

    pub fn checkpoint_workflow(
        &self,
        input: CheckpointWorkflowInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope> {
        swapped(
            &input.state_token,
            &input.checkpoint_token,
            TokenKind::Checkpoint,
            "checkpointToken",
        )?;
        let state = self.verify_state(&input.state_token)?;
        let attempt = self.verify_attempt(
            &input.checkpoint_token,
            TokenKind::Checkpoint,
            "checkpointToken",
            &state,
        )?;
        checkpoint::checkpoint(self, &state, &attempt, &input)
    }

    /// Opens a checkpoint-only session (decision D48): a run of WorkRail's own one-step
    /// workflow `wr.checkpoint_session`, answered like `start_workflow`.
    pub fn start_session(
        &self,
        input: workrail_spec::tools::StartSessionInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope> {
        session::start_session(self, input)
    }

    /// Ranks the preferred tips of every healthy session's runs for a brand-new chat (locks
    /// §2.3). Changes no session; it may refresh the derived resume index (decision D64).
    pub fn resume_session(
        &self,
        input: ResumeSessionInput,
    ) -> Result<ResumeSessionOutput, ErrorEnvelope> {
        resume::resume_session(self, input)
    }

    /// Every run of a session at a glance (cached; derived, never truth).
    pub fn session_summary(
        &self,
        session_id: &SessionId,
    ) -> Result<inspect::SessionSummary, ErrorEnvelope> {
        let loaded = self.store.load(session_id).map_err(store_envelope(false))?;
        Ok(inspect::session_summary(self, &loaded))
    }

    /// Every session of the data directory with its health and runs (`workrail sessions`);
    /// directories without committed truth are left out. Writes nothing, not even a cache.
    pub fn sessions_overview(&self) -> Result<Vec<SessionOverview>, ErrorEnvelope> {
        let mut rows = Vec::new();
        let (ids, lengths) = self
            .store
            .sessions_with_manifest_lengths()
            .map_err(store_envelope(false))?;
        for (id, len) in ids.into_iter().zip(lengths) {
            // A row made at the manifest length the store still has is current (as a cached
            // session is, decision D60): a long-running reader reprojects only what changed.
            let len = len.ok().flatten();
            if let Some(row) = self.overviews.get(&id).filter(|r| Some(r.0) == len) {
                rows.push(row.1.clone());
                continue;
            }
            match self.store.load(&id) {
                Ok(loaded) => {
                    let row = SessionOverview {
                        health: loaded.health.kind().as_str().to_owned(),
                        reason: loaded
                            .health
                            .corruption()
                            .map(|c| c.reason.as_str().to_owned()),
                        runs: inspect::session_summary_read_only(self, &loaded).runs,
                        session_id: id.clone(),
                    };
                    // Only a view without a torn manifest tail is remembered.
                    if loaded.manifest_file_bytes == loaded.manifest_committed_bytes {
                        let bytes = row.estimated_bytes();
                        self.overviews.insert(
                            id,
                            Arc::new((loaded.manifest_file_bytes, row.clone())),
                            bytes,
                        );
                    }
                    rows.push(row);
                }
                Err(StoreError::NotFound { .. }) => {}
                Err(e) => rows.push(SessionOverview {
                    session_id: id,
                    health: "unreadable".to_owned(),
                    reason: Some(e.to_string()),
                    runs: Vec::new(),
                }),
            }
        }
        Ok(rows)
    }

    /// [`Workrail::sessions_overview`] newest first by the last change of each session's
    /// manifest (the control stream changes with every commit; on PostgreSQL its
    /// `last_activity`), ties by session id; `modified`
    /// gives a file's last change (path relative to the data directory), when known. Shared by
    /// `workrail sessions` and the Console.
    pub fn sessions_by_activity(
        &self,
        modified: &dyn Fn(&std::path::Path) -> Option<std::time::SystemTime>,
    ) -> Result<Vec<(Option<std::time::SystemTime>, SessionOverview)>, ErrorEnvelope> {
        // On PostgreSQL the last change is the session row's `last_activity` (D112), read once.
        let activity: Option<std::collections::HashMap<String, std::time::SystemTime>> =
            match self.store.postgres_stores() {
                Some(pg) => Some(
                    pg.backend()
                        .last_activity()
                        .map_err(store_envelope(false))?
                        .into_iter()
                        // An unreadable time is unknown, never 1970.
                        .filter_map(|(id, ms)| {
                            let ms = u64::try_from(ms?).ok()?;
                            Some((
                                id,
                                std::time::SystemTime::UNIX_EPOCH
                                    + std::time::Duration::from_millis(ms),
                            ))
                        })
                        .collect(),
                ),
                None => None,
            };
        let mut dated: Vec<_> = self
            .sessions_overview()?
            .into_iter()
            .map(|row| {
                let at = match &activity {
                    Some(activity) => activity.get(row.session_id.as_str()).copied(),
                    None => modified(&crate::store::layout::manifest_path(&row.session_id)),
                };
                (at, row)
            })
            .collect();
        dated.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then_with(|| a.1.session_id.cmp(&b.1.session_id))
        });
        Ok(dated)
    }

    /// A human-readable view of a session: health, runs, DAG, preferred tips, status, outputs.
    pub fn inspect_session(&self, session_id: &str, all: bool) -> Result<String, ErrorEnvelope> {
        inspect::inspect_session(self, session_id, all)
    }

    /// `workrail repair`: appends the snapshot pins the session's last write lacks when every
    /// such snapshot is intact in the CAS (decision D51), and says what it did; refuses any
    /// other state, writing nothing. Logged at warn: it changes the control stream.
    pub fn repair_session(&self, session_id: &str) -> Result<String, ErrorEnvelope> {
        let session = SessionId::parse(session_id).map_err(|e| {
            ErrorEnvelope::new(
                ErrorCode::ValidationError,
                format!("`{session_id}` is not a session id: {e}"),
                "Pass the session id exactly as a WorkRail response or error shows it (sess_…).",
                Retry::NotRetryable,
            )
        })?;
        let verify =
            |snapshot: &workrail_spec::ids::SnapshotRef| self.store.snapshot(snapshot).map(drop);
        let Some(files) = self.store.file_stores() else {
            return self.check_postgres_session(&session);
        };
        let outcome = files
            .sessions
            .repair_missing_pins(&session, &verify)
            .map_err(store_envelope(false))?;
        let cut = |bytes: u64| {
            if bytes == 0 {
                String::new()
            } else {
                format!(" Cut {bytes} bytes of a torn, uncommitted manifest line.")
            }
        };
        Ok(match outcome {
            crate::store::RepairOutcome::AlreadyHealthy { cut_torn_bytes } => format!(
                "Session {session} is healthy; nothing to repair.{}",
                cut(cut_torn_bytes)
            ),
            crate::store::RepairOutcome::Repaired {
                pinned,
                cut_torn_bytes,
            } => {
                let list: Vec<String> = pinned
                    .iter()
                    .map(|(snapshot, index)| {
                        format!("  pinned {snapshot} (node_created at eventIndex {index})")
                    })
                    .collect();
                tracing::warn!(session = %session, pins = pinned.len(), "repair appended missing snapshot pins");
                format!(
                    "Session {session} repaired: appended {} missing snapshot pin(s), each snapshot verified against its address.{}\n{}\nThe session is healthy again; continue it with its latest tokens, or call resume_session.",
                    pinned.len(),
                    cut(cut_torn_bytes),
                    list.join("\n")
                )
            }
        })
    }

    /// `workrail repair` on PostgreSQL (decision D111): a plan commits with its pins in one
    /// transaction, so the torn write the file store's repair fixes cannot arise. The session is
    /// checked instead: healthy says so; anything else is refused with its verdict and the way
    /// back, writing nothing.
    /// How long [`Workrail::hold_session_lock`]'s guard may be held: unbounded on the file
    /// store, [`crate::store::postgres::PostgresBackend::lock_hold_limit`] on PostgreSQL.
    pub fn lock_hold_limit(&self) -> Option<std::time::Duration> {
        self.store
            .postgres_stores()
            .map(|pg| pg.backend().lock_hold_limit())
    }

    /// Holds `session_id`'s writer lock (the one every append takes) until the returned guard
    /// is dropped, for maintenance by hand (decision D204): while it is held an acknowledgement
    /// on the session answers `TOKEN_SESSION_LOCKED` and writes nothing, and reads go on. An
    /// unknown session is `SESSION_NOT_FOUND` (no lock is made for it); a lock another process
    /// holds past the bounded wait is `TOKEN_SESSION_LOCKED`.
    pub fn hold_session_lock(
        &self,
        session_id: &str,
    ) -> Result<crate::store::SessionLock, ErrorEnvelope> {
        let session = SessionId::parse(session_id).map_err(|e| {
            ErrorEnvelope::new(
                ErrorCode::ValidationError,
                format!("`{session_id}` is not a session id: {e}"),
                "Pass the session id exactly as a WorkRail response or `workrail sessions` shows it (sess_…).",
                Retry::NotRetryable,
            )
        })?;
        let exists = |lock_taken: bool| -> Result<(), ErrorEnvelope> {
            let listed = crate::store::SessionRead::list_sessions(&self.store)
                .map_err(store_envelope(false))?;
            if listed.contains(&session) {
                return Ok(());
            }
            let mut envelope = StoreError::NotFound {
                session: session.clone(),
            }
            .to_envelope(false);
            if lock_taken {
                envelope
                    .message
                    .push_str(" (it was deleted while its lock was being taken)");
            }
            Err(envelope)
        };
        exists(false)?;
        let lock = match (self.store.postgres_stores(), self.store.file_stores()) {
            (Some(pg), _) => {
                crate::store::SessionBackend::lock_session(pg.backend().as_ref(), &session)
            }
            (None, Some(files)) => crate::store::SessionBackend::lock_session(
                &crate::store::backend::FileBackend::new(Arc::clone(files.fs()))
                    .with_lock_wait(files.sessions.lock_wait()),
                &session,
            ),
            (None, None) => {
                return Err(invariant(
                    "the store is neither the file store nor PostgreSQL",
                ));
            }
        }
        .map_err(store_envelope(true))?;
        // GC deletes a session only under this lock: one listed now stays until it is released.
        exists(true)?;
        Ok(lock)
    }

    fn check_postgres_session(&self, session: &SessionId) -> Result<String, ErrorEnvelope> {
        // A full read, past the process's cached view: a check must see every row.
        let loaded = match self.store.postgres_stores() {
            Some(pg) => crate::store::SessionBackend::load(pg.backend().as_ref(), session),
            None => self.store.load(session),
        }
        .map_err(store_envelope(false))?;
        let health = &loaded.health;
        if health.is_healthy() {
            return Ok(format!(
                "Session {session} is healthy; nothing to repair. (On PostgreSQL a write commits its events, its segment record and its snapshot pins in one transaction, so the torn write `workrail repair` fixes on the file store cannot happen.)"
            ));
        }
        let mut envelope = StoreError::Unhealthy {
            session: session.clone(),
            health: health.clone(),
        }
        .to_envelope(false);
        let found = health
            .corruption()
            .map(|c| format!(": {} ({})", c.reason, c.detail))
            .unwrap_or_default();
        envelope.message = format!(
            "Session {session} is not healthy ({}{found}) and was not repaired: on PostgreSQL `workrail repair` only checks a session (its rows commit whole), so nothing was written.",
            health.kind()
        );
        Err(envelope)
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
    pub fn import_bundle<'t>(
        &self,
        text: impl Into<std::borrow::Cow<'t, str>>,
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
    /// The data directory (per machine: config, server records, derived caches).
    pub(crate) fn data_fs(&self) -> &Arc<dyn StoreFs> {
        &self.fs
    }

    pub(crate) fn parts(&self) -> Parts<'_> {
        Parts {
            store: &self.store,
            entropy: self.entropy.as_ref(),
            codec: self.codec(),
        }
    }

    fn verify_state(&self, raw: &str) -> Result<StatePayload, ErrorEnvelope> {
        match self.codec().verify(raw, TokenKind::State) {
            Ok(TokenPayload::State(p)) => Ok(p),
            Ok(_) => Err(invariant("a verified state token decoded to another kind")),
            Err(e) => Err(self.token_error(&e, "stateToken")),
        }
    }

    /// A refused token's envelope. A signature that does not verify after this data directory's
    /// keyring was re-created (it had gone missing) is most likely a token from before: say so,
    /// never only "altered" (decision D54).
    fn token_error(&self, e: &crate::tokens::TokenError, field: &str) -> ErrorEnvelope {
        use crate::tokens::{SignatureFailure, TokenError};
        if matches!(e, TokenError::BadSignature(SignatureFailure::Unverified))
            && let Some(note) = self.store.keyring_recreated()
        {
            return ErrorEnvelope::new(
                ErrorCode::TokenBadSignature,
                format!(
                    "`{field}`'s signature does not verify with this data directory's keys. Its token signing keyring was missing and was re-created at {}: tokens issued before then can no longer be verified (the sessions themselves are intact). Less likely, the token was altered.",
                    note.recreated_at
                ),
                "Call resume_session to find the run: each candidate carries a fresh stateToken, and continue_workflow with that token alone recovers the pending step; continue with the tokens of that response.",
                Retry::NotRetryable,
            )
            .with_details(serde_json::json!({
                "field": field,
                "problem": "keyring_recreated",
                "recreatedAt": note.recreated_at,
            }));
        }
        e.to_envelope(field)
    }

    /// Verifies the signature and kind of an ack or checkpoint token.
    fn verify_attempt_token(
        &self,
        raw: &str,
        kind: TokenKind,
        field: &str,
    ) -> Result<AttemptPayload, ErrorEnvelope> {
        match self.codec().verify(raw, kind) {
            Ok(TokenPayload::Ack(p) | TokenPayload::Checkpoint(p)) => Ok(p),
            Ok(TokenPayload::State(_)) => Err(invariant(
                "a verified attempt token decoded to a state token",
            )),
            Err(e) => Err(self.token_error(&e, field)),
        }
    }

    /// The state an ack names on its own (decision D34): its session, run and node, and the
    /// workflow the run is pinned to, read from the store.
    fn state_of_attempt(&self, ack: &AttemptPayload) -> Result<StatePayload, ErrorEnvelope> {
        let unknown = || {
            ErrorEnvelope::new(
                ErrorCode::TokenUnknownNode,
                format!(
                    "ackToken is signed by this WorkRail but names a session, run or node ({}) that is not in this data directory.",
                    ack.node_id
                ),
                "If the session lives in another WorkRail data directory, use that one (or import its exported bundle); otherwise call resume_session to find the run, or start the workflow again with start_workflow.",
                Retry::NotRetryable,
            )
        };
        let loaded = self
            .store
            .load_healthy(&ack.session_id)
            .map_err(|e| match e {
                StoreError::NotFound { .. } => self.session_gone(&ack.session_id, "ackToken"),
                other => other.to_envelope(true),
            })?;
        // The session is being advanced: its kept projection is extended, not rebuilt.
        let facts = self
            .memo
            .facts(&ack.session_id, loaded.events())
            .map_err(read_failed)?;
        let view = facts.run(&ack.run_id).ok_or_else(unknown)?;
        if !view.dag.nodes.contains_key(&ack.node_id) {
            return Err(unknown());
        }
        Ok(StatePayload {
            session_id: ack.session_id.clone(),
            run_id: ack.run_id.clone(),
            node_id: ack.node_id.clone(),
            workflow_hash: view.dag.started.workflow_hash.clone(),
        })
    }

    /// Verifies an ack or checkpoint token and that it belongs to the same node as `state`.
    /// A mismatch names the run and step of each token, in the words responses use beside
    /// their tokens, and says exactly what to send instead.
    fn verify_attempt(
        &self,
        raw: &str,
        kind: TokenKind,
        field: &str,
        state: &StatePayload,
    ) -> Result<AttemptPayload, ErrorEnvelope> {
        let attempt = self.verify_attempt_token(raw, kind, field)?;
        if attempt.session_id == state.session_id
            && attempt.run_id == state.run_id
            && attempt.node_id == state.node_id
        {
            return Ok(attempt);
        }
        let state_at = self.place(&state.session_id, &state.run_id, &state.node_id);
        let attempt_at = self.place(&attempt.session_id, &attempt.run_id, &attempt.node_id);
        let same_run = attempt.run_id == state.run_id && attempt.session_id == state.session_id;
        let relation = if same_run {
            let later = match (attempt_at.created_index, state_at.created_index) {
                (Some(a), Some(s)) if a > s => format!("; `{field}` is from the later one"),
                (Some(a), Some(s)) if a < s => "; `stateToken` is from the later one".to_owned(),
                _ => String::new(),
            };
            format!(" (two different points of the same run{later})")
        } else {
            " (another run)".to_owned()
        };
        let (state_is, attempt_is) = (state_at.describe(), attempt_at.describe());
        let instead = if kind == TokenKind::Ack {
            format!(
                "To complete the step of {attempt_is}, send that ackToken alone (it names its own run and step; stateToken may be left out). To act on {state_is} instead, send the ackToken from the same response as that stateToken, or only the stateToken to get that step's current tokens."
            )
        } else {
            format!(
                "To checkpoint {state_is}, send the checkpointToken from the same response as that stateToken. To checkpoint {attempt_is}, send the stateToken from the response that gave you this checkpointToken."
            )
        };
        Err(ErrorEnvelope::new(
            ErrorCode::TokenScopeMismatch,
            format!(
                "`{field}` belongs to {attempt_is}, but `stateToken` belongs to {state_is}{relation}: they came from different responses."
            ),
            format!(
                "{instead} Copy the tokens exactly as they appear in the latest response of the run you mean (every response names its run beside its tokens); if you lost track of a run, call resume_session to find it again."
            ),
            Retry::NotRetryable,
        )
        .with_details(serde_json::json!({
            "problem": "scope_mismatch",
            "sameRun": same_run,
            "stateToken": state_at.to_json(&state.session_id, &state.run_id, &state.node_id),
            field: attempt_at.to_json(&attempt.session_id, &attempt.run_id, &attempt.node_id),
        })))
    }

    /// Where a token points (best effort, read-only): the run's label and workflow and the
    /// node's pending step, as responses show them.
    fn place(
        &self,
        session: &SessionId,
        run: &workrail_spec::ids::RunId,
        node: &NodeId,
    ) -> TokenPlace {
        let mut place = TokenPlace {
            run: run.to_string(),
            ..TokenPlace::default()
        };
        let Ok(loaded) = self.store.load(session) else {
            return place;
        };
        let Ok(facts) = Facts::of(loaded.events()) else {
            return place;
        };
        let (Some(view), Some(info)) = (facts.run(run), facts.node(run, node)) else {
            return place;
        };
        place.created_index = Some(info.created_index);
        let Ok(compiled) = self.store.workflow(&view.dag.started.workflow_hash) else {
            return place;
        };
        place.label = Some(run_label(&compiled, run));
        place.workflow_id = Some(compiled.body.workflow_id.to_string());
        let Ok(snapshot) = self.store.snapshot(&info.snapshot_ref()) else {
            return place;
        };
        let engine = &snapshot.engine_payload.engine_state;
        place.complete = engine.is_complete();
        if let Some(pending) = engine.pending_step() {
            place.step_id = Some(pending.step_id.to_string());
            place.step = compiled
                .step(&pending.step_id)
                .map(|s| crate::engine::render::title(s, &pending.bindings));
            place.loops = pending
                .loop_path
                .iter()
                .map(|l| format!("loop `{}` iteration {}", l.loop_id, l.iteration + 1))
                .collect();
        }
        place
    }

    /// The pinned-drift warning of the node's run (locks §6), when the run's workflow source
    /// no longer compiles to the pinned hash.
    fn pinned_drift(&self, ctx: &NodeContext) -> Option<Warning> {
        // WorkRail's own checkpoint-only workflow has no source to drift from.
        if ctx.compiled.body.workflow_id.as_str() == session::CHECKPOINT_SESSION_WORKFLOW_ID {
            return None;
        }
        // A lane pins its routine as the parent's hash pinned it (D168): it drifts with its
        // parent, whose responses say so.
        if lanes::is_lane_workflow(&ctx.compiled) {
            return None;
        }
        let catalog = (self.catalog)();
        crate::sources::check_drift(&catalog, &ctx.compiled.body.workflow_id, &ctx.workflow_hash)
            .map(|drift| crate::sources::drift_warning(&drift))
    }

    /// Loads what execution needs for the node a state token names, with the locked token
    /// checks (unknown node, workflow hash mismatch). `healthy` is required.
    fn node_context(&self, state: &StatePayload) -> Result<NodeContext, ErrorEnvelope> {
        let loaded = self
            .store
            .load_healthy(&state.session_id)
            .map_err(|e| match e {
                StoreError::NotFound { .. } => self.session_gone(&state.session_id, "stateToken"),
                other => other.to_envelope(true),
            })?;
        let facts = self
            .memo
            .facts(&state.session_id, loaded.events())
            .map_err(read_failed)?;
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
                "Copy the stateToken exactly as it appears in the latest response of this run; if you no longer have it, call resume_session to find the run again (it returns the run's current stateToken), or start the workflow again.",
                Retry::NotRetryable,
            ));
        }
        let compiled = self
            .store
            .workflow(&state.workflow_hash)
            .map_err(store_envelope(true))?;
        let snapshot = self
            .store
            .snapshot(&info.snapshot_ref())
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
            state: snapshot.engine_payload.engine_state.clone(),
        })
    }

    /// A verified token names a session without committed truth. Tokens are minted only after
    /// a commit, so its history was there and is gone: say which way, never "unknown node".
    fn session_gone(&self, session: &SessionId, field: &str) -> ErrorEnvelope {
        let manifest = crate::store::layout::manifest_path(session);
        let dir_entries = self
            .fs
            .list_dir(&crate::store::layout::session_dir(session))
            .unwrap_or_default();
        if dir_entries.is_empty() {
            // Tokens are minted only after a commit, so the session was here and was deleted,
            // or the token comes from another data directory: `SESSION_NOT_FOUND`, the same
            // answer a call gets when the session is deleted while it waits (decision D130).
            let mut envelope = crate::store::deleted_session(session);
            envelope.message = format!(
                "`{field}` is signed by this WorkRail but names session {session}, which is not in this data directory: it was deleted (by `workrail gc` once its retention period passed without activity, or by hand), or the token comes from another data directory. Nothing was written for this call."
            );
            return envelope;
        }
        let (problem, what) = match self.fs.len(&manifest) {
            Ok(Some(_)) => ("manifest_empty", "is empty"),
            _ => ("manifest_missing", "is missing"),
        };
        ErrorEnvelope::new(
            ErrorCode::SessionCorrupt,
            format!(
                "Session {session}'s control stream (sessions/{session}/manifest.jsonl) {what}, although the session directory exists: none of its history can be validated, so nothing was written."
            ),
            "Restore the session's manifest.jsonl (or the whole data directory) from a backup, or import an exported bundle of the session with `workrail import`; otherwise start the workflow again with start_workflow. Do not retry this call before that.",
            Retry::NotRetryable,
        )
        .with_details(serde_json::json!({
            "sessionId": session,
            "health": workrail_spec::closed::SessionHealthKind::CorruptHead,
            "reason": problem,
            "reasonCode": "unexpected:storage_corruption_detected",
        }))
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
            .and_then(|n| self.store.snapshot(&n.snapshot_ref()).ok())
            .is_some_and(|s| s.engine_payload.engine_state.is_complete())
    }

    /// Global preference defaults (see [`read_global_preferences`]).
    fn global_preferences(
        &self,
    ) -> Result<workrail_spec::event::EffectivePreferences, ErrorEnvelope> {
        read_global_preferences(self.fs.as_ref())
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

/// Global preference defaults: `config/preferences.json` in the data directory
/// (`{"preset": …, "autonomy": …, "riskPolicy": …}`, all optional; a key overrides the
/// preset), else the guided preset. Read at each start and copied into the new run.
pub(crate) fn read_global_preferences(
    fs: &dyn StoreFs,
) -> Result<workrail_spec::event::EffectivePreferences, ErrorEnvelope> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct GlobalConfig {
        preset: Option<workrail_spec::preferences::ModePreset>,
        autonomy: Option<workrail_spec::closed::Autonomy>,
        risk_policy: Option<workrail_spec::closed::RiskPolicy>,
    }
    let path = std::path::Path::new(GLOBAL_PREFERENCES_FILE);
    let Some(bytes) = fs.read(path).map_err(|e| {
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
            "Fix it to {\"preset\": \"guided\" | \"full_auto_stop_on_user_deps\" | \"full_auto_never_stop\", \"autonomy\": \"guided\" | \"full_auto_stop_on_user_deps\" | \"full_auto_never_stop\", \"riskPolicy\": \"conservative\" | \"balanced\" | \"aggressive\"} (all optional; autonomy and riskPolicy override the preset), or delete it to use the guided preset.",
            Retry::NotRetryable,
        )
    })?;
    let base = config.preset.map_or(GLOBAL_DEFAULTS, |p| p.preferences());
    Ok(workrail_spec::event::EffectivePreferences {
        autonomy: config.autonomy.unwrap_or(base.autonomy),
        risk_policy: config.risk_policy.unwrap_or(base.risk_policy),
    })
}

fn unknown_node(state: &StatePayload) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::TokenUnknownNode,
        format!(
            "stateToken is signed by this WorkRail but names a session, run or node ({}) that is not in this data directory.",
            state.node_id
        ),
        "If the session lives in another WorkRail data directory, use that one (or import its exported bundle); otherwise copy the tokens exactly from the latest response of the run, call resume_session to find the run again, or start the workflow again with start_workflow.",
        Retry::NotRetryable,
    )
}

/// One session at a glance (`workrail sessions`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionOverview {
    pub session_id: SessionId,
    /// `healthy`, `corrupt_tail`, `corrupt_head`, `unknown_version`, or `unreadable`.
    pub health: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub runs: Vec<RunSummary>,
}

impl SessionOverview {
    /// Roughly what the row holds in memory, for the cache budget.
    fn estimated_bytes(&self) -> usize {
        let run = std::mem::size_of::<RunSummary>() + 96;
        std::mem::size_of::<Self>()
            + self.health.len()
            + self.reason.as_ref().map_or(0, String::len)
            + self.runs.iter().map(|r| run + r.label.len()).sum::<usize>()
    }
}

/// Where a token points, for scope-mismatch messages and details.
#[derive(Debug, Default)]
struct TokenPlace {
    run: String,
    label: Option<String>,
    workflow_id: Option<String>,
    step: Option<String>,
    step_id: Option<String>,
    /// `loop `build` iteration 2` for each enclosing loop, outermost first.
    loops: Vec<String>,
    complete: bool,
    created_index: Option<u64>,
}

impl TokenPlace {
    /// `run "Demo #hzmk" (project.demo) at step "Implement" (loop `build` iteration 2)`.
    fn describe(&self) -> String {
        let Some(label) = &self.label else {
            return format!("run {}", self.run);
        };
        let workflow = self.workflow_id.as_deref().unwrap_or("?");
        let at = match (&self.step, self.complete) {
            (Some(step), _) if self.loops.is_empty() => format!(" at step \"{step}\""),
            (Some(step), _) => format!(" at step \"{step}\" ({})", self.loops.join(", ")),
            (None, true) => ", which is complete".to_owned(),
            (None, false) => String::new(),
        };
        format!("run \"{label}\" ({workflow}){at}")
    }

    fn to_json(
        &self,
        session: &SessionId,
        run: &workrail_spec::ids::RunId,
        node: &NodeId,
    ) -> serde_json::Value {
        serde_json::json!({
            "sessionId": session,
            "runId": run,
            "nodeId": node,
            "run": self.describe(),
            "label": self.label,
            "workflowId": self.workflow_id,
            "step": self.step,
            "stepId": self.step_id,
            "complete": self.complete,
        })
    }
}

/// Refuses a call whose two token fields hold each other's tokens, naming both fields (a more
/// useful error than a wrong-kind error on the first field alone).
fn swapped(
    state_raw: &str,
    other_raw: &str,
    other_kind: TokenKind,
    other_field: &str,
) -> Result<(), ErrorEnvelope> {
    use crate::tokens::{RECOVER, claimed_kind};
    if claimed_kind(state_raw) != Some(other_kind)
        || claimed_kind(other_raw) != Some(TokenKind::State)
    {
        return Ok(());
    }
    let prefix = other_kind.prefix();
    let also = if other_kind == TokenKind::Ack {
        " (or only the ackToken: it is enough to advance)"
    } else {
        ""
    };
    Err(ErrorEnvelope::new(
        ErrorCode::TokenInvalidFormat,
        format!(
            "`stateToken` and `{other_field}` are swapped: `stateToken` holds the {other_kind} token (`{prefix}.v1.…`) and `{other_field}` holds the state token (`st.v1.…`)."
        ),
        format!(
            "Send each token in its own field: stateToken is the one starting with `st.`, {other_field} the one starting with `{prefix}.`{also}. {RECOVER}"
        ),
        Retry::NotRetryable,
    )
    .with_details(serde_json::json!({
        "field": "stateToken",
        "problem": "swapped",
        "fields": ["stateToken", other_field],
    })))
}

//! The durable store: append-only session event segments plus `manifest.jsonl` (two-stream,
//! pin-after-close), the snapshot CAS, pinned workflows, the keyring, OS file locks and session
//! health. `impl/docs/store.md` describes the format, the commit protocol and every crash state.

pub mod backend;
mod cache;
mod cas;
mod error;
mod event_log;
pub mod fs;
mod health;
mod keyring;
pub mod layout;
mod load;
mod manifest_log;
pub mod memfs;
pub mod object_cache;
mod overlap;
pub mod owner;
pub mod planted;
pub mod postgres;
mod repair;
mod selected;
mod session;

pub use backend::{FileBackend, SessionBackend, SessionLock};
pub use cache::{CACHE_VERSION, CacheKey, CacheLookup, ProjectionCache};
pub use cas::{
    ArtifactStore, ObjectCheck, ObjectState, PinnedWorkflowStore, PreparedArtifact, SnapshotStore,
    Verified,
};
pub use error::{Committed, StoreError, deleted_session, errno_name};
pub use event_log::{
    DEFAULT_RESIDENT_EVENTS, Events, MIN_RESIDENT_EVENTS, RESIDENT_EVENTS_ENV, Residency,
    SegmentSource, resident_events_from_env,
};
pub use health::{Corruption, CorruptionReason, SessionHealth, how_to_clear};
pub use keyring::{
    HeldKeyring, KEY_BYTES, Keyring, KeyringRecreated, KeyringStore, RECREATED_FILE, Refresh,
    SigningKey,
};
pub use load::LoadedSession;
pub use manifest_log::ManifestLog;
pub use object_cache::{
    CACHE_MB_ENV, CacheBudget, DEFAULT_CACHE_MB, ObjectCache, SNAPSHOT_CACHE_ENTRIES,
};
pub use repair::RepairOutcome;
pub use selected::{FileStores, Gate, ObjectWriter, PgStores, Store};
pub(crate) use session::with_backoff;
pub use session::{
    AppendGate, AppendPlan, AppendedEvent, DEFAULT_LOCK_WAIT, SegmentLimits, SessionIntent,
    SessionRead, SessionStore, plan_snapshot_refs,
};

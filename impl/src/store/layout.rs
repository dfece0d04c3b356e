//! The locked data directory layout (locks §13), as relative paths.
//!
//! ```text
//! sessions/<sessionId>/events/<first>-<last>.jsonl   committed segments (plus ignored orphans)
//! sessions/<sessionId>/manifest.jsonl                control stream
//! sessions/<sessionId>/.lock                         single-writer lock file
//! sessions/<sessionId>/cache/                        derived, rebuildable projections
//! snapshots/<hex>.json                               CAS of execution snapshots
//! workflows/pinned/<hex>.json                        compiled workflows by workflowHash
//! artifacts/<hex>.json                               structured output artifacts (JCS)
//! keys/keyring.json                                  token signing keys (0600)
//! ```

use std::path::PathBuf;

use workrail_spec::ids::{EventIndex, SessionId, SnapshotRef, WorkflowHash};
use workrail_spec::manifest::segment_rel_path;

pub const SESSIONS_DIR: &str = "sessions";
pub const SNAPSHOTS_DIR: &str = "snapshots";
pub const PINNED_WORKFLOWS_DIR: &str = "workflows/pinned";
pub const ARTIFACTS_DIR: &str = "artifacts";
pub const KEYS_DIR: &str = "keys";
pub const KEYRING_FILE: &str = "keys/keyring.json";

pub fn session_dir(session: &SessionId) -> PathBuf {
    PathBuf::from(SESSIONS_DIR).join(session.as_str())
}

pub fn events_dir(session: &SessionId) -> PathBuf {
    session_dir(session).join("events")
}

pub fn manifest_path(session: &SessionId) -> PathBuf {
    session_dir(session).join("manifest.jsonl")
}

pub fn lock_path(session: &SessionId) -> PathBuf {
    session_dir(session).join(".lock")
}

pub fn cache_dir(session: &SessionId) -> PathBuf {
    session_dir(session).join("cache")
}

/// `sessions/<id>/` + the manifest's relative segment path.
pub fn segment_path(session: &SessionId, first: EventIndex, last: EventIndex) -> PathBuf {
    session_dir(session).join(segment_rel_path(first, last))
}

/// Where a segment is written before its rename (a leftover one is an orphan, never read).
pub fn temp_segment_path(session: &SessionId, first: EventIndex, last: EventIndex) -> PathBuf {
    events_dir(session).join(format!(".tmp-{:08}-{:08}.jsonl", first.get(), last.get()))
}

pub fn snapshot_path(snapshot: &SnapshotRef) -> PathBuf {
    PathBuf::from(SNAPSHOTS_DIR).join(format!("{}.json", snapshot.digest().hex()))
}

pub fn pinned_workflow_path(hash: &WorkflowHash) -> PathBuf {
    PathBuf::from(PINNED_WORKFLOWS_DIR).join(format!("{}.json", hash.digest().hex()))
}

pub fn artifact_path(digest: &workrail_spec::ids::Sha256Digest) -> PathBuf {
    PathBuf::from(ARTIFACTS_DIR).join(format!("{}.json", digest.hex()))
}

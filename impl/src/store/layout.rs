//! The locked data directory layout (locks §13), as relative paths.
//!
//! ```text
//! sessions/<sessionId>/events/<first>-<last>.jsonl   committed segments (plus ignored orphans)
//! sessions/<sessionId>/manifest.jsonl                control stream
//! sessions/<sessionId>/.lock                         single-writer lock file
//! sessions/<sessionId>/cache/                        derived, rebuildable projections
//! sessions/.tmp-*-deleted-<sessionId>/                 a session GC is deleting (D130)
//! snapshots/<hex>.json                               CAS of execution snapshots
//! workflows/pinned/<hex>.json                        compiled workflows by workflowHash
//! artifacts/<hex>.json                               structured output artifacts (JCS)
//! {snapshots,workflows/pinned,artifacts}/.lock         GC's sweep against refreshes (D133)
//! keys/keyring.json                                  token signing keys (0600)
//! cache/resume-index.v1.jsonl                        derived `resume_session` summaries, safe to delete
//! servers/<serverId>.json                            a running server's record (decision D85)
//! servers/<serverId>.lock                            held by that server for its lifetime
//! ```

use std::path::PathBuf;

use workrail_spec::ids::{EventIndex, ServerId, SessionId, SnapshotRef, WorkflowHash};
use workrail_spec::manifest::segment_rel_path;

pub const SESSIONS_DIR: &str = "sessions";
pub const SNAPSHOTS_DIR: &str = "snapshots";
pub const PINNED_WORKFLOWS_DIR: &str = "workflows/pinned";
pub const ARTIFACTS_DIR: &str = "artifacts";
pub const KEYS_DIR: &str = "keys";
pub const KEYRING_FILE: &str = "keys/keyring.json";
/// Derived files of the whole data directory (never truth, safe to delete).
pub const DATA_CACHE_DIR: &str = "cache";
/// `resume_session`'s persisted summary index (`impl/docs/store.md` "Caches").
pub const RESUME_INDEX_FILE: &str = "cache/resume-index.v1.jsonl";

/// Records of running servers (decision D85).
pub const SERVERS_DIR: &str = "servers";

/// `servers/<serverId>.json`.
pub fn server_record_path(id: &ServerId) -> PathBuf {
    PathBuf::from(SERVERS_DIR).join(format!("{id}.json"))
}

/// `servers/<serverId>.lock`: held by the server for its lifetime.
pub fn server_lock_path(id: &ServerId) -> PathBuf {
    PathBuf::from(SERVERS_DIR).join(format!("{id}.lock"))
}

pub fn session_dir(session: &SessionId) -> PathBuf {
    PathBuf::from(SESSIONS_DIR).join(session.as_str())
}

pub fn events_dir(session: &SessionId) -> PathBuf {
    session_dir(session).join("events")
}

/// A session's manifest, in its directory.
pub const MANIFEST_FILE: &str = "manifest.jsonl";

pub fn manifest_path(session: &SessionId) -> PathBuf {
    session_dir(session).join(MANIFEST_FILE)
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
    events_dir(session).join(temp_file_name(&format!(
        "{:08}-{:08}.jsonl",
        first.get(),
        last.get()
    )))
}

/// Whether a directory entry is a writer's temp file (in flight, or left by a crash): never
/// truth, never read, skipped by listings and GC.
pub fn is_temp_file_name(name: &str) -> bool {
    name.starts_with(TEMP_PREFIX)
}

const TEMP_PREFIX: &str = ".tmp-";

/// A temp file name no other writer uses: `.tmp-<pid>-<process nonce>-<sequence>-<name>`.
/// Several WorkRail processes share one data directory, so a fixed temp name per object would
/// let two writers interleave bytes in one file or rename it from under each other.
pub fn temp_file_name(final_name: &str) -> String {
    if super::planted::is_planted(super::planted::PlantedBug::SharedTempName) {
        return format!("{TEMP_PREFIX}{final_name}");
    }
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static NONCE: OnceLock<u64> = OnceLock::new();
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let nonce = *NONCE.get_or_init(|| {
        let mut bytes = [0u8; 8];
        // A pid is reused after a crash; the nonce tells two lives of one pid apart. Without
        // entropy the address of this static and the time still differ between processes.
        if getrandom::fill(&mut bytes).is_err() {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            bytes = nanos.to_le_bytes();
        }
        u64::from_le_bytes(bytes)
    });
    let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    format!(
        "{TEMP_PREFIX}{}-{nonce:016x}-{sequence}-{final_name}",
        std::process::id()
    )
}

/// Where GC moves a session's directory to delete it (decision D130): a `.tmp-` name in
/// `sessions/`, which no session id matches, so nothing reaches it by a session's path.
pub fn deleting_session_dir(session: &SessionId) -> PathBuf {
    PathBuf::from(SESSIONS_DIR).join(temp_file_name(&format!("deleted-{session}")))
}

/// The lock of an object directory (`snapshots/`, `workflows/pinned/`, `artifacts/`): GC's
/// sweep holds it exclusive while it judges and deletes objects, a writer refreshing an object
/// already there holds it shared (decision D133).
pub fn object_dir_lock_path(dir: &std::path::Path) -> PathBuf {
    dir.join(".lock")
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

//! GC's primitives on PostgreSQL (decision D112; the rules are in `mod.rs`, D132).
//!
//! - Last activity is `sessions.last_activity`, which every committed append sets; one that
//!   cannot be read (NULL, or not a finite time) is unknown, and the session is retained.
//! - An expired session is deleted in one transaction under its advisory lock, only while its
//!   manifest rows are still the ones GC judged; the same transaction deletes the derived rows
//!   (the persisted resume index holds the session's notes, D115). A writer waiting on the lock
//!   then finds no rows and answers `SESSION_NOT_FOUND` (D130).
//! - The sweep is one statement: it deletes the snapshots, workflows and artifacts no root
//!   reaches and stored (or stored again) more than [`CAS_GRACE`] ago; the statement's row locks
//!   order it with a concurrent store of the same object, which makes it young first or finds
//!   it gone and stores it anew (D133).
//! - The retention config and the records of dead servers stay in the data directory; there
//!   are no files for crashed writers to leave.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use workrail_spec::error::ErrorEnvelope;
use workrail_spec::ids::{SessionId, Sha256Digest, SnapshotRef, WorkflowHash};

use super::{CAS_GRACE, Deleted, GcReport, GcStore, Listed, RetentionClock, Roots, Swept};
use crate::bundle::Progress;
use crate::store::postgres::{self, PostgresBackend};
use crate::store::{LoadedSession, SessionBackend, StoreError};

fn envelope(e: StoreError) -> ErrorEnvelope {
    e.to_envelope(false)
}

/// The freshness key GC checks under the lock: manifest (records, bytes).
fn key_of(loaded: &LoadedSession) -> (i64, i64) {
    (
        loaded.manifest.len() as i64,
        loaded.manifest_committed_bytes as i64,
    )
}

pub(super) struct PgGc<'a> {
    backend: &'a PostgresBackend,
}

impl<'a> PgGc<'a> {
    pub(super) fn new(backend: &'a Arc<PostgresBackend>) -> Self {
        Self { backend }
    }
}

impl GcStore for PgGc<'_> {
    fn sessions(&self, _clock: &dyn RetentionClock) -> Result<Vec<Listed>, ErrorEnvelope> {
        Ok(self
            .backend
            .last_activity()
            .map_err(envelope)?
            .into_iter()
            .map(|(name, ms)| Listed {
                name,
                last_activity: ms
                    .and_then(|ms| u64::try_from(ms).ok())
                    .map(|ms| SystemTime::UNIX_EPOCH + Duration::from_millis(ms)),
            })
            .collect())
    }

    fn load(&self, id: &SessionId) -> Result<Arc<LoadedSession>, StoreError> {
        SessionBackend::load(self.backend, id)
    }

    fn delete(&self, judged: &LoadedSession) -> Result<Deleted, ErrorEnvelope> {
        Ok(
            match self
                .backend
                .delete_session(&judged.session_id, key_of(judged))
                .map_err(envelope)?
            {
                postgres::Deleted::Yes => Deleted::Yes { unfinished: None },
                postgres::Deleted::Locked => Deleted::Locked,
                postgres::Deleted::Changed => Deleted::Changed(None),
                postgres::Deleted::Gone => Deleted::Gone,
            },
        )
    }

    fn after_deletions(&self) {
        // The delete transaction took the derived rows with it (D115).
    }

    fn changed_since(
        &self,
        seen: &BTreeSet<SessionId>,
        retained: &[Arc<LoadedSession>],
    ) -> Result<bool, ErrorEnvelope> {
        let now_bytes = self.backend.manifest_lengths_by_id().map_err(envelope)?;
        let new_session = now_bytes
            .iter()
            .filter_map(|(id, _)| SessionId::parse(id).ok())
            .any(|id| !seen.contains(&id));
        let grown = retained.iter().any(|loaded| {
            now_bytes
                .iter()
                .find(|(id, _)| id == loaded.session_id.as_str())
                .is_none_or(|(_, bytes)| *bytes != loaded.manifest_committed_bytes as i64)
        });
        Ok(new_session || grown)
    }

    fn sweep(
        &self,
        roots: &Roots,
        _clock: &dyn RetentionClock,
        dry_run: bool,
        _progress: &dyn Progress,
    ) -> Result<Swept, ErrorEnvelope> {
        fn sorted<'x>(digests: impl Iterator<Item = &'x Sha256Digest>) -> Vec<String> {
            let mut set: Vec<String> = digests.map(|d| d.as_str().to_owned()).collect();
            set.sort();
            set
        }
        let swept = self
            .backend
            .sweep(
                [
                    sorted(roots.snapshots.iter().map(SnapshotRef::digest)),
                    sorted(roots.workflows.iter().map(WorkflowHash::digest)),
                    sorted(roots.artifacts.iter()),
                ],
                CAS_GRACE,
                dry_run,
            )
            .map_err(envelope)?;
        let digests = |list: &[String]| -> Vec<Sha256Digest> {
            list.iter()
                .filter_map(|d| Sha256Digest::parse(d).ok())
                .collect()
        };
        Ok(Swept {
            snapshots: digests(&swept.snapshots)
                .into_iter()
                .map(SnapshotRef::from_digest)
                .collect(),
            workflows: digests(&swept.workflows)
                .into_iter()
                .map(WorkflowHash::from_digest)
                .collect(),
            artifacts: digests(&swept.artifacts),
            young: swept.young,
            warnings: Vec::new(),
        })
    }

    fn leftovers(
        &self,
        _report: &mut GcReport,
        _seen: &BTreeSet<SessionId>,
        _uncommitted: &[SessionId],
        _clock: &dyn RetentionClock,
        _dry_run: bool,
    ) -> Result<(), ErrorEnvelope> {
        Ok(())
    }
}

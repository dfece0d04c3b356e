//! The content-addressed objects: snapshots, pinned workflows and artifacts, one table each
//! (`digest` = `sha256:<hex>`, `body` = the JCS text). One generic read checks a stored text
//! against its digest as each kind requires ([`Stored`]); one generic write stores canonical
//! bytes under their digest.

use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::ids::{Sha256Digest, SnapshotRef, WorkflowHash};
use workrail_spec::jcs::{Canonical, CanonicalArtifact, sha256};
use workrail_spec::snapshot::ExecutionSnapshotFileV1;

use super::worker::{Request, Worker};
use super::{PostgresBackend, sql_error};
use crate::store::error::StoreError;

/// Which content-addressed table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ObjectTable {
    Snapshots,
    Workflows,
    Artifacts,
}

impl ObjectTable {
    pub(super) fn name(self) -> &'static str {
        match self {
            Self::Snapshots => "snapshots",
            Self::Workflows => "workflows",
            Self::Artifacts => "artifacts",
        }
    }
}

/// A kind of object kept in one of the tables, and how a stored text is checked against the
/// digest it is stored under. A text that fails the check is never returned.
pub(super) trait Stored: Sized {
    const TABLE: ObjectTable;
    /// How messages name the object (`snapshot sha256:…`).
    const NOUN: &'static str;

    /// The error for an absent row.
    fn missing(what: String) -> StoreError {
        StoreError::MissingObject { what }
    }

    /// The value of `text` stored under `digest`, or what is wrong with it.
    fn verified(text: &str, digest: &Sha256Digest) -> Result<Self, String>;
}

/// Snapshots and workflows: parsed, then accepted when the text hashes to the digest or, when
/// it does not, its canonical form does (the file store's rule).
fn parse_then_rehash<T, E: std::fmt::Display, F: std::fmt::Display>(
    text: &str,
    digest: &Sha256Digest,
    parse: impl FnOnce(&str) -> Result<T, E>,
    canonical_digest: impl FnOnce(&T) -> Result<Sha256Digest, F>,
) -> Result<T, String> {
    let value = parse(text).map_err(|e| e.to_string())?;
    if &sha256(text.as_bytes()) != digest {
        let actual = canonical_digest(&value).map_err(|e| e.to_string())?;
        if &actual != digest {
            return Err(format!("content hashes to {actual}"));
        }
    }
    Ok(value)
}

impl Stored for ExecutionSnapshotFileV1 {
    const TABLE: ObjectTable = ObjectTable::Snapshots;
    const NOUN: &'static str = "snapshot";

    fn verified(text: &str, digest: &Sha256Digest) -> Result<Self, String> {
        let rehash = |v: &Self| v.snapshot_ref().map(|r| r.digest().clone());
        parse_then_rehash(text, digest, Self::from_json_str, rehash)
    }
}

impl Stored for CompiledWorkflowSnapshotV1 {
    const TABLE: ObjectTable = ObjectTable::Workflows;
    const NOUN: &'static str = "pinned workflow";

    fn verified(text: &str, digest: &Sha256Digest) -> Result<Self, String> {
        let rehash = |v: &Self| v.workflow_hash().map(|h| h.digest().clone());
        parse_then_rehash(text, digest, Self::from_json_str, rehash)
    }
}

/// An artifact: any JSON value, stored as its JCS text, whose text must hash to its digest.
impl Stored for serde_json::Value {
    const TABLE: ObjectTable = ObjectTable::Artifacts;
    const NOUN: &'static str = "artifact";

    fn missing(what: String) -> StoreError {
        StoreError::CorruptObject {
            what,
            detail: "missing".into(),
        }
    }

    fn verified(text: &str, digest: &Sha256Digest) -> Result<Self, String> {
        if &sha256(text.as_bytes()) != digest {
            return Err("content does not match its digest".into());
        }
        workrail_spec::jcs::parse_strict(text).map_err(|e| e.to_string())
    }
}

impl PostgresBackend {
    /// The object stored under `digest`, checked ([`Stored::verified`]); a failed check is
    /// `CorruptObject`.
    pub(super) fn get_verified<T: Stored>(&self, digest: &Sha256Digest) -> Result<T, StoreError> {
        let what = format!("{} {digest}", T::NOUN);
        let Some(text) = self.get_object(T::TABLE, digest.as_str())? else {
            return Err(T::missing(what));
        };
        T::verified(&text, digest).map_err(|detail| StoreError::CorruptObject { what, detail })
    }

    /// Stores `value`'s canonical bytes under their digest, which it returns.
    pub(super) fn put_value<T: Stored + CanonicalArtifact>(
        &self,
        value: &T,
    ) -> Result<Sha256Digest, StoreError> {
        let canonical = Canonical::of(value).map_err(|e| StoreError::Internal {
            detail: e.to_string(),
        })?;
        let digest = canonical.digest().clone();
        self.put_object(T::TABLE, digest.as_str(), canonical.bytes())?;
        Ok(digest)
    }

    /// Stores a snapshot's canonical bytes under their digest.
    pub fn put_snapshot_bytes(
        &self,
        snapshot: &SnapshotRef,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        self.put_object(ObjectTable::Snapshots, snapshot.digest().as_str(), bytes)
    }

    /// Stores a compiled workflow's canonical bytes under its hash.
    pub fn put_workflow_bytes(&self, hash: &WorkflowHash, bytes: &[u8]) -> Result<(), StoreError> {
        self.put_object(ObjectTable::Workflows, hash.digest().as_str(), bytes)
    }

    /// Stores an artifact's canonical bytes under their digest.
    pub fn put_artifact(&self, digest: &Sha256Digest, bytes: &[u8]) -> Result<(), StoreError> {
        self.put_object(ObjectTable::Artifacts, digest.as_str(), bytes)
    }

    /// The artifact's text, verified against its digest.
    pub fn get_artifact(&self, digest: &Sha256Digest) -> Result<serde_json::Value, StoreError> {
        self.get_verified(digest)
    }

    fn get_object(&self, table: ObjectTable, digest: &str) -> Result<Option<String>, StoreError> {
        let digest = digest.to_owned();
        self.call(|reply| Request::GetObject {
            table,
            digest,
            reply,
        })
    }

    fn put_object(&self, table: ObjectTable, digest: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let body = String::from_utf8(bytes.to_vec()).map_err(|e| StoreError::Internal {
            detail: format!("canonical JSON is not UTF-8: {e}"),
        })?;
        let digest = digest.to_owned();
        self.call(|reply| Request::PutObject {
            table,
            digest,
            body,
            reply,
        })
    }
}

impl Worker {
    pub(super) async fn put_object(
        &mut self,
        table: ObjectTable,
        digest: &str,
        body: &str,
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        // An existing object with other (damaged) bytes is replaced, as the file store does;
        // storing it again makes it young, so GC's sweep keeps it for its grace (D112): a
        // writer stores an object just before the plan that references it.
        let sql = format!(
            "INSERT INTO {t} (digest, body) VALUES ($1, $2)
             ON CONFLICT (digest) DO UPDATE SET body = EXCLUDED.body, created_at = now()",
            t = table.name()
        );
        client
            .execute(&sql, &[&digest, &body])
            .await
            .map_err(sql_error("store an object"))?;
        Ok(())
    }

    pub(super) async fn get_object(
        &mut self,
        table: ObjectTable,
        digest: &str,
    ) -> Result<Option<String>, StoreError> {
        let client = self.client().await?;
        let sql = format!("SELECT body FROM {} WHERE digest = $1", table.name());
        let row = client
            .query_opt(&sql, &[&digest])
            .await
            .map_err(sql_error("read an object"))?;
        Ok(row.map(|r| r.get(0)))
    }
}

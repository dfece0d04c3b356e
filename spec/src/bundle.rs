//! Export bundle v1: one self-verifying JSON document per session (locks §1.3).
//!
//! Integrity entries hash the RFC 8785 form of each referenced value. Tokens are never included;
//! they are re-minted on import. The checks here are pure: format, version, integrity, event and
//! manifest order, and presence of every pinned snapshot and pinned workflow. Writing the session
//! (and remapping a colliding session id) is the importer's job.

use std::borrow::Cow;
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::artifact::{self, ArtifactError, ArtifactKind};
use crate::compiled::CompiledWorkflowSnapshotV1;
use crate::error::ErrorCode;
use crate::event::{EventData, SessionEvent};
use crate::ids::{BundleId, SessionId, Sha256Digest, SnapshotRef, WorkflowHash};
use crate::jcs::{JcsError, jcs_digest};
use crate::manifest::{ManifestRecord, tagged_object_schema};
use crate::snapshot::ExecutionSnapshotFileV1;

/// The only bundle schema version this build reads and writes.
pub const BUNDLE_SCHEMA_VERSION: u64 = 1;
/// The only integrity manifest kind.
pub const INTEGRITY_KIND: &str = "sha256_manifest_v1";

const BUNDLE: ArtifactKind = ArtifactKind::ExportBundle;

/// Informational producer metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Producer {
    pub app_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_config_hash: Option<Sha256Digest>,
}

/// One integrity entry: a bundle-relative path, the digest of the JCS bytes, and their count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IntegrityEntry {
    pub path: String,
    pub sha256: Sha256Digest,
    pub bytes: u64,
}

/// The integrity manifest (`kind: "sha256_manifest_v1"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Integrity {
    pub kind: IntegrityKind,
    pub entries: Vec<IntegrityEntry>,
}

/// The closed set of integrity kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum IntegrityKind {
    #[serde(rename = "sha256_manifest_v1")]
    Sha256ManifestV1,
}

/// The session contents of a bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BundleSession {
    pub session_id: SessionId,
    /// Ascending `eventIndex`, contiguous from 0.
    pub events: Vec<SessionEvent>,
    /// Ascending `manifestIndex`, contiguous from 0.
    pub manifest: Vec<ManifestRecord>,
    pub snapshots: BTreeMap<SnapshotRef, ExecutionSnapshotFileV1>,
    pub pinned_workflows: BTreeMap<WorkflowHash, CompiledWorkflowSnapshotV1>,
}

impl BundleSession {
    /// The integrity entries of this session, sorted by path (locks §1.3 "Deterministic hashing
    /// rule"): `session/events`, `session/manifest`, `session/snapshots/<ref>`,
    /// `session/pinnedWorkflows/<hash>`.
    pub fn integrity_entries(&self) -> Result<Vec<IntegrityEntry>, JcsError> {
        let entry = |path: String, value: &dyn erased::Canonical| -> Result<_, JcsError> {
            let (sha256, bytes) = value.digest()?;
            Ok(IntegrityEntry {
                path,
                sha256,
                bytes: bytes as u64,
            })
        };
        let mut entries = vec![
            entry("session/events".into(), &self.events)?,
            entry("session/manifest".into(), &self.manifest)?,
        ];
        for (snapshot_ref, snapshot) in &self.snapshots {
            entries.push(entry(
                format!("session/snapshots/{snapshot_ref}"),
                snapshot,
            )?);
        }
        for (hash, compiled) in &self.pinned_workflows {
            entries.push(entry(format!("session/pinnedWorkflows/{hash}"), compiled)?);
        }
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(entries)
    }
}

/// Object-safe canonical digest, so entries of different types share one helper.
mod erased {
    use super::*;
    pub trait Canonical {
        fn digest(&self) -> Result<(Sha256Digest, usize), JcsError>;
    }
    impl<T: Serialize> Canonical for T {
        fn digest(&self) -> Result<(Sha256Digest, usize), JcsError> {
            jcs_digest(self)
        }
    }
}

/// An export bundle, schema version 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportBundleBody {
    pub bundle_id: BundleId,
    /// Informational only; never used for ordering.
    pub exported_at: String,
    pub producer: Producer,
    pub integrity: Integrity,
    pub session: BundleSession,
}

/// A bundle: `bundleSchemaVersion` plus its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportBundleV1 {
    pub body: ExportBundleBody,
}

/// Why a bundle is refused, with the locked code (locks §1.3 "Import failure errors").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {detail}")]
pub struct BundleError {
    pub code: ErrorCode,
    pub detail: String,
}

fn bundle_error(code: ErrorCode, detail: impl ToString) -> BundleError {
    BundleError {
        code,
        detail: detail.to_string(),
    }
}

impl ExportBundleV1 {
    /// Assembles a bundle, computing its integrity manifest.
    pub fn assemble(
        bundle_id: BundleId,
        exported_at: String,
        producer: Producer,
        session: BundleSession,
    ) -> Result<Self, JcsError> {
        let entries = session.integrity_entries()?;
        Ok(Self {
            body: ExportBundleBody {
                bundle_id,
                exported_at,
                producer,
                integrity: Integrity {
                    kind: IntegrityKind::Sha256ManifestV1,
                    entries,
                },
                session,
            },
        })
    }

    /// Parses and fully validates a bundle; every failure carries its locked `BUNDLE_*` code.
    pub fn parse_and_validate(text: &str) -> Result<Self, BundleError> {
        let bundle = Self::from_json_str(text).map_err(|e| match e {
            ArtifactError::UnsupportedVersion { .. } => {
                bundle_error(ErrorCode::BundleUnsupportedVersion, e)
            }
            _ => bundle_error(ErrorCode::BundleInvalidFormat, e),
        })?;
        bundle.validate()?;
        Ok(bundle)
    }

    /// Integrity, ordering and reachability checks (no I/O).
    pub fn validate(&self) -> Result<(), BundleError> {
        let session = &self.body.session;
        let expected = session
            .integrity_entries()
            .map_err(|e| bundle_error(ErrorCode::BundleInvalidFormat, e))?;
        let mut stated = self.body.integrity.entries.clone();
        stated.sort_by(|a, b| a.path.cmp(&b.path));
        if stated != expected {
            let differing = expected
                .iter()
                .find(|e| !stated.contains(e))
                .map(|e| e.path.clone())
                .or_else(|| {
                    stated
                        .iter()
                        .find(|s| !expected.contains(s))
                        .map(|s| s.path.clone())
                })
                .unwrap_or_default();
            return Err(bundle_error(
                ErrorCode::BundleIntegrityFailed,
                format!("integrity entry {differing:?} does not match the bundle contents"),
            ));
        }
        for (i, event) in session.events.iter().enumerate() {
            if event.event_index().get() != i as u64 {
                return Err(bundle_error(
                    ErrorCode::BundleEventOrderInvalid,
                    format!(
                        "events[{i}] has eventIndex {}; events must ascend from 0 without gaps",
                        event.event_index()
                    ),
                ));
            }
            if event.session_id() != &session.session_id {
                return Err(bundle_error(
                    ErrorCode::BundleInvalidFormat,
                    format!("events[{i}] belongs to session {}", event.session_id()),
                ));
            }
        }
        for (i, record) in session.manifest.iter().enumerate() {
            if record.manifest_index().get() != i as u64 {
                return Err(bundle_error(
                    ErrorCode::BundleManifestOrderInvalid,
                    format!(
                        "manifest[{i}] has manifestIndex {}; records must ascend from 0 without gaps",
                        record.manifest_index()
                    ),
                ));
            }
            if record.session_id() != &session.session_id {
                return Err(bundle_error(
                    ErrorCode::BundleInvalidFormat,
                    format!("manifest[{i}] belongs to session {}", record.session_id()),
                ));
            }
            if let ManifestRecord::SnapshotPinned(pin) = record
                && !session.snapshots.contains_key(&pin.snapshot_ref)
            {
                return Err(bundle_error(
                    ErrorCode::BundleMissingSnapshot,
                    format!("pinned snapshot {} is not embedded", pin.snapshot_ref),
                ));
            }
        }
        for event in &session.events {
            let hash = match event.data() {
                EventData::RunStarted(run) => &run.workflow_hash,
                EventData::NodeCreated(node) => {
                    if !session.snapshots.contains_key(&node.snapshot_ref) {
                        return Err(bundle_error(
                            ErrorCode::BundleMissingSnapshot,
                            format!(
                                "node snapshot {} (event {}) is not embedded",
                                node.snapshot_ref,
                                event.event_index()
                            ),
                        ));
                    }
                    &node.workflow_hash
                }
                _ => continue,
            };
            if !session.pinned_workflows.contains_key(hash) {
                return Err(bundle_error(
                    ErrorCode::BundleMissingPinnedWorkflow,
                    format!(
                        "pinned workflow {hash} (event {}) is not embedded",
                        event.event_index()
                    ),
                ));
            }
        }
        for (snapshot_ref, snapshot) in &session.snapshots {
            let actual = snapshot
                .snapshot_ref()
                .map_err(|e| bundle_error(ErrorCode::BundleInvalidFormat, e))?;
            if &actual != snapshot_ref {
                return Err(bundle_error(
                    ErrorCode::BundleIntegrityFailed,
                    format!("snapshot keyed {snapshot_ref} hashes to {actual}"),
                ));
            }
        }
        for (hash, compiled) in &session.pinned_workflows {
            let actual = compiled
                .workflow_hash()
                .map_err(|e| bundle_error(ErrorCode::BundleInvalidFormat, e))?;
            if &actual != hash {
                return Err(bundle_error(
                    ErrorCode::BundleIntegrityFailed,
                    format!("pinned workflow keyed {hash} hashes to {actual}"),
                ));
            }
        }
        Ok(())
    }

    pub fn from_json_str(text: &str) -> Result<Self, ArtifactError> {
        Self::from_value(artifact::parse_value(BUNDLE, text)?)
    }

    pub fn from_value(value: Value) -> Result<Self, ArtifactError> {
        let mut map = artifact::into_object(BUNDLE, value)?;
        artifact::take_version(
            BUNDLE,
            &mut map,
            "bundleSchemaVersion",
            BUNDLE_SCHEMA_VERSION,
        )?;
        let body = artifact::from_value(BUNDLE, "bundle", Value::Object(map))?;
        Ok(Self { body })
    }

    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        let mut map = artifact::to_object(&self.body)?;
        map.insert("bundleSchemaVersion".into(), BUNDLE_SCHEMA_VERSION.into());
        Ok(Value::Object(map))
    }
}

artifact::artifact_serde!(ExportBundleV1);

impl JsonSchema for ExportBundleV1 {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("ExportBundleV1")
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        tagged_object_schema(
            ExportBundleBody::json_schema(generator),
            "bundleSchemaVersion",
            BUNDLE_SCHEMA_VERSION,
            None,
        )
    }
}

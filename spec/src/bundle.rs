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
use crate::closed::SessionHealthKind;
use crate::compiled::CompiledWorkflowSnapshotV1;
use crate::error::ErrorCode;
use crate::event::{EventData, SessionEvent};
use crate::ids::{BundleId, SessionId, Sha256Digest, SnapshotRef, WorkflowHash};
use crate::jcs::{self, JcsError, jcs_digest};
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
    impl<T: crate::jcs::CanonicalArtifact> Canonical for T {
        fn digest(&self) -> Result<(Sha256Digest, usize), JcsError> {
            jcs_digest(self)
        }
    }
}

/// The salvage banner of a bundle exported from a `corrupt_tail` session (locks §10 "Salvage
/// surface"): the bundle holds only the validated prefix, up to the last valid manifest entry.
/// Additive and optional within bundle schema version 1; covered by the integrity entry
/// `salvage`, so it cannot be stripped without failing integrity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BundleSalvage {
    /// The source session's health: always `corrupt_tail` (other unhealthy sessions have no
    /// usable prefix and are not exported).
    pub health: SessionHealthKind,
    /// The store's closed-set corruption reason (e.g. `segment_digest_mismatch`).
    pub reason: String,
    /// The source manifest record at which validation stopped.
    pub manifest_index: u64,
    /// What was found, for humans (never an absolute path).
    pub detail: String,
}

impl crate::jcs::CanonicalArtifact for BundleSalvage {}

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
    /// Present only for a salvage export (additive, optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub salvage: Option<BundleSalvage>,
    /// Structured output artifacts referenced by `artifact_ref` outputs, keyed by the digest of
    /// their JCS bytes (additive, optional; each covered by the integrity entry
    /// `artifacts/<sha256>`, whose digest must equal its key).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub artifacts: BTreeMap<Sha256Digest, Value>,
}

impl ExportBundleBody {
    /// Every integrity entry of this body, sorted by path: the session's (see
    /// [`BundleSession::integrity_entries`]) plus `artifacts/<sha256>` per embedded artifact and
    /// `salvage` when present.
    pub fn integrity_entries(&self) -> Result<Vec<IntegrityEntry>, JcsError> {
        let mut entries = self.session.integrity_entries()?;
        let entry = |path: String, value: &dyn erased::Canonical| -> Result<_, JcsError> {
            let (sha256, bytes) = value.digest()?;
            Ok(IntegrityEntry {
                path,
                sha256,
                bytes: bytes as u64,
            })
        };
        for (digest, value) in &self.artifacts {
            let object = value.as_object().ok_or_else(|| JcsError {
                detail: format!("artifact {digest} is not a JSON object"),
            })?;
            entries.push(entry(format!("artifacts/{digest}"), object)?);
        }
        if let Some(salvage) = &self.salvage {
            entries.push(entry("salvage".into(), salvage)?);
        }
        entries.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(entries)
    }
}

/// The additive, optional parts of a bundle (see [`ExportBundleV1::assemble_with`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BundleExtras {
    pub salvage: Option<BundleSalvage>,
    pub artifacts: BTreeMap<Sha256Digest, Value>,
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
        Self::assemble_with(
            bundle_id,
            exported_at,
            producer,
            session,
            BundleExtras::default(),
        )
    }

    /// Assembles a bundle with its optional parts (salvage banner, embedded artifacts),
    /// computing an integrity manifest that covers them too.
    pub fn assemble_with(
        bundle_id: BundleId,
        exported_at: String,
        producer: Producer,
        session: BundleSession,
        extras: BundleExtras,
    ) -> Result<Self, JcsError> {
        let mut body = ExportBundleBody {
            bundle_id,
            exported_at,
            producer,
            integrity: Integrity {
                kind: IntegrityKind::Sha256ManifestV1,
                entries: Vec::new(),
            },
            session,
            salvage: extras.salvage,
            artifacts: extras.artifacts,
        };
        body.integrity.entries = body.integrity_entries()?;
        Ok(Self { body })
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
        let expected = self
            .body
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
        for (digest, value) in &self.body.artifacts {
            let object = value.as_object().ok_or_else(|| {
                bundle_error(
                    ErrorCode::BundleInvalidFormat,
                    format!("artifact keyed {digest} is not a JSON object"),
                )
            })?;
            let (actual, _) =
                jcs_digest(object).map_err(|e| bundle_error(ErrorCode::BundleInvalidFormat, e))?;
            if &actual != digest {
                return Err(bundle_error(
                    ErrorCode::BundleIntegrityFailed,
                    format!("artifact keyed {digest} hashes to {actual}"),
                ));
            }
        }
        if let Some(salvage) = &self.body.salvage {
            if salvage.health != SessionHealthKind::CorruptTail {
                return Err(bundle_error(
                    ErrorCode::BundleInvalidFormat,
                    format!(
                        "salvage.health is {}; only a corrupt_tail session has a validated prefix to export",
                        salvage.health
                    ),
                ));
            }
            if salvage.manifest_index > crate::ids::MAX_JSON_SAFE_INTEGER {
                return Err(bundle_error(
                    ErrorCode::BundleInvalidFormat,
                    "salvage.manifestIndex exceeds 2^53-1",
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

    /// Parses a bundle from its text. The text is read twice and never built as a JSON tree:
    /// first a strict scan (syntax, no duplicate keys at any depth, an object, the version),
    /// then a typed parse straight into the bundle. Failures are classified as for every
    /// artifact: syntax and duplicate keys first, then the version, then the shape.
    pub fn from_json_str(text: &str) -> Result<Self, ArtifactError> {
        artifact::scan_versioned(BUNDLE, text, "bundleSchemaVersion", BUNDLE_SCHEMA_VERSION)?;
        let wire: BundleWire = serde_json::from_str(text)
            .map_err(|e| ArtifactError::malformed(BUNDLE, format!("bundle: {e}")))?;
        Ok(Self {
            body: wire.into_body(),
        })
    }

    /// Writes the bundle's RFC 8785 (JCS) form to `out`: the same bytes as the canonical form
    /// of [`ExportBundleV1::to_value`], written part by part (each event, record, snapshot,
    /// workflow and artifact on its own), so no copy of the whole bundle is built in memory.
    pub fn write_canonical(&self, out: &mut dyn std::io::Write) -> Result<(), JcsError> {
        let body = &self.body;
        let session = &body.session;
        let mut members: Vec<(Cow<'_, str>, jcs::MemberValue<'_>)> = vec![
            (
                "bundleSchemaVersion".into(),
                jcs::member(&BUNDLE_SCHEMA_VERSION),
            ),
            ("bundleId".into(), jcs::member(&body.bundle_id)),
            ("exportedAt".into(), jcs::member(&body.exported_at)),
            ("producer".into(), jcs::member(&body.producer)),
            ("integrity".into(), jcs::member(&body.integrity)),
            (
                "session".into(),
                Box::new(move |out| {
                    jcs::write_object(
                        out,
                        vec![
                            ("sessionId".into(), jcs::member(&session.session_id)),
                            (
                                "events".into(),
                                Box::new(|out| jcs::write_array(out, &session.events)),
                            ),
                            (
                                "manifest".into(),
                                Box::new(|out| jcs::write_array(out, &session.manifest)),
                            ),
                            (
                                "snapshots".into(),
                                Box::new(|out| {
                                    write_map(out, &session.snapshots, SnapshotRef::as_str)
                                }),
                            ),
                            (
                                "pinnedWorkflows".into(),
                                Box::new(|out| {
                                    write_map(out, &session.pinned_workflows, WorkflowHash::as_str)
                                }),
                            ),
                        ],
                    )
                }),
            ),
        ];
        if let Some(salvage) = &body.salvage {
            members.push(("salvage".into(), jcs::member(salvage)));
        }
        if !body.artifacts.is_empty() {
            members.push((
                "artifacts".into(),
                Box::new(|out| write_map(out, &body.artifacts, Sha256Digest::as_str)),
            ));
        }
        jcs::write_object(out, members)
    }

    /// The bundle's RFC 8785 (JCS) text (see [`ExportBundleV1::write_canonical`]), built in one
    /// buffer sized from the integrity entries, so it is not reallocated as it grows (a
    /// reallocation would double it). Every part of the text is some entry's value, except
    /// each entry itself (about 125 bytes plus its path), the map key that names the part (at
    /// most its path) and the small envelope.
    pub fn to_canonical_text(&self) -> Result<String, JcsError> {
        let entries = &self.body.integrity.entries;
        let hint = entries
            .iter()
            .map(|e| {
                e.bytes
                    .saturating_add(2 * e.path.len() as u64)
                    .saturating_add(160)
            })
            .fold(4096u64, u64::saturating_add);
        let mut bytes = Vec::with_capacity(usize::try_from(hint).unwrap_or(0));
        self.write_canonical(&mut bytes)?;
        String::from_utf8(bytes).map_err(|e| JcsError {
            detail: e.to_string(),
        })
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

/// Writes a map with string keys as a canonical object, one value at a time.
fn write_map<K, V: Serialize>(
    out: &mut dyn std::io::Write,
    map: &BTreeMap<K, V>,
    key: fn(&K) -> &str,
) -> Result<(), JcsError> {
    jcs::write_object(
        out,
        map.iter()
            .map(|(k, v)| (Cow::Borrowed(key(k)), jcs::member(v)))
            .collect(),
    )
}

/// The bundle as it is read from text: the body's fields plus the version, which
/// [`artifact::scan_versioned`] has already checked. Must list exactly the fields of
/// [`ExportBundleBody`] (the roundtrip tests fail otherwise).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct BundleWire {
    #[serde(rename = "bundleSchemaVersion")]
    _version: serde::de::IgnoredAny,
    bundle_id: BundleId,
    exported_at: String,
    producer: Producer,
    integrity: Integrity,
    session: BundleSession,
    #[serde(default)]
    salvage: Option<BundleSalvage>,
    #[serde(default)]
    artifacts: BTreeMap<Sha256Digest, Value>,
}

impl BundleWire {
    fn into_body(self) -> ExportBundleBody {
        ExportBundleBody {
            bundle_id: self.bundle_id,
            exported_at: self.exported_at,
            producer: self.producer,
            integrity: self.integrity,
            session: self.session,
            salvage: self.salvage,
            artifacts: self.artifacts,
        }
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

//! `manifest.jsonl`: the control stream that attests segments and pins snapshots (locks §1
//! "Two-stream model", "`manifest.jsonl` record kinds").
//!
//! A segment is part of truth only once a `segment_closed` record attests it; snapshot refs the
//! segment introduced are pinned by `snapshot_pinned` records appended after it (pin-after-close).

use std::borrow::Cow;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::artifact::{self, ArtifactError, ArtifactKind};
use crate::closed::closed_set;
use crate::ids::{EventId, EventIndex, ManifestIndex, SessionId, Sha256Digest, SnapshotRef};

/// The only manifest schema version this build reads and writes.
pub const MANIFEST_RECORD_VERSION: u64 = 1;

const MANIFEST: ArtifactKind = ArtifactKind::ManifestRecord;

closed_set!(
    /// Manifest record kinds (schemaVersion 1).
    ManifestKind {
        SegmentClosed = "segment_closed",
        SnapshotPinned = "snapshot_pinned",
    }
);

/// Attests that a segment file is durably committed and integrity-checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SegmentClosed {
    pub manifest_index: ManifestIndex,
    pub session_id: SessionId,
    pub first_event_index: EventIndex,
    pub last_event_index: EventIndex,
    /// Relative to the session root: `events/<first>-<last>.jsonl`.
    pub segment_rel_path: String,
    /// Digest of the segment file bytes.
    pub sha256: Sha256Digest,
    pub bytes: u64,
}

/// Makes a snapshot reachable for export and GC without scanning events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SnapshotPinned {
    pub manifest_index: ManifestIndex,
    pub session_id: SessionId,
    /// The domain event that introduced the snapshot (typically its `node_created`).
    pub event_index: EventIndex,
    pub snapshot_ref: SnapshotRef,
    pub created_by_event_id: EventId,
}

/// The canonical relative path of a segment: `events/<first>-<last>.jsonl`, indices zero-padded
/// to at least 8 digits (decision: the lock's example width; wider indices just grow).
pub fn segment_rel_path(first: EventIndex, last: EventIndex) -> String {
    format!("events/{:08}-{:08}.jsonl", first.get(), last.get())
}

/// A manifest record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestRecord {
    SegmentClosed(SegmentClosed),
    SnapshotPinned(SnapshotPinned),
}

impl crate::jcs::CanonicalArtifact for ManifestRecord {}

impl ManifestRecord {
    pub fn kind(&self) -> ManifestKind {
        match self {
            Self::SegmentClosed(_) => ManifestKind::SegmentClosed,
            Self::SnapshotPinned(_) => ManifestKind::SnapshotPinned,
        }
    }

    pub fn manifest_index(&self) -> ManifestIndex {
        match self {
            Self::SegmentClosed(r) => r.manifest_index,
            Self::SnapshotPinned(r) => r.manifest_index,
        }
    }

    pub fn session_id(&self) -> &SessionId {
        match self {
            Self::SegmentClosed(r) => &r.session_id,
            Self::SnapshotPinned(r) => &r.session_id,
        }
    }

    pub fn from_json_str(text: &str) -> Result<Self, ArtifactError> {
        Self::from_value(artifact::parse_value(MANIFEST, text)?)
    }

    pub fn from_value(value: Value) -> Result<Self, ArtifactError> {
        let mut map = artifact::into_object(MANIFEST, value)?;
        artifact::take_version(MANIFEST, &mut map, "v", MANIFEST_RECORD_VERSION)?;
        let kind = artifact::take_tag(MANIFEST, &mut map, "kind")?;
        let record = match ManifestKind::parse(&kind) {
            Some(ManifestKind::SegmentClosed) => Self::SegmentClosed(artifact::from_value(
                MANIFEST,
                "segment_closed",
                Value::Object(map),
            )?),
            Some(ManifestKind::SnapshotPinned) => Self::SnapshotPinned(artifact::from_value(
                MANIFEST,
                "snapshot_pinned",
                Value::Object(map),
            )?),
            None => {
                return Err(ArtifactError::malformed(
                    MANIFEST,
                    format!("unknown kind {kind:?}; expected segment_closed or snapshot_pinned"),
                ));
            }
        };
        record.check()?;
        Ok(record)
    }

    fn check(&self) -> Result<(), ArtifactError> {
        if let Self::SegmentClosed(s) = self {
            if s.first_event_index > s.last_event_index {
                return Err(ArtifactError::invariant(
                    MANIFEST,
                    "segment bounds ordered",
                    format!(
                        "firstEventIndex {} > lastEventIndex {}",
                        s.first_event_index, s.last_event_index
                    ),
                ));
            }
            if s.bytes > crate::ids::MAX_JSON_SAFE_INTEGER {
                return Err(ArtifactError::invariant(
                    MANIFEST,
                    "integers are JCS-safe",
                    format!("bytes {} exceeds 2^53-1", s.bytes),
                ));
            }
            let expected = segment_rel_path(s.first_event_index, s.last_event_index);
            if s.segment_rel_path != expected {
                return Err(ArtifactError::invariant(
                    MANIFEST,
                    "segmentRelPath is the relative path events/<first>-<last>.jsonl",
                    format!("expected {expected:?}, got {:?}", s.segment_rel_path),
                ));
            }
        }
        Ok(())
    }

    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        let mut map = match self {
            Self::SegmentClosed(r) => artifact::to_object(r)?,
            Self::SnapshotPinned(r) => artifact::to_object(r)?,
        };
        map.insert("v".into(), MANIFEST_RECORD_VERSION.into());
        map.insert("kind".into(), self.kind().as_str().into());
        Ok(Value::Object(map))
    }
}

artifact::artifact_serde!(ManifestRecord);

/// Adds `v` and `kind` to a generated object schema.
pub(crate) fn tagged_object_schema(
    mut schema: schemars::Schema,
    version_field: &str,
    version: u64,
    tag: Option<(&str, &str)>,
) -> schemars::Schema {
    if let Some(obj) = schema.as_object_mut() {
        if let Some(Value::Object(props)) = obj.get_mut("properties") {
            props.insert(
                version_field.to_owned(),
                serde_json::json!({ "const": version }),
            );
            if let Some((field, value)) = tag {
                props.insert(field.to_owned(), serde_json::json!({ "const": value }));
            }
        }
        if let Some(Value::Array(required)) = obj.get_mut("required") {
            required.insert(0, Value::from(version_field));
            if let Some((field, _)) = tag {
                required.insert(1, Value::from(field));
            }
        }
    }
    schema
}

impl JsonSchema for ManifestRecord {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("ManifestRecord")
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let closed = tagged_object_schema(
            SegmentClosed::json_schema(generator),
            "v",
            MANIFEST_RECORD_VERSION,
            Some(("kind", "segment_closed")),
        );
        let pinned = tagged_object_schema(
            SnapshotPinned::json_schema(generator),
            "v",
            MANIFEST_RECORD_VERSION,
            Some(("kind", "snapshot_pinned")),
        );
        schemars::json_schema!({ "oneOf": [closed, pinned] })
    }
}

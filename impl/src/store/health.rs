//! Session health: a closed classification of what load found (locks §10 "Session health +
//! tool gating").
//!
//! Execution paths require [`SessionHealth::Healthy`]. Read-only tools may use the validated
//! prefix of a `corrupt_tail` session, always labelled as salvage.

use std::fmt;

use serde::Serialize;
use workrail_spec::closed::SessionHealthKind;
use workrail_spec::ids::SessionId;

/// Why a session is not healthy (closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CorruptionReason {
    /// `manifest.jsonl` is missing while event segments remain: nothing can be attested
    /// (decision D131; a new session's empty manifest is durable before its first segment).
    ManifestMissing,
    /// A newline-terminated manifest line is not a valid record.
    ManifestUnparseable,
    /// `manifestIndex` is not the next index.
    ManifestIndexGap,
    /// A record names another session.
    ManifestSessionMismatch,
    /// An attested segment file is missing.
    SegmentMissing,
    /// An attested segment's byte count differs.
    SegmentSizeMismatch,
    /// An attested segment's sha256 differs.
    SegmentDigestMismatch,
    /// A line of an attested segment is not a valid event of this session.
    SegmentEventInvalid,
    /// A segment's events do not cover exactly `[first, last]` in order.
    SegmentBoundsMismatch,
    /// `firstEventIndex` is not the previous `lastEventIndex + 1`.
    SegmentNotContiguous,
    /// A pin names an event that is not a committed `node_created` of that snapshot.
    PinWithoutNode,
    /// A committed segment introduced a snapshot that was never pinned (crash between
    /// `segment_closed` and `snapshot_pinned`; fails fast, never repaired).
    MissingSnapshotPins,
    /// Two committed events share a dedupeKey.
    DuplicateDedupeKey,
    /// A record or event has a schema version this build does not read.
    UnknownVersion,
    /// A committed `node_created` references a snapshot that is not in the CAS (decision D53).
    SnapshotMissing,
    /// A referenced snapshot's bytes do not hash to its ref.
    SnapshotDamaged,
    /// A committed `run_started` pins a workflow that is not in `workflows/pinned/`.
    WorkflowMissing,
    /// A pinned workflow's bytes do not hash to its workflowHash.
    WorkflowDamaged,
}

impl CorruptionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ManifestMissing => "manifest_missing",
            Self::ManifestUnparseable => "manifest_unparseable",
            Self::ManifestIndexGap => "manifest_index_gap",
            Self::ManifestSessionMismatch => "manifest_session_mismatch",
            Self::SegmentMissing => "segment_missing",
            Self::SegmentSizeMismatch => "segment_size_mismatch",
            Self::SegmentDigestMismatch => "segment_digest_mismatch",
            Self::SegmentEventInvalid => "segment_event_invalid",
            Self::SegmentBoundsMismatch => "segment_bounds_mismatch",
            Self::SegmentNotContiguous => "segment_not_contiguous",
            Self::PinWithoutNode => "pin_without_node",
            Self::MissingSnapshotPins => "missing_snapshot_pins",
            Self::DuplicateDedupeKey => "duplicate_dedupe_key",
            Self::UnknownVersion => "unknown_version",
            Self::SnapshotMissing => "snapshot_missing",
            Self::SnapshotDamaged => "snapshot_damaged",
            Self::WorkflowMissing => "workflow_missing",
            Self::WorkflowDamaged => "workflow_damaged",
        }
    }
}

impl fmt::Display for CorruptionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where validation stopped and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Corruption {
    pub reason: CorruptionReason,
    /// The manifest record at which validation stopped (0-based line).
    pub manifest_index: u64,
    /// What was found, for humans; no absolute paths.
    pub detail: String,
}

/// The health of a loaded session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SessionHealth {
    Healthy,
    /// A validated prefix exists (at least one committed segment); the tail is unusable.
    CorruptTail(Corruption),
    /// No usable prefix.
    CorruptHead(Corruption),
    /// Validation met a schema version this build does not read.
    UnknownVersion(Corruption),
}

impl fmt::Display for SessionHealth {
    /// For people: the health, and where validation stopped and why.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.corruption() {
            None => f.write_str("healthy"),
            Some(c) => write!(
                f,
                "{} ({} at manifest record {}: {})",
                self.kind().as_str(),
                c.reason,
                c.manifest_index,
                c.detail
            ),
        }
    }
}

impl SessionHealth {
    pub fn kind(&self) -> SessionHealthKind {
        match self {
            Self::Healthy => SessionHealthKind::Healthy,
            Self::CorruptTail(_) => SessionHealthKind::CorruptTail,
            Self::CorruptHead(_) => SessionHealthKind::CorruptHead,
            Self::UnknownVersion(_) => SessionHealthKind::UnknownVersion,
        }
    }

    pub fn is_healthy(&self) -> bool {
        matches!(self, Self::Healthy)
    }

    pub fn corruption(&self) -> Option<&Corruption> {
        match self {
            Self::Healthy => None,
            Self::CorruptTail(c) | Self::CorruptHead(c) | Self::UnknownVersion(c) => Some(c),
        }
    }
}

/// What a person runs to get an unhealthy session out of the way (for `workrail inspect` and
/// gc's safe mode), by what is wrong with it.
pub fn how_to_clear(
    session: &SessionId,
    health: SessionHealthKind,
    reason: Option<&str>,
) -> String {
    let delete = format!("then delete the directory sessions/{session} of the data directory");
    match (health, reason) {
        (_, Some("missing_snapshot_pins")) => format!(
            "run `workrail repair {session}` (it restores the snapshot pins a torn write dropped, when the snapshots are intact); if it refuses, export its validated prefix with `workrail export {session} -o {session}.json`, import that with `workrail import {session}.json --allow-salvage`, {delete}"
        ),
        (_, Some("manifest_missing")) => format!(
            "its manifest.jsonl is missing while event segments remain, so none of its history can be attested: restore sessions/{session}/manifest.jsonl (or the data directory) from a backup, or import an exported bundle of the session; if the session's first call never answered (a server killed while starting it, with a WorkRail older than this one), nothing was committed: {}",
            delete.trim_start_matches("then ")
        ),
        (SessionHealthKind::UnknownVersion, _) => format!(
            "a newer WorkRail wrote it: run gc with that version, or move sessions/{session} out of the data directory while this one runs gc"
        ),
        (SessionHealthKind::CorruptHead, _) => format!(
            "no part of it validates: restore sessions/{session} from a backup, or {}",
            delete.trim_start_matches("then ")
        ),
        (SessionHealthKind::CorruptTail, _) => format!(
            "export its validated prefix with `workrail export {session} -o {session}.json`, import that with `workrail import {session}.json --allow-salvage` (a new, healthy session), {delete}"
        ),
        _ => format!(
            "its files could not be read (see the error): check that this user can read sessions/{session} and the data directory's snapshots/ and workflows/pinned/, and for an I/O error (EIO) that the disk reports no failure, then run gc again (an error that has passed clears by itself)"
        ),
    }
}

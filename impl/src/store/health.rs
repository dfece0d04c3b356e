//! Session health: a closed classification of what load found (locks §10 "Session health +
//! tool gating").
//!
//! Execution paths require [`SessionHealth::Healthy`]. Read-only tools may use the validated
//! prefix of a `corrupt_tail` session, always labelled as salvage.

use std::fmt;

use serde::Serialize;
use workrail_spec::closed::SessionHealthKind;

/// Why a session is not healthy (closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CorruptionReason {
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
}

impl CorruptionReason {
    pub fn as_str(self) -> &'static str {
        match self {
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

//! Export/import bundles (locks §1.3, §10 "Salvage surface"; `impl/docs/bundles.md`).
//!
//! - **Export** reads a session through the store's read side only and assembles one
//!   self-verifying JSON bundle: events, manifest, every pinned snapshot, every run's pinned
//!   workflow, the artifacts its outputs reference, and a `sha256_manifest_v1` integrity
//!   manifest over the JCS bytes of each. No tokens. A `corrupt_tail` session exports its
//!   validated prefix with an explicit `salvage` banner; `corrupt_head` and `unknown_version`
//!   sessions are refused.
//! - **Import** validates everything before it writes anything (the pure checks of
//!   `ExportBundleV1::parse_and_validate` plus the structural checks of `check.rs`), then stores
//!   CAS objects first and the session last, through the store's append gate, one append plan
//!   per original segment. A colliding session id imports as a new session (events rebuilt under
//!   the new id, so dedupeKeys are re-derived; node, run and event ids stay). Finally it re-mints
//!   tokens: a rehydrate response for the preferred tip of every run.

mod check;
mod export;
mod import;
mod input;

use serde::Serialize;
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};

pub use self::export::{Export, ExportedBundle, export_bundle, export_session};
pub use self::import::{ImportOptions, ImportReport, ImportedRun, import_bundle};
pub use self::input::{
    DEFAULT_MAX_BUNDLE_BYTES, MAX_BUNDLE_BYTES_ENV, max_bundle_bytes, over_cap, read_capped,
};

/// Reports progress of long work (export, import, GC). The CLI draws a bar on stderr; library
/// callers pass [`NoProgress`].
pub trait Progress {
    /// A new phase of `total` units.
    fn begin(&self, phase: &str, total: u64);
    /// `n` more units of the current phase are done.
    fn advance(&self, n: u64);
    /// The work is over (success or failure).
    fn finish(&self);
}

/// Progress that reports nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {
    fn begin(&self, _phase: &str, _total: u64) {}
    fn advance(&self, _n: u64) {}
    fn finish(&self) {}
}

/// Why a warning was raised (closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BundleWarningCode {
    /// Export: the session is `corrupt_tail`; the bundle holds only the validated prefix.
    SalvagePrefix,
    /// Export: an artifact referenced by an `artifact_ref` output is missing or damaged in the
    /// local store, so the bundle cannot carry its content.
    ArtifactUnavailable,
    /// Import: an `artifact_ref` output names an artifact the bundle does not embed; the output
    /// is imported, its content stays unavailable.
    ArtifactNotInBundle,
    /// Import: the session id already existed here; the bundle was imported under a new id.
    SessionIdRemapped,
    /// Import: re-minting tokens for a run failed (the session itself was imported).
    ResumeUnavailable,
}

/// A structured, non-fatal finding of export or import.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BundleWarning {
    pub code: BundleWarningCode,
    pub message: String,
}

impl BundleWarning {
    pub(crate) fn new(code: BundleWarningCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// The envelope of an import failure with its locked `BUNDLE_*` code and what to do about it.
pub(crate) fn bundle_failure(code: ErrorCode, detail: impl std::fmt::Display) -> ErrorEnvelope {
    let suggestion = match code {
        ErrorCode::BundleUnsupportedVersion => {
            "This WorkRail reads bundleSchemaVersion 1 only: import the file with the WorkRail version that exported it, or upgrade WorkRail."
        }
        ErrorCode::BundleIntegrityFailed => {
            "The bundle was modified or damaged after export: export the session again at its source and transfer the file unmodified."
        }
        ErrorCode::BundleMissingSnapshot | ErrorCode::BundleMissingPinnedWorkflow => {
            "The bundle is incomplete: export the session again with `workrail export <sessionId>` and import that file unmodified."
        }
        ErrorCode::BundleEventOrderInvalid | ErrorCode::BundleManifestOrderInvalid => {
            "The bundle's records are out of order, so it was not produced by a correct export: export the session again and import that file unmodified."
        }
        _ => {
            "The file is not a valid WorkRail bundle (schema version 1): pass the unmodified output of `workrail export <sessionId>`."
        }
    };
    ErrorEnvelope::new(
        code,
        format!("import refused, nothing was written: {detail}"),
        suggestion,
        Retry::NotRetryable,
    )
}

pub(crate) use crate::time::rfc3339_utc;

//! Store errors as data, and their mapping onto the unified error envelope.

use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::ids::SessionId;

use super::health::SessionHealth;

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("session {session} is locked by another writer")]
    Locked { session: SessionId },
    #[error("session {session} does not exist")]
    NotFound { session: SessionId },
    #[error("session {session} is not healthy: {health:?}")]
    Unhealthy {
        session: SessionId,
        health: SessionHealth,
    },
    #[error("I/O failed during {op}: {detail}")]
    Io {
        session: Option<SessionId>,
        op: &'static str,
        detail: String,
    },
    #[error("an earlier I/O failure poisoned this append gate for session {session}")]
    Poisoned { session: SessionId },
    #[error("invalid append plan for session {session}: {detail}")]
    InvalidPlan { session: SessionId, detail: String },
    #[error("stored object {what} is corrupt: {detail}")]
    CorruptObject { what: String, detail: String },
    #[error("stored object {what} is missing")]
    MissingObject { what: String },
    #[error("internal store invariant broken: {detail}")]
    Internal { detail: String },
}

/// `unexpected:storage_corruption_detected`, as error details name it.
const STORAGE_CORRUPTION: &str = "unexpected:storage_corruption_detected";

impl StoreError {
    /// The envelope for this error. `token_flow` selects the token domain for lock contention
    /// (locks §12 boundary rule, §15).
    /// Every corruption error names the unified ReasonCode in `details.reasonCode`: the call
    /// fails fast and writes nothing, because no append may follow a failed health gate
    /// (decision D42).
    pub fn to_envelope(&self, token_flow: bool) -> ErrorEnvelope {
        match self {
            Self::Locked { .. } => ErrorEnvelope::session_locked(token_flow),
            Self::NotFound { session } => ErrorEnvelope::new(
                ErrorCode::SessionNotFound,
                format!("Session {session} does not exist in this WorkRail data directory."),
                "Check the session id (as shown in a WorkRail response) and the data directory in use; if the session was exported elsewhere, import its bundle first.",
                Retry::NotRetryable,
            ),
            Self::Unhealthy { session, health } => {
                let code = match health {
                    SessionHealth::UnknownVersion(_) => ErrorCode::SessionUnknownVersion,
                    _ => ErrorCode::SessionCorrupt,
                };
                let corruption = health.corruption();
                ErrorEnvelope::new(
                    code,
                    format!(
                        "Session {session} failed validation ({}); execution needs a healthy session.",
                        health.kind()
                    ),
                    "Inspect or export the validated prefix (read-only salvage), then start a new run; do not retry this call.",
                    Retry::NotRetryable,
                )
                .with_details(serde_json::json!({
                    "health": health.kind(),
                    "reason": corruption.map(|c| c.reason.as_str()),
                    "manifestIndex": corruption.map(|c| c.manifest_index),
                    // The unified ReasonCode (locks §3): a corrupt session is storage corruption;
                    // an unknown version is not (a newer WorkRail wrote it).
                    "reasonCode": (code == ErrorCode::SessionCorrupt)
                        .then_some(STORAGE_CORRUPTION),
                }))
            }
            Self::Io { op, .. } => ErrorEnvelope::new(
                ErrorCode::StoreIoError,
                format!(
                    "A filesystem operation failed during {op}; nothing partial was committed."
                ),
                "Retry the same call; if it keeps failing, check free disk space and permissions of the WorkRail data directory.",
                Retry::RetryableImmediate,
            ),
            Self::Poisoned { .. } => ErrorEnvelope::new(
                ErrorCode::StoreIoError,
                "An earlier filesystem failure stopped further writes in this operation.",
                "Retry the same call: it will reload and revalidate the session from disk.",
                Retry::RetryableImmediate,
            ),
            Self::CorruptObject { what, .. } => ErrorEnvelope::new(
                ErrorCode::StoreCorruptionDetected,
                format!("Stored object {what} does not match its content address."),
                "The data directory is damaged; restore it from a backup or import an exported bundle.",
                Retry::NotRetryable,
            )
            .with_details(serde_json::json!({"reasonCode": STORAGE_CORRUPTION})),
            Self::MissingObject { what } => ErrorEnvelope::new(
                ErrorCode::StoreCorruptionDetected,
                format!("Stored object {what} is missing."),
                "The data directory is incomplete; restore it from a backup or import an exported bundle.",
                Retry::NotRetryable,
            )
            .with_details(serde_json::json!({"reasonCode": STORAGE_CORRUPTION})),
            Self::InvalidPlan { .. } | Self::Internal { .. } => ErrorEnvelope::new(
                ErrorCode::InternalError,
                format!("WorkRail broke one of its own invariants: {self}"),
                "This is a WorkRail bug; report it with the call that caused it. Nothing was written.",
                Retry::NotRetryable,
            ),
        }
    }
}

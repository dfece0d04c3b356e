//! Store errors as data, and their mapping onto the unified error envelope.

use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::ids::SessionId;

use super::health::{CorruptionReason, SessionHealth};

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("session {session} is locked by another writer")]
    Locked { session: SessionId },
    #[error("session {session} does not exist")]
    NotFound { session: SessionId },
    /// A call that continues a session found it gone once it held the session's lock: it was
    /// deleted (by GC's retention, or by hand) while the call waited or since its token was
    /// minted. Nothing was written, and no empty session took its place (decision D130).
    #[error("session {session} was deleted")]
    Deleted { session: SessionId },
    #[error("session {session} is not healthy: {health}")]
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
    /// A PostgreSQL request failed: the connection was refused or lost, or the server answered
    /// an SQL error (decision D120). A `COMMIT` lost with its connection says so in `detail`.
    #[error("the database failed during {op}: {detail}")]
    Database {
        session: Option<SessionId>,
        op: &'static str,
        detail: String,
    },
    /// The database did not answer within the bound (decision D110): the call was abandoned
    /// and its connections closed, so the server rolls back whatever it had not committed.
    #[error("the database did not answer within {after_ms} ms during {op}")]
    Unanswered { op: &'static str, after_ms: u64 },
    /// A write of the commit path failed; `committed` says exactly what durable truth holds.
    #[error("{op} failed on {path}: {os_error} ({committed})")]
    Write {
        session: Option<SessionId>,
        op: &'static str,
        /// The path relative to the data directory.
        path: String,
        /// The OS error as the OS words it.
        os_error: String,
        /// The errno name (`ENOSPC`, `EIO`, …) when known.
        errno: Option<&'static str>,
        committed: Committed,
    },
    #[error("session {session} was not repaired: {reason}")]
    RepairRefused { session: SessionId, reason: String },
    #[error("an earlier I/O failure poisoned this append gate for session {session}")]
    Poisoned { session: SessionId },
    #[error("invalid append plan for session {session}: {detail}")]
    InvalidPlan { session: SessionId, detail: String },
    #[error("the token signing keyring keys/keyring.json is damaged: {detail}")]
    KeyringCorrupt { detail: String },
    /// Another user could have written part of the data directory (decision D136): nothing
    /// there is trusted, the signing key least of all.
    #[error("{0}")]
    Refused(Box<super::owner::Refusal>),
    #[error("stored object {what} is corrupt: {detail}")]
    CorruptObject { what: String, detail: String },
    #[error("stored object {what} is missing")]
    MissingObject { what: String },
    #[error("internal store invariant broken: {detail}")]
    Internal { detail: String },
}

/// What a failed write left committed (closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Committed {
    /// Nothing: the failure came before the records were attested, or the attestation was
    /// undone (the manifest cut back to its committed length, durably).
    Nothing,
    /// The records may or may not be committed: they were written but neither confirmed on
    /// disk nor undone. The next load decides; a retry of the same call is idempotent.
    Unknown,
}

impl Committed {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Nothing => "nothing",
            Self::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Committed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Nothing => f.write_str("nothing was committed"),
            Self::Unknown => f.write_str("the write may or may not be committed"),
        }
    }
}

/// The errno name of an OS error, for error details (`ENOSPC on sessions/…/manifest.jsonl`).
pub fn errno_name(e: &std::io::Error) -> Option<&'static str> {
    Some(match e.raw_os_error()? {
        1 => "EPERM",
        2 => "ENOENT",
        5 => "EIO",
        9 => "EBADF",
        12 => "ENOMEM",
        13 => "EACCES",
        17 => "EEXIST",
        20 => "ENOTDIR",
        21 => "EISDIR",
        24 => "EMFILE",
        27 => "EFBIG",
        28 => "ENOSPC",
        30 => "EROFS",
        122 => "EDQUOT",
        _ => return None,
    })
}

impl StoreError {
    /// A failed write on `path` (relative to the data directory).
    pub fn write(
        session: Option<&SessionId>,
        op: &'static str,
        path: &std::path::Path,
        e: &std::io::Error,
        committed: Committed,
    ) -> Self {
        Self::Write {
            session: session.cloned(),
            op,
            path: path.display().to_string(),
            os_error: e.to_string(),
            errno: errno_name(e),
            committed,
        }
    }
}

/// How a person gets an unhealthy session back, by what is wrong with it (decisions D51, D53).
pub fn recovery(session: &SessionId, health: &SessionHealth) -> String {
    let salvage = if matches!(health, SessionHealth::CorruptHead(_)) {
        // No validated prefix: there is nothing to salvage.
        "restore the data directory from a backup, or start the workflow again with start_workflow (no part of this session validates, so there is nothing to export)".to_owned()
    } else {
        format!(
            "export what is intact with `workrail export {session} -o {session}.json` and import it with `workrail import {session}.json --allow-salvage`: the import is a new, healthy session holding the validated prefix, with fresh tokens for every run"
        )
    };
    let reason = health.corruption().map(|c| c.reason);
    match (health, reason) {
        (SessionHealth::UnknownVersion(_), _) => format!(
            "A newer WorkRail wrote this session: continue it with that version. Do not retry this call. To keep working here, {salvage}."
        ),
        (_, Some(CorruptionReason::MissingSnapshotPins)) => format!(
            "A write of this session was torn (e.g. by a power cut). A person can run `workrail repair {session}`: it restores the missing snapshot pins when the snapshots are intact, and refuses otherwise; then resend this call. If repair refuses, {salvage}. Do not retry this call before that."
        ),
        (
            _,
            Some(
                CorruptionReason::SnapshotMissing
                | CorruptionReason::SnapshotDamaged
                | CorruptionReason::WorkflowMissing
                | CorruptionReason::WorkflowDamaged,
            ),
        ) => format!(
            "A stored object this session needs was deleted or damaged. Restore the data directory's `snapshots/` and `workflows/pinned/` from a backup, or {salvage}. Do not retry this call before that."
        ),
        _ => format!(
            "The session's stored history is damaged. A person can {salvage}. Do not retry this call before that."
        ),
    }
}

/// The answer to a call about a session that existed and is gone from this data directory
/// (decision D130): `SESSION_NOT_FOUND`, saying what most likely happened and what to do.
pub fn deleted_session(session: &SessionId) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::SessionNotFound,
        format!(
            "Session {session} no longer exists in this WorkRail data directory: it was deleted (by `workrail gc` once its retention period passed without activity, or by hand). Nothing was written for this call."
        ),
        "If you have an exported bundle of the session, import it with `workrail import` and continue with the tokens the import prints. Otherwise call resume_session to find another run, or start the workflow again with start_workflow. Do not resend this call: the session will not come back by itself.",
        Retry::NotRetryable,
    )
    .with_details(serde_json::json!({
        "sessionId": session,
        "problem": "session_deleted",
    }))
}

/// `unexpected:storage_corruption_detected`, as error details name it.
const STORAGE_CORRUPTION: &str = "unexpected:storage_corruption_detected";

impl StoreError {
    /// This error as a page or a report shows it to a person: what is wrong, then what to do
    /// (the envelope's message and suggestion).
    pub fn for_people(&self) -> String {
        let envelope = self.to_envelope(false);
        format!("{} {}", envelope.message, envelope.suggestion)
    }

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
            Self::Deleted { session } => deleted_session(session),
            Self::Unhealthy { session, health } => {
                let code = match health {
                    SessionHealth::UnknownVersion(_) => ErrorCode::SessionUnknownVersion,
                    _ => ErrorCode::SessionCorrupt,
                };
                let corruption = health.corruption();
                let found = corruption
                    .map(|c| format!(": {} ({})", c.reason, c.detail))
                    .unwrap_or_default();
                ErrorEnvelope::new(
                    code,
                    format!(
                        "Session {session} failed validation ({}{found}); execution needs a healthy session, so nothing was written.",
                        health.kind()
                    ),
                    recovery(session, health),
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
            Self::Io { op, detail, .. } => ErrorEnvelope::new(
                ErrorCode::StoreIoError,
                format!("A filesystem operation failed during {op}: {detail}."),
                "Retry the same call; if it keeps failing, check free disk space and the permissions of the WorkRail data directory.",
                Retry::RetryableImmediate,
            )
            .with_details(serde_json::json!({"op": op, "osError": detail})),
            Self::Database { op, detail, .. } => ErrorEnvelope::new(
                ErrorCode::StoreIoError,
                format!("The PostgreSQL database failed during {op}: {detail}."),
                "Retry the same call with the same arguments: a retry never records anything twice, and it answers with what was recorded if this call was. If it keeps failing, check that the PostgreSQL server of WORKRAIL_STORE (or --store) is running and reachable.",
                Retry::RetryableImmediate,
            )
            .with_details(serde_json::json!({"op": op, "databaseError": detail})),
            Self::Unanswered { op, after_ms } => ErrorEnvelope::new(
                ErrorCode::StoreIoError,
                format!(
                    "The database did not answer within {after_ms} ms during {op}; the call was abandoned and its connection closed, so the server keeps nothing it had not committed."
                ),
                "Retry the same call (a retried append is idempotent); if it keeps failing, check that the PostgreSQL server is running and reachable. WORKRAIL_STORE_TIMEOUT_MS sets how long a call may wait.",
                Retry::RetryableAfterMs { after_ms: 1000 },
            )
            .with_details(serde_json::json!({"op": op, "timeoutMs": after_ms})),
            Self::Write {
                op,
                path,
                os_error,
                errno,
                committed,
                ..
            } => {
                let what = errno.unwrap_or("I/O error");
                let message = match committed {
                    Committed::Nothing => format!(
                        "WorkRail could not {op}: {what} on {path} ({os_error}). Nothing was committed: the session is exactly as before this call."
                    ),
                    Committed::Unknown => format!(
                        "WorkRail could not {op}: {what} on {path} ({os_error}). The step's records were written but could be neither confirmed on disk nor undone, so they may or may not be committed."
                    ),
                };
                let fix = match *errno {
                    Some("ENOSPC" | "EDQUOT") => {
                        "Free disk space on the volume of the WorkRail data directory, then retry the same call with the same arguments (a retry never records anything twice)."
                    }
                    Some("EACCES" | "EPERM" | "EROFS") => {
                        "Make the WorkRail data directory writable by this user, then retry the same call with the same arguments (a retry never records anything twice)."
                    }
                    _ => {
                        "Retry the same call with the same arguments: a retry never records anything twice, and it answers with what was recorded if this call was. If it keeps failing, check the disk that holds the WorkRail data directory."
                    }
                };
                ErrorEnvelope::new(
                    ErrorCode::StoreIoError,
                    message,
                    fix,
                    Retry::RetryableImmediate,
                )
                .with_details(serde_json::json!({
                    "op": op,
                    "path": path,
                    "errno": errno,
                    "osError": os_error,
                    "committed": committed.as_str(),
                }))
            }
            Self::RepairRefused { session, reason } => ErrorEnvelope::new(
                ErrorCode::SessionCorrupt,
                format!("Session {session} was not repaired: {reason}."),
                "Nothing was written. `workrail repair` only restores snapshot pins whose snapshots are intact; for other damage, export the validated prefix with `workrail export <sessionId> -o bundle.json` and import it with `workrail import bundle.json --allow-salvage`.",
                Retry::NotRetryable,
            )
            .with_details(serde_json::json!({"reason": reason})),
            Self::Poisoned { .. } => ErrorEnvelope::new(
                ErrorCode::StoreIoError,
                "An earlier filesystem failure stopped further writes in this operation.",
                "Retry the same call: it will reload and revalidate the session from disk.",
                Retry::RetryableImmediate,
            ),
            Self::KeyringCorrupt { detail } => ErrorEnvelope::new(
                ErrorCode::StoreCorruptionDetected,
                format!(
                    "The token signing keyring (keys/keyring.json in the WorkRail data directory) is damaged: {detail}."
                ),
                "Restore keys/keyring.json from a backup. Or move it aside: WorkRail then creates a new keyring, sessions stay intact, but tokens issued before then stop verifying (resume_session mints fresh ones).",
                Retry::NotRetryable,
            )
            .with_details(serde_json::json!({
                "reasonCode": STORAGE_CORRUPTION,
                "problem": "keyring_corrupt",
                "path": "keys/keyring.json",
            })),
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
            Self::Refused(refusal) => ErrorEnvelope::new(
                ErrorCode::StoreIoError,
                refusal.message(),
                refusal.fix(),
                Retry::NotRetryable,
            )
            .with_details(refusal.details()),
            Self::InvalidPlan { .. } | Self::Internal { .. } => ErrorEnvelope::new(
                ErrorCode::InternalError,
                format!("WorkRail broke one of its own invariants: {self}"),
                "This is a WorkRail bug; report it with the call that caused it. Nothing was written.",
                Retry::NotRetryable,
            ),
        }
    }
}

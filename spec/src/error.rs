//! The unified error envelope `{code, message, suggestion, retry, details?}` (locks §12).
//!
//! Every surfaced error (MCP, CLI) uses this one shape. Retry guidance lives only in the closed
//! `retry` union, never in prose. Codes are closed and grouped in domains; token-driven execution
//! tools report only `TOKEN_*` codes for token and locking failures, storage operations only
//! non-token domains (locks §12 "Error code domains + boundary rule").

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::closed::closed_set;

/// Retry guidance that drives client behaviour without parsing prose (locks §12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Retry {
    NotRetryable,
    RetryableImmediate,
    #[serde(rename_all = "camelCase")]
    RetryableAfterMs {
        after_ms: u64,
    },
}

/// Default wait suggested when a session lock is busy (locks §15: explicit, bounded guidance).
pub const DEFAULT_LOCK_RETRY_AFTER_MS: u64 = 1000;

closed_set!(
    /// Error code domains.
    ErrorDomain {
        Token = "TOKEN",
        Session = "SESSION",
        Store = "STORE",
        Bundle = "BUNDLE",
        Workflow = "WORKFLOW",
        Validation = "VALIDATION",
        Internal = "INTERNAL",
    }
);

closed_set!(
    /// Every error code WorkRail surfaces.
    ErrorCode {
        // Token validation and token-flow locking (locks §1.2, §15).
        TokenInvalidFormat = "TOKEN_INVALID_FORMAT",
        TokenUnsupportedVersion = "TOKEN_UNSUPPORTED_VERSION",
        TokenBadSignature = "TOKEN_BAD_SIGNATURE",
        TokenScopeMismatch = "TOKEN_SCOPE_MISMATCH",
        TokenUnknownNode = "TOKEN_UNKNOWN_NODE",
        TokenWorkflowHashMismatch = "TOKEN_WORKFLOW_HASH_MISMATCH",
        TokenSessionLocked = "TOKEN_SESSION_LOCKED",
        // Storage and projection operations that are not token-derived.
        SessionLocked = "SESSION_LOCKED",
        SessionNotFound = "SESSION_NOT_FOUND",
        SessionCorrupt = "SESSION_CORRUPT",
        SessionUnknownVersion = "SESSION_UNKNOWN_VERSION",
        StoreIoError = "STORE_IO_ERROR",
        StoreCorruptionDetected = "STORE_CORRUPTION_DETECTED",
        // Export/import (locks §1.3).
        BundleInvalidFormat = "BUNDLE_INVALID_FORMAT",
        BundleUnsupportedVersion = "BUNDLE_UNSUPPORTED_VERSION",
        BundleIntegrityFailed = "BUNDLE_INTEGRITY_FAILED",
        BundleMissingSnapshot = "BUNDLE_MISSING_SNAPSHOT",
        BundleMissingPinnedWorkflow = "BUNDLE_MISSING_PINNED_WORKFLOW",
        BundleEventOrderInvalid = "BUNDLE_EVENT_ORDER_INVALID",
        BundleManifestOrderInvalid = "BUNDLE_MANIFEST_ORDER_INVALID",
        // Workflow discovery and compilation.
        WorkflowNotFound = "WORKFLOW_NOT_FOUND",
        WorkflowInvalid = "WORKFLOW_INVALID",
        WorkflowPinnedMissing = "WORKFLOW_PINNED_MISSING",
        // Tool input validation (locks §16.3.1).
        ValidationError = "VALIDATION_ERROR",
        // A broken invariant inside WorkRail; reported, never a panic.
        InternalError = "INTERNAL_ERROR",
    }
);

impl ErrorCode {
    pub fn domain(self) -> ErrorDomain {
        let s = self.as_str();
        if s.starts_with("TOKEN_") {
            ErrorDomain::Token
        } else if s.starts_with("SESSION_") {
            ErrorDomain::Session
        } else if s.starts_with("STORE_") {
            ErrorDomain::Store
        } else if s.starts_with("BUNDLE_") {
            ErrorDomain::Bundle
        } else if s.starts_with("WORKFLOW_") {
            ErrorDomain::Workflow
        } else if s.starts_with("VALIDATION_") {
            ErrorDomain::Validation
        } else {
            ErrorDomain::Internal
        }
    }
}

/// The unified error envelope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ErrorEnvelope {
    pub code: ErrorCode,
    /// What is wrong and where (which tool or input), concise.
    pub message: String,
    /// Exactly what to do next (locks §12 "self-correcting").
    pub suggestion: String,
    pub retry: Retry,
    /// Bounded, deterministic, JSON-safe structure; never file paths or timestamps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl ErrorEnvelope {
    pub fn new(
        code: ErrorCode,
        message: impl Into<String>,
        suggestion: impl Into<String>,
        retry: Retry,
    ) -> Self {
        Self {
            code,
            message: message.into(),
            suggestion: suggestion.into(),
            retry,
            details: None,
        }
    }

    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    /// The locked `VALIDATION_ERROR` for an over-budget or non-canonicalizable context: measured
    /// bytes, max bytes, method, and reduction guidance (locks §16.3.1, §12).
    pub fn context_over_budget(tool: &str, measured_bytes: usize) -> Self {
        let max = crate::budget::CONTEXT_MAX_BYTES;
        Self::new(
            ErrorCode::ValidationError,
            format!(
                "{tool}: `context` is {measured_bytes} bytes, over the {max}-byte budget (measured as UTF-8 bytes of its RFC 8785 JCS form)."
            ),
            "Remove large blobs from `context` and pass references instead (file paths, ids, URLs); put durable notes in `output.notesMarkdown`, then call the tool again.",
            Retry::NotRetryable,
        )
        .with_details(serde_json::json!({
            "measuredBytes": measured_bytes,
            "maxBytes": max,
            "measurement": "rfc8785_jcs_utf8_bytes",
        }))
    }

    /// A busy session lock (locks §15): token flows get `TOKEN_SESSION_LOCKED`, storage
    /// operations `SESSION_LOCKED`, both retryable after a bounded wait.
    pub fn session_locked(token_flow: bool) -> Self {
        let code = if token_flow {
            ErrorCode::TokenSessionLocked
        } else {
            ErrorCode::SessionLocked
        };
        Self::new(
            code,
            "Another WorkRail server is writing to this session, and held it longer than this call waits.",
            "Retry in about a second with the same arguments: the other write finishes first, and a retry never records anything twice.",
            Retry::RetryableAfterMs {
                after_ms: DEFAULT_LOCK_RETRY_AFTER_MS,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_domain_matching_its_prefix() {
        for code in ErrorCode::ALL {
            let domain = code.domain();
            assert!(
                code.as_str().starts_with(domain.as_str()),
                "{code} in {domain}"
            );
        }
    }

    #[test]
    fn retry_union_wire_shape() {
        let json = serde_json::to_value(Retry::RetryableAfterMs { after_ms: 250 }).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"kind": "retryable_after_ms", "afterMs": 250})
        );
        let json = serde_json::to_value(Retry::NotRetryable).unwrap();
        assert_eq!(json, serde_json::json!({"kind": "not_retryable"}));
    }
}

//! Token minting and verification: `st.v1.` / `ack.v1.` / `chk.v1.` = base64url(JCS payload) +
//! HMAC-SHA256 over the payload bytes, verified with the keyring's `current` key, then
//! `previous` (locks §1.2).
//!
//! Agents mangle long tokens. The locked format stays, but harmless wrapping is tolerated at the
//! boundary (whitespace anywhere, surrounding quotes or backticks: a token never contains them),
//! and every refusal says exactly how to recover.

use hmac::{KeyInit, Mac};
use sha2::Sha256;
use workrail_spec::closed::TokenKind;
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::token::{
    SIGNATURE_BYTES, TokenFormatError, TokenParts, TokenPayload, format_token,
};

use crate::store::{Keyring, SigningKey};

type HmacSha256 = hmac::Hmac<Sha256>;

/// How an agent recovers from any unusable token.
const RECOVER: &str = "Copy the tokens exactly as they appear in the latest WorkRail response (do not edit, shorten or re-wrap them). If you no longer have them, call continue_workflow with only the last stateToken you do have (it returns that step's current tokens), or call resume_session to find the run again (it returns the run's current stateToken), or start the workflow again.";

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error(transparent)]
    Format(#[from] TokenFormatError),
    #[error("a {found} token was passed where a {expected} token is required")]
    WrongKind {
        expected: TokenKind,
        found: TokenKind,
    },
    #[error("the token's signature does not match any active WorkRail key")]
    BadSignature,
}

impl TokenError {
    /// The unified envelope; `field` names the tool input that held the token.
    pub fn to_envelope(&self, field: &str) -> ErrorEnvelope {
        match self {
            Self::Format(e @ TokenFormatError::InvalidFormat { .. }) => ErrorEnvelope::new(
                ErrorCode::TokenInvalidFormat,
                format!("`{field}` is not a valid WorkRail token: {e}."),
                RECOVER,
                Retry::NotRetryable,
            ),
            Self::Format(e @ TokenFormatError::UnsupportedVersion { .. }) => ErrorEnvelope::new(
                ErrorCode::TokenUnsupportedVersion,
                format!("`{field}`: {e}."),
                "The token was minted by a different WorkRail version. Start the workflow again with start_workflow.",
                Retry::NotRetryable,
            ),
            Self::WrongKind { expected, found } => ErrorEnvelope::new(
                ErrorCode::TokenInvalidFormat,
                format!(
                    "`{field}` holds a {found} token (`{}.v1.…`) but needs a {expected} token (`{}.v1.…`).",
                    found.prefix(),
                    expected.prefix()
                ),
                format!(
                    "Put each token in its own field: stateToken starts with `st.`, ackToken with `ack.`, checkpointToken with `chk.`. {RECOVER}"
                ),
                Retry::NotRetryable,
            )
            .with_details(serde_json::json!({"field": field, "expected": expected, "found": found})),
            Self::BadSignature => ErrorEnvelope::new(
                ErrorCode::TokenBadSignature,
                format!("`{field}` was altered or was minted by another WorkRail data directory: its signature does not verify."),
                RECOVER,
                Retry::NotRetryable,
            ),
        }
    }
}

/// Strips harmless wrapping: all whitespace, and surrounding quotes or backticks.
pub fn normalize(raw: &str) -> String {
    let compact: String = raw.chars().filter(|c| !c.is_whitespace()).collect();
    compact
        .trim_matches(|c| matches!(c, '"' | '\'' | '`'))
        .to_owned()
}

fn sign(key: &SigningKey, payload: &[u8]) -> [u8; SIGNATURE_BYTES] {
    // HMAC accepts keys of any length; a 32-byte key never fails.
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&key.secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    mac.update(payload);
    mac.finalize().into_bytes().into()
}

fn verifies(key: &SigningKey, payload: &[u8], signature: &[u8]) -> bool {
    match <HmacSha256 as KeyInit>::new_from_slice(&key.secret) {
        Ok(mut mac) => {
            mac.update(payload);
            // Constant-time comparison.
            mac.verify_slice(signature).is_ok()
        }
        Err(_) => false,
    }
}

/// Mints and verifies tokens with one keyring.
#[derive(Debug, Clone)]
pub struct TokenCodec {
    keyring: Keyring,
}

impl TokenCodec {
    pub fn new(keyring: Keyring) -> Self {
        Self { keyring }
    }

    /// Signs with the `current` key.
    pub fn mint(&self, payload: &TokenPayload) -> String {
        let signature = sign(&self.keyring.current, &payload.canonical_bytes());
        format_token(payload, &signature)
    }

    /// Verifies a token of the `expected` kind: format and version, then the signature
    /// (`current`, then `previous`), then the payload.
    pub fn verify(&self, raw: &str, expected: TokenKind) -> Result<TokenPayload, TokenError> {
        let parts = TokenParts::parse(&normalize(raw))?;
        if parts.kind != expected {
            return Err(TokenError::WrongKind {
                expected,
                found: parts.kind,
            });
        }
        let signed = self
            .keyring
            .verification_order()
            .any(|key| verifies(key, &parts.payload_bytes, &parts.signature));
        if !signed {
            return Err(TokenError::BadSignature);
        }
        Ok(parts.payload()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_strips_only_wrapping() {
        assert_eq!(normalize(" `st.v1.a.b` \n"), "st.v1.a.b");
        assert_eq!(normalize("\"st.v1.a\n.b\""), "st.v1.a.b");
    }
}

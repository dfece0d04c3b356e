//! Token minting and verification: `st.v1.` / `ack.v1.` / `chk.v1.` = base64url(JCS payload) +
//! HMAC-SHA256 over the payload bytes, verified with the keyring's `current` key, then
//! `previous` (locks §1.2).
//!
//! Agents mangle long tokens. The locked format stays, but wrapping that can never be part of a
//! token is removed at the boundary ([`normalize`], decisions D46 and D47), and every refusal
//! names the field, the specific problem and how to recover.

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
pub const RECOVER: &str = "Copy the tokens exactly as they appear in the latest WorkRail response (do not edit, shorten or re-wrap them). If you no longer have them, call continue_workflow with only the last stateToken you do have (it returns that step's current tokens), or call resume_session to find the run again (it returns the run's current stateToken), or start the workflow again.";

/// Why a signature did not verify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureFailure {
    /// The payload part no longer decodes, so the token was certainly altered.
    PayloadAltered { why: String },
    /// The payload decodes: either the signature part was altered or another data directory
    /// (another keyring) minted the token. The two cannot be told apart.
    Unverified,
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error(transparent)]
    Format(#[from] TokenFormatError),
    #[error("{} was passed where {} is required", article(*found), article(*expected))]
    WrongKind {
        expected: TokenKind,
        found: TokenKind,
    },
    #[error("the token's signature does not match any active WorkRail key")]
    BadSignature(SignatureFailure),
}

/// "a state token" / "an ack token" / "a checkpoint token".
fn article(kind: TokenKind) -> String {
    match kind {
        TokenKind::Ack => "an ack token".into(),
        other => format!("a {other} token"),
    }
}

impl TokenError {
    /// The snake_case problem name used in `details.problem`.
    pub fn problem(&self) -> &'static str {
        match self {
            Self::Format(e) => e.problem().map_or("unsupported_version", |p| p.as_str()),
            Self::WrongKind { .. } => "wrong_kind",
            Self::BadSignature(SignatureFailure::PayloadAltered { .. }) => "altered",
            Self::BadSignature(SignatureFailure::Unverified) => "signature_mismatch",
        }
    }

    /// The unified envelope; `field` names the tool input that held the token.
    pub fn to_envelope(&self, field: &str) -> ErrorEnvelope {
        let details = serde_json::json!({"field": field, "problem": self.problem()});
        match self {
            Self::Format(e @ TokenFormatError::InvalidFormat { .. }) => ErrorEnvelope::new(
                ErrorCode::TokenInvalidFormat,
                format!("`{field}` is not a valid WorkRail token: {e}."),
                RECOVER,
                Retry::NotRetryable,
            )
            .with_details(details),
            Self::Format(e @ TokenFormatError::UnsupportedVersion { .. }) => ErrorEnvelope::new(
                ErrorCode::TokenUnsupportedVersion,
                format!("`{field}`: {e}."),
                format!(
                    "The version part may have been changed while copying. {RECOVER} A token that really comes from another WorkRail version cannot be used here."
                ),
                Retry::NotRetryable,
            )
            .with_details(details),
            Self::WrongKind { expected, found } => ErrorEnvelope::new(
                ErrorCode::TokenInvalidFormat,
                format!(
                    "`{field}` holds {} (`{}.v1.…`) but needs {} (`{}.v1.…`).",
                    article(*found),
                    found.prefix(),
                    article(*expected),
                    expected.prefix()
                ),
                format!(
                    "Put each token in its own field: stateToken starts with `st.`, ackToken with `ack.`, checkpointToken with `chk.`. {RECOVER}"
                ),
                Retry::NotRetryable,
            )
            .with_details(serde_json::json!({
                "field": field,
                "problem": self.problem(),
                "expected": expected,
                "found": found,
            })),
            Self::BadSignature(SignatureFailure::PayloadAltered { why }) => ErrorEnvelope::new(
                ErrorCode::TokenBadSignature,
                format!(
                    "`{field}` was altered: its signature does not verify and {why}, so characters were changed, dropped, added or changed case."
                ),
                RECOVER,
                Retry::NotRetryable,
            )
            .with_details(details),
            Self::BadSignature(SignatureFailure::Unverified) => ErrorEnvelope::new(
                ErrorCode::TokenBadSignature,
                format!(
                    "`{field}`'s signature does not verify: either the token was altered (characters of its signature part changed) or it was minted by another WorkRail data directory, which signs with other keys; the two cannot be told apart."
                ),
                format!(
                    "{RECOVER} If the token comes from another WorkRail data directory, use WorkRail with that directory (WORKRAIL_DATA_DIR) or import its exported bundle here."
                ),
                Retry::NotRetryable,
            )
            .with_details(details),
        }
    }
}

/// Characters a token can start or end with (a letter of the prefix; a base64url character).
fn is_token_edge(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
}

/// Invisible characters that editors and chat clients insert (zero-width space, joiners, BOM).
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{200B}' | '\u{200C}' | '\u{200D}' | '\u{2060}' | '\u{FEFF}' | '\u{00AD}'
    )
}

/// `%XX` escapes decoded (a token never contains `%`); `None` when the result is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .ok()
        .map(|decoded| decoded.into_owned())
}

/// Drops the opening line of a Markdown code fence when it carries only an info string
/// (```` ```text ````); a token always contains dots, so a line with a dot is the token itself.
/// A line break inside a token's prefix (```` ```a ```` then `ck.v1.…`) is not an info string:
/// when the "info" and the next line together begin like a token, both are kept.
fn strip_fence_info(s: &str) -> &str {
    let Some(rest) = s.strip_prefix("```").or_else(|| s.strip_prefix("~~~")) else {
        return s;
    };
    let rest = rest.trim_start_matches(['`', '~']);
    match rest.split_once('\n') {
        Some((info, body))
            if info
                .trim()
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '+')) =>
        {
            let joined: String = rest
                .chars()
                .filter(|c| !c.is_whitespace())
                .take(8)
                .collect();
            let body_start: String = body
                .chars()
                .filter(|c| !c.is_whitespace())
                .take(8)
                .collect();
            let begins_token = |t: &str| ["st.", "ack.", "chk."].iter().any(|p| t.starts_with(p));
            if begins_token(&joined) && !begins_token(&body_start) {
                rest
            } else {
                body
            }
        }
        _ => s,
    }
}

/// A leading field label copied along with the token (`stateToken: st.v1.…`,
/// `"ackToken":"ack.v1.…"`): the names of the three token fields, case-insensitive.
fn strip_label(s: &str) -> &str {
    for label in ["stateToken", "ackToken", "checkpointToken"] {
        if let Some(head) = s.get(..label.len())
            && head.eq_ignore_ascii_case(label)
        {
            let rest = &s[label.len()..];
            if rest.starts_with(|c: char| !is_token_edge(c)) {
                return rest.trim_start_matches(|c: char| !is_token_edge(c));
            }
        }
    }
    s
}

/// Removes harmless wrapping an agent or a chat client adds around a token, keeping everything
/// that could be part of one (decisions D46, D47):
///
/// - `%XX` escapes are decoded (URL-encoding);
/// - a Markdown code fence's info line (```` ```text ````) is dropped;
/// - whitespace anywhere (line wrapping) and invisible zero-width characters are removed;
/// - a leading `stateToken:` / `ackToken:` / `checkpointToken:` label is dropped;
/// - standard-base64 characters are mapped to base64url (`+` -> `-`, `/` -> `_`) and `=`
///   padding is dropped;
/// - at both ends, every character that cannot start or end a token is stripped: quotes
///   (straight and typographic), backticks, brackets, and trailing sentence punctuation
///   (`.`, `,`, `;`, `:`, `!`, `?`), since a token ends with a base64url character.
///
/// None of these characters can occur in a token, so a valid token passes through unchanged,
/// and the signature still covers every payload byte.
pub fn normalize(raw: &str) -> String {
    let decoded = if raw.contains('%') {
        percent_decode(raw).unwrap_or_else(|| raw.to_owned())
    } else {
        raw.to_owned()
    };
    let unfenced = strip_fence_info(decoded.trim());
    let compact: String = unfenced
        .chars()
        .filter(|c| !c.is_whitespace() && !is_invisible(*c) && *c != '=')
        .map(|c| match c {
            '+' => '-',
            '/' => '_',
            c => c,
        })
        .collect();
    let trimmed = compact.trim_matches(|c: char| !is_token_edge(c));
    strip_label(trimmed)
        .trim_matches(|c: char| !is_token_edge(c))
        .to_owned()
}

/// The kind a token claims by its prefix (after [`normalize`]), without verifying anything:
/// used to tell swapped fields apart from other mistakes.
pub fn claimed_kind(raw: &str) -> Option<TokenKind> {
    normalize(raw)
        .split('.')
        .next()
        .and_then(TokenKind::from_prefix)
}

/// An abbreviated token (`st.v1.eyJ…`, `st.v1.eyJ...`): agents shorten long values.
fn shortened(raw: &str) -> Option<TokenError> {
    (raw.contains('\u{2026}') || raw.contains("...")).then(|| {
        TokenError::Format(TokenFormatError::InvalidFormat {
            problem: workrail_spec::token::FormatProblem::CutOff,
            detail: "it contains an ellipsis (`…` or `...`), so it was shortened; a token must be sent whole".into(),
        })
    })
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
        if let Some(e) = shortened(raw) {
            return Err(e);
        }
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
            // Decoding the unverified payload only sharpens the message; nothing acts on it.
            return Err(TokenError::BadSignature(match parts.payload() {
                Ok(_) => SignatureFailure::Unverified,
                Err(TokenFormatError::InvalidFormat { detail, .. }) => {
                    SignatureFailure::PayloadAltered { why: detail }
                }
                Err(e @ TokenFormatError::UnsupportedVersion { .. }) => {
                    SignatureFailure::PayloadAltered { why: e.to_string() }
                }
            }));
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
        assert_eq!(normalize("```text\nst.v1.a.b\n```"), "st.v1.a.b");
        assert_eq!(normalize("```st.v1.a.b```"), "st.v1.a.b");
        assert_eq!(normalize("stateToken: st.v1.a-b.c_d."), "st.v1.a-b.c_d");
        assert_eq!(normalize("st.v1.a+b.c/d="), "st.v1.a-b.c_d");
        assert_eq!(normalize("st%2Ev1%2Ea.b%0A"), "st.v1.a.b");
        assert_eq!(normalize("\u{201C}st.v1.a.b\u{201D},"), "st.v1.a.b");
        assert_eq!(normalize("**st.v1.a.b**"), "st.v1.a.b");
        // A percent sign that is not an escape, and text that is not a token, stay as they are.
        assert_eq!(normalize("st.v1.a%zz.b"), "st.v1.a%zz.b");
        assert_eq!(normalize("```"), "");
    }
}

//! Token payloads and the token string format (locks §1.2).
//!
//! `st.v1.<payload>.<sig>`, `ack.v1.<payload>.<sig>`, `chk.v1.<payload>.<sig>` where `<payload>`
//! is base64url (no padding) of the RFC 8785 canonical JSON of exactly the locked fields, and
//! `<sig>` is base64url (no padding) of `HMAC-SHA256(key, payloadBytes)`. Signing needs a key and
//! lives with the keyring in `impl`; everything here is pure encoding and decoding.
//!
//! Decoding is strict: the payload must be canonical JCS, so encode and decode are a bijection
//! and a token has exactly one valid spelling.

use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::closed::TokenKind;
use crate::error::ErrorCode;
use crate::ids::{AttemptId, NodeId, RunId, SessionId, WorkflowHash};
use crate::jcs::to_canonical_bytes;

/// The only token version this build mints and accepts.
pub const TOKEN_VERSION: u64 = 1;
/// Length of an HMAC-SHA256 signature in bytes.
pub const SIGNATURE_BYTES: usize = 32;

/// `stateToken` payload: a reference to a node's snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StatePayload {
    pub session_id: SessionId,
    pub run_id: RunId,
    pub node_id: NodeId,
    pub workflow_hash: WorkflowHash,
}

/// `ackToken` / `checkpointToken` payload: an attempt at a node.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AttemptPayload {
    pub session_id: SessionId,
    pub run_id: RunId,
    pub node_id: NodeId,
    pub attempt_id: AttemptId,
}

/// A decoded token payload.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TokenPayload {
    State(StatePayload),
    Ack(AttemptPayload),
    Checkpoint(AttemptPayload),
}

/// A token could not be decoded. Each variant maps to one locked `TOKEN_*` code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenFormatError {
    #[error("{detail}")]
    InvalidFormat {
        problem: FormatProblem,
        detail: String,
    },
    #[error("token version {found} is not supported; this server reads v{TOKEN_VERSION}")]
    UnsupportedVersion { found: String },
}

/// What is wrong with a malformed token, as a closed set: agents (and their error handling)
/// recover differently from a cut-off token than from a garbled one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FormatProblem {
    /// Nothing was sent.
    Empty,
    /// Parts or characters are missing at the end (or a part is empty).
    CutOff,
    /// More parts or characters than a token has: pasted text, or two tokens in one.
    ExtraText,
    /// The first part is not `st`, `ack` or `chk`.
    Prefix,
    /// The second part is not `v<digits>`.
    Version,
    /// The payload part does not decode to a locked payload.
    Payload,
    /// The signature part is not base64url.
    Signature,
}

impl FormatProblem {
    /// The snake_case name used in error `details`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Empty => "empty",
            Self::CutOff => "cut_off",
            Self::ExtraText => "extra_text",
            Self::Prefix => "prefix",
            Self::Version => "version",
            Self::Payload => "payload",
            Self::Signature => "signature",
        }
    }
}

/// The length of the `<sig>` part: 32 bytes in unpadded base64url.
pub const SIGNATURE_CHARS: usize = (SIGNATURE_BYTES * 8).div_ceil(6);

impl TokenFormatError {
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::InvalidFormat { .. } => ErrorCode::TokenInvalidFormat,
            Self::UnsupportedVersion { .. } => ErrorCode::TokenUnsupportedVersion,
        }
    }

    /// The specific problem of a malformed token (`None` for an unsupported version).
    pub fn problem(&self) -> Option<FormatProblem> {
        match self {
            Self::InvalidFormat { problem, .. } => Some(*problem),
            Self::UnsupportedVersion { .. } => None,
        }
    }

    fn new(problem: FormatProblem, detail: impl ToString) -> Self {
        Self::InvalidFormat {
            problem,
            detail: detail.to_string(),
        }
    }
}

impl TokenPayload {
    pub fn kind(&self) -> TokenKind {
        match self {
            Self::State(_) => TokenKind::State,
            Self::Ack(_) => TokenKind::Ack,
            Self::Checkpoint(_) => TokenKind::Checkpoint,
        }
    }

    pub fn session_id(&self) -> &SessionId {
        match self {
            Self::State(p) => &p.session_id,
            Self::Ack(p) | Self::Checkpoint(p) => &p.session_id,
        }
    }

    pub fn run_id(&self) -> &RunId {
        match self {
            Self::State(p) => &p.run_id,
            Self::Ack(p) | Self::Checkpoint(p) => &p.run_id,
        }
    }

    pub fn node_id(&self) -> &NodeId {
        match self {
            Self::State(p) => &p.node_id,
            Self::Ack(p) | Self::Checkpoint(p) => &p.node_id,
        }
    }

    /// The JSON object with `tokenVersion` and `tokenKind`, exactly the locked fields.
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        let mut map = match self {
            Self::State(p) => crate::artifact::to_object(p)?,
            Self::Ack(p) | Self::Checkpoint(p) => crate::artifact::to_object(p)?,
        };
        map.insert("tokenVersion".into(), TOKEN_VERSION.into());
        map.insert("tokenKind".into(), self.kind().as_str().into());
        Ok(Value::Object(map))
    }

    /// The canonical payload bytes (the HMAC input).
    pub fn canonical_bytes(&self) -> Vec<u8> {
        // Ids, digests and small integers always canonicalize.
        self.to_value()
            .ok()
            .and_then(|v| to_canonical_bytes(&v).ok())
            .unwrap_or_default()
    }

    /// `<payload>`: base64url (no padding) of the canonical bytes.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.canonical_bytes())
    }

    /// Decodes canonical payload bytes, checking version, kind and fields.
    pub fn from_canonical_bytes(
        bytes: &[u8],
        expected: TokenKind,
    ) -> Result<Self, TokenFormatError> {
        let garbled = |why: String| {
            TokenFormatError::new(
                FormatProblem::Payload,
                format!("the payload part does not decode: {why}"),
            )
        };
        let text = std::str::from_utf8(bytes)
            .map_err(|_| garbled("it decodes to bytes that are not text".into()))?;
        let value: Value = crate::jcs::parse_strict(text)
            .map_err(|_| garbled("it decodes to text that is not a token payload".into()))?;
        let canonical = to_canonical_bytes(&value)
            .map_err(|_| garbled("it decodes to a payload no WorkRail mints".into()))?;
        if canonical != bytes {
            return Err(garbled("it is not in RFC 8785 canonical form".into()));
        }
        let Value::Object(mut map) = value else {
            return Err(garbled("it is not a JSON object".into()));
        };
        match map.remove("tokenVersion") {
            Some(Value::Number(n)) if n.as_u64() == Some(TOKEN_VERSION) => {}
            Some(other) => {
                return Err(TokenFormatError::UnsupportedVersion {
                    found: other.to_string(),
                });
            }
            None => return Err(garbled("it lacks tokenVersion".into())),
        }
        let kind = match map.remove("tokenKind") {
            Some(Value::String(s)) => {
                TokenKind::parse(&s).ok_or_else(|| garbled(format!("unknown tokenKind {s:?}")))?
            }
            _ => return Err(garbled("it lacks tokenKind".into())),
        };
        if kind != expected {
            return Err(garbled(format!(
                "it is a {kind} payload but the prefix says {expected}"
            )));
        }
        let rest = Value::Object(map);
        let field_error = |e: serde_json::Error| garbled(e.to_string());
        Ok(match kind {
            TokenKind::State => Self::State(serde_json::from_value(rest).map_err(field_error)?),
            TokenKind::Ack => Self::Ack(serde_json::from_value(rest).map_err(field_error)?),
            TokenKind::Checkpoint => {
                Self::Checkpoint(serde_json::from_value(rest).map_err(field_error)?)
            }
        })
    }
}

/// The four parts of a token string, decoded but not yet verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenParts {
    pub kind: TokenKind,
    /// The decoded canonical payload bytes (what the signature covers).
    pub payload_bytes: Vec<u8>,
    pub signature: [u8; SIGNATURE_BYTES],
}

impl TokenParts {
    /// Splits and decodes `<prefix>.v<version>.<payload>.<sig>`. The version is checked before
    /// anything else is interpreted. Errors name the specific problem (cut off, extra text,
    /// changed case, garbled part) because agents copying long tokens make each of these.
    pub fn parse(token: &str) -> Result<Self, TokenFormatError> {
        use FormatProblem as P;
        if token.is_empty() {
            return Err(TokenFormatError::new(P::Empty, "the value is empty"));
        }
        let parts: Vec<&str> = token.split('.').collect();
        let [prefix, version, payload, sig] = parts.as_slice() else {
            return Err(if parts.len() < 4 {
                TokenFormatError::new(
                    P::CutOff,
                    format!(
                        "it has {} of the 4 dot-separated parts of `<st|ack|chk>.v1.<payload>.<signature>`, so it looks cut off",
                        parts.len()
                    ),
                )
            } else {
                TokenFormatError::new(
                    P::ExtraText,
                    format!(
                        "it has {} dot-separated parts where a token has 4 (`<st|ack|chk>.v1.<payload>.<signature>`): it holds extra text or more than one token",
                        parts.len()
                    ),
                )
            });
        };
        let Some(kind) = TokenKind::from_prefix(prefix) else {
            return Err(prefix_error(prefix));
        };
        let Some(number) = version.strip_prefix('v') else {
            return Err(version_error(version));
        };
        if number != TOKEN_VERSION.to_string() {
            if !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) {
                return Err(TokenFormatError::UnsupportedVersion {
                    found: (*version).to_owned(),
                });
            }
            return Err(version_error(version));
        }
        if payload.is_empty() {
            return Err(TokenFormatError::new(
                P::CutOff,
                "the payload part is empty, so the token looks cut off",
            ));
        }
        let payload_bytes = URL_SAFE_NO_PAD.decode(payload).map_err(|e| {
            TokenFormatError::new(
                P::Payload,
                format!(
                    "the payload part does not decode ({}): characters were changed, dropped or added, or their case changed",
                    base64_problem(&e)
                ),
            )
        })?;
        let sig_chars = sig.chars().count();
        if sig_chars < SIGNATURE_CHARS {
            return Err(TokenFormatError::new(
                P::CutOff,
                format!(
                    "the signature part is {sig_chars} characters where a signature is exactly {SIGNATURE_CHARS}, so the token looks cut off (or characters were dropped)"
                ),
            ));
        }
        if sig_chars > SIGNATURE_CHARS {
            return Err(TokenFormatError::new(
                P::ExtraText,
                format!(
                    "the signature part is {sig_chars} characters where a signature is exactly {SIGNATURE_CHARS}: characters were added or duplicated, or text follows the token"
                ),
            ));
        }
        let decoded = URL_SAFE_NO_PAD.decode(sig).map_err(|e| {
            TokenFormatError::new(
                P::Signature,
                format!(
                    "the signature part does not decode ({}): characters were changed or their case changed",
                    base64_problem(&e)
                ),
            )
        })?;
        let signature: [u8; SIGNATURE_BYTES] = decoded.try_into().map_err(|s: Vec<u8>| {
            TokenFormatError::new(
                P::Signature,
                format!(
                    "the signature part decodes to {} bytes, expected {SIGNATURE_BYTES}",
                    s.len()
                ),
            )
        })?;
        Ok(Self {
            kind,
            payload_bytes,
            signature,
        })
    }

    /// Decodes the payload (call only after the signature verified).
    pub fn payload(&self) -> Result<TokenPayload, TokenFormatError> {
        TokenPayload::from_canonical_bytes(&self.payload_bytes, self.kind)
    }
}

/// An unknown prefix, with the likely cause when one is recognisable.
fn prefix_error(prefix: &str) -> TokenFormatError {
    let known = ["st", "ack", "chk"];
    let lower = prefix.to_ascii_lowercase();
    let cause = if known.contains(&lower.as_str()) {
        format!(" (tokens are case-sensitive: it should be `{lower}`)")
    } else if known.iter().any(|k| prefix.ends_with(k)) {
        " (text was pasted before the token)".to_owned()
    } else {
        String::new()
    };
    let problem = if cause.starts_with(" (text") {
        FormatProblem::ExtraText
    } else {
        FormatProblem::Prefix
    };
    TokenFormatError::new(
        problem,
        format!("it starts with {prefix:?} where a token starts with `st`, `ack` or `chk`{cause}"),
    )
}

fn version_error(version: &str) -> TokenFormatError {
    let cause = if version.eq_ignore_ascii_case("v1") {
        " (tokens are case-sensitive)"
    } else {
        ""
    };
    TokenFormatError::new(
        FormatProblem::Version,
        format!("its version part is {version:?} where it must be `v1`{cause}"),
    )
}

/// Assembles a token string from a payload and its signature.
pub fn format_token(payload: &TokenPayload, signature: &[u8; SIGNATURE_BYTES]) -> String {
    format!(
        "{}.v{TOKEN_VERSION}.{}.{}",
        payload.kind().prefix(),
        payload.encode(),
        URL_SAFE_NO_PAD.encode(signature)
    )
}

impl JsonSchema for TokenPayload {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("TokenPayload")
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let state = crate::manifest::tagged_object_schema(
            StatePayload::json_schema(generator),
            "tokenVersion",
            TOKEN_VERSION,
            Some(("tokenKind", "state")),
        );
        let ack = crate::manifest::tagged_object_schema(
            AttemptPayload::json_schema(generator),
            "tokenVersion",
            TOKEN_VERSION,
            Some(("tokenKind", "ack")),
        );
        let checkpoint = crate::manifest::tagged_object_schema(
            AttemptPayload::json_schema(generator),
            "tokenVersion",
            TOKEN_VERSION,
            Some(("tokenKind", "checkpoint")),
        );
        schemars::json_schema!({ "oneOf": [state, ack, checkpoint] })
    }
}

/// A base64 decoding problem in words an agent can act on (never the decoder's internals).
fn base64_problem(e: &base64::DecodeError) -> String {
    use base64::DecodeError as D;
    let shown = |b: u8| {
        if b.is_ascii_graphic() {
            format!("`{}`", b as char)
        } else {
            "an invisible character".to_owned()
        }
    };
    match *e {
        D::InvalidByte(_, b'=') | D::InvalidPadding => {
            "it has `=` padding, which tokens never contain".to_owned()
        }
        D::InvalidByte(_, b) => format!("it contains {}, which tokens never contain", shown(b)),
        D::InvalidLastSymbol { symbol, .. } => {
            format!("its last character {} cannot end it", shown(symbol))
        }
        D::InvalidLength(_) => "its length is impossible for a token".to_owned(),
    }
}

//! Identifier newtypes with validating constructors.
//!
//! Every identifier that crosses a durable or wire boundary has its own type so that a `RunId` can
//! never be passed where a `NodeId` is expected (locks §1 "Type-safety baseline"). Constructors
//! validate; there is no way to build an invalid value, and deserialization goes through the same
//! validation.
//!
//! **Decision (dedupeKey vs id casing).** The lock's examples show ULID-style uppercase ids
//! (`sess_01JH...`), but `dedupeKey` only admits `[a-z0-9_:>-]` and is built from ids. WorkRail-rs
//! therefore mints and accepts only lowercase ids: `<prefix>_<body>` where `body` is 1 to
//! [`ID_BODY_MAX_LEN`] characters of `[a-z0-9]`. Minted bodies are 16 characters of lowercase
//! Crockford base32 (80 bits), which keeps tokens short. See `spec/LOCKS.md` "Decisions".

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Longest accepted id body (after `<prefix>_`). Bounded so that every dedupeKey recipe stays
/// within the locked 256 characters even for `edge_created` keys, which embed four ids.
pub const ID_BODY_MAX_LEN: usize = 32;

/// Number of body characters in a minted id (16 base32 characters = 80 bits).
pub const MINTED_ID_BODY_LEN: usize = 16;

/// Lowercase Crockford base32 alphabet (no `i`, `l`, `o`, `u`), used to mint id bodies.
const BASE32_ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// Why a string is not a valid identifier. Errors are data: they say what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("{type_name} must start with `{prefix}_`, got {value:?}")]
    MissingPrefix {
        type_name: &'static str,
        prefix: &'static str,
        value: String,
    },
    #[error(
        "{type_name} body must be 1 to {max} characters of [a-z0-9] after `{prefix}_`, got {value:?}"
    )]
    InvalidBody {
        type_name: &'static str,
        prefix: &'static str,
        max: usize,
        value: String,
    },
    #[error("{type_name} must match {pattern} (1 to {max} characters), got {value:?}")]
    InvalidPattern {
        type_name: &'static str,
        pattern: &'static str,
        max: usize,
        value: String,
    },
    #[error(
        "workflow id {value:?} is invalid: use `namespace.name` with exactly one dot, each segment matching [a-z][a-z0-9_-]*, e.g. `project.bug_investigation`"
    )]
    InvalidWorkflowId { value: String },
    #[error("digest {value:?} must be `sha256:` followed by 64 lowercase hex characters")]
    InvalidDigest { value: String },
}

/// Encodes raw entropy as a lowercase Crockford base32 string of `len` characters.
fn base32_body(entropy: &[u8], len: usize) -> String {
    let mut out = String::with_capacity(len);
    let mut acc: u32 = 0;
    let mut bits = 0u32;
    let mut bytes = entropy.iter();
    while out.len() < len {
        if bits < 5 {
            // Running out of entropy pads with zero bits; callers pass enough bytes.
            acc = (acc << 8) | u32::from(*bytes.next().unwrap_or(&0));
            bits += 8;
        }
        let index = (acc >> (bits - 5)) & 0x1f;
        bits -= 5;
        out.push(char::from(BASE32_ALPHABET[index as usize]));
    }
    out
}

/// The 80 bits a minted body of 16 base32 characters encodes, so that
/// `base32_body(&minted_bits(body)?, 16) == body`; `None` for any other body (a different length, or
/// a letter outside the alphabet, which a valid id may carry but a minted one never does).
fn minted_bits(body: &str) -> Option<[u8; 10]> {
    if body.len() != MINTED_ID_BODY_LEN {
        return None;
    }
    let mut bits: u128 = 0;
    for b in body.bytes() {
        let value = BASE32_ALPHABET.iter().position(|&a| a == b)?;
        bits = (bits << 5) | value as u128;
    }
    let mut out = [0u8; 10];
    out.copy_from_slice(&bits.to_be_bytes()[6..]);
    Some(out)
}

fn valid_body(body: &str) -> bool {
    !body.is_empty()
        && body.len() <= ID_BODY_MAX_LEN
        && body
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

macro_rules! prefixed_id {
    ($(#[$meta:meta])* $name:ident, $prefix:literal) => {
        $(#[$meta])*
        // Shared text: a session's events and projections clone the same ids many times over,
        // and a clone only counts a reference.
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        impl $name {
            /// The prefix every value of this id carries (before the `_`).
            pub const PREFIX: &'static str = $prefix;

            /// Validates `value` as this id: `<prefix>_` then 1 to 32 characters of `[a-z0-9]`.
            pub fn parse(value: &str) -> Result<Self, IdError> {
                let Some(body) = value
                    .strip_prefix($prefix)
                    .and_then(|rest| rest.strip_prefix('_'))
                else {
                    return Err(IdError::MissingPrefix {
                        type_name: stringify!($name),
                        prefix: $prefix,
                        value: value.to_owned(),
                    });
                };
                if !valid_body(body) {
                    return Err(IdError::InvalidBody {
                        type_name: stringify!($name),
                        prefix: $prefix,
                        max: ID_BODY_MAX_LEN,
                        value: value.to_owned(),
                    });
                }
                Ok(Self(Arc::from(value)))
            }

            /// Mints an id from caller-supplied entropy (at least 10 bytes are used). The spec
            /// crate has no randomness of its own: entropy comes in as an argument.
            pub fn from_entropy(entropy: &[u8; 10]) -> Self {
                Self(Arc::from(format!("{}_{}", $prefix, base32_body(entropy, MINTED_ID_BODY_LEN))))
            }

            /// Derives an id deterministically from a digest (used for ids that must be stable
            /// under retries, e.g. ids derived from an attempt identity). The body is the first
            /// 80 bits of the digest, as long as a minted body (decision D35): derived ids land in
            /// tokens, and every character of a token is one an agent can mangle.
            pub fn from_digest(digest: &Sha256Digest) -> Self {
                Self(Arc::from(format!(
                    "{}_{}",
                    $prefix,
                    base32_body(&digest.bytes(), MINTED_ID_BODY_LEN)
                )))
            }

            /// The 10 bytes this id was minted from ([`Self::from_entropy`] gives it back),
            /// when its body is one a mint writes: 16 characters of the base32 alphabet. A
            /// structure holding many ids can keep these bytes in place of the text.
            pub fn minted_bits(&self) -> Option<[u8; 10]> {
                minted_bits(&self.0[$prefix.len() + 1..])
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = Cow::<'de, str>::deserialize(d)?;
                Self::parse(&raw).map_err(serde::de::Error::custom)
            }
        }

        impl JsonSchema for $name {
            fn schema_name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($name))
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "type": "string",
                    "pattern": concat!("^", $prefix, "_[a-z0-9]{1,32}$"),
                })
            }
        }
    };
}

prefixed_id!(
    /// A session: one workstream holding zero or more runs.
    SessionId,
    "sess"
);
prefixed_id!(
    /// A run: one execution of one pinned workflow, a DAG of nodes.
    RunId,
    "run"
);
prefixed_id!(
    /// A node of a run DAG (a step or checkpoint snapshot).
    NodeId,
    "node"
);
prefixed_id!(
    /// A server-minted event id. Never an input to a dedupeKey (locks §1, hard rule).
    EventId,
    "evt"
);
prefixed_id!(
    /// A durable output, derived from the attempt identity when produced by an ack.
    OutputId,
    "out"
);
prefixed_id!(
    /// A gap record.
    GapId,
    "gap"
);
prefixed_id!(
    /// An ack or checkpoint attempt: the idempotency key of `advance_recorded` and checkpoints.
    AttemptId,
    "att"
);
prefixed_id!(
    /// A `preferences_changed` record.
    ChangeId,
    "prefchg"
);
prefixed_id!(
    /// A `capability_observed` record.
    CapObsId,
    "capobs"
);
prefixed_id!(
    /// A `divergence_recorded` record.
    DivergenceId,
    "div"
);
prefixed_id!(
    /// A `decision_trace_appended` record.
    TraceId,
    "trace"
);
prefixed_id!(
    /// A `context_set` record (run-scoped durable context, locks §18.2 DECISION).
    ContextId,
    "ctx"
);
prefixed_id!(
    /// An export bundle.
    BundleId,
    "bundle"
);
prefixed_id!(
    /// A running `workrail mcp` process, named by its record under `servers/` (decision D85).
    ServerId,
    "srv"
);

/// Equal values held once: [`Shared::share`] points a value at the first equal one it was
/// given, so the ids a parsed log repeats in every event share one text, as a live log's do.
#[derive(Debug, Clone)]
pub struct Shared<T>(std::collections::HashSet<T>);

impl<T> Default for Shared<T> {
    fn default() -> Self {
        Self(std::collections::HashSet::new())
    }
}

impl<T: Clone + Eq + std::hash::Hash> Shared<T> {
    pub fn share(&mut self, value: &mut T) {
        if !self.share_held(value) {
            self.0.insert(value.clone());
        }
    }

    /// Points `value` at the equal value held, if one is; false (and nothing held) otherwise.
    pub fn share_held(&mut self, value: &mut T) -> bool {
        match self.0.get(value) {
            Some(held) => {
                *value = held.clone();
                true
            }
            None => false,
        }
    }
}

macro_rules! delimiter_safe_id {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        // Shared text: a session's events and projections clone the same ids many times over,
        // and a clone only counts a reference.
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        impl $name {
            /// Longest accepted value. Bounded so StepInstanceKeys and dedupeKeys stay short.
            pub const MAX_LEN: usize = 64;

            /// Validates `value` against `[a-z0-9_-]+` (so `@`, `/` and `:` never occur).
            pub fn parse(value: &str) -> Result<Self, IdError> {
                if is_delimiter_safe(value) && value.len() <= Self::MAX_LEN {
                    Ok(Self(Arc::from(value)))
                } else {
                    Err(IdError::InvalidPattern {
                        type_name: stringify!($name),
                        pattern: "[a-z0-9_-]+",
                        max: Self::MAX_LEN,
                        value: value.to_owned(),
                    })
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let raw = Cow::<'de, str>::deserialize(d)?;
                Self::parse(&raw).map_err(serde::de::Error::custom)
            }
        }

        impl JsonSchema for $name {
            fn schema_name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($name))
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "type": "string",
                    "pattern": "^[a-z0-9_-]+$",
                    "maxLength": 64,
                })
            }
        }
    };
}

delimiter_safe_id!(
    /// A workflow step id (`[a-z0-9_-]+`, authoring §"Identifier constraints").
    StepId
);
delimiter_safe_id!(
    /// A loop id (`[a-z0-9_-]+`), unique within a compiled workflow.
    LoopId
);
delimiter_safe_id!(
    /// A condition id (`[a-z0-9_-]+`).
    ConditionId
);
delimiter_safe_id!(
    /// A user-supplied context key referenced by a blocker pointer (`[a-z0-9_-]+`).
    ContextKey
);

/// True when `value` is non-empty and only uses `[a-z0-9_-]`.
pub fn is_delimiter_safe(value: &str) -> bool {
    !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// The deterministic auto-fix for a non-delimiter-safe id: lowercase, then replace every
/// character outside `[a-z0-9_-]` with `_` (authoring "Identifier constraints"). An empty input
/// becomes `_`.
pub fn suggest_delimiter_safe(value: &str) -> String {
    let fixed: String = value
        .chars()
        .flat_map(char::to_lowercase)
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if fixed.is_empty() {
        "_".to_owned()
    } else {
        fixed
    }
}

/// Whether a workflow id is namespaced (`ns.name`) or a legacy, dot-free id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum IdStatus {
    Namespaced,
    Legacy,
}

/// A workflow id: `namespace.name` (exactly one dot; segments `[a-z][a-z0-9_-]*`), or a legacy
/// dot-free id that stays runnable for backward compatibility (locks §7).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkflowId(String);

impl WorkflowId {
    /// Longest accepted workflow id.
    pub const MAX_LEN: usize = 128;

    pub fn parse(value: &str) -> Result<Self, IdError> {
        let invalid = || IdError::InvalidWorkflowId {
            value: value.to_owned(),
        };
        if value.is_empty() || value.len() > Self::MAX_LEN {
            return Err(invalid());
        }
        match value.split_once('.') {
            Some((ns, name)) => {
                if is_namespace_segment(ns) && is_namespace_segment(name) {
                    Ok(Self(value.to_owned()))
                } else {
                    Err(invalid())
                }
            }
            None if is_legacy_id(value) => Ok(Self(value.to_owned())),
            None => Err(invalid()),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn id_status(&self) -> IdStatus {
        if self.0.contains('.') {
            IdStatus::Namespaced
        } else {
            IdStatus::Legacy
        }
    }

    /// The namespace (`wr` for `wr.bug_investigation`), or `None` for a legacy id.
    pub fn namespace(&self) -> Option<&str> {
        self.0.split_once('.').map(|(ns, _)| ns)
    }

    /// The name segment, or the whole id for a legacy id.
    pub fn name(&self) -> &str {
        self.0.split_once('.').map_or(&self.0, |(_, name)| name)
    }

    /// True for ids in the reserved `wr.*` namespace (bundled/core workflows only).
    pub fn is_reserved(&self) -> bool {
        self.namespace() == Some(RESERVED_NAMESPACE)
    }
}

/// The namespace reserved for bundled/core workflows (locks §7).
pub const RESERVED_NAMESPACE: &str = "wr";

fn is_namespace_segment(segment: &str) -> bool {
    let mut bytes = segment.bytes();
    matches!(bytes.next(), Some(b'a'..=b'z'))
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Legacy ids (no dot) as found in existing installs: letters, digits, `_` and `-`.
fn is_legacy_id(value: &str) -> bool {
    value
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphanumeric())
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

impl fmt::Display for WorkflowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for WorkflowId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WorkflowId({:?})", self.0)
    }
}

impl FromStr for WorkflowId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for WorkflowId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for WorkflowId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Cow::<'de, str>::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for WorkflowId {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("WorkflowId")
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "maxLength": 128,
            "pattern": "^([a-z][a-z0-9_-]*\\.[a-z][a-z0-9_-]*|[A-Za-z0-9][A-Za-z0-9_-]*)$",
        })
    }
}

/// A SHA-256 digest in the locked string form `sha256:<64 lowercase hex>` (locks §11).
// Shared text, as for the ids: a snapshot ref repeats in its event, its pin and the projection.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sha256Digest(Arc<str>);

impl Sha256Digest {
    pub const PREFIX: &'static str = "sha256:";

    pub fn parse(value: &str) -> Result<Self, IdError> {
        match value.strip_prefix(Self::PREFIX) {
            Some(hex)
                if hex.len() == 64
                    && hex
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
            {
                Ok(Self(Arc::from(value)))
            }
            _ => Err(IdError::InvalidDigest {
                value: value.to_owned(),
            }),
        }
    }

    /// Builds the string form from raw digest bytes.
    pub fn from_bytes(bytes: &[u8; 32]) -> Self {
        let mut s = String::with_capacity(71);
        s.push_str(Self::PREFIX);
        for b in bytes {
            s.push(char::from(HEX[usize::from(b >> 4)]));
            s.push(char::from(HEX[usize::from(b & 0xf)]));
        }
        Self(Arc::from(s))
    }

    /// The 64 hex characters after `sha256:`.
    pub fn hex(&self) -> &str {
        &self.0[Self::PREFIX.len()..]
    }

    /// The raw 32 digest bytes.
    pub fn bytes(&self) -> [u8; 32] {
        let mut out = [0u8; 32];
        let hex = self.hex().as_bytes();
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = (hex_value(hex[2 * i]) << 4) | hex_value(hex[2 * i + 1]);
        }
        out
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn hex_value(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        // `parse` admits only lowercase hex, so this arm covers every other valid byte.
        _ => c - b'a' + 10,
    }
}

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha256Digest({:?})", self.0)
    }
}

impl Serialize for Sha256Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Sha256Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Cow::<'de, str>::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Sha256Digest {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("Sha256Digest")
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^sha256:[0-9a-f]{64}$",
        })
    }
}

macro_rules! digest_newtype {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Sha256Digest);

        impl $name {
            pub fn parse(value: &str) -> Result<Self, IdError> {
                Sha256Digest::parse(value).map(Self)
            }
            pub fn from_digest(digest: Sha256Digest) -> Self {
                Self(digest)
            }
            pub fn digest(&self) -> &Sha256Digest {
                &self.0
            }
            pub fn as_str(&self) -> &str {
                self.0.as_str()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.0.as_str())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0.as_str())
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s)
            }
        }

        impl JsonSchema for $name {
            fn schema_name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($name))
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "type": "string",
                    "pattern": "^sha256:[0-9a-f]{64}$",
                })
            }
        }
    };
}

digest_newtype!(
    /// `sha256(JCS(compiledWorkflowSnapshotV1))`: the execution authority of a run (locks §5).
    WorkflowHash
);
digest_newtype!(
    /// A content address in the snapshot CAS: `sha256(JCS(executionSnapshotFile))`.
    SnapshotRef
);

macro_rules! index_newtype {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
            JsonSchema,
        )]
        // Deserialization goes through the same bound as `new`, so no artifact can carry an
        // index JCS would change.
        #[serde(try_from = "u64", into = "u64")]
        pub struct $name(u64);

        impl TryFrom<u64> for $name {
            type Error = String;
            fn try_from(value: u64) -> Result<Self, String> {
                Self::new(value).ok_or_else(|| {
                    format!(
                        "{} {value} exceeds 2^53-1, the largest integer RFC 8785 carries exactly",
                        stringify!($name)
                    )
                })
            }
        }

        impl From<$name> for u64 {
            fn from(index: $name) -> u64 {
                index.0
            }
        }

        impl $name {
            /// Indices are 0-based (locks §1 "EventIndex origin").
            pub const ZERO: Self = Self(0);

            /// Largest index that survives JCS, which writes numbers as IEEE doubles.
            pub const MAX: u64 = (1 << 53) - 1;

            pub fn new(value: u64) -> Option<Self> {
                (value <= Self::MAX).then_some(Self(value))
            }

            pub fn get(self) -> u64 {
                self.0
            }

            /// The next index, or `None` past [`Self::MAX`].
            pub fn next(self) -> Option<Self> {
                Self::new(self.0 + 1)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

/// The largest integer a JCS number (an IEEE double) carries exactly: every `u64` in a durable
/// artifact must stay at or below it, or its canonical form would change its value.
pub const MAX_JSON_SAFE_INTEGER: u64 = (1 << 53) - 1;

index_newtype!(
    /// The authoritative per-session ordering of domain events (0-based).
    EventIndex
);
index_newtype!(
    /// The authoritative per-session ordering of manifest records (0-based).
    ManifestIndex
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_ids_parse_back_and_are_lowercase() {
        let id = SessionId::from_entropy(&[0xff; 10]);
        assert_eq!(id.as_str(), "sess_zzzzzzzzzzzzzzzz");
        assert_eq!(SessionId::parse(id.as_str()), Ok(id));
        let zero = NodeId::from_entropy(&[0; 10]);
        assert_eq!(zero.as_str(), "node_0000000000000000");
    }

    /// decision: D232
    #[test]
    fn minted_bits_give_back_the_id_they_were_minted_from() {
        for entropy in [[0u8; 10], [0xff; 10], *b"0123456789", [0x5a; 10]] {
            let id = EventId::from_entropy(&entropy);
            assert_eq!(id.minted_bits(), Some(entropy), "{id}");
            assert_eq!(EventId::from_entropy(&id.minted_bits().unwrap()), id);
        }
        let derived = NodeId::from_digest(&Sha256Digest::from_bytes(&[0x3c; 32]));
        assert_eq!(
            NodeId::from_entropy(&derived.minted_bits().unwrap()),
            derived
        );
        // Valid ids a mint never writes keep their text.
        for text in [
            "evt_abc",
            "evt_0000000000000000i",
            "evt_000000000000000i",
            "evt_000000000000000u",
        ] {
            let id = EventId::parse(text).unwrap();
            assert_eq!(id.minted_bits(), None, "{text}");
        }
    }

    proptest::proptest! {
        /// decision: D232
        #[test]
        fn minted_bits_round_trip_every_entropy(entropy in proptest::array::uniform10(proptest::num::u8::ANY)) {
            let id = EventId::from_entropy(&entropy);
            proptest::prop_assert_eq!(id.minted_bits(), Some(entropy));
        }
    }

    #[test]
    fn prefix_mismatch_is_rejected_with_the_expected_prefix() {
        let err = RunId::parse("node_abc").unwrap_err();
        assert!(err.to_string().contains("must start with `run_`"), "{err}");
        assert!(RunId::parse("run_").is_err());
        assert!(RunId::parse("run_ABC").is_err());
        assert!(RunId::parse(&format!("run_{}", "a".repeat(33))).is_err());
        assert!(RunId::parse(&format!("run_{}", "a".repeat(32))).is_ok());
    }

    #[test]
    fn workflow_ids_follow_the_namespace_rules() {
        let id = WorkflowId::parse("wr.bug_investigation").unwrap();
        assert_eq!(id.id_status(), IdStatus::Namespaced);
        assert!(id.is_reserved());
        assert_eq!(id.name(), "bug_investigation");
        let legacy = WorkflowId::parse("mr-review-workflow").unwrap();
        assert_eq!(legacy.id_status(), IdStatus::Legacy);
        assert_eq!(legacy.namespace(), None);
        for bad in ["a.b.c", "A.b", "a.", ".a", "1a.b", "a.b c", "", "-x"] {
            assert!(WorkflowId::parse(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn digest_roundtrips_bytes() {
        let bytes: [u8; 32] = std::array::from_fn(|i| i as u8 * 7);
        let d = Sha256Digest::from_bytes(&bytes);
        assert_eq!(d.bytes(), bytes);
        assert_eq!(Sha256Digest::parse(d.as_str()), Ok(d));
        assert!(Sha256Digest::parse("sha256:ABCDEF").is_err());
    }

    #[test]
    fn auto_fix_makes_ids_delimiter_safe() {
        assert_eq!(suggest_delimiter_safe("Phase 1: Triage"), "phase_1__triage");
        assert!(is_delimiter_safe(&suggest_delimiter_safe("a@b/c::d")));
        assert!(StepId::parse("outer@0").is_err());
    }
}

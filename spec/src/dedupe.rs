//! `dedupeKey`: the idempotency handle every session event carries (locks §1 "Idempotency via
//! dedupeKey").
//!
//! Pattern `[a-z0-9_:>-]+`, at most 256 characters, recipe `<kind>:<parts joined by ":">`, built
//! only from stable identifiers (never timestamps, never `eventId`). The per-kind recipes are in
//! [`crate::event::EventData::dedupe_key`].

use std::borrow::Cow;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::budget::DEDUPE_KEY_MAX_LEN;

/// A validated dedupeKey.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DedupeKey(String);

/// Why a string is not a dedupeKey.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "dedupeKey {value:?} must be 1 to {DEDUPE_KEY_MAX_LEN} characters of [a-z0-9_:>-] (lowercase ids, no spaces)"
)]
pub struct DedupeKeyError {
    pub value: String,
}

/// True for the characters the locked pattern admits.
fn allowed(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b':' | b'>' | b'-')
}

impl DedupeKey {
    pub fn parse(value: &str) -> Result<Self, DedupeKeyError> {
        if !value.is_empty() && value.len() <= DEDUPE_KEY_MAX_LEN && value.bytes().all(allowed) {
            Ok(Self(value.to_owned()))
        } else {
            Err(DedupeKeyError {
                value: value.to_owned(),
            })
        }
    }

    /// A key built by a recipe from parts already checked to give a valid key (an event's
    /// fields, validated when the event was built).
    pub(crate) fn trusted(value: String) -> Self {
        Self(value)
    }

    /// Builds `<kind>:<part>:<part>...` and validates the result.
    pub fn from_recipe(kind: &str, parts: &[&str]) -> Result<Self, DedupeKeyError> {
        let mut key = String::from(kind);
        for part in parts {
            key.push(':');
            key.push_str(part);
        }
        Self::parse(&key)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DedupeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for DedupeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DedupeKey({:?})", self.0)
    }
}

impl Serialize for DedupeKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for DedupeKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Cow::<'de, str>::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for DedupeKey {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("DedupeKey")
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^[a-z0-9_:>-]+$",
            "minLength": 1,
            "maxLength": DEDUPE_KEY_MAX_LEN,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_and_length() {
        assert!(DedupeKey::parse("edge_created:sess_a:run_b:node_c->node_d:acked_step").is_ok());
        for bad in ["", "Upper", "has space", "a/b", "a.b", "é"] {
            assert!(DedupeKey::parse(bad).is_err(), "{bad:?}");
        }
        assert!(DedupeKey::parse(&"a".repeat(256)).is_ok());
        assert!(DedupeKey::parse(&"a".repeat(257)).is_err());
    }
}

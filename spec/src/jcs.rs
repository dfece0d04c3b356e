//! RFC 8785 JSON Canonicalization Scheme and `sha256:<hex>` digests (locks §11).
//!
//! One canonical form serves every hash in WorkRail: `workflowHash`, snapshot refs, bundle
//! integrity entries, context budgets and token payloads. Canonicalization is delegated to
//! `serde_jcs`, which sorts object keys by UTF-16 code units and writes numbers the ECMAScript way;
//! the golden vectors in `fixtures/vectors/jcs.json` pin that behaviour.

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::ids::Sha256Digest;

/// A value could not be canonicalized (e.g. a map with non-string keys).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("value cannot be written as RFC 8785 canonical JSON: {detail}")]
pub struct JcsError {
    pub detail: String,
}

/// The RFC 8785 canonical JSON text of `value`.
pub fn to_canonical_string<T: Serialize + ?Sized>(value: &T) -> Result<String, JcsError> {
    serde_jcs::to_string(value).map_err(|e| JcsError {
        detail: e.to_string(),
    })
}

/// The RFC 8785 canonical UTF-8 bytes of `value`.
pub fn to_canonical_bytes<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, JcsError> {
    to_canonical_string(value).map(String::into_bytes)
}

/// Canonicalizes JSON text: parse strictly (I-JSON: no duplicate keys), then write in RFC 8785
/// form.
pub fn canonicalize_json_text(text: &str) -> Result<String, JcsError> {
    let value = parse_strict(text).map_err(|e| JcsError {
        detail: e.to_string(),
    })?;
    to_canonical_string(&value)
}

/// Parses JSON text into a value, rejecting duplicate object keys (RFC 8785 §3.1 requires
/// I-JSON input; a silently dropped duplicate would let two texts with different meanings
/// share one canonical form).
pub fn parse_strict(text: &str) -> Result<serde_json::Value, serde_json::Error> {
    let StrictValue(value) = serde_json::from_str(text)?;
    Ok(value)
}

/// A `serde_json::Value` whose deserialization fails on duplicate keys.
struct StrictValue(serde_json::Value);

impl<'de> serde::Deserialize<'de> for StrictValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(StrictValue)
    }
}

struct StrictVisitor;

impl<'de> serde::de::Visitor<'de> for StrictVisitor {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Self::Value, E> {
        serde_json::Number::from_f64(v)
            .map(serde_json::Value::Number)
            .ok_or_else(|| E::custom("non-finite number"))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(v.into())
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(StrictValue(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(serde_json::Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let StrictValue(value) = map.next_value()?;
            if object.contains_key(&key) {
                return Err(serde::de::Error::custom(format!(
                    "duplicate object key {key:?}"
                )));
            }
            object.insert(key, value);
        }
        Ok(serde_json::Value::Object(object))
    }
}

/// SHA-256 of raw bytes in the locked `sha256:<hex>` form.
pub fn sha256(bytes: &[u8]) -> Sha256Digest {
    let digest = Sha256::digest(bytes);
    let mut raw = [0u8; 32];
    raw.copy_from_slice(digest.as_slice());
    Sha256Digest::from_bytes(&raw)
}

/// `sha256(JCS(value))`, with the canonical byte count (used by bundle integrity entries).
pub fn jcs_digest<T: Serialize + ?Sized>(value: &T) -> Result<(Sha256Digest, usize), JcsError> {
    let bytes = to_canonical_bytes(value)?;
    Ok((sha256(&bytes), bytes.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_empty_input_is_the_known_digest() {
        assert_eq!(
            sha256(b"").as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn duplicate_keys_are_rejected() {
        assert!(canonicalize_json_text(r#"{"a":1,"a":2}"#).is_err());
        assert!(canonicalize_json_text(r#"{"a":1,"\u0061":2}"#).is_err());
        assert!(canonicalize_json_text(r#"[{"a":1},{"a":2}]"#).is_ok());
    }

    #[test]
    fn rfc8785_number_example() {
        let out = canonicalize_json_text(
            "[333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001]",
        )
        .unwrap();
        assert_eq!(out, "[333333333.3333333,1e+30,4.5,0.002,1e-27]");
    }
}

//! The request `context`: JSON-only external inputs under a byte budget, persisted as run-scoped
//! `context_set` with a shallow merge (locks §16.3.1 and the §18.2 DECISION).
//!
//! Merge semantics (locked): shallow; a `null` value deletes its key (tombstone); arrays and
//! objects replace, never merge; the reserved keys `__proto__`, `constructor` and `prototype`
//! are rejected. (`undefined` does not exist in JSON, so "undefined is ignored" needs no code.)

use serde_json::{Map, Value};

use crate::budget::CONTEXT_MAX_BYTES;
use crate::jcs::{JcsError, to_canonical_bytes};

/// Keys a context object may never carry (prototype-pollution names).
pub const RESERVED_CONTEXT_KEYS: [&str; 3] = ["__proto__", "constructor", "prototype"];

/// Why a context is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    #[error("`context` must be a JSON object, got {found}")]
    NotAnObject { found: &'static str },
    #[error("`context` cannot be canonicalized (RFC 8785): {0}")]
    NotCanonicalizable(#[from] JcsError),
    #[error(
        "`context` is {measured_bytes} bytes (UTF-8 of its RFC 8785 JCS form); the budget is {max_bytes} bytes"
    )]
    OverBudget {
        measured_bytes: usize,
        max_bytes: usize,
    },
    #[error("`context` key {key:?} is reserved and not allowed")]
    ReservedKey { key: String },
}

/// The locked size measure: UTF-8 bytes of the RFC 8785 canonical form.
pub fn measure_context_bytes(value: &Value) -> Result<usize, JcsError> {
    to_canonical_bytes(value).map(|b| b.len())
}

/// Checks a context value: an object, no reserved top-level keys, within the byte budget.
pub fn validate_context(value: &Value) -> Result<&Map<String, Value>, ContextError> {
    let Value::Object(map) = value else {
        return Err(ContextError::NotAnObject {
            found: crate::artifact::json_type(value),
        });
    };
    check_context_map(map)?;
    Ok(map)
}

/// Checks a context object: no reserved top-level keys, within the byte budget.
pub fn check_context_map(map: &Map<String, Value>) -> Result<(), ContextError> {
    if let Some(key) = map
        .keys()
        .find(|k| RESERVED_CONTEXT_KEYS.contains(&k.as_str()))
    {
        return Err(ContextError::ReservedKey { key: key.clone() });
    }
    // A map serializes exactly like the object value holding it.
    let measured_bytes = to_canonical_bytes(map)?.len();
    if measured_bytes > CONTEXT_MAX_BYTES {
        return Err(ContextError::OverBudget {
            measured_bytes,
            max_bytes: CONTEXT_MAX_BYTES,
        });
    }
    Ok(())
}

/// Applies `delta` to `base` with the locked shallow merge and checks the result's budget.
pub fn merge_context(
    base: &Map<String, Value>,
    delta: &Map<String, Value>,
) -> Result<Map<String, Value>, ContextError> {
    if let Some(key) = delta
        .keys()
        .find(|k| RESERVED_CONTEXT_KEYS.contains(&k.as_str()))
    {
        return Err(ContextError::ReservedKey { key: key.clone() });
    }
    let mut merged = base.clone();
    for (key, value) in delta {
        if value.is_null() {
            merged.remove(key);
        } else {
            merged.insert(key.clone(), value.clone());
        }
    }
    check_context_map(&merged)?;
    Ok(merged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn shallow_merge_with_tombstones() {
        let base = obj(json!({"a": 1, "b": {"x": 1}, "c": [1, 2]}));
        let delta = obj(json!({"a": null, "b": {"y": 2}, "c": [3], "d": "new"}));
        let merged = merge_context(&base, &delta).unwrap();
        assert_eq!(
            Value::Object(merged),
            json!({"b": {"y": 2}, "c": [3], "d": "new"})
        );
    }

    #[test]
    fn reserved_keys_are_rejected() {
        let err = merge_context(&Map::new(), &obj(json!({"__proto__": {}}))).unwrap_err();
        assert_eq!(
            err,
            ContextError::ReservedKey {
                key: "__proto__".into()
            }
        );
    }

    #[test]
    fn budget_is_measured_on_jcs_bytes() {
        // Whitespace in the source does not count; JCS has none.
        let v: Value = serde_json::from_str("{ \"k\" :   \"v\" }").unwrap();
        assert_eq!(measure_context_bytes(&v).unwrap(), r#"{"k":"v"}"#.len());
        let big = json!({"blob": "x".repeat(CONTEXT_MAX_BYTES)});
        assert!(matches!(
            validate_context(&big),
            Err(ContextError::OverBudget { .. })
        ));
    }
}

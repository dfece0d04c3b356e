//! `StepInstanceKey`: the canonical name of one execution of a step (locks §1 "StepInstanceKey
//! canonical format").
//!
//! Format: `stepId` when the loop path is empty, else `loopId@iteration` joined by `/`, then `::`,
//! then `stepId` (e.g. `outer@0/inner@2::triage`). Step and loop ids are delimiter-safe
//! (`[a-z0-9_-]+`), so no escaping is ever needed.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::ids::{LoopId, StepId};

/// One entry of a loop path: a loop and its 0-based iteration.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoopPathEntry {
    pub loop_id: LoopId,
    pub iteration: u32,
}

/// The key of one step instance: its loop path and its step id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StepInstanceKey {
    pub loop_path: Vec<LoopPathEntry>,
    pub step_id: StepId,
}

/// Why a string is not a StepInstanceKey.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{value:?} is not a StepInstanceKey: expected `stepId` or `loopId@iteration/...::stepId` with ids matching [a-z0-9_-]+ and decimal iterations ({reason})"
)]
pub struct StepInstanceKeyError {
    pub value: String,
    pub reason: &'static str,
}

impl StepInstanceKey {
    pub fn new(loop_path: Vec<LoopPathEntry>, step_id: StepId) -> Self {
        Self { loop_path, step_id }
    }

    pub fn parse(value: &str) -> Result<Self, StepInstanceKeyError> {
        let err = |reason| StepInstanceKeyError {
            value: value.to_owned(),
            reason,
        };
        let (path, step) = match value.split_once("::") {
            Some((path, step)) => (Some(path), step),
            None => (None, value),
        };
        let step_id = StepId::parse(step).map_err(|_| err("invalid step id"))?;
        let mut loop_path = Vec::new();
        if let Some(path) = path {
            for segment in path.split('/') {
                let (loop_id, iteration) = segment
                    .split_once('@')
                    .ok_or_else(|| err("loop path segment lacks `@`"))?;
                let loop_id = LoopId::parse(loop_id).map_err(|_| err("invalid loop id"))?;
                // Canonical decimal only: no sign, no leading zeros (so parse∘format is identity).
                let canonical = !iteration.is_empty()
                    && iteration.bytes().all(|b| b.is_ascii_digit())
                    && (iteration == "0" || !iteration.starts_with('0'));
                if !canonical {
                    return Err(err("iteration is not a canonical decimal"));
                }
                let iteration: u32 = iteration
                    .parse()
                    .map_err(|_| err("iteration out of range"))?;
                loop_path.push(LoopPathEntry { loop_id, iteration });
            }
        }
        Ok(Self { loop_path, step_id })
    }
}

impl fmt::Display for StepInstanceKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, entry) in self.loop_path.iter().enumerate() {
            if i > 0 {
                f.write_str("/")?;
            }
            write!(f, "{}@{}", entry.loop_id, entry.iteration)?;
        }
        if !self.loop_path.is_empty() {
            f.write_str("::")?;
        }
        f.write_str(self.step_id.as_str())
    }
}

/// Keys order lexicographically by their canonical string (locks §1: the completed set is
/// "sorted lexicographically by key").
impl Ord for StepInstanceKey {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.to_string().cmp(&other.to_string())
    }
}

impl PartialOrd for StepInstanceKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl FromStr for StepInstanceKey {
    type Err = StepInstanceKeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl Serialize for StepInstanceKey {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for StepInstanceKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Cow::<'de, str>::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for StepInstanceKey {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("StepInstanceKey")
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^(([a-z0-9_-]+@(0|[1-9][0-9]*))(/[a-z0-9_-]+@(0|[1-9][0-9]*))*::)?[a-z0-9_-]+$",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_example_parses_and_formats() {
        let key = StepInstanceKey::parse("outer@0/inner@2::triage").unwrap();
        assert_eq!(key.loop_path.len(), 2);
        assert_eq!(key.loop_path[1].iteration, 2);
        assert_eq!(key.step_id.as_str(), "triage");
        assert_eq!(key.to_string(), "outer@0/inner@2::triage");
        assert_eq!(
            StepInstanceKey::parse("triage").unwrap().to_string(),
            "triage"
        );
    }

    #[test]
    fn malformed_keys_are_rejected() {
        for bad in [
            "",
            "::a",
            "a::",
            "x@::a",
            "x@01::a",
            "x@-1::a",
            "X@0::a",
            "x@0//y@1::a",
            "x::a",
            "a:b",
            "x@0::a::b",
            "x@4294967296::a",
        ] {
            assert!(
                StepInstanceKey::parse(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
    }
}

//! Parsing discipline shared by every durable artifact (locks §14 "Schema versioning policy").
//!
//! Every artifact is read in the same three stages, each with its own error class:
//! 1. the version field is checked first: an unknown version fails fast as
//!    [`ArtifactError::UnsupportedVersion`] and nothing else is interpreted;
//! 2. the shape is checked (unknown fields are rejected): [`ArtifactError::Malformed`];
//! 3. the locked invariants are checked: [`ArtifactError::Invariant`].

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::closed::closed_set;

closed_set!(
    /// The versioned durable artifact types.
    ArtifactKind {
        SessionEvent = "session_event",
        ManifestRecord = "manifest_record",
        ExecutionSnapshot = "execution_snapshot",
        EnginePayload = "engine_payload",
        CompiledWorkflow = "compiled_workflow",
        ExportBundle = "export_bundle",
        TokenPayload = "token_payload",
        PreferenceWarning = "preference_warning",
    }
);

/// Why an artifact could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactError {
    #[error(
        "{artifact}: unsupported `{field}` {found}; this build reads version {supported} only (unknown versions fail fast, never guessed)"
    )]
    UnsupportedVersion {
        artifact: ArtifactKind,
        field: &'static str,
        found: String,
        supported: u64,
    },
    #[error("{artifact}: malformed: {detail}")]
    Malformed {
        artifact: ArtifactKind,
        detail: String,
    },
    #[error("{artifact}: violates `{rule}`: {detail}")]
    Invariant {
        artifact: ArtifactKind,
        rule: &'static str,
        detail: String,
    },
}

impl ArtifactError {
    pub fn artifact(&self) -> ArtifactKind {
        match self {
            Self::UnsupportedVersion { artifact, .. }
            | Self::Malformed { artifact, .. }
            | Self::Invariant { artifact, .. } => *artifact,
        }
    }

    pub(crate) fn malformed(artifact: ArtifactKind, detail: impl ToString) -> Self {
        Self::Malformed {
            artifact,
            detail: detail.to_string(),
        }
    }

    pub(crate) fn invariant(
        artifact: ArtifactKind,
        rule: &'static str,
        detail: impl ToString,
    ) -> Self {
        Self::Invariant {
            artifact,
            rule,
            detail: detail.to_string(),
        }
    }
}

/// Parses JSON text into a value, classifying syntax errors as malformed.
/// Duplicate object keys are rejected (I-JSON), never silently resolved.
pub(crate) fn parse_value(artifact: ArtifactKind, text: &str) -> Result<Value, ArtifactError> {
    crate::jcs::parse_strict(text).map_err(|e| ArtifactError::malformed(artifact, e))
}

/// The first stage for an artifact read straight from text: checks the whole text strictly
/// (syntax, no duplicate keys anywhere: [`crate::jcs::scan_strict`]) without building it, and
/// that it is an object, then checks its version field. After this, the text can be
/// deserialized into its typed form directly, with the same classification as
/// [`parse_value`] + [`into_object`] + [`take_version`].
pub(crate) fn scan_versioned(
    artifact: ArtifactKind,
    text: &str,
    field: &'static str,
    supported: u64,
) -> Result<(), ArtifactError> {
    match crate::jcs::scan_strict(text, field) {
        Err(e) => Err(ArtifactError::malformed(artifact, e)),
        Ok(crate::jcs::ScannedTop::Other(kind)) => Err(ArtifactError::malformed(
            artifact,
            format!("expected a JSON object, got {kind}"),
        )),
        Ok(crate::jcs::ScannedTop::Object { member }) => {
            check_version(artifact, member, field, supported)
        }
    }
}

/// Takes the object out of `value`.
pub(crate) fn into_object(
    artifact: ArtifactKind,
    value: Value,
) -> Result<Map<String, Value>, ArtifactError> {
    match value {
        Value::Object(map) => Ok(map),
        other => Err(ArtifactError::malformed(
            artifact,
            format!("expected a JSON object, got {}", json_type(&other)),
        )),
    }
}

/// Checks (and removes) the version field: it must be present and equal `supported`.
pub(crate) fn take_version(
    artifact: ArtifactKind,
    map: &mut Map<String, Value>,
    field: &'static str,
    supported: u64,
) -> Result<(), ArtifactError> {
    check_version(artifact, map.remove(field), field, supported)
}

/// Checks a version field's value (`None`: absent): it must be present and equal `supported`.
pub(crate) fn check_version(
    artifact: ArtifactKind,
    found: Option<Value>,
    field: &'static str,
    supported: u64,
) -> Result<(), ArtifactError> {
    match found {
        None => Err(ArtifactError::malformed(
            artifact,
            format!("missing version field `{field}`"),
        )),
        Some(Value::Number(n)) if n.as_u64() == Some(supported) => Ok(()),
        Some(found) => Err(ArtifactError::UnsupportedVersion {
            artifact,
            field,
            found: found.to_string(),
            supported,
        }),
    }
}

/// Removes a required string discriminator (e.g. `kind`).
pub(crate) fn take_tag(
    artifact: ArtifactKind,
    map: &mut Map<String, Value>,
    field: &'static str,
) -> Result<String, ArtifactError> {
    match map.remove(field) {
        Some(Value::String(s)) => Ok(s),
        Some(other) => Err(ArtifactError::malformed(
            artifact,
            format!("`{field}` must be a string, got {}", json_type(&other)),
        )),
        None => Err(ArtifactError::malformed(
            artifact,
            format!("missing field `{field}`"),
        )),
    }
}

/// Deserializes a typed value, classifying failures as malformed with `context` in front.
pub(crate) fn from_value<T: DeserializeOwned>(
    artifact: ArtifactKind,
    context: &str,
    value: Value,
) -> Result<T, ArtifactError> {
    serde_json::from_value(value)
        .map_err(|e| ArtifactError::malformed(artifact, format!("{context}: {e}")))
}

/// The JSON type of a value, as messages name it ("a string", "an object", …).
pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Implements `Serialize`/`Deserialize` for an artifact type through its `to_value` and
/// `from_value` functions, so serde and the typed parsers share one validation path.
macro_rules! artifact_serde {
    ($ty:ty) => {
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                self.to_value()
                    .map_err(serde::ser::Error::custom)?
                    .serialize(s)
            }
        }

        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let value = serde_json::Value::deserialize(d)?;
                Self::from_value(value).map_err(serde::de::Error::custom)
            }
        }
    };
}
pub(crate) use artifact_serde;

/// Serializes a typed value into a JSON object map (for wire shapes with sibling tags).
pub(crate) fn to_object<T: serde::Serialize>(
    value: &T,
) -> Result<Map<String, Value>, serde_json::Error> {
    match serde_json::to_value(value)? {
        Value::Object(map) => Ok(map),
        _ => Err(serde::ser::Error::custom("expected an object")),
    }
}

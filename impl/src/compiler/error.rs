//! Compile errors as data: every rejection names the JSON pointer of the offending field, what is
//! wrong, what to do, and (when one exists) a deterministic auto-fix as an RFC 6902 operation.

use std::fmt;

use serde::Serialize;
use serde_json::{Value, json};
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};

/// The closed set of compile error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CompileErrorCode {
    /// The source text is not JSON (reported by workflow sources).
    InvalidJson,
    /// A field has the wrong JSON type.
    WrongType,
    /// A required field is absent.
    MissingField,
    /// A field the authoring model does not define.
    UnknownField,
    /// A value outside its closed set or range.
    InvalidValue,
    /// A workflow, step, loop or condition id that breaks the id rules.
    InvalidId,
    /// A legacy (dot-free) workflow id where a namespaced one is required.
    LegacyId,
    /// A `wr.*` id outside the bundled source.
    ReservedNamespace,
    /// Two steps, loops or conditions share an id.
    DuplicateId,
    UnknownTemplate,
    UnknownFeature,
    /// `{id, config}` for a feature that takes no config.
    FeatureConfigNotAllowed,
    /// The same feature listed twice with different configs.
    ConflictingFeature,
    UnknownContract,
    /// Inline schemas and schema pointers are rejected (locks §9).
    InlineSchema,
    UnknownRef,
    /// A `{kind: "ref"}` part outside goal/constraints/procedure/verify.
    RefPlacement,
    /// `{{ }}` templating markers (locks §9 "No string templating").
    Templating,
    /// A ref snippet or a step's injected ref bytes exceed a budget.
    RefBudgetExceeded,
    UnknownCondition,
    /// A `functionReferences` entry no visible `functionDefinitions` defines.
    UnknownFunction,
    /// A loop without `maxIterations` (no defaults, locks §9).
    MissingMaxIterations,
    /// A `loop_control` loop without a final decision step, or a decision step out of place.
    LoopDecisionStep,
    /// A compiler invariant failed (a WorkRail bug, reported as data).
    Internal,
}

impl CompileErrorCode {
    pub fn as_str(self) -> &'static str {
        // The serde spelling, as a table so it is allocation-free (a test checks they agree).
        match self {
            Self::InvalidJson => "invalid_json",
            Self::WrongType => "wrong_type",
            Self::MissingField => "missing_field",
            Self::UnknownField => "unknown_field",
            Self::InvalidValue => "invalid_value",
            Self::InvalidId => "invalid_id",
            Self::LegacyId => "legacy_id",
            Self::ReservedNamespace => "reserved_namespace",
            Self::DuplicateId => "duplicate_id",
            Self::UnknownTemplate => "unknown_template",
            Self::UnknownFeature => "unknown_feature",
            Self::FeatureConfigNotAllowed => "feature_config_not_allowed",
            Self::ConflictingFeature => "conflicting_feature",
            Self::UnknownContract => "unknown_contract",
            Self::InlineSchema => "inline_schema",
            Self::UnknownRef => "unknown_ref",
            Self::RefPlacement => "ref_placement",
            Self::Templating => "templating",
            Self::RefBudgetExceeded => "ref_budget_exceeded",
            Self::UnknownCondition => "unknown_condition",
            Self::UnknownFunction => "unknown_function",
            Self::MissingMaxIterations => "missing_max_iterations",
            Self::LoopDecisionStep => "loop_decision_step",
            Self::Internal => "internal",
        }
    }
}

/// A deterministic auto-fix: one RFC 6902 JSON Patch operation on the source document.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum AutoFix {
    Replace {
        path: String,
        value: Value,
    },
    Remove {
        path: String,
    },
    Add {
        path: String,
        value: Value,
    },
    /// Renames a field (`from` is the misspelled pointer).
    Move {
        from: String,
        path: String,
    },
}

/// One problem with a source workflow.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompileError {
    pub code: CompileErrorCode,
    /// JSON pointer (RFC 6901) of the offending field in the source document.
    pub pointer: String,
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub suggestion: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<AutoFix>,
}

impl CompileError {
    pub fn new(
        code: CompileErrorCode,
        pointer: impl Into<String>,
        message: impl Into<String>,
        suggestion: impl Into<String>,
    ) -> Self {
        Self {
            code,
            pointer: pointer.into(),
            message: message.into(),
            suggestion: suggestion.into(),
            fix: None,
        }
    }

    pub fn with_fix(mut self, fix: AutoFix) -> Self {
        self.fix = Some(fix);
        self
    }
}

impl fmt::Display for CompileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.pointer.is_empty() {
            "(document)"
        } else {
            &self.pointer
        };
        write!(
            f,
            "{} at {at}: {} {}",
            self.code.as_str(),
            self.message,
            self.suggestion
        )
    }
}

/// Every problem found in one source workflow, in document order (never just the first).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct CompileErrors(pub Vec<CompileError>);

/// How many errors an envelope's `details` carries (bounded, locks §12).
pub const ENVELOPE_MAX_ERRORS: usize = 20;

impl CompileErrors {
    pub fn errors(&self) -> &[CompileError] {
        &self.0
    }

    /// The first error with this code and pointer, if any (convenient for callers and tests).
    pub fn find(&self, code: CompileErrorCode, pointer: &str) -> Option<&CompileError> {
        self.0
            .iter()
            .find(|e| e.code == code && e.pointer == pointer)
    }

    /// The unified error envelope (`WORKFLOW_INVALID`) for a tool or CLI response.
    pub fn to_envelope(&self, workflow: &str) -> ErrorEnvelope {
        let count = self.0.len();
        let first = self.0.first();
        let message = match first {
            // The first problem's fix is the envelope's suggestion: said once, not twice.
            Some(e) => format!(
                "workflow {workflow} is invalid ({count} problem(s)); first: {} at {}: {}",
                e.code.as_str(),
                if e.pointer.is_empty() {
                    "(document)"
                } else {
                    &e.pointer
                },
                e.message
            ),
            None => format!("workflow {workflow} is invalid"),
        };
        let suggestion = first.map_or_else(
            || "Fix the workflow source and try again.".to_owned(),
            |e| {
                format!(
                    "{} Then fix the other listed problems and retry.",
                    e.suggestion
                )
            },
        );
        let shown: Vec<&CompileError> = self.0.iter().take(ENVELOPE_MAX_ERRORS).collect();
        ErrorEnvelope::new(
            ErrorCode::WorkflowInvalid,
            message,
            suggestion,
            Retry::NotRetryable,
        )
        .with_details(json!({
            "errorCount": count,
            "errors": shown,
            "omitted": count.saturating_sub(ENVELOPE_MAX_ERRORS),
        }))
    }
}

impl std::error::Error for CompileErrors {}

impl fmt::Display for CompileErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Appends one segment to a JSON pointer, escaping `~` and `/` (RFC 6901).
pub fn child(pointer: &str, segment: &str) -> String {
    let escaped = segment.replace('~', "~0").replace('/', "~1");
    format!("{pointer}/{escaped}")
}

/// Appends an array index to a JSON pointer.
pub fn index(pointer: &str, i: usize) -> String {
    format!("{pointer}/{i}")
}

//! `BlockerReport`: why a run is blocked, as closed-set data (locks §1 "BlockerReport";
//! contract "blocked.blockers[] schema").
//!
//! **Decision (shape).** The lock writes `outcome: { kind: "blocked", blockers: BlockerReport }`
//! and describes a BlockerReport as `blockers: [Blocker, ...]`. WorkRail-rs serializes a
//! BlockerReport as the array itself, so both `advance_recorded.outcome.blockers` and the tool
//! response's `blockers` are a plain, ordered, non-empty array of blockers.

use std::borrow::Cow;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::budget::{
    BLOCKER_MESSAGE_MAX_BYTES, BLOCKER_SUGGESTED_FIX_MAX_BYTES, BoundedText, MAX_BLOCKERS,
};
use crate::closed::{Capability, NonAssumableChoiceKind, closed_set};
use crate::ids::{ContextKey, LoopId, StepId};

closed_set!(
    /// Blocker codes (locks §1 "Blocker.code"), derived from a `ReasonCode`.
    BlockerCode {
        UserOnlyDependency = "USER_ONLY_DEPENDENCY",
        MissingRequiredOutput = "MISSING_REQUIRED_OUTPUT",
        InvalidRequiredOutput = "INVALID_REQUIRED_OUTPUT",
        RequiredCapabilityUnknown = "REQUIRED_CAPABILITY_UNKNOWN",
        RequiredCapabilityUnavailable = "REQUIRED_CAPABILITY_UNAVAILABLE",
        InvariantViolation = "INVARIANT_VIOLATION",
        StorageCorruptionDetected = "STORAGE_CORRUPTION_DETECTED",
    }
);

/// What a blocker points at (locks §1 "Blocker.pointer"). Identifiers are delimiter-safe.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BlockerPointer {
    /// A declared external input the user must supply.
    ContextKey { key: ContextKey },
    /// The request context exceeded its byte budget or was not serializable.
    ContextBudget,
    /// A required output contract (`wr.contracts.*`).
    #[serde(rename_all = "camelCase")]
    OutputContract { contract_ref: String },
    /// A required capability.
    Capability { capability: Capability },
    /// A workflow step.
    #[serde(rename_all = "camelCase")]
    WorkflowStep { step_id: StepId },
}

impl BlockerPointer {
    /// The `pointer.kind` wire value.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::ContextKey { .. } => "context_key",
            Self::ContextBudget => "context_budget",
            Self::OutputContract { .. } => "output_contract",
            Self::Capability { .. } => "capability",
            Self::WorkflowStep { .. } => "workflow_step",
        }
    }

    /// The pointer's stable fields, in order, for deterministic sorting.
    pub fn stable_fields(&self) -> Vec<&str> {
        match self {
            Self::ContextKey { key } => vec![key.as_str()],
            Self::ContextBudget => vec![],
            Self::OutputContract { contract_ref } => vec![contract_ref.as_str()],
            Self::Capability { capability } => vec![capability.as_str()],
            Self::WorkflowStep { step_id } => vec![step_id.as_str()],
        }
    }
}

/// Bounded structured details of a blocker or gap (closed union by `kind`), for reasons whose
/// lock requires machine-readable data beyond the message (locks §9 "Failure mode": a loop
/// limit carries `loopId`, `iteration` and `maxIterations`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum ReasonDetails {
    /// A loop was asked to continue when `iteration + 1 == maxIterations`.
    LoopLimit {
        loop_id: LoopId,
        /// The 0-based iteration that asked to continue.
        iteration: u32,
        max_iterations: u32,
    },
    /// The capability a `capability_missing:*` reason is about, so a gap can be matched by the
    /// observation that later resolves it (decision D40).
    Capability { capability: Capability },
    /// The non-assumable choice a `user_only_dependency:needs_user_choice` reason is about
    /// (locks §3: that reason exists only for a choice the workflow marks non-assumable).
    NonAssumableChoice { choice: NonAssumableChoiceKind },
}

/// One reason a run cannot advance.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Blocker {
    pub code: BlockerCode,
    pub pointer: BlockerPointer,
    /// At most 512 UTF-8 bytes.
    pub message: BoundedText<BLOCKER_MESSAGE_MAX_BYTES>,
    /// At most 1024 UTF-8 bytes; optional but strongly recommended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggested_fix: Option<BoundedText<BLOCKER_SUGGESTED_FIX_MAX_BYTES>>,
    /// Structured details where the reason's lock asks for them (decision D33).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<ReasonDetails>,
}

impl Blocker {
    /// Builds a blocker, failing fast when a text is over its budget (no silent truncation).
    pub fn new(
        code: BlockerCode,
        pointer: BlockerPointer,
        message: impl Into<String>,
        suggested_fix: Option<String>,
    ) -> Result<Self, BlockerReportError> {
        let message =
            BoundedText::new(message).map_err(|e| BlockerReportError::MessageTooLong {
                measured_bytes: e.measured_bytes,
            })?;
        let suggested_fix = suggested_fix
            .map(BoundedText::new)
            .transpose()
            .map_err(|e| BlockerReportError::SuggestedFixTooLong {
                measured_bytes: e.measured_bytes,
            })?;
        Ok(Self {
            code,
            pointer,
            message,
            suggested_fix,
            details: None,
        })
    }

    /// The same blocker with structured details.
    pub fn with_details(mut self, details: ReasonDetails) -> Self {
        self.details = Some(details);
        self
    }

    /// The locked sort key `(code, pointer.kind, pointer.* stable fields)`, all by their wire
    /// strings in ascending lexical (byte) order, then `message` and `suggestedFix` so that ties
    /// on the locked key still order one way only (decision D19).
    fn sort_key(&self) -> (&'static str, &'static str, Vec<&str>, &str, Option<&str>) {
        (
            self.code.as_str(),
            self.pointer.kind(),
            self.pointer.stable_fields(),
            self.message.as_str(),
            self.suggested_fix.as_ref().map(BoundedText::as_str),
        )
    }
}

/// Why a blocker report is invalid. Budgets fail fast (locks §1 "BlockerReport" budgets).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BlockerReportError {
    #[error("a blocker report must hold at least one blocker")]
    Empty,
    #[error("a blocker report holds at most {MAX_BLOCKERS} blockers, got {count}")]
    TooMany { count: usize },
    #[error(
        "blocker message is {measured_bytes} UTF-8 bytes; the budget is {BLOCKER_MESSAGE_MAX_BYTES}"
    )]
    MessageTooLong { measured_bytes: usize },
    #[error(
        "blocker suggestedFix is {measured_bytes} UTF-8 bytes; the budget is {BLOCKER_SUGGESTED_FIX_MAX_BYTES}"
    )]
    SuggestedFixTooLong { measured_bytes: usize },
    #[error("blockers are not in the locked order (code, pointer.kind, pointer fields)")]
    NotSorted,
}

/// A non-empty, bounded, deterministically ordered list of blockers.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct BlockerReport(Vec<Blocker>);

impl BlockerReport {
    /// Sorts `blockers` into the locked order and checks the budgets.
    pub fn new(mut blockers: Vec<Blocker>) -> Result<Self, BlockerReportError> {
        check_count(blockers.len())?;
        blockers.sort_by(|a, b| a.sort_key().cmp(&b.sort_key()));
        Ok(Self(blockers))
    }

    /// Accepts stored blockers only when they are already in the locked order.
    pub fn from_stored(blockers: Vec<Blocker>) -> Result<Self, BlockerReportError> {
        check_count(blockers.len())?;
        if blockers
            .windows(2)
            .any(|w| w[0].sort_key() > w[1].sort_key())
        {
            return Err(BlockerReportError::NotSorted);
        }
        Ok(Self(blockers))
    }

    pub fn blockers(&self) -> &[Blocker] {
        &self.0
    }
}

fn check_count(count: usize) -> Result<(), BlockerReportError> {
    match count {
        0 => Err(BlockerReportError::Empty),
        n if n > MAX_BLOCKERS => Err(BlockerReportError::TooMany { count: n }),
        _ => Ok(()),
    }
}

impl<'de> Deserialize<'de> for BlockerReport {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let blockers = Vec::<Blocker>::deserialize(d)?;
        Self::from_stored(blockers).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for BlockerReport {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("BlockerReport")
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let item = generator.subschema_for::<Blocker>();
        schemars::json_schema!({
            "type": "array",
            "items": item,
            "minItems": 1,
            "maxItems": MAX_BLOCKERS,
            "description": "Ordered by (code, pointer.kind, pointer fields) ascending.",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocker(code: BlockerCode, pointer: BlockerPointer) -> Blocker {
        Blocker::new(code, pointer, "m", None).unwrap()
    }

    #[test]
    fn sorting_uses_wire_strings() {
        let report = BlockerReport::new(vec![
            blocker(
                BlockerCode::UserOnlyDependency,
                BlockerPointer::ContextKey {
                    key: ContextKey::parse("b").unwrap(),
                },
            ),
            blocker(
                BlockerCode::MissingRequiredOutput,
                BlockerPointer::WorkflowStep {
                    step_id: StepId::parse("a").unwrap(),
                },
            ),
            blocker(
                BlockerCode::MissingRequiredOutput,
                BlockerPointer::OutputContract {
                    contract_ref: "wr.contracts.loop_control".into(),
                },
            ),
            blocker(
                BlockerCode::InvalidRequiredOutput,
                BlockerPointer::ContextBudget,
            ),
        ])
        .unwrap();
        let order: Vec<_> = report
            .blockers()
            .iter()
            .map(|b| (b.code.as_str(), b.pointer.kind()))
            .collect();
        assert_eq!(
            order,
            [
                ("INVALID_REQUIRED_OUTPUT", "context_budget"),
                ("MISSING_REQUIRED_OUTPUT", "output_contract"),
                ("MISSING_REQUIRED_OUTPUT", "workflow_step"),
                ("USER_ONLY_DEPENDENCY", "context_key"),
            ]
        );
    }

    #[test]
    fn budgets_fail_fast() {
        assert_eq!(BlockerReport::new(vec![]), Err(BlockerReportError::Empty));
        let many = vec![
            blocker(
                BlockerCode::InvariantViolation,
                BlockerPointer::ContextBudget
            );
            11
        ];
        assert_eq!(
            BlockerReport::new(many),
            Err(BlockerReportError::TooMany { count: 11 })
        );
        assert!(matches!(
            Blocker::new(
                BlockerCode::InvariantViolation,
                BlockerPointer::ContextBudget,
                "x".repeat(513),
                None
            ),
            Err(BlockerReportError::MessageTooLong {
                measured_bytes: 513
            })
        ));
    }
}

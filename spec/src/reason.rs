//! The one reason model behind both `blocked` and gaps (locks §3 "Unified reason model").
//!
//! A [`ReasonCode`] is the semantic source of truth. Blocking modes turn it into a blocker,
//! never-stop turns it into a critical gap; the meaning never changes, only control flow. The
//! mapping is one table ([`REASON_TABLE`]); nothing converts reasons ad hoc.

use std::fmt;
use std::str::FromStr;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::blocker::BlockerCode;
use crate::closed::{Autonomy, GapSeverity, UserOnlyDependencyReason, closed_set};

closed_set!(
    /// Gap reason categories (locks §1 "gap_recorded").
    GapCategory {
        UserOnlyDependency = "user_only_dependency",
        ContractViolation = "contract_violation",
        CapabilityMissing = "capability_missing",
        Unexpected = "unexpected",
    }
);

closed_set!(
    /// Details of `contract_violation`.
    ContractViolationReason {
        MissingRequiredOutput = "missing_required_output",
        InvalidRequiredOutput = "invalid_required_output",
    }
);

closed_set!(
    /// Details of `capability_missing`.
    CapabilityMissingReason {
        RequiredCapabilityUnavailable = "required_capability_unavailable",
        RequiredCapabilityUnknown = "required_capability_unknown",
    }
);

closed_set!(
    /// Details of `unexpected`.
    UnexpectedReason {
        InvariantViolation = "invariant_violation",
        StorageCorruptionDetected = "storage_corruption_detected",
    }
);

/// A gap's reason: a category and its category-specific closed detail
/// (`{"category": "...", "detail": "..."}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "category", content = "detail", rename_all = "snake_case")]
pub enum GapReason {
    UserOnlyDependency(UserOnlyDependencyReason),
    ContractViolation(ContractViolationReason),
    CapabilityMissing(CapabilityMissingReason),
    Unexpected(UnexpectedReason),
}

/// The closed set of reasons (locks §3): `<category>:<detail>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReasonCode(GapReason);

impl ReasonCode {
    pub const fn new(reason: GapReason) -> Self {
        Self(reason)
    }

    pub const fn category(self) -> GapCategory {
        match self.0 {
            GapReason::UserOnlyDependency(_) => GapCategory::UserOnlyDependency,
            GapReason::ContractViolation(_) => GapCategory::ContractViolation,
            GapReason::CapabilityMissing(_) => GapCategory::CapabilityMissing,
            GapReason::Unexpected(_) => GapCategory::Unexpected,
        }
    }

    pub const fn detail(self) -> &'static str {
        match self.0 {
            GapReason::UserOnlyDependency(d) => d.as_str(),
            GapReason::ContractViolation(d) => d.as_str(),
            GapReason::CapabilityMissing(d) => d.as_str(),
            GapReason::Unexpected(d) => d.as_str(),
        }
    }

    /// The gap reason this code records (same category and detail, by construction).
    pub const fn gap_reason(self) -> GapReason {
        self.0
    }

    /// Every reason code, in table order.
    pub fn all() -> impl Iterator<Item = ReasonCode> {
        REASON_TABLE.iter().map(|row| row.reason)
    }

    /// The table row for this code.
    pub fn row(self) -> &'static ReasonRow {
        // Every ReasonCode has exactly one row: the table is checked exhaustive by a test.
        REASON_TABLE
            .iter()
            .find(|row| row.reason == self)
            .unwrap_or(&REASON_TABLE[REASON_TABLE.len() - 1])
    }

    /// `ReasonCode -> Blocker.code` (locks §1 "Mapping lock").
    pub fn blocker_code(self) -> BlockerCode {
        self.row().blocker_code
    }

    /// What this reason does in the given mode (locks §3 "Deterministic mapping").
    ///
    /// `subject_required` says whether the compiled workflow requires what the reason is about:
    /// the capability for `capability_missing:*`, the output for `contract_violation:*` (a
    /// step's `output.contractRef`, or a user-only dependency report, which asks to stop). It
    /// only matters for rows with [`BlockingRule::BlockIfRequired`]: a subject the workflow does
    /// not require (a preferred capability, an optional report such as a divergence marker)
    /// never blocks and is disclosed as a `warning` gap in every mode, so it never turns a run
    /// into `complete_with_gaps` (decisions D9, D39).
    pub fn disposition(self, autonomy: Autonomy, subject_required: bool) -> Disposition {
        let row = self.row();
        let required = match row.blocking_mode {
            BlockingRule::Block => true,
            BlockingRule::BlockIfRequired => subject_required,
        };
        if !required {
            return Disposition {
                blocks: false,
                gap_severity: Some(GapSeverity::Warning),
            };
        }
        if !autonomy.is_blocking() {
            return Disposition {
                blocks: false,
                gap_severity: Some(row.never_stop_gap_severity),
            };
        }
        Disposition {
            blocks: true,
            gap_severity: row.blocking_mode_gap_severity(),
        }
    }
}

/// How a reason behaves in blocking modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockingRule {
    /// Always `blocked`.
    Block,
    /// `blocked` iff the compiled workflow requires the reason's subject (the capability, or
    /// the output); otherwise a `warning` gap in every mode.
    BlockIfRequired,
}

/// One row of the locked mapping table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReasonRow {
    pub reason: ReasonCode,
    pub blocker_code: BlockerCode,
    pub blocking_mode: BlockingRule,
    /// Severity of the gap recorded in never-stop (always critical per the lock).
    pub never_stop_gap_severity: GapSeverity,
    /// `unexpected:*` is always recorded as a critical gap, in every mode.
    pub always_records_gap: bool,
}

impl ReasonRow {
    /// Gap recorded when the reason blocks: `unexpected:*` always records a critical gap; other
    /// blocking reasons are accounted for by `advance_recorded` alone.
    fn blocking_mode_gap_severity(&self) -> Option<GapSeverity> {
        self.always_records_gap.then_some(GapSeverity::Critical)
    }
}

/// The result of applying the mapping in a mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Disposition {
    /// Return `kind: "blocked"` (never true in never-stop).
    pub blocks: bool,
    /// Record a `gap_recorded` with this severity.
    pub gap_severity: Option<GapSeverity>,
}

macro_rules! row {
    ($reason:expr, $code:ident, $rule:ident, $always_gap:expr) => {
        ReasonRow {
            reason: ReasonCode($reason),
            blocker_code: BlockerCode::$code,
            blocking_mode: BlockingRule::$rule,
            never_stop_gap_severity: GapSeverity::Critical,
            always_records_gap: $always_gap,
        }
    };
}

use CapabilityMissingReason as Cap;
use ContractViolationReason as Contract;
use GapReason as G;
use UnexpectedReason as Unexp;
use UserOnlyDependencyReason as User;

/// The locked, table-driven mapping `ReasonCode -> (Blocker.code, gap, mode behaviour)`.
pub const REASON_TABLE: &[ReasonRow] = &[
    row!(
        G::UserOnlyDependency(User::NeedsUserSecretOrToken),
        UserOnlyDependency,
        Block,
        false
    ),
    row!(
        G::UserOnlyDependency(User::NeedsUserAccountAccess),
        UserOnlyDependency,
        Block,
        false
    ),
    row!(
        G::UserOnlyDependency(User::NeedsUserArtifact),
        UserOnlyDependency,
        Block,
        false
    ),
    row!(
        G::UserOnlyDependency(User::NeedsUserChoice),
        UserOnlyDependency,
        Block,
        false
    ),
    row!(
        G::UserOnlyDependency(User::NeedsUserApproval),
        UserOnlyDependency,
        Block,
        false
    ),
    row!(
        G::UserOnlyDependency(User::NeedsUserEnvironmentAction),
        UserOnlyDependency,
        Block,
        false
    ),
    row!(
        G::ContractViolation(Contract::MissingRequiredOutput),
        MissingRequiredOutput,
        BlockIfRequired,
        false
    ),
    row!(
        G::ContractViolation(Contract::InvalidRequiredOutput),
        InvalidRequiredOutput,
        BlockIfRequired,
        false
    ),
    row!(
        G::CapabilityMissing(Cap::RequiredCapabilityUnknown),
        RequiredCapabilityUnknown,
        BlockIfRequired,
        false
    ),
    row!(
        G::CapabilityMissing(Cap::RequiredCapabilityUnavailable),
        RequiredCapabilityUnavailable,
        BlockIfRequired,
        false
    ),
    row!(
        G::Unexpected(Unexp::InvariantViolation),
        InvariantViolation,
        Block,
        true
    ),
    row!(
        G::Unexpected(Unexp::StorageCorruptionDetected),
        StorageCorruptionDetected,
        Block,
        true
    ),
];

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.category().as_str(), self.detail())
    }
}

/// A string is not one of the closed reason codes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a ReasonCode (expected `<category>:<detail>` from the closed set)")]
pub struct ReasonCodeParseError {
    pub value: String,
}

impl FromStr for ReasonCode {
    type Err = ReasonCodeParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ReasonCode::all()
            .find(|code| code.to_string() == s)
            .ok_or_else(|| ReasonCodeParseError {
                value: s.to_owned(),
            })
    }
}

impl Serialize for ReasonCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ReasonCode {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        raw.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_exhaustive_and_unique() {
        let mut expected = Vec::new();
        for d in UserOnlyDependencyReason::ALL {
            expected.push(G::UserOnlyDependency(*d));
        }
        for d in ContractViolationReason::ALL {
            expected.push(G::ContractViolation(*d));
        }
        for d in CapabilityMissingReason::ALL {
            expected.push(G::CapabilityMissing(*d));
        }
        for d in UnexpectedReason::ALL {
            expected.push(G::Unexpected(*d));
        }
        assert_eq!(REASON_TABLE.len(), expected.len());
        for reason in expected {
            let rows = REASON_TABLE
                .iter()
                .filter(|r| r.reason.gap_reason() == reason)
                .count();
            assert_eq!(rows, 1, "{reason:?}");
        }
    }

    #[test]
    fn reason_codes_roundtrip_as_strings() {
        for code in ReasonCode::all() {
            let text = code.to_string();
            assert_eq!(text.parse::<ReasonCode>().unwrap(), code);
        }
        assert!("unexpected:nope".parse::<ReasonCode>().is_err());
    }
}

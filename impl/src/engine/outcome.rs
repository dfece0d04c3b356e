//! What an advance returns: an explicit `Blocked` / `Advanced` / `Complete`, with every reason as
//! a `ReasonCode` plus the blocker pointer and bounded structured details, so the protocol layer
//! builds `BlockerReport`s and `gap_recorded` events without re-deriving anything.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};
use workrail_spec::blocker::{
    Blocker, BlockerPointer, BlockerReport, BlockerReportError, ReasonDetails,
};
use workrail_spec::closed::{
    Capability, CapabilityStatus, DivergenceReason, GapSeverity, NonAssumableChoiceKind,
    UserOnlyDependencyReason,
};
use workrail_spec::event::{DecisionTraceAppended, Provenance, TraceEntry};
use workrail_spec::ids::{GapId, LoopId, StepId, TraceId};
use workrail_spec::reason::{Disposition, GapReason, ReasonCode};
use workrail_spec::snapshot::EngineState;

use super::contract::ContractProblem;

/// Structured, bounded details of a finding.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum FindingDetail {
    /// A step's required output is missing or invalid.
    Contract {
        step_id: StepId,
        contract_ref: String,
        artifact_kind: String,
        /// Empty when the output is missing.
        problems: Vec<ContractProblem>,
        /// A minimal valid artifact, for the self-correcting blocked response.
        example: Value,
    },
    /// A loop was asked to continue past `maxIterations` (locks §9 "Failure mode").
    LoopLimit {
        loop_id: LoopId,
        /// The 0-based iteration that asked to continue.
        iteration: u32,
        max_iterations: u32,
        step_id: StepId,
    },
    /// A declared capability was observed unavailable, or a step that depends on a required
    /// capability was acknowledged while its enforcement-grade status is not `available`.
    Capability {
        capability: Capability,
        step_id: StepId,
        /// The enforcement-grade status the step was judged with.
        status: CapabilityStatus,
    },
    /// The agent reported that only the user can unblock this step.
    UserOnlyDependency {
        step_id: StepId,
        reason: UserOnlyDependencyReason,
        #[serde(skip_serializing_if = "Option::is_none")]
        non_assumable_choice: Option<NonAssumableChoiceKind>,
    },
    /// The step's `validationCriteria` failed on the notes (or there were no notes to check).
    Validation {
        step_id: StepId,
        /// What failed, in the rule's own words where it has a `message`.
        issue: String,
    },
    /// A required `wr.assessment` is missing or invalid, or a recorded level requires a
    /// follow-up before the step may complete.
    Assessment {
        step_id: StepId,
        #[serde(skip_serializing_if = "Option::is_none")]
        assessment_id: Option<String>,
        /// A consequence's trigger: the dimension and the level it was rated at.
        #[serde(skip_serializing_if = "Option::is_none")]
        followup: Option<AssessmentFollowup>,
        issues: Vec<String>,
    },
    /// A `for` or `forEach` loop cannot decide: its context value is missing or of the wrong
    /// type.
    LoopContext(LoopContextProblem),
    /// A parallel step's lanes are not all in, one failed, or two touched one file under
    /// `fail-on-conflict` (decision D169).
    Lanes {
        step_id: StepId,
        /// The lanes concerned, by index (from 1).
        lanes: Vec<u32>,
        /// The file two lanes touched (a conflict only).
        #[serde(skip_serializing_if = "Option::is_none")]
        file: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        non_assumable_choice: Option<NonAssumableChoiceKind>,
    },
    /// The step's attempt budget (`maxAttempts`) is spent: the user must step in.
    AttemptBudget {
        step_id: StepId,
        max_attempts: u32,
        /// Blocked attempts recorded at this step instance before this one.
        blocked_attempts: u32,
        /// The checks that failed this time (`CODE: message`).
        failed: Vec<String>,
    },
}

/// A consequence that fired: an assessment's dimension rated at the trigger level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AssessmentFollowup {
    pub dimension_id: String,
    pub level: String,
    pub guidance: String,
}

/// A loop that reads its iterations from the context found the value missing or of the wrong
/// type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoopContextProblem {
    pub loop_id: LoopId,
    /// The context key the loop reads (`count` or `items`).
    pub key: String,
    /// The JSON type it must hold: `number` (`for`) or `array` (`forEach`).
    pub expected: &'static str,
    /// The JSON type found; `None` when the key is unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found: Option<&'static str>,
}

impl LoopContextProblem {
    /// A one-line statement of the problem.
    pub fn describe(&self) -> String {
        let found = match self.found {
            Some(t) => format!("it holds {} {t}", article(t)),
            None => "it is not set".to_owned(),
        };
        format!(
            "loop '{}' reads `context.{}`, which must be {} {} to decide its iterations, but {found}",
            self.loop_id,
            self.key,
            article(self.expected),
            self.expected
        )
    }

    /// An example `context` that satisfies the loop.
    pub fn example(&self) -> String {
        let value = if self.expected == "array" {
            "[...one element per iteration...]"
        } else {
            "3"
        };
        format!("{{\"{}\": {value}}}", self.key)
    }
}

fn article(type_name: &str) -> &'static str {
    match type_name.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => "an",
        _ => "a",
    }
}

/// One reason, with what it means in the effective mode.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    pub reason: ReasonCode,
    pub pointer: BlockerPointer,
    /// At most 512 UTF-8 bytes (a blocker message).
    pub message: String,
    /// At most 1024 UTF-8 bytes (a blocker suggestedFix).
    pub suggested_fix: String,
    pub detail: FindingDetail,
    /// `ReasonCode::disposition` in the effective autonomy.
    pub disposition: Disposition,
}

impl Finding {
    /// The blocker this finding becomes in a blocking mode.
    pub fn to_blocker(&self) -> Result<Blocker, BlockerReportError> {
        let blocker = Blocker::new(
            self.reason.blocker_code(),
            self.pointer.clone(),
            self.message.clone(),
            Some(self.suggested_fix.clone()),
        )?;
        Ok(match self.reason_details() {
            Some(details) => blocker.with_details(details),
            None => blocker,
        })
    }

    /// The structured details the reason's lock requires (a loop limit names its loop,
    /// iteration and maxIterations), for blockers and gaps alike.
    pub fn reason_details(&self) -> Option<ReasonDetails> {
        match &self.detail {
            FindingDetail::LoopLimit {
                loop_id,
                iteration,
                max_iterations,
                ..
            } => Some(ReasonDetails::LoopLimit {
                loop_id: loop_id.clone(),
                iteration: *iteration,
                max_iterations: *max_iterations,
            }),
            FindingDetail::Capability { capability, .. } => Some(ReasonDetails::Capability {
                capability: *capability,
            }),
            FindingDetail::UserOnlyDependency {
                non_assumable_choice: Some(choice),
                ..
            } => Some(ReasonDetails::NonAssumableChoice { choice: *choice }),
            FindingDetail::Lanes {
                non_assumable_choice: Some(choice),
                ..
            } => Some(ReasonDetails::NonAssumableChoice { choice: *choice }),
            FindingDetail::UserOnlyDependency { .. }
            | FindingDetail::Lanes { .. }
            | FindingDetail::Contract { .. }
            | FindingDetail::Validation { .. }
            | FindingDetail::Assessment { .. }
            | FindingDetail::LoopContext(_)
            | FindingDetail::AttemptBudget { .. } => None,
        }
    }

    /// The severity of the gap to record, if any.
    pub fn gap_severity(&self) -> Option<GapSeverity> {
        self.disposition.gap_severity
    }

    /// The bounded structured details (for gap summaries, blocked responses and logs).
    pub fn details(&self) -> Value {
        json!({"reason": self.reason, "detail": self.detail})
    }
}

/// What the interpreter needs to know about the acknowledged node's branch, derived by the
/// caller from durable events (the engine does no I/O).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BranchFacts {
    /// The enforcement-grade (strong) status of each capability on the node's lineage
    /// (decision D27); a capability that is absent is `unknown`.
    pub strong_status: BTreeMap<Capability, CapabilityStatus>,
    /// Disclosures on the node's lineage that no later gap resolves, oldest first (resolution
    /// records are not disclosures, D79).
    pub open_gaps: Vec<OpenGap>,
    /// The context the walk reads (decision D139): the run's latest `context_set` merged with
    /// the call's delta.
    pub context: serde_json::Map<String, Value>,
    /// Blocked attempts already recorded at this step instance on this branch (the node and
    /// the checkpoints it continues from), for the step's attempt budget.
    pub blocked_attempts: u32,
    /// The lanes the acknowledged parallel step started, with what each recorded (decision
    /// D169); empty for any other step.
    pub lanes: Vec<LaneFact>,
}

/// One lane of the acknowledged parallel step, as the log recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct LaneFact {
    /// From 1, in the authored order.
    pub index: u32,
    /// The lane's run id and its block output, if recorded.
    pub lane: super::fanin::Lane,
    /// The block output's `summary`.
    pub summary: Option<String>,
    /// The rest of what the block output handed in, for the synthesis prompt (decision D192);
    /// `None` when nothing was recorded.
    pub handed_in: Option<HandedIn>,
}

/// What a lane's block output handed in beside its status and summary, as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct HandedIn {
    /// `blockType`.
    pub block_type: String,
    /// `filesModified` and `filesCreated`, in the recorded order.
    pub files_modified: Vec<String>,
    pub files_created: Vec<String>,
    /// `deliverables`, the union by deliverables type, as recorded.
    pub deliverables: Option<Value>,
}

/// An unresolved gap on the branch.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenGap {
    pub gap_id: GapId,
    pub severity: GapSeverity,
    pub reason: GapReason,
    pub details: Option<ReasonDetails>,
}

/// A capability observation reported with the ack, with the provenance WorkRail derived for it
/// (decision D40), ready to record as `capability_observed`.
#[derive(Debug, Clone, PartialEq)]
pub struct ObservedCapability {
    pub capability: Capability,
    pub status: CapabilityStatus,
    pub provenance: Provenance,
}

/// A valid `workflow_divergence` marker, ready to record as `divergence_recorded`.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    pub reason: DivergenceReason,
    /// Non-empty, at most 1024 UTF-8 bytes (checked by the pack's schema).
    pub summary: String,
    pub related_step_id: Option<StepId>,
}

/// An earlier gap of the branch that this ack resolves (recorded as a `gap_recorded` linking
/// to it: gaps are never mutated).
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    pub resolves: GapId,
    pub reason: GapReason,
    pub details: Option<ReasonDetails>,
    pub summary: String,
    /// The observation of this ack that resolved it (its index in `Reports::observations`).
    pub observation: Option<usize>,
}

/// The durable facts an ack reports besides its outputs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reports {
    pub observations: Vec<ObservedCapability>,
    pub divergences: Vec<Divergence>,
    pub resolutions: Vec<Resolution>,
}

/// The pending step cannot be acknowledged; the state is unchanged.
#[derive(Debug, Clone, PartialEq)]
pub struct Blocked {
    /// Every finding of the attempt; at least one blocks.
    pub findings: Vec<Finding>,
    /// What the attempt reported that is recorded even though it is blocked: capability
    /// observations (facts about the environment) and the resolutions they cause. Divergences
    /// describe completed work and are dropped (the agent sends them again with the fix).
    pub reports: Reports,
}

impl Blocked {
    /// The blocking findings as a locked, ordered `BlockerReport`.
    pub fn blocker_report(&self) -> Result<BlockerReport, BlockerReportError> {
        let blockers = self
            .findings
            .iter()
            .filter(|f| f.disposition.blocks)
            .map(Finding::to_blocker)
            .collect::<Result<Vec<_>, _>>()?;
        BlockerReport::new(blockers)
    }

    /// Findings that also record a gap (e.g. `unexpected:*` always does).
    pub fn gaps(&self) -> impl Iterator<Item = &Finding> {
        self.findings.iter().filter(|f| f.gap_severity().is_some())
    }
}

/// A successful move to a new state.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    /// `Running` with a pending step, or `Complete`.
    pub state: EngineState,
    /// Decision trace entries in order (unbounded; see [`Transition::trace_event`]).
    pub trace: Vec<TraceEntry>,
    /// Findings recorded as gaps instead of blocking (never-stop, or a non-required subject).
    pub gaps: Vec<Finding>,
    /// Observations, divergences and resolutions the ack reported.
    pub reports: Reports,
}

impl Transition {
    /// The trace as one bounded `decision_trace_appended` payload (locks §1 budgets), or `None`
    /// when nothing was decided.
    pub fn trace_event(&self, trace_id: TraceId) -> Option<DecisionTraceAppended> {
        (!self.trace.is_empty())
            .then(|| DecisionTraceAppended::bounded(trace_id, self.trace.clone()))
    }
}

/// The result of acknowledging the pending step.
#[derive(Debug, Clone, PartialEq)]
pub enum AdvanceOutcome {
    Blocked(Blocked),
    /// A next step is pending.
    Advanced(Transition),
    /// The workflow finished.
    Complete(Transition),
}

/// A state that does not fit the snapshot or the operation: a WorkRail invariant violation
/// (`unexpected:invariant_violation`), never a panic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineError {
    /// `advance` on a run that was never started.
    NotStarted,
    /// `advance` on a complete run.
    AlreadyComplete,
    /// `start` on a run that already started.
    AlreadyStarted,
    /// The state does not match the compiled workflow (wrong pinned snapshot or corruption).
    Inconsistent(String),
    /// `start` reached a loop whose context value is missing or of the wrong type: the caller
    /// must pass it in the start's `context` (not an invariant violation).
    MissingContext(LoopContextProblem),
}

impl EngineError {
    pub fn reason(&self) -> ReasonCode {
        use workrail_spec::reason::{ContractViolationReason, GapReason, UnexpectedReason};
        ReasonCode::new(match self {
            Self::MissingContext(_) => {
                GapReason::ContractViolation(ContractViolationReason::MissingRequiredOutput)
            }
            _ => GapReason::Unexpected(UnexpectedReason::InvariantViolation),
        })
    }
}

impl std::error::Error for EngineError {}

impl std::fmt::Display for EngineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotStarted => f.write_str("the run has not started; call start first"),
            Self::AlreadyComplete => f.write_str("the run is complete; nothing is pending"),
            Self::AlreadyStarted => f.write_str("the run already started"),
            Self::Inconsistent(detail) => {
                write!(
                    f,
                    "engine state does not match the compiled workflow: {detail}"
                )
            }
            Self::MissingContext(problem) => f.write_str(&problem.describe()),
        }
    }
}

//! The model's own interpreter over a [`CompiledWorkflowSnapshotV1`]: which step is pending,
//! and what completing it leads to.
//!
//! Written independently of the production engine, for obviousness. The whole execution position
//! is the pending step plus the loop stack of the snapshot (D13): the pending step's id says where
//! it sits (every step is placed exactly once, D16) and each loop frame's `bodyIndex` says which
//! item of its loop body is running. Completing the pending step moves one item forward and then
//! *settles*: it walks forward until it reaches a step (the next pending step) or the end of the
//! workflow (complete).
//!
//! Run conditions at the top level (decision D154): the language selects the first top-level
//! item that is not done and whose `runCondition` holds. So an item passed because its condition
//! did not hold is remembered (`Revisit`), and whenever the walk is about to choose at the top
//! level (after a top-level step, after a top-level loop ends, at the end of the sequence) the
//! first remembered item whose condition holds now runs before the forward walk goes on from
//! the first item it has not reached. Inside a loop body the walk only goes forward, as the
//! language's loop kernel does.
//!
//! Loops (locks §9 "Loops authoring", authoring "loop_control condition kind"):
//! - iterations are 0-based; `maxIterations` is a count (allowed iterations `0..maxIterations`);
//!   the iteration increments only when the next iteration starts (`L-LOOP-*`);
//! - `always_true` / `always_false` are evaluated on entry and at the end of every iteration;
//! - `loop_control` is evaluated at the end of every iteration only. **Decision:** its loop is
//!   always entered (a do-while), because no `wr.loop_control` decision can exist before the first
//!   iteration of the loop has run;
//! - the decision is read from the `wr.loop_control` artifacts sent with the ack that completes
//!   the iteration (**decision:** snapshots carry no decisions, D13, so a decision made by an
//!   earlier ack could not be carried to a later node). Every artifact of kind `wr.loop_control`
//!   is the contract's business (D45): one naming another loop, or a malformed one, makes the
//!   output invalid, even next to a valid one; when all are valid the last one in
//!   `output.artifacts[]` is the most recent and decides;
//! - a `loop_control` `continue` at the last allowed iteration is a loop-limit failure
//!   (`unexpected:invariant_violation`), while an `always_true` loop at its last iteration ends
//!   with "max iterations reached" (decision D73); missing or invalid loop control is a
//!   `contract_violation`. Neither ever exits the loop silently: each is a [`Finding`], which
//!   the effective autonomy turns into a blocker or a gap through the spec's reason table
//!   (`ReasonCode::disposition`, L-REASON-SINGLE-MODEL). When a finding does not block
//!   (never-stop), the loop is treated as `decision="stop"` and exits.
//!
//! Required outputs: a step whose `output.contractRef` names a pack requires an artifact of that
//! pack's `artifactKind`, checked before the step completes. For `wr.contracts.loop_control` the
//! artifacts are read exactly as the loop reads them, for the step's innermost enclosing loop
//! (`kind`, `loopId` equal to that loop, `decision`, optional `summary` of at most 512 bytes, no
//! other fields): none is missing, any malformed one or one for another loop is invalid. For
//! `wr.contracts.capability_observation` every observation is read as `crate::capabilities`
//! reads it (D40, D76): none is missing; any invalid one, or a probe's observations none of which
//! is about its capability, is invalid. **Scope:** for other packs the
//! model checks presence only, since it carries no JSON Schema validator. Within one ack a finding with the same reason
//! and pointer is disclosed once.

use serde_json::{Map, Value};
use workrail_spec::blocker::{BlockerPointer, ReasonDetails};
use workrail_spec::budget::LOOP_CONTROL_SUMMARY_MAX_BYTES;
use workrail_spec::closed::{Autonomy, GapSeverity, LoopDecision};
use workrail_spec::compiled::{
    CompiledCondition, CompiledLoop, CompiledWorkflowSnapshotV1, LoopWhile, SequenceItem,
};
use workrail_spec::ids::{ContextKey, LoopId, StepId};
use workrail_spec::reason::{ContractViolationReason, GapReason, ReasonCode, UnexpectedReason};
use workrail_spec::skey::LoopPathEntry;
use workrail_spec::snapshot::{
    Bindings, CompletedSet, EngineState, LoopFrame, Pending, PendingStep, Revisit,
};
use workrail_spec::tools::OutputInput;

use crate::language::{self, MissingLoopContext};

/// The artifact kind validated by `wr.contracts.loop_control`.
pub const LOOP_CONTROL_ARTIFACT_KIND: &str = "wr.loop_control";
/// The contract pack that validates loop-control artifacts.
pub const LOOP_CONTROL_CONTRACT_REF: &str = "wr.contracts.loop_control";

/// Something wrong with an ack that the mode decides about: block, or disclose as a gap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub reason: ReasonCode,
    pub pointer: BlockerPointer,
    /// Bounded explanation (also the gap summary); carries loop id, iteration and
    /// maxIterations for loop-limit failures.
    pub message: String,
    /// The structured details the reason's lock asks for (D33): a loop limit names its loop,
    /// the iteration that asked to continue and `maxIterations`.
    pub details: Option<ReasonDetails>,
    /// Found while moving on from the acknowledged step (a loop limit, a loop's missing
    /// context), not in the acknowledgement itself: an acknowledgement its own reasons block
    /// does not move, so these are not reported beside them (D74).
    pub found_moving: bool,
    /// One failed rule of a step's `validationCriteria`: each is its own blocker or gap, never
    /// folded into another with the same reason and pointer (decision D153).
    pub per_rule: bool,
}

/// What completing (or starting) leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// Execution moved to `state`; `disclosed` findings did not block and become gaps.
    Moved {
        state: EngineState,
        disclosed: Vec<(Finding, GapSeverity)>,
        /// The steps and loops the walk passed over because their `runCondition` did not hold,
        /// in walk order (each is recorded in the decision trace, decision D139).
        skipped: Vec<Skip>,
    },
    /// A finding blocks: nothing moves. `gaps` are the disclosures to record anyway (the
    /// reason table records a critical gap for `unexpected:*` even when it blocks).
    Blocked {
        blocker: Finding,
        /// Further findings of the same acknowledgement that block beside `blocker`: each failed
        /// `validationCriteria` rule is its own blocker (decision D153).
        also: Vec<Finding>,
        gaps: Vec<(Finding, GapSeverity)>,
    },
}

/// A step or loop whose `runCondition` did not hold when the walk reached it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip {
    pub subject: Skipped,
    /// The loop path the walk was in.
    pub loop_path: Vec<LoopPathEntry>,
    /// The condition and the values it read (`Condition::explain`).
    pub explanation: String,
}

/// What a [`Skip`] passed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skipped {
    Step(StepId),
    Loop(LoopId),
}

/// The compiled workflow or the snapshot does not hold together (never expected).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InterpreterError {
    /// The snapshot has no pending step (it is complete or `init`).
    NothingPending,
    /// The snapshot names a position the compiled workflow does not have.
    Invariant(String),
}

impl std::fmt::Display for InterpreterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NothingPending => f.write_str("the snapshot has no pending step"),
            Self::Invariant(detail) => write!(f, "interpreter invariant violated: {detail}"),
        }
    }
}

impl std::error::Error for InterpreterError {}

/// How a loop-control reading for one loop came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopControlReading {
    /// No `wr.loop_control` artifact at all.
    Missing,
    /// A `wr.loop_control` artifact is malformed or names another loop.
    Invalid,
    Decision(LoopDecision),
}

/// Reads the loop-control decision for `loop_id` from an ack's artifacts (D45): without any
/// `wr.loop_control` artifact it is missing; if any of them is malformed or names another loop
/// it is invalid (a mistake is reported, never skipped over); otherwise the last one decides.
pub fn read_loop_control(output: Option<&OutputInput>, loop_id: &LoopId) -> LoopControlReading {
    let Some(output) = output else {
        return LoopControlReading::Missing;
    };
    let mut reading = LoopControlReading::Missing;
    for artifact in output
        .artifacts
        .iter()
        .filter(|a| a.get("kind").and_then(|v| v.as_str()) == Some(LOOP_CONTROL_ARTIFACT_KIND))
    {
        let for_this_loop =
            artifact.get("loopId").and_then(|v| v.as_str()) == Some(loop_id.as_str());
        let known_fields = artifact
            .keys()
            .all(|k| ["kind", "loopId", "decision", "summary"].contains(&k.as_str()));
        let summary_ok = match artifact.get("summary") {
            None => true,
            Some(v) => v
                .as_str()
                .is_some_and(|s| s.len() <= LOOP_CONTROL_SUMMARY_MAX_BYTES),
        };
        let decision = artifact
            .get("decision")
            .and_then(|v| v.as_str())
            .and_then(LoopDecision::parse);
        match decision {
            Some(d) if for_this_loop && known_fields && summary_ok => {
                reading = LoopControlReading::Decision(d);
            }
            _ => return LoopControlReading::Invalid,
        }
    }
    reading
}

/// The state of a new run: settle from the first item of the top-level sequence. There is no
/// ack yet, so a loop that would need a decision before any step runs finds it missing.
pub fn start(
    wf: &CompiledWorkflowSnapshotV1,
    autonomy: Autonomy,
) -> Result<Progress, InterpreterError> {
    start_with(wf, autonomy, &Map::new())
}

/// [`start`] over the run's initial `context` (decision D139).
pub fn start_with(
    wf: &CompiledWorkflowSnapshotV1,
    autonomy: Autonomy,
    context: &Map<String, Value>,
) -> Result<Progress, InterpreterError> {
    let walker = Walker {
        wf,
        output: None,
        completed_step: None,
        autonomy,
        context,
        disclosed: Vec::new(),
        skipped: Vec::new(),
    };
    walker.settle(Cursor::default(), CompletedSet::default())
}

/// Completes the pending step of `state` with the ack's `output`: checks the step's required
/// output, then settles on the next pending step.
pub fn ack(
    wf: &CompiledWorkflowSnapshotV1,
    state: &EngineState,
    output: &OutputInput,
    autonomy: Autonomy,
) -> Result<Progress, InterpreterError> {
    ack_with(wf, state, output, autonomy, &Map::new())
}

/// [`ack`] over the context the ack records: the run's context merged with the ack's delta
/// (decision D139).
pub fn ack_with(
    wf: &CompiledWorkflowSnapshotV1,
    state: &EngineState,
    output: &OutputInput,
    autonomy: Autonomy,
    context: &Map<String, Value>,
) -> Result<Progress, InterpreterError> {
    let EngineState::Running {
        completed,
        loop_stack,
        pending: Pending::Some { step },
        revisit,
    } = state
    else {
        return Err(InterpreterError::NothingPending);
    };
    let mut walker = Walker {
        wf,
        output: Some(output),
        completed_step: Some(&step.step_id),
        autonomy,
        context,
        disclosed: Vec::new(),
        skipped: Vec::new(),
    };
    // Every reason of the acknowledgement itself is judged together: each one that blocks is
    // reported (L-BLOCKER-ORDER sorts them).
    let mut findings: Vec<Finding> = check_required_output(wf, step, loop_stack, output)?
        .into_iter()
        .collect();
    let scope = walker.scope_of(loop_stack)?;
    findings.extend(check_validation(wf, step, output, &scope)?);
    if let Some(blocked) = walker.judge_all(findings) {
        return Ok(blocked);
    }
    let mut cursor = locate(wf, step, loop_stack)?;
    cursor.revisit = revisit.clone();
    cursor.step_forward();
    walker.settle(cursor, completed.with(step.instance_key()))
}

/// The finding for a step whose declared contract output is missing or invalid, if any.
fn check_required_output(
    wf: &CompiledWorkflowSnapshotV1,
    step: &PendingStep,
    loop_stack: &[LoopFrame],
    output: &OutputInput,
) -> Result<Option<Finding>, InterpreterError> {
    let compiled = wf
        .step(&step.step_id)
        .ok_or_else(|| InterpreterError::Invariant(format!("unknown step {}", step.step_id)))?;
    let Some(contract_ref) = compiled
        .output
        .as_ref()
        .and_then(|o| o.contract_ref.as_ref())
    else {
        return Ok(None);
    };
    let contract = wf.contract(contract_ref).ok_or_else(|| {
        InterpreterError::Invariant(format!("contract {contract_ref} is not embedded"))
    })?;
    let pointer = BlockerPointer::OutputContract {
        contract_ref: contract_ref.clone(),
    };
    let present = output
        .artifacts
        .iter()
        .any(|a| a.get("kind").and_then(|v| v.as_str()) == Some(contract.artifact_kind.as_str()));
    // Loop-control artifacts are read for the enclosing (innermost) loop, exactly as the loop's
    // own evaluation reads them; other packs are checked for presence only.
    let reading = if contract.artifact_kind == LOOP_CONTROL_ARTIFACT_KIND {
        match loop_stack.last() {
            Some(frame) => read_loop_control(Some(output), &frame.loop_id),
            None if present => LoopControlReading::Invalid,
            None => LoopControlReading::Missing,
        }
    } else if contract.artifact_kind == crate::capabilities::OBSERVATION_ARTIFACT_KIND {
        // Every observation the step sends is the contract's business (D40, D76): a malformed
        // one, a claim on the probe of its own capability, or a probe's observations that never
        // name the capability it probes make the output invalid.
        if !present {
            LoopControlReading::Missing
        } else if crate::capabilities::required_output_problem(&step.step_id, output).is_some() {
            LoopControlReading::Invalid
        } else {
            return Ok(None);
        }
    } else if contract.artifact_kind == crate::reports::DIVERGENCE_ARTIFACT_KIND {
        // Every marker the step sends is the contract's business (D42).
        let readings = crate::reports::read_divergences(wf, output);
        if readings.is_empty() {
            LoopControlReading::Missing
        } else if readings.iter().any(Result::is_err) {
            LoopControlReading::Invalid
        } else {
            return Ok(None);
        }
    } else if contract.artifact_kind == crate::lanes::BLOCK_OUTPUT_KIND && present {
        // Every block output the step sends is the contract's business (D160).
        let invalid = output.artifacts.iter().any(|a| {
            a.get("kind").and_then(|v| v.as_str()) == Some(crate::lanes::BLOCK_OUTPUT_KIND)
                && crate::lanes::block_output_invalid(a)
        });
        if invalid {
            LoopControlReading::Invalid
        } else {
            return Ok(None);
        }
    } else if present {
        return Ok(None);
    } else {
        LoopControlReading::Missing
    };
    let (reason, what) = match reading {
        LoopControlReading::Decision(_) => return Ok(None),
        LoopControlReading::Missing => (ContractViolationReason::MissingRequiredOutput, "a"),
        LoopControlReading::Invalid => (ContractViolationReason::InvalidRequiredOutput, "a valid"),
    };
    Ok(Some(Finding {
        reason: contract_violation(reason),
        pointer,
        message: format!(
            "step {} requires {what} {} artifact ({contract_ref})",
            step.step_id, contract.artifact_kind
        ),
        details: None,
        found_moving: false,
        per_rule: false,
    }))
}

fn contract_violation(reason: ContractViolationReason) -> ReasonCode {
    ReasonCode::new(GapReason::ContractViolation(reason))
}

/// The finding for a step whose `validationCriteria` the ack's notes fail, if any: no notes is
/// a missing output, failed rules an invalid one quoting each rule's message.
fn check_validation(
    wf: &CompiledWorkflowSnapshotV1,
    step: &PendingStep,
    output: &OutputInput,
    scope: &Map<String, Value>,
) -> Result<Vec<Finding>, InterpreterError> {
    let compiled = wf
        .step(&step.step_id)
        .ok_or_else(|| InterpreterError::Invariant(format!("unknown step {}", step.step_id)))?;
    let Some(criterion) = &compiled.language.validation else {
        return Ok(Vec::new());
    };
    let pointer = BlockerPointer::WorkflowStep {
        step_id: step.step_id.clone(),
    };
    let Some(notes) = &output.notes_markdown else {
        return Ok(vec![Finding {
            reason: contract_violation(ContractViolationReason::MissingRequiredOutput),
            pointer,
            message: format!(
                "step {} validates its notes: send output.notesMarkdown",
                step.step_id
            ),
            details: None,
            found_moving: false,
            per_rule: false,
        }]);
    };
    let mut failed = language::failed_rules(criterion, notes, scope);
    // One finding per failed rule, the ones past the sixth joined into the sixth.
    if failed.len() > MAX_VALIDATION_FINDINGS {
        let rest = failed.split_off(MAX_VALIDATION_FINDINGS - 1);
        failed.push(rest.join("; "));
    }
    Ok(failed
        .into_iter()
        .map(|rule| Finding {
            reason: contract_violation(ContractViolationReason::InvalidRequiredOutput),
            pointer: pointer.clone(),
            message: format!(
                "step {}: the notes fail its validation: {rule}",
                step.step_id
            ),
            details: None,
            found_moving: false,
            per_rule: true,
        })
        .collect())
}

/// The most failed validation rules reported as separate findings (decision D153).
const MAX_VALIDATION_FINDINGS: usize = 6;

/// The finding for a loop whose context value is absent or of the wrong type.
fn missing_loop_context(
    loop_id: &LoopId,
    missing: &MissingLoopContext,
    completed_step: Option<&StepId>,
    first_step: Option<&StepId>,
) -> Finding {
    let pointer = match (
        ContextKey::parse(&missing.key),
        completed_step.or(first_step),
    ) {
        (Ok(key), _) => BlockerPointer::ContextKey { key },
        (Err(_), Some(step_id)) => BlockerPointer::WorkflowStep {
            step_id: step_id.clone(),
        },
        (Err(_), None) => BlockerPointer::ContextBudget,
    };
    let reason = if missing.wrong_type {
        ContractViolationReason::InvalidRequiredOutput
    } else {
        ContractViolationReason::MissingRequiredOutput
    };
    Finding {
        reason: contract_violation(reason),
        pointer,
        message: format!(
            "loop {loop_id} needs {} in context key {:?}: pass it in `context`",
            missing.wanted, missing.key
        ),
        details: None,
        found_moving: true,
        per_rule: false,
    }
}

/// Where execution is: the index in the top-level sequence, and the loop frames (each frame's
/// `body_index` is the running item of that loop's body).
#[derive(Debug, Clone, Default)]
struct Cursor {
    top: usize,
    frames: Vec<LoopFrame>,
    /// The top-level items passed by their run condition, and the forward walk's reach.
    revisit: Option<Revisit>,
}

impl Cursor {
    /// Moves past the current item of the innermost list.
    fn step_forward(&mut self) {
        match self.frames.last_mut() {
            Some(frame) => frame.body_index += 1,
            None => self.top += 1,
        }
    }
}

/// Finds the cursor of a pending step from the snapshot's loop stack.
fn locate(
    wf: &CompiledWorkflowSnapshotV1,
    step: &PendingStep,
    loop_stack: &[LoopFrame],
) -> Result<Cursor, InterpreterError> {
    let invariant = |detail: String| InterpreterError::Invariant(detail);
    let here = SequenceItem::Step {
        step_id: step.step_id.clone(),
    };
    let Some(outermost) = loop_stack.first() else {
        let top = wf
            .body
            .sequence
            .iter()
            .position(|item| *item == here)
            .ok_or_else(|| invariant(format!("step {} is not top-level", step.step_id)))?;
        return Ok(Cursor {
            top,
            frames: Vec::new(),
            revisit: None,
        });
    };
    let top = wf
        .body
        .sequence
        .iter()
        .position(|item| {
            *item
                == SequenceItem::Loop {
                    loop_id: outermost.loop_id.clone(),
                }
        })
        .ok_or_else(|| invariant(format!("loop {} is not top-level", outermost.loop_id)))?;
    // Each frame's running item must be the next frame's loop, and the innermost the step.
    for (i, frame) in loop_stack.iter().enumerate() {
        let def = loop_def(wf, &frame.loop_id)?;
        let expected = match loop_stack.get(i + 1) {
            Some(inner) => SequenceItem::Loop {
                loop_id: inner.loop_id.clone(),
            },
            None => here.clone(),
        };
        if def.body.get(frame.body_index as usize) != Some(&expected) {
            return Err(invariant(format!(
                "loop {} bodyIndex {} does not hold {expected:?}",
                frame.loop_id, frame.body_index
            )));
        }
    }
    Ok(Cursor {
        top,
        frames: loop_stack.to_vec(),
        revisit: None,
    })
}

fn loop_def<'w>(
    wf: &'w CompiledWorkflowSnapshotV1,
    loop_id: &LoopId,
) -> Result<&'w CompiledLoop, InterpreterError> {
    wf.loop_def(loop_id)
        .ok_or_else(|| InterpreterError::Invariant(format!("unknown loop {loop_id}")))
}

fn condition<'w>(
    wf: &'w CompiledWorkflowSnapshotV1,
    def: &CompiledLoop,
) -> Result<&'w CompiledCondition, InterpreterError> {
    let LoopWhile::ConditionRef { condition_id } = &def.while_ else {
        return Err(InterpreterError::Invariant(format!(
            "loop {} is not a condition_ref loop",
            def.loop_id
        )));
    };
    wf.condition(condition_id)
        .ok_or_else(|| InterpreterError::Invariant(format!("unknown condition {condition_id}")))
}

struct Walker<'w, 'o> {
    wf: &'w CompiledWorkflowSnapshotV1,
    /// The ack's output (`None` when starting a run).
    output: Option<&'o OutputInput>,
    /// The step the ack completes (`None` when starting a run).
    completed_step: Option<&'o StepId>,
    autonomy: Autonomy,
    /// The context the walk reads (decision D139).
    context: &'o Map<String, Value>,
    disclosed: Vec<(Finding, GapSeverity)>,
    skipped: Vec<Skip>,
}

impl Walker<'_, '_> {
    /// The scope a condition sees inside `frames`.
    fn scope_of(&self, frames: &[LoopFrame]) -> Result<Map<String, Value>, InterpreterError> {
        let defs = frames
            .iter()
            .map(|f| loop_def(self.wf, &f.loop_id).map(|d| (d, f)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(language::scope(self.context, &defs))
    }

    /// The loop variables bound inside `frames`.
    fn overlay_of(&self, frames: &[LoopFrame]) -> Result<Map<String, Value>, InterpreterError> {
        let defs = frames
            .iter()
            .map(|f| loop_def(self.wf, &f.loop_id).map(|d| (d, f)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(language::loop_overlay(self.context, &defs))
    }

    /// At the top level: the position of the first remembered item whose run condition holds
    /// now, taken off the list (decision D154).
    fn revisitable(&self, cursor: &mut Cursor) -> Result<Option<usize>, InterpreterError> {
        let Some(revisit) = &mut cursor.revisit else {
            return Ok(None);
        };
        let holds = |item: &SequenceItem| -> Result<bool, InterpreterError> {
            let condition = match item {
                SequenceItem::Step { step_id } => self
                    .wf
                    .step(step_id)
                    .ok_or_else(|| InterpreterError::Invariant(format!("unknown step {step_id}")))?
                    .language
                    .run_condition
                    .as_ref(),
                SequenceItem::Loop { loop_id } => {
                    loop_def(self.wf, loop_id)?.run_condition.as_ref()
                }
            };
            Ok(condition.is_none_or(|c| c.evaluate(self.context)))
        };
        for (i, item) in revisit.skipped.iter().enumerate() {
            if holds(item)? {
                let item = revisit.skipped.remove(i);
                let position = self
                    .wf
                    .body
                    .sequence
                    .iter()
                    .position(|top| *top == item)
                    .ok_or_else(|| {
                        InterpreterError::Invariant(format!("{item:?} is not top-level"))
                    })?;
                return Ok(Some(position));
            }
        }
        Ok(None)
    }

    fn skip(&mut self, subject: Skipped, frames: &[LoopFrame], explanation: String) {
        self.skipped.push(Skip {
            subject,
            loop_path: path_of(frames),
            explanation,
        });
    }

    /// Whether a context-driven loop runs `iteration`; `None` for a `condition_ref` loop. A
    /// missing context value is a finding: `Err` holds the blocked progress, else the loop stops.
    fn context_rule(
        &mut self,
        def: &CompiledLoop,
        iteration: u32,
        outer: &[LoopFrame],
    ) -> Result<Option<bool>, Halt> {
        let scope = self.scope_of(outer).map_err(Halt::Error)?;
        match language::runs_iteration(def, iteration, self.context, &scope) {
            None => Ok(None),
            Some(Ok(runs)) => Ok(Some(runs)),
            Some(Err(missing)) => {
                let first = def.body.iter().find_map(|item| match item {
                    SequenceItem::Step { step_id } => Some(step_id),
                    SequenceItem::Loop { .. } => None,
                });
                let finding =
                    missing_loop_context(&def.loop_id, &missing, self.completed_step, first);
                // A run cannot start on a loop whose context is missing, in any mode: there is
                // no acknowledgement to block and nothing is recorded (decision D139).
                if self.completed_step.is_none() {
                    return Err(Halt::Blocked(Box::new(Progress::Blocked {
                        blocker: finding,
                        also: Vec::new(),
                        gaps: Vec::new(),
                    })));
                }
                match self.judge(finding) {
                    Some(blocked) => Err(Halt::Blocked(Box::new(blocked))),
                    None => Ok(Some(false)),
                }
            }
        }
    }
    /// [`Self::judge`] over the findings of one acknowledgement: every blocking one is a blocker
    /// (`Some`); the others are disclosed.
    fn judge_all(&mut self, findings: Vec<Finding>) -> Option<Progress> {
        let mut blocking = Vec::new();
        for finding in findings {
            if finding.reason.disposition(self.autonomy, true).blocks {
                blocking.push(finding);
            } else {
                self.judge(finding);
            }
        }
        let mut blocking = blocking.into_iter();
        let first = blocking.next()?;
        let Some(Progress::Blocked {
            blocker, mut gaps, ..
        }) = self.judge(first)
        else {
            return None;
        };
        let also: Vec<Finding> = blocking.collect();
        for finding in &also {
            if let Some(severity) = finding.reason.disposition(self.autonomy, true).gap_severity {
                gaps.push((finding.clone(), severity));
            }
        }
        Some(Progress::Blocked {
            blocker,
            also,
            gaps,
        })
    }

    /// Applies the reason table: a blocking finding ends the walk (`Some`), a non-blocking one
    /// is disclosed and the walk goes on (`None`).
    fn judge(&mut self, finding: Finding) -> Option<Progress> {
        // The model's findings concern a step's declared (so required) output or a loop limit:
        // their subject is always required.
        let disposition = finding.reason.disposition(self.autonomy, true);
        if disposition.blocks {
            let mut gaps = std::mem::take(&mut self.disclosed);
            if let Some(severity) = disposition.gap_severity {
                gaps.push((finding.clone(), severity));
            }
            return Some(Progress::Blocked {
                blocker: finding,
                also: Vec::new(),
                gaps,
            });
        }
        // One disclosure per (reason, pointer) and ack: a missing loop-control artifact is both the
        // decision step's missing output and the loop's missing decision, one gap says it.
        // Two loops missing the same context key are two facts, each disclosed.
        // Each failed validation rule is its own fact too (decision D153).
        let repeated = self.disclosed.iter().any(|(f, _)| {
            f.reason == finding.reason
                && f.pointer == finding.pointer
                && !((finding.found_moving || finding.per_rule) && f.message != finding.message)
        });
        if let Some(severity) = disposition.gap_severity
            && !repeated
        {
            self.disclosed.push((finding, severity));
        }
        None
    }

    /// Walks forward from `cursor` to the next step (pending) or the end (complete).
    fn settle(self, cursor: Cursor, completed: CompletedSet) -> Result<Progress, InterpreterError> {
        match self.walk(cursor, completed) {
            Ok(progress) => Ok(progress),
            Err(Halt::Blocked(progress)) => Ok(*progress),
            Err(Halt::Error(e)) => Err(e),
        }
    }

    fn walk(mut self, mut cursor: Cursor, mut completed: CompletedSet) -> Result<Progress, Halt> {
        loop {
            // A context-driven loop checks its rule again before every later item of a running
            // iteration (its first item was just decided, and after its last the next
            // iteration is): a call whose context ends a `while` leaves the loop at once.
            if let Some(frame) = cursor.frames.last().cloned() {
                let def = loop_def(self.wf, &frame.loop_id)?;
                let outer = &cursor.frames[..cursor.frames.len() - 1];
                let within = frame.body_index > 0 && (frame.body_index as usize) < def.body.len();
                if within && let Some(false) = self.context_rule(def, frame.iteration, outer)? {
                    end_iteration(&mut cursor, &mut completed, false);
                    continue;
                }
            }
            let (list, index) = match cursor.frames.last() {
                None => {
                    if let Some(revisit) = &cursor.revisit {
                        cursor.top = cursor.top.max(revisit.frontier as usize);
                    }
                    if let Some(index) = self.revisitable(&mut cursor)? {
                        // Out of order: the forward walk's reach stays where it was.
                        (&self.wf.body.sequence, index)
                    } else {
                        let index = cursor.top;
                        if let Some(revisit) = &mut cursor.revisit {
                            revisit.frontier = revisit.frontier.max(reach(index)?);
                        }
                        (&self.wf.body.sequence, index)
                    }
                }
                Some(frame) => (
                    &loop_def(self.wf, &frame.loop_id)?.body,
                    frame.body_index as usize,
                ),
            };
            if let Some(item) = list.get(index) {
                match item {
                    SequenceItem::Step { step_id } => {
                        let step = self.wf.step(step_id).ok_or_else(|| {
                            InterpreterError::Invariant(format!("unknown step {step_id}"))
                        })?;
                        let scope = self.scope_of(&cursor.frames)?;
                        if let Some(condition) = &step.language.run_condition
                            && !condition.evaluate(&scope)
                        {
                            let why = condition.explain(&scope);
                            self.skip(Skipped::Step(step_id.clone()), &cursor.frames, why);
                            remember(&mut cursor, item, index)?;
                            cursor.step_forward();
                            continue;
                        }
                        let overlay = self.overlay_of(&cursor.frames)?;
                        let bindings = language::bindings(step, &scope, &overlay);
                        return Ok(self.pending_at(cursor, completed, step_id.clone(), bindings));
                    }
                    SequenceItem::Loop { loop_id } => {
                        let def = loop_def(self.wf, loop_id)?;
                        if let Some(condition) = &def.run_condition {
                            let scope = self.scope_of(&cursor.frames)?;
                            if !condition.evaluate(&scope) {
                                let why = condition.explain(&scope);
                                self.skip(Skipped::Loop(loop_id.clone()), &cursor.frames, why);
                                remember(&mut cursor, item, index)?;
                                cursor.step_forward();
                                continue;
                            }
                        }
                        let enters = match self.context_rule(def, 0, &cursor.frames.clone())? {
                            Some(runs) => runs,
                            None => match condition(self.wf, def)? {
                                CompiledCondition::AlwaysTrue { .. } => true,
                                CompiledCondition::AlwaysFalse { .. } => false,
                                // Do-while: the decision is made at the end of each iteration.
                                CompiledCondition::LoopControl { .. } => true,
                            },
                        };
                        if enters {
                            if cursor.frames.is_empty() {
                                // A revisited loop is entered from its own place.
                                cursor.top = index;
                            }
                            cursor.frames.push(LoopFrame {
                                loop_id: loop_id.clone(),
                                iteration: 0,
                                body_index: 0,
                            });
                        } else if cursor.frames.is_empty() {
                            cursor.top = index + 1;
                        } else {
                            cursor.step_forward();
                        }
                    }
                }
                continue;
            }
            // End of a list: the workflow is complete, or an iteration of the innermost loop ended.
            let Some(frame) = cursor.frames.last().cloned() else {
                return Ok(Progress::Moved {
                    state: EngineState::Complete,
                    disclosed: self.disclosed,
                    skipped: self.skipped,
                });
            };
            let def = loop_def(self.wf, &frame.loop_id)?;
            let outer = cursor.frames[..cursor.frames.len() - 1].to_vec();
            if let Some(runs) = self.context_rule(def, frame.iteration + 1, &outer)? {
                end_iteration(&mut cursor, &mut completed, runs);
                continue;
            }
            let mut wants_continue = match condition(self.wf, def)? {
                CompiledCondition::AlwaysTrue { .. } => true,
                CompiledCondition::AlwaysFalse { .. } => false,
                CompiledCondition::LoopControl { continue_when, .. } => {
                    match read_loop_control(self.output, &frame.loop_id) {
                        LoopControlReading::Decision(decision) => decision == *continue_when,
                        reading => {
                            let finding = loop_control_finding(&frame.loop_id, reading);
                            if let Some(blocked) = self.judge(finding) {
                                return Ok(blocked);
                            }
                            false // never-stop: treat as `decision="stop"`
                        }
                    }
                }
            };
            // A fixed `always_true` loop is a bounded repeat: reaching its count is its locked
            // termination reason "max iterations reached" (locks §9 "Termination reason"). Only
            // an explicit `loop_control` `continue` at the last iteration attempts to continue
            // past the limit, the loop-limit failure (decision D73).
            let explicit_continue = matches!(
                condition(self.wf, def)?,
                CompiledCondition::LoopControl { .. }
            );
            if wants_continue && frame.iteration + 1 >= def.max_iterations && !explicit_continue {
                wants_continue = false;
            }
            if wants_continue && frame.iteration + 1 >= def.max_iterations {
                let finding = loop_limit_finding(&frame, def.max_iterations, self.completed_step);
                if let Some(blocked) = self.judge(finding) {
                    return Ok(blocked);
                }
                wants_continue = false;
            }
            end_iteration(&mut cursor, &mut completed, wants_continue);
        }
    }

    fn pending_at(
        self,
        cursor: Cursor,
        completed: CompletedSet,
        step_id: StepId,
        bindings: Bindings,
    ) -> Progress {
        Progress::Moved {
            state: EngineState::Running {
                completed,
                revisit: cursor.revisit,
                pending: Pending::Some {
                    step: PendingStep {
                        step_id,
                        loop_path: path_of(&cursor.frames),
                        bindings,
                    },
                },
                loop_stack: cursor.frames,
            },
            disclosed: self.disclosed,
            skipped: self.skipped,
        }
    }
}

/// Why a walk stopped before settling.
enum Halt {
    Blocked(Box<Progress>),
    Error(InterpreterError),
}

impl From<InterpreterError> for Halt {
    fn from(e: InterpreterError) -> Self {
        Self::Error(e)
    }
}

/// The frontier once the forward walk reached the top-level item at `index`.
fn reach(index: usize) -> Result<u32, InterpreterError> {
    u32::try_from(index + 1).map_err(|_| InterpreterError::Invariant("sequence too long".into()))
}

/// Remembers a top-level item its run condition passed (decision D154); nothing inside a loop.
fn remember(
    cursor: &mut Cursor,
    item: &SequenceItem,
    index: usize,
) -> Result<(), InterpreterError> {
    if !cursor.frames.is_empty() {
        return Ok(());
    }
    let frontier = reach(index)?;
    let revisit = cursor.revisit.get_or_insert(Revisit {
        skipped: Vec::new(),
        frontier,
    });
    revisit.frontier = revisit.frontier.max(frontier);
    if !revisit.skipped.contains(item) {
        revisit.skipped.push(item.clone());
    }
    Ok(())
}

fn path_of(frames: &[LoopFrame]) -> Vec<LoopPathEntry> {
    frames
        .iter()
        .map(|f| LoopPathEntry {
            loop_id: f.loop_id.clone(),
            iteration: f.iteration,
        })
        .collect()
}

/// Ends the running iteration of the innermost loop: its step instances leave the completed set
/// (D62); then the next iteration starts (`again`) or the loop is left.
fn end_iteration(cursor: &mut Cursor, completed: &mut CompletedSet, again: bool) {
    let ended = path_of(&cursor.frames);
    *completed = CompletedSet::new(
        completed
            .keys()
            .iter()
            .filter(|key| !key.loop_path.starts_with(&ended))
            .cloned(),
    );
    if again {
        if let Some(top) = cursor.frames.last_mut() {
            top.iteration += 1;
            top.body_index = 0;
        }
    } else {
        cursor.frames.pop();
        cursor.step_forward();
    }
}

fn loop_control_finding(loop_id: &LoopId, reading: LoopControlReading) -> Finding {
    let (reason, what) = match reading {
        LoopControlReading::Invalid => (ContractViolationReason::InvalidRequiredOutput, "invalid"),
        _ => (ContractViolationReason::MissingRequiredOutput, "missing"),
    };
    Finding {
        reason: contract_violation(reason),
        pointer: BlockerPointer::OutputContract {
            contract_ref: LOOP_CONTROL_CONTRACT_REF.to_owned(),
        },
        message: format!(
            "loop {loop_id}: {what} {LOOP_CONTROL_ARTIFACT_KIND} artifact; a loop never exits implicitly"
        ),
        details: None,
        found_moving: false,
        per_rule: false,
    }
}

/// A loop-limit failure. The closed pointer set has no loop pointer, so the blocker points at
/// the step whose completion ended the iteration (or, when a run starts, at the loop-control
/// contract); the loop id, iteration and maxIterations travel in the details and the message.
fn loop_limit_finding(
    frame: &LoopFrame,
    max_iterations: u32,
    completed_step: Option<&StepId>,
) -> Finding {
    let pointer = match completed_step {
        Some(step_id) => BlockerPointer::WorkflowStep {
            step_id: step_id.clone(),
        },
        None => BlockerPointer::OutputContract {
            contract_ref: LOOP_CONTROL_CONTRACT_REF.to_owned(),
        },
    };
    Finding {
        reason: ReasonCode::new(GapReason::Unexpected(UnexpectedReason::InvariantViolation)),
        pointer,
        message: format!(
            "loop limit reached: loopId={} iteration={} maxIterations={}; a continue decision at the last allowed iteration fails",
            frame.loop_id, frame.iteration, max_iterations
        ),
        details: Some(ReasonDetails::LoopLimit {
            loop_id: frame.loop_id.clone(),
            iteration: frame.iteration,
            max_iterations,
        }),
        found_moving: true,
        per_rule: false,
    }
}

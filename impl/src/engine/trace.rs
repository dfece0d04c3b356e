//! Decision trace entries for loop control flow and step selection (locks §1
//! "decision_trace_appended", "Loop trace completeness"): every loop entry, every condition
//! evaluation that decides control flow and every loop exit is recorded, with typed refs.

use workrail_spec::closed::DecisionTraceKind;
use workrail_spec::compiled::SequenceItem;
use workrail_spec::event::{TraceEntry, TraceRef};
use workrail_spec::ids::{ConditionId, LoopId, StepId};
use workrail_spec::snapshot::LoopFrame;

/// Why a loop ended: exactly one of the two locked reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    ConditionFalse,
    MaxIterationsReached,
}

fn entry(kind: DecisionTraceKind, summary: String, refs: Vec<TraceRef>) -> TraceEntry {
    TraceEntry {
        kind,
        summary: summary.into(),
        refs: Some(refs.into()),
    }
}

fn loop_ref(loop_id: &LoopId) -> TraceRef {
    TraceRef::LoopId {
        loop_id: loop_id.clone(),
    }
}

pub(crate) fn entered(loop_id: &LoopId, max_iterations: u32) -> TraceEntry {
    entry(
        DecisionTraceKind::EnteredLoop,
        format!("Reached loop '{loop_id}' (maxIterations {max_iterations})."),
        vec![loop_ref(loop_id)],
    )
}

pub(crate) fn evaluated(
    loop_id: &LoopId,
    condition_id: &ConditionId,
    iteration: u32,
    result: bool,
    why: &str,
) -> TraceEntry {
    entry(
        DecisionTraceKind::EvaluatedCondition,
        format!(
            "Condition '{condition_id}' of loop '{loop_id}' at iteration {iteration}: {result} ({why})."
        ),
        vec![
            loop_ref(loop_id),
            TraceRef::ConditionId {
                condition_id: condition_id.clone(),
            },
            TraceRef::Iteration { value: iteration },
        ],
    )
}

/// `iterations` is how many body iterations ran (0 for a loop that never ran).
pub(crate) fn exited(loop_id: &LoopId, iterations: u32, termination: Termination) -> TraceEntry {
    let why = match termination {
        Termination::ConditionFalse => "its condition evaluated false",
        Termination::MaxIterationsReached => "max iterations reached",
    };
    let mut refs = vec![loop_ref(loop_id)];
    if let Some(last) = iterations.checked_sub(1) {
        refs.push(TraceRef::Iteration { value: last });
    }
    entry(
        DecisionTraceKind::ExitedLoop,
        format!("Exited loop '{loop_id}' after {iterations} iteration(s): {why}."),
        refs,
    )
}

pub(crate) fn selected(step_id: &StepId, frames: &[LoopFrame]) -> TraceEntry {
    let mut refs = vec![TraceRef::StepId {
        step_id: step_id.clone(),
    }];
    let summary = match frames.last() {
        Some(frame) => {
            refs.push(loop_ref(&frame.loop_id));
            refs.push(TraceRef::Iteration {
                value: frame.iteration,
            });
            format!(
                "Next step '{step_id}': body index {} of loop '{}' iteration {}.",
                frame.body_index, frame.loop_id, frame.iteration
            )
        }
        None => format!("Next step '{step_id}' in workflow order."),
    };
    entry(DecisionTraceKind::SelectedNextStep, summary, refs)
}

fn position_refs(frames: &[LoopFrame], refs: &mut Vec<TraceRef>) -> String {
    match frames.last() {
        Some(frame) => {
            refs.push(loop_ref(&frame.loop_id));
            refs.push(TraceRef::Iteration {
                value: frame.iteration,
            });
            format!(" (loop '{}' iteration {})", frame.loop_id, frame.iteration)
        }
        None => String::new(),
    }
}

/// A step's `runCondition` decided whether it runs; `explained` is `Condition::explain` over
/// the values read.
pub(crate) fn step_condition(
    step_id: &StepId,
    frames: &[LoopFrame],
    holds: bool,
    explained: &str,
) -> TraceEntry {
    let mut refs = vec![TraceRef::StepId {
        step_id: step_id.clone(),
    }];
    let at = position_refs(frames, &mut refs);
    let verdict = if holds {
        "runs: its runCondition holds"
    } else {
        "skipped: its runCondition is false"
    };
    entry(
        DecisionTraceKind::EvaluatedCondition,
        format!("Step '{step_id}'{at} {verdict}: {explained}."),
        refs,
    )
}

/// A top-level item skipped earlier runs now, out of order: its `runCondition` holds over the
/// context of this call (decision D154).
pub(crate) fn revisited(item: &SequenceItem, explained: &str) -> TraceEntry {
    let (what, refs) = match item {
        SequenceItem::Step { step_id } => (
            format!("Step '{step_id}'"),
            vec![TraceRef::StepId {
                step_id: step_id.clone(),
            }],
        ),
        SequenceItem::Loop { loop_id } => (format!("Loop '{loop_id}'"), vec![loop_ref(loop_id)]),
    };
    entry(
        DecisionTraceKind::EvaluatedCondition,
        format!(
            "{what} runs now, out of order: it was skipped earlier and its runCondition holds: {explained}."
        ),
        refs,
    )
}

/// A loop's `runCondition` decided whether it is entered at all.
pub(crate) fn loop_condition(
    loop_id: &LoopId,
    frames: &[LoopFrame],
    holds: bool,
    explained: &str,
) -> TraceEntry {
    let mut refs = vec![loop_ref(loop_id)];
    let at = position_refs(frames, &mut refs);
    let verdict = if holds {
        "runs: its runCondition holds"
    } else {
        "skipped (no iteration): its runCondition is false"
    };
    entry(
        DecisionTraceKind::EvaluatedCondition,
        format!("Loop '{loop_id}'{at} {verdict}: {explained}."),
        refs,
    )
}

/// A loop that decides over the context (`while`, `until`, `for`, `forEach`) decided whether
/// 0-based iteration `iteration` starts.
pub(crate) fn evaluated_loop(
    loop_id: &LoopId,
    iteration: u32,
    result: bool,
    why: &str,
) -> TraceEntry {
    entry(
        DecisionTraceKind::EvaluatedCondition,
        format!("Loop '{loop_id}' before iteration {iteration}: {result} ({why})."),
        vec![loop_ref(loop_id), TraceRef::Iteration { value: iteration }],
    )
}

/// A loop stopped at `maxIterations` although its condition still held.
pub(crate) fn exited_holding(loop_id: &LoopId, iterations: u32) -> TraceEntry {
    let mut refs = vec![loop_ref(loop_id)];
    if let Some(last) = iterations.checked_sub(1) {
        refs.push(TraceRef::Iteration { value: last });
    }
    entry(
        DecisionTraceKind::ExitedLoop,
        format!(
            "Exited loop '{loop_id}' after {iterations} iteration(s): max iterations reached while its condition still held."
        ),
        refs,
    )
}

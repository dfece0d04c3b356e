//! Decision trace entries for loop control flow and step selection (locks §1
//! "decision_trace_appended", "Loop trace completeness"): every loop entry, every condition
//! evaluation that decides control flow and every loop exit is recorded, with typed refs.

use workrail_spec::closed::DecisionTraceKind;
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
        summary,
        refs: Some(refs),
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

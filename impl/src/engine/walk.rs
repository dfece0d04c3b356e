//! Walking the compiled sequence: locating the pending step, entering and leaving loops, and
//! settling on the next pending step (locks §9 "Loop iteration semantics").
//!
//! Loop semantics: iterations are 0-based; `maxIterations` is a count; the iteration number
//! increments only when the next iteration starts. Fixed conditions (`always_true`,
//! `always_false`) are evaluated on entry and after each iteration; a `loop_control` loop runs its
//! first iteration and is evaluated after each iteration from that iteration's decision. A loop
//! ends for exactly one reason: its condition evaluated false, or max iterations reached. An
//! explicit `loop_control` request to continue when no iteration is left is a loop-limit
//! failure (blocked, or a critical gap in never-stop).

use workrail_spec::closed::{Autonomy, LoopDecision};
use workrail_spec::compiled::{
    CompiledCondition, CompiledLoop, CompiledWorkflowSnapshotV1, LoopWhile, SequenceItem,
};
use workrail_spec::event::TraceEntry;
use workrail_spec::ids::{LoopId, StepId};
use workrail_spec::skey::LoopPathEntry;
use workrail_spec::snapshot::LoopFrame;

use super::findings;
use super::outcome::{EngineError, Finding};
use super::trace::{self, Termination};

/// What ends the current iteration of the innermost loop, when it is a `loop_control` loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LoopSignal {
    /// The validated decision of this iteration.
    Decision(LoopDecision),
    /// Missing or invalid decision in never-stop: fail safe, the loop stops.
    ForcedStop,
}

/// Where the walk came to rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Landing {
    Pending(StepId),
    Complete,
}

/// Why the walk stopped without landing.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Halt {
    Blocked(Box<Finding>),
    Error(EngineError),
}

impl From<EngineError> for Halt {
    fn from(e: EngineError) -> Self {
        Self::Error(e)
    }
}

pub(crate) fn inconsistent(detail: impl Into<String>) -> EngineError {
    EngineError::Inconsistent(detail.into())
}

pub(crate) fn loop_def<'a>(
    compiled: &'a CompiledWorkflowSnapshotV1,
    loop_id: &LoopId,
) -> Result<&'a CompiledLoop, EngineError> {
    compiled
        .loop_def(loop_id)
        .ok_or_else(|| inconsistent(format!("loop {loop_id} is not in the compiled workflow")))
}

fn condition<'a>(
    compiled: &'a CompiledWorkflowSnapshotV1,
    def: &CompiledLoop,
) -> Result<&'a CompiledCondition, EngineError> {
    let LoopWhile::ConditionRef { condition_id } = &def.while_ else {
        return Err(inconsistent(format!(
            "loop {} is not a condition_ref loop",
            def.loop_id
        )));
    };
    compiled.condition(condition_id).ok_or_else(|| {
        inconsistent(format!(
            "condition {condition_id} is not in the compiled workflow"
        ))
    })
}

/// The walk state: the loop stack plus what was decided on the way.
pub(crate) struct Walker<'a> {
    pub compiled: &'a CompiledWorkflowSnapshotV1,
    pub autonomy: Autonomy,
    pub frames: Vec<LoopFrame>,
    pub trace: Vec<TraceEntry>,
    pub gaps: Vec<Finding>,
    /// The loop paths (`outer@i/.../loop@k`) of the iterations this walk ended, so the caller
    /// drops their step instances from the completed set (D62).
    pub ended_iterations: Vec<Vec<LoopPathEntry>>,
}

impl<'a> Walker<'a> {
    /// Records that the innermost frame's current iteration ended.
    fn end_iteration(&mut self) {
        let path = self
            .frames
            .iter()
            .map(|f| LoopPathEntry {
                loop_id: f.loop_id.clone(),
                iteration: f.iteration,
            })
            .collect();
        self.ended_iterations.push(path);
    }

    /// The sequence the innermost frame walks (the top-level sequence when no loop is active).
    fn container(&self) -> Result<&'a [SequenceItem], EngineError> {
        match self.frames.last() {
            None => Ok(&self.compiled.body.sequence),
            Some(frame) => Ok(&loop_def(self.compiled, &frame.loop_id)?.body),
        }
    }

    /// Walks from `index` in the innermost container to the next pending step or the end.
    /// `signal` is the decision that ends the current iteration of the innermost loop.
    pub(crate) fn settle(
        &mut self,
        mut index: usize,
        mut signal: Option<LoopSignal>,
        decided_by: Option<&StepId>,
    ) -> Result<Landing, Halt> {
        loop {
            let container = self.container()?;
            if let Some(item) = container.get(index) {
                if let Some(frame) = self.frames.last_mut() {
                    frame.body_index =
                        u32::try_from(index).map_err(|_| inconsistent("body index overflow"))?;
                }
                match item {
                    SequenceItem::Step { step_id } => {
                        self.trace.push(trace::selected(step_id, &self.frames));
                        return Ok(Landing::Pending(step_id.clone()));
                    }
                    SequenceItem::Loop { loop_id } => {
                        index = self.enter(loop_id, index)?;
                    }
                }
                continue;
            }
            // The end of a container: the workflow, or one iteration of the innermost loop.
            let Some(frame) = self.frames.last().cloned() else {
                return Ok(Landing::Complete);
            };
            let def = loop_def(self.compiled, &frame.loop_id)?;
            let cond = condition(self.compiled, def)?;
            let (result, why, explicit) = match cond {
                CompiledCondition::AlwaysTrue { .. } => (true, "always_true".to_owned(), false),
                CompiledCondition::AlwaysFalse { .. } => (false, "always_false".to_owned(), false),
                CompiledCondition::LoopControl { continue_when, .. } => match signal.take() {
                    Some(LoopSignal::Decision(d)) => (
                        d == *continue_when,
                        format!("loop_control decision '{d}', continueWhen '{continue_when}'"),
                        d == *continue_when,
                    ),
                    Some(LoopSignal::ForcedStop) => (
                        false,
                        "no valid loop_control decision; treated as stop in full_auto_never_stop"
                            .to_owned(),
                        false,
                    ),
                    None => {
                        return Err(inconsistent(format!(
                            "loop {} ended an iteration without a loop_control decision",
                            frame.loop_id
                        ))
                        .into());
                    }
                },
            };
            self.trace.push(trace::evaluated(
                &frame.loop_id,
                cond.condition_id(),
                frame.iteration,
                result,
                &why,
            ));
            let termination = if !result {
                Termination::ConditionFalse
            } else if frame.iteration.saturating_add(1) < def.max_iterations {
                self.end_iteration();
                if let Some(top) = self.frames.last_mut() {
                    top.iteration += 1;
                    top.body_index = 0;
                }
                index = 0;
                continue;
            } else if explicit {
                let step_id = decided_by
                    .cloned()
                    .ok_or_else(|| inconsistent("loop decision without a step"))?;
                let finding =
                    findings::loop_limit(def, cond, frame.iteration, step_id, self.autonomy);
                if finding.disposition.blocks {
                    return Err(Halt::Blocked(Box::new(finding)));
                }
                self.gaps.push(finding);
                Termination::MaxIterationsReached
            } else {
                Termination::MaxIterationsReached
            };
            self.trace.push(trace::exited(
                &frame.loop_id,
                frame.iteration + 1,
                termination,
            ));
            self.end_iteration();
            self.frames.pop();
            index = self.position_of_loop(&frame.loop_id)? + 1;
        }
    }

    /// Reaches loop `loop_id` at `index`; returns the index to continue from in the (possibly
    /// new) innermost container.
    fn enter(&mut self, loop_id: &LoopId, index: usize) -> Result<usize, Halt> {
        let def = loop_def(self.compiled, loop_id)?;
        let cond = condition(self.compiled, def)?;
        self.trace.push(trace::entered(loop_id, def.max_iterations));
        let runs = match cond {
            // Decided after each iteration from the decision step's artifact.
            CompiledCondition::LoopControl { .. } => true,
            CompiledCondition::AlwaysTrue { condition_id } => {
                self.trace.push(trace::evaluated(
                    loop_id,
                    condition_id,
                    0,
                    true,
                    "always_true, checked on entry",
                ));
                true
            }
            CompiledCondition::AlwaysFalse { condition_id } => {
                self.trace.push(trace::evaluated(
                    loop_id,
                    condition_id,
                    0,
                    false,
                    "always_false, checked on entry",
                ));
                false
            }
        };
        if !runs {
            self.trace
                .push(trace::exited(loop_id, 0, Termination::ConditionFalse));
            return Ok(index + 1);
        }
        if self.frames.iter().any(|f| &f.loop_id == loop_id) {
            return Err(
                inconsistent(format!("loop {loop_id} would be entered inside itself")).into(),
            );
        }
        self.frames.push(LoopFrame {
            loop_id: loop_id.clone(),
            iteration: 0,
            body_index: 0,
        });
        Ok(0)
    }

    /// The index of `loop_id` in the container that holds it (after its frame was popped).
    fn position_of_loop(&self, loop_id: &LoopId) -> Result<usize, EngineError> {
        match self.frames.last() {
            Some(parent) => Ok(parent.body_index as usize),
            None => self
                .compiled
                .body
                .sequence
                .iter()
                .position(|item| matches!(item, SequenceItem::Loop { loop_id: l } if l == loop_id))
                .ok_or_else(|| {
                    inconsistent(format!("loop {loop_id} is not in the top-level sequence"))
                }),
        }
    }
}

/// Checks that the loop stack and the pending step describe one place in the compiled workflow;
/// returns the pending step's index in its container.
pub(crate) fn locate(
    compiled: &CompiledWorkflowSnapshotV1,
    frames: &[LoopFrame],
    pending: &StepId,
) -> Result<usize, EngineError> {
    let mut container: &[SequenceItem] = &compiled.body.sequence;
    for (k, frame) in frames.iter().enumerate() {
        let def = loop_def(compiled, &frame.loop_id)?;
        let placed = if k == 0 {
            container.iter().any(
                |item| matches!(item, SequenceItem::Loop { loop_id } if loop_id == &frame.loop_id),
            )
        } else {
            let parent = &frames[k - 1];
            matches!(container.get(parent.body_index as usize), Some(SequenceItem::Loop { loop_id }) if loop_id == &frame.loop_id)
        };
        if !placed {
            return Err(inconsistent(format!(
                "loop {} is not where the loop stack says",
                frame.loop_id
            )));
        }
        if frame.iteration >= def.max_iterations {
            return Err(inconsistent(format!(
                "loop {} is at iteration {} but maxIterations is {}",
                frame.loop_id, frame.iteration, def.max_iterations
            )));
        }
        container = &def.body;
    }
    let index = match frames.last() {
        Some(frame) => frame.body_index as usize,
        None => container
            .iter()
            .position(|item| matches!(item, SequenceItem::Step { step_id } if step_id == pending))
            .ok_or_else(|| {
                inconsistent(format!("step {pending} is not in the top-level sequence"))
            })?,
    };
    match container.get(index) {
        Some(SequenceItem::Step { step_id }) if step_id == pending => Ok(index),
        _ => Err(inconsistent(format!(
            "pending step {pending} is not at body index {index}"
        ))),
    }
}

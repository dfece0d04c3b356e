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
//!
//! The workflow language adds (decision D139): run conditions on steps and loops, evaluated over
//! the context the walk is given (overlaid with the enclosing loops' variables) when the walk
//! reaches them, each evaluation traced; loops that decide over the context (`while`, `until`,
//! `for` with a count or a context key, `forEach`), decided before every iteration, the first
//! included; and the bindings a landed step freezes for its prompt.
//!
//! At the top level the language selects the first item not done whose run condition holds
//! (decision D154): an item passed by its condition is remembered in the state's `revisit`, and
//! each time the walk chooses at the top level the first remembered item whose condition holds
//! now runs, out of order, before the forward walk goes on from the first item it has not
//! reached. Inside a loop body the walk only goes forward, as the language's loop kernel does.

use std::collections::BTreeSet;

use serde_json::{Map, Value};
use workrail_spec::closed::{Autonomy, LoopDecision};
use workrail_spec::compiled::{
    CompiledCondition, CompiledLoop, CompiledStep, CompiledWorkflowSnapshotV1, LoopWhile,
    SequenceItem,
};
use workrail_spec::event::TraceEntry;
use workrail_spec::ids::{LoopId, StepId};
use workrail_spec::skey::LoopPathEntry;
use workrail_spec::snapshot::{Bindings, LoopFrame, Revisit};

use super::findings;
use super::outcome::{EngineError, Finding, LoopContextProblem};
use super::planted::{PlantedLanguageBug, planted};
use super::trace::{self, Termination};

/// What ends the current iteration of the innermost loop, when it is a `loop_control` loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LoopSignal {
    /// The validated decision of this iteration.
    Decision(LoopDecision),
    /// Missing or invalid decision in never-stop: fail safe, the loop stops.
    ForcedStop,
}

/// Where the walk came to rest: a pending step with the values its prompt reads, or the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Landing {
    Pending(StepId, Bindings),
    Complete,
}

/// Whether a loop that decides over the context starts an iteration.
enum Decision {
    Enter(String),
    Stop(String),
    Problem(LoopContextProblem),
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
    /// The context conditions and loops read (decision D139).
    pub context: &'a Map<String, Value>,
    /// The step whose acknowledgement this walk follows (`None` at start).
    pub acked: Option<StepId>,
    /// The top-level items passed by their run condition and the forward walk's reach (D154).
    pub revisit: Option<Revisit>,
}

/// The frontier once the forward walk reached the top-level item at `index`.
fn reach(index: usize) -> Result<u32, EngineError> {
    u32::try_from(index + 1).map_err(|_| inconsistent("top-level sequence too long"))
}

/// The JSON type name of a value, as messages show it.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The values of `keys`, loop variables (`overlay`) shadowing context keys.
fn view<'k>(
    overlay: &Map<String, Value>,
    context: &Map<String, Value>,
    keys: impl IntoIterator<Item = &'k str>,
) -> Map<String, Value> {
    keys.into_iter()
        .filter_map(|k| {
            overlay
                .get(k)
                .or_else(|| context.get(k))
                .map(|v| (k.to_owned(), v.clone()))
        })
        .collect()
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
            // A loop that decides over the context checks its rule again before every later
            // item of a running iteration, as the language's loop kernel does: a call whose
            // context ends a `while` leaves the loop at once (decision D139).
            if index > 0
                && index < container.len()
                && let Some(frame) = self.frames.last().cloned()
                && let Some(after) = self.recheck(&frame)?
            {
                index = after;
                continue;
            }
            // Whether the item at `index` runs out of order (its decision is already traced).
            let mut revisiting = false;
            if self.frames.is_empty() {
                if let Some(revisit) = &self.revisit {
                    index = index.max(revisit.frontier as usize);
                }
                match self.revisitable()? {
                    // Out of order: the forward walk's reach stays where it was.
                    Some(position) => {
                        index = position;
                        revisiting = true;
                    }
                    None => {
                        if let Some(revisit) = &mut self.revisit {
                            revisit.frontier = revisit.frontier.max(reach(index)?);
                        }
                    }
                }
            }
            if let Some(item) = container.get(index) {
                if let Some(frame) = self.frames.last_mut() {
                    frame.body_index =
                        u32::try_from(index).map_err(|_| inconsistent("body index overflow"))?;
                }
                match item {
                    SequenceItem::Step { step_id } => {
                        let step = self.compiled.step(step_id).ok_or_else(|| {
                            inconsistent(format!("step {step_id} is not in the compiled workflow"))
                        })?;
                        let overlay = self.overlay(&self.frames)?;
                        if let Some(cond) = &step.language.run_condition
                            && !revisiting
                        {
                            let values = view(&overlay, self.context, cond.reads());
                            let holds = cond.evaluate(&values);
                            if holds || !planted(PlantedLanguageBug::SkipNotTraced) {
                                self.trace.push(trace::step_condition(
                                    step_id,
                                    &self.frames,
                                    holds,
                                    &cond.explain(&values),
                                ));
                            }
                            if !holds {
                                self.remember(item, index)?;
                                index += 1;
                                continue;
                            }
                        }
                        self.trace.push(trace::selected(step_id, &self.frames));
                        let bindings = self.bindings(step, &overlay);
                        return Ok(Landing::Pending(step_id.clone(), bindings));
                    }
                    SequenceItem::Loop { loop_id } => {
                        index = self.enter(loop_id, index, revisiting)?;
                    }
                }
                continue;
            }
            // The end of a container: the workflow, or one iteration of the innermost loop.
            let Some(frame) = self.frames.last().cloned() else {
                return Ok(Landing::Complete);
            };
            let def = loop_def(self.compiled, &frame.loop_id)?;
            if !matches!(def.while_, LoopWhile::ConditionRef { .. }) {
                let next = frame.iteration.saturating_add(1);
                let outer = self.frames[..self.frames.len() - 1].to_vec();
                let termination = match self.decide(def, next, &outer)? {
                    Decision::Enter(why) => {
                        self.trace
                            .push(trace::evaluated_loop(&frame.loop_id, next, true, &why));
                        if next < def.max_iterations {
                            self.end_iteration();
                            if let Some(top) = self.frames.last_mut() {
                                top.iteration = next;
                                top.body_index = 0;
                            }
                            index = 0;
                            continue;
                        }
                        None
                    }
                    Decision::Stop(why) => {
                        self.trace
                            .push(trace::evaluated_loop(&frame.loop_id, next, false, &why));
                        Some(Termination::ConditionFalse)
                    }
                    // The loop is done anyway: what it would read no longer matters.
                    Decision::Problem(_) if next >= def.max_iterations => {
                        Some(Termination::MaxIterationsReached)
                    }
                    Decision::Problem(problem) => {
                        self.context_problem(problem)?;
                        Some(Termination::ConditionFalse)
                    }
                };
                self.trace.push(match termination {
                    Some(t) => trace::exited(&frame.loop_id, next, t),
                    None => trace::exited_holding(&frame.loop_id, next),
                });
                self.end_iteration();
                self.frames.pop();
                index = self.position_of_loop(&frame.loop_id)? + 1;
                continue;
            }
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
    /// Re-decides the running iteration of a context-driven loop before one of its later body
    /// items: `Some(index after the loop)` when the loop ends here, `None` when it goes on (or
    /// is a `condition_ref` loop, decided only between iterations).
    fn recheck(&mut self, frame: &LoopFrame) -> Result<Option<usize>, Halt> {
        let def = loop_def(self.compiled, &frame.loop_id)?;
        if matches!(def.while_, LoopWhile::ConditionRef { .. }) {
            return Ok(None);
        }
        let outer = self.frames[..self.frames.len() - 1].to_vec();
        match self.decide(def, frame.iteration, &outer)? {
            Decision::Enter(_) => return Ok(None),
            Decision::Stop(why) => {
                self.trace.push(trace::evaluated_loop(
                    &frame.loop_id,
                    frame.iteration,
                    false,
                    &why,
                ));
            }
            Decision::Problem(problem) => self.context_problem(problem)?,
        }
        self.trace.push(trace::exited(
            &frame.loop_id,
            frame.iteration,
            Termination::ConditionFalse,
        ));
        self.end_iteration();
        self.frames.pop();
        Ok(Some(self.position_of_loop(&frame.loop_id)? + 1))
    }

    /// `decided`: its run condition was already decided and traced (a revisit, D154).
    fn enter(&mut self, loop_id: &LoopId, index: usize, decided: bool) -> Result<usize, Halt> {
        let def = loop_def(self.compiled, loop_id)?;
        if self.frames.iter().any(|f| &f.loop_id == loop_id) {
            return Err(
                inconsistent(format!("loop {loop_id} would be entered inside itself")).into(),
            );
        }
        if let Some(cond) = &def.run_condition
            && !decided
        {
            let overlay = self.overlay(&self.frames)?;
            let values = view(&overlay, self.context, cond.reads());
            let holds = cond.evaluate(&values);
            self.trace.push(trace::loop_condition(
                loop_id,
                &self.frames,
                holds,
                &cond.explain(&values),
            ));
            if !holds {
                self.remember(
                    &SequenceItem::Loop {
                        loop_id: loop_id.clone(),
                    },
                    index,
                )?;
                return Ok(index + 1);
            }
        }
        self.trace.push(trace::entered(loop_id, def.max_iterations));
        let runs = if matches!(def.while_, LoopWhile::ConditionRef { .. }) {
            self.first_iteration_by_condition(loop_id, def)?
        } else {
            let outer = self.frames.clone();
            match self.decide(def, 0, &outer)? {
                Decision::Enter(why) => {
                    self.trace
                        .push(trace::evaluated_loop(loop_id, 0, true, &why));
                    true
                }
                Decision::Stop(why) => {
                    self.trace
                        .push(trace::evaluated_loop(loop_id, 0, false, &why));
                    false
                }
                Decision::Problem(problem) => {
                    self.context_problem(problem)?;
                    false
                }
            }
        };
        if !runs {
            self.trace
                .push(trace::exited(loop_id, 0, Termination::ConditionFalse));
            return Ok(index + 1);
        }
        self.frames.push(LoopFrame {
            loop_id: loop_id.clone(),
            iteration: 0,
            body_index: 0,
        });
        Ok(0)
    }

    /// Whether a `condition_ref` loop runs its first iteration: a `loop_control` loop always does
    /// (decided after each iteration from the decision step's artifact), a fixed condition is
    /// checked on entry.
    fn first_iteration_by_condition(
        &mut self,
        loop_id: &LoopId,
        def: &CompiledLoop,
    ) -> Result<bool, Halt> {
        Ok(match condition(self.compiled, def)? {
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
        })
    }

    /// The variables `frames` bind (outer loops first, so inner ones shadow them): each loop's
    /// iteration (1-based) and, for `forEach`, its item and index (0-based) when its array
    /// holds that many elements.
    fn overlay(&self, frames: &[LoopFrame]) -> Result<Map<String, Value>, EngineError> {
        loop_overlay(self.compiled, self.context, frames)
    }

    fn bind_loop(&self, def: &CompiledLoop, iteration: u32, out: &mut Map<String, Value>) {
        bind_loop(def, iteration, self.context, out);
    }

    /// Whether a loop that decides over the context starts 0-based iteration `iteration`,
    /// reading the context (and the loop variables of `outer`) now.
    fn decide(
        &self,
        def: &CompiledLoop,
        iteration: u32,
        outer: &[LoopFrame],
    ) -> Result<Decision, Halt> {
        let mut overlay = self.overlay(outer)?;
        // Borrowed, not cloned: a `forEach` array can be long, and only its length is read.
        fn lookup<'v>(
            key: &str,
            overlay: &'v Map<String, Value>,
            context: &'v Map<String, Value>,
        ) -> Option<&'v Value> {
            overlay
                .get(key)
                .or_else(|| context.get(key))
                .filter(|v| !v.is_null())
        }
        let problem = |key: &str, expected, found: Option<&Value>| {
            Decision::Problem(LoopContextProblem {
                loop_id: def.loop_id.clone(),
                key: key.to_owned(),
                expected,
                found: found.map(json_type),
            })
        };
        let at = iteration.saturating_add(1);
        Ok(match &def.while_ {
            LoopWhile::ContextWhile { condition } | LoopWhile::ContextUntil { condition } => {
                self.bind_loop(def, iteration, &mut overlay);
                let values = view(&overlay, self.context, condition.reads());
                let holds = condition.evaluate(&values);
                let until = matches!(def.while_, LoopWhile::ContextUntil { .. });
                let explained = condition.explain(&values);
                match (until, holds) {
                    (false, true) => Decision::Enter(format!("while {explained}: holds")),
                    (false, false) => Decision::Stop(format!("while {explained}: false")),
                    (true, false) => Decision::Enter(format!("until {explained}: not yet")),
                    (true, true) => Decision::Stop(format!("until {explained}: holds")),
                }
            }
            LoopWhile::Count { count } => {
                let count_ = if planted(PlantedLanguageBug::ForOffByOne) {
                    count.saturating_add(1)
                } else {
                    *count
                };
                if iteration < count_ {
                    Decision::Enter(format!("count {count}: iteration {at} of {count}"))
                } else {
                    Decision::Stop(format!("count {count}: all {count} iteration(s) ran"))
                }
            }
            LoopWhile::CountVar { var } => match lookup(var, &overlay, self.context) {
                Some(number @ Value::Number(n)) => {
                    let count = n.as_f64().unwrap_or(0.0);
                    let shown = workrail_spec::condition::js_string(Some(number));
                    if f64::from(iteration) < count {
                        Decision::Enter(format!("count from {var} = {shown}: iteration {at}"))
                    } else {
                        Decision::Stop(format!(
                            "count from {var} = {shown}: {iteration} iteration(s) ran"
                        ))
                    }
                }
                found => problem(var, "number", found),
            },
            LoopWhile::ForEach { items } => match lookup(items, &overlay, self.context) {
                Some(Value::Array(list)) => {
                    let len = list.len();
                    if (iteration as usize) < len {
                        Decision::Enter(format!("{items} has {len} element(s): element {at}"))
                    } else {
                        Decision::Stop(format!("{items} has {len} element(s): all were iterated"))
                    }
                }
                found => problem(items, "array", found),
            },
            LoopWhile::ConditionRef { .. } => {
                return Err(inconsistent(format!(
                    "loop {} is a condition_ref loop, not a context loop",
                    def.loop_id
                ))
                .into());
            }
        })
    }

    /// A loop cannot read its context value: at start an error for the caller; after an ack
    /// a finding that blocks, or in never-stop a gap (and the loop does not run on).
    fn context_problem(&mut self, problem: LoopContextProblem) -> Result<(), Halt> {
        let Some(step_id) = self.acked.clone() else {
            return Err(Halt::Error(EngineError::MissingContext(problem)));
        };
        let finding = findings::loop_context(problem, &step_id, self.autonomy);
        if finding.disposition.blocks {
            return Err(Halt::Blocked(Box::new(finding)));
        }
        self.gaps.push(finding);
        Ok(())
    }

    /// The values a step landing now freezes (decision D139): its context reads and every
    /// variable of its enclosing loops, loop variables shadowing context keys.
    fn bindings(&self, step: &CompiledStep, overlay: &Map<String, Value>) -> Bindings {
        if step.language.context_reads.is_empty() && overlay.is_empty() {
            return Bindings::default();
        }
        let keys: BTreeSet<&str> = step
            .language
            .context_reads
            .iter()
            .map(String::as_str)
            .chain(overlay.keys().map(String::as_str))
            .collect();
        Bindings(view(overlay, self.context, keys))
    }

    /// The index of `loop_id` in the container that holds it (after its frame was popped).
    /// Remembers a top-level item its run condition passed (D154); nothing inside a loop.
    fn remember(&mut self, item: &SequenceItem, index: usize) -> Result<(), EngineError> {
        if !self.frames.is_empty() {
            return Ok(());
        }
        let frontier = reach(index)?;
        let revisit = self.revisit.get_or_insert(Revisit {
            skipped: Vec::new(),
            frontier,
        });
        revisit.frontier = revisit.frontier.max(frontier);
        if !revisit.skipped.contains(item) {
            revisit.skipped.push(item.clone());
        }
        Ok(())
    }

    /// At the top level: the position of the first remembered item whose run condition holds
    /// over the context now, taken off the list (D154). Re-checks that still fail are not
    /// traced: the pass that remembered the item was.
    fn revisitable(&mut self) -> Result<Option<usize>, EngineError> {
        let Some(revisit) = &self.revisit else {
            return Ok(None);
        };
        let empty = Map::new();
        let mut found = None;
        for (i, item) in revisit.skipped.iter().enumerate() {
            let condition = match item {
                SequenceItem::Step { step_id } => self
                    .compiled
                    .step(step_id)
                    .ok_or_else(|| {
                        inconsistent(format!("step {step_id} is not in the compiled workflow"))
                    })?
                    .language
                    .run_condition
                    .as_ref(),
                SequenceItem::Loop { loop_id } => {
                    loop_def(self.compiled, loop_id)?.run_condition.as_ref()
                }
            };
            let Some(condition) = condition else {
                found = Some((i, "no runCondition".to_owned()));
                break;
            };
            let values = view(&empty, self.context, condition.reads());
            if condition.evaluate(&values) {
                found = Some((i, condition.explain(&values)));
                break;
            }
        }
        let Some((i, explained)) = found else {
            return Ok(None);
        };
        let Some(revisit) = &mut self.revisit else {
            return Ok(None);
        };
        let item = revisit.skipped.remove(i);
        self.trace.push(trace::revisited(&item, &explained));
        self.compiled
            .body
            .sequence
            .iter()
            .position(|top| *top == item)
            .map(Some)
            .ok_or_else(|| inconsistent(format!("{item:?} is not in the top-level sequence")))
    }

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

/// The variables `frames` bind over `context` (outer loops first, so inner ones shadow them):
/// each loop's iteration (1-based) and, for `forEach`, its item and index (0-based) when its
/// array holds that many elements.
pub(crate) fn loop_overlay(
    compiled: &CompiledWorkflowSnapshotV1,
    context: &Map<String, Value>,
    frames: &[LoopFrame],
) -> Result<Map<String, Value>, EngineError> {
    let mut out = Map::new();
    for frame in frames {
        let def = loop_def(compiled, &frame.loop_id)?;
        bind_loop(def, frame.iteration, context, &mut out);
    }
    Ok(out)
}

fn bind_loop(
    def: &CompiledLoop,
    iteration: u32,
    context: &Map<String, Value>,
    out: &mut Map<String, Value>,
) {
    if def.vars.is_empty() {
        return;
    }
    if let Some(name) = &def.vars.iteration_var {
        out.insert(name.clone(), Value::from(u64::from(iteration) + 1));
    }
    if let LoopWhile::ForEach { items } = &def.while_
        && let Some(item) = out
            .get(items)
            .or_else(|| context.get(items))
            .and_then(Value::as_array)
            .and_then(|a| a.get(iteration as usize))
            .cloned()
    {
        if let Some(name) = &def.vars.item_var {
            out.insert(name.clone(), item);
        }
        if let Some(name) = &def.vars.index_var {
            out.insert(name.clone(), Value::from(iteration));
        }
    }
}

/// The values of `keys` a condition reads, loop variables shadowing context keys.
pub(crate) fn values_of<'k>(
    overlay: &Map<String, Value>,
    context: &Map<String, Value>,
    keys: impl IntoIterator<Item = &'k str>,
) -> Map<String, Value> {
    view(overlay, context, keys)
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

//! The interpreter: a pure state machine over a compiled snapshot and an `EngineState`.
//!
//! `start(compiled, Init)` selects the first pending step. `advance_on(compiled, state, output,
//! autonomy, branch)` validates the pending step's required output (its contract, and for a loop
//! decision step the `wr.loop_control` artifact), judges the reports any step may carry
//! (capability observations, divergences, user-only dependencies; [`reports`]) against the
//! branch's durable facts, then either blocks (state unchanged) or completes the step and walks
//! to the next pending step, entering and leaving loops with a full decision trace. Nothing here
//! does I/O; the protocol layer derives `branch` from the log and records what it returns.

pub mod block_output;
pub mod contract;
pub mod fanin;
mod findings;
pub mod lanes;
mod language_loop_control;
#[cfg(feature = "test-mutations")]
pub use self::findings::plant_contract_pointer_names_the_kind;
pub use self::planted::PlantedLanguageBug;
#[cfg(feature = "test-mutations")]
pub use self::planted::plant_language_bug;
#[cfg(feature = "test-mutations")]
pub use self::reports::{plant_claim_judged_as_attempt, plant_unmarked_choice_accepted};
pub(crate) use findings::step_example;
pub(crate) use reports::probed_capability;
pub mod outcome;
pub mod planted;
pub mod render;
pub mod reports;
mod trace;
pub mod validation;
mod walk;

use serde_json::{Map, Value};
use workrail_spec::closed::{Autonomy, LoopDecision};
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::skey::LoopPathEntry;
use workrail_spec::snapshot::{
    CompletedSet, EngineState, LoopFrame, Pending, PendingStep, Revisit,
};
use workrail_spec::tools::OutputInput;

use self::contract::{ContractCheck, ContractProblem};
pub use self::outcome::{
    AdvanceOutcome, AssessmentFollowup, Blocked, BranchFacts, Divergence, EngineError, Finding,
    FindingDetail, HandedIn, LaneFact, LoopContextProblem, ObservedCapability, OpenGap, Reports,
    Resolution, Transition,
};
pub use self::trace::Termination;
use self::walk::{Halt, Landing, LoopSignal, Walker, inconsistent, locate};
use crate::builtins::contracts::{CAPABILITY_OBSERVATION, LOOP_CONTROL};

fn running(
    completed: CompletedSet,
    frames: Vec<LoopFrame>,
    landing: Landing,
    revisit: Option<Revisit>,
) -> Result<EngineState, EngineError> {
    let state = match landing {
        Landing::Complete => EngineState::Complete,
        Landing::Pending(step_id, bindings) => {
            let loop_path = frames
                .iter()
                .map(|f| LoopPathEntry {
                    loop_id: f.loop_id.clone(),
                    iteration: f.iteration,
                })
                .collect();
            EngineState::Running {
                completed,
                loop_stack: frames,
                revisit,
                pending: Pending::Some {
                    step: PendingStep {
                        step_id,
                        loop_path,
                        bindings,
                    },
                },
            }
        }
    };
    state.check().map_err(|e| inconsistent(e.to_string()))?;
    Ok(state)
}

/// Starts a run: from `Init` to the first pending step (or `Complete` when every loop is skipped).
pub fn start(
    compiled: &CompiledWorkflowSnapshotV1,
    state: &EngineState,
) -> Result<Transition, EngineError> {
    start_with(compiled, state, &Map::new())
}

/// Starts a run whose initial context is `context`: run conditions and loops the walk reaches
/// read it. A loop that cannot read its count or items from it is
/// [`EngineError::MissingContext`].
pub fn start_with(
    compiled: &CompiledWorkflowSnapshotV1,
    state: &EngineState,
    context: &Map<String, Value>,
) -> Result<Transition, EngineError> {
    if !matches!(state, EngineState::Init) {
        return Err(EngineError::AlreadyStarted);
    }
    let mut walker = Walker {
        compiled,
        // No output is judged on start, so the mode cannot matter.
        autonomy: Autonomy::Guided,
        frames: Vec::new(),
        trace: Vec::new(),
        gaps: Vec::new(),
        ended_iterations: Vec::new(),
        context,
        acked: None,
        revisit: None,
    };
    let landing = match walker.settle(0, None, None) {
        Ok(landing) => landing,
        Err(Halt::Error(e)) => return Err(e),
        Err(Halt::Blocked(_)) => return Err(inconsistent("start cannot hit a loop limit")),
    };
    Ok(Transition {
        state: running(
            CompletedSet::default(),
            walker.frames,
            landing,
            walker.revisit,
        )?,
        trace: walker.trace,
        gaps: Vec::new(),
        reports: Reports::default(),
    })
}

/// Acknowledges the pending step with the agent's `output` under the effective `autonomy`,
/// knowing nothing of the branch (every capability `unknown`, no open gaps).
pub fn advance(
    compiled: &CompiledWorkflowSnapshotV1,
    state: &EngineState,
    output: &OutputInput,
    autonomy: Autonomy,
) -> Result<AdvanceOutcome, EngineError> {
    advance_on(compiled, state, output, autonomy, &BranchFacts::default())
}

/// Acknowledges the pending step on a branch whose durable facts are `branch`: the step's
/// required output is validated, then every report of the ack is judged (capability
/// observations, divergences, user-only dependencies) and a step that depends on a required
/// capability is checked against its status; then the reason table decides (block, or disclose
/// and go on).
pub fn advance_on(
    compiled: &CompiledWorkflowSnapshotV1,
    state: &EngineState,
    output: &OutputInput,
    autonomy: Autonomy,
    branch: &BranchFacts,
) -> Result<AdvanceOutcome, EngineError> {
    let (completed, frames, pending, revisit) = match state {
        EngineState::Init => return Err(EngineError::NotStarted),
        EngineState::Complete => return Err(EngineError::AlreadyComplete),
        EngineState::Running {
            completed,
            loop_stack,
            pending: Pending::Some { step },
            revisit,
        } => (completed, loop_stack, step, revisit),
        EngineState::Running {
            pending: Pending::None,
            ..
        } => return Err(inconsistent("a running state without a pending step")),
    };
    state.check().map_err(|e| inconsistent(e.to_string()))?;
    let index = locate(compiled, frames, &pending.step_id)?;
    let step = compiled.step(&pending.step_id).ok_or_else(|| {
        inconsistent(format!(
            "step {} is not in the compiled workflow",
            pending.step_id
        ))
    })?;
    let loop_id = frames.last().map(|f| f.loop_id.as_str());

    let mut findings = Vec::new();
    let mut signal = None;
    let mut accepted: Option<reports::Accepted> = None;
    let contract_ref = step.output.as_ref().and_then(|o| o.contract_ref.as_deref());
    if let Some(contract_ref) = contract_ref {
        let contract = compiled
            .contract(contract_ref)
            .ok_or_else(|| inconsistent(format!("contract {contract_ref} is not embedded")))?;
        // A decision written for the language is read as the language reads it (D209).
        let (artifacts, read_problems) = if contract_ref == LOOP_CONTROL
            && step.language.language_loop_control
        {
            let (read, problems) =
                language_loop_control::read(compiled, &output.artifacts, loop_id, &step.step_id);
            (std::borrow::Cow::Owned(read), problems)
        } else {
            (
                std::borrow::Cow::Borrowed(&output.artifacts[..]),
                Vec::new(),
            )
        };
        let problems = match contract::check(contract, &artifacts).map_err(inconsistent)? {
            ContractCheck::Missing => Some(Vec::new()),
            ContractCheck::Invalid(mut problems) => {
                problems.splice(0..0, read_problems);
                Some(problems)
            }
            ContractCheck::Valid(_) if !read_problems.is_empty() => Some(read_problems),
            ContractCheck::Valid(artifacts) => {
                let mut problems: Vec<ContractProblem> = artifacts
                    .iter()
                    .flat_map(|(i, a)| {
                        reports::semantic_problems(compiled, step, contract_ref, *i, a)
                    })
                    .collect();
                // Outside any loop a decision decides nothing (D141): only its shape counts.
                if contract_ref == LOOP_CONTROL && problems.is_empty() && loop_id.is_some() {
                    match loop_decision(&artifacts, loop_id) {
                        Ok(decision) => signal = Some(LoopSignal::Decision(decision)),
                        Err(problem) => problems.push(problem),
                    }
                }
                if contract_ref == CAPABILITY_OBSERVATION && problems.is_empty() {
                    problems.extend(probe_mismatch(step, &artifacts));
                }
                if problems.is_empty() {
                    accepted = Some(artifacts);
                    None
                } else {
                    problems.truncate(contract::MAX_PROBLEMS);
                    Some(problems)
                }
            }
        };
        if let Some(problems) = problems {
            findings.push(findings::contract(
                contract, step, loop_id, problems, autonomy,
            ));
        }
    }
    let (report_findings, mut reports) = reports::Judge {
        compiled,
        step,
        artifacts: &output.artifacts,
        autonomy,
        branch,
        required: contract_ref.map(|r| (r, accepted.as_ref())),
    }
    .run()
    .map_err(inconsistent)?;
    findings.extend(report_findings);
    let scope = validation::Scope {
        compiled,
        frames,
        context: &branch.context,
    };
    findings
        .extend(validation::judge(compiled, step, output, &scope, autonomy).map_err(inconsistent)?);
    if let Some(spec) = &step.language.lanes {
        findings.extend(lanes::judge(step, spec, &branch.lanes, autonomy));
        reports
            .divergences
            .extend(lanes::sequential_divergence(step, branch, &reports));
    }
    if findings.iter().any(|f| f.disposition.blocks) {
        // The step is not done: a divergence describes completed work, so the agent sends it
        // again with the fix; observations are facts about the environment and are kept.
        reports.divergences.clear();
        let findings = spend_budget(step, branch, findings, autonomy);
        return Ok(AdvanceOutcome::Blocked(Blocked { findings, reports }));
    }
    if contract_ref == Some(LOOP_CONTROL) && signal.is_none() && loop_id.is_some() {
        // Never-stop with a missing or invalid decision: fail safe, never run away.
        signal = Some(LoopSignal::ForcedStop);
    }
    let mut walker = Walker {
        compiled,
        autonomy,
        frames: frames.clone(),
        trace: Vec::new(),
        gaps: findings,
        ended_iterations: Vec::new(),
        context: &branch.context,
        acked: Some(step.step_id.clone()),
        revisit: revisit.clone(),
    };
    match walker.settle(index + 1, signal, Some(&step.step_id)) {
        Ok(landing) => {
            let done = landing == Landing::Complete;
            let completed = completed_after(completed, pending, &walker.ended_iterations);
            let transition = Transition {
                state: running(completed, walker.frames, landing, walker.revisit)?,
                trace: walker.trace,
                gaps: walker.gaps,
                reports,
            };
            Ok(if done {
                AdvanceOutcome::Complete(transition)
            } else {
                AdvanceOutcome::Advanced(transition)
            })
        }
        Err(Halt::Blocked(finding)) => {
            let mut findings = walker.gaps;
            findings.push(*finding);
            reports.divergences.clear();
            let findings = spend_budget(step, branch, findings, autonomy);
            Ok(AdvanceOutcome::Blocked(Blocked { findings, reports }))
        }
        Err(Halt::Error(e)) => Err(e),
    }
}

/// A blocked attempt at a step whose attempt budget (`maxAttempts`, decision D142) is spent:
/// the blocking findings become one user-only dependency naming them, so the agent cannot keep
/// retrying alone; findings that only disclose stay as they are.
fn spend_budget(
    step: &workrail_spec::compiled::CompiledStep,
    branch: &BranchFacts,
    findings: Vec<Finding>,
    autonomy: Autonomy,
) -> Vec<Finding> {
    let Some(max) = step.language.max_attempts else {
        return findings;
    };
    if branch.blocked_attempts < max {
        return findings;
    }
    let (blocking, mut rest): (Vec<Finding>, Vec<Finding>) =
        findings.into_iter().partition(|f| f.disposition.blocks);
    if blocking.is_empty() {
        return rest;
    }
    rest.push(findings::attempt_budget(
        &step.step_id,
        max,
        branch.blocked_attempts,
        &blocking,
        autonomy,
    ));
    rest
}

/// The completed set after `pending` completed and the walk ended `ended_iterations`: the step's
/// instance is added, then every instance inside an ended iteration is dropped (D62). Nothing
/// consults an ended iteration's instances (the walk resumes by position), so keeping them
/// would only make every later snapshot, and so every advance, grow with the iteration count;
/// the log keeps each completion.
fn completed_after(
    completed: &CompletedSet,
    pending: &PendingStep,
    ended_iterations: &[Vec<LoopPathEntry>],
) -> CompletedSet {
    let mut completed = completed.clone();
    completed.insert(pending.instance_key());
    for ended in ended_iterations {
        completed.retain(|key| !key.loop_path.starts_with(ended));
    }
    completed
}

/// A probe injected for one capability must report on that capability: an observation of
/// another one says nothing about the capability this step exists to learn.
fn probe_mismatch(
    step: &workrail_spec::compiled::CompiledStep,
    artifacts: &[(usize, serde_json::Map<String, Value>)],
) -> Option<ContractProblem> {
    let probed = reports::probed_capability(step)?;
    if artifacts
        .iter()
        .any(|(_, a)| a.get("capability").and_then(Value::as_str) == Some(probed.as_str()))
    {
        return None;
    }
    let (index, found) = artifacts
        .first()
        .map(|(i, a)| {
            (
                *i,
                a.get("capability")
                    .and_then(Value::as_str)
                    .unwrap_or("(none)"),
            )
        })
        .unwrap_or((0, "(none)"));
    Some(ContractProblem {
        artifact_index: index,
        instance_path: "/capability".to_owned(),
        message: format!(
            "this probe asks about '{probed}', but the observation reports on '{found}'; set capability to '{probed}'"
        ),
    })
}

/// The decision of a schema-valid set of `wr.loop_control` artifacts (D45): each must name the
/// enclosing loop (one for another loop is an invalid output even beside a right one, so the
/// mistake is reported instead of skipped); the last one decides.
fn loop_decision(
    artifacts: &[(usize, serde_json::Map<String, Value>)],
    loop_id: Option<&str>,
) -> Result<LoopDecision, ContractProblem> {
    if let Some((index, named)) = artifacts.iter().find_map(|(i, a)| {
        let named = a.get("loopId").and_then(Value::as_str).unwrap_or_default();
        (Some(named) != loop_id).then_some((*i, named))
    }) {
        return Err(ContractProblem {
            artifact_index: index,
            instance_path: "/loopId".to_owned(),
            message: format!(
                "loopId '{named}' does not match the enclosing loop '{}'",
                loop_id.unwrap_or("(none)")
            ),
        });
    }
    let Some((index, artifact)) = artifacts.last() else {
        return Err(ContractProblem {
            artifact_index: 0,
            instance_path: String::new(),
            message: "no wr.loop_control artifact".to_owned(),
        });
    };
    artifact
        .get("decision")
        .and_then(Value::as_str)
        .and_then(LoopDecision::parse)
        .ok_or_else(|| ContractProblem {
            artifact_index: *index,
            instance_path: "/decision".to_owned(),
            message: "decision must be 'continue' or 'stop'".to_owned(),
        })
}

//! `continue_workflow`: rehydrate (pure), advance (one append plan), replay (from recorded
//! facts), fork (advance from a node that already has children).

use serde_json::{Map, Value};
use workrail_spec::blocker::Blocker;
use workrail_spec::budget::BoundedText;
use workrail_spec::closed::{
    AdvanceIntent, Capability, ContextSource, DecisionTraceKind, EdgeCauseKind, EdgeKind,
    GapSeverity, NodeKind, OutputChannel,
};
use workrail_spec::context::{ContextError, merge_context};
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::event::{
    AdvanceOutcome as Recorded, AdvanceRecorded, CapabilityObserved, ContextSet,
    DivergenceRecorded, EdgeCause, EdgeCreated, EventData, EventScope, EvidenceRef, GapRecorded,
    GapResolution, NodeCreated, NodeOutputAppended, OutputPayload, SessionEvent, TraceEntry,
};
use workrail_spec::ids::{AttemptId, EventId, NodeId, OutputId, RunId, SessionId};
use workrail_spec::snapshot::{EnginePayloadV1, EngineState, ExecutionSnapshotFileV1};
use workrail_spec::token::{AttemptPayload, StatePayload};
use workrail_spec::tools::{ContinueWorkflowInput, ExecutionOutput, OutputInput, Warning};

use super::derive::{self, AttemptKind};
use super::facts::Facts;
use super::preferences::{AckPreferences, requested};
use super::recap::recap;
use super::respond::{ResponseFacts, build};
use super::{NodeContext, Workrail, invariant, read_failed};
use crate::engine::{self, AdvanceOutcome, BranchFacts, Finding, OpenGap, Reports};
use crate::store::{AppendPlan, Events, SessionIntent, StoreError};

/// Which moment a response answers: what it repeats and what it adds depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Moment {
    /// The agent reaches the node (a start or an advance, and their replays).
    Arrival,
    /// The agent asks for the node again, maybe from a new chat: with a recap.
    Rehydrate,
    /// The agent stays at the node it just saw (blocked, checkpoint).
    Again,
}

/// Builds the response for `node` from a prefix of the log (fresh responses and replays use
/// this one function, so they are byte-identical).
#[allow(clippy::too_many_arguments)]
pub(super) fn respond_at(
    wr: &Workrail,
    prefix: Events<'_>,
    session: &SessionId,
    run: &RunId,
    node: &NodeId,
    ctx: &NodeContext,
    state: &EngineState,
    blockers: Vec<Blocker>,
    moment: Moment,
    attempt_record: Option<(&EventId, &[SessionEvent])>,
) -> Result<ExecutionOutput, ErrorEnvelope> {
    let facts = wr.memo.facts(session, prefix).map_err(read_failed)?;
    let view = facts
        .run(run)
        .ok_or_else(|| invariant("the run vanished from its own log"))?;
    let tip_complete = match &view.preferred_tip {
        Some(tip) if tip == node => state.is_complete(),
        Some(tip) => wr.snapshot_complete(&facts, run, tip),
        None => false,
    };
    let tip_prefs = view
        .preferred_tip
        .as_ref()
        .map_or(super::GLOBAL_DEFAULTS, |tip| facts.preferences(run, tip));
    let status = view.status(|_| tip_complete, tip_prefs.autonomy);
    let recap = if moment == Moment::Rehydrate {
        recap(&facts, run, node).map_err(read_failed)?
    } else {
        None
    };
    let branch_functions = super::functions::branch_context(
        wr,
        &facts,
        run,
        node,
        &ctx.compiled,
        state.pending_step().map(|p| &p.step_id),
        recap.as_ref(),
    );
    let mut output = build(
        ResponseFacts {
            session,
            run,
            node,
            compiled: &ctx.compiled,
            workflow_hash: &ctx.workflow_hash,
            state,
            preferences: facts.preferences(run, node),
            status,
            ack_ordinal: facts.advance_count(node) as u64,
            checkpoint_ordinal: facts.checkpoint_count(run, node),
            blockers,
            recap,
            branch_functions,
            capability_guidance: super::guidance::capability_guidance(
                wr, &facts, run, node, ctx, state, moment,
            ),
        },
        &wr.codec(),
    );
    if let Some((record, plan)) = attempt_record {
        output.warnings.extend(gap_warnings(plan, record));
    }
    // The preference warning is recorded on the node where the preferences changed; it is
    // news there, on a rehydrate (maybe a new chat) and at the start, not on every step (D175).
    let parent = facts.node(run, node).and_then(|n| n.parent.clone());
    let changed = parent
        .as_ref()
        .is_none_or(|p| facts.preferences(run, p) != facts.preferences(run, node));
    if moment != Moment::Rehydrate && !changed {
        output.warnings.retain(|w| w.preference_warning.is_none());
    }
    if state.is_complete() && status == workrail_spec::closed::RunStatus::CompleteWithGaps {
        output.warnings.extend(open_gaps_warning(view, node));
    }
    with_lanes(wr, &facts, session, run, node, ctx, state, &mut output)?;
    Ok(output)
}

/// At the end of a run that completed with critical gaps, which gaps they are (D175): what was
/// assumed or skipped, so the agent can tell the user instead of "completed with gaps".
fn open_gaps_warning(view: &crate::projections::RunView, node: &NodeId) -> Option<Warning> {
    const LISTED: usize = 5;
    let gaps: Vec<_> = view
        .open_gaps_on(node)
        .into_iter()
        .filter(|g| g.severity == GapSeverity::Critical)
        .collect();
    if gaps.is_empty() {
        return None;
    }
    let mut message = format!(
        "The run completed with {} unresolved critical gap(s); tell the user what each one left open:",
        gaps.len()
    );
    for g in gaps.iter().take(LISTED) {
        message.push_str(&format!(
            "\n- {} ({}): {}",
            g.gap_id,
            workrail_spec::reason::ReasonCode::new(g.reason),
            g.summary.as_str()
        ));
    }
    if gaps.len() > LISTED {
        message.push_str(&format!(
            "\n- and {} more: `workrail inspect` lists them all.",
            gaps.len() - LISTED
        ));
    }
    Some(Warning::new("open_gaps", message))
}

/// A parallel step's response hands out its lanes (decision D168); the step after it shows what
/// the lanes handed in (decision D169). Both read only the prefix being answered.
#[allow(clippy::too_many_arguments)]
fn with_lanes(
    wr: &Workrail,
    facts: &Facts<'_>,
    session: &SessionId,
    run: &RunId,
    node: &NodeId,
    ctx: &NodeContext,
    state: &EngineState,
    output: &mut ExecutionOutput,
) -> Result<(), ErrorEnvelope> {
    if let Some(link) = facts.run(run).and_then(|v| v.dag.started.lane.as_ref())
        && let Some(pending) = output.pending.as_mut()
    {
        let preamble = super::lanes::lane_preamble(wr, facts, link, run)?;
        pending.prompt = format!("{preamble}\n\n{}", pending.prompt);
    }
    if let Some(spec) = super::lanes::pending_lanes(&ctx.compiled, state) {
        let handles = super::lanes::handles(wr, facts, session, node, spec)?;
        if let Some(pending) = output.pending.as_mut() {
            pending.prompt = format!(
                "{}\n\n{}",
                pending.prompt,
                super::lanes::lanes_section(&handles)
            );
        }
        output.lanes = handles;
    }
    // A node still at the parallel step (its landing, or a checkpoint of it) shows the lanes,
    // not their results.
    if super::lanes::pending_lanes(&ctx.compiled, state).is_some() {
        return Ok(());
    }
    // A checkpoint shows what its step node shows.
    let step_node = super::lanes::landing_of(facts, node);
    let Some(parent) = facts.node(run, &step_node).and_then(|n| n.parent.clone()) else {
        return Ok(());
    };
    if super::lanes::lanes_of(facts, &parent).is_empty() {
        return Ok(());
    }
    let Some(parent_info) = facts.node(run, &parent) else {
        return Ok(());
    };
    let parent_state = wr
        .store
        .snapshot(&parent_info.snapshot_ref())
        .map_err(|e| e.to_envelope(true))?;
    let Some(spec) =
        super::lanes::pending_lanes(&ctx.compiled, &parent_state.engine_payload.engine_state)
    else {
        return Ok(());
    };
    let lane_facts = super::lanes::lane_facts(wr, facts, &parent);
    let fan = engine::lanes::fan_in(spec, &lane_facts);
    for conflict in fan.conflicts.iter().filter(|c| c.applied_from.is_some()) {
        output.warnings.push(Warning {
            code: "lane_conflict".into(),
            message: format!(
                "`{}` was changed by more than one lane; the lane that completed first (as recorded) wins under `workspace`: check the Lane results section.",
                conflict.conflicting_file
            ),
            preference_warning: None,
            pinned_drift: None,
        });
    }
    if let Some(pending) = output.pending.as_mut() {
        pending.prompt = format!(
            "{}\n\n{}",
            pending.prompt,
            super::lanes::results_section(spec, &lane_facts)
        );
    }
    Ok(())
}

/// When the attempt forked (its node already had a step child), says so in words: from which
/// step, what the other branch holds, and which branch is now the run's preferred tip. Built from
/// the recorded prefix, so replays stay identical; fails when the other branches' notes cannot
/// be read again.
fn fork_warning(
    facts: &Facts<'_>,
    ctx: &NodeContext,
    state: &StatePayload,
    new_node: &NodeId,
) -> Result<Option<Warning>, ErrorEnvelope> {
    let run = &state.run_id;
    let Some(from) = facts.node(run, &state.node_id) else {
        return Ok(None);
    };
    let siblings: Vec<&NodeId> = from
        .children
        .iter()
        .filter(|c| *c != new_node)
        .filter(|c| {
            facts
                .node(run, c)
                .is_some_and(|n| n.kind == workrail_spec::closed::NodeKind::Step)
        })
        .collect();
    if siblings.is_empty() {
        return Ok(None);
    }
    // The newest node of each other branch, and its latest notes.
    let newest_of = |root: &NodeId| facts.run(run)?.dag.newest_in_subtree(root);
    let step = ctx
        .state
        .pending_step()
        .map(|p| {
            ctx.compiled.step(&p.step_id).map_or_else(
                || p.step_id.to_string(),
                |s| crate::engine::render::title(s, &p.bindings),
            )
        })
        .unwrap_or_default();
    let mut others: Vec<String> = Vec::new();
    for tip in siblings.iter().filter_map(|s| newest_of(s)) {
        // A branch's notes that cannot be read again fail the answer (retryable) rather than
        // leave them out: the replay the agent's retry gets must be this very answer (D226).
        let notes = match facts.recap_notes(run, &tip.node_id).map_err(read_failed)? {
            Some(n) => {
                let line: String = n.split_whitespace().collect::<Vec<_>>().join(" ");
                let cut = workrail_spec::budget::floor_char_boundary(&line, 200);
                if cut < line.len() {
                    format!("\"{}…\"", &line[..cut])
                } else {
                    format!("\"{line}\"")
                }
            }
            None => "no notes".to_owned(),
        };
        others.push(format!(
            "a branch whose latest node {} notes {notes}",
            tip.node_id
        ));
    }
    Ok(Some(Warning::new(
        "forked",
        format!(
            "Forked: step \"{step}\" had already been acknowledged, so this call started a new branch from it; the earlier work stays ({}). This newest branch is now the run's preferred tip: rehydrates of the run and resume_session follow it. To go back to the other branch, rehydrate one of its stateTokens.",
            others.join("; ")
        ),
    )))
}

/// A warning when the acknowledged step asks for notes (`outputRequired.notesMarkdown`) and
/// the ack recorded none on the node it created: the step's recap stays empty.
fn missing_notes_warning(
    plan: &[SessionEvent],
    ctx: &NodeContext,
    new_node: &NodeId,
) -> Option<Warning> {
    let pending = ctx.state.pending_step()?;
    let step = ctx.compiled.step(&pending.step_id)?;
    if step.language.notes_optional {
        return None;
    }
    let asked = step
        .prompt_blocks
        .as_ref()?
        .output_required
        .get("notesMarkdown")?;
    let recorded = plan.iter().any(|e| {
        e.scope().node_id() == Some(new_node)
            && matches!(e.data(), EventData::NodeOutputAppended(o)
                if matches!(o.payload, OutputPayload::Notes { .. }))
    });
    (!recorded).then(|| {
        Warning::new(
            "notes_missing",
            format!(
                "Step \"{}\" asks for output.notesMarkdown ({asked}), and none was sent, so its recap is empty. Send it with the next acknowledgement, or record it now with checkpoint_workflow.",
                step.title
            ),
        )
    })
}

/// A warning when the notes `plan` recorded on `node` were cut to the budget: rebuilt from the
/// recorded notes, so replays stay identical.
pub(super) fn notes_warnings(plan: &[SessionEvent], node: &NodeId) -> Vec<Warning> {
    // The cheap test first: few notes end with the marker, so node ids are rarely compared.
    let truncated = plan.iter().any(|e| {
        matches!(e.data(), EventData::NodeOutputAppended(o)
                if matches!(&o.payload, OutputPayload::Notes { notes_markdown }
                    if notes_markdown.as_str().ends_with(workrail_spec::budget::TRUNCATION_MARKER)))
            && e.scope().node_id() == Some(node)
    });
    if !truncated {
        return Vec::new();
    }
    vec![Warning::new(
        "notes_truncated",
        format!(
            "Your output.notesMarkdown was longer than {} UTF-8 bytes and was recorded cut short (ending with [TRUNCATED]). Keep notes to a fresh recap of this step only; put long content in files and name them in the notes.",
            workrail_spec::budget::NOTES_MARKDOWN_MAX_BYTES
        ),
    )]
}

/// The gaps an ack attempt recorded (their evidence names its `advance_recorded`), as response
/// warnings: never-stop's "structured warnings plus durable disclosure" (contract "User-only
/// dependencies"), rebuilt from the log so replays stay byte-identical (decision D42).
fn gap_warnings(plan: &[SessionEvent], record: &EventId) -> Vec<Warning> {
    plan.iter()
        .filter_map(|e| match e.data() {
            EventData::GapRecorded(g)
                if g.evidence_refs.as_ref().is_some_and(|refs| {
                    refs.contains(&EvidenceRef::Event {
                        event_id: record.clone(),
                    })
                }) =>
            {
                Some(g)
            }
            _ => None,
        })
        .map(|g| {
            let reason = workrail_spec::reason::ReasonCode::new(g.reason);
            match &g.resolution {
                GapResolution::Resolves { resolves_gap_id } => Warning::new(
                    "gap_resolved",
                    format!(
                        "Gap {resolves_gap_id} ({reason}) is resolved: {}",
                        g.summary.as_str()
                    ),
                ),
                GapResolution::Unresolved => {
                    let next = match g.reason {
                        workrail_spec::reason::GapReason::UserOnlyDependency(r)
                            if g.severity == GapSeverity::Critical =>
                        {
                            format!(
                                " Continue with the most reasonable assumption and disclose it in output.notesMarkdown; once the user supplies it, report a `wr.user_only_dependency` artifact with `reason` `{r}` and `status` `supplied` to resolve this gap."
                            )
                        }
                        _ => String::new(),
                    };
                    Warning::new(
                        "gap_recorded",
                        format!(
                            "Recorded a {} gap {} ({reason}): {}{next}",
                            g.severity,
                            g.gap_id,
                            g.summary.as_str()
                        ),
                    )
                }
            }
        })
        .collect()
}

/// Rehydrate: the pending step of the token's node, a bounded recap, and the node's current
/// (fresh) ack attempt. Reads only; nothing can be written from here.
pub(super) fn rehydrate(
    wr: &Workrail,
    state: &StatePayload,
) -> Result<ExecutionOutput, ErrorEnvelope> {
    let ctx = wr.node_context(state)?;
    let mut output = respond_at(
        wr,
        ctx.loaded.events(),
        &state.session_id,
        &state.run_id,
        &state.node_id,
        &ctx,
        &ctx.state,
        Vec::new(),
        Moment::Rehydrate,
        None,
    )?;
    // Drift is about the sources now, not a recorded fact: it is reported where nothing is
    // replayed (a rehydrate), never inside an acknowledgement's recorded answer.
    output.warnings.extend(wr.pinned_drift(&ctx));
    Ok(output)
}

#[cfg(feature = "test-mutations")]
thread_local! {
    /// TEST-ONLY planted bug switch (feature `test-mutations`): see [`Workrail::plant_replay_from_current_log`].
    static REPLAY_FROM_CURRENT_LOG: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(feature = "test-mutations")]
impl Workrail {
    /// TEST-ONLY (feature `test-mutations`): while on, ack replays made *on the calling thread*
    /// are rebuilt from the current log instead of the recorded prefix (a planted
    /// replay-recomputes bug). Only the harness's mutation test turns it on.
    pub fn plant_replay_from_current_log(on: bool) {
        REPLAY_FROM_CURRENT_LOG.with(|c| c.set(on));
    }
}

/// Replays a recorded attempt: the response is rebuilt from the log prefix ending with its
/// `advance_recorded` (the last event of its plan). Nothing is recomputed.
fn replay(
    wr: &Workrail,
    ctx: &NodeContext,
    state: &StatePayload,
    record_index: usize,
    record: &AdvanceRecorded,
) -> Result<ExecutionOutput, ErrorEnvelope> {
    let prefix = ctx.loaded.events().prefix(record_index + 1);
    let record_id = prefix
        .get(record_index)
        .map_err(read_failed)?
        .ok_or_else(|| invariant("a recorded advance is past the end of its log"))?
        .event_id()
        .clone();
    // TEST-ONLY planted bug (feature `test-mutations`, off unless a test thread opts in):
    // rebuild the replay from today's log instead of the recorded prefix.
    #[cfg(feature = "test-mutations")]
    let prefix = if REPLAY_FROM_CURRENT_LOG.with(std::cell::Cell::get) {
        ctx.loaded.events()
    } else {
        prefix
    };
    // The attempt's own records (one plan is one segment): what its warnings are rebuilt from.
    let plan = prefix
        .range(
            ctx.loaded
                .plan_start(record_index)
                .map_err(read_failed)?
                .min(prefix.len())..prefix.len(),
        )
        .map_err(read_failed)?;
    let plan = &plan[..];
    match &record.outcome {
        Recorded::Blocked { blockers, .. } => respond_at(
            wr,
            prefix,
            &state.session_id,
            &state.run_id,
            &state.node_id,
            ctx,
            &ctx.state,
            blockers.blockers().to_vec(),
            Moment::Again,
            Some((&record_id, plan)),
        ),
        Recorded::Advanced { to_node_id } => {
            let mut truncated = notes_warnings(plan, to_node_id);
            truncated.extend(missing_notes_warning(plan, ctx, to_node_id));
            let facts = wr
                .memo
                .facts(&state.session_id, prefix)
                .map_err(read_failed)?;
            let info = facts
                .node(&state.run_id, to_node_id)
                .ok_or_else(|| invariant("a recorded advance names a node that does not exist"))?;
            let snapshot = wr
                .store
                .snapshot(&info.snapshot_ref())
                .map_err(|e| e.to_envelope(true))?;
            let to_state = snapshot.engine_payload.engine_state.clone();
            let mut output = respond_at(
                wr,
                prefix,
                &state.session_id,
                &state.run_id,
                to_node_id,
                ctx,
                &to_state,
                Vec::new(),
                Moment::Arrival,
                Some((&record_id, plan)),
            )?;
            output.warnings.extend(truncated);
            output
                .warnings
                .extend(fork_warning(&facts, ctx, state, to_node_id)?);
            Ok(output)
        }
    }
}

fn context_error(e: ContextError) -> ErrorEnvelope {
    match e {
        ContextError::OverBudget { measured_bytes, .. } => {
            ErrorEnvelope::context_over_budget("continue_workflow", measured_bytes)
        }
        other => ErrorEnvelope::new(
            ErrorCode::ValidationError,
            format!("continue_workflow: {other}"),
            "Pass `context` as a JSON object of external inputs (ids, paths, parameters) without the keys __proto__, constructor or prototype.",
            Retry::NotRetryable,
        ),
    }
}

/// Every record an advance writes, in plan order; `advance_recorded` is always last.
struct AdvancePlan {
    events: Vec<SessionEvent>,
    /// The new node's snapshot and its canonical (JCS) bytes, hashed once for its ref.
    snapshot: Option<(
        ExecutionSnapshotFileV1,
        workrail_spec::jcs::Canonical<ExecutionSnapshotFileV1>,
    )>,
    /// The agent's artifacts its outputs reference, to store before the plan is attested.
    artifacts: Vec<crate::store::PreparedArtifact>,
}

/// Advance with an ack attempt, or replay it when already recorded.
pub(super) fn advance(
    wr: &Workrail,
    state: &StatePayload,
    ack: &AttemptPayload,
    input: &ContinueWorkflowInput,
) -> Result<ExecutionOutput, ErrorEnvelope> {
    // Validate inputs before any I/O so bad input never reaches the store.
    let delta = input.context.as_ref();
    if let Some(delta) = delta {
        workrail_spec::context::check_context_map(delta).map_err(context_error)?;
    }
    requested("continue_workflow", input.preset, &input.preferences)?;
    if let Some(output) = &input.output {
        output.check("continue_workflow")?;
    }
    let ctx = wr.node_context(state)?;
    // Fast path without the lock: a recorded attempt is a replay.
    if let Some(outcome) = try_replay(wr, &ctx, state, &ack.attempt_id, Some(input))? {
        return Ok(outcome);
    }
    // Only the pinned workflow and the node's state go into the gate. The pre-lock view of the
    // session is released first: while anyone else holds it, a commit cannot extend the gate's
    // view in place and would copy the whole session instead.
    let NodeContext {
        loaded: pre_lock_view,
        compiled: pinned_workflow,
        workflow_hash: pinned_hash,
        state: node_state,
    } = ctx;
    drop(pre_lock_view);
    let result = wr
        .store
        .with_append_gate(&state.session_id, SessionIntent::Continue, |gate| {
            // Re-read under the lock: another process may have recorded this attempt meanwhile.
            let fresh = NodeContext {
                loaded: gate.shared(),
                compiled: pinned_workflow,
                workflow_hash: pinned_hash,
                state: node_state,
            };
            if let Some(outcome) = try_replay(wr, &fresh, state, &ack.attempt_id, Some(input))? {
                return Ok(outcome);
            }
            let plan = {
                let facts = wr
                    .memo
                    .facts(&state.session_id, fresh.loaded.events())
                    .map_err(read_failed)?;
                let ordinal = facts.advance_count(&state.node_id) as u64;
                let current =
                    derive::attempt(&state.session_id, &state.node_id, AttemptKind::Ack, ordinal);
                if current != ack.attempt_id {
                    // Fail closed: a signed attempt that is neither recorded nor current.
                    return Err(GateError(invariant(
                        "this ackToken's attempt should have a recorded outcome but none exists",
                    )));
                }
                plan_advance(wr, &fresh, &facts, state, &ack.attempt_id, input)?
            };
            // The new node's snapshot and the artifacts are stored while the segment is written
            // (decision D65); all are durable before the manifest attests the plan.
            let writer = wr.store.writer();
            let (snapshot, artifacts) = (plan.snapshot, plan.artifacts);
            let store_snapshot = move || {
                if let Some((snapshot, bytes)) = snapshot {
                    writer.put_snapshot_canonical(&snapshot, &bytes)?;
                }
                artifacts
                    .iter()
                    .try_for_each(|a| writer.put_prepared_artifact(a))
            };
            let NodeContext {
                compiled,
                workflow_hash,
                state: engine_state,
                loaded,
            } = fresh;
            // Release the shared view so the commit updates the session in place.
            drop(loaded);
            gate.append_alongside(
                AppendPlan {
                    events: plan.events,
                },
                store_snapshot,
            )
            .map_err(|e| e.to_envelope(true))?;
            let committed = NodeContext {
                loaded: gate.shared(),
                compiled,
                workflow_hash,
                state: engine_state,
            };
            Ok(try_replay(wr, &committed, state, &ack.attempt_id, None)?
                .ok_or_else(|| invariant("an advance was committed but its record is missing"))?)
        });
    result.map_err(|e: GateError| e.0)
}

/// Errors inside the gate: envelopes, with store errors mapped for token flows.
struct GateError(ErrorEnvelope);

impl From<StoreError> for GateError {
    fn from(e: StoreError) -> Self {
        Self(e.to_envelope(true))
    }
}

impl From<ErrorEnvelope> for GateError {
    fn from(e: ErrorEnvelope) -> Self {
        Self(e)
    }
}

/// The recorded response of `attempt`, when it is recorded. `request` is the call being
/// answered when it is a repeat (None for the response of a fresh commit): a repeat whose
/// `output` differs from what the attempt recorded gets the replay notice (decision D57).
fn try_replay(
    wr: &Workrail,
    ctx: &NodeContext,
    state: &StatePayload,
    attempt: &AttemptId,
    request: Option<&ContinueWorkflowInput>,
) -> Result<Option<ExecutionOutput>, ErrorEnvelope> {
    // The record's dedupeKey finds it in O(1); no projection is needed to know it is absent.
    let key = workrail_spec::dedupe::DedupeKey::from_recipe(
        "advance_recorded",
        &[
            state.session_id.as_str(),
            state.node_id.as_str(),
            attempt.as_str(),
        ],
    )
    .map_err(|e| invariant(e.to_string()))?;
    let Some(event) = ctx.loaded.event_by_dedupe_key(&key).map_err(read_failed)? else {
        return Ok(None);
    };
    let index = event.event_index().get() as usize;
    match event.data() {
        EventData::AdvanceRecorded(record) => {
            let record = record.clone();
            let mut output = replay(wr, ctx, state, index, &record)?;
            if let Some(request) = request {
                // A repeat answered from a record it did not write: durable first (D207).
                wr.store
                    .sync_recorded(&state.session_id)
                    .map_err(|e| e.to_envelope(true))?;
                output.replay =
                    super::replay_notice::notice(wr, ctx, state, attempt, index, &record, request)?;
            }
            Ok(Some(output))
        }
        _ => Err(invariant(
            "a dedupeKey of advance_recorded names another kind of event",
        )),
    }
}

fn gap_event(
    wr: &Workrail,
    session: &SessionId,
    scope: EventScope,
    attempt: &AttemptId,
    index: usize,
    finding: &Finding,
    evidence: EvidenceRef,
) -> Result<Option<SessionEvent>, ErrorEnvelope> {
    let Some(severity) = finding.gap_severity() else {
        return Ok(None);
    };
    // The message states what happened; the fix addresses a blocked caller, which a gap's
    // reader (execution went on) is not.
    let summary = BoundedText::truncating(&finding.message);
    wr.event(
        session,
        scope,
        EventData::gap_recorded(GapRecorded {
            gap_id: derive::gap(attempt, index),
            severity,
            reason: finding.reason.gap_reason(),
            summary,
            resolution: GapResolution::Unresolved,
            evidence_refs: Some(vec![evidence]),
            details: finding.reason_details(),
        }),
    )
    .map(Some)
}

/// Blocked attempts recorded at `node`'s step instance: at the node and at the nodes it
/// continues from through checkpoints (a checkpoint keeps the same pending step).
fn blocked_attempts(facts: &Facts<'_>, run: &RunId, node: &NodeId) -> Result<u32, ErrorEnvelope> {
    let mut count = 0u32;
    let mut at = Some(node.clone());
    while let Some(id) = at {
        count = count.saturating_add(
            facts
                .advance_records(&id)
                .map_err(read_failed)?
                .iter()
                .filter(|(_, r)| matches!(r.outcome, Recorded::Blocked { .. }))
                .count() as u32,
        );
        at = facts
            .node(run, &id)
            .filter(|n| n.kind == NodeKind::Checkpoint)
            .and_then(|n| n.parent.clone());
    }
    Ok(count)
}

/// What the interpreter needs to know about `node`'s branch (decision D40).
fn branch_facts(facts: &Facts<'_>, run: &RunId, node: &NodeId) -> BranchFacts {
    let Some(view) = facts.run(run) else {
        return BranchFacts::default();
    };
    BranchFacts {
        strong_status: Capability::ALL
            .iter()
            .filter_map(|c| view.strong_status(node, *c).map(|s| (*c, s)))
            .collect(),
        // Disclosures only: a resolution record (an `info` gap that resolves another) is itself
        // unresolved in the projection, but it discloses nothing and resolves nothing (D79).
        open_gaps: view
            .open_gaps_on(node)
            .into_iter()
            .filter(|g| matches!(g.resolution, GapResolution::Unresolved))
            .map(|g| OpenGap {
                gap_id: g.gap_id.clone(),
                severity: g.severity,
                reason: g.reason,
                details: g.details.clone(),
            })
            .collect(),
        ..BranchFacts::default()
    }
}

/// The records an attempt discloses where it lands (the new node when it advanced, the
/// attempted node when blocked), in plan order: `capability_observed`, `divergence_recorded`,
/// the gaps of its findings, then the gaps resolving earlier ones. Every gap's evidence names the
/// attempt's `advance_recorded`; a resolution caused by an observation names that one too.
#[allow(clippy::too_many_arguments)]
fn disclosures<'f>(
    wr: &Workrail,
    session: &SessionId,
    scope: &EventScope,
    attempt: &AttemptId,
    record_id: &EventId,
    reports: &Reports,
    findings: impl Iterator<Item = &'f Finding>,
) -> Result<Vec<SessionEvent>, ErrorEnvelope> {
    let mut events = Vec::new();
    let mut observed = Vec::new();
    for (i, o) in reports.observations.iter().enumerate() {
        let event = wr.event(
            session,
            scope.clone(),
            EventData::CapabilityObserved(CapabilityObserved {
                cap_obs_id: derive::cap_obs(attempt, i),
                capability: o.capability,
                status: o.status,
                provenance: o.provenance.clone(),
            }),
        )?;
        observed.push(event.event_id().clone());
        events.push(event);
    }
    for (i, d) in reports.divergences.iter().enumerate() {
        events.push(wr.event(
            session,
            scope.clone(),
            EventData::DivergenceRecorded(DivergenceRecorded {
                divergence_id: derive::divergence(attempt, i),
                reason: d.reason,
                summary: BoundedText::truncating(&d.summary),
                related_step_id: d.related_step_id.clone(),
            }),
        )?);
    }
    let record = EvidenceRef::Event {
        event_id: record_id.clone(),
    };
    let mut index = 0;
    for finding in findings {
        if let Some(event) = gap_event(
            wr,
            session,
            scope.clone(),
            attempt,
            index,
            finding,
            record.clone(),
        )? {
            events.push(event);
            index += 1;
        }
    }
    for r in &reports.resolutions {
        let mut evidence = vec![record.clone()];
        if let Some(event_id) = r.observation.and_then(|o| observed.get(o)) {
            evidence.push(EvidenceRef::Event {
                event_id: event_id.clone(),
            });
        }
        events.push(wr.event(
            session,
            scope.clone(),
            EventData::gap_recorded(GapRecorded {
                gap_id: derive::gap(attempt, index),
                severity: GapSeverity::Info,
                reason: r.reason,
                summary: BoundedText::truncating(&r.summary),
                resolution: GapResolution::Resolves {
                    resolves_gap_id: r.resolves.clone(),
                },
                evidence_refs: Some(evidence),
                details: r.details.clone(),
            }),
        )?);
        index += 1;
    }
    Ok(events)
}

/// The locked order of artifact outputs: by `(sha256, contentType)`.
fn artifact_order(p: &OutputPayload) -> Option<(workrail_spec::ids::Sha256Digest, String)> {
    match p {
        OutputPayload::ArtifactRef {
            sha256,
            content_type,
            ..
        } => Some((sha256.clone(), content_type.clone())),
        OutputPayload::Notes { .. } => None,
    }
}

/// The outputs the agent's `output` becomes, in the locked order (the recap first, then the
/// artifacts by `(sha256, contentType)`, duplicates once); `store` stores an artifact and
/// returns its digest and byte length (or only computes them, for a comparison).
pub(super) fn agent_payloads(
    output: &OutputInput,
    mut store: impl FnMut(
        &Map<String, Value>,
    ) -> Result<(workrail_spec::ids::Sha256Digest, u64), ErrorEnvelope>,
) -> Result<Vec<(OutputChannel, OutputPayload)>, ErrorEnvelope> {
    let mut payloads = Vec::new();
    if let Some(notes) = output
        .notes_markdown
        .as_deref()
        .filter(|n| !n.trim().is_empty())
    {
        payloads.push((OutputChannel::Recap, OutputPayload::notes(notes)));
    }
    let mut artifacts = Vec::new();
    for artifact in &output.artifacts {
        let (sha256, byte_length) = store(artifact)?;
        artifacts.push(OutputPayload::ArtifactRef {
            sha256,
            content_type: crate::store::ArtifactStore::CONTENT_TYPE.into(),
            byte_length,
        });
    }
    artifacts.sort_by_key(artifact_order);
    artifacts.dedup();
    payloads.extend(artifacts.into_iter().map(|p| (OutputChannel::Artifact, p)));
    Ok(payloads)
}

/// The outputs an attempt appends at `scope`: the agent's `output`, plus WorkRail's own
/// artifact output (`owned`, a preference warning) placed among the artifacts in the locked order.
/// The agent's artifacts are prepared, not stored: they go to `artifacts`, for the caller to
/// store before its append attests them.
pub(super) fn output_events(
    wr: &Workrail,
    session: &SessionId,
    scope: &EventScope,
    attempt: &AttemptId,
    output: Option<&OutputInput>,
    owned: Option<(OutputId, OutputPayload)>,
    artifacts: &mut Vec<crate::store::PreparedArtifact>,
) -> Result<Vec<SessionEvent>, ErrorEnvelope> {
    let empty = OutputInput::default();
    let payloads = agent_payloads(output.unwrap_or(&empty), |artifact| {
        let prepared =
            crate::store::ArtifactStore::prepare(artifact).map_err(|e| e.to_envelope(true))?;
        let stored = (prepared.digest().clone(), prepared.bytes().len() as u64);
        if !artifacts.iter().any(|a| a.digest() == prepared.digest()) {
            artifacts.push(prepared);
        }
        Ok(stored)
    })?;
    // The agent's outputs keep their positional ids; WorkRail's own joins the artifacts in
    // `(sha256, contentType)` order.
    let mut outputs: Vec<_> = payloads
        .into_iter()
        .enumerate()
        .map(|(i, (channel, payload))| (derive::output(attempt, i), channel, payload))
        .collect();
    if let Some((id, payload)) = owned {
        let at = outputs
            .iter()
            .position(|(_, c, p)| {
                *c == OutputChannel::Artifact && artifact_order(p) > artifact_order(&payload)
            })
            .unwrap_or(outputs.len());
        outputs.insert(at, (id, OutputChannel::Artifact, payload));
    }
    outputs
        .into_iter()
        .map(|(output_id, channel, payload)| {
            wr.event(
                session,
                scope.clone(),
                EventData::node_output_appended(NodeOutputAppended {
                    output_id,
                    supersedes_output_id: None,
                    output_channel: channel,
                    payload,
                }),
            )
        })
        .collect()
}

fn plan_advance(
    wr: &Workrail,
    ctx: &NodeContext,
    facts: &Facts<'_>,
    state: &StatePayload,
    attempt: &AttemptId,
    input: &ContinueWorkflowInput,
) -> Result<AdvancePlan, ErrorEnvelope> {
    let session = &state.session_id;
    let run = &state.run_id;
    let node = &state.node_id;
    let node_scope = EventScope::Node(run.clone(), node.clone());
    let prefs = AckPreferences::new(
        facts,
        run,
        node,
        requested("continue_workflow", input.preset, &input.preferences)?,
    );
    let empty = OutputInput::default();
    let output = input.output.as_ref().unwrap_or(&empty);
    // The context this advance reads and, when it advances, records (decision D139).
    // `base` is kept only when a delta may change it (the `context_set` compares the two).
    let stored: Map<String, Value> = facts.context(run).map_err(read_failed)?;
    let (merged, base) = match &input.context {
        Some(delta) => (
            merge_context(&stored, delta).map_err(context_error)?,
            Some(stored),
        ),
        None => (stored, None),
    };
    let mut branch = branch_facts(facts, run, node);
    branch.blocked_attempts = blocked_attempts(facts, run, node)?;
    branch.context = merged;
    if super::lanes::pending_lanes(&ctx.compiled, &ctx.state).is_some() {
        branch.lanes = super::lanes::lane_facts(wr, facts, node);
    }
    let stale = base
        .as_ref()
        .filter(|_| engine::planted::planted(engine::PlantedLanguageBug::StaleContext))
        .map(|base| engine::BranchFacts {
            context: base.clone(),
            ..branch.clone()
        });
    let outcome = engine::advance_on(
        &ctx.compiled,
        &ctx.state,
        output,
        prefs.effective.autonomy,
        stale.as_ref().unwrap_or(&branch),
    )
    .map_err(|e| invariant(format!("the interpreter refused the pinned state: {e}")))?;
    let record_id = wr.event_id()?;
    match outcome {
        AdvanceOutcome::Blocked(blocked) => {
            let report = blocked.blocker_report().map_err(|e| match e {
                // Fail fast rather than drop a reason (locks §1 "BlockerReport" budgets): only
                // an agent reporting many user-only dependencies at once can get here.
                workrail_spec::blocker::BlockerReportError::TooMany { count } => ErrorEnvelope::new(
                    ErrorCode::ValidationError,
                    format!(
                        "continue_workflow: this acknowledgement raises {count} blocking reasons, more than the {} a blocked response may carry; nothing was recorded.",
                        workrail_spec::budget::MAX_BLOCKERS
                    ),
                    "Send fewer `wr.user_only_dependency` reports at once (the ones the user must answer first), then acknowledge again with the same tokens.",
                    Retry::NotRetryable,
                ),
                other => invariant(format!("blocker report over budget: {other}")),
            })?;
            let mut events =
                prefs.blocked_records(wr, session, &node_scope, attempt, &ctx.compiled)?;
            events.extend(disclosures(
                wr,
                session,
                &node_scope,
                attempt,
                &record_id,
                &blocked.reports,
                blocked.gaps(),
            )?);
            events.push(
                wr.event_with_id(
                    record_id,
                    session,
                    node_scope,
                    EventData::AdvanceRecorded(AdvanceRecorded {
                        attempt_id: attempt.clone(),
                        intent: AdvanceIntent::AckPending,
                        outcome: Recorded::Blocked {
                            blockers: report,
                            output_digest: output
                                .carries_work()
                                .then(|| output.digest())
                                .transpose()
                                .map_err(|e| {
                                    invariant(format!("the output cannot be canonicalized: {e}"))
                                })?,
                        },
                    }),
                )?,
            );
            Ok(AdvancePlan {
                events,
                snapshot: None,
                artifacts: Vec::new(),
            })
        }
        AdvanceOutcome::Advanced(transition) | AdvanceOutcome::Complete(transition) => {
            let child = derive::child_node(attempt);
            let child_scope = EventScope::Node(run.clone(), child.clone());
            let snapshot = ExecutionSnapshotFileV1 {
                workflow_hash: ctx.workflow_hash.clone(),
                engine_payload: EnginePayloadV1::new(transition.state.clone()).map_err(|e| {
                    invariant(format!("the interpreter produced an impossible state: {e}"))
                })?,
            };
            let canonical = workrail_spec::jcs::Canonical::of(&snapshot)
                .map_err(|e| invariant(e.to_string()))?;
            let snapshot_ref =
                workrail_spec::ids::SnapshotRef::from_digest(canonical.digest().clone());
            // Only step children make this a fork: a checkpoint records progress on the branch
            // without creating a new one.
            let has_children = facts
                .run(run)
                .is_some_and(|view| view.dag.edges_out(node, EdgeKind::AckedStep) > 0);
            let mut events = vec![
                wr.event(
                    session,
                    child_scope.clone(),
                    EventData::NodeCreated(NodeCreated {
                        node_kind: NodeKind::Step,
                        parent_node_id: Some(node.clone()),
                        workflow_hash: ctx.workflow_hash.clone(),
                        snapshot_ref,
                    }),
                )?,
                wr.event(
                    session,
                    EventScope::Run(run.clone()),
                    EventData::EdgeCreated(EdgeCreated {
                        edge_kind: EdgeKind::AckedStep,
                        from_node_id: node.clone(),
                        to_node_id: child.clone(),
                        cause: EdgeCause {
                            kind: if has_children {
                                EdgeCauseKind::NonTipAdvance
                            } else {
                                EdgeCauseKind::IdempotentReplay
                            },
                            event_id: record_id.clone(),
                        },
                    }),
                )?,
            ];
            let mut artifacts = Vec::new();
            events.extend(output_events(
                wr,
                session,
                &child_scope,
                attempt,
                input.output.as_ref(),
                prefs.warning(wr, &ctx.compiled, attempt)?,
                &mut artifacts,
            )?);
            events.extend(disclosures(
                wr,
                session,
                &child_scope,
                attempt,
                &record_id,
                &transition.reports,
                transition.gaps.iter(),
            )?);
            events.extend(prefs.change_event(wr, session, &child_scope, attempt)?);
            if let Some(base) = &base {
                let merged = &branch.context;
                if merged != base {
                    events.push(wr.event(
                        session,
                        EventScope::Run(run.clone()),
                        EventData::ContextSet(ContextSet {
                            context_id: derive::context(attempt),
                            context: merged.clone(),
                            source: if base.is_empty() {
                                ContextSource::Initial
                            } else {
                                ContextSource::AgentDelta
                            },
                        }),
                    )?);
                }
            }
            // Landing on a parallel step starts its lanes in this same append (D168).
            let started = &facts
                .run(run)
                .ok_or_else(|| invariant("the run vanished from its own log"))?
                .dag
                .started;
            events.extend(super::lanes::start_events(
                wr,
                session,
                started,
                run,
                &child,
                &ctx.compiled,
                &transition.state,
                &branch.context,
            )?);
            let mut trace = Vec::new();
            if has_children {
                trace.push(TraceEntry {
                    kind: DecisionTraceKind::DetectedNonTipAdvance,
                    summary:
                        "The acknowledged node already had children: recorded a new sibling branch."
                            .into(),
                    refs: None,
                });
            }
            trace.extend(transition.trace.iter().cloned());
            if !trace.is_empty() {
                let mut entries = trace;
                for e in &mut entries {
                    if e.refs.as_ref().is_some_and(|refs| refs.is_empty()) {
                        e.refs = None;
                    }
                }
                events.push(wr.event(
                    session,
                    child_scope,
                    EventData::DecisionTraceAppended(
                        workrail_spec::event::DecisionTraceAppended::bounded(
                            derive::trace(attempt),
                            entries,
                        ),
                    ),
                )?);
            }
            events.push(wr.event_with_id(
                record_id,
                session,
                node_scope,
                EventData::AdvanceRecorded(AdvanceRecorded {
                    attempt_id: attempt.clone(),
                    intent: AdvanceIntent::AckPending,
                    outcome: Recorded::Advanced { to_node_id: child },
                }),
            )?);
            Ok(AdvancePlan {
                events,
                snapshot: Some((snapshot, canonical)),
                artifacts,
            })
        }
    }
}

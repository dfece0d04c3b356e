//! The replay notice (decision D57): an ackToken that was already answered comes back with an
//! `output` that differs from what that answer recorded, typically because the user rewound the
//! chat and the agent redid the step. The response stays the recorded one (replay answers from
//! recorded facts and re-runs nothing); the notice says that the new output was NOT recorded,
//! shows what was, and carries a fresh ackToken for the same step, so one call records the new
//! work as a new branch.
//!
//! The comparison is exact and needs no re-run of selection, validation or rendering: the
//! outputs an attempt records are a pure function of its `output` (the recap notes after the
//! locked truncation, then every artifact's JCS digest in `(sha256, contentType)` order, each
//! under an id derived from the attempt and its position), so the call's `output` is turned into
//! the same list and compared with the recorded one. A blocked attempt records no outputs, only
//! the digest of what it was sent (decision D163): a call whose output has another digest is new
//! work the replay did not record, and its notice says so and hands over the step's next
//! ackToken, so an agent that resends a fix with the used token learns why nothing changed.

use std::collections::HashMap;

use workrail_spec::closed::OutputChannel;
use workrail_spec::error::ErrorEnvelope;
use workrail_spec::event::{AdvanceOutcome, AdvanceRecorded, EventData, OutputPayload};
use workrail_spec::ids::AttemptId;
use workrail_spec::jcs::Canonical;
use workrail_spec::token::{AttemptPayload, StatePayload, TokenPayload};
use workrail_spec::tools::{ContinueWorkflowInput, OutputInput, ReplayNotice};

use super::advance::agent_payloads;
use super::derive::{self, AttemptKind};
use super::{NodeContext, Workrail, invariant, read_failed};

/// The notice for a repeat of `attempt` (recorded at `index`), or `None` when the call's
/// `output` is absent, empty, or what the attempt recorded.
pub(super) fn notice(
    wr: &Workrail,
    ctx: &NodeContext,
    state: &StatePayload,
    attempt: &AttemptId,
    index: usize,
    record: &AdvanceRecorded,
    request: &ContinueWorkflowInput,
) -> Result<Option<ReplayNotice>, ErrorEnvelope> {
    let Some(output) = request.output.as_ref().filter(|o| o.carries_work()) else {
        return Ok(None);
    };
    if let AdvanceOutcome::Blocked { output_digest, .. } = &record.outcome {
        let sent = output
            .digest()
            .map_err(|e| invariant(format!("the output cannot be canonicalized: {e}")))?;
        if output_digest.as_ref() == Some(&sent) {
            return Ok(None);
        }
        return blocked(wr, ctx, state, output).map(Some);
    }
    let sent = agent_payloads(output, |artifact| {
        let canonical = Canonical::of(artifact)
            .map_err(|e| invariant(format!("an artifact cannot be canonicalized: {e}")))?;
        Ok((canonical.digest().clone(), canonical.len() as u64))
    })?;
    let plan = ctx
        .loaded
        .events()
        .range(
            ctx.loaded
                .plan_start(index)
                .map_err(read_failed)?
                .min(index)..index,
        )
        .map_err(read_failed)?;
    let recorded = recorded_payloads(&plan, attempt);
    if sent == recorded {
        return Ok(None);
    }
    // Only what this call sent and the attempt did not record is "not recorded".
    let of =
        |list: &[(OutputChannel, OutputPayload)], channel: OutputChannel| -> Vec<OutputPayload> {
            list.iter()
                .filter(|(c, _)| *c == channel)
                .map(|(_, p)| p.clone())
                .collect()
        };
    let mut not_recorded = Vec::new();
    for (channel, field) in [
        (OutputChannel::Recap, "output.notesMarkdown"),
        (OutputChannel::Artifact, "output.artifacts"),
    ] {
        let mine = of(&sent, channel);
        if !mine.is_empty() && mine != of(&recorded, channel) {
            not_recorded.push(field.to_owned());
        }
    }
    if not_recorded.is_empty() {
        return Ok(None);
    }
    let recorded_notes = recorded.iter().find_map(|(_, p)| match p {
        OutputPayload::Notes { notes_markdown } => Some(notes_markdown.as_str().to_owned()),
        OutputPayload::ArtifactRef { .. } => None,
    });
    let recorded_artifacts = recorded
        .iter()
        .filter(|(c, _)| *c == OutputChannel::Artifact)
        .count() as u64;

    // The fresh attempt of the same step, as of now: the next ack ordinal of the node.
    let (fork_ack_token, fork_state_token) = fresh_tokens(wr, ctx, state)?;
    let pending = ctx
        .state
        .pending_step()
        .ok_or_else(|| invariant("an acknowledged node has no pending step"))?;
    let step_title = ctx.compiled.step(&pending.step_id).map_or_else(
        || pending.step_id.to_string(),
        |s| crate::engine::render::title(s, &pending.bindings),
    );
    let what = not_recorded.join(" and ");
    let message = format!(
        "This ackToken was already used: it acknowledged step \"{step_title}\" earlier, and this response is exactly what that call recorded. The {what} you sent now differ from what was recorded and were NOT recorded. To record them, call continue_workflow with `forkAckToken` (from `replay`) and the same output: that records your new work as a new branch from step \"{step_title}\"; the recorded branch stays, and the newest branch becomes the run's preferred tip. To keep the recorded work instead, go on with the tokens of this response."
    );
    Ok(Some(ReplayNotice {
        not_recorded,
        recorded_notes_markdown: recorded_notes,
        recorded_artifacts,
        step_id: pending.step_id.clone(),
        step_title,
        fork_ack_token,
        fork_state_token,
        message,
        attempt_blocked: false,
    }))
}

/// The fresh ack attempt of the node as of now (its next ordinal) and its stateToken.
fn fresh_tokens(
    wr: &Workrail,
    ctx: &NodeContext,
    state: &StatePayload,
) -> Result<(String, String), ErrorEnvelope> {
    let facts = wr
        .memo
        .facts(&state.session_id, ctx.loaded.events())
        .map_err(read_failed)?;
    let ordinal = facts.advance_count(&state.node_id) as u64;
    let codec = wr.codec();
    let ack = codec.mint(&TokenPayload::Ack(AttemptPayload {
        session_id: state.session_id.clone(),
        run_id: state.run_id.clone(),
        node_id: state.node_id.clone(),
        attempt_id: derive::attempt(&state.session_id, &state.node_id, AttemptKind::Ack, ordinal),
    }));
    Ok((ack, codec.mint(&TokenPayload::State(state.clone()))))
}

/// The notice for new work sent with the ackToken of a blocked attempt.
fn blocked(
    wr: &Workrail,
    ctx: &NodeContext,
    state: &StatePayload,
    output: &OutputInput,
) -> Result<ReplayNotice, ErrorEnvelope> {
    let mut not_recorded = Vec::new();
    if output
        .notes_markdown
        .as_deref()
        .is_some_and(|n| !n.trim().is_empty())
    {
        not_recorded.push("output.notesMarkdown".to_owned());
    }
    if !output.artifacts.is_empty() {
        not_recorded.push("output.artifacts".to_owned());
    }
    let pending = ctx
        .state
        .pending_step()
        .ok_or_else(|| invariant("an acknowledged node has no pending step"))?;
    let step_title = ctx.compiled.step(&pending.step_id).map_or_else(
        || pending.step_id.to_string(),
        |s| crate::engine::render::title(s, &pending.bindings),
    );
    let (fork_ack_token, fork_state_token) = fresh_tokens(wr, ctx, state)?;
    let what = not_recorded.join(" and ");
    let message = format!(
        "This ackToken was already used: its attempt at step \"{step_title}\" was blocked, and this response is exactly what that call answered. The {what} you sent now were NOT recorded (a used ackToken only repeats its answer). Send them again, fixed as the blockers say, with `forkAckToken` from `replay`: the step's next attempt."
    );
    Ok(ReplayNotice {
        not_recorded,
        recorded_notes_markdown: None,
        recorded_artifacts: 0,
        step_id: pending.step_id.clone(),
        step_title,
        fork_ack_token,
        fork_state_token,
        message,
        attempt_blocked: true,
    })
}

/// The agent's outputs `attempt` recorded, in their positional order (WorkRail's own outputs
/// carry other ids and are left out).
fn recorded_payloads(
    plan_before_record: &[workrail_spec::event::SessionEvent],
    attempt: &AttemptId,
) -> Vec<(OutputChannel, OutputPayload)> {
    let mut by_id = HashMap::new();
    for event in plan_before_record {
        if let EventData::NodeOutputAppended(o) = event.data() {
            by_id.insert(o.output_id.clone(), (o.output_channel, o.payload.clone()));
        }
    }
    let mut recorded = Vec::new();
    for position in 0.. {
        match by_id.remove(&derive::output(attempt, position)) {
            Some(payload) => recorded.push(payload),
            None => break,
        }
    }
    recorded
}

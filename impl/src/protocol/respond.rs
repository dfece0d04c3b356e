//! Execution responses: the JSON backbone (`ExecutionOutput`) and its deterministic text-first
//! rendering (contract "Recorded decisions: text-first + JSON backbone").
//!
//! A response is built only from facts (a prefix of the event log, the pinned workflow, the
//! node's snapshot) so a replay rebuilds it byte for byte.

use workrail_spec::blocker::Blocker;
use workrail_spec::closed::{NextIntent, RunStatus};
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::event::EffectivePreferences;
use workrail_spec::ids::{NodeId, RunId, SessionId, WorkflowHash};
use workrail_spec::snapshot::EngineState;
use workrail_spec::token::{AttemptPayload, StatePayload, TokenPayload};
use workrail_spec::tools::{
    ExecutionKind, ExecutionOutput, PendingView, RecapView, RunView, SessionView,
};

use super::derive::{AttemptKind, attempt};
use crate::tokens::TokenCodec;

/// The warning code that confirms a checkpoint (shown in words as its own section).
pub(super) const CHECKPOINT_RECORDED: &str = "checkpoint_recorded";

/// Everything a response is made of.
#[derive(Debug)]
pub struct ResponseFacts<'a> {
    pub session: &'a SessionId,
    pub run: &'a RunId,
    pub node: &'a NodeId,
    pub compiled: &'a CompiledWorkflowSnapshotV1,
    pub workflow_hash: &'a WorkflowHash,
    /// The snapshot state of `node`.
    pub state: &'a EngineState,
    pub preferences: EffectivePreferences,
    pub status: RunStatus,
    /// Ordinal of the ack attempt to mint (ignored when the run is complete).
    pub ack_ordinal: u64,
    pub checkpoint_ordinal: u64,
    /// Non-empty for a blocked response.
    pub blockers: Vec<Blocker>,
    pub recap: Option<RecapView>,
    /// At a rewind: the function definitions the recap's steps reference beyond the pending
    /// step's own (see `protocol::functions`), already ordered.
    pub branch_functions: Vec<workrail_spec::compiled::CompiledFunction>,
    /// The capability guidance to show with the pending step (see `protocol::guidance`).
    pub capability_guidance: Vec<String>,
}

/// A short human label for a run, shown beside its tokens.
pub fn run_label(compiled: &CompiledWorkflowSnapshotV1, run: &RunId) -> String {
    let name = compiled
        .body
        .name
        .clone()
        .unwrap_or_else(|| compiled.body.workflow_id.to_string());
    let tail: String = run
        .as_str()
        .chars()
        .rev()
        .take(4)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    format!("{name} #{tail}")
}

/// The step's compiled prompt, followed at a rewind by the definitions the recovery context
/// references, within what the step's own definitions left of the budget.
fn with_branch_functions(
    prompt: &str,
    step: &workrail_spec::compiled::CompiledStep,
    extra: &[workrail_spec::compiled::CompiledFunction],
) -> String {
    use crate::compiler::functions::{render_section, step_section};
    if extra.is_empty() {
        return prompt.to_owned();
    }
    let room = workrail_spec::budget::FUNCTION_DEFINITIONS_MAX_BYTES
        .saturating_sub(step_section(&step.functions).len());
    let refs: Vec<&workrail_spec::compiled::CompiledFunction> = extra.iter().collect();
    let section = render_section("Functions in the branch context", &refs, room);
    if section.is_empty() {
        return prompt.to_owned();
    }
    format!("{prompt}\n\n{section}")
}

pub fn build(facts: ResponseFacts<'_>, codec: &TokenCodec) -> ExecutionOutput {
    let state_token = codec.mint(&TokenPayload::State(StatePayload {
        session_id: facts.session.clone(),
        run_id: facts.run.clone(),
        node_id: facts.node.clone(),
        workflow_hash: facts.workflow_hash.clone(),
    }));
    let attempt_payload = |kind, ordinal| AttemptPayload {
        session_id: facts.session.clone(),
        run_id: facts.run.clone(),
        node_id: facts.node.clone(),
        attempt_id: attempt(facts.session, facts.node, kind, ordinal),
    };
    let pending = facts.state.pending_step().and_then(|p| {
        facts.compiled.step(&p.step_id).map(|step| {
            let loop_id = p.loop_path.last().map(|l| l.loop_id.to_string());
            let required_artifact = step
                .output
                .as_ref()
                .and_then(|o| o.contract_ref.as_deref())
                .and_then(|r| facts.compiled.contract(r))
                .map(|contract| workrail_spec::tools::RequiredArtifactView {
                    kind: contract.artifact_kind.clone(),
                    example: crate::engine::step_example(contract, step, loop_id.as_deref()),
                });
            // Rendered from the compiled step and the bindings frozen when it became pending
            // only, so every response for this node shows the same prompt (decision D139).
            let rendered = crate::engine::render::render_step(step, &p.bindings);
            PendingView {
                step_id: step.step_id.clone(),
                title: rendered.title,
                prompt: with_branch_functions(&rendered.prompt, step, &facts.branch_functions),
                require_confirmation: rendered.require_confirmation,
                confirmation_kind: rendered.confirmation_kind,
                required_artifact,
                capability_guidance: facts.capability_guidance.clone(),
            }
        })
    });
    let is_complete = facts.state.is_complete();
    let ack_token = (!is_complete).then(|| {
        codec.mint(&TokenPayload::Ack(attempt_payload(
            AttemptKind::Ack,
            facts.ack_ordinal,
        )))
    });
    let checkpoint_token = Some(codec.mint(&TokenPayload::Checkpoint(attempt_payload(
        AttemptKind::Checkpoint,
        facts.checkpoint_ordinal,
    ))));
    let next_intent = match &pending {
        _ if is_complete => NextIntent::Complete,
        Some(p) if p.require_confirmation => NextIntent::AwaitUserConfirmation,
        _ => NextIntent::PerformPendingThenContinue,
    };
    ExecutionOutput {
        kind: if facts.blockers.is_empty() {
            ExecutionKind::Ok
        } else {
            ExecutionKind::Blocked
        },
        state_token,
        ack_token,
        checkpoint_token,
        pending,
        is_complete,
        next_intent,
        session: SessionView {
            session_id: facts.session.clone(),
            run_id: facts.run.clone(),
        },
        run: RunView {
            workflow_id: facts.compiled.body.workflow_id.clone(),
            label: run_label(facts.compiled, facts.run),
            status: facts.status,
        },
        preferences: facts.preferences,
        blockers: facts.blockers,
        recap: facts.recap,
        warnings: super::preferences::response_warnings(facts.compiled, facts.preferences),
        replay: None,
        lanes: Vec::new(),
    }
}

/// What an autonomy mode asks of the agent, in a few words.
fn autonomy_in_words(autonomy: workrail_spec::closed::Autonomy) -> &'static str {
    use workrail_spec::closed::Autonomy;
    match autonomy {
        Autonomy::Guided => "stop and ask the user whenever a step needs them",
        Autonomy::FullAutoStopOnUserDeps => {
            "work on your own; stop only for what only the user can provide"
        }
        Autonomy::FullAutoNeverStop => {
            "never stop: make explicit assumptions, disclose them in your notes; gaps are recorded"
        }
    }
}

/// The deterministic text rendering of an execution response (`content[0].text`).
pub fn render_text(output: &ExecutionOutput) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "WorkRail run \"{}\" ({}) — status: {}\n",
        output.run.label, output.run.workflow_id, output.run.status
    ));
    if output.pending.is_some()
        && matches!(
            output.run.status,
            workrail_spec::closed::RunStatus::Complete
                | workrail_spec::closed::RunStatus::CompleteWithGaps
        )
    {
        // The status is the run's (its preferred branch); this node is an earlier point.
        out.push_str("(The run's preferred branch is complete; this response is for an earlier step that is still pending on this branch. Acknowledging it starts a new branch, which then becomes the preferred one.)\n");
    }
    out.push_str(&format!(
        "Session {} · mode: {} ({}) · risk policy: {}\n",
        output.session.session_id,
        output.preferences.autonomy,
        autonomy_in_words(output.preferences.autonomy),
        output.preferences.risk_policy
    ));
    if let Some(replay) = output.replay.as_ref().filter(|r| r.attempt_blocked) {
        out.push_str(&format!(
            "\n## REPLAY: this ackToken was already used, and its attempt was blocked; your new {} was NOT recorded\n{}\nSend your output again, fixed as the blockers below say, with:\nackToken: {}\n",
            replay.not_recorded.join(" and "),
            replay.message,
            replay.fork_ack_token
        ));
    } else if let Some(replay) = &output.replay {
        out.push_str(&format!(
            "\n## REPLAY: this ackToken was already used; your new {} was NOT recorded\n{}\n",
            replay.not_recorded.join(" and "),
            replay.message
        ));
        match &replay.recorded_notes_markdown {
            Some(notes) => {
                out.push_str("Recorded notes of that step:\n");
                for line in notes.lines() {
                    out.push_str(&format!("> {line}\n"));
                }
            }
            None => out.push_str("That step recorded no notes.\n"),
        }
        out.push_str(&format!(
            "To record your new output as a new branch from step \"{}\", call continue_workflow with:\nackToken: {}\nand the same output.\n",
            replay.step_title, replay.fork_ack_token
        ));
    }
    // A checkpoint's confirmation is news, not a warning; the step it leaves pending is the one
    // the agent is working from, so its prompt is not sent again in words.
    let checkpointed = output
        .warnings
        .iter()
        .find(|w| w.code == CHECKPOINT_RECORDED);
    if let Some(w) = checkpointed {
        out.push_str(&format!("\n## Checkpoint recorded\n{}\n", w.message));
    }
    if let Some(recap) = &output.recap {
        out.push_str("\n## Recap\n");
        out.push_str(&recap.text);
        out.push('\n');
    }
    if !output.blockers.is_empty() {
        out.push_str("\n## Blocked: fix these, then call continue_workflow again with the NEW ackToken below and your whole output (notes included), fixed\nAn ackToken is used once: sending the previous ackToken again, even with a fix, only repeats this answer.\n");
        for b in &output.blockers {
            out.push_str(&format!(
                "- {} ({}): {}\n",
                b.code,
                b.pointer.kind(),
                b.message.as_str()
            ));
            if let Some(fix) = &b.suggested_fix {
                out.push_str(&format!("  fix: {}\n", fix.as_str()));
            }
        }
    }
    match &output.pending {
        Some(p) if checkpointed.is_some() => {
            out.push_str(&format!(
                "\n## Still pending: {} [{}]\nThe step you are working on, unchanged (a checkpoint never advances). To see its prompt again, call continue_workflow with only the stateToken below.\n",
                p.title, p.step_id
            ));
        }
        Some(p) => {
            out.push_str(&format!("\n## Pending step: {} [{}]\n", p.title, p.step_id));
            out.push_str(&p.prompt);
            out.push('\n');
            if !p.capability_guidance.is_empty() {
                out.push_str("\n## Capabilities (this run)\n");
                for line in &p.capability_guidance {
                    out.push_str(&format!("- {line}\n"));
                }
            }
            if p.require_confirmation {
                out.push_str(match p.confirmation_kind {
                    Some(workrail_spec::compiled::ConfirmationKind::HumanApproval) => {
                        "\n(This step requires a human operator's approval (human_approval) before you continue: ask for it, and quote it in your notes.)\n"
                    }
                    Some(workrail_spec::compiled::ConfirmationKind::CoordinatorEval) => {
                        "\n(This step is gated by the coordinator's evaluation (coordinator_eval): without a coordinator, ask the user to confirm before you continue.)\n"
                    }
                    _ => "\n(This step requires the user's confirmation before you continue.)\n",
                });
            }
        }
        None if output.is_complete => out.push_str("\nThe workflow is complete.\n"),
        None => {}
    }
    for w in output
        .warnings
        .iter()
        .filter(|w| w.code != CHECKPOINT_RECORDED)
    {
        out.push_str(&format!("\nWarning ({}): {}\n", w.code, w.message));
    }
    // The run's label, workflow and step right beside its tokens: with several runs in one
    // chat, this is how an agent keeps each run's tokens together.
    let at = match &output.pending {
        Some(p) => format!(" at step \"{}\"", p.title),
        None if output.is_complete => ", complete".to_owned(),
        None => String::new(),
    };
    out.push_str(&format!(
        "\n## Tokens for run \"{}\" ({}){at} (copy exactly; never edit)\nstateToken: {}\n",
        output.run.label, output.run.workflow_id, output.state_token
    ));
    if let Some(ack) = &output.ack_token {
        out.push_str(&format!("ackToken: {ack}\n"));
    }
    if let Some(chk) = &output.checkpoint_token {
        out.push_str(&format!("checkpointToken: {chk}\n"));
    }
    if output.replay.as_ref().is_some_and(|r| r.attempt_blocked) {
        out.push_str("\nNext: fix your output as the blockers say and send it with the ackToken of the REPLAY section; sending the used ackToken again only repeats this answer.\n");
        return out;
    }
    if output.replay.is_some() {
        out.push_str("\nNext: to keep the output you just sent, send it again with the ackToken of the REPLAY section (it records a new branch); to keep what was recorded instead, go on from the tokens above.\n");
        return out;
    }
    // The step's required artifact, with its exact shape, where the agent looks for what to send.
    let artifact = output
        .pending
        .as_ref()
        .and_then(|p| p.required_artifact.as_ref())
        .map(|a| {
            format!(
                " and output.artifacts: [{}] (the `{}` artifact this step requires, filled in from your work)",
                workrail_spec::jcs::to_canonical_string(&a.example).unwrap_or_default(),
                a.kind
            )
        })
        .unwrap_or_default();
    let next = match output.next_intent {
        NextIntent::Complete => "nothing; the run is complete. Use checkpoint_workflow to record further notes if needed.".to_owned(),
        NextIntent::AwaitUserConfirmation => format!("show the step to the user and wait for confirmation; then do it and call continue_workflow with stateToken, ackToken and output.notesMarkdown (a fresh recap of this step only){artifact}."),
        NextIntent::PerformPendingThenContinue => format!("do the pending step, then call continue_workflow with stateToken, ackToken and output.notesMarkdown (a fresh recap of this step only){artifact}."),
        NextIntent::RehydrateOnly => "call continue_workflow with only the stateToken to recover the pending step.".to_owned(),
    };
    out.push_str(&format!("\nNext: {next}\n"));
    out
}

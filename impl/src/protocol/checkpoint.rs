//! `checkpoint_workflow`: record durable progress without advancing. Idempotent per
//! checkpoint attempt: a checkpoint node (same snapshot, no advancement) plus a `checkpoint`
//! edge, with the outputs attached to the new node. The response continues from the checkpoint
//! node, so the checkpoint stays on the branch.

use workrail_spec::closed::{EdgeCauseKind, EdgeKind, NodeKind};
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::event::{EdgeCause, EdgeCreated, EventData, EventScope, NodeCreated};
use workrail_spec::ids::NodeId;
use workrail_spec::token::{AttemptPayload, StatePayload};
use workrail_spec::tools::{CheckpointWorkflowInput, ExecutionOutput, Warning};

use super::advance::{Moment, notes_warnings, output_events, respond_at};
use super::derive::{self, AttemptKind};
use super::{NodeContext, Workrail, invariant, read_failed};
use crate::store::{AppendPlan, SessionIntent, StoreError};

/// The response for an existing checkpoint node, from the log prefix ending with its edge.
fn replay(
    wr: &Workrail,
    ctx: &NodeContext,
    state: &StatePayload,
    node: &NodeId,
) -> Result<Option<ExecutionOutput>, ErrorEnvelope> {
    let events = ctx.loaded.events();
    let is_the_edge = |e: &workrail_spec::event::SessionEvent| {
        matches!(e.data(), EventData::EdgeCreated(edge)
            if edge.edge_kind == EdgeKind::Checkpoint && &edge.to_node_id == node && edge.from_node_id == state.node_id)
    };
    // The projection knows where the edge into the checkpoint node is (D216); the log is
    // scanned only when it cannot say (a log no WorkRail wrote).
    let facts = wr
        .memo
        .facts(&state.session_id, events)
        .map_err(read_failed)?;
    let dag = facts.run(&state.run_id).map(|view| &view.dag);
    let edge_index = match dag.and_then(|dag| dag.first_edge_in(node)) {
        Some(index)
            if events
                .get(index)
                .map_err(read_failed)?
                .is_some_and(|e| is_the_edge(&e)) =>
        {
            Some(index)
        }
        None if dag.is_some_and(|dag| dag.edges_indexed() && !dag.nodes.contains_key(node)) => None,
        _ => events
            .all()
            .map_err(read_failed)?
            .iter()
            .position(is_the_edge),
    };
    drop(facts);
    let Some(index) = edge_index else {
        return Ok(None);
    };
    let prefix = ctx.loaded.events().prefix(index + 1);
    let mut output = respond_at(
        wr,
        prefix,
        &state.session_id,
        &state.run_id,
        node,
        ctx,
        &ctx.state,
        Vec::new(),
        Moment::Again,
        None,
    )?;
    output.warnings.insert(
        0,
        Warning::new(
            super::respond::CHECKPOINT_RECORDED,
            "Checkpoint recorded: your output is durable on this step, which stays pending (a checkpoint never advances). Go on with the step, checkpoint again with the new checkpointToken below, or acknowledge the step with the ackToken below when it is done.",
        ),
    );
    let plan = prefix
        .range(
            ctx.loaded
                .plan_start(index)
                .map_err(read_failed)?
                .min(prefix.len())..prefix.len(),
        )
        .map_err(read_failed)?;
    output.warnings.extend(notes_warnings(&plan, node));
    Ok(Some(output))
}

pub(super) fn checkpoint(
    wr: &Workrail,
    state: &StatePayload,
    attempt: &AttemptPayload,
    input: &CheckpointWorkflowInput,
) -> Result<ExecutionOutput, ErrorEnvelope> {
    input.output.check("checkpoint_workflow")?;
    let has_notes = input
        .output
        .notes_markdown
        .as_deref()
        .is_some_and(|n| !n.trim().is_empty());
    if !has_notes && input.output.artifacts.is_empty() {
        return Err(ErrorEnvelope::new(
            ErrorCode::ValidationError,
            "checkpoint_workflow: `output` is empty; a checkpoint records progress, so it needs output.notesMarkdown or output.artifacts.",
            "Send output.notesMarkdown with a short recap (what was done, what is next), then call checkpoint_workflow again.",
            Retry::NotRetryable,
        ));
    }
    let ctx = wr.node_context(state)?;
    let checkpoint_node = derive::child_node(&attempt.attempt_id);
    if let Some(done) = replay(wr, &ctx, state, &checkpoint_node)? {
        // Answered from a record this call did not write: durable first (decision D207).
        wr.store
            .sync_recorded(&state.session_id)
            .map_err(|e| e.to_envelope(true))?;
        return Ok(done);
    }
    // Release the pre-lock view of the session before the gate (see `advance`): a commit
    // extends the gate's view in place only when nobody else holds it.
    let NodeContext {
        loaded: pre_lock_view,
        compiled: pinned_workflow,
        workflow_hash: pinned_hash,
        state: node_state,
    } = ctx;
    drop(pre_lock_view);
    let outcome = wr.store.with_append_gate(&state.session_id, SessionIntent::Continue, |gate| {
        let fresh = NodeContext {
            loaded: gate.shared(),
            compiled: pinned_workflow,
            workflow_hash: pinned_hash.clone(),
            state: node_state,
        };
        if let Some(done) = replay(wr, &fresh, state, &checkpoint_node).map_err(Wrapped)? {
            wr.store
                .sync_recorded(&state.session_id)
                .map_err(|e| Wrapped(e.to_envelope(true)))?;
            return Ok(done);
        }
        let events = {
            let facts = wr
                .memo
                .facts(&state.session_id, fresh.loaded.events())
                .map_err(|e| Wrapped(read_failed(e)))?;
            let ordinal = facts.checkpoint_count(&state.run_id, &state.node_id);
            let current = derive::attempt(&state.session_id, &state.node_id, AttemptKind::Checkpoint, ordinal);
            if current != attempt.attempt_id {
                return Err(Wrapped(invariant(
                    "this checkpointToken's attempt should have a recorded checkpoint but none exists",
                )));
            }
            let snapshot_ref = facts
                .node(&state.run_id, &state.node_id)
                .map(|n| n.snapshot_ref())
                .ok_or_else(|| Wrapped(invariant("the checkpointed node vanished")))?;
            let scope = EventScope::Node(state.run_id.clone(), checkpoint_node.clone());
            let created_id = wr.event_id().map_err(Wrapped)?;
            let mut events = vec![wr
                .event_with_id(
                    created_id.clone(),
                    &state.session_id,
                    scope.clone(),
                    EventData::NodeCreated(NodeCreated {
                        node_kind: NodeKind::Checkpoint,
                        parent_node_id: Some(state.node_id.clone()),
                        workflow_hash: pinned_hash.clone(),
                        snapshot_ref,
                    }),
                )
                .map_err(Wrapped)?];
            let mut artifacts = Vec::new();
            events.extend(
                output_events(
                    wr,
                    &state.session_id,
                    &scope,
                    &attempt.attempt_id,
                    Some(&input.output),
                    None,
                    &mut artifacts,
                )
                .map_err(Wrapped)?,
            );
            // Durable before the append that references them.
            for artifact in &artifacts {
                wr.store
                    .put_prepared_artifact(artifact)
                    .map_err(|e| Wrapped(e.to_envelope(true)))?;
            }
            // The edge is the plan's last event: replays end their prefix there.
            events.push(
                wr.event(
                    &state.session_id,
                    EventScope::Run(state.run_id.clone()),
                    EventData::EdgeCreated(EdgeCreated {
                        edge_kind: EdgeKind::Checkpoint,
                        from_node_id: state.node_id.clone(),
                        to_node_id: checkpoint_node.clone(),
                        cause: EdgeCause {
                            kind: EdgeCauseKind::CheckpointCreated,
                            event_id: created_id,
                        },
                    }),
                )
                .map_err(Wrapped)?,
            );
            events
        };
        let NodeContext { compiled, workflow_hash, state: engine_state, loaded } = fresh;
        drop(loaded);
        gate.append(AppendPlan { events })?;
        let committed = NodeContext { loaded: gate.shared(), compiled, workflow_hash, state: engine_state };
        replay(wr, &committed, state, &checkpoint_node)
            .map_err(Wrapped)?
            .ok_or_else(|| Wrapped(invariant("a checkpoint was committed but its edge is missing")))
    });
    outcome.map_err(|w: Wrapped| w.0)
}

struct Wrapped(ErrorEnvelope);

impl From<StoreError> for Wrapped {
    fn from(e: StoreError) -> Self {
        Self(e.to_envelope(true))
    }
}

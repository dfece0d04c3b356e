//! Parallel lanes as runs (decisions D168, D169).
//!
//! When the walk lands on a parallel step, the same append starts one child run per lane whose
//! condition holds: a `run_started` with its `lane` link, the root node at the lane's first
//! step, and the lane's context (the parent context's mapped keys and the delegation's `args`).
//! Run and node ids are derived from the parent node and the lane index, so the landing's
//! replay, a second server and an imported bundle all name the same lanes, and a rewind that
//! lands on the step again (a new node) starts new lanes of its own.
//!
//! Everything else is read from the log: the lanes a parallel node started, where each stands,
//! and the block output each handed in, ordered by where it was recorded (D161).

use serde_json::{Map, Value};
use workrail_spec::closed::{ContextSource, NodeKind};
use workrail_spec::compiled::{CompiledWorkflowSnapshotV1, LaneSpec, ParallelLanes};
use workrail_spec::error::ErrorEnvelope;
use workrail_spec::event::{
    ContextSet, EventData, EventScope, LaneLink, NodeCreated, OutputPayload, RunStarted,
    SessionEvent,
};
use workrail_spec::ids::{ContextId, NodeId, RunId, SessionId, TraceId};
use workrail_spec::snapshot::{EnginePayloadV1, EngineState, ExecutionSnapshotFileV1};
use workrail_spec::token::{AttemptPayload, StatePayload, TokenPayload};
use workrail_spec::tools::{LaneHandle, LaneState};

use super::derive::{self, AttemptKind};
use super::facts::Facts;
use super::{Workrail, invariant};
use crate::engine::fanin::{LaneOutput, LaneStatus};
use crate::engine::{self, HandedIn, LaneFact};

/// The artifact kind a lane hands in.
const BLOCK_OUTPUT_KIND: &str = "wr.block_output";

/// The lanes of the step `state` is pending at, if it is a parallel step with lanes.
pub(super) fn pending_lanes<'c>(
    compiled: &'c CompiledWorkflowSnapshotV1,
    state: &EngineState,
) -> Option<&'c ParallelLanes> {
    let step = compiled.step(&state.pending_step()?.step_id)?;
    step.language.lanes.as_deref()
}

/// Whether `compiled` is a lane's workflow: a routine ending with the report step.
pub(super) fn is_lane_workflow(compiled: &CompiledWorkflowSnapshotV1) -> bool {
    compiled.body.steps.last().is_some_and(|step| {
        step.step_id.as_str() == crate::compiler::LANE_REPORT_STEP_ID
            && step.output.as_ref().and_then(|o| o.contract_ref.as_deref())
                == Some(crate::builtins::contracts::BLOCK_OUTPUT)
    })
}

/// The isolated workspace of a lane, relative to the project root: a sibling directory of the
/// project, so a lane's worktree is never inside the project's own tree.
pub(super) fn workspace(lane: &RunId) -> String {
    format!("../workrail-lanes/{lane}")
}

/// The events that start the lanes of the parallel step `state` is pending at, at the new node
/// `parent_node` of `parent_run`, reading `context`. Each lane's pinned workflow and root
/// snapshot are stored first, so they are durable before the append attests them.
#[allow(clippy::too_many_arguments)]
pub(super) fn start_events(
    wr: &Workrail,
    session: &SessionId,
    parent: &RunStarted,
    parent_run: &RunId,
    parent_node: &NodeId,
    compiled: &CompiledWorkflowSnapshotV1,
    state: &EngineState,
    context: &Map<String, Value>,
) -> Result<Vec<SessionEvent>, ErrorEnvelope> {
    let Some(spec) = pending_lanes(compiled, state) else {
        return Ok(Vec::new());
    };
    let mut events = Vec::new();
    for (i, lane) in spec.lanes.iter().enumerate() {
        let index = i as u32 + 1;
        if lane
            .when
            .as_ref()
            .is_some_and(|when| !when.evaluate(context))
        {
            continue;
        }
        events.extend(start_lane(
            wr,
            session,
            parent,
            parent_run,
            parent_node,
            index,
            lane,
            context,
        )?);
    }
    Ok(events)
}

#[allow(clippy::too_many_arguments)]
fn start_lane(
    wr: &Workrail,
    session: &SessionId,
    parent: &RunStarted,
    parent_run: &RunId,
    parent_node: &NodeId,
    index: u32,
    lane: &LaneSpec,
    parent_context: &Map<String, Value>,
) -> Result<Vec<SessionEvent>, ErrorEnvelope> {
    let mut context = Map::new();
    for input in &lane.inputs {
        if let Some(value) = parent_context.get(&input.from) {
            context.insert(input.to.clone(), value.clone());
        }
    }
    for (key, value) in &lane.args {
        context.insert(key.clone(), Value::from(value.as_str()));
    }
    let canonical = workrail_spec::jcs::Canonical::of(lane.workflow.as_ref())
        .map_err(|e| invariant(format!("a lane's workflow cannot be canonicalized: {e}")))?;
    let workflow_hash = wr
        .store
        .put_workflow_canonical(&lane.workflow, &canonical)
        .map_err(|e| e.to_envelope(true))?;
    let transition =
        engine::start_with(&lane.workflow, &EngineState::Init, &context).map_err(|e| match e {
            engine::EngineError::MissingContext(problem) => {
                super::start::missing_loop_context(&problem)
            }
            e => invariant(format!("lane {index} cannot start: {e}")),
        })?;
    let snapshot = ExecutionSnapshotFileV1 {
        workflow_hash: workflow_hash.clone(),
        engine_payload: EnginePayloadV1::new(transition.state.clone())
            .map_err(|e| invariant(e.to_string()))?,
    };
    let snapshot_ref = wr
        .store
        .put_snapshot(&snapshot)
        .map_err(|e| e.to_envelope(true))?;
    let run = derive::lane_run(parent_node, index);
    let root = derive::lane_root(parent_node, index);
    let root_scope = EventScope::Node(run.clone(), root.clone());
    let mut events = vec![
        wr.event(
            session,
            EventScope::Run(run.clone()),
            EventData::run_started(RunStarted {
                workflow_id: lane.workflow_id.clone(),
                workflow_hash: workflow_hash.clone(),
                workflow_source_kind: parent.workflow_source_kind,
                workflow_source_ref: parent.workflow_source_ref.clone(),
                lane: Some(LaneLink {
                    parent_run_id: parent_run.clone(),
                    parent_node_id: parent_node.clone(),
                    lane_index: index,
                }),
            }),
        )?,
        wr.event(
            session,
            root_scope.clone(),
            EventData::NodeCreated(NodeCreated {
                node_kind: NodeKind::Step,
                parent_node_id: None,
                workflow_hash,
                snapshot_ref,
            }),
        )?,
    ];
    if !context.is_empty() {
        events.push(wr.event(
            session,
            EventScope::Run(run.clone()),
            EventData::ContextSet(ContextSet {
                context_id: ContextId::from_digest(&derive::start_scoped(&root, "context")),
                context,
                source: ContextSource::Initial,
            }),
        )?);
    }
    if let Some(trace) =
        transition.trace_event(TraceId::from_digest(&derive::start_scoped(&root, "trace")))
    {
        events.push(wr.event(session, root_scope, EventData::DecisionTraceAppended(trace))?);
    }
    Ok(events)
}

/// The node whose landing started the lanes `node` stands for (D169): `node` itself, or for a
/// checkpoint node the step node it checkpoints, so a fan-in acknowledged from a checkpoint
/// judges the same lanes.
pub(super) fn landing_of(facts: &Facts<'_>, node: &NodeId) -> NodeId {
    let mut at = node.clone();
    let Some(view) = facts
        .projection
        .runs
        .values()
        .find(|v| v.dag.nodes.contains_key(node))
    else {
        return at;
    };
    while let Some(info) = view.dag.nodes.get(&at) {
        match (&info.kind, &info.parent) {
            (NodeKind::Checkpoint, Some(parent)) => at = parent.clone(),
            _ => break,
        }
    }
    at
}

/// The lanes `node` started (for a checkpoint node, its step node's): `(index, run)`, by index.
pub(super) fn lanes_of<'f>(facts: &'f Facts<'_>, node: &NodeId) -> Vec<(u32, &'f RunId)> {
    let node = &landing_of(facts, node);
    let mut out: Vec<(u32, &RunId)> = facts
        .projection
        .runs
        .iter()
        .filter_map(|(run, view)| {
            let link = view.dag.started.lane.as_ref()?;
            // TEST-ONLY planted bug: any lane of the node's run counts as the node's.
            let shared =
                engine::planted::lane_bug(engine::planted::PlantedLaneBug::SharedAcrossForks)
                    && facts.node(&link.parent_run_id, node).is_some();
            (&link.parent_node_id == node || shared).then_some((link.lane_index, run))
        })
        .collect();
    out.sort();
    out
}

/// The latest block output each lane of `node` recorded in `facts`' prefix, as facts for the
/// fan-in (D161: ordered by where it was recorded).
pub(super) fn lane_facts(wr: &Workrail, facts: &Facts<'_>, node: &NodeId) -> Vec<LaneFact> {
    // TEST-ONLY planted bug: every block output a lane recorded counts, not only its latest.
    let counted_twice = engine::planted::lane_bug(engine::planted::PlantedLaneBug::CountedTwice);
    lanes_of(facts, node)
        .into_iter()
        .flat_map(|(index, run)| {
            let reports = if counted_twice {
                every_block_output(wr, facts, run)
            } else {
                vec![block_output(wr, facts, run)]
            };
            reports
                .into_iter()
                .map(move |recorded| (index, run, recorded))
        })
        .map(|(index, run, recorded)| LaneFact {
            index,
            lane: engine::fanin::Lane {
                lane_id: run.as_str().to_owned(),
                output: recorded.as_ref().map(|(at, output)| LaneOutput {
                    recorded_at: *at,
                    status: output
                        .get("status")
                        .and_then(Value::as_str)
                        .and_then(LaneStatus::parse)
                        .unwrap_or(LaneStatus::Failed),
                    files: ["filesModified", "filesCreated"]
                        .iter()
                        .flat_map(|key| {
                            output
                                .get(*key)
                                .and_then(Value::as_array)
                                .into_iter()
                                .flatten()
                                .filter_map(Value::as_str)
                                .map(str::to_owned)
                        })
                        .collect(),
                }),
            },
            summary: recorded
                .as_ref()
                .and_then(|(_, o)| o.get("summary").and_then(Value::as_str))
                .map(str::to_owned),
            handed_in: recorded.as_ref().map(|(_, o)| handed_in(o)),
        })
        .collect()
}

fn strings(output: &Value, key: &str) -> Vec<String> {
    output
        .get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_owned)
        .collect()
}

fn handed_in(output: &Value) -> HandedIn {
    HandedIn {
        block_type: output
            .get("blockType")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        files_modified: strings(output, "filesModified"),
        files_created: strings(output, "filesCreated"),
        deliverables: output.get("deliverables").cloned(),
    }
}

/// Every `wr.block_output` artifact `run` handed in at a step that requires one (its
/// `lane-report` step), with its event index, oldest first (decision D193). An output sent with
/// an earlier step's ack is neither validated nor its lane's report, so it does not count: a lane
/// that has not reached its last step has handed in nothing. An artifact that cannot be read is
/// skipped: the lane then reads as missing, which blocks, never as done.
fn block_outputs(wr: &Workrail, facts: &Facts<'_>, run: &RunId) -> Vec<(u64, Value)> {
    let Some(view) = facts.run(run) else {
        return Vec::new();
    };
    let Ok(compiled) = wr.store.workflow(&view.dag.started.workflow_hash) else {
        return Vec::new();
    };
    // An ack's outputs are recorded on the node it creates; the step they answer is the one
    // its parent was pending at.
    // TEST-ONLY planted bug: a block output sent with any step's ack counts.
    let early = engine::planted::lane_bug(engine::planted::PlantedLaneBug::EarlyReport);
    let reports_at = |node: &NodeId| -> bool {
        if early {
            return true;
        }
        let Some(parent) = view
            .dag
            .nodes
            .get(node)
            .and_then(|info| info.parent.as_ref())
            .and_then(|parent| view.dag.nodes.get(parent))
        else {
            return false;
        };
        let Ok(snapshot) = wr.store.snapshot(&parent.snapshot_ref()) else {
            return false;
        };
        snapshot
            .engine_payload
            .engine_state
            .pending_step()
            .and_then(|pending| compiled.step(&pending.step_id))
            .and_then(|step| step.output.as_ref())
            .and_then(|output| output.contract_ref.as_deref())
            == Some(crate::builtins::contracts::BLOCK_OUTPUT)
    };
    // The run's events all follow its root's creation; older events are not read (D225). A
    // log that cannot be read again counts as no report, which blocks, never as done.
    let from = view
        .dag
        .root
        .as_ref()
        .and_then(|root| view.dag.nodes.get(root))
        .map_or(0, |root| root.created_index as usize);
    let mut found = Vec::new();
    for chunk in facts.events.chunks(from) {
        let Ok((_, events)) = chunk else {
            return Vec::new();
        };
        for event in events.iter() {
            if event.scope().run_id() != Some(run) {
                continue;
            }
            let EventData::NodeOutputAppended(output) = event.data() else {
                continue;
            };
            let OutputPayload::ArtifactRef { sha256, .. } = &output.payload else {
                continue;
            };
            let Ok(artifact) = wr.store.artifact(sha256) else {
                continue;
            };
            if artifact.get("kind").and_then(Value::as_str) == Some(BLOCK_OUTPUT_KIND)
                && event.scope().node_id().is_some_and(reports_at)
            {
                found.push((event.event_index().get(), artifact));
            }
        }
    }
    found
}

/// The latest block output `run` handed in (see [`block_outputs`]).
fn block_output(wr: &Workrail, facts: &Facts<'_>, run: &RunId) -> Option<(u64, Value)> {
    block_outputs(wr, facts, run).pop()
}

/// TEST-ONLY (planted `CountedTwice`): every block output `run` handed in, oldest first (`None`
/// alone when there is none).
fn every_block_output(wr: &Workrail, facts: &Facts<'_>, run: &RunId) -> Vec<Option<(u64, Value)>> {
    let all: Vec<Option<(u64, Value)>> = block_outputs(wr, facts, run)
        .into_iter()
        .map(Some)
        .collect();
    if all.is_empty() { vec![None] } else { all }
}

/// The handles of the lanes `node` started, for its responses: each lane's current step and
/// tokens, and where it stands.
pub(super) fn handles(
    wr: &Workrail,
    facts: &Facts<'_>,
    session: &SessionId,
    node: &NodeId,
    spec: &ParallelLanes,
) -> Result<Vec<LaneHandle>, ErrorEnvelope> {
    let codec = wr.codec();
    let recorded = lane_facts(wr, facts, node);
    let mut out = Vec::new();
    for (index, run) in lanes_of(facts, node) {
        let view = facts
            .run(run)
            .ok_or_else(|| invariant("a lane's run vanished from its own log"))?;
        let tip = view
            .preferred_tip
            .clone()
            .ok_or_else(|| invariant("a lane has no node"))?;
        let complete = wr.snapshot_complete(facts, run, &tip);
        let status = recorded
            .iter()
            .find(|f| f.index == index)
            .and_then(|f| f.lane.output.as_ref())
            .map_or(LaneState::InProgress, |o| match o.status {
                LaneStatus::Completed => LaneState::Completed,
                LaneStatus::Partial => LaneState::Partial,
                LaneStatus::Failed => LaneState::Failed,
            });
        let lane = spec.lanes.get(index as usize - 1);
        out.push(LaneHandle {
            lane_id: run.clone(),
            index,
            workflow_id: view.dag.started.workflow_id.clone(),
            goal: lane.and_then(|l| l.goal.clone()),
            status,
            workspace: workspace(run),
            state_token: codec.mint(&TokenPayload::State(StatePayload {
                session_id: session.clone(),
                run_id: run.clone(),
                node_id: tip.clone(),
                workflow_hash: view.dag.started.workflow_hash.clone(),
            })),
            ack_token: (!complete).then(|| {
                codec.mint(&TokenPayload::Ack(AttemptPayload {
                    session_id: session.clone(),
                    run_id: run.clone(),
                    node_id: tip.clone(),
                    attempt_id: derive::attempt(
                        session,
                        &tip,
                        AttemptKind::Ack,
                        facts.advance_count(&tip) as u64,
                    ),
                }))
            }),
        });
    }
    Ok(out)
}

/// The "Lanes" section of a parallel step's prompt: what to hand each subagent.
pub(super) fn lanes_section(handles: &[LaneHandle]) -> String {
    let mut text = String::from(
        "## Lanes\n\nThe server tracks each delegation as a lane of this run. Give each subagent its lane's `laneId`, `stateToken` and `ackToken` (in this response's `lanes`), and tell it to call `continue_workflow` with them (not `start_workflow`) and to follow the steps it gets until the lane's last step, where it hands in a `wr.block_output` artifact. Each lane works in its own workspace: a git worktree (`git worktree add --detach <workspace>` from the project root) or, when the project is not a git repository, a copy of the project at that path; it changes files only there. Acknowledge this step once every lane has handed in its block output.\n\nNo subagents? If your client cannot start subagents, drive the lanes yourself, one after another, with the same tokens (the fan-in is the same), and say so when you acknowledge this step: add the artifact `{\"kind\": \"workflow_divergence\", \"reason\": \"capability_unavailable\", \"summary\": \"No subagents: ran the lanes one after another.\"}`.",
    );
    for h in handles {
        text.push_str(&format!(
            "\n\n### Lane {}: `{}` ({})\n- Workflow: `{}`\n- Workspace: `{}`\n- stateToken: `{}`",
            h.index, h.lane_id, h.status, h.workflow_id, h.workspace, h.state_token
        ));
        if let Some(ack) = &h.ack_token {
            text.push_str(&format!("\n- ackToken: `{ack}`"));
        }
        if let Some(goal) = &h.goal {
            text.push_str(&format!("\n- Goal: {goal}"));
        }
    }
    text
}

/// The "Lane results" section of the step after a parallel step: each lane's status and
/// summary, and the conflicts the merge strategy found, from the recorded block outputs.
pub(super) fn results_section(spec: &ParallelLanes, facts: &[LaneFact]) -> String {
    let fan = engine::lanes::fan_in(spec, facts);
    let mut text = format!(
        "## Lane results\n\nMerge strategy: `{}`.",
        spec.merge_strategy
    );
    for f in facts {
        let status = match f.lane.output.as_ref().map(|o| o.status) {
            None => "no block output",
            Some(LaneStatus::Completed) => "completed",
            Some(LaneStatus::Partial) => "partial",
            Some(LaneStatus::Failed) => "failed",
        };
        text.push_str(&format!(
            "\n- Lane {} (`{}`): {status}. {}",
            f.index,
            f.lane.lane_id,
            f.summary.as_deref().unwrap_or("")
        ));
    }
    if !fan.completed_order.is_empty() {
        let order: Vec<String> = fan
            .completed_order
            .iter()
            .filter_map(|id| facts.iter().find(|f| &f.lane.lane_id == id))
            .map(|f| f.index.to_string())
            .collect();
        text.push_str(&format!(
            "\n\nCompletion order (as recorded): lanes {}.",
            order.join(", ")
        ));
    }
    for c in &fan.conflicts {
        let lanes: Vec<String> = c
            .lanes
            .iter()
            .filter_map(|id| facts.iter().find(|f| &f.lane.lane_id == id))
            .map(|f| format!("lane {}", f.index))
            .collect();
        match &c.applied_from {
            Some(from) => {
                let winner = facts
                    .iter()
                    .find(|f| &f.lane.lane_id == from)
                    .map_or(from.clone(), |f| format!("lane {}", f.index));
                text.push_str(&format!(
                    "\n\nConflict: `{}` was changed by {}; {winner} completed first, so its change applies (`{}`). Check that the other change is not lost.",
                    c.conflicting_file,
                    lanes.join(" and "),
                    c.resolution.as_str()
                ));
            }
            None => text.push_str(&format!(
                "\n\nConflict: `{}` was changed by {} (`{}`): keep what the user chose.",
                c.conflicting_file,
                lanes.join(" and "),
                c.resolution.as_str()
            )),
        }
    }
    let handed: Vec<String> = facts.iter().filter_map(handed_in_text).collect();
    if !handed.is_empty() {
        text.push_str("\n\n### What each lane handed in\n\nFree text the lanes wrote is quoted (`>`); use it in the synthesis.");
        for part in handed {
            text.push_str("\n\n");
            text.push_str(&part);
        }
    }
    text
}

/// The most of one lane's free text (a plan document, a diff summary) the synthesis prompt
/// repeats: the block output contract bounds a plan document to 16 KiB, and a step with many
/// lanes would otherwise repeat them whole on every rehydrate (decision D192).
pub const HANDED_IN_TEXT_MAX_BYTES: usize = 4 * 1024;

/// One lane's files and deliverables, as the synthesis prompt shows them; `None` when it
/// handed in nothing.
fn handed_in_text(fact: &LaneFact) -> Option<String> {
    let h = fact.handed_in.as_ref()?;
    let mut text = format!("#### Lane {} (`{}`)", fact.index, fact.lane.lane_id);
    if !h.block_type.is_empty() {
        text.push_str(&format!(", a `{}` block", h.block_type));
    }
    let list = |paths: &[String]| {
        if paths.is_empty() {
            "none".to_owned()
        } else {
            paths
                .iter()
                .map(|p| format!("`{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    };
    text.push_str(&format!(
        "\n- Files modified: {}\n- Files created: {}",
        list(&h.files_modified),
        list(&h.files_created)
    ));
    let Some(deliverables) = h.deliverables.as_ref() else {
        return Some(text);
    };
    let field = |key: &str| deliverables.get(key).and_then(Value::as_str);
    match field("blockType") {
        Some("code") => {
            text.push_str(&format!(
                "\n- Files changed: {}",
                list(&strings(deliverables, "filesChanged"))
            ));
            if let Some(diff) = field("diffSummary") {
                text.push_str(&format!("\n- Diff summary:\n{}", quoted(diff)));
            }
        }
        Some("plan") => {
            let tasks = strings(deliverables, "taskList");
            if !tasks.is_empty() {
                text.push_str("\n- Tasks:");
                for task in tasks {
                    text.push_str(&format!("\n{}", quoted(&format!("- {task}"))));
                }
            }
            if let Some(document) = field("markdownDocument") {
                text.push_str(&format!("\n- Plan:\n{}", quoted(document)));
            }
        }
        Some("generic") => {
            if let Some(result) = field("summary") {
                text.push_str(&format!("\n- Result:\n{}", quoted(result)));
            }
        }
        _ => {}
    }
    Some(text)
}

/// `text` as a markdown quote, cut at [`HANDED_IN_TEXT_MAX_BYTES`] on a character boundary: a
/// lane's headings and lines can then neither end the section nor read as the server's words.
fn quoted(text: &str) -> String {
    let mut end = text.len().min(HANDED_IN_TEXT_MAX_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out: Vec<String> = text[..end].lines().map(|l| format!("> {l}")).collect();
    if end < text.len() {
        out.push(format!(
            "> (cut here: {} more bytes; the whole text is in the lane's recorded block output)",
            text.len() - end
        ));
    }
    out.join("\n")
}

/// The section that opens every prompt of a lane (decision D176), in the stateless block
/// contract's assembly order with empty parts left out: the task (the delegation's goal), the
/// file restriction (the lane's own workspace) and the output checklist (the block output at the
/// lane's last step). The routine's own rules and role are already in its compiled steps.
pub(super) fn lane_preamble(
    wr: &Workrail,
    facts: &Facts<'_>,
    link: &LaneLink,
    lane: &RunId,
) -> Result<String, ErrorEnvelope> {
    let goal = lane_spec(wr, facts, link)?.and_then(|spec| spec.goal);
    let mut parts = vec![format!(
        "## Lane {} of a parallel step\n\nYou are working one lane (`{lane}`) of a parallel step of another run; the main agent merges the lanes' work.",
        link.lane_index
    )];
    if let Some(goal) = goal {
        parts.push(format!("Task: {goal}"));
    }
    parts.push(format!(
        "Only modify files in this lane's workspace `{}` (relative to the project root): a git worktree (`git worktree add --detach {}`) or, when the project is not a git repository, a copy of the project. Other files are read-only.",
        workspace(lane),
        workspace(lane)
    ));
    parts.push(format!(
        "You must produce the following outputs:\n1) this lane's steps, each acknowledged with `continue_workflow`;\n2) at the lane's last step (`{}`), one `wr.block_output` artifact with `blockId` `{lane}`, listing every file you changed or created (relative paths).",
        crate::compiler::LANE_REPORT_STEP_ID
    ));
    Ok(parts.join("\n\n"))
}

/// The compiled lane a link names, from the parent node's snapshot and pinned workflow.
fn lane_spec(
    wr: &Workrail,
    facts: &Facts<'_>,
    link: &LaneLink,
) -> Result<Option<LaneSpec>, ErrorEnvelope> {
    let Some(view) = facts.run(&link.parent_run_id) else {
        return Ok(None);
    };
    let Some(node) = view.dag.nodes.get(&link.parent_node_id) else {
        return Ok(None);
    };
    let snapshot = wr
        .store
        .snapshot(&node.snapshot_ref())
        .map_err(|e| e.to_envelope(true))?;
    let compiled = wr
        .store
        .workflow(&view.dag.started.workflow_hash)
        .map_err(|e| e.to_envelope(true))?;
    Ok(
        pending_lanes(&compiled, &snapshot.engine_payload.engine_state)
            .and_then(|spec| spec.lanes.get(link.lane_index as usize - 1).cloned()),
    )
}

//! Parallel lanes (decisions D161, D168, D169, D172), written from the decision text.
//!
//! - **Lanes are runs of the session** (D168). A walk that lands on a step whose compiled
//!   language carries `lanes` (at a start or an advance, a fork included) starts, in the same
//!   append, one run per lane whose `when` holds over the context the landing read: its
//!   `run_started` carrying `lane: {parentRunId, parentNodeId, laneIndex}`, its root
//!   `node_created`, and its initial `context_set` (the mapped inputs, then `args`) when that
//!   context is not empty. The lane's ids are functions of the landing node and the index, so a
//!   replayed landing starts nothing and a new node landing on the step starts lanes of its own.
//! - **The lanes of a node** are the runs whose `run_started` link names it, by index.
//! - **What a lane handed in** (D161, D193) is the latest `wr.block_output` artifact recorded
//!   on a node of its run whose snapshot is complete: the lane's report step is its routine's
//!   last, so only that step's acknowledgement completes the lane, and a block output sent with
//!   an earlier step's notes is no report. Read from the log (the event index of its
//!   `node_output_appended` is where it was recorded). Lanes are ordered by that index, then by lane id; never by a clock or the
//!   order the lanes are listed.
//! - **Fan-in at the acknowledgement** of the parallel step (D169): a lane with no block output
//!   is `contract_violation:missing_required_output`; a `failed` lane is
//!   `contract_violation:invalid_required_output` unless `allowPartialResults`; under
//!   `fail-on-conflict` each path that two or more lanes not `failed` list (in `filesModified`
//!   or `filesCreated`) is `user_only_dependency:needs_user_choice` with the non-assumable choice
//!   `preference_tradeoff`. All point at the parallel step; the mode turns them into blockers or
//!   gaps through the one reason model.
//! - **No subagents** (D172): when `delegation`'s enforcement-grade status on the acknowledged
//!   node's branch is `unavailable`, the node has lanes, and the acknowledgement carries no valid
//!   `capability_unavailable` divergence, an advance records one itself.

use std::collections::BTreeMap;

use serde_json::{Map, Value};
use workrail_spec::blocker::{BlockerPointer, ReasonDetails};
use workrail_spec::closed::NonAssumableChoiceKind;
use workrail_spec::closed::UserOnlyDependencyReason;
use workrail_spec::compiled::{
    CompiledStep, CompiledWorkflowSnapshotV1, LaneSpec, MergeStrategy, ParallelLanes,
};
use workrail_spec::event::{EventData, OutputPayload, SessionEvent};
use workrail_spec::ids::SnapshotRef;
use workrail_spec::ids::{NodeId, RunId, Sha256Digest, StepId, WorkflowId};
use workrail_spec::reason::{ContractViolationReason, GapReason, ReasonCode};
use workrail_spec::snapshot::{EngineState, ExecutionSnapshotFileV1};
use workrail_spec::tools::LaneState;

use crate::interpreter::Finding;

/// The artifact kind of a lane's block output (`wr.contracts.block_output`).
pub const BLOCK_OUTPUT_KIND: &str = "wr.block_output";

/// The lanes of the step `state` is pending at, if that step is a parallel step with lanes.
pub fn pending_lanes<'w>(
    workflow: &'w CompiledWorkflowSnapshotV1,
    state: &EngineState,
) -> Option<&'w ParallelLanes> {
    let pending = state.pending_step()?;
    workflow.step(&pending.step_id)?.language.lanes.as_deref()
}

/// The lanes a landing over `context` starts: `(index from 1, lane)` for each lane whose
/// condition holds, in the authored order.
pub fn active<'l>(
    spec: &'l ParallelLanes,
    context: &Map<String, Value>,
) -> Vec<(u32, &'l LaneSpec)> {
    spec.lanes
        .iter()
        .enumerate()
        .filter(|(_, lane)| lane.when.as_ref().is_none_or(|c| c.evaluate(context)))
        .map(|(i, lane)| (i as u32 + 1, lane))
        .collect()
}

/// A lane's initial context: each `contextMapping` entry whose source key the parent's context
/// holds, then the `args` (which win over a mapped key of the same name).
pub fn lane_context(lane: &LaneSpec, parent: &Map<String, Value>) -> Map<String, Value> {
    let mut context = Map::new();
    for input in &lane.inputs {
        if let Some(value) = parent.get(&input.from) {
            context.insert(input.to.clone(), value.clone());
        }
    }
    for (key, value) in &lane.args {
        context.insert(key.clone(), Value::String(value.clone()));
    }
    context
}

/// One lane run of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneRun {
    pub index: u32,
    pub run_id: RunId,
    pub workflow_id: WorkflowId,
}

/// The lanes the node `node` of `run` started, by index (a whole-log scan of `run_started`).
pub fn lanes_of(events: &[SessionEvent], run: &RunId, node: &NodeId) -> Vec<LaneRun> {
    let node = &landing_of(events, run, node);
    let mut lanes: Vec<LaneRun> = events
        .iter()
        .filter_map(|event| {
            let EventData::RunStarted(started) = event.data() else {
                return None;
            };
            let link = started.lane.as_ref()?;
            let run_id = event.scope().run_id()?;
            (&link.parent_run_id == run && &link.parent_node_id == node).then(|| LaneRun {
                index: link.lane_index,
                run_id: run_id.clone(),
                workflow_id: started.workflow_id.clone(),
            })
        })
        .collect();
    lanes.sort_by_key(|l| l.index);
    lanes
}

/// The node whose landing started the lanes `node` stands for (D169): `node` itself, or for a
/// checkpoint node the step node it checkpoints (a checkpoint records progress at the same
/// step; it starts no lanes of its own).
pub(crate) fn landing_of(events: &[SessionEvent], run: &RunId, node: &NodeId) -> NodeId {
    let mut at = node.clone();
    loop {
        let created = events.iter().find_map(|event| match event.data() {
            EventData::NodeCreated(n)
                if event.scope().run_id() == Some(run) && event.scope().node_id() == Some(&at) =>
            {
                Some(n)
            }
            _ => None,
        });
        match created {
            Some(n) if n.node_kind == workrail_spec::closed::NodeKind::Checkpoint => {
                match &n.parent_node_id {
                    Some(parent) => at = parent.clone(),
                    None => return at,
                }
            }
            _ => return at,
        }
    }
}

/// What a lane handed in: its latest block output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handed {
    /// The event index of the `node_output_appended` that recorded it.
    pub recorded_at: u64,
    pub status: LaneState,
    /// `filesModified`, then `filesCreated`.
    pub files: Vec<String>,
    pub summary: Option<String>,
}

/// The latest `wr.block_output` recorded on a complete node of `lane` (`artifacts`: the
/// recorded artifacts by digest; `snapshots`: the snapshot store).
pub fn handed_in(
    events: &[SessionEvent],
    artifacts: &BTreeMap<Sha256Digest, Map<String, Value>>,
    snapshots: &BTreeMap<SnapshotRef, ExecutionSnapshotFileV1>,
    lane: &RunId,
) -> Option<Handed> {
    // The lane's complete nodes, wherever their `node_created` stands in the log.
    let complete: std::collections::BTreeSet<&NodeId> = events
        .iter()
        .filter(|e| e.scope().run_id() == Some(lane))
        .filter_map(|e| match (e.data(), e.scope().node_id()) {
            (EventData::NodeCreated(created), Some(node))
                if snapshots
                    .get(&created.snapshot_ref)
                    .is_some_and(|s| s.engine_payload.engine_state.is_complete()) =>
            {
                Some(node)
            }
            _ => None,
        })
        .collect();
    let mut latest = None;
    for event in events {
        if event.scope().run_id() != Some(lane) {
            continue;
        }
        let EventData::NodeOutputAppended(output) = event.data() else {
            continue;
        };
        if !event
            .scope()
            .node_id()
            .is_some_and(|node| complete.contains(node))
        {
            continue;
        }
        let OutputPayload::ArtifactRef { sha256, .. } = &output.payload else {
            continue;
        };
        let Some(artifact) = artifacts.get(sha256) else {
            continue;
        };
        if artifact.get("kind").and_then(Value::as_str) != Some(BLOCK_OUTPUT_KIND) {
            continue;
        }
        // The contract's closed set; anything else would not have been recorded, and is read
        // as not completed rather than as done.
        let status = match artifact.get("status").and_then(Value::as_str) {
            Some("completed") => LaneState::Completed,
            Some("partial") => LaneState::Partial,
            _ => LaneState::Failed,
        };
        let files = ["filesModified", "filesCreated"]
            .iter()
            .filter_map(|key| artifact.get(*key).and_then(Value::as_array))
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect();
        latest = Some(Handed {
            recorded_at: event.event_index().get(),
            status,
            files,
            summary: artifact
                .get("summary")
                .and_then(Value::as_str)
                .map(str::to_owned),
        });
    }
    latest
}

/// A file two or more lanes listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub file: String,
    /// The lanes (by index) that listed it, in completion order.
    pub lanes: Vec<u32>,
    /// `workspace`: the lane recorded first, whose change applies.
    pub winner: Option<u32>,
}

/// The fan-in of a node's lanes (D161).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FanIn {
    pub strategy: MergeStrategy,
    pub allow_partial_results: bool,
    /// Every lane with what it handed in, by index.
    pub lanes: Vec<(LaneRun, Option<Handed>)>,
    /// The lanes that handed in a block output, by index, in completion order.
    pub completion_order: Vec<u32>,
    /// By path; empty under `concatenate`.
    pub conflicts: Vec<Conflict>,
}

/// Judges the fan-in of `lanes` (with what each handed in) under `spec`.
pub fn fan_in(spec: &ParallelLanes, lanes: Vec<(LaneRun, Option<Handed>)>) -> FanIn {
    let mut handed: Vec<(&LaneRun, &Handed)> = lanes
        .iter()
        .filter_map(|(lane, h)| h.as_ref().map(|h| (lane, h)))
        .collect();
    handed.sort_by(|(a, x), (b, y)| {
        (x.recorded_at, a.run_id.as_str()).cmp(&(y.recorded_at, b.run_id.as_str()))
    });
    let completion_order = handed.iter().map(|(lane, _)| lane.index).collect();
    let mut conflicts = Vec::new();
    if spec.merge_strategy != MergeStrategy::Concatenate {
        // Each path with the lanes that listed it, in completion order; a failed lane's changes
        // are not merged, so they collide with nothing.
        let mut by_file: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
        for (lane, h) in &handed {
            if h.status == LaneState::Failed {
                continue;
            }
            for file in &h.files {
                let listed = by_file.entry(file.as_str()).or_default();
                if !listed.contains(&lane.index) {
                    listed.push(lane.index);
                }
            }
        }
        for (file, listed) in by_file {
            if listed.len() < 2 {
                continue;
            }
            conflicts.push(Conflict {
                file: file.to_owned(),
                winner: (spec.merge_strategy == MergeStrategy::Workspace).then(|| listed[0]),
                lanes: listed,
            });
        }
    }
    FanIn {
        strategy: spec.merge_strategy,
        allow_partial_results: spec.allow_partial_results,
        lanes,
        completion_order,
        conflicts,
    }
}

/// The findings of acknowledging the parallel step `step` whose fan-in is `fan` (D169), in
/// this order: missing lanes, failed lanes, then each `fail-on-conflict` conflict by path; each
/// with whether its subject is required (a failed lane under `allowPartialResults` is not: it is
/// disclosed as a `warning` gap and blocks nothing).
pub fn findings(step: &CompiledStep, fan: &FanIn) -> Vec<(Finding, bool)> {
    let step_id = &step.step_id;
    let at = |reason: GapReason, message: String, details: Option<ReasonDetails>| Finding {
        reason: ReasonCode::new(reason),
        pointer: BlockerPointer::WorkflowStep {
            step_id: step_id.clone(),
        },
        message,
        details,
        found_moving: false,
        per_rule: false,
    };
    let mut out = Vec::new();
    let missing: Vec<u32> = fan
        .lanes
        .iter()
        .filter(|(_, h)| h.is_none())
        .map(|(lane, _)| lane.index)
        .collect();
    if !missing.is_empty() {
        out.push((
            at(
                GapReason::ContractViolation(ContractViolationReason::MissingRequiredOutput),
                format!(
                    "step {step_id}: lanes {} handed in no block output",
                    list(&missing)
                ),
                None,
            ),
            true,
        ));
    }
    let failed: Vec<u32> = fan
        .lanes
        .iter()
        .filter(|(_, h)| h.as_ref().is_some_and(|h| h.status == LaneState::Failed))
        .map(|(lane, _)| lane.index)
        .collect();
    if !failed.is_empty() {
        out.push((
            at(
                GapReason::ContractViolation(ContractViolationReason::InvalidRequiredOutput),
                format!("step {step_id}: lanes {} failed", list(&failed)),
                None,
            ),
            !fan.allow_partial_results,
        ));
    }
    if fan.strategy == MergeStrategy::FailOnConflict {
        for conflict in &fan.conflicts {
            out.push((
                at(
                    GapReason::UserOnlyDependency(UserOnlyDependencyReason::NeedsUserChoice),
                    format!(
                        "step {step_id}: lanes {} each changed {}",
                        list(&conflict.lanes),
                        conflict.file
                    ),
                    Some(ReasonDetails::NonAssumableChoice {
                        choice: NonAssumableChoiceKind::PreferenceTradeoff,
                    }),
                ),
                true,
            ));
        }
    }
    out
}

fn list(indexes: &[u32]) -> String {
    indexes
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The summary of the divergence a fan-in records when delegation is known unavailable (D172):
/// it names the step and the number of lanes.
pub fn sequential_summary(step_id: &StepId, lanes: usize) -> String {
    format!(
        "Delegation was unavailable: the {lanes} lanes of step '{step_id}' ran one after another in this chat, and their recorded block outputs were fanned in."
    )
}

/// Whether a `wr.block_output` artifact breaks its contract (decision D160), written from the
/// decision's text: every field present with its type, `blockType` and `status` from their
/// closed sets, deliverables of a type the block type delivers and of that type's closed shape,
/// every path relative, normalized and listed once in its list, the byte budgets, and an
/// RFC 3339 timestamp.
pub fn block_output_invalid(artifact: &Map<String, Value>) -> bool {
    const FIELDS: [&str; 9] = [
        "kind",
        "blockId",
        "blockType",
        "status",
        "deliverables",
        "summary",
        "filesModified",
        "filesCreated",
        "timestamp",
    ];
    if artifact.keys().any(|k| !FIELDS.contains(&k.as_str()))
        || FIELDS.iter().any(|f| !artifact.contains_key(*f))
    {
        return true;
    }
    fn text(v: Option<&Value>, max: usize) -> Option<&str> {
        v.and_then(Value::as_str)
            .filter(|s| !s.is_empty() && s.len() <= max)
    }
    let paths_ok = |v: Option<&Value>| {
        let Some(list) = v.and_then(Value::as_array) else {
            return false;
        };
        let mut seen = std::collections::BTreeSet::new();
        list.len() <= 200
            && list
                .iter()
                .all(|p| text(Some(p), 512).is_some_and(|p| path_is_normal(p) && seen.insert(p)))
    };
    let block_type = text(artifact.get("blockType"), 16).unwrap_or_default();
    let delivers: &[&str] = match block_type {
        "plan" => &["plan"],
        "dev" => &["code"],
        "review" => &["generic"],
        "test" | "devops" => &["code", "generic"],
        _ => return true,
    };
    if !matches!(
        artifact.get("status").and_then(Value::as_str),
        Some("completed" | "failed" | "partial")
    ) || text(artifact.get("blockId"), 128).is_none()
        || text(artifact.get("summary"), 1024).is_none()
        || !paths_ok(artifact.get("filesModified"))
        || !paths_ok(artifact.get("filesCreated"))
        || !text(artifact.get("timestamp"), 64).is_some_and(rfc3339)
    {
        return true;
    }
    let Some(deliverables) = artifact.get("deliverables").and_then(Value::as_object) else {
        return true;
    };
    let shape_ok = |keys: &[&str]| {
        deliverables.len() == keys.len() && keys.iter().all(|k| deliverables.contains_key(*k))
    };
    let fits = match deliverables.get("blockType").and_then(Value::as_str) {
        Some(kind @ "plan") if delivers.contains(&kind) => {
            shape_ok(&["blockType", "markdownDocument", "taskList"])
                && text(deliverables.get("markdownDocument"), 16 * 1024).is_some()
                && deliverables
                    .get("taskList")
                    .and_then(Value::as_array)
                    .is_some_and(|tasks| {
                        tasks.len() <= 100 && tasks.iter().all(|t| text(Some(t), 512).is_some())
                    })
        }
        Some(kind @ "code") if delivers.contains(&kind) => {
            shape_ok(&["blockType", "diffSummary", "filesChanged"])
                && text(deliverables.get("diffSummary"), 2048).is_some()
                && paths_ok(deliverables.get("filesChanged"))
        }
        Some(kind @ "generic") if delivers.contains(&kind) => {
            shape_ok(&["blockType", "summary"]) && text(deliverables.get("summary"), 1024).is_some()
        }
        _ => false,
    };
    !fits
}

/// A relative path with `/` between non-empty parts, none `.` or `..`, no drive letter, no
/// backslash and no control character.
fn path_is_normal(path: &str) -> bool {
    let bytes = path.as_bytes();
    !(path.starts_with('/')
        || path.contains('\\')
        || path.chars().any(char::is_control)
        || (bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic()))
        && path.split('/').all(|part| !matches!(part, "" | "." | ".."))
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)` with digits where digits go.
fn rfc3339(stamp: &str) -> bool {
    let b = stamp.as_bytes();
    let digits = |range: std::ops::Range<usize>| {
        b.get(range.clone())
            .is_some_and(|d| d.len() == range.len() && d.iter().all(u8::is_ascii_digit))
    };
    if !(digits(0..4)
        && b.get(4) == Some(&b'-')
        && digits(5..7)
        && b.get(7) == Some(&b'-')
        && digits(8..10)
        && matches!(b.get(10), Some(b'T' | b't'))
        && digits(11..13)
        && b.get(13) == Some(&b':')
        && digits(14..16)
        && b.get(16) == Some(&b':')
        && digits(17..19))
    {
        return false;
    }
    let mut rest = &stamp[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let n = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return false;
        }
        rest = &fraction[n..];
    }
    match rest.as_bytes() {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|d| d.is_ascii_digit()),
        _ => false,
    }
}

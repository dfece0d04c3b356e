//! The in-memory reference model: sessions, runs and nodes with the protocol operations as pure
//! transitions, `Model::apply(&self, &Command) -> Result<(Model, Observation), ModelError>`.
//!
//! The model's state *is* durable truth: each session's committed event log (the locked event
//! kinds, built through `workrail_spec::event::SessionEvent`), the snapshot CAS and the pinned
//! compiled workflows. Everything else (DAG, tips, status, preferences) is read through the
//! [`crate::projections`]. An operation appends one plan of events atomically or nothing at all,
//! and every observation is built from recorded facts, so a replay returns exactly what the
//! original call returned.
//!
//! # Operations and the locks they embody
//!
//! | operation | what it does | lock ids |
//! |---|---|---|
//! | [`Command::Start`] | `session_created` (new session), `run_started`, root `node_created` with the first pending step; optional `preferences_changed` on the root, and a preference warning output on the root when its snapshot exceeds the workflow's recommendation; the same run id again is a no-op returning the recorded start | `L-EVENT-RUN-STARTED`, `L-EVENT-NODE-PARENT`, `L-EVENT-NODE-HASH-MATCH`, `L-PREF-GLOBAL-COPIED`, `L-DEDUPE-NOOP` |
//! | [`Command::Rehydrate`] | the node's pending step, completeness, whether it is a tip, effective preferences; never changes the model | `L-TOKEN-REHYDRATE-PURE`, `L-MCP-REHYDRATE-NO-EVENTS`, `L-EVENT-ADVANCE-ACK-ONLY` |
//! | [`Command::Advance`], fresh attempt, outputs valid | child `node_created` + `acked_step` edge + outputs on the child + `advance_recorded{advanced}` on the node | `L-EVENT-ADVANCE-RECORDED`, `L-EVENT-ADVANCED-HAS-NODE-EDGE`, `L-DAG-ACKED-STEP-EDGE`, `L-OUTPUT-ORDER`, `L-OUTPUT-ID-DERIVED`, `L-TOKEN-ACK-ATTEMPTS` |
//! | [`Command::Advance`] with a preference delta that changes the node's snapshot | judged under the changed snapshot; `preferences_changed` on the child (advanced) or on the attempted node before its `advance_recorded` (blocked), plus a preference warning output beside it when the new snapshot exceeds the workflow's recommendation (D43, D44) | `L-PREF-NODE-ATTACHED`, `L-PREF-WARNINGS` |
//! | [`Command::Advance`] at a node that already has a step child | the same, as a new sibling with cause `non_tip_advance` | `L-DAG-NON-TIP-AUTO-FORK`, `L-DAG-NO-FORK-EDGE-KIND` |
//! | [`Command::Advance`], a recorded attempt | returns the recorded outcome; appends nothing, recomputes nothing | `L-TOKEN-ACK-IDEMPOTENT`, `L-TOKEN-REPLAY-FACTS`, `L-EVENT-ADVANCE-ATTEMPT-KEY`, `L-EVENT-ATTEMPTS-APPENDABLE` |
//! | [`Command::Advance`], missing/invalid required output or loop control, loop limit | blocking modes: `advance_recorded{blocked}` (same pending step; the next attempt is fresh), plus a critical gap for `unexpected:*`; never-stop: critical gap on the child and advance | `L-REASON-SINGLE-MODEL`, `L-REASON-BLOCKING-MODES`, `L-REASON-NEVER-STOP`, `L-REASON-UNEXPECTED`, `L-LOOP-MISSING-CONTROL-BLOCKING`, `L-LOOP-MISSING-CONTROL-NEVER-STOP`, `L-LOOP-LIMIT-ERROR` |
//! | [`Command::Advance`] with reports (`wr.capability_observation`, `wr.user_only_dependency`, `workflow_divergence`) | valid observations become `capability_observed` where the attempt lands (the child, or the attempted node when blocked) with provenance by basis and step; a required capability the step depends on without a strong `available` status, or reported unavailable, is `capability_missing:*`; a `needed` user-only dependency is `user_only_dependency:*`; strong `available` observations and `supplied` reports resolve open disclosures by `info` gaps; valid divergences become `divergence_recorded` on the child only; invalid optional reports are `warning` gaps (D40 to D42, D75 to D77; [`crate::capabilities`], [`crate::reports`]) | `L-CAP-PROVENANCE`, `L-CAP-WEAK-NO-UNLOCK`, `L-GAP-NON-ASSUMABLE-CHOICE`, `L-GAP-RESOLVED-PROJECTION`, `L-EVENT-DIVERGENCE` |
//! | [`Command::Start`] or [`Command::Advance`] landing on a parallel step with lanes | in the same plan, per lane whose condition holds over the context the landing read: the lane's `run_started` (with `lane: {parentRunId, parentNodeId, laneIndex}`), its root `node_created`, its start's gaps and its initial `context_set`; lane ids derive from the landing node and the index, so a replay starts nothing and a fork starts its own (D168, D173; [`crate::lanes`]) | `L-EVENT-RUN-STARTED`, `L-DEDUPE-NOOP` |
//! | [`Command::Advance`] at a parallel step | the fan-in of the node's lanes from their latest recorded block outputs: missing and failed lanes and `fail-on-conflict` conflicts are findings of the ack (blockers or gaps by mode); with delegation known unavailable on the branch and no `capability_unavailable` divergence sent, an advance records one (D161, D169, D172) | `L-REASON-SINGLE-MODEL`, `L-REASON-BLOCKING-MODES`, `L-REASON-NEVER-STOP`, `L-EVENT-DIVERGENCE` |
//! | [`Command::Checkpoint`] | `checkpoint` node (same snapshot) + `checkpoint` edge (`checkpoint_created`) + outputs on it; no advancement; a recorded checkpoint attempt is a no-op returning the same observation | `L-DAG-CHECKPOINT-EDGE`, `L-DAG-CHECKPOINT-NO-ADVANCE`, `L-TOKEN-CHECKPOINT-IDEMPOTENT` |
//! | [`Command::ChangePreferences`] | node-attached `preferences_changed` (delta + effective); the same `changeId` again is a no-op | `L-EVENT-PREFS-CHANGED`, `L-PREF-NODE-ATTACHED`, `L-PREF-PRECEDENCE` |
//!
//! # Decisions the locks leave open
//!
//! - **Where facts attach.** `advance_recorded` is scoped to the attempted node (locked). The
//!   outputs of an advanced attempt and the gaps it discloses attach to the *new* node, the node
//!   whose existence they explain: the preferred tip then carries the latest recap (which resume
//!   ranking matches on) and the never-stop gaps (which run status reads). A blocked attempt has
//!   no new node: its gaps attach to the attempted node, and its outputs are not recorded.
//! - **Edge causes.** An advance from a node without step children uses `idempotent_replay` (the
//!   ordinary, replay-safe ack); from a node that already has a step child, `non_tip_advance`.
//!   `intentional_fork` is not produced: with the attempt scheme a fork is always an advance from a
//!   non-tip node.
//! - **Checkpoint children do not make a node non-tip** for advancing: checkpointing records
//!   progress without advancing, so a later advance from the same node is not a fork. They are
//!   children for the preferred-tip policy (leaves), as the DAG says.
//! - **Artifacts** become `artifact_ref` outputs: `sha256` of the artifact's RFC 8785 bytes,
//!   `contentType` `application/json`, `byteLength` those bytes; identical artifacts collapse.
//!   WorkRail's own preference warning (`workrail_spec::preferences::PreferenceWarningV1`, its
//!   own content type) joins them in the `(sha256, contentType)` order.
//! - **Preferences sent with an ack** (D43) are recorded only when they change the attempted
//!   node's effective snapshot: on the new node when the ack advances, on the attempted node when
//!   it is blocked (the change explains the judgement, and applies to later acks from that node
//!   and to children created after it, never to children that already exist).
//! - **Start** settles on the first pending step (the root snapshot is `running` or `complete`;
//!   the model never stores `init`). A session's baseline preferences are fixed when the session
//!   is created: the start command's baseline, else a copy of the model's global defaults.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};
use workrail_spec::artifact::ArtifactError;
use workrail_spec::blocker::{Blocker, BlockerReport, BlockerReportError};
use workrail_spec::budget::{BLOCKER_MESSAGE_MAX_BYTES, BoundedText, truncate_with_marker};
use workrail_spec::closed::{
    AdvanceIntent, ContextSource, EdgeCauseKind, EdgeKind, GapSeverity, NodeKind, OutputChannel,
    PreferenceSource, RunStatus, WorkflowSourceKind,
};
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::dedupe::DedupeKey;
use workrail_spec::event::{
    AdvanceOutcome, AdvanceRecorded, CapabilityObserved, ContextSet, DivergenceRecorded, EdgeCause,
    EdgeCreated, EffectivePreferences, EventData, EventScope, GapRecorded, GapResolution, LaneLink,
    NodeCreated, NodeOutputAppended, OutputPayload, PreferenceDelta, PreferencesChanged,
    RunStarted, SessionCreated, SessionEvent,
};
use workrail_spec::ids::{
    AttemptId, ChangeId, EventIndex, NodeId, RunId, SessionId, Sha256Digest, SnapshotRef,
    WorkflowHash,
};
use workrail_spec::jcs::{JcsError, jcs_digest, to_canonical_bytes};
use workrail_spec::preferences::{PREFERENCE_WARNING_CONTENT_TYPE, PreferenceWarningV1};
use workrail_spec::snapshot::{EnginePayloadV1, EngineState, ExecutionSnapshotFileV1, PendingStep};
use workrail_spec::tools::{LaneState, OutputInput};

use crate::derive;
use crate::interpreter::{self, Finding, InterpreterError, Progress};
use crate::projections::{
    self, AttemptRecord, PreferenceDefaults, PreferredTip, RunDag, advance_outcome,
    advance_records, effective_preferences, preferred_tip, run_ids,
};

/// The content type the model gives artifact outputs (their bytes are RFC 8785 JSON).
pub const ARTIFACT_CONTENT_TYPE: &str = "application/json";

/// A node of a run of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRef {
    pub session_id: SessionId,
    pub run_id: RunId,
    pub node_id: NodeId,
}

/// One lane of a parallel step's node, as its responses hand it out (decision D168).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneView {
    pub index: u32,
    pub run_id: RunId,
    pub workflow_id: workrail_spec::ids::WorkflowId,
    /// The delegation's goal.
    pub goal: Option<String>,
    /// From the lane's latest block output; `in_progress` without one.
    pub status: LaneState,
    /// The lane run's preferred tip (where its tokens point).
    pub tip: Option<NodeId>,
}

/// Starts a run (creating the session when it is new).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartRun {
    pub session_id: SessionId,
    pub run_id: RunId,
    pub workflow: CompiledWorkflowSnapshotV1,
    pub source_kind: WorkflowSourceKind,
    pub source_ref: String,
    /// Used only when the session is new; `None` copies the model's global defaults.
    pub session_baseline: Option<EffectivePreferences>,
    /// Recorded on the root node when non-empty.
    pub preferences: Vec<PreferenceDelta>,
    /// The run's initial context (recorded as a `context_set` when non-empty); the first walk
    /// reads it (decision D139).
    pub context: Map<String, Value>,
}

/// An ack or checkpoint attempt at a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptAt {
    pub node: NodeRef,
    pub attempt_id: AttemptId,
    pub output: OutputInput,
}

/// An ack attempt at a node, with the preference delta sent along (already resolved from any
/// preset: `workrail_spec::preferences::requested_delta`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckAt {
    pub node: NodeRef,
    pub attempt_id: AttemptId,
    pub output: OutputInput,
    pub preferences: Vec<PreferenceDelta>,
    /// The context delta sent along: merged into the run's context (locks §18.2), read by the
    /// walk, and recorded when the attempt advances and the merge changed something.
    pub context: Option<Map<String, Value>>,
}

/// A node-attached preference change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreferenceChange {
    pub node: NodeRef,
    pub change_id: ChangeId,
    pub source: PreferenceSource,
    pub delta: Vec<PreferenceDelta>,
}

/// The operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Start(Box<StartRun>),
    Rehydrate(NodeRef),
    Advance(AckAt),
    Checkpoint(AttemptAt),
    ChangePreferences(PreferenceChange),
}

/// What an operation returns. Built only from recorded facts, so replays are identical.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observation {
    Started {
        session_id: SessionId,
        run_id: RunId,
        root: NodeId,
        pending: Option<PendingStep>,
        is_complete: bool,
    },
    Rehydrated {
        node_id: NodeId,
        pending: Option<PendingStep>,
        is_complete: bool,
        /// No step child: advancing here extends the branch instead of forking.
        is_tip: bool,
        preferences: EffectivePreferences,
    },
    Advanced {
        node_id: NodeId,
        attempt_id: AttemptId,
        to_node_id: NodeId,
        /// The pending step of the new node.
        pending: Option<PendingStep>,
        is_complete: bool,
    },
    Blocked {
        node_id: NodeId,
        attempt_id: AttemptId,
        blockers: BlockerReport,
        /// The same pending step as before the attempt.
        pending: Option<PendingStep>,
    },
    Checkpointed {
        node_id: NodeId,
        attempt_id: AttemptId,
        checkpoint_node_id: NodeId,
    },
    PreferencesChanged {
        node_id: NodeId,
        change_id: ChangeId,
        effective: EffectivePreferences,
    },
}

/// Why an operation was refused. A refused operation changes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelError {
    UnknownSession(SessionId),
    UnknownRun(RunId),
    UnknownNode(NodeId),
    /// Neither a recorded attempt of the node nor its current one.
    UnknownAttempt(AttemptId),
    /// The node's snapshot has no pending step (the run is complete there).
    NothingPending(NodeId),
    /// The workflow needs a decision before its first step, and the mode blocks on it.
    CannotStart(String),
    /// The context (or its merge with the run's) breaks a rule of locks §18.2.
    InvalidContext(String),
    Event(ArtifactError),
    Blocker(BlockerReportError),
    Hash(JcsError),
    /// The model's own state does not hold together (a bug in the model).
    Invariant(String),
}

impl std::fmt::Display for ModelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownSession(id) => write!(f, "unknown session {id}"),
            Self::UnknownRun(id) => write!(f, "unknown run {id}"),
            Self::UnknownNode(id) => write!(f, "unknown node {id}"),
            Self::UnknownAttempt(id) => write!(f, "attempt {id} is neither recorded nor current"),
            Self::NothingPending(id) => write!(f, "node {id} has no pending step"),
            Self::CannotStart(reason) => write!(f, "the run cannot start: {reason}"),
            Self::InvalidContext(reason) => write!(f, "invalid context: {reason}"),
            Self::Event(e) => write!(f, "invalid event: {e}"),
            Self::Blocker(e) => write!(f, "invalid blocker report: {e}"),
            Self::Hash(e) => write!(f, "canonical JSON failed: {e}"),
            Self::Invariant(detail) => write!(f, "model invariant violated: {detail}"),
        }
    }
}

impl std::error::Error for ModelError {}

impl From<ArtifactError> for ModelError {
    fn from(e: ArtifactError) -> Self {
        Self::Event(e)
    }
}

impl From<JcsError> for ModelError {
    fn from(e: JcsError) -> Self {
        Self::Hash(e)
    }
}

impl From<BlockerReportError> for ModelError {
    fn from(e: BlockerReportError) -> Self {
        Self::Blocker(e)
    }
}

impl From<InterpreterError> for ModelError {
    fn from(e: InterpreterError) -> Self {
        Self::Invariant(e.to_string())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct SessionState {
    baseline: EffectivePreferences,
    events: Vec<SessionEvent>,
}

/// The model: durable truth of every session, the snapshot CAS and the pinned workflows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    global_defaults: EffectivePreferences,
    sessions: BTreeMap<SessionId, SessionState>,
    snapshots: BTreeMap<SnapshotRef, ExecutionSnapshotFileV1>,
    workflows: BTreeMap<WorkflowHash, CompiledWorkflowSnapshotV1>,
    /// The items each node's walk passed by their `runCondition` (decision D139), by the node
    /// the walk landed on: what that node's decision trace must say was skipped.
    skips: BTreeMap<(SessionId, NodeId), Vec<interpreter::Skip>>,
    /// The artifacts recorded as outputs, by the digest their `artifact_ref` names (the content
    /// store): a lane's block output is read from here (decision D161).
    artifacts: BTreeMap<Sha256Digest, Map<String, Value>>,
}

/// Where a walk landed, for starting the lanes of the step it landed on (decision D168).
struct Landing<'a> {
    run_id: &'a RunId,
    node_id: &'a NodeId,
    source_kind: WorkflowSourceKind,
    source_ref: &'a str,
    /// The autonomy the lanes' routines start under (the session's baseline: a lane's root has
    /// no preferences of its own).
    autonomy: workrail_spec::closed::Autonomy,
}

/// Events of one operation, appended together or not at all.
struct Plan<'s> {
    session_id: &'s SessionId,
    next: u64,
    events: Vec<SessionEvent>,
}

impl<'s> Plan<'s> {
    fn new(session_id: &'s SessionId, committed: usize) -> Self {
        Self {
            session_id,
            next: committed as u64,
            events: Vec::new(),
        }
    }

    /// The index the next pushed event will get.
    fn next_index(&self) -> Result<EventIndex, ModelError> {
        EventIndex::new(self.next)
            .ok_or_else(|| ModelError::Invariant("EventIndex overflow".into()))
    }

    /// The event id of the event `ahead` positions after the next one.
    fn event_id_ahead(&self, ahead: u64) -> Result<workrail_spec::ids::EventId, ModelError> {
        let index = EventIndex::new(self.next + ahead)
            .ok_or_else(|| ModelError::Invariant("EventIndex overflow".into()))?;
        Ok(derive::event_id(self.session_id, index))
    }

    fn push(&mut self, scope: EventScope, data: EventData) -> Result<(), ModelError> {
        let index = self.next_index()?;
        let event = SessionEvent::new(
            derive::event_id(self.session_id, index),
            index,
            self.session_id.clone(),
            scope,
            data,
        )?;
        self.events.push(event);
        self.next += 1;
        Ok(())
    }
}

impl Model {
    /// An empty model; `global_defaults` are copied into each new session's baseline.
    pub fn new(global_defaults: EffectivePreferences) -> Self {
        Self {
            global_defaults,
            sessions: BTreeMap::new(),
            snapshots: BTreeMap::new(),
            workflows: BTreeMap::new(),
            skips: BTreeMap::new(),
            artifacts: BTreeMap::new(),
        }
    }

    // ---------------------------------------------------------------------------------------
    // Queries (pure reads)
    // ---------------------------------------------------------------------------------------

    pub fn session_ids(&self) -> impl Iterator<Item = &SessionId> {
        self.sessions.keys()
    }

    /// The committed events of a session, in `EventIndex` order.
    pub fn events(&self, session_id: &SessionId) -> Option<&[SessionEvent]> {
        self.sessions.get(session_id).map(|s| s.events.as_slice())
    }

    pub fn snapshot(&self, snapshot_ref: &SnapshotRef) -> Option<&ExecutionSnapshotFileV1> {
        self.snapshots.get(snapshot_ref)
    }

    pub fn workflow(&self, hash: &WorkflowHash) -> Option<&CompiledWorkflowSnapshotV1> {
        self.workflows.get(hash)
    }

    /// Whether the snapshot is `complete` (unknown snapshots are not).
    pub fn is_complete(&self, snapshot_ref: &SnapshotRef) -> bool {
        self.snapshot(snapshot_ref)
            .is_some_and(|s| s.engine_payload.engine_state.is_complete())
    }

    pub fn preference_defaults(&self, session_id: &SessionId) -> Option<PreferenceDefaults> {
        self.sessions.get(session_id).map(|s| PreferenceDefaults {
            session_baseline: Some(s.baseline),
            global: self.global_defaults,
        })
    }

    pub fn run_ids(&self, session_id: &SessionId) -> Vec<RunId> {
        self.events(session_id).map(run_ids).unwrap_or_default()
    }

    pub fn run_dag(&self, session_id: &SessionId, run_id: &RunId) -> Option<RunDag> {
        let events = self.events(session_id)?;
        run_ids(events)
            .contains(run_id)
            .then(|| RunDag::build(events, run_id))
    }

    pub fn preferred_tip(&self, session_id: &SessionId, run_id: &RunId) -> Option<PreferredTip> {
        preferred_tip(self.events(session_id)?, &self.run_dag(session_id, run_id)?)
    }

    pub fn run_status(&self, session_id: &SessionId, run_id: &RunId) -> Option<RunStatus> {
        projections::run_status(
            self.events(session_id)?,
            &self.run_dag(session_id, run_id)?,
            &|r| self.is_complete(r),
            &self.preference_defaults(session_id)?,
        )
    }

    pub fn effective_preferences(&self, node: &NodeRef) -> Option<EffectivePreferences> {
        let dag = self.run_dag(&node.session_id, &node.run_id)?;
        dag.node(&node.node_id)?;
        Some(effective_preferences(
            self.events(&node.session_id)?,
            &dag,
            &node.node_id,
            &self.preference_defaults(&node.session_id)?,
        ))
    }

    /// Whether the pending step at `node` asks for the user's confirmation (decision D144);
    /// `None` when the node is unknown or has no pending step.
    pub fn needs_confirmation(&self, node: &NodeRef) -> Option<bool> {
        let dag = self.run_dag(&node.session_id, &node.run_id)?;
        let snapshot = self.snapshots.get(&dag.node(&node.node_id)?.snapshot_ref)?;
        let pending = snapshot.engine_payload.engine_state.pending_step()?;
        let workflow = self.workflows.get(&snapshot.workflow_hash)?;
        let step = workflow.step(&pending.step_id)?;
        Some(crate::language::needs_confirmation(step, &pending.bindings))
    }

    /// The items the walk that landed on `node` passed by their `runCondition`, in walk order
    /// (decision D139): what the node's decision trace must record as skipped.
    pub fn skips_at(&self, session: &SessionId, node: &NodeId) -> &[interpreter::Skip] {
        self.skips
            .get(&(session.clone(), node.clone()))
            .map_or(&[], Vec::as_slice)
    }

    /// The lanes the node started when its pending step is a parallel step with lanes (decision
    /// D168), by index: what the node's responses hand out. Empty for any other node.
    pub fn lanes_at(&self, node: &NodeRef) -> Vec<LaneView> {
        let Some(events) = self.events(&node.session_id) else {
            return Vec::new();
        };
        let Some(state) = self.pending_state(node) else {
            return Vec::new();
        };
        let Some(workflow) = self.workflow_of(node) else {
            return Vec::new();
        };
        let Some(spec) = crate::lanes::pending_lanes(workflow, state) else {
            return Vec::new();
        };
        projections_lanes(
            events,
            &self.artifacts,
            &self.snapshots,
            &node.run_id,
            &node.node_id,
        )
        .into_iter()
        .map(|(lane, handed)| {
            let tip = self
                .preferred_tip(&node.session_id, &lane.run_id)
                .map(|t| t.node_id);
            LaneView {
                goal: usize::try_from(lane.index)
                    .ok()
                    .and_then(|i| spec.lanes.get(i.checked_sub(1)?))
                    .and_then(|l| l.goal.clone()),
                status: handed.map_or(LaneState::InProgress, |h| h.status),
                index: lane.index,
                run_id: lane.run_id,
                workflow_id: lane.workflow_id,
                tip,
            }
        })
        .collect()
    }

    /// The fan-in the step after a parallel step shows (decision D169, `## Lane results`): the
    /// fan-in of the lanes of `node`'s parent, read from the current log, when that parent is
    /// pending at a parallel step and started lanes.
    pub fn lane_results_at(&self, node: &NodeRef) -> Option<crate::lanes::FanIn> {
        let events = self.events(&node.session_id)?;
        let dag = self.run_dag(&node.session_id, &node.run_id)?;
        // A node still at the parallel step shows its lanes, not their results; a checkpoint
        // shows what its step node shows.
        if crate::lanes::pending_lanes(self.workflow_of(node)?, self.pending_state(node)?).is_some()
        {
            return None;
        }
        let step_node = crate::lanes::landing_of(events, &node.run_id, &node.node_id);
        let parent = dag.node(&step_node)?.parent.clone()?;
        let parent_ref = NodeRef {
            node_id: parent.clone(),
            ..node.clone()
        };
        let state = self.pending_state(&parent_ref)?;
        let spec = crate::lanes::pending_lanes(self.workflow_of(&parent_ref)?, state)?;
        let lanes = projections_lanes(
            events,
            &self.artifacts,
            &self.snapshots,
            &node.run_id,
            &parent,
        );
        (!lanes.is_empty()).then(|| crate::lanes::fan_in(spec, lanes))
    }

    fn pending_state(&self, node: &NodeRef) -> Option<&EngineState> {
        let dag = self.run_dag(&node.session_id, &node.run_id)?;
        let snapshot = self.snapshots.get(&dag.node(&node.node_id)?.snapshot_ref)?;
        Some(&snapshot.engine_payload.engine_state)
    }

    fn workflow_of(&self, node: &NodeRef) -> Option<&CompiledWorkflowSnapshotV1> {
        let dag = self.run_dag(&node.session_id, &node.run_id)?;
        self.workflows.get(&dag.pin.as_ref()?.workflow_hash)
    }

    /// The node's current ack attempt (`k` = attempts recorded at the node).
    pub fn current_ack_attempt(&self, node: &NodeRef) -> Option<AttemptId> {
        self.run_dag(&node.session_id, &node.run_id)?
            .node(&node.node_id)?;
        let k = advance_records(self.events(&node.session_id)?, &node.run_id, &node.node_id).len();
        Some(derive::ack_attempt_id(
            &node.session_id,
            &node.run_id,
            &node.node_id,
            k,
        ))
    }

    /// The node's current checkpoint attempt (`k` = checkpoint edges leaving the node).
    pub fn current_checkpoint_attempt(&self, node: &NodeRef) -> Option<AttemptId> {
        let dag = self.run_dag(&node.session_id, &node.run_id)?;
        dag.node(&node.node_id)?;
        let k = dag
            .edges_from(&node.node_id)
            .filter(|e| e.kind == EdgeKind::Checkpoint)
            .count();
        Some(derive::checkpoint_attempt_id(
            &node.session_id,
            &node.run_id,
            &node.node_id,
            k,
        ))
    }

    // ---------------------------------------------------------------------------------------
    // Transitions
    // ---------------------------------------------------------------------------------------

    /// Applies one operation. On error nothing changed (keep using `self`).
    pub fn apply(&self, command: &Command) -> Result<(Model, Observation), ModelError> {
        match command {
            Command::Start(start) => self.start(start),
            Command::Rehydrate(node) => Ok((self.clone(), self.rehydrate(node)?)),
            Command::Advance(attempt) => self.advance(attempt),
            Command::Checkpoint(attempt) => self.checkpoint(attempt),
            Command::ChangePreferences(change) => self.change_preferences(change),
        }
    }

    fn start(&self, start: &StartRun) -> Result<(Model, Observation), ModelError> {
        let session_id = &start.session_id;
        let existing = self.sessions.get(session_id);
        if let Some(session) = existing
            && run_ids(&session.events).contains(&start.run_id)
        {
            // `run_started:<sessionId>:<runId>` exists: an idempotent no-op.
            return Ok((self.clone(), self.observe_start(session_id, &start.run_id)?));
        }
        let baseline = existing.map_or_else(
            || start.session_baseline.unwrap_or(self.global_defaults),
            |s| s.baseline,
        );
        // The hash is a function of the workflow: one equal to a workflow this model already
        // pinned has that one's hash (a comparison instead of a serialization).
        let workflow_hash = match self.workflows.iter().find(|(_, w)| **w == start.workflow) {
            Some((hash, _)) => hash.clone(),
            None => start.workflow.workflow_hash()?,
        };
        let effective = baseline.apply(&start.preferences);
        let root = derive::root_node_id(session_id, &start.run_id);
        workrail_spec::context::check_context_map(&start.context)
            .map_err(|e| ModelError::InvalidContext(e.to_string()))?;
        let (state, disclosed, skipped) =
            match interpreter::start_with(&start.workflow, effective.autonomy, &start.context)? {
                Progress::Moved {
                    state,
                    disclosed,
                    skipped,
                } => (state, disclosed, skipped),
                Progress::Blocked { blocker, .. } => {
                    return Err(ModelError::CannotStart(format!(
                        "{}: {}",
                        blocker.reason, blocker.message
                    )));
                }
            };
        let mut next = self.clone();
        let landing = state.clone();
        let snapshot_ref = next.store_snapshot(&workflow_hash, state)?;
        next.workflows
            .insert(workflow_hash.clone(), start.workflow.clone());

        let committed = existing.map_or(0, |s| s.events.len());
        let mut plan = Plan::new(session_id, committed);
        if existing.is_none() {
            plan.push(
                EventScope::Session,
                EventData::SessionCreated(SessionCreated {}),
            )?;
        }
        let run_scope = EventScope::Run(start.run_id.clone());
        let root_scope = EventScope::Node(start.run_id.clone(), root.clone());
        plan.push(
            run_scope,
            EventData::run_started(RunStarted {
                workflow_id: start.workflow.body.workflow_id.clone(),
                workflow_hash: workflow_hash.clone(),
                workflow_source_kind: start.source_kind,
                workflow_source_ref: start.source_ref.clone(),
                lane: None,
            }),
        )?;
        plan.push(
            root_scope.clone(),
            EventData::NodeCreated(NodeCreated {
                node_kind: NodeKind::Step,
                parent_node_id: None,
                workflow_hash,
                snapshot_ref,
            }),
        )?;
        if !start.preferences.is_empty() {
            plan.push(
                root_scope.clone(),
                EventData::PreferencesChanged(PreferencesChanged {
                    change_id: derive::start_change_id(session_id, &start.run_id),
                    source: PreferenceSource::User,
                    delta: start.preferences.clone(),
                    effective,
                }),
            )?;
        }
        if let Some(warning) =
            preference_warning(session_id, root.as_str(), &start.workflow, effective)?
        {
            plan.push(root_scope.clone(), EventData::node_output_appended(warning))?;
        }
        push_gaps(&mut plan, &root_scope, root.as_str(), &disclosed)?;
        if !start.context.is_empty() {
            plan.push(
                EventScope::Run(start.run_id.clone()),
                EventData::ContextSet(ContextSet {
                    context_id: derive::start_context_id(session_id, &start.run_id),
                    context: start.context.clone(),
                    source: ContextSource::Initial,
                }),
            )?;
        }
        next.start_lanes(
            &mut plan,
            &Landing {
                run_id: &start.run_id,
                node_id: &root,
                source_kind: start.source_kind,
                source_ref: &start.source_ref,
                autonomy: baseline.autonomy,
            },
            &start.workflow,
            &landing,
            &start.context,
        )?;

        let session = next
            .sessions
            .entry(session_id.clone())
            .or_insert_with(|| SessionState {
                baseline,
                events: Vec::new(),
            });
        session.events.extend(plan.events);
        if !skipped.is_empty() {
            next.skips
                .insert((session_id.clone(), root.clone()), skipped);
        }
        let observation = next.observe_start(session_id, &start.run_id)?;
        Ok((next, observation))
    }

    /// Starts the lanes of the parallel step a walk landed on at `landing.node_id` (decision
    /// D168), in the landing's plan: per lane whose condition holds over `context`, its
    /// `run_started` with the link to the landing node, its root `node_created` (the routine
    /// started over the lane's context), the gaps that start disclosed, and its initial
    /// `context_set` when the lane's context is not empty.
    fn start_lanes(
        &mut self,
        plan: &mut Plan<'_>,
        landing: &Landing<'_>,
        workflow: &CompiledWorkflowSnapshotV1,
        state: &EngineState,
        context: &Map<String, Value>,
    ) -> Result<(), ModelError> {
        let Some(spec) = crate::lanes::pending_lanes(workflow, state) else {
            return Ok(());
        };
        let session_id = plan.session_id;
        for (index, lane) in crate::lanes::active(spec, context) {
            let lane_run = derive::lane_run_id(session_id, landing.node_id, index);
            let root = derive::root_node_id(session_id, &lane_run);
            let lane_context = crate::lanes::lane_context(lane, context);
            let (lane_state, disclosed, skipped) =
                match interpreter::start_with(&lane.workflow, landing.autonomy, &lane_context)? {
                    Progress::Moved {
                        state,
                        disclosed,
                        skipped,
                    } => (state, disclosed, skipped),
                    Progress::Blocked { blocker, .. } => {
                        return Err(ModelError::CannotStart(format!(
                            "lane {index}: {}: {}",
                            blocker.reason, blocker.message
                        )));
                    }
                };
            let lane_hash = lane.workflow.workflow_hash()?;
            self.workflows
                .insert(lane_hash.clone(), lane.workflow.as_ref().clone());
            let snapshot_ref = self.store_snapshot(&lane_hash, lane_state)?;
            let root_scope = EventScope::Node(lane_run.clone(), root.clone());
            plan.push(
                EventScope::Run(lane_run.clone()),
                EventData::run_started(RunStarted {
                    workflow_id: lane.workflow_id.clone(),
                    workflow_hash: lane_hash.clone(),
                    workflow_source_kind: landing.source_kind,
                    workflow_source_ref: landing.source_ref.to_owned(),
                    lane: Some(LaneLink {
                        parent_run_id: landing.run_id.clone(),
                        parent_node_id: landing.node_id.clone(),
                        lane_index: index,
                    }),
                }),
            )?;
            plan.push(
                root_scope.clone(),
                EventData::NodeCreated(NodeCreated {
                    node_kind: NodeKind::Step,
                    parent_node_id: None,
                    workflow_hash: lane_hash,
                    snapshot_ref,
                }),
            )?;
            push_gaps(plan, &root_scope, root.as_str(), &disclosed)?;
            if !lane_context.is_empty() {
                plan.push(
                    EventScope::Run(lane_run.clone()),
                    EventData::ContextSet(ContextSet {
                        context_id: derive::lane_context_id(session_id, &lane_run),
                        context: lane_context,
                        source: ContextSource::Initial,
                    }),
                )?;
            }
            if !skipped.is_empty() {
                self.skips.insert((session_id.clone(), root), skipped);
            }
        }
        Ok(())
    }

    fn observe_start(
        &self,
        session_id: &SessionId,
        run_id: &RunId,
    ) -> Result<Observation, ModelError> {
        let dag = self.dag(session_id, run_id)?;
        let root = dag
            .root()
            .ok_or_else(|| ModelError::Invariant(format!("run {run_id} has no root")))?;
        let state = self.state_of(&root.snapshot_ref)?;
        Ok(Observation::Started {
            session_id: session_id.clone(),
            run_id: run_id.clone(),
            root: root.node_id.clone(),
            pending: state.pending_step().cloned(),
            is_complete: state.is_complete(),
        })
    }

    /// Rehydrate is a read: it cannot change the model (it has no `&mut` and builds no plan).
    fn rehydrate(&self, node: &NodeRef) -> Result<Observation, ModelError> {
        let dag = self.dag(&node.session_id, &node.run_id)?;
        let dag_node = dag
            .node(&node.node_id)
            .ok_or_else(|| ModelError::UnknownNode(node.node_id.clone()))?;
        let state = self.state_of(&dag_node.snapshot_ref)?;
        let preferences = effective_preferences(
            self.session_events(&node.session_id)?,
            &dag,
            &node.node_id,
            &self.defaults(&node.session_id)?,
        );
        Ok(Observation::Rehydrated {
            node_id: node.node_id.clone(),
            pending: state.pending_step().cloned(),
            is_complete: state.is_complete(),
            is_tip: dag.step_children(&node.node_id).is_empty(),
            preferences,
        })
    }

    fn advance(&self, attempt: &AckAt) -> Result<(Model, Observation), ModelError> {
        let NodeRef {
            session_id,
            run_id,
            node_id,
        } = &attempt.node;
        let events = self.session_events(session_id)?;
        let dag = self.dag(session_id, run_id)?;
        let node = dag
            .node(node_id)
            .ok_or_else(|| ModelError::UnknownNode(node_id.clone()))?;

        // Replay: the attempt is recorded, so return its facts (never recompute).
        if let Some(record) = advance_outcome(events, run_id, node_id, &attempt.attempt_id) {
            return Ok((self.clone(), self.observe_attempt(&attempt.node, &record)?));
        }
        let k = advance_records(events, run_id, node_id).len();
        if attempt.attempt_id != derive::ack_attempt_id(session_id, run_id, node_id, k) {
            return Err(ModelError::UnknownAttempt(attempt.attempt_id.clone()));
        }

        let state = self.state_of(&node.snapshot_ref)?;
        if state.pending_step().is_none() {
            return Err(ModelError::NothingPending(node_id.clone()));
        }
        let workflow_hash = pinned_hash(&dag)?;
        let workflow = self.workflows.get(&workflow_hash).ok_or_else(|| {
            ModelError::Invariant(format!("workflow {workflow_hash} is not pinned"))
        })?;
        let before = effective_preferences(events, &dag, node_id, &self.defaults(session_id)?);
        let effective = before.apply(&attempt.preferences);
        // A delta is recorded only when it changes the node's snapshot (D43).
        let change =
            (!attempt.preferences.is_empty() && effective != before).then(|| PreferencesChanged {
                change_id: derive::ack_change_id(session_id, &attempt.attempt_id),
                source: PreferenceSource::User,
                delta: attempt.preferences.clone(),
                effective,
            });
        let origin = attempt.attempt_id.as_str();
        let warning = match &change {
            Some(_) => preference_warning(session_id, origin, workflow, effective)?,
            None => None,
        };
        // The walk reads the run's context merged with the ack's delta (decision D139); the
        // merge is recorded only when the attempt advances and it changed something.
        let base = projections::run_context(events, run_id);
        let context = match &attempt.context {
            Some(delta) => workrail_spec::context::merge_context(&base, delta)
                .map_err(|e| ModelError::InvalidContext(e.to_string()))?,
            None => base.clone(),
        };
        let context_change = (attempt.context.is_some() && context != base).then(|| ContextSet {
            context_id: derive::ack_context_id(session_id, &attempt.attempt_id),
            context: context.clone(),
            source: if base.is_empty() {
                ContextSource::Initial
            } else {
                ContextSource::AgentDelta
            },
        });
        let progress = interpreter::ack_with(
            workflow,
            state,
            &attempt.output,
            effective.autonomy,
            &context,
        )?;
        // The step's required capabilities are judged beside its outputs and loops (D40); every
        // blocking finding is reported (`L-BLOCKER-ORDER` sorts them), every disclosure recorded.
        let step_id = state
            .pending_step()
            .map(|p| p.step_id.clone())
            .ok_or_else(|| ModelError::NothingPending(node_id.clone()))?;
        let reported = crate::capabilities::valid_observations(workflow, &step_id, &attempt.output);
        let (mut capability_blocks, mut capability_gaps) = crate::capabilities::at_ack(
            workflow,
            events,
            &dag,
            run_id,
            node_id,
            &step_id,
            &reported,
            effective.autonomy,
        );
        // Invalid observations a step does not require are disclosed, never recorded (D42).
        if let Some(finding) =
            crate::capabilities::invalid_optional(workflow, &step_id, &attempt.output)
            && let Some(severity) = finding
                .reason
                .disposition(effective.autonomy, false)
                .gap_severity
        {
            capability_gaps.push((finding, severity));
        }
        // A strong `available` observation resolves the branch's open disclosures about its
        // capability (D40); the branch is the same whether the attempt advances or blocks.
        let branch = dag.ancestry(node_id);
        let mut resolved = crate::capabilities::resolved_by(events, run_id, &branch, &reported);
        // The ack's reports (D41, D42) are judged beside its capabilities: they are part of
        // the acknowledgement itself (D74).
        let (user_blocks, user_gaps, user_resolved) = crate::reports::user_dependencies_at_ack(
            workflow,
            events,
            run_id,
            &branch,
            &step_id,
            &attempt.output,
            effective.autonomy,
        );
        capability_blocks.extend(user_blocks);
        capability_gaps.extend(user_gaps);
        for gap in user_resolved {
            if !resolved.contains(&gap) {
                resolved.push(gap);
            }
        }
        let (divergences, invalid_divergence) =
            crate::reports::divergences_at_ack(workflow, &step_id, &attempt.output);
        if let Some(finding) = invalid_divergence
            && let Some(severity) = finding
                .reason
                .disposition(effective.autonomy, false)
                .gap_severity
        {
            capability_gaps.push((finding, severity));
        }
        let divergences: Vec<DivergenceRecorded> = divergences
            .into_iter()
            .enumerate()
            .map(|(i, d)| DivergenceRecorded {
                divergence_id: derive::divergence_id(session_id, &attempt.attempt_id, i),
                reason: d.reason,
                summary: BoundedText::truncating(&d.summary),
                related_step_id: d.related_step_id,
            })
            .collect();
        let observations: Vec<CapabilityObserved> = reported
            .iter()
            .enumerate()
            .map(|(i, o)| CapabilityObserved {
                cap_obs_id: derive::cap_obs_id(session_id, &attempt.attempt_id, i),
                capability: o.capability,
                status: o.status,
                provenance: o.provenance.clone(),
            })
            .collect();
        // Acknowledging a parallel step fans its lanes in (D169): judged beside the step's
        // capabilities and reports, from the lanes' recorded block outputs.
        let lanes = projections_lanes(events, &self.artifacts, &self.snapshots, run_id, node_id);
        if let Some(spec) = crate::lanes::pending_lanes(workflow, state)
            && let Some(step) = workflow.step(&step_id)
        {
            let fan = crate::lanes::fan_in(spec, lanes.clone());
            for (finding, required) in crate::lanes::findings(step, &fan) {
                let disposition = finding.reason.disposition(effective.autonomy, required);
                if disposition.blocks {
                    capability_blocks.push(finding);
                } else if let Some(severity) = disposition.gap_severity {
                    capability_gaps.push((finding, severity));
                }
            }
        }
        let mut divergences = divergences;
        // No subagents (D172): delegation known unavailable on the branch and no divergence of
        // the agent's own saying so.
        if !lanes.is_empty()
            && projections::branch_capability_status(
                events,
                &dag,
                run_id,
                node_id,
                workrail_spec::closed::Capability::Delegation,
            ) == workrail_spec::closed::CapabilityStatus::Unavailable
            && !divergences
                .iter()
                .any(|d| d.reason == workrail_spec::closed::DivergenceReason::CapabilityUnavailable)
        {
            divergences.push(DivergenceRecorded {
                divergence_id: derive::divergence_id(
                    session_id,
                    &attempt.attempt_id,
                    divergences.len(),
                ),
                reason: workrail_spec::closed::DivergenceReason::CapabilityUnavailable,
                summary: BoundedText::truncating(&crate::lanes::sequential_summary(
                    &step_id,
                    lanes.len(),
                )),
                related_step_id: Some(step_id.clone()),
            });
        }
        let with_gap = |finding: &interpreter::Finding| {
            finding
                .reason
                .disposition(effective.autonomy, true)
                .gap_severity
                .map(|severity| (finding.clone(), severity))
        };
        let progress = match progress {
            Progress::Moved {
                state,
                mut disclosed,
                skipped,
            } if capability_blocks.is_empty() => {
                disclosed.extend(capability_gaps);
                Judged::Moved {
                    state,
                    disclosed,
                    skipped,
                }
            }
            Progress::Moved { mut disclosed, .. } => {
                disclosed.extend(capability_gaps);
                disclosed.extend(capability_blocks.iter().filter_map(with_gap));
                Judged::Blocked {
                    blockers: capability_blocks,
                    gaps: disclosed,
                }
            }
            // A loop limit is found while moving on; an ack its capabilities block does not move,
            // so only the reasons found in the ack itself are reported (D74).
            Progress::Blocked { blocker, gaps, .. }
                if !capability_blocks.is_empty() && is_found_moving(&blocker) =>
            {
                let mut gaps: Vec<_> = gaps.into_iter().filter(|(f, _)| f != &blocker).collect();
                gaps.extend(capability_gaps);
                gaps.extend(capability_blocks.iter().filter_map(with_gap));
                Judged::Blocked {
                    blockers: capability_blocks,
                    gaps,
                }
            }
            Progress::Blocked {
                blocker,
                also,
                mut gaps,
            } => {
                gaps.extend(capability_gaps);
                gaps.extend(capability_blocks.iter().filter_map(with_gap));
                let mut blockers = vec![blocker];
                blockers.extend(also);
                blockers.extend(capability_blocks);
                Judged::Blocked { blockers, gaps }
            }
        };

        let mut next = self.clone();
        let mut plan = Plan::new(session_id, events.len());
        let here = EventScope::Node(run_id.clone(), node_id.clone());
        let mut landed = None;
        let outcome = match progress {
            Judged::Moved {
                state,
                disclosed,
                skipped,
            } => {
                let child = derive::child_node_id(session_id, run_id, &attempt.attempt_id);
                if !skipped.is_empty() {
                    next.skips
                        .insert((session_id.clone(), child.clone()), skipped);
                }
                let child_scope = EventScope::Node(run_id.clone(), child.clone());
                landed = Some((child.clone(), state.clone()));
                let snapshot_ref = next.store_snapshot(&workflow_hash, state)?;
                // The recorded artifacts join the content store their outputs point into.
                for artifact in &attempt.output.artifacts {
                    let (sha256, _) = jcs_digest(artifact)?;
                    next.artifacts.insert(sha256, artifact.clone());
                }
                let cause = if dag.step_children(node_id).is_empty() {
                    EdgeCauseKind::IdempotentReplay
                } else {
                    EdgeCauseKind::NonTipAdvance
                };
                let outputs =
                    outputs_of(session_id, &attempt.attempt_id, &attempt.output, warning)?;
                // node_created, edge_created, outputs, gaps, the preference change, then
                // advance_recorded: the edge's cause names the advance_recorded of the same plan.
                let record_ahead = 2
                    + outputs.len() as u64
                    + observations.len() as u64
                    + divergences.len() as u64
                    + disclosed.len() as u64
                    + resolved.len() as u64
                    + u64::from(change.is_some())
                    + u64::from(context_change.is_some());
                let record_event = plan.event_id_ahead(record_ahead)?;
                plan.push(
                    child_scope.clone(),
                    EventData::NodeCreated(NodeCreated {
                        node_kind: NodeKind::Step,
                        parent_node_id: Some(node_id.clone()),
                        workflow_hash,
                        snapshot_ref,
                    }),
                )?;
                plan.push(
                    EventScope::Run(run_id.clone()),
                    EventData::EdgeCreated(EdgeCreated {
                        edge_kind: EdgeKind::AckedStep,
                        from_node_id: node_id.clone(),
                        to_node_id: child.clone(),
                        cause: EdgeCause {
                            kind: cause,
                            event_id: record_event,
                        },
                    }),
                )?;
                for output in outputs {
                    plan.push(child_scope.clone(), EventData::node_output_appended(output))?;
                }
                for observation in observations {
                    plan.push(
                        child_scope.clone(),
                        EventData::CapabilityObserved(observation),
                    )?;
                }
                // Divergences describe completed work: only an advance records them (D42).
                for divergence in divergences {
                    plan.push(
                        child_scope.clone(),
                        EventData::DivergenceRecorded(divergence),
                    )?;
                }
                push_gaps(&mut plan, &child_scope, origin, &disclosed)?;
                push_resolutions(&mut plan, &child_scope, origin, disclosed.len(), &resolved)?;
                if let Some(change) = change {
                    plan.push(child_scope, EventData::PreferencesChanged(change))?;
                }
                if let Some(context) = context_change {
                    plan.push(
                        EventScope::Run(run_id.clone()),
                        EventData::ContextSet(context),
                    )?;
                }
                AdvanceOutcome::Advanced { to_node_id: child }
            }
            Judged::Blocked { blockers, gaps } => {
                // The change that judged the attempt stays on the attempted node (D43).
                if let Some(change) = change {
                    plan.push(here.clone(), EventData::PreferencesChanged(change))?;
                }
                if let Some(warning) = warning {
                    plan.push(here.clone(), EventData::node_output_appended(warning))?;
                }
                // Observations are facts about the environment, not about the step: a blocked
                // attempt records them on the attempted node (D40).
                for observation in observations {
                    plan.push(here.clone(), EventData::CapabilityObserved(observation))?;
                }
                push_gaps(&mut plan, &here, origin, &gaps)?;
                push_resolutions(&mut plan, &here, origin, gaps.len(), &resolved)?;
                AdvanceOutcome::Blocked {
                    blockers: BlockerReport::new(
                        blockers
                            .iter()
                            .map(to_blocker)
                            .collect::<Result<Vec<_>, _>>()?,
                    )?,
                    // What was sent, as a digest only (decision D163).
                    output_digest: if attempt.output.carries_work() {
                        Some(attempt.output.digest()?)
                    } else {
                        None
                    },
                }
            }
        };
        plan.push(
            here,
            EventData::AdvanceRecorded(AdvanceRecorded {
                attempt_id: attempt.attempt_id.clone(),
                intent: AdvanceIntent::AckPending,
                outcome,
            }),
        )?;
        // Landing on a parallel step starts its lanes in the same append (D168).
        if let Some((child, state)) = landed {
            let source_ref = run_source_ref(events, run_id)?;
            let autonomy = self
                .sessions
                .get(session_id)
                .map(|s| s.baseline.autonomy)
                .ok_or_else(|| ModelError::UnknownSession(session_id.clone()))?;
            next.start_lanes(
                &mut plan,
                &Landing {
                    run_id,
                    node_id: &child,
                    source_kind: pin_source_kind(&dag)?,
                    source_ref: &source_ref,
                    autonomy,
                },
                workflow,
                &state,
                &context,
            )?;
        }
        next.commit(plan)?;
        let record = advance_outcome(
            next.session_events(session_id)?,
            run_id,
            node_id,
            &attempt.attempt_id,
        )
        .ok_or_else(|| ModelError::Invariant("the attempt was not recorded".into()))?;
        let observation = next.observe_attempt(&attempt.node, &record)?;
        Ok((next, observation))
    }

    /// The observation of a recorded attempt, from the record and the snapshots it names.
    fn observe_attempt(
        &self,
        node: &NodeRef,
        record: &AttemptRecord,
    ) -> Result<Observation, ModelError> {
        let dag = self.dag(&node.session_id, &node.run_id)?;
        let snapshot_of = |id: &NodeId| {
            dag.node(id)
                .map(|n| n.snapshot_ref.clone())
                .ok_or_else(|| ModelError::UnknownNode(id.clone()))
        };
        Ok(match &record.outcome {
            AdvanceOutcome::Advanced { to_node_id } => {
                let state = self.state_of(&snapshot_of(to_node_id)?)?;
                Observation::Advanced {
                    node_id: node.node_id.clone(),
                    attempt_id: record.attempt_id.clone(),
                    to_node_id: to_node_id.clone(),
                    pending: state.pending_step().cloned(),
                    is_complete: state.is_complete(),
                }
            }
            AdvanceOutcome::Blocked { blockers, .. } => {
                let state = self.state_of(&snapshot_of(&node.node_id)?)?;
                Observation::Blocked {
                    node_id: node.node_id.clone(),
                    attempt_id: record.attempt_id.clone(),
                    blockers: blockers.clone(),
                    pending: state.pending_step().cloned(),
                }
            }
        })
    }

    fn checkpoint(&self, attempt: &AttemptAt) -> Result<(Model, Observation), ModelError> {
        let NodeRef {
            session_id,
            run_id,
            node_id,
        } = &attempt.node;
        let events = self.session_events(session_id)?;
        let dag = self.dag(session_id, run_id)?;
        let node = dag
            .node(node_id)
            .ok_or_else(|| ModelError::UnknownNode(node_id.clone()))?;
        let checkpoint = derive::checkpoint_node_id(session_id, run_id, &attempt.attempt_id);
        let observation = Observation::Checkpointed {
            node_id: node_id.clone(),
            attempt_id: attempt.attempt_id.clone(),
            checkpoint_node_id: checkpoint.clone(),
        };
        // Replay: the checkpoint node of this attempt exists, so nothing is duplicated.
        if dag.node(&checkpoint).is_some() {
            return Ok((self.clone(), observation));
        }
        let k = dag
            .edges_from(node_id)
            .filter(|e| e.kind == EdgeKind::Checkpoint)
            .count();
        if attempt.attempt_id != derive::checkpoint_attempt_id(session_id, run_id, node_id, k) {
            return Err(ModelError::UnknownAttempt(attempt.attempt_id.clone()));
        }
        let workflow_hash = pinned_hash(&dag)?;
        let outputs = outputs_of(session_id, &attempt.attempt_id, &attempt.output, None)?;
        let mut plan = Plan::new(session_id, events.len());
        let node_event = plan.event_id_ahead(0)?;
        let scope = EventScope::Node(run_id.clone(), checkpoint.clone());
        plan.push(
            scope.clone(),
            EventData::NodeCreated(NodeCreated {
                node_kind: NodeKind::Checkpoint,
                parent_node_id: Some(node_id.clone()),
                workflow_hash,
                // No advancement: the checkpoint node holds the same execution state.
                snapshot_ref: node.snapshot_ref.clone(),
            }),
        )?;
        plan.push(
            EventScope::Run(run_id.clone()),
            EventData::EdgeCreated(EdgeCreated {
                edge_kind: EdgeKind::Checkpoint,
                from_node_id: node_id.clone(),
                to_node_id: checkpoint,
                cause: EdgeCause {
                    kind: EdgeCauseKind::CheckpointCreated,
                    event_id: node_event,
                },
            }),
        )?;
        for output in outputs {
            plan.push(scope.clone(), EventData::node_output_appended(output))?;
        }
        let mut next = self.clone();
        for artifact in &attempt.output.artifacts {
            let (sha256, _) = jcs_digest(artifact)?;
            next.artifacts.insert(sha256, artifact.clone());
        }
        next.commit(plan)?;
        Ok((next, observation))
    }

    fn change_preferences(
        &self,
        change: &PreferenceChange,
    ) -> Result<(Model, Observation), ModelError> {
        let NodeRef {
            session_id,
            run_id,
            node_id,
        } = &change.node;
        let events = self.session_events(session_id)?;
        // The same changeId again: a dedupe no-op returning the recorded change.
        for event in events {
            if let EventData::PreferencesChanged(recorded) = event.data()
                && recorded.change_id == change.change_id
            {
                let recorded_node = event.scope().node_id().cloned().ok_or_else(|| {
                    ModelError::Invariant("preferences_changed without a node".into())
                })?;
                return Ok((
                    self.clone(),
                    Observation::PreferencesChanged {
                        node_id: recorded_node,
                        change_id: recorded.change_id.clone(),
                        effective: recorded.effective,
                    },
                ));
            }
        }
        let dag = self.dag(session_id, run_id)?;
        dag.node(node_id)
            .ok_or_else(|| ModelError::UnknownNode(node_id.clone()))?;
        let effective = effective_preferences(events, &dag, node_id, &self.defaults(session_id)?)
            .apply(&change.delta);
        let mut plan = Plan::new(session_id, events.len());
        plan.push(
            EventScope::Node(run_id.clone(), node_id.clone()),
            EventData::PreferencesChanged(PreferencesChanged {
                change_id: change.change_id.clone(),
                source: change.source,
                delta: change.delta.clone(),
                effective,
            }),
        )?;
        let mut next = self.clone();
        next.commit(plan)?;
        Ok((
            next,
            Observation::PreferencesChanged {
                node_id: node_id.clone(),
                change_id: change.change_id.clone(),
                effective,
            },
        ))
    }

    // ---------------------------------------------------------------------------------------
    // Helpers
    // ---------------------------------------------------------------------------------------

    fn session_events(&self, session_id: &SessionId) -> Result<&[SessionEvent], ModelError> {
        self.events(session_id)
            .ok_or_else(|| ModelError::UnknownSession(session_id.clone()))
    }

    fn defaults(&self, session_id: &SessionId) -> Result<PreferenceDefaults, ModelError> {
        self.preference_defaults(session_id)
            .ok_or_else(|| ModelError::UnknownSession(session_id.clone()))
    }

    fn dag(&self, session_id: &SessionId, run_id: &RunId) -> Result<RunDag, ModelError> {
        self.session_events(session_id)?;
        self.run_dag(session_id, run_id)
            .ok_or_else(|| ModelError::UnknownRun(run_id.clone()))
    }

    fn state_of(&self, snapshot_ref: &SnapshotRef) -> Result<&EngineState, ModelError> {
        self.snapshots
            .get(snapshot_ref)
            .map(|s| &s.engine_payload.engine_state)
            .ok_or_else(|| ModelError::Invariant(format!("snapshot {snapshot_ref} is missing")))
    }

    fn store_snapshot(
        &mut self,
        workflow_hash: &WorkflowHash,
        state: EngineState,
    ) -> Result<SnapshotRef, ModelError> {
        let file = ExecutionSnapshotFileV1 {
            workflow_hash: workflow_hash.clone(),
            engine_payload: EnginePayloadV1::new(state)?,
        };
        let snapshot_ref = file.snapshot_ref()?;
        self.snapshots.insert(snapshot_ref.clone(), file);
        Ok(snapshot_ref)
    }

    /// Appends a plan. Every dedupeKey in it must be new: the model detects replays before
    /// building plans, so a duplicate here is a bug, never silently skipped.
    fn commit(&mut self, plan: Plan<'_>) -> Result<(), ModelError> {
        let session = self
            .sessions
            .get_mut(plan.session_id)
            .ok_or_else(|| ModelError::UnknownSession(plan.session_id.clone()))?;
        let mut keys: BTreeSet<DedupeKey> = session.events.iter().map(|e| e.dedupe_key()).collect();
        for event in &plan.events {
            if !keys.insert(event.dedupe_key()) {
                return Err(ModelError::Invariant(format!(
                    "duplicate dedupeKey {}",
                    event.dedupe_key()
                )));
            }
        }
        session.events.extend(plan.events);
        Ok(())
    }
}

fn pin_source_kind(dag: &RunDag) -> Result<WorkflowSourceKind, ModelError> {
    dag.pin
        .as_ref()
        .map(|p| p.source_kind)
        .ok_or_else(|| ModelError::Invariant(format!("run {} has no run_started", dag.run_id)))
}

/// The `workflowSourceRef` the run was started with (a lane records its parent's).
fn run_source_ref(events: &[SessionEvent], run_id: &RunId) -> Result<String, ModelError> {
    events
        .iter()
        .find_map(|e| match e.data() {
            EventData::RunStarted(started) if e.scope().run_id() == Some(run_id) => {
                Some(started.workflow_source_ref.clone())
            }
            _ => None,
        })
        .ok_or_else(|| ModelError::Invariant(format!("run {run_id} has no run_started")))
}

/// The lanes `node_id` of `run_id` started, each with what it handed in (D161).
fn projections_lanes(
    events: &[SessionEvent],
    artifacts: &BTreeMap<Sha256Digest, Map<String, Value>>,
    snapshots: &BTreeMap<SnapshotRef, ExecutionSnapshotFileV1>,
    run_id: &RunId,
    node_id: &NodeId,
) -> Vec<(crate::lanes::LaneRun, Option<crate::lanes::Handed>)> {
    crate::lanes::lanes_of(events, run_id, node_id)
        .into_iter()
        .map(|lane| {
            let handed = crate::lanes::handed_in(events, artifacts, snapshots, &lane.run_id);
            (lane, handed)
        })
        .collect()
}

fn pinned_hash(dag: &RunDag) -> Result<WorkflowHash, ModelError> {
    dag.pin
        .as_ref()
        .map(|p| p.workflow_hash.clone())
        .ok_or_else(|| ModelError::Invariant(format!("run {} has no run_started", dag.run_id)))
}

/// The outputs of an attempt, in the locked order: the recap first (when notes were sent), then
/// the artifacts, WorkRail's own `warning` among them, by `(sha256, contentType)` ascending
/// (`L-OUTPUT-ORDER`).
fn outputs_of(
    session_id: &SessionId,
    attempt_id: &AttemptId,
    output: &OutputInput,
    warning: Option<NodeOutputAppended>,
) -> Result<Vec<NodeOutputAppended>, ModelError> {
    let mut outputs = Vec::new();
    if let Some(notes) = &output.notes_markdown {
        outputs.push(NodeOutputAppended {
            output_id: derive::output_id(session_id, attempt_id, "recap"),
            supersedes_output_id: None,
            output_channel: OutputChannel::Recap,
            payload: OutputPayload::notes(notes),
        });
    }
    let mut artifacts = BTreeMap::new();
    for artifact in &output.artifacts {
        let (sha256, _) = jcs_digest(artifact)?;
        let byte_length = to_canonical_bytes(artifact)?.len() as u64;
        let output_id = derive::output_id(
            session_id,
            attempt_id,
            &format!("artifact:{}:{ARTIFACT_CONTENT_TYPE}", sha256.hex()),
        );
        let payload = OutputPayload::ArtifactRef {
            sha256: sha256.clone(),
            content_type: ARTIFACT_CONTENT_TYPE.to_owned(),
            byte_length,
        };
        artifacts.insert(
            (sha256, ARTIFACT_CONTENT_TYPE.to_owned()),
            (output_id, payload),
        );
    }
    if let Some(w) = warning
        && let OutputPayload::ArtifactRef {
            sha256,
            content_type,
            ..
        } = &w.payload
    {
        artifacts.insert(
            (sha256.clone(), content_type.clone()),
            (w.output_id, w.payload),
        );
    }
    for (output_id, payload) in artifacts.into_values() {
        outputs.push(NodeOutputAppended {
            output_id,
            supersedes_output_id: None,
            output_channel: OutputChannel::Artifact,
            payload,
        });
    }
    Ok(outputs)
}

/// WorkRail's preference warning for a node whose new snapshot `effective` exceeds the
/// workflow's recommendation (`L-PREF-WARNINGS`): an `artifact` output referencing the
/// warning's RFC 8785 bytes, or `None` when nothing exceeds.
fn preference_warning(
    session_id: &SessionId,
    origin: &str,
    workflow: &CompiledWorkflowSnapshotV1,
    effective: EffectivePreferences,
) -> Result<Option<NodeOutputAppended>, ModelError> {
    let Some(warning) = PreferenceWarningV1::evaluate(effective, &workflow.body.recommendations)
    else {
        return Ok(None);
    };
    let value = warning
        .to_value()
        .map_err(|e| ModelError::Invariant(format!("a preference warning: {e}")))?;
    let object = value
        .as_object()
        .ok_or_else(|| ModelError::Invariant("a preference warning is a JSON object".into()))?;
    let (sha256, byte_length) = jcs_digest(object)?;
    let byte_length = byte_length as u64;
    Ok(Some(NodeOutputAppended {
        output_id: derive::preference_warning_output_id(session_id, origin),
        supersedes_output_id: None,
        output_channel: OutputChannel::Artifact,
        payload: OutputPayload::ArtifactRef {
            sha256,
            content_type: PREFERENCE_WARNING_CONTENT_TYPE.to_owned(),
            byte_length,
        },
    }))
}

/// Records findings as gaps (`L-REASON-GAP-MAPPING`: category and detail from the reason code).
fn push_gaps(
    plan: &mut Plan<'_>,
    scope: &EventScope,
    origin: &str,
    findings: &[(Finding, GapSeverity)],
) -> Result<(), ModelError> {
    for (i, (finding, severity)) in findings.iter().enumerate() {
        plan.push(
            scope.clone(),
            EventData::gap_recorded(GapRecorded {
                gap_id: derive::gap_id(plan.session_id, origin, i),
                severity: *severity,
                reason: finding.reason.gap_reason(),
                summary: BoundedText::truncating(&finding.message),
                resolution: GapResolution::Unresolved,
                evidence_refs: None,
                details: finding.details.clone(),
            }),
        )?;
    }
    Ok(())
}

/// Records the resolution of each gap in `resolved` (a strong `available` observation, D40, or a
/// `supplied` user-only dependency, D41): an `info` gap of the same reason and details linking to
/// it (`L-GAP-RESOLVED-PROJECTION`), numbered after the attempt's `first` disclosures.
fn push_resolutions(
    plan: &mut Plan<'_>,
    scope: &EventScope,
    origin: &str,
    first: usize,
    resolved: &[projections::GapRecord],
) -> Result<(), ModelError> {
    for (i, gap) in resolved.iter().enumerate() {
        plan.push(
            scope.clone(),
            EventData::gap_recorded(GapRecorded {
                gap_id: derive::gap_id(plan.session_id, origin, first + i),
                severity: GapSeverity::Info,
                reason: gap.reason,
                summary: BoundedText::truncating(&format!(
                    "resolved by a later report of this attempt (gap {})",
                    gap.gap_id
                )),
                resolution: GapResolution::Resolves {
                    resolves_gap_id: gap.gap_id.clone(),
                },
                evidence_refs: None,
                details: gap.details.clone(),
            }),
        )?;
    }
    Ok(())
}

/// Whether a finding comes from moving past the acknowledged step (the loop limit:
/// `unexpected:invariant_violation` while starting the next iteration) rather than from judging
/// the acknowledgement itself.
fn is_found_moving(finding: &interpreter::Finding) -> bool {
    finding.found_moving
}

/// What an acknowledgement leads to once every finding is judged: like
/// [`interpreter::Progress`], with every blocking finding of the ack.
enum Judged {
    Moved {
        state: EngineState,
        disclosed: Vec<(interpreter::Finding, GapSeverity)>,
        skipped: Vec<interpreter::Skip>,
    },
    Blocked {
        blockers: Vec<interpreter::Finding>,
        gaps: Vec<(interpreter::Finding, GapSeverity)>,
    },
}

/// The blocker of a finding (`L-REASON-BLOCKER-MAPPING` through the spec's table).
fn to_blocker(finding: &Finding) -> Result<Blocker, ModelError> {
    let message = truncate_with_marker(&finding.message, BLOCKER_MESSAGE_MAX_BYTES)
        .map_err(|e| ModelError::Invariant(e.to_string()))?;
    let mut blocker = Blocker::new(
        finding.reason.blocker_code(),
        finding.pointer.clone(),
        message.text.into_owned(),
        Some("Provide the required output and continue with the fresh ackToken.".to_owned()),
    )?;
    blocker.details = finding.details.clone();
    Ok(blocker)
}

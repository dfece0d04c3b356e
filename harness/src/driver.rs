//! The differential driver: applies each generated command to the model and to a system under
//! test, and compares every observable after every command.
//!
//! Per command it checks the response (kind, pending step, completeness, blockers with their
//! codes, pointers, details and order, effective preferences, run status, and that its tokens
//! name the node and the *current* attempts the model says they should), then the durable truth of every run
//! ([`crate::truth`]), then command-specific laws: rehydrate and replays write nothing; a replay
//! returns the recorded response byte for byte; a second writer gets `TOKEN_SESSION_LOCKED`
//! with `retryable_after_ms` and nothing changes.
//!
//! **Preferences sent with an ack** go to the model's ack command as the same resolved delta
//! (D43): both sides judge the ack under the changed snapshot and record the change (and, above
//! the workflow's recommendation, the preference warning) on the new node, or on the attempted
//! node when the ack is blocked.

use std::collections::BTreeMap;

use workrail_model::projections::PreferenceDefaults;
use workrail_model::{
    AckAt, AttemptAt, Command, Model, ModelError, NodeRef, Observation, StartRun,
};
use workrail_spec::closed::WorkflowSourceKind;
use workrail_spec::event::EventData;
use workrail_spec::ids::{AttemptId, NodeId, RunId, SessionId};
use workrail_spec::snapshot::PendingStep;
use workrail_spec::token::{TokenParts, TokenPayload};
use workrail_spec::tools::{
    CheckpointWorkflowInput, ContinueWorkflowInput, ExecutionKind, ExecutionOutput, OutputInput,
    StartWorkflowInput,
};

use crate::fixture::OutputSpec;
use crate::ops::{Op, PrefSpec};
use crate::system::{Reply, System, is_writer_busy};
use crate::truth::{Bijection, cross_check_production_projection, model_shape, run_shape};

/// The ids of one run on both sides.
#[derive(Debug, Clone)]
pub struct RunIds {
    pub model_session: SessionId,
    pub model_run: RunId,
    pub impl_session: SessionId,
    pub impl_run: RunId,
}

/// A node known on both sides.
#[derive(Debug, Clone)]
pub struct NodeIds {
    pub run: usize,
    pub model: NodeId,
    pub imp: NodeId,
}

/// A successful ack or checkpoint call, kept for replays.
#[derive(Debug, Clone)]
pub struct Recorded<I> {
    pub node: usize,
    pub input: I,
    /// The model command whose replay must return `observation`.
    pub command: Command,
    pub observation: Observation,
    /// `serde_json::to_string` of the first response.
    pub response: String,
}

/// Counters of what the commands did, so tests can prove they reached the interesting states.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub starts: u32,
    pub rehydrates: u32,
    pub advanced: u32,
    pub blocked: u32,
    pub forks: u32,
    pub completed: u32,
    pub with_preferences: u32,
    pub replays: u32,
    pub checkpoints: u32,
    pub checkpoint_replays: u32,
    pub writer_busy: u32,
    pub restarts: u32,
    pub skipped: u32,
    /// Starts both sides refused (a loop whose context is missing).
    pub refused_starts: u32,
    /// Lane runs handed out by a parallel step's responses (D168), each counted once.
    pub lanes: u32,
    /// Responses whose `## Lane results` were compared with the model's fan-in (D169).
    pub lane_results: u32,
    /// Conflicts among those lane results (`workspace` or `fail-on-conflict`, D161).
    pub lane_conflicts: u32,
    /// Lane results whose recorded completion order is not the lanes' index order.
    pub lanes_out_of_order: u32,
    /// Blocked acks whose blocker points at `wr.contracts.block_output`: a report step that
    /// refused a malformed or missing block output (D160).
    pub block_output_refused: u32,
}

impl Stats {
    pub fn add(&mut self, other: &Stats) {
        self.starts += other.starts;
        self.rehydrates += other.rehydrates;
        self.advanced += other.advanced;
        self.blocked += other.blocked;
        self.forks += other.forks;
        self.completed += other.completed;
        self.with_preferences += other.with_preferences;
        self.replays += other.replays;
        self.checkpoints += other.checkpoints;
        self.checkpoint_replays += other.checkpoint_replays;
        self.writer_busy += other.writer_busy;
        self.restarts += other.restarts;
        self.skipped += other.skipped;
        self.refused_starts += other.refused_starts;
        self.lanes += other.lanes;
        self.lane_results += other.lane_results;
        self.lane_conflicts += other.lane_conflicts;
        self.lanes_out_of_order += other.lanes_out_of_order;
        self.block_output_refused += other.block_output_refused;
    }
}

/// Everything the harness knows besides the system under test (cloneable, so the crash harness
/// can branch the world at a crash point).
#[derive(Debug, Clone)]
pub struct World {
    pub model: Model,
    pub runs: Vec<RunIds>,
    pub nodes: Vec<NodeIds>,
    pub bij: Bijection,
    pub acks: Vec<Recorded<ContinueWorkflowInput>>,
    pub checkpoints: Vec<Recorded<CheckpointWorkflowInput>>,
    /// Production tokens by production attempt id.
    pub attempt_tokens: BTreeMap<AttemptId, String>,
    /// A production stateToken per production node.
    pub state_tokens: BTreeMap<NodeId, String>,
    pub minted: u64,
    pub stats: Stats,
    /// The commands so far, for failure messages.
    pub trace: Vec<String>,
}

impl Default for World {
    fn default() -> Self {
        Self::new()
    }
}

/// The call a command makes.
#[derive(Debug, Clone)]
pub enum Call {
    Start(StartWorkflowInput),
    Continue(ContinueWorkflowInput),
    Checkpoint(CheckpointWorkflowInput),
}

/// What the model does for a call, and how to judge the reply.
#[derive(Debug, Clone)]
pub enum Expect {
    Start {
        command: Command,
        model_session: SessionId,
        model_run: RunId,
    },
    Rehydrate {
        node: usize,
    },
    Advance {
        node: usize,
        command: Command,
        forks: bool,
    },
    Checkpoint {
        node: usize,
        command: Command,
    },
    ReplayAck {
        index: usize,
        /// The replay sends other notes than the recorded call (decision D57).
        other_output: bool,
    },
    ReplayCheckpoint {
        index: usize,
    },
}

/// A command made concrete: the call and what to expect.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub call: Call,
    pub expect: Expect,
}

/// Whether a reply is the first answer to a call or a repeat of an interrupted one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Fresh,
    /// The call's effect is already durable (e.g. recovered after a crash): the reply must be
    /// the model's replay of it.
    Repeat,
}

fn decode(token: &str) -> Result<TokenPayload, String> {
    TokenParts::parse(token)
        .and_then(|p| p.payload())
        .map_err(|e| format!("production minted an undecodable token {token:?}: {e}"))
}

fn token_node(token: &str) -> Result<NodeId, String> {
    Ok(decode(token)?.node_id().clone())
}

fn token_attempt(token: &str) -> Result<AttemptId, String> {
    match decode(token)? {
        TokenPayload::Ack(p) | TokenPayload::Checkpoint(p) => Ok(p.attempt_id),
        TokenPayload::State(_) => Err(format!("{token:?} is a state token")),
    }
}

fn pending_id(p: Option<&PendingStep>) -> Option<String> {
    p.map(|p| p.step_id.to_string())
}

fn out_pending(out: &ExecutionOutput) -> Option<String> {
    out.pending.as_ref().map(|p| p.step_id.to_string())
}

fn expect_ok(reply: &Reply, what: &str) -> Result<ExecutionOutput, String> {
    match reply {
        Ok(out) => Ok(out.clone()),
        Err(e) => Err(format!(
            "{what}: the model succeeds but production returned {:?}: {}",
            e.code, e.message
        )),
    }
}

fn json(out: &ExecutionOutput) -> String {
    serde_json::to_string(out).unwrap_or_else(|e| format!("<unserializable: {e}>"))
}

impl World {
    pub fn new() -> Self {
        Self {
            model: Model::new(workrail::protocol::GLOBAL_DEFAULTS),
            runs: Vec::new(),
            nodes: Vec::new(),
            bij: Bijection::default(),
            acks: Vec::new(),
            checkpoints: Vec::new(),
            attempt_tokens: BTreeMap::new(),
            state_tokens: BTreeMap::new(),
            minted: 0,
            stats: Stats::default(),
            trace: Vec::new(),
        }
    }

    fn mint(&mut self) -> u64 {
        self.minted += 1;
        self.minted
    }

    fn node_ref(&self, node: usize) -> NodeRef {
        let n = &self.nodes[node];
        let run = &self.runs[n.run];
        NodeRef {
            session_id: run.model_session.clone(),
            run_id: run.model_run.clone(),
            node_id: n.model.clone(),
        }
    }

    /// Selector -> node: 0 is the newest node, 1 the one before, and so on (wrapping), so
    /// sequences mostly move forward and shrink towards "continue from the latest response".
    fn pick(&self, sel: u8) -> Option<usize> {
        let n = self.nodes.len();
        (n > 0).then(|| n - 1 - usize::from(sel) % n)
    }

    fn node_by_model(&self, run: usize, m: &NodeId) -> Option<usize> {
        self.nodes
            .iter()
            .position(|n| n.run == run && &n.model == m)
    }

    /// The model's view of a node: pending step and completeness.
    fn model_state(&self, node: usize) -> Result<(Option<PendingStep>, bool), String> {
        match self.model.apply(&Command::Rehydrate(self.node_ref(node))) {
            Ok((
                _,
                Observation::Rehydrated {
                    pending,
                    is_complete,
                    ..
                },
            )) => Ok((pending, is_complete)),
            Ok((_, other)) => Err(format!("the model answered a rehydrate with {other:?}")),
            Err(e) => Err(format!("the model refused to rehydrate its own node: {e}")),
        }
    }

    fn apply(&mut self, command: &Command) -> Result<Observation, String> {
        let (next, observation) = self
            .model
            .apply(command)
            .map_err(|e| format!("the model refused {command:?}: {e}"))?;
        self.model = next;
        Ok(observation)
    }

    /// Registers a node seen in a response (new nodes join the bijection).
    fn see_node(&mut self, run: usize, model: &NodeId, imp: &NodeId) -> Result<usize, String> {
        self.bij.nodes.link(model, imp)?;
        if let Some(i) = self.node_by_model(run, model) {
            return Ok(i);
        }
        self.nodes.push(NodeIds {
            run,
            model: model.clone(),
            imp: imp.clone(),
        });
        Ok(self.nodes.len() - 1)
    }

    /// Checks a *fresh* response at `node` against the model's current state and registers its
    /// tokens: they must name the node and the node's current ack and checkpoint attempts.
    fn check_response_at(&mut self, node: usize, out: &ExecutionOutput) -> Result<(), String> {
        let nref = self.node_ref(node);
        let imp = self.nodes[node].imp.clone();
        let named = token_node(&out.state_token)?;
        if named != imp {
            return Err(format!(
                "the response's stateToken names {named}, expected the node paired with {}",
                nref.node_id
            ));
        }
        let (pending, complete) = self.model_state(node)?;
        if out_pending(out) != pending_id(pending.as_ref()) || out.is_complete != complete {
            return Err(format!(
                "pending step: production {:?} (complete {}), model {:?} (complete {complete})",
                out_pending(out),
                out.is_complete,
                pending_id(pending.as_ref())
            ));
        }
        if let Some(shown) = &out.pending {
            let expected = self.model.needs_confirmation(&nref);
            if expected != Some(shown.require_confirmation) {
                return Err(format!(
                    "requireConfirmation of {}: production {}, model {expected:?}",
                    shown.step_id, shown.require_confirmation
                ));
            }
        }
        let prefs = self
            .model
            .effective_preferences(&nref)
            .ok_or("the model lost a node")?;
        if out.preferences != prefs {
            return Err(format!(
                "preferences at the node: production {:?}, model {prefs:?}",
                out.preferences
            ));
        }
        let status = self.model.run_status(&nref.session_id, &nref.run_id);
        if Some(out.run.status) != status {
            return Err(format!(
                "run status: production {:?}, model {status:?}",
                out.run.status
            ));
        }
        self.state_tokens.insert(imp, out.state_token.clone());
        match (&out.ack_token, complete) {
            (Some(ack), false) => {
                let m = self
                    .model
                    .current_ack_attempt(&nref)
                    .ok_or("the model has no current attempt")?;
                let i = token_attempt(ack)?;
                self.bij
                    .attempts
                    .link(&m, &i)
                    .map_err(|e| format!("the ackToken is not the node's current attempt: {e}"))?;
                self.attempt_tokens.insert(i, ack.clone());
            }
            (None, true) => {}
            (ack, complete) => {
                return Err(format!(
                    "ackToken present: {}, but the model says complete: {complete}",
                    ack.is_some()
                ));
            }
        }
        let Some(chk) = &out.checkpoint_token else {
            return Err("the response has no checkpointToken".into());
        };
        let m = self
            .model
            .current_checkpoint_attempt(&nref)
            .ok_or("the model has no current checkpoint attempt")?;
        let i = token_attempt(chk)?;
        self.bij.attempts.link(&m, &i).map_err(|e| {
            format!("the checkpointToken is not the node's current checkpoint attempt: {e}")
        })?;
        self.attempt_tokens.insert(i, chk.clone());
        self.check_lanes_at(node, out)
    }

    /// The lanes a response hands out and the lane results it shows, against the model
    /// (decisions D168, D169): the same lanes by index with their statuses, workflow and goal, the
    /// lane ids paired with the model's lane runs, the tokens naming each lane's preferred tip
    /// and its current attempt (registered, so later commands drive the lanes), and the
    /// completion order and conflicts of the `## Lane results` section.
    fn check_lanes_at(&mut self, node: usize, out: &ExecutionOutput) -> Result<(), String> {
        let nref = self.node_ref(node);
        let expected = self.model.lanes_at(&nref);
        type Shown = (u32, String, String, Option<String>);
        let got: Vec<Shown> = out
            .lanes
            .iter()
            .map(|h| {
                let (status, workflow) = (h.status.to_string(), h.workflow_id.to_string());
                (h.index, status, workflow, h.goal.clone())
            })
            .collect();
        let want: Vec<Shown> = expected
            .iter()
            .map(|l| {
                let (status, workflow) = (l.status.to_string(), l.workflow_id.to_string());
                (l.index, status, workflow, l.goal.clone())
            })
            .collect();
        if got != want {
            return Err(format!(
                "lanes handed out at {}: production {got:?}, model {want:?}",
                nref.node_id
            ));
        }
        let impl_session = self.runs[self.nodes[node].run].impl_session.clone();
        for (handle, lane) in out.lanes.iter().zip(&expected) {
            let workspace = format!("../workrail-lanes/{}", handle.lane_id);
            if handle.workspace != workspace {
                return Err(format!(
                    "lane {}'s workspace is {:?}, not {workspace:?}",
                    handle.index, handle.workspace
                ));
            }
            let run = self.see_run(
                &nref.session_id,
                &lane.run_id,
                &impl_session,
                &handle.lane_id,
            )?;
            let tip = lane
                .tip
                .clone()
                .ok_or_else(|| format!("the model's lane {} has no tip", lane.index))?;
            let imp_tip = token_node(&handle.state_token)?;
            let at = self.see_node(run, &tip, &imp_tip).map_err(|e| {
                format!(
                    "lane {}'s stateToken is not its preferred tip: {e}",
                    lane.index
                )
            })?;
            self.state_tokens
                .insert(imp_tip, handle.state_token.clone());
            let (_, complete) = self.model_state(at)?;
            match (&handle.ack_token, complete) {
                (Some(ack), false) => {
                    let m = self
                        .model
                        .current_ack_attempt(&self.node_ref(at))
                        .ok_or("the model has no current attempt for a lane's tip")?;
                    let i = token_attempt(ack)?;
                    self.bij.attempts.link(&m, &i).map_err(|e| {
                        format!(
                            "lane {}'s ackToken is not its tip's current attempt: {e}",
                            lane.index
                        )
                    })?;
                    self.attempt_tokens.insert(i, ack.clone());
                }
                (None, true) => {}
                (ack, complete) => {
                    return Err(format!(
                        "lane {}'s ackToken present: {}, but the model says its run is complete: {complete}",
                        lane.index,
                        ack.is_some()
                    ));
                }
            }
        }
        let Some(pending) = &out.pending else {
            return Ok(());
        };
        let shown = parse_lane_results(&pending.prompt);
        // Each `workspace` conflict is also a `lane_conflict` warning naming its file (D169).
        let mut warned: Vec<String> = out
            .warnings
            .iter()
            .filter(|w| w.code == "lane_conflict")
            .map(|w| {
                w.message
                    .split('`')
                    .nth(1)
                    .map_or_else(|| format!("<unreadable: {}>", w.message), str::to_owned)
            })
            .collect();
        warned.sort();
        let mut want_warned: Vec<String> = self
            .model
            .lane_results_at(&nref)
            .map(|fan| {
                fan.conflicts
                    .iter()
                    .filter(|c| c.winner.is_some())
                    .map(|c| c.file.clone())
                    .collect()
            })
            .unwrap_or_default();
        want_warned.sort();
        if warned != want_warned {
            return Err(format!(
                "lane_conflict warnings at {}: production warns of {warned:?}, the model's fan-in of {want_warned:?}",
                nref.node_id
            ));
        }
        match (self.model.lane_results_at(&nref), shown) {
            (None, None) => Ok(()),
            (Some(fan), Some(shown)) => {
                let want = LaneResults {
                    order: fan.completion_order.clone(),
                    conflicts: fan
                        .conflicts
                        .iter()
                        .map(|c| (c.file.clone(), c.lanes.clone(), c.winner))
                        .collect(),
                };
                if shown != want {
                    return Err(format!(
                        "lane results at {}: production shows {shown:?}, the model's fan-in is {want:?}",
                        nref.node_id
                    ));
                }
                self.stats.lane_results += 1;
                self.stats.lane_conflicts += want.conflicts.len() as u32;
                self.stats.lanes_out_of_order +=
                    u32::from(want.order.windows(2).any(|w| w[0] > w[1]));
                Ok(())
            }
            (want, shown) => Err(format!(
                "lane results at {}: production shows {shown:?}, the model expects {:?}",
                nref.node_id,
                want.map(|f| f.completion_order)
            )),
        }
    }

    /// Pairs a model lane run with production's (a lane is a run of its parent's session).
    fn see_run(
        &mut self,
        model_session: &SessionId,
        model_run: &RunId,
        impl_session: &SessionId,
        impl_run: &RunId,
    ) -> Result<usize, String> {
        if let Some(i) = self.runs.iter().position(|r| &r.model_run == model_run) {
            if &self.runs[i].impl_run != impl_run {
                return Err(format!(
                    "the model's lane run {model_run} was handed out as {} and now as {impl_run}",
                    self.runs[i].impl_run
                ));
            }
            return Ok(i);
        }
        if let Some(r) = self.runs.iter().find(|r| &r.impl_run == impl_run) {
            return Err(format!(
                "production's lane {impl_run} is paired with the model's {} and now {model_run}",
                r.model_run
            ));
        }
        self.runs.push(RunIds {
            model_session: model_session.clone(),
            model_run: model_run.clone(),
            impl_session: impl_session.clone(),
            impl_run: impl_run.clone(),
        });
        self.stats.lanes += 1;
        Ok(self.runs.len() - 1)
    }

    /// The production token of the model's attempt `m`, if the harness has seen it.
    fn token_of(&self, m: &AttemptId) -> Option<String> {
        let i = self.bij.attempts.to_impl(m)?;
        self.attempt_tokens.get(i).cloned()
    }
}

/// The harness: a world plus a system under test.
pub struct Harness<S: System> {
    pub sys: S,
    pub world: World,
    /// The workflow every `Start` starts (the system must serve it).
    pub workflow: std::sync::Arc<crate::generated::WorkflowUnderTest>,
}

impl<S: System> std::fmt::Debug for Harness<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness")
            .field("sys", &self.sys.name())
            .field("world", &self.world)
            .finish()
    }
}

impl<S: System> Harness<S> {
    pub fn new(sys: S) -> Self {
        Self::with_workflow(sys, crate::generated::harness_workflow())
    }

    /// A harness whose runs start `workflow` (which `sys` must serve).
    pub fn with_workflow(
        sys: S,
        workflow: std::sync::Arc<crate::generated::WorkflowUnderTest>,
    ) -> Self {
        Self {
            sys,
            world: World::new(),
            workflow,
        }
    }

    /// Runs a whole sequence, checking after every command. The error names the failing
    /// command and the sequence up to it.
    pub fn run(&mut self, ops: &[Op]) -> Result<(), String> {
        for op in ops {
            self.run_op(op).map_err(|e| {
                format!(
                    "[{}] {e}\n  after: {:#?}",
                    self.sys.name(),
                    self.world.trace
                )
            })?;
        }
        Ok(())
    }

    /// One command, fully checked.
    pub fn run_op(&mut self, op: &Op) -> Result<(), String> {
        self.world.trace.push(format!("{op:?}"));
        match op {
            Op::Restart => {
                self.sys.restart();
                self.world.stats.restarts += 1;
            }
            Op::SecondWriter { node, checkpoint } => self.second_writer(*node, *checkpoint)?,
            _ => {
                let Some(prepared) = self.prepare(op)? else {
                    self.world.stats.skipped += 1;
                    return self.check_truth();
                };
                let before = self.sys.fingerprint();
                let reply = self.call(&prepared);
                if matches!(
                    prepared.expect,
                    Expect::Rehydrate { .. }
                        | Expect::ReplayAck { .. }
                        | Expect::ReplayCheckpoint { .. }
                ) && self.sys.fingerprint() != before
                {
                    return Err(format!(
                        "{op:?} wrote to the data directory (rehydrate and replays must write nothing)"
                    ));
                }
                self.settle(&prepared, &reply, Mode::Fresh)?;
            }
        }
        self.check_truth()
    }

    /// Makes a command concrete; `None` when it does not apply (e.g. acking a complete node).
    /// May rehydrate (checked) to obtain a current token, as an agent after a rewind would.
    pub fn prepare(&mut self, op: &Op) -> Result<Option<Prepared>, String> {
        Ok(Some(match op {
            Op::Start { prefs } => {
                let n = self.world.mint();
                let model_session = SessionId::parse(&format!("sess_h{n}"))
                    .map_err(|e| format!("harness session id: {e}"))?;
                let model_run = RunId::parse(&format!("run_h{n}"))
                    .map_err(|e| format!("harness run id: {e}"))?;
                let preferences = prefs.map(PrefSpec::delta).unwrap_or_default();
                let command = Command::Start(Box::new(StartRun {
                    session_id: model_session.clone(),
                    run_id: model_run.clone(),
                    workflow: self.workflow.compiled.clone(),
                    source_kind: WorkflowSourceKind::Project,
                    source_ref: format!("workflows/{}", self.workflow.file),
                    session_baseline: None,
                    preferences: preferences.clone(),
                    context: self.workflow.start_context.clone(),
                }));
                Prepared {
                    call: Call::Start(StartWorkflowInput {
                        workflow_id: self.workflow.id.clone(),
                        context: Some(self.workflow.start_context.clone())
                            .filter(|c| !c.is_empty()),
                        preferences,
                        preset: None,
                    }),
                    expect: Expect::Start {
                        command,
                        model_session,
                        model_run,
                    },
                }
            }
            Op::Rehydrate { node } => {
                let Some(node) = self.world.pick(*node) else {
                    return Ok(None);
                };
                let Some(token) = self.state_token(node) else {
                    return Ok(None);
                };
                Prepared {
                    call: Call::Continue(rehydrate_input(token)),
                    expect: Expect::Rehydrate { node },
                }
            }
            Op::Advance {
                node,
                output,
                prefs,
            } => {
                let Some(node) = self.world.pick(*node) else {
                    return Ok(None);
                };
                return self.prepare_advance(node, output, *prefs);
            }
            Op::Checkpoint { node, notes } => {
                let Some(node) = self.world.pick(*node) else {
                    return Ok(None);
                };
                return self.prepare_checkpoint(node, *notes);
            }
            Op::ReplayAck { ack, other_output } => {
                if self.world.acks.is_empty() {
                    return Ok(None);
                }
                let index = usize::from(*ack) % self.world.acks.len();
                let mut input = self.world.acks[index].input.clone();
                if *other_output {
                    input.output = Some(OutputInput {
                        notes_markdown: Some("A different recap on a replay.".into()),
                        artifacts: vec![],
                    });
                }
                Prepared {
                    call: Call::Continue(input),
                    expect: Expect::ReplayAck {
                        index,
                        other_output: *other_output,
                    },
                }
            }
            Op::ReplayCheckpoint { checkpoint } => {
                if self.world.checkpoints.is_empty() {
                    return Ok(None);
                }
                let index = usize::from(*checkpoint) % self.world.checkpoints.len();
                Prepared {
                    call: Call::Checkpoint(self.world.checkpoints[index].input.clone()),
                    expect: Expect::ReplayCheckpoint { index },
                }
            }
            Op::Restart | Op::SecondWriter { .. } => return Ok(None),
        }))
    }

    fn state_token(&self, node: usize) -> Option<String> {
        self.world
            .state_tokens
            .get(&self.world.nodes[node].imp)
            .cloned()
    }

    /// A checked rehydrate of `node` (registers its current tokens).
    pub fn rehydrate(&mut self, node: usize) -> Result<(), String> {
        let Some(token) = self.state_token(node) else {
            return Err("no stateToken for a known node".into());
        };
        let prepared = Prepared {
            call: Call::Continue(rehydrate_input(token)),
            expect: Expect::Rehydrate { node },
        };
        let before = self.sys.fingerprint();
        let reply = self.call(&prepared);
        if self.sys.fingerprint() != before {
            return Err("a rehydrate wrote to the data directory".into());
        }
        self.settle(&prepared, &reply, Mode::Fresh)
    }

    fn prepare_advance(
        &mut self,
        node: usize,
        output: &OutputSpec,
        prefs: Option<PrefSpec>,
    ) -> Result<Option<Prepared>, String> {
        let (_, complete) = self.world.model_state(node)?;
        let Some(state_token) = self.state_token(node) else {
            return Ok(None);
        };
        if complete {
            return Ok(None);
        }
        let nref = self.world.node_ref(node);
        let m = self
            .world
            .model
            .current_ack_attempt(&nref)
            .ok_or("the model has no current attempt")?;
        if self.world.token_of(&m).is_none() {
            self.rehydrate(node)?;
        }
        let Some(ack_token) = self.world.token_of(&m) else {
            return Err("rehydrate did not hand out the node's current ackToken".into());
        };
        let mut output = output.clone();
        output.artifacts.truncate(4);
        let delta = prefs.map(PrefSpec::delta).unwrap_or_default();
        let context = output.context.map(|c| c.to_map());
        let forks = self
            .world
            .model
            .run_dag(&nref.session_id, &nref.run_id)
            .is_some_and(|dag| !dag.step_children(&nref.node_id).is_empty());
        Ok(Some(Prepared {
            call: Call::Continue(ContinueWorkflowInput {
                state_token: Some(state_token),
                ack_token: Some(ack_token),
                context: context.clone(),
                output: output.to_input(),
                preferences: delta.clone(),
                preset: None,
            }),
            expect: Expect::Advance {
                node,
                command: Command::Advance(AckAt {
                    node: nref,
                    attempt_id: m,
                    output: output.to_model(),
                    preferences: delta,
                    context,
                }),
                forks,
            },
        }))
    }

    fn prepare_checkpoint(&mut self, node: usize, notes: u8) -> Result<Option<Prepared>, String> {
        let Some(state_token) = self.state_token(node) else {
            return Ok(None);
        };
        let nref = self.world.node_ref(node);
        let m = self
            .world
            .model
            .current_checkpoint_attempt(&nref)
            .ok_or("the model has no current checkpoint attempt")?;
        if self.world.token_of(&m).is_none() {
            self.rehydrate(node)?;
        }
        let Some(checkpoint_token) = self.world.token_of(&m) else {
            return Err("rehydrate did not hand out the node's current checkpointToken".into());
        };
        let output = OutputInput {
            notes_markdown: Some(format!("Checkpoint {notes}: progress outside the steps.")),
            artifacts: vec![],
        };
        Ok(Some(Prepared {
            call: Call::Checkpoint(CheckpointWorkflowInput {
                state_token,
                checkpoint_token,
                output: output.clone(),
            }),
            expect: Expect::Checkpoint {
                node,
                command: Command::Checkpoint(AttemptAt {
                    node: nref,
                    attempt_id: m,
                    output,
                }),
            },
        }))
    }

    /// Sends a prepared call to the system.
    pub fn call(&mut self, prepared: &Prepared) -> Reply {
        match &prepared.call {
            Call::Start(input) => self.sys.start(input),
            Call::Continue(input) => self.sys.continue_workflow(input),
            Call::Checkpoint(input) => self.sys.checkpoint(input),
        }
    }

    /// Applies the model side of a prepared call and compares the reply.
    pub fn settle(&mut self, prepared: &Prepared, reply: &Reply, mode: Mode) -> Result<(), String> {
        // The node a fresh walk landed on (run, model id, production id): its decision trace
        // must record what the model's walk skipped.
        let mut landed: Option<(usize, NodeId, NodeId)> = None;
        self.settle_reply(prepared, reply, mode, &mut landed)?;
        if let Some((run, model_node, impl_node)) = landed {
            self.check_skips(run, &model_node, &impl_node)?;
        }
        Ok(())
    }

    /// What production's decision trace at `impl_node` says its walk skipped equals what the
    /// model's walk skipped (decision D139): subject and innermost loop position, in order.
    fn check_skips(
        &self,
        run: usize,
        model_node: &NodeId,
        impl_node: &NodeId,
    ) -> Result<(), String> {
        let ids = &self.world.runs[run];
        let expected: Vec<SkipShape> = self
            .world
            .model
            .skips_at(&ids.model_session, model_node)
            .iter()
            .map(model_skip)
            .collect();
        let session = self
            .sys
            .load(&ids.impl_session)
            .map_err(|e| format!("loading the session to read its trace: {e}"))?;
        let events = session
            .events()
            .all()
            .map_err(|e| format!("reading the session's events: {e}"))?;
        let (got, complete) = production_skips(&events, impl_node);
        let agrees = if complete {
            got == expected
        } else {
            expected.starts_with(&got)
        };
        if agrees {
            Ok(())
        } else {
            Err(format!(
                "the decision trace of the walk skipped {got:?}; the model's walk skipped {expected:?}"
            ))
        }
    }

    fn settle_reply(
        &mut self,
        prepared: &Prepared,
        reply: &Reply,
        mode: Mode,
        landed: &mut Option<(usize, NodeId, NodeId)>,
    ) -> Result<(), String> {
        let w = &mut self.world;
        match &prepared.expect {
            Expect::Start {
                command,
                model_session,
                model_run,
            } => {
                // A run neither side can start (a loop whose context is missing, decision
                // D139): both refuse and nothing is recorded; the truth check then finds no
                // session in production.
                if let (Err(e), Err(ModelError::CannotStart(_))) = (reply, w.model.apply(command)) {
                    if e.code != workrail_spec::error::ErrorCode::ValidationError {
                        return Err(format!(
                            "start_workflow: the model cannot start the run, production refused it with {:?}: {}",
                            e.code, e.message
                        ));
                    }
                    w.stats.refused_starts += 1;
                    return Ok(());
                }
                let out = expect_ok(reply, "start_workflow")?;
                let Observation::Started { root, .. } = w.apply(command)? else {
                    return Err("the model answered a start with another observation".into());
                };
                let TokenPayload::State(state) = decode(&out.state_token)? else {
                    return Err("start returned a non-state stateToken".into());
                };
                w.runs.push(RunIds {
                    model_session: model_session.clone(),
                    model_run: model_run.clone(),
                    impl_session: state.session_id.clone(),
                    impl_run: state.run_id.clone(),
                });
                let node = w.see_node(w.runs.len() - 1, &root, &state.node_id)?;
                *landed = Some((w.runs.len() - 1, root.clone(), state.node_id.clone()));
                if out.kind != ExecutionKind::Ok || !out.blockers.is_empty() {
                    return Err(format!("start returned kind {:?}", out.kind));
                }
                w.check_response_at(node, &out)?;
                w.stats.starts += 1;
            }
            Expect::Rehydrate { node } => {
                let out = expect_ok(reply, "rehydrate")?;
                let before = w.model.clone();
                let obs = w.apply(&Command::Rehydrate(w.node_ref(*node)))?;
                if w.model != before {
                    return Err("the model changed on a rehydrate".into());
                }
                let Observation::Rehydrated { .. } = obs else {
                    return Err(format!("the model answered a rehydrate with {obs:?}"));
                };
                if out.kind != ExecutionKind::Ok || !out.blockers.is_empty() {
                    return Err(format!("rehydrate returned kind {:?}", out.kind));
                }
                w.check_response_at(*node, &out)?;
                w.stats.rehydrates += 1;
            }
            Expect::Advance {
                node,
                command,
                forks,
            } => {
                let out = expect_ok(reply, "advance")?;
                let observation = match mode {
                    Mode::Fresh => w.apply(command)?,
                    Mode::Repeat => {
                        let snapshot = w.model.clone();
                        let obs = w.apply(command)?;
                        if w.model != snapshot {
                            return Err("the model advanced again on a repeated ack".into());
                        }
                        obs
                    }
                };
                let run = w.nodes[*node].run;
                match &observation {
                    Observation::Advanced {
                        to_node_id,
                        is_complete,
                        ..
                    } => {
                        if out.kind != ExecutionKind::Ok || !out.blockers.is_empty() {
                            return Err(format!(
                                "the model advanced to a new node; production answered kind {:?} with blockers {:?}",
                                out.kind, out.blockers
                            ));
                        }
                        let imp = token_node(&out.state_token)?;
                        let child = w.see_node(run, to_node_id, &imp)?;
                        if mode == Mode::Fresh {
                            *landed = Some((run, to_node_id.clone(), imp.clone()));
                            w.check_response_at(child, &out)?;
                            w.stats.advanced += 1;
                            w.stats.forks += u32::from(*forks);
                            w.stats.completed += u32::from(*is_complete);
                        } else {
                            w.state_tokens.insert(imp, out.state_token.clone());
                        }
                    }
                    Observation::Blocked {
                        blockers, pending, ..
                    } => {
                        // Codes, pointers (with what they point at) and order; the
                        // structured details where both sides give them. Messages are prose.
                        let expected: Vec<_> = blockers
                            .blockers()
                            .iter()
                            .map(|b| (b.code, b.pointer.clone(), b.details.clone()))
                            .collect();
                        let got: Vec<_> = out
                            .blockers
                            .iter()
                            .map(|b| (b.code, b.pointer.clone(), b.details.clone()))
                            .collect();
                        if out.kind != ExecutionKind::Blocked || expected != got {
                            return Err(format!(
                                "the model blocked with {expected:?}; production answered kind {:?} with {got:?}",
                                out.kind
                            ));
                        }
                        if out_pending(&out) != pending_id(pending.as_ref()) {
                            return Err("a blocked response changed the pending step".into());
                        }
                        if mode == Mode::Fresh {
                            w.check_response_at(*node, &out)?;
                            w.stats.blocked += 1;
                            w.stats.block_output_refused += u32::from(out.blockers.iter().any(|b| {
                                b.code == workrail_spec::blocker::BlockerCode::InvalidRequiredOutput
                                    && matches!(&b.pointer,
                                        workrail_spec::blocker::BlockerPointer::OutputContract { contract_ref }
                                            if contract_ref == "wr.contracts.block_output")
                            }));
                        }
                    }
                    other => return Err(format!("the model answered an ack with {other:?}")),
                }
                let Call::Continue(input) = &prepared.call else {
                    return Err("an advance must be a continue_workflow call".into());
                };
                if mode == Mode::Fresh {
                    w.stats.with_preferences += u32::from(!input.preferences.is_empty());
                    w.acks.push(Recorded {
                        node: *node,
                        input: input.clone(),
                        command: command.clone(),
                        observation,
                        response: json(&out),
                    });
                }
            }
            Expect::Checkpoint { node, command } => {
                let out = expect_ok(reply, "checkpoint")?;
                let snapshot = w.model.clone();
                let observation = w.apply(command)?;
                if mode == Mode::Repeat && w.model != snapshot {
                    return Err("the model checkpointed again on a repeated checkpoint".into());
                }
                let Observation::Checkpointed {
                    checkpoint_node_id, ..
                } = &observation
                else {
                    return Err(format!(
                        "the model answered a checkpoint with {observation:?}"
                    ));
                };
                if out.kind != ExecutionKind::Ok {
                    return Err(format!("checkpoint returned kind {:?}", out.kind));
                }
                let run = w.nodes[*node].run;
                let imp = token_node(&out.state_token)?;
                let child = w.see_node(run, checkpoint_node_id, &imp)?;
                if mode == Mode::Fresh {
                    w.check_response_at(child, &out)?;
                    w.stats.checkpoints += 1;
                    if let Call::Checkpoint(input) = &prepared.call {
                        w.checkpoints.push(Recorded {
                            node: *node,
                            input: input.clone(),
                            command: command.clone(),
                            observation,
                            response: json(&out),
                        });
                    }
                } else {
                    w.state_tokens.insert(imp, out.state_token.clone());
                }
            }
            Expect::ReplayAck {
                index,
                other_output,
            } => {
                let recorded = w.acks[*index].clone();
                // Other notes were not recorded: the response says so, for an attempt that
                // advanced (D57) and for one that was blocked, whose record keeps the digest of
                // what it was sent (D163).
                let notice = *other_output;
                replayed(w, reply, &recorded, "ack", notice)?;
                w.stats.replays += 1;
            }
            Expect::ReplayCheckpoint { index } => {
                let recorded = w.checkpoints[*index].clone();
                replayed(w, reply, &recorded, "checkpoint", false)?;
                w.stats.checkpoint_replays += 1;
            }
        }
        Ok(())
    }

    /// A second process holds the session lock: a fresh ack (or checkpoint) must fail fast with
    /// `TOKEN_SESSION_LOCKED` + `retryable_after_ms` and change nothing; reads still work.
    fn second_writer(&mut self, sel: u8, checkpoint: bool) -> Result<(), String> {
        let Some(node) = self.world.pick(sel) else {
            return Ok(());
        };
        let (_, complete) = self.world.model_state(node)?;
        let prepared = if checkpoint || complete {
            self.prepare_checkpoint(node, 9)?
        } else {
            self.prepare_advance(node, &OutputSpec::default(), None)?
        };
        let Some(prepared) = prepared else {
            return Ok(());
        };
        let session = self.world.runs[self.world.nodes[node].run]
            .impl_session
            .clone();
        let model_before = self.world.model.clone();
        let guard = self.sys.hold_lock(&session);
        let before = self.sys.fingerprint();
        let reply = self.call(&prepared);
        let after = self.sys.fingerprint();
        match &reply {
            Err(e) if is_writer_busy(e) => {}
            Err(e) => {
                return Err(format!(
                    "a write under another writer's lock returned {:?} {:?}, not TOKEN_SESSION_LOCKED with retryable_after_ms",
                    e.code, e.retry
                ));
            }
            Ok(out) => {
                return Err(format!(
                    "a write succeeded while another process held the session lock: {:?}",
                    out.kind
                ));
            }
        }
        if after != before {
            return Err("a refused write changed the data directory".into());
        }
        // Reads need no lock.
        self.rehydrate(node)?;
        drop(guard);
        if self.world.model != model_before {
            return Err("the model changed during a refused write".into());
        }
        self.world.stats.writer_busy += 1;
        Ok(())
    }

    /// Compares the durable truth of every run with the model, and checks that production holds
    /// no session the harness has not seen.
    pub fn check_truth(&self) -> Result<(), String> {
        check_truth(&self.sys, &self.world, None, None)
    }
}

/// Compares the durable truth of every run (but those of `skip`'s session: the run and the
/// lane runs beside it, decision D168) with the model, and checks that
/// production holds no session the harness has not seen (but `ignore`): any other session must
/// not load at all (an interrupted start may leave a directory without committed records).
pub fn check_truth<S: System + ?Sized>(
    sys: &S,
    w: &World,
    skip: Option<usize>,
    ignore: Option<&SessionId>,
) -> Result<(), String> {
    let skipped = skip.and_then(|r| w.runs.get(r)).map(|r| &r.impl_session);
    for (i, run) in w.runs.iter().enumerate() {
        if Some(&run.impl_session) == skipped {
            continue;
        }
        let loaded = sys
            .load(&run.impl_session)
            .map_err(|e| format!("run {i}: production cannot load its session: {e}"))?;
        if !loaded.health.is_healthy() {
            return Err(format!(
                "run {i}: production's session is {:?}",
                loaded.health
            ));
        }
        let expected = model_shape(&w.model, &run.model_session, &run.model_run)?;
        let is_complete = |r: &workrail_spec::ids::SnapshotRef| w.model.is_complete(r);
        let defaults = PreferenceDefaults {
            session_baseline: None,
            global: workrail::protocol::GLOBAL_DEFAULTS,
        };
        let events = loaded
            .events()
            .all()
            .map_err(|e| format!("run {i}: production cannot read its session's events: {e}"))?;
        let actual = run_shape(
            &events,
            &run.impl_run,
            Some(&w.bij),
            &is_complete,
            &defaults,
        )
        .map_err(|e| format!("run {i}: {e}"))?;
        if actual != expected {
            return Err(format!(
                "run {i}: durable truth differs from the model\n{}",
                diff(&expected, &actual)
            ));
        }
        cross_check_production_projection(&events, &run.impl_run, &is_complete)
            .map_err(|e| format!("run {i}: {e}"))?;
        // A session holds its run and the lane runs its parallel steps started (D168), as
        // many as the model's.
        let runs = events
            .iter()
            .filter(|e| matches!(e.data(), EventData::RunStarted(_)))
            .count();
        let expected_runs = w.model.run_ids(&run.model_session).len();
        if runs != expected_runs {
            return Err(format!(
                "run {i}: production's session holds {runs} runs, the model's {expected_runs}"
            ));
        }
    }
    let known: Vec<&SessionId> = w.runs.iter().map(|r| &r.impl_session).collect();
    for session in sys.sessions() {
        if known.contains(&&session) || Some(&session) == ignore {
            continue;
        }
        if let Ok(loaded) = sys.load(&session) {
            return Err(format!(
                "production holds a session the harness never saw in a response: {session} ({} events, {:?})",
                loaded.event_count(),
                loaded.health
            ));
        }
    }
    Ok(())
}

/// A replayed call: the recorded response byte for byte (beside the replay notice, which must be
/// there exactly when `notice` says, decision D57), and a model replay that returns the recorded
/// observation and changes nothing.
fn replayed<I>(
    w: &mut World,
    reply: &Reply,
    recorded: &Recorded<I>,
    what: &str,
    notice: bool,
) -> Result<(), String> {
    let mut out = expect_ok(reply, &format!("{what} replay"))?;
    match out.replay.take() {
        Some(n) if notice => {
            if n.not_recorded != ["output.notesMarkdown"] {
                return Err(format!("the replay notice names {:?}", n.not_recorded));
            }
        }
        None if !notice => {}
        other => {
            return Err(format!(
                "a replayed {what} {} a replay notice: {other:?}",
                if notice { "lacks" } else { "carries" }
            ));
        }
    }
    if json(&out) != recorded.response {
        return Err(format!(
            "a replayed {what} is not byte-identical\n  first:  {}\n  replay: {}",
            recorded.response,
            json(&out)
        ));
    }
    let before = w.model.clone();
    let obs = w.apply(&recorded.command)?;
    if w.model != before || obs != recorded.observation {
        return Err(format!(
            "the model's {what} replay is not a no-op returning its facts"
        ));
    }
    Ok(())
}

fn rehydrate_input(state_token: String) -> ContinueWorkflowInput {
    ContinueWorkflowInput {
        state_token: Some(state_token),
        ack_token: None,
        context: None,
        output: None,
        preferences: vec![],
        preset: None,
    }
}

/// A readable difference between two shapes: only the fields that differ.
pub fn diff(expected: &crate::truth::RunShape, actual: &crate::truth::RunShape) -> String {
    let mut out = String::new();
    macro_rules! field {
        ($name:ident) => {
            if expected.$name != actual.$name {
                out.push_str(&format!(
                    "  {}:\n    model:      {:?}\n    production: {:?}\n",
                    stringify!($name),
                    expected.$name,
                    actual.$name
                ));
            }
        };
    }
    field!(nodes);
    field!(edges);
    field!(tip);
    field!(status);
    field!(gaps);
    field!(outputs);
    field!(attempts);
    field!(preferences);
    field!(observations);
    field!(capabilities);
    field!(resolutions);
    field!(divergences);
    out
}

/// Runs generated sequences (a proptest runner with `config`) against systems built by `make`
/// from a seed; returns what the commands did across all cases, or the minimal failing
/// sequence with the mismatch.
pub fn check_sequences<S: System>(
    config: proptest::test_runner::Config,
    max_len: usize,
    make: impl Fn(u64) -> S,
) -> Result<Stats, String> {
    use proptest::prelude::*;
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let total = std::cell::RefCell::new(Stats::default());
    let result = runner.run(
        &(crate::ops::ops_strategy(max_len), any::<u64>()),
        |(ops, seed)| {
            let mut h = Harness::new(make(seed));
            h.run(&ops).map_err(TestCaseError::fail)?;
            total.borrow_mut().add(&h.world.stats);
            Ok(())
        },
    );
    match result {
        Ok(()) => Ok(total.into_inner()),
        Err(e) => Err(e.to_string()),
    }
}

/// One item a walk passed by its run condition: `step` or `loop`, its id, and the innermost
/// loop position it was passed at.
type SkipShape = (&'static str, String, Option<(String, u32)>);

fn model_skip(skip: &workrail_model::interpreter::Skip) -> SkipShape {
    use workrail_model::interpreter::Skipped;
    let (kind, id) = match &skip.subject {
        Skipped::Step(id) => ("step", id.to_string()),
        Skipped::Loop(id) => ("loop", id.to_string()),
    };
    let at = skip
        .loop_path
        .last()
        .map(|e| (e.loop_id.to_string(), e.iteration));
    (kind, id, at)
}

/// The items production's decision trace at `node` records as skipped by their run condition,
/// and whether the trace is whole (it holds at most `TRACE_MAX_ENTRIES` entries; a full one may
/// have been cut). A skip entry is an `evaluated_condition` whose summary says "skipped:" or
/// "skipped (no iteration):" (the trace's words, `impl/src/engine/trace.rs`); its first ref is the step or loop, and an
/// `iteration` ref follows the loop it was passed in.
fn production_skips(
    events: &[workrail_spec::event::SessionEvent],
    node: &NodeId,
) -> (Vec<SkipShape>, bool) {
    use workrail_spec::closed::DecisionTraceKind;
    use workrail_spec::event::TraceRef;
    let mut skips = Vec::new();
    let mut complete = true;
    for event in events {
        let EventData::DecisionTraceAppended(trace) = event.data() else {
            continue;
        };
        if event.scope().node_id() != Some(node) {
            continue;
        }
        complete &= trace.entries.len() < workrail_spec::budget::TRACE_MAX_ENTRIES;
        for entry in &trace.entries {
            let skipped = entry.summary.contains(" skipped:")
                || entry.summary.contains(" skipped (no iteration):");
            if entry.kind != DecisionTraceKind::EvaluatedCondition || !skipped {
                continue;
            }
            let refs = entry.refs.as_deref().unwrap_or_default();
            let subject = match refs.first() {
                Some(TraceRef::StepId { step_id }) => ("step", step_id.to_string()),
                Some(TraceRef::LoopId { loop_id }) => ("loop", loop_id.to_string()),
                _ => continue,
            };
            let at = refs.windows(2).find_map(|pair| match pair {
                [TraceRef::LoopId { loop_id }, TraceRef::Iteration { value }] => {
                    Some((loop_id.to_string(), *value))
                }
                _ => None,
            });
            skips.push((subject.0, subject.1, at));
        }
    }
    (skips, complete)
}

/// What a `## Lane results` section says about the recorded order: the completion order (lane
/// indexes) and each conflict `(file, lanes in completion order, winner under workspace)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneResults {
    pub order: Vec<u32>,
    pub conflicts: Vec<(String, Vec<u32>, Option<u32>)>,
}

fn lane_indexes(text: &str) -> Option<Vec<u32>> {
    text.split(" and ")
        .map(|part| part.trim().strip_prefix("lane ")?.parse().ok())
        .collect()
}

/// Reads the `## Lane results` section of a prompt (decision D169: the strategy, each lane's
/// status and summary, the recorded completion order and each conflict): `None` when the
/// prompt has none. Lines it cannot read are reported as an unreadable conflict, so they fail
/// the comparison instead of passing unseen.
pub fn parse_lane_results(prompt: &str) -> Option<LaneResults> {
    let (_, section) = prompt.split_once("## Lane results")?;
    let mut results = LaneResults {
        order: Vec::new(),
        conflicts: Vec::new(),
    };
    for line in section.lines() {
        if let Some(rest) = line.strip_prefix("Completion order (as recorded): lanes ") {
            results.order = rest
                .trim_end_matches('.')
                .split(", ")
                .filter_map(|n| n.trim().parse().ok())
                .collect();
        } else if let Some(rest) = line.strip_prefix("Conflict: `") {
            let parsed = (|| {
                let (file, rest) = rest.split_once("` was changed by ")?;
                if let Some((lanes, rest)) = rest.split_once("; ") {
                    let winner = rest.split_once(" completed first")?.0;
                    let winner = winner.strip_prefix("lane ")?.parse().ok()?;
                    Some((file.to_owned(), lane_indexes(lanes)?, Some(winner)))
                } else {
                    let (lanes, _) = rest.split_once(" (`")?;
                    Some((file.to_owned(), lane_indexes(lanes)?, None))
                }
            })();
            results.conflicts.push(
                parsed.unwrap_or_else(|| (format!("<unreadable: {line}>"), Vec::new(), None)),
            );
        } else if line.starts_with("## ") {
            break;
        }
    }
    Some(results)
}

//! Several runs in one data directory, driven with tokens mixed at random (the way an agent
//! juggling several workflows in one chat mixes them up).
//!
//! A [`Juggler`] keeps every response it ever got. Each [`Call`] picks tokens from that pool:
//! the stateToken, ackToken or checkpointToken of any response, old or new, paired as they came
//! or mixed across runs and nodes, an ackToken alone (D34), or a stateToken alone (rehydrate).
//! The oracle needs no secret: it decodes the payload part of each token it sends and
//! computes what must happen from the payloads alone:
//!
//! - tokens naming the same session, run and node act on exactly that run: the response names
//!   that run (session and run ids, workflowId, run label), every byte that changes is inside
//!   that run's session directory (plus new content-addressed objects), every new event is
//!   scoped to that run, and the new node hangs off the node the tokens name;
//!   a token used before replays its recorded response byte for byte and writes nothing;
//!   a rehydrate writes nothing;
//! - tokens naming different nodes are `TOKEN_SCOPE_MISMATCH`, not retryable, write nothing,
//!   and the message and details name each token's run (label, workflowId) and step, and the
//!   suggestion says what to send instead.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use workrail_spec::closed::{EdgeKind, TokenKind};
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::event::EventData;
use workrail_spec::ids::{NodeId, RunId, SessionId};
use workrail_spec::token::{TokenParts, TokenPayload};
use workrail_spec::tools::{
    CheckpointWorkflowInput, ContinueWorkflowInput, ExecutionKind, ExecutionOutput, OutputInput,
    StartWorkflowInput,
};

use crate::fixture::{ArtifactSpec, MULTI_WORKFLOWS};
use crate::system::{Fingerprint, Reply, System};

/// Which response of the pool a token is taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The n-th newest (modulo the pool size): agents mostly use recent tokens.
    Recent(u8),
    /// Any response (modulo the pool size): an old token resurfacing from earlier in the chat.
    Any(u16),
}

/// Where the second token of a pair comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partner {
    /// The same response as the stateToken (a correct pair).
    Same,
    /// Another response (a mix-up, unless both happen to name the same node).
    Other(Pick),
}

/// What the agent sends as `output` with an ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Agent {
    /// What the pending step asks for (a loop decision `stop`, the verification report).
    Good,
    /// A loop decision `continue` where one is asked for (the loop may hit its limit).
    Again,
    /// Notes only: a contract step blocks.
    Sloppy,
}

/// One tool call of the walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    /// `continue_workflow` with a stateToken and an ackToken.
    Continue {
        state: Pick,
        ack: Partner,
        agent: Agent,
    },
    /// `continue_workflow` with only an ackToken (D34).
    AckAlone { ack: Pick, agent: Agent },
    /// `continue_workflow` with only a stateToken.
    Rehydrate { state: Pick },
    /// `checkpoint_workflow` with a stateToken and a checkpointToken.
    Checkpoint { state: Pick, checkpoint: Partner },
    /// Another run starts in the same data directory.
    Start { workflow: u8 },
}

fn pick_strategy() -> impl Strategy<Value = Pick> {
    prop_oneof![
        4 => (0u8..4).prop_map(Pick::Recent),
        1 => any::<u16>().prop_map(Pick::Any),
    ]
}

fn partner_strategy() -> impl Strategy<Value = Partner> {
    prop_oneof![
        3 => Just(Partner::Same),
        2 => pick_strategy().prop_map(Partner::Other),
    ]
}

fn agent_strategy() -> impl Strategy<Value = Agent> {
    prop_oneof![
        6 => Just(Agent::Good),
        1 => Just(Agent::Again),
        1 => Just(Agent::Sloppy),
    ]
}

/// A random call: mostly continues (paired or mixed), then the other kinds.
pub fn call_strategy() -> impl Strategy<Value = Call> {
    prop_oneof![
        6 => (pick_strategy(), partner_strategy(), agent_strategy())
            .prop_map(|(state, ack, agent)| Call::Continue { state, ack, agent }),
        2 => (pick_strategy(), agent_strategy()).prop_map(|(ack, agent)| Call::AckAlone { ack, agent }),
        1 => pick_strategy().prop_map(|state| Call::Rehydrate { state }),
        2 => (pick_strategy(), partner_strategy())
            .prop_map(|(state, checkpoint)| Call::Checkpoint { state, checkpoint }),
        1 => any::<u8>().prop_map(|workflow| Call::Start { workflow }),
    ]
}

/// K runs (2..=5, each of a random workflow) and then `calls` random calls.
pub fn walk_strategy(calls: std::ops::Range<usize>) -> impl Strategy<Value = (Vec<u8>, Vec<Call>)> {
    (
        prop::collection::vec(any::<u8>(), 2..=5),
        prop::collection::vec(call_strategy(), calls),
    )
}

/// A run the juggler started.
#[derive(Debug, Clone)]
pub struct RunInfo {
    pub workflow_id: String,
    pub label: String,
    pub session: SessionId,
    pub run: RunId,
}

/// A response and the run it belongs to.
#[derive(Debug, Clone)]
pub struct Seen {
    pub run: usize,
    pub output: ExecutionOutput,
}

/// What the walk did, so tests can require that every kind of call happened.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JuggleStats {
    pub starts: u32,
    pub advances: u32,
    pub blocked: u32,
    pub ack_alone: u32,
    pub replays: u32,
    pub rehydrates: u32,
    pub checkpoints: u32,
    pub mismatches_across_runs: u32,
    pub mismatches_within_run: u32,
}

impl JuggleStats {
    pub fn add(&mut self, other: &JuggleStats) {
        self.starts += other.starts;
        self.advances += other.advances;
        self.blocked += other.blocked;
        self.ack_alone += other.ack_alone;
        self.replays += other.replays;
        self.rehydrates += other.rehydrates;
        self.checkpoints += other.checkpoints;
        self.mismatches_across_runs += other.mismatches_across_runs;
        self.mismatches_within_run += other.mismatches_within_run;
    }
}

/// Generated walks (K runs, then `calls` random calls) against fresh systems, each checked
/// call by call and at the end; returns the summed stats so a test can require that every
/// kind of call happened.
pub fn check_walks<S: System>(
    config: proptest::test_runner::Config,
    calls: std::ops::Range<usize>,
    make: impl Fn(u64) -> S,
) -> Result<JuggleStats, String> {
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let total = std::cell::RefCell::new(JuggleStats::default());
    let result = runner.run(
        &(walk_strategy(calls), any::<u64>()),
        |((starts, walk), seed)| {
            let mut j = Juggler::new(make(seed));
            j.walk(&starts, &walk)
                .and_then(|()| j.check_runs_intact())
                .map_err(|e| TestCaseError::fail(format!("{e}\n{j:?}")))?;
            total.borrow_mut().add(&j.stats);
            Ok(())
        },
    );
    match result {
        Ok(()) => Ok(total.into_inner()),
        Err(e) => Err(e.to_string()),
    }
}

/// The multi-run driver over any [`System`].
pub struct Juggler<S: System> {
    pub sys: S,
    pub runs: Vec<RunInfo>,
    pub pool: Vec<Seen>,
    /// Ack / checkpoint token -> the JSON of the response its first successful use returned.
    recorded: HashMap<String, String>,
    pub stats: JuggleStats,
}

/// Decodes a token's payload (tokens from responses are well-formed; no key is needed).
pub fn payload(token: &str) -> Result<TokenPayload, String> {
    TokenParts::parse(token)
        .and_then(|p| p.payload())
        .map_err(|e| format!("a token from a response does not decode: {e}: {token}"))
}

/// The output an agent sends to complete `step` (the pending step of the acked node).
pub fn agent_output(step: Option<&str>, agent: Agent, notes: usize) -> OutputInput {
    let artifacts = match (step, agent) {
        (_, Agent::Sloppy) => vec![],
        (Some("decide"), Agent::Good) => vec![ArtifactSpec::LoopStop],
        (Some("decide"), Agent::Again) => vec![ArtifactSpec::LoopContinue],
        (Some("verify" | "report"), _) => vec![ArtifactSpec::Verification],
        _ => vec![],
    };
    OutputInput {
        notes_markdown: Some(format!("Recap {notes}: did the step.")),
        artifacts: artifacts.into_iter().map(ArtifactSpec::to_json).collect(),
    }
}

/// How a response describes its step in errors: the pending step's title, or complete.
fn step_words(output: &ExecutionOutput) -> String {
    match &output.pending {
        Some(p) => format!("step \"{}\"", p.title),
        None => "complete".to_owned(),
    }
}

/// What a call must do, from the payloads of the tokens it sends.
enum Expect {
    /// A stateToken alone: the named node, nothing written.
    Rehydrate { run: usize, token: String },
    /// An ack (with or without its stateToken) or a checkpoint naming one node.
    Act {
        run: usize,
        node: NodeId,
        token: String,
        checkpoint: bool,
    },
    /// Tokens of different nodes.
    Mismatch {
        state_from: usize,
        other_from: usize,
        field: &'static str,
    },
}

impl<S: System> Juggler<S> {
    pub fn new(sys: S) -> Self {
        Self {
            sys,
            runs: Vec::new(),
            pool: Vec::new(),
            recorded: HashMap::new(),
            stats: JuggleStats::default(),
        }
    }

    /// Runs a whole walk: the initial runs, then the calls.
    pub fn walk(&mut self, starts: &[u8], calls: &[Call]) -> Result<(), String> {
        for &w in starts {
            self.apply(Call::Start { workflow: w })?;
        }
        for (i, call) in calls.iter().enumerate() {
            self.apply(*call)
                .map_err(|e| format!("call {i} ({call:?}): {e}"))?;
        }
        Ok(())
    }

    fn resolve(&self, pick: Pick, candidates: &[usize]) -> Option<usize> {
        if candidates.is_empty() {
            return None;
        }
        let n = candidates.len();
        Some(match pick {
            Pick::Recent(k) => candidates[n - 1 - usize::from(k) % n],
            Pick::Any(k) => candidates[usize::from(k) % n],
        })
    }

    fn with_ack(&self) -> Vec<usize> {
        (0..self.pool.len())
            .filter(|&i| self.pool[i].output.ack_token.is_some())
            .collect()
    }

    fn all(&self) -> Vec<usize> {
        (0..self.pool.len()).collect()
    }

    fn run_of(&self, payload: &TokenPayload) -> Result<usize, String> {
        self.runs
            .iter()
            .position(|r| &r.run == payload.run_id() && &r.session == payload.session_id())
            .ok_or_else(|| format!("a token names a run the juggler never started: {payload:?}"))
    }

    /// Applies one call and checks it against the oracle.
    pub fn apply(&mut self, call: Call) -> Result<(), String> {
        if let Call::Start { workflow } = call {
            return self.start(workflow);
        }
        let notes = self.pool.len();
        // Resolve the tokens; a call whose tokens do not exist yet becomes a rehydrate.
        let (input, expect) = match call {
            Call::Start { .. } => unreachable!("handled above"),
            Call::Continue { state, ack, agent } => {
                let acks = self.with_ack();
                let (s, a) = match ack {
                    Partner::Same => match self.resolve(state, &acks) {
                        Some(i) => (i, i),
                        None => return self.rehydrate(state),
                    },
                    Partner::Other(p) => {
                        match (self.resolve(state, &self.all()), self.resolve(p, &acks)) {
                            (Some(s), Some(a)) => (s, a),
                            _ => return self.rehydrate(state),
                        }
                    }
                };
                let state_token = self.pool[s].output.state_token.clone();
                let ack_token = self.pool[a].output.ack_token.clone().unwrap_or_default();
                let sp = payload(&state_token)?;
                let ap = payload(&ack_token)?;
                let step = self.pool[a]
                    .output
                    .pending
                    .as_ref()
                    .map(|p| p.step_id.to_string());
                let input = Input::Continue(ContinueWorkflowInput {
                    preset: None,
                    state_token: Some(state_token),
                    ack_token: Some(ack_token.clone()),
                    context: None,
                    output: Some(agent_output(step.as_deref(), agent, notes)),
                    preferences: vec![],
                });
                let expect = if same_node(&sp, &ap) {
                    Expect::Act {
                        run: self.run_of(&ap)?,
                        node: ap.node_id().clone(),
                        token: ack_token,
                        checkpoint: false,
                    }
                } else {
                    Expect::Mismatch {
                        state_from: s,
                        other_from: a,
                        field: "ackToken",
                    }
                };
                (input, expect)
            }
            Call::AckAlone { ack, agent } => {
                let Some(a) = self.resolve(ack, &self.with_ack()) else {
                    return self.rehydrate(ack);
                };
                let ack_token = self.pool[a].output.ack_token.clone().unwrap_or_default();
                let ap = payload(&ack_token)?;
                let step = self.pool[a]
                    .output
                    .pending
                    .as_ref()
                    .map(|p| p.step_id.to_string());
                self.stats.ack_alone += 1;
                (
                    Input::Continue(ContinueWorkflowInput {
                        preset: None,
                        state_token: None,
                        ack_token: Some(ack_token.clone()),
                        context: None,
                        output: Some(agent_output(step.as_deref(), agent, notes)),
                        preferences: vec![],
                    }),
                    Expect::Act {
                        run: self.run_of(&ap)?,
                        node: ap.node_id().clone(),
                        token: ack_token,
                        checkpoint: false,
                    },
                )
            }
            Call::Rehydrate { state } => return self.rehydrate(state),
            Call::Checkpoint { state, checkpoint } => {
                let all = self.all();
                let (Some(s), Some(c)) = (
                    self.resolve(state, &all),
                    match checkpoint {
                        Partner::Same => self.resolve(state, &all),
                        Partner::Other(p) => self.resolve(p, &all),
                    },
                ) else {
                    return Ok(());
                };
                let state_token = self.pool[s].output.state_token.clone();
                let Some(chk) = self.pool[c].output.checkpoint_token.clone() else {
                    return Err("a response without a checkpointToken".into());
                };
                let sp = payload(&state_token)?;
                let cp = payload(&chk)?;
                let input = Input::Checkpoint(CheckpointWorkflowInput {
                    state_token,
                    checkpoint_token: chk.clone(),
                    output: agent_output(None, Agent::Good, notes),
                });
                let expect = if same_node(&sp, &cp) {
                    Expect::Act {
                        run: self.run_of(&cp)?,
                        node: cp.node_id().clone(),
                        token: chk,
                        checkpoint: true,
                    }
                } else {
                    Expect::Mismatch {
                        state_from: s,
                        other_from: c,
                        field: "checkpointToken",
                    }
                };
                (input, expect)
            }
        };
        self.check(input, expect)
    }

    fn rehydrate(&mut self, state: Pick) -> Result<(), String> {
        let Some(s) = self.resolve(state, &self.all()) else {
            return Ok(());
        };
        let token = self.pool[s].output.state_token.clone();
        let run = self.run_of(&payload(&token)?)?;
        let input = Input::Continue(ContinueWorkflowInput {
            preset: None,
            state_token: Some(token.clone()),
            ack_token: None,
            context: None,
            output: None,
            preferences: vec![],
        });
        self.check(input, Expect::Rehydrate { run, token })
    }

    fn start(&mut self, workflow: u8) -> Result<(), String> {
        let (id, _, _) = MULTI_WORKFLOWS[usize::from(workflow) % MULTI_WORKFLOWS.len()];
        let before = self.sys.fingerprint();
        let out = self
            .sys
            .start(&StartWorkflowInput {
                preset: None,
                workflow_id: id.into(),
                context: None,
                preferences: vec![],
            })
            .map_err(|e| format!("start_workflow {id} failed: {e:?}"))?;
        let after = self.sys.fingerprint();
        if out.run.workflow_id.as_str() != id {
            return Err(format!(
                "started {id} but the response names {}",
                out.run.workflow_id
            ));
        }
        if self
            .runs
            .iter()
            .any(|r| r.session == out.session.session_id)
        {
            return Err("a new run reused an existing session".into());
        }
        // A new run writes only its own session directory and shared content-addressed files.
        let own = session_dir(&out.session.session_id);
        for path in changed(&before, &after) {
            if new_directory(&path, &before, &after) {
                continue;
            }
            let shared = path.starts_with("snapshots") || path.starts_with("workflows/pinned");
            let added_shared = shared && !before.contains_key(&path);
            if !path.starts_with(&own) && !added_shared {
                return Err(format!("starting a run changed {}", path.display()));
            }
        }
        self.runs.push(RunInfo {
            workflow_id: id.to_owned(),
            label: out.run.label.clone(),
            session: out.session.session_id.clone(),
            run: out.session.run_id.clone(),
        });
        self.stats.starts += 1;
        self.pool.push(Seen {
            run: self.runs.len() - 1,
            output: out,
        });
        Ok(())
    }

    fn check(&mut self, input: Input, expect: Expect) -> Result<(), String> {
        let before = self.sys.fingerprint();
        let events_before = match &expect {
            Expect::Act { run, .. } => self.event_count(*run)?,
            _ => 0,
        };
        let reply: Reply = match &input {
            Input::Continue(i) => self.sys.continue_workflow(i),
            Input::Checkpoint(i) => self.sys.checkpoint(i),
        };
        let after = self.sys.fingerprint();
        match expect {
            Expect::Mismatch {
                state_from,
                other_from,
                field,
            } => {
                let envelope = match reply {
                    Ok(out) => {
                        return Err(format!(
                            "mixed tokens were accepted and acted on run {:?}",
                            out.run.label
                        ));
                    }
                    Err(e) => e,
                };
                if before != after {
                    return Err(format!(
                        "a refused mixed pair wrote: {:?}",
                        changed(&before, &after)
                    ));
                }
                self.check_mismatch(&envelope, state_from, other_from, field)?;
                if self.pool[state_from].run == self.pool[other_from].run {
                    self.stats.mismatches_within_run += 1;
                } else {
                    self.stats.mismatches_across_runs += 1;
                }
                Ok(())
            }
            Expect::Rehydrate { run, token } => {
                let out = reply.map_err(|e| format!("a rehydrate failed: {e:?}"))?;
                if before != after {
                    return Err(format!("a rehydrate wrote: {:?}", changed(&before, &after)));
                }
                self.check_names_run(&out, run)?;
                if out.state_token != token {
                    return Err("a rehydrate answered for another node".into());
                }
                self.stats.rehydrates += 1;
                self.pool.push(Seen { run, output: out });
                Ok(())
            }
            Expect::Act {
                run,
                node,
                token,
                checkpoint,
            } => {
                let out = reply.map_err(|e| {
                    format!(
                        "a correctly paired call on run {:?} failed: {e:?}",
                        self.runs[run].label
                    )
                })?;
                self.check_names_run(&out, run)?;
                // A repeat with other notes carries a replay notice beside the recorded answer
                // (D57); the answer itself must be the recorded one.
                let mut answer = out.clone();
                if let Some(notice) = answer.replay.take()
                    && (notice.not_recorded.is_empty()
                        || !notice.fork_ack_token.starts_with("ack.v1."))
                {
                    return Err(format!("a malformed replay notice: {notice:?}"));
                }
                let json = serde_json::to_string(&answer).map_err(|e| e.to_string())?;
                if let Some(recorded) = self.recorded.get(&token) {
                    if before != after {
                        return Err(format!("a replay wrote: {:?}", changed(&before, &after)));
                    }
                    if &json != recorded {
                        return Err("a replay did not return the recorded response".into());
                    }
                    self.stats.replays += 1;
                } else {
                    self.check_acted_on(
                        run,
                        &node,
                        &out,
                        checkpoint,
                        events_before,
                        &before,
                        &after,
                    )?;
                    self.recorded.insert(token, json);
                    if checkpoint {
                        self.stats.checkpoints += 1;
                    } else if out.kind == ExecutionKind::Blocked {
                        self.stats.blocked += 1;
                    } else {
                        self.stats.advances += 1;
                    }
                }
                self.pool.push(Seen { run, output: out });
                Ok(())
            }
        }
    }

    fn event_count(&self, run: usize) -> Result<usize, String> {
        self.sys
            .load(&self.runs[run].session)
            .map(|l| l.event_count())
            .map_err(|e| {
                format!(
                    "cannot load the session of run {}: {e:?}",
                    self.runs[run].label
                )
            })
    }

    /// The response names `run`: session and run ids, workflowId, label, and its tokens.
    fn check_names_run(&self, out: &ExecutionOutput, run: usize) -> Result<(), String> {
        let info = &self.runs[run];
        if out.session.session_id != info.session || out.session.run_id != info.run {
            return Err(format!(
                "the response names session {} / run {}, but the tokens named run {:?}",
                out.session.session_id, out.session.run_id, info.label
            ));
        }
        if out.run.workflow_id.as_str() != info.workflow_id || out.run.label != info.label {
            return Err(format!(
                "the response names run {:?} ({}), expected {:?} ({})",
                out.run.label, out.run.workflow_id, info.label, info.workflow_id
            ));
        }
        let tokens = [
            Some(&out.state_token),
            out.ack_token.as_ref(),
            out.checkpoint_token.as_ref(),
        ];
        for token in tokens.into_iter().flatten() {
            let p = payload(token)?;
            if p.session_id() != &info.session || p.run_id() != &info.run {
                return Err(format!("a token of the response names another run: {p:?}"));
            }
        }
        let text = workrail::protocol::render_text(out);
        let beside = format!(
            "## Tokens for run \"{}\" ({})",
            info.label, info.workflow_id
        );
        if !text.contains(&beside) {
            return Err(format!(
                "the rendering does not name the run beside its tokens:\n{text}"
            ));
        }
        Ok(())
    }

    /// A fresh (non-replayed) ack or checkpoint changed only its own run, and its new node
    /// hangs off the node its tokens name.
    #[allow(clippy::too_many_arguments)]
    fn check_acted_on(
        &self,
        run: usize,
        node: &NodeId,
        out: &ExecutionOutput,
        checkpoint: bool,
        events_before: usize,
        before: &Fingerprint,
        after: &Fingerprint,
    ) -> Result<(), String> {
        let info = &self.runs[run];
        let own = session_dir(&info.session);
        for path in changed(before, after) {
            if new_directory(&path, before, after) {
                continue;
            }
            // Content-addressed stores are shared: a call may add objects, never change one.
            let cas = (path.starts_with("snapshots") || path.starts_with("artifacts"))
                && !before.contains_key(&path);
            if !path.starts_with(&own) && !cas {
                return Err(format!(
                    "a call on run {:?} changed {} (another run's or shared data)",
                    info.label,
                    path.display()
                ));
            }
        }
        let loaded = self
            .sys
            .load(&info.session)
            .map_err(|e| format!("cannot load run {:?}: {e:?}", info.label))?;
        let new = loaded
            .events()
            .range(events_before..loaded.event_count())
            .map_err(|e| format!("cannot read run {:?}'s events: {e:?}", info.label))?;
        if new.is_empty() {
            return Err(format!(
                "a fresh call on run {:?} recorded nothing",
                info.label
            ));
        }
        if let Some(e) = new.iter().find(|e| e.scope().run_id() != Some(&info.run)) {
            return Err(format!(
                "a call on run {:?} appended an event scoped {:?}",
                info.label,
                e.scope()
            ));
        }
        let out_node = payload(&out.state_token)?.node_id().clone();
        if &out_node == node && !checkpoint && out.kind == ExecutionKind::Blocked {
            return Ok(());
        }
        let linked = new.iter().any(|e| match e.data() {
            EventData::EdgeCreated(edge) => {
                &edge.from_node_id == node
                    && edge.to_node_id == out_node
                    && (edge.edge_kind == EdgeKind::Checkpoint) == checkpoint
            }
            _ => false,
        });
        if !linked {
            return Err(format!(
                "the response's node {out_node} is not a new child of the node {node} the tokens named"
            ));
        }
        Ok(())
    }

    /// The scope-mismatch envelope names both tokens' runs and steps and what to send.
    fn check_mismatch(
        &self,
        e: &ErrorEnvelope,
        state_from: usize,
        other_from: usize,
        field: &str,
    ) -> Result<(), String> {
        let fail = |why: &str| Err(format!("{why}: {e:?}"));
        if e.code != ErrorCode::TokenScopeMismatch || e.retry != Retry::NotRetryable {
            return fail("mixed tokens must be a non-retryable TOKEN_SCOPE_MISMATCH");
        }
        let (s, o) = (&self.pool[state_from], &self.pool[other_from]);
        for (seen, name) in [(s, "stateToken"), (o, field)] {
            let label = &self.runs[seen.run].label;
            if !e.message.contains(&format!("\"{label}\""))
                || !e.message.contains(&step_words(&seen.output))
            {
                return fail(&format!(
                    "the message does not name the run {label:?} and {} of `{name}`",
                    step_words(&seen.output)
                ));
            }
            if !e.message.contains(&format!("`{name}`")) {
                return fail(&format!("the message does not name the field `{name}`"));
            }
            let d = e.details.as_ref().map(|d| &d[name]);
            let p = payload(if name == "stateToken" {
                &seen.output.state_token
            } else if field == "ackToken" {
                seen.output.ack_token.as_deref().unwrap_or_default()
            } else {
                seen.output.checkpoint_token.as_deref().unwrap_or_default()
            })?;
            let named = d.is_some_and(|d| {
                d["runId"] == p.run_id().as_str()
                    && d["nodeId"] == p.node_id().as_str()
                    && d["label"] == label.as_str()
                    && d["workflowId"] == self.runs[seen.run].workflow_id.as_str()
            });
            if !named {
                return fail(&format!("details do not name the run and node of `{name}`"));
            }
        }
        let same_run = s.run == o.run;
        let relation = if same_run { "same run" } else { "another run" };
        if !e.message.contains(relation) {
            return fail(&format!("the message does not say it is {relation}"));
        }
        let what = if field == "ackToken" {
            "send that ackToken alone"
        } else {
            "send the checkpointToken from the same response as that stateToken"
        };
        for needed in [what, "exactly", "latest response", "resume_session"] {
            if !e.suggestion.contains(needed) {
                return fail(&format!("the suggestion does not say {needed:?}"));
            }
        }
        Ok(())
    }

    /// Every run's log still loads healthy and every run the juggler saw is still there.
    pub fn check_runs_intact(&self) -> Result<(), String> {
        let sessions: BTreeSet<SessionId> = self.sys.sessions().into_iter().collect();
        for info in &self.runs {
            if !sessions.contains(&info.session) {
                return Err(format!("run {:?} vanished", info.label));
            }
            let loaded = self
                .sys
                .load(&info.session)
                .map_err(|e| format!("run {:?} no longer loads: {e:?}", info.label))?;
            if loaded
                .events()
                .all()
                .map_err(|e| format!("run {:?}'s events no longer read: {e:?}", info.label))?
                .iter()
                .any(|e| e.scope().run_id().is_some_and(|r| r != &info.run))
            {
                return Err(format!(
                    "run {:?}'s session holds another run's events",
                    info.label
                ));
            }
        }
        if sessions.len() != self.runs.len() {
            return Err(format!(
                "{} sessions exist but {} runs were started",
                sessions.len(),
                self.runs.len()
            ));
        }
        Ok(())
    }
}

impl<S: System> std::fmt::Debug for Juggler<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Juggler")
            .field("system", &self.sys.name())
            .field("runs", &self.runs)
            .field("responses", &self.pool.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

enum Input {
    Continue(ContinueWorkflowInput),
    Checkpoint(CheckpointWorkflowInput),
}

fn same_node(a: &TokenPayload, b: &TokenPayload) -> bool {
    a.session_id() == b.session_id() && a.run_id() == b.run_id() && a.node_id() == b.node_id()
}

/// Whether `path` is the kind-and-mode entry of a directory a writing call created (the store's
/// skeleton on a first write); a write may create directories, a read may not.
fn new_directory(path: &Path, before: &Fingerprint, after: &Fingerprint) -> bool {
    !before.contains_key(path)
        && after
            .get(path)
            .is_some_and(|meta| meta.starts_with(b"dir "))
}

/// The paths whose bytes differ (added, removed or changed).
pub fn changed(before: &Fingerprint, after: &Fingerprint) -> Vec<PathBuf> {
    let keys: BTreeSet<&PathBuf> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .cloned()
        .collect()
}

fn session_dir(session: &SessionId) -> PathBuf {
    workrail::store::layout::session_dir(session)
}

/// The kind a token's prefix claims (for test tables).
pub fn kind_of(token: &str) -> Option<TokenKind> {
    token.split('.').next().and_then(TokenKind::from_prefix)
}

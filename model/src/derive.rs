//! Deterministic ids: what the model derives instead of minting.
//!
//! Session and run ids come in as arguments. Everything else the model names is a function of
//! stable identifiers, so the same command sequence always yields the same log (and a replay can
//! recompute the id it needs to look up). Each id is `<prefix>_<26 base32 chars>` of the SHA-256
//! of its purpose and inputs joined by NUL bytes (ids never contain NUL).
//!
//! **The attempt scheme** (shared with the production protocol): the *current ack attempt* of a
//! node is [`ack_attempt_id`] with `k` = the number of `advance_recorded` attempts already recorded
//! at the node; the *current checkpoint attempt* is [`checkpoint_attempt_id`] with `k` = the number
//! of `checkpoint` edges leaving the node. Using the current attempt records it, so the next
//! current attempt is a new one (a retry after `blocked`, or a fork), while an old attempt keeps
//! naming its recorded outcome. A child node id is a function of the attempt that created it.

use workrail_spec::ids::{
    AttemptId, CapObsId, ChangeId, ContextId, DivergenceId, EventId, EventIndex, GapId, NodeId,
    OutputId, RunId, SessionId, Sha256Digest,
};
use workrail_spec::jcs::sha256;

fn digest(parts: &[&str]) -> Sha256Digest {
    sha256(parts.join("\0").as_bytes())
}

/// The `k`-th (0-based) ack attempt of a node.
pub fn ack_attempt_id(session: &SessionId, run: &RunId, node: &NodeId, k: usize) -> AttemptId {
    let k = k.to_string();
    AttemptId::from_digest(&digest(&[
        "ack_attempt",
        session.as_str(),
        run.as_str(),
        node.as_str(),
        &k,
    ]))
}

/// The `k`-th (0-based) checkpoint attempt of a node.
pub fn checkpoint_attempt_id(
    session: &SessionId,
    run: &RunId,
    node: &NodeId,
    k: usize,
) -> AttemptId {
    let k = k.to_string();
    AttemptId::from_digest(&digest(&[
        "checkpoint_attempt",
        session.as_str(),
        run.as_str(),
        node.as_str(),
        &k,
    ]))
}

/// The root node of a run.
pub fn root_node_id(session: &SessionId, run: &RunId) -> NodeId {
    NodeId::from_digest(&digest(&["root_node", session.as_str(), run.as_str()]))
}

/// The step node created by an advanced ack attempt.
pub fn child_node_id(session: &SessionId, run: &RunId, attempt: &AttemptId) -> NodeId {
    NodeId::from_digest(&digest(&[
        "step_node",
        session.as_str(),
        run.as_str(),
        attempt.as_str(),
    ]))
}

/// The checkpoint node created by a checkpoint attempt.
pub fn checkpoint_node_id(session: &SessionId, run: &RunId, attempt: &AttemptId) -> NodeId {
    NodeId::from_digest(&digest(&[
        "checkpoint_node",
        session.as_str(),
        run.as_str(),
        attempt.as_str(),
    ]))
}

/// An output produced by an attempt, from the attempt identity and the payload discriminator
/// (`recap`, or `artifact` plus the artifact digest), as `L-OUTPUT-ID-DERIVED` requires.
pub fn output_id(session: &SessionId, attempt: &AttemptId, discriminator: &str) -> OutputId {
    OutputId::from_digest(&digest(&[
        "output",
        session.as_str(),
        attempt.as_str(),
        discriminator,
    ]))
}

/// The `i`-th gap disclosed by an attempt (or by the start of a run, keyed by its root node).
pub fn gap_id(session: &SessionId, origin: &str, i: usize) -> GapId {
    let i = i.to_string();
    GapId::from_digest(&digest(&["gap", session.as_str(), origin, &i]))
}

/// The `i`-th capability observation an ack attempt records (D40: `derive(attemptId, index)`).
pub fn cap_obs_id(session: &SessionId, attempt: &AttemptId, i: usize) -> CapObsId {
    let i = i.to_string();
    CapObsId::from_digest(&digest(&["capobs", session.as_str(), attempt.as_str(), &i]))
}

/// The `i`-th divergence marker an ack attempt records (D42).
pub fn divergence_id(session: &SessionId, attempt: &AttemptId, i: usize) -> DivergenceId {
    let i = i.to_string();
    DivergenceId::from_digest(&digest(&[
        "divergence",
        session.as_str(),
        attempt.as_str(),
        &i,
    ]))
}

/// The preference change recorded by `start` when the start command carries preferences.
pub fn start_change_id(session: &SessionId, run: &RunId) -> ChangeId {
    ChangeId::from_digest(&digest(&[
        "start_preferences",
        session.as_str(),
        run.as_str(),
    ]))
}

/// The preference change recorded by an ack attempt that changes its node's snapshot (D43).
pub fn ack_change_id(session: &SessionId, attempt: &AttemptId) -> ChangeId {
    ChangeId::from_digest(&digest(&[
        "ack_preferences",
        session.as_str(),
        attempt.as_str(),
    ]))
}

/// The preference warning output recorded beside a new preference snapshot, by what recorded
/// the snapshot (`origin`: an attempt id, or the root node id for a start).
pub fn preference_warning_output_id(session: &SessionId, origin: &str) -> OutputId {
    OutputId::from_digest(&digest(&["preference_warning", session.as_str(), origin]))
}

/// The context a start records (decision D139).
pub fn start_context_id(session: &SessionId, run: &RunId) -> ContextId {
    ContextId::from_digest(&digest(&["start_context", session.as_str(), run.as_str()]))
}

/// The context an ack attempt records when its delta changes the run's context.
pub fn ack_context_id(session: &SessionId, attempt: &AttemptId) -> ContextId {
    ContextId::from_digest(&digest(&[
        "ack_context",
        session.as_str(),
        attempt.as_str(),
    ]))
}

/// Event ids are informational (never part of a dedupeKey): the model names them by position.
pub fn event_id(session: &SessionId, index: EventIndex) -> EventId {
    let index = index.get().to_string();
    EventId::from_digest(&digest(&["event", session.as_str(), &index]))
}

/// The run of lane `index` (from 1) of the parallel step at `parent` (decision D168: a function
/// of the parent node and the index, so a replayed landing names the same lane and a new node
/// landing on the step names lanes of its own).
pub fn lane_run_id(session: &SessionId, parent: &NodeId, index: u32) -> RunId {
    let index = index.to_string();
    RunId::from_digest(&digest(&[
        "lane_run",
        session.as_str(),
        parent.as_str(),
        &index,
    ]))
}

/// The initial context of a lane run (its mapped inputs, then its `args`).
pub fn lane_context_id(session: &SessionId, lane: &RunId) -> ContextId {
    ContextId::from_digest(&digest(&["lane_context", session.as_str(), lane.as_str()]))
}

//! Deterministic ids derived from durable facts (issue "attemptIds are derived
//! deterministically from durable state"), so any response can be re-minted identically and
//! rehydrate needs no writes.
//!
//! - The k-th ack attempt of node N: `attempt(session, N, "ack", k)`; N's *current* ack attempt
//!   is the one with k = number of `advance_recorded` records at N. After an advance or a
//!   blocked attempt the current attempt moves on, so an older stateToken rehydrated later gets
//!   a fresh attempt (a fork), while replaying a used attempt returns its recorded outcome.
//! - The k-th checkpoint attempt of N: `attempt(session, N, "checkpoint", k)` with k = number of
//!   checkpoint edges from N.
//! - Everything an attempt creates (child node, outputs, gaps, capability observations,
//!   divergences, trace, preference change, context record) is derived from the attempt id and a
//!   discriminator, so a retry of the same attempt produces the same ids and dedupes.
//!
//! Each derivation hashes a versioned, `|`-separated domain string with SHA-256.

use workrail_spec::ids::{
    AttemptId, CapObsId, ChangeId, ContextId, DivergenceId, GapId, NodeId, OutputId, SessionId,
    TraceId,
};
use workrail_spec::jcs::sha256;

/// Which token family an attempt belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptKind {
    Ack,
    Checkpoint,
}

impl AttemptKind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Ack => "ack",
            Self::Checkpoint => "checkpoint",
        }
    }
}

fn digest(parts: &[&str]) -> workrail_spec::ids::Sha256Digest {
    sha256(parts.join("|").as_bytes())
}

/// The `ordinal`-th attempt of `kind` at `node`.
pub fn attempt(session: &SessionId, node: &NodeId, kind: AttemptKind, ordinal: u64) -> AttemptId {
    AttemptId::from_digest(&digest(&[
        "workrail.attempt.v1",
        session.as_str(),
        node.as_str(),
        kind.as_str(),
        &ordinal.to_string(),
    ]))
}

/// The node an ack or checkpoint attempt creates.
pub fn child_node(attempt: &AttemptId) -> NodeId {
    NodeId::from_digest(&digest(&["workrail.node.v1", attempt.as_str()]))
}

/// The `index`-th output an attempt appends.
pub fn output(attempt: &AttemptId, index: usize) -> OutputId {
    OutputId::from_digest(&digest(&[
        "workrail.output.v1",
        attempt.as_str(),
        &index.to_string(),
    ]))
}

/// The `index`-th gap an attempt records.
pub fn gap(attempt: &AttemptId, index: usize) -> GapId {
    GapId::from_digest(&digest(&[
        "workrail.gap.v1",
        attempt.as_str(),
        &index.to_string(),
    ]))
}

/// The `index`-th capability observation an attempt records (in artifact order).
pub fn cap_obs(attempt: &AttemptId, index: usize) -> CapObsId {
    CapObsId::from_digest(&digest(&[
        "workrail.capobs.v1",
        attempt.as_str(),
        &index.to_string(),
    ]))
}

/// The `index`-th divergence marker an attempt records (in artifact order).
pub fn divergence(attempt: &AttemptId, index: usize) -> DivergenceId {
    DivergenceId::from_digest(&digest(&[
        "workrail.div.v1",
        attempt.as_str(),
        &index.to_string(),
    ]))
}

/// The decision trace an attempt records.
pub fn trace(attempt: &AttemptId) -> TraceId {
    TraceId::from_digest(&digest(&["workrail.trace.v1", attempt.as_str()]))
}

/// The preference change an attempt records.
pub fn change(attempt: &AttemptId) -> ChangeId {
    ChangeId::from_digest(&digest(&["workrail.prefchg.v1", attempt.as_str()]))
}

/// The preference warning output recorded beside a new preference snapshot; `origin` is the
/// attempt id (or, for a start, the root node id) that recorded the snapshot.
pub fn preference_warning(origin: &str) -> OutputId {
    OutputId::from_digest(&digest(&["workrail.prefwarn.v1", origin]))
}

/// The context record an attempt writes.
pub fn context(attempt: &AttemptId) -> ContextId {
    ContextId::from_digest(&digest(&["workrail.ctx.v1", attempt.as_str()]))
}

/// The run of lane `index` (from 1) that the parallel step at `parent` started (decision D168).
pub fn lane_run(parent: &NodeId, index: u32) -> workrail_spec::ids::RunId {
    workrail_spec::ids::RunId::from_digest(&digest(&[
        "workrail.lane.run.v1",
        parent.as_str(),
        &index.to_string(),
    ]))
}

/// The root node of lane `index` of the parallel step at `parent`.
pub fn lane_root(parent: &NodeId, index: u32) -> NodeId {
    NodeId::from_digest(&digest(&[
        "workrail.lane.root.v1",
        parent.as_str(),
        &index.to_string(),
    ]))
}

/// Ids of records written by `start_workflow`, derived from the new root node.
pub fn start_scoped(root: &NodeId, what: &str) -> workrail_spec::ids::Sha256Digest {
    digest(&["workrail.start.v1", root.as_str(), what])
}

//! `resume_session` ranking (locks §2.3; §10 "Corruption handling"; `L-RESUME-*`).
//!
//! Candidates are tip-only: one per run that has a preferred tip, from `healthy` sessions only.
//! Each candidate lands in the first tier it matches:
//!
//! 1. `matched_head_sha`: the session's latest `git_head_sha` observation equals the query's
//!    `gitHeadSha` exactly;
//! 2. `matched_branch`: the session's latest `git_branch` observation equals the query's
//!    `gitBranch` or starts with it. **Decision (prefix side):** the query is the prefix, since
//!    it is what the user typed (`feature/auth` finds `feature/auth-tokens`); the opposite side
//!    would let a one-letter branch match every query;
//! 3. `matched_notes`: every query token is in the token set of the preferred tip's current recap
//!    notes (the current `recap` output when it is a `notes` payload; superseded outputs are never
//!    current; a trailing canonical truncation marker is removed before tokenizing);
//! 4. `matched_workflow_id`: every query token is in the union of the token sets of the run's
//!    `workflowId` and of its workflow name (looked up by the run's pinned `workflowHash`);
//! 5. `recency_fallback`: every other candidate.
//!
//! Within a tier: preferred-tip `lastActivityEventIndex` descending, then `sessionId` ascending,
//! then (**decision**, for a total order when one session has several runs) `runId` ascending.
//! At most [`RESUME_MAX_CANDIDATES`] candidates are returned. `whyMatched` lists every criterion
//! the candidate meets, in tier order, or only `recency_fallback` when it meets none. The snippet
//! is the tip's current recap notes bounded to [`RESUME_SNIPPET_MAX_BYTES`] with the canonical
//! marker (empty when the tip has no recap notes). Empty query fields (and a text without tokens)
//! match nothing.
//!
//! Text normalization (`L-RESUME-NORMALIZE`): Unicode NFKC, then locale-independent lowercasing,
//! then the tokens are the maximal runs of `[a-z0-9_-]`.

use std::collections::{BTreeMap, BTreeSet};

use unicode_normalization::UnicodeNormalization;
use workrail_spec::budget::{
    RESUME_MAX_CANDIDATES, RESUME_SNIPPET_MAX_BYTES, TRUNCATION_MARKER, truncate_with_marker,
};
use workrail_spec::closed::{ObservationKey, SessionHealthKind, WhyMatched};
use workrail_spec::event::{EventData, ObservationValue, SessionEvent};
use workrail_spec::ids::{EventIndex, NodeId, RunId, SessionId, WorkflowHash, WorkflowId};

use super::dag::{RunDag, run_ids};
use super::outputs::node_outputs;
use super::tip::preferred_tip;

/// What the user is looking for. Every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResumeQuery {
    pub git_head_sha: Option<String>,
    pub git_branch: Option<String>,
    pub text: Option<String>,
}

/// A session offered for ranking.
#[derive(Debug, Clone, Copy)]
pub struct SessionCandidate<'a> {
    pub session_id: &'a SessionId,
    pub health: SessionHealthKind,
    /// The session's committed events in `EventIndex` order.
    pub events: &'a [SessionEvent],
}

/// The tiers, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ResumeTier {
    HeadSha = 1,
    Branch = 2,
    Notes = 3,
    WorkflowId = 4,
    Recency = 5,
}

/// One ranked resume target: a run's preferred tip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeCandidate {
    pub session_id: SessionId,
    pub run_id: RunId,
    pub node_id: NodeId,
    pub workflow_id: Option<WorkflowId>,
    pub last_activity_event_index: EventIndex,
    pub tier: ResumeTier,
    pub why_matched: Vec<WhyMatched>,
    pub snippet: String,
}

/// The locked normalization: NFKC, lowercase, then tokens `[a-z0-9_-]+` as a set.
pub fn text_tokens(text: &str) -> BTreeSet<String> {
    let normalized: String = text.nfkc().collect::<String>().to_lowercase();
    normalized
        .split(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'))
        .filter(|token| !token.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The latest value of each observation key in the session (`L-EVENT-OBSERVATION-LATEST`).
fn latest_observations(events: &[SessionEvent]) -> BTreeMap<ObservationKey, String> {
    let mut latest = BTreeMap::new();
    for event in events {
        if let EventData::ObservationRecorded(obs) = event.data() {
            let value = match &obs.value {
                ObservationValue::ShortString { value } => value.as_str().to_owned(),
                ObservationValue::GitSha1 { value } => value.as_str().to_owned(),
                ObservationValue::Sha256 { value } => value.as_str().to_owned(),
            };
            latest.insert(obs.key, value); // events are in EventIndex order: last wins
        }
    }
    latest
}

fn non_empty(field: &Option<String>) -> Option<&str> {
    field.as_deref().filter(|s| !s.is_empty())
}

/// Ranks the tips of every run of the healthy `sessions` against `query`.
pub fn resume_ranking(
    sessions: &[SessionCandidate<'_>],
    workflow_name: &dyn Fn(&WorkflowHash) -> Option<String>,
    query: &ResumeQuery,
) -> Vec<ResumeCandidate> {
    let query_tokens = query.text.as_deref().map(text_tokens).unwrap_or_default();
    let all_in = |corpus: &BTreeSet<String>| {
        !query_tokens.is_empty() && query_tokens.iter().all(|t| corpus.contains(t))
    };
    let mut ranked = Vec::new();
    for session in sessions
        .iter()
        .filter(|s| s.health == SessionHealthKind::Healthy)
    {
        let observations = latest_observations(session.events);
        let head_sha = non_empty(&query.git_head_sha).is_some_and(|q| {
            observations
                .get(&ObservationKey::GitHeadSha)
                .map(String::as_str)
                == Some(q)
        });
        let branch = non_empty(&query.git_branch).is_some_and(|q| {
            observations
                .get(&ObservationKey::GitBranch)
                .is_some_and(|b| b.starts_with(q))
        });
        for run_id in run_ids(session.events) {
            let dag = RunDag::build(session.events, &run_id);
            let Some(tip) = preferred_tip(session.events, &dag) else {
                continue;
            };
            let notes = node_outputs(session.events, &run_id, &tip.node_id)
                .current_recap_notes()
                .map(str::to_owned);
            let notes_corpus = notes.as_deref().map_or_else(BTreeSet::new, |n| {
                text_tokens(n.strip_suffix(TRUNCATION_MARKER).unwrap_or(n))
            });
            let mut workflow_corpus = BTreeSet::new();
            if let Some(pin) = &dag.pin {
                workflow_corpus.extend(text_tokens(pin.workflow_id.as_str()));
                if let Some(name) = workflow_name(&pin.workflow_hash) {
                    workflow_corpus.extend(text_tokens(&name));
                }
            }
            let criteria = [
                (head_sha, ResumeTier::HeadSha, WhyMatched::MatchedHeadSha),
                (branch, ResumeTier::Branch, WhyMatched::MatchedBranch),
                (
                    all_in(&notes_corpus),
                    ResumeTier::Notes,
                    WhyMatched::MatchedNotes,
                ),
                (
                    all_in(&workflow_corpus),
                    ResumeTier::WorkflowId,
                    WhyMatched::MatchedWorkflowId,
                ),
            ];
            let met: Vec<_> = criteria.iter().filter(|(hit, ..)| *hit).collect();
            let (tier, why_matched) = match met.first() {
                Some((_, tier, _)) => (*tier, met.iter().map(|(_, _, why)| *why).collect()),
                None => (ResumeTier::Recency, vec![WhyMatched::RecencyFallback]),
            };
            let snippet = notes.as_deref().map_or_else(String::new, |n| {
                truncate_with_marker(n, RESUME_SNIPPET_MAX_BYTES)
                    .map_or_else(|_| String::new(), |t| t.text.into_owned())
            });
            ranked.push(ResumeCandidate {
                session_id: session.session_id.clone(),
                run_id: run_id.clone(),
                node_id: tip.node_id,
                workflow_id: dag.pin.as_ref().map(|p| p.workflow_id.clone()),
                last_activity_event_index: tip.last_activity,
                tier,
                why_matched,
                snippet,
            });
        }
    }
    ranked.sort_by(|a, b| {
        a.tier
            .cmp(&b.tier)
            .then(
                b.last_activity_event_index
                    .cmp(&a.last_activity_event_index),
            )
            .then(a.session_id.cmp(&b.session_id))
            .then(a.run_id.cmp(&b.run_id))
    });
    ranked.truncate(RESUME_MAX_CANDIDATES);
    ranked
}

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
//!
//! Written from the lock text alone, as a literal reading: every tip is judged against every
//! criterion, then all candidates are sorted by one key (see `model/README.md`, "Independence").

use std::collections::BTreeSet;

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
    let lowered: String = text.nfkc().collect::<String>().to_lowercase();
    let mut tokens = BTreeSet::new();
    let mut current = String::new();
    for c in lowered.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-' {
            current.push(c);
        } else if !current.is_empty() {
            tokens.insert(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        tokens.insert(current);
    }
    tokens
}

/// The value of the last `observation_recorded` event with `key` (events are in `EventIndex`
/// order), as text.
fn latest_observation(events: &[SessionEvent], key: ObservationKey) -> Option<String> {
    events.iter().rev().find_map(|event| match event.data() {
        EventData::ObservationRecorded(obs) if obs.key == key => Some(match &obs.value {
            ObservationValue::ShortString { value } => value.as_str().to_owned(),
            ObservationValue::GitSha1 { value } => value.as_str().to_owned(),
            ObservationValue::Sha256 { value } => value.as_str().to_owned(),
        }),
        _ => None,
    })
}

/// Whether every token of `query` is in `corpus`; a query without tokens matches nothing.
fn all_tokens_in(query: &BTreeSet<String>, corpus: &BTreeSet<String>) -> bool {
    !query.is_empty() && query.is_subset(corpus)
}

/// Ranks the tips of every run of the healthy `sessions` against `query`.
pub fn resume_ranking(
    sessions: &[SessionCandidate<'_>],
    workflow_name: &dyn Fn(&WorkflowHash) -> Option<String>,
    query: &ResumeQuery,
) -> Vec<ResumeCandidate> {
    let wanted_sha = query.git_head_sha.as_deref().filter(|s| !s.is_empty());
    let wanted_branch = query.git_branch.as_deref().filter(|s| !s.is_empty());
    let wanted_tokens = query.text.as_deref().map(text_tokens).unwrap_or_default();

    let mut candidates = Vec::new();
    for session in sessions {
        // Only fully validated sessions are offered (L-RESUME-HEALTHY-ONLY).
        if session.health != SessionHealthKind::Healthy {
            continue;
        }
        let head_sha = latest_observation(session.events, ObservationKey::GitHeadSha);
        let branch = latest_observation(session.events, ObservationKey::GitBranch);
        for run_id in run_ids(session.events) {
            let dag = RunDag::build(session.events, &run_id);
            // Tip-only: one candidate per run, its preferred tip.
            let Some(tip) = preferred_tip(session.events, &dag) else {
                continue;
            };
            let notes = node_outputs(session.events, &run_id, &tip.node_id)
                .current_recap_notes()
                .map(str::to_owned);

            let matched_sha = wanted_sha.is_some() && head_sha.as_deref() == wanted_sha;
            let matched_branch = match (wanted_branch, branch.as_deref()) {
                (Some(wanted), Some(observed)) => observed.starts_with(wanted),
                _ => false,
            };
            let notes_corpus = notes
                .as_deref()
                .map(|n| text_tokens(n.strip_suffix(TRUNCATION_MARKER).unwrap_or(n)))
                .unwrap_or_default();
            let matched_notes = all_tokens_in(&wanted_tokens, &notes_corpus);
            let workflow_id = dag.pin.as_ref().map(|pin| pin.workflow_id.clone());
            let mut workflow_corpus = BTreeSet::new();
            if let Some(pin) = &dag.pin {
                workflow_corpus.extend(text_tokens(pin.workflow_id.as_str()));
                if let Some(name) = workflow_name(&pin.workflow_hash) {
                    workflow_corpus.extend(text_tokens(&name));
                }
            }
            let matched_workflow = all_tokens_in(&wanted_tokens, &workflow_corpus);

            let criteria = [
                (matched_sha, ResumeTier::HeadSha, WhyMatched::MatchedHeadSha),
                (
                    matched_branch,
                    ResumeTier::Branch,
                    WhyMatched::MatchedBranch,
                ),
                (matched_notes, ResumeTier::Notes, WhyMatched::MatchedNotes),
                (
                    matched_workflow,
                    ResumeTier::WorkflowId,
                    WhyMatched::MatchedWorkflowId,
                ),
            ];
            let met: Vec<(ResumeTier, WhyMatched)> = criteria
                .iter()
                .filter(|(hit, _, _)| *hit)
                .map(|(_, tier, why)| (*tier, *why))
                .collect();
            let (tier, why_matched) = match met.first() {
                Some((best, _)) => (*best, met.iter().map(|(_, why)| *why).collect()),
                None => (ResumeTier::Recency, vec![WhyMatched::RecencyFallback]),
            };
            let snippet = notes
                .as_deref()
                .map(
                    |n| match truncate_with_marker(n, RESUME_SNIPPET_MAX_BYTES) {
                        Ok(cut) => cut.text.into_owned(),
                        Err(_) => String::new(),
                    },
                )
                .unwrap_or_default();
            candidates.push(ResumeCandidate {
                session_id: session.session_id.clone(),
                run_id,
                node_id: tip.node_id,
                workflow_id,
                last_activity_event_index: tip.last_activity,
                tier,
                why_matched,
                snippet,
            });
        }
    }
    // Tier first; within a tier the latest activity, then sessionId, then runId.
    candidates.sort_by(|a, b| {
        a.tier
            .cmp(&b.tier)
            .then(
                b.last_activity_event_index
                    .cmp(&a.last_activity_event_index),
            )
            .then(a.session_id.cmp(&b.session_id))
            .then(a.run_id.cmp(&b.run_id))
    });
    candidates.truncate(RESUME_MAX_CANDIDATES);
    candidates
}

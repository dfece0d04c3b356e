//! `resume_session` ranking (locks §2.3, §10 "Corruption handling"): a pure function of the
//! healthy sessions' committed events and their projections.
//!
//! Every run with a preferred tip is one candidate (tip-only). A candidate lands in the first
//! tier it matches: the session's latest `git_head_sha` observation equals the query's exactly;
//! the latest `git_branch` observation starts with the query's branch (the query is the prefix,
//! D28); every query text token is in the tip's current recap notes (canonical truncation
//! marker removed); every query text token is in the workflow id and name; else recency.
//! Within a tier: tip last-activity descending, then `sessionId`, then `runId` ascending (D28).
//! `whyMatched` lists every criterion met, in tier order, or only `recency_fallback`. Empty
//! query fields and texts without tokens match nothing.

use std::collections::{BTreeMap, BTreeSet};

use unicode_normalization::UnicodeNormalization;
use workrail_spec::budget::{
    RESUME_MAX_CANDIDATES, RESUME_SNIPPET_MAX_BYTES, TRUNCATION_MARKER, truncate_with_marker,
};
use workrail_spec::closed::{ObservationKey, OutputChannel, WhyMatched};
use workrail_spec::event::{EventData, ObservationValue, OutputPayload, SessionEvent};
use workrail_spec::ids::{NodeId, RunId, SessionId, WorkflowHash, WorkflowId};

use super::SessionProjection;

/// What the caller looks for; every field optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResumeQuery {
    pub text: Option<String>,
    pub git_head_sha: Option<String>,
    pub git_branch: Option<String>,
}

/// One healthy session offered for ranking.
#[derive(Debug, Clone, Copy)]
pub struct ResumeSource<'a> {
    pub session_id: &'a SessionId,
    /// Committed events in `EventIndex` order.
    pub events: &'a [SessionEvent],
    /// The projection of exactly those events.
    pub projection: &'a SessionProjection,
}

/// A ranked run tip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankedTip {
    pub session_id: SessionId,
    pub run_id: RunId,
    pub node_id: NodeId,
    pub workflow_id: WorkflowId,
    pub workflow_hash: WorkflowHash,
    pub last_activity: u64,
    /// Non-empty; its first entry is the tier.
    pub why_matched: Vec<WhyMatched>,
    /// The tip's current recap notes, when it has notes.
    pub notes: Option<String>,
}

/// `L-RESUME-NORMALIZE`: Unicode NFKC, locale-independent lowercasing, then the set of maximal
/// runs of `[a-z0-9_-]`.
pub fn text_tokens(text: &str) -> BTreeSet<String> {
    let lowered = text.nfkc().collect::<String>().to_lowercase();
    lowered
        .split(|c: char| !matches!(c, 'a'..='z' | '0'..='9' | '_' | '-'))
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The latest value per observation key (max `EventIndex` wins, `L-EVENT-OBSERVATION-LATEST`).
pub fn latest_observations(events: &[SessionEvent]) -> BTreeMap<ObservationKey, String> {
    let mut latest = BTreeMap::new();
    for event in events {
        if let EventData::ObservationRecorded(o) = event.data() {
            let value = match &o.value {
                ObservationValue::ShortString { value } => value.as_str(),
                ObservationValue::GitSha1 { value } => value.as_str(),
                ObservationValue::Sha256 { value } => value.as_str(),
            };
            latest.insert(o.key, value.to_owned());
        }
    }
    latest
}

/// The snippet of a tip: its notes within 1024 UTF-8 bytes, marked when cut; empty without
/// notes.
pub fn snippet(notes: Option<&str>) -> String {
    notes
        .and_then(|n| truncate_with_marker(n, RESUME_SNIPPET_MAX_BYTES).ok())
        .map(|t| t.text.into_owned())
        .unwrap_or_default()
}

fn non_empty(field: &Option<String>) -> Option<&str> {
    field.as_deref().filter(|s| !s.is_empty())
}

/// Ranks every run tip of `sources` (which must all be healthy) and keeps the best
/// [`RESUME_MAX_CANDIDATES`]. `workflow_name` looks up the name of a pinned workflow.
pub fn rank(
    sources: &[ResumeSource<'_>],
    workflow_name: &mut dyn FnMut(&WorkflowHash) -> Option<String>,
    query: &ResumeQuery,
) -> Vec<RankedTip> {
    let query_tokens = query.text.as_deref().map(text_tokens).unwrap_or_default();
    let covers =
        |corpus: &BTreeSet<String>| !query_tokens.is_empty() && query_tokens.is_subset(corpus);
    let mut ranked = Vec::new();
    for source in sources {
        let observed = latest_observations(source.events);
        let head_sha = non_empty(&query.git_head_sha).is_some_and(|q| {
            observed
                .get(&ObservationKey::GitHeadSha)
                .map(String::as_str)
                == Some(q)
        });
        let branch = non_empty(&query.git_branch).is_some_and(|q| {
            observed
                .get(&ObservationKey::GitBranch)
                .is_some_and(|b| b.starts_with(q))
        });
        for (run_id, view) in &source.projection.runs {
            let Some(tip) = &view.preferred_tip else {
                continue;
            };
            let notes = match view
                .current_outputs
                .get(&(tip.clone(), OutputChannel::Recap))
                .map(|o| &o.payload)
            {
                Some(OutputPayload::Notes { notes_markdown }) => {
                    Some(notes_markdown.as_str().to_owned())
                }
                _ => None,
            };
            // The corpus excludes the canonical truncation marker (L-RESUME-CORPUS).
            let notes_tokens = notes.as_deref().map_or_else(BTreeSet::new, |n| {
                text_tokens(n.strip_suffix(TRUNCATION_MARKER).unwrap_or(n))
            });
            let started = &view.dag.started;
            let mut workflow_tokens = text_tokens(started.workflow_id.as_str());
            if let Some(name) = workflow_name(&started.workflow_hash) {
                workflow_tokens.extend(text_tokens(&name));
            }
            let mut why_matched: Vec<WhyMatched> = [
                (head_sha, WhyMatched::MatchedHeadSha),
                (branch, WhyMatched::MatchedBranch),
                (covers(&notes_tokens), WhyMatched::MatchedNotes),
                (covers(&workflow_tokens), WhyMatched::MatchedWorkflowId),
            ]
            .into_iter()
            .filter_map(|(hit, why)| hit.then_some(why))
            .collect();
            if why_matched.is_empty() {
                why_matched.push(WhyMatched::RecencyFallback);
            }
            ranked.push(RankedTip {
                session_id: source.session_id.clone(),
                run_id: run_id.clone(),
                node_id: tip.clone(),
                workflow_id: started.workflow_id.clone(),
                workflow_hash: started.workflow_hash.clone(),
                last_activity: view.tip_last_activity,
                why_matched,
                notes,
            });
        }
    }
    // WhyMatched is declared in tier order, so the first criterion met is the tier.
    ranked.sort_by(|a, b| {
        a.why_matched[0]
            .cmp(&b.why_matched[0])
            .then(b.last_activity.cmp(&a.last_activity))
            .then_with(|| a.session_id.cmp(&b.session_id))
            .then_with(|| a.run_id.cmp(&b.run_id))
    });
    ranked.truncate(RESUME_MAX_CANDIDATES);
    ranked
}

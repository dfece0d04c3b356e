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
use std::sync::Arc;

use unicode_normalization::UnicodeNormalization;
use workrail_spec::budget::{
    RESUME_MAX_CANDIDATES, RESUME_SNIPPET_MAX_BYTES, TRUNCATION_MARKER, truncate_with_marker,
};
use workrail_spec::closed::{ObservationKey, WhyMatched};
use workrail_spec::event::{EventData, ObservationValue, SessionEvent};
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
    /// The projection of the session's committed events.
    pub projection: &'a SessionProjection,
}

/// Reads the notes of the event at a position of a session's log: the projection holds only
/// where a tip's notes are (D226).
pub type NotesAt<'r, E> = dyn FnMut(usize) -> Result<Option<String>, E> + 'r;

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
    /// The tip's current recap notes as a candidate's snippet shows them, when it has notes.
    pub notes: Option<String>,
}

/// `L-RESUME-NORMALIZE`: Unicode NFKC, locale-independent lowercasing, then the set of maximal
/// runs of `[a-z0-9_-]`.
pub fn text_tokens(text: &str) -> BTreeSet<String> {
    split_tokens(&normalized(text)).map(str::to_owned).collect()
}

/// The locked normalization before splitting: NFKC, then lowercase.
fn normalized(text: &str) -> String {
    text.nfkc().collect::<String>().to_lowercase()
}

/// The tokens of normalized text: runs of `[a-z0-9_-]`.
fn split_tokens(normalized: &str) -> impl Iterator<Item = &str> {
    normalized
        .split(|c: char| !matches!(c, 'a'..='z' | '0'..='9' | '_' | '-'))
        .filter(|t| !t.is_empty())
}

/// The latest value per observation key (max `EventIndex` wins, `L-EVENT-OBSERVATION-LATEST`).
pub fn latest_observations(events: &[SessionEvent]) -> BTreeMap<ObservationKey, String> {
    let mut latest = BTreeMap::new();
    for event in events {
        if let EventData::ObservationRecorded(o) = event.data() {
            latest.insert(o.key, observation_text(&o.value).to_owned());
        }
    }
    latest
}

/// An observation's value as text.
pub fn observation_text(value: &ObservationValue) -> &str {
    match value {
        ObservationValue::ShortString { value } => value.as_str(),
        ObservationValue::GitSha1 { value } => value.as_str(),
        ObservationValue::Sha256 { value } => value.as_str(),
    }
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

/// The workflow of a run tip as ranking needs it: the same for every run of one pinned
/// workflow, so it can be shared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TipWorkflow {
    pub workflow_id: WorkflowId,
    pub workflow_hash: WorkflowHash,
    /// The tokens of the workflow id and name.
    pub(crate) tokens: BTreeSet<String>,
}

/// One run tip as ranking needs it, computed once per version of its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TipSummary {
    pub run_id: RunId,
    pub node_id: NodeId,
    pub workflow: Arc<TipWorkflow>,
    pub last_activity: u64,
    /// The tip's recap notes, as far as a candidate's snippet shows them.
    pub notes_snippet: Option<String>,
    /// The text whose tokens a query's text must cover: the tip's whole recap notes, already
    /// normalized (NFKC, lowercase) so a query only splits it.
    pub(crate) notes_text: Option<String>,
}

/// What ranking needs of one session: its latest git observations and its run tips. Small
/// enough to keep for every session, so `resume_session` over thousands of sessions reloads
/// only the ones that changed (and keep on disk between processes, `impl/docs/store.md`
/// "Caches").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionResumeSummary {
    pub session_id: SessionId,
    pub(crate) head_sha: Option<String>,
    pub(crate) branch: Option<String>,
    pub tips: Vec<TipSummary>,
}

impl SessionResumeSummary {
    /// About how much memory this summary takes.
    pub fn estimated_bytes(&self) -> usize {
        self.tips
            .iter()
            .map(|t| {
                256 + t.notes_snippet.as_ref().map_or(0, String::len)
                    + t.notes_text.as_ref().map_or(0, String::len)
                    + t.workflow
                        .tokens
                        .iter()
                        .map(|w| w.len() + 32)
                        .sum::<usize>()
            })
            .sum::<usize>()
            + 256
    }
}

/// The summary of one session, reading its tips' notes with `notes_at`; it fails when they
/// cannot be read.
pub fn summarize<E>(
    source: &ResumeSource<'_>,
    workflow_name: &mut dyn FnMut(&WorkflowHash) -> Option<String>,
    notes_at: &mut NotesAt<'_, E>,
) -> Result<SessionResumeSummary, E> {
    let mut observed = source.projection.observations.clone();
    let mut tips = Vec::new();
    for (run_id, view) in &source.projection.runs {
        let Some(tip) = &view.preferred_tip else {
            continue;
        };
        let notes = match view.recap_notes_position(tip) {
            Some(position) => notes_at(position)?,
            None => None,
        };
        let notes = notes.as_deref();
        let started = &view.dag.started;
        let mut workflow_tokens = text_tokens(started.workflow_id.as_str());
        if let Some(name) = workflow_name(&started.workflow_hash) {
            workflow_tokens.extend(text_tokens(&name));
        }
        tips.push(TipSummary {
            run_id: run_id.clone(),
            node_id: tip.clone(),
            workflow: Arc::new(TipWorkflow {
                workflow_id: started.workflow_id.clone(),
                workflow_hash: started.workflow_hash.clone(),
                tokens: workflow_tokens,
            }),
            last_activity: view.tip_last_activity,
            notes_snippet: notes.map(|n| snippet(Some(n))),
            notes_text: notes.map(|n| normalized(n.strip_suffix(TRUNCATION_MARKER).unwrap_or(n))),
        });
    }
    Ok(SessionResumeSummary {
        session_id: source.session_id.clone(),
        head_sha: observed.remove(&ObservationKey::GitHeadSha),
        branch: observed.remove(&ObservationKey::GitBranch),
        tips,
    })
}

/// A tip as judged for a query: (tier, last activity, session, run, every criterion met, tip).
type Judged<'s> = (
    WhyMatched,
    u64,
    &'s SessionId,
    &'s RunId,
    Vec<WhyMatched>,
    &'s TipSummary,
);

/// Ranks the run tips of `summaries` for `query` (locks §2.3): tiers in order (HEAD sha, branch
/// prefix, notes, workflow id or name, recency), most recent first within a tier, at most
/// [`RESUME_MAX_CANDIDATES`].
pub fn rank_summaries(summaries: &[&SessionResumeSummary], query: &ResumeQuery) -> Vec<RankedTip> {
    let query_tokens = query.text.as_deref().map(text_tokens).unwrap_or_default();
    let covers =
        |corpus: &BTreeSet<String>| !query_tokens.is_empty() && query_tokens.is_subset(corpus);
    // Judge every tip without copying anything; only the best few become `RankedTip`s.
    let mut judged: Vec<Judged<'_>> = Vec::new();
    for summary in summaries {
        let head_sha =
            non_empty(&query.git_head_sha).is_some_and(|q| summary.head_sha.as_deref() == Some(q));
        let branch = non_empty(&query.git_branch)
            .is_some_and(|q| summary.branch.as_deref().is_some_and(|b| b.starts_with(q)));
        for tip in &summary.tips {
            // Notes are split only when the query has text to match.
            let notes_hit = !query_tokens.is_empty()
                && tip.notes_text.as_deref().is_some_and(|n| {
                    query_tokens
                        .iter()
                        .all(|q| split_tokens(n).any(|t| t == q.as_str()))
                });
            let mut why_matched: Vec<WhyMatched> = [
                (head_sha, WhyMatched::MatchedHeadSha),
                (branch, WhyMatched::MatchedBranch),
                (notes_hit, WhyMatched::MatchedNotes),
                (covers(&tip.workflow.tokens), WhyMatched::MatchedWorkflowId),
            ]
            .into_iter()
            .filter_map(|(hit, why)| hit.then_some(why))
            .collect();
            if why_matched.is_empty() {
                why_matched.push(WhyMatched::RecencyFallback);
            }
            judged.push((
                why_matched[0],
                tip.last_activity,
                &summary.session_id,
                &tip.run_id,
                why_matched,
                tip,
            ));
        }
    }
    // WhyMatched is declared in tier order, so the first criterion met is the tier.
    // TEST-ONLY planted bug (feature `test-mutations`): the oldest tip first within a tier.
    let oldest_first = super::dag::planted(super::PlantedProjectionBug::ResumeOldestFirst);
    let order = |a: &Judged<'_>, b: &Judged<'_>| {
        let recency = if oldest_first {
            a.1.cmp(&b.1)
        } else {
            b.1.cmp(&a.1)
        };
        a.0.cmp(&b.0)
            .then(recency)
            .then_with(|| a.2.cmp(b.2))
            .then_with(|| a.3.cmp(b.3))
    };
    if judged.len() > RESUME_MAX_CANDIDATES {
        judged.select_nth_unstable_by(RESUME_MAX_CANDIDATES, order);
        judged.truncate(RESUME_MAX_CANDIDATES);
    }
    judged.sort_by(order);
    judged
        .into_iter()
        .map(|(_, _, session_id, _, why_matched, tip)| RankedTip {
            session_id: session_id.clone(),
            run_id: tip.run_id.clone(),
            node_id: tip.node_id.clone(),
            workflow_id: tip.workflow.workflow_id.clone(),
            workflow_hash: tip.workflow.workflow_hash.clone(),
            last_activity: tip.last_activity,
            why_matched,
            notes: tip.notes_snippet.clone(),
        })
        .collect()
}

//! `resume_session`: find the run tip a brand-new chat means, from durable truth only (locks
//! §2.3; contract "Brand new chat resumption").
//!
//! Read-only: it loads every session, keeps the `healthy` ones (the others are counted, never
//! offered), ranks their run tips ([`crate::projections::resume`]) and describes the best five
//! with a freshly minted state token each, so `continue_workflow` with that token alone
//! rehydrates the run. The git fields are never filled in from the server's own directory:
//! every session started in the same repository would match, burying a text query.

use std::collections::HashMap;
use std::sync::Arc;

use workrail_spec::closed::RunStatus;
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::event::GitSha1;
use workrail_spec::ids::{EventIndex, RunId, SessionId, SnapshotRef, WorkflowHash};
use workrail_spec::token::{StatePayload, TokenPayload};
use workrail_spec::tools::{
    ResumeCandidateView, ResumePendingView, ResumeSessionInput, ResumeSessionOutput,
    SkippedSessionView,
};

use super::facts::Facts;
use super::{Workrail, invariant, run_label, store_envelope};
use crate::projections::resume::{
    RankedTip, ResumeQuery, ResumeSource, SessionResumeSummary, rank_summaries, snippet, summarize,
};
use crate::store::{SessionRead, StoreError, layout};

/// A session's resume summary and the `manifest.jsonl` length it was made at: the manifest is
/// append-only, so while its length is unchanged the summary is current (a view with a torn
/// tail is never indexed: a cut tail may be replaced by a record of the same length).
#[derive(Debug)]
pub(crate) struct IndexedSummary {
    manifest_len: u64,
    summary: SessionResumeSummary,
    /// Per run: what describing its tip needs from the session (so describing a candidate
    /// loads nothing but the two objects it checks).
    tips: HashMap<RunId, TipFacts>,
}

/// What describing a run tip needs from its session, fixed while the session is unchanged.
#[derive(Debug)]
struct TipFacts {
    snapshot_ref: SnapshotRef,
    status: RunStatus,
}

/// The summary of `id` as its session is now, from the index when its manifest did not change;
/// `Err` says why the session is not a candidate (`None`: no session at all).
fn summary_of(
    wr: &Workrail,
    id: &SessionId,
    workflow_name: &mut dyn FnMut(&WorkflowHash) -> Option<String>,
) -> Result<Arc<IndexedSummary>, Option<(&'static str, Option<&'static str>)>> {
    let len = wr
        .sessions
        .fs()
        .len(&layout::manifest_path(id))
        .map_err(|_| Some(("unreadable", None)))?;
    if let Some(indexed) = wr.resume_index.get(id)
        && Some(indexed.manifest_len) == len
    {
        return Ok(indexed);
    }
    let loaded = match wr.sessions.load(id) {
        Ok(loaded) if loaded.health.is_healthy() => loaded,
        // A directory without committed truth is not a session.
        Err(StoreError::NotFound { .. }) => return Err(None),
        // Corrupt, of an unknown version, or unreadable: never a candidate (L-RESUME-HEALTHY-ONLY).
        Ok(loaded) => {
            return Err(Some((
                loaded.health.kind().as_str(),
                loaded.health.corruption().map(|c| c.reason.as_str()),
            )));
        }
        Err(StoreError::Locked { .. }) => return Err(Some(("locked", None))),
        Err(_) => return Err(Some(("unreadable", None))),
    };
    let facts = Facts::new(&loaded.events);
    let summary = summarize(
        &ResumeSource {
            session_id: &loaded.session_id,
            events: &loaded.events,
            projection: &facts.projection,
        },
        workflow_name,
    );
    let mut tips = HashMap::new();
    for tip in &summary.tips {
        let (Some(view), Some(node)) = (
            facts.run(&tip.run_id),
            facts.node(&tip.run_id, &tip.node_id),
        ) else {
            continue;
        };
        let is_complete = wr
            .snapshots
            .get_shared(&node.snapshot_ref)
            .is_ok_and(|s| s.engine_payload.engine_state.is_complete());
        let autonomy = facts.preferences(&tip.run_id, &tip.node_id).autonomy;
        tips.insert(
            tip.run_id.clone(),
            TipFacts {
                snapshot_ref: node.snapshot_ref.clone(),
                status: view.status(|_| is_complete, autonomy),
            },
        );
    }
    let indexed = Arc::new(IndexedSummary {
        manifest_len: loaded.manifest_file_bytes,
        summary,
        tips,
    });
    if loaded.manifest_file_bytes == loaded.manifest_committed_bytes {
        let bytes = indexed.summary.estimated_bytes();
        wr.resume_index
            .insert(id.clone(), Arc::clone(&indexed), bytes);
    }
    Ok(indexed)
}

pub(super) fn resume_session(
    wr: &Workrail,
    input: ResumeSessionInput,
) -> Result<ResumeSessionOutput, ErrorEnvelope> {
    let query = query_of(input)?;
    let mut names: HashMap<WorkflowHash, Option<String>> = HashMap::new();
    let mut workflow_name = |hash: &WorkflowHash| {
        names
            .entry(hash.clone())
            .or_insert_with(|| {
                wr.pinned
                    .get_shared(hash)
                    .ok()
                    .and_then(|c| c.body.name.clone())
            })
            .clone()
    };
    let mut summaries: Vec<Arc<IndexedSummary>> = Vec::new();
    let mut skipped = Skipped::default();
    for id in wr.sessions.list_sessions().map_err(store_envelope(false))? {
        match summary_of(wr, &id, &mut workflow_name) {
            Ok(indexed) => summaries.push(indexed),
            Err(None) => {}
            Err(Some((health, reason))) => skipped.add(&id, health, reason),
        }
    }
    let refs: Vec<&SessionResumeSummary> = summaries.iter().map(|s| &s.summary).collect();
    let ranked = rank_summaries(&refs, &query);
    let mut candidates = Vec::with_capacity(ranked.len());
    for tip in ranked {
        let session_id = tip.session_id.clone();
        let tip_facts = summaries
            .iter()
            .find(|s| s.summary.session_id == session_id)
            .and_then(|s| s.tips.get(&tip.run_id))
            .ok_or_else(|| invariant("a resume candidate names a run that was not summarized"))?;
        let described = describe(wr, tip_facts, tip);
        match described {
            Ok(candidate) => candidates.push(candidate),
            // An object that vanished or was damaged after load: this session is left out,
            // never the whole answer (one bad session never breaks a call about another).
            Err(e) if e.code == ErrorCode::StoreCorruptionDetected => {
                skipped.add(&session_id, "corrupt_tail", Some("object_unreadable"));
            }
            Err(e) if matches!(e.code, ErrorCode::StoreIoError | ErrorCode::SessionNotFound) => {
                skipped.add(&session_id, "unreadable", None);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(ResumeSessionOutput {
        candidates,
        skipped_unhealthy_sessions: skipped.count,
        skipped_sessions: skipped.named,
    })
}

/// Most skipped sessions a response names (all are counted).
const MAX_NAMED_SKIPPED: usize = 20;

/// The sessions left out, counted, and named up to [`MAX_NAMED_SKIPPED`].
#[derive(Default)]
struct Skipped {
    count: u64,
    named: Vec<SkippedSessionView>,
}

impl Skipped {
    fn add(&mut self, session: &workrail_spec::ids::SessionId, health: &str, reason: Option<&str>) {
        self.count += 1;
        if self.named.len() < MAX_NAMED_SKIPPED {
            self.named.push(SkippedSessionView {
                session_id: session.clone(),
                health: health.to_owned(),
                reason: reason.map(str::to_owned),
            });
        }
    }
}

/// The query, with a self-correcting error for a HEAD that can never match.
fn query_of(input: ResumeSessionInput) -> Result<ResumeQuery, ErrorEnvelope> {
    let query = input.query.unwrap_or_default();
    if let Some(sha) = query.git_head_sha.as_deref().filter(|s| !s.is_empty())
        && GitSha1::parse(sha).is_none()
    {
        let shown: String = sha.chars().take(64).collect();
        return Err(ErrorEnvelope::new(
            ErrorCode::ValidationError,
            format!(
                "resume_session: `query.gitHeadSha` must be a full commit id (40 lowercase hex characters), got {shown:?}; it is matched exactly, so an abbreviated or uppercase id never matches."
            ),
            "Pass the output of `git rev-parse HEAD` as query.gitHeadSha, or leave it out.",
            Retry::NotRetryable,
        )
        .with_details(serde_json::json!({"tool": "resume_session", "field": "query.gitHeadSha", "problem": "invalid_value"})));
    }
    Ok(ResumeQuery {
        text: query.text,
        git_head_sha: query.git_head_sha,
        git_branch: query.git_branch,
    })
}

/// The agent-facing view of a ranked tip, with a state token for it. Reads the tip's snapshot
/// and pinned workflow (cached, but a vanished file is noticed).
fn describe(
    wr: &Workrail,
    facts: &TipFacts,
    tip: RankedTip,
) -> Result<ResumeCandidateView, ErrorEnvelope> {
    let compiled = wr
        .pinned
        .get_shared(&tip.workflow_hash)
        .map_err(store_envelope(false))?;
    let snapshot = wr
        .snapshots
        .get_shared(&facts.snapshot_ref)
        .map_err(store_envelope(false))?;
    let state = &snapshot.engine_payload.engine_state;
    let is_complete = state.is_complete();
    let pending = state.pending_step().and_then(|p| {
        compiled.step(&p.step_id).map(|step| ResumePendingView {
            step_id: step.step_id.clone(),
            title: step.title.clone(),
        })
    });
    let status = facts.status;
    let state_token = wr.codec().mint(&TokenPayload::State(StatePayload {
        session_id: tip.session_id.clone(),
        run_id: tip.run_id.clone(),
        node_id: tip.node_id.clone(),
        workflow_hash: tip.workflow_hash.clone(),
    }));
    let last_activity = EventIndex::new(tip.last_activity)
        .ok_or_else(|| invariant("a tip's last activity is beyond the EventIndex range"))?;
    Ok(ResumeCandidateView {
        run_label: run_label(&compiled, &tip.run_id),
        snippet: snippet(tip.notes.as_deref()),
        session_id: tip.session_id,
        run_id: tip.run_id,
        node_id: tip.node_id,
        workflow_id: tip.workflow_id,
        status,
        pending,
        is_complete,
        why_matched: tip.why_matched,
        last_activity_event_index: last_activity,
        state_token,
    })
}

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

use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::event::GitSha1;
use workrail_spec::ids::{EventIndex, WorkflowHash};
use workrail_spec::token::{StatePayload, TokenPayload};
use workrail_spec::tools::{
    ResumeCandidateView, ResumePendingView, ResumeSessionInput, ResumeSessionOutput,
    SkippedSessionView,
};

use super::facts::Facts;
use super::{Workrail, invariant, run_label, store_envelope};
use crate::projections::resume::{RankedTip, ResumeQuery, ResumeSource, rank, snippet};
use crate::store::{LoadedSession, SessionRead, StoreError};

pub(super) fn resume_session(
    wr: &Workrail,
    input: ResumeSessionInput,
) -> Result<ResumeSessionOutput, ErrorEnvelope> {
    let query = query_of(input)?;
    let mut healthy: Vec<Arc<LoadedSession>> = Vec::new();
    let mut skipped = Skipped::default();
    for id in wr.sessions.list_sessions().map_err(store_envelope(false))? {
        match wr.sessions.load(&id) {
            Ok(loaded) if loaded.health.is_healthy() => healthy.push(loaded),
            // A directory without committed truth is not a session.
            Err(StoreError::NotFound { .. }) => {}
            // Corrupt, of an unknown version, or unreadable: never a candidate (L-RESUME-HEALTHY-ONLY).
            Ok(loaded) => skipped.add(
                &id,
                loaded.health.kind().as_str(),
                loaded.health.corruption().map(|c| c.reason.as_str()),
            ),
            Err(StoreError::Locked { .. }) => skipped.add(&id, "locked", None),
            Err(_) => skipped.add(&id, "unreadable", None),
        }
    }
    let facts: Vec<Facts<'_>> = healthy.iter().map(|l| Facts::new(&l.events)).collect();
    let sources: Vec<ResumeSource<'_>> = healthy
        .iter()
        .zip(&facts)
        .map(|(loaded, facts)| ResumeSource {
            session_id: &loaded.session_id,
            events: &loaded.events,
            projection: &facts.projection,
        })
        .collect();
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
    let ranked = rank(&sources, &mut workflow_name, &query);
    let mut candidates = Vec::with_capacity(ranked.len());
    for tip in ranked {
        let at = sources
            .iter()
            .position(|s| s.session_id == &tip.session_id)
            .ok_or_else(|| invariant("a resume candidate names a session that was not ranked"))?;
        let session_id = tip.session_id.clone();
        match describe(wr, &facts[at], tip) {
            Ok(candidate) => candidates.push(candidate),
            // An object that vanished or was damaged after load: this session is left out,
            // never the whole answer (one bad session never breaks a call about another).
            Err(e) if e.code == ErrorCode::StoreCorruptionDetected => {
                skipped.add(&session_id, "corrupt_tail", Some("object_unreadable"));
            }
            Err(e) if e.code == ErrorCode::StoreIoError => {
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

/// The agent-facing view of a ranked tip, with a state token for it.
fn describe(
    wr: &Workrail,
    facts: &Facts<'_>,
    tip: RankedTip,
) -> Result<ResumeCandidateView, ErrorEnvelope> {
    let view = facts
        .run(&tip.run_id)
        .ok_or_else(|| invariant("a resume candidate names a run its session does not have"))?;
    let node = facts
        .node(&tip.run_id, &tip.node_id)
        .ok_or_else(|| invariant("a resume candidate names a node its run does not have"))?;
    let compiled = wr
        .pinned
        .get(&tip.workflow_hash)
        .map_err(store_envelope(false))?;
    let state = wr
        .snapshots
        .get(&node.snapshot_ref)
        .map_err(store_envelope(false))?
        .engine_payload
        .engine_state;
    let is_complete = state.is_complete();
    let pending = state.pending_step().and_then(|p| {
        compiled.step(&p.step_id).map(|step| ResumePendingView {
            step_id: step.step_id.clone(),
            title: step.title.clone(),
        })
    });
    let autonomy = facts.preferences(&tip.run_id, &tip.node_id).autonomy;
    let status = view.status(|_| is_complete, autonomy);
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

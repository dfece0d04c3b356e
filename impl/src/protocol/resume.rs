//! `resume_session`: find the run tip a brand-new chat means, from durable truth only (locks
//! §2.3; contract "Brand new chat resumption").
//!
//! It changes no session: it summarizes every session, keeps the `healthy` ones (the others
//! are counted, never offered), ranks their run tips ([`crate::projections::resume`]) and
//! describes the best five with a freshly minted state token each, so `continue_workflow` with
//! that token alone rehydrates the run.
//!
//! A session's summary is reused while its `manifest.jsonl` keeps the length it was made at:
//! from this process's memory, else from the persisted index that the previous call of any
//! process wrote (`cache/resume-index.v1.jsonl`, decision D64, or on PostgreSQL the row
//! `derived.resume-index.v1`, D115; [`super::resume_index`]); only sessions found in neither
//! are loaded. The best candidates are always loaded and validated
//! before they are described (a summary read from disk never reaches a response), and the
//! ranking is redone until they all were, so only healthy sessions are offered. The git fields are never filled in from the server's own directory:
//! every session started in the same repository would match, burying a text query.

use std::borrow::Cow;
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

use super::resume_index::{self, Coverage, DiskIndex};
use super::{Workrail, invariant, run_label, store_envelope};
use crate::projections::resume::{
    RankedTip, ResumeQuery, ResumeSource, SessionResumeSummary, rank_summaries, snippet, summarize,
};
use crate::store::{SessionRead, StoreError};

/// A session's resume summary and the `manifest.jsonl` length it was made at: the manifest is
/// append-only, so while its length is unchanged the summary is current (a view with a torn
/// tail is never indexed: a cut tail may be replaced by a record of the same length).
#[derive(Debug)]
pub(crate) struct IndexedSummary {
    pub(super) manifest_len: u64,
    pub(super) summary: SessionResumeSummary,
    /// Per run: what describing its tip needs from the session (so describing a candidate
    /// loads nothing but the two objects it checks).
    pub(super) tips: Vec<(RunId, TipFacts)>,
    /// Made by this process from a session it loaded and validated; `false` for an entry read
    /// from the persisted index, which is validated before it is ever returned.
    pub(super) validated: bool,
}

impl IndexedSummary {
    fn tip(&self, run: &RunId) -> Option<&TipFacts> {
        self.tips.iter().find(|(r, _)| r == run).map(|(_, f)| f)
    }

    /// The same summary and facts (checking a persisted entry against its session).
    fn same_as(&self, other: &IndexedSummary) -> bool {
        self.manifest_len == other.manifest_len
            && self.summary == other.summary
            && self.tips.len() == other.tips.len()
            && self.tips.iter().all(|(run, f)| other.tip(run) == Some(f))
    }
}

/// What describing a run tip needs from its session, fixed while the session is unchanged.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct TipFacts {
    pub(super) snapshot_ref: SnapshotRef,
    pub(super) status: RunStatus,
}

/// Why a session is not a candidate: `None` when it is no session at all, else its health and
/// reason as `skippedSessions` names them.
type NotCandidate = Option<(&'static str, Option<&'static str>)>;

/// Loads and validates `id` as it is now and summarizes it, with whether the summary stays
/// current while the manifest keeps its length (not when the view had a torn tail: a cut tail
/// may be replaced by a record of the same length); `Err` says why the session is not a
/// candidate.
fn load_summary(
    wr: &Workrail,
    id: &SessionId,
    workflow_name: &mut dyn FnMut(&WorkflowHash) -> Option<String>,
) -> Result<(Arc<IndexedSummary>, bool), NotCandidate> {
    let loaded = match wr.store.load(id) {
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
    // The session just advanced is the one whose summary is stale: its kept projection is
    // extended by what was appended, so this call does not grow with the session's length.
    let Ok(facts) = wr.memo.facts_if_kept(id, loaded.events()) else {
        return Err(Some(("unreadable", None)));
    };
    let Ok(summary) = summarize(
        &ResumeSource {
            session_id: &loaded.session_id,
            projection: &facts.projection,
        },
        workflow_name,
        &mut |position| Ok::<_, StoreError>(facts.notes_at(position)?.map(Cow::into_owned)),
    ) else {
        return Err(Some(("unreadable", None)));
    };
    let mut tips = Vec::with_capacity(summary.tips.len());
    for tip in &summary.tips {
        let (Some(view), Some(node)) = (
            facts.run(&tip.run_id),
            facts.node(&tip.run_id, &tip.node_id),
        ) else {
            continue;
        };
        let is_complete = wr
            .store
            .snapshot(&node.snapshot_ref())
            .is_ok_and(|s| s.engine_payload.engine_state.is_complete());
        let autonomy = facts.preferences(&tip.run_id, &tip.node_id).autonomy;
        tips.push((
            tip.run_id.clone(),
            TipFacts {
                snapshot_ref: node.snapshot_ref(),
                status: view.status(|_| is_complete, autonomy),
            },
        ));
    }
    let indexed = Arc::new(IndexedSummary {
        manifest_len: loaded.manifest_file_bytes,
        summary,
        tips,
        validated: true,
    });
    let current_by_len = loaded.manifest_file_bytes == loaded.manifest_committed_bytes;
    if current_by_len {
        remember(wr, id, &indexed);
    }
    Ok((indexed, current_by_len))
}

/// Keeps `indexed` in this process's index.
fn remember(wr: &Workrail, id: &SessionId, indexed: &Arc<IndexedSummary>) {
    let bytes = indexed.summary.estimated_bytes();
    wr.resume_index
        .insert(id.clone(), Arc::clone(indexed), bytes);
}

/// One call's summaries: every session that looks healthy, with whether each may be kept on
/// disk (made from a view without a torn tail).
#[derive(Default)]
struct Summaries {
    list: Vec<(Arc<IndexedSummary>, bool)>,
}

impl Summaries {
    fn position(&self, id: &SessionId) -> Option<usize> {
        self.list
            .iter()
            .position(|(s, _)| s.summary.session_id == *id)
    }

    fn get(&self, id: &SessionId) -> Option<&Arc<IndexedSummary>> {
        self.position(id).map(|i| &self.list[i].0)
    }

    /// The summaries to keep on disk (with `validated_only`, only those this process made).
    fn persistable(&self, validated_only: bool) -> impl Iterator<Item = &Arc<IndexedSummary>> {
        self.list
            .iter()
            .filter(move |(s, keep)| *keep && (s.validated || !validated_only))
            .map(|(s, _)| s)
    }
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
                wr.store
                    .workflow(hash)
                    .ok()
                    .and_then(|c| c.body.name.clone())
            })
            .clone()
    };
    // The persisted index is read when this process's own index cannot cover every session
    // (a fresh process), beside the listing and the manifest lengths (the `stat`s, or the one
    // query). It lives with the sessions (D115): the data directory's file, or PostgreSQL's row
    // shared by every machine on the schema. A process without a summary yet starts the parse
    // before it lists, so the two overlap; the summaries will live on this thread.
    //
    // A session this process cannot keep a summary of (damaged, without committed truth, or with
    // a torn manifest tail) would otherwise make every call read the whole index again: the
    // index is not consulted again while the listing is the one the last call left out those
    // sessions from and the process still holds the summaries it had then.
    let last = *wr
        .resume_last_call
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let (ids, lengths, disk) = if wr.resume_index.is_empty() && last.is_none() {
        let list_and_stat = || wr.store.sessions_with_manifest_lengths();
        let (listed, disk) = std::thread::scope(|scope| {
            let helper = scope.spawn(list_and_stat);
            let disk = read_disk_index(wr);
            (helper.join().unwrap_or_else(|_| list_and_stat()), disk)
        });
        let (ids, lengths) = listed.map_err(store_envelope(false))?;
        (ids, lengths, Some(disk))
    } else {
        let ids = wr.store.list_sessions().map_err(store_envelope(false))?;
        let held = wr.resume_index.len();
        let known = last.is_some_and(|last| {
            last.listing == listing_of(&ids) && held + last.left_out >= ids.len()
        });
        if held < ids.len() && !known {
            let (lengths, disk) = std::thread::scope(|scope| {
                let helper = scope.spawn(|| wr.store.manifest_lengths(&ids));
                let disk = read_disk_index(wr);
                let lengths = helper
                    .join()
                    .unwrap_or_else(|_| wr.store.manifest_lengths(&ids));
                (lengths, disk)
            });
            (ids, lengths, Some(disk))
        } else {
            let lengths = wr.store.manifest_lengths(&ids);
            (ids, lengths, None)
        }
    };
    let mut summaries = Summaries {
        list: Vec::with_capacity(ids.len()),
    };
    let mut skipped = Skipped::default();
    let mut left_out = 0;
    for (id, len) in ids.iter().zip(lengths) {
        let Ok(len) = len else {
            skipped.add(id, "unreadable", None);
            left_out += 1;
            continue;
        };
        if let Some(indexed) = wr
            .resume_index
            .get(id)
            .filter(|s| Some(s.manifest_len) == len)
        {
            summaries.list.push((indexed, true));
            continue;
        }
        if let Some(entry) = len.and_then(|len| disk.as_ref()?.get(id, len)) {
            remember(wr, id, entry);
            summaries.list.push((Arc::clone(entry), true));
            continue;
        }
        match load_summary(wr, id, &mut workflow_name) {
            Ok(loaded) => {
                left_out += usize::from(!loaded.1);
                summaries.list.push(loaded);
            }
            Err(None) => left_out += 1,
            Err(Some((health, reason))) => {
                skipped.add(id, health, reason);
                left_out += 1;
            }
        }
    }
    if wr.resume_index.len() < ids.len() {
        *wr.resume_last_call
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(LastCall {
            listing: listing_of(&ids),
            left_out,
        });
    }
    // Rank; a best candidate read from the persisted index is first loaded and validated here
    // (L-RESUME-HEALTHY-ONLY), and the ranking is redone until every best candidate was. An
    // entry that does not match its session at the same manifest length means the index cannot
    // be trusted: none of its unchecked entries is written back.
    let mut distrust = false;
    let ranked = loop {
        let refs: Vec<&SessionResumeSummary> =
            summaries.list.iter().map(|(s, _)| &s.summary).collect();
        let ranked = rank_summaries(&refs, &query);
        let mut unchecked: Vec<SessionId> = ranked
            .iter()
            .filter(|t| summaries.get(&t.session_id).is_some_and(|s| !s.validated))
            .map(|t| t.session_id.clone())
            .collect();
        if unchecked.is_empty() {
            break ranked;
        }
        unchecked.dedup();
        for id in unchecked {
            let Some(at) = summaries.position(&id) else {
                continue;
            };
            let (old, _) = summaries.list.swap_remove(at);
            match load_summary(wr, &id, &mut workflow_name) {
                Ok((fresh, persistable)) => {
                    distrust |= old.manifest_len == fresh.manifest_len && !old.same_as(&fresh);
                    summaries.list.push((fresh, persistable));
                }
                Err(None) => {}
                Err(Some((health, reason))) => skipped.add(&id, health, reason),
            }
        }
    };
    let mut candidates = Vec::with_capacity(ranked.len());
    for tip in ranked {
        let session_id = tip.session_id.clone();
        let tip_facts = summaries
            .get(&session_id)
            .and_then(|s| s.tip(&tip.run_id))
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
    persist(wr, &summaries, disk.is_some(), skipped.count, distrust);
    Ok(ResumeSessionOutput {
        candidates,
        skipped_unhealthy_sessions: skipped.count,
        skipped_sessions: skipped.named,
    })
}

/// What the last call that could not cover every session from memory saw (see
/// `resume_session`).
#[derive(Debug, Clone, Copy)]
pub(super) struct LastCall {
    /// Which sessions were listed.
    listing: Coverage,
    /// How many of them it could keep no summary of.
    left_out: usize,
}

/// Which sessions `ids` lists, as a number (a collision costs at most a read of the index
/// skipped: a session it would have covered is loaded instead).
fn listing_of(ids: &[SessionId]) -> Coverage {
    let mut listing = Coverage::default();
    for id in ids {
        listing.add(id, 0);
    }
    listing
}

/// Reads the persisted index and remembers what it covers.
fn read_disk_index(wr: &Workrail) -> DiskIndex {
    let index = resume_index::read(&wr.store);
    *wr.resume_on_disk.lock().unwrap_or_else(|p| p.into_inner()) = Some(index.coverage);
    index
}

/// Writes the persisted index when it differs from what this call found (decision D64): best
/// effort, never in safe mode (a call that left any session out: the store holds damage, and a
/// read leaves it as it found it), never failing the call. With `distrust`, only
/// the summaries this process made itself are written (the next call loads and adds the rest).
fn persist(
    wr: &Workrail,
    summaries: &Summaries,
    read_this_call: bool,
    skipped: u64,
    distrust: bool,
) {
    if skipped > 0 {
        return;
    }
    let keep: Vec<&Arc<IndexedSummary>> = summaries.persistable(distrust).collect();
    let mut now = Coverage::default();
    for s in &keep {
        now.add(&s.summary.session_id, s.manifest_len);
    }
    let mut on_disk = wr.resume_on_disk.lock().unwrap_or_else(|p| p.into_inner());
    if on_disk.is_none() && !read_this_call {
        // This process never read the index (every session was in memory, or there is none).
        *on_disk = Some(resume_index::read(&wr.store).coverage);
    }
    if !distrust && *on_disk == Some(now) {
        return;
    }
    if let Err(e) = resume_index::write(&wr.store, &keep) {
        tracing::debug!("resume index not written (it is derived; the answer stands): {e}");
    }
    // Not retried before something changes, written or not.
    *on_disk = Some(now);
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
        .store
        .workflow(&tip.workflow_hash)
        .map_err(store_envelope(false))?;
    let snapshot = wr
        .store
        .snapshot(&facts.snapshot_ref)
        .map_err(store_envelope(false))?;
    let state = &snapshot.engine_payload.engine_state;
    let is_complete = state.is_complete();
    let pending = state.pending_step().and_then(|p| {
        compiled.step(&p.step_id).map(|step| ResumePendingView {
            step_id: step.step_id.clone(),
            title: crate::engine::render::title(step, &p.bindings),
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
    let mut label = run_label(&compiled, &tip.run_id);
    // A lane is a run of its own, found by its notes like any other; its label says whose lane
    // it is (decision D170), read only for a lane's workflow so other candidates load nothing.
    if super::lanes::is_lane_workflow(&compiled)
        && let Some(parent) = lane_parent(wr, &tip.session_id, &tip.run_id)
    {
        label = format!("{label}, {parent}");
    }
    Ok(ResumeCandidateView {
        run_label: label,
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

/// `lane 2 of "Fan #a1b2" (run run_…)` for a lane run of `session`: its index and its parent
/// run, from the lane's `run_started`. `None` for a run that is no lane, or when the session
/// cannot be read now (the candidate then keeps its plain label).
fn lane_parent(wr: &Workrail, session: &SessionId, run: &RunId) -> Option<String> {
    let loaded = wr.store.load(session).ok()?;
    // The projection holds every run's `run_started`: no pass over the log (D225).
    let facts = wr.memo.facts_if_kept(session, loaded.events()).ok()?;
    let started = |id: &RunId| facts.run(id).map(|view| &view.dag.started);
    let link = started(run)?.lane.as_ref()?;
    let parent = &link.parent_run_id;
    let parent_label = started(parent)
        .and_then(|r| wr.store.workflow(&r.workflow_hash).ok())
        .map_or_else(|| parent.to_string(), |c| run_label(&c, parent));
    Some(format!(
        "lane {} of \"{parent_label}\" (run {parent})",
        link.lane_index
    ))
}

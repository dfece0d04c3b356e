//! `resume_session`'s summaries kept between processes (decision D64): the file
//! `cache/resume-index.v1.jsonl` of the data directory, or on PostgreSQL the same bytes in the
//! row `resume-index.v1` of the table `derived`, shared by every process on the schema (D115).
//! Derived and never truth.
//!
//! JSON lines: a header `{"v":1,"sessions":n,"sha256":"<hex of every byte after the header
//! line>"}`, then the workflows `[[workflowId, workflowHash, [token, ...]], ...]`, then one line
//! per session: `[sessionId, manifestLen, headSha|null, branch|null, [[runId, nodeId, workflow
//! (an index into the workflows), lastActivity, notesSnippet|null, notesText|null, snapshotRef,
//! status], ...]]` (arrays rather than objects, each workflow once, and a line per session so
//! two threads parse halves: the first call of a fresh process parses this for every session).
//! An entry is used only while its session's `manifest.jsonl` has exactly `manifestLen` bytes
//! (the manifest is append-only, and every append adds a record; on PostgreSQL the length its
//! rows spell); anything else about the file (a missing or torn line, another
//! version, a digest or count that does not match, an entry that does not parse) discards the
//! whole file, and the next write replaces it. Entries are never trusted for what a response
//! shows: the sessions `resume_session` returns are loaded and validated first
//! (`impl/src/protocol/resume.rs`).
//!
//! Written whole, best effort: a temp file unique to the writer, then a rename over the old
//! file, no fsync (it is rebuildable); on PostgreSQL one upsert of the row. Concurrent writers
//! never tear it; the last one wins.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use workrail_spec::closed::RunStatus;
use workrail_spec::ids::{NodeId, RunId, SessionId, SnapshotRef, WorkflowHash, WorkflowId};

use super::resume::{IndexedSummary, TipFacts};
use crate::projections::resume::{SessionResumeSummary, TipSummary, TipWorkflow};
use crate::store::Store;

/// The format version; a file of any other version is discarded.
pub(crate) const RESUME_INDEX_VERSION: u64 = 1;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    v: u64,
    sessions: usize,
    sha256: String,
}

#[derive(Deserialize)]
struct WorkflowRow(WorkflowId, WorkflowHash, BTreeSet<String>);

#[derive(Deserialize)]
struct SessionRow(SessionId, u64, Option<String>, Option<String>, Vec<TipRow>);

#[derive(Deserialize)]
struct TipRow(
    RunId,
    NodeId,
    usize,
    u64,
    Option<String>,
    Option<String>,
    SnapshotRef,
    RunStatus,
);

/// Which sessions at which manifest lengths a set of summaries covers, as a number that does
/// not depend on their order (it only decides whether the file is written again: any content
/// is sound, so a collision costs at most a skipped rewrite).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Coverage {
    count: usize,
    sum: u64,
}

impl Coverage {
    pub fn add(&mut self, id: &SessionId, manifest_len: u64) {
        let mut hasher = std::hash::DefaultHasher::new();
        id.as_str().hash(&mut hasher);
        manifest_len.hash(&mut hasher);
        self.count += 1;
        self.sum = self.sum.wrapping_add(hasher.finish());
    }
}

/// What the file holds: its entries by session, and what they cover.
#[derive(Debug, Default)]
pub(crate) struct DiskIndex {
    pub entries: HashMap<SessionId, Arc<IndexedSummary>>,
    pub coverage: Coverage,
}

impl DiskIndex {
    /// The entry of `id` when it was made at manifest length `len`.
    pub fn get(&self, id: &SessionId, len: u64) -> Option<&Arc<IndexedSummary>> {
        self.entries.get(id).filter(|e| e.manifest_len == len)
    }
}

/// Reads the persisted index (the data directory's file, or PostgreSQL's row: D115); an absent,
/// unreadable, damaged or other-version index reads as empty (L-CACHE-DISCARD: it is rebuilt
/// by the next write).
pub(crate) fn read(store: &Store) -> DiskIndex {
    let bytes = match store.read_resume_index() {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return DiskIndex::default(),
        Err(e) => {
            tracing::debug!("resume index unreadable, ignored: {e}");
            return DiskIndex::default();
        }
    };
    parse(&bytes).unwrap_or_else(|why| {
        tracing::debug!("resume index discarded: {why}");
        DiskIndex::default()
    })
}

fn parse(bytes: &[u8]) -> Result<DiskIndex, &'static str> {
    let split = bytes
        .iter()
        .position(|b| *b == b'\n')
        .ok_or("no header line")?;
    let header: Header = serde_json::from_slice(&bytes[..split]).map_err(|_| "bad header")?;
    if header.v != RESUME_INDEX_VERSION {
        return Err("another version");
    }
    let rest = &bytes[split + 1..];
    if workrail_spec::jcs::sha256(rest).hex() != header.sha256 {
        return Err("digest mismatch");
    }
    let mut lines = rest
        .strip_suffix(b"\n")
        .ok_or("torn last line")?
        .split(|b| *b == b'\n');
    let workflows: Vec<WorkflowRow> =
        serde_json::from_slice(lines.next().ok_or("no workflows line")?)
            .map_err(|_| "bad workflows")?;
    let workflows: Vec<Arc<TipWorkflow>> = workflows
        .into_iter()
        .map(|WorkflowRow(workflow_id, workflow_hash, tokens)| {
            Arc::new(TipWorkflow {
                workflow_id,
                workflow_hash,
                tokens,
            })
        })
        .collect();
    let lines: Vec<&[u8]> = lines.collect();
    if lines.len() != header.sessions {
        return Err("session count mismatch");
    }
    let (first, second) = lines.split_at(lines.len() / 2);
    let (a, b) = if lines.len() < 512 {
        (
            parse_sessions(first, &workflows),
            parse_sessions(second, &workflows),
        )
    } else {
        std::thread::scope(|scope| {
            let helper = scope.spawn(|| parse_sessions(second, &workflows));
            let a = parse_sessions(first, &workflows);
            (a, helper.join().unwrap_or(Err("parser thread failed")))
        })
    };
    let mut index = DiskIndex {
        entries: HashMap::with_capacity(lines.len()),
        coverage: Coverage::default(),
    };
    for entry in a?.into_iter().chain(b?) {
        index
            .coverage
            .add(&entry.summary.session_id, entry.manifest_len);
        index
            .entries
            .insert(entry.summary.session_id.clone(), entry);
    }
    Ok(index)
}

/// The entries of these session lines.
fn parse_sessions(
    lines: &[&[u8]],
    workflows: &[Arc<TipWorkflow>],
) -> Result<Vec<Arc<IndexedSummary>>, &'static str> {
    let mut out = Vec::with_capacity(lines.len());
    for line in lines {
        let SessionRow(session_id, manifest_len, head_sha, branch, rows) =
            serde_json::from_slice(line).map_err(|_| "bad session line")?;
        let mut tips = Vec::with_capacity(rows.len());
        let mut facts = Vec::with_capacity(rows.len());
        for TipRow(
            run_id,
            node_id,
            w,
            last_activity,
            notes_snippet,
            notes_text,
            snapshot_ref,
            status,
        ) in rows
        {
            let workflow = workflows.get(w).ok_or("unknown workflow")?;
            facts.push((
                run_id.clone(),
                TipFacts {
                    snapshot_ref,
                    status,
                },
            ));
            tips.push(TipSummary {
                run_id,
                node_id,
                workflow: Arc::clone(workflow),
                last_activity,
                notes_snippet,
                notes_text,
            });
        }
        out.push(Arc::new(IndexedSummary {
            manifest_len,
            summary: SessionResumeSummary {
                session_id,
                head_sha,
                branch,
                tips,
            },
            tips: facts,
            validated: false,
        }));
    }
    Ok(out)
}

/// The file's bytes for these summaries.
fn render(summaries: &[&Arc<IndexedSummary>]) -> Result<Vec<u8>, serde_json::Error> {
    type TipRef<'a> = (
        &'a RunId,
        &'a NodeId,
        usize,
        u64,
        &'a Option<String>,
        &'a Option<String>,
        &'a SnapshotRef,
        RunStatus,
    );
    type SessionRef<'a> = (
        &'a SessionId,
        u64,
        &'a Option<String>,
        &'a Option<String>,
        Vec<TipRef<'a>>,
    );
    let mut workflows: Vec<&TipWorkflow> = Vec::new();
    let mut sessions: Vec<SessionRef<'_>> = Vec::with_capacity(summaries.len());
    for s in summaries {
        let mut tips = Vec::with_capacity(s.summary.tips.len());
        for tip in &s.summary.tips {
            let Some((_, facts)) = s.tips.iter().find(|(run, _)| *run == tip.run_id) else {
                continue;
            };
            let w = match workflows.iter().position(|w| **w == *tip.workflow) {
                Some(w) => w,
                None => {
                    workflows.push(&tip.workflow);
                    workflows.len() - 1
                }
            };
            tips.push((
                &tip.run_id,
                &tip.node_id,
                w,
                tip.last_activity,
                &tip.notes_snippet,
                &tip.notes_text,
                &facts.snapshot_ref,
                facts.status,
            ));
        }
        sessions.push((
            &s.summary.session_id,
            s.manifest_len,
            &s.summary.head_sha,
            &s.summary.branch,
            tips,
        ));
    }
    let workflows: Vec<_> = workflows
        .iter()
        .map(|w| (&w.workflow_id, &w.workflow_hash, &w.tokens))
        .collect();
    let mut body = serde_json::to_vec(&workflows)?;
    body.push(b'\n');
    for session in &sessions {
        serde_json::to_writer(&mut body, session)?;
        body.push(b'\n');
    }
    let header = Header {
        v: RESUME_INDEX_VERSION,
        sessions: sessions.len(),
        sha256: workrail_spec::jcs::sha256(&body).hex().to_owned(),
    };
    let mut bytes = serde_json::to_vec(&header)?;
    bytes.push(b'\n');
    bytes.extend_from_slice(&body);
    Ok(bytes)
}

/// Replaces the persisted index with these summaries, whole ([`Store::write_resume_index`]: a
/// temp file and a rename, or one upsert of the row). The caller ignores a failure (the index
/// is derived).
pub(crate) fn write(
    store: &Store,
    summaries: &[&Arc<IndexedSummary>],
) -> Result<(), std::io::Error> {
    let bytes = render(summaries).map_err(std::io::Error::other)?;
    store.write_resume_index(&bytes)
}

//! `resume_session`'s summaries kept on disk between processes (decision D64): the file
//! `cache/resume-index.v1.jsonl` of the data directory, derived and never truth.
//!
//! Two lines: a header `{"v":1,"entries":n,"sha256":"<hex of line 2>"}` and a JSON array of
//! the entries, each a session's resume summary, the facts describing its tips needs, and the
//! `manifest.jsonl` length it was made at. The manifest is append-only, so an entry is used
//! only while its session's manifest has exactly that length; anything else about the file (a
//! missing or torn line, another version, a digest or count that does not match, an entry that
//! does not parse) discards the whole file, and the next write replaces it. Entries are never
//! trusted for what a response shows: the sessions `resume_session` returns are loaded and
//! validated first (`impl/src/protocol/resume.rs`).
//!
//! Written whole, best effort: a temp file unique to the writer, then a rename over the old
//! file, no fsync (it is rebuildable). Concurrent writers never tear it; the last rename wins.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use workrail_spec::closed::RunStatus;
use workrail_spec::ids::{RunId, SessionId, SnapshotRef};

use super::resume::{IndexedSummary, TipFacts};
use crate::projections::resume::SessionResumeSummary;
use crate::store::fs::StoreFs;
use crate::store::layout;

/// The format version; a file of any other version is discarded.
pub(crate) const RESUME_INDEX_VERSION: u64 = 1;

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    v: u64,
    entries: usize,
    sha256: String,
}

/// One session in the file.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Entry {
    manifest_len: u64,
    summary: SessionResumeSummary,
    /// Per run tip: its run, the snapshot of its node and its status.
    tips: Vec<(RunId, SnapshotRef, RunStatus)>,
}

/// What the file holds, by session: usable entries, and the manifest length of each (what a
/// writer compares its own view with, so an unchanged index is never written again).
#[derive(Debug, Default)]
pub(crate) struct DiskIndex {
    pub entries: HashMap<SessionId, IndexedSummary>,
    pub lengths: HashMap<SessionId, u64>,
}

impl DiskIndex {
    /// The entry of `id` when it was made at manifest length `len` (taken out: each entry is
    /// used once per call).
    pub fn take(&mut self, id: &SessionId, len: u64) -> Option<IndexedSummary> {
        match self.entries.remove(id) {
            Some(entry) if entry.manifest_len == len => Some(entry),
            _ => None,
        }
    }
}

/// Reads the index file; an absent, unreadable, damaged or other-version file reads as empty
/// (L-CACHE-DISCARD: it is rebuilt by the next write).
pub(crate) fn read(fs: &dyn StoreFs) -> DiskIndex {
    let bytes = match fs.read(Path::new(layout::RESUME_INDEX_FILE)) {
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
    let body = bytes[split + 1..]
        .strip_suffix(b"\n")
        .ok_or("torn body line")?;
    if workrail_spec::jcs::sha256(body).hex() != header.sha256 {
        return Err("digest mismatch");
    }
    let entries: Vec<Entry> = serde_json::from_slice(body).map_err(|_| "bad entries")?;
    if entries.len() != header.entries {
        return Err("entry count mismatch");
    }
    let mut index = DiskIndex {
        entries: HashMap::with_capacity(entries.len()),
        lengths: HashMap::with_capacity(entries.len()),
    };
    for entry in entries {
        let id = entry.summary.session_id.clone();
        let tips = entry
            .tips
            .into_iter()
            .map(|(run, snapshot_ref, status)| {
                (
                    run,
                    TipFacts {
                        snapshot_ref,
                        status,
                    },
                )
            })
            .collect();
        index.lengths.insert(id.clone(), entry.manifest_len);
        index.entries.insert(
            id,
            IndexedSummary {
                manifest_len: entry.manifest_len,
                summary: entry.summary,
                tips,
                validated: false,
            },
        );
    }
    Ok(index)
}

/// The file's bytes for these summaries.
fn render(summaries: &[&Arc<IndexedSummary>]) -> Result<Vec<u8>, serde_json::Error> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct EntryRef<'a> {
        manifest_len: u64,
        summary: &'a SessionResumeSummary,
        tips: Vec<(&'a RunId, &'a SnapshotRef, RunStatus)>,
    }
    let entries: Vec<EntryRef<'_>> = summaries
        .iter()
        .map(|s| {
            let mut tips: Vec<_> = s
                .tips
                .iter()
                .map(|(run, facts)| (run, &facts.snapshot_ref, facts.status))
                .collect();
            tips.sort_by(|a, b| a.0.cmp(b.0));
            EntryRef {
                manifest_len: s.manifest_len,
                summary: &s.summary,
                tips,
            }
        })
        .collect();
    let body = serde_json::to_vec(&entries)?;
    let header = Header {
        v: RESUME_INDEX_VERSION,
        entries: entries.len(),
        sha256: workrail_spec::jcs::sha256(&body).hex().to_owned(),
    };
    let mut bytes = serde_json::to_vec(&header)?;
    bytes.push(b'\n');
    bytes.extend_from_slice(&body);
    bytes.push(b'\n');
    Ok(bytes)
}

/// Replaces the index file with these summaries: a temp file unique to this writer, then a
/// rename (atomic), no fsync. The caller ignores a failure (the file is derived).
pub(crate) fn write(
    fs: &dyn StoreFs,
    summaries: &[&Arc<IndexedSummary>],
) -> Result<(), std::io::Error> {
    let bytes = render(summaries).map_err(std::io::Error::other)?;
    let dir = Path::new(layout::DATA_CACHE_DIR);
    fs.create_dir_all(dir)?;
    let final_name = Path::new(layout::RESUME_INDEX_FILE)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("resume-index");
    let tmp = dir.join(layout::temp_file_name(final_name));
    let written = fs
        .write_new(&tmp, &bytes)
        .and_then(|()| fs.rename(&tmp, Path::new(layout::RESUME_INDEX_FILE)));
    if written.is_err() {
        let _ = fs.remove_file(&tmp);
    }
    written
}

//! `workrail repair`: the explicit, audited recovery of a session whose last transaction is
//! attested but lacks some of its snapshot pins (decision D51).
//!
//! Since close and pins are one write (D49), that state only comes from a write torn by a power
//! cut (or from an older WorkRail that wrote them apart). Load never repairs it (locks §1: no
//! pin-on-load repair); this command does, on request, and only when it is provably the same
//! truth: every missing pin belongs to the manifest's last `segment_closed`, nothing but that
//! segment's own pins follows it, and every snapshot to pin is in the CAS and hashes to its
//! address. Anything else is refused with what is missing named.

use workrail_spec::event::SessionEvent;
use workrail_spec::ids::{EventIndex, ManifestIndex, SessionId, SnapshotRef};
use workrail_spec::jcs::to_canonical_string;
use workrail_spec::manifest::{ManifestRecord, SnapshotPinned};

use super::error::{Committed, StoreError};
use super::fs::StoreFs;
use super::health::{CorruptionReason, SessionHealth};
use super::layout;
use super::load::introduced_snapshots;
use super::session::SessionStore;

/// What `repair` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairOutcome {
    /// The session was healthy; nothing was written (a torn, uncommitted tail may have been cut).
    AlreadyHealthy { cut_torn_bytes: u64 },
    /// The missing pins were appended; the session is healthy again.
    Repaired {
        /// Each appended pin: the snapshot and the `node_created` that introduced it.
        pinned: Vec<(SnapshotRef, EventIndex)>,
        cut_torn_bytes: u64,
    },
}

fn refused(session: &SessionId, reason: impl Into<String>) -> StoreError {
    StoreError::RepairRefused {
        session: session.clone(),
        reason: reason.into(),
    }
}

impl SessionStore {
    /// Appends the snapshot pins the last transaction of `session` lacks, under the session's
    /// exclusive lock, after `verify` has checked every snapshot to pin (present in the CAS,
    /// hashing to its address). Refuses anything that is not exactly that state.
    pub fn repair_missing_pins(
        &self,
        session: &SessionId,
        verify: &dyn Fn(&SnapshotRef) -> Result<(), StoreError>,
    ) -> Result<RepairOutcome, StoreError> {
        self.with_exclusive_lock(session, || self.repair_locked(session, verify))
    }

    fn repair_locked(
        &self,
        session: &SessionId,
        verify: &dyn Fn(&SnapshotRef) -> Result<(), StoreError>,
    ) -> Result<RepairOutcome, StoreError> {
        let fs: &dyn StoreFs = &**self.fs();
        let manifest_path = layout::manifest_path(session);
        let io = |op: &'static str| {
            let path = manifest_path.clone();
            move |e: std::io::Error| {
                StoreError::write(Some(session), op, &path, &e, Committed::Nothing)
            }
        };
        let bytes = fs
            .read(&manifest_path)
            .map_err(io("read the manifest"))?
            .ok_or_else(|| {
                refused(
                    session,
                    "it has no manifest.jsonl, so there is nothing to repair",
                )
            })?;
        // Only newline-terminated lines are records; a torn last line is cut first.
        let committed_len = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let cut_torn_bytes = (bytes.len() - committed_len) as u64;
        let cut_torn_tail = || -> Result<(), StoreError> {
            if cut_torn_bytes > 0 {
                fs.set_len(&manifest_path, committed_len as u64)
                    .and_then(|()| fs.sync_file(&manifest_path))
                    .map_err(io("cut the torn manifest tail"))?;
            }
            Ok(())
        };
        let loaded = self.load_fresh(session)?;
        let corruption = match &loaded.health {
            SessionHealth::Healthy => {
                cut_torn_tail()?;
                self.forget_cached(session);
                return Ok(RepairOutcome::AlreadyHealthy { cut_torn_bytes });
            }
            SessionHealth::UnknownVersion(_) => {
                return Err(refused(
                    session,
                    "it was written by a newer WorkRail (unknown_version); open it with that version",
                ));
            }
            SessionHealth::CorruptTail(c) | SessionHealth::CorruptHead(c) => c.clone(),
        };
        if corruption.reason != CorruptionReason::MissingSnapshotPins {
            return Err(refused(
                session,
                format!(
                    "its damage is {} at manifest record {} ({}), not missing snapshot pins; export its validated prefix (`workrail export {session} -o bundle.json`) and import it with `workrail import bundle.json --allow-salvage`",
                    corruption.reason, corruption.manifest_index, corruption.detail
                ),
            ));
        }
        let text = std::str::from_utf8(&bytes[..committed_len])
            .map_err(|_| refused(session, "its manifest is not UTF-8"))?;
        let mut records = Vec::new();
        for (n, line) in text.split_terminator('\n').enumerate() {
            records.push(ManifestRecord::from_json_str(line).map_err(|e| {
                refused(
                    session,
                    format!("manifest line {} does not parse: {e}", n + 1),
                )
            })?);
        }
        let Some(last_close_at) = records
            .iter()
            .rposition(|r| matches!(r, ManifestRecord::SegmentClosed(_)))
        else {
            return Err(refused(session, "its manifest attests no segment"));
        };
        let ManifestRecord::SegmentClosed(last_close) = &records[last_close_at] else {
            return Err(refused(
                session,
                "its last segment record is not a segment_closed",
            ));
        };
        let segment_path = layout::session_dir(session).join(&last_close.segment_rel_path);
        let segment = fs
            .read(&segment_path)
            .map_err(io("read the last segment"))?
            .ok_or_else(|| {
                refused(
                    session,
                    format!(
                        "its last segment {} is missing",
                        last_close.segment_rel_path
                    ),
                )
            })?;
        let events: Vec<SessionEvent> = std::str::from_utf8(&segment)
            .ok()
            .and_then(|t| {
                t.split_terminator('\n')
                    .map(|l| SessionEvent::from_json_str(l).ok())
                    .collect()
            })
            .ok_or_else(|| {
                refused(
                    session,
                    format!(
                        "its last segment {} does not parse",
                        last_close.segment_rel_path
                    ),
                )
            })?;
        // Pins already recorded for that segment; anything else after it is not ours to judge.
        let mut pinned: Vec<&SnapshotRef> = Vec::new();
        for record in &records[last_close_at + 1..] {
            match record {
                ManifestRecord::SnapshotPinned(p) => pinned.push(&p.snapshot_ref),
                ManifestRecord::SegmentClosed(_) => {
                    return Err(refused(
                        session,
                        "a segment follows the one missing its pins",
                    ));
                }
            }
        }
        let earlier_pins: Vec<&SnapshotRef> = records[..last_close_at]
            .iter()
            .filter_map(|r| match r {
                ManifestRecord::SnapshotPinned(p) => Some(&p.snapshot_ref),
                ManifestRecord::SegmentClosed(_) => None,
            })
            .collect();
        let mut missing: Vec<(SnapshotRef, &SessionEvent)> = Vec::new();
        for (snapshot, i) in introduced_snapshots(&events) {
            if earlier_pins.contains(&&snapshot)
                || pinned.contains(&&snapshot)
                || missing.iter().any(|(s, _)| s == &snapshot)
            {
                continue;
            }
            missing.push((snapshot, &events[i]));
        }
        if missing.is_empty() {
            return Err(refused(
                session,
                "load reports missing pins, but every snapshot of the last segment is pinned; export its validated prefix with `workrail export` and import it with `workrail import --allow-salvage`",
            ));
        }
        let mut unverifiable = Vec::new();
        for (snapshot, _) in &missing {
            if let Err(e) = verify(snapshot) {
                unverifiable.push(format!("{snapshot} ({e})"));
            }
        }
        if !unverifiable.is_empty() {
            return Err(refused(
                session,
                format!(
                    "these snapshots are not in the snapshot store intact, so pinning them would attest truth that is gone: {}; export its validated prefix (`workrail export {session} -o bundle.json`) and import it with `workrail import bundle.json --allow-salvage`",
                    unverifiable.join(", ")
                ),
            ));
        }
        let mut lines = String::new();
        let mut appended = Vec::new();
        for (n, (snapshot, event)) in missing.iter().enumerate() {
            let index = ManifestIndex::new((records.len() + n) as u64)
                .ok_or_else(|| refused(session, "manifestIndex would exceed 2^53-1"))?;
            let pin = ManifestRecord::SnapshotPinned(SnapshotPinned {
                manifest_index: index,
                session_id: session.clone(),
                event_index: event.event_index(),
                snapshot_ref: snapshot.clone(),
                created_by_event_id: event.event_id().clone(),
            });
            let mut line = to_canonical_string(&pin).map_err(|e| StoreError::Internal {
                detail: format!("a pin record is not canonicalizable: {e}"),
            })?;
            line.push('\n');
            lines.push_str(&line);
            appended.push((snapshot.clone(), event.event_index()));
        }
        cut_torn_tail()?;
        if let Err(e) = fs
            .append(&manifest_path, lines.as_bytes())
            .and_then(|()| fs.sync_file(&manifest_path))
        {
            let undone = fs
                .set_len(&manifest_path, committed_len as u64)
                .and_then(|()| fs.sync_file(&manifest_path));
            let committed = if undone.is_ok() {
                Committed::Nothing
            } else {
                Committed::Unknown
            };
            return Err(StoreError::write(
                Some(session),
                "append the missing pins",
                &manifest_path,
                &e,
                committed,
            ));
        }
        self.forget_cached(session);
        let after = self.load_fresh(session)?;
        if !after.health.is_healthy() {
            return Err(StoreError::Internal {
                detail: format!(
                    "session {session} is still not healthy after its missing pins were appended: {:?}",
                    after.health
                ),
            });
        }
        Ok(RepairOutcome::Repaired {
            pinned: appended,
            cut_torn_bytes,
        })
    }
}

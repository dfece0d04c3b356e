//! Loading a session: validate the control stream and the segments it attests, stop at the last
//! valid entry, and classify what was found (locks §1 "Integrity + recovery", §10).
//!
//! Only newline-terminated manifest lines are records: a final line without its newline is the
//! trace of an append that never completed its fsync, so it is not truth (the writer truncates it
//! before its next append). Segments are read only when a `segment_closed` record attests them;
//! orphan segment files are never opened. The validated prefix always ends at a transaction
//! boundary: a segment counts only together with the pins of the snapshots it introduced.

use std::borrow::Cow;
use std::collections::HashSet;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::io;

use hashbrown::HashTable;
use std::sync::Arc;

use workrail_spec::artifact::ArtifactError;
use workrail_spec::dedupe::DedupeKey;
use workrail_spec::event::{EventData, IdPool, SessionEvent};
use workrail_spec::ids::{SessionId, SnapshotRef};
use workrail_spec::manifest::{ManifestRecord, SegmentClosed};

use super::cas::{ObjectCheck, ObjectState};
use super::error::StoreError;
use super::event_log::{EventLog, Events, Residency, parse_segment, read_page, reread};
use super::fs::StoreFs;
use super::health::{Corruption, CorruptionReason, SessionHealth};
use super::layout;
use super::manifest_log::{ManifestLog, PageRecords};
use crate::growth::reserve_bounded;

/// A session as load found it: the validated prefix and the health verdict.
#[derive(Debug, Clone)]
pub struct LoadedSession {
    pub session_id: SessionId,
    /// Committed events, ascending and contiguous from 0: the newest parsed, the older read
    /// again from their segments when asked for (D225). See [`LoadedSession::events`].
    pub(crate) log: EventLog,
    /// How many events stay parsed, and where the others are read again.
    pub(crate) residency: Residency,
    /// Committed manifest records, ascending and contiguous from 0 (held compactly, D231).
    pub manifest: ManifestLog,
    pub health: SessionHealth,
    /// Every committed dedupeKey and the index of its event.
    pub(crate) dedupe: DedupeIndex,
    /// Bytes of the manifest that hold committed records (the rest is a torn, uncommitted line).
    pub(crate) manifest_committed_bytes: u64,
    /// The manifest file length seen at load (for cache freshness).
    pub(crate) manifest_file_bytes: u64,
}

/// The committed dedupeKeys, each found by a hash of its text and confirmed against the key its
/// event derives, so no key's text is held at all (decisions D164, D210). An entry is 8 bytes:
/// 32 bits of the key's hash and the event's index (D232). Keys whose 32 bits agree are all
/// kept; a lookup confirms each against its event, oldest first.
#[derive(Debug, Clone, Default)]
pub(crate) struct DedupeIndex {
    hasher: RandomState,
    /// (32 bits of the key's hash, event index) of every event below 2^32.
    near: HashTable<(u32, u32)>,
    /// (hash, event index) of events from 2^32 on (a log that long is not written in practice).
    far: Vec<(u32, usize)>,
}

impl DedupeIndex {
    fn hash(&self, key: &DedupeKey) -> u32 {
        // The high bits: the table places and tags entries by a spread of these 32.
        (self.hasher.hash_one(key.as_str()) >> 32) as u32
    }

    /// Where the table files an entry of 32-bit hash `hash`: spread over 64 bits, since it
    /// takes the bucket from the low bits and a tag from the top seven.
    fn spread(hash: u32) -> u64 {
        u64::from(hash).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }

    /// The index of the event carrying `key`; `key_of(i)` is the key of event `i` (which may
    /// have to be read again, so it can fail).
    fn find<E>(
        &self,
        key: &DedupeKey,
        mut key_of: impl FnMut(usize) -> Result<DedupeKey, E>,
    ) -> Result<Option<usize>, E> {
        let hash = self.hash(key);
        let candidates = self
            .near
            .iter_hash(Self::spread(hash))
            .filter(|(h, _)| *h == hash)
            .map(|&(_, i)| i as usize)
            .chain(self.far.iter().filter(|(h, _)| *h == hash).map(|&(_, i)| i));
        // Almost always one candidate at most; with more, the oldest event carrying the key.
        let mut found = None;
        for i in candidates {
            if found.is_none_or(|f| i < f) && &key_of(i)? == key {
                found = Some(i);
            }
        }
        Ok(found)
    }

    /// Indexes event `index` under `key`; `Ok(Err(_))` with the earlier event when the key is
    /// taken.
    fn insert<E>(
        &mut self,
        key: &DedupeKey,
        index: usize,
        key_of: impl FnMut(usize) -> Result<DedupeKey, E>,
    ) -> Result<Result<(), usize>, E> {
        if let Some(existing) = self.find(key, key_of)? {
            return Ok(Err(existing));
        }
        self.insert_new(key, index);
        Ok(Ok(()))
    }

    /// Indexes event `index` under `key`, which the caller knows is not committed yet.
    fn insert_new(&mut self, key: &DedupeKey, index: usize) {
        let hash = self.hash(key);
        match u32::try_from(index) {
            Ok(near) => {
                self.near
                    .insert_unique(Self::spread(hash), (hash, near), |&(h, _)| Self::spread(h));
            }
            Err(_) => self.far.push((hash, index)),
        }
    }

    /// Forgets the events from `len` on.
    fn truncate(&mut self, len: usize) {
        self.near.retain(|&mut (_, i)| (i as usize) < len);
        self.far.retain(|&(_, i)| i < len);
    }

    fn heap_bytes(&self) -> usize {
        // hashbrown: one entry and one control byte per bucket.
        self.near.capacity() * (std::mem::size_of::<(u32, u32)>() + 1)
            + self.far.capacity() * std::mem::size_of::<(u32, usize)>()
    }
}

impl LoadedSession {
    /// About how much memory this view takes: the event and record vectors as allocated, plus
    /// the text its parsed events hold (their segments' JSON is an upper bound for it, since ids
    /// repeat and are shared), plus what the records and the dedupe index hold on the heap.
    pub fn estimated_bytes(&self) -> usize {
        let first = self.log.first_resident() as u64;
        let segments = self.manifest.segment_bytes_from(first);
        // The records hold no text of the manifest's but what `heap_bytes` counts (D231-D233).
        let text = segments as usize;
        let vectors = self.log.resident_capacity() * std::mem::size_of::<SessionEvent>()
            + self.manifest.heap_bytes();
        text.saturating_add(vectors)
            .saturating_add(self.dedupe.heap_bytes())
            .saturating_add(512)
    }

    /// The committed events.
    pub fn events(&self) -> Events<'_> {
        Events::Log {
            session: self,
            len: self.log.len(),
        }
    }

    /// How many events are committed.
    pub fn event_count(&self) -> usize {
        self.log.len()
    }

    /// The committed events still held parsed (the newest), and the index of the first of them.
    pub fn resident_events(&self) -> (usize, &[SessionEvent]) {
        (self.log.first_resident(), self.log.resident())
    }

    /// The last committed event (always held parsed).
    pub fn last_event(&self) -> Option<&SessionEvent> {
        self.log.last()
    }

    /// Every committed event, the ones no longer held read again; the held ones are moved, not
    /// copied.
    pub fn into_events(self) -> Result<Vec<SessionEvent>, StoreError> {
        let first = self.log.first_resident();
        if first == 0 {
            return Ok(self.log.into_resident());
        }
        let mut events = self.reread(0..first)?;
        events.extend(self.log.into_resident());
        Ok(events)
    }

    pub(crate) fn log(&self) -> &EventLog {
        &self.log
    }

    /// The committed events `range` read again from their segments.
    pub(crate) fn reread(
        &self,
        range: std::ops::Range<usize>,
    ) -> Result<Vec<SessionEvent>, StoreError> {
        reread(&self.residency, &self.session_id, &self.manifest, range)
    }

    /// Appends committed events and indexes their dedupeKeys. The caller has checked that no
    /// key is committed already (the append rules).
    pub(crate) fn commit_events(&mut self, fresh: Vec<SessionEvent>) {
        let events = self.log.resident_mut();
        reserve_bounded(events, fresh.len());
        // Ids parsed from a token are texts of their own: point them at the log's.
        let mut ids = IdPool::default();
        ids.sessions.share(&mut self.session_id);
        pool_recent_ids(events, &mut ids);
        for mut event in fresh {
            event.share_ids(&mut ids);
            let index = self.log.len();
            self.dedupe.insert_new(&event.dedupe_key(), index);
            self.log.resident_mut().push(event);
        }
    }

    /// Appends committed manifest records, then forgets the oldest parsed events when more
    /// than the residency allows are held (they are committed now, so they can be read again).
    ///
    /// Each record comes with where its line starts in the manifest (as the file store writes
    /// it), so it can leave memory once old (D235).
    pub(crate) fn commit_records(
        &mut self,
        records: impl IntoIterator<Item = (ManifestRecord, Option<u64>)>,
    ) {
        for (record, line_start) in records {
            self.manifest.push_at(record, line_start);
        }
        let upto = self.log.len();
        forget_oldest(&mut self.log, &mut self.manifest, &self.residency, upto);
    }

    pub(crate) fn empty(session_id: SessionId, residency: Residency) -> Self {
        Self {
            manifest: ManifestLog::new(session_id.clone()),
            session_id,
            log: EventLog::default(),
            residency,
            health: SessionHealth::Healthy,
            dedupe: DedupeIndex::default(),
            manifest_committed_bytes: 0,
            manifest_file_bytes: 0,
        }
    }

    /// The index the next committed event will get.
    pub fn next_event_index(&self) -> u64 {
        self.log.len() as u64
    }

    /// The position of the first event of the plan (one plan is one segment) that holds the
    /// event at `position`; 0 when no segment names it (D217).
    pub fn plan_start(&self, position: usize) -> Result<usize, StoreError> {
        Ok(self
            .manifest
            .spot_in(position, &self.page_reader())?
            .map_or(0, |s| s.first as usize))
    }

    /// Reads page `k` of the manifest records out of memory again (D235).
    fn page_reader(&self) -> impl Fn(usize) -> Result<PageRecords, StoreError> + '_ {
        |k| read_page(&self.residency, &self.session_id, &self.manifest, k)
    }

    /// Every committed manifest record, in order; the ones out of memory are read again from
    /// the manifest (D235).
    pub fn manifest_records(&self) -> Result<Vec<ManifestRecord>, StoreError> {
        self.manifest.records_in(&self.page_reader())
    }

    /// The committed manifest record at `index`.
    pub fn manifest_record(&self, index: usize) -> Result<Option<ManifestRecord>, StoreError> {
        self.manifest.get_in(index, &self.page_reader())
    }

    /// The `segment_closed` records of the events from `position` on, in order.
    pub fn segments_from(&self, position: usize) -> Result<Vec<SegmentClosed>, StoreError> {
        self.manifest
            .segments_from_in(position, &self.page_reader())
    }

    /// The snapshots the manifest pins, in order.
    pub fn pinned_snapshots(&self) -> Result<Vec<SnapshotRef>, StoreError> {
        self.manifest.pinned_in(&self.page_reader())
    }

    /// The committed event carrying `key`, if any.
    pub fn event_by_dedupe_key(
        &self,
        key: &DedupeKey,
    ) -> Result<Option<Cow<'_, SessionEvent>>, StoreError> {
        let events = self.events();
        let key_of = |i: usize| match events.get(i)? {
            Some(event) => Ok(event.dedupe_key()),
            None => Err(StoreError::Internal {
                detail: format!("the dedupe index names eventIndex {i}, past the log's end"),
            }),
        };
        match self.dedupe.find(key, key_of)? {
            Some(i) => events.get(i),
            None => Ok(None),
        }
    }

    /// Whether the manifest pins `snapshot`.
    pub fn is_pinned(&self, snapshot: &SnapshotRef) -> Result<bool, StoreError> {
        self.manifest.is_pinned_in(snapshot, &self.page_reader())
    }
}

/// Forgets the oldest parsed events of `log` when it holds more than `residency` allows: it
/// keeps at least `residency.resident` events before `upto` (a transaction boundary; nothing
/// past it is forgotten), from the start of a plan.
///
/// The manifest records before the segment of the first event kept leave memory with them, a
/// page at a time, when the store reads its manifest again (D235).
fn forget_oldest(
    log: &mut EventLog,
    manifest: &mut ManifestLog,
    residency: &Residency,
    upto: usize,
) {
    if !residency.over(log.resident().len()) {
        return;
    }
    let keep_from = upto.saturating_sub(residency.resident);
    if let Some(spot) = manifest.held_spot_of(keep_from) {
        log.forget_before(spot.first as usize);
        if residency.pages_manifest() {
            manifest.page_out_before(spot.index);
        }
    }
}

/// Snapshot refs introduced by `node_created` events, with the event that introduced them.
pub(crate) fn introduced_snapshots(events: &[SessionEvent]) -> Vec<(SnapshotRef, usize)> {
    events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e.data() {
            EventData::NodeCreated(n) => Some((n.snapshot_ref.clone(), i)),
            _ => None,
        })
        .collect()
}

/// How many of a log's last events the ids of events appended after them are pooled with (a
/// plan is about five events; a dozen plans name a workflow's repeated step and loop ids).
const POOLED_RECENT_EVENTS: usize = 64;

/// Adds the ids of the last events of `events` to `pool`. The ids the next plans repeat (the
/// session's runs, the node an advance leaves, the workflow, the steps and loops its traces
/// name) are there, so events appended after them (committed by this process, or read past a
/// view) share them as a whole load's events do (decisions D164, D223).
fn pool_recent_ids(events: &mut [SessionEvent], pool: &mut IdPool) {
    let recent = events.len().saturating_sub(POOLED_RECENT_EVENTS);
    for event in &mut events[recent..] {
        event.share_ids(pool);
    }
}

struct Validator<'a> {
    session_id: SessionId,
    /// Events, records and pins accepted so far, possibly past the last complete transaction.
    events: EventLog,
    /// How many events stay parsed, and where the others are read again (D225).
    residency: Residency,
    manifest: ManifestLog,
    dedupe: DedupeIndex,
    /// The ids read so far, so repeated ones share one text (decision D164).
    ids: IdPool,
    /// Snapshots introduced by the current segment that still lack a pin.
    awaiting_pins: Vec<(SnapshotRef, usize)>,
    /// The last complete transaction boundary: (events, manifest records, manifest bytes).
    boundary: (usize, usize, u64),
    /// Checks the objects committed events reference (None: the log alone is judged).
    objects: Option<&'a ObjectCheck>,
    /// Pinned workflows already found intact in this session.
    workflows_checked: HashSet<workrail_spec::ids::WorkflowHash>,
    /// Whether it was resumed from a view ([`Validator::resumed`]).
    resumed: bool,
}

/// Why validation stopped: damage (a verdict), or an I/O error (no verdict at all).
enum Stop {
    Corrupt(Corruption),
    Io(io::Error),
}

impl From<Corruption> for Stop {
    fn from(c: Corruption) -> Self {
        Self::Corrupt(c)
    }
}

fn version_or(reason: CorruptionReason, e: &ArtifactError) -> CorruptionReason {
    if matches!(e, ArtifactError::UnsupportedVersion { .. }) {
        CorruptionReason::UnknownVersion
    } else {
        reason
    }
}

impl<'a> Validator<'a> {
    /// A validator that has read nothing yet.
    fn new(session: &SessionId, objects: Option<&'a ObjectCheck>, residency: Residency) -> Self {
        let mut ids = IdPool::default();
        ids.sessions.share(&mut session.clone());
        Self {
            session_id: session.clone(),
            events: EventLog::default(),
            residency,
            manifest: ManifestLog::new(session.clone()),
            dedupe: DedupeIndex::default(),
            ids,
            awaiting_pins: Vec::new(),
            boundary: (0, 0, 0),
            objects,
            workflows_checked: HashSet::new(),
            resumed: false,
        }
    }

    /// A validator that has accepted `view`, a healthy view without a torn tail, so it is at a
    /// transaction boundary with every snapshot it introduced pinned; the objects its events
    /// reference count as checked (as a cached view's do, D60).
    fn resumed(view: LoadedSession, objects: Option<&'a ObjectCheck>) -> Self {
        let mut validator = Self::new(&view.session_id, objects, view.residency);
        validator.boundary = (
            view.log.len(),
            view.manifest.len(),
            view.manifest_committed_bytes,
        );
        validator.events = view.log;
        pool_recent_ids(validator.events.resident_mut(), &mut validator.ids);
        validator.manifest = view.manifest;
        validator.dedupe = view.dedupe;
        validator.resumed = true;
        validator
    }

    fn corruption(&self, reason: CorruptionReason, detail: impl ToString) -> Corruption {
        Corruption {
            reason,
            manifest_index: self.manifest.len() as u64,
            detail: detail.to_string(),
        }
    }

    /// Cuts everything accepted past the last complete transaction boundary.
    fn into_loaded(mut self, health: SessionHealth, manifest_file_bytes: u64) -> LoadedSession {
        let (events, records, bytes) = self.boundary;
        if events < self.events.len() || records < self.manifest.len() {
            self.events.truncate(events);
            self.manifest.truncate(records);
            self.dedupe.truncate(events);
        }
        // Exact vectors: appends then grow them by an eighth at a time (`reserve_bounded`). A
        // resumed view keeps the room it had: shrinking it on every load past another
        // process's commit, then growing it again, would move the whole log each time.
        if !self.resumed {
            self.events.shrink_to_fit();
            self.manifest.shrink_to_fit();
        }
        LoadedSession {
            session_id: self.session_id,
            log: self.events,
            residency: self.residency,
            manifest: self.manifest,
            health,
            dedupe: self.dedupe,
            manifest_committed_bytes: bytes,
            manifest_file_bytes,
        }
    }

    /// Reads and validates an attested segment; its events are returned, not yet accepted. A
    /// read that fails (other than for a missing file) is an I/O error, never a verdict: the
    /// bytes were not seen, so nothing can be said of them (D221).
    fn read_segment(
        &mut self,
        fs: &dyn StoreFs,
        seg: &SegmentClosed,
    ) -> Result<Vec<SessionEvent>, Stop> {
        let expected_first = self.events.len() as u64;
        if seg.first_event_index.get() != expected_first {
            return Err(self
                .corruption(
                    CorruptionReason::SegmentNotContiguous,
                    format!(
                        "segment starts at eventIndex {}, expected {expected_first}",
                        seg.first_event_index
                    ),
                )
                .into());
        }
        let path = layout::session_dir(&self.session_id).join(&seg.segment_rel_path);
        match fs.read(&path) {
            Ok(Some(bytes)) => self.validate_segment(seg, &bytes),
            Ok(None) => Err(self
                .corruption(
                    CorruptionReason::SegmentMissing,
                    format!("{} is attested but missing", seg.segment_rel_path),
                )
                .into()),
            Err(e) => Err(Stop::Io(e)),
        }
    }

    /// Validates the bytes of an attested segment that starts where the log ends; its events are
    /// returned, not yet accepted.
    fn validate_segment(
        &mut self,
        seg: &SegmentClosed,
        bytes: &[u8],
    ) -> Result<Vec<SessionEvent>, Stop> {
        let new_events = parse_segment(&self.session_id, seg, bytes, &mut self.ids)
            .map_err(|(reason, detail)| self.corruption(reason, detail))?;
        let base = self.events.len();
        for (offset, event) in new_events.iter().enumerate() {
            let inserted = {
                let (events, fresh) = (&self.events, &new_events);
                let (session, manifest, residency) =
                    (&self.session_id, &self.manifest, &self.residency);
                let key_of = |i: usize| -> Result<DedupeKey, StoreError> {
                    if let Some(at) = i.checked_sub(base) {
                        return Ok(fresh[at].dedupe_key());
                    }
                    match events.get_resident(i) {
                        Some(event) => Ok(event.dedupe_key()),
                        None => reread(residency, session, manifest, i..i + 1)?
                            .first()
                            .map(SessionEvent::dedupe_key)
                            .ok_or_else(|| StoreError::Internal {
                                detail: format!("eventIndex {i} was not read again"),
                            }),
                    }
                };
                self.dedupe
                    .insert(&event.dedupe_key(), base + offset, key_of)
                    .map_err(|e| Stop::Io(io::Error::other(e.to_string())))?
            };
            if inserted.is_err() {
                return Err(self
                    .corruption(
                        CorruptionReason::DuplicateDedupeKey,
                        format!("dedupeKey {} appears twice", event.dedupe_key()),
                    )
                    .into());
            }
        }
        Ok(new_events)
    }

    /// Whether the records accepted so far pin `snapshot` (those out of memory read again).
    fn is_pinned(&self, snapshot: &SnapshotRef) -> Result<bool, Stop> {
        let read = |k| read_page(&self.residency, &self.session_id, &self.manifest, k);
        self.manifest
            .is_pinned_in(snapshot, &read)
            .map_err(|e| Stop::Io(io::Error::other(e.to_string())))
    }

    fn accept_events(&mut self, new_events: Vec<SessionEvent>) -> Result<(), Stop> {
        let base = self.events.len();
        let mut awaiting = Vec::new();
        for (snapshot, i) in introduced_snapshots(&new_events) {
            if !self.is_pinned(&snapshot)? {
                awaiting.push((snapshot, base + i));
            }
        }
        self.awaiting_pins = awaiting;
        if self.resumed {
            // A view kept in a cache grows as `commit_events` grows it, not by doubling.
            reserve_bounded(self.events.resident_mut(), new_events.len());
        }
        self.events.resident_mut().extend(new_events);
        Ok(())
    }

    /// The snapshots and pinned workflows a segment's events reference must be there and
    /// intact: a session whose history cannot be rehydrated is not healthy (decision D53).
    fn check_objects(&mut self, new_events: &[SessionEvent]) -> Result<(), Stop> {
        let Some(objects) = self.objects else {
            return Ok(());
        };
        for event in new_events {
            let (state, missing, damaged, what) = match event.data() {
                EventData::RunStarted(run) => {
                    if self.workflows_checked.contains(&run.workflow_hash) {
                        continue;
                    }
                    let state = objects.workflow(&run.workflow_hash);
                    if matches!(state, ObjectState::Intact) {
                        self.workflows_checked.insert(run.workflow_hash.clone());
                    }
                    (
                        state,
                        CorruptionReason::WorkflowMissing,
                        CorruptionReason::WorkflowDamaged,
                        format!("pinned workflow {}", run.workflow_hash),
                    )
                }
                EventData::NodeCreated(node) => {
                    if self.is_pinned(&node.snapshot_ref)? {
                        continue;
                    }
                    (
                        objects.snapshot(&node.snapshot_ref),
                        CorruptionReason::SnapshotMissing,
                        CorruptionReason::SnapshotDamaged,
                        format!("snapshot {}", node.snapshot_ref),
                    )
                }
                _ => continue,
            };
            let at = format!("eventIndex {}", event.event_index());
            match state {
                ObjectState::Intact => {}
                ObjectState::Missing => {
                    return Err(self
                        .corruption(missing, format!("{what} (referenced at {at}) is missing"))
                        .into());
                }
                ObjectState::Damaged(found) => {
                    return Err(self
                        .corruption(damaged, format!("{what} (referenced at {at}): {found}"))
                        .into());
                }
                ObjectState::Unreadable(e) => return Err(Stop::Io(e)),
            }
        }
        Ok(())
    }

    /// Accepts a pin of a committed `node_created`, pointing its ids at the event's (equal
    /// values held once, as `share_ids` does for events).
    fn accept_pin(
        &mut self,
        pin: &mut workrail_spec::manifest::SnapshotPinned,
    ) -> Result<(), Stop> {
        let index = pin.event_index.get() as usize;
        // A pin follows the segment that introduced its snapshot, so its event is held; one
        // that names an older event is read again.
        let reread_event = match self.events.get_resident(index) {
            Some(_) => None,
            None if index < self.events.len() => reread(
                &self.residency,
                &self.session_id,
                &self.manifest,
                index..index + 1,
            )
            .map_err(|e| Stop::Io(io::Error::other(e.to_string())))?
            .pop(),
            None => None,
        };
        let event = self.events.get_resident(index).or(reread_event.as_ref());
        let created = event.and_then(|e| match e.data() {
            EventData::NodeCreated(n)
                if e.event_id() == &pin.created_by_event_id
                    && n.snapshot_ref == pin.snapshot_ref =>
            {
                Some((e.event_id().clone(), n.snapshot_ref.clone()))
            }
            _ => None,
        });
        let Some((event_id, snapshot_ref)) = created else {
            return Err(self
                .corruption(
                    CorruptionReason::PinWithoutNode,
                    format!(
                        "pin of {} names eventIndex {} which is not its committed node_created",
                        pin.snapshot_ref, pin.event_index
                    ),
                )
                .into());
        };
        pin.created_by_event_id = event_id;
        pin.snapshot_ref = snapshot_ref;
        self.awaiting_pins.retain(|(r, _)| r != &pin.snapshot_ref);
        Ok(())
    }

    fn missing_pins(&self) -> Option<Corruption> {
        self.awaiting_pins.first().map(|(r, i)| {
            self.corruption(
                CorruptionReason::MissingSnapshotPins,
                format!("snapshot {r} introduced at eventIndex {i} was never pinned"),
            )
        })
    }

    /// Reads the manifest's records in `manifest` from its byte `offset` on; `manifest` holds
    /// the file's bytes from byte `base` (0, or near the end of a view the validator was
    /// resumed from).
    fn run(
        &mut self,
        fs: &dyn StoreFs,
        manifest: &[u8],
        mut offset: usize,
        base: u64,
    ) -> Result<(), Stop> {
        while let Some(len) = manifest[offset..].iter().position(|&b| b == b'\n') {
            let line = &manifest[offset..offset + len];
            let mut record = std::str::from_utf8(line)
                .map_err(|e| ArtifactError::Malformed {
                    artifact: workrail_spec::artifact::ArtifactKind::ManifestRecord,
                    detail: e.to_string(),
                })
                .and_then(ManifestRecord::from_json_str)
                .map_err(|e| {
                    Stop::from(self.corruption(
                        version_or(CorruptionReason::ManifestUnparseable, &e),
                        format!("manifest line {}: {e}", self.manifest.len() + 1),
                    ))
                })?;
            if record.manifest_index().get() != self.manifest.len() as u64 {
                return Err(self
                    .corruption(
                        CorruptionReason::ManifestIndexGap,
                        format!(
                            "manifestIndex {} where {} was expected",
                            record.manifest_index(),
                            self.manifest.len()
                        ),
                    )
                    .into());
            }
            if record.session_id() != &self.session_id {
                return Err(self
                    .corruption(
                        CorruptionReason::ManifestSessionMismatch,
                        format!("record of session {}", record.session_id()),
                    )
                    .into());
            }
            match &mut record {
                ManifestRecord::SegmentClosed(seg) => {
                    seg.session_id = self.session_id.clone();
                    // The previous transaction must have pinned everything it introduced.
                    if let Some(missing) = self.missing_pins() {
                        return Err(missing.into());
                    }
                    let new_events = self.read_segment(fs, seg)?;
                    self.check_objects(&new_events)?;
                    self.accept_events(new_events)?;
                }
                ManifestRecord::SnapshotPinned(pin) => {
                    pin.session_id = self.session_id.clone();
                    self.accept_pin(pin)?;
                }
            }
            self.manifest.push_at(record, Some(base + offset as u64));
            offset += len + 1;
            if self.awaiting_pins.is_empty() {
                self.boundary = (self.events.len(), self.manifest.len(), base + offset as u64);
                // A long log is not held whole even while it is read (D225).
                forget_oldest(
                    &mut self.events,
                    &mut self.manifest,
                    &self.residency,
                    self.boundary.0,
                );
            }
        }
        match self.missing_pins() {
            Some(missing) => Err(missing.into()),
            None => Ok(()),
        }
    }
}

/// Loads `session`. `Ok(None)` when no committed truth exists (no manifest, or only a torn
/// first line). With `objects`, the snapshots and pinned workflows the events reference are
/// judged too.
pub(crate) fn load_session(
    fs: &dyn StoreFs,
    session: &SessionId,
    objects: Option<&ObjectCheck>,
    residency: Residency,
) -> io::Result<Option<LoadedSession>> {
    let Some(manifest) = fs.read(&layout::manifest_path(session))? else {
        return lost_manifest(fs, session, objects);
    };
    let mut validator = Validator::new(session, objects, residency);
    let outcome = match validator.run(fs, &manifest, 0, 0) {
        Ok(()) => Ok(()),
        Err(Stop::Corrupt(c)) => Err(c),
        Err(Stop::Io(e)) => return Err(e),
    };
    let prefix_is_empty = validator.boundary.0 == 0;
    let health = match outcome {
        Ok(()) => SessionHealth::Healthy,
        Err(c) if c.reason == CorruptionReason::UnknownVersion => SessionHealth::UnknownVersion(c),
        Err(c) if prefix_is_empty => SessionHealth::CorruptHead(c),
        Err(c) => SessionHealth::CorruptTail(c),
    };
    let loaded = validator.into_loaded(health, manifest.len() as u64);
    if loaded.health.is_healthy() && loaded.log.is_empty() {
        return Ok(None);
    }
    Ok(Some(loaded))
}

/// Loads `session` past `view`, a healthy view of it read earlier whose manifest had no torn
/// tail: only the manifest records after the view's end and the segments they attest are read
/// and validated, against the view's dedupe index and pins, instead of the whole log (D219).
/// `Ok(None)` when that cannot give exactly what a full load would: the manifest is gone or not
/// longer, the view's last record is not the line that ends where the view ends (the session
/// was replaced), or anything past the view is damaged or incomplete. A full load then decides,
/// so every verdict other than healthy comes from a full read (as D104 does on PostgreSQL).
///
/// `view` is taken whole: when nothing else holds it, it is extended in place rather than
/// copied.
pub(crate) fn load_session_past(
    fs: &dyn StoreFs,
    view: Arc<LoadedSession>,
    objects: Option<&ObjectCheck>,
) -> io::Result<Option<LoadedSession>> {
    if !view.health.is_healthy() || view.manifest_file_bytes != view.manifest_committed_bytes {
        return Ok(None);
    }
    let Some((start, line)) = last_line(&view) else {
        return Ok(None);
    };
    // Only the view's last line and what follows it are read.
    let Some(tail) = fs.read_from(&layout::manifest_path(&view.session_id), start)? else {
        return Ok(None);
    };
    if tail.len() <= line.len() || tail[..line.len()] != line[..] {
        return Ok(None);
    }
    extend_view(fs, view, &tail[line.len()..], objects)
}

/// Where the last manifest line of a healthy `view` without a torn tail starts, and its bytes
/// (`None` for an empty or unserializable view).
fn last_line(view: &LoadedSession) -> Option<(u64, Vec<u8>)> {
    let last = view.manifest.last()?;
    let mut line = workrail_spec::jcs::to_canonical_string(&last)
        .ok()?
        .into_bytes();
    line.push(b'\n');
    let start = view
        .manifest_committed_bytes
        .checked_sub(line.len() as u64)?;
    Some((start, line))
}

/// `view` extended by `records`, the manifest lines that follow its last one (each ending in a
/// newline), validated with the segments they attest in `fs` against the view's dedupe index
/// and pins. `Ok(None)` unless the result is whole and healthy (see [`load_session_past`]);
/// also used by the PostgreSQL store for the rows past a cached view (D222).
pub(crate) fn extend_view(
    fs: &dyn StoreFs,
    view: Arc<LoadedSession>,
    records: &[u8],
    objects: Option<&ObjectCheck>,
) -> io::Result<Option<LoadedSession>> {
    let end = view.manifest_committed_bytes;
    if !view.health.is_healthy()
        || view.manifest_file_bytes != end
        || view.manifest.is_empty()
        || records.last() != Some(&b'\n')
    {
        return Ok(None);
    }
    let mut validator = Validator::resumed(Arc::unwrap_or_clone(view), objects);
    match validator.run(fs, records, 0, end) {
        Ok(()) => {}
        Err(Stop::Corrupt(_)) => return Ok(None),
        Err(Stop::Io(e)) => return Err(e),
    }
    Ok(Some(validator.into_loaded(
        SessionHealth::Healthy,
        end + records.len() as u64,
    )))
}

/// A session directory without `manifest.jsonl`: no session when it holds no event segment (a
/// directory made before a first commit, or nothing at all); `corrupt_head` / `manifest_missing`
/// when segments remain, since a new session's empty manifest is durable before its first
/// segment (decision D131): its history was committed and the record attesting it is lost.
fn lost_manifest(
    fs: &dyn StoreFs,
    session: &SessionId,
    objects: Option<&ObjectCheck>,
) -> io::Result<Option<LoadedSession>> {
    let segments = fs
        .list_dir(&layout::events_dir(session))?
        .into_iter()
        .filter(|name| !layout::is_temp_file_name(name) && name.ends_with(".jsonl"))
        .count();
    if segments == 0 {
        return Ok(None);
    }
    let validator = Validator::new(session, objects, Residency::default());
    let corruption = Corruption {
        reason: CorruptionReason::ManifestMissing,
        manifest_index: 0,
        detail: format!(
            "manifest.jsonl is missing while {segments} event segment(s) remain in events/"
        ),
    };
    Ok(Some(
        validator.into_loaded(SessionHealth::CorruptHead(corruption), 0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// decision: D164, D232
    #[test]
    fn a_key_whose_hash_collides_is_confirmed_against_its_event() {
        let keys = [
            DedupeKey::parse("run_started:sess_a:run_a").unwrap(),
            DedupeKey::parse("run_started:sess_a:run_b").unwrap(),
        ];
        let key_of = |i: usize| Ok::<_, std::convert::Infallible>(keys[i].clone());
        let mut index = DedupeIndex::default();
        assert_eq!(index.insert(&keys[0], 0, key_of), Ok(Ok(())));
        // File the first key's event under the second key's hash too, as a collision would.
        let colliding = index.hash(&keys[1]);
        index
            .near
            .insert_unique(DedupeIndex::spread(colliding), (colliding, 0), |&(h, _)| {
                DedupeIndex::spread(h)
            });
        assert_eq!(index.find(&keys[1], key_of), Ok(None));
        assert_eq!(index.insert(&keys[1], 1, key_of), Ok(Ok(())));
        assert_eq!(index.find(&keys[1], key_of), Ok(Some(1)));
        assert_eq!(index.find(&keys[0], key_of), Ok(Some(0)));
        assert_eq!(index.insert(&keys[1], 2, key_of), Ok(Err(1)));
        index.truncate(1);
        assert_eq!(index.find(&keys[1], key_of), Ok(None));
        assert_eq!(index.find(&keys[0], key_of), Ok(Some(0)));
    }

    /// decision: D232
    #[test]
    fn an_event_past_four_billion_is_indexed_too() {
        let key = DedupeKey::parse("run_started:sess_a:run_far").unwrap();
        let far = 1usize << 33;
        let key_of = |i: usize| {
            Ok::<_, std::convert::Infallible>(if i == far {
                key.clone()
            } else {
                DedupeKey::parse("run_started:sess_a:run_near").unwrap()
            })
        };
        let mut index = DedupeIndex::default();
        assert_eq!(index.insert(&key, far, key_of), Ok(Ok(())));
        assert_eq!(index.find(&key, key_of), Ok(Some(far)));
        assert_eq!(index.insert(&key, far + 1, key_of), Ok(Err(far)));
        index.truncate(far);
        assert_eq!(index.find(&key, key_of), Ok(None));
    }
}

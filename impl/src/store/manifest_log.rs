//! A loaded session's committed manifest records, held compactly (D231).
//!
//! A long session commits a `segment_closed` and a `snapshot_pinned` per advance, and a loaded
//! session keeps every record (its segments are where forgotten events are read again, D225).
//! As parsed records they cost about 330 bytes per advance: each record's session id, its own
//! index, a segment's path as text and its digest as 71 characters of hex. Here a segment is
//! its event bounds, size and raw digest, a pin its event index and the ids it shares with its
//! `node_created`; the session id, each record's index (its place) and a segment's canonical
//! path are implied. A record is rebuilt, equal to the one the manifest holds, when asked for.
//!
//! Held so, records still grow with a session: about 130 bytes an advance. The records before
//! the events a session keeps parsed (D225) leave memory a page of [`PAGE_RECORDS`] at a time
//! (D235): a page keeps where its lines are in the manifest file and a check of what they were,
//! and a read of one of its records reads the lines again and answers only when they pass.

use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;
use workrail_spec::ids::{
    EventId, EventIndex, ManifestIndex, SessionId, Sha256Digest, SnapshotRef,
};
use workrail_spec::manifest::{ManifestRecord, SegmentClosed, SnapshotPinned, segment_rel_path};

use super::error::StoreError;
use super::health::CorruptionReason;

/// One record, without what the log implies.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Compact {
    Segment {
        first: EventIndex,
        last: EventIndex,
        bytes: u64,
        sha256: [u8; 32],
    },
    Pin {
        event_index: EventIndex,
        /// The snapshot ref's raw digest (D233).
        snapshot: [u8; 32],
        created_by_event_id: PinEventId,
    },
}

fn snapshot_ref_of(raw: &[u8; 32]) -> SnapshotRef {
    SnapshotRef::from_digest(Sha256Digest::from_bytes(raw))
}

/// A pin's `createdByEventId`: the 10 bytes a minted id encodes, or the text of any other
/// (D232). Its `node_created` event is forgotten once old (D225), so the pin alone holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PinEventId {
    Minted([u8; 10]),
    Text(EventId),
}

impl PinEventId {
    fn of(id: EventId) -> Self {
        match id.minted_bits() {
            Some(bits) => Self::Minted(bits),
            None => Self::Text(id),
        }
    }

    /// What it holds on the heap: an id's text and its reference counts.
    fn heap_bytes(&self) -> usize {
        match self {
            Self::Minted(_) => 0,
            Self::Text(id) => id.as_str().len() + 16,
        }
    }

    fn id(&self) -> EventId {
        match self {
            Self::Minted(bits) => EventId::from_entropy(bits),
            Self::Text(id) => id.clone(),
        }
    }
}

/// How many records a page holds: records older than the events a session keeps parsed leave
/// memory and are read again from the manifest a page at a time (D235).
pub(crate) const PAGE_RECORDS: usize = 64;

/// A page of records no longer held: where its lines are in the manifest file and what they
/// were, so a read of them again answers with those records or not at all.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RecordPage {
    /// Where its lines start in the manifest file, and how many bytes they take.
    offset: u64,
    len: u64,
    /// The first event attested by the first segment at or after the page's first record: the
    /// segments ascend, so a binary search over these finds the page of an event's segment.
    segments_from: u64,
    /// The first 16 bytes of the sha256 of its records' compact form (see [`encode`]).
    check: [u8; 16],
}

/// The records of a page read again and checked (see [`ManifestLog::decode_page`]).
#[derive(Debug, Clone)]
pub(crate) struct PageRecords(Arc<[Compact]>);

/// Reads page `k` of a log again (see `LoadedSession`'s manifest readers).
pub(crate) type PageReader<'a> = &'a dyn Fn(usize) -> Result<PageRecords, StoreError>;

/// Where a page's lines are in the manifest file and the check its records must pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PagePlace {
    pub offset: u64,
    pub len: u64,
    pub check: [u8; 16],
}

/// The records of one session, ascending and contiguous from manifest index 0: the newest held
/// compactly, the older written out of memory a page at a time (D235).
#[derive(Debug, Clone)]
pub struct ManifestLog {
    session_id: SessionId,
    /// The records from manifest index [`ManifestLog::paged`] on.
    records: Vec<Compact>,
    /// The records below, page `k` holding those from `k * PAGE_RECORDS`.
    pages: Vec<RecordPage>,
    /// Where the line of record `k * PAGE_RECORDS` starts in the manifest file, for every `k`
    /// so far (`u64::MAX` when it was pushed without its place: that page stays held).
    page_starts: Vec<u64>,
    /// The paths of segments whose path is not the canonical one for their bounds (a writer
    /// other than this one may name them otherwise), by manifest index.
    other_paths: BTreeMap<u64, String>,
    /// The pins, found by their snapshot: 32 bits of the hash of its raw digest and the pin's
    /// manifest index, 8 bytes a pin (D232, D235). A candidate is confirmed against its record,
    /// read again when its page is out of memory.
    pins: HashTable<(u32, u32)>,
    /// Pins from manifest index 2^32 on (a manifest that long is not written in practice).
    far_pins: Vec<(u32, usize)>,
    hasher: RandomState,
    /// The heap bytes of the held pins' event ids kept as text (see [`PinEventId`]).
    foreign_id_bytes: usize,
}

impl PartialEq for ManifestLog {
    fn eq(&self, other: &Self) -> bool {
        // The pins' lookup follows from the records.
        self.session_id == other.session_id
            && self.records == other.records
            && self.pages == other.pages
            && self.other_paths == other.other_paths
    }
}

impl Eq for ManifestLog {}

/// Where the pins' table files an entry of 32-bit hash `hash`: spread over 64 bits, since it
/// takes the bucket from the low bits and a tag from the top seven.
fn spread(hash: u32) -> u64 {
    u64::from(hash).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// `record` held compactly, and its segment's path when it is not the canonical one.
fn compact_of(record: ManifestRecord) -> (Compact, Option<String>) {
    match record {
        ManifestRecord::SegmentClosed(s) => {
            let other = (s.segment_rel_path
                != segment_rel_path(s.first_event_index, s.last_event_index))
            .then_some(s.segment_rel_path);
            let compact = Compact::Segment {
                first: s.first_event_index,
                last: s.last_event_index,
                bytes: s.bytes,
                sha256: s.sha256.bytes(),
            };
            (compact, other)
        }
        ManifestRecord::SnapshotPinned(p) => (
            Compact::Pin {
                event_index: p.event_index,
                snapshot: p.snapshot_ref.digest().bytes(),
                created_by_event_id: PinEventId::of(p.created_by_event_id),
            },
            None,
        ),
    }
}

/// Appends the compact form of `record` (and its segment's other path) to `out`: what a page's
/// check is taken over.
fn encode(record: &Compact, other_path: Option<&String>, out: &mut Vec<u8>) {
    let text = |out: &mut Vec<u8>, text: &str| {
        out.extend_from_slice(&(text.len() as u64).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
    };
    match record {
        Compact::Segment {
            first,
            last,
            bytes,
            sha256,
        } => {
            out.push(0);
            out.extend_from_slice(&first.get().to_le_bytes());
            out.extend_from_slice(&last.get().to_le_bytes());
            out.extend_from_slice(&bytes.to_le_bytes());
            out.extend_from_slice(sha256);
            match other_path {
                Some(path) => text(out, path),
                None => out.push(0),
            }
        }
        Compact::Pin {
            event_index,
            snapshot,
            created_by_event_id,
        } => {
            out.push(1);
            out.extend_from_slice(&event_index.get().to_le_bytes());
            out.extend_from_slice(snapshot);
            match created_by_event_id {
                PinEventId::Minted(bits) => {
                    out.push(0);
                    out.extend_from_slice(bits);
                }
                PinEventId::Text(id) => text(out, id.as_str()),
            }
        }
    }
}

impl ManifestLog {
    /// No records yet, of `session_id`.
    pub fn new(session_id: SessionId) -> Self {
        Self {
            session_id,
            records: Vec::new(),
            pages: Vec::new(),
            page_starts: Vec::new(),
            other_paths: BTreeMap::new(),
            pins: HashTable::new(),
            far_pins: Vec::new(),
            hasher: RandomState::new(),
            foreign_id_bytes: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.paged() + self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many of the first records are out of memory (read again from the manifest, D235).
    pub fn paged(&self) -> usize {
        self.pages.len() * PAGE_RECORDS
    }

    /// The record at `index` when it is held.
    fn held(&self, index: usize) -> Option<&Compact> {
        self.records.get(index.checked_sub(self.paged())?)
    }

    /// The last record (always held: only records before the session's parsed events leave).
    pub fn last(&self) -> Option<ManifestRecord> {
        let index = self.len().checked_sub(1)?;
        self.held(index).map(|r| self.rebuild(index, r))
    }

    /// The record at manifest index `index`, read again with `read` when it is out of memory.
    pub(crate) fn get_in(
        &self,
        index: usize,
        read: PageReader<'_>,
    ) -> Result<Option<ManifestRecord>, StoreError> {
        if let Some(record) = self.held(index) {
            return Ok(Some(self.rebuild(index, record)));
        }
        if index >= self.len() {
            return Ok(None);
        }
        let page = read(index / PAGE_RECORDS)?;
        Ok(page
            .0
            .get(index % PAGE_RECORDS)
            .map(|r| self.rebuild(index, r)))
    }

    /// Every record, in order, the ones out of memory read again with `read`.
    pub(crate) fn records_in(
        &self,
        read: PageReader<'_>,
    ) -> Result<Vec<ManifestRecord>, StoreError> {
        let mut all = Vec::with_capacity(self.len());
        for k in 0..self.pages.len() {
            let page = read(k)?;
            let first = k * PAGE_RECORDS;
            all.extend(
                page.0
                    .iter()
                    .enumerate()
                    .map(|(i, r)| self.rebuild(first + i, r)),
            );
        }
        let base = self.paged();
        all.extend(
            self.records
                .iter()
                .enumerate()
                .map(|(i, r)| self.rebuild(base + i, r)),
        );
        Ok(all)
    }

    /// The snapshots pinned, in order, the pins out of memory read again with `read`.
    pub(crate) fn pinned_in(&self, read: PageReader<'_>) -> Result<Vec<SnapshotRef>, StoreError> {
        let pinned = |records: &[Compact], out: &mut Vec<SnapshotRef>| {
            out.extend(records.iter().filter_map(|r| match r {
                Compact::Pin { snapshot, .. } => Some(snapshot_ref_of(snapshot)),
                Compact::Segment { .. } => None,
            }));
        };
        let mut out = Vec::new();
        for k in 0..self.pages.len() {
            pinned(&read(k)?.0, &mut out);
        }
        pinned(&self.records, &mut out);
        Ok(out)
    }

    /// Whether a pin of `snapshot` is among the records; a candidate out of memory is read
    /// again with `read` (a new snapshot's 32 bits rarely match any).
    pub(crate) fn is_pinned_in(
        &self,
        snapshot: &SnapshotRef,
        read: PageReader<'_>,
    ) -> Result<bool, StoreError> {
        let raw = snapshot.digest().bytes();
        let hash = self.pin_hash(&raw);
        let names = |r: &Compact| matches!(r, Compact::Pin { snapshot, .. } if *snapshot == raw);
        let candidates = self
            .pins
            .iter_hash(spread(hash))
            .filter(|(h, _)| *h == hash)
            .map(|&(_, i)| i as usize)
            .chain(
                self.far_pins
                    .iter()
                    .filter(|(h, _)| *h == hash)
                    .map(|&(_, i)| i),
            );
        for index in candidates {
            let found = match self.held(index) {
                Some(record) => names(record),
                None => read(index / PAGE_RECORDS)?
                    .0
                    .get(index % PAGE_RECORDS)
                    .is_some_and(names),
            };
            if found {
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn pin_hash(&self, raw: &[u8; 32]) -> u32 {
        // The high bits: the table places and tags entries by a spread of these 32.
        (self.hasher.hash_one(raw) >> 32) as u32
    }

    /// Appends `record`, the next one, its line's place in the manifest file unknown (the
    /// PostgreSQL store's rows; such records stay held).
    pub fn push(&mut self, record: ManifestRecord) {
        self.push_at(record, None);
    }

    /// Appends `record`, the next one, whose line starts at byte `line_start` of the manifest
    /// file: its manifest index is this log's length and its session this log's (the loader
    /// and the committer check both before; a record saying otherwise would be rebuilt with
    /// the index and session it is held at).
    pub fn push_at(&mut self, record: ManifestRecord, line_start: Option<u64>) {
        let index = self.len();
        if index.is_multiple_of(PAGE_RECORDS) {
            self.page_starts.push(line_start.unwrap_or(u64::MAX));
        }
        let (compact, other_path) = compact_of(record);
        if let Some(path) = other_path {
            self.other_paths.insert(index as u64, path);
        }
        if let Compact::Pin {
            snapshot,
            created_by_event_id,
            ..
        } = &compact
        {
            // Every pin is filed, a second pin of one snapshot too: the lookup finds either.
            let hash = self.pin_hash(snapshot);
            self.foreign_id_bytes += created_by_event_id.heap_bytes();
            match u32::try_from(index) {
                Ok(near) => {
                    self.pins
                        .insert_unique(spread(hash), (hash, near), |&(h, _)| spread(h));
                }
                Err(_) => self.far_pins.push((hash, index)),
            }
        }
        crate::growth::reserve_bounded(&mut self.records, 1);
        self.records.push(compact);
    }

    pub fn extend(&mut self, records: impl IntoIterator<Item = ManifestRecord>) {
        for record in records {
            self.push(record);
        }
    }

    /// Keeps the first `len` records (never fewer than are out of memory: a load cuts only
    /// records past its last transaction, which are held).
    pub fn truncate(&mut self, len: usize) {
        let len = len.max(self.paged());
        self.records.truncate(len - self.paged());
        self.page_starts.truncate(len.div_ceil(PAGE_RECORDS));
        self.pins.retain(|&mut (_, i)| (i as usize) < len);
        self.far_pins.retain(|&(_, i)| i < len);
        self.other_paths.retain(|&index, _| index < len as u64);
        self.count_foreign_ids();
    }

    fn count_foreign_ids(&mut self) {
        self.foreign_id_bytes = self
            .records
            .iter()
            .map(|r| match r {
                Compact::Pin {
                    created_by_event_id,
                    ..
                } => created_by_event_id.heap_bytes(),
                Compact::Segment { .. } => 0,
            })
            .sum();
    }

    pub fn shrink_to_fit(&mut self) {
        self.records.shrink_to_fit();
    }

    /// Writes out of memory the whole pages of records before manifest index `before` whose
    /// lines' places in the manifest file are known (D235). The caller passes the index of the
    /// segment holding the oldest event it keeps parsed, so a page out of memory attests only
    /// events that are too.
    pub(crate) fn page_out_before(&mut self, before: usize) {
        let mut pages = Vec::new();
        let mut k = self.pages.len();
        while (k + 1) * PAGE_RECORDS <= before {
            let (Some(&start), Some(&end)) = (self.page_starts.get(k), self.page_starts.get(k + 1))
            else {
                break;
            };
            if start == u64::MAX || end == u64::MAX || end <= start {
                break;
            }
            let at = k * PAGE_RECORDS - self.paged();
            let Some(segments_from) = self.records[at..].iter().find_map(|r| match r {
                Compact::Segment { first, .. } => Some(first.get()),
                Compact::Pin { .. } => None,
            }) else {
                break;
            };
            pages.push(RecordPage {
                offset: start,
                len: end - start,
                segments_from,
                check: self.page_check(k * PAGE_RECORDS, &self.records[at..at + PAGE_RECORDS]),
            });
            k += 1;
        }
        if pages.is_empty() {
            return;
        }
        self.records.drain(..pages.len() * PAGE_RECORDS);
        // A load pages as it reads, so the held records never grow far past what stays; room
        // left from more (a log paged for the first time) is given back.
        if self.records.capacity() > self.records.len() * 2 {
            self.records
                .shrink_to(self.records.len() + self.records.len() / 8);
        }
        self.pages.extend(pages);
        self.count_foreign_ids();
    }

    /// The check of the records from manifest index `first`.
    fn page_check(&self, first: usize, records: &[Compact]) -> [u8; 16] {
        let mut bytes = Vec::with_capacity(records.len() * 64);
        for (i, record) in records.iter().enumerate() {
            encode(
                record,
                self.other_paths.get(&((first + i) as u64)),
                &mut bytes,
            );
        }
        let digest = workrail_spec::jcs::sha256(&bytes).bytes();
        let mut check = [0u8; 16];
        check.copy_from_slice(&digest[..16]);
        check
    }

    /// Where page `k`'s lines are, when it is out of memory.
    pub(crate) fn page_place(&self, k: usize) -> Option<PagePlace> {
        self.pages.get(k).map(|page| PagePlace {
            offset: page.offset,
            len: page.len,
            check: page.check,
        })
    }

    /// Page `k`'s records from `bytes`, the lines read again at its place, checked to be the
    /// records it held: the same lines in order, each of this session at its index, with the
    /// same check. `Err` names the first difference.
    pub(crate) fn decode_page(
        &self,
        k: usize,
        bytes: &[u8],
    ) -> Result<PageRecords, (CorruptionReason, String)> {
        let first = k * PAGE_RECORDS;
        let mut records = Vec::with_capacity(PAGE_RECORDS);
        for line in bytes.split_inclusive(|&b| b == b'\n') {
            let index = first + records.len();
            let unparseable = |detail: String| {
                (
                    CorruptionReason::ManifestUnparseable,
                    format!("manifest line {}, read again: {detail}", index + 1),
                )
            };
            let Some(line) = line.strip_suffix(b"\n") else {
                return Err(unparseable("it has no newline".to_owned()));
            };
            let record = std::str::from_utf8(line)
                .map_err(|e| e.to_string())
                .and_then(|text| ManifestRecord::from_json_str(text).map_err(|e| e.to_string()))
                .map_err(unparseable)?;
            if record.manifest_index().get() != index as u64 {
                return Err((
                    CorruptionReason::ManifestIndexGap,
                    format!(
                        "manifest line {}, read again, holds manifestIndex {}",
                        index + 1,
                        record.manifest_index()
                    ),
                ));
            }
            if record.session_id() != &self.session_id {
                return Err((
                    CorruptionReason::ManifestSessionMismatch,
                    format!(
                        "manifest line {}, read again, is a record of session {}",
                        index + 1,
                        record.session_id()
                    ),
                ));
            }
            let (compact, other_path) = compact_of(record);
            if other_path.as_ref() != self.other_paths.get(&(index as u64)) {
                return Err(unparseable(
                    "its segment path is not the one validated at load".to_owned(),
                ));
            }
            records.push(compact);
        }
        let held = self.pages.get(k).map(|page| page.check);
        if records.len() != PAGE_RECORDS || held != Some(self.page_check(first, &records)) {
            return Err((
                CorruptionReason::ManifestUnparseable,
                format!(
                    "manifest lines {} to {}, read again, are not the records validated at load: \
                     the manifest was rewritten",
                    first + 1,
                    first + PAGE_RECORDS
                ),
            ));
        }
        Ok(PageRecords(records.into()))
    }

    /// About how many bytes this holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.records.capacity() * std::mem::size_of::<Compact>()
            + self.pages.capacity() * std::mem::size_of::<RecordPage>()
            + self.page_starts.capacity() * std::mem::size_of::<u64>()
            + self.pins.capacity() * (std::mem::size_of::<(u32, u32)>() + 1)
            + self.far_pins.capacity() * std::mem::size_of::<(u32, usize)>()
            + self.foreign_id_bytes
            + self
                .other_paths
                .values()
                .map(|p| p.len() + 64)
                .sum::<usize>()
    }

    /// The total size of the segments holding events from `first` on, of the held records (a
    /// record out of memory attests only events that are too).
    pub fn segment_bytes_from(&self, first: u64) -> u64 {
        self.records
            .iter()
            .map(|r| match r {
                Compact::Segment { last, bytes, .. } if last.get() >= first => *bytes,
                _ => 0,
            })
            .sum()
    }

    /// The `segment_closed` records of the events from `position` on, in order (the ones out
    /// of memory read again with `read`).
    pub(crate) fn segments_from_in(
        &self,
        position: usize,
        read: PageReader<'_>,
    ) -> Result<Vec<SegmentClosed>, StoreError> {
        let Some(spot) = self.spot_in(position, read)? else {
            return Ok(Vec::new());
        };
        let mut segments = Vec::new();
        for index in spot.index..self.len() {
            if let Some(ManifestRecord::SegmentClosed(s)) = self.get_in(index, read)? {
                segments.push(s);
            }
        }
        Ok(segments)
    }

    /// The `segment_closed` record at `spot`, read again with `read` when out of memory.
    pub(crate) fn segment_in(
        &self,
        spot: &SegmentSpot,
        read: PageReader<'_>,
    ) -> Result<Option<SegmentClosed>, StoreError> {
        Ok(match self.get_in(spot.index, read)? {
            Some(ManifestRecord::SegmentClosed(s)) => Some(s),
            _ => None,
        })
    }

    /// Where the segment attesting the event at `position` is (see
    /// [`ManifestLog::held_spot_of`]); a segment out of memory is found in its page, read
    /// again with `read`.
    pub(crate) fn spot_in(
        &self,
        position: usize,
        read: PageReader<'_>,
    ) -> Result<Option<SegmentSpot>, StoreError> {
        if let Some(spot) = self.held_spot_of(position) {
            return Ok(Some(spot));
        }
        let at = position as u64;
        let Some(k) = self
            .pages
            .partition_point(|page| page.segments_from <= at)
            .checked_sub(1)
        else {
            return Ok(None);
        };
        let page = read(k)?;
        Ok(page.0.iter().enumerate().find_map(|(i, r)| match r {
            Compact::Segment {
                first,
                last,
                sha256,
                ..
            } if first.get() <= at && at <= last.get() => Some(SegmentSpot {
                index: k * PAGE_RECORDS + i,
                first: first.get(),
                last: last.get(),
                sha256: *sha256,
            }),
            _ => None,
        }))
    }

    /// Where the held segment attesting the event at `position` is, without rebuilding its
    /// record (a reread of a plan read recently needs no more): a binary search over the held
    /// records (segments are committed in ascending, contiguous order); from a pin it steps
    /// back to the segment the pin follows (D217). `None` for an event no held segment attests.
    pub(crate) fn held_spot_of(&self, position: usize) -> Option<SegmentSpot> {
        let position = position as u64;
        let base = self.paged();
        let segment_at = |i: usize| {
            self.records[..=i]
                .iter()
                .enumerate()
                .rev()
                .find_map(|(at, record)| match record {
                    Compact::Segment { first, last, .. } => Some((at, first.get(), last.get())),
                    Compact::Pin { .. } => None,
                })
        };
        let (mut low, mut high) = (0, self.records.len());
        while low < high {
            let middle = low + (high - low) / 2;
            let Some((at, first, last)) = segment_at(middle) else {
                low = middle + 1;
                continue;
            };
            if position < first {
                high = at;
            } else if position > last {
                low = middle + 1;
            } else {
                return match &self.records[at] {
                    Compact::Segment { sha256, .. } => Some(SegmentSpot {
                        index: base + at,
                        first,
                        last,
                        sha256: *sha256,
                    }),
                    Compact::Pin { .. } => None,
                };
            }
        }
        None
    }

    fn rebuild(&self, index: usize, record: &Compact) -> ManifestRecord {
        // Every place below the length held a record whose index it was (see `push`).
        let manifest_index = ManifestIndex::new(index as u64).unwrap_or(ManifestIndex::ZERO);
        let session_id = self.session_id.clone();
        match record {
            Compact::Segment {
                first,
                last,
                bytes,
                sha256,
            } => ManifestRecord::SegmentClosed(SegmentClosed {
                manifest_index,
                session_id,
                first_event_index: *first,
                last_event_index: *last,
                segment_rel_path: self
                    .other_paths
                    .get(&(index as u64))
                    .cloned()
                    .unwrap_or_else(|| segment_rel_path(*first, *last)),
                sha256: Sha256Digest::from_bytes(sha256),
                bytes: *bytes,
            }),
            Compact::Pin {
                event_index,
                snapshot,
                created_by_event_id,
            } => ManifestRecord::SnapshotPinned(SnapshotPinned {
                manifest_index,
                session_id,
                event_index: *event_index,
                snapshot_ref: snapshot_ref_of(snapshot),
                created_by_event_id: created_by_event_id.id(),
            }),
        }
    }
}

/// A segment's place in a [`ManifestLog`] and what names its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SegmentSpot {
    /// Its manifest index.
    pub index: usize,
    pub first: u64,
    pub last: u64,
    pub sha256: [u8; 32],
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> SessionId {
        SessionId::parse("sess_0123456789abcdef").unwrap_or_else(|e| panic!("{e}"))
    }

    fn at(n: u64) -> EventIndex {
        EventIndex::new(n).unwrap_or_else(|| panic!("{n}"))
    }

    fn segment(index: u64, first: u64, last: u64, path: Option<&str>) -> ManifestRecord {
        let (f, l) = (at(first), at(last));
        ManifestRecord::SegmentClosed(SegmentClosed {
            manifest_index: ManifestIndex::new(index).unwrap_or_else(|| panic!("{index}")),
            session_id: session(),
            first_event_index: f,
            last_event_index: l,
            segment_rel_path: path.map_or_else(|| segment_rel_path(f, l), str::to_owned),
            sha256: Sha256Digest::from_bytes(&[index as u8; 32]),
            bytes: 100 + index,
        })
    }

    fn pin(index: u64, event: u64) -> ManifestRecord {
        ManifestRecord::SnapshotPinned(SnapshotPinned {
            manifest_index: ManifestIndex::new(index).unwrap_or_else(|| panic!("{index}")),
            session_id: session(),
            event_index: at(event),
            snapshot_ref: SnapshotRef::from_digest(Sha256Digest::from_bytes(&[event as u8; 32])),
            created_by_event_id: EventId::parse(&format!("evt_{event:016}"))
                .unwrap_or_else(|e| panic!("{e}")),
        })
    }

    /// A pin whose event id is not one a mint writes (kept as text, D232).
    fn pin_of_foreign_id(index: u64, event: u64) -> ManifestRecord {
        let mut record = pin(index, event);
        if let ManifestRecord::SnapshotPinned(p) = &mut record {
            p.created_by_event_id =
                EventId::parse(&format!("evt_imported{event}")).unwrap_or_else(|e| panic!("{e}"));
        }
        record
    }

    fn pinned_ref(event: u64) -> SnapshotRef {
        SnapshotRef::from_digest(Sha256Digest::from_bytes(&[event as u8; 32]))
    }

    /// A reader for a log with nothing out of memory.
    fn nothing_paged(k: usize) -> Result<PageRecords, StoreError> {
        Err(StoreError::Internal {
            detail: format!("page {k} was read, and nothing is out of memory"),
        })
    }

    fn all(log: &ManifestLog) -> Vec<ManifestRecord> {
        log.records_in(&nothing_paged)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn is_pinned(log: &ManifestLog, event: u64) -> bool {
        log.is_pinned_in(&pinned_ref(event), &nothing_paged)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Every record comes back equal to the one pushed, a path of another writer's naming
    /// and an event id of another's minting included, and a segment is found for each event it
    /// attests; the pins' lookup follows the records.
    /// decision: D231, D232
    #[test]
    fn records_come_back_as_they_were_pushed() {
        let records = vec![
            segment(0, 0, 1, None),
            pin(1, 1),
            segment(2, 2, 4, Some("events/other-name.jsonl")),
            pin(3, 3),
            pin_of_foreign_id(4, 4),
            segment(5, 5, 5, None),
        ];
        let mut log = ManifestLog::new(session());
        log.extend(records.clone());
        assert_eq!(all(&log), records);
        assert_eq!(log.last(), records.last().cloned());
        let found = |position| {
            log.spot_in(position, &nothing_paged)
                .unwrap_or_else(|e| panic!("{e}"))
                .map(|s| s.index)
        };
        assert_eq!(
            (0..=6).map(found).collect::<Vec<_>>(),
            vec![Some(0), Some(0), Some(2), Some(2), Some(2), Some(5), None]
        );
        assert_eq!(log.segment_bytes_from(3), 102 + 105);
        assert_eq!(
            log.pinned_in(&nothing_paged)
                .unwrap_or_else(|e| panic!("{e}"))
                .len(),
            3
        );
        assert!(matches!(
            log.records[1],
            Compact::Pin {
                created_by_event_id: PinEventId::Minted(_),
                ..
            }
        ));
        assert!(matches!(
            log.records[4],
            Compact::Pin {
                created_by_event_id: PinEventId::Text(_),
                ..
            }
        ));
        let pinned = |log: &ManifestLog| (0..6).filter(|&e| is_pinned(log, e)).collect::<Vec<_>>();
        assert_eq!(pinned(&log), vec![1, 3, 4]);
        log.truncate(3);
        assert_eq!(all(&log), records[..3]);
        assert_eq!(pinned(&log), vec![1]);
        log.truncate(2);
        assert!(log.other_paths.is_empty());
        assert_eq!(all(&log), records[..2]);
        log.truncate(1);
        assert_eq!(pinned(&log), Vec::<u64>::new());
    }

    /// Many pins, the lookup growing past its first tables, each found and no other.
    /// decision: D232
    #[test]
    fn every_pin_is_found_as_the_lookup_grows() {
        let mut log = ManifestLog::new(session());
        for event in 0..200u64 {
            log.push(pin(event, event));
        }
        assert!((0..200).all(|e| is_pinned(&log, e)));
        assert!(!is_pinned(&log, 238));
    }

    /// A manifest of `advances` commits (a segment of three events and a pin each; every
    /// eleventh pin's event id not minted), as
    /// its file's bytes, and its records with where each line starts.
    fn manifest_file(advances: u64) -> (Vec<u8>, Vec<(ManifestRecord, u64)>) {
        let mut file = Vec::new();
        let mut records = Vec::new();
        for advance in 0..advances {
            let index = advance * 2;
            let first = advance * 3;
            let mut pinned = if advance % 11 == 5 {
                pin_of_foreign_id(index + 1, first + 1)
            } else {
                pin(index + 1, first + 1)
            };
            if let ManifestRecord::SnapshotPinned(p) = &mut pinned {
                // A snapshot of its own per advance, past the 256 the helper's byte tells apart.
                let mut raw = [0u8; 32];
                raw[..8].copy_from_slice(&advance.to_le_bytes());
                p.snapshot_ref = SnapshotRef::from_digest(Sha256Digest::from_bytes(&raw));
            }
            for record in [segment(index, first, first + 2, None), pinned] {
                let start = file.len() as u64;
                let line = workrail_spec::jcs::to_canonical_string(&record)
                    .unwrap_or_else(|e| panic!("{e}"));
                file.extend_from_slice(line.as_bytes());
                file.push(b'\n');
                records.push((record, start));
            }
        }
        (file, records)
    }

    fn snapshot_of(advance: u64) -> SnapshotRef {
        let mut raw = [0u8; 32];
        raw[..8].copy_from_slice(&advance.to_le_bytes());
        SnapshotRef::from_digest(Sha256Digest::from_bytes(&raw))
    }

    /// The records before a given one leave memory a whole page at a time, and every question
    /// asked of the log (each record, every record, a segment for each event, each pin) is
    /// answered as before: from the held records, or from its page read again and checked. A
    /// page whose lines changed since is refused, naming what differs, never answered with
    /// other records. Records pushed without their line's place stay held.
    /// decision: D235
    #[test]
    fn records_leave_memory_a_page_at_a_time_and_come_back_checked() {
        let (file, records) = manifest_file(150);
        let mut log = ManifestLog::new(session());
        for (record, start) in records.clone() {
            log.push_at(record, Some(start));
        }
        let held_before = log.heap_bytes();
        log.page_out_before(200);
        assert_eq!(log.paged(), 3 * PAGE_RECORDS);
        assert_eq!(log.len(), 300);
        assert!(
            log.heap_bytes() * 2 < held_before,
            "{} of {held_before} bytes held after 192 of 300 records left",
            log.heap_bytes()
        );
        let reads = std::cell::Cell::new(0);
        let read = |k: usize| {
            reads.set(reads.get() + 1);
            let place = log
                .page_place(k)
                .unwrap_or_else(|| panic!("page {k} is held"));
            let bytes = &file[place.offset as usize..(place.offset + place.len) as usize];
            log.decode_page(k, bytes)
                .map_err(|(reason, detail)| StoreError::Internal {
                    detail: format!("{}: {detail}", reason.as_str()),
                })
        };
        let expected: Vec<ManifestRecord> = records.iter().map(|(r, _)| r.clone()).collect();
        assert_eq!(
            log.records_in(&read).unwrap_or_else(|e| panic!("{e}")),
            expected
        );
        for (index, record) in expected.iter().enumerate() {
            assert_eq!(
                log.get_in(index, &read)
                    .unwrap_or_else(|e| panic!("{e}"))
                    .as_ref(),
                Some(record)
            );
        }
        for position in 0..450usize {
            let spot = log
                .spot_in(position, &read)
                .unwrap_or_else(|e| panic!("{e}"))
                .unwrap_or_else(|| panic!("no segment for event {position}"));
            assert_eq!(spot.index, position / 3 * 2, "event {position}");
            let segment = log
                .segment_in(&spot, &read)
                .unwrap_or_else(|e| panic!("{e}"))
                .unwrap_or_else(|| panic!("no record at {}", spot.index));
            assert_eq!(
                Some(&ManifestRecord::SegmentClosed(segment)),
                expected.get(spot.index)
            );
        }
        assert_eq!(
            log.spot_in(450, &read).unwrap_or_else(|e| panic!("{e}")),
            None
        );
        let pinned = log.pinned_in(&read).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(pinned, (0..150).map(snapshot_of).collect::<Vec<_>>());
        for advance in 0..150 {
            assert!(
                log.is_pinned_in(&snapshot_of(advance), &read)
                    .unwrap_or_else(|e| panic!("{e}")),
                "advance {advance}"
            );
        }
        let before = reads.get();
        assert!(
            !log.is_pinned_in(&snapshot_of(150), &read)
                .unwrap_or_else(|e| panic!("{e}"))
        );
        assert_eq!(reads.get(), before, "a snapshot no pin names reads no page");
        assert_eq!(
            log.segments_from_in(444, &read)
                .unwrap_or_else(|e| panic!("{e}"))
                .len(),
            2
        );

        // Lines changed since they were validated: refused, with what differs.
        let place = log
            .page_place(1)
            .unwrap_or_else(|| panic!("page 1 is held"));
        let page = file[place.offset as usize..(place.offset + place.len) as usize].to_vec();
        let refused = |bytes: Vec<u8>| match log.decode_page(1, &bytes) {
            Ok(_) => panic!("changed lines were answered"),
            Err((reason, detail)) => (reason, detail),
        };
        let text = String::from_utf8(page.clone()).unwrap_or_else(|e| panic!("{e}"));
        let resized = text.replacen("\"bytes\":", "\"bytes\":9", 1);
        let (reason, detail) = refused(resized.into_bytes());
        assert_eq!(reason, CorruptionReason::ManifestUnparseable);
        assert!(detail.contains("not the records validated"), "{detail}");
        let renumbered = text.replacen("\"manifestIndex\":64", "\"manifestIndex\":65", 1);
        assert_eq!(
            refused(renumbered.into_bytes()).0,
            CorruptionReason::ManifestIndexGap
        );
        assert_eq!(
            refused(page[..page.len() - 1].to_vec()).0,
            CorruptionReason::ManifestUnparseable
        );
        let short = page[..page.iter().position(|&b| b == b'\n').unwrap_or(0) + 1].to_vec();
        assert_eq!(refused(short).0, CorruptionReason::ManifestUnparseable);

        // Records without their line's place stay held, and so do the pages after them.
        let mut log = ManifestLog::new(session());
        for (i, (record, start)) in records.into_iter().enumerate() {
            log.push_at(record, (i != 2 * PAGE_RECORDS).then_some(start));
        }
        log.page_out_before(300);
        assert_eq!(log.paged(), PAGE_RECORDS, "page 2 starts without its place");
    }
}

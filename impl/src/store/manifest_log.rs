//! A loaded session's committed manifest records, held compactly (D231).
//!
//! A long session commits a `segment_closed` and a `snapshot_pinned` per advance, and a loaded
//! session keeps every record (its segments are where forgotten events are read again, D225).
//! As parsed records they cost about 330 bytes per advance: each record's session id, its own
//! index, a segment's path as text and its digest as 71 characters of hex. Here a segment is
//! its event bounds, size and raw digest, a pin its event index and the ids it shares with its
//! `node_created`; the session id, each record's index (its place) and a segment's canonical
//! path are implied. A record is rebuilt, equal to the one the manifest holds, when asked for.

use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

use hashbrown::HashTable;
use workrail_spec::ids::{
    EventId, EventIndex, ManifestIndex, SessionId, Sha256Digest, SnapshotRef,
};
use workrail_spec::manifest::{ManifestRecord, SegmentClosed, SnapshotPinned, segment_rel_path};

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

/// The records of one session, ascending and contiguous from manifest index 0.
#[derive(Debug, Clone)]
pub struct ManifestLog {
    session_id: SessionId,
    records: Vec<Compact>,
    /// The paths of segments whose path is not the canonical one for their bounds (a writer
    /// other than this one may name them otherwise), by manifest index.
    other_paths: BTreeMap<u64, String>,
    /// The manifest indexes of the pins, found by their snapshot (D232): 4 bytes a pin, where
    /// a set of the refs would take 16 and a control byte (the refs' text is the records').
    pins: HashTable<u32>,
    /// Pins from manifest index 2^32 on (a manifest that long is not written in practice).
    far_pins: Vec<usize>,
    hasher: RandomState,
    /// The heap bytes of the pins' event ids kept as text (see [`PinEventId`]).
    foreign_id_bytes: usize,
}

impl PartialEq for ManifestLog {
    fn eq(&self, other: &Self) -> bool {
        // The pins' lookup follows from the records.
        self.session_id == other.session_id
            && self.records == other.records
            && self.other_paths == other.other_paths
    }
}

impl Eq for ManifestLog {}

impl ManifestLog {
    /// No records yet, of `session_id`.
    pub fn new(session_id: SessionId) -> Self {
        Self {
            session_id,
            records: Vec::new(),
            other_paths: BTreeMap::new(),
            pins: HashTable::new(),
            far_pins: Vec::new(),
            hasher: RandomState::new(),
            foreign_id_bytes: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The record at manifest index `index`.
    pub fn get(&self, index: usize) -> Option<ManifestRecord> {
        self.records.get(index).map(|r| self.rebuild(index, r))
    }

    pub fn last(&self) -> Option<ManifestRecord> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    /// Every record, rebuilt in order.
    pub fn iter(&self) -> Records<'_> {
        Records { log: self, next: 0 }
    }

    /// The snapshots pinned so far, in order.
    pub fn pinned(&self) -> impl Iterator<Item = SnapshotRef> + '_ {
        self.records.iter().filter_map(|r| match r {
            Compact::Pin { snapshot, .. } => Some(snapshot_ref_of(snapshot)),
            Compact::Segment { .. } => None,
        })
    }

    /// Whether a pin of `snapshot` is among the records.
    pub fn is_pinned(&self, snapshot: &SnapshotRef) -> bool {
        self.is_pinned_raw(&snapshot.digest().bytes())
    }

    /// Whether a pin of the snapshot whose raw digest is `raw` is among the records.
    fn is_pinned_raw(&self, raw: &[u8; 32]) -> bool {
        let names = |index: usize| matches!(&self.records[index], Compact::Pin { snapshot, .. } if snapshot == raw);
        self.pins
            .find(self.hasher.hash_one(raw), |&i| names(i as usize))
            .is_some()
            || self.far_pins.iter().any(|&i| names(i))
    }

    /// Appends `record`, the next one: its manifest index is this log's length and its session
    /// this log's (the loader and the committer check both before; a record saying otherwise
    /// would be rebuilt with the index and session it is held at).
    pub fn push(&mut self, record: ManifestRecord) {
        let index = self.records.len() as u64;
        let compact = match record {
            ManifestRecord::SegmentClosed(s) => {
                if s.segment_rel_path != segment_rel_path(s.first_event_index, s.last_event_index) {
                    self.other_paths.insert(index, s.segment_rel_path);
                }
                Compact::Segment {
                    first: s.first_event_index,
                    last: s.last_event_index,
                    bytes: s.bytes,
                    sha256: s.sha256.bytes(),
                }
            }
            ManifestRecord::SnapshotPinned(p) => {
                let snapshot = p.snapshot_ref.digest().bytes();
                if !self.is_pinned_raw(&snapshot) {
                    self.index_pin(index as usize, snapshot);
                }
                Compact::Pin {
                    event_index: p.event_index,
                    snapshot,
                    created_by_event_id: {
                        let id = PinEventId::of(p.created_by_event_id);
                        self.foreign_id_bytes += id.heap_bytes();
                        id
                    },
                }
            }
        };
        crate::growth::reserve_bounded(&mut self.records, 1);
        self.records.push(compact);
    }

    /// Files the pin of `snapshot` at manifest index `index` in the pins' lookup.
    fn index_pin(&mut self, index: usize, snapshot: [u8; 32]) {
        let Ok(near) = u32::try_from(index) else {
            self.far_pins.push(index);
            return;
        };
        let Self {
            records,
            pins,
            hasher,
            ..
        } = self;
        pins.insert_unique(hasher.hash_one(snapshot), near, |&i| {
            match &records[i as usize] {
                Compact::Pin { snapshot, .. } => hasher.hash_one(snapshot),
                // Only pins are filed.
                Compact::Segment { .. } => 0,
            }
        });
    }

    pub fn extend(&mut self, records: impl IntoIterator<Item = ManifestRecord>) {
        for record in records {
            self.push(record);
        }
    }

    /// Keeps the first `len` records.
    pub fn truncate(&mut self, len: usize) {
        self.records.truncate(len);
        self.pins.retain(|&mut i| (i as usize) < len);
        self.far_pins.retain(|&i| i < len);
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
        self.other_paths.retain(|&index, _| index < len as u64);
    }

    pub fn shrink_to_fit(&mut self) {
        self.records.shrink_to_fit();
    }

    /// About how many bytes this holds on the heap.
    pub fn heap_bytes(&self) -> usize {
        self.records.capacity() * std::mem::size_of::<Compact>()
            + self.pins.capacity() * (std::mem::size_of::<u32>() + 1)
            + self.far_pins.capacity() * std::mem::size_of::<usize>()
            + self.foreign_id_bytes
            + self
                .other_paths
                .values()
                .map(|p| p.len() + 64)
                .sum::<usize>()
    }

    /// The total size of the segments holding events from `first` on.
    pub fn segment_bytes_from(&self, first: u64) -> u64 {
        self.records
            .iter()
            .map(|r| match r {
                Compact::Segment { last, bytes, .. } if last.get() >= first => *bytes,
                _ => 0,
            })
            .sum()
    }

    /// The `segment_closed` record attesting the event at `position` (see
    /// [`ManifestLog::spot_of`]).
    pub fn segment_of(&self, position: usize) -> Option<SegmentClosed> {
        self.spot_of(position)
            .and_then(|spot| self.segment_at(&spot))
    }

    /// The `segment_closed` record at `spot`.
    pub(crate) fn segment_at(&self, spot: &SegmentSpot) -> Option<SegmentClosed> {
        match self.get(spot.index) {
            Some(ManifestRecord::SegmentClosed(s)) => Some(s),
            _ => None,
        }
    }

    /// Where the segment attesting the event at `position` is, without rebuilding its record
    /// (a reread of a plan read recently needs no more): a binary search over the records
    /// (segments are committed in ascending, contiguous order); from a pin it steps back to the
    /// segment the pin follows (D217).
    pub(crate) fn spot_of(&self, position: usize) -> Option<SegmentSpot> {
        let position = position as u64;
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
                        index: at,
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

/// The records of a [`ManifestLog`], rebuilt in order.
#[derive(Debug, Clone)]
pub struct Records<'a> {
    log: &'a ManifestLog,
    next: usize,
}

impl Iterator for Records<'_> {
    type Item = ManifestRecord;

    fn next(&mut self) -> Option<ManifestRecord> {
        let record = self.log.get(self.next)?;
        self.next += 1;
        Some(record)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.log.len().saturating_sub(self.next);
        (left, Some(left))
    }
}

impl ExactSizeIterator for Records<'_> {}

impl<'a> IntoIterator for &'a ManifestLog {
    type Item = ManifestRecord;
    type IntoIter = Records<'a>;

    fn into_iter(self) -> Records<'a> {
        self.iter()
    }
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
        assert_eq!(log.iter().collect::<Vec<_>>(), records);
        assert_eq!(log.last(), records.last().cloned());
        let found = |position| log.segment_of(position).map(|s| s.manifest_index.get());
        assert_eq!(
            (0..=6).map(found).collect::<Vec<_>>(),
            vec![Some(0), Some(0), Some(2), Some(2), Some(2), Some(5), None]
        );
        assert_eq!(log.segment_bytes_from(3), 102 + 105);
        assert_eq!(log.pinned().count(), 3);
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
        let pinned = |log: &ManifestLog| {
            (0..6)
                .filter(|&e| log.is_pinned(&pinned_ref(e)))
                .collect::<Vec<_>>()
        };
        assert_eq!(pinned(&log), vec![1, 3, 4]);
        log.truncate(3);
        assert_eq!(log.iter().collect::<Vec<_>>(), records[..3]);
        assert_eq!(pinned(&log), vec![1]);
        log.truncate(2);
        assert!(log.other_paths.is_empty());
        assert_eq!(log.iter().collect::<Vec<_>>(), records[..2]);
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
        assert!((0..200).all(|e| log.is_pinned(&pinned_ref(e))));
        assert!(!log.is_pinned(&pinned_ref(238)));
    }
}

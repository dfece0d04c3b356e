//! A session's committed events as a server holds them: the newest parsed in memory, the older
//! ones read again from their segments when a call asks for them (decision D225).
//!
//! A long session's parsed log was the largest thing a server held, and almost every call reads
//! only its newest events: the projection is extended by what was appended, and an advance reads
//! the records of the node it leaves. So a loaded session keeps its last `resident` events
//! (between one and two times that many, cut at plan boundaries) and forgets the rest. A read of
//! a forgotten event reads its plan's segment again and checks it against the size and sha256
//! its `segment_closed` record attests, so a re-read never answers with bytes other than the
//! ones validated at load.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use workrail_spec::event::{EventData, IdPool, OutputPayload, SessionEvent};
use workrail_spec::ids::SessionId;
use workrail_spec::jcs::sha256;
use workrail_spec::manifest::SegmentClosed;

use super::error::StoreError;
use super::fs::StoreFs;
use super::health::{Corruption, CorruptionReason, SessionHealth};
use super::layout;
use super::load::LoadedSession;
use super::manifest_log::{ManifestLog, PAGE_RECORDS, PagePlace, PageRecords, SegmentSpot};

/// How many of a session's newest events a loaded session keeps parsed, at least, by default:
/// about 180 advances of a loop, far more than any call but a replay or a first projection reads.
pub const DEFAULT_RESIDENT_EVENTS: usize = 1024;

/// The fewest resident events a store may be set to keep: new events pool their ids with the
/// last 64 (`POOLED_RECENT_EVENTS`), and a plan is rarely more than a dozen events.
pub const MIN_RESIDENT_EVENTS: usize = 64;

/// The environment variable that sets how many events a loaded session keeps parsed.
pub const RESIDENT_EVENTS_ENV: &str = "WORKRAIL_RESIDENT_EVENTS";

/// `WORKRAIL_RESIDENT_EVENTS` when set (a whole number, at least [`MIN_RESIDENT_EVENTS`]), else
/// the default.
pub fn resident_events_from_env() -> Result<usize, String> {
    match std::env::var(RESIDENT_EVENTS_ENV) {
        Err(_) => Ok(DEFAULT_RESIDENT_EVENTS),
        Ok(value) => match value.trim().parse::<usize>() {
            Ok(n) if n >= MIN_RESIDENT_EVENTS => Ok(n),
            _ => Err(format!(
                "{RESIDENT_EVENTS_ENV}={value:?} is not a whole number of at least {MIN_RESIDENT_EVENTS}"
            )),
        },
    }
}

/// Where the segments of forgotten events are read again. Its errors are the store's own, so
/// a database that fails is reported as one, not as a disk.
pub trait SegmentSource: Send + Sync + fmt::Debug {
    /// The bytes of `segment` of `session`; `None` when the file is gone.
    fn read(
        &self,
        session: &SessionId,
        segment: &SegmentClosed,
    ) -> Result<Option<Vec<u8>>, StoreError>;

    /// Whether `session` still has its manifest (a segment gone with it was deleted, not lost).
    fn has_manifest(&self, session: &SessionId) -> Result<bool, StoreError>;

    /// The bytes of each of `segments`, consecutive segments of `session`, in order (`None` for
    /// one that is gone). One read each by default; a store that answers many in one round
    /// trip overrides it, so a long read of forgotten events is not one round trip per plan.
    fn read_many(
        &self,
        session: &SessionId,
        segments: &[&SegmentClosed],
    ) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        segments.iter().map(|s| self.read(session, s)).collect()
    }

    /// Whether a loaded session's oldest manifest records may leave memory, read again with
    /// [`SegmentSource::read_manifest`] (D235). A store that does not read its manifest again
    /// keeps every record.
    fn rereads_manifest(&self) -> bool {
        false
    }

    /// The lines of `session`'s manifest records `page.first..page.first + page.count`, which
    /// take `page.len` bytes from byte `page.offset` of its manifest as the file store writes
    /// it (fewer when there are fewer); `None` when the manifest is gone.
    fn read_manifest(
        &self,
        session: &SessionId,
        page: &ManifestPage,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let _ = page;
        Err(StoreError::Internal {
            detail: format!("the manifest of session {session} is not read again by this store"),
        })
    }
}

/// Where a page of manifest records is (D235): its first record and how many, and the bytes
/// their lines take in the manifest as the file store writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManifestPage {
    pub first: u64,
    pub count: u64,
    pub offset: u64,
    pub len: u64,
}

/// The file store's segments.
#[derive(Debug)]
pub(crate) struct FileSegments(pub Arc<dyn StoreFs>);

impl SegmentSource for FileSegments {
    fn read(
        &self,
        session: &SessionId,
        segment: &SegmentClosed,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.0
            .read(&layout::session_dir(session).join(&segment.segment_rel_path))
            .map_err(|e| io_failed(session, e))
    }

    fn has_manifest(&self, session: &SessionId) -> Result<bool, StoreError> {
        Ok(self
            .0
            .len(&layout::manifest_path(session))
            .map_err(|e| io_failed(session, e))?
            .is_some())
    }

    fn rereads_manifest(&self) -> bool {
        true
    }

    fn read_manifest(
        &self,
        session: &SessionId,
        page: &ManifestPage,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.0
            .read_range(&layout::manifest_path(session), page.offset, page.len)
            .map_err(|e| StoreError::Io {
                session: Some(session.clone()),
                op: "read earlier manifest records",
                detail: e.to_string(),
            })
    }
}

fn io_failed(session: &SessionId, e: io::Error) -> StoreError {
    StoreError::Io {
        session: Some(session.clone()),
        op: "read an earlier segment",
        detail: e.to_string(),
    }
}

/// How a loaded session keeps its events: how many stay parsed, and where the others are read
/// again. Without a source every event stays.
#[derive(Debug, Clone)]
pub struct Residency {
    pub source: Option<Arc<dyn SegmentSource>>,
    pub resident: usize,
    /// The plans read again lately, shared by every session of one store.
    pub(crate) recent: Arc<RecentPlans>,
}

impl Default for Residency {
    fn default() -> Self {
        Self {
            source: None,
            resident: DEFAULT_RESIDENT_EVENTS,
            recent: Arc::default(),
        }
    }
}

/// How many plans read again stay parsed: a replay reads its plan's events several times (its
/// record, the plan's warnings, the prefix's last event), and a resent call reads it again.
const RECENT_PLANS: usize = 8;

/// The last plans read again, parsed, each named by its session, its first event and the sha256
/// its segment was checked against.
#[derive(Debug, Default)]
pub struct RecentPlans {
    plans: Mutex<VecDeque<RecentPlan>>,
    /// The last pages of manifest records read again (D235).
    pages: Mutex<VecDeque<RecentPage>>,
}

/// One page of [`RecentPlans::pages`]: its session, its number and its check, and its records.
#[derive(Debug)]
struct RecentPage {
    session: SessionId,
    k: usize,
    check: [u8; 16],
    records: PageRecords,
}

/// How many pages of manifest records read again stay parsed: a replay's plan and its
/// neighbours' records lie in one or two.
const RECENT_PAGES: usize = 4;

/// One plan of [`RecentPlans`].
#[derive(Debug)]
struct RecentPlan {
    session: SessionId,
    first: u64,
    sha256: [u8; 32],
    events: Arc<[SessionEvent]>,
}

impl RecentPlans {
    fn get(&self, session: &SessionId, segment: &SegmentSpot) -> Option<Arc<[SessionEvent]>> {
        let mut plans = self.plans.lock().unwrap_or_else(|p| p.into_inner());
        let at = plans.iter().position(|plan| {
            &plan.session == session && plan.first == segment.first && plan.sha256 == segment.sha256
        })?;
        let plan = plans.remove(at)?;
        let events = Arc::clone(&plan.events);
        plans.push_back(plan);
        Some(events)
    }

    fn put(&self, session: &SessionId, segment: &SegmentSpot, events: Arc<[SessionEvent]>) {
        let mut plans = self.plans.lock().unwrap_or_else(|p| p.into_inner());
        if plans.len() >= RECENT_PLANS {
            plans.pop_front();
        }
        plans.push_back(RecentPlan {
            session: session.clone(),
            first: segment.first,
            sha256: segment.sha256,
            events,
        });
    }
}

impl RecentPlans {
    fn page(&self, session: &SessionId, k: usize, place: &PagePlace) -> Option<PageRecords> {
        let pages = self.pages.lock().unwrap_or_else(|p| p.into_inner());
        pages
            .iter()
            .find(|p| &p.session == session && p.k == k && p.check == place.check)
            .map(|p| p.records.clone())
    }

    fn put_page(&self, session: &SessionId, k: usize, place: &PagePlace, page: PageRecords) {
        let mut pages = self.pages.lock().unwrap_or_else(|p| p.into_inner());
        if pages.len() >= RECENT_PAGES {
            pages.pop_front();
        }
        pages.push_back(RecentPage {
            session: session.clone(),
            k,
            check: place.check,
            records: page,
        });
    }
}

/// Page `k` of `manifest`'s records out of memory, read again from the store's manifest and
/// checked against what the load validated (D235), or taken from the pages read lately.
pub(crate) fn read_page(
    residency: &Residency,
    session: &SessionId,
    manifest: &ManifestLog,
    k: usize,
) -> Result<PageRecords, StoreError> {
    let Some(place) = manifest.page_place(k) else {
        return Err(StoreError::Internal {
            detail: format!("page {k} of the manifest records of session {session} is held"),
        });
    };
    if let Some(page) = residency.recent.page(session, k, &place) {
        return Ok(page);
    }
    let Some(source) = residency.source.as_deref() else {
        return Err(StoreError::Internal {
            detail: format!(
                "manifest records of session {session} are not held and there is nowhere to read them from"
            ),
        });
    };
    let page = ManifestPage {
        first: (k * PAGE_RECORDS) as u64,
        count: PAGE_RECORDS as u64,
        offset: place.offset,
        len: place.len,
    };
    let Some(bytes) = source.read_manifest(session, &page)? else {
        // The manifest is gone: the session was deleted while this view of it was held.
        return Err(StoreError::Deleted {
            session: session.clone(),
        });
    };
    let page = manifest
        .decode_page(k, &bytes)
        .map_err(|(reason, detail)| StoreError::Unhealthy {
            session: session.clone(),
            health: SessionHealth::CorruptTail(Corruption {
                reason,
                manifest_index: (k * PAGE_RECORDS) as u64,
                detail,
            }),
        })?;
    residency.recent.put_page(session, k, &place, page.clone());
    Ok(page)
}

impl Residency {
    /// Whether a log's oldest manifest records may leave memory (D235).
    pub(crate) fn pages_manifest(&self) -> bool {
        self.source
            .as_deref()
            .is_some_and(SegmentSource::rereads_manifest)
    }

    /// Whether a log holding `resident` parsed events should forget its oldest now: only past
    /// twice the limit, so the cut (a move of the kept events) comes once per `limit` appends.
    pub(crate) fn over(&self, resident: usize) -> bool {
        self.source.is_some() && resident > self.resident.saturating_mul(2)
    }
}

/// The committed events: `resident` holds those from index `first` on.
#[derive(Debug, Clone, Default)]
pub(crate) struct EventLog {
    first: usize,
    resident: Vec<SessionEvent>,
}

impl EventLog {
    pub(crate) fn len(&self) -> usize {
        self.first + self.resident.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The index of the first event held parsed.
    pub(crate) fn first_resident(&self) -> usize {
        self.first
    }

    pub(crate) fn resident(&self) -> &[SessionEvent] {
        &self.resident
    }

    pub(crate) fn into_resident(self) -> Vec<SessionEvent> {
        self.resident
    }

    pub(crate) fn resident_capacity(&self) -> usize {
        self.resident.capacity()
    }

    pub(crate) fn resident_mut(&mut self) -> &mut Vec<SessionEvent> {
        &mut self.resident
    }

    /// Event `index` when it is held parsed.
    pub(crate) fn get_resident(&self, index: usize) -> Option<&SessionEvent> {
        self.resident.get(index.checked_sub(self.first)?)
    }

    pub(crate) fn last(&self) -> Option<&SessionEvent> {
        self.resident.last()
    }

    /// Cuts the log to its first `len` events.
    pub(crate) fn truncate(&mut self, len: usize) {
        match len.checked_sub(self.first) {
            Some(keep) => self.resident.truncate(keep),
            None => {
                self.resident.clear();
                self.first = len;
            }
        }
    }

    /// Forgets the parsed events before index `cut`.
    pub(crate) fn forget_before(&mut self, cut: usize) {
        let drop = cut.saturating_sub(self.first).min(self.resident.len());
        if drop > 0 {
            self.resident.drain(..drop);
            self.first += drop;
        }
    }

    pub(crate) fn shrink_to_fit(&mut self) {
        self.resident.shrink_to_fit();
    }
}

/// Parses an attested segment's bytes: their size and sha256 must be the attested ones, and
/// their lines the events `[first, last]` of `session`, in order. Repeated ids share one text
/// through `ids`. A failure is the corruption reason and what was found.
pub(crate) fn parse_segment(
    session: &SessionId,
    segment: &SegmentClosed,
    bytes: &[u8],
    ids: &mut IdPool,
) -> Result<Vec<SessionEvent>, (CorruptionReason, String)> {
    use CorruptionReason::*;
    let path = &segment.segment_rel_path;
    if bytes.len() as u64 != segment.bytes {
        return Err((
            SegmentSizeMismatch,
            format!(
                "{path} has {} bytes, attested {}",
                bytes.len(),
                segment.bytes
            ),
        ));
    }
    if sha256(bytes) != segment.sha256 {
        return Err((
            SegmentDigestMismatch,
            format!("{path} does not match its attested sha256"),
        ));
    }
    let text =
        std::str::from_utf8(bytes).map_err(|e| (SegmentEventInvalid, format!("not UTF-8: {e}")))?;
    let first = segment.first_event_index.get();
    let mut events = Vec::new();
    for (n, line) in text.split_terminator('\n').enumerate() {
        let mut event = SessionEvent::from_json_str(line).map_err(|e| {
            let reason = if matches!(
                e,
                workrail_spec::artifact::ArtifactError::UnsupportedVersion { .. }
            ) {
                UnknownVersion
            } else {
                SegmentEventInvalid
            };
            (reason, format!("{path} line {}: {e}", n + 1))
        })?;
        let expected = first + events.len() as u64;
        if event.event_index().get() != expected || event.session_id() != session {
            return Err((
                SegmentBoundsMismatch,
                format!(
                    "{path} line {} holds eventIndex {} of {}, expected {expected} of {session}",
                    n + 1,
                    event.event_index(),
                    event.session_id()
                ),
            ));
        }
        event.share_ids(ids);
        events.push(event);
    }
    let count = events.len() as u64;
    if count == 0 || first + count - 1 != segment.last_event_index.get() || !text.ends_with('\n') {
        return Err((
            SegmentBoundsMismatch,
            format!(
                "{path} holds {count} events, attested [{}, {}]",
                segment.first_event_index, segment.last_event_index
            ),
        ));
    }
    Ok(events)
}

/// The bytes of the segments holding `range` that the recently read plans do not hold, read
/// in one call when there are several, by their first event index.
fn prefetch(
    residency: &Residency,
    source: &dyn SegmentSource,
    session: &SessionId,
    manifest: &ManifestLog,
    range: &Range<usize>,
) -> Result<HashMap<u64, Option<Vec<u8>>>, StoreError> {
    let read = |k| read_page(residency, session, manifest, k);
    let mut spots: Vec<SegmentSpot> = Vec::new();
    let mut at = range.start;
    while at < range.end {
        let Some(spot) = manifest.spot_in(at, &read)? else {
            break;
        };
        at = spot.last as usize + 1;
        if residency.recent.get(session, &spot).is_none() {
            spots.push(spot);
        }
    }
    if spots.len() < 2 {
        return Ok(HashMap::new());
    }
    let mut wanted: Vec<SegmentClosed> = Vec::with_capacity(spots.len());
    for spot in &spots {
        wanted.extend(manifest.segment_in(spot, &read)?);
    }
    let wanted: Vec<&SegmentClosed> = wanted.iter().collect();
    let read = source.read_many(session, &wanted)?;
    Ok(wanted
        .iter()
        .map(|s| s.first_event_index.get())
        .zip(read)
        .collect())
}

/// Reads the committed events `range` of `session` again from the segments `manifest` attests.
pub(crate) fn reread(
    residency: &Residency,
    session: &SessionId,
    manifest: &ManifestLog,
    range: Range<usize>,
) -> Result<Vec<SessionEvent>, StoreError> {
    let Some(source) = residency.source.as_deref() else {
        return Err(StoreError::Internal {
            detail: format!(
                "events {range:?} of session {session} are not held and there is nowhere to read them from"
            ),
        });
    };
    let mut ids = IdPool::default();
    let mut events = Vec::with_capacity(range.len());
    let mut prefetched = prefetch(residency, source, session, manifest, &range)?;
    let read = |k| read_page(residency, session, manifest, k);
    let mut at = range.start;
    while at < range.end {
        let no_segment = || StoreError::Internal {
            detail: format!("no committed segment of session {session} holds eventIndex {at}"),
        };
        let spot = manifest.spot_in(at, &read)?.ok_or_else(no_segment)?;
        let lost = |reason: CorruptionReason, detail: String| StoreError::Unhealthy {
            session: session.clone(),
            health: SessionHealth::CorruptTail(Corruption {
                reason,
                manifest_index: spot.index as u64,
                detail,
            }),
        };
        let skip = at - spot.first as usize;
        if let Some(plan) = residency.recent.get(session, &spot) {
            let take = (range.end - at).min(plan.len().saturating_sub(skip));
            if take > 0 {
                events.extend_from_slice(&plan[skip..skip + take]);
                at += take;
                continue;
            }
        }
        // Only a plan read from its source needs its whole record (its path).
        let segment = manifest.segment_in(&spot, &read)?.ok_or_else(no_segment)?;
        let bytes = match prefetched.remove(&segment.first_event_index.get()) {
            Some(bytes) => bytes,
            None => source.read(session, &segment)?,
        };
        let Some(bytes) = bytes else {
            // Gone with its manifest: the session was deleted while this view of it was held.
            if !source.has_manifest(session)? {
                return Err(StoreError::Deleted {
                    session: session.clone(),
                });
            }
            return Err(lost(
                CorruptionReason::SegmentMissing,
                format!("{} is attested but missing", segment.segment_rel_path),
            ));
        };
        let parsed: Arc<[SessionEvent]> = parse_segment(session, &segment, &bytes, &mut ids)
            .map_err(|(reason, detail)| lost(reason, detail))?
            .into();
        residency.recent.put(session, &spot, Arc::clone(&parsed));
        let take = (range.end - at).min(parsed.len().saturating_sub(skip));
        if take == 0 {
            return Err(StoreError::Internal {
                detail: format!(
                    "segment {} does not hold eventIndex {at}",
                    segment.segment_rel_path
                ),
            });
        }
        events.extend_from_slice(&parsed[skip..skip + take]);
        at += take;
    }
    Ok(events)
}

/// How many forgotten events a chunk of [`Events::chunks`] reads at most: enough that a first
/// projection settles its runs once per chunk, not once per plan.
const CHUNK_EVENTS: usize = 512;

/// The first `len` committed events of a session, or a slice of events: what a projection or a
/// response is built from. Reads of events a loaded session no longer holds parsed go to their
/// segments, so they can fail.
#[derive(Debug, Clone, Copy)]
pub enum Events<'a> {
    Slice(&'a [SessionEvent]),
    Log {
        session: &'a LoadedSession,
        len: usize,
    },
}

impl<'a> From<&'a [SessionEvent]> for Events<'a> {
    fn from(events: &'a [SessionEvent]) -> Self {
        Self::Slice(events)
    }
}

impl<'a> From<&'a Vec<SessionEvent>> for Events<'a> {
    fn from(events: &'a Vec<SessionEvent>) -> Self {
        Self::Slice(events)
    }
}

impl<'a> Events<'a> {
    pub fn len(self) -> usize {
        match self {
            Self::Slice(events) => events.len(),
            Self::Log { len, .. } => len,
        }
    }

    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// The first `len` of these events.
    pub fn prefix(self, len: usize) -> Self {
        match self {
            Self::Slice(events) => Self::Slice(&events[..len.min(events.len())]),
            Self::Log { session, len: own } => Self::Log {
                session,
                len: len.min(own),
            },
        }
    }

    /// Event `index` when it is held parsed (always, for a slice).
    pub fn resident(self, index: usize) -> Option<&'a SessionEvent> {
        match self {
            Self::Slice(events) => events.get(index),
            Self::Log { session, len } if index < len => session.log().get_resident(index),
            Self::Log { .. } => None,
        }
    }

    /// Event `index`, `None` past the end.
    pub fn get(self, index: usize) -> Result<Option<Cow<'a, SessionEvent>>, StoreError> {
        if let Some(event) = self.resident(index) {
            return Ok(Some(Cow::Borrowed(event)));
        }
        if index >= self.len() {
            return Ok(None);
        }
        Ok(self
            .range(index..index + 1)?
            .into_owned()
            .pop()
            .map(Cow::Owned))
    }

    /// The notes of the `node_output_appended` event at `index` (`None` when that event is not
    /// a notes output): what a projection's current output points at (D226).
    pub fn notes_at(self, index: usize) -> Result<Option<Cow<'a, str>>, StoreError> {
        fn notes(event: &SessionEvent) -> Option<&str> {
            match event.data() {
                EventData::NodeOutputAppended(o) => match &o.payload {
                    OutputPayload::Notes { notes_markdown } => Some(notes_markdown.as_str()),
                    OutputPayload::ArtifactRef { .. } => None,
                },
                _ => None,
            }
        }
        Ok(match self.get(index)? {
            Some(Cow::Borrowed(event)) => notes(event).map(Cow::Borrowed),
            Some(Cow::Owned(event)) => notes(&event).map(|text| Cow::Owned(text.to_owned())),
            None => None,
        })
    }

    /// The last event.
    pub fn last(self) -> Result<Option<Cow<'a, SessionEvent>>, StoreError> {
        match self.len() {
            0 => Ok(None),
            len => self.get(len - 1),
        }
    }

    /// The events in `range` (cut to these events), borrowed when all are held parsed.
    pub fn range(self, range: Range<usize>) -> Result<Cow<'a, [SessionEvent]>, StoreError> {
        let end = range.end.min(self.len());
        let start = range.start.min(end);
        match self {
            Self::Slice(events) => Ok(Cow::Borrowed(&events[start..end])),
            Self::Log { session, .. } => {
                let log = session.log();
                let first = log.first_resident();
                if start >= first {
                    return Ok(Cow::Borrowed(&log.resident()[start - first..end - first]));
                }
                let mut events = session.reread(start..end.min(first))?;
                if end > first {
                    events.extend_from_slice(&log.resident()[..end - first]);
                }
                Ok(Cow::Owned(events))
            }
        }
    }

    /// All of these events (borrowed when all are held parsed).
    pub fn all(self) -> Result<Cow<'a, [SessionEvent]>, StoreError> {
        self.range(0..self.len())
    }

    /// The events from `from` on, in consecutive chunks, each with the index of its first
    /// event: forgotten events are read a few plans at a time, so a pass over a whole long log
    /// never holds all of it parsed at once.
    pub fn chunks(self, from: usize) -> Chunks<'a> {
        Chunks {
            events: self,
            at: from,
        }
    }
}

/// See [`Events::chunks`].
#[derive(Debug)]
pub struct Chunks<'a> {
    events: Events<'a>,
    at: usize,
}

impl<'a> Iterator for Chunks<'a> {
    type Item = Result<(usize, Cow<'a, [SessionEvent]>), StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        let len = self.events.len();
        if self.at >= len {
            return None;
        }
        let start = self.at;
        let end = match self.events {
            Events::Slice(_) => len,
            Events::Log { session, .. } => {
                let first = session.log().first_resident();
                if start >= first {
                    len
                } else {
                    (start + CHUNK_EVENTS).min(first)
                }
            }
        };
        let chunk = self.events.range(start..end);
        self.at = match &chunk {
            Ok(events) if !events.is_empty() => start + events.len(),
            _ => len,
        };
        Some(chunk.map(|events| (start, events)))
    }
}

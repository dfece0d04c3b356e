//! Decision D225: a loaded session keeps only its newest events parsed and reads older ones
//! again from their segments, checked against what the manifest attests. Every answer stays
//! what it was when all events were held: replays of forgotten attempts, rehydrates of old
//! nodes, a cold process, a whole read of the log. A segment that changed or vanished after
//! load is an error, never other bytes.
//!
//! Decision D226: a projection holds where each node's current notes are, not their text; a
//! recap reads them from the log, forgotten or not, and answers as a server holding every event.
//!
//! Decision D235: the manifest records of forgotten events leave memory a page at a time and are
//! read again from the manifest, checked against what the load validated.

use std::path::Path;
use std::sync::Arc;

use workrail::entropy::SeededEntropy;
use workrail::protocol::Workrail;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail::store::{
    CorruptionReason, MIN_RESIDENT_EVENTS, SessionHealth, SessionRead, SessionStore, StoreError,
};
use workrail_spec::error::ErrorCode;
use workrail_spec::event::{EventData, OutputPayload};
use workrail_spec::ids::SessionId;
use workrail_spec::manifest::ManifestRecord;
use workrail_spec::tools::ExecutionOutput;

use crate::nested_support::{
    advance, advance_input, advance_with_notes, catalog, rehydrate, rehydrate_input, start_nested,
};

/// A WorkRail over `fs` keeping the fewest events parsed a store may keep.
fn keeping_few(fs: &Arc<dyn StoreFs>, seed: u64) -> Workrail {
    Workrail::with_parts(
        Arc::clone(fs),
        catalog(),
        Arc::new(SeededEntropy::new(seed)),
    )
    .unwrap()
    .with_resident_events(MIN_RESIDENT_EVENTS)
}

fn session_of(out: &ExecutionOutput) -> SessionId {
    SessionId::parse(out.session.session_id.as_str()).unwrap()
}

/// A session of `advances` nested advances, with the input and answer of each.
fn long_session(
    wr: &Workrail,
    advances: usize,
) -> (SessionId, Vec<(ExecutionOutput, ExecutionOutput)>) {
    let mut out = start_nested(wr);
    let mut sent = Vec::new();
    for i in 0..advances {
        let next = advance(wr, out.clone(), i);
        sent.push((out, next.clone()));
        out = next;
    }
    (session_of(&out), sent)
}

/// decision: D225
#[test]
fn a_long_session_keeps_only_its_newest_events_parsed_and_reads_the_rest_back_whole() {
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    let wr = keeping_few(&fs, 31);
    let (session, _) = long_session(&wr, 120);
    let loaded = wr.sessions().load(&session).unwrap();
    let (first, resident) = loaded.resident_events();
    assert!(
        first > 0,
        "a session of {} events kept every one parsed",
        loaded.event_count()
    );
    assert_eq!(first + resident.len(), loaded.event_count());
    // Between one and two times the limit, and a plan more at most (cut at plan starts).
    assert!(
        resident.len() >= MIN_RESIDENT_EVENTS && resident.len() <= 2 * MIN_RESIDENT_EVENTS + 16,
        "{} events held parsed",
        resident.len()
    );
    // Every event read back is the event a store keeping all of them loads.
    let keeper = SessionStore::new(Arc::clone(&fs)).with_resident_events(usize::MAX / 4);
    let whole = keeper.load(&session).unwrap();
    assert_eq!(whole.resident_events().0, 0);
    let read_back = loaded.events().all().unwrap();
    assert_eq!(&read_back[..], whole.resident_events().1);
    for i in [0, 1, first - 1, first, loaded.event_count() - 1] {
        assert_eq!(
            loaded.events().get(i).unwrap().as_deref(),
            whole.resident_events().1.get(i),
            "event {i}"
        );
    }
    // A fresh load by a store keeping few events forgets as it reads.
    let fresh = SessionStore::new(Arc::clone(&fs))
        .with_resident_events(MIN_RESIDENT_EVENTS)
        .load(&session)
        .unwrap();
    assert!(fresh.resident_events().0 > 0);
    assert_eq!(&fresh.events().all().unwrap()[..], &read_back[..]);
}

/// decision: D225
#[test]
fn resending_a_forgotten_attempt_and_rehydrating_an_old_node_answer_as_the_first_time() {
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    let wr = keeping_few(&fs, 32);
    let (session, sent) = long_session(&wr, 120);
    assert!(wr.sessions().load(&session).unwrap().resident_events().0 > 0);
    for at in [3, 40] {
        let (input, answer) = &sent[at];
        assert_eq!(
            &advance(&wr, input.clone(), at),
            answer,
            "the resent ack of advance {at} in the same process"
        );
    }
    let rehydrated = rehydrate(&wr, &sent[5].1);
    assert_eq!(rehydrated.pending, sent[5].1.pending);
    // A new process: nothing cached, the log loaded keeping few events.
    let cold = keeping_few(&fs, 33);
    let (input, answer) = &sent[7];
    assert_eq!(&advance(&cold, input.clone(), 7), answer, "a cold process");
    assert_eq!(rehydrate(&cold, &sent[5].1), rehydrated);
    // The live tip still advances, and the session stays healthy.
    let last = sent.last().unwrap().1.clone();
    let next = advance(&cold, last, 120);
    assert!(next.ack_token.is_some() || next.is_complete);
    let whole = SessionStore::new(Arc::clone(&fs)).load(&session).unwrap();
    assert!(whole.health.is_healthy(), "{:?}", whole.health);
}

/// The path of the segment holding event 0 of `session`.
fn first_segment(store: &SessionStore, session: &SessionId) -> String {
    let loaded = store.load(session).unwrap();
    let rel = loaded
        .manifest_records()
        .unwrap()
        .into_iter()
        .find_map(|r| match r {
            ManifestRecord::SegmentClosed(s) => Some(s.segment_rel_path.clone()),
            ManifestRecord::SnapshotPinned(_) => None,
        })
        .unwrap();
    format!("sessions/{session}/{rel}")
}

/// decision: D225
#[test]
fn a_forgotten_segment_that_changed_or_vanished_is_an_error_never_other_events() {
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    let wr = keeping_few(&fs, 34);
    let (session, _) = long_session(&wr, 60);
    let store = SessionStore::new(Arc::clone(&fs)).with_resident_events(MIN_RESIDENT_EVENTS);
    let loaded = store.load(&session).unwrap();
    assert!(loaded.resident_events().0 > 0);
    let segment = first_segment(&store, &session);
    let path = Path::new(&segment);
    let original = fs.read(path).unwrap().unwrap();
    let mut changed = original;

    // Same length, other bytes: the attested sha256 no longer matches.
    let at = changed.iter().position(|&b| b == b'0').unwrap();
    changed[at] = b'1';
    fs.remove_file(path).unwrap();
    fs.write_new(path, &changed).unwrap();
    match loaded.events().get(0) {
        Err(StoreError::Unhealthy {
            health: SessionHealth::CorruptTail(c),
            ..
        }) => assert_eq!(c.reason, CorruptionReason::SegmentDigestMismatch),
        other => panic!("a changed segment read back as {other:?}"),
    }

    // Gone while the manifest stays: lost, and said so.
    fs.remove_file(path).unwrap();
    match loaded.events().all() {
        Err(StoreError::Unhealthy {
            health: SessionHealth::CorruptTail(c),
            ..
        }) => assert_eq!(c.reason, CorruptionReason::SegmentMissing),
        other => panic!("a missing segment read back as {other:?}"),
    }

    // Gone with the whole session: deleted, as a continuing call reports it.
    fs.remove_dir_all(Path::new(&format!("sessions/{session}")))
        .unwrap();
    assert!(matches!(
        loaded.events().get(0),
        Err(StoreError::Deleted { .. })
    ));
}

/// Where the event of the notes that start with `head` is, and the segment holding it.
fn notes_event(store: &dyn SessionRead, session: &SessionId, head: &str) -> (usize, String) {
    let loaded = store.load(session).unwrap();
    let events = loaded.events().all().unwrap();
    let index = events
        .iter()
        .position(|e| match e.data() {
            EventData::NodeOutputAppended(o) => matches!(
                &o.payload,
                OutputPayload::Notes { notes_markdown } if notes_markdown.as_str().starts_with(head)
            ),
            _ => false,
        })
        .unwrap_or_else(|| panic!("no notes start with {head:?}"));
    let rel = loaded
        .manifest_records()
        .unwrap()
        .into_iter()
        .find_map(|r| match r {
            ManifestRecord::SegmentClosed(s)
                if s.first_event_index.get() <= index as u64
                    && index as u64 <= s.last_event_index.get() =>
            {
                Some(s.segment_rel_path.clone())
            }
            _ => None,
        })
        .unwrap();
    (index, format!("sessions/{session}/{rel}"))
}

/// decision: D226
#[test]
fn a_recap_reads_forgotten_notes_back_and_answers_as_a_server_holding_every_event() {
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    let wr = keeping_few(&fs, 35);
    let (session, sent) = long_session(&wr, 150);
    // The notes of advance 6 (on the node it created, a child of advance 5's node) are
    // forgotten: only the newest events stay parsed.
    let (index, _) = notes_event(wr.sessions(), &session, "Unit 000006");
    let (first_resident, _) = wr.sessions().load(&session).unwrap().resident_events();
    assert!(index < first_resident, "event {index} is still parsed");
    let whole = Workrail::with_parts(Arc::clone(&fs), catalog(), Arc::new(SeededEntropy::new(36)))
        .unwrap()
        .with_resident_events(usize::MAX / 4);
    let cold = keeping_few(&fs, 37);
    // An old node (a rewind: its branch list names its child's notes), one in the middle (the
    // preferred branch's notes below it, most of them forgotten), the tip.
    for at in [5, 75, 149] {
        let expected = rehydrate(&whole, &sent[at].1).recap;
        for (who, server) in [("the writer", &wr), ("a cold process", &cold)] {
            assert_eq!(
                rehydrate(server, &sent[at].1).recap,
                expected,
                "the recap of advance {at}'s node from {who}, keeping {MIN_RESIDENT_EVENTS} events parsed"
            );
        }
        assert!(expected.is_some(), "advance {at}'s node has no recap");
    }
    let old = rehydrate(&wr, &sent[5].1).recap.unwrap();
    assert!(
        old.text.contains("Unit 000006"),
        "the rewind recap does not name the branch's notes: {}",
        old.text
    );

    // Notes whose segment changed since the load: an error, never other notes.
    let (index, segment) = notes_event(wr.sessions(), &session, "Unit 000021");
    assert!(index < first_resident);
    let path = Path::new(&segment);
    let mut changed = fs.read(path).unwrap().unwrap();
    let at = changed
        .windows(11)
        .position(|w| w == b"Unit 000021")
        .unwrap();
    changed[at + 10] = b'9';
    fs.remove_file(path).unwrap();
    fs.write_new(path, &changed).unwrap();
    let err = wr
        .continue_workflow(rehydrate_input(&sent[20].1))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionCorrupt, "{err:?}");
}

/// decision: D226
#[test]
fn a_replayed_fork_whose_other_branch_notes_cannot_be_read_is_an_error_never_another_answer() {
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    let wr = keeping_few(&fs, 38);
    let mut out = start_nested(&wr);
    let mut sent = Vec::new();
    for i in 0..8 {
        let next = advance(&wr, out.clone(), i);
        sent.push(next.clone());
        out = next;
    }
    // Branch B forks from advance 5's node early, then the first branch goes on long enough
    // that B's notes are forgotten.
    let fork_point = &sent[5];
    advance_with_notes(&wr, rehydrate(&wr, fork_point), "Branch B only.".into());
    for i in 8..130 {
        out = advance(&wr, out, i);
    }
    let session = session_of(&out);
    let (notes_of_b, segment) = notes_event(wr.sessions(), &session, "Branch B only.");
    let (first_resident, _) = wr.sessions().load(&session).unwrap().resident_events();
    assert!(
        notes_of_b < first_resident,
        "branch B's notes are still parsed"
    );
    // A third fork from the same point: its warning names B's notes, read from their segment.
    let call = advance_input(&rehydrate(&wr, fork_point), "Branch C.".into());
    let forked = wr.continue_workflow(call.clone()).unwrap();
    let warning = forked
        .warnings
        .iter()
        .find(|w| w.code == "forked")
        .unwrap_or_else(|| panic!("no fork warning: {:?}", forked.warnings));
    assert!(
        warning.message.contains("Branch B only."),
        "{}",
        warning.message
    );
    assert_eq!(
        wr.continue_workflow(call.clone()).unwrap(),
        forked,
        "a replay"
    );
    // Other plans read again push B's out of the recently read ones; then its segment changes.
    wr.sessions()
        .load(&session)
        .unwrap()
        .events()
        .all()
        .unwrap();
    let path = Path::new(&segment);
    let mut changed = fs.read(path).unwrap().unwrap();
    let at = changed.windows(8).position(|w| w == b"Branch B").unwrap();
    changed[at + 7] = b'X';
    fs.remove_file(path).unwrap();
    fs.write_new(path, &changed).unwrap();
    let err = wr.continue_workflow(call).unwrap_err();
    assert_eq!(
        err.code,
        ErrorCode::SessionCorrupt,
        "a replay whose warning cannot read its notes must fail, not answer otherwise: {err:?}"
    );
}

/// The snapshots `loaded` pins, and whether it finds each pinned.
fn pins_of(loaded: &workrail::store::LoadedSession) -> Vec<workrail_spec::ids::SnapshotRef> {
    let pinned = loaded.pinned_snapshots().unwrap();
    for snapshot in &pinned {
        assert!(loaded.is_pinned(snapshot).unwrap(), "{snapshot} not found");
    }
    pinned
}

/// A long session keeps only the manifest records of the events it keeps parsed; the older
/// ones are read again from the manifest and are the records a store keeping everything holds:
/// each one, every one, every pin, the segment of every event. A first load writes them out as
/// it reads, and a view extended past another process's commits keeps writing them out.
/// decision: D235
#[test]
fn a_long_session_keeps_only_the_records_of_its_newest_events_and_reads_the_rest_back() {
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    let wr = keeping_few(&fs, 35);
    let (session, sent) = long_session(&wr, 120);
    let keeper = SessionStore::new(Arc::clone(&fs)).with_resident_events(usize::MAX / 4);
    let whole = keeper.load(&session).unwrap();
    assert_eq!(
        whole.manifest.paged(),
        0,
        "a store keeping every event pages nothing"
    );
    let records = whole.manifest_records().unwrap();

    let loaded = wr.sessions().load(&session).unwrap();
    let paged = loaded.manifest.paged();
    assert!(
        paged >= 128 && paged < loaded.manifest.len(),
        "{paged} of {} records out of memory",
        loaded.manifest.len()
    );
    assert_eq!(loaded.manifest_records().unwrap(), records);
    for index in [0, 1, 63, 64, paged - 1, paged, records.len() - 1] {
        assert_eq!(
            loaded.manifest_record(index).unwrap().as_ref(),
            records.get(index),
            "record {index}"
        );
    }
    assert_eq!(pins_of(&loaded), pins_of(&whole));
    for position in 0..loaded.event_count() {
        assert_eq!(
            loaded.plan_start(position).unwrap(),
            whole.plan_start(position).unwrap(),
            "event {position}"
        );
    }
    assert_eq!(
        loaded.segments_from(3).unwrap(),
        whole.segments_from(3).unwrap()
    );

    // A fresh load pages as it reads.
    let fresh = SessionStore::new(Arc::clone(&fs))
        .with_resident_events(MIN_RESIDENT_EVENTS)
        .load(&session)
        .unwrap();
    assert!(fresh.manifest.paged() >= 128);
    assert_eq!(fresh.manifest_records().unwrap(), records);

    // Another process appends; this one's view is extended past its commits, then commits.
    let other = keeping_few(&fs, 36);
    let mut out = sent.last().unwrap().1.clone();
    for i in 120..180 {
        out = advance(&other, out, i);
    }
    for i in 180..200 {
        out = advance(&wr, out, i);
    }
    let after = wr.sessions().load(&session).unwrap();
    assert!(
        after.manifest.paged() > paged,
        "the extended view kept its new records"
    );
    let whole = keeper.load(&session).unwrap();
    assert!(whole.health.is_healthy(), "{:?}", whole.health);
    assert_eq!(
        after.manifest_records().unwrap(),
        whole.manifest_records().unwrap()
    );
    assert_eq!(pins_of(&after), pins_of(&whole));
    assert_eq!(
        &after.events().all().unwrap()[..],
        whole.resident_events().1
    );
}

/// Records read again are checked against what the load validated: a manifest rewritten
/// under a view (the same length, other bytes) is an error naming it, for the records and for
/// the forgotten events found through them; a manifest gone with its session is a deletion.
/// decision: D235
#[test]
fn records_read_again_from_a_rewritten_manifest_are_an_error_never_other_records() {
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    let wr = keeping_few(&fs, 37);
    let (session, _) = long_session(&wr, 80);
    let store = SessionStore::new(Arc::clone(&fs)).with_resident_events(MIN_RESIDENT_EVENTS);
    let loaded = store.load(&session).unwrap();
    assert!(loaded.manifest.paged() > 0);
    let path = format!("sessions/{session}/manifest.jsonl");
    let path = Path::new(&path);
    let original = fs.read(path).unwrap().unwrap();
    // The first segment's size, one digit changed: still a record, not the one validated.
    let text = String::from_utf8(original).unwrap();
    let at = text.find("\"bytes\":").unwrap() + "\"bytes\":".len();
    let digit = text.as_bytes()[at];
    let mut changed = text.into_bytes();
    changed[at] = if digit == b'9' { b'8' } else { digit + 1 };
    fs.remove_file(path).unwrap();
    fs.write_new(path, &changed).unwrap();
    let refused = |result: Result<(), StoreError>, what: &str| match result {
        Err(StoreError::Unhealthy {
            health: SessionHealth::CorruptTail(c),
            ..
        }) => {
            assert_eq!(c.reason, CorruptionReason::ManifestUnparseable, "{what}");
            assert!(
                c.detail.contains("not the records validated"),
                "{what}: {}",
                c.detail
            );
            assert_eq!(c.manifest_index, 0, "{what}");
        }
        other => panic!("{what} from a rewritten manifest: {other:?}"),
    };
    refused(loaded.manifest_records().map(drop), "the records");
    refused(loaded.manifest_record(0).map(drop), "the first record");
    refused(loaded.pinned_snapshots().map(drop), "the pins");
    refused(loaded.events().get(0).map(drop), "the first event");
    // Records still held answer.
    let last = loaded.manifest.len() - 1;
    assert!(loaded.manifest_record(last).unwrap().is_some());

    // Gone with the whole session: deleted, as a continuing call reports it.
    fs.remove_dir_all(Path::new(&format!("sessions/{session}")))
        .unwrap();
    assert!(matches!(
        loaded.manifest_record(0),
        Err(StoreError::Deleted { .. })
    ));
}

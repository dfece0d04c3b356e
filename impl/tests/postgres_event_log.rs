//! Decision D227: on PostgreSQL too, a loaded session keeps only its newest events parsed and
//! reads older ones again from their rows, checked against what the manifest attests (the
//! file store's D225). Every answer stays what a server holding every event gives: replays of
//! forgotten attempts, recaps of old nodes, a cold process. Rows that changed or vanished after
//! load are an error, never other events. Decision D235: so are the manifest records of forgotten
//! events, read again from their rows.
//!
//! Needs `WORKRAIL_TEST_POSTGRES=postgres://…` (`source .ci/postgres.sh`); without it the tests
//! say why and pass, except under `CI`, where they fail. Each test uses a schema of its own.

use crate::nested_support::{advance, catalog, rehydrate_input, start_nested};
use crate::postgres_support::{Schema, postgres_url};

use std::sync::Arc;

use workrail::entropy::SeededEntropy;
use workrail::protocol::Workrail;
use workrail::store::memfs::MemFs;
use workrail::store::{CorruptionReason, MIN_RESIDENT_EVENTS, SessionHealth, Store, StoreError};
use workrail_spec::error::ErrorCode;
use workrail_spec::ids::SessionId;
use workrail_spec::tools::ExecutionOutput;

/// A WorkRail on `schema` keeping `resident` events parsed, set as a server sets it from
/// `WORKRAIL_RESIDENT_EVENTS`.
fn keeping(schema: &Schema, seed: u64, resident: usize) -> Workrail {
    Workrail::with_store(
        Arc::new(MemFs::new()),
        Store::postgres(schema.backend()),
        catalog(),
        Arc::new(SeededEntropy::new(seed)),
    )
    .unwrap()
    .with_resident_events(resident)
}

fn rehydrate(wr: &Workrail, out: &ExecutionOutput) -> Result<ExecutionOutput, ErrorCode> {
    wr.continue_workflow(rehydrate_input(out))
        .map_err(|e| e.code)
}

/// decision: D227
#[test]
fn postgres_sessions_keep_their_newest_events_parsed_and_answer_as_when_holding_all() {
    let Some(url) = postgres_url(
        "postgres_sessions_keep_their_newest_events_parsed_and_answer_as_when_holding_all",
        "event log",
    ) else {
        return;
    };
    let schema = Schema::new(&url, "wr_evlog");
    let wr = keeping(&schema, 41, MIN_RESIDENT_EVENTS);
    let mut out = start_nested(&wr);
    let mut sent = Vec::new();
    for i in 0..120 {
        let next = advance(&wr, out.clone(), i);
        sent.push((out, next.clone()));
        out = next;
    }
    let session = SessionId::parse(out.session.session_id.as_str()).unwrap();
    let loaded = wr.sessions().load(&session).unwrap();
    let (first, resident) = loaded.resident_events();
    assert!(
        first > 0,
        "a PostgreSQL session of {} events kept every one parsed",
        loaded.event_count()
    );
    assert!(resident.len() <= 2 * MIN_RESIDENT_EVENTS + 16);
    // Every event read back is the event a server keeping all of them loads.
    let whole = keeping(&schema, 42, usize::MAX / 4);
    let all = whole.sessions().load(&session).unwrap();
    assert_eq!(all.resident_events().0, 0);
    assert_eq!(
        &loaded.events().all().unwrap()[..],
        all.resident_events().1,
        "the events read again from their rows"
    );
    // Resent forgotten acks and recaps of old nodes answer as the first time and as a server
    // holding every event, in this process and in a cold one.
    let cold = keeping(&schema, 43, MIN_RESIDENT_EVENTS);
    for at in [3, 40] {
        let (input, answer) = &sent[at];
        for (who, server) in [("the writer", &wr), ("a cold process", &cold)] {
            assert_eq!(
                &advance(server, input.clone(), at),
                answer,
                "the resent ack of advance {at} from {who}"
            );
        }
    }
    for at in [5, 75, 119] {
        let expected = rehydrate(&whole, &sent[at].1).unwrap().recap;
        assert!(expected.is_some());
        for (who, server) in [("the writer", &wr), ("a cold process", &cold)] {
            assert_eq!(
                rehydrate(server, &sent[at].1).unwrap().recap,
                expected,
                "the recap of advance {at}'s node from {who}"
            );
        }
    }

    // A row changed since the load: an error, never other notes.
    schema.run(&format!(
        "UPDATE {}.events SET body = replace(body, 'Unit 000021', 'Unit 000091') WHERE session_id = '{session}'",
        schema.name
    ));
    assert_eq!(
        rehydrate(&wr, &sent[20].1).unwrap_err(),
        ErrorCode::SessionCorrupt
    );
    match loaded.events().all() {
        Err(StoreError::Unhealthy {
            health: SessionHealth::CorruptTail(c),
            ..
        }) => assert_eq!(c.reason, CorruptionReason::SegmentDigestMismatch),
        other => panic!("a changed row read back as {other:?}"),
    }
    // The session deleted while a view of it is held: deleted, as a continuing call says.
    for table in ["events", "manifest", "sessions"] {
        schema.run(&format!(
            "DELETE FROM {}.{table} WHERE session_id = '{session}'",
            schema.name
        ));
    }
    assert!(matches!(
        loaded.events().get(0),
        Err(StoreError::Deleted { .. })
    ));
}

/// Decision D235 on PostgreSQL: the manifest rows of forgotten events leave memory a page at a
/// time and are read again from the rows, the records a server keeping everything holds, in
/// the writer, in a cold process and after another process's commits; a row rewritten since
/// is an error naming it, and rows gone with their session a deletion.
/// decision: D235
#[test]
fn postgres_sessions_keep_only_the_records_of_their_newest_events_and_read_the_rest_back() {
    let Some(url) = postgres_url(
        "postgres_sessions_keep_only_the_records_of_their_newest_events_and_read_the_rest_back",
        "manifest pages",
    ) else {
        return;
    };
    let schema = Schema::new(&url, "wr_mfpages");
    let wr = keeping(&schema, 44, MIN_RESIDENT_EVENTS);
    let mut out = start_nested(&wr);
    for i in 0..120 {
        out = advance(&wr, out, i);
    }
    let session = SessionId::parse(out.session.session_id.as_str()).unwrap();
    let whole = keeping(&schema, 45, usize::MAX / 4);
    let records = |wr: &Workrail| {
        let loaded = wr.sessions().load(&session).unwrap();
        let pinned = loaded.pinned_snapshots().unwrap();
        for snapshot in &pinned {
            assert!(loaded.is_pinned(snapshot).unwrap(), "{snapshot}");
        }
        (
            loaded.manifest.paged(),
            loaded.manifest_records().unwrap(),
            pinned,
        )
    };
    let (none, all, all_pins) = records(&whole);
    assert_eq!(none, 0, "a server keeping every event pages nothing");
    let (paged, held, pins) = records(&wr);
    assert!(
        paged >= 128,
        "{paged} of {} records out of memory",
        all.len()
    );
    assert_eq!((held, pins), (all.clone(), all_pins.clone()), "the writer");
    let cold = keeping(&schema, 46, MIN_RESIDENT_EVENTS);
    let (cold_paged, cold_held, cold_pins) = records(&cold);
    assert!(cold_paged >= 128, "a cold load pages as it reads");
    assert_eq!((cold_held, cold_pins), (all, all_pins), "a cold process");
    // Another process commits; the writer's view is extended past its rows, then commits.
    for i in 120..180 {
        out = advance(&cold, out, i);
    }
    for i in 180..200 {
        out = advance(&wr, out, i);
    }
    let (after, held, pins) = records(&wr);
    assert!(after > paged, "the extended view kept its new records");
    let (_, all, all_pins) = records(&whole);
    assert_eq!(
        (held, pins),
        (all, all_pins),
        "after another process's commits"
    );

    // A row rewritten since the load: an error naming it, never another record.
    let loaded = wr.sessions().load(&session).unwrap();
    schema.run(&format!(
        "UPDATE {}.manifest SET body = replace(body, '\"bytes\":', '\"bytes\":1') \
         WHERE session_id = '{session}' AND manifest_index = 2",
        schema.name
    ));
    match loaded.manifest_records() {
        Err(StoreError::Unhealthy {
            health: SessionHealth::CorruptTail(c),
            ..
        }) => {
            assert_eq!(c.reason, CorruptionReason::ManifestUnparseable);
            assert!(
                c.detail.contains("not the records validated"),
                "{}",
                c.detail
            );
        }
        other => panic!("a rewritten row read back as {other:?}"),
    }
    for table in ["events", "manifest", "sessions"] {
        schema.run(&format!(
            "DELETE FROM {}.{table} WHERE session_id = '{session}'",
            schema.name
        ));
    }
    assert!(matches!(
        loaded.manifest_record(0),
        Err(StoreError::Deleted { .. })
    ));
}

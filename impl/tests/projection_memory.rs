//! What the projection of a session of nested loops holds in memory, counted by an
//! instrumenting global allocator (bytes, not time: deterministic), against the estimate the
//! projection memo's byte budget counts it by (decision D205). A binary of its own, with one
//! test, so no other test's allocations are counted.
//!
//! Guards against a memo that undercounts what it keeps, so its budget would not bound it, and
//! bounds what a projection holds per advance once its events are gone (D229).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod memory_support;

use std::sync::Arc;

use memory_support::{advance, advance_with_notes, catalog, retained, start_nested};
use workrail::entropy::SeededEntropy;
use workrail::projections::Projector;
use workrail::protocol::Workrail;
use workrail::protocol::facts::projection_bytes;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail::store::{SessionRead, SessionStore};
use workrail_spec::ids::SessionId;

/// The heap a projection of `events` keeps (the events themselves stay alive, so only the
/// projection's own allocations count).
fn retained_by_projection(events: &[workrail_spec::event::SessionEvent]) -> usize {
    let mut projector = Projector::default();
    projector.extend(events).unwrap();
    retained(projector)
}

/// decision: D205
/// decision: D210
/// decision: D229
/// decision: D230
/// decision: D232
/// decision: D233
/// decision: D234
#[test]
fn the_memo_counts_a_projection_at_no_less_than_it_holds() {
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    let wr =
        Workrail::with_parts(Arc::clone(&fs), catalog(), Arc::new(SeededEntropy::new(7))).unwrap();
    let mut out = start_nested(&wr);
    let session = SessionId::parse(out.session.session_id.as_str()).unwrap();
    let mut measured = Vec::new();
    for i in 0..600 {
        out = advance(&wr, out, i);
        if i + 1 == 100 || i + 1 == 600 {
            let store = SessionStore::new(Arc::clone(&fs));
            let loaded = store.load(&session).unwrap();
            let held = retained_by_projection(&loaded.events().all().unwrap());
            measured.push((loaded.event_count(), held));
        }
    }
    projection_alone_holds_its_own(&fs, &session);
    for (events, held) in measured {
        let estimate = projection_bytes(events);
        println!(
            "projection of {events} events: {held} bytes held ({} per event), estimated {estimate}",
            held / events
        );
        assert!(
            estimate >= held && estimate <= held * 3,
            "a projection of {events} events holds {held} bytes and is estimated at {estimate}: the estimate must cover what it holds, within 3x (decision D205)"
        );
    }
    current_outputs_are_the_logs_own(&wr, &fs);
}

/// What a projection holds per advance once its events are gone, as in a server that forgot
/// them (D225): the ids it keeps are the run's own, not texts parsed from later events, its
/// edges leave out their cause's event id, and a node's one child or one advance needs no
/// allocation (D229); its nodes are a table by creation order holding their advances and
/// current outputs, and the projector knows outputs by a hash of their id (D230); its id lookup
/// holds slots alone and a node's lists are two words (D232); a node holds its snapshot's raw
/// digest (D233); edges, slot vectors and the output index are packed (D234). 296 measured, 349
/// before D234, 419 before D233, 462 before D232, 813 before D230, 990 before D229.
const ALONE_BYTES_PER_ADVANCE: usize = 330;

fn projection_alone_holds_its_own(fs: &Arc<dyn StoreFs>, session: &SessionId) {
    let loaded = SessionStore::new(Arc::clone(fs)).load(session).unwrap();
    let events = loaded.events().all().unwrap();
    let mut projector = Projector::default();
    projector.extend(&events).unwrap();
    let projection = projector.projection();
    let advances = projection
        .runs
        .values()
        .flat_map(|view| view.dag.nodes.values())
        .map(|node| node.advances.len())
        .sum::<usize>()
        + projection
            .stray_advances
            .values()
            .map(|p| p.len())
            .sum::<usize>();
    drop(events);
    drop(loaded);
    let held = retained(projector);
    println!(
        "projection of {advances} advances alone: {held} bytes ({} per advance)",
        held / advances
    );
    assert!(
        held <= advances * ALONE_BYTES_PER_ADVANCE,
        "a projection of {advances} nested advances holds {held} bytes once its events are gone: over {ALONE_BYTES_PER_ADVANCE} per advance (D234; 349 before it, 419 before D233, 462 before D232, 813 before D230, 990 before D229)"
    );
}

/// A projection's current outputs are where the log holds them, not copies (decisions D210,
/// D226): with 4 KB of notes per advance, what the projection holds does not grow with them.
fn current_outputs_are_the_logs_own(wr: &Workrail, fs: &Arc<dyn StoreFs>) {
    let mut out = start_nested(wr);
    let session = SessionId::parse(out.session.session_id.as_str()).unwrap();
    for i in 0..100 {
        out = advance_with_notes(wr, out, format!("Unit {i:06}. {}", "x".repeat(4096)));
    }
    let loaded = SessionStore::new(Arc::clone(fs)).load(&session).unwrap();
    let held = retained_by_projection(&loaded.events().all().unwrap());
    let per_event = held / loaded.event_count();
    println!(
        "projection of {} events with 4 KB notes: {held} bytes held ({per_event} per event)",
        loaded.event_count()
    );
    assert!(
        per_event <= 250,
        "a projection holds {per_event} bytes per event when every advance carries 4 KB of notes: it copies the notes instead of pointing at the log's (decisions D210, D226)"
    );
}

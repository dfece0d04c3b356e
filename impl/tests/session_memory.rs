//! What a loaded session of nested loops holds in memory per advance, counted by an
//! instrumenting global allocator (bytes, not time: deterministic). A binary of its own, with
//! one test, so no other test's allocations are counted.
//!
//! Guards against the regression that motivated it: a loaded session held every id of every
//! event as its own text, every dedupeKey twice (in its event and in the index), a copy of every
//! ack in the projection, and up to half its event vector as slack, about 8.7 KB per advance.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod memory_support;

use std::sync::Arc;

use memory_support::{advance, catalog, retained, start_nested};
use workrail::entropy::SeededEntropy;
use workrail::protocol::Workrail;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail::store::{MIN_RESIDENT_EVENTS, SessionRead, SessionStore};
use workrail_spec::ids::SessionId;

/// Bytes a loaded session may hold per advance of `memory_support::NESTED` with 40-byte notes
/// (decisions D164, D210, D224, D231, D232; about 3,450 at D164, 2,444 since D210's derived
/// keys, shared pin ids, pooled trace ids and boxed rare payloads, 2,178 since D224's shared
/// trace summaries and refs, 2,012 since D231's compact manifest records, 1,942 since D232's
/// packed indexes).
const BYTES_PER_ADVANCE: usize = 2_100;

/// Bytes a loaded session keeping the fewest events parsed holds per nested advance (decision
/// D225: only its manifest records and dedupe index grow with it; 1,942 with every event parsed;
/// 543 before D231 held its manifest records compactly, 377 since, 266 since D232 packed its
/// dedupe index, pins' lookup and pins' event ids, 178 since D233's raw snapshot digests, 57
/// since D235 wrote the records of forgotten events out of memory: its dedupe index, its pins'
/// lookup and a place per page of records are what still grow).
const FORGETTING_BYTES_PER_ADVANCE: usize = 70;

/// A residency that keeps every event parsed, as before D225: what the sharing of ids, traces
/// and keys among parsed events is measured on.
const ALL: usize = usize::MAX / 4;

/// The heap a freshly loaded `session` keeps (with its store) when `resident` events stay
/// parsed, its event count and its estimate.
fn retained_by_load(
    fs: &Arc<dyn StoreFs>,
    session: &SessionId,
    resident: usize,
) -> (usize, usize, usize) {
    let store = SessionStore::new(Arc::clone(fs)).with_resident_events(resident);
    let loaded = store.load(session).unwrap();
    assert!(loaded.health.is_healthy(), "{:?}", loaded.health);
    let (events, estimated) = (loaded.event_count(), loaded.estimated_bytes());
    (retained((loaded, store)), events, estimated)
}

/// decision: D164
/// decision: D210
/// decision: D223
/// decision: D235
/// decision: D224
/// decision: D225
/// decision: D231
/// decision: D232
/// decision: D233
#[test]
fn a_loaded_session_holds_a_bounded_number_of_bytes_per_nested_advance() {
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    let wr = Workrail::with_parts(Arc::clone(&fs), catalog(), Arc::new(SeededEntropy::new(7)))
        .unwrap()
        .with_resident_events(ALL);
    let mut out = start_nested(&wr);
    let session = SessionId::parse(out.session.session_id.as_str()).unwrap();
    let (from, to) = (100, 600);
    let mut at = Vec::new();
    // A second store follows the session from `from` on, as a server does whose neighbour
    // commits every advance: each load extends its view past the other's commit (D219).
    let follower = SessionStore::new(Arc::clone(&fs)).with_resident_events(ALL);
    let mut forgetting = Vec::new();
    for i in 0..to {
        out = advance(&wr, out, i);
        if i + 1 >= from {
            assert!(follower.load(&session).unwrap().health.is_healthy());
        }
        if i + 1 == from || i + 1 == to {
            at.push(retained_by_load(&fs, &session, ALL));
            forgetting.push(retained_by_load(&fs, &session, MIN_RESIDENT_EVENTS));
        }
    }
    let followed = retained(follower);
    let [
        (small, small_events, small_estimate),
        (large, large_events, large_estimate),
    ] = at[..]
    else {
        panic!("two measurements expected, got {}", at.len());
    };
    let per_advance = (large - small) / (to - from);
    let per_event = (large - small) / (large_events - small_events);
    println!(
        "loaded session: {small} bytes at {from} advances ({small_events} events), {large} at {to} ({large_events} events): {per_advance} bytes per advance, {per_event} per event"
    );
    assert!(
        per_advance <= BYTES_PER_ADVANCE,
        "a loaded session holds {per_advance} bytes per nested advance, over the bound of {BYTES_PER_ADVANCE} (decisions D164, D210, D224, D231, D232)"
    );
    println!(
        "the same session followed from {from} to {to} advances: {followed} bytes, against {large} loaded whole"
    );
    // The writer's own view, grown by its commits from ids its tokens carried, holds as much:
    // a second process loads the session whole, and only the two views are kept.
    let reader = Workrail::with_parts(Arc::clone(&fs), catalog(), Arc::new(SeededEntropy::new(8)))
        .unwrap()
        .with_resident_events(ALL);
    let writer_view = wr.store().load(&session).unwrap();
    let reader_view = reader.store().load(&session).unwrap();
    drop((wr, reader));
    let (written, read) = (retained(writer_view), retained(reader_view));
    println!("the writer's own view of it: {written} bytes, against {read} loaded whole");
    for (what, held, whole) in [
        ("extended past its view advance by advance", followed, large),
        ("grown by its writer's own commits", written, read),
    ] {
        assert!(
            held <= whole + whole / 12,
            "a session {what} holds {held} bytes, over the {whole} (+1/12) of the same session loaded whole: its ids must be shared as a load shares them, its vectors grown by an eighth (decisions D164, D223)"
        );
    }
    // Keeping only its newest events parsed, a session holds a small part of that per advance,
    // whatever its length (D225), and only the records of those events (D235).
    let [
        (few_small, _, few_small_estimate),
        (few_large, _, few_large_estimate),
    ] = forgetting[..]
    else {
        panic!("two measurements expected, got {}", forgetting.len());
    };
    let few_per_advance = few_large.saturating_sub(few_small) / (to - from);
    println!(
        "keeping {MIN_RESIDENT_EVENTS} events parsed: {few_small} bytes at {from} advances, {few_large} at {to}: {few_per_advance} bytes per advance"
    );
    assert!(
        few_per_advance <= FORGETTING_BYTES_PER_ADVANCE,
        "a loaded session keeping {MIN_RESIDENT_EVENTS} events parsed holds {few_per_advance} bytes per nested advance, over the bound of {FORGETTING_BYTES_PER_ADVANCE} (decisions D225, D231, D232, D233, D235)"
    );
    // The cache budget counts a session by its estimate: it must not undercount.
    for (held, estimate) in [
        (small, small_estimate),
        (large, large_estimate),
        (few_small, few_small_estimate),
        (few_large, few_large_estimate),
    ] {
        assert!(
            estimate >= held && estimate <= held * 3,
            "estimated_bytes {estimate} against {held} held: the estimate must cover what a session holds, within 3x"
        );
    }
}

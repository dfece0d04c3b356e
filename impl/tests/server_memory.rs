//! What a server holds in memory for a long session as its notes grow, counted by an
//! instrumenting global allocator (bytes, not time: deterministic). A binary of its own, with
//! one test, so no other test's allocations are counted.
//!
//! Two servers run the same nested-loop session, one writing 40-byte notes and one 1 KB notes
//! per advance; what the second holds beyond the first is what notes cost the server. Before
//! decision D226 it was every advance's notes (984 bytes per advance here): the projection held
//! each node's current notes. Now the log holds them, and a recap reads them back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod memory_support;

use std::sync::Arc;

use memory_support::{advance_with_notes, catalog, retained, start_nested};
use workrail::entropy::SeededEntropy;
use workrail::protocol::Workrail;
use workrail::store::MIN_RESIDENT_EVENTS;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;

/// A server keeping the fewest events parsed, after `advances` nested advances whose notes are
/// `notes_len` bytes long: the heap it holds.
fn server_after(advances: usize, notes_len: usize) -> usize {
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    let wr = Workrail::with_parts(Arc::clone(&fs), catalog(), Arc::new(SeededEntropy::new(7)))
        .unwrap()
        .with_resident_events(MIN_RESIDENT_EVENTS);
    let mut out = start_nested(&wr);
    for i in 0..advances {
        let head = format!("Unit {i:06} done.");
        let notes = format!("{head}{}", "x".repeat(notes_len.saturating_sub(head.len())));
        out = advance_with_notes(&wr, out, notes);
    }
    drop(out);
    // The store's files are data, not the server's memory: they stay out of the count.
    let held = retained(wr);
    drop(fs);
    held
}

/// What a server may hold per advance for 1 KB notes beyond what it holds for 40-byte ones:
/// the few recently read plans it keeps parsed, not the notes of every advance (D226; 42
/// measured).
const NOTES_BYTES_PER_ADVANCE: usize = 128;

/// decision: D226
#[test]
fn a_servers_memory_does_not_grow_with_its_sessions_notes() {
    let advances = 300;
    let short = server_after(advances, 40);
    let long = server_after(advances, 1024);
    let per_advance = long.saturating_sub(short) / advances;
    println!(
        "server after {advances} advances: {short} bytes with 40-byte notes, {long} with 1 KB notes: {per_advance} bytes more per advance"
    );
    assert!(
        per_advance <= NOTES_BYTES_PER_ADVANCE,
        "a server keeping {MIN_RESIDENT_EVENTS} events parsed holds {per_advance} bytes more per advance when each advance's notes are 1 KB instead of 40 bytes, over the bound of {NOTES_BYTES_PER_ADVANCE}: it keeps every node's notes instead of reading them from the log (decision D226)"
    );
}

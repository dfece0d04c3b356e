//! What a loaded session of nested loops holds in memory per advance, counted by an
//! instrumenting global allocator (bytes, not time: deterministic). A binary of its own, with
//! one test, so no other test's allocations are counted.
//!
//! Guards against the regression that motivated it: a loaded session held every id of every
//! event as its own text, every dedupeKey twice (in its event and in the index), a copy of every
//! ack in the projection, and up to half its event vector as slack, about 8.7 KB per advance.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;
use std::sync::Arc;

use peakmem_alloc::{INSTRUMENTED_SYSTEM, PeakMemAlloc, PeakMemAllocTrait};
use serde_json::json;
use workrail::entropy::SeededEntropy;
use workrail::protocol::{CatalogLoader, Workrail};
use workrail::sources::memory::MemorySource;
use workrail::sources::{Catalog, WorkflowSource};
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail::store::{SessionRead, SessionStore};
use workrail_spec::closed::WorkflowSourceKind;
use workrail_spec::ids::SessionId;
use workrail_spec::tools::{
    ContinueWorkflowInput, ExecutionOutput, OutputInput, StartWorkflowInput,
};

#[global_allocator]
static HEAP: &PeakMemAlloc<System> = &INSTRUMENTED_SYSTEM;

/// An outer loop around an inner loop of three, as a long loop-heavy run has.
const NESTED: &str = r#"{
  "id": "project.nested",
  "name": "Nested",
  "description": "Nested loops.",
  "conditions": [
    {"id": "again", "kind": "loop_control", "continueWhen": "continue"},
    {"id": "yes", "kind": "always_true"}
  ],
  "steps": [
    {"type": "loop", "loopId": "outer", "while": {"kind": "condition_ref", "conditionId": "again"}, "maxIterations": 1000,
     "body": [
       {"type": "loop", "loopId": "inner", "while": {"kind": "condition_ref", "conditionId": "yes"}, "maxIterations": 3,
        "body": [{"id": "act", "title": "Act", "prompt": "Do one unit of work."}]},
       {"id": "decide", "title": "Decide", "prompt": "Decide whether to continue.", "output": {"contractRef": "wr.contracts.loop_control"}}
     ]}
  ]
}"#;

/// Bytes a loaded session may hold per advance of [`NESTED`] with 40-byte notes (decision
/// D164; about 3,450 when this was written).
const BYTES_PER_ADVANCE: usize = 3_800;

/// Far more than any session here holds (see [`retained_by_load`]); never touched, so never
/// resident.
const PROBE: usize = 1 << 30;

fn catalog() -> CatalogLoader {
    Arc::new(|| {
        let project = MemorySource::new(WorkflowSourceKind::Project)
            .with("project/workflows/nested.json", NESTED);
        let sources: Vec<&dyn WorkflowSource> = vec![&project];
        Arc::new(Catalog::load(&sources))
    })
}

fn advance(wr: &Workrail, out: ExecutionOutput, i: usize) -> ExecutionOutput {
    let decide = out
        .pending
        .as_ref()
        .is_some_and(|p| p.step_id.as_str() == "decide");
    let mut artifacts = Vec::new();
    if decide {
        artifacts.push(
            json!({"kind": "wr.loop_control", "loopId": "outer", "decision": "continue"})
                .as_object()
                .unwrap()
                .clone(),
        );
    }
    wr.continue_workflow(ContinueWorkflowInput {
        state_token: Some(out.state_token.clone()),
        ack_token: out.ack_token.clone(),
        context: None,
        output: Some(OutputInput {
            // 40 bytes, the length of an agent's one-line summary.
            notes_markdown: Some(format!("Unit {i:06} done; nothing else to add.")),
            artifacts,
        }),
        preferences: vec![],
        preset: None,
    })
    .unwrap()
}

/// The heap a freshly loaded `session` keeps, and its event count. The counting allocator
/// reports only a peak since its reset, so: reset, free the loaded session (the count falls by
/// what it held), then allocate `PROBE` bytes; the new peak is `PROBE` less what was freed.
fn retained_by_load(fs: &Arc<dyn StoreFs>, session: &SessionId) -> (usize, usize, usize) {
    let store = SessionStore::new(Arc::clone(fs));
    let loaded = store.load(session).unwrap();
    assert!(loaded.health.is_healthy(), "{:?}", loaded.health);
    let (events, estimated) = (loaded.events.len(), loaded.estimated_bytes());
    HEAP.reset_peak_memory();
    drop(loaded);
    drop(store);
    let probe = vec![0u8; PROBE];
    std::hint::black_box(&probe);
    let held = PROBE - HEAP.get_peak_memory();
    drop(probe);
    (held, events, estimated)
}

/// decision: D164
#[test]
fn a_loaded_session_holds_a_bounded_number_of_bytes_per_nested_advance() {
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    let wr =
        Workrail::with_parts(Arc::clone(&fs), catalog(), Arc::new(SeededEntropy::new(7))).unwrap();
    let mut out = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: "project.nested".into(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    let session = SessionId::parse(out.session.session_id.as_str()).unwrap();
    let (from, to) = (100, 600);
    let mut at = Vec::new();
    for i in 0..to {
        out = advance(&wr, out, i);
        if i + 1 == from || i + 1 == to {
            at.push(retained_by_load(&fs, &session));
        }
    }
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
        "a loaded session holds {per_advance} bytes per nested advance, over the bound of {BYTES_PER_ADVANCE} (decision D164)"
    );
    // The cache budget counts a session by its estimate: it must not undercount.
    for (held, estimate) in [(small, small_estimate), (large, large_estimate)] {
        assert!(
            estimate >= held && estimate <= held * 3,
            "estimated_bytes {estimate} against {held} held: the estimate must cover what a session holds, within 3x"
        );
    }
}

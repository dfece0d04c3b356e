//! What the projection of a session of nested loops holds in memory, counted by an
//! instrumenting global allocator (bytes, not time: deterministic), against the estimate the
//! projection memo's byte budget counts it by (decision D205). A binary of its own, with one
//! test, so no other test's allocations are counted.
//!
//! Guards against a memo that undercounts what it keeps, so its budget would not bound it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;
use std::sync::Arc;

use peakmem_alloc::{INSTRUMENTED_SYSTEM, PeakMemAlloc, PeakMemAllocTrait};
use serde_json::json;
use workrail::entropy::SeededEntropy;
use workrail::projections::Projector;
use workrail::protocol::facts::projection_bytes;
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

/// The heap a projection of `events` keeps (the events themselves stay alive, so only the
/// projection's own allocations count). See `session_memory.rs` for the probe.
fn retained_by_projection(events: &[workrail_spec::event::SessionEvent]) -> usize {
    let mut projector = Projector::default();
    projector.extend(events).unwrap();
    HEAP.reset_peak_memory();
    drop(projector);
    let probe = vec![0u8; PROBE];
    std::hint::black_box(&probe);
    let held = PROBE - HEAP.get_peak_memory();
    drop(probe);
    held
}

/// decision: D205
#[test]
fn the_memo_counts_a_projection_at_no_less_than_it_holds() {
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
    let mut measured = Vec::new();
    for i in 0..600 {
        out = advance(&wr, out, i);
        if i + 1 == 100 || i + 1 == 600 {
            let store = SessionStore::new(Arc::clone(&fs));
            let loaded = store.load(&session).unwrap();
            let held = retained_by_projection(&loaded.events);
            measured.push((loaded.events.len(), held));
        }
    }
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
}

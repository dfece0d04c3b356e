//! Peak heap of an import and of an export against the bundle's size, counted by an
//! instrumenting global allocator (bytes, not time: deterministic). A binary of its own, with
//! one test, so no other test's allocations are counted.
//!
//! Guards against the regression that motivated it: import parsed the whole text into a JSON
//! tree (about 4.5 times the text) before the typed bundle, and export built a JSON tree of the
//! whole bundle and then its text, so both needed 12 to 16 times the bundle in memory.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;
use std::sync::Arc;

use peakmem_alloc::{INSTRUMENTED_SYSTEM, PeakMemAlloc, PeakMemAllocTrait};
use serde_json::json;
use workrail::bundle::{ImportOptions, NoProgress};
use workrail::entropy::SeededEntropy;
use workrail::protocol::{CatalogLoader, Workrail};
use workrail::sources::memory::MemorySource;
use workrail::sources::{Catalog, WorkflowSource};
use workrail::store::fs::{OsFs, StoreFs};
use workrail::store::memfs::MemFs;
use workrail_spec::bundle::ExportBundleV1;
use workrail_spec::closed::WorkflowSourceKind;
use workrail_spec::tools::{ContinueWorkflowInput, OutputInput, StartWorkflowInput};

#[global_allocator]
static HEAP: &PeakMemAlloc<System> = &INSTRUMENTED_SYSTEM;

/// A long loop, as a long-running session has.
const LONG: &str = r#"{
  "id": "project.long",
  "name": "Long",
  "description": "A long loop.",
  "conditions": [{"id": "again", "kind": "loop_control", "continueWhen": "continue"}],
  "steps": [
    {"type": "loop", "loopId": "work", "while": {"kind": "condition_ref", "conditionId": "again"}, "maxIterations": 1000,
     "body": [
       {"id": "act", "title": "Act", "prompt": "Do one unit of work."},
       {"id": "decide", "title": "Decide", "prompt": "Decide whether to continue.", "output": {"contractRef": "wr.contracts.loop_control"}}
     ]}
  ]
}"#;

fn catalog() -> CatalogLoader {
    Arc::new(|| {
        let project = MemorySource::new(WorkflowSourceKind::Project)
            .with("project/workflows/long.json", LONG);
        let sources: Vec<&dyn WorkflowSource> = vec![&project];
        Arc::new(Catalog::load(&sources))
    })
}

fn open(fs: Arc<dyn StoreFs>, seed: u64) -> Workrail {
    Workrail::with_parts(fs, catalog(), Arc::new(SeededEntropy::new(seed))).unwrap()
}

/// A session of `advances` acknowledged steps, with notes and loop decisions, exported.
fn bundle_text(advances: usize) -> (String, String) {
    let wr = open(Arc::new(MemFs::new()), 31);
    let mut out = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: "project.long".into(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    for i in 0..advances {
        let decide = out
            .pending
            .as_ref()
            .is_some_and(|p| p.step_id.as_str() == "decide");
        let mut artifacts = Vec::new();
        if decide {
            artifacts.push(
                json!({"kind": "wr.loop_control", "loopId": "work", "decision": "continue"})
                    .as_object()
                    .unwrap()
                    .clone(),
            );
        }
        out = wr
            .continue_workflow(ContinueWorkflowInput {
                state_token: Some(out.state_token.clone()),
                ack_token: out.ack_token.clone(),
                context: None,
                output: Some(OutputInput {
                    notes_markdown: Some(format!("Unit {i} done: {}", "details ".repeat(20))),
                    artifacts,
                }),
                preferences: vec![],
                preset: None,
            })
            .unwrap();
    }
    let session = out.session.session_id.as_str().to_owned();
    let text = wr.export_session(&session, &NoProgress).unwrap().text;
    (session, text)
}

#[test]
fn import_and_export_peak_heap_is_a_small_multiple_of_the_bundle() {
    let (session, text) = bundle_text(500);
    let copy = text.clone();
    let size = text.len();
    assert!(
        size > 1_000_000,
        "the bundle is too small to measure: {size}"
    );

    // The reference: the JSON tree the import used to build first.
    HEAP.reset_peak_memory();
    let tree = workrail_spec::jcs::parse_strict(&text).unwrap();
    let tree_peak = HEAP.get_peak_memory();
    drop(tree);

    // Import, given the text by value: live at the start is the text (and the open store).
    let dir = tempfile::tempdir().unwrap();
    let target = open(Arc::new(OsFs::new(dir.path())), 32);
    HEAP.reset_peak_memory();
    let report = target
        .import_bundle(text, &ImportOptions::default(), &NoProgress)
        .unwrap();
    let import_peak = size + HEAP.get_peak_memory();
    assert_eq!(report.session_id.as_str(), session);
    drop(report);
    drop(target);

    // Parsing alone (from borrowed text): the typed bundle beside the text.
    let text = copy;
    HEAP.reset_peak_memory();
    let parsed = ExportBundleV1::from_json_str(&text).unwrap();
    let parse_peak = size + HEAP.get_peak_memory();
    drop(parsed);
    drop(text);

    // Export by a fresh process over the imported data directory (nothing cached).
    let source = open(Arc::new(OsFs::new(dir.path())), 33);
    HEAP.reset_peak_memory();
    let exported = source.export_session(&session, &NoProgress).unwrap();
    let export_peak = HEAP.get_peak_memory();
    assert_eq!(exported.text.len(), size);
    // The text was written into one buffer, never reallocated (which would double it).
    assert!(
        exported.text.capacity() < size + size / 10 + 8192,
        "the export text's buffer is {} bytes for {size}",
        exported.text.capacity()
    );

    let ratio = |peak: usize| peak as f64 / size as f64;
    println!(
        "bundle {size} bytes; peak heap: import {:.2}x, parse {:.2}x, export {:.2}x (a JSON tree alone: {:.2}x)",
        ratio(import_peak),
        ratio(parse_peak),
        ratio(export_peak),
        ratio(tree_peak)
    );
    for (what, peak) in [
        ("import", import_peak),
        ("parse", parse_peak),
        ("export", export_peak),
    ] {
        assert!(
            peak <= 5 * size,
            "{what} peaked at {peak} bytes, {:.2}x the {size}-byte bundle (limit 5x)",
            ratio(peak)
        );
    }
}

//! `workrail inspect`: a run's DAG as an outline whose size follows the nodes shown, not their
//! depth. An unbranched stretch stays at one indentation, each branch of a fork is indented
//! under it, the middle of a long stretch is one line (every node with `--all`), and a deep run
//! cannot exhaust the stack.
//!
//! Before: every node was indented one step deeper than its parent, so a 2,000-node run printed
//! 4 MB, mostly spaces, and the recursion grew with the run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::{Value, json};
use workrail::entropy::SeededEntropy;
use workrail::protocol::{CatalogLoader, Workrail};
use workrail::sources::memory::MemorySource;
use workrail::sources::{Catalog, WorkflowSource};
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail_spec::closed::WorkflowSourceKind;
use workrail_spec::tools::{
    ContinueWorkflowInput, ExecutionOutput, OutputInput, StartWorkflowInput,
};

const LONG: &str = r#"{
  "id": "project.long",
  "name": "Long",
  "description": "One step repeated in a loop.",
  "conditions": [{"id": "again", "kind": "loop_control", "continueWhen": "continue"}],
  "steps": [
    {"type": "loop", "loopId": "work", "while": {"kind": "condition_ref", "conditionId": "again"}, "maxIterations": 100,
     "body": [
       {"id": "decide", "title": "Decide", "prompt": "Work, then decide.", "output": {"contractRef": "wr.contracts.loop_control"}}
     ]}
  ]
}"#;

fn open(fs: &MemFs) -> Workrail {
    let catalog: CatalogLoader = Arc::new(|| {
        let project = MemorySource::new(WorkflowSourceKind::Project)
            .with("project/workflows/long.json", LONG);
        let sources: Vec<&dyn WorkflowSource> = vec![&project];
        Arc::new(Catalog::load(&sources))
    });
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    Workrail::with_parts(shared, catalog, Arc::new(SeededEntropy::new(3))).unwrap()
}

fn ack(out: &ExecutionOutput, i: usize) -> ContinueWorkflowInput {
    let artifact: Value =
        json!({"kind": "wr.loop_control", "loopId": "work", "decision": "continue"});
    ContinueWorkflowInput {
        state_token: Some(out.state_token.clone()),
        ack_token: out.ack_token.clone(),
        context: None,
        output: Some(OutputInput {
            notes_markdown: Some(format!("Unit {i} done.")),
            artifacts: vec![artifact.as_object().unwrap().clone()],
        }),
        preferences: vec![],
        preset: None,
    }
}

/// The node lines of an inspection, with their indentation.
fn node_lines(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .filter(|l| l.trim_start().starts_with("- node_"))
        .map(|l| (l.len() - l.trim_start().len(), l.trim_start()))
        .collect()
}

#[test]
fn inspect_outlines_long_stretches_and_indents_only_at_forks() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let mut out = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: "project.long".into(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    let mut history = vec![out.clone()];
    for i in 0..25 {
        out = wr.continue_workflow(ack(&out, i)).unwrap();
        history.push(out.clone());
    }
    let session = out.session.session_id.to_string();

    // 26 nodes in one stretch: the first 2 and the newest 8, and one line for the 16 between.
    let outline = wr.inspect_session(&session, false).unwrap();
    let lines = node_lines(&outline);
    assert_eq!(lines.len(), 10, "{outline}");
    assert!(lines.iter().all(|(indent, _)| *indent == 2), "{outline}");
    assert!(
        outline.contains("… 16 more nodes on this stretch")
            && outline.contains("workrail inspect --all"),
        "{outline}"
    );
    assert!(lines[9].1.contains("[preferred tip]"), "{outline}");
    assert!(lines[9].1.contains("Unit 24 done.") || lines[8].1.contains("Unit 24 done."));

    // --all lists every node, still at one indentation.
    let every = wr.inspect_session(&session, true).unwrap();
    let lines = node_lines(&every);
    assert_eq!(lines.len(), 26, "{every}");
    assert!(lines.iter().all(|(indent, _)| *indent == 2), "{every}");
    assert!(!every.contains("more nodes on this stretch"), "{every}");

    // A rewind to the fourth node forks: both branches are indented under the fork point, the
    // older one first.
    let rewound = wr
        .continue_workflow(ContinueWorkflowInput {
            state_token: Some(history[3].state_token.clone()),
            ack_token: None,
            context: None,
            output: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    let forked = wr.continue_workflow(ack(&rewound, 99)).unwrap();
    assert_ne!(forked.state_token, history[4].state_token);
    let every = wr.inspect_session(&session, true).unwrap();
    let lines = node_lines(&every);
    assert_eq!(lines.len(), 27, "{every}");
    let depths: Vec<usize> = lines.iter().map(|(indent, _)| *indent).collect();
    // Root .. fork point (4 nodes) at 2; the older branch (22 nodes) at 4; the new one at 4.
    assert_eq!(&depths[..4], &[2; 4], "{every}");
    assert!(depths[4..].iter().all(|d| *d == 4), "{every}");
    assert!(lines[26].1.contains("Unit 99 done."), "{every}");
    let outline = wr.inspect_session(&session, false).unwrap();
    assert!(
        outline.contains("… 12 more nodes on this stretch"),
        "the older branch (22 nodes) keeps its first 2 and newest 8: {outline}"
    );
}

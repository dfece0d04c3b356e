//! A workflow of nested loops, as a long loop-heavy run has, and how the tests drive it:
//! shared by the memory tests and the tests of what a long session keeps parsed (D225).

#![allow(dead_code)]

use std::sync::Arc;

use serde_json::json;
use workrail::protocol::{CatalogLoader, Workrail};
use workrail::sources::memory::MemorySource;
use workrail::sources::{Catalog, WorkflowSource};
use workrail_spec::closed::WorkflowSourceKind;
use workrail_spec::tools::{
    ContinueWorkflowInput, ExecutionOutput, OutputInput, StartWorkflowInput,
};

/// An outer loop around an inner loop of three, as a long loop-heavy run has.
pub const NESTED: &str = r#"{
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

pub fn catalog() -> CatalogLoader {
    Arc::new(|| {
        let project = MemorySource::new(WorkflowSourceKind::Project)
            .with("project/workflows/nested.json", NESTED);
        let sources: Vec<&dyn WorkflowSource> = vec![&project];
        Arc::new(Catalog::load(&sources))
    })
}

pub fn advance(wr: &Workrail, out: ExecutionOutput, i: usize) -> ExecutionOutput {
    // 40 bytes, the length of an agent's one-line summary.
    advance_with_notes(wr, out, format!("Unit {i:06} done; nothing else to add."))
}

/// [`advance`] with the given notes.
pub fn advance_with_notes(wr: &Workrail, out: ExecutionOutput, notes: String) -> ExecutionOutput {
    wr.continue_workflow(advance_input(&out, notes)).unwrap()
}

/// The call that acknowledges `out`'s pending step with `notes` (continuing the outer loop at
/// its decision).
pub fn advance_input(out: &ExecutionOutput, notes: String) -> ContinueWorkflowInput {
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
    ContinueWorkflowInput {
        state_token: Some(out.state_token.clone()),
        ack_token: out.ack_token.clone(),
        context: None,
        output: Some(OutputInput {
            notes_markdown: Some(notes),
            artifacts,
        }),
        preferences: vec![],
        preset: None,
    }
}

/// The call that rehydrates `out`'s node: its stateToken alone.
pub fn rehydrate_input(out: &ExecutionOutput) -> ContinueWorkflowInput {
    ContinueWorkflowInput {
        state_token: Some(out.state_token.clone()),
        ack_token: None,
        context: None,
        output: None,
        preferences: vec![],
        preset: None,
    }
}

/// Rehydrates `out`'s node.
pub fn rehydrate(wr: &Workrail, out: &ExecutionOutput) -> ExecutionOutput {
    wr.continue_workflow(rehydrate_input(out)).unwrap()
}

/// Starts a run of [`NESTED`].
pub fn start_nested(wr: &Workrail) -> ExecutionOutput {
    wr.start_workflow(StartWorkflowInput {
        workflow_id: "project.nested".into(),
        context: None,
        preferences: vec![],
        preset: None,
    })
    .unwrap()
}

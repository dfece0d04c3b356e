//! A WorkRail over the in-memory filesystem with the bundled workflows plus a small demo.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::{Value, json};
use workrail::entropy::SeededEntropy;
use workrail::protocol::{CatalogLoader, Workrail};
use workrail::sources::bundled::BundledSource;
use workrail::sources::memory::MemorySource;
use workrail::sources::{Catalog, WorkflowSource};
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail_spec::closed::WorkflowSourceKind;
use workrail_spec::tools::{
    ContinueWorkflowInput, ExecutionOutput, OutputInput, StartWorkflowInput,
};

pub const DEMO: &str = r#"{
  "id": "project.demo",
  "name": "Demo",
  "description": "Plan, then implement and decide in a bounded loop, then wrap up.",
  "conditions": [{"id": "again", "kind": "loop_control", "continueWhen": "continue"}],
  "steps": [
    {"id": "plan", "title": "Plan", "prompt": "Plan the work."},
    {"type": "loop", "loopId": "build", "while": {"kind": "condition_ref", "conditionId": "again"}, "maxIterations": 3,
     "body": [
       {"id": "implement", "title": "Implement", "prompt": "Implement the next slice."},
       {"id": "decide", "title": "Decide", "prompt": "Decide whether another iteration is needed.", "output": {"contractRef": "wr.contracts.loop_control"}}
     ]},
    {"id": "wrap", "title": "Wrap up", "prompt": "Summarize what was done."}
  ]
}"#;

/// Non-assumable choices, a preferred capability and a required report (a golden fixture).
pub const REASONS: &str = include_str!("../../../fixtures/workflows/reasons.source.json");

/// `web_browsing` is required and its (authored) probe sits in a loop that never runs, so the
/// steps after it are acknowledged while the capability is still `unknown`.
pub const NEEDS_WEB: &str = r#"{
  "id": "project.needs_web",
  "name": "Needs the web",
  "description": "A required capability whose probe is skipped.",
  "capabilities": {"web_browsing": "required"},
  "conditions": [{"id": "never", "kind": "always_false"}],
  "steps": [
    {"type": "loop", "loopId": "skipped", "while": {"kind": "condition_ref", "conditionId": "never"}, "maxIterations": 1,
     "body": [{"type": "template_call", "templateId": "wr.templates.capability_probe", "args": {"capability": "web_browsing", "when": "lazy_on_first_use"}}]},
    {"id": "research", "title": "Research", "prompt": "Research the topic on the web."},
    {"id": "report", "title": "Report", "prompt": "Report the findings."}
  ]
}"#;

/// `web_browsing` is required: the compiler injects its probe first.
pub const WEB: &str = r#"{
  "id": "project.web",
  "name": "Web",
  "description": "A required capability with its injected probe.",
  "capabilities": {"web_browsing": "required"},
  "steps": [
    {"id": "research", "title": "Research", "prompt": "Research the topic on the web."},
    {"id": "report", "title": "Report", "prompt": "Report the findings."}
  ]
}"#;

/// A step that requires a divergence marker, then a plain step.
pub const DIVERGE: &str = r#"{
  "id": "project.diverge",
  "name": "Diverge",
  "description": "A step that must say how it deviated.",
  "steps": [
    {"id": "triage", "title": "Triage", "prompt": "Triage, and say what you skipped.", "output": {"contractRef": "wr.contracts.workflow_divergence"}},
    {"id": "wrap", "title": "Wrap up", "prompt": "Summarize."}
  ]
}"#;

/// Plan, then a loop of up to 500 iterations (the demo's loop id, so [`loop_control`] drives it):
/// a long branch.
pub const LONG: &str = r#"{
  "id": "project.long",
  "name": "Long",
  "description": "Plan, then implement and decide for as long as it takes.",
  "conditions": [{"id": "again", "kind": "loop_control", "continueWhen": "continue"}],
  "steps": [
    {"id": "plan", "title": "Plan", "prompt": "Plan the work."},
    {"type": "loop", "loopId": "build", "while": {"kind": "condition_ref", "conditionId": "again"}, "maxIterations": 500,
     "body": [
       {"id": "implement", "title": "Implement", "prompt": "Implement one slice."},
       {"id": "decide", "title": "Decide", "prompt": "Decide whether another iteration is needed.", "output": {"contractRef": "wr.contracts.loop_control"}}
     ]}
  ]
}"#;

pub fn catalog() -> CatalogLoader {
    Arc::new(|| {
        let bundled = BundledSource;
        let project = MemorySource::new(WorkflowSourceKind::Project)
            .with("project/workflows/demo.json", DEMO)
            .with("project/workflows/reasons.json", REASONS)
            .with("project/workflows/needs_web.json", NEEDS_WEB)
            .with("project/workflows/web.json", WEB)
            .with("project/workflows/diverge.json", DIVERGE)
            .with("project/workflows/long.json", LONG);
        let sources: Vec<&dyn WorkflowSource> = vec![&bundled, &project];
        Arc::new(Catalog::load(&sources))
    })
}

pub fn open(fs: &MemFs) -> Workrail {
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    Workrail::with_parts(shared, catalog(), Arc::new(SeededEntropy::new(7))).unwrap()
}

pub fn start(wr: &Workrail, workflow: &str) -> ExecutionOutput {
    wr.start_workflow(StartWorkflowInput {
        workflow_id: workflow.into(),
        context: None,
        preferences: vec![],
        preset: None,
    })
    .unwrap()
}

pub fn ack(out: &ExecutionOutput, notes: &str, artifacts: Vec<Value>) -> ContinueWorkflowInput {
    ContinueWorkflowInput {
        state_token: Some(out.state_token.clone()),
        ack_token: out.ack_token.clone(),
        context: None,
        output: Some(OutputInput {
            notes_markdown: Some(notes.into()),
            artifacts: artifacts
                .into_iter()
                .map(|a| a.as_object().unwrap().clone())
                .collect(),
        }),
        preferences: vec![],
        preset: None,
    }
}

pub fn rehydrate(state_token: &str) -> ContinueWorkflowInput {
    ContinueWorkflowInput {
        state_token: Some(state_token.into()),
        ack_token: None,
        context: None,
        output: None,
        preferences: vec![],
        preset: None,
    }
}

pub fn loop_control(decision: &str) -> Value {
    json!({"kind": "wr.loop_control", "loopId": "build", "decision": decision, "summary": "decided"})
}

pub fn pending(out: &ExecutionOutput) -> &str {
    out.pending
        .as_ref()
        .map_or("<none>", |p| p.step_id.as_str())
}

/// Starts `workflow` with `autonomy` as the run's preference.
pub fn start_in(
    wr: &Workrail,
    workflow: &str,
    autonomy: workrail_spec::closed::Autonomy,
) -> ExecutionOutput {
    wr.start_workflow(StartWorkflowInput {
        preset: None,
        workflow_id: workflow.into(),
        context: None,
        preferences: vec![workrail_spec::event::PreferenceDelta::Autonomy(autonomy)],
    })
    .unwrap()
}

/// The committed events of the response's session.
pub fn session_events(
    wr: &Workrail,
    out: &ExecutionOutput,
) -> Vec<workrail_spec::event::SessionEvent> {
    wr.sessions()
        .load(&out.session.session_id)
        .unwrap()
        .events()
        .all()
        .unwrap()
        .into_owned()
}

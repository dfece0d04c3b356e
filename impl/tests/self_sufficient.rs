//! A run needs nothing but its pinned compiled snapshot (locks §5 "CompiledWorkflowSnapshotV1"):
//! with the source workflow gone from every source, the run still renders its prompts, validates
//! its required outputs against the embedded contracts, shows its capability guidance and
//! explains where each step came from.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use protocol_support::{ack, pending, rehydrate};
use serde_json::json;
use workrail::entropy::SeededEntropy;
use workrail::protocol::Workrail;
use workrail::sources::memory::MemorySource;
use workrail::sources::{Catalog, WorkflowSource};
use workrail::store::PinnedWorkflowStore;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail_spec::closed::{StepSource, WorkflowSourceKind};
use workrail_spec::event::EventData;
use workrail_spec::tools::{ExecutionKind, StartWorkflowInput};

const WORKFLOW: &str = r#"{
  "id": "project.pinned_only",
  "name": "Pinned only",
  "description": "A capability and a contract, run after the source is gone.",
  "capabilities": {"web_browsing": "preferred"},
  "features": ["wr.features.capabilities"],
  "conditions": [{"id": "again", "kind": "loop_control", "continueWhen": "continue"}],
  "steps": [
    {"id": "research", "title": "Research", "prompt": "Research the topic."},
    {"type": "loop", "loopId": "build", "while": {"kind": "condition_ref", "conditionId": "again"}, "maxIterations": 2,
     "body": [
       {"id": "implement", "title": "Implement", "prompt": "Implement the next slice."},
       {"id": "decide", "title": "Decide", "prompt": "Decide whether another slice is needed.", "output": {"contractRef": "wr.contracts.loop_control"}}
     ]}
  ]
}"#;

/// lock: L-COMPILE-SELF-SUFFICIENT
#[test]
fn a_run_goes_on_from_its_pinned_snapshot_after_the_source_is_gone() {
    let fs = MemFs::new();
    let available = Arc::new(AtomicBool::new(true));
    let on = Arc::clone(&available);
    let loader: workrail::protocol::CatalogLoader = Arc::new(move || {
        let mut project = MemorySource::new(WorkflowSourceKind::Project);
        if on.load(Ordering::SeqCst) {
            project = project.with("project/workflows/pinned_only.json", WORKFLOW);
        }
        let sources: Vec<&dyn WorkflowSource> = vec![&project];
        Arc::new(Catalog::load(&sources))
    });
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    let wr = Workrail::with_parts(shared.clone(), loader, Arc::new(SeededEntropy::new(5))).unwrap();
    let first = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: "project.pinned_only".into(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    let before = wr.continue_workflow(rehydrate(&first.state_token)).unwrap();

    available.store(false, Ordering::SeqCst);
    assert!(
        wr.list_workflows(Default::default())
            .unwrap()
            .workflows
            .is_empty(),
        "the source is gone"
    );
    // The prompt and the capability guidance come back the same from the pinned snapshot.
    let after = wr.continue_workflow(rehydrate(&first.state_token)).unwrap();
    assert_eq!(after.pending, before.pending);
    let guidance = &after.pending.as_ref().unwrap().capability_guidance;
    assert!(
        !guidance.is_empty() && guidance.iter().any(|g| g.contains("web_browsing")),
        "{guidance:?}"
    );

    // Walk to the decision step; its required output is checked against the embedded contract.
    let mut out = first;
    while pending(&out) != "decide" {
        out = wr.continue_workflow(ack(&out, "Done.", vec![])).unwrap();
    }
    let wrong = json!({"kind": "wr.loop_control", "loopId": "build", "decision": "perhaps"});
    let blocked = wr
        .continue_workflow(ack(&out, "Undecided.", vec![wrong]))
        .unwrap();
    assert_eq!(blocked.kind, ExecutionKind::Blocked);
    assert!(!blocked.blockers.is_empty());
    let right = json!({"kind": "wr.loop_control", "loopId": "build", "decision": "continue"});
    let next = wr
        .continue_workflow(ack(&blocked, "Another slice.", vec![right]))
        .unwrap();
    assert_eq!(next.kind, ExecutionKind::Ok);
    assert_eq!(pending(&next), "implement");

    // Provenance and the contract's schema are in the pinned snapshot itself.
    let events = wr.sessions().load(&next.session.session_id).unwrap();
    let hash = events
        .events()
        .all()
        .unwrap()
        .iter()
        .find_map(|e| match e.data() {
            EventData::RunStarted(r) => Some(r.workflow_hash.clone()),
            _ => None,
        })
        .unwrap();
    let pinned = PinnedWorkflowStore::new(shared).get(&hash).unwrap();
    let research = &pinned.body.steps[0];
    assert_eq!(research.step_id.as_str(), "research");
    assert_eq!(research.provenance.source, StepSource::Authored);
    assert_eq!(research.provenance.origin_id, None);
    let contract = pinned.contract("wr.contracts.loop_control").unwrap();
    assert!(contract.schema.is_object() && contract.example.is_object());
}

//! Only an acknowledgement appends durable truth for the node it targets (locks §1.2
//! "Rehydrate/advance/replay separation").

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use protocol_support::*;
use workrail::store::memfs::MemFs;
use workrail_spec::closed::NodeKind;
use workrail_spec::event::{EventData, SessionEvent};
use workrail_spec::ids::NodeId;
use workrail_spec::tools::{
    CheckpointWorkflowInput, InspectMode, InspectWorkflowInput, ListWorkflowsInput, OutputInput,
    ResumeSessionInput, StartSessionInput,
};

/// What an event says about `node`'s own progress: an advance recorded for it, or a step node
/// created below it (with its edge and outputs).
fn advances_of(events: &[SessionEvent], node: &NodeId) -> usize {
    events
        .iter()
        .filter(|e| match e.data() {
            EventData::AdvanceRecorded(_) => e.scope().node_id() == Some(node),
            EventData::NodeCreated(n) => {
                n.node_kind == NodeKind::Step && n.parent_node_id.as_ref() == Some(node)
            }
            _ => false,
        })
        .count()
}

/// lock: L-TOKEN-ADVANCE-ONLY-PATH
#[test]
fn every_call_but_an_acknowledgement_leaves_the_node_without_progress() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let first = start(&wr, "project.demo");
    let out = wr
        .continue_workflow(ack(&first, "Planned.", vec![]))
        .unwrap();
    let before = session_events(&wr, &out);
    // The node the tokens of `out` target: the newest step node of the run.
    let target_node = before
        .iter()
        .rev()
        .find_map(|e| match e.data() {
            EventData::NodeCreated(n) if n.node_kind == NodeKind::Step => {
                e.scope().node_id().cloned()
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(advances_of(&before, &target_node), 0);

    // Everything an agent may send besides the acknowledgement, some of it twice.
    for _ in 0..2 {
        wr.continue_workflow(rehydrate(&out.state_token)).unwrap();
        wr.list_workflows(ListWorkflowsInput {}).unwrap();
        wr.inspect_workflow(InspectWorkflowInput {
            workflow_id: "project.demo".into(),
            mode: InspectMode::Preview,
        })
        .unwrap();
        wr.resume_session(ResumeSessionInput::default()).unwrap();
        wr.start_session(StartSessionInput {}).unwrap();
        // A stale or foreign token shape fails without writing.
        let mut wrong = rehydrate(&out.state_token);
        wrong.ack_token = out.checkpoint_token.clone();
        assert!(wr.continue_workflow(wrong).is_err());
    }
    // A checkpoint records a checkpoint node, never the node's advance.
    wr.checkpoint_workflow(CheckpointWorkflowInput {
        state_token: out.state_token.clone(),
        checkpoint_token: out.checkpoint_token.clone().unwrap(),
        output: OutputInput {
            notes_markdown: Some("Half way.".into()),
            artifacts: vec![],
        },
    })
    .unwrap();
    let after_others = session_events(&wr, &out);
    assert_eq!(
        advances_of(&after_others, &target_node),
        0,
        "only continue_workflow with an ackToken may advance a node"
    );
    let new: Vec<_> = after_others[before.len()..]
        .iter()
        .map(|e| e.kind())
        .collect();
    assert!(
        new.iter()
            .all(|k| !matches!(k, workrail_spec::event::EventKind::AdvanceRecorded)),
        "{new:?}"
    );

    // The acknowledgement is the path that does.
    wr.continue_workflow(ack(&out, "Implemented.", vec![]))
        .unwrap();
    let after_ack = session_events(&wr, &out);
    assert_eq!(advances_of(&after_ack, &target_node), 2);
}

//! Builders shared by the store tests: a session with runs, nodes and snapshots.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use workrail::store::memfs::MemFs;
use workrail::store::{AppendPlan, SessionRead, SessionStore, SnapshotStore, StoreError};
use workrail_spec::closed::{EdgeCauseKind, EdgeKind, NodeKind, OutputChannel, WorkflowSourceKind};
use workrail_spec::event::*;
use workrail_spec::ids::*;
use workrail_spec::snapshot::{EnginePayloadV1, EngineState, ExecutionSnapshotFileV1};

pub fn session() -> SessionId {
    SessionId::from_entropy(&[1; 10])
}
pub fn run() -> RunId {
    RunId::from_entropy(&[2; 10])
}
pub fn node(n: u8) -> NodeId {
    NodeId::from_entropy(&[10 + n; 10])
}
pub fn event_id(n: u64) -> EventId {
    let mut e = [0u8; 10];
    e[..8].copy_from_slice(&n.to_le_bytes());
    e[9] = 0xee;
    EventId::from_entropy(&e)
}
pub fn workflow_hash() -> WorkflowHash {
    WorkflowHash::from_digest(Sha256Digest::from_bytes(&[7; 32]))
}

/// A distinct snapshot per `n` (the state differs by completion).
pub fn snapshot(n: u8) -> ExecutionSnapshotFileV1 {
    let state = if n.is_multiple_of(2) {
        EngineState::Init
    } else {
        EngineState::Complete
    };
    // Vary the workflow hash so every n gives a distinct content address.
    ExecutionSnapshotFileV1 {
        workflow_hash: WorkflowHash::from_digest(Sha256Digest::from_bytes(&[n; 32])),
        engine_payload: EnginePayloadV1::new(state).unwrap(),
    }
}

fn ev(scope: EventScope, data: EventData, id: u64) -> SessionEvent {
    // The store assigns indices; 0 is a placeholder.
    SessionEvent::new(event_id(id), EventIndex::ZERO, session(), scope, data).unwrap()
}

/// session_created + run_started + root node_created (introduces snapshot 0).
pub fn start_plan(snapshots: &SnapshotStore) -> AppendPlan {
    let snap = snapshots.put(&snapshot(0)).unwrap();
    AppendPlan {
        events: vec![
            ev(
                EventScope::Session,
                EventData::SessionCreated(SessionCreated {}),
                0,
            ),
            ev(
                EventScope::Run(run()),
                EventData::run_started(RunStarted {
                    workflow_id: WorkflowId::parse("project.sample").unwrap(),
                    workflow_hash: workflow_hash(),
                    workflow_source_kind: WorkflowSourceKind::Project,
                    workflow_source_ref: "sample.json".into(),
                    lane: None,
                }),
                1,
            ),
            ev(
                EventScope::Node(run(), node(0)),
                EventData::NodeCreated(NodeCreated {
                    node_kind: NodeKind::Step,
                    parent_node_id: None,
                    workflow_hash: workflow_hash(),
                    snapshot_ref: snap,
                }),
                2,
            ),
        ],
    }
}

/// node `to` created under `from` (introducing snapshot `to`), its edge, and a recap output.
pub fn advance_plan(snapshots: &SnapshotStore, from: u8, to: u8) -> AppendPlan {
    let snap = snapshots.put(&snapshot(to)).unwrap();
    let base = 100 * u64::from(to);
    AppendPlan {
        events: vec![
            ev(
                EventScope::Node(run(), node(to)),
                EventData::NodeCreated(NodeCreated {
                    node_kind: NodeKind::Step,
                    parent_node_id: Some(node(from)),
                    workflow_hash: workflow_hash(),
                    snapshot_ref: snap,
                }),
                base,
            ),
            ev(
                EventScope::Run(run()),
                EventData::EdgeCreated(EdgeCreated {
                    edge_kind: EdgeKind::AckedStep,
                    from_node_id: node(from),
                    to_node_id: node(to),
                    cause: EdgeCause {
                        kind: EdgeCauseKind::IntentionalFork,
                        event_id: event_id(base),
                    },
                }),
                base + 1,
            ),
            ev(
                EventScope::Node(run(), node(to)),
                EventData::node_output_appended(NodeOutputAppended {
                    output_id: OutputId::from_entropy(&[to; 10]),
                    supersedes_output_id: None,
                    output_channel: OutputChannel::Recap,
                    payload: OutputPayload::notes(&format!("step {to} done")),
                }),
                base + 2,
            ),
        ],
    }
}

/// A plan with no snapshot (nothing to pin).
pub fn notes_plan(n: u8) -> AppendPlan {
    AppendPlan {
        events: vec![ev(
            EventScope::Node(run(), node(0)),
            EventData::node_output_appended(NodeOutputAppended {
                output_id: OutputId::from_entropy(&[200 - n; 10]),
                supersedes_output_id: None,
                output_channel: OutputChannel::Recap,
                payload: OutputPayload::notes(&format!("note {n}")),
            }),
            10_000 + u64::from(n),
        )],
    }
}

pub struct Fixture {
    pub fs: MemFs,
    pub store: SessionStore,
    pub snapshots: SnapshotStore,
}

impl Fixture {
    pub fn new() -> Self {
        Self::on(MemFs::new())
    }

    pub fn on(fs: MemFs) -> Self {
        let shared: Arc<dyn workrail::store::fs::StoreFs> = Arc::new(fs.clone());
        Self {
            store: SessionStore::new(Arc::clone(&shared)),
            snapshots: SnapshotStore::new(shared),
            fs,
        }
    }

    pub fn append(&self, plan: AppendPlan) -> Result<(), StoreError> {
        self.store
            .with_append_gate(&session(), workrail::store::SessionIntent::Create, |gate| {
                gate.append(plan).map(drop)
            })
    }

    /// Committed event kinds, in order.
    pub fn kinds(&self) -> Vec<EventKind> {
        match self.store.load(&session()) {
            Ok(loaded) => loaded
                .events()
                .all()
                .unwrap()
                .iter()
                .map(|e| e.kind())
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

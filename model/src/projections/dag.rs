//! The run DAG of one run (locks §1.1 "Runs are DAGs; branches are projections").
//!
//! Nodes come from `node_created` (kind, parent, snapshotRef, creation index) and edges from
//! `edge_created` (kind, cause). A node's children are the nodes whose `parentNodeId` is that node
//! (the locked invariant is that every edge's `toNodeId` has `parentNodeId == fromNodeId`, so
//! parent links and edges describe the same tree), listed in creation order. Branches are not
//! stored anywhere: they are read off leaves and ancestry (`L-DAG-NO-BRANCH-ID`).

use std::collections::{BTreeMap, BTreeSet};

use workrail_spec::closed::{EdgeCauseKind, EdgeKind, NodeKind, WorkflowSourceKind};
use workrail_spec::event::{EventData, SessionEvent};
use workrail_spec::ids::{
    EventId, EventIndex, NodeId, RunId, SnapshotRef, WorkflowHash, WorkflowId,
};

/// One node of a run DAG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DagNode {
    pub node_id: NodeId,
    pub kind: NodeKind,
    /// `None` only for the run's root.
    pub parent: Option<NodeId>,
    pub snapshot_ref: SnapshotRef,
    /// The `EventIndex` of its `node_created`.
    pub created_at: EventIndex,
    /// Nodes whose parent is this node, in creation order.
    pub children: Vec<NodeId>,
}

/// One edge of a run DAG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DagEdge {
    pub kind: EdgeKind,
    pub from: NodeId,
    pub to: NodeId,
    pub cause: EdgeCauseKind,
    /// The event the cause points at, for explainability.
    pub cause_event_id: EventId,
    /// The `EventIndex` of its `edge_created`.
    pub created_at: EventIndex,
}

/// What `run_started` pinned the run to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunPin {
    pub workflow_id: WorkflowId,
    pub workflow_hash: WorkflowHash,
    pub source_kind: WorkflowSourceKind,
    pub started_at: EventIndex,
}

/// The DAG of one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDag {
    pub run_id: RunId,
    /// From `run_started` (absent if the log has nodes but no `run_started` for the run).
    pub pin: Option<RunPin>,
    pub nodes: BTreeMap<NodeId, DagNode>,
    /// In `EventIndex` order.
    pub edges: Vec<DagEdge>,
}

/// The runs of a session, in `run_started` order.
pub fn run_ids(events: &[SessionEvent]) -> Vec<RunId> {
    let mut seen = BTreeSet::new();
    events
        .iter()
        .filter(|e| matches!(e.data(), EventData::RunStarted(_)))
        .filter_map(|e| e.scope().run_id().cloned())
        .filter(|run| seen.insert(run.clone()))
        .collect()
}

impl RunDag {
    /// Builds the DAG of `run` from the session's events.
    pub fn build(events: &[SessionEvent], run: &RunId) -> Self {
        let mut dag = Self {
            run_id: run.clone(),
            pin: None,
            nodes: BTreeMap::new(),
            edges: Vec::new(),
        };
        for event in events {
            if event.scope().run_id() != Some(run) {
                continue;
            }
            match event.data() {
                EventData::RunStarted(started) if dag.pin.is_none() => {
                    dag.pin = Some(RunPin {
                        workflow_id: started.workflow_id.clone(),
                        workflow_hash: started.workflow_hash.clone(),
                        source_kind: started.workflow_source_kind,
                        started_at: event.event_index(),
                    });
                }
                EventData::NodeCreated(created) => {
                    let Some(node_id) = event.scope().node_id() else {
                        continue;
                    };
                    if dag.nodes.contains_key(node_id) {
                        continue; // a duplicate would have been a dedupe no-op
                    }
                    if let Some(parent) = &created.parent_node_id
                        && let Some(parent_node) = dag.nodes.get_mut(parent)
                    {
                        parent_node.children.push(node_id.clone());
                    }
                    dag.nodes.insert(
                        node_id.clone(),
                        DagNode {
                            node_id: node_id.clone(),
                            kind: created.node_kind,
                            parent: created.parent_node_id.clone(),
                            snapshot_ref: created.snapshot_ref.clone(),
                            created_at: event.event_index(),
                            children: Vec::new(),
                        },
                    );
                }
                EventData::EdgeCreated(edge) => dag.edges.push(DagEdge {
                    kind: edge.edge_kind,
                    from: edge.from_node_id.clone(),
                    to: edge.to_node_id.clone(),
                    cause: edge.cause.kind,
                    cause_event_id: edge.cause.event_id.clone(),
                    created_at: event.event_index(),
                }),
                _ => {}
            }
        }
        dag
    }

    pub fn node(&self, node_id: &NodeId) -> Option<&DagNode> {
        self.nodes.get(node_id)
    }

    /// The root (the node without a parent), if the run has one.
    pub fn root(&self) -> Option<&DagNode> {
        self.nodes
            .values()
            .filter(|n| n.parent.is_none())
            .min_by_key(|n| n.created_at)
    }

    /// Nodes without children (`L-TIP-PER-RUN`), in `NodeId` order.
    pub fn leaves(&self) -> Vec<&DagNode> {
        self.nodes
            .values()
            .filter(|n| n.children.is_empty())
            .collect()
    }

    /// The node's reachable history: the node itself, its parent, ..., the root.
    pub fn ancestry(&self, node_id: &NodeId) -> Vec<NodeId> {
        let mut path = Vec::new();
        let mut seen = BTreeSet::new();
        let mut current = self.nodes.get(node_id);
        while let Some(node) = current {
            if !seen.insert(&node.node_id) {
                break; // a malformed log with a parent cycle: stop rather than loop
            }
            path.push(node.node_id.clone());
            current = node.parent.as_ref().and_then(|p| self.nodes.get(p));
        }
        path
    }

    /// Children created by advancing (`nodeKind=step`), in creation order. A node with such a
    /// child is not a tip for advancing purposes: a further advance forks (see the model).
    pub fn step_children(&self, node_id: &NodeId) -> Vec<&DagNode> {
        self.nodes.get(node_id).map_or_else(Vec::new, |node| {
            node.children
                .iter()
                .filter_map(|c| self.nodes.get(c))
                .filter(|c| c.kind == NodeKind::Step)
                .collect()
        })
    }

    /// Edges out of `node_id`, in creation order.
    pub fn edges_from<'a>(&'a self, node_id: &'a NodeId) -> impl Iterator<Item = &'a DagEdge> {
        self.edges.iter().filter(move |e| &e.from == node_id)
    }
}

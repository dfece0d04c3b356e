//! Durable truth, compared: the observable shape of a run, computed by the *model's* projections
//! from an event log, with every id translated into the model's id space through the bijection
//! the harness builds as nodes and attempts appear (the model derives its ids, production mints
//! or derives them differently, so only structure can be compared).
//!
//! The shape holds everything a client or a later call can observe about a run: the DAG (node
//! kinds, parent links, snapshot refs, edge kinds and causes, all in creation order), the
//! preferred tip, the run status, the unresolved gaps (node, severity, reason, details), the
//! current outputs per node (channel and payload), the recorded attempts per node (attempt,
//! outcome, blockers with their codes, pointers and details, in order), the effective
//! preferences at every node, every capability observation with its provenance, each node's
//! capability status (on the node and, enforcement-grade, on its branch), and every gap
//! resolution (which node resolved what, where) and every divergence marker. Production's own projection of the same log
//! must agree on the preferred tip, the status, each node's current output per channel, the
//! unresolved gaps, every node's effective preferences and every node's capability projection.

use std::collections::BTreeMap;

use workrail_model::Model;
use workrail_model::projections::{
    PreferenceDefaults, RunDag, advance_records, branch_capability_status, capability_status,
    effective_preferences, gap_records, node_outputs, preferred_tip, run_status,
    unresolved_gaps_in_run,
};
use workrail_spec::blocker::{BlockerPointer, ReasonDetails};
use workrail_spec::closed::{
    Autonomy, Capability, CapabilityStatus, DivergenceReason, EdgeCauseKind, EdgeKind, GapSeverity,
    NodeKind, OutputChannel, RunStatus,
};
use workrail_spec::event::{
    AdvanceOutcome, EffectivePreferences, EventData, GapResolution, OutputPayload, Provenance,
    SessionEvent,
};
use workrail_spec::ids::{AttemptId, NodeId, RunId, SnapshotRef, StepId};
use workrail_spec::reason::GapReason;

/// A one-to-one map between model ids and production ids, grown as they appear.
#[derive(Debug, Clone)]
pub struct BiMap<T: Ord + Clone + std::fmt::Debug> {
    m2i: BTreeMap<T, T>,
    i2m: BTreeMap<T, T>,
}

impl<T: Ord + Clone + std::fmt::Debug> Default for BiMap<T> {
    fn default() -> Self {
        Self {
            m2i: BTreeMap::new(),
            i2m: BTreeMap::new(),
        }
    }
}

impl<T: Ord + Clone + std::fmt::Debug> BiMap<T> {
    /// Links `m` (model) and `i` (production); refuses to break the bijection.
    pub fn link(&mut self, m: &T, i: &T) -> Result<(), String> {
        match (self.m2i.get(m), self.i2m.get(i)) {
            (Some(known), _) if known != i => Err(format!(
                "model {m:?} is already paired with production {known:?}, now {i:?} claims it"
            )),
            (_, Some(known)) if known != m => Err(format!(
                "production {i:?} is already paired with model {known:?}, now {m:?} claims it"
            )),
            _ => {
                self.m2i.insert(m.clone(), i.clone());
                self.i2m.insert(i.clone(), m.clone());
                Ok(())
            }
        }
    }

    pub fn to_impl(&self, m: &T) -> Option<&T> {
        self.m2i.get(m)
    }

    pub fn to_model(&self, i: &T) -> Option<&T> {
        self.i2m.get(i)
    }

    pub fn len(&self) -> usize {
        self.m2i.len()
    }

    pub fn is_empty(&self) -> bool {
        self.m2i.is_empty()
    }
}

/// The id bijections.
#[derive(Debug, Clone, Default)]
pub struct Bijection {
    pub nodes: BiMap<NodeId>,
    pub attempts: BiMap<AttemptId>,
}

/// An output payload without its ids.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum PayloadShape {
    Notes(String),
    Artifact {
        sha256: String,
        content_type: String,
        byte_length: u64,
    },
}

/// One recorded ack attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutcomeShape {
    Advanced {
        to: NodeId,
    },
    /// Each blocker's code, pointer (with what it points at) and structured details, in order.
    Blocked {
        blockers: Vec<(String, BlockerPointer, Option<ReasonDetails>)>,
        /// The digest of the output the blocked call sent (decision D163).
        output_digest: Option<workrail_spec::ids::Sha256Digest>,
    },
}

/// Everything observable about one run, in model ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunShape {
    /// `(node, kind, parent, snapshotRef)` in creation order.
    pub nodes: Vec<(NodeId, NodeKind, Option<NodeId>, SnapshotRef)>,
    /// `(kind, from, to, cause)` in creation order.
    pub edges: Vec<(EdgeKind, NodeId, NodeId, EdgeCauseKind)>,
    pub tip: Option<NodeId>,
    pub status: Option<RunStatus>,
    /// Unresolved gaps `(node, severity, reason, details)`, sorted.
    pub gaps: Vec<(NodeId, GapSeverity, GapReason, Option<ReasonDetails>)>,
    /// Current outputs `(node, channel, payload)`, sorted.
    pub outputs: Vec<(NodeId, OutputChannel, PayloadShape)>,
    /// Recorded attempts per node, in record order.
    pub attempts: Vec<(NodeId, AttemptId, OutcomeShape)>,
    /// Effective preferences at every node, in creation order.
    pub preferences: Vec<(NodeId, EffectivePreferences)>,
    /// Every capability observation `(node, capability, status, provenance)`, in log order.
    pub observations: Vec<(NodeId, Capability, CapabilityStatus, Provenance)>,
    /// Per node (creation order) and capability: the latest observation on the node itself,
    /// and the enforcement-grade status on its branch (D27, D40).
    pub capabilities: Vec<(NodeId, Capability, CapabilityStatus, CapabilityStatus)>,
    /// Resolutions `(resolving node, severity, reason, details, resolved gap's node)`, sorted.
    pub resolutions: Vec<ResolutionShape>,
    /// Every divergence marker `(node, reason, summary, relatedStepId)`, in log order (D42).
    pub divergences: Vec<(NodeId, DivergenceReason, String, Option<StepId>)>,
}

/// One gap resolution: `(resolving node, severity, reason, details, resolved gap's node)`.
pub type ResolutionShape = (
    NodeId,
    GapSeverity,
    GapReason,
    Option<ReasonDetails>,
    Option<NodeId>,
);

/// Translates production ids into model ids; an id never seen is an error.
struct Translate<'a> {
    bij: Option<&'a Bijection>,
    unknown: Vec<String>,
}

impl Translate<'_> {
    fn node(&mut self, id: &NodeId) -> NodeId {
        match self.bij {
            None => id.clone(),
            Some(b) => match b.nodes.to_model(id) {
                Some(m) => m.clone(),
                None => {
                    self.unknown.push(format!("node {id}"));
                    id.clone()
                }
            },
        }
    }

    fn attempt(&mut self, id: &AttemptId) -> AttemptId {
        match self.bij {
            None => id.clone(),
            Some(b) => match b.attempts.to_model(id) {
                Some(m) => m.clone(),
                None => {
                    self.unknown.push(format!("attempt {id}"));
                    id.clone()
                }
            },
        }
    }
}

/// The shape of `run` in `events` (the model's own log when `bij` is `None`, a production log
/// translated through `bij` otherwise). `is_complete` says whether a snapshot is complete.
pub fn run_shape(
    events: &[SessionEvent],
    run: &RunId,
    bij: Option<&Bijection>,
    is_complete: &dyn Fn(&SnapshotRef) -> bool,
    defaults: &PreferenceDefaults,
) -> Result<RunShape, String> {
    let dag = RunDag::build(events, run);
    let mut t = Translate {
        bij,
        unknown: Vec::new(),
    };
    let mut by_creation: Vec<_> = dag.nodes.values().collect();
    by_creation.sort_by_key(|n| n.created_at);
    let mut nodes = Vec::new();
    let mut preferences = Vec::new();
    let mut attempts = Vec::new();
    let mut outputs = Vec::new();
    let mut capabilities = Vec::new();
    for n in &by_creation {
        let id = t.node(&n.node_id);
        let parent = n.parent.as_ref().map(|p| t.node(p));
        nodes.push((id.clone(), n.kind, parent, n.snapshot_ref.clone()));
        for capability in Capability::ALL {
            capabilities.push((
                id.clone(),
                *capability,
                capability_status(events, run, &n.node_id, *capability),
                branch_capability_status(events, &dag, run, &n.node_id, *capability),
            ));
        }
        preferences.push((
            id.clone(),
            effective_preferences(events, &dag, &n.node_id, defaults),
        ));
        for record in advance_records(events, run, &n.node_id) {
            let outcome = match &record.outcome {
                AdvanceOutcome::Advanced { to_node_id } => OutcomeShape::Advanced {
                    to: t.node(to_node_id),
                },
                AdvanceOutcome::Blocked {
                    blockers,
                    output_digest,
                } => OutcomeShape::Blocked {
                    blockers: blockers
                        .blockers()
                        .iter()
                        .map(|b| (b.code.to_string(), b.pointer.clone(), b.details.clone()))
                        .collect(),
                    output_digest: output_digest.clone(),
                },
            };
            attempts.push((id.clone(), t.attempt(&record.attempt_id), outcome));
        }
        for record in node_outputs(events, run, &n.node_id).current_set() {
            let payload = match &record.payload {
                OutputPayload::Notes { notes_markdown } => {
                    PayloadShape::Notes(notes_markdown.as_str().to_owned())
                }
                OutputPayload::ArtifactRef {
                    sha256,
                    content_type,
                    byte_length,
                } => PayloadShape::Artifact {
                    sha256: sha256.to_string(),
                    content_type: content_type.clone(),
                    byte_length: *byte_length,
                },
            };
            outputs.push((id.clone(), record.channel, payload));
        }
    }
    outputs.sort();
    let edges = dag
        .edges
        .iter()
        .map(|e| (e.kind, t.node(&e.from), t.node(&e.to), e.cause))
        .collect();
    let tip = preferred_tip(events, &dag).map(|tip| t.node(&tip.node_id));
    let status = run_status(events, &dag, is_complete, defaults);
    let mut gaps: Vec<_> = unresolved_gaps_in_run(events, run)
        .into_iter()
        .map(|g| (t.node(&g.node_id), g.severity, g.reason, g.details))
        .collect();
    gaps.sort_by_key(|g| format!("{g:?}"));
    let mut observations = Vec::new();
    for event in events {
        if let EventData::CapabilityObserved(o) = event.data()
            && event.scope().run_id() == Some(run)
            && let Some(node) = event.scope().node_id()
        {
            observations.push((t.node(node), o.capability, o.status, o.provenance.clone()));
        }
    }
    let mut divergences = Vec::new();
    for event in events {
        if let EventData::DivergenceRecorded(d) = event.data()
            && event.scope().run_id() == Some(run)
            && let Some(node) = event.scope().node_id()
        {
            divergences.push((
                t.node(node),
                d.reason,
                d.summary.as_str().to_owned(),
                d.related_step_id.clone(),
            ));
        }
    }
    let records = gap_records(events);
    let mut resolutions = Vec::new();
    for g in records.iter().filter(|g| &g.run_id == run) {
        if let GapResolution::Resolves { resolves_gap_id } = &g.resolution {
            let resolved_node = records
                .iter()
                .find(|r| &r.gap_id == resolves_gap_id)
                .map(|r| r.node_id.clone());
            resolutions.push((
                t.node(&g.node_id),
                g.severity,
                g.reason,
                g.details.clone(),
                resolved_node.map(|n| t.node(&n)),
            ));
        }
    }
    resolutions.sort_by_key(|r| format!("{r:?}"));
    if !t.unknown.is_empty() {
        return Err(format!(
            "production's log has ids the harness never saw in a response: {}",
            t.unknown.join(", ")
        ));
    }
    Ok(RunShape {
        nodes,
        edges,
        tip,
        status,
        gaps,
        outputs,
        attempts,
        preferences,
        observations,
        capabilities,
        resolutions,
        divergences,
    })
}

/// The model's shape of a run.
pub fn model_shape(
    model: &Model,
    session: &workrail_spec::ids::SessionId,
    run: &RunId,
) -> Result<RunShape, String> {
    let events = model
        .events(session)
        .ok_or_else(|| format!("the model has no session {session}"))?;
    let defaults = model
        .preference_defaults(session)
        .ok_or_else(|| format!("the model has no defaults for {session}"))?;
    run_shape(events, run, None, &|r| model.is_complete(r), &defaults)
}

/// Production's own projection of its log must agree with the model's projections of the same
/// log (locks §2, §2.1): on the preferred tip and the run status, each node's current output per
/// channel (the latest one not superseded), the run's unresolved gaps, every node's effective
/// preferences, and every node's capability projection (the latest observation on the node, the
/// enforcement-grade status on its branch and whether that unlocks: D27, D40).
pub fn cross_check_production_projection(
    events: &[SessionEvent],
    run: &RunId,
    is_complete: &dyn Fn(&SnapshotRef) -> bool,
) -> Result<(), String> {
    let projection =
        workrail::projections::project(events, workrail::projections::TipPolicy::Latest);
    let Some(view) = projection.runs.get(run) else {
        return Err(format!("production's projection has no run {run}"));
    };
    let dag = RunDag::build(events, run);
    let model_tip = preferred_tip(events, &dag).map(|t| t.node_id);
    if view.preferred_tip != model_tip {
        return Err(format!(
            "preferred tip: production's projection says {:?}, the model's projection of the same log says {model_tip:?}",
            view.preferred_tip
        ));
    }
    let defaults = PreferenceDefaults {
        session_baseline: None,
        global: workrail::protocol::GLOBAL_DEFAULTS,
    };
    let autonomy: Autonomy =
        view.preferred_tip
            .as_ref()
            .map_or(workrail::protocol::GLOBAL_DEFAULTS.autonomy, |tip| {
                workrail::projections::effective_preferences(
                    view,
                    tip,
                    None,
                    workrail::protocol::GLOBAL_DEFAULTS,
                )
                .autonomy
            });
    let production_status = view.status(is_complete, autonomy);
    let model_status = run_status(events, &dag, is_complete, &defaults);
    if Some(production_status) != model_status {
        return Err(format!(
            "run status: production's projection says {production_status:?}, the model's projection of the same log says {model_status:?}"
        ));
    }
    for node in dag.nodes.keys() {
        let outputs = node_outputs(events, run, node);
        for channel in [OutputChannel::Recap, OutputChannel::Artifact] {
            let model = outputs
                .current(channel)
                .map(|o| (o.output_id.clone(), o.payload.clone()));
            // The projection holds where the current output is (D226): the log's event there
            // must be that output, of the kind the projection says.
            let production = match view.current_output(node, channel) {
                None => None,
                Some(o) => match events.get(o.position).map(SessionEvent::data) {
                    Some(EventData::NodeOutputAppended(appended))
                        if o.notes == matches!(appended.payload, OutputPayload::Notes { .. }) =>
                    {
                        Some((appended.output_id.clone(), appended.payload.clone()))
                    }
                    other => {
                        return Err(format!(
                            "current {channel:?} output of {node}: production's projection points at event {} (notes: {}), which is {other:?}",
                            o.position, o.notes
                        ));
                    }
                },
            };
            if production != model {
                return Err(format!(
                    "current {channel:?} output of {node}: production's projection says {production:?}, the model's projection of the same log says {model:?}"
                ));
            }
        }
        for capability in Capability::ALL {
            let production_here = view
                .capabilities
                .get(&(node.clone(), *capability))
                .map_or(CapabilityStatus::Unknown, |o| o.status);
            let model_here = capability_status(events, run, node, *capability);
            let production_branch = view
                .strong_status(node, *capability)
                .unwrap_or(CapabilityStatus::Unknown);
            let model_branch = branch_capability_status(events, &dag, run, node, *capability);
            let production_unlocked = view.capability_unlocked(node, *capability);
            if production_here != model_here
                || production_branch != model_branch
                || production_unlocked != (model_branch == CapabilityStatus::Available)
            {
                return Err(format!(
                    "capability {capability} at {node}: production's projection says latest {production_here:?}, strong on the branch {production_branch:?}, unlocked {production_unlocked}; the model's projection of the same log says latest {model_here:?}, strong on the branch {model_branch:?}"
                ));
            }
        }
        let production_prefs = workrail::projections::effective_preferences(
            view,
            node,
            None,
            workrail::protocol::GLOBAL_DEFAULTS,
        );
        let model_prefs = effective_preferences(events, &dag, node, &defaults);
        if production_prefs != model_prefs {
            return Err(format!(
                "effective preferences of {node}: production's projection says {production_prefs:?}, the model's projection of the same log says {model_prefs:?}"
            ));
        }
    }
    if let Some(stray) = view
        .current_outputs()
        .map(|(node, channel, _)| (node, channel))
        .find(|(node, _)| !dag.nodes.contains_key(*node))
    {
        return Err(format!(
            "production's projection has a current output on {stray:?}, a node the model's projection of the run does not have"
        ));
    }
    let mut production_gaps: Vec<_> = view
        .unresolved_gaps
        .iter()
        .map(|(node, g)| (node.clone(), g.gap_id.clone(), g.severity, g.reason))
        .collect();
    let mut model_gaps: Vec<_> = unresolved_gaps_in_run(events, run)
        .into_iter()
        .map(|g| (g.node_id, g.gap_id, g.severity, g.reason))
        .collect();
    production_gaps.sort_by_key(|g| format!("{g:?}"));
    model_gaps.sort_by_key(|g| format!("{g:?}"));
    if production_gaps != model_gaps {
        return Err(format!(
            "unresolved gaps: production's projection says {production_gaps:?}, the model's projection of the same log says {model_gaps:?}"
        ));
    }
    Ok(())
}

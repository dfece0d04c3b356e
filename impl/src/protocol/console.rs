//! Builds the Console's read models (`crate::projections::console`) from the store's read path:
//! no session lock is taken for writing, nothing is written (not even the projection cache,
//! decision D69), and an unhealthy session yields its validated prefix with a salvage notice.

use std::collections::HashSet;

use workrail_spec::event::{AdvanceOutcome, EventData, GapResolution, OutputPayload, SessionEvent};
use workrail_spec::ids::{NodeId, RunId, SessionId};
use workrail_spec::reason::ReasonCode;

use super::Workrail;
use super::facts::Facts;
use super::inspect::{NodeStep, node_step, session_summary_read_only};
use crate::projections::NodeInfo;
use crate::projections::console::{
    ArtifactView, CapabilityView, DecisionView, DivergenceView, EdgeView, GapView, LIST_MAX,
    LaneOf, NOTES_MAX_BYTES, NodeSummary, NodeView, RunView, SalvageNotice, SessionRow,
    SessionView, TEXT_MAX_BYTES, TITLE_MAX_BYTES, bounded, bounded_list,
};
use crate::store::{LoadedSession, SessionRead, StoreError};

/// What a Console lookup found.
#[derive(Debug)]
pub enum ConsoleLookup<T> {
    Found(T),
    /// No session (or no node in it) has this id.
    NotFound,
    /// The store could not be read; the message says why.
    Unreadable(String),
}

fn compact<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

fn version_of(l: &LoadedSession) -> String {
    format!(
        "m{}.{}-e{}-{}",
        l.manifest_committed_bytes,
        l.manifest_file_bytes,
        l.event_count(),
        l.health.kind().as_str()
    )
}

pub(super) fn salvage_of(loaded: &LoadedSession) -> Option<SalvageNotice> {
    let c = loaded.health.corruption()?;
    Some(SalvageNotice {
        health: loaded.health.kind().as_str().to_owned(),
        reason: c.reason.as_str().to_owned(),
        detail: bounded(&c.detail, TEXT_MAX_BYTES),
        manifest_index: Some(c.manifest_index),
        how_to_clear: crate::store::how_to_clear(
            &loaded.session_id,
            loaded.health.kind(),
            Some(c.reason.as_str()),
        ),
    })
}

impl Workrail {
    /// Every session as a Console row, newest activity first (see
    /// [`Workrail::sessions_by_activity`]).
    pub fn console_sessions(
        &self,
        modified: &dyn Fn(&std::path::Path) -> Option<std::time::SystemTime>,
    ) -> Result<Vec<SessionRow>, String> {
        let rows = self.sessions_by_activity(modified).map_err(|e| e.message)?;
        Ok(rows
            .into_iter()
            .map(|(at, row)| {
                // Lanes are part of the run whose parallel step started them, not runs of the
                // session of their own (decision D171).
                let (lanes, runs): (Vec<_>, Vec<_>) = row.runs.iter().partition(|r| r.is_lane());
                let runs = if runs.is_empty() { lanes.clone() } else { runs };
                let mut workflows: Vec<String> = Vec::new();
                for run in &runs {
                    let id = run.workflow_id.to_string();
                    if !workflows.contains(&id) {
                        workflows.push(id);
                    }
                }
                let preferred = runs.iter().max_by_key(|r| r.tip_last_activity);
                SessionRow {
                    session_id: row.session_id.to_string(),
                    health: row.health.clone(),
                    workflows,
                    labels: runs
                        .iter()
                        .map(|r| bounded(&r.label, TITLE_MAX_BYTES))
                        .collect(),
                    status: preferred.map(|r| r.status.as_str().to_owned()),
                    runs: runs.len(),
                    lanes: row.runs.len() - runs.len(),
                    last_activity: at.map(crate::time::rfc3339_utc),
                    unresolved_gaps: row.runs.iter().map(|r| r.unresolved_gaps).sum(),
                }
            })
            .collect())
    }

    fn console_load(&self, session_id: &str) -> ConsoleLookup<std::sync::Arc<LoadedSession>> {
        let Ok(session) = SessionId::parse(session_id) else {
            return ConsoleLookup::NotFound;
        };
        match self.store.load(&session) {
            Ok(loaded) => ConsoleLookup::Found(loaded),
            Err(StoreError::NotFound { .. }) => ConsoleLookup::NotFound,
            Err(e) => ConsoleLookup::Unreadable(e.for_people()),
        }
    }

    /// A session and every event of it (its validated prefix when it is not healthy). A view
    /// kept from an earlier load whose forgotten events turn out changed or gone (D225) is let
    /// go and the session loaded again, so the page shows what a fresh load finds (the salvage
    /// view of a damaged session), not an error about a view no longer true.
    fn console_events(
        &self,
        session_id: &str,
    ) -> ConsoleLookup<(std::sync::Arc<LoadedSession>, Vec<SessionEvent>)> {
        let mut loaded_again = false;
        loop {
            let loaded = match self.console_load(session_id) {
                ConsoleLookup::Found(l) => l,
                ConsoleLookup::NotFound => return ConsoleLookup::NotFound,
                ConsoleLookup::Unreadable(e) => return ConsoleLookup::Unreadable(e),
            };
            let read = loaded.events().all().map(std::borrow::Cow::into_owned);
            match read {
                Ok(events) => return ConsoleLookup::Found((loaded, events)),
                Err(StoreError::Unhealthy { session, .. }) if !loaded_again => {
                    self.store.forget_cached(&session);
                    loaded_again = true;
                }
                Err(StoreError::Deleted { .. }) => return ConsoleLookup::NotFound,
                Err(e) => return ConsoleLookup::Unreadable(e.for_people()),
            }
        }
    }

    /// An opaque string that changes whenever the session's committed log or health changes
    /// (decision D82): the manifest's committed and file lengths, the event count and the
    /// health. Read path only.
    pub fn console_version(&self, session_id: &str) -> ConsoleLookup<String> {
        match self.console_load(session_id) {
            ConsoleLookup::Found(l) => ConsoleLookup::Found(version_of(&l)),
            ConsoleLookup::NotFound => ConsoleLookup::NotFound,
            ConsoleLookup::Unreadable(e) => ConsoleLookup::Unreadable(e),
        }
    }

    /// A node's summary: kind, the step it waits at and its title, blocked attempts, lanes.
    pub(super) fn console_node_summary(
        &self,
        facts: &Facts<'_>,
        compiled: Option<&workrail_spec::compiled::CompiledWorkflowSnapshotV1>,
        info: &NodeInfo,
        tip: Option<&NodeId>,
    ) -> NodeSummary {
        let (step_id, title) = match node_step(self, compiled, info) {
            NodeStep::Pending { step_id, title } => {
                let title = title.unwrap_or_else(|| step_id.to_string());
                (Some(step_id.to_string()), title)
            }
            other => (None, other.label().to_owned()),
        };
        // The Console's facts are of a whole log read once, so this read cannot fail.
        let blocked_attempts = facts
            .advance_records(&info.node_id)
            .unwrap_or_default()
            .iter()
            .filter(|(_, a)| matches!(a.outcome, AdvanceOutcome::Blocked { .. }))
            .count();
        NodeSummary {
            node_id: info.node_id.to_string(),
            kind: info.kind.as_str().to_owned(),
            parent: info.parent.as_ref().map(ToString::to_string),
            created_index: info.created_index,
            step_id,
            title: bounded(&title, TITLE_MAX_BYTES),
            blocked_attempts,
            is_tip: tip == Some(&info.node_id),
            lanes: super::lanes::lanes_of(facts, &info.node_id).len(),
        }
    }

    /// A session's runs with their DAGs (at most [`LIST_MAX`] nodes per run, the newest).
    pub fn console_session(&self, session_id: &str) -> ConsoleLookup<SessionView> {
        match self.console_session_with(session_id, |_, _, _| ()) {
            ConsoleLookup::Found((view, ())) => ConsoleLookup::Found(view),
            ConsoleLookup::NotFound => ConsoleLookup::NotFound,
            ConsoleLookup::Unreadable(e) => ConsoleLookup::Unreadable(e),
        }
    }

    /// [`Workrail::console_session`], and what `beside` makes of the same read: the session's
    /// facts, its loaded view and its events (the validated prefix's). A page that shows more than the view (the timeline, the
    /// blocked runs) reads and projects the log once, and cannot read it differently twice.
    pub fn console_session_with<T>(
        &self,
        session_id: &str,
        beside: impl FnOnce(&Facts<'_>, &LoadedSession, &[SessionEvent]) -> T,
    ) -> ConsoleLookup<(SessionView, T)> {
        let (loaded, events) = match self.console_events(session_id) {
            ConsoleLookup::Found(found) => found,
            ConsoleLookup::NotFound => return ConsoleLookup::NotFound,
            ConsoleLookup::Unreadable(e) => return ConsoleLookup::Unreadable(e),
        };
        let facts = Facts::new(&events);
        let summary = session_summary_read_only(self, &loaded);
        let lane_parents: HashSet<NodeId> = summary
            .runs
            .iter()
            .filter_map(|r| r.lane.as_ref().map(|l| l.parent_node_id.clone()))
            .collect();
        let mut runs = Vec::new();
        for run in summary.runs.iter().take(LIST_MAX) {
            let Some(view) = facts.run(&run.run_id) else {
                continue;
            };
            let compiled = self.store.workflow(&view.dag.started.workflow_hash).ok();
            let mut infos: Vec<&NodeInfo> = view.dag.nodes.values().collect();
            infos.sort_by_key(|i| i.created_index);
            let node_count = infos.len();
            let nodes_cut = node_count > LIST_MAX;
            let mut infos = infos.split_off(node_count.saturating_sub(LIST_MAX));
            // The preferred tip is always drawn, even when it is older than the newest nodes.
            if let Some(tip) = run.preferred_tip.as_ref()
                && !infos.iter().any(|i| &i.node_id == tip)
                && let Some(info) = view.dag.nodes.get(tip)
            {
                infos.insert(0, info);
            }
            let nodes: Vec<NodeSummary> = infos
                .iter()
                .map(|info| {
                    self.console_node_summary(
                        &facts,
                        compiled.as_deref(),
                        info,
                        run.preferred_tip.as_ref(),
                    )
                })
                .collect();
            // Every node that started lanes, drawn or not: a parallel step's lanes are shown
            // under it even when the node is older than the drawing's budget.
            let mut parents: Vec<&NodeInfo> = view
                .dag
                .nodes
                .values()
                .filter(|info| lane_parents.contains(&info.node_id))
                .collect();
            parents.sort_by_key(|i| i.created_index);
            let lane_groups = parents
                .into_iter()
                .filter_map(|info| {
                    super::inspect::lane_group(
                        self,
                        &facts,
                        compiled.as_deref(),
                        info,
                        &summary.runs,
                    )
                })
                .collect();
            let shown: HashSet<&str> = nodes.iter().map(|n| n.node_id.as_str()).collect();
            let edges = view
                .dag
                .edges()
                .filter(|e| {
                    shown.contains(e.from_node_id.as_str()) && shown.contains(e.to_node_id.as_str())
                })
                .map(|e| EdgeView {
                    from: e.from_node_id.to_string(),
                    to: e.to_node_id.to_string(),
                    kind: e.edge_kind.as_str().to_owned(),
                    cause: e.cause.as_str().to_owned(),
                })
                .collect();
            runs.push(RunView {
                run_id: run.run_id.to_string(),
                workflow_id: run.workflow_id.to_string(),
                label: bounded(&run.label, TITLE_MAX_BYTES),
                status: run.status.as_str().to_owned(),
                preferred_tip: run.preferred_tip.as_ref().map(ToString::to_string),
                unresolved_gaps: run.unresolved_gaps,
                node_count,
                nodes,
                edges,
                nodes_cut,
                lane_of: run.lane.as_ref().map(|l| LaneOf {
                    parent_run_id: l.parent_run_id.to_string(),
                    parent_node_id: l.parent_node_id.to_string(),
                    index: l.lane_index,
                }),
                lane_groups,
            });
        }
        let view = SessionView {
            session_id: loaded.session_id.to_string(),
            version: version_of(&loaded),
            health: loaded.health.kind().as_str().to_owned(),
            salvage: salvage_of(&loaded),
            events: loaded.event_count(),
            runs,
        };
        let extra = beside(&facts, &loaded, &events);
        ConsoleLookup::Found((view, extra))
    }

    /// Everything about one node of a session.
    pub fn console_node(&self, session_id: &str, node_id: &str) -> ConsoleLookup<NodeView> {
        let Ok(node) = NodeId::parse(node_id) else {
            return ConsoleLookup::NotFound;
        };
        let (loaded, events) = match self.console_events(session_id) {
            ConsoleLookup::Found(found) => found,
            ConsoleLookup::NotFound => return ConsoleLookup::NotFound,
            ConsoleLookup::Unreadable(e) => return ConsoleLookup::Unreadable(e),
        };
        let facts = Facts::new(&events);
        let Some((run_id, view)) = facts
            .projection
            .runs
            .iter()
            .find(|(_, v)| v.dag.nodes.contains_key(&node))
        else {
            return ConsoleLookup::NotFound;
        };
        let Some(info) = view.dag.nodes.get(&node) else {
            return ConsoleLookup::NotFound;
        };
        let compiled = self.store.workflow(&view.dag.started.workflow_hash).ok();
        let summary = self.console_node_summary(
            &facts,
            compiled.as_deref(),
            info,
            view.preferred_tip.as_ref(),
        );
        // The facts are of the whole log, read above: reading notes from it cannot fail.
        let notes = facts
            .recap_notes(run_id, &node)
            .ok()
            .flatten()
            .map(|n| bounded(&n, NOTES_MAX_BYTES));
        let artifacts = self.console_artifacts(&events, run_id, &node);
        let gaps = console_gaps(&events, &node);
        let blocked_attempts = super::inspect::blocked_attempts(&facts, &node);
        let prefs = facts.preferences(run_id, &node);
        let ancestry: HashSet<NodeId> = view.ancestry(&node).into_iter().collect();
        let mut capabilities = Vec::new();
        let mut divergences = Vec::new();
        let mut decisions = Vec::new();
        for event in events.iter() {
            let Some(at) = event.scope().node_id() else {
                continue;
            };
            match event.data() {
                EventData::CapabilityObserved(c) if ancestry.contains(at) || at == &node => {
                    capabilities.push(CapabilityView {
                        capability: c.capability.as_str().to_owned(),
                        status: c.status.as_str().to_owned(),
                        provenance: bounded(&compact(&c.provenance), TEXT_MAX_BYTES),
                        node_id: at.to_string(),
                    });
                }
                EventData::DivergenceRecorded(d) if at == &node => {
                    divergences.push(DivergenceView {
                        reason: d.reason.as_str().to_owned(),
                        summary: bounded(d.summary.as_str(), TEXT_MAX_BYTES),
                        related_step_id: d.related_step_id.as_ref().map(ToString::to_string),
                    });
                }
                EventData::DecisionTraceAppended(t) if at == &node => {
                    decisions.extend(t.entries.iter().map(|e| DecisionView {
                        kind: e.kind.as_str().to_owned(),
                        summary: bounded(&e.summary, TEXT_MAX_BYTES),
                    }));
                }
                _ => {}
            }
        }
        ConsoleLookup::Found(NodeView {
            session_id: loaded.session_id.to_string(),
            salvage: salvage_of(&loaded),
            run_id: run_id.to_string(),
            workflow_id: view.dag.started.workflow_id.to_string(),
            lane_of: view.dag.started.lane.as_ref().map(|l| LaneOf {
                parent_run_id: l.parent_run_id.to_string(),
                parent_node_id: l.parent_node_id.to_string(),
                index: l.lane_index,
            }),
            node: summary,
            notes,
            artifacts: bounded_list(artifacts).0,
            gaps: bounded_list(gaps).0,
            blocked_attempts: bounded_list(blocked_attempts).0,
            autonomy: prefs.autonomy.as_str().to_owned(),
            risk_policy: prefs.risk_policy.as_str().to_owned(),
            capabilities: bounded_list(capabilities).0,
            divergences: bounded_list(divergences).0,
            decisions: bounded_list(decisions).0,
        })
    }

    /// The node's current artifact outputs (the `artifacts` channel), each with its own `kind`
    /// when the stored artifact is readable.
    fn console_artifacts(
        &self,
        events: &[SessionEvent],
        run: &RunId,
        node: &NodeId,
    ) -> Vec<ArtifactView> {
        let mut out = Vec::new();
        for event in events {
            if event.scope().node_id() != Some(node) || event.scope().run_id() != Some(run) {
                continue;
            }
            let EventData::NodeOutputAppended(o) = event.data() else {
                continue;
            };
            let OutputPayload::ArtifactRef {
                sha256,
                content_type,
                byte_length,
            } = &o.payload
            else {
                continue;
            };
            let kind = self
                .store
                .artifact(sha256)
                .ok()
                .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_owned))
                .unwrap_or_else(|| "artifact".to_owned());
            out.push(ArtifactView {
                kind: bounded(&kind, TITLE_MAX_BYTES),
                content_type: bounded(content_type, TITLE_MAX_BYTES),
                bytes: *byte_length,
                sha256: sha256.to_string(),
            });
        }
        out
    }
}

/// The gaps recorded at `node` (not the records that only resolve another), each marked
/// resolved when any record of the session resolves it.
fn console_gaps(events: &[SessionEvent], node: &NodeId) -> Vec<GapView> {
    let resolved: HashSet<String> = events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::GapRecorded(g) => match &g.resolution {
                GapResolution::Resolves { resolves_gap_id } => Some(resolves_gap_id.to_string()),
                GapResolution::Unresolved => None,
            },
            _ => None,
        })
        .collect();
    events
        .iter()
        .filter(|e| e.scope().node_id() == Some(node))
        .filter_map(|e| match e.data() {
            EventData::GapRecorded(g) if matches!(g.resolution, GapResolution::Unresolved) => {
                Some(GapView {
                    gap_id: g.gap_id.to_string(),
                    severity: g.severity.as_str().to_owned(),
                    reason_code: ReasonCode::new(g.reason).to_string(),
                    summary: bounded(g.summary.as_str(), TEXT_MAX_BYTES),
                    resolved: resolved.contains(g.gap_id.as_str()),
                })
            }
            _ => None,
        })
        .collect()
}

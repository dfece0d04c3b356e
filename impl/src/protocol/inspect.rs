//! Read-only inspection: `inspect_workflow` (metadata or preview, compiled hash, warnings) and
//! the CLI's session view (run DAG, preferred tip, status, outputs). Nothing here writes.

use std::fmt::Write as _;

use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::ids::{NodeId, SessionId};
use workrail_spec::tools::{
    InspectMode, InspectWorkflowInput, InspectWorkflowOutput, StepPreview, Warning,
};

use serde::{Deserialize, Serialize};
use workrail_spec::closed::RunStatus;
use workrail_spec::event::LaneLink;
use workrail_spec::ids::{RunId, WorkflowId};

use super::facts::Facts;

mod outline;

use super::{GLOBAL_DEFAULTS, Workrail, run_label};
use crate::sources::Catalog;
use crate::store::{CacheKey, CacheLookup, LoadedSession, SessionRead, StoreError};
pub use outline::SessionInspection;
pub(super) use outline::{blocked_attempts, lane_group};

/// One run at a glance (cached per session; derived, never truth).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    pub run_id: RunId,
    pub workflow_id: WorkflowId,
    pub label: String,
    pub status: RunStatus,
    pub nodes: usize,
    pub preferred_tip: Option<NodeId>,
    pub tip_last_activity: u64,
    pub unresolved_gaps: usize,
    /// When the run is a lane: the parallel step's node that started it (decision D168). Read
    /// as required (`null` for a run that is no lane), so a summary cached before lanes existed
    /// does not parse and is rebuilt rather than showing lanes as runs of their own.
    #[serde(deserialize_with = "Option::deserialize")]
    pub lane: Option<LaneLink>,
}

impl RunSummary {
    /// Whether the run is a lane of another run of the session.
    pub fn is_lane(&self) -> bool {
        self.lane.is_some()
    }
}

/// Every run of a session at a glance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    pub runs: Vec<RunSummary>,
}

/// `None` when the session's earlier events cannot be read again now (D225).
fn summarize(wr: &Workrail, loaded: &LoadedSession) -> Option<SessionSummary> {
    Facts::of(loaded.events())
        .ok()
        .map(|facts| summarize_facts(wr, &facts))
}

fn summarize_facts(wr: &Workrail, facts: &Facts) -> SessionSummary {
    let runs = facts
        .projection
        .runs
        .iter()
        .map(|(run, view)| {
            let label = wr
                .store
                .workflow(&view.dag.started.workflow_hash)
                .map(|c| run_label(&c, run))
                .unwrap_or_else(|_| run.to_string());
            let tip_complete = view
                .preferred_tip
                .as_ref()
                .is_some_and(|tip| wr.snapshot_complete(facts, run, tip));
            let autonomy = view
                .preferred_tip
                .as_ref()
                .map_or(GLOBAL_DEFAULTS, |tip| facts.preferences(run, tip))
                .autonomy;
            RunSummary {
                run_id: run.clone(),
                workflow_id: view.dag.started.workflow_id.clone(),
                label,
                status: view.status(|_| tip_complete, autonomy),
                nodes: view.dag.nodes.len(),
                preferred_tip: view.preferred_tip.clone(),
                tip_last_activity: view.tip_last_activity,
                unresolved_gaps: view.unresolved_gaps.len(),
                lane: view.dag.started.lane.clone(),
            }
        })
        .collect();
    SessionSummary { runs }
}

/// The session summary, from the projection cache when it matches the log position, else
/// rebuilt and cached.
/// The summary without writing anything (a cached one when it is current): for commands that
/// must leave the data directory as it is, such as `gc --dry-run`.
pub(super) fn session_summary_read_only(wr: &Workrail, loaded: &LoadedSession) -> SessionSummary {
    match wr.cache.get(&loaded.session_id, CacheKey::of(loaded)) {
        CacheLookup::Hit(summary) => summary,
        _ => summarize(wr, loaded).unwrap_or(SessionSummary { runs: Vec::new() }),
    }
}

pub(super) fn session_summary(wr: &Workrail, loaded: &LoadedSession) -> SessionSummary {
    let key = CacheKey::of(loaded);
    if let CacheLookup::Hit(summary) = wr.cache.get(&loaded.session_id, key) {
        return summary;
    }
    let Some(summary) = summarize(wr, loaded) else {
        return SessionSummary { runs: Vec::new() };
    };
    // The cache is an optimisation: failing to write it changes nothing.
    let _ = wr.cache.put(&loaded.session_id, key, &summary);
    summary
}

/// `WORKFLOW_NOT_FOUND` with "did you mean" and the ids available now.
pub(super) fn workflow_not_found(tool: &str, catalog: &Catalog, id: &str) -> ErrorEnvelope {
    // A file that declares the id but did not load: its own errors, not "not found".
    if let Some(problem) = catalog.problem_of(id) {
        problem.log_once();
        let envelope = problem.to_envelope();
        return ErrorEnvelope {
            message: format!(
                "{tool}: workflow {id:?} exists but does not load: {}",
                envelope.message
            ),
            ..envelope
        };
    }
    let available: Vec<String> = catalog
        .summaries()
        .iter()
        .map(|s| s.workflow_id.to_string())
        .collect();
    let suggestions = catalog.suggest(id);
    let did_you_mean = match suggestions.as_slice() {
        [] => String::new(),
        [one] => format!(" Did you mean `{one}`?"),
        many => format!(
            " Did you mean one of: {}?",
            many.iter()
                .map(|s| format!("`{s}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let next = match suggestions.first() {
        Some(best) => format!(
            "Call {tool} again with workflowId \"{best}\" if that is the one you mean; otherwise pass one of the ids list_workflows returns, exactly (available now: {}).",
            available.join(", ")
        ),
        None => format!(
            "Call list_workflows and pass one of its ids exactly; available now: {}.",
            available.join(", ")
        ),
    };
    ErrorEnvelope::new(
        ErrorCode::WorkflowNotFound,
        format!("{tool}: no workflow has the id {id:?}.{did_you_mean}"),
        next,
        Retry::NotRetryable,
    )
    .with_details(serde_json::json!({
        "workflowId": id,
        "didYouMean": suggestions,
        "available": available,
    }))
}

pub(super) fn inspect_workflow(
    catalog: &Catalog,
    input: InspectWorkflowInput,
) -> Result<InspectWorkflowOutput, ErrorEnvelope> {
    let resolved = catalog
        .resolve(&input.workflow_id)
        .ok_or_else(|| workflow_not_found("inspect_workflow", catalog, &input.workflow_id))?;
    let compiled = &resolved.workflow.compiled;
    let steps = match input.mode {
        InspectMode::Metadata => Vec::new(),
        InspectMode::Preview => compiled
            .snapshot
            .body
            .steps
            .iter()
            .map(|s| StepPreview {
                step_id: s.step_id.clone(),
                title: s.title.clone(),
                prompt: s.prompt.clone(),
                kept: s.language.kept.clone(),
            })
            .collect(),
    };
    let mut warnings: Vec<Warning> = resolved.warnings.iter().map(|w| w.to_warning()).collect();
    warnings.extend(
        compiled
            .snapshot
            .body
            .compiled_warnings
            .iter()
            .map(|w| Warning::new(w.code.as_str(), w.message.clone())),
    );
    Ok(InspectWorkflowOutput {
        workflow: resolved.summary.clone(),
        workflow_hash: compiled.workflow_hash.clone(),
        steps,
        warnings,
        kept: compiled.snapshot.body.kept.clone(),
    })
}

/// Where a node stands: the step its snapshot waits at, as responses name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum NodeStep {
    /// Waiting at a step, with the step's title when the pinned workflow has it.
    Pending {
        step_id: workrail_spec::ids::StepId,
        title: Option<String>,
    },
    Complete,
    NoPendingStep,
    SnapshotUnreadable,
}

impl NodeStep {
    /// How `workrail inspect` and the Console name a node that waits at no step.
    pub(super) fn label(&self) -> &'static str {
        match self {
            Self::Pending { .. } => "pending",
            Self::Complete => "complete",
            Self::NoPendingStep => "no pending step",
            Self::SnapshotUnreadable => "snapshot unreadable",
        }
    }
}

/// The step `info` waits at (its snapshot's pending step), read from the snapshot store.
pub(super) fn node_step(
    wr: &Workrail,
    compiled: Option<&workrail_spec::compiled::CompiledWorkflowSnapshotV1>,
    info: &crate::projections::NodeInfo,
) -> NodeStep {
    let Ok(snapshot) = wr.store.snapshot(&info.snapshot_ref()) else {
        return NodeStep::SnapshotUnreadable;
    };
    let engine = &snapshot.engine_payload.engine_state;
    match engine.pending_step() {
        Some(pending) => NodeStep::Pending {
            step_id: pending.step_id.clone(),
            // As responses show it: markers substituted from the step's recorded bindings.
            title: compiled
                .and_then(|c| c.step(&pending.step_id))
                .map(|s| crate::engine::render::title(s, &pending.bindings)),
        },
        None if engine.is_complete() => NodeStep::Complete,
        None => NodeStep::NoPendingStep,
    }
}

/// A session loaded for `workrail inspect`, with its validated facts and run summaries.
fn load_for_inspect(
    wr: &Workrail,
    session_id: &str,
) -> Result<(std::sync::Arc<LoadedSession>, SessionId), ErrorEnvelope> {
    let session = SessionId::parse(session_id).map_err(|e| {
        ErrorEnvelope::new(
            ErrorCode::ValidationError,
            format!("{e}"),
            "Pass a session id as shown in a WorkRail response (`sess_…`).",
            Retry::NotRetryable,
        )
    })?;
    let loaded = wr
        .store
        .load(&session)
        .map_err(|e: StoreError| e.to_envelope(false))?;
    Ok((loaded, session))
}

/// The run summaries for an inspection: a read command writes nothing, not even the projection
/// cache (decision D69); the projection made for the outline serves the summary too.
fn summary_for_inspect(wr: &Workrail, loaded: &LoadedSession, facts: &Facts) -> SessionSummary {
    match wr.cache.get(&loaded.session_id, CacheKey::of(loaded)) {
        CacheLookup::Hit(summary) => summary,
        _ => summarize_facts(wr, facts),
    }
}

/// `workrail inspect`: the session's health and each run's outline, lanes under the node of
/// the parallel step that started them (see [`outline`]; `all`: every node).
pub(super) fn inspect_session(
    wr: &Workrail,
    session_id: &str,
    all: bool,
) -> Result<String, ErrorEnvelope> {
    let (loaded, session) = load_for_inspect(wr, session_id)?;
    let events = loaded.events().all().map_err(|e| e.to_envelope(false))?;
    let facts = Facts::new(&events);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "session {session}: {} events, health {}",
        loaded.event_count(),
        loaded.health.kind()
    );
    if let Some(c) = loaded.health.corruption() {
        let _ = writeln!(
            out,
            "  SALVAGE VIEW: validation stopped at manifest record {} ({}): {}",
            c.manifest_index, c.reason, c.detail
        );
        let _ = writeln!(
            out,
            "  to recover: {}",
            crate::store::how_to_clear(&session, loaded.health.kind(), Some(c.reason.as_str()))
        );
    }
    let summary = summary_for_inspect(wr, &loaded, &facts);
    outline::Outline::new(wr, &facts, &summary.runs, all).text(&mut out);
    Ok(out)
}

impl Workrail {
    /// `workrail inspect --json`: the session's runs as data, every node, lanes under the
    /// node of the parallel step that started them (decision D170).
    pub fn inspect_session_json(
        &self,
        session_id: &str,
    ) -> Result<SessionInspection, ErrorEnvelope> {
        let (loaded, _) = load_for_inspect(self, session_id)?;
        let events = loaded.events().all().map_err(|e| e.to_envelope(false))?;
        let facts = Facts::new(&events);
        let summary = summary_for_inspect(self, &loaded, &facts);
        let runs = outline::Outline::new(self, &facts, &summary.runs, true).json();
        Ok(SessionInspection {
            session_id: loaded.session_id.to_string(),
            events: loaded.event_count(),
            health: loaded.health.kind().as_str().to_owned(),
            salvage: super::console::salvage_of(&loaded),
            runs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// decision: D170
    /// A run summary cached before lanes existed has no `lane`: it must not parse (the cache
    /// is then rebuilt), or a lane would read as a run of its own until the session changes.
    #[test]
    fn a_cached_summary_without_the_lane_field_is_not_read() {
        let mut value = serde_json::json!({
            "runId": "run_0000000000000000",
            "workflowId": "project.fan",
            "label": "Fan #0000",
            "status": "in_progress",
            "nodes": 1,
            "preferredTip": null,
            "tipLastActivity": 3,
            "unresolvedGaps": 0
        });
        assert!(serde_json::from_value::<RunSummary>(value.clone()).is_err());
        value["lane"] = serde_json::Value::Null;
        let summary: RunSummary = serde_json::from_value(value).unwrap();
        assert!(!summary.is_lane());
        let back = serde_json::to_value(&summary).unwrap();
        assert_eq!(back["lane"], serde_json::Value::Null);
    }
}

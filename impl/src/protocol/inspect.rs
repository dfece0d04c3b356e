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
use workrail_spec::ids::{RunId, WorkflowId};

use super::facts::Facts;
use super::{GLOBAL_DEFAULTS, Workrail, run_label};
use crate::sources::Catalog;
use crate::store::{CacheKey, CacheLookup, LoadedSession, SessionRead, StoreError};

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
}

/// Every run of a session at a glance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    pub runs: Vec<RunSummary>,
}

fn summarize(wr: &Workrail, loaded: &LoadedSession) -> SessionSummary {
    summarize_facts(wr, &Facts::new(&loaded.events))
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
        _ => summarize(wr, loaded),
    }
}

pub(super) fn session_summary(wr: &Workrail, loaded: &LoadedSession) -> SessionSummary {
    let key = CacheKey::of(loaded);
    if let CacheLookup::Hit(summary) = wr.cache.get(&loaded.session_id, key) {
        return summary;
    }
    let summary = summarize(wr, loaded);
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

/// How many nodes of one unbranched stretch of a run `workrail inspect` shows without `--all`:
/// its first [`CHAIN_HEAD`] and last [`CHAIN_TAIL`] (the newest, where the tip is).
const CHAIN_HEAD: usize = 2;
const CHAIN_TAIL: usize = 8;

/// A run's DAG as an outline: an unbranched stretch stays at one indentation and each branch
/// of a fork is indented under it, so the text grows with the nodes shown, not with their
/// depth. Without `all`, the middle of a long stretch is one line saying how many nodes it
/// holds. Iterative: a deep run cannot exhaust the stack.
fn tree(
    out: &mut String,
    facts: &Facts<'_>,
    run: &workrail_spec::ids::RunId,
    root: &NodeId,
    tip: Option<&NodeId>,
    all: bool,
    step_of: &dyn Fn(&crate::projections::NodeInfo) -> String,
) {
    // The root's stretch is indented under its run's heading.
    let mut branches = vec![(root, 1)];
    while let Some((start, depth)) = branches.pop() {
        // The stretch from `start` down to a fork or a leaf.
        let mut stretch = vec![start];
        let mut last = facts.node(run, start);
        while let Some(info) = last
            && let [only] = info.children.as_slice()
        {
            stretch.push(only);
            last = facts.node(run, only);
        }
        // Hiding a single node would cost the line that says so.
        let hidden = if all || stretch.len() <= CHAIN_HEAD + CHAIN_TAIL + 1 {
            0
        } else {
            stretch.len() - CHAIN_HEAD - CHAIN_TAIL
        };
        for (i, node) in stretch.iter().enumerate() {
            if hidden > 0 && i == CHAIN_HEAD {
                let _ = writeln!(
                    out,
                    "{}  … {hidden} more nodes on this stretch (`workrail inspect --all` lists every node)",
                    "  ".repeat(depth),
                );
            }
            if hidden > 0 && (CHAIN_HEAD..CHAIN_HEAD + hidden).contains(&i) {
                continue;
            }
            node_line(out, facts, run, node, depth, tip, step_of);
        }
        if let Some(info) = last {
            // Branches in order: the first is shown first.
            branches.extend(info.children.iter().rev().map(|c| (c, depth + 1)));
        }
    }
}

fn node_line(
    out: &mut String,
    facts: &Facts<'_>,
    run: &workrail_spec::ids::RunId,
    node: &NodeId,
    depth: usize,
    tip: Option<&NodeId>,
    step_of: &dyn Fn(&crate::projections::NodeInfo) -> String,
) {
    let Some(info) = facts.node(run, node) else {
        return;
    };
    let step = step_of(info);
    let notes = facts
        .recap_notes(run, node)
        .map(|n| {
            let line: String = n.split_whitespace().collect::<Vec<_>>().join(" ");
            let cut = workrail_spec::budget::floor_char_boundary(&line, 100);
            if cut < line.len() {
                format!(" — {}…", &line[..cut])
            } else {
                format!(" — {line}")
            }
        })
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "{}- {} ({}, {step}){}{}",
        "  ".repeat(depth),
        node,
        info.kind,
        if Some(node) == tip {
            " [preferred tip]"
        } else {
            ""
        },
        notes
    );
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
    let Ok(snapshot) = wr.store.snapshot(&info.snapshot_ref) else {
        return NodeStep::SnapshotUnreadable;
    };
    let engine = &snapshot.engine_payload.engine_state;
    match engine.pending_step() {
        Some(pending) => NodeStep::Pending {
            step_id: pending.step_id.clone(),
            title: compiled
                .and_then(|c| c.step(&pending.step_id))
                .map(|s| s.title.clone()),
        },
        None if engine.is_complete() => NodeStep::Complete,
        None => NodeStep::NoPendingStep,
    }
}

/// `workrail inspect`: the session's health and each run's outline (see [`tree`]; `all`: every
/// node).
pub(super) fn inspect_session(
    wr: &Workrail,
    session_id: &str,
    all: bool,
) -> Result<String, ErrorEnvelope> {
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
    let facts = Facts::new(&loaded.events);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "session {session}: {} events, health {}",
        loaded.events.len(),
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
    // A read command writes nothing, not even the projection cache (decision D69). The
    // projection made for the outline serves the summary too.
    let summary = match wr.cache.get(&loaded.session_id, CacheKey::of(&loaded)) {
        CacheLookup::Hit(summary) => summary,
        _ => summarize_facts(wr, &facts),
    };
    for run in &summary.runs {
        let _ = writeln!(
            out,
            "\nrun {} \"{}\" workflow {}\n  status: {}\n  nodes: {}, unresolved gaps: {}",
            run.run_id, run.label, run.workflow_id, run.status, run.nodes, run.unresolved_gaps
        );
        if let Some(view) = facts.run(&run.run_id)
            && let Some(root) = &view.dag.root
        {
            let compiled = wr.store.workflow(&view.dag.started.workflow_hash).ok();
            // The step each node waits at (its snapshot's pending step), as responses name it.
            let step_of = |info: &crate::projections::NodeInfo| -> String {
                match node_step(wr, compiled.as_deref(), info) {
                    NodeStep::Pending { step_id, title } => {
                        let title = title.map(|t| format!("\"{t}\" ")).unwrap_or_default();
                        format!("at step {title}[{step_id}]")
                    }
                    other => other.label().to_owned(),
                }
            };
            tree(
                &mut out,
                &facts,
                &run.run_id,
                root,
                run.preferred_tip.as_ref(),
                all,
                &step_of,
            );
        }
    }
    Ok(out)
}

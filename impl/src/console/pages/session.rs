//! `GET /sessions/<id>`: the session's health and each run with its DAG; the lanes of each
//! parallel step are grouped under that step's node, with their fan-in (decision D171).

use std::collections::HashSet;

use maud::{Markup, html};

use crate::console::history::TimelineRow;

use super::layout::{page, salvage_banner};
use crate::projections::console::{
    LIST_MAX, LaneConflictView, LaneGroupView, RunView, SessionView, lane_list,
};

/// How deep lanes of lanes are drawn inside each other (a lane's routine may hold a parallel
/// step of its own); deeper ones are linked, not drawn.
const LANE_NESTING_MAX: usize = 4;

/// The runs drawn as runs of their own: every run that is no lane, and any lane whose parent
/// run is not in the view (a damaged log's prefix).
fn top_level(view: &SessionView) -> impl Iterator<Item = &RunView> {
    view.runs.iter().filter(|r| {
        r.lane_of
            .as_ref()
            .is_none_or(|l| !view.runs.iter().any(|p| p.run_id == l.parent_run_id))
    })
}

/// What the session page shows beside the projection (`crate::console::history`).
#[derive(Debug, Clone, Default)]
pub struct Extras {
    /// Runs blocked at their preferred tip (decision D182).
    pub blocked_runs: HashSet<String>,
    pub timeline: Vec<TimelineRow>,
    /// Older events were left out of the timeline.
    pub timeline_cut: bool,
}

/// The page for one session, with the live-update version it was rendered at; `kind` filters
/// the timeline.
pub fn render(view: &SessionView, extras: &Extras, kind: Option<&str>) -> Markup {
    let url = format!("/sessions/{}/version", view.session_id);
    let runs = top_level(view).count();
    let lanes = view.runs.len() - runs;
    page(
        &format!("Session {}", view.session_id),
        Some((&view.version, &url)),
        html! {
            h1 { "Session " code { (view.session_id) } }
            @if let Some(notice) = &view.salvage { (salvage_banner(&view.session_id, notice)) }
            p class="downloads" {
                "JSON: "
                a href=(format!("/sessions/{}/session.json", view.session_id)) download { "session view" } " · "
                a href=(format!("/sessions/{}/timeline.json", view.session_id)) download { "timeline" } " · "
                a href=(format!("/sessions/{}/export.json", view.session_id)) download { "export bundle" }
            }
            p class="facts" {
                "Health " span class="health" { (view.health) } " · " (view.events) " committed events"
                @if view.salvage.is_some() { " in the validated prefix" }
                " · " (runs) " run(s)"
                @if lanes > 0 { " · " (lanes) " lane(s) of parallel steps, shown under their step" }
            }
            ul class="legend" {
                li { span class="swatch swatch-step" {} "step node" }
                li { span class="swatch swatch-checkpoint" {} "checkpoint node" }
                li { span class="swatch swatch-tip" {} "preferred tip" }
                li { span class="swatch swatch-blocked" {} "node with blocked attempts" }
                li { span class="swatch swatch-parallel" {} "node of a parallel step (its lanes are listed under the graph)" }
                li { span class="swatch swatch-edge" {} "acknowledged step (arrow: parent to child)" }
                li { span class="swatch swatch-edge-checkpoint" {} "checkpoint edge" }
                li { span class="swatch swatch-path" {} "the path to the preferred tip" }
                li { "An edge labelled " em { "fork" } " leaves a node a second way (a rewind that went another way). “step N” is the step's position on its path." }
            }
            @if view.runs.is_empty() {
                p id="no-runs" { "No run has been committed in this session." }
            }
            @for run in top_level(view) {
                section class="run" data-run-id=(run.run_id) {
                    h2 { (run.label) }
                    dl class="run-facts" {
                        dt { "Run" } dd { code { (run.run_id) } }
                        dt { "Workflow" } dd class="run-workflow" { code { (run.workflow_id) } }
                        dt { "Status" } dd class="run-status" {
                            (run.status)
                            @if extras.blocked_runs.contains(&run.run_id) && run.status != "blocked" {
                                " " span class="badge blocked" { "blocked at its tip" }
                            }
                        }
                        dt { "Nodes" } dd { (run.node_count) }
                        dt { "Open gaps" } dd { (run.unresolved_gaps) }
                        @if let Some(tip) = &run.preferred_tip {
                            dt { "Preferred tip" } dd { a href=(format!("/sessions/{}/nodes/{tip}", view.session_id)) { code { (tip) } } }
                        }
                        @if let Some(lane) = &run.lane_of {
                            dt { "Lane of" } dd { "lane " (lane.index) " of run " code { (lane.parent_run_id) } " (not in this view)" }
                        }
                    }
                    (run_drawing(view, run, 0))
                }
            }
            (timeline(view, extras, kind))
        },
    )
}

/// Every event of the session in log order (Temporal's history view): index, commit time,
/// kind and one line, filterable by kind, each row linked to its node in the graph (decision
/// D183).
fn timeline(view: &SessionView, extras: &Extras, kind: Option<&str>) -> Markup {
    let mut kinds: Vec<&str> = extras.timeline.iter().map(|r| r.kind.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    let kind = kind.filter(|k| kinds.contains(k));
    html! {
        section id="timeline" aria-labelledby="timeline-heading" {
            h2 id="timeline-heading" { "Timeline" }
            form id="timeline-filter" method="get" action=(format!("/sessions/{}", view.session_id)) {
                label { "Kind "
                    select name="kind" {
                        option value="" selected[kind.is_none()] { "every kind" }
                        @for k in &kinds { option value=(k) selected[kind == Some(*k)] { (k) } }
                    }
                }
                button type="submit" { "Show" }
                span class="count" { (extras.timeline.len()) " event(s)" }
            }
            @if extras.timeline_cut {
                p class="cut" { "Only the newest " (extras.timeline.len()) " of " (view.events) " events are listed." }
            }
            div class="scroll timeline-box" {
                table id="events" {
                    thead { tr { th scope="col" { "#" } th scope="col" { "Committed" } th scope="col" { "Kind" } th scope="col" { "What happened" } th scope="col" { "Node" } } }
                    tbody {
                        @for row in &extras.timeline {
                            tr class="event" data-kind=(row.kind) data-index=(row.index)
                                data-run-id=[row.run_id.as_deref()] data-node-id=[row.node_id.as_deref()]
                                hidden[kind.is_some_and(|k| k != row.kind)] {
                                td class="index" { (row.index) }
                                td class="at" {
                                    @match &row.committed_at {
                                        Some(at) => time datetime=(at) title=(at) { (at.get(11..19).unwrap_or(at)) }
                                        None => span class="empty" { "—" }
                                    }
                                }
                                td class="kind" { code { (row.kind) } }
                                td class="summary" { (row.summary) }
                                td class="node" {
                                    @if let Some(node) = &row.node_id {
                                        a href=(format!("#node-{node}")) { "in graph" span class="visually-hidden" { " (node " (node) ")" } }
                                        " · "
                                        a href=(format!("/sessions/{}/nodes/{node}", view.session_id)) { "open" span class="visually-hidden" { " node " (node) } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A run's DAG and, under it, the lanes of each of its parallel steps.
fn run_drawing(view: &SessionView, run: &RunView, depth: usize) -> Markup {
    html! {
        @if run.nodes_cut {
            p class="cut" { "Only the newest " (LIST_MAX) " of " (run.node_count) " nodes (and the preferred tip) are drawn. " (workrail_spec::budget::TRUNCATION_MARKER.trim()) }
        }
        (crate::console::svg::render(&view.session_id, run))
        @for group in &run.lane_groups {
            (lane_group(view, group, depth))
        }
    }
}

fn conflict(c: &LaneConflictView) -> Markup {
    let lanes: Vec<String> = c.lanes.iter().map(ToString::to_string).collect();
    html! {
        li class="conflict" data-file=(c.file) data-lanes=(lanes.join(" ")) data-resolution=(c.resolution) {
            strong { "Conflict: " }
            code class="file" { (c.file) } " was changed by " (lane_list(&c.lanes)) " ("
            (c.resolution) "): "
            @match c.applied_from {
                Some(winner) => { "lane " (winner) " completed first, so its change applies; check that the other change is not lost." }
                None => { "the user decides which change to keep." }
            }
        }
    }
}

/// The lanes one node of a parallel step started: status, summary and files from each lane's
/// latest block output, the conflicts of the fan-in, and each lane run's own DAG.
fn lane_group(view: &SessionView, group: &LaneGroupView, depth: usize) -> Markup {
    let conflicting = |file: &str| group.conflicts.iter().any(|c| c.file == file);
    html! {
        section class="lanes" id=(format!("lanes-{}", group.node_id)) data-parent-node=(group.node_id)
            data-step-id=[group.step_id.as_deref()] data-merge-strategy=[group.merge_strategy.as_deref()] {
            h3 {
                "Lanes of step "
                @if let Some(title) = &group.step_title { "“" (title) "” " }
                @if let Some(step) = &group.step_id { code { (step) } }
            }
            p class="lanes-facts" {
                (group.lanes.len()) " lane(s) started at node "
                a href=(format!("/sessions/{}/nodes/{}", view.session_id, group.node_id)) { code { (group.node_id) } }
                @if let Some(strategy) = &group.merge_strategy { " · merge strategy " code class="strategy" { (strategy) } }
                @if group.allow_partial_results { " · partial results allowed" }
                " · "
                @if group.completed_order.is_empty() { "no block output recorded yet" }
                @else { "block outputs recorded in the order " (lane_list(&group.completed_order)) }
            }
            @if !group.conflicts.is_empty() {
                ul class="conflicts" role="alert" { @for c in &group.conflicts { (conflict(c)) } }
            }
            ol class="lane-list" {
                @for lane in &group.lanes {
                    li class="lane" data-lane-index=(lane.index) data-run-id=(lane.run_id) data-status=(lane.status) {
                        div class="lane-head" {
                            span class="lane-index" { "Lane " (lane.index) }
                            " "
                            span class=(format!("lane-status status-{}", lane.status)) { (lane.status.replace('_', " ")) }
                            " "
                            span class="lane-label" { (lane.label) }
                            " · " code class="lane-workflow" { (lane.workflow_id) }
                        }
                        @if let Some(summary) = &lane.summary {
                            p class="lane-summary" { (summary) }
                        }
                        @if !lane.files.is_empty() {
                            p class="lane-files" {
                                "Files: "
                                @for (i, file) in lane.files.iter().enumerate() {
                                    @if i > 0 { ", " }
                                    code class=(if conflicting(file) { "file conflicting" } else { "file" }) { (file) }
                                }
                            }
                        }
                        @match view.runs.iter().find(|r| r.run_id == lane.run_id) {
                            Some(run) if depth < LANE_NESTING_MAX => {
                                details class="lane-run" {
                                    summary {
                                        "Lane run " code { (run.run_id) } ": " (run.status) ", " (run.node_count) " node(s)"
                                    }
                                    (run_drawing(view, run, depth + 1))
                                }
                            }
                            _ => {
                                @if let Some(tip) = &lane.preferred_tip {
                                    p class="lane-tip" { "Preferred tip: " a href=(format!("/sessions/{}/nodes/{tip}", view.session_id)) { code { (tip) } } }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

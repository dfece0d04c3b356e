//! `GET /sessions/<id>`: the session's health and each run with its DAG.

use maud::{Markup, html};

use super::layout::{page, salvage_banner};
use crate::projections::console::{LIST_MAX, SessionView};

/// The page for one session, with the live-update version it was rendered at.
pub fn render(view: &SessionView) -> Markup {
    let url = format!("/sessions/{}/version", view.session_id);
    page(
        &format!("Session {}", view.session_id),
        Some((&view.version, &url)),
        html! {
            h1 { "Session " code { (view.session_id) } }
            @if let Some(notice) = &view.salvage { (salvage_banner(&view.session_id, notice)) }
            p class="facts" {
                "Health " span class="health" { (view.health) } " · " (view.events) " committed events"
                @if view.salvage.is_some() { " in the validated prefix" }
                " · " (view.runs.len()) " run(s)"
            }
            ul class="legend" {
                li { span class="swatch swatch-step" {} "step node" }
                li { span class="swatch swatch-checkpoint" {} "checkpoint node" }
                li { span class="swatch swatch-tip" {} "preferred tip" }
                li { span class="swatch swatch-blocked" {} "node with blocked attempts" }
                li { span class="swatch swatch-edge" {} "acknowledged step" }
                li { span class="swatch swatch-edge-checkpoint" {} "checkpoint edge" }
                li { "A node with two or more outgoing steps is a fork (a rewind that went another way)." }
            }
            @if view.runs.is_empty() {
                p id="no-runs" { "No run has been committed in this session." }
            }
            @for run in &view.runs {
                section class="run" data-run-id=(run.run_id) {
                    h2 { (run.label) }
                    dl class="run-facts" {
                        dt { "Run" } dd { code { (run.run_id) } }
                        dt { "Workflow" } dd class="run-workflow" { code { (run.workflow_id) } }
                        dt { "Status" } dd class="run-status" { (run.status) }
                        dt { "Nodes" } dd { (run.node_count) }
                        dt { "Open gaps" } dd { (run.unresolved_gaps) }
                        @if let Some(tip) = &run.preferred_tip {
                            dt { "Preferred tip" } dd { a href=(format!("/sessions/{}/nodes/{tip}", view.session_id)) { code { (tip) } } }
                        }
                    }
                    @if run.nodes_cut {
                        p class="cut" { "Only the newest " (LIST_MAX) " of " (run.node_count) " nodes (and the preferred tip) are drawn. " (workrail_spec::budget::TRUNCATION_MARKER.trim()) }
                    }
                    div class="scroll" { (crate::console::svg::render(&view.session_id, run)) }
                }
            }
        },
    )
}

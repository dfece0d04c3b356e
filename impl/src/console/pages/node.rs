//! `GET /sessions/<id>/nodes/<nodeId>`: everything recorded at one node.

use maud::{Markup, PreEscaped, html};

use super::layout::{page, salvage_banner};
use crate::projections::console::NodeView;

fn empty(text: &str) -> Markup {
    html! { p class="empty" { (text) } }
}

/// The page for one node.
pub fn render(view: &NodeView) -> Markup {
    let n = &view.node;
    let session_link = format!("/sessions/{}", view.session_id);
    page(
        &n.title,
        None,
        html! {
            p class="crumbs" { a href=(session_link) { "Session " code { (view.session_id) } } }
            h1 { (n.title) }
            p class="downloads" { "JSON: " a href=(format!("/sessions/{}/nodes/{}/node.json", view.session_id, n.node_id)) download { "this node" } }
            @if let Some(notice) = &view.salvage { (salvage_banner(&view.session_id, notice)) }
            dl id="node-facts" {
                dt { "Node" } dd class="node-id" { code { (n.node_id) } }
                dt { "Kind" } dd class="kind" { (n.kind) }
                dt { "Waits at step" } dd class="step-id" { @if let Some(s) = &n.step_id { code { (s) } } @else { "none (complete)" } }
                dt { "Created order" } dd class="created-index" { (n.created_index) }
                dt { "Run" } dd { code { (view.run_id) } " (" code { (view.workflow_id) } ")" }
                @if let Some(lane) = &view.lane_of {
                    dt { "Lane" } dd class="lane-of" {
                        "lane " (lane.index) " of run " code { (lane.parent_run_id) } ", started at "
                        a href=(format!("{session_link}#lanes-{}", lane.parent_node_id)) { "its parallel step's node " code { (lane.parent_node_id) } }
                    }
                }
                dt { "Parent" } dd { @if let Some(p) = &n.parent { a href=(format!("/sessions/{}/nodes/{p}", view.session_id)) { code { (p) } } } @else { "none (root)" } }
                dt { "Preferred tip" } dd { @if n.is_tip { "yes" } @else { "no" } }
            }
            section id="notes" {
                h2 { "Notes" }
                p class="hint" { "The recap notes of the acknowledgement that created this node (the latest, when corrected)." }
                @match &view.notes {
                    Some(notes) => div class="markdown" { (PreEscaped(crate::console::markdown::to_safe_html(notes))) },
                    None => (empty("No notes recorded at this node.")),
                }
            }
            section id="artifacts" {
                h2 { "Artifacts" }
                @if view.artifacts.is_empty() { (empty("No artifact outputs.")) } @else {
                    ul { @for a in &view.artifacts {
                        li class="artifact" data-kind=(a.kind) {
                            code { (a.kind) } " · " (a.content_type) " · " (a.bytes) " bytes · " code class="sha256" { (a.sha256) }
                        }
                    } }
                }
            }
            section id="gaps" {
                h2 { "Gaps" }
                @if view.gaps.is_empty() { (empty("No gaps recorded at this node.")) } @else {
                    ul { @for g in &view.gaps {
                        li class="gap" data-severity=(g.severity) data-resolved=(if g.resolved { "true" } else { "false" }) {
                            code class="reason" { (g.reason_code) } " (" (g.severity) ", "
                            @if g.resolved { "resolved" } @else { "unresolved" } "): " (g.summary)
                        }
                    } }
                }
            }
            section id="blockers" {
                h2 { "Blocked attempts" }
                @if view.blocked_attempts.is_empty() { (empty("No blocked acknowledgement attempts.")) }
                @for a in &view.blocked_attempts {
                    div class="attempt blocked" data-attempt-id=(a.attempt_id) {
                        p { "Attempt " code { (a.attempt_id) } }
                        ul { @for b in &a.blockers {
                            li class="blocker" data-code=(b.code) {
                                (b.message) " " span class="pointer" { "at " code { (b.pointer) } }
                                @if let Some(fix) = &b.suggested_fix { br; span class="fix" { "Fix: " (fix) } }
                            }
                        } }
                    }
                }
            }
            section id="preferences" {
                h2 { "Effective preferences" }
                dl {
                    dt { "autonomy" } dd class="autonomy" { (view.autonomy) }
                    dt { "riskPolicy" } dd class="risk-policy" { (view.risk_policy) }
                }
            }
            section id="capabilities" {
                h2 { "Capability observations" }
                @if view.capabilities.is_empty() { (empty("No capability observed on this node's path.")) } @else {
                    ul { @for c in &view.capabilities {
                        li class="capability" data-capability=(c.capability) data-status=(c.status) {
                            code { (c.capability) } ": " strong { (c.status) } " at node " code { (c.node_id) }
                            " · provenance " code class="provenance" { (c.provenance) }
                        }
                    } }
                }
            }
            section id="divergences" {
                h2 { "Divergences" }
                @if view.divergences.is_empty() { (empty("No divergences recorded at this node.")) } @else {
                    ul { @for d in &view.divergences {
                        li class="divergence" data-reason=(d.reason) {
                            code { (d.reason) } ": " (d.summary)
                            @if let Some(s) = &d.related_step_id { " (step " code { (s) } ")" }
                        }
                    } }
                }
            }
            section id="decisions" {
                h2 { "Decision trace" }
                @if view.decisions.is_empty() { (empty("No decision trace entries at this node.")) } @else {
                    ol { @for d in &view.decisions {
                        li class="decision" data-kind=(d.kind) { code { (d.kind) } ": " (d.summary) }
                    } }
                }
            }
        },
    )
}

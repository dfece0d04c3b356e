//! `GET /config`: the desired config (what a server started now from the Console's environment
//! would apply) with the feature flag form, and every live server's applied config against its
//! own desired one with the restart triggers (locks §6 "Desired vs applied", "Restart-required
//! triggers").
//!
//! Rendering only: the data comes from `crate::control::config_overview`; the forms post to
//! `/config/flags`, which writes through `crate::control::set_feature` only, and to
//! `/config/preferences`, which writes through `crate::control::set_preference` only.

use maud::{Markup, html};
use workrail_spec::closed::{Autonomy, RiskPolicy};
use workrail_spec::config::{RestartTrigger, RuntimeSafeChange};
use workrail_spec::error::ErrorEnvelope;

use super::layout::{Live, page_live};
use crate::control::{ConfigOverview, ServerConfigView};
use crate::projections::console::{LIST_MAX, TEXT_MAX_BYTES, TITLE_MAX_BYTES, bounded};

fn names(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        bounded(&items.join(", "), TEXT_MAX_BYTES)
    }
}

fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

fn trigger(t: &RestartTrigger) -> Markup {
    html! {
        li class="trigger" data-kind=(t.kind()) {
            code { (t.kind()) } ": "
            @match t {
                RestartTrigger::ToolSetChanged { added, removed } => {
                    "the tools served would change (added: " (names(added)) "; removed: " (names(removed)) ")."
                }
                RestartTrigger::ToolSchemaChanged { tool, input, output } => {
                    "the schema of " code { (bounded(tool, TITLE_MAX_BYTES)) } " would change ("
                    @if *input && *output { "input and output" } @else if *input { "input" } @else { "output" }
                    ")."
                }
                RestartTrigger::SourceRegistrationChanged { applied, desired } => {
                    "the workflow sources would change (applied: "
                    (names(&applied.iter().map(|s| s.label.clone()).collect::<Vec<_>>()))
                    "; desired: "
                    (names(&desired.iter().map(|s| s.label.clone()).collect::<Vec<_>>()))
                    ")."
                }
                RestartTrigger::ToolGatingFlagChanged { flag, applied, desired } => {
                    "the flag " code { (bounded(flag, TITLE_MAX_BYTES)) } " gates a tool and would go from "
                    (on_off(*applied)) " to " (on_off(*desired)) "."
                }
            }
        }
    }
}

fn runtime_safe(c: &RuntimeSafeChange) -> Markup {
    html! {
        @match c {
            RuntimeSafeChange::PreferenceDefaults => {
                li class="runtime-safe" data-kind="preference_defaults" { "Preference defaults: read when each run starts." }
            }
            RuntimeSafeChange::Retention => {
                li class="runtime-safe" data-kind="retention" { "Retention: read by each " code { "workrail gc" } "." }
            }
            RuntimeSafeChange::Flag { flag, applied, desired } => {
                li class="runtime-safe" data-kind="flag" {
                    "The flag " code { (bounded(flag, TITLE_MAX_BYTES)) } " (gates no tool) goes from "
                    (on_off(*applied)) " to " (on_off(*desired)) "."
                }
            }
        }
    }
}

/// A refused edit or a config that cannot be computed; `id` only for the page's own (a server's
/// is one of many).
fn envelope(id: Option<&str>, e: &ErrorEnvelope) -> Markup {
    html! {
        p id=[id] class="error" role="alert" {
            (bounded(&e.message, TEXT_MAX_BYTES)) " " (bounded(&e.suggestion, TEXT_MAX_BYTES))
        }
    }
}

fn server(s: &ServerConfigView) -> Markup {
    let restart = s.comparison.as_ref().is_some_and(|c| c.restart_required);
    html! {
        div class="server" data-server-id=(s.server_id.as_str())
            data-applied-hash=(s.applied_config_hash.as_str())
            data-restart-required=(restart) {
            h3 {
                "Server " code { (s.server_id.as_str()) }
                @if restart { " " span class="restart-badge" { "restart required" } }
                @else if s.comparison.as_ref().is_some_and(|c| c.in_sync) { " " span class="sync-badge" { "in sync" } }
            }
            dl {
                dt { "Process" } dd { "pid " (s.pid) ", started " (bounded(&s.started_at, TITLE_MAX_BYTES)) ", WorkRail " (bounded(&s.version, TITLE_MAX_BYTES)) }
                dt { "Applied" } dd { code class="applied-hash" { (s.applied_config_hash.as_str()) } }
                dt { "Desired" } dd {
                    @match &s.desired.config_hash {
                        Some(h) => code class="server-desired-hash" { (h.as_str()) },
                        None => "cannot be computed",
                    }
                }
                dt { "Flags applied" } dd {
                    @for f in s.applied.features.iter().take(LIST_MAX) {
                        code { (bounded(&f.name, TITLE_MAX_BYTES)) } " " (on_off(f.on)) " "
                    }
                }
            }
            @if let Some(e) = &s.desired.error { (envelope(None, e)) }
            @if let Some(c) = &s.comparison {
                @if !c.triggers.is_empty() {
                    p { "Applying the desired config needs a restart of this server (its MCP client fixes the tool list when it connects):" }
                    ul class="triggers" { @for t in c.triggers.iter().take(LIST_MAX) { (trigger(t)) } }
                }
                @if !c.runtime_safe_changes.is_empty() {
                    p { "Taken up without a restart:" }
                    ul class="runtime-safe-changes" { @for r in c.runtime_safe_changes.iter().take(LIST_MAX) { (runtime_safe(r)) } }
                }
            }
        }
    }
}

/// The Config page; `saved` after the flags were written (`?saved=1`), `error` when an edit was
/// refused.
pub fn render(overview: &ConfigOverview, saved: bool, error: Option<&ErrorEnvelope>) -> Markup {
    let desired = &overview.desired_here;
    let live = if error.is_some() {
        Live::Static
    } else {
        Live::Poll
    };
    page_live(
        "Config",
        live,
        html! {
            h1 { "Config" }
            @if saved { p id="saved" role="status" { "Saved to " code { "config/features.json" } ". Running servers keep their applied config until they restart." } }
            @if let Some(e) = error { (envelope(Some("errors"), e)) }
            section id="desired" {
                h2 { "Desired" }
                p class="hint" {
                    "What a server started now from this Console's environment would apply: the data directory's "
                    code { "config/" } " files, this environment's workflow sources, and this binary's tools."
                }
                @match &desired.config_hash {
                    Some(h) => p { "Desired config hash: " code id="desired-hash" { (h.as_str()) } },
                    None => p { "The desired config cannot be computed." },
                }
                @if let Some(e) = &desired.error { (envelope(Some("desired-error"), e)) }
                @if let Some(config) = &desired.config {
                    form id="flags" method="post" action="/config/flags" {
                        fieldset {
                            legend { "Feature flags" }
                            @for f in config.features.iter().take(LIST_MAX) {
                                label class="flag" {
                                    @if f.on {
                                        input type="checkbox" name=(f.name) value="on" checked;
                                    } @else {
                                        input type="checkbox" name=(f.name) value="on";
                                    }
                                    " " code { (bounded(&f.name, TITLE_MAX_BYTES)) } " "
                                    span class="gates" {
                                        @if f.gates.is_empty() { "(gates no tool)" }
                                        @else { "gates the tool(s) " (names(&f.gates)) }
                                    }
                                }
                            }
                        }
                        button id="save-flags" type="submit" { "Save flags" }
                    }
                    form id="preferences" method="post" action="/config/preferences" {
                        fieldset {
                            legend { "Preference defaults for new runs" }
                            label class="preference" {
                                "autonomy "
                                select name="autonomy" {
                                    @for a in Autonomy::ALL {
                                        @if *a == config.preferences.autonomy {
                                            option value=(a.as_str()) selected { (a.as_str()) }
                                        } @else {
                                            option value=(a.as_str()) { (a.as_str()) }
                                        }
                                    }
                                }
                            }
                            label class="preference" {
                                "risk policy "
                                select name="riskPolicy" {
                                    @for r in RiskPolicy::ALL {
                                        @if *r == config.preferences.risk_policy {
                                            option value=(r.as_str()) selected { (r.as_str()) }
                                        } @else {
                                            option value=(r.as_str()) { (r.as_str()) }
                                        }
                                    }
                                }
                            }
                            p class="hint" {
                                "Read when a run starts: a change applies to the next run of every server, with no restart. A run keeps the preferences it started with."
                            }
                        }
                        button id="save-preferences" type="submit" { "Save preference defaults" }
                    }
                    p class="hint" { "Retention: " (config.retention.ttl_days) " days (" code { "workrail config set" } ")." }
                    h3 { "Workflow sources" }
                    ul class="sources" {
                        @for s in config.sources.iter().take(LIST_MAX) {
                            li { (s.kind.as_str()) " " code { (bounded(&s.label, TITLE_MAX_BYTES)) }
                                @if let Some(d) = &s.directory { " " code { (bounded(d, TEXT_MAX_BYTES)) } } }
                        }
                    }
                }
            }
            section id="servers" {
                h2 { "Running servers" }
                @if overview.servers.is_empty() {
                    p id="no-servers" class="empty" {
                        "No " code { "workrail mcp" } " server is running on this data directory. Each one records the config it applied when it starts, and shows here while it runs."
                    }
                } @else {
                    @for s in overview.servers.iter().take(LIST_MAX) { (server(s)) }
                }
                @if overview.dead_records > 0 {
                    p class="hint" { (overview.dead_records) " record(s) of ended servers (" code { "workrail gc" } " removes them)." }
                }
                @if overview.unreadable_records > 0 {
                    p class="hint" { (overview.unreadable_records) " server record(s) could not be read." }
                }
            }
        },
    )
}

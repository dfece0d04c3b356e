//! `GET /`: every session, newest activity first, filtered and paged.

use maud::{Markup, html};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};

use std::collections::HashMap;
use std::time::SystemTime;

use super::layout::page;
use crate::console::history::{SessionFacts, ago};
use crate::projections::console::SessionRow;

/// Sessions per page.
pub const PAGE_SIZE: usize = 25;

/// The status filter's values, in the order the form lists them.
pub const STATUSES: [&str; 5] = [
    "in_progress",
    "blocked",
    "complete",
    "complete_with_gaps",
    "corrupt",
];

/// The page's query: text filter, status filter, 1-based page.
#[derive(Debug, Default, serde::Deserialize)]
pub struct Filter {
    pub q: Option<String>,
    pub status: Option<String>,
    pub page: Option<String>,
}

fn link(q: &str, status: &str, page: usize) -> String {
    let mut parts = Vec::new();
    if !q.is_empty() {
        parts.push(format!("q={}", utf8_percent_encode(q, NON_ALPHANUMERIC)));
    }
    if !status.is_empty() {
        parts.push(format!(
            "status={}",
            utf8_percent_encode(status, NON_ALPHANUMERIC)
        ));
    }
    parts.push(format!("page={page}"));
    format!("/?{}", parts.join("&"))
}

/// Whether `row` matches the status filter: the locked status of its preferred run, `corrupt`
/// for an unhealthy session, and for `blocked` also any run whose tip's latest attempt was
/// blocked with nothing after it (decision D182).
fn matches_status(row: &SessionRow, facts: Option<&SessionFacts>, status: &str) -> bool {
    row.matches_status(status)
        || (status == "blocked" && facts.is_some_and(|f| !f.blocked_runs.is_empty()))
}

/// Whether `row` matches the search: ids, workflows and labels, or any note of the session.
fn matches_text(row: &SessionRow, facts: Option<&SessionFacts>, q: &str) -> bool {
    row.matches_text(q) || facts.is_some_and(|f| f.notes.contains(&q.to_lowercase()))
}

/// The page for `rows` (already newest first), with each session's extra facts by id.
pub fn render(
    rows: &[SessionRow],
    facts: &HashMap<String, SessionFacts>,
    filter: &Filter,
    now: SystemTime,
) -> Markup {
    let q = filter.q.as_deref().unwrap_or("").trim().to_owned();
    let status = filter
        .status
        .as_deref()
        .filter(|s| STATUSES.contains(s))
        .unwrap_or("")
        .to_owned();
    let texted: Vec<&SessionRow> = rows
        .iter()
        .filter(|r| matches_text(r, facts.get(&r.session_id), &q))
        .collect();
    let counts: Vec<(&str, usize)> = STATUSES
        .iter()
        .map(|s| {
            let n = texted
                .iter()
                .filter(|r| matches_status(r, facts.get(&r.session_id), s))
                .count();
            (*s, n)
        })
        .collect();
    let matching: Vec<&SessionRow> = texted
        .iter()
        .copied()
        .filter(|r| status.is_empty() || matches_status(r, facts.get(&r.session_id), &status))
        .collect();
    let pages = matching.len().div_ceil(PAGE_SIZE).max(1);
    let page_no = filter
        .page
        .as_deref()
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(1)
        .clamp(1, pages);
    let shown = matching
        .iter()
        .skip((page_no - 1) * PAGE_SIZE)
        .take(PAGE_SIZE);
    page(
        "Sessions",
        None,
        html! {
            h1 { "Sessions" }
            p class="downloads" { "JSON: " a href="/sessions.json" download { "every session" } }
            form id="filter" method="get" action="/" role="search" {
                label { "Search " input type="search" name="q" value=(q) placeholder="id, workflow, label or notes"; }
                label { "Status "
                    select name="status" {
                        option value="" selected[status.is_empty()] { "any" }
                        @for s in STATUSES {
                            option value=(s) selected[status == s] { (s) }
                        }
                    }
                }
                button type="submit" { "Filter" }
            }
            nav id="status-counts" aria-label="Sessions per status" {
                ul {
                    li { a href=(link(&q, "", 1)) aria-current=[status.is_empty().then_some("true")] { "any " span class="n" { (texted.len()) } } }
                    @for (s, n) in &counts {
                        li data-status=(s) { a href=(link(&q, s, 1)) aria-current=[(status == *s).then_some("true")] { (s) " " span class="n" { (n) } } }
                    }
                }
            }
            @if matching.is_empty() {
                p id="no-sessions" {
                    @if rows.is_empty() {
                        "No sessions yet in this data directory. Start one from an MCP client connected to "
                        code { "workrail mcp" } " (call " code { "start_workflow" }
                        " with a workflow id from " code { "list_workflows" } "); it appears here as soon as it is committed."
                    } @else {
                        "No session matches this filter. " a href="/" { "Show every session" } "."
                    }
                }
            } @else {
                p class="count" { (matching.len()) " session(s)" @if pages > 1 { ", page " (page_no) " of " (pages) } }
                div class="scroll" {
                    table id="sessions" {
                        thead { tr {
                            th { "Session" } th { "Workflow" } th { "Label" } th { "Status" }
                            th { "Health" } th { "Last activity" } th { "Open gaps" }
                        } }
                        tbody {
                            @for r in shown {
                                tr class="session" data-session-id=(r.session_id) {
                                    td class="id" { a class="session-link" href=(format!("/sessions/{}", r.session_id)) { code { (r.session_id) } } }
                                    td class="workflow" { (r.workflows.join(", ")) }
                                    td class="label" data-runs=(r.runs) data-lanes=(r.lanes) {
                                        (r.labels.join("; "))
                                        // Lanes belong to their parent run (decision D171).
                                        @if r.lanes > 0 { " " span class="lanes-count" { "(+" (r.lanes) " lane" @if r.lanes > 1 { "s" } ")" } }
                                    }
                                    @let blocked = facts.get(&r.session_id).is_some_and(|f| !f.blocked_runs.is_empty());
                                    td class="status" data-console-blocked=(blocked) {
                                        (r.status.as_deref().unwrap_or(""))
                                        @if blocked && r.status.as_deref() != Some("blocked") {
                                            " " span class="badge blocked" title="The latest attempt at a run's preferred tip was blocked and nothing came after it." { "blocked" }
                                        }
                                    }
                                    td class="health" data-health=(r.health) { (r.health) }
                                    td class="activity" {
                                        @if let Some(at) = r.last_activity.as_deref() {
                                            time datetime=(at) title=(at) { (ago(at, now).unwrap_or_else(|| at.to_owned())) }
                                        }
                                    }
                                    td class="gaps" { (r.unresolved_gaps) }
                                }
                            }
                        }
                    }
                }
                @if pages > 1 {
                    nav class="pager" {
                        @if page_no > 1 { a rel="prev" href=(link(&q, &status, page_no - 1)) { "← Newer" } }
                        span { "Page " (page_no) " of " (pages) }
                        @if page_no < pages { a rel="next" href=(link(&q, &status, page_no + 1)) { "Older →" } }
                    }
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(i: usize) -> SessionRow {
        SessionRow {
            session_id: format!("sess_{i:016}"),
            health: "healthy".into(),
            workflows: vec!["wr.mr_review".into()],
            labels: vec![format!("Review #{i}")],
            status: Some("in_progress".into()),
            runs: 1,
            lanes: 0,
            last_activity: None,
            unresolved_gaps: 0,
        }
    }

    #[test]
    fn sessions_are_paged_by_25_with_prev_and_next_links() {
        let rows: Vec<SessionRow> = (0..30).map(row).collect();
        let none = HashMap::new();
        let now = SystemTime::now();
        let first = render(&rows, &none, &Filter::default(), now).into_string();
        assert_eq!(first.matches("<tr class=\"session\"").count(), PAGE_SIZE);
        assert!(first.contains("rel=\"next\" href=\"/?page=2\""), "{first}");
        assert!(!first.contains("rel=\"prev\""));
        let filter = Filter {
            q: Some("review".into()),
            page: Some("2".into()),
            ..Filter::default()
        };
        let second = render(&rows, &none, &filter, now).into_string();
        assert_eq!(second.matches("<tr class=\"session\"").count(), 5);
        assert!(
            second.contains("rel=\"prev\" href=\"/?q=review&amp;page=1\""),
            "{second}"
        );
        assert!(!second.contains("rel=\"next\""));
    }
}

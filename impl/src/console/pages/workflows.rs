//! `GET /workflows` and `GET /workflows/<id>`: every workflow with its source and access, and one
//! workflow's source, compiled snapshot and pinned snapshots with their drift (locks §6
//! "Workflow editing", "Source vs compiled inspection + pinned drift warnings").
//!
//! Rendering only: the data comes from `crate::control::workflows`, and the only writes are the
//! ones its `save_source` and `copy_to_editable` make. Bundled `wr.*` workflows get the copy form,
//! editable ones the edit form over their **source**; no form ever posts a compiled snapshot.

use maud::{Markup, html};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;
use workrail_spec::error::ErrorEnvelope;
use workrail_spec::tools::DriftStatus;

use super::layout::{Live, page, page_live};
use crate::control::{PinnedView, WorkflowDetail, WorkflowList};
use crate::projections::console::{LIST_MAX, TEXT_MAX_BYTES, TITLE_MAX_BYTES, bounded};

/// Source texts and snapshots are shown whole up to this many bytes (then cut with the
/// canonical truncation marker); a longer source is not editable here.
pub const SOURCE_MAX_BYTES: usize = 1024 * 1024;

/// One run that pinned a version of the workflow (for the pinned pane's list).
#[derive(Debug, Clone)]
pub struct PinnedRun {
    pub session_id: String,
    pub run_id: String,
    pub label: String,
    pub status: String,
    /// The hash the run pinned, when its log is readable.
    pub workflow_hash: Option<String>,
}

/// What the pinned pane shows.
#[derive(Debug)]
pub enum Pinned {
    /// A selected run: its pinned snapshot and drift, or why it cannot be shown.
    Run(Box<Result<PinnedView, ErrorEnvelope>>),
    /// No run selected: the runs that pinned this workflow (at most [`LIST_MAX`]; `true` when
    /// more were left out).
    Runs(Vec<PinnedRun>, bool),
}

/// The state of the page's form after a POST (or a plain GET).
#[derive(Debug, Default)]
pub struct FormState {
    /// The submitted source text, kept when the save was refused.
    pub submitted: Option<String>,
    /// `(JSON pointer, message)` per problem of a refused save or copy.
    pub errors: Vec<(String, String)>,
    /// The copy's refused new id, kept in its field.
    pub copy_id: Option<String>,
    /// `?saved=1`: the source was just saved.
    pub saved: bool,
}

/// One `(pointer, message)` per compiler error of `e` (or the envelope's message when it names
/// no field).
pub fn error_items(e: &ErrorEnvelope) -> Vec<(String, String)> {
    let listed: Vec<(String, String)> = e
        .details
        .as_ref()
        .and_then(|d| d.get("errors"))
        .and_then(Value::as_array)
        .map(|errors| {
            errors
                .iter()
                .take(LIST_MAX)
                .map(|x| {
                    let text = |k: &str| x.get(k).and_then(Value::as_str).unwrap_or_default();
                    (text("pointer").to_owned(), text("message").to_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    if listed.is_empty() {
        vec![(String::new(), format!("{} {}", e.message, e.suggestion))]
    } else {
        listed
    }
}

/// What a path segment or query value escapes: everything but `[A-Za-z0-9._-]` (ids stay
/// readable in links).
const ESCAPED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'.').remove(b'_').remove(b'-');

/// `text` escaped for a path segment or a query value.
pub fn escaped(text: &str) -> String {
    utf8_percent_encode(text, ESCAPED).to_string()
}

/// The page of workflow `id`.
pub fn workflow_href(id: &str) -> String {
    format!("/workflows/{}", escaped(id))
}

fn pinned_href(id: &str, session: &str, run: &str) -> String {
    format!(
        "{}?session={}&run={}",
        workflow_href(id),
        escaped(session),
        escaped(run)
    )
}

/// The id a copy is offered under: `user.<name>` (what `copy_to_editable` picks by default).
fn copy_id(id: &str) -> String {
    let name = id.rsplit('.').next().unwrap_or_default();
    format!("user.{}", name.to_lowercase().replace('-', "_"))
}

fn access(editable: bool) -> &'static str {
    if editable { "editable" } else { "read-only" }
}

/// The Workflows page.
pub fn list(list: &WorkflowList) -> Markup {
    let listed: Vec<&str> = list
        .workflows
        .iter()
        .map(|w| w.workflow_id.as_str())
        .collect();
    // A document that declares an id but does not compile gets its own row (its compile error
    // in place of a hash), unless another copy of that id loaded.
    let broken: Vec<_> = list
        .problems
        .iter()
        .filter(|p| {
            p.workflow_id
                .as_deref()
                .is_some_and(|id| !listed.contains(&id))
        })
        .collect();
    let others: Vec<_> = list
        .problems
        .iter()
        .filter(|p| !broken.iter().any(|b| std::ptr::eq(*b, *p)))
        .collect();
    let total = list.workflows.len() + broken.len();
    page(
        "Workflows",
        None,
        html! {
            h1 { "Workflows" }
            p class="hint" {
                "Every workflow the sources of this Console's environment define (bundled, project, "
                code { "WORKRAIL_WORKFLOW_DIRS" } ", user). Bundled " code { "wr.*" }
                " workflows are read-only: copy one to edit it."
            }
            @if total == 0 {
                p id="no-workflows" class="empty" { "No workflow source defines a workflow." }
            } @else {
                div class="scroll" {
                    table id="workflows" {
                        thead { tr { th { "Workflow" } th { "Access" } th { "Source" } th { "Name" } th { "File" } th { "Hash" } } }
                        tbody {
                            @for w in list.workflows.iter().take(LIST_MAX) {
                                tr class="workflow" data-workflow-id=(w.workflow_id.as_str()) {
                                    td class="id" { a class="workflow-link" href=(workflow_href(w.workflow_id.as_str())) { (w.workflow_id.as_str()) } }
                                    td class="access" { (access(w.editable)) }
                                    td class="source" { (w.source_kind.as_str()) }
                                    td class="name" { (bounded(&w.name, TITLE_MAX_BYTES)) }
                                    // The file on this machine where there is one (this page is
                                    // served to this machine only), its source ref on hover.
                                    td class="ref" title=(w.source_ref) { code { (bounded(w.path.as_deref().unwrap_or(&w.source_ref), TITLE_MAX_BYTES)) } }
                                    td class="hash" { code { (w.workflow_hash.as_str()) } }
                                }
                            }
                            @for p in broken.iter().take(LIST_MAX) {
                                @let id = p.workflow_id.as_deref().unwrap_or_default();
                                tr class="workflow broken" data-workflow-id=(id) {
                                    td class="id" { a class="workflow-link" href=(workflow_href(id)) { (id) } }
                                    td class="access" { (access(!id.starts_with("wr."))) }
                                    td class="source" { (p.source_kind.as_str()) }
                                    td class="name" {}
                                    td class="ref" { code { (bounded(&p.source_ref, TITLE_MAX_BYTES)) } }
                                    td class="hash error" { (p.problem) " (" (p.errors.len()) " problem" @if p.errors.len() != 1 { "s" } ", below)" }
                                }
                                // The compile errors in full, across the table's width.
                                tr class="workflow-errors" data-workflow-id=(id) {
                                    td colspan="6" {
                                        ul class="compile-errors" {
                                            @for e in p.errors.iter().take(LIST_MAX) { li class="compile-error" { (bounded(e, TEXT_MAX_BYTES)) } }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                @if total > LIST_MAX {
                    p class="cut" { "Only the first " (LIST_MAX) " workflows are listed." }
                }
            }
            @if !others.is_empty() {
                h2 { "Documents that did not load" }
                ul id="problems" {
                    @for p in others.iter().take(LIST_MAX) {
                        li class="problem" data-problem=(p.problem) {
                            code { (bounded(&p.source_ref, TITLE_MAX_BYTES)) } " (" (p.source_kind.as_str()) "): " (p.problem)
                            @for e in p.errors.iter().take(LIST_MAX) { br; (bounded(e, TEXT_MAX_BYTES)) }
                        }
                    }
                }
            }
        },
    )
}

/// A JSON value pretty-printed for a `pre` (bounded).
fn pretty<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_string_pretty(value) {
        Ok(text) => bounded(&text, SOURCE_MAX_BYTES),
        Err(e) => format!("(cannot show this snapshot: {e})"),
    }
}

fn errors_list(errors: &[(String, String)]) -> Markup {
    html! {
        ul id="errors" role="alert" {
            @for (pointer, message) in errors {
                li class="error" data-pointer=(pointer) {
                    code class="pointer" { @if pointer.is_empty() { "(document)" } @else { (pointer) } }
                    " " (bounded(message, TEXT_MAX_BYTES))
                }
            }
        }
    }
}

fn drift_warning(view: &PinnedView) -> Markup {
    let Some(drift) = &view.drift else {
        return html! {};
    };
    let pinned = drift.pinned_hash.as_str();
    html! {
        @match &drift.status {
            DriftStatus::Changed { current_hash } => {
                div id="drift-warning" role="alert" data-status="changed" {
                    strong { "Pinned drift: " }
                    "this run pinned " code { (pinned) } ", but the source on disk now compiles to "
                    code { (current_hash.as_str()) } ". The run keeps executing its pinned snapshot; new runs get the current one. "
                    a href="#drift-diff" { "See what changed." }
                }
            }
            DriftStatus::SourceMissing => {
                div id="drift-warning" role="alert" data-status="source_missing" {
                    strong { "Pinned drift: " }
                    "this run pinned " code { (pinned) } ", and no source defines " code { (drift.workflow_id.as_str()) }
                    " any more. The run keeps executing its pinned snapshot."
                }
            }
            DriftStatus::SourceInvalid { error_count } => {
                div id="drift-warning" role="alert" data-status="source_invalid" {
                    strong { "Pinned drift: " }
                    "this run pinned " code { (pinned) } ", and the source on disk no longer compiles ("
                    (error_count) " problem(s)). The run keeps executing its pinned snapshot."
                }
            }
        }
    }
}

fn pinned_pane(id: &str, pinned: &Pinned, current: Option<&str>) -> Markup {
    html! {
        section id="pinned" class="pane" {
            h2 { "Pinned" }
            @match pinned {
                Pinned::Run(found) => @match found.as_ref() {
                    Ok(view) => {
                        p class="crumbs" {
                            "Run " code { (view.run_id.as_str()) } " of session "
                            a href=(format!("/sessions/{}", escaped(view.session_id.as_str()))) { code { (view.session_id.as_str()) } }
                            " · " a href=(workflow_href(id)) { "all runs" }
                        }
                        p { "Pinned hash: " code class="pinned-hash" { (view.workflow_hash.as_str()) } }
                        @if view.workflow_id.as_str() != id {
                            p class="hint" { "This run executes " code { (view.workflow_id.as_str()) } "." }
                        }
                        div class="scroll" { pre tabindex="0" { (pretty(&view.pinned)) } }
                    }
                    Err(e) => {
                        p id="pinned-error" role="alert" { (bounded(&e.message, TEXT_MAX_BYTES)) " " (bounded(&e.suggestion, TEXT_MAX_BYTES)) }
                        p { a href=(workflow_href(id)) { "All runs of this workflow" } }
                    }
                },
                Pinned::Runs(runs, cut) => {
                    @if runs.is_empty() {
                        p id="no-pinned-runs" class="empty" { "No run of this data directory has pinned this workflow yet." }
                    } @else {
                        p class="hint" { "Runs that pinned a version of this workflow; open one to see its pinned snapshot and any drift." }
                        ul id="pinned-runs" {
                            @for r in runs {
                                li class="pinned-run" data-run-id=(r.run_id) {
                                    a href=(pinned_href(id, &r.session_id, &r.run_id)) { code { (r.run_id) } }
                                    " " span class="run-status" { (r.status) }
                                    @if let (Some(pinned), Some(now)) = (&r.workflow_hash, current) {
                                        @if pinned != now {
                                            " · " span class="badge drift" { "drifted" } " "
                                            a class="drift-link" href=(format!("{}#drift-diff", pinned_href(id, &r.session_id, &r.run_id))) { "see what changed" }
                                        }
                                    }
                                    @if !r.label.is_empty() { " · " (bounded(&r.label, TITLE_MAX_BYTES)) }
                                    br;
                                    span class="sub" { "session " code { (r.session_id) } }
                                }
                            }
                        }
                        @if *cut { p class="cut" { "Only the first " (LIST_MAX) " runs are listed." } }
                    }
                }
            }
        }
    }
}

fn source_form(detail: &WorkflowDetail, form: &FormState) -> Markup {
    let id = detail.workflow_id.as_str();
    if !detail.editable {
        return html! {
            p id="read-only" {
                "Bundled " code { "wr.*" } " workflows are read-only: they ship with WorkRail and are replaced on upgrade. "
                "Copy this one to the user workflow directory to edit the copy."
            }
            form id="copy" method="post" action=(format!("{}/copy", workflow_href(id))) {
                label for="copy-new-id" { "New id " }
                input id="copy-new-id" type="text" name="newId" required
                    value=(form.copy_id.clone().unwrap_or_else(|| copy_id(id)))
                    pattern="user\\.[a-z][a-z0-9_\\-]*" spellcheck="false";
                " "
                button type="submit" { "Copy to user workflows" }
            }
            @if !form.errors.is_empty() { (errors_list(&form.errors)) }
        };
    }
    let text = form.submitted.as_deref().unwrap_or(&detail.source_text);
    if text.len() > SOURCE_MAX_BYTES {
        return html! {
            p id="too-large" class="hint" {
                "This source is larger than " (SOURCE_MAX_BYTES / 1024) " KiB: edit it in its file, "
                code { (bounded(&detail.source_ref, TITLE_MAX_BYTES)) } "."
            }
        };
    }
    html! {
        @if !form.errors.is_empty() {
            p class="hint" { "Not saved: the compiler refused the new source (the file is unchanged)." }
            (errors_list(&form.errors))
        }
        form id="edit" method="post" action=(workflow_href(id)) {
            label for="edit-source" { "Edit the source (" code { (bounded(&detail.source_ref, TITLE_MAX_BYTES)) } "): it is compiled before it is saved." }
            textarea id="edit-source" name="source" rows="24" spellcheck="false" { (text) }
            button id="save" type="submit" { "Save source" }
        }
    }
}

/// One workflow's page.
pub fn detail(detail: &WorkflowDetail, pinned: &Pinned, form: &FormState) -> Markup {
    let id = detail.workflow_id.as_str();
    // A refused edit's page keeps its text and errors: it is not updated in place.
    let live = if form.errors.is_empty() && form.submitted.is_none() {
        Live::Poll
    } else {
        Live::Static
    };
    page_live(
        id,
        live,
        html! {
            p class="crumbs" { a href="/workflows" { "Workflows" } }
            h1 { "Workflow " code { (id) } }
            dl id="workflow-facts" {
                dt { "Source" } dd { (detail.source_kind.as_str()) " · " code { (bounded(&detail.source_ref, TITLE_MAX_BYTES)) } }
                dt { "Access" } dd class="access" { (access(detail.editable)) }
            }
            @if form.saved { p id="saved" role="status" { "Saved: the source file was written. New runs pin the new version; running runs keep theirs." } }
            @if let Pinned::Run(found) = pinned {
                @if let Ok(view) = found.as_ref() { (drift_warning(view)) }
            }
            @if let Pinned::Run(found) = pinned {
                @if let Ok(view) = found.as_ref() { (drift_diff(view, detail)) }
            }
            (source_form(detail, form))
            div class="panes" {
                section id="source" class="pane" {
                    h2 { "Source" }
                    p class="hint" { "As on disk." }
                    div class="scroll" { pre tabindex="0" { (bounded(&detail.source_text, SOURCE_MAX_BYTES)) } }
                }
                section id="compiled" class="pane" {
                    h2 { "Compiled" }
                    @match (&detail.workflow_hash, &detail.compiled) {
                        (Some(hash), Some(compiled)) => {
                            p { "Hash: " code class="workflow-hash" { (hash.as_str()) } }
                            p class="hint" { "Derived from the source; never edited." }
                            div class="scroll" { pre tabindex="0" { (pretty(compiled)) } }
                        }
                        _ => {
                            p class="hint" { "The source on disk does not compile:" }
                            @if let Some(e) = &detail.errors { (errors_list_plain(e)) }
                        }
                    }
                }
                (pinned_pane(id, pinned, detail.workflow_hash.as_ref().map(|h| h.as_str())))
            }
        },
    )
}

/// Lines of context around each change of the drift diff.
const DIFF_CONTEXT: usize = 3;

/// The line diff between the snapshot a run pinned and what the source on disk compiles to now
/// (both as pretty JSON; decision D183): what a drifted run still executes and new runs get.
fn drift_diff(view: &PinnedView, detail: &WorkflowDetail) -> Markup {
    let Some(drift) = &view.drift else {
        return html! {};
    };
    let Some(current) = &detail.compiled else {
        return html! {
            section id="drift-diff" {
                h2 { "What changed" }
                p class="hint" { "No diff: the source on disk does not compile now (its errors are under Compiled)." }
            }
        };
    };
    let (old, new) = (pretty(&view.pinned), pretty(current));
    let diff = similar::TextDiff::from_lines(old.as_str(), new.as_str());
    let groups = diff.grouped_ops(DIFF_CONTEXT);
    let (mut removed, mut added) = (0usize, 0usize);
    for change in diff.iter_all_changes() {
        match change.tag() {
            similar::ChangeTag::Delete => removed += 1,
            similar::ChangeTag::Insert => added += 1,
            similar::ChangeTag::Equal => {}
        }
    }
    html! {
        section id="drift-diff" aria-labelledby="drift-diff-heading" data-pinned-hash=(drift.pinned_hash.as_str()) {
            h2 id="drift-diff-heading" { "What changed since this run pinned it" }
            p class="hint" {
                "The pinned snapshot (" span class="del-word" { "−" } ") against what the source compiles to now ("
                span class="ins-word" { "+" } "): " (removed) " line(s) removed, " (added) " added."
            }
            div class="scroll" {
                table class="diff" {
                    caption class="visually-hidden" { "Line diff of the pinned and the current compiled workflow" }
                    tbody {
                        @for (i, group) in groups.iter().enumerate() {
                            @if i > 0 { tr class="hunk" { td colspan="3" { "⋯" } } }
                            @for op in group {
                                @for change in diff.iter_changes(op) {
                                    @let (class, sign) = match change.tag() {
                                        similar::ChangeTag::Delete => ("del", "−"),
                                        similar::ChangeTag::Insert => ("ins", "+"),
                                        similar::ChangeTag::Equal => ("eq", " "),
                                    };
                                    tr class=(class) {
                                        td class="ln" { @if let Some(n) = change.old_index() { (n + 1) } }
                                        td class="ln" { @if let Some(n) = change.new_index() { (n + 1) } }
                                        td class="text" { span class="sign" aria-hidden="true" { (sign) } (change.value().trim_end_matches('\n')) }
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

/// The compiler errors of the source on disk (not an edit's, so not `ul#errors`).
fn errors_list_plain(e: &ErrorEnvelope) -> Markup {
    html! {
        ul class="compile-errors" {
            @for (pointer, message) in error_items(e) {
                li class="compile-error" data-pointer=(pointer) {
                    code class="pointer" { @if pointer.is_empty() { "(document)" } @else { (pointer) } }
                    " " (bounded(&message, TEXT_MAX_BYTES))
                }
            }
        }
    }
}

/// 404 for a workflow no source defines.
pub fn not_found(id: &str, e: &ErrorEnvelope) -> Markup {
    page(
        "Not found",
        None,
        html! {
            h1 { "Not found" }
            p { "No workflow source defines " code { (bounded(id, TITLE_MAX_BYTES)) } ". " (bounded(&e.suggestion, TEXT_MAX_BYTES)) }
            p { a href="/workflows" { "Back to the workflows" } }
        },
    )
}

//! Deterministic text renderings for the discovery tools and for errors.
//!
//! Execution tools use the protocol's `render_text` (contract "text-first + JSON backbone");
//! discovery tools get a compact, stable text here (optional by the contract, but agents read
//! text first). No timestamps, no map iteration order: the same output renders the same text.

use std::fmt::Write as _;

use serde::Serialize;
use workrail_spec::error::ErrorEnvelope;
use workrail_spec::tools::{
    InspectWorkflowOutput, ListWorkflowsOutput, ResumeSessionOutput, WorkflowSummary,
};

/// The serde spelling of a closed-set value (`workflow`, `legacy`, `bundled`).
fn wire<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".to_owned(),
    }
}

fn summary_line(w: &WorkflowSummary) -> String {
    let mut line = format!(
        "- {} — {} ({}, {})",
        w.workflow_id,
        w.name,
        wire(&w.kind),
        wire(&w.source_kind)
    );
    if let Some(suggested) = &w.suggested_id {
        line.push_str(&format!(
            " [legacy id; suggested namespaced id: {suggested}]"
        ));
    }
    if let Some(canonical) = &w.canonical_id {
        line.push_str(&format!(" [alias of {canonical}]"));
    }
    let description = w.description.trim();
    if !description.is_empty() {
        line.push_str(": ");
        line.push_str(description);
    }
    line
}

/// `list_workflows` as text.
pub fn list_text(out: &ListWorkflowsOutput) -> String {
    let n = out.workflows.len();
    let mut text = match n {
        0 => "No workflows are available.".to_owned(),
        1 => "1 workflow available:".to_owned(),
        _ => format!("{n} workflows available:"),
    };
    for w in &out.workflows {
        text.push('\n');
        text.push_str(&summary_line(w));
    }
    if !out.problems.is_empty() {
        let _ = write!(
            text,
            "\n\n{} workflow file{} did not load (tell the user; the file's author fixes it):",
            out.problems.len(),
            if out.problems.len() == 1 { "" } else { "s" }
        );
        for p in &out.problems {
            let id = p
                .workflow_id
                .as_deref()
                .map(|id| format!(" (id {id})"))
                .unwrap_or_default();
            let at = p
                .path
                .as_deref()
                .map(|path| format!(" (file {path})"))
                .unwrap_or_default();
            let _ = write!(
                text,
                "\n- {}{id}, {}{at}: {}",
                p.source_ref, p.source_kind, p.problem
            );
            for e in &p.errors {
                let _ = write!(text, "\n  - {e}");
            }
        }
    }
    if n > 0 {
        text.push_str(
            "\n\nNext: inspect_workflow {\"workflowId\": \"<id>\", \"mode\": \"preview\"} to see the steps, or start_workflow {\"workflowId\": \"<id>\"} to begin.",
        );
    }
    text
}

/// The most of one kept field's JSON the text shows (the structured output has all of it).
const KEPT_TEXT_MAX_BYTES: usize = 400;

/// Kept fields as `- name: <compact JSON>` lines, each bounded.
fn kept_text(kept: &std::collections::BTreeMap<String, serde_json::Value>) -> String {
    let mut out = String::new();
    for (name, value) in kept {
        let json = serde_json::to_string(value).unwrap_or_default();
        let cut = workrail_spec::budget::floor_char_boundary(&json, KEPT_TEXT_MAX_BYTES);
        let shown = if cut < json.len() {
            format!(
                "{}… ({} bytes in structuredContent)",
                &json[..cut],
                json.len()
            )
        } else {
            json
        };
        out.push_str(&format!("\n- {name}: {shown}"));
    }
    out
}

/// `inspect_workflow` as text.
pub fn inspect_text(out: &InspectWorkflowOutput) -> String {
    let w = &out.workflow;
    let mut text = format!(
        "Workflow {} — {} ({}, {}, id {})\nworkflowHash: {}",
        w.workflow_id,
        w.name,
        wire(&w.kind),
        wire(&w.source_kind),
        wire(&w.id_status),
        out.workflow_hash
    );
    if let Some(suggested) = &w.suggested_id {
        text.push_str(&format!("\nSuggested namespaced id: {suggested}"));
    }
    let description = w.description.trim();
    if !description.is_empty() {
        text.push_str("\n\n");
        text.push_str(description);
    }
    if !out.kept.is_empty() {
        text.push_str("\n\nKept fields (shown here, no effect on a run):");
        text.push_str(&kept_text(&out.kept));
    }
    if !out.steps.is_empty() {
        text.push_str(&format!("\n\nSteps ({}):", out.steps.len()));
        for (i, step) in out.steps.iter().enumerate() {
            text.push_str(&format!(
                "\n\n{}. {} [{}]\n{}",
                i + 1,
                step.title,
                step.step_id,
                step.prompt.trim_end()
            ));
            if !step.kept.is_empty() {
                text.push_str("\nKept fields:");
                text.push_str(&kept_text(&step.kept));
            }
        }
    }
    if !out.warnings.is_empty() {
        text.push_str("\n\nWarnings:");
        for warning in &out.warnings {
            text.push_str(&format!("\n- {}: {}", warning.code, warning.message));
        }
    }
    text.push_str(&format!(
        "\n\nNext: start_workflow {{\"workflowId\": \"{}\"}} to begin a run.",
        w.workflow_id
    ));
    text
}

/// An error result's text: one paragraph with the code, message and suggestion. Retry
/// guidance stays in the envelope's `retry` union (structuredContent), never in prose.
pub fn error_text(tool: &str, envelope: &ErrorEnvelope) -> String {
    let tool: String = tool.chars().take(64).collect();
    format!(
        "{} error {}: {} Next: {}",
        tool,
        envelope.code,
        envelope.message.trim_end(),
        envelope.suggestion.trim_end()
    )
}

/// The deterministic text-first rendering of a `resume_session` result.
pub fn resume_text(out: &ResumeSessionOutput) -> String {
    let mut text = String::new();
    match out.candidates.len() {
        0 => text.push_str(
            "No run to resume: this WorkRail data directory holds no healthy session yet.\n\nNext: if the user has a stateToken from an earlier chat, call continue_workflow with it; otherwise pick a workflow with list_workflows and start a run with start_workflow.\n",
        ),
        n => {
            let matched_any = out.candidates.iter().any(|c| {
                c.why_matched
                    .iter()
                    .any(|w| *w != workrail_spec::closed::WhyMatched::RecencyFallback)
            });
            if matched_any {
                let _ = writeln!(
                    text,
                    "{n} run{} to resume, best match first:",
                    if n == 1 { "" } else { "s" }
                );
            } else {
                let _ = writeln!(
                    text,
                    "No run matched a query term (or no query was given), so these are the {n} most recent run{}, newest first. The search matches words in each run's latest recap notes and in its workflow id or name, and git HEAD or branch when you pass them; it does not search `context`, so an id (ticket, PR) that was only passed as context is not found: search for words the notes would contain, or pass query.gitBranch / query.gitHeadSha.",
                    if n == 1 { "" } else { "s" }
                );
            }
            for (i, c) in out.candidates.iter().enumerate() {
                let at = match &c.pending {
                    Some(p) => format!("waiting at step \"{}\" [{}]", p.title, p.step_id),
                    None if c.is_complete => "complete".to_owned(),
                    None => "no pending step".to_owned(),
                };
                let why: Vec<&str> = c.why_matched.iter().map(|w| w.as_str()).collect();
                let _ = writeln!(
                    text,
                    "\n{}. run \"{}\" ({}) — status: {}, {at}\n   matched: {}; last activity: event {}\n   session {}, run {}, node {}",
                    i + 1,
                    c.run_label,
                    c.workflow_id,
                    c.status,
                    why.join(", "),
                    c.last_activity_event_index,
                    c.session_id,
                    c.run_id,
                    c.node_id,
                );
                if !c.snippet.is_empty() {
                    text.push_str("   latest recap:\n");
                    for line in c.snippet.lines() {
                        let _ = writeln!(text, "   > {line}");
                    }
                }
                let _ = writeln!(text, "   stateToken: {}", c.state_token);
            }
            text.push_str(
                "\nNext: pick the run the user means (ask when more than one fits), then call continue_workflow with only its stateToken: that recovers the pending step and a recap without writing anything. To narrow the search, pass query.text (words from the recap or the workflow), query.gitBranch or query.gitHeadSha (from `git rev-parse HEAD`).\n",
            );
        }
    }
    if out.skipped_unhealthy_sessions > 0 {
        let n = out.skipped_unhealthy_sessions;
        let _ = writeln!(
            text,
            "\n{n} session{} left out because {} could not be validated (damaged, written by a newer WorkRail, or unreadable right now); a person can run `workrail inspect <sessionId>` to see why and how to recover it:",
            if n == 1 { " was" } else { "s were" },
            if n == 1 { "it" } else { "they" },
        );
        for s in &out.skipped_sessions {
            let why = s
                .reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            let _ = writeln!(text, "- {} ({}{why})", s.session_id, s.health);
        }
        let named = out.skipped_sessions.len() as u64;
        if named < n {
            let _ = writeln!(text, "- and {} more", n - named);
        }
    }
    text
}

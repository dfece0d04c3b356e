//! Deterministic text renderings for the discovery tools and for errors.
//!
//! Execution tools use the protocol's `render_text` (contract "text-first + JSON backbone");
//! discovery tools get a compact, stable text here (optional by the contract, but agents read
//! text first). No timestamps, no map iteration order: the same output renders the same text.

use serde::Serialize;
use workrail_spec::error::ErrorEnvelope;
use workrail_spec::tools::{InspectWorkflowOutput, ListWorkflowsOutput, WorkflowSummary};

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
    if n > 0 {
        text.push_str(
            "\n\nNext: inspect_workflow {\"workflowId\": \"<id>\", \"mode\": \"preview\"} to see the steps, or start_workflow {\"workflowId\": \"<id>\"} to begin.",
        );
    }
    text
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

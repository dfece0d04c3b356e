//! Deterministic id suggestions (locks §7 "Deterministic rename suggestions", authoring
//! "Identifier constraints"): the same input always yields the same suggestion.

use workrail_spec::ids::{LoopId, StepId, WorkflowId, suggest_delimiter_safe};

/// Normalizes text into a workflow id segment (`[a-z][a-z0-9_-]*`): lowercase, hyphens and every
/// other character outside `[a-z0-9_]` become `_`; a segment that does not start with a letter
/// gets a `w_` prefix; an empty one becomes `workflow`.
pub fn normalize_segment(raw: &str) -> String {
    let mut out: String = raw
        .chars()
        .flat_map(char::to_lowercase)
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() {
        out.push_str("workflow");
    }
    if !out.starts_with(|c: char| c.is_ascii_lowercase()) {
        out.insert_str(0, "w_");
    }
    out
}

/// The namespaced id suggested for `raw` in `namespace` (`<namespace>.<normalized name>`).
/// For a dotted id the text after the first dot is the name.
pub fn suggest_workflow_id(namespace: &str, raw: &str) -> String {
    let name = raw.split_once('.').map_or(raw, |(_, name)| name);
    let id = format!(
        "{}.{}",
        normalize_segment(namespace),
        normalize_segment(name)
    );
    // Overlong names are cut to the workflow id budget on a char boundary (ids are ASCII here).
    id.chars().take(WorkflowId::MAX_LEN).collect()
}

/// The delimiter-safe auto-fix for a step id, cut to the id budget.
pub fn suggest_step_id(raw: &str) -> String {
    suggest_delimiter_safe(raw)
        .chars()
        .take(StepId::MAX_LEN)
        .collect()
}

/// The delimiter-safe auto-fix for a loop or condition id, cut to the id budget.
pub fn suggest_loop_id(raw: &str) -> String {
    suggest_delimiter_safe(raw)
        .chars()
        .take(LoopId::MAX_LEN)
        .collect()
}

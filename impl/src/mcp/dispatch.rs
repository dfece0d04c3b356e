//! `tools/call` without the transport: argument validation, the backend call and the mapping of
//! every outcome (success, backend error, bad argument, unknown tool, panic) to a tool result.
//!
//! Nothing here returns a JSON-RPC error or panics (locks §12 "Never throw errors across MCP
//! boundaries"): a bad argument is a tool result with `isError: true` whose `structuredContent`
//! is an [`ErrorEnvelope`] with code `VALIDATION_ERROR` naming the field and the fix.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::tools::{
    CheckpointWorkflowInput, ContinueWorkflowInput, ExecutionOutput, InspectWorkflowInput,
    ListWorkflowsInput, ResumeSessionInput, StartSessionInput, StartWorkflowInput,
};

use super::backend::ToolBackend;
use super::render;
use super::tools::{ToolName, tool_defs};
use crate::features::{FEATURES_ENV, FEATURES_FILE, Feature, Features};

/// A tool result before it is put on the wire.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutcome {
    /// `content[0].text`.
    pub text: String,
    /// `structuredContent`: the output JSON, or the error envelope.
    pub structured: Value,
    /// `isError`.
    pub is_error: bool,
}

impl ToolOutcome {
    /// A successful result.
    pub fn success(text: String, structured: Value) -> Self {
        Self {
            text,
            structured,
            is_error: false,
        }
    }

    /// An error result carrying the envelope.
    pub fn error(tool: &str, envelope: &ErrorEnvelope) -> Self {
        let structured = serde_json::to_value(envelope).unwrap_or_else(|_| {
            json!({
                "code": "INTERNAL_ERROR",
                "message": "the error envelope could not be serialized",
                "suggestion": "Report this WorkRail bug.",
                "retry": {"kind": "not_retryable"},
            })
        });
        Self {
            text: render::error_text(tool, envelope),
            structured,
            is_error: true,
        }
    }

    /// The rmcp wire result: text-first `content`, JSON `structuredContent`.
    pub fn into_call_result(self) -> rmcp::model::CallToolResult {
        let content = vec![rmcp::model::ContentBlock::text(self.text)];
        let mut result = if self.is_error {
            rmcp::model::CallToolResult::error(content)
        } else {
            rmcp::model::CallToolResult::success(content)
        };
        result.structured_content = Some(self.structured);
        result
    }
}

/// Handles one `tools/call`: `arguments` is the raw JSON (`None` when absent). Never panics.
pub fn call_tool<B: ToolBackend + ?Sized>(
    backend: &B,
    name: &str,
    arguments: Option<Value>,
) -> ToolOutcome {
    let features = backend.features();
    let Some(tool) = ToolName::parse(name) else {
        return ToolOutcome::error(name, &unknown_tool(name, &features));
    };
    if let Some(feature) = tool.feature().filter(|f| !features.enabled(*f)) {
        return ToolOutcome::error(name, &switched_off(tool, feature, &features));
    }
    match catch_unwind(AssertUnwindSafe(|| dispatch(backend, tool, arguments))) {
        Ok(outcome) => outcome,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            tracing::error!(tool = tool.as_str(), panic = %what, "tool handler panicked");
            ToolOutcome::error(tool.as_str(), &internal_error(tool.as_str(), &what))
        }
    }
}

fn dispatch<B: ToolBackend + ?Sized>(
    backend: &B,
    tool: ToolName,
    arguments: Option<Value>,
) -> ToolOutcome {
    let name = tool.as_str();
    match tool {
        ToolName::ListWorkflows => {
            match parse_args::<ListWorkflowsInput>(tool, arguments)
                .and_then(|input| backend.list_workflows(input))
            {
                Ok(out) => structured(name, render::list_text(&out), &out),
                Err(e) => ToolOutcome::error(name, &e),
            }
        }
        ToolName::InspectWorkflow => {
            match parse_args::<InspectWorkflowInput>(tool, arguments)
                .and_then(|input| backend.inspect_workflow(input))
            {
                Ok(out) => structured(name, render::inspect_text(&out), &out),
                Err(e) => ToolOutcome::error(name, &e),
            }
        }
        ToolName::StartWorkflow => execution(
            backend,
            name,
            parse_args::<StartWorkflowInput>(tool, arguments)
                .and_then(|input| backend.start_workflow(input)),
        ),
        ToolName::ContinueWorkflow => execution(
            backend,
            name,
            parse_args::<ContinueWorkflowInput>(tool, arguments)
                .and_then(|input| backend.continue_workflow(input)),
        ),
        ToolName::CheckpointWorkflow => execution(
            backend,
            name,
            parse_args::<CheckpointWorkflowInput>(tool, arguments)
                .and_then(|input| backend.checkpoint_workflow(input)),
        ),
        ToolName::StartSession => execution(
            backend,
            name,
            parse_args::<StartSessionInput>(tool, arguments)
                .and_then(|input| backend.start_session(input)),
        ),
        ToolName::ResumeSession => {
            match parse_args::<ResumeSessionInput>(tool, arguments)
                .and_then(|input| backend.resume_session(input))
            {
                Ok(out) => structured(name, render::resume_text(&out), &out),
                Err(e) => ToolOutcome::error(name, &e),
            }
        }
    }
}

fn execution<B: ToolBackend + ?Sized>(
    backend: &B,
    name: &str,
    result: Result<ExecutionOutput, ErrorEnvelope>,
) -> ToolOutcome {
    match result {
        Ok(out) => structured(name, backend.render_execution(&out), &out),
        Err(e) => ToolOutcome::error(name, &e),
    }
}

fn structured<T: Serialize>(name: &str, text: String, out: &T) -> ToolOutcome {
    match serde_json::to_value(out) {
        Ok(value) => ToolOutcome::success(text, value),
        Err(e) => ToolOutcome::error(
            name,
            &internal_error(name, &format!("the response could not be serialized: {e}")),
        ),
    }
}

/// The accepted top-level argument names of a tool, from its input schema.
fn accepted_fields(tool: ToolName) -> &'static [String] {
    static FIELDS: OnceLock<Vec<(ToolName, Vec<String>)>> = OnceLock::new();
    let all = FIELDS.get_or_init(|| {
        tool_defs()
            .into_iter()
            .map(|def| {
                let mut names: Vec<String> = def
                    .input_schema
                    .get("properties")
                    .and_then(Value::as_object)
                    .map(|p| p.keys().cloned().collect())
                    .unwrap_or_default();
                names.sort();
                (def.name, names)
            })
            .collect()
    });
    all.iter()
        .find(|(t, _)| *t == tool)
        .map_or(&[], |(_, names)| names.as_slice())
}

/// Deserializes the arguments of `tool` into its spec input type, or explains precisely which
/// argument is wrong and how to fix it.
pub fn parse_args<T: DeserializeOwned>(
    tool: ToolName,
    arguments: Option<Value>,
) -> Result<T, ErrorEnvelope> {
    let name = tool.as_str();
    let value = match arguments {
        None | Some(Value::Null) => Value::Object(serde_json::Map::new()),
        Some(v @ Value::Object(_)) => v,
        Some(other) => {
            let found = workrail_spec::artifact::json_type(&other);
            return Err(validation(
                format!("{name}: the arguments must be a JSON object, got {found}."),
                format!(
                    "Call {name} with an object of named arguments (accepted: {}).",
                    field_list(tool)
                ),
                json!({"tool": name, "field": "", "problem": "not_an_object", "acceptedFields": accepted_fields(tool)}),
            ));
        }
    };
    serde_path_to_error::deserialize::<_, T>(&value).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        let inner = e.into_inner().to_string();
        explain(tool, &path, &inner)
    })
}

/// Turns a serde message (`unknown field `x`, expected ...`, `missing field `x``, `invalid
/// type: ...`) at `path` into a self-correcting `VALIDATION_ERROR`.
fn explain(tool: ToolName, path: &str, serde_message: &str) -> ErrorEnvelope {
    let name = tool.as_str();
    let quoted = first_backticked(serde_message);
    let join = |field: &str| {
        if path.is_empty() {
            field.to_owned()
        } else if path == field || path.ends_with(&format!(".{field}")) {
            path.to_owned()
        } else {
            format!("{path}.{field}")
        }
    };
    // Strip serde's ` at line 1 column 2` suffix (never present for values, but be safe).
    let detail = serde_message
        .split(" at line ")
        .next()
        .unwrap_or(serde_message);
    if serde_message.starts_with("unknown field") {
        let field = join(quoted.unwrap_or(""));
        let top_level = !field.contains('.');
        let suggestion = if top_level {
            format!(
                "Remove `{field}`: {name} accepts only {} (see its inputSchema). Do not invent arguments.",
                field_list(tool)
            )
        } else {
            format!(
                "Remove `{field}`; {detail}. Follow the tool's inputSchema exactly and do not invent fields."
            )
        };
        return validation(
            format!("{name}: unknown argument `{field}`."),
            suggestion,
            json!({"tool": name, "field": field, "problem": "unknown_field", "acceptedFields": accepted_fields(tool)}),
        );
    }
    if serde_message.starts_with("missing field") {
        let field = join(quoted.unwrap_or(""));
        let how = missing_hint(&field);
        return validation(
            format!("{name}: required argument `{field}` is missing."),
            format!("Add `{field}`{how} and call {name} again."),
            json!({"tool": name, "field": field, "problem": "missing_field", "acceptedFields": accepted_fields(tool)}),
        );
    }
    let field = if path.is_empty() {
        "(arguments)".to_owned()
    } else {
        path.to_owned()
    };
    validation(
        format!("{name}: argument `{field}` is invalid: {detail}."),
        format!(
            "Send `{field}` with the type and values its inputSchema allows{}, then call {name} again.",
            missing_hint(&field)
        ),
        json!({"tool": name, "field": field, "problem": "invalid_value", "acceptedFields": accepted_fields(tool)}),
    )
}

/// A hint on where a field's value comes from.
fn missing_hint(field: &str) -> &'static str {
    match field.rsplit('.').next().unwrap_or(field) {
        "stateToken" | "ackToken" | "checkpointToken" => {
            " (copy it exactly from the latest start_workflow / continue_workflow response of this run)"
        }
        "workflowId" => " (a `workflowId` from list_workflows, e.g. `wr.coding_task`)",
        "output" => " (an object: `{\"notesMarkdown\": \"...\"}`)",
        "context" => " (a JSON object of external inputs)",
        _ => "",
    }
}

fn first_backticked(s: &str) -> Option<&str> {
    let start = s.find('`')? + 1;
    let len = s[start..].find('`')?;
    Some(&s[start..start + len])
}

fn field_list(tool: ToolName) -> String {
    let fields = accepted_fields(tool);
    if fields.is_empty() {
        "no arguments".to_owned()
    } else {
        fields
            .iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn validation(message: String, suggestion: String, details: Value) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::ValidationError,
        message,
        suggestion,
        Retry::NotRetryable,
    )
    .with_details(details)
}

/// The tools this server lists, in `TOOL_NAMES` order.
fn listed(features: &Features) -> Vec<&'static str> {
    ToolName::ALL
        .into_iter()
        .filter(|t| t.enabled(features))
        .map(ToolName::as_str)
        .collect()
}

fn unknown_tool(name: &str, features: &Features) -> ErrorEnvelope {
    // Bound the echoed name: it comes from the caller.
    let shown: String = name.chars().take(64).collect();
    let tools = listed(features);
    validation(
        format!(
            "unknown tool `{shown}`: this WorkRail server has exactly {} tools.",
            tools.len()
        ),
        format!(
            "Call one of: {}. Use the names exactly as `tools/list` shows them.",
            tools.join(", ")
        ),
        json!({"tool": shown, "problem": "unknown_tool", "tools": tools}),
    )
}

fn switched_off(tool: ToolName, feature: Feature, features: &Features) -> ErrorEnvelope {
    let tools = listed(features);
    validation(
        format!(
            "{}: this tool is switched off on this WorkRail server (feature flag `{feature}` is off).",
            tool.as_str()
        ),
        format!(
            "Use the tools `tools/list` shows ({}). To switch it on, the user sets {FEATURES_ENV}=+{feature} in the server's environment (or {{\"{feature}\": true}} in {FEATURES_FILE} in its data directory) and restarts the server.",
            tools.join(", ")
        ),
        json!({"tool": tool.as_str(), "problem": "tool_switched_off", "feature": feature.as_str(), "tools": tools}),
    )
}

fn internal_error(tool: &str, what: &str) -> ErrorEnvelope {
    let what: String = what.chars().take(300).collect();
    ErrorEnvelope::new(
        ErrorCode::InternalError,
        format!("{tool}: WorkRail hit an internal error: {what}"),
        "This is a WorkRail bug, not a problem with your arguments: if the same call fails again, tell the user and include this message.",
        Retry::RetryableImmediate,
    )
}

//! The generated tool catalog (`impl/tools/catalog.json`) and the generated tool list of
//! `impl/docs/mcp.md` (locks §8 "Generation + verification").
//!
//! Both are rendered from [`super::tools::tool_defs`] only. Output is deterministic: object keys
//! in RFC 8785 order (a JCS round-trip), arrays in `TOOL_NAMES` order, two-space indentation,
//! a trailing newline, no timestamps. The test `impl/tests/mcp_catalog.rs` regenerates both in
//! memory and fails with a diff when the committed files are stale.

use serde_json::{Map, Value, json};

use super::tools::{ToolDef, error_schema, tool_defs};

/// Where the catalog lives, relative to the `impl/` crate root.
pub const CATALOG_PATH: &str = "tools/catalog.json";
/// The doc holding the generated tool list, relative to the `impl/` crate root.
pub const DOC_PATH: &str = "docs/mcp.md";
/// Markers around the generated block in [`DOC_PATH`].
pub const DOC_BEGIN: &str = "<!-- BEGIN GENERATED: tool list (impl/src/mcp/tools.rs) -->";
pub const DOC_END: &str = "<!-- END GENERATED: tool list -->";

fn tool_json(def: &ToolDef) -> Value {
    json!({
        "name": def.name.as_str(),
        "title": def.title,
        "description": def.full_description(),
        "annotations": {
            "readOnlyHint": def.hints.read_only,
            "destructiveHint": false,
            "idempotentHint": def.hints.idempotent,
            "openWorldHint": false,
        },
        "inputSchema": Value::Object(def.input_schema.clone()),
        "outputSchema": Value::Object(def.output_schema.clone()),
    })
}

/// The catalog as a JSON value (tools in `TOOL_NAMES` order, plus the error envelope schema).
pub fn catalog_value() -> Value {
    let tools: Vec<Value> = tool_defs().iter().map(tool_json).collect();
    let mut root = Map::new();
    root.insert(
        "generatedFrom".to_owned(),
        Value::String("impl/src/mcp/tools.rs".to_owned()),
    );
    root.insert("tools".to_owned(), Value::Array(tools));
    root.insert("errorSchema".to_owned(), Value::Object(error_schema()));
    Value::Object(root)
}

/// The catalog file contents: sorted keys, pretty, trailing newline.
pub fn render_catalog() -> String {
    let value = catalog_value();
    // Round-trip through RFC 8785 so key order never depends on serde_json features.
    let canonical = workrail_spec::jcs::to_canonical_string(&value).unwrap_or_default();
    let sorted: Value = serde_json::from_str(&canonical).unwrap_or(value);
    let mut out = serde_json::to_string_pretty(&sorted).unwrap_or_default();
    out.push('\n');
    out
}

/// The generated Markdown block (between and including the markers) listing every tool.
pub fn render_doc_block() -> String {
    let mut out = String::new();
    out.push_str(DOC_BEGIN);
    out.push_str(
        "\n\n| tool | title | read-only | idempotent | feature flag | arguments |\n|---|---|---|---|---|---|\n",
    );
    let defs = tool_defs();
    for def in &defs {
        let args = argument_list(&def.input_schema);
        let flag = match def.name.feature() {
            None => "none (core)".to_owned(),
            Some(f) if f.default_on() => format!("`{f}` (on by default)"),
            Some(f) => format!("`{f}` (off by default)"),
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {flag} | {} |\n",
            def.name.as_str(),
            def.title,
            yes_no(def.hints.read_only),
            yes_no(def.hints.idempotent),
            if args.is_empty() {
                "none".to_owned()
            } else {
                args
            },
        ));
    }
    for def in &defs {
        out.push_str(&format!(
            "\n### `{}`\n\n{}\n",
            def.name.as_str(),
            def.full_description()
        ));
    }
    out.push('\n');
    out.push_str(DOC_END);
    out
}

/// `a` (required) and `b?` (optional) for each top-level property, in schema key order.
fn argument_list(schema: &Map<String, Value>) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut names: Vec<&String> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().collect())
        .unwrap_or_default();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            if required.contains(&n.as_str()) {
                format!("`{n}`")
            } else {
                format!("`{n}?`")
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// Replaces the generated block of a doc text (markers included); `None` when the markers are
/// missing or out of order.
pub fn splice_doc_block(doc: &str) -> Option<String> {
    let begin = doc.find(DOC_BEGIN)?;
    let end = doc[begin..].find(DOC_END)? + begin + DOC_END.len();
    let mut out = String::with_capacity(doc.len());
    out.push_str(&doc[..begin]);
    out.push_str(&render_doc_block());
    out.push_str(&doc[end..]);
    Some(out)
}

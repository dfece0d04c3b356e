//! The MCP tool surface stays exactly the locked tools, generated from one source.
//!
//! Guards against: a tool being added, removed or renamed (including any projection tool);
//! tool schemas drifting from the `workrail_spec::tools` types or the committed
//! `spec/schemas/tools/*`; the committed catalog `impl/tools/catalog.json` or the generated tool
//! list in `impl/docs/mcp.md` going stale after a description or schema change. A stale file
//! fails with a unified diff and the command that regenerates it:
//!
//! ```text
//! WORKRAIL_BLESS=1 cargo test -p workrail --test suite mcp_catalog::
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use workrail::mcp::catalog::{CATALOG_PATH, DOC_PATH, render_catalog, splice_doc_block};
use workrail::mcp::tools::{ToolName, tool_defs};
use workrail::mcp::{ToolBackend, WorkrailServer};
use workrail_spec::error::ErrorEnvelope;
use workrail_spec::tools::{
    CheckpointWorkflowInput, ContinueWorkflowInput, ExecutionOutput, InspectWorkflowInput,
    InspectWorkflowOutput, ListWorkflowsInput, ListWorkflowsOutput, ResumeSessionInput,
    ResumeSessionOutput, StartWorkflowInput, TOOL_NAMES,
};

const BLESS_HINT: &str =
    "regenerate with: WORKRAIL_BLESS=1 cargo test -p workrail --test suite mcp_catalog::";

fn crate_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn blessing() -> bool {
    std::env::var_os("WORKRAIL_BLESS").is_some_and(|v| v == "1")
}

/// Compares (or, when blessing, writes) one generated file; a diff on mismatch.
fn check_file(path: &Path, expected: &str) -> Option<String> {
    let actual = fs::read_to_string(path).unwrap_or_default();
    if actual == expected {
        return None;
    }
    if blessing() {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, expected).unwrap();
        return None;
    }
    let diff = similar::TextDiff::from_lines(actual.as_str(), expected)
        .unified_diff()
        .context_radius(2)
        .header("committed", "generated")
        .to_string();
    let shown: String = diff.lines().take(80).collect::<Vec<_>>().join("\n");
    Some(format!(
        "{} is stale:\n{shown}\n\n{BLESS_HINT}",
        path.display()
    ))
}

/// lock: L-GEN-VERIFIER, L-GEN-DETERMINISTIC, L-GEN-SINGLE-SOURCE
#[test]
fn committed_tool_catalog_matches_the_definitions() {
    let generated = render_catalog();
    assert_eq!(
        generated,
        render_catalog(),
        "catalog generation is not deterministic"
    );
    assert!(
        generated.ends_with("}\n"),
        "catalog must end with a newline"
    );
    // Keys are sorted at every level (RFC 8785 order), arrays keep definition order.
    let value: Value = serde_json::from_str(&generated).unwrap();
    let canonical = workrail_spec::jcs::to_canonical_string(&value).unwrap();
    assert_eq!(
        serde_json::to_string(&value).unwrap(),
        canonical,
        "catalog keys are not in canonical order"
    );
    if let Some(problem) = check_file(&crate_root().join(CATALOG_PATH), &generated) {
        panic!("{problem}");
    }
}

/// lock: L-GEN-VERIFIER, L-GEN-SINGLE-SOURCE
#[test]
fn generated_tool_list_in_docs_is_current() {
    let path = crate_root().join(DOC_PATH);
    let doc = fs::read_to_string(&path).unwrap();
    let expected = splice_doc_block(&doc)
        .unwrap_or_else(|| panic!("{} lacks the generated tool-list markers", path.display()));
    if let Some(problem) = check_file(&path, &expected) {
        panic!("{problem}");
    }
}

/// lock: L-MCP-TOOL-SET, L-MCP-NO-PROJECTION-TOOLS
#[test]
fn registry_is_exactly_the_locked_tools() {
    let names: Vec<&str> = tool_defs().iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, TOOL_NAMES.to_vec());
    // The closed enum, the definitions and the catalog file agree.
    let enum_names: Vec<&str> = ToolName::ALL.iter().map(|t| t.as_str()).collect();
    assert_eq!(enum_names, TOOL_NAMES.to_vec());
    let catalog: Value = serde_json::from_str(&render_catalog()).unwrap();
    let catalog_names: Vec<&str> = catalog["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(catalog_names, TOOL_NAMES.to_vec());
    // What the server actually serves on `tools/list`.
    let server = WorkrailServer::new(std::sync::Arc::new(NoBackend));
    let served: Vec<String> = server.tools().iter().map(|t| t.name.to_string()).collect();
    // Under the default flags: every tool but the opt-in `start_session`.
    let on_by_default: Vec<String> = TOOL_NAMES
        .iter()
        .filter(|name| **name != "start_session")
        .map(|name| (*name).to_owned())
        .collect();
    assert_eq!(served, on_by_default);
    // The four core tools, then only flagged tools the contract names.
    assert_eq!(
        served[..4],
        [
            "list_workflows",
            "inspect_workflow",
            "start_workflow",
            "continue_workflow"
        ]
    );
    for name in &served[4..] {
        assert!(
            ["checkpoint_workflow", "start_session", "resume_session"].contains(&name.as_str()),
            "{name} is not a flagged tool of the contract"
        );
    }
    // No projection surface hides behind another name (resume_session is the contract's
    // read-only lookup, not a projection tool).
    for name in served.iter().filter(|n| n.as_str() != "resume_session") {
        for word in [
            "session",
            "projection",
            "dag",
            "export",
            "import",
            "resume",
            "status",
        ] {
            assert!(!name.contains(word), "unexpected tool {name}");
        }
    }
}

/// lock: L-GEN-SINGLE-SOURCE
#[test]
fn tool_schemas_equal_the_committed_spec_schemas() {
    let spec_dir = crate_root().parent().unwrap().join("spec/schemas/tools");
    for def in tool_defs() {
        let name = def.name.as_str();
        for (kind, schema) in [("input", &def.input_schema), ("output", &def.output_schema)] {
            let path = spec_dir.join(format!("{name}.{kind}.schema.json"));
            let committed: Value = serde_json::from_str(&fs::read_to_string(&path).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(
                Value::Object(schema.clone()),
                committed,
                "{name} {kind} schema differs from {}",
                path.display()
            );
        }
        // MCP requires object schemas; inputs reject unknown fields.
        assert_eq!(def.input_schema["type"], "object", "{name} input");
        assert_eq!(def.output_schema["type"], "object", "{name} output");
        assert_eq!(
            def.input_schema["additionalProperties"], false,
            "{name} input"
        );
    }
}

/// lock: L-MCP-AGENT-MUST, L-MCP-AGENT-MUST-NOT
#[test]
fn descriptions_carry_the_agent_contract() {
    for def in tool_defs() {
        let d = def.full_description();
        assert!(!def.title.is_empty());
        assert!(
            d.contains("isError"),
            "{}: error handling",
            def.name.as_str()
        );
        if def.name.is_execution() {
            assert!(d.contains("opaque"), "{}: opaque tokens", def.name.as_str());
            assert!(
                d.contains("exactly as returned"),
                "{}: round-trip",
                def.name.as_str()
            );
            assert!(
                d.contains("Never track or send execution state"),
                "{}: no state",
                def.name.as_str()
            );
            assert!(
                d.contains("Do not guess payload shapes"),
                "{}: no guessing",
                def.name.as_str()
            );
        }
    }
    let by_name = |n: ToolName| {
        tool_defs()
            .into_iter()
            .find(|d| d.name == n)
            .unwrap()
            .full_description()
    };
    let cont = by_name(ToolName::ContinueWorkflow);
    for needle in [
        "Without `ackToken`",
        "rehydrate",
        "4096",
        "fork",
        "older `stateToken`",
        "256 KiB",
        "not echoed",
        "blocked",
        "explicit assumption",
    ] {
        assert!(
            cont.contains(needle),
            "continue_workflow description lacks {needle:?}"
        );
    }
    let start = by_name(ToolName::StartWorkflow);
    for needle in ["256 KiB", "not echoed", "JSON object"] {
        assert!(
            start.contains(needle),
            "start_workflow description lacks {needle:?}"
        );
    }
    assert!(by_name(ToolName::CheckpointWorkflow).contains("4096"));
}

/// A backend that is never called (the registry tests only list tools).
struct NoBackend;

impl ToolBackend for NoBackend {
    fn list_workflows(&self, _: ListWorkflowsInput) -> Result<ListWorkflowsOutput, ErrorEnvelope> {
        unreachable!()
    }
    fn inspect_workflow(
        &self,
        _: InspectWorkflowInput,
    ) -> Result<InspectWorkflowOutput, ErrorEnvelope> {
        unreachable!()
    }
    fn start_workflow(&self, _: StartWorkflowInput) -> Result<ExecutionOutput, ErrorEnvelope> {
        unreachable!()
    }
    fn continue_workflow(
        &self,
        _: ContinueWorkflowInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope> {
        unreachable!()
    }
    fn checkpoint_workflow(
        &self,
        _: CheckpointWorkflowInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope> {
        unreachable!()
    }
    fn resume_session(&self, _: ResumeSessionInput) -> Result<ResumeSessionOutput, ErrorEnvelope> {
        unreachable!()
    }
    fn start_session(
        &self,
        _: workrail_spec::tools::StartSessionInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope> {
        unreachable!()
    }
    fn render_execution(&self, _: &ExecutionOutput) -> String {
        unreachable!()
    }
}

//! The MCP server's argument validation and error mapping, in process, against a fake backend.
//!
//! Guards against: a bad argument becoming a JSON-RPC error, a panic or a vague message instead
//! of a `VALIDATION_ERROR` tool result naming the field and the fix; backend errors losing their
//! envelope on the way out; execution responses that are not text-first (rendered text in
//! `content[0].text`, the output JSON in `structuredContent`); a handler panic escaping the
//! boundary; and any input (arbitrary JSON, for every tool) crashing the server. The last part
//! drives the real rmcp server over an in-memory duplex pipe (JSON-RPC lines), including the
//! tool-call path and a clean stop on EOF.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use workrail::mcp::dispatch::{ToolOutcome, call_tool};
use workrail::mcp::{ToolBackend, WorkrailServer};
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::tools::{
    CheckpointWorkflowInput, ContinueWorkflowInput, ExecutionOutput, InspectWorkflowInput,
    InspectWorkflowOutput, ListWorkflowsInput, ListWorkflowsOutput, ResumeSessionInput,
    ResumeSessionOutput, StartWorkflowInput, TOOL_NAMES,
};

// ---------------------------------------------------------------------------------------------
// The fake backend
// ---------------------------------------------------------------------------------------------

const HASH: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000000";

fn summary() -> Value {
    json!({
        "workflowId": "wr.demo",
        "name": "Demo",
        "description": "A demo workflow.",
        "kind": "workflow",
        "idStatus": "namespaced",
        "sourceKind": "bundled",
    })
}

fn execution(state: &str) -> ExecutionOutput {
    serde_json::from_value(json!({
        "kind": "ok",
        "stateToken": state,
        "ackToken": "ack.fake",
        "checkpointToken": "chk.fake",
        "pending": {"stepId": "triage", "title": "Triage", "prompt": "Do the triage.", "requireConfirmation": false},
        "isComplete": false,
        "nextIntent": "perform_pending_then_continue",
        "session": {"sessionId": "sess_abc", "runId": "run_abc"},
        "run": {"workflowId": "wr.demo", "label": "Demo run", "status": "in_progress"},
        "preferences": {"autonomy": "guided", "riskPolicy": "conservative"},
    }))
    .unwrap()
}

fn bad_signature() -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::TokenBadSignature,
        "continue_workflow: `stateToken` has a bad signature.",
        "Use the stateToken exactly as the latest response returned it.",
        Retry::NotRetryable,
    )
    .with_details(json!({"field": "stateToken"}))
}

/// Records each call; `stateToken: "tampered"` fails, `workflowId: "wr.panic"` panics.
#[derive(Default)]
struct Fake {
    calls: Mutex<Vec<String>>,
}

impl Fake {
    fn record(&self, what: &str) {
        self.calls.lock().unwrap().push(what.to_owned());
    }
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl ToolBackend for Fake {
    /// Every flagged tool on, so the fake serves the whole tool set.
    fn features(&self) -> workrail::features::Features {
        let mut all = workrail::features::FeatureOverrides::default();
        for feature in workrail::features::Feature::ALL {
            all.set(feature, true);
        }
        workrail::features::Features::default().with(&all)
    }
    fn list_workflows(&self, _: ListWorkflowsInput) -> Result<ListWorkflowsOutput, ErrorEnvelope> {
        self.record("list_workflows");
        Ok(serde_json::from_value(json!({"workflows": [summary()]})).unwrap())
    }
    fn inspect_workflow(
        &self,
        input: InspectWorkflowInput,
    ) -> Result<InspectWorkflowOutput, ErrorEnvelope> {
        self.record("inspect_workflow");
        if input.workflow_id != "wr.demo" {
            return Err(ErrorEnvelope::new(
                ErrorCode::WorkflowNotFound,
                format!("no workflow `{}`", input.workflow_id),
                "Call list_workflows for the valid ids.",
                Retry::NotRetryable,
            ));
        }
        Ok(serde_json::from_value(json!({
            "workflow": summary(),
            "workflowHash": HASH,
            "steps": [{"stepId": "triage", "title": "Triage", "prompt": "Do the triage."}],
        }))
        .unwrap())
    }
    fn start_workflow(&self, input: StartWorkflowInput) -> Result<ExecutionOutput, ErrorEnvelope> {
        self.record("start_workflow");
        if input.workflow_id == "wr.panic" {
            panic!("fake backend panic");
        }
        Ok(execution("st.fake"))
    }
    fn continue_workflow(
        &self,
        input: ContinueWorkflowInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope> {
        self.record("continue_workflow");
        let token = input.state_token.unwrap_or_default();
        if token == "tampered" {
            return Err(bad_signature());
        }
        Ok(execution(&token))
    }
    fn checkpoint_workflow(
        &self,
        input: CheckpointWorkflowInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope> {
        self.record("checkpoint_workflow");
        Ok(execution(&input.state_token))
    }
    fn start_session(
        &self,
        _: workrail_spec::tools::StartSessionInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope> {
        self.record("start_session");
        Ok(execution("st.session"))
    }
    fn resume_session(&self, _: ResumeSessionInput) -> Result<ResumeSessionOutput, ErrorEnvelope> {
        self.record("resume_session");
        Ok(ResumeSessionOutput {
            candidates: Vec::new(),
            skipped_unhealthy_sessions: 0,
            skipped_sessions: Vec::new(),
        })
    }
    fn render_execution(&self, output: &ExecutionOutput) -> String {
        format!("RENDERED {}", output.state_token)
    }
}

fn call(fake: &Fake, tool: &str, args: Value) -> ToolOutcome {
    call_tool(fake, tool, Some(args))
}

fn envelope(outcome: &ToolOutcome) -> ErrorEnvelope {
    assert!(
        outcome.is_error,
        "expected an error result, got {outcome:?}"
    );
    serde_json::from_value(outcome.structured.clone())
        .unwrap_or_else(|e| panic!("structuredContent is not an ErrorEnvelope ({e}): {outcome:?}"))
}

// ---------------------------------------------------------------------------------------------
// Argument validation
// ---------------------------------------------------------------------------------------------

/// lock: L-ERR-ENVELOPE, L-ERR-SELF-CORRECTING, L-ERR-NO-PANIC
#[test]
fn bad_arguments_are_validation_errors_naming_the_field() {
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        ("start_workflow", json!({}), "workflowId", "missing_field"),
        (
            "start_workflow",
            json!({"workflowId": "wr.demo", "bogus": 1}),
            "bogus",
            "unknown_field",
        ),
        (
            "start_workflow",
            json!({"workflowId": 7}),
            "workflowId",
            "invalid_value",
        ),
        (
            "start_workflow",
            json!({"workflowId": "wr.demo", "context": "text"}),
            "context",
            "invalid_value",
        ),
        (
            "start_workflow",
            json!({"workflowId": "wr.demo", "preferences": [{"key": "autonomy", "value": "yolo"}]}),
            "preferences[0].value",
            "invalid_value",
        ),
        (
            "continue_workflow",
            json!({"stateToken": 5}),
            "stateToken",
            "invalid_value",
        ),
        (
            "continue_workflow",
            json!({"stateToken": "st", "output": {"notes": "x"}}),
            "output.notes",
            "unknown_field",
        ),
        (
            "continue_workflow",
            json!({"stateToken": "st", "output": {"output": {}}}),
            "output.output",
            "unknown_field",
        ),
        (
            "continue_workflow",
            json!({"stateToken": "st", "ackToken": ["a"]}),
            "ackToken",
            "invalid_value",
        ),
        (
            "checkpoint_workflow",
            json!({"stateToken": "st", "checkpointToken": "chk"}),
            "output",
            "missing_field",
        ),
        (
            "inspect_workflow",
            json!({"workflowId": "wr.demo", "mode": "full"}),
            "mode",
            "invalid_value",
        ),
        (
            "list_workflows",
            json!({"verbose": true}),
            "verbose",
            "unknown_field",
        ),
        ("list_workflows", json!([1, 2]), "", "not_an_object"),
        ("continue_workflow", json!("st.v1.abc"), "", "not_an_object"),
    ];
    let fake = Fake::default();
    for (tool, args, field, problem) in cases {
        let outcome = call(&fake, tool, args.clone());
        let e = envelope(&outcome);
        assert_eq!(e.code, ErrorCode::ValidationError, "{tool} {args}");
        assert_eq!(e.retry, Retry::NotRetryable, "{tool} {args}");
        let details = e.details.clone().unwrap();
        assert_eq!(details["tool"], tool, "{tool} {args}");
        assert_eq!(details["field"], field, "{tool} {args}: {e:?}");
        assert_eq!(details["problem"], problem, "{tool} {args}: {e:?}");
        assert!(
            e.message.starts_with(tool),
            "{tool}: message names the tool: {}",
            e.message
        );
        if !field.is_empty() {
            assert!(
                e.message.contains(&format!("`{field}`")),
                "{tool}: message names the field: {}",
                e.message
            );
        }
        assert!(!e.suggestion.is_empty());
        // One paragraph of text with code, message and suggestion.
        assert!(
            outcome.text.contains("VALIDATION_ERROR"),
            "{}",
            outcome.text
        );
        assert!(outcome.text.contains(&e.suggestion), "{}", outcome.text);
        assert!(!outcome.text.contains("\n\n"), "{}", outcome.text);
    }
    assert!(
        fake.calls().is_empty(),
        "the backend saw invalid input: {:?}",
        fake.calls()
    );
}

/// lock: L-ERR-SELF-CORRECTING
#[test]
fn validation_suggestions_say_how_to_fix() {
    let fake = Fake::default();
    let e = envelope(&call(
        &fake,
        "start_workflow",
        json!({"workflowId": "wr.demo", "ctx": {}}),
    ));
    // The accepted arguments are listed, so the agent can correct a typo.
    for name in ["`workflowId`", "`context`", "`preferences`"] {
        assert!(e.suggestion.contains(name), "{}", e.suggestion);
    }
    let e = envelope(&call(&fake, "continue_workflow", json!({"ackToken": 7})));
    assert!(e.suggestion.contains("ackToken"), "{}", e.suggestion);
    assert!(e.suggestion.contains("exactly"), "{}", e.suggestion);
    // Absent arguments behave like `{}`.
    let outcome = call_tool(&fake, "list_workflows", None);
    assert!(!outcome.is_error, "{outcome:?}");
    let outcome = call_tool(&fake, "inspect_workflow", None);
    assert_eq!(envelope(&outcome).details.unwrap()["field"], "workflowId");
}

/// lock: L-MCP-TOOL-SET, L-ERR-NO-PANIC
#[test]
fn unknown_tools_are_error_results() {
    let fake = Fake::default();
    for name in [
        "get_session",
        "",
        "list_workflows ",
        "LIST_WORKFLOWS",
        &"x".repeat(10_000),
    ] {
        let outcome = call(&fake, name, json!({}));
        let e = envelope(&outcome);
        assert_eq!(e.code, ErrorCode::ValidationError);
        assert_eq!(e.details.as_ref().unwrap()["tools"], json!(TOOL_NAMES));
        assert!(e.message.len() < 300, "the echoed name is bounded");
    }
    assert!(fake.calls().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Success and backend errors
// ---------------------------------------------------------------------------------------------

/// lock: L-MCP-TEXT-FIRST
#[test]
fn execution_results_are_text_first_with_a_json_backbone() {
    let fake = Fake::default();
    let outcome = call(
        &fake,
        "start_workflow",
        json!({"workflowId": "wr.demo", "context": {"ticket": "A-1"}}),
    );
    assert!(!outcome.is_error);
    assert_eq!(outcome.text, "RENDERED st.fake");
    assert_eq!(
        outcome.structured,
        serde_json::to_value(execution("st.fake")).unwrap()
    );
    // The wire shape: content[0] is the text, structuredContent the JSON, isError false.
    let wire = serde_json::to_value(outcome.into_call_result()).unwrap();
    assert_eq!(wire["content"][0]["type"], "text");
    assert_eq!(wire["content"][0]["text"], "RENDERED st.fake");
    assert_eq!(wire["structuredContent"]["stateToken"], "st.fake");
    assert_eq!(wire["isError"], false);
    for tool in ["continue_workflow", "checkpoint_workflow"] {
        let args = json!({"stateToken": "st.2", "ackToken": "ack", "checkpointToken": "chk", "output": {"notesMarkdown": "done"}});
        let mut args = args.as_object().unwrap().clone();
        if tool == "continue_workflow" {
            args.remove("checkpointToken");
        } else {
            args.remove("ackToken");
        }
        let outcome = call(&fake, tool, Value::Object(args));
        assert!(!outcome.is_error, "{tool}: {outcome:?}");
        assert_eq!(outcome.text, "RENDERED st.2");
        assert_eq!(outcome.structured["stateToken"], "st.2");
    }
}

#[test]
fn discovery_results_render_deterministic_text() {
    let fake = Fake::default();
    let list = call(&fake, "list_workflows", json!({}));
    assert!(!list.is_error);
    assert_eq!(list.structured["workflows"][0]["workflowId"], "wr.demo");
    assert!(
        list.text.starts_with(
            "1 workflow available:\n- wr.demo — Demo (workflow, bundled): A demo workflow."
        ),
        "{}",
        list.text
    );
    assert_eq!(list, call(&fake, "list_workflows", json!({})));
    let inspect = call(
        &fake,
        "inspect_workflow",
        json!({"workflowId": "wr.demo", "mode": "preview"}),
    );
    assert!(!inspect.is_error);
    assert!(inspect.text.contains(HASH), "{}", inspect.text);
    assert!(
        inspect.text.contains("1. Triage [triage]\nDo the triage."),
        "{}",
        inspect.text
    );
}

/// lock: L-ERR-ENVELOPE, L-ERR-NO-PANIC
#[test]
fn backend_errors_keep_their_envelope() {
    let fake = Fake::default();
    let outcome = call(
        &fake,
        "continue_workflow",
        json!({"stateToken": "tampered", "ackToken": "ack"}),
    );
    assert_eq!(envelope(&outcome), bad_signature());
    assert!(
        outcome.text.contains("TOKEN_BAD_SIGNATURE"),
        "{}",
        outcome.text
    );
    assert!(outcome.text.contains("bad signature"), "{}", outcome.text);
    assert!(
        outcome.text.contains("exactly as the latest response"),
        "{}",
        outcome.text
    );
    let wire = serde_json::to_value(outcome.into_call_result()).unwrap();
    assert_eq!(wire["isError"], true);
    assert_eq!(wire["structuredContent"]["code"], "TOKEN_BAD_SIGNATURE");
    assert_eq!(wire["structuredContent"]["retry"]["kind"], "not_retryable");
    let e = envelope(&call(
        &fake,
        "inspect_workflow",
        json!({"workflowId": "wr.nope"}),
    ));
    assert_eq!(e.code, ErrorCode::WorkflowNotFound);
}

/// lock: L-ERR-NO-PANIC
#[test]
fn a_backend_panic_becomes_an_internal_error_result() {
    let fake = Fake::default();
    let outcome = call(&fake, "start_workflow", json!({"workflowId": "wr.panic"}));
    let e = envelope(&outcome);
    assert_eq!(e.code, ErrorCode::InternalError);
    assert!(e.message.contains("fake backend panic"), "{}", e.message);
    // The fake keeps working afterwards.
    assert!(!call(&fake, "list_workflows", json!({})).is_error);
}

// ---------------------------------------------------------------------------------------------
// No input crashes the server
// ---------------------------------------------------------------------------------------------

/// Cases per property when `WORKRAIL_PROPTEST_CASES` is not set.
const DEFAULT_CASES: u32 = 64;

fn config() -> ProptestConfig {
    let cases = match std::env::var("WORKRAIL_PROPTEST_CASES") {
        Ok(raw) => raw.trim().parse::<u32>().unwrap_or_else(|_| {
            panic!("WORKRAIL_PROPTEST_CASES must be an unsigned 32-bit integer, got {raw:?}")
        }),
        Err(_) => DEFAULT_CASES,
    };
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Field names the tools know, so generated objects often reach the nested types.
const KNOWN_KEYS: [&str; 12] = [
    "workflowId",
    "mode",
    "context",
    "preferences",
    "stateToken",
    "ackToken",
    "checkpointToken",
    "output",
    "notesMarkdown",
    "artifacts",
    "key",
    "value",
];

fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(KNOWN_KEYS.to_vec()).prop_map(str::to_owned),
        1 => "[a-zA-Z_]{0,8}",
        1 => any::<String>(),
    ]
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        proptest::sample::select(vec![
            "wr.demo", "metadata", "preview", "autonomy", "guided", "tampered", "wr.panic"
        ])
        .prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            proptest::collection::btree_map(arb_key(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

proptest! {
    #![proptest_config(config())]

    /// Any JSON as the arguments of any tool yields a well-formed tool result: an error result
    /// carries a valid envelope (never INTERNAL_ERROR from a crash), a success carries an
    /// object. A panic here fails the property.
    /// lock: L-ERR-NO-PANIC, L-ERR-ENVELOPE
    #[test]
    fn arbitrary_arguments_never_crash(tool in proptest::sample::select(TOOL_NAMES.to_vec()), args in arb_json()) {
        let fake = Fake::default();
        // "wr.panic" may legitimately reach the panicking fake; everything else must not.
        let may_panic = args.to_string().contains("wr.panic");
        let outcome = call_tool(&fake, tool, Some(args));
        if outcome.is_error {
            let e: ErrorEnvelope = serde_json::from_value(outcome.structured.clone())
                .map_err(|err| TestCaseError::fail(format!("not an envelope ({err}): {outcome:?}")))?;
            prop_assert!(may_panic || e.code != ErrorCode::InternalError, "{:?}", e);
            prop_assert!(!e.message.is_empty() && !e.suggestion.is_empty());
            prop_assert!(outcome.text.contains(e.code.as_str()));
        } else {
            prop_assert!(outcome.structured.is_object());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Through rmcp, in memory
// ---------------------------------------------------------------------------------------------

/// Sends JSON-RPC lines to the real rmcp server over a duplex pipe; returns the responses by id.
async fn converse(lines: Vec<Value>) -> Vec<Value> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let (client, server_io) = tokio::io::duplex(1 << 20);
    let (server_read, server_write) = tokio::io::split(server_io);
    let server = WorkrailServer::new(Arc::new(Fake::default()));
    let serving = tokio::spawn(async move {
        use rmcp::ServiceExt;
        match server.serve((server_read, server_write)).await {
            Ok(running) => running
                .waiting()
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    });
    let (client_read, mut client_write) = tokio::io::split(client);
    let expected = lines.iter().filter(|l| l.get("id").is_some()).count();
    for line in &lines {
        let mut text = serde_json::to_string(line).unwrap();
        text.push('\n');
        client_write.write_all(text.as_bytes()).await.unwrap();
    }
    let mut reader = BufReader::new(client_read).lines();
    let mut responses = Vec::new();
    while responses.len() < expected {
        let line = tokio::time::timeout(std::time::Duration::from_secs(20), reader.next_line())
            .await
            .expect("server response timed out")
            .unwrap()
            .expect("server closed the pipe early");
        let value: Value = serde_json::from_str(&line).unwrap();
        if value.get("id").is_some() {
            responses.push(value);
        }
    }
    // EOF (the client end of the pipe closes): the server stops cleanly.
    drop(client_write);
    drop(reader);
    tokio::time::timeout(std::time::Duration::from_secs(20), serving)
        .await
        .expect("server did not stop on EOF")
        .unwrap()
        .unwrap();
    responses.sort_by_key(|r| r["id"].as_i64().unwrap_or(-1));
    responses
}

fn initialize() -> Vec<Value> {
    vec![
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "mcp_server-test", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ]
}

/// lock: L-MCP-TOOL-SET, L-MCP-TEXT-FIRST, L-ERR-NO-PANIC
#[test]
fn rmcp_server_lists_tools_and_maps_calls_to_tool_results() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut lines = initialize();
    lines.extend([
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "start_workflow", "arguments": {"workflowId": "wr.demo"}}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "start_workflow", "arguments": {"workflowId": 12}}}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "continue_workflow", "arguments": {"stateToken": "tampered"}}}),
        json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "start_workflow", "arguments": {"workflowId": "wr.panic"}}}),
        json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "no_such_tool"}}),
    ]);
    let responses = runtime.block_on(converse(lines));
    assert_eq!(responses.len(), 7, "{responses:#?}");
    assert_eq!(responses[0]["result"]["serverInfo"]["name"], "workrail");
    assert!(responses[0]["result"]["capabilities"]["tools"].is_object());
    let tools = responses[1]["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, TOOL_NAMES.to_vec());
    for tool in tools {
        assert!(tool["title"].is_string() && tool["description"].is_string());
        assert_eq!(tool["inputSchema"]["type"], "object");
        assert_eq!(tool["outputSchema"]["type"], "object");
    }
    let ok = &responses[2]["result"];
    assert_eq!(ok["isError"], false, "{ok}");
    assert_eq!(ok["content"][0]["text"], "RENDERED st.fake");
    assert_eq!(ok["structuredContent"]["stateToken"], "st.fake");
    for (i, code) in [
        (3, "VALIDATION_ERROR"),
        (4, "TOKEN_BAD_SIGNATURE"),
        (5, "INTERNAL_ERROR"),
        (6, "VALIDATION_ERROR"),
    ] {
        let r = &responses[i];
        assert!(
            r.get("error").is_none(),
            "id {i} became a JSON-RPC error: {r}"
        );
        assert_eq!(r["result"]["isError"], true, "{r}");
        assert_eq!(r["result"]["structuredContent"]["code"], code, "{r}");
    }
}

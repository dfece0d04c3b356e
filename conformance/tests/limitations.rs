//! Capabilities a server lacks are declared in its surface file and excuse the scenarios that
//! need them (SKIP with the declared reason, every lock N/A) instead of failing them; a declared
//! injected first step is acknowledged by the runner right after `start_workflow`. Guards
//! against a server being failed for what it openly does not offer (TS WorkRail's missing
//! autonomy modes and export tools, its injected intent step, its tag-only discovery).
//!
//! The scenarios are written by the test into a temporary fixture root and run against the
//! reference server `<workspace>/target/debug/workrail mcp` (built here first); the surface
//! declares `one`, the first step of `conformance.linear`, as an injected step.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::workspace;

use serde_json::{Value, json};

fn scenario(name: &str, lock: &str, steps: Value) -> Value {
    json!({"name": name, "description": "probe", "lockIds": [lock], "profile": "core", "steps": steps})
}

fn start(extra: Value) -> Value {
    let mut step = json!({"do": "call", "tool": "start_workflow",
        "args": {"workflowId": "conformance.linear"}, "save": "s0", "expect": "ok"});
    step.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    step
}

#[test]
fn declared_limitations_excuse_scenarios_and_the_injected_step_is_passed() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("scenarios");
    std::fs::create_dir_all(&dir).unwrap();
    let scenarios = [
        // Runs: the start answer is the one past the injected step `one`.
        scenario(
            "past_injected",
            "L-MCP-EXECUTION-RESPONSE",
            json!([start(json!({})),
                {"do": "same", "what": "the workflow's step after the injected one",
                 "a": "${s0.pending.stepId}", "b": "two", "lock": ["L-MCP-EXECUTION-RESPONSE"]},
                {"do": "call", "tool": "continue_workflow",
                 "args": {"stateToken": "${s0.stateToken}", "ackToken": "${s0.ackToken}"},
                 "save": "a1", "expect": "ok"},
                {"do": "same", "what": "next", "a": "${a1.pending.stepId}", "b": "three",
                 "lock": ["L-MCP-EXECUTION-RESPONSE"]}]),
        ),
        scenario(
            "needs_autonomy",
            "L-MCP-EXECUTION-RESPONSE",
            json!([start(json!({"autonomy": "guided"}))]),
        ),
        scenario(
            "needs_discovery",
            "L-MCP-EXECUTION-RESPONSE",
            json!([{"do": "call", "tool": "list_workflows", "args": {}, "expect": "ok"}]),
        ),
        scenario(
            "counts_history",
            "L-EVENT-CLOSED-KINDS",
            json!([start(json!({})), {"do": "storeEvents", "save": "ev"},
                {"do": "events", "events": "ev", "match": {"kind": "advance_recorded"},
                 "atLeast": 0, "atMost": 0, "what": "no advance", "lock": ["L-EVENT-CLOSED-KINDS"]}]),
        ),
    ];
    for s in &scenarios {
        let name = s["name"].as_str().unwrap();
        std::fs::write(dir.join(format!("{name}.json")), s.to_string()).unwrap();
    }
    let surface = root.path().join("surface.json");
    std::fs::write(
        &surface,
        json!({
            "workflowsDir": workspace().join("fixtures/conformance/workflows"),
            "env": {"WORKRAIL_LOG": "warn"},
            "limitations": [
                {"kind": "autonomyNotSelectable", "reason": "modes are fixed per server"},
                {"kind": "discoveryNeedsTag", "reason": "list_workflows takes a tag"},
                {"kind": "injectsFirstStep", "stepId": "one", "ackArgs": {"output": {"notesMarkdown": "intent noted"}},
                 "reason": "an intent step comes first"}
            ]
        })
        .to_string(),
    )
    .unwrap();
    let (stdout, report) = common::run_suite(root.path(), &surface);
    assert!(
        stdout.ends_with("1 passed, 0 failed, 3 skipped\n"),
        "{stdout}"
    );
    let result = |name: &str| {
        report["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap()
            .clone()
    };
    assert_eq!(result("past_injected")["status"], "pass", "{stdout}");
    for (name, words) in [
        (
            "needs_autonomy",
            "cannot select an autonomy mode: modes are fixed per server",
        ),
        (
            "needs_discovery",
            "discovery needs a tag: list_workflows takes a tag",
        ),
        ("counts_history", "injects a first step (one)"),
    ] {
        let r = result(name);
        assert_eq!(r["status"], "skip", "{name}: {stdout}");
        let reason = r["reason"].as_str().unwrap();
        assert!(
            reason.starts_with("declared by the surface file: "),
            "{reason}"
        );
        assert!(reason.contains(words), "{name}: {reason}");
        assert!(
            r["locks"].as_object().unwrap().values().all(|v| v == "n/a"),
            "{name}: {r}"
        );
    }
}

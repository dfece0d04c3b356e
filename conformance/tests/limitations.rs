//! Capabilities a server lacks are declared in its surface file and excuse the steps that need
//! them, not whole scenarios (decision D166): such a step is n/a (never pass, never fail), and
//! so are the steps depending on it, while the rest of the scenario runs and is judged. A
//! declared injected first step is acknowledged by the runner right after `start_workflow`.
//! Guards against a server being failed for what it openly does not offer (TS WorkRail's
//! missing autonomy modes, its injected intent step, its tag-only discovery), and against a
//! declaration hiding what the server can be judged on.
//!
//! The scenarios are written by the test into a temporary fixture root and run against the
//! reference server `<workspace>/target/debug/workrail mcp` (built here first); the surface
//! declares `one`, the first step of `conformance.linear`, as an injected step, and guided as the
//! one autonomy mode.

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

/// decision: D166
#[test]
fn declared_limitations_excuse_steps_and_the_rest_of_the_scenario_runs() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("scenarios");
    std::fs::create_dir_all(&dir).unwrap();
    let mode = |m: &str, save: &str| {
        json!({"needs": ["modeSelection"], "do": "call", "tool": "start_workflow",
            "args": {"workflowId": "conformance.linear"}, "autonomy": m, "save": save, "expect": "ok"})
    };
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
        // The server's one mode runs (nothing is selected); another mode is n/a, and so is the
        // step reading what it would have saved; the lock only that part checks is n/a.
        json!({"name": "modes", "description": "probe", "profile": "core",
            "lockIds": ["L-MCP-EXECUTION-RESPONSE", "L-REASON-NEVER-STOP"],
            "steps": [
                mode("guided", "g0"),
                {"do": "same", "what": "guided runs", "a": "${g0.pending.stepId}", "b": "two",
                 "lock": ["L-MCP-EXECUTION-RESPONSE"]},
                mode("full_auto_never_stop", "n0"),
                {"do": "same", "what": "never-stop ran", "a": "${n0.pending.stepId}", "b": "two",
                 "lock": ["L-REASON-NEVER-STOP"]}]}),
        // Nothing else to judge: skipped after running, its lock n/a.
        scenario(
            "needs_discovery",
            "L-NS-DISCOVERY-FIELDS",
            json!([{"needs": ["untaggedDiscovery"], "do": "call", "tool": "list_workflows",
                "args": {}, "save": "l", "expect": "ok"},
                {"do": "discovery", "result": "l", "includes": [], "lock": ["L-NS-DISCOVERY-FIELDS"]}]),
        ),
        // The count over a whole kind is n/a; the read of the store still judges.
        scenario(
            "counts_history",
            "L-EVENT-CLOSED-KINDS",
            json!([start(json!({})), {"do": "storeEvents", "save": "ev"},
                {"needs": ["exactHistory"], "do": "events", "events": "ev", "match": {"kind": "advance_recorded"},
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
                {"kind": "autonomyNotSelectable", "defaultMode": "guided", "reason": "modes are fixed per server"},
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
        stdout.ends_with("3 passed, 0 failed, 1 skipped\n"),
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
    let na_steps = |name: &str| -> Vec<(u64, String)> {
        result(name)["notApplicableSteps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|u| {
                (
                    u["step"].as_u64().unwrap(),
                    u["reason"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    assert_eq!(result("past_injected")["status"], "pass", "{stdout}");

    let modes = result("modes");
    assert_eq!(modes["status"], "pass", "{stdout}");
    assert_eq!(modes["locks"]["L-MCP-EXECUTION-RESPONSE"], "pass");
    assert_eq!(modes["locks"]["L-REASON-NEVER-STOP"], "n/a", "{modes}");
    let na = na_steps("modes");
    assert_eq!(
        na.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
        [3, 4],
        "{na:?}"
    );
    assert!(
        na[0].1.starts_with(
            "declared by the surface file: needs autonomy mode `full_auto_never_stop`"
        ) && na[0].1.contains("runs every session in `guided`")
            && na[0].1.ends_with("modes are fixed per server"),
        "{na:?}"
    );
    assert!(na[1].1.contains("step 3 (n/a on this server)"), "{na:?}");
    assert!(modes["failures"].as_array().unwrap().is_empty());
    assert!(modes["notReached"].as_array().unwrap().is_empty());

    let discovery = result("needs_discovery");
    assert_eq!(discovery["status"], "skip", "{stdout}");
    let reason = discovery["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("none of its locks could be judged on this server (step 1 n/a: ")
            && reason.contains("discovery needs a tag: list_workflows takes a tag"),
        "{reason}"
    );
    assert_eq!(discovery["locks"]["L-NS-DISCOVERY-FIELDS"], "n/a");

    let counts = result("counts_history");
    assert_eq!(counts["status"], "pass", "{stdout}");
    assert_eq!(counts["locks"]["L-EVENT-CLOSED-KINDS"], "pass");
    let na = na_steps("counts_history");
    assert_eq!(na.len(), 1, "{na:?}");
    assert_eq!(na[0].0, 3);
    assert!(na[0].1.contains("injects a first step (one)"), "{na:?}");
}

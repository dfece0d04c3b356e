//! A server whose tokens are opaque (`tokenFormat: opaque` in its surface file) is judged on
//! everything that does not need to decode a token: the token-format locks are N/A and say so,
//! `$tamperSignature` changes one character, steps that decode a token are skipped with the
//! reason, the steps that read what they would have saved are not reached, and the scenario
//! goes on. A lock such a step checks is not reached, never passed (decision D158).
//! Guards against a single-token server losing every scenario at its first token check, as
//! TS WorkRail did before the suite had this mode.
//!
//! The scenario is written by the test into a temporary fixture root and run against the
//! reference server `<workspace>/target/debug/workrail mcp` (built here first), whose tokens
//! the opaque surface treats as opaque strings.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::workspace;

use serde_json::{Value, json};

/// Step 2 decodes a token and saves `run` (skipped); step 3 reads `run` (not reached); step 4
/// changes a token's version (skipped). Step 5 tampers a token (one character in opaque mode)
/// and runs; steps 6 and 7 advance and check the step.
fn scenario() -> Value {
    json!({
        "name": "opaque_mixed",
        "description": "Steps that decode a token beside steps that do not.",
        "lockIds": [
            "L-TOKEN-SCOPED", "L-VERSION-UNKNOWN-FAILS-FAST", "L-TOKEN-HMAC",
            "L-TOKEN-ACK-IDEMPOTENT", "L-MCP-EXECUTION-RESPONSE"
        ],
        "profile": "core",
        "steps": [
            {"do": "call", "tool": "start_workflow", "args": {"workflowId": "conformance.linear"},
             "save": "s0", "expect": "ok"},
            {"do": "let", "name": "run", "value": {"$tokenField": ["${s0.stateToken}", "runId"]}},
            {"do": "differ", "what": "a run id", "a": "${run}", "b": "", "lock": ["L-TOKEN-SCOPED"]},
            {"do": "call", "tool": "continue_workflow",
             "args": {"stateToken": {"$withTokenVersion": ["${s0.stateToken}", "v2"]}},
             "expect": "error", "code": ["TOKEN_UNSUPPORTED_VERSION"],
             "lock": ["L-VERSION-UNKNOWN-FAILS-FAST"]},
            {"do": "call", "tool": "continue_workflow",
             "args": {"stateToken": {"$tamperSignature": "${s0.stateToken}"}},
             "expect": "error", "code": ["TOKEN_BAD_SIGNATURE", "TOKEN_INVALID_FORMAT"],
             "lock": ["L-TOKEN-HMAC"]},
            {"do": "call", "tool": "continue_workflow",
             "args": {"stateToken": "${s0.stateToken}", "ackToken": "${s0.ackToken}"},
             "save": "a1", "expect": "ok"},
            {"do": "same", "what": "pending step after the ack", "a": "${a1.pending.stepId}",
             "b": "two", "lock": ["L-TOKEN-ACK-IDEMPOTENT"]}
        ]
    })
}

/// Every check of this scenario decodes a token: nothing it checks applies.
fn all_decoding() -> Value {
    json!({
        "name": "opaque_all_decoding",
        "description": "Every check decodes a token.",
        "lockIds": ["L-HASH-PIN-AT-START"],
        "profile": "core",
        "steps": [
            {"do": "call", "tool": "start_workflow", "args": {"workflowId": "conformance.linear"},
             "save": "s0", "expect": "ok"},
            {"do": "same", "what": "the pinned hash",
             "a": {"$tokenField": ["${s0.stateToken}", "workflowHash"]},
             "b": {"$tokenField": ["${s0.ackToken}", "workflowHash"]},
             "lock": ["L-HASH-PIN-AT-START"]}
        ]
    })
}

/// decision: D158, D159
#[test]
fn opaque_tokens_skip_decoding_steps_and_judge_the_rest() {
    let root = tempfile::tempdir().unwrap();
    let scenarios = root.path().join("scenarios");
    std::fs::create_dir_all(&scenarios).unwrap();
    for s in [scenario(), all_decoding()] {
        let name = s["name"].as_str().unwrap().to_owned();
        std::fs::write(
            scenarios.join(format!("{name}.json")),
            serde_json::to_string_pretty(&s).unwrap(),
        )
        .unwrap();
    }
    // Fixture workflows from the surface's workflowsDir (relative to the surface file).
    let surface = root.path().join("surface.json");
    let workflows = workspace().join("fixtures/conformance/workflows");
    std::fs::write(
        &surface,
        serde_json::to_string(&json!({
            "tokenFormat": "opaque",
            "workflowsDir": workflows,
            "env": {"WORKRAIL_LOG": "warn"}
        }))
        .unwrap(),
    )
    .unwrap();
    let (stdout, report) = common::run_suite(root.path(), &surface);
    assert!(
        stdout.ends_with("1 passed, 0 failed, 1 skipped\n"),
        "{stdout}"
    );
    let results = report["results"].as_array().unwrap();
    // Nothing the second scenario checks could be judged: skipped, with why, not passed; its
    // lock is not reached (the server has a pinned hash; the suite could not read it).
    let all = results
        .iter()
        .find(|r| r["name"] == "opaque_all_decoding")
        .unwrap();
    assert_eq!(all["status"], "skip", "{stdout}");
    let why = all["reason"].as_str().unwrap();
    assert!(
        why.starts_with("none of its locks could be judged on this server (step 2 skipped: needs a decodable token ($tokenField)"),
        "{why}"
    );
    assert_eq!(all["locks"]["L-HASH-PIN-AT-START"], "not_reached");
    let r = results
        .iter()
        .find(|r| r["name"] == "opaque_mixed")
        .unwrap();
    assert_eq!(r["status"], "pass", "{stdout}");
    let skipped: Vec<(u64, &str)> = r["skippedSteps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["step"].as_u64().unwrap(), u["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        skipped.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        [2, 4],
        "{stdout}"
    );
    assert!(skipped[0].1.contains("$tokenField"), "{skipped:?}");
    assert!(skipped[1].1.contains("$withTokenVersion"), "{skipped:?}");
    // The step that reads what a skipped step would have saved is not reached.
    let unreached: Vec<(u64, &str)> = r["notReached"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| (u["step"].as_u64().unwrap(), u["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        unreached,
        [(3, "uses `run`, which step 2 (skipped) did not save")],
        "{stdout}"
    );
    let locks = &r["locks"];
    // A skipped step's lock is not reached; the token-format locks stay n/a (the surface
    // declares the tokens opaque), even the one step 3 names itself.
    assert_eq!(locks["L-VERSION-UNKNOWN-FAILS-FAST"], "not_reached");
    assert_eq!(locks["L-TOKEN-SCOPED"], "n/a");
    assert_eq!(locks["L-TOKEN-FORMAT"], "n/a");
    assert_eq!(locks["L-TOKEN-PAYLOAD-FIELDS"], "n/a");
    assert_eq!(locks["L-TOKEN-HMAC"], "pass");
    assert_eq!(locks["L-TOKEN-ACK-IDEMPOTENT"], "pass");
    assert_eq!(locks["L-MCP-EXECUTION-RESPONSE"], "pass");
    let na = &r["notApplicable"];
    assert!(
        na["L-TOKEN-FORMAT"]
            .as_str()
            .unwrap()
            .contains("opaque tokens"),
        "{na}"
    );
    assert!(na.get("L-VERSION-UNKNOWN-FAILS-FAST").is_none(), "{na}");
    // The console says so too.
    assert!(
        stdout.contains("step 2 (let run): skipped: needs a decodable token"),
        "{stdout}"
    );
    assert!(
        stdout.contains("n/a L-TOKEN-FORMAT, L-TOKEN-PAYLOAD-FIELDS"),
        "{stdout}"
    );
}

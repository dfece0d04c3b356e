//! A scenario stops only where it must: after a failed step the runner still runs every step
//! that does not use what the failed step saved, and reports each lock as pass, fail, not
//! reached or n/a. Guards against one early failure hiding every later verdict (a server that
//! refused one start used to lose the whole scenario), and against a runner that goes on with
//! values that were never produced.
//!
//! The scenarios are written by the test into a temporary fixture root and run against the
//! reference server `<workspace>/target/debug/workrail mcp`, built here first.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{server, workspace};

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::{Value, json};

/// A fixture root holding `scenarios` and a copy of the conformance fixture workflows.
fn fixture_root(scenarios: &[Value]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("scenarios");
    std::fs::create_dir_all(&dir).unwrap();
    for s in scenarios {
        let name = s["name"].as_str().unwrap();
        std::fs::write(
            dir.join(format!("{name}.json")),
            serde_json::to_string_pretty(s).unwrap(),
        )
        .unwrap();
    }
    let workflows = root.path().join("workflows");
    std::fs::create_dir_all(&workflows).unwrap();
    for entry in std::fs::read_dir(workspace().join("fixtures/conformance/workflows")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, workflows.join(path.file_name().unwrap())).unwrap();
    }
    root
}

struct Run {
    exit_ok: bool,
    stdout: String,
    report: Value,
}

impl Run {
    fn result(&self, name: &str) -> &Value {
        self.report["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no result for {name}:\n{}", self.stdout))
    }

    fn lock_verdicts(&self, name: &str) -> BTreeMap<String, String> {
        self.result(name)["locks"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
            .collect()
    }

    /// The steps numbers of a result's failures / not-reached steps.
    fn steps(&self, name: &str, field: &str) -> Vec<u64> {
        self.result(name)[field]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["step"].as_u64().unwrap())
            .collect()
    }
}

fn run_suite(fixtures: &Path) -> Run {
    run_suite_with(fixtures, &[])
}

fn run_suite_with(fixtures: &Path, extra: &[&str]) -> Run {
    let server = format!("{} mcp", server().display());
    let json = fixtures.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_workrail-conformance"))
        .args(["--server", &server, "--fixtures"])
        .arg(fixtures)
        .args(extra)
        .arg("--json")
        .arg(&json)
        .current_dir(workspace())
        .output()
        .expect("the suite runs");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let report = serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}); stdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    }))
    .unwrap();
    Run {
        exit_ok: out.status.success(),
        stdout,
        report,
    }
}

/// Step 1 fails (the workflow does not exist) and saves `s0`; steps 3 and 4 use `s0`
/// (directly, then through `a0`) and are not reached; steps 2, 5 and 6 use only `s1` and run;
/// step 7 is a failing check that saves nothing, so step 8 after it still runs; step 9 cannot
/// evaluate its expression, and step 10, which does not use its result, still runs.
fn mixed() -> Value {
    json!({
        "name": "partial_mixed",
        "description": "A failing start, steps that use it and steps that do not.",
        "lockIds": [
            "L-TOKEN-ERRORS", "L-TOKEN-ACK-IDEMPOTENT", "L-TOKEN-REPLAY-FACTS",
            "L-TOKEN-ADVANCE-ONLY-PATH", "L-TOKEN-HMAC", "L-TOKEN-REHYDRATE-PURE",
            "L-EVENT-CLOSED-KINDS", "L-MCP-EXECUTION-RESPONSE"
        ],
        "profile": "core",
        "steps": [
            {"do": "call", "tool": "start_workflow",
             "args": {"workflowId": "conformance.does_not_exist"},
             "save": "s0", "expect": "ok", "lock": ["L-TOKEN-ERRORS"]},
            {"do": "call", "tool": "start_workflow", "args": {"workflowId": "conformance.linear"},
             "save": "s1", "expect": "ok"},
            {"do": "call", "tool": "continue_workflow",
             "args": {"stateToken": "${s0.stateToken}", "ackToken": "${s0.ackToken}"},
             "save": "a0", "expect": "ok", "lock": ["L-TOKEN-ACK-IDEMPOTENT"]},
            {"do": "same", "a": "${a0.pending.stepId}", "b": "two", "what": "the next step",
             "lock": ["L-TOKEN-REPLAY-FACTS"]},
            {"do": "call", "tool": "continue_workflow",
             "args": {"stateToken": "${s1.stateToken}", "ackToken": "${s1.ackToken}"},
             "save": "a1", "expect": "ok", "lock": ["L-TOKEN-ADVANCE-ONLY-PATH"]},
            {"do": "differ", "a": "${s1.pending.stepId}", "b": "${a1.pending.stepId}",
             "what": "the ack advanced", "lock": ["L-TOKEN-ADVANCE-ONLY-PATH"]},
            {"do": "same", "a": "${s1.pending.stepId}", "b": "not-a-step",
             "what": "a deliberately wrong step id", "lock": ["L-TOKEN-HMAC"]},
            {"do": "storeEvents", "save": "ev"},
            {"do": "let", "name": "broken", "value": "${s1.noSuchField}"},
            {"do": "same", "a": "${broken}", "b": 1, "what": "uses the broken value",
             "lock": ["L-TOKEN-REHYDRATE-PURE"]},
            {"do": "storeInvariants", "events": "ev", "lock": ["L-EVENT-CLOSED-KINDS"]}
        ]
    })
}

fn optional() -> Value {
    json!({
        "name": "partial_optional",
        "description": "An optional-profile scenario: its locks are n/a when the profile is off.",
        "lockIds": ["L-MCP-TOOL-SET"],
        "profile": "workrail-rs",
        "steps": [
            {"do": "listTools", "save": "t"},
            {"do": "toolSet", "tools": "t", "required": ["start_workflow"],
             "optional": [], "lock": ["L-MCP-TOOL-SET"]}
        ]
    })
}

/// lock: L-TOKEN-ERRORS, L-TOKEN-ADVANCE-ONLY-PATH
#[test]
fn steps_that_do_not_use_a_failed_result_still_run() {
    let root = fixture_root(&[mixed(), optional()]);
    let run = run_suite(root.path());
    assert!(!run.exit_ok, "a failing scenario exits non-zero");
    assert_eq!(
        run.result("partial_mixed")["status"],
        "fail",
        "{}",
        run.stdout
    );

    // Failures: the start (step 1), the wrong check (step 7), the unevaluable let (step 9).
    assert_eq!(
        run.steps("partial_mixed", "failures"),
        vec![1, 7, 9],
        "{}",
        run.stdout
    );
    // Not reached: the two steps using s0 (3, 4) and the check using what the failed let would
    // have bound (10).
    assert_eq!(
        run.steps("partial_mixed", "notReached"),
        vec![3, 4, 10],
        "{}",
        run.stdout
    );
    let verdicts = run.lock_verdicts("partial_mixed");
    let expect = |id: &str, v: &str| {
        assert_eq!(
            verdicts.get(id).map(String::as_str),
            Some(v),
            "{id}:\n{}",
            run.stdout
        );
    };
    expect("L-TOKEN-ERRORS", "fail");
    expect("L-TOKEN-HMAC", "fail");
    expect("L-TOKEN-ACK-IDEMPOTENT", "not_reached");
    expect("L-TOKEN-REPLAY-FACTS", "not_reached");
    expect("L-TOKEN-REHYDRATE-PURE", "not_reached");
    // The response checks of every call: one call (step 3) never ran.
    expect("L-MCP-EXECUTION-RESPONSE", "not_reached");
    // Steps 5 and 6 ran on s1 after step 1 failed; step 11 after steps 7 and 9 failed.
    expect("L-TOKEN-ADVANCE-ONLY-PATH", "pass");
    expect("L-EVENT-CLOSED-KINDS", "pass");
    // The scenario read the store (step 8): the closed-set locks were judged too.
    expect("L-EVENT-NODE-CREATED", "pass");
    expect("L-EVENT-EDGE-CREATED", "pass");
    expect("L-EVENT-ADVANCE-RECORDED", "pass");
    expect("L-MANIFEST-CLOSED-KINDS", "pass");
    assert_eq!(verdicts.len(), 12, "{verdicts:?}");

    // The optional profile is off: skipped, its lock n/a.
    assert_eq!(run.result("partial_optional")["status"], "skip");
    assert_eq!(
        run.lock_verdicts("partial_optional"),
        BTreeMap::from([("L-MCP-TOOL-SET".to_owned(), "n/a".to_owned())])
    );

    // The run-wide lock table in the JSON report.
    let rows: BTreeMap<String, String> = run.report["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap().to_owned(),
                r["verdict"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(rows["L-TOKEN-ERRORS"], "fail");
    assert_eq!(rows["L-TOKEN-REPLAY-FACTS"], "not_reached");
    assert_eq!(rows["L-TOKEN-ADVANCE-ONLY-PATH"], "pass");
    assert_eq!(rows["L-MCP-TOOL-SET"], "n/a");

    // The text report: the reasons, the lock table, the closing line.
    for needle in [
        "step 3 (call continue_workflow): not reached: uses `s0`, which step 1 did not produce as expected",
        "step 4 (same: the next step): not reached: uses `a0`, which step 1 did not produce as expected",
        "step 10 (same: uses the broken value): not reached: uses `broken`, which step 9 did not produce as expected",
        "\nLocks:\n",
    ] {
        assert!(
            run.stdout.contains(needle),
            "missing {needle:?}:\n{}",
            run.stdout
        );
    }
    let table_line = |verdict: &str, id: &str| {
        run.stdout
            .lines()
            .any(|l| l.trim_start().starts_with(verdict) && l.contains(&format!(" {id} ")))
    };
    assert!(table_line("FAIL", "L-TOKEN-ERRORS"), "{}", run.stdout);
    assert!(
        table_line("NOT REACHED", "L-TOKEN-ACK-IDEMPOTENT"),
        "{}",
        run.stdout
    );
    assert!(
        table_line("PASS", "L-TOKEN-ADVANCE-ONLY-PATH"),
        "{}",
        run.stdout
    );
    assert!(table_line("N/A", "L-MCP-TOOL-SET"), "{}", run.stdout);
    assert!(
        run.stdout.ends_with("0 passed, 1 failed, 1 skipped\n"),
        "{}",
        run.stdout
    );
    assert_eq!(
        run.report["summary"]["line"],
        "0 passed, 1 failed, 1 skipped"
    );
}

/// Step 2 cannot apply to this server (it re-versions a token, and the surface declares the
/// tokens opaque): skipped. Step 4 would fail (no such event), but it checks what step 2 did
/// (`dependsOn`), so it is not reached; step 5 reads nothing step 2 touched and passes.
fn after_skipped() -> Value {
    json!({
        "name": "after_skipped",
        "description": "A store check that relies on a skipped call.",
        "lockIds": ["L-VERSION-UNKNOWN-FAILS-FAST", "L-EVENT-SCOPE-RULES", "L-MCP-EXECUTION-RESPONSE"],
        "profile": "core",
        "steps": [
            {"do": "call", "tool": "start_workflow", "args": {"workflowId": "conformance.linear"},
             "save": "s0", "expect": "ok"},
            {"do": "call", "tool": "continue_workflow",
             "args": {"stateToken": {"$withTokenVersion": ["${s0.stateToken}", "v2"]}},
             "save": "v", "expect": "error", "code": ["TOKEN_UNSUPPORTED_VERSION"],
             "lock": ["L-VERSION-UNKNOWN-FAILS-FAST"]},
            {"do": "storeEvents", "save": "ev"},
            {"do": "events", "events": "ev", "match": {"kind": "no_such_event"}, "what": "what step 2 left",
             "dependsOn": ["v"], "lock": ["L-EVENT-SCOPE-RULES"]},
            {"do": "same", "what": "first step", "a": "${s0.pending.stepId}", "b": "one",
             "lock": ["L-MCP-EXECUTION-RESPONSE"]}
        ]
    })
}

/// Step 2 fails (no such workflow). Step 3 would fail too, but it checks what step 2 did, so it
/// is not reached instead of failing a second time under a lock step 2 never exercised.
fn after_failed() -> Value {
    json!({
        "name": "after_failed",
        "description": "A check that relies on a failed call.",
        "lockIds": ["L-TOKEN-ADVANCE-ONLY-PATH", "L-MCP-EXECUTION-RESPONSE"],
        "profile": "core",
        "steps": [
            {"do": "call", "tool": "start_workflow", "args": {"workflowId": "conformance.linear"},
             "save": "s0", "expect": "ok"},
            {"do": "call", "tool": "start_workflow", "args": {"workflowId": "conformance.missing"},
             "save": "bad", "expect": "ok"},
            {"do": "same", "what": "what step 2 changed", "a": "${s0.pending.stepId}", "b": "not-one",
             "dependsOn": ["bad"], "lock": ["L-TOKEN-ADVANCE-ONLY-PATH"]},
            {"do": "same", "what": "first step", "a": "${s0.pending.stepId}", "b": "one",
             "lock": ["L-MCP-EXECUTION-RESPONSE"]}
        ]
    })
}

/// A step that depends on a skipped step, or on the effect of a failed one (`dependsOn`), is
/// not reached, never failed; a lock a skipped step checks is not reached, never passed.
/// lock: L-VERSION-UNKNOWN-FAILS-FAST, L-MCP-EXECUTION-RESPONSE
/// decision: D158, D159
#[test]
fn a_step_that_depends_on_a_skipped_or_failed_step_is_not_reached() {
    let root = fixture_root(&[after_skipped(), after_failed()]);
    let surface = root.path().join("opaque.json");
    std::fs::write(
        &surface,
        json!({"tokenFormat": "opaque",
               "workflowsDir": workspace().join("fixtures/conformance/workflows"),
               "env": {"WORKRAIL_LOG": "warn"}})
        .to_string(),
    )
    .unwrap();
    let run = run_suite_with(root.path(), &["--surface", surface.to_str().unwrap()]);

    let skipped = run.result("after_skipped");
    assert_eq!(skipped["status"], "pass", "{}", run.stdout);
    assert_eq!(run.steps("after_skipped", "failures"), Vec::<u64>::new());
    assert_eq!(run.steps("after_skipped", "skippedSteps"), vec![2]);
    assert_eq!(run.steps("after_skipped", "notReached"), vec![4]);
    assert_eq!(
        skipped["notReached"][0]["reason"],
        "depends on what step 2 (`v`) did, and that step was skipped"
    );
    let verdicts = run.lock_verdicts("after_skipped");
    assert_eq!(verdicts["L-VERSION-UNKNOWN-FAILS-FAST"], "not_reached");
    assert_eq!(verdicts["L-EVENT-SCOPE-RULES"], "not_reached");
    assert_eq!(verdicts["L-MCP-EXECUTION-RESPONSE"], "pass");

    let failed = run.result("after_failed");
    assert_eq!(failed["status"], "fail", "{}", run.stdout);
    assert_eq!(run.steps("after_failed", "failures"), vec![2]);
    assert_eq!(run.steps("after_failed", "notReached"), vec![3]);
    assert_eq!(
        failed["notReached"][0]["reason"],
        "depends on what step 2 (`bad`) did, and that step did not behave as expected"
    );
    let verdicts = run.lock_verdicts("after_failed");
    assert_eq!(verdicts["L-TOKEN-ADVANCE-ONLY-PATH"], "not_reached");
    assert_eq!(verdicts["L-MCP-EXECUTION-RESPONSE"], "pass");
}

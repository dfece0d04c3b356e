//! Hollow-pass control: a server that does nothing must pass nothing. Guards against checks
//! that cannot fail, which once let a server that never wrote a byte "pass"
//! `L-EVENT-EDGE-CREATED`, `L-EVENT-NODE-CREATED` and `L-MANIFEST-CLOSED-KINDS` in 14 scenarios
//! (the closed sets of an empty data directory hold no kind outside them), and
//! `L-BUDGET-TRUNCATION-FITS` from a check of the scenario's own expected string.
//!
//! `workrail-conformance-do-nothing` lists exactly the tools (names and input schemas)
//! WorkRail-rs lists, read from `workrail mcp` here, and answers every call with an empty
//! success. The whole suite runs against it with WorkRail-rs's surface (every profile on); no
//! lock may pass but the ones the tool listing itself judges. Then a few planted scenarios,
//! each with one check that used to hold on an empty answer, show that none of them passes on
//! its own either.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{server, workspace};

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use workrail_conformance::mcp::{Launch, McpClient};
use workrail_conformance::scenario::{self, Step};

/// The tools WorkRail-rs lists, as `tools/list` answers them, written to `dir/tools.json`.
fn our_tools(dir: &Path) -> std::path::PathBuf {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut client = McpClient::spawn(&Launch {
        argv: vec![server().display().to_string(), "mcp".into()],
        env: vec![
            ("WORKRAIL_DATA_DIR".into(), data.display().to_string()),
            ("WORKRAIL_LOG".into(), "warn".into()),
        ],
        cwd: Some(dir.to_owned()),
        stderr: Some(dir.join("server.stderr")),
        timeout: Duration::from_secs(20),
    })
    .unwrap();
    client.initialize().unwrap();
    let tools = client.list_tools().unwrap();
    client.shutdown();
    assert!(tools.len() >= 4, "{tools:?}");
    let path = dir.join("tools.json");
    std::fs::write(&path, Value::Array(tools).to_string()).unwrap();
    path
}

struct Run {
    stdout: String,
    report: Value,
}

impl Run {
    /// Each scenario's lock verdicts.
    fn verdicts(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        self.report["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let locks = r["locks"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                    .collect();
                (r["name"].as_str().unwrap().to_owned(), locks)
            })
            .collect()
    }

    fn status(&self, name: &str) -> String {
        self.report["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no result for {name}:\n{}", self.stdout))["status"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

/// Runs the suite against the do-nothing server listing `tools`.
fn against_do_nothing(tools: &Path, extra: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_workrail-conformance"))
        .args([
            "--server",
            &format!(
                "{} {}",
                env!("CARGO_BIN_EXE_workrail-conformance-do-nothing"),
                tools.display()
            ),
            "--surface",
            "fixtures/conformance/servers/workrail-rs.json",
        ])
        .args(extra)
        .arg("--json")
        .arg(&json_path)
        .current_dir(workspace())
        .output()
        .expect("the suite runs");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let report = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}); stdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    }))
    .unwrap();
    Run { stdout, report }
}

/// Whether a step only reads the tool listing (what a do-nothing server can get right).
fn lists_tools(step: &Step) -> bool {
    matches!(
        step,
        Step::ListTools { .. }
            | Step::ToolSet { .. }
            | Step::SchemaAccepts { .. }
            | Step::SchemaRequires { .. }
    )
}

/// lock: L-EVENT-CLOSED-KINDS, L-EVENT-NODE-CREATED, L-EVENT-EDGE-CREATED, L-EVENT-ADVANCE-RECORDED, L-MANIFEST-CLOSED-KINDS, L-BUDGET-TRUNCATION-FITS
/// decision: D158, D159
#[test]
fn a_server_that_does_nothing_passes_only_the_tool_listing() {
    let dir = tempfile::tempdir().unwrap();
    let tools = our_tools(dir.path());
    let run = against_do_nothing(&tools, &[]);

    // Per scenario, the locks its tool-listing steps cite: the only ones that may pass.
    let scenarios =
        scenario::load_dir(&workspace().join("fixtures/conformance/scenarios")).unwrap();
    let listing: BTreeMap<String, BTreeSet<String>> = scenarios
        .iter()
        .map(|s| {
            let locks = s
                .steps
                .iter()
                .filter(|n| lists_tools(&n.step))
                .flat_map(|n| n.step.locks().iter().cloned())
                .collect();
            (s.name.clone(), locks)
        })
        .collect();
    let verdicts = run.verdicts();
    assert_eq!(verdicts.len(), scenarios.len(), "{}", run.stdout);
    let mut passed_any = BTreeSet::new();
    for (name, locks) in &verdicts {
        for (id, v) in locks {
            if v == "pass" {
                assert!(
                    listing[name].contains(id),
                    "{name}: {id} passes on a server that does nothing:\n{}",
                    run.stdout
                );
                passed_any.insert(id.clone());
            }
        }
    }
    // The tool listing itself is right, so its locks do pass: the control is not vacuous.
    for id in [
        "L-MCP-TOOL-SET",
        "L-MCP-NO-PROJECTION-TOOLS",
        "L-MCP-AGENT-MUST-NOT",
    ] {
        assert!(passed_any.contains(id), "{id}:\n{}", run.stdout);
    }
    // A scenario passes only when it checks nothing but the tool listing.
    for s in &scenarios {
        let status = run.status(&s.name);
        if status == "pass" {
            assert!(
                s.steps.iter().all(|n| lists_tools(&n.step)),
                "{} passes on a server that does nothing:\n{}",
                s.name,
                run.stdout
            );
        }
    }
    assert_eq!(run.status("tool_set"), "pass", "{}", run.stdout);
    // The closed sets of a data directory nobody wrote are judged nowhere.
    for id in workrail_conformance::store::CLOSED_SET_LOCKS {
        for (name, locks) in &verdicts {
            assert_ne!(
                locks.get(id).map(String::as_str),
                Some("pass"),
                "{name}: {id}"
            );
        }
    }
    // The run-wide table agrees: only tool-listing locks pass.
    let all_listing: BTreeSet<&String> = listing.values().flatten().collect();
    for row in run.report["locks"].as_array().unwrap() {
        if row["verdict"] == "pass" {
            let id = row["id"].as_str().unwrap().to_owned();
            assert!(all_listing.contains(&id), "{id}:\n{}", run.stdout);
        }
    }
}

/// A fixture root with these scenarios (no workflows: the do-nothing server reads none).
fn fixture_root(scenarios: &[Value]) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("scenarios");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::create_dir_all(root.path().join("workflows")).unwrap();
    for s in scenarios {
        let name = s["name"].as_str().unwrap();
        std::fs::write(dir.join(format!("{name}.json")), s.to_string()).unwrap();
    }
    root
}

fn probe(name: &str, lock: &str, steps: Value) -> Value {
    json!({"name": name, "description": "one check that used to hold on an empty answer",
        "lockIds": [lock], "profile": "core", "steps": steps})
}

/// Each planted scenario isolates one check that held on an empty success: that a text is
/// absent from it, that two of them are identical, that the store did not change across a
/// call when it holds nothing, that a start "succeeded", that the closed sets of an empty
/// store hold, that the error envelope held when no error came back. None passes.
/// decision: D158, D159
#[test]
fn checks_of_an_empty_answer_do_not_pass() {
    let dir = tempfile::tempdir().unwrap();
    let tools = our_tools(dir.path());
    let list = |save: &str| json!({"needs": ["untaggedDiscovery"], "do": "call", "tool": "list_workflows", "save": save, "expect": "ok"});
    let root = fixture_root(&[
        probe(
            "hollow_absent",
            "L-CONTEXT-NO-ECHO",
            json!([list("l"),
                {"do": "absent", "result": "l", "text": "marker", "lock": ["L-CONTEXT-NO-ECHO"]}]),
        ),
        probe(
            "hollow_same_response",
            "L-TOKEN-ACK-IDEMPOTENT",
            json!([list("l1"), list("l2"),
                {"do": "sameResponse", "a": "l1", "b": "l2", "lock": ["L-TOKEN-ACK-IDEMPOTENT"]}]),
        ),
        probe(
            "hollow_no_write",
            "L-MCP-INSPECT-READ-ONLY",
            json!([{"do": "storeDigest", "save": "d0"}, list("l"), {"do": "storeDigest", "save": "d1"},
                {"do": "same", "what": "digest", "a": "${d0.digest}", "b": "${d1.digest}",
                 "dependsOn": ["l"], "lock": ["L-MCP-INSPECT-READ-ONLY"]}]),
        ),
        probe(
            "hollow_start",
            "L-CONTEXT-BUDGET",
            json!([{"do": "call", "tool": "start_workflow",
                "args": {"workflowId": "conformance.linear", "context": {"k": "v"}},
                "expect": "ok", "lock": ["L-CONTEXT-BUDGET"]}]),
        ),
        probe(
            "hollow_closed_sets",
            "L-EVENT-NODE-CREATED",
            json!([list("l"), {"do": "storeDigest", "save": "d"}]),
        ),
        probe(
            "hollow_error_envelope",
            "L-ERR-RETRY-UNION",
            json!([{"do": "call", "tool": "inspect_workflow", "args": {"workflowId": "none"},
                "expect": "notError"}]),
        ),
    ]);
    let run = against_do_nothing(&tools, &["--fixtures", root.path().to_str().unwrap()]);
    for (name, locks) in run.verdicts() {
        assert!(
            locks.values().all(|v| v != "pass"),
            "{name}: {locks:?}\n{}",
            run.stdout
        );
    }
    // Two checks cannot run on an empty answer; a start without an execution response is
    // not ok; the rest judged nothing and say so.
    for (name, status) in [
        ("hollow_absent", "fail"),
        ("hollow_same_response", "fail"),
        ("hollow_start", "fail"),
        ("hollow_no_write", "skip"),
        ("hollow_closed_sets", "skip"),
        ("hollow_error_envelope", "skip"),
    ] {
        assert_eq!(run.status(name), status, "{name}:\n{}", run.stdout);
    }
    for needle in [
        "`l` is an empty response (no text, no structuredContent)",
        "uses `d0`, which step 1 read from a store holding no event segment (nothing to compare)",
        "not reached L-EVENT-NODE-CREATED: no read of the store found anything this closed set governs",
        "not reached L-ERR-RETRY-UNION: no error response came back to judge",
        "none of its locks could be judged on this server",
    ] {
        assert!(
            run.stdout.contains(needle),
            "missing {needle:?}:\n{}",
            run.stdout
        );
    }
}

//! `--env` values are templates like the surface's `env`: `$dataDir`, `$tmp` and `$scenario`
//! expand to the scenario's own paths and name before the server starts. Guards against a
//! template reaching the server verbatim (a relative directory named `$dataDir`).
//!
//! The scenario is written by the test into a temporary fixture root and run against the
//! reference server `<workspace>/target/debug/workrail mcp` (built here first): with
//! `--env 'WORKRAIL_DATA_DIR=$dataDir'` the server must still write where the suite reads.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{server, workspace};

use std::process::Command;

use serde_json::json;

fn run(env: &str) -> (bool, String) {
    let root = tempfile::tempdir().unwrap();
    let scenarios = root.path().join("scenarios");
    std::fs::create_dir_all(&scenarios).unwrap();
    let scenario = json!({
        "name": "templated_env",
        "description": "A start writes into the data directory the suite reads.",
        "lockIds": ["L-DATADIR-LAYOUT"],
        "profile": "core",
        "steps": [
            {"do": "call", "tool": "start_workflow", "args": {"workflowId": "conformance.linear"},
             "expect": "ok"},
            {"do": "storeDigest", "save": "d", "requireEvents": true, "lock": ["L-DATADIR-LAYOUT"]}
        ]
    });
    std::fs::write(scenarios.join("templated_env.json"), scenario.to_string()).unwrap();
    let workflows = root.path().join("workflows");
    std::fs::create_dir_all(&workflows).unwrap();
    for entry in std::fs::read_dir(workspace().join("fixtures/conformance/workflows")).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, workflows.join(path.file_name().unwrap())).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_workrail-conformance"))
        .args(["--server", &format!("{} mcp", server().display())])
        .arg("--fixtures")
        .arg(root.path())
        .args(["--env", env])
        .current_dir(workspace())
        .output()
        .expect("the suite runs");
    (out.status.success(), String::from_utf8(out.stdout).unwrap())
}

#[test]
fn env_values_on_the_command_line_are_templated() {
    let (ok, stdout) = run("WORKRAIL_DATA_DIR=$dataDir");
    assert!(ok, "{stdout}");
    assert!(
        stdout.ends_with("1 passed, 0 failed, 0 skipped\n"),
        "{stdout}"
    );
    // The control: a directory the suite does not read leaves the store it reads empty.
    let (ok, stdout) = run("WORKRAIL_DATA_DIR=$tmp/elsewhere");
    assert!(!ok, "{stdout}");
    assert!(stdout.contains("no event segment under"), "{stdout}");
}

//! The data directory is private whatever the umask: a real `workrail mcp` process, started
//! under umask 000 and 022, leaves every directory it creates at 0700 and every file at 0600,
//! so no other local user can read notes and context, write the event logs or keys, or take a
//! session's lock file (D52).

#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// Starts a bundled workflow and acknowledges its first step with notes, in a server that runs
/// under `umask`.
fn run_a_session_under_umask(umask: &str, data_dir: &Path) {
    let script = format!("umask {umask} && exec \"$0\" mcp");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_workrail"))
        .env("WORKRAIL_DATA_DIR", data_dir)
        .env("HOME", data_dir.parent().unwrap())
        .env_remove("WORKRAIL_WORKFLOW_DIRS")
        .env_remove("XDG_DATA_HOME")
        .current_dir(data_dir.parent().unwrap())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = |message: Value| {
        let mut line = serde_json::to_string(&message).unwrap();
        line.push('\n');
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.flush().unwrap();
    };
    let mut response = |id: i64| loop {
        let line = lines.next().expect("the server answered").unwrap();
        let value: Value = serde_json::from_str(&line).unwrap();
        if value["id"] == json!(id) {
            return value;
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "permissions", "version": "0"}}}),
    );
    response(1);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "start_workflow", "arguments": {"workflowId": "wr.coding_task"}}}),
    );
    let started = response(2);
    let out = &started["result"]["structuredContent"];
    assert!(out["ackToken"].is_string(), "{started}");
    send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "continue_workflow", "arguments": {
            "ackToken": out["ackToken"],
            "output": {"notesMarkdown": "private notes"}}}}),
    );
    let advanced = response(3);
    assert_eq!(advanced["result"]["isError"], false, "{advanced}");
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

/// Every entry below `root` (and `root` itself) with a mode other than 0700 / 0600.
fn loose_entries(root: &Path) -> Vec<String> {
    let mut loose = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o777;
        let expected = if meta.is_dir() { 0o700 } else { 0o600 };
        if mode != expected {
            loose.push(format!("{} is {mode:o}", path.display()));
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
        }
    }
    loose
}

/// lock: L-DATADIR-OWNED, L-TOKEN-KEY-MATERIAL
#[test]
fn every_file_and_directory_is_private_whatever_the_umask() {
    for umask in ["000", "022", "077"] {
        let scratch = tempfile::tempdir().unwrap();
        let data_dir = scratch.path().join("data");
        run_a_session_under_umask(umask, &data_dir);
        let sessions = std::fs::read_dir(data_dir.join("sessions"))
            .unwrap()
            .count();
        assert_eq!(sessions, 1, "umask {umask}: the session was written");
        let loose = loose_entries(&data_dir);
        assert!(loose.is_empty(), "umask {umask}: {loose:#?}");
    }
}

/// lock: L-DATADIR-OWNED
#[test]
fn an_existing_open_data_directory_is_made_private() {
    let scratch = tempfile::tempdir().unwrap();
    let data_dir = scratch.path().join("data");
    std::fs::create_dir(&data_dir).unwrap();
    std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    run_a_session_under_umask("022", &data_dir);
    let mode = std::fs::metadata(&data_dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode, 0o700,
        "the root of an open data directory is tightened"
    );
}

//! The `workrail` command line, run as a real process.
//!
//! Guards against: `validate` hiding problems or printing a workflowHash that differs from the
//! golden one; wrong exit codes (0 success, 1 failure, 2 usage); `inspect` and `keys rotate`
//! failing on a fresh data directory or losing the tokens minted before a rotation; the default
//! command not being the MCP server; and logs leaking onto stdout, which belongs to MCP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A `workrail` command isolated in `dir` (data dir, home and working directory).
fn workrail(dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_workrail"));
    cmd.env("WORKRAIL_DATA_DIR", dir)
        .env("HOME", dir)
        .env_remove("WORKRAIL_WORKFLOW_DIRS")
        .env_remove("WORKRAIL_LOG")
        .current_dir(dir);
    cmd
}

fn run(dir: &Path, args: &[&str]) -> Output {
    workrail(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

#[test]
fn help_and_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let help = run(dir.path(), &["--help"]);
    assert_eq!(help.status.code(), Some(0));
    for needle in [
        "mcp",
        "validate",
        "inspect",
        "keys",
        "WORKRAIL_DATA_DIR",
        "WORKRAIL_WORKFLOW_DIRS",
        "WORKRAIL_LOG",
    ] {
        assert!(
            stdout(&help).contains(needle),
            "--help lacks {needle}:\n{}",
            stdout(&help)
        );
    }
    assert_eq!(
        run(dir.path(), &["validate", "--help"]).status.code(),
        Some(0)
    );
    assert_eq!(
        run(dir.path(), &["keys", "rotate", "--help"]).status.code(),
        Some(0)
    );
    assert_eq!(run(dir.path(), &["--version"]).status.code(), Some(0));
    for bad in [
        &["frobnicate"][..],
        &["validate"],
        &["inspect"],
        &["keys"],
        &["mcp", "extra"],
    ] {
        let out = run(dir.path(), bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", stderr(&out));
        assert!(stdout(&out).is_empty(), "{bad:?}");
    }
}

#[test]
fn validate_prints_the_golden_workflow_hash() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = workspace().join("fixtures/workflows");
    for (source, hash, bundled) in [
        ("nested_loops.source.json", "nested_loops.hash", false),
        ("wr.coding_task.source.json", "wr.coding_task.hash", true),
    ] {
        let file = fixtures.join(source);
        let mut args = vec!["validate", file.to_str().unwrap()];
        if bundled {
            args.push("--bundled");
        }
        let out = run(dir.path(), &args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{source}: {}{}",
            stdout(&out),
            stderr(&out)
        );
        let golden = std::fs::read_to_string(fixtures.join(hash)).unwrap();
        assert_eq!(stdout(&out).trim(), golden.trim(), "{source}");
        assert!(stderr(&out).contains("ok, workflow"), "{}", stderr(&out));
    }
}

#[test]
fn validate_reports_every_problem_with_pointer_and_fix() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.json");
    std::fs::write(
        &file,
        json!({
            "id": "project.demo",
            "name": "Demo",
            "description": "d",
            "steps": [
                {"id": "a", "title": "A"},
                {"id": "b", "title": "B", "prompt": "p", "bogus": 1},
            ],
        })
        .to_string(),
    )
    .unwrap();
    let out = run(dir.path(), &["validate", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    assert!(text.contains("2 problems"), "{text}");
    assert!(text.contains("at /steps/0/promptBlocks"), "{text}");
    assert!(
        text.contains("error[unknown_field] at /steps/1/bogus"),
        "{text}"
    );
    assert_eq!(text.matches("\n  fix: ").count(), 2, "{text}");
    assert!(
        text.contains(r#"auto-fix (RFC 6902): {"op":"remove","path":"/steps/1/bogus"}"#),
        "{text}"
    );

    // A bundled id outside the bundled source is rejected at /id.
    let bundled = workspace().join("fixtures/workflows/wr.coding_task.source.json");
    let out = run(dir.path(), &["validate", bundled.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("error[reserved_namespace] at /id"),
        "{}",
        stdout(&out)
    );

    // Not JSON, and a missing file.
    std::fs::write(&file, "{ not json").unwrap();
    let out = run(dir.path(), &["validate", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("error[invalid_json]"),
        "{}",
        stdout(&out)
    );
    let out = run(dir.path(), &["validate", "does-not-exist.json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("cannot read does-not-exist.json"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn inspect_reports_unknown_sessions_as_envelopes() {
    let dir = tempfile::tempdir().unwrap();
    let fresh = dir.path().join("data");
    let out = workrail(dir.path())
        .env("WORKRAIL_DATA_DIR", &fresh)
        .args(["inspect", "sess_nothere"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("SESSION_NOT_FOUND"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("suggestion:"), "{}", stderr(&out));
    assert!(stdout(&out).is_empty());
    assert!(fresh.is_dir(), "the data directory is created on first use");
    let out = run(dir.path(), &["inspect", "../etc"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("VALIDATION_ERROR"),
        "{}",
        stderr(&out)
    );
}

/// One short MCP session on `dir`: sends `calls` as `tools/call`, returns their results.
fn mcp_session(cmd: &mut Command, calls: &[(&str, Value)]) -> (Vec<Value>, String) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = vec![
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "cli-test", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ];
    for (i, (name, args)) in calls.iter().enumerate() {
        lines.push(json!({"jsonrpc": "2.0", "id": i + 1, "method": "tools/call", "params": {"name": name, "arguments": args}}));
    }
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut results = Vec::new();
    // Send one request at a time so the order of effects is the order of calls.
    let mut line = String::new();
    for message in &lines {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
        let Some(id) = message.get("id") else {
            continue;
        };
        loop {
            line.clear();
            assert!(reader.read_line(&mut line).unwrap() > 0, "stdout closed");
            let v: Value = serde_json::from_str(&line).expect("stdout carries only JSON-RPC");
            if &v["id"] == id {
                if id != &json!(0) {
                    results.push(v["result"].clone());
                }
                break;
            }
        }
    }
    drop(stdin);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut reader, &mut rest).unwrap();
    assert!(
        rest.trim().is_empty(),
        "unexpected stdout after EOF: {rest}"
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "the server exits 0 on EOF");
    (results, String::from_utf8(out.stderr).unwrap())
}

#[test]
fn keys_rotate_keeps_earlier_tokens_valid() {
    let dir = tempfile::tempdir().unwrap();
    let (results, _) = mcp_session(
        workrail(dir.path()).arg("mcp"),
        &[("start_workflow", json!({"workflowId": "wr.coding_task"}))],
    );
    let s0 = results[0]["structuredContent"].clone();
    assert!(s0["stateToken"].is_string(), "{}", results[0]);
    let out = run(dir.path(), &["keys", "rotate"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("Rotated"));
    assert!(dir.path().join("keys/keyring.json").is_file());
    // The default command (no arguments) is the MCP server; old tokens still verify.
    let (results, _) = mcp_session(
        &mut workrail(dir.path()),
        &[(
            "continue_workflow",
            json!({"stateToken": s0["stateToken"], "ackToken": s0["ackToken"], "output": {"notesMarkdown": "done"}}),
        )],
    );
    assert_eq!(results[0]["isError"], false, "{}", results[0]);
    assert_ne!(
        results[0]["structuredContent"]["stateToken"],
        s0["stateToken"]
    );
    // `inspect` shows the session, and writes nothing, not even a cache (decision D69).
    let session = s0["session"]["sessionId"].as_str().unwrap();
    let before = tree(dir.path());
    for args in [
        &["inspect", session][..],
        &["inspect", session, "--all"],
        &["inspect", "--all", session],
    ] {
        let out = run(dir.path(), args);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(stdout(&out).contains(session), "{}", stdout(&out));
        assert!(stdout(&out).contains("done"), "{}", stdout(&out));
    }
    assert_eq!(
        tree(dir.path()),
        before,
        "inspect changed the data directory"
    );
}

/// Every entry under `root`: path, kind, mode and (for files) bytes.
fn tree(root: &Path) -> Vec<(PathBuf, u32, Vec<u8>)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let bytes = if meta.is_file() {
                std::fs::read(&path).unwrap()
            } else {
                Vec::new()
            };
            if meta.is_dir() {
                stack.push(path.clone());
            }
            out.push((path, meta.permissions().mode(), bytes));
        }
    }
    out.sort();
    out
}

#[test]
fn logs_go_to_stderr_never_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let (results, logs) = mcp_session(
        workrail(dir.path())
            .args(["mcp"])
            .env("WORKRAIL_LOG", "debug"),
        &[
            ("list_workflows", json!({})),
            ("start_workflow", json!({"bad": true})),
        ],
    );
    assert_eq!(results.len(), 2);
    assert_eq!(results[1]["isError"], true);
    assert!(
        logs.contains("DEBUG"),
        "WORKRAIL_LOG=debug should log to stderr: {logs}"
    );
    // An invalid filter falls back to the default with a notice, and still serves.
    let (results, logs) = mcp_session(
        workrail(dir.path())
            .args(["mcp"])
            .env("WORKRAIL_LOG", "=[bad"),
        &[("list_workflows", json!({}))],
    );
    assert_eq!(results[0]["isError"], false);
    assert!(logs.contains("ignoring invalid WORKRAIL_LOG"), "{logs}");
}

/// `workrail sessions` lists every session, newest first, with its health and each run's
/// workflow, label and status; `--json` gives the same as data.
#[test]
fn sessions_lists_every_session_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    let empty = run(dir.path(), &["sessions"]);
    assert_eq!(empty.status.code(), Some(0), "{}", stderr(&empty));
    assert!(stdout(&empty).contains("No sessions"), "{}", stdout(&empty));
    let (first, _) = mcp_session(
        workrail(dir.path()).arg("mcp"),
        &[("start_workflow", json!({"workflowId": "wr.coding_task"}))],
    );
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (second, _) = mcp_session(
        workrail(dir.path()).arg("mcp"),
        &[(
            "start_workflow",
            json!({"workflowId": "wr.bug_investigation"}),
        )],
    );
    let id = |r: &Value| {
        r["structuredContent"]["session"]["sessionId"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let (older, newer) = (id(&first[0]), id(&second[0]));
    let text = run(dir.path(), &["sessions"]);
    assert_eq!(text.status.code(), Some(0), "{}", stderr(&text));
    let out = stdout(&text);
    let (at_newer, at_older) = (out.find(&newer).unwrap(), out.find(&older).unwrap());
    assert!(at_newer < at_older, "newest first: {out}");
    assert!(
        out.contains("healthy")
            && out.contains("wr.bug_investigation")
            && out.contains("in_progress"),
        "{out}"
    );
    let json_out = run(dir.path(), &["sessions", "--json"]);
    let rows: Value = serde_json::from_str(&stdout(&json_out)).unwrap();
    assert_eq!(rows[0]["sessionId"], newer.as_str());
    assert_eq!(rows[1]["sessionId"], older.as_str());
    assert_eq!(rows[0]["health"], "healthy");
    assert_eq!(rows[0]["runs"][0]["workflowId"], "wr.bug_investigation");
    assert!(rows[0]["lastActivity"].as_str().unwrap().ends_with('Z'));
    // inspect names the step each node waits at, beside the node id.
    let inspected = run(dir.path(), &["inspect", &newer]);
    let shown = stdout(&inspected);
    assert!(
        shown.contains("at step \"") && shown.contains("[preferred tip]"),
        "{shown}"
    );
}

/// A run whose last attempt was refused is marked in `workrail sessions` (and `--json` lists it
/// in `blockedRuns`), as the Console's list marks it: a person finds the run that waits on them
/// without opening every session. Once an attempt goes through, the mark is gone.
///
/// decision: D182
#[test]
fn sessions_marks_a_run_whose_last_attempt_was_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("workflows")).unwrap();
    std::fs::write(
        dir.path().join("workflows/check.json"),
        json!({
            "id": "project.check", "name": "Check", "description": "Say DONE.",
            "steps": [
                {"id": "work", "title": "Work", "prompt": "Work, then say DONE.",
                 "validationCriteria": [{"type": "contains", "value": "DONE"}]},
                {"id": "end", "title": "End", "prompt": "End."}
            ]
        })
        .to_string(),
    )
    .unwrap();
    let (started, _) = mcp_session(
        workrail(dir.path()).arg("mcp"),
        &[("start_workflow", json!({"workflowId": "project.check"}))],
    );
    let out = &started[0]["structuredContent"];
    let session = out["session"]["sessionId"].as_str().unwrap().to_owned();
    let run_id = out["session"]["runId"].as_str().unwrap().to_owned();
    let ack = |notes: &str, from: &Value| {
        json!({"stateToken": from["stateToken"], "ackToken": from["ackToken"],
               "output": {"notesMarkdown": notes}})
    };
    let (refused, _) = mcp_session(
        workrail(dir.path()).arg("mcp"),
        &[("continue_workflow", ack("not yet", out))],
    );
    let refused = &refused[0]["structuredContent"];
    assert!(
        !refused["blockers"].as_array().unwrap().is_empty(),
        "{refused}"
    );
    let listed = stdout(&run(dir.path(), &["sessions"]));
    assert!(
        listed.contains("1 with a blocked run")
            && listed.contains("in_progress (blocked: its last attempt was refused)"),
        "{listed}"
    );
    let rows: Value =
        serde_json::from_str(&stdout(&run(dir.path(), &["sessions", "--json"]))).unwrap();
    assert_eq!(rows[0]["sessionId"], session.as_str());
    let blocked = rows[0]["blockedRuns"].as_array().unwrap();
    assert_eq!(blocked.len(), 1, "{rows}");
    assert_eq!(blocked[0], run_id.as_str());

    let (_, _) = mcp_session(
        workrail(dir.path()).arg("mcp"),
        &[("continue_workflow", ack("DONE", refused))],
    );
    let listed = stdout(&run(dir.path(), &["sessions"]));
    assert!(!listed.contains("blocked"), "{listed}");
}

/// Without `WORKRAIL_DATA_DIR`, the data directory is the platform's (`$XDG_DATA_HOME/workrail`
/// on Linux), created on first use.
#[cfg(target_os = "linux")]
#[test]
fn the_default_data_directory_is_the_platform_one() {
    let home = tempfile::tempdir().unwrap();
    let xdg = home.path().join("xdg-data");
    let out = Command::new(env!("CARGO_BIN_EXE_workrail"))
        .args(["sessions"])
        .env_remove("WORKRAIL_DATA_DIR")
        .env("XDG_DATA_HOME", &xdg)
        .env("HOME", home.path())
        .current_dir(home.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(xdg.join("workrail/keys/keyring.json").is_file());
    let out = Command::new(env!("CARGO_BIN_EXE_workrail"))
        .args(["sessions"])
        .env_remove("WORKRAIL_DATA_DIR")
        .env_remove("XDG_DATA_HOME")
        .env("HOME", home.path())
        .current_dir(home.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        home.path()
            .join(".local/share/workrail/keys/keyring.json")
            .is_file()
    );
}

/// MCP clients give the server pipes, served from the runtime's thread (decision D70); stdin
/// and stdout that are files (a replayed transcript, a log) are served too, through the blocking
/// fallback, with every request answered in order.
#[test]
fn mcp_over_files_instead_of_pipes_answers_every_request() {
    let dir = tempfile::tempdir().unwrap();
    let requests = dir.path().join("requests.jsonl");
    let responses = dir.path().join("responses.jsonl");
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "files", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {}}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "list_workflows", "arguments": {}}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&requests, text).unwrap();
    let status = workrail(dir.path())
        .arg("mcp")
        .stdin(std::fs::File::open(&requests).unwrap())
        .stdout(std::fs::File::create(&responses).unwrap())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
    let answered: Vec<Value> = std::fs::read_to_string(&responses)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<Value> = answered.iter().map(|r| r["id"].clone()).collect();
    assert_eq!(ids, [json!(1), json!(2), json!(3)], "{answered:?}");
    assert_eq!(answered[2]["result"]["isError"], false, "{}", answered[2]);
}

/// `workrail lock` holds a session's writer lock until its stdin closes: meanwhile a server's
/// acknowledgement answers `TOKEN_SESSION_LOCKED` (retryable) and writes nothing while a
/// rehydrate answers; once released the same acknowledgement advances. An unknown session is
/// `SESSION_NOT_FOUND` and leaves no directory behind.
/// decision: D204
/// lock: L-WRITER-BUSY
#[test]
fn lock_holds_a_session_until_stdin_closes() {
    let dir = tempfile::tempdir().unwrap();
    let (started, _) = mcp_session(
        workrail(dir.path()).arg("mcp"),
        &[("start_workflow", json!({"workflowId": "wr.coding_task"}))],
    );
    let out = &started[0]["structuredContent"];
    let session = out["session"]["sessionId"].as_str().unwrap().to_owned();
    let (state, ack) = (out["stateToken"].clone(), out["ackToken"].clone());
    let manifest = dir
        .path()
        .join("sessions")
        .join(&session)
        .join("manifest.jsonl");
    let before = std::fs::read(&manifest).unwrap();

    let mut holder = workrail(dir.path())
        .args(["lock", &session])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(holder.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first.trim(), format!("locked {session}"));

    let ack_call = json!({"stateToken": state, "ackToken": ack});
    let (busy, _) = mcp_session(
        workrail(dir.path()).arg("mcp"),
        &[
            ("continue_workflow", ack_call.clone()),
            ("continue_workflow", json!({"stateToken": state})),
        ],
    );
    let refused = &busy[0]["structuredContent"];
    assert_eq!(busy[0]["isError"], true, "{refused}");
    assert_eq!(refused["code"], "TOKEN_SESSION_LOCKED", "{refused}");
    assert_ne!(refused["retry"]["kind"], "not_retryable", "{refused}");
    assert_eq!(
        busy[1]["structuredContent"]["kind"], "ok",
        "a rehydrate answers while the lock is held: {}",
        busy[1]
    );
    assert_eq!(
        std::fs::read(&manifest).unwrap(),
        before,
        "nothing was written"
    );

    drop(holder.stdin.take());
    let released = holder.wait_with_output().unwrap();
    assert_eq!(released.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&released.stderr).contains(&format!("released {session}")),
        "{}",
        String::from_utf8_lossy(&released.stderr)
    );
    let (advanced, _) = mcp_session(
        workrail(dir.path()).arg("mcp"),
        &[("continue_workflow", ack_call)],
    );
    assert_eq!(
        advanced[0]["structuredContent"]["kind"], "ok",
        "{}",
        advanced[0]
    );

    let unknown = "sess_aaaaaaaaaaaaaaaaaaaaaaaaaa";
    let refused = run(dir.path(), &["lock", unknown]);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("SESSION_NOT_FOUND"),
        "{}",
        stderr(&refused)
    );
    assert!(
        !dir.path().join("sessions").join(unknown).exists(),
        "no directory is made for an unknown session"
    );
}

//! End to end over real stdio: the built `workrail` binary, spoken to as an MCP client would
//! (newline-delimited JSON-RPC: `initialize`, `notifications/initialized`, `tools/list`,
//! `tools/call`), with a fresh `WORKRAIL_DATA_DIR` per test.
//!
//! Guards against: the server writing anything but MCP to stdout, failing the handshake, or not
//! exiting 0 on stdin EOF; execution responses whose text is not the protocol's rendering of
//! their `structuredContent`; a bundled workflow that cannot be driven to completion by an agent
//! that follows the blocked responses' examples; replayed acks that are not byte-identical;
//! rewinds that do not fork; tampered tokens that are not rejected as `TOKEN_BAD_SIGNATURE`;
//! runs that cannot continue from the same tokens after a server restart; and bad arguments or
//! over-budget context surfacing as anything but `VALIDATION_ERROR` tool results.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use workrail_spec::tools::{ExecutionOutput, TOOL_NAMES};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A running `workrail mcp` child process.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: i64,
}

impl Server {
    /// Spawns `workrail mcp` on `data_dir`, isolated from the developer's home and project
    /// workflow directories.
    fn spawn(data_dir: &Path) -> Server {
        Server::spawn_with_stderr(data_dir, Stdio::inherit())
    }

    /// [`Server::spawn`] with the server's stderr sent to `stderr`.
    fn spawn_with_stderr(data_dir: &Path, stderr: Stdio) -> Server {
        // Run where no project workflow directories exist (the data dir may not exist yet).
        let cwd = data_dir.ancestors().find(|p| p.is_dir()).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_workrail"))
            .arg("mcp")
            .env("WORKRAIL_DATA_DIR", data_dir)
            .env("HOME", data_dir)
            .env_remove("WORKRAIL_WORKFLOW_DIRS")
            .env_remove("XDG_DATA_HOME")
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn workrail");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take();
        Server {
            child,
            stdin,
            lines: rx,
            next_id: 0,
        }
    }

    /// Spawns and completes the MCP handshake.
    fn start(data_dir: &Path) -> Server {
        Server::spawn(data_dir).handshake()
    }

    fn handshake(self) -> Server {
        let mut server = self;
        let init = server.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "workrail-e2e", "version": "0"},
            }),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "workrail", "{init}");
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        let mut line = serde_json::to_string(message).unwrap();
        line.push('\n');
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// Writes one raw line (which need not be valid JSON).
    fn send_raw(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// The next response carrying `id` (other lines must still be JSON-RPC).
    fn response_to(&mut self, id: &Value) -> Value {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|e| panic!("no response with id {id}: {e}"));
            let value: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {line:?}"));
            assert_eq!(value["jsonrpc"], "2.0", "not JSON-RPC: {line}");
            if &value["id"] == id {
                return value;
            }
        }
    }

    /// Sends a request and returns its response. Every stdout line must be JSON-RPC.
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no response to {method} within {TIMEOUT:?}")
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("server closed stdout during {method}")
                }
            };
            let value: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {line:?}"));
            assert_eq!(value["jsonrpc"], "2.0", "not JSON-RPC: {line}");
            if value["id"] == json!(id) {
                return value;
            }
        }
    }

    /// `tools/call`; returns the tool result (never a JSON-RPC error).
    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let response = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        assert!(
            response.get("error").is_none(),
            "{tool} became a JSON-RPC error: {response}"
        );
        response["result"].clone()
    }

    /// A successful execution call; checks it is text-first and returns `structuredContent`.
    fn exec(&mut self, tool: &str, arguments: Value) -> Value {
        let result = self.call(tool, arguments.clone());
        assert_eq!(
            result["isError"], false,
            "{tool} {arguments} failed: {result}"
        );
        assert_text_first(&result);
        result["structuredContent"].clone()
    }

    /// An error result; returns the envelope.
    fn error(&mut self, tool: &str, arguments: Value) -> Value {
        let result = self.call(tool, arguments);
        assert_eq!(result["isError"], true, "{result}");
        let envelope = result["structuredContent"].clone();
        let text = result["content"][0]["text"].as_str().unwrap();
        assert!(text.contains(envelope["code"].as_str().unwrap()), "{text}");
        assert!(
            text.contains(envelope["suggestion"].as_str().unwrap()),
            "{text}"
        );
        envelope
    }

    /// Closes stdin and waits for the exit status.
    fn close(mut self) -> ExitStatus {
        drop(self.stdin.take());
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the server did not exit after stdin EOF");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `content[0].text` is exactly the protocol's rendering of `structuredContent`.
fn assert_text_first(result: &Value) {
    let output: ExecutionOutput = serde_json::from_value(result["structuredContent"].clone())
        .unwrap_or_else(|e| panic!("structuredContent is not an ExecutionOutput ({e}): {result}"));
    assert_eq!(result["content"][0]["type"], "text");
    assert_eq!(
        result["content"][0]["text"].as_str().unwrap(),
        workrail::protocol::render_text(&output),
        "content[0].text is not the rendering of structuredContent"
    );
}

/// The artifacts a blocked response asks for, from its blockers' examples; loop decisions are
/// set to `stop` so loops end after one pass.
fn artifacts_from_blockers(out: &Value) -> Vec<Value> {
    let blockers = out["blockers"]
        .as_array()
        .expect("a blocked response has blockers");
    assert!(!blockers.is_empty());
    blockers
        .iter()
        .map(|b| {
            assert_eq!(
                b["code"], "MISSING_REQUIRED_OUTPUT",
                "unexpected blocker {b}"
            );
            let fix = b["suggestedFix"]
                .as_str()
                .expect("the blocker suggests a fix");
            let start = fix
                .find('{')
                .unwrap_or_else(|| panic!("no example in {fix:?}"));
            let mut example: Value = serde_json::from_str(&fix[start..])
                .unwrap_or_else(|e| panic!("the example does not parse ({e}): {fix:?}"));
            if example["kind"] == "wr.loop_control" {
                example["decision"] = json!("stop");
            }
            example
        })
        .collect()
}

/// The ack an agent sends for `out`: notes, plus the artifacts a blocked response asked for.
fn ack_args(out: &Value, notes: &str) -> Value {
    let mut output = json!({"notesMarkdown": notes});
    if out["kind"] == "blocked" {
        output["artifacts"] = Value::Array(artifacts_from_blockers(out));
    }
    json!({"stateToken": out["stateToken"], "ackToken": out["ackToken"], "output": output})
}

/// Drives a run from `out` to completion; returns every response in order.
fn drive_to_completion(server: &mut Server, mut out: Value) -> Vec<Value> {
    let mut seen = vec![out.clone()];
    for n in 1..=100 {
        if out["isComplete"] == true {
            return seen;
        }
        assert_execution_shape(&out);
        out = server.exec(
            "continue_workflow",
            ack_args(&out, &format!("step {n} done")),
        );
        seen.push(out.clone());
    }
    panic!("the run did not complete within 100 acks");
}

/// A not-yet-complete execution response carries every token and a pending step.
fn assert_execution_shape(out: &Value) {
    for field in ["stateToken", "ackToken", "checkpointToken"] {
        assert!(
            out[field].as_str().is_some_and(|t| !t.is_empty()),
            "{field} missing: {out}"
        );
    }
    assert!(out["pending"]["stepId"].is_string(), "{out}");
    assert!(
        out["pending"]["prompt"]
            .as_str()
            .is_some_and(|p| !p.is_empty()),
        "{out}"
    );
    assert_eq!(out["isComplete"], false);
    assert!(out["session"]["sessionId"].is_string() && out["session"]["runId"].is_string());
}

fn data_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

// ---------------------------------------------------------------------------------------------

/// lock: L-MCP-TOOL-SET, L-MCP-NO-PROJECTION-TOOLS
#[test]
fn stdio_lists_exactly_the_tools_and_exits_zero_on_eof() {
    let dir = data_dir();
    let mut server = Server::start(dir.path());
    let list = server.request("tools/list", json!({}));
    let tools = list["result"]["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    // Under the default flags every tool is listed but the opt-in `start_session`.
    let on_by_default: Vec<&str> = TOOL_NAMES
        .into_iter()
        .filter(|name| *name != "start_session")
        .collect();
    assert_eq!(names, on_by_default);
    let catalog: Value = serde_json::from_str(&workrail::mcp::catalog::render_catalog()).unwrap();
    // What is served is exactly the generated catalog entries of those tools.
    let catalog_entries: Vec<&Value> = catalog["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] != "start_session")
        .collect();
    assert_eq!(tools.iter().collect::<Vec<_>>(), catalog_entries);
    assert!(server.close().success());
    // The data directory is created on first use, with no configuration.
    let fresh = dir.path().join("nested/not-yet-created");
    let mut server = Server::start(&fresh);
    let out = server.exec("start_workflow", json!({"workflowId": "wr.coding_task"}));
    assert_execution_shape(&out);
    assert!(server.close().success());
    assert!(fresh.join("sessions").is_dir());
}

#[test]
fn eof_before_and_during_the_handshake_exits_zero() {
    let dir = data_dir();
    let server = Server::spawn(dir.path());
    assert!(server.close().success(), "EOF before initialize");
    let mut server = Server::spawn(dir.path());
    server.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}));
    assert!(server.close().success(), "EOF right after initialize");
}

/// lock: L-MCP-TEXT-FIRST, L-MCP-EXECUTION-RESPONSE, L-MCP-INSPECT-READ-ONLY
#[test]
fn bundled_workflows_run_to_completion_over_stdio() {
    let dir = data_dir();
    let mut server = Server::start(dir.path());
    let list = server.call("list_workflows", json!({}));
    assert_eq!(list["isError"], false, "{list}");
    let ids: Vec<String> = list["structuredContent"]["workflows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["workflowId"].as_str().unwrap().to_owned())
        .collect();
    let bundled: Vec<&String> = ids.iter().filter(|id| id.starts_with("wr.")).collect();
    assert!(!bundled.is_empty(), "no bundled workflows listed: {ids:?}");
    let text = list["content"][0]["text"].as_str().unwrap();
    for id in &bundled {
        assert!(text.contains(id.as_str()), "{text}");
    }
    // Discovery writes nothing.
    let inspect = server.call(
        "inspect_workflow",
        json!({"workflowId": bundled[0], "mode": "preview"}),
    );
    assert_eq!(inspect["isError"], false, "{inspect}");
    assert!(
        inspect["structuredContent"]["workflowHash"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(
        !dir.path().join("sessions").exists()
            || std::fs::read_dir(dir.path().join("sessions"))
                .unwrap()
                .next()
                .is_none()
    );

    for id in &bundled {
        let start = server.exec("start_workflow", json!({"workflowId": id}));
        let responses = drive_to_completion(&mut server, start);
        let last = responses.last().unwrap();
        assert_eq!(last["isComplete"], true, "{id}");
        assert!(
            last["pending"].is_null(),
            "{id}: pending must be null once complete"
        );
        assert_eq!(last["nextIntent"], "complete", "{id}");
        assert!(
            matches!(
                last["run"]["status"].as_str(),
                Some("complete" | "complete_with_gaps")
            ),
            "{id}: {}",
            last["run"]
        );
        assert!(responses.len() > 2, "{id} completed suspiciously fast");
    }
    assert!(server.close().success());
}

/// lock: L-TOKEN-ACK-IDEMPOTENT, L-TOKEN-REPLAY-FACTS
#[test]
fn a_replayed_ack_returns_the_byte_identical_response() {
    let dir = data_dir();
    let mut server = Server::start(dir.path());
    let s0 = server.exec("start_workflow", json!({"workflowId": "wr.mr_review"}));
    let args = ack_args(&s0, "first step");
    let first = server.call("continue_workflow", args.clone());
    let again = server.call("continue_workflow", args.clone());
    assert_eq!(
        serde_json::to_string(&first["structuredContent"]).unwrap(),
        serde_json::to_string(&again["structuredContent"]).unwrap(),
        "replay differs"
    );
    assert_eq!(first["content"], again["content"]);
    // The replay did not advance twice: the next step follows the first one directly.
    let s1 = first["structuredContent"].clone();
    let s2 = server.exec("continue_workflow", ack_args(&s1, "second step"));
    assert_ne!(s2["pending"]["stepId"], s1["pending"]["stepId"]);
    let replay_late = server.call("continue_workflow", args);
    assert_eq!(
        replay_late["structuredContent"], s1,
        "a late replay still returns the recorded response"
    );
    assert!(server.close().success());
}

/// lock: L-DAG-NON-TIP-AUTO-FORK, L-TOKEN-ACK-ATTEMPTS, L-MCP-NON-TIP-CONTEXT
#[test]
fn rewinding_to_an_older_state_token_forks_a_new_branch() {
    let dir = data_dir();
    let mut server = Server::start(dir.path());
    let s0 = server.exec("start_workflow", json!({"workflowId": "wr.mr_review"}));
    let s1 = server.exec(
        "continue_workflow",
        ack_args(&s0, "original branch, step 1"),
    );
    let s2 = server.exec(
        "continue_workflow",
        ack_args(&s1, "original branch, step 2"),
    );
    assert_ne!(s2["pending"]["stepId"], s1["pending"]["stepId"]);
    // The user rewinds the chat to the first response: rehydrate from its stateToken.
    let back = server.exec("continue_workflow", json!({"stateToken": s0["stateToken"]}));
    assert_eq!(back["stateToken"], s0["stateToken"]);
    assert_eq!(back["pending"]["stepId"], s0["pending"]["stepId"]);
    assert_ne!(
        back["ackToken"], s0["ackToken"],
        "a fresh attempt ack for the fork"
    );
    let recap = back["recap"]["text"]
        .as_str()
        .expect("a non-tip rehydrate explains the branch");
    assert!(recap.contains("original branch, step 1"), "{recap}");
    // Acking it forks: a new node beside the old child, same next step.
    let fork = server.exec(
        "continue_workflow",
        ack_args(&back, "forked branch, step 1"),
    );
    assert_ne!(fork["stateToken"], s1["stateToken"]);
    assert_eq!(fork["pending"]["stepId"], s1["pending"]["stepId"]);
    assert_eq!(
        fork["session"], s0["session"],
        "the fork stays in the same run"
    );
    // Both branches keep advancing independently.
    let on_fork = server.exec(
        "continue_workflow",
        ack_args(&fork, "forked branch, step 2"),
    );
    let on_old = server.exec(
        "continue_workflow",
        ack_args(&s2, "original branch, step 3"),
    );
    assert_eq!(on_fork["pending"]["stepId"], s2["pending"]["stepId"]);
    assert_ne!(on_old["stateToken"], on_fork["stateToken"]);
    assert!(server.close().success());
    // The CLI shows both branches.
    let session = s0["session"]["sessionId"].as_str().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_workrail"))
        .args(["inspect", session])
        .env("WORKRAIL_DATA_DIR", dir.path())
        .env("HOME", dir.path())
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for notes in ["original branch, step 2", "forked branch, step 2"] {
        assert!(text.contains(notes), "{text}");
    }
}

/// lock: L-TOKEN-ERRORS, L-ERR-ENVELOPE, L-ERR-DOMAIN-BOUNDARY
#[test]
fn a_tampered_token_is_rejected_with_bad_signature() {
    let dir = data_dir();
    let mut server = Server::start(dir.path());
    let s0 = server.exec("start_workflow", json!({"workflowId": "wr.coding_task"}));
    let state = s0["stateToken"].as_str().unwrap();
    // One byte changed in the payload, then one in the signature.
    for pos in [state.len() / 3, state.len() - 10] {
        let mut bytes = state.as_bytes().to_vec();
        bytes[pos] = if bytes[pos] == b'A' { b'B' } else { b'A' };
        let tampered = String::from_utf8(bytes).unwrap();
        for args in [
            json!({"stateToken": tampered}),
            json!({"stateToken": tampered, "ackToken": s0["ackToken"], "output": {"notesMarkdown": "x"}}),
        ] {
            let e = server.error("continue_workflow", args);
            assert_eq!(e["code"], "TOKEN_BAD_SIGNATURE", "{e}");
            assert_eq!(e["retry"]["kind"], "not_retryable");
        }
    }
    // The untouched tokens still work.
    let s1 = server.exec(
        "continue_workflow",
        ack_args(&s0, "after the tamper attempts"),
    );
    assert_execution_shape(&s1);
    assert!(server.close().success());
}

/// lock: L-TOKEN-ACK-IDEMPOTENT
#[test]
fn a_restarted_server_continues_from_the_same_tokens() {
    let dir = data_dir();
    let mut server = Server::start(dir.path());
    let s0 = server.exec(
        "start_workflow",
        json!({"workflowId": "wr.bug_investigation"}),
    );
    let s1 = server.exec("continue_workflow", ack_args(&s0, "before the restart"));
    assert!(server.close().success());

    let mut server = Server::start(dir.path());
    // The pending step is recovered from the token alone.
    let back = server.exec("continue_workflow", json!({"stateToken": s1["stateToken"]}));
    assert_eq!(back["pending"]["stepId"], s1["pending"]["stepId"]);
    // A replay of the pre-restart ack returns the recorded response.
    let replay = server.exec("continue_workflow", ack_args(&s0, "before the restart"));
    assert_eq!(replay, s1);
    // And the run advances from the pre-restart tokens, then completes.
    let s2 = server.exec("continue_workflow", ack_args(&s1, "after the restart"));
    assert_ne!(s2["pending"]["stepId"], s1["pending"]["stepId"]);
    let responses = drive_to_completion(&mut server, s2);
    assert_eq!(responses.last().unwrap()["isComplete"], true);
    assert!(server.close().success());
}

/// lock: L-ERR-NO-PANIC, L-CONTEXT-FAIL-FAST, L-ERR-BUDGET-DETAILS
#[test]
fn bad_arguments_are_tool_errors_over_stdio() {
    let dir = data_dir();
    let mut server = Server::start(dir.path());
    let e = server.error("start_workflow", json!({"workflowID": "wr.coding_task"}));
    assert_eq!(e["code"], "VALIDATION_ERROR");
    assert_eq!(e["details"]["field"], "workflowID");
    let e = server.error("continue_workflow", json!({}));
    assert_eq!(e["details"]["field"], "ackToken");
    assert_eq!(e["details"]["problem"], "missing_field");
    let e = server.error("no_such_tool", json!({}));
    assert_eq!(e["code"], "VALIDATION_ERROR");
    let e = server.error(
        "inspect_workflow",
        json!({"workflowId": "wr.does_not_exist"}),
    );
    assert_eq!(e["code"], "WORKFLOW_NOT_FOUND");
    // Over-budget context fails fast with the measured size, the maximum and the method.
    let blob = "x".repeat(300 * 1024);
    let e = server.error(
        "start_workflow",
        json!({"workflowId": "wr.coding_task", "context": {"blob": blob}}),
    );
    assert_eq!(e["code"], "VALIDATION_ERROR");
    assert!(
        e["details"]["measuredBytes"].as_u64().unwrap() > 256 * 1024,
        "{e}"
    );
    assert_eq!(e["details"]["maxBytes"], 256 * 1024);
    assert!(e["details"]["measurement"].as_str().is_some());
    // The server is still healthy afterwards.
    let ok = server.exec(
        "start_workflow",
        json!({"workflowId": "wr.coding_task", "context": {"ticket": "T-1"}}),
    );
    assert!(
        !ok.to_string().contains("T-1"),
        "context must not be echoed"
    );
    assert!(server.close().success());
}

/// Runs the `workrail` CLI on `data_dir` (beside a running server).
fn cli(data_dir: &Path, args: &[&str]) -> std::process::Output {
    let cwd = data_dir.ancestors().find(|p| p.is_dir()).unwrap();
    Command::new(env!("CARGO_BIN_EXE_workrail"))
        .args(args)
        .env("WORKRAIL_DATA_DIR", data_dir)
        .env("HOME", data_dir)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A server that keeps running while `workrail keys rotate` runs twice picks up the new
/// keyring: what it mints verifies in a fresh server, and what a fresh server mints verifies in
/// it. Before: it kept minting with a key no other process accepted any more.
///
/// lock: L-TOKEN-ROTATION, L-TOKEN-KEYRING-VERIFY
#[test]
fn a_running_server_picks_up_a_rotated_keyring_without_a_restart() {
    picks_up_rotations(false);
}

/// The same, once the keyring file has settled: the server then checks it with a `stat` per
/// use instead of a read, and a rotation still reaches it (a rotation gives the file another
/// inode and fresh change times).
///
/// lock: L-TOKEN-ROTATION, L-TOKEN-KEYRING-VERIFY
#[test]
fn a_running_server_picks_up_a_rotation_of_a_settled_keyring() {
    picks_up_rotations(true);
}

fn picks_up_rotations(settled: bool) {
    let dir = data_dir();
    let mut running = Server::start(dir.path());
    let s0 = running.exec("start_workflow", json!({"workflowId": "wr.coding_task"}));
    if settled {
        std::thread::sleep(workrail::store::fs::STAMP_SETTLE + Duration::from_millis(200));
        // Uses now rest on the file's stamp.
        running.exec("continue_workflow", json!({"stateToken": s0["stateToken"]}));
        running.exec("continue_workflow", json!({"stateToken": s0["stateToken"]}));
    }
    for _ in 0..2 {
        let out = cli(dir.path(), &["keys", "rotate"]);
        assert!(out.status.success(), "{out:?}");
    }
    // The tokens minted before both rotations no longer verify anywhere (one previous key is
    // kept), and the running server says so instead of using its stale keys.
    let refused = running.error("continue_workflow", json!({"stateToken": s0["stateToken"]}));
    assert_eq!(refused["code"], "TOKEN_BAD_SIGNATURE", "{refused}");
    // What it mints now is signed with the new current key: a fresh server accepts it.
    let fresh_in_running = running.exec("start_workflow", json!({"workflowId": "wr.coding_task"}));
    let mut fresh = Server::start(dir.path());
    fresh.exec(
        "continue_workflow",
        json!({"stateToken": fresh_in_running["stateToken"]}),
    );
    let minted_by_fresh = fresh.exec("start_workflow", json!({"workflowId": "wr.coding_task"}));
    running.exec(
        "continue_workflow",
        ack_args(&minted_by_fresh, "acknowledged by the long-running server"),
    );
    assert!(fresh.close().success());
    assert!(running.close().success());
}

/// A keyring deleted while servers run is written back from memory, so no token is lost; one
/// deleted while none runs is re-created with a note, and old tokens are refused as tokens of
/// the lost keyring (with the way back), never as "altered".
///
/// lock: L-TOKEN-KEY-MATERIAL
#[test]
fn a_deleted_keyring_is_restored_or_its_loss_is_explained() {
    let dir = data_dir();
    let keyring = dir.path().join("keys/keyring.json");
    let mut running = Server::start(dir.path());
    let s0 = running.exec("start_workflow", json!({"workflowId": "wr.coding_task"}));
    std::fs::remove_file(&keyring).unwrap();
    let s1 = running.exec(
        "continue_workflow",
        ack_args(&s0, "keys restored from memory"),
    );
    assert!(
        keyring.is_file(),
        "the running server wrote the keyring back"
    );
    assert!(running.close().success());
    let mut restarted = Server::start(dir.path());
    restarted.exec("continue_workflow", json!({"stateToken": s1["stateToken"]}));
    assert!(restarted.close().success());

    std::fs::remove_file(&keyring).unwrap();
    let mut after_loss = Server::start(dir.path());
    let refused = after_loss.error("continue_workflow", json!({"stateToken": s1["stateToken"]}));
    assert_eq!(refused["code"], "TOKEN_BAD_SIGNATURE", "{refused}");
    assert_eq!(
        refused["details"]["problem"], "keyring_recreated",
        "{refused}"
    );
    assert!(
        refused["message"].as_str().unwrap().contains("re-created")
            && refused["suggestion"]
                .as_str()
                .unwrap()
                .contains("resume_session"),
        "{refused}"
    );
    assert!(dir.path().join("keys/recreated.json").is_file());
    // The way back works: resume_session mints a token the new keyring signs.
    let resumed = after_loss.call("resume_session", json!({}));
    assert_eq!(resumed["isError"], false, "{resumed}");
    let token = resumed["structuredContent"]["candidates"][0]["stateToken"].clone();
    let back = after_loss.exec("continue_workflow", json!({"stateToken": token}));
    assert_eq!(back["pending"]["stepId"], s1["pending"]["stepId"]);
    assert!(after_loss.close().success());
}

/// A damaged keyring is its own error naming the file and the fix, not a generic one.
///
/// lock: L-TOKEN-KEY-MATERIAL
#[test]
fn a_damaged_keyring_is_named_with_its_fix() {
    let dir = data_dir();
    let mut server = Server::start(dir.path());
    let listed = server.call("list_workflows", json!({}));
    assert_eq!(listed["isError"], false, "{listed}");
    assert!(server.close().success());
    std::fs::write(dir.path().join("keys/keyring.json"), b"{\"v\": 1, \"curr").unwrap();
    let out = cli(dir.path(), &["inspect", "sess_0000000000000000"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("keys/keyring.json")
            && stderr.contains("damaged")
            && stderr.contains("backup"),
        "{stderr}"
    );
    assert!(!stderr.contains("content address"), "{stderr}");
}

/// A small tmpfs mounted for one test (a real full disk), unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// `None` when this machine does not let the test mount (not root, or no mount privilege).
    fn mount(bytes: u64) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={bytes},mode=0700"),
                "tmpfs",
            ])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .ok()?;
        status.success().then_some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Fills the filesystem of `file` until it says ENOSPC.
fn fill_disk(file: &Path) {
    let mut out = std::fs::File::create(file).unwrap();
    let chunk = vec![0u8; 4096];
    loop {
        if let Err(e) = out.write_all(&chunk) {
            assert_eq!(e.raw_os_error(), Some(28), "expected ENOSPC, got {e}");
            break;
        }
    }
    let _ = out.sync_all();
}

/// A real full disk under a running server: the ack is refused with `ENOSPC` and the path,
/// retryable, saying nothing was committed; reads still work; once space is freed the same call
/// succeeds, and the session is healthy for a fresh process. Skipped (with a message) only where
/// the test may not mount a tmpfs.
///
/// lock: L-STORE-ATOMIC-WRITE, L-ERR-SELF-CORRECTING
#[test]
fn a_full_disk_is_reported_with_its_path_and_the_same_call_succeeds_once_space_is_freed() {
    let Some(disk) = Tmpfs::mount(8 * 1024 * 1024) else {
        eprintln!("skipped: mounting a tmpfs needs root (this machine refused it)");
        return;
    };
    let data = disk.path().join("data");
    let mut server = Server::start(&data);
    let s0 = server.exec("start_workflow", json!({"workflowId": "wr.coding_task"}));
    let filler = disk.path().join("filler");
    fill_disk(&filler);

    let call = ack_args(&s0, "written while the disk was full");
    for _ in 0..2 {
        let refused = server.error("continue_workflow", call.clone());
        assert_eq!(refused["code"], "STORE_IO_ERROR", "{refused}");
        assert_eq!(refused["retry"]["kind"], "retryable_immediate", "{refused}");
        let details = &refused["details"];
        assert_eq!(details["errno"], "ENOSPC", "{refused}");
        assert_eq!(details["committed"], "nothing", "{refused}");
        let path = details["path"].as_str().unwrap();
        assert!(!path.is_empty() && !path.starts_with('/'), "{refused}");
        assert!(
            refused["suggestion"]
                .as_str()
                .unwrap()
                .contains("Free disk space"),
            "{refused}"
        );
    }
    // Reads need no space.
    let back = server.exec("continue_workflow", json!({"stateToken": s0["stateToken"]}));
    assert_eq!(back["pending"], s0["pending"]);

    std::fs::remove_file(&filler).unwrap();
    let s1 = server.exec("continue_workflow", call.clone());
    assert_ne!(s1["pending"]["stepId"], s0["pending"]["stepId"]);
    assert_eq!(server.exec("continue_workflow", call), s1, "then a replay");
    assert!(server.close().success());

    let session = s0["session"]["sessionId"].as_str().unwrap();
    let inspected = cli(&data, &["inspect", session]);
    let text = String::from_utf8_lossy(&inspected.stdout);
    assert!(
        inspected.status.success() && text.contains("health healthy"),
        "{text}"
    );
    let mut fresh = Server::start(&data);
    fresh.exec(
        "continue_workflow",
        ack_args(&s1, "after the disk was freed"),
    );
    assert!(fresh.close().success());
}

/// A server started on a full disk serves anyway (decision D220): its record in `servers/`
/// (which only shows it in the Console) cannot be written, so it says so on stderr and retries
/// in the background. A rehydrate answers, an ack gets the clear retryable `ENOSPC` error; once
/// space is freed the record appears without a restart, the same ack succeeds, and a clean
/// exit removes the record. Skipped (with a message) only where the test may not mount a tmpfs.
///
/// lock: L-ERR-SELF-CORRECTING
/// decision: D220
#[test]
fn a_server_started_on_a_full_disk_serves_and_writes_its_record_once_space_is_freed() {
    let Some(disk) = Tmpfs::mount(8 * 1024 * 1024) else {
        eprintln!("skipped: mounting a tmpfs needs root (this machine refused it)");
        return;
    };
    let data = disk.path().join("data");
    let mut first = Server::start(&data);
    let s0 = first.exec("start_workflow", json!({"workflowId": "wr.coding_task"}));
    assert!(first.close().success());
    let records = |data: &Path| -> Vec<String> {
        std::fs::read_dir(data.join("servers"))
            .map(|dir| {
                dir.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(
        records(&data),
        Vec::<String>::new(),
        "a clean exit removes the record"
    );

    let filler = disk.path().join("filler");
    fill_disk(&filler);
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("stderr");
    let mut server =
        Server::spawn_with_stderr(&data, Stdio::from(std::fs::File::create(&log).unwrap()))
            .handshake();
    let back = server.exec("continue_workflow", json!({"stateToken": s0["stateToken"]}));
    assert_eq!(back["pending"], s0["pending"]);
    let call = ack_args(&s0, "written once the disk had room");
    let refused = server.error("continue_workflow", call.clone());
    assert_eq!(refused["details"]["errno"], "ENOSPC", "{refused}");
    assert!(
        !records(&data).iter().any(|f| f.ends_with(".json")),
        "{:?}",
        records(&data)
    );
    let warning = std::fs::read_to_string(&log).unwrap();
    assert!(
        warning.contains("serving without this server's record")
            && warning.contains("No space left on device")
            && warning.contains("free disk space"),
        "{warning}"
    );

    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !records(&data).iter().any(|f| f.ends_with(".json")) {
        assert!(
            Instant::now() < deadline,
            "no record 20 s after space was freed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let listed = workrail::control::servers::list_servers(&data).unwrap();
    assert_eq!(listed.live().count(), 1, "{listed:?}");
    let s1 = server.exec("continue_workflow", call);
    assert_ne!(s1["pending"]["stepId"], s0["pending"]["stepId"]);
    assert!(server.close().success());
    assert_eq!(
        records(&data),
        Vec::<String>::new(),
        "a clean exit removes the record"
    );
}

/// A file store that fails to open for an I/O error at start (here the keyring reads as a
/// directory: EISDIR, as an EIO would) does not end the server (decision D221): it answers
/// `initialize`, each tool call answers the clear retryable error, and once the keyring reads
/// again the next call opens the store and the session's old token still works, with no
/// restart.
///
/// lock: L-ERR-SELF-CORRECTING
/// decision: D221
#[test]
fn a_file_store_that_fails_to_open_for_an_io_error_is_opened_on_a_later_call() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut first = Server::start(&data);
    let s0 = first.exec("start_workflow", json!({"workflowId": "wr.coding_task"}));
    assert!(first.close().success());
    let keyring = data.join("keys").join("keyring.json");
    let aside = data.join("keys").join("keyring.aside");
    std::fs::rename(&keyring, &aside).unwrap();
    std::fs::create_dir(&keyring).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&keyring, std::fs::Permissions::from_mode(0o700)).unwrap();
    }

    let mut server = Server::start(&data);
    let refused = server.error("continue_workflow", json!({"stateToken": s0["stateToken"]}));
    assert_eq!(refused["code"], "STORE_IO_ERROR", "{refused}");
    assert_eq!(refused["retry"]["kind"], "retryable_after_ms", "{refused}");
    let message = refused["message"].as_str().unwrap();
    assert!(
        message.contains("keyring") && message.contains("recorded nothing"),
        "{refused}"
    );

    std::fs::remove_dir(&keyring).unwrap();
    std::fs::rename(&aside, &keyring).unwrap();
    let back = server.exec("continue_workflow", json!({"stateToken": s0["stateToken"]}));
    assert_eq!(back["pending"], s0["pending"]);
    server.exec(
        "continue_workflow",
        ack_args(&s0, "once the keyring read again"),
    );
    assert!(server.close().success());
}

/// Every line a client sends gets an answer, so no client waits forever: a truncated request, a
/// line that is not JSON, a lone-surrogate escape, arguments sent as a string, a line over the
/// size limit. The id is echoed when it can be read, and the server goes on serving.
///
/// lock: L-ERR-NO-PANIC
#[test]
fn every_malformed_line_gets_a_json_rpc_error_and_the_server_goes_on() {
    let dir = data_dir();
    let mut server = Server::start(dir.path());
    let cases: [(&[u8], Value, i64); 6] = [
        (
            br#"{"jsonrpc":"2.0","id":101,"method":"tools/call","params":{"name":"list_workflows","arguments":{}"#,
            json!(101),
            -32700,
        ),
        (b"this is not json", Value::Null, -32700),
        (
            br#"{"jsonrpc":"2.0","id":"s-102","method":"tools/call","params":{"name":"inspect_workflow","arguments":{"workflowId":"\ud800"}}}"#,
            json!("s-102"),
            -32700,
        ),
        (
            br#"{"jsonrpc":"2.0","id":103,"method":"tools/call","params":{"name":"list_workflows","arguments":"{}"}}"#,
            json!(103),
            -32602,
        ),
        (
            br#"{"jsonrpc":"2.0","id":104,"method":"tools/call","params":{"arguments":{}}}"#,
            json!(104),
            -32602,
        ),
        (
            br#"{"jsonrpc":"2.0","id":105,"method":"tools/call","params":{"name":"x"}} trailing"#,
            json!(105),
            -32700,
        ),
    ];
    for (line, id, code) in cases {
        server.send_raw(line);
        let answer = server.response_to(&id);
        assert_eq!(
            answer["error"]["code"],
            code,
            "{}: {answer}",
            String::from_utf8_lossy(line)
        );
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| m.len() > 20),
            "{answer}"
        );
    }
    // A line over the limit, with its id readable at the start.
    let mut huge = br#"{"jsonrpc":"2.0","id":106,"method":"tools/call","params":{"name":"list_workflows","arguments":{"pad":""#.to_vec();
    huge.extend(std::iter::repeat_n(b'x', 9 * 1024 * 1024));
    huge.extend_from_slice(br#""}}}"#);
    server.send_raw(&huge);
    let answer = server.response_to(&json!(106));
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("limit")
    );
    // Still serving.
    let listed = server.call("list_workflows", json!({}));
    assert_eq!(listed["isError"], false, "{listed}");
    assert!(server.close().success());
}

/// Two `tools/call start_workflow` with one id, sent back to back (one write) before the first
/// is answered: the first runs, the second gets a JSON-RPC Invalid Request error naming the id
/// and starts nothing, so each request gets exactly one answer (D137). Before, both ran (two
/// sessions) and the pair got one answer or two, by timing. The id is free again once answered.
///
/// Whether the server reads the second line before it answers the first is up to the scheduler:
/// on a loaded machine the first start can be answered in between, and then the second is a new
/// request (its id is free again) and rightly runs. So every attempt checks what must hold either
/// way (one answer per request, one session per answered start, none for a refused one), and the
/// refusal itself must be seen within a few attempts.
///
/// lock: L-ERR-SELF-CORRECTING
#[test]
fn a_request_reusing_an_id_in_flight_gets_an_error_and_starts_nothing() {
    let dir = data_dir();
    let mut server = Server::start(dir.path());
    let sessions = || match std::fs::read_dir(dir.path().join("sessions")) {
        Ok(entries) => entries.count(),
        Err(_) => 0,
    };
    let mut refused_once = false;
    for attempt in 0..8 {
        let id = format!("dup-{attempt}");
        let start = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "start_workflow", "arguments": {"workflowId": "wr.coding_task"}}});
        let line = serde_json::to_string(&start).unwrap();
        let before = sessions();
        server.send_raw(format!("{line}\n{line}").as_bytes());
        // Every answer until a later ping's, which comes after the call in progress (D67), then a
        // little longer for any straggler.
        let barrier = format!("barrier-{attempt}");
        server.send(&json!({"jsonrpc": "2.0", "id": barrier, "method": "ping"}));
        let mut answers = Vec::new();
        let mut barrier_at = None;
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let until = barrier_at.map_or(deadline, |at: Instant| at + Duration::from_millis(500));
            let left = until.saturating_duration_since(Instant::now());
            match server.lines.recv_timeout(left) {
                Ok(line) => {
                    let value: Value = serde_json::from_str(&line).unwrap();
                    if value["id"] == barrier.as_str() {
                        barrier_at = Some(Instant::now());
                    } else {
                        answers.push(value);
                    }
                }
                Err(RecvTimeoutError::Timeout) if barrier_at.is_some() => break,
                Err(e) => panic!("answers so far {answers:?}: {e}"),
            }
        }
        assert_eq!(answers.len(), 2, "one answer per request: {answers:#?}");
        assert!(
            answers.iter().all(|a| a["id"] == id.as_str()),
            "{answers:#?}"
        );
        let (errors, results): (Vec<&Value>, Vec<&Value>) =
            answers.iter().partition(|a| a.get("error").is_some());
        assert!(
            results.iter().all(|r| r["result"]["isError"] == false),
            "{answers:#?}"
        );
        assert_eq!(
            sessions() - before,
            results.len(),
            "one session per answered start, none for a refused one"
        );
        match errors.as_slice() {
            [] => assert_eq!(results.len(), 2, "{answers:#?}"),
            [refusal] => {
                let error = &refusal["error"];
                assert_eq!(error["code"], -32600, "{error}");
                let message = error["message"].as_str().unwrap();
                assert!(
                    message.contains(&format!(r#"id "{id}" is still in flight"#))
                        && message.contains("unique id")
                        && message.contains("not run"),
                    "{message}"
                );
                // Answered, the id may be used again.
                let before = sessions();
                server.send(&start);
                let again = server.response_to(&json!(id));
                assert_eq!(again["result"]["isError"], false, "{again}");
                assert_eq!(sessions(), before + 1);
                refused_once = true;
                break;
            }
            _ => panic!("two refusals for one id: {answers:#?}"),
        }
    }
    assert!(
        refused_once,
        "in 8 attempts the second request was never refused while in flight"
    );
    assert!(server.close().success());
}

/// What an agent naturally gets wrong in `output.artifacts` is refused before anything is
/// written, saying what and how to fix it: an artifact without `kind`, hundreds of artifacts,
/// a huge artifact (never `INTERNAL_ERROR`). The same tokens then work.
///
/// lock: L-ERR-SELF-CORRECTING, L-ERR-BUDGET-DETAILS
#[test]
fn misshapen_and_oversize_artifacts_are_validation_errors_and_nothing_is_recorded() {
    let dir = data_dir();
    let mut server = Server::start(dir.path());
    let s0 = server.exec("start_workflow", json!({"workflowId": "wr.coding_task"}));
    let with = |artifacts: Value| json!({"ackToken": s0["ackToken"], "output": {"notesMarkdown": "done", "artifacts": artifacts}});
    let no_kind = server.error(
        "continue_workflow",
        with(json!([{"kind": "wr.note", "text": "fine"}, {"text": "no kind"}])),
    );
    assert_eq!(no_kind["code"], "VALIDATION_ERROR", "{no_kind}");
    assert_eq!(no_kind["details"]["field"], "output.artifacts[1].kind");
    assert!(
        no_kind["message"]
            .as_str()
            .unwrap()
            .contains("has no `kind`"),
        "{no_kind}"
    );
    let many: Vec<Value> = (0..300)
        .map(|i| json!({"kind": "wr.note", "text": format!("note {i}")}))
        .collect();
    let too_many = server.error("continue_workflow", with(Value::Array(many)));
    assert_eq!(too_many["code"], "VALIDATION_ERROR", "{too_many}");
    assert_eq!(too_many["details"]["maxCount"], 64);
    let huge = server.error(
        "continue_workflow",
        with(json!([{"kind": "wr.note", "text": "x".repeat(600 * 1024)}])),
    );
    assert_eq!(huge["code"], "VALIDATION_ERROR", "{huge}");
    assert!(huge["details"]["maxBytes"].is_number(), "{huge}");
    let checkpoint = server.error(
        "checkpoint_workflow",
        json!({"stateToken": s0["stateToken"], "checkpointToken": s0["checkpointToken"], "output": {"artifacts": [{"note": 1}]}}),
    );
    assert_eq!(checkpoint["code"], "VALIDATION_ERROR", "{checkpoint}");
    // Nothing was recorded: the same ack now advances.
    let s1 = server.exec("continue_workflow", ack_args(&s0, "planned"));
    assert_ne!(s1["pending"]["stepId"], s0["pending"]["stepId"]);
    assert!(server.close().success());
}

/// An unknown workflow id gets "did you mean" for a typo, a missing namespace or another case,
/// in `start_workflow` and `inspect_workflow`, and the suggested id works.
///
/// lock: L-ERR-SELF-CORRECTING
#[test]
fn an_unknown_workflow_id_gets_did_you_mean() {
    let dir = data_dir();
    let mut server = Server::start(dir.path());
    for (tool, typed, meant) in [
        ("start_workflow", "wr.coding_tsk", "wr.coding_task"),
        ("inspect_workflow", "coding_task", "wr.coding_task"),
        ("start_workflow", "WR.MR_REVIEW", "wr.mr_review"),
        (
            "inspect_workflow",
            "wr.bug_invstigation",
            "wr.bug_investigation",
        ),
    ] {
        let refused = server.error(tool, json!({"workflowId": typed}));
        assert_eq!(refused["code"], "WORKFLOW_NOT_FOUND", "{refused}");
        assert_eq!(
            refused["details"]["didYouMean"][0], meant,
            "{typed}: {refused}"
        );
        assert!(
            refused["message"]
                .as_str()
                .unwrap()
                .contains(&format!("Did you mean `{meant}`")),
            "{refused}"
        );
    }
    let nothing_close = server.error("start_workflow", json!({"workflowId": "deploy_to_prod"}));
    assert_eq!(
        nothing_close["details"]["didYouMean"],
        json!([]),
        "{nothing_close}"
    );
    assert!(
        nothing_close["suggestion"]
            .as_str()
            .unwrap()
            .contains("wr.coding_task"),
        "the available ids are listed: {nothing_close}"
    );
    server.exec("start_workflow", json!({"workflowId": "wr.coding_task"}));
    assert!(server.close().success());
}

/// `preferences` in the shape responses show it (an object) works like the locked delta list,
/// in `start_workflow` and `continue_workflow`; another shape names both accepted ones.
///
/// lock: L-PREF-NODE-ATTACHED
#[test]
fn preferences_are_accepted_as_the_object_responses_show() {
    let dir = data_dir();
    let mut server = Server::start(dir.path());
    let s0 = server.exec(
        "start_workflow",
        json!({"workflowId": "wr.coding_task", "preferences": {"riskPolicy": "conservative"}}),
    );
    assert_eq!(s0["preferences"]["riskPolicy"], "conservative", "{s0}");
    let mut ack = ack_args(&s0, "planned");
    ack["preferences"] = json!({"autonomy": "full_auto_never_stop", "riskPolicy": "balanced"});
    let s1 = server.exec("continue_workflow", ack);
    assert_eq!(
        s1["preferences"],
        json!({"autonomy": "full_auto_never_stop", "riskPolicy": "balanced"}),
        "{s1}"
    );
    let refused = server.error(
        "start_workflow",
        json!({"workflowId": "wr.coding_task", "preferences": "guided"}),
    );
    assert_eq!(refused["code"], "VALIDATION_ERROR", "{refused}");
    assert!(
        refused["message"].as_str().unwrap().contains("riskPolicy"),
        "both shapes are named: {refused}"
    );
    assert!(server.close().success());
}

/// The headline rewind, driven the way an agent follows only the text: the user rewinds, the
/// agent redoes the step and sends its old ackToken with new notes; the text says the notes were
/// not recorded and gives the ackToken to send them with; following it records them on a new
/// branch, next to the old one.
///
/// lock: L-TOKEN-REPLAY-FACTS, L-DAG-NON-TIP-AUTO-FORK
#[test]
fn a_rewound_agent_following_the_text_records_its_new_notes_on_a_new_branch() {
    let dir = data_dir();
    let mut server = Server::start(dir.path());
    let s0 = server.exec("start_workflow", json!({"workflowId": "wr.coding_task"}));
    let s1 = server.exec("continue_workflow", ack_args(&s0, "first attempt: plan A"));
    // Rewind: the old tokens, new notes.
    let result = server.call("continue_workflow", ack_args(&s0, "second attempt: plan B"));
    assert_eq!(result["isError"], false, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap().to_owned();
    assert!(
        text.contains("REPLAY") && text.contains("NOT recorded"),
        "{text}"
    );
    assert_eq!(
        result["structuredContent"]["replay"]["notRecorded"],
        json!(["output.notesMarkdown"])
    );
    // Follow the text: the ackToken line of the REPLAY section, and the same output.
    let section = text.split("## REPLAY").nth(1).unwrap();
    let fork_ack = section
        .lines()
        .find_map(|l| l.strip_prefix("ackToken: "))
        .expect("the REPLAY section names the ackToken to use")
        .trim()
        .to_owned();
    let forked = server.exec(
        "continue_workflow",
        json!({"ackToken": fork_ack, "output": {"notesMarkdown": "second attempt: plan B"}}),
    );
    assert!(forked.get("replay").is_none(), "{forked}");
    assert_ne!(forked["stateToken"], s1["stateToken"]);
    assert_eq!(forked["pending"]["stepId"], s1["pending"]["stepId"]);
    assert!(server.close().success());
    // Both branches are durable.
    let session = s0["session"]["sessionId"].as_str().unwrap();
    let inspected = cli(dir.path(), &["inspect", session]);
    let shown = String::from_utf8_lossy(&inspected.stdout);
    assert!(
        shown.contains("plan A") && shown.contains("plan B"),
        "{shown}"
    );
}

/// A project workflow that does not compile is visible: `list_workflows` names the file, the
/// declared id and its first errors; `start_workflow` and `inspect_workflow` on that id answer
/// `WORKFLOW_INVALID` with the errors, not `WORKFLOW_NOT_FOUND`.
///
/// lock: L-ERR-SELF-CORRECTING
#[test]
fn a_broken_project_workflow_is_listed_with_its_errors_and_refused_as_invalid() {
    let dir = data_dir();
    let project = dir.path().join("workflows");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("broken.json"),
        r#"{"id": "project.broken", "name": "Broken", "description": "No steps.", "steps": []}"#,
    )
    .unwrap();
    std::fs::write(project.join("garbled.json"), "{ not json").unwrap();
    let mut server = Server::start(&dir.path().join("data"));
    let listed = server.call("list_workflows", json!({}));
    assert_eq!(listed["isError"], false, "{listed}");
    let problems = listed["structuredContent"]["problems"].as_array().unwrap();
    let broken = problems
        .iter()
        .find(|p| p["workflowId"] == "project.broken")
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(broken["problem"], "invalid");
    assert!(
        broken["sourceRef"]
            .as_str()
            .unwrap()
            .contains("broken.json")
    );
    // Where the file is on this machine, so its author can open it.
    let path = broken["path"]
        .as_str()
        .unwrap_or_else(|| panic!("{broken}"));
    assert_eq!(std::path::Path::new(path), project.join("broken.json"));
    assert!(!broken["errors"].as_array().unwrap().is_empty(), "{broken}");
    assert!(
        problems
            .iter()
            .any(|p| p["sourceRef"].as_str().unwrap().contains("garbled.json")),
        "{listed}"
    );
    let text = listed["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("did not load") && text.contains(&format!("(file {path})")),
        "{text}"
    );
    for tool in ["start_workflow", "inspect_workflow"] {
        let refused = server.error(tool, json!({"workflowId": "project.broken"}));
        assert_eq!(refused["code"], "WORKFLOW_INVALID", "{refused}");
        assert!(
            refused["message"].as_str().unwrap().contains(path),
            "{refused}"
        );
        assert!(
            refused["message"]
                .as_str()
                .unwrap()
                .contains("does not load"),
            "{refused}"
        );
    }
    assert!(server.close().success());
}

fn two_step_flow(second_prompt: &str) -> String {
    json!({
        "id": "project.flow",
        "name": "Flow",
        "description": "Two steps.",
        "steps": [
            {"id": "first", "title": "First", "prompt": "Do the first thing."},
            {"id": "second", "title": "Second", "prompt": second_prompt},
        ],
    })
    .to_string()
}

fn drift_of(out: &Value) -> Option<Value> {
    out["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|w| w["code"] == "pinned_workflow_drift")
        .map(|w| w["pinnedDrift"].clone())
}

/// An edited, broken or removed workflow file is reported on rehydrate as a structured drift
/// warning, while the run goes on with the version it pinned; duplicates are listed.
/// lock: L-HASH-PINNED-DRIFT
#[test]
fn a_workflow_edited_mid_run_is_reported_and_the_run_keeps_its_pinned_version() {
    let dir = data_dir();
    let project = dir.path().join("workflows");
    std::fs::create_dir_all(&project).unwrap();
    let file = project.join("flow.json");
    std::fs::write(&file, two_step_flow("Do the ORIGINAL second thing.")).unwrap();
    let mut server = Server::start(&dir.path().join("data"));
    let started = server.exec("start_workflow", json!({"workflowId": "project.flow"}));
    let pinned = started["stateToken"].clone();
    let rehydrate = json!({"stateToken": pinned});
    assert_eq!(
        drift_of(&server.exec("continue_workflow", rehydrate.clone())),
        None,
        "an unchanged source is in sync"
    );

    // Edited: the warning names both hashes, in text and structure.
    std::fs::write(&file, two_step_flow("Do the EDITED second thing.")).unwrap();
    let result = server.call("continue_workflow", rehydrate.clone());
    let out = result["structuredContent"].clone();
    let drift = drift_of(&out).unwrap_or_else(|| panic!("{out}"));
    assert_eq!(drift["workflowId"], "project.flow");
    assert_eq!(drift["status"]["kind"], "changed", "{drift}");
    assert_ne!(drift["status"]["currentHash"], drift["pinnedHash"]);
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("pinned_workflow_drift") && text.contains("start a new run"),
        "{text}"
    );
    // The run goes on with the pinned version.
    let next = server.exec("continue_workflow", ack_args(&started, "First done."));
    assert!(
        next["pending"]["prompt"]
            .as_str()
            .unwrap()
            .contains("ORIGINAL"),
        "{next}"
    );
    // A replayed ack stays byte-identical whatever the sources say (no drift inside it).
    let replay = server.exec("continue_workflow", ack_args(&started, "First done."));
    assert_eq!(replay, next);
    assert_eq!(drift_of(&next), None);

    // Broken, then removed.
    std::fs::write(
        &file,
        r#"{"id": "project.flow", "name": "Flow", "description": "x", "steps": []}"#,
    )
    .unwrap();
    let out = server.exec("continue_workflow", rehydrate.clone());
    assert_eq!(
        drift_of(&out).unwrap()["status"]["kind"],
        "source_invalid",
        "{out}"
    );
    std::fs::remove_file(&file).unwrap();
    let out = server.exec("continue_workflow", rehydrate.clone());
    assert_eq!(
        drift_of(&out).unwrap()["status"]["kind"],
        "source_missing",
        "{out}"
    );

    // Restored byte for byte: in sync again.
    std::fs::write(&file, two_step_flow("Do the ORIGINAL second thing.")).unwrap();
    assert_eq!(drift_of(&server.exec("continue_workflow", rehydrate)), None);

    // The same id in a second project directory: listed as a duplicate, the first one wins.
    let other = dir.path().join(".workrail").join("workflows");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("copy.json"), two_step_flow("A copy.")).unwrap();
    let listed = server.call("list_workflows", json!({}));
    let problems = listed["structuredContent"]["problems"].as_array().unwrap();
    let duplicate = problems
        .iter()
        .find(|p| p["problem"] == "duplicate_id")
        .unwrap_or_else(|| panic!("{listed}"));
    assert_eq!(duplicate["workflowId"], "project.flow");
    assert!(
        duplicate["sourceRef"]
            .as_str()
            .unwrap()
            .contains("flow.json"),
        "the lower-precedence copy is the one reported: {duplicate}"
    );
    assert!(server.close().success());
}

fn guidance_of(out: &Value) -> Vec<String> {
    out["pending"]["capabilityGuidance"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| l.as_str().unwrap().to_owned())
        .collect()
}

/// Capability guidance is said once per branch (when the run first reaches a step that is not
/// a probe) and again on a rehydrate, never in every step's prompt, and never for a capability
/// the branch already observed (decision D59).
#[test]
fn capability_guidance_appears_once_and_not_after_an_observation() {
    let dir = data_dir();
    let mut server = Server::start(&dir.path().join("data"));
    let started = server.call("start_workflow", json!({"workflowId": "wr.mr_review"}));
    let first = started["structuredContent"].clone();
    let guidance = guidance_of(&first);
    assert_eq!(guidance.len(), 1, "{first}");
    assert!(guidance[0].contains("Delegation") && guidance[0].contains("preferred"));
    let text = started["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains("## Capabilities (this run)\n- Delegation"),
        "{text}"
    );
    assert!(
        !first["pending"]["prompt"]
            .as_str()
            .unwrap()
            .contains("Delegation"),
        "the step's own prompt carries no capability boilerplate"
    );

    // A checkpoint repeats the step, not the guidance; the next step has none.
    let checkpoint = server.exec(
        "checkpoint_workflow",
        json!({"stateToken": first["stateToken"], "checkpointToken": first["checkpointToken"], "output": {"notesMarkdown": "Halfway."}}),
    );
    assert!(guidance_of(&checkpoint).is_empty(), "{checkpoint}");
    let second = server.exec("continue_workflow", ack_args(&first, "Intent understood."));
    assert!(guidance_of(&second).is_empty(), "{second}");
    for step in [&first, &second] {
        let prompt = step["pending"]["prompt"].as_str().unwrap();
        assert!(!prompt.contains("wr.capability_observation"), "{prompt}");
    }
    // A rehydrate (maybe a new chat) says it again.
    let rehydrated = server.exec(
        "continue_workflow",
        json!({"stateToken": second["stateToken"]}),
    );
    assert_eq!(guidance_of(&rehydrated), guidance);

    // Once the branch observed the capability, nothing is repeated, even on a rehydrate.
    let observed = server.exec(
        "continue_workflow",
        json!({
            "stateToken": second["stateToken"],
            "ackToken": second["ackToken"],
            "output": {
                "notesMarkdown": "Files surveyed sequentially.",
                "artifacts": [{
                    "kind": "wr.capability_observation",
                    "capability": "delegation",
                    "status": "unavailable",
                    "failureCode": "tool_missing",
                    "evidence": "This client offers no subagent tool."
                }]
            }
        }),
    );
    assert_eq!(observed["kind"], "ok", "{observed}");
    let again = server.exec(
        "continue_workflow",
        json!({"stateToken": observed["stateToken"]}),
    );
    assert!(guidance_of(&again).is_empty(), "{again}");

    // Rewinding to the first step's tokens replays its recorded answer, guidance included.
    let replay = server.exec("continue_workflow", ack_args(&first, "Intent understood."));
    assert_eq!(replay, second);
    assert!(server.close().success());
}

/// A required capability's injected probe carries its own instructions; the guidance comes
/// with the first real step, for what the probe did not observe.
#[test]
fn capability_guidance_skips_probes_and_what_they_observed() {
    let dir = data_dir();
    let project = dir.path().join("workflows");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("research.json"),
        json!({
            "id": "project.research",
            "name": "Research",
            "description": "Needs the web.",
            "capabilities": {"web_browsing": "required", "delegation": "preferred"},
            "features": ["wr.features.capabilities"],
            "steps": [
                {"id": "search", "title": "Search", "prompt": "Search the web for the error."},
                {"id": "report", "title": "Report", "prompt": "Write what you found."}
            ]
        })
        .to_string(),
    )
    .unwrap();
    let mut server = Server::start(&dir.path().join("data"));
    let probe = server.exec("start_workflow", json!({"workflowId": "project.research"}));
    assert!(
        probe["pending"]["stepId"]
            .as_str()
            .unwrap()
            .starts_with("capability_probe"),
        "{probe}"
    );
    assert!(guidance_of(&probe).is_empty(), "{probe}");
    let search = server.exec(
        "continue_workflow",
        json!({
            "stateToken": probe["stateToken"],
            "ackToken": probe["ackToken"],
            "output": {
                "notesMarkdown": "Fetched https://example.com successfully.",
                "artifacts": [{
                    "kind": "wr.capability_observation",
                    "capability": "web_browsing",
                    "status": "available",
                    "evidence": "Fetched https://example.com"
                }]
            }
        }),
    );
    assert_eq!(search["pending"]["stepId"], "search", "{search}");
    let guidance = guidance_of(&search);
    assert_eq!(guidance.len(), 1, "{search}");
    assert!(guidance[0].starts_with("Delegation"), "{guidance:?}");
    assert!(server.close().success());
}

/// A delegation probe acknowledged without its observation is blocked with a fix whose
/// example observes delegation, evidence included: nothing in it speaks of browsing the web,
/// so an agent that copies it records no false evidence.
///
/// lock: L-ERR-SELF-CORRECTING
#[test]
fn a_blocked_delegation_probe_suggests_delegation_evidence_only() {
    let dir = data_dir();
    let project = dir.path().join("workflows");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("fanout.json"),
        json!({
            "id": "project.fanout",
            "name": "Fan out",
            "description": "Needs subagents.",
            "capabilities": {"delegation": "required"},
            "steps": [{"id": "split", "title": "Split", "prompt": "Split the work."}]
        })
        .to_string(),
    )
    .unwrap();
    let mut server = Server::start(&dir.path().join("data"));
    let probe = server.exec("start_workflow", json!({"workflowId": "project.fanout"}));
    assert!(
        probe["pending"]["stepId"]
            .as_str()
            .unwrap()
            .starts_with("capability_probe"),
        "{probe}"
    );
    let call = json!({
        "stateToken": probe["stateToken"],
        "ackToken": probe["ackToken"],
        "output": {"notesMarkdown": "Tried it."}
    });
    let blocked = server.call("continue_workflow", call);
    let text = text_of(&blocked);
    let structured = &blocked["structuredContent"];
    assert_eq!(structured["kind"], "blocked", "{blocked}");
    let everything = format!("{text}\n{structured}");
    assert!(
        !everything.contains("example.com") && !everything.to_lowercase().contains("web"),
        "{everything}"
    );
    assert!(everything.contains("subagent"), "{everything}");
    assert!(server.close().success());
}

fn warning_codes(out: &Value) -> Vec<String> {
    out["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w| w["code"].as_str().unwrap().to_owned())
        .collect()
}

fn text_of(result: &Value) -> String {
    result["content"][0]["text"].as_str().unwrap().to_owned()
}

/// The agent-facing texts of issue "a rewound chat never loses work", driven over stdio the way
/// an agent follows them: the header, the required artifact in "Next:", a block and the resend
/// with the old ack, a checkpoint, truncated notes, a pending step under a complete run, an
/// explained fork, and `resume_session`'s recency fallback.
/// lock: L-MCP-EXECUTION-RESPONSE, L-DAG-NON-TIP-AUTO-FORK
#[test]
fn an_agent_following_only_the_text_gets_every_explanation_over_stdio() {
    let dir = data_dir();
    let project = dir.path().join("workflows");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("demo.json"), protocol_support::DEMO).unwrap();
    let mut server = Server::start(&dir.path().join("data"));

    // The header: session, mode in words, risk policy.
    let started = server.call("start_workflow", json!({"workflowId": "project.demo"}));
    let s0 = started["structuredContent"].clone();
    let header = text_of(&started).lines().nth(1).unwrap().to_owned();
    let session = s0["session"]["sessionId"].as_str().unwrap();
    assert!(
        header.contains(session)
            && header.contains("mode: guided (stop and ask the user")
            && header.contains("risk policy: conservative"),
        "{header}"
    );
    let s1 = server.exec("continue_workflow", ack_args(&s0, "Planned two slices."));
    let decide = server.call("continue_workflow", ack_args(&s1, "Implemented slice one."));
    let at_decide = decide["structuredContent"].clone();
    assert_eq!(at_decide["pending"]["stepId"], "decide");
    // The required artifact's exact shape, where the agent looks for what to send.
    let text = text_of(&decide);
    let next = text.lines().rfind(|l| l.starts_with("Next:")).unwrap();
    assert!(
        next.contains("output.artifacts: [{") && next.contains("\"kind\":\"wr.loop_control\""),
        "{next}"
    );
    let example = at_decide["pending"]["requiredArtifact"]["example"].clone();
    assert_eq!(example["kind"], "wr.loop_control");

    // Blocked without the artifact; resending the OLD ack with the fix repeats the block with a
    // replay notice naming the ack to use (D163); the new ack with the same fixed output advances.
    let bare = json!({"stateToken": at_decide["stateToken"], "ackToken": at_decide["ackToken"], "output": {"notesMarkdown": "Decided to stop."}});
    let blocked = server.call("continue_workflow", bare);
    assert_eq!(blocked["structuredContent"]["kind"], "blocked");
    let mut stop = example.clone();
    stop["decision"] = json!("stop");
    let fixed_old = json!({"stateToken": at_decide["stateToken"], "ackToken": at_decide["ackToken"], "output": {"notesMarkdown": "Decided to stop.", "artifacts": [stop]}});
    let repeat = server.call("continue_workflow", fixed_old);
    let mut recorded = repeat["structuredContent"].clone();
    let notice = recorded
        .as_object_mut()
        .unwrap()
        .remove("replay")
        .expect("a replay notice");
    assert_eq!(
        recorded, blocked["structuredContent"],
        "otherwise the recorded answer"
    );
    let new_ack = repeat["structuredContent"]["ackToken"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(notice["attemptBlocked"], true, "{notice}");
    assert_eq!(notice["forkAckToken"], new_ack.as_str(), "{notice}");
    let repeat_text = text_of(&repeat);
    assert!(
        repeat_text.contains("its attempt was blocked")
            && repeat_text.contains("NOT recorded")
            && repeat_text.contains(&new_ack),
        "{repeat_text}"
    );
    let wrap = server.exec(
        "continue_workflow",
        json!({"stateToken": at_decide["stateToken"], "ackToken": new_ack, "output": {"notesMarkdown": "Decided to stop.", "artifacts": [stop]}}),
    );
    assert_eq!(wrap["pending"]["stepId"], "wrap", "{wrap}");

    // A checkpoint says it was recorded.
    let checkpoint = server.exec(
        "checkpoint_workflow",
        json!({"stateToken": wrap["stateToken"], "checkpointToken": wrap["checkpointToken"], "output": {"notesMarkdown": "Summary drafted."}}),
    );
    assert!(
        warning_codes(&checkpoint).contains(&"checkpoint_recorded".to_owned()),
        "{checkpoint}"
    );
    // Notes over the budget are cut, and the response says so.
    let long = "x".repeat(workrail_spec::budget::NOTES_MARKDOWN_MAX_BYTES + 100);
    let done = server.exec("continue_workflow", ack_args(&wrap, &long));
    assert_eq!(done["isComplete"], true, "{done}");
    assert!(
        warning_codes(&done).contains(&"notes_truncated".to_owned()),
        "{done}"
    );

    // An earlier node of the complete run: the pending step under `complete` is explained.
    let earlier = server.call("continue_workflow", json!({"stateToken": s0["stateToken"]}));
    assert_eq!(earlier["structuredContent"]["run"]["status"], "complete");
    let earlier_text = text_of(&earlier);
    assert!(
        earlier_text.contains("preferred branch is complete")
            && earlier_text.contains("starts a new branch"),
        "{earlier_text}"
    );
    // Acknowledging it forks, and the fork says from where, what the other branch holds, and
    // which branch is preferred now.
    let forked = server.exec(
        "continue_workflow",
        json!({"stateToken": s0["stateToken"], "ackToken": earlier["structuredContent"]["ackToken"], "output": {"notesMarkdown": "Planned one slice instead."}}),
    );
    let fork_warning = forked["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["code"] == "forked")
        .unwrap_or_else(|| panic!("{forked}"))["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        fork_warning.contains("step \"Plan\"")
            && fork_warning.contains("preferred tip")
            && fork_warning.contains("xxxx"),
        "{fork_warning}"
    );

    // resume_session with words nothing contains: a recency fallback, said as such.
    let resumed = server.call("resume_session", json!({"query": {"text": "TICKET-4242"}}));
    let resumed_text = text_of(&resumed);
    assert!(
        resumed_text.contains("No run matched")
            && resumed_text.contains("does not search `context`"),
        "{resumed_text}"
    );
    assert!(server.close().success());
}

/// Every file and directory under `root` with its bytes and mode (what a call changed).
fn tree(root: &Path) -> std::collections::BTreeMap<std::path::PathBuf, (Vec<u8>, u32)> {
    use std::os::unix::fs::PermissionsExt;
    fn walk(
        root: &Path,
        dir: &Path,
        out: &mut std::collections::BTreeMap<std::path::PathBuf, (Vec<u8>, u32)>,
    ) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            let meta = entry.metadata().unwrap();
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            if meta.is_dir() {
                out.insert(rel, (Vec::new(), meta.permissions().mode()));
                walk(root, &path, out);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                out.insert(rel, (bytes, meta.permissions().mode()));
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// The paths whose bytes or mode differ, or that appeared or went.
fn changed_paths(
    before: &std::collections::BTreeMap<std::path::PathBuf, (Vec<u8>, u32)>,
    after: &std::collections::BTreeMap<std::path::PathBuf, (Vec<u8>, u32)>,
) -> Vec<std::path::PathBuf> {
    let keys: std::collections::BTreeSet<_> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .cloned()
        .collect()
}

/// `resume_session` without its state tokens and in a stable form, for comparing processes.
fn resume_answer(server: &mut Server, query: Value) -> Value {
    let result = server.call("resume_session", json!({"query": query}));
    assert_eq!(result["isError"], false, "{result}");
    result["structuredContent"].clone()
}

/// Two real servers on one data directory: a fresh server's first `resume_session` writes the
/// persisted index (decision D64) and nothing else; a later call with nothing changed writes
/// nothing; another server then advances a session, and a fresh server that finds the (now
/// stale) index sees that commit, answering exactly as a server without any index does.
/// lock: L-CACHE-DERIVED, L-RESUME-TIP-ONLY, L-TOKEN-REHYDRATE-PURE
#[test]
fn a_fresh_server_reads_the_resume_index_and_sees_another_server_commits() {
    let dir = data_dir();
    let index = dir.path().join("cache/resume-index.v1.jsonl");
    let mut writer = Server::start(dir.path());
    let mut outs = Vec::new();
    for note in [
        "Zebracorn billing bug.",
        "Login form refactor.",
        "Zebracorn sighting.",
    ] {
        let out = writer.exec("start_workflow", json!({"workflowId": "wr.coding_task"}));
        outs.push(writer.exec("continue_workflow", ack_args(&out, note)));
    }
    assert!(!index.exists());

    // A fresh reader: its first call writes the index, and only the index.
    let mut reader = Server::start(dir.path());
    let before = tree(dir.path());
    let first = resume_answer(&mut reader, json!({"text": "zebracorn"}));
    let after = tree(dir.path());
    assert_eq!(
        changed_paths(&before, &after),
        vec![
            std::path::PathBuf::from("cache"),
            std::path::PathBuf::from("cache/resume-index.v1.jsonl")
        ],
        "resume_session wrote something besides its index"
    );
    assert_eq!(first["candidates"].as_array().unwrap().len(), 3);
    // Nothing changed: no call writes anything, in this process or in a fresh one; a
    // rehydrate writes nothing either.
    for server in [&mut reader, &mut Server::start(dir.path())] {
        let before = tree(dir.path());
        assert_eq!(resume_answer(server, json!({"text": "zebracorn"})), first);
        server.exec(
            "continue_workflow",
            json!({"stateToken": outs[1]["stateToken"]}),
        );
        assert_eq!(
            tree(dir.path()),
            before,
            "a call with nothing changed wrote"
        );
    }

    // The writer (a running server) advances the login session with new notes.
    writer.exec(
        "continue_workflow",
        ack_args(&outs[1], "Counted the okapis at the login form."),
    );
    let stale = std::fs::read(&index).unwrap();
    let mut fresh = Server::start(dir.path());
    let seen = resume_answer(&mut fresh, json!({"text": "okapis"}));
    assert_eq!(
        seen["candidates"][0]["sessionId"], outs[1]["session"]["sessionId"],
        "{seen}"
    );
    assert_eq!(seen["candidates"][0]["whyMatched"][0], "matched_notes");
    assert_ne!(
        std::fs::read(&index).unwrap(),
        stale,
        "the index was not refreshed"
    );
    // The same answers as a server that never had an index (state tokens included: one
    // keyring signs them all).
    let queries = [
        json!({}),
        json!({"text": "okapis"}),
        json!({"text": "zebracorn"}),
    ];
    let with_index: Vec<Value> = queries
        .iter()
        .map(|q| resume_answer(&mut Server::start(dir.path()), q.clone()))
        .collect();
    for (q, want) in queries.iter().zip(&with_index) {
        std::fs::remove_file(&index).unwrap();
        let mut bare = Server::start(dir.path());
        assert_eq!(&resume_answer(&mut bare, q.clone()), want, "{q}");
        assert!(bare.close().success());
    }
    for server in [writer, reader, fresh] {
        assert!(server.close().success());
    }
}

//! Shared by the Console tests: a data directory built by the real `workrail mcp` over stdio (a
//! fork, a blocked attempt, a never-stop run with a gap, Markdown notes with a script in them),
//! and a running `workrail console` whose printed URL carries the per-launch secret.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use serde_json::{Value, json};

pub mod lanes;

const TIMEOUT: Duration = Duration::from_secs(60);

/// The notes of the first step: Markdown with a script a sanitizer must neutralise.
pub const SCRIPTED_NOTES: &str = "## Context\n\nRead **the diff** and the linked ticket.\n\n<script>window.__workrailPwned = 1</script>\n\n- first finding\n- second finding";

/// A `workrail mcp` child process spoken to as an MCP client would.
pub struct Mcp {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: i64,
}

/// The home and project directories of the tests' `workrail` processes: siblings of the data
/// directory (`<root>/data` beside `<root>/home` and `<root>/project`), so that every process
/// on one data directory sees the same workflow sources.
pub fn home_dir(data_dir: &Path) -> PathBuf {
    data_dir.parent().unwrap().join("home")
}

pub fn project_dir(data_dir: &Path) -> PathBuf {
    data_dir.parent().unwrap().join("project")
}

/// The user workflow directory (`~/.workrail/workflows`).
pub fn user_workflows(data_dir: &Path) -> PathBuf {
    home_dir(data_dir).join(".workrail").join("workflows")
}

/// A fresh `<root>/data` for [`build_demo_data_dir`].
pub fn new_root() -> (tempfile::TempDir, PathBuf) {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    (root, data)
}

/// A `workrail` command on `data_dir`, with its home and project directories (never the
/// developer's own workflow directories).
pub fn workrail(data_dir: &Path) -> Command {
    let (home, project) = (home_dir(data_dir), project_dir(data_dir));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&project).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_workrail"));
    command
        .env("WORKRAIL_DATA_DIR", data_dir)
        .env("HOME", home)
        .env_remove("WORKRAIL_WORKFLOW_DIRS")
        .env_remove("WORKRAIL_FEATURES")
        .env_remove("XDG_DATA_HOME")
        .current_dir(project);
    command
}

/// The user workflow the demo runs: two steps, editable.
pub const USER_WORKFLOW_ID: &str = "user.release_check";

pub fn user_workflow_source(second_prompt: &str) -> String {
    serde_json::to_string_pretty(&json!({
        "id": USER_WORKFLOW_ID,
        "name": "Release check",
        "description": "Checks a release before it ships.",
        "steps": [
            {"id": "changelog", "title": "Read the changelog", "prompt": "Read the changelog and list what changed."},
            {"id": "smoke", "title": "Smoke test", "prompt": second_prompt},
        ],
    }))
    .unwrap()
}

impl Mcp {
    pub fn start(data_dir: &Path) -> Mcp {
        let mut command = workrail(data_dir);
        command.arg("mcp");
        Mcp::spawn(command)
    }

    /// Spawns `command` (a `workrail mcp` with its environment) and completes the handshake.
    pub fn spawn(mut command: Command) -> Mcp {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn workrail mcp");
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
        let mut mcp = Mcp {
            child,
            stdin,
            lines: rx,
            next_id: 0,
        };
        let init = mcp.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "workrail-console-tests", "version": "0"},
            }),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "workrail", "{init}");
        mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        let mut line = serde_json::to_string(message).unwrap();
        line.push('\n');
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    pub fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = json!(self.next_id);
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self
                .lines
                .recv_timeout(TIMEOUT)
                .unwrap_or_else(|e| panic!("no response to {method}: {e}"));
            let value: Value = serde_json::from_str(&line).unwrap();
            if value["id"] == id {
                return value;
            }
        }
    }

    /// A successful execution call's `structuredContent`.
    pub fn exec(&mut self, tool: &str, arguments: Value) -> Value {
        let response = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        let result = &response["result"];
        assert_eq!(result["isError"], false, "{tool} failed: {response}");
        result["structuredContent"].clone()
    }

    /// An ack of `out` with `notes` and no artifacts.
    pub fn ack(&mut self, out: &Value, notes: &str) -> Value {
        self.exec(
            "continue_workflow",
            json!({
                "stateToken": out["stateToken"],
                "ackToken": out["ackToken"],
                "output": {"notesMarkdown": notes},
            }),
        )
    }

    pub fn close(mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

impl Drop for Mcp {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What [`build_demo_data_dir`] made, for the assertions.
pub struct Demo {
    /// The guided `wr.mr_review` run: forked at its first step, blocked at `verify_findings`.
    pub forked_session: String,
    /// The never-stop run that recorded a gap instead of blocking.
    pub gap_session: String,
    /// The open state of the forked run's original branch, to advance it later.
    pub forked_tip: Value,
    /// The run of [`USER_WORKFLOW_ID`]: `(sessionId, runId)`.
    pub user_run: (String, String),
}

/// Builds, through the real server: a guided `wr.mr_review` run whose first step was acked
/// twice (a rewind, so a fork), whose original branch reached `verify_findings` and was blocked
/// there for want of its required output; and a never-stop run of the same workflow that went
/// past `verify_findings` with a gap; and a run of the user workflow [`USER_WORKFLOW_ID`].
pub fn build_demo_data_dir(data_dir: &Path) -> Demo {
    let user = user_workflows(data_dir);
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(
        user.join("release_check.json"),
        user_workflow_source("Run the smoke tests."),
    )
    .unwrap();
    let mut mcp = Mcp::start(data_dir);
    let s0 = mcp.exec("start_workflow", json!({"workflowId": "wr.mr_review"}));
    let s1 = mcp.ack(&s0, SCRIPTED_NOTES);
    let s2 = mcp.ack(&s1, "Surveyed the change: three files, one migration.");
    let s3 = mcp.ack(&s2, "Correctness: one off-by-one in `pager.rs`.");
    let s4 = mcp.ack(
        &s3,
        "Design and tests: the pager lacks a test for the last page.",
    );
    assert_eq!(s4["pending"]["stepId"], "verify_findings", "{s4}");
    let blocked = mcp.ack(&s4, "Verified, but no report attached.");
    assert_eq!(blocked["kind"], "blocked", "{blocked}");
    // The user rewinds the chat to the first response and the agent acks it again: a fork.
    let back = mcp.exec("continue_workflow", json!({"stateToken": s0["stateToken"]}));
    let forked = mcp.ack(&back, "A second look at the context after the rewind.");
    assert_ne!(forked["stateToken"], s1["stateToken"]);

    let n0 = mcp.exec(
        "start_workflow",
        json!({
            "workflowId": "wr.mr_review",
            "preferences": {"autonomy": "full_auto_never_stop"},
        }),
    );
    let n1 = mcp.ack(&n0, "Context gathered without stopping.");
    let n2 = mcp.ack(&n1, "Survey done.");
    let n3 = mcp.ack(&n2, "Correctness checked.");
    let n4 = mcp.ack(&n3, "Design checked.");
    assert_eq!(n4["pending"]["stepId"], "verify_findings", "{n4}");
    let n5 = mcp.ack(
        &n4,
        "No verification report: recorded as a gap, the run goes on.",
    );
    assert_ne!(n5["kind"], "blocked", "never-stop does not block: {n5}");
    // It runs to its end, seven layers deep, and a rewind to its first step forks it there.
    let n6 = mcp.ack(&n5, "Comments written.");
    assert_eq!(n6["isComplete"], true, "{n6}");
    let again = mcp.exec("continue_workflow", json!({"stateToken": n0["stateToken"]}));
    mcp.ack(&again, "Context gathered again after a rewind.");
    // Activity is ordered by the manifests' modification times, which the kernel stamps at a
    // coarse tick: the last session starts a clear moment after the others.
    std::thread::sleep(std::time::Duration::from_millis(50));
    let u0 = mcp.exec("start_workflow", json!({"workflowId": USER_WORKFLOW_ID}));
    let user_run = (
        u0["session"]["sessionId"].as_str().unwrap().to_owned(),
        u0["session"]["runId"].as_str().unwrap().to_owned(),
    );
    let demo = Demo {
        user_run,
        forked_session: s0["session"]["sessionId"].as_str().unwrap().to_owned(),
        gap_session: n0["session"]["sessionId"].as_str().unwrap().to_owned(),
        forked_tip: forked,
    };
    mcp.close();
    demo
}

/// A running `workrail console`.
pub struct Console {
    child: Child,
    /// The printed URL, secret included.
    pub url: String,
    /// Where every page of this launch lives: `http://127.0.0.1:<port>/c/<nonce>` (decision
    /// D184); a page's URL is this and its path.
    pub origin: String,
    /// The origin proper, `http://127.0.0.1:<port>` (what a browser sends as `Origin`).
    pub site: String,
    /// The launch's path prefix, `/c/<nonce>`.
    pub prefix: String,
    /// The per-launch secret.
    pub secret: String,
    /// The cookie's name, `workrail_console_<port>`.
    pub cookie_name: String,
}

impl Console {
    /// `Cookie: <name>=<secret>`, as the browser sends it after the link.
    pub fn cookie(&self) -> String {
        format!("{}={}", self.cookie_name, self.secret)
    }

    /// `text` (a page or a `Location`) with this launch's prefix taken off its links, so
    /// assertions read plain paths.
    pub fn unprefixed(&self, text: &str) -> String {
        text.replace(&format!("=\"{}/", self.prefix), "=\"/")
            .replace(&format!("={}/", self.prefix), "=/")
    }
}

impl Console {
    pub fn start(data_dir: &Path) -> Console {
        let mut child = workrail(data_dir)
            .args(["console", "--port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn workrail console");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let _ = tx.send(line);
            // Keep draining so the console never blocks on a full pipe.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        let line = rx
            .recv_timeout(TIMEOUT)
            .expect("workrail console printed no URL");
        let url = line
            .trim()
            .strip_prefix("WorkRail Console: ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        assert!(url.starts_with("http://127.0.0.1:"), "{url}");
        let (origin, query) = url.split_once("/?token=").expect("the URL carries a token");
        assert_eq!(query.len(), 64, "a 32-byte hex secret: {url}");
        let rest = origin.strip_prefix("http://127.0.0.1:").unwrap();
        let (port, prefix) = rest.split_once('/').expect("a per-launch path");
        Console {
            site: format!("http://127.0.0.1:{port}"),
            prefix: format!("/{prefix}"),
            cookie_name: format!("workrail_console_{port}"),
            secret: query.to_owned(),
            origin: origin.to_owned(),
            url,
            child,
        }
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Copies a data directory (for a corrupted copy) as `cp -r` does, modes included (`keys/`
/// stays private, D136).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    std::fs::set_permissions(to, std::fs::metadata(from).unwrap().permissions()).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Damages the last committed event segment of `session`: its bytes no longer match the
/// manifest, so the session loads as a validated prefix with a corrupt tail.
pub fn corrupt_last_segment(data_dir: &Path, session: &str) -> PathBuf {
    let events = data_dir.join("sessions").join(session).join("events");
    let mut segments: Vec<PathBuf> = std::fs::read_dir(&events)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    segments.sort();
    let last = segments.pop().expect("the session has segments");
    let mut bytes = std::fs::read(&last).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x20;
    std::fs::write(&last, bytes).unwrap();
    last
}

/// Every entry under `dir`: relative path, mode and bytes (directories too), to prove a read
/// wrote nothing.
pub fn fingerprint(dir: &Path) -> BTreeMap<PathBuf, (u32, Option<Vec<u8>>)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, (u32, Option<Vec<u8>>)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            #[cfg(unix)]
            let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions());
            #[cfg(not(unix))]
            let mode = 0;
            let rel = path.strip_prefix(root).unwrap().to_path_buf();
            if meta.is_dir() {
                out.insert(rel, (mode, None));
                walk(root, &path, out);
            } else {
                out.insert(rel, (mode, Some(std::fs::read(&path).unwrap())));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Starts a guided `wr.mr_review` run and drives it to `verify_findings`, where its ack without
/// the required report is blocked; nothing comes after. Returns its session id.
pub fn build_blocked_run(data_dir: &Path, notes: &str) -> String {
    let mut mcp = Mcp::start(data_dir);
    let mut out = mcp.exec("start_workflow", json!({"workflowId": "wr.mr_review"}));
    let session = out["session"]["sessionId"].as_str().unwrap().to_owned();
    out = mcp.ack(&out, notes);
    for _ in 0..3 {
        out = mcp.ack(&out, "Looked further.");
    }
    assert_eq!(out["pending"]["stepId"], "verify_findings", "{out}");
    let blocked = mcp.ack(&out, "Verified, but no report attached.");
    assert_eq!(blocked["kind"], "blocked", "{blocked}");
    mcp.close();
    session
}

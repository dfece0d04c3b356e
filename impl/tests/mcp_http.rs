//! `workrail serve --http` end to end: the built binary on 127.0.0.1, spoken to over raw
//! HTTP/1.1 (and over stdio by a second process on the same data directory).
//!
//! Guards against: a request without a key, with an unknown or revoked key, or from a foreign
//! `Origin` running anything (each must be refused and write nothing); a revocation needing a
//! restart; an oversized body being read whole; a slow client holding a session's lock, or more
//! than its share of the server; tokens minted over HTTP not working over stdio, and back; and
//! concurrent clients being served one after another's failure. The turn-taking and the
//! refusals also run with the store in PostgreSQL (`WORKRAIL_TEST_POSTGRES`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::postgres_support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);

fn workrail(data_dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_workrail"));
    command
        .env("WORKRAIL_DATA_DIR", data_dir)
        .env("HOME", data_dir)
        .env_remove("WORKRAIL_WORKFLOW_DIRS")
        .env_remove("WORKRAIL_WORKFLOW_REPOS")
        .env_remove("WORKRAIL_STORE")
        .env_remove("XDG_DATA_HOME")
        .current_dir(data_dir);
    command
}

fn cli(data_dir: &Path, args: &[&str]) -> std::process::Output {
    workrail(data_dir).args(args).output().unwrap()
}

/// `workrail keys client add <name>`: the key (its stdout).
fn add_key(data_dir: &Path, name: &str) -> String {
    let out = cli(data_dir, &["keys", "client", "add", name]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A running `workrail serve --http`, killed on drop.
struct HttpServer {
    child: Child,
    port: u16,
}

impl HttpServer {
    fn start(data_dir: &Path) -> HttpServer {
        HttpServer::start_with(data_dir, &[])
    }

    /// With extra environment (e.g. `WORKRAIL_STORE`).
    fn start_with(data_dir: &Path, env: &[(String, String)]) -> HttpServer {
        let mut child = workrail(data_dir)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(["serve", "--http"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("WorkRail MCP over HTTP: http://")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        let port = url
            .strip_prefix("127.0.0.1:")
            .and_then(|rest| rest.strip_suffix("/mcp"))
            .unwrap_or_else(|| panic!("not a loopback URL: {url}"))
            .parse()
            .unwrap();
        HttpServer { child, port }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

fn request_head(port: u16, extra: &[(&str, &str)], length: usize) -> String {
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\nContent-Length: {length}\r\nConnection: close\r\n"
    );
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head
}

fn read_answer(mut stream: TcpStream) -> Answer {
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap().split(' ').nth(1).unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let chunked = headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Answer {
        status: status.parse().unwrap(),
        headers,
        body,
    }
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n").unwrap();
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            return out;
        }
        out.push_str(&after[..size]);
        rest = &after[size + 2..];
    }
}

/// One POST to `/mcp` with these extra headers.
fn post(port: u16, extra: &[(&str, &str)], body: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .write_all(request_head(port, extra, body.len()).as_bytes())
        .unwrap();
    // The server may answer (and close) before reading a refused body.
    let _ = stream.write_all(body);
    read_answer(stream)
}

fn call_body(tool: &str, arguments: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}
    }))
    .unwrap()
}

fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

/// `tools/call` over HTTP with `key`: the tool result (`isError` false asserted).
fn call(port: u16, key: &str, tool: &str, arguments: &Value) -> Value {
    let answer = post(
        port,
        &[("Authorization", &bearer(key))],
        &call_body(tool, arguments),
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    let result = answer.json()["result"].clone();
    assert_eq!(result["isError"], json!(false), "{result}");
    result["structuredContent"].clone()
}

fn sessions(data_dir: &Path) -> usize {
    std::fs::read_dir(data_dir.join("sessions")).map_or(0, |d| d.count())
}

fn start_args() -> Value {
    json!({"workflowId": "wr.coding_task"})
}

fn ack_args(out: &Value, notes: &str) -> Value {
    json!({
        "stateToken": out["stateToken"],
        "ackToken": out["ackToken"],
        "output": {"notesMarkdown": notes},
    })
}

/// decision: D179
/// decision: D180
#[test]
fn requests_without_a_valid_key_or_from_a_foreign_origin_are_refused_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let kept = add_key(data, "kept");
    let revoked = add_key(data, "revoked");
    let server = HttpServer::start(data);
    let port = server.port;
    let start = call_body("start_workflow", &start_args());

    let none = post(port, &[], &start);
    assert_eq!(none.status, 401, "{none:?}");
    assert!(none.header("www-authenticate").is_some());
    assert!(none.body.contains("workrail keys client add"), "{none:?}");

    let wrong = post(port, &[("Authorization", "Bearer wrc_not-a-key")], &start);
    assert_eq!(wrong.status, 401, "{wrong:?}");
    let basic = post(port, &[("Authorization", "Basic a2VwdA==")], &start);
    assert_eq!(basic.status, 401, "{basic:?}");

    for origin in [
        "http://evil.example",
        "http://127.0.0.1:1",
        "null",
        &format!("https://127.0.0.1:{port}"),
    ] {
        let foreign = post(
            port,
            &[("Authorization", &bearer(&kept)), ("Origin", origin)],
            &start,
        );
        assert_eq!(foreign.status, 403, "{origin}: {foreign:?}");
    }
    assert_eq!(sessions(data), 0, "a refused request wrote a session");

    // The server's own origin, and the revoked key while it is still valid, are let in.
    let own = format!("http://localhost:{port}");
    let first = post(
        port,
        &[("Authorization", &bearer(&revoked)), ("Origin", &own)],
        &start,
    );
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(sessions(data), 1);

    let out = cli(data, &["keys", "client", "revoke", "revoked"]);
    assert!(out.status.success());
    // No restart: the very next request with the revoked key is refused.
    let after = post(port, &[("Authorization", &bearer(&revoked))], &start);
    assert_eq!(after.status, 401, "{after:?}");
    assert_eq!(sessions(data), 1, "a revoked key wrote a session");
    let listed = String::from_utf8(cli(data, &["keys", "client", "list"]).stdout).unwrap();
    assert!(
        listed.contains("kept") && !listed.contains("revoked"),
        "{listed}"
    );
    // A key added while the server runs works at once.
    let late = add_key(data, "late");
    call(port, &late, "start_workflow", &start_args());
    assert_eq!(sessions(data), 2);
}

/// decision: D179
#[test]
fn client_keys_are_shown_once_and_stored_hashed_and_private() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let key = add_key(data, "ci-bot");
    assert!(key.starts_with("wrc_") && key.len() > 40, "{key}");
    let file = data.join("keys/clients.json");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains(&key), "the key itself was stored: {text}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let json: Value =
        serde_json::from_slice(&cli(data, &["keys", "client", "list", "--json"]).stdout).unwrap();
    assert_eq!(json[0]["name"], "ci-bot");
    assert!(
        json[0]["keySha256"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    let twice = cli(data, &["keys", "client", "add", "ci-bot"]);
    assert_eq!(twice.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&twice.stderr).contains("revoke"));
    let bad = cli(data, &["keys", "client", "add", "no spaces"]);
    assert_eq!(bad.status.code(), Some(1));
    let unknown = cli(data, &["keys", "client", "revoke", "nobody"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("ci-bot"));
}

/// decision: D180
#[test]
fn an_oversized_body_is_refused_with_413_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let key = add_key(data, "big");
    let server = HttpServer::start(data);
    let notes = "x".repeat(5 * 1024 * 1024);
    let body = call_body(
        "start_workflow",
        &json!({"workflowId": "wr.coding_task", "x": notes}),
    );
    let answer = post(server.port, &[("Authorization", &bearer(&key))], &body);
    assert_eq!(answer.status, 413, "{:?}", answer.headers);
    assert_eq!(sessions(data), 0);
}

/// A running `workrail mcp` spoken to over its stdio.
struct Stdio_ {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    next_id: i64,
}

impl Stdio_ {
    fn start(data_dir: &Path, env: &[(String, String)]) -> Stdio_ {
        let mut child = workrail(data_dir)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stdin = child.stdin.take().unwrap();
        let mut s = Stdio_ {
            child,
            stdin,
            lines,
            next_id: 0,
        };
        s.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "mcp_http-test", "version": "0"}}),
        );
        s.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        s
    }

    fn send(&mut self, message: &Value) {
        let mut line = serde_json::to_vec(message).unwrap();
        line.push(b'\n');
        self.stdin.write_all(&line).unwrap();
        self.stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let line = self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap();
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == json!(id) {
                return message;
            }
        }
    }

    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let answer = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
        answer["result"]["structuredContent"].clone()
    }
}

impl Drop for Stdio_ {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// decision: D180
#[test]
fn tokens_minted_over_http_work_over_stdio_and_back() {
    let dir = tempfile::tempdir().unwrap();
    take_turns(dir.path(), &[]);
    assert_eq!(sessions(dir.path()), 1);
}

/// decision: D180
#[test]
fn on_postgres_http_and_stdio_take_turns_and_refusals_write_nothing() {
    let Some(url) = postgres_support::postgres_url(
        "on_postgres_http_and_stdio_take_turns_and_refusals_write_nothing",
        "HTTP",
    ) else {
        return;
    };
    let schema = postgres_support::Schema::new(&url, "mcp_http");
    let env = [
        ("WORKRAIL_STORE".to_owned(), url.clone()),
        ("WORKRAIL_STORE_SCHEMA".to_owned(), schema.name.clone()),
    ];
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    take_turns(data, &env);
    let count =
        |table: &str| schema.count(&format!("SELECT count(*) FROM {}.{table}", schema.name));
    let (sessions_before, events_before) = (count("sessions"), count("events"));
    assert_eq!(sessions_before, 1);
    let key = add_key(data, "refused");
    let server = HttpServer::start_with(data, &env);
    let ack = call_body("start_workflow", &start_args());
    assert_eq!(post(server.port, &[], &ack).status, 401);
    let foreign = [
        ("Authorization", bearer(&key)),
        ("Origin", "http://evil.example".to_owned()),
    ];
    let foreign: Vec<(&str, &str)> = foreign.iter().map(|(n, v)| (*n, v.as_str())).collect();
    assert_eq!(post(server.port, &foreign, &ack).status, 403);
    assert!(
        cli(data, &["keys", "client", "revoke", "refused"])
            .status
            .success()
    );
    assert_eq!(
        post(server.port, &[("Authorization", &bearer(&key))], &ack).status,
        401
    );
    assert_eq!(
        (count("sessions"), count("events")),
        (sessions_before, events_before)
    );
}

/// An agent over HTTP and one over stdio advance one session in turn, each from the other's
/// tokens.
fn take_turns(data: &Path, env: &[(String, String)]) {
    let key = add_key(data, "agent");
    let http = HttpServer::start_with(data, env);
    let mut stdio = Stdio_::start(data, env);

    let s0 = call(http.port, &key, "start_workflow", &start_args());
    let session = s0["session"]["sessionId"].clone();
    let s1 = stdio.call("continue_workflow", ack_args(&s0, "Planned over HTTP."));
    assert_eq!(s1["session"]["sessionId"], session);
    assert_ne!(s1["pending"], s0["pending"], "stdio advanced the run");
    let s2 = call(
        http.port,
        &key,
        "continue_workflow",
        &ack_args(&s1, "Built over stdio."),
    );
    assert_eq!(s2["session"]["sessionId"], session);
    // Rehydrating over stdio from HTTP's latest tokens shows the same pending step.
    let again = stdio.call("continue_workflow", json!({"stateToken": s2["stateToken"]}));
    assert_eq!(again["pending"], s2["pending"]);
}

/// decision: D180
#[test]
fn a_slow_client_holds_no_session_lock_and_only_its_own_share() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let slow_key = add_key(data, "slow");
    let quick = add_key(data, "quick");
    let server = HttpServer::start(data);
    let port = server.port;
    let s0 = call(port, &quick, "start_workflow", &start_args());
    let body = call_body("continue_workflow", &ack_args(&s0, "Sent slowly."));

    // Eight requests of one client that send their headers and half their body, then stall.
    let stalled: Vec<TcpStream> = (0..8)
        .map(|_| {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            s.write_all(
                request_head(port, &[("Authorization", &bearer(&slow_key))], body.len()).as_bytes(),
            )
            .unwrap();
            s.write_all(&body[..body.len() / 2]).unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));

    // That client's ninth is over its share; another client is served, on the same session.
    let ninth = post(port, &[("Authorization", &bearer(&slow_key))], &body);
    assert_eq!(ninth.status, 429, "{ninth:?}");
    assert_eq!(ninth.header("retry-after"), Some("1"));
    let began = Instant::now();
    let s1 = call(
        port,
        &quick,
        "continue_workflow",
        &ack_args(&s0, "Sent quickly."),
    );
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "the quick client waited {:?}",
        began.elapsed()
    );

    // A stalled request completed later is the same ack: a replay, answered as the first was.
    let mut stalled = stalled.into_iter();
    let mut last = stalled.next().unwrap();
    last.write_all(&body[body.len() / 2..]).unwrap();
    let replay = read_answer(last);
    assert_eq!(replay.status, 200, "{replay:?}");
    let replayed = replay.json()["result"]["structuredContent"].clone();
    assert_eq!(replayed["pending"], s1["pending"]);
    drop(stalled);
    // Their shares come back once they are gone.
    std::thread::sleep(Duration::from_millis(300));
    call(port, &slow_key, "list_workflows", &json!({}));
}

/// decision: D180
#[test]
fn many_clients_are_served_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let keys: Vec<String> = (0..4).map(|i| add_key(data, &format!("c{i}"))).collect();
    let server = HttpServer::start(data);
    let port = server.port;
    let threads: Vec<_> = keys
        .into_iter()
        .flat_map(|key| (0..3).map(move |_| key.clone()))
        .map(|key| {
            std::thread::spawn(move || {
                let s0 = call(port, &key, "start_workflow", &start_args());
                call(port, &key, "continue_workflow", &ack_args(&s0, "Done."))
            })
        })
        .collect();
    for t in threads {
        let out = t.join().unwrap();
        assert!(out["session"]["sessionId"].is_string(), "{out}");
    }
    assert_eq!(sessions(data), 12);
}

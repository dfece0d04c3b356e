//! Shared by the `serve --http` process tests: the built binary started as an HTTP server or a
//! stdio server, raw HTTP/1.1 requests, and git repositories served on 127.0.0.1.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub const TIMEOUT: Duration = Duration::from_secs(60);

pub fn workrail(data_dir: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_workrail"));
    command
        .env("WORKRAIL_DATA_DIR", data_dir)
        .env("HOME", data_dir)
        .env_remove("WORKRAIL_WORKFLOW_DIRS")
        .env_remove("WORKRAIL_WORKFLOW_REPOS")
        .env_remove("WORKFLOW_GIT_REPOS")
        .env_remove("WORKRAIL_STORE")
        .env_remove("XDG_DATA_HOME")
        .current_dir(data_dir);
    command
}

pub fn cli(data_dir: &Path, env: &[(String, String)], args: &[&str]) -> std::process::Output {
    workrail(data_dir)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args(args)
        .output()
        .unwrap()
}

/// `workrail keys client add <name>`: the key (its stdout).
pub fn add_key(data_dir: &Path, name: &str) -> String {
    let out = cli(data_dir, &[], &["keys", "client", "add", name]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A running `workrail serve --http`, killed on drop.
pub struct HttpServer {
    pub child: Child,
    pub port: u16,
    /// The first line it printed (its URL).
    pub url: String,
}

impl HttpServer {
    pub fn start(data_dir: &Path, env: &[(String, String)]) -> HttpServer {
        HttpServer::start_args(data_dir, env, &["serve", "--http"])
    }

    pub fn start_args(data_dir: &Path, env: &[(String, String)], args: &[&str]) -> HttpServer {
        let mut child = workrail(data_dir)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .args(args)
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
            .strip_prefix("WorkRail MCP over HTTP: ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        let port = url
            .rsplit_once(':')
            .and_then(|(_, rest)| rest.strip_suffix("/mcp"))
            .unwrap_or_else(|| panic!("no port in {url}"))
            .parse()
            .unwrap();
        HttpServer { child, port, url }
    }

    /// `kill -9`.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

pub fn request_head(port: u16, extra: &[(&str, &str)], length: usize) -> String {
    let mut head = format!(
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\nContent-Length: {length}\r\nConnection: close\r\n"
    );
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head
}

/// Parses a whole HTTP/1.1 answer; `Err` when the connection ended before one arrived.
pub fn parse_answer(raw: &[u8]) -> Result<Answer, String> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no answer ({} bytes)", raw.len()))?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or("no status line")?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let chunked = headers.iter().any(|(n, v)| {
        n.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    let body = if chunked {
        dechunk(body).ok_or("a cut chunked body")?
    } else {
        body.to_owned()
    };
    Ok(Answer {
        status,
        headers,
        body,
    })
}

fn dechunk(mut rest: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, after) = rest.split_once("\r\n")?;
        let size = usize::from_str_radix(size.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(after.get(..size)?);
        rest = after.get(size + 2..)?;
    }
}

/// One POST to `/mcp`; `Err` when the connection failed or dropped before an answer.
pub fn try_post(port: u16, extra: &[(&str, &str)], body: &[u8]) -> Result<Answer, String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    stream
        .write_all(request_head(port, extra, body.len()).as_bytes())
        .map_err(|e| e.to_string())?;
    let _ = stream.write_all(body);
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    parse_answer(&raw)
}

pub fn post(port: u16, extra: &[(&str, &str)], body: &[u8]) -> Answer {
    try_post(port, extra, body).unwrap()
}

pub fn call_body(tool: &str, arguments: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}
    }))
    .unwrap()
}

pub fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

/// `tools/call` over HTTP with `key`: the tool result (`isError` false asserted).
pub fn call(port: u16, key: &str, tool: &str, arguments: &Value) -> Value {
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

pub fn ack_args(out: &Value, notes: &str) -> Value {
    json!({
        "stateToken": out["stateToken"],
        "ackToken": out["ackToken"],
        "output": {"notesMarkdown": notes},
    })
}

/// A running `workrail mcp` spoken to over its stdio.
pub struct StdioServer {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    next_id: i64,
}

impl StdioServer {
    pub fn start(data_dir: &Path, env: &[(String, String)]) -> StdioServer {
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
        let mut s = StdioServer {
            child,
            stdin,
            lines,
            next_id: 0,
        };
        s.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "http-support", "version": "0"}}),
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

    pub fn request(&mut self, method: &str, params: Value) -> Value {
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

    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let answer = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        assert_eq!(answer["result"]["isError"], json!(false), "{answer}");
        answer["result"]["structuredContent"].clone()
    }
}

impl Drop for StdioServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A team repository: a bare `origin.git` with `flows/review.json` (workflow `team.review`),
/// and the working clone that pushes to it.
pub struct TeamRepo {
    pub root: tempfile::TempDir,
}

impl TeamRepo {
    pub fn new(first_prompt: &str) -> Self {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        git(r, &["init", "-q", "--bare", "-b", "main", "origin.git"]);
        git(r, &["clone", "-q", "origin.git", "work"]);
        let work = r.join("work");
        git(&work, &["checkout", "-q", "-b", "main"]);
        std::fs::create_dir_all(work.join("flows")).unwrap();
        let repo = Self { root };
        repo.push(first_prompt, "first");
        repo
    }

    pub fn bare(&self) -> PathBuf {
        self.root.path().join("origin.git")
    }

    /// Commits `flows/review.json` with this first-step prompt and pushes it; the commit.
    pub fn push(&self, prompt: &str, message: &str) -> String {
        let work = self.root.path().join("work");
        let text = format!(
            r#"{{"id": "team.review", "name": "Team review", "description": "The team's review.",
  "steps": [{{"id": "look", "title": "Look", "prompt": "{prompt}"}},
            {{"id": "check", "title": "Check", "prompt": "Check the tests."}},
            {{"id": "done", "title": "Done", "prompt": "Wrap up."}}]}}"#
        );
        std::fs::write(work.join("flows").join("review.json"), text).unwrap();
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-q", "-m", message]);
        git(&work, &["push", "-q", "origin", "main"]);
        git(&work, &["rev-parse", "HEAD"]).trim().to_owned()
    }
}

/// `git daemon` serving a directory on a free port of 127.0.0.1, killed on drop.
pub struct GitDaemon {
    child: Child,
    pub port: u16,
}

impl GitDaemon {
    pub fn start(base: &Path) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // The daemon itself, not the `git` wrapper, so that killing the child stops it.
        let exec_path = git(base, &["--exec-path"]).trim().to_owned();
        let child = Command::new(Path::new(&exec_path).join("git-daemon"))
            .args([
                "--export-all",
                "--reuseaddr",
                "--listen=127.0.0.1",
                &format!("--port={port}"),
                &format!("--base-path={}", base.display()),
                &base.display().to_string(),
            ])
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "git daemon did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, port }
    }

    pub fn url(&self) -> String {
        format!("git://127.0.0.1:{}/origin.git", self.port)
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

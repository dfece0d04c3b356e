//! A tiny MCP client over stdio: JSON-RPC 2.0, one message per line, with a timeout per request
//! so a hung server fails the scenario instead of hanging the suite.
//!
//! Only what the suite needs: `initialize`, `notifications/initialized`, `tools/list` (with
//! pagination) and `tools/call`. Requests the server sends to the client (`ping`) are answered;
//! notifications from the server are ignored.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

/// The MCP protocol version the client asks for.
pub const PROTOCOL_VERSION: &str = "2025-06-18";

/// How a server is started.
#[derive(Debug, Clone)]
pub struct Launch {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Working directory (the scenario's temp dir).
    pub cwd: Option<PathBuf>,
    /// Where the server's stderr goes (kept for failure reports).
    pub stderr: Option<PathBuf>,
    /// Time allowed for each request.
    pub timeout: Duration,
}

/// The result of one `tools/call`.
#[derive(Debug, Clone, PartialEq)]
pub enum CallOutcome {
    /// A tool result (`isError` false or true).
    Result(ToolResult),
    /// A JSON-RPC error instead of a tool result.
    RpcError { code: i64, message: String },
}

/// A tool result: `content[0].text`, `structuredContent` and `isError`.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub is_error: bool,
    /// The text of the first content item (empty when there is none).
    pub text: String,
    /// Whether `content[0]` exists and has `type: "text"`.
    pub text_first: bool,
    /// `structuredContent` (`Value::Null` when absent).
    pub structured: Value,
}

/// A running server and the client side of its stdio.
#[derive(Debug)]
pub struct McpClient {
    pipe: Pipe,
    next_id: u64,
    timeout: Duration,
    /// Every message sent and received, in order (for `--verbose` and reports).
    pub transcript: Vec<String>,
}

impl McpClient {
    /// Starts the server. Does not initialize it.
    pub fn spawn(launch: &Launch) -> Result<Self, String> {
        Ok(Self {
            pipe: Pipe::spawn(launch)?,
            next_id: 0,
            timeout: launch.timeout,
            transcript: Vec::new(),
        })
    }

    /// `initialize` then `notifications/initialized`; returns the initialize result.
    pub fn initialize(&mut self) -> Result<Value, String> {
        let result = self.request(
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "workrail-conformance", "version": env!("CARGO_PKG_VERSION")},
            }),
        )?;
        self.notify("notifications/initialized", None)?;
        Ok(result)
    }

    /// `tools/list`, following `nextCursor`.
    pub fn list_tools(&mut self) -> Result<Vec<Value>, String> {
        let mut tools = Vec::new();
        let mut cursor: Option<Value> = None;
        for _ in 0..100 {
            let params = match &cursor {
                Some(c) => json!({ "cursor": c }),
                None => json!({}),
            };
            let result = self.request("tools/list", params)?;
            let page = result
                .get("tools")
                .and_then(Value::as_array)
                .ok_or_else(|| format!("tools/list result has no `tools` array: {result}"))?;
            tools.extend(page.iter().cloned());
            match result.get("nextCursor") {
                Some(c) if !c.is_null() => cursor = Some(c.clone()),
                _ => return Ok(tools),
            }
        }
        Err("tools/list paginated more than 100 pages".to_owned())
    }

    /// `tools/call`.
    pub fn call_tool(&mut self, name: &str, arguments: &Value) -> Result<CallOutcome, String> {
        let response = self.round_trip(
            "tools/call",
            json!({ "name": name, "arguments": arguments }),
        )?;
        if let Some(error) = response.get("error") {
            return Ok(CallOutcome::RpcError {
                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            });
        }
        let result = response
            .get("result")
            .ok_or_else(|| format!("response has neither `result` nor `error`: {response}"))?;
        let first = result
            .get("content")
            .and_then(Value::as_array)
            .and_then(|c| c.first());
        let text_first = first
            .and_then(|c| c.get("type"))
            .and_then(Value::as_str)
            .is_some_and(|t| t == "text");
        let text = first
            .and_then(|c| c.get("text"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        Ok(CallOutcome::Result(ToolResult {
            is_error: result
                .get("isError")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            text,
            text_first,
            structured: result
                .get("structuredContent")
                .cloned()
                .unwrap_or(Value::Null),
        }))
    }

    /// A request whose JSON-RPC error is itself a failure; returns `result`.
    pub fn request(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let response = self.round_trip(method, params)?;
        if let Some(error) = response.get("error") {
            return Err(format!("{method} returned a JSON-RPC error: {error}"));
        }
        response
            .get("result")
            .cloned()
            .ok_or_else(|| format!("{method}: response has no `result`: {response}"))
    }

    fn round_trip(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        let deadline = Instant::now() + self.timeout;
        loop {
            let line = self
                .pipe
                .recv(deadline)
                .map_err(|e| format!("{method}: {e}"))?;
            if line.trim().is_empty() {
                continue;
            }
            self.transcript.push(format!("<- {line}"));
            let message: Value = serde_json::from_str(&line).map_err(|e| {
                format!("{method}: server wrote a line that is not JSON ({e}): {line:.300}")
            })?;
            let Some(obj) = message.as_object() else {
                return Err(format!(
                    "{method}: server wrote a non-object message: {line:.300}"
                ));
            };
            if obj.contains_key("method") {
                self.answer_server_message(obj)?;
                continue;
            }
            if obj.get("id").and_then(Value::as_u64) == Some(id) {
                return Ok(message);
            }
            // A response to something else (a stale id): ignore it.
        }
    }

    /// Answers a request from the server (`ping`), ignores notifications.
    fn answer_server_message(&mut self, obj: &Map<String, Value>) -> Result<(), String> {
        let Some(id) = obj.get("id") else {
            return Ok(());
        };
        let method = obj.get("method").and_then(Value::as_str).unwrap_or("");
        let reply = if method == "ping" {
            json!({"jsonrpc": "2.0", "id": id, "result": {}})
        } else {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "method not found"}})
        };
        self.send(&reply)
    }

    fn notify(&mut self, method: &str, params: Option<Value>) -> Result<(), String> {
        let mut msg = json!({"jsonrpc": "2.0", "method": method});
        if let (Some(p), Some(obj)) = (params, msg.as_object_mut()) {
            obj.insert("params".into(), p);
        }
        self.send(&msg)
    }

    fn send(&mut self, message: &Value) -> Result<(), String> {
        let line = message.to_string();
        self.transcript.push(format!("-> {line}"));
        self.pipe.send(&line)
    }

    /// The last lines of the server's stderr, for failure messages.
    pub fn stderr_tail(&self) -> String {
        self.pipe.stderr_tail()
    }

    /// Closes stdin and waits briefly for the server to exit, then kills it.
    pub fn shutdown(&mut self) {
        self.pipe.shutdown();
    }
}

#[derive(Debug)]
enum Incoming {
    Line(String),
    Closed,
    ReadError(String),
}

/// A child process spoken to in lines: one line out, lines back, with deadlines.
#[derive(Debug)]
pub struct Pipe {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Incoming>,
    stderr: Option<PathBuf>,
}

impl Pipe {
    /// Starts the process with piped stdin and stdout.
    pub fn spawn(launch: &Launch) -> Result<Self, String> {
        let (program, args) = launch
            .argv
            .split_first()
            .ok_or_else(|| "the command is empty".to_owned())?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        for (k, v) in &launch.env {
            command.env(k, v);
        }
        if let Some(cwd) = &launch.cwd {
            command.current_dir(cwd);
        }
        match &launch.stderr {
            Some(path) => {
                let file = std::fs::File::create(path)
                    .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
                command.stderr(file);
            }
            None => {
                command.stderr(Stdio::inherit());
            }
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", launch.argv.join(" ")))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| "stdout is not captured".to_owned())?;
        let stdin = child.stdin.take();
        let (tx, rx) = channel();
        thread::spawn(move || {
            let reader = BufReader::new(stdout);
            for line in reader.lines() {
                let msg = match line {
                    Ok(l) => Incoming::Line(l),
                    Err(e) => Incoming::ReadError(e.to_string()),
                };
                let stop = matches!(msg, Incoming::ReadError(_));
                if tx.send(msg).is_err() || stop {
                    return;
                }
            }
            let _ = tx.send(Incoming::Closed);
        });
        Ok(Self {
            child,
            stdin,
            rx,
            stderr: launch.stderr.clone(),
        })
    }

    /// Writes one line (a newline is added).
    pub fn send(&mut self, line: &str) -> Result<(), String> {
        let result = match self.stdin.as_mut() {
            Some(stdin) => stdin
                .write_all(line.as_bytes())
                .and_then(|()| stdin.write_all(b"\n"))
                .and_then(|()| stdin.flush())
                .map_err(|e| e.to_string()),
            None => Err("stdin is closed".to_owned()),
        };
        result.map_err(|e| format!("cannot write to the process: {e}{}", self.stderr_tail()))
    }

    /// The next line, or an error at `deadline` or when the process closed stdout.
    pub fn recv(&mut self, deadline: Instant) -> Result<String, String> {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(left) {
            Ok(Incoming::Line(l)) => Ok(l),
            Ok(Incoming::ReadError(e)) => Err(format!("cannot read stdout: {e}")),
            Ok(Incoming::Closed) | Err(RecvTimeoutError::Disconnected) => {
                let status = self
                    .child
                    .try_wait()
                    .ok()
                    .flatten()
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default();
                Err(format!(
                    "the process closed stdout{status} before answering{}",
                    self.stderr_tail()
                ))
            }
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "no answer before the deadline (the process hung){}",
                self.stderr_tail()
            )),
        }
    }

    /// The last lines of stderr when it goes to a file, for failure messages.
    pub fn stderr_tail(&self) -> String {
        let Some(path) = &self.stderr else {
            return String::new();
        };
        let Ok(text) = std::fs::read_to_string(path) else {
            return String::new();
        };
        let lines: Vec<&str> = text.lines().collect();
        if lines.is_empty() {
            return String::new();
        }
        let tail = &lines[lines.len().saturating_sub(8)..];
        format!("; stderr (last lines):\n    {}", tail.join("\n    "))
    }

    /// Closes stdin and waits briefly for the process to exit, then kills it.
    pub fn shutdown(&mut self) {
        self.stdin = None;
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => thread::sleep(Duration::from_millis(10)),
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Splits a command line into words: whitespace separates, single and double quotes group,
/// a backslash escapes the next character outside single quotes.
pub fn split_command(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some('\''), '\'') | (Some('"'), '"') => quote = None,
            (Some('"'), '\\') | (None, '\\') => match chars.next() {
                Some(n) => {
                    word.push(n);
                    in_word = true;
                }
                None => return Err(format!("trailing backslash in {line:?}")),
            },
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err(format!("unterminated quote in {line:?}"));
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// `path` as a string for environment variables.
pub fn path_string(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

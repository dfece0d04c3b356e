//! `workrail-conformance-do-nothing`: a test fixture, never a product. An MCP stdio server that
//! lists tools and does nothing else: it answers `initialize`, answers `tools/list` with the tools
//! read from a file (the test gives it the tool names and input schemas WorkRail-rs lists), and
//! answers every `tools/call` with an empty success (`{"content": []}`). It never touches its
//! data directory.
//!
//! It is the hollow-pass control of the suite (`conformance/tests/do_nothing.rs`): a server
//! that does nothing may pass the tool-listing locks and no other; a lock it passes is a check
//! that cannot fail.
//!
//! Usage: `workrail-conformance-do-nothing <tools.json>` (a JSON array of tool definitions, or
//! a `tools/list` result `{"tools": [...]}`).

#![forbid(unsafe_code)]

use std::io::{BufRead, Write};
use std::process::ExitCode;

use serde_json::{Value, json};

fn main() -> ExitCode {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: workrail-conformance-do-nothing <tools.json>");
        return ExitCode::from(2);
    };
    let tools = match std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str::<Value>(&t).map_err(|e| e.to_string()))
    {
        Ok(Value::Array(list)) => Value::Array(list),
        Ok(Value::Object(mut page)) => match page.remove("tools") {
            Some(Value::Array(list)) => Value::Array(list),
            _ => {
                eprintln!("{path}: no `tools` array");
                return ExitCode::from(2);
            }
        },
        Ok(_) => {
            eprintln!("{path}: neither an array of tools nor a tools/list result");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("cannot read {path}: {e}");
            return ExitCode::from(2);
        }
    };
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        // Notifications (no id) need no answer.
        let Some(id) = msg.get("id").cloned() else {
            continue;
        };
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let reply = match msg.get("method").and_then(Value::as_str).unwrap_or("") {
            "initialize" => json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": params["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "do-nothing", "version": "0.0.0"}}}),
            "tools/list" => json!({"jsonrpc": "2.0", "id": id, "result": {"tools": tools}}),
            "tools/call" => json!({"jsonrpc": "2.0", "id": id, "result": {"content": []}}),
            "ping" => json!({"jsonrpc": "2.0", "id": id, "result": {}}),
            _ => json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": "method not found"}}),
        };
        if writeln!(out, "{reply}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
    ExitCode::SUCCESS
}

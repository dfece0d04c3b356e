//! A test fixture, never a product: a tiny in-memory MCP stdio server speaking a surface shaped
//! like TS WorkRail 3.121's, so `tests/ts_profile.rs` can prove that the surface profile
//! `fixtures/conformance/servers/workrail-ts.json` drives the suite through every adapter path
//! without a proxy:
//!
//! - results are JSON in `content[0].text`, never `structuredContent`;
//! - one opaque `continueToken` (`ct_...`) plus `intent` (`advance` / `rehydrate`);
//! - `start_workflow` requires `workspacePath` (absolute) and `goal`;
//! - error envelopes carry the suggestion in `details.suggestion`;
//! - every run starts with an injected step `wr-system-onboarding`;
//! - workflows are read from `WORKFLOW_STORAGE_PATH` (one JSON file per workflow).
//!
//! It keeps nothing on disk, runs no loops, contracts or autonomy modes: scenarios that need
//! them fail or are excused by the profile's declarations, and the test says which.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use serde_json::{Value, json};

/// The step every run starts with, before the workflow's own.
const INJECTED_STEP: (&str, &str) = (
    "wr-system-onboarding",
    "State what you intend to do, then continue.",
);

struct Node {
    run: usize,
    /// Index into the run's steps; `steps.len()` when complete.
    pos: usize,
}

struct Stub {
    workflows: BTreeMap<String, Vec<(String, String)>>,
    runs: Vec<Vec<(String, String)>>,
    nodes: Vec<Node>,
    tokens: BTreeMap<String, usize>,
    /// The answer to the first advance of each token (replays return it again).
    advanced: BTreeMap<String, Value>,
    /// The fresh token a rehydrate of a used token handed out (repeats hand out the same).
    rehydrated: BTreeMap<String, String>,
    /// Where workflows are read from, at every start (sources may change between runs).
    workflow_dirs: Option<String>,
}

/// A tool error: the TS-like envelope with the suggestion under `details`.
fn error(code: &str, message: &str, suggestion: &str) -> Value {
    json!({"code": code, "message": message, "retry": {"kind": "not_retryable"},
        "details": {"suggestion": suggestion}})
}

/// The workflows (id -> steps) in a path list of directories, one JSON file per workflow.
fn read_workflows(dirs: Option<&str>) -> BTreeMap<String, Vec<(String, String)>> {
    let mut workflows = BTreeMap::new();
    {
        for dir in dirs
            .iter()
            .flat_map(|d| std::env::split_paths(d).collect::<Vec<_>>())
        {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let Ok(text) = std::fs::read_to_string(entry.path()) else {
                    continue;
                };
                let Ok(doc) = serde_json::from_str::<Value>(&text) else {
                    continue;
                };
                let (Some(id), Some(steps)) = (doc["id"].as_str(), doc["steps"].as_array()) else {
                    continue;
                };
                let steps = steps
                    .iter()
                    .filter_map(|s| {
                        Some((
                            s["id"].as_str()?.to_owned(),
                            s["prompt"].as_str()?.to_owned(),
                        ))
                    })
                    .collect();
                workflows.insert(id.to_owned(), steps);
            }
        }
    }
    workflows
}

impl Stub {
    fn load(dirs: Option<String>) -> Self {
        Self {
            workflows: read_workflows(dirs.as_deref()),
            runs: Vec::new(),
            nodes: Vec::new(),
            tokens: BTreeMap::new(),
            advanced: BTreeMap::new(),
            rehydrated: BTreeMap::new(),
            workflow_dirs: dirs,
        }
    }

    fn mint(&mut self, run: usize, pos: usize) -> String {
        let node = self.nodes.len();
        self.nodes.push(Node { run, pos });
        let token = format!(
            "ct_{:08x}{:04x}",
            node.wrapping_mul(2_654_435_761) & 0xffff_ffff,
            run
        );
        self.tokens.insert(token.clone(), node);
        token
    }

    fn execution(&self, token: &str) -> Value {
        let node = &self.nodes[self.tokens[token]];
        let steps = &self.runs[node.run];
        let complete = node.pos >= steps.len();
        let pending = steps.get(node.pos).map_or(
            Value::Null,
            |(id, prompt)| json!({"stepId": id, "title": id, "prompt": prompt}),
        );
        let mut out = json!({
            "isComplete": complete,
            "pending": pending,
            "nextIntent": if complete { "complete" } else { "perform_pending_then_continue" },
        });
        // With TS_STUB_NO_TOKEN_ON_COMPLETE set, as 3.121 does: a completed run's answer
        // carries no token.
        let tokenless = complete && std::env::var_os("TS_STUB_NO_TOKEN_ON_COMPLETE").is_some();
        if !tokenless && let Some(o) = out.as_object_mut() {
            o.insert("continueToken".into(), Value::String(token.to_owned()));
        }
        out
    }

    fn call(&mut self, tool: &str, args: &Value) -> Result<Value, Value> {
        let text = |k: &str| {
            args.get(k)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        match tool {
            "list_workflows" | "inspect_workflow" | "start_workflow"
                if !text("workspacePath").is_some_and(|p| p.starts_with('/')) =>
            {
                Err(error(
                    "VALIDATION_ERROR",
                    "workspacePath is required",
                    "Pass the absolute workspace path.",
                ))
            }
            "list_workflows" => {
                Ok(json!({"tags": ["conformance"], "hint": "Pass a tag to list workflows."}))
            }
            "inspect_workflow" => {
                let id = text("workflowId").unwrap_or_default();
                match self.workflows.get(id) {
                    Some(steps) => Ok(json!({"workflowId": id, "steps": steps.len()})),
                    None => Err(error(
                        "NOT_FOUND",
                        "no such workflow",
                        "List the workflows first.",
                    )),
                }
            }
            "start_workflow" => {
                if text("goal").is_none() {
                    return Err(error(
                        "VALIDATION_ERROR",
                        "goal is required",
                        "Say what the run is for.",
                    ));
                }
                // The current sources: a workflow may have changed since the last start.
                self.workflows = read_workflows(self.workflow_dirs.as_deref());
                let id = text("workflowId").unwrap_or_default();
                let Some(steps) = self.workflows.get(id) else {
                    return Err(error(
                        "NOT_FOUND",
                        "no such workflow",
                        "List the workflows first.",
                    ));
                };
                let mut all = vec![(INJECTED_STEP.0.to_owned(), INJECTED_STEP.1.to_owned())];
                all.extend(steps.iter().cloned());
                self.runs.push(all);
                let token = self.mint(self.runs.len() - 1, 0);
                Ok(self.execution(&token))
            }
            "continue_workflow" => {
                let allowed = [
                    "workspacePath",
                    "continueToken",
                    "intent",
                    "context",
                    "output",
                ];
                if let Some(k) = args
                    .as_object()
                    .and_then(|o| o.keys().find(|k| !allowed.contains(&k.as_str())))
                {
                    return Err(error(
                        "VALIDATION_ERROR",
                        &format!("unknown field {k}"),
                        "Send only the schema's fields.",
                    ));
                }
                let Some(token) = text("continueToken") else {
                    return Err(error(
                        "VALIDATION_ERROR",
                        "continueToken is required",
                        "Pass the last continueToken.",
                    ));
                };
                if !self.tokens.contains_key(token) {
                    let well_formed = token.len() == 15 && token.starts_with("ct_");
                    return Err(if well_formed {
                        error(
                            "TOKEN_BAD_SIGNATURE",
                            "the token was not minted here",
                            "Use the token exactly as received.",
                        )
                    } else {
                        error(
                            "TOKEN_INVALID_FORMAT",
                            "not a continueToken",
                            "Use the token exactly as received.",
                        )
                    });
                }
                let advance = match args.get("intent").and_then(Value::as_str) {
                    Some("advance") => true,
                    Some("rehydrate") => false,
                    None => args.get("output").is_some(),
                    Some(other) => {
                        return Err(error(
                            "VALIDATION_ERROR",
                            &format!("unknown intent {other}"),
                            "Use advance or rehydrate.",
                        ));
                    }
                };
                if !advance {
                    // A rehydrate after the token was used hands out a fresh one for the same
                    // step (a new attempt; advancing it forks).
                    if self.advanced.contains_key(token) {
                        if let Some(fresh) = self.rehydrated.get(token) {
                            return Ok(self.execution(fresh));
                        }
                        let node = &self.nodes[self.tokens[token]];
                        let (run, pos) = (node.run, node.pos);
                        let fresh = self.mint(run, pos);
                        self.rehydrated.insert(token.to_owned(), fresh.clone());
                        return Ok(self.execution(&fresh));
                    }
                    return Ok(self.execution(token));
                }
                if let Some(done) = self.advanced.get(token) {
                    return Ok(done.clone());
                }
                let node = &self.nodes[self.tokens[token]];
                let (run, pos) = (node.run, node.pos);
                if pos >= self.runs[run].len() {
                    return Ok(self.execution(token));
                }
                let next = self.mint(run, pos + 1);
                let answer = self.execution(&next);
                self.advanced.insert(token.to_owned(), answer.clone());
                Ok(answer)
            }
            other => Err(error(
                "VALIDATION_ERROR",
                &format!("unknown tool {other}"),
                "Call tools/list.",
            )),
        }
    }
}

fn tools() -> Value {
    let ws = json!({"type": "string", "description": "Absolute workspace path"});
    json!([
        {"name": "list_workflows", "inputSchema": {"type": "object",
            "properties": {"workspacePath": ws, "tags": {"type": "array"}}, "required": ["workspacePath"]}},
        {"name": "inspect_workflow", "inputSchema": {"type": "object",
            "properties": {"workflowId": {"type": "string"}, "workspacePath": ws}, "required": ["workflowId", "workspacePath"]}},
        {"name": "start_workflow", "inputSchema": {"type": "object",
            "properties": {"workflowId": {"type": "string"}, "workspacePath": ws, "goal": {"type": "string"},
                "context": {"type": "object"}},
            "required": ["workflowId", "workspacePath", "goal"]}},
        {"name": "continue_workflow", "inputSchema": {"type": "object",
            "properties": {"continueToken": {"type": "string"}, "intent": {"enum": ["advance", "rehydrate"]},
                "workspacePath": ws, "context": {"type": "object"}, "output": {"type": "object"}},
            "required": ["continueToken"], "additionalProperties": false}},
    ])
}

fn main() {
    let mut stub = Stub::load(std::env::var("WORKFLOW_STORAGE_PATH").ok());
    let stdin = std::io::stdin();
    let mut out = std::io::stdout();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let Some(id) = msg.get("id").cloned() else {
            continue;
        };
        let params = msg.get("params").cloned().unwrap_or(Value::Null);
        let result = match msg.get("method").and_then(Value::as_str).unwrap_or("") {
            "initialize" => {
                json!({"protocolVersion": params["protocolVersion"], "capabilities": {"tools": {}},
                "serverInfo": {"name": "ts-like-stub", "version": "0.0.0"}})
            }
            "tools/list" => json!({"tools": tools()}),
            "tools/call" => {
                let tool = params["name"].as_str().unwrap_or("");
                let args = params.get("arguments").cloned().unwrap_or(json!({}));
                let (body, is_error) = match stub.call(tool, &args) {
                    Ok(v) => (v, false),
                    Err(e) => (e, true),
                };
                json!({"content": [{"type": "text", "text": body.to_string()}], "isError": is_error})
            }
            _ => {
                let reply = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "method not found"}});
                if writeln!(out, "{reply}").and_then(|()| out.flush()).is_err() {
                    break;
                }
                continue;
            }
        };
        let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
        if writeln!(out, "{reply}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
}

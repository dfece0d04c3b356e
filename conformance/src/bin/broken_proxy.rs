//! `workrail-conformance-broken-proxy`: a deliberately broken wrapper, the negative control of the
//! conformance suite (`conformance/tests/negative_control.rs`). It runs a real server (or vector
//! adapter) as a child and relays JSON lines both ways, perturbing them in one way:
//!
//! - `replay-drift`: when the same `(stateToken, ackToken)` is sent to `continue_workflow` a
//!   second time, one byte of the replayed response's `structuredContent` is changed
//!   (replays must be byte-identical, locks §1.2);
//! - `accept-tampered`: a token whose payload segment matches a token the server minted but
//!   whose other parts differ (a tampered signature, another version) is swapped back for the
//!   good token before the server sees it, so tampering goes unnoticed (locks §1.2 errors);
//! - `vector-truncate`: answers of a vector adapter to `truncate` lose the marker's newlines
//!   (locks §1 canonical marker);
//! - `extra-kinds`: before the server starts, a second session is planted in its data directory
//!   (`WORKRAIL_DATA_DIR`) whose events and manifest use kinds outside the closed sets: event
//!   kinds `run_completed` and `validation_performed`, node kind `blocked_attempt`, edge kind
//!   `fork` with cause `retry`, advance outcome `skipped`, manifest record `segment_sealed`
//!   (the extra kinds another implementation was found to store). Messages pass unchanged.
//! - `write-on-read`: every rehydrate (`continue_workflow` without an `ackToken`) appends a
//!   line to `$WORKRAIL_DATA_DIR/keys/token-index.jsonl`, as another implementation was found
//!   to do: a write on a read outside the events and the manifest (locks §1.2 purity).
//!
//! Never use it for anything else.
//!
//! Usage: `workrail-conformance-broken-proxy <mode> <command> [args...]`

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;

use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    ReplayDrift,
    AcceptTampered,
    VectorTruncate,
    ExtraKinds,
    WriteOnRead,
}

#[derive(Debug, Default)]
struct State {
    /// replay-drift: ack pairs seen, and request ids whose responses to perturb.
    seen_acks: BTreeSet<(String, String)>,
    perturb_ids: BTreeSet<String>,
    /// accept-tampered: payload segment -> the token the server minted.
    minted: BTreeMap<String, String>,
    /// vector-truncate: ops of requests not answered yet.
    pending_ops: VecDeque<String>,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(mode), Some(program)) = (args.first(), args.get(1)) else {
        eprintln!(
            "usage: workrail-conformance-broken-proxy <replay-drift|accept-tampered|vector-truncate|extra-kinds|write-on-read> <command> [args...]"
        );
        return ExitCode::from(2);
    };
    let mode = match mode.as_str() {
        "replay-drift" => Mode::ReplayDrift,
        "accept-tampered" => Mode::AcceptTampered,
        "vector-truncate" => Mode::VectorTruncate,
        "extra-kinds" => Mode::ExtraKinds,
        "write-on-read" => Mode::WriteOnRead,
        other => {
            eprintln!("unknown mode {other}");
            return ExitCode::from(2);
        }
    };
    if mode == Mode::ExtraKinds
        && let Err(e) = plant_extra_kinds()
    {
        eprintln!("cannot plant the extra kinds: {e}");
        return ExitCode::from(1);
    }
    let mut child = match Command::new(program)
        .args(&args[2..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cannot start {program}: {e}");
            return ExitCode::from(1);
        }
    };
    let (Some(mut child_in), Some(child_out)) = (child.stdin.take(), child.stdout.take()) else {
        return ExitCode::from(1);
    };
    let state = Arc::new(Mutex::new(State::default()));

    let up_state = Arc::clone(&state);
    let upstream = thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let line = {
                let mut s = up_state.lock().unwrap_or_else(PoisonError::into_inner);
                rewrite_request(mode, &mut s, line)
            };
            if writeln!(child_in, "{line}")
                .and_then(|()| child_in.flush())
                .is_err()
            {
                break;
            }
        }
        // Dropping child_in closes the server's stdin.
    });

    let mut stdout = std::io::stdout().lock();
    for line in BufReader::new(child_out).lines() {
        let Ok(line) = line else { break };
        let line = {
            let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
            rewrite_response(mode, &mut s, line)
        };
        if writeln!(stdout, "{line}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            break;
        }
    }
    drop(upstream);
    let _ = child.wait();
    ExitCode::SUCCESS
}

/// write-on-read: appends a line to `$WORKRAIL_DATA_DIR/keys/token-index.jsonl`.
fn note_rehydrate() {
    let Some(data) = std::env::var_os("WORKRAIL_DATA_DIR") else {
        return;
    };
    let keys = std::path::Path::new(&data).join("keys");
    let _ = std::fs::create_dir_all(&keys);
    if let Ok(mut index) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(keys.join("token-index.jsonl"))
    {
        let _ = writeln!(index, "{{\"rehydrated\":true}}");
    }
}

/// The planted session's id.
const PLANTED_SESSION: &str = "sess_planted00000000";

/// Writes the planted session (see the module docs) under `$WORKRAIL_DATA_DIR/sessions/`.
fn plant_extra_kinds() -> Result<(), String> {
    let data = std::env::var_os("WORKRAIL_DATA_DIR").ok_or("WORKRAIL_DATA_DIR is not set")?;
    let session = std::path::Path::new(&data)
        .join("sessions")
        .join(PLANTED_SESSION);
    let events_dir = session.join("events");
    std::fs::create_dir_all(&events_dir).map_err(|e| e.to_string())?;
    let s = PLANTED_SESSION;
    let (run, node, node2) = (
        "run_planted00000000",
        "node_planted0000000",
        "node_planted0000001",
    );
    let scope = serde_json::json!({"runId": run, "nodeId": node});
    let bodies = [
        (
            "session_created",
            format!("session_created:{s}"),
            None,
            serde_json::json!({}),
        ),
        (
            "node_created",
            format!("node_created:{s}:{run}:{node}"),
            Some(scope.clone()),
            serde_json::json!({"nodeKind": "blocked_attempt", "parentNodeId": null}),
        ),
        (
            "edge_created",
            format!("edge_created:{s}:{run}:{node}->{node2}:fork"),
            Some(serde_json::json!({"runId": run})),
            serde_json::json!({"edgeKind": "fork", "fromNodeId": node, "toNodeId": node2,
                               "cause": {"kind": "retry", "eventId": "evt_planted00000000"}}),
        ),
        (
            "advance_recorded",
            format!("advance_recorded:{s}:{node}:att_planted"),
            Some(scope.clone()),
            serde_json::json!({"attemptId": "att_planted", "intent": "ack_pending",
                               "outcome": {"kind": "skipped"}}),
        ),
        (
            "run_completed",
            format!("run_completed:{s}:{run}"),
            Some(serde_json::json!({"runId": run})),
            serde_json::json!({}),
        ),
        (
            "validation_performed",
            format!("validation_performed:{s}:{node}"),
            Some(scope),
            serde_json::json!({}),
        ),
    ];
    let mut lines = String::new();
    for (i, (kind, dedupe, scope, data)) in bodies.into_iter().enumerate() {
        let mut event = serde_json::json!({
            "v": 1, "eventId": format!("evt_planted{i:08}"), "eventIndex": i,
            "sessionId": s, "kind": kind, "dedupeKey": dedupe, "data": data,
        });
        if let (Some(scope), Some(o)) = (scope, event.as_object_mut()) {
            o.insert("scope".into(), scope);
        }
        lines.push_str(&event.to_string());
        lines.push('\n');
    }
    std::fs::write(events_dir.join("00000000-00000005.jsonl"), &lines)
        .map_err(|e| e.to_string())?;
    let manifest = [
        serde_json::json!({"v": 1, "manifestIndex": 0, "sessionId": s, "kind": "segment_closed",
                           "firstEventIndex": 0, "lastEventIndex": 5,
                           "segmentRelPath": "events/00000000-00000005.jsonl",
                           "sha256": "sha256:0000000000000000000000000000000000000000000000000000000000000000",
                           "bytes": lines.len()}),
        serde_json::json!({"v": 1, "manifestIndex": 1, "sessionId": s, "kind": "segment_sealed"}),
    ];
    let manifest: String = manifest.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(session.join("manifest.jsonl"), manifest).map_err(|e| e.to_string())
}

fn is_token(s: &str) -> bool {
    let parts: Vec<&str> = s.split('.').collect();
    parts.len() == 4 && ["st", "ack", "chk"].contains(&parts[0])
}

fn payload_segment(token: &str) -> &str {
    token.split('.').nth(2).unwrap_or("")
}

fn rewrite_request(mode: Mode, state: &mut State, line: String) -> String {
    let Ok(mut msg) = serde_json::from_str::<Value>(&line) else {
        return line;
    };
    match mode {
        Mode::ExtraKinds => line,
        Mode::WriteOnRead => {
            if msg["method"] == "tools/call"
                && msg["params"]["name"] == "continue_workflow"
                && msg["params"]["arguments"].get("ackToken").is_none()
            {
                note_rehydrate();
            }
            line
        }
        Mode::VectorTruncate => {
            let op = msg
                .get("op")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            state.pending_ops.push_back(op);
            line
        }
        Mode::ReplayDrift => {
            let args = &msg["params"]["arguments"];
            if msg["method"] == "tools/call"
                && msg["params"]["name"] == "continue_workflow"
                && let (Some(st), Some(ack)) =
                    (args["stateToken"].as_str(), args["ackToken"].as_str())
            {
                let key = (st.to_owned(), ack.to_owned());
                if !state.seen_acks.insert(key) {
                    state.perturb_ids.insert(msg["id"].to_string());
                }
            }
            line
        }
        Mode::AcceptTampered => {
            if msg["method"] != "tools/call" {
                return line;
            }
            let mut changed = false;
            if let Some(args) = msg["params"]["arguments"].as_object_mut() {
                for v in args.values_mut() {
                    let Some(s) = v.as_str() else { continue };
                    if !is_token(s) || state.minted.values().any(|t| t == s) {
                        continue;
                    }
                    if let Some(good) = state.minted.get(payload_segment(s)) {
                        *v = Value::String(good.clone());
                        changed = true;
                    }
                }
            }
            if changed { msg.to_string() } else { line }
        }
    }
}

fn collect_tokens(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) if is_token(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|v| collect_tokens(v, out)),
        Value::Object(o) => o.values().for_each(|v| collect_tokens(v, out)),
        _ => {}
    }
}

fn rewrite_response(mode: Mode, state: &mut State, line: String) -> String {
    let Ok(mut msg) = serde_json::from_str::<Value>(&line) else {
        return line;
    };
    match mode {
        Mode::ExtraKinds => line,
        Mode::WriteOnRead => {
            if msg["method"] == "tools/call"
                && msg["params"]["name"] == "continue_workflow"
                && msg["params"]["arguments"].get("ackToken").is_none()
            {
                note_rehydrate();
            }
            line
        }
        Mode::VectorTruncate => {
            let op = state.pending_ops.pop_front().unwrap_or_default();
            if op != "truncate" || msg["result"]["truncated"] != Value::Bool(true) {
                return line;
            }
            if let Some(text) = msg["result"]["text"].as_str() {
                let broken = text.replace("\n\n[TRUNCATED]", "[TRUNCATED]");
                msg["result"]["text"] = Value::String(broken);
            }
            msg.to_string()
        }
        Mode::ReplayDrift => {
            let id = msg["id"].to_string();
            if !state.perturb_ids.remove(&id) {
                return line;
            }
            let sc = &mut msg["result"]["structuredContent"];
            let target = if sc["pending"]["prompt"].is_string() {
                &mut sc["pending"]["prompt"]
            } else {
                &mut sc["stateToken"]
            };
            if let Some(s) = target.as_str() {
                let mut s = s.to_owned();
                let last = s.pop().unwrap_or(' ');
                s.push(if last == 'x' { 'y' } else { 'x' });
                *target = Value::String(s);
            }
            msg.to_string()
        }
        Mode::AcceptTampered => {
            let mut tokens = Vec::new();
            collect_tokens(&msg["result"]["structuredContent"], &mut tokens);
            for t in tokens {
                state.minted.insert(payload_segment(&t).to_owned(), t);
            }
            line
        }
    }
}

//! `kill -9` of `workrail serve --http` mid-advance (decision D189): several clients keep many
//! advances in flight while the server is killed at random moments and restarted, again and
//! again, on the file store and (with `WORKRAIL_TEST_POSTGRES`) on PostgreSQL.
//!
//! Guards against: an acknowledged advance lost by a kill; a session left unhealthy or not
//! continuable; a client that cannot tell what to do after a dropped connection (it resends
//! the same ackToken, which is a replay, never a second advance); an error whose `retry` a
//! client cannot follow.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::http_support;
use crate::postgres_support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_support::{HttpServer, StdioServer, add_key, bearer, call_body, try_post};
use serde_json::{Value, json};

const CLIENTS: usize = 6;
const KILLS: usize = 6;

/// A linear workflow of twelve steps, so that each advance moves one step on.
fn write_workflow(dir: &Path) -> (String, String) {
    let flows = dir.join("flows");
    std::fs::create_dir_all(&flows).unwrap();
    let steps: Vec<Value> = (1..=12)
        .map(|i| json!({"id": format!("s{i}"), "title": format!("Step {i}"), "prompt": format!("Do part {i}.")}))
        .collect();
    let workflow = json!({"id": "team.steps", "name": "Steps", "description": "Twelve steps in a row.", "steps": steps});
    std::fs::write(flows.join("steps.json"), workflow.to_string()).unwrap();
    (
        "WORKRAIL_WORKFLOW_DIRS".to_owned(),
        flows.display().to_string(),
    )
}

/// What one client knows: the last answer the server acknowledged, per session, and how many
/// advances of each were acknowledged.
#[derive(Default)]
struct Ledger {
    sessions: Vec<(Value, usize)>,
    dropped: usize,
    retried: usize,
    replays_checked: usize,
}

/// Sends `body` until the server answers it; a dropped or refused connection and an error
/// whose `retry` says so are retried with the same body (for an ack: the same ackToken).
fn until_answered(port: &AtomicU16, key: &str, body: &[u8], ledger: &Mutex<Ledger>) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "never answered");
        let p = port.load(Ordering::SeqCst);
        match try_post(p, &[("Authorization", &bearer(key))], body) {
            Err(_) => {
                // The connection was refused or dropped: the client cannot know whether the
                // advance was recorded, so it resends the same request.
                ledger.lock().unwrap().dropped += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(a) if a.status == 429 || a.status == 503 => {
                let secs: u64 = a
                    .header("retry-after")
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(1);
                ledger.lock().unwrap().retried += 1;
                std::thread::sleep(Duration::from_secs(secs));
            }
            Ok(a) => {
                assert_eq!(a.status, 200, "{a:?}");
                let result = a.json()["result"].clone();
                if result["isError"] == json!(true) {
                    let error = &result["structuredContent"]["error"];
                    let error = if error.is_null() {
                        &result["structuredContent"]
                    } else {
                        error
                    };
                    match error["retry"]["kind"].as_str() {
                        Some("retryable_after_ms") => {
                            ledger.lock().unwrap().retried += 1;
                            let ms = error["retry"]["afterMs"].as_u64().unwrap_or(250);
                            std::thread::sleep(Duration::from_millis(ms));
                        }
                        _ => panic!("a not-retryable error after a kill: {result}"),
                    }
                } else {
                    return result["structuredContent"].clone();
                }
            }
        }
    }
}

fn ack(out: &Value, notes: &str) -> Value {
    json!({"stateToken": out["stateToken"], "ackToken": out["ackToken"],
           "output": {"notesMarkdown": notes}})
}

fn client(
    port: Arc<AtomicU16>,
    key: String,
    stop: Arc<AtomicBool>,
    acked: Arc<AtomicUsize>,
    ledger: Arc<Mutex<Ledger>>,
    me: usize,
) {
    let start = call_body("start_workflow", &json!({"workflowId": "team.steps"}));
    let mut current = until_answered(&port, &key, &start, &ledger);
    ledger.lock().unwrap().sessions.push((current.clone(), 0));
    let mut n = 0;
    while !stop.load(Ordering::SeqCst) {
        if current["isComplete"] == json!(true) {
            current = until_answered(&port, &key, &start, &ledger);
            ledger.lock().unwrap().sessions.push((current.clone(), 0));
            continue;
        }
        n += 1;
        let body = call_body("continue_workflow", &ack(&current, &format!("c{me} n{n}")));
        let next = until_answered(&port, &key, &body, &ledger);
        assert_eq!(
            next["session"]["sessionId"],
            current["session"]["sessionId"]
        );
        assert_eq!(next["kind"], "ok", "{next}");
        assert!(
            next["isComplete"] == json!(true) || next["pending"] != current["pending"],
            "the advance did not move: {next}"
        );
        // Every few advances, resend the acknowledged ack: a replay, answered as the first.
        if n % 5 == 0 {
            let again = until_answered(&port, &key, &body, &ledger);
            assert_eq!(
                again["pending"], next["pending"],
                "a resent ack advanced again"
            );
            assert_eq!(again["stateToken"], next["stateToken"]);
            ledger.lock().unwrap().replays_checked += 1;
        }
        current = next;
        acked.fetch_add(1, Ordering::SeqCst);
        let mut l = ledger.lock().unwrap();
        let last = l.sessions.last_mut().unwrap();
        *last = (current.clone(), last.1 + 1);
    }
}

fn kill_and_restart_under_load(data: &Path, env: &[(String, String)]) {
    let mut env = env.to_vec();
    env.push(write_workflow(data));
    let env = env.as_slice();
    let keys: Vec<String> = (0..CLIENTS)
        .map(|i| add_key(data, &format!("c{i}")))
        .collect();
    let mut server = HttpServer::start(data, env);
    let port = Arc::new(AtomicU16::new(server.port));
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let ledgers: Vec<Arc<Mutex<Ledger>>> = (0..CLIENTS).map(|_| Arc::default()).collect();
    let threads: Vec<_> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let (port, key, stop, acked, ledger) = (
                Arc::clone(&port),
                key.clone(),
                Arc::clone(&stop),
                Arc::clone(&acked),
                Arc::clone(&ledgers[i]),
            );
            std::thread::spawn(move || client(port, key, stop, acked, ledger, i))
        })
        .collect();
    // A seed per run, printed so a failure can be read against its kill times.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    eprintln!("kill seed {seed}");
    let mut rng = seed | 1;
    for _ in 0..KILLS {
        let before = acked.load(Ordering::SeqCst);
        // Wait until advances flow, then a random moment among them.
        let deadline = Instant::now() + Duration::from_secs(60);
        while acked.load(Ordering::SeqCst) < before + 3 {
            assert!(Instant::now() < deadline, "no advance after a restart");
            std::thread::sleep(Duration::from_millis(10));
        }
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_millis(rng % 400));
        server.kill();
        server = HttpServer::start(data, env);
        port.store(server.port, Ordering::SeqCst);
    }
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    drop(server);

    // After the last kill, over stdio (a different process): every acknowledged answer is
    // there, and every session continues from it.
    let mut stdio = StdioServer::start(data, env);
    let mut sessions = 0;
    let (mut dropped, mut retried, mut replays) = (0, 0, 0);
    for ledger in &ledgers {
        let ledger = ledger.lock().unwrap();
        dropped += ledger.dropped;
        retried += ledger.retried;
        replays += ledger.replays_checked;
        for (last, _) in &ledger.sessions {
            sessions += 1;
            let again = stdio.call(
                "continue_workflow",
                json!({"stateToken": last["stateToken"]}),
            );
            assert_eq!(
                again["pending"], last["pending"],
                "an acknowledged advance was lost"
            );
            assert_eq!(again["isComplete"], last["isComplete"]);
            if last["isComplete"] != json!(true) {
                let next = stdio.call("continue_workflow", ack(last, "After the kills."));
                assert_ne!(next["pending"], last["pending"], "not continuable");
            }
        }
    }
    eprintln!(
        "{KILLS} kills: {} acknowledged advances over {sessions} sessions, {dropped} dropped connections resent, {retried} retries per `retry`, {replays} replays checked",
        acked.load(Ordering::SeqCst)
    );
    assert!(acked.load(Ordering::SeqCst) >= KILLS * 3);
    assert!(replays > 0);
}

/// decision: D189
#[test]
fn kill_9_mid_advance_loses_no_acknowledged_advance_on_the_file_store() {
    let dir = tempfile::tempdir().unwrap();
    kill_and_restart_under_load(dir.path(), &[]);
}

/// decision: D189
#[test]
fn kill_9_mid_advance_loses_no_acknowledged_advance_on_postgres() {
    let Some(url) = postgres_support::postgres_url(
        "kill_9_mid_advance_loses_no_acknowledged_advance_on_postgres",
        "HTTP faults",
    ) else {
        return;
    };
    let schema = postgres_support::Schema::new(&url, "http_faults");
    let env = [
        ("WORKRAIL_STORE".to_owned(), url.clone()),
        ("WORKRAIL_STORE_SCHEMA".to_owned(), schema.name.clone()),
    ];
    let dir = tempfile::tempdir().unwrap();
    kill_and_restart_under_load(dir.path(), &env);
}

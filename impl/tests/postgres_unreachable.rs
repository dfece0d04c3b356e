//! `workrail mcp` started while its PostgreSQL store cannot be reached (decision D127): the
//! real server process starts, lists its tools, refuses each tool call with a retryable
//! `STORE_IO_ERROR` that says nothing was recorded, and, once the database can be reached
//! (here: a TCP relay to it starts listening on the port of the URL), serves the same calls with
//! no restart. The rows show that the refused calls wrote nothing and that the session the
//! retried calls made is healthy and continuable from a fresh backend.
//!
//! Guards against: a server that exits at start when the database is down (an MCP client then
//! shows WorkRail as failed until it is restarted), a refusal an agent cannot act on (not
//! retryable, or silent about what was recorded), and a server that never tries again.
//!
//! Needs `WORKRAIL_TEST_POSTGRES` (`source .ci/postgres.sh`); without it the test says why and
//! passes, except under `CI`, where it fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::postgres_support;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::str::FromStr;

use serde_json::{Value, json};
use workrail::store::{SessionBackend, SessionHealth};
use workrail_spec::ids::SessionId;

use postgres_support::{Schema, postgres_url};

/// `workrail mcp` over stdio.
struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Server {
    fn spawn(data_dir: &std::path::Path, store: &str, schema: &str) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_workrail"))
            .arg("mcp")
            .env("WORKRAIL_DATA_DIR", data_dir)
            .env("WORKRAIL_STORE", store)
            .env("WORKRAIL_STORE_SCHEMA", schema)
            .env("WORKRAIL_STORE_TIMEOUT_MS", "3000")
            .env("HOME", data_dir)
            .env_remove("WORKRAIL_WORKFLOW_DIRS")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut server = Server {
            child,
            stdin,
            stdout,
            next_id: 0,
        };
        server.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}),
        );
        writeln!(
            server.stdin,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .unwrap();
        server
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let line =
            json!({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params});
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
        loop {
            let mut buf = String::new();
            assert!(
                self.stdout.read_line(&mut buf).unwrap() > 0,
                "the server closed stdout"
            );
            let msg: Value = serde_json::from_str(&buf).unwrap();
            if msg["id"] == json!(self.next_id) {
                return msg["result"].clone();
            }
        }
    }

    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nothing listens on (bound, then released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Relays every connection to `port` on 127.0.0.1 to `target`, from now on, on threads of its
/// own (they end with the test process).
fn relay(port: u16, target: String) {
    let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(&target) else {
                continue;
            };
            let (mut client_in, mut server_out) =
                (client.try_clone().unwrap(), server.try_clone().unwrap());
            let (mut server_in, mut client_out) = (server, client);
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut client_in, &mut server_out);
                let _ = server_out.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut server_in, &mut client_out);
                let _ = client_out.shutdown(std::net::Shutdown::Write);
            });
        }
    });
}

/// `url` pointed at 127.0.0.1:`port`, and the host:port it named.
fn through_port(url: &str, port: u16) -> (String, String) {
    let config = tokio_postgres::Config::from_str(url).unwrap();
    let host = match &config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        #[allow(unreachable_patterns)]
        _ => panic!("WORKRAIL_TEST_POSTGRES must name a TCP host"),
    };
    let target_port = config.get_ports().first().copied().unwrap_or(5432);
    let target = format!("{host}:{target_port}");
    (
        url.replacen(&target, &format!("127.0.0.1:{port}"), 1),
        target,
    )
}

#[test]
fn a_server_started_while_the_database_is_unreachable_serves_once_it_is_back() {
    let Some(url) = postgres_url(
        "a_server_started_while_the_database_is_unreachable_serves_once_it_is_back",
        "unreachable-store",
    ) else {
        return;
    };
    let schema = Schema::new(&url, "wr_unreachable");
    let port = free_port();
    let (relayed, target) = through_port(&url, port);
    assert_ne!(relayed, url, "the URL must name its host and port");
    // A password the trust-authenticated test cluster ignores, to look for in every answer.
    let relayed = relayed.replacen("postgres://postgres@", "postgres://postgres:s3cret@", 1);
    let data = tempfile::tempdir().unwrap();
    let mut server = Server::spawn(data.path(), &relayed, &schema.name);

    // Down: the server runs and lists its tools, and each call is refused, retryably.
    let tools = server.request("tools/list", json!({}));
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"start_workflow"), "{tools}");
    for _ in 0..2 {
        let refused = server.call("start_workflow", json!({"workflowId": "wr.coding_task"}));
        assert_eq!(refused["isError"], true, "{refused}");
        let envelope = &refused["structuredContent"];
        assert_eq!(envelope["code"], "STORE_IO_ERROR", "{refused}");
        assert_eq!(envelope["retry"]["kind"], "retryable_after_ms", "{refused}");
        let message = envelope["message"].as_str().unwrap();
        assert!(message.contains("recorded nothing"), "{message}");
        let suggestion = envelope["suggestion"].as_str().unwrap();
        assert!(suggestion.contains("Retry the same call"), "{suggestion}");
        assert!(suggestion.contains("no restart"), "{suggestion}");
        // The cause's own fix: nothing listens at the URL's port.
        assert!(
            suggestion.contains("start PostgreSQL there"),
            "{suggestion}"
        );
        let text = refused["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("Retry the same call"), "{text}");
        assert!(!refused.to_string().contains("s3cret"), "{refused}");
    }
    assert!(
        server.alive(),
        "the server must keep running without its store"
    );
    // Nothing was written: the schema was never even created.
    assert_eq!(
        schema.count(&format!(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name = '{}'",
            schema.name
        )),
        0
    );
    // The server recorded itself for the Console while it waits (D85).
    let servers: Vec<_> = std::fs::read_dir(data.path().join("servers"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .collect();
    assert_eq!(servers.len(), 1, "one server record");

    // Up: the same process serves the same call, then an advance.
    relay(port, target);
    let started = server.call("start_workflow", json!({"workflowId": "wr.coding_task"}));
    assert_eq!(started["isError"], false, "{started}");
    let out = &started["structuredContent"];
    let advanced = server.call(
        "continue_workflow",
        json!({
            "stateToken": out["stateToken"],
            "ackToken": out["ackToken"],
            "output": {"notesMarkdown": "Understood the task."}
        }),
    );
    assert_eq!(advanced["isError"], false, "{advanced}");
    let next = &advanced["structuredContent"];
    assert_eq!(next["kind"], "ok", "{advanced}");
    assert!(server.alive());

    // The session is healthy from a fresh backend, and its run continues from the latest
    // token on another server.
    let session = SessionId::parse(next["session"]["sessionId"].as_str().unwrap()).unwrap();
    let loaded = SessionBackend::load(&schema.backend(), &session).unwrap();
    assert_eq!(loaded.health, SessionHealth::Healthy);
    assert_eq!(
        schema.count(&format!("SELECT count(*) FROM {}.sessions", schema.name)),
        1
    );
    drop(server);
    let other = tempfile::tempdir().unwrap();
    let mut fresh = Server::spawn(other.path(), &url, &schema.name);
    let rehydrated = fresh.call(
        "continue_workflow",
        json!({"stateToken": next["stateToken"]}),
    );
    assert_eq!(rehydrated["isError"], false, "{rehydrated}");
    assert_eq!(
        rehydrated["structuredContent"]["pending"], next["pending"],
        "{rehydrated}"
    );
}

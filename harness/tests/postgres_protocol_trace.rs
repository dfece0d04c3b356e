//! The PostgreSQL model is the production protocol (issue 35, item 5; decision D201): the
//! statements the backend sends for an acknowledged advance, a load and GC's delete, recorded
//! on the wire by a proxy between the backend and the server (no seam in the backend), read as
//! the model checker's statement kinds (`workrail_model::pgcheck::Stmt`) and compared with the
//! sequences the checker explores. A change to the order production sends them in that the
//! model does not share fails here.
//!
//! Needs PostgreSQL (`WORKRAIL_TEST_POSTGRES`, from `source .ci/postgres.sh`): skipped with a
//! word without it, a failure under CI.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;

use workrail::entropy::SeededEntropy;
use workrail::protocol::Workrail;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail::store::postgres::Deleted;
use workrail::store::postgres::PostgresBackend;
use workrail::store::{SessionBackend, Store};
use workrail_harness::postgres::{Schema, Sql, postgres_url};
use workrail_model::pgcheck::{
    GateRead, Instr, Planted, Stmt, advance_stmts, gc_program, load_program,
};
use workrail_spec::ids::SessionId;
use workrail_spec::tools::{ContinueWorkflowInput, OutputInput, StartWorkflowInput};

/// One executed statement: the connection that sent it (numbered as accepted) and its text.
type Sent = (usize, String);

/// A TCP proxy in front of the server that notes every statement a client executes: a simple
/// query (`Q`), or an extended-protocol `Bind` of a statement whose text its `Parse` gave.
struct Proxy {
    port: u16,
    log: Arc<Mutex<Vec<Sent>>>,
}

impl Proxy {
    fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let log = Arc::new(Mutex::new(Vec::new()));
        let noted = Arc::clone(&log);
        thread::spawn(move || {
            for (conn, client) in listener.incoming().enumerate() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                thread::spawn(move || copy_back(s2, c2));
                let log = Arc::clone(&noted);
                thread::spawn(move || {
                    // A connection's end (either side) is only the end of this copy.
                    let _ = forward(conn, client, server, &log);
                });
            }
        });
        Proxy { port, log }
    }

    fn take(&self) -> Vec<Sent> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }
}

fn copy_back(mut from: TcpStream, mut to: TcpStream) {
    let _ = io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
}

/// Forwards the client's messages, noting each statement executed.
fn forward(
    conn: usize,
    mut client: TcpStream,
    mut server: TcpStream,
    log: &Mutex<Vec<Sent>>,
) -> io::Result<()> {
    // The startup message has no type byte.
    let mut len = [0u8; 4];
    client.read_exact(&mut len)?;
    let mut body = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
    client.read_exact(&mut body)?;
    server.write_all(&len)?;
    server.write_all(&body)?;
    let mut statements: HashMap<String, String> = HashMap::new();
    loop {
        let mut head = [0u8; 5];
        client.read_exact(&mut head)?;
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
        let mut body = vec![0u8; len.saturating_sub(4)];
        client.read_exact(&mut body)?;
        let cstrings: Vec<String> = body
            .split(|b| *b == 0)
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect();
        match head[0] {
            b'Q' => log.lock().unwrap().push((conn, cstrings[0].clone())),
            b'P' => {
                statements.insert(cstrings[0].clone(), cstrings[1].clone());
            }
            b'B' => {
                let text = statements.get(&cstrings[1]).cloned().unwrap_or_default();
                log.lock().unwrap().push((conn, text));
            }
            _ => {}
        }
        server.write_all(&head)?;
        server.write_all(&body)?;
    }
}

/// A statement's kind, as the model names it; `None` for one the model does not know.
fn kind(sql: &str) -> Option<Stmt> {
    let sql = sql.split_whitespace().collect::<Vec<_>>().join(" ");
    let has = |s: &str| sql.contains(s);
    let kind = if has("pg_try_advisory_xact_lock") {
        Stmt::TryAdvisoryXactLock
    } else if has("pg_try_advisory_lock") {
        Stmt::TryAdvisoryLock
    } else if has("pg_advisory_unlock") {
        Stmt::AdvisoryUnlock
    } else if sql == "BEGIN" || sql == "START TRANSACTION" {
        Stmt::Begin
    } else if sql.starts_with("START TRANSACTION") && has("REPEATABLE READ") && has("READ ONLY") {
        Stmt::BeginReadOnly
    } else if sql == "COMMIT" {
        Stmt::Commit
    } else if sql == "ROLLBACK" {
        Stmt::Rollback
    } else if sql.starts_with("SELECT manifest_rows, manifest_bytes FROM sessions WHERE") {
        Stmt::SelectFreshness
    } else if sql.starts_with("SELECT 1 FROM sessions WHERE") {
        Stmt::SelectSessionExists
    } else if sql.starts_with("SELECT body FROM manifest WHERE") {
        Stmt::SelectManifest
    } else if sql.starts_with("SELECT event_index, body FROM events WHERE") {
        Stmt::SelectEvents
    } else if sql.starts_with("SELECT digest, body FROM snapshots WHERE") {
        Stmt::SelectSnapshots
    } else if sql.starts_with("SELECT digest, body FROM workflows WHERE") {
        Stmt::SelectWorkflows
    } else if sql.starts_with("INSERT INTO sessions") && has("ON CONFLICT") {
        Stmt::UpsertSession
    } else if sql.starts_with("INSERT INTO events") {
        Stmt::InsertEvent
    } else if sql.starts_with("INSERT INTO manifest") {
        Stmt::InsertManifest
    } else if sql.starts_with("DELETE FROM events WHERE") {
        Stmt::DeleteEvents
    } else if sql.starts_with("DELETE FROM manifest WHERE") {
        Stmt::DeleteManifest
    } else if sql.starts_with("DELETE FROM sessions WHERE") {
        Stmt::DeleteSessions
    } else if sql == "DELETE FROM derived" {
        Stmt::DeleteDerived
    } else {
        return None;
    };
    Some(kind)
}

/// The statements of connection `conn` in `sent`, as the model's kinds (an unknown one fails).
fn kinds_of(sent: &[Sent], conn: usize) -> Vec<Stmt> {
    sent.iter()
        // A new connection's setting of its schema is not the protocol's.
        .filter(|(c, sql)| *c == conn && !sql.starts_with("SET "))
        .map(|(_, sql)| {
            kind(sql).unwrap_or_else(|| panic!("a statement the model does not know: {sql}"))
        })
        .collect()
}

/// The connection that sent a statement of kind `first`.
fn connection_of(sent: &[Sent], first: Stmt) -> usize {
    sent.iter()
        .find(|(_, sql)| kind(sql) == Some(first))
        .map(|(c, _)| *c)
        .unwrap_or_else(|| panic!("no {first:?} was sent: {sent:#?}"))
}

fn sql_only(program: Vec<Instr>) -> Vec<Stmt> {
    program
        .into_iter()
        .filter_map(|i| match i {
            Instr::Sql(s) => Some(s),
            Instr::Ack => None,
        })
        .collect()
}

fn count(sql: &Sql, schema: &str, table: &str) -> usize {
    let rows = sql.rows(&format!("SELECT count(*) FROM {schema}.{table}"));
    rows[0].get::<_, i64>(0) as usize
}

/// decision: D201
#[test]
fn postgres_statements_of_an_advance_a_load_and_gc_are_the_models() {
    let Some(url) = postgres_url("postgres_statements_of_an_advance_a_load_and_gc_are_the_models")
    else {
        return;
    };
    let rest = url.strip_prefix("postgres://").expect("a postgres:// URL");
    let (auth, tail) = rest.split_once('@').expect("a URL with a user");
    let (host_port, path) = tail.split_once('/').expect("a URL naming a database");
    let proxy = Proxy::start(host_port.to_owned());
    let database = path.split('?').next().unwrap_or(path);
    let through = format!(
        "postgres://{auth}@127.0.0.1:{}/{database}?sslmode=disable",
        proxy.port
    );
    let schema = Schema::new(&url, "pgtrace");
    let sql = Sql::connect(&url);
    let backend = PostgresBackend::connect(&through, &schema.name).unwrap();
    let wr = Workrail::with_store(
        Arc::new(MemFs::new()) as Arc<dyn StoreFs>,
        Store::postgres(backend),
        workrail_harness::fixture::catalog(),
        Arc::new(SeededEntropy::new(11)),
    )
    .unwrap();
    let started = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: workrail_harness::fixture::WORKFLOW_ID.to_owned(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();

    // An advance: the gate's connection sends exactly the model's writer program.
    let (events, records) = (
        count(&sql, &schema.name, "events"),
        count(&sql, &schema.name, "manifest"),
    );
    proxy.take();
    wr.continue_workflow(ContinueWorkflowInput {
        state_token: Some(started.state_token.clone()),
        ack_token: started.ack_token.clone(),
        output: Some(OutputInput {
            notes_markdown: Some("Traced.".to_owned()),
            artifacts: vec![],
        }),
        context: None,
        preferences: vec![],
        preset: None,
    })
    .unwrap();
    let sent = proxy.take();
    let new_events = count(&sql, &schema.name, "events") - events;
    let new_records = count(&sql, &schema.name, "manifest") - records;
    assert!(
        new_events > 0 && new_records > 1,
        "the advance wrote no rows"
    );
    let gate = connection_of(&sent, Stmt::TryAdvisoryLock);
    // The process that started the session holds its view: the gate finds it unchanged.
    assert_eq!(
        kinds_of(&sent, gate),
        advance_stmts(None, GateRead::CachedUnchanged, new_events, new_records),
        "production's advance is not the model's:\n{sent:#?}"
    );
    // Nothing else writes a session's rows: the other connections only read, or store
    // content-addressed objects before the gate (not modelled).
    for (conn, text) in &sent {
        if *conn != gate {
            let k = kind(text);
            assert!(
                !matches!(
                    k,
                    Some(Stmt::InsertEvent | Stmt::InsertManifest | Stmt::UpsertSession)
                ),
                "a session write outside the gate: {text}"
            );
        }
    }

    // A cold process's gate reads the rows in full: the model's cold program.
    let session = SessionId::parse(&started.session.session_id.to_string()).unwrap();
    let other = PostgresBackend::connect(&through, &schema.name).unwrap();
    proxy.take();
    let loaded = other.load(&session).unwrap();
    assert!(loaded.health.is_healthy());
    let sent = proxy.take();
    let reader = connection_of(&sent, Stmt::BeginReadOnly);
    assert_eq!(
        kinds_of(&sent, reader),
        sql_only(load_program()),
        "{sent:#?}"
    );

    // GC's delete: the model's GC program after its judging load.
    let key = sql.rows(&format!(
        "SELECT manifest_rows, manifest_bytes FROM {}.sessions",
        schema.name
    ));
    let expect: (i64, i64) = (key[0].get(0), key[0].get(1));
    proxy.take();
    assert_eq!(
        other.delete_session(&session, expect).unwrap(),
        Deleted::Yes
    );
    let sent = proxy.take();
    let gc = connection_of(&sent, Stmt::TryAdvisoryXactLock);
    let program = sql_only(gc_program(None));
    let delete_part = program[load_program().len()..].to_vec();
    assert_eq!(kinds_of(&sent, gc), delete_part, "{sent:#?}");
    // The planted bugs change the sequences (the comparison can fail).
    assert_ne!(
        advance_stmts(
            Some(Planted::AppendWithoutLock),
            GateRead::CachedUnchanged,
            1,
            2
        ),
        advance_stmts(None, GateRead::CachedUnchanged, 1, 2)
    );
    drop(wr);
    drop(other);
}

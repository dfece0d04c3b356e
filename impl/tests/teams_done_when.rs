//! Issue 36's "done when", as real processes: on PostgreSQL, one `workrail serve --http` and
//! one `workrail mcp` (stdio) advance the same session in turn, from a workflow synced from a
//! git repository that `git daemon` serves on 127.0.0.1; a push shows as drift for the running
//! session and as the new version for new runs; requests without a valid key or from a foreign
//! `Origin` are refused and write nothing.
//!
//! Skipped (with the reason printed) when `WORKRAIL_TEST_POSTGRES` is not set; CI sets it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::http_support;
use crate::postgres_support;

use std::time::{Duration, Instant};

use http_support::{
    GitDaemon, HttpServer, StdioServer, TeamRepo, ack_args, add_key, bearer, call, call_body, cli,
    post,
};
use serde_json::{Value, json};

fn has_drift(out: &Value) -> bool {
    out["warnings"]
        .as_array()
        .is_some_and(|w| w.iter().any(|w| w["code"] == "pinned_workflow_drift"))
}

fn prompt(out: &Value) -> String {
    out["pending"]["prompt"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// decision: D178
/// decision: D179
/// decision: D180
#[test]
fn http_and_stdio_agents_share_a_session_from_a_team_repository_on_postgres() {
    let Some(url) = postgres_support::postgres_url(
        "http_and_stdio_agents_share_a_session_from_a_team_repository_on_postgres",
        "teams",
    ) else {
        return;
    };
    let schema = postgres_support::Schema::new(&url, "teams");
    let repo = TeamRepo::new("Read the change first.");
    let daemon = GitDaemon::start(repo.root.path());
    let data_dir = tempfile::tempdir().unwrap();
    let data = data_dir.path();
    let env = [
        ("WORKRAIL_STORE".to_owned(), url.clone()),
        ("WORKRAIL_STORE_SCHEMA".to_owned(), schema.name.clone()),
        (
            "WORKRAIL_WORKFLOW_REPOS".to_owned(),
            format!(
                r#"[{{"url": "{}", "branch": "main", "path": "flows"}}]"#,
                daemon.url()
            ),
        ),
    ];
    let synced = cli(data, &env, &["repos", "sync"]);
    assert!(
        synced.status.success(),
        "{}",
        String::from_utf8_lossy(&synced.stderr)
    );

    let key = add_key(data, "ci-agent");
    let http = HttpServer::start(data, &env);
    let mut stdio = StdioServer::start(data, &env);
    let count =
        |table: &str| schema.count(&format!("SELECT count(*) FROM {}.{table}", schema.name));

    // Refusals first: nothing is written by any of them.
    let start = call_body("start_workflow", &json!({"workflowId": "team.review"}));
    assert_eq!(post(http.port, &[], &start).status, 401);
    let wrong = post(http.port, &[("Authorization", "Bearer wrc_wrong")], &start);
    assert_eq!(wrong.status, 401, "{wrong:?}");
    let foreign = post(
        http.port,
        &[
            ("Authorization", &bearer(&key)),
            ("Origin", "http://attacker.example"),
        ],
        &start,
    );
    assert_eq!(foreign.status, 403, "{foreign:?}");
    assert_eq!((count("sessions"), count("events")), (0, 0));

    // HTTP starts, stdio advances, HTTP advances: one session, each from the other's tokens.
    let s0 = call(
        http.port,
        &key,
        "start_workflow",
        &json!({"workflowId": "team.review"}),
    );
    assert!(prompt(&s0).contains("Read the change first."), "{s0}");
    let session = s0["session"]["sessionId"].clone();
    let s1 = stdio.call("continue_workflow", ack_args(&s0, "Read it over HTTP."));
    assert_eq!(s1["session"]["sessionId"], session);
    assert!(prompt(&s1).contains("Check the tests."), "{s1}");
    assert_eq!(count("sessions"), 1);
    let events_before_refusals = count("events");
    // A request from a foreign Origin carrying the session's own tokens changes nothing.
    let foreign_ack = post(
        http.port,
        &[
            ("Authorization", &bearer(&key)),
            ("Origin", "http://attacker.example"),
        ],
        &call_body("continue_workflow", &ack_args(&s1, "Forged.")),
    );
    assert_eq!(foreign_ack.status, 403);
    let keyless_ack = post(
        http.port,
        &[],
        &call_body("continue_workflow", &ack_args(&s1, "Forged.")),
    );
    assert_eq!(keyless_ack.status, 401);
    assert_eq!(count("events"), events_before_refusals);

    // A push to the team repository, synced: a rehydrating call of the running session (still
    // on its pinned version) shows drift, over either transport; a new run gets the new version.
    let pushed = repo.push("Read the change and its tests first.", "second");
    let synced = cli(data, &env, &["repos", "sync"]);
    assert!(synced.status.success());
    assert!(
        String::from_utf8_lossy(&synced.stdout).contains(&pushed[..12]),
        "{}",
        String::from_utf8_lossy(&synced.stdout)
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let s2 = loop {
        let s2 = call(
            http.port,
            &key,
            "continue_workflow",
            &json!({"stateToken": s1["stateToken"]}),
        );
        if has_drift(&s2) {
            break s2;
        }
        assert!(Instant::now() < deadline, "no drift shown: {s2}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(prompt(&s2).contains("Check the tests."));
    let s3 = call(
        http.port,
        &key,
        "continue_workflow",
        &ack_args(&s2, "Checked over HTTP."),
    );
    assert!(prompt(&s3).contains("Wrap up."), "{s3}");
    let again = stdio.call("continue_workflow", json!({"stateToken": s3["stateToken"]}));
    assert!(has_drift(&again), "{again}");
    assert_eq!(again["pending"], s3["pending"]);
    let s4 = stdio.call("continue_workflow", ack_args(&s3, "Wrapped up over stdio."));
    assert_eq!(s4["session"]["sessionId"], session);
    assert_eq!(s4["isComplete"], json!(true), "{s4}");

    let fresh = stdio.call("start_workflow", json!({"workflowId": "team.review"}));
    assert!(
        prompt(&fresh).contains("Read the change and its tests first."),
        "{fresh}"
    );
    assert!(!has_drift(&fresh), "{fresh}");
    assert_ne!(fresh["session"]["sessionId"], session);
    assert_eq!(count("sessions"), 2);
}

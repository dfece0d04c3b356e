//! Negative control: guards against a suite that passes everything. The real server must pass
//! every enabled scenario, and a deliberately broken server (the `broken-proxy` wrapped around
//! the real one) must FAIL exactly the scenarios that check what it breaks, with failures that
//! name the right locks. The same for the offline vectors: the reference adapter passes what
//! `workrail-spec` can answer, a perturbed adapter fails the truncation vectors.
//!
//! The real server is `<workspace>/target/debug/workrail`, built here first with
//! `cargo build -p workrail --bin workrail` when it is older than its sources.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

mod common;

use common::workspace;

/// The real server, built once per test binary when it is older than its sources.
fn server() -> &'static Path {
    static SERVER: OnceLock<PathBuf> = OnceLock::new();
    SERVER.get_or_init(common::server)
}

struct Run {
    exit_ok: bool,
    stdout: String,
    report: Value,
}

impl Run {
    fn names(&self, status: &str) -> BTreeSet<String> {
        self.report["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["status"] == status)
            .map(|r| r["name"].as_str().unwrap().to_owned())
            .collect()
    }

    /// Lock ids named by the failures of one scenario.
    fn failed_locks(&self, name: &str) -> BTreeSet<String> {
        self.report["results"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["name"] == name)
            .flat_map(|r| r["failures"].as_array().unwrap().iter())
            .flat_map(|f| f["lockIds"].as_array().unwrap().iter())
            .map(|l| l.as_str().unwrap().to_owned())
            .collect()
    }
}

fn conformance(args: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_workrail-conformance"))
        .args(args)
        .arg("--json")
        .arg(&json)
        .current_dir(workspace())
        .output()
        .expect("the suite runs");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}); stdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    }))
    .unwrap();
    Run {
        exit_ok: out.status.success(),
        stdout,
        report,
    }
}

fn surface() -> String {
    workspace()
        .join("fixtures/conformance/servers/workrail-rs.json")
        .to_string_lossy()
        .into_owned()
}

fn proxied(mode: &str) -> String {
    format!(
        "{} {mode} {} mcp",
        env!("CARGO_BIN_EXE_workrail-conformance-broken-proxy"),
        server().display()
    )
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

/// The reference server passes every scenario that is not skipped, and the closing line and
/// exit code agree.
#[test]
fn the_real_server_passes_every_enabled_scenario() {
    let server = format!("{} mcp", server().display());
    let run = conformance(&["--server", &server, "--surface", &surface()]);
    assert!(
        run.names("fail").is_empty(),
        "the real server failed scenarios:\n{}",
        run.stdout
    );
    assert!(
        run.exit_ok,
        "non-zero exit without failures:\n{}",
        run.stdout
    );
    let passed = run.names("pass");
    assert!(passed.len() >= 20, "too few scenarios ran:\n{}", run.stdout);
    let summary = &run.report["summary"];
    let last = run.stdout.lines().last().unwrap();
    assert_eq!(last, summary["line"].as_str().unwrap());
    assert_eq!(
        last,
        format!(
            "{} passed, 0 failed, {} skipped",
            passed.len(),
            run.names("skip").len()
        )
    );
    // Skips carry their reasons: the tools our server does not offer (export and import are
    // CLI commands, not tools). resume_session is offered, so resume_ranking runs.
    let skipped = run.names("skip");
    assert_eq!(skipped, set(&["export_import"]), "{}", run.stdout);
    assert!(passed.contains("resume_ranking"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("reason: server does not expose export_session/import_session")
    );
}

/// A server that answers a replayed ack with a response differing in one byte fails the
/// replay scenarios, and only those.
/// lock: L-TOKEN-ACK-IDEMPOTENT, L-TOKEN-REPLAY-FACTS
#[test]
fn a_drifting_replay_fails_the_replay_scenarios() {
    let only = [
        "replay_identity",
        "fork_from_old_state",
        "blocked_in_blocking_modes",
        "start_advance_complete",
        "rehydrate_purity",
        "token_tampering",
    ];
    let mut args = vec![
        "--server".to_owned(),
        proxied("replay-drift"),
        "--surface".into(),
        surface(),
    ];
    for o in only {
        args.extend(["--only".to_owned(), o.to_owned()]);
    }
    let run = conformance(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        !run.exit_ok,
        "the suite must exit non-zero:\n{}",
        run.stdout
    );
    assert_eq!(
        run.names("fail"),
        set(&[
            "replay_identity",
            "fork_from_old_state",
            "blocked_in_blocking_modes"
        ]),
        "{}",
        run.stdout
    );
    assert_eq!(
        run.names("pass"),
        set(&[
            "start_advance_complete",
            "rehydrate_purity",
            "token_tampering"
        ]),
        "{}",
        run.stdout
    );
    assert!(
        run.failed_locks("replay_identity")
            .contains("L-TOKEN-ACK-IDEMPOTENT")
    );
    assert!(
        run.failed_locks("blocked_in_blocking_modes")
            .contains("L-TOKEN-REPLAY-FACTS")
    );
    assert!(
        run.stdout
            .contains("expected: byte-identical structuredContent"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.ends_with("3 passed, 3 failed, 0 skipped\n"),
        "{}",
        run.stdout
    );
}

/// A server that lets tampered and unknown-version tokens through (the proxy swaps them for
/// the genuine token) fails the token scenarios with the token lock ids.
/// lock: L-TOKEN-ERRORS, L-VERSION-UNKNOWN-FAILS-FAST
#[test]
fn accepting_tampered_tokens_fails_the_token_scenarios() {
    let only = [
        "token_tampering",
        "token_unsupported_version",
        "token_scope_mismatch",
        "replay_identity",
    ];
    let mut args = vec![
        "--server".to_owned(),
        proxied("accept-tampered"),
        "--surface".into(),
        surface(),
    ];
    for o in only {
        args.extend(["--only".to_owned(), o.to_owned()]);
    }
    let run = conformance(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(!run.exit_ok);
    assert_eq!(
        run.names("fail"),
        set(&["token_tampering", "token_unsupported_version"]),
        "{}",
        run.stdout
    );
    assert_eq!(
        run.names("pass"),
        set(&["token_scope_mismatch", "replay_identity"]),
        "{}",
        run.stdout
    );
    assert!(
        run.failed_locks("token_tampering")
            .contains("L-TOKEN-ERRORS")
    );
    assert!(
        run.failed_locks("token_unsupported_version")
            .contains("L-VERSION-UNKNOWN-FAILS-FAST")
    );
    assert!(
        run.stdout
            .contains("expected: an error result with code TOKEN_BAD_SIGNATURE"),
        "{}",
        run.stdout
    );
}

/// A store holding kinds outside the closed sets (a planted session with event kinds
/// `run_completed` and `validation_performed`, node kind `blocked_attempt`, edge kind `fork`,
/// cause `retry`, outcome `skipped`, manifest record `segment_sealed`) fails every scenario
/// that reads the store, and only those, each naming the unknown kind and where it sits.
/// lock: L-EVENT-CLOSED-KINDS, L-EVENT-NODE-CREATED, L-EVENT-EDGE-CREATED, L-EVENT-ADVANCE-RECORDED, L-MANIFEST-CLOSED-KINDS
#[test]
fn extra_kinds_in_the_store_fail_every_scenario_that_reads_it() {
    use workrail_conformance::scenario::{self, Step};
    use workrail_conformance::store::CLOSED_SET_LOCKS;
    let scenarios =
        scenario::load_dir(&workspace().join("fixtures/conformance/scenarios")).unwrap();
    let reads_store: BTreeSet<String> = scenarios
        .iter()
        .filter(|s| {
            s.steps
                .iter()
                .any(|n| matches!(n.step, Step::StoreDigest { .. } | Step::StoreEvents { .. }))
        })
        .map(|s| s.name.clone())
        .collect();
    assert!(reads_store.len() >= 10, "{reads_store:?}");
    let run = conformance(&["--server", &proxied("extra-kinds"), "--surface", &surface()]);
    assert!(!run.exit_ok);
    let skipped = run.names("skip");
    let expected_fail: BTreeSet<String> = reads_store.difference(&skipped).cloned().collect();
    assert_eq!(run.names("fail"), expected_fail, "{}", run.stdout);
    let all: BTreeSet<String> = scenarios.iter().map(|s| s.name.clone()).collect();
    let others: BTreeSet<String> = all
        .difference(&reads_store)
        .filter(|n| !skipped.contains(*n))
        .cloned()
        .collect();
    assert_eq!(run.names("pass"), others, "{}", run.stdout);
    for name in &expected_fail {
        let locks = run.failed_locks(name);
        for id in CLOSED_SET_LOCKS {
            assert!(
                locks.contains(id),
                "{name} does not fail {id}:\n{}",
                run.stdout
            );
        }
    }
    let seg = "sessions/sess_planted00000000/events/00000000-00000005.jsonl";
    for needle in [
        format!("unknown event kind \"run_completed\" at {seg} line 5 (eventIndex 4)"),
        format!("unknown event kind \"validation_performed\" at {seg} line 6 (eventIndex 5)"),
        format!("unknown node kind (data.nodeKind) \"blocked_attempt\" at {seg} line 2 (eventIndex 1)"),
        format!("unknown edge kind (data.edgeKind) \"fork\" at {seg} line 3"),
        format!("unknown advance outcome (data.outcome.kind) \"skipped\" at {seg} line 4"),
        "unknown manifest record kind \"segment_sealed\" at sessions/sess_planted00000000/manifest.jsonl line 2".to_owned(),
    ] {
        assert!(run.stdout.contains(&needle), "missing {needle:?}:\n{}", run.stdout);
    }
    let table: BTreeMap<&str, &str> = run.report["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), r["verdict"].as_str().unwrap()))
        .collect();
    for id in CLOSED_SET_LOCKS {
        assert_eq!(table.get(id), Some(&"fail"), "{id}");
    }
}

/// A server that writes a file of its data directory on every rehydrate (a token index, outside
/// its events and manifest) fails the purity checks, and the failure names the file.
/// decision: D194
#[test]
fn a_write_on_a_read_anywhere_in_the_data_directory_fails_purity_naming_the_file() {
    let run = conformance(&[
        "--server",
        &proxied("write-on-read"),
        "--surface",
        &surface(),
        "--only",
        "rehydrate_purity",
    ]);
    assert!(!run.exit_ok, "{}", run.stdout);
    assert_eq!(
        run.names("fail"),
        set(&["rehydrate_purity"]),
        "{}",
        run.stdout
    );
    assert!(
        run.failed_locks("rehydrate_purity")
            .contains("L-TOKEN-REHYDRATE-PURE"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("the store changed in between: data/keys/token-index.jsonl"),
        "{}",
        run.stdout
    );
}

/// A server that hangs fails the scenario at the request deadline instead of hanging the suite.
#[test]
fn a_hung_server_fails_at_the_deadline() {
    let started = std::time::Instant::now();
    let run = conformance(&[
        "--server",
        "sleep 30",
        "--timeout",
        "1",
        "--only",
        "tool_set",
    ]);
    assert!(!run.exit_ok);
    assert_eq!(run.names("fail"), set(&["tool_set"]));
    assert!(
        run.stdout.contains("no answer before the deadline"),
        "{}",
        run.stdout
    );
    assert!(
        started.elapsed().as_secs() < 15,
        "the deadline was not honoured"
    );
}

fn adapter_run(adapter: &str) -> Run {
    conformance(&["vectors", "--impl", adapter])
}

/// The reference adapter answers every op `workrail-spec` can answer; projection files are
/// skipped with the reason.
/// lock: L-JCS-RFC8785, L-BLOCKER-ORDER, L-TOKEN-FORMAT, L-SKEY-FORMAT, L-DEDUPE-RECIPES, L-REASON-BLOCKER-MAPPING
#[test]
fn the_reference_adapter_passes_the_spec_vectors() {
    let run = adapter_run(env!("CARGO_BIN_EXE_workrail-conformance-adapter"));
    assert!(run.exit_ok, "{}", run.stdout);
    assert_eq!(
        run.names("pass"),
        set(&[
            "blocker_order.json",
            "dedupe_keys.json",
            "jcs.json",
            "reason_mapping.json",
            "sha256.json",
            "step_instance_keys.json",
            "tokens.json",
            "truncation.json",
        ]),
        "{}",
        run.stdout
    );
    assert_eq!(
        run.names("skip"),
        set(&[
            "preferred_tip.json",
            "resume_ranking.json",
            "run_status.json"
        ]),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("projections live in workrail-model"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.ends_with("8 passed, 0 failed, 3 skipped\n"),
        "{}",
        run.stdout
    );
}

/// An adapter whose truncation drops the marker's newlines fails truncation.json only.
/// lock: L-BUDGET-TRUNCATION-MARKER
#[test]
fn a_wrong_truncation_marker_fails_the_truncation_vectors() {
    let adapter = format!(
        "{} vector-truncate {}",
        env!("CARGO_BIN_EXE_workrail-conformance-broken-proxy"),
        env!("CARGO_BIN_EXE_workrail-conformance-adapter")
    );
    let run = adapter_run(&adapter);
    assert!(!run.exit_ok);
    assert_eq!(
        run.names("fail"),
        set(&["truncation.json"]),
        "{}",
        run.stdout
    );
    assert!(
        run.failed_locks("truncation.json")
            .contains("L-BUDGET-TRUNCATION-MARKER")
    );
}

/// A report names the lock catalog it was judged by, groups failures by cause and, against a
/// baseline report, lists what newly fails and what newly passes.
/// decision: D195
#[test]
fn a_run_against_a_baseline_names_new_failures_and_new_passes_with_the_locks_text() {
    let dir = tempfile::tempdir().unwrap();
    let baseline = dir.path().join("baseline.json");
    let server = format!("{} mcp", server().display());
    let only = [
        "--only",
        "replay_identity",
        "--only",
        "start_advance_complete",
    ];
    let surface = surface();
    let mut args = vec!["--server", &server, "--surface", &surface[..]];
    args.extend(only);
    let good = conformance(&args);
    assert!(good.exit_ok, "{}", good.stdout);
    assert!(
        good.stdout.starts_with("workrail-conformance ")
            && good.stdout.contains("judging by the lock catalog sha256:"),
        "{}",
        good.stdout
    );
    assert!(
        good.report["locksVersion"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    std::fs::write(&baseline, good.report.to_string()).unwrap();
    // The same server against its own baseline: no change.
    let baseline_arg = baseline.to_string_lossy().into_owned();
    let mut again_args = args.clone();
    again_args.extend(["--baseline", &baseline_arg]);
    let again = conformance(&again_args);
    assert!(
        again.stdout.contains("Against the baseline"),
        "{}",
        again.stdout
    );
    assert!(again.stdout.contains("  no change"), "{}", again.stdout);
    // A drifting replay against the good baseline: the replay lock is a new failure, said
    // with the lock's text, and its cause is one line.
    let drifting = proxied("replay-drift");
    let mut bad_args = vec!["--server", &drifting[..], "--surface", &surface[..]];
    bad_args.extend(only);
    bad_args.extend(["--baseline", &baseline_arg]);
    let bad = conformance(&bad_args);
    assert!(!bad.exit_ok);
    assert!(
        bad.stdout.contains("new lock failures: ") && bad.stdout.contains("L-TOKEN-ACK-IDEMPOTENT"),
        "{}",
        bad.stdout
    );
    assert!(
        bad.stdout
            .contains("newly failing scenarios: replay_identity"),
        "{}",
        bad.stdout
    );
    assert!(
        bad.report["baseline"]["newFailures"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l == "L-TOKEN-ACK-IDEMPOTENT"),
        "{}",
        bad.report["baseline"]
    );
    let text = workrail_conformance::locks::text("L-TOKEN-ACK-IDEMPOTENT").unwrap();
    assert!(
        bad.stdout
            .contains(&workrail_conformance::locks::brief(text, 150)),
        "the failing lock's text is not beside its id:\n{}",
        bad.stdout
    );
    assert!(bad.stdout.contains("Causes ("), "{}", bad.stdout);
    let causes = bad.report["causes"].as_array().unwrap();
    assert!(
        causes.iter().any(
            |c| c["expected"].as_str().unwrap().contains("byte-identical")
                && !c["seen"].as_array().unwrap().is_empty()
        ),
        "{causes:?}"
    );
}

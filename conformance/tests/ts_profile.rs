//! The surface profile for TS WorkRail 3.121 (`fixtures/conformance/servers/workrail-ts.json`)
//! drives the whole scenario set with no proxy. CI cannot run TS WorkRail, so the profile runs
//! against `workrail-conformance-ts-stub`, a test fixture speaking TS's surface: results as JSON
//! text, one opaque `continueToken` + `intent`, `workspacePath` and `goal` required on start,
//! the suggestion under `details`, an injected first step, fixture workflows from the profile's
//! own `workflowsDir`. Guards against the adapter paths breaking (a surface file alone once
//! passed nothing on TS: every start failed and every check read null).
//!
//! The stub keeps no store and checks no context, so scenarios that need those fail; the test
//! asserts what must hold whatever the stub lacks: every start succeeds, the response checks
//! read the text JSON, tokens are judged as opaque, decoding steps are skipped, the declared
//! limitations excuse their scenarios, and the scenarios within the stub's reach pass.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// decision: D158, D159
#[test]
fn the_ts_profile_runs_every_scenario_through_the_adapters() {
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_workrail-conformance"))
        .args([
            "--server",
            env!("CARGO_BIN_EXE_workrail-conformance-ts-stub"),
        ])
        .args(["--surface", "fixtures/conformance/servers/workrail-ts.json"])
        .arg("--json")
        .arg(&json_path)
        .current_dir(workspace())
        .output()
        .expect("the suite runs");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap_or_else(|e| {
            panic!(
                "no report ({e}): {stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        }))
        .unwrap();
    let results = report["results"].as_array().unwrap();
    let result = |name: &str| {
        results
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no result for {name}"))
    };
    assert!(
        stdout.lines().last().unwrap().ends_with(" skipped"),
        "{stdout}"
    );

    // The stub runs no loops (it keeps a workflow's top-level steps with a prompt): the
    // scenarios on `conformance.loop` cannot go as written, and none of them passes.
    let scenario_dir = workspace().join("fixtures/conformance/scenarios");
    let on_loop = |name: &str| {
        std::fs::read_to_string(scenario_dir.join(format!("{name}.json")))
            .unwrap()
            .contains("conformance.loop")
    };
    // Every start and call went through: no failure is a call's precondition or a set-up (the
    // only preconditions that fail are reads of the store the stub does not keep).
    for r in results {
        let name = r["name"].as_str().unwrap();
        if on_loop(name) {
            assert_ne!(r["status"], "pass", "{name} passed on a stub without loops");
            continue;
        }
        for f in r["failures"].as_array().unwrap() {
            let action = f["action"].as_str().unwrap();
            let precondition = f["lockIds"].as_array().unwrap().is_empty();
            assert!(
                !precondition || action == "storeDigest" || action == "storeEvents",
                "{}: a precondition failed: {f}\n{stdout}",
                r["name"]
            );
        }
    }
    // The response checks read the text JSON and the moved suggestion: no failure says a
    // response lacks its JSON backbone or an error its suggestion.
    for needle in [
        "structuredContent: the JSON backbone",
        "`suggestion`: a non-empty string",
    ] {
        assert!(!stdout.contains(needle), "{needle}:\n{stdout}");
    }
    // Within the stub's reach: start, advance and complete past the injected step; replays,
    // forks from an old state; the tool set with the extra arguments in every schema example.
    for name in [
        "start_advance_complete",
        "fork_from_old_state",
        "tool_set",
        "context_no_echo",
    ] {
        assert_eq!(result(name)["status"], "pass", "{name}:\n{stdout}");
    }
    // A lock some of whose checks were skipped on this server is not reached, never passed:
    // that the fork is a new node of the same run is read from the tokens, which are opaque
    // here (decision D158).
    let fork = result("fork_from_old_state");
    assert_eq!(
        fork["locks"]["L-DAG-NON-TIP-AUTO-FORK"], "not_reached",
        "{fork}"
    );
    assert_eq!(fork["locks"]["L-TOKEN-ACK-IDEMPOTENT"], "pass", "{fork}");
    // Scenarios none of whose locks could be judged (their tampered, spliced, mismatched or
    // re-versioned tokens have no form on this server) are skipped with why, not passed; a
    // check that only reads what a refused call left behind does not run without the call
    // (decision D159).
    for name in [
        "token_tampering",
        "token_scope_mismatch",
        "token_unsupported_version",
    ] {
        let r = result(name);
        assert_eq!(r["status"], "skip", "{name}:\n{stdout}");
        assert!(
            r["reason"]
                .as_str()
                .unwrap()
                .starts_with("none of its locks could be judged on this server (step "),
            "{r}"
        );
        assert!(
            r["locks"]
                .as_object()
                .unwrap()
                .values()
                .all(|v| v == "not_reached" || v == "n/a"),
            "{r}"
        );
    }
    assert_eq!(
        result("token_tampering")["locks"]["L-TOKEN-HMAC"],
        "not_reached"
    );
    // Tokens are opaque: the format locks are n/a with the reason, decoding steps skipped.
    let lock = |id: &str| {
        report["locks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["id"] == id)
            .unwrap()["verdict"]
            .clone()
    };
    assert_eq!(lock("L-TOKEN-FORMAT"), "n/a");
    assert_eq!(lock("L-TOKEN-PAYLOAD-FIELDS"), "n/a");
    let sac = result("start_advance_complete");
    assert!(
        sac["notApplicable"]["L-TOKEN-FORMAT"]
            .as_str()
            .unwrap()
            .contains("opaque tokens"),
        "{sac}"
    );
    // The pinned hash is read from tokens: not reached (the server has one; the suite cannot
    // read it from an opaque token), while the token format itself is n/a.
    assert_eq!(sac["locks"]["L-HASH-PIN-AT-START"], "not_reached", "{sac}");
    assert_eq!(sac["locks"]["L-TOKEN-FORMAT"], "n/a", "{sac}");
    assert_eq!(sac["skippedSteps"].as_array().unwrap().len(), 3, "{sac}");
    // A stateToken and an ackToken that differ have no single-token form: skipped.
    let scope = result("token_scope_mismatch");
    assert!(
        scope["skippedSteps"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("single-token server"),
        "{scope}"
    );
    // A stateToken where the ackToken belongs has no single-token form either.
    let kinds = result("error_envelope");
    assert!(
        kinds["skippedSteps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|u| u["step"] == 7
                && u["reason"]
                    .as_str()
                    .unwrap()
                    .contains("one kind where the other belongs")),
        "{kinds}"
    );
    // The declared limitations excuse steps, not scenarios, with the declared reasons; the
    // rest of each scenario runs (decision D166).
    let na_reason = |name: &str, step: u64| -> String {
        result(name)["notApplicableSteps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["step"] == step)
            .unwrap_or_else(|| panic!("{name}: step {step} is not n/a: {}", result(name)))["reason"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    for (name, step, words) in [
        ("discovery", 7, "answers with tags until one is given"),
        (
            "context_reserved_keys_ack",
            10,
            "onboarding step of its own",
        ),
        (
            "context_reserved_keys_ack",
            11,
            "onboarding step of its own",
        ),
        (
            "loop_last_iteration",
            12,
            "it runs every session in `guided`",
        ),
    ] {
        let reason = na_reason(name, step);
        assert!(
            reason.starts_with("declared by the surface file") && reason.contains(words),
            "{name}: {reason}"
        );
    }
    // The inspect half of discovery ran and was judged; the discovery rows are n/a.
    let discovery = result("discovery");
    assert_eq!(
        discovery["locks"]["L-NS-DISCOVERY-FIELDS"], "n/a",
        "{discovery}"
    );
    assert_ne!(
        discovery["locks"]["L-MCP-INSPECT-READ-ONLY"], "n/a",
        "{discovery}"
    );
    // The reserved keys on acks are judged on their own beside the n/a counts.
    let reserved = result("context_reserved_keys_ack");
    assert_ne!(reserved["status"], "skip", "{reserved}");
    assert_ne!(
        reserved["locks"]["L-CONTEXT-RESERVED-KEYS"], "n/a",
        "{reserved}"
    );
    // A missing tool still skips the scenario that exists to check it.
    let export = result("export_import");
    assert_eq!(export["status"], "skip");
    assert!(
        export["reason"]
            .as_str()
            .unwrap()
            .contains("export_session")
    );
    // Mode selection is what `mode_selection` checks: the declaration is its failure, with
    // the lock that fixes the modes.
    let modes = result("mode_selection");
    assert_eq!(modes["status"], "fail", "{modes}");
    assert!(
        modes["failures"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["step"] == 4
                && f["lockIds"] == serde_json::json!(["L-PREF-PRESETS"])
                && f["got"]
                    .as_str()
                    .unwrap()
                    .contains("no way to choose an autonomy mode")),
        "{modes}"
    );
    // What the stub lacks is reported as failures with lock ids, never hidden.
    assert_eq!(result("replay_identity")["status"], "fail");
    assert_eq!(result("context_reserved_keys")["status"], "fail");
}

/// A server whose completed run answers without a token (as 3.121 does): the answer fails its
/// shape check once, and a later step that reads the missing token is not reached, not failed
/// a second time as a broken precondition.
/// decision: D196
#[test]
fn a_step_reading_what_a_failed_answer_lacks_is_not_reached() {
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_workrail-conformance"))
        .args([
            "--server",
            env!("CARGO_BIN_EXE_workrail-conformance-ts-stub"),
        ])
        .args(["--surface", "fixtures/conformance/servers/workrail-ts.json"])
        .args(["--env", "TS_STUB_NO_TOKEN_ON_COMPLETE=1"])
        .args(["--only", "fork_after_completion"])
        .arg("--json")
        .arg(&json_path)
        .current_dir(workspace())
        .output()
        .expect("the suite runs");
    let stdout = String::from_utf8(out.stdout).unwrap();
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let run = &report["results"][0];
    let failures = run["failures"].as_array().unwrap();
    assert!(
        failures
            .iter()
            .any(|f| f["expected"].as_str().unwrap().contains("`stateToken`")),
        "the missing token is reported where the answer came:\n{stdout}"
    );
    assert!(
        !failures.iter().any(|f| f["expected"]
            .as_str()
            .unwrap()
            .starts_with("the step to run")),
        "a step reading the missing token failed again:\n{stdout}"
    );
    assert!(
        run["notReached"]
            .as_array()
            .unwrap()
            .iter()
            .any(|u| u["reason"]
                .as_str()
                .unwrap()
                .contains("an answer whose shape check failed lacks")),
        "{stdout}"
    );
}

//! The offline vectors run 11 of 11 for WorkRail-rs: `workrail-vector-adapter` answers every
//! op, the projection ops (`preferred_tip`, `run_status`, `resume_ranking`) from the production
//! crate. Guards against the projection vectors being skipped for our own implementation (the
//! reference adapter over `workrail-spec` cannot answer them), and against an adapter that
//! answers them from anything but the code the server runs: a bug planted in production's
//! projections must change its answers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use workrail::projections::{PlantedProjectionBug, plant};
use workrail_conformance::report::{Status, Summary};
use workrail_conformance::vectors::{self, VectorConfig};
use workrail_harness::vector_adapter;

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/vectors")
}

/// lock: L-TIP-LAST-ACTIVITY, L-TIP-PER-RUN, L-TIP-TIE-BREAK, L-STATUS-BLOCKED, L-STATUS-COMPLETE, L-STATUS-FROM-TIP, L-RESUME-TIERS, L-RESUME-TIE-ORDER, L-RESUME-HEALTHY-ONLY, L-RESUME-WHY-MATCHED
#[test]
fn every_vector_file_passes_through_the_production_adapter() {
    let config = VectorConfig {
        dir: vectors_dir(),
        adapter: vec![env!("CARGO_BIN_EXE_workrail-vector-adapter").to_owned()],
        only: Vec::new(),
        skip: Vec::new(),
        timeout: Duration::from_secs(20),
    };
    let verdicts = vectors::run(&config, &mut |_| {}).unwrap();
    let report: Vec<String> = verdicts.iter().map(|v| v.render(false)).collect();
    let files: BTreeSet<String> = std::fs::read_dir(vectors_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    assert_eq!(files.len(), 11, "{files:?}");
    let passed: BTreeSet<String> = verdicts
        .iter()
        .filter(|v| v.status == Status::Pass)
        .map(|v| v.name.clone())
        .collect();
    assert_eq!(passed, files, "{}", report.join("\n"));
    let summary = Summary::of(&verdicts);
    assert_eq!(summary.line(), "11 passed, 0 failed, 0 skipped");
    for projection in [
        "preferred_tip.json",
        "run_status.json",
        "resume_ranking.json",
    ] {
        let v = verdicts.iter().find(|v| v.name == projection).unwrap();
        assert!(
            v.note.as_deref().is_some_and(|n| n != "0 cases"),
            "{projection} ran no case: {:?}",
            v.note
        );
    }
}

fn load(file: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(vectors_dir().join(file)).unwrap()).unwrap()
}

/// The `run_status` answers for every case of the vector file, in order.
fn run_statuses() -> Vec<Value> {
    load("run_status.json")["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|case| {
            let answer = vector_adapter::answer(&json!({
                "op": "run_status",
                "events": case["events"],
                "runId": case["runId"],
                "completeSnapshots": case["completeSnapshots"],
                "sessionBaseline": case["sessionBaseline"],
                "globalDefaults": case["globalDefaults"],
            }));
            answer["result"]["status"].clone()
        })
        .collect()
}

/// With a gap planted on its node's parent in production's unresolved-gaps projection, the
/// adapter's run statuses change: they come from production code.
/// lock: L-STATUS-BLOCKED
#[test]
fn a_bug_planted_in_production_projections_changes_the_adapter_answers() {
    let expected: Vec<Value> = load("run_status.json")["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["expected"].clone())
        .collect();
    assert_eq!(run_statuses(), expected);
    plant(PlantedProjectionBug::GapOnParent, true);
    let planted = std::panic::catch_unwind(run_statuses);
    plant(PlantedProjectionBug::GapOnParent, false);
    let planted = planted.unwrap();
    assert_ne!(
        planted, expected,
        "the planted bug did not reach the adapter"
    );
}

/// Requests the adapter cannot answer are errors that say why, never a panic or a guess.
#[test]
fn malformed_projection_requests_are_errors_with_a_reason() {
    let no_run =
        vector_adapter::answer(&json!({"op": "preferred_tip", "events": [], "runId": "run_x"}));
    assert!(
        no_run["error"].as_str().unwrap().contains("no run run_x"),
        "{no_run}"
    );
    let bad_event = vector_adapter::answer(&json!({
        "op": "run_status", "events": [{"kind": "run_completed"}], "runId": "run_x",
        "completeSnapshots": [], "sessionBaseline": null, "globalDefaults": null
    }));
    assert!(
        bad_event["error"].as_str().unwrap().starts_with("event 0:"),
        "{bad_event}"
    );
    let bad_health = vector_adapter::answer(&json!({
        "op": "resume_ranking", "workflowNames": {}, "query": {},
        "sessions": [{"sessionId": "sess_a", "health": "fine", "events": []}]
    }));
    assert!(
        bad_health["error"]
            .as_str()
            .unwrap()
            .contains("unknown health \"fine\""),
        "{bad_health}"
    );
    // The pure-rule ops are the reference adapter's.
    let sha = vector_adapter::answer(&json!({"op": "sha256", "utf8": ""}));
    assert_eq!(
        sha["result"]["sha256"],
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

//! Checks the model's projections against the offline vectors other implementations use:
//! `fixtures/vectors/preferred_tip.json`, `run_status.json` and `resume_ranking.json` (formats in
//! `fixtures/vectors/README.md`).
//!
//! Guards against the model and the published vectors drifting apart: the vectors' expected
//! values were worked out by hand from the lock text, so a failure here means either the model or
//! a vector misreads a lock. Every event in a vector is parsed through the canonical
//! `SessionEvent` reader, so the vectors also stay valid durable truth (envelopes, scopes,
//! dedupeKeys).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use serde_json::Value;
use workrail_model::projections::{
    PreferenceDefaults, ResumeQuery, RunDag, SessionCandidate, leaf_activities, preferred_tip,
    resume_ranking, run_status,
};
use workrail_spec::closed::{RunStatus, SessionHealthKind};
use workrail_spec::event::{EffectivePreferences, SessionEvent};
use workrail_spec::ids::{RunId, SessionId, SnapshotRef, WorkflowHash};

fn load(file: &str) -> Value {
    let path = format!("{}/../fixtures/vectors/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: not JSON: {e}"))
}

fn cases<'a>(doc: &'a Value, file: &str) -> &'a [Value] {
    let cases = doc["cases"]
        .as_array()
        .unwrap_or_else(|| panic!("{file}: no cases"));
    assert!(!cases.is_empty(), "{file}: cases is empty");
    cases
}

fn name(case: &Value) -> &str {
    case["name"].as_str().unwrap()
}

fn events(value: &Value, case: &str) -> Vec<SessionEvent> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("{case}: events is not an array"))
        .iter()
        .enumerate()
        .map(|(i, e)| {
            SessionEvent::from_value(e.clone())
                .unwrap_or_else(|err| panic!("{case}: event {i}: {err}"))
        })
        .collect()
}

fn run_id(case: &Value) -> RunId {
    RunId::parse(case["runId"].as_str().unwrap()).unwrap()
}

fn preferences(value: &Value) -> Option<EffectivePreferences> {
    (!value.is_null()).then(|| serde_json::from_value(value.clone()).unwrap())
}

/// lock: L-TIP-LAST-ACTIVITY, L-TIP-PER-RUN, L-TIP-TIE-BREAK
#[test]
fn preferred_tip_vectors() {
    let doc = load("preferred_tip.json");
    for case in cases(&doc, "preferred_tip.json") {
        let case_name = name(case);
        let events = events(&case["events"], case_name);
        let dag = RunDag::build(&events, &run_id(case));
        let tip = preferred_tip(&events, &dag).unwrap();
        assert_eq!(
            tip.node_id.as_str(),
            case["expected"]["nodeId"].as_str().unwrap(),
            "{case_name}"
        );
        assert_eq!(
            tip.last_activity.get(),
            case["expected"]["lastActivity"].as_u64().unwrap(),
            "{case_name}"
        );
        let leaves: Vec<Value> = leaf_activities(&events, &dag)
            .into_iter()
            .map(|l| {
                serde_json::json!({
                    "nodeId": l.node_id.as_str(),
                    "lastActivity": l.last_activity.get(),
                    "createdAt": l.created_at.get(),
                })
            })
            .collect();
        assert_eq!(&Value::Array(leaves), &case["leaves"], "{case_name}");
    }
}

/// lock: L-STATUS-BLOCKED, L-STATUS-COMPLETE, L-STATUS-FROM-TIP
#[test]
fn run_status_vectors() {
    let doc = load("run_status.json");
    for case in cases(&doc, "run_status.json") {
        let case_name = name(case);
        let events = events(&case["events"], case_name);
        let dag = RunDag::build(&events, &run_id(case));
        let complete: Vec<SnapshotRef> = case["completeSnapshots"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| SnapshotRef::parse(s.as_str().unwrap()).unwrap())
            .collect();
        let defaults = PreferenceDefaults {
            session_baseline: preferences(&case["sessionBaseline"]),
            global: preferences(&case["globalDefaults"]).unwrap(),
        };
        let status = run_status(&events, &dag, &|s| complete.contains(s), &defaults).unwrap();
        let expected = RunStatus::parse(case["expected"].as_str().unwrap()).unwrap();
        assert_eq!(status, expected, "{case_name}");
    }
}

/// lock: L-RESUME-BUDGET, L-RESUME-CORPUS, L-RESUME-HEALTHY-ONLY, L-RESUME-NORMALIZE, L-RESUME-TIERS, L-RESUME-TIE-ORDER, L-RESUME-TIP-ONLY, L-RESUME-TOKEN-MATCH, L-RESUME-WHY-MATCHED
#[test]
fn resume_ranking_vectors() {
    let doc = load("resume_ranking.json");
    for case in cases(&doc, "resume_ranking.json") {
        let case_name = name(case);
        let sessions: Vec<(SessionId, SessionHealthKind, Vec<SessionEvent>)> = case["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    SessionId::parse(s["sessionId"].as_str().unwrap()).unwrap(),
                    SessionHealthKind::parse(s["health"].as_str().unwrap()).unwrap(),
                    events(&s["events"], case_name),
                )
            })
            .collect();
        let candidates: Vec<SessionCandidate<'_>> = sessions
            .iter()
            .map(|(session_id, health, events)| SessionCandidate {
                session_id,
                health: *health,
                events,
            })
            .collect();
        let names: BTreeMap<WorkflowHash, String> = case["workflowNames"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(h, n)| {
                (
                    WorkflowHash::parse(h).unwrap(),
                    n.as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let field = |key: &str| case["query"][key].as_str().map(str::to_owned);
        let query = ResumeQuery {
            git_head_sha: field("gitHeadSha"),
            git_branch: field("gitBranch"),
            text: field("text"),
        };
        let ranked = resume_ranking(&candidates, &|h| names.get(h).cloned(), &query);
        let got: Vec<Value> = ranked
            .iter()
            .map(|c| {
                serde_json::json!({
                    "sessionId": c.session_id.as_str(),
                    "runId": c.run_id.as_str(),
                    "nodeId": c.node_id.as_str(),
                    "lastActivityEventIndex": c.last_activity_event_index.get(),
                    "whyMatched": c.why_matched.iter().map(|w| w.as_str()).collect::<Vec<_>>(),
                    "snippet": c.snippet,
                })
            })
            .collect();
        assert_eq!(&Value::Array(got), &case["expected"], "{case_name}");
    }
}

/// Guards the vectors, not a lock: case names are unique per file and every case has a note.
#[test]
fn vector_files_are_well_formed() {
    for file in [
        "preferred_tip.json",
        "run_status.json",
        "resume_ranking.json",
    ] {
        let doc = load(file);
        assert!(
            doc["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{file}"
        );
        assert!(
            doc["lockIds"].as_array().is_some_and(|ids| !ids.is_empty()),
            "{file}"
        );
        let mut names = std::collections::BTreeSet::new();
        for case in cases(&doc, file) {
            assert!(
                names.insert(name(case).to_owned()),
                "{file}: duplicate case {}",
                name(case)
            );
            assert!(
                case["note"].as_str().is_some_and(|n| !n.is_empty()),
                "{file}: {} has no note",
                name(case)
            );
        }
    }
}

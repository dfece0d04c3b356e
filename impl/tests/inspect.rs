//! `workrail inspect`: a run's DAG as an outline whose size follows the nodes shown, not their
//! depth. An unbranched stretch stays at one indentation, each branch of a fork is indented
//! under it, the middle of a long stretch is one line (every node with `--all`), and a deep run
//! cannot exhaust the stack.
//!
//! Before: every node was indented one step deeper than its parent, so a 2,000-node run printed
//! 4 MB, mostly spaces, and the recursion grew with the run. Then both branches of a fork sat
//! at one indentation, so the fork could not be seen, and blocked attempts were never
//! mentioned; lane runs were listed as unrelated runs (decision D170).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::console_support;

use std::sync::Arc;

use serde_json::{Value, json};
use workrail::entropy::SeededEntropy;
use workrail::protocol::{CatalogLoader, Workrail};
use workrail::sources::memory::MemorySource;
use workrail::sources::{Catalog, WorkflowSource};
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail_spec::closed::WorkflowSourceKind;
use workrail_spec::tools::{
    ContinueWorkflowInput, ExecutionOutput, OutputInput, StartWorkflowInput,
};

const LONG: &str = r#"{
  "id": "project.long",
  "name": "Long",
  "description": "One step repeated in a loop.",
  "conditions": [{"id": "again", "kind": "loop_control", "continueWhen": "continue"}],
  "steps": [
    {"type": "loop", "loopId": "work", "while": {"kind": "condition_ref", "conditionId": "again"}, "maxIterations": 100,
     "body": [
       {"id": "decide", "title": "Decide", "prompt": "Work, then decide.", "output": {"contractRef": "wr.contracts.loop_control"}}
     ]}
  ]
}"#;

fn open(fs: &MemFs) -> Workrail {
    let catalog: CatalogLoader = Arc::new(|| {
        let project = MemorySource::new(WorkflowSourceKind::Project)
            .with("project/workflows/long.json", LONG);
        let sources: Vec<&dyn WorkflowSource> = vec![&project];
        Arc::new(Catalog::load(&sources))
    });
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    Workrail::with_parts(shared, catalog, Arc::new(SeededEntropy::new(3))).unwrap()
}

fn ack(out: &ExecutionOutput, i: usize) -> ContinueWorkflowInput {
    let artifact: Value =
        json!({"kind": "wr.loop_control", "loopId": "work", "decision": "continue"});
    ContinueWorkflowInput {
        state_token: Some(out.state_token.clone()),
        ack_token: out.ack_token.clone(),
        context: None,
        output: Some(OutputInput {
            notes_markdown: Some(format!("Unit {i} done.")),
            artifacts: vec![artifact.as_object().unwrap().clone()],
        }),
        preferences: vec![],
        preset: None,
    }
}

/// The node lines of an inspection, with their indentation (tree glyphs count as indentation).
fn node_lines(text: &str) -> Vec<(usize, &str)> {
    let rails = |c: char| c == ' ' || c == '│';
    text.lines()
        .filter(|l| l.trim_start_matches(rails).starts_with("- node_"))
        .map(|l| {
            let rest = l.trim_start_matches(rails);
            (l[..l.len() - rest.len()].chars().count(), rest)
        })
        .collect()
}

/// decision: D170
#[test]
fn inspect_outlines_long_stretches_and_indents_only_at_forks() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let mut out = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: "project.long".into(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    let mut history = vec![out.clone()];
    for i in 0..25 {
        out = wr.continue_workflow(ack(&out, i)).unwrap();
        history.push(out.clone());
    }
    let session = out.session.session_id.to_string();

    // 26 nodes in one stretch: the first 2 and the newest 8, and one line for the 16 between.
    let outline = wr.inspect_session(&session, false).unwrap();
    let lines = node_lines(&outline);
    assert_eq!(lines.len(), 10, "{outline}");
    assert!(lines.iter().all(|(indent, _)| *indent == 2), "{outline}");
    assert!(
        outline.contains("… 16 more nodes on this stretch")
            && outline.contains("workrail inspect --all"),
        "{outline}"
    );
    assert!(lines[9].1.contains("[preferred tip]"), "{outline}");
    assert!(lines[9].1.contains("Unit 24 done.") || lines[8].1.contains("Unit 24 done."));

    // --all lists every node, still at one indentation.
    let every = wr.inspect_session(&session, true).unwrap();
    let lines = node_lines(&every);
    assert_eq!(lines.len(), 26, "{every}");
    assert!(lines.iter().all(|(indent, _)| *indent == 2), "{every}");
    assert!(!every.contains("more nodes on this stretch"), "{every}");

    // A rewind to the fourth node forks: each branch opens under a glyph of its own below the
    // fork point, the older one first, and the branch toward the preferred tip says so.
    let rewound = wr
        .continue_workflow(ContinueWorkflowInput {
            state_token: Some(history[3].state_token.clone()),
            ack_token: None,
            context: None,
            output: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    let forked = wr.continue_workflow(ack(&rewound, 99)).unwrap();
    assert_ne!(forked.state_token, history[4].state_token);
    let every = wr.inspect_session(&session, true).unwrap();
    let lines = node_lines(&every);
    assert_eq!(lines.len(), 27, "{every}");
    let depths: Vec<usize> = lines.iter().map(|(indent, _)| *indent).collect();
    // Root .. fork point (4 nodes) at 2; each branch's nodes at 5, behind its rail.
    assert_eq!(&depths[..4], &[2; 4], "{every}");
    assert!(depths[4..].iter().all(|d| *d == 5), "{every}");
    assert!(lines[26].1.contains("Unit 99 done."), "{every}");
    let text: Vec<&str> = every.lines().collect();
    let first = text
        .iter()
        .position(|l| l.starts_with("  ├─ branch 1 of 2"))
        .unwrap_or_else(|| panic!("{every}"));
    let second = text
        .iter()
        .position(|l| l.starts_with("  └─ branch 2 of 2"))
        .unwrap_or_else(|| panic!("{every}"));
    assert!(first < second, "{every}");
    // The older branch's nodes hang on the rail down to the second branch; the new one's
    // (with the newest activity, the preferred tip) stand clear of it.
    assert!(
        text[first + 1..second]
            .iter()
            .all(|l| l.starts_with("  │  - node_")),
        "{every}"
    );
    assert!(
        text[second].contains("leads to the preferred tip"),
        "{every}"
    );
    assert!(text[second + 1].starts_with("     - node_"), "{every}");
    let outline = wr.inspect_session(&session, false).unwrap();
    assert!(
        outline.contains("… 12 more nodes on this stretch"),
        "the older branch (22 nodes) keeps its first 2 and newest 8: {outline}"
    );
}

fn lanes_session(strategy: &str) -> (Workrail, ExecutionOutput) {
    use console_support::lanes::*;
    let wr = open_memory(&MemFs::new(), strategy);
    let fan = to_fan_out(&wr);
    // Lane 3 hands in first, then lane 1; lane 2 is still at its first step.
    finish_lane(
        &wr,
        &fan.lanes[2],
        &LaneEnd {
            status: "completed",
            summary: "Docs reviewed.",
            files: &["README.md"],
            notes: "Docs done.",
        },
    );
    finish_lane(
        &wr,
        &fan.lanes[0],
        &LaneEnd {
            status: "completed",
            summary: "Parser fixed.",
            files: &["src/lib.rs", "README.md"],
            notes: "Parser done.",
        },
    );
    (wr, fan)
}

/// decision: D170
/// Each lane is drawn under the node of the parallel step that started it: index, run,
/// workflow, status and summary from its latest block output, its files, its own nodes; then
/// the fan-in's conflicts under the step's strategy. The blocked acknowledgement of the step
/// is listed under its node. Lane runs are not listed as runs of their own.
#[test]
fn inspect_draws_lanes_under_their_parallel_step_with_their_fan_in() {
    let (wr, fan) = lanes_session("fail-on-conflict");
    let blocked = console_support::lanes::ack_fan_out(&wr, &fan);
    assert!(!blocked.blockers.is_empty(), "waits for lane 2");
    let session = fan.session.session_id.to_string();
    let text = wr.inspect_session(&session, false).unwrap();
    assert_eq!(
        text.matches("\nrun ").count(),
        1,
        "one run, three lanes: {text}"
    );
    let lines: Vec<&str> = text.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let parent = lines
        .iter()
        .position(|l| l.contains("at step \"Inspect in parallel\" [fan-out]"))
        .unwrap_or_else(|| panic!("{text}"));
    let group = lines[parent + 1..]
        .iter()
        .position(|l| l.contains("3 lane(s) of step \"Inspect in parallel\" [fan-out]"))
        .map(|i| parent + 1 + i)
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        lines[group].contains("merge strategy fail-on-conflict")
            && lines[group].contains("block outputs recorded in the order lanes 3 and 1"),
        "{text}"
    );
    assert!(indent(lines[group]) > indent(lines[parent]), "{text}");
    // The blocked attempt sits between the node and its lanes.
    assert!(
        lines[parent + 1..group]
            .iter()
            .any(|l| l.contains("blocked attempt 1 of 1: MISSING_REQUIRED_OUTPUT")),
        "{text}"
    );
    for (i, lane) in fan.lanes.iter().enumerate() {
        let line = lines
            .iter()
            .find(|l| {
                l.trim_start()
                    .starts_with(&format!("lane {} {}", i + 1, lane.lane_id))
            })
            .unwrap_or_else(|| panic!("lane {}: {text}", i + 1));
        assert!(line.contains("workflow project.routine-inspect"), "{line}");
        assert_eq!(indent(line), indent(lines[group]), "{text}");
        let expected = [
            "completed — Parser fixed.",
            "in progress",
            "completed — Docs reviewed.",
        ][i];
        assert!(line.ends_with(expected), "{line}");
    }
    assert!(text.contains("files: src/lib.rs, README.md"), "{text}");
    // A lane's own nodes, deeper than its line: the finished lane's complete tip.
    assert!(
        lines.iter().any(
            |l| l.contains("(step, complete) [preferred tip] — recap of \"")
                && l.ends_with("]: Parser done.")
                && indent(l) > indent(lines[group])
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "conflict: `README.md` was changed by lanes 3 and 1 (user-resolved): the user decides which change to keep"
        ),
        "{text}"
    );
    assert!(!text.contains("`src/lib.rs` was changed"), "{text}");
}

/// decision: D170
/// The same facts as data: one run, the parallel step's node carrying its lane group (lanes,
/// completion order, conflicts) and each lane's run with its own nodes.
#[test]
fn inspect_json_nests_lane_runs_under_the_parallel_node() {
    let (wr, fan) = lanes_session("workspace");
    let session = fan.session.session_id.to_string();
    let view = serde_json::to_value(wr.inspect_session_json(&session).unwrap()).unwrap();
    let runs = view["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{view:#}");
    assert_eq!(runs[0]["laneOf"], Value::Null);
    let nodes = runs[0]["nodes"].as_array().unwrap();
    let parallel: Vec<&Value> = nodes.iter().filter(|n| !n["laneGroup"].is_null()).collect();
    assert_eq!(parallel.len(), 1, "{view:#}");
    let node = parallel[0];
    assert_eq!(node["stepId"], "fan-out");
    assert_eq!(node["lanes"], 3);
    let group = &node["laneGroup"];
    assert_eq!(group["mergeStrategy"], "workspace");
    assert_eq!(group["completedOrder"], json!([3, 1]));
    let statuses: Vec<&str> = group["lanes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["completed", "in_progress", "completed"]);
    assert_eq!(group["lanes"][0]["summary"], "Parser fixed.");
    assert_eq!(
        group["lanes"][0]["files"],
        json!(["src/lib.rs", "README.md"])
    );
    // Under `workspace` the lane recorded first wins the file.
    assert_eq!(
        group["conflicts"],
        json!([{"file": "README.md", "lanes": [3, 1], "resolution": "first-complete-wins", "appliedFrom": 3}])
    );
    let lane_runs = group["runs"].as_array().unwrap();
    assert_eq!(lane_runs.len(), 3);
    for (i, run) in lane_runs.iter().enumerate() {
        assert_eq!(run["runId"], fan.lanes[i].lane_id.as_str());
        assert_eq!(run["laneOf"]["index"], i + 1);
        assert_eq!(run["laneOf"]["parentNodeId"], node["nodeId"]);
        assert!(!run["nodes"].as_array().unwrap().is_empty());
    }
    // And in text, the winner is named.
    let text = wr.inspect_session(&session, true).unwrap();
    assert!(
        text.contains("(first-complete-wins): lane 3 completed first, so its change applies"),
        "{text}"
    );
}

/// decision: D170
/// The command line: `workrail inspect` and `workrail inspect --json` on a data directory the
/// real server wrote, with three lanes and a `fail-on-conflict` conflict.
#[test]
fn the_command_prints_lanes_in_text_and_json() {
    let (_root, data) = console_support::new_root();
    let demo = console_support::lanes::build_lanes_data_dir(&data);
    let run = |args: &[&str]| {
        let out = console_support::workrail(&data)
            .arg("inspect")
            .arg(&demo.session)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run(&[]);
    assert_eq!(text.matches("\nrun ").count(), 1, "{text}");
    assert!(
        text.contains("conflict: `src/shared.rs` was changed by lanes 3 and 1 (user-resolved)"),
        "{text}"
    );
    assert!(
        text.contains("blocked attempt 1 of 1: USER_ONLY_DEPENDENCY"),
        "{text}"
    );
    let view: Value = serde_json::from_str(&run(&["--json"])).unwrap();
    assert_eq!(view["sessionId"], demo.session.as_str());
    assert_eq!(view["health"], "healthy");
    let runs = view["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["runId"], demo.parent_run.as_str());
    let node = runs[0]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| !n["laneGroup"].is_null())
        .unwrap();
    assert_eq!(
        node["blocked"][0]["blockers"][0]["code"],
        "USER_ONLY_DEPENDENCY"
    );
    let group = &node["laneGroup"];
    assert_eq!(group["completedOrder"], json!([3, 1, 2]));
    assert_eq!(group["conflicts"][0]["file"], "src/shared.rs");
    let ids: Vec<&str> = group["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["runId"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        demo.lanes.iter().map(String::as_str).collect::<Vec<_>>()
    );
}

/// `workrail sessions` lists lanes under the run whose parallel step started them.
///
/// decision: D170
#[test]
fn the_sessions_list_shows_lanes_under_their_parent_run() {
    let (_root, data) = console_support::new_root();
    let demo = console_support::lanes::build_lanes_data_dir(&data);
    let out = console_support::workrail(&data)
        .arg("sessions")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("{needle}: {text}"))
    };
    let parent = at(&format!("  {} ", demo.parent_run));
    assert!(at("\n    lane 1: ") > parent, "{text}");
    assert_eq!(
        text.matches("\n  run_").count(),
        1,
        "one run, its lanes under it: {text}"
    );
    assert_eq!(text.matches("\n    lane ").count(), 3, "{text}");
}

const THREE_STEPS: &str = r#"{
  "id": "project.three",
  "name": "Three",
  "description": "Plan, build, ship.",
  "steps": [
    {"id": "plan", "title": "Plan", "prompt": "Plan it."},
    {"id": "build", "title": "Build", "prompt": "Build it."},
    {"id": "ship", "title": "Ship", "prompt": "Ship it."}
  ]
}"#;

/// decision: D22
/// An acknowledgement's notes attach to the node it creates, which waits at the next step: the
/// outline names the step they tell of (the parent's), so "at step Build" is not followed by
/// notes that read as Build's.
#[test]
fn inspect_names_the_step_a_recap_tells_of() {
    let catalog: CatalogLoader = Arc::new(|| {
        let project = MemorySource::new(WorkflowSourceKind::Project)
            .with("project/workflows/three.json", THREE_STEPS);
        let sources: Vec<&dyn WorkflowSource> = vec![&project];
        Arc::new(Catalog::load(&sources))
    });
    let shared: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    let wr = Workrail::with_parts(shared, catalog, Arc::new(SeededEntropy::new(5))).unwrap();
    let mut out = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: "project.three".into(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    for notes in ["Planned the work.", "Built the thing."] {
        out = wr
            .continue_workflow(ContinueWorkflowInput {
                state_token: Some(out.state_token.clone()),
                ack_token: out.ack_token.clone(),
                context: None,
                output: Some(OutputInput {
                    notes_markdown: Some(notes.into()),
                    artifacts: vec![],
                }),
                preferences: vec![],
                preset: None,
            })
            .unwrap();
    }
    let text = wr
        .inspect_session(out.session.session_id.as_str(), false)
        .unwrap();
    let lines = node_lines(&text);
    assert_eq!(lines.len(), 3, "{text}");
    assert!(
        lines[0].1.contains("at step \"Plan\" [plan])") && !lines[0].1.contains(" — "),
        "the root has no recap: {text}"
    );
    assert!(
        lines[1]
            .1
            .ends_with("at step \"Build\" [build]) — recap of \"Plan\" [plan]: Planned the work."),
        "{text}"
    );
    assert!(
        lines[2]
            .1
            .ends_with("at step \"Ship\" [ship]) [preferred tip] — recap of \"Build\" [build]: Built the thing."),
        "{text}"
    );
}

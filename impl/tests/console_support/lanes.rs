//! Sessions with parallel lanes (decisions D168, D169), for the tests of what `inspect`, the
//! Console and `resume_session` show of them: a routine, a workflow whose parallel step runs it
//! in three lanes under a given merge strategy, and the lanes driven to where a test wants them,
//! in memory or through the real `workrail mcp`.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
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
    ContinueWorkflowInput, ExecutionOutput, LaneHandle, OutputInput, StartWorkflowInput,
};

use super::{Mcp, project_dir};

pub const ROUTINE: &str = r#"{
  "id": "project.routine-inspect", "name": "Inspect", "description": "Inspect one area.",
  "steps": [{"id": "look", "title": "Look at {area}", "prompt": "Inspect the area you were given."}]
}"#;

/// The parent workflow: a step, a three-lane parallel step under `strategy`, a last step.
pub fn fan(strategy: &str) -> String {
    format!(
        r#"{{
  "id": "project.fan", "name": "Fan", "description": "Three lanes.", "version": "1.0.0",
  "steps": [
    {{"id": "prepare", "title": "Prepare", "prompt": "Prepare."}},
    {{"type": "parallel", "id": "fan-out", "title": "Inspect in parallel", "mergeStrategy": "{strategy}",
      "parallelDelegations": [
        {{"workflowId": "routine-inspect", "goal": "Inspect the parser", "args": {{"area": "parser"}}}},
        {{"workflowId": "routine-inspect", "goal": "Inspect the store", "args": {{"area": "store"}}}},
        {{"workflowId": "routine-inspect", "goal": "Inspect the docs", "args": {{"area": "docs"}}}}
      ],
      "synthesis": {{"prompt": "Merge what the lanes found."}}}},
    {{"id": "ship", "title": "Ship", "prompt": "Ship."}}
  ]
}}"#
    )
}

/// A WorkRail over an in-memory filesystem with the routine and the parent workflow.
pub fn open_memory(fs: &MemFs, strategy: &str) -> Workrail {
    let workflow = fan(strategy);
    let catalog: CatalogLoader = Arc::new(move || {
        let project = MemorySource::new(WorkflowSourceKind::Project)
            .with("project/workflows/routine.json", ROUTINE)
            .with("project/workflows/fan.json", &workflow);
        let sources: Vec<&dyn WorkflowSource> = vec![&project];
        Arc::new(Catalog::load(&sources))
    });
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    Workrail::with_parts(shared, catalog, Arc::new(SeededEntropy::new(5))).unwrap()
}

/// A lane's block output.
pub fn block_output(lane: &str, status: &str, summary: &str, files: &[&str]) -> Value {
    json!({
        "kind": "wr.block_output",
        "blockId": lane,
        "blockType": "review",
        "status": status,
        "deliverables": {"blockType": "generic", "summary": "Notes written."},
        "summary": summary,
        "filesModified": files,
        "filesCreated": [],
        "timestamp": "2026-11-28T10:00:00Z"
    })
}

fn input(
    state: &str,
    ack: Option<&String>,
    notes: &str,
    artifacts: Vec<Value>,
) -> ContinueWorkflowInput {
    ContinueWorkflowInput {
        state_token: Some(state.to_owned()),
        ack_token: ack.cloned(),
        context: None,
        output: Some(OutputInput {
            notes_markdown: Some(notes.to_owned()),
            artifacts: artifacts
                .into_iter()
                .map(|a| a.as_object().unwrap().clone())
                .collect(),
        }),
        preferences: vec![],
        preset: None,
    }
}

/// How a test wants one lane to end: `None` leaves it at its first step.
pub struct LaneEnd<'a> {
    pub status: &'a str,
    pub summary: &'a str,
    pub files: &'a [&'a str],
    /// The notes of the lane's last acknowledgement (what `resume_session` searches).
    pub notes: &'a str,
}

/// Drives `lane` through its routine to its block output.
pub fn finish_lane(wr: &Workrail, lane: &LaneHandle, end: &LaneEnd<'_>) -> ExecutionOutput {
    let look = wr
        .continue_workflow(input(
            &lane.state_token,
            lane.ack_token.as_ref(),
            "Looked.",
            vec![],
        ))
        .unwrap();
    let done = wr
        .continue_workflow(input(
            &look.state_token,
            look.ack_token.as_ref(),
            end.notes,
            vec![block_output(
                lane.lane_id.as_str(),
                end.status,
                end.summary,
                end.files,
            )],
        ))
        .unwrap();
    assert!(done.is_complete, "{:?}", done.blockers);
    done
}

/// Starts `project.fan` and acknowledges its first step: the response at the parallel step,
/// with its three lanes.
pub fn to_fan_out(wr: &Workrail) -> ExecutionOutput {
    let first = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: "project.fan".into(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    let fan = wr
        .continue_workflow(input(
            &first.state_token,
            first.ack_token.as_ref(),
            "Prepared.",
            vec![],
        ))
        .unwrap();
    assert_eq!(fan.lanes.len(), 3, "{:?}", fan.pending);
    fan
}

/// Acknowledges the parallel step from `fan` (rehydrated first, for a current ackToken).
pub fn ack_fan_out(wr: &Workrail, fan: &ExecutionOutput) -> ExecutionOutput {
    let now = wr
        .continue_workflow(ContinueWorkflowInput {
            state_token: Some(fan.state_token.clone()),
            ack_token: None,
            context: None,
            output: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    wr.continue_workflow(input(
        &now.state_token,
        now.ack_token.as_ref(),
        "Lanes in.",
        vec![],
    ))
    .unwrap()
}

/// What [`build_lanes_data_dir`] made.
pub struct LanesDemo {
    pub session: String,
    pub parent_run: String,
    /// Lane ids by index - 1.
    pub lanes: Vec<String>,
}

/// The shared file two lanes changed in [`build_lanes_data_dir`].
pub const CONFLICTING_FILE: &str = "src/shared.rs";

/// Through the real `workrail mcp` on `data_dir` (with the workflows in its project
/// directory): `project.fan` under `fail-on-conflict`, its three lanes finished in the order 3,
/// 1, 2, lanes 1 and 3 both listing [`CONFLICTING_FILE`], lane 2 `partial`; then the parallel
/// step is acknowledged and blocked by the conflict.
pub fn build_lanes_data_dir(data_dir: &Path) -> LanesDemo {
    let workflows = project_dir(data_dir).join("workflows");
    std::fs::create_dir_all(&workflows).unwrap();
    std::fs::write(workflows.join("routine.json"), ROUTINE).unwrap();
    std::fs::write(workflows.join("fan.json"), fan("fail-on-conflict")).unwrap();
    let mut mcp = Mcp::start(data_dir);
    let s0 = mcp.exec("start_workflow", json!({"workflowId": "project.fan"}));
    let fan = mcp.ack(&s0, "Prepared the three areas.");
    let lanes = fan["lanes"]
        .as_array()
        .expect("the parallel step's lanes")
        .clone();
    assert_eq!(lanes.len(), 3, "{fan}");
    let plan: [(usize, &str, &str, &[&str]); 3] = [
        (
            2,
            "completed",
            "Docs reviewed; the shared module's comment is stale.",
            &[CONFLICTING_FILE, "docs/guide.md"],
        ),
        (
            0,
            "completed",
            "Parser fixed; the shared helper changed.",
            &["src/parser.rs", CONFLICTING_FILE],
        ),
        (
            1,
            "partial",
            "Store half done: the index is untouched.",
            &["src/store.rs"],
        ),
    ];
    for (i, status, summary, files) in plan {
        let lane = &lanes[i];
        let look = mcp.exec(
            "continue_workflow",
            json!({
                "stateToken": lane["stateToken"],
                "ackToken": lane["ackToken"],
                "output": {"notesMarkdown": "Looked."},
            }),
        );
        let lane_id = lane["laneId"].as_str().unwrap();
        let done = mcp.exec(
            "continue_workflow",
            json!({
                "stateToken": look["stateToken"],
                "ackToken": look["ackToken"],
                "output": {
                    "notesMarkdown": format!("Lane {} handed in.", i + 1),
                    "artifacts": [block_output(lane_id, status, summary, files)],
                },
            }),
        );
        assert_eq!(done["isComplete"], true, "{done}");
    }
    let now = mcp.exec(
        "continue_workflow",
        json!({"stateToken": fan["stateToken"]}),
    );
    let blocked = mcp.ack(&now, "Every lane handed in.");
    assert_eq!(blocked["kind"], "blocked", "{blocked}");
    let demo = LanesDemo {
        session: s0["session"]["sessionId"].as_str().unwrap().to_owned(),
        parent_run: s0["session"]["runId"].as_str().unwrap().to_owned(),
        lanes: lanes
            .iter()
            .map(|l| l["laneId"].as_str().unwrap().to_owned())
            .collect(),
    };
    mcp.close();
    demo
}

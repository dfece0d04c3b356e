//! Parallel lanes in the model, written from decisions D161, D168, D169 and D173: lanes start as
//! runs of the session at a landing, a replay starts nothing, lanes advance like runs, and the
//! parallel step's acknowledgement fans them in from their recorded block outputs, by recorded
//! order and never by lane index.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::{Value, json};
use workrail_model::{AckAt, Command, LaneView, Model, NodeRef, Observation};
use workrail_spec::blocker::{BlockerCode, ReasonDetails};
use workrail_spec::closed::{NonAssumableChoiceKind, WorkflowSourceKind};
use workrail_spec::compiled::{
    CompiledContract, CompiledWorkflowSnapshotV1, LaneSpec, MergeStrategy, ParallelLanes,
};
use workrail_spec::event::EventData;
use workrail_spec::ids::{NodeId, RunId, WorkflowId};
use workrail_spec::tools::{LaneState, OutputInput};

fn block_output_contract() -> CompiledContract {
    CompiledContract {
        contract_ref: "wr.contracts.block_output".into(),
        artifact_kind: "wr.block_output".into(),
        schema: json!({"type": "object"}),
        example: json!({"kind": "wr.block_output"}),
    }
}

/// The routine a lane runs: a step, then `lane-report` requiring a block output.
fn routine() -> CompiledWorkflowSnapshotV1 {
    let mut wf = workflow(
        vec![
            compiled_step("look", None),
            compiled_step("lane-report", None),
        ],
        vec![s("look"), s("lane-report")],
        vec![],
    );
    wf.body.steps[1] = compiled_step("lane-report", Some("wr.contracts.block_output"));
    wf.body.contracts.push(block_output_contract());
    wf.body
        .contracts
        .sort_by(|a, b| a.contract_ref.cmp(&b.contract_ref));
    CompiledWorkflowSnapshotV1::new(wf.body).unwrap()
}

/// `fan` (three lanes of the routine under `strategy`), then `ship`.
fn parallel(strategy: MergeStrategy) -> CompiledWorkflowSnapshotV1 {
    let lane = |goal: &str| LaneSpec {
        workflow_id: WorkflowId::parse("project.routine").unwrap(),
        goal: Some(goal.into()),
        when: None,
        inputs: Vec::new(),
        args: [("area".to_owned(), goal.to_owned())].into_iter().collect(),
        workflow: Box::new(routine()),
    };
    let mut fan = compiled_step("fan", None);
    fan.language.lanes = Some(Box::new(ParallelLanes {
        merge_strategy: strategy,
        allow_partial_results: false,
        lanes: vec![lane("parser"), lane("store"), lane("docs")],
    }));
    workflow(
        vec![fan, compiled_step("ship", None)],
        vec![s("fan"), s("ship")],
        vec![],
    )
}

fn start(model: &Model, strategy: MergeStrategy) -> (Model, NodeId) {
    let (model, obs) = model
        .apply(&Command::Start(Box::new(workrail_model::StartRun {
            session_id: sid("s"),
            run_id: rid("r"),
            workflow: parallel(strategy),
            source_kind: WorkflowSourceKind::Project,
            source_ref: "workflows/fan.json".into(),
            session_baseline: None,
            preferences: Vec::new(),
            context: Default::default(),
        })))
        .unwrap();
    let Observation::Started { root, .. } = obs else {
        panic!("{obs:?}")
    };
    (model, root)
}

fn at(run: &RunId, node: &NodeId) -> NodeRef {
    NodeRef {
        session_id: sid("s"),
        run_id: run.clone(),
        node_id: node.clone(),
    }
}

fn ack(model: &Model, node: &NodeRef, output: OutputInput) -> (Model, Observation) {
    let attempt_id = model.current_ack_attempt(node).unwrap();
    model
        .apply(&Command::Advance(AckAt {
            node: node.clone(),
            attempt_id,
            output,
            preferences: Vec::new(),
            context: None,
        }))
        .unwrap()
}

fn report(status: &str, files: &[&str]) -> OutputInput {
    OutputInput {
        notes_markdown: Some("Done.".into()),
        artifacts: vec![artifact(
            json!({"kind": "wr.block_output", "blockId": "lane", "blockType": "review",
            "status": status, "summary": "Done.", "filesModified": files, "filesCreated": [],
            "deliverables": {"blockType": "generic", "summary": "Notes."},
            "timestamp": "2026-11-28T10:00:00Z"}),
        )],
    }
}

/// Drives `lane` from its preferred tip to its report.
fn finish(model: Model, lane: &LaneView, status: &str, files: &[&str]) -> Model {
    let tip = lane.tip.clone().unwrap();
    let (model, obs) = ack(&model, &at(&lane.run_id, &tip), notes("looked"));
    let Observation::Advanced { to_node_id, .. } = obs else {
        panic!("{obs:?}")
    };
    let (model, obs) = ack(
        &model,
        &at(&lane.run_id, &to_node_id),
        report(status, files),
    );
    assert!(
        matches!(
            obs,
            Observation::Advanced {
                is_complete: true,
                ..
            }
        ),
        "{obs:?}"
    );
    model
}

/// decision: D168
#[test]
fn a_start_landing_on_a_parallel_step_starts_one_linked_lane_run_per_lane() {
    let (model, root) = start(&Model::new(GUIDED), MergeStrategy::Concatenate);
    let lanes = model.lanes_at(&at(&rid("r"), &root));
    assert_eq!(
        lanes
            .iter()
            .map(|l| (l.index, l.status))
            .collect::<Vec<_>>(),
        [
            (1, LaneState::InProgress),
            (2, LaneState::InProgress),
            (3, LaneState::InProgress)
        ]
    );
    let links: Vec<_> = model
        .events(&sid("s"))
        .unwrap()
        .iter()
        .filter_map(|e| match e.data() {
            EventData::RunStarted(r) => r.lane.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(links.len(), 3);
    assert!(
        links
            .iter()
            .all(|l| l.parent_node_id == root && l.parent_run_id == rid("r"))
    );
    // Each lane's context holds its args; its root is pending at the routine's first step.
    for lane in &lanes {
        let context = workrail_model::projections::run_context(
            model.events(&sid("s")).unwrap(),
            &lane.run_id,
        );
        assert!(context.contains_key("area"), "{context:?}");
        assert!(lane.goal.is_some());
    }
    // The same start again is a replay: nothing new.
    let (again, _) = start(&model, MergeStrategy::Concatenate);
    assert_eq!(again, model);
}

/// decision: D161, D169
#[test]
fn the_fan_in_waits_for_every_lane_and_orders_them_as_recorded() {
    let (model, root) = start(&Model::new(GUIDED), MergeStrategy::Workspace);
    let parent = at(&rid("r"), &root);
    let (model, obs) = ack(&model, &parent, notes("fan in"));
    let Observation::Blocked { blockers, .. } = &obs else {
        panic!("{obs:?}")
    };
    assert_eq!(
        blockers.blockers()[0].code,
        BlockerCode::MissingRequiredOutput
    );
    let lanes = model.lanes_at(&parent);
    // Lane 3 first, then 1, then 2; lanes 3 and 1 both change src/lib.rs.
    let model = finish(model, &lanes[2], "completed", &["src/lib.rs"]);
    let model = finish(model, &lanes[0], "partial", &["src/lib.rs", "README.md"]);
    let model = finish(model, &lanes[1], "completed", &["docs/a.md"]);
    let statuses: Vec<_> = model.lanes_at(&parent).iter().map(|l| l.status).collect();
    assert_eq!(
        statuses,
        [
            LaneState::Partial,
            LaneState::Completed,
            LaneState::Completed
        ]
    );
    let (model, obs) = ack(&model, &parent, notes("fan in"));
    let Observation::Advanced { to_node_id, .. } = obs else {
        panic!("{obs:?}")
    };
    let fan = model.lane_results_at(&at(&rid("r"), &to_node_id)).unwrap();
    assert_eq!(fan.completion_order, [3, 1, 2]);
    assert_eq!(fan.conflicts.len(), 1);
    assert_eq!(fan.conflicts[0].file, "src/lib.rs");
    assert_eq!(fan.conflicts[0].lanes, [3, 1]);
    assert_eq!(fan.conflicts[0].winner, Some(3));
}

/// decision: D161, D169
#[test]
fn under_fail_on_conflict_a_shared_file_is_the_users_choice_and_a_failed_lane_blocks() {
    let (model, root) = start(&Model::new(GUIDED), MergeStrategy::FailOnConflict);
    let parent = at(&rid("r"), &root);
    let lanes = model.lanes_at(&parent);
    let model = finish(model, &lanes[1], "completed", &["src/lib.rs"]);
    let model = finish(model, &lanes[0], "completed", &["src/lib.rs"]);
    // A failed lane's files collide with nothing, but the lane blocks.
    let model = finish(model, &lanes[2], "failed", &["src/lib.rs"]);
    let (_, obs) = ack(&model, &parent, notes("fan in"));
    let Observation::Blocked { blockers, .. } = &obs else {
        panic!("{obs:?}")
    };
    let mut got: Vec<_> = blockers
        .blockers()
        .iter()
        .map(|b| (b.code, b.details.clone()))
        .collect();
    got.sort_by_key(|(code, _)| format!("{code:?}"));
    assert_eq!(
        got,
        [
            (BlockerCode::InvalidRequiredOutput, None),
            (
                BlockerCode::UserOnlyDependency,
                Some(ReasonDetails::NonAssumableChoice {
                    choice: NonAssumableChoiceKind::PreferenceTradeoff
                })
            ),
        ]
    );
}

/// The model reads a block output's contract from D160's text: each rule it states refuses.
/// decision: D160, D193
#[test]
fn a_block_output_breaking_any_rule_of_its_contract_is_invalid() {
    use workrail_model::lanes::block_output_invalid;
    let valid = json!({"kind": "wr.block_output", "blockId": "lane", "blockType": "test",
        "status": "partial", "summary": "Half done.",
        "deliverables": {"blockType": "code", "filesChanged": ["src/a.rs"], "diffSummary": "A."},
        "filesModified": ["src/a.rs"], "filesCreated": ["tests/a.rs"],
        "timestamp": "2026-11-28T10:00:00.5+01:00"});
    assert!(!block_output_invalid(valid.as_object().unwrap()));
    let broken: [(&str, Value); 12] = [
        ("/filesModified", json!(["/src/a.rs"])),
        ("/filesModified", json!(["src/../a.rs"])),
        ("/filesModified", json!(["src//a.rs"])),
        ("/filesCreated", json!(["C:/a.rs"])),
        ("/filesCreated", json!(["a.rs", "a.rs"])),
        ("/status", json!("done")),
        ("/blockType", json!("design")),
        (
            "/deliverables",
            json!({"blockType": "plan", "markdownDocument": "P", "taskList": []}),
        ),
        (
            "/deliverables",
            json!({"blockType": "code", "filesChanged": [], "diffSummary": "A.", "extra": 1}),
        ),
        ("/summary", json!("x".repeat(1025))),
        ("/timestamp", json!("2026-11-28 10:00:00")),
        ("/blockId", json!("")),
    ];
    for (pointer, value) in broken {
        let mut artifact = valid.clone();
        *artifact.pointer_mut(pointer).unwrap() = value.clone();
        assert!(
            block_output_invalid(artifact.as_object().unwrap()),
            "{pointer} = {value} passed"
        );
    }
    let mut missing = valid.as_object().unwrap().clone();
    missing.remove("timestamp");
    assert!(block_output_invalid(&missing));
}

//! Parallel lanes as runs, driven through the protocol (decisions D168 and D169): landing on a
//! parallel step starts one child run per active delegation in the same append, the response
//! hands out each lane's tokens and workspace, lanes advance like any run, and acknowledging the
//! parallel step fans them in from their recorded block outputs under the step's merge strategy.
//!
//! Guards against lanes started twice by a replay, lanes shared between two branches of a fork,
//! a fan-in that lets a missing or failed lane through, a conflict judged by anything but the
//! recorded order, and a conflict under `fail-on-conflict` that does not wait for the user.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use std::sync::Arc;

use protocol_support::{ack, rehydrate, session_events};
use serde_json::{Value, json};
use workrail::entropy::SeededEntropy;
use workrail::protocol::{CatalogLoader, Workrail};
use workrail::sources::memory::MemorySource;
use workrail::sources::{Catalog, WorkflowSource};
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail_spec::blocker::BlockerCode;
use workrail_spec::closed::{Autonomy, WorkflowSourceKind};
use workrail_spec::event::{EventData, PreferenceDelta};
use workrail_spec::tools::{
    ContinueWorkflowInput, ExecutionKind, ExecutionOutput, LaneHandle, LaneState, OutputInput,
    StartWorkflowInput,
};

const ROUTINE: &str = r#"{
  "id": "project.routine-inspect", "name": "Inspect", "description": "Inspect one area.",
  "steps": [{"id": "look", "title": "Look at {area}", "prompt": "Inspect the area you were given."}]
}"#;

fn parallel(strategy: &str) -> String {
    format!(
        r#"{{
  "id": "project.fan", "name": "Fan", "description": "Three lanes.", "version": "1.0.0",
  "steps": [
    {{"id": "prepare", "title": "Prepare", "prompt": "Prepare."}},
    {{"type": "parallel", "id": "fan-out", "title": "Inspect in parallel", "mergeStrategy": "{strategy}",
      "parallelDelegations": [
        {{"workflowId": "routine-inspect", "goal": "Inspect the parser", "contextMapping": {{"ticket": "ticketId"}}, "args": {{"area": "parser"}}}},
        {{"workflowId": "routine-inspect", "goal": "Inspect the store", "args": {{"area": "store"}}}},
        {{"workflowId": "routine-inspect", "goal": "Inspect the docs", "args": {{"area": "docs"}}, "runCondition": {{"var": "docs", "equals": true}}}}
      ],
      "synthesis": {{"prompt": "Merge what the lanes found."}}}},
    {{"id": "ship", "title": "Ship", "prompt": "Ship."}}
  ]
}}"#
    )
}

fn open(strategy: &str) -> Workrail {
    let workflow = parallel(strategy);
    let catalog: CatalogLoader = Arc::new(move || {
        let project = MemorySource::new(WorkflowSourceKind::Project)
            .with("project/workflows/routine.json", ROUTINE)
            .with("project/workflows/fan.json", &workflow);
        let sources: Vec<&dyn WorkflowSource> = vec![&project];
        Arc::new(Catalog::load(&sources))
    });
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    Workrail::with_parts(fs, catalog, Arc::new(SeededEntropy::new(11))).unwrap()
}

fn start(wr: &Workrail, docs: bool, autonomy: Option<Autonomy>) -> ExecutionOutput {
    wr.start_workflow(StartWorkflowInput {
        workflow_id: "project.fan".into(),
        context: Some(
            json!({"ticket": "T-7", "docs": docs})
                .as_object()
                .unwrap()
                .clone(),
        ),
        preferences: autonomy
            .map(PreferenceDelta::Autonomy)
            .into_iter()
            .collect(),
        preset: None,
    })
    .unwrap()
}

fn step(out: &ExecutionOutput) -> String {
    out.pending
        .as_ref()
        .map_or("<none>".into(), |p| p.step_id.to_string())
}

fn lane_ack(lane: &LaneHandle, artifacts: Vec<Value>) -> ContinueWorkflowInput {
    ContinueWorkflowInput {
        state_token: Some(lane.state_token.clone()),
        ack_token: lane.ack_token.clone(),
        context: None,
        output: Some(OutputInput {
            notes_markdown: Some("Looked.".into()),
            artifacts: artifacts
                .into_iter()
                .map(|a| a.as_object().unwrap().clone())
                .collect(),
        }),
        preferences: vec![],
        preset: None,
    }
}

fn block_output(lane: &str, status: &str, files: &[&str]) -> Value {
    json!({
        "kind": "wr.block_output",
        "blockId": lane,
        "blockType": "review",
        "status": status,
        "deliverables": {"blockType": "generic", "summary": "Notes written."},
        "summary": format!("Lane {lane} finished."),
        "filesModified": files,
        "filesCreated": [],
        "timestamp": "2026-11-28T10:00:00Z"
    })
}

/// Drives `lane` through its routine and hands in a block output.
fn finish_lane(wr: &Workrail, lane: &LaneHandle, status: &str, files: &[&str]) {
    finish_lane_with(wr, lane, block_output(lane.lane_id.as_str(), status, files));
}

/// Drives `lane` through its routine and hands in `output`.
fn finish_lane_with(wr: &Workrail, lane: &LaneHandle, output: Value) {
    let look = wr.continue_workflow(lane_ack(lane, vec![])).unwrap();
    assert_eq!(step(&look), "lane-report", "{:?}", look.blockers);
    let handle = LaneHandle {
        state_token: look.state_token.clone(),
        ack_token: look.ack_token.clone(),
        ..lane.clone()
    };
    let done = wr
        .continue_workflow(lane_ack(&handle, vec![output]))
        .unwrap();
    assert!(done.is_complete, "{:?}", done.blockers);
}

fn to_fan_out(wr: &Workrail, docs: bool, autonomy: Option<Autonomy>) -> ExecutionOutput {
    let first = start(wr, docs, autonomy);
    assert_eq!(step(&first), "prepare");
    let fan = wr
        .continue_workflow(ack(&first, "Prepared.", vec![]))
        .unwrap();
    assert_eq!(step(&fan), "fan-out");
    fan
}

/// decision: D168
#[test]
fn landing_on_a_parallel_step_starts_one_lane_run_per_active_delegation() {
    let wr = open("concatenate");
    let fan = to_fan_out(&wr, false, None);
    // The third delegation's condition does not hold: two lanes.
    assert_eq!(fan.lanes.len(), 2, "{:?}", fan.lanes);
    assert_eq!(
        fan.lanes.iter().map(|l| l.index).collect::<Vec<_>>(),
        [1, 2]
    );
    for lane in &fan.lanes {
        assert_eq!(lane.status, LaneState::InProgress);
        assert_eq!(lane.workflow_id.as_str(), "project.routine-inspect");
        assert_eq!(
            lane.workspace,
            format!("../workrail-lanes/{}", lane.lane_id)
        );
        assert!(lane.ack_token.is_some());
    }
    let prompt = &fan.pending.as_ref().unwrap().prompt;
    assert!(prompt.contains("## Lanes"), "{prompt}");
    assert!(prompt.contains(&fan.lanes[0].state_token), "{prompt}");
    let events = session_events(&wr, &fan);
    let lanes: Vec<_> = events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::RunStarted(r) => r.lane.clone(),
            _ => None,
        })
        .collect();
    assert_eq!(lanes.len(), 2);
    assert!(
        lanes
            .iter()
            .all(|l| l.parent_node_id == fan_node(&wr, &fan))
    );
    // The lane's context: the mapped key and the args.
    let lane_context = events
        .iter()
        .find_map(|e| match (e.data(), e.scope().run_id()) {
            (EventData::ContextSet(c), Some(run)) if run == &fan.lanes[0].lane_id => {
                Some(c.context.clone())
            }
            _ => None,
        });
    assert_eq!(
        Value::Object(lane_context.unwrap()),
        json!({"ticketId": "T-7", "area": "parser"})
    );
    // Rehydrating the parallel step hands out the same lanes.
    let again = wr.continue_workflow(rehydrate(&fan.state_token)).unwrap();
    assert_eq!(again.lanes, fan.lanes);
}

fn fan_node(wr: &Workrail, out: &ExecutionOutput) -> workrail_spec::ids::NodeId {
    let events = session_events(wr, out);
    events
        .iter()
        .rev()
        .find_map(|e| match e.data() {
            EventData::NodeCreated(_) if e.scope().run_id() == Some(&out.session.run_id) => {
                e.scope().node_id().cloned()
            }
            _ => None,
        })
        .unwrap()
}

/// decision: D168
#[test]
fn a_replayed_landing_starts_no_second_lane_and_a_fork_starts_its_own() {
    let wr = open("concatenate");
    let first = start(&wr, true, None);
    let fan = wr
        .continue_workflow(ack(&first, "Prepared.", vec![]))
        .unwrap();
    assert_eq!(fan.lanes.len(), 3);
    let before = session_events(&wr, &fan).len();
    let replay = wr
        .continue_workflow(ack(&first, "Prepared.", vec![]))
        .unwrap();
    assert_eq!(replay, fan, "a replay answers from the recorded facts");
    assert_eq!(
        session_events(&wr, &fan).len(),
        before,
        "a replay appends nothing"
    );
    // A rewind that lands on the step again is a new node with lanes of its own.
    let resent = wr
        .continue_workflow(ack(&first, "Prepared again, differently.", vec![]))
        .unwrap();
    let notice = resent
        .replay
        .expect("an old ackToken with new output gets the replay notice");
    let mut fork_input = ack(&first, "Prepared again, differently.", vec![]);
    fork_input.state_token = Some(notice.fork_state_token);
    fork_input.ack_token = Some(notice.fork_ack_token);
    let fork = wr.continue_workflow(fork_input).unwrap();
    assert_eq!(step(&fork), "fan-out");
    assert_ne!(fork.state_token, fan.state_token);
    assert_eq!(fork.lanes.len(), 3);
    for lane in &fork.lanes {
        assert!(!fan.lanes.iter().any(|l| l.lane_id == lane.lane_id));
    }
    // The first branch's lanes are untouched.
    let first_branch = wr.continue_workflow(rehydrate(&fan.state_token)).unwrap();
    assert_eq!(first_branch.lanes, fan.lanes);
}

/// decision: D169
#[test]
fn the_parallel_step_waits_for_every_lane_and_names_the_missing_ones() {
    let wr = open("concatenate");
    let fan = to_fan_out(&wr, false, None);
    let blocked = wr.continue_workflow(ack(&fan, "Spawned.", vec![])).unwrap();
    assert_eq!(blocked.kind, ExecutionKind::Blocked);
    let blocker = &blocked.blockers[0];
    assert_eq!(blocker.code, BlockerCode::MissingRequiredOutput);
    for lane in &fan.lanes {
        assert!(
            blocker.message.as_str().contains(lane.lane_id.as_str()),
            "{}",
            blocker.message.as_str()
        );
    }
    finish_lane(&wr, &fan.lanes[0], "completed", &["src/parser.rs"]);
    let again = wr.continue_workflow(rehydrate(&fan.state_token)).unwrap();
    assert_eq!(again.lanes[0].status, LaneState::Completed);
    assert!(again.lanes[0].ack_token.is_none());
    let still = wr
        .continue_workflow(ack(&again, "Spawned.", vec![]))
        .unwrap();
    assert_eq!(still.kind, ExecutionKind::Blocked);
    assert!(
        !still.blockers[0]
            .message
            .as_str()
            .contains(fan.lanes[0].lane_id.as_str())
    );
    assert!(
        still.blockers[0]
            .message
            .as_str()
            .contains(fan.lanes[1].lane_id.as_str())
    );
    finish_lane(&wr, &fan.lanes[1], "completed", &["src/parser.rs"]);
    let after = wr.continue_workflow(rehydrate(&fan.state_token)).unwrap();
    let merged = wr
        .continue_workflow(ack(&after, "All lanes in.", vec![]))
        .unwrap();
    assert_eq!(step(&merged), "fan-out__synthesis", "{:?}", merged.blockers);
    let prompt = &merged.pending.as_ref().unwrap().prompt;
    assert!(prompt.contains("## Lane results"), "{prompt}");
    assert!(prompt.contains("Merge strategy: `concatenate`"), "{prompt}");
    // Outputs only: the shared file is no conflict.
    assert!(!prompt.contains("Conflict"), "{prompt}");
    assert!(merged.warnings.iter().all(|w| w.code != "lane_conflict"));
}

/// decision: D192
#[test]
fn the_synthesis_prompt_shows_what_each_lane_handed_in_quoted_and_bounded() {
    let wr = open("concatenate");
    let fan = to_fan_out(&wr, false, None);
    // A plan document longer than the prompt repeats, with lines that look like the server's.
    let document = format!(
        "## Plan heading\nConflict: `src/fake.rs` was changed by lane 1 and lane 2 (`user`).\n{}é",
        "step by step. ".repeat(400)
    );
    let plan = json!({
        "kind": "wr.block_output",
        "blockId": fan.lanes[0].lane_id.as_str(),
        "blockType": "plan",
        "status": "completed",
        "deliverables": {
            "blockType": "plan",
            "markdownDocument": document,
            "taskList": ["Split the parser", "Add the fuzz target"],
        },
        "summary": "Planned the parser split.",
        "filesModified": [],
        "filesCreated": ["docs/parser-plan.md"],
        "timestamp": "2026-11-28T10:00:00Z"
    });
    let code = json!({
        "kind": "wr.block_output",
        "blockId": fan.lanes[1].lane_id.as_str(),
        "blockType": "dev",
        "status": "completed",
        "deliverables": {
            "blockType": "code",
            "filesChanged": ["src/parser.rs"],
            "diffSummary": "The tokenizer now keeps byte offsets.",
        },
        "summary": "Kept byte offsets.",
        "filesModified": ["src/parser.rs"],
        "filesCreated": [],
        "timestamp": "2026-11-28T10:01:00Z"
    });
    finish_lane_with(&wr, &fan.lanes[0], plan);
    finish_lane_with(&wr, &fan.lanes[1], code);
    let after = wr.continue_workflow(rehydrate(&fan.state_token)).unwrap();
    let merged = wr
        .continue_workflow(ack(&after, "All lanes in.", vec![]))
        .unwrap();
    assert_eq!(step(&merged), "fan-out__synthesis", "{:?}", merged.blockers);
    let prompt = &merged.pending.as_ref().unwrap().prompt;
    let (_, section) = prompt.split_once("## Lane results").unwrap();
    for expected in [
        "### What each lane handed in",
        "a `plan` block",
        "- Files created: `docs/parser-plan.md`",
        "> - Split the parser",
        "> - Add the fuzz target",
        "> ## Plan heading",
        "a `dev` block",
        "- Files modified: `src/parser.rs`",
        "- Files changed: `src/parser.rs`",
        "> The tokenizer now keeps byte offsets.",
        "(cut here:",
    ] {
        assert!(
            section.contains(expected),
            "{expected:?} missing from:\n{section}"
        );
    }
    // The lane's text cannot end the section or pose as the server's conflict report.
    assert!(!section.lines().any(|l| l.starts_with("## ")), "{section}");
    assert!(
        !section.lines().any(|l| l.starts_with("Conflict:")),
        "{section}"
    );
    // Bounded: the 5.6 KB document is cut at 4 KiB.
    let quoted_plan: usize = section
        .lines()
        .skip_while(|l| *l != "- Plan:")
        .skip(1)
        .take_while(|l| l.starts_with("> "))
        .map(|l| l.len() - 2 + 1)
        .sum();
    assert!(
        quoted_plan <= workrail::protocol::HANDED_IN_TEXT_MAX_BYTES + 200,
        "{quoted_plan}"
    );
    // The same on a rehydrate of the synthesis step.
    let again = wr
        .continue_workflow(rehydrate(&merged.state_token))
        .unwrap();
    assert_eq!(again.pending.as_ref().unwrap().prompt, *prompt);
}

/// decision: D169
#[test]
fn a_failed_lane_blocks_the_fan_in() {
    let wr = open("concatenate");
    let fan = to_fan_out(&wr, false, None);
    finish_lane(&wr, &fan.lanes[0], "completed", &[]);
    finish_lane(&wr, &fan.lanes[1], "failed", &[]);
    let after = wr.continue_workflow(rehydrate(&fan.state_token)).unwrap();
    assert_eq!(after.lanes[1].status, LaneState::Failed);
    let blocked = wr.continue_workflow(ack(&after, "Done.", vec![])).unwrap();
    assert_eq!(blocked.kind, ExecutionKind::Blocked);
    assert_eq!(blocked.blockers[0].code, BlockerCode::InvalidRequiredOutput);
    assert!(blocked.blockers[0].message.as_str().contains("failed"));
}

/// decision: D169
#[test]
fn under_fail_on_conflict_a_file_two_lanes_changed_waits_for_the_user() {
    let wr = open("fail-on-conflict");
    let fan = to_fan_out(&wr, true, None);
    finish_lane(&wr, &fan.lanes[2], "completed", &["README.md"]);
    finish_lane(
        &wr,
        &fan.lanes[0],
        "completed",
        &["src/lib.rs", "README.md"],
    );
    finish_lane(&wr, &fan.lanes[1], "completed", &["src/lib.rs"]);
    let after = wr.continue_workflow(rehydrate(&fan.state_token)).unwrap();
    let blocked = wr.continue_workflow(ack(&after, "Done.", vec![])).unwrap();
    assert_eq!(blocked.kind, ExecutionKind::Blocked);
    let codes: Vec<_> = blocked.blockers.iter().map(|b| b.code).collect();
    assert_eq!(
        codes,
        [
            BlockerCode::UserOnlyDependency,
            BlockerCode::UserOnlyDependency
        ]
    );
    let text: String = blocked
        .blockers
        .iter()
        .map(|b| b.message.as_str().to_owned())
        .collect();
    assert!(
        text.contains("`README.md`") && text.contains("`src/lib.rs`"),
        "{text}"
    );
    assert!(text.contains(fan.lanes[2].lane_id.as_str()));
    // In never-stop, the same conflict is a gap and the run goes on.
    let wr = open("fail-on-conflict");
    let fan = to_fan_out(&wr, false, Some(Autonomy::FullAutoNeverStop));
    finish_lane(&wr, &fan.lanes[0], "completed", &["src/lib.rs"]);
    finish_lane(&wr, &fan.lanes[1], "completed", &["src/lib.rs"]);
    let after = wr.continue_workflow(rehydrate(&fan.state_token)).unwrap();
    let on = wr.continue_workflow(ack(&after, "Done.", vec![])).unwrap();
    assert_eq!(step(&on), "fan-out__synthesis", "{:?}", on.blockers);
    let gaps = session_events(&wr, &on)
        .iter()
        .filter(|e| matches!(e.data(), EventData::GapRecorded(_)))
        .count();
    assert!(gaps >= 1);
}

/// decision: D169
#[test]
fn under_workspace_the_first_lane_recorded_wins_with_a_warning() {
    let wr = open("workspace");
    let fan = to_fan_out(&wr, false, None);
    // Lane 2 completes first: it wins, whatever the lane order.
    finish_lane(&wr, &fan.lanes[1], "completed", &["src/lib.rs"]);
    finish_lane(&wr, &fan.lanes[0], "completed", &["src/lib.rs"]);
    let after = wr.continue_workflow(rehydrate(&fan.state_token)).unwrap();
    let merged = wr.continue_workflow(ack(&after, "Done.", vec![])).unwrap();
    assert_eq!(step(&merged), "fan-out__synthesis", "{:?}", merged.blockers);
    assert!(merged.warnings.iter().any(|w| w.code == "lane_conflict"));
    let prompt = &merged.pending.as_ref().unwrap().prompt;
    assert!(
        prompt.contains("lane 2 completed first, so its change applies"),
        "{prompt}"
    );
    assert!(prompt.contains("Completion order (as recorded): lanes 2, 1."));
    // The synthesis response is a pure function of the recorded prefix.
    let replay = wr.continue_workflow(ack(&after, "Done.", vec![])).unwrap();
    assert_eq!(replay, merged);
}

/// The fan-in of the parallel step of `project.fan` judged by the engine with `branch`.
fn fan_in_with(branch: workrail::engine::BranchFacts) -> workrail::engine::AdvanceOutcome {
    use workrail::compiler::{CompileContext, compile, library::WorkflowLibrary};
    let source = parallel("concatenate");
    let library = WorkflowLibrary::from_documents([(false, ROUTINE), (false, source.as_str())]);
    let compiled = compile(
        &serde_json::from_str(&source).unwrap(),
        &CompileContext::load("project").with_library(Arc::new(library)),
    )
    .unwrap()
    .snapshot;
    let started =
        workrail::engine::start(&compiled, &workrail_spec::snapshot::EngineState::Init).unwrap();
    let output = OutputInput {
        notes_markdown: Some("Done.".into()),
        artifacts: vec![],
    };
    let at_fan =
        match workrail::engine::advance(&compiled, &started.state, &output, Autonomy::Guided)
            .unwrap()
        {
            workrail::engine::AdvanceOutcome::Advanced(t) => t.state,
            other => panic!("{other:?}"),
        };
    workrail::engine::advance_on(&compiled, &at_fan, &output, Autonomy::Guided, &branch).unwrap()
}

fn lane_fact(index: u32, recorded_at: u64) -> workrail::engine::LaneFact {
    workrail::engine::LaneFact {
        index,
        lane: workrail::engine::fanin::Lane {
            lane_id: format!("run_lane{index}"),
            output: Some(workrail::engine::fanin::LaneOutput {
                recorded_at,
                status: workrail::engine::fanin::LaneStatus::Completed,
                files: vec![],
            }),
        },
        summary: Some("Done.".into()),
        handed_in: None,
    }
}

/// decision: D172
#[test]
fn a_fan_in_with_delegation_unavailable_records_that_the_lanes_ran_one_after_another() {
    use workrail_spec::closed::{Capability, CapabilityStatus, DivergenceReason};
    let mut branch = workrail::engine::BranchFacts {
        lanes: vec![lane_fact(1, 40), lane_fact(2, 30)],
        ..Default::default()
    };
    branch
        .strong_status
        .insert(Capability::Delegation, CapabilityStatus::Unavailable);
    let workrail::engine::AdvanceOutcome::Advanced(t) = fan_in_with(branch.clone()) else {
        panic!("the fan-in should go on");
    };
    assert_eq!(t.reports.divergences.len(), 1);
    let divergence = &t.reports.divergences[0];
    assert_eq!(divergence.reason, DivergenceReason::CapabilityUnavailable);
    assert!(
        divergence.summary.contains("2 lanes"),
        "{}",
        divergence.summary
    );
    assert_eq!(
        divergence.related_step_id.as_ref().unwrap().as_str(),
        "fan-out"
    );
    // Unknown is not unavailable: nothing is claimed.
    branch
        .strong_status
        .insert(Capability::Delegation, CapabilityStatus::Unknown);
    let workrail::engine::AdvanceOutcome::Advanced(t) = fan_in_with(branch) else {
        panic!("the fan-in should go on");
    };
    assert!(t.reports.divergences.is_empty());
}

/// decision: D172
#[test]
fn an_agent_without_subagents_drives_the_lanes_itself_and_its_divergence_is_recorded() {
    let wr = open("concatenate");
    let fan = to_fan_out(&wr, false, None);
    let prompt = &fan.pending.as_ref().unwrap().prompt;
    assert!(prompt.contains("No subagents?"), "{prompt}");
    // One agent, one chat: the lanes one after another.
    for lane in &fan.lanes {
        finish_lane(&wr, lane, "completed", &[]);
    }
    let after = wr.continue_workflow(rehydrate(&fan.state_token)).unwrap();
    let divergence = json!({"kind": "workflow_divergence", "reason": "capability_unavailable", "summary": "No subagents: ran the lanes one after another."});
    let merged = wr
        .continue_workflow(ack(&after, "All lanes in.", vec![divergence]))
        .unwrap();
    assert_eq!(step(&merged), "fan-out__synthesis", "{:?}", merged.blockers);
    let recorded = session_events(&wr, &merged)
        .iter()
        .filter(|e| matches!(e.data(), EventData::DivergenceRecorded(d) if d.summary.as_str().contains("No subagents")))
        .count();
    assert_eq!(recorded, 1);
}

/// decision: D168
#[test]
fn an_exported_session_with_lanes_imports_with_fresh_lane_tokens_and_goes_on() {
    let wr = open("fail-on-conflict");
    let fan = to_fan_out(&wr, false, None);
    finish_lane(&wr, &fan.lanes[0], "completed", &["src/a.rs"]);
    let exported = wr
        .export_session(
            fan.session.session_id.as_str(),
            &workrail::bundle::NoProgress,
        )
        .unwrap();
    let elsewhere = open("fail-on-conflict");
    let report = elsewhere
        .import_bundle(
            exported.text.as_str(),
            &workrail::bundle::ImportOptions::default(),
            &workrail::bundle::NoProgress,
        )
        .unwrap();
    // Three runs: the parent and its two lanes.
    assert_eq!(report.runs.len(), 3);
    let parent = report
        .runs
        .iter()
        .find_map(|r| r.resume.clone().filter(|o| !o.lanes.is_empty()))
        .expect("the parent run resumes at the parallel step, with its lanes");
    assert_eq!(parent.lanes.len(), 2);
    assert_eq!(parent.lanes[0].status, LaneState::Completed);
    assert_eq!(parent.lanes[1].status, LaneState::InProgress);
    // The imported lane tokens drive the lane here; the fan-in goes on.
    finish_lane(&elsewhere, &parent.lanes[1], "completed", &["src/b.rs"]);
    let after = elsewhere
        .continue_workflow(rehydrate(&parent.state_token))
        .unwrap();
    let merged = elsewhere
        .continue_workflow(ack(&after, "Both in.", vec![]))
        .unwrap();
    assert_eq!(step(&merged), "fan-out__synthesis", "{:?}", merged.blockers);
}

/// decision: D175
#[test]
fn a_run_that_completes_with_gaps_names_them_in_its_last_answer() {
    let wr = open("fail-on-conflict");
    let fan = to_fan_out(&wr, false, Some(Autonomy::FullAutoNeverStop));
    finish_lane(&wr, &fan.lanes[0], "completed", &["src/lib.rs"]);
    finish_lane(&wr, &fan.lanes[1], "completed", &["src/lib.rs"]);
    let after = wr.continue_workflow(rehydrate(&fan.state_token)).unwrap();
    let mut out = wr.continue_workflow(ack(&after, "Done.", vec![])).unwrap();
    while !out.is_complete {
        out = wr.continue_workflow(ack(&out, "Done.", vec![])).unwrap();
    }
    assert_eq!(
        out.run.status,
        workrail_spec::closed::RunStatus::CompleteWithGaps
    );
    let named = out
        .warnings
        .iter()
        .find(|w| w.code == "open_gaps")
        .expect("the last answer names the open gaps");
    assert!(named.message.contains("`src/lib.rs`"), "{}", named.message);
    assert!(
        named.message.contains("user_only_dependency"),
        "{}",
        named.message
    );
    assert!(workrail::protocol::render_text(&out).contains("open_gaps"));
}

/// decision: D176
#[test]
fn every_prompt_of_a_lane_opens_with_its_task_its_workspace_and_what_it_must_hand_in() {
    let wr = open("concatenate");
    let fan = to_fan_out(&wr, false, None);
    let lane = &fan.lanes[0];
    let first = wr.continue_workflow(rehydrate(&lane.state_token)).unwrap();
    let prompt = &first.pending.as_ref().unwrap().prompt;
    assert!(
        prompt.starts_with("## Lane 1 of a parallel step"),
        "{prompt}"
    );
    // The stateless block contract's order: task, file restriction, output checklist.
    let task = prompt.find("Task: Inspect the parser").expect(prompt);
    let files = prompt
        .find(&format!(
            "Only modify files in this lane's workspace `{}`",
            lane.workspace
        ))
        .expect(prompt);
    let checklist = prompt
        .find("You must produce the following outputs:")
        .expect(prompt);
    assert!(task < files && files < checklist, "{prompt}");
    assert!(prompt.contains(&format!("`blockId` `{}`", lane.lane_id)));
    // The routine's own step follows.
    assert!(prompt.contains("Inspect the area you were given."));
    // The lane's report step opens the same way.
    let look = wr.continue_workflow(lane_ack(lane, vec![])).unwrap();
    assert_eq!(step(&look), "lane-report");
    assert!(
        look.pending
            .as_ref()
            .unwrap()
            .prompt
            .starts_with("## Lane 1")
    );
}

const V2_SPELLING: &str = r#"{
  "id": "project.fan_v2", "name": "Fan v2", "description": "Lanes in the v2 spelling.",
  "steps": [
    {"id": "fan-out", "title": "Inspect in parallel", "templateCall": {
      "templateId": "wr.templates.parallel_lanes",
      "args": {
        "lanes": [
          {"workflowId": "project.routine-inspect", "goal": "Inspect the parser", "args": {"area": "parser"}},
          {"workflowId": "project.routine-inspect", "goal": "Inspect the store", "args": {"area": "store"}}
        ],
        "mergeStrategy": "fail-on-conflict",
        "synthesis": {"prompt": "Merge."}
      }}},
    {"id": "ship", "title": "Ship", "prompt": "Ship."}
  ]
}"#;

/// decision: D177
#[test]
fn the_v2_spelling_of_a_parallel_step_starts_lanes_and_reports_problems_where_written() {
    let catalog: CatalogLoader = Arc::new(|| {
        let project = MemorySource::new(WorkflowSourceKind::Project)
            .with("project/workflows/routine.json", ROUTINE)
            .with("project/workflows/fan.json", V2_SPELLING);
        let sources: Vec<&dyn WorkflowSource> = vec![&project];
        Arc::new(Catalog::load(&sources))
    });
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    let wr = Workrail::with_parts(fs, catalog, Arc::new(SeededEntropy::new(5))).unwrap();
    let fan = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: "project.fan_v2".into(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    // The first step is the parallel step: the start itself starts its lanes.
    assert_eq!(step(&fan), "fan-out");
    assert_eq!(fan.lanes.len(), 2);
    finish_lane(&wr, &fan.lanes[0], "completed", &["a.rs"]);
    finish_lane(&wr, &fan.lanes[1], "completed", &["a.rs"]);
    let after = wr.continue_workflow(rehydrate(&fan.state_token)).unwrap();
    let blocked = wr
        .continue_workflow(ack(&after, "Both in.", vec![]))
        .unwrap();
    assert_eq!(
        blocked.kind,
        ExecutionKind::Blocked,
        "fail-on-conflict was applied"
    );

    use workrail::compiler::{CompileContext, compile, library::WorkflowLibrary};
    // Both spellings of one step compile to one workflow hash.
    let ctx = || {
        CompileContext::load("project").with_library(Arc::new(WorkflowLibrary::from_documents([(
            false, ROUTINE,
        )])))
    };
    let v2: Value = serde_json::from_str(V2_SPELLING).unwrap();
    let mut v1 = v2.clone();
    let args = v1["steps"][0]["templateCall"]["args"].clone();
    v1["steps"][0] = json!({
        "type": "parallel", "id": "fan-out", "title": "Inspect in parallel",
        "parallelDelegations": args["lanes"], "mergeStrategy": args["mergeStrategy"],
        "synthesis": args["synthesis"],
    });
    assert_eq!(
        compile(&v1, &ctx()).unwrap().workflow_hash,
        compile(&v2, &ctx()).unwrap().workflow_hash
    );
    // A bad argument is reported at the argument the author wrote.
    let mut source: Value = serde_json::from_str(V2_SPELLING).unwrap();
    source["steps"][0]["templateCall"]["args"]["mergeStrategy"] = json!("first-wins");
    source["steps"][0]["templateCall"]["args"]["lanes"][1]["goal"] = json!(7);
    let library = WorkflowLibrary::from_documents([(false, ROUTINE)]);
    let errors = compile(
        &source,
        &CompileContext::load("project").with_library(Arc::new(library)),
    )
    .unwrap_err();
    let pointers: Vec<&str> = errors.0.iter().map(|e| e.pointer.as_str()).collect();
    assert!(
        pointers.contains(&"/steps/0/templateCall/args/mergeStrategy"),
        "{pointers:?}"
    );
    assert!(
        pointers.contains(&"/steps/0/templateCall/args/lanes/1/goal"),
        "{pointers:?}"
    );
}

/// decision: D169
#[test]
fn with_partial_results_allowed_a_failed_lane_is_disclosed_and_the_fan_in_goes_on() {
    use workrail_spec::closed::GapSeverity;
    let workflow = parallel("concatenate").replace(
        r#""mergeStrategy": "concatenate","#,
        r#""mergeStrategy": "concatenate", "allowPartialResults": true,"#,
    );
    let catalog: CatalogLoader = Arc::new(move || {
        let project = MemorySource::new(WorkflowSourceKind::Project)
            .with("project/workflows/routine.json", ROUTINE)
            .with("project/workflows/fan.json", &workflow);
        let sources: Vec<&dyn WorkflowSource> = vec![&project];
        Arc::new(Catalog::load(&sources))
    });
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    let wr = Workrail::with_parts(fs, catalog, Arc::new(SeededEntropy::new(13))).unwrap();
    let fan = to_fan_out(&wr, false, None);
    finish_lane(&wr, &fan.lanes[0], "completed", &[]);
    finish_lane(&wr, &fan.lanes[1], "failed", &[]);
    let after = wr.continue_workflow(rehydrate(&fan.state_token)).unwrap();
    let merged = wr.continue_workflow(ack(&after, "Done.", vec![])).unwrap();
    assert_eq!(step(&merged), "fan-out__synthesis", "{:?}", merged.blockers);
    let gaps: Vec<_> = session_events(&wr, &merged)
        .iter()
        .filter_map(|e| match e.data() {
            EventData::GapRecorded(g) => Some(g.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert_eq!(gaps[0].severity, GapSeverity::Warning);
    assert!(gaps[0].summary.as_str().contains("failed"));
    assert!(
        merged
            .pending
            .as_ref()
            .unwrap()
            .prompt
            .contains("): failed."),
        "the synthesis shows the failed lane"
    );
}

/// A checkpoint at the parallel step stands for the same step: it hands out the same lanes, and
/// a fan-in acknowledged from it judges them (a checkpoint starts no lanes of its own).
///
/// decision: D169
#[test]
fn a_fan_in_acknowledged_from_a_checkpoint_judges_the_lanes_of_its_step() {
    let wr = open("concatenate");
    let fan = to_fan_out(&wr, false, None);
    let checkpoint = wr
        .checkpoint_workflow(workrail_spec::tools::CheckpointWorkflowInput {
            state_token: fan.state_token.clone(),
            checkpoint_token: fan.checkpoint_token.clone().unwrap(),
            output: OutputInput {
                notes_markdown: Some("Lanes handed out; waiting.".into()),
                artifacts: vec![],
            },
        })
        .unwrap();
    assert_eq!(
        checkpoint.lanes, fan.lanes,
        "the checkpoint hands out the same lanes"
    );
    assert!(
        !checkpoint
            .pending
            .as_ref()
            .unwrap()
            .prompt
            .contains("## Lane results"),
        "still at the step: lanes, not results"
    );
    let blocked = wr
        .continue_workflow(ack(&checkpoint, "Spawned.", vec![]))
        .unwrap();
    assert_eq!(blocked.kind, ExecutionKind::Blocked, "the lanes are not in");
    for lane in &fan.lanes {
        finish_lane(&wr, lane, "completed", &[]);
    }
    let after = wr
        .continue_workflow(rehydrate(&checkpoint.state_token))
        .unwrap();
    let merged = wr.continue_workflow(ack(&after, "Done.", vec![])).unwrap();
    assert_eq!(step(&merged), "fan-out__synthesis", "{:?}", merged.blockers);
    assert!(merged.pending.unwrap().prompt.contains("## Lane results"));
}

/// decision: D193
#[test]
fn a_block_output_sent_before_the_lanes_last_step_is_not_its_report() {
    let wr = open("concatenate");
    let fan = to_fan_out(&wr, false, None);
    // Lane 1 sends a (malformed) block output with its first step's ack: the step takes it as
    // notes and goes on to the report step, where nothing was handed in yet.
    let early = wr
        .continue_workflow(lane_ack(
            &fan.lanes[0],
            vec![block_output(
                fan.lanes[0].lane_id.as_str(),
                "completed",
                &["/etc/passwd"],
            )],
        ))
        .unwrap();
    assert_eq!(step(&early), "lane-report", "{:?}", early.blockers);
    finish_lane(&wr, &fan.lanes[1], "completed", &[]);
    let after = wr.continue_workflow(rehydrate(&fan.state_token)).unwrap();
    assert_eq!(after.lanes[0].status, LaneState::InProgress);
    assert_eq!(after.lanes[1].status, LaneState::Completed);
    let blocked = wr
        .continue_workflow(ack(&after, "All in.", vec![]))
        .unwrap();
    assert_eq!(blocked.kind, ExecutionKind::Blocked);
    assert_eq!(blocked.blockers[0].code, BlockerCode::MissingRequiredOutput);
    assert!(
        blocked.blockers[0]
            .message
            .as_str()
            .contains(fan.lanes[0].lane_id.as_str()),
        "{:?}",
        blocked.blockers
    );
    // Handed in at the report step, it counts.
    let report = LaneHandle {
        state_token: early.state_token.clone(),
        ack_token: early.ack_token.clone(),
        ..fan.lanes[0].clone()
    };
    let done = wr
        .continue_workflow(lane_ack(
            &report,
            vec![block_output(
                fan.lanes[0].lane_id.as_str(),
                "completed",
                &[],
            )],
        ))
        .unwrap();
    assert!(done.is_complete, "{:?}", done.blockers);
    let merged = wr
        .continue_workflow(ack(&blocked, "All in.", vec![]))
        .unwrap();
    assert_eq!(step(&merged), "fan-out__synthesis", "{:?}", merged.blockers);
}

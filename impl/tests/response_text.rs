//! Responses say what the agent needs, in words: the session and the active mode and risk
//! policy in every execution response, "checkpoint recorded" on a checkpoint, and a warning when
//! notes were cut to the budget. All of it is rebuilt from recorded facts, so replays stay
//! byte-identical.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use protocol_support::*;
use workrail::protocol::render_text;
use workrail::store::memfs::MemFs;
use workrail_spec::tools::{CheckpointWorkflowInput, ExecutionOutput, OutputInput};

fn codes(out: &ExecutionOutput) -> Vec<&str> {
    out.warnings.iter().map(|w| w.code.as_str()).collect()
}

/// lock: L-MCP-EXECUTION-RESPONSE
#[test]
fn every_execution_response_names_its_session_mode_and_risk_policy() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let s0 = start(&wr, "project.demo");
    let s1 = wr.continue_workflow(ack(&s0, "planned", vec![])).unwrap();
    let back = wr.continue_workflow(rehydrate(&s1.state_token)).unwrap();
    for out in [&s0, &s1, &back] {
        let text = render_text(out);
        let line = text.lines().nth(1).unwrap();
        assert!(
            line.contains(out.session.session_id.as_str())
                && line.contains("mode: guided")
                && line.contains("stop and ask the user")
                && line.contains("risk policy: conservative"),
            "{line}"
        );
    }
}

/// lock: L-DAG-CHECKPOINT-NO-ADVANCE, L-TOKEN-CHECKPOINT-IDEMPOTENT
#[test]
fn a_checkpoint_says_it_was_recorded_and_replays_identically() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let s0 = start(&wr, "project.demo");
    let call = CheckpointWorkflowInput {
        state_token: s0.state_token.clone(),
        checkpoint_token: s0.checkpoint_token.clone().unwrap(),
        output: OutputInput {
            notes_markdown: Some("halfway through the plan".into()),
            artifacts: vec![],
        },
    };
    let first = wr.checkpoint_workflow(call.clone()).unwrap();
    assert_eq!(codes(&first), vec!["checkpoint_recorded"]);
    let text = render_text(&first);
    assert!(text.contains("\n## Checkpoint recorded\n"), "{text}");
    // News, not a warning; and the step being worked on is named, not re-sent in full.
    assert!(!text.contains("Warning (checkpoint_recorded)"), "{text}");
    let prompt = &first.pending.as_ref().unwrap().prompt;
    assert!(!text.contains(prompt.as_str()), "{text}");
    assert!(text.contains("## Still pending:"), "{text}");
    let again = render_text(&wr.continue_workflow(rehydrate(&first.state_token)).unwrap());
    assert!(
        again.contains(prompt.as_str()),
        "a rehydrate shows the prompt: {again}"
    );
    assert_eq!(pending(&first), "plan", "a checkpoint never advances");
    assert_eq!(wr.checkpoint_workflow(call).unwrap(), first);
}

/// lock: L-OUTPUT-NOTES-BUDGET
#[test]
fn notes_cut_to_the_budget_are_flagged_on_the_answer_and_its_replays() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let s0 = start(&wr, "project.demo");
    let long = "a long recap line\n".repeat(400);
    let first = wr.continue_workflow(ack(&s0, &long, vec![])).unwrap();
    assert_eq!(codes(&first), vec!["notes_truncated"]);
    assert_eq!(
        wr.continue_workflow(ack(&s0, &long, vec![])).unwrap(),
        first
    );
    let fine = wr.continue_workflow(ack(&first, "short", vec![])).unwrap();
    assert!(codes(&fine).is_empty(), "{:?}", codes(&fine));
    let checkpoint = wr
        .checkpoint_workflow(CheckpointWorkflowInput {
            state_token: fine.state_token.clone(),
            checkpoint_token: fine.checkpoint_token.clone().unwrap(),
            output: OutputInput {
                notes_markdown: Some(long),
                artifacts: vec![],
            },
        })
        .unwrap();
    assert_eq!(
        codes(&checkpoint),
        vec!["checkpoint_recorded", "notes_truncated"]
    );
}

/// The pending step names the artifact its contract requires, with an example of its exact
/// shape, and the "Next:" line says to send it; the example as shown is accepted.
///
/// lock: L-MCP-EXECUTION-RESPONSE
#[test]
fn the_pending_step_names_its_required_artifact_and_its_shape() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let mut out = start(&wr, "project.demo");
    assert!(out.pending.as_ref().unwrap().required_artifact.is_none());
    assert!(!render_text(&out).contains("output.artifacts"));
    out = wr.continue_workflow(ack(&out, "planned", vec![])).unwrap();
    out = wr
        .continue_workflow(ack(&out, "implemented", vec![]))
        .unwrap();
    assert_eq!(pending(&out), "decide");
    let required = out
        .pending
        .as_ref()
        .unwrap()
        .required_artifact
        .clone()
        .expect("decide requires loop control");
    assert_eq!(required.kind, "wr.loop_control");
    assert_eq!(required.example["loopId"], "build");
    let text = render_text(&out);
    let next = text.lines().rfind(|l| l.starts_with("Next:")).unwrap();
    assert!(
        next.contains("output.artifacts: [{") && next.contains("\"kind\":\"wr.loop_control\""),
        "{next}"
    );
    let advanced = wr
        .continue_workflow(ack(&out, "decided", vec![required.example]))
        .unwrap();
    assert!(advanced.blockers.is_empty(), "{:?}", advanced.blockers);
}

/// A step that asks for notes (`outputRequired.notesMarkdown`) acknowledged without any says so,
/// and replays say it again; with notes, nothing is said.
///
/// lock: L-OUTPUT-PER-STEP-FRESH
#[test]
fn a_step_that_asks_for_notes_and_got_none_says_so() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let s0 = start(&wr, "wr.coding_task");
    let bare = workrail_spec::tools::ContinueWorkflowInput {
        output: None,
        ..ack(&s0, "", vec![])
    };
    let first = wr.continue_workflow(bare.clone()).unwrap();
    assert!(
        codes(&first).contains(&"notes_missing"),
        "{:?}",
        codes(&first)
    );
    assert_eq!(wr.continue_workflow(bare).unwrap(), first);
    let with_notes = wr
        .continue_workflow(ack(&first, "planned the increments", vec![]))
        .unwrap();
    assert!(!codes(&with_notes).contains(&"notes_missing"));
}

/// Rehydrating an earlier node of a completed run shows a pending step under the run's status
/// `complete`: the text says why, and what acknowledging it does.
///
/// lock: L-DAG-NON-TIP-AUTO-FORK
#[test]
fn a_pending_step_under_a_complete_run_is_explained() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let s0 = start(&wr, "project.demo");
    let mut out = wr.continue_workflow(ack(&s0, "planned", vec![])).unwrap();
    out = wr
        .continue_workflow(ack(&out, "implemented", vec![]))
        .unwrap();
    out = wr
        .continue_workflow(ack(&out, "decided", vec![loop_control("stop")]))
        .unwrap();
    let done = wr.continue_workflow(ack(&out, "wrapped", vec![])).unwrap();
    assert!(done.is_complete);
    let earlier = wr.continue_workflow(rehydrate(&s0.state_token)).unwrap();
    assert_eq!(pending(&earlier), "plan");
    assert_eq!(earlier.run.status.as_str(), "complete");
    let text = render_text(&earlier);
    assert!(
        text.contains("preferred branch is complete") && text.contains("starts a new branch"),
        "{text}"
    );
    assert!(!render_text(&done).contains("preferred branch is complete"));
}

//! `start_session` (decision D48): an opt-in, checkpoint-only session, represented as a run of
//! WorkRail's own one-step workflow so that notes use the one locked durable path.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use std::sync::Arc;

use protocol_support::*;
use serde_json::{Value, json};
use workrail::features::{Feature, FeatureOverrides};
use workrail::mcp::WorkrailServer;
use workrail::mcp::dispatch::{ToolOutcome, call_tool};
use workrail::protocol::Workrail;
use workrail::store::memfs::MemFs;
use workrail_spec::error::{ErrorCode, ErrorEnvelope};
use workrail_spec::event::EventData;
use workrail_spec::tools::{
    CheckpointWorkflowInput, ExecutionOutput, OutputInput, ResumeSessionOutput,
};

fn with_sessions(fs: &MemFs) -> Workrail {
    open(fs).with_feature_overrides(&FeatureOverrides::parse_env("+start_session").unwrap())
}

fn call(wr: &Workrail, tool: &str, args: Value) -> ToolOutcome {
    call_tool(wr, tool, Some(args))
}

fn ok<T: serde::de::DeserializeOwned>(outcome: ToolOutcome) -> T {
    assert!(!outcome.is_error, "{}", outcome.text);
    serde_json::from_value(outcome.structured).unwrap()
}

fn checkpoint(out: &ExecutionOutput, notes: &str) -> CheckpointWorkflowInput {
    CheckpointWorkflowInput {
        state_token: out.state_token.clone(),
        checkpoint_token: out.checkpoint_token.clone().unwrap(),
        output: OutputInput {
            notes_markdown: Some(notes.into()),
            artifacts: vec![],
        },
    }
}

/// lock: L-MCP-START-SESSION, L-MCP-TOOL-SET
#[test]
fn start_session_is_off_by_default_and_listed_only_when_switched_on() {
    let fs = MemFs::new();
    let wr = open(&fs);
    assert!(!wr.features().enabled(Feature::StartSession));
    let listed = |wr: Workrail| -> Vec<String> {
        WorkrailServer::new(Arc::new(wr))
            .tools()
            .iter()
            .map(|t| t.name.to_string())
            .collect()
    };
    assert!(!listed(open(&fs)).contains(&"start_session".to_owned()));
    let before = fs.snapshot();
    let outcome = call(&wr, "start_session", json!({}));
    assert!(outcome.is_error);
    let e: ErrorEnvelope = serde_json::from_value(outcome.structured).unwrap();
    assert_eq!(e.code, ErrorCode::ValidationError);
    assert_eq!(e.details.unwrap()["problem"], "tool_switched_off");
    assert!(e.suggestion.contains("start_session"), "{}", e.suggestion);
    assert_eq!(fs.snapshot(), before, "a switched-off tool writes nothing");

    assert!(listed(with_sessions(&fs)).contains(&"start_session".to_owned()));
    // No session CRUD: the tool takes no arguments at all.
    let outcome = call(&with_sessions(&fs), "start_session", json!({"name": "x"}));
    assert!(outcome.is_error);
    let e: ErrorEnvelope = serde_json::from_value(outcome.structured).unwrap();
    assert_eq!(e.code, ErrorCode::ValidationError);
}

/// lock: L-MCP-START-SESSION, L-MCP-CHECKPOINT-INPUT, L-TOKEN-CHECKPOINT-IDEMPOTENT, L-DAG-CHECKPOINT-NO-ADVANCE
#[test]
fn a_checkpoint_only_session_records_notes_through_checkpoint_workflow() {
    let fs = MemFs::new();
    let wr = with_sessions(&fs);
    let session: ExecutionOutput = ok(call(&wr, "start_session", json!({})));
    assert_eq!(session.run.workflow_id.as_str(), "wr.checkpoint_session");
    assert_eq!(
        session.pending.as_ref().unwrap().step_id.as_str(),
        "record_progress"
    );
    assert!(session.checkpoint_token.is_some());
    assert!(
        session
            .pending
            .as_ref()
            .unwrap()
            .prompt
            .contains("checkpoint_workflow"),
        "the step tells the agent how to record notes"
    );

    let first = wr
        .checkpoint_workflow(checkpoint(
            &session,
            "Profiled the importer; the CSV parser dominates.",
        ))
        .unwrap();
    // Idempotent: the same tokens never record twice.
    let before = fs.snapshot();
    assert_eq!(
        wr.checkpoint_workflow(checkpoint(
            &session,
            "Profiled the importer; the CSV parser dominates."
        ))
        .unwrap(),
        first
    );
    assert_eq!(fs.snapshot(), before);
    let second = wr
        .checkpoint_workflow(checkpoint(
            &first,
            "Swapped in a streaming parser; 4x faster.",
        ))
        .unwrap();
    assert_eq!(
        second.pending.as_ref().unwrap().step_id.as_str(),
        "record_progress",
        "checkpoints never advance the session"
    );

    // The notes are durable node outputs of the session's run.
    let loaded = wr.sessions().load(&session.session.session_id).unwrap();
    let notes: Vec<String> = loaded
        .events()
        .all()
        .unwrap()
        .iter()
        .filter_map(|e| match e.data() {
            EventData::NodeOutputAppended(o) => Some(serde_json::to_string(&o.payload).unwrap()),
            _ => None,
        })
        .collect();
    assert_eq!(notes.len(), 2);
    assert!(notes[1].contains("streaming parser"));

    // A new chat finds the session by what the notes say.
    let found: ResumeSessionOutput = ok(call(
        &wr,
        "resume_session",
        json!({"query": {"text": "streaming parser"}}),
    ));
    assert_eq!(
        found.candidates[0].session_id, session.session.session_id,
        "{found:?}"
    );
}

/// lock: L-MCP-START-SESSION
#[test]
fn the_session_workflow_is_not_in_discovery_and_cannot_be_started_by_id() {
    let fs = MemFs::new();
    let wr = with_sessions(&fs);
    let listed = wr
        .list_workflows(workrail_spec::tools::ListWorkflowsInput {})
        .unwrap();
    assert!(
        listed
            .workflows
            .iter()
            .all(|w| w.workflow_id.as_str() != "wr.checkpoint_session")
    );
    let outcome = call(
        &wr,
        "start_workflow",
        json!({"workflowId": "wr.checkpoint_session"}),
    );
    assert!(outcome.is_error);
    let e: ErrorEnvelope = serde_json::from_value(outcome.structured).unwrap();
    assert_eq!(e.code, ErrorCode::WorkflowNotFound);
    // Each start_session opens its own session.
    let a: ExecutionOutput = ok(call(&wr, "start_session", json!({})));
    let b: ExecutionOutput = ok(call(&wr, "start_session", json!({})));
    assert_ne!(a.session.session_id, b.session.session_id);
    assert_eq!(a.run.workflow_id, b.run.workflow_id);
}

//! Run context: persisted as run-scoped `context_set` records, auto-loaded as the merge base on
//! every continue, and kept across restarts (a fresh process over the same data directory) and
//! rewinds (an older token forking a new branch).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use protocol_support::*;
use serde_json::{Map, Value, json};
use workrail::store::memfs::MemFs;
use workrail_spec::closed::ContextSource;
use workrail_spec::error::ErrorCode;
use workrail_spec::event::{ContextSet, EventData};
use workrail_spec::ids::SessionId;
use workrail_spec::tools::{ContinueWorkflowInput, StartWorkflowInput};

fn object(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

/// Every `context_set` of the session, in log order.
fn context_records(wr: &workrail::protocol::Workrail, session: &SessionId) -> Vec<ContextSet> {
    wr.sessions()
        .load(session)
        .unwrap()
        .events()
        .all()
        .unwrap()
        .iter()
        .filter_map(|e| match e.data() {
            EventData::ContextSet(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

fn with_context(input: ContinueWorkflowInput, delta: Value) -> ContinueWorkflowInput {
    ContinueWorkflowInput {
        context: Some(object(delta)),
        ..input
    }
}

/// lock: L-CONTEXT-AUTO-LOAD, L-CONTEXT-MERGE, L-CONTEXT-SET-DURABLE, L-CONTEXT-SET-PAYLOAD
#[test]
fn context_is_auto_loaded_and_survives_restarts_and_rewinds() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let start = wr
        .start_workflow(StartWorkflowInput {
            preset: None,
            workflow_id: "project.demo".into(),
            context: Some(object(json!({
                "ticket": "AUTH-1234",
                "paths": ["src/auth"],
                "flags": {"dryRun": true}
            }))),
            preferences: vec![],
        })
        .unwrap();
    let session = start.session.session_id.clone();
    let initial = context_records(&wr, &session);
    assert_eq!(initial.len(), 1);
    assert_eq!(initial[0].source, ContextSource::Initial);

    // The delta names only what changes: the stored context is the merge base (auto-load).
    let planned = wr
        .continue_workflow(with_context(
            ack(&start, "Planned.", vec![]),
            json!({"paths": ["src/auth", "src/session"], "flags": null, "owner": "ana"}),
        ))
        .unwrap();
    let merged = context_records(&wr, &session);
    assert_eq!(merged.len(), 2);
    assert_eq!(merged[1].source, ContextSource::AgentDelta);
    assert_eq!(
        Value::Object(merged[1].context.clone()),
        json!({"ticket": "AUTH-1234", "paths": ["src/auth", "src/session"], "owner": "ana"}),
        "shallow merge: arrays replaced wholesale, null deletes, untouched keys kept"
    );

    // An ack without context records no context change: the stored one stays current.
    let implemented = wr
        .continue_workflow(ack(&planned, "Implemented.", vec![]))
        .unwrap();
    assert_eq!(context_records(&wr, &session).len(), 2);

    // Restart: a fresh WorkRail over the same data directory merges over the same base.
    drop(wr);
    let wr = open(&fs);
    wr.continue_workflow(with_context(
        ack(&implemented, "Decided.", vec![loop_control("stop")]),
        json!({"reviewer": "bo"}),
    ))
    .unwrap();
    let after_restart = context_records(&wr, &session);
    assert_eq!(
        Value::Object(after_restart.last().unwrap().context.clone()),
        json!({"ticket": "AUTH-1234", "paths": ["src/auth", "src/session"], "owner": "ana", "reviewer": "bo"})
    );

    // Rewind: the user goes back to the first step and acks it again (a fork). The run's
    // context is run-scoped, so the new branch starts from the latest context, not from nothing.
    let rewound = wr.continue_workflow(rehydrate(&start.state_token)).unwrap();
    wr.continue_workflow(with_context(
        ack(&rewound, "Planned differently.", vec![]),
        json!({"owner": "cy"}),
    ))
    .unwrap();
    let after_rewind = context_records(&wr, &session);
    assert_eq!(
        Value::Object(after_rewind.last().unwrap().context.clone()),
        json!({"ticket": "AUTH-1234", "paths": ["src/auth", "src/session"], "owner": "cy", "reviewer": "bo"})
    );
    // Every record is run-scoped and the context never appears in a response.
    let loaded = wr.sessions().load(&session).unwrap();
    for event in loaded.events().all().unwrap().iter() {
        if let EventData::ContextSet(_) = event.data() {
            assert!(
                matches!(event.scope(), workrail_spec::event::EventScope::Run(_)),
                "context_set is run-scoped: {event:?}"
            );
        }
    }
}

/// lock: L-CONTEXT-MERGE, L-CONTEXT-RESERVED-KEYS
#[test]
fn a_delta_that_changes_nothing_records_nothing_and_reserved_keys_are_refused() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let start = wr
        .start_workflow(StartWorkflowInput {
            preset: None,
            workflow_id: "project.demo".into(),
            context: Some(object(json!({"ticket": "AUTH-1"}))),
            preferences: vec![],
        })
        .unwrap();
    let session = start.session.session_id.clone();
    // Re-sending the same value is not a change.
    let planned = wr
        .continue_workflow(with_context(
            ack(&start, "Planned.", vec![]),
            json!({"ticket": "AUTH-1"}),
        ))
        .unwrap();
    assert_eq!(context_records(&wr, &session).len(), 1);
    // Deleting a key that does not exist is not a change either.
    let implemented = wr
        .continue_workflow(with_context(
            ack(&planned, "Implemented.", vec![]),
            json!({"missing": null}),
        ))
        .unwrap();
    assert_eq!(context_records(&wr, &session).len(), 1);

    let before = fs.snapshot();
    for key in ["__proto__", "constructor", "prototype"] {
        let mut delta = Map::new();
        delta.insert(key.into(), json!(1));
        let err = wr
            .continue_workflow(ContinueWorkflowInput {
                context: Some(delta),
                ..ack(&implemented, "x", vec![])
            })
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::ValidationError, "{key}");
        assert!(err.message.contains(key), "{key}: {}", err.message);
    }
    assert_eq!(fs.snapshot(), before, "refused deltas write nothing");
}

/// lock: L-CONTEXT-JSON-ONLY
#[test]
fn context_must_be_a_json_object_over_mcp() {
    use workrail::mcp::dispatch::call_tool;
    let fs = MemFs::new();
    let wr = open(&fs);
    let before = fs.snapshot();
    for bad in [json!("ticket=AUTH-1"), json!([1, 2]), json!(5), json!(true)] {
        let outcome = call_tool(
            &wr,
            "start_workflow",
            Some(json!({"workflowId": "project.demo", "context": bad})),
        );
        assert!(outcome.is_error, "{bad}");
        let e: workrail_spec::error::ErrorEnvelope =
            serde_json::from_value(outcome.structured).unwrap();
        assert_eq!(e.code, ErrorCode::ValidationError, "{bad}");
        assert_eq!(e.details.unwrap()["field"], "context", "{bad}");
    }
    assert_eq!(fs.snapshot(), before);
}

/// lock: L-CONTEXT-NO-AUTHORED-SCHEMA
#[test]
fn workflows_cannot_author_a_context_schema() {
    use workrail::compiler::{CompileContext, compile};
    for field in ["contextSchema", "context", "inputs"] {
        let mut src = json!({
            "id": "project.with_inputs",
            "name": "With inputs",
            "description": "Tries to declare its context.",
            "steps": [{"id": "go", "title": "Go", "prompt": "Go."}]
        });
        src[field] = json!({"type": "object", "required": ["ticket"]});
        let errors = compile(&src, &CompileContext::load("project"))
            .expect_err("a workflow-level context schema is refused");
        assert!(
            errors.to_string().contains(field),
            "{field}: the error names the field: {errors}"
        );
    }
}

//! The execution protocol as locked (locks §1.2, contract "Tool Set", "Rewind/fork behavior"):
//! rehydrate writes nothing, an ack advances exactly once, replays return byte-identical
//! responses from recorded facts, older tokens fork, blocked and never-stop behave per mode,
//! checkpoints are idempotent, and every token problem is a specific envelope.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use protocol_support::*;
use serde_json::json;
use workrail::store::memfs::MemFs;
use workrail::tokens::TokenCodec;
use workrail_spec::blocker::BlockerCode;
use workrail_spec::closed::{Autonomy, NextIntent, RunStatus, TokenKind};
use workrail_spec::error::ErrorCode;
use workrail_spec::event::{EventData, EventKind, PreferenceDelta};
use workrail_spec::ids::SessionId;
use workrail_spec::token::{AttemptPayload, TokenPayload};
use workrail_spec::tools::{
    CheckpointWorkflowInput, ContinueWorkflowInput, ExecutionKind, ListWorkflowsInput, OutputInput,
    StartWorkflowInput,
};

fn events(
    wr: &workrail::protocol::Workrail,
    out: &workrail_spec::tools::ExecutionOutput,
) -> Vec<EventKind> {
    wr.sessions()
        .load(&out.session.session_id)
        .unwrap()
        .events()
        .all()
        .unwrap()
        .iter()
        .map(|e| e.kind())
        .collect()
}

/// lock: L-MCP-TOOL-SET, L-HASH-PIN-AT-START
#[test]
fn start_pins_the_workflow_and_records_the_root() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let ids: Vec<String> = wr
        .list_workflows(ListWorkflowsInput {})
        .unwrap()
        .workflows
        .iter()
        .map(|w| w.workflow_id.to_string())
        .collect();
    assert!(
        ids.contains(&"project.demo".to_owned()) && ids.iter().any(|i| i.starts_with("wr.")),
        "{ids:?}"
    );
    let out = start(&wr, "project.demo");
    assert_eq!(out.kind, ExecutionKind::Ok);
    assert_eq!(pending(&out), "plan");
    assert_eq!(out.next_intent, NextIntent::PerformPendingThenContinue);
    assert!(
        out.state_token.starts_with("st.v1.")
            && out.ack_token.as_deref().unwrap().starts_with("ack.v1.")
    );
    assert!(
        out.checkpoint_token
            .as_deref()
            .unwrap()
            .starts_with("chk.v1.")
    );
    assert_eq!(
        events(&wr, &out)[..3],
        [
            EventKind::SessionCreated,
            EventKind::RunStarted,
            EventKind::NodeCreated
        ]
    );
    let pinned: Vec<_> = fs
        .files()
        .into_iter()
        .filter(|p| p.starts_with("workflows/pinned"))
        .collect();
    assert_eq!(pinned.len(), 1, "the compiled workflow is pinned by hash");
    let text = workrail::protocol::render_text(&out);
    assert!(
        text.contains("Plan the work.")
            && text.contains(&out.state_token)
            && text.contains(&out.run.label)
    );
}

/// lock: L-TOKEN-REHYDRATE-PURE, L-MCP-REHYDRATE-NO-EVENTS, L-MCP-TIP-RECAP
#[test]
fn rehydrate_writes_nothing_and_is_repeatable() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let first = start(&wr, "project.demo");
    let second = wr
        .continue_workflow(ack(&first, "Planned: three slices.", vec![]))
        .unwrap();
    let before = fs.snapshot();
    let a = wr
        .continue_workflow(rehydrate(&second.state_token))
        .unwrap();
    let b = wr
        .continue_workflow(rehydrate(&second.state_token))
        .unwrap();
    assert_eq!(
        fs.snapshot(),
        before,
        "rehydrate changed the data directory"
    );
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    assert_eq!(pending(&a), "implement");
    assert_eq!(
        a.ack_token, second.ack_token,
        "no attempt was used, so the same attempt is current"
    );
    assert!(
        a.recap
            .as_ref()
            .unwrap()
            .text
            .contains("Planned: three slices.")
    );
    // Output without an ack is refused, not silently dropped.
    let mut bad = rehydrate(&second.state_token);
    bad.output = Some(OutputInput {
        notes_markdown: Some("x".into()),
        artifacts: vec![],
    });
    assert_eq!(
        wr.continue_workflow(bad).unwrap_err().code,
        ErrorCode::ValidationError
    );
    assert_eq!(fs.snapshot(), before);
}

/// lock: L-TOKEN-ACK-IDEMPOTENT, L-TOKEN-REPLAY-FACTS, L-DEDUPE-NOOP
#[test]
fn replaying_an_ack_returns_the_same_bytes_and_advances_once() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let first = start(&wr, "project.demo");
    let input = ack(&first, "Planned.", vec![]);
    let once = wr.continue_workflow(input.clone()).unwrap();
    let count = events(&wr, &first).len();
    let before = fs.snapshot();
    for _ in 0..20 {
        let again = wr.continue_workflow(input.clone()).unwrap();
        assert_eq!(
            serde_json::to_string(&again).unwrap(),
            serde_json::to_string(&once).unwrap()
        );
    }
    assert_eq!(events(&wr, &first).len(), count);
    assert_eq!(fs.snapshot(), before, "replays write nothing");
    // A later advance does not change what the old ack replays to.
    wr.continue_workflow(ack(&once, "Implemented slice 1.", vec![]))
        .unwrap();
    let later = wr.continue_workflow(input).unwrap();
    assert_eq!(
        serde_json::to_string(&later).unwrap(),
        serde_json::to_string(&once).unwrap()
    );
    // After a restart too.
    let restarted = open(&fs);
    let after_restart = restarted
        .continue_workflow(ack(&first, "Planned.", vec![]))
        .unwrap();
    assert_eq!(
        serde_json::to_string(&after_restart).unwrap(),
        serde_json::to_string(&once).unwrap()
    );
}

/// lock: L-DAG-NON-TIP-AUTO-FORK, L-TOKEN-ACK-ATTEMPTS, L-DAG-RUN-IS-DAG
#[test]
fn an_older_state_token_forks_a_new_branch() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let root = start(&wr, "project.demo");
    let child = wr.continue_workflow(ack(&root, "Plan A.", vec![])).unwrap();
    // The user rewinds: the agent rehydrates the root's stateToken and gets a fresh attempt.
    let rewound = wr.continue_workflow(rehydrate(&root.state_token)).unwrap();
    assert_ne!(
        rewound.ack_token, root.ack_token,
        "a used attempt is never handed out again"
    );
    assert!(
        rewound.recap.as_ref().unwrap().text.contains("branch"),
        "{:?}",
        rewound.recap
    );
    let sibling = wr
        .continue_workflow(ack(&rewound, "Plan B.", vec![]))
        .unwrap();
    assert_ne!(sibling.state_token, child.state_token);
    assert_eq!(pending(&sibling), "implement");
    let loaded = wr.sessions().load(&root.session.session_id).unwrap();
    let edges: Vec<_> = loaded
        .events()
        .all()
        .unwrap()
        .iter()
        .filter_map(|e| match e.data() {
            EventData::EdgeCreated(edge) => Some(edge.cause.kind.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(edges, ["idempotent_replay", "non_tip_advance"]);
    assert!(
        loaded
            .events()
            .all()
            .unwrap()
            .iter()
            .any(|e| matches!(e.data(), EventData::DecisionTraceAppended(t)
        if t.entries.iter().any(|x| x.kind.as_str() == "detected_non_tip_advance")))
    );
    // Both branches keep working independently.
    wr.continue_workflow(ack(&child, "A: slice 1.", vec![]))
        .unwrap();
    wr.continue_workflow(ack(&sibling, "B: slice 1.", vec![]))
        .unwrap();
}

/// lock: L-LOOP-MISSING-CONTROL-BLOCKING, L-REASON-BLOCKING-MODES, L-AUTHOR-CONTRACT-ENFORCED
#[test]
fn a_missing_loop_decision_blocks_in_guided_mode_with_a_fresh_ack() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let mut out = start(&wr, "project.demo");
    out = wr.continue_workflow(ack(&out, "Planned.", vec![])).unwrap();
    out = wr.continue_workflow(ack(&out, "Slice 1.", vec![])).unwrap();
    assert_eq!(pending(&out), "decide");
    let blocked_input = ack(&out, "Decided?", vec![]);
    let blocked = wr.continue_workflow(blocked_input.clone()).unwrap();
    assert_eq!(blocked.kind, ExecutionKind::Blocked);
    assert_eq!(blocked.blockers[0].code, BlockerCode::MissingRequiredOutput);
    assert_eq!(pending(&blocked), "decide", "the same pending step");
    assert_ne!(
        blocked.ack_token, out.ack_token,
        "a fresh ack for the retry"
    );
    assert_eq!(blocked.state_token, out.state_token);
    // Replaying the blocked ack returns the same blocked response.
    let replay = wr.continue_workflow(blocked_input).unwrap();
    assert_eq!(
        serde_json::to_string(&replay).unwrap(),
        serde_json::to_string(&blocked).unwrap()
    );
    // The fix: a valid loop decision advances.
    let next = wr
        .continue_workflow(ack(&blocked, "Done.", vec![loop_control("stop")]))
        .unwrap();
    assert_eq!(pending(&next), "wrap");
}

/// lock: L-REASON-NEVER-STOP, L-LOOP-MISSING-CONTROL-NEVER-STOP, L-PREF-NODE-ATTACHED
#[test]
fn never_stop_records_a_critical_gap_and_continues() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let mut out = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: "project.demo".into(),
            context: None,
            preferences: vec![PreferenceDelta::Autonomy(Autonomy::FullAutoNeverStop)],
            preset: None,
        })
        .unwrap();
    assert_eq!(out.preferences.autonomy, Autonomy::FullAutoNeverStop);
    out = wr.continue_workflow(ack(&out, "Planned.", vec![])).unwrap();
    out = wr.continue_workflow(ack(&out, "Slice 1.", vec![])).unwrap();
    let next = wr
        .continue_workflow(ack(&out, "No decision.", vec![]))
        .unwrap();
    assert_eq!(next.kind, ExecutionKind::Ok, "never-stop never blocks");
    assert_eq!(pending(&next), "wrap", "missing control is treated as stop");
    let loaded = wr.sessions().load(&out.session.session_id).unwrap();
    assert!(loaded.events().all().unwrap().iter().any(|e| matches!(e.data(), EventData::GapRecorded(g)
        if g.severity.as_str() == "critical" && g.reason == workrail_spec::reason::GapReason::ContractViolation(
            workrail_spec::reason::ContractViolationReason::MissingRequiredOutput))));
    assert_eq!(next.run.status, RunStatus::InProgress);
    let done = wr
        .continue_workflow(ack(&next, "Wrapped.", vec![]))
        .unwrap();
    assert!(done.is_complete && done.pending.is_none() && done.ack_token.is_none());
    assert_eq!(done.run.status, RunStatus::CompleteWithGaps);
    assert_eq!(done.next_intent, NextIntent::Complete);
}

/// lock: L-TOKEN-CHECKPOINT-IDEMPOTENT, L-DAG-CHECKPOINT-EDGE, L-DAG-CHECKPOINT-NO-ADVANCE, L-MCP-CHECKPOINT-INPUT
#[test]
fn checkpoints_are_idempotent_and_do_not_advance() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let out = start(&wr, "project.demo");
    let input = CheckpointWorkflowInput {
        state_token: out.state_token.clone(),
        checkpoint_token: out.checkpoint_token.clone().unwrap(),
        output: OutputInput {
            notes_markdown: Some("Explored the code base.".into()),
            artifacts: vec![],
        },
    };
    let first = wr.checkpoint_workflow(input.clone()).unwrap();
    let count = events(&wr, &out).len();
    let again = wr.checkpoint_workflow(input).unwrap();
    assert_eq!(
        serde_json::to_string(&again).unwrap(),
        serde_json::to_string(&first).unwrap()
    );
    assert_eq!(events(&wr, &out).len(), count, "no duplicate checkpoint");
    assert_eq!(pending(&first), "plan", "a checkpoint does not advance");
    assert_ne!(first.state_token, out.state_token);
    let kinds = events(&wr, &out);
    assert!(kinds.ends_with(&[
        EventKind::NodeCreated,
        EventKind::NodeOutputAppended,
        EventKind::EdgeCreated
    ]));
    // The run continues from the checkpoint node.
    let next = wr
        .continue_workflow(ack(&first, "Planned.", vec![]))
        .unwrap();
    assert_eq!(pending(&next), "implement");
}

/// lock: L-TOKEN-SCOPED, L-TOKEN-ERRORS, L-ERR-DOMAIN-BOUNDARY
#[test]
fn mixed_tampered_and_unknown_tokens_are_refused_with_their_codes() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let a = start(&wr, "project.demo");
    let b = start(&wr, "project.demo");
    let before = fs.snapshot();
    let mixed = ContinueWorkflowInput {
        ack_token: b.ack_token.clone(),
        ..ack(&a, "x", vec![])
    };
    let err = wr.continue_workflow(mixed).unwrap_err();
    assert_eq!(err.code, ErrorCode::TokenScopeMismatch);
    assert!(
        err.message.contains(&a.run.label) && err.message.contains(&b.run.label),
        "{}",
        err.message
    );
    assert!(err.details.is_some());
    let mut tampered = a.state_token.clone();
    let last = tampered.pop().unwrap();
    tampered.push(if last == 'A' { 'B' } else { 'A' });
    assert_eq!(
        wr.continue_workflow(rehydrate(&tampered)).unwrap_err().code,
        ErrorCode::TokenBadSignature
    );
    let swapped = ContinueWorkflowInput {
        state_token: Some(a.ack_token.clone().unwrap()),
        ack_token: Some(a.state_token.clone()),
        ..ack(&a, "x", vec![])
    };
    assert_eq!(
        wr.continue_workflow(swapped).unwrap_err().code,
        ErrorCode::TokenInvalidFormat
    );
    assert_eq!(fs.snapshot(), before, "no refused call wrote anything");
    // A signed token naming a session this data directory does not hold.
    use workrail::store::fs::StoreFs;
    fs.remove_dir_all(
        std::path::Path::new("sessions")
            .join(a.session.session_id.as_str())
            .as_path(),
    )
    .unwrap();
    let wr2 = open(&fs);
    // The token is sound; the session it names was deleted (decision D130).
    let gone = wr2
        .continue_workflow(rehydrate(&a.state_token))
        .unwrap_err();
    assert_eq!(gone.code, ErrorCode::SessionNotFound);
    assert_eq!(
        gone.details.as_ref().unwrap()["problem"],
        serde_json::json!("session_deleted")
    );
}

/// lock: L-TOKEN-FAIL-CLOSED
#[test]
fn a_signed_attempt_that_was_never_current_fails_closed() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let out = start(&wr, "project.demo");
    let keys = workrail::store::KeyringStore::new(std::sync::Arc::new(fs.clone()));
    let codec = TokenCodec::new(
        keys.load_or_create(&workrail::entropy::SeededEntropy::new(0))
            .unwrap()
            .keyring,
    );
    let TokenPayload::State(state) = codec.verify(&out.state_token, TokenKind::State).unwrap()
    else {
        unreachable!()
    };
    let future = workrail::protocol::derive::attempt(
        &state.session_id,
        &state.node_id,
        workrail::protocol::derive::AttemptKind::Ack,
        5,
    );
    let forged = codec.mint(&TokenPayload::Ack(AttemptPayload {
        session_id: state.session_id.clone(),
        run_id: state.run_id.clone(),
        node_id: state.node_id.clone(),
        attempt_id: future,
    }));
    let before = fs.snapshot();
    let err = wr
        .continue_workflow(ContinueWorkflowInput {
            ack_token: Some(forged),
            ..ack(&out, "x", vec![])
        })
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InternalError);
    assert_eq!(
        err.details.unwrap()["reason"],
        "unexpected:invariant_violation"
    );
    assert_eq!(fs.snapshot(), before);
}

/// lock: L-CONTEXT-BUDGET, L-CONTEXT-FAIL-FAST, L-ERR-BUDGET-DETAILS, L-CONTEXT-SET-DURABLE, L-CONTEXT-NO-ECHO
#[test]
fn context_is_budgeted_durable_and_never_echoed() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let big = json!({"blob": "x".repeat(300 * 1024)})
        .as_object()
        .unwrap()
        .clone();
    let err = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: "project.demo".into(),
            context: Some(big),
            preferences: vec![],
            preset: None,
        })
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ValidationError);
    let details = err.details.unwrap();
    assert_eq!(details["maxBytes"], 262_144);
    assert!(details["measuredBytes"].as_u64().unwrap() > 300 * 1024);
    assert_eq!(details["measurement"], "rfc8785_jcs_utf8_bytes");
    let ctx = json!({"ticketId": "AUTH-1234"})
        .as_object()
        .unwrap()
        .clone();
    let out = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: "project.demo".into(),
            context: Some(ctx),
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    assert!(
        !serde_json::to_string(&out).unwrap().contains("AUTH-1234"),
        "context is not echoed"
    );
    let loaded = wr.sessions().load(&out.session.session_id).unwrap();
    assert!(loaded.events().all().unwrap().iter().any(
        |e| matches!(e.data(), EventData::ContextSet(c) if c.context["ticketId"] == "AUTH-1234")
    ));
    let _ = SessionId::parse(out.session.session_id.as_str()).unwrap();
}

/// lock: L-LOOP-MAX-ITERATIONS, L-LOOP-LIMIT-ERROR
#[test]
fn a_loop_runs_at_most_max_iterations_and_a_further_continue_blocks() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let mut out = start(&wr, "project.demo");
    out = wr.continue_workflow(ack(&out, "Planned.", vec![])).unwrap();
    let mut iterations = 0;
    loop {
        assert_eq!(pending(&out), "implement");
        iterations += 1;
        out = wr.continue_workflow(ack(&out, "Slice.", vec![])).unwrap();
        assert_eq!(pending(&out), "decide");
        let next = wr
            .continue_workflow(ack(&out, "Again.", vec![loop_control("continue")]))
            .unwrap();
        if next.kind == ExecutionKind::Blocked {
            assert_eq!(iterations, 3, "maxIterations is a count");
            assert_eq!(next.blockers[0].code, BlockerCode::InvariantViolation);
            break;
        }
        out = next;
    }
}

/// lock: L-CACHE-DERIVED, L-CACHE-VERSIONED, L-CACHE-DISCARD, L-CACHE-NO-CORRECTNESS
#[test]
fn the_projection_cache_is_versioned_rebuilt_on_mismatch_and_never_truth() {
    use workrail::store::fs::StoreFs;
    let fs = MemFs::new();
    let wr = open(&fs);
    let out = start(&wr, "project.demo");
    let session = out.session.session_id.clone();
    let cache = std::path::Path::new("sessions")
        .join(session.as_str())
        .join("cache/projections.json");
    let fresh = wr.session_summary(&session).unwrap();
    let stored = String::from_utf8(fs.read(&cache).unwrap().unwrap()).unwrap();
    assert!(
        stored.contains("\"v\":1") && stored.contains("\"lastEventIndex\":"),
        "{stored}"
    );
    // A cached value is only used at the exact log position it was computed at.
    let advanced = wr.continue_workflow(ack(&out, "Planned.", vec![])).unwrap();
    let after = wr.session_summary(&session).unwrap();
    assert_ne!(after, fresh, "a stale cache is discarded and rebuilt");
    assert_eq!(after.runs[0].nodes, 2);
    // Damage, another version or deletion never change the answer.
    for damage in [
        b"not json".to_vec(),
        stored.replace("\"v\":1", "\"v\":9").into_bytes(),
    ] {
        fs.write_new(&cache, &damage).unwrap();
        assert_eq!(wr.session_summary(&session).unwrap(), after);
    }
    fs.remove_file(&cache).unwrap();
    assert_eq!(wr.session_summary(&session).unwrap(), after);
    // A lying cache at the right position would be believed, so the cache must never decide
    // execution: advancing ignores it entirely.
    let text = String::from_utf8(fs.read(&cache).unwrap().unwrap()).unwrap();
    fs.write_new(
        &cache,
        text.replace("\"nodes\":2", "\"nodes\":99").as_bytes(),
    )
    .unwrap();
    let next = wr
        .continue_workflow(ack(&advanced, "Slice 1.", vec![]))
        .unwrap();
    assert_eq!(pending(&next), "decide");
}

/// lock: L-LOOP-LIMIT-ERROR
#[test]
fn a_loop_limit_carries_structured_details_in_blockers_and_gaps() {
    let fs = MemFs::new();
    for autonomy in [Autonomy::Guided, Autonomy::FullAutoNeverStop] {
        let wr = open(&fs);
        let mut out = wr
            .start_workflow(StartWorkflowInput {
                workflow_id: "project.demo".into(),
                context: None,
                preferences: vec![PreferenceDelta::Autonomy(autonomy)],
                preset: None,
            })
            .unwrap();
        out = wr.continue_workflow(ack(&out, "Planned.", vec![])).unwrap();
        for i in 0..3 {
            out = wr.continue_workflow(ack(&out, "Slice.", vec![])).unwrap();
            let decision = wr
                .continue_workflow(ack(&out, "Again.", vec![loop_control("continue")]))
                .unwrap();
            if i < 2 {
                out = decision;
                continue;
            }
            let expected = json!({"kind": "loop_limit", "loopId": "build", "iteration": 2, "maxIterations": 3});
            if autonomy == Autonomy::Guided {
                let details =
                    serde_json::to_value(decision.blockers[0].details.as_ref().unwrap()).unwrap();
                assert_eq!(details, expected);
            } else {
                assert_eq!(decision.kind, ExecutionKind::Ok, "never-stop goes on");
                let loaded = wr.sessions().load(&out.session.session_id).unwrap();
                let gap = loaded
                    .events()
                    .all()
                    .unwrap()
                    .iter()
                    .rev()
                    .find_map(|e| match e.data() {
                        EventData::GapRecorded(g) => Some(g.clone()),
                        _ => None,
                    })
                    .unwrap();
                assert_eq!(
                    serde_json::to_value(gap.details.unwrap()).unwrap(),
                    expected
                );
                assert!(
                    !gap.summary.as_str().contains("Acknowledge"),
                    "{}",
                    gap.summary.as_str()
                );
            }
        }
    }
}

/// lock: L-CAP-PROBE-INJECTED, L-AUTHOR-CONTRACT-ENFORCED
#[test]
fn a_capability_probe_accepts_only_an_observation_of_its_own_capability() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let mut out = start(&wr, "wr.bug_investigation");
    // Walk to the delegation probe, following each blocked response's example.
    for _ in 0..12 {
        if pending(&out) == "capability_probe_delegation" {
            break;
        }
        let attempt = wr.continue_workflow(ack(&out, "Done.", vec![])).unwrap();
        out = if attempt.kind == ExecutionKind::Blocked {
            let fix = attempt.blockers[0].suggested_fix.as_ref().unwrap().as_str();
            let example: serde_json::Value =
                serde_json::from_str(&fix[fix.find('{').unwrap()..]).unwrap();
            wr.continue_workflow(ack(&attempt, "Done.", vec![example]))
                .unwrap()
        } else {
            attempt
        };
    }
    assert_eq!(pending(&out), "capability_probe_delegation");
    let wrong = json!({"kind": "wr.capability_observation", "capability": "web_browsing", "status": "available", "evidence": "fetched a page"});
    let blocked = wr
        .continue_workflow(ack(&out, "Probed.", vec![wrong]))
        .unwrap();
    assert_eq!(blocked.kind, ExecutionKind::Blocked);
    assert_eq!(blocked.blockers[0].code, BlockerCode::InvalidRequiredOutput);
    let fix = blocked.blockers[0].suggested_fix.as_ref().unwrap().as_str();
    assert!(fix.contains("\"capability\":\"delegation\""), "{fix}");
    let right = json!({"kind": "wr.capability_observation", "capability": "delegation", "status": "available", "evidence": "spawned a subagent"});
    let next = wr
        .continue_workflow(ack(&blocked, "Probed.", vec![right]))
        .unwrap();
    assert_eq!(next.kind, ExecutionKind::Ok);
}

/// lock: L-PREF-PRECEDENCE, L-PREF-GLOBAL-COPIED
#[test]
fn global_defaults_are_copied_into_a_run_at_start_and_never_rewrite_it() {
    use workrail::store::fs::StoreFs;
    let fs = MemFs::new();
    fs.create_dir_all(std::path::Path::new("config")).unwrap();
    fs.write_new(
        std::path::Path::new("config/preferences.json"),
        br#"{"autonomy": "full_auto_never_stop"}"#,
    )
    .unwrap();
    let wr = open(&fs);
    let out = start(&wr, "project.demo");
    assert_eq!(out.preferences.autonomy, Autonomy::FullAutoNeverStop);
    // A call's delta wins over the global defaults.
    let mine = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: "project.demo".into(),
            context: None,
            preferences: vec![PreferenceDelta::Autonomy(Autonomy::Guided)],
            preset: None,
        })
        .unwrap();
    assert_eq!(mine.preferences.autonomy, Autonomy::Guided);
    // Changing the global config later does not touch the existing run.
    fs.write_new(
        std::path::Path::new("config/preferences.json"),
        br#"{"autonomy": "guided", "riskPolicy": "aggressive"}"#,
    )
    .unwrap();
    let again = wr.continue_workflow(rehydrate(&out.state_token)).unwrap();
    assert_eq!(again.preferences.autonomy, Autonomy::FullAutoNeverStop);
    let fresh = start(&wr, "project.demo");
    assert_eq!(fresh.preferences.risk_policy.as_str(), "aggressive");
    // A broken config is a clear error, not a silent default.
    fs.write_new(
        std::path::Path::new("config/preferences.json"),
        b"{\"autonomy\": 3}",
    )
    .unwrap();
    let err = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: "project.demo".into(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ValidationError);
    assert!(err.message.contains("config/preferences.json"));
}

/// Decision D34: `ackToken` alone advances (its payload scopes session, run and node); the
/// response, replay and fork behaviour are exactly those of the state + ack pair.
/// lock: L-TOKEN-ACK-IDEMPOTENT
#[test]
fn an_ack_token_alone_advances_exactly_like_the_pair() {
    let with_pair = {
        let fs = MemFs::new();
        let wr = open(&fs);
        let out = start(&wr, "project.demo");
        wr.continue_workflow(ack(&out, "Planned.", vec![])).unwrap()
    };
    let fs = MemFs::new();
    let wr = open(&fs);
    let out = start(&wr, "project.demo");
    let ack_only = ContinueWorkflowInput {
        state_token: None,
        ..ack(&out, "Planned.", vec![])
    };
    let first = wr.continue_workflow(ack_only.clone()).unwrap();
    // Same seeded entropy, same calls: the ack alone answers byte for byte like the pair.
    assert_eq!(
        serde_json::to_value(&first).unwrap(),
        serde_json::to_value(&with_pair).unwrap()
    );
    assert_eq!(
        first.pending.as_ref().unwrap().step_id.as_str(),
        "implement"
    );
    // Replaying the ack alone is idempotent and writes nothing.
    let before = fs.snapshot();
    let again = wr.continue_workflow(ack_only).unwrap();
    assert_eq!(again, first);
    assert_eq!(fs.snapshot(), before);
    // The pinned workflow comes from the store: the run still executes its pinned snapshot.
    let next = wr
        .continue_workflow(ContinueWorkflowInput {
            state_token: None,
            ..ack(&first, "Implemented.", vec![])
        })
        .unwrap();
    assert_eq!(next.pending.as_ref().unwrap().step_id.as_str(), "decide");
}

/// Decision D34: with no token at all, or an ack of an unknown run, the error says what to send.
/// lock: L-TOKEN-ERRORS
#[test]
fn continue_without_any_token_or_with_an_unknown_ack_explains_what_to_send() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let out = start(&wr, "project.demo");
    let before = fs.snapshot();
    let none = ContinueWorkflowInput {
        state_token: None,
        ack_token: None,
        ..ack(&out, "x", vec![])
    };
    let err = wr.continue_workflow(none).unwrap_err();
    assert_eq!(err.code, ErrorCode::ValidationError);
    assert!(err.suggestion.contains("ackToken") && err.suggestion.contains("resume_session"));
    // An ack passed where only a state token fits is a wrong-kind error naming both prefixes.
    let swapped = wr
        .continue_workflow(rehydrate(out.ack_token.as_ref().unwrap()))
        .unwrap_err();
    assert_eq!(swapped.code, ErrorCode::TokenInvalidFormat);
    assert!(swapped.message.contains("ack") && swapped.message.contains("st."));
    assert_eq!(fs.snapshot(), before);
    // A signed ack whose session is gone: TOKEN_UNKNOWN_NODE, with a way back.
    use workrail::store::fs::StoreFs;
    fs.remove_dir_all(
        std::path::Path::new("sessions")
            .join(out.session.session_id.as_str())
            .as_path(),
    )
    .unwrap();
    let err = open(&fs)
        .continue_workflow(ContinueWorkflowInput {
            state_token: None,
            ..ack(&out, "x", vec![])
        })
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionNotFound);
    assert!(err.message.contains("deleted"), "{}", err.message);
    assert!(err.suggestion.contains("resume_session"));
}

/// Several runs in one chat: responses name their run (label, workflowId, step) beside their
/// tokens; a pair from two runs, or from two points of one run, is `TOKEN_SCOPE_MISMATCH`
/// naming each token's run and step and what to send instead; swapped fields are named as
/// swapped. Nothing refused writes anything.
/// lock: L-TOKEN-SCOPED, L-ERR-SELF-CORRECTING
#[test]
fn mixed_and_swapped_tokens_say_which_run_each_belongs_to_and_what_to_send() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let a0 = start(&wr, "project.demo");
    let a1 = wr.continue_workflow(ack(&a0, "planned", vec![])).unwrap();
    let b = start(&wr, "project.demo");
    let text = workrail::protocol::render_text(&a1);
    assert!(
        text.contains(&format!(
            "## Tokens for run \"{}\" (project.demo) at step \"Implement\"",
            a1.run.label
        )),
        "{text}"
    );
    let before = fs.snapshot();
    // Across runs.
    let mixed = ContinueWorkflowInput {
        ack_token: b.ack_token.clone(),
        ..ack(&a1, "x", vec![])
    };
    let e = wr.continue_workflow(mixed).unwrap_err();
    assert_eq!(e.code, ErrorCode::TokenScopeMismatch);
    for needle in [
        format!(
            "`ackToken` belongs to run \"{}\" (project.demo) at step \"Plan\"",
            b.run.label
        ),
        format!(
            "`stateToken` belongs to run \"{}\" (project.demo) at step \"Implement\"",
            a1.run.label
        ),
        "(another run)".to_owned(),
    ] {
        assert!(
            e.message.contains(&needle),
            "{needle:?} not in {}",
            e.message
        );
    }
    for needle in [
        "send that ackToken alone",
        "same response",
        "exactly",
        "resume_session",
    ] {
        assert!(
            e.suggestion.contains(needle),
            "{needle:?} not in {}",
            e.suggestion
        );
    }
    let d = e.details.unwrap();
    assert_eq!(d["problem"], "scope_mismatch");
    assert_eq!(d["sameRun"], false);
    assert_eq!(d["ackToken"]["label"], b.run.label.as_str());
    assert_eq!(d["ackToken"]["step"], "Plan");
    assert_eq!(d["stateToken"]["label"], a1.run.label.as_str());
    assert_eq!(d["stateToken"]["workflowId"], "project.demo");
    assert_eq!(d["stateToken"]["runId"], a1.session.run_id.as_str());
    // Two points of one run: the message says which token is the later one.
    let within = ContinueWorkflowInput {
        ack_token: a0.ack_token.clone(),
        ..ack(&a1, "x", vec![])
    };
    let e = wr.continue_workflow(within).unwrap_err();
    assert_eq!(e.code, ErrorCode::TokenScopeMismatch);
    assert!(
        e.message.contains("same run") && e.message.contains("`stateToken` is from the later one"),
        "{}",
        e.message
    );
    // A checkpoint token of another run.
    let e = wr
        .checkpoint_workflow(CheckpointWorkflowInput {
            state_token: a1.state_token.clone(),
            checkpoint_token: b.checkpoint_token.clone().unwrap(),
            output: OutputInput {
                notes_markdown: Some("n".into()),
                artifacts: vec![],
            },
        })
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::TokenScopeMismatch);
    assert!(
        e.suggestion
            .contains("send the checkpointToken from the same response as that stateToken"),
        "{}",
        e.suggestion
    );
    // Swapped fields.
    let swapped = ContinueWorkflowInput {
        state_token: a1.ack_token.clone(),
        ack_token: Some(a1.state_token.clone()),
        ..ack(&a1, "x", vec![])
    };
    let e = wr.continue_workflow(swapped).unwrap_err();
    assert_eq!(e.code, ErrorCode::TokenInvalidFormat);
    assert_eq!(e.details.unwrap()["problem"], "swapped");
    assert!(
        e.message
            .contains("`stateToken` and `ackToken` are swapped"),
        "{}",
        e.message
    );
    let e = wr
        .checkpoint_workflow(CheckpointWorkflowInput {
            state_token: a1.checkpoint_token.clone().unwrap(),
            checkpoint_token: a1.state_token.clone(),
            output: OutputInput {
                notes_markdown: Some("n".into()),
                artifacts: vec![],
            },
        })
        .unwrap_err();
    assert!(e.message.contains("are swapped"), "{}", e.message);
    assert_eq!(fs.snapshot(), before, "a refused call wrote");
}

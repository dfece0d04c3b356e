//! The unified reason model through the production protocol (locks §3 "Unified reason model",
//! §1 "gap_recorded", "capability_observed", "divergence_recorded"; contract "User-only
//! dependencies", "Optional capabilities", "Divergence markers").
//!
//! For every ReasonCode and every autonomy mode, a real `continue_workflow` produces the reason
//! and the durable log and response must say what the locks say: blocked with the mapped blocker
//! code, the same pending step, a fresh ack and an `advance_recorded{blocked}`; or a critical gap
//! with the mapped category and detail while execution goes on; or, for `unexpected:*` found
//! where an append would compromise correctness, an error and no write at all. Guards against a
//! reason that is blocked in one code path and a gap in another, against a disclosure that is
//! silently dropped, and against capability status taken from an agent's say-so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use protocol_support::*;
use serde_json::{Value, json};
use workrail::protocol::Workrail;
use workrail::store::layout;
use workrail::store::memfs::MemFs;
use workrail::tokens::TokenCodec;
use workrail_spec::blocker::{BlockerPointer, ReasonDetails};
use workrail_spec::closed::{
    Autonomy, Capability, CapabilityStatus, EnforcementGrade, GapSeverity, NonAssumableChoiceKind,
    RunStatus, TokenKind, UserOnlyDependencyReason,
};
use workrail_spec::error::ErrorCode;
use workrail_spec::event::{
    AdvanceOutcome, EventData, EvidenceRef, GapRecorded, GapResolution, ProvenanceDetail,
    SessionEvent,
};
use workrail_spec::ids::{NodeId, StepId};
use workrail_spec::reason::ReasonCode;
use workrail_spec::token::{AttemptPayload, TokenParts, TokenPayload};
use workrail_spec::tools::{ContinueWorkflowInput, ExecutionKind, ExecutionOutput};

/// What the locks say a reason does in a mode, written out here rather than read from the
/// table under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Locked {
    /// Blocking modes: `blocked`, the same pending step, a fresh ack, `advance_recorded{blocked}`.
    Blocked,
    /// Never-stop: a critical gap with the code's category and detail, and execution goes on.
    CriticalGap,
    /// `unexpected:*` where appending would compromise correctness: an error, nothing written.
    FailFast,
}

fn locked(code: ReasonCode, mode: Autonomy) -> Locked {
    let text = code.to_string();
    if text.starts_with("unexpected:") {
        Locked::FailFast
    } else if mode == Autonomy::FullAutoNeverStop {
        Locked::CriticalGap
    } else {
        Locked::Blocked
    }
}

/// `L-REASON-BLOCKER-MAPPING` spelled out: user-only reasons share one code, every other code
/// is its detail in upper case.
fn locked_blocker_code(code: ReasonCode) -> String {
    let text = code.to_string();
    let (category, detail) = text.split_once(':').unwrap();
    if category == "user_only_dependency" {
        "USER_ONLY_DEPENDENCY".into()
    } else {
        detail.to_uppercase()
    }
}

fn pending_step(out: &ExecutionOutput) -> Option<StepId> {
    out.pending.as_ref().map(|p| p.step_id.clone())
}

fn user_only(reason: &str) -> Value {
    let mut artifact = json!({
        "kind": "wr.user_only_dependency",
        "reason": reason,
        "summary": format!("Cannot go on without the user: {reason}."),
    });
    if reason == "needs_user_choice" {
        artifact["nonAssumableChoice"] = json!("irreversible_action");
    }
    artifact
}

fn observation(capability: &str, status: &str, extra: Value) -> Value {
    let mut artifact = json!({
        "kind": "wr.capability_observation",
        "capability": capability,
        "status": status,
        "evidence": format!("Tried {capability} once."),
    });
    for (k, v) in extra.as_object().unwrap() {
        artifact[k] = v.clone();
    }
    artifact
}

fn report() -> Value {
    json!({"kind": "wr.verification_report", "checks": [{"check": "tests", "status": "pass", "evidence": "12 passed"}]})
}

/// A reason provoked through the protocol: the response acknowledged, the ack, and where the
/// reason must point.
struct Provoked {
    at: ExecutionOutput,
    input: ContinueWorkflowInput,
    pointer: Option<BlockerPointer>,
    details: Option<ReasonDetails>,
}

fn step(id: &str) -> BlockerPointer {
    BlockerPointer::WorkflowStep {
        step_id: StepId::parse(id).unwrap(),
    }
}

fn contract(contract_ref: &str) -> BlockerPointer {
    BlockerPointer::OutputContract {
        contract_ref: contract_ref.into(),
    }
}

/// Drives a run in `mode` to the ack that produces `code`.
fn provoke(fs: &MemFs, wr: &Workrail, code: ReasonCode, mode: Autonomy) -> Provoked {
    let text = code.to_string();
    let (category, detail) = text.split_once(':').unwrap();
    match category {
        "user_only_dependency" => {
            let at = start_in(wr, "project.reasons", mode);
            assert_eq!(pending(&at), "decide");
            Provoked {
                input: ack(&at, "Stopped for the user.", vec![user_only(detail)]),
                at,
                pointer: Some(step("decide")),
                details: (detail == "needs_user_choice").then_some(
                    ReasonDetails::NonAssumableChoice {
                        choice: NonAssumableChoiceKind::IrreversibleAction,
                    },
                ),
            }
        }
        "contract_violation" => {
            let started = start_in(wr, "project.reasons", mode);
            let at = wr
                .continue_workflow(ack(&started, "Rolled out to staging only.", vec![]))
                .unwrap();
            assert_eq!(pending(&at), "verify");
            let artifacts = if detail == "missing_required_output" {
                vec![]
            } else {
                vec![
                    json!({"kind": "wr.verification_report", "checks": [{"check": "tests", "status": "pass"}]}),
                ]
            };
            Provoked {
                input: ack(&at, "Verified.", artifacts),
                at,
                pointer: Some(contract("wr.contracts.verification_report")),
                details: None,
            }
        }
        "capability_missing" => {
            let details = Some(ReasonDetails::Capability {
                capability: Capability::WebBrowsing,
            });
            let pointer = Some(BlockerPointer::Capability {
                capability: Capability::WebBrowsing,
            });
            if detail == "required_capability_unknown" {
                // The probe sits in a loop that never runs: the next step depends on a
                // capability nobody tried.
                let at = start_in(wr, "project.needs_web", mode);
                assert_eq!(pending(&at), "research");
                Provoked {
                    input: ack(&at, "Researched from memory.", vec![]),
                    at,
                    pointer,
                    details,
                }
            } else {
                let at = start_in(wr, "project.web", mode);
                assert_eq!(pending(&at), "capability_probe_web_browsing");
                let unavailable = observation(
                    "web_browsing",
                    "unavailable",
                    json!({"remediation": "Install a browsing tool."}),
                );
                Provoked {
                    input: ack(&at, "No browser.", vec![unavailable]),
                    at,
                    pointer,
                    details,
                }
            }
        }
        "unexpected" => {
            let started = start_in(wr, "project.reasons", mode);
            if detail == "invariant_violation" {
                // A signed attempt that is neither recorded nor current cannot come from a
                // response: accepting it would record an attempt that never existed.
                let keys = workrail::store::KeyringStore::new(std::sync::Arc::new(fs.clone()));
                let codec = TokenCodec::new(
                    keys.load_or_create(&workrail::entropy::SeededEntropy::new(0))
                        .unwrap()
                        .keyring,
                );
                let TokenPayload::State(state) = codec
                    .verify(&started.state_token, TokenKind::State)
                    .unwrap()
                else {
                    unreachable!()
                };
                let forged = codec.mint(&TokenPayload::Ack(AttemptPayload {
                    session_id: state.session_id.clone(),
                    run_id: state.run_id.clone(),
                    node_id: state.node_id.clone(),
                    attempt_id: workrail::protocol::derive::attempt(
                        &state.session_id,
                        &state.node_id,
                        workrail::protocol::derive::AttemptKind::Ack,
                        3,
                    ),
                }));
                Provoked {
                    input: ContinueWorkflowInput {
                        ack_token: Some(forged),
                        ..ack(&started, "Decided.", vec![])
                    },
                    at: started,
                    pointer: None,
                    details: None,
                }
            } else {
                // The committed log is damaged: no append may follow a failed health gate.
                let dir = layout::events_dir(&started.session.session_id);
                use workrail::store::fs::StoreFs;
                let last = fs
                    .list_dir(&dir)
                    .unwrap()
                    .into_iter()
                    .rfind(|n| !n.starts_with('.'))
                    .unwrap();
                fs.corrupt(&dir.join(last), |bytes| {
                    let i = bytes.len() / 2;
                    bytes[i] ^= 0x01;
                });
                Provoked {
                    input: ack(&started, "Decided.", vec![]),
                    at: started,
                    pointer: None,
                    details: None,
                }
            }
        }
        other => panic!("unknown category {other}"),
    }
}

/// The node a response's state token names (read from the token's payload, not trusted).
fn node_of(out: &ExecutionOutput) -> NodeId {
    match TokenParts::parse(&out.state_token)
        .unwrap()
        .payload()
        .unwrap()
    {
        TokenPayload::State(state) => state.node_id,
        other => panic!("not a state token: {other:?}"),
    }
}

fn gaps_at(events: &[SessionEvent], node: &NodeId) -> Vec<GapRecorded> {
    events
        .iter()
        .filter(|e| e.scope().node_id() == Some(node))
        .filter_map(|e| match e.data() {
            EventData::GapRecorded(g) => Some(GapRecorded::clone(g)),
            _ => None,
        })
        .collect()
}

/// lock: L-REASON-CLOSED-SET, L-REASON-SINGLE-MODEL, L-REASON-BLOCKER-MAPPING, L-REASON-GAP-MAPPING, L-REASON-BLOCKING-MODES, L-REASON-NEVER-STOP, L-REASON-UNEXPECTED, L-BLOCKER-CODES, L-BLOCKER-POINTERS, L-GAP-REASON-DETAILS, L-GAP-USER-ONLY-REASONS, L-GAP-PAYLOAD, L-EVENT-ADVANCE-RECORDED
#[test]
fn every_reason_code_does_what_the_locks_say_in_every_mode() {
    let mut rows = 0;
    for code in ReasonCode::all() {
        for mode in Autonomy::ALL.iter().copied() {
            let row = format!("{code} in {mode}");
            let fs = MemFs::new();
            let wr = open(&fs);
            let provoked = provoke(&fs, &wr, code, mode);
            // Reopen, so nothing cached from before a planted corruption answers.
            let wr = open(&fs);
            let before = fs.snapshot();
            match locked(code, mode) {
                Locked::FailFast => {
                    let err = wr.continue_workflow(provoked.input.clone()).unwrap_err();
                    let expected = if code.to_string().ends_with("storage_corruption_detected") {
                        ErrorCode::SessionCorrupt
                    } else {
                        ErrorCode::InternalError
                    };
                    assert_eq!(err.code, expected, "{row}: {}", err.message);
                    assert_eq!(
                        err.details.as_ref().unwrap()["reasonCode"],
                        code.to_string(),
                        "{row}: the error names the reason"
                    );
                    assert!(!err.suggestion.is_empty(), "{row}");
                    assert_eq!(fs.snapshot(), before, "{row}: nothing partial was written");
                }
                Locked::Blocked => {
                    let before_events = session_events(&wr, &provoked.at).len();
                    let out = wr.continue_workflow(provoked.input.clone()).unwrap();
                    assert_eq!(out.kind, ExecutionKind::Blocked, "{row}");
                    let blocker = out
                        .blockers
                        .iter()
                        .find(|b| b.code.as_str() == locked_blocker_code(code))
                        .unwrap_or_else(|| {
                            panic!("{row}: no blocker of the mapped code in {:?}", out.blockers)
                        });
                    assert_eq!(
                        Some(&blocker.pointer),
                        provoked.pointer.as_ref(),
                        "{row}: pointer"
                    );
                    assert_eq!(blocker.details, provoked.details, "{row}: details");
                    assert!(blocker.suggested_fix.is_some(), "{row}: a fix");
                    assert_eq!(
                        pending_step(&out),
                        pending_step(&provoked.at),
                        "{row}: same pending step"
                    );
                    assert_ne!(out.ack_token, provoked.at.ack_token, "{row}: a fresh ack");
                    assert_eq!(out.state_token, provoked.at.state_token, "{row}: same node");
                    let events = session_events(&wr, &out);
                    let node = node_of(&provoked.at);
                    let last = events.last().unwrap();
                    assert_eq!(last.scope().node_id(), Some(&node), "{row}");
                    match last.data() {
                        EventData::AdvanceRecorded(a) => match &a.outcome {
                            AdvanceOutcome::Blocked { blockers, .. } => {
                                assert_eq!(blockers.blockers(), out.blockers.as_slice(), "{row}")
                            }
                            other => panic!("{row}: recorded {other:?}"),
                        },
                        other => panic!("{row}: last event is {other:?}"),
                    }
                    // The blocker is the durable accounting: no gap for a blocking reason.
                    let written = &events[before_events..];
                    assert!(
                        !written
                            .iter()
                            .any(|e| matches!(e.data(), EventData::GapRecorded(_))),
                        "{row}: a blocking reason records no gap"
                    );
                    // A replay returns the recorded outcome byte for byte.
                    let again = wr.continue_workflow(provoked.input.clone()).unwrap();
                    assert_eq!(
                        serde_json::to_string(&again).unwrap(),
                        serde_json::to_string(&out).unwrap(),
                        "{row}: replay"
                    );
                }
                Locked::CriticalGap => {
                    let out = wr.continue_workflow(provoked.input.clone()).unwrap();
                    assert_eq!(
                        out.kind,
                        ExecutionKind::Ok,
                        "{row}: never-stop never blocks"
                    );
                    assert!(out.blockers.is_empty(), "{row}");
                    assert_ne!(
                        pending_step(&out),
                        pending_step(&provoked.at),
                        "{row}: execution continues"
                    );
                    let events = session_events(&wr, &out);
                    let child = node_of(&out);
                    let text = code.to_string();
                    let (category, detail) = text.split_once(':').unwrap();
                    let gap = gaps_at(&events, &child)
                        .into_iter()
                        .find(|g| {
                            let reason = serde_json::to_value(g.reason).unwrap();
                            reason == json!({"category": category, "detail": detail})
                        })
                        .unwrap_or_else(|| {
                            panic!("{row}: no gap {category}/{detail} at the new node")
                        });
                    assert_eq!(gap.severity, GapSeverity::Critical, "{row}");
                    assert_eq!(gap.resolution, GapResolution::Unresolved, "{row}");
                    assert!(!gap.summary.as_str().is_empty(), "{row}");
                    assert_eq!(gap.details, provoked.details, "{row}: details");
                    let record = events
                        .iter()
                        .rev()
                        .find(|e| matches!(e.data(), EventData::AdvanceRecorded(_)))
                        .unwrap();
                    assert!(
                        matches!(record.data(), EventData::AdvanceRecorded(a)
                            if matches!(&a.outcome, AdvanceOutcome::Advanced { to_node_id } if *to_node_id == child)),
                        "{row}: advanced"
                    );
                    assert_eq!(
                        gap.evidence_refs,
                        Some(vec![EvidenceRef::Event {
                            event_id: record.event_id().clone()
                        }]),
                        "{row}: the gap points at its attempt"
                    );
                    // Structured warning plus durable disclosure.
                    assert!(
                        out.warnings.iter().any(|w| w.code == "gap_recorded"
                            && w.message.contains(&text)
                            && w.message.contains(gap.gap_id.as_str())),
                        "{row}: {:?}",
                        out.warnings
                    );
                    let again = wr.continue_workflow(provoked.input.clone()).unwrap();
                    assert_eq!(
                        serde_json::to_string(&again).unwrap(),
                        serde_json::to_string(&out).unwrap(),
                        "{row}: replay"
                    );
                }
            }
            rows += 1;
        }
    }
    assert_eq!(rows, 12 * 3, "every (code, mode) row ran");
}

/// lock: L-REASON-BLOCKING-MODES, L-GAP-DISCLOSURE-MANDATORY
#[test]
fn reasons_about_what_the_workflow_does_not_require_are_warnings_in_every_mode() {
    for mode in Autonomy::ALL.iter().copied() {
        // A preferred capability that failed, and a malformed optional divergence marker.
        let fs = MemFs::new();
        let wr = open(&fs);
        let at = start_in(&wr, "project.reasons", mode);
        let artifacts = vec![
            observation(
                "delegation",
                "unavailable",
                json!({"failureCode": "tool_missing"}),
            ),
            json!({"kind": "workflow_divergence", "reason": "bored", "summary": "Skipped it."}),
        ];
        let out = wr
            .continue_workflow(ack(&at, "Decided: staging only.", artifacts))
            .unwrap();
        assert_eq!(out.kind, ExecutionKind::Ok, "{mode}");
        assert_eq!(pending(&out), "verify", "{mode}: execution continues");
        let gaps = gaps_at(&session_events(&wr, &out), &node_of(&out));
        let reasons: Vec<(String, GapSeverity)> = gaps
            .iter()
            .map(|g| {
                let v = serde_json::to_value(g.reason).unwrap();
                (
                    format!(
                        "{}:{}",
                        v["category"].as_str().unwrap(),
                        v["detail"].as_str().unwrap()
                    ),
                    g.severity,
                )
            })
            .collect();
        assert_eq!(
            reasons,
            [
                (
                    "contract_violation:invalid_required_output".to_owned(),
                    GapSeverity::Warning
                ),
                (
                    "capability_missing:required_capability_unavailable".to_owned(),
                    GapSeverity::Warning
                ),
            ],
            "{mode}"
        );
        let events = session_events(&wr, &out);
        assert!(
            !events
                .iter()
                .any(|e| matches!(e.data(), EventData::DivergenceRecorded(_))),
            "{mode}: an invalid marker is not recorded as a divergence"
        );
        assert_eq!(
            out.warnings
                .iter()
                .filter(|w| w.code == "gap_recorded")
                .count(),
            2,
            "{mode}"
        );
        // Warnings never make a run "complete with gaps".
        let verified = wr
            .continue_workflow(ack(&out, "Verified.", vec![report()]))
            .unwrap();
        let done = wr
            .continue_workflow(ack(&verified, "Done.", vec![]))
            .unwrap();
        assert!(done.is_complete);
        assert_eq!(done.run.status, RunStatus::Complete, "{mode}");
    }
}

fn observations_at(
    events: &[SessionEvent],
    node: &NodeId,
) -> Vec<workrail_spec::event::CapabilityObserved> {
    events
        .iter()
        .filter(|e| e.scope().node_id() == Some(node))
        .filter_map(|e| match e.data() {
            EventData::CapabilityObserved(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

/// lock: L-EVENT-CAPOBS, L-CAP-PROVENANCE, L-CAP-PROVENANCE-DETAIL, L-CAP-FAILURE-CODE, L-CAP-PROBE-INJECTED, L-CAP-CURRENT-STATUS, L-CAP-OBSERVED-ONLY
#[test]
fn observations_are_recorded_with_provenance_where_the_attempt_lands() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let probe = start_in(&wr, "project.web", Autonomy::Guided);
    let probe_input = ack(
        &probe,
        "Fetched a page.",
        vec![observation("web_browsing", "available", json!({}))],
    );
    let research = wr.continue_workflow(probe_input.clone()).unwrap();
    assert_eq!(pending(&research), "research");
    let events = session_events(&wr, &research);
    let at_probe_child = observations_at(&events, &node_of(&research));
    assert_eq!(
        at_probe_child.len(),
        1,
        "recorded on the node the ack created"
    );
    let obs = &at_probe_child[0];
    assert_eq!(obs.status, CapabilityStatus::Available);
    assert_eq!(obs.provenance.enforcement_grade(), EnforcementGrade::Strong);
    assert_eq!(
        serde_json::to_value(&obs.provenance).unwrap(),
        json!({"kind": "probe_step", "enforcementGrade": "strong", "detail": {
            "probeTemplateId": "wr.templates.capability_probe",
            "probeStepId": "capability_probe_web_browsing",
            "result": "success"}})
    );
    // A retry of the same attempt dedupes (same capObsId); nothing is added.
    let count = events.len();
    wr.continue_workflow(probe_input).unwrap();
    assert_eq!(session_events(&wr, &research).len(), count);

    // An ordinary step: an attempt that failed (required, so it blocks in guided) and a claim.
    let failed = ack(
        &research,
        "The browser broke.",
        vec![
            observation(
                "web_browsing",
                "unavailable",
                json!({"failureCode": "tool_error"}),
            ),
            observation(
                "delegation",
                "available",
                json!({"basis": "claim", "claimedBy": "user"}),
            ),
        ],
    );
    let blocked = wr.continue_workflow(failed).unwrap();
    assert_eq!(blocked.kind, ExecutionKind::Blocked);
    assert_eq!(
        blocked.blockers[0].code.as_str(),
        "REQUIRED_CAPABILITY_UNAVAILABLE"
    );
    let events = session_events(&wr, &blocked);
    // A blocked attempt records its observations on the attempted node (decision D40), after
    // the probe's observation that created it.
    let at_research = observations_at(&events, &node_of(&research));
    let provenance: Vec<Value> = at_research
        .iter()
        .map(|o| serde_json::to_value(&o.provenance).unwrap())
        .collect();
    assert_eq!(provenance[0]["kind"], "probe_step");
    assert_eq!(
        provenance[1..],
        [
            json!({"kind": "attempted_use", "enforcementGrade": "strong", "detail": {
                "attemptContext": "workflow_step", "result": "failure", "failureCode": "tool_error"}}),
            json!({"kind": "manual_claim", "enforcementGrade": "weak", "detail": {
                "claimedBy": "user", "claim": "available"}}),
        ]
    );
    let ids: std::collections::BTreeSet<_> = events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::CapabilityObserved(c) => Some(c.cap_obs_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 3, "each observation has its own capObsId");
    // The node's status is its latest strong observation by EventIndex: the failed attempt,
    // not the earlier successful probe.
    let facts = workrail::protocol::Facts::new(&events);
    let view = facts.run(&research.session.run_id).unwrap();
    assert_eq!(
        view.strong_status(&node_of(&research), Capability::WebBrowsing),
        Some(CapabilityStatus::Unavailable)
    );
    // An attempt without a failure code records `unknown`; then it works again: available.
    let retry = wr
        .continue_workflow(ack(
            &blocked,
            "Retried.",
            vec![
                observation("web_browsing", "unavailable", json!({})),
                observation("web_browsing", "available", json!({})),
            ],
        ))
        .unwrap();
    assert_eq!(
        retry.kind,
        ExecutionKind::Ok,
        "the latest observation of the ack decides"
    );
    let events = session_events(&wr, &retry);
    let latest = observations_at(&events, &node_of(&retry));
    assert!(matches!(
        &latest[0].provenance.detail,
        ProvenanceDetail::AttemptedUse { failure_code: Some(c), .. } if c.as_str() == "unknown"
    ));
    let facts = workrail::protocol::Facts::new(&events);
    let view = facts.run(&retry.session.run_id).unwrap();
    assert_eq!(
        view.strong_status(&node_of(&retry), Capability::WebBrowsing),
        Some(CapabilityStatus::Available)
    );
}

/// lock: L-CAP-WEAK-NO-UNLOCK, L-CAP-OBSERVED-ONLY
#[test]
fn a_claim_never_unlocks_a_required_capability_and_an_attempt_does() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let at = start_in(&wr, "project.needs_web", Autonomy::FullAutoStopOnUserDeps);
    let claimed = wr
        .continue_workflow(ack(
            &at,
            "The user says the browser works.",
            vec![observation(
                "web_browsing",
                "available",
                json!({"basis": "claim", "claimedBy": "user"}),
            )],
        ))
        .unwrap();
    assert_eq!(claimed.kind, ExecutionKind::Blocked);
    assert_eq!(
        claimed.blockers[0].code.as_str(),
        "REQUIRED_CAPABILITY_UNKNOWN"
    );
    let fix = claimed.blockers[0].suggested_fix.as_ref().unwrap().as_str();
    assert!(
        fix.contains("`basis` `attempt`") && fix.contains("claim"),
        "{fix}"
    );
    let tried = wr
        .continue_workflow(ack(
            &claimed,
            "Fetched a page.",
            vec![observation("web_browsing", "available", json!({}))],
        ))
        .unwrap();
    assert_eq!(tried.kind, ExecutionKind::Ok);
    assert_eq!(pending(&tried), "report");
    // The strong observation on the branch now carries the next dependent step.
    let done = wr
        .continue_workflow(ack(&tried, "Reported.", vec![]))
        .unwrap();
    assert!(done.is_complete);

    // A probe accepts only an attempt.
    let wr = open(&MemFs::new());
    let probe = start_in(&wr, "project.web", Autonomy::Guided);
    let refused = wr
        .continue_workflow(ack(
            &probe,
            "I think it works.",
            vec![observation(
                "web_browsing",
                "available",
                json!({"basis": "claim"}),
            )],
        ))
        .unwrap();
    assert_eq!(refused.blockers[0].code.as_str(), "INVALID_REQUIRED_OUTPUT");
    assert!(refused.blockers[0].message.as_str().contains("/basis"));
}

/// lock: L-EVENT-DIVERGENCE, L-AUTHOR-DIVERGENCE-ARTIFACT, L-AUTHOR-CONTRACT-ENFORCED
#[test]
fn divergence_markers_are_recorded_on_the_new_node_and_enforced_only_when_required() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let at = start_in(&wr, "project.reasons", Autonomy::Guided);
    let marker = json!({"kind": "workflow_divergence", "reason": "efficiency_skip", "summary": "Skipped the canary: the change is config only.", "relatedStepId": "decide"});
    let out = wr
        .continue_workflow(ack(&at, "Decided.", vec![marker]))
        .unwrap();
    let events = session_events(&wr, &out);
    let divergences: Vec<(Option<&NodeId>, Value)> = events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::DivergenceRecorded(d) => {
                Some((e.scope().node_id(), serde_json::to_value(d).unwrap()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(divergences.len(), 1);
    assert_eq!(divergences[0].0, Some(&node_of(&out)));
    let d = &divergences[0].1;
    assert_eq!(
        (&d["reason"], &d["summary"], &d["relatedStepId"]),
        (
            &json!("efficiency_skip"),
            &json!("Skipped the canary: the change is config only."),
            &json!("decide")
        )
    );
    assert!(d["divergenceId"].as_str().unwrap().starts_with("div_"));

    // A step that requires the marker: missing and invalid block, valid advances.
    let wr = open(&MemFs::new());
    let triage = start_in(&wr, "project.diverge", Autonomy::Guided);
    let missing = wr
        .continue_workflow(ack(&triage, "Triaged.", vec![]))
        .unwrap();
    assert_eq!(missing.blockers[0].code.as_str(), "MISSING_REQUIRED_OUTPUT");
    assert_eq!(
        missing.blockers[0].pointer,
        contract("wr.contracts.workflow_divergence")
    );
    let wrong_step = json!({"kind": "workflow_divergence", "reason": "safety_stop", "summary": "Stopped early.", "relatedStepId": "nowhere"});
    let invalid = wr
        .continue_workflow(ack(&missing, "Triaged.", vec![wrong_step]))
        .unwrap();
    assert_eq!(invalid.blockers[0].code.as_str(), "INVALID_REQUIRED_OUTPUT");
    assert!(
        invalid.blockers[0]
            .message
            .as_str()
            .contains("/relatedStepId")
    );
    let ok = json!({"kind": "workflow_divergence", "reason": "safety_stop", "summary": "Stopped early."});
    let next = wr
        .continue_workflow(ack(&invalid, "Triaged.", vec![ok]))
        .unwrap();
    assert_eq!(pending(&next), "wrap");
    assert!(
        session_events(&wr, &next)
            .iter()
            .any(|e| matches!(e.data(), EventData::DivergenceRecorded(_)))
    );
}

/// lock: L-GAP-NON-ASSUMABLE-CHOICE, L-GAP-USER-ONLY-REASONS
#[test]
fn needs_user_choice_is_accepted_only_for_a_choice_the_step_marks_non_assumable() {
    let wr = open(&MemFs::new());
    let at = start_in(&wr, "project.reasons", Autonomy::Guided);
    let mut unmarked = user_only("needs_user_choice");
    unmarked["nonAssumableChoice"] = json!("preference_tradeoff");
    let refused = wr
        .continue_workflow(ack(&at, "Which one?", vec![unmarked]))
        .unwrap();
    assert_eq!(refused.kind, ExecutionKind::Blocked);
    let b = &refused.blockers[0];
    assert_eq!(b.code.as_str(), "INVALID_REQUIRED_OUTPUT");
    assert_eq!(b.pointer, contract("wr.contracts.user_only_dependency"));
    assert!(
        b.message.as_str().contains("/nonAssumableChoice")
            && b.message.as_str().contains("yours to make"),
        "{}",
        b.message.as_str()
    );
    // Without a choice kind the report is malformed too.
    let mut bare = user_only("needs_user_choice");
    bare.as_object_mut().unwrap().remove("nonAssumableChoice");
    let refused = wr
        .continue_workflow(ack(&refused, "Which one?", vec![bare]))
        .unwrap();
    assert_eq!(refused.blockers[0].code.as_str(), "INVALID_REQUIRED_OUTPUT");
    // A marked choice is a user-only dependency.
    let stopped = wr
        .continue_workflow(ack(
            &refused,
            "Which one?",
            vec![user_only("needs_user_choice")],
        ))
        .unwrap();
    assert_eq!(stopped.blockers[0].code.as_str(), "USER_ONLY_DEPENDENCY");
    // Every closed reason is accepted; a reason outside the set is not.
    for reason in UserOnlyDependencyReason::ALL {
        let wr = open(&MemFs::new());
        let at = start_in(&wr, "project.reasons", Autonomy::Guided);
        let out = wr
            .continue_workflow(ack(&at, "Stop.", vec![user_only(reason.as_str())]))
            .unwrap();
        assert_eq!(
            out.blockers[0].code.as_str(),
            "USER_ONLY_DEPENDENCY",
            "{reason}"
        );
        assert!(
            out.blockers[0].message.as_str().contains(reason.as_str()),
            "{reason}"
        );
    }
    let wr = open(&MemFs::new());
    let at = start_in(&wr, "project.reasons", Autonomy::Guided);
    let out = wr
        .continue_workflow(ack(&at, "Stop.", vec![user_only("needs_user_coffee")]))
        .unwrap();
    assert_eq!(out.blockers[0].code.as_str(), "INVALID_REQUIRED_OUTPUT");
}

/// lock: L-GAP-IMMUTABLE-RESOLUTION, L-GAP-RESOLVED-PROJECTION, L-GAP-EVIDENCE-REFS
#[test]
fn a_later_ack_that_supplies_what_was_missing_resolves_the_gap_by_linkage() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let at = start_in(&wr, "project.reasons", Autonomy::FullAutoNeverStop);
    let disclosed = wr
        .continue_workflow(ack(
            &at,
            "Assumed staging only.",
            vec![user_only("needs_user_secret_or_token")],
        ))
        .unwrap();
    let gap = gaps_at(&session_events(&wr, &disclosed), &node_of(&disclosed))
        .pop()
        .unwrap();
    assert!(
        disclosed
            .warnings
            .iter()
            .any(|w| w.message.contains("`status` `supplied`"))
    );
    let mut supplied = user_only("needs_user_secret_or_token");
    supplied["status"] = json!("supplied");
    supplied["summary"] = json!("The user configured the registry token.");
    let verified = wr
        .continue_workflow(ack(&disclosed, "Verified.", vec![report(), supplied]))
        .unwrap();
    let events = session_events(&wr, &verified);
    let resolution = gaps_at(&events, &node_of(&verified)).pop().unwrap();
    assert_eq!(
        resolution.resolution,
        GapResolution::Resolves {
            resolves_gap_id: gap.gap_id.clone()
        }
    );
    assert_eq!(resolution.reason, gap.reason);
    assert_eq!(resolution.severity, GapSeverity::Info);
    assert!(matches!(
        resolution.evidence_refs.as_deref(),
        Some([EvidenceRef::Event { .. }])
    ));
    // The original stays as written: immutable history, resolution by linkage.
    let original: Vec<_> = events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::GapRecorded(g) if g.gap_id == gap.gap_id => Some(GapRecorded::clone(g)),
            _ => None,
        })
        .collect();
    assert_eq!(original, std::slice::from_ref(&gap));
    assert!(verified.warnings.iter().any(|w| w.code == "gap_resolved"));
    let done = wr
        .continue_workflow(ack(&verified, "Done.", vec![]))
        .unwrap();
    assert_eq!(
        done.run.status,
        RunStatus::Complete,
        "the only critical gap is resolved"
    );

    // A capability disclosed once per branch, then resolved by a strong observation.
    let wr = open(&MemFs::new());
    let probe = start_in(&wr, "project.web", Autonomy::FullAutoNeverStop);
    let research = wr
        .continue_workflow(ack(
            &probe,
            "No browser.",
            vec![observation("web_browsing", "unavailable", json!({}))],
        ))
        .unwrap();
    let report_step = wr
        .continue_workflow(ack(&research, "From memory.", vec![]))
        .unwrap();
    let events = session_events(&wr, &report_step);
    let capability_gaps: Vec<_> = events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::GapRecorded(g) => Some(g.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        capability_gaps.len(),
        1,
        "the dependent step does not repeat the disclosure"
    );
    let done = wr
        .continue_workflow(ack(
            &report_step,
            "The browser works now.",
            vec![observation("web_browsing", "available", json!({}))],
        ))
        .unwrap();
    assert!(done.is_complete);
    let events = session_events(&wr, &done);
    let resolution = gaps_at(&events, &node_of(&done)).pop().unwrap();
    assert_eq!(
        resolution.resolution,
        GapResolution::Resolves {
            resolves_gap_id: capability_gaps[0].gap_id.clone()
        }
    );
    // Evidence: the attempt and the observation that resolved it.
    let evidence = resolution.evidence_refs.unwrap();
    assert_eq!(evidence.len(), 2);
    let observed = events
        .iter()
        .rev()
        .find(|e| matches!(e.data(), EventData::CapabilityObserved(_)))
        .unwrap();
    assert_eq!(
        evidence[1],
        EvidenceRef::Event {
            event_id: observed.event_id().clone()
        }
    );
    assert_eq!(done.run.status, RunStatus::Complete);
}

//! Durable artifacts are exactly as locked: every event kind, manifest record, snapshot,
//! compiled workflow and bundle is built, written, read back and re-written identically; every
//! locked invariant is enforced on construction and on parse; unknown versions fail fast and
//! unknown fields are rejected.
//!
//! Guards against the drift where a writer produces something a reader accepts with a different
//! meaning (wrong scope, a dedupeKey that no longer follows its recipe, an impossible snapshot).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use serde_json::{Value, json};
use workrail_spec::artifact::ArtifactError;
use workrail_spec::blocker::{Blocker, BlockerCode, BlockerPointer, BlockerReport};
use workrail_spec::bundle::{BundleSession, ExportBundleV1, Producer};
use workrail_spec::closed::*;
use workrail_spec::compiled::*;
use workrail_spec::error::ErrorCode;
use workrail_spec::event::*;
use workrail_spec::ids::*;
use workrail_spec::manifest::{ManifestRecord, SegmentClosed, SnapshotPinned, segment_rel_path};
use workrail_spec::reason::{ContractViolationReason, GapReason};
use workrail_spec::skey::{LoopPathEntry, StepInstanceKey};
use workrail_spec::snapshot::*;

fn entropy(n: u8) -> [u8; 10] {
    [n; 10]
}
fn session() -> SessionId {
    SessionId::from_entropy(&entropy(1))
}
fn run() -> RunId {
    RunId::from_entropy(&entropy(2))
}
fn node(n: u8) -> NodeId {
    NodeId::from_entropy(&entropy(10 + n))
}
fn event_id(n: u8) -> EventId {
    EventId::from_entropy(&entropy(100 + n))
}
fn hash(n: u8) -> Sha256Digest {
    Sha256Digest::from_bytes(&[n; 32])
}
fn step(id: &str) -> StepId {
    StepId::parse(id).unwrap()
}

fn one_of_each_kind() -> Vec<(EventScope, EventData)> {
    let node_scope = EventScope::Node(run(), node(1));
    let run_scope = EventScope::Run(run());
    let blockers = BlockerReport::new(vec![
        Blocker::new(
            BlockerCode::MissingRequiredOutput,
            BlockerPointer::OutputContract {
                contract_ref: "wr.contracts.loop_control".into(),
            },
            "The loop decision step must emit a wr.loop_control artifact.",
            Some("Add output.artifacts[0] = {kind: wr.loop_control, loopId, decision}.".into()),
        )
        .unwrap(),
    ])
    .unwrap();
    vec![
        (
            EventScope::Session,
            EventData::SessionCreated(SessionCreated {}),
        ),
        (
            EventScope::Session,
            EventData::ObservationRecorded(ObservationRecorded {
                key: ObservationKey::GitHeadSha,
                value: ObservationValue::GitSha1 {
                    value: GitSha1::parse("4f3c2a1b0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a").unwrap(),
                },
                confidence: Confidence::High,
            }),
        ),
        (
            run_scope.clone(),
            EventData::run_started(RunStarted {
                workflow_id: WorkflowId::parse("project.bug_investigation").unwrap(),
                workflow_hash: WorkflowHash::from_digest(hash(7)),
                workflow_source_kind: WorkflowSourceKind::Project,
                workflow_source_ref: "workflows/bug_investigation.json".into(),
                lane: None,
            }),
        ),
        (
            node_scope.clone(),
            EventData::NodeCreated(NodeCreated {
                node_kind: NodeKind::Step,
                parent_node_id: None,
                workflow_hash: WorkflowHash::from_digest(hash(7)),
                snapshot_ref: SnapshotRef::from_digest(hash(8)),
            }),
        ),
        (
            run_scope.clone(),
            EventData::EdgeCreated(EdgeCreated {
                edge_kind: EdgeKind::AckedStep,
                from_node_id: node(1),
                to_node_id: node(2),
                cause: EdgeCause {
                    kind: EdgeCauseKind::IntentionalFork,
                    event_id: event_id(1),
                },
            }),
        ),
        (
            node_scope.clone(),
            EventData::AdvanceRecorded(AdvanceRecorded {
                attempt_id: AttemptId::from_entropy(&entropy(50)),
                intent: AdvanceIntent::AckPending,
                outcome: AdvanceOutcome::Blocked {
                    blockers,
                    output_digest: None,
                },
            }),
        ),
        (
            node_scope.clone(),
            EventData::node_output_appended(NodeOutputAppended {
                output_id: OutputId::from_entropy(&entropy(51)),
                supersedes_output_id: None,
                output_channel: OutputChannel::Recap,
                payload: OutputPayload::notes("Completed phase 1."),
            }),
        ),
        (
            node_scope.clone(),
            EventData::PreferencesChanged(PreferencesChanged {
                change_id: ChangeId::from_entropy(&entropy(52)),
                source: PreferenceSource::User,
                delta: vec![PreferenceDelta::Autonomy(Autonomy::FullAutoNeverStop)],
                effective: EffectivePreferences::FULL_AUTO_NEVER_STOP,
            }),
        ),
        (
            node_scope.clone(),
            EventData::CapabilityObserved(CapabilityObserved {
                cap_obs_id: CapObsId::from_entropy(&entropy(53)),
                capability: Capability::WebBrowsing,
                status: CapabilityStatus::Available,
                provenance: Provenance {
                    detail: ProvenanceDetail::ProbeStep {
                        probe_template_id: "wr.templates.capability_probe".into(),
                        probe_step_id: step("wr_probe_web_browsing"),
                        result: ProbeResult::Success,
                    },
                },
            }),
        ),
        (
            node_scope.clone(),
            EventData::gap_recorded(GapRecorded {
                gap_id: GapId::from_entropy(&entropy(54)),
                severity: GapSeverity::Critical,
                reason: GapReason::ContractViolation(
                    ContractViolationReason::MissingRequiredOutput,
                ),
                summary: workrail_spec::budget::BoundedText::new("Missing output.").unwrap(),
                resolution: GapResolution::Unresolved,
                evidence_refs: Some(vec![EvidenceRef::Event {
                    event_id: event_id(2),
                }]),
                details: None,
            }),
        ),
        (
            node_scope.clone(),
            EventData::DivergenceRecorded(DivergenceRecorded {
                divergence_id: DivergenceId::from_entropy(&entropy(55)),
                reason: DivergenceReason::CapabilityUnavailable,
                summary: workrail_spec::budget::BoundedText::new("Ran sequentially.").unwrap(),
                related_step_id: Some(step("investigate")),
            }),
        ),
        (
            node_scope.clone(),
            EventData::DecisionTraceAppended(DecisionTraceAppended::bounded(
                TraceId::from_entropy(&entropy(56)),
                vec![TraceEntry {
                    kind: DecisionTraceKind::SelectedNextStep,
                    summary: "Chose step investigate.".into(),
                    refs: Some(
                        vec![TraceRef::StepId {
                            step_id: step("investigate"),
                        }]
                        .into(),
                    ),
                }],
            )),
        ),
        (
            run_scope,
            EventData::ContextSet(ContextSet {
                context_id: ContextId::from_entropy(&entropy(57)),
                context: json!({"ticketId": "AUTH-1234"})
                    .as_object()
                    .unwrap()
                    .clone(),
                source: ContextSource::Initial,
            }),
        ),
    ]
}

fn build(index: u64, scope: EventScope, data: EventData) -> SessionEvent {
    SessionEvent::new(
        event_id(index as u8),
        EventIndex::new(index).unwrap(),
        session(),
        scope,
        data,
    )
    .unwrap()
}

/// lock: L-EVENT-CLOSED-KINDS, L-EVENT-ENVELOPE
#[test]
fn every_locked_event_kind_roundtrips_through_its_wire_form() {
    let events = one_of_each_kind();
    let kinds: Vec<EventKind> = events.iter().map(|(_, d)| d.kind()).collect();
    assert_eq!(
        kinds,
        EventKind::ALL,
        "one sample per kind, in the locked order"
    );
    for (i, (scope, data)) in events.into_iter().enumerate() {
        let event = build(i as u64, scope, data);
        let text = serde_json::to_string(&event).unwrap();
        let value: Value = serde_json::from_str(&text).unwrap();
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        for required in [
            "v",
            "eventId",
            "eventIndex",
            "sessionId",
            "kind",
            "dedupeKey",
            "data",
        ] {
            assert!(keys.contains(&required), "{text} lacks {required}");
        }
        assert_eq!(value["v"], 1);
        assert_eq!(value["kind"], event.kind().as_str());
        let back = SessionEvent::from_json_str(&text).unwrap();
        assert_eq!(back, event);
        assert_eq!(serde_json::to_string(&back).unwrap(), text);
    }
}

/// lock: L-EVENT-SCOPE-RULES
#[test]
fn scope_rules_are_enforced_per_kind() {
    let scopes = [
        EventScope::Session,
        EventScope::Run(run()),
        EventScope::Node(run(), node(1)),
    ];
    for (_, data) in one_of_each_kind() {
        let kind = data.kind();
        for scope in &scopes {
            let allowed = matches!(
                (kind.scope_rule(), scope),
                (ScopeRule::SessionOnly, EventScope::Session)
                    | (ScopeRule::RunOnly, EventScope::Run(_))
                    | (ScopeRule::Node, EventScope::Node(..))
                    | (
                        ScopeRule::SessionOrNode,
                        EventScope::Session | EventScope::Node(..)
                    )
            );
            let built = SessionEvent::new(
                event_id(1),
                EventIndex::ZERO,
                session(),
                scope.clone(),
                data.clone(),
            );
            assert_eq!(built.is_ok(), allowed, "{kind} with {scope:?}");
        }
    }
    // The locked table itself.
    use EventKind::*;
    assert_eq!(SessionCreated.scope_rule(), ScopeRule::SessionOnly);
    assert_eq!(ObservationRecorded.scope_rule(), ScopeRule::SessionOrNode);
    for k in [RunStarted, EdgeCreated, ContextSet] {
        assert_eq!(k.scope_rule(), ScopeRule::RunOnly, "{k}");
    }
    for k in [
        NodeCreated,
        AdvanceRecorded,
        NodeOutputAppended,
        PreferencesChanged,
        CapabilityObserved,
        GapRecorded,
        DivergenceRecorded,
        DecisionTraceAppended,
    ] {
        assert_eq!(k.scope_rule(), ScopeRule::Node, "{k}");
    }
    // On the wire: a nodeId without runId, or an empty scope, is rejected.
    let mut value = serde_json::to_value(build(
        0,
        EventScope::Session,
        EventData::SessionCreated(Default::default()),
    ))
    .unwrap();
    value["scope"] = json!({});
    assert!(SessionEvent::from_value(value.clone()).is_err());
    value["scope"] = json!({"nodeId": node(1).as_str()});
    assert!(SessionEvent::from_value(value).is_err());
}

/// lock: L-DEDUPE-RECIPES, L-DEDUPE-NOT-EVENT-ID, L-DEDUPE-ADVANCE-NODE-SCOPED
#[test]
fn dedupe_keys_follow_the_recipes_and_ignore_event_ids() {
    let s = session();
    let expected: BTreeMap<EventKind, String> = [
        (EventKind::SessionCreated, format!("session_created:{s}")),
        (EventKind::RunStarted, format!("run_started:{s}:{}", run())),
        (
            EventKind::NodeCreated,
            format!("node_created:{s}:{}:{}", run(), node(1)),
        ),
        (
            EventKind::EdgeCreated,
            format!(
                "edge_created:{s}:{}:{}->{}:acked_step",
                run(),
                node(1),
                node(2)
            ),
        ),
        (
            EventKind::AdvanceRecorded,
            format!(
                "advance_recorded:{s}:{}:{}",
                node(1),
                AttemptId::from_entropy(&entropy(50))
            ),
        ),
        (
            EventKind::NodeOutputAppended,
            format!(
                "node_output_appended:{s}:{}",
                OutputId::from_entropy(&entropy(51))
            ),
        ),
        (
            EventKind::PreferencesChanged,
            format!(
                "preferences_changed:{s}:{}",
                ChangeId::from_entropy(&entropy(52))
            ),
        ),
        (
            EventKind::CapabilityObserved,
            format!(
                "capability_observed:{s}:{}",
                CapObsId::from_entropy(&entropy(53))
            ),
        ),
        (
            EventKind::GapRecorded,
            format!("gap_recorded:{s}:{}", GapId::from_entropy(&entropy(54))),
        ),
        (
            EventKind::DivergenceRecorded,
            format!(
                "divergence_recorded:{s}:{}",
                DivergenceId::from_entropy(&entropy(55))
            ),
        ),
        (
            EventKind::DecisionTraceAppended,
            format!(
                "decision_trace_appended:{s}:{}",
                TraceId::from_entropy(&entropy(56))
            ),
        ),
        (
            EventKind::ContextSet,
            format!(
                "context_set:{s}:{}:{}",
                run(),
                ContextId::from_entropy(&entropy(57))
            ),
        ),
    ]
    .into_iter()
    .collect();
    for (scope, data) in one_of_each_kind() {
        let kind = data.kind();
        let a = build(0, scope.clone(), data.clone());
        // A different eventId and eventIndex never changes the key.
        let b = SessionEvent::new(
            event_id(99),
            EventIndex::new(42).unwrap(),
            session(),
            scope,
            data,
        )
        .unwrap();
        assert_eq!(a.dedupe_key(), b.dedupe_key(), "{kind}");
        assert!(!a.dedupe_key().as_str().contains(a.event_id().as_str()));
        if let Some(key) = expected.get(&kind) {
            assert_eq!(a.dedupe_key().as_str(), key, "{kind}");
        } else {
            // observation_recorded: key and a digest of the value, never the raw value.
            assert_eq!(kind, EventKind::ObservationRecorded);
            let key = a.dedupe_key();
            let key = key.as_str();
            assert!(
                key.starts_with(&format!("observation_recorded:{s}:git_head_sha:")),
                "{key}"
            );
            assert!(!key.contains("4f3c2a1b"), "raw value leaked into {key}");
        }
    }
    // The advance key is node-scoped: the same attempt on another node is another key.
    let (_, advance) = one_of_each_kind().remove(5);
    let on_a = build(0, EventScope::Node(run(), node(1)), advance.clone());
    let on_b = build(0, EventScope::Node(run(), node(2)), advance);
    assert_ne!(on_a.dedupe_key(), on_b.dedupe_key());
}

/// lock: L-DEDUPE-RECIPES
#[test]
fn a_stored_dedupe_key_that_is_not_the_recipe_is_rejected() {
    let event = build(
        0,
        EventScope::Session,
        EventData::SessionCreated(Default::default()),
    );
    let mut value = serde_json::to_value(&event).unwrap();
    value["dedupeKey"] = json!("session_created:sess_other");
    let err = SessionEvent::from_value(value).unwrap_err();
    assert!(
        matches!(
            err,
            ArtifactError::Invariant {
                rule: "dedupeKey recipe",
                ..
            }
        ),
        "{err}"
    );
}

/// lock: L-VERSION-UNKNOWN-FAILS-FAST, L-VERSION-EVERY-ARTIFACT
#[test]
fn unknown_versions_fail_fast_for_every_artifact() {
    let event = serde_json::to_value(build(
        0,
        EventScope::Session,
        EventData::SessionCreated(Default::default()),
    ))
    .unwrap();
    let manifest = serde_json::to_value(ManifestRecord::SnapshotPinned(SnapshotPinned {
        manifest_index: ManifestIndex::ZERO,
        session_id: session(),
        event_index: EventIndex::ZERO,
        snapshot_ref: SnapshotRef::from_digest(hash(1)),
        created_by_event_id: event_id(1),
    }))
    .unwrap();
    let snapshot = serde_json::to_value(sample_snapshot()).unwrap();
    let compiled = serde_json::to_value(sample_compiled()).unwrap();
    type Parse = fn(Value) -> Result<(), ArtifactError>;
    let cases: Vec<(Value, &str, Parse)> = vec![
        (event, "/v", |v| SessionEvent::from_value(v).map(drop)),
        (manifest, "/v", |v| ManifestRecord::from_value(v).map(drop)),
        (snapshot.clone(), "/v", |v| {
            ExecutionSnapshotFileV1::from_value(v).map(drop)
        }),
        (snapshot, "/enginePayload/v", |v| {
            ExecutionSnapshotFileV1::from_value(v).map(drop)
        }),
        (compiled, "/schemaVersion", |v| {
            CompiledWorkflowSnapshotV1::from_value(v).map(drop)
        }),
    ];
    for (value, pointer, parse) in cases {
        assert!(
            parse(value.clone()).is_ok(),
            "{pointer} baseline must parse"
        );
        for bad in [json!(2), json!("1"), json!(0)] {
            let mut v = value.clone();
            *v.pointer_mut(pointer).unwrap() = bad.clone();
            let err = parse(v).unwrap_err();
            assert!(
                matches!(err, ArtifactError::UnsupportedVersion { .. }),
                "{pointer}={bad}: {err}"
            );
        }
    }
}

/// lock: L-VERSION-UNKNOWN-FIELDS
#[test]
fn unknown_fields_are_rejected_in_envelopes_and_payloads() {
    let event = serde_json::to_value(build(
        0,
        EventScope::Session,
        EventData::SessionCreated(Default::default()),
    ))
    .unwrap();
    for pointer in ["", "/data"] {
        let mut v = event.clone();
        v.pointer_mut(pointer)
            .unwrap()
            .as_object_mut()
            .unwrap()
            .insert("surprise".into(), json!(1));
        let err = SessionEvent::from_value(v).unwrap_err();
        assert!(
            matches!(err, ArtifactError::Malformed { .. }),
            "{pointer}: {err}"
        );
        assert!(err.to_string().contains("surprise"), "{err}");
    }
}

/// lock: L-EVENT-EDGE-CREATED, L-DAG-ACKED-STEP-EDGE, L-DAG-CHECKPOINT-EDGE, L-DAG-NO-FORK-EDGE-KIND
#[test]
fn edge_causes_must_fit_the_edge_kind() {
    for edge_kind in EdgeKind::ALL {
        for cause in EdgeCauseKind::ALL {
            let data = EventData::EdgeCreated(EdgeCreated {
                edge_kind: *edge_kind,
                from_node_id: node(1),
                to_node_id: node(2),
                cause: EdgeCause {
                    kind: *cause,
                    event_id: event_id(1),
                },
            });
            let ok = SessionEvent::new(
                event_id(2),
                EventIndex::ZERO,
                session(),
                EventScope::Run(run()),
                data,
            )
            .is_ok();
            let expected = match edge_kind {
                EdgeKind::AckedStep => *cause != EdgeCauseKind::CheckpointCreated,
                EdgeKind::Checkpoint => *cause == EdgeCauseKind::CheckpointCreated,
            };
            assert_eq!(ok, expected, "{edge_kind} with {cause}");
        }
    }
    assert_eq!(
        EdgeKind::ALL.len(),
        2,
        "fork-ness is a cause, not an edge kind"
    );
}

/// lock: L-EVENT-PREFS-CHANGED
#[test]
fn preference_changes_need_a_nonempty_consistent_delta() {
    let base = PreferencesChanged {
        change_id: ChangeId::from_entropy(&entropy(3)),
        source: PreferenceSource::User,
        delta: vec![PreferenceDelta::RiskPolicy(RiskPolicy::Aggressive)],
        effective: EffectivePreferences {
            autonomy: Autonomy::Guided,
            risk_policy: RiskPolicy::Aggressive,
        },
    };
    let scope = EventScope::Node(run(), node(1));
    let try_build = |p: PreferencesChanged| {
        SessionEvent::new(
            event_id(1),
            EventIndex::ZERO,
            session(),
            scope.clone(),
            EventData::PreferencesChanged(p),
        )
    };
    assert!(try_build(base.clone()).is_ok());
    let mut empty = base.clone();
    empty.delta.clear();
    assert!(try_build(empty).is_err());
    let mut dup = base.clone();
    dup.delta
        .push(PreferenceDelta::RiskPolicy(RiskPolicy::Balanced));
    assert!(try_build(dup).is_err());
    let mut inconsistent = base;
    inconsistent.effective.risk_policy = RiskPolicy::Balanced;
    assert!(try_build(inconsistent).is_err());
    // Wire shape of a delta item.
    assert_eq!(
        serde_json::to_value(PreferenceDelta::Autonomy(Autonomy::Guided)).unwrap(),
        json!({"key": "autonomy", "value": "guided"})
    );
}

/// lock: L-CAP-PROVENANCE, L-CAP-FAILURE-CODE, L-EVENT-CAPOBS
#[test]
fn capability_provenance_grade_and_failure_code_are_checked() {
    let sample = serde_json::to_value(build(
        0,
        EventScope::Node(run(), node(1)),
        one_of_each_kind().remove(8).1,
    ))
    .unwrap();
    assert_eq!(sample["data"]["provenance"]["enforcementGrade"], "strong");
    let mut weak = sample.clone();
    weak["data"]["provenance"]["enforcementGrade"] = json!("weak");
    assert!(
        SessionEvent::from_value(weak).is_err(),
        "grade must be derived from kind"
    );
    let attempted = |result: &str, failure: Option<&str>| {
        let mut v = sample.clone();
        let mut detail = json!({"attemptContext": "workflow_step", "result": result});
        if let Some(code) = failure {
            detail["failureCode"] = json!(code);
        }
        v["data"]["provenance"] =
            json!({"kind": "attempted_use", "enforcementGrade": "strong", "detail": detail});
        SessionEvent::from_value(v)
    };
    assert!(attempted("success", None).is_ok());
    assert!(attempted("failure", Some("tool_missing")).is_ok());
    assert!(attempted("failure", None).is_err());
    assert!(attempted("success", Some("tool_error")).is_err());
    assert_eq!(
        ProvenanceKind::ManualClaim.enforcement_grade(),
        EnforcementGrade::Weak
    );
}

/// lock: L-OUTPUT-NOTES-BUDGET, L-BUDGET-TRUNCATION-MARKER
#[test]
fn notes_over_budget_are_truncated_with_the_marker_and_stored_notes_are_bounded() {
    let long = "ü".repeat(3000); // 6000 bytes
    let OutputPayload::Notes { notes_markdown } = OutputPayload::notes(&long) else {
        unreachable!()
    };
    assert!(notes_markdown.as_str().len() <= 4096);
    assert!(notes_markdown.as_str().ends_with("\n\n[TRUNCATED]"));
    // A stored event carrying more than 4096 bytes of notes is rejected on read.
    let (scope, data) = one_of_each_kind().remove(6);
    let mut v = serde_json::to_value(build(0, scope, data)).unwrap();
    v["data"]["payload"]["notesMarkdown"] = json!("x".repeat(4097));
    assert!(SessionEvent::from_value(v).is_err());
}

/// lock: L-TRACE-BUDGETS, L-TRACE-TRUNCATION, L-TRACE-REFS
#[test]
fn decision_traces_are_bounded_and_truncate_in_order() {
    let entry = |i: usize| TraceEntry {
        kind: DecisionTraceKind::EvaluatedCondition,
        summary: format!("{i}:{}", "s".repeat(600)).into(),
        refs: Some((0..12).map(|n| TraceRef::Iteration { value: n }).collect()),
    };
    let trace = DecisionTraceAppended::bounded(
        TraceId::from_entropy(&entropy(4)),
        (0..30).map(entry).collect(),
    );
    assert!(trace.entries.len() <= 25);
    assert!(trace.total_bytes() <= 8192, "{}", trace.total_bytes());
    assert!(
        trace.entries.len() > 1,
        "entries are shortened before they are dropped"
    );
    for (i, e) in trace.entries.iter().enumerate() {
        // Each kept entry is the i-th input, its summary a truncated prefix of the original.
        let kept = e
            .summary
            .strip_suffix("\n\n[TRUNCATED]")
            .expect("marker on every cut summary");
        assert!(
            entry(i).summary.starts_with(kept),
            "entry {i} kept in order"
        );
        assert!(e.summary.len() <= 512);
        assert!(e.refs.as_ref().unwrap().len() <= 10);
    }
    assert!(
        trace.entries[0].summary.starts_with("0:"),
        "earliest entries keep the most text"
    );
    let event = build(
        0,
        EventScope::Node(run(), node(1)),
        EventData::DecisionTraceAppended(trace),
    );
    let text = serde_json::to_string(&event).unwrap();
    assert_eq!(SessionEvent::from_json_str(&text).unwrap(), event);
    // Refs are a closed tagged union.
    assert_eq!(
        serde_json::to_value(TraceRef::LoopId {
            loop_id: LoopId::parse("outer").unwrap()
        })
        .unwrap(),
        json!({"kind": "loop_id", "loopId": "outer"})
    );
}

/// lock: L-CONTEXT-SET-PAYLOAD, L-CONTEXT-RESERVED-KEYS, L-CONTEXT-SET-BUDGET
#[test]
fn context_set_is_run_scoped_bounded_and_rejects_reserved_keys() {
    let (scope, data) = one_of_each_kind().pop().unwrap();
    assert_eq!(scope, EventScope::Run(run()));
    let mut v = serde_json::to_value(build(0, scope, data)).unwrap();
    assert_eq!(v["data"]["source"], "initial");
    let mut reserved = v.clone();
    reserved["data"]["context"]["constructor"] = json!(1);
    assert!(SessionEvent::from_value(reserved).is_err());
    v["data"]["context"]["blob"] = json!("x".repeat(256 * 1024));
    assert!(SessionEvent::from_value(v).is_err());
}

/// lock: L-MANIFEST-CLOSED-KINDS, L-MANIFEST-SEGMENT-CLOSED-FIELDS, L-MANIFEST-SNAPSHOT-PINNED-FIELDS
#[test]
fn manifest_records_have_exactly_the_locked_fields() {
    let closed = ManifestRecord::SegmentClosed(SegmentClosed {
        manifest_index: ManifestIndex::new(12).unwrap(),
        session_id: session(),
        first_event_index: EventIndex::ZERO,
        last_event_index: EventIndex::new(4999).unwrap(),
        segment_rel_path: segment_rel_path(EventIndex::ZERO, EventIndex::new(4999).unwrap()),
        sha256: hash(3),
        bytes: 1_837_421,
    });
    let value = serde_json::to_value(&closed).unwrap();
    let mut keys: Vec<&str> = value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "bytes",
            "firstEventIndex",
            "kind",
            "lastEventIndex",
            "manifestIndex",
            "segmentRelPath",
            "sessionId",
            "sha256",
            "v"
        ]
    );
    assert_eq!(value["segmentRelPath"], "events/00000000-00004999.jsonl");
    assert_eq!(ManifestRecord::from_value(value.clone()).unwrap(), closed);
    let pinned = ManifestRecord::SnapshotPinned(SnapshotPinned {
        manifest_index: ManifestIndex::new(13).unwrap(),
        session_id: session(),
        event_index: EventIndex::new(42).unwrap(),
        snapshot_ref: SnapshotRef::from_digest(hash(4)),
        created_by_event_id: event_id(5),
    });
    let pv = serde_json::to_value(&pinned).unwrap();
    let mut keys: Vec<&str> = pv.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "createdByEventId",
            "eventIndex",
            "kind",
            "manifestIndex",
            "sessionId",
            "snapshotRef",
            "v"
        ]
    );
    assert_eq!(ManifestRecord::from_value(pv).unwrap(), pinned);
    // Closed set of kinds; bounds ordered; path relative and canonical.
    let mut other = value.clone();
    other["kind"] = json!("segment_opened");
    assert!(ManifestRecord::from_value(other).is_err());
    let mut reversed = value.clone();
    reversed["firstEventIndex"] = json!(5000);
    assert!(ManifestRecord::from_value(reversed).is_err());
    for path in [
        "/abs/events/00000000-00004999.jsonl",
        "../events/00000000-00004999.jsonl",
        "events/0-4999.jsonl",
    ] {
        let mut v = value.clone();
        v["segmentRelPath"] = json!(path);
        assert!(ManifestRecord::from_value(v).is_err(), "{path}");
    }
}

/// A `snapshot_pinned` record missing any of its required fields is refused, never read with a
/// default: each field is what a reader needs to trust the pin.
///
/// lock: L-MANIFEST-SNAPSHOT-PINNED-FIELDS
#[test]
fn a_snapshot_pinned_record_missing_a_required_field_is_refused() {
    let pinned = ManifestRecord::SnapshotPinned(SnapshotPinned {
        manifest_index: ManifestIndex::new(13).unwrap(),
        session_id: session(),
        event_index: EventIndex::new(42).unwrap(),
        snapshot_ref: SnapshotRef::from_digest(hash(4)),
        created_by_event_id: event_id(5),
    });
    let whole = serde_json::to_value(&pinned).unwrap();
    assert_eq!(ManifestRecord::from_value(whole.clone()).unwrap(), pinned);
    for field in [
        "v",
        "manifestIndex",
        "sessionId",
        "kind",
        "eventIndex",
        "snapshotRef",
        "createdByEventId",
    ] {
        let mut cut = whole.clone();
        assert!(
            cut.as_object_mut().unwrap().remove(field).is_some(),
            "{field} is a field of the record"
        );
        assert!(
            ManifestRecord::from_value(cut).is_err(),
            "a snapshot_pinned record without {field} was accepted"
        );
    }
}

fn sample_snapshot() -> ExecutionSnapshotFileV1 {
    let outer = LoopId::parse("outer").unwrap();
    ExecutionSnapshotFileV1 {
        workflow_hash: WorkflowHash::from_digest(hash(7)),
        engine_payload: EnginePayloadV1::new(EngineState::Running {
            completed: CompletedSet::new([
                StepInstanceKey::parse("triage").unwrap(),
                StepInstanceKey::parse("outer@0::gather").unwrap(),
            ]),
            loop_stack: vec![LoopFrame {
                loop_id: outer.clone(),
                iteration: 1,
                body_index: 0,
            }],
            pending: Pending::Some {
                step: PendingStep {
                    step_id: step("gather"),
                    loop_path: vec![LoopPathEntry {
                        loop_id: outer,
                        iteration: 1,
                    }],
                    bindings: Default::default(),
                },
            },
            revisit: None,
        })
        .unwrap(),
    }
}

/// lock: L-SNAPSHOT-PENDING-UNION, L-SNAPSHOT-NO-PENDING-IN-COMPLETED, L-SNAPSHOT-LOOP-UNIQUE, L-SNAPSHOT-LOOPPATH-MATCHES-STACK, L-SNAPSHOT-COMPLETED-SORTED
#[test]
fn impossible_snapshot_states_are_rejected() {
    let good = serde_json::to_value(sample_snapshot()).unwrap();
    assert_eq!(
        good["enginePayload"]["engineState"]["pending"]["kind"],
        "some"
    );
    assert_eq!(
        good["enginePayload"]["engineState"]["completed"],
        json!({"kind": "set", "values": ["outer@0::gather", "triage"]})
    );
    assert_eq!(
        ExecutionSnapshotFileV1::from_value(good.clone()).unwrap(),
        sample_snapshot()
    );
    let state = "/enginePayload/engineState";
    let mutations: Vec<(&str, Value)> = vec![
        // pending step instance already completed
        (
            "/completed",
            json!({"kind": "set", "values": ["outer@0::gather", "outer@1::gather", "triage"]}),
        ),
        // completed set not sorted / not unique
        (
            "/completed",
            json!({"kind": "set", "values": ["triage", "outer@0::gather"]}),
        ),
        (
            "/completed",
            json!({"kind": "set", "values": ["triage", "triage"]}),
        ),
        // raw array instead of the set wrapper
        ("/completed", json!(["outer@0::gather", "triage"])),
        // loop id twice on the stack
        (
            "/loopStack",
            json!([{"loopId": "outer", "iteration": 1, "bodyIndex": 0}, {"loopId": "outer", "iteration": 0, "bodyIndex": 0}]),
        ),
        // pending loop path disagrees with the stack
        (
            "/loopStack",
            json!([{"loopId": "outer", "iteration": 2, "bodyIndex": 0}]),
        ),
        ("/loopStack", json!([])),
        // nullable pending instead of the explicit union
        ("/pending", Value::Null),
    ];
    for (field, bad) in mutations {
        let mut v = good.clone();
        *v.pointer_mut(&format!("{state}{field}")).unwrap() = bad.clone();
        assert!(
            ExecutionSnapshotFileV1::from_value(v).is_err(),
            "{field} = {bad} must be rejected"
        );
    }
    let none = EngineState::Running {
        completed: CompletedSet::default(),
        loop_stack: vec![],
        pending: Pending::None,
        revisit: None,
    };
    assert_eq!(
        serde_json::to_value(&none).unwrap()["pending"],
        json!({"kind": "none"})
    );
}

/// lock: L-SNAPSHOT-CAS-REF
#[test]
fn snapshot_ref_is_the_digest_of_the_canonical_file() {
    let snapshot = sample_snapshot();
    let bytes = workrail_spec::jcs::to_canonical_bytes(&snapshot).unwrap();
    assert_eq!(
        snapshot.snapshot_ref().unwrap().digest(),
        &workrail_spec::jcs::sha256(&bytes)
    );
}

fn sample_compiled() -> CompiledWorkflowSnapshotV1 {
    let contract = CompiledContract {
        contract_ref: "wr.contracts.loop_control".into(),
        artifact_kind: "wr.loop_control".into(),
        schema: json!({"type": "object", "required": ["kind", "loopId", "decision"]}),
        example: json!({"kind": "wr.loop_control", "loopId": "outer", "decision": "stop"}),
    };
    let mk_step = |id: &str, contract_ref: Option<&str>| CompiledStep {
        step_id: step(id),
        title: format!("Step {id}"),
        require_confirmation: false,
        agent_role: None,
        prompt_blocks: None,
        prompt: format!("Do {id}."),
        output: contract_ref.map(|c| StepOutputSpec {
            contract_ref: Some(c.into()),
            hints: BTreeMap::new(),
        }),
        provenance: StepProvenance {
            source: StepSource::Authored,
            origin_id: None,
        },
        injected_refs: vec![],
        non_assumable_choices: vec![],
        functions: Vec::new(),
        language: Default::default(),
    };
    CompiledWorkflowSnapshotV1::new(CompiledWorkflowBody {
        workflow_id: WorkflowId::parse("project.sample").unwrap(),
        name: Some("Sample".into()),
        description: None,
        agent_role: None,
        recommendations: Recommendations::default(),
        capabilities: BTreeMap::from([(Capability::Delegation, CapabilityRequirement::Preferred)]),
        features: vec![],
        contracts: vec![contract],
        steps: vec![
            mk_step("triage", None),
            mk_step("gather", None),
            mk_step("decide", Some("wr.contracts.loop_control")),
        ],
        sequence: vec![
            SequenceItem::Step {
                step_id: step("triage"),
            },
            SequenceItem::Loop {
                loop_id: LoopId::parse("outer").unwrap(),
            },
        ],
        conditions: vec![CompiledCondition::LoopControl {
            condition_id: ConditionId::parse("keep_going").unwrap(),
            continue_when: LoopDecision::Continue,
        }],
        loops: vec![CompiledLoop {
            loop_id: LoopId::parse("outer").unwrap(),
            while_: LoopWhile::ConditionRef {
                condition_id: ConditionId::parse("keep_going").unwrap(),
            },
            max_iterations: 3,
            body: vec![
                SequenceItem::Step {
                    step_id: step("gather"),
                },
                SequenceItem::Step {
                    step_id: step("decide"),
                },
            ],
            run_condition: None,
            vars: Default::default(),
            kept: Default::default(),
        }],
        compiled_warnings: vec![],
        assessments: Vec::new(),
        kept: Default::default(),
    })
    .unwrap()
}

/// lock: L-HASH-WORKFLOW, L-HASH-SINGLE-JCS
#[test]
fn workflow_hash_is_sha256_of_the_jcs_of_the_compiled_snapshot() {
    let compiled = sample_compiled();
    let value = serde_json::to_value(&compiled).unwrap();
    assert_eq!(value["schemaVersion"], 1);
    assert_eq!(
        value["loops"][0]["while"],
        json!({"kind": "condition_ref", "conditionId": "keep_going"})
    );
    let bytes = workrail_spec::jcs::to_canonical_bytes(&value).unwrap();
    assert_eq!(
        compiled.workflow_hash().unwrap().digest(),
        &workrail_spec::jcs::sha256(&bytes)
    );
    // Key order in the source text does not matter; any hashed field does.
    let reparsed =
        CompiledWorkflowSnapshotV1::from_json_str(&serde_json::to_string_pretty(&value).unwrap())
            .unwrap();
    assert_eq!(
        reparsed.workflow_hash().unwrap(),
        compiled.workflow_hash().unwrap()
    );
    let mut changed = value.clone();
    changed["steps"][0]["prompt"] = json!("Do triage!");
    let changed = CompiledWorkflowSnapshotV1::from_value(changed).unwrap();
    assert_ne!(
        changed.workflow_hash().unwrap(),
        compiled.workflow_hash().unwrap()
    );
}

/// lock: L-COMPILE-CONDITIONS-SORTED, L-COMPILE-LOOPS-SORTED, L-COMPILE-CONTRACTS-SORTED, L-COMPILE-FEATURE-ORDER
#[test]
fn compiled_snapshots_with_unsorted_or_dangling_parts_are_rejected() {
    let good = serde_json::to_value(sample_compiled()).unwrap();
    let contract = good["contracts"][0].clone();
    let mutations: Vec<(&str, Value)> = vec![
        ("/contracts", json!([contract.clone(), contract])),
        (
            "/features",
            json!([{"featureId": "wr.features.b", "config": {}}, {"featureId": "wr.features.a", "config": {}}]),
        ),
        (
            "/conditions",
            json!([{"kind": "always_true", "conditionId": "z"}, {"kind": "loop_control", "conditionId": "keep_going", "continueWhen": "continue"}]),
        ),
        ("/loops/0/maxIterations", json!(0)),
        ("/loops/0/body", json!([])),
        ("/loops/0/while/conditionId", json!("missing")),
        ("/sequence", json!([{"kind": "step", "stepId": "triage"}])),
        ("/sequence/0/stepId", json!("gather")),
        ("/steps/2/output/contractRef", json!("wr.contracts.unknown")),
    ];
    for (pointer, bad) in mutations {
        let mut v = good.clone();
        *v.pointer_mut(pointer).unwrap() = bad.clone();
        let err = CompiledWorkflowSnapshotV1::from_value(v);
        assert!(err.is_err(), "{pointer} = {bad} must be rejected");
    }
}

fn sample_bundle() -> ExportBundleV1 {
    let compiled = sample_compiled();
    let wf_hash = compiled.workflow_hash().unwrap();
    let snapshot = ExecutionSnapshotFileV1 {
        workflow_hash: wf_hash.clone(),
        engine_payload: EnginePayloadV1::new(EngineState::Init).unwrap(),
    };
    let snap_ref = snapshot.snapshot_ref().unwrap();
    let events = vec![
        build(
            0,
            EventScope::Session,
            EventData::SessionCreated(Default::default()),
        ),
        build(
            1,
            EventScope::Run(run()),
            EventData::run_started(RunStarted {
                workflow_id: WorkflowId::parse("project.sample").unwrap(),
                workflow_hash: wf_hash.clone(),
                workflow_source_kind: WorkflowSourceKind::Project,
                workflow_source_ref: "sample.json".into(),
                lane: None,
            }),
        ),
        build(
            2,
            EventScope::Node(run(), node(1)),
            EventData::NodeCreated(NodeCreated {
                node_kind: NodeKind::Step,
                parent_node_id: None,
                workflow_hash: wf_hash.clone(),
                snapshot_ref: snap_ref.clone(),
            }),
        ),
    ];
    let manifest = vec![
        ManifestRecord::SegmentClosed(SegmentClosed {
            manifest_index: ManifestIndex::ZERO,
            session_id: session(),
            first_event_index: EventIndex::ZERO,
            last_event_index: EventIndex::new(2).unwrap(),
            segment_rel_path: segment_rel_path(EventIndex::ZERO, EventIndex::new(2).unwrap()),
            sha256: hash(9),
            bytes: 100,
        }),
        ManifestRecord::SnapshotPinned(SnapshotPinned {
            manifest_index: ManifestIndex::new(1).unwrap(),
            session_id: session(),
            event_index: EventIndex::new(2).unwrap(),
            snapshot_ref: snap_ref.clone(),
            created_by_event_id: event_id(2),
        }),
    ];
    ExportBundleV1::assemble(
        BundleId::from_entropy(&entropy(77)),
        "2026-11-21T00:00:00Z".into(),
        Producer {
            app_version: "0.1.0".into(),
            applied_config_hash: None,
        },
        BundleSession {
            session_id: session(),
            events,
            manifest,
            snapshots: BTreeMap::from([(snap_ref, snapshot)]),
            pinned_workflows: BTreeMap::from([(wf_hash, compiled)]),
        },
    )
    .unwrap()
}

/// lock: L-BUNDLE-ENVELOPE, L-BUNDLE-INTEGRITY-KIND, L-BUNDLE-INTEGRITY-JCS, L-BUNDLE-NO-TOKENS
#[test]
fn bundles_carry_a_jcs_integrity_manifest_and_validate() {
    let bundle = sample_bundle();
    let text = serde_json::to_string(&bundle).unwrap();
    assert!(
        !text.contains("st.v1.") && !text.contains("ack.v1."),
        "no tokens in bundles"
    );
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["bundleSchemaVersion"], 1);
    assert_eq!(value["integrity"]["kind"], "sha256_manifest_v1");
    let paths: Vec<&str> = value["integrity"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"session/events") && paths.contains(&"session/manifest"));
    assert_eq!(paths.len(), 4);
    // Each digest is over the JCS bytes of the referenced value.
    let events_jcs = workrail_spec::jcs::to_canonical_bytes(&value["session"]["events"]).unwrap();
    let entry = value["integrity"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["path"] == "session/events")
        .unwrap();
    assert_eq!(
        entry["sha256"],
        workrail_spec::jcs::sha256(&events_jcs).as_str()
    );
    assert_eq!(entry["bytes"], events_jcs.len());
    let parsed = ExportBundleV1::parse_and_validate(&text).unwrap();
    assert_eq!(parsed, bundle);
}

/// lock: L-BUNDLE-ERRORS, L-BUNDLE-IMPORT-VALIDATES
#[test]
fn every_bundle_failure_has_its_locked_code() {
    let good: Value = serde_json::to_value(sample_bundle()).unwrap();
    let code_of = |v: &Value| {
        ExportBundleV1::parse_and_validate(&serde_json::to_string(v).unwrap())
            .err()
            .map(|e| e.code)
    };
    assert_eq!(code_of(&good), None);
    assert_eq!(
        code_of(&json!([1, 2])),
        Some(ErrorCode::BundleInvalidFormat)
    );
    let mut v = good.clone();
    v["bundleSchemaVersion"] = json!(2);
    assert_eq!(code_of(&v), Some(ErrorCode::BundleUnsupportedVersion));
    let mut v = good.clone();
    v["session"]["events"][0]["eventId"] = json!("evt_tampered");
    assert_eq!(code_of(&v), Some(ErrorCode::BundleIntegrityFailed));
    // Reordering with a matching integrity manifest is still an order failure.
    let mut reordered = sample_bundle();
    reordered.body.session.events.swap(0, 1);
    let reordered = ExportBundleV1::assemble(
        reordered.body.bundle_id,
        reordered.body.exported_at,
        reordered.body.producer,
        reordered.body.session,
    )
    .unwrap();
    assert_eq!(
        code_of(&serde_json::to_value(&reordered).unwrap()),
        Some(ErrorCode::BundleEventOrderInvalid)
    );
    let mut manifest_swapped = sample_bundle();
    manifest_swapped.body.session.manifest.swap(0, 1);
    let b = manifest_swapped.body;
    let b = ExportBundleV1::assemble(b.bundle_id, b.exported_at, b.producer, b.session).unwrap();
    assert_eq!(
        code_of(&serde_json::to_value(&b).unwrap()),
        Some(ErrorCode::BundleManifestOrderInvalid)
    );
    let mut no_snapshots = sample_bundle().body;
    no_snapshots.session.snapshots.clear();
    let b = ExportBundleV1::assemble(
        no_snapshots.bundle_id,
        no_snapshots.exported_at,
        no_snapshots.producer,
        no_snapshots.session,
    )
    .unwrap();
    assert_eq!(
        code_of(&serde_json::to_value(&b).unwrap()),
        Some(ErrorCode::BundleMissingSnapshot)
    );
    let mut no_workflows = sample_bundle().body;
    no_workflows.session.pinned_workflows.clear();
    let b = ExportBundleV1::assemble(
        no_workflows.bundle_id,
        no_workflows.exported_at,
        no_workflows.producer,
        no_workflows.session,
    )
    .unwrap();
    assert_eq!(
        code_of(&serde_json::to_value(&b).unwrap()),
        Some(ErrorCode::BundleMissingPinnedWorkflow)
    );
}

/// An event's inline size is set by its common payloads, not by the two rare large ones
/// (`run_started`, `gap_recorded` are boxed) nor by outputs (shared with the projection), and
/// it holds no dedupeKey text: a loaded log is a vector of events, several per advance
/// (decision D210).
/// decision: D210
#[test]
fn an_event_is_sized_by_its_common_payloads() {
    use workrail_spec::event::{EventData, GapRecorded, RunStarted, SessionEvent};
    let event = std::mem::size_of::<SessionEvent>();
    assert!(
        event <= 168,
        "SessionEvent is {event} bytes inline; 168 when boxed and shared payloads were decided"
    );
    assert!(std::mem::size_of::<EventData>() < std::mem::size_of::<RunStarted>());
    assert!(std::mem::size_of::<EventData>() < std::mem::size_of::<GapRecorded>());
}

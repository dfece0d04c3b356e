//! The model's operations, one scenario at a time: start, rehydrate, advance, replay, fork,
//! blocked attempts, never-stop disclosure, checkpoints and preference changes.
//!
//! Guards against the protocol bugs rewinds and retries expose: a replay that re-runs step
//! selection (and so answers differently once inputs differ), a retry that double-advances, a
//! rehydrate that writes, a fork that reuses a node, a checkpoint that duplicates nodes or
//! advances, a blocked attempt that moves the pending step, and facts attached to the wrong node.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::json;
use workrail_model::derive;
use workrail_model::projections::{RunDag, node_outputs, unresolved_gaps_at_node};
use workrail_model::{
    AckAt, AttemptAt, Command, Model, ModelError, NodeRef, Observation, PreferenceChange, StartRun,
};
use workrail_spec::blocker::BlockerCode;
use workrail_spec::closed::{
    EdgeCauseKind, EdgeKind, GapSeverity, NodeKind, OutputChannel, PreferenceSource, RunStatus,
    WorkflowSourceKind,
};
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::event::{EventData, EventKind, OutputPayload, PreferenceDelta};
use workrail_spec::ids::{ChangeId, NodeId};
use workrail_spec::tools::OutputInput;

fn start_cmd(
    workflow: CompiledWorkflowSnapshotV1,
    baseline: Option<workrail_spec::event::EffectivePreferences>,
) -> Command {
    Command::Start(Box::new(StartRun {
        session_id: sid("s"),
        run_id: rid("r"),
        workflow,
        source_kind: WorkflowSourceKind::Project,
        source_ref: "workflows/test.json".into(),
        session_baseline: baseline,
        preferences: Vec::new(),
        context: Default::default(),
    }))
}

fn node(id: &NodeId) -> NodeRef {
    NodeRef {
        session_id: sid("s"),
        run_id: rid("r"),
        node_id: id.clone(),
    }
}

/// Starts `workflow` and returns the model and the root.
fn started(
    workflow: CompiledWorkflowSnapshotV1,
    baseline: Option<workrail_spec::event::EffectivePreferences>,
) -> (Model, NodeId) {
    let (model, obs) = Model::new(GUIDED)
        .apply(&start_cmd(workflow, baseline))
        .unwrap();
    let Observation::Started { root, .. } = obs else {
        panic!("{obs:?}")
    };
    (model, root)
}

/// Advances `at` with its current ack attempt.
fn advance(model: &Model, at: &NodeId, output: OutputInput) -> (Model, Observation) {
    let attempt_id = model.current_ack_attempt(&node(at)).unwrap();
    model
        .apply(&Command::Advance(AckAt {
            node: node(at),
            attempt_id,
            output,
            preferences: vec![],
            context: None,
        }))
        .unwrap()
}

fn kinds(model: &Model, from: usize) -> Vec<EventKind> {
    model.events(&sid("s")).unwrap()[from..]
        .iter()
        .map(|e| e.kind())
        .collect()
}

fn len(model: &Model) -> usize {
    model.events(&sid("s")).unwrap().len()
}

fn to_node(obs: &Observation) -> NodeId {
    match obs {
        Observation::Advanced { to_node_id, .. } => to_node_id.clone(),
        other => panic!("expected advanced, got {other:?}"),
    }
}

fn dag(model: &Model) -> RunDag {
    model.run_dag(&sid("s"), &rid("r")).unwrap()
}

/// lock: L-EVENT-RUN-STARTED, L-EVENT-NODE-PARENT, L-DEDUPE-NOOP, L-PREF-GLOBAL-COPIED
#[test]
fn start_creates_session_run_and_root_with_the_first_pending_step() {
    let (model, obs) = Model::new(GUIDED)
        .apply(&start_cmd(linear(), None))
        .unwrap();
    let Observation::Started {
        root,
        pending,
        is_complete,
        ..
    } = &obs
    else {
        panic!()
    };
    assert_eq!(root, &derive::root_node_id(&sid("s"), &rid("r")));
    assert_eq!(pending.as_ref().unwrap().step_id, step_id("a"));
    assert!(!is_complete);
    assert_eq!(
        kinds(&model, 0),
        [
            EventKind::SessionCreated,
            EventKind::RunStarted,
            EventKind::NodeCreated
        ]
    );
    let root_node = dag(&model).root().unwrap().clone();
    assert_eq!((root_node.parent, root_node.kind), (None, NodeKind::Step));
    let pin = dag(&model).pin.unwrap();
    assert_eq!(pin.workflow_hash, linear().workflow_hash().unwrap());
    // The global defaults were copied into the session baseline.
    assert_eq!(
        model
            .preference_defaults(&sid("s"))
            .unwrap()
            .session_baseline,
        Some(GUIDED)
    );
    // The same run id again: a no-op with the same observation.
    let (again, obs2) = model.apply(&start_cmd(linear(), None)).unwrap();
    assert_eq!((again, obs2), (model, obs));
}

/// lock: L-PREF-NODE-ATTACHED
#[test]
fn start_preferences_are_attached_to_the_root() {
    let mut cmd = start_cmd(linear(), Some(STOP_ON_DEPS));
    let Command::Start(start) = &mut cmd else {
        unreachable!()
    };
    start.preferences = vec![PreferenceDelta::Autonomy(
        workrail_spec::closed::Autonomy::FullAutoNeverStop,
    )];
    let (model, obs) = Model::new(GUIDED).apply(&cmd).unwrap();
    let Observation::Started { root, .. } = obs else {
        panic!()
    };
    assert_eq!(kinds(&model, 3), [EventKind::PreferencesChanged]);
    let effective = model.effective_preferences(&node(&root)).unwrap();
    assert_eq!(
        effective.autonomy,
        workrail_spec::closed::Autonomy::FullAutoNeverStop
    );
    assert_eq!(
        effective.risk_policy, STOP_ON_DEPS.risk_policy,
        "the rest comes from the baseline"
    );
}

/// lock: L-TOKEN-REHYDRATE-PURE, L-MCP-REHYDRATE-NO-EVENTS
#[test]
fn rehydrate_reports_the_pending_step_and_tipness_without_writing() {
    let (model, root) = started(linear(), None);
    let (same, obs) = model.apply(&Command::Rehydrate(node(&root))).unwrap();
    assert_eq!(same, model);
    assert_eq!(
        obs,
        Observation::Rehydrated {
            node_id: root.clone(),
            pending: Some(workrail_spec::snapshot::PendingStep {
                step_id: step_id("a"),
                loop_path: vec![],
                bindings: Default::default(),
            }),
            is_complete: false,
            is_tip: true,
            preferences: GUIDED,
        }
    );
    let (model, _) = advance(&model, &root, notes("did a"));
    let (same, obs) = model.apply(&Command::Rehydrate(node(&root))).unwrap();
    assert_eq!(same, model);
    assert!(matches!(obs, Observation::Rehydrated { is_tip: false, .. }));
    assert_eq!(
        model.apply(&Command::Rehydrate(node(&nid("nope")))),
        Err(ModelError::UnknownNode(nid("nope")))
    );
}

/// lock: L-EVENT-ADVANCE-RECORDED, L-EVENT-ADVANCED-HAS-NODE-EDGE, L-DAG-ACKED-STEP-EDGE, L-OUTPUT-ORDER, L-OUTPUT-ID-DERIVED
#[test]
fn a_fresh_attempt_creates_a_child_with_its_edge_outputs_and_record() {
    let (model, root) = started(linear(), None);
    let before = len(&model);
    let attempt = model.current_ack_attempt(&node(&root)).unwrap();
    assert_eq!(
        attempt,
        derive::ack_attempt_id(&sid("s"), &rid("r"), &root, 0)
    );
    let output = OutputInput {
        notes_markdown: Some("did a".into()),
        artifacts: vec![
            artifact(json!({"kind": "wr.b"})),
            artifact(json!({"kind": "wr.a"})),
            artifact(json!({"kind": "wr.a"})),
        ],
    };
    let (model, obs) = model
        .apply(&Command::Advance(AckAt {
            node: node(&root),
            attempt_id: attempt.clone(),
            output,
            preferences: vec![],
            context: None,
        }))
        .unwrap();
    let child = derive::child_node_id(&sid("s"), &rid("r"), &attempt);
    assert_eq!(to_node(&obs), child);
    assert!(
        matches!(&obs, Observation::Advanced { pending: Some(p), is_complete: false, .. } if p.step_id == step_id("b"))
    );
    assert_eq!(
        kinds(&model, before),
        [
            EventKind::NodeCreated,
            EventKind::EdgeCreated,
            EventKind::NodeOutputAppended,
            EventKind::NodeOutputAppended,
            EventKind::NodeOutputAppended,
            EventKind::AdvanceRecorded,
        ]
    );
    let events = model.events(&sid("s")).unwrap();
    // The edge's cause names the advance_recorded event of the same plan.
    let EventData::EdgeCreated(edge) = events[before + 1].data() else {
        panic!()
    };
    assert_eq!(
        (edge.edge_kind, edge.cause.kind),
        (EdgeKind::AckedStep, EdgeCauseKind::IdempotentReplay)
    );
    assert_eq!(&edge.cause.event_id, events[before + 5].event_id());
    assert_eq!(
        events[before + 5].scope().node_id(),
        Some(&root),
        "advance_recorded is on the attempted node"
    );
    // Outputs sit on the new node: recap first, then the two distinct artifacts by sha256.
    let outputs = node_outputs(events, &rid("r"), &child);
    let channels: Vec<_> = outputs.history.iter().map(|o| o.channel).collect();
    assert_eq!(
        channels,
        [
            OutputChannel::Recap,
            OutputChannel::Artifact,
            OutputChannel::Artifact
        ]
    );
    let shas: Vec<_> = outputs
        .history
        .iter()
        .filter_map(|o| match &o.payload {
            OutputPayload::ArtifactRef { sha256, .. } => Some(sha256.clone()),
            OutputPayload::Notes { .. } => None,
        })
        .collect();
    assert!(shas[0] < shas[1]);
    assert_eq!(
        outputs.history[0].output_id,
        derive::output_id(&sid("s"), &attempt, "recap")
    );
    // The next current attempt is a new one.
    assert_eq!(
        model.current_ack_attempt(&node(&root)).unwrap(),
        derive::ack_attempt_id(&sid("s"), &rid("r"), &root, 1)
    );
    assert_eq!(
        model.preferred_tip(&sid("s"), &rid("r")).unwrap().node_id,
        child
    );
}

/// lock: L-TOKEN-ACK-IDEMPOTENT, L-TOKEN-REPLAY-FACTS, L-EVENT-ADVANCE-ATTEMPT-KEY
#[test]
fn replaying_an_attempt_returns_the_recorded_outcome_and_appends_nothing() {
    let (model, root) = started(linear(), None);
    let attempt_id = model.current_ack_attempt(&node(&root)).unwrap();
    let cmd = |output| {
        Command::Advance(AckAt {
            node: node(&root),
            attempt_id: attempt_id.clone(),
            output,
            preferences: vec![],
            context: None,
        })
    };
    let (model, first) = model.apply(&cmd(notes("first"))).unwrap();
    let child = to_node(&first);
    let (model, _) = advance(&model, &child, notes("then b")); // the run moves on
    for output in [notes("first"), notes("a different recap"), no_output()] {
        let (same, again) = model.apply(&cmd(output)).unwrap();
        assert_eq!(again, first);
        assert_eq!(same, model);
    }
    // An attempt that was never current is refused, without effect.
    let bogus = derive::ack_attempt_id(&sid("s"), &rid("r"), &root, 7);
    let refused = model.apply(&Command::Advance(AckAt {
        node: node(&root),
        attempt_id: bogus.clone(),
        output: no_output(),
        preferences: vec![],
        context: None,
    }));
    assert_eq!(refused, Err(ModelError::UnknownAttempt(bogus)));
    // An attempt of another node is not an attempt of this one.
    let (_, obs) = model.apply(&Command::Rehydrate(node(&child))).unwrap();
    assert!(matches!(obs, Observation::Rehydrated { is_tip: false, .. }));
    let foreign = derive::ack_attempt_id(&sid("s"), &rid("r"), &child, 1);
    assert!(
        model
            .apply(&Command::Advance(AckAt {
                node: node(&root),
                attempt_id: foreign,
                output: no_output(),
                preferences: vec![],
                context: None,
            }))
            .is_err()
    );
}

/// lock: L-DAG-NON-TIP-AUTO-FORK, L-DAG-NO-FORK-EDGE-KIND, L-TOKEN-ACK-ATTEMPTS
#[test]
fn a_fresh_attempt_at_a_node_with_children_forks_a_sibling() {
    let (model, root) = started(linear(), None);
    let (model, first) = advance(&model, &root, notes("one"));
    let before = len(&model);
    let (model, second) = advance(&model, &root, notes("two"));
    let (a, b) = (to_node(&first), to_node(&second));
    assert_ne!(a, b);
    let dag = dag(&model);
    assert_eq!(
        dag.node(&root).unwrap().children,
        vec![a.clone(), b.clone()]
    );
    let EventData::EdgeCreated(edge) = model.events(&sid("s")).unwrap()[before + 1].data() else {
        panic!()
    };
    assert_eq!(
        (edge.edge_kind, edge.cause.kind, &edge.to_node_id),
        (EdgeKind::AckedStep, EdgeCauseKind::NonTipAdvance, &b)
    );
    // Both branches hold the same pending step: forking does not advance twice.
    assert!(
        matches!(&second, Observation::Advanced { pending: Some(p), .. } if p.step_id == step_id("b"))
    );
    // The latest branch is the preferred tip.
    assert_eq!(
        model.preferred_tip(&sid("s"), &rid("r")).unwrap().node_id,
        b
    );
}

/// lock: L-REASON-BLOCKING-MODES, L-EVENT-ATTEMPTS-APPENDABLE, L-TOKEN-REPLAY-FACTS
#[test]
fn a_blocked_attempt_keeps_the_pending_step_and_the_retry_is_a_fresh_attempt() {
    let wf = workflow(
        vec![
            compiled_step("report", Some("wr.contracts.findings")),
            compiled_step("after", None),
        ],
        vec![s("report"), s("after")],
        vec![],
    );
    let (model, root) = started(wf, None);
    let blocked_attempt = model.current_ack_attempt(&node(&root)).unwrap();
    let before = len(&model);
    let (model, obs) = advance(&model, &root, notes("forgot the findings"));
    let Observation::Blocked {
        blockers, pending, ..
    } = &obs
    else {
        panic!("{obs:?}")
    };
    assert_eq!(
        blockers.blockers()[0].code,
        BlockerCode::MissingRequiredOutput
    );
    assert_eq!(pending.as_ref().unwrap().step_id, step_id("report"));
    assert_eq!(
        kinds(&model, before),
        [EventKind::AdvanceRecorded],
        "blocked: no node, no gap, no output"
    );
    assert_eq!(
        model.run_status(&sid("s"), &rid("r")),
        Some(RunStatus::InProgress)
    );
    // Retry with a fresh attempt and the artifact: advanced.
    let findings = OutputInput {
        notes_markdown: None,
        artifacts: vec![artifact(json!({"kind": "wr.findings"}))],
    };
    let (model, retried) = advance(&model, &root, findings.clone());
    assert!(matches!(retried, Observation::Advanced { .. }));
    // Replaying the blocked attempt, even with the artifact now, returns the recorded block.
    let (same, replay) = model
        .apply(&Command::Advance(AckAt {
            node: node(&root),
            attempt_id: blocked_attempt,
            output: findings,
            preferences: vec![],
            context: None,
        }))
        .unwrap();
    assert_eq!((same, replay), (model, obs));
}

/// lock: L-REASON-NEVER-STOP, L-STATUS-BLOCKED
#[test]
fn never_stop_discloses_a_critical_gap_on_the_new_node_and_advances() {
    let wf = workflow(
        vec![
            compiled_step("report", Some("wr.contracts.findings")),
            compiled_step("after", None),
        ],
        vec![s("report"), s("after")],
        vec![],
    );
    let (model, root) = started(wf, Some(NEVER_STOP));
    let before = len(&model);
    let (model, obs) = advance(&model, &root, notes("no findings"));
    let child = to_node(&obs);
    assert_eq!(
        kinds(&model, before),
        [
            EventKind::NodeCreated,
            EventKind::EdgeCreated,
            EventKind::NodeOutputAppended,
            EventKind::GapRecorded,
            EventKind::AdvanceRecorded
        ]
    );
    let gaps = unresolved_gaps_at_node(model.events(&sid("s")).unwrap(), &rid("r"), &child);
    assert_eq!(gaps.len(), 1);
    assert_eq!(gaps[0].severity, GapSeverity::Critical);
    // Never-stop: in progress. Switching the tip to guided makes the same gap block.
    assert_eq!(
        model.run_status(&sid("s"), &rid("r")),
        Some(RunStatus::InProgress)
    );
    let change = PreferenceChange {
        node: node(&child),
        change_id: ChangeId::parse("prefchg_g").unwrap(),
        source: PreferenceSource::User,
        delta: vec![PreferenceDelta::Autonomy(
            workrail_spec::closed::Autonomy::Guided,
        )],
    };
    let (model, _) = model.apply(&Command::ChangePreferences(change)).unwrap();
    assert_eq!(
        model.run_status(&sid("s"), &rid("r")),
        Some(RunStatus::Blocked)
    );
}

/// lock: L-LOOP-LIMIT-ERROR, L-REASON-UNEXPECTED
#[test]
fn a_loop_limit_blocks_and_records_a_critical_unexpected_gap_on_the_attempted_node() {
    let (model, root) = started(looping(1), None);
    let (model, obs) = advance(&model, &root, no_output()); // intro
    let (model, obs) = advance(&model, &to_node(&obs), no_output()); // pass@0::work
    let decide = to_node(&obs);
    let before = len(&model);
    let (model, obs) = advance(&model, &decide, loop_decision("pass", "continue"));
    let Observation::Blocked { blockers, .. } = &obs else {
        panic!("{obs:?}")
    };
    assert_eq!(blockers.blockers()[0].code, BlockerCode::InvariantViolation);
    assert_eq!(
        kinds(&model, before),
        [EventKind::GapRecorded, EventKind::AdvanceRecorded]
    );
    let gaps = unresolved_gaps_at_node(model.events(&sid("s")).unwrap(), &rid("r"), &decide);
    assert_eq!((gaps.len(), gaps[0].severity), (1, GapSeverity::Critical));
    let (model, obs) = advance(&model, &decide, loop_decision("pass", "stop"));
    let (model, obs) = advance(&model, &to_node(&obs), no_output()); // outro
    assert!(matches!(
        obs,
        Observation::Advanced {
            is_complete: true,
            pending: None,
            ..
        }
    ));
    assert_eq!(
        model.run_status(&sid("s"), &rid("r")),
        Some(RunStatus::CompleteWithGaps)
    );
    assert_eq!(
        model.apply(&Command::Advance(AckAt {
            node: node(&to_node(&obs)),
            attempt_id: model.current_ack_attempt(&node(&to_node(&obs))).unwrap(),
            output: no_output(),
            preferences: vec![],
            context: None,
        })),
        Err(ModelError::NothingPending(to_node(&obs)))
    );
}

/// lock: L-DAG-CHECKPOINT-EDGE, L-DAG-CHECKPOINT-NO-ADVANCE, L-TOKEN-CHECKPOINT-IDEMPOTENT
#[test]
fn checkpoints_add_a_checkpoint_node_without_advancing_and_replay_safely() {
    let (model, root) = started(linear(), None);
    let attempt_id = model.current_checkpoint_attempt(&node(&root)).unwrap();
    assert_eq!(
        attempt_id,
        derive::checkpoint_attempt_id(&sid("s"), &rid("r"), &root, 0)
    );
    let cmd = Command::Checkpoint(AttemptAt {
        node: node(&root),
        attempt_id: attempt_id.clone(),
        output: notes("progress off-script"),
    });
    let before = len(&model);
    let (model, obs) = model.apply(&cmd).unwrap();
    let Observation::Checkpointed {
        checkpoint_node_id: k,
        ..
    } = obs.clone()
    else {
        panic!()
    };
    assert_eq!(
        kinds(&model, before),
        [
            EventKind::NodeCreated,
            EventKind::EdgeCreated,
            EventKind::NodeOutputAppended
        ]
    );
    let dag = dag(&model);
    let checkpoint = dag.node(&k).unwrap();
    assert_eq!(
        (checkpoint.kind, checkpoint.parent.as_ref()),
        (NodeKind::Checkpoint, Some(&root))
    );
    assert_eq!(
        checkpoint.snapshot_ref,
        dag.node(&root).unwrap().snapshot_ref,
        "no advancement"
    );
    let edge = dag.edges.last().unwrap();
    assert_eq!(
        (edge.kind, edge.cause),
        (EdgeKind::Checkpoint, EdgeCauseKind::CheckpointCreated)
    );
    assert_eq!(
        node_outputs(model.events(&sid("s")).unwrap(), &rid("r"), &k).current_recap_notes(),
        Some("progress off-script")
    );
    // Replays: nothing duplicated, same observation.
    for _ in 0..3 {
        let (same, again) = model.apply(&cmd).unwrap();
        assert_eq!((&same, &again), (&model, &obs));
    }
    assert_eq!(
        model.current_checkpoint_attempt(&node(&root)).unwrap(),
        derive::checkpoint_attempt_id(&sid("s"), &rid("r"), &root, 1)
    );
    // The checkpoint is the preferred tip until the run advances; advancing is not a fork.
    assert_eq!(
        model.preferred_tip(&sid("s"), &rid("r")).unwrap().node_id,
        k
    );
    let before = len(&model);
    let (model, advanced) = advance(&model, &root, notes("a done"));
    let EventData::EdgeCreated(edge) = model.events(&sid("s")).unwrap()[before + 1].data() else {
        panic!()
    };
    assert_eq!(edge.cause.kind, EdgeCauseKind::IdempotentReplay);
    assert_eq!(
        model.preferred_tip(&sid("s"), &rid("r")).unwrap().node_id,
        to_node(&advanced)
    );
}

/// lock: L-EVENT-PREFS-CHANGED, L-PREF-NODE-ATTACHED, L-DEDUPE-NOOP
#[test]
fn preference_changes_are_node_attached_deduped_and_validated() {
    let (model, root) = started(linear(), None);
    let change = |id: &str, delta| PreferenceChange {
        node: node(&root),
        change_id: ChangeId::parse(&format!("prefchg_{id}")).unwrap(),
        source: PreferenceSource::User,
        delta,
    };
    let c1 = Command::ChangePreferences(change(
        "one",
        vec![PreferenceDelta::RiskPolicy(
            workrail_spec::closed::RiskPolicy::Aggressive,
        )],
    ));
    let (model, obs) = model.apply(&c1).unwrap();
    let Observation::PreferencesChanged { effective, .. } = obs.clone() else {
        panic!()
    };
    assert_eq!(
        effective.risk_policy,
        workrail_spec::closed::RiskPolicy::Aggressive
    );
    assert_eq!(effective.autonomy, GUIDED.autonomy);
    assert_eq!(model.effective_preferences(&node(&root)), Some(effective));
    let (same, again) = model.apply(&c1).unwrap();
    assert_eq!((same, again), (model.clone(), obs));
    // Descendants inherit; an invalid delta (duplicate key) is refused without effect.
    let (model, adv) = advance(&model, &root, no_output());
    assert_eq!(
        model.effective_preferences(&node(&to_node(&adv))),
        Some(effective)
    );
    let dup = vec![PreferenceDelta::RiskPolicy(workrail_spec::closed::RiskPolicy::Balanced); 2];
    assert!(matches!(
        model.apply(&Command::ChangePreferences(change("two", dup))),
        Err(ModelError::Event(_))
    ));
    assert!(matches!(
        model.apply(&Command::ChangePreferences(change("three", vec![]))),
        Err(ModelError::Event(_))
    ));
}

#[test]
fn a_run_walks_to_completion_and_status_follows_the_tip() {
    let (mut model, mut at) = started(linear(), None);
    for step in ["a", "b", "c"] {
        assert_eq!(
            model.run_status(&sid("s"), &rid("r")),
            Some(RunStatus::InProgress),
            "{step}"
        );
        let (next, obs) = advance(&model, &at, notes(step));
        model = next;
        at = to_node(&obs);
    }
    assert_eq!(
        model.run_status(&sid("s"), &rid("r")),
        Some(RunStatus::Complete)
    );
    assert_eq!(len(&model), 3 + 3 * 4);
}

/// Preferences sent with an ack (D43) and the recommendation warning (D44), in the model: the
/// ack is judged under the changed snapshot; the change lands on the new node when it advances
/// and on the attempted node (before its record) when it is blocked, each with a warning output
/// when the new snapshot exceeds the recommendation; a delta that changes nothing records
/// nothing; a later change on a node never reaches its existing children.
/// lock: L-PREF-NODE-ATTACHED, L-PREF-WARNINGS
#[test]
fn an_acks_preferences_attach_where_the_judgement_lands() {
    use workrail_spec::closed::{Autonomy, RiskPolicy};
    use workrail_spec::compiled::Recommendations;
    use workrail_spec::preferences::PREFERENCE_WARNING_CONTENT_TYPE;
    let mut wf = workflow(
        vec![
            compiled_step("report", Some("wr.contracts.findings")),
            compiled_step("after", None),
        ],
        vec![s("report"), s("after")],
        vec![],
    );
    wf.body.recommendations = Recommendations {
        recommended_autonomy: Some(Autonomy::FullAutoStopOnUserDeps),
        recommended_risk_policy: None,
    };
    let wf = CompiledWorkflowSnapshotV1::new(wf.body).unwrap();
    let (model, root) = started(wf, None);
    let ack_with = |model: &Model, at: &NodeId, output, preferences| {
        let attempt_id = model.current_ack_attempt(&node(at)).unwrap();
        model
            .apply(&Command::Advance(AckAt {
                node: node(at),
                attempt_id,
                output,
                preferences,
                context: None,
            }))
            .unwrap()
    };
    let is_warning = |e: &workrail_spec::event::SessionEvent| {
        matches!(e.data(), EventData::NodeOutputAppended(o) if matches!(&o.payload,
            OutputPayload::ArtifactRef { content_type, .. } if content_type == PREFERENCE_WARNING_CONTENT_TYPE))
    };
    let prefs_at = |model: &Model, at: &NodeId| model.effective_preferences(&node(at)).unwrap();

    // Blocked in guided with a change to aggressive (not above this recommendation): the change
    // is recorded on the root, before the record, and judged the attempt.
    let before = len(&model);
    let (model, obs) = ack_with(
        &model,
        &root,
        no_output(),
        vec![PreferenceDelta::RiskPolicy(RiskPolicy::Aggressive)],
    );
    assert!(matches!(obs, Observation::Blocked { .. }), "{obs:?}");
    assert_eq!(
        kinds(&model, before),
        [EventKind::PreferencesChanged, EventKind::AdvanceRecorded]
    );
    assert_eq!(
        prefs_at(&model, &root),
        prefs(Autonomy::Guided, RiskPolicy::Aggressive)
    );
    // Blocked again, now switching to never-stop: never-stop does not block, so it advances,
    // and the change (above the recommendation) lands on the child with its warning.
    let before = len(&model);
    let (model, obs) = ack_with(
        &model,
        &root,
        no_output(),
        vec![PreferenceDelta::Autonomy(Autonomy::FullAutoNeverStop)],
    );
    let child = to_node(&obs);
    let plan = &model.events(&sid("s")).unwrap()[before..];
    assert_eq!(
        plan.iter()
            .filter(|e| is_warning(e) && e.scope().node_id() == Some(&child))
            .count(),
        1
    );
    assert!(
        plan.iter()
            .any(|e| matches!(e.data(), EventData::PreferencesChanged(p)
        if p.effective == prefs(Autonomy::FullAutoNeverStop, RiskPolicy::Aggressive))
                && e.scope().node_id() == Some(&child))
    );
    assert_eq!(
        prefs_at(&model, &root),
        prefs(Autonomy::Guided, RiskPolicy::Aggressive),
        "the advancing change stays on the new node"
    );
    // A later blocked change on the root (guided: the findings are still missing) leaves the
    // existing child alone.
    let (model, obs) = ack_with(
        &model,
        &root,
        no_output(),
        vec![PreferenceDelta::RiskPolicy(RiskPolicy::Conservative)],
    );
    assert!(matches!(obs, Observation::Blocked { .. }), "{obs:?}");
    assert_eq!(prefs_at(&model, &root), GUIDED);
    assert_eq!(
        prefs_at(&model, &child),
        prefs(Autonomy::FullAutoNeverStop, RiskPolicy::Aggressive)
    );
    // A delta equal to the snapshot records nothing.
    let before = len(&model);
    let (model, _) = ack_with(
        &model,
        &root,
        no_output(),
        vec![PreferenceDelta::Autonomy(Autonomy::Guided)],
    );
    assert_eq!(kinds(&model, before), [EventKind::AdvanceRecorded]);
}

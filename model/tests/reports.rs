//! User-only dependency reports (decision D41) and divergence markers (decision D42) at an
//! acknowledgement, from the lock text.
//!
//! Guards against a stop request that silently advances (a malformed or unmarked choice), a
//! never-stop disclosure that stays open after the user supplied what was needed, and divergence
//! markers recorded where no work was completed (a blocked attempt) or recorded although invalid.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::{Value, json};
use workrail_model::projections::unresolved_gaps_in_run;
use workrail_model::{AckAt, Command, Model, NodeRef, Observation, StartRun};
use workrail_spec::blocker::{BlockerCode, BlockerPointer, ReasonDetails};
use workrail_spec::closed::{
    Autonomy, DivergenceReason, GapSeverity, NonAssumableChoiceKind, RiskPolicy,
    UserOnlyDependencyReason, WorkflowSourceKind,
};
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::event::{EventData, GapResolution};
use workrail_spec::ids::NodeId;
use workrail_spec::reason::{ContractViolationReason, GapReason};
use workrail_spec::tools::OutputInput;

/// `choose` marks `scope_boundary` non-assumable; `next` and `last` mark nothing.
fn choosing() -> CompiledWorkflowSnapshotV1 {
    let mut choose = compiled_step("choose", None);
    choose.non_assumable_choices = vec![NonAssumableChoiceKind::ScopeBoundary];
    workflow(
        vec![
            choose,
            compiled_step("next", Some("wr.contracts.findings")),
            compiled_step("last", None),
        ],
        vec![s("choose"), s("next"), s("last")],
        vec![],
    )
}

fn node(id: &NodeId) -> NodeRef {
    NodeRef {
        session_id: sid("s"),
        run_id: rid("r"),
        node_id: id.clone(),
    }
}

fn started(autonomy: Autonomy) -> (Model, NodeId) {
    let (model, obs) = Model::new(prefs(autonomy, RiskPolicy::Conservative))
        .apply(&Command::Start(Box::new(StartRun {
            session_id: sid("s"),
            run_id: rid("r"),
            workflow: choosing(),
            source_kind: WorkflowSourceKind::Project,
            source_ref: "workflows/test.json".into(),
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

fn advance(model: &Model, at: &NodeId, artifacts: Vec<Value>) -> (Model, Observation) {
    let attempt_id = model.current_ack_attempt(&node(at)).unwrap();
    let output = OutputInput {
        notes_markdown: None,
        artifacts: artifacts.into_iter().map(artifact).collect(),
    };
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

fn blockers(obs: &Observation) -> Vec<(BlockerCode, BlockerPointer, Option<ReasonDetails>)> {
    match obs {
        Observation::Blocked { blockers, .. } => blockers
            .blockers()
            .iter()
            .map(|b| (b.code, b.pointer.clone(), b.details.clone()))
            .collect(),
        other => panic!("expected a block, got {other:?}"),
    }
}

fn moved_to(obs: &Observation) -> NodeId {
    match obs {
        Observation::Advanced { to_node_id, .. } => to_node_id.clone(),
        other => panic!("expected an advance, got {other:?}"),
    }
}

fn choice(choice: &str, status: Option<&str>) -> Value {
    let mut a = json!({"kind": "wr.user_only_dependency", "reason": "needs_user_choice",
        "summary": "Which modules are in scope?", "nonAssumableChoice": choice});
    if let Some(status) = status {
        a["status"] = json!(status);
    }
    a
}

/// lock: L-GAP-NON-ASSUMABLE-CHOICE, L-GAP-USER-ONLY-REASONS, L-REASON-BLOCKING-MODES
#[test]
fn a_needed_report_blocks_and_only_a_marked_choice_is_a_choice() {
    let (model, root) = started(Autonomy::Guided);
    let step = BlockerPointer::WorkflowStep {
        step_id: step_id("choose"),
    };
    let (model, obs) = advance(&model, &root, vec![choice("scope_boundary", None)]);
    assert_eq!(
        blockers(&obs),
        [(
            BlockerCode::UserOnlyDependency,
            step.clone(),
            Some(ReasonDetails::NonAssumableChoice {
                choice: NonAssumableChoiceKind::ScopeBoundary
            })
        )]
    );
    // A choice the step does not mark is not the user's: an invalid report, which blocks too.
    let invalid = BlockerPointer::OutputContract {
        contract_ref: "wr.contracts.user_only_dependency".into(),
    };
    let (model, obs) = advance(&model, &root, vec![choice("irreversible_action", None)]);
    assert_eq!(
        blockers(&obs),
        [(BlockerCode::InvalidRequiredOutput, invalid.clone(), None)]
    );
    // Malformed: a choice named on another reason.
    let (model, obs) = advance(
        &model,
        &root,
        vec![
            json!({"kind": "wr.user_only_dependency", "reason": "needs_user_approval",
            "summary": "Approve.", "nonAssumableChoice": "scope_boundary"}),
        ],
    );
    assert_eq!(
        blockers(&obs),
        [(BlockerCode::InvalidRequiredOutput, invalid, None)]
    );
    // Every other reason blocks without details; a supplied one does not block.
    let (model, obs) = advance(
        &model,
        &root,
        vec![
            json!({"kind": "wr.user_only_dependency", "reason": "needs_user_secret_or_token",
            "summary": "A token."}),
        ],
    );
    assert_eq!(
        blockers(&obs),
        [(BlockerCode::UserOnlyDependency, step, None)]
    );
    let (_, obs) = advance(
        &model,
        &root,
        vec![choice("scope_boundary", Some("supplied"))],
    );
    moved_to(&obs);
}

/// lock: L-REASON-NEVER-STOP, L-GAP-RESOLVED-PROJECTION
#[test]
fn never_stop_discloses_a_needed_report_and_a_supplied_one_resolves_it() {
    let (model, root) = started(Autonomy::FullAutoNeverStop);
    let approval = |status: &str| {
        json!({"kind": "wr.user_only_dependency", "reason": "needs_user_approval",
            "summary": "The release needs sign-off.", "status": status})
    };
    let (model, obs) = advance(&model, &root, vec![approval("needed")]);
    let chosen = moved_to(&obs);
    let open = unresolved_gaps_in_run(model.events(&sid("s")).unwrap(), &rid("r"));
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].severity, GapSeverity::Critical);
    assert_eq!(
        open[0].reason,
        GapReason::UserOnlyDependency(UserOnlyDependencyReason::NeedsUserApproval)
    );
    // A supplied report of another reason resolves nothing; of the same reason, it resolves the
    // disclosure on its branch (the step's findings contract is satisfied beside it).
    let (model, obs) = advance(
        &model,
        &chosen,
        vec![
            json!({"kind": "wr.user_only_dependency", "reason": "needs_user_artifact",
                "summary": "The spec arrived.", "status": "supplied"}),
            approval("supplied"),
            json!({"kind": "wr.findings"}),
        ],
    );
    let next = moved_to(&obs);
    let open = unresolved_gaps_in_run(model.events(&sid("s")).unwrap(), &rid("r"));
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(open[0].severity, GapSeverity::Info);
    assert_eq!(open[0].node_id, next);
    assert!(matches!(open[0].resolution, GapResolution::Resolves { .. }));
}

/// lock: L-EVENT-DIVERGENCE, L-AUTHOR-DIVERGENCE-ARTIFACT
#[test]
fn divergences_are_recorded_on_the_new_node_and_invalid_ones_are_warnings() {
    let (model, root) = started(Autonomy::Guided);
    let marker = json!({"kind": "workflow_divergence", "reason": "efficiency_skip",
        "summary": "Skipped the survey.", "relatedStepId": "choose"});
    let unknown_step = json!({"kind": "workflow_divergence", "reason": "safety_stop",
        "summary": "Stopped.", "relatedStepId": "nowhere"});
    // A blocked attempt drops its markers.
    let (model, obs) = advance(
        &model,
        &root,
        vec![marker.clone(), choice("scope_boundary", None)],
    );
    assert_eq!(blockers(&obs).len(), 1);
    let divergences = |model: &Model| {
        model
            .events(&sid("s"))
            .unwrap()
            .iter()
            .filter_map(|e| match e.data() {
                EventData::DivergenceRecorded(d) => Some((e.scope().node_id().cloned(), d.reason)),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert!(divergences(&model).is_empty());
    let (model, obs) = advance(&model, &root, vec![marker, unknown_step]);
    let chosen = moved_to(&obs);
    assert_eq!(
        divergences(&model),
        [(Some(chosen), DivergenceReason::EfficiencySkip)]
    );
    let open = unresolved_gaps_in_run(model.events(&sid("s")).unwrap(), &rid("r"));
    assert_eq!(
        open.iter()
            .map(|g| (g.severity, g.reason))
            .collect::<Vec<_>>(),
        [(
            GapSeverity::Warning,
            GapReason::ContractViolation(ContractViolationReason::InvalidRequiredOutput)
        )]
    );
}

/// lock: L-AUTHOR-DIVERGENCE-ARTIFACT, L-REASON-NEVER-STOP
#[test]
fn a_required_marker_output_is_judged_whole() {
    let mut wf = workflow(
        vec![compiled_step("deviate", None), compiled_step("last", None)],
        vec![s("deviate"), s("last")],
        vec![],
    );
    wf.body
        .contracts
        .push(workrail_spec::compiled::CompiledContract {
            contract_ref: "wr.contracts.workflow_divergence".into(),
            artifact_kind: "workflow_divergence".into(),
            schema: json!({"type": "object"}),
            example: json!({"kind": "workflow_divergence"}),
        });
    wf.body
        .contracts
        .sort_by(|a, b| a.contract_ref.cmp(&b.contract_ref));
    wf.body.steps[0].output =
        compiled_step("deviate", Some("wr.contracts.workflow_divergence")).output;
    let (model, obs) = Model::new(prefs(Autonomy::FullAutoNeverStop, RiskPolicy::Conservative))
        .apply(&Command::Start(Box::new(StartRun {
            session_id: sid("s"),
            run_id: rid("r"),
            workflow: wf,
            source_kind: WorkflowSourceKind::Project,
            source_ref: "workflows/test.json".into(),
            session_baseline: None,
            preferences: Vec::new(),
            context: Default::default(),
        })))
        .unwrap();
    let Observation::Started { root, .. } = obs else {
        panic!("{obs:?}")
    };
    let valid = json!({"kind": "workflow_divergence", "reason": "efficiency_skip",
        "summary": "Skipped the survey."});
    let invalid =
        json!({"kind": "workflow_divergence", "reason": "efficiency_skip", "summary": ""});
    // Never-stop discloses the invalid required output and advances, recording no marker.
    let (model, obs) = advance(&model, &root, vec![valid.clone(), invalid]);
    moved_to(&obs);
    let recorded = |model: &Model| {
        model
            .events(&sid("s"))
            .unwrap()
            .iter()
            .filter(|e| matches!(e.data(), EventData::DivergenceRecorded(_)))
            .count()
    };
    assert_eq!(recorded(&model), 0);
    let open = unresolved_gaps_in_run(model.events(&sid("s")).unwrap(), &rid("r"));
    assert_eq!(
        open.iter()
            .map(|g| (g.severity, g.reason))
            .collect::<Vec<_>>(),
        [(
            GapSeverity::Critical,
            GapReason::ContractViolation(ContractViolationReason::InvalidRequiredOutput)
        )]
    );
    // A valid output is recorded.
    let (model, obs) = advance(&model, &root, vec![valid]);
    moved_to(&obs);
    assert_eq!(recorded(&model), 1);
}

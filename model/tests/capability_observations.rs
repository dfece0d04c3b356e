//! Capability observations at an acknowledgement (decisions D27, D39, D40): how artifacts become
//! observations with provenance, which ones unlock a required capability, and how a strong
//! `available` observation resolves what was disclosed.
//!
//! Guards against "agent said so" becoming enforcement-grade truth: a claim that unlocks, a
//! probe that accepts a claim, an `unavailable` observation judged as merely unknown, and a
//! disclosure that stays open after the capability was shown available.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use serde_json::{Value, json};
use workrail_model::capabilities::{
    OBSERVATION_CONTRACT_REF, ObservationReading, PROBE_TEMPLATE_ID, read_observations,
};
use workrail_model::projections::{capability_unlocked, unresolved_gaps_in_run};
use workrail_model::{AckAt, Command, Model, NodeRef, Observation, StartRun};
use workrail_spec::blocker::{BlockerCode, ReasonDetails};
use workrail_spec::closed::{
    AttemptContext, AttemptFailureCode, Autonomy, Capability, CapabilityRequirement,
    CapabilityStatus, ClaimValue, ClaimedBy, EnforcementGrade, GapSeverity, ProbeResult,
    RiskPolicy, WorkflowSourceKind,
};
use workrail_spec::compiled::{CompiledContract, CompiledWorkflowSnapshotV1};
use workrail_spec::event::{EventData, GapResolution, ProvenanceDetail};
use workrail_spec::ids::NodeId;
use workrail_spec::reason::{CapabilityMissingReason, ContractViolationReason, GapReason};
use workrail_spec::tools::OutputInput;

const PROBE: &str = "capability_probe_web_browsing";

fn observation_contract() -> CompiledContract {
    CompiledContract {
        contract_ref: OBSERVATION_CONTRACT_REF.into(),
        artifact_kind: "wr.capability_observation".into(),
        schema: json!({"type": "object"}),
        example: json!({"kind": "wr.capability_observation"}),
    }
}

/// A probe of the required `web_browsing`, then two steps that depend on it; `delegation` is
/// preferred.
fn probed() -> CompiledWorkflowSnapshotV1 {
    let mut wf = workflow(
        vec![
            compiled_step(PROBE, None),
            compiled_step("browse", None),
            compiled_step("last", None),
        ],
        vec![s(PROBE), s("browse"), s("last")],
        vec![],
    );
    wf.body.contracts.push(observation_contract());
    wf.body
        .contracts
        .sort_by(|a, b| a.contract_ref.cmp(&b.contract_ref));
    wf.body.steps[0].output = compiled_step(PROBE, Some(OBSERVATION_CONTRACT_REF)).output;
    wf.body
        .capabilities
        .insert(Capability::WebBrowsing, CapabilityRequirement::Required);
    wf.body
        .capabilities
        .insert(Capability::Delegation, CapabilityRequirement::Preferred);
    wf
}

fn observed(capability: &str, status: &str, extra: Value) -> serde_json::Map<String, Value> {
    let mut a = artifact(
        json!({"kind": "wr.capability_observation", "capability": capability,
        "status": status, "evidence": "tried it"}),
    );
    if let Value::Object(more) = extra {
        a.extend(more);
    }
    a
}

fn with(artifacts: Vec<serde_json::Map<String, Value>>) -> OutputInput {
    OutputInput {
        notes_markdown: None,
        artifacts,
    }
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
            workflow: probed(),
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

fn moved_to(obs: &Observation) -> NodeId {
    match obs {
        Observation::Advanced { to_node_id, .. } => to_node_id.clone(),
        other => panic!("expected an advance, got {other:?}"),
    }
}

fn blocker_codes(obs: &Observation) -> Vec<BlockerCode> {
    match obs {
        Observation::Blocked { blockers, .. } => {
            blockers.blockers().iter().map(|b| b.code).collect()
        }
        other => panic!("expected a block, got {other:?}"),
    }
}

fn details_web() -> Option<ReasonDetails> {
    Some(ReasonDetails::Capability {
        capability: Capability::WebBrowsing,
    })
}

/// lock: L-CAP-PROVENANCE, L-CAP-PROVENANCE-DETAIL, L-CAP-FAILURE-CODE
#[test]
fn artifacts_become_observations_with_the_provenance_of_their_basis_and_step() {
    let valid = |step: &str, a| match read_observations(&step_id(step), &with(vec![a])).remove(0) {
        ObservationReading::Valid(o) => o,
        ObservationReading::Invalid(why) => panic!("{why}"),
    };
    // An attempt of the probed capability on its probe step: probe_step, strong.
    let probe = valid(PROBE, observed("web_browsing", "available", json!({})));
    assert_eq!(
        probe.provenance.enforcement_grade(),
        EnforcementGrade::Strong
    );
    assert_eq!(
        probe.provenance.detail,
        ProvenanceDetail::ProbeStep {
            probe_template_id: PROBE_TEMPLATE_ID.into(),
            probe_step_id: step_id(PROBE),
            result: ProbeResult::Success,
        }
    );
    // Any other attempt: attempted_use in a workflow step; a failure without a code is unknown.
    let failed = valid("browse", observed("web_browsing", "unavailable", json!({})));
    assert_eq!(failed.status, CapabilityStatus::Unavailable);
    assert_eq!(
        failed.provenance.detail,
        ProvenanceDetail::AttemptedUse {
            attempt_context: AttemptContext::WorkflowStep,
            result: ProbeResult::Failure,
            failure_code: Some(AttemptFailureCode::Unknown),
        }
    );
    let coded = valid(
        PROBE,
        observed(
            "delegation",
            "unavailable",
            json!({"failureCode": "tool_missing"}),
        ),
    );
    assert!(matches!(
        coded.provenance.detail,
        ProvenanceDetail::AttemptedUse {
            failure_code: Some(AttemptFailureCode::ToolMissing),
            ..
        }
    ));
    // A claim: manual_claim, weak, by the agent unless said otherwise.
    let claim = valid(
        "browse",
        observed("web_browsing", "available", json!({"basis": "claim"})),
    );
    assert_eq!(claim.provenance.enforcement_grade(), EnforcementGrade::Weak);
    assert_eq!(
        claim.provenance.detail,
        ProvenanceDetail::ManualClaim {
            claimed_by: ClaimedBy::Agent,
            claim: ClaimValue::Available,
        }
    );
    // Invalid: a claim on the probe of its capability, a failure code on a success or a claim,
    // claimedBy on an attempt, unknown fields, empty evidence.
    for (step, bad) in [
        (
            PROBE,
            observed("web_browsing", "available", json!({"basis": "claim"})),
        ),
        (
            "browse",
            observed(
                "web_browsing",
                "available",
                json!({"failureCode": "tool_error"}),
            ),
        ),
        (
            "browse",
            observed(
                "web_browsing",
                "unavailable",
                json!({"basis": "claim", "failureCode": "tool_error"}),
            ),
        ),
        (
            "browse",
            observed("web_browsing", "available", json!({"claimedBy": "user"})),
        ),
        (
            "browse",
            observed("web_browsing", "available", json!({"why": "extra"})),
        ),
        (
            "browse",
            observed("web_browsing", "available", json!({"evidence": ""})),
        ),
        ("browse", observed("teleport", "available", json!({}))),
    ] {
        assert!(
            matches!(
                read_observations(&step_id(step), &with(vec![bad.clone()]))[0],
                ObservationReading::Invalid(_)
            ),
            "{bad:?} at {step} must be invalid"
        );
    }
}

/// lock: L-CAP-WEAK-NO-UNLOCK, L-CAP-OBSERVED-ONLY, L-REASON-BLOCKING-MODES
#[test]
fn only_a_strong_available_observation_unlocks_a_required_capability() {
    let (model, root) = started(Autonomy::Guided);
    // The probe refuses a claim about its capability: an invalid required output.
    let (model, obs) = advance(
        &model,
        &root,
        with(vec![observed(
            "web_browsing",
            "available",
            json!({"basis": "claim"}),
        )]),
    );
    assert_eq!(blocker_codes(&obs), [BlockerCode::InvalidRequiredOutput]);
    // A failed probe of a required capability blocks (D75), and is recorded where the attempt
    // lands: the attempted node.
    let (model, obs) = advance(
        &model,
        &root,
        with(vec![observed("web_browsing", "unavailable", json!({}))]),
    );
    assert_eq!(
        blocker_codes(&obs),
        [BlockerCode::RequiredCapabilityUnavailable]
    );
    let events = model.events(&sid("s")).unwrap();
    assert!(
        events
            .iter()
            .any(|e| matches!(e.data(), EventData::CapabilityObserved(o)
        if o.status == CapabilityStatus::Unavailable && e.scope().node_id() == Some(&root)))
    );
    // The retried probe works: the latest strong observation unlocks.
    let (model, obs) = advance(
        &model,
        &root,
        with(vec![observed("web_browsing", "available", json!({}))]),
    );
    let probed = moved_to(&obs);
    let events = model.events(&sid("s")).unwrap();
    assert!(capability_unlocked(
        events,
        &rid("r"),
        &probed,
        Capability::WebBrowsing
    ));
    // The capability breaks while browsing: the dependent step is blocked as unavailable ...
    let (model, obs) = advance(
        &model,
        &probed,
        with(vec![observed(
            "web_browsing",
            "unavailable",
            json!({"failureCode": "tool_error"}),
        )]),
    );
    assert_eq!(
        blocker_codes(&obs),
        [BlockerCode::RequiredCapabilityUnavailable]
    );
    // ... and a claim that it is back does not change that: it is recorded weak, never unlocks.
    let (model, obs) = advance(
        &model,
        &probed,
        with(vec![observed(
            "web_browsing",
            "available",
            json!({"basis": "claim"}),
        )]),
    );
    assert_eq!(
        blocker_codes(&obs),
        [BlockerCode::RequiredCapabilityUnavailable]
    );
    let events = model.events(&sid("s")).unwrap();
    assert!(
        events
            .iter()
            .any(|e| matches!(e.data(), EventData::CapabilityObserved(o)
        if o.provenance.enforcement_grade() == EnforcementGrade::Weak
            && e.scope().node_id() == Some(&probed)))
    );
    assert!(!capability_unlocked(
        events,
        &rid("r"),
        &probed,
        Capability::WebBrowsing
    ));
    // An attempt that works unlocks it in the same ack, and later steps see it on the branch.
    let (model, obs) = advance(
        &model,
        &probed,
        with(vec![observed("web_browsing", "available", json!({}))]),
    );
    let browsed = moved_to(&obs);
    let (_, obs) = advance(&model, &browsed, with(vec![]));
    assert!(matches!(obs, Observation::Advanced { .. }), "{obs:?}");
}

/// lock: L-REASON-NEVER-STOP, L-GAP-RESOLVED-PROJECTION, L-GAP-IMMUTABLE-RESOLUTION
#[test]
fn never_stop_discloses_once_per_branch_and_a_strong_available_observation_resolves_it() {
    let (model, root) = started(Autonomy::FullAutoNeverStop);
    let (model, obs) = advance(
        &model,
        &root,
        with(vec![observed("web_browsing", "unavailable", json!({}))]),
    );
    let probed = moved_to(&obs);
    let (model, obs) = advance(&model, &probed, with(vec![]));
    let browsed = moved_to(&obs);
    let open = |model: &Model| unresolved_gaps_in_run(model.events(&sid("s")).unwrap(), &rid("r"));
    let disclosed = open(&model);
    assert_eq!(disclosed.len(), 1, "{disclosed:?}");
    assert_eq!(disclosed[0].severity, GapSeverity::Critical);
    assert_eq!(
        disclosed[0].reason,
        GapReason::CapabilityMissing(CapabilityMissingReason::RequiredCapabilityUnavailable)
    );
    assert_eq!(disclosed[0].details, details_web());
    // The next dependent step does not disclose it again; its observation resolves it.
    let (model, obs) = advance(
        &model,
        &browsed,
        with(vec![observed("web_browsing", "available", json!({}))]),
    );
    let last = moved_to(&obs);
    let open_now = open(&model);
    assert_eq!(
        open_now.len(),
        1,
        "only the resolution itself is open: {open_now:?}"
    );
    assert_eq!(open_now[0].severity, GapSeverity::Info);
    assert_eq!(open_now[0].node_id, last);
    assert_eq!(
        open_now[0].resolution,
        GapResolution::Resolves {
            resolves_gap_id: disclosed[0].gap_id.clone()
        }
    );
}

/// lock: L-REASON-GAP-MAPPING
#[test]
fn a_preferred_capability_reported_unavailable_and_an_invalid_optional_observation_are_warnings() {
    let (model, root) = started(Autonomy::Guided);
    let (model, obs) = advance(
        &model,
        &root,
        with(vec![
            observed("web_browsing", "available", json!({})),
            observed(
                "delegation",
                "unavailable",
                json!({"failureCode": "policy_blocked"}),
            ),
        ]),
    );
    let probed = moved_to(&obs);
    let (model, obs) = advance(
        &model,
        &probed,
        with(vec![observed(
            "delegation",
            "available",
            json!({"claimedBy": "user"}),
        )]),
    );
    moved_to(&obs);
    let gaps = unresolved_gaps_in_run(model.events(&sid("s")).unwrap(), &rid("r"));
    let reasons: Vec<_> = gaps.iter().map(|g| (g.severity, g.reason)).collect();
    assert_eq!(
        reasons,
        [
            (
                GapSeverity::Warning,
                GapReason::CapabilityMissing(
                    CapabilityMissingReason::RequiredCapabilityUnavailable
                )
            ),
            (
                GapSeverity::Warning,
                GapReason::ContractViolation(ContractViolationReason::InvalidRequiredOutput)
            ),
        ]
    );
    // The invalid observation was not recorded.
    let recorded = model
        .events(&sid("s"))
        .unwrap()
        .iter()
        .filter(|e| matches!(e.data(), EventData::CapabilityObserved(_)))
        .count();
    assert_eq!(recorded, 2);
}

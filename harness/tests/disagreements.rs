//! Former disagreements between the model and production on details the locks left open, each
//! as the minimal command sequence that showed it, now decided (D45 in `spec/LOCKS.md`) and run
//! on both sides: the harness checks that model and production agree after every command, and
//! each test also asserts the decided outcome. The default generators produce these inputs too.
//!
//! D45: every `wr.loop_control` artifact of an ack is the loop-control contract's business. One
//! naming another loop, or a malformed one, makes the output `INVALID_REQUIRED_OUTPUT` (even next
//! to a valid one: a mistake is reported, never skipped over); when all are valid and name the
//! enclosing loop, the last one decides.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use workrail_harness::fixture::{ArtifactSpec, OutputSpec};
use workrail_harness::ops::Op;
use workrail_harness::{Harness, InProcess};
use workrail_model::Observation;
use workrail_spec::blocker::BlockerCode;

fn adv(artifacts: &[ArtifactSpec]) -> Op {
    Op::Advance {
        node: 0,
        output: OutputSpec {
            notes: Some(1),
            artifacts: artifacts.to_vec(),
            context: None,
        },
        prefs: None,
    }
}

/// Runs `plan`, `implement`, then acks `decide` with `artifacts` on both sides; returns the
/// model's observation of that last ack (production agreed with it).
fn decide_with(artifacts: &[ArtifactSpec]) -> Observation {
    let mut h = Harness::new(InProcess::new(1));
    let ops = [
        Op::Start { prefs: None },
        adv(&[]),
        adv(&[]),
        adv(artifacts),
    ];
    if let Err(e) = h.run(&ops) {
        panic!("{e}");
    }
    h.world.acks.last().unwrap().observation.clone()
}

fn blocked_code(obs: &Observation) -> Option<BlockerCode> {
    match obs {
        Observation::Blocked { blockers, .. } => Some(blockers.blockers()[0].code),
        _ => None,
    }
}

/// Formerly disagreement 1: at the loop's decision step, an ack whose only loop-control artifact
/// names another loop. The model said "missing" (no decision for this loop); production said
/// "invalid". Decided: invalid, the more actionable answer (the blocker names the wrong loopId).
/// lock: L-LOOP-CONTROL-ARTIFACT, L-LOOP-MISSING-CONTROL-BLOCKING
#[test]
fn a_loop_control_artifact_for_another_loop() {
    let obs = decide_with(&[ArtifactSpec::LoopOtherLoop]);
    assert_eq!(
        blocked_code(&obs),
        Some(BlockerCode::InvalidRequiredOutput),
        "{obs:?}"
    );
}

/// Formerly disagreement 2: one ack carrying a malformed loop-control artifact first and a valid
/// `continue` last. The model let the last one decide; production blocked. Decided: blocked with
/// `INVALID_REQUIRED_OUTPUT` (the stricter, self-correcting reading); likewise a valid decision
/// after one for another loop.
/// lock: L-LOOP-MISSING-CONTROL-BLOCKING, L-LOOP-CONTRACT-CONTROL
#[test]
fn two_loop_control_artifacts_in_one_ack() {
    for artifacts in [
        [ArtifactSpec::LoopBadDecision, ArtifactSpec::LoopContinue],
        [ArtifactSpec::LoopOtherLoop, ArtifactSpec::LoopContinue],
        [ArtifactSpec::LoopContinue, ArtifactSpec::LoopExtraField],
    ] {
        let obs = decide_with(&artifacts);
        assert_eq!(
            blocked_code(&obs),
            Some(BlockerCode::InvalidRequiredOutput),
            "{artifacts:?}: {obs:?}"
        );
    }
}

/// Several valid decisions for the loop in one ack: the last one is the most recent and decides.
/// lock: L-LOOP-CONTINUE-RULE
#[test]
fn of_several_valid_decisions_the_last_one_decides() {
    let stop_last = decide_with(&[ArtifactSpec::LoopContinue, ArtifactSpec::LoopStop]);
    let continue_last = decide_with(&[ArtifactSpec::LoopStop, ArtifactSpec::LoopContinue]);
    let pending = |obs: &Observation| match obs {
        Observation::Advanced { pending, .. } => pending.as_ref().map(|p| p.step_id.to_string()),
        other => panic!("expected an advance, got {other:?}"),
    };
    assert_eq!(pending(&stop_last).as_deref(), Some("verify"));
    assert_eq!(pending(&continue_last).as_deref(), Some("implement"));
}

//! The model against production over generated workflows (`workrail_harness::generated`): loops
//! nested up to three deep and of every condition kind, contracts, `nonAssumableChoices`,
//! function definitions, text features and recommendations, each driven by generated command
//! sequences with every observable compared after every command, as `model_vs_inprocess.rs`
//! does for `project.harness`.
//!
//! Guards against agreement that holds only for the one workflow the other properties drive.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use proptest::prelude::*;
use workrail::store::memfs::MemFs;
use workrail_harness::generated::{self, GENERATED_FILE, GENERATED_ID, WorkflowUnderTest};
use workrail_harness::{Harness, InProcess, ops};
use workrail_spec::compiled::{CompiledCondition, SequenceItem};

fn under_test(json: &str) -> Arc<WorkflowUnderTest> {
    Arc::new(
        WorkflowUnderTest::compile(GENERATED_ID, GENERATED_FILE, json)
            .unwrap_or_else(|e| panic!("a generated workflow must compile: {e}\n{json}")),
    )
}

proptest! {
    #![proptest_config(ops::config(2))]

    #[test]
    fn production_matches_the_model_on_generated_workflows(
        json in generated::workflow_json(),
        ops in ops::ops_strategy(24),
        seed in any::<u64>(),
    ) {
        let workflow = under_test(&json);
        let sys = InProcess::with_catalog(MemFs::new(), seed, workflow.catalog());
        let mut h = Harness::with_workflow(sys, workflow);
        h.run(&ops).map_err(|e| TestCaseError::fail(format!("{e}\nworkflow: {json}")))?;
    }
}

/// The generator reaches what it promises: over a few dozen workflows, nested loops (three
/// deep), every condition kind, several `loop_control` loops, contracts and function
/// definitions at loop scope all occur.
#[test]
fn the_generator_reaches_nesting_conditions_and_contracts() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut depth3, mut kinds, mut two_controls, mut verify, mut loop_functions) =
        (false, [false; 3], false, false, false);
    for _ in 0..200 {
        let json = generated::workflow_json()
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let w = under_test(&json);
        let body = &w.compiled.body;
        let depth = |loop_id: &workrail_spec::ids::LoopId| {
            let mut d = 1;
            let mut current = loop_id.clone();
            while let Some(parent) = body.loops.iter().find(|l| {
                l.body
                    .iter()
                    .any(|i| matches!(i, SequenceItem::Loop { loop_id } if *loop_id == current))
            }) {
                d += 1;
                current = parent.loop_id.clone();
            }
            d
        };
        depth3 |= body.loops.iter().any(|l| depth(&l.loop_id) >= 3);
        let used: Vec<&CompiledCondition> = body
            .loops
            .iter()
            .filter_map(|l| {
                let workrail_spec::compiled::LoopWhile::ConditionRef { condition_id } = &l.while_
                else {
                    return None;
                };
                body.conditions
                    .iter()
                    .find(|c| c.condition_id() == condition_id)
            })
            .collect();
        for c in &used {
            match c {
                CompiledCondition::LoopControl { .. } => kinds[0] = true,
                CompiledCondition::AlwaysTrue { .. } => kinds[1] = true,
                CompiledCondition::AlwaysFalse { .. } => kinds[2] = true,
            }
        }
        two_controls |= used
            .iter()
            .filter(|c| matches!(c, CompiledCondition::LoopControl { .. }))
            .count()
            >= 2;
        verify |= body
            .contracts
            .iter()
            .any(|c| c.contract_ref == "wr.contracts.verification_report");
        loop_functions |= body.steps.iter().any(|s| {
            s.functions
                .iter()
                .any(|f| f.scope == workrail_spec::compiled::FunctionScope::Loop)
        });
    }
    assert!(depth3, "no loop nested three deep");
    assert_eq!(kinds, [true; 3], "a condition kind never occurs");
    assert!(two_controls && verify && loop_functions);
}

/// The generated agents reach the report paths the comparison is meant to cover (D40 to D42,
/// D75, D76): observations of every provenance kind are recorded, an observation resolves an
/// earlier disclosure, a required capability is blocked as unavailable, a user-only dependency
/// (a non-assumable choice among them) blocks, a supplied one resolves its disclosure, and a
/// divergence is recorded, over a bounded number of generated cases both sides agree on.
/// lock: L-CAP-PROVENANCE, L-GAP-RESOLVED-PROJECTION, L-GAP-NON-ASSUMABLE-CHOICE, L-GAP-USER-ONLY-REASONS
#[test]
fn the_generated_agents_reach_every_report_path() {
    use proptest::strategy::ValueTree;
    use workrail_spec::blocker::{BlockerCode, ReasonDetails};
    use workrail_spec::closed::ProvenanceKind;
    use workrail_spec::event::{AdvanceOutcome, EventData, GapResolution};
    use workrail_spec::reason::GapReason;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut kinds = std::collections::BTreeSet::new();
    let (mut resolved, mut unavailable) = (false, false);
    let (mut user_blocked, mut user_resolved, mut choice_blocked, mut diverged) =
        (false, false, false, false);
    for _ in 0..256 {
        let json = generated::workflow_json()
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let ops = ops::ops_strategy(24)
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let workflow = under_test(&json);
        let sys = InProcess::with_catalog(MemFs::new(), 7, workflow.catalog());
        let mut h = Harness::with_workflow(sys, workflow);
        h.run(&ops)
            .unwrap_or_else(|e| panic!("{e}\nworkflow: {json}"));
        for run in &h.world.runs {
            for event in h.world.model.events(&run.model_session).unwrap() {
                match event.data() {
                    EventData::CapabilityObserved(o) => {
                        kinds.insert(o.provenance.detail.kind());
                    }
                    EventData::GapRecorded(g) => {
                        let resolves = matches!(g.resolution, GapResolution::Resolves { .. });
                        resolved |= resolves && matches!(g.reason, GapReason::CapabilityMissing(_));
                        user_resolved |=
                            resolves && matches!(g.reason, GapReason::UserOnlyDependency(_));
                    }
                    EventData::DivergenceRecorded(_) => diverged = true,
                    EventData::AdvanceRecorded(a) => {
                        if let AdvanceOutcome::Blocked { blockers, .. } = &a.outcome {
                            let codes = || blockers.blockers().iter();
                            unavailable |= codes()
                                .any(|b| b.code == BlockerCode::RequiredCapabilityUnavailable);
                            user_blocked |=
                                codes().any(|b| b.code == BlockerCode::UserOnlyDependency);
                            choice_blocked |= codes().any(|b| {
                                matches!(b.details, Some(ReasonDetails::NonAssumableChoice { .. }))
                            });
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    assert_eq!(
        kinds.into_iter().collect::<Vec<_>>(),
        [
            ProvenanceKind::ProbeStep,
            ProvenanceKind::AttemptedUse,
            ProvenanceKind::ManualClaim
        ]
    );
    // Likewise a strong `available` observation after a disclosure about the same capability:
    // a scripted run of a workflow that prefers web browsing, reported unavailable then available.
    let observe = |available| ops::Op::Advance {
        node: 0,
        output: workrail_harness::fixture::OutputSpec {
            notes: None,
            artifacts: vec![workrail_harness::fixture::ArtifactSpec::Observation(
                workrail_harness::fixture::ObservationSpec {
                    capability: 1,
                    available,
                    basis: 0,
                    failure: 1,
                },
            )],
            context: None,
        },
        prefs: None,
    };
    let prefers = serde_json::json!({"id": GENERATED_ID, "name": "Prefers", "description": "Prefers web browsing.",
        "capabilities": {"web_browsing": "preferred"}, "features": ["wr.features.capabilities"],
        "steps": [{"id": "s1", "title": "One", "prompt": "Do one."},
                  {"id": "s2", "title": "Two", "prompt": "Do two."},
                  {"id": "s3", "title": "Three", "prompt": "Do three."}]})
    .to_string();
    let workflow = under_test(&prefers);
    let sys = InProcess::with_catalog(MemFs::new(), 9, workflow.catalog());
    let mut h = Harness::with_workflow(sys, workflow);
    h.run(&[
        ops::Op::Start { prefs: None },
        observe(false),
        observe(true),
    ])
    .unwrap();
    let run = &h.world.runs[0];
    resolved |= h
        .world
        .model
        .events(&run.model_session)
        .unwrap()
        .iter()
        .any(|e| {
            matches!(e.data(), EventData::GapRecorded(g)
            if matches!(g.resolution, GapResolution::Resolves { .. })
                && matches!(g.reason, GapReason::CapabilityMissing(_)))
        });
    assert!(resolved, "no observation resolved a disclosure");
    assert!(
        unavailable,
        "no required capability was blocked as unavailable"
    );
    assert!(
        user_blocked && choice_blocked,
        "no user-only dependency (or choice) blocked"
    );
    // A supplied report resolves only a never-stop disclosure of the same reason on its branch,
    // which generated sequences seldom line up: a scripted one, compared the same way, does.
    let supplied = |supplied| ops::Op::Advance {
        node: 0,
        output: workrail_harness::fixture::OutputSpec {
            notes: Some(1),
            artifacts: vec![workrail_harness::fixture::ArtifactSpec::UserDependency {
                reason: 0,
                choice: 0,
                supplied,
            }],
            context: None,
        },
        prefs: None,
    };
    let scripted = [
        ops::Op::Start {
            prefs: Some(ops::PrefSpec::Autonomy(2)),
        },
        supplied(false),
        supplied(true),
    ];
    let mut h = Harness::new(InProcess::new(5));
    h.run(&scripted).unwrap();
    let run = &h.world.runs[0];
    user_resolved |= h
        .world
        .model
        .events(&run.model_session)
        .unwrap()
        .iter()
        .any(|e| {
            matches!(e.data(), EventData::GapRecorded(g)
            if matches!(g.resolution, GapResolution::Resolves { .. })
                && matches!(g.reason, GapReason::UserOnlyDependency(_)))
        });
    assert!(
        user_resolved,
        "no supplied user-only dependency resolved a disclosure"
    );
    assert!(diverged, "no divergence was recorded");
}

/// A resolution record is not a disclosure (D79): after a strong `available` observation
/// resolved a preferred capability's `unavailable` disclosure, a later `unavailable` is disclosed
/// again, and both sides agree on every step.
/// lock: L-GAP-RESOLVED-PROJECTION, L-GAP-IMMUTABLE-RESOLUTION
#[test]
fn a_capability_is_disclosed_again_after_its_disclosure_was_resolved() {
    use workrail_harness::fixture::{ArtifactSpec, ObservationSpec, OutputSpec};
    use workrail_spec::closed::GapSeverity;
    use workrail_spec::event::{EventData, GapResolution};
    let observe = |available| ops::Op::Advance {
        node: 0,
        output: OutputSpec {
            notes: None,
            artifacts: vec![ArtifactSpec::Observation(ObservationSpec {
                capability: 0,
                available,
                basis: 1,
                failure: 2,
            })],
            context: None,
        },
        prefs: None,
    };
    let prefers = serde_json::json!({"id": GENERATED_ID, "name": "Prefers",
        "description": "Prefers delegation.",
        "capabilities": {"delegation": "preferred"}, "features": ["wr.features.capabilities"],
        "steps": [{"id": "s1", "title": "One", "prompt": "Do one."},
                  {"id": "s2", "title": "Two", "prompt": "Do two."},
                  {"id": "s3", "title": "Three", "prompt": "Do three."},
                  {"id": "s4", "title": "Four", "prompt": "Do four."}]})
    .to_string();
    let workflow = under_test(&prefers);
    let sys = InProcess::with_catalog(MemFs::new(), 11, workflow.catalog());
    let mut h = Harness::with_workflow(sys, workflow);
    h.run(&[
        ops::Op::Start { prefs: None },
        observe(false),
        observe(true),
        observe(false),
    ])
    .unwrap();
    let run = &h.world.runs[0];
    let gaps: Vec<(GapSeverity, bool)> = h
        .world
        .model
        .events(&run.model_session)
        .unwrap()
        .iter()
        .filter_map(|e| match e.data() {
            EventData::GapRecorded(g) => Some((
                g.severity,
                matches!(g.resolution, GapResolution::Resolves { .. }),
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        gaps,
        [
            (GapSeverity::Warning, false),
            (GapSeverity::Info, true),
            (GapSeverity::Warning, false)
        ]
    );
}

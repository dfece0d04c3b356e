//! Property tests of the model over generated command sequences (start, advance with fresh or old
//! attempts, checkpoints, rehydrates, preference changes) on small workflows with and without
//! loops and required outputs, in every autonomy mode.
//!
//! Guards against the invariants that only break on unusual interleavings: a rehydrate that
//! writes, a replay that answers differently or grows the DAG, fresh attempts that reuse a child,
//! a preferred tip that is not a leaf, and a run status that disagrees with the tip's snapshot.
//! Case counts are bounded for CI (`WORKRAIL_PROPTEST_CASES`, default 64); no failure-persistence
//! files are written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeSet;

use common::*;
use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::json;
use workrail_model::projections::advance_records;
use workrail_model::{
    AckAt, AttemptAt, Command, Model, NodeRef, Observation, PreferenceChange, StartRun,
};
use workrail_spec::closed::{
    Autonomy, PreferenceSource, RiskPolicy, RunStatus, WorkflowSourceKind,
};
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::event::{EffectivePreferences, PreferenceDelta};
use workrail_spec::ids::{ChangeId, NodeId};
use workrail_spec::tools::OutputInput;

fn config() -> ProptestConfig {
    let cases = match std::env::var("WORKRAIL_PROPTEST_CASES") {
        Ok(raw) => raw.trim().parse::<u32>().unwrap_or_else(|_| {
            panic!("WORKRAIL_PROPTEST_CASES must be an unsigned 32-bit integer, got {raw:?}")
        }),
        Err(_) => 64,
    };
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// One generated operation; node and attempt choices are indices into what exists.
#[derive(Debug, Clone)]
enum Op {
    Advance {
        node: Index,
        output: u8,
        old: Option<Index>,
    },
    Checkpoint {
        node: Index,
        replay: bool,
    },
    Rehydrate {
        node: Index,
    },
    Prefs {
        node: Index,
        autonomy: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (any::<Index>(), 0u8..5, proptest::option::weighted(0.2, any::<Index>()))
            .prop_map(|(node, output, old)| Op::Advance { node, output, old }),
        1 => (any::<Index>(), any::<bool>()).prop_map(|(node, replay)| Op::Checkpoint { node, replay }),
        1 => any::<Index>().prop_map(|node| Op::Rehydrate { node }),
        1 => (any::<Index>(), 0u8..3).prop_map(|(node, autonomy)| Op::Prefs { node, autonomy }),
    ]
}

fn autonomy(n: u8) -> Autonomy {
    Autonomy::ALL[usize::from(n) % Autonomy::ALL.len()]
}

/// The workflows under test: a plain sequence, a loop with loop control, a required output.
fn workflow_under_test(n: u8) -> CompiledWorkflowSnapshotV1 {
    match n % 3 {
        0 => linear(),
        1 => looping(2),
        _ => workflow(
            vec![
                compiled_step("report", Some("wr.contracts.findings")),
                compiled_step("after", None),
            ],
            vec![s("report"), s("after")],
            vec![],
        ),
    }
}

fn output(n: u8) -> OutputInput {
    match n {
        0 => no_output(),
        1 => notes("progress"),
        2 => loop_decision("pass", "stop"),
        3 => loop_decision("pass", "continue"),
        _ => OutputInput {
            notes_markdown: Some("found".into()),
            artifacts: vec![artifact(json!({"kind": "wr.findings"}))],
        },
    }
}

fn node(id: &NodeId) -> NodeRef {
    NodeRef {
        session_id: sid("s"),
        run_id: rid("r"),
        node_id: id.clone(),
    }
}

fn nodes(model: &Model) -> Vec<NodeId> {
    model
        .run_dag(&sid("s"), &rid("r"))
        .unwrap()
        .nodes
        .keys()
        .cloned()
        .collect()
}

fn start(workflow: u8, mode: u8) -> Model {
    let baseline = EffectivePreferences {
        autonomy: autonomy(mode),
        risk_policy: RiskPolicy::Balanced,
    };
    let command = Command::Start(Box::new(StartRun {
        session_id: sid("s"),
        run_id: rid("r"),
        workflow: workflow_under_test(workflow),
        source_kind: WorkflowSourceKind::Project,
        source_ref: "workflows/p.json".into(),
        session_baseline: Some(baseline),
        preferences: Vec::new(),
        context: Default::default(),
    }));
    Model::new(GUIDED).apply(&command).unwrap().0
}

/// The command an operation stands for in `model`.
fn command(model: &Model, op: &Op, step: usize) -> Command {
    let all = nodes(model);
    let pick = |i: &Index| all[i.index(all.len())].clone();
    match op {
        Op::Advance {
            node: n,
            output: o,
            old,
        } => {
            let at = pick(n);
            let events = model.events(&sid("s")).unwrap();
            let recorded = advance_records(events, &rid("r"), &at);
            let attempt_id = match old {
                Some(i) if !recorded.is_empty() => {
                    recorded[i.index(recorded.len())].attempt_id.clone()
                }
                _ => model.current_ack_attempt(&node(&at)).unwrap(),
            };
            Command::Advance(AckAt {
                node: node(&at),
                attempt_id,
                output: output(*o),
                preferences: vec![],
                context: None,
            })
        }
        Op::Checkpoint { node: n, replay } => {
            let at = pick(n);
            let current = model.current_checkpoint_attempt(&node(&at)).unwrap();
            let k = model
                .run_dag(&sid("s"), &rid("r"))
                .unwrap()
                .edges_from(&at)
                .filter(|e| e.kind == workrail_spec::closed::EdgeKind::Checkpoint)
                .count();
            let attempt_id = if *replay && k > 0 {
                workrail_model::derive::checkpoint_attempt_id(&sid("s"), &rid("r"), &at, k - 1)
            } else {
                current
            };
            Command::Checkpoint(AttemptAt {
                node: node(&at),
                attempt_id,
                output: notes("checkpoint"),
            })
        }
        Op::Rehydrate { node: n } => Command::Rehydrate(node(&pick(n))),
        Op::Prefs {
            node: n,
            autonomy: a,
        } => Command::ChangePreferences(PreferenceChange {
            node: node(&pick(n)),
            change_id: ChangeId::parse(&format!("prefchg_{step}")).unwrap(),
            source: PreferenceSource::User,
            delta: vec![PreferenceDelta::Autonomy(autonomy(*a))],
        }),
    }
}

/// Runs the operations; refused commands (e.g. advancing a complete node) must change nothing.
fn run(
    mut model: Model,
    ops: &[Op],
    mut check: impl FnMut(&Model, &Command, &Model, &Observation),
) -> Model {
    for (step, op) in ops.iter().enumerate() {
        let cmd = command(&model, op, step);
        if let Ok((next, obs)) = model.apply(&cmd) {
            check(&model, &cmd, &next, &obs);
            model = next;
        }
    }
    model
}

fn invariants(model: &Model) -> Result<(), TestCaseError> {
    let dag = model.run_dag(&sid("s"), &rid("r")).unwrap();
    let tip = model.preferred_tip(&sid("s"), &rid("r")).unwrap();
    prop_assert!(
        dag.node(&tip.node_id).unwrap().children.is_empty(),
        "tip {:?} is not a leaf",
        tip.node_id
    );
    let complete = model.is_complete(&dag.node(&tip.node_id).unwrap().snapshot_ref);
    let status = model.run_status(&sid("s"), &rid("r")).unwrap();
    prop_assert_eq!(
        complete,
        matches!(status, RunStatus::Complete | RunStatus::CompleteWithGaps)
    );
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    /// lock: L-TOKEN-REHYDRATE-PURE, L-MCP-REHYDRATE-NO-EVENTS
    #[test]
    fn rehydrate_never_changes_the_model(workflow in 0u8..3, mode in 0u8..3, ops in proptest::collection::vec(op(), 0..25)) {
        let model = run(start(workflow, mode), &ops, |_, _, _, _| {});
        for at in nodes(&model) {
            let (after, obs) = model.apply(&Command::Rehydrate(node(&at))).unwrap();
            prop_assert_eq!(&after, &model);
            let is_rehydrated = matches!(obs, Observation::Rehydrated { .. });
            prop_assert!(is_rehydrated);
        }
    }

    /// lock: L-TOKEN-ACK-IDEMPOTENT, L-TOKEN-REPLAY-FACTS, L-TOKEN-CHECKPOINT-IDEMPOTENT
    #[test]
    fn replays_return_identical_observations_and_never_grow_the_dag(
        workflow in 0u8..3,
        mode in 0u8..3,
        ops in proptest::collection::vec(op(), 1..25),
        replays in 1usize..4,
        replay_output in 0u8..5,
    ) {
        let mut first: Vec<(Command, Observation)> = Vec::new();
        let model = run(start(workflow, mode), &ops, |before, cmd, after, obs| {
            let appended = after.events(&sid("s")).unwrap().len() > before.events(&sid("s")).unwrap().len();
            if appended && matches!(cmd, Command::Advance(_) | Command::Checkpoint(_)) {
                first.push((cmd.clone(), obs.clone()));
            }
        });
        for (cmd, original) in &first {
            // Same attempt, possibly different output: the recorded facts answer.
            let cmd = match cmd.clone() {
                Command::Advance(mut a) => { a.output = output(replay_output); Command::Advance(a) }
                other => other,
            };
            for _ in 0..replays {
                let (after, obs) = model.apply(&cmd).unwrap();
                prop_assert_eq!(&obs, original);
                prop_assert_eq!(&after, &model);
            }
        }
        invariants(&model)?;
    }

    /// lock: L-TOKEN-ACK-ATTEMPTS, L-DAG-NON-TIP-AUTO-FORK
    #[test]
    fn n_fresh_attempts_from_one_node_create_n_distinct_children(
        mode in 0u8..3,
        ops in proptest::collection::vec(op(), 0..15),
        at in any::<Index>(),
        n in 1usize..6,
    ) {
        // The plain sequence never blocks, so every fresh attempt at a pending node advances.
        let mut model = run(start(0, mode), &ops, |_, _, _, _| {});
        let candidates: Vec<NodeId> = nodes(&model)
            .into_iter()
            .filter(|id| {
                let dag = model.run_dag(&sid("s"), &rid("r")).unwrap();
                !model.is_complete(&dag.node(id).unwrap().snapshot_ref)
            })
            .collect();
        prop_assume!(!candidates.is_empty());
        let from = candidates[at.index(candidates.len())].clone();
        let before: BTreeSet<NodeId> = nodes(&model).into_iter().collect();
        let mut created = BTreeSet::new();
        for _ in 0..n {
            let attempt_id = model.current_ack_attempt(&node(&from)).unwrap();
            let (next, obs) = model.apply(&Command::Advance(AckAt { node: node(&from), attempt_id, output: notes("x"), preferences: vec![], context: None,  })).unwrap();
            let Observation::Advanced { to_node_id, .. } = obs else {
                return Err(TestCaseError::fail(format!("expected advanced, got {obs:?}")));
            };
            prop_assert!(!before.contains(&to_node_id));
            created.insert(to_node_id);
            model = next;
        }
        prop_assert_eq!(created.len(), n);
        let dag = model.run_dag(&sid("s"), &rid("r")).unwrap();
        for child in &created {
            prop_assert_eq!(dag.node(child).unwrap().parent.as_ref(), Some(&from));
        }
        invariants(&model)?;
    }

    /// lock: L-TIP-PER-RUN, L-STATUS-FROM-TIP, L-STATUS-COMPLETE
    #[test]
    fn the_tip_is_always_a_leaf_and_status_is_complete_iff_its_snapshot_is(
        workflow in 0u8..3,
        mode in 0u8..3,
        ops in proptest::collection::vec(op(), 0..30),
    ) {
        let mut failures = Vec::new();
        let model = run(start(workflow, mode), &ops, |_, _, after, _| {
            if let Err(e) = invariants(after) {
                failures.push(e);
            }
        });
        prop_assert!(failures.is_empty(), "{:?}", failures);
        invariants(&model)?;
    }
}

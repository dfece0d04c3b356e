//! The generated commands: what an agent (or a second process, or a crash) can do to WorkRail.
//!
//! Commands name runs, nodes and earlier calls by *selector* (an index taken modulo how many
//! exist when the command runs), so any sequence is meaningful, shrinking keeps sequences valid,
//! and the same commands drive the model, the in-process use-cases and the stdio server.

use proptest::prelude::*;
use workrail_spec::closed::{Autonomy, RiskPolicy};
use workrail_spec::event::PreferenceDelta;

use crate::fixture::{ArtifactSpec, ContextSpec, ObservationSpec, OutputSpec};

/// A preference change sent with `start_workflow` or with an ack (locks §4 closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, arbitrary::Arbitrary)]
pub enum PrefSpec {
    Autonomy(u8),
    Risk(u8),
    Both(u8, u8),
}

fn autonomy(n: u8) -> Autonomy {
    match n % 3 {
        0 => Autonomy::Guided,
        1 => Autonomy::FullAutoStopOnUserDeps,
        _ => Autonomy::FullAutoNeverStop,
    }
}

fn risk(n: u8) -> RiskPolicy {
    match n % 3 {
        0 => RiskPolicy::Conservative,
        1 => RiskPolicy::Balanced,
        _ => RiskPolicy::Aggressive,
    }
}

impl PrefSpec {
    pub fn delta(self) -> Vec<PreferenceDelta> {
        match self {
            Self::Autonomy(a) => vec![PreferenceDelta::Autonomy(autonomy(a))],
            Self::Risk(r) => vec![PreferenceDelta::RiskPolicy(risk(r))],
            Self::Both(a, r) => vec![
                PreferenceDelta::Autonomy(autonomy(a)),
                PreferenceDelta::RiskPolicy(risk(r)),
            ],
        }
    }
}

/// One command.
#[derive(Debug, Clone, PartialEq, Eq, Hash, arbitrary::Arbitrary)]
pub enum Op {
    /// `start_workflow` (a new session and run), optionally with preferences.
    Start { prefs: Option<PrefSpec> },
    /// `continue_workflow` with only the stateToken of a known node (current or old).
    Rehydrate { node: u8 },
    /// Ack the current attempt of a known node: at a tip this extends the branch, at an older
    /// node it forks (the harness rehydrates first when it holds no current ackToken, as an agent
    /// after a rewind would). Optionally with a preference delta on the ack.
    Advance {
        node: u8,
        output: OutputSpec,
        prefs: Option<PrefSpec>,
    },
    /// Send a recorded ack again; `other_output` changes its `output` (a replay must ignore it).
    ReplayAck { ack: u8, other_output: bool },
    /// `checkpoint_workflow` with the current checkpoint attempt of a known node.
    Checkpoint { node: u8, notes: u8 },
    /// Send a recorded checkpoint again.
    ReplayCheckpoint { checkpoint: u8 },
    /// Another process holds the session lock while a fresh ack (or checkpoint) arrives.
    SecondWriter { node: u8, checkpoint: bool },
    /// The process restarts (a new `Workrail` on the same data, or a new server process).
    Restart,
}

impl Op {
    /// Whether the command may append (the crash harness crashes inside these).
    pub fn mutates(&self) -> bool {
        matches!(
            self,
            Self::Start { .. } | Self::Advance { .. } | Self::Checkpoint { .. }
        )
    }
}

fn pref_strategy() -> impl Strategy<Value = Option<PrefSpec>> {
    prop_oneof![
        4 => Just(None),
        1 => (0u8..3).prop_map(|a| Some(PrefSpec::Autonomy(a))),
        1 => (0u8..3).prop_map(|r| Some(PrefSpec::Risk(r))),
        1 => (0u8..3, 0u8..3).prop_map(|(a, r)| Some(PrefSpec::Both(a, r))),
    ]
}

fn artifact_strategy() -> impl Strategy<Value = ArtifactSpec> {
    prop_oneof![
        4 => Just(ArtifactSpec::LoopContinue),
        4 => Just(ArtifactSpec::LoopStop),
        1 => Just(ArtifactSpec::LoopBadDecision),
        1 => Just(ArtifactSpec::LoopExtraField),
        1 => Just(ArtifactSpec::LoopOtherLoop),
        4 => Just(ArtifactSpec::Verification),
        1 => (0u8..3).prop_map(ArtifactSpec::Note),
        8 => (0u8..2, any::<bool>(), 0u8..4, 0u8..5).prop_map(|(capability, available, basis, failure)| {
            ArtifactSpec::Observation(ObservationSpec { capability, available, basis, failure })
        }),
        1 => (0u8..4).prop_map(ArtifactSpec::ObservationInvalid),
        2 => (0u8..9, 0u8..4, any::<bool>()).prop_map(|(reason, choice, supplied)| {
            ArtifactSpec::UserDependency { reason, choice, supplied }
        }),
        1 => (0u8..3).prop_map(ArtifactSpec::UserDependencyInvalid),
        2 => (0u8..5, 0u8..3).prop_map(|(reason, related)| ArtifactSpec::Divergence { reason, related }),
        1 => Just(ArtifactSpec::DivergenceInvalid),
    ]
}

/// Outputs: mostly a recap with zero to two artifacts (several loop-control artifacts in one
/// ack included: D45 decides them; capability observations of every basis, user-only dependency
/// reports and divergence markers, valid or not: D40 to D42).
pub fn output_strategy() -> impl Strategy<Value = OutputSpec> {
    (
        prop_oneof![1 => Just(None), 4 => (0u8..8).prop_map(Some)],
        prop::collection::vec(artifact_strategy(), 0..3),
    )
        .prop_map(|(notes, artifacts)| OutputSpec {
            notes,
            artifacts,
            context: None,
        })
}

/// Outputs for workflows in the workflow language: [`output_strategy`]'s, half the time with a
/// context delta the next walk reads (decision D139).
pub fn language_output_strategy() -> impl Strategy<Value = OutputSpec> {
    (
        output_strategy(),
        prop_oneof![1 => Just(None), 1 => context_strategy().prop_map(Some)],
        // Now and then notes that are JSON, for `schema` rules (decision D143).
        prop_oneof![2 => Just(None), 1 => (0u8..4).prop_map(Some)],
    )
        .prop_map(|(output, context, json)| OutputSpec {
            context,
            notes: json
                .map(|k| crate::fixture::JSON_NOTES + k)
                .or(output.notes),
            ..output
        })
}

/// Outputs for workflows with parallel lanes: a recap, two times in three led by a
/// `wr.block_output` of any status over the three generated paths (D160, D161), one time in
/// ten by one its contract refuses (so a report step blocks on it, D160), now and then a
/// `delegation` observation of any basis (so delegation is sometimes known unavailable, D172)
/// or a `capability_unavailable` divergence, and a third of the time a context delta (a fork
/// landing on the parallel step again may start other lanes).
pub fn lanes_output_strategy() -> impl Strategy<Value = OutputSpec> {
    (
        prop_oneof![1 => Just(None), 6 => (0u8..8).prop_map(Some)],
        prop_oneof![
            3 => Just(None),
            6 => (0u8..4, 0u8..16).prop_map(|block| Some(Ok(block))),
            1 => (0u8..8).prop_map(|shape| Some(Err(shape))),
        ],
        prop_oneof![
            8 => Just(None),
            1 => (any::<bool>(), 0u8..4, 0u8..5).prop_map(|(available, basis, failure)| {
                Some(ArtifactSpec::Observation(ObservationSpec { capability: 0, available, basis, failure }))
            }),
            1 => (0u8..3).prop_map(|related| Some(ArtifactSpec::Divergence { reason: 1, related })),
        ],
        prop_oneof![2 => Just(None), 1 => context_strategy().prop_map(Some)],
    )
        .prop_map(|(notes, block, extra, context)| {
            let mut artifacts = Vec::new();
            match block {
                Some(Ok((status, files))) => artifacts.push(ArtifactSpec::Block { status, files }),
                Some(Err(shape)) => artifacts.push(ArtifactSpec::BlockInvalid(shape)),
                None => {}
            }
            artifacts.extend(extra);
            OutputSpec {
                notes,
                artifacts,
                context,
            }
        })
}

/// A command sequence for a workflow with parallel lanes: acks carry block outputs and context
/// deltas, and selectors favour the few newest nodes (the lanes a parallel step just handed
/// out) so lanes finish in random orders; any node now and then (a rewind or a fork).
pub fn lanes_ops_strategy(max_len: usize) -> impl Strategy<Value = Vec<Op>> {
    let sel = || prop_oneof![4 => 0u8..8, 1 => any::<u8>()];
    let op = prop_oneof![
        1 => pref_strategy().prop_map(|prefs| Op::Start { prefs }),
        2 => sel().prop_map(|node| Op::Rehydrate { node }),
        14 => (sel(), lanes_output_strategy(), pref_strategy())
            .prop_map(|(node, output, prefs)| Op::Advance { node, output, prefs }),
        3 => (any::<u8>(), any::<bool>()).prop_map(|(ack, other_output)| Op::ReplayAck { ack, other_output }),
        1 => (sel(), 0u8..4).prop_map(|(node, notes)| Op::Checkpoint { node, notes }),
        1 => any::<u8>().prop_map(|checkpoint| Op::ReplayCheckpoint { checkpoint }),
        1 => Just(Op::Restart),
    ];
    (
        pref_strategy(),
        prop::collection::vec(op, 1..max_len.max(2)),
    )
        .prop_map(|(prefs, rest)| {
            let mut ops = vec![Op::Start { prefs }];
            ops.extend(rest);
            ops
        })
}

/// A context delta: each of the four keys absent or set (decision D139).
pub fn context_strategy() -> impl Strategy<Value = ContextSpec> {
    let key = || prop_oneof![2 => Just(None), 1 => (0u8..5).prop_map(Some)];
    (key(), key(), key(), key()).prop_map(|(mode, flag, rounds, items)| ContextSpec {
        mode,
        flag,
        rounds,
        items,
    })
}

/// One command, weighted towards the paths that grow the DAG.
pub fn op_strategy() -> impl Strategy<Value = Op> {
    op_strategy_with(output_strategy().boxed())
}

fn op_strategy_with(outputs: BoxedStrategy<OutputSpec>) -> impl Strategy<Value = Op> {
    // Selectors: half the time the newest node (an agent continuing), else any (a rewind).
    let sel = || prop_oneof![1 => Just(0u8), 1 => any::<u8>()];
    prop_oneof![
        2 => pref_strategy().prop_map(|prefs| Op::Start { prefs }),
        3 => sel().prop_map(|node| Op::Rehydrate { node }),
        10 => (sel(), outputs, pref_strategy())
            .prop_map(|(node, output, prefs)| Op::Advance { node, output, prefs }),
        2 => (sel(), any::<bool>()).prop_map(|(ack, other_output)| Op::ReplayAck { ack, other_output }),
        2 => (sel(), 0u8..4).prop_map(|(node, notes)| Op::Checkpoint { node, notes }),
        1 => sel().prop_map(|checkpoint| Op::ReplayCheckpoint { checkpoint }),
        1 => (sel(), any::<bool>()).prop_map(|(node, checkpoint)| Op::SecondWriter { node, checkpoint }),
        1 => Just(Op::Restart),
    ]
}

/// A command sequence; it always begins with a start, so there is something to act on.
pub fn ops_strategy(max_len: usize) -> impl Strategy<Value = Vec<Op>> {
    (
        pref_strategy(),
        prop::collection::vec(op_strategy(), 1..max_len.max(2)),
    )
        .prop_map(|(prefs, rest)| {
            let mut ops = vec![Op::Start { prefs }];
            ops.extend(rest);
            ops
        })
}

/// A command sequence for a workflow in the workflow language: acks carry context deltas.
pub fn language_ops_strategy(max_len: usize) -> impl Strategy<Value = Vec<Op>> {
    (
        pref_strategy(),
        prop::collection::vec(
            op_strategy_with(language_output_strategy().boxed()),
            1..max_len.max(2),
        ),
    )
        .prop_map(|(prefs, rest)| {
            let mut ops = vec![Op::Start { prefs }];
            ops.extend(rest);
            ops
        })
}

/// The number of cases a property runs: `WORKRAIL_PROPTEST_CASES` (64 when unset) divided by
/// `divisor` for the heavier properties, at least 1.
pub fn cases(divisor: u32) -> u32 {
    let base = std::env::var("WORKRAIL_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(64);
    (base / divisor.max(1)).max(1)
}

/// A proptest config with [`cases`] and no persisted failure files (the harness's regressions
/// are written down as explicit tests instead).
pub fn config(divisor: u32) -> ProptestConfig {
    ProptestConfig {
        cases: cases(divisor),
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

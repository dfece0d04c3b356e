//! The model against production over generated workflows with parallel lanes
//! (`workrail_harness::lanes`, decisions D161, D168, D169, D172): lanes started at a landing
//! (a start, an advance, a fork), driven like runs in random orders, failing, redone from an old
//! node, replayed, and fanned in at the parallel step under the three merge strategies, with
//! every observable compared after every command (each lane run's DAG, outputs, gaps and
//! divergences; the `lanes` a response hands out with their ids, indexes, statuses and tokens;
//! blockers; the completion order and conflicts of `## Lane results`).
//!
//! Guards against lanes started twice or not at all, lanes shared between two branches of a
//! fork, a fan-in that lets a missing or failed lane through, and a conflict judged by anything
//! but the recorded order.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use workrail_harness::{lanes, ops};

proptest! {
    #![proptest_config(ops::config(4))]

    /// decision: D161, D168, D169, D172
    #[test]
    fn production_matches_the_model_on_workflows_with_parallel_lanes(
        (spec, ops) in lanes::case(40),
        seed in any::<u64>(),
    ) {
        lanes::check_lanes_case(&spec, &ops, seed).map_err(TestCaseError::fail)?;
    }
}

/// The state machine reaches what it promises: lanes handed out, lane results shown, lanes
/// completing out of index order, conflicts, forks and replays.
/// decision: D168, D169
#[test]
fn the_lane_state_machine_reaches_fan_ins_conflicts_and_out_of_order_lanes() {
    let config = proptest::test_runner::Config {
        cases: ops::cases(1).max(48),
        failure_persistence: None,
        ..proptest::test_runner::Config::default()
    };
    let stats = lanes::check_lanes_sequences(config, 40).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{stats:?}");
    assert!(stats.lanes > 0, "no lane was handed out: {stats:?}");
    assert!(stats.lane_results > 0, "no fan-in was reached: {stats:?}");
    assert!(
        stats.lane_conflicts > 0,
        "no conflict was judged: {stats:?}"
    );
    assert!(
        stats.lanes_out_of_order > 0,
        "lanes always completed in index order: {stats:?}"
    );
    assert!(
        stats.forks > 0 && stats.replays > 0 && stats.blocked > 0,
        "{stats:?}"
    );
}

/// Three lanes finish in the order 3, 1, 2, two of them listing `src/lib.rs`, under each merge
/// strategy: the comparison reaches the fan-in (blocked under `fail-on-conflict`, advanced with
/// the lane recorded first as the winner under `workspace`).
/// decision: D161, D169
#[test]
fn three_lanes_finishing_out_of_order_are_judged_alike_under_every_strategy() {
    // Lane 1 and lane 3 list src/lib.rs (bit 0); lane 2 lists docs/guide.md (bit 1).
    let blocks = [(0, 1), (0, 2), (0, 1)];
    for strategy in 0..3 {
        let stats = lanes::check_lanes_case(
            &lanes::three_lanes(strategy, false),
            &lanes::lanes_out_of_order(blocks),
            7,
        )
        .unwrap_or_else(|e| panic!("strategy {strategy}: {e}"));
        assert_eq!(stats.lanes, 3, "strategy {strategy}: {stats:?}");
        match strategy {
            2 => assert_eq!(
                (stats.blocked, stats.lane_results),
                (1, 0),
                "fail-on-conflict must block: {stats:?}"
            ),
            _ => assert_eq!(
                (stats.lane_results, stats.lanes_out_of_order),
                (1, 1),
                "strategy {strategy}: {stats:?}"
            ),
        }
        if strategy == 1 {
            assert_eq!(stats.lane_conflicts, 1, "{stats:?}");
        }
    }
}

//! The fan-in of parallel lanes (decision D161): which lanes completed, failed, handed in part
//! or are missing, and which files two lanes touched, judged from the recorded block outputs
//! under the three merge strategies.
//!
//! Guards against a fan-in that depends on the order lanes are listed or arrive in (rather than
//! where their outputs were recorded), a conflict missed or invented, a winner other than the
//! first lane to complete, and a failed lane's files merged.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use workrail::engine::fanin::{Lane, LaneOutput, LaneStatus, MergeStrategy, Resolution, fan_in};

fn lane(id: &str, at: u64, status: LaneStatus, files: &[&str]) -> Lane {
    Lane {
        lane_id: id.into(),
        output: Some(LaneOutput {
            recorded_at: at,
            status,
            files: files.iter().map(|f| (*f).to_owned()).collect(),
        }),
    }
}

/// Three lanes, two of which list the same file, completed in an order other than listed:
/// `fail-on-conflict` waits for the user naming the file and both lanes, `workspace` applies
/// the lane recorded first with the conflict reported, `concatenate` finds nothing to merge.
///
/// decision: D161
#[test]
fn two_lanes_listing_one_file_conflict_under_each_strategy_as_locked() {
    let lanes = [
        lane(
            "lane-ui",
            40,
            LaneStatus::Completed,
            &["src/app.rs", "ui/view.rs"],
        ),
        lane(
            "lane-api",
            12,
            LaneStatus::Completed,
            &["src/app.rs", "api/routes.rs"],
        ),
        lane("lane-docs", 25, LaneStatus::Completed, &["docs/guide.md"]),
    ];
    let strict = fan_in(&lanes, MergeStrategy::FailOnConflict);
    assert_eq!(strict.completed_order, ["lane-api", "lane-docs", "lane-ui"]);
    assert_eq!(strict.conflicts.len(), 1);
    let conflict = &strict.conflicts[0];
    assert_eq!(conflict.conflicting_file, "src/app.rs");
    assert_eq!(conflict.lanes, ["lane-api", "lane-ui"]);
    assert_eq!(conflict.resolution, Resolution::UserResolves);
    assert_eq!(conflict.applied_from, None);
    assert!(strict.needs_user());

    let merged = fan_in(&lanes, MergeStrategy::Workspace);
    assert_eq!(merged.conflicts.len(), 1);
    assert_eq!(
        merged.conflicts[0].resolution.as_str(),
        "first-complete-wins"
    );
    assert_eq!(
        merged.conflicts[0].applied_from.as_deref(),
        Some("lane-api")
    );
    assert!(!merged.needs_user());

    let outputs = fan_in(&lanes, MergeStrategy::Concatenate);
    assert!(outputs.conflicts.is_empty());
    assert_eq!(outputs.completed_order, strict.completed_order);
}

/// Missing, failed and partial lanes are named; a failed lane's files conflict with nothing.
///
/// decision: D161
#[test]
fn missing_failed_and_partial_lanes_are_named_and_a_failed_lane_merges_nothing() {
    let lanes = [
        Lane {
            lane_id: "lane-c".into(),
            output: None,
        },
        lane("lane-a", 3, LaneStatus::Failed, &["src/shared.rs"]),
        lane("lane-b", 5, LaneStatus::Partial, &["src/shared.rs"]),
    ];
    let f = fan_in(&lanes, MergeStrategy::FailOnConflict);
    assert_eq!(f.missing, ["lane-c"]);
    assert_eq!(f.failed, ["lane-a"]);
    assert_eq!(f.partial, ["lane-b"]);
    assert!(f.conflicts.is_empty(), "{:?}", f.conflicts);
    assert_eq!(
        MergeStrategy::parse("fail-on-conflict"),
        Some(MergeStrategy::FailOnConflict)
    );
    assert_eq!(MergeStrategy::parse("merge"), None);
}

fn arb_lanes() -> impl Strategy<Value = Vec<Lane>> {
    let file = prop::sample::select(vec!["a.rs", "b.rs", "c/d.rs", "e.md"]);
    let status = prop::sample::select(vec![
        LaneStatus::Completed,
        LaneStatus::Completed,
        LaneStatus::Partial,
        LaneStatus::Failed,
    ]);
    let output = prop::option::weighted(
        0.8,
        (status, prop::collection::btree_set(file, 0..3)).prop_map(|(status, files)| {
            (
                status,
                files.into_iter().map(str::to_owned).collect::<Vec<_>>(),
            )
        }),
    );
    prop::collection::vec(output, 0..6).prop_map(|outputs| {
        outputs
            .into_iter()
            .enumerate()
            .map(|(i, output)| Lane {
                lane_id: format!("lane-{i}"),
                // Distinct positions in the log, not in listing order.
                output: output.map(|(status, files)| LaneOutput {
                    recorded_at: ((i as u64) * 7919) % 13,
                    status,
                    files,
                }),
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("WORKRAIL_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64)
    ))]

    /// The fan-in depends on the recorded outputs only, never on the order lanes are listed
    /// in; a conflict is exactly a file two lanes that did not fail both touched; `workspace`
    /// applies the lane recorded first; `concatenate` never conflicts.
    ///
    /// decision: D161
    #[test]
    fn a_fan_in_is_a_function_of_the_recorded_outputs(
        lanes in arb_lanes(),
        shuffle in any::<prop::sample::Index>(),
    ) {
        for strategy in MergeStrategy::ALL {
            let f = fan_in(&lanes, strategy);
            let mut rotated = lanes.clone();
            if !rotated.is_empty() {
                let k = shuffle.index(rotated.len());
                rotated.rotate_left(k);
                rotated.reverse();
            }
            prop_assert_eq!(&fan_in(&rotated, strategy), &f);
            if strategy == MergeStrategy::Concatenate {
                prop_assert!(f.conflicts.is_empty());
                continue;
            }
            let merging: Vec<&Lane> = lanes
                .iter()
                .filter(|l| l.output.as_ref().is_some_and(|o| o.status != LaneStatus::Failed))
                .collect();
            for file in ["a.rs", "b.rs", "c/d.rs", "e.md"] {
                let mut by: Vec<(u64, &str)> = merging
                    .iter()
                    .filter(|l| l.output.as_ref().unwrap().files.iter().any(|f| f == file))
                    .map(|l| (l.output.as_ref().unwrap().recorded_at, l.lane_id.as_str()))
                    .collect();
                by.sort();
                let conflict = f.conflicts.iter().find(|c| c.conflicting_file == file);
                if by.len() < 2 {
                    prop_assert!(conflict.is_none(), "{file}: {conflict:?}");
                    continue;
                }
                let conflict = conflict.unwrap();
                let expected: Vec<&str> = by.iter().map(|(_, id)| *id).collect();
                prop_assert_eq!(&conflict.lanes, &expected);
                match strategy {
                    MergeStrategy::Workspace => {
                        prop_assert_eq!(conflict.applied_from.as_deref(), Some(expected[0]));
                    }
                    _ => prop_assert_eq!(conflict.applied_from.as_deref(), None),
                }
            }
        }
    }
}

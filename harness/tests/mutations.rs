//! The harness catches planted bugs (feature `test-mutations` of `workrail`, each switched on
//! only for the calling thread, so no other test ever sees it): a property that cannot fail
//! proves nothing.
//!
//! - **pins before close**: `snapshot_pinned` records written before their `segment_closed`
//!   (breaking pin-after-close). Caught by the crash-state harness, and by the state machine as
//!   soon as a restarted process reads the manifest.
//! - **replay from the current log**: an ack replay rebuilt from today's log instead of the
//!   recorded prefix (replay recomputes instead of returning recorded facts). Caught by the
//!   state machine's byte-identical replay check.
//!
//! - **projections** (`PlantedProjectionBug`): production's own projections of its log are
//!   compared with the model's, each one proven by a bug in it: the first output of a channel
//!   kept current, an unresolved gap listed on its node's parent, preferences not inherited
//!   from ancestors.
//! - **capabilities**: production's capability projection counts a weak claim as
//!   enforcement-grade (`PlantedProjectionBug::WeakObservationUnlocks`), caught by the
//!   comparison of capability projections; the reports engine judges an acknowledgement's claims
//!   like attempts (`engine::plant_claim_judged_as_attempt`), caught by the model comparison over
//!   generated workflows that declare capabilities.
//! - **user-only dependencies**: the reports engine accepts `needs_user_choice` for a choice the
//!   step does not mark non-assumable (`engine::plant_unmarked_choice_accepted`), caught by the
//!   model comparison over generated workflows (their steps mark `scope_boundary` only).
//! - **blocker pointer contents**: a required output's blocker points at the artifact kind
//!   instead of its contract (same pointer kind, other contents). Caught only because blockers
//!   are compared in full.
//!
//! - **the workflow language** (`engine::PlantedLanguageBug`): an advance that walks over the
//!   run's context from before the call's delta, a fixed-count `for` loop that runs one
//!   iteration too many, a step passed by its `runCondition` that leaves no decision-trace
//!   entry. Caught by the model comparison over generated workflows in the language (the trace's
//!   skips are compared with the model's walk).
//! - **over a workflow in the language** (`fixture::LANGUAGE_JSON`, decision D139, acks with
//!   context deltas): pins before close caught by the crash-state harness, and a replay that
//!   recomputes caught by the byte-identical replay check, as on the harness workflow.
//!
//! - **parallel lanes** (`engine::planted::PlantedLaneBug`, decisions D161 and D169): a fan-in
//!   that takes the lanes in the order they are listed instead of the order their block outputs
//!   were recorded, and a lane counted once per block output it recorded (a failed report
//!   replayed and redone still blocks), and a node's lanes taken as every lane of its run (so
//!   two branches of a fork share lanes), and a block output sent before a lane's report step
//!   taken as its report (D193). Caught by the model comparison over workflows with
//!   parallel lanes (the lane results' completion order and winners, the lanes' statuses,
//!   blockers), on a scripted run and over generated cases.
//!
//! Each test runs the *same* property functions the CI runs, at CI case counts, and requires
//! them to fail.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use workrail::protocol::Workrail;
use workrail::store::SessionStore;
use workrail_harness::crash::{check_crashes, check_crashes_on, policies};
use workrail_harness::driver::check_sequences;
use workrail_harness::fixture::{ContextSpec, OutputSpec};
use workrail_harness::generated::language_fixture_workflow;
use workrail_harness::ops::{self, Op};
use workrail_harness::{Harness, InProcess};

/// Switches a planted bug on for this thread, and off again even if the test fails.
struct Planted(fn(bool));

impl Planted {
    fn on(switch: fn(bool)) -> Self {
        switch(true);
        Self(switch)
    }
}

impl Drop for Planted {
    fn drop(&mut self) {
        (self.0)(false);
    }
}

fn adv() -> Op {
    Op::Advance {
        node: 0,
        output: OutputSpec {
            notes: Some(1),
            artifacts: vec![],
            context: None,
        },
        prefs: None,
    }
}

/// lock: L-STORE-COMMIT-PIN, L-STORE-CRASH-BEFORE-PINS
#[test]
fn the_crash_harness_catches_pins_written_before_the_segment_is_closed() {
    // Without the bug the same check passes.
    let prefix = [Op::Start { prefs: None }, adv()];
    check_crashes(&prefix, &adv(), 1, &policies(1)).unwrap();
    let _bug = Planted::on(SessionStore::plant_pins_before_close);
    let caught = check_crashes(&prefix, &adv(), 1, &policies(1));
    assert!(caught.is_err(), "the crash harness missed the planted bug");
}

/// An ack of the newest node of `fixture::LANGUAGE_JSON` with notes that pass its checks and a
/// context delta (`mode`: 0 `fast`, 1 `slow`; `items`: 1 `["api"]`).
fn adv_language(mode: u8, items: Option<u8>) -> Op {
    Op::Advance {
        node: 0,
        output: OutputSpec {
            notes: Some(2),
            artifacts: vec![],
            context: Some(ContextSpec {
                mode: Some(mode),
                flag: None,
                rounds: None,
                items,
            }),
        },
        prefs: None,
    }
}

fn language_harness(seed: u64) -> Harness<InProcess> {
    let workflow = language_fixture_workflow();
    let sys = InProcess::with_catalog(
        workrail::store::memfs::MemFs::new(),
        seed,
        workflow.catalog(),
    );
    Harness::with_workflow(sys, workflow)
}

/// lock: L-STORE-COMMIT-PIN, L-STORE-CRASH-BEFORE-PINS
/// decision: D139
#[test]
fn the_crash_harness_catches_pins_written_before_the_segment_is_closed_in_the_language() {
    let prefix = [Op::Start { prefs: None }, adv_language(1, None)];
    let last = adv_language(0, Some(1));
    let check = || check_crashes_on(language_fixture_workflow(), &prefix, &last, 1, &policies(1));
    check().unwrap();
    let _bug = Planted::on(SessionStore::plant_pins_before_close);
    assert!(check().is_err(), "the crash harness missed the planted bug");
}

/// lock: L-TOKEN-REPLAY-FACTS, L-TOKEN-ACK-IDEMPOTENT
/// decision: D139
#[test]
fn the_state_machine_catches_a_replay_that_recomputes_in_the_language() {
    // The survey's ack (mode slow: the deep dive), then the run moves on with other context,
    // then the survey's ack again.
    let known = [
        Op::Start { prefs: None },
        adv_language(1, None),
        adv_language(0, Some(1)),
        Op::ReplayAck {
            ack: 0,
            other_output: false,
        },
    ];
    language_harness(2).run(&known).unwrap();
    let _bug = Planted::on(Workrail::plant_replay_from_current_log);
    let err = language_harness(2).run(&known).unwrap_err();
    assert!(err.contains("not byte-identical"), "{err}");
}

/// lock: L-STORE-COMMIT-PIN
#[test]
fn the_state_machine_catches_pins_written_before_the_segment_is_closed() {
    let _bug = Planted::on(SessionStore::plant_pins_before_close);
    let caught = check_sequences(ops::config(2), 24, InProcess::new);
    assert!(
        caught.is_err(),
        "the generated sequences missed the planted bug"
    );
}

/// lock: L-TOKEN-REPLAY-FACTS, L-TOKEN-ACK-IDEMPOTENT
#[test]
fn the_state_machine_catches_a_replay_that_recomputes() {
    // A known-failing sequence: replay the first ack after the run moved on.
    let known = [
        Op::Start { prefs: None },
        adv(),
        adv(),
        Op::ReplayAck {
            ack: 0,
            other_output: false,
        },
    ];
    Harness::new(InProcess::new(2)).run(&known).unwrap();
    let _bug = Planted::on(Workrail::plant_replay_from_current_log);
    let err = Harness::new(InProcess::new(2)).run(&known).unwrap_err();
    assert!(err.contains("not byte-identical"), "{err}");
    // And the generated sequences find it on their own.
    let caught = check_sequences(ops::config(2), 24, InProcess::new);
    assert!(
        caught.is_err(),
        "the generated sequences missed the planted bug"
    );
}

/// Runs the generated in-process sequences with `bug` planted in production's projections and
/// requires them to fail; without it the same property passes.
fn caught_in_projections(bug: workrail::projections::PlantedProjectionBug) -> String {
    fn switch(bug: workrail::projections::PlantedProjectionBug, on: bool) {
        workrail::projections::plant(bug, on);
    }
    switch(bug, true);
    let caught = std::panic::catch_unwind(|| check_sequences(ops::config(2), 24, InProcess::new));
    switch(bug, false);
    match caught {
        Ok(Err(found)) => found,
        Ok(Ok(_)) => panic!("the generated sequences missed the planted bug {bug:?}"),
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// lock: L-OUTPUT-CURRENT
#[test]
fn the_state_machine_catches_a_current_output_that_is_not_the_latest() {
    let found = caught_in_projections(workrail::projections::PlantedProjectionBug::FirstOutputWins);
    assert!(found.contains("production's projection says"), "{found}");
}

/// A run's unresolved gaps name the node that recorded them (the status and the Console read
/// them per node).
#[test]
fn the_state_machine_catches_unresolved_gaps_on_the_wrong_node() {
    let found = caught_in_projections(workrail::projections::PlantedProjectionBug::GapOnParent);
    assert!(found.contains("production's projection says"), "{found}");
}

/// lock: L-PREF-NODE-ATTACHED
#[test]
fn the_state_machine_catches_preferences_that_are_not_inherited() {
    let found =
        caught_in_projections(workrail::projections::PlantedProjectionBug::NoInheritedPreferences);
    // The responses name the preferences too, so either comparison may see it first.
    assert!(found.contains("preferences"), "{found}");
}

/// lock: L-BLOCKER-POINTERS
#[test]
fn the_state_machine_catches_a_blocker_pointing_at_the_wrong_contract() {
    let _bug = Planted::on(workrail::engine::plant_contract_pointer_names_the_kind);
    let caught = check_sequences(ops::config(2), 24, InProcess::new);
    let found = caught.expect_err("the generated sequences missed the planted bug");
    assert!(found.contains("wr.loop_control"), "{found}");
}

/// lock: L-CAP-WEAK-NO-UNLOCK
#[test]
fn the_state_machine_catches_a_claim_that_unlocks_in_the_projection() {
    let found =
        caught_in_projections(workrail::projections::PlantedProjectionBug::WeakObservationUnlocks);
    assert!(found.contains("capability"), "{found}");
}

/// Runs the generated-workflow property (as `model_vs_generated.rs` does, at CI case counts)
/// and returns the first disagreement, if any.
fn generated_workflows_disagree() -> Option<String> {
    use proptest::strategy::{Strategy, ValueTree};
    use std::sync::Arc;
    use workrail::store::memfs::MemFs;
    use workrail_harness::generated::{self, GENERATED_FILE, GENERATED_ID, WorkflowUnderTest};
    let mut runner = proptest::test_runner::TestRunner::new_with_rng(
        ops::config(2),
        proptest::test_runner::TestRng::deterministic_rng(
            proptest::test_runner::RngAlgorithm::ChaCha,
        ),
    );
    let strategy = (generated::workflow_json(), ops::ops_strategy(24));
    for _ in 0..ops::cases(2) {
        let (json, ops) = strategy.new_tree(&mut runner).ok()?.current();
        let workflow =
            Arc::new(WorkflowUnderTest::compile(GENERATED_ID, GENERATED_FILE, &json).ok()?);
        let sys = InProcess::with_catalog(MemFs::new(), 3, workflow.catalog());
        if let Err(found) = Harness::with_workflow(sys, workflow).run(&ops) {
            return Some(found);
        }
    }
    None
}

/// lock: L-CAP-WEAK-NO-UNLOCK
#[test]
fn the_generated_workflows_catch_a_claim_judged_as_an_attempt() {
    assert_eq!(
        generated_workflows_disagree(),
        None,
        "the property fails without the bug"
    );
    let _bug = Planted::on(workrail::engine::plant_claim_judged_as_attempt);
    let found =
        generated_workflows_disagree().expect("the generated workflows missed the planted bug");
    assert!(found.contains("model"), "{found}");
}

/// lock: L-GAP-NON-ASSUMABLE-CHOICE
#[test]
fn the_generated_workflows_catch_an_unmarked_choice_accepted_as_the_users() {
    let _bug = Planted::on(workrail::engine::plant_unmarked_choice_accepted);
    let found =
        generated_workflows_disagree().expect("the generated workflows missed the planted bug");
    assert!(found.contains("model"), "{found}");
}

/// Runs the model comparison over generated workflows in the language with `bug` planted and
/// requires it to fail; without it the same property passes.
fn caught_in_the_language(bug: workrail::engine::PlantedLanguageBug) -> String {
    fn switch(bug: workrail::engine::PlantedLanguageBug, on: bool) {
        workrail::engine::plant_language_bug(bug, on);
    }
    workrail_harness::language::check_language_sequences(ops::config(2), 24)
        .unwrap_or_else(|e| panic!("without {bug:?} the property must pass: {e}"));
    switch(bug, true);
    // The generated workflows are random: a bug that only some shapes reach may be missed by
    // one bounded run; three misses in a row mean the comparison is blind to it.
    let mut missed = Vec::new();
    let mut caught = None;
    for _ in 0..3 {
        match workrail_harness::language::check_language_sequences(ops::config(1), 24) {
            Err(e) => {
                caught = Some(e);
                break;
            }
            Ok(stats) => missed.push(stats),
        }
    }
    switch(bug, false);
    caught.unwrap_or_else(|| {
        panic!("the model comparison missed {bug:?} three times over {missed:?}")
    })
}

/// A condition, loop rule or binding read from the run's context before the call's delta.
///
/// decision: D139
#[test]
fn the_model_comparison_catches_a_walk_over_stale_context() {
    let caught = caught_in_the_language(workrail::engine::PlantedLanguageBug::StaleContext);
    println!("caught: {}", caught.lines().next().unwrap_or_default());
}

/// A `for` loop with a fixed count that runs one iteration too many.
///
/// decision: D141
#[test]
fn the_model_comparison_catches_a_for_loop_off_by_one() {
    let caught = caught_in_the_language(workrail::engine::PlantedLanguageBug::ForOffByOne);
    println!("caught: {}", caught.lines().next().unwrap_or_default());
}

/// A step passed by its run condition that leaves no decision-trace entry.
///
/// decision: D139
#[test]
fn the_model_comparison_catches_a_skip_left_out_of_the_trace() {
    let caught = caught_in_the_language(workrail::engine::PlantedLanguageBug::SkipNotTraced);
    assert!(caught.contains("decision trace"), "{caught}");
}

/// The lane comparison over generated workflows with parallel lanes, at CI case counts: the
/// first mismatch, if any. The cases are random: a bug only some shapes reach (a fork landing
/// on the parallel step again) may be missed by one bounded run, so up to three runs are
/// made; three clean runs in a row mean the comparison is blind to it.
fn lanes_property() -> Result<(), String> {
    for _ in 0..3 {
        workrail_harness::lanes::check_lanes_sequences(ops::config(4), 40)?;
    }
    Ok(())
}

/// A fan-in that takes lanes in the order they are listed (by index) instead of the order
/// their block outputs were recorded: caught by the comparison of the lane results' completion
/// order and `workspace` winner, over three lanes finishing 3, 1, 2 and over generated cases.
/// decision: D161, D169, D174
#[test]
fn the_lane_comparison_catches_a_fan_in_judged_by_arrival_order() {
    use workrail::engine::planted::{PlantedLaneBug, plant_lane_bug};
    use workrail_harness::lanes;
    // Lanes 1 and 3 both list src/lib.rs; lane 3 is recorded first and wins under workspace.
    let ops = lanes::lanes_out_of_order([(0, 1), (0, 2), (0, 1)]);
    let spec = lanes::three_lanes(1, false);
    lanes::check_lanes_case(&spec, &ops, 5).unwrap();
    let _bug = Planted::on(|on| plant_lane_bug(PlantedLaneBug::ArrivalOrder, on));
    let caught = lanes::check_lanes_case(&spec, &ops, 5);
    assert!(
        caught.as_ref().is_err_and(|e| e.contains("lane results")),
        "the lane comparison missed a fan-in judged by arrival order: {caught:?}"
    );
    assert!(
        lanes_property().is_err(),
        "the lane property missed a fan-in judged by arrival order"
    );
}

/// A lane counted once per block output it recorded instead of by its latest: a lane whose
/// failed report was replayed and then redone still blocks the fan-in. Caught by the blocker
/// comparison (and the lanes' statuses) over a scripted redo and over generated cases.
/// decision: D161, D169, D173
#[test]
fn the_lane_comparison_catches_a_lane_counted_twice_after_a_replay() {
    use workrail::engine::planted::{PlantedLaneBug, plant_lane_bug};
    use workrail_harness::lanes;
    let ops = lanes::lane_redone_after_a_replay();
    let spec = lanes::three_lanes(0, false);
    lanes::check_lanes_case(&spec, &ops, 5).unwrap();
    let _bug = Planted::on(|on| plant_lane_bug(PlantedLaneBug::CountedTwice, on));
    let caught = lanes::check_lanes_case(&spec, &ops, 5);
    assert!(
        caught.is_err(),
        "the lane comparison missed a lane counted twice: {caught:?}"
    );
    assert!(
        lanes_property().is_err(),
        "the lane property missed a lane counted twice"
    );
}

/// The lanes of a node taken as every lane its run started: after a fork lands on the parallel
/// step again, each branch hands out and waits for the other's lanes too. Caught by the
/// comparison of the lanes a response hands out, over a scripted fork and over generated cases.
/// decision: D168, D174
#[test]
fn the_lane_comparison_catches_lanes_shared_across_forks() {
    use workrail::engine::planted::{PlantedLaneBug, plant_lane_bug};
    use workrail_harness::lanes;
    let mut spec = lanes::three_lanes(0, false);
    spec.before = true;
    // The first step's ack lands on the parallel step (known nodes [s1, P, lane1..3]); the
    // first step again (selector 4) is a fork landing on it once more.
    let ops = [
        Op::Start { prefs: None },
        lanes::ack(0, None),
        lanes::ack(4, None),
    ];
    lanes::check_lanes_case(&spec, &ops, 5).unwrap();
    let _bug = Planted::on(|on| plant_lane_bug(PlantedLaneBug::SharedAcrossForks, on));
    let caught = lanes::check_lanes_case(&spec, &ops, 5);
    assert!(
        caught
            .as_ref()
            .is_err_and(|e| e.contains("lanes handed out")),
        "the lane comparison missed lanes shared across forks: {caught:?}"
    );
    assert!(
        lanes_property().is_err(),
        "the lane property missed lanes shared across forks"
    );
}

/// A block output sent with a lane's routine step taken as the lane's report: the lane reads
/// as handed in while it still stands before its report step, and the fan-in lets it through.
/// Caught by the comparison of the lanes' statuses and the fan-in's blockers, over a scripted
/// early report and over generated cases.
/// decision: D193, D174
#[test]
fn the_lane_comparison_catches_a_block_output_sent_before_the_report_step() {
    use workrail::engine::planted::{PlantedLaneBug, plant_lane_bug};
    use workrail_harness::lanes;
    let ops = lanes::lane_reporting_early();
    let spec = lanes::three_lanes(0, false);
    lanes::check_lanes_case(&spec, &ops, 5).unwrap();
    let _bug = Planted::on(|on| plant_lane_bug(PlantedLaneBug::EarlyReport, on));
    let caught = lanes::check_lanes_case(&spec, &ops, 5);
    assert!(
        caught.is_err(),
        "the lane comparison missed an early block output taken as a report: {caught:?}"
    );
    assert!(
        lanes_property().is_err(),
        "the lane property missed an early block output taken as a report"
    );
}

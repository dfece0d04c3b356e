//! Crash at every I/O point of the append transaction, restart, and check that the store holds
//! the old truth or the new truth, never anything in between (locks §1 "Crash-state intent").
//! Close and pins are one write (D49), so "attested without pins" can only come from a write
//! torn by a power cut; then `repair` (D51) must bring back exactly the new truth.
//!
//! Also: a single failed I/O operation (ENOSPC, EIO, with or without a short write) at any step
//! of an append leaves the truth before or after, the error says honestly which, and a retry
//! succeeds; and arbitrary damage to segment and manifest bytes never panics the loader and
//! always yields a classified health.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::store_support;

use std::path::Path;

use proptest::prelude::*;
use store_support::*;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::{MemFs, UnsyncedData};
use workrail::store::{
    AppendPlan, Committed, CorruptionReason, RepairOutcome, SessionHealth, SessionRead, StoreError,
};
use workrail_spec::event::EventKind;

/// splitmix64: the tear fractions of a run, from `WORKRAIL_CRASH_SEED` or the clock (printed
/// on failure so a run can be repeated).
fn tears(salt: u64) -> (u64, [u16; 2]) {
    let seed = std::env::var("WORKRAIL_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(7, |d| d.as_nanos() as u64)
        });
    let mut z = seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut next = || {
        z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut x = z;
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((x ^ (x >> 31)) % 1001) as u16
    };
    (seed, [next(), next()])
}

/// What a crash leaves of unsynced bytes: lost, kept, and torn at random points.
fn policies(random: [u16; 2]) -> [UnsyncedData; 4] {
    [
        UnsyncedData::Lost,
        UnsyncedData::Kept,
        UnsyncedData::Torn {
            keep_per_mille: random[0],
        },
        UnsyncedData::Torn {
            keep_per_mille: random[1],
        },
    ]
}

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Outcome {
    OldTruth,
    NewTruth,
    /// A power cut tore the close+pins write: attested without pins, and `repair` restored
    /// the new truth.
    TornThenRepaired,
}

fn verify_snapshot(
    fx: &Fixture,
) -> impl Fn(&workrail_spec::ids::SnapshotRef) -> Result<(), StoreError> + '_ {
    move |r| fx.snapshots.get(r).map(drop)
}

/// Commits `setup`, then runs `plan` with a crash at mutating operation `k` (a write there
/// lands `tear` thousandths of its bytes), restarts with `policy`, and classifies what load
/// finds.
fn crash_once(
    setup: &[fn(&Fixture) -> AppendPlan],
    plan: fn(&Fixture) -> AppendPlan,
    k: u64,
    tear: u16,
    policy: UnsyncedData,
) -> (Outcome, bool) {
    let fx = Fixture::new();
    for step in setup {
        fx.append(step(&fx)).unwrap();
    }
    let old: Vec<EventKind> = fx.kinds();
    let plan = plan(&fx);
    let new_len = old.len() + plan.events.len();
    fx.fs.crash_at_torn(k, tear);
    let result = fx.append(plan);
    let crashed = fx.fs.has_crashed();
    assert_eq!(
        result.is_err(),
        crashed,
        "an append fails exactly when it crashed"
    );
    let restarted = Fixture::on(fx.fs.after_crash(policy));
    let context = format!("crash at op {k} (write torn at {tear}/1000) with {policy:?}");
    let outcome = match restarted.store.load(&session()) {
        Err(_) => {
            assert!(
                old.is_empty(),
                "a committed session never disappears ({context})"
            );
            Outcome::OldTruth
        }
        Ok(loaded) => match &loaded.health {
            SessionHealth::Healthy if loaded.event_count() == old.len() => Outcome::OldTruth,
            SessionHealth::Healthy if loaded.event_count() == new_len => Outcome::NewTruth,
            SessionHealth::CorruptTail(c) | SessionHealth::CorruptHead(c)
                if c.reason == CorruptionReason::MissingSnapshotPins =>
            {
                // Only a torn write can split close from its pins now.
                assert!(
                    policy != UnsyncedData::Lost && tear != 0 && tear != 1000
                        || matches!(policy, UnsyncedData::Torn { .. }),
                    "attested without pins, yet no write was torn ({context})"
                );
                assert_eq!(
                    loaded.event_count(),
                    old.len(),
                    "salvage never includes the unpinned segment ({context})"
                );
                let verify = verify_snapshot(&restarted);
                let repaired = restarted
                    .store
                    .repair_missing_pins(&session(), &verify)
                    .unwrap_or_else(|e| panic!("repair refused ({context}): {e}"));
                assert!(
                    matches!(repaired, RepairOutcome::Repaired { .. }),
                    "{repaired:?}"
                );
                let after = restarted.store.load(&session()).unwrap();
                assert!(after.health.is_healthy(), "{:?} ({context})", after.health);
                assert_eq!(
                    after.event_count(),
                    new_len,
                    "repair restores the new truth"
                );
                Outcome::TornThenRepaired
            }
            other => panic!(
                "{context} left {other:?} and {} events",
                loaded.event_count()
            ),
        },
    };
    // The survivor can always append again, over any orphan or torn manifest tail.
    restarted.append(notes_plan(9)).unwrap();
    let after = restarted.store.load(&session()).unwrap();
    assert!(after.health.is_healthy(), "{:?}", after.health);
    (outcome, crashed)
}

/// Runs every crash point of `plan`, tearing the write at the crash point at random and not at
/// all, under every unsynced-data policy; returns the outcomes seen.
fn every_crash_point(
    setup: &[fn(&Fixture) -> AppendPlan],
    plan: fn(&Fixture) -> AppendPlan,
) -> Vec<(u64, UnsyncedData, Outcome)> {
    let mut seen = Vec::new();
    for k in 1.. {
        let (seed, random) = tears(k);
        let mut crashed_any = false;
        for tear in [0, 1000, random[0], random[1]] {
            for policy in policies(random) {
                let run = std::panic::catch_unwind(|| crash_once(setup, plan, k, tear, policy));
                let Ok((outcome, crashed)) = run else {
                    panic!("failed with WORKRAIL_CRASH_SEED={seed}");
                };
                crashed_any |= crashed;
                seen.push((k, policy, outcome));
            }
        }
        if !crashed_any {
            // k is past the last operation: a power cut now must keep the new truth.
            assert!(
                seen.iter().rev().take(16).all(|s| s.2 == Outcome::NewTruth),
                "an acknowledged append was lost: {seen:?}"
            );
            break;
        }
    }
    seen
}

fn start(fx: &Fixture) -> AppendPlan {
    start_plan(&fx.snapshots)
}
fn advance(fx: &Fixture) -> AppendPlan {
    advance_plan(&fx.snapshots, 0, 1)
}
fn notes(_: &Fixture) -> AppendPlan {
    notes_plan(1)
}

/// lock: L-STORE-CRASH-BEFORE-CLOSE, L-STORE-CRASH-AFTER-PINS, L-STORE-ATOMIC-WRITE, L-STORE-COMMIT-PIN
#[test]
fn every_crash_point_of_an_append_with_pins_yields_old_or_new_truth() {
    let seen = every_crash_point(&[start], advance);
    // The transaction is: write temp, fsync, rename, fsync dir, append close+pins, fsync. A
    // crash before the attestation is durable loses nothing committed: old truth.
    for &(k, policy, outcome) in &seen {
        if k <= 4 {
            assert_eq!(
                outcome,
                Outcome::OldTruth,
                "crash at op {k} ({policy:?}) is before step 2"
            );
        }
        // Close without pins needs a torn write; a cut that keeps only synced bytes never
        // shows it.
        if policy == UnsyncedData::Lost {
            assert_ne!(outcome, Outcome::TornThenRepaired, "op {k}");
        }
    }
    assert!(seen.iter().any(|&(_, _, o)| o == Outcome::NewTruth));
}

/// lock: L-STORE-CRASH-BEFORE-PINS
#[test]
fn a_power_cut_tearing_close_from_its_pins_fails_fast_until_repaired() {
    // The manifest append is op 5 of an advance (temp, fsync, rename, fsync dir, append).
    // Tear it so the close line lands whole and the pin line does not.
    for tear in [600, 700, 800, 900] {
        let (outcome, crashed) = crash_once(&[start], advance, 5, tear, UnsyncedData::Kept);
        assert!(crashed);
        if outcome == Outcome::TornThenRepaired {
            return;
        }
    }
    panic!("no tear of the close+pins write split close from its pins");
}

/// lock: L-STORE-CRASH-BEFORE-CLOSE, L-STORE-CRASH-AFTER-PINS
#[test]
fn every_crash_point_of_a_session_start_and_of_a_pinless_plan_is_old_or_new_truth() {
    // The first plan of a session creates its directories and the manifest (each directory
    // entry made durable by a parent fsync) and pins the root snapshot.
    let outcomes: Vec<Outcome> = every_crash_point(&[], start)
        .into_iter()
        .map(|s| s.2)
        .collect();
    for expected in [Outcome::OldTruth, Outcome::NewTruth] {
        assert!(
            outcomes.contains(&expected),
            "{expected:?} never seen: {outcomes:?}"
        );
    }
    for (k, policy, outcome) in every_crash_point(&[start], notes) {
        assert_ne!(
            outcome,
            Outcome::TornThenRepaired,
            "a plan without snapshots has no pins (op {k}, {policy:?})"
        );
    }
}

/// Mutating operations of `plan` after `setup` (each one a failure point).
fn operations_of(setup: &[fn(&Fixture) -> AppendPlan], plan: fn(&Fixture) -> AppendPlan) -> u64 {
    let fx = Fixture::new();
    for step in setup {
        fx.append(step(&fx)).unwrap();
    }
    let plan = plan(&fx);
    let before = fx.fs.ops();
    fx.append(plan).unwrap();
    fx.fs.ops() - before
}

/// lock: L-STORE-ATOMIC-WRITE, L-STORE-APPEND-ONLY-MUTATION
#[test]
fn a_single_failed_io_at_any_step_leaves_old_or_new_truth_and_a_retry_succeeds() {
    const ENOSPC: i32 = 28;
    const EIO: i32 = 5;
    let mut checked = 0;
    for (setup, plan) in [
        (&[][..], start as fn(&Fixture) -> AppendPlan),
        (&[start as fn(&Fixture) -> AppendPlan][..], advance),
        (&[start as fn(&Fixture) -> AppendPlan][..], notes),
    ] {
        let ops = operations_of(setup, plan);
        for k in 1..=ops {
            let (seed, random) = tears(k + 100);
            for errno in [ENOSPC, EIO] {
                for written in [0, random[0], 1000] {
                    let context = format!(
                        "errno {errno} at op {k} of {ops}, {written}/1000 written, WORKRAIL_CRASH_SEED={seed}"
                    );
                    let fx = Fixture::new();
                    for step in setup {
                        fx.append(step(&fx)).unwrap();
                    }
                    let old = fx.kinds().len();
                    let the_plan = plan(&fx);
                    let new_len = old + the_plan.events.len();
                    fx.fs.fail_at_with(k, errno, written);
                    let result = fx.append(the_plan.clone());
                    let live = fx
                        .store
                        .load(&session())
                        .map(|l| (l.health.clone(), l.event_count()));
                    match &result {
                        Ok(()) => panic!("a failed operation was reported as success ({context})"),
                        Err(StoreError::Write {
                            committed,
                            errno: name,
                            path,
                            ..
                        }) => {
                            assert_eq!(*committed, Committed::Nothing, "{context}");
                            assert!(name.is_some() && !path.is_empty(), "{context}");
                            // "Nothing was committed" holds now and after a power cut.
                            match &live {
                                Ok((health, len)) => {
                                    assert!(health.is_healthy(), "{health:?} ({context})");
                                    assert_eq!(*len, old, "{context}");
                                }
                                Err(StoreError::NotFound { .. }) => assert_eq!(old, 0, "{context}"),
                                Err(e) => panic!("{e} ({context})"),
                            }
                            for policy in [UnsyncedData::Lost, UnsyncedData::Kept] {
                                let cut = Fixture::on(fx.fs.after_crash(policy));
                                let len = cut.store.load(&session()).map_or(0, |l| {
                                    assert!(l.health.is_healthy(), "{:?} ({context})", l.health);
                                    l.event_count()
                                });
                                assert_eq!(len, old, "{policy:?} ({context})");
                            }
                        }
                        Err(other) => panic!("unexpected error {other:?} ({context})"),
                    }
                    // The retry commits the plan once.
                    fx.append(the_plan)
                        .unwrap_or_else(|e| panic!("retry failed: {e} ({context})"));
                    let loaded = fx.store.load(&session()).unwrap();
                    assert!(loaded.health.is_healthy(), "{context}");
                    assert_eq!(loaded.event_count(), new_len, "{context}");
                    let cut = Fixture::on(fx.fs.after_crash(UnsyncedData::Lost));
                    assert_eq!(
                        cut.store.load(&session()).unwrap().event_count(),
                        new_len,
                        "{context}"
                    );
                    checked += 1;
                }
            }
        }
    }
    assert!(checked > 30, "only {checked} failure points");
}

fn committed_fs() -> MemFs {
    let fx = Fixture::new();
    fx.append(start_plan(&fx.snapshots)).unwrap();
    fx.append(advance_plan(&fx.snapshots, 0, 1)).unwrap();
    fx.append(notes_plan(1)).unwrap();
    fx.fs
}

fn damage_target() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "manifest.jsonl",
        "events/00000000-00000002.jsonl",
        "events/00000003-00000005.jsonl",
        "events/00000006-00000006.jsonl",
    ])
}

#[derive(Debug, Clone)]
enum Damage {
    Flip { at: usize, mask: u8 },
    Truncate { keep: usize },
    Insert { at: usize, bytes: Vec<u8> },
    Replace { bytes: Vec<u8> },
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(at, mask)| Damage::Flip { at, mask }),
        any::<usize>().prop_map(|keep| Damage::Truncate { keep }),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..40))
            .prop_map(|(at, bytes)| Damage::Insert { at, bytes }),
        prop::collection::vec(any::<u8>(), 0..400).prop_map(|bytes| Damage::Replace { bytes }),
    ]
}

fn config() -> ProptestConfig {
    let cases = std::env::var("WORKRAIL_PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// lock: L-HEALTH-CLOSED-SET, L-STORE-LOAD-VALIDATE
    #[test]
    fn damaged_bytes_never_panic_and_always_classify(target in damage_target(), damage in damage()) {
        let fs = committed_fs();
        let path = Path::new("sessions").join(session().as_str()).join(target);
        let original = fs.read(&path).unwrap().unwrap();
        fs.corrupt(&path, |bytes| match &damage {
            Damage::Flip { at, mask } => {
                let i = at % bytes.len();
                bytes[i] ^= mask;
            }
            Damage::Truncate { keep } => bytes.truncate(keep % bytes.len()),
            Damage::Insert { at, bytes: extra } => {
                let i = at % (bytes.len() + 1);
                bytes.splice(i..i, extra.iter().copied());
            }
            Damage::Replace { bytes: new } => *bytes = new.clone(),
        });
        let changed = fs.read(&path).unwrap().unwrap() != original;
        let reopened = Fixture::on(fs);
        match reopened.store.load(&session()) {
            Err(e) => prop_assert!(matches!(e, workrail::store::StoreError::NotFound { .. }), "{e}"),
            Ok(loaded) => {
                // The prefix is always a prefix of the committed truth.
                prop_assert!(loaded.event_count() <= 7);
                for (i, e) in loaded.events().all().unwrap().iter().enumerate() {
                    prop_assert_eq!(e.event_index().get(), i as u64);
                }
                if loaded.health.is_healthy() {
                    // Healthy after damage only if the damage hit no committed byte (e.g. a torn
                    // final manifest line) or nothing changed.
                    prop_assert!(!changed || target == "manifest.jsonl", "{:?}", damage);
                } else {
                    prop_assert!(loaded.health.corruption().is_some());
                }
                // An unhealthy session refuses to append.
                if !loaded.health.is_healthy() {
                    prop_assert!(reopened.append(notes_plan(2)).is_err());
                }
            }
        }
    }
}

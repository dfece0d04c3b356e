//! Crash at every I/O point of the append transaction, restart, and check that the store holds
//! the old truth, the new truth, or (only for a crash between `segment_closed` and its pins) a
//! session that fails fast, never anything in between (locks §1 "Crash-state intent").
//!
//! Also: arbitrary damage to segment and manifest bytes never panics the loader and always
//! yields a classified health.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod store_support;

use std::path::Path;

use proptest::prelude::*;
use store_support::*;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::{MemFs, UnsyncedData};
use workrail::store::{AppendPlan, CorruptionReason, SessionHealth, SessionRead};
use workrail_spec::event::EventKind;

const POLICIES: [UnsyncedData; 4] = [
    UnsyncedData::Lost,
    UnsyncedData::Kept,
    UnsyncedData::Torn {
        keep_per_mille: 500,
    },
    UnsyncedData::Torn {
        keep_per_mille: 999,
    },
];

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Outcome {
    OldTruth,
    NewTruth,
    FailsFastMissingPins,
}

/// Commits `setup`, then runs `plan` with a crash at mutating operation `k`, restarts with
/// `policy`, and classifies what load finds.
fn crash_once(
    setup: &[fn(&Fixture) -> AppendPlan],
    plan: fn(&Fixture) -> AppendPlan,
    k: u64,
    policy: UnsyncedData,
) -> (Outcome, bool) {
    let fx = Fixture::new();
    for step in setup {
        fx.append(step(&fx)).unwrap();
    }
    let old: Vec<EventKind> = fx.kinds();
    let plan = plan(&fx);
    let new_len = old.len() + plan.events.len();
    fx.fs.crash_at(k);
    let result = fx.append(plan);
    let crashed = fx.fs.has_crashed();
    assert_eq!(
        result.is_err(),
        crashed,
        "an append fails exactly when it crashed"
    );
    let restarted = Fixture::on(fx.fs.after_crash(policy));
    let outcome = match restarted.store.load(&session()) {
        Err(_) => {
            assert!(old.is_empty(), "a committed session never disappears");
            Outcome::OldTruth
        }
        Ok(loaded) => match &loaded.health {
            SessionHealth::Healthy if loaded.events.len() == old.len() => Outcome::OldTruth,
            SessionHealth::Healthy if loaded.events.len() == new_len => Outcome::NewTruth,
            SessionHealth::CorruptTail(c) | SessionHealth::CorruptHead(c)
                if c.reason == CorruptionReason::MissingSnapshotPins =>
            {
                assert_eq!(
                    loaded.events.len(),
                    old.len(),
                    "salvage never includes the unpinned segment"
                );
                Outcome::FailsFastMissingPins
            }
            other => panic!(
                "crash at op {k} with {policy:?} left {other:?} and {} events",
                loaded.events.len()
            ),
        },
    };
    if outcome != Outcome::FailsFastMissingPins {
        // The survivor can always append again, over any orphan or torn manifest tail.
        restarted.append(notes_plan(9)).unwrap();
        let after = restarted.store.load(&session()).unwrap();
        assert!(after.health.is_healthy(), "{:?}", after.health);
    }
    (outcome, crashed)
}

/// Runs every crash point of `plan` under every unsynced-data policy; returns the outcomes seen.
fn every_crash_point(
    setup: &[fn(&Fixture) -> AppendPlan],
    plan: fn(&Fixture) -> AppendPlan,
) -> Vec<(u64, UnsyncedData, Outcome)> {
    let mut seen = Vec::new();
    for k in 1.. {
        let mut crashed_any = false;
        for policy in POLICIES {
            let (outcome, crashed) = crash_once(setup, plan, k, policy);
            crashed_any |= crashed;
            seen.push((k, policy, outcome));
        }
        if !crashed_any {
            // k is past the last operation: every policy must see the new truth.
            assert!(
                seen.iter()
                    .rev()
                    .take(POLICIES.len())
                    .all(|s| s.2 == Outcome::NewTruth)
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

/// lock: L-STORE-CRASH-BEFORE-CLOSE, L-STORE-CRASH-BEFORE-PINS, L-STORE-CRASH-AFTER-PINS, L-STORE-ATOMIC-WRITE
#[test]
fn every_crash_point_of_an_append_with_pins_yields_old_new_or_fail_fast() {
    let seen = every_crash_point(&[start], advance);
    // The transaction is: write temp, fsync, rename, fsync dir, append segment_closed, fsync,
    // append pins, fsync. Crash before the segment_closed line is durable: old truth.
    for &(k, policy, outcome) in &seen {
        if k <= 5 {
            assert_eq!(
                outcome,
                Outcome::OldTruth,
                "crash at op {k} ({policy:?}) is before step 2"
            );
        }
    }
    // Crash after the attestation but before the pins are durable: fail fast, never repaired.
    assert!(
        seen.iter()
            .any(|&(k, _, o)| k == 7 && o == Outcome::FailsFastMissingPins),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|&(k, p, o)| k == 8
            && p == UnsyncedData::Lost
            && o == Outcome::FailsFastMissingPins)
    );
    // After the pins are durable: new truth.
    assert!(seen.iter().any(|&(_, _, o)| o == Outcome::NewTruth));
}

/// lock: L-STORE-CRASH-BEFORE-CLOSE, L-STORE-CRASH-AFTER-PINS
#[test]
fn every_crash_point_of_a_session_start_and_of_a_pinless_plan_is_old_or_new_truth() {
    // The first plan of a session creates the manifest (one more directory sync) and pins the
    // root snapshot: all three crash states occur, and the session never half-exists.
    let outcomes: Vec<Outcome> = every_crash_point(&[], start)
        .into_iter()
        .map(|s| s.2)
        .collect();
    for expected in [
        Outcome::OldTruth,
        Outcome::FailsFastMissingPins,
        Outcome::NewTruth,
    ] {
        assert!(
            outcomes.contains(&expected),
            "{expected:?} never seen: {outcomes:?}"
        );
    }
    for (k, policy, outcome) in every_crash_point(&[start], notes) {
        assert_ne!(
            outcome,
            Outcome::FailsFastMissingPins,
            "a plan without snapshots has no pin step (op {k}, {policy:?})"
        );
    }
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
                prop_assert!(loaded.events.len() <= 7);
                for (i, e) in loaded.events.iter().enumerate() {
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

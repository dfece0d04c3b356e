//! Property: GC never deletes anything a retained session can reach, over random multi-session
//! stores built through the real protocol, random ages, TTLs and keep lists, random unreachable
//! objects (old or in flight), and random corruption (which must put GC in safe mode).
//!
//! Guards against: a reachable snapshot, pinned workflow or artifact deleted; a kept or young
//! session deleted; any deletion at all in safe mode; CAS deletions before session deletions;
//! expired sessions or old unreachable objects that survive a clean run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::bundle_support;
use crate::protocol_support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bundle_support::*;
use proptest::prelude::*;
use workrail::bundle::NoProgress;
use workrail::gc::{GcOptions, RetentionConfig};
use workrail::store::fs::StoreFs;
use workrail::store::{ArtifactStore, PinnedWorkflowStore, SnapshotStore, layout};
use workrail_spec::event::{EventData, OutputPayload};

use protocol_support::rehydrate;

#[derive(Debug, Clone)]
struct SessionPlan {
    workflow: &'static str,
    ops: Vec<Op>,
    age_days: u64,
    keep: bool,
}

#[derive(Debug, Clone, Copy)]
enum Corruption {
    None,
    /// Flip a byte of a committed segment.
    Segment(usize),
    /// A manifest record with a future schema version.
    UnknownVersion(usize),
    /// A complete but unparseable manifest line.
    GarbageLine(usize),
}

fn session_plan() -> impl Strategy<Value = SessionPlan> {
    (
        workflow(),
        prop::collection::vec(op(), 0..6),
        0u64..120,
        prop::bool::weighted(0.25),
    )
        .prop_map(|(workflow, ops, age_days, keep)| SessionPlan {
            workflow,
            ops,
            age_days,
            keep,
        })
}

fn corruption() -> impl Strategy<Value = Corruption> {
    prop_oneof![
        5 => Just(Corruption::None),
        1 => (0usize..8).prop_map(Corruption::Segment),
        1 => (0usize..8).prop_map(Corruption::UnknownVersion),
        1 => (0usize..8).prop_map(Corruption::GarbageLine),
    ]
}

proptest! {
    #![proptest_config(config())]

    /// lock: L-GC-REACHABILITY, L-GC-ROOTS, L-GC-SAFE-MODE, L-GC-DELETE-ORDER, L-GC-RETENTION
    #[test]
    fn gc_never_deletes_what_a_retained_session_reaches(
        plans in prop::collection::vec(session_plan(), 1..5),
        ttl_days in 0u64..100,
        orphans in prop::collection::vec((any::<u16>(), any::<bool>()), 0..4),
        young_objects in prop::collection::vec(any::<prop::sample::Index>(), 0..3),
        corruption in corruption(),
        dry_run in prop::bool::weighted(0.2),
    ) {
        let rec = RecordingFs::new(workrail::store::memfs::MemFs::new());
        let fs = rec.inner.clone();
        let wr = rec.open(51);
        let clock = TestClock::new();
        let mut built = Vec::new();
        for plan in &plans {
            let b = build_session(&wr, plan.workflow, &plan.ops);
            clock.set_session_age(&b.session, plan.age_days);
            built.push(b);
        }
        let keep: Vec<_> = plans
            .iter()
            .zip(&built)
            .filter(|(p, _)| p.keep)
            .map(|(_, b)| b.session.clone())
            .collect();
        RetentionConfig { ttl_days, keep }.save(&fs).unwrap();
        // Unreachable artifacts, old or just written.
        let artifacts = ArtifactStore::new(Arc::new(fs.clone()));
        for (n, young) in &orphans {
            let (digest, _) = artifacts.put_object(serde_json::json!({"orphan": n}).as_object().unwrap()).unwrap();
            if *young {
                clock.set_age(layout::artifact_path(&digest), Duration::from_secs(120));
            }
        }
        // Some objects (reachable or not) look recently written.
        let all_objects: Vec<PathBuf> = fs
            .files()
            .into_iter()
            .filter(|p| {
                p.starts_with(layout::SNAPSHOTS_DIR)
                    || p.starts_with(layout::PINNED_WORKFLOWS_DIR)
                    || p.starts_with(layout::ARTIFACTS_DIR)
            })
            .collect();
        for index in &young_objects {
            clock.set_age(index.get(&all_objects).clone(), Duration::from_secs(30));
        }
        let corrupted = match corruption {
            Corruption::None => false,
            Corruption::Segment(i) => {
                let session = &built[i % built.len()].session;
                let dir = layout::events_dir(session);
                let segment = fs.list_dir(&dir).unwrap().pop().unwrap();
                fs.corrupt(&dir.join(segment), |b| {
                    let at = b.len() / 3;
                    b[at] ^= 0x02;
                });
                true
            }
            Corruption::UnknownVersion(i) => {
                let session = &built[i % built.len()].session;
                fs.corrupt(&layout::manifest_path(session), |bytes| {
                    let text = String::from_utf8(bytes.clone()).unwrap();
                    let at = text.rfind("\"v\":1").unwrap();
                    *bytes = format!("{}\"v\":2{}", &text[..at], &text[at + 5..]).into_bytes();
                });
                true
            }
            Corruption::GarbageLine(i) => {
                let session = &built[i % built.len()].session;
                fs.corrupt(&layout::manifest_path(session), |bytes| {
                    bytes.extend_from_slice(b"{\"not\":\"a record\"}\n");
                });
                true
            }
        };

        // The oracle: retained sessions and everything they reach (all node snapshots, not only
        // pins), computed before GC from the protocol's view.
        let expired: BTreeSet<_> = plans
            .iter()
            .zip(&built)
            .filter(|(p, _)| !p.keep && p.age_days >= ttl_days)
            .map(|(_, b)| b.session.clone())
            .collect();
        let mut reach_snapshots = BTreeSet::new();
        let mut reach_workflows = BTreeSet::new();
        let mut reach_artifacts = BTreeSet::new();
        for b in built.iter().filter(|b| !expired.contains(&b.session)) {
            for e in events(&wr, &b.session) {
                match e.data() {
                    EventData::NodeCreated(n) => {
                        reach_snapshots.insert(n.snapshot_ref.clone());
                        reach_workflows.insert(n.workflow_hash.clone());
                    }
                    EventData::RunStarted(r) => {
                        reach_workflows.insert(r.workflow_hash.clone());
                    }
                    EventData::NodeOutputAppended(o) => {
                        if let OutputPayload::ArtifactRef { sha256, .. } = &o.payload {
                            reach_artifacts.insert(sha256.clone());
                        }
                    }
                    _ => {}
                }
            }
        }

        let wr = rec.open(51); // a fresh process: every session validated from disk
        let before = fs.snapshot();
        rec.removed.lock().unwrap().clear();
        let report = wr
            .gc(&GcOptions { dry_run, ttl_days: None }, &clock, &NoProgress)
            .unwrap();

        if corrupted {
            prop_assert!(report.safe_mode, "corruption must put gc in safe mode");
            prop_assert!(!report.warnings.is_empty());
            prop_assert_eq!(fs.snapshot(), before, "safe mode deleted or wrote something");
            prop_assert!(rec.removed().is_empty());
            return Ok(());
        }
        prop_assert!(!report.safe_mode, "{:?}", report.warnings);
        if dry_run {
            prop_assert_eq!(fs.snapshot(), before, "a dry run deleted or wrote something");
        }
        prop_assert!(sessions_removed_before_cas(&rec.removed()));
        let deleted: BTreeSet<_> = report.deleted_sessions.iter().cloned().collect();
        prop_assert_eq!(&deleted, &expired);

        // Safety: everything reachable from a retained session is still there and verifies,
        // and every retained session is healthy and continues.
        let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
        let (snapshots, pinned) = (
            SnapshotStore::new(Arc::clone(&shared)),
            PinnedWorkflowStore::new(Arc::clone(&shared)),
        );
        for s in &reach_snapshots {
            prop_assert!(snapshots.get(s).is_ok(), "reachable snapshot {} deleted", s);
            prop_assert!(!report.deleted_snapshots.contains(s));
        }
        for w in &reach_workflows {
            prop_assert!(pinned.get(w).is_ok(), "reachable workflow {} deleted", w);
        }
        for a in &reach_artifacts {
            prop_assert!(artifacts.get(a).is_ok(), "reachable artifact {} deleted", a);
        }
        for b in built.iter().filter(|b| !expired.contains(&b.session)) {
            prop_assert!(wr.sessions().load_healthy(&b.session).is_ok());
            prop_assert!(wr.continue_workflow(rehydrate(&b.last().state_token)).is_ok());
        }
        if dry_run {
            return Ok(());
        }
        // Liveness: expired sessions are gone, and so is every unreachable object that is not
        // recent.
        for gone in &expired {
            prop_assert!(fs.files().iter().all(|p| !p.starts_with(layout::session_dir(gone))));
        }
        let young: BTreeSet<PathBuf> = clock.times.lock().unwrap().iter()
            .filter(|(_, t)| clock.now.duration_since(**t).unwrap() < workrail::gc::CAS_GRACE)
            .map(|(p, _)| p.clone())
            .collect();
        for s in snapshots.list().unwrap() {
            prop_assert!(reach_snapshots.contains(&s) || young.contains(&layout::snapshot_path(&s)));
        }
        for w in pinned.list().unwrap() {
            prop_assert!(reach_workflows.contains(&w) || young.contains(&layout::pinned_workflow_path(&w)));
        }
        for name in fs.list_dir(std::path::Path::new(layout::ARTIFACTS_DIR)).unwrap() {
            // The directory's lock file (D133) is no object.
            if !name.ends_with(".json") {
                continue;
            }
            let path = PathBuf::from(layout::ARTIFACTS_DIR).join(&name);
            let digest = workrail_spec::ids::Sha256Digest::parse(
                &format!("sha256:{}", name.trim_end_matches(".json")),
            ).unwrap();
            prop_assert!(reach_artifacts.contains(&digest) || young.contains(&path));
        }
    }
}

//! Retention and CAS garbage collection through `Workrail::gc`, with the clock under test
//! control.
//!
//! Guards against: deleting a kept or young session, or a snapshot, pinned workflow or artifact
//! a retained session still needs; keeping expired sessions or unreachable old objects forever;
//! deleting CAS objects before (or without) the sessions that held them; any deletion while a
//! session is corrupt or of an unknown version (safe mode) or while a session is locked by
//! another writer; a dry run that writes; a missing or invalid retention config handled
//! silently.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::bundle_support;
use crate::protocol_support;

use std::path::Path;
use std::sync::Arc;

use bundle_support::*;
use serde_json::json;
use workrail::bundle::NoProgress;
use workrail::gc::{
    GcOptions, GcReport, GcWarningCode, RETENTION_CONFIG_PATH, RetentionConfig, RetentionDecision,
};
use workrail::protocol::Workrail;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail::store::{ArtifactStore, PinnedWorkflowStore, SnapshotStore, layout};
use workrail_spec::closed::SessionHealthKind;
use workrail_spec::error::ErrorCode;
use workrail_spec::event::{EventData, OutputPayload};
use workrail_spec::ids::{SessionId, Sha256Digest, SnapshotRef, WorkflowHash};

use protocol_support::rehydrate;

fn gc(wr: &Workrail, clock: &TestClock, options: GcOptions) -> GcReport {
    wr.gc(&options, clock, &NoProgress).unwrap()
}

fn write_config(fs: &dyn StoreFs, ttl_days: u64, keep: &[&SessionId]) {
    RetentionConfig {
        ttl_days,
        keep: keep.iter().map(|s| (*s).clone()).collect(),
    }
    .save(fs)
    .unwrap();
}

/// Everything a session needs: its node snapshots, its runs' workflows, its artifacts.
fn needs(
    wr: &Workrail,
    session: &SessionId,
) -> (Vec<SnapshotRef>, Vec<WorkflowHash>, Vec<Sha256Digest>) {
    let (mut s, mut w, mut a) = (Vec::new(), Vec::new(), Vec::new());
    for e in events(wr, session) {
        match e.data() {
            EventData::NodeCreated(n) => s.push(n.snapshot_ref.clone()),
            EventData::RunStarted(r) => w.push(r.workflow_hash.clone()),
            EventData::NodeOutputAppended(o) => {
                if let OutputPayload::ArtifactRef { sha256, .. } = &o.payload {
                    a.push(sha256.clone());
                }
            }
            _ => {}
        }
    }
    (s, w, a)
}

fn assert_intact(fs: &MemFs, wr: &Workrail, built: &Built) {
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    let (snapshots, workflows, artifacts) = needs(wr, &built.session);
    for s in snapshots {
        SnapshotStore::new(Arc::clone(&shared)).get(&s).unwrap();
    }
    for w in workflows {
        PinnedWorkflowStore::new(Arc::clone(&shared))
            .get(&w)
            .unwrap();
    }
    for a in artifacts {
        ArtifactStore::new(Arc::clone(&shared)).get(&a).unwrap();
    }
    wr.continue_workflow(rehydrate(&built.last().state_token))
        .unwrap();
}

/// lock: L-GC-RETENTION, L-GC-ROOTS, L-GC-REACHABILITY, L-GC-DELETE-ORDER
#[test]
fn expired_sessions_go_first_then_only_unreachable_old_objects() {
    let rec = RecordingFs::new(MemFs::new());
    let fs = rec.inner.clone();
    let wr = rec.open(41);
    let advance = Op::Advance {
        artifact: true,
        decide: None,
    };
    let old_demo = build_session(&wr, "project.demo", &[advance.clone(), advance.clone()]);
    let one = std::slice::from_ref(&advance);
    let young_demo = build_session(&wr, "project.demo", one);
    let kept = build_session(&wr, "wr.coding_task", one);
    let old_bug = build_session(&wr, "wr.bug_investigation", one);
    let clock = TestClock::new();
    clock.set_session_age(&old_demo.session, 90);
    clock.set_session_age(&young_demo.session, 10);
    clock.set_session_age(&kept.session, 365);
    clock.set_session_age(&old_bug.session, 61);
    write_config(&fs, 60, &[&kept.session]);
    // An unreachable artifact that is old, and one written a minute ago (a writer in flight).
    let artifacts = ArtifactStore::new(Arc::new(fs.clone()));
    let (old_orphan, _) = artifacts
        .put_object(json!({"orphan": "old"}).as_object().unwrap())
        .unwrap();
    let (young_orphan, _) = artifacts
        .put_object(json!({"orphan": "young"}).as_object().unwrap())
        .unwrap();
    clock.set_age(
        layout::artifact_path(&young_orphan),
        std::time::Duration::from_secs(60),
    );
    let (old_needs, bug_needs) = (needs(&wr, &old_demo.session), needs(&wr, &old_bug.session));
    let young_needs = needs(&wr, &young_demo.session);
    rec.removed.lock().unwrap().clear();

    let report = gc(&wr, &clock, GcOptions::default());
    assert!(!report.safe_mode, "{:?}", report.warnings);
    let mut deleted = report.deleted_sessions.clone();
    deleted.sort();
    let mut expected = vec![old_demo.session.clone(), old_bug.session.clone()];
    expected.sort();
    assert_eq!(deleted, expected);
    let decision = |s: &SessionId| {
        report
            .sessions
            .iter()
            .find(|v| &v.session_id == s)
            .unwrap()
            .clone()
    };
    assert_eq!(
        decision(&kept.session).decision,
        RetentionDecision::KeepListed
    );
    assert_eq!(
        decision(&young_demo.session).decision,
        RetentionDecision::WithinTtl
    );
    assert_eq!(decision(&young_demo.session).age_days, Some(10));
    assert!(decision(&old_demo.session).deleted);
    assert!(decision(&old_bug.session).deleted);
    for gone in [&old_demo.session, &old_bug.session] {
        assert!(
            fs.files()
                .iter()
                .all(|p| !p.starts_with(layout::session_dir(gone)))
        );
    }
    // Retained sessions have everything and continue.
    assert_intact(&fs, &wr, &young_demo);
    assert_intact(&fs, &wr, &kept);
    // What only the deleted sessions needed is gone; shared objects (the demo workflow) stay.
    assert!(report.deleted_pinned_workflows.contains(&bug_needs.1[0]));
    assert!(!report.deleted_pinned_workflows.contains(&old_needs.1[0]));
    assert_eq!(old_needs.1[0], young_needs.1[0]);
    for s in bug_needs.0.iter().chain(&old_needs.0) {
        if !young_needs.0.contains(s) {
            assert!(report.deleted_snapshots.contains(s), "{s}");
            assert!(!fs.files().contains(&layout::snapshot_path(s)));
        }
    }
    assert!(report.deleted_artifacts.contains(&old_orphan));
    assert!(!report.deleted_artifacts.contains(&young_orphan));
    assert!(fs.files().contains(&layout::artifact_path(&young_orphan)));
    assert_eq!(report.young_objects_kept, 1);
    // Sessions were removed before any CAS object.
    let removed = rec.removed();
    assert!(removed.iter().any(|p| p.starts_with(layout::SNAPSHOTS_DIR)));
    assert!(sessions_removed_before_cas(&removed), "{removed:?}");

    // A second run has nothing left to do.
    let again = gc(&wr, &clock, GcOptions::default());
    assert!(again.deleted_sessions.is_empty());
    assert!(again.deleted_snapshots.is_empty() && again.deleted_artifacts.is_empty());
}

/// lock: L-GC-SAFE-MODE, L-GC-VALIDATED-FIRST, L-HEALTH-CORRUPTION-CODES
#[test]
fn a_corrupt_or_unknown_version_session_stops_every_deletion() {
    for unknown_version in [false, true] {
        let fs = MemFs::new();
        let wr = open_seeded(&fs, 42);
        let expired = build_session(&wr, "project.demo", &[]);
        let damaged = build_session(&wr, "project.demo", &[]);
        if unknown_version {
            fs.corrupt(&layout::manifest_path(&damaged.session), |bytes| {
                let text = String::from_utf8(bytes.clone()).unwrap();
                *bytes = text.replacen("\"v\":1", "\"v\":7", 1).into_bytes();
            });
        } else {
            let dir = layout::events_dir(&damaged.session);
            let segment = fs.list_dir(&dir).unwrap().pop().unwrap();
            fs.corrupt(&dir.join(segment), |b| b[10] ^= 0x20);
        }
        let artifacts = ArtifactStore::new(Arc::new(fs.clone()));
        artifacts
            .put_object(json!({"orphan": true}).as_object().unwrap())
            .unwrap();
        write_config(&fs, 1, &[]);
        let clock = TestClock::new();
        clock.set_session_age(&expired.session, 30);
        clock.set_session_age(&damaged.session, 30);
        let wr = open_seeded(&fs, 42); // a fresh process: validates from disk
        let before = fs.snapshot();
        for dry_run in [true, false] {
            let report = gc(
                &wr,
                &clock,
                GcOptions {
                    dry_run,
                    ttl_days: None,
                },
            );
            assert!(report.safe_mode);
            assert!(report.deleted_sessions.is_empty());
            assert!(report.deleted_snapshots.is_empty());
            assert!(report.deleted_pinned_workflows.is_empty());
            assert!(report.deleted_artifacts.is_empty());
            let warning = report
                .warnings
                .iter()
                .find(|w| w.session_id.as_ref() == Some(&damaged.session))
                .expect("a warning naming the damaged session");
            if unknown_version {
                assert_eq!(warning.code, GcWarningCode::SafeModeUnknownVersion);
                assert_eq!(warning.health, Some(SessionHealthKind::UnknownVersion));
                assert_eq!(warning.reason.as_deref(), Some("unknown_version"));
            } else {
                assert_eq!(warning.code, GcWarningCode::SafeModeCorruptSession);
                assert_eq!(warning.health, Some(SessionHealthKind::CorruptHead));
                assert_eq!(warning.reason.as_deref(), Some("segment_digest_mismatch"));
            }
            assert!(warning.message.contains("safe mode"));
            assert_eq!(
                fs.snapshot(),
                before,
                "safe mode wrote or deleted something"
            );
        }
    }
}

/// A session whose segment cannot be read (EIO) is not judged: gc deletes nothing, names the
/// session as unreadable (never as damaged) with the OS error, and says what to check, the disk
/// included; once the read works again the same gc runs out of safe mode.
///
/// decision: D221
#[test]
fn a_session_that_cannot_be_read_stops_every_deletion_without_a_verdict() {
    let fs = MemFs::new();
    let wr = open_seeded(&fs, 42);
    let expired = build_session(&wr, "project.demo", &[]);
    let unreadable = build_session(&wr, "project.demo", &[]);
    let dir = layout::events_dir(&unreadable.session);
    let segment = dir.join(fs.list_dir(&dir).unwrap().pop().unwrap());
    fs.fail_reads_of(&segment, Some(5));
    write_config(&fs, 1, &[]);
    let clock = TestClock::new();
    clock.set_session_age(&expired.session, 30);
    clock.set_session_age(&unreadable.session, 30);
    let wr = open_seeded(&fs, 42); // a fresh process: validates from disk
    let before = fs.snapshot();
    let report = gc(&wr, &clock, GcOptions::default());
    assert!(report.safe_mode);
    assert!(report.deleted_sessions.is_empty());
    assert_eq!(
        fs.snapshot(),
        before,
        "safe mode wrote or deleted something"
    );
    let warning = report
        .warnings
        .iter()
        .find(|w| w.session_id.as_ref() == Some(&unreadable.session))
        .expect("a warning naming the unreadable session");
    assert_eq!(warning.code, GcWarningCode::SafeModeUnreadableSession);
    assert_eq!(warning.reason, None, "no verdict: {warning:?}");
    assert!(
        warning.message.contains("os error 5")
            && warning.message.contains("EIO")
            && warning.message.contains("run gc again"),
        "{}",
        warning.message
    );

    fs.fail_reads_of(&segment, None);
    let report = gc(&wr, &clock, GcOptions::default());
    assert!(!report.safe_mode, "{:?}", report.warnings);
    assert_eq!(report.deleted_sessions.len(), 2, "{report:?}");
}

#[test]
fn a_dry_run_reports_exactly_what_a_real_run_deletes_and_writes_nothing() {
    let fs = MemFs::new();
    let wr = open_seeded(&fs, 43);
    let old = build_session(
        &wr,
        "project.demo",
        &[Op::Advance {
            artifact: true,
            decide: None,
        }],
    );
    let young = build_session(&wr, "wr.coding_task", &[]);
    let clock = TestClock::new();
    clock.set_session_age(&old.session, 70);
    clock.set_session_age(&young.session, 3);
    let before = fs.snapshot();
    let dry = gc(
        &wr,
        &clock,
        GcOptions {
            dry_run: true,
            ttl_days: None,
        },
    );
    assert_eq!(fs.snapshot(), before, "a dry run wrote something");
    assert!(
        !fs.files()
            .contains(&Path::new(RETENTION_CONFIG_PATH).to_path_buf())
    );
    assert_eq!(dry.ttl_days, 60, "the default TTL");
    assert_eq!(dry.deleted_sessions, vec![old.session.clone()]);
    assert!(!dry.deleted_snapshots.is_empty() && !dry.deleted_artifacts.is_empty());
    assert!(dry.sessions.iter().all(|s| !s.deleted));
    let real = gc(&wr, &clock, GcOptions::default());
    assert_eq!(real.deleted_sessions, dry.deleted_sessions);
    assert_eq!(real.deleted_snapshots, dry.deleted_snapshots);
    assert_eq!(real.deleted_pinned_workflows, dry.deleted_pinned_workflows);
    assert_eq!(real.deleted_artifacts, dry.deleted_artifacts);
    assert_intact(&fs, &wr, &young);
}

/// lock: L-GC-RETENTION
#[test]
fn the_retention_config_is_created_on_demand_validated_and_overridable() {
    let fs = MemFs::new();
    let wr = open_seeded(&fs, 44);
    let session = build_session(&wr, "project.demo", &[]);
    let clock = TestClock::new();
    clock.set_session_age(&session.session, 20);
    let report = gc(&wr, &clock, GcOptions::default());
    assert!(report.deleted_sessions.is_empty());
    let config: serde_json::Value =
        serde_json::from_slice(&fs.read(Path::new(RETENTION_CONFIG_PATH)).unwrap().unwrap())
            .unwrap();
    assert_eq!(config, json!({"ttlDays": 60, "keep": []}));

    // An invalid config is an error, and nothing is deleted.
    fs.write_new(Path::new(RETENTION_CONFIG_PATH), br#"{"ttlDays": "soon"}"#)
        .unwrap();
    let before = fs.snapshot();
    let err = wr
        .gc(
            &GcOptions {
                dry_run: false,
                ttl_days: Some(0),
            },
            &clock,
            &NoProgress,
        )
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ValidationError);
    assert!(err.message.contains(RETENTION_CONFIG_PATH));
    assert_eq!(fs.snapshot(), before);

    // The keep list protects a session from any TTL; the override applies to this run only.
    write_config(&fs, 60, &[&session.session]);
    let kept = gc(
        &wr,
        &clock,
        GcOptions {
            dry_run: false,
            ttl_days: Some(0),
        },
    );
    assert_eq!(kept.ttl_days, 0);
    assert!(kept.deleted_sessions.is_empty());
    write_config(&fs, 60, &[]);
    let expired = gc(
        &wr,
        &clock,
        GcOptions {
            dry_run: false,
            ttl_days: Some(7),
        },
    );
    assert_eq!(expired.deleted_sessions, vec![session.session.clone()]);
    assert_eq!(RetentionConfig::load(&fs).unwrap().unwrap().ttl_days, 60);
}

/// lock: L-GC-REACHABILITY
#[test]
fn an_expired_session_locked_by_another_writer_is_retained_with_its_objects() {
    let fs = MemFs::new();
    let wr = open_seeded(&fs, 45);
    let busy = build_session(
        &wr,
        "project.demo",
        &[Op::Advance {
            artifact: true,
            decide: None,
        }],
    );
    let clock = TestClock::new();
    clock.set_session_age(&busy.session, 100);
    let lock = fs.try_lock(&layout::lock_path(&busy.session)).unwrap();
    let report = gc(&wr, &clock, GcOptions::default());
    drop(lock);
    assert!(report.deleted_sessions.is_empty());
    let verdict = &report.sessions[0];
    assert_eq!(verdict.decision, RetentionDecision::Locked);
    assert!(!verdict.deleted);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.code == GcWarningCode::SessionLocked
                && w.session_id.as_ref() == Some(&busy.session))
    );
    assert!(report.deleted_snapshots.is_empty() && report.deleted_artifacts.is_empty());
    assert_intact(&fs, &wr, &busy);
    // Once the lock is free it goes.
    let report = gc(&wr, &clock, GcOptions::default());
    assert_eq!(report.deleted_sessions, vec![busy.session.clone()]);
}

#[test]
fn an_imported_session_keeps_its_objects_alive() {
    let source_fs = MemFs::new();
    let source = open_seeded(&source_fs, 46);
    let built = build_session(
        &source,
        "project.demo",
        &[Op::Advance {
            artifact: true,
            decide: None,
        }],
    );
    let text = export(&source, &built.session).text;
    let fs = MemFs::new();
    let wr = open_seeded(&fs, 47);
    let report = wr
        .import_bundle(&text, &Default::default(), &NoProgress)
        .unwrap();
    let clock = TestClock::new();
    clock.set_session_age(&report.session_id, 1);
    let gc_report = gc(&wr, &clock, GcOptions::default());
    assert!(gc_report.deleted_sessions.is_empty());
    assert!(gc_report.deleted_snapshots.is_empty());
    assert!(gc_report.deleted_pinned_workflows.is_empty());
    assert!(gc_report.deleted_artifacts.is_empty());
    let resumed = report.runs[0].resume.clone().unwrap();
    wr.continue_workflow(rehydrate(&resumed.state_token))
        .unwrap();
}

/// Decision D63: what crashed writers left goes once it is older than the grace period: temp
/// files in the store's directories and session directories whose first append never
/// committed (under their lock). Young leftovers, a locked one, and everything while GC is in
/// safe mode stay; a dry run reports exactly what a real run deletes.
#[test]
fn leftovers_of_crashed_writers_go_after_the_grace_period() {
    use workrail::gc::CAS_GRACE;
    let fs = MemFs::new();
    let wr = open_seeded(&fs, 47);
    let live = build_session(
        &wr,
        "project.demo",
        &[Op::Advance {
            artifact: true,
            decide: None,
        }],
    );
    let clock = TestClock::new();
    clock.set_session_age(&live.session, 1);
    let young = CAS_GRACE / 2;
    // Temp files: old ones in several store directories, a young one in flight.
    let old_temps = [
        Path::new(layout::SNAPSHOTS_DIR).join(".tmp-1-00-0-a.json"),
        Path::new(layout::ARTIFACTS_DIR).join(".tmp-1-00-1-b.json"),
        layout::events_dir(&live.session).join(".tmp-1-00-2-00000009-00000012.jsonl"),
        Path::new(layout::DATA_CACHE_DIR).join(".tmp-1-00-3-resume-index.v1.jsonl"),
    ];
    fs.create_dir_all(Path::new(layout::DATA_CACHE_DIR))
        .unwrap();
    for path in &old_temps {
        fs.write_new(path, b"half a write").unwrap();
    }
    let in_flight = Path::new(layout::SNAPSHOTS_DIR).join(".tmp-2-00-0-c.json");
    fs.write_new(&in_flight, b"being written").unwrap();
    clock.set_age(&in_flight, young);
    // Session directories without truth: an old one (with its torn first segment), a young one,
    // and an old one a writer holds.
    let uncommitted = |seed: u8| {
        let id = SessionId::from_entropy(&[seed; 10]);
        fs.create_dir_all(&layout::events_dir(&id)).unwrap();
        fs.write_new(
            &layout::events_dir(&id).join(".tmp-3-00-0-00000000-00000001.jsonl"),
            b"{",
        )
        .unwrap();
        id
    };
    let (abandoned, starting, held) = (uncommitted(1), uncommitted(2), uncommitted(3));
    clock.set_age(layout::session_dir(&starting), young);
    let report_of = |dry_run| {
        gc(
            &wr,
            &clock,
            GcOptions {
                dry_run,
                ttl_days: None,
            },
        )
    };
    let lock = fs.try_lock(&layout::lock_path(&held)).unwrap();
    let before = fs.snapshot();
    let dry = report_of(true);
    assert_eq!(fs.snapshot(), before, "a dry run wrote something");
    let real = report_of(false);
    drop(lock);
    assert_eq!(real.deleted_uncommitted_sessions, vec![abandoned.clone()]);
    // A dry run takes no lock, so it also names the one a writer holds.
    let mut would = vec![abandoned.clone(), held.clone()];
    would.sort();
    assert_eq!(dry.deleted_uncommitted_sessions, would);
    let mut expected: Vec<String> = old_temps
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    expected.sort();
    let mut deleted = real.deleted_temp_files.clone();
    deleted.sort();
    assert_eq!(deleted, expected);
    assert_eq!(dry.deleted_temp_files, real.deleted_temp_files);
    let files = fs.files();
    assert!(old_temps.iter().all(|p| !files.contains(p)));
    assert!(
        files.contains(&in_flight),
        "a temp file in flight was deleted"
    );
    assert!(
        !files
            .iter()
            .any(|f| f.starts_with(layout::session_dir(&abandoned)))
    );
    for kept in [&starting, &held] {
        assert!(
            files
                .iter()
                .any(|f| f.starts_with(layout::session_dir(kept))),
            "{kept} was deleted"
        );
    }
    assert_intact(&fs, &wr, &live);
    // Once free, the held one goes too.
    assert_eq!(report_of(false).deleted_uncommitted_sessions, vec![held]);

    // Safe mode deletes no leftover either.
    let leftover = Path::new(layout::SNAPSHOTS_DIR).join(".tmp-4-00-0-d.json");
    fs.write_new(&leftover, b"x").unwrap();
    let manifest = layout::manifest_path(&live.session);
    let mut bytes = fs.read(&manifest).unwrap().unwrap();
    bytes.extend_from_slice(b"garbage\n");
    fs.write_new(&manifest, &bytes).unwrap();
    let safe = report_of(false);
    assert!(safe.safe_mode);
    assert!(safe.deleted_temp_files.is_empty() && safe.deleted_uncommitted_sessions.is_empty());
    assert!(fs.files().contains(&leftover));
}

/// The persisted resume index (D64) holds every session's notes: GC removes it when it deletes
/// a session (never in a dry run, never in safe mode) and leaves it alone otherwise; the next
/// `resume_session` rebuilds it without the deleted session.
/// lock: L-CACHE-DERIVED, L-GC-RETENTION
#[test]
fn deleting_a_session_removes_the_resume_index_that_summarizes_it() {
    let fs = MemFs::new();
    let wr = open_seeded(&fs, 48);
    let old = build_session(&wr, "project.demo", &[]);
    let young = build_session(&wr, "project.demo", &[]);
    let clock = TestClock::new();
    clock.set_session_age(&old.session, 90);
    clock.set_session_age(&young.session, 1);
    write_config(&fs, 60, &[]);
    let index = Path::new(layout::RESUME_INDEX_FILE);
    let resume = |wr: &Workrail| {
        wr.resume_session(workrail_spec::tools::ResumeSessionInput::default())
            .unwrap()
    };
    assert_eq!(resume(&wr).candidates.len(), 2);
    let written = fs.read(index).unwrap().unwrap();
    let dry = gc(
        &wr,
        &clock,
        GcOptions {
            dry_run: true,
            ttl_days: None,
        },
    );
    assert_eq!(dry.deleted_sessions, vec![old.session.clone()]);
    assert_eq!(fs.read(index).unwrap(), Some(written.clone()), "a dry run");
    let report = gc(&wr, &clock, GcOptions::default());
    assert_eq!(report.deleted_sessions, vec![old.session.clone()]);
    assert!(
        fs.read(index).unwrap().is_none(),
        "the index outlived a deleted session"
    );
    // Rebuilt without it, by this process and by a fresh one.
    for reader in [&wr, &open_seeded(&fs, 49)] {
        let out = resume(reader);
        assert_eq!(out.candidates.len(), 1);
        assert_eq!(out.candidates[0].session_id, young.session);
    }
    let rebuilt = String::from_utf8(fs.read(index).unwrap().unwrap()).unwrap();
    assert!(!rebuilt.contains(old.session.as_str()));
    // Nothing to delete: the index stays.
    gc(&wr, &clock, GcOptions::default());
    assert_eq!(fs.read(index).unwrap().unwrap(), rebuilt.into_bytes());
}

/// A data directory that never had a session (no `sessions/`) is collected without error:
/// there is no deletion to make durable before the sweep (decision D200). On the real
/// filesystem, whose directory fsync of a missing path fails.
/// decision: D200
#[test]
fn gc_of_a_data_directory_without_sessions_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let fs: Arc<dyn StoreFs> = Arc::new(workrail::store::fs::OsFs::new(dir.path()));
    let wr = Workrail::with_parts(
        fs,
        protocol_support::catalog(),
        Arc::new(workrail::entropy::SeededEntropy::new(45)),
    )
    .unwrap();
    assert!(
        !dir.path().join(layout::SESSIONS_DIR).exists(),
        "no sessions/ yet"
    );
    let report = gc(&wr, &TestClock::new(), GcOptions::default());
    assert!(report.deleted_sessions.is_empty());
}

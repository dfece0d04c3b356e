//! The append transaction, load validation, health, locking and the content-addressed stores
//! behave exactly as locked (locks §1, §10, §13, §15).
//!
//! Guards against partial truth: a segment that counts without its manifest record, pins written
//! before the segment is closed, a duplicate append on retry, orphan segments being scanned, an
//! unhealthy session reaching an execution path.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::store_support;

use std::path::Path;
use std::sync::Arc;

use store_support::*;
use workrail::store::fs::{OsFs, StoreFs};
use workrail::store::memfs::MemFs;
use workrail::store::{
    Committed, CorruptionReason, KeyringStore, PinnedWorkflowStore, SegmentLimits, SessionHealth,
    SessionRead, SessionStore, SnapshotStore, StoreError,
};
use workrail_spec::closed::SessionHealthKind;
use workrail_spec::error::{ErrorCode, Retry};
use workrail_spec::event::EventKind;
use workrail_spec::manifest::ManifestRecord;

fn manifest_text(fs: &MemFs) -> String {
    let path = Path::new("sessions")
        .join(session().as_str())
        .join("manifest.jsonl");
    String::from_utf8(fs.read(&path).unwrap().unwrap()).unwrap()
}

/// lock: L-STORE-COMMIT-SEGMENT, L-STORE-COMMIT-ATTEST, L-STORE-COMMIT-PIN, L-MANIFEST-PIN-ON-CREATE, L-DATADIR-LAYOUT, L-DATADIR-RELATIVE-PATHS
#[test]
fn an_append_writes_a_segment_then_attests_it_then_pins_its_snapshots() {
    let fx = Fixture::new();
    fx.append(start_plan(&fx.snapshots)).unwrap();
    fx.append(advance_plan(&fx.snapshots, 0, 1)).unwrap();
    let dir = format!("sessions/{}", session());
    let files: Vec<String> = fx
        .fs
        .files()
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    for expected in [
        format!("{dir}/events/00000000-00000002.jsonl"),
        format!("{dir}/events/00000003-00000005.jsonl"),
        format!("{dir}/manifest.jsonl"),
        format!("{dir}/.lock"),
    ] {
        assert!(
            files.contains(&expected),
            "{expected} missing from {files:?}"
        );
    }
    assert!(
        !files.iter().any(|f| f.contains(".tmp-")),
        "temp segments are renamed: {files:?}"
    );
    assert_eq!(
        files.iter().filter(|f| f.starts_with("snapshots/")).count(),
        2
    );
    let loaded = fx.store.load(&session()).unwrap();
    assert_eq!(loaded.health, SessionHealth::Healthy);
    let kinds: Vec<&str> = loaded
        .manifest_records()
        .unwrap()
        .into_iter()
        .map(|r| r.kind().as_str())
        .collect();
    assert_eq!(
        kinds,
        [
            "segment_closed",
            "snapshot_pinned",
            "segment_closed",
            "snapshot_pinned"
        ],
        "each segment is attested, then its snapshots are pinned"
    );
    for record in loaded.manifest_records().unwrap() {
        if let ManifestRecord::SegmentClosed(s) = record {
            assert!(
                s.segment_rel_path.starts_with("events/"),
                "relative path: {}",
                s.segment_rel_path
            );
        }
    }
    let text = manifest_text(&fx.fs);
    assert!(
        !text.contains("/work") && !text.contains("sessions/"),
        "no absolute or root paths in records"
    );
}

/// lock: L-EVENT-INDEX-ZERO-BASED, L-STORE-CONTIGUITY, L-MANIFEST-INDEX
#[test]
fn indices_start_at_zero_and_segments_are_contiguous() {
    let fx = Fixture::new();
    fx.append(start_plan(&fx.snapshots)).unwrap();
    fx.append(advance_plan(&fx.snapshots, 0, 1)).unwrap();
    fx.append(notes_plan(1)).unwrap();
    let loaded = fx.store.load(&session()).unwrap();
    for (i, event) in loaded.events().all().unwrap().iter().enumerate() {
        assert_eq!(event.event_index().get(), i as u64);
    }
    for (i, record) in loaded.manifest_records().unwrap().into_iter().enumerate() {
        assert_eq!(record.manifest_index().get(), i as u64);
    }
    let mut next = 0;
    for record in loaded.manifest_records().unwrap() {
        if let ManifestRecord::SegmentClosed(s) = record {
            assert_eq!(s.first_event_index.get(), next);
            next = s.last_event_index.get() + 1;
        }
    }
    assert_eq!(next, loaded.event_count() as u64);
    // A manifest whose segments skip an index is not contiguous: load stops there.
    let text = manifest_text(&fx.fs);
    let gap = text
        .replacen("\"firstEventIndex\":3", "\"firstEventIndex\":4", 1)
        .replacen(
            "events/00000003-00000005.jsonl",
            "events/00000004-00000005.jsonl",
            1,
        );
    let path = Path::new("sessions")
        .join(session().as_str())
        .join("manifest.jsonl");
    fx.fs.corrupt(&path, |bytes| *bytes = gap.into_bytes());
    let reloaded = Fixture::on(fx.fs.clone());
    let loaded = reloaded.store.load(&session()).unwrap();
    assert_eq!(
        loaded.event_count(),
        3,
        "the validated prefix ends before the gap"
    );
    let SessionHealth::CorruptTail(c) = &loaded.health else {
        panic!("{:?}", loaded.health)
    };
    assert_eq!(c.reason, CorruptionReason::SegmentNotContiguous, "{c:?}");
}

/// lock: L-DEDUPE-NOOP
#[test]
fn an_event_whose_dedupe_key_is_committed_is_an_idempotent_no_op() {
    let fx = Fixture::new();
    fx.append(start_plan(&fx.snapshots)).unwrap();
    let before = fx.fs.snapshot();
    let results = fx
        .store
        .with_append_gate(&session(), workrail::store::SessionIntent::Create, |gate| {
            gate.append(start_plan(&fx.snapshots))
        })
        .unwrap();
    assert!(results.iter().all(|r| !r.newly_appended));
    assert_eq!(
        results[0].event.event_index().get(),
        0,
        "the existing event is returned"
    );
    // The object directory's lock (D133), made by the first refresh of an object, is no data.
    assert_eq!(
        without_locks(fx.fs.snapshot()),
        without_locks(before),
        "nothing was written"
    );
    // A plan mixing committed and new events commits only the new ones.
    let mut mixed = notes_plan(1);
    mixed
        .events
        .insert(0, start_plan(&fx.snapshots).events.remove(1));
    let results = fx
        .store
        .with_append_gate(&session(), workrail::store::SessionIntent::Create, |gate| {
            gate.append(mixed)
        })
        .unwrap();
    assert_eq!(
        results.iter().map(|r| r.newly_appended).collect::<Vec<_>>(),
        [false, true]
    );
    assert_eq!(results[1].event.event_index().get(), 3);
}

/// lock: L-STORE-ORPHAN-SEGMENT
#[test]
fn orphan_segments_are_ignored_and_never_read() {
    let fx = Fixture::new();
    fx.append(start_plan(&fx.snapshots)).unwrap();
    let events = Path::new("sessions")
        .join(session().as_str())
        .join("events");
    let orphan = events.join("00000003-00000009.jsonl");
    fx.fs.write_new(&orphan, b"{not even json").unwrap();
    fx.fs
        .write_new(&events.join(".tmp-00000003-00000004.jsonl"), b"garbage")
        .unwrap();
    let reopened = Fixture::on(fx.fs.clone());
    let loaded = reopened.store.load(&session()).unwrap();
    assert_eq!(loaded.health, SessionHealth::Healthy);
    assert_eq!(loaded.event_count(), 3);
    assert!(
        !fx.fs
            .reads()
            .iter()
            .any(|p| p == &orphan || p.to_string_lossy().contains(".tmp-")),
        "orphans must never be opened: {:?}",
        fx.fs.reads()
    );
    // Appending over an orphan's range works: the orphan is replaced, not merged.
    reopened
        .append(advance_plan(&reopened.snapshots, 0, 1))
        .unwrap();
    assert_eq!(reopened.store.load(&session()).unwrap().event_count(), 6);
}

/// lock: L-STORE-SEGMENT-DIGEST, L-STORE-LOAD-VALIDATE, L-HEALTH-CLOSED-SET
#[test]
fn corruption_is_classified_and_load_stops_at_the_last_valid_entry() {
    let build = || {
        let fx = Fixture::new();
        fx.append(start_plan(&fx.snapshots)).unwrap();
        fx.append(advance_plan(&fx.snapshots, 0, 1)).unwrap();
        fx
    };
    let session_dir = Path::new("sessions").join(session().as_str());
    let first = session_dir.join("events/00000000-00000002.jsonl");
    let second = session_dir.join("events/00000003-00000005.jsonl");
    let flip = |bytes: &mut Vec<u8>| {
        let i = bytes.len() / 2;
        bytes[i] ^= 0x01;
    };

    // First segment damaged: no usable prefix.
    let fx = build();
    fx.fs.corrupt(&first, flip);
    let loaded = Fixture::on(fx.fs.clone()).store.load(&session()).unwrap();
    assert_eq!(loaded.health.kind(), SessionHealthKind::CorruptHead);
    assert_eq!(
        loaded.health.corruption().unwrap().reason,
        CorruptionReason::SegmentDigestMismatch
    );
    assert_eq!(loaded.event_count(), 0);

    // Second segment damaged: the first transaction is the validated prefix.
    let fx = build();
    fx.fs.corrupt(&second, flip);
    let loaded = Fixture::on(fx.fs.clone()).store.load(&session()).unwrap();
    assert_eq!(loaded.health.kind(), SessionHealthKind::CorruptTail);
    assert_eq!(loaded.event_count(), 3);
    assert_eq!(loaded.manifest.len(), 2);

    // A missing segment file.
    let fx = build();
    fx.fs.remove_file(&second).unwrap();
    let loaded = Fixture::on(fx.fs.clone()).store.load(&session()).unwrap();
    assert_eq!(
        loaded.health.corruption().unwrap().reason,
        CorruptionReason::SegmentMissing
    );

    // An unknown manifest version is its own class.
    let fx = build();
    let manifest = session_dir.join("manifest.jsonl");
    fx.fs.corrupt(&manifest, |bytes| {
        let text = String::from_utf8(bytes.clone()).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        lines[2] = lines[2].replace("\"v\":1", "\"v\":2");
        *bytes = (lines.join("\n") + "\n").into_bytes();
    });
    let loaded = Fixture::on(fx.fs.clone()).store.load(&session()).unwrap();
    assert_eq!(loaded.health.kind(), SessionHealthKind::UnknownVersion);
    assert_eq!(
        loaded.event_count(),
        3,
        "salvage keeps the validated prefix"
    );

    // A garbage line in the middle of the manifest.
    let fx = build();
    fx.fs.corrupt(&manifest, |bytes| {
        let text = String::from_utf8(bytes.clone()).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        lines[2] = "{\"v\":1,\"kind\":\"segment_closed\"";
        *bytes = (lines.join("\n") + "\n").into_bytes();
    });
    let loaded = Fixture::on(fx.fs.clone()).store.load(&session()).unwrap();
    assert_eq!(
        loaded.health.corruption().unwrap().reason,
        CorruptionReason::ManifestUnparseable
    );
    assert_eq!(loaded.health.kind(), SessionHealthKind::CorruptTail);
}

/// lock: L-HEALTH-EXECUTION-GATE, L-HEALTH-SALVAGE-READ-ONLY
#[test]
fn execution_paths_require_a_healthy_session() {
    let fx = Fixture::new();
    fx.append(start_plan(&fx.snapshots)).unwrap();
    fx.append(advance_plan(&fx.snapshots, 0, 1)).unwrap();
    let second = Path::new("sessions")
        .join(session().as_str())
        .join("events/00000003-00000005.jsonl");
    fx.fs.corrupt(&second, |b| b.truncate(b.len() - 3));
    let reopened = Fixture::on(fx.fs.clone());
    // Salvage read: the prefix, clearly labelled.
    let salvage = reopened.store.load(&session()).unwrap();
    assert_eq!(salvage.health.kind(), SessionHealthKind::CorruptTail);
    assert_eq!(salvage.event_count(), 3);
    // Execution read and append both refuse.
    let err = reopened.store.load_healthy(&session()).unwrap_err();
    assert!(matches!(err, StoreError::Unhealthy { .. }));
    assert_eq!(err.to_envelope(true).code, ErrorCode::SessionCorrupt);
    let before = reopened.fs.snapshot();
    let err = reopened.append(notes_plan(1)).unwrap_err();
    assert!(matches!(err, StoreError::Unhealthy { .. }), "{err}");
    assert_eq!(
        reopened.fs.snapshot(),
        before,
        "no write reached a salvaged session"
    );
}

/// lock: L-WRITER-BUSY, L-WRITER-RETRY-GUIDANCE, L-STORE-COMMIT-UNDER-LOCK
#[test]
fn a_second_writer_waits_a_bounded_moment_then_gets_retryable_guidance() {
    let fx = Fixture::new();
    fx.append(start_plan(&fx.snapshots)).unwrap();
    let inner = fx
        .store
        .with_append_gate(
            &session(),
            workrail::store::SessionIntent::Create,
            |_gate| {
                // While this gate holds the lock, any other writer waits its bounded moment (the
                // store's lock wait), then is refused.
                Ok::<_, StoreError>(fx.append(notes_plan(1)))
            },
        )
        .unwrap();
    let err = inner.unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }));
    for (token_flow, code) in [
        (true, ErrorCode::TokenSessionLocked),
        (false, ErrorCode::SessionLocked),
    ] {
        let envelope = err.to_envelope(token_flow);
        assert_eq!(envelope.code, code);
        assert!(matches!(envelope.retry, Retry::RetryableAfterMs { after_ms } if after_ms > 0));
        assert!(
            envelope.suggestion.contains("Retry in about a second"),
            "{}",
            envelope.suggestion
        );
    }
    // The lock is released with the gate.
    fx.append(notes_plan(1)).unwrap();
}

/// lock: L-STORE-APPEND-ONLY-MUTATION, L-TOKEN-WITNESS
#[test]
fn appends_happen_only_through_the_gate_and_an_io_failure_poisons_it() {
    let fx = Fixture::new();
    fx.append(start_plan(&fx.snapshots)).unwrap();
    // Fail the fsync of the next segment (op 2 of the append), then try again on the same gate.
    fx.fs.fail_at(2);
    let outcome =
        fx.store
            .with_append_gate(&session(), workrail::store::SessionIntent::Create, |gate| {
                let first = gate.append(notes_plan(1));
                let second = gate.append(notes_plan(2));
                Ok::<_, StoreError>((first, second))
            });
    let (first, second) = outcome.unwrap();
    // The error names the step, the path and the OS error, and that nothing was committed.
    let Err(first) = first else {
        panic!("the failed fsync was reported as success")
    };
    assert!(
        matches!(
            &first,
            StoreError::Write { committed: Committed::Nothing, errno: Some("EIO"), path, .. }
                if path.contains("events")
        ),
        "{first:?}"
    );
    let envelope = first.to_envelope(true);
    assert_eq!(envelope.code, ErrorCode::StoreIoError);
    assert!(
        envelope.message.contains("Nothing was committed"),
        "{}",
        envelope.message
    );
    assert_eq!(envelope.details.as_ref().unwrap()["committed"], "nothing");
    assert!(
        matches!(second, Err(StoreError::Poisoned { .. })),
        "{second:?}"
    );
    // A new gate reloads from disk: the failed plan never became truth; the next one does.
    assert_eq!(fx.kinds().len(), 3);
    fx.append(notes_plan(2)).unwrap();
    assert_eq!(fx.kinds().len(), 4);
}

/// lock: L-STORE-ROTATION
#[test]
fn a_plan_beyond_the_segment_limits_is_refused_whole() {
    let fs = MemFs::new();
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    let store = SessionStore::with_limits(
        Arc::clone(&shared),
        SegmentLimits {
            max_events: 2,
            max_bytes: 1 << 20,
        },
    );
    let snapshots = SnapshotStore::new(shared);
    let err = store
        .with_append_gate(&session(), workrail::store::SessionIntent::Create, |gate| {
            gate.append(start_plan(&snapshots))
        })
        .unwrap_err();
    assert!(matches!(err, StoreError::InvalidPlan { .. }), "{err}");
    assert!(store.load(&session()).is_err(), "nothing was committed");
}

/// lock: L-SNAPSHOT-CAS-STORE, L-HASH-PINNED-PERSISTED
#[test]
fn content_addressed_objects_roundtrip_and_detect_damage() {
    let fs = MemFs::new();
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    let snapshots = SnapshotStore::new(Arc::clone(&shared));
    let snap = snapshot(3);
    let r = snapshots.put(&snap).unwrap();
    assert_eq!(r, snap.snapshot_ref().unwrap());
    let ops = fs.ops();
    let before = fs.snapshot();
    assert_eq!(snapshots.put(&snap).unwrap(), r);
    // An existing object is checked, not rewritten; only its directory entry is made durable
    // (its writer may have died before that fsync).
    assert_eq!(fs.ops(), ops + 1, "one directory fsync, no write");
    assert_eq!(without_locks(fs.snapshot()), without_locks(before));
    assert_eq!(snapshots.get(&r).unwrap(), snap);
    assert_eq!(snapshots.list().unwrap(), vec![r.clone()]);
    fs.corrupt(&workrail::store::layout::snapshot_path(&r), |b| {
        *b = String::from_utf8(b.clone())
            .unwrap()
            .replace("init", "complete")
            .replace("complete\"}}", "init\"}}")
            .into_bytes();
        b.push(b' ');
    });
    // Whitespace changes the bytes but not the canonical content; a content change is caught.
    let other = snapshot(4);
    let other_ref = snapshots.put(&other).unwrap();
    let path = workrail::store::layout::snapshot_path(&other_ref);
    fs.corrupt(&path, |b| {
        *b = serde_json::to_vec(&snapshot(5)).unwrap();
    });
    assert!(matches!(
        snapshots.get(&other_ref),
        Err(StoreError::CorruptObject { .. })
    ));

    let pinned = PinnedWorkflowStore::new(shared);
    let missing = workrail_spec::ids::WorkflowHash::from_digest(
        workrail_spec::ids::Sha256Digest::from_bytes(&[9; 32]),
    );
    assert!(matches!(
        pinned.get(&missing),
        Err(StoreError::MissingObject { .. })
    ));
}

/// A process that did not write an object verifies it when it first reads it: canonical bytes
/// by their hash alone, bytes in another but equivalent form by the hash of what they parse to,
/// and anything else is corruption. The compiler's canonical bytes pin the same object `put`
/// would.
/// lock: L-SNAPSHOT-CAS-STORE, L-HASH-PINNED-PERSISTED
#[test]
fn a_fresh_process_verifies_canonical_and_equivalent_objects_and_refuses_changed_ones() {
    use workrail::compiler::{CompileContext, compile};
    let fs = MemFs::new();
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    let compiled = compile(
        &serde_json::json!({
            "id": "project.pin", "name": "Pin", "description": "Pinned.",
            "steps": [{"id": "one", "title": "One", "prompt": "Do one."}]
        }),
        &CompileContext::load("project"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let writer = PinnedWorkflowStore::new(Arc::clone(&shared));
    let hash = writer
        .put_canonical(&compiled.snapshot, &compiled.canonical)
        .unwrap();
    assert_eq!(hash, compiled.workflow_hash);
    assert_eq!(writer.put(&compiled.snapshot).unwrap(), hash);
    let snap = snapshot(3);
    let snap_ref = SnapshotStore::new(Arc::clone(&shared)).put(&snap).unwrap();
    let fresh = || {
        (
            SnapshotStore::new(Arc::clone(&shared)),
            PinnedWorkflowStore::new(Arc::clone(&shared)),
        )
    };
    let (snapshots, pinned) = fresh();
    assert_eq!(*snapshots.get_shared(&snap_ref).unwrap(), snap);
    assert_eq!(*pinned.get_shared(&hash).unwrap(), compiled.snapshot);

    let workflow_path = workrail::store::layout::pinned_workflow_path(&hash);
    let snapshot_path = workrail::store::layout::snapshot_path(&snap_ref);
    for path in [&workflow_path, &snapshot_path] {
        fs.corrupt(path, |b| {
            let value: serde_json::Value = serde_json::from_slice(b).unwrap();
            *b = serde_json::to_vec_pretty(&value).unwrap();
        });
    }
    let (snapshots, pinned) = fresh();
    assert_eq!(*snapshots.get_shared(&snap_ref).unwrap(), snap);
    assert_eq!(*pinned.get_shared(&hash).unwrap(), compiled.snapshot);

    fs.corrupt(&workflow_path, |b| {
        *b = String::from_utf8(b.clone())
            .unwrap()
            .replace("Do one.", "Do two.")
            .into_bytes();
    });
    fs.corrupt(&snapshot_path, |b| {
        *b = serde_json::to_vec(&snapshot(4)).unwrap();
    });
    let (snapshots, pinned) = fresh();
    assert!(matches!(
        pinned.get_shared(&hash),
        Err(StoreError::CorruptObject { .. })
    ));
    assert!(matches!(
        snapshots.get_shared(&snap_ref),
        Err(StoreError::CorruptObject { .. })
    ));
}

/// lock: L-TOKEN-KEY-MATERIAL, L-TOKEN-ROTATION
#[test]
fn the_keyring_is_private_created_once_and_rotates_explicitly() {
    let dir = tempfile::tempdir().unwrap();
    let fs: Arc<dyn StoreFs> = Arc::new(OsFs::new(dir.path()));
    let entropy = workrail::entropy::SeededEntropy::new(1);
    let keys = KeyringStore::new(Arc::clone(&fs));
    let first = keys.load_or_create(&entropy).unwrap().keyring;
    assert!(first.previous.is_none());
    assert_eq!(first.current.secret.len(), 32);
    assert_eq!(
        keys.load_or_create(&entropy).unwrap().keyring,
        first,
        "created once, then read back"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("keys/keyring.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let rotated = keys.rotate(&entropy).unwrap().keyring;
    assert_eq!(rotated.previous.as_ref(), Some(&first.current));
    assert_ne!(rotated.current, first.current);
    let again = keys.rotate(&entropy).unwrap().keyring;
    assert_eq!(
        again.previous.as_ref(),
        Some(&rotated.current),
        "only one previous key is kept"
    );
    assert!(
        !format!("{again:?}").contains(&format!("{:?}", again.current.secret)),
        "secrets are redacted"
    );
}

/// lock: L-WRITER-OS-LOCK
#[test]
fn the_session_lock_is_an_os_lock_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("child-ready");
    let release = dir.path().join("child-release");
    // The helper's test name is its path within the test binary, less the binary's crate.
    let holder = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::lock_holder_process"),
        None => "lock_holder_process".to_owned(),
    };
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &holder, "--include-ignored", "--nocapture"])
        .env("WORKRAIL_LOCK_TEST_DIR", dir.path())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !ready.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "child never took the lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let fs: Arc<dyn StoreFs> = Arc::new(OsFs::new(dir.path()));
    let store = SessionStore::new(Arc::clone(&fs));
    let snapshots = SnapshotStore::new(fs);
    let err = store
        .with_append_gate(&session(), workrail::store::SessionIntent::Create, |gate| {
            gate.append(notes_plan(1))
        })
        .unwrap_err();
    assert!(matches!(err, StoreError::Locked { .. }), "{err}");
    std::fs::write(&release, b"").unwrap();
    assert!(child.wait().unwrap().success());
    // Once the other process is gone, this one writes and reads the child's truth.
    store
        .with_append_gate(&session(), workrail::store::SessionIntent::Create, |gate| {
            gate.append(advance_plan(&snapshots, 0, 1))
        })
        .unwrap();
    assert_eq!(store.load(&session()).unwrap().event_count(), 6);
}

/// Helper process for `the_session_lock_is_an_os_lock_across_processes`: holds the session lock
/// until told to release it. Runs only when that test spawns it.
#[test]
#[ignore = "spawned as a separate process by the_session_lock_is_an_os_lock_across_processes"]
fn lock_holder_process() {
    let Some(dir) = std::env::var_os("WORKRAIL_LOCK_TEST_DIR") else {
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let fs: Arc<dyn StoreFs> = Arc::new(OsFs::new(&dir));
    let store = SessionStore::new(Arc::clone(&fs));
    let snapshots = SnapshotStore::new(fs);
    store
        .with_append_gate(&session(), workrail::store::SessionIntent::Create, |gate| {
            gate.append(start_plan(&snapshots))?;
            std::fs::write(dir.join("child-ready"), b"").unwrap();
            while !dir.join("child-release").exists() {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Ok::<_, StoreError>(())
        })
        .unwrap();
}

#[test]
fn sessions_are_listed_and_unknown_ones_are_not_found() {
    let fx = Fixture::new();
    assert!(matches!(
        fx.store.load(&session()),
        Err(StoreError::NotFound { .. })
    ));
    fx.append(start_plan(&fx.snapshots)).unwrap();
    assert_eq!(fx.store.list_sessions().unwrap(), vec![session()]);
    assert_eq!(
        fx.kinds()[..3],
        [
            EventKind::SessionCreated,
            EventKind::RunStarted,
            EventKind::NodeCreated
        ]
    );
}

/// lock: L-SNAPSHOT-CAS-STORE
#[test]
fn storing_an_existing_object_again_refreshes_it_for_the_gc_grace_period() {
    let dir = tempfile::tempdir().unwrap();
    let fs: Arc<dyn StoreFs> = Arc::new(OsFs::new(dir.path()));
    let snapshots = SnapshotStore::new(Arc::clone(&fs));
    let r = snapshots.put(&snapshot(7)).unwrap();
    let path = dir.path().join(workrail::store::layout::snapshot_path(&r));
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(30 * 24 * 3600);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let bytes = std::fs::read(&path).unwrap();
    // A new session reuses the object: it must not look unreachable-and-old to a running GC.
    assert_eq!(snapshots.put(&snapshot(7)).unwrap(), r);
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    assert!(modified > old + std::time::Duration::from_secs(3600));
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "not rewritten");
}

/// What a commit's `alongside` write (the plan's snapshot) saw of the segment and the manifest
/// while it ran: (a segment file existed at some moment, the manifest held a record at any
/// moment).
fn seen_alongside(fs: MemFs, wait_for_segment: std::time::Duration) -> (bool, bool) {
    let fx = Fixture::on(fs);
    let events = workrail::store::layout::events_dir(&session());
    let manifest = workrail::store::layout::manifest_path(&session());
    let watcher = fx.fs.clone();
    let (_, seen) = fx
        .store
        .with_append_gate(&session(), workrail::store::SessionIntent::Create, |gate| {
            gate.append_alongside(start_plan(&fx.snapshots), move || {
                let deadline = std::time::Instant::now() + wait_for_segment;
                let mut manifest_seen = false;
                loop {
                    // A new session's manifest exists, empty, before its first segment (D131):
                    // what must wait is any record in it.
                    manifest_seen |= watcher
                        .read(&manifest)
                        .unwrap()
                        .is_some_and(|bytes| !bytes.is_empty());
                    let segment = !watcher.list_dir(&events).unwrap().is_empty();
                    if segment || std::time::Instant::now() >= deadline {
                        return Ok((segment, manifest_seen));
                    }
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            })
        })
        .unwrap();
    assert_eq!(fx.kinds().len(), 3, "the plan is committed");
    seen
}

/// Decision D65: where the filesystem overlaps writes (the real one does), the plan's snapshot
/// is stored while the segment is written, and the manifest attests the plan only once both are
/// durable.
///
/// lock: L-STORE-COMMIT-SEGMENT, L-STORE-COMMIT-ATTEST
#[test]
fn the_snapshot_is_stored_while_the_segment_is_written_and_before_the_manifest() {
    let (segment, manifest) = seen_alongside(
        MemFs::new().overlapping_writes(),
        std::time::Duration::from_secs(20),
    );
    assert!(segment, "the segment is written at the same time");
    assert!(!manifest, "the manifest waits for both");
    assert!(OsFs::new("/nonexistent").overlaps_writes());
}

/// The crash model keeps one order of operations (crash points and fault plans count them):
/// the snapshot first, then the segment, then the manifest.
///
/// lock: L-STORE-COMMIT-SEGMENT, L-STORE-COMMIT-ATTEST
#[test]
fn without_overlap_the_snapshot_is_stored_before_the_segment() {
    let (segment, manifest) = seen_alongside(MemFs::new(), std::time::Duration::ZERO);
    assert!(!segment && !manifest);
}

/// A stamp vouches for a file only once it has settled (coarse timestamps), stays equal while
/// the file does, and changes when the file is replaced, so the keyring check can rest on it
/// (decision D54).
///
/// lock: L-TOKEN-ROTATION
#[test]
fn a_file_stamp_vouches_only_for_a_settled_unchanged_file() {
    let dir = tempfile::tempdir().unwrap();
    let fs = OsFs::new(dir.path());
    let path = Path::new("keyring.json");
    assert_eq!(fs.stamp(path), None, "no file, no stamp");
    fs.write_private(path, b"first").unwrap();
    assert_eq!(fs.stamp(path), None, "a file changed just now is read");
    std::thread::sleep(workrail::store::fs::STAMP_SETTLE + std::time::Duration::from_millis(100));
    let settled = fs.stamp(path).expect("a settled file has a stamp");
    assert_eq!(fs.stamp(path), Some(settled), "unchanged file, same stamp");
    fs.write_private(path, b"other").unwrap();
    assert_ne!(fs.stamp(path), Some(settled));
    // A store without stamps (the crash model) always reads.
    let mem = MemFs::new();
    mem.write_private(path, b"first").unwrap();
    assert_eq!(mem.stamp(path), None);
}

/// A plan is one segment: `plan_start` finds the first event of the plan holding an event, so
/// a response rebuilt for an attempt reads only that attempt's records (L-STORE-COMMIT-SEGMENT).
///
/// lock: L-STORE-COMMIT-SEGMENT
#[test]
fn plan_start_names_the_first_event_of_the_segment_holding_an_event() {
    let fx = Fixture::new();
    fx.append(start_plan(&fx.snapshots)).unwrap();
    fx.append(advance_plan(&fx.snapshots, 0, 1)).unwrap();
    let loaded = fx.store.load(&session()).unwrap();
    assert_eq!(loaded.event_count(), 6);
    let starts: Vec<usize> = (0..6).map(|i| loaded.plan_start(i).unwrap()).collect();
    assert_eq!(starts, [0, 0, 0, 3, 3, 3]);
    assert_eq!(
        loaded.plan_start(99).unwrap(),
        0,
        "no segment names it: the whole log"
    );
}

/// D217: on a long log (segments, each followed by its pin), `plan_start`'s binary search
/// answers what a scan of every segment answers, for every event and past the end.
///
/// decision: D217
#[test]
fn plan_start_finds_the_segment_of_every_event_of_a_long_log() {
    let fx = Fixture::new();
    fx.append(start_plan(&fx.snapshots)).unwrap();
    for to in 1..=60u8 {
        fx.append(advance_plan(&fx.snapshots, to - 1, to)).unwrap();
    }
    let loaded = fx.store.load(&session()).unwrap();
    let scanned = |position: usize| {
        loaded
            .manifest_records()
            .unwrap()
            .into_iter()
            .find_map(|record| match record {
                ManifestRecord::SegmentClosed(s)
                    if (s.first_event_index.get() as usize..=s.last_event_index.get() as usize)
                        .contains(&position) =>
                {
                    Some(s.first_event_index.get() as usize)
                }
                _ => None,
            })
            .unwrap_or(0)
    };
    assert!(
        loaded
            .manifest_records()
            .unwrap()
            .into_iter()
            .any(|r| matches!(r, ManifestRecord::SnapshotPinned(_))),
        "pins lie between the segments"
    );
    for position in 0..loaded.event_count() + 3 {
        assert_eq!(
            loaded.plan_start(position).unwrap(),
            scanned(position),
            "event {position}"
        );
    }
}

/// `OsFs::lens_in` (every manifest's length in one pass, for the resume index's freshness
/// check) answers for each file what `len` answers: a length, `None` when the file or the
/// directory is missing, an error when a path cannot be a file's.
#[test]
fn os_lens_in_answers_what_len_answers_for_each_file() {
    let dir = tempfile::tempdir().unwrap();
    let fs = OsFs::new(dir.path());
    let sessions = Path::new("sessions");
    fs.create_dir_all(&sessions.join("a")).unwrap();
    fs.create_dir_all(&sessions.join("empty")).unwrap();
    fs.write_new(&sessions.join("a/manifest.jsonl"), b"12345")
        .unwrap();
    fs.write_new(&sessions.join("empty/manifest.jsonl"), b"")
        .unwrap();
    fs.write_new(&sessions.join("plain"), b"not a directory")
        .unwrap();
    let files: Vec<String> = ["a", "empty", "gone", "plain"]
        .iter()
        .map(|s| format!("{s}/manifest.jsonl"))
        .collect();
    let lens = fs.lens_in(sessions, &files);
    let one_by_one: Vec<_> = files.iter().map(|f| fs.len(&sessions.join(f))).collect();
    assert_eq!(lens.len(), files.len());
    for (batch, single) in lens.iter().zip(&one_by_one) {
        match (batch, single) {
            (Ok(a), Ok(b)) => assert_eq!(a, b),
            (Err(a), Err(b)) => assert_eq!(a.kind(), b.kind()),
            other => panic!("lens_in and len disagree: {other:?}"),
        }
    }
    assert_eq!(lens[0].as_ref().unwrap(), &Some(5));
    assert_eq!(lens[1].as_ref().unwrap(), &Some(0));
    assert_eq!(lens[2].as_ref().unwrap(), &None);
    assert!(
        lens[3].is_err(),
        "a file in place of a session directory is an error"
    );
    // A missing directory: every file is missing, as `len` says.
    let none = fs.lens_in(Path::new("nothing-here"), &files);
    assert!(none.iter().all(|l| matches!(l, Ok(None))));
}

/// A file image without lock files: they hold no data (an object directory's lock, D133, is
/// made the first time an object there is refreshed).
fn without_locks(
    files: std::collections::BTreeMap<std::path::PathBuf, Vec<u8>>,
) -> std::collections::BTreeMap<std::path::PathBuf, Vec<u8>> {
    files
        .into_iter()
        .filter(|(path, _)| path.file_name().is_none_or(|n| n != ".lock"))
        .collect()
}

/// An append answers only once its manifest record is durable: a power cut the instant after
/// each answer (every byte not yet fsynced lost, and every directory entry not yet fsynced)
/// leaves every answered append in place, the first one (whose manifest replaced the empty one)
/// and the later ones (appended to it) alike. A store that answered before fsyncing the
/// manifest, or before fsyncing the directory holding a new one, loses the tail here.
///
/// lock: L-STORE-COMMIT-ATTEST
#[test]
fn every_answered_append_survives_a_power_cut_right_after_its_answer() {
    let fx = Fixture::new();
    let plans = [
        start_plan(&fx.snapshots),
        advance_plan(&fx.snapshots, 0, 1),
        notes_plan(1),
    ];
    let mut answered = 0;
    for plan in plans {
        fx.append(plan).unwrap();
        answered += 1;
        let after = fx
            .fs
            .after_crash(workrail::store::memfs::UnsyncedData::Lost);
        let reopened = Fixture::on(after);
        let loaded = reopened.store.load(&session()).unwrap();
        assert_eq!(loaded.health, SessionHealth::Healthy);
        let attested = loaded
            .manifest_records()
            .unwrap()
            .into_iter()
            .filter(|r| matches!(r, ManifestRecord::SegmentClosed(_)))
            .count();
        assert_eq!(
            attested, answered,
            "a power cut after {answered} answered appends kept {attested} of them"
        );
        assert_eq!(
            loaded.event_count(),
            fx.store.load(&session()).unwrap().event_count()
        );
    }
}

/// A `MemFs` that logs every mutating filesystem call, in order, with the path it names, so a
/// test can read the commit protocol's order off the log.
#[derive(Debug, Clone)]
struct OrderFs {
    inner: MemFs,
    log: Arc<std::sync::Mutex<Vec<(&'static str, std::path::PathBuf)>>>,
    /// Event segments read through it: what a load costs (D219).
    segment_reads: Arc<std::sync::atomic::AtomicUsize>,
    /// While set, every read of an event segment fails with EIO (D221).
    segment_reads_fail: Arc<std::sync::atomic::AtomicBool>,
}

impl OrderFs {
    fn note(&self, op: &'static str, path: &Path) {
        self.log.lock().unwrap().push((op, path.to_path_buf()));
    }

    fn take(&self) -> Vec<(&'static str, std::path::PathBuf)> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }

    fn on(inner: MemFs) -> Self {
        Self {
            inner,
            log: Arc::default(),
            segment_reads: Arc::default(),
            segment_reads_fail: Arc::default(),
        }
    }

    /// Makes every later read of an event segment fail with EIO, or work again.
    fn fail_segment_reads(&self, fail: bool) {
        self.segment_reads_fail
            .store(fail, std::sync::atomic::Ordering::SeqCst);
    }

    /// The event segments read since the last call.
    fn take_segment_reads(&self) -> usize {
        self.segment_reads
            .swap(0, std::sync::atomic::Ordering::SeqCst)
    }
}

// `write_new_synced` and `append_synced` keep their default bodies, so the log shows their two
// steps (the write, then the fsync) as two entries.
impl StoreFs for OrderFs {
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.note("create_dir_all", dir);
        self.inner.create_dir_all(dir)
    }
    fn create_dir(&self, dir: &Path) -> std::io::Result<bool> {
        self.note("create_dir", dir);
        self.inner.create_dir(dir)
    }
    fn write_new(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        self.note("write_new", path);
        self.inner.write_new(path, bytes)
    }
    fn append(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        self.note("append", path);
        self.inner.append(path, bytes)
    }
    fn set_len(&self, path: &Path, len: u64) -> std::io::Result<()> {
        self.note("set_len", path);
        self.inner.set_len(path, len)
    }
    fn sync_file(&self, path: &Path) -> std::io::Result<()> {
        self.note("sync_file", path);
        self.inner.sync_file(path)
    }
    fn touch(&self, path: &Path) -> std::io::Result<()> {
        self.note("touch", path);
        self.inner.touch(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.note("rename_from", from);
        self.note("rename_to", to);
        self.inner.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.note("sync_dir", dir);
        self.inner.sync_dir(dir)
    }
    fn read(&self, path: &Path) -> std::io::Result<Option<Vec<u8>>> {
        if path.components().any(|c| c.as_os_str() == "events") {
            self.segment_reads
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if self
                .segment_reads_fail
                .load(std::sync::atomic::Ordering::SeqCst)
            {
                return Err(std::io::Error::from_raw_os_error(5));
            }
        }
        self.inner.read(path)
    }
    fn len(&self, path: &Path) -> std::io::Result<Option<u64>> {
        self.inner.len(path)
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<String>> {
        self.inner.list_dir(dir)
    }
    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.note("remove_file", path);
        self.inner.remove_file(path)
    }
    fn remove_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.note("remove_dir_all", dir);
        self.inner.remove_dir_all(dir)
    }
    fn write_private(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        self.note("write_private", path);
        self.inner.write_private(path, bytes)
    }
    fn try_lock(
        &self,
        path: &Path,
    ) -> Result<Box<dyn workrail::store::fs::LockGuard>, workrail::store::fs::LockError> {
        self.inner.try_lock(path)
    }
    fn try_lock_existing(
        &self,
        path: &Path,
    ) -> Result<Option<Box<dyn workrail::store::fs::LockGuard>>, workrail::store::fs::LockError>
    {
        self.inner.try_lock_existing(path)
    }
    fn try_lock_shared(
        &self,
        path: &Path,
    ) -> Result<Option<Box<dyn workrail::store::fs::LockGuard>>, workrail::store::fs::LockError>
    {
        self.inner.try_lock_shared(path)
    }
}

/// The order of one append, read off the filesystem calls it makes: the event segment is
/// written, fsynced, renamed into place and its directory fsynced; then the `segment_closed`
/// record goes into the manifest (appended to it, or for a new session written to a temp
/// manifest that is renamed over the empty one) and the manifest is fsynced (for a new one: the
/// temp file before the rename, and the session directory after it); only then does the append
/// return. Nothing touches the manifest after its fsync. A store that answered before the
/// manifest fsync (or fsynced it before writing the record) fails here.
///
/// lock: L-STORE-COMMIT-ATTEST, L-STORE-COMMIT-SEGMENT
#[test]
fn the_manifest_is_fsynced_after_the_record_is_written_and_before_the_append_returns() {
    let mem = MemFs::new();
    let fs = OrderFs::on(mem.clone());
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    let fx = Fixture {
        store: SessionStore::new(Arc::clone(&shared)),
        snapshots: workrail::store::SnapshotStore::new(shared),
        fs: mem,
    };
    let dir = Path::new("sessions").join(session().as_str());
    let manifest = dir.join("manifest.jsonl");
    let events_dir = dir.join("events");
    let is_segment = |p: &Path| p.starts_with(&events_dir);
    let plans = [
        start_plan(&fx.snapshots),
        advance_plan(&fx.snapshots, 0, 1),
        notes_plan(1),
    ];
    for (n, plan) in plans.into_iter().enumerate() {
        let records_before = fx.store.load(&session()).map_or(0, |l| l.manifest.len());
        fs.take();
        fx.append(plan).unwrap();
        // Everything up to here happened before the append returned.
        let log = fs.take();
        let at = |op: &str, path: &Path| log.iter().position(|(o, p)| *o == op && p == path);
        let last_at = |op: &str, path: &Path| log.iter().rposition(|(o, p)| *o == op && p == path);
        // The segment: written, fsynced, renamed, its directory fsynced.
        let seg_write = log
            .iter()
            .position(|(o, p)| *o == "write_new" && is_segment(p))
            .unwrap_or_else(|| panic!("append {n}: no segment write in {log:#?}"));
        let seg_temp = log[seg_write].1.clone();
        let seg_sync = at("sync_file", &seg_temp).expect("the segment is fsynced");
        let seg_rename = at("rename_from", &seg_temp).expect("the segment is renamed");
        let events_sync = last_at("sync_dir", &events_dir).expect("events dir fsynced");
        assert!(seg_write < seg_sync && seg_sync < seg_rename && seg_rename < events_sync);
        // The manifest record and its fsync.
        // A new session's empty manifest is created before the segment (D131); the record
        // then arrives by a rename over it, otherwise by an append.
        let (record_at, durable_at) = match at("rename_to", &manifest) {
            None => {
                let appended = last_at("append", &manifest)
                    .unwrap_or_else(|| panic!("append {n}: no manifest write: {log:#?}"));
                let synced = last_at("sync_file", &manifest)
                    .unwrap_or_else(|| panic!("append {n}: manifest never fsynced: {log:#?}"));
                (appended, synced)
            }
            Some(renamed) => {
                // Temp manifest written, fsynced, renamed over the empty one, the session
                // directory fsynced.
                assert_eq!(log[renamed - 1].0, "rename_from");
                let temp = log[renamed - 1].1.clone();
                let written = at("write_new", &temp).expect("the temp manifest is written");
                let synced = at("sync_file", &temp).expect("the temp manifest is fsynced");
                assert!(written < synced && synced < renamed, "{log:#?}");
                let dir_synced = last_at("sync_dir", &dir).expect("session directory fsynced");
                assert!(renamed < dir_synced, "{log:#?}");
                (written, dir_synced)
            }
        };
        assert!(
            events_sync < record_at,
            "append {n}: the record is written after the segment is durable: {log:#?}"
        );
        assert!(record_at < durable_at, "append {n}: {log:#?}");
        assert!(
            !log[durable_at + 1..].iter().any(|(_, p)| p == &manifest),
            "append {n}: the manifest is touched after its fsync: {log:#?}"
        );
        // And what the fsync made durable is the segment_closed record the append added.
        let loaded = fx.store.load(&session()).unwrap();
        assert!(matches!(
            loaded.manifest_record(records_before).unwrap(),
            Some(ManifestRecord::SegmentClosed(_))
        ));
    }
}

/// The store refuses a manifest whose `snapshot_pinned` record lacks any required field: the
/// session is not healthy, and the pin is not trusted (the reader stops before it, or before
/// the transaction that wrote it).
///
/// lock: L-MANIFEST-SNAPSHOT-PINNED-FIELDS
#[test]
fn a_stored_pin_record_missing_a_required_field_makes_the_session_unhealthy() {
    let manifest = Path::new("sessions")
        .join(session().as_str())
        .join("manifest.jsonl");
    for field in [
        "v",
        "manifestIndex",
        "sessionId",
        "kind",
        "eventIndex",
        "snapshotRef",
        "createdByEventId",
    ] {
        let fx = Fixture::new();
        fx.append(start_plan(&fx.snapshots)).unwrap();
        fx.append(advance_plan(&fx.snapshots, 0, 1)).unwrap();
        let whole = fx.store.load(&session()).unwrap();
        assert_eq!(whole.health, SessionHealth::Healthy);
        let last = whole.manifest.len() - 1;
        assert!(matches!(
            whole.manifest_record(last).unwrap(),
            Some(ManifestRecord::SnapshotPinned(_))
        ));
        fx.fs.corrupt(&manifest, |bytes| {
            let text = String::from_utf8(bytes.clone()).unwrap();
            let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
            let mut record: serde_json::Value = serde_json::from_str(&lines[last]).unwrap();
            assert!(
                record.as_object_mut().unwrap().remove(field).is_some(),
                "{field} is in the stored record"
            );
            lines[last] = record.to_string();
            *bytes = (lines.join("\n") + "\n").into_bytes();
        });
        let loaded = Fixture::on(fx.fs.clone()).store.load(&session()).unwrap();
        assert_ne!(
            loaded.health,
            SessionHealth::Healthy,
            "a pin without {field} was trusted"
        );
        assert!(
            loaded.manifest.len() <= last,
            "without {field}: the reader stops before the pin, got {} records",
            loaded.manifest.len()
        );
    }
}

/// What a fresh process's full load of the session gives (health, events, records).
fn fully_loaded(fs: &MemFs) -> (SessionHealthKind, usize, usize, Vec<String>) {
    let store = SessionStore::new(Arc::new(fs.clone()));
    let loaded = store.load(&session()).unwrap();
    (
        loaded.health.kind(),
        loaded.event_count(),
        loaded.manifest.len(),
        loaded
            .events()
            .all()
            .unwrap()
            .iter()
            .map(|e| e.event_id().to_string())
            .collect(),
    )
}

/// D219: a process holding a view of a session reads only what another process appended past
/// it (the new segments), and gets exactly what a full load gives: the same events, records,
/// pins and dedupe index (a replayed key is found, a repeated plan is a no-op). When the bytes
/// before the view's end are not the view's (the session was replaced or damaged) or what was
/// appended is damaged, the verdict is a full load's.
///
/// decision: D219
/// lock: L-STORE-LOAD-VALIDATE
#[test]
fn a_view_is_extended_by_reading_only_what_another_process_appended() {
    let fx = Fixture::new();
    fx.append(start_plan(&fx.snapshots)).unwrap();
    for to in 1..=20u8 {
        fx.append(advance_plan(&fx.snapshots, to - 1, to)).unwrap();
    }
    let counting = OrderFs::on(fx.fs.clone());
    let other = SessionStore::new(Arc::new(counting.clone()));
    let first = other.load(&session()).unwrap();
    assert_eq!(
        counting.take_segment_reads(),
        21,
        "a first load reads every segment"
    );
    drop(first);
    for to in 21..=23u8 {
        fx.append(advance_plan(&fx.snapshots, to - 1, to)).unwrap();
    }
    let extended = other.load(&session()).unwrap();
    assert_eq!(
        counting.take_segment_reads(),
        3,
        "only the 3 new segments are read"
    );
    let full = fully_loaded(&fx.fs);
    assert_eq!(full.0, SessionHealthKind::Healthy);
    assert_eq!(extended.health.kind(), full.0);
    assert_eq!(
        (extended.event_count(), extended.manifest.len()),
        (full.1, full.2)
    );
    let ids: Vec<String> = extended
        .events()
        .all()
        .unwrap()
        .iter()
        .map(|e| e.event_id().to_string())
        .collect();
    assert_eq!(ids, full.3);
    for event in [
        &extended.events().all().unwrap()[2],
        extended.last_event().unwrap(),
    ] {
        assert_eq!(
            extended
                .event_by_dedupe_key(&event.dedupe_key())
                .unwrap()
                .map(|e| e.event_id().clone()),
            Some(event.event_id().clone()),
            "the extended dedupe index finds old and new keys"
        );
    }
    // Its pins are the full load's: appending through this process continues the session.
    other
        .with_append_gate(
            &session(),
            workrail::store::SessionIntent::Continue,
            |gate| gate.append(advance_plan(&fx.snapshots, 23, 24)).map(drop),
        )
        .unwrap();
    // The repeated plan is an idempotent no-op through the extended view.
    let before = fully_loaded(&fx.fs).1;
    other
        .with_append_gate(
            &session(),
            workrail::store::SessionIntent::Continue,
            |gate| gate.append(advance_plan(&fx.snapshots, 23, 24)).map(drop),
        )
        .unwrap();
    assert_eq!(fully_loaded(&fx.fs).1, before);
    drop(extended);
    counting.take_segment_reads();

    // What was appended is damaged: the verdict is a full load's.
    fx.append(advance_plan(&fx.snapshots, 24, 25)).unwrap();
    let mut manifest = fx
        .fs
        .read(&workrail::store::layout::manifest_path(&session()))
        .unwrap()
        .unwrap();
    let damaged = manifest.len() - 10;
    manifest[damaged] ^= 0x20;
    fx.fs
        .set_len(&workrail::store::layout::manifest_path(&session()), 0)
        .unwrap();
    fx.fs
        .append(
            &workrail::store::layout::manifest_path(&session()),
            &manifest,
        )
        .unwrap();
    let judged = other.load(&session()).unwrap();
    assert_eq!(judged.health.kind(), fully_loaded(&fx.fs).0);
    assert!(!judged.health.is_healthy());
}

/// D219: a view whose session was replaced by a longer one under the same id (its last record
/// no longer ends where the view ends) is not extended: the load is a full one, and its answer
/// is the new session's.
///
/// decision: D219
#[test]
fn a_view_of_a_replaced_session_is_loaded_afresh() {
    let fx = Fixture::new();
    fx.append(start_plan(&fx.snapshots)).unwrap();
    fx.append(advance_plan(&fx.snapshots, 0, 1)).unwrap();
    let counting = OrderFs::on(fx.fs.clone());
    let other = SessionStore::new(Arc::new(counting.clone()));
    let view_bytes = fx
        .fs
        .len(&workrail::store::layout::manifest_path(&session()))
        .unwrap()
        .unwrap();
    drop(other.load(&session()).unwrap());
    counting.take_segment_reads();
    // Replace the session: a different history, longer than the one the view holds.
    fx.fs
        .remove_dir_all(&workrail::store::layout::session_dir(&session()))
        .unwrap();
    let fresh = Fixture::on(fx.fs.clone());
    for n in 1..=8 {
        fresh.append(notes_plan(n)).unwrap();
    }
    let manifest = workrail::store::layout::manifest_path(&session());
    assert!(
        fx.fs.len(&manifest).unwrap() > Some(view_bytes),
        "the new manifest is longer than the view's"
    );
    let loaded = other.load(&session()).unwrap();
    let full = fully_loaded(&fx.fs);
    assert_eq!(
        counting.take_segment_reads(),
        8,
        "every segment of the new session is read"
    );
    let ids: Vec<String> = loaded
        .events()
        .all()
        .unwrap()
        .iter()
        .map(|e| e.event_id().to_string())
        .collect();
    assert_eq!((loaded.health.kind(), ids), (full.0, full.3));
}

/// `read_from` answers the bytes `read` answers from an offset on, for `OsFs` (which seeks)
/// and `MemFs` (the trait's default): from the start, the middle, the end and past it, and
/// `None` for a missing file.
///
/// decision: D219
#[test]
fn read_from_answers_the_end_of_what_read_answers() {
    let dir = tempfile::tempdir().unwrap();
    let os = OsFs::new(dir.path());
    let mem = MemFs::new();
    let path = Path::new("sessions/x/manifest.jsonl");
    let bytes = b"{\"a\":1}\n{\"b\":2}\n{\"c\":";
    for fs in [&os as &dyn StoreFs, &mem as &dyn StoreFs] {
        fs.create_dir_all(Path::new("sessions/x")).unwrap();
        fs.write_new(path, bytes).unwrap();
        for offset in [0, 1, 8, bytes.len() as u64, bytes.len() as u64 + 5] {
            let want = bytes.get(offset as usize..).unwrap_or_default().to_vec();
            assert_eq!(fs.read_from(path, offset).unwrap(), Some(want), "{offset}");
        }
        assert_eq!(fs.read_from(Path::new("sessions/x/none"), 3).unwrap(), None);
    }
}

/// A segment that cannot be read (EIO) is an I/O error, retryable, never a verdict of damage:
/// the bytes were not seen. Found by the I/O error storm of real processes, where such a read
/// answered `SESSION_CORRUPT` (corrupt_tail, "segment_missing") for healthy sessions. Checked on
/// a first load and on a load past a view another process's commit made stale; once reads work
/// again the same store loads the session healthy and whole.
///
/// decision: D221
#[test]
fn a_segment_that_cannot_be_read_is_an_io_error_never_damage() {
    let fx = Fixture::new();
    fx.append(start_plan(&fx.snapshots)).unwrap();
    for to in 1..=3u8 {
        fx.append(advance_plan(&fx.snapshots, to - 1, to)).unwrap();
    }
    let faulty = OrderFs::on(fx.fs.clone());
    let store = SessionStore::new(Arc::new(faulty.clone()));
    let assert_io = |what: &str| {
        let error = store.load(&session()).unwrap_err();
        assert!(
            matches!(error, StoreError::Io { .. }),
            "{what}: {error:?} (an I/O error, not a verdict)"
        );
        let envelope = error.to_envelope(false);
        assert_eq!(
            envelope.code,
            ErrorCode::StoreIoError,
            "{what}: {envelope:?}"
        );
        assert_eq!(envelope.retry, Retry::RetryableImmediate, "{what}");
        assert!(
            envelope.message.contains("os error 5"),
            "{what}: {envelope:?}"
        );
    };

    faulty.fail_segment_reads(true);
    assert_io("a first load");
    faulty.fail_segment_reads(false);
    let view = store.load(&session()).unwrap();
    assert!(view.health.is_healthy(), "{:?}", view.health);
    drop(view);

    for to in 4..=5u8 {
        fx.append(advance_plan(&fx.snapshots, to - 1, to)).unwrap();
    }
    faulty.fail_segment_reads(true);
    assert_io("a load past a view");
    faulty.fail_segment_reads(false);
    let again = store.load(&session()).unwrap();
    let full = fully_loaded(&fx.fs);
    assert_eq!(full.0, SessionHealthKind::Healthy);
    assert_eq!(again.health.kind(), full.0);
    assert_eq!(
        (again.event_count(), again.manifest.len()),
        (full.1, full.2)
    );
}

//! Export/import bundles through the `Workrail` facade, over the crash-model filesystem.
//!
//! Guards against: bundles that carry tokens or miss a snapshot, pinned workflow or artifact;
//! an imported session that cannot be continued or whose projections differ from the source;
//! a colliding import that merges into (or touches) the existing session instead of becoming a
//! new one; a re-export that is not the same bundle; tampered bundles that are accepted, get
//! the wrong `BUNDLE_*` code, or leave anything written; salvage exports without their banner,
//! a salvage banner that can be stripped, salvage bundles imported for execution without an
//! explicit opt-in; exports of sessions without a validated prefix; absolute or escaping paths.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::bundle_support;
use crate::protocol_support;

use std::path::Path;

use bundle_support::*;
use serde_json::{Value, json};
use workrail::bundle::{BundleWarningCode, ImportOptions, NoProgress};
use workrail::protocol::Workrail;
use workrail::store::fs::StoreFs;
use workrail::store::layout;
use workrail::store::memfs::MemFs;
use workrail::store::{ArtifactStore, SessionHealth};
use workrail_spec::closed::SessionHealthKind;
use workrail_spec::error::ErrorCode;
use workrail_spec::event::{EventData, OutputPayload, SessionEvent};
use workrail_spec::ids::{EventIndex, ManifestIndex, SessionId};
use workrail_spec::manifest::ManifestRecord;

use protocol_support::{ack, loop_control, rehydrate};

/// The demo run: plan, a loop iteration with artifacts, a checkpoint, and a fork that stops
/// the loop at its first decision (the tip waits at `wrap`).
fn demo_session(wr: &Workrail) -> Built {
    build_session(
        wr,
        "project.demo",
        &[
            Op::Advance {
                artifact: true,
                decide: None,
            },
            Op::Advance {
                artifact: false,
                decide: None,
            },
            Op::Advance {
                artifact: false,
                decide: Some(true),
            },
            Op::Checkpoint,
            Op::Advance {
                artifact: true,
                decide: None,
            },
            // Back to the first decision, then stop the loop there: the tip waits at "wrap".
            Op::Fork { back: 3 },
        ],
    )
}

/// lock: L-BUNDLE-RESUMABLE, L-BUNDLE-NO-TOKENS, L-BUNDLE-SESSION, L-BUNDLE-ENVELOPE
#[test]
fn a_session_exported_here_continues_elsewhere_from_re_minted_tokens() {
    let source_fs = MemFs::new();
    let source = open_seeded(&source_fs, 1);
    let built = demo_session(&source);
    let exported = export(&source, &built.session);
    assert!(exported.warnings.is_empty(), "{:?}", exported.warnings);
    for token in &built.tokens {
        assert!(
            !exported.text.contains(token.as_str()),
            "a token leaked into the bundle"
        );
    }
    let value: Value = serde_json::from_str(&exported.text).unwrap();
    assert_eq!(value["bundleSchemaVersion"], 1);
    assert_eq!(value["producer"]["appVersion"], env!("CARGO_PKG_VERSION"));
    assert!(value["bundleId"].as_str().unwrap().starts_with("bundle_"));
    let at = value["exportedAt"].as_str().unwrap();
    assert!(
        at.len() == 24 && at.ends_with('Z') && at.as_bytes()[10] == b'T',
        "{at}"
    );
    assert!(value.get("salvage").is_none());
    // Every pinned snapshot and the run's pinned workflow are embedded.
    let loaded = source.sessions().load(&built.session).unwrap();
    let pins: Vec<_> = loaded
        .manifest_records()
        .unwrap()
        .into_iter()
        .filter_map(|r| match r {
            ManifestRecord::SnapshotPinned(p) => Some(p.snapshot_ref.as_str().to_owned()),
            _ => None,
        })
        .collect();
    assert!(pins.len() >= 4);
    for pin in &pins {
        assert!(value["session"]["snapshots"].get(pin).is_some(), "{pin}");
    }
    assert_eq!(
        value["session"]["pinnedWorkflows"]
            .as_object()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        value["session"]["events"].as_array().unwrap().len(),
        loaded.event_count()
    );

    let target_fs = MemFs::new();
    let target = open_seeded(&target_fs, 2);
    let report = import(&target, &exported.text).unwrap();
    assert_eq!(
        report.session_id, built.session,
        "no collision: the id is kept"
    );
    assert!(!report.remapped);
    assert_eq!(report.events, loaded.event_count());
    assert_eq!(
        projection(&target, &report.session_id),
        projection(&source, &built.session)
    );
    assert_eq!(
        target.session_summary(&report.session_id).unwrap(),
        source.session_summary(&built.session).unwrap()
    );

    // Tokens are not portable: the source's tokens do not verify here (another keyring) ...
    let stale = target
        .continue_workflow(rehydrate(&built.last().state_token))
        .unwrap_err();
    assert_eq!(stale.code, ErrorCode::TokenBadSignature);
    // ... and the re-minted ones continue exactly like the source does at its tip.
    assert_eq!(report.runs.len(), 1);
    let run = &report.runs[0];
    let resumed = run.resume.clone().unwrap();
    let source_view = projection(&source, &built.session);
    let source_run = source_view.runs.values().next().unwrap();
    assert_eq!(Some(&run.preferred_tip), source_run.preferred_tip.as_ref());
    let at_source_tip = source
        .continue_workflow(rehydrate(&built.last().state_token))
        .unwrap();
    assert_eq!(resumed.pending, at_source_tip.pending);
    assert_eq!(resumed.run, at_source_tip.run);
    assert_eq!(resumed.recap, at_source_tip.recap);
    assert_ne!(resumed.state_token, at_source_tip.state_token);
    let next_there = target
        .continue_workflow(ack(&resumed, "Wrapped up.", vec![]))
        .unwrap();
    let next_here = source
        .continue_workflow(ack(&at_source_tip, "Wrapped up.", vec![]))
        .unwrap();
    assert_eq!(next_there.pending, next_here.pending);
    assert_eq!(next_there.is_complete, next_here.is_complete);
    assert_eq!(next_there.run, next_here.run);
    assert_eq!(
        projection(&target, &report.session_id).runs.len(),
        projection(&source, &built.session).runs.len()
    );
}

/// lock: L-BUNDLE-IMPORT-AS-NEW
#[test]
fn a_colliding_import_becomes_a_new_session_and_leaves_the_original_alone() {
    let fs = MemFs::new();
    let wr = open_seeded(&fs, 3);
    let built = demo_session(&wr);
    let original_events = events(&wr, &built.session);
    let original_files: Vec<_> = fs
        .snapshot()
        .into_iter()
        .filter(|(p, _)| p.starts_with(layout::session_dir(&built.session)))
        .filter(|(p, _)| !p.starts_with(layout::cache_dir(&built.session)))
        .collect();
    let exported = export(&wr, &built.session);

    let report = import(&wr, &exported.text).unwrap();
    assert!(report.remapped);
    assert_ne!(report.session_id, built.session);
    assert_eq!(report.source_session_id, built.session);
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.code == BundleWarningCode::SessionIdRemapped)
    );
    // The original is untouched.
    assert_eq!(events(&wr, &built.session), original_events);
    for (path, bytes) in &original_files {
        assert_eq!(fs.snapshot().get(path), Some(bytes), "{}", path.display());
    }
    // The copy: same ids and payloads, events rebuilt under the new session id.
    let copy = events(&wr, &report.session_id);
    assert_eq!(copy.len(), original_events.len());
    for (a, b) in original_events.iter().zip(&copy) {
        assert_eq!(a.event_id(), b.event_id());
        assert_eq!(a.event_index(), b.event_index());
        assert_eq!(a.scope(), b.scope());
        assert_eq!(a.data(), b.data());
        assert_eq!(b.session_id(), &report.session_id);
        assert_eq!(
            b.dedupe_key().as_str(),
            a.dedupe_key()
                .as_str()
                .replace(built.session.as_str(), report.session_id.as_str())
        );
    }
    assert_eq!(
        projection(&wr, &report.session_id),
        projection(&wr, &built.session)
    );
    assert_eq!(
        wr.session_summary(&report.session_id).unwrap(),
        wr.session_summary(&built.session).unwrap()
    );
    // Both continue independently.
    let resumed = report.runs[0].resume.clone().unwrap();
    assert_eq!(resumed.session.session_id, report.session_id);
    let advanced = wr
        .continue_workflow(ack(&resumed, "Copy moves on.", vec![]))
        .unwrap();
    assert_eq!(advanced.session.session_id, report.session_id);
    assert_eq!(events(&wr, &built.session), original_events);

    // Importing the same bundle again makes yet another session.
    let again = import(&wr, &exported.text).unwrap();
    assert!(again.remapped);
    assert_ne!(again.session_id, report.session_id);
}

/// lock: L-BUNDLE-SESSION, L-BUNDLE-INTEGRITY-JCS
#[test]
fn re_exporting_an_imported_session_yields_the_same_bundle() {
    let fs = MemFs::new();
    let wr = open_seeded(&fs, 4);
    let built = demo_session(&wr);
    let first = export(&wr, &built.session);

    // Into a fresh data dir: byte-identical apart from bundleId and exportedAt.
    let other_fs = MemFs::new();
    let other = open_seeded(&other_fs, 5);
    let report = import(&other, &first.text).unwrap();
    let second = export(&other, &report.session_id);
    assert_eq!(
        comparable(&second.text, &report.session_id, &report.session_id),
        comparable(&first.text, &built.session, &built.session)
    );
    assert_eq!(second.bundle.body.integrity, first.bundle.body.integrity);

    // Into the same data dir (new id): the same modulo the id.
    let remapped = import(&wr, &first.text).unwrap();
    let third = export(&wr, &remapped.session_id);
    assert_eq!(
        comparable(&third.text, &remapped.session_id, &built.session),
        strip_for_remap(comparable(&first.text, &built.session, &built.session))
    );
}

fn strip_for_remap(mut value: Value) -> Value {
    let object = value.as_object_mut().unwrap();
    object.remove("integrity");
    for record in object["session"]["manifest"].as_array_mut().unwrap() {
        if record["kind"] == "segment_closed" {
            let record = record.as_object_mut().unwrap();
            record.remove("sha256");
            record.remove("bytes");
        }
    }
    value
}

/// lock: L-BUNDLE-ERRORS, L-BUNDLE-IMPORT-VALIDATES, L-BUNDLE-INTEGRITY-KIND
#[test]
fn every_tampered_bundle_is_refused_with_its_code_and_nothing_is_written() {
    let source_fs = MemFs::new();
    let source = open_seeded(&source_fs, 6);
    let built = demo_session(&source);
    let good = export(&source, &built.session).text;
    let fs = MemFs::new();
    let wr = open_seeded(&fs, 7);
    let value: Value = serde_json::from_str(&good).unwrap();
    let text = |v: &Value| serde_json::to_string(v).unwrap();

    // BUNDLE_INVALID_FORMAT: not JSON, not an object, unknown field, missing field.
    assert_refused(&fs, &wr, "{not json", ErrorCode::BundleInvalidFormat);
    assert_refused(&fs, &wr, "[]", ErrorCode::BundleInvalidFormat);
    let mut v = value.clone();
    v["surprise"] = json!(true);
    assert_refused(&fs, &wr, &text(&v), ErrorCode::BundleInvalidFormat);
    let mut v = value.clone();
    v.as_object_mut().unwrap().remove("producer");
    assert_refused(&fs, &wr, &text(&v), ErrorCode::BundleInvalidFormat);
    // An integrity kind outside the closed set.
    let mut v = value.clone();
    v["integrity"]["kind"] = json!("md5_manifest_v1");
    assert_refused(&fs, &wr, &text(&v), ErrorCode::BundleInvalidFormat);

    // BUNDLE_UNSUPPORTED_VERSION.
    let mut v = value.clone();
    v["bundleSchemaVersion"] = json!(2);
    assert_refused(&fs, &wr, &text(&v), ErrorCode::BundleUnsupportedVersion);
    // A nested artifact of an unknown version is refused too (never guessed at).
    let mut v = value.clone();
    v["session"]["events"][0]["v"] = json!(2);
    assert_refused(&fs, &wr, &text(&v), ErrorCode::BundleInvalidFormat);

    // BUNDLE_INTEGRITY_FAILED: content edited without its digest, an artifact edited, an
    // integrity entry dropped.
    let mut v = value.clone();
    let last = v["session"]["events"].as_array().unwrap().len() - 1;
    v["session"]["events"][last]["eventId"] = json!("evt_tampered");
    assert_refused(&fs, &wr, &text(&v), ErrorCode::BundleIntegrityFailed);
    let mut v = value.clone();
    let (digest, _) = v["artifacts"].as_object().unwrap().iter().next().unwrap();
    let digest = digest.clone();
    v["artifacts"][&digest]["text"] = json!("edited");
    assert_refused(&fs, &wr, &text(&v), ErrorCode::BundleIntegrityFailed);
    let mut v = value.clone();
    v["integrity"]["entries"].as_array_mut().unwrap().pop();
    assert_refused(&fs, &wr, &text(&v), ErrorCode::BundleIntegrityFailed);

    // BUNDLE_MISSING_SNAPSHOT / BUNDLE_MISSING_PINNED_WORKFLOW, with a consistent integrity
    // manifest (the content is missing, not damaged).
    let mut b = parse_unchecked(&good);
    b.body.session.snapshots.pop_first();
    assert_refused(&fs, &wr, &reassemble(b), ErrorCode::BundleMissingSnapshot);
    let mut b = parse_unchecked(&good);
    b.body.session.pinned_workflows.clear();
    assert_refused(
        &fs,
        &wr,
        &reassemble(b),
        ErrorCode::BundleMissingPinnedWorkflow,
    );

    // BUNDLE_EVENT_ORDER_INVALID: indices out of order; and, with indices and pins renumbered,
    // a node created before the run that owns it.
    let mut b = parse_unchecked(&good);
    b.body.session.events.swap(3, 4);
    assert_refused(&fs, &wr, &reassemble(b), ErrorCode::BundleEventOrderInvalid);
    let mut b = parse_unchecked(&good);
    let events = &mut b.body.session.events;
    assert_eq!(events[1].kind().as_str(), "run_started");
    assert_eq!(events[2].kind().as_str(), "node_created");
    events.swap(1, 2);
    let renumbered: Vec<SessionEvent> = events
        .drain(..)
        .enumerate()
        .map(|(i, e)| e.with_event_index(EventIndex::new(i as u64).unwrap()))
        .collect();
    *events = renumbered;
    for record in &mut b.body.session.manifest {
        if let ManifestRecord::SnapshotPinned(pin) = record
            && pin.event_index.get() == 2
        {
            pin.event_index = EventIndex::new(1).unwrap();
        }
    }
    let err = assert_refused(&fs, &wr, &reassemble(b), ErrorCode::BundleEventOrderInvalid);
    assert!(
        err.message.contains("no earlier run_started"),
        "{}",
        err.message
    );

    // BUNDLE_MANIFEST_ORDER_INVALID: records out of order; and a pin dropped (renumbered), the
    // crash state between segment_closed and snapshot_pinned.
    let mut b = parse_unchecked(&good);
    b.body.session.manifest.swap(0, 1);
    assert_refused(
        &fs,
        &wr,
        &reassemble(b),
        ErrorCode::BundleManifestOrderInvalid,
    );
    let mut b = parse_unchecked(&good);
    let manifest = &mut b.body.session.manifest;
    let pin_at = manifest
        .iter()
        .rposition(|r| matches!(r, ManifestRecord::SnapshotPinned(_)))
        .unwrap();
    manifest.remove(pin_at);
    for (i, record) in manifest.iter_mut().enumerate() {
        let index = ManifestIndex::new(i as u64).unwrap();
        match record {
            ManifestRecord::SegmentClosed(r) => r.manifest_index = index,
            ManifestRecord::SnapshotPinned(r) => r.manifest_index = index,
        }
    }
    let err = assert_refused(
        &fs,
        &wr,
        &reassemble(b),
        ErrorCode::BundleManifestOrderInvalid,
    );
    assert!(err.message.contains("never pinned"), "{}", err.message);

    // Nothing was written by any of the refusals, and the good bundle still imports.
    assert!(
        fs.files()
            .iter()
            .all(|p| !p.starts_with(layout::SESSIONS_DIR) && !p.starts_with(layout::SNAPSHOTS_DIR))
    );
    import(&wr, &good).unwrap();
}

/// lock: L-DATADIR-RELATIVE-PATHS
#[test]
fn absolute_or_escaping_paths_in_a_bundle_are_refused() {
    let source_fs = MemFs::new();
    let source = open_seeded(&source_fs, 8);
    let built = demo_session(&source);
    let good = export(&source, &built.session).text;
    let fs = MemFs::new();
    let wr = open_seeded(&fs, 9);

    for bad in [
        "/etc/workflows/demo.json",
        "../../outside.json",
        "C:\\wf\\demo.json",
        "a/../../b",
    ] {
        let mut b = parse_unchecked(&good);
        let run = b
            .body
            .session
            .events
            .iter_mut()
            .find(|e| e.kind().as_str() == "run_started")
            .unwrap();
        let EventData::RunStarted(mut started) = run.data().clone() else {
            unreachable!()
        };
        started.workflow_source_ref = bad.into();
        *run = SessionEvent::new(
            run.event_id().clone(),
            run.event_index(),
            run.session_id().clone(),
            run.scope().clone(),
            EventData::RunStarted(started),
        )
        .unwrap();
        let err = assert_refused(&fs, &wr, &reassemble(b), ErrorCode::BundleInvalidFormat);
        assert!(err.message.contains("relative"), "{}", err.message);
    }
    // A segment path in the manifest must be the canonical relative one.
    let mut v: Value = serde_json::from_str(&good).unwrap();
    v["session"]["manifest"][0]["segmentRelPath"] = json!("/tmp/events/00000000-00000005.jsonl");
    assert_refused(
        &fs,
        &wr,
        &serde_json::to_string(&v).unwrap(),
        ErrorCode::BundleInvalidFormat,
    );
    let mut v: Value = serde_json::from_str(&good).unwrap();
    v["session"]["manifest"][0]["segmentRelPath"] = json!("events/../../../etc/passwd");
    assert_refused(
        &fs,
        &wr,
        &serde_json::to_string(&v).unwrap(),
        ErrorCode::BundleInvalidFormat,
    );
}

#[test]
fn artifacts_travel_with_the_bundle_and_losses_are_reported() {
    let source_fs = MemFs::new();
    let source = open_seeded(&source_fs, 10);
    let built = demo_session(&source);
    let referenced: Vec<_> = events(&source, &built.session)
        .iter()
        .filter_map(|e| match e.data() {
            EventData::NodeOutputAppended(o) => match &o.payload {
                OutputPayload::ArtifactRef { sha256, .. } => Some(sha256.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert!(referenced.len() >= 3, "{referenced:?}");
    let exported = export(&source, &built.session);
    for digest in &referenced {
        assert!(exported.bundle.body.artifacts.contains_key(digest));
        assert!(
            exported
                .bundle
                .body
                .integrity
                .entries
                .iter()
                .any(|e| e.path == format!("artifacts/{digest}") && &e.sha256 == digest)
        );
    }
    let target_fs = MemFs::new();
    let target = open_seeded(&target_fs, 11);
    let report = import(&target, &exported.text).unwrap();
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    let target_artifacts = ArtifactStore::new(std::sync::Arc::new(target_fs.clone()));
    let source_artifacts = ArtifactStore::new(std::sync::Arc::new(source_fs.clone()));
    for digest in &referenced {
        assert_eq!(
            target_artifacts.get(digest).unwrap(),
            source_artifacts.get(digest).unwrap()
        );
    }

    // An artifact missing from the source store: export warns, import warns, nothing else lost.
    let lost = &referenced[0];
    source_fs.remove_file(&layout::artifact_path(lost)).unwrap();
    let exported = export(&source, &built.session);
    assert!(!exported.bundle.body.artifacts.contains_key(lost));
    assert!(
        exported
            .warnings
            .iter()
            .any(|w| w.code == BundleWarningCode::ArtifactUnavailable
                && w.message.contains(lost.as_str()))
    );
    let other_fs = MemFs::new();
    let other = open_seeded(&other_fs, 12);
    let report = import(&other, &exported.text).unwrap();
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.code == BundleWarningCode::ArtifactNotInBundle
                && w.message.contains(lost.as_str()))
    );
    assert_eq!(
        projection(&other, &report.session_id),
        projection(&source, &built.session)
    );
}

/// Corrupts the last committed segment of `session` (a byte flip keeps its length).
fn corrupt_last_segment(fs: &MemFs, session: &SessionId) {
    let dir = layout::events_dir(session);
    let last = fs
        .list_dir(&dir)
        .unwrap()
        .into_iter()
        .rfind(|n| !n.starts_with('.'))
        .unwrap();
    fs.corrupt(&dir.join(last), |bytes| {
        let i = bytes.len() / 2;
        bytes[i] ^= 0x01;
    });
}

/// lock: L-HEALTH-SALVAGE-READ-ONLY, L-HEALTH-CORRUPTION-CODES
#[test]
fn corrupt_tail_sessions_export_their_prefix_as_salvage_which_imports_only_on_request() {
    let fs = MemFs::new();
    let built = demo_session(&open_seeded(&fs, 13));
    corrupt_last_segment(&fs, &built.session);
    let wr = open_seeded(&fs, 13); // a fresh process: nothing cached
    let loaded = wr.sessions().load(&built.session).unwrap();
    let SessionHealth::CorruptTail(corruption) = &loaded.health else {
        panic!("expected corrupt_tail, got {:?}", loaded.health)
    };
    let exported = export(&wr, &built.session);
    let salvage = exported
        .bundle
        .body
        .salvage
        .clone()
        .expect("salvage banner");
    assert_eq!(salvage.health, SessionHealthKind::CorruptTail);
    assert_eq!(salvage.reason, corruption.reason.as_str());
    assert_eq!(salvage.manifest_index, corruption.manifest_index);
    assert_eq!(
        exported.bundle.body.session.events,
        &loaded.events().all().unwrap()[..]
    );
    assert!(
        exported
            .warnings
            .iter()
            .any(|w| w.code == BundleWarningCode::SalvagePrefix)
    );
    assert!(
        exported
            .bundle
            .body
            .integrity
            .entries
            .iter()
            .any(|e| e.path == "salvage")
    );

    // Read-only by default: refused, nothing written.
    let target_fs = MemFs::new();
    let target = open_seeded(&target_fs, 14);
    let err = assert_refused(
        &target_fs,
        &target,
        &exported.text,
        ErrorCode::SessionCorrupt,
    );
    assert!(err.suggestion.contains("--allow-salvage"));
    assert!(
        !err.suggestion.contains("ImportOptions"),
        "no Rust API names: {}",
        err.suggestion
    );
    // The banner cannot be stripped.
    let mut v: Value = serde_json::from_str(&exported.text).unwrap();
    v.as_object_mut().unwrap().remove("salvage");
    assert_refused(
        &target_fs,
        &target,
        &serde_json::to_string(&v).unwrap(),
        ErrorCode::BundleIntegrityFailed,
    );
    // With the explicit opt-in the prefix becomes a normal session that continues.
    let report = target
        .import_bundle(
            &exported.text,
            &ImportOptions {
                allow_salvage: true,
            },
            &NoProgress,
        )
        .unwrap();
    assert_eq!(report.salvage, Some(salvage));
    assert!(
        target
            .sessions()
            .load(&report.session_id)
            .unwrap()
            .health
            .is_healthy()
    );
    assert_eq!(
        events(&target, &report.session_id),
        &loaded.events().all().unwrap()[..]
    );
    let resumed = report.runs[0].resume.clone().unwrap();
    target
        .continue_workflow(ack(
            &resumed,
            "Continued from the prefix.",
            vec![loop_control("stop")],
        ))
        .unwrap();
}

/// lock: L-HEALTH-CORRUPTION-CODES
#[test]
fn sessions_without_a_validated_prefix_are_not_exported() {
    let fs = MemFs::new();
    let wr = open_seeded(&fs, 15);
    let head = build_session(&wr, "project.demo", &[]);
    let versioned = build_session(&wr, "project.demo", &[]);
    // corrupt_head: the first (only) segment is damaged.
    corrupt_last_segment(&fs, &head.session);
    // unknown_version: the first manifest record claims a future schema version.
    fs.corrupt(&layout::manifest_path(&versioned.session), |bytes| {
        let text = String::from_utf8(bytes.clone()).unwrap();
        *bytes = text.replacen("\"v\":1", "\"v\":9", 1).into_bytes();
    });
    let wr = open_seeded(&fs, 15);
    let err = wr
        .export_session(head.session.as_str(), &NoProgress)
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionCorrupt);
    assert!(err.message.contains("corrupt_head"), "{}", err.message);
    let err = wr
        .export_session(versioned.session.as_str(), &NoProgress)
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionUnknownVersion);
    let err = wr.export_session("sess_nothere", &NoProgress).unwrap_err();
    assert_eq!(err.code, ErrorCode::SessionNotFound);
    let err = wr.export_session("not a session", &NoProgress).unwrap_err();
    assert_eq!(err.code, ErrorCode::ValidationError);
}

#[test]
fn an_import_writes_the_session_as_one_segment_per_original_segment() {
    let source_fs = MemFs::new();
    let source = open_seeded(&source_fs, 16);
    let built = demo_session(&source);
    let exported = export(&source, &built.session);
    let target_fs = MemFs::new();
    let target = open_seeded(&target_fs, 17);
    let report = import(&target, &exported.text).unwrap();
    let segments = |fs: &MemFs, id: &SessionId| -> Vec<String> {
        fs.list_dir(&layout::events_dir(id))
            .unwrap()
            .into_iter()
            .filter(|n| !n.starts_with('.'))
            .collect()
    };
    assert_eq!(
        segments(&target_fs, &report.session_id),
        segments(&source_fs, &built.session)
    );
    // Same manifest, byte for byte (same id, same events, same store).
    let manifest = |fs: &MemFs, id: &SessionId| fs.snapshot()[&layout::manifest_path(id)].clone();
    assert_eq!(
        manifest(&target_fs, &report.session_id),
        manifest(&source_fs, &built.session)
    );
    assert!(Path::new(&layout::manifest_path(&report.session_id)).is_relative());
}

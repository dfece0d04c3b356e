//! Session health covers the whole session (decision D53): a snapshot or pinned workflow that
//! committed events reference and that is missing or damaged makes the session non-healthy with
//! its own reason. Execution refuses it with the way back, `resume_session` and GC name it, and
//! one bad session never breaks a call about another. A token whose session lost its manifest
//! or directory gets its own error, never "unknown node".
//!
//! Before: a deleted snapshot or an altered pinned workflow reported `healthy`, then broke
//! `resume_session` for every session in the data directory; a deleted manifest answered
//! `TOKEN_UNKNOWN_NODE`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use std::path::Path;
use std::time::{Duration, SystemTime};

use protocol_support::*;
use serde_json::json;
use workrail::gc::{GcOptions, RetentionClock};
use workrail::mcp::dispatch::call_tool;
use workrail::protocol::Workrail;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail::store::{CorruptionReason, SessionHealth, layout};
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::event::EventData;
use workrail_spec::ids::SessionId;
use workrail_spec::tools::{ExecutionOutput, ResumeSessionOutput};

/// A demo session with two acknowledged steps; returns its latest response.
fn session_with_history(wr: &Workrail) -> ExecutionOutput {
    let first = start(wr, "project.demo");
    let second = wr
        .continue_workflow(ack(&first, "planned", vec![]))
        .unwrap();
    wr.continue_workflow(ack(&second, "implemented", vec![]))
        .unwrap()
}

/// A process of its own: another seed, so its sessions get other ids.
fn open_as(fs: &MemFs, seed: u64) -> Workrail {
    let shared: std::sync::Arc<dyn StoreFs> = std::sync::Arc::new(fs.clone());
    Workrail::with_parts(
        shared,
        catalog(),
        std::sync::Arc::new(workrail::entropy::SeededEntropy::new(seed)),
    )
    .unwrap()
}

fn id(out: &ExecutionOutput) -> SessionId {
    out.session.session_id.clone()
}

/// The snapshot of the session's last node.
fn last_snapshot_path(wr: &Workrail, session: &SessionId) -> std::path::PathBuf {
    let loaded = wr.sessions().load(session).unwrap();
    let snapshot = loaded
        .events()
        .all()
        .unwrap()
        .iter()
        .rev()
        .find_map(|e| match e.data() {
            EventData::NodeCreated(n) => Some(n.snapshot_ref.clone()),
            _ => None,
        })
        .unwrap();
    layout::snapshot_path(&snapshot)
}

fn pinned_workflow_path(wr: &Workrail, session: &SessionId) -> std::path::PathBuf {
    let loaded = wr.sessions().load(session).unwrap();
    let hash = loaded
        .events()
        .all()
        .unwrap()
        .iter()
        .find_map(|e| match e.data() {
            EventData::RunStarted(r) => Some(r.workflow_hash.clone()),
            _ => None,
        })
        .unwrap();
    layout::pinned_workflow_path(&hash)
}

fn reason_of(wr: &Workrail, session: &SessionId) -> (SessionHealth, Option<CorruptionReason>) {
    let loaded = wr.sessions().load(session).unwrap();
    let reason = loaded.health.corruption().map(|c| c.reason);
    (loaded.health.clone(), reason)
}

fn rehydrate_error(wr: &Workrail, out: &ExecutionOutput) -> ErrorEnvelope {
    wr.continue_workflow(rehydrate(&out.state_token))
        .expect_err("the damaged session must be refused")
}

fn advance_error(wr: &Workrail, out: &ExecutionOutput) -> ErrorEnvelope {
    wr.continue_workflow(ack(out, "more", vec![]))
        .expect_err("the damaged session must be refused")
}

fn resume(wr: &Workrail) -> (ResumeSessionOutput, String) {
    let outcome = call_tool(wr, "resume_session", Some(json!({})));
    assert!(!outcome.is_error, "{}", outcome.text);
    (
        serde_json::from_value(outcome.structured).unwrap(),
        outcome.text,
    )
}

#[derive(Debug)]
struct Clock;

impl RetentionClock for Clock {
    fn now(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    }
    fn modified(&self, _: &Path) -> std::io::Result<Option<SystemTime>> {
        Ok(Some(self.now()))
    }
}

/// lock: L-HEALTH-CLOSED-SET, L-HEALTH-EXECUTION-GATE, L-HEALTH-CORRUPTION-CODES
#[test]
fn a_missing_snapshot_makes_the_session_unhealthy_and_execution_refuses_it() {
    let fs = MemFs::new();
    let out = session_with_history(&open(&fs));
    let session = id(&out);
    fs.remove_file(&last_snapshot_path(&open(&fs), &session))
        .unwrap();

    let wr = open(&fs); // a fresh process
    let (health, reason) = reason_of(&wr, &session);
    // The nodes before the one that lost its snapshot still validate: a salvageable prefix.
    assert!(
        matches!(health, SessionHealth::CorruptTail(_)),
        "{health:?}"
    );
    assert_eq!(reason, Some(CorruptionReason::SnapshotMissing));

    for error in [rehydrate_error(&wr, &out), advance_error(&wr, &out)] {
        assert_eq!(error.code, ErrorCode::SessionCorrupt, "{error:?}");
        assert_eq!(error.retry, Retry::NotRetryable);
        let details = error.details.as_ref().unwrap();
        assert_eq!(details["reason"], "snapshot_missing", "{details}");
        assert!(error.message.contains("is missing"), "{}", error.message);
        assert!(
            error.suggestion.contains("snapshots/") && error.suggestion.contains("--allow-salvage"),
            "the way back is named: {}",
            error.suggestion
        );
    }
}

/// lock: L-HEALTH-CLOSED-SET, L-HEALTH-EXECUTION-GATE
#[test]
fn a_damaged_pinned_workflow_or_snapshot_is_named_as_damaged() {
    let fs = MemFs::new();
    let out = session_with_history(&open(&fs));
    let session = id(&out);
    let wr = open(&fs);
    let workflow = pinned_workflow_path(&wr, &session);
    fs.corrupt(&workflow, |bytes| {
        let i = bytes.len() / 2;
        bytes[i] ^= 0x01;
    });
    let wr = open(&fs);
    let (health, reason) = reason_of(&wr, &session);
    // The run's first segment references the workflow: nothing validates.
    assert!(
        matches!(health, SessionHealth::CorruptHead(_)),
        "{health:?}"
    );
    assert_eq!(reason, Some(CorruptionReason::WorkflowDamaged));
    let error = rehydrate_error(&wr, &out);
    assert_eq!(
        error.details.as_ref().unwrap()["reason"],
        "workflow_damaged"
    );
    assert!(
        error.suggestion.contains("nothing to export"),
        "no prefix to salvage: {}",
        error.suggestion
    );

    let fs = MemFs::new();
    let out = session_with_history(&open(&fs));
    let session = id(&out);
    let snapshot = last_snapshot_path(&open(&fs), &session);
    fs.corrupt(&snapshot, |bytes| {
        let i = bytes.len() / 3;
        bytes[i] ^= 0x01;
    });
    let wr = open(&fs);
    assert_eq!(
        reason_of(&wr, &session).1,
        Some(CorruptionReason::SnapshotDamaged)
    );
    assert_eq!(advance_error(&wr, &out).code, ErrorCode::SessionCorrupt);
}

/// lock: L-RESUME-HEALTHY-ONLY
#[test]
fn resume_session_names_the_damaged_session_and_still_offers_the_others() {
    let fs = MemFs::new();
    // Snapshots are shared by content: the good session stops a step earlier, so it shares
    // none with the damaged one's last node.
    let wr = open_as(&fs, 1);
    let good = id(&wr
        .continue_workflow(ack(&start(&wr, "project.demo"), "planned", vec![]))
        .unwrap());
    let bad = id(&session_with_history(&open_as(&fs, 2)));
    fs.remove_file(&last_snapshot_path(&open(&fs), &bad))
        .unwrap();

    let (out, text) = resume(&open(&fs));
    let offered: Vec<_> = out
        .candidates
        .iter()
        .map(|c| c.session_id.clone())
        .collect();
    assert_eq!(offered, vec![good.clone()]);
    assert_eq!(out.skipped_unhealthy_sessions, 1);
    assert_eq!(out.skipped_sessions.len(), 1);
    assert_eq!(out.skipped_sessions[0].session_id, bad);
    assert_eq!(out.skipped_sessions[0].health, "corrupt_tail");
    assert_eq!(
        out.skipped_sessions[0].reason.as_deref(),
        Some("snapshot_missing")
    );
    assert!(
        text.contains(&format!("- {bad} (corrupt_tail: snapshot_missing)")),
        "{text}"
    );

    // In a long-running process the session was validated before its object vanished: the
    // candidate is left out and named, and the other session is still offered.
    let fs = MemFs::new();
    let wr = open(&fs);
    let good = id(&session_with_history(&wr));
    // Another workflow, so the pinned workflow removed below is this session's alone.
    let bad = id(&start(&wr, "project.diverge"));
    let (before, _) = resume(&wr);
    assert_eq!(before.candidates.len(), 2);
    fs.remove_file(&pinned_workflow_path(&wr, &bad)).unwrap();
    let (after, _) = resume(&wr);
    let offered: Vec<_> = after
        .candidates
        .iter()
        .map(|c| c.session_id.clone())
        .collect();
    assert_eq!(offered, vec![good]);
    assert_eq!(after.skipped_sessions[0].session_id, bad);
}

/// lock: L-GC-SAFE-MODE
#[test]
fn gc_safe_mode_names_the_damaged_session_and_how_to_clear_it() {
    let fs = MemFs::new();
    let _good = id(&session_with_history(&open_as(&fs, 1)));
    let bad = id(&session_with_history(&open_as(&fs, 2)));
    fs.remove_file(&last_snapshot_path(&open(&fs), &bad))
        .unwrap();
    let wr = open(&fs);
    let report = wr
        .gc(
            &GcOptions {
                dry_run: true,
                ttl_days: None,
            },
            &Clock,
            &workrail::bundle::NoProgress,
        )
        .unwrap();
    assert!(report.safe_mode);
    let warning = report
        .warnings
        .iter()
        .find(|w| w.session_id.as_ref() == Some(&bad))
        .unwrap();
    assert_eq!(warning.reason.as_deref(), Some("snapshot_missing"));
    assert!(
        warning.message.contains(&format!("workrail export {bad}"))
            && warning.message.contains(&format!("sessions/{bad}")),
        "{}",
        warning.message
    );
}

/// lock: L-HEALTH-CORRUPTION-CODES
#[test]
fn a_lost_manifest_or_session_is_its_own_error_never_an_unknown_node() {
    let fs = MemFs::new();
    let out = session_with_history(&open(&fs));
    let session = id(&out);
    let manifest = layout::manifest_path(&session);
    let bytes = fs.read(&manifest).unwrap().unwrap();

    fs.set_len(&manifest, 0).unwrap();
    let wr = open(&fs);
    for error in [rehydrate_error(&wr, &out), advance_error(&wr, &out)] {
        assert_eq!(error.code, ErrorCode::SessionCorrupt, "{error:?}");
        assert_eq!(error.details.as_ref().unwrap()["reason"], "manifest_empty");
        assert!(
            error.message.contains("manifest.jsonl"),
            "{}",
            error.message
        );
    }
    // The ackToken alone (decision D34) gets the same answer.
    let alone = wr
        .continue_workflow(workrail_spec::tools::ContinueWorkflowInput {
            state_token: None,
            ..ack(&out, "more", vec![])
        })
        .unwrap_err();
    assert_eq!(alone.code, ErrorCode::SessionCorrupt, "{alone:?}");

    fs.remove_file(&manifest).unwrap();
    let error = rehydrate_error(&open(&fs), &out);
    assert_eq!(error.code, ErrorCode::SessionCorrupt);
    assert_eq!(
        error.details.as_ref().unwrap()["reason"],
        "manifest_missing"
    );

    // Restoring the manifest restores the session.
    fs.write_private(&manifest, &bytes).unwrap();
    open(&fs)
        .continue_workflow(rehydrate(&out.state_token))
        .unwrap();

    fs.remove_dir_all(&layout::session_dir(&session)).unwrap();
    let error = rehydrate_error(&open(&fs), &out);
    // The token is sound and the session is gone: `SESSION_NOT_FOUND`, worded for what
    // happened (decision D130).
    assert_eq!(error.code, ErrorCode::SessionNotFound, "{error:?}");
    assert_eq!(
        error.details.as_ref().unwrap()["problem"],
        "session_deleted"
    );
    assert!(error.message.contains("deleted"), "{}", error.message);
    assert!(
        error.suggestion.contains("workrail import"),
        "{}",
        error.suggestion
    );
}

/// lock: L-STORE-CRASH-BEFORE-PINS
#[test]
fn a_session_missing_its_pins_names_workrail_repair() {
    let fs = MemFs::new();
    let out = session_with_history(&open(&fs));
    let session = id(&out);
    // Drop the last transaction's pin records: what a write torn by a power cut leaves.
    let manifest = layout::manifest_path(&session);
    let text = String::from_utf8(fs.read(&manifest).unwrap().unwrap()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let last_close = lines
        .iter()
        .rposition(|l| l.contains("\"segment_closed\""))
        .unwrap();
    assert!(
        last_close + 1 < lines.len(),
        "the last commit pinned a snapshot"
    );
    let kept = lines[..=last_close].join("\n") + "\n";
    fs.set_len(&manifest, kept.len() as u64).unwrap();

    let wr = open(&fs);
    assert_eq!(
        reason_of(&wr, &session).1,
        Some(CorruptionReason::MissingSnapshotPins)
    );
    let error = advance_error(&wr, &out);
    assert_eq!(error.code, ErrorCode::SessionCorrupt);
    assert!(
        error
            .suggestion
            .contains(&format!("workrail repair {session}")),
        "{}",
        error.suggestion
    );
    // And repair brings it back.
    wr.repair_session(session.as_str()).unwrap();
    open(&fs)
        .continue_workflow(rehydrate(&out.state_token))
        .unwrap();
}

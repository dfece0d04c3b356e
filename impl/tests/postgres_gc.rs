//! Maintenance on PostgreSQL: `workrail repair` checks a session instead of refusing
//! (decision D111), and `workrail gc` applies the file store's retention rules (D112).
//!
//! Guards against: a repair that writes to a PostgreSQL session or calls a damaged one healthy,
//! and the maintenance commands refusing a PostgreSQL store they can serve.
//!
//! Needs `WORKRAIL_TEST_POSTGRES=postgres://…` (`source .ci/postgres.sh`); without it the tests
//! say why and pass, except under `CI`, where they fail. Each test uses a schema of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::postgres_support;
use crate::protocol_support;

use std::sync::Arc;

use postgres_support::{Schema, postgres_url};
use protocol_support::{ack, start};
use workrail::bundle::NoProgress;
use workrail::gc::{
    GcOptions, GcReport, GcWarningCode, OsRetentionClock, RetentionConfig, RetentionDecision,
};
use workrail::protocol::Workrail;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail::store::{SessionBackend, StoreError};
use workrail_spec::error::{ErrorCode, Retry};
use workrail_spec::ids::SessionId;

#[test]
fn repair_on_postgres_says_a_healthy_session_is_healthy_and_writes_nothing() {
    let Some(url) = postgres_url(
        "repair_on_postgres_says_a_healthy_session_is_healthy",
        "maintenance",
    ) else {
        return;
    };
    let schema = Schema::new(&url, "wrg");
    let wr = schema.workrail();
    let first = start(&wr, "wr.coding_task");
    wr.continue_workflow(ack(&first, "Step 0 done.", vec![]))
        .unwrap();
    let session = first.session.session_id.to_string();
    let before = schema.rows();
    let report = wr.repair_session(&session).unwrap();
    assert!(
        report.contains(&format!("Session {session} is healthy; nothing to repair")),
        "{report}"
    );
    assert!(report.contains("one transaction"), "{report}");
    assert_eq!(schema.rows(), before, "repair wrote to a healthy session");

    let missing = wr.repair_session("sess_aaaaaaaaaaaaaaaa").unwrap_err();
    assert_eq!(missing.code, ErrorCode::SessionNotFound, "{missing:?}");
}

#[test]
fn repair_on_postgres_names_the_verdict_of_a_damaged_session_and_the_way_back() {
    let Some(url) = postgres_url("repair_on_postgres_names_the_verdict", "maintenance") else {
        return;
    };
    let schema = Schema::new(&url, "wrg");
    let wr = schema.workrail();
    let first = start(&wr, "wr.coding_task");
    wr.continue_workflow(ack(&first, "Step 0 done.", vec![]))
        .unwrap();
    let session = first.session.session_id.to_string();
    // An event row's text changed by hand, same length: `segment_digest_mismatch`.
    schema.run(&format!(
        "UPDATE {}.events SET body = replace(body, 'Step 0 done.', 'Step 9 done.') WHERE body LIKE '%Step 0 done.%'",
        schema.name
    ));
    let before = schema.rows();
    let refused = wr.repair_session(&session).unwrap_err();
    assert_eq!(refused.code, ErrorCode::SessionCorrupt, "{refused:?}");
    assert_eq!(refused.retry, Retry::NotRetryable, "{refused:?}");
    assert!(
        refused.message.contains("segment_digest_mismatch")
            && refused.message.contains("was not repaired")
            && refused.message.contains("nothing was written"),
        "{}",
        refused.message
    );
    assert!(
        refused
            .suggestion
            .contains(&format!("workrail export {session}")),
        "the way back is not named: {}",
        refused.suggestion
    );
    assert_eq!(schema.rows(), before, "repair wrote to a damaged session");
}

fn gc(wr: &Workrail, dry_run: bool) -> GcReport {
    let options = GcOptions {
        dry_run,
        ttl_days: None,
    };
    wr.gc(
        &options,
        &OsRetentionClock::new("/nonexistent"),
        &NoProgress,
    )
    .unwrap()
}

/// A session started and acked `acks` times; its id.
fn session_with(wr: &Workrail, acks: usize) -> SessionId {
    let mut out = start(wr, "wr.coding_task");
    let id = out.session.session_id.clone();
    for i in 0..acks {
        out = wr
            .continue_workflow(ack(&out, &format!("Step {i} done."), vec![]))
            .unwrap();
    }
    id
}

impl Schema {
    /// Makes `sessions` look idle for 100 days.
    fn age(&self, sessions: &[&SessionId]) {
        for id in sessions {
            self.run(&format!(
                "UPDATE {}.sessions SET last_activity = now() - interval '100 days' WHERE session_id = '{id}'",
                self.name
            ));
        }
    }

    /// Makes every object stored so far older than the sweep's grace.
    fn age_objects(&self) {
        for t in ["snapshots", "workflows", "artifacts"] {
            self.run(&format!(
                "UPDATE {}.{t} SET created_at = now() - interval '2 hours'",
                self.name
            ));
        }
    }
}

fn verdict(report: &GcReport, id: &SessionId) -> (RetentionDecision, bool) {
    let v = report
        .sessions
        .iter()
        .find(|v| &v.session_id == id)
        .unwrap_or_else(|| panic!("no verdict for {id}: {report:?}"));
    (v.decision, v.deleted)
}

#[test]
fn gc_on_postgres_deletes_expired_sessions_and_sweeps_only_old_unreferenced_objects() {
    let Some(url) = postgres_url("gc_on_postgres_deletes_expired_sessions", "maintenance") else {
        return;
    };
    let schema = Schema::new(&url, "wrg");
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    let wr = schema.workrail_in(Arc::clone(&fs));
    let expired = session_with(&wr, 3);
    let recent = session_with(&wr, 1);
    let kept = session_with(&wr, 1);
    RetentionConfig {
        ttl_days: 60,
        keep: vec![kept.clone()],
    }
    .save(fs.as_ref())
    .unwrap();
    schema.age(&[&expired, &kept]);
    schema.age_objects();
    // An unreferenced object stored just now (a writer's put before its plan): kept.
    let young = format!("sha256:{}", "0".repeat(64));
    schema.run(&format!(
        "INSERT INTO {}.snapshots (digest, body) VALUES ('{young}', '{{}}')",
        schema.name
    ));

    // `workrail sessions` dates each session by its last activity.
    let dated = wr.sessions_by_activity(&|_| None).unwrap();
    let age_of = |id: &SessionId| {
        let at = dated
            .iter()
            .find(|(_, row)| &row.session_id == id)
            .and_then(|(at, _)| *at)
            .unwrap_or_else(|| panic!("{id} has no last activity"));
        std::time::SystemTime::now()
            .duration_since(at)
            .unwrap_or_default()
    };
    assert!(age_of(&expired) > std::time::Duration::from_secs(99 * 86_400));
    assert!(age_of(&recent) < std::time::Duration::from_secs(3600));
    assert_eq!(
        dated[0].1.session_id, recent,
        "the newest session is not first"
    );

    let rows = schema.rows();
    let dry = gc(&wr, true);
    assert!(!dry.safe_mode, "{dry:?}");
    assert_eq!(dry.deleted_sessions, vec![expired.clone()], "{dry:?}");
    assert!(
        !dry.deleted_snapshots.is_empty(),
        "the expired session's own snapshots are not swept: {dry:?}"
    );
    assert_eq!(schema.rows(), rows, "a dry run wrote");

    let report = gc(&wr, false);
    assert!(
        !report.safe_mode && report.warnings.is_empty(),
        "{report:?}"
    );
    assert_eq!(report.deleted_sessions, vec![expired.clone()]);
    assert_eq!(report.deleted_snapshots, dry.deleted_snapshots);
    assert_eq!(
        report.deleted_pinned_workflows,
        dry.deleted_pinned_workflows
    );
    assert_eq!(
        verdict(&report, &expired),
        (RetentionDecision::Expired, true)
    );
    assert_eq!(
        verdict(&report, &recent),
        (RetentionDecision::WithinTtl, false)
    );
    assert_eq!(
        verdict(&report, &kept),
        (RetentionDecision::KeepListed, false)
    );
    assert!(report.young_objects_kept >= 1, "{report:?}");
    assert_eq!(
        schema.count(&format!(
            "SELECT count(*) FROM {}.snapshots WHERE digest = '{young}'",
            schema.name
        )),
        1,
        "a young unreferenced object was swept"
    );
    for table in ["events", "manifest", "sessions"] {
        assert_eq!(
            schema.count(&format!(
                "SELECT count(*) FROM {}.{table} WHERE session_id = '{expired}'",
                schema.name
            )),
            0,
            "rows of the deleted session remain in {table}"
        );
    }

    // What stays loads healthy from every row (its objects all there) and goes on.
    let fresh = schema.backend();
    assert!(matches!(
        SessionBackend::load(&fresh, &expired),
        Err(StoreError::NotFound { .. })
    ));
    for id in [&recent, &kept] {
        let loaded = SessionBackend::load(&fresh, id).unwrap();
        assert!(loaded.health.is_healthy(), "{id}: {:?}", loaded.health);
    }
    let again = gc(&wr, false);
    assert!(again.deleted_sessions.is_empty() && again.deleted_snapshots.is_empty());
}

#[test]
fn gc_on_postgres_deletes_nothing_while_a_session_is_damaged() {
    let Some(url) = postgres_url(
        "gc_on_postgres_deletes_nothing_while_damaged",
        "maintenance",
    ) else {
        return;
    };
    let schema = Schema::new(&url, "wrg");
    let wr = schema.workrail();
    let expired = session_with(&wr, 2);
    let damaged = session_with(&wr, 1);
    schema.age(&[&expired]);
    schema.age_objects();
    schema.run(&format!(
        "UPDATE {}.events SET body = replace(body, 'Step 0 done.', 'Step 9 done.') WHERE session_id = '{damaged}'",
        schema.name
    ));
    let rows = schema.rows();
    let report = gc(&wr, false);
    assert!(report.safe_mode, "{report:?}");
    assert!(report.deleted_sessions.is_empty() && report.deleted_snapshots.is_empty());
    assert_eq!(verdict(&report, &damaged).0, RetentionDecision::Unhealthy);
    let warning = report
        .warnings
        .iter()
        .find(|w| w.session_id.as_ref() == Some(&damaged))
        .unwrap();
    assert_eq!(warning.code, GcWarningCode::SafeModeCorruptSession);
    assert_eq!(warning.reason.as_deref(), Some("segment_digest_mismatch"));
    assert_eq!(schema.rows(), rows, "safe mode deleted something");
}

#[test]
fn gc_on_postgres_never_deletes_a_session_another_process_holds() {
    let Some(url) = postgres_url(
        "gc_on_postgres_never_deletes_a_locked_session",
        "maintenance",
    ) else {
        return;
    };
    let schema = Schema::new(&url, "wrg");
    let wr = schema.workrail();
    let expired = session_with(&wr, 1);
    schema.age(&[&expired]);
    let other = schema.backend();
    let guard = other.lock_session(&expired).unwrap();
    let report = gc(&wr, false);
    assert!(report.deleted_sessions.is_empty(), "{report:?}");
    assert_eq!(
        verdict(&report, &expired),
        (RetentionDecision::Locked, false)
    );
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.code == GcWarningCode::SessionLocked)
    );
    drop(guard);
    let report = gc(&wr, false);
    assert_eq!(report.deleted_sessions, vec![expired]);
}

/// A `last_activity` that cannot be read (NULL, or not a finite time) is an unknown age on
/// PostgreSQL as on files: the session is retained with a warning, never judged from 1970.
///
/// lock: L-GC-RETENTION
#[test]
fn gc_on_postgres_keeps_a_session_whose_last_activity_cannot_be_read() {
    let Some(url) = postgres_url(
        "gc_on_postgres_keeps_a_session_whose_last_activity_cannot_be_read",
        "maintenance",
    ) else {
        return;
    };
    let schema = Schema::new(&url, "wrg");
    let wr = schema.workrail();
    let infinite = session_with(&wr, 1);
    let unset = session_with(&wr, 1);
    schema.run(&format!(
        "UPDATE {}.sessions SET last_activity = '-infinity' WHERE session_id = '{infinite}'",
        schema.name
    ));
    // A hand edit may drop the column's NOT NULL too; a NULL must not be 1970 either.
    schema.run(&format!(
        "ALTER TABLE {0}.sessions ALTER COLUMN last_activity DROP NOT NULL;
         UPDATE {0}.sessions SET last_activity = NULL WHERE session_id = '{unset}'",
        schema.name
    ));
    let report = gc(&wr, false);
    assert!(!report.safe_mode, "{report:?}");
    assert!(report.deleted_sessions.is_empty(), "{report:?}");
    for id in [&infinite, &unset] {
        assert_eq!(verdict(&report, id), (RetentionDecision::AgeUnknown, false));
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.code == GcWarningCode::SessionAgeUnknown
                    && w.session_id.as_ref() == Some(id)),
            "{report:?}"
        );
    }
    wr.continue_workflow(protocol_support::rehydrate(
        &start(&wr, "wr.coding_task").state_token,
    ))
    .unwrap();
}

/// A session GC deleted answers `SESSION_NOT_FOUND` saying so, to a server that had it cached
/// (decision D130): never `TOKEN_UNKNOWN_NODE` or an internal error.
///
/// lock: L-GC-RETENTION
#[test]
fn a_session_gc_deleted_on_postgres_answers_session_not_found() {
    let Some(url) = postgres_url(
        "a_session_gc_deleted_on_postgres_answers_session_not_found",
        "maintenance",
    ) else {
        return;
    };
    let schema = Schema::new(&url, "wrg");
    let server = schema.workrail();
    let out = start(&server, "wr.coding_task");
    let id = out.session.session_id.clone();
    schema.age(&[&id]);
    let report = gc(&schema.workrail(), false);
    assert_eq!(report.deleted_sessions, vec![id.clone()], "{report:?}");
    for answer in [
        server.continue_workflow(ack(&out, "done", vec![])),
        server.continue_workflow(protocol_support::rehydrate(&out.state_token)),
    ] {
        let err = answer.unwrap_err();
        assert_eq!(err.code, ErrorCode::SessionNotFound, "{err:?}");
        assert_eq!(
            err.details.as_ref().unwrap()["problem"],
            serde_json::json!("session_deleted")
        );
    }
    let again = gc(&schema.workrail(), false);
    assert!(!again.safe_mode, "{again:?}");
    assert!(!again.sessions.iter().any(|v| v.session_id == id));
}

//! GC on PostgreSQL (decision D112): the file store's rules over the rows.
//!
//! - Every session is loaded and validated with a full read; any that is not healthy (or cannot
//!   be read) puts GC in safe mode: nothing is deleted.
//! - Age is the time since `sessions.last_activity`, which every committed append sets.
//! - An expired session is deleted in one transaction under its advisory lock (never while
//!   another process appends), and only when its manifest rows are still the ones GC judged;
//!   the same transaction deletes the derived rows (the persisted resume index holds the
//!   session's notes, D115), as GC removes the index file on the file store.
//! - The sweep runs only when no session appeared or grew while GC ran, and is one statement:
//!   it deletes the snapshots, workflows and artifacts the retained sessions do not reference
//!   and that were stored (or stored again) more than [`CAS_GRACE`] ago, so an object a writer
//!   stores just before the plan that references it is kept.
//! - The retention config and the records of dead servers stay in the data directory.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use workrail_spec::error::ErrorEnvelope;
use workrail_spec::ids::{SessionId, Sha256Digest, SnapshotRef, WorkflowHash};

use super::{
    CAS_GRACE, DAY_SECS, GcOptions, GcReport, GcWarning, GcWarningCode, RetentionClock,
    RetentionConfig, RetentionDecision, Roots, SessionVerdict, Sweeper, unhealthy_warning,
};
use crate::bundle::Progress;
use crate::protocol::Workrail;
use crate::store::postgres::{Deleted, PostgresBackend};
use crate::store::{LoadedSession, SessionBackend, StoreError};

fn envelope(e: StoreError) -> ErrorEnvelope {
    e.to_envelope(false)
}

/// The freshness key GC checks under the lock: manifest (records, bytes).
fn key_of(loaded: &LoadedSession) -> (i64, i64) {
    (
        loaded.manifest.len() as i64,
        loaded.manifest_committed_bytes as i64,
    )
}

pub(super) fn run(
    wr: &Workrail,
    backend: &PostgresBackend,
    options: &GcOptions,
    clock: &dyn RetentionClock,
    progress: &dyn Progress,
) -> Result<GcReport, ErrorEnvelope> {
    let fs = wr.data_fs().as_ref();
    let config = match RetentionConfig::load(fs)? {
        Some(config) => config,
        None => {
            let config = RetentionConfig::default();
            if !options.dry_run {
                config.save(fs)?;
            }
            config
        }
    };
    let ttl_days = options.ttl_days.unwrap_or(config.ttl_days);
    let ttl = Duration::from_secs(ttl_days.saturating_mul(DAY_SECS));
    let keep: HashSet<SessionId> = config.keep.into_iter().collect();
    let now = clock.now();
    let mut report = GcReport {
        dry_run: options.dry_run,
        ttl_days,
        safe_mode: false,
        sessions: Vec::new(),
        deleted_sessions: Vec::new(),
        deleted_snapshots: Vec::new(),
        deleted_pinned_workflows: Vec::new(),
        deleted_artifacts: Vec::new(),
        deleted_uncommitted_sessions: Vec::new(),
        deleted_temp_files: Vec::new(),
        deleted_server_records: Vec::new(),
        young_objects_kept: 0,
        warnings: Vec::new(),
    };

    // 1) Every session, validated from all its rows, before anything is decided.
    let activity = backend.last_activity().map_err(envelope)?;
    let seen: BTreeSet<String> = activity.iter().map(|(id, _)| id.clone()).collect();
    progress.begin("gc: validating sessions", activity.len() as u64);
    let mut healthy: Vec<(SessionId, Arc<LoadedSession>, i64)> = Vec::new();
    for (name, last) in &activity {
        progress.advance(1);
        let Ok(id) = SessionId::parse(name) else {
            report.warnings.push(GcWarning::new(
                GcWarningCode::StrayEntry,
                None,
                format!("the sessions row {name:?} is not a session id; left alone"),
            ));
            continue;
        };
        let verdict = |decision| SessionVerdict {
            session_id: id.clone(),
            decision,
            age_days: None,
            deleted: false,
        };
        match SessionBackend::load(backend, &id) {
            Ok(loaded) if loaded.health.is_healthy() => healthy.push((id, loaded, *last)),
            Ok(loaded) => {
                report.safe_mode = true;
                report.warnings.push(unhealthy_warning(&id, &loaded.health));
                report.sessions.push(verdict(RetentionDecision::Unhealthy));
            }
            Err(StoreError::NotFound { .. }) => {
                // A row without events (deleted by hand): nothing to judge or keep.
                report
                    .sessions
                    .push(verdict(RetentionDecision::NoCommittedTruth));
            }
            Err(e) => {
                report.safe_mode = true;
                report.warnings.push(GcWarning::new(
                    GcWarningCode::SafeModeUnreadableSession,
                    Some(id.clone()),
                    format!(
                        "safe mode: session {id} could not be validated ({e}); gc deletes nothing. To clear it: {}",
                        crate::store::how_to_clear(
                            &id,
                            workrail_spec::closed::SessionHealthKind::Healthy,
                            None
                        )
                    ),
                ));
                report.sessions.push(verdict(RetentionDecision::Unhealthy));
            }
        }
    }

    // 2) Retention by last activity.
    let mut retained: Vec<Arc<LoadedSession>> = Vec::new();
    let mut expired: Vec<(SessionId, Arc<LoadedSession>, usize)> = Vec::new();
    for (id, loaded, last) in healthy {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(last).unwrap_or(0));
        let age = now.duration_since(at).unwrap_or_default();
        let decision = if keep.contains(&id) {
            RetentionDecision::KeepListed
        } else if age > ttl {
            RetentionDecision::Expired
        } else {
            RetentionDecision::WithinTtl
        };
        report.sessions.push(SessionVerdict {
            session_id: id.clone(),
            decision,
            age_days: Some(age.as_secs() / DAY_SECS),
            deleted: false,
        });
        if decision == RetentionDecision::Expired {
            expired.push((id, loaded, report.sessions.len() - 1));
        } else {
            retained.push(loaded);
        }
    }
    if report.safe_mode {
        report
            .sessions
            .sort_by(|a, b| a.session_id.cmp(&b.session_id));
        progress.finish();
        return Ok(report);
    }

    // 3) Expired sessions, each in one transaction under its lock.
    let mut sweep_blocked = false;
    progress.begin("gc: deleting expired sessions", expired.len() as u64);
    for (id, loaded, verdict) in expired {
        progress.advance(1);
        if options.dry_run {
            report.deleted_sessions.push(id);
            continue;
        }
        match backend
            .delete_session(&id, key_of(&loaded))
            .map_err(envelope)?
        {
            Deleted::Yes => {
                report.sessions[verdict].deleted = true;
                report.deleted_sessions.push(id);
            }
            Deleted::Locked => {
                report.sessions[verdict].decision = RetentionDecision::Locked;
                report.warnings.push(GcWarning::new(
                    GcWarningCode::SessionLocked,
                    Some(id.clone()),
                    format!(
                        "session {id} is expired but another WorkRail process holds its lock; retained this time"
                    ),
                ));
                retained.push(loaded);
            }
            Deleted::Changed => {
                report.sessions[verdict].decision = RetentionDecision::Changed;
                report.warnings.push(GcWarning::new(
                    GcWarningCode::SessionChanged,
                    Some(id.clone()),
                    format!("session {id} changed while gc ran; retained this time"),
                ));
                sweep_blocked = true;
                retained.push(loaded);
            }
        }
    }
    report
        .sessions
        .sort_by(|a, b| a.session_id.cmp(&b.session_id));

    // 4) Mark from the retained sessions.
    let mut roots = Roots::default();
    for loaded in &retained {
        roots.add(loaded);
    }

    // 5) Nothing may have changed under the marks: no new session, no retained session grown.
    if !options.dry_run && !sweep_blocked {
        let now_bytes = backend.manifest_lengths_by_id().map_err(envelope)?;
        let new_session = now_bytes.iter().any(|(id, _)| !seen.contains(id));
        let grown = retained.iter().any(|loaded| {
            now_bytes
                .iter()
                .find(|(id, _)| id == loaded.session_id.as_str())
                .is_none_or(|(_, bytes)| *bytes != loaded.manifest_committed_bytes as i64)
        });
        sweep_blocked = new_session || grown;
    }
    if sweep_blocked {
        report.warnings.push(GcWarning::new(
            GcWarningCode::SweepSkipped,
            None,
            "sessions changed while gc ran, so no object was deleted this time; run gc again"
                .into(),
        ));
        progress.finish();
        return Ok(report);
    }

    // 6) The sweep: one statement.
    let sorted = |set: Vec<String>| {
        let mut set = set;
        set.sort();
        set
    };
    let swept = backend
        .sweep(
            [
                sorted(
                    roots
                        .snapshots
                        .iter()
                        .map(|r| r.digest().as_str().to_owned())
                        .collect(),
                ),
                sorted(
                    roots
                        .workflows
                        .iter()
                        .map(|h| h.digest().as_str().to_owned())
                        .collect(),
                ),
                sorted(
                    roots
                        .artifacts
                        .iter()
                        .map(|d| d.as_str().to_owned())
                        .collect(),
                ),
            ],
            CAS_GRACE,
            options.dry_run,
        )
        .map_err(envelope)?;
    let digests = |list: &[String]| -> Vec<Sha256Digest> {
        list.iter()
            .filter_map(|d| Sha256Digest::parse(d).ok())
            .collect()
    };
    report.deleted_snapshots = digests(&swept.snapshots)
        .into_iter()
        .map(SnapshotRef::from_digest)
        .collect();
    report.deleted_pinned_workflows = digests(&swept.workflows)
        .into_iter()
        .map(WorkflowHash::from_digest)
        .collect();
    report.deleted_artifacts = digests(&swept.artifacts);
    report.young_objects_kept = swept.young;

    // 7) Records of servers that ended without removing them stay a data-directory matter.
    let mut sweeper = Sweeper {
        fs,
        clock,
        now,
        dry_run: options.dry_run,
        young: 0,
        progress,
    };
    report.deleted_server_records = sweeper.sweep_server_records()?;
    progress.finish();
    Ok(report)
}

//! Import: validate everything, then write CAS objects, then the session through the append
//! gate (one plan per original segment), then re-mint tokens.

use std::borrow::Cow;
use std::collections::HashSet;

use serde::Serialize;
use workrail_spec::bundle::{BundleSalvage, ExportBundleV1};
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::event::SessionEvent;
use workrail_spec::ids::{BundleId, NodeId, RunId, SessionId};
use workrail_spec::token::{StatePayload, TokenPayload};
use workrail_spec::tools::{ContinueWorkflowInput, ExecutionOutput};

use super::check::{self, check_plan_fits};
use super::{BundleWarning, BundleWarningCode, Progress, bundle_failure};
use crate::protocol::{Workrail, invariant};
use crate::store::{AppendPlan, SessionIntent, SessionRead, StoreError};

/// How to import.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImportOptions {
    /// Import a salvage bundle (the validated prefix of a `corrupt_tail` session) as a normal,
    /// continuable session. Without it, salvage bundles are refused: salvage data is read-only.
    pub allow_salvage: bool,
}

/// A run of the imported session, with fresh tokens for its preferred tip.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportedRun {
    pub run_id: RunId,
    pub preferred_tip: NodeId,
    /// The rehydrate response at the preferred tip (`continue_workflow` without `ackToken`):
    /// fresh `stateToken`, `ackToken` and `checkpointToken`. `None` only with a
    /// `resume_unavailable` warning.
    pub resume: Option<ExecutionOutput>,
}

/// What an import did.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImportReport {
    /// The session id in this data directory.
    pub session_id: SessionId,
    /// The session id in the bundle.
    pub source_session_id: SessionId,
    /// True when the source id was taken here and the session was imported as a new one.
    pub remapped: bool,
    pub bundle_id: BundleId,
    /// Present when a salvage bundle was imported (with `allow_salvage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub salvage: Option<BundleSalvage>,
    pub events: usize,
    pub snapshots: usize,
    pub pinned_workflows: usize,
    pub artifacts: usize,
    pub runs: Vec<ImportedRun>,
    pub warnings: Vec<BundleWarning>,
}

/// Errors inside the append gate.
struct GateError(ErrorEnvelope);

impl From<StoreError> for GateError {
    fn from(e: StoreError) -> Self {
        Self(e.to_envelope(false))
    }
}

fn entropy_error(e: crate::entropy::EntropyError) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::StoreIoError,
        format!("import: {e}"),
        "Retry the import.",
        Retry::RetryableImmediate,
    )
}

/// The events of one segment rebuilt under `target` (the dedupeKey is derived again from it).
fn rebuild(
    events: impl Iterator<Item = SessionEvent>,
    target: &SessionId,
) -> Result<Vec<SessionEvent>, ErrorEnvelope> {
    events
        .map(|event| {
            let index = event.event_index();
            event.into_session(target.clone()).map_err(|e| {
                bundle_failure(
                    ErrorCode::BundleInvalidFormat,
                    format!("event {index} cannot be rebuilt under session {target}: {e}"),
                )
            })
        })
        .collect()
}

/// Imports a bundle (see the module docs of [`crate::bundle`]). Given the text by value
/// (a `String`), the import frees it as soon as the bundle is parsed.
pub fn import_bundle<'t>(
    wr: &Workrail,
    text: impl Into<Cow<'t, str>>,
    options: &ImportOptions,
    progress: &dyn Progress,
) -> Result<ImportReport, ErrorEnvelope> {
    let parts = wr.parts();

    // 1) Validate everything; nothing is written before this block ends.
    let text = text.into();
    let bundle =
        ExportBundleV1::parse_and_validate(&text).map_err(|e| bundle_failure(e.code, e.detail))?;
    drop(text);
    let body = &bundle.body;
    if let Some(salvage) = &body.salvage
        && !options.allow_salvage
    {
        return Err(ErrorEnvelope::new(
            ErrorCode::SessionCorrupt,
            format!(
                "import refused, nothing was written: bundle {} is a salvage export of session {} ({}: {} at manifest record {}); it holds only the validated prefix, and salvage data is read-only.",
                body.bundle_id, body.session.session_id, salvage.health, salvage.reason, salvage.manifest_index
            ),
            "Read the bundle as it is, or import it with `workrail import <file> --allow-salvage` to make its validated prefix a new, normal session that can be continued.",
            Retry::NotRetryable,
        )
        .with_details(serde_json::json!({
            "salvage": salvage,
        })));
    }
    let checked = check::check(&bundle)?;
    let mut warnings = checked.warnings;
    let source = body.session.session_id.clone();
    let existing: HashSet<SessionId> = parts
        .store
        .list_sessions()
        .map_err(|e| e.to_envelope(false))?
        .into_iter()
        .collect();
    let target = if existing.contains(&source) {
        loop {
            let bytes = parts.entropy.id_bytes().map_err(entropy_error)?;
            let fresh = SessionId::from_entropy(&bytes);
            if !existing.contains(&fresh) {
                break fresh;
            }
        }
    } else {
        source.clone()
    };
    let remapped = target != source;
    if remapped {
        warnings.push(BundleWarning::new(
            BundleWarningCode::SessionIdRemapped,
            format!(
                "session {source} already exists here; the bundle was imported as the new session {target} (no merge)"
            ),
        ));
    }
    // Every append plan must fit the store's limits before anything is written: each segment
    // is rebuilt under the target id, measured and dropped (one segment in memory at a time).
    for &(first, last) in &checked.segments {
        let plan = rebuild(body.session.events[first..=last].iter().cloned(), &target)?;
        check_plan_fits(&plan)?;
    }

    // 2) CAS objects first: a crash from here on leaves only unreferenced objects (GC'd later),
    //    never a session that references a missing object.
    progress.begin(
        "import",
        (body.session.pinned_workflows.len()
            + body.session.snapshots.len()
            + body.artifacts.len()
            + checked.segments.len()) as u64,
    );
    let store_err = |e: StoreError| e.to_envelope(false);
    for (hash, compiled) in &body.session.pinned_workflows {
        if &parts.store.put_workflow(compiled).map_err(store_err)? != hash {
            return Err(invariant(format!(
                "import: pinned workflow {hash} was stored under another hash"
            )));
        }
        progress.advance(1);
    }
    for (snapshot_ref, snapshot) in &body.session.snapshots {
        if &parts.store.put_snapshot(snapshot).map_err(store_err)? != snapshot_ref {
            return Err(invariant(format!(
                "import: snapshot {snapshot_ref} was stored under another ref"
            )));
        }
        progress.advance(1);
    }
    for (digest, value) in &body.artifacts {
        let object = value
            .as_object()
            .ok_or_else(|| invariant(format!("import: artifact {digest} is not a JSON object")))?;
        if &parts.store.put_artifact(object).map_err(store_err)?.0 != digest {
            return Err(invariant(format!(
                "import: artifact {digest} was stored under another digest"
            )));
        }
        progress.advance(1);
    }

    // What the report needs from the bundle. Everything else but the events (stored above) is
    // freed now, and the events move into the plans one segment at a time: the bundle and the
    // committed session are never both held whole.
    let report_counts = (
        body.session.events.len(),
        body.session.snapshots.len(),
        body.session.pinned_workflows.len(),
        body.artifacts.len(),
    );
    let (bundle_id, salvage) = (body.bundle_id.clone(), body.salvage.clone());
    let mut rest = bundle.body;
    let mut events = std::mem::take(&mut rest.session.events).into_iter();
    drop(rest);

    // 3) The session, under its lock, one plan per original segment (pins come from the store).
    let committed = parts
        .store
        .with_append_gate(&target, SessionIntent::Create, |gate| {
            if gate.session().event_count() > 0 {
                return Err(GateError(ErrorEnvelope::new(
                    ErrorCode::SessionLocked,
                    format!(
                        "import: session {target} was created by another WorkRail process while this import ran; nothing of the bundle was written to it."
                    ),
                    "Retry the import: it will pick a new session id.",
                    Retry::RetryableImmediate,
                )));
            }
            let mut identical = true;
            for &(first, last) in &checked.segments {
                let plan = rebuild(events.by_ref().take(last - first + 1), &target)
                    .map_err(GateError)?;
                // Each plan is compared with what it committed; a copy of one segment is all
                // the comparison holds (a copy of every expected event would only raise peak
                // memory).
                let expected = plan.clone();
                let at = gate.session().event_count();
                let appended = gate.append(AppendPlan { events: plan })?;
                if appended.iter().any(|a| !a.newly_appended) {
                    return Err(GateError(invariant(
                        "import: an append plan of a validated bundle was partly deduplicated",
                    )));
                }
                let committed = gate.session().events();
                identical &= committed.range(at..committed.len())?.as_ref() == &expected[..];
                progress.advance(1);
            }
            Ok(identical)
        })
        .map_err(|e: GateError| e.0)?;
    if !committed {
        return Err(invariant(format!(
            "import: session {target} committed other events than the bundle holds"
        )));
    }
    progress.finish();
    drop(events);

    // 4) Re-mint tokens: a rehydrate response for the preferred tip of every run, from the
    //    projection the rehydrates themselves use.
    let mut runs = Vec::new();
    for (run_id, tip, workflow_hash) in wr.run_tips(&target)? {
        let state_token = parts.codec.mint(&TokenPayload::State(StatePayload {
            session_id: target.clone(),
            run_id: run_id.clone(),
            node_id: tip.clone(),
            workflow_hash,
        }));
        let resume = match wr.continue_workflow(ContinueWorkflowInput {
            state_token: Some(state_token),
            ack_token: None,
            context: None,
            output: None,
            preferences: Vec::new(),
            preset: None,
        }) {
            Ok(out) => Some(out),
            Err(e) => {
                warnings.push(BundleWarning::new(
                    BundleWarningCode::ResumeUnavailable,
                    format!(
                        "run {run_id} was imported but its tokens could not be re-minted: {}: {}",
                        e.code, e.message
                    ),
                ));
                None
            }
        };
        runs.push(ImportedRun {
            run_id,
            preferred_tip: tip,
            resume,
        });
    }
    let (events, snapshots, pinned_workflows, artifacts) = report_counts;
    Ok(ImportReport {
        session_id: target,
        source_session_id: source,
        remapped,
        bundle_id,
        salvage,
        events,
        snapshots,
        pinned_workflows,
        artifacts,
        runs,
        warnings,
    })
}

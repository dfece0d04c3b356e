//! Export: one session to one self-verifying bundle, through the store's read side only.

use std::collections::{BTreeMap, BTreeSet};
use std::time::SystemTime;

use workrail_spec::bundle::{BundleExtras, BundleSalvage, BundleSession, ExportBundleV1, Producer};
use workrail_spec::closed::SessionHealthKind;
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::event::{EventData, OutputPayload};
use workrail_spec::ids::{BundleId, SessionId, Sha256Digest, SnapshotRef, WorkflowHash};

use super::{BundleWarning, BundleWarningCode, Progress, rfc3339_utc};
use crate::protocol::{Workrail, invariant};
use crate::store::{SessionHealth, SessionRead, StoreError};

/// An exported bundle.
#[derive(Debug, Clone, PartialEq)]
pub struct ExportedBundle {
    pub bundle: ExportBundleV1,
    /// The bundle as written by `workrail export`: its RFC 8785 (JCS) form, so the same bundle
    /// always has the same bytes.
    pub text: String,
    /// Non-fatal findings (salvage prefix, artifacts that could not be embedded).
    pub warnings: Vec<BundleWarning>,
}

impl ExportedBundle {
    /// Whether this is a salvage export (validated prefix of a `corrupt_tail` session).
    pub fn is_salvage(&self) -> bool {
        self.bundle.body.salvage.is_some()
    }
}

fn with_context(mut e: ErrorEnvelope, what: &str) -> ErrorEnvelope {
    e.message = format!("export: {what}: {}", e.message);
    e
}

/// A validated bundle ready to be written (what `workrail export` streams to its output).
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    pub bundle: ExportBundleV1,
    /// Non-fatal findings (salvage prefix, artifacts that could not be embedded).
    pub warnings: Vec<BundleWarning>,
}

impl Export {
    /// Whether this is a salvage export (validated prefix of a `corrupt_tail` session).
    pub fn is_salvage(&self) -> bool {
        self.bundle.body.salvage.is_some()
    }

    /// Writes the bundle's RFC 8785 (JCS) form to `out` part by part, so the text is never
    /// held whole: the same bytes as [`ExportedBundle::text`]. Fails only when `out` does.
    pub fn write_to(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        self.bundle
            .write_canonical(out)
            .map_err(|e| std::io::Error::other(e.detail))
    }
}

/// Exports `session_id` as a validated bundle, without its text (write it with
/// [`Export::write_to`]). `exported_at` is informational (the caller's clock).
pub fn export_bundle(
    wr: &Workrail,
    session_id: &str,
    exported_at: SystemTime,
    progress: &dyn Progress,
) -> Result<Export, ErrorEnvelope> {
    let parts = wr.parts();
    let session = SessionId::parse(session_id).map_err(|e| {
        ErrorEnvelope::new(
            ErrorCode::ValidationError,
            format!("export: {e}"),
            "Pass a session id exactly as a WorkRail response shows it (`session.sessionId`, e.g. sess_...).",
            Retry::NotRetryable,
        )
    })?;
    let loaded = parts
        .store
        .load(&session)
        .map_err(|e| e.to_envelope(false))?;
    let mut warnings = Vec::new();
    let salvage = match &loaded.health {
        SessionHealth::Healthy => None,
        SessionHealth::CorruptTail(c) => {
            warnings.push(BundleWarning::new(
                BundleWarningCode::SalvagePrefix,
                format!(
                    "session {session} is corrupt_tail ({} at manifest record {}): the bundle holds only the validated prefix ({} events) and is flagged as salvage",
                    c.reason,
                    c.manifest_index,
                    loaded.event_count()
                ),
            ));
            Some(BundleSalvage {
                health: SessionHealthKind::CorruptTail,
                reason: c.reason.as_str().to_owned(),
                manifest_index: c.manifest_index,
                detail: c.detail.clone(),
            })
        }
        SessionHealth::CorruptHead(c) | SessionHealth::UnknownVersion(c) => {
            let unknown = matches!(loaded.health, SessionHealth::UnknownVersion(_));
            return Err(ErrorEnvelope::new(
                if unknown {
                    ErrorCode::SessionUnknownVersion
                } else {
                    ErrorCode::SessionCorrupt
                },
                format!(
                    "export: session {session} cannot be exported: it is {} ({} at manifest record {}: {}), so there is no validated prefix to export.",
                    loaded.health.kind(),
                    c.reason,
                    c.manifest_index,
                    c.detail
                ),
                if unknown {
                    "This WorkRail cannot read the session's schema version: export it with the WorkRail version that wrote it (or upgrade WorkRail)."
                } else {
                    "Nothing in this session validates; restore the data directory from a backup, or start the workflow again."
                },
                Retry::NotRetryable,
            )
            .with_details(serde_json::json!({
                "health": loaded.health.kind(),
                "reason": c.reason.as_str(),
                "manifestIndex": c.manifest_index,
            })));
        }
    };

    // What the bundle must carry: every pinned snapshot (and every node's, the same set in a
    // validated session), every run's pinned workflow, every referenced artifact.
    let mut snapshot_refs: BTreeSet<SnapshotRef> = BTreeSet::new();
    snapshot_refs.extend(
        loaded
            .pinned_snapshots()
            .map_err(|e| with_context(e.to_envelope(false), "reading the session's manifest"))?,
    );
    let mut hashes: BTreeSet<WorkflowHash> = BTreeSet::new();
    let mut artifact_digests: BTreeSet<Sha256Digest> = BTreeSet::new();
    // Earlier events a long session no longer holds parsed are read a few plans at a time.
    for chunk in loaded.events().chunks(0) {
        let (_, events) = chunk
            .map_err(|e| with_context(e.to_envelope(false), "reading the session's events"))?;
        for event in events.iter() {
            match event.data() {
                EventData::RunStarted(run) => {
                    hashes.insert(run.workflow_hash.clone());
                }
                EventData::NodeCreated(node) => {
                    snapshot_refs.insert(node.snapshot_ref.clone());
                    hashes.insert(node.workflow_hash.clone());
                }
                EventData::NodeOutputAppended(output) => {
                    if let OutputPayload::ArtifactRef { sha256, .. } = &output.payload {
                        artifact_digests.insert(sha256.clone());
                    }
                }
                _ => {}
            }
        }
    }

    progress.begin(
        "export",
        (snapshot_refs.len() + hashes.len() + artifact_digests.len()) as u64,
    );
    let mut snapshots = BTreeMap::new();
    for snapshot_ref in snapshot_refs {
        let snapshot = parts
            .store
            .snapshot(&snapshot_ref)
            .map_err(|e| with_context(e.to_envelope(false), "reading a pinned snapshot"))?;
        snapshots.insert(snapshot_ref, std::sync::Arc::unwrap_or_clone(snapshot));
        progress.advance(1);
    }
    let mut pinned_workflows = BTreeMap::new();
    for hash in hashes {
        let compiled = parts
            .store
            .workflow(&hash)
            .map_err(|e| with_context(e.to_envelope(false), "reading a pinned workflow"))?;
        pinned_workflows.insert(hash, std::sync::Arc::unwrap_or_clone(compiled));
        progress.advance(1);
    }
    let mut artifacts = BTreeMap::new();
    for digest in artifact_digests {
        match parts.store.artifact(&digest) {
            Ok(value) => {
                artifacts.insert(digest, value);
            }
            Err(e @ (StoreError::MissingObject { .. } | StoreError::CorruptObject { .. })) => {
                warnings.push(BundleWarning::new(
                    BundleWarningCode::ArtifactUnavailable,
                    format!(
                        "artifact {digest} is referenced by an output but {}; the bundle carries the reference without its content",
                        match e {
                            StoreError::MissingObject { .. } => "missing from this data directory",
                            _ => "damaged in this data directory",
                        }
                    ),
                ));
            }
            Err(e) => return Err(with_context(e.to_envelope(false), "reading an artifact")),
        }
        progress.advance(1);
    }

    // The session's records move into the bundle rather than being copied: the session cache
    // lets go of its view (the next load reads the session again), and only when another
    // holder still shares it are they copied.
    parts.store.forget_cached(&session);
    let (events, manifest) = match std::sync::Arc::try_unwrap(loaded) {
        Ok(owned) => {
            let manifest = owned.manifest_records();
            (owned.into_events(), manifest)
        }
        Err(shared) => (
            shared.events().all().map(std::borrow::Cow::into_owned),
            shared.manifest_records(),
        ),
    };
    let events =
        events.map_err(|e| with_context(e.to_envelope(false), "reading the session's events"))?;
    let manifest = manifest
        .map_err(|e| with_context(e.to_envelope(false), "reading the session's manifest"))?;
    let bundle_id = parts
        .entropy
        .id_bytes()
        .map(|b| BundleId::from_entropy(&b))
        .map_err(|e| {
            ErrorEnvelope::new(
                ErrorCode::StoreIoError,
                format!("export: {e}"),
                "Retry the export.",
                Retry::RetryableImmediate,
            )
        })?;
    let bundle = ExportBundleV1::assemble_with(
        bundle_id,
        rfc3339_utc(exported_at),
        Producer {
            app_version: env!("CARGO_PKG_VERSION").to_owned(),
            applied_config_hash: None,
        },
        BundleSession {
            session_id: session,
            events,
            manifest,
            snapshots,
            pinned_workflows,
        },
        BundleExtras { salvage, artifacts },
    )
    .map_err(|e| invariant(format!("export: the bundle is not canonicalizable: {e}")))?;
    // What export writes must be what import accepts.
    bundle.validate().map_err(|e| {
        invariant(format!(
            "export produced a bundle that fails validation: {e}"
        ))
    })?;
    progress.finish();
    Ok(Export { bundle, warnings })
}

/// Exports `session_id` with its text (see [`export_bundle`]). `exported_at` is
/// informational (the caller's clock).
pub fn export_session(
    wr: &Workrail,
    session_id: &str,
    exported_at: SystemTime,
    progress: &dyn Progress,
) -> Result<ExportedBundle, ErrorEnvelope> {
    let Export { bundle, warnings } = export_bundle(wr, session_id, exported_at, progress)?;
    // Written part by part into one buffer sized from the integrity entries: the bytes of
    // the canonical form of the whole bundle, without a JSON tree or a second copy.
    let text = bundle
        .to_canonical_text()
        .map_err(|e| invariant(format!("export: the bundle is not canonicalizable: {e}")))?;
    Ok(ExportedBundle {
        bundle,
        text,
        warnings,
    })
}

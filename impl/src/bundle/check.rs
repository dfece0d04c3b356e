//! The structural checks import adds to [`ExportBundleV1::validate`] (pure, before any write):
//!
//! - the manifest attests the events exactly: `segment_closed` records cover `[0, n-1]`
//!   contiguously, and every snapshot a segment introduces is pinned (by its `node_created`)
//!   before the next segment is closed, the same transaction rule load enforces
//!   (`BUNDLE_MANIFEST_ORDER_INVALID`);
//! - every event refers only to runs and nodes created by earlier events
//!   (`BUNDLE_EVENT_ORDER_INVALID`);
//! - dedupeKeys are unique, a node's workflow and its snapshot's workflow are its run's pinned
//!   workflow, `workflowSourceRef` is a relative path that stays inside its root, and (once
//!   rebuilt under the target session id) every segment fits the store's segment limits
//!   (`BUNDLE_INVALID_FORMAT`).
//!
//! These make the import's append plans commit exactly the bundle's events, so import can
//! never leave a half-written session because a later plan was refused.

use std::collections::{HashMap, HashSet};

use workrail_spec::bundle::ExportBundleV1;
use workrail_spec::error::{ErrorCode, ErrorEnvelope};
use workrail_spec::event::{EventData, OutputPayload, SessionEvent};
use workrail_spec::ids::{NodeId, RunId, SnapshotRef, WorkflowHash};
use workrail_spec::jcs::to_canonical_string;
use workrail_spec::manifest::ManifestRecord;

use super::{BundleWarning, BundleWarningCode, bundle_failure};
use crate::store::SegmentLimits;

/// A bundle that passed every check: its segments as inclusive event ranges.
#[derive(Debug, Clone)]
pub(super) struct Checked {
    pub segments: Vec<(usize, usize)>,
    pub warnings: Vec<BundleWarning>,
}

fn order(detail: impl std::fmt::Display) -> ErrorEnvelope {
    bundle_failure(ErrorCode::BundleEventOrderInvalid, detail)
}

fn manifest_order(detail: impl std::fmt::Display) -> ErrorEnvelope {
    bundle_failure(ErrorCode::BundleManifestOrderInvalid, detail)
}

fn format(detail: impl std::fmt::Display) -> ErrorEnvelope {
    bundle_failure(ErrorCode::BundleInvalidFormat, detail)
}

/// Whether `path` is relative and never leaves its root (locks §13 "relative-path-only"): not
/// empty, no leading `/`, `\\` or `~`, no drive prefix (`C:`), no NUL, no `..` component.
pub(crate) fn is_contained_relative_path(path: &str) -> bool {
    let bytes = path.as_bytes();
    let drive = bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':';
    !path.is_empty()
        && !path.starts_with(['/', '\\', '~'])
        && !drive
        && !path.contains('\0')
        && path.split(['/', '\\']).all(|c| c != "..")
}

pub(super) fn check(bundle: &ExportBundleV1) -> Result<Checked, ErrorEnvelope> {
    let session = &bundle.body.session;
    let events = &session.events;
    if events.is_empty() {
        return Err(format(
            "the bundle's session holds no events (a session is created by its first event)",
        ));
    }
    let segments = check_manifest(events, &session.manifest)?;
    let warnings = check_events(bundle)?;
    Ok(Checked { segments, warnings })
}

fn check_manifest(
    events: &[SessionEvent],
    manifest: &[ManifestRecord],
) -> Result<Vec<(usize, usize)>, ErrorEnvelope> {
    let mut segments = Vec::new();
    let mut next = 0usize;
    let mut pinned: HashSet<&SnapshotRef> = HashSet::new();
    // Snapshots introduced by the last closed segment that still need their pin.
    let mut awaiting: Vec<(&SnapshotRef, usize)> = Vec::new();
    for (i, record) in manifest.iter().enumerate() {
        match record {
            ManifestRecord::SegmentClosed(seg) => {
                if let Some((snapshot, at)) = awaiting.first() {
                    return Err(manifest_order(format!(
                        "snapshot {snapshot} introduced at eventIndex {at} is not pinned before manifest[{i}] closes the next segment"
                    )));
                }
                let (first, last) = (
                    seg.first_event_index.get() as usize,
                    seg.last_event_index.get() as usize,
                );
                if first != next {
                    return Err(manifest_order(format!(
                        "manifest[{i}] attests events [{first}, {last}] but the next unattested event is {next}"
                    )));
                }
                if last >= events.len() {
                    return Err(manifest_order(format!(
                        "manifest[{i}] attests events up to {last} but the bundle holds {} events",
                        events.len()
                    )));
                }
                for (offset, event) in events[first..=last].iter().enumerate() {
                    if let EventData::NodeCreated(node) = event.data()
                        && !pinned.contains(&node.snapshot_ref)
                        && !awaiting.iter().any(|(r, _)| *r == &node.snapshot_ref)
                    {
                        awaiting.push((&node.snapshot_ref, first + offset));
                    }
                }
                segments.push((first, last));
                next = last + 1;
            }
            ManifestRecord::SnapshotPinned(pin) => {
                let at = pin.event_index.get() as usize;
                let names_its_node = at < next
                    && events[at].event_id() == &pin.created_by_event_id
                    && matches!(events[at].data(), EventData::NodeCreated(n) if n.snapshot_ref == pin.snapshot_ref);
                if !names_its_node {
                    return Err(manifest_order(format!(
                        "manifest[{i}] pins {} at eventIndex {at}, which is not an attested node_created of that snapshot",
                        pin.snapshot_ref
                    )));
                }
                pinned.insert(&pin.snapshot_ref);
                awaiting.retain(|(r, _)| *r != &pin.snapshot_ref);
            }
        }
    }
    if let Some((snapshot, at)) = awaiting.first() {
        return Err(manifest_order(format!(
            "snapshot {snapshot} introduced at eventIndex {at} is never pinned"
        )));
    }
    if next != events.len() {
        return Err(manifest_order(format!(
            "events from eventIndex {next} on are not attested by any segment_closed record"
        )));
    }
    Ok(segments)
}

fn check_events(bundle: &ExportBundleV1) -> Result<Vec<BundleWarning>, ErrorEnvelope> {
    let session = &bundle.body.session;
    let mut warnings = Vec::new();
    let mut dedupe = HashSet::new();
    let mut runs: HashMap<&RunId, &WorkflowHash> = HashMap::new();
    let mut nodes: HashSet<(&RunId, &NodeId)> = HashSet::new();
    let mut missing_artifacts = HashSet::new();
    for event in &session.events {
        let i = event.event_index();
        if !dedupe.insert(event.dedupe_key()) {
            return Err(format(format!(
                "event {i} repeats dedupeKey {}",
                event.dedupe_key()
            )));
        }
        let scope = event.scope();
        let run_known = |run: &RunId| runs.contains_key(run);
        match event.data() {
            EventData::RunStarted(started) => {
                let Some(run) = scope.run_id() else {
                    return Err(format(format!("run_started {i} has no run scope")));
                };
                if !is_contained_relative_path(&started.workflow_source_ref) {
                    return Err(format(format!(
                        "run_started {i} has workflowSourceRef {:?}; stored paths must be relative and stay inside their root",
                        started.workflow_source_ref
                    )));
                }
                if runs.insert(run, &started.workflow_hash).is_some() {
                    return Err(format(format!("run {run} is started twice (event {i})")));
                }
            }
            EventData::NodeCreated(node) => {
                let (Some(run), Some(node_id)) = (scope.run_id(), scope.node_id()) else {
                    return Err(format(format!("node_created {i} has no node scope")));
                };
                let Some(&run_hash) = runs.get(run) else {
                    return Err(order(format!(
                        "node_created {i} belongs to run {run}, which no earlier run_started creates"
                    )));
                };
                if &node.workflow_hash != run_hash {
                    return Err(format(format!(
                        "node {node_id} (event {i}) is linked to workflow {}, not its run's pinned {run_hash}",
                        node.workflow_hash
                    )));
                }
                if let Some(parent) = &node.parent_node_id
                    && !nodes.contains(&(run, parent))
                {
                    return Err(order(format!(
                        "node {node_id} (event {i}) names parent {parent}, which no earlier node_created of run {run} creates"
                    )));
                }
                if let Some(snapshot) = session.snapshots.get(&node.snapshot_ref)
                    && &snapshot.workflow_hash != run_hash
                {
                    return Err(format(format!(
                        "snapshot {} of node {node_id} belongs to workflow {}, not the run's {run_hash}",
                        node.snapshot_ref, snapshot.workflow_hash
                    )));
                }
                if !nodes.insert((run, node_id)) {
                    return Err(format(format!(
                        "node {node_id} of run {run} is created twice (event {i})"
                    )));
                }
            }
            EventData::EdgeCreated(edge) => {
                let Some(run) = scope.run_id() else {
                    return Err(format(format!("edge_created {i} has no run scope")));
                };
                for end in [&edge.from_node_id, &edge.to_node_id] {
                    if !nodes.contains(&(run, end)) {
                        return Err(order(format!(
                            "edge_created {i} links node {end}, which no earlier node_created of run {run} creates"
                        )));
                    }
                }
            }
            data => {
                if let Some(run) = scope.run_id()
                    && !run_known(run)
                {
                    return Err(order(format!(
                        "{} {i} belongs to run {run}, which no earlier run_started creates",
                        event.kind()
                    )));
                }
                if let (Some(run), Some(node)) = (scope.run_id(), scope.node_id())
                    && !nodes.contains(&(run, node))
                {
                    return Err(order(format!(
                        "{} {i} belongs to node {node}, which no earlier node_created of run {run} creates",
                        event.kind()
                    )));
                }
                if let EventData::NodeOutputAppended(output) = data
                    && let OutputPayload::ArtifactRef { sha256, .. } = &output.payload
                    && !bundle.body.artifacts.contains_key(sha256)
                    && missing_artifacts.insert(sha256.clone())
                {
                    warnings.push(BundleWarning::new(
                        BundleWarningCode::ArtifactNotInBundle,
                        format!(
                            "output {} (event {i}) references artifact {sha256}, which the bundle does not carry; the reference is imported, its content is unavailable",
                            output.output_id
                        ),
                    ));
                }
            }
        }
    }
    Ok(warnings)
}

/// An append plan must fit the store's segment limits, so no plan can be refused midway
/// (checked on the rebuilt events, before anything is written).
pub(super) fn check_plan_fits(plan: &[SessionEvent]) -> Result<(), ErrorEnvelope> {
    let limits = SegmentLimits::default();
    let mut bytes = 0usize;
    for event in plan {
        let line = to_canonical_string(event).map_err(|e| {
            format(format!(
                "event {} is not canonicalizable: {e}",
                event.event_index()
            ))
        })?;
        bytes += line.len() + 1;
    }
    if plan.len() > limits.max_events || bytes > limits.max_bytes {
        let (first, last) = (
            plan.first().map_or(0, |e| e.event_index().get()),
            plan.last().map_or(0, |e| e.event_index().get()),
        );
        return Err(format(format!(
            "segment [{first}, {last}] holds {} events / {bytes} bytes, over the store's segment limits ({} events, {} bytes)",
            plan.len(),
            limits.max_events,
            limits.max_bytes
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::is_contained_relative_path;

    #[test]
    fn only_contained_relative_paths_pass() {
        for ok in [
            "bundled/wr.coding_task.json",
            "project/workflows/demo.json",
            "dir0/a..b.json",
            "git:abc",
        ] {
            assert!(is_contained_relative_path(ok), "{ok}");
        }
        for bad in [
            "",
            "/etc/passwd",
            "\\\\server\\share",
            "~/wf.json",
            "C:\\wf.json",
            "c:/wf.json",
            "../up.json",
            "a/../../up.json",
            "a\\..\\up.json",
            "nul\0byte",
        ] {
            assert!(!is_contained_relative_path(bad), "{bad:?}");
        }
    }
}

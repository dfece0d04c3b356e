//! Health (D99): the file store's validator over an in-memory image of a session's rows, so
//! every rule and every reason is the file store's.

use std::path::Path;
use std::sync::Arc;

use workrail_spec::ids::SessionId;
use workrail_spec::manifest::ManifestRecord;

use super::read::Image;
use crate::store::cas::ObjectCheck;
use crate::store::error::StoreError;
use crate::store::event_log::Residency;
use crate::store::fs::StoreFs;
use crate::store::layout;
use crate::store::load::{LoadedSession, extend_view, load_session};
use crate::store::memfs::MemFs;

fn object_path(dir: &str, digest: &str) -> Option<std::path::PathBuf> {
    let hex = digest.strip_prefix("sha256:")?;
    Some(Path::new(dir).join(format!("{hex}.json")))
}

/// Judges a session's rows with the file store's rules (decision D99): the manifest rows become
/// `manifest.jsonl`, each `segment_closed` gets the segment text rebuilt from the event rows in
/// its bounds, and the referenced objects are laid out as in the CAS, so a changed, missing or
/// reordered row shows up as the same reason a damaged file would.
/// The loaded session keeps its events as `residency` says: older ones are read again from the
/// database, not from this image (D227).
pub(super) fn validate(
    session: &SessionId,
    image: &Image,
    residency: Residency,
) -> Result<Option<LoadedSession>, StoreError> {
    let (fs, manifest) = lay_out(session, image)?;
    write(&fs, &layout::manifest_path(session), manifest.as_bytes())?;
    let objects = ObjectCheck::new(Arc::clone(&fs) as Arc<dyn StoreFs>);
    load_session(&*fs, session, Some(&objects), residency).map_err(|e| database(session, e))
}

/// `view`, a healthy view of `session`, extended by `tail`, the rows past it with the objects
/// its new events reference (D222): only the tail is laid out and validated, resumed from the
/// view, instead of every row again. `None` unless the result is whole and healthy (a full
/// load then judges).
pub(super) fn extend_with(
    session: &SessionId,
    view: Arc<LoadedSession>,
    tail: &Image,
) -> Result<Option<LoadedSession>, StoreError> {
    if tail.manifest.is_empty() {
        return Ok(None);
    }
    let (fs, records) = lay_out(session, tail)?;
    let objects = ObjectCheck::new(Arc::clone(&fs) as Arc<dyn StoreFs>);
    extend_view(&*fs, view, records.as_bytes(), Some(&objects)).map_err(|e| database(session, e))
}

fn database(session: &SessionId, e: std::io::Error) -> StoreError {
    StoreError::Database {
        session: Some(session.clone()),
        op: "load session",
        detail: e.to_string(),
    }
}

fn write(fs: &MemFs, path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let memory = |e: std::io::Error| StoreError::Internal {
        detail: format!("in-memory image: {e}"),
    };
    if let Some(parent) = path.parent() {
        fs.create_dir_all(parent).map_err(memory)?;
    }
    fs.write_new(path, bytes).map_err(memory)
}

/// Lays `image` out as the file store would hold it: the segment of each `segment_closed`
/// record, rebuilt from the event rows in its bounds, and the objects in the CAS. Returns the
/// filesystem and the manifest text the records spell (each line ending in a newline), not
/// written.
fn lay_out(session: &SessionId, image: &Image) -> Result<(Arc<MemFs>, String), StoreError> {
    let fs = Arc::new(MemFs::new());
    let mut manifest = String::new();
    for body in &image.manifest {
        manifest.push_str(body);
        manifest.push('\n');
    }
    let dir = layout::session_dir(session);
    for body in &image.manifest {
        let Ok(ManifestRecord::SegmentClosed(seg)) = ManifestRecord::from_json_str(body) else {
            continue;
        };
        let (first, last) = (
            seg.first_event_index.get() as i64,
            seg.last_event_index.get() as i64,
        );
        // The rows are in ascending index order: each segment's events are found by bisection
        // (a scan of every row per segment made a load quadratic in the session's length).
        let from = image.events.partition_point(|(index, _)| *index < first);
        let to = image.events.partition_point(|(index, _)| *index <= last);
        let mut text = String::new();
        for (_, event) in &image.events[from..to.max(from)] {
            text.push_str(event);
            text.push('\n');
        }
        // Only a damaged manifest names a segment path the image cannot hold (one segment
        // twice, a path through a file): that segment is then missing from the image, and the
        // validator reports the damage with its reason. This is memory, not the database.
        if let Err(e) = write(&fs, &dir.join(&seg.segment_rel_path), text.as_bytes()) {
            tracing::debug!(
                %session,
                segment = %seg.segment_rel_path,
                error = ?e,
                "a segment of the rows could not be laid out for validation"
            );
        }
    }
    for (digest, body) in &image.snapshots {
        if let Some(path) = object_path(layout::SNAPSHOTS_DIR, digest) {
            write(&fs, &path, body.as_bytes())?;
        }
    }
    for (digest, body) in &image.workflows {
        if let Some(path) = object_path(layout::PINNED_WORKFLOWS_DIR, digest) {
            write(&fs, &path, body.as_bytes())?;
        }
    }
    Ok((fs, manifest))
}

//! Health (D99): the file store's validator over an in-memory image of a session's rows, so
//! every rule and every reason is the file store's.

use std::path::Path;
use std::sync::Arc;

use workrail_spec::ids::SessionId;
use workrail_spec::manifest::ManifestRecord;

use super::read::Image;
use crate::store::cas::ObjectCheck;
use crate::store::error::StoreError;
use crate::store::fs::StoreFs;
use crate::store::layout;
use crate::store::load::{LoadedSession, load_session};
use crate::store::memfs::MemFs;

fn object_path(dir: &str, digest: &str) -> Option<std::path::PathBuf> {
    let hex = digest.strip_prefix("sha256:")?;
    Some(Path::new(dir).join(format!("{hex}.json")))
}

/// Judges a session's rows with the file store's rules (decision D99): the manifest rows become
/// `manifest.jsonl`, each `segment_closed` gets the segment text rebuilt from the event rows in
/// its bounds, and the referenced objects are laid out as in the CAS, so a changed, missing or
/// reordered row shows up as the same reason a damaged file would.
pub(super) fn validate(
    session: &SessionId,
    image: &Image,
) -> Result<Option<LoadedSession>, StoreError> {
    validate_with(session, image, &[])
}

/// [`validate`], with the objects of `verified` taken as intact (they were verified by an
/// earlier load in this process, and objects are immutable: D53's rule).
pub(super) fn validate_with(
    session: &SessionId,
    image: &Image,
    verified: &[workrail_spec::ids::Sha256Digest],
) -> Result<Option<LoadedSession>, StoreError> {
    let memory = |e: std::io::Error| StoreError::Internal {
        detail: format!("in-memory image: {e}"),
    };
    let fs = Arc::new(MemFs::new());
    let write = |path: &Path, bytes: &[u8]| -> Result<(), StoreError> {
        if let Some(parent) = path.parent() {
            fs.create_dir_all(parent).map_err(memory)?;
        }
        fs.write_new(path, bytes).map_err(memory)
    };
    let mut manifest = String::new();
    for body in &image.manifest {
        manifest.push_str(body);
        manifest.push('\n');
    }
    write(&layout::manifest_path(session), manifest.as_bytes())?;
    let dir = layout::session_dir(session);
    for body in &image.manifest {
        let Ok(ManifestRecord::SegmentClosed(seg)) = ManifestRecord::from_json_str(body) else {
            continue;
        };
        let (first, last) = (
            seg.first_event_index.get() as i64,
            seg.last_event_index.get() as i64,
        );
        let mut text = String::new();
        for (index, event) in &image.events {
            if (first..=last).contains(index) {
                text.push_str(event);
                text.push('\n');
            }
        }
        // Only a damaged manifest names a segment path the image cannot hold (one segment
        // twice, a path through a file): that segment is then missing from the image, and the
        // validator reports the damage with its reason. This is memory, not the database.
        if let Err(e) = write(&dir.join(&seg.segment_rel_path), text.as_bytes()) {
            tracing::debug!(
                %session,
                segment = %seg.segment_rel_path,
                error = %e,
                "a segment of the rows could not be laid out for validation"
            );
        }
    }
    for (digest, body) in &image.snapshots {
        if let Some(path) = object_path(layout::SNAPSHOTS_DIR, digest) {
            write(&path, body.as_bytes())?;
        }
    }
    for (digest, body) in &image.workflows {
        if let Some(path) = object_path(layout::PINNED_WORKFLOWS_DIR, digest) {
            write(&path, body.as_bytes())?;
        }
    }
    let objects = ObjectCheck::new(Arc::clone(&fs) as Arc<dyn StoreFs>);
    objects.assume_intact(verified);
    load_session(&*fs, session, Some(&objects)).map_err(|e| StoreError::Database {
        session: Some(session.clone()),
        op: "load session",
        detail: e.to_string(),
    })
}

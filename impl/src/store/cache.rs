//! The projection cache: a derived, rebuildable, per-session file (locks §10 "Projections +
//! indexing"). Never truth: safe to delete, discarded and rebuilt whenever its version or the
//! log position it was computed at does not match, or it cannot be read.
//!
//! File: `sessions/<id>/cache/projections.json` =
//! `{"v": 1, "lastEventIndex": n|null, "lastManifestIndex": m|null, "value": …}`.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use workrail_spec::ids::SessionId;

use super::error::StoreError;
use super::fs::StoreFs;
use super::layout;
use super::load::LoadedSession;

/// The cache format version; any other version is discarded.
pub const CACHE_VERSION: u64 = 1;

/// The log position a cached value was derived at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheKey {
    pub last_event_index: Option<u64>,
    pub last_manifest_index: Option<u64>,
}

impl CacheKey {
    /// The position of a loaded session.
    pub fn of(session: &LoadedSession) -> Self {
        Self {
            last_event_index: session.last_event().map(|e| e.event_index().get()),
            last_manifest_index: session.manifest.last().map(|r| r.manifest_index().get()),
        }
    }
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq)]
pub enum CacheLookup<T> {
    Hit(T),
    /// Absent, stale, of another version or unreadable: the file was discarded.
    Miss,
}

#[derive(Debug, Clone)]
pub struct ProjectionCache {
    fs: Arc<dyn StoreFs>,
}

fn cache_path(session: &SessionId) -> PathBuf {
    layout::cache_dir(session).join("projections.json")
}

impl ProjectionCache {
    pub fn new(fs: Arc<dyn StoreFs>) -> Self {
        Self { fs }
    }

    /// Returns the cached value only when it was computed at exactly `key`.
    pub fn get<T: DeserializeOwned>(&self, session: &SessionId, key: CacheKey) -> CacheLookup<T> {
        let path = cache_path(session);
        let Ok(Some(bytes)) = self.fs.read(&path) else {
            return CacheLookup::Miss;
        };
        let parsed = serde_json::from_slice::<Value>(&bytes).ok().and_then(|v| {
            let matches = v.get("v").and_then(Value::as_u64) == Some(CACHE_VERSION)
                && v.get("lastEventIndex").map(Value::as_u64) == Some(key.last_event_index)
                && v.get("lastManifestIndex").map(Value::as_u64) == Some(key.last_manifest_index);
            if matches {
                serde_json::from_value::<T>(v.get("value")?.clone()).ok()
            } else {
                None
            }
        });
        match parsed {
            Some(value) => CacheLookup::Hit(value),
            None => {
                // Stale or damaged: discard (best effort; it is never truth, and a file left
                // behind is judged the same way on the next lookup).
                if let Err(e) = self.fs.remove_file(&path) {
                    tracing::debug!(%session, error = %e, "could not discard a stale projection cache");
                }
                CacheLookup::Miss
            }
        }
    }

    /// Stores a value computed at `key` (atomically replaced; no fsync: it is rebuildable).
    pub fn put<T: Serialize>(
        &self,
        session: &SessionId,
        key: CacheKey,
        value: &T,
    ) -> Result<(), StoreError> {
        let io = |e: std::io::Error| StoreError::Io {
            session: Some(session.clone()),
            op: "write projection cache",
            detail: e.to_string(),
        };
        let body = serde_json::json!({
            "v": CACHE_VERSION,
            "lastEventIndex": key.last_event_index,
            "lastManifestIndex": key.last_manifest_index,
            "value": value,
        });
        let bytes = serde_json::to_vec(&body).map_err(|e| StoreError::Internal {
            detail: e.to_string(),
        })?;
        let dir = layout::cache_dir(session);
        self.fs.create_dir_all(&dir).map_err(io)?;
        // Another process may be writing the same cache file: its own temp name each.
        let tmp = dir.join(layout::temp_file_name("projections.json"));
        let written = self
            .fs
            .write_new(&tmp, &bytes)
            .and_then(|()| self.fs.rename(&tmp, &cache_path(session)));
        if let Err(why) = &written
            && let Err(e) = self.fs.remove_file(&tmp)
        {
            // The write's error is what the caller gets; the temp file is swept by GC (D63).
            tracing::debug!(%session, write_error = %why, error = %e, "could not remove the projection cache's temp file");
        }
        written.map_err(io)
    }

    /// Deletes the cached file.
    pub fn invalidate(&self, session: &SessionId) -> Result<(), StoreError> {
        self.fs
            .remove_file(&cache_path(session))
            .map_err(|e| StoreError::Io {
                session: Some(session.clone()),
                op: "remove projection cache",
                detail: e.to_string(),
            })
    }
}

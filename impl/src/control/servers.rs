//! Server records (locks §6 "Desired vs applied"; decisions D85, D86).
//!
//! Each `workrail mcp` takes an exclusive OS lock on `servers/<serverId>.lock` when it starts and
//! holds it for its lifetime, then writes `servers/<serverId>.json` ([`ServerRecordV1`]: its id,
//! pid, start time, `appliedConfigHash` and applied config) atomically (temp file, fsync, rename,
//! directory fsync; 0600). A record is **live** iff its lock is held: a reader tries a shared
//! lock on the lock file (opened read-only, never created), and getting it means the server is
//! gone, however it ended. A server that exits normally removes its record and lock file; one
//! that was killed leaves them, readers report it dead, and `workrail gc` removes it after the
//! grace period.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use workrail_spec::config::{AppliedConfigV1, CONFIG_VERSION, LaunchEnvironment, ServerRecordV1};
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::ids::ServerId;

use crate::entropy::Entropy;
use crate::store::fs::{LockError, LockGuard, OsFs, StoreFs};

pub use crate::store::layout::SERVERS_DIR;

/// `servers/<serverId>.json`.
pub fn record_path(id: &ServerId) -> PathBuf {
    crate::store::layout::server_record_path(id)
}

/// `servers/<serverId>.lock`.
pub fn lock_path(id: &ServerId) -> PathBuf {
    crate::store::layout::server_lock_path(id)
}

fn io_envelope(what: &str, e: impl std::fmt::Display) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::StoreIoError,
        format!("{what}: {e}"),
        "Check free disk space and the permissions of the WorkRail data directory.",
        Retry::RetryableImmediate,
    )
}

/// This server's record, kept for the process's lifetime: the lock is released (and the record
/// removed) when it is dropped.
#[derive(Debug)]
pub struct ServerRegistration {
    fs: Arc<dyn StoreFs>,
    record: ServerRecordV1,
    lock: Option<Box<dyn LockGuard>>,
}

impl ServerRegistration {
    /// Takes the lock and writes the record of a server applying `applied`.
    pub fn start(
        fs: Arc<dyn StoreFs>,
        entropy: &dyn Entropy,
        applied: AppliedConfigV1,
        launch: LaunchEnvironment,
    ) -> Result<ServerRegistration, ErrorEnvelope> {
        let bytes = entropy
            .id_bytes()
            .map_err(|e| io_envelope("cannot mint a server id", e))?;
        let server_id = ServerId::from_entropy(&bytes);
        let applied_config_hash = applied
            .hash()
            .map_err(|e| io_envelope("the applied config has no canonical form", e))?;
        let record = ServerRecordV1 {
            v: CONFIG_VERSION,
            server_id: server_id.clone(),
            pid: std::process::id(),
            started_at: crate::time::rfc3339_utc(std::time::SystemTime::now()),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            applied_config_hash,
            applied_config: applied,
            launch,
        };
        fs.create_dir_durable(Path::new(SERVERS_DIR))
            .map_err(|e| io_envelope("cannot create servers/", e))?;
        let lock = match fs.try_lock(&lock_path(&server_id)) {
            Ok(lock) => lock,
            Err(LockError::Busy) => {
                return Err(io_envelope(
                    "cannot lock the server record",
                    format!("{server_id} is held by another process"),
                ));
            }
            Err(LockError::Io(e)) => return Err(io_envelope("cannot lock the server record", e)),
        };
        let mut text = serde_json::to_string_pretty(&record)
            .map_err(|e| io_envelope("cannot serialize the server record", e))?;
        text.push('\n');
        fs.write_private(&record_path(&server_id), text.as_bytes())
            .map_err(|e| io_envelope("cannot write the server record", e))?;
        tracing::info!(server = %server_id, hash = %record.applied_config_hash, "server record written");
        Ok(ServerRegistration {
            fs,
            record,
            lock: Some(lock),
        })
    }

    pub fn record(&self) -> &ServerRecordV1 {
        &self.record
    }
}

impl Drop for ServerRegistration {
    /// A clean exit removes the record, then the lock file, then releases the lock.
    fn drop(&mut self) {
        let id = &self.record.server_id;
        let _ = self.fs.remove_file(&record_path(id));
        let _ = self.fs.remove_file(&lock_path(id));
        let _ = self.fs.sync_dir(Path::new(SERVERS_DIR));
        self.lock.take();
    }
}

/// Whether a record's server is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Liveness {
    /// Its lock is held.
    Live,
    /// Its lock is free or gone: the server ended (a killed server's record stays behind).
    Dead,
    /// The lock file could not be checked (permissions); shown, never relied upon.
    Unknown,
}

/// One record as read.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerEntry {
    pub liveness: Liveness,
    pub record: ServerRecordV1,
}

/// A record that did not parse (shown so it can be removed; `workrail gc` removes dead ones).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UnreadableRecord {
    pub file: String,
    pub problem: String,
    pub liveness: Liveness,
}

/// Every server record of a data directory.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerList {
    /// Sorted by start time, then id.
    pub servers: Vec<ServerEntry>,
    pub unreadable: Vec<UnreadableRecord>,
}

impl ServerList {
    pub fn live(&self) -> impl Iterator<Item = &ServerEntry> {
        self.servers.iter().filter(|s| s.liveness == Liveness::Live)
    }
}

/// Whether the lock of `id` is held, taking (and at once releasing) a shared lock on the lock
/// file, opened read-only: nothing is created or written.
pub fn liveness(fs: &dyn StoreFs, id: &ServerId) -> Liveness {
    match fs.try_lock_shared(&lock_path(id)) {
        Err(LockError::Busy) => Liveness::Live,
        Ok(_) => Liveness::Dead,
        Err(LockError::Io(_)) => Liveness::Unknown,
    }
}

/// The server records of `data_dir`, each with its liveness. Writes nothing (decision D69).
pub fn list_servers(data_dir: &Path) -> Result<ServerList, ErrorEnvelope> {
    read_servers(&OsFs::new(data_dir))
}

/// [`list_servers`] over any filesystem.
pub fn read_servers(fs: &dyn StoreFs) -> Result<ServerList, ErrorEnvelope> {
    let names = fs
        .list_dir(Path::new(SERVERS_DIR))
        .map_err(|e| io_envelope("cannot list servers/", e))?;
    let mut list = ServerList {
        servers: Vec::new(),
        unreadable: Vec::new(),
    };
    for name in names {
        let Some(stem) = name.strip_suffix(".json") else {
            continue;
        };
        if crate::store::layout::is_temp_file_name(&name) {
            continue;
        }
        let file = format!("{SERVERS_DIR}/{name}");
        let Ok(id) = ServerId::parse(stem) else {
            list.unreadable.push(UnreadableRecord {
                file,
                problem: "the file name is not a server id".to_owned(),
                liveness: Liveness::Unknown,
            });
            continue;
        };
        let liveness = liveness(fs, &id);
        let bytes = match fs.read(&record_path(&id)) {
            Ok(Some(bytes)) => bytes,
            // Removed by a server exiting just now.
            Ok(None) => continue,
            Err(e) => {
                list.unreadable.push(UnreadableRecord {
                    file,
                    problem: e.to_string(),
                    liveness,
                });
                continue;
            }
        };
        match serde_json::from_slice::<ServerRecordV1>(&bytes) {
            Ok(record) if record.server_id == id => {
                list.servers.push(ServerEntry { liveness, record })
            }
            Ok(_) => list.unreadable.push(UnreadableRecord {
                file,
                problem: "the record names another server id".to_owned(),
                liveness,
            }),
            Err(e) => list.unreadable.push(UnreadableRecord {
                file,
                problem: e.to_string(),
                liveness,
            }),
        }
    }
    list.servers.sort_by(|a, b| {
        (&a.record.started_at, &a.record.server_id)
            .cmp(&(&b.record.started_at, &b.record.server_id))
    });
    Ok(list)
}

/// Registers this process as a server on `data_dir` with the flags it loaded and the sources
/// of its environment (the `workrail mcp` entry point).
pub fn register_this_server(
    data_dir: &Path,
    features: &crate::features::Features,
) -> Result<ServerRegistration, ErrorEnvelope> {
    let launch = super::applied::launch_from_process()?;
    let fs: Arc<dyn StoreFs> = Arc::new(OsFs::new(data_dir));
    let applied = super::applied::applied_config(
        features,
        &super::applied::sources_of(&launch),
        fs.as_ref(),
    )?;
    ServerRegistration::start(fs, &crate::entropy::OsEntropy, applied, launch)
}

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
        if let Err(e) = fs.write_private(&record_path(&server_id), text.as_bytes()) {
            // Nothing of this id is left (a record may be in place when only the directory's
            // fsync failed): a retry mints another id.
            let _ = fs.remove_file(&record_path(&server_id));
            let _ = fs.remove_file(&lock_path(&server_id));
            return Err(io_envelope("cannot write the server record", e));
        }
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

/// How long a server that could not write its record waits before the first retry; each
/// retry doubles it, up to [`REGISTER_RETRY_MAX`].
const REGISTER_RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(500);
const REGISTER_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// This server's record for the process's lifetime, written at start or, when that failed, by
/// a thread that retries until it can (decision D220): the record only shows the server in the
/// Console, so a full disk at start must not keep a server from serving
/// the sessions it can read. Dropping it removes the record (and stops the retries).
#[derive(Debug)]
pub struct KeptRegistration {
    shared: Arc<KeptShared>,
}

#[derive(Debug, Default)]
struct KeptShared {
    /// The record once written; `stopped` once the server is exiting (under the same lock,
    /// so a record written at that moment is removed at once).
    slot: std::sync::Mutex<(Option<ServerRegistration>, bool)>,
}

impl KeptRegistration {
    /// Whether the record is written (so far).
    pub fn is_written(&self) -> bool {
        self.shared
            .slot
            .lock()
            .map(|slot| slot.0.is_some())
            .unwrap_or(false)
    }
}

impl Drop for KeptRegistration {
    fn drop(&mut self) {
        let taken = match self.shared.slot.lock() {
            Ok(mut slot) => {
                slot.1 = true;
                slot.0.take()
            }
            Err(poisoned) => poisoned.into_inner().0.take(),
        };
        drop(taken);
    }
}

/// Registers this process (see [`register_this_server`]); when that fails, says so on stderr
/// and retries in the background, with a growing pause, until the record is written.
pub fn keep_this_server_registered(
    data_dir: &Path,
    features: &crate::features::Features,
) -> KeptRegistration {
    let shared = Arc::new(KeptShared::default());
    let first = match register_this_server(data_dir, features) {
        Ok(registration) => {
            if let Ok(mut slot) = shared.slot.lock() {
                slot.0 = Some(registration);
            }
            return KeptRegistration { shared };
        }
        Err(e) => e,
    };
    eprintln!(
        "workrail: warning: serving without this server's record in servers/ for now ({}); \
         sessions are served as usual, and the record is written once it can be (retried in the \
         background), so the Console may not list this server until then. {}",
        first.message, first.suggestion
    );
    let retry = Arc::clone(&shared);
    let (dir, features) = (data_dir.to_owned(), features.clone());
    let spawned = std::thread::Builder::new()
        .name("workrail-register".to_owned())
        .spawn(move || {
            let mut pause = REGISTER_RETRY_FIRST;
            loop {
                std::thread::sleep(pause);
                if retry.slot.lock().map_or(true, |slot| slot.1) {
                    return;
                }
                match register_this_server(&dir, &features) {
                    Ok(registration) => {
                        let mut slot = match retry.slot.lock() {
                            Ok(slot) => slot,
                            Err(_) => return,
                        };
                        if !slot.1 {
                            slot.0 = Some(registration);
                            tracing::info!("server record written after an earlier failure");
                        }
                        // Exiting: `registration` drops here, removing the record.
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e.message, "server record still not written");
                        pause = (pause * 2).min(REGISTER_RETRY_MAX);
                    }
                }
            }
        });
    if let Err(e) = spawned {
        eprintln!("workrail: warning: cannot start the thread that retries the server record: {e}");
    }
    KeptRegistration { shared }
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

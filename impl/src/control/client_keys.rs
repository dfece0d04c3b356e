//! Client keys of `workrail serve --http` (decision D179): `keys/clients.json` in the data
//! directory, owner-only (0600), replaced whole and atomically (temp file, fsync, rename,
//! directory fsync) under `keys/.clients.lock`.
//!
//! A key is shown once, when `workrail keys client add <name>` makes it; the file keeps only its
//! SHA-256 with the name and creation time. They live in the data directory of the machine that
//! serves HTTP, whatever the store: a key admits a client to that server, it is not session data,
//! so a PostgreSQL store shared by several machines does not share their keys.
//!
//! [`ClientKeys`] is the server's view: it compares the file's stamp with what it read on every
//! request and re-reads it when it changed, so a revoked key stops working without a restart. A
//! file that cannot be read or parsed admits nobody (it fails closed) until it is fixed.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};

use crate::entropy::Entropy;
use crate::store::fs::{FileStamp, LockError, OsFs, StoreFs};

/// `keys/clients.json`, relative to the data directory.
pub const CLIENT_KEYS_FILE: &str = "keys/clients.json";
/// Held while the file is edited, so two edits never lose one another.
const CLIENT_KEYS_LOCK: &str = "keys/.clients.lock";
/// The file format version.
pub const CLIENT_KEYS_VERSION: u64 = 1;
/// Every key starts with this, so a leaked one is recognizable (e.g. by secret scanners).
pub const KEY_PREFIX: &str = "wrc_";
/// Random bytes in a key.
const KEY_BYTES: usize = 32;
/// The longest client name.
pub const MAX_NAME_CHARS: usize = 64;
/// How long an edit waits for another edit's lock.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// One client as stored: never the key itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientKeyRecord {
    pub name: String,
    /// `sha256:<lowercase hex>` of the key's UTF-8 text.
    pub key_sha256: String,
    /// RFC 3339, UTC (informational).
    pub created_at: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ClientKeysFile {
    v: u64,
    clients: Vec<ClientKeyRecord>,
}

/// A key just made: the only time its text exists outside the client.
#[derive(Debug)]
pub struct NewClientKey {
    pub record: ClientKeyRecord,
    pub key: String,
}

/// `sha256:<hex>` of a presented key.
pub fn key_digest(key: &str) -> String {
    let digest = Sha256::digest(key.as_bytes());
    let mut out = String::with_capacity(7 + 64);
    out.push_str("sha256:");
    for b in digest {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

fn invalid(message: String, suggestion: String, details: serde_json::Value) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::ValidationError,
        message,
        suggestion,
        Retry::NotRetryable,
    )
    .with_details(details)
}

fn io_envelope(what: &str, e: impl std::fmt::Display) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::StoreIoError,
        format!("{what}: {e}"),
        "Check free disk space and the permissions of the WorkRail data directory, then retry; the file was left as it was.",
        Retry::RetryableImmediate,
    )
}

/// Checks a client name: 1 to 64 of `A-Z a-z 0-9 . _ -`, so it prints and logs plainly.
pub fn check_name(name: &str) -> Result<(), ErrorEnvelope> {
    let ok = !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        return Ok(());
    }
    Err(invalid(
        format!("{name:?} is not a client name"),
        format!(
            "Name the client with 1 to {MAX_NAME_CHARS} letters, digits, '.', '_' or '-', e.g. `ci-bot`."
        ),
        json!({"field": "name", "value": name}),
    ))
}

fn parse(bytes: &[u8]) -> Result<ClientKeysFile, String> {
    let file: ClientKeysFile = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if file.v != CLIENT_KEYS_VERSION {
        return Err(format!(
            "version {} is not {CLIENT_KEYS_VERSION}, the one this WorkRail reads",
            file.v
        ));
    }
    Ok(file)
}

fn damaged(data_dir: &Path, why: &str) -> ErrorEnvelope {
    let path = data_dir.join(CLIENT_KEYS_FILE);
    invalid(
        format!("{} cannot be read: {why}", path.display()),
        format!(
            "Fix or delete {} (deleting it revokes every client key), then add the keys again with `workrail keys client add <name>`.",
            path.display()
        ),
        json!({"file": CLIENT_KEYS_FILE}),
    )
}

fn read_file(fs: &OsFs, data_dir: &Path) -> Result<ClientKeysFile, ErrorEnvelope> {
    match fs.read(Path::new(CLIENT_KEYS_FILE)) {
        Ok(None) => Ok(ClientKeysFile {
            v: CLIENT_KEYS_VERSION,
            clients: Vec::new(),
        }),
        Ok(Some(bytes)) => parse(&bytes).map_err(|why| damaged(data_dir, &why)),
        Err(e) => Err(io_envelope(&format!("cannot read {CLIENT_KEYS_FILE}"), e)),
    }
}

/// Runs one edit of the file under its lock: read, change, write whole and atomically.
fn edit<T>(
    data_dir: &Path,
    change: impl FnOnce(&mut ClientKeysFile) -> Result<T, ErrorEnvelope>,
) -> Result<T, ErrorEnvelope> {
    crate::store::fs::create_private_root(data_dir).map_err(|e| e.to_envelope(data_dir))?;
    let fs = OsFs::new(data_dir);
    fs.create_dir_durable(Path::new(crate::store::layout::KEYS_DIR))
        .map_err(|e| io_envelope("cannot create keys/", e))?;
    let started = Instant::now();
    let _lock = loop {
        match fs.try_lock(Path::new(CLIENT_KEYS_LOCK)) {
            Ok(lock) => break lock,
            Err(LockError::Busy) if started.elapsed() < LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(LockError::Busy) => {
                return Err(ErrorEnvelope::new(
                    ErrorCode::StoreIoError,
                    format!("another command is editing {CLIENT_KEYS_FILE}"),
                    "Wait for the other `workrail keys client` command to finish, then retry.",
                    Retry::RetryableImmediate,
                ));
            }
            Err(LockError::Io(e)) => {
                return Err(io_envelope(&format!("cannot lock {CLIENT_KEYS_LOCK}"), e));
            }
        }
    };
    let mut file = read_file(&fs, data_dir)?;
    let out = change(&mut file)?;
    let mut text = serde_json::to_string_pretty(&file)
        .map_err(|e| io_envelope(&format!("cannot serialize {CLIENT_KEYS_FILE}"), e))?;
    text.push('\n');
    fs.write_private(Path::new(CLIENT_KEYS_FILE), text.as_bytes())
        .map_err(|e| io_envelope(&format!("cannot write {CLIENT_KEYS_FILE}"), e))?;
    Ok(out)
}

/// `workrail keys client add <name>`: a new key for a new name; only its digest is stored.
pub fn add_client(
    data_dir: &Path,
    name: &str,
    entropy: &dyn Entropy,
    now: SystemTime,
) -> Result<NewClientKey, ErrorEnvelope> {
    check_name(name)?;
    let mut bytes = [0u8; KEY_BYTES];
    entropy
        .fill(&mut bytes)
        .map_err(|e| io_envelope("cannot draw a client key", e.0))?;
    let key = format!("{KEY_PREFIX}{}", URL_SAFE_NO_PAD.encode(bytes));
    let record = ClientKeyRecord {
        name: name.to_owned(),
        key_sha256: key_digest(&key),
        created_at: crate::time::rfc3339_utc(now),
    };
    let stored = record.clone();
    edit(data_dir, move |file| {
        if file.clients.iter().any(|c| c.name == stored.name) {
            return Err(invalid(
                format!("a client named {:?} already has a key", stored.name),
                format!(
                    "Pick another name, or revoke the old key first with `workrail keys client revoke {}`.",
                    stored.name
                ),
                json!({"field": "name", "value": stored.name}),
            ));
        }
        file.clients.push(stored);
        Ok(())
    })?;
    Ok(NewClientKey { record, key })
}

/// `workrail keys client revoke <name>`: the client's key stops working at its next request.
pub fn revoke_client(data_dir: &Path, name: &str) -> Result<ClientKeyRecord, ErrorEnvelope> {
    edit(data_dir, |file| {
        let Some(at) = file.clients.iter().position(|c| c.name == name) else {
            let names: Vec<&str> = file.clients.iter().map(|c| c.name.as_str()).collect();
            return Err(invalid(
                format!("no client is named {name:?}"),
                if names.is_empty() {
                    "There are no client keys; `workrail keys client add <name>` makes one."
                        .to_owned()
                } else {
                    format!("Revoke one of: {}.", names.join(", "))
                },
                json!({"field": "name", "value": name, "known": names}),
            ));
        };
        Ok(file.clients.remove(at))
    })
}

/// `workrail keys client list`: the clients with a key (never the keys). Reads only.
pub fn list_clients(data_dir: &Path) -> Result<Vec<ClientKeyRecord>, ErrorEnvelope> {
    Ok(read_file(&OsFs::new(data_dir), data_dir)?.clients)
}

/// Why a presented key was not admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No `Authorization: Bearer` header.
    Missing,
    /// A key no client holds (never issued, mistyped or revoked).
    Unknown,
    /// The key file cannot be read: nobody is admitted until it is fixed.
    Unreadable(String),
}

#[derive(Debug)]
struct Loaded {
    /// `None`: the file changed too recently for its stamp to vouch for it; read every time.
    stamp: Option<FileStamp>,
    clients: Result<Vec<ClientKeyRecord>, String>,
}

/// The server's view of `keys/clients.json`, re-read whenever the file changes.
#[derive(Debug)]
pub struct ClientKeys {
    data_dir: PathBuf,
    fs: OsFs,
    loaded: Mutex<Option<Loaded>>,
}

impl ClientKeys {
    pub fn new(data_dir: &Path) -> Self {
        Self {
            data_dir: data_dir.to_path_buf(),
            fs: OsFs::new(data_dir),
            loaded: Mutex::new(None),
        }
    }

    /// How many clients hold a key now (`None`: the file cannot be read).
    pub fn count(&self) -> Option<usize> {
        self.with_current(|clients| clients.ok().map(<[_]>::len))
    }

    /// The name of the client holding `key`, or why it is refused.
    pub fn admit(&self, key: Option<&str>) -> Result<String, Refusal> {
        let Some(key) = key else {
            return Err(Refusal::Missing);
        };
        let presented = key_digest(key);
        self.with_current(|clients| {
            let clients = clients.map_err(|why| Refusal::Unreadable(why.to_owned()))?;
            // Every record is compared, in constant time each, so timing says nothing of which.
            let mut found = None;
            for c in clients {
                if bool::from(c.key_sha256.as_bytes().ct_eq(presented.as_bytes())) {
                    found = Some(c.name.clone());
                }
            }
            found.ok_or(Refusal::Unknown)
        })
    }

    fn with_current<T>(&self, f: impl FnOnce(Result<&[ClientKeyRecord], &str>) -> T) -> T {
        let stamp = self.fs.stamp(Path::new(CLIENT_KEYS_FILE));
        let mut held = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = matches!(held.as_ref(), Some(l) if l.stamp.is_some() && l.stamp == stamp);
        if !fresh {
            let clients = read_file(&self.fs, &self.data_dir)
                .map(|f| f.clients)
                .map_err(|e| e.message);
            *held = Some(Loaded { stamp, clients });
        }
        match held.as_ref().map(|l| &l.clients) {
            Some(Ok(clients)) => f(Ok(clients)),
            Some(Err(why)) => f(Err(why)),
            None => f(Err("the client keys were not read")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entropy::SeededEntropy;

    /// decision: D179
    #[test]
    fn a_key_is_admitted_until_revoked_and_only_its_digest_is_stored() {
        let dir = tempfile::tempdir().unwrap_or_else(|_| unreachable!());
        let entropy = SeededEntropy::new(7);
        let keys = ClientKeys::new(dir.path());
        assert_eq!(keys.count(), Some(0));
        let made = add_client(dir.path(), "ci-bot", &entropy, SystemTime::now())
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(made.key.starts_with(KEY_PREFIX));
        let text = std::fs::read_to_string(dir.path().join(CLIENT_KEYS_FILE))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!text.contains(&made.key[KEY_PREFIX.len()..]), "{text}");
        assert!(text.contains(&key_digest(&made.key)), "{text}");
        assert_eq!(keys.admit(Some(&made.key)), Ok("ci-bot".to_owned()));
        assert_eq!(keys.admit(Some("wrc_nope")), Err(Refusal::Unknown));
        assert_eq!(keys.admit(None), Err(Refusal::Missing));
        let again = add_client(dir.path(), "ci-bot", &entropy, SystemTime::now());
        assert!(again.is_err_and(|e| e.suggestion.contains("revoke")));
        revoke_client(dir.path(), "ci-bot").unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(keys.admit(Some(&made.key)), Err(Refusal::Unknown));
        let unknown = revoke_client(dir.path(), "ci-bot");
        assert!(unknown.is_err_and(|e| e.message.contains("no client")));
        assert!(check_name("bad name").is_err());
        assert!(check_name("").is_err());
    }

    /// decision: D179
    #[test]
    fn a_damaged_key_file_admits_nobody() {
        let dir = tempfile::tempdir().unwrap_or_else(|_| unreachable!());
        let made = add_client(dir.path(), "a", &SeededEntropy::new(1), SystemTime::now())
            .unwrap_or_else(|e| panic!("{e:?}"));
        std::fs::write(dir.path().join(CLIENT_KEYS_FILE), b"{not json")
            .unwrap_or_else(|e| panic!("{e}"));
        let keys = ClientKeys::new(dir.path());
        assert!(matches!(
            keys.admit(Some(&made.key)),
            Err(Refusal::Unreadable(_))
        ));
        assert!(list_clients(dir.path()).is_err_and(|e| e.suggestion.contains("Fix or delete")));
    }
}

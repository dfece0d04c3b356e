//! The token signing keyring: `keys/keyring.json`, owner-only (0600), holding `current` and at
//! most one `previous` key (locks §1.2 "Token signing + keyring", §10 "Key ring storage").
//!
//! Keys are 32 random bytes. Rotation is explicit: `current` becomes `previous` and a fresh
//! `current` is generated; tokens signed by `previous` stay valid until the next rotation.
//! Creation and rotation hold `keys/.lock` so two processes never race to different keys.
//!
//! Several processes share the keyring: each compares the file with what it holds on every use
//! ([`KeyringStore::refresh`]), so a rotation by another process takes effect without a restart.
//! A keyring that goes missing while a process holds it is written back from memory; one missing
//! when a process starts, while sessions exist, is re-created with a logged warning and a
//! `keys/recreated.json` note, so a token minted before then is refused as such, never as
//! "altered". A damaged keyring is its own error (decision D54).

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::error::StoreError;
use super::fs::{FileStamp, LockError, StoreFs};
use super::layout;
use super::owner::Part;
use crate::entropy::Entropy;

/// Length of a signing key in bytes.
pub const KEY_BYTES: usize = 32;
/// The keyring file format version.
pub const KEYRING_VERSION: u64 = 1;

/// One signing key. Its secret never appears in `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey {
    pub key_id: String,
    pub secret: [u8; KEY_BYTES],
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SigningKey")
            .field("key_id", &self.key_id)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// The active key set: verification tries `current`, then `previous`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyring {
    pub current: SigningKey,
    pub previous: Option<SigningKey>,
}

impl Keyring {
    /// Keys in verification order.
    pub fn verification_order(&self) -> impl Iterator<Item = &SigningKey> {
        std::iter::once(&self.current).chain(self.previous.iter())
    }
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct KeyFile {
    key_id: String,
    secret: String,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct KeyringFile {
    v: u64,
    current: KeyFile,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous: Option<KeyFile>,
}

fn corrupt(detail: impl ToString) -> StoreError {
    StoreError::KeyringCorrupt {
        detail: detail.to_string(),
    }
}

/// `keys/recreated.json`: why and when the keyring was created anew while sessions existed.
pub const RECREATED_FILE: &str = "keys/recreated.json";

/// The note a re-created keyring leaves, so refused old tokens can be explained.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeyringRecreated {
    pub v: u64,
    /// RFC 3339 UTC.
    pub recreated_at: String,
    /// `missing`: there was no keyring file although sessions existed.
    pub reason: String,
}

/// The keyring as one process holds it, with the bytes it was read from (to notice changes)
/// and the file's stamp when they were read (an unchanged stamp spares the read).
#[derive(Debug, Clone)]
pub struct HeldKeyring {
    pub keyring: Keyring,
    bytes: Vec<u8>,
    stamp: Option<FileStamp>,
}

impl PartialEq for HeldKeyring {
    fn eq(&self, other: &Self) -> bool {
        self.keyring == other.keyring && self.bytes == other.bytes
    }
}

impl Eq for HeldKeyring {}

impl HeldKeyring {
    /// A keyring held as read from `bytes` somewhere without a file stamp (a database row).
    pub(crate) fn from_bytes(keyring: Keyring, bytes: Vec<u8>) -> Self {
        Self {
            keyring,
            bytes,
            stamp: None,
        }
    }

    /// The bytes this keyring was read from.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// What [`KeyringStore::refresh`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refresh {
    /// The file holds what the process holds.
    Unchanged,
    /// Another process rotated (or re-created) the keyring: use this one.
    Changed(HeldKeyring),
    /// The file holds the same keyring under a new stamp (rewritten with the same keys): hold
    /// this one, so the next check is a `stat` again.
    Restamped(HeldKeyring),
    /// The file was gone and was written back from memory.
    Restored,
}

fn decode_key(file: KeyFile) -> Result<SigningKey, StoreError> {
    let bytes = URL_SAFE_NO_PAD.decode(&file.secret).map_err(corrupt)?;
    let secret: [u8; KEY_BYTES] = bytes
        .try_into()
        .map_err(|_| corrupt(format!("key {} is not {KEY_BYTES} bytes", file.key_id)))?;
    Ok(SigningKey {
        key_id: file.key_id,
        secret,
    })
}

fn encode_key(key: &SigningKey) -> KeyFile {
    KeyFile {
        key_id: key.key_id.clone(),
        secret: URL_SAFE_NO_PAD.encode(key.secret),
    }
}

/// Reads, creates and rotates the keyring.
#[derive(Debug, Clone)]
pub struct KeyringStore {
    fs: Arc<dyn StoreFs>,
}

impl KeyringStore {
    pub fn new(fs: Arc<dyn StoreFs>) -> Self {
        Self { fs }
    }

    fn io(op: &'static str) -> impl Fn(std::io::Error) -> StoreError {
        move |e| StoreError::Io {
            session: None,
            op,
            detail: e.to_string(),
        }
    }

    /// The keyring's bytes, once `keys/` and the file (those that exist) are this user's and
    /// closed to everyone else (decision D136): a key another user could have read or chosen
    /// is never used.
    fn read_bytes(&self) -> Result<Option<Vec<u8>>, StoreError> {
        self.refuse_unless_private()?;
        self.fs
            .read(Path::new(layout::KEYRING_FILE))
            .map_err(Self::io("read keyring"))
    }

    fn refuse_unless_private(&self) -> Result<(), StoreError> {
        for (path, part) in [
            (layout::KEYS_DIR, Part::KeysDir),
            (layout::KEYRING_FILE, Part::Keyring),
        ] {
            if let Some(refusal) = self
                .fs
                .refuse_unless_private(Path::new(path), part)
                .map_err(Self::io("check the keyring's owner and mode"))?
            {
                return Err(StoreError::Refused(Box::new(refusal)));
            }
        }
        Ok(())
    }

    fn read(&self) -> Result<Option<Keyring>, StoreError> {
        self.read_held().map(|held| held.map(|h| h.keyring))
    }

    fn read_held(&self) -> Result<Option<HeldKeyring>, StoreError> {
        // The stamp before the bytes: a change in between makes the next check read again.
        let stamp = self.stamp();
        let Some(bytes) = self.read_bytes()? else {
            return Ok(None);
        };
        Ok(Some(HeldKeyring {
            keyring: Self::parse(&bytes)?,
            bytes,
            stamp,
        }))
    }

    fn stamp(&self) -> Option<FileStamp> {
        self.fs.stamp(Path::new(layout::KEYRING_FILE))
    }

    fn parse(bytes: &[u8]) -> Result<Keyring, StoreError> {
        let file: KeyringFile = serde_json::from_slice(bytes).map_err(corrupt)?;
        if file.v != KEYRING_VERSION {
            return Err(corrupt(format!(
                "keyring version {} is not supported (expected {KEYRING_VERSION})",
                file.v
            )));
        }
        Ok(Keyring {
            current: decode_key(file.current)?,
            previous: file.previous.map(decode_key).transpose()?,
        })
    }

    fn write(&self, keyring: &Keyring) -> Result<HeldKeyring, StoreError> {
        let file = KeyringFile {
            v: KEYRING_VERSION,
            current: encode_key(&keyring.current),
            previous: keyring.previous.as_ref().map(encode_key),
        };
        let bytes = serde_json::to_vec_pretty(&file).map_err(|e| StoreError::Internal {
            detail: e.to_string(),
        })?;
        self.fs
            .write_private(Path::new(layout::KEYRING_FILE), &bytes)
            .map_err(Self::io("write keyring"))?;
        Ok(HeldKeyring {
            keyring: keyring.clone(),
            bytes,
            stamp: self.stamp(),
        })
    }

    /// Whether any session directory exists (then a missing keyring is a loss, not a first use).
    fn sessions_exist(&self) -> bool {
        self.fs
            .list_dir(Path::new(layout::SESSIONS_DIR))
            // A directory GC is deleting (a `.tmp-` name) is no session.
            .is_ok_and(|names| names.iter().any(|n| !layout::is_temp_file_name(n)))
    }

    /// The note a re-created keyring left, if any. It only explains a refused token, so a
    /// note that cannot be read or parsed is left out of the explanation (and logged).
    pub fn recreated(&self) -> Option<KeyringRecreated> {
        let bytes = match self.fs.read(Path::new(RECREATED_FILE)) {
            Ok(bytes) => bytes?,
            Err(e) => {
                tracing::debug!(error = %e, "could not read {RECREATED_FILE}");
                return None;
            }
        };
        serde_json::from_slice(&bytes)
            .inspect_err(|e| tracing::debug!(error = %e, "{RECREATED_FILE} does not parse"))
            .ok()
    }

    /// Compares the keyring file with `held`: another process's rotation is picked up, and a
    /// file that vanished is written back from memory (logged), so tokens keep verifying in
    /// every process. One `stat` per call while the file keeps the stamp it had when read (see
    /// [`FileStamp`]); else one small read.
    pub fn refresh(&self, held: &HeldKeyring) -> Result<Refresh, StoreError> {
        let stamp = self.stamp();
        if stamp.is_some() && stamp == held.stamp {
            return Ok(Refresh::Unchanged);
        }
        match self.read_bytes()? {
            Some(bytes) if bytes == held.bytes => match stamp {
                Some(_) => Ok(Refresh::Restamped(HeldKeyring {
                    keyring: held.keyring.clone(),
                    bytes,
                    stamp,
                })),
                None => Ok(Refresh::Unchanged),
            },
            Some(bytes) => Ok(Refresh::Changed(HeldKeyring {
                keyring: Self::parse(&bytes)?,
                bytes,
                stamp,
            })),
            None => self.locked(|| match self.read_held()? {
                Some(other) => Ok(Refresh::Changed(other)),
                None => {
                    self.fs
                        .write_private(Path::new(layout::KEYRING_FILE), &held.bytes)
                        .map_err(Self::io("restore keyring"))?;
                    tracing::warn!(
                        "the token signing keyring {} was missing; written back from this process's memory so issued tokens keep verifying",
                        layout::KEYRING_FILE
                    );
                    Ok(Refresh::Restored)
                }
            }),
        }
    }

    fn fresh_key(entropy: &dyn Entropy) -> Result<SigningKey, StoreError> {
        let mut secret = [0u8; KEY_BYTES];
        entropy.fill(&mut secret).map_err(|e| StoreError::Io {
            session: None,
            op: "generate signing key",
            detail: e.to_string(),
        })?;
        let id: String = secret[..4].iter().map(|b| format!("{b:02x}")).collect();
        Ok(SigningKey {
            key_id: format!("k_{id}"),
            secret,
        })
    }

    /// Runs `f` holding `keys/.lock`, waiting briefly for another process to finish.
    fn locked<T>(&self, f: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
        self.fs
            .create_dir_durable(Path::new(layout::KEYS_DIR))
            .map_err(Self::io("create keys directory"))?;
        let lock_path = Path::new(layout::KEYS_DIR).join(".lock");
        for _ in 0..200 {
            match self.fs.try_lock(&lock_path) {
                Ok(_guard) => return f(),
                Err(LockError::Busy) => std::thread::sleep(Duration::from_millis(10)),
                Err(LockError::Io(e)) => return Err(Self::io("lock keyring")(e)),
            }
        }
        Err(StoreError::Io {
            session: None,
            op: "lock keyring",
            detail: "another WorkRail process held keys/.lock for over 2 seconds".into(),
        })
    }

    /// The keyring, created with a fresh `current` key on first use. Created while sessions
    /// exist, the keyring was lost: that is logged and noted in [`RECREATED_FILE`].
    pub fn load_or_create(&self, entropy: &dyn Entropy) -> Result<HeldKeyring, StoreError> {
        if let Some(held) = self.read_held()? {
            return Ok(held);
        }
        self.locked(|| {
            if let Some(held) = self.read_held()? {
                return Ok(held);
            }
            let lost = self.sessions_exist();
            let keyring = Keyring {
                current: Self::fresh_key(entropy)?,
                previous: None,
            };
            let held = self.write(&keyring)?;
            if lost {
                let note = KeyringRecreated {
                    v: 1,
                    recreated_at: crate::time::rfc3339_utc(std::time::SystemTime::now()),
                    reason: "missing".into(),
                };
                let bytes = serde_json::to_vec_pretty(&note).map_err(|e| StoreError::Internal {
                    detail: e.to_string(),
                })?;
                self.fs
                    .write_private(Path::new(RECREATED_FILE), &bytes)
                    .map_err(Self::io("note the keyring re-creation"))?;
                tracing::warn!(
                    "the token signing keyring {} was missing although sessions exist: created a new one; tokens issued before now no longer verify (sessions are intact; resume_session mints fresh tokens)",
                    layout::KEYRING_FILE
                );
            }
            Ok(held)
        })
    }

    /// Explicit rotation: `current -> previous`, fresh `current`.
    pub fn rotate(&self, entropy: &dyn Entropy) -> Result<HeldKeyring, StoreError> {
        self.locked(|| {
            let old = match self.read()? {
                Some(k) => k,
                None => Keyring {
                    current: Self::fresh_key(entropy)?,
                    previous: None,
                },
            };
            let keyring = Keyring {
                current: Self::fresh_key(entropy)?,
                previous: Some(old.current),
            };
            self.write(&keyring)
        })
    }
}

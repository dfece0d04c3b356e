//! The token signing keyring: `keys/keyring.json`, owner-only (0600), holding `current` and at
//! most one `previous` key (locks §1.2 "Token signing + keyring", §10 "Key ring storage").
//!
//! Keys are 32 random bytes. Rotation is explicit: `current` becomes `previous` and a fresh
//! `current` is generated; tokens signed by `previous` stay valid until the next rotation.
//! Creation and rotation hold `keys/.lock` so two processes never race to different keys.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::error::StoreError;
use super::fs::{LockError, StoreFs};
use super::layout;
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
    StoreError::CorruptObject {
        what: layout::KEYRING_FILE.into(),
        detail: detail.to_string(),
    }
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

    fn read(&self) -> Result<Option<Keyring>, StoreError> {
        let Some(bytes) = self
            .fs
            .read(Path::new(layout::KEYRING_FILE))
            .map_err(Self::io("read keyring"))?
        else {
            return Ok(None);
        };
        let file: KeyringFile = serde_json::from_slice(&bytes).map_err(corrupt)?;
        if file.v != KEYRING_VERSION {
            return Err(corrupt(format!(
                "keyring version {} is not supported (expected {KEYRING_VERSION})",
                file.v
            )));
        }
        Ok(Some(Keyring {
            current: decode_key(file.current)?,
            previous: file.previous.map(decode_key).transpose()?,
        }))
    }

    fn write(&self, keyring: &Keyring) -> Result<(), StoreError> {
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
            .map_err(Self::io("write keyring"))
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

    /// The keyring, created with a fresh `current` key on first use.
    pub fn load_or_create(&self, entropy: &dyn Entropy) -> Result<Keyring, StoreError> {
        if let Some(keyring) = self.read()? {
            return Ok(keyring);
        }
        self.locked(|| {
            if let Some(keyring) = self.read()? {
                return Ok(keyring);
            }
            let keyring = Keyring {
                current: Self::fresh_key(entropy)?,
                previous: None,
            };
            self.write(&keyring)?;
            Ok(keyring)
        })
    }

    /// Explicit rotation: `current -> previous`, fresh `current`.
    pub fn rotate(&self, entropy: &dyn Entropy) -> Result<Keyring, StoreError> {
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
            self.write(&keyring)?;
            Ok(keyring)
        })
    }
}

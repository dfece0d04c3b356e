//! The keyring row: the same JSON as `keys/keyring.json`, created once by whoever inserts it
//! first, re-read once per token use (D66's refresh, D103) and rotated by a compare-and-swap.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use super::PostgresBackend;
use super::sql_error;
use super::worker::{Request, Worker};
use crate::entropy::Entropy;
use crate::store::error::StoreError;
use crate::store::keyring::{HeldKeyring, KEY_BYTES, Keyring, Refresh, SigningKey};

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct KeyJson {
    key_id: String,
    secret: String,
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct KeyringJson {
    v: u64,
    current: KeyJson,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    previous: Option<KeyJson>,
}

fn keyring_corrupt(detail: impl ToString) -> StoreError {
    StoreError::KeyringCorrupt {
        detail: detail.to_string(),
    }
}

pub(super) fn parse_keyring(body: &str) -> Result<Keyring, StoreError> {
    let file: KeyringJson = serde_json::from_str(body).map_err(keyring_corrupt)?;
    if file.v != 1 {
        return Err(keyring_corrupt(format!(
            "keyring version {} is not supported (expected 1)",
            file.v
        )));
    }
    let decode = |key: KeyJson| -> Result<SigningKey, StoreError> {
        let bytes = URL_SAFE_NO_PAD
            .decode(&key.secret)
            .map_err(keyring_corrupt)?;
        let secret: [u8; KEY_BYTES] = bytes
            .try_into()
            .map_err(|_| keyring_corrupt(format!("key {} is not {KEY_BYTES} bytes", key.key_id)))?;
        Ok(SigningKey {
            key_id: key.key_id,
            secret,
        })
    };
    Ok(Keyring {
        current: decode(file.current)?,
        previous: file.previous.map(decode).transpose()?,
    })
}

fn encode_keyring(keyring: &Keyring) -> Result<String, StoreError> {
    let encode = |key: &SigningKey| KeyJson {
        key_id: key.key_id.clone(),
        secret: URL_SAFE_NO_PAD.encode(key.secret),
    };
    serde_json::to_string_pretty(&KeyringJson {
        v: 1,
        current: encode(&keyring.current),
        previous: keyring.previous.as_ref().map(encode),
    })
    .map_err(|e| StoreError::Internal {
        detail: e.to_string(),
    })
}

/// A fresh key as the file keyring makes one: 32 random bytes, id `k_` + hex of the first four.
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

impl PostgresBackend {
    /// The keyring row's text; on first use a fresh keyring is offered, and whoever inserted
    /// first wins: everyone reads the row that won.
    pub(super) fn keyring_body(&self, entropy: &dyn Entropy) -> Result<String, StoreError> {
        if let Some(body) = self.keyring_row(None)? {
            return Ok(body);
        }
        let fresh = Keyring {
            current: fresh_key(entropy)?,
            previous: None,
        };
        let candidate = Some(encode_keyring(&fresh)?);
        self.keyring_row(candidate)?
            .ok_or_else(|| StoreError::Internal {
                detail: "the keyring row vanished right after it was created".into(),
            })
    }

    /// The keyring row as this process holds it, created with a fresh key on first use.
    pub fn load_or_create_held(&self, entropy: &dyn Entropy) -> Result<HeldKeyring, StoreError> {
        held(self.keyring_body(entropy)?)
    }

    /// Compares the row with `held` (one small read): another process's rotation is picked
    /// up; a row that vanished is written back from memory.
    pub fn refresh_keyring(&self, held_now: &HeldKeyring) -> Result<Refresh, StoreError> {
        match self.keyring_row(None)? {
            Some(body) if body.as_bytes() == held_now.bytes() => Ok(Refresh::Unchanged),
            Some(body) => held(body).map(Refresh::Changed),
            None => {
                let body = String::from_utf8(held_now.bytes().to_vec()).map_err(|e| {
                    StoreError::Internal {
                        detail: format!("the held keyring is not UTF-8: {e}"),
                    }
                })?;
                tracing::warn!("the keyring row was missing; written back from memory");
                self.keyring_row(Some(body))?;
                Ok(Refresh::Restored)
            }
        }
    }

    /// Rotation: `current -> previous`, fresh `current`, as one compare-and-swap of the row.
    pub fn rotate_keyring(&self, entropy: &dyn Entropy) -> Result<HeldKeyring, StoreError> {
        for _ in 0..8 {
            let old = self.load_or_create_held(entropy)?;
            let old_body =
                String::from_utf8(old.bytes().to_vec()).map_err(|e| StoreError::Internal {
                    detail: format!("the keyring row is not UTF-8: {e}"),
                })?;
            let new = Keyring {
                current: fresh_key(entropy)?,
                previous: Some(old.keyring.current.clone()),
            };
            let new_body = encode_keyring(&new)?;
            let swapped = self.call(|reply| Request::SwapKeyring {
                old: old_body,
                new: new_body.clone(),
                reply,
            })?;
            if swapped {
                return Ok(HeldKeyring::from_bytes(new, new_body.into_bytes()));
            }
        }
        Err(StoreError::Database {
            session: None,
            op: "rotate the keyring",
            detail: "another process kept rotating the keyring at the same time; try again".into(),
        })
    }

    fn keyring_row(&self, candidate: Option<String>) -> Result<Option<String>, StoreError> {
        self.call(|reply| Request::Keyring { candidate, reply })
    }
}

/// A held keyring from the row's text.
fn held(body: String) -> Result<HeldKeyring, StoreError> {
    let keyring = parse_keyring(&body)?;
    Ok(HeldKeyring::from_bytes(keyring, body.into_bytes()))
}

impl Worker {
    pub(super) async fn keyring(
        &mut self,
        candidate: Option<String>,
    ) -> Result<Option<String>, StoreError> {
        let op = "load or create the keyring";
        let client = self.client().await?;
        if let Some(body) = candidate {
            client
                .execute(
                    "INSERT INTO keyring (id, body) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
                    &[&body],
                )
                .await
                .map_err(sql_error(op))?;
        }
        let row = client
            .query_opt("SELECT body FROM keyring WHERE id = 1", &[])
            .await
            .map_err(sql_error(op))?;
        Ok(row.map(|r| r.get(0)))
    }

    pub(super) async fn swap_keyring(&mut self, old: &str, new: &str) -> Result<bool, StoreError> {
        let client = self.client().await?;
        let changed = client
            .execute(
                "UPDATE keyring SET body = $2 WHERE id = 1 AND body = $1",
                &[&old, &new],
            )
            .await
            .map_err(sql_error("rotate the keyring"))?;
        Ok(changed == 1)
    }
}

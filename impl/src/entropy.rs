//! The entropy port: ids and signing keys come from here, so tests can make them deterministic.

use std::fmt;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

/// The system's randomness could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the operating system's random source failed: {0}")]
pub struct EntropyError(pub String);

/// A source of random bytes.
pub trait Entropy: Send + Sync + fmt::Debug {
    fn fill(&self, buf: &mut [u8]) -> Result<(), EntropyError>;

    /// Ten random bytes, the input of a minted id.
    fn id_bytes(&self) -> Result<[u8; 10], EntropyError> {
        let mut bytes = [0u8; 10];
        self.fill(&mut bytes)?;
        Ok(bytes)
    }
}

/// The operating system's random source.
#[derive(Debug, Clone, Copy, Default)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn fill(&self, buf: &mut [u8]) -> Result<(), EntropyError> {
        getrandom::fill(buf).map_err(|e| EntropyError(e.to_string()))
    }
}

/// Deterministic bytes from a seed (SHA-256 in counter mode), for tests and harnesses.
#[derive(Debug)]
pub struct SeededEntropy {
    seed: [u8; 32],
    counter: Mutex<u64>,
}

impl SeededEntropy {
    pub fn new(seed: u64) -> Self {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        Self {
            seed: bytes,
            counter: Mutex::new(0),
        }
    }
}

impl Entropy for SeededEntropy {
    fn fill(&self, buf: &mut [u8]) -> Result<(), EntropyError> {
        let mut counter = self.counter.lock().unwrap_or_else(|p| p.into_inner());
        for chunk in buf.chunks_mut(32) {
            let mut hasher = Sha256::new();
            hasher.update(self.seed);
            hasher.update(counter.to_le_bytes());
            *counter += 1;
            let block = hasher.finalize();
            chunk.copy_from_slice(&block[..chunk.len()]);
        }
        Ok(())
    }
}

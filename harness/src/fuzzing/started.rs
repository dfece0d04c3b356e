//! A started server, built once per fuzzing process: the data directory a fresh in-process
//! server leaves after `start_workflow` on the harness workflow, and the start's response. Each
//! input gets its own copy of that directory and a new server on it, whose entropy continues
//! the stream where the start left it, so the ids it mints are the ones the server that started
//! the run would mint next (no input sees another's writes, and nothing collides with the
//! template's ids).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;
use workrail::entropy::{Entropy, EntropyError};
use workrail::protocol::Workrail;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;

use crate::fixture;
use crate::system::SIMULATED_LOCK_WAIT;

/// `workrail::entropy::SeededEntropy`'s stream (SHA-256 of the seed and a block counter),
/// starting at any block.
#[derive(Debug)]
struct Stream {
    seed: [u8; 32],
    counter: Arc<Mutex<u64>>,
}

impl Stream {
    fn at(seed: u64, counter: u64) -> Self {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        Self {
            seed: bytes,
            counter: Arc::new(Mutex::new(counter)),
        }
    }
}

impl Entropy for Stream {
    fn fill(&self, buf: &mut [u8]) -> Result<(), EntropyError> {
        let mut counter = self.counter.lock().unwrap_or_else(|p| p.into_inner());
        let mut block = Vec::with_capacity(40);
        for chunk in buf.chunks_mut(32) {
            block.clear();
            block.extend_from_slice(&self.seed);
            block.extend_from_slice(&counter.to_le_bytes());
            *counter += 1;
            let digest = workrail_spec::jcs::sha256(&block).bytes();
            chunk.copy_from_slice(&digest[..chunk.len()]);
        }
        Ok(())
    }
}

/// The seed of the started server (the one `mcp_request` always used).
const SEED: u64 = 17;

/// The started server's data directory, its next entropy block, and the start's response.
struct Template {
    files: Vec<(PathBuf, Vec<u8>)>,
    counter: u64,
    start: Value,
}

fn template() -> &'static Template {
    static TEMPLATE: OnceLock<Template> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let fs = MemFs::new();
        let entropy = Stream::at(SEED, 0);
        let counter = Arc::clone(&entropy.counter);
        let workrail = open(&fs, entropy);
        let start = workrail::mcp::dispatch::call_tool(
            &workrail,
            "start_workflow",
            Some(serde_json::json!({"workflowId": fixture::WORKFLOW_ID})),
        );
        assert!(
            !start.is_error,
            "the fixture workflow does not start: {}",
            start.text
        );
        let counter = *counter.lock().unwrap_or_else(|p| p.into_inner());
        Template {
            files: fs.snapshot().into_iter().collect(),
            counter,
            start: start.structured,
        }
    })
}

fn open(fs: &MemFs, entropy: Stream) -> Workrail {
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    match Workrail::with_parts(shared, fixture::catalog(), Arc::new(entropy)) {
        Ok(w) => w.with_lock_wait(SIMULATED_LOCK_WAIT),
        Err(e) => panic!("WorkRail does not open on a MemFs: {e:?}"),
    }
}

/// A new server on a copy of the started data directory, and the start's structured response.
pub fn started() -> (Workrail, Value) {
    let template = template();
    let fs = MemFs::new();
    for (path, bytes) in &template.files {
        super::write(&fs, path, bytes);
    }
    let workrail = open(&fs, Stream::at(SEED, template.counter));
    (workrail, template.start.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use workrail::entropy::SeededEntropy;

    #[test]
    fn the_stream_is_seeded_entropy_from_any_block() {
        let mut whole = [0u8; 100];
        SeededEntropy::new(5).fill(&mut whole).unwrap_or_default();
        let mut from_start = [0u8; 100];
        Stream::at(5, 0).fill(&mut from_start).unwrap_or_default();
        assert_eq!(whole, from_start);
        let mut from_block_2 = [0u8; 36];
        Stream::at(5, 2).fill(&mut from_block_2).unwrap_or_default();
        assert_eq!(&whole[64..], &from_block_2[..]);
    }

    /// The copy answers a start as the server that started the template would: the same ids
    /// and tokens as a server that does both starts in one process.
    #[test]
    fn a_copy_continues_the_started_servers_ids() {
        let one = crate::system::InProcess::new(SEED);
        let args = || Some(serde_json::json!({"workflowId": fixture::WORKFLOW_ID}));
        let first = workrail::mcp::dispatch::call_tool(&one.workrail, "start_workflow", args());
        let second = workrail::mcp::dispatch::call_tool(&one.workrail, "start_workflow", args());
        let (copy, start) = started();
        assert_eq!(start, first.structured);
        let again = workrail::mcp::dispatch::call_tool(&copy, "start_workflow", args());
        assert_eq!(again.structured, second.structured);
    }
}

//! Several stores on one data directory at the same instant, as several WorkRail servers are:
//! the checks behind `tests/concurrency.rs`, kept here so the planted-bug tests run the very
//! same code (`tests/concurrency.rs` proves each check fails when its rule is broken).
//!
//! - [`reader_during_commit`]: one store's advance is parked in the middle of its manifest
//!   write (the close line whole, the pins not yet; `MemFs::pause_write_to`), and another
//!   store, a second process in all but name, reads the session then. The reader may answer
//!   with the old truth, the new truth or "locked, retry", never with corruption.
//! - [`racing_object_writers`]: threads with their own store each put the same fresh
//!   content-addressed objects at the same instant on a real directory; every put must
//!   succeed and every object must read back intact.

use std::path::Path;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use workrail::protocol::Workrail;
use workrail::store::fs::{OsFs, StoreFs};
use workrail::store::layout;
use workrail::store::memfs::MemFs;
use workrail::store::{ArtifactStore, StoreError};
use workrail_spec::error::ErrorCode;
use workrail_spec::tools::{ContinueWorkflowInput, OutputInput, StartWorkflowInput};

use crate::fixture;
use crate::system::open_workrail_with;

/// What the readers saw while a commit was in flight.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InFlightReport {
    /// Reads attempted mid-commit.
    pub reads: u32,
    /// Reads that called the session damaged (must be 0).
    pub false_corruption: u32,
    /// Reads answered "locked, retry" (allowed).
    pub locked: u32,
}

fn notes(text: &str) -> Option<OutputInput> {
    Some(OutputInput {
        notes_markdown: Some(text.to_owned()),
        artifacts: vec![],
    })
}

fn start(workrail: &Workrail) -> Result<workrail_spec::tools::ExecutionOutput, String> {
    workrail
        .start_workflow(StartWorkflowInput {
            workflow_id: fixture::LINEAR_ID.to_owned(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .map_err(|e| format!("start failed: {e:?}"))
}

/// Parks an advance of one store in the middle of its manifest write at each fraction of
/// `fractions` (thousandths of the close+pins write), and reads the session from a second store
/// meanwhile.
pub fn reader_during_commit(seed: u64, fractions: &[u16]) -> Result<InFlightReport, String> {
    let fs = MemFs::new();
    let writer =
        open_workrail_with(&fs, seed, fixture::multi_catalog()).map_err(|e| format!("{e:?}"))?;
    // The reader waits as a real server does, long enough for the parked writer to finish.
    let reader = open_workrail_with(&fs, seed ^ 0x5eed, fixture::multi_catalog())
        .map_err(|e| format!("{e:?}"))?
        .with_lock_wait(Duration::from_secs(5));
    let mut report = InFlightReport::default();
    for &fraction in fractions {
        let started = start(&writer)?;
        let session = started.session.session_id.clone();
        // The reader knows the session as it was (as a second server that served it before).
        reader
            .sessions()
            .load(&session)
            .map_err(|e| format!("the reader cannot load the new session: {e}"))?;
        let pause = fs.pause_write_to(&layout::manifest_path(&session), fraction);
        let ack = ContinueWorkflowInput {
            state_token: Some(started.state_token.clone()),
            ack_token: started.ack_token.clone(),
            context: None,
            output: notes("gathered"),
            preferences: vec![],
            preset: None,
        };
        let outcome = std::thread::scope(|scope| {
            let advancing = scope.spawn(|| writer.continue_workflow(ack));
            if !pause.wait_until_parked(Duration::from_secs(10)) {
                drop(pause);
                return Err("the advance never reached its manifest write".to_owned());
            }
            let reading = scope.spawn(|| {
                let load = reader.sessions().load(&session).map(|l| l.health.clone());
                let rehydrate = reader.continue_workflow(ContinueWorkflowInput {
                    state_token: Some(started.state_token.clone()),
                    ack_token: None,
                    context: None,
                    output: None,
                    preferences: vec![],
                    preset: None,
                });
                (load, rehydrate)
            });
            // Let the reader meet the half-written manifest before the writer finishes.
            std::thread::sleep(Duration::from_millis(30));
            drop(pause);
            let advanced = advancing
                .join()
                .map_err(|_| "the advancing thread panicked".to_owned())?;
            let read = reading
                .join()
                .map_err(|_| "the reading thread panicked".to_owned())?;
            Ok((advanced, read))
        })?;
        let (advanced, (load, rehydrate)) = outcome;
        advanced.map_err(|e| format!("the parked advance failed: {e:?}"))?;
        report.reads += 1;
        match load {
            Ok(health) if health.is_healthy() => {}
            Ok(_) | Err(StoreError::Unhealthy { .. }) => report.false_corruption += 1,
            Err(StoreError::Locked { .. }) => report.locked += 1,
            Err(e) => return Err(format!("the mid-commit read failed: {e}")),
        }
        match rehydrate {
            Ok(_) => {}
            Err(e) if e.code == ErrorCode::SessionCorrupt => report.false_corruption += 1,
            Err(e)
                if matches!(
                    e.code,
                    ErrorCode::TokenSessionLocked | ErrorCode::SessionLocked
                ) =>
            {
                report.locked += 1;
            }
            Err(e) => return Err(format!("the mid-commit rehydrate failed: {e:?}")),
        }
        // Afterwards both stores agree the session is healthy.
        for store in [&writer, &reader] {
            let loaded = store
                .sessions()
                .load(&session)
                .map_err(|e| format!("after the commit: {e}"))?;
            if !loaded.health.is_healthy() {
                return Err(format!("after the commit: {:?}", loaded.health));
            }
        }
    }
    Ok(report)
}

/// What racing object writers saw.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RaceReport {
    pub puts: u32,
    /// Puts that failed (must be 0).
    pub failed_puts: u32,
    /// Objects that did not read back intact after a round (must be 0).
    pub damaged_objects: u32,
}

/// `threads` stores on the real directory `root` put the same fresh artifact at the same
/// instant, `rounds` times.
pub fn racing_object_writers(root: &Path, threads: usize, rounds: u32) -> RaceReport {
    let stores: Vec<ArtifactStore> = (0..threads)
        .map(|_| {
            // One filesystem handle per writer, as in separate processes.
            let fs: Arc<dyn StoreFs> = Arc::new(OsFs::new(root));
            ArtifactStore::new(fs)
        })
        .collect();
    let mut report = RaceReport::default();
    for round in 0..rounds {
        let value = serde_json::json!({"round": round, "pad": "x".repeat(4096)});
        let barrier = Barrier::new(threads);
        let results: Vec<bool> = std::thread::scope(|scope| {
            let handles: Vec<_> = stores
                .iter()
                .map(|store| {
                    let (barrier, value) = (&barrier, &value);
                    scope.spawn(move || {
                        barrier.wait();
                        value
                            .as_object()
                            .is_some_and(|object| store.put_object(object).is_ok())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(false))
                .collect()
        });
        report.puts += results.len() as u32;
        report.failed_puts += results.iter().filter(|ok| !**ok).count() as u32;
        let Ok(bytes) = workrail_spec::jcs::to_canonical_bytes(&value) else {
            report.damaged_objects += 1;
            continue;
        };
        let digest = workrail_spec::jcs::sha256(&bytes);
        if stores[0].get(&digest).ok().as_ref() != Some(&value) {
            report.damaged_objects += 1;
        }
    }
    report
}

/// Two stores ("processes") take turns on one session, each caching what it read: every answer
/// must reflect the other's commits. Process A starts and caches the session, B advances it,
/// then A must know B's node (rehydrate its stateToken), and A's own advance from there must
/// land after B's, with both processes agreeing on the log afterwards. A stale cached view
/// fails this on the first read.
pub fn alternating_processes_see_each_others_commits(
    seed: u64,
    rounds: usize,
) -> Result<(), String> {
    let fs = MemFs::new();
    let open = |salt: u64| {
        open_workrail_with(&fs, seed ^ salt, fixture::multi_catalog()).map_err(|e| format!("{e:?}"))
    };
    let (a, b) = (open(0xa)?, open(0xb)?);
    let mut out = start(&a)?;
    let session = out.session.session_id.clone();
    for round in 0..rounds {
        let (writer, other, name) = if round % 2 == 0 {
            (&b, &a, "B")
        } else {
            (&a, &b, "A")
        };
        // The other process reads (and caches) the session as it is now.
        other
            .sessions()
            .load(&session)
            .map_err(|e| format!("round {round}: load failed: {e}"))?;
        if out.is_complete {
            break;
        }
        out = writer
            .continue_workflow(ContinueWorkflowInput {
                state_token: Some(out.state_token.clone()),
                ack_token: out.ack_token.clone(),
                context: None,
                output: notes(&format!("round {round} by {name}")),
                preferences: vec![],
                preset: None,
            })
            .map_err(|e| format!("round {round}: {name}'s advance failed: {e:?}"))?;
        // The process that cached the older view must now answer from the newer one.
        let seen = other
            .continue_workflow(ContinueWorkflowInput {
                state_token: Some(out.state_token.clone()),
                ack_token: None,
                context: None,
                output: None,
                preferences: vec![],
                preset: None,
            })
            .map_err(|e| {
                format!(
                    "round {round}: the other process does not see {name}'s commit: {} {}",
                    e.code, e.message
                )
            })?;
        if seen.state_token != out.state_token {
            return Err(format!(
                "round {round}: the other process answers for another node than {name}'s commit"
            ));
        }
    }
    let events = |w: &Workrail| {
        w.sessions()
            .load(&session)
            .map(|l| l.event_count())
            .map_err(|e| e.to_string())
    };
    let (in_a, in_b) = (events(&a)?, events(&b)?);
    if in_a != in_b {
        return Err(format!(
            "the processes disagree on the log: {in_a} events in A, {in_b} in B"
        ));
    }
    Ok(())
}

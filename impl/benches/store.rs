//! Store benchmarks (prints figures; run with `cargo bench -p workrail --bench store`).
//!
//! - append throughput against the bare fsync/rename protocol floor measured in the same run
//!   (target: at least 0.8 of the floor);
//! - resident memory after loading every session of a data directory several times larger than
//!   the session cache's budget (the default `WORKRAIL_CACHE_MB` share), next to the cache's
//!   own size: memory stays near the budget whatever the data directory holds;
//! - cold load time at 1k / 10k / 100k events (should grow linearly);
//! - peak resident memory after loading 100k events.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use workrail::store::fs::{OsFs, StoreFs};
use workrail::store::{AppendPlan, SessionRead, SessionStore};
use workrail_spec::closed::OutputChannel;
use workrail_spec::event::*;
use workrail_spec::ids::*;

fn session() -> SessionId {
    SessionId::from_entropy(&[1; 10])
}

fn numbered_session(n: u32) -> SessionId {
    let mut entropy = [7u8; 10];
    entropy[..4].copy_from_slice(&n.to_le_bytes());
    SessionId::from_entropy(&entropy)
}

fn notes_event(n: u64) -> SessionEvent {
    notes_event_in(&session(), n)
}

fn notes_event_in(session: &SessionId, n: u64) -> SessionEvent {
    let mut id = [0u8; 10];
    id[..8].copy_from_slice(&n.to_le_bytes());
    let data = if n == 0 {
        EventData::SessionCreated(SessionCreated {})
    } else {
        EventData::node_output_appended(NodeOutputAppended {
            output_id: OutputId::from_entropy(&id),
            supersedes_output_id: None,
            output_channel: OutputChannel::Recap,
            payload: OutputPayload::notes(
                "Completed the step; next: verify the change and record the outcome.",
            ),
        })
    };
    let scope = if n == 0 {
        EventScope::Session
    } else {
        EventScope::Node(
            RunId::from_entropy(&[2; 10]),
            NodeId::from_entropy(&[3; 10]),
        )
    };
    SessionEvent::new(
        EventId::from_entropy(&id),
        EventIndex::ZERO,
        session.clone(),
        scope,
        data,
    )
    .unwrap()
}

/// The bare protocol: temp file + fsync + rename + fsync dir + manifest append + fsync, with
/// payloads of the same size, no validation or encoding.
fn floor(dir: &Path, rounds: u64, segment: &[u8], record: &[u8]) -> Duration {
    let events = dir.join("events");
    fs::create_dir_all(&events).unwrap();
    let manifest = dir.join("manifest.jsonl");
    let start = Instant::now();
    for i in 0..rounds {
        let tmp = events.join(format!(".tmp-{i}"));
        let mut f = File::create(&tmp).unwrap();
        f.write_all(segment).unwrap();
        f.sync_all().unwrap();
        fs::rename(&tmp, events.join(format!("{i}.jsonl"))).unwrap();
        File::open(&events).unwrap().sync_all().unwrap();
        let mut m = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&manifest)
            .unwrap();
        m.write_all(record).unwrap();
        m.sync_all().unwrap();
    }
    start.elapsed()
}

fn store_at(dir: &Path) -> SessionStore {
    let fs: Arc<dyn StoreFs> = Arc::new(OsFs::new(dir));
    SessionStore::new(fs)
}

fn bench_appends(rounds: u64) {
    let dir = tempfile::tempdir().unwrap();
    let store = store_at(dir.path());
    store
        .with_append_gate(&session(), workrail::store::SessionIntent::Create, |g| {
            g.append(AppendPlan {
                events: vec![notes_event(0)],
            })
        })
        .unwrap();
    let start = Instant::now();
    for n in 1..=rounds {
        store
            .with_append_gate(&session(), workrail::store::SessionIntent::Create, |g| {
                g.append(AppendPlan {
                    events: vec![notes_event(n)],
                })
            })
            .unwrap();
    }
    let ours = start.elapsed();
    let segment = workrail_spec::jcs::to_canonical_string(&notes_event(1)).unwrap() + "\n";
    let record = format!("{:>220}\n", "");
    let floor_dir = tempfile::tempdir().unwrap();
    let bare = floor(
        floor_dir.path(),
        rounds,
        segment.as_bytes(),
        record.as_bytes(),
    );
    let per_sec = |d: Duration| rounds as f64 / d.as_secs_f64();
    println!(
        "append: {:.0} appends/s; bare protocol floor: {:.0} ops/s; ratio {:.2} (target >= 0.80)",
        per_sec(ours),
        per_sec(bare),
        per_sec(ours) / per_sec(bare)
    );
}

fn build_session(dir: &Path, events: u64) {
    build_session_of(&store_at(dir), &session(), events);
}

fn build_session_of(store: &SessionStore, session: &SessionId, events: u64) {
    let mut next = 0;
    while next < events {
        let batch: Vec<_> = (next..(next + 500).min(events))
            .map(|n| notes_event_in(session, n))
            .collect();
        next += batch.len() as u64;
        store
            .with_append_gate(session, workrail::store::SessionIntent::Create, |g| {
                g.append(AppendPlan { events: batch })
            })
            .unwrap();
    }
}

fn dir_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => dir_bytes(&e.path()),
                    _ => e.metadata().map(|m| m.len()).unwrap_or(0),
                })
                .sum()
        })
        .unwrap_or(0)
}

/// Loads every session of a data directory larger than the session cache's budget, twice, through
/// one store with the default budget, and prints resident memory against the budget.
fn bench_cache_budget(sessions: u32, events_per_session: u64) {
    let dir = tempfile::tempdir().unwrap();
    {
        let builder = store_at(dir.path()).with_cache_budget(0);
        for n in 0..sessions {
            build_session_of(&builder, &numbered_session(n), events_per_session);
        }
    }
    let on_disk = dir_bytes(dir.path());
    let before = current_rss_kib().unwrap_or(0);
    let budget = workrail::store::CacheBudget::default().sessions;
    let store = store_at(dir.path()).with_cache_budget(budget);
    for _pass in 0..2 {
        for n in 0..sessions {
            let loaded = store.load(&numbered_session(n)).unwrap();
            assert_eq!(loaded.event_count() as u64, events_per_session);
        }
    }
    let cache = store.session_cache();
    let mib = |bytes: f64| bytes / (1024.0 * 1024.0);
    let after = current_rss_kib().unwrap_or(0);
    println!(
        "cache budget: {sessions} sessions ({:.0} MiB on disk) loaded twice; session cache {} entries, {:.1} of {:.0} MiB; resident memory grew {:.1} MiB (to {:.1} MiB)",
        mib(on_disk as f64),
        cache.len(),
        mib(cache.bytes() as f64),
        mib(budget as f64),
        (after.saturating_sub(before)) as f64 / 1024.0,
        after as f64 / 1024.0,
    );
    assert!(
        cache.bytes() <= budget,
        "the session cache exceeds its budget"
    );
}

fn bench_load() {
    let mut previous: Option<(u64, f64)> = None;
    for events in [1_000u64, 10_000, 100_000] {
        let dir = tempfile::tempdir().unwrap();
        build_session(dir.path(), events);
        // A fresh store: nothing cached.
        let store = store_at(dir.path());
        let start = Instant::now();
        let loaded = store.load(&session()).unwrap();
        let took = start.elapsed().as_secs_f64();
        assert_eq!(loaded.event_count() as u64, events);
        let per_event_us = took * 1e6 / events as f64;
        let growth = previous
            .map(|(n, t)| format!("; x{:.1} time for x{} events", took / t, events / n))
            .unwrap_or_default();
        println!(
            "load: {events} events in {:.1} ms ({per_event_us:.2} µs/event){growth}",
            took * 1e3
        );
        previous = Some((events, took));
    }
}

fn status_kib(field: &str) -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

fn peak_rss_kib() -> Option<u64> {
    status_kib("VmHWM:")
}

fn current_rss_kib() -> Option<u64> {
    status_kib("VmRSS:")
}

fn main() {
    let rounds = std::env::var("WORKRAIL_BENCH_APPENDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    bench_appends(rounds);
    // Before the 100k-event load, so that load's peak does not hide this figure.
    let sessions = std::env::var("WORKRAIL_BENCH_SESSIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    bench_cache_budget(sessions, 1_000);
    bench_load();
    match peak_rss_kib() {
        Some(kib) => println!(
            "peak resident memory after the 100k-event load: {:.1} MiB",
            kib as f64 / 1024.0
        ),
        None => println!("peak resident memory: not available on this platform"),
    }
}

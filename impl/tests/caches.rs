//! The bounded caches (`impl/docs/store.md` "Caches"): least recently used out first once the
//! byte budget is exceeded, a value read again after its eviction, and the same answers whatever
//! the budget.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use std::sync::Arc;

use protocol_support::*;
use workrail::store::memfs::MemFs;
use workrail::store::{CacheBudget, ObjectCache, SnapshotStore, layout};
use workrail_spec::tools::ExecutionOutput;

#[test]
fn the_least_recently_used_entries_leave_first_once_the_budget_is_exceeded() {
    let cache: ObjectCache<u32, String> = ObjectCache::new(100);
    cache.insert(1, Arc::new("one".into()), 40);
    cache.insert(2, Arc::new("two".into()), 40);
    assert!(cache.get(&1).is_some(), "1 is now the most recently used");
    cache.insert(3, Arc::new("three".into()), 40);
    assert!(cache.get(&2).is_none(), "2 was the least recently used");
    assert_eq!((cache.len(), cache.bytes()), (2, 80));
    // Replacing an entry replaces its size.
    cache.insert(1, Arc::new("uno".into()), 10);
    assert_eq!(cache.bytes(), 50);
    // A value larger than the whole budget is not kept (and drops an older copy).
    cache.insert(3, Arc::new("huge".into()), 101);
    assert!(cache.get(&3).is_none());
    assert_eq!(cache.bytes(), 10);
    // A zero budget keeps nothing.
    let none: ObjectCache<u32, String> = ObjectCache::new(0);
    none.insert(1, Arc::new("x".into()), 1);
    assert!(none.is_empty());
}

fn drive(wr: &workrail::protocol::Workrail) -> Vec<ExecutionOutput> {
    let mut outs = vec![start(wr, "project.demo")];
    let mut out = outs[0].clone();
    for i in 0..12 {
        if out.is_complete {
            break;
        }
        let artifacts = if pending(&out) == "decide" {
            vec![loop_control(if i < 6 { "continue" } else { "stop" })]
        } else {
            vec![]
        };
        out = wr
            .continue_workflow(ack(&out, &format!("step {i}"), artifacts))
            .unwrap();
        outs.push(out.clone());
        // A rehydrate of the first node reads old snapshots and the pinned workflow again.
        outs.push(
            wr.continue_workflow(rehydrate(&outs[0].state_token))
                .unwrap(),
        );
    }
    outs
}

/// Budgets change memory, never answers: with caches that hold nothing, every read goes to disk
/// and the same run gives the same responses byte for byte.
#[test]
fn answers_are_the_same_whatever_the_cache_budget() {
    let roomy_fs = MemFs::new();
    let roomy = open(&roomy_fs);
    let tiny_fs = MemFs::new();
    let tiny = open(&tiny_fs).with_cache_budget(CacheBudget::of_mib(0));
    let (a, b) = (drive(&roomy), drive(&tiny));
    assert_eq!(a, b);
    assert!(a.iter().any(|o| o.is_complete), "the run completes");
    let [sessions, snapshots, workflows] = tiny.cache_sizes();
    assert_eq!((sessions.0, snapshots.0, workflows.0), (0, 0, 0));
    let [sessions, snapshots, workflows] = roomy.cache_sizes();
    assert!(sessions.0 == 1 && snapshots.0 > 1 && workflows.0 == 1);
    assert!(sessions.1 <= sessions.2 && snapshots.1 <= snapshots.2 && workflows.1 <= workflows.2);
}

/// A put keeps the value it wrote, so the advance that wrote a snapshot never reads it back;
/// a new process reads and verifies it from disk. A deleted file is noticed by everyone.
#[test]
fn a_written_snapshot_is_served_without_reading_it_back() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let out = start(&wr, "project.demo");
    let session = out.session.session_id.clone();
    let loaded = wr.sessions().load(&session).unwrap();
    let snapshot_ref = loaded
        .events()
        .all()
        .unwrap()
        .iter()
        .find_map(|e| match e.data() {
            workrail_spec::event::EventData::NodeCreated(n) => Some(n.snapshot_ref.clone()),
            _ => None,
        })
        .unwrap();
    let shared: Arc<dyn workrail::store::fs::StoreFs> = Arc::new(fs.clone());
    let writer = SnapshotStore::new(Arc::clone(&shared));
    let written = writer.get(&snapshot_ref).unwrap();
    let again = writer.put(&written).unwrap();
    assert_eq!(again, snapshot_ref);
    // Damaged in place (same length): this process serves the value it verified without
    // reading the file again; a new process reads it and reports the damage.
    let path = layout::snapshot_path(&snapshot_ref);
    fs.corrupt(&path, |bytes| {
        let at = bytes.iter().position(|b| *b == b'"').unwrap();
        bytes[at] = b'#';
    });
    assert_eq!(writer.get(&snapshot_ref).unwrap(), written);
    let fresh = SnapshotStore::new(Arc::clone(&shared));
    assert!(matches!(
        fresh.get(&snapshot_ref),
        Err(workrail::store::StoreError::CorruptObject { .. })
    ));
    // Deleted: every process notices (the cached value is only served while its file is there,
    // one `stat` per read).
    use workrail::store::fs::StoreFs as _;
    fs.remove_file(&path).unwrap();
    assert!(matches!(
        writer.get(&snapshot_ref),
        Err(workrail::store::StoreError::MissingObject { .. })
    ));
}

fn open_seeded(fs: &MemFs, seed: u64) -> workrail::protocol::Workrail {
    let shared: Arc<dyn workrail::store::fs::StoreFs> = Arc::new(fs.clone());
    workrail::protocol::Workrail::with_parts(
        shared,
        catalog(),
        Arc::new(workrail::entropy::SeededEntropy::new(seed)),
    )
    .unwrap()
}

fn resume_text(wr: &workrail::protocol::Workrail, text: &str) -> Vec<String> {
    wr.resume_session(workrail_spec::tools::ResumeSessionInput {
        query: Some(workrail_spec::tools::ResumeQueryInput {
            text: Some(text.into()),
            git_head_sha: None,
            git_branch: None,
        }),
    })
    .unwrap()
    .candidates
    .iter()
    .filter(|c| c.why_matched[0].as_str() == "matched_notes")
    .map(|c| c.session_id.to_string())
    .collect()
}

/// `resume_session` keeps a summary per session while its manifest is unchanged: a commit by
/// another process is seen by the next call, and the answers are the same with no index at all.
#[test]
fn the_resume_index_sees_another_process_commits() {
    let fs = MemFs::new();
    let a = open_seeded(&fs, 1);
    let b = open_seeded(&fs, 2);
    let first = start(&a, "project.demo");
    let _other = start(&b, "project.demo");
    // A indexes both sessions; nothing mentions zebras yet.
    assert!(resume_text(&a, "zebras").is_empty());
    // B acknowledges A's session's step with notes about zebras.
    b.continue_workflow(ack(&first, "Counted the zebras.", vec![]))
        .unwrap();
    assert_eq!(
        resume_text(&a, "zebras"),
        vec![first.session.session_id.to_string()]
    );
    // The same answers without an index.
    let bare = open_seeded(&fs, 3).with_cache_budget(CacheBudget::of_mib(0));
    assert_eq!(resume_text(&bare, "zebras"), resume_text(&a, "zebras"));
}

/// A long-running reader (the Console) keeps each session's overview row while the session's
/// manifest keeps the length the row was made at: its rows follow another process's commits and
/// always equal what a process with no cache sees.
#[test]
fn session_rows_follow_another_process_commits() {
    let fs = MemFs::new();
    let writer = open(&fs);
    let reader = open(&fs);
    let mut out = start(&writer, "project.demo");
    let mut nodes_seen = Vec::new();
    for i in 0..6 {
        let rows = reader.sessions_overview().unwrap();
        let again = reader.sessions_overview().unwrap();
        let uncached = open(&fs)
            .with_cache_budget(CacheBudget::of_mib(0))
            .sessions_overview()
            .unwrap();
        let show = |r: &[workrail::protocol::SessionOverview]| serde_json::to_string(r).unwrap();
        assert_eq!(show(&rows), show(&uncached), "after {i} acks");
        assert_eq!(show(&rows), show(&again), "a second read changes nothing");
        nodes_seen.push(rows[0].runs[0].nodes);
        let artifacts = if pending(&out) == "decide" {
            vec![loop_control("continue")]
        } else {
            vec![]
        };
        out = writer
            .continue_workflow(ack(&out, &format!("step {i}"), artifacts))
            .unwrap();
    }
    assert_eq!(nodes_seen, vec![1, 2, 3, 4, 5, 6], "each commit is seen");
}

/// D94: the session in use stays cached even when it alone is over the sessions' budget, so a
/// long session is not reloaded from disk on every call; the next session evicts it, and the
/// answers are those of a roomy cache.
#[test]
fn the_session_in_use_stays_cached_when_it_alone_is_over_the_budget() {
    let fs = MemFs::new();
    let cramped = open(&fs).with_cache_budget(CacheBudget {
        sessions: 1024,
        ..CacheBudget::default()
    });
    let roomy_fs = MemFs::new();
    let roomy = open(&roomy_fs);
    assert_eq!(drive(&cramped), drive(&roomy));
    let [sessions, ..] = cramped.cache_sizes();
    assert_eq!(sessions.0, 1, "the session in use is kept");
    assert!(sessions.1 > sessions.2, "and it alone is over the budget");

    // Calls on it read no segment and no manifest line again: only `stat`s of the manifest.
    let out = start(&cramped, "project.demo");
    let next = cramped
        .continue_workflow(ack(&out, "first", vec![]))
        .unwrap();
    let segment_reads = || {
        fs.reads()
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
            .count()
    };
    let before = segment_reads();
    for _ in 0..5 {
        cramped
            .continue_workflow(rehydrate(&next.state_token))
            .unwrap();
    }
    assert_eq!(segment_reads(), before, "rehydrates reloaded the session");

    // Another session takes its place: the cache holds one over-budget session at most.
    let [sessions, ..] = cramped.cache_sizes();
    assert_eq!(sessions.0, 1);
}

/// D205: the projections a process keeps between calls are bounded by their share of the
/// budget: with room for one, driving a second session pushes the first out, the session in use
/// stays even when it alone is over the budget, and the answers are those of a roomy memo.
#[test]
fn kept_projections_stay_within_their_budget_and_the_one_in_use_stays() {
    let cramped_fs = MemFs::new();
    let cramped = open_seeded(&cramped_fs, 11).with_cache_budget(CacheBudget {
        projections: workrail::protocol::facts::projection_bytes(40),
        ..CacheBudget::default()
    });
    let roomy_fs = MemFs::new();
    let roomy = open_seeded(&roomy_fs, 11);
    let first = (drive(&cramped), drive(&roomy));
    assert_eq!(first.0, first.1, "the same answers whatever the budget");
    let (kept, bytes) = cramped.projections_held();
    assert_eq!(kept, 1, "the session in use is kept");
    assert!(
        bytes > workrail::protocol::facts::projection_bytes(40),
        "and it alone is over the budget ({bytes} bytes)"
    );
    let second = (drive(&cramped), drive(&roomy));
    assert_eq!(second.0, second.1);
    assert_eq!(
        cramped.projections_held().0,
        1,
        "the second session pushed the first out"
    );
    assert_eq!(roomy.projections_held().0, 2, "a roomy memo keeps both");
    let (_, roomy_bytes) = roomy.projections_held();
    assert!(
        roomy_bytes <= CacheBudget::default().projections,
        "{roomy_bytes} bytes within the default share"
    );
}

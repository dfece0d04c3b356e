//! The persisted `resume_session` index (`cache/resume-index.v1.jsonl`, decision D64): a fresh
//! process answers from the summaries an earlier process wrote, loading only sessions whose
//! manifest changed and the candidates it returns.
//!
//! Guards against: an answer that differs from the answer without any index (over several
//! stores, in the writing process and in fresh processes); a commit, a new session or a deletion
//! by another process that the index hides; a session damaged after it was indexed being offered;
//! a torn, truncated, other-version or tampered file changing an answer or failing the call; a
//! failed write of the index failing the call or leaving a torn file; an index written when
//! nothing changed, or while the data directory holds a damaged session (safe mode).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;
use crate::resume_support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use protocol_support::{ack, catalog, rehydrate, start};
use resume_support::{id, input, re_sealed, resume, session};
use serde_json::{Value, json};
use workrail::entropy::SeededEntropy;
use workrail::protocol::Workrail;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail::store::{CacheBudget, layout};
use workrail::workspace::{FixedWorkspace, GitIdentity};
use workrail_spec::ids::SessionId;
use workrail_spec::tools::ResumeSessionOutput;

const SHA_A: &str = "4f3c2a1b0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a";
const SHA_B: &str = "0123456789abcdef0123456789abcdef01234567";

fn index_path() -> &'static Path {
    Path::new(layout::RESUME_INDEX_FILE)
}

/// A process with its own entropy stream, observing `identity` when runs start.
fn process(fs: &MemFs, seed: u64, identity: Option<GitIdentity>) -> Workrail {
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    Workrail::with_parts(shared, catalog(), Arc::new(SeededEntropy::new(seed)))
        .unwrap()
        .with_workspace(Arc::new(FixedWorkspace(identity)))
}

fn identity(root: &str, branch: &str, sha: &str) -> GitIdentity {
    GitIdentity {
        repo_root: PathBuf::from(root),
        branch: Some(branch.to_owned()),
        head_sha: Some(sha.to_owned()),
    }
}

fn queries() -> Vec<Value> {
    vec![
        json!({}),
        json!({"text": "zebracorn"}),
        json!({"text": "zebracorn billing"}),
        json!({"text": "demo"}),
        json!({"text": "nothing-matches-this"}),
        json!({"gitBranch": "feature"}),
        json!({"gitHeadSha": SHA_B}),
        json!({"gitHeadSha": SHA_A, "text": "login"}),
    ]
}

/// The answer with no index at all: no file, and a process that keeps nothing in memory (the
/// file it writes is removed again).
fn bare(fs: &MemFs, query: &Value) -> ResumeSessionOutput {
    fs.remove_file(index_path()).unwrap();
    let wr = process(fs, 900, None).with_cache_budget(CacheBudget::of_mib(0));
    let out = resume(&wr, query);
    fs.remove_file(index_path()).unwrap();
    out
}

/// The sessions whose manifest a process read (each full load of a session reads it).
fn manifests_read(fs: &MemFs, from: usize) -> BTreeSet<PathBuf> {
    fs.reads()[from..]
        .iter()
        .filter(|p| p.ends_with("manifest.jsonl"))
        .cloned()
        .collect()
}

/// Store 1: three sessions in two repositories and outside any.
fn store_three(fs: &MemFs) {
    session(
        &process(fs, 11, Some(identity("/repo/a", "feature/auth", SHA_A))),
        &["Investigated the zebracorn billing bug in the demo."],
    );
    session(
        &process(fs, 12, Some(identity("/repo/b", "main", SHA_B))),
        &["Refactored the login form."],
    );
    session(&process(fs, 13, None), &["Zebracorn sighting only."]);
}

/// Store 2: twelve sessions (more than a response holds), some matching, one forked.
fn store_many(fs: &MemFs) {
    for i in 0..12u64 {
        let note = if i % 3 == 0 {
            format!("Zebracorn billing ticket {i}.")
        } else {
            format!("Unrelated work item {i}.")
        };
        let wr = process(fs, 20 + i, None);
        let first = session(&wr, &[]);
        let second = wr.continue_workflow(ack(&first, &note, vec![])).unwrap();
        if i == 4 {
            // A fork from the root: the new branch is the tip.
            let again = wr.continue_workflow(rehydrate(&first.state_token)).unwrap();
            wr.continue_workflow(ack(&again, "Zebracorn fork of the login work.", vec![]))
                .unwrap();
        }
        let _ = second;
    }
}

/// Store 3: sessions with several runs in one session directory are not possible through the
/// tools; instead, two runs per repository identity and one completed-looking long session.
fn store_long(fs: &MemFs) {
    let wr = process(fs, 40, Some(identity("/repo/a", "feature/x", SHA_A)));
    session(
        &wr,
        &["Zebracorn step one.", "Step two about billing.", "Three."],
    );
    session(&process(fs, 41, None), &["Login zebracorn."]);
}

/// lock: L-CACHE-DERIVED, L-RESUME-TIP-ONLY, L-RESUME-TIERS, L-RESUME-TIE-ORDER
#[test]
fn answers_with_the_persisted_index_equal_answers_without_it() {
    for (name, fill) in [
        ("three", store_three as fn(&MemFs)),
        ("many", store_many),
        ("long", store_long),
    ] {
        let fs = MemFs::new();
        fill(&fs);
        let expected: Vec<ResumeSessionOutput> = queries().iter().map(|q| bare(&fs, q)).collect();
        assert!(fs.read(index_path()).unwrap().is_none());
        // The process that writes the index answers the same, call after call.
        let writer = process(&fs, 50, None);
        for (q, want) in queries().iter().zip(&expected) {
            assert_eq!(&resume(&writer, q), want, "{name}: writer, {q}");
        }
        assert!(
            fs.read(index_path()).unwrap().is_some(),
            "{name}: the index was written"
        );
        // Fresh processes read it: the same answers, loading at most the returned sessions.
        for (q, want) in queries().iter().zip(&expected) {
            let reads = fs.reads().len();
            let fresh = process(&fs, 51, None);
            let out = resume(&fresh, q);
            assert_eq!(&out, want, "{name}: fresh process, {q}");
            let loaded = manifests_read(&fs, reads);
            let returned: BTreeSet<PathBuf> = out
                .candidates
                .iter()
                .map(|c| layout::manifest_path(&c.session_id))
                .collect();
            assert!(
                loaded.is_subset(&returned),
                "{name}: {q}: a fresh process loaded {loaded:?}, returning only {returned:?}"
            );
            // And it did not write the unchanged index again.
        }
        let before = fs.snapshot();
        resume(&process(&fs, 52, None), &json!({}));
        assert_eq!(
            fs.snapshot(),
            before,
            "{name}: an unchanged index was rewritten"
        );
    }
}

/// lock: L-CACHE-NO-CORRECTNESS, L-RESUME-TIP-ONLY
#[test]
fn commits_and_new_sessions_of_another_process_after_the_index_was_written_are_seen() {
    let fs = MemFs::new();
    store_three(&fs);
    let target = session(&process(&fs, 60, None), &["Nothing about animals yet."]);
    resume(&process(&fs, 61, None), &json!({}));
    let written = fs.read(index_path()).unwrap().unwrap();
    // Another process acknowledges a step with new notes, and starts a new session.
    let other = process(&fs, 62, None);
    other
        .continue_workflow(ack(&target, "Counted the okapis.", vec![]))
        .unwrap();
    let newer = session(&other, &["Okapi census, part two."]);
    assert_eq!(fs.read(index_path()).unwrap().unwrap(), written);
    // A fresh process with the (now stale) index present sees both.
    let out = resume(&process(&fs, 63, None), &json!({"text": "okapis"}));
    assert_eq!(out.candidates[0].session_id, id(&target));
    assert_eq!(out.candidates[0].snippet, "Counted the okapis.");
    let out = resume(&process(&fs, 64, None), &json!({"text": "okapi"}));
    assert_eq!(out.candidates[0].session_id, id(&newer));
    for q in queries()
        .into_iter()
        .chain([json!({"text": "okapis"}), json!({"text": "okapi census"})])
    {
        let with_index = resume(&process(&fs, 65, None), &q);
        assert_eq!(with_index, bare(&fs, &q), "{q}");
        // `bare` removed the file: put the stale one back for the next query.
        fs.write_new(index_path(), &written).unwrap();
    }
}

/// Corrupts the last committed segment of `session` (a byte flip keeps every length).
fn corrupt_last_segment(fs: &MemFs, session: &SessionId) {
    let dir = layout::events_dir(session);
    let last = fs
        .list_dir(&dir)
        .unwrap()
        .into_iter()
        .rfind(|n| !n.starts_with('.'))
        .unwrap();
    fs.corrupt(&dir.join(last), |bytes| {
        let i = bytes.len() / 2;
        bytes[i] ^= 0x01;
    });
}

/// A session damaged in place after it was indexed (its manifest keeps its length, so its entry
/// still matches) is validated before it could be returned: skipped, counted and named, and the
/// damaged data directory is left as it was (no index write in safe mode).
/// lock: L-RESUME-HEALTHY-ONLY, L-CACHE-NO-CORRECTNESS
#[test]
fn a_session_damaged_after_it_was_indexed_is_never_returned() {
    let fs = MemFs::new();
    let good = id(&session(&process(&fs, 70, None), &["zebracorn one"]));
    let bad = id(&session(&process(&fs, 71, None), &["zebracorn two"]));
    resume(&process(&fs, 72, None), &json!({}));
    let indexed = fs.read(index_path()).unwrap().unwrap();
    corrupt_last_segment(&fs, &bad);
    for q in [
        json!({"text": "zebracorn"}),
        json!({"text": "two"}),
        json!({}),
    ] {
        let before = fs.snapshot();
        let out = resume(&process(&fs, 73, None), &q);
        assert_eq!(fs.snapshot(), before, "written in safe mode: {q}");
        assert!(out.candidates.iter().all(|c| c.session_id != bad), "{q}");
        assert_eq!(out.skipped_unhealthy_sessions, 1, "{q}");
        assert_eq!(out.skipped_sessions[0].session_id, bad);
        assert_eq!(out.skipped_sessions[0].health, "corrupt_tail");
        if q["text"] != "two" {
            assert_eq!(out.candidates[0].session_id, good, "{q}");
        }
        assert_eq!(out, bare(&fs, &q), "{q}");
        fs.write_new(index_path(), &indexed).unwrap();
    }
    // The same in a process that had the damaged session in memory from the index already.
    let warm = process(&fs, 74, None);
    let out = resume(&warm, &json!({"text": "nothing-matches-this"}));
    assert_eq!(out.skipped_unhealthy_sessions, 1);
    assert!(out.candidates.iter().all(|c| c.session_id != bad));
}

/// lock: L-CACHE-DERIVED, L-RESUME-TIP-ONLY
#[test]
fn a_deleted_session_disappears_from_answers_and_from_the_index() {
    let fs = MemFs::new();
    store_many(&fs);
    let writer = process(&fs, 80, None);
    let first = resume(&writer, &json!({"text": "zebracorn"}));
    let gone = first.candidates[0].session_id.clone();
    fs.remove_dir_all(&layout::session_dir(&gone)).unwrap();
    for wr in [&writer, &process(&fs, 81, None)] {
        let out = resume(wr, &json!({"text": "zebracorn"}));
        assert!(out.candidates.iter().all(|c| c.session_id != gone));
        assert_eq!(out.skipped_unhealthy_sessions, 0);
    }
    let text = String::from_utf8(fs.read(index_path()).unwrap().unwrap()).unwrap();
    assert!(
        !text.contains(gone.as_str()),
        "the index still holds {gone}"
    );
    for q in queries() {
        let index = fs.read(index_path()).unwrap().unwrap();
        assert_eq!(resume(&process(&fs, 82, None), &q), bare(&fs, &q), "{q}");
        fs.write_new(index_path(), &index).unwrap();
    }
}

/// Every way the file can be damaged or foreign is discarded (the answer is the one without an
/// index) and replaced by a good index; a well-formed entry that lies about its session never
/// reaches a response (the candidates are validated and the ranking redone).
/// lock: L-CACHE-DISCARD, L-CACHE-NO-CORRECTNESS
#[test]
fn a_damaged_truncated_or_foreign_index_is_discarded_and_rebuilt() {
    let fs = MemFs::new();
    store_many(&fs);
    resume(&process(&fs, 90, None), &json!({}));
    let good = fs.read(index_path()).unwrap().unwrap();
    let split = good.iter().position(|b| *b == b'\n').unwrap();
    let mut flipped = good.clone();
    flipped[split + good.len() / 3] ^= 0x20;
    let other_version = {
        let text = String::from_utf8(good.clone()).unwrap();
        text.replacen("\"v\":1", "\"v\":2", 1).into_bytes()
    };
    let mut damaged: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("header only", good[..=split].to_vec()),
        ("cut in the header", good[..split / 2].to_vec()),
        ("cut in half", good[..good.len() / 2].to_vec()),
        ("last byte missing", good[..good.len() - 1].to_vec()),
        ("two bytes missing", good[..good.len() - 2].to_vec()),
        ("a flipped byte", flipped),
        ("another version", other_version),
        ("not JSON", b"\x00\xffgarbage\n\n".to_vec()),
        ("an extra line", [good.as_slice(), b"{}\n"].concat()),
        (
            "a session line that is an object",
            re_sealed(&good, |e| e["sessions"][0] = json!({"sessionId": 1})),
        ),
        (
            "a row with an extra column",
            re_sealed(&good, |e| {
                e["sessions"][0].as_array_mut().unwrap().push(json!(1));
            }),
        ),
        (
            "a tip naming no workflow",
            re_sealed(&good, |e| e["sessions"][0][4][0][2] = json!(99)),
        ),
        (
            "a wrong entry count",
            String::from_utf8(good.clone())
                .unwrap()
                .replacen("\"sessions\":12,", "\"sessions\":11,", 1)
                .into_bytes(),
        ),
    ];
    // Well-formed lies that keep the digest right (only a deliberate edit makes those), each
    // keyed by the right manifest length and each promoting sessions: those are validated
    // before they are returned, so the lie never shows. (A re-sealed entry that demotes its
    // session could hide it; the digest is what guards against accidental damage.)
    damaged.push((
        "an entry claiming the latest activity",
        re_sealed(&good, |e| {
            let sessions = e["sessions"].as_array_mut().unwrap();
            for row in sessions.iter_mut().step_by(4) {
                row[4][0][3] = json!(1_000_000);
            }
        }),
    ));
    damaged.push((
        "an entry with invented notes",
        re_sealed(&good, |e| {
            for row in e["sessions"].as_array_mut().unwrap() {
                let tip = &mut row[4][0];
                let notes = tip[5].as_str().unwrap_or_default().to_owned();
                tip[5] = json!(format!("{notes} zebracorn billing login invented"));
                tip[4] = json!("Invented words.");
            }
        }),
    ));
    damaged.push((
        "entries of unknown sessions and a missing one",
        re_sealed(&good, |e| {
            let sessions = e["sessions"].as_array_mut().unwrap();
            sessions.pop();
            let mut extra = sessions[0].clone();
            extra[0] = json!("sess_aaaaaaaaaaaaaaaa");
            sessions.push(extra);
        }),
    ));
    let expected: Vec<ResumeSessionOutput> = queries().iter().map(|q| bare(&fs, q)).collect();
    for (what, bytes) in &damaged {
        for (q, want) in queries().iter().zip(&expected) {
            fs.write_new(index_path(), bytes).unwrap();
            let out = resume(&process(&fs, 91, None), q);
            assert_eq!(&out, want, "{what}: {q}");
            assert!(
                out.candidates
                    .iter()
                    .all(|c| c.snippet != "Invented words."),
                "{what}"
            );
        }
        // Rebuilt: after one more call (a distrusted file is replaced by the summaries that
        // process validated, the next call adds the rest), a fresh process finds a good index.
        resume(&process(&fs, 92, None), &json!({}));
        let rebuilt = fs.read(index_path()).unwrap().unwrap();
        let reads = fs.reads().len();
        assert_eq!(resume(&process(&fs, 93, None), &json!({})), expected[0]);
        assert!(
            manifests_read(&fs, reads).len() <= 5,
            "{what}: the index was not rebuilt: {:?}",
            manifests_read(&fs, reads)
        );
        assert_eq!(fs.read(index_path()).unwrap().unwrap(), rebuilt, "{what}");
    }
}

/// lock: L-CACHE-DERIVED, L-RESUME-TIP-ONLY
#[test]
fn a_failed_index_write_never_fails_the_call_nor_leaves_a_torn_file() {
    const ENOSPC: i32 = 28;
    let fs = MemFs::new();
    store_three(&fs);
    let expected: Vec<ResumeSessionOutput> = queries().iter().map(|q| bare(&fs, q)).collect();
    // Each mutating operation of the write fails in turn (ENOSPC with half the bytes landed,
    // or EIO), with no index and with an older one present.
    let older = {
        resume(&process(&fs, 100, None), &json!({}));
        let bytes = fs.read(index_path()).unwrap().unwrap();
        fs.remove_file(index_path()).unwrap();
        bytes
    };
    session(
        &process(&fs, 101, None),
        &["A zebracorn after the older index."],
    );
    let expected_now: Vec<ResumeSessionOutput> = queries().iter().map(|q| bare(&fs, q)).collect();
    assert_ne!(expected, expected_now);
    for present in [None, Some(&older)] {
        for op in 1..=4 {
            for (errno, landed) in [(ENOSPC, 500), (5, 0)] {
                match present {
                    Some(bytes) => fs.write_new(index_path(), bytes).unwrap(),
                    None => fs.remove_file(index_path()).unwrap(),
                }
                fs.fail_at_with(op, errno, landed);
                for (q, want) in queries().iter().zip(&expected_now) {
                    let out = process(&fs, 102, None).resume_session(input(q));
                    assert_eq!(out.as_ref().ok(), Some(want), "op {op}, errno {errno}, {q}");
                }
                // Whatever is there now is whole: the old index, none, or a new one.
                let now = fs.read(index_path()).unwrap();
                assert!(
                    now.is_none() || now.as_ref() == present || {
                        let reads = fs.reads().len();
                        resume(&process(&fs, 103, None), &json!({}));
                        manifests_read(&fs, reads).len() <= 5
                    },
                    "op {op}: a torn index"
                );
                let leftovers: Vec<String> = fs
                    .list_dir(Path::new(layout::DATA_CACHE_DIR))
                    .unwrap()
                    .into_iter()
                    .filter(|n| layout::is_temp_file_name(n))
                    .collect();
                assert!(leftovers.is_empty(), "op {op}: {leftovers:?}");
                // A failure planned past the last write of these calls is called off.
                fs.fail_at_with(1 << 40, 5, 0);
            }
        }
    }
}

/// On the real filesystem: a data directory where the index cannot be written (its `cache`
/// is a file) still answers, the same as with no index.
/// lock: L-CACHE-DERIVED
#[test]
fn an_unwritable_cache_directory_never_fails_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let os: Arc<dyn StoreFs> = Arc::new(workrail::store::fs::OsFs::new(dir.path()));
    let open = |seed: u64| {
        Workrail::with_parts(
            Arc::clone(&os),
            catalog(),
            Arc::new(SeededEntropy::new(seed)),
        )
        .unwrap()
    };
    let first = session(&open(1), &["Zebracorn on a real disk."]);
    std::fs::write(dir.path().join(layout::DATA_CACHE_DIR), b"not a directory").unwrap();
    for seed in [2, 3] {
        let out = resume(&open(seed), &json!({"text": "zebracorn"}));
        assert_eq!(out.candidates.len(), 1);
        assert_eq!(out.candidates[0].session_id, id(&first));
    }
    std::fs::remove_file(dir.path().join(layout::DATA_CACHE_DIR)).unwrap();
    resume(&open(4), &json!({}));
    assert!(dir.path().join(layout::RESUME_INDEX_FILE).is_file());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir.path().join(layout::DATA_CACHE_DIR)), 0o700);
        assert_eq!(mode(&dir.path().join(layout::RESUME_INDEX_FILE)), 0o600);
    }
}

/// Over enough sessions that the manifests are checked and the file is parsed on two threads
/// each: the same answers, and a fresh process loads only what it returns.
/// lock: L-CACHE-DERIVED, L-RESUME-TIE-ORDER
#[test]
fn a_large_index_read_in_halves_gives_the_same_answers() {
    let fs = MemFs::new();
    let wr = process(&fs, 110, None);
    for i in 0..600 {
        let out = start(&wr, "project.demo");
        if i % 50 == 0 {
            wr.continue_workflow(ack(&out, &format!("Zebracorn batch {i}."), vec![]))
                .unwrap();
        }
    }
    let queries = [
        json!({}),
        json!({"text": "zebracorn"}),
        json!({"text": "batch 350"}),
    ];
    let expected: Vec<ResumeSessionOutput> = queries.iter().map(|q| bare(&fs, q)).collect();
    resume(&process(&fs, 111, None), &json!({}));
    for (q, want) in queries.iter().zip(&expected) {
        let reads = fs.reads().len();
        assert_eq!(&resume(&process(&fs, 112, None), q), want, "{q}");
        assert!(manifests_read(&fs, reads).len() <= 5, "{q}");
    }
}

/// How many times the process read the persisted index since `from`.
fn index_reads(fs: &MemFs, from: usize) -> usize {
    fs.reads()[from..]
        .iter()
        .filter(|p| p.as_path() == index_path())
        .count()
}

/// A damaged session the index does not cover is never in a process's summaries, and the index
/// is not written while it is damaged (safe mode), so it once made every call of a warm process
/// read and parse the whole index again (2.7 MB at 10,000 sessions). The sessions a call left
/// out count as covered for the next call while the listing is unchanged and the process still
/// holds its summaries; a session another process adds makes the next call read the index
/// again, and is found.
/// lock: L-CACHE-DERIVED, L-RESUME-HEALTHY-ONLY
#[test]
fn a_warm_process_reads_the_index_again_only_when_sessions_appear() {
    let fs = MemFs::new();
    let good = id(&session(&process(&fs, 80, None), &["zebracorn one"]));
    resume(&process(&fs, 82, None), &json!({}));
    // Made after the index was written, then damaged: the index has no entry for it.
    let bad = id(&session(&process(&fs, 81, None), &["zebracorn two"]));
    corrupt_last_segment(&fs, &bad);
    let warm = process(&fs, 83, None);
    let from = fs.reads().len();
    let first = resume(&warm, &json!({"text": "zebracorn"}));
    assert_eq!(
        index_reads(&fs, from),
        1,
        "a fresh process reads the index once"
    );
    let from = fs.reads().len();
    let again = resume(&warm, &json!({"text": "zebracorn"}));
    assert_eq!(again, first);
    assert_eq!(again.skipped_unhealthy_sessions, 1);
    assert_eq!(again.skipped_sessions[0].session_id, bad);
    assert_eq!(again.candidates[0].session_id, good);
    assert_eq!(
        index_reads(&fs, from),
        0,
        "the second call of a warm process read the index again"
    );
    // Another process adds a session: the next call reads the index again and finds it.
    let added = id(&session(&process(&fs, 84, None), &["zebracorn three"]));
    let from = fs.reads().len();
    let out = resume(&warm, &json!({"text": "zebracorn"}));
    assert_eq!(index_reads(&fs, from), 1);
    assert!(out.candidates.iter().any(|c| c.session_id == added));
    assert_eq!(out.skipped_unhealthy_sessions, 1);
    assert!(out.candidates.iter().all(|c| c.session_id != bad));
    // A process that keeps no summary (a cache budget of 0) reads the index every call, as
    // loading every session instead would cost far more.
    let uncached = process(&fs, 85, None).with_cache_budget(CacheBudget::of_mib(0));
    resume(&uncached, &json!({}));
    let from = fs.reads().len();
    resume(&uncached, &json!({}));
    assert_eq!(index_reads(&fs, from), 1);
}

//! The persisted `resume_session` index on PostgreSQL (decision D115): the row
//! `resume-index.v1` of the table `derived`, the same bytes the file store keeps in
//! `cache/resume-index.v1.jsonl`, shared by every process on the schema. A fresh process answers
//! the first call from it, loading only sessions whose manifest rows changed since it was
//! written and the candidates it returns.
//!
//! Guards against: the first call of a fresh server loading every session (about 3 ms each,
//! 30 s at 10,000: what D101 left on PostgreSQL); an answer that differs from the answer without
//! any index; an append or a new session after the index was written hidden by a stale entry;
//! a damaged, truncated or other-version row changing an answer, failing the call or staying in
//! place; an entry that lies about its session reaching a response; a session damaged after it
//! was indexed being offered; a machine that cannot use what another machine wrote; the notes
//! of a session GC deleted staying in the index, or its entry being offered.
//!
//! Whether a process loaded a session is observed through the backend's session cache: every
//! load on PostgreSQL keeps the healthy view it read (D104), and nothing else fills it.
//!
//! Needs `WORKRAIL_TEST_POSTGRES=postgres://…` (`source .ci/postgres.sh`); without it the tests
//! say why and pass, except under `CI`, where they fail. Each test uses a schema of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::postgres_support;
use crate::protocol_support;
use crate::resume_support;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

use postgres_support::{Schema, postgres_url};
use protocol_support::{ack, catalog};
use resume_support::{id, re_sealed, resume, session};
use serde_json::{Value, json};
use workrail::bundle::NoProgress;
use workrail::entropy::SeededEntropy;
use workrail::gc::{GcOptions, OsRetentionClock};
use workrail::protocol::Workrail;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail::store::postgres::RESUME_INDEX_ROW;
use workrail::store::{CacheBudget, Store, layout};
use workrail_spec::ids::SessionId;
use workrail_spec::tools::ResumeSessionOutput;

/// A process on the schema with its own entropy stream and data directory.
fn process_in(schema: &Schema, fs: &MemFs, seed: u64) -> Workrail {
    let data: Arc<dyn StoreFs> = Arc::new(fs.clone());
    Workrail::with_store(
        data,
        Store::postgres(schema.backend()),
        catalog(),
        Arc::new(SeededEntropy::new(seed)),
    )
    .unwrap()
}

/// A process on the schema with a data directory of its own.
fn process(schema: &Schema, seed: u64) -> Workrail {
    process_in(schema, &MemFs::new(), seed)
}

fn queries() -> Vec<Value> {
    vec![
        json!({}),
        json!({"text": "zebracorn"}),
        json!({"text": "zebracorn billing"}),
        json!({"text": "demo"}),
        json!({"text": "nothing-matches-this"}),
        json!({"text": "ticket 9"}),
    ]
}

/// Twelve sessions (more than a response holds), a third of them matching "zebracorn".
fn store_many(schema: &Schema) -> Vec<SessionId> {
    (0..12u64)
        .map(|i| {
            let note = if i % 3 == 0 {
                format!("Zebracorn billing ticket {i}.")
            } else {
                format!("Unrelated work item {i}.")
            };
            id(&session(&process(schema, 20 + i), &[&note]))
        })
        .collect()
}

impl Schema {
    /// The index row's bytes, if there is one.
    fn index_row(&self) -> Option<Vec<u8>> {
        let sql = format!("SELECT bytes FROM {}.derived WHERE name = $1", self.name);
        self.with_client(async |c| {
            c.query_opt(&sql, &[&RESUME_INDEX_ROW])
                .await
                .unwrap()
                .map(|r| r.get(0))
        })
    }

    /// Plants `bytes` as the index row (or removes it).
    fn set_index_row(&self, bytes: Option<&[u8]>) {
        let delete = format!("DELETE FROM {}.derived WHERE name = $1", self.name);
        let insert = format!(
            "INSERT INTO {}.derived (name, bytes) VALUES ($1, $2)",
            self.name
        );
        self.with_client(async |c| {
            c.execute(&delete, &[&RESUME_INDEX_ROW]).await.unwrap();
            if let Some(bytes) = bytes {
                c.execute(&insert, &[&RESUME_INDEX_ROW, &bytes])
                    .await
                    .unwrap();
            }
        });
    }
}

/// The answer with no index at all: no row, and a process that keeps nothing in memory (the
/// row it writes is removed again).
fn bare(schema: &Schema, query: &Value) -> ResumeSessionOutput {
    schema.set_index_row(None);
    let wr = process(schema, 900).with_cache_budget(CacheBudget::of_mib(0));
    let out = resume(&wr, query);
    schema.set_index_row(None);
    out
}

/// The sessions of `ids` that `wr` loaded (each load keeps the healthy view it read).
fn loaded(wr: &Workrail, ids: &[SessionId]) -> BTreeSet<SessionId> {
    let cache = wr
        .store()
        .postgres_stores()
        .unwrap()
        .backend()
        .session_cache();
    ids.iter()
        .filter(|id| cache.get(id).is_some())
        .cloned()
        .collect()
}

fn returned(out: &ResumeSessionOutput) -> BTreeSet<SessionId> {
    out.candidates
        .iter()
        .map(|c| c.session_id.clone())
        .collect()
}

/// The answers to [`queries`] with no index, the index row left as it was.
fn expected(schema: &Schema) -> Vec<ResumeSessionOutput> {
    let row = schema.index_row();
    let out = queries().iter().map(|q| bare(schema, q)).collect();
    schema.set_index_row(row.as_deref());
    out
}

/// A fresh process answers each of [`queries`] as `expected` says, loading at most the
/// sessions it returns.
fn assert_answers_from_the_index(
    schema: &Schema,
    ids: &[SessionId],
    expected: &[ResumeSessionOutput],
    what: &str,
) {
    for (q, want) in queries().iter().zip(expected) {
        let fresh = process(schema, 51);
        let out = resume(&fresh, q);
        assert_eq!(&out, want, "{what}: {q}");
        let loaded = loaded(&fresh, ids);
        assert!(
            loaded.is_subset(&returned(&out)),
            "{what}: {q}: a fresh process loaded {loaded:?}, returning only {:?}",
            returned(&out)
        );
    }
}

/// The derived-data files of a data directory (the index must not be one on PostgreSQL).
fn data_cache(fs: &MemFs) -> Vec<String> {
    fs.list_dir(Path::new(layout::DATA_CACHE_DIR))
        .unwrap_or_default()
}

/// lock: L-CACHE-DERIVED
#[test]
fn a_fresh_process_answers_from_the_index_row_loading_only_what_it_returns() {
    let Some(url) = postgres_url("a_fresh_process_answers_from_the_index_row", "resume") else {
        return;
    };
    let schema = Schema::new(&url, "wrr");
    let ids = store_many(&schema);
    let expected = expected(&schema);
    assert!(schema.index_row().is_none());
    // Without an index a fresh process loads every session (the seam sees loads), and writes
    // the row; its data directory holds no index.
    let data = MemFs::new();
    let writer = process_in(&schema, &data, 50);
    assert_eq!(resume(&writer, &json!({})), expected[0]);
    assert_eq!(loaded(&writer, &ids).len(), ids.len());
    let written = schema.index_row().expect("the index row was written");
    assert!(written.starts_with(b"{\"v\":1,"), "{written:?}");
    assert!(data_cache(&data).is_empty(), "{:?}", data_cache(&data));
    for (q, want) in queries().iter().zip(&expected) {
        assert_eq!(&resume(&writer, q), want, "writer: {q}");
    }
    // Fresh processes read it: the same answers, loading at most the returned sessions, and
    // an unchanged index is not written again.
    let at = |s: &Schema| {
        s.count(&format!(
            "SELECT (extract(epoch FROM written_at) * 1000000)::bigint FROM {}.derived",
            s.name
        ))
    };
    let written_at = at(&schema);
    assert_answers_from_the_index(&schema, &ids, &expected, "fresh");
    assert_eq!(schema.index_row().unwrap(), written);
    assert_eq!(at(&schema), written_at, "an unchanged index was rewritten");
}

/// lock: L-CACHE-NO-CORRECTNESS
#[test]
fn appends_and_new_sessions_after_the_index_was_written_are_seen() {
    let Some(url) = postgres_url("appends_and_new_sessions_after_the_index", "resume") else {
        return;
    };
    let schema = Schema::new(&url, "wrr");
    let mut ids = store_many(&schema);
    let target = session(&process(&schema, 60), &["Nothing about animals yet."]);
    ids.push(id(&target));
    resume(&process(&schema, 61), &json!({}));
    let stale = schema.index_row().unwrap();
    // Another process acknowledges a step with new notes (the session's manifest rows grow),
    // and starts a new session.
    let other = process(&schema, 62);
    other
        .continue_workflow(ack(&target, "Counted the okapis.", vec![]))
        .unwrap();
    let newer = session(&other, &["Okapi census, part two."]);
    ids.push(id(&newer));
    assert_eq!(schema.index_row().unwrap(), stale);
    let fresh = process(&schema, 63);
    let out = resume(&fresh, &json!({"text": "okapis"}));
    assert_eq!(out.candidates[0].session_id, id(&target));
    assert_eq!(out.candidates[0].snippet, "Counted the okapis.");
    // Only the changed sessions and the returned ones were loaded.
    let changed: BTreeSet<SessionId> = [id(&target), id(&newer)].into();
    let allowed: BTreeSet<SessionId> = returned(&out).union(&changed).cloned().collect();
    assert!(
        loaded(&fresh, &ids).is_subset(&allowed),
        "{:?}",
        loaded(&fresh, &ids)
    );
    assert_ne!(
        schema.index_row().unwrap(),
        stale,
        "the index was not updated"
    );
    let out = resume(&process(&schema, 64), &json!({"text": "okapi"}));
    assert_eq!(out.candidates[0].session_id, id(&newer));
    for q in queries()
        .into_iter()
        .chain([json!({"text": "okapis"}), json!({"text": "okapi census"})])
    {
        schema.set_index_row(Some(&stale));
        let with_stale = resume(&process(&schema, 65), &q);
        assert_eq!(with_stale, bare(&schema, &q), "{q}");
    }
}

/// A damaged, truncated or other-version row reads as no index and is replaced by a good one.
/// lock: L-CACHE-DISCARD
#[test]
fn a_damaged_or_other_version_row_is_ignored_and_rewritten() {
    let Some(url) = postgres_url("a_damaged_or_other_version_row_is_ignored", "resume") else {
        return;
    };
    let schema = Schema::new(&url, "wrr");
    let ids = store_many(&schema);
    resume(&process(&schema, 90), &json!({}));
    let good = schema.index_row().unwrap();
    let split = good.iter().position(|b| *b == b'\n').unwrap();
    let mut flipped = good.clone();
    flipped[split + good.len() / 3] ^= 0x20;
    let other_version = String::from_utf8(good.clone())
        .unwrap()
        .replacen("\"v\":1", "\"v\":2", 1)
        .into_bytes();
    let damaged: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("garbage", b"\x00\xffgarbage\n\n".to_vec()),
        ("cut in half", good[..good.len() / 2].to_vec()),
        ("last byte missing", good[..good.len() - 1].to_vec()),
        ("a flipped byte", flipped),
        ("another version", other_version),
    ];
    let expected = expected(&schema);
    for (what, bytes) in &damaged {
        for (q, want) in queries().iter().zip(&expected) {
            schema.set_index_row(Some(bytes));
            assert_eq!(&resume(&process(&schema, 91), q), want, "{what}: {q}");
        }
        // The call replaced the row with a good index, which the next fresh process uses.
        schema.set_index_row(Some(bytes));
        resume(&process(&schema, 92), &json!({}));
        assert_eq!(schema.index_row().unwrap(), good, "{what}: not rewritten");
        assert_answers_from_the_index(&schema, &ids, &expected, what);
    }
    // A row of another name (a later format) is not this build's index: left alone.
    schema.run(&format!(
        "INSERT INTO {}.derived (name, bytes) VALUES ('resume-index.v2', '\\x00')",
        schema.name
    ));
    assert_answers_from_the_index(&schema, &ids, &expected, "beside a v2 row");
}

/// A well-formed entry that lies about its session (right manifest length, re-sealed digest)
/// never reaches a response: the candidates are loaded and validated and the ranking redone.
/// A session damaged after it was indexed (its manifest rows unchanged) is skipped, never
/// offered, and the index is not written while the store holds damage.
/// lock: L-CACHE-NO-CORRECTNESS, L-RESUME-HEALTHY-ONLY
#[test]
fn an_entry_that_lies_or_a_session_damaged_after_indexing_never_reaches_a_response() {
    let Some(url) = postgres_url("an_entry_that_lies_never_reaches_a_response", "resume") else {
        return;
    };
    let schema = Schema::new(&url, "wrr");
    let ids = store_many(&schema);
    resume(&process(&schema, 100), &json!({}));
    let good = schema.index_row().unwrap();
    let lies = [
        (
            "an entry claiming the latest activity",
            re_sealed(&good, |e| {
                for row in e["sessions"].as_array_mut().unwrap().iter_mut().step_by(4) {
                    row[4][0][3] = json!(1_000_000);
                }
            }),
        ),
        (
            "an entry with invented notes",
            re_sealed(&good, |e| {
                for row in e["sessions"].as_array_mut().unwrap() {
                    let tip = &mut row[4][0];
                    let notes = tip[5].as_str().unwrap_or_default().to_owned();
                    tip[5] = json!(format!("{notes} zebracorn billing invented"));
                    tip[4] = json!("Invented words.");
                }
            }),
        ),
    ];
    let expected = expected(&schema);
    for (what, bytes) in &lies {
        let mut fewest = ids.len();
        for (q, want) in queries().iter().zip(&expected) {
            schema.set_index_row(Some(bytes));
            let fresh = process(&schema, 101);
            let out = resume(&fresh, q);
            assert_eq!(&out, want, "{what}: {q}");
            assert!(
                out.candidates
                    .iter()
                    .all(|c| c.snippet != "Invented words."),
                "{what}"
            );
            fewest = fewest.min(loaded(&fresh, &ids).len());
        }
        // The lies were read (some call did not load every session), and still never shown.
        assert!(fewest < ids.len(), "{what}: the index was never used");
    }

    // Damage in place after indexing: an event row's text changed, same length.
    schema.set_index_row(Some(&good));
    let bad = id(&session(&process(&schema, 102), &["Zebracorn gamma ray."]));
    resume(&process(&schema, 103), &json!({}));
    let indexed = schema.index_row().unwrap();
    schema.run(&format!(
        "UPDATE {}.events SET body = replace(body, 'gamma ray', 'gamma rax') WHERE session_id = '{bad}'",
        schema.name
    ));
    for q in [
        json!({"text": "gamma"}),
        json!({"text": "zebracorn"}),
        json!({"text": "ray"}),
    ] {
        let out = resume(&process(&schema, 104), &q);
        assert!(out.candidates.iter().all(|c| c.session_id != bad), "{q}");
        assert_eq!(out.skipped_unhealthy_sessions, 1, "{q}");
        assert_eq!(out.skipped_sessions[0].session_id, bad);
        assert_eq!(out.skipped_sessions[0].health, "corrupt_tail");
        assert_eq!(schema.index_row().unwrap(), indexed, "written in safe mode");
    }
}

/// Two machines (two data directories) on one schema: what one wrote, the other uses, and
/// neither data directory holds an index.
/// lock: L-CACHE-DERIVED
#[test]
fn two_machines_on_one_schema_share_the_index() {
    let Some(url) = postgres_url("two_machines_on_one_schema_share_the_index", "resume") else {
        return;
    };
    let schema = Schema::new(&url, "wrr");
    let (dir_a, dir_b) = (MemFs::new(), MemFs::new());
    let a = process_in(&schema, &dir_a, 110);
    let mut ids: Vec<SessionId> = (0..8)
        .map(|i| {
            id(&session(
                &a,
                &[&format!("Zebracorn ticket {i} on machine A.")],
            ))
        })
        .collect();
    resume(&a, &json!({}));
    let from_a = schema.index_row().unwrap();
    // Machine B, fresh: answers from A's index.
    let b = process_in(&schema, &dir_b, 111);
    let out = resume(&b, &json!({"text": "ticket 3"}));
    assert_eq!(out, bare_keeping_row(&schema, &json!({"text": "ticket 3"})));
    assert!(loaded(&b, &ids).is_subset(&returned(&out)));
    assert_eq!(schema.index_row().unwrap(), from_a, "nothing changed");
    // B commits; a fresh process on A sees it, from B's index, loading only what it returns.
    let newer = session(&b, &["Zebracorn ticket 99 on machine B."]);
    ids.push(id(&newer));
    resume(&b, &json!({}));
    let fresh_a = process_in(&schema, &dir_a, 112);
    let out = resume(&fresh_a, &json!({"text": "ticket 99"}));
    assert_eq!(out.candidates[0].session_id, id(&newer));
    assert!(loaded(&fresh_a, &ids).is_subset(&returned(&out)));
    assert!(data_cache(&dir_a).is_empty() && data_cache(&dir_b).is_empty());
}

/// [`bare`], putting the index row back afterwards.
fn bare_keeping_row(schema: &Schema, query: &Value) -> ResumeSessionOutput {
    let row = schema.index_row();
    let out = bare(schema, query);
    schema.set_index_row(row.as_deref());
    out
}

/// GC deleting a session deletes the index row (it holds the session's notes), and an index
/// still naming a deleted session (written by a process that listed before the delete) never
/// offers it: its entry is ignored and the next write leaves it out.
/// lock: L-CACHE-DERIVED
#[test]
fn entries_of_sessions_gc_deleted_are_dropped_and_ignored() {
    let Some(url) = postgres_url("entries_of_sessions_gc_deleted", "resume") else {
        return;
    };
    let schema = Schema::new(&url, "wrr");
    let ids = store_many(&schema);
    let wr = process(&schema, 120);
    let first = resume(&wr, &json!({"text": "zebracorn"}));
    let gone = first.candidates[0].session_id.clone();
    let before = schema.index_row().unwrap();
    assert!(String::from_utf8_lossy(&before).contains(gone.as_str()));
    schema.run(&format!(
        "UPDATE {}.sessions SET last_activity = now() - interval '100 days' WHERE session_id = '{gone}'",
        schema.name
    ));
    let report = wr
        .gc(
            &GcOptions {
                dry_run: false,
                ttl_days: None,
            },
            &OsRetentionClock::new("/nonexistent"),
            &NoProgress,
        )
        .unwrap();
    assert_eq!(report.deleted_sessions, vec![gone.clone()]);
    assert!(
        schema.index_row().is_none(),
        "the index outlived the session"
    );
    // The old index comes back (a writer that listed before the delete): the deleted session's
    // entry is never used, and the next write leaves it out.
    schema.set_index_row(Some(&before));
    for wr in [&process(&schema, 121), &wr] {
        let out = resume(wr, &json!({"text": "zebracorn"}));
        assert!(out.candidates.iter().all(|c| c.session_id != gone));
        assert_eq!(out.skipped_unhealthy_sessions, 0);
    }
    let now = schema.index_row().unwrap();
    assert!(
        !String::from_utf8_lossy(&now).contains(gone.as_str()),
        "the index still holds {gone}"
    );
    let left: Vec<SessionId> = ids.into_iter().filter(|i| *i != gone).collect();
    let expected = expected(&schema);
    assert_answers_from_the_index(&schema, &left, &expected, "after gc");
}

/// Schema version 4 only adds the table `derived`: the released migrations are unchanged (their
/// digests are pinned here), and a schema written by version 3 migrates on the next connection
/// with every session intact, then keeps its index in the new table.
/// lock: L-VERSION-ADDITIVE-ONLY
#[test]
fn a_version_3_schema_gains_the_index_table_and_keeps_its_sessions() {
    let released = [
        "d79a00d89a90a14366ae774df7e40bcf7deaae80584c096438b7712da221cc40",
        "8a4c95a5275aca31de58e08ba080d05bba1bc8348e32d8f08876816254f91c26",
        "22e2771879acbf59c4daa3b4cac3416ca563117b99a8e94f5d45056c9c6253b4",
    ];
    let migrations = workrail::store::postgres::MIGRATIONS;
    assert!(migrations.len() >= 4, "migrations are only ever appended");
    for (i, digest) in released.iter().enumerate() {
        assert_eq!(
            workrail_spec::jcs::sha256(migrations[i].as_bytes()).hex(),
            *digest,
            "released migration {} changed",
            i + 1
        );
    }
    let Some(url) = postgres_url("a_version_3_schema_gains_the_index_table", "resume") else {
        return;
    };
    let schema = Schema::new(&url, "wrr");
    let ids = store_many(&schema);
    let expected = expected(&schema);
    // The schema as version 3 left it (without version 5's manifest totals, D129, too).
    schema.run(&format!(
        "DROP TABLE {s}.derived; DELETE FROM {s}.schema_version WHERE version >= 4;
         ALTER TABLE {s}.schema_version DROP COLUMN oldest_build;
         DROP TRIGGER manifest_totals ON {s}.manifest; DROP FUNCTION {s}.manifest_totals();
         ALTER TABLE {s}.sessions DROP COLUMN manifest_rows, DROP COLUMN manifest_bytes",
        s = schema.name
    ));
    let rows = schema.rows();
    let wr = process(&schema, 130);
    assert_eq!(
        schema.count(&format!(
            "SELECT max(version)::bigint FROM {}.schema_version",
            schema.name
        )),
        i64::from(workrail::store::postgres::SCHEMA_VERSION)
    );
    assert_eq!(schema.rows(), rows, "the migration changed session rows");
    assert_eq!(resume(&wr, &json!({})), expected[0]);
    assert!(schema.index_row().is_some());
    assert_answers_from_the_index(&schema, &ids, &expected, "after the migration");
}

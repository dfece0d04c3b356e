//! The durable truth of a server, read once per store step (decision D194): either the locked
//! file layout under the data directory (locks §13: `sessions/<sessionId>/events/*.jsonl` and
//! `sessions/<sessionId>/manifest.jsonl`), or, for a server whose store is not files, a truth
//! adapter named in the surface file (two commands: list the sessions, dump one), such as
//! `workrail sessions --json` and `workrail export <id>` for WorkRail-rs on PostgreSQL.
//!
//! Derived files (`cache/`), the lock file and the CAS are left out: only domain truth and its
//! manifest count. Two equal digests mean no event or manifest record was written in between.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Value, json};
use workrail_spec::jcs;

use crate::checks::Problem;

/// One stored record (an event or a manifest record) and where it was read, for messages.
#[derive(Debug, Clone)]
pub struct Record {
    pub value: Value,
    pub at: String,
}

/// One session's durable truth.
#[derive(Debug, Clone, Default)]
pub struct SessionTruth {
    pub id: String,
    pub manifest: Vec<Record>,
    pub events: Vec<Record>,
}

/// What a read of the store found: every session, and the `(name, sha256)` entries its digest
/// covers (the files' bytes for the file layout, the JCS of each session's records through an
/// adapter).
#[derive(Debug, Clone, Default)]
pub struct Dump {
    pub sessions: Vec<SessionTruth>,
    entries: Vec<(String, String)>,
    /// Event segments (file layout) or sessions with events (adapter).
    event_sources: u64,
}

impl Dump {
    /// The locked file layout under `data_dir`; `logs` are paths (relative, a trailing `/` for
    /// a directory) left out of the digest as the server's own logs.
    pub fn files(data_dir: &Path, logs: &[&str]) -> Result<Self, String> {
        let sessions_dir = data_dir.join("sessions");
        let mut dump = Dump::default();
        if !sessions_dir.is_dir() {
            return Ok(dump);
        }
        for session in read_sorted(&sessions_dir)? {
            if !session.is_dir() {
                continue;
            }
            let name = file_name(&session);
            let mut truth = SessionTruth {
                id: name.clone(),
                ..SessionTruth::default()
            };
            let manifest = session.join("manifest.jsonl");
            if manifest.is_file() {
                dump.entries
                    .push((format!("{name}/manifest.jsonl"), hash_file(&manifest)?));
                for (n, value) in json_lines(&manifest)? {
                    truth.manifest.push(Record {
                        value,
                        at: format!("sessions/{name}/manifest.jsonl line {n}"),
                    });
                }
            }
            let events = session.join("events");
            if events.is_dir() {
                for file in read_sorted(&events)? {
                    if !file.is_file() {
                        continue;
                    }
                    dump.event_sources += 1;
                    dump.entries.push((
                        format!("{name}/events/{}", file_name(&file)),
                        hash_file(&file)?,
                    ));
                    if file.extension().is_none_or(|e| e != "jsonl") {
                        continue;
                    }
                    let text = std::fs::read_to_string(&file)
                        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
                    for (i, line) in text.lines().enumerate() {
                        if line.trim().is_empty() {
                            continue;
                        }
                        let value = serde_json::from_str(line)
                            .unwrap_or_else(|_| json!({ "unparsable": line }));
                        let index = value
                            .get("eventIndex")
                            .map_or_else(|| "?".to_owned(), Value::to_string);
                        truth.events.push(Record {
                            value,
                            at: format!(
                                "sessions/{name}/events/{} line {} (eventIndex {index})",
                                file_name(&file),
                                i + 1
                            ),
                        });
                    }
                }
            }
            dump.sessions.push(truth);
        }
        // Every other file of the data directory counts too, so a read that writes anywhere
        // (a token index, a key, an object) changes the digest. Left out: lock files, which a
        // reader may create, and the derived `cache/` directories, which locks allow a reader
        // to fill.
        let mut others = Vec::new();
        walk(data_dir, data_dir, &mut others)?;
        for (relative, path) in others {
            let parts: Vec<&str> = relative.split('/').collect();
            let in_session_record = parts.first() == Some(&"sessions")
                && (parts.get(2) == Some(&"manifest.jsonl") || parts.get(2) == Some(&"events"));
            if in_session_record
                || parts
                    .last()
                    .is_some_and(|p| *p == ".lock" || p.ends_with(".lock"))
                || parts.contains(&"cache")
                || logs.iter().any(|log| {
                    relative == *log || (log.ends_with('/') && relative.starts_with(log))
                })
            {
                continue;
            }
            dump.entries
                .push((format!("data/{relative}"), hash_file(&path)?));
        }
        Ok(dump)
    }

    /// What a truth adapter printed: `ids` and, per id, the JSON its export command printed.
    pub fn adapter(sessions: Vec<(String, Value)>) -> Result<Self, String> {
        let mut dump = Dump::default();
        for (id, exported) in sessions {
            let body = exported
                .get("session")
                .filter(|s| s.get("events").is_some())
                .unwrap_or(&exported);
            let list = |key: &str| -> Result<Vec<Value>, String> {
                match body.get(key) {
                    Some(Value::Array(items)) => Ok(items.clone()),
                    None if key == "manifest" => Ok(Vec::new()),
                    _ => Err(format!(
                        "the truth adapter's dump of session {id} has no `{key}` array (expected an export bundle with `session.{key}`, or `{{events, manifest}}`)"
                    )),
                }
            };
            let (events, manifest) = (list("events")?, list("manifest")?);
            let digest = |items: &[Value]| -> Result<String, String> {
                let bytes =
                    jcs::value_to_canonical_bytes(&Value::Array(items.to_vec())).map_err(|e| {
                        format!("the dump of session {id} is not canonicalizable: {e:?}")
                    })?;
                Ok(jcs::sha256(&bytes).as_str().to_owned())
            };
            dump.entries
                .push((format!("{id}/events"), digest(&events)?));
            dump.entries
                .push((format!("{id}/manifest"), digest(&manifest)?));
            dump.event_sources += u64::from(!events.is_empty());
            dump.sessions.push(SessionTruth {
                manifest: manifest
                    .into_iter()
                    .enumerate()
                    .map(|(n, value)| Record {
                        value,
                        at: format!("session {id} manifest record {n}"),
                    })
                    .collect(),
                events: events
                    .into_iter()
                    .enumerate()
                    .map(|(n, value)| {
                        let index = value
                            .get("eventIndex")
                            .map_or_else(|| "?".to_owned(), Value::to_string);
                        Record {
                            value,
                            at: format!("session {id} event {n} (eventIndex {index})"),
                        }
                    })
                    .collect(),
                id,
            });
        }
        dump.sessions.sort_by(|a, b| a.id.cmp(&b.id));
        dump.entries.sort();
        Ok(dump)
    }
}

impl Dump {
    /// The `(name, sha256)` entries the digest covers, sorted by name.
    pub fn entries(&self) -> &[(String, String)] {
        &self.entries
    }
}

/// What differs between two digests' entries: `name (added)`, `name (removed)`,
/// `name (changed)`.
pub fn changed_entries(before: &[(String, String)], after: &[(String, String)]) -> Vec<String> {
    let before: std::collections::BTreeMap<&str, &str> = before
        .iter()
        .map(|(n, h)| (n.as_str(), h.as_str()))
        .collect();
    let after: std::collections::BTreeMap<&str, &str> = after
        .iter()
        .map(|(n, h)| (n.as_str(), h.as_str()))
        .collect();
    let mut out = Vec::new();
    for (name, hash) in &after {
        match before.get(name) {
            None => out.push(format!("{name} (added)")),
            Some(old) if old != hash => out.push(format!("{name} (changed)")),
            Some(_) => {}
        }
    }
    for name in before.keys().filter(|n| !after.contains_key(*n)) {
        out.push(format!("{name} (removed)"));
    }
    out
}

/// `{digest, sessions, eventFiles}` of a read of the store.
pub fn digest(dump: &Dump) -> Value {
    let listing: String = dump
        .entries
        .iter()
        .map(|(p, h)| format!("{p}\0{h}\n"))
        .collect();
    json!({
        "digest": jcs::sha256(listing.as_bytes()).as_str(),
        "sessions": dump.sessions.len(),
        "eventFiles": dump.event_sources,
    })
}

/// Every regular file under `dir`, as `(path relative to root with '/', path)`, sorted.
fn walk(
    root: &Path,
    dir: &Path,
    out: &mut Vec<(String, std::path::PathBuf)>,
) -> Result<(), String> {
    if !dir.is_dir() {
        return Ok(());
    }
    for path in read_sorted(dir)? {
        let meta = std::fs::symlink_metadata(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        if meta.is_dir() {
            walk(root, &path, out)?;
        } else if meta.is_file() {
            let relative = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            out.push((relative, path));
        }
    }
    Ok(())
}

fn read_sorted(dir: &Path) -> Result<Vec<std::path::PathBuf>, String> {
    let mut out: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    out.sort();
    Ok(out)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn hash_file(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(jcs::sha256(&bytes).as_str().to_owned())
}

/// Every event of every session, in session then file (or dump) then line order. Lines that
/// are not JSON are `{"unparsable": "<line>"}` so a check can report them.
pub fn events(dump: &Dump) -> Vec<Value> {
    dump.sessions
        .iter()
        .flat_map(|s| s.events.iter().map(|r| r.value.clone()))
        .collect()
}

/// Whether `value` contains `pattern`: objects by subset of keys (recursively), everything
/// else by equality.
pub fn matches(value: &Value, pattern: &Value) -> bool {
    match (value, pattern) {
        (Value::Object(v), Value::Object(p)) => p
            .iter()
            .all(|(k, pv)| v.get(k).is_some_and(|vv| matches(vv, pv))),
        _ => value == pattern,
    }
}

/// Locks the closed-set check asserts on every read of the store ([`closed_sets`]).
pub const CLOSED_SET_LOCKS: [&str; 5] = [
    "L-EVENT-CLOSED-KINDS",
    "L-EVENT-NODE-CREATED",
    "L-EVENT-EDGE-CREATED",
    "L-EVENT-ADVANCE-RECORDED",
    "L-MANIFEST-CLOSED-KINDS",
];

/// Every value of a closed set, for messages.
fn listing<T: Copy + std::fmt::Display>(all: &[T]) -> String {
    all.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Checks one closed-set field: absent or outside the set is a problem naming the value and
/// where it was found.
fn closed_field<T: Copy + std::fmt::Display>(
    out: &mut Vec<Problem>,
    lock: &str,
    what: &str,
    value: Option<&Value>,
    all: &[T],
    known: fn(&str) -> bool,
    at: &str,
) {
    let expected = format!("{what} from the closed set: {}", listing(all));
    match value {
        Some(Value::String(s)) if known(s) => {}
        Some(Value::String(s)) => out.push(Problem::new(
            &[lock],
            expected,
            format!("unknown {what} {s:?} at {at}"),
        )),
        Some(other) => out.push(Problem::new(
            &[lock],
            expected,
            format!(
                "{what} {} (not a string) at {at}",
                crate::checks::brief_json(other)
            ),
        )),
        None => out.push(Problem::new(
            &[lock],
            expected,
            format!("no {what} at {at}"),
        )),
    }
}

/// The closed sets of everything stored (locks §1): each event's `kind`; a `node_created`'s
/// `nodeKind`; an `edge_created`'s `edgeKind` and `cause.kind`; an `advance_recorded`'s
/// `outcome.kind`; each manifest record's `kind`. A value outside its set (e.g. an event kind
/// `run_completed`, a node kind `blocked_attempt`) is reported with where it sits. Lines that
/// are not JSON are left to the other checks.
pub fn closed_sets(dump: &Dump) -> Vec<Problem> {
    closed_sets_judged(dump).problems
}

/// What one closed-set check of the store found.
#[derive(Debug, Clone, Default)]
pub struct ClosedSets {
    /// Values outside their sets, each with where it sits.
    pub problems: Vec<Problem>,
    /// The locks of [`CLOSED_SET_LOCKS`] that governed at least one stored item (an event for
    /// `L-EVENT-CLOSED-KINDS`, a `node_created` for `L-EVENT-NODE-CREATED`, ...). A lock with
    /// nothing to check was not judged: an empty store holds no kind outside any set, which
    /// says nothing about the server.
    pub judged: BTreeSet<&'static str>,
}

/// [`closed_sets`], and which of the closed-set locks had anything to check.
pub fn closed_sets_judged(dump: &Dump) -> ClosedSets {
    use workrail_spec::closed::{AdvanceOutcomeKind, EdgeCauseKind, EdgeKind, NodeKind};
    use workrail_spec::event::EventKind;
    use workrail_spec::manifest::ManifestKind;

    let mut out = Vec::new();
    let mut judged = BTreeSet::new();
    for session in &dump.sessions {
        for Record { value: record, at } in &session.manifest {
            judged.insert("L-MANIFEST-CLOSED-KINDS");
            closed_field(
                &mut out,
                "L-MANIFEST-CLOSED-KINDS",
                "manifest record kind",
                record.get("kind"),
                ManifestKind::ALL,
                |s| ManifestKind::parse(s).is_some(),
                at,
            );
        }
        for Record { value: event, at } in &session.events {
            if event.get("unparsable").is_some() {
                continue;
            }
            judged.insert("L-EVENT-CLOSED-KINDS");
            closed_field(
                &mut out,
                "L-EVENT-CLOSED-KINDS",
                "event kind",
                event.get("kind"),
                EventKind::ALL,
                |s| EventKind::parse(s).is_some(),
                at,
            );
            let data = event.get("data");
            let field = |path: &[&str]| path.iter().try_fold(data?, |v: &Value, key| v.get(*key));
            match event
                .get("kind")
                .and_then(Value::as_str)
                .and_then(EventKind::parse)
            {
                Some(EventKind::NodeCreated) => {
                    judged.insert("L-EVENT-NODE-CREATED");
                    closed_field(
                        &mut out,
                        "L-EVENT-NODE-CREATED",
                        "node kind (data.nodeKind)",
                        field(&["nodeKind"]),
                        NodeKind::ALL,
                        |s| NodeKind::parse(s).is_some(),
                        at,
                    );
                }
                Some(EventKind::EdgeCreated) => {
                    judged.insert("L-EVENT-EDGE-CREATED");
                    closed_field(
                        &mut out,
                        "L-EVENT-EDGE-CREATED",
                        "edge kind (data.edgeKind)",
                        field(&["edgeKind"]),
                        EdgeKind::ALL,
                        |s| EdgeKind::parse(s).is_some(),
                        at,
                    );
                    closed_field(
                        &mut out,
                        "L-EVENT-EDGE-CREATED",
                        "edge cause kind (data.cause.kind)",
                        field(&["cause", "kind"]),
                        EdgeCauseKind::ALL,
                        |s| EdgeCauseKind::parse(s).is_some(),
                        at,
                    );
                }
                Some(EventKind::AdvanceRecorded) => {
                    judged.insert("L-EVENT-ADVANCE-RECORDED");
                    closed_field(
                        &mut out,
                        "L-EVENT-ADVANCE-RECORDED",
                        "advance outcome (data.outcome.kind)",
                        field(&["outcome", "kind"]),
                        AdvanceOutcomeKind::ALL,
                        |s| AdvanceOutcomeKind::parse(s).is_some(),
                        at,
                    );
                }
                _ => {}
            }
        }
    }
    ClosedSets {
        problems: out,
        judged,
    }
}

/// The JSON lines of a file with their 1-based line numbers (blank and non-JSON lines left out).
fn json_lines(path: &Path) -> Result<Vec<(usize, Value)>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(text
        .lines()
        .enumerate()
        .filter_map(|(i, l)| serde_json::from_str(l).ok().map(|v| (i + 1, v)))
        .collect())
}

#[cfg(test)]
mod truth_tests {
    use super::*;

    fn event(i: u64, kind: &str) -> Value {
        json!({"v": 1, "eventIndex": i, "kind": kind, "data": {}})
    }

    /// decision: D194
    #[test]
    fn an_adapter_reads_export_bundles_and_plain_dumps_alike() {
        let stored = vec![event(0, "session_created"), event(1, "run_started")];
        let manifest = vec![json!({"kind": "segment_closed"})];
        let bundle = json!({"bundleSchemaVersion": 1, "exportedAt": "now",
            "session": {"sessionId": "sess_a", "events": stored, "manifest": manifest}});
        let plain = json!({"events": stored, "manifest": manifest});
        let a = Dump::adapter(vec![("sess_a".into(), bundle)]).unwrap();
        let b = Dump::adapter(vec![("sess_a".into(), plain)]).unwrap();
        assert_eq!(digest(&a), digest(&b));
        assert_eq!(events(&a).len(), 2);
        assert_eq!(
            a.sessions[0].events[1].at,
            "session sess_a event 1 (eventIndex 1)"
        );
        // Another event is another digest, and the change is named.
        let more = json!({"events": [event(0, "session_created"), event(1, "run_started"),
            event(2, "node_created")], "manifest": manifest});
        let c = Dump::adapter(vec![("sess_a".into(), more)]).unwrap();
        assert_ne!(digest(&a)["digest"], digest(&c)["digest"]);
        assert_eq!(
            changed_entries(a.entries(), c.entries()),
            ["sess_a/events (changed)"]
        );
        // A dump without events is refused with what was expected.
        let err = Dump::adapter(vec![("sess_a".into(), json!({"manifest": []}))]).unwrap_err();
        assert!(err.contains("no `events` array"), "{err}");
        // Closed sets are judged on what the adapter printed.
        let bad = json!({"events": [event(0, "run_completed")], "manifest": []});
        let problems = closed_sets(&Dump::adapter(vec![("sess_b".into(), bad)]).unwrap());
        assert!(
            problems[0]
                .got
                .contains("\"run_completed\" at session sess_b event 0"),
            "{problems:?}"
        );
    }

    /// decision: D194
    #[test]
    fn the_file_digest_covers_the_whole_data_directory_but_locks_caches_and_declared_logs() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        std::fs::create_dir_all(data.join("sessions/s1/events")).unwrap();
        std::fs::create_dir_all(data.join("sessions/s1/cache")).unwrap();
        std::fs::create_dir_all(data.join("keys")).unwrap();
        std::fs::create_dir_all(data.join("perf")).unwrap();
        std::fs::write(data.join("sessions/s1/events/0.jsonl"), "{}\n").unwrap();
        let before = Dump::files(data, &["perf/"]).unwrap();
        // Ignored: a lock file, a derived cache, a declared log.
        std::fs::write(data.join("sessions/s1/.lock"), "").unwrap();
        std::fs::write(data.join("sessions/s1/cache/projection"), "x").unwrap();
        std::fs::write(data.join("perf/calls.jsonl"), "x").unwrap();
        let same = Dump::files(data, &["perf/"]).unwrap();
        assert_eq!(digest(&before), digest(&same));
        // Seen: any other file.
        std::fs::write(data.join("keys/token-index.jsonl"), "{}\n").unwrap();
        let after = Dump::files(data, &["perf/"]).unwrap();
        assert_ne!(digest(&before)["digest"], digest(&after)["digest"]);
        assert_eq!(
            changed_entries(before.entries(), after.entries()),
            ["data/keys/token-index.jsonl (added)"]
        );
    }
}

//! A digest of the durable store in a data directory, in the locked layout (locks §13):
//! `sessions/<sessionId>/events/*.jsonl` and `sessions/<sessionId>/manifest.jsonl`.
//!
//! Derived files (`cache/`), the lock file and the CAS are left out: only domain truth and its
//! manifest count. Two equal digests mean no event or manifest record was written in between.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{Value, json};
use workrail_spec::jcs;

use crate::checks::Problem;

/// `{digest, sessions, eventFiles}` for the store under `data_dir`.
pub fn digest(data_dir: &Path) -> Result<Value, String> {
    let sessions_dir = data_dir.join("sessions");
    let mut entries: Vec<(String, String)> = Vec::new();
    let mut sessions = 0u64;
    let mut event_files = 0u64;
    if sessions_dir.is_dir() {
        for session in read_sorted(&sessions_dir)? {
            if !session.is_dir() {
                continue;
            }
            sessions += 1;
            let name = file_name(&session);
            let manifest = session.join("manifest.jsonl");
            if manifest.is_file() {
                entries.push((format!("{name}/manifest.jsonl"), hash_file(&manifest)?));
            }
            let events = session.join("events");
            if events.is_dir() {
                for file in read_sorted(&events)? {
                    if file.is_file() {
                        event_files += 1;
                        entries.push((
                            format!("{name}/events/{}", file_name(&file)),
                            hash_file(&file)?,
                        ));
                    }
                }
            }
        }
    }
    let listing: String = entries.iter().map(|(p, h)| format!("{p}\0{h}\n")).collect();
    Ok(json!({
        "digest": jcs::sha256(listing.as_bytes()).as_str(),
        "sessions": sessions,
        "eventFiles": event_files,
    }))
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

/// Every event line of every `sessions/<id>/events/*.jsonl` under `data_dir`, parsed, in
/// session then file then line order. Lines that are not JSON are returned as
/// `{"unparsable": "<line>"}` so a check can report them.
pub fn events(data_dir: &Path) -> Result<Vec<Value>, String> {
    let sessions_dir = data_dir.join("sessions");
    let mut out = Vec::new();
    if !sessions_dir.is_dir() {
        return Ok(out);
    }
    for session in read_sorted(&sessions_dir)? {
        let events = session.join("events");
        if !events.is_dir() {
            continue;
        }
        for file in read_sorted(&events)? {
            if !file.is_file() || file.extension().is_none_or(|e| e != "jsonl") {
                continue;
            }
            let text = std::fs::read_to_string(&file)
                .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                out.push(
                    serde_json::from_str(line).unwrap_or_else(|_| json!({ "unparsable": line })),
                );
            }
        }
    }
    Ok(out)
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

/// The closed sets of everything stored under `data_dir` (locks §1): each event's `kind`; a
/// `node_created`'s `nodeKind`; an `edge_created`'s `edgeKind` and `cause.kind`; an
/// `advance_recorded`'s `outcome.kind`; each `manifest.jsonl` record's `kind`. A value outside
/// its set (e.g. an event kind `run_completed`, a node kind `blocked_attempt`) is reported with
/// the file and line it sits on. Lines that are not JSON are left to the other checks.
pub fn closed_sets(data_dir: &Path) -> Result<Vec<Problem>, String> {
    Ok(closed_sets_judged(data_dir)?.problems)
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
pub fn closed_sets_judged(data_dir: &Path) -> Result<ClosedSets, String> {
    use workrail_spec::closed::{AdvanceOutcomeKind, EdgeCauseKind, EdgeKind, NodeKind};
    use workrail_spec::event::EventKind;
    use workrail_spec::manifest::ManifestKind;

    let mut out = Vec::new();
    let mut judged = BTreeSet::new();
    let sessions_dir = data_dir.join("sessions");
    if !sessions_dir.is_dir() {
        return Ok(ClosedSets {
            problems: out,
            judged,
        });
    }
    for session in read_sorted(&sessions_dir)? {
        if !session.is_dir() {
            continue;
        }
        let name = file_name(&session);
        let manifest = session.join("manifest.jsonl");
        if manifest.is_file() {
            for (n, record) in json_lines(&manifest)? {
                judged.insert("L-MANIFEST-CLOSED-KINDS");
                let at = format!("sessions/{name}/manifest.jsonl line {n}");
                closed_field(
                    &mut out,
                    "L-MANIFEST-CLOSED-KINDS",
                    "manifest record kind",
                    record.get("kind"),
                    ManifestKind::ALL,
                    |s| ManifestKind::parse(s).is_some(),
                    &at,
                );
            }
        }
        let events = session.join("events");
        if !events.is_dir() {
            continue;
        }
        for file in read_sorted(&events)? {
            if !file.is_file() || file.extension().is_none_or(|e| e != "jsonl") {
                continue;
            }
            for (n, event) in json_lines(&file)? {
                judged.insert("L-EVENT-CLOSED-KINDS");
                let index = event
                    .get("eventIndex")
                    .map_or_else(|| "?".to_owned(), Value::to_string);
                let at = format!(
                    "sessions/{name}/events/{} line {n} (eventIndex {index})",
                    file_name(&file)
                );
                closed_field(
                    &mut out,
                    "L-EVENT-CLOSED-KINDS",
                    "event kind",
                    event.get("kind"),
                    EventKind::ALL,
                    |s| EventKind::parse(s).is_some(),
                    &at,
                );
                let data = event.get("data");
                let field =
                    |path: &[&str]| path.iter().try_fold(data?, |v: &Value, key| v.get(*key));
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
                            &at,
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
                            &at,
                        );
                        closed_field(
                            &mut out,
                            "L-EVENT-EDGE-CREATED",
                            "edge cause kind (data.cause.kind)",
                            field(&["cause", "kind"]),
                            EdgeCauseKind::ALL,
                            |s| EdgeCauseKind::parse(s).is_some(),
                            &at,
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
                            &at,
                        );
                    }
                    _ => {}
                }
            }
        }
    }
    Ok(ClosedSets {
        problems: out,
        judged,
    })
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

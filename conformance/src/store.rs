//! A digest of the durable store in a data directory, in the locked layout (locks §13):
//! `sessions/<sessionId>/events/*.jsonl` and `sessions/<sessionId>/manifest.jsonl`.
//!
//! Derived files (`cache/`), the lock file and the CAS are left out: only domain truth and its
//! manifest count. Two equal digests mean no event or manifest record was written in between.

use std::path::Path;

use serde_json::{Value, json};
use workrail_spec::jcs;

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

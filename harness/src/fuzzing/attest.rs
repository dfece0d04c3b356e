//! `JsonEdit::Reattest`: a bundle's integrity manifest recomputed for its edited JSON, so edits
//! get past `BUNDLE_INTEGRITY_FAILED` to the structural checks behind it.
//!
//! The entries are those `ExportBundleBody::integrity_entries` lists (locks §1.3): the SHA-256
//! and length of the RFC 8785 bytes of `session/events`, `session/manifest`, each
//! `session/snapshots/<ref>` and `session/pinnedWorkflows/<hash>`, each `artifacts/<sha256>` and
//! `salvage`, sorted by path. They are computed from the JSON as edited, which is what a parsed
//! bundle re-serializes to whenever it parses at all; a part that equals the base bundle's keeps
//! the base bundle's entry (the 29 KB pinned workflow is hashed once per process, not per edit).

use serde_json::{Map, Value, json};

/// A base bundle as JSON, with its integrity entries by path and the part each one attests.
pub struct Attested {
    pub value: Value,
    entries: Vec<(String, Value, Value)>,
}

impl Attested {
    pub fn new(text: &str) -> Self {
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => panic!("an exported bundle is not JSON: {e}"),
        };
        let stated = value["integrity"]["entries"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let entries = parts(&value)
            .into_iter()
            .filter_map(|(path, part)| {
                let entry = stated.iter().find(|e| e["path"] == path.as_str())?;
                Some((path, part.clone(), entry.clone()))
            })
            .collect();
        Self { value, entries }
    }

    /// Rewrites `root`'s integrity entries to attest its contents.
    pub fn reattest(&self, root: &mut Value) {
        let mut entries: Vec<Value> = Vec::new();
        for (path, part) in parts(root) {
            let known = self
                .entries
                .iter()
                .find(|(p, base, _)| *p == path && base == part);
            match known {
                Some((_, _, entry)) => entries.push(entry.clone()),
                None => {
                    // A fuzzed part is any JSON, not a typed artifact: attest its bytes as an
                    // exporter that canonicalized it would have.
                    let Ok(canonical) = workrail_spec::jcs::to_canonical_bytes(part) else {
                        return;
                    };
                    let (sha256, bytes) = (workrail_spec::jcs::sha256(&canonical), canonical.len());
                    entries.push(json!({
                        "path": path,
                        "sha256": sha256.to_string(),
                        "bytes": bytes,
                    }));
                }
            }
        }
        entries.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
        let Value::Object(body) = root else {
            return;
        };
        match body.get_mut("integrity") {
            Some(Value::Object(integrity)) => {
                integrity.insert("entries".into(), Value::Array(entries));
            }
            _ => {
                let mut integrity = Map::new();
                integrity.insert("kind".into(), "sha256_manifest_v1".into());
                integrity.insert("entries".into(), Value::Array(entries));
                body.insert("integrity".into(), Value::Object(integrity));
            }
        }
    }
}

/// Every attested part of a bundle's JSON, by integrity path.
fn parts(root: &Value) -> Vec<(String, &Value)> {
    let mut out = Vec::new();
    let session = &root["session"];
    for (name, key) in [("events", "events"), ("manifest", "manifest")] {
        if let Some(part) = session.get(key) {
            out.push((format!("session/{name}"), part));
        }
    }
    for key in ["snapshots", "pinnedWorkflows"] {
        if let Some(Value::Object(map)) = session.get(key) {
            for (id, part) in map {
                out.push((format!("session/{key}/{id}"), part));
            }
        }
    }
    if let Some(Value::Object(map)) = root.get("artifacts") {
        for (digest, part) in map {
            out.push((format!("artifacts/{digest}"), part));
        }
    }
    if let Some(part) = root.get("salvage") {
        out.push(("salvage".into(), part));
    }
    out
}

//! What JSON Schema cannot say about a `wr.block_output` artifact (decision D160): every path is
//! relative, normalized and stays inside the workspace, so two lanes naming one file name it the
//! same way and a fan-in can compare them byte for byte; no list names a path twice; the
//! deliverables fit the block type; the timestamp is RFC 3339.

use serde_json::{Map, Value};

/// The deliverables types a block type may carry: a plan block a plan, a dev block code, a review
/// block a generic result, and test and devops blocks code or a generic result.
pub fn deliverables_for(block_type: &str) -> &'static [&'static str] {
    match block_type {
        "plan" => &["plan"],
        "dev" => &["code"],
        "review" => &["generic"],
        "test" | "devops" => &["code", "generic"],
        _ => &[],
    }
}

/// Why `path` is not a normalized relative path inside the workspace, if it is not.
pub fn path_problem(path: &str) -> Option<String> {
    if path.starts_with('/') || path.starts_with('\\') {
        return Some(format!(
            "{path:?} is absolute: list paths relative to the workspace root (e.g. \"src/lib.rs\")"
        ));
    }
    let bytes = path.as_bytes();
    if bytes.len() >= 2 && bytes[1] == b':' && bytes[0].is_ascii_alphabetic() {
        return Some(format!(
            "{path:?} starts with a drive letter: list paths relative to the workspace root, with '/' between parts"
        ));
    }
    if path.contains('\\') {
        return Some(format!(
            "{path:?} uses '\\': separate the parts of a path with '/'"
        ));
    }
    if path.chars().any(char::is_control) {
        return Some(format!(
            "{path:?} holds a control character: list the file's path as it is on disk"
        ));
    }
    for part in path.split('/') {
        match part {
            ".." => {
                return Some(format!(
                    "{path:?} leaves the workspace through '..': list only files inside it"
                ));
            }
            "" | "." => {
                return Some(format!(
                    "{path:?} is not normalized (an empty or '.' part): write it as a plain relative path such as \"src/lib.rs\", so lanes naming one file name it the same way"
                ));
            }
            _ => {}
        }
    }
    None
}

/// The problems of one block output artifact: `(JSON pointer, message)`.
pub fn problems(artifact: &Map<String, Value>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut lists: Vec<(String, &Vec<Value>)> = Vec::new();
    for field in ["filesModified", "filesCreated"] {
        if let Some(Value::Array(list)) = artifact.get(field) {
            lists.push((format!("/{field}"), list));
        }
    }
    let deliverables = artifact.get("deliverables").and_then(Value::as_object);
    if let Some(Value::Array(list)) = deliverables.and_then(|d| d.get("filesChanged")) {
        lists.push(("/deliverables/filesChanged".to_owned(), list));
    }
    for (pointer, list) in lists {
        let mut seen = std::collections::BTreeSet::new();
        for (i, item) in list.iter().enumerate() {
            let Some(path) = item.as_str() else { continue };
            if let Some(why) = path_problem(path) {
                out.push((format!("{pointer}/{i}"), why));
            } else if !seen.insert(path) {
                out.push((
                    format!("{pointer}/{i}"),
                    format!("{path:?} is listed twice: list each file once"),
                ));
            }
        }
    }
    let block_type = artifact.get("blockType").and_then(Value::as_str);
    let carried = deliverables
        .and_then(|d| d.get("blockType"))
        .and_then(Value::as_str);
    if let (Some(block_type), Some(carried)) = (block_type, carried) {
        let allowed = deliverables_for(block_type);
        if !allowed.is_empty() && !allowed.contains(&carried) {
            out.push((
                "/deliverables/blockType".to_owned(),
                format!(
                    "a {block_type} block delivers {}, not {carried:?}: send deliverables of that type",
                    allowed
                        .iter()
                        .map(|t| format!("{t:?}"))
                        .collect::<Vec<_>>()
                        .join(" or ")
                ),
            ));
        }
    }
    if let Some(stamp) = artifact.get("timestamp").and_then(Value::as_str)
        && stamp.parse::<jiff::Timestamp>().is_err()
    {
        out.push((
            "/timestamp".to_owned(),
            format!(
                "{stamp:?} is not an RFC 3339 timestamp: send the time the block finished, e.g. \"2026-11-27T10:15:00Z\""
            ),
        ));
    }
    out
}

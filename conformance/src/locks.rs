//! The lock catalog the suite judges against (`spec/LOCKS.md`, built in), for reports people
//! act on: each lock's text beside its id, and a locks version (the digest of the lock rows)
//! in every report, so a report says which catalog it was judged by (decision D195).

use std::collections::BTreeMap;
use std::sync::OnceLock;

const CATALOG: &str = include_str!("../../spec/LOCKS.md");

/// Every lock row of the catalog: id -> its text (markdown as written).
pub fn texts() -> &'static BTreeMap<&'static str, &'static str> {
    static TEXTS: OnceLock<BTreeMap<&'static str, &'static str>> = OnceLock::new();
    TEXTS.get_or_init(|| {
        CATALOG
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix("| `L-")?;
                let (id_tail, rest) = rest.split_once("` | ")?;
                let id_start = line.find("L-")?;
                let id = &line[id_start..id_start + 2 + id_tail.len()];
                let text = rest.rsplit_once(" | ").map_or(rest, |(text, _)| text);
                Some((id, text.trim()))
            })
            .collect()
    })
}

/// The text of `id`, if the catalog has it.
pub fn text(id: &str) -> Option<&'static str> {
    texts().get(id).copied()
}

/// `sha256:<hex>` of the lock rows (id and text, in catalog order): changes when a lock is
/// added, removed or reworded, not when the decisions below them change.
pub fn version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        let rows: String = CATALOG
            .lines()
            .filter(|l| l.starts_with("| `L-"))
            .map(|l| format!("{l}\n"))
            .collect();
        workrail_spec::jcs::sha256(rows.as_bytes())
            .as_str()
            .to_owned()
    })
}

/// The suite and the catalog it judges by, for the first line of a report.
pub fn banner() -> String {
    format!(
        "workrail-conformance {} judging by the lock catalog {} ({} locks)",
        env!("CARGO_PKG_VERSION"),
        version(),
        texts().len()
    )
}

/// `text` cut to about `max` bytes on a character boundary, with an ellipsis.
pub fn brief(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let cut = workrail_spec::budget::floor_char_boundary(text, max);
    format!("{}…", &text[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// decision: D195
    #[test]
    fn the_catalog_gives_every_lock_its_text_and_one_version() {
        assert!(texts().len() > 300, "{}", texts().len());
        assert!(
            text("L-TOKEN-HMAC").is_some_and(|t| t.contains("HMAC")),
            "{:?}",
            text("L-TOKEN-HMAC")
        );
        assert!(text("L-NO-SUCH-LOCK").is_none());
        assert!(version().starts_with("sha256:"));
        assert!(banner().contains(version()));
    }
}

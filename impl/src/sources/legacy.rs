//! Deterministic rename suggestions for legacy (dot-free) workflow ids (locks §7): by source,
//! `user.<name>`, `project.<name>` or `repo.<name>`, where `<name>` is the legacy id lowercased
//! with hyphens turned into underscores; a suggestion that collides gets `_<hash4>`, the first
//! four hex digits of the sha256 of the document's source ref (never a timestamp).

use std::collections::BTreeSet;

use workrail_spec::closed::WorkflowSourceKind;
use workrail_spec::ids::WorkflowId;
use workrail_spec::jcs::sha256;

use super::suggestion_namespace;
use crate::compiler::ids::suggest_workflow_id;

/// The suggestion for one legacy id, given every id already taken (loaded ids and earlier
/// suggestions). Longer suffixes are tried only if a 4-digit one still collides.
pub fn suggest(
    kind: WorkflowSourceKind,
    legacy_id: &str,
    source_ref: &str,
    taken: &BTreeSet<String>,
) -> Option<WorkflowId> {
    let base = suggest_workflow_id(suggestion_namespace(kind), legacy_id);
    if !taken.contains(&base) {
        return WorkflowId::parse(&base).ok();
    }
    let digest = sha256(source_ref.as_bytes());
    let hex = digest.hex();
    [4, 8, 16, 64]
        .iter()
        .map(|n| {
            let suffix = &hex[..*n];
            let room = WorkflowId::MAX_LEN.saturating_sub(n + 1);
            let stem: String = base.chars().take(room).collect();
            format!("{stem}_{suffix}")
        })
        .find(|candidate| !taken.contains(candidate))
        .and_then(|candidate| WorkflowId::parse(&candidate).ok())
}

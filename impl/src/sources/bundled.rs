//! The bundled (`wr.*`) workflows, embedded in the binary, and the read-only legacy aliases of
//! bundled ids (locks §7 "Bundled ID rename timing + aliasing").

use workrail_spec::closed::WorkflowSourceKind;

use super::{SourceDocument, SourceIoError, WorkflowSource};

/// Every bundled workflow as `(file name, source text)`, sorted by file name.
pub const BUNDLED: &[(&str, &str)] = &[
    (
        "wr.bug_investigation.json",
        include_str!("../../workflows/wr.bug_investigation.json"),
    ),
    (
        "wr.coding_task.json",
        include_str!("../../workflows/wr.coding_task.json"),
    ),
    (
        "wr.mr_review.json",
        include_str!("../../workflows/wr.mr_review.json"),
    ),
];

/// Legacy bundled ids and the canonical `wr.*` id each one resolves to.
pub const ALIASES: &[(&str, &str)] = &[
    ("bug-investigation", "wr.bug_investigation"),
    ("coding-task-workflow", "wr.coding_task"),
    ("mr-review-workflow", "wr.mr_review"),
];

/// The bundled source.
#[derive(Debug, Clone, Copy, Default)]
pub struct BundledSource;

impl WorkflowSource for BundledSource {
    fn kind(&self) -> WorkflowSourceKind {
        WorkflowSourceKind::Bundled
    }

    fn documents(&self) -> Vec<Result<SourceDocument, SourceIoError>> {
        BUNDLED
            .iter()
            .map(|(name, text)| {
                Ok(SourceDocument {
                    source_ref: format!("bundled/{name}"),
                    text: (*text).to_owned(),
                    path: None,
                })
            })
            .collect()
    }

    /// Embedded in the binary: never changes while it runs.
    fn fingerprint(&self) -> Option<String> {
        Some(String::new())
    }
}

//! Workflow sources: where workflow JSON comes from, the namespace rules that depend on it, and
//! discovery (locks §7).
//!
//! I/O sits behind [`WorkflowSource`]: the bundled source is embedded in the binary, directory
//! sources read `*.json` files, and tests use the in-memory source. Everything else here (the
//! catalog, legacy-id suggestions, drift detection) is pure.

pub mod bundled;
pub mod cache;
pub mod catalog;
pub mod config;
pub mod drift;
pub mod fs;
pub mod git;
pub mod legacy;
pub mod memory;

use std::fmt;

use workrail_spec::closed::WorkflowSourceKind;

pub use self::cache::CatalogCache;
pub use self::catalog::{Catalog, LoadedWorkflow, Resolved, SourceProblem, SourceWarning};
pub use self::config::SourceConfig;
pub use self::drift::{DriftStatus, PINNED_DRIFT_CODE, PinnedDrift, check_drift, drift_warning};

/// One workflow document as read from a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceDocument {
    /// Opaque, relative, stable within the source kind (never an absolute path), e.g.
    /// `project/workflows/review.json`. Used as `run_started.workflowSourceRef`.
    pub source_ref: String,
    pub text: String,
    /// Where the file is on this machine, for people (problem reports); never recorded.
    pub path: Option<String>,
}

/// A document or directory could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceIoError {
    /// The document (or directory) ref that failed.
    pub source_ref: String,
    pub message: String,
    /// Where the file or directory is on this machine, for people; never recorded.
    pub path: Option<String>,
}

impl fmt::Display for SourceIoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot read {}: {}", self.source_ref, self.message)
    }
}

/// A place workflows are loaded from.
pub trait WorkflowSource {
    fn kind(&self) -> WorkflowSourceKind;

    /// Every document, each read independently (one unreadable file does not hide the others),
    /// in a deterministic order.
    fn documents(&self) -> Vec<Result<SourceDocument, SourceIoError>>;

    /// A cheap summary of what [`WorkflowSource::documents`] would return now (e.g. file names,
    /// sizes and modification times): equal fingerprints mean the documents did not change.
    /// `None` when the source cannot tell cheaply, so a catalog cache always reloads it.
    fn fingerprint(&self) -> Option<String> {
        None
    }
}

/// The namespace suggested for workflows of a source kind (locks §7 "Deterministic rename
/// suggestions"): user dir -> `user`, project dir -> `project`, git/remote/plugin -> `repo`.
pub fn suggestion_namespace(kind: WorkflowSourceKind) -> &'static str {
    match kind {
        WorkflowSourceKind::Bundled => "wr",
        WorkflowSourceKind::User => "user",
        WorkflowSourceKind::Project => "project",
        WorkflowSourceKind::Remote | WorkflowSourceKind::Plugin => "repo",
    }
}

//! An in-memory source, for tests and for embedding callers.

use workrail_spec::closed::WorkflowSourceKind;

use super::{SourceDocument, SourceIoError, WorkflowSource};

/// Documents held in memory, returned in insertion order.
#[derive(Debug, Clone)]
pub struct MemorySource {
    kind: WorkflowSourceKind,
    documents: Vec<Result<SourceDocument, SourceIoError>>,
}

impl MemorySource {
    pub fn new(kind: WorkflowSourceKind) -> Self {
        Self {
            kind,
            documents: Vec::new(),
        }
    }

    /// Adds a document.
    pub fn with(mut self, source_ref: &str, text: &str) -> Self {
        self.documents.push(Ok(SourceDocument {
            source_ref: source_ref.to_owned(),
            text: text.to_owned(),
            path: None,
        }));
        self
    }

    /// Adds an unreadable document (to exercise I/O failure paths).
    pub fn with_error(mut self, source_ref: &str, message: &str) -> Self {
        self.documents.push(Err(SourceIoError {
            source_ref: source_ref.to_owned(),
            message: message.to_owned(),
            path: None,
        }));
        self
    }
}

impl WorkflowSource for MemorySource {
    fn kind(&self) -> WorkflowSourceKind {
        self.kind
    }

    fn documents(&self) -> Vec<Result<SourceDocument, SourceIoError>> {
        self.documents.clone()
    }
}

//! A per-process catalog cache: every call that needs the catalog (start, list, inspect, the
//! drift check on rehydrate) reuses the last one while no source changed, and a change
//! recompiles only the documents whose text changed.
//!
//! Sources are re-fingerprinted on every use (a directory listing and a `stat` per file), so an
//! edited, added or removed workflow file is seen by the next call without a restart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use workrail_spec::closed::WorkflowSourceKind;

use super::WorkflowSource;
use super::catalog::Catalog;
use crate::compiler::error::CompileErrors;
use crate::compiler::library::WorkflowLibrary;
use crate::compiler::{CompileContext, Compiled, compile_str};

/// The compile result of one document, with the text and the library it was compiled with.
type MemoEntry = (
    String,
    Arc<WorkflowLibrary>,
    Result<Compiled, CompileErrors>,
);

#[derive(Default)]
struct CacheState {
    /// The fingerprints the cached catalog was loaded under (all `Some`).
    prints: Vec<Option<String>>,
    catalog: Option<Arc<Catalog>>,
    /// Compile results by `(source kind, source ref)`; only the documents of the last load are
    /// kept, so memory is bounded by the sources themselves.
    compiled: HashMap<(WorkflowSourceKind, String), MemoEntry>,
}

/// The cache (one per server process).
#[derive(Default)]
pub struct CatalogCache {
    state: Mutex<CacheState>,
}

impl std::fmt::Debug for CatalogCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CatalogCache").finish_non_exhaustive()
    }
}

impl CatalogCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The catalog of `sources` as they are now.
    pub fn load(&self, sources: &[&dyn WorkflowSource]) -> Arc<Catalog> {
        // Fingerprints are taken before the documents are read: a change in between is cached
        // under the older fingerprint and therefore reloaded by the next call.
        let prints: Vec<Option<String>> = sources.iter().map(|s| s.fingerprint()).collect();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(catalog) = &state.catalog
            && prints.iter().all(Option::is_some)
            && state.prints == prints
        {
            return Arc::clone(catalog);
        }
        let mut previous = std::mem::take(&mut state.compiled);
        let mut kept = HashMap::new();
        let catalog = Arc::new(Catalog::load_with(
            sources,
            &mut |kind, ctx: &CompileContext, source_ref: &str, text: &str| {
                let key = (kind, source_ref.to_owned());
                // A routine's change reaches every workflow that may expand it.
                let result = match previous.remove(&key) {
                    Some((old_text, library, result))
                        if old_text == text && library == ctx.library =>
                    {
                        result
                    }
                    _ => compile_str(text, ctx),
                };
                kept.insert(
                    key,
                    (text.to_owned(), Arc::clone(&ctx.library), result.clone()),
                );
                result
            },
        ));
        state.compiled = kept;
        state.prints = prints;
        state.catalog = Some(Arc::clone(&catalog));
        catalog
    }
}

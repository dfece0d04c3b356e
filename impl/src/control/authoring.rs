//! Authoring a workflow file: compiling it as the sources would (`workrail validate`), applying
//! the compiler's auto-fixes to it (`--fix`) and rewriting it in the v2 spelling
//! (`workrail migrate`). The compile steps are the pure compiler's; this module adds the
//! library of the configured workflow sources (routines, delegation targets) and the file I/O.

use std::path::Path;
use std::sync::Arc;

use workrail_spec::closed::WorkflowSourceKind;
use workrail_spec::compiled::CompiledWarningCode;

use crate::compiler::error::CompileErrors;
use crate::compiler::library::WorkflowLibrary;
use crate::compiler::migrate::{Migration, migrate};
use crate::compiler::patch::{Applied, apply_fixes_to_text};
use crate::compiler::{CompileContext, Compiled, compile_str};
use crate::sources::SourceConfig;

/// The library of the workflow sources this process would load (bundled, project, the
/// directories of `WORKRAIL_WORKFLOW_DIRS`, the user directory).
pub fn library_of(sources: &SourceConfig) -> Arc<WorkflowLibrary> {
    let sources = sources.sources();
    let mut documents = Vec::new();
    for source in &sources {
        let bundled = source.kind() == WorkflowSourceKind::Bundled;
        for document in source.documents().into_iter().flatten() {
            documents.push((bundled, document.text));
        }
    }
    Arc::new(WorkflowLibrary::from_documents(
        documents.iter().map(|(b, t)| (*b, t.as_str())),
    ))
}

/// The context a file is validated in: bundled (`wr.*`) or a project workflow, with the
/// sources' library.
pub fn context(bundled: bool, library: Arc<WorkflowLibrary>) -> CompileContext {
    let ctx = if bundled {
        CompileContext::bundled()
    } else {
        CompileContext::load("project")
    };
    ctx.with_library(library)
}

/// What compiling a file found.
#[derive(Debug)]
pub struct Validation {
    pub result: Result<Compiled, CompileErrors>,
    /// The auto-fixes `--fix` applied (empty without `--fix` or when none applied).
    pub fixed: Vec<Applied>,
    /// What `workrail migrate` would do, for a file that compiles with 3.x-spelling warnings.
    pub migration: Option<Migration>,
}

/// Compiles `file`; with `fix`, first applies the auto-fixes of its errors to the file (written
/// atomically, only the bytes each fix touches) and compiles the fixed text.
pub fn validate_file(file: &Path, ctx: &CompileContext, fix: bool) -> Result<Validation, String> {
    let mut text = crate::sources::fs::read_source_file(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let mut result = compile_str(&text, ctx);
    let mut fixed = Vec::new();
    if fix && let Err(errors) = &result {
        let (new_text, applied) = apply_fixes_to_text(&text, errors.errors());
        if new_text != text {
            crate::sources::fs::write_source_file(file, new_text.as_bytes())
                .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
            text = new_text;
            result = compile_str(&text, ctx);
        }
        fixed = applied;
    }
    let migration = match &result {
        Ok(compiled)
            if compiled.snapshot.body.compiled_warnings.iter().any(|w| {
                matches!(
                    w.code,
                    CompiledWarningCode::V1Field | CompiledWarningCode::UnknownFieldKept
                ) || w.code == CompiledWarningCode::LegacyWorkflowId
            }) =>
        {
            migrate(&text, ctx).ok()
        }
        _ => None,
    };
    Ok(Validation {
        result,
        fixed,
        migration,
    })
}

/// `workrail migrate`: the migration of `file`, written back atomically unless `dry_run` or
/// the result does not compile (then nothing is written).
pub fn migrate_file(file: &Path, ctx: &CompileContext, dry_run: bool) -> Result<Migration, String> {
    let text = crate::sources::fs::read_source_file(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let migration = migrate(&text, ctx)
        .map_err(|errors| format!("{} is not a JSON document: {errors}", file.display()))?;
    if !dry_run && migration.errors.is_empty() && migration.text != text {
        crate::sources::fs::write_source_file(file, migration.text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    }
    Ok(migration)
}

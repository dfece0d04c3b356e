//! Workflows for the Console (locks §6 "Workflow editing", "Bundled namespace protections",
//! "Source vs compiled inspection + pinned drift warnings"; locks §7).
//!
//! Reads: every workflow with its source, one workflow's source text and current compiled
//! snapshot, and a run's pinned snapshot (read from `workflows/pinned/` by `workflowHash`) with
//! the pinned-drift warning of decision D58 ([`crate::sources::check_drift`]) when today's source
//! compiles to another hash. Writes: a workflow's **source** file only, after the real compiler
//! accepted the new text. Nothing here writes a compiled snapshot, `snapshots/` or
//! `workflows/pinned/`: those are derived and pinned by runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Value, json};
use workrail_spec::closed::WorkflowSourceKind;
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::event::EventData;
use workrail_spec::ids::{IdStatus, RunId, SessionId, WorkflowHash, WorkflowId};
use workrail_spec::tools::{Warning, WorkflowProblemView};

use crate::compiler::{CompileContext, compile_str};
use crate::sources::catalog::ProblemKind;
use crate::sources::{Catalog, PinnedDrift, SourceConfig, WorkflowSource, check_drift};
use crate::store::fs::{OsFs, StoreFs};
use crate::store::{PinnedWorkflowStore, SessionRead, SessionStore};

/// One workflow of the Workflows page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowRow {
    pub workflow_id: WorkflowId,
    pub name: String,
    pub description: String,
    pub source_kind: WorkflowSourceKind,
    pub source_ref: String,
    /// The source file on this machine, when the source is a directory of files (the source
    /// ref names a directory by its label, `dir0/...`, so that it reads the same everywhere).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// `false` for bundled `wr.*` workflows (copy them to edit).
    pub editable: bool,
    pub workflow_hash: WorkflowHash,
    pub id_status: IdStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggested_id: Option<WorkflowId>,
}

/// Every workflow and every document that did not load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowList {
    pub workflows: Vec<WorkflowRow>,
    pub problems: Vec<WorkflowProblemView>,
}

fn catalog(sources: &SourceConfig) -> Catalog {
    let sources = sources.sources();
    let refs: Vec<&dyn WorkflowSource> = sources.iter().map(|s| s.as_ref()).collect();
    Catalog::load(&refs)
}

/// Every workflow the sources define, in discovery order.
pub fn list_workflows(sources: &SourceConfig) -> WorkflowList {
    let catalog = catalog(sources);
    WorkflowList {
        workflows: catalog
            .workflows()
            .iter()
            .map(|w| WorkflowRow {
                workflow_id: w.workflow_id.clone(),
                name: w.compiled.snapshot.body.name.clone().unwrap_or_default(),
                description: w
                    .compiled
                    .snapshot
                    .body
                    .description
                    .clone()
                    .unwrap_or_default(),
                source_kind: w.source_kind,
                source_ref: w.source_ref.clone(),
                path: file_of(sources, &w.source_ref).map(|p| p.display().to_string()),
                editable: w.source_kind != WorkflowSourceKind::Bundled,
                workflow_hash: w.compiled.workflow_hash.clone(),
                id_status: w.workflow_id.id_status(),
                suggested_id: w.suggested_id.clone(),
            })
            .collect(),
        problems: catalog.problems().iter().map(|p| p.view()).collect(),
    }
}

/// One workflow: its source and its current compiled snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowDetail {
    pub workflow_id: WorkflowId,
    pub source_kind: WorkflowSourceKind,
    pub source_ref: String,
    pub editable: bool,
    pub source_text: String,
    /// Absent when the source does not compile (`errors` says why).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow_hash: Option<WorkflowHash>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compiled: Option<CompiledWorkflowSnapshotV1>,
    /// The compiler's problems (with JSON pointers) when the source does not compile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub errors: Option<ErrorEnvelope>,
}

fn not_found(catalog: &Catalog, id: &str) -> ErrorEnvelope {
    let suggestions = catalog.suggest(id);
    ErrorEnvelope::new(
        ErrorCode::WorkflowNotFound,
        format!("no workflow source defines {id:?}"),
        if suggestions.is_empty() {
            "Run `workrail workflows list` for the ids.".to_owned()
        } else {
            format!("Did you mean {}?", suggestions.join(", "))
        },
        Retry::NotRetryable,
    )
    .with_details(json!({"workflowId": id, "didYouMean": suggestions}))
}

/// The source text and current compiled snapshot of a workflow (also of one whose source no
/// longer compiles: then its compiler errors).
pub fn show_workflow(sources: &SourceConfig, id: &str) -> Result<WorkflowDetail, ErrorEnvelope> {
    let catalog = catalog(sources);
    if let Some(resolved) = catalog.resolve(id) {
        let w = resolved.workflow;
        return Ok(WorkflowDetail {
            workflow_id: w.workflow_id.clone(),
            source_kind: w.source_kind,
            source_ref: w.source_ref.clone(),
            editable: w.source_kind != WorkflowSourceKind::Bundled,
            source_text: w.source_text.clone(),
            workflow_hash: Some(w.compiled.workflow_hash.clone()),
            compiled: Some(w.compiled.snapshot.clone()),
            errors: None,
        });
    }
    let problem = catalog
        .problem_of(id)
        .ok_or_else(|| not_found(&catalog, id))?;
    let workflow_id = WorkflowId::parse(id).map_err(|e| {
        ErrorEnvelope::new(
            ErrorCode::ValidationError,
            format!("{id:?} is not a workflow id: {e}"),
            "Use an id from `workrail workflows list`.",
            Retry::NotRetryable,
        )
    })?;
    let text = problem
        .path
        .as_deref()
        .and_then(|p| crate::sources::fs::read_source_file(Path::new(p)).ok())
        .unwrap_or_default();
    Ok(WorkflowDetail {
        workflow_id,
        source_kind: problem.source_kind,
        source_ref: problem.source_ref.clone(),
        editable: problem.source_kind != WorkflowSourceKind::Bundled,
        source_text: text,
        workflow_hash: None,
        compiled: None,
        errors: Some(problem.to_envelope()),
    })
}

/// A run's pinned snapshot and how today's source relates to it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PinnedView {
    pub session_id: SessionId,
    pub run_id: RunId,
    pub workflow_id: WorkflowId,
    pub workflow_hash: WorkflowHash,
    pub pinned: CompiledWorkflowSnapshotV1,
    /// Present when the on-disk source no longer compiles to the pinned hash (decision D58).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<PinnedDrift>,
    /// The same drift as the text-first warning agents see.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub warning: Option<Warning>,
}

/// The pinned snapshot of `run` (in `session`, or found among all sessions) read from the data
/// directory by its `workflowHash`, with pinned drift against `sources`. Writes nothing.
pub fn pinned_for_run(
    data_dir: &Path,
    sources: &SourceConfig,
    run: &str,
    session: Option<&str>,
) -> Result<PinnedView, ErrorEnvelope> {
    let bad = |field: &str, value: &str, e: String| {
        ErrorEnvelope::new(
            ErrorCode::ValidationError,
            format!("{field} {value:?} is not valid: {e}"),
            format!("Pass the {field} shown by `workrail sessions` or an execution response."),
            Retry::NotRetryable,
        )
    };
    let run_id = RunId::parse(run).map_err(|e| bad("runId", run, e.to_string()))?;
    let fs: Arc<dyn StoreFs> = Arc::new(OsFs::new(data_dir));
    let store = SessionStore::new(Arc::clone(&fs));
    let sessions = match session {
        Some(s) => vec![SessionId::parse(s).map_err(|e| bad("sessionId", s, e.to_string()))?],
        None => store.list_sessions().map_err(|e| e.to_envelope(false))?,
    };
    for session_id in sessions {
        let loaded = store.load(&session_id).map_err(|e| e.to_envelope(false))?;
        let events = loaded.events().all().map_err(|e| e.to_envelope(false))?;
        let started = events.iter().find_map(|e| match e.data() {
            EventData::RunStarted(started) if e.scope().run_id() == Some(&run_id) => {
                Some(started.clone())
            }
            _ => None,
        });
        let Some(started) = started else { continue };
        let pinned = PinnedWorkflowStore::new(Arc::clone(&fs))
            .get(&started.workflow_hash)
            .map_err(|e| e.to_envelope(false))?;
        let drift = check_drift(
            &catalog(sources),
            &started.workflow_id,
            &started.workflow_hash,
        );
        return Ok(PinnedView {
            session_id,
            run_id,
            workflow_id: started.workflow_id,
            workflow_hash: started.workflow_hash,
            pinned,
            warning: drift.as_ref().map(crate::sources::drift_warning),
            drift,
        });
    }
    Err(ErrorEnvelope::new(
        ErrorCode::ValidationError,
        format!("no session of this data directory has run {run}"),
        "Pass a runId shown by `workrail sessions` (and its --session).",
        Retry::NotRetryable,
    )
    .with_details(json!({"field": "runId", "value": run})))
}

/// A source written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SavedSource {
    pub workflow_id: WorkflowId,
    pub source_kind: WorkflowSourceKind,
    pub source_ref: String,
    /// The file on this machine.
    pub path: String,
    /// The hash a run started now would pin.
    pub workflow_hash: WorkflowHash,
}

/// The directory of a source ref (`<label>/<file>`) and the file name.
fn file_of(sources: &SourceConfig, source_ref: &str) -> Option<PathBuf> {
    let dirs = sources
        .project_dirs
        .iter()
        .chain(&sources.extra_dirs)
        .map(|(p, l)| (p.clone(), l.clone()))
        .chain(
            sources
                .user_dir
                .iter()
                .map(|p| (p.clone(), "user".to_owned())),
        );
    for (dir, label) in dirs {
        if let Some(name) = source_ref.strip_prefix(&format!("{label}/"))
            && !name.contains('/')
            && !name.is_empty()
        {
            return Some(dir.join(name));
        }
    }
    None
}

fn read_only(id: &str) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::ValidationError,
        format!("{id} is a bundled workflow: the wr.* namespace is read-only"),
        format!(
            "Copy it to an editable namespace first (`workrail workflows copy {id}`, which writes user.<name> into the user workflow directory), then edit the copy."
        ),
        Retry::NotRetryable,
    )
    .with_details(json!({"workflowId": id, "operation": "copy", "reason": "read_only_namespace"}))
}

fn write_envelope(path: &Path, e: std::io::Error) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::StoreIoError,
        format!("cannot write {}: {e}", path.display()),
        "Check the directory's permissions and free space, then retry; the file was left as it was.",
        Retry::RetryableImmediate,
    )
}

/// Validates `text` with the compiler as a workflow of `kind` saved under `id`; the compiler's
/// errors (each with its JSON pointer) when it does not compile.
fn validate(
    catalog: &Catalog,
    kind: WorkflowSourceKind,
    id: &str,
    text: &str,
) -> Result<crate::compiler::Compiled, ErrorEnvelope> {
    // Compiled with the sources' library, as the catalog will compile it (routines).
    let ctx = CompileContext::authoring(crate::sources::suggestion_namespace(kind))
        .with_library(std::sync::Arc::clone(catalog.library()));
    let compiled = compile_str(text, &ctx).map_err(|errors| errors.to_envelope(id))?;
    if compiled.snapshot.body.workflow_id.as_str() != id {
        return Err(ErrorEnvelope::new(
            ErrorCode::ValidationError,
            format!(
                "the new source declares id {:?}, but it is saved as {id}",
                compiled.snapshot.body.workflow_id.as_str()
            ),
            format!("Keep \"id\": \"{id}\" (to make a workflow with another id, copy it)."),
            Retry::NotRetryable,
        )
        .with_details(json!({"errors": [{"pointer": "/id", "code": "id_changed", "message": "the id differs from the workflow being saved"}]})));
    }
    Ok(compiled)
}

/// Saves new source text of workflow `id` into its own source file: compiled first (on error
/// the compiler's errors come back and nothing is written), then written atomically. Bundled
/// `wr.*` workflows are refused with the copy operation named.
pub fn save_source(
    sources: &SourceConfig,
    id: &str,
    text: &str,
) -> Result<SavedSource, ErrorEnvelope> {
    if id.starts_with("wr.") {
        return Err(read_only(id));
    }
    let catalog = catalog(sources);
    // A legacy alias of a bundled workflow is as read-only as its `wr.*` id.
    if let Some(resolved) = catalog.resolve(id)
        && resolved.workflow.source_kind == WorkflowSourceKind::Bundled
    {
        return Err(read_only(resolved.workflow.workflow_id.as_str()));
    }
    let (kind, source_ref) = match catalog.get(id) {
        Some(w) => (w.source_kind, w.source_ref.clone()),
        None => match catalog.problem_of(id) {
            Some(p) if matches!(p.kind, ProblemKind::Invalid(_)) => {
                (p.source_kind, p.source_ref.clone())
            }
            _ => return Err(not_found(&catalog, id)),
        },
    };
    if kind == WorkflowSourceKind::Bundled {
        return Err(read_only(id));
    }
    let path = file_of(sources, &source_ref).ok_or_else(|| {
        ErrorEnvelope::new(
            ErrorCode::ValidationError,
            format!("{id} comes from {source_ref}, which is not a file WorkRail can write"),
            "Edit it where it comes from.",
            Retry::NotRetryable,
        )
    })?;
    let compiled = validate(&catalog, kind, id, text)?;
    crate::sources::fs::write_source_file(&path, text.as_bytes())
        .map_err(|e| write_envelope(&path, e))?;
    Ok(SavedSource {
        workflow_id: compiled.snapshot.body.workflow_id.clone(),
        source_kind: kind,
        source_ref,
        path: path.display().to_string(),
        workflow_hash: compiled.workflow_hash,
    })
}

/// Copies workflow `id` (typically a bundled `wr.*` one) to an editable namespace: a new id
/// (`user.<name>` by default) written to `<user dir>/<name>.json`, validated first. Refuses to
/// replace a file or an id that exists.
pub fn copy_to_editable(
    sources: &SourceConfig,
    id: &str,
    new_id: Option<&str>,
) -> Result<SavedSource, ErrorEnvelope> {
    let catalog = catalog(sources);
    let resolved = catalog.resolve(id).ok_or_else(|| not_found(&catalog, id))?;
    let workflow = resolved.workflow;
    let name = workflow
        .workflow_id
        .as_str()
        .rsplit('.')
        .next()
        .unwrap_or_default()
        .to_lowercase()
        .replace('-', "_");
    let target = new_id.map_or_else(|| format!("user.{name}"), str::to_owned);
    let invalid_target = |why: String| {
        ErrorEnvelope::new(
            ErrorCode::ValidationError,
            format!("cannot copy {id} to {target}: {why}"),
            "Pass another id with --as user.<name> (namespace user, a name of [a-z][a-z0-9_-]*).",
            Retry::NotRetryable,
        )
        .with_details(json!({"field": "newId", "value": target}))
    };
    let target_id = WorkflowId::parse(&target).map_err(|e| invalid_target(e.to_string()))?;
    if target_id.namespace() != Some("user") {
        return Err(invalid_target(
            "copies go to the user namespace (user.<name>) in the user workflow directory"
                .to_owned(),
        ));
    }
    if catalog.get(&target).is_some() || catalog.problem_of(&target).is_some() {
        return Err(invalid_target("a workflow with that id exists".to_owned()));
    }
    let dir = sources.user_dir.clone().ok_or_else(|| {
        invalid_target("there is no user workflow directory (HOME is not set)".to_owned())
    })?;
    let file_name = format!(
        "{}.json",
        target_id.as_str().rsplit('.').next().unwrap_or_default()
    );
    let path = dir.join(&file_name);
    if path.exists() {
        return Err(invalid_target(format!("{} exists", path.display())));
    }
    let mut source: Value = serde_json::from_str(&workflow.source_text).map_err(|e| {
        super::applied::internal(format!("a loaded workflow's source is not JSON: {e}"))
    })?;
    if let Some(object) = source.as_object_mut() {
        object.insert("id".to_owned(), Value::String(target.clone()));
    }
    let mut text = serde_json::to_string_pretty(&source)
        .map_err(|e| super::applied::internal(format!("cannot serialize the copy: {e}")))?;
    text.push('\n');
    let compiled = validate(&catalog, WorkflowSourceKind::User, &target, &text)?;
    crate::sources::fs::write_source_file(&path, text.as_bytes())
        .map_err(|e| write_envelope(&path, e))?;
    Ok(SavedSource {
        workflow_id: target_id,
        source_kind: WorkflowSourceKind::User,
        source_ref: format!("user/{file_name}"),
        path: path.display().to_string(),
        workflow_hash: compiled.workflow_hash,
    })
}

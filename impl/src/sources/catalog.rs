//! The catalog: every workflow the configured sources define, compiled, with the namespace rules
//! applied and discovery rows in the locked order (locks §7).
//!
//! Sources are given in precedence order. `wr.*` ids compile only from the bundled source (the
//! compiler rejects them elsewhere), so bundled workflows can never be shadowed; for any other
//! id the first source that defines it wins and later copies are reported, never merged.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::{Value, json};
use workrail_spec::closed::{WorkflowKind, WorkflowSourceKind};
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::ids::{IdStatus, WorkflowId};
use workrail_spec::tools::{Warning, WorkflowSummary};

use super::bundled::ALIASES;
use super::{WorkflowSource, legacy, suggestion_namespace};
use crate::compiler::error::CompileErrors;
use crate::compiler::library::{WorkflowLibrary, workflow_routine_key};
use crate::compiler::{CompileContext, Compiled, compile_str};

/// A workflow that loaded and compiled.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedWorkflow {
    pub workflow_id: WorkflowId,
    pub source_kind: WorkflowSourceKind,
    pub source_ref: String,
    /// The source text as read (for inspection and drift).
    pub source_text: String,
    pub compiled: Compiled,
    /// The deterministic namespaced rename, for legacy ids.
    pub suggested_id: Option<WorkflowId>,
}

impl LoadedWorkflow {
    /// The discovery row.
    pub fn summary(&self) -> WorkflowSummary {
        let body = &self.compiled.snapshot.body;
        WorkflowSummary {
            workflow_id: self.workflow_id.clone(),
            name: body.name.clone().unwrap_or_default(),
            description: body.description.clone().unwrap_or_default(),
            // A routine (what `wr.templates.routine.<name>` expands) is listed as one (locks §7).
            kind: if workflow_routine_key(self.workflow_id.as_str()).is_some() {
                WorkflowKind::Routine
            } else {
                WorkflowKind::Workflow
            },
            id_status: self.workflow_id.id_status(),
            canonical_id: None,
            suggested_id: self.suggested_id.clone(),
            source_kind: self.source_kind,
        }
    }
}

/// A structured, non-blocking warning about how a workflow was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceWarning {
    /// A legacy id: runnable, with its deterministic rename.
    LegacyId {
        workflow_id: WorkflowId,
        suggested_id: Option<WorkflowId>,
    },
    /// A legacy bundled alias was used instead of the canonical `wr.*` id.
    AliasUsed {
        alias: String,
        canonical_id: WorkflowId,
    },
}

impl SourceWarning {
    pub fn code(&self) -> &'static str {
        match self {
            Self::LegacyId { .. } => "legacy_workflow_id",
            Self::AliasUsed { .. } => "legacy_workflow_alias",
        }
    }

    /// The text-first warning of tool responses.
    pub fn to_warning(&self) -> Warning {
        let message = match self {
            Self::LegacyId {
                workflow_id,
                suggested_id,
            } => match suggested_id {
                Some(s) => format!(
                    "Workflow id '{workflow_id}' is a legacy (dot-free) id; it still runs. Rename it to '{s}'."
                ),
                None => format!(
                    "Workflow id '{workflow_id}' is a legacy (dot-free) id; it still runs. Rename it to a namespaced id."
                ),
            },
            Self::AliasUsed {
                alias,
                canonical_id,
            } => format!(
                "'{alias}' is a legacy alias of the bundled workflow '{canonical_id}'; use '{canonical_id}'."
            ),
        };
        Warning::new(self.code(), message)
    }
}

/// Why a document did not become a workflow.
#[derive(Debug, Clone, PartialEq)]
pub enum ProblemKind {
    /// The document could not be read.
    Io(String),
    /// The document is not a valid workflow (all problems, with pointers and fixes).
    Invalid(CompileErrors),
    /// An earlier source (higher precedence) already defines the id.
    Shadowed {
        winner_ref: String,
        winner_kind: WorkflowSourceKind,
    },
}

/// A document that was not loaded, as data.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceProblem {
    pub source_kind: WorkflowSourceKind,
    pub source_ref: String,
    /// The `id` the document declares, when it could be read.
    pub workflow_id: Option<String>,
    pub kind: ProblemKind,
    /// Where the file is on this machine, for people.
    pub path: Option<String>,
}

impl SourceProblem {
    /// The discovery view of this problem (`list_workflows`).
    pub fn view(&self) -> workrail_spec::tools::WorkflowProblemView {
        let (problem, errors) = match &self.kind {
            ProblemKind::Io(message) => ("unreadable", vec![message.clone()]),
            ProblemKind::Invalid(errors) => (
                "invalid",
                errors
                    .errors()
                    .iter()
                    .take(5)
                    .map(ToString::to_string)
                    .collect(),
            ),
            ProblemKind::Shadowed {
                winner_ref,
                winner_kind,
            } => (
                "duplicate_id",
                vec![format!(
                    "the id is already defined by {winner_ref} ({winner_kind}), which takes precedence; rename one of them"
                )],
            ),
        };
        workrail_spec::tools::WorkflowProblemView {
            source_kind: self.source_kind,
            source_ref: self.source_ref.clone(),
            path: self.path.clone(),
            workflow_id: self.workflow_id.clone(),
            problem: problem.to_owned(),
            errors,
        }
    }

    /// Logs this problem at warn, once per process (the catalog is loaded for every call).
    pub fn log_once(&self) {
        static LOGGED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
        let view = self.view();
        let key = format!(
            "{}|{}|{}",
            view.source_ref,
            view.problem,
            view.errors.join("|")
        );
        let mut logged = LOGGED.lock().unwrap_or_else(|p| p.into_inner());
        if logged.contains(&key) {
            return;
        }
        logged.push(key);
        tracing::warn!(
            source = %view.source_ref,
            path = view.path.as_deref().unwrap_or("-"),
            workflow = view.workflow_id.as_deref().unwrap_or("?"),
            problem = %view.problem,
            "workflow not loaded: {}",
            view.errors.join("; ")
        );
    }

    pub fn to_envelope(&self) -> ErrorEnvelope {
        let what = match &self.path {
            Some(path) => format!("{} ({}, file {path})", self.source_ref, self.source_kind),
            None => format!("{} ({})", self.source_ref, self.source_kind),
        };
        match &self.kind {
            ProblemKind::Io(message) => ErrorEnvelope::new(
                ErrorCode::WorkflowInvalid,
                format!("cannot read workflow file {what}: {message}"),
                "Check that the file exists and is readable, then restart the server.",
                Retry::NotRetryable,
            ),
            ProblemKind::Invalid(errors) => errors.to_envelope(&what),
            ProblemKind::Shadowed {
                winner_ref,
                winner_kind,
            } => ErrorEnvelope::new(
                ErrorCode::WorkflowInvalid,
                format!(
                    "workflow id '{}' in {what} is already defined by {winner_ref} ({winner_kind}), which takes precedence; this copy is ignored.",
                    self.workflow_id.as_deref().unwrap_or("?")
                ),
                "Rename one of the two workflows (ids must be unique across sources) or remove the copy.",
                Retry::NotRetryable,
            )
            .with_details(json!({"winnerRef": winner_ref, "winnerKind": winner_kind})),
        }
    }
}

/// A resolved workflow id.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved<'a> {
    pub workflow: &'a LoadedWorkflow,
    /// The discovery row as reached (with `canonicalId` when an alias was used).
    pub summary: WorkflowSummary,
    pub warnings: Vec<SourceWarning>,
}

/// Compiles one document: `(source kind, context, source ref, text)`.
pub type CompileFn<'a> = dyn FnMut(WorkflowSourceKind, &CompileContext, &str, &str) -> Result<Compiled, CompileErrors>
    + 'a;

/// Every loaded workflow and every problem.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Catalog {
    workflows: Vec<LoadedWorkflow>,
    problems: Vec<SourceProblem>,
    /// The sources' workflows as the compiler's library (routines, delegation targets).
    library: Arc<WorkflowLibrary>,
}

/// The locked discovery order: namespace, then kind (workflow first), then id; legacy ids (no
/// namespace) after every namespace.
fn discovery_key(s: &WorkflowSummary) -> (bool, String, u8, String) {
    let namespace = s.workflow_id.namespace();
    let kind = match s.kind {
        WorkflowKind::Workflow => 0,
        WorkflowKind::Routine => 1,
    };
    (
        namespace.is_none(),
        namespace.unwrap_or_default().to_owned(),
        kind,
        s.workflow_id.as_str().to_owned(),
    )
}

impl Catalog {
    /// Loads every source, highest precedence first.
    pub fn load(sources: &[&dyn WorkflowSource]) -> Self {
        Self::load_with(sources, &mut |_, ctx, _, text| compile_str(text, ctx))
    }

    /// [`Catalog::load`] with the compile step supplied (e.g. memoized by
    /// [`super::CatalogCache`]): `compile(kind, ctx, source_ref, text)` must equal
    /// `compile_str(text, ctx)`.
    pub fn load_with(sources: &[&dyn WorkflowSource], compile: &mut CompileFn<'_>) -> Self {
        let mut catalog = Self::default();
        // Every document is read first: a workflow may expand a routine of any source.
        let read: Vec<_> = sources.iter().map(|s| (s.kind(), s.documents())).collect();
        catalog.library = Arc::new(WorkflowLibrary::from_documents(read.iter().flat_map(
            |(kind, documents)| {
                documents.iter().filter_map(move |d| {
                    d.as_ref()
                        .ok()
                        .map(|d| (*kind == WorkflowSourceKind::Bundled, d.text.as_str()))
                })
            },
        )));
        for (kind, documents) in read {
            let ctx = match kind {
                WorkflowSourceKind::Bundled => CompileContext::bundled(),
                other => CompileContext::load(suggestion_namespace(other)),
            }
            .with_library(Arc::clone(&catalog.library));
            for document in documents {
                let document = match document {
                    Ok(d) => d,
                    Err(e) => {
                        catalog.problems.push(SourceProblem {
                            source_kind: kind,
                            source_ref: e.source_ref,
                            workflow_id: None,
                            kind: ProblemKind::Io(e.message),
                            path: e.path,
                        });
                        continue;
                    }
                };
                let declared = serde_json::from_str::<Value>(&document.text)
                    .ok()
                    .and_then(|v| v.get("id").and_then(Value::as_str).map(str::to_owned));
                match compile(kind, &ctx, &document.source_ref, &document.text) {
                    Err(errors) => catalog.problems.push(SourceProblem {
                        source_kind: kind,
                        source_ref: document.source_ref,
                        workflow_id: declared,
                        kind: ProblemKind::Invalid(errors),
                        path: document.path,
                    }),
                    Ok(compiled) => {
                        let workflow_id = compiled.snapshot.body.workflow_id.clone();
                        if let Some(winner) = catalog
                            .workflows
                            .iter()
                            .find(|w| w.workflow_id == workflow_id)
                        {
                            catalog.problems.push(SourceProblem {
                                source_kind: kind,
                                source_ref: document.source_ref,
                                workflow_id: Some(workflow_id.as_str().to_owned()),
                                kind: ProblemKind::Shadowed {
                                    winner_ref: winner.source_ref.clone(),
                                    winner_kind: winner.source_kind,
                                },
                                path: document.path,
                            });
                            continue;
                        }
                        catalog.workflows.push(LoadedWorkflow {
                            workflow_id,
                            source_kind: kind,
                            source_ref: document.source_ref,
                            source_text: document.text,
                            compiled,
                            suggested_id: None,
                        });
                    }
                }
            }
        }
        catalog.assign_suggestions();
        catalog
            .workflows
            .sort_by_key(|w| discovery_key(&w.summary()));
        catalog
    }

    /// Suggestions are assigned in load (precedence) order, so the first claimant keeps the
    /// plain suggestion and later ones get the deterministic suffix.
    fn assign_suggestions(&mut self) {
        let mut taken: BTreeSet<String> = self
            .workflows
            .iter()
            .map(|w| w.workflow_id.as_str().to_owned())
            .collect();
        for workflow in &mut self.workflows {
            if workflow.workflow_id.id_status() != IdStatus::Legacy {
                continue;
            }
            let suggestion = legacy::suggest(
                workflow.source_kind,
                workflow.workflow_id.as_str(),
                &workflow.source_ref,
                &taken,
            );
            if let Some(s) = &suggestion {
                taken.insert(s.as_str().to_owned());
            }
            workflow.suggested_id = suggestion;
        }
    }

    /// The library the catalog's workflows were compiled with (to compile new text the same
    /// way, e.g. before saving it).
    pub fn library(&self) -> &Arc<WorkflowLibrary> {
        &self.library
    }

    /// Discovery rows (`list_workflows`), in the locked order.
    pub fn summaries(&self) -> Vec<WorkflowSummary> {
        self.workflows.iter().map(LoadedWorkflow::summary).collect()
    }

    pub fn workflows(&self) -> &[LoadedWorkflow] {
        &self.workflows
    }

    /// Documents that did not load, in load order.
    pub fn problems(&self) -> &[SourceProblem] {
        &self.problems
    }

    /// The problem of a document that declares `id` but did not load (invalid or unreadable;
    /// a shadowed copy is not one: the id resolves to the winner).
    pub fn problem_of(&self, id: &str) -> Option<&SourceProblem> {
        self.problems.iter().find(|p| {
            p.workflow_id.as_deref() == Some(id) && !matches!(p.kind, ProblemKind::Shadowed { .. })
        })
    }

    /// The workflow with exactly this id.
    pub fn get(&self, id: &str) -> Option<&LoadedWorkflow> {
        self.workflows.iter().find(|w| w.workflow_id.as_str() == id)
    }

    /// Ids close to one that does not resolve ("did you mean"), best first, at most three: the
    /// same id in another case, an id that only adds a namespace (`coding_task` ->
    /// `wr.coding_task`), then ids within a small edit distance (typos) or whose name matches.
    pub fn suggest(&self, id: &str) -> Vec<String> {
        let wanted = id.trim().to_lowercase();
        if wanted.is_empty() {
            return Vec::new();
        }
        let mut scored: Vec<(usize, String)> = Vec::new();
        for workflow in &self.workflows {
            let candidate = workflow.workflow_id.as_str();
            let lower = candidate.to_lowercase();
            let bare = lower.rsplit('.').next().unwrap_or(&lower);
            let name = workflow
                .compiled
                .snapshot
                .body
                .name
                .as_deref()
                .unwrap_or_default()
                .to_lowercase();
            let score = if lower == wanted {
                0
            } else if bare == wanted || lower.ends_with(&format!(".{wanted}")) {
                1
            } else if name == wanted || name.replace(' ', "_") == wanted {
                2
            } else {
                let distance = strsim::damerau_levenshtein(&wanted, &lower)
                    .min(strsim::damerau_levenshtein(&wanted, bare));
                if distance > (wanted.len() / 4).max(2) {
                    continue;
                }
                2 + distance
            };
            scored.push((score, candidate.to_owned()));
        }
        scored.sort();
        scored.dedup_by(|a, b| a.1 == b.1);
        scored.into_iter().take(3).map(|(_, id)| id).collect()
    }

    /// Resolves an id as a caller wrote it: an exact id first, then a legacy bundled alias.
    pub fn resolve(&self, id: &str) -> Option<Resolved<'_>> {
        if let Some(workflow) = self.get(id) {
            let mut warnings = Vec::new();
            if workflow.workflow_id.id_status() == IdStatus::Legacy {
                warnings.push(SourceWarning::LegacyId {
                    workflow_id: workflow.workflow_id.clone(),
                    suggested_id: workflow.suggested_id.clone(),
                });
            }
            return Some(Resolved {
                workflow,
                summary: workflow.summary(),
                warnings,
            });
        }
        let (alias, canonical) = ALIASES.iter().find(|(alias, _)| *alias == id)?;
        let workflow = self.get(canonical)?;
        let alias_id = WorkflowId::parse(alias).ok()?;
        let mut summary = workflow.summary();
        summary.workflow_id = alias_id;
        summary.id_status = IdStatus::Legacy;
        summary.canonical_id = Some(workflow.workflow_id.clone());
        Some(Resolved {
            workflow,
            summary,
            warnings: vec![SourceWarning::AliasUsed {
                alias: (*alias).to_owned(),
                canonical_id: workflow.workflow_id.clone(),
            }],
        })
    }
}

//! The workflow compiler: authoring JSON -> `CompiledWorkflowSnapshotV1` -> `workflowHash`.
//!
//! A pure function (no I/O, no clock, no environment): the same source and context always yield
//! the same snapshot and hash. The pipeline follows authoring "What happens at compile time":
//!
//! 1. parse the source into the authoring model, collecting every problem with its pointer;
//! 2. expand `template_call` steps in place and inject probes for `required` capabilities;
//! 3. check cross-references (unique ids, loop decision steps);
//! 4. apply features in ascending `featureId` order;
//! 5. resolve contracts into step output requirements;
//! 6. resolve refs (with budgets) and render each step's prompt;
//! 7. assemble the snapshot with the locked orderings and hash it.
//!
//! See `impl/docs/compiler.md` for the render format and the decisions taken here.

mod assemble;
mod content;
pub mod error;
mod expand;
mod features;
pub mod functions;
pub mod ids;
mod ir;
mod language;
pub mod library;
pub mod migrate;
pub(crate) mod parse;
pub mod patch;
mod render;
pub mod source;
mod validate;

use serde_json::Value;
use workrail_spec::compiled::{CompiledWarning, CompiledWarningCode, CompiledWorkflowSnapshotV1};
use workrail_spec::ids::{IdStatus, WorkflowHash};

pub use self::assemble::normalize_schema;
use self::error::{CompileError, CompileErrorCode, CompileErrors};
pub use self::parse::parallel::LANE_REPORT_STEP_ID;
pub use self::render::render_prompt;
use crate::builtins::features::FeatureId;

/// The largest `maxIterations` a loop may declare (a guard against runaway loops).
pub const MAX_LOOP_ITERATIONS: u32 = 1000;

/// Where the source comes from, for the namespace rules (locks §7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Bundled with WorkRail: must use `wr.*`.
    Bundled,
    /// Any other source; `namespace` (`user`, `project`, `repo`) is used for auto-fix ids.
    NonCore { namespace: String },
}

/// What a legacy (dot-free) workflow id does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegacyIdPolicy {
    /// Loading existing workflows: runnable, with a `legacy_workflow_id` warning.
    Warn,
    /// Creating or saving: rejected with a suggested namespaced id.
    Reject,
}

/// The compile context: the only inputs besides the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileContext {
    pub origin: Origin,
    pub legacy_ids: LegacyIdPolicy,
    /// The other workflows of the sources (routines to expand, delegation targets); empty by
    /// default.
    pub library: std::sync::Arc<library::WorkflowLibrary>,
}

impl CompileContext {
    /// A bundled workflow.
    pub fn bundled() -> Self {
        Self {
            origin: Origin::Bundled,
            legacy_ids: LegacyIdPolicy::Reject,
            library: Default::default(),
        }
    }

    /// Loading a non-core workflow (legacy ids warn).
    pub fn load(namespace: &str) -> Self {
        Self {
            origin: Origin::NonCore {
                namespace: namespace.to_owned(),
            },
            legacy_ids: LegacyIdPolicy::Warn,
            library: Default::default(),
        }
    }

    /// Validating a non-core workflow for creation or saving (legacy ids are rejected).
    pub fn authoring(namespace: &str) -> Self {
        Self {
            origin: Origin::NonCore {
                namespace: namespace.to_owned(),
            },
            legacy_ids: LegacyIdPolicy::Reject,
            library: Default::default(),
        }
    }

    /// The same context drawing on `library` for routines and delegation targets.
    pub fn with_library(mut self, library: std::sync::Arc<library::WorkflowLibrary>) -> Self {
        self.library = library;
        self
    }
}

/// A compiled workflow, its hash and its canonical (RFC 8785) bytes, which the hash is taken
/// over and a pin writes: kept so that starting a run never serializes or hashes the workflow
/// again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    pub snapshot: CompiledWorkflowSnapshotV1,
    pub workflow_hash: WorkflowHash,
    pub canonical: workrail_spec::jcs::Canonical<CompiledWorkflowSnapshotV1>,
}

/// Compiles source JSON text (a JSON syntax error is an `invalid_json` compile error).
pub fn compile_str(text: &str, ctx: &CompileContext) -> Result<Compiled, CompileErrors> {
    match serde_json::from_str::<Value>(text) {
        Ok(value) => compile(&value, ctx),
        Err(e) => Err(CompileErrors(vec![CompileError::new(
            CompileErrorCode::InvalidJson,
            "",
            format!(
                "the workflow file is not valid JSON: {e} (line {}, column {}).",
                e.line(),
                e.column()
            ),
            "Fix the JSON syntax (a linter or `jq .` shows the exact spot).",
        )])),
    }
}

/// Compiles a source workflow.
pub fn compile(source: &Value, ctx: &CompileContext) -> Result<Compiled, CompileErrors> {
    let (parsed, mut errors) = parse::parse(source, ctx);
    let Some(workflow) = parsed else {
        return Err(CompileErrors(errors));
    };
    let parse_clean = errors.is_empty();
    let (mut items, mut warnings) = expand::expand(&workflow, &mut errors);
    validate::unique_ids(&items, &mut errors);
    if parse_clean {
        // Placement checks would cascade from steps that failed to parse, so they wait.
        validate::loop_decisions(&items, &workflow.conditions, &mut errors);
    }
    let Some(id) = workflow.id.clone() else {
        return Err(CompileErrors(errors));
    };
    if !errors.is_empty() {
        return Err(CompileErrors(errors));
    }
    warnings.extend(validate::unused_conditions(&items, &workflow.conditions));
    warnings.extend(workflow.language.warnings.iter().cloned());
    warnings.extend(workflow.extras.warnings.iter().cloned());
    content::place_workflow_content(&mut items, &workflow.extras);
    if id.id_status() == IdStatus::Legacy {
        let name = ids::normalize_segment(id.as_str());
        warnings.push(CompiledWarning {
            code: CompiledWarningCode::LegacyWorkflowId,
            message: format!(
                "workflow id `{id}` is a legacy (dot-free) id: it stays runnable, but new and saved workflows need `namespace.name`; rename it to e.g. `user.{name}` (user directory) or `project.{name}` (project)."
            ),
            pointer: Some("/id".to_owned()),
        });
    }
    let features = features::ordered(&workflow.features);
    features::apply(&mut items, &features);
    let explain = features
        .iter()
        .any(|f| f.feature == FeatureId::OutputContracts);
    let contracts = features::resolve_contracts(&mut items, explain);
    let snapshot = assemble::assemble(
        &items,
        assemble::Parts {
            workflow: &workflow,
            id,
            features,
            contracts,
            warnings,
        },
    )
    .map_err(CompileErrors)?;
    let canonical = workrail_spec::jcs::Canonical::of(&snapshot).map_err(|e| {
        CompileErrors(vec![CompileError::new(
            CompileErrorCode::Internal,
            "",
            format!("the compiled snapshot cannot be hashed: {e}"),
            "This is a WorkRail compiler bug; report it with the workflow source.",
        )])
    })?;
    let workflow_hash = WorkflowHash::from_digest(canonical.digest().clone());
    Ok(Compiled {
        snapshot,
        workflow_hash,
        canonical,
    })
}

//! Pinned drift: the on-disk source of a run's workflow no longer compiles to the run's pinned
//! `workflowHash` (locks §6 "Source vs compiled inspection + pinned drift warnings"). The run
//! keeps its pinned snapshot; the drift is surfaced as structured data, never acted on.

use serde::Serialize;
use serde_json::Value;
use workrail_spec::ids::{WorkflowHash, WorkflowId};
use workrail_spec::tools::Warning;

use super::catalog::{Catalog, ProblemKind};
use crate::compiler::Compiled;
use crate::compiler::error::CompileErrors;

/// How the current source relates to the pinned snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum DriftStatus {
    /// The source compiles to a different hash.
    Changed { current_hash: WorkflowHash },
    /// No source defines the workflow any more.
    SourceMissing,
    /// The source no longer compiles.
    SourceInvalid { error_count: usize },
}

/// A pinned-drift warning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PinnedDrift {
    pub workflow_id: WorkflowId,
    pub pinned_hash: WorkflowHash,
    pub status: DriftStatus,
}

impl PinnedDrift {
    pub const CODE: &'static str = "pinned_workflow_drift";

    pub fn to_warning(&self) -> Warning {
        let what = match &self.status {
            DriftStatus::Changed { current_hash } => {
                format!("its source now compiles to {current_hash}")
            }
            DriftStatus::SourceMissing => "its source is no longer found".to_owned(),
            DriftStatus::SourceInvalid { error_count } => {
                format!("its source no longer compiles ({error_count} problem(s))")
            }
        };
        Warning::new(
            Self::CODE,
            format!(
                "This run stays pinned to workflow '{}' {}; {what}. The run continues on its pinned snapshot; start a new run to use the current source.",
                self.workflow_id, self.pinned_hash
            ),
        )
    }

    /// The structured form.
    pub fn details(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

/// Compares a pinned hash with the current compile result of the workflow's source (`None`
/// when no source defines it). `None` means in sync.
pub fn drift_from(
    workflow_id: &WorkflowId,
    pinned_hash: &WorkflowHash,
    current: Option<Result<&Compiled, &CompileErrors>>,
) -> Option<PinnedDrift> {
    let status = match current {
        None => DriftStatus::SourceMissing,
        Some(Err(errors)) => DriftStatus::SourceInvalid {
            error_count: errors.errors().len(),
        },
        Some(Ok(compiled)) if &compiled.workflow_hash == pinned_hash => return None,
        Some(Ok(compiled)) => DriftStatus::Changed {
            current_hash: compiled.workflow_hash.clone(),
        },
    };
    Some(PinnedDrift {
        workflow_id: workflow_id.clone(),
        pinned_hash: pinned_hash.clone(),
        status,
    })
}

/// Drift of a pinned run against the catalog's current sources.
pub fn check_drift(
    catalog: &Catalog,
    workflow_id: &WorkflowId,
    pinned_hash: &WorkflowHash,
) -> Option<PinnedDrift> {
    if let Some(workflow) = catalog.get(workflow_id.as_str()) {
        return drift_from(workflow_id, pinned_hash, Some(Ok(&workflow.compiled)));
    }
    let invalid = catalog.problems().iter().find_map(|p| match &p.kind {
        ProblemKind::Invalid(errors) if p.workflow_id.as_deref() == Some(workflow_id.as_str()) => {
            Some(errors)
        }
        _ => None,
    });
    drift_from(workflow_id, pinned_hash, invalid.map(Err))
}

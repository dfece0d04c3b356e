//! Pinned drift: the on-disk source of a run's workflow no longer compiles to the run's pinned
//! `workflowHash` (locks §6 "Source vs compiled inspection + pinned drift warnings"). The run
//! keeps its pinned snapshot; the drift is surfaced as structured data, never acted on.

use workrail_spec::ids::{WorkflowHash, WorkflowId};
use workrail_spec::tools::Warning;
pub use workrail_spec::tools::{DriftStatus, PinnedDriftView as PinnedDrift};

use super::catalog::{Catalog, ProblemKind};
use crate::compiler::Compiled;
use crate::compiler::error::CompileErrors;

/// The code of a pinned-drift warning.
pub const PINNED_DRIFT_CODE: &str = "pinned_workflow_drift";

/// The text-first warning of a drift, with its structured form.
pub fn drift_warning(drift: &PinnedDrift) -> Warning {
    let what = match &drift.status {
        DriftStatus::Changed { current_hash } => {
            format!("its source now compiles to {current_hash}")
        }
        DriftStatus::SourceMissing => "no workflow source defines it any more".to_owned(),
        DriftStatus::SourceInvalid { error_count } => {
            format!("its source no longer compiles ({error_count} problem(s))")
        }
    };
    let mut warning = Warning::new(
        PINNED_DRIFT_CODE,
        format!(
            "This run stays pinned to the version of workflow '{}' it started with ({}); {what}. The run continues on that pinned version, so these tokens keep working; start a new run with start_workflow to use the current source.",
            drift.workflow_id, drift.pinned_hash
        ),
    );
    warning.pinned_drift = Some(Box::new(drift.clone()));
    warning
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

//! The list of generated JSON Schemas and how to render them deterministically.
//!
//! `spec/schemas/<group>/<Name>.schema.json` is generated from this list. Output is stable:
//! keys sorted (RFC 8785 order), two-space indentation, trailing newline, no timestamps.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;

use crate::blocker::BlockerReport;
use crate::bundle::ExportBundleV1;
use crate::compiled::CompiledWorkflowSnapshotV1;
use crate::error::ErrorEnvelope;
use crate::event::SessionEvent;
use crate::manifest::ManifestRecord;
use crate::preferences::PreferenceWarningV1;
use crate::snapshot::ExecutionSnapshotFileV1;
use crate::token::TokenPayload;
use crate::tools::{
    CheckpointWorkflowInput, ContinueWorkflowInput, ExecutionOutput, InspectWorkflowInput,
    InspectWorkflowOutput, ListWorkflowsInput, ListWorkflowsOutput, ResumeSessionInput,
    ResumeSessionOutput, StartSessionInput, StartWorkflowInput,
};

/// One generated schema file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedSchema {
    /// Path relative to `spec/schemas/`.
    pub rel_path: String,
    /// File contents.
    pub contents: String,
}

fn render<T: JsonSchema>(group: &str, file_stem: &str) -> GeneratedSchema {
    let generator = SchemaSettings::draft2020_12().into_generator();
    let schema = generator.into_root_schema_for::<T>();
    // Round-trip through RFC 8785 so key order never depends on serde_json features.
    let canonical = crate::jcs::to_canonical_string(&schema).unwrap_or_default();
    let value: serde_json::Value = serde_json::from_str(&canonical).unwrap_or_default();
    let mut contents = serde_json::to_string_pretty(&value).unwrap_or_default();
    contents.push('\n');
    GeneratedSchema {
        rel_path: format!("{group}/{file_stem}.schema.json"),
        contents,
    }
}

/// Every generated schema, in a fixed order.
pub fn all_schemas() -> Vec<GeneratedSchema> {
    vec![
        render::<SessionEvent>("durable", "SessionEvent"),
        render::<ManifestRecord>("durable", "ManifestRecord"),
        render::<ExecutionSnapshotFileV1>("durable", "ExecutionSnapshotFileV1"),
        render::<CompiledWorkflowSnapshotV1>("durable", "CompiledWorkflowSnapshotV1"),
        render::<ExportBundleV1>("durable", "ExportBundleV1"),
        render::<TokenPayload>("durable", "TokenPayload"),
        render::<BlockerReport>("durable", "BlockerReport"),
        render::<PreferenceWarningV1>("durable", "PreferenceWarningV1"),
        render::<crate::config::ServerRecordV1>("durable", "ServerRecordV1"),
        render::<ErrorEnvelope>("tools", "ErrorEnvelope"),
        render::<ListWorkflowsInput>("tools", "list_workflows.input"),
        render::<ListWorkflowsOutput>("tools", "list_workflows.output"),
        render::<InspectWorkflowInput>("tools", "inspect_workflow.input"),
        render::<InspectWorkflowOutput>("tools", "inspect_workflow.output"),
        render::<StartWorkflowInput>("tools", "start_workflow.input"),
        render::<ExecutionOutput>("tools", "start_workflow.output"),
        render::<ContinueWorkflowInput>("tools", "continue_workflow.input"),
        render::<ExecutionOutput>("tools", "continue_workflow.output"),
        render::<CheckpointWorkflowInput>("tools", "checkpoint_workflow.input"),
        render::<ExecutionOutput>("tools", "checkpoint_workflow.output"),
        render::<ResumeSessionInput>("tools", "resume_session.input"),
        render::<ResumeSessionOutput>("tools", "resume_session.output"),
        render::<StartSessionInput>("tools", "start_session.input"),
        render::<ExecutionOutput>("tools", "start_session.output"),
    ]
}

//! The port between the MCP server and the protocol use-cases.
//!
//! The server only knows this trait, so its argument validation, error mapping and text-first
//! rendering can be tested in-process against a small fake. [`crate::protocol::Workrail`]
//! implements it for production.

use workrail_spec::error::ErrorEnvelope;
use workrail_spec::tools::{
    CheckpointWorkflowInput, ContinueWorkflowInput, ExecutionOutput, InspectWorkflowInput,
    InspectWorkflowOutput, ListWorkflowsInput, ListWorkflowsOutput, ResumeSessionInput,
    ResumeSessionOutput, StartSessionInput, StartWorkflowInput,
};

use crate::features::Features;

/// The synchronous use-cases behind the tools (they do file I/O and fsync; the server calls
/// them on the blocking thread pool).
pub trait ToolBackend: Send + Sync + 'static {
    /// The feature flags: which flagged tools the server lists and accepts.
    fn features(&self) -> Features {
        Features::default()
    }
    fn list_workflows(
        &self,
        input: ListWorkflowsInput,
    ) -> Result<ListWorkflowsOutput, ErrorEnvelope>;
    fn inspect_workflow(
        &self,
        input: InspectWorkflowInput,
    ) -> Result<InspectWorkflowOutput, ErrorEnvelope>;
    fn start_workflow(&self, input: StartWorkflowInput) -> Result<ExecutionOutput, ErrorEnvelope>;
    fn continue_workflow(
        &self,
        input: ContinueWorkflowInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope>;
    fn checkpoint_workflow(
        &self,
        input: CheckpointWorkflowInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope>;
    fn resume_session(
        &self,
        input: ResumeSessionInput,
    ) -> Result<ResumeSessionOutput, ErrorEnvelope>;
    fn start_session(&self, input: StartSessionInput) -> Result<ExecutionOutput, ErrorEnvelope>;
    /// The deterministic text-first rendering of an execution response (`content[0].text`).
    fn render_execution(&self, output: &ExecutionOutput) -> String;
}

impl ToolBackend for crate::protocol::Workrail {
    fn features(&self) -> Features {
        crate::protocol::Workrail::features(self).clone()
    }
    fn list_workflows(
        &self,
        input: ListWorkflowsInput,
    ) -> Result<ListWorkflowsOutput, ErrorEnvelope> {
        crate::protocol::Workrail::list_workflows(self, input)
    }
    fn inspect_workflow(
        &self,
        input: InspectWorkflowInput,
    ) -> Result<InspectWorkflowOutput, ErrorEnvelope> {
        crate::protocol::Workrail::inspect_workflow(self, input)
    }
    fn start_workflow(&self, input: StartWorkflowInput) -> Result<ExecutionOutput, ErrorEnvelope> {
        crate::protocol::Workrail::start_workflow(self, input)
    }
    fn continue_workflow(
        &self,
        input: ContinueWorkflowInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope> {
        crate::protocol::Workrail::continue_workflow(self, input)
    }
    fn checkpoint_workflow(
        &self,
        input: CheckpointWorkflowInput,
    ) -> Result<ExecutionOutput, ErrorEnvelope> {
        crate::protocol::Workrail::checkpoint_workflow(self, input)
    }
    fn resume_session(
        &self,
        input: ResumeSessionInput,
    ) -> Result<ResumeSessionOutput, ErrorEnvelope> {
        crate::protocol::Workrail::resume_session(self, input)
    }
    fn start_session(&self, input: StartSessionInput) -> Result<ExecutionOutput, ErrorEnvelope> {
        crate::protocol::Workrail::start_session(self, input)
    }
    fn render_execution(&self, output: &ExecutionOutput) -> String {
        crate::protocol::render_text(output)
    }
}

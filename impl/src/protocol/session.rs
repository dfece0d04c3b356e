//! `start_session` (contract "start_session"; decision D48): a checkpoint-only session.
//!
//! The locks give durable notes exactly one home: `node_output_appended` on a node of a run, and
//! nodes need the run's pinned `workflowHash` and a snapshot. Rather than invent a session-level
//! scope or a fourth token kind, a checkpoint-only session is a session whose one run follows
//! WorkRail's own one-step workflow `wr.checkpoint_session`: the agent records its notes with
//! `checkpoint_workflow` (stateToken + checkpointToken, as the lock on its input requires), and
//! everything else (replay, rewinds, export/import, `resume_session`) works unchanged. The
//! workflow is compiled from the text below at each call and is not in the discovery catalog, so
//! `list_workflows` never offers it and `start_workflow` cannot start it by id.

use workrail_spec::closed::WorkflowSourceKind;
use workrail_spec::error::ErrorEnvelope;
use workrail_spec::tools::{ExecutionOutput, StartSessionInput, StartWorkflowInput};

use super::{Workrail, invariant, start};
use crate::sources::memory::MemorySource;
use crate::sources::{Catalog, WorkflowSource};

/// The id of the checkpoint-only workflow.
pub const CHECKPOINT_SESSION_WORKFLOW_ID: &str = "wr.checkpoint_session";

/// Where the run says its workflow came from (`run_started.workflowSourceRef`).
const SOURCE_REF: &str = "builtin/checkpoint_session.json";

const CHECKPOINT_SESSION_WORKFLOW: &str = r#"{
  "id": "wr.checkpoint_session",
  "name": "Checkpoint-only session",
  "description": "Durable notes for work that follows no workflow: record progress with checkpoint_workflow.",
  "steps": [
    {
      "id": "record_progress",
      "title": "Record progress",
      "prompt": "This session follows no workflow; it keeps durable notes so that work survives rewinds, restarts and new chats. Work as the user asks. After each substantial piece of work, call checkpoint_workflow with this response's stateToken and checkpointToken and output.notesMarkdown: a fresh recap of that piece only (what was done, found, decided, what is next). Continue with the tokens each checkpoint returns. To follow a real workflow, call start_workflow. Acknowledge this step with continue_workflow only when the user is done with this session: that closes it."
    }
  ]
}"#;

pub(super) fn start_session(
    wr: &Workrail,
    StartSessionInput {}: StartSessionInput,
) -> Result<ExecutionOutput, ErrorEnvelope> {
    let source = MemorySource::new(WorkflowSourceKind::Bundled)
        .with(SOURCE_REF, CHECKPOINT_SESSION_WORKFLOW);
    let sources: [&dyn WorkflowSource; 1] = [&source];
    let catalog = Catalog::load(&sources);
    if catalog.resolve(CHECKPOINT_SESSION_WORKFLOW_ID).is_none() {
        return Err(invariant(
            "WorkRail's own checkpoint-only workflow does not compile",
        ));
    }
    start::start_in(
        wr,
        &catalog,
        StartWorkflowInput {
            workflow_id: CHECKPOINT_SESSION_WORKFLOW_ID.into(),
            context: None,
            preferences: Vec::new(),
            preset: None,
        },
    )
}

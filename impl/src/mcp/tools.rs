//! The MCP tool definitions: the one canonical source of every tool's name, title, description
//! and input/output schema (locks §8 "Single canonical source of truth").
//!
//! Schemas are derived with `schemars` from the `workrail_spec::tools` types, exactly as the
//! committed `spec/schemas/tools/*` files are; descriptions live only here. `tools/list`, the
//! generated catalog `impl/tools/catalog.json` and `impl/docs/mcp.md`'s tool list all come from
//! [`tool_defs`]; change a tool here and re-bless the catalog.

use std::sync::Arc;

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::{Map, Value};
use workrail_spec::error::ErrorEnvelope;
use workrail_spec::tools::{
    CheckpointWorkflowInput, ContinueWorkflowInput, ExecutionOutput, InspectWorkflowInput,
    InspectWorkflowOutput, ListWorkflowsInput, ListWorkflowsOutput, ResumeSessionInput,
    ResumeSessionOutput, StartSessionInput, StartWorkflowInput,
};

use crate::features::{Feature, Features};

/// The tools, as a closed set (the order of `workrail_spec::tools::TOOL_NAMES`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolName {
    ListWorkflows,
    InspectWorkflow,
    StartWorkflow,
    ContinueWorkflow,
    CheckpointWorkflow,
    ResumeSession,
    StartSession,
}

impl ToolName {
    /// Every tool, in `TOOL_NAMES` order.
    pub const ALL: [ToolName; 7] = [
        ToolName::ListWorkflows,
        ToolName::InspectWorkflow,
        ToolName::StartWorkflow,
        ToolName::ContinueWorkflow,
        ToolName::CheckpointWorkflow,
        ToolName::ResumeSession,
        ToolName::StartSession,
    ];

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolName::ListWorkflows => "list_workflows",
            ToolName::InspectWorkflow => "inspect_workflow",
            ToolName::StartWorkflow => "start_workflow",
            ToolName::ContinueWorkflow => "continue_workflow",
            ToolName::CheckpointWorkflow => "checkpoint_workflow",
            ToolName::ResumeSession => "resume_session",
            ToolName::StartSession => "start_session",
        }
    }

    /// The feature flag that switches the tool on and off; `None` for the core tools.
    pub fn feature(self) -> Option<Feature> {
        match self {
            ToolName::ListWorkflows
            | ToolName::InspectWorkflow
            | ToolName::StartWorkflow
            | ToolName::ContinueWorkflow => None,
            ToolName::CheckpointWorkflow => Some(Feature::CheckpointWorkflow),
            ToolName::ResumeSession => Some(Feature::ResumeSession),
            ToolName::StartSession => Some(Feature::StartSession),
        }
    }

    /// Whether `features` switch the tool on (core tools always are).
    pub fn enabled(self, features: &Features) -> bool {
        self.feature().is_none_or(|f| features.enabled(f))
    }

    /// Looks a wire name up.
    pub fn parse(name: &str) -> Option<ToolName> {
        ToolName::ALL.into_iter().find(|t| t.as_str() == name)
    }

    /// Whether the tool is an execution tool (text-first output rendered by the protocol).
    pub fn is_execution(self) -> bool {
        matches!(
            self,
            ToolName::StartWorkflow
                | ToolName::ContinueWorkflow
                | ToolName::CheckpointWorkflow
                | ToolName::StartSession
        )
    }
}

/// Behaviour hints published as MCP tool annotations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolHints {
    /// Never writes durable state.
    pub read_only: bool,
    /// Repeating the call with the same arguments has no further effect.
    pub idempotent: bool,
}

/// One tool definition.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    pub name: ToolName,
    pub title: &'static str,
    pub description: &'static str,
    pub hints: ToolHints,
    /// JSON Schema (draft 2020-12) of the arguments.
    pub input_schema: Map<String, Value>,
    /// JSON Schema (draft 2020-12) of `structuredContent` on success.
    pub output_schema: Map<String, Value>,
}

const TOKENS_RULE: &str = "Tokens (`stateToken`, `ackToken`, `checkpointToken`) are opaque, signed handles: copy them exactly as returned, never edit, shorten, decode or construct them, and always use the tokens from the response you are acting on. Never track or send execution state yourself (completed steps, loop counters): WorkRail derives it from the tokens. Do not guess payload shapes: follow the inputSchema and the examples WorkRail returns.";

const ERRORS_RULE: &str = "Errors come back as a tool result with isError=true and an error envelope {code, message, suggestion, retry, details?} in structuredContent: do what `suggestion` says, and retry only as `retry` allows (`retryable_immediate`: repeat the same call; `retryable_after_ms`: wait `afterMs`, then repeat it; `not_retryable`: change the arguments first). `VALIDATION_ERROR` names the bad argument and the fix.";

const TOKEN_ERRORS_RULE: &str = "`TOKEN_*` codes mean a token was altered, mixed between runs or steps, or is unknown to this data directory: use the exact tokens of the latest response for that run (the run label beside them says which run), or call resume_session to find the run's current stateToken.";

const LIST_DESCRIPTION: &str = "List the workflows this WorkRail server can run (bundled `wr.*` workflows plus project and user workflow directories). Read-only. Takes no arguments. Each row has `workflowId`, `name`, `description`, `kind` (workflow | routine), `idStatus` (namespaced | legacy, with a `suggestedId` for legacy ids) and `sourceKind`; rows are sorted by namespace, then kind, then id. Workflow files that did not load are listed under `problems` (file, declared id, first errors): tell the user. Next: `inspect_workflow` to preview one, or `start_workflow` with its `workflowId`.";

const INSPECT_DESCRIPTION: &str = "Inspect one workflow before starting it. Read-only: it never starts or changes a run. `workflowId` is an id from `list_workflows` (e.g. `wr.coding_task`). `mode`: `metadata` (default: identity, description and the `workflowHash` a run would be pinned to) or `preview` (metadata plus every step's title and rendered prompt). Unknown ids return `WORKFLOW_NOT_FOUND`; call `list_workflows` for the valid ids.";

const START_DESCRIPTION: &str = "Start a new run of a workflow and get its first pending step. The run is pinned to the workflow's current `workflowHash`, so later edits of the workflow file never change it. Arguments: `workflowId` (from `list_workflows`); optional `context`, a JSON object of external inputs (ticket id, repo path, parameters; at most 256 KiB measured as RFC 8785 canonical UTF-8 bytes; not echoed back; never put progress or notes there); optional `preferences`, as an object `{\"autonomy\": …, \"riskPolicy\": …}` (the shape responses show) or a list of `{key, value}` changes (`autonomy`: guided | full_auto_stop_on_user_deps | full_auto_never_stop, `riskPolicy`: conservative | balanced | aggressive; each key at most once) and optional `preset` (a WorkRail mode: guided | full_auto_stop_on_user_deps | full_auto_never_stop, setting both keys; `preferences` entries override it). When the preferences exceed the workflow's recommendation, `warnings` says so and names the highest automation considered safe; it never blocks. The response text is the step to perform; structuredContent carries `stateToken`, `ackToken`, `checkpointToken`, `pending` {stepId, title, prompt, requireConfirmation}, `isComplete`, `nextIntent`, `session`, `run`, `preferences`. Then perform `pending.prompt` and call `continue_workflow`. Several runs may be active in one chat: keep each run's tokens together. ";

const CONTINUE_DESCRIPTION: &str = "Advance or resume a run. With `ackToken` (from the latest response; `stateToken` may be sent too, from the same response, or left out): acknowledge that you performed the pending step and advance. Idempotent: repeating the same ackToken returns the identical recorded response and never advances twice. If you send an ackToken that was already used with DIFFERENT output (e.g. the user rewound the chat and you redid the step), the response carries `replay`: your new output was NOT recorded; call again with `replay.forkAckToken` and the same output to record it as a new branch. Attach `output` on the ack: `output.notesMarkdown` is a fresh recap of this step only (what you did, found, decided; not cumulative; at most 4096 UTF-8 bytes, longer notes are truncated) and `output.artifacts` are the structured results the step's contract asks for (each `{kind, ...}`). On any step you may also add: `{kind: \"wr.capability_observation\", capability, status: available|unavailable, evidence, basis?: attempt|claim, failureCode?}` after trying a capability; `{kind: \"workflow_divergence\", reason, summary, relatedStepId?}` when you intentionally deviate from the step; and `{kind: \"wr.user_only_dependency\", reason, summary}` when only the user can unblock you (`reason`: needs_user_secret_or_token, needs_user_account_access, needs_user_artifact, needs_user_approval, needs_user_environment_action, or needs_user_choice with `nonAssumableChoice` for a choice the step marks non-assumable): guided and full_auto_stop_on_user_deps then block, full_auto_never_stop records a gap and goes on. When the response is `kind: \"blocked\"`, read `blockers` (code, pointer, message, suggestedFix) and the example they show, fix the output or context, and call again with the tokens of that blocked response. Optional `context` is a JSON delta merged into the run's inputs (JSON only, at most 256 KiB, not echoed). Optional `preferences` / `preset` (as in `start_workflow`) change the run's mode from this step on; the ack is judged under them. Without `ackToken`: rehydrate only; it re-shows the pending step and a bounded recap of earlier steps and writes nothing; use it after a restart, a rewind or a lost chat. To fork from an earlier step on purpose (e.g. after the user rewound the chat), call with only that step's older `stateToken`, then acknowledge with the fresh `ackToken` it returns: WorkRail starts a new branch from that step, and nothing recorded is lost. In full-auto modes, never silently skip a question meant for the user: gather context, make an explicit assumption and disclose it (and anything skipped) in `output.notesMarkdown`. Stop when `isComplete` is true (`pending` is null). ";

const CHECKPOINT_DESCRIPTION: &str = "Record durable progress without advancing the run: use it when substantial work happens outside the step loop, so it survives chat rewinds and restarts. Arguments: `stateToken` and `checkpointToken` from the latest response of that run, and `output` (`notesMarkdown`: a fresh recap, at most 4096 UTF-8 bytes; optional `artifacts`). Idempotent: the same `(stateToken, checkpointToken)` never records twice and returns the same response. The pending step stays the same; continue with the tokens this call returns. ";

const RESUME_DESCRIPTION: &str = "Find the run to resume in a brand-new chat, when the user has no stateToken at hand (\"resume my session about the billing bug\"). Read-only: it never changes a session or a run. Returns at most 5 candidates, best first, each the latest tip of one run: `sessionId`, `runId`, `nodeId`, `workflowId`, `runLabel`, `status`, `pending` {stepId, title} (absent when complete), `whyMatched`, `snippet` (the tip's latest recap notes, at most 1024 bytes), `lastActivityEventIndex` and a `stateToken` (opaque: copy it exactly). Ranking is deterministic, in tiers: same git HEAD commit, then git branch (your `gitBranch` is a prefix of the recorded branch), then every word of `text` in the tip's latest recap notes, then every word of `text` in the workflow id or name, then most recent activity. Arguments: optional `query` {`text`, `gitHeadSha`, `gitBranch`}. WorkRail does not read your workspace for this: to match by git, run `git rev-parse HEAD` and `git branch --show-current` in the user's repository and pass the results as `gitHeadSha` (all 40 characters) and `gitBranch`. Sessions that fail validation are never offered; `skippedUnhealthySessions` counts them and `skippedSessions` names them (`sessionId`, `health`, `reason`). Next: confirm the candidate with the user when several fit, then call `continue_workflow` with only its `stateToken` to recover the pending step (and keep going from that response's tokens).";

const START_SESSION_DESCRIPTION: &str = "Open a checkpoint-only session: durable notes for work that happens without a workflow (the user asked to keep track of it, but no workflow fits). No arguments. It starts a run of WorkRail's own one-step workflow `wr.checkpoint_session` and answers like `start_workflow`: keep its `stateToken` and `checkpointToken`, and after each substantial piece of work call `checkpoint_workflow` with them and `output.notesMarkdown` (a fresh recap of that piece only); continue with the tokens each checkpoint returns. The notes survive rewinds and new chats (`resume_session` finds them). To follow a real workflow instead, call `start_workflow`. Acknowledge the session's pending step (`continue_workflow` with its ackToken) only to close the session. ";

/// Every tool definition, in `workrail_spec::tools::TOOL_NAMES` order.
pub fn tool_defs() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: ToolName::ListWorkflows,
            title: "List workflows",
            description: LIST_DESCRIPTION,
            hints: ToolHints {
                read_only: true,
                idempotent: true,
            },
            input_schema: schema_of::<ListWorkflowsInput>(),
            output_schema: schema_of::<ListWorkflowsOutput>(),
        },
        ToolDef {
            name: ToolName::InspectWorkflow,
            title: "Inspect a workflow",
            description: INSPECT_DESCRIPTION,
            hints: ToolHints {
                read_only: true,
                idempotent: true,
            },
            input_schema: schema_of::<InspectWorkflowInput>(),
            output_schema: schema_of::<InspectWorkflowOutput>(),
        },
        ToolDef {
            name: ToolName::StartWorkflow,
            title: "Start a workflow run",
            description: START_DESCRIPTION,
            hints: ToolHints {
                read_only: false,
                idempotent: false,
            },
            input_schema: schema_of::<StartWorkflowInput>(),
            output_schema: schema_of::<ExecutionOutput>(),
        },
        ToolDef {
            name: ToolName::ContinueWorkflow,
            title: "Continue a workflow run",
            description: CONTINUE_DESCRIPTION,
            hints: ToolHints {
                read_only: false,
                idempotent: true,
            },
            input_schema: schema_of::<ContinueWorkflowInput>(),
            output_schema: schema_of::<ExecutionOutput>(),
        },
        ToolDef {
            name: ToolName::CheckpointWorkflow,
            title: "Checkpoint a workflow run",
            description: CHECKPOINT_DESCRIPTION,
            hints: ToolHints {
                read_only: false,
                idempotent: true,
            },
            input_schema: schema_of::<CheckpointWorkflowInput>(),
            output_schema: schema_of::<ExecutionOutput>(),
        },
        ToolDef {
            name: ToolName::ResumeSession,
            title: "Find a run to resume",
            description: RESUME_DESCRIPTION,
            hints: ToolHints {
                read_only: true,
                idempotent: true,
            },
            input_schema: schema_of::<ResumeSessionInput>(),
            output_schema: schema_of::<ResumeSessionOutput>(),
        },
        ToolDef {
            name: ToolName::StartSession,
            title: "Start a checkpoint-only session",
            description: START_SESSION_DESCRIPTION,
            hints: ToolHints {
                read_only: false,
                idempotent: false,
            },
            input_schema: schema_of::<StartSessionInput>(),
            output_schema: schema_of::<ExecutionOutput>(),
        },
    ]
}

/// The definitions of the tools `features` switch on, in `TOOL_NAMES` order.
pub fn enabled_tool_defs(features: &Features) -> Vec<ToolDef> {
    tool_defs()
        .into_iter()
        .filter(|d| d.name.enabled(features))
        .collect()
}

impl ToolDef {
    /// The full agent-facing description: the tool's own text plus the shared token and error
    /// rules (execution tools) or the error rule (read-only tools).
    pub fn full_description(&self) -> String {
        if self.name.is_execution() {
            format!(
                "{}{TOKENS_RULE} {ERRORS_RULE} {TOKEN_ERRORS_RULE}",
                self.description
            )
        } else {
            format!("{} {ERRORS_RULE}", self.description)
        }
    }

    /// The rmcp wire definition served by `tools/list`.
    pub fn to_rmcp(&self) -> rmcp::model::Tool {
        let annotations = rmcp::model::ToolAnnotations::new()
            .read_only(self.hints.read_only)
            .destructive(false)
            .idempotent(self.hints.idempotent)
            .open_world(false);
        rmcp::model::Tool::new(
            self.name.as_str(),
            self.full_description(),
            Arc::new(self.input_schema.clone()),
        )
        .with_title(self.title)
        .with_raw_output_schema(Arc::new(self.output_schema.clone()))
        .with_annotations(annotations)
    }
}

/// The JSON Schema of the error envelope carried in `structuredContent` of error results.
pub fn error_schema() -> Map<String, Value> {
    schema_of::<ErrorEnvelope>()
}

/// The root JSON Schema (draft 2020-12) of a type, generated exactly like
/// `workrail_spec::schema_catalog` does, so the served schemas equal the committed ones.
fn schema_of<T: JsonSchema>() -> Map<String, Value> {
    let generator = SchemaSettings::draft2020_12().into_generator();
    let mut schema = generator.into_root_schema_for::<T>();
    std::mem::take(schema.ensure_object())
}

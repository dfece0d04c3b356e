//! Input and output types of the MCP tools (contract "Tool Set", "Request/Response Shapes").
//!
//! These types are the one canonical definition of the tool surface: the server derives its
//! input schemas from them and the committed `spec/schemas/tools/*` files are generated from them
//! (locks §8). Inputs reject unknown fields so a mistyped argument gets a precise error.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::blocker::Blocker;
use crate::closed::{
    NextIntent, RecapTruncationPolicy, RunStatus, WhyMatched, WorkflowKind, WorkflowSourceKind,
};
use crate::event::{EffectivePreferences, PreferenceDelta};
use crate::ids::{
    EventIndex, IdStatus, NodeId, RunId, SessionId, StepId, WorkflowHash, WorkflowId,
};
use crate::preferences::{ModePreset, PreferenceWarningV1};

/// Every tool of the locked set this implementation offers (contract "Tool Set"; no projection
/// tools, locks §6): the four core tools, then the feature-flagged `checkpoint_workflow`,
/// `resume_session` and `start_session`. A server lists the core tools plus the flagged tools
/// switched on.
pub const TOOL_NAMES: [&str; 7] = [
    "list_workflows",
    "inspect_workflow",
    "start_workflow",
    "continue_workflow",
    "checkpoint_workflow",
    "resume_session",
    "start_session",
];

/// `list_workflows` takes no arguments.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListWorkflowsInput {}

/// One discovery row (locks §7 "Discovery output to support migration UX").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowSummary {
    pub workflow_id: WorkflowId,
    pub name: String,
    pub description: String,
    pub kind: WorkflowKind,
    pub id_status: IdStatus,
    /// Set when the row was reached through an alias.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub canonical_id: Option<WorkflowId>,
    /// Deterministic namespaced rename for legacy ids.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suggested_id: Option<WorkflowId>,
    pub source_kind: WorkflowSourceKind,
}

/// `list_workflows` output: rows sorted by namespace, then kind (workflow first), then id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListWorkflowsOutput {
    pub workflows: Vec<WorkflowSummary>,
    /// Workflow files that did not load (invalid, unreadable, or a duplicate id), so their
    /// authors see why; absent when every file loaded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<WorkflowProblemView>,
}

/// A workflow file that did not load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkflowProblemView {
    /// Where it came from (`project`, `user`, …).
    pub source_kind: WorkflowSourceKind,
    /// The file, as its source names it.
    pub source_ref: String,
    /// Where the file is on this machine (absent for sources that are not files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The id the file declares, when it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_id: Option<String>,
    /// `invalid`, `unreadable` or `duplicate_id`.
    pub problem: String,
    /// The first errors (at most 5), each with where and how to fix it.
    pub errors: Vec<String>,
}

/// What `inspect_workflow` returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum InspectMode {
    /// Identity, description, capabilities and hash.
    #[default]
    Metadata,
    /// Metadata plus the rendered step prompts.
    Preview,
}

/// `inspect_workflow` input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InspectWorkflowInput {
    pub workflow_id: String,
    #[serde(default)]
    pub mode: InspectMode,
}

/// A step as shown by `inspect_workflow` in preview mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepPreview {
    pub step_id: StepId,
    pub title: String,
    pub prompt: String,
    /// Authored fields of the step with no run-time effect, kept verbatim in the compiled
    /// snapshot (`language.kept`), by name; absent when none.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub kept: std::collections::BTreeMap<String, Value>,
}

/// `inspect_workflow` output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InspectWorkflowOutput {
    pub workflow: WorkflowSummary,
    /// The hash the workflow compiles to now (what `start_workflow` would pin).
    pub workflow_hash: WorkflowHash,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepPreview>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
    /// Authored workflow fields with no run-time effect (`version`, `about`, `examples`, ...),
    /// kept verbatim in the compiled snapshot, by name; absent when none.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub kept: std::collections::BTreeMap<String, Value>,
}

/// Durable output sent with an ack or a checkpoint.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OutputInput {
    /// A fresh recap of this step only (not cumulative), at most 4096 UTF-8 bytes; longer notes
    /// are truncated with `\n\n[TRUNCATED]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes_markdown: Option<String>,
    /// Structured artifacts, each `{kind, ...}`, validated against the step's contract.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Map<String, Value>>,
}

impl OutputInput {
    /// Whether the output carries work: notes that are not blank, or an artifact.
    pub fn carries_work(&self) -> bool {
        self.notes_markdown
            .as_deref()
            .is_some_and(|n| !n.trim().is_empty())
            || !self.artifacts.is_empty()
    }

    /// The SHA-256 of this output's JCS form, as sent (decision D163): equal outputs have equal
    /// digests, whatever their key order or whitespace.
    pub fn digest(&self) -> Result<crate::ids::Sha256Digest, crate::jcs::JcsError> {
        Ok(crate::jcs::sha256(&crate::jcs::to_canonical_bytes(self)?))
    }

    /// The checks every call makes of its `output` before any I/O (decision D55): each artifact
    /// names its `kind`, and the artifacts stay within [`crate::budget::OUTPUT_MAX_ARTIFACTS`]
    /// and [`crate::budget::OUTPUT_ARTIFACTS_MAX_BYTES`]. The error says which and how to fix it.
    pub fn check(&self, tool: &str) -> Result<(), crate::error::ErrorEnvelope> {
        use crate::budget::{OUTPUT_ARTIFACTS_MAX_BYTES, OUTPUT_MAX_ARTIFACTS};
        use crate::error::{ErrorCode, ErrorEnvelope, Retry};
        let count = self.artifacts.len();
        if count > OUTPUT_MAX_ARTIFACTS {
            return Err(ErrorEnvelope::new(
                ErrorCode::ValidationError,
                format!(
                    "{tool}: `output.artifacts` holds {count} artifacts, over the budget of {OUTPUT_MAX_ARTIFACTS} per call; nothing was recorded."
                ),
                "Send only the artifacts the step asks for (its contract names their kinds) and put the rest in files referenced from output.notesMarkdown, then call again with the same tokens.",
                Retry::NotRetryable,
            )
            .with_details(serde_json::json!({
                "tool": tool,
                "field": "output.artifacts",
                "problem": "over_budget",
                "count": count,
                "maxCount": OUTPUT_MAX_ARTIFACTS,
            })));
        }
        let mut bytes = 0usize;
        for (index, artifact) in self.artifacts.iter().enumerate() {
            match artifact.get("kind") {
                Some(Value::String(kind)) if !kind.trim().is_empty() => {}
                found => {
                    let what = match found {
                        None => "has no `kind`".to_owned(),
                        Some(Value::String(_)) => "has an empty `kind`".to_owned(),
                        Some(other) => format!("has a `kind` that is not a string ({other})"),
                    };
                    let keys: Vec<&str> = artifact.keys().map(String::as_str).take(8).collect();
                    return Err(ErrorEnvelope::new(
                        ErrorCode::ValidationError,
                        format!(
                            "{tool}: `output.artifacts[{index}]` {what}; every artifact is an object `{{\"kind\": \"...\", ...}}` naming what it is (its keys: {}); nothing was recorded.",
                            if keys.is_empty() { "none".to_owned() } else { keys.join(", ") }
                        ),
                        "Add the `kind` the step's contract asks for (the step's prompt and a blocked response's example name it, e.g. \"wr.loop_control\"), or drop the artifact and put its content in output.notesMarkdown; then call again with the same tokens.",
                        Retry::NotRetryable,
                    )
                    .with_details(serde_json::json!({
                        "tool": tool,
                        "field": format!("output.artifacts[{index}].kind"),
                        "problem": "missing_kind",
                    })));
                }
            }
            bytes += crate::jcs::to_canonical_bytes(artifact).map_or(usize::MAX / 2, |b| b.len());
        }
        if bytes > OUTPUT_ARTIFACTS_MAX_BYTES {
            return Err(ErrorEnvelope::new(
                ErrorCode::ValidationError,
                format!(
                    "{tool}: `output.artifacts` are {bytes} bytes together, over the {OUTPUT_ARTIFACTS_MAX_BYTES}-byte budget (measured as UTF-8 bytes of their RFC 8785 JCS form); nothing was recorded."
                ),
                "Keep artifacts to the structured results the step asks for; put large content in files and reference their paths, then call again with the same tokens.",
                Retry::NotRetryable,
            )
            .with_details(serde_json::json!({
                "tool": tool,
                "field": "output.artifacts",
                "problem": "over_budget",
                "measuredBytes": bytes,
                "maxBytes": OUTPUT_ARTIFACTS_MAX_BYTES,
                "measurement": "rfc8785_jcs_utf8_bytes",
            })));
        }
        Ok(())
    }
}

/// The two shapes `preferences` is accepted in: the locked delta list, or the object that
/// responses show as the run's preferences (decision D56).
#[derive(Deserialize, JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)] // only its schema is used; values go through `preference_deltas`
enum PreferencesArg {
    /// The locked form: `[{"key": "autonomy", "value": …}, {"key": "riskPolicy", "value": …}]`.
    Deltas(Vec<PreferenceDelta>),
    /// `{"autonomy"?: …, "riskPolicy"?: …}`, as responses show the effective preferences.
    Object(PreferencesObject),
}

/// The object form of `preferences`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PreferencesObject {
    #[serde(default)]
    autonomy: Option<crate::closed::Autonomy>,
    #[serde(default)]
    risk_policy: Option<crate::closed::RiskPolicy>,
}

/// Reads `preferences` in either shape ([`PreferencesArg`]) as the delta list. It visits the
/// input in place (never through an intermediate value), so a wrong value keeps its precise path
/// (`preferences[0].value`, `preferences.riskPolicy`).
fn preference_deltas<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<PreferenceDelta>, D::Error> {
    struct Either;
    impl<'de> serde::de::Visitor<'de> for Either {
        type Value = Vec<PreferenceDelta>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(
                "an object {\"autonomy\": …, \"riskPolicy\": …} or a list of {\"key\", \"value\"} changes",
            )
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(Vec::new())
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut deltas = Vec::new();
            while let Some(delta) = seq.next_element::<PreferenceDelta>()? {
                deltas.push(delta);
            }
            Ok(deltas)
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            let PreferencesObject {
                autonomy,
                risk_policy,
            } = PreferencesObject::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
            Ok(autonomy
                .map(PreferenceDelta::Autonomy)
                .into_iter()
                .chain(risk_policy.map(PreferenceDelta::RiskPolicy))
                .collect())
        }
    }
    deserializer.deserialize_any(Either)
}

/// `start_workflow` input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartWorkflowInput {
    pub workflow_id: String,
    /// External inputs (JSON object, at most 256 KiB as RFC 8785 bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Map<String, Value>>,
    /// Preference changes, each key at most once; an entry overrides `preset` for its key. Also
    /// accepted as the object responses show (`{"autonomy": …, "riskPolicy": …}`).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "preference_deltas"
    )]
    #[schemars(with = "PreferencesArg")]
    pub preferences: Vec<PreferenceDelta>,
    /// A WorkRail mode preset: sets both `autonomy` and `riskPolicy` (locks §4 "Mode presets").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<ModePreset>,
}

/// `continue_workflow` input: with `ackToken` it advances; without, it rehydrates (no writes).
///
/// **Decision D34:** `ackToken` alone is enough to advance (its signed payload already names the
/// session, run and node; the run's pinned `workflowHash` comes from the store). `stateToken` is
/// required only to rehydrate; when both are sent they must name the same node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContinueWorkflowInput {
    /// Required to rehydrate (no `ackToken`); optional when `ackToken` is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack_token: Option<String>,
    /// A delta merged into the run's stored context on advance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputInput>,
    /// Applied on advance only, each key at most once; an entry overrides `preset` for its key.
    /// Also accepted as the object responses show (`{"autonomy": …, "riskPolicy": …}`).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "preference_deltas"
    )]
    #[schemars(with = "PreferencesArg")]
    pub preferences: Vec<PreferenceDelta>,
    /// A WorkRail mode preset, applied on advance only: sets both `autonomy` and `riskPolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<ModePreset>,
}

/// `checkpoint_workflow` input.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckpointWorkflowInput {
    pub state_token: String,
    pub checkpoint_token: String,
    pub output: OutputInput,
}

/// The pending step an agent should perform.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PendingView {
    pub step_id: StepId,
    pub title: String,
    pub prompt: String,
    pub require_confirmation: bool,
    /// Who confirms, when the step requires confirmation and its workflow names who
    /// (`coordinator_eval`, `human_approval`); absent for the user's own confirmation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation_kind: Option<crate::compiled::ConfirmationKind>,
    /// The artifact the step's output contract requires in `output.artifacts` on the ack,
    /// with an example of its exact shape; absent when the step has no contract.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub required_artifact: Option<RequiredArtifactView>,
    /// How to use, report or avoid the workflow's optional capabilities (delegation, web
    /// browsing): given when the run first reaches a step and again on a rehydrate, for each
    /// capability not yet observed on this branch; absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capability_guidance: Vec<String>,
}

/// The artifact a pending step requires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequiredArtifactView {
    /// Its `kind` (e.g. `wr.loop_control`).
    pub kind: String,
    /// A valid example: fill it in from your work.
    pub example: Value,
}

/// Informational session/run identity (correctness is driven by tokens).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionView {
    pub session_id: SessionId,
    pub run_id: RunId,
}

/// Names the run beside its tokens, so several runs in one chat stay distinguishable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunView {
    pub workflow_id: WorkflowId,
    /// A short human label for the run.
    pub label: String,
    pub status: RunStatus,
}

/// A structured, non-blocking warning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Warning {
    pub code: String,
    pub message: String,
    /// The structured form of a `preferences_exceed_recommendation` warning (the same record
    /// WorkRail stores on the node whose preferences it judges).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preference_warning: Option<Box<PreferenceWarningV1>>,
    /// The structured form of a `pinned_workflow_drift` warning: the run's workflow source on
    /// disk no longer compiles to the hash the run is pinned to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_drift: Option<Box<PinnedDriftView>>,
}

/// How the current source of a run's workflow relates to the run's pinned snapshot (locks §6
/// "Source vs compiled inspection + pinned drift warnings"). The run keeps its pinned snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PinnedDriftView {
    pub workflow_id: WorkflowId,
    pub pinned_hash: WorkflowHash,
    pub status: DriftStatus,
}

/// Why a pinned workflow drifted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum DriftStatus {
    /// The source compiles to a different hash.
    Changed { current_hash: WorkflowHash },
    /// No source defines the workflow any more.
    SourceMissing,
    /// The source no longer compiles.
    SourceInvalid { error_count: usize },
}

impl Warning {
    /// A warning with only a code and a message.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            preference_warning: None,
            pinned_drift: None,
        }
    }

    /// The response form of a recorded preference warning.
    pub fn preferences(warning: PreferenceWarningV1) -> Self {
        Self {
            code: crate::preferences::PREFERENCE_WARNING_CODE.to_owned(),
            message: warning.message.clone(),
            preference_warning: Some(Box::new(warning)),
            pinned_drift: None,
        }
    }
}

/// A bounded recap of earlier steps (rehydrate responses).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecapView {
    pub text: String,
    pub truncated: bool,
    /// How many recap entries were left out (most recent entries are kept).
    pub omitted_entries: u32,
    /// How the recap was cut, present exactly when `truncated` is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<RecapTruncationPolicy>,
}

/// The response kind of an execution tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionKind {
    Ok,
    Blocked,
}

/// The JSON backbone of `start_workflow` / `continue_workflow` / `checkpoint_workflow`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecutionOutput {
    pub kind: ExecutionKind,
    pub state_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_token: Option<String>,
    /// `null` when the run is complete.
    pub pending: Option<PendingView>,
    pub is_complete: bool,
    pub next_intent: NextIntent,
    pub session: SessionView,
    pub run: RunView,
    pub preferences: EffectivePreferences,
    /// Present when `kind` is `blocked`: ordered, bounded blockers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blockers: Vec<Blocker>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recap: Option<RecapView>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Warning>,
    /// Present only when an ackToken that was already answered came back with an `output` that
    /// differs from what that answer recorded (decision D57): the response is the recorded one,
    /// and the new output was not recorded. Absent on every other response, so an identical
    /// replay stays byte-identical.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<ReplayNotice>,
    /// The lanes of a pending parallel step (decision D168), in lane order: hand each lane's
    /// tokens to one subagent. Absent on every other step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lanes: Vec<LaneHandle>,
}

crate::closed::closed_set!(
    /// Where a lane stands, from what it recorded (decision D168).
    LaneState {
        /// Its run has not handed in a block output yet.
        InProgress = "in_progress",
        Completed = "completed",
        Partial = "partial",
        Failed = "failed",
    }
);

/// One lane of a parallel step, as the response hands it out (decision D168).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LaneHandle {
    /// The lane's run: its `blockId` in the block output.
    pub lane_id: RunId,
    /// From 1, in the authored order of the delegations.
    pub index: u32,
    pub workflow_id: WorkflowId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    pub status: LaneState,
    /// The isolated workspace the lane works in, relative to the project root.
    pub workspace: String,
    /// The lane's current step: `continue_workflow` with this stateToken (and the ackToken)
    /// drives the lane.
    pub state_token: String,
    /// Absent once the lane's run is complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ack_token: Option<String>,
}

/// The replay notice: what was recorded, what was not, and the one call that records the new
/// output as a new branch (a fork) of the step the ackToken acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReplayNotice {
    /// The parts of this call's `output` that were NOT recorded: `output.notesMarkdown`,
    /// `output.artifacts`.
    pub not_recorded: Vec<String>,
    /// The notes the earlier call recorded for that step (absent when it recorded none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recorded_notes_markdown: Option<String>,
    /// How many artifacts the earlier call recorded.
    pub recorded_artifacts: u64,
    /// The step the ackToken acknowledged, where the fork starts.
    pub step_id: StepId,
    pub step_title: String,
    /// A fresh ackToken for that same step: `continue_workflow` with it and the new `output`
    /// records the new work as a new branch. The recorded branch stays.
    pub fork_ack_token: String,
    /// The stateToken of that step (optional beside `forkAckToken`).
    pub fork_state_token: String,
    /// The same in words.
    pub message: String,
    /// The ackToken's attempt was blocked (decision D163): it recorded nothing, so the notice's
    /// token is the step's next attempt, not a new branch.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub attempt_blocked: bool,
}

/// What `resume_session` looks for. Every field is optional; an empty field (or a text without
/// tokens) matches nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResumeQueryInput {
    /// Free text matched token by token (NFKC, lowercase, tokens `[a-z0-9_-]+`) against the
    /// tip's current recap notes, then against the workflow id and name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The full 40-character lowercase HEAD commit (`git rev-parse HEAD`), matched exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_head_sha: Option<String>,
    /// A branch name or its beginning (`git branch --show-current`): matches the recorded
    /// branches it is a prefix of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_branch: Option<String>,
}

/// `start_session` takes no arguments: it opens a checkpoint-only session (decision D48) and
/// answers like `start_workflow`, with the `stateToken` and `checkpointToken` that
/// `checkpoint_workflow` takes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StartSessionInput {}

/// `resume_session` input.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResumeSessionInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<ResumeQueryInput>,
}

/// The step a resume candidate waits at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResumePendingView {
    pub step_id: StepId,
    pub title: String,
}

/// One resume target: the preferred tip of a run (locks §2.3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResumeCandidateView {
    pub session_id: SessionId,
    pub run_id: RunId,
    /// The run's preferred tip.
    pub node_id: NodeId,
    pub workflow_id: WorkflowId,
    /// The same short run label execution responses show.
    pub run_label: String,
    pub status: RunStatus,
    /// The step the tip waits at; absent when the run is complete.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<ResumePendingView>,
    pub is_complete: bool,
    /// Every criterion met, in tier order, or only `recency_fallback`.
    pub why_matched: Vec<WhyMatched>,
    /// The tip's current recap notes, at most 1024 UTF-8 bytes (with the canonical truncation
    /// marker when cut); empty when the tip has none.
    pub snippet: String,
    /// The highest EventIndex touching the tip's history.
    pub last_activity_event_index: EventIndex,
    /// A state token for the tip: `continue_workflow` with it alone rehydrates the run.
    pub state_token: String,
}

/// `resume_session` output: at most 5 candidates, best first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResumeSessionOutput {
    pub candidates: Vec<ResumeCandidateView>,
    /// Sessions left out because they are not `healthy` (corrupt, of an unknown version, or
    /// unreadable).
    pub skipped_unhealthy_sessions: u64,
    /// The first of those sessions (at most 20, by session id), each with why it was left out;
    /// absent when none was.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped_sessions: Vec<SkippedSessionView>,
}

/// A session `resume_session` left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SkippedSessionView {
    pub session_id: SessionId,
    /// Its health, or `unreadable` when it could not be read at all.
    pub health: String,
    /// The closed-set reason (e.g. `missing_snapshot_pins`, `snapshot_missing`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

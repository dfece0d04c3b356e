//! `CompiledWorkflowSnapshotV1`: the fully expanded workflow a run is pinned to (locks §5).
//!
//! `workflowHash = sha256(JCS(compiled))`. The snapshot holds everything execution needs
//! (rendered prompts, resolved contract schemas, conditions, loops) and nothing §5 excludes
//! (no tokens, no session/run/node ids, no timestamps, no environment observations). Ordering is
//! normalized by the compiler and checked here: features by `featureId`, contracts by
//! `contractRef`, conditions by `conditionId`, loops by `loopId`; loop bodies keep authored order.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::artifact::{self, ArtifactError, ArtifactKind};
use crate::closed::{
    Autonomy, Capability, CapabilityRequirement, LoopDecision, NonAssumableChoiceKind, RiskPolicy,
    StepSource, closed_set,
};
pub use crate::condition::Condition;
use crate::ids::{ConditionId, LoopId, Sha256Digest, StepId, WorkflowHash, WorkflowId};
use crate::jcs::{JcsError, jcs_digest};
use crate::manifest::tagged_object_schema;

/// The only compiled snapshot schema version this build reads and writes.
pub const COMPILED_WORKFLOW_SCHEMA_VERSION: u64 = 1;

const COMPILED: ArtifactKind = ArtifactKind::CompiledWorkflow;

/// Workflow recommendations (locks §5): pinned, never hard blocks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Recommendations {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommended_autonomy: Option<Autonomy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommended_risk_policy: Option<RiskPolicy>,
}

/// A resolved feature and its (canonical, validated) config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompiledFeature {
    pub feature_id: String,
    /// `{}` for toggle-only features.
    pub config: Value,
}

/// A resolved contract pack, embedded so the run stays deterministic if packs evolve.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompiledContract {
    pub contract_ref: String,
    /// The artifact `kind` the pack validates (e.g. `wr.loop_control`).
    pub artifact_kind: String,
    /// JSON Schema of the artifact, as typed canonical data (hashed through JCS).
    pub schema: Value,
    /// A minimal valid example returned in blocked responses.
    pub example: Value,
}

/// Where a compiled step came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepProvenance {
    pub source: StepSource,
    /// The template or feature id that injected the step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_id: Option<String>,
}

/// Provenance of one embedded `wr.refs.*` snippet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RefProvenance {
    pub ref_id: String,
    pub ref_content_hash: Sha256Digest,
    pub bytes: u64,
}

/// The resolved prompt blocks (refs embedded as text).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolvedPromptBlocks {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub procedure: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub output_required: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verify: Vec<String>,
}

/// A step's output requirement.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepOutputSpec {
    /// A `wr.contracts.*` pack present in `contracts`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract_ref: Option<String>,
    /// Non-enforced guidance.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hints: BTreeMap<String, String>,
}

closed_set!(
    /// Where a function definition is declared; also its precedence: a step's own definition
    /// shadows a loop's, an inner loop's shadows an outer loop's, and a loop's the workflow's.
    FunctionScope {
        Step = "step",
        Loop = "loop",
        Workflow = "workflow",
    }
);

closed_set!(
    /// The JSON type of a function parameter.
    FunctionParameterType {
        String = "string",
        Number = "number",
        Boolean = "boolean",
        Array = "array",
        Object = "object",
    }
);

/// One parameter of a function definition (documentation for the agent; never evaluated).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FunctionParameter {
    pub name: String,
    #[serde(rename = "type")]
    pub param_type: FunctionParameterType,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The allowed values, when closed.
    #[serde(default, rename = "enum", skip_serializing_if = "Vec::is_empty")]
    pub allowed: Vec<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
}

/// A function definition a step references (`functionDefinitions` + `functionReferences`,
/// locks §5 "Function definitions in rewind/resumption context"), resolved through the step's
/// scopes and pinned with the workflow so a rewound or resumed agent can be told what it means.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompiledFunction {
    pub name: String,
    /// The scope the definition was resolved from.
    pub scope: FunctionScope,
    pub definition: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parameters: Vec<FunctionParameter>,
}

impl CompiledFunction {
    /// The include order of the locks: scope precedence (step, loop, workflow), then name.
    pub fn order_key(&self) -> (FunctionScope, &str) {
        (self.scope, &self.name)
    }
}

/// A fully expanded step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompiledStep {
    pub step_id: StepId,
    pub title: String,
    pub require_confirmation: bool,
    /// The effective role (step-level overrides workflow-level).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_blocks: Option<ResolvedPromptBlocks>,
    /// The deterministic, text-first `pending.prompt`.
    pub prompt: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<StepOutputSpec>,
    pub provenance: StepProvenance,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub injected_refs: Vec<RefProvenance>,
    /// Choices this step marks non-assumable (locks §3): the only choices for which the agent may
    /// report `needs_user_choice`. Sorted and unique; absent when empty, so steps without it keep
    /// their hash.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub non_assumable_choices: Vec<NonAssumableChoiceKind>,
    /// The function definitions this step references, each resolved through the step's scopes,
    /// ordered by `(scope precedence, name)` with one entry per name. Absent when empty, so steps
    /// without functions keep their hash (an additive optional field, `L-VERSION-ADDITIVE-ONLY`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<CompiledFunction>,
    /// The workflow-language semantics of the step (`runCondition`, `validationCriteria`,
    /// confirmation rules, assessments, conditional fragments, attempt budget, context reads)
    /// and the authored fields kept for `inspect_workflow` (decision D139). Absent when the step
    /// uses none of them, so every earlier workflow keeps its hash.
    #[serde(default, skip_serializing_if = "StepLanguage::is_empty")]
    pub language: StepLanguage,
}

/// How the workflow language shapes one step at run time (decision D139). Every field is
/// optional; a step that uses none of them serializes without `language`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StepLanguage {
    /// The step runs only when this holds over the run's context when the walk reaches it;
    /// otherwise it is skipped, and the skip is recorded in the decision trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_condition: Option<Condition>,
    /// Checked against the agent's output at advance; a failure blocks the attempt (a gap in
    /// never-stop modes) and quotes the failed rules.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<ValidationCriterion>,
    /// When set, `requireConfirmation` holds only where this condition holds (the condition and
    /// `{kind, condition}` forms of `requireConfirmation`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_when: Option<Condition>,
    /// Who confirms, from the `{kind}` form of `requireConfirmation`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirmation_kind: Option<ConfirmationKind>,
    /// Assessments (by id, from the workflow's `assessments`) the output must carry.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub assessment_refs: Vec<String>,
    /// Follow-ups a recorded assessment level requires before the step may complete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub assessment_consequences: Vec<AssessmentConsequence>,
    /// Text appended to the prompt when its condition holds (authored order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompt_fragments: Vec<PromptFragment>,
    /// Blocked attempts the agent may make at this step before it becomes a user-only
    /// dependency (the step's `maxAttempts`, else the workflow's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// `notesOptional`: the step may be acknowledged without notes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub notes_optional: bool,
    /// Context keys the rendered prompt reads (`{{key}}` and `{{key.path}}` markers, fragment and
    /// confirmation conditions), sorted: their values are frozen into the pending step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context_reads: Vec<String>,
    /// Authored fields with no run-time effect, kept verbatim for `inspect_workflow`
    /// (`modelTier`, `askForFiles`, `audit`, `verification`, ...), by field name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kept: BTreeMap<String, Value>,
    /// A parallel step's lanes (decision D168): when the walk lands on this step, one child run
    /// starts per lane whose condition holds, and acknowledging the step fans the lanes in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lanes: Option<Box<ParallelLanes>>,
    /// The step's `wr.contracts.loop_control` contract was written as the language's
    /// `outputContract` (decision D209): its `wr.loop_control` artifact is read as the language
    /// reads it, `loopId` optional (the enclosing loop when absent, and the loop's
    /// `conditionSource.loopId` naming it too) and a `metadata` object allowed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub language_loop_control: bool,
}

closed_set!(
    /// How the fan-in of a parallel step combines its lanes' work (the stateless block
    /// contract's merge strategies, decision D161).
    MergeStrategy {
        /// Outputs only: nothing is merged, nothing conflicts.
        Concatenate = "concatenate",
        /// The first lane to complete (in recorded order) wins a file two lanes touched; the
        /// conflict is a warning.
        Workspace = "workspace",
        /// A file two lanes touched waits for the user.
        FailOnConflict = "fail-on-conflict",
    }
);

/// The lanes of a parallel step (decision D168).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ParallelLanes {
    pub merge_strategy: MergeStrategy,
    /// A failed lane is disclosed instead of blocking the fan-in (`allowPartialResults`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_partial_results: bool,
    /// In the authored order; a lane's index (from 1) is its position here.
    pub lanes: Vec<LaneSpec>,
}

/// One lane: the delegation it runs and the workflow its run pins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LaneSpec {
    /// The routine the delegation resolved to.
    pub workflow_id: WorkflowId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<String>,
    /// The lane starts only when this holds over the parent run's context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<Condition>,
    /// `contextMapping`: the lane's context key `to` takes the parent context's `from`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<LaneInput>,
    /// `args`: fixed string inputs of the lane's context.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, String>,
    /// The routine compiled with a last step that requires `wr.contracts.block_output`: the
    /// lane's run pins it, so the parent's hash pins every lane.
    pub workflow: Box<CompiledWorkflowSnapshotV1>,
}

/// One `contextMapping` entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LaneInput {
    pub from: String,
    pub to: String,
}

impl StepLanguage {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

closed_set!(
    /// Who confirms a step (the `{kind}` form of `requireConfirmation`).
    ConfirmationKind {
        /// The user confirms in the chat (the boolean form).
        User = "user",
        /// An evaluator the coordinator runs decides.
        CoordinatorEval = "coordinator_eval",
        /// A human operator approves outside the chat.
        HumanApproval = "human_approval",
    }
);

/// A conditional prompt fragment (`promptFragments`): appended when `when` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromptFragment {
    pub fragment_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<Condition>,
    pub text: String,
}

/// One rule of `validationCriteria`, or a composition of rules (closed set).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum ValidationCriterion {
    /// The notes contain `value` (case-sensitive).
    Contains {
        value: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        when: Option<Condition>,
    },
    /// The notes match `pattern` (with `flags`, of `gimsuy`).
    Regex {
        pattern: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        flags: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        when: Option<Condition>,
    },
    /// The notes' length, counted in UTF-16 code units as the language counts it, is within
    /// `[min, max]`.
    Length {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        min: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        when: Option<Condition>,
    },
    /// The notes parse as JSON that satisfies `schema` (a legacy rule, kept as authored).
    Schema {
        schema: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        when: Option<Condition>,
    },
    All {
        all: Vec<ValidationCriterion>,
    },
    Any {
        any: Vec<ValidationCriterion>,
    },
    Not {
        criterion: Box<ValidationCriterion>,
    },
}

/// A workflow-declared assessment (`assessments`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AssessmentDefinition {
    pub assessment_id: String,
    pub purpose: String,
    pub dimensions: Vec<AssessmentDimension>,
}

/// One bounded dimension of an assessment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AssessmentDimension {
    pub dimension_id: String,
    pub purpose: String,
    /// At least two, unique, in authored order.
    pub levels: Vec<String>,
    pub required: bool,
}

/// `assessmentConsequences`: when any dimension (of `forAssessment`, else of any assessment the
/// step records) is at `anyEqualsLevel`, the step stays pending until a follow-up is recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AssessmentConsequence {
    pub any_equals_level: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_assessment: Option<String>,
    pub guidance: String,
}

/// One item of an execution sequence: a step, or a loop.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum SequenceItem {
    Step { step_id: StepId },
    Loop { loop_id: LoopId },
}

/// A resolved condition (closed set of kinds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum CompiledCondition {
    AlwaysTrue {
        condition_id: ConditionId,
    },
    AlwaysFalse {
        condition_id: ConditionId,
    },
    /// Continue while the latest validated `wr.loop_control` decision equals `continueWhen`.
    LoopControl {
        condition_id: ConditionId,
        continue_when: LoopDecision,
    },
}

impl CompiledCondition {
    pub fn condition_id(&self) -> &ConditionId {
        match self {
            Self::AlwaysTrue { condition_id }
            | Self::AlwaysFalse { condition_id }
            | Self::LoopControl { condition_id, .. } => condition_id,
        }
    }
}

/// `while: {kind: "condition_ref", conditionId}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LoopWhile {
    #[serde(rename_all = "camelCase")]
    ConditionRef { condition_id: ConditionId },
    /// `while`: an iteration starts while `condition` holds over the run's context (evaluated
    /// before every iteration, the first included).
    ContextWhile { condition: Condition },
    /// `until`: an iteration starts until `condition` holds (evaluated before every iteration).
    ContextUntil { condition: Condition },
    /// `for` with a number: exactly `count` iterations (capped by `maxIterations`).
    Count { count: u32 },
    /// `for` with a context variable: an iteration starts while its 0-based number is below the
    /// number in `var`, read from the context before every iteration (capped by
    /// `maxIterations`).
    #[serde(rename_all = "camelCase")]
    CountVar { var: String },
    /// `forEach`: an iteration starts while its 0-based number is below the length of the array
    /// in `items`, read from the context before every iteration (capped by `maxIterations`).
    ForEach { items: String },
}

/// A resolved loop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompiledLoop {
    pub loop_id: LoopId,
    #[serde(rename = "while")]
    pub while_: LoopWhile,
    /// A count of allowed iterations (0-based iterations `0..maxIterations`); at least 1.
    pub max_iterations: u32,
    /// Authoritative order; the index is the `bodyIndex`.
    pub body: Vec<SequenceItem>,
    /// The loop is entered only when this holds (else skipped, and the skip is traced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_condition: Option<Condition>,
    /// Names under which the iteration, item and index reach prompts and conditions in the body.
    #[serde(default, skip_serializing_if = "LoopVars::is_empty")]
    pub vars: LoopVars,
    /// Authored loop fields with no run-time effect (`title`, and `requireConfirmation` or
    /// `notesOptional` written on the loop itself, which is never pending), verbatim for
    /// `inspect_workflow`; absent when none, so earlier workflows keep their hash.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kept: BTreeMap<String, Value>,
}

/// The names a loop binds in its body (`iterationVar`, `itemVar`, `indexVar`); absent names
/// bind nothing. The iteration is bound 1-based, the index 0-based.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoopVars {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration_var: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_var: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_var: Option<String>,
}

impl LoopVars {
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

closed_set!(
    /// Compiler warnings (closed set; no timestamps).
    CompiledWarningCode {
        /// The workflow uses a legacy (dot-free) id; a namespaced id is suggested.
        LegacyWorkflowId = "legacy_workflow_id",
        /// A declared condition is referenced by no loop.
        UnusedCondition = "unused_condition",
        /// A probe step was injected for a required capability.
        CapabilityProbeInjected = "capability_probe_injected",
        /// A function definition no step references.
        UnusedFunction = "unused_function",
        /// A field or condition operator of the workflow language has no effect where it is
        /// written (the message names it and says why).
        LanguageIgnored = "language_ignored",
        /// A field of the WorkRail 3.x spelling whose v2 spelling differs or does not exist; the
        /// message names the v2 equivalent (`workrail migrate` writes it where one exists).
        V1Field = "v1_field",
        /// A legacy-id workflow's field that neither spelling defines: kept verbatim (`kept`)
        /// and shown by `inspect_workflow`, with no run-time effect.
        UnknownFieldKept = "unknown_field_kept",
        /// A parallel delegation names a workflow no source defined when the workflow compiled.
        UnresolvedDelegation = "unresolved_delegation",
        /// A parallel step whose lanes the server cannot track (a delegation names a workflow
        /// that is not a routine of the sources): its delegations stay prompt text only.
        UntrackedLanes = "untracked_lanes",
    }
);

/// A structured compiler warning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompiledWarning {
    pub code: CompiledWarningCode,
    pub message: String,
    /// JSON pointer into the source workflow, when the warning concerns one field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
}

/// The compiled workflow snapshot, schema version 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledWorkflowSnapshotV1 {
    pub body: CompiledWorkflowBody,
}

impl crate::jcs::CanonicalArtifact for CompiledWorkflowSnapshotV1 {}

/// The fields of a compiled snapshot (everything but `schemaVersion`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompiledWorkflowBody {
    pub workflow_id: WorkflowId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_role: Option<String>,
    pub recommendations: Recommendations,
    pub capabilities: BTreeMap<Capability, CapabilityRequirement>,
    pub features: Vec<CompiledFeature>,
    pub contracts: Vec<CompiledContract>,
    pub steps: Vec<CompiledStep>,
    /// The top-level execution order.
    pub sequence: Vec<SequenceItem>,
    pub conditions: Vec<CompiledCondition>,
    pub loops: Vec<CompiledLoop>,
    pub compiled_warnings: Vec<CompiledWarning>,
    /// Workflow-declared assessments, sorted by `assessmentId`; absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub assessments: Vec<AssessmentDefinition>,
    /// Authored workflow fields with no run-time effect (`version`, `about`, `examples`,
    /// `references`, `metricsProfile`, ...), kept verbatim for `inspect_workflow`; absent when
    /// none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kept: BTreeMap<String, Value>,
}

impl CompiledWorkflowSnapshotV1 {
    /// Validates the structural invariants and wraps the body.
    pub fn new(body: CompiledWorkflowBody) -> Result<Self, ArtifactError> {
        check_body(&body)?;
        Ok(Self { body })
    }

    /// `workflowHash = sha256(JCS(compiled))` (locks §5).
    pub fn workflow_hash(&self) -> Result<WorkflowHash, JcsError> {
        jcs_digest(self).map(|(digest, _)| WorkflowHash::from_digest(digest))
    }

    pub fn step(&self, step_id: &StepId) -> Option<&CompiledStep> {
        self.body.steps.iter().find(|s| &s.step_id == step_id)
    }

    pub fn loop_def(&self, loop_id: &LoopId) -> Option<&CompiledLoop> {
        self.body
            .loops
            .binary_search_by(|l| l.loop_id.cmp(loop_id))
            .ok()
            .map(|i| &self.body.loops[i])
    }

    pub fn condition(&self, id: &ConditionId) -> Option<&CompiledCondition> {
        self.body.conditions.iter().find(|c| c.condition_id() == id)
    }

    pub fn contract(&self, contract_ref: &str) -> Option<&CompiledContract> {
        self.body
            .contracts
            .iter()
            .find(|c| c.contract_ref == contract_ref)
    }

    pub fn from_json_str(text: &str) -> Result<Self, ArtifactError> {
        Self::from_value(artifact::parse_value(COMPILED, text)?)
    }

    pub fn from_value(value: Value) -> Result<Self, ArtifactError> {
        let mut map = artifact::into_object(COMPILED, value)?;
        artifact::take_version(
            COMPILED,
            &mut map,
            "schemaVersion",
            COMPILED_WORKFLOW_SCHEMA_VERSION,
        )?;
        let body = artifact::from_value(COMPILED, "compiled workflow", Value::Object(map))?;
        Self::new(body)
    }

    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        let mut map = artifact::to_object(&self.body)?;
        map.insert(
            "schemaVersion".into(),
            COMPILED_WORKFLOW_SCHEMA_VERSION.into(),
        );
        Ok(Value::Object(map))
    }
}

artifact::artifact_serde!(CompiledWorkflowSnapshotV1);

impl JsonSchema for CompiledWorkflowSnapshotV1 {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("CompiledWorkflowSnapshotV1")
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        tagged_object_schema(
            CompiledWorkflowBody::json_schema(generator),
            "schemaVersion",
            COMPILED_WORKFLOW_SCHEMA_VERSION,
            None,
        )
    }
}

fn invariant(rule: &'static str, detail: impl ToString) -> ArtifactError {
    ArtifactError::invariant(COMPILED, rule, detail)
}

fn strictly_sorted<T, K: Ord>(items: &[T], key: impl Fn(&T) -> K) -> bool {
    items.windows(2).all(|w| key(&w[0]) < key(&w[1]))
}

fn check_body(body: &CompiledWorkflowBody) -> Result<(), ArtifactError> {
    if !strictly_sorted(&body.features, |f| f.feature_id.clone()) {
        return Err(invariant(
            "features deduped and sorted by featureId",
            "features are not strictly ascending by featureId",
        ));
    }
    if !strictly_sorted(&body.contracts, |c| c.contract_ref.clone()) {
        return Err(invariant(
            "contracts deduped and sorted by contractRef",
            "contracts are not strictly ascending by contractRef",
        ));
    }
    if !strictly_sorted(&body.conditions, |c| c.condition_id().clone()) {
        return Err(invariant(
            "conditions sorted by conditionId",
            "conditions are not strictly ascending by conditionId",
        ));
    }
    if !strictly_sorted(&body.loops, |l| l.loop_id.clone()) {
        return Err(invariant(
            "loops sorted by loopId",
            "loops are not strictly ascending by loopId",
        ));
    }
    let mut step_ids = BTreeSet::new();
    for step in &body.steps {
        if let Some(r) = step
            .injected_refs
            .iter()
            .find(|r| r.bytes > crate::ids::MAX_JSON_SAFE_INTEGER)
        {
            return Err(invariant(
                "integers are JCS-safe",
                format!("ref {} bytes exceed 2^53-1", r.ref_id),
            ));
        }
        if !strictly_sorted(&step.non_assumable_choices, |c| c.as_str()) {
            return Err(invariant(
                "nonAssumableChoices deduped and sorted",
                format!(
                    "step {} lists nonAssumableChoices out of order or twice",
                    step.step_id
                ),
            ));
        }
        if !strictly_sorted(&step.functions, |f| (f.scope, f.name.clone()))
            || step
                .functions
                .iter()
                .map(|f| &f.name)
                .collect::<BTreeSet<_>>()
                .len()
                != step.functions.len()
        {
            return Err(invariant(
                "step functions ordered by (scope, name), one per name",
                format!(
                    "step {} lists functions out of order or a name twice",
                    step.step_id
                ),
            ));
        }
        if !step_ids.insert(&step.step_id) {
            return Err(invariant(
                "step ids unique",
                format!("step {} appears twice", step.step_id),
            ));
        }
        if let Some(contract_ref) = step.output.as_ref().and_then(|o| o.contract_ref.as_ref())
            && !body
                .contracts
                .iter()
                .any(|c| &c.contract_ref == contract_ref)
        {
            return Err(invariant(
                "step contractRef resolved",
                format!(
                    "step {} references contract {contract_ref} that is not embedded",
                    step.step_id
                ),
            ));
        }
    }
    if !strictly_sorted(&body.assessments, |a| a.assessment_id.clone()) {
        return Err(invariant(
            "assessments deduped and sorted by assessmentId",
            "assessments are not strictly ascending by assessmentId",
        ));
    }
    for step in &body.steps {
        for assessment_id in &step.language.assessment_refs {
            if !body
                .assessments
                .iter()
                .any(|a| &a.assessment_id == assessment_id)
            {
                return Err(invariant(
                    "step assessmentRefs resolved",
                    format!(
                        "step {} references assessment {assessment_id} that is not declared",
                        step.step_id
                    ),
                ));
            }
        }
    }
    for l in &body.loops {
        if l.max_iterations == 0 {
            return Err(invariant(
                "maxIterations is at least 1",
                format!("loop {} has maxIterations 0", l.loop_id),
            ));
        }
        if l.body.is_empty() {
            return Err(invariant(
                "loop body non-empty",
                format!("loop {} has an empty body", l.loop_id),
            ));
        }
        if let LoopWhile::ConditionRef { condition_id } = &l.while_
            && !body
                .conditions
                .iter()
                .any(|c| c.condition_id() == condition_id)
        {
            return Err(invariant(
                "loop condition resolved",
                format!(
                    "loop {} references unknown condition {condition_id}",
                    l.loop_id
                ),
            ));
        }
    }
    // Every step and every loop appears exactly once across the sequence and the loop bodies:
    // StepInstanceKeys stay unique and every loop has one place.
    let mut placed_steps = BTreeSet::new();
    let mut placed_loops = BTreeSet::new();
    let sequences = std::iter::once(&body.sequence).chain(body.loops.iter().map(|l| &l.body));
    for seq in sequences {
        for item in seq {
            match item {
                SequenceItem::Step { step_id } => {
                    if !step_ids.contains(step_id) {
                        return Err(invariant(
                            "sequence references defined steps",
                            format!("unknown step {step_id}"),
                        ));
                    }
                    if !placed_steps.insert(step_id) {
                        return Err(invariant(
                            "each step placed once",
                            format!("step {step_id} is placed twice"),
                        ));
                    }
                }
                SequenceItem::Loop { loop_id } => {
                    if body
                        .loops
                        .binary_search_by(|l| l.loop_id.cmp(loop_id))
                        .is_err()
                    {
                        return Err(invariant(
                            "sequence references defined loops",
                            format!("unknown loop {loop_id}"),
                        ));
                    }
                    if !placed_loops.insert(loop_id) {
                        return Err(invariant(
                            "each loop placed once",
                            format!("loop {loop_id} is placed twice"),
                        ));
                    }
                }
            }
        }
    }
    if placed_steps.len() != step_ids.len() {
        return Err(invariant(
            "each step placed once",
            "a step is defined but never placed in the sequence or a loop body",
        ));
    }
    if placed_loops.len() != body.loops.len() {
        return Err(invariant(
            "each loop placed once",
            "a loop is defined but never placed",
        ));
    }
    // A loop may not contain itself, directly or through nested loops.
    for l in &body.loops {
        let mut stack: Vec<&LoopId> = vec![&l.loop_id];
        let mut visited = BTreeSet::new();
        while let Some(current) = stack.pop() {
            if !visited.insert(current) {
                continue;
            }
            let Ok(i) = body.loops.binary_search_by(|x| x.loop_id.cmp(current)) else {
                continue;
            };
            for item in &body.loops[i].body {
                if let SequenceItem::Loop { loop_id } = item {
                    if loop_id == &l.loop_id {
                        return Err(invariant(
                            "loops are acyclic",
                            format!("loop {} contains itself", l.loop_id),
                        ));
                    }
                    stack.push(loop_id);
                }
            }
        }
    }
    Ok(())
}

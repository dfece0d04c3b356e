//! `wr.contracts.*`: the closed set of WorkRail-owned output contract packs.
//!
//! Each pack names the artifact `kind` it validates, a JSON Schema (draft 2020-12) and a minimal
//! valid example. Workflows reference packs by id only; the compiler embeds the schema and
//! example in the snapshot, so a pinned run keeps validating against the pack it was compiled
//! with (locks §9 "Contract pack registry + pinning").
//!
//! JSON Schema counts characters, but WorkRail budgets are UTF-8 bytes, so string budgets are
//! written twice: `maxLength` (portable, necessary) and the WorkRail keyword
//! [`MAX_UTF8_BYTES_KEYWORD`] (exact), which the engine's validator implements.

use serde_json::{Value, json};
use workrail_spec::budget::{LOOP_CONTROL_SUMMARY_MAX_BYTES, SUMMARY_MAX_BYTES};
use workrail_spec::closed::{
    AttemptFailureCode, Capability, ClaimedBy, DivergenceReason, LoopDecision,
    NonAssumableChoiceKind, UserOnlyDependencyReason,
};

use super::{block_output, handoffs};

/// The namespace every contract pack lives in.
pub const CONTRACT_PREFIX: &str = "wr.contracts.";

/// The schema keyword that bounds a string by UTF-8 bytes.
pub const MAX_UTF8_BYTES_KEYWORD: &str = "maxUtf8Bytes";

/// The JSON Schema dialect of every pack.
pub const SCHEMA_DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// `wr.contracts.block_output`: what one lane of a parallel step produced.
pub const BLOCK_OUTPUT: &str = "wr.contracts.block_output";
/// `wr.contracts.loop_control`: the only input of `loop_control` conditions.
pub const LOOP_CONTROL: &str = "wr.contracts.loop_control";
/// `wr.contracts.capability_observation`: implied by `wr.templates.capability_probe`.
pub const CAPABILITY_OBSERVATION: &str = "wr.contracts.capability_observation";
/// `wr.contracts.workflow_divergence`.
pub const WORKFLOW_DIVERGENCE: &str = "wr.contracts.workflow_divergence";
/// `wr.contracts.verification_report`: makes a `verify` block enforceable.
pub const VERIFICATION_REPORT: &str = "wr.contracts.verification_report";
/// `wr.contracts.user_only_dependency`: what the agent reports when only the user can unblock.
pub const USER_ONLY_DEPENDENCY: &str = "wr.contracts.user_only_dependency";

/// Max checks in one verification report.
pub const VERIFICATION_MAX_CHECKS: usize = 50;
/// Max UTF-8 bytes of one verification check's text or evidence.
pub const VERIFICATION_TEXT_MAX_BYTES: usize = 1024;

/// One contract pack.
#[derive(Debug, Clone, Copy)]
pub struct ContractPack {
    pub contract_ref: &'static str,
    /// The artifact `kind` the pack validates.
    pub artifact_kind: &'static str,
    /// One line for the builtins catalog and blocked responses.
    pub summary: &'static str,
    /// Whether a step may require the pack with `output.contractRef`. A user-only dependency is
    /// reported when it happens; requiring one on every ack of a step would mean nothing.
    pub requirable: bool,
    schema: fn() -> Value,
    example: fn() -> Value,
}

impl ContractPack {
    /// The JSON Schema of the artifact.
    pub fn schema(&self) -> Value {
        (self.schema)()
    }

    /// A minimal valid artifact.
    pub fn example(&self) -> Value {
        (self.example)()
    }
}

/// Every pack, sorted by `contract_ref`.
pub const CONTRACTS: &[ContractPack] = &[
    ContractPack {
        contract_ref: BLOCK_OUTPUT,
        artifact_kind: "wr.block_output",
        summary: "What one lane produced: block type, status, deliverables, summary, and the files it modified and created (relative paths).",
        requirable: true,
        schema: block_output::schema,
        example: block_output::example,
    },
    ContractPack {
        contract_ref: CAPABILITY_OBSERVATION,
        artifact_kind: "wr.capability_observation",
        summary: "Whether a capability (delegation, web_browsing) worked when the agent tried it.",
        requirable: true,
        schema: capability_observation_schema,
        example: capability_observation_example,
    },
    ContractPack {
        contract_ref: "wr.contracts.coding_handoff",
        artifact_kind: "wr.coding_handoff",
        summary: "What an implementation hands on: decisions, limitations, tests added and files changed.",
        requirable: true,
        schema: handoffs::coding_handoff_schema,
        example: handoffs::coding_handoff_example,
    },
    ContractPack {
        contract_ref: "wr.contracts.differentiation_handoff",
        artifact_kind: "wr.differentiation_handoff",
        summary: "A differentiation study handed to shaping: evidence freshness, checklist and the pitch inputs.",
        requirable: true,
        schema: handoffs::differentiation_handoff_schema,
        example: handoffs::differentiation_handoff_example,
    },
    ContractPack {
        contract_ref: "wr.contracts.discovery_handoff",
        artifact_kind: "wr.discovery_handoff",
        summary: "The direction a discovery chose, with its confidence, invariants and rejected options.",
        requirable: true,
        schema: handoffs::discovery_handoff_schema,
        example: handoffs::discovery_handoff_example,
    },
    ContractPack {
        contract_ref: "wr.contracts.gate_verdict",
        artifact_kind: "wr.gate_verdict",
        summary: "An independent gate's verdict (approved, rejected or uncertain) with confidence and rationale.",
        requirable: true,
        schema: handoffs::gate_verdict_schema,
        example: handoffs::gate_verdict_example,
    },
    ContractPack {
        contract_ref: LOOP_CONTROL,
        artifact_kind: "wr.loop_control",
        summary: "The loop decision (continue or stop) for the enclosing loop, with a short why.",
        requirable: true,
        schema: loop_control_schema,
        example: loop_control_example,
    },
    ContractPack {
        contract_ref: "wr.contracts.review_verdict",
        artifact_kind: "wr.review_verdict",
        summary: "A review's verdict (clean, minor or blocking) with confidence, findings and a summary.",
        requirable: true,
        schema: handoffs::review_verdict_schema,
        example: handoffs::review_verdict_example,
    },
    ContractPack {
        contract_ref: "wr.contracts.shaping_handoff",
        artifact_kind: "wr.shaping_handoff",
        summary: "A shaped pitch handed to implementation: shape, appetite, constraints, rabbit holes, checklist.",
        requirable: true,
        schema: handoffs::shaping_handoff_schema,
        example: handoffs::shaping_handoff_example,
    },
    ContractPack {
        contract_ref: USER_ONLY_DEPENDENCY,
        artifact_kind: "wr.user_only_dependency",
        summary: "Something only the user can provide or decide (closed reason); blocks in blocking modes, a critical gap in full_auto_never_stop.",
        requirable: false,
        schema: user_only_dependency_schema,
        example: user_only_dependency_example,
    },
    ContractPack {
        contract_ref: VERIFICATION_REPORT,
        artifact_kind: "wr.verification_report",
        summary: "Each verification check with its status and the evidence behind it.",
        requirable: true,
        schema: verification_report_schema,
        example: verification_report_example,
    },
    ContractPack {
        contract_ref: WORKFLOW_DIVERGENCE,
        artifact_kind: "workflow_divergence",
        summary: "An intentional deviation from the step's instructions, with reason and summary.",
        requirable: true,
        schema: workflow_divergence_schema,
        example: workflow_divergence_example,
    },
];

/// Looks a pack up by `contractRef`.
pub fn find(contract_ref: &str) -> Option<&'static ContractPack> {
    CONTRACTS
        .binary_search_by(|c| c.contract_ref.cmp(contract_ref))
        .ok()
        .map(|i| &CONTRACTS[i])
}

fn bounded_string(max_bytes: usize) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": max_bytes, MAX_UTF8_BYTES_KEYWORD: max_bytes})
}

fn strings<T: Copy>(all: &[T], as_str: fn(T) -> &'static str) -> Vec<&'static str> {
    let mut out: Vec<&str> = all.iter().map(|v| as_str(*v)).collect();
    out.sort_unstable();
    out
}

fn delimiter_safe_id() -> Value {
    json!({"type": "string", "pattern": "^[a-z0-9_-]+$", "maxLength": 64})
}

pub(super) fn object(kind: &str, properties: Value, required: &[&str]) -> Value {
    let mut props = properties;
    if let Some(map) = props.as_object_mut() {
        map.insert("kind".into(), json!({"const": kind}));
    }
    let mut required: Vec<&str> = required.iter().copied().chain(["kind"]).collect();
    required.sort_unstable();
    json!({
        "$schema": SCHEMA_DIALECT,
        "title": kind,
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": false,
    })
}

fn loop_control_schema() -> Value {
    object(
        "wr.loop_control",
        json!({
            "loopId": delimiter_safe_id(),
            "decision": {"enum": strings(LoopDecision::ALL, LoopDecision::as_str)},
            "summary": bounded_string(LOOP_CONTROL_SUMMARY_MAX_BYTES),
        }),
        &["decision", "loopId"],
    )
}

fn loop_control_example() -> Value {
    json!({
        "kind": "wr.loop_control",
        "loopId": "investigation_pass",
        "decision": "continue",
        "summary": "Open items remain that one more iteration can close.",
    })
}

/// `{"not": {"required": [field]}}`: the field must be absent.
fn absent(field: &str) -> Value {
    json!({"not": {"required": [field]}})
}

fn capability_observation_schema() -> Value {
    let mut schema = object(
        "wr.capability_observation",
        json!({
            "capability": {"enum": strings(Capability::ALL, Capability::as_str)},
            "status": {"enum": ["available", "unavailable"]},
            "evidence": bounded_string(LOOP_CONTROL_SUMMARY_MAX_BYTES),
            "remediation": bounded_string(LOOP_CONTROL_SUMMARY_MAX_BYTES),
            "basis": {"enum": OBSERVATION_BASES},
            "claimedBy": {"enum": strings(ClaimedBy::ALL, ClaimedBy::as_str)},
            "failureCode": {"enum": strings(AttemptFailureCode::ALL, AttemptFailureCode::as_str)},
        }),
        &["capability", "evidence", "status"],
    );
    // `claimedBy` belongs to a claim; `failureCode` to an attempt that failed.
    if let Some(map) = schema.as_object_mut() {
        map.insert(
            "allOf".into(),
            json!([
                {
                    "if": {"properties": {"basis": {"const": "claim"}}, "required": ["basis"]},
                    "then": absent("failureCode"),
                    "else": absent("claimedBy"),
                },
                {
                    "if": {"properties": {"status": {"const": "available"}}},
                    "then": absent("failureCode"),
                },
            ]),
        );
    }
    schema
}

/// `basis` of a capability observation: `attempt` (the agent tried it; the default) or `claim`
/// (said without trying, by the agent or the user: never enforcement-grade).
pub const OBSERVATION_BASES: [&str; 2] = ["attempt", "claim"];

fn capability_observation_example() -> Value {
    json!({
        "kind": "wr.capability_observation",
        "capability": "web_browsing",
        "status": "available",
        "evidence": "Fetched https://example.com and read its title.",
    })
}

/// `status` of a user-only dependency report: `needed` (the default: only the user can unblock)
/// or `supplied` (the user has since provided it; resolves the disclosed gap).
pub const USER_DEPENDENCY_STATUSES: [&str; 2] = ["needed", "supplied"];

fn user_only_dependency_schema() -> Value {
    let mut schema = object(
        "wr.user_only_dependency",
        json!({
            "reason": {"enum": strings(UserOnlyDependencyReason::ALL, UserOnlyDependencyReason::as_str)},
            "summary": bounded_string(SUMMARY_MAX_BYTES),
            "nonAssumableChoice": {"enum": strings(NonAssumableChoiceKind::ALL, NonAssumableChoiceKind::as_str)},
            "status": {"enum": USER_DEPENDENCY_STATUSES},
        }),
        &["reason", "summary"],
    );
    // `needs_user_choice` names the non-assumable choice; no other reason does (locks §3).
    if let Some(map) = schema.as_object_mut() {
        map.insert(
            "allOf".into(),
            json!([{
                "if": {
                    "properties": {"reason": {"const": UserOnlyDependencyReason::NeedsUserChoice.as_str()}},
                    "required": ["reason"],
                },
                "then": {"required": ["nonAssumableChoice"]},
                "else": absent("nonAssumableChoice"),
            }]),
        );
    }
    schema
}

/// The constraint a step that marks choices non-assumable carries (rendered into its prompt, so
/// it is pinned by the workflow hash), or `None` when it marks none.
pub fn non_assumable_choices_line(choices: &[NonAssumableChoiceKind]) -> Option<String> {
    if choices.is_empty() {
        return None;
    }
    let kinds: Vec<String> = choices.iter().map(|c| format!("`{c}`")).collect();
    Some(format!(
        "Only the user may decide these choices in this step ({}): never assume them. Ask the user; if they have not decided, acknowledge with a `wr.user_only_dependency` artifact (`reason` `needs_user_choice`, `nonAssumableChoice` set to the kind, `summary` naming the decision). `guided` and `full_auto_stop_on_user_deps` then block until the user decides; `full_auto_never_stop` records a critical gap, and you continue with the most reversible option and say which in output.notesMarkdown.",
        kinds.join(", ")
    ))
}

fn user_only_dependency_example() -> Value {
    json!({
        "kind": "wr.user_only_dependency",
        "reason": "needs_user_secret_or_token",
        "summary": "The deploy step needs an API token for the staging registry; none is configured.",
    })
}

fn workflow_divergence_schema() -> Value {
    object(
        "workflow_divergence",
        json!({
            "reason": {"enum": strings(DivergenceReason::ALL, DivergenceReason::as_str)},
            "summary": bounded_string(SUMMARY_MAX_BYTES),
            "relatedStepId": delimiter_safe_id(),
        }),
        &["reason", "summary"],
    )
}

fn workflow_divergence_example() -> Value {
    json!({
        "kind": "workflow_divergence",
        "reason": "efficiency_skip",
        "summary": "Skipped hypothesis 3: the stack trace already rules it out.",
        "relatedStepId": "investigate",
    })
}

fn verification_report_schema() -> Value {
    let check = json!({
        "type": "object",
        "properties": {
            "check": bounded_string(VERIFICATION_TEXT_MAX_BYTES),
            "status": {"enum": ["fail", "not_run", "pass"]},
            "evidence": bounded_string(VERIFICATION_TEXT_MAX_BYTES),
        },
        "required": ["check", "evidence", "status"],
        "additionalProperties": false,
    });
    object(
        "wr.verification_report",
        json!({
            "checks": {
                "type": "array",
                "minItems": 1,
                "maxItems": VERIFICATION_MAX_CHECKS,
                "items": check,
            },
            "summary": bounded_string(LOOP_CONTROL_SUMMARY_MAX_BYTES),
        }),
        &["checks"],
    )
}

fn verification_report_example() -> Value {
    json!({
        "kind": "wr.verification_report",
        "checks": [
            {
                "check": "Unit tests pass",
                "status": "pass",
                "evidence": "cargo test -p parser printed 'test result: ok. 42 passed; 0 failed'.",
            },
            {
                "check": "The reported input no longer crashes",
                "status": "pass",
                "evidence": "Ran the repro from the ticket; exit code 0, output matches expected.",
            },
        ],
    })
}

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
use workrail_spec::closed::{Capability, DivergenceReason, LoopDecision};

/// The namespace every contract pack lives in.
pub const CONTRACT_PREFIX: &str = "wr.contracts.";

/// The schema keyword that bounds a string by UTF-8 bytes.
pub const MAX_UTF8_BYTES_KEYWORD: &str = "maxUtf8Bytes";

/// The JSON Schema dialect of every pack.
pub const SCHEMA_DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// `wr.contracts.loop_control`: the only input of `loop_control` conditions.
pub const LOOP_CONTROL: &str = "wr.contracts.loop_control";
/// `wr.contracts.capability_observation`: implied by `wr.templates.capability_probe`.
pub const CAPABILITY_OBSERVATION: &str = "wr.contracts.capability_observation";
/// `wr.contracts.workflow_divergence`.
pub const WORKFLOW_DIVERGENCE: &str = "wr.contracts.workflow_divergence";
/// `wr.contracts.verification_report`: makes a `verify` block enforceable.
pub const VERIFICATION_REPORT: &str = "wr.contracts.verification_report";

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
        contract_ref: CAPABILITY_OBSERVATION,
        artifact_kind: "wr.capability_observation",
        summary: "Whether a capability (delegation, web_browsing) worked when the agent tried it.",
        schema: capability_observation_schema,
        example: capability_observation_example,
    },
    ContractPack {
        contract_ref: LOOP_CONTROL,
        artifact_kind: "wr.loop_control",
        summary: "The loop decision (continue or stop) for the enclosing loop, with a short why.",
        schema: loop_control_schema,
        example: loop_control_example,
    },
    ContractPack {
        contract_ref: VERIFICATION_REPORT,
        artifact_kind: "wr.verification_report",
        summary: "Each verification check with its status and the evidence behind it.",
        schema: verification_report_schema,
        example: verification_report_example,
    },
    ContractPack {
        contract_ref: WORKFLOW_DIVERGENCE,
        artifact_kind: "workflow_divergence",
        summary: "An intentional deviation from the step's instructions, with reason and summary.",
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

fn object(kind: &str, properties: Value, required: &[&str]) -> Value {
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

fn capability_observation_schema() -> Value {
    object(
        "wr.capability_observation",
        json!({
            "capability": {"enum": strings(Capability::ALL, Capability::as_str)},
            "status": {"enum": ["available", "unavailable"]},
            "evidence": bounded_string(LOOP_CONTROL_SUMMARY_MAX_BYTES),
            "remediation": bounded_string(LOOP_CONTROL_SUMMARY_MAX_BYTES),
        }),
        &["capability", "evidence", "status"],
    )
}

fn capability_observation_example() -> Value {
    json!({
        "kind": "wr.capability_observation",
        "capability": "web_browsing",
        "status": "available",
        "evidence": "Fetched https://example.com and read its title.",
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

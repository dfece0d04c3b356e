//! The generated builtins catalog (`impl/builtins/catalog.json`).
//!
//! Generated from the registry definitions, never hand-edited: a test regenerates it in memory
//! and fails with a diff when the committed file is stale (locks §8, §16.2). Output is
//! deterministic: sorted keys, registry order for lists, no timestamps, two-space indentation
//! and a trailing newline.

use serde_json::{Map, Value, json};
use workrail_spec::closed::{Capability, CapabilityRequirement, LoopDecision};

use super::contracts::{CONTRACTS, MAX_UTF8_BYTES_KEYWORD};
use super::features::FeatureId;
use super::refs::{REF_SNIPPET_MAX_BYTES, REF_STEP_MAX_BYTES, REFS};
use super::routines::{ROUTINE_TEMPLATE_PREFIX, ROUTINE_TEMPLATE_SUMMARY};
use super::templates::TEMPLATES;

/// Bumped when the catalog's own shape changes.
pub const CATALOG_VERSION: u64 = 1;

/// The catalog as a JSON value.
pub fn catalog_value() -> Value {
    json!({
        "catalogVersion": CATALOG_VERSION,
        "budgets": {
            "refSnippetMaxBytes": REF_SNIPPET_MAX_BYTES,
            "refStepMaxBytes": REF_STEP_MAX_BYTES,
            "maxLoopIterations": crate::compiler::MAX_LOOP_ITERATIONS,
        },
        "capabilities": {
            "ids": Capability::ALL.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
            "requirements": CapabilityRequirement::ALL.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
        },
        "conditionKinds": [
            {"kind": "always_false", "fields": []},
            {"kind": "always_true", "fields": []},
            {
                "kind": "loop_control",
                "fields": [{
                    "name": "continueWhen",
                    "allowed": LoopDecision::ALL.iter().map(|d| d.as_str()).collect::<Vec<_>>(),
                }],
            },
        ],
        "contracts": CONTRACTS.iter().map(|c| json!({
            "contractRef": c.contract_ref,
            "artifactKind": c.artifact_kind,
            "summary": c.summary,
            "requirable": c.requirable,
            "schema": c.schema(),
            "example": c.example(),
        })).collect::<Vec<_>>(),
        "schemaKeywords": [{
            "keyword": MAX_UTF8_BYTES_KEYWORD,
            "meaning": "A string is at most this many UTF-8 bytes (JSON Schema's maxLength counts characters).",
        }],
        "features": FeatureId::ALL.iter().map(|f| feature_entry(*f)).collect::<Vec<_>>(),
        "refs": REFS.iter().map(|r| json!({
            "refId": r.ref_id,
            "summary": r.summary,
            "bytes": r.bytes(),
            "refContentHash": r.content_hash(),
            "text": r.text,
        })).collect::<Vec<_>>(),
        "templates": TEMPLATES.iter().map(|t| {
            let example_args: Map<String, Value> = t
                .args
                .iter()
                .map(|a| (a.name.to_owned(), Value::from(a.allowed.first().copied().unwrap_or(""))))
                .collect();
            json!({
                "templateId": t.template_id,
                "summary": t.summary,
                "args": t.args.iter().map(|a| json!({
                    "name": a.name,
                    "allowed": a.allowed,
                    "required": true,
                    "summary": a.summary,
                })).collect::<Vec<_>>(),
                "impliedContract": t.implied_contract,
                "example": {"type": "template_call", "templateId": t.template_id, "args": example_args},
            })
        }).collect::<Vec<_>>(),
        "routineTemplates": {
            "templateIdPattern": format!("{ROUTINE_TEMPLATE_PREFIX}<name>"),
            "routineIdPattern": "<namespace>.routine-<name>",
            "summary": ROUTINE_TEMPLATE_SUMMARY,
            "args": "Free-form: each `{arg}` placeholder (an identifier in single braces) of the routine's step titles and prompts needs an argument that is a string, number or boolean.",
            "example": {
                "id": "design-review",
                "title": "Review the chosen design",
                "templateCall": {
                    "templateId": format!("{ROUTINE_TEMPLATE_PREFIX}design-review"),
                    "args": {"deliverableName": "design-review.md"},
                },
            },
        },
    })
}

fn feature_entry(feature: FeatureId) -> Value {
    let fields = feature.config_fields();
    let example = if fields.is_empty() {
        Value::from(feature.as_str())
    } else {
        let config: Map<String, Value> = fields
            .iter()
            .map(|f| (f.name.to_owned(), Value::from(f.default)))
            .collect();
        json!({"id": feature.as_str(), "config": config})
    };
    json!({
        "featureId": feature.as_str(),
        "summary": feature.summary(),
        "configurable": feature.configurable(),
        "config": fields.iter().map(|f| json!({
            "name": f.name,
            "allowed": f.allowed,
            "default": f.default,
            "summary": f.summary,
        })).collect::<Vec<_>>(),
        "example": example,
    })
}

/// The catalog file's exact text.
pub fn catalog_json() -> String {
    let mut text = serde_json::to_string_pretty(&catalog_value()).unwrap_or_default();
    text.push('\n');
    text
}

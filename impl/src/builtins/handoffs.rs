//! The hand-off and verdict contract packs (`wr.contracts.coding_handoff`, `discovery_handoff`,
//! `differentiation_handoff`, `shaping_handoff`, `review_verdict`, `gate_verdict`): the artifacts
//! one workflow passes to the next one or to whoever coordinates them.
//!
//! The field shapes are those the WorkRail 3.x artifacts use, so a workflow written for it asks
//! for the same artifact here; the schemas and examples are WorkRail-rs's own. Outer objects are
//! closed (`additionalProperties: false`); nested objects accept extra fields, as 3.x does.

use serde_json::{Value, json};

use super::contracts::object;

/// A string of 1 to `max` characters.
fn text(max: usize) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": max})
}

/// A list of at most `max_items` strings of 1 to `max` characters.
fn texts(max: usize, max_items: usize) -> Value {
    json!({"type": "array", "items": text(max), "maxItems": max_items})
}

fn non_empty() -> Value {
    json!({"type": "string", "minLength": 1})
}

fn confidence() -> Value {
    json!({"enum": ["high", "low", "medium"]})
}

fn version_one() -> Value {
    json!({"const": 1})
}

/// `wr.contracts.coding_handoff`.
pub(super) fn coding_handoff_schema() -> Value {
    object(
        "wr.coding_handoff",
        json!({
            "version": version_one(),
            "branchName": non_empty(),
            "keyDecisions": texts(200, 8),
            "knownLimitations": texts(200, 6),
            "testsAdded": texts(200, 10),
            "filesChanged": texts(300, 20),
            "correctedAssumptions": {
                "type": "array",
                "maxItems": 6,
                "items": {
                    "type": "object",
                    "properties": {"assumed": text(200), "actual": text(200)},
                    "required": ["actual", "assumed"],
                },
            },
        }),
        &[
            "filesChanged",
            "keyDecisions",
            "knownLimitations",
            "testsAdded",
            "version",
        ],
    )
}

pub(super) fn coding_handoff_example() -> Value {
    json!({
        "kind": "wr.coding_handoff",
        "version": 1,
        "branchName": "fix/retry-backoff",
        "keyDecisions": ["Kept the public retry API; only the backoff schedule changed."],
        "knownLimitations": ["Jitter is not configurable yet."],
        "testsAdded": ["retry::backoff_doubles_up_to_the_cap"],
        "filesChanged": ["src/retry.rs", "tests/retry.rs"],
    })
}

/// `wr.contracts.discovery_handoff`.
pub(super) fn discovery_handoff_schema() -> Value {
    object(
        "wr.discovery_handoff",
        json!({
            "version": version_one(),
            "selectedDirection": non_empty(),
            "designDocPath": {"type": "string"},
            "confidenceBand": confidence(),
            "keyInvariants": texts(200, 12),
            "rejectedDirections": {
                "type": "array",
                "maxItems": 5,
                "items": {
                    "type": "object",
                    "properties": {"direction": text(200), "reason": text(300)},
                    "required": ["direction", "reason"],
                },
            },
            "implementationConstraints": texts(200, 8),
            "keyCodebaseLocations": {
                "type": "array",
                "maxItems": 10,
                "items": {
                    "type": "object",
                    "properties": {"path": text(300), "relevance": text(150)},
                    "required": ["path", "relevance"],
                },
            },
            "selectionTier": {"enum": ["insufficient_signal", "provisional_recommendation", "strong_recommendation"]},
        }),
        &[
            "confidenceBand",
            "designDocPath",
            "keyInvariants",
            "selectedDirection",
            "version",
        ],
    )
}

pub(super) fn discovery_handoff_example() -> Value {
    json!({
        "kind": "wr.discovery_handoff",
        "version": 1,
        "selectedDirection": "Cache compiled workflows per source file and recompile on change.",
        "designDocPath": "docs/design/workflow-cache.md",
        "confidenceBand": "medium",
        "keyInvariants": ["A cached workflow always equals a fresh compile of the same text."],
        "selectionTier": "provisional_recommendation",
    })
}

/// `wr.contracts.differentiation_handoff`.
pub(super) fn differentiation_handoff_schema() -> Value {
    let date_time = json!({"type": "string", "format": "date-time"});
    object(
        "wr.differentiation_handoff",
        json!({
            "version": version_one(),
            "schemaVersion": {"const": "1.0.0"},
            "generatedAt": date_time,
            "evidenceFreshness": {
                "type": "object",
                "properties": {"oldestCapturedAt": date_time, "newestCapturedAt": date_time},
                "required": ["newestCapturedAt", "oldestCapturedAt"],
            },
            "validationChecklist": texts(200, 10),
            "shapingHandoff": {
                "type": "object",
                "properties": {
                    "rawIdea": non_empty(),
                    "problem": non_empty(),
                    "baseline": non_empty(),
                    "appetiteHint": {"enum": ["big_batch", "small_batch"]},
                    "noGosHints": {"type": "array", "items": {"type": "string"}},
                    "constraints": {
                        "type": "object",
                        "properties": {
                            "teamSize": {"type": "integer", "minimum": 1},
                            "technicalCapabilities": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                            "exclusions": {"type": "array", "items": {"type": "string"}},
                        },
                        "required": ["teamSize", "technicalCapabilities"],
                    },
                    "evidenceTopK": {
                        "type": "array",
                        "items": {"type": "string", "format": "uuid"},
                        "maxItems": 10,
                    },
                    "defensibilityClaim": {
                        "type": "object",
                        "properties": {
                            "power": {"enum": [
                                "Branding",
                                "Cornered Resource",
                                "Counter-Positioning",
                                "Network Economies",
                                "None_Imitable",
                                "Process Power",
                                "Scale Economies",
                                "Switching Costs",
                            ]},
                            "cannibalization": {"type": "string"},
                        },
                        "required": ["cannibalization", "power"],
                    },
                },
                "required": [
                    "appetiteHint",
                    "baseline",
                    "constraints",
                    "defensibilityClaim",
                    "evidenceTopK",
                    "noGosHints",
                    "problem",
                    "rawIdea",
                ],
            },
        }),
        &[
            "evidenceFreshness",
            "generatedAt",
            "schemaVersion",
            "shapingHandoff",
            "validationChecklist",
            "version",
        ],
    )
}

pub(super) fn differentiation_handoff_example() -> Value {
    json!({
        "kind": "wr.differentiation_handoff",
        "version": 1,
        "schemaVersion": "1.0.0",
        "generatedAt": "2026-03-02T10:00:00Z",
        "evidenceFreshness": {
            "oldestCapturedAt": "2026-02-20T08:00:00Z",
            "newestCapturedAt": "2026-03-01T17:30:00Z",
        },
        "validationChecklist": ["Two pilot teams finish onboarding without help."],
        "shapingHandoff": {
            "rawIdea": "Offline-first field notes for inspectors.",
            "problem": "Inspectors lose notes when the site has no signal and retype them later.",
            "baseline": "Paper forms transcribed at the office.",
            "appetiteHint": "small_batch",
            "noGosHints": ["No custom form builder."],
            "constraints": {"teamSize": 2, "technicalCapabilities": ["mobile", "sync"]},
            "evidenceTopK": ["3f0c2a9e-8d4b-4c1e-9a57-2b6f1d0e7c31"],
            "defensibilityClaim": {
                "power": "Switching Costs",
                "cannibalization": "None: no current product serves offline use.",
            },
        },
    })
}

/// `wr.contracts.shaping_handoff`.
pub(super) fn shaping_handoff_schema() -> Value {
    object(
        "wr.shaping_handoff",
        json!({
            "version": version_one(),
            "pitchPath": non_empty(),
            "selectedShape": text(200),
            "appetite": text(100),
            "keyConstraints": texts(200, 8),
            "rabbitHoles": texts(200, 6),
            "outOfScope": texts(200, 6),
            "validationChecklist": texts(200, 10),
        }),
        &[
            "appetite",
            "keyConstraints",
            "outOfScope",
            "pitchPath",
            "rabbitHoles",
            "selectedShape",
            "validationChecklist",
            "version",
        ],
    )
}

pub(super) fn shaping_handoff_example() -> Value {
    json!({
        "kind": "wr.shaping_handoff",
        "version": 1,
        "pitchPath": "docs/pitches/offline-notes.md",
        "selectedShape": "Local note queue that syncs when a connection returns.",
        "appetite": "Small batch: two weeks",
        "keyConstraints": ["Works with no connection for a full day."],
        "rabbitHoles": ["Conflict resolution beyond last-writer-wins."],
        "outOfScope": ["Photo annotation."],
        "validationChecklist": ["A note written offline appears on the server after reconnecting."],
    })
}

/// `wr.contracts.review_verdict`.
pub(super) fn review_verdict_schema() -> Value {
    object(
        "wr.review_verdict",
        json!({
            "verdict": {"enum": ["blocking", "clean", "minor"]},
            "confidence": confidence(),
            "findings": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "severity": {"enum": ["critical", "major", "minor", "nit"]},
                        "summary": non_empty(),
                        "findingCategory": {"enum": [
                            "architecture",
                            "correctness",
                            "performance",
                            "security",
                            "style",
                            "testing",
                            "ux",
                        ]},
                    },
                    "required": ["severity", "summary"],
                },
            },
            "summary": non_empty(),
        }),
        &["confidence", "findings", "summary", "verdict"],
    )
}

pub(super) fn review_verdict_example() -> Value {
    json!({
        "kind": "wr.review_verdict",
        "verdict": "minor",
        "confidence": "high",
        "findings": [{
            "severity": "minor",
            "summary": "The new retry loop ignores the caller's timeout.",
            "findingCategory": "correctness",
            "file": "src/client.rs",
            "startLine": 88,
        }],
        "summary": "One minor correctness issue; safe to merge after the fix.",
    })
}

/// `wr.contracts.gate_verdict`.
pub(super) fn gate_verdict_schema() -> Value {
    object(
        "wr.gate_verdict",
        json!({
            "version": version_one(),
            "verdict": {"enum": ["approved", "rejected", "uncertain"]},
            "confidence": confidence(),
            "rationale": {"type": "string", "minLength": 20},
        }),
        &["confidence", "rationale", "verdict", "version"],
    )
}

pub(super) fn gate_verdict_example() -> Value {
    json!({
        "kind": "wr.gate_verdict",
        "version": 1,
        "verdict": "approved",
        "confidence": "high",
        "rationale": "Every acceptance criterion of the hand-off is met and evidenced.",
    })
}

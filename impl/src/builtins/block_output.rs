//! `wr.contracts.block_output`: what one lane of a parallel step produced (the stateless block
//! contract's block output, `../shared/spec-sources/stateless-block-contract.md`): its block type
//! and status from closed sets, its deliverables (a union by deliverables type), a summary, and
//! the files it modified and created as relative paths, so a fan-in can detect two lanes that
//! touched the same file from recorded outputs alone.
//!
//! The schema bounds every string and list; what JSON Schema cannot say (a path that is relative
//! and stays inside the workspace, deliverables that fit the block type, an RFC 3339 timestamp,
//! no path listed twice) the engine checks beside it (`engine::block_output`).

use serde_json::{Value, json};

use super::contracts::{MAX_UTF8_BYTES_KEYWORD, object};

/// The block types (closed set).
pub const BLOCK_TYPES: [&str; 5] = ["dev", "devops", "plan", "review", "test"];
/// The block statuses (closed set): every output produced, the block errored, some produced.
pub const BLOCK_STATUSES: [&str; 3] = ["completed", "failed", "partial"];
/// The deliverables types (closed set).
pub const DELIVERABLE_TYPES: [&str; 3] = ["code", "generic", "plan"];

/// Max UTF-8 bytes of the block id.
pub const BLOCK_ID_MAX_BYTES: usize = 128;
/// Max UTF-8 bytes of the summary (1 to 3 sentences).
pub const BLOCK_SUMMARY_MAX_BYTES: usize = 1024;
/// Max UTF-8 bytes of one relative path.
pub const PATH_MAX_BYTES: usize = 512;
/// Max paths in `filesModified`, `filesCreated` or `filesChanged`.
pub const MAX_PATHS: usize = 200;
/// Max UTF-8 bytes of a plan's markdown document.
pub const PLAN_DOCUMENT_MAX_BYTES: usize = 16 * 1024;
/// Max tasks in a plan's task list, and UTF-8 bytes of one task.
pub const MAX_TASKS: usize = 100;
pub const TASK_MAX_BYTES: usize = 512;
/// Max UTF-8 bytes of a code block's diff summary.
pub const DIFF_SUMMARY_MAX_BYTES: usize = 2048;

fn bounded(max_bytes: usize) -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": max_bytes, MAX_UTF8_BYTES_KEYWORD: max_bytes})
}

fn paths() -> Value {
    json!({"type": "array", "items": bounded(PATH_MAX_BYTES), "maxItems": MAX_PATHS})
}

fn deliverables() -> Value {
    let closed = |properties: Value, required: &[&str]| {
        json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        })
    };
    json!({"oneOf": [
        closed(json!({
            "blockType": {"const": "plan"},
            "markdownDocument": bounded(PLAN_DOCUMENT_MAX_BYTES),
            "taskList": {"type": "array", "items": bounded(TASK_MAX_BYTES), "maxItems": MAX_TASKS},
        }), &["blockType", "markdownDocument", "taskList"]),
        closed(json!({
            "blockType": {"const": "code"},
            "filesChanged": paths(),
            "diffSummary": bounded(DIFF_SUMMARY_MAX_BYTES),
        }), &["blockType", "diffSummary", "filesChanged"]),
        closed(json!({
            "blockType": {"const": "generic"},
            "summary": bounded(BLOCK_SUMMARY_MAX_BYTES),
        }), &["blockType", "summary"]),
    ]})
}

/// `wr.contracts.block_output`.
pub(super) fn schema() -> Value {
    object(
        "wr.block_output",
        json!({
            "blockId": bounded(BLOCK_ID_MAX_BYTES),
            "blockType": {"enum": BLOCK_TYPES},
            "status": {"enum": BLOCK_STATUSES},
            "deliverables": deliverables(),
            "summary": bounded(BLOCK_SUMMARY_MAX_BYTES),
            "filesModified": paths(),
            "filesCreated": paths(),
            "timestamp": {"type": "string", "minLength": 1, "maxLength": 64},
        }),
        &[
            "blockId",
            "blockType",
            "deliverables",
            "filesCreated",
            "filesModified",
            "status",
            "summary",
            "timestamp",
        ],
    )
}

pub(super) fn example() -> Value {
    json!({
        "kind": "wr.block_output",
        "blockId": "lane-api",
        "blockType": "dev",
        "status": "completed",
        "deliverables": {
            "blockType": "code",
            "filesChanged": ["src/api/retry.rs"],
            "diffSummary": "Retries now back off exponentially up to the configured cap.",
        },
        "summary": "Added exponential backoff to the API client's retries, with a test.",
        "filesModified": ["src/api/retry.rs"],
        "filesCreated": ["tests/retry_backoff.rs"],
        "timestamp": "2026-11-27T10:15:00Z",
    })
}

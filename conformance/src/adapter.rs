//! The reference adapter: answers the vector ops with `workrail-spec` (the binary
//! `workrail-conformance-adapter` reads requests on stdin and writes answers on stdout).
//!
//! The projections (`preferred_tip`, `run_status`, `resume_ranking`) live in `workrail-model`,
//! which this crate may not depend on (ARCHITECTURE.md: conformance depends only on
//! `workrail-spec`), so the reference adapter answers them `unsupported`.

use serde_json::{Value, json};
use workrail_spec::blocker::{
    Blocker, BlockerCode, BlockerPointer, BlockerReport, BlockerReportError,
};
use workrail_spec::budget::truncate_with_marker;
use workrail_spec::closed::{Autonomy, TokenKind};
use workrail_spec::dedupe::DedupeKey;
use workrail_spec::event::SessionEvent;
use workrail_spec::ids::StepId;
use workrail_spec::jcs;
use workrail_spec::reason::ReasonCode;
use workrail_spec::skey::{LoopPathEntry, StepInstanceKey};
use workrail_spec::token::{TokenParts, TokenPayload, format_token};

/// Why the reference adapter does not answer the projection ops.
pub const PROJECTIONS_UNSUPPORTED: &str = "projections live in workrail-model, which workrail-conformance may not depend on (it depends on workrail-spec only); supply an adapter that answers preferred_tip, run_status and resume_ranking";

/// Serves the adapter protocol on this process's stdin and stdout with `answer` (one JSON request
/// per line, one JSON answer per line), until stdin ends or stdout closes. Adapters of other
/// implementations (e.g. `workrail-vector-adapter`) reuse it with their own answers.
pub fn serve_stdio(answer: impl Fn(&str) -> String) {
    use std::io::{BufRead, Write};
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else {
            return;
        };
        if line.trim().is_empty() {
            continue;
        }
        if writeln!(stdout, "{}", answer(&line))
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return;
        }
    }
}

/// Answers one request line with one answer line.
pub fn answer_line(line: &str) -> String {
    let answer = match serde_json::from_str::<Value>(line) {
        Ok(request) => answer(&request),
        Err(e) => json!({"error": format!("the request is not JSON: {e}")}),
    };
    answer.to_string()
}

/// Answers one request.
pub fn answer(request: &Value) -> Value {
    let op = request.get("op").and_then(Value::as_str).unwrap_or("");
    let outcome = match op {
        "jcs" => jcs_op(request),
        "sha256" => {
            text(request, "utf8").map(|t| Ok(json!({"sha256": jcs::sha256(t.as_bytes()).as_str()})))
        }
        "dedupe_key" => dedupe_key(request),
        "dedupe_key_valid" => {
            text(request, "value").map(|v| Ok(json!({"valid": DedupeKey::parse(v).is_ok()})))
        }
        "step_instance_key" => step_instance_key(request),
        "format_step_instance_key" => format_step_instance_key(request),
        "truncate" => truncate(request),
        "sort_blockers" => sort_blockers(request),
        "reason_mapping" => reason_mapping(request),
        "token_encode" => token_encode(request),
        "token_parse" => token_parse(request),
        "preferred_tip" | "run_status" | "resume_ranking" => {
            return json!({"unsupported": PROJECTIONS_UNSUPPORTED});
        }
        other => return json!({"unsupported": format!("unknown op {other:?}")}),
    };
    match outcome {
        Ok(Ok(result)) => json!({"result": result}),
        Ok(Err(class)) => json!({"rejected": class}),
        Err(e) => json!({"error": e}),
    }
}

/// `Ok(Ok(result))`, `Ok(Err(rejection class))`, or `Err(adapter error)`.
type Outcome = Result<Result<Value, String>, String>;

fn field<'a>(request: &'a Value, name: &str) -> Result<&'a Value, String> {
    request
        .get(name)
        .ok_or_else(|| format!("the request has no `{name}`"))
}

fn text<'a>(request: &'a Value, name: &str) -> Result<&'a str, String> {
    field(request, name)?
        .as_str()
        .ok_or_else(|| format!("`{name}` is not a string"))
}

fn jcs_op(request: &Value) -> Outcome {
    let input = text(request, "input")?;
    Ok(match jcs::canonicalize_json_text(input) {
        Ok(canonical) => Ok(json!({
            "sha256": jcs::sha256(canonical.as_bytes()).as_str(),
            "canonical": canonical,
        })),
        Err(e) => Err(e.to_string()),
    })
}

fn dedupe_key(request: &Value) -> Outcome {
    let event = SessionEvent::from_value(field(request, "event")?.clone())
        .map_err(|e| format!("the event does not parse: {e}"))?;
    // Recompute from the payload and scope (the recipe), not from the stored field.
    let key = event
        .data()
        .dedupe_key(event.session_id(), event.scope())
        .map_err(|e| e.to_string())?;
    Ok(Ok(json!({"dedupeKey": key.as_str()})))
}

fn step_instance_key(request: &Value) -> Outcome {
    Ok(match StepInstanceKey::parse(text(request, "key")?) {
        Ok(key) => Ok(json!({
            "loopPath": serde_json::to_value(&key.loop_path).map_err(|e| e.to_string())?,
            "stepId": key.step_id.as_str(),
        })),
        Err(e) => Err(e.to_string()),
    })
}

fn format_step_instance_key(request: &Value) -> Outcome {
    let loop_path: Vec<LoopPathEntry> = serde_json::from_value(field(request, "loopPath")?.clone())
        .map_err(|e| format!("loopPath: {e}"))?;
    let step_id = StepId::parse(text(request, "stepId")?).map_err(|e| e.to_string())?;
    Ok(Ok(
        json!({"key": StepInstanceKey::new(loop_path, step_id).to_string()}),
    ))
}

fn truncate(request: &Value) -> Outcome {
    let input = text(request, "text")?;
    let max = field(request, "maxBytes")?
        .as_u64()
        .and_then(|m| usize::try_from(m).ok())
        .ok_or("`maxBytes` is not a count")?;
    Ok(match truncate_with_marker(input, max) {
        Ok(t) => Ok(json!({"text": t.text, "truncated": t.truncated})),
        Err(e) => Err(format!("budget_too_small: {e}")),
    })
}

fn blocker_class(e: &BlockerReportError) -> &'static str {
    match e {
        BlockerReportError::Empty => "empty",
        BlockerReportError::TooMany { .. } => "too_many_blockers",
        BlockerReportError::MessageTooLong { .. } => "message_too_long",
        BlockerReportError::SuggestedFixTooLong { .. } => "suggested_fix_too_long",
        BlockerReportError::NotSorted => "not_sorted",
    }
}

fn sort_blockers(request: &Value) -> Outcome {
    let items = field(request, "blockers")?
        .as_array()
        .ok_or("`blockers` is not an array")?;
    let mut blockers = Vec::with_capacity(items.len());
    for b in items {
        let code: BlockerCode =
            serde_json::from_value(b.get("code").cloned().unwrap_or(Value::Null))
                .map_err(|e| format!("code: {e}"))?;
        let pointer: BlockerPointer =
            serde_json::from_value(b.get("pointer").cloned().unwrap_or(Value::Null))
                .map_err(|e| format!("pointer: {e}"))?;
        let message = b
            .get("message")
            .and_then(Value::as_str)
            .ok_or("a blocker has no message")?;
        let fix = b
            .get("suggestedFix")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match Blocker::new(code, pointer, message, fix) {
            Ok(blocker) => blockers.push(blocker),
            Err(e) => return Ok(Err(blocker_class(&e).to_owned())),
        }
    }
    Ok(match BlockerReport::new(blockers) {
        Ok(report) => {
            Ok(json!({"blockers": serde_json::to_value(&report).map_err(|e| e.to_string())?}))
        }
        Err(e) => Err(blocker_class(&e).to_owned()),
    })
}

fn reason_mapping(request: &Value) -> Outcome {
    let code: ReasonCode = text(request, "reasonCode")?
        .parse()
        .map_err(|e| format!("{e}"))?;
    let autonomy = Autonomy::parse(text(request, "autonomy")?).ok_or("unknown autonomy")?;
    let required = field(request, "subjectRequired")?
        .as_bool()
        .ok_or("`subjectRequired` is not a boolean")?;
    let d =
        serde_json::to_value(code.disposition(autonomy, required)).map_err(|e| e.to_string())?;
    Ok(Ok(json!({
        "blockerCode": code.blocker_code().as_str(),
        "gapReason": serde_json::to_value(code.gap_reason()).map_err(|e| e.to_string())?,
        "blocks": d["blocks"],
        "gapSeverity": d["gapSeverity"],
    })))
}

fn hex_decode(hex: &str) -> Result<Vec<u8>, String> {
    if !hex.len().is_multiple_of(2) || !hex.is_ascii() {
        return Err("hmacKeyHex is not hex".into());
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

/// HMAC-SHA256 (RFC 2104) over the spec crate's SHA-256.
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    const BLOCK: usize = 64;
    let mut padded = [0u8; BLOCK];
    if key.len() > BLOCK {
        padded[..32].copy_from_slice(&jcs::sha256(key).bytes());
    } else {
        padded[..key.len()].copy_from_slice(key);
    }
    let mut inner: Vec<u8> = padded.iter().map(|b| b ^ 0x36).collect();
    inner.extend_from_slice(message);
    let mut outer: Vec<u8> = padded.iter().map(|b| b ^ 0x5c).collect();
    outer.extend_from_slice(&jcs::sha256(&inner).bytes());
    jcs::sha256(&outer).bytes()
}

fn token_encode(request: &Value) -> Outcome {
    let payload = field(request, "payload")?;
    let key = hex_decode(text(request, "hmacKeyHex")?)?;
    let kind = payload
        .get("tokenKind")
        .and_then(Value::as_str)
        .and_then(TokenKind::parse)
        .ok_or("payload has no known tokenKind")?;
    let canonical = jcs::to_canonical_bytes(payload).map_err(|e| e.to_string())?;
    let decoded = match TokenPayload::from_canonical_bytes(&canonical, kind) {
        Ok(p) => p,
        Err(e) => return Ok(Err(e.code().as_str().to_owned())),
    };
    let bytes = decoded.canonical_bytes();
    let signature = hmac_sha256(&key, &bytes);
    let token = format_token(&decoded, &signature);
    let segment = token.split('.').nth(3).unwrap_or("").to_owned();
    Ok(Ok(json!({
        "canonical": String::from_utf8(bytes).map_err(|e| e.to_string())?,
        "payloadSegment": decoded.encode(),
        "signature": segment,
        "token": token,
    })))
}

fn token_parse(request: &Value) -> Outcome {
    let token = text(request, "token")?;
    let parsed = TokenParts::parse(token).and_then(|p| p.payload());
    Ok(match parsed {
        Ok(payload) => Ok(json!({"payload": payload.to_value().map_err(|e| e.to_string())?})),
        Err(e) => Err(e.code().as_str().to_owned()),
    })
}

//! The checkers: pure functions from what a server returned to the problems found.
//!
//! Two checks run on every response of every scenario, with their own lock ids:
//! [`error_envelope`] on every error result and [`execution_response`] on every non-error
//! result of `start_workflow`, `continue_workflow` and `checkpoint_workflow`. The others are
//! invoked by scenario steps, which attach the step's lock ids.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value};
use workrail_spec::blocker::Blocker;
use workrail_spec::budget::{
    BLOCKER_MESSAGE_MAX_BYTES, BLOCKER_SUGGESTED_FIX_MAX_BYTES, MAX_BLOCKERS,
};
use workrail_spec::error::ErrorCode;
use workrail_spec::jcs;

use crate::mcp::ToolResult;
use crate::surface::TokenFormat;

/// One problem: the locks it violates, what was expected and what came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub lock: Vec<String>,
    pub expected: String,
    pub got: String,
}

impl Problem {
    pub fn new(lock: &[&str], expected: impl Into<String>, got: impl Into<String>) -> Self {
        Self {
            lock: lock.iter().map(|s| (*s).to_owned()).collect(),
            expected: expected.into(),
            got: got.into(),
        }
    }
}

/// An expected/got pair without locks (the caller attaches the step's locks).
pub type Mismatch = (String, String);

/// Locks checked on every error result.
pub const ENVELOPE_LOCKS: [&str; 3] = [
    "L-ERR-ENVELOPE",
    "L-ERR-RETRY-UNION",
    "L-ERR-SELF-CORRECTING",
];

/// A suite heuristic for "bounded" `details` (the locks give no number).
pub const DETAILS_MAX_BYTES: usize = 65536;

/// Shortens a JSON value or text for reports.
pub fn brief(text: &str) -> String {
    const MAX: usize = 600;
    if text.len() <= MAX {
        return text.to_owned();
    }
    let cut = workrail_spec::budget::floor_char_boundary(text, MAX);
    format!("{}… ({} bytes in all)", &text[..cut], text.len())
}

/// Shortens a JSON value for reports.
pub fn brief_json(value: &Value) -> String {
    brief(&value.to_string())
}

/// The unified error envelope `{code, message, suggestion, retry, details?}` (locks §12).
pub fn error_envelope(structured: &Value) -> Vec<Problem> {
    let mut out = Vec::new();
    let Some(env) = structured.as_object() else {
        out.push(Problem::new(
            &["L-ERR-ENVELOPE"],
            "structuredContent holding the error envelope {code, message, suggestion, retry}",
            brief_json(structured),
        ));
        return out;
    };
    match env.get("code").and_then(Value::as_str) {
        Some(code)
            if !code.is_empty()
                && code
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_') => {}
        _ => out.push(Problem::new(
            &["L-ERR-ENVELOPE"],
            "`code`: a closed-set code string (UPPER_SNAKE_CASE)",
            brief_json(env.get("code").unwrap_or(&Value::Null)),
        )),
    }
    if env
        .get("message")
        .and_then(Value::as_str)
        .is_none_or(|m| m.trim().is_empty())
    {
        out.push(Problem::new(
            &["L-ERR-ENVELOPE"],
            "`message`: a non-empty string",
            brief_json(env.get("message").unwrap_or(&Value::Null)),
        ));
    }
    if env
        .get("suggestion")
        .and_then(Value::as_str)
        .is_none_or(|m| m.trim().is_empty())
    {
        out.push(Problem::new(
            &["L-ERR-SELF-CORRECTING"],
            "`suggestion`: a non-empty string telling the agent exactly what to do next",
            brief_json(env.get("suggestion").unwrap_or(&Value::Null)),
        ));
    }
    if let Err(e) = retry_union(env.get("retry")) {
        out.push(Problem::new(
            &["L-ERR-RETRY-UNION"],
            "`retry`: {kind: not_retryable} | {kind: retryable_immediate} | {kind: retryable_after_ms, afterMs: <non-negative integer>}",
            e,
        ));
    }
    if let Some(details) = env.get("details") {
        let len = details.to_string().len();
        if len > DETAILS_MAX_BYTES {
            out.push(Problem::new(
                &["L-ERR-ENVELOPE"],
                format!("bounded `details` (suite limit {DETAILS_MAX_BYTES} bytes of JSON)"),
                format!("{len} bytes"),
            ));
        }
    }
    out
}

fn retry_union(retry: Option<&Value>) -> Result<(), String> {
    let Some(retry) = retry else {
        return Err("no `retry`".into());
    };
    let Some(obj) = retry.as_object() else {
        return Err(brief_json(retry));
    };
    let kind = obj.get("kind").and_then(Value::as_str);
    let allowed: &[&str] = match kind {
        Some("not_retryable" | "retryable_immediate") => &["kind"],
        Some("retryable_after_ms") => {
            if obj.get("afterMs").and_then(Value::as_u64).is_none() {
                return Err(format!(
                    "retryable_after_ms without a non-negative integer afterMs: {retry}"
                ));
            }
            &["kind", "afterMs"]
        }
        _ => return Err(format!("unknown retry kind: {retry}")),
    };
    if let Some(extra) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!("unexpected field `{extra}` in {retry}"));
    }
    Ok(())
}

/// WorkRail-rs's stricter envelope: exactly the five keys and a code from its closed set.
pub fn strict_error_envelope(structured: &Value) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let Some(env) = structured.as_object() else {
        return vec![("an error envelope object".into(), brief_json(structured))];
    };
    const KEYS: [&str; 5] = ["code", "message", "suggestion", "retry", "details"];
    for k in env.keys() {
        if !KEYS.contains(&k.as_str()) {
            out.push((
                format!("only the keys {KEYS:?}"),
                format!("extra key `{k}`"),
            ));
        }
    }
    let code = env.get("code").and_then(Value::as_str).unwrap_or("");
    if ErrorCode::parse(code).is_none() {
        out.push((
            "a code from WorkRail-rs's closed ErrorCode set".into(),
            format!("{code:?}"),
        ));
    }
    if let Some(d) = env.get("details")
        && !d.is_object()
    {
        out.push(("`details` as an object".into(), brief_json(d)));
    }
    out
}

/// Which token a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    State,
    Ack,
    Checkpoint,
}

impl TokenKind {
    pub fn prefix(self) -> &'static str {
        match self {
            Self::State => "st",
            Self::Ack => "ack",
            Self::Checkpoint => "chk",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::State => "state",
            Self::Ack => "ack",
            Self::Checkpoint => "checkpoint",
        }
    }

    fn fields(self) -> [&'static str; 6] {
        let last = match self {
            Self::State => "workflowHash",
            Self::Ack | Self::Checkpoint => "attemptId",
        };
        [
            "tokenVersion",
            "tokenKind",
            "sessionId",
            "runId",
            "nodeId",
            last,
        ]
    }
}

/// Decodes a token per locks §1.2: `<st|ack|chk>.v1.<payload>.<sig>`, `<payload>` base64url of
/// the RFC 8785 form of exactly the locked fields, `<sig>` a 32-byte HMAC-SHA256. Returns the
/// payload fields. The signature itself cannot be verified without the server's key.
pub fn decode_token(token: &str, kind: TokenKind) -> Result<Map<String, Value>, String> {
    let parts: Vec<&str> = token.split('.').collect();
    let [prefix, version, payload, sig] = parts.as_slice() else {
        return Err(format!("{} dot-separated parts, expected 4", parts.len()));
    };
    if *prefix != kind.prefix() {
        return Err(format!("prefix `{prefix}`, expected `{}`", kind.prefix()));
    }
    if *version != "v1" {
        return Err(format!("version `{version}`, expected `v1`"));
    }
    let payload_bytes = URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .map_err(|e| format!("payload is not base64url: {e}"))?;
    let sig_bytes = URL_SAFE_NO_PAD
        .decode(sig.trim_end_matches('='))
        .map_err(|e| format!("signature is not base64url: {e}"))?;
    if sig_bytes.len() != 32 {
        return Err(format!(
            "signature is {} bytes, an HMAC-SHA256 is 32",
            sig_bytes.len()
        ));
    }
    let text = String::from_utf8(payload_bytes).map_err(|_| "payload is not UTF-8".to_owned())?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| format!("payload is not JSON: {e}"))?;
    let canonical = jcs::to_canonical_string(&value)
        .map_err(|e| format!("payload cannot be canonicalized: {e}"))?;
    if canonical != text {
        return Err(format!(
            "payload is not RFC 8785 canonical JSON: {text:.200} (canonical: {canonical:.200})"
        ));
    }
    let Value::Object(map) = value else {
        return Err("payload is not a JSON object".into());
    };
    let mut keys: Vec<&str> = map.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut want = kind.fields().to_vec();
    want.sort_unstable();
    if keys != want {
        return Err(format!(
            "payload fields {keys:?}, expected exactly {want:?}"
        ));
    }
    if map.get("tokenVersion").and_then(Value::as_u64) != Some(1) {
        return Err(format!("tokenVersion {}, expected 1", map["tokenVersion"]));
    }
    if map.get("tokenKind").and_then(Value::as_str) != Some(kind.name()) {
        return Err(format!(
            "tokenKind {}, expected {:?}",
            map["tokenKind"],
            kind.name()
        ));
    }
    for f in &kind.fields()[2..] {
        if map
            .get(*f)
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(format!("`{f}` is not a non-empty string"));
        }
    }
    if kind == TokenKind::State {
        let hash = map
            .get("workflowHash")
            .and_then(Value::as_str)
            .unwrap_or("");
        if !is_sha256_digest(hash) {
            return Err(format!(
                "workflowHash {hash:?} is not sha256:<64 lowercase hex>"
            ));
        }
    }
    Ok(map)
}

/// `sha256:<64 lowercase hex>` (locks §11).
pub fn is_sha256_digest(s: &str) -> bool {
    s.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Closed set of `nextIntent` (locks §16.3).
pub const NEXT_INTENTS: [&str; 4] = [
    "perform_pending_then_continue",
    "await_user_confirmation",
    "rehydrate_only",
    "complete",
];

/// The shape of a non-error execution response (contract "Request/Response Shapes", locks §1.2).
/// `checkpoint_token_expected`: the server exposes `checkpoint_workflow`, so its responses carry
/// a `checkpointToken`.
/// With `TokenFormat::Opaque` tokens are only checked to be non-empty strings (the token-format
/// locks are then not applicable).
pub fn execution_response(
    result: &ToolResult,
    checkpoint_token_expected: bool,
    format: TokenFormat,
) -> Vec<Problem> {
    let opaque = format == TokenFormat::Opaque;
    let mut out = Vec::new();
    if !result.text_first || result.text.trim().is_empty() {
        out.push(Problem::new(
            &["L-MCP-TEXT-FIRST"],
            "content[0] of type text with the step to perform (text-first response)",
            if result.text_first {
                "empty text".to_owned()
            } else {
                "no text content[0]".to_owned()
            },
        ));
    }
    let Some(obj) = result.structured.as_object() else {
        out.push(Problem::new(
            &["L-MCP-EXECUTION-RESPONSE"],
            "structuredContent: the JSON backbone object",
            brief_json(&result.structured),
        ));
        return out;
    };
    let exec = ["L-MCP-EXECUTION-RESPONSE"];
    let is_complete = match obj.get("isComplete") {
        Some(Value::Bool(b)) => *b,
        other => {
            out.push(Problem::new(
                &exec,
                "`isComplete`: a boolean",
                brief_json(other.unwrap_or(&Value::Null)),
            ));
            false
        }
    };
    let state = match obj.get("stateToken").and_then(Value::as_str) {
        Some("") => {
            out.push(Problem::new(
                &exec,
                "`stateToken`: a non-empty string",
                "\"\"",
            ));
            None
        }
        Some(_) if opaque => None,
        Some(t) => match decode_token(t, TokenKind::State) {
            Ok(p) => Some(p),
            Err(e) => {
                out.push(Problem::new(
                    &["L-TOKEN-FORMAT", "L-TOKEN-PAYLOAD-FIELDS"],
                    "stateToken `st.v1.<base64url(JCS payload)>.<sig>` with exactly the locked fields",
                    format!("{e}: {}", brief(t)),
                ));
                None
            }
        },
        None => {
            out.push(Problem::new(&exec, "`stateToken`: a string", "missing"));
            None
        }
    };
    let mut token = |field: &str, kind: TokenKind, required: bool| match obj.get(field) {
        Some(Value::String(t)) if t.is_empty() => out.push(Problem::new(
            &exec,
            format!("`{field}`: a non-empty token string"),
            "\"\"",
        )),
        Some(Value::String(_)) if opaque => {}
        Some(Value::String(t)) => match decode_token(t, kind) {
            Ok(p) => {
                if let Some(s) = &state {
                    for f in ["sessionId", "runId", "nodeId"] {
                        if p.get(f) != s.get(f) {
                            out.push(Problem::new(
                                    &["L-TOKEN-SCOPED"],
                                    format!("{field} minted for the same {f} as the stateToken of the same response"),
                                    format!("{field}.{f}={} but stateToken.{f}={}", p[f], s[f]),
                                ));
                        }
                    }
                }
            }
            Err(e) => out.push(Problem::new(
                &["L-TOKEN-FORMAT", "L-TOKEN-PAYLOAD-FIELDS"],
                format!(
                    "{field} `{}.v1.<base64url(JCS payload)>.<sig>` with exactly the locked fields",
                    kind.prefix()
                ),
                format!("{e}: {}", brief(t)),
            )),
        },
        None | Some(Value::Null) if !required => {}
        other => out.push(Problem::new(
            &exec,
            format!("`{field}`: a token string while the run is not complete"),
            brief_json(other.unwrap_or(&Value::Null)),
        )),
    };
    token("ackToken", TokenKind::Ack, !is_complete);
    token(
        "checkpointToken",
        TokenKind::Checkpoint,
        !is_complete && checkpoint_token_expected,
    );
    match (is_complete, obj.get("pending")) {
        (true, None | Some(Value::Null)) => {}
        (true, Some(p)) => out.push(Problem::new(
            &exec,
            "`pending` null once isComplete is true",
            brief_json(p),
        )),
        (false, Some(Value::Object(p))) => {
            let step_ok = p.get("stepId").and_then(Value::as_str).is_some_and(|s| {
                !s.is_empty()
                    && s.bytes().all(|b| {
                        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-'
                    })
            });
            if !step_ok {
                out.push(Problem::new(
                    &["L-MCP-EXECUTION-RESPONSE", "L-ID-DELIMITER-SAFE"],
                    "`pending.stepId` matching [a-z0-9_-]+",
                    brief_json(p.get("stepId").unwrap_or(&Value::Null)),
                ));
            }
            if !p.get("prompt").is_some_and(Value::is_string) {
                out.push(Problem::new(
                    &exec,
                    "`pending.prompt`: the rendered prompt text",
                    brief_json(&Value::Object(p.clone())),
                ));
            }
        }
        (false, other) => out.push(Problem::new(
            &exec,
            "`pending`: the pending step object while the run is not complete",
            brief_json(other.unwrap_or(&Value::Null)),
        )),
    }
    if let Some(intent) = obj.get("nextIntent")
        && !intent.as_str().is_some_and(|s| NEXT_INTENTS.contains(&s))
    {
        out.push(Problem::new(
            &["L-MCP-NEXT-INTENT"],
            format!("`nextIntent` in {NEXT_INTENTS:?}"),
            brief_json(intent),
        ));
    }
    out
}

/// The locks [`execution_response`] judges on this result: the response shape always, each
/// other lock only when the result holds what it governs (`nextIntent` for
/// `L-MCP-NEXT-INTENT`, a pending `stepId` for `L-ID-DELIMITER-SAFE`, a decodable token for
/// the token locks, a state token beside an ack or checkpoint token for `L-TOKEN-SCOPED`). A
/// lock whose subject is absent was not checked, so it cannot pass on this response.
pub fn execution_response_judged(result: &ToolResult, format: TokenFormat) -> Vec<&'static str> {
    let mut out = vec!["L-MCP-EXECUTION-RESPONSE", "L-MCP-TEXT-FIRST"];
    let Some(obj) = result.structured.as_object() else {
        return out;
    };
    if obj.contains_key("nextIntent") {
        out.push("L-MCP-NEXT-INTENT");
    }
    if obj
        .get("pending")
        .and_then(|p| p.get("stepId"))
        .is_some_and(|s| !s.is_null())
    {
        out.push("L-ID-DELIMITER-SAFE");
    }
    if format == TokenFormat::Opaque {
        return out;
    }
    let token = |f: &str| {
        obj.get(f)
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty())
    };
    if ["stateToken", "ackToken", "checkpointToken"]
        .iter()
        .any(|f| token(f))
    {
        out.extend(["L-TOKEN-FORMAT", "L-TOKEN-PAYLOAD-FIELDS"]);
    }
    if token("stateToken") && (token("ackToken") || token("checkpointToken")) {
        out.push("L-TOKEN-SCOPED");
    }
    out
}

/// Whether a result carries nothing to look at: no text and no structured content (or an
/// empty object). A check that something is absent from it, or that two such results are
/// identical, would hold whatever the server did.
pub fn is_empty_result(result: &ToolResult) -> bool {
    result.text.trim().is_empty()
        && match &result.structured {
            Value::Null => true,
            Value::Object(m) => m.is_empty(),
            _ => false,
        }
}

/// `kind: "blocked"` with a non-empty, bounded, locked-order list of well-formed blockers.
pub fn blockers(structured: &Value, codes: &[String], pointer: Option<&Value>) -> Vec<Mismatch> {
    let mut out = Vec::new();
    if structured.get("kind").and_then(Value::as_str) != Some("blocked") {
        out.push((
            "a response with kind \"blocked\"".into(),
            brief_json(structured.get("kind").unwrap_or(&Value::Null)),
        ));
    }
    let Some(list) = structured.get("blockers").and_then(Value::as_array) else {
        out.push(("a `blockers` array".into(), "none".into()));
        return out;
    };
    if list.is_empty() || list.len() > MAX_BLOCKERS {
        out.push((
            format!("1 to {MAX_BLOCKERS} blockers"),
            format!("{} blockers", list.len()),
        ));
    }
    let mut keys: Vec<(String, String, Vec<String>)> = Vec::new();
    for (i, b) in list.iter().enumerate() {
        let message = b.get("message").and_then(Value::as_str);
        if let Some(m) = message
            && m.len() > BLOCKER_MESSAGE_MAX_BYTES
        {
            out.push((
                format!("blocker {i}: message at most {BLOCKER_MESSAGE_MAX_BYTES} UTF-8 bytes"),
                format!("{} bytes", m.len()),
            ));
        }
        if let Some(f) = b.get("suggestedFix").and_then(Value::as_str)
            && f.len() > BLOCKER_SUGGESTED_FIX_MAX_BYTES
        {
            out.push((
                format!("blocker {i}: suggestedFix at most {BLOCKER_SUGGESTED_FIX_MAX_BYTES} UTF-8 bytes"),
                format!("{} bytes", f.len()),
            ));
        }
        // The locked fields only: a server may add more (e.g. structured details).
        let mut locked = Map::new();
        for k in ["code", "pointer", "message", "suggestedFix"] {
            if let Some(v) = b.get(k) {
                locked.insert(k.to_owned(), v.clone());
            }
        }
        match serde_json::from_value::<Blocker>(Value::Object(locked)) {
            Ok(parsed) => {
                keys.push((
                    parsed.code.as_str().to_owned(),
                    parsed.pointer.kind().to_owned(),
                    parsed.pointer.stable_fields().iter().map(|s| (*s).to_owned()).collect(),
                ));
                if !codes.is_empty() && !codes.iter().any(|c| c == parsed.code.as_str()) {
                    out.push((
                        format!("blocker {i}: code one of {codes:?}"),
                        parsed.code.as_str().to_owned(),
                    ));
                }
            }
            Err(e) => out.push((
                format!("blocker {i}: {{code (closed set), pointer (closed by kind, ids [a-z0-9_-]+), message, suggestedFix?}}"),
                format!("{e}: {}", brief_json(b)),
            )),
        }
    }
    if keys.windows(2).any(|w| w[0] > w[1]) {
        out.push((
            "blockers sorted ascending by (code, pointer.kind, pointer stable field)".into(),
            format!("{keys:?}"),
        ));
    }
    if let (Some(want), Some(first)) = (pointer, list.first()) {
        let got = first.get("pointer").cloned().unwrap_or(Value::Null);
        if let Some(w) = want.as_object()
            && !w.iter().all(|(k, v)| got.get(k) == Some(v))
        {
            out.push((
                format!("first blocker's pointer to include {want}"),
                brief_json(&got),
            ));
        }
    }
    out
}

/// Every number anywhere in `value`.
fn numbers(value: &Value, out: &mut Vec<u64>) {
    match value {
        Value::Number(n) => out.extend(n.as_u64()),
        Value::Array(a) => a.iter().for_each(|v| numbers(v, out)),
        Value::Object(o) => o.values().for_each(|v| numbers(v, out)),
        _ => {}
    }
}

/// Every string anywhere in `value`.
fn strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
        Value::Object(o) => o.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// A context budget error (locks §16.3.1): `details` holds the measured bytes, the maximum and
/// the measurement method (RFC 8785 / JCS UTF-8 bytes).
pub fn context_budget(structured: &Value, measured: u64, max: &[u64]) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let Some(details) = structured.get("details") else {
        return vec![(
            "`details` with measured bytes, max bytes and the measurement method".into(),
            format!("no details: {}", brief_json(structured)),
        )];
    };
    let mut nums = Vec::new();
    numbers(details, &mut nums);
    if !nums.contains(&measured) {
        out.push((
            format!(
                "the measured size {measured} (RFC 8785 UTF-8 bytes of the context sent) in details"
            ),
            brief_json(details),
        ));
    }
    if !max.iter().any(|m| nums.contains(m)) {
        out.push((
            format!("the maximum, one of {max:?}, in details"),
            brief_json(details),
        ));
    }
    let mut texts = Vec::new();
    strings(details, &mut texts);
    let method = texts.iter().any(|t| {
        let l = t.to_ascii_lowercase();
        l.contains("8785") || l.contains("jcs")
    });
    if !method {
        out.push((
            "the measurement method (RFC 8785 / JCS UTF-8 bytes) in details".into(),
            brief_json(details),
        ));
    }
    out
}

/// Whether `needle` occurs in `text` as a whole word (not inside a longer identifier or number).
fn contains_word(text: &str, needle: &str) -> bool {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(needle).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + needle.len()..].chars().next();
        !before.is_some_and(is_word) && !after.is_some_and(is_word)
    })
}

/// Every value is mentioned: as direct scalar fields of one object in `structuredContent`
/// when `structured`, else as a whole word in the text or a structured string.
pub fn mentions(result: &ToolResult, values: &[Value], structured: bool) -> Vec<Mismatch> {
    if structured {
        let mut found = false;
        visit_objects(&result.structured, &mut |o| {
            if values.iter().all(|v| o.values().any(|f| f == v)) {
                found = true;
            }
        });
        if found {
            return vec![];
        }
        return vec![(
            format!(
                "one object in structuredContent with fields holding exactly {}",
                Value::Array(values.to_vec())
            ),
            brief_json(&result.structured),
        )];
    }
    let mut texts = vec![result.text.as_str()];
    strings(&result.structured, &mut texts);
    values
        .iter()
        .filter(|v| {
            let needle = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            !texts.iter().any(|t| contains_word(t, &needle))
        })
        .map(|v| {
            (
                format!("{v} mentioned in the response"),
                brief(&result.text),
            )
        })
        .collect()
}

fn visit_objects(value: &Value, f: &mut dyn FnMut(&Map<String, Value>)) {
    match value {
        Value::Object(o) => {
            f(o);
            o.values().for_each(|v| visit_objects(v, f));
        }
        Value::Array(a) => a.iter().for_each(|v| visit_objects(v, f)),
        _ => {}
    }
}

/// Whether `needle` occurs in the text or anywhere in the serialized structured content.
pub fn occurs(result: &ToolResult, needle: &str) -> bool {
    if result.text.contains(needle) {
        return true;
    }
    let mut texts = Vec::new();
    strings(&result.structured, &mut texts);
    texts.iter().any(|t| t.contains(needle))
}

/// `list_workflows` rows (locks §7 "Discovery output"; contract "Workflow identity").
pub fn discovery(structured: &Value, includes: &[String]) -> Vec<Mismatch> {
    let mut out = Vec::new();
    let Some(rows) = structured.get("workflows").and_then(Value::as_array) else {
        return vec![("a `workflows` array".into(), brief_json(structured))];
    };
    let closed: [(&str, &[&str]); 3] = [
        ("kind", &["workflow", "routine"]),
        ("idStatus", &["namespaced", "legacy"]),
        (
            "sourceKind",
            &["bundled", "user", "project", "remote", "plugin"],
        ),
    ];
    let mut keys = Vec::new();
    for (i, row) in rows.iter().enumerate() {
        for (field, allowed) in closed {
            if !row
                .get(field)
                .and_then(Value::as_str)
                .is_some_and(|v| allowed.contains(&v))
            {
                out.push((
                    format!("row {i}: `{field}` in {allowed:?}"),
                    brief_json(row.get(field).unwrap_or(&Value::Null)),
                ));
            }
        }
        for field in ["canonicalId", "suggestedId"] {
            if let Some(v) = row.get(field)
                && !v.is_string()
            {
                out.push((
                    format!("row {i}: optional `{field}` as a string"),
                    brief_json(v),
                ));
            }
        }
        let id = row.get("workflowId").and_then(Value::as_str).unwrap_or("");
        let name = row.get("name").and_then(Value::as_str).unwrap_or("");
        let namespace = id.split_once('.').map_or("", |(ns, _)| ns);
        let kind_rank = u8::from(row.get("kind").and_then(Value::as_str) == Some("routine"));
        keys.push((
            namespace.to_owned(),
            kind_rank,
            id.to_owned(),
            name.to_owned(),
        ));
    }
    let by_id = keys
        .windows(2)
        .all(|w| (&w[0].0, w[0].1, &w[0].2) <= (&w[1].0, w[1].1, &w[1].2));
    let by_name = keys
        .windows(2)
        .all(|w| (&w[0].0, w[0].1, &w[0].3) <= (&w[1].0, w[1].1, &w[1].3));
    if !by_id && !by_name {
        out.push((
            "rows sorted by namespace, then kind (workflow first), then name or id".into(),
            format!(
                "{:?}",
                keys.iter().map(|k| k.2.as_str()).collect::<Vec<_>>()
            ),
        ));
    }
    for want in includes {
        if !keys.iter().any(|k| &k.2 == want) {
            out.push((
                format!("a row for {want}"),
                format!(
                    "{:?}",
                    keys.iter().map(|k| k.2.as_str()).collect::<Vec<_>>()
                ),
            ));
        }
    }
    out
}

/// `required` tools present; nothing outside `required` + `optional`; no duplicates.
pub fn tool_set(names: &[String], required: &[String], optional: &[String]) -> Vec<Mismatch> {
    let mut out = Vec::new();
    for r in required {
        if !names.contains(r) {
            out.push((format!("tool `{r}`"), format!("tools {names:?}")));
        }
    }
    for n in names {
        if !required.contains(n) && !optional.contains(n) {
            out.push((
                format!("only the tools {required:?} plus optionally {optional:?}"),
                format!("extra tool `{n}`"),
            ));
        }
    }
    let mut sorted = names.to_vec();
    sorted.sort();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        out.push(("each tool listed once".into(), format!("{names:?}")));
    }
    out
}

/// Invariants of the stored event log (locks §1), per session in file order: `eventIndex`
/// 0, 1, 2, ... without gaps; every event carries a `dedupeKey` matching `[a-z0-9_:>-]+` of at
/// most 256 characters, unique within its session (the closed sets are checked on every read of
/// the store, `store::closed_sets`). With `strict`,
/// every event must also parse as a `workrail-spec` `SessionEvent` (recipes, scopes, payloads,
/// and WorkRail-rs's decisions such as refusing unknown fields).
pub fn store_invariants(events: &[Value], strict: bool) -> Vec<Mismatch> {
    use std::collections::{BTreeMap, BTreeSet};
    use workrail_spec::dedupe::DedupeKey;
    use workrail_spec::event::SessionEvent;

    let mut out = Vec::new();
    let mut next_index: BTreeMap<String, u64> = BTreeMap::new();
    let mut keys: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        let session = e
            .get("sessionId")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let at = format!("event {i} (session {session})");
        if e.get("unparsable").is_some() {
            out.push((format!("{at}: one JSON event per line"), brief_json(e)));
            continue;
        }
        let expected = next_index.entry(session.clone()).or_insert(0);
        match e.get("eventIndex").and_then(Value::as_u64) {
            Some(n) if n == *expected => *expected += 1,
            other => {
                out.push((
                    format!("{at}: eventIndex {expected} (0-based, contiguous, in segment order)"),
                    format!("{other:?}"),
                ));
                if let Some(n) = other {
                    *expected = n + 1;
                }
            }
        }
        match e.get("dedupeKey").and_then(Value::as_str) {
            Some(k) => {
                if DedupeKey::parse(k).is_err() {
                    out.push((
                        format!("{at}: dedupeKey matching [a-z0-9_:>-]{{1,256}}"),
                        k.to_owned(),
                    ));
                }
                if !keys
                    .entry(session.clone())
                    .or_default()
                    .insert(k.to_owned())
                {
                    out.push((
                        format!("{at}: a dedupeKey unique in its session (dedupe is a no-op)"),
                        k.to_owned(),
                    ));
                }
            }
            None => out.push((format!("{at}: a dedupeKey"), brief_json(e))),
        }
        if strict && let Err(err) = SessionEvent::from_value(e.clone()) {
            out.push((
                format!("{at}: a valid workrail-spec SessionEvent"),
                format!("{err}: {}", brief_json(e)),
            ));
        }
    }
    if events.is_empty() {
        out.push(("stored events".into(), "none".into()));
    }
    out
}

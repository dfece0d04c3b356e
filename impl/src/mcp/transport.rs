//! The stdio transport in front of rmcp: every line a client sends gets an answer.
//!
//! rmcp drops a line it cannot parse without a word, so a client that sent a truncated request,
//! a lone-surrogate escape or a huge line would wait forever. This layer reads stdin itself, one
//! newline-delimited message at a time with a size cap, and answers what rmcp would drop with a
//! JSON-RPC error carrying the request's id when it can be recovered:
//!
//! - a line that is not JSON (truncated, not UTF-8, a lone surrogate): `-32700` parse error;
//! - JSON that is not a JSON-RPC 2.0 message, or a line over [`MAX_LINE_BYTES`]: `-32600`;
//! - `tools/call` whose `params`, `params.name` or `params.arguments` has the wrong shape (e.g.
//!   arguments sent as a JSON-encoded string): `-32602`, saying exactly what to send.
//!
//! - a request whose id is still in flight (sent earlier, not answered yet): `-32600` naming the
//!   id, and the request is not run (decision D137).
//!
//! Everything else goes to rmcp unchanged. stdout carries only JSON-RPC: rmcp's lines and these
//! answers go through one writer, a line at a time.
//!
//! The guard keeps the ids of the requests it handed to rmcp until rmcp's answer to each goes
//! out: rmcp keeps one slot per id, so a second request with an id in flight ran as well, took
//! the first one's slot, and the two got one answer between them, or two, by timing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream,
};
use tokio::sync::mpsc;

/// The largest message accepted (MCP's largest legitimate arguments are far below it: context is
/// at most 256 KiB, notes 4 KiB).
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// How much of a refused line is searched for its `"id"`.
const ID_SCAN_BYTES: usize = 64 * 1024;

/// JSON-RPC error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;

/// One line read from the client.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    Message(Vec<u8>),
    /// Longer than the cap: the first bytes (for the id) and the full length.
    TooLong {
        head: Vec<u8>,
        bytes: usize,
    },
}

/// Reads the next newline-terminated line, never holding more than the cap; `None` at EOF.
async fn read_line<R: AsyncBufRead + Unpin>(reader: &mut R) -> std::io::Result<Option<Line>> {
    let mut line = Vec::new();
    let mut total = 0usize;
    let mut too_long = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok((total > 0).then(|| finish(line, total, too_long)));
        }
        let (chunk, found) = match buf.iter().position(|&b| b == b'\n') {
            Some(at) => (&buf[..at], true),
            None => (buf, false),
        };
        total += chunk.len();
        if !too_long {
            if total > MAX_LINE_BYTES {
                too_long = true;
                let room = ID_SCAN_BYTES.saturating_sub(line.len());
                line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            } else {
                line.extend_from_slice(chunk);
            }
        }
        let used = chunk.len() + usize::from(found);
        reader.consume(used);
        if found {
            return Ok(Some(finish(line, total, too_long)));
        }
    }
}

fn finish(mut line: Vec<u8>, total: usize, too_long: bool) -> Line {
    if too_long {
        line.truncate(ID_SCAN_BYTES);
        return Line::TooLong {
            head: line,
            bytes: total,
        };
    }
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Line::Message(line)
}

/// What to do with one line.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// Hand it to rmcp, keeping track of what it is.
    Forward(Track),
    Ignore,
    /// Answer with this JSON-RPC error response; rmcp never sees the line.
    Answer(Value),
}

/// What a forwarded message means for the requests in flight.
#[derive(Debug, PartialEq)]
enum Track {
    /// A notification, or a response to a request of the server's.
    Nothing,
    /// A request with this id: rmcp will answer it.
    Request(Value),
    /// `notifications/cancelled` for the request with this id: rmcp may now never answer it.
    Cancel(Value),
}

/// Where a request handed to rmcp stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pending {
    /// Not answered yet.
    Running,
    /// Cancelled by the client before its answer went out: rmcp drops that answer, so the id
    /// stays taken (MCP forbids reusing a request id within a session anyway).
    Cancelled,
}

/// The requests handed to rmcp and not answered yet, by id. The key is the id's JSON text, so
/// `7` and `"7"` are different ids, as in JSON-RPC.
#[derive(Debug, Default)]
struct InFlight(Mutex<HashMap<String, Pending>>);

impl InFlight {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes `id` for a request about to be handed to rmcp, or answers why it may not be.
    fn admit(&self, id: &Value) -> Result<(), Value> {
        let mut map = self.map();
        let Some(pending) = map.get(&id.to_string()).copied() else {
            map.insert(id.to_string(), Pending::Running);
            return Ok(());
        };
        let why = match pending {
            Pending::Running => format!(
                "Invalid Request: a request with id {id} is still in flight (sent earlier and not answered yet), so this one was not run. Use a unique id for every request (a counter, say); an id may be used again only once its answer has arrived."
            ),
            Pending::Cancelled => format!(
                "Invalid Request: id {id} belongs to a request that was cancelled before it was answered, so this one was not run. Use a unique id for every request (a counter, say): MCP forbids reusing a request id within a session."
            ),
        };
        Err(json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": INVALID_REQUEST, "message": why, "data": {"duplicateId": id}},
        }))
    }

    fn cancel(&self, id: &Value) {
        if let Some(pending) = self.map().get_mut(&id.to_string()) {
            *pending = Pending::Cancelled;
        }
    }

    /// rmcp answered the request with this id (its JSON text).
    fn answered(&self, id: &str) {
        self.map().remove(id);
    }
}

/// The id of a response or error rmcp is sending (its JSON text); `None` for its own requests
/// and notifications. rmcp writes `{"jsonrpc":"2.0","id":…,"result"|"error":…}`, so the id is
/// read from the head of the line; any other shape is read whole.
fn answered_id(line: &[u8]) -> Option<String> {
    const HEAD: &[u8] = br#"{"jsonrpc":"2.0","id":"#;
    if let Some(rest) = line.strip_prefix(HEAD) {
        let mut values = serde_json::Deserializer::from_slice(rest).into_iter::<Value>();
        if let Some(Ok(id)) = values.next() {
            let after = &rest[values.byte_offset()..];
            if after.starts_with(br#","result":"#) || after.starts_with(br#","error":"#) {
                return (!id.is_null()).then(|| id.to_string());
            }
            if after.starts_with(br#","method":"#) {
                return None;
            }
        }
    }
    #[derive(serde::Deserialize)]
    struct Message {
        id: Option<Value>,
        method: Option<serde::de::IgnoredAny>,
    }
    let message: Message = serde_json::from_slice(line).ok()?;
    if message.method.is_some() {
        return None;
    }
    message
        .id
        .filter(|id| !id.is_null())
        .map(|id| id.to_string())
}

fn error_response(id: Value, code: i64, message: String) -> Verdict {
    Verdict::Answer(json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message},
    }))
}

/// The `"id"` of a line that did not parse, when it can be read: a number or a plain string
/// right after the first `"id":`. `null` otherwise (JSON-RPC's id for unreadable requests).
fn recover_id(bytes: &[u8]) -> Value {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(ID_SCAN_BYTES)]);
    let Some(at) = text.find("\"id\"") else {
        return Value::Null;
    };
    let rest = text[at + 4..].trim_start();
    let Some(rest) = rest.strip_prefix(':') else {
        return Value::Null;
    };
    let rest = rest.trim_start();
    if let Some(quoted) = rest.strip_prefix('"') {
        return match quoted.find(['"', '\\']) {
            Some(end) if quoted.as_bytes()[end] == b'"' => Value::String(quoted[..end].into()),
            _ => Value::Null,
        };
    }
    let number: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    number
        .parse::<i64>()
        .map_or(Value::Null, |n| Value::Number(n.into()))
}

/// Judges one message line.
fn judge(bytes: &[u8]) -> Verdict {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Ignore;
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            return error_response(
                recover_id(bytes),
                PARSE_ERROR,
                format!(
                    "Parse error: the message is not valid UTF-8 ({e}). Send each JSON-RPC message as one line of UTF-8 JSON."
                ),
            );
        }
    };
    let value: Value = match serde_json::from_str(text) {
        Ok(value) => value,
        Err(e) => {
            return error_response(
                recover_id(bytes),
                PARSE_ERROR,
                format!(
                    "Parse error: the message is not valid JSON ({e}); it may have been cut off. Send each JSON-RPC message whole, as one line."
                ),
            );
        }
    };
    let Some(message) = value.as_object() else {
        return error_response(
            Value::Null,
            INVALID_REQUEST,
            "Invalid Request: a JSON-RPC message is a JSON object (batches are not supported)."
                .into(),
        );
    };
    let id = message.get("id").cloned();
    let answer_id = id.clone().unwrap_or(Value::Null);
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return error_response(
            answer_id,
            INVALID_REQUEST,
            "Invalid Request: `jsonrpc` must be \"2.0\".".into(),
        );
    }
    if let Some(id) = &id
        && !(id.is_string() || id.is_i64() || id.is_u64())
    {
        return error_response(
            Value::Null,
            INVALID_REQUEST,
            format!("Invalid Request: `id` must be a string or an integer, got {id}."),
        );
    }
    let Some(method) = message.get("method") else {
        // A response from the client (to a server request): rmcp's business.
        return Verdict::Forward(Track::Nothing);
    };
    let Some(method) = method.as_str() else {
        return error_response(
            answer_id,
            INVALID_REQUEST,
            "Invalid Request: `method` must be a string.".into(),
        );
    };
    let Some(id) = id else {
        if method == "notifications/cancelled"
            && let Some(request) = message
                .get("params")
                .and_then(|p| p.get("requestId"))
                .filter(|r| r.is_string() || r.is_i64() || r.is_u64())
        {
            return Verdict::Forward(Track::Cancel(request.clone()));
        }
        return Verdict::Forward(Track::Nothing);
    };
    if method == "tools/call" {
        return judge_tool_call(message.get("params"), id);
    }
    Verdict::Forward(Track::Request(id))
}

/// `tools/call` params: `{name: string, arguments?: object}`.
fn judge_tool_call(params: Option<&Value>, id: Value) -> Verdict {
    let invalid = |message: String| error_response(id.clone(), INVALID_PARAMS, message);
    let Some(params) = params.and_then(Value::as_object) else {
        return invalid(
            "Invalid params: tools/call needs `params` as an object: {\"name\": \"<tool>\", \"arguments\": {...}}."
                .into(),
        );
    };
    if !params.get("name").is_some_and(Value::is_string) {
        return invalid(
            "Invalid params: tools/call needs `params.name`, the tool's name as a string (e.g. \"start_workflow\")."
                .into(),
        );
    }
    match params.get("arguments") {
        None | Some(Value::Null | Value::Object(_)) => Verdict::Forward(Track::Request(id)),
        Some(Value::String(s)) => {
            let hint = if serde_json::from_str::<serde_json::Map<String, Value>>(s).is_ok() {
                " It holds a JSON-encoded object: send that object itself, not a string containing it."
            } else {
                ""
            };
            invalid(format!(
                "Invalid params: `params.arguments` must be a JSON object, but it is a string.{hint} For example: {{\"name\": \"continue_workflow\", \"arguments\": {{\"ackToken\": \"...\"}}}}."
            ))
        }
        Some(other) => invalid(format!(
            "Invalid params: `params.arguments` must be a JSON object, got {}.",
            workrail_spec::artifact::json_type(other)
        )),
    }
}

/// The pipes rmcp serves on, and the task that writes stdout.
pub(super) struct Guarded {
    /// rmcp reads client messages here.
    pub reader: DuplexStream,
    /// rmcp writes its messages here.
    pub writer: DuplexStream,
    /// Ends once every line rmcp and the guard produced is on stdout (after rmcp closed its
    /// side): await it before the process exits.
    pub flushed: tokio::task::JoinHandle<()>,
}

/// Starts the guard over `input` and `output` (the process's stdin and stdout): returns the
/// pipes to hand to rmcp. The tasks end when the client closes its side and rmcp closes its.
pub(super) fn guard<R, W>(input: R, output: W) -> Guarded
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (rmcp_reader, mut to_rmcp) = tokio::io::duplex(1 << 20);
    let (rmcp_writer, from_rmcp) = tokio::io::duplex(1 << 20);
    let (lines, mut outgoing) = mpsc::unbounded_channel::<Vec<u8>>();
    let in_flight = Arc::new(InFlight::default());

    // Client -> rmcp, answering what rmcp would drop or mishandle.
    let answers = lines.clone();
    let requests = Arc::clone(&in_flight);
    tokio::spawn(async move {
        let mut input = BufReader::new(input);
        loop {
            let line = match read_line(&mut input).await {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "reading stdin failed; closing the session");
                    break;
                }
            };
            let verdict = match &line {
                Line::Message(bytes) => judge(bytes),
                Line::TooLong { head, bytes } => error_response(
                    recover_id(head),
                    INVALID_REQUEST,
                    format!(
                        "Invalid Request: the message is {bytes} bytes, over the {MAX_LINE_BYTES}-byte limit. Send less: large results belong in files, referenced from output.notesMarkdown or an artifact."
                    ),
                ),
            };
            // Taken before rmcp sees the request, so its answer always finds the id.
            let verdict = match verdict {
                Verdict::Forward(Track::Request(id)) => match requests.admit(&id) {
                    Ok(()) => Verdict::Forward(Track::Request(id)),
                    Err(refusal) => Verdict::Answer(refusal),
                },
                Verdict::Forward(Track::Cancel(id)) => {
                    requests.cancel(&id);
                    Verdict::Forward(Track::Nothing)
                }
                other => other,
            };
            match (verdict, line) {
                (Verdict::Forward(_), Line::Message(mut bytes)) => {
                    bytes.push(b'\n');
                    if to_rmcp.write_all(&bytes).await.is_err() {
                        break;
                    }
                }
                (Verdict::Answer(response), _) => {
                    tracing::info!(%response, "answered a malformed message");
                    let mut text = response.to_string().into_bytes();
                    text.push(b'\n');
                    if answers.send(text).is_err() {
                        break;
                    }
                }
                _ => {}
            }
        }
        // EOF: rmcp sees its input close and ends the session.
        let _ = to_rmcp.shutdown().await;
    });

    // rmcp -> the single writer, a whole line at a time.
    tokio::spawn(async move {
        let mut from_rmcp = BufReader::new(from_rmcp);
        loop {
            let mut line = Vec::new();
            match from_rmcp.read_until(b'\n', &mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if let Some(id) = answered_id(&line) {
                        in_flight.answered(&id);
                    }
                    if lines.send(line).is_err() {
                        break;
                    }
                }
            }
        }
    });

    // The single writer of stdout.
    let flushed = tokio::spawn(async move {
        let mut output = output;
        while let Some(line) = outgoing.recv().await {
            if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                break;
            }
        }
    });

    Guarded {
        reader: rmcp_reader,
        writer: rmcp_writer,
        flushed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &str) -> Value {
        match judge(line.as_bytes()) {
            Verdict::Answer(v) => v,
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn unparseable_lines_get_a_parse_error_with_the_id_when_readable() {
        let cut = answer(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x""#);
        assert_eq!(cut["id"], 7);
        assert_eq!(cut["error"]["code"], PARSE_ERROR);
        let surrogate =
            answer(r#"{"jsonrpc":"2.0","id":"a-1","method":"x","params":{"t":"\ud800"}}"#);
        assert_eq!(surrogate["id"], "a-1");
        assert_eq!(surrogate["error"]["code"], PARSE_ERROR);
        assert_eq!(answer("not json")["id"], Value::Null);
        assert_eq!(answer("[1,2]")["error"]["code"], INVALID_REQUEST);
        assert_eq!(judge(b"   "), Verdict::Ignore);
        let bytes = [b'{', 0xff, b'}'];
        assert_eq!(
            match judge(&bytes) {
                Verdict::Answer(v) => v["error"]["code"].clone(),
                other => panic!("{other:?}"),
            },
            PARSE_ERROR
        );
    }

    #[test]
    fn tool_calls_with_misshapen_params_get_invalid_params() {
        let string_args = answer(
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_workflows","arguments":"{}"}}"#,
        );
        assert_eq!(string_args["id"], 3);
        assert_eq!(string_args["error"]["code"], INVALID_PARAMS);
        let message = string_args["error"]["message"].as_str().unwrap();
        assert!(message.contains("not a string containing it"), "{message}");
        let no_name = answer(r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{}}"#);
        assert_eq!(no_name["error"]["code"], INVALID_PARAMS);
        assert_eq!(
            judge(br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"x","arguments":{}}}"#),
            Verdict::Forward(Track::Request(json!(5)))
        );
        assert_eq!(
            judge(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Verdict::Forward(Track::Nothing)
        );
        assert_eq!(answer(r#"{"jsonrpc":"1.0","id":1,"method":"x"}"#)["id"], 1);
    }

    #[test]
    fn requests_and_cancellations_are_tracked_by_id() {
        assert_eq!(
            judge(br#"{"jsonrpc":"2.0","id":"a","method":"tools/list"}"#),
            Verdict::Forward(Track::Request(json!("a")))
        );
        assert_eq!(
            judge(
                br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#
            ),
            Verdict::Forward(Track::Cancel(json!(3)))
        );
        assert_eq!(
            judge(br#"{"jsonrpc":"2.0","id":9,"result":{}}"#),
            Verdict::Forward(Track::Nothing),
            "a client's response to a server request"
        );
    }

    #[test]
    fn an_id_in_flight_is_refused_until_its_answer_went_out() {
        let in_flight = InFlight::default();
        assert_eq!(in_flight.admit(&json!(7)), Ok(()));
        assert_eq!(in_flight.admit(&json!("7")), Ok(()), "\"7\" is another id");
        let refused = in_flight.admit(&json!(7)).unwrap_err();
        assert_eq!(refused["id"], 7);
        assert_eq!(refused["error"]["code"], INVALID_REQUEST);
        assert_eq!(refused["error"]["data"]["duplicateId"], 7);
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("id 7 is still in flight") && message.contains("unique id"),
            "{message}"
        );
        let answer =
            br#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"\"id\":8"}]}}"#;
        in_flight.answered(&answered_id(answer).unwrap());
        assert_eq!(in_flight.admit(&json!(7)), Ok(()), "answered: free again");
        in_flight.cancel(&json!(7));
        let refused = in_flight.admit(&json!(7)).unwrap_err();
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("cancelled"),
            "{refused}"
        );
    }

    #[test]
    fn answers_are_told_from_the_servers_own_requests() {
        assert_eq!(
            answered_id(br#"{"jsonrpc":"2.0","id":12,"result":{}}"#).as_deref(),
            Some("12")
        );
        assert_eq!(
            answered_id(br#"{"jsonrpc":"2.0","id":"x\"y","error":{"code":-1,"message":"m"}}"#)
                .as_deref(),
            Some(r#""x\"y""#)
        );
        assert_eq!(
            answered_id(br#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#),
            None
        );
        assert_eq!(
            answered_id(br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{}}"#),
            None
        );
        // Another field order is read whole.
        assert_eq!(
            answered_id(br#"{"result":{},"id":4,"jsonrpc":"2.0"}"#).as_deref(),
            Some("4")
        );
        assert_eq!(
            answered_id(br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"m"}}"#),
            None
        );
    }

    #[test]
    fn ids_are_recovered_only_when_unambiguous() {
        assert_eq!(recover_id(br#"{"id": -12, "#), json!(-12));
        assert_eq!(recover_id(br#"{"id" : "abc"#), Value::Null);
        assert_eq!(recover_id(br#"{"id":"a\"b"}"#), Value::Null);
        assert_eq!(recover_id(b"garbage"), Value::Null);
    }

    #[test]
    fn lines_are_split_and_capped_without_holding_the_whole_line() {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(split_and_cap());
    }

    async fn split_and_cap() {
        let mut long = vec![b'x'; MAX_LINE_BYTES + 10];
        long.extend_from_slice(b"\n{\"a\":1}\r\nlast");
        let mut reader = BufReader::new(&long[..]);
        match read_line(&mut reader).await.unwrap().unwrap() {
            Line::TooLong { head, bytes } => {
                assert_eq!(bytes, MAX_LINE_BYTES + 10);
                assert!(head.len() <= ID_SCAN_BYTES);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            read_line(&mut reader).await.unwrap(),
            Some(Line::Message(b"{\"a\":1}".to_vec()))
        );
        assert_eq!(
            read_line(&mut reader).await.unwrap(),
            Some(Line::Message(b"last".to_vec()))
        );
        assert_eq!(read_line(&mut reader).await.unwrap(), None);
    }
}

//! Guards the checkers themselves against vacuity: each must accept a known-good response and
//! reject known-bad ones (a checker that accepts everything would let any server pass), and the
//! scenario format must refuse malformed scenarios.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::{Value, json};
use workrail_conformance::checks::{self, TokenKind};
use workrail_conformance::mcp::{ToolResult, split_command};
use workrail_conformance::scenario::Scenario;
use workrail_conformance::schema;
use workrail_conformance::surface::TokenFormat;

fn token_vectors() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/vectors/tokens.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The token of the vector case `name` (`state_payload`, `ack_payload`, `ack_payload_short_ids`).
fn vector_token(name: &str) -> String {
    let doc = token_vectors();
    doc["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .map(|c| c["token"].as_str().unwrap().to_owned())
        .unwrap()
}

fn good_envelope() -> Value {
    json!({"code": "TOKEN_BAD_SIGNATURE", "message": "bad", "suggestion": "use the latest tokens", "retry": {"kind": "not_retryable"}})
}

/// lock: L-ERR-ENVELOPE, L-ERR-RETRY-UNION, L-ERR-SELF-CORRECTING
#[test]
fn the_envelope_check_rejects_each_missing_or_malformed_part() {
    assert!(checks::error_envelope(&good_envelope()).is_empty());
    let after = json!({"code": "TOKEN_SESSION_LOCKED", "message": "busy", "suggestion": "retry", "retry": {"kind": "retryable_after_ms", "afterMs": 1000}});
    assert!(checks::error_envelope(&after).is_empty());
    let bad = [
        ("code", Value::Null, "L-ERR-ENVELOPE"),
        ("code", json!("lower_case"), "L-ERR-ENVELOPE"),
        ("message", json!(""), "L-ERR-ENVELOPE"),
        ("suggestion", Value::Null, "L-ERR-SELF-CORRECTING"),
        ("retry", Value::Null, "L-ERR-RETRY-UNION"),
        ("retry", json!({"kind": "retry_later"}), "L-ERR-RETRY-UNION"),
        (
            "retry",
            json!({"kind": "retryable_after_ms"}),
            "L-ERR-RETRY-UNION",
        ),
        (
            "retry",
            json!({"kind": "retryable_after_ms", "afterMs": -5}),
            "L-ERR-RETRY-UNION",
        ),
        (
            "retry",
            json!({"kind": "not_retryable", "why": "prose"}),
            "L-ERR-RETRY-UNION",
        ),
        ("retry", json!("not_retryable"), "L-ERR-RETRY-UNION"),
    ];
    for (field, value, lock) in bad {
        let mut env = good_envelope();
        if value.is_null() {
            env.as_object_mut().unwrap().remove(field);
        } else {
            env[field] = value.clone();
        }
        let problems = checks::error_envelope(&env);
        assert!(
            problems.iter().any(|p| p.lock.iter().any(|l| l == lock)),
            "{field}={value} must be refused with {lock}: {problems:?}"
        );
    }
    assert!(!checks::error_envelope(&json!("TOKEN_BAD_SIGNATURE")).is_empty());
}

/// lock: L-TOKEN-FORMAT, L-TOKEN-PAYLOAD-FIELDS
#[test]
fn token_decoding_accepts_the_vectors_and_refuses_the_invalid_ones() {
    let doc = token_vectors();
    for case in doc["cases"].as_array().unwrap() {
        let kind = match case["payload"]["tokenKind"].as_str().unwrap() {
            "state" => TokenKind::State,
            "ack" => TokenKind::Ack,
            _ => TokenKind::Checkpoint,
        };
        let payload = checks::decode_token(case["token"].as_str().unwrap(), kind)
            .unwrap_or_else(|e| panic!("{}: {e}", case["name"]));
        assert_eq!(Value::Object(payload), case["payload"], "{}", case["name"]);
    }
    let state = vector_token("state_payload");
    assert!(
        checks::decode_token(&state, TokenKind::Ack).is_err(),
        "kind is checked"
    );
    assert!(
        checks::decode_token(&state.replacen("st.v1.", "st.v2.", 1), TokenKind::State).is_err()
    );
    // Every invalid vector token that has the right prefix is refused as a state/ack token.
    let mut refused = 0;
    for case in doc["invalidTokens"].as_array().unwrap() {
        let token = case["token"].as_str().unwrap();
        let kind = if token.starts_with("st.") {
            TokenKind::State
        } else if token.starts_with("ack.") {
            TokenKind::Ack
        } else if token.starts_with("chk.") {
            TokenKind::Checkpoint
        } else {
            continue;
        };
        if checks::decode_token(token, kind).is_err() {
            refused += 1;
        }
    }
    assert!(
        refused >= 20,
        "only {refused} invalid vector tokens refused"
    );
}

fn result(structured: Value) -> ToolResult {
    ToolResult {
        is_error: false,
        text: "Do the step.".into(),
        text_first: true,
        structured,
    }
}

fn execution(state: &str, ack: &str) -> Value {
    json!({
        "stateToken": state, "ackToken": ack, "isComplete": false,
        "pending": {"stepId": "one", "title": "One", "prompt": "Do it."},
        "nextIntent": "perform_pending_then_continue",
    })
}

/// The response check judges a lock only on a response that holds what it governs: an empty
/// success judges the response shape (and fails it), never the token locks; a full response
/// judges them all; opaque tokens judge no token lock.
/// lock: L-MCP-EXECUTION-RESPONSE, L-TOKEN-FORMAT, L-TOKEN-SCOPED
/// decision: D158
#[test]
fn the_execution_check_judges_only_what_the_response_holds() {
    let st = vector_token("state_payload");
    let ack = vector_token("ack_payload");
    let empty = ToolResult {
        is_error: false,
        text: String::new(),
        text_first: false,
        structured: Value::Null,
    };
    assert!(checks::is_empty_result(&empty));
    assert_eq!(
        checks::execution_response_judged(&empty, TokenFormat::WorkrailV1),
        ["L-MCP-EXECUTION-RESPONSE", "L-MCP-TEXT-FIRST"]
    );
    assert!(!checks::execution_response(&empty, false, TokenFormat::WorkrailV1).is_empty());
    let mut full = execution(&st, &ack);
    full["nextIntent"] = json!("perform_pending_then_continue");
    let full = result(full);
    assert!(!checks::is_empty_result(&full));
    let mut judged = checks::execution_response_judged(&full, TokenFormat::WorkrailV1);
    judged.sort_unstable();
    let mut all = workrail_conformance::scenario::EXECUTION_RESPONSE_LOCKS.to_vec();
    all.sort_unstable();
    assert_eq!(judged, all);
    let opaque = checks::execution_response_judged(&full, TokenFormat::Opaque);
    assert!(
        !opaque.iter().any(|l| l.starts_with("L-TOKEN-")),
        "{opaque:?}"
    );
}

/// lock: L-MCP-EXECUTION-RESPONSE, L-MCP-TEXT-FIRST, L-MCP-NEXT-INTENT, L-TOKEN-SCOPED
#[test]
fn the_execution_check_rejects_broken_responses() {
    let st = vector_token("state_payload");
    let ack = vector_token("ack_payload");
    assert!(
        checks::execution_response(
            &result(execution(&st, &ack)),
            false,
            TokenFormat::WorkrailV1
        )
        .is_empty()
    );
    // An ack minted for another session, run and node than the state token beside it.
    let other = vector_token("ack_payload_short_ids");
    let problems = checks::execution_response(
        &result(execution(&st, &other)),
        false,
        TokenFormat::WorkrailV1,
    );
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(
        problems.iter().all(|p| p.lock == ["L-TOKEN-SCOPED"]),
        "{problems:?}"
    );

    let mut complete = execution(&st, &ack);
    complete["isComplete"] = json!(true);
    let p = checks::execution_response(&result(complete), false, TokenFormat::WorkrailV1);
    assert!(
        p.iter().any(|p| p.expected.contains("pending` null")),
        "{p:?}"
    );

    let mut no_pending = execution(&st, &ack);
    no_pending.as_object_mut().unwrap().remove("pending");
    assert!(
        !checks::execution_response(&result(no_pending), false, TokenFormat::WorkrailV1).is_empty()
    );

    let mut intent = execution(&st, &ack);
    intent["nextIntent"] = json!("carry_on");
    let p = checks::execution_response(&result(intent), false, TokenFormat::WorkrailV1);
    assert!(p.iter().any(|p| p.lock == ["L-MCP-NEXT-INTENT"]));

    let mut missing_chk = execution(&st, &ack);
    missing_chk["ackToken"] = Value::Null;
    assert!(
        !checks::execution_response(&result(missing_chk), true, TokenFormat::WorkrailV1).is_empty()
    );

    let mut no_text = result(execution(&st, &ack));
    no_text.text_first = false;
    let p = checks::execution_response(&no_text, false, TokenFormat::WorkrailV1);
    assert!(p.iter().any(|p| p.lock == ["L-MCP-TEXT-FIRST"]));

    let bad_step = json!({"stateToken": st, "ackToken": ack, "isComplete": false, "pending": {"stepId": "Step One", "prompt": "x"}});
    assert!(
        !checks::execution_response(&result(bad_step), false, TokenFormat::WorkrailV1).is_empty()
    );
}

/// lock: L-MCP-EXECUTION-RESPONSE
#[test]
fn opaque_tokens_are_only_checked_to_be_non_empty_strings() {
    let opaque = |v: Value| checks::execution_response(&result(v), true, TokenFormat::Opaque);
    let ok = json!({"stateToken": "ct_8f3a", "ackToken": "ct_8f3a", "checkpointToken": "ct_8f3b",
        "isComplete": false, "pending": {"stepId": "one", "prompt": "Do it"}});
    assert!(opaque(ok.clone()).is_empty(), "{:?}", opaque(ok.clone()));
    // The same response fails the locks' format when tokens must decode.
    let v1 = checks::execution_response(&result(ok.clone()), true, TokenFormat::WorkrailV1);
    assert!(
        v1.iter()
            .any(|p| p.lock.contains(&"L-TOKEN-FORMAT".to_owned())),
        "{v1:?}"
    );
    let mut empty = ok.clone();
    empty["ackToken"] = json!("");
    let p = opaque(empty);
    assert!(
        p.iter().any(|p| p.expected.contains("non-empty token")),
        "{p:?}"
    );
    let mut missing = ok;
    missing.as_object_mut().unwrap().remove("stateToken");
    let p = opaque(missing);
    assert!(
        p.iter().any(|p| p.expected.contains("`stateToken`")),
        "{p:?}"
    );
}

fn blocker(code: &str, pointer: Value, message: &str) -> Value {
    json!({"code": code, "pointer": pointer, "message": message})
}

/// lock: L-BLOCKER-ORDER, L-BLOCKER-BUDGETS, L-BLOCKER-CODES, L-BLOCKER-POINTERS, L-BLOCKER-SHAPE
#[test]
fn the_blocker_check_enforces_order_budgets_and_closed_sets() {
    let contract = json!({"kind": "output_contract", "contractRef": "wr.contracts.loop_control"});
    let step = json!({"kind": "workflow_step", "stepId": "decide"});
    let good = json!({"kind": "blocked", "blockers": [
        blocker("INVARIANT_VIOLATION", step.clone(), "limit"),
        blocker("MISSING_REQUIRED_OUTPUT", contract.clone(), "missing"),
    ]});
    assert!(checks::blockers(&good, &[], None).is_empty());
    assert!(checks::blockers(&good, &[], Some(&json!({"kind": "workflow_step"}))).is_empty());
    assert!(!checks::blockers(&good, &[], Some(&json!({"kind": "output_contract"}))).is_empty());
    assert!(!checks::blockers(&good, &["MISSING_REQUIRED_OUTPUT".into()], None).is_empty());

    let unsorted = json!({"kind": "blocked", "blockers": [
        blocker("MISSING_REQUIRED_OUTPUT", contract.clone(), "missing"),
        blocker("INVARIANT_VIOLATION", step.clone(), "limit"),
    ]});
    assert!(!checks::blockers(&unsorted, &[], None).is_empty());
    let same_code = json!({"kind": "blocked", "blockers": [
        blocker("MISSING_REQUIRED_OUTPUT", json!({"kind": "workflow_step", "stepId": "b"}), "x"),
        blocker("MISSING_REQUIRED_OUTPUT", json!({"kind": "workflow_step", "stepId": "a"}), "x"),
    ]});
    assert!(
        !checks::blockers(&same_code, &[], None).is_empty(),
        "stable field order"
    );
    let empty = json!({"kind": "blocked", "blockers": []});
    assert!(!checks::blockers(&empty, &[], None).is_empty());
    let eleven: Vec<Value> = (0..11)
        .map(|i| {
            blocker(
                "MISSING_REQUIRED_OUTPUT",
                json!({"kind": "workflow_step", "stepId": format!("s{i:02}")}),
                "x",
            )
        })
        .collect();
    assert!(
        !checks::blockers(&json!({"kind": "blocked", "blockers": eleven}), &[], None).is_empty()
    );
    let long = json!({"kind": "blocked", "blockers": [blocker("MISSING_REQUIRED_OUTPUT", contract.clone(), &"m".repeat(513))]});
    assert!(!checks::blockers(&long, &[], None).is_empty());
    let exact = json!({"kind": "blocked", "blockers": [blocker("MISSING_REQUIRED_OUTPUT", contract.clone(), &"\u{e9}".repeat(256))]});
    assert!(
        checks::blockers(&exact, &[], None).is_empty(),
        "512 bytes is within budget"
    );
    let unknown_code =
        json!({"kind": "blocked", "blockers": [blocker("LOOP_LIMIT", step.clone(), "x")]});
    assert!(!checks::blockers(&unknown_code, &[], None).is_empty());
    let bad_pointer = json!({"kind": "blocked", "blockers": [blocker("MISSING_REQUIRED_OUTPUT", json!({"kind": "file", "path": "/x"}), "x")]});
    assert!(!checks::blockers(&bad_pointer, &[], None).is_empty());
    let bad_id = json!({"kind": "blocked", "blockers": [blocker("MISSING_REQUIRED_OUTPUT", json!({"kind": "workflow_step", "stepId": "a/b"}), "x")]});
    assert!(!checks::blockers(&bad_id, &[], None).is_empty());
    let not_blocked =
        json!({"kind": "ok", "blockers": [blocker("INVARIANT_VIOLATION", step, "x")]});
    assert!(!checks::blockers(&not_blocked, &[], None).is_empty());
}

/// lock: L-CONTEXT-FAIL-FAST, L-ERR-BUDGET-DETAILS
#[test]
fn the_context_budget_check_needs_measured_max_and_method() {
    let good = json!({"code": "VALIDATION_ERROR", "details": {"measuredBytes": 300000, "maxBytes": 262144, "measurement": "rfc8785_jcs_utf8_bytes"}});
    assert!(checks::context_budget(&good, 300000, &[262144]).is_empty());
    assert_eq!(checks::context_budget(&good, 300001, &[262144]).len(), 1);
    assert_eq!(checks::context_budget(&good, 300000, &[256000]).len(), 1);
    let no_method = json!({"details": {"measuredBytes": 300000, "maxBytes": 262144}});
    assert_eq!(
        checks::context_budget(&no_method, 300000, &[262144]).len(),
        1
    );
    assert!(
        !checks::context_budget(&json!({"code": "VALIDATION_ERROR"}), 300000, &[262144]).is_empty()
    );
}

#[test]
fn mentions_distinguish_prose_from_structured_details() {
    let prose = ToolResult {
        is_error: false,
        text: "Loop 'rounds' asked to continue after iteration 1, maxIterations is 2.".into(),
        text_first: true,
        structured: json!({"blockers": [{"message": "Loop 'rounds' at iteration 1 of 2"}]}),
    };
    let values = [json!("rounds"), json!(1), json!(2)];
    assert!(checks::mentions(&prose, &values, false).is_empty());
    assert!(!checks::mentions(&prose, &values, true).is_empty());
    assert!(
        !checks::mentions(&prose, &[json!(12)], false).is_empty(),
        "whole words only"
    );
    let structured = ToolResult {
        structured: json!({"details": {"loopId": "rounds", "iteration": 1, "maxIterations": 2}}),
        ..prose
    };
    assert!(checks::mentions(&structured, &values, true).is_empty());
}

/// lock: L-NS-DISCOVERY-SORT, L-NS-DISCOVERY-FIELDS, L-MCP-TOOL-SET
#[test]
fn discovery_and_tool_set_checks_reject_violations() {
    let row = |id: &str, kind: &str| json!({"workflowId": id, "name": id, "kind": kind, "idStatus": "namespaced", "sourceKind": "user"});
    let sorted = json!({"workflows": [row("a.x", "workflow"), row("a.y", "routine"), row("b.a", "workflow")]});
    assert!(checks::discovery(&sorted, &["a.x".into()]).is_empty());
    let unsorted = json!({"workflows": [row("b.a", "workflow"), row("a.x", "workflow")]});
    assert!(!checks::discovery(&unsorted, &[]).is_empty());
    let routine_first = json!({"workflows": [row("a.y", "routine"), row("a.x", "workflow")]});
    assert!(!checks::discovery(&routine_first, &[]).is_empty());
    let mut bad = row("a.x", "workflow");
    bad["sourceKind"] = json!("disk");
    assert!(!checks::discovery(&json!({"workflows": [bad]}), &[]).is_empty());
    assert!(!checks::discovery(&sorted, &["c.z".into()]).is_empty());

    let core: Vec<String> = [
        "list_workflows",
        "inspect_workflow",
        "start_workflow",
        "continue_workflow",
    ]
    .map(String::from)
    .to_vec();
    let optional = vec!["checkpoint_workflow".to_owned()];
    assert!(checks::tool_set(&core, &core, &optional).is_empty());
    let mut extra = core.clone();
    extra.push("get_run_status".into());
    assert!(
        !checks::tool_set(&extra, &core, &optional).is_empty(),
        "projection tools are refused"
    );
    assert!(!checks::tool_set(&core[..3], &core, &optional).is_empty());
}

#[test]
fn the_schema_validator_catches_what_it_supports() {
    let schema = json!({
        "type": "object", "additionalProperties": false, "required": ["stateToken"],
        "properties": {
            "stateToken": {"type": "string"},
            "mode": {"$ref": "#/$defs/Mode"},
            "prefs": {"type": "array", "items": {"oneOf": [
                {"type": "object", "properties": {"key": {"const": "autonomy"}}, "required": ["key"]},
                {"type": "object", "properties": {"key": {"const": "riskPolicy"}}, "required": ["key"]}
            ]}}
        },
        "$defs": {"Mode": {"enum": ["metadata", "preview"]}}
    });
    assert!(
        schema::validate(
            &json!({"stateToken": "x", "mode": "preview", "prefs": [{"key": "autonomy"}]}),
            &schema
        )
        .is_empty()
    );
    assert!(!schema::validate(&json!({}), &schema).is_empty());
    assert!(!schema::validate(&json!({"stateToken": 5}), &schema).is_empty());
    assert!(!schema::validate(&json!({"stateToken": "x", "extra": 1}), &schema).is_empty());
    assert!(!schema::validate(&json!({"stateToken": "x", "mode": "full"}), &schema).is_empty());
    assert!(
        !schema::validate(
            &json!({"stateToken": "x", "prefs": [{"key": "other"}]}),
            &schema
        )
        .is_empty()
    );
}

#[test]
fn command_lines_split_like_a_shell() {
    assert_eq!(split_command("a b  c").unwrap(), ["a", "b", "c"]);
    assert_eq!(
        split_command(r#"run "two words" 'it''s' x\ y"#).unwrap(),
        ["run", "two words", "its", "x y"]
    );
    assert_eq!(split_command("\"\"").unwrap(), [""]);
    assert!(split_command("\"open").is_err());
}

/// decision: D158
#[test]
fn malformed_scenarios_are_refused() {
    let file = Path::new("x.json");
    let ok = r#"{"name": "x", "description": "d", "lockIds": ["L-TOKEN-ERRORS"], "profile": "core",
        "steps": [{"do": "call", "tool": "inspect_workflow", "expect": "error", "lock": ["L-TOKEN-ERRORS"]}]}"#;
    Scenario::parse(ok, file).unwrap();
    let writes = ok.replace(
        "\"steps\": [",
        "\"steps\": [{\"do\": \"writeWorkflow\", \"file\": \"drift-2.json\", \"workflow\": {}}, {\"do\": \"releaseSessionLock\"}, ",
    );
    assert!(Scenario::parse(&writes, file).unwrap().writes_workflows());
    // A check of the scenario's own values may run, citing no lock; `dependsOn` names an
    // earlier step's saved value (decision D158).
    let own_check = ok.replace(
        "\"steps\": [",
        "\"steps\": [{\"do\": \"let\", \"name\": \"n\", \"value\": \"abc\"}, {\"do\": \"same\", \"what\": \"own\", \"a\": {\"$len\": \"${n}\"}, \"b\": 3, \"lock\": []}, {\"do\": \"call\", \"tool\": \"inspect_workflow\", \"save\": \"l\", \"expect\": \"ok\"}, {\"dependsOn\": [\"l\"], \"do\": \"same\", \"what\": \"after\", \"a\": \"${l.workflows}\", \"b\": [], \"lock\": [\"L-TOKEN-ERRORS\"]}, ",
    );
    let parsed = Scenario::parse(&own_check, file).unwrap();
    assert_eq!(parsed.steps[3].depends_on, vec!["l".to_owned()]);
    for (bad, why) in [
        (ok.replace("\"core\"", "\"mine\""), "unknown profile"),
        (
            ok.replace(
                "\"lockIds\": [\"L-TOKEN-ERRORS\"]",
                "\"lockIds\": [\"L-TOKEN-ERRORS\", \"L-TOKEN-HMAC\"]",
            ),
            "a cited lock no step checks",
        ),
        (
            ok.replace(", \"lock\": [\"L-TOKEN-ERRORS\"]", ""),
            "an error expectation without locks",
        ),
        (ok.replace("\"expect\"", "\"expekt\""), "an unknown field"),
        (
            ok.replace("\"do\": \"call\"", "\"do\": \"teleport\""),
            "an unknown step",
        ),
        (
            ok.replace("\"name\": \"x\"", "\"name\": \"X Y\""),
            "a bad name",
        ),
        (
            ok.replace(
                "\"steps\": [",
                "\"steps\": [{\"do\": \"writeWorkflow\", \"file\": \"../escape.json\", \"workflow\": {}}, ",
            ),
            "a workflow file outside the scenario's directory",
        ),
        (
            ok.replace(
                "\"steps\": [",
                "\"steps\": [{\"do\": \"writeWorkflow\", \"file\": \"drift.yaml\", \"workflow\": {}}, ",
            ),
            "a workflow file that is not .json",
        ),
        (
            ok.replace(
                "\"steps\": [",
                "\"steps\": [{\"do\": \"let\", \"name\": \"n\", \"value\": \"abc\"}, {\"do\": \"same\", \"what\": \"own\", \"a\": {\"$len\": \"${n}\"}, \"b\": 3, \"lock\": [\"L-TOKEN-ERRORS\"]}, ",
            ),
            "a check of the scenario's own values that cites a lock (it cannot fail)",
        ),
        (
            ok.replace(
                "{\"do\": \"call\"",
                "{\"dependsOn\": [\"nothing_saved\"], \"do\": \"call\"",
            ),
            "dependsOn naming a value no earlier step saves",
        ),
        (
            ok.replace(
                "{\"do\": \"call\"",
                "{\"dependsOn\": \"s0\", \"do\": \"call\"",
            ),
            "dependsOn that is not a list",
        ),
    ] {
        assert!(
            Scenario::parse(&bad, file).is_err(),
            "{why} must be refused"
        );
    }
}

/// A named way to break an event log.
type Breakage = (&'static str, fn(&mut Vec<Value>));

fn tip_vector_events() -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/vectors/preferred_tip.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    doc["cases"][0]["events"].as_array().unwrap().clone()
}

/// lock: L-EVENT-INDEX-ZERO-BASED, L-DEDUPE-REQUIRED, L-DEDUPE-PATTERN, L-DEDUPE-NOOP, L-EVENT-CLOSED-KINDS
#[test]
fn the_store_invariant_check_rejects_broken_logs() {
    let good = tip_vector_events();
    assert!(good.len() >= 3);
    assert!(checks::store_invariants(&good, false).is_empty());
    assert!(
        checks::store_invariants(&good, true).is_empty(),
        "the vector events are valid"
    );
    // Kinds outside the closed sets are the store-level check's (`store::closed_sets`, run on
    // every read of the store): see the_store_closed_set_check_names_each_unknown_kind_and_where.
    let broken: [Breakage; 5] = [
        ("a gap in eventIndex", |e| {
            e.remove(1);
        }),
        ("an index starting at 1", |e| {
            for (i, ev) in e.iter_mut().enumerate() {
                ev["eventIndex"] = json!(i + 1);
            }
        }),
        ("a duplicate dedupeKey", |e| {
            let k = e[0]["dedupeKey"].clone();
            e[1]["dedupeKey"] = k;
        }),
        ("an uppercase dedupeKey", |e| {
            e[0]["dedupeKey"] = json!("Session_Created:X")
        }),
        ("a missing dedupeKey", |e| {
            e[0].as_object_mut().unwrap().remove("dedupeKey");
        }),
    ];
    for (why, breakit) in broken {
        let mut events = good.clone();
        breakit(&mut events);
        assert!(
            !checks::store_invariants(&events, false).is_empty(),
            "{why} must be reported"
        );
    }
    let mut unknown_field = good.clone();
    unknown_field[0]["data"]["title"] = json!("aboutness is a projection");
    assert!(checks::store_invariants(&unknown_field, false).is_empty());
    assert!(
        !checks::store_invariants(&unknown_field, true).is_empty(),
        "strict parses the payload"
    );
    assert!(
        !checks::store_invariants(&[], false).is_empty(),
        "an empty store is not vacuously fine"
    );
}

/// Writes `lines` (one JSON value each) to `path`, creating its directory.
fn write_lines(path: &Path, lines: &[Value]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(path, text).unwrap();
}

/// The closed-set check of the store fires on a planted data directory: every value outside
/// its set is reported once, with the lock, the value and the file and line it sits on; the
/// values inside the sets are not reported.
/// lock: L-EVENT-CLOSED-KINDS, L-EVENT-NODE-CREATED, L-EVENT-EDGE-CREATED, L-EVENT-ADVANCE-RECORDED, L-MANIFEST-CLOSED-KINDS
/// decision: D158
#[test]
fn the_store_closed_set_check_names_each_unknown_kind_and_where() {
    use workrail_conformance::store;
    let data = tempfile::tempdir().unwrap();
    let session = data.path().join("sessions/sess_a");
    let ev = |i: u64, kind: &str, data: Value| {
        json!({"v": 1, "eventIndex": i, "sessionId": "sess_a", "kind": kind,
               "dedupeKey": format!("{kind}:sess_a:{i}"), "data": data})
    };
    write_lines(
        &session.join("events/00000000-00000007.jsonl"),
        &[
            ev(0, "session_created", json!({})),
            ev(1, "node_created", json!({"nodeKind": "step"})),
            ev(2, "node_created", json!({"nodeKind": "blocked_attempt"})),
            ev(
                3,
                "edge_created",
                json!({"edgeKind": "acked_step", "cause": {"kind": "non_tip_advance"}}),
            ),
            ev(
                4,
                "edge_created",
                json!({"edgeKind": "fork", "cause": {"kind": "retry"}}),
            ),
            ev(
                5,
                "advance_recorded",
                json!({"outcome": {"kind": "blocked", "blockers": []}}),
            ),
            ev(
                6,
                "advance_recorded",
                json!({"outcome": {"kind": "skipped"}}),
            ),
            ev(7, "run_completed", json!({})),
        ],
    );
    write_lines(
        &session.join("manifest.jsonl"),
        &[
            json!({"kind": "segment_closed"}),
            json!({"kind": "snapshot_pinned"}),
            json!({"kind": "segment_sealed"}),
        ],
    );
    // A second session whose node_created lacks its nodeKind altogether.
    write_lines(
        &data
            .path()
            .join("sessions/sess_b/events/00000000-00000000.jsonl"),
        &[json!({"eventIndex": 0, "kind": "node_created", "data": {}})],
    );
    let problems = store::closed_sets(&store::Dump::files(data.path(), &[]).unwrap());
    let got: Vec<(String, String)> = problems
        .iter()
        .map(|p| (p.lock.join(","), p.got.clone()))
        .collect();
    let seg = "sessions/sess_a/events/00000000-00000007.jsonl";
    let want = vec![
        (
            "L-MANIFEST-CLOSED-KINDS".to_owned(),
            "unknown manifest record kind \"segment_sealed\" at sessions/sess_a/manifest.jsonl line 3"
                .to_owned(),
        ),
        (
            "L-EVENT-NODE-CREATED".into(),
            format!("unknown node kind (data.nodeKind) \"blocked_attempt\" at {seg} line 3 (eventIndex 2)"),
        ),
        (
            "L-EVENT-EDGE-CREATED".into(),
            format!("unknown edge kind (data.edgeKind) \"fork\" at {seg} line 5 (eventIndex 4)"),
        ),
        (
            "L-EVENT-EDGE-CREATED".into(),
            format!("unknown edge cause kind (data.cause.kind) \"retry\" at {seg} line 5 (eventIndex 4)"),
        ),
        (
            "L-EVENT-ADVANCE-RECORDED".into(),
            format!("unknown advance outcome (data.outcome.kind) \"skipped\" at {seg} line 7 (eventIndex 6)"),
        ),
        (
            "L-EVENT-CLOSED-KINDS".into(),
            format!("unknown event kind \"run_completed\" at {seg} line 8 (eventIndex 7)"),
        ),
        (
            "L-EVENT-NODE-CREATED".into(),
            "no node kind (data.nodeKind) at sessions/sess_b/events/00000000-00000000.jsonl line 1 (eventIndex 0)".into(),
        ),
    ];
    assert_eq!(got, want);
    // The expectation lists the closed set from workrail-spec.
    assert!(
        problems[5].expected.contains("session_created")
            && problems[5].expected.contains("context_set"),
        "{}",
        problems[5].expected
    );
    // Every closed set had something to check in the planted store.
    let judged = store::closed_sets_judged(&store::Dump::files(data.path(), &[]).unwrap()).judged;
    assert_eq!(judged.into_iter().collect::<Vec<_>>(), {
        let mut all = store::CLOSED_SET_LOCKS.to_vec();
        all.sort_unstable();
        all
    });
    // An empty data directory has nothing to report, and judged nothing: its closed sets
    // cannot pass (decision D158). A store with only a session_created event judges the event
    // kinds and nothing else.
    let empty = tempfile::tempdir().unwrap();
    assert!(store::closed_sets(&store::Dump::files(empty.path(), &[]).unwrap()).is_empty());
    assert!(
        store::closed_sets_judged(&store::Dump::files(empty.path(), &[]).unwrap())
            .judged
            .is_empty()
    );
    let one = tempfile::tempdir().unwrap();
    write_lines(
        &one.path()
            .join("sessions/sess_c/events/00000000-00000000.jsonl"),
        &[json!({"eventIndex": 0, "kind": "session_created", "data": {}})],
    );
    let judged = store::closed_sets_judged(&store::Dump::files(one.path(), &[]).unwrap()).judged;
    assert_eq!(
        judged.into_iter().collect::<Vec<_>>(),
        ["L-EVENT-CLOSED-KINDS"]
    );
}

/// The outcome kinds the store check accepts are exactly the tags `workrail-spec` serializes.
/// lock: L-EVENT-ADVANCE-RECORDED
#[test]
fn advance_outcome_kinds_match_the_spec_serialization() {
    use workrail_spec::closed::AdvanceOutcomeKind;
    use workrail_spec::event::AdvanceOutcome;
    let advanced: AdvanceOutcome =
        serde_json::from_value(json!({"kind": "advanced", "toNodeId": "node_aaaaaaaaaaaaaaaa"}))
            .unwrap();
    assert_eq!(advanced.kind(), AdvanceOutcomeKind::Advanced);
    let value = serde_json::to_value(&advanced).unwrap();
    assert_eq!(value["kind"], advanced.kind().as_str());
    assert_eq!(
        AdvanceOutcomeKind::ALL
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>(),
        ["blocked", "advanced"]
    );
    assert!(
        serde_json::from_value::<AdvanceOutcome>(json!({"kind": "skipped"})).is_err(),
        "a kind outside the set does not parse"
    );
}

/// Each step declares the features it needs; the loader refuses a step whose tags leave out
/// what it does, and an unknown tag.
///
/// decision: D166
#[test]
fn feature_tags_are_declared_for_what_a_step_does() {
    let file = Path::new("x.json");
    let with = |step: &str| {
        format!(
            r#"{{"name": "x", "description": "d", "lockIds": ["L-TOKEN-ERRORS"], "profile": "core",
            "steps": [{step}]}}"#
        )
    };
    for (step, tag) in [
        (
            r#"{"do": "call", "tool": "list_workflows", "expect": "error", "lock": ["L-TOKEN-ERRORS"]}"#,
            "untaggedDiscovery",
        ),
        (
            r#"{"do": "call", "tool": "start_workflow", "autonomy": "guided", "expect": "error", "lock": ["L-TOKEN-ERRORS"]}"#,
            "modeSelection",
        ),
        (
            r#"{"do": "call", "tool": "checkpoint_workflow", "expect": "error", "lock": ["L-TOKEN-ERRORS"]}"#,
            "checkpoint",
        ),
        (
            r#"{"do": "call", "tool": "export_session", "expect": "error", "lock": ["L-TOKEN-ERRORS"]}"#,
            "exportImport",
        ),
    ] {
        let e = Scenario::parse(&with(step), file).unwrap_err();
        assert!(
            e.contains(&format!("\"needs\": [\"{tag}\"]")),
            "{step}: {e}"
        );
        let tagged = step.replacen('{', &format!(r#"{{"needs": ["{tag}"], "#), 1);
        let parsed = Scenario::parse(&with(&tagged), file).unwrap();
        assert_eq!(parsed.steps[0].needs.len(), 1, "{tagged}");
    }
    let unknown = with(
        r#"{"needs": ["teleport"], "do": "call", "tool": "inspect_workflow", "expect": "error", "lock": ["L-TOKEN-ERRORS"]}"#,
    );
    let e = Scenario::parse(&unknown, file).unwrap_err();
    assert!(e.contains("needs must be a list of feature tags"), "{e}");
    let under_test = r#"{"name": "x", "description": "d", "lockIds": ["L-TOKEN-ERRORS"], "profile": "core",
        "featuresUnderTest": ["modeSelection"],
        "steps": [{"needs": ["modeSelection"], "do": "call", "tool": "start_workflow", "autonomy": "guided", "expect": "error", "lock": ["L-TOKEN-ERRORS"]}]}"#;
    let parsed = Scenario::parse(under_test, file).unwrap();
    assert_eq!(
        parsed.features_under_test,
        vec![workrail_conformance::features::Feature::ModeSelection]
    );
    let no_lock = under_test.replace(
        r#""expect": "error", "lock": ["L-TOKEN-ERRORS"]}]"#,
        r#""expect": "ok"}, {"do": "call", "tool": "inspect_workflow", "expect": "error", "lock": ["L-TOKEN-ERRORS"]}]"#,
    );
    let e = Scenario::parse(&no_lock, file).unwrap_err();
    assert!(e.contains("must cite the lock"), "{e}");
}

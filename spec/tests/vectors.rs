//! Golden vectors: checks `workrail-spec` against the language-neutral test vectors in
//! `fixtures/vectors/*.json` (documented in `fixtures/vectors/README.md`).
//!
//! Guards against drift between this crate and the locks on the rules other implementations must
//! reproduce byte for byte: RFC 8785 canonical JSON and `sha256:<hex>` digests, dedupeKey recipes
//! and pattern, StepInstanceKey format, UTF-8 byte truncation with the canonical marker, blocker
//! ordering and budgets, the reason-code mapping table, and the token payload / token string
//! encoding. Also guards the vectors themselves: every vector file must be checked by a test
//! here, case names must be unique, and every cited lock id must exist in `spec/LOCKS.md`.
//!
//! Expected values in the vectors come from the RFC / lock text, not from this crate. A known,
//! reported disagreement is listed in [`KNOWN_DEVIATIONS`]: the case must still fail (so the list
//! is removed as soon as the crate is fixed), and every other case must pass.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};
use workrail_spec::blocker::{
    Blocker, BlockerCode, BlockerPointer, BlockerReport, BlockerReportError,
};
use workrail_spec::budget::{TRUNCATION_MARKER, truncate_with_marker};
use workrail_spec::closed::{Autonomy, TokenKind};
use workrail_spec::dedupe::DedupeKey;
use workrail_spec::event::SessionEvent;
use workrail_spec::ids::Sha256Digest;
use workrail_spec::jcs;
use workrail_spec::reason::{GapReason, REASON_TABLE, ReasonCode};
use workrail_spec::skey::{LoopPathEntry, StepInstanceKey};
use workrail_spec::token::{TokenFormatError, TokenParts, TokenPayload, format_token};

/// Reads one vector file. The path is spelled out per file so each test names its file.
macro_rules! vector_file {
    ($file:literal) => {
        load(
            $file,
            concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/vectors/", $file),
        )
    };
}

/// Every vector file and the test that checks it. A file missing here fails
/// `every_vector_file_is_checked_and_well_formed`.
/// Vector files checked by `workrail-model` (`model/tests/vectors.rs`): the model is the
/// reference for projections, and `workrail-spec` cannot depend on it.
const MODEL_VECTOR_FILES: &[(&str, &str)] = &[
    ("preferred_tip.json", "preferred_tip_vectors"),
    ("run_status.json", "run_status_vectors"),
    ("resume_ranking.json", "resume_ranking_vectors"),
];

const VECTOR_FILES: &[(&str, &str)] = &[
    ("jcs.json", "jcs_vectors"),
    ("sha256.json", "sha256_vectors"),
    ("dedupe_keys.json", "dedupe_key_vectors"),
    ("step_instance_keys.json", "step_instance_key_vectors"),
    ("truncation.json", "truncation_vectors"),
    ("blocker_order.json", "blocker_order_vectors"),
    ("reason_mapping.json", "reason_mapping_vectors"),
    ("tokens.json", "token_vectors"),
];

/// Cases where this crate is known to disagree with the RFC / lock text (reported as bugs).
/// Each entry is `(file, case name)`; the case must keep failing until the crate is fixed.
const KNOWN_DEVIATIONS: &[(&str, &str)] = &[];

fn load(file: &str, path: &str) -> Value {
    assert!(
        VECTOR_FILES.iter().any(|(f, _)| *f == file),
        "{file}: not listed in VECTOR_FILES"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{file}: cannot read: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{file}: not JSON: {e}"))
}

fn cases<'a>(doc: &'a Value, file: &str, key: &str) -> &'a [Value] {
    let list = doc[key]
        .as_array()
        .unwrap_or_else(|| panic!("{file}: `{key}` is not an array"));
    assert!(!list.is_empty(), "{file}: `{key}` is empty");
    list
}

fn text<'a>(case: &'a Value, field: &str) -> &'a str {
    case[field]
        .as_str()
        .unwrap_or_else(|| panic!("case {}: `{field}` is not a string", case["name"]))
}

fn flag(case: &Value, field: &str) -> bool {
    case[field]
        .as_bool()
        .unwrap_or_else(|| panic!("case {}: `{field}` is not a boolean", case["name"]))
}

fn name(case: &Value) -> &str {
    case["name"]
        .as_str()
        .expect("every case has a string `name`")
}

/// Records one case's verdict, honouring [`KNOWN_DEVIATIONS`].
fn verdict(file: &str, case: &str, ok: bool, detail: impl FnOnce() -> String) {
    let known = KNOWN_DEVIATIONS.contains(&(file, case));
    if known {
        assert!(
            !ok,
            "{file} case {case}: listed in KNOWN_DEVIATIONS but now passes; remove the entry"
        );
    } else {
        assert!(ok, "{file} case {case}: {}", detail());
    }
}

/// lock: L-JCS-RFC8785, L-JCS-DIGEST-FORM
#[test]
fn jcs_vectors() {
    const FILE: &str = "jcs.json";
    let doc = vector_file!("jcs.json");
    for case in cases(&doc, FILE, "cases") {
        let n = name(case);
        let input = text(case, "input");
        let canonical = text(case, "canonical");
        let got = jcs::canonicalize_json_text(input);
        // The canonical form is also a fixed point.
        let again = jcs::canonicalize_json_text(canonical);
        let ok = got.as_deref() == Ok(canonical) && again.as_deref() == Ok(canonical);
        verdict(FILE, n, ok, || {
            format!(
                "input {input:?}: expected {canonical:?}, got {got:?}; canonicalizing the \
                 expected text gives {again:?}"
            )
        });
        // Digest of the canonical UTF-8 bytes, in the `sha256:<hex>` form.
        let digest = jcs::sha256(canonical.as_bytes());
        assert_eq!(
            digest.as_str(),
            text(case, "sha256"),
            "{FILE} case {n}: sha256"
        );
        // The value entry point (canonical bytes of a parsed value) agrees with the text one.
        if got.as_deref() == Ok(canonical) {
            let value: Value = serde_json::from_str(input).unwrap();
            let bytes = jcs::to_canonical_bytes(&value)
                .unwrap_or_else(|e| panic!("{FILE} case {n}: to_canonical_bytes: {e}"));
            let (digest, len) = (jcs::sha256(&bytes), bytes.len());
            assert_eq!(
                digest.as_str(),
                text(case, "sha256"),
                "{FILE} case {n}: jcs_digest"
            );
            assert_eq!(len, canonical.len(), "{FILE} case {n}: jcs_digest length");
        }
    }
    for case in cases(&doc, FILE, "rejectCases") {
        let n = name(case);
        let input = text(case, "input");
        let got = jcs::canonicalize_json_text(input);
        verdict(FILE, n, got.is_err(), || {
            format!("input {input:?} must be rejected, got {got:?}")
        });
    }
}

/// lock: L-JCS-DIGEST-FORM
#[test]
fn sha256_vectors() {
    const FILE: &str = "sha256.json";
    let doc = vector_file!("sha256.json");
    for case in cases(&doc, FILE, "cases") {
        let n = name(case);
        let expected = text(case, "sha256");
        let digest = jcs::sha256(text(case, "utf8").as_bytes());
        assert_eq!(digest.as_str(), expected, "{FILE} case {n}");
        let parsed = Sha256Digest::parse(expected)
            .unwrap_or_else(|e| panic!("{FILE} case {n}: digest does not parse: {e}"));
        assert_eq!(parsed, digest, "{FILE} case {n}: parse");
        assert_eq!(
            format!("sha256:{}", parsed.hex()),
            expected,
            "{FILE} case {n}: hex"
        );
    }
}

/// lock: L-DEDUPE-PATTERN, L-DEDUPE-RECIPES, L-DEDUPE-STABLE-INPUTS, L-DEDUPE-ADVANCE-NODE-SCOPED
#[test]
fn dedupe_key_vectors() {
    const FILE: &str = "dedupe_keys.json";
    let doc = vector_file!("dedupe_keys.json");
    let mut kinds = BTreeSet::new();
    for case in cases(&doc, FILE, "cases") {
        let n = name(case);
        let expected = text(case, "dedupeKey");
        let event_json = &case["event"];
        let kind = event_json["kind"].as_str().unwrap();
        kinds.insert(kind.to_owned());
        assert_eq!(
            event_json["dedupeKey"].as_str(),
            Some(expected),
            "{FILE} case {n}: the event carries the expected key"
        );
        assert!(
            expected.starts_with(&format!("{kind}:")),
            "{FILE} case {n}: key starts with `<kind>:`"
        );
        let event = SessionEvent::from_json_str(&event_json.to_string())
            .unwrap_or_else(|e| panic!("{FILE} case {n}: event does not parse: {e}"));
        assert_eq!(
            event.dedupe_key().as_str(),
            expected,
            "{FILE} case {n}: recipe"
        );
        assert!(
            DedupeKey::parse(expected).is_ok(),
            "{FILE} case {n}: pattern"
        );
        assert_eq!(
            &event.to_value().unwrap(),
            event_json,
            "{FILE} case {n}: the event round-trips"
        );
        // A stored key that differs from the recipe is refused.
        let mut tampered = event_json.clone();
        tampered["dedupeKey"] = Value::String(format!("{expected}x"));
        assert!(
            SessionEvent::from_json_str(&tampered.to_string()).is_err(),
            "{FILE} case {n}: a key that is not the recipe must be refused"
        );
        // Observation values enter as the hex SHA-256 of their JCS form (no `sha256:` prefix).
        if kind == "observation_recorded" {
            let value: workrail_spec::event::ObservationValue =
                serde_json::from_value(event_json["data"]["value"].clone()).unwrap();
            let (digest, _) = jcs::jcs_digest(&value).unwrap();
            assert!(
                expected.ends_with(&format!(":{}", digest.hex())),
                "{FILE} case {n}: valueDigest is hex(sha256(JCS(value)))"
            );
        }
    }
    let all: BTreeSet<String> = workrail_spec::event::EventKind::ALL
        .iter()
        .map(|k| k.as_str().to_owned())
        .collect();
    assert_eq!(kinds, all, "{FILE}: one case per event kind at least");

    for case in cases(&doc, FILE, "patternCases") {
        let n = name(case);
        let value = text(case, "value");
        let valid = flag(case, "valid");
        assert_eq!(
            DedupeKey::parse(value).is_ok(),
            valid,
            "{FILE} case {n}: {value:?} valid={valid}"
        );
        assert_eq!(
            serde_json::from_value::<DedupeKey>(case["value"].clone()).is_ok(),
            valid,
            "{FILE} case {n}: deserialization agrees with parse"
        );
    }
}

/// lock: L-SKEY-FORMAT, L-SKEY-ROUNDTRIP
#[test]
fn step_instance_key_vectors() {
    const FILE: &str = "step_instance_keys.json";
    let doc = vector_file!("step_instance_keys.json");
    for case in cases(&doc, FILE, "cases") {
        let n = name(case);
        let key = text(case, "key");
        let parsed = StepInstanceKey::parse(key);
        if !flag(case, "valid") {
            assert!(parsed.is_err(), "{FILE} case {n}: {key:?} must be rejected");
            continue;
        }
        let parsed = parsed.unwrap_or_else(|e| panic!("{FILE} case {n}: {e}"));
        let loop_path: Vec<LoopPathEntry> = serde_json::from_value(case["loopPath"].clone())
            .unwrap_or_else(|e| panic!("{FILE} case {n}: loopPath: {e}"));
        assert_eq!(parsed.loop_path, loop_path, "{FILE} case {n}: loopPath");
        assert_eq!(
            parsed.step_id.as_str(),
            text(case, "stepId"),
            "{FILE} case {n}: stepId"
        );
        assert_eq!(parsed.to_string(), key, "{FILE} case {n}: format");
        let built = StepInstanceKey::new(loop_path, parsed.step_id.clone());
        assert_eq!(built.to_string(), key, "{FILE} case {n}: built from parts");
        assert_eq!(
            serde_json::to_value(&built).unwrap(),
            json!(key),
            "{FILE} case {n}: serializes as the key string"
        );
    }
}

/// lock: L-BUDGET-UTF8-BYTES, L-BUDGET-TRUNCATION-MARKER, L-BUDGET-TRUNCATION-FITS
#[test]
fn truncation_vectors() {
    const FILE: &str = "truncation.json";
    let doc = vector_file!("truncation.json");
    assert_eq!(
        doc["marker"].as_str(),
        Some(TRUNCATION_MARKER),
        "{FILE}: marker"
    );
    assert_eq!(
        doc["markerBytes"].as_u64(),
        Some(TRUNCATION_MARKER.len() as u64),
        "{FILE}: marker bytes"
    );
    for case in cases(&doc, FILE, "cases") {
        let n = name(case);
        let input = text(case, "text");
        let max = usize::try_from(case["maxBytes"].as_u64().unwrap()).unwrap();
        let expected = text(case, "expected");
        let truncated = flag(case, "truncated");
        let got =
            truncate_with_marker(input, max).unwrap_or_else(|e| panic!("{FILE} case {n}: {e}"));
        assert_eq!(got.text, expected, "{FILE} case {n}: text");
        assert_eq!(got.truncated, truncated, "{FILE} case {n}: truncated flag");
        assert!(
            expected.len() <= max,
            "{FILE} case {n}: vector exceeds its budget"
        );
        if truncated {
            let prefix = expected.strip_suffix(TRUNCATION_MARKER).unwrap();
            assert!(input.starts_with(prefix), "{FILE} case {n}: keeps a prefix");
        } else {
            assert_eq!(expected, input, "{FILE} case {n}: untouched");
        }
    }
}

fn blocker_error_class(error: &BlockerReportError) -> &'static str {
    match error {
        BlockerReportError::Empty => "empty",
        BlockerReportError::TooMany { .. } => "too_many_blockers",
        BlockerReportError::MessageTooLong { .. } => "message_too_long",
        BlockerReportError::SuggestedFixTooLong { .. } => "suggested_fix_too_long",
        BlockerReportError::NotSorted => "not_sorted",
    }
}

/// Builds a report through the validating constructors, as a producer of blockers would.
fn build_report(blockers: &[Value]) -> Result<BlockerReport, BlockerReportError> {
    let blockers = blockers
        .iter()
        .map(|b| {
            let code: BlockerCode = serde_json::from_value(b["code"].clone()).unwrap();
            let pointer: BlockerPointer = serde_json::from_value(b["pointer"].clone()).unwrap();
            let message = b["message"].as_str().unwrap().to_owned();
            let fix = b
                .get("suggestedFix")
                .map(|f| f.as_str().unwrap().to_owned());
            Blocker::new(code, pointer, message, fix)
        })
        .collect::<Result<Vec<_>, _>>()?;
    BlockerReport::new(blockers)
}

/// lock: L-BLOCKER-ORDER, L-BLOCKER-BUDGETS, L-BLOCKER-BUDGET-FAIL-FAST, L-BLOCKER-SHAPE
#[test]
fn blocker_order_vectors() {
    const FILE: &str = "blocker_order.json";
    let doc = vector_file!("blocker_order.json");
    for case in cases(&doc, FILE, "cases") {
        let n = name(case);
        let input = case["input"].as_array().unwrap();
        let expected = &case["expected"];
        let report = build_report(input).unwrap_or_else(|e| panic!("{FILE} case {n}: {e}"));
        assert_eq!(
            &serde_json::to_value(&report).unwrap(),
            expected,
            "{FILE} case {n}: sorted order"
        );
        // The wire form deserializes too, and sorting is independent of the input order.
        let wire: Vec<Blocker> = serde_json::from_value(case["input"].clone())
            .unwrap_or_else(|e| panic!("{FILE} case {n}: blockers do not deserialize: {e}"));
        let mut reversed = wire.clone();
        reversed.reverse();
        let from_reversed = BlockerReport::new(reversed).unwrap();
        assert_eq!(
            &serde_json::to_value(&from_reversed).unwrap(),
            expected,
            "{FILE} case {n}: order does not depend on the input order"
        );
        // Stored reports must already be in the locked order.
        assert!(
            serde_json::from_value::<BlockerReport>(expected.clone()).is_ok(),
            "{FILE} case {n}: the expected order is accepted as stored"
        );
        if &case["input"] != expected {
            assert!(
                serde_json::from_value::<BlockerReport>(case["input"].clone()).is_err(),
                "{FILE} case {n}: an unsorted stored report is refused"
            );
        }
    }
    for case in cases(&doc, FILE, "budgetCases") {
        let n = name(case);
        let blockers = case["blockers"].as_array().unwrap();
        let expected = text(case, "error");
        match build_report(blockers) {
            Ok(report) => panic!("{FILE} case {n}: must fail with {expected}, got {report:?}"),
            Err(e) => assert_eq!(blocker_error_class(&e), expected, "{FILE} case {n}: {e}"),
        }
        assert!(
            serde_json::from_value::<BlockerReport>(case["blockers"].clone()).is_err(),
            "{FILE} case {n}: the wire form must be refused too"
        );
    }
}

/// lock: L-REASON-CLOSED-SET, L-REASON-BLOCKER-MAPPING, L-REASON-GAP-MAPPING, L-REASON-BLOCKING-MODES, L-REASON-NEVER-STOP, L-REASON-UNEXPECTED
#[test]
fn reason_mapping_vectors() {
    const FILE: &str = "reason_mapping.json";
    let doc = vector_file!("reason_mapping.json");
    let autonomies: BTreeSet<&str> = doc["autonomies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    let all_autonomies: BTreeSet<&str> = Autonomy::ALL.iter().map(|a| a.as_str()).collect();
    assert_eq!(autonomies, all_autonomies, "{FILE}: autonomies");

    let mut seen = BTreeSet::new();
    for case in cases(&doc, FILE, "cases") {
        let n = name(case);
        let text_code = text(case, "reasonCode");
        let code: ReasonCode = text_code
            .parse()
            .unwrap_or_else(|e| panic!("{FILE} case {n}: {e}"));
        assert!(
            seen.insert(text_code.to_owned()),
            "{FILE} case {n}: duplicate"
        );
        assert_eq!(code.to_string(), text_code, "{FILE} case {n}: spelling");
        assert_eq!(
            code.blocker_code().as_str(),
            text(case, "blockerCode"),
            "{FILE} case {n}: Blocker.code"
        );
        // Gap reason: category is the code's prefix, detail its suffix.
        let gap = &case["gapReason"];
        assert_eq!(
            format!("{}:{}", text(gap, "category"), text(gap, "detail")),
            text_code,
            "{FILE} case {n}: gap reason spells the code"
        );
        assert_eq!(
            &serde_json::to_value(code.gap_reason()).unwrap(),
            gap,
            "{FILE} case {n}: gap reason"
        );
        assert_eq!(
            serde_json::from_value::<GapReason>(gap.clone()).unwrap(),
            code.gap_reason(),
            "{FILE} case {n}: gap reason parses back"
        );
        // Reasons about something the workflow may or may not require name that in every row.
        let conditional = text_code.starts_with("capability_missing:")
            || text_code.starts_with("contract_violation:");
        let mut covered = BTreeSet::new();
        for d in case["dispositions"].as_array().unwrap() {
            let autonomy = Autonomy::parse(text(d, "autonomy")).unwrap();
            let required: Vec<bool> = match d.get("subjectRequired") {
                Some(v) => vec![v.as_bool().unwrap()],
                None => {
                    assert!(
                        !conditional,
                        "{FILE} case {n}: capability and contract dispositions name subjectRequired"
                    );
                    vec![true, false]
                }
            };
            for req in required {
                covered.insert((autonomy.as_str(), req));
                let got = code.disposition(autonomy, req);
                assert_eq!(
                    serde_json::to_value(got).unwrap(),
                    json!({"blocks": d["blocks"], "gapSeverity": d["gapSeverity"]}),
                    "{FILE} case {n}: disposition in {autonomy} with subjectRequired={req}"
                );
            }
        }
        assert_eq!(
            covered.len(),
            Autonomy::ALL.len() * 2,
            "{FILE} case {n}: every autonomy and subjectRequired value is covered"
        );
    }
    let all: BTreeSet<String> = ReasonCode::all().map(|c| c.to_string()).collect();
    assert_eq!(seen, all, "{FILE}: exactly the closed set of ReasonCodes");
    assert_eq!(
        REASON_TABLE.len(),
        seen.len(),
        "{FILE}: one table row per code"
    );
}

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

fn parse_token(token: &str) -> Result<TokenPayload, TokenFormatError> {
    TokenParts::parse(token)?.payload()
}

fn hex_decode(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

/// lock: L-TOKEN-FORMAT, L-TOKEN-PAYLOAD-FIELDS, L-TOKEN-ERRORS
#[test]
fn token_vectors() {
    const FILE: &str = "tokens.json";
    let doc = vector_file!("tokens.json");
    let key = hex_decode(text(&doc, "hmacKeyHex"));
    assert_eq!(key.len(), 32, "{FILE}: the test key is 32 bytes");
    for case in cases(&doc, FILE, "cases") {
        let n = name(case);
        let payload = &case["payload"];
        let canonical = text(case, "canonical");
        assert_eq!(
            jcs::to_canonical_string(payload).unwrap(),
            canonical,
            "{FILE} case {n}: canonical payload"
        );
        let kind = TokenKind::parse(text(payload, "tokenKind")).unwrap();
        let decoded = TokenPayload::from_canonical_bytes(canonical.as_bytes(), kind)
            .unwrap_or_else(|e| panic!("{FILE} case {n}: payload does not decode: {e}"));
        assert_eq!(
            &decoded.to_value().unwrap(),
            payload,
            "{FILE} case {n}: fields"
        );
        assert_eq!(
            decoded.canonical_bytes(),
            canonical.as_bytes(),
            "{FILE} case {n}: canonical bytes"
        );
        assert_eq!(
            decoded.encode(),
            text(case, "payloadSegment"),
            "{FILE} case {n}: payload segment"
        );
        let token = text(case, "token");
        let parts = TokenParts::parse(token).unwrap_or_else(|e| panic!("{FILE} case {n}: {e}"));
        assert_eq!(parts.kind, kind, "{FILE} case {n}: prefix");
        assert_eq!(parts.payload_bytes, canonical.as_bytes(), "{FILE} case {n}");
        assert_eq!(
            parts.payload().unwrap(),
            decoded,
            "{FILE} case {n}: parsed payload"
        );
        assert_eq!(
            URL_SAFE_NO_PAD.encode(parts.signature),
            text(case, "signature"),
            "{FILE} case {n}: signature segment"
        );
        assert_eq!(
            format_token(&decoded, &parts.signature),
            token,
            "{FILE} case {n}: token string"
        );
        // The signature in the vector is HMAC-SHA256(testKey, canonical bytes).
        assert_eq!(
            hmac_sha256(&key, canonical.as_bytes()),
            parts.signature,
            "{FILE} case {n}: vector signature"
        );
    }
    for case in cases(&doc, FILE, "invalidTokens") {
        let n = name(case);
        let token = text(case, "token");
        match parse_token(token) {
            Ok(payload) => panic!("{FILE} case {n}: {token:?} must be refused, got {payload:?}"),
            Err(e) => assert_eq!(
                e.code().as_str(),
                text(case, "errorCode"),
                "{FILE} case {n}: {e}"
            ),
        }
    }
}

/// Lock ids declared by `/// lock:` lines of the tests in this file, by test function name.
fn test_lock_ids(source: &str) -> BTreeMap<String, BTreeSet<String>> {
    let lines: Vec<&str> = source.lines().collect();
    let mut out = BTreeMap::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(ids) = line.strip_prefix("/// lock: ") else {
            continue;
        };
        assert_eq!(
            lines.get(i + 1),
            Some(&"#[test]"),
            "`/// lock:` sits above #[test]"
        );
        let func = lines[i + 2]
            .strip_prefix("fn ")
            .and_then(|rest| rest.split_once('('))
            .map(|(f, _)| f.to_owned())
            .expect("#[test] is followed by `fn name(`");
        out.insert(func, ids.split(", ").map(str::to_owned).collect());
    }
    out
}

/// Guards the vectors, not a lock (so it cites none): every vector file is loaded by a test,
/// documented in the README, cites existing lock ids equal to its test's `lock` line, and has
/// unique case names.
#[test]
fn every_vector_file_is_checked_and_well_formed() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/vectors");
    let on_disk: BTreeSet<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|f| f.ends_with(".json"))
        .collect();
    let listed: BTreeSet<String> = VECTOR_FILES
        .iter()
        .chain(MODEL_VECTOR_FILES)
        .map(|(f, _)| (*f).to_owned())
        .collect();
    assert_eq!(
        on_disk, listed,
        "every fixtures/vectors/*.json must be checked by a test here"
    );

    let locks = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/LOCKS.md")).unwrap();
    let known_ids: BTreeSet<&str> = locks
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(id, _)| id))
        .filter(|id| id.starts_with("L-"))
        .collect();
    let spec_source = include_str!("vectors.rs");
    let model_source = include_str!("../../model/tests/vectors.rs");
    let readme = std::fs::read_to_string(format!("{dir}/README.md")).unwrap();
    let checked = VECTOR_FILES
        .iter()
        .map(|f| (f, spec_source))
        .chain(MODEL_VECTOR_FILES.iter().map(|f| (f, model_source)));

    for ((file, test), source) in checked {
        let declared = test_lock_ids(source);
        assert!(
            source.contains(&format!("fn {test}()")),
            "{file}: test {test} does not exist"
        );
        assert!(
            source.contains(&format!("\"{file}\"")),
            "{file}: no test loads it"
        );
        assert!(
            readme.contains(&format!("`{file}`")),
            "{file}: not documented in README.md"
        );
        let doc: Value =
            serde_json::from_str(&std::fs::read_to_string(format!("{dir}/{file}")).unwrap())
                .unwrap_or_else(|e| panic!("{file}: not JSON: {e}"));
        assert!(
            doc["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{file}: description"
        );
        let ids: BTreeSet<String> = doc["lockIds"]
            .as_array()
            .unwrap_or_else(|| panic!("{file}: lockIds"))
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        assert!(!ids.is_empty(), "{file}: lockIds is empty");
        for id in &ids {
            assert!(
                known_ids.contains(id.as_str()),
                "{file}: unknown lock id {id}"
            );
        }
        assert_eq!(
            Some(&ids),
            declared.get(*test),
            "{file}: lockIds must equal the `/// lock:` line of {test}"
        );
        // Case names are unique across all case lists of the file.
        let mut names = BTreeSet::new();
        let mut count = 0;
        for (key, value) in doc.as_object().unwrap() {
            let Some(list) = value.as_array() else {
                continue;
            };
            for case in list.iter().filter(|c| c.is_object()) {
                let n = case["name"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{file}: a case in `{key}` has no name"));
                assert!(
                    names.insert(n.to_owned()),
                    "{file}: duplicate case name {n}"
                );
                count += 1;
            }
        }
        assert!(count > 0, "{file}: no cases");
    }
    for id in test_lock_ids(spec_source).values().flatten() {
        assert!(
            known_ids.contains(id.as_str()),
            "unknown lock id {id} in a `/// lock:` line"
        );
    }
}

//! Property tests for the pure rules of `workrail-spec`.
//!
//! Golden vectors pin a handful of chosen inputs; these properties guard the same rules against
//! the inputs nobody thought to write down: RFC 8785 canonical JSON drifting under key order,
//! whitespace, string escapes, number spellings, UTF-16 key ordering, astral characters, negative
//! zero or integers past 2^53; StepInstanceKeys that do not round-trip or that admit more than the
//! locked grammar; token payloads with more than one valid spelling, or a prefix or one-character
//! edit of a token that still decodes to the same payload; truncation that splits a code point,
//! overshoots its budget or cuts more than necessary; durable events and snapshots that do not
//! re-encode byte for byte, that parse from a truncated line, or whose CAS ref depends on layout;
//! blocker reports whose order depends on the input order; and a context merge that strays from
//! the locked shallow model.
//!
//! Case counts are bounded for CI (64 per property); set `WORKRAIL_PROPTEST_CASES` to run more.
//! No failure-persistence files are written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use proptest::sample::{Index, select};
use proptest::test_runner::TestCaseError;
use serde_json::{Map, Number, Value, json};

use workrail_spec::blocker::{
    Blocker, BlockerCode, BlockerPointer, BlockerReport, BlockerReportError,
};
use workrail_spec::budget::{
    BoundedText, NOTES_MARKDOWN_MAX_BYTES, TRUNCATION_MARKER, truncate_with_marker,
};
use workrail_spec::closed::{
    AdvanceIntent, AttemptContext, AttemptFailureCode, Autonomy, Capability, CapabilityStatus,
    ClaimValue, ClaimedBy, Confidence, ContextSource, DecisionTraceKind, DivergenceReason,
    EdgeCauseKind, EdgeKind, GapSeverity, NodeKind, ObservationKey, OutputChannel,
    PreferenceSource, ProbeResult, RiskPolicy, TokenKind, WorkflowSourceKind,
};
use workrail_spec::context::{ContextError, RESERVED_CONTEXT_KEYS, merge_context};
use workrail_spec::event::{
    AdvanceOutcome, AdvanceRecorded, CapabilityObserved, ContextSet, DecisionTraceAppended,
    DivergenceRecorded, EdgeCause, EdgeCreated, EffectivePreferences, EventData, EventKind,
    EventScope, EvidenceRef, GapRecorded, GapResolution, GitSha1, NodeCreated, NodeOutputAppended,
    ObservationRecorded, ObservationValue, OutputPayload, PreferenceDelta, PreferencesChanged,
    Provenance, ProvenanceDetail, RunStarted, SessionCreated, SessionEvent, TraceEntry, TraceRef,
};
use workrail_spec::ids::{
    AttemptId, CapObsId, ChangeId, ConditionId, ContextId, ContextKey, DivergenceId, EventId,
    EventIndex, GapId, LoopId, NodeId, OutputId, RunId, SessionId, Sha256Digest, SnapshotRef,
    StepId, TraceId, WorkflowHash, WorkflowId,
};
use workrail_spec::jcs::{canonicalize_json_text, sha256, to_canonical_bytes, to_canonical_string};
use workrail_spec::reason::ReasonCode;
use workrail_spec::skey::{LoopPathEntry, StepInstanceKey};
use workrail_spec::snapshot::{
    CompletedSet, EnginePayloadV1, EngineState, ExecutionSnapshotFileV1, LoopFrame, Pending,
    PendingStep,
};
use workrail_spec::token::{
    AttemptPayload, StatePayload, TokenFormatError, TokenParts, TokenPayload, format_token,
};

// ---------------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------------

/// Cases per property when `WORKRAIL_PROPTEST_CASES` is not set.
const DEFAULT_CASES: u32 = 64;

/// Bounded case count (`WORKRAIL_PROPTEST_CASES` or 64) and no failure-persistence files.
fn config() -> ProptestConfig {
    let cases = match std::env::var("WORKRAIL_PROPTEST_CASES") {
        Ok(raw) => raw.trim().parse::<u32>().unwrap_or_else(|_| {
            panic!("WORKRAIL_PROPTEST_CASES must be an unsigned 32-bit integer, got {raw:?}")
        }),
        Err(_) => DEFAULT_CASES,
    };
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Text and JSON generators
// ---------------------------------------------------------------------------------------------

/// Characters biased towards the interesting classes: ASCII, control characters, JSON
/// metacharacters, 2- and 3-byte UTF-8, the BMP above the surrogates, and astral characters
/// (4 bytes in UTF-8, a surrogate pair in UTF-16).
fn arb_char() -> impl Strategy<Value = char> {
    prop_oneof![
        6 => proptest::char::range('a', 'z'),
        2 => proptest::char::range(' ', '~'),
        1 => proptest::char::range('\u{0}', '\u{1f}'),
        1 => select(vec![
            '"', '\\', '/', '\u{7f}', '\u{80}', '\u{2028}', '\u{2029}', '\u{feff}', '\u{fffd}',
            '\u{ffff}',
        ]),
        2 => proptest::char::range('\u{a0}', '\u{7ff}'),
        2 => proptest::char::range('\u{800}', '\u{d7ff}'),
        1 => proptest::char::range('\u{e000}', '\u{fffd}'),
        2 => proptest::char::range('\u{10000}', '\u{10ffff}'),
    ]
}

fn arb_text(max_chars: usize) -> impl Strategy<Value = String> {
    vec(arb_char(), 0..=max_chars).prop_map(String::from_iter)
}

fn arb_nonempty_text(max_chars: usize) -> impl Strategy<Value = String> {
    vec(arb_char(), 1..=max_chars).prop_map(String::from_iter)
}

/// Characters whose UTF-16 order differs from their code point (and UTF-8) order: every astral
/// character sorts before U+E000..U+FFFF in UTF-16 but after them by code point.
const COLLIDING: [char; 10] = [
    'a',
    'z',
    '\u{e9}',
    '\u{d7ff}',
    '\u{e000}',
    '\u{ff61}',
    '\u{fffd}',
    '\u{10000}',
    '\u{1f600}',
    '\u{10ffff}',
];

fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-d]{0,2}",
        3 => vec(select(COLLIDING.to_vec()), 0..4).prop_map(String::from_iter),
        2 => arb_text(6),
    ]
}

const TWO_POW_53: i64 = 1 << 53;

/// Numbers: small and extreme integers, integers around ±2^53, negative zero, arbitrary finite
/// doubles (including subnormals), short decimals and RFC 8785 boundary values.
fn arb_number() -> impl Strategy<Value = Number> {
    prop_oneof![
        2 => (-1000i64..1000).prop_map(Number::from),
        2 => any::<u64>().prop_map(Number::from),
        2 => any::<i64>().prop_map(Number::from),
        1 => (0u64..=16).prop_map(|d| Number::from(u64::MAX - d)),
        2 => (-3i64..=3, any::<bool>()).prop_map(|(d, negative)| {
            let n = TWO_POW_53 + d;
            Number::from(if negative { -n } else { n })
        }),
        1 => (-3i64..=3).prop_map(|d| Number::from_f64((TWO_POW_53 + d) as f64).unwrap()),
        1 => Just(Number::from_f64(-0.0).unwrap()),
        3 => any::<f64>().prop_filter_map("finite", Number::from_f64),
        2 => (any::<i32>(), 0i32..10)
            .prop_map(|(m, e)| Number::from_f64(f64::from(m) / 10f64.powi(e)).unwrap()),
        1 => select(vec![
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            5e-324,
            1e21,
            1e-7,
            1e-6,
            9.999_999_999_999_999e20,
            1e20,
            0.1 + 0.2,
            333_333_333.333_333_3,
            4.5,
            2e-3,
        ])
        .prop_map(|f| Number::from_f64(f).unwrap()),
    ]
}

/// `value` as JSON text, with the first member of its `target`-th non-empty object (pre-order)
/// written twice.
fn with_repeated_member(value: &Value, target: usize, seen: &mut usize) -> String {
    match value {
        Value::Array(items) => format!(
            "[{}]",
            items
                .iter()
                .map(|v| with_repeated_member(v, target, seen))
                .collect::<Vec<_>>()
                .join(",")
        ),
        Value::Object(map) if !map.is_empty() => {
            let this = *seen;
            *seen += 1;
            let mut members: Vec<String> = map
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{}:{}",
                        serde_json::to_string(k).unwrap(),
                        with_repeated_member(v, target, seen)
                    )
                })
                .collect();
            if this == target {
                members.insert(0, members[0].clone());
            }
            format!("{{{}}}", members.join(","))
        }
        leaf => serde_json::to_string(leaf).unwrap(),
    }
}

fn count_objects(value: &Value) -> usize {
    match value {
        Value::Array(items) => items.iter().map(count_objects).sum(),
        Value::Object(map) => {
            usize::from(!map.is_empty()) + map.values().map(count_objects).sum::<usize>()
        }
        _ => 0,
    }
}

fn arb_json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        3 => arb_number().prop_map(Value::Number),
        3 => arb_text(10).prop_map(Value::String),
    ]
}

/// Arbitrary JSON values, nested up to four levels.
fn arb_json() -> impl Strategy<Value = Value> {
    arb_json_leaf().prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            btree_map(arb_key(), inner, 0..6).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Choices that drive the noisy serializer (consumed cyclically).
fn arb_choices() -> impl Strategy<Value = Vec<Index>> {
    vec(any::<Index>(), 1..96)
}

// ---------------------------------------------------------------------------------------------
// A noisy JSON writer: same value, different text
// ---------------------------------------------------------------------------------------------

struct Noise<'a> {
    choices: &'a [Index],
    next: usize,
    /// Also vary number spellings (`1`, `1.0`, `1e0`, `100e-2`...). Typed artifacts read
    /// integers strictly, so only untyped JSON gets this.
    vary_numbers: bool,
}

impl Noise<'_> {
    fn pick(&mut self, n: usize) -> usize {
        if n <= 1 || self.choices.is_empty() {
            return 0;
        }
        let i = self.choices[self.next % self.choices.len()].index(n);
        self.next += 1;
        i
    }

    fn ws(&mut self, out: &mut String) {
        const WS: [&str; 7] = ["", "", "", " ", "\n", "\t", "\r\n  "];
        out.push_str(WS[self.pick(WS.len())]);
    }
}

/// Writes `value` as valid JSON with shuffled object keys, random insignificant whitespace, and
/// random (valid) string escapes.
fn noisy_json(value: &Value, choices: &[Index], vary_numbers: bool) -> String {
    let mut noise = Noise {
        choices,
        next: 0,
        vary_numbers,
    };
    let mut out = String::new();
    noise.ws(&mut out);
    write_noisy(value, &mut noise, &mut out);
    noise.ws(&mut out);
    out
}

fn write_noisy(value: &Value, noise: &mut Noise<'_>, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if noise.vary_numbers {
                let spellings = number_spellings(n);
                let i = noise.pick(spellings.len());
                out.push_str(&spellings[i]);
            } else {
                out.push_str(&n.to_string());
            }
        }
        Value::String(s) => write_noisy_string(s, noise, out),
        Value::Array(items) => {
            out.push('[');
            noise.ws(out);
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    noise.ws(out);
                    out.push(',');
                    noise.ws(out);
                }
                write_noisy(item, noise, out);
            }
            noise.ws(out);
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            for i in (1..keys.len()).rev() {
                let j = noise.pick(i + 1);
                keys.swap(i, j);
            }
            out.push('{');
            noise.ws(out);
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    noise.ws(out);
                    out.push(',');
                    noise.ws(out);
                }
                write_noisy_string(key, noise, out);
                noise.ws(out);
                out.push(':');
                noise.ws(out);
                write_noisy(&map[key.as_str()], noise, out);
            }
            noise.ws(out);
            out.push('}');
        }
    }
}

fn write_unicode_escape(c: char, upper: bool, out: &mut String) {
    let mut buf = [0u16; 2];
    for unit in c.encode_utf16(&mut buf) {
        if upper {
            write!(out, "\\u{unit:04X}").unwrap();
        } else {
            write!(out, "\\u{unit:04x}").unwrap();
        }
    }
}

fn write_noisy_string(s: &str, noise: &mut Noise<'_>, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        let short = match c {
            '"' => Some("\\\""),
            '\\' => Some("\\\\"),
            '\u{8}' => Some("\\b"),
            '\u{c}' => Some("\\f"),
            '\n' => Some("\\n"),
            '\r' => Some("\\r"),
            '\t' => Some("\\t"),
            '/' => Some("\\/"),
            _ => None,
        };
        let must_escape = c == '"' || c == '\\' || u32::from(c) < 0x20;
        match noise.pick(4) {
            0 | 1 if short.is_some() => out.push_str(short.unwrap_or_default()),
            0 => write_unicode_escape(c, false, out),
            1 => write_unicode_escape(c, true, out),
            _ if must_escape => write_unicode_escape(c, false, out),
            _ => out.push(c),
        }
    }
    out.push('"');
}

/// Equivalent JSON spellings of one number (all parse to the same IEEE double).
fn number_spellings(n: &Number) -> Vec<String> {
    let mut out = vec![n.to_string()];
    if let Some(u) = n.as_u64() {
        out.push(format!("{u}.0"));
        out.push(format!("{u}e0"));
        out.push(format!("{u}.000E+00"));
        if u != 0 {
            out.push(format!("{u}00e-2"));
        }
    } else if let Some(i) = n.as_i64() {
        out.push(format!("{i}.0"));
        out.push(format!("{i}E0"));
        out.push(format!("{i}00e-2"));
    } else if let Some(f) = n.as_f64() {
        out.push(format!("{f}"));
        out.push(format!("{f:e}"));
        out.push(format!("{f:E}"));
        let sci = format!("{f:e}");
        if !sci.contains("e-") {
            out.push(sci.replace('e', "e+"));
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// An independent reference model of RFC 8785
// ---------------------------------------------------------------------------------------------

/// ECMAScript `Number.prototype.toString` (RFC 8785 §3.2.2.3), built on Rust's shortest
/// round-trip digits (`{:e}`).
fn es_number(f: f64) -> String {
    if f == 0.0 {
        return "0".to_owned();
    }
    let sign = if f < 0.0 { "-" } else { "" };
    let sci = format!("{:e}", f.abs());
    let (mantissa, exponent) = sci.split_once('e').unwrap();
    let exponent: i64 = exponent.parse().unwrap();
    let digits = even_on_a_tie(
        f.abs(),
        mantissa.chars().filter(|c| *c != '.').collect(),
        exponent,
    );
    let k = i64::try_from(digits.len()).unwrap();
    let n = exponent + 1;
    let body = if k <= n && n <= 21 {
        format!("{digits}{}", "0".repeat(usize::try_from(n - k).unwrap()))
    } else if 0 < n && n <= 21 {
        let n = usize::try_from(n).unwrap();
        format!("{}.{}", &digits[..n], &digits[n..])
    } else if -6 < n && n <= 0 {
        format!("0.{}{digits}", "0".repeat(usize::try_from(-n).unwrap()))
    } else {
        let e = n - 1;
        let e_sign = if e < 0 { '-' } else { '+' };
        if k == 1 {
            format!("{digits}e{e_sign}{}", e.abs())
        } else {
            format!("{}.{}e{e_sign}{}", &digits[..1], &digits[1..], e.abs())
        }
    };
    format!("{sign}{body}")
}

/// The shortest digits of `f` (at `exponent`) as ECMAScript chooses them: Rust's shortest
/// form may take either of two equally short digit strings that are equally near `f`, while
/// Number::toString takes the one whose last digit is even (ECMA-262, Number::toString step 5).
/// The two are equally near exactly when `f` is their midpoint, which the exact expansion of `f`
/// (Rust prints it when asked for enough digits) shows.
fn even_on_a_tie(f: f64, digits: String, exponent: i64) -> String {
    let last = digits.as_bytes()[digits.len() - 1] - b'0';
    if last.is_multiple_of(2) {
        return digits;
    }
    let head = &digits[..digits.len() - 1];
    let value_of = |d: &str| -> f64 {
        let (first, rest) = d.split_at(1);
        format!("{first}.{rest}e{exponent}").parse().unwrap()
    };
    for other in [last - 1, last + 1] {
        if other > 9 {
            continue;
        }
        let candidate = format!("{head}{other}");
        if value_of(&candidate) != f {
            continue;
        }
        let midpoint = format!("{head}{}5", last.min(other));
        let exact = format!("{f:.1100e}");
        let (exact_mantissa, exact_exponent) = exact.split_once('e').unwrap();
        let exact_digits: String = exact_mantissa.chars().filter(|c| *c != '.').collect();
        if exact_exponent.parse::<i64>().unwrap() == exponent
            && exact_digits.trim_end_matches('0') == midpoint
        {
            return candidate;
        }
    }
    digits
}

fn reference_jcs_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\u{c}' => out.push_str("\\f"),
            '\r' => out.push_str("\\r"),
            c if u32::from(c) < 0x20 => write!(out, "\\u{:04x}", u32::from(c)).unwrap(),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// RFC 8785 written from the RFC: no whitespace, keys sorted by UTF-16 code units, minimal
/// string escapes with lowercase hex, numbers as ECMAScript doubles.
fn reference_jcs(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&es_number(n.as_f64().unwrap())),
        Value::String(s) => reference_jcs_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                reference_jcs(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(Vec<u16>, &String, &Value)> = map
                .iter()
                .map(|(k, v)| (k.encode_utf16().collect(), k, v))
                .collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            out.push('{');
            for (i, (_, key, item)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                reference_jcs_string(key, out);
                out.push(':');
                reference_jcs(item, out);
            }
            out.push('}');
        }
    }
}

#[test]
fn reference_number_model_matches_rfc8785_examples() {
    // Sanity check of the test's own model (RFC 8785 §3.2.2.3 and Appendix B).
    for (f, text) in [
        (333_333_333.333_333_3, "333333333.3333333"),
        (1e30, "1e+30"),
        (4.5, "4.5"),
        (2e-3, "0.002"),
        (1e-27, "1e-27"),
        (-0.0, "0"),
        (5e-324, "5e-324"),
        (-5e-324, "-5e-324"),
        (f64::MAX, "1.7976931348623157e+308"),
        (9_007_199_254_740_992.0, "9007199254740992"),
        (295_147_905_179_352_830_000.0, "295147905179352830000"),
        (1e21, "1e+21"),
        (1e-7, "1e-7"),
        (1e-6, "0.000001"),
        (0.1 + 0.2, "0.30000000000000004"),
        // The double nearest this literal is exactly -71190425906806.625, midway between ...6.62
        // and ...6.63, both shortest: the even one (as V8).
        (-71_190_425_906_806.62, "-71190425906806.62"),
    ] {
        assert_eq!(es_number(f), text, "{f:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------

/// Every strict prefix (at a char boundary) of `text` must be rejected by `accepts`.
fn check_every_strict_prefix_rejected(
    text: &str,
    accepts: impl Fn(&str) -> bool,
) -> Result<(), TestCaseError> {
    for cut in (0..text.len()).filter(|&i| text.is_char_boundary(i)) {
        let prefix = &text[..cut];
        prop_assert!(
            !accepts(prefix),
            "strict prefix of {cut} bytes was accepted: {prefix:?}"
        );
    }
    Ok(())
}

fn ent() -> impl Strategy<Value = [u8; 10]> {
    any::<[u8; 10]>()
}

/// Two entropies that mint distinct ids.
fn distinct(a: [u8; 10], mut b: [u8; 10]) -> ([u8; 10], [u8; 10]) {
    if a == b {
        b[0] ^= 1;
    }
    (a, b)
}

fn arb_digest() -> impl Strategy<Value = Sha256Digest> {
    any::<[u8; 32]>().prop_map(|b| Sha256Digest::from_bytes(&b))
}

fn arb_step_id(pattern: &'static str) -> impl Strategy<Value = StepId> {
    pattern.prop_map(|s| StepId::parse(&s).unwrap())
}

fn arb_loop_id(pattern: &'static str) -> impl Strategy<Value = LoopId> {
    pattern.prop_map(|s| LoopId::parse(&s).unwrap())
}

fn arb_iteration() -> impl Strategy<Value = u32> {
    prop_oneof![3 => 0u32..4, 2 => any::<u32>(), 1 => Just(u32::MAX)]
}

fn arb_skey(id_pattern: &'static str) -> impl Strategy<Value = StepInstanceKey> {
    (
        vec(
            (arb_loop_id(id_pattern), arb_iteration())
                .prop_map(|(loop_id, iteration)| LoopPathEntry { loop_id, iteration }),
            0..4,
        ),
        arb_step_id(id_pattern),
    )
        .prop_map(|(path, step)| StepInstanceKey::new(path, step))
}

// ---------------------------------------------------------------------------------------------
// 1. RFC 8785 canonical JSON
// ---------------------------------------------------------------------------------------------

proptest! {
    #![proptest_config(config())]

    /// The canonical form of a JSON text depends only on the value: shuffled keys, whitespace,
    /// string escapes and number spellings all canonicalize to the same bytes, and canonical text
    /// is a fixed point.
    /// lock: L-JCS-RFC8785
    #[test]
    fn jcs_ignores_key_order_whitespace_and_spelling(
        value in arb_json(),
        choices in arb_choices(),
        other_choices in arb_choices(),
    ) {
        let plain = serde_json::to_string(&value).unwrap();
        let noisy = noisy_json(&value, &choices, true);
        let other = noisy_json(&value, &other_choices, true);
        let canonical = canonicalize_json_text(&plain).unwrap();
        prop_assert_eq!(&canonicalize_json_text(&noisy).unwrap(), &canonical, "noisy text: {}", noisy);
        prop_assert_eq!(&canonicalize_json_text(&other).unwrap(), &canonical, "noisy text: {}", other);
        prop_assert_eq!(&to_canonical_string(&value).unwrap(), &canonical);
        prop_assert_eq!(&canonicalize_json_text(&canonical).unwrap(), &canonical);
    }

    /// The strict scan (which builds nothing) accepts exactly what the strict parse accepts:
    /// a JSON text, the same text with one object member repeated at any depth (a duplicate
    /// key), and a truncation of it. On an object it returns the requested member.
    /// lock: L-JCS-RFC8785
    #[test]
    fn the_strict_scan_accepts_exactly_what_the_strict_parse_accepts(
        value in arb_json(),
        which in any::<prop::sample::Index>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let plain = serde_json::to_string(&value).unwrap();
        let mut at = cut.index(plain.len() + 1);
        while !plain.is_char_boundary(at) {
            at -= 1;
        }
        let mut texts = vec![plain.clone(), plain[..at].to_owned()];
        let objects = count_objects(&value);
        if objects > 0 {
            let repeated = with_repeated_member(&value, which.index(objects), &mut 0);
            prop_assert!(workrail_spec::jcs::scan_strict(&repeated, "k").is_err(), "{}", repeated);
            texts.push(repeated);
        }
        for text in &texts {
            let parsed = workrail_spec::jcs::parse_strict(text);
            let scanned = workrail_spec::jcs::scan_strict(text, "k");
            prop_assert_eq!(parsed.is_ok(), scanned.is_ok(), "text: {}", text);
            if let (Ok(Value::Object(map)), Ok(scanned)) = (parsed, scanned) {
                prop_assert_eq!(
                    scanned,
                    workrail_spec::jcs::ScannedTop::Object { member: map.get("k").cloned() }
                );
            }
        }
    }

    /// The canonical bytes equal an independent RFC 8785 model: UTF-16 key order (astral keys
    /// before U+E000..U+FFFF), minimal escapes, ECMAScript number formatting.
    /// lock: L-JCS-RFC8785
    #[test]
    fn jcs_matches_reference_model(value in arb_json()) {
        let mut expected = String::new();
        reference_jcs(&value, &mut expected);
        prop_assert_eq!(to_canonical_string(&value).unwrap(), expected);
    }

    /// WorkRail's writer gives exactly `serde_jcs`'s bytes, integers past 2^53 (written as
    /// ECMAScript doubles) included, for values and for the typed path.
    /// lock: L-JCS-RFC8785
    #[test]
    fn writer_equals_serde_jcs(
        value in arb_json(),
        big in prop_oneof![any::<u64>().prop_map(Value::from), any::<i64>().prop_map(Value::from)],
    ) {
        let value = json!([value, big]);
        let reference = serde_jcs::to_vec(&value).unwrap();
        prop_assert_eq!(&workrail_spec::jcs::value_to_canonical_bytes(&value).unwrap(), &reference);
        prop_assert_eq!(&to_canonical_bytes(&value).unwrap(), &reference);
    }
}

// ---------------------------------------------------------------------------------------------
// 2. StepInstanceKey
// ---------------------------------------------------------------------------------------------

/// The locked grammar, written independently of `StepInstanceKey::parse`:
/// `^(([a-z0-9_-]+@(0|[1-9][0-9]*))(/[a-z0-9_-]+@(0|[1-9][0-9]*))*::)?[a-z0-9_-]+$`, ids at most 64
/// bytes, iterations within u32.
fn skey_grammar_accepts(s: &str) -> bool {
    fn is_id(s: &str) -> bool {
        (1..=64).contains(&s.len())
            && s.bytes()
                .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-'))
    }
    fn is_iteration(s: &str) -> bool {
        let canonical = s == "0"
            || (!s.is_empty() && !s.starts_with('0') && s.bytes().all(|b| b.is_ascii_digit()));
        canonical && s.parse::<u64>().is_ok_and(|n| n <= u64::from(u32::MAX))
    }
    match s.bytes().filter(|&b| b == b':').count() {
        0 => is_id(s),
        2 => {
            let Some(pos) = s.find("::") else {
                return false;
            };
            let (path, step) = (&s[..pos], &s[pos + 2..]);
            is_id(step)
                && path.split('/').all(|segment| {
                    let mut parts = segment.split('@');
                    matches!(
                        (parts.next(), parts.next(), parts.next()),
                        (Some(l), Some(i), None) if is_id(l) && is_iteration(i)
                    )
                })
        }
        _ => false,
    }
}

/// Strings near the StepInstanceKey language: concatenated fragments, and valid keys with one
/// character inserted, deleted or replaced.
fn arb_skey_candidate() -> impl Strategy<Value = String> {
    let mut pieces: Vec<String> = [
        "a",
        "k",
        "z",
        "0",
        "7",
        "_",
        "-",
        "ab",
        "x1",
        "@",
        "/",
        "::",
        ":",
        "00",
        "01",
        "12",
        "4294967295",
        "4294967296",
        "99999999999999999999",
        "A",
        "\u{e9}",
        " ",
        "@0",
        "@3",
        "::s",
        "/l@1",
        "+1",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    pieces.push("q".repeat(60));
    let fragments = vec(select(pieces), 1..10).prop_map(|v| v.concat());
    let mutated = (
        arb_skey("[a-z0-9_-]{1,8}"),
        any::<Index>(),
        0u8..3,
        select(vec![
            '@', '/', ':', '0', '1', 'a', '-', '_', 'A', ' ', '\u{e9}',
        ]),
    )
        .prop_map(|(key, at, op, c)| {
            let mut chars: Vec<char> = key.to_string().chars().collect();
            let i = at.index(chars.len() + 1);
            match op {
                0 => chars.insert(i, c),
                1 if i < chars.len() => {
                    chars.remove(i);
                }
                _ if i < chars.len() => chars[i] = c,
                _ => chars.push(c),
            }
            chars.into_iter().collect()
        });
    prop_oneof![fragments, mutated]
}

proptest! {
    #![proptest_config(config())]

    /// A key formats as `loopId@iteration` entries joined by `/`, then `::`, then the step id;
    /// delimiters occur only as delimiters; the text (and its JSON string) parses back to the
    /// same key.
    /// lock: L-SKEY-FORMAT, L-SKEY-ROUNDTRIP
    #[test]
    fn skey_format_roundtrips(key in arb_skey("[a-z0-9_-]{1,64}")) {
        let text = key.to_string();
        let n = key.loop_path.len();
        let expected = if n == 0 {
            key.step_id.as_str().to_owned()
        } else {
            let path: Vec<String> = key
                .loop_path
                .iter()
                .map(|e| format!("{}@{}", e.loop_id.as_str(), e.iteration))
                .collect();
            format!("{}::{}", path.join("/"), key.step_id.as_str())
        };
        prop_assert_eq!(&text, &expected);
        prop_assert_eq!(text.matches('@').count(), n);
        prop_assert_eq!(text.matches('/').count(), n.saturating_sub(1));
        prop_assert_eq!(text.matches(':').count(), if n == 0 { 0 } else { 2 });
        prop_assert_eq!(StepInstanceKey::parse(&text), Ok(key.clone()));
        let json = serde_json::to_string(&key).unwrap();
        prop_assert_eq!(&json, &serde_json::to_string(&text).unwrap());
        prop_assert_eq!(serde_json::from_str::<StepInstanceKey>(&json).unwrap(), key);
    }

    /// `parse` accepts exactly the locked grammar, and on it `format ∘ parse` is the identity
    /// (a key has exactly one spelling).
    /// lock: L-SKEY-FORMAT, L-SKEY-ROUNDTRIP
    #[test]
    fn skey_parse_accepts_exactly_the_grammar(candidate in arb_skey_candidate()) {
        let parsed = StepInstanceKey::parse(&candidate);
        prop_assert_eq!(parsed.is_ok(), skey_grammar_accepts(&candidate), "candidate {:?}", candidate);
        if let Ok(key) = parsed {
            prop_assert_eq!(key.to_string(), candidate);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Token payloads and token strings
// ---------------------------------------------------------------------------------------------

fn arb_token_payload() -> impl Strategy<Value = TokenPayload> {
    (0u8..3, ent(), ent(), ent(), any::<[u8; 32]>(), ent()).prop_map(|(kind, s, r, n, h, a)| {
        let session_id = SessionId::from_entropy(&s);
        let run_id = RunId::from_entropy(&r);
        let node_id = NodeId::from_entropy(&n);
        match kind {
            0 => TokenPayload::State(StatePayload {
                session_id,
                run_id,
                node_id,
                workflow_hash: WorkflowHash::from_digest(Sha256Digest::from_bytes(&h)),
            }),
            1 => TokenPayload::Ack(AttemptPayload {
                session_id,
                run_id,
                node_id,
                attempt_id: AttemptId::from_entropy(&a),
            }),
            _ => TokenPayload::Checkpoint(AttemptPayload {
                session_id,
                run_id,
                node_id,
                attempt_id: AttemptId::from_entropy(&a),
            }),
        }
    })
}

const BASE64URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// A token that differs from `original` must never decode to the original payload; if it decodes
/// at all, its payload has exactly that one spelling.
fn check_edited_token(
    original: &str,
    edited: &str,
    payload: &TokenPayload,
) -> Result<(), TestCaseError> {
    let Ok(parts) = TokenParts::parse(edited) else {
        return Ok(());
    };
    let Ok(decoded) = parts.payload() else {
        return Ok(());
    };
    prop_assert_ne!(edited, original);
    prop_assert_ne!(
        &parts.payload_bytes,
        &payload.canonical_bytes(),
        "edited {}",
        edited
    );
    prop_assert_ne!(&decoded, payload);
    prop_assert_eq!(&decoded.canonical_bytes(), &parts.payload_bytes);
    prop_assert_eq!(format_token(&decoded, &parts.signature), edited);
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    /// Payload encoding is a bijection onto exactly the locked fields, and the token string
    /// `<st|ack|chk>.v1.<payload>.<sig>` splits back into the same kind, bytes and signature.
    /// lock: L-TOKEN-FORMAT, L-TOKEN-PAYLOAD-FIELDS
    #[test]
    fn token_payload_encoding_is_a_bijection(
        payload in arb_token_payload(),
        signature in any::<[u8; 32]>(),
    ) {
        let kind = payload.kind();
        let bytes = payload.canonical_bytes();
        prop_assert_eq!(TokenPayload::from_canonical_bytes(&bytes, kind), Ok(payload.clone()));
        let text = std::str::from_utf8(&bytes).unwrap();
        prop_assert_eq!(canonicalize_json_text(text).unwrap(), text);

        // Exactly the locked fields.
        let value: Value = serde_json::from_slice(&bytes).unwrap();
        let fields: BTreeSet<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
        let last = if kind == TokenKind::State { "workflowHash" } else { "attemptId" };
        let expected: BTreeSet<&str> =
            ["tokenVersion", "tokenKind", "sessionId", "runId", "nodeId", last].into();
        prop_assert_eq!(&fields, &expected);
        prop_assert_eq!(&value["tokenVersion"], &json!(1));
        prop_assert_eq!(&value["tokenKind"], &json!(kind.as_str()));
        prop_assert_eq!(&value["sessionId"], &json!(payload.session_id().as_str()));
        prop_assert_eq!(&value["runId"], &json!(payload.run_id().as_str()));
        prop_assert_eq!(&value["nodeId"], &json!(payload.node_id().as_str()));
        for other in TokenKind::ALL.iter().filter(|k| **k != kind) {
            prop_assert!(TokenPayload::from_canonical_bytes(&bytes, *other).is_err());
        }
        for field in &expected {
            let mut fewer = value.clone();
            fewer.as_object_mut().unwrap().remove(*field);
            let fewer = to_canonical_bytes(&fewer).unwrap();
            prop_assert!(TokenPayload::from_canonical_bytes(&fewer, kind).is_err(), "without {}", field);
        }
        let mut more = value.clone();
        more["extra"] = json!(1);
        prop_assert!(TokenPayload::from_canonical_bytes(&to_canonical_bytes(&more).unwrap(), kind).is_err());
        let mut v2 = value.clone();
        v2["tokenVersion"] = json!(2);
        let unsupported = matches!(
            TokenPayload::from_canonical_bytes(&to_canonical_bytes(&v2).unwrap(), kind),
            Err(TokenFormatError::UnsupportedVersion { .. })
        );
        prop_assert!(unsupported, "tokenVersion 2 must be an unsupported version");
        // Non-canonical spellings of the same JSON are not payloads.
        let spaced = serde_json::to_vec_pretty(&value).unwrap();
        prop_assert!(TokenPayload::from_canonical_bytes(&spaced, kind).is_err());

        // The token string.
        let token = format_token(&payload, &signature);
        let prefix = format!("{}.v1.", kind.prefix());
        prop_assert!(token.starts_with(&prefix), "{}", token);
        prop_assert_eq!(token.split('.').count(), 4);
        prop_assert!(token.bytes().all(|b| b == b'.' || BASE64URL.contains(&b)));
        let parts = TokenParts::parse(&token).unwrap();
        prop_assert_eq!(parts.kind, kind);
        prop_assert_eq!(&parts.payload_bytes, &bytes);
        prop_assert_eq!(parts.signature, signature);
        prop_assert_eq!(parts.payload(), Ok(payload.clone()));

        // Every strict prefix is rejected, by the splitter or by the payload decoder.
        check_every_strict_prefix_rejected(&token, |t| {
            TokenParts::parse(t).is_ok_and(|p| p.payload().is_ok())
        })?;
    }

    /// Any one-character change to the payload segment is rejected, or decodes to a different
    /// payload whose unique spelling is exactly the edited token: no payload has two spellings.
    /// lock: L-TOKEN-FORMAT
    #[test]
    fn token_payload_edits_never_alias(
        payload in arb_token_payload(),
        signature in any::<[u8; 32]>(),
        picks in vec(any::<Index>(), 1..64),
    ) {
        let token = format_token(&payload, &signature);
        let start = token.find(".v1.").unwrap() + 4;
        let end = token.rfind('.').unwrap();
        let foreign = ['=', '+', '/', '.', ' ', '%', '\u{e9}', 'A'];
        for pos in start..end {
            let original = token.as_bytes()[pos];
            let at = BASE64URL.iter().position(|&c| c == original).unwrap();
            let pick = &picks[pos % picks.len()];
            let other = char::from(BASE64URL[(at + 1 + pick.index(63)) % 64]);
            let odd = foreign[pick.index(foreign.len())];
            for replacement in [other, odd] {
                if replacement == char::from(original) {
                    continue;
                }
                let mut edited = String::with_capacity(token.len() + 2);
                edited.push_str(&token[..pos]);
                edited.push(replacement);
                edited.push_str(&token[pos + 1..]);
                check_edited_token(&token, &edited, &payload)?;
            }
            let mut deleted = token.clone();
            deleted.remove(pos);
            check_edited_token(&token, &deleted, &payload)?;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Truncation
// ---------------------------------------------------------------------------------------------

fn arb_truncation_input() -> impl Strategy<Value = (String, usize)> {
    let text = prop_oneof![
        4 => arb_text(300),
        2 => (arb_nonempty_text(6), 1usize..700).prop_map(|(s, n)| s.repeat(n)),
        1 => arb_text(40).prop_map(|s| format!("{s}{TRUNCATION_MARKER}")),
    ];
    (text, 13usize..=5000, proptest::option::of(-6i64..=6)).prop_map(|(text, budget, near)| {
        let budget = match near {
            Some(delta) => {
                let len = i64::try_from(text.len()).unwrap();
                usize::try_from((len + delta).clamp(13, 5000)).unwrap()
            }
            None => budget,
        };
        (text, budget)
    })
}

proptest! {
    #![proptest_config(config())]

    /// Truncation measures UTF-8 bytes, never exceeds the budget, cuts exactly when the text is
    /// over budget, then keeps the longest prefix (whole code points) that fits with the
    /// canonical marker appended.
    /// lock: L-BUDGET-UTF8-BYTES, L-BUDGET-TRUNCATION-MARKER, L-BUDGET-TRUNCATION-FITS
    #[test]
    fn truncation_keeps_the_longest_fitting_prefix((text, budget) in arb_truncation_input()) {
        prop_assert_eq!(TRUNCATION_MARKER, "\n\n[TRUNCATED]");
        let out = truncate_with_marker(&text, budget).unwrap();
        prop_assert!(out.text.len() <= budget);
        prop_assert_eq!(out.truncated, text.len() > budget);
        if out.truncated {
            let kept = out.text.strip_suffix(TRUNCATION_MARKER);
            prop_assert!(kept.is_some(), "truncated output lacks the marker: {:?}", out.text);
            let kept = kept.unwrap_or_default();
            prop_assert!(text.starts_with(kept));
            // Model: take whole characters while they and the marker fit.
            let mut model = String::new();
            for c in text.chars() {
                if model.len() + c.len_utf8() + TRUNCATION_MARKER.len() > budget {
                    break;
                }
                model.push(c);
            }
            prop_assert_eq!(kept, model.as_str());
        } else {
            prop_assert_eq!(out.text.as_ref(), text.as_str());
        }
    }

    /// Budgets are UTF-8 bytes everywhere: bounded text fails fast exactly past its byte budget,
    /// a budget below the marker is an error exactly when a cut is needed, and notes are the
    /// marker-truncated text at 4096 bytes.
    /// lock: L-BUDGET-UTF8-BYTES, L-BUDGET-TRUNCATION-MARKER, L-OUTPUT-NOTES-BUDGET
    #[test]
    fn byte_budgets_measure_utf8(
        text in prop_oneof![
            arb_text(200),
            (arb_nonempty_text(4), 1usize..1600).prop_map(|(s, n)| s.repeat(n)),
        ],
        small in 0usize..13,
    ) {
        prop_assert_eq!(BoundedText::<512>::new(text.clone()).is_ok(), text.len() <= 512);
        prop_assert_eq!(truncate_with_marker(&text, small).is_err(), text.len() > small);
        let OutputPayload::Notes { notes_markdown } = OutputPayload::notes(&text) else {
            unreachable!("notes() builds notes");
        };
        let expected = truncate_with_marker(&text, NOTES_MARKDOWN_MAX_BYTES).unwrap();
        prop_assert!(notes_markdown.as_str().len() <= NOTES_MARKDOWN_MAX_BYTES);
        prop_assert_eq!(notes_markdown.as_str(), expected.text.as_ref());
        prop_assert_eq!(
            notes_markdown.as_str().ends_with(TRUNCATION_MARKER),
            expected.truncated || text.ends_with(TRUNCATION_MARKER)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 5. Durable artifacts: session events and execution snapshots
// ---------------------------------------------------------------------------------------------

fn arb_event_index() -> impl Strategy<Value = EventIndex> {
    prop_oneof![0u64..1000, (EventIndex::MAX - 1000)..=EventIndex::MAX]
        .prop_map(|i| EventIndex::new(i).unwrap())
}

fn arb_workflow_id() -> impl Strategy<Value = WorkflowId> {
    prop_oneof![
        "[a-z][a-z0-9_-]{0,12}\\.[a-z][a-z0-9_-]{0,12}",
        "[A-Za-z0-9][A-Za-z0-9_-]{0,20}",
    ]
    .prop_map(|s| WorkflowId::parse(&s).unwrap())
}

fn arb_pointer() -> impl Strategy<Value = BlockerPointer> {
    prop_oneof![
        "[a-c_-]{1,3}".prop_map(|k| BlockerPointer::ContextKey {
            key: ContextKey::parse(&k).unwrap()
        }),
        Just(BlockerPointer::ContextBudget),
        prop_oneof!["wr\\.contracts\\.[a-z_]{1,6}", arb_text(6)]
            .prop_map(|contract_ref| BlockerPointer::OutputContract { contract_ref }),
        select(Capability::ALL).prop_map(|capability| BlockerPointer::Capability { capability }),
        arb_step_id("[a-c0-9_-]{1,3}").prop_map(|step_id| BlockerPointer::WorkflowStep { step_id }),
    ]
}

fn arb_blocker() -> impl Strategy<Value = Blocker> {
    (
        select(BlockerCode::ALL),
        arb_pointer(),
        arb_text(30),
        proptest::option::of(arb_text(60)),
    )
        .prop_map(|(code, pointer, message, fix)| {
            Blocker::new(code, pointer, message, fix).unwrap()
        })
}

/// Where an event sits: the scope shape its kind needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    Session,
    Run,
    Node,
}

fn body_session_created() -> BoxedStrategy<(At, EventData)> {
    Just((At::Session, EventData::SessionCreated(SessionCreated {}))).boxed()
}

fn body_run_started() -> BoxedStrategy<(At, EventData)> {
    (
        arb_workflow_id(),
        arb_digest(),
        select(WorkflowSourceKind::ALL),
        arb_text(24),
    )
        .prop_map(|(workflow_id, hash, kind, source_ref)| {
            let data = RunStarted {
                workflow_id,
                workflow_hash: WorkflowHash::from_digest(hash),
                workflow_source_kind: kind,
                workflow_source_ref: source_ref,
                lane: None,
            };
            (At::Run, EventData::run_started(data))
        })
        .boxed()
}

fn body_node_created() -> BoxedStrategy<(At, EventData)> {
    (
        select(NodeKind::ALL),
        proptest::option::of(ent()),
        arb_digest(),
        arb_digest(),
    )
        .prop_map(|(node_kind, parent, hash, snapshot)| {
            let data = NodeCreated {
                node_kind,
                parent_node_id: parent.map(|e| NodeId::from_entropy(&e)),
                workflow_hash: WorkflowHash::from_digest(hash),
                snapshot_ref: SnapshotRef::from_digest(snapshot),
            };
            (At::Node, EventData::NodeCreated(data))
        })
        .boxed()
}

fn body_edge_created() -> BoxedStrategy<(At, EventData)> {
    (select(EdgeKind::ALL), any::<Index>(), ent(), ent(), ent())
        .prop_map(|(edge_kind, cause_pick, from, to, event)| {
            let causes: Vec<EdgeCauseKind> = EdgeCauseKind::ALL
                .iter()
                .copied()
                .filter(|c| c.allowed_for(edge_kind))
                .collect();
            let (from, to) = distinct(from, to);
            let data = EdgeCreated {
                edge_kind,
                from_node_id: NodeId::from_entropy(&from),
                to_node_id: NodeId::from_entropy(&to),
                cause: EdgeCause {
                    kind: causes[cause_pick.index(causes.len())],
                    event_id: EventId::from_entropy(&event),
                },
            };
            (At::Run, EventData::EdgeCreated(data))
        })
        .boxed()
}

fn body_advance_recorded() -> BoxedStrategy<(At, EventData)> {
    let outcome = prop_oneof![
        (
            vec(arb_blocker(), 1..=10),
            proptest::option::of(arb_digest())
        )
            .prop_map(|(blockers, output_digest)| AdvanceOutcome::Blocked {
                blockers: BlockerReport::new(blockers).unwrap(),
                output_digest,
            }),
        ent().prop_map(|e| AdvanceOutcome::Advanced {
            to_node_id: NodeId::from_entropy(&e)
        }),
    ];
    (ent(), outcome)
        .prop_map(|(attempt, outcome)| {
            let data = AdvanceRecorded {
                attempt_id: AttemptId::from_entropy(&attempt),
                intent: AdvanceIntent::AckPending,
                outcome,
            };
            (At::Node, EventData::AdvanceRecorded(data))
        })
        .boxed()
}

/// Artifact byte lengths: small ones, the neighbourhood of 2^53, and any up to `max`.
fn arb_byte_length(max: u64) -> impl Strategy<Value = u64> {
    let near = TWO_POW_53.unsigned_abs() + 4;
    prop_oneof![
        0u64..100_000,
        (0u64..=8).prop_map(move |d| (near - d).min(max)),
        0..=max,
    ]
}

fn body_node_output_appended(max_byte_length: u64) -> BoxedStrategy<(At, EventData)> {
    let notes = prop_oneof![
        9 => arb_text(60),
        1 => (arb_nonempty_text(4), 1usize..1400).prop_map(|(s, n)| s.repeat(n)),
    ]
    .prop_map(|text| OutputPayload::notes(&text));
    let artifact = (
        arb_digest(),
        "[a-z]{1,8}/[a-z0-9.+-]{1,16}",
        arb_byte_length(max_byte_length),
    )
        .prop_map(
            |(sha256, content_type, byte_length)| OutputPayload::ArtifactRef {
                sha256,
                content_type,
                byte_length,
            },
        );
    (
        ent(),
        proptest::option::of(ent()),
        select(OutputChannel::ALL),
        prop_oneof![3 => notes, 1 => artifact],
    )
        .prop_map(|(output, supersedes, output_channel, payload)| {
            let supersedes = supersedes.map(|s| distinct(output, s).1);
            let data = NodeOutputAppended {
                output_id: OutputId::from_entropy(&output),
                supersedes_output_id: supersedes.map(|s| OutputId::from_entropy(&s)),
                output_channel,
                payload,
            };
            (At::Node, EventData::node_output_appended(data))
        })
        .boxed()
}

fn body_gap_recorded() -> BoxedStrategy<(At, EventData)> {
    let reasons: Vec<_> = ReasonCode::all().map(ReasonCode::gap_reason).collect();
    let evidence = prop_oneof![
        ent().prop_map(|e| EvidenceRef::Event {
            event_id: EventId::from_entropy(&e)
        }),
        ent().prop_map(|e| EvidenceRef::Output {
            output_id: OutputId::from_entropy(&e)
        }),
    ];
    (
        ent(),
        select(GapSeverity::ALL),
        select(reasons),
        arb_nonempty_text(40),
        proptest::option::of(ent()),
        proptest::option::of(vec(evidence, 0..4)),
    )
        .prop_map(
            |(gap, severity, reason, summary, resolves, evidence_refs)| {
                let resolution = match resolves {
                    Some(other) => GapResolution::Resolves {
                        resolves_gap_id: GapId::from_entropy(&distinct(gap, other).1),
                    },
                    None => GapResolution::Unresolved,
                };
                let data = GapRecorded {
                    gap_id: GapId::from_entropy(&gap),
                    severity,
                    reason,
                    summary: BoundedText::new(summary).unwrap(),
                    resolution,
                    evidence_refs,
                    details: None,
                };
                (At::Node, EventData::gap_recorded(data))
            },
        )
        .boxed()
}

fn body_preferences_changed() -> BoxedStrategy<(At, EventData)> {
    (
        ent(),
        select(PreferenceSource::ALL),
        select(Autonomy::ALL),
        select(RiskPolicy::ALL),
        0u8..4,
    )
        .prop_map(|(change, source, autonomy, risk_policy, shape)| {
            let a = PreferenceDelta::Autonomy(autonomy);
            let r = PreferenceDelta::RiskPolicy(risk_policy);
            let delta = match shape {
                0 => vec![a],
                1 => vec![r],
                2 => vec![a, r],
                _ => vec![r, a],
            };
            let data = PreferencesChanged {
                change_id: ChangeId::from_entropy(&change),
                source,
                delta,
                effective: EffectivePreferences {
                    autonomy,
                    risk_policy,
                },
            };
            (At::Node, EventData::PreferencesChanged(data))
        })
        .boxed()
}

fn body_observation_recorded() -> BoxedStrategy<(At, EventData)> {
    let value = prop_oneof![
        arb_text(20).prop_map(|s| ObservationValue::ShortString {
            value: BoundedText::new(s).unwrap()
        }),
        "[0-9a-f]{40}".prop_map(|s| ObservationValue::GitSha1 {
            value: GitSha1::parse(&s).unwrap()
        }),
        arb_digest().prop_map(|value| ObservationValue::Sha256 { value }),
    ];
    (
        select(ObservationKey::ALL),
        value,
        select(Confidence::ALL),
        any::<bool>(),
    )
        .prop_map(|(key, value, confidence, on_node)| {
            let data = ObservationRecorded {
                key,
                value,
                confidence,
            };
            let at = if on_node { At::Node } else { At::Session };
            (at, EventData::ObservationRecorded(data))
        })
        .boxed()
}

fn body_capability_observed() -> BoxedStrategy<(At, EventData)> {
    let detail = prop_oneof![
        (
            arb_text(12),
            arb_step_id("[a-z0-9_-]{1,8}"),
            select(ProbeResult::ALL)
        )
            .prop_map(|(probe_template_id, probe_step_id, result)| {
                ProvenanceDetail::ProbeStep {
                    probe_template_id,
                    probe_step_id,
                    result,
                }
            }),
        (
            select(AttemptContext::ALL),
            select(ProbeResult::ALL),
            select(AttemptFailureCode::ALL),
        )
            .prop_map(
                |(attempt_context, result, code)| ProvenanceDetail::AttemptedUse {
                    attempt_context,
                    result,
                    failure_code: (result == ProbeResult::Failure).then_some(code),
                }
            ),
        (select(ClaimedBy::ALL), select(ClaimValue::ALL))
            .prop_map(|(claimed_by, claim)| ProvenanceDetail::ManualClaim { claimed_by, claim }),
    ];
    (
        ent(),
        select(Capability::ALL),
        select(CapabilityStatus::ALL),
        detail,
    )
        .prop_map(|(obs, capability, status, detail)| {
            let data = CapabilityObserved {
                cap_obs_id: CapObsId::from_entropy(&obs),
                capability,
                status,
                provenance: Provenance { detail },
            };
            (At::Node, EventData::CapabilityObserved(data))
        })
        .boxed()
}

fn body_divergence_recorded() -> BoxedStrategy<(At, EventData)> {
    (
        ent(),
        select(DivergenceReason::ALL),
        arb_nonempty_text(40),
        proptest::option::of(arb_step_id("[a-z0-9_-]{1,8}")),
    )
        .prop_map(|(div, reason, summary, related_step_id)| {
            let data = DivergenceRecorded {
                divergence_id: DivergenceId::from_entropy(&div),
                reason,
                summary: BoundedText::new(summary).unwrap(),
                related_step_id,
            };
            (At::Node, EventData::DivergenceRecorded(data))
        })
        .boxed()
}

fn body_decision_trace_appended() -> BoxedStrategy<(At, EventData)> {
    let trace_ref = prop_oneof![
        arb_step_id("[a-z0-9_-]{1,12}").prop_map(|step_id| TraceRef::StepId { step_id }),
        arb_loop_id("[a-z0-9_-]{1,12}").prop_map(|loop_id| TraceRef::LoopId { loop_id }),
        "[a-z0-9_-]{1,12}".prop_map(|c| TraceRef::ConditionId {
            condition_id: ConditionId::parse(&c).unwrap()
        }),
        any::<u32>().prop_map(|value| TraceRef::Iteration { value }),
    ];
    let summary = prop_oneof![
        4 => arb_text(30),
        1 => (arb_nonempty_text(4), 1usize..200).prop_map(|(s, n)| s.repeat(n)),
    ];
    let entry = (
        select(DecisionTraceKind::ALL),
        summary,
        proptest::option::of(vec(trace_ref, 0..12)),
    )
        .prop_map(|(kind, summary, refs)| TraceEntry {
            kind,
            summary: summary.into(),
            refs: refs.map(Into::into),
        });
    (ent(), vec(entry, 1..30))
        .prop_map(|(trace, entries)| {
            let data = DecisionTraceAppended::bounded(TraceId::from_entropy(&trace), entries);
            (At::Node, EventData::DecisionTraceAppended(data))
        })
        .boxed()
}

fn arb_context_map() -> impl Strategy<Value = Map<String, Value>> {
    btree_map(
        arb_key().prop_filter("reserved", |k| !RESERVED_CONTEXT_KEYS.contains(&k.as_str())),
        arb_json(),
        0..6,
    )
    .prop_map(|m| m.into_iter().collect())
}

fn body_context_set() -> BoxedStrategy<(At, EventData)> {
    (ent(), arb_context_map(), select(ContextSource::ALL))
        .prop_map(|(ctx, context, source)| {
            let data = ContextSet {
                context_id: ContextId::from_entropy(&ctx),
                context,
                source,
            };
            (At::Run, EventData::ContextSet(data))
        })
        .boxed()
}

fn arb_event_body(max_byte_length: u64) -> impl Strategy<Value = (At, EventData)> {
    prop_oneof![
        prop_oneof![
            body_session_created(),
            body_run_started(),
            body_node_created(),
            body_edge_created(),
            body_advance_recorded(),
            body_advance_recorded(),
            body_node_output_appended(max_byte_length),
        ],
        prop_oneof![
            body_gap_recorded(),
            body_preferences_changed(),
            body_observation_recorded(),
            body_capability_observed(),
            body_divergence_recorded(),
            body_decision_trace_appended(),
            body_context_set(),
        ],
    ]
}

fn scope_for(at: At, run: &RunId, node: &NodeId) -> EventScope {
    match at {
        At::Session => EventScope::Session,
        At::Run => EventScope::Run(run.clone()),
        At::Node => EventScope::Node(run.clone(), node.clone()),
    }
}

/// Arbitrary valid events whose integers all fit an IEEE double exactly (what RFC 8785 can
/// represent).
fn arb_jcs_safe_event() -> impl Strategy<Value = SessionEvent> {
    arb_event_with(EventIndex::MAX)
}

fn arb_event_with(max_byte_length: u64) -> impl Strategy<Value = SessionEvent> {
    (
        ent(),
        arb_event_index(),
        ent(),
        ent(),
        ent(),
        arb_event_body(max_byte_length),
    )
        .prop_map(|(event, index, session, run, node, (at, data))| {
            let run = RunId::from_entropy(&run);
            let node = NodeId::from_entropy(&node);
            SessionEvent::new(
                EventId::from_entropy(&event),
                index,
                SessionId::from_entropy(&session),
                scope_for(at, &run, &node),
                data,
            )
            .unwrap()
        })
}

/// The scope shapes the locks allow per kind (locks §1 "Event payload contracts").
fn allowed_scopes(kind: EventKind) -> &'static [At] {
    match kind {
        EventKind::SessionCreated => &[At::Session],
        EventKind::ObservationRecorded => &[At::Session, At::Node],
        EventKind::RunStarted | EventKind::EdgeCreated | EventKind::ContextSet => &[At::Run],
        _ => &[At::Node],
    }
}

/// The locked dedupeKey recipe, written from the lock text.
fn expected_dedupe_key(event: &SessionEvent) -> String {
    let s = event.session_id().as_str();
    let run = event.scope().run_id().map_or("", RunId::as_str);
    let node = event.scope().node_id().map_or("", NodeId::as_str);
    match event.data() {
        EventData::SessionCreated(_) => format!("session_created:{s}"),
        EventData::ObservationRecorded(o) => {
            let digest = sha256(&to_canonical_bytes(&o.value).unwrap());
            format!(
                "observation_recorded:{s}:{}:{}",
                o.key.as_str(),
                digest.hex()
            )
        }
        EventData::RunStarted(_) => format!("run_started:{s}:{run}"),
        EventData::NodeCreated(_) => format!("node_created:{s}:{run}:{node}"),
        EventData::EdgeCreated(e) => format!(
            "edge_created:{s}:{run}:{}->{}:{}",
            e.from_node_id.as_str(),
            e.to_node_id.as_str(),
            e.edge_kind.as_str()
        ),
        EventData::AdvanceRecorded(a) => {
            format!("advance_recorded:{s}:{node}:{}", a.attempt_id.as_str())
        }
        EventData::NodeOutputAppended(o) => {
            format!("node_output_appended:{s}:{}", o.output_id.as_str())
        }
        EventData::PreferencesChanged(p) => {
            format!("preferences_changed:{s}:{}", p.change_id.as_str())
        }
        EventData::CapabilityObserved(c) => {
            format!("capability_observed:{s}:{}", c.cap_obs_id.as_str())
        }
        EventData::GapRecorded(g) => format!("gap_recorded:{s}:{}", g.gap_id.as_str()),
        EventData::DivergenceRecorded(d) => {
            format!("divergence_recorded:{s}:{}", d.divergence_id.as_str())
        }
        EventData::DecisionTraceAppended(t) => {
            format!("decision_trace_appended:{s}:{}", t.trace_id.as_str())
        }
        EventData::ContextSet(c) => format!("context_set:{s}:{run}:{}", c.context_id.as_str()),
    }
}

fn arb_loop_frames() -> impl Strategy<Value = Vec<LoopFrame>> {
    vec(
        (
            arb_loop_id("[a-c0-9_-]{1,3}"),
            arb_iteration(),
            any::<u32>(),
        ),
        0..4,
    )
    .prop_map(|frames| {
        let mut seen = BTreeSet::new();
        frames
            .into_iter()
            .filter(|(loop_id, _, _)| seen.insert(loop_id.clone()))
            .map(|(loop_id, iteration, body_index)| LoopFrame {
                loop_id,
                iteration,
                body_index,
            })
            .collect()
    })
}

/// A running state with a pending step: completed keys sorted and unique, the pending key not
/// completed, the pending loop path equal to the loop stack.
fn arb_running_with_pending() -> impl Strategy<Value = EngineState> {
    (
        vec(arb_skey("[a-c0-9_-]{1,3}"), 0..8),
        arb_loop_frames(),
        arb_step_id("[a-c0-9_-]{1,3}"),
        arb_revisit(),
    )
        .prop_map(|(keys, loop_stack, step_id, revisit)| {
            let loop_path = loop_stack
                .iter()
                .map(|f| LoopPathEntry {
                    loop_id: f.loop_id.clone(),
                    iteration: f.iteration,
                })
                .collect();
            let step = PendingStep {
                step_id,
                loop_path,
                bindings: Default::default(),
            };
            let pending_key = step.instance_key();
            EngineState::Running {
                completed: CompletedSet::new(keys.into_iter().filter(|k| *k != pending_key)),
                loop_stack,
                pending: Pending::Some { step },
                revisit,
            }
        })
}

/// The top-level items a run condition passed (unique) and the forward walk's reach (D154).
fn arb_revisit() -> impl Strategy<Value = Option<workrail_spec::snapshot::Revisit>> {
    proptest::option::of(
        (
            proptest::collection::btree_set("[a-c0-9_-]{1,3}", 0..4),
            0u32..20,
        )
            .prop_map(|(ids, frontier)| workrail_spec::snapshot::Revisit {
                skipped: ids
                    .into_iter()
                    .enumerate()
                    .map(|(i, id)| {
                        if i % 2 == 0 {
                            workrail_spec::compiled::SequenceItem::Step {
                                step_id: StepId::parse(&id).unwrap(),
                            }
                        } else {
                            workrail_spec::compiled::SequenceItem::Loop {
                                loop_id: LoopId::parse(&id).unwrap(),
                            }
                        }
                    })
                    .collect(),
                frontier,
            }),
    )
}

fn arb_engine_state() -> impl Strategy<Value = EngineState> {
    prop_oneof![
        1 => Just(EngineState::Init),
        1 => Just(EngineState::Complete),
        2 => (vec(arb_skey("[a-c0-9_-]{1,3}"), 0..8), arb_loop_frames()).prop_map(
            |(keys, loop_stack)| EngineState::Running {
                completed: CompletedSet::new(keys),
                loop_stack,
                pending: Pending::None,
                revisit: None,
            }
        ),
        4 => arb_running_with_pending(),
    ]
}

fn arb_snapshot() -> impl Strategy<Value = ExecutionSnapshotFileV1> {
    (arb_digest(), arb_engine_state()).prop_map(|(hash, state)| ExecutionSnapshotFileV1 {
        workflow_hash: WorkflowHash::from_digest(hash),
        engine_payload: EnginePayloadV1::new(state).unwrap(),
    })
}

fn object_keys(value: &Value) -> BTreeSet<&str> {
    value
        .as_object()
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

proptest! {
    #![proptest_config(config())]

    /// Every event re-encodes identically, parses back equal from any key order or whitespace,
    /// fails to parse from every strict prefix of its line, and has the locked envelope.
    /// lock: L-EVENT-ENVELOPE, L-EVENT-SCOPE-RULES, L-EVENT-SCOPE-NOT-IN-PAYLOAD
    #[test]
    fn events_roundtrip_and_reject_prefixes(event in arb_jcs_safe_event(), choices in arb_choices()) {
        let text = serde_json::to_string(&event).unwrap();
        let parsed = SessionEvent::from_json_str(&text);
        prop_assert_eq!(parsed.as_ref(), Ok(&event), "text: {}", text);
        prop_assert_eq!(&serde_json::to_string(&parsed.unwrap()).unwrap(), &text);

        let value: Value = serde_json::from_str(&text).unwrap();
        let noisy = noisy_json(&value, &choices, false);
        let reparsed = SessionEvent::from_json_str(&noisy);
        prop_assert_eq!(reparsed.as_ref(), Ok(&event), "noisy: {}", noisy);

        // The envelope.
        let mut expected: BTreeSet<&str> =
            ["v", "eventId", "eventIndex", "sessionId", "kind", "dedupeKey", "data"].into();
        match event.scope() {
            EventScope::Session => {}
            EventScope::Run(run) => {
                expected.insert("scope");
                prop_assert_eq!(&value["scope"], &json!({"runId": run.as_str()}));
            }
            EventScope::Node(run, node) => {
                expected.insert("scope");
                prop_assert_eq!(
                    &value["scope"],
                    &json!({"runId": run.as_str(), "nodeId": node.as_str()})
                );
            }
        }
        prop_assert_eq!(object_keys(&value), expected);
        prop_assert_eq!(&value["v"], &json!(1));
        prop_assert_eq!(&value["kind"], &json!(event.kind().as_str()));
        prop_assert_eq!(&value["eventId"], &json!(event.event_id().as_str()));
        prop_assert_eq!(&value["eventIndex"], &json!(event.event_index().get()));
        prop_assert_eq!(&value["sessionId"], &json!(event.session_id().as_str()));
        prop_assert_eq!(&value["dedupeKey"], &json!(event.dedupe_key().as_str()));
        prop_assert!(value["data"].is_object());
        for key in ["runId", "nodeId", "sessionId", "scope"] {
            prop_assert!(value["data"].get(key).is_none(), "data carries {}", key);
        }

        // Scope rules: the kind's scope is allowed, every other shape is refused.
        let allowed = allowed_scopes(event.kind());
        let run = RunId::from_entropy(&[7; 10]);
        let node = NodeId::from_entropy(&[9; 10]);
        for at in [At::Session, At::Run, At::Node] {
            let built = SessionEvent::new(
                event.event_id().clone(),
                event.event_index(),
                event.session_id().clone(),
                scope_for(at, &run, &node),
                event.data().clone(),
            );
            prop_assert_eq!(built.is_ok(), allowed.contains(&at), "{} at {:?}", event.kind(), at);
        }

        check_every_strict_prefix_rejected(&text, |t| SessionEvent::from_json_str(t).is_ok())?;
    }

    /// Every dedupeKey follows its locked recipe and pattern, and a line whose dedupeKey differs
    /// from the recipe is refused.
    /// lock: L-DEDUPE-RECIPES, L-DEDUPE-PATTERN
    #[test]
    fn events_carry_the_locked_dedupe_key(event in arb_jcs_safe_event()) {
        let key = event.dedupe_key();
        let key = key.as_str();
        let expected = expected_dedupe_key(&event);
        prop_assert_eq!(key, expected.as_str());
        prop_assert!(!key.is_empty() && key.len() <= 256);
        prop_assert!(key.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_' | b':' | b'>' | b'-')));
        let mut value = serde_json::to_value(&event).unwrap();
        value["dedupeKey"] = json!(format!("{key}:x"));
        prop_assert!(SessionEvent::from_value(value).is_err());
    }

    /// An event holds no dedupeKey text but derives it from its fields (decision D210): the key
    /// it writes is the recipe's, a parsed event derives the key its line stored, and renumbering
    /// an event (a plan's events get their indices at commit) leaves its key alone.
    /// decision: D210
    #[test]
    fn an_events_derived_dedupe_key_is_the_one_it_stores(event in arb_jcs_safe_event(), index in 0u64..1_000_000) {
        let expected = expected_dedupe_key(&event);
        let written = serde_json::to_value(&event).unwrap();
        prop_assert_eq!(written["dedupeKey"].as_str(), Some(expected.as_str()));
        let parsed = SessionEvent::from_value(written).unwrap().dedupe_key();
        prop_assert_eq!(parsed.as_str(), expected.as_str());
        let renumbered = event.clone().with_event_index(EventIndex::new(index).unwrap());
        prop_assert_eq!(renumbered.dedupe_key(), event.dedupe_key());
    }

    /// Durable events survive their own RFC 8785 form (what bundle integrity hashes): the JCS
    /// text parses back to the same event.
    /// lock: L-JCS-RFC8785, L-BUNDLE-INTEGRITY-JCS
    #[test]
    fn events_survive_their_canonical_form(event in arb_jcs_safe_event()) {
        let canonical = to_canonical_string(&event).unwrap();
        let parsed = SessionEvent::from_json_str(&canonical);
        if let EventData::ContextSet(_) = event.data() {
            // Free-form context JSON is compared by its canonical form (1.0 and 1 are one number).
            let parsed = parsed.unwrap();
            prop_assert_eq!(to_canonical_string(&parsed).unwrap(), canonical);
        } else {
            prop_assert_eq!(parsed.as_ref(), Ok(&event), "canonical: {}", canonical);
        }
    }

    /// An artifact `byteLength` past 2^53-1 would be rounded by RFC 8785 (numbers are IEEE
    /// doubles), so two events would share one canonical form: such events are refused at
    /// construction, and the largest safe length survives the canonical form.
    /// lock: L-JCS-RFC8785, L-BUNDLE-INTEGRITY-JCS
    #[test]
    fn large_artifact_byte_lengths_are_refused_and_safe_ones_survive_the_canonical_form(
        (session, run, node, output, byte_length) in (
            ent(),
            ent(),
            ent(),
            ent(),
            (TWO_POW_53.unsigned_abs() + 1)..=u64::MAX,
        ),
    ) {
        let run = RunId::from_entropy(&run);
        let data = EventData::node_output_appended(NodeOutputAppended {
            output_id: OutputId::from_entropy(&output),
            supersedes_output_id: None,
            output_channel: OutputChannel::Artifact,
            payload: OutputPayload::ArtifactRef {
                sha256: Sha256Digest::from_bytes(&[0; 32]),
                content_type: "application/octet-stream".to_owned(),
                byte_length,
            },
        });
        let build = |data: EventData| {
            SessionEvent::new(
                EventId::from_entropy(&[0; 10]),
                EventIndex::ZERO,
                SessionId::from_entropy(&session),
                EventScope::Node(run.clone(), NodeId::from_entropy(&node)),
                data,
            )
        };
        prop_assert!(build(data.clone()).is_err(), "byteLength {} must be refused", byte_length);
        let EventData::NodeOutputAppended(mut safe) = data else { unreachable!() };
        if let OutputPayload::ArtifactRef { byte_length, .. } = &mut std::sync::Arc::make_mut(&mut safe).payload {
            *byte_length = TWO_POW_53.unsigned_abs() - 1;
        }
        let event = build(EventData::NodeOutputAppended(safe)).unwrap();
        let canonical = to_canonical_string(&event).unwrap();
        let parsed = SessionEvent::from_json_str(&canonical);
        prop_assert_eq!(parsed.as_ref(), Ok(&event), "canonical: {}", canonical);
    }

    /// Snapshot files re-encode identically, parse back from any layout, reject every strict
    /// prefix, carry both versions, and their ref is sha256 of their JCS bytes, whatever layout
    /// the text had.
    /// lock: L-SNAPSHOT-TYPED, L-SNAPSHOT-CAS-REF, L-SNAPSHOT-COMPLETED-SORTED
    #[test]
    fn snapshots_roundtrip_and_are_content_addressed(
        file in arb_snapshot(),
        choices in arb_choices(),
    ) {
        let text = serde_json::to_string(&file).unwrap();
        let parsed = ExecutionSnapshotFileV1::from_json_str(&text);
        prop_assert_eq!(parsed.as_ref(), Ok(&file), "text: {}", text);
        prop_assert_eq!(&serde_json::to_string(&parsed.unwrap()).unwrap(), &text);

        let value: Value = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(object_keys(&value), ["v", "workflowHash", "enginePayload"].into());
        prop_assert_eq!(&value["v"], &json!(1));
        prop_assert_eq!(object_keys(&value["enginePayload"]), ["v", "engineState"].into());
        prop_assert_eq!(&value["enginePayload"]["v"], &json!(1));
        if let EngineState::Running { completed, .. } = &file.engine_payload.engine_state {
            let completed_json = &value["enginePayload"]["engineState"]["completed"];
            prop_assert_eq!(&completed_json["kind"], &json!("set"));
            let values: Vec<&str> = completed_json["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            prop_assert!(values.windows(2).all(|w| w[0] < w[1]), "completed not sorted: {:?}", values);
            prop_assert_eq!(values.len(), completed.keys().len());
        }

        let noisy = noisy_json(&value, &choices, false);
        let reparsed = ExecutionSnapshotFileV1::from_json_str(&noisy);
        prop_assert_eq!(reparsed.as_ref(), Ok(&file), "noisy: {}", noisy);

        let jcs = to_canonical_bytes(&file).unwrap();
        let expected = SnapshotRef::from_digest(sha256(&jcs));
        prop_assert_eq!(file.snapshot_ref().unwrap(), expected.clone());
        let from_noisy = canonicalize_json_text(&noisy).unwrap();
        prop_assert_eq!(&sha256(from_noisy.as_bytes()), expected.digest());
        let jcs_text = std::str::from_utf8(&jcs).unwrap();
        let from_jcs = ExecutionSnapshotFileV1::from_json_str(jcs_text);
        prop_assert_eq!(from_jcs.as_ref(), Ok(&file));

        check_every_strict_prefix_rejected(&text, |t| ExecutionSnapshotFileV1::from_json_str(t).is_ok())?;
    }

    /// The impossible states are refused both when built and when parsed: the pending key in
    /// `completed`, unsorted or duplicate completed keys, a repeated loop id, and a pending loop
    /// path that differs from the loop stack.
    /// lock: L-SNAPSHOT-NO-PENDING-IN-COMPLETED, L-SNAPSHOT-COMPLETED-SORTED, L-SNAPSHOT-LOOP-UNIQUE, L-SNAPSHOT-LOOPPATH-MATCHES-STACK
    #[test]
    fn snapshots_refuse_impossible_states(
        state in arb_running_with_pending(),
        hash in arb_digest(),
    ) {
        let EngineState::Running { completed, loop_stack, pending, revisit } = state.clone() else {
            unreachable!("the generator builds running states");
        };
        let Pending::Some { step } = pending.clone() else {
            unreachable!("the generator builds a pending step");
        };
        let file = ExecutionSnapshotFileV1 {
            workflow_hash: WorkflowHash::from_digest(hash),
            engine_payload: EnginePayloadV1::new(state).unwrap(),
        };
        let value = serde_json::to_value(&file).unwrap();
        let parse = |v: &Value| ExecutionSnapshotFileV1::from_json_str(&v.to_string());
        prop_assert!(parse(&value).is_ok());

        // The pending key is also completed.
        let with_pending = completed.with(step.instance_key());
        let built = EnginePayloadV1::new(EngineState::Running {
            completed: with_pending.clone(),
            loop_stack: loop_stack.clone(),
            pending: pending.clone(),
            revisit: revisit.clone(),
        });
        prop_assert!(built.is_err(), "pending key in completed was accepted");
        let mut bad = value.clone();
        bad["enginePayload"]["engineState"]["completed"]["values"] =
            serde_json::to_value(with_pending.keys()).unwrap();
        prop_assert!(parse(&bad).is_err());

        // An item remembered twice for a revisit (decision D154).
        if let Some(first) = revisit.as_ref().and_then(|r| r.skipped.first()) {
            let mut twice = revisit.clone().unwrap();
            twice.skipped.push(first.clone());
            let built = EnginePayloadV1::new(EngineState::Running {
                completed: completed.clone(),
                loop_stack: loop_stack.clone(),
                pending: pending.clone(),
                revisit: Some(twice.clone()),
            });
            prop_assert!(built.is_err(), "an item remembered twice was accepted");
            let mut bad = value.clone();
            bad["enginePayload"]["engineState"]["revisit"] = serde_json::to_value(&twice).unwrap();
            prop_assert!(parse(&bad).is_err());
        }

        // Completed keys out of order or repeated.
        let keys: Vec<String> = completed.keys().iter().map(ToString::to_string).collect();
        if let Some(first) = keys.first() {
            let mut repeated = keys.clone();
            repeated.insert(0, first.clone());
            let mut bad = value.clone();
            bad["enginePayload"]["engineState"]["completed"]["values"] = json!(repeated);
            prop_assert!(parse(&bad).is_err());
        }
        if keys.len() >= 2 {
            let mut reversed = keys.clone();
            reversed.reverse();
            let mut bad = value.clone();
            bad["enginePayload"]["engineState"]["completed"]["values"] = json!(reversed);
            prop_assert!(parse(&bad).is_err());
        }

        // A loop id repeated in the stack (the loop path repeats it too, so only uniqueness
        // is violated).
        if let Some(frame) = loop_stack.first() {
            let mut stack = loop_stack.clone();
            stack.push(frame.clone());
            let mut step = step.clone();
            step.loop_path.push(LoopPathEntry {
                loop_id: frame.loop_id.clone(),
                iteration: frame.iteration,
            });
            let built = EnginePayloadV1::new(EngineState::Running {
                completed: completed.clone(),
                loop_stack: stack.clone(),
                pending: Pending::Some { step: step.clone() },
                revisit: revisit.clone(),
            });
            prop_assert!(built.is_err(), "a repeated loop id was accepted");
            let mut bad = value.clone();
            bad["enginePayload"]["engineState"]["loopStack"] = serde_json::to_value(&stack).unwrap();
            bad["enginePayload"]["engineState"]["pending"]["step"]["loopPath"] =
                serde_json::to_value(&step.loop_path).unwrap();
            prop_assert!(parse(&bad).is_err());
        }

        // The pending loop path differs from the stack.
        let mut step = step.clone();
        if step.loop_path.pop().is_none() {
            step.loop_path.push(LoopPathEntry {
                loop_id: LoopId::parse("other").unwrap(),
                iteration: 0,
            });
        }
        let mismatched = EngineState::Running {
            completed: CompletedSet::new(
                completed.keys().iter().filter(|k| **k != step.instance_key()).cloned(),
            ),
            loop_stack: loop_stack.clone(),
            pending: Pending::Some { step: step.clone() },
            revisit: revisit.clone(),
        };
        prop_assert!(EnginePayloadV1::new(mismatched).is_err());
        let mut bad = value.clone();
        bad["enginePayload"]["engineState"]["pending"]["step"]["loopPath"] =
            serde_json::to_value(&step.loop_path).unwrap();
        prop_assert!(parse(&bad).is_err());
    }
}

// ---------------------------------------------------------------------------------------------
// 6. Blocker ordering
// ---------------------------------------------------------------------------------------------

/// The locked sort key `(code, pointer.kind, pointer.* stable fields)`, read off the wire form.
fn lock_sort_key(blocker: &Blocker) -> (String, String, Vec<String>) {
    let value = serde_json::to_value(blocker).unwrap();
    let pointer = value["pointer"].as_object().unwrap();
    let fields = pointer
        .iter()
        .filter(|(k, _)| k.as_str() != "kind")
        .map(|(_, v)| v.as_str().unwrap().to_owned())
        .collect();
    (
        value["code"].as_str().unwrap().to_owned(),
        pointer["kind"].as_str().unwrap().to_owned(),
        fields,
    )
}

fn wire_multiset(blockers: &[Blocker]) -> Vec<String> {
    let mut out: Vec<String> = blockers
        .iter()
        .map(|b| serde_json::to_string(b).unwrap())
        .collect();
    out.sort();
    out
}

/// 1..=10 blockers with pairwise distinct sort keys, and a permutation of them.
fn arb_blockers_and_permutation() -> impl Strategy<Value = (Vec<Blocker>, Vec<Blocker>)> {
    vec(arb_blocker(), 1..=10)
        .prop_map(|blockers| {
            let mut seen = BTreeSet::new();
            blockers
                .into_iter()
                .filter(|b| seen.insert(lock_sort_key(b)))
                .collect::<Vec<_>>()
        })
        .prop_flat_map(|blockers| (Just(blockers.clone()), Just(blockers).prop_shuffle()))
}

/// 2..=10 blockers where at least two share a sort key but differ in message, and a
/// permutation of them.
fn arb_tied_blockers_and_permutation() -> impl Strategy<Value = (Vec<Blocker>, Vec<Blocker>)> {
    (vec(arb_blocker(), 1..=9), arb_text(30))
        .prop_map(|(mut blockers, message)| {
            let mut twin = blockers[0].clone();
            twin.message =
                BoundedText::new(format!("{}~{message}", twin.message.as_str())).unwrap();
            blockers.push(twin);
            blockers
        })
        .prop_flat_map(|blockers| (Just(blockers.clone()), Just(blockers).prop_shuffle()))
}

proptest! {
    #![proptest_config(config())]

    /// The report is sorted by the locked key, keeps the multiset, is identical (to the byte)
    /// for any permutation of its input, and stored reports must already be in that order.
    /// lock: L-BLOCKER-ORDER
    #[test]
    fn blocker_report_order_ignores_input_order(
        (blockers, permuted) in arb_blockers_and_permutation(),
    ) {
        let report = BlockerReport::new(blockers.clone()).unwrap();
        let other = BlockerReport::new(permuted).unwrap();
        prop_assert_eq!(&report, &other);
        prop_assert_eq!(to_canonical_bytes(&report).unwrap(), to_canonical_bytes(&other).unwrap());
        let keys: Vec<_> = report.blockers().iter().map(lock_sort_key).collect();
        prop_assert!(keys.windows(2).all(|w| w[0] < w[1]), "not in locked order: {:?}", keys);
        prop_assert_eq!(wire_multiset(report.blockers()), wire_multiset(&blockers));
        prop_assert_eq!(BlockerReport::from_stored(report.blockers().to_vec()), Ok(report.clone()));
        let json = serde_json::to_string(&report).unwrap();
        prop_assert_eq!(serde_json::from_str::<BlockerReport>(&json).unwrap(), report.clone());
        if report.blockers().len() >= 2 {
            let mut reversed = report.blockers().to_vec();
            reversed.reverse();
            prop_assert_eq!(BlockerReport::from_stored(reversed), Err(BlockerReportError::NotSorted));
        }
    }

    /// Determinism must also hold when two blockers share the locked sort key (same code and
    /// pointer, different message): the report is a function of the multiset, not of the
    /// input order.
    /// lock: L-BLOCKER-ORDER
    #[test]
    fn blocker_report_order_ignores_input_order_with_ties(
        (blockers, permuted) in arb_tied_blockers_and_permutation(),
    ) {
        let report = BlockerReport::new(blockers).unwrap();
        let other = BlockerReport::new(permuted).unwrap();
        prop_assert_eq!(to_canonical_string(&report).unwrap(), to_canonical_string(&other).unwrap());
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Context merge
// ---------------------------------------------------------------------------------------------

fn arb_context_key() -> impl Strategy<Value = String> {
    prop_oneof![4 => "[a-e]{1,2}", 1 => arb_key()]
        .prop_filter("reserved", |k| !RESERVED_CONTEXT_KEYS.contains(&k.as_str()))
}

fn arb_base_context() -> impl Strategy<Value = Map<String, Value>> {
    btree_map(arb_context_key(), arb_json(), 0..8).prop_map(|m| m.into_iter().collect())
}

fn arb_delta_context() -> impl Strategy<Value = Map<String, Value>> {
    let value = prop_oneof![2 => Just(Value::Null), 3 => arb_json()];
    btree_map(arb_context_key(), value, 0..8).prop_map(|m| m.into_iter().collect())
}

proptest! {
    #![proptest_config(config())]

    /// The merge is the locked shallow model key by key (a `null` deletes, any other value,
    /// arrays and objects included, replaces wholesale, absent keys keep the stored value),
    /// and applying the same delta twice changes nothing more.
    /// lock: L-CONTEXT-MERGE
    #[test]
    fn context_merge_is_the_shallow_model(
        base in arb_base_context(),
        delta in arb_delta_context(),
    ) {
        let merged = merge_context(&base, &delta).unwrap();
        let keys: BTreeSet<&String> = base.keys().chain(delta.keys()).collect();
        let mut expected = Map::new();
        for key in keys {
            let value = match delta.get(key.as_str()) {
                Some(Value::Null) => None,
                Some(v) => Some(v),
                None => base.get(key.as_str()),
            };
            if let Some(v) = value {
                expected.insert(key.clone(), v.clone());
            }
        }
        prop_assert_eq!(&merged, &expected);
        prop_assert_eq!(merge_context(&merged, &delta).unwrap(), merged.clone());
        prop_assert_eq!(merge_context(&base, &Map::new()).unwrap(), base.clone());
        if !delta.values().any(Value::is_null) {
            let mut shallow: BTreeMap<&str, &Value> = base.iter().map(|(k, v)| (k.as_str(), v)).collect();
            shallow.extend(delta.iter().map(|(k, v)| (k.as_str(), v)));
            let merged_view: BTreeMap<&str, &Value> = merged.iter().map(|(k, v)| (k.as_str(), v)).collect();
            prop_assert_eq!(merged_view, shallow);
        }
    }

    /// A delta carrying a reserved key is refused, whatever else it holds.
    /// lock: L-CONTEXT-RESERVED-KEYS
    #[test]
    fn context_merge_refuses_reserved_keys(
        base in arb_base_context(),
        delta in arb_delta_context(),
        reserved in select(RESERVED_CONTEXT_KEYS.to_vec()),
        value in arb_json_leaf(),
    ) {
        let mut delta = delta;
        delta.insert(reserved.to_owned(), value);
        prop_assert_eq!(
            merge_context(&base, &delta),
            Err(ContextError::ReservedKey { key: reserved.to_owned() })
        );
    }
}

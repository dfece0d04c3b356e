//! Conditions over a run's context: the compiled form of a `runCondition` (and of every other
//! place a workflow tests a context value: fragments, confirmations, validation rules, loop
//! conditions), and the one evaluator every implementation must agree with.
//!
//! The comparison rules are the lenient ones of the WorkRail workflow language (decision D139):
//! - `equals`, `not_equals` and `in` compare leniently: `null` and an absent key are the same;
//!   two strings compare trimmed and case-insensitively; a string and a number compare as
//!   numbers when both read as numbers; a string and a boolean compare by the words
//!   `true`/`1`/`yes` and `false`/`0`/`no`; anything else compares strictly, and an array or an
//!   object never equals anything (a workflow literal is never the same object as a context
//!   value).
//! - `gt`, `gte`, `lt`, `lte` hold only when the value is a JSON number.
//! - `contains`, `starts_with`, `ends_with` read both sides as trimmed text, case-insensitively;
//!   `matches` is a case-insensitive regular expression over the trimmed text, and a pattern that
//!   does not compile never matches.
//! - `truthy` (a bare `var`) holds unless the value is absent, `null`, `false`, `0`, `NaN` or `""`.
//!
//! A condition reads only top-level context keys. [`Condition::reads`] lists them so a caller can
//! record exactly which values a decision depended on.

use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

/// A compiled condition (closed set of operators).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "op",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum Condition {
    /// The value is truthy.
    Truthy {
        var: String,
    },
    Equals {
        var: String,
        value: Value,
    },
    NotEquals {
        var: String,
        value: Value,
    },
    Gt {
        var: String,
        value: Number,
    },
    Gte {
        var: String,
        value: Number,
    },
    Lt {
        var: String,
        value: Number,
    },
    Lte {
        var: String,
        value: Number,
    },
    Contains {
        var: String,
        value: String,
    },
    StartsWith {
        var: String,
        value: String,
    },
    EndsWith {
        var: String,
        value: String,
    },
    Matches {
        var: String,
        pattern: String,
    },
    In {
        var: String,
        values: Vec<Value>,
    },
    /// Every condition holds (an empty list holds).
    And {
        all: Vec<Condition>,
    },
    /// At least one condition holds (an empty list does not).
    Or {
        any: Vec<Condition>,
    },
    Not {
        condition: Box<Condition>,
    },
}

impl Condition {
    /// Evaluates the condition over `context` (top-level keys only).
    pub fn evaluate(&self, context: &Map<String, Value>) -> bool {
        let get = |var: &str| context.get(var).filter(|v| !v.is_null());
        match self {
            Self::Truthy { var } => get(var).is_some_and(truthy),
            Self::Equals { var, value } => lenient_equals(get(var), value),
            Self::NotEquals { var, value } => !lenient_equals(get(var), value),
            Self::Gt { var, value } => compare(get(var), value, |a, b| a > b),
            Self::Gte { var, value } => compare(get(var), value, |a, b| a >= b),
            Self::Lt { var, value } => compare(get(var), value, |a, b| a < b),
            Self::Lte { var, value } => compare(get(var), value, |a, b| a <= b),
            Self::Contains { var, value } => text(get(var)).contains(&folded(value)),
            Self::StartsWith { var, value } => text(get(var)).starts_with(&folded(value)),
            Self::EndsWith { var, value } => text(get(var)).ends_with(&folded(value)),
            Self::Matches { var, pattern } => matches(get(var), pattern),
            Self::In { var, values } => values.iter().any(|v| lenient_equals(get(var), v)),
            Self::And { all } => all.iter().all(|c| c.evaluate(context)),
            Self::Or { any } => any.iter().any(|c| c.evaluate(context)),
            Self::Not { condition } => !condition.evaluate(context),
        }
    }

    /// The context keys this condition reads, sorted.
    pub fn reads(&self) -> BTreeSet<&str> {
        let mut out = BTreeSet::new();
        self.collect_reads(&mut out);
        out
    }

    fn collect_reads<'a>(&'a self, out: &mut BTreeSet<&'a str>) {
        match self {
            Self::And { all } => all.iter().for_each(|c| c.collect_reads(out)),
            Self::Or { any } => any.iter().for_each(|c| c.collect_reads(out)),
            Self::Not { condition } => condition.collect_reads(out),
            _ => {
                if let Some(var) = self.var() {
                    out.insert(var);
                }
            }
        }
    }

    /// The variable a leaf condition reads (`None` for `and`, `or`, `not`).
    pub fn var(&self) -> Option<&str> {
        match self {
            Self::Truthy { var }
            | Self::Equals { var, .. }
            | Self::NotEquals { var, .. }
            | Self::Gt { var, .. }
            | Self::Gte { var, .. }
            | Self::Lt { var, .. }
            | Self::Lte { var, .. }
            | Self::Contains { var, .. }
            | Self::StartsWith { var, .. }
            | Self::EndsWith { var, .. }
            | Self::Matches { var, .. }
            | Self::In { var, .. } => Some(var),
            Self::And { .. } | Self::Or { .. } | Self::Not { .. } => None,
        }
    }

    /// A one-line human reading of the condition, e.g. `mode equals "fast" and not retries > 2`.
    pub fn describe(&self) -> String {
        let json = |v: &Value| serde_json::to_string(v).unwrap_or_default();
        match self {
            Self::Truthy { var } => format!("{var} is set"),
            Self::Equals { var, value } => format!("{var} equals {}", json(value)),
            Self::NotEquals { var, value } => format!("{var} does not equal {}", json(value)),
            Self::Gt { var, value } => format!("{var} > {value}"),
            Self::Gte { var, value } => format!("{var} >= {value}"),
            Self::Lt { var, value } => format!("{var} < {value}"),
            Self::Lte { var, value } => format!("{var} <= {value}"),
            Self::Contains { var, value } => format!("{var} contains {value:?}"),
            Self::StartsWith { var, value } => format!("{var} starts with {value:?}"),
            Self::EndsWith { var, value } => format!("{var} ends with {value:?}"),
            Self::Matches { var, pattern } => format!("{var} matches /{pattern}/i"),
            Self::In { var, values } => format!("{var} in {}", json(&Value::Array(values.clone()))),
            Self::And { all } if all.is_empty() => "always".to_owned(),
            Self::And { all } => join(all, " and "),
            Self::Or { any } if any.is_empty() => "never".to_owned(),
            Self::Or { any } => join(any, " or "),
            Self::Not { condition } => format!("not ({})", condition.describe()),
        }
    }

    /// `describe()` followed by the values read, e.g. `mode equals "fast" (read mode = "slow")`.
    pub fn explain(&self, context: &Map<String, Value>) -> String {
        let reads: Vec<String> = self
            .reads()
            .into_iter()
            .map(|k| match context.get(k) {
                Some(v) => format!("{k} = {}", shown(v)),
                None => format!("{k} unset"),
            })
            .collect();
        if reads.is_empty() {
            self.describe()
        } else {
            format!("{} (read {})", self.describe(), reads.join(", "))
        }
    }
}

fn join(parts: &[Condition], sep: &str) -> String {
    parts
        .iter()
        .map(|c| match c {
            Condition::And { .. } | Condition::Or { .. } => format!("({})", c.describe()),
            _ => c.describe(),
        })
        .collect::<Vec<_>>()
        .join(sep)
}

/// A value as shown in an explanation: JSON, cut to 80 bytes on a character boundary.
fn shown(value: &Value) -> String {
    let mut s = serde_json::to_string(value).unwrap_or_default();
    if s.len() > 80 {
        let mut end = 77;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push_str("...");
    }
    s
}

/// JavaScript truthiness of a JSON value.
pub fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0 && !f.is_nan()),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// The lenient equality of the workflow language; `None` is an absent (or `null`) value.
pub fn lenient_equals(value: Option<&Value>, literal: &Value) -> bool {
    let literal = Some(literal).filter(|v| !v.is_null());
    let (a, b) = match (value, literal) {
        (None, None) => return true,
        (None, _) | (_, None) => return false,
        (Some(a), Some(b)) => (a, b),
    };
    match (a, b) {
        (Value::String(x), Value::String(y)) => x.trim().to_lowercase() == y.trim().to_lowercase(),
        (Value::String(s), Value::Number(n)) | (Value::Number(n), Value::String(s)) => {
            match (js_number(s), n.as_f64()) {
                (Some(x), Some(y)) => x == y,
                _ => false,
            }
        }
        (Value::String(s), Value::Bool(b)) | (Value::Bool(b), Value::String(s)) => {
            let word = s.trim().to_lowercase();
            if *b {
                matches!(word.as_str(), "true" | "1" | "yes")
            } else {
                matches!(word.as_str(), "false" | "0" | "no")
            }
        }
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Bool(x), Value::Bool(y)) => x == y,
        // Arrays and objects are never identical to a literal; mixed kinds never equal.
        _ => false,
    }
}

/// JavaScript `Number(text)`: trimmed; empty is 0; decimal, exponent, `0x`/`0o`/`0b`,
/// `Infinity`; anything else is not a number.
pub fn js_number(text: &str) -> Option<f64> {
    let t = text.trim();
    if t.is_empty() {
        return Some(0.0);
    }
    let radix = |digits: &str, radix| {
        u64::from_str_radix(digits, radix)
            .ok()
            .map(|n| n as f64)
            .filter(|_| !digits.is_empty())
    };
    let lower = t.to_ascii_lowercase();
    if let Some(d) = lower.strip_prefix("0x") {
        return radix(d, 16);
    }
    if let Some(d) = lower.strip_prefix("0o") {
        return radix(d, 8);
    }
    if let Some(d) = lower.strip_prefix("0b") {
        return radix(d, 2);
    }
    match t {
        "Infinity" | "+Infinity" => return Some(f64::INFINITY),
        "-Infinity" => return Some(f64::NEG_INFINITY),
        _ => {}
    }
    // Rust accepts spellings JavaScript does not ("inf", "nan", "1_0" is refused by both).
    let plain = t
        .trim_start_matches(['+', '-'])
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'));
    if !plain {
        return None;
    }
    t.parse::<f64>().ok()
}

fn compare(value: Option<&Value>, bound: &Number, op: fn(f64, f64) -> bool) -> bool {
    match (value, bound.as_f64()) {
        (Some(Value::Number(n)), Some(b)) => n.as_f64().is_some_and(|v| op(v, b)),
        _ => false,
    }
}

/// JavaScript `String(value).trim()`, with `null`/absent as the empty string.
pub fn js_string(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.trim().to_owned(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(Value::Number(n)) => js_number_text(n),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::Null => String::new(),
                Value::String(s) => s.clone(),
                other => js_string(Some(other)),
            })
            .collect::<Vec<_>>()
            .join(","),
        Some(Value::Object(_)) => "[object Object]".to_owned(),
    }
}

/// JavaScript's text of a number: integers without a fraction (`3`, not `3.0`).
fn js_number_text(n: &Number) -> String {
    match n.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
        _ => n.to_string(),
    }
}

fn text(value: Option<&Value>) -> String {
    js_string(value).to_lowercase()
}

fn folded(s: &str) -> String {
    s.trim().to_lowercase()
}

fn matches(value: Option<&Value>, pattern: &str) -> bool {
    match regex::RegexBuilder::new(pattern)
        .case_insensitive(true)
        .build()
    {
        Ok(re) => re.is_match(&js_string(value)),
        Err(_) => false,
    }
}

/// Whether `pattern` compiles as a `matches` pattern (a compiler checks this up front).
pub fn pattern_compiles(pattern: &str) -> Result<(), String> {
    regex::Regex::new(pattern)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ctx(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    fn eval(c: Value, context: Value) -> bool {
        let c: Condition = serde_json::from_value(c).expect("condition");
        c.evaluate(&ctx(context))
    }

    #[test]
    fn equality_is_lenient_as_the_language_says() {
        let c = json!({"op": "equals", "var": "mode", "value": "Fast"});
        assert!(eval(c.clone(), json!({"mode": "  fast "})));
        assert!(!eval(c, json!({"mode": "slow"})));
        let n = json!({"op": "equals", "var": "n", "value": 3});
        assert!(eval(n.clone(), json!({"n": "3"})));
        assert!(eval(n.clone(), json!({"n": 3.0})));
        assert!(!eval(n, json!({"n": "three"})));
        let b = json!({"op": "equals", "var": "ok", "value": true});
        assert!(eval(b.clone(), json!({"ok": "Yes"})));
        assert!(eval(b.clone(), json!({"ok": "1"})));
        assert!(!eval(b, json!({"ok": "no"})));
        let null = json!({"op": "equals", "var": "x", "value": null});
        assert!(eval(null.clone(), json!({})));
        assert!(eval(null, json!({"x": null})));
        let ne = json!({"op": "not_equals", "var": "x", "value": "a"});
        assert!(eval(ne, json!({})));
        let obj = json!({"op": "equals", "var": "o", "value": {"a": 1}});
        assert!(!eval(obj, json!({"o": {"a": 1}})));
    }

    #[test]
    fn ordering_holds_only_for_numbers() {
        let gt = json!({"op": "gt", "var": "n", "value": 2});
        assert!(eval(gt.clone(), json!({"n": 3})));
        assert!(!eval(gt.clone(), json!({"n": "3"})));
        assert!(!eval(gt, json!({})));
        assert!(eval(
            json!({"op": "lte", "var": "n", "value": 2.5}),
            json!({"n": 2.5})
        ));
    }

    #[test]
    fn text_operators_fold_case_and_trim() {
        assert!(eval(
            json!({"op": "contains", "var": "s", "value": " AUTH"}),
            json!({"s": "OAuth flow"})
        ));
        assert!(eval(
            json!({"op": "starts_with", "var": "s", "value": "oa"}),
            json!({"s": "  OAuth"})
        ));
        assert!(eval(
            json!({"op": "ends_with", "var": "s", "value": "2"}),
            json!({"s": 12})
        ));
        assert!(eval(
            json!({"op": "contains", "var": "tags", "value": "b"}),
            json!({"tags": ["a", "b"]})
        ));
        assert!(eval(
            json!({"op": "matches", "var": "s", "pattern": "^v\\d+$"}),
            json!({"s": "V12"})
        ));
        assert!(!eval(
            json!({"op": "matches", "var": "s", "pattern": "("}),
            json!({"s": "("})
        ));
    }

    #[test]
    fn membership_truthiness_and_logic() {
        let c = json!({"op": "in", "var": "size", "values": ["S", "M"]});
        assert!(eval(c.clone(), json!({"size": "m"})));
        assert!(!eval(c, json!({"size": "L"})));
        for (v, want) in [
            (json!(0), false),
            (json!(""), false),
            (json!(false), false),
            (json!(null), false),
            (json!([]), true),
            (json!("0"), true),
            (json!(2), true),
        ] {
            assert_eq!(
                eval(json!({"op": "truthy", "var": "x"}), json!({ "x": v })),
                want,
                "{v}"
            );
        }
        assert!(eval(json!({"op": "and", "all": []}), json!({})));
        assert!(!eval(json!({"op": "or", "any": []}), json!({})));
        let nested = json!({"op": "not", "condition": {"op": "or", "any": [
            {"op": "truthy", "var": "a"}, {"op": "equals", "var": "b", "value": 1}]}});
        assert!(eval(nested.clone(), json!({"b": 2})));
        assert!(!eval(nested, json!({"b": "1"})));
    }

    #[test]
    fn reads_and_explanations_name_the_values_used() {
        let c: Condition = serde_json::from_value(json!({"op": "and", "all": [
            {"op": "equals", "var": "mode", "value": "fast"},
            {"op": "not", "condition": {"op": "gt", "var": "retries", "value": 2}}]}))
        .expect("condition");
        assert_eq!(
            c.reads().into_iter().collect::<Vec<_>>(),
            ["mode", "retries"]
        );
        assert_eq!(
            c.explain(&ctx(json!({"mode": "slow"}))),
            "mode equals \"fast\" and not (retries > 2) (read mode = \"slow\", retries unset)"
        );
    }

    #[test]
    fn js_number_reads_what_javascript_reads() {
        assert_eq!(js_number(" 12 "), Some(12.0));
        assert_eq!(js_number(""), Some(0.0));
        assert_eq!(js_number("0x10"), Some(16.0));
        assert_eq!(js_number("1e3"), Some(1000.0));
        assert_eq!(js_number("inf"), None);
        assert_eq!(js_number("12px"), None);
        assert_eq!(js_string(Some(&json!(3.0))), "3");
    }
}

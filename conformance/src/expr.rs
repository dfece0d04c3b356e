//! Scenario expressions: saved values, `${name.path}` references and `$operator` objects
//! (documented in `conformance/README.md`, "Scenario format").

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value, json};
use workrail_spec::jcs;

use crate::checks::{brief, brief_json};
use crate::mcp::{CallOutcome, ToolResult};
use crate::runner::describe;

/// Adds to `out` the name of every saved value an expression reads: `${name...}` anywhere in
/// its strings (object keys included), recursively through arrays, objects and operators.
pub fn references(v: &Value, out: &mut std::collections::BTreeSet<String>) {
    match v {
        Value::String(s) => string_references(s, out),
        Value::Array(items) => items.iter().for_each(|i| references(i, out)),
        Value::Object(map) => {
            for (k, v) in map {
                string_references(k, out);
                references(v, out);
            }
        }
        _ => {}
    }
}

fn string_references(s: &str, out: &mut std::collections::BTreeSet<String>) {
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let end = after.find(['.', '}']).unwrap_or(after.len());
        if end > 0 {
            out.insert(after[..end].to_owned());
        }
        rest = &after[end..];
    }
}

/// A saved value: a tool call's outcome or any JSON value.
#[derive(Debug, Clone)]
pub enum Var {
    Call { outcome: CallOutcome },
    Value(Value),
}

/// Operators that decode a token's parts: they cannot apply to opaque tokens.
pub const DECODING_OPERATORS: [&str; 3] = ["$tokenField", "$withTokenVersion", "$splice"];

/// The first operator of [`DECODING_OPERATORS`] an expression uses, if any.
pub fn decoding_operator(v: &Value) -> Option<&'static str> {
    match v {
        Value::Array(items) => items.iter().find_map(decoding_operator),
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            DECODING_OPERATORS
                .iter()
                .find(|op| **op == k)
                .copied()
                .or_else(|| decoding_operator(v))
        }),
        _ => None,
    }
}

/// The variables of one scenario run.
#[derive(Debug, Clone, Default)]
pub struct Vars {
    vars: BTreeMap<String, Var>,
    /// Tokens are opaque: `$tamperSignature` changes one character of the whole token.
    opaque_tokens: bool,
}

impl Vars {
    /// Variables for a server whose tokens are opaque strings (see `$tamperSignature`).
    pub fn opaque_tokens() -> Self {
        Self {
            vars: BTreeMap::new(),
            opaque_tokens: true,
        }
    }

    pub fn insert(&mut self, name: &str, var: Var) {
        self.vars.insert(name.to_owned(), var);
    }

    pub fn value(&self, name: &str) -> Result<Value, String> {
        match self.vars.get(name) {
            Some(Var::Value(v)) => Ok(v.clone()),
            Some(Var::Call { .. }) => Err(format!("`{name}` is a call result, not a value")),
            None => Err(format!(
                "no variable `{name}` (an earlier step did not save it)"
            )),
        }
    }

    pub fn result(&self, name: &str) -> Result<ToolResult, String> {
        match self.vars.get(name) {
            Some(Var::Call {
                outcome: CallOutcome::Result(r),
            }) => Ok(r.clone()),
            Some(Var::Call { outcome }) => Err(format!(
                "`{name}` is not a tool result: {}",
                describe(outcome)
            )),
            Some(Var::Value(_)) => Err(format!("`{name}` is a value, not a call result")),
            None => Err(format!(
                "no variable `{name}` (an earlier step did not save it)"
            )),
        }
    }

    pub fn eval_string(&self, v: &Value) -> Result<String, String> {
        match self.eval(v)? {
            Value::String(s) => Ok(s),
            other => Err(format!("expected a string, got {}", brief_json(&other))),
        }
    }

    /// Evaluates an expression: `${var.path}` references, `$op` objects, plain JSON.
    pub fn eval(&self, v: &Value) -> Result<Value, String> {
        match v {
            Value::String(s) => self.interpolate(s),
            Value::Array(items) => items
                .iter()
                .map(|i| self.eval(i))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array),
            Value::Object(map) if map.len() == 1 && map.keys().all(|k| k.starts_with('$')) => {
                let (op, arg) = map.iter().next().ok_or("empty operator")?;
                self.operator(op, arg)
            }
            Value::Object(map) => {
                let mut out = Map::new();
                for (k, v) in map {
                    out.insert(k.clone(), self.eval(v)?);
                }
                Ok(Value::Object(out))
            }
            other => Ok(other.clone()),
        }
    }

    fn interpolate(&self, s: &str) -> Result<Value, String> {
        if let Some(inner) = s.strip_prefix("${").and_then(|r| r.strip_suffix('}'))
            && !inner.contains("${")
            && !inner.contains('}')
        {
            return self.resolve(inner);
        }
        let mut out = String::new();
        let mut rest = s;
        while let Some(start) = rest.find("${") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            let end = after
                .find('}')
                .ok_or_else(|| format!("unterminated ${{ in {s:?}"))?;
            match self.resolve(&after[..end])? {
                Value::String(v) => out.push_str(&v),
                other => out.push_str(&other.to_string()),
            }
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(Value::String(out))
    }

    fn resolve(&self, path: &str) -> Result<Value, String> {
        let mut segs = path.split('.');
        let name = segs.next().unwrap_or("");
        let mut current = match self.vars.get(name) {
            Some(Var::Value(v)) => v.clone(),
            Some(Var::Call {
                outcome: CallOutcome::Result(r),
            }) => {
                let mut segs2 = path.split('.').skip(1).peekable();
                match segs2.peek().copied() {
                    Some("@text") => return Ok(Value::String(r.text.clone())),
                    Some("@isError") => return Ok(Value::Bool(r.is_error)),
                    _ => r.structured.clone(),
                }
            }
            Some(Var::Call { outcome }) => {
                return Err(format!(
                    "`${{{path}}}`: `{name}` is not a tool result: {}",
                    describe(outcome)
                ));
            }
            None => {
                return Err(format!(
                    "`${{{path}}}`: no variable `{name}` (an earlier step did not save it)"
                ));
            }
        };
        for seg in segs {
            let next = match &current {
                Value::Object(o) => o.get(seg).cloned(),
                Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i).cloned()),
                _ => None,
            };
            current = next
                .ok_or_else(|| format!("`${{{path}}}`: no `{seg}` in {}", brief_json(&current)))?;
        }
        Ok(current)
    }

    fn operator(&self, op: &str, arg: &Value) -> Result<Value, String> {
        let args = || -> Result<Vec<Value>, String> {
            match self.eval(arg)? {
                Value::Array(a) => Ok(a),
                other => Ok(vec![other]),
            }
        };
        let string = |v: &Value| -> Result<String, String> {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{op}: expected a string, got {}", brief_json(v)))
        };
        let count = |v: &Value| -> Result<usize, String> {
            v.as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| format!("{op}: expected a count, got {}", brief_json(v)))
        };
        match op {
            "$literal" => Ok(arg.clone()),
            "$repeat" => {
                let a = args()?;
                let (Some(s), Some(n)) = (a.first(), a.get(1)) else {
                    return Err("$repeat takes [text, count]".into());
                };
                Ok(Value::String(string(s)?.repeat(count(n)?)))
            }
            "$concat" => {
                let mut out = String::new();
                for v in args()? {
                    out.push_str(&string(&v)?);
                }
                Ok(Value::String(out))
            }
            "$contextOfBytes" => {
                // {"blob":"<n-11 bytes>"} is exactly n bytes in RFC 8785 form.
                let n = count(&self.eval(arg)?)?;
                let fill = n
                    .checked_sub(11)
                    .ok_or("$contextOfBytes needs at least 11 bytes")?;
                Ok(json!({ "blob": "a".repeat(fill) }))
            }
            "$jcsBytes" => {
                let v = self.eval(arg)?;
                let bytes = jcs::to_canonical_bytes(&v).map_err(|e| format!("$jcsBytes: {e}"))?;
                Ok(Value::from(bytes.len()))
            }
            "$len" => match self.eval(arg)? {
                Value::Array(a) => Ok(Value::from(a.len())),
                Value::String(s) => Ok(Value::from(s.len())),
                Value::Object(o) => Ok(Value::from(o.len())),
                other => Err(format!(
                    "$len: expected an array, string or object, got {}",
                    brief_json(&other)
                )),
            },
            "$prefixBytes" => {
                let a = args()?;
                let (Some(s), Some(n)) = (a.first(), a.get(1)) else {
                    return Err("$prefixBytes takes [text, count]".into());
                };
                let s = string(s)?;
                let cut = workrail_spec::budget::floor_char_boundary(&s, count(n)?);
                Ok(Value::String(s[..cut].to_owned()))
            }
            "$tamperSignature" if self.opaque_tokens => {
                // An opaque token: change its last character.
                let token = string(&self.eval(arg)?)?;
                let mut chars: Vec<char> = token.chars().collect();
                let last = chars.last_mut().ok_or("$tamperSignature: empty token")?;
                *last = if *last == 'A' { 'B' } else { 'A' };
                Ok(Value::String(chars.into_iter().collect()))
            }
            "$tamperSignature" => {
                let token = string(&self.eval(arg)?)?;
                let parts: Vec<&str> = token.split('.').collect();
                let [p, v, payload, sig] = parts.as_slice() else {
                    return Err(format!(
                        "$tamperSignature: not a 4-part token: {}",
                        brief(&token)
                    ));
                };
                let mut chars = sig.chars();
                let first = chars.next().ok_or("$tamperSignature: empty signature")?;
                let swapped = if first == 'A' { 'B' } else { 'A' };
                Ok(Value::String(format!(
                    "{p}.{v}.{payload}.{swapped}{}",
                    chars.as_str()
                )))
            }
            "$splice" => {
                // [payload from this token, signature from that one]
                let a = args()?;
                let (Some(x), Some(y)) = (a.first(), a.get(1)) else {
                    return Err("$splice takes [tokenA, tokenB]".into());
                };
                let (x, y) = (string(x)?, string(y)?);
                let px: Vec<&str> = x.split('.').collect();
                let py: Vec<&str> = y.split('.').collect();
                if px.len() != 4 || py.len() != 4 {
                    return Err("$splice: tokens must have 4 parts".into());
                }
                Ok(Value::String(format!(
                    "{}.{}.{}.{}",
                    px[0], px[1], px[2], py[3]
                )))
            }
            "$withTokenVersion" => {
                let a = args()?;
                let (Some(t), Some(v)) = (a.first(), a.get(1)) else {
                    return Err("$withTokenVersion takes [token, version]".into());
                };
                let (t, v) = (string(t)?, string(v)?);
                let mut parts: Vec<&str> = t.split('.').collect();
                if parts.len() != 4 {
                    return Err(format!(
                        "$withTokenVersion: not a 4-part token: {}",
                        brief(&t)
                    ));
                }
                parts[1] = &v;
                Ok(Value::String(parts.join(".")))
            }
            "$tokenField" => {
                let a = args()?;
                let (Some(t), Some(f)) = (a.first(), a.get(1)) else {
                    return Err("$tokenField takes [token, field]".into());
                };
                let (t, f) = (string(t)?, string(f)?);
                let payload = t.split('.').nth(2).ok_or("$tokenField: not a token")?;
                let bytes = URL_SAFE_NO_PAD
                    .decode(payload.trim_end_matches('='))
                    .map_err(|e| format!("$tokenField: payload is not base64url: {e}"))?;
                let v: Value =
                    serde_json::from_slice(&bytes).map_err(|e| format!("$tokenField: {e}"))?;
                v.get(&f)
                    .cloned()
                    .ok_or_else(|| format!("$tokenField: no `{f}` in the payload"))
            }
            other => Err(format!("unknown operator {other}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tampering_an_opaque_token_changes_one_character() {
        let eval = |vars: &Vars, t: &str| vars.eval(&json!({"$tamperSignature": t}));
        let opaque = Vars::opaque_tokens();
        assert_eq!(eval(&opaque, "ct_9xQ").unwrap(), json!("ct_9xA"));
        assert_eq!(eval(&opaque, "ct_9xA").unwrap(), json!("ct_9xB"));
        assert!(eval(&opaque, "").is_err());
        // The locks' format: the first signature character.
        let v1 = Vars::default();
        assert_eq!(
            eval(&v1, "st.v1.e30.QUJD").unwrap(),
            json!("st.v1.e30.AUJD")
        );
        assert!(
            eval(&v1, "ct_9xQ")
                .unwrap_err()
                .contains("not a 4-part token")
        );
    }

    #[test]
    fn decoding_operators_are_found_anywhere_in_an_expression() {
        assert_eq!(
            decoding_operator(
                &json!({"a": [1, {"b": {"$tokenField": ["${s0.stateToken}", "runId"]}}]})
            ),
            Some("$tokenField")
        );
        assert_eq!(
            decoding_operator(&json!({"stateToken": {"$withTokenVersion": ["${s}", "v2"]}})),
            Some("$withTokenVersion")
        );
        assert_eq!(
            decoding_operator(&json!({"stateToken": {"$tamperSignature": "${s0.stateToken}"}})),
            None
        );
    }
}

//! A small JSON Schema (2020-12) validator, enough to check that a server's tool `inputSchema`
//! accepts the contract's example inputs.
//!
//! Supported: boolean schemas, local `$ref` (`#/...`), `type`, `enum`, `const`, `properties`,
//! `required`, `additionalProperties`, `items`, `oneOf`, `anyOf`, `allOf`, `not`, `minLength`,
//! `maxLength`, `minimum`, `maximum`, `minItems`, `maxItems`, `minProperties`. Other keywords
//! (e.g. `pattern`, `format`) are ignored: the validator may accept what a full one refuses,
//! never the reverse, so a failure it reports is real.

use serde_json::{Map, Value};

/// Problems found validating `instance` against `schema` (empty: valid).
pub fn validate(instance: &Value, schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    check(instance, schema, schema, "", &mut problems, 0);
    problems
}

fn check(
    instance: &Value,
    schema: &Value,
    root: &Value,
    at: &str,
    out: &mut Vec<String>,
    depth: usize,
) {
    let here = if at.is_empty() { "/" } else { at };
    if depth > 64 {
        out.push(format!(
            "{here}: schema nesting deeper than 64 (a $ref cycle?)"
        ));
        return;
    }
    let obj = match schema {
        Value::Bool(true) => return,
        Value::Bool(false) => {
            out.push(format!("{here}: the schema is `false`, nothing is allowed"));
            return;
        }
        Value::Object(o) => o,
        _ => {
            out.push(format!("{here}: the schema is not an object or boolean"));
            return;
        }
    };
    if let Some(Value::String(r)) = obj.get("$ref") {
        match resolve(root, r) {
            Some(target) => check(instance, target, root, at, out, depth + 1),
            None => out.push(format!("{here}: cannot resolve $ref {r}")),
        }
    }
    if let Some(t) = obj.get("type")
        && !type_matches(instance, t)
    {
        out.push(format!(
            "{here}: expected type {t}, got {}",
            type_name(instance)
        ));
        return;
    }
    if let Some(Value::Array(options)) = obj.get("enum")
        && !options.contains(instance)
    {
        out.push(format!(
            "{here}: {instance} is not one of {}",
            Value::Array(options.clone())
        ));
    }
    if let Some(c) = obj.get("const")
        && c != instance
    {
        out.push(format!("{here}: expected const {c}, got {instance}"));
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        let Some(Value::Array(subs)) = obj.get(key) else {
            continue;
        };
        let results: Vec<Vec<String>> = subs
            .iter()
            .map(|s| {
                let mut p = Vec::new();
                check(instance, s, root, at, &mut p, depth + 1);
                p
            })
            .collect();
        let passing = results.iter().filter(|p| p.is_empty()).count();
        match key {
            "allOf" => results.into_iter().for_each(|p| out.extend(p)),
            "anyOf" if passing == 0 => out.push(format!(
                "{here}: matches none of anyOf: {}",
                summarize(&results)
            )),
            "oneOf" if passing != 1 => out.push(format!(
                "{here}: matches {passing} of oneOf (exactly 1 required): {}",
                summarize(&results)
            )),
            _ => {}
        }
    }
    if let Some(not) = obj.get("not") {
        let mut p = Vec::new();
        check(instance, not, root, at, &mut p, depth + 1);
        if p.is_empty() {
            out.push(format!("{here}: matches a `not` schema"));
        }
    }
    match instance {
        Value::Object(map) => check_object(map, obj, root, at, out, depth),
        Value::Array(items) => {
            if let Some(item_schema) = obj.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(
                        item,
                        item_schema,
                        root,
                        &format!("{at}/{i}"),
                        out,
                        depth + 1,
                    );
                }
            }
            bound(obj, "minItems", items.len(), true, here, out);
            bound(obj, "maxItems", items.len(), false, here, out);
        }
        Value::String(s) => {
            let chars = s.chars().count();
            bound(obj, "minLength", chars, true, here, out);
            bound(obj, "maxLength", chars, false, here, out);
        }
        Value::Number(n) => {
            if let (Some(min), Some(v)) = (obj.get("minimum").and_then(Value::as_f64), n.as_f64())
                && v < min
            {
                out.push(format!("{here}: {v} is below minimum {min}"));
            }
            if let (Some(max), Some(v)) = (obj.get("maximum").and_then(Value::as_f64), n.as_f64())
                && v > max
            {
                out.push(format!("{here}: {v} is above maximum {max}"));
            }
        }
        _ => {}
    }
}

fn check_object(
    map: &Map<String, Value>,
    obj: &Map<String, Value>,
    root: &Value,
    at: &str,
    out: &mut Vec<String>,
    depth: usize,
) {
    let here = if at.is_empty() { "/" } else { at };
    let props = obj.get("properties").and_then(Value::as_object);
    if let Some(Value::Array(required)) = obj.get("required") {
        for r in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(r) {
                out.push(format!("{here}: required property `{r}` is missing"));
            }
        }
    }
    for (k, v) in map {
        let path = format!("{at}/{k}");
        if let Some(s) = props.and_then(|p| p.get(k)) {
            check(v, s, root, &path, out, depth + 1);
        } else if let Some(extra) = obj.get("additionalProperties") {
            if extra == &Value::Bool(false) {
                out.push(format!("{here}: property `{k}` is not allowed"));
            } else {
                check(v, extra, root, &path, out, depth + 1);
            }
        }
    }
    bound(obj, "minProperties", map.len(), true, here, out);
}

fn bound(
    obj: &Map<String, Value>,
    key: &str,
    n: usize,
    min: bool,
    here: &str,
    out: &mut Vec<String>,
) {
    let Some(limit) = obj.get(key).and_then(Value::as_u64) else {
        return;
    };
    let n = n as u64;
    if (min && n < limit) || (!min && n > limit) {
        out.push(format!("{here}: {key} is {limit}, got {n}"));
    }
}

fn summarize(results: &[Vec<String>]) -> String {
    results
        .iter()
        .enumerate()
        .map(|(i, p)| {
            if p.is_empty() {
                format!("[{i}] ok")
            } else {
                format!("[{i}] {}", p.join("; "))
            }
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

fn resolve<'a>(root: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    if pointer.is_empty() {
        return Some(root);
    }
    root.pointer(pointer)
}

fn type_matches(instance: &Value, t: &Value) -> bool {
    match t {
        Value::String(name) => is_type(instance, name),
        Value::Array(names) => names
            .iter()
            .filter_map(Value::as_str)
            .any(|n| is_type(instance, n)),
        _ => true,
    }
}

fn is_type(instance: &Value, name: &str) -> bool {
    match name {
        "object" => instance.is_object(),
        "array" => instance.is_array(),
        "string" => instance.is_string(),
        "boolean" => instance.is_boolean(),
        "null" => instance.is_null(),
        "number" => instance.is_number(),
        "integer" => {
            instance.is_i64()
                || instance.is_u64()
                || instance.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => true,
    }
}

fn type_name(instance: &Value) -> &'static str {
    match instance {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

//! Whether a server's tool `inputSchema` accepts the contract's example inputs, judged by a full
//! JSON Schema validator (the `jsonschema` crate), so the suite refuses exactly what the
//! schema's own draft refuses.
//!
//! A partial validator cannot make even the one-sided promise "never refuses what a full one
//! accepts": keywords that negate or count their subschemas (`not`, `oneOf`) turn a keyword it
//! ignores into a refusal (an instance a `pattern` keeps out of one `oneOf` branch matches only
//! the other, but looks like it matches both when `pattern` is ignored).
//!
//! The draft is the schema's `$schema` when it names a known one, else 2020-12 (the MCP
//! default for `inputSchema`). Nothing is fetched: the crate is built without its HTTP and file
//! resolvers, so a `$ref` outside the schema is reported as a problem of the schema.

use serde_json::Value;

/// Problems found validating `instance` against `schema` (empty: valid). A schema the validator
/// cannot compile is one problem, saying so.
pub fn validate(instance: &Value, schema: &Value) -> Vec<String> {
    let validator = match jsonschema::options().build(schema) {
        Ok(v) => v,
        Err(e) => return vec![format!("the schema itself is not usable: {e}")],
    };
    validator
        .iter_errors(instance)
        .map(|e| {
            let at = e.instance_path().to_string();
            let at = if at.is_empty() { "/".to_owned() } else { at };
            format!("{at}: {e}")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn problems_name_where_they_are() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string"}}});
        assert_eq!(validate(&json!({"a": "x"}), &schema), Vec::<String>::new());
        let found = validate(&json!({"a": 1}), &schema);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("/a: "), "{found:?}");
        let root = validate(&json!([]), &schema);
        assert!(root[0].starts_with("/: "), "{root:?}");
    }

    #[test]
    fn an_unusable_schema_is_a_problem_not_a_pass() {
        let found = validate(&json!({}), &json!({"type": 5}));
        assert_eq!(found.len(), 1);
        assert!(found[0].contains("not usable"), "{found:?}");
        let remote = validate(
            &json!({}),
            &json!({"$ref": "https://example.invalid/schema.json"}),
        );
        assert!(!remote.is_empty(), "a remote $ref is never fetched");
    }
}

//! The suite's check of a tool's `inputSchema` (`schemaAccepts`) agrees with the JSON Schema
//! drafts, case by case, in the format of the JSON-Schema-Test-Suite: each file in
//! `tests/schema_cases/` is a list of `{description, schema, tests: [{description, data,
//! valid}]}`. The cases cover every keyword the contract's tool schemas use, and the ones where
//! a partial validator goes wrong in the direction that matters (refusing what the schema
//! accepts): `oneOf` and `not` over a keyword it would ignore, `additionalProperties` beside
//! `patternProperties`, tuple `items` under draft-07.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;
use workrail_conformance::schema;

fn groups() -> Vec<(String, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/schema_cases");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no cases in {}", dir.display());
    let mut out = Vec::new();
    for file in files {
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        for group in doc.as_array().unwrap() {
            out.push((name.clone(), group.clone()));
        }
    }
    out
}

fn keywords(schema: &Value, out: &mut BTreeSet<String>) {
    match schema {
        Value::Object(map) => {
            for (k, v) in map {
                out.insert(k.clone());
                match k.as_str() {
                    // Maps of names to schemas: their keys are not keywords.
                    "properties" | "patternProperties" | "$defs" | "definitions" => {
                        for sub in v.as_object().into_iter().flat_map(|m| m.values()) {
                            keywords(sub, out);
                        }
                    }
                    "enum" | "const" | "required" => {}
                    _ => keywords(v, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| keywords(i, out)),
        _ => {}
    }
}

/// decision: D167
#[test]
fn every_case_gets_the_drafts_answer() {
    let mut wrong = Vec::new();
    let mut cases = 0;
    for (file, group) in groups() {
        let schema = &group["schema"];
        for test in group["tests"].as_array().unwrap() {
            cases += 1;
            let problems = schema::validate(&test["data"], schema);
            let valid = test["valid"].as_bool().unwrap();
            if problems.is_empty() != valid {
                wrong.push(format!(
                    "{file}: {} / {}: expected {}, got {problems:?}",
                    group["description"],
                    test["description"],
                    if valid { "valid" } else { "invalid" }
                ));
            }
            if !valid {
                assert!(
                    problems.iter().all(|p| p.starts_with('/')),
                    "every problem names where it is: {problems:?}"
                );
            }
        }
    }
    assert!(cases >= 60, "only {cases} cases");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// decision: D167
#[test]
fn the_cases_cover_the_keywords_of_tool_schemas() {
    let mut seen = BTreeSet::new();
    for (_, group) in groups() {
        keywords(&group["schema"], &mut seen);
    }
    for k in [
        "type",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "patternProperties",
        "items",
        "prefixItems",
        "oneOf",
        "anyOf",
        "allOf",
        "not",
        "$ref",
        "$defs",
        "definitions",
        "$schema",
        "minLength",
        "maxLength",
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
    ] {
        assert!(seen.contains(k), "no case uses `{k}`");
    }
}

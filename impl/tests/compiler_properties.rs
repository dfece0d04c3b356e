//! Property tests of `workflowHash` over generated workflows: the hash is invariant under source
//! key order, whitespace, feature-list order and duplicate or default-spelled features, and under
//! where the source lives; it changes whenever a hashed field changes.
//!
//! Guards against "order by accident" drift (locks §5): a hash that depends on how a file was
//! formatted or listed would unpin runs for no reason, and a hash that ignores a field would let a
//! changed workflow pass as the pinned one. Cases: `WORKRAIL_PROPTEST_CASES` (default 64); no
//! failure-persistence files are written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use proptest::sample::{Index, select};
use serde_json::{Map, Value, json};
use workrail::compiler::{CompileContext, compile, compile_str};
use workrail_spec::ids::WorkflowHash;

const DEFAULT_CASES: u32 = 64;

fn config() -> ProptestConfig {
    let cases = match std::env::var("WORKRAIL_PROPTEST_CASES") {
        Ok(raw) => raw.trim().parse::<u32>().unwrap_or_else(|_| {
            panic!("WORKRAIL_PROPTEST_CASES must be an unsigned integer, got {raw:?}")
        }),
        Err(_) => DEFAULT_CASES,
    };
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

const REFS: &[&str] = &[
    "wr.refs.append_only_truth",
    "wr.refs.jcs_hashing",
    "wr.refs.notes_per_step",
];

fn text() -> impl Strategy<Value = String> {
    "[A-Za-z][A-Za-z0-9 ,.]{0,30}"
}

fn prompt_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        text().prop_map(Value::from),
        (text(), select(REFS))
            .prop_map(|(t, r)| json!([{"kind": "text", "text": t}, {"kind": "ref", "refId": r}])),
    ]
}

fn step(index: usize) -> impl Strategy<Value = Value> {
    let id = format!("s{index}");
    prop_oneof![
        (text(), text(), any::<bool>()).prop_map({
            let id = id.clone();
            move |(title, prompt, confirm)| json!({"id": id, "title": title, "prompt": prompt, "requireConfirmation": confirm})
        }),
        (text(), prompt_value(), proptest::collection::vec(prompt_value(), 0..3), proptest::collection::vec(text(), 0..3)).prop_map(
            move |(title, goal, constraints, procedure)| {
                let mut blocks = json!({"goal": goal});
                if !constraints.is_empty() {
                    blocks["constraints"] = Value::Array(constraints);
                }
                if !procedure.is_empty() {
                    blocks["procedure"] = json!(procedure);
                }
                json!({"id": id, "title": title, "promptBlocks": blocks})
            }
        ),
    ]
}

/// A loop (possibly none) and its condition.
fn loop_part() -> impl Strategy<Value = Option<(Value, Value)>> {
    proptest::option::of((select(&["always_true", "always_false", "loop_control"][..]), 1u32..6, text())).prop_map(|maybe| {
        maybe.map(|(kind, max, title)| {
            let mut body = vec![json!({"id": "work", "title": title, "prompt": "Work."})];
            let mut condition = json!({"id": "cond", "kind": kind});
            if kind == "loop_control" {
                condition["continueWhen"] = json!("continue");
                body.push(json!({"id": "decide", "title": "Decide", "prompt": "Decide.", "output": {"contractRef": "wr.contracts.loop_control"}}));
            }
            let l = json!({"type": "loop", "loopId": "pass", "while": {"kind": "condition_ref", "conditionId": "cond"}, "maxIterations": max, "body": body});
            (l, condition)
        })
    })
}

fn features() -> impl Strategy<Value = Vec<Value>> {
    let options = vec![
        json!("wr.features.durable_recap_guidance"),
        json!("wr.features.output_contracts"),
        json!({"id": "wr.features.mode_guidance", "config": {"detail": "full"}}),
        json!({"id": "wr.features.capabilities", "config": {"probeVisibility": "expanded"}}),
    ];
    proptest::sample::subsequence(options, 0..=4)
}

fn capabilities() -> impl Strategy<Value = Value> {
    let req = || proptest::option::of(select(&["required", "preferred", "disabled"][..]));
    (req(), req()).prop_map(|(d, w)| {
        let mut map = Map::new();
        if let Some(d) = d {
            map.insert("delegation".into(), d.into());
        }
        if let Some(w) = w {
            map.insert("web_browsing".into(), w.into());
        }
        Value::Object(map)
    })
}

prop_compose! {
    fn workflow()(
        name in text(),
        description in text(),
        role in proptest::option::of(text()),
        n in 1usize..4,
        lp in loop_part(),
        features in features(),
        capabilities in capabilities(),
    )(
        steps in (0..n).map(step).collect::<Vec<_>>(),
        name in Just(name), description in Just(description), role in Just(role),
        lp in Just(lp), features in Just(features), capabilities in Just(capabilities),
    ) -> Value {
        let mut steps = steps;
        let mut conditions = Vec::new();
        if let Some((l, c)) = lp {
            steps.push(l);
            conditions.push(c);
        }
        let mut v = json!({
            "id": "project.generated", "name": name, "description": description,
            "capabilities": capabilities, "features": features, "conditions": conditions, "steps": steps,
        });
        if let Some(role) = role {
            v["agentRole"] = json!(role);
        }
        v
    }
}

fn hash(v: &Value) -> WorkflowHash {
    compile(v, &CompileContext::load("project"))
        .unwrap_or_else(|e| panic!("{e}\n{v}"))
        .workflow_hash
}

/// A tiny deterministic PRNG so one seed gives one layout.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Writes JSON text with object keys in a seeded random order and random whitespace.
fn write_shuffled(v: &Value, seed: &mut u64, out: &mut String) {
    let space = |seed: &mut u64, out: &mut String| {
        for _ in 0..(next(seed) % 3) {
            out.push([' ', '\n', '\t'][(next(seed) % 3) as usize]);
        }
    };
    match v {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            for i in (1..entries.len()).rev() {
                entries.swap(i, (next(seed) % (i as u64 + 1)) as usize);
            }
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                space(seed, out);
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push(':');
                space(seed, out);
                write_shuffled(v, seed, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                space(seed, out);
                write_shuffled(item, seed, out);
            }
            out.push(']');
        }
        other => out.push_str(&serde_json::to_string(other).unwrap()),
    }
}

/// The hashed fields a mutation can touch; each must change the hash.
fn mutate(v: &mut Value, which: usize, index: Index) -> String {
    let steps = v["steps"].as_array().unwrap().len();
    let s = index.index(steps);
    match which % 9 {
        0 => {
            v["name"] = json!(format!("{} changed", v["name"].as_str().unwrap()));
            "name".into()
        }
        1 => {
            v["description"] = json!(format!("{}!", v["description"].as_str().unwrap()));
            "description".into()
        }
        2 => {
            v["agentRole"] = json!(format!(
                "{} Be brief.",
                v["agentRole"].as_str().unwrap_or("Role.")
            ));
            "agentRole".into()
        }
        3 => {
            let step = &mut v["steps"][s];
            if step.get("type").is_some() {
                let max = step["maxIterations"].as_u64().unwrap();
                step["maxIterations"] = json!(max % 5 + 1 + u64::from(max % 5 + 1 == max));
                "maxIterations".into()
            } else {
                step["title"] = json!(format!("{} v2", step["title"].as_str().unwrap()));
                "title".into()
            }
        }
        4 => {
            let caps = v["capabilities"].as_object_mut().unwrap();
            let flipped = if caps.get("delegation").and_then(Value::as_str) == Some("preferred") {
                "disabled"
            } else {
                "preferred"
            };
            caps.insert("delegation".into(), json!(flipped));
            "capability requirement".into()
        }
        5 => {
            let features = v["features"].as_array_mut().unwrap();
            if let Some(pos) = features.iter().position(|f| {
                f.get("id").and_then(Value::as_str) == Some("wr.features.mode_guidance")
            }) {
                features[pos] =
                    json!({"id": "wr.features.mode_guidance", "config": {"detail": "brief"}});
                "feature config".into()
            } else {
                features.push(json!("wr.features.mode_guidance"));
                "feature added".into()
            }
        }
        6 => {
            let step = &mut v["steps"][s];
            if step.get("type").is_some() {
                step["body"][0]["prompt"] = json!("Work harder.");
            } else if step.get("prompt").is_some() {
                step["prompt"] = json!(format!("{} Then stop.", step["prompt"].as_str().unwrap()));
            } else {
                step["promptBlocks"]["verify"] = json!(["Check it."]);
            }
            "prompt text".into()
        }
        7 => {
            v["recommendations"] = json!({"recommendedAutonomy": "guided"});
            "recommendations".into()
        }
        _ => {
            v["id"] = json!("project.renamed");
            "workflowId".into()
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// lock: L-HASH-WORKFLOW, L-COMPILE-PURE, L-JCS-RFC8785
    #[test]
    fn the_hash_ignores_source_key_order_and_whitespace(v in workflow(), seed in any::<u64>()) {
        let mut seed = seed | 1;
        let mut text = String::new();
        write_shuffled(&v, &mut seed, &mut text);
        let from_text = compile_str(&text, &CompileContext::load("project")).unwrap().workflow_hash;
        prop_assert_eq!(from_text, hash(&v));
    }

    /// lock: L-COMPILE-FEATURE-ORDER, L-AUTHOR-FEATURE-CONFIG
    #[test]
    fn the_hash_ignores_feature_list_order_duplicates_and_default_spelling(v in workflow(), seed in any::<u64>()) {
        let expected = hash(&v);
        let mut shuffled = v.clone();
        let features = shuffled["features"].as_array_mut().unwrap();
        let mut seed = seed | 1;
        for i in (1..features.len()).rev() {
            features.swap(i, (next(&mut seed) % (i as u64 + 1)) as usize);
        }
        if let Some(first) = features.first().cloned() {
            features.push(first);
        }
        // A toggle written as `{id}` means the same as the bare id.
        for f in features.iter_mut() {
            if f == &json!("wr.features.output_contracts") {
                *f = json!({"id": "wr.features.output_contracts", "config": {"enforce": "block_in_blocking_modes_gap_in_never_stop"}});
            }
        }
        prop_assert_eq!(hash(&shuffled), expected);
    }

    /// lock: L-HASH-INPUTS, L-CAP-REQUIREMENTS, L-PREF-RECOMMENDATIONS, L-AUTHOR-REFS-EMBEDDED
    #[test]
    fn the_hash_changes_when_a_hashed_field_changes(v in workflow(), which in 0usize..9, index in any::<Index>()) {
        let before = hash(&v);
        let mut changed = v.clone();
        let field = mutate(&mut changed, which, index);
        prop_assert_ne!(hash(&changed), before, "changing {} kept the hash", field);
    }

    /// lock: L-HASH-EXCLUSIONS
    #[test]
    fn the_hash_ignores_where_and_how_the_source_is_stored(v in workflow()) {
        let pretty = serde_json::to_string_pretty(&v).unwrap();
        let compact = serde_json::to_string(&v).unwrap();
        let user = compile_str(&pretty, &CompileContext::load("user")).unwrap().workflow_hash;
        let project = compile_str(&compact, &CompileContext::load("project")).unwrap().workflow_hash;
        let repo = compile_str(&compact, &CompileContext::load("repo")).unwrap().workflow_hash;
        prop_assert_eq!(&user, &project);
        prop_assert_eq!(&project, &repo);
    }
}

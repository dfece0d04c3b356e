//! Every fuzz target's seed corpus (`fixtures/fuzz/<target>/`) and every input a fuzz run ever
//! found a failure with (`fixtures/fuzz/<target>/regressions/`, kept with the finding's name)
//! run through the same entry points as `fuzz/`, so a fuzz finding stays fixed without cargo-fuzz.
//!
//! Structured targets read their bytes the way libFuzzer hands them over: through
//! `arbitrary::Unstructured`. `WORKRAIL_BLESS=1` rewrites the generated seeds (`signed-*`,
//! `wrapped-*`, the workflows, `seed-*`) and deletes nothing: the `found-*` inputs, kept from
//! fuzz runs for the coverage they add (harness/README.md, "Fuzzing"), stay.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use arbitrary::{Arbitrary, Unstructured};
use workrail_harness::fuzzing;

fn corpus(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/fuzz")
        .join(target)
}

/// Every file of the target's corpus and regressions, sorted.
fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for dir in [corpus(target), corpus(target).join("regressions")] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_file() {
                out.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn structured<T: for<'a> Arbitrary<'a>>(bytes: &[u8]) -> Option<T> {
    T::arbitrary_take_rest(Unstructured::new(bytes)).ok()
}

fn run_all(target: &str, check: impl Fn(&[u8])) {
    let inputs = inputs(target);
    assert!(
        !inputs.is_empty(),
        "no seed corpus for {target}: run with WORKRAIL_BLESS=1"
    );
    for (path, bytes) in inputs {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&bytes)));
        assert!(outcome.is_ok(), "{target}: {} fails", path.display());
    }
}

#[test]
fn token_decode_corpus() {
    run_all("token_decode", fuzzing::token_decode);
}

#[test]
fn workflow_compile_corpus() {
    run_all("workflow_compile", fuzzing::workflow_compile);
}

#[test]
fn session_load_corpus() {
    run_all("session_load", |b| {
        if let Some(input) = structured(b) {
            fuzzing::session_load(&input);
        }
    });
}

#[test]
fn mcp_request_corpus() {
    run_all("mcp_request", |b| {
        if let Some(input) = structured(b) {
            fuzzing::mcp_request(&input);
        }
    });
}

#[test]
fn crash_sequence_corpus() {
    run_all("crash_sequence", |b| {
        if let Some(input) = structured(b) {
            fuzzing::crash_sequence(&input);
        }
    });
}

/// The crash points the fuzz target rebuilds by replaying one recorded run are the ones the crash
/// harness reaches by running the command once per point, and both find every corpus input fine.
#[test]
fn crash_sequence_replay_matches_the_crash_harness() {
    let mut crashed = 0;
    for (path, bytes) in inputs("crash_sequence") {
        let Some(input) = structured::<fuzzing::CrashInput>(&bytes) else {
            continue;
        };
        let (replayed, reference) = fuzzing::crash_sequence_points(&input)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(replayed, reference, "{}: crash points", path.display());
        crashed += u64::from(replayed > 0);
    }
    assert!(crashed > 0, "no corpus input crashes anything");
}

/// The child choices [`fuzzing::JsonEdit`] takes to reach `steps` (object keys and array
/// indices) in `root`.
fn json_path(root: &serde_json::Value, steps: &[&str]) -> Vec<u8> {
    let mut here = root;
    let mut path = Vec::new();
    for step in steps {
        let (choice, next) = match here {
            serde_json::Value::Object(map) => {
                let i = map.keys().position(|k| k == step).unwrap();
                (i, &map[*step])
            }
            serde_json::Value::Array(items) => {
                let i: usize = step.parse().unwrap();
                (i, &items[i])
            }
            other => panic!("{step} inside {other}"),
        };
        path.push(u8::try_from(choice).unwrap());
        here = next;
    }
    path
}

/// An edited bundle stops at the integrity check; re-attested, the same edit reaches the
/// structural checks behind it (`check_manifest`, `check_events`), whose refusals write nothing.
#[test]
fn a_reattested_bundle_reaches_the_structural_checks() {
    use fuzzing::{BundleInput, Json, JsonEdit};
    use workrail_spec::error::ErrorCode;
    let root = fuzzing::base_bundle(0);
    let import = |edits: Vec<JsonEdit>| {
        fuzzing::bundle_import_outcome(&BundleInput {
            base: 0,
            edits,
            same_dir: false,
            allow_salvage: false,
        })
    };
    assert_eq!(import(vec![JsonEdit::Reattest]), Ok(()));
    let node = root["session"]["events"][2]["scope"]["nodeId"]
        .as_str()
        .unwrap()
        .to_owned();
    let cases = [
        // A pin names another event than the node_created of its snapshot.
        (
            json_path(&root, &["session", "manifest", "1", "eventIndex"]),
            Json::Int(3),
            ErrorCode::BundleManifestOrderInvalid,
        ),
        // The root node names itself as its parent, which no earlier event created.
        (
            json_path(&root, &["session", "events", "2", "data", "parentNodeId"]),
            Json::Str(node),
            ErrorCode::BundleEventOrderInvalid,
        ),
    ];
    for (path, value, code) in cases {
        let set = JsonEdit::Set { path, value };
        assert_eq!(
            import(vec![set.clone()]),
            Err(ErrorCode::BundleIntegrityFailed)
        );
        assert_eq!(import(vec![set, JsonEdit::Reattest]), Err(code));
    }
}

#[test]
fn bundle_import_corpus() {
    run_all("bundle_import", |b| {
        if let Some(input) = structured(b) {
            fuzzing::bundle_import(&input);
        }
    });
}

/// `WORKRAIL_BLESS=1`: writes the seed corpora (real tokens, the workflows in the repository,
/// and pseudo-random byte strings for the structured targets).
#[test]
fn bless_seed_corpora() {
    if std::env::var("WORKRAIL_BLESS").ok().as_deref() != Some("1") {
        return;
    }
    let write = |target: &str, name: &str, bytes: &[u8]| {
        let dir = corpus(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), bytes).unwrap();
    };
    for (i, token) in fuzzing::seed_tokens().iter().enumerate() {
        write("token_decode", &format!("signed-{i}"), token.as_bytes());
        write(
            "token_decode",
            &format!("wrapped-{i}"),
            format!("`{token}`\n").as_bytes(),
        );
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    write(
        "workflow_compile",
        "harness.json",
        workrail_harness::fixture::WORKFLOW_JSON.as_bytes(),
    );
    for dir in ["impl/workflows", "fixtures/workflows"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".json") && !name.ends_with(".compiled.json") {
                write(
                    "workflow_compile",
                    &name,
                    &std::fs::read(entry.path()).unwrap(),
                );
            }
        }
    }
    // xorshift64*: deterministic bytes for the structured targets.
    let mut state: u64 = 0x5eed_5eed_5eed_5eed;
    let mut bytes = |n: usize| -> Vec<u8> {
        (0..n)
            .map(|_| {
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
            })
            .collect()
    };
    for target in [
        "session_load",
        "mcp_request",
        "crash_sequence",
        "bundle_import",
    ] {
        for (i, n) in [48usize, 160, 512, 1500].iter().enumerate() {
            write(target, &format!("seed-{i}"), &bytes(*n));
        }
    }
}

//! Golden compiled snapshots: every `fixtures/workflows/<name>.source.json` compiles to exactly
//! the committed `<name>.compiled.json` (pretty, canonical key order) and `<name>.hash`, and the
//! bundled workflows' fixture sources are the embedded files. Any change to compiled output or
//! to a hash, intended or not, shows up here as a diff.
//!
//! Regenerate with: `WORKRAIL_BLESS=1 cargo test -p workrail --test suite compiler_golden::`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use workrail::compiler::{CompileContext, compile_str};
use workrail::sources::bundled::BUNDLED;
use workrail_spec::jcs::to_canonical_string;

const BLESS_HINT: &str =
    "regenerate with: WORKRAIL_BLESS=1 cargo test -p workrail --test suite compiler_golden::";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/workflows")
}

fn blessing() -> bool {
    std::env::var_os("WORKRAIL_BLESS").is_some_and(|v| v == "1")
}

fn check(path: &Path, expected: &str, problems: &mut Vec<String>) {
    let actual = fs::read_to_string(path).unwrap_or_default();
    if actual == expected {
        return;
    }
    if blessing() {
        fs::write(path, expected).unwrap();
        return;
    }
    let diff = similar::TextDiff::from_lines(actual.as_str(), expected)
        .unified_diff()
        .context_radius(2)
        .header("committed", "compiled now")
        .to_string();
    let shown: String = diff.lines().take(40).collect::<Vec<_>>().join("\n");
    problems.push(format!("{} drifted:\n{shown}", path.display()));
}

/// Pretty JSON with keys in canonical (JCS) order and a trailing newline.
fn pretty_canonical(value: &Value) -> String {
    let canonical: Value = serde_json::from_str(&to_canonical_string(value).unwrap()).unwrap();
    let mut text = serde_json::to_string_pretty(&canonical).unwrap();
    text.push('\n');
    text
}

/// lock: L-GEN-VERIFIER, L-HASH-WORKFLOW
#[test]
fn bundled_fixture_sources_are_the_embedded_workflows() {
    let mut problems = Vec::new();
    fs::create_dir_all(fixtures()).unwrap();
    for (file, text) in BUNDLED {
        let name = file.trim_end_matches(".json");
        check(
            &fixtures().join(format!("{name}.source.json")),
            text,
            &mut problems,
        );
    }
    assert!(
        problems.is_empty(),
        "{}\n\n{BLESS_HINT}",
        problems.join("\n\n")
    );
}

/// lock: L-HASH-WORKFLOW, L-HASH-SINGLE-JCS, L-COMPILE-PURE, L-GEN-DETERMINISTIC
#[test]
fn every_fixture_compiles_to_its_committed_snapshot_and_hash() {
    let mut problems = Vec::new();
    let mut names = Vec::new();
    let mut entries: Vec<PathBuf> = fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in &entries {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let Some(name) = file.strip_suffix(".source.json") else {
            continue;
        };
        names.push(name.to_owned());
        let text = fs::read_to_string(path).unwrap();
        let ctx = if name.starts_with("wr.") {
            CompileContext::bundled()
        } else {
            CompileContext::load("project")
        };
        let compiled =
            compile_str(&text, &ctx).unwrap_or_else(|e| panic!("{file} does not compile:\n{e}"));
        let value = compiled.snapshot.to_value().unwrap();
        check(
            &fixtures().join(format!("{name}.compiled.json")),
            &pretty_canonical(&value),
            &mut problems,
        );
        check(
            &fixtures().join(format!("{name}.hash")),
            &format!("{}\n", compiled.workflow_hash),
            &mut problems,
        );
    }
    for expected in [
        "wr.bug_investigation",
        "wr.coding_task",
        "wr.mr_review",
        "nested_loops",
        "template_feature",
        "refs",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "missing fixture {expected}"
        );
    }
    // Outputs without a source are stale.
    for path in &entries {
        let file = path.file_name().unwrap().to_string_lossy().into_owned();
        let stem = file
            .strip_suffix(".compiled.json")
            .or_else(|| file.strip_suffix(".hash"));
        if let Some(stem) = stem
            && !names.iter().any(|n| n == stem)
        {
            problems.push(format!("{} has no source fixture", path.display()));
        }
    }
    assert!(
        problems.is_empty(),
        "{}\n\n{BLESS_HINT}",
        problems.join("\n\n")
    );
}

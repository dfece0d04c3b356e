//! `workrail validate --fix`, `--strict` and `workrail migrate`, run as a real process over
//! workflows of the WorkRail 3.x spelling.
//!
//! Guards against: `--fix` rewriting more of the file than its fixes (key order, formatting),
//! or reporting nothing; `--strict` letting warnings through; `migrate` losing a field,
//! writing a workflow that no longer compiles, or not saying what has no v2 spelling; and
//! `validate` not finding the routines the configured workflow sources hold.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/workflows/language")
}

/// A `workrail` command isolated in `dir`, with `dir/routines` as a workflow source.
fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_workrail"))
        .env("WORKRAIL_DATA_DIR", dir.join("data"))
        .env("HOME", dir)
        .env("WORKRAIL_WORKFLOW_DIRS", dir.join("routines"))
        .env_remove("WORKRAIL_LOG")
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn copy(dir: &Path, name: &str) -> PathBuf {
    let to = dir.join(format!("{name}.json"));
    std::fs::copy(fixtures().join(format!("{name}.json")), &to).unwrap();
    to
}

/// decision: D149; lock: L-NS-WR-RESERVED, L-ID-AUTOFIX
#[test]
fn validate_fix_renames_a_reserved_id_in_the_file_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("flow.json");
    let original = "{\n  \"name\": \"Flow\",\n  \"id\": \"wr.my-flow\",\n  \"description\": \"A flow.\",\n  \"version\": \"1.0.0\",\n  \"steps\": [{\"id\": \"a\", \"title\": \"A\", \"prompt\": \"Do A.\"}]\n}\n";
    std::fs::write(&file, original).unwrap();
    let path = file.to_str().unwrap();
    let out = run(dir.path(), &["validate", path]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).contains("error[reserved_namespace] at /id"));
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        original,
        "validate alone writes nothing"
    );

    let out = run(dir.path(), &["validate", "--fix", path]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!(
            "fixed {path}: replace /id with \"project.my_flow\""
        )),
        "{err}"
    );
    assert!(err.contains("ok, workflow project.my_flow"), "{err}");
    // Only the id's bytes changed: key order and formatting are the author's.
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        original.replace("\"wr.my-flow\"", "\"project.my_flow\"")
    );
    // Nothing left to fix.
    let out = run(dir.path(), &["validate", "--fix", path]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stderr).contains("no auto-fix to apply"));
}

/// decision: D146
#[test]
fn strict_turns_warnings_into_errors() {
    let dir = tempfile::tempdir().unwrap();
    let file = copy(dir.path(), "create_your_own");
    let path = file.to_str().unwrap();
    let out = run(dir.path(), &["validate", path]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(err.contains("warning[legacy_workflow_id] at /id"), "{err}");
    assert!(err.contains("warning[v1_field] at /version"), "{err}");

    let out = run(dir.path(), &["validate", "--strict", path]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("warnings are errors (--strict), 2 problems"),
        "{stdout}"
    );
    assert!(stdout.contains("error[v1_field] at /version"), "{stdout}");
    assert!(!stdout.contains("sha256:"), "{stdout}");
}

/// decision: D149
#[test]
fn validate_says_whether_a_file_migrates_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean.json");
    std::fs::write(
        &clean,
        json!({
            "id": "project.handover",
            "name": "Hand-over",
            "description": "Writes the hand-over artifact.",
            "recommendedPreferences": {"recommendedRiskPolicy": "conservative"},
            "steps": [{"id": "hand", "title": "Hand over", "prompt": "Hand over.", "outputContract": {"contractRef": "wr.contracts.coding_handoff"}}]
        })
        .to_string(),
    )
    .unwrap();
    let out = run(dir.path(), &["validate", clean.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let err = text(&out.stderr);
    assert!(err.contains("migration: migrates cleanly"), "{err}");
    assert!(err.contains("rewrites 2 field(s)"), "{err}");

    let partial = copy(dir.path(), "content");
    let out = run(dir.path(), &["validate", partial.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert!(
        err.contains("would rewrite 3 field(s); 3 have no v2 spelling and stay as written: /steps/0/guidance, /steps/0/hasValidation, /version"),
        "{err}"
    );
}

/// decision: D149
#[test]
fn migrate_writes_the_v2_spelling_and_lists_what_has_none() {
    let dir = tempfile::tempdir().unwrap();
    let file = copy(dir.path(), "content");
    let path = file.to_str().unwrap();
    let before: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();

    // --dry-run prints the result and writes nothing.
    let out = run(dir.path(), &["migrate", "--dry-run", path]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let printed: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&std::fs::read_to_string(&file).unwrap()).unwrap(),
        before
    );

    let out = run(dir.path(), &["migrate", path]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let report = text(&out.stdout);
    for line in [
        "changed /recommendedPreferences: `recommendedPreferences` -> `recommendations`",
        "changed /steps/1/outputContract: `outputContract.contractRef` -> `output.contractRef`",
        "changed /steps/2/id: `id` -> `loopId`",
        "no v2 spelling /steps/0/guidance:",
        "no v2 spelling /steps/0/hasValidation:",
        "no v2 spelling /version:",
        "3 change(s) written",
    ] {
        assert!(report.contains(line), "{line}\n{report}");
    }
    let after: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(after, printed);
    assert_eq!(after["recommendations"], before["recommendedPreferences"]);
    assert!(after.get("recommendedPreferences").is_none());
    assert_eq!(
        after["steps"][1]["output"],
        json!({"contractRef": "wr.contracts.coding_handoff"})
    );
    assert_eq!(after["steps"][2]["loopId"], json!("polish"));
    // Nothing else changed.
    for key in [
        "version",
        "metaGuidance",
        "references",
        "metricsProfile",
        "about",
    ] {
        assert_eq!(after[key], before[key], "{key}");
    }
    assert_eq!(after["steps"][0], before["steps"][0]);
    // The migrated file compiles to the same workflow, minus the rewritten warnings.
    let out = run(dir.path(), &["validate", path]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stderr).matches("warning[v1_field]").count(), 3);
}

/// decision: D147, D149
#[test]
fn migrate_keeps_a_legacy_id_that_its_unknown_fields_need() {
    let dir = tempfile::tempdir().unwrap();
    let file = copy(dir.path(), "legacy_fields");
    let original = std::fs::read_to_string(&file).unwrap();
    let out = run(dir.path(), &["migrate", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let report = text(&out.stdout);
    assert!(
        report.contains("no v2 spelling /id: the legacy id stays"),
        "{report}"
    );
    assert!(report.contains("no v2 spelling /tips:"), "{report}");
    assert!(report.contains("nothing to rewrite"), "{report}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), original);

    // Without such fields the id is namespaced.
    let file = copy(dir.path(), "create_your_own");
    let out = run(dir.path(), &["migrate", file.to_str().unwrap()]);
    assert!(
        text(&out.stdout)
            .contains("changed /id: id `my-pairing-checklist` -> `project.my_pairing_checklist`"),
        "{}",
        text(&out.stdout)
    );
    let after: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(after["id"], json!("project.my_pairing_checklist"));
}

/// decision: D145
#[test]
fn validate_expands_routines_from_the_configured_workflow_sources() {
    let dir = tempfile::tempdir().unwrap();
    let caller = copy(dir.path(), "routine_caller");
    let out = run(dir.path(), &["validate", caller.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stdout).contains("error[unknown_template] at /steps/1/templateCall/templateId"),
        "{}",
        text(&out.stdout)
    );
    std::fs::create_dir_all(dir.path().join("routines")).unwrap();
    std::fs::copy(
        fixtures().join("routine-checklist.json"),
        dir.path().join("routines/routine-checklist.json"),
    )
    .unwrap();
    let out = run(dir.path(), &["validate", caller.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let golden = std::fs::read_to_string(fixtures().join("routine_caller.hash")).unwrap();
    assert_eq!(text(&out.stdout).trim(), golden.trim());
}

//! Guards the published fixtures: every scenario parses, cites only lock ids that exist in
//! `spec/LOCKS.md` (and only ones a step checks), uses only fixture workflows that exist and
//! compile, and is documented in `conformance/README.md`; surface files name existing scenarios
//! and give every disabled scenario a reason.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use serde_json::Value;
use workrail_conformance::scenario::{self, PROFILES};
use workrail_conformance::surface::Surface;

mod common;

use common::workspace;

fn lock_catalog() -> BTreeSet<String> {
    std::fs::read_to_string(workspace().join("spec/LOCKS.md"))
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(id, _)| id.to_owned()))
        .filter(|id| id.starts_with("L-"))
        .collect()
}

fn scenarios() -> Vec<scenario::Scenario> {
    scenario::load_dir(&workspace().join("fixtures/conformance/scenarios")).unwrap()
}

#[test]
fn every_scenario_parses_and_cites_known_locks() {
    let known = lock_catalog();
    assert!(known.len() > 300, "spec/LOCKS.md not found or not parsed");
    let all = scenarios();
    assert!(all.len() >= 25, "scenarios missing: {}", all.len());
    for s in &all {
        let file_stem = s.file.file_stem().unwrap().to_string_lossy();
        assert_eq!(
            file_stem,
            s.name,
            "{}: the file is named after the scenario",
            s.file.display()
        );
        assert!(PROFILES.contains(&s.profile.as_str()));
        assert!(!s.description.trim().is_empty(), "{}: description", s.name);
        for id in &s.lock_ids {
            assert!(known.contains(id), "{}: unknown lock id {id}", s.name);
        }
        for step in &s.steps {
            for id in step.step.locks() {
                assert!(
                    known.contains(id),
                    "{}: step cites unknown lock id {id}",
                    s.name
                );
            }
        }
    }
}

#[test]
fn the_brief_coverage_is_present() {
    let names: BTreeSet<String> = scenarios().into_iter().map(|s| s.name).collect();
    for required in [
        "tool_set",
        "start_advance_complete",
        "rehydrate_purity",
        "replay_identity",
        "fork_from_old_state",
        "token_tampering",
        "token_scope_mismatch",
        "token_unsupported_version",
        "context_budget",
        "notes_truncation",
        "blocked_in_blocking_modes",
        "never_stop_never_blocks",
        "loop_limit",
        "checkpoint_idempotency",
        "error_envelope",
        "resume_ranking",
        "export_import",
    ] {
        assert!(names.contains(required), "scenario {required} is missing");
    }
}

#[test]
fn scenarios_use_existing_fixture_workflows() {
    let dir = workspace().join("fixtures/conformance/workflows");
    let mut ids = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let id = doc["id"].as_str().unwrap().to_owned();
        assert!(
            id.starts_with("conformance."),
            "{}: fixture workflows use the conformance. namespace",
            path.display()
        );
        ids.insert(id);
    }
    for s in scenarios() {
        // Workflows a scenario writes itself (`writeWorkflow`) are its own fixtures.
        let written: BTreeSet<String> = s
            .steps
            .iter()
            .filter_map(|n| match &n.step {
                scenario::Step::WriteWorkflow { workflow, .. } => {
                    workflow["id"].as_str().map(str::to_owned)
                }
                _ => None,
            })
            .collect();
        for id in &written {
            assert!(
                id.starts_with("conformance.") && !ids.contains(id),
                "{}: a written workflow uses the conformance. namespace and no fixture's id: {id}",
                s.name
            );
        }
        let text = std::fs::read_to_string(&s.file).unwrap();
        for (i, _) in text.match_indices("\"workflowId\": \"conformance.") {
            let rest = &text[i + "\"workflowId\": \"".len()..];
            let id = &rest[..rest.find('"').unwrap()];
            assert!(
                ids.contains(id) || written.contains(id) || id == "conformance.does_not_exist",
                "{}: unknown fixture workflow {id}",
                s.name
            );
        }
    }
}

#[test]
fn the_readme_documents_every_scenario_and_the_adapter_ops() {
    let readme = std::fs::read_to_string(workspace().join("conformance/README.md")).unwrap();
    for s in scenarios() {
        assert!(
            readme.contains(&format!("`{}`", s.name)),
            "README.md does not list {}",
            s.name
        );
    }
    for op in [
        "jcs",
        "sha256",
        "dedupe_key",
        "dedupe_key_valid",
        "step_instance_key",
        "format_step_instance_key",
        "truncate",
        "sort_blockers",
        "reason_mapping",
        "token_encode",
        "token_parse",
        "preferred_tip",
        "run_status",
        "resume_ranking",
    ] {
        assert!(
            readme.contains(&format!("`{op}`")),
            "README.md does not document op {op}"
        );
    }
}

#[test]
fn surface_files_disable_only_existing_scenarios_with_reasons() {
    let names: BTreeSet<String> = scenarios().into_iter().map(|s| s.name).collect();
    let known = lock_catalog();
    let dir = workspace().join("fixtures/conformance/servers");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        // Beside the surface files: directories of per-server fixture workflows.
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let surface = Surface::load(&path).unwrap();
        seen += 1;
        if let Some(dir) = &surface.workflows_dir {
            let files = std::fs::read_dir(dir)
                .unwrap_or_else(|e| {
                    panic!("{}: workflowsDir {}: {e}", path.display(), dir.display())
                })
                .count();
            assert!(
                files > 0,
                "{}: workflowsDir {} is empty",
                path.display(),
                dir.display()
            );
        }
        for (what, reason) in &surface.disabled {
            assert!(
                names.contains(what) || known.contains(what),
                "{}: disables unknown scenario or lock {what}",
                path.display()
            );
            assert!(
                reason.len() > 20,
                "{}: {what} needs a real reason",
                path.display()
            );
        }
        for p in &surface.profiles {
            assert!(
                PROFILES[1..].contains(&p.as_str()),
                "{}: unknown profile {p}",
                path.display()
            );
        }
    }
    assert!(seen >= 1);
}

/// The fixture workflows compile with the reference server (`workrail validate`), so a
/// scenario failure is never a broken fixture.
#[test]
fn fixture_workflows_compile() {
    let bin = common::server();
    for entry in std::fs::read_dir(workspace().join("fixtures/conformance/workflows")).unwrap() {
        let path = entry.unwrap().path();
        let out = std::process::Command::new(&bin)
            .arg("validate")
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let hash = String::from_utf8(out.stdout).unwrap();
        assert!(
            hash.trim().starts_with("sha256:"),
            "{}: {hash}",
            path.display()
        );
    }
}

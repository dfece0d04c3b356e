//! The Console's workflow data (locks §6 "Workflow editing", "Bundled namespace protections",
//! "Source vs compiled inspection + pinned drift warnings"), through the library and the CLI.
//!
//! Guards against: a save that writes text the compiler rejects, or rejects it without the
//! field-level pointers; an edit of a bundled `wr.*` workflow, or a refusal that does not name
//! the copy operation; a copy that lands outside the user namespace or does not compile; an
//! edit or a read that writes anything into the data directory (compiled and pinned snapshots
//! are derived, never edited); and a run's pinned snapshot shown without the drift warning
//! after its source changed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::console_support;

use console_support::fingerprint;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use serde_json::json;
use workrail::compiler::{CompileContext, compile_str};
use workrail::control::{
    copy_to_editable, list_workflows, pinned_for_run, save_source, show_workflow,
};
use workrail::protocol::{Workrail, WorkrailConfig};
use workrail::sources::{DriftStatus, SourceConfig};
use workrail_spec::closed::WorkflowSourceKind;
use workrail_spec::error::ErrorCode;
use workrail_spec::tools::StartWorkflowInput;

struct Place {
    _root: tempfile::TempDir,
    data: PathBuf,
    home: PathBuf,
    work: PathBuf,
    extra: PathBuf,
}

impl Place {
    fn new() -> Place {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        let place = Place {
            data: base.join("data"),
            home: base.join("home"),
            work: base.join("work"),
            extra: base.join("extra"),
            _root: root,
        };
        for dir in [
            place.home.join(".workrail/workflows"),
            place.work.join("workflows"),
            place.extra.clone(),
        ] {
            std::fs::create_dir_all(dir).unwrap();
        }
        place
    }

    fn sources(&self) -> SourceConfig {
        SourceConfig::new(Some(&self.home), &self.work, Some(self.extra.as_os_str()))
    }

    fn project_file(&self) -> PathBuf {
        self.work.join("workflows/flow.json")
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_workrail"))
            .args(args)
            .env("WORKRAIL_DATA_DIR", &self.data)
            .env("HOME", &self.home)
            .env("WORKRAIL_WORKFLOW_DIRS", &self.extra)
            .env_remove("USERPROFILE")
            .env_remove("WORKRAIL_FEATURES")
            .env_remove("WORKRAIL_LOG")
            .current_dir(&self.work)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

fn flow(second_prompt: &str) -> String {
    serde_json::to_string_pretty(&json!({
        "id": "project.flow",
        "name": "Flow",
        "description": "Two steps.",
        "steps": [
            {"id": "first", "title": "First", "prompt": "Do the first thing."},
            {"id": "second", "title": "Second", "prompt": second_prompt},
        ],
    }))
    .unwrap()
}

/// A project, an extra-dir and a user workflow beside the bundled ones.
fn populated() -> Place {
    let place = Place::new();
    std::fs::write(place.project_file(), flow("Do the second thing.")).unwrap();
    let other = |id: &str| {
        json!({
            "id": id,
            "name": "Other",
            "description": "One step.",
            "steps": [{"id": "only", "title": "Only", "prompt": "Do it."}],
        })
        .to_string()
    };
    std::fs::write(place.extra.join("extra.json"), other("user.extra")).unwrap();
    std::fs::write(
        place.home.join(".workrail/workflows/mine.json"),
        other("user.mine"),
    )
    .unwrap();
    place
}

/// Every workflow is listed with its source; bundled `wr.*` ones are read-only, the others
/// editable.
/// lock: L-CONSOLE-INSPECT, L-NS-WR-READ-ONLY
#[test]
fn workflows_are_listed_with_their_source_and_bundled_ones_are_read_only() {
    let place = populated();
    let list = list_workflows(&place.sources());
    let row = |id: &str| {
        list.workflows
            .iter()
            .find(|w| w.workflow_id.as_str() == id)
            .unwrap_or_else(|| panic!("{id} not listed: {list:?}"))
    };
    let bundled = row("wr.coding_task");
    assert_eq!(bundled.source_kind, WorkflowSourceKind::Bundled);
    assert!(!bundled.editable);
    let project = row("project.flow");
    assert_eq!(project.source_kind, WorkflowSourceKind::Project);
    assert_eq!(project.source_ref, "project/workflows/flow.json");
    assert!(project.editable);
    assert_eq!(row("user.extra").source_ref, "dir0/extra.json");
    assert_eq!(row("user.mine").source_ref, "user/mine.json");
    // The file on this machine beside the label-relative ref, for a person to open.
    let extra_file = place.extra.join("extra.json").display().to_string();
    assert_eq!(row("user.extra").path.as_deref(), Some(extra_file.as_str()));
    assert_eq!(bundled.path, None);
    assert!(list.problems.is_empty(), "{:?}", list.problems);
    let out = place.cli(&["workflows", "list"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.lines()
            .any(|l| l.starts_with("wr.coding_task") && l.contains("read-only")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("user.extra") && l.contains(&format!("(user, {extra_file})"))),
        "the list names the file, not `dir0/`: {text}"
    );
}

/// A workflow's source text and its current compiled snapshot with the `workflowHash` a run
/// would pin, through the library and `workrail workflows show`.
/// lock: L-CONSOLE-INSPECT
#[test]
fn show_gives_the_source_and_the_current_compiled_snapshot() {
    let place = populated();
    let detail = show_workflow(&place.sources(), "project.flow").unwrap();
    let text = std::fs::read_to_string(place.project_file()).unwrap();
    assert_eq!(detail.source_text, text);
    let compiled = compile_str(&text, &CompileContext::load("project")).unwrap();
    assert_eq!(detail.workflow_hash.as_ref(), Some(&compiled.workflow_hash));
    assert_eq!(detail.compiled.as_ref(), Some(&compiled.snapshot));
    let out = place.cli(&["workflows", "show", "project.flow"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim_end(),
        text.trim_end()
    );
    let out = place.cli(&["workflows", "show", "project.flow", "--compiled"]);
    assert_eq!(out.status.code(), Some(0));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown, serde_json::to_value(&compiled.snapshot).unwrap());
    assert!(String::from_utf8_lossy(&out.stderr).contains(&compiled.workflow_hash.to_string()));
    let missing = show_workflow(&place.sources(), "project.flo").unwrap_err();
    assert_eq!(missing.code, ErrorCode::WorkflowNotFound);
    assert!(
        missing.suggestion.contains("project.flow"),
        "{}",
        missing.suggestion
    );
}

/// A save is compiled first: rejected text comes back as the compiler's errors with their JSON
/// pointers and nothing is written; accepted text replaces the workflow's own file.
/// lock: L-CONSOLE-EDIT-SOURCE
#[test]
fn a_save_is_rejected_with_field_pointers_then_saved() {
    let place = populated();
    let file = place.project_file();
    let before = std::fs::read(&file).unwrap();
    let broken = flow("").replace("\"prompt\": \"\"", "\"prompt\": 7");
    let error = save_source(&place.sources(), "project.flow", &broken).unwrap_err();
    assert_eq!(error.code, ErrorCode::WorkflowInvalid);
    let details = error.details.clone().unwrap();
    let pointers: Vec<&str> = details["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["pointer"].as_str().unwrap())
        .collect();
    assert!(
        pointers.iter().any(|p| p.starts_with("/steps/1")),
        "{pointers:?}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), before);
    // Through the CLI: the pointer is printed, exit 1, nothing written.
    let bad = place.work.join("bad.json");
    std::fs::write(&bad, &broken).unwrap();
    let out = place.cli(&["workflows", "save", "project.flow", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("at /steps/1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read(&file).unwrap(), before);
    // Another id is refused: a save edits this workflow's own file.
    let renamed = flow("x").replace("project.flow", "project.other");
    let error = save_source(&place.sources(), "project.flow", &renamed).unwrap_err();
    assert_eq!(error.code, ErrorCode::ValidationError);
    assert_eq!(std::fs::read(&file).unwrap(), before);
    // Accepted.
    let fixed = flow("Do the second thing, carefully.");
    let saved = save_source(&place.sources(), "project.flow", &fixed).unwrap();
    assert_eq!(std::fs::read_to_string(&file).unwrap(), fixed);
    assert_eq!(saved.source_ref, "project/workflows/flow.json");
    let compiled = compile_str(&fixed, &CompileContext::load("project")).unwrap();
    assert_eq!(saved.workflow_hash, compiled.workflow_hash);
    let leftovers: Vec<_> = std::fs::read_dir(file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "no temp file is left: {leftovers:?}");
}

/// `wr.*` is read-only: a save is refused naming the copy operation; the copy gets a `user.`
/// id in the user directory, compiles, and is then editable.
/// lock: L-NS-WR-READ-ONLY, L-CONSOLE-EDIT-SOURCE
#[test]
fn bundled_workflows_are_refused_and_copied_to_an_editable_namespace() {
    let place = populated();
    let bundled = show_workflow(&place.sources(), "wr.coding_task").unwrap();
    assert!(!bundled.editable);
    let refused =
        save_source(&place.sources(), "wr.coding_task", &bundled.source_text).unwrap_err();
    assert_eq!(refused.code, ErrorCode::ValidationError);
    assert!(
        refused.suggestion.contains("workflows copy wr.coding_task"),
        "{}",
        refused.suggestion
    );
    assert_eq!(refused.details.as_ref().unwrap()["operation"], "copy");
    let out = place.cli(&["workflows", "save", "wr.coding_task", "-"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("copy"));
    let copy = copy_to_editable(&place.sources(), "wr.coding_task", None).unwrap();
    assert_eq!(copy.workflow_id.as_str(), "user.coding_task");
    assert_eq!(copy.source_kind, WorkflowSourceKind::User);
    let path = place.home.join(".workrail/workflows/coding_task.json");
    assert_eq!(Path::new(&copy.path), path);
    let list = list_workflows(&place.sources());
    let row = list
        .workflows
        .iter()
        .find(|w| w.workflow_id.as_str() == "user.coding_task")
        .unwrap();
    assert!(row.editable);
    assert_eq!(row.workflow_hash, copy.workflow_hash);
    // A copy never replaces an existing file or id, nor leaves the user namespace.
    let again = copy_to_editable(&place.sources(), "wr.coding_task", None).unwrap_err();
    assert_eq!(again.code, ErrorCode::ValidationError);
    let outside =
        copy_to_editable(&place.sources(), "wr.coding_task", Some("wr.mine")).unwrap_err();
    assert_eq!(outside.code, ErrorCode::ValidationError);
    // The copy is an ordinary editable source.
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = text.replacen("\"name\": \"", "\"name\": \"My ", 1);
    save_source(&place.sources(), "user.coding_task", &edited).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), edited);
}

/// A run's pinned snapshot is read by its `workflowHash`; after its source is edited, the
/// same view carries the pinned-drift warning as structured data. Editing and reading write
/// nothing into the data directory: no compiled snapshot, no pin.
/// lock: L-CONSOLE-INSPECT, L-CONSOLE-EDIT-SOURCE
#[test]
fn a_pinned_run_shows_its_snapshot_and_a_drift_warning_after_an_edit() {
    let place = populated();
    let wr = Workrail::open(WorkrailConfig {
        data_dir: place.data.clone(),
        sources: place.sources(),
        entropy: Arc::new(workrail::entropy::OsEntropy),
        features: Default::default(),
        workspace: Arc::new(workrail::workspace::NoWorkspace),
    })
    .unwrap();
    let started = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: "project.flow".into(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    let run_id = started.session.run_id.to_string();
    let pinned_hash = show_workflow(&place.sources(), "project.flow")
        .unwrap()
        .workflow_hash
        .unwrap();
    let before = fingerprint(&place.data);
    let view = pinned_for_run(&place.data, &place.sources(), &run_id, None).unwrap();
    assert_eq!(view.workflow_hash, pinned_hash);
    assert_eq!(view.workflow_id.as_str(), "project.flow");
    assert!(view.drift.is_none() && view.warning.is_none());
    let saved = save_source(
        &place.sources(),
        "project.flow",
        &flow("Do the second thing differently."),
    )
    .unwrap();
    assert_ne!(saved.workflow_hash, pinned_hash);
    let view = pinned_for_run(
        &place.data,
        &place.sources(),
        &run_id,
        Some(started.session.session_id.as_str()),
    )
    .unwrap();
    assert_eq!(view.workflow_hash, pinned_hash);
    let drift = view.drift.clone().unwrap();
    assert_eq!(drift.pinned_hash, pinned_hash);
    assert_eq!(
        drift.status,
        DriftStatus::Changed {
            current_hash: saved.workflow_hash.clone()
        }
    );
    assert_eq!(view.warning.as_ref().unwrap().code, "pinned_workflow_drift");
    // The pinned snapshot still says what the run started with.
    let pinned_text = serde_json::to_string(&view.pinned).unwrap();
    assert!(pinned_text.contains("Do the second thing.") && !pinned_text.contains("differently"));
    // Through the CLI: the pinned snapshot on stdout, the warning on stderr.
    let out = place.cli(&["workflows", "show", "project.flow", "--run", &run_id]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("pinned_workflow_drift"));
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown, serde_json::to_value(&view.pinned).unwrap());
    let out = place.cli(&[
        "workflows",
        "show",
        "project.flow",
        "--run",
        &run_id,
        "--json",
    ]);
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(shown["drift"]["status"]["kind"], "changed");
    list_workflows(&place.sources());
    show_workflow(&place.sources(), "project.flow").unwrap();
    copy_to_editable(&place.sources(), "project.flow", Some("user.flow_copy")).unwrap();
    assert_eq!(
        fingerprint(&place.data),
        before,
        "the data directory is untouched"
    );
}

/// Saving keeps the authoring rules: a legacy (dot-free) id is refused with the compiler's
/// error and the file stays as it was, and a legacy alias of a bundled workflow is as
/// read-only as its `wr.*` id.
/// lock: L-NS-LEGACY-CREATE-REJECTED, L-NS-WR-READ-ONLY
#[test]
fn saving_refuses_legacy_ids_and_bundled_aliases() {
    let place = populated();
    let file = place.home.join(".workrail/workflows/old.json");
    let text = json!({
        "id": "old-flow",
        "name": "Old",
        "description": "A legacy id.",
        "steps": [{"id": "only", "title": "Only", "prompt": "Do it."}],
    })
    .to_string();
    std::fs::write(&file, &text).unwrap();
    let listed = list_workflows(&place.sources());
    let row = listed
        .workflows
        .iter()
        .find(|w| w.workflow_id.as_str() == "old-flow")
        .expect("legacy ids still load");
    assert_eq!(row.suggested_id.as_ref().unwrap().as_str(), "user.old_flow");
    let refused = save_source(&place.sources(), "old-flow", &text).unwrap_err();
    assert_eq!(refused.code, ErrorCode::WorkflowInvalid, "{refused:?}");
    let pointers = refused.details.unwrap()["errors"].to_string();
    assert!(pointers.contains("\"/id\""), "{pointers}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    let alias = save_source(&place.sources(), "coding-task-workflow", "{}").unwrap_err();
    assert!(alias.message.contains("wr.coding_task") && alias.suggestion.contains("copy"));
}

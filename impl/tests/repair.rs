//! `workrail repair` as a real process over a real data directory (D51): a session whose last
//! close+pins write was torn after the close line (what only a power cut leaves now) is
//! corrupt until repaired, then healthy and continuable with its old tokens; any other damage
//! is refused with what is missing named, and nothing is written.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use workrail::entropy::OsEntropy;
use workrail::protocol::{Workrail, WorkrailConfig};
use workrail::sources::SourceConfig;
use workrail_spec::error::ErrorCode;
use workrail_spec::tools::{
    ContinueWorkflowInput, ExecutionOutput, OutputInput, StartWorkflowInput,
};

fn workrail(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_workrail"))
        .env("WORKRAIL_DATA_DIR", dir)
        .env("HOME", dir)
        .env_remove("WORKRAIL_WORKFLOW_DIRS")
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

fn open(dir: &Path) -> Workrail {
    Workrail::open(WorkrailConfig {
        data_dir: dir.to_path_buf(),
        sources: SourceConfig::new(Some(dir), dir, None),
        entropy: Arc::new(OsEntropy),
        features: Default::default(),
        workspace: Arc::new(workrail::workspace::NoWorkspace),
    })
    .unwrap()
}

fn ack(out: &ExecutionOutput, notes: &str) -> ContinueWorkflowInput {
    ContinueWorkflowInput {
        state_token: Some(out.state_token.clone()),
        ack_token: out.ack_token.clone(),
        context: None,
        output: Some(OutputInput {
            notes_markdown: Some(notes.into()),
            artifacts: vec![],
        }),
        preferences: vec![],
        preset: None,
    }
}

/// A session with one acknowledged step; returns its id, the manifest path and the latest
/// response.
fn session_in(dir: &Path) -> (String, PathBuf, ExecutionOutput) {
    let wr = open(dir);
    let out = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: "wr.coding_task".into(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    let next = wr
        .continue_workflow(ack(&out, "Understood the task."))
        .unwrap();
    let session = out.session.session_id.to_string();
    let manifest = dir.join("sessions").join(&session).join("manifest.jsonl");
    (session, manifest, next)
}

/// Tears the manifest's last write after its close line: drops its pin lines and leaves half
/// of the first one, as a power cut in the middle of the close+pins write would.
fn tear_last_pins(manifest: &Path) -> usize {
    let text = std::fs::read_to_string(manifest).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let last_close = lines
        .iter()
        .rposition(|l| l.contains("\"segment_closed\""))
        .unwrap();
    let pins = lines.len() - last_close - 1;
    assert!(pins > 0, "the last write pinned a snapshot");
    let mut torn: String = lines[..=last_close]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    let first_pin = lines[last_close + 1];
    torn.push_str(&first_pin[..first_pin.len() / 2]);
    std::fs::write(manifest, torn).unwrap();
    pins
}

/// lock: L-STORE-CRASH-BEFORE-PINS, L-HEALTH-EXECUTION-GATE
#[test]
fn repair_restores_pins_a_torn_write_dropped_and_the_session_continues() {
    let dir = tempfile::tempdir().unwrap();
    let (session, manifest, latest) = session_in(dir.path());
    let pins = tear_last_pins(&manifest);

    // Load never repairs: the session fails fast until someone runs repair.
    let wr = open(dir.path());
    let refused = wr.continue_workflow(ack(&latest, "Planned.")).unwrap_err();
    assert_eq!(refused.code, ErrorCode::SessionCorrupt, "{refused:?}");
    drop(wr);

    let repaired = workrail(dir.path(), &["repair", &session]);
    let stdout = text(&repaired.stdout);
    assert_eq!(
        repaired.status.code(),
        Some(0),
        "{}",
        text(&repaired.stderr)
    );
    assert!(
        stdout.contains(&format!("Session {session} repaired")),
        "{stdout}"
    );
    assert_eq!(stdout.matches("  pinned sha256:").count(), pins, "{stdout}");
    assert!(
        stdout.contains("torn"),
        "the torn line it cut is named: {stdout}"
    );

    // Healthy again, and the old tokens carry on.
    let wr = open(dir.path());
    let next = wr.continue_workflow(ack(&latest, "Planned.")).unwrap();
    assert!(next.ack_token.is_some() || next.is_complete);
    drop(wr);

    // Running it again is harmless.
    let again = workrail(dir.path(), &["repair", &session]);
    assert_eq!(again.status.code(), Some(0));
    assert!(
        text(&again.stdout).contains("nothing to repair"),
        "{}",
        text(&again.stdout)
    );
}

/// lock: L-STORE-CRASH-BEFORE-PINS
#[test]
fn repair_refuses_when_a_snapshot_to_pin_is_gone_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (session, manifest, _) = session_in(dir.path());
    tear_last_pins(&manifest);
    // The snapshot the missing pin names is gone from the CAS.
    let text_now = std::fs::read_to_string(&manifest).unwrap();
    let before = text_now.clone();
    let snapshots: Vec<PathBuf> = std::fs::read_dir(dir.path().join("snapshots"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    for path in &snapshots {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if !text_now.contains(&name) {
            std::fs::remove_file(path).unwrap();
        }
    }
    let refused = workrail(dir.path(), &["repair", &session]);
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("was not repaired"), "{stderr}");
    assert!(
        stderr.contains("sha256:"),
        "the missing snapshot is named: {stderr}"
    );
    assert!(
        stderr.contains("--allow-salvage"),
        "the salvage path is named: {stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&manifest).unwrap(),
        before,
        "nothing written"
    );

    let unknown = workrail(dir.path(), &["repair", "not-a-session"]);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(text(&unknown.stderr).contains("not a session id"));
}

//! `workrail export`, `workrail import` and `workrail gc`, run as real processes over real data
//! directories.
//!
//! Guards against: export writing anything but the bundle to stdout (or nothing to `-o FILE`);
//! import not printing the session id and fresh per-run tokens, or those tokens not working;
//! refused bundles exiting 0, without the error code and suggestion, or writing anything;
//! `gc --dry-run` deleting; gc not reporting safe mode with exit code 1; the progress bar
//! leaking onto stderr when it is not a terminal.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;

use workrail::entropy::OsEntropy;
use workrail::protocol::{Workrail, WorkrailConfig};
use workrail::sources::SourceConfig;
use workrail_spec::tools::{ContinueWorkflowInput, OutputInput, StartWorkflowInput};

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

/// A session with one acknowledged step, made in-process on the real filesystem.
fn session_in(dir: &Path) -> String {
    let wr = open(dir);
    let out = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: "wr.coding_task".into(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    wr.continue_workflow(ContinueWorkflowInput {
        state_token: Some(out.state_token.clone()),
        ack_token: out.ack_token.clone(),
        context: None,
        output: Some(OutputInput {
            notes_markdown: Some("Understood the task.".into()),
            artifacts: vec![],
        }),
        preferences: vec![],
        preset: None,
    })
    .unwrap();
    out.session.session_id.to_string()
}

#[test]
fn export_import_and_continue_across_data_directories() {
    let source = tempfile::tempdir().unwrap();
    let target = tempfile::tempdir().unwrap();
    let session = session_in(source.path());

    let exported = workrail(source.path(), &["export", &session]);
    assert_eq!(
        exported.status.code(),
        Some(0),
        "{}",
        text(&exported.stderr)
    );
    let bundle = text(&exported.stdout);
    let value: serde_json::Value = serde_json::from_str(&bundle).unwrap();
    assert_eq!(value["bundleSchemaVersion"], 1);
    assert_eq!(value["session"]["sessionId"], session.as_str());
    assert!(
        text(&exported.stderr).is_empty(),
        "no progress bar without a terminal: {:?}",
        text(&exported.stderr)
    );
    let file = source.path().join("bundle.json");
    let to_file = workrail(
        source.path(),
        &["export", &session, "-o", file.to_str().unwrap()],
    );
    assert_eq!(to_file.status.code(), Some(0));
    assert!(to_file.stdout.is_empty());
    let written = std::fs::read_to_string(&file).unwrap();
    let from_file: serde_json::Value = serde_json::from_str(&written).unwrap();
    assert_eq!(from_file["session"], value["session"]);
    // Both outputs are the bundle's canonical text (written part by part) and a newline.
    for out in [&bundle, &written] {
        let canonical = out.strip_suffix('\n').expect("a final newline");
        assert!(!canonical.contains('\n'));
        assert_eq!(
            canonical,
            workrail_spec::jcs::canonicalize_json_text(canonical).unwrap()
        );
    }

    let imported = workrail(target.path(), &["import", file.to_str().unwrap()]);
    assert_eq!(
        imported.status.code(),
        Some(0),
        "{}",
        text(&imported.stderr)
    );
    let stdout = text(&imported.stdout);
    assert!(
        stdout.starts_with(&format!("Imported session {session}")),
        "{stdout}"
    );
    let state_token = stdout
        .lines()
        .find_map(|l| l.strip_prefix("stateToken: "))
        .expect("a stateToken per run")
        .to_owned();
    let ack_token = stdout
        .lines()
        .find_map(|l| l.strip_prefix("ackToken: "))
        .expect("an ackToken per run")
        .to_owned();
    // The printed tokens work in the target data directory.
    let wr = open(target.path());
    let next = wr
        .continue_workflow(ContinueWorkflowInput {
            state_token: Some(state_token),
            ack_token: Some(ack_token),
            context: None,
            output: Some(OutputInput {
                notes_markdown: Some("Continued after import.".into()),
                artifacts: vec![],
            }),
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    assert_eq!(next.session.session_id.as_str(), session);
    drop(wr);

    // Importing again collides: a new session.
    let again = workrail(target.path(), &["import", file.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(0));
    assert!(text(&again.stdout).contains("imported as a new session"));
    assert!(text(&again.stderr).contains("warning[session_id_remapped]"));
}

#[test]
fn a_tampered_bundle_fails_with_its_code_and_writes_nothing() {
    let source = tempfile::tempdir().unwrap();
    let target = tempfile::tempdir().unwrap();
    let session = session_in(source.path());
    let bundle = text(&workrail(source.path(), &["export", &session]).stdout);
    let tampered = bundle.replacen("Understood the task.", "Misunderstood the task.", 1);
    assert_ne!(tampered, bundle);
    let file = target.path().join("tampered.json");
    std::fs::write(&file, tampered).unwrap();
    let out = workrail(target.path(), &["import", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("BUNDLE_INTEGRITY_FAILED"), "{stderr}");
    assert!(stderr.contains("suggestion:"), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(
        !target.path().join("sessions").exists()
            || std::fs::read_dir(target.path().join("sessions"))
                .unwrap()
                .next()
                .is_none()
    );
    assert!(!target.path().join("snapshots").exists());

    let missing = workrail(target.path(), &["export", "sess_doesnotexist"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing.stderr).contains("SESSION_NOT_FOUND"));
}

#[test]
fn gc_dry_run_reports_and_safe_mode_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let session = session_in(dir.path());
    let before: Vec<_> = walk(dir.path());

    let dry = workrail(dir.path(), &["gc", "--dry-run", "--ttl-days", "0"]);
    assert_eq!(dry.status.code(), Some(0), "{}", text(&dry.stderr));
    let stdout = text(&dry.stdout);
    assert!(stdout.contains("gc (dry run): ttl 0 days"), "{stdout}");
    assert!(stdout.contains(&format!("{session} expired")), "{stdout}");
    // The report says what the session holds: its runs' workflows, labels and status.
    let line = stdout.lines().find(|l| l.contains(&session)).unwrap();
    assert!(line.contains(" — ") && line.contains('"'), "{line}");
    assert!(
        stdout.contains("sessions that would be deleted: 1"),
        "{stdout}"
    );
    assert_eq!(
        walk(dir.path()),
        before,
        "a dry run changed the data directory"
    );

    let real = workrail(dir.path(), &["gc"]);
    assert_eq!(real.status.code(), Some(0), "{}", text(&real.stderr));
    assert!(text(&real.stdout).contains("sessions deleted: 0"));
    let config = std::fs::read_to_string(dir.path().join("config/retention.json")).unwrap();
    let config: serde_json::Value = serde_json::from_str(&config).unwrap();
    assert_eq!(config["ttlDays"], 60);

    // A damaged manifest: safe mode, exit 1, nothing deleted even with a zero TTL.
    let manifest = dir
        .path()
        .join("sessions")
        .join(&session)
        .join("manifest.jsonl");
    let mut bytes = std::fs::read(&manifest).unwrap();
    bytes.extend_from_slice(b"garbage\n");
    std::fs::write(&manifest, bytes).unwrap();
    let safe = workrail(dir.path(), &["gc", "--ttl-days", "0"]);
    assert_eq!(safe.status.code(), Some(1));
    let stderr = text(&safe.stderr);
    assert!(
        stderr.contains("warning[safe_mode_corrupt_session]"),
        "{stderr}"
    );
    assert!(stderr.contains(&session), "{stderr}");
    assert!(stderr.contains("safe mode"), "{stderr}");
    // It names the session that holds safe mode and how to clear it.
    assert!(
        stderr.contains("to clear:") && stderr.contains(&format!("workrail export {session}")),
        "{stderr}"
    );
    assert!(manifest.exists());
}

fn walk(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().display().to_string();
                out.push((rel, std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

fn workrail_with(dir: &Path, env: &[(&str, &str)], args: &[&str], stdin: Stdio) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_workrail"));
    command
        .env("WORKRAIL_DATA_DIR", dir)
        .env("HOME", dir)
        .env_remove("WORKRAIL_WORKFLOW_DIRS")
        .env_remove("WORKRAIL_LOG")
        .env_remove("WORKRAIL_BUNDLE_MAX_BYTES")
        .current_dir(dir)
        .args(args)
        .stdin(stdin);
    for (key, value) in env {
        command.env(key, value);
    }
    command.output().unwrap()
}

fn nothing_imported(dir: &Path) -> bool {
    !dir.join("sessions").exists()
        || std::fs::read_dir(dir.join("sessions"))
            .unwrap()
            .next()
            .is_none()
}

/// An import never reads more than its cap: an endless input ends with an error naming the cap,
/// an oversize file is refused before it is read, and a bundle under a raised cap imports.
#[test]
fn an_import_is_capped_and_an_endless_input_ends_with_an_error() {
    let source = tempfile::tempdir().unwrap();
    let target = tempfile::tempdir().unwrap();
    // `/dev/zero` never ends: the default cap stops it (256 MiB of zeroes, then an error).
    let endless = workrail_with(target.path(), &[], &["import", "/dev/zero"], Stdio::null());
    assert_eq!(endless.status.code(), Some(1));
    let stderr = text(&endless.stderr);
    assert!(
        stderr.contains("BUNDLE_INVALID_FORMAT")
            && stderr.contains("over the import cap of 268435456 bytes")
            && stderr.contains("WORKRAIL_BUNDLE_MAX_BYTES"),
        "{stderr}"
    );
    assert!(nothing_imported(target.path()));

    let session = session_in(source.path());
    let bundle = text(&workrail(source.path(), &["export", &session]).stdout);
    let file = target.path().join("bundle.json");
    std::fs::write(&file, &bundle).unwrap();
    let size = bundle.len().to_string();
    let small = (bundle.len() - 1).to_string();
    let refused = workrail_with(
        target.path(),
        &[("WORKRAIL_BUNDLE_MAX_BYTES", &small)],
        &["import", file.to_str().unwrap()],
        Stdio::null(),
    );
    assert_eq!(refused.status.code(), Some(1));
    let stderr = text(&refused.stderr);
    assert!(
        stderr.contains(&format!(
            "is {size} bytes, over the import cap of {small} bytes"
        )),
        "{stderr}"
    );
    assert!(nothing_imported(target.path()));
    // From stdin the size is unknown: "more than" the cap.
    let piped = workrail_with(
        target.path(),
        &[("WORKRAIL_BUNDLE_MAX_BYTES", &small)],
        &["import", "-"],
        Stdio::from(std::fs::File::open(&file).unwrap()),
    );
    assert!(
        text(&piped.stderr).contains(&format!("more than {small} bytes")),
        "{}",
        text(&piped.stderr)
    );
    let bad = workrail_with(
        target.path(),
        &[("WORKRAIL_BUNDLE_MAX_BYTES", "lots")],
        &["import", file.to_str().unwrap()],
        Stdio::null(),
    );
    assert!(
        text(&bad.stderr).contains("not a positive number of bytes"),
        "{}",
        text(&bad.stderr)
    );
    // At the cap exactly, it imports.
    let imported = workrail_with(
        target.path(),
        &[("WORKRAIL_BUNDLE_MAX_BYTES", &size)],
        &["import", file.to_str().unwrap()],
        Stdio::null(),
    );
    assert!(imported.status.success(), "{}", text(&imported.stderr));
    assert!(!nothing_imported(target.path()));
}

/// Decision D63 with the real binary on a real directory: `workrail gc` removes a temp file and
/// a never-committed session directory older than the grace period, keeps a young temp file,
/// and the committed session stays healthy.
#[test]
fn gc_removes_what_crashed_writers_left() {
    let dir = tempfile::tempdir().unwrap();
    let session = session_in(dir.path());
    let hours_ago = |path: &Path, hours: u64| {
        let then = std::time::SystemTime::now() - std::time::Duration::from_secs(hours * 3600);
        std::fs::File::open(path)
            .unwrap()
            .set_modified(then)
            .unwrap();
    };
    let stale = dir
        .path()
        .join("snapshots/.tmp-4242-0000000000000000-0-x.json");
    std::fs::write(&stale, b"half a snapshot").unwrap();
    hours_ago(&stale, 2);
    let fresh = dir
        .path()
        .join("snapshots/.tmp-4243-0000000000000000-0-y.json");
    std::fs::write(&fresh, b"being written").unwrap();
    let abandoned = dir.path().join("sessions/sess_00000000000000aa");
    std::fs::create_dir_all(abandoned.join("events")).unwrap();
    std::fs::write(
        abandoned.join("events/.tmp-4244-0000000000000000-0-00000000-00000002.jsonl"),
        b"{\"data\"",
    )
    .unwrap();
    hours_ago(&abandoned.join("events"), 2);
    hours_ago(&abandoned, 2);

    let out = workrail(dir.path(), &["gc"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(
            "left by crashed writers, deleted: 1 uncommitted session directories, 1 temp files"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains("records of servers no longer running, deleted: 0"),
        "{stdout}"
    );
    assert!(!stale.exists() && !abandoned.exists());
    assert!(fresh.exists(), "a temp file in flight was deleted");
    assert!(dir.path().join("sessions").join(&session).exists());
    // The committed session is untouched and healthy.
    let wr = open(dir.path());
    let sid = workrail_spec::ids::SessionId::parse(&session).unwrap();
    assert!(wr.sessions().load(&sid).unwrap().health.is_healthy());
}

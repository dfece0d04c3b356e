//! The data directory is private whatever the umask: a real `workrail mcp` process, started
//! under umask 000 and 022, leaves every directory it creates at 0700 and every file at 0600,
//! so no other local user can read notes and context, write the event logs or keys, or take a
//! session's lock file (D52).
//!
//! And a data directory another user could have written is refused, never used (D136): one
//! owned by another user, an entry in it that is another user's or writable by others, and a
//! signing keyring (or `keys/`) that is another user's or open to group or others. Before, a
//! foreign root stayed as it was without a word, and a planted keyring with mode 0644 became
//! the token signing key. Tests that need another owner `chown` to uid 65534 and run only as
//! root; they say so and pass otherwise.

#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// Starts a bundled workflow and acknowledges its first step with notes, in a server that runs
/// under `umask`.
fn run_a_session_under_umask(umask: &str, data_dir: &Path) {
    let script = format!("umask {umask} && exec \"$0\" mcp");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(env!("CARGO_BIN_EXE_workrail"))
        .env("WORKRAIL_DATA_DIR", data_dir)
        .env("HOME", data_dir.parent().unwrap())
        .env_remove("WORKRAIL_WORKFLOW_DIRS")
        .env_remove("XDG_DATA_HOME")
        .current_dir(data_dir.parent().unwrap())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut send = |message: Value| {
        let mut line = serde_json::to_string(&message).unwrap();
        line.push('\n');
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.flush().unwrap();
    };
    let mut response = |id: i64| loop {
        let line = lines.next().expect("the server answered").unwrap();
        let value: Value = serde_json::from_str(&line).unwrap();
        if value["id"] == json!(id) {
            return value;
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "permissions", "version": "0"}}}),
    );
    response(1);
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "start_workflow", "arguments": {"workflowId": "wr.coding_task"}}}),
    );
    let started = response(2);
    let out = &started["result"]["structuredContent"];
    assert!(out["ackToken"].is_string(), "{started}");
    send(
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "continue_workflow", "arguments": {
            "ackToken": out["ackToken"],
            "output": {"notesMarkdown": "private notes"}}}}),
    );
    let advanced = response(3);
    assert_eq!(advanced["result"]["isError"], false, "{advanced}");
    drop(stdin);
    assert!(child.wait().unwrap().success());
}

/// Every entry below `root` (and `root` itself) with a mode other than 0700 / 0600.
fn loose_entries(root: &Path) -> Vec<String> {
    let mut loose = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o777;
        let expected = if meta.is_dir() { 0o700 } else { 0o600 };
        if mode != expected {
            loose.push(format!("{} is {mode:o}", path.display()));
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                stack.push(entry.unwrap().path());
            }
        }
    }
    loose
}

/// lock: L-DATADIR-OWNED, L-TOKEN-KEY-MATERIAL
#[test]
fn every_file_and_directory_is_private_whatever_the_umask() {
    for umask in ["000", "022", "077"] {
        let scratch = tempfile::tempdir().unwrap();
        let data_dir = scratch.path().join("data");
        run_a_session_under_umask(umask, &data_dir);
        let sessions = std::fs::read_dir(data_dir.join("sessions"))
            .unwrap()
            .count();
        assert_eq!(sessions, 1, "umask {umask}: the session was written");
        let loose = loose_entries(&data_dir);
        assert!(loose.is_empty(), "umask {umask}: {loose:#?}");
    }
}

/// lock: L-DATADIR-OWNED
#[test]
fn an_existing_open_data_directory_is_made_private() {
    let scratch = tempfile::tempdir().unwrap();
    let data_dir = scratch.path().join("data");
    std::fs::create_dir(&data_dir).unwrap();
    std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    run_a_session_under_umask("022", &data_dir);
    let mode = std::fs::metadata(&data_dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        mode, 0o700,
        "the root of an open data directory is tightened"
    );
}

/// The uid other users' files get in these tests (`nobody`).
const OTHER_UID: u32 = 65534;

/// Whether this process may `chown` to another user: the owner of a file it just made is its
/// effective uid.
fn running_as_root() -> bool {
    let probe = tempfile::NamedTempFile::new().unwrap();
    probe.as_file().metadata().unwrap().uid() == 0
}

/// `chown`s `path` to [`OTHER_UID`], or says why the test cannot run and returns false.
fn give_to_another_user(path: &Path, test: &str) -> bool {
    if !running_as_root() {
        eprintln!(
            "{test}: skipped: only root can give a directory to another user (uid {OTHER_UID})"
        );
        return false;
    }
    std::os::unix::fs::chown(path, Some(OTHER_UID), None).unwrap();
    true
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Runs `workrail <args>` on `data_dir` with stdin closed.
fn workrail(data_dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_workrail"))
        .args(args)
        .env("WORKRAIL_DATA_DIR", data_dir)
        .env("HOME", data_dir.parent().unwrap())
        .env_remove("WORKRAIL_WORKFLOW_DIRS")
        .env_remove("XDG_DATA_HOME")
        .env_remove("WORKRAIL_STORE")
        .current_dir(data_dir.parent().unwrap())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// Starts a real `workrail mcp` with its stdin open (as an MCP client keeps it), and returns
/// its output once it exits by itself, within 30 s: a server that started would wait for
/// requests instead.
fn mcp_exits_by_itself(data_dir: &Path) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_workrail"))
        .arg("mcp")
        .env("WORKRAIL_DATA_DIR", data_dir)
        .env("HOME", data_dir.parent().unwrap())
        .env_remove("WORKRAIL_WORKFLOW_DIRS")
        .env_remove("XDG_DATA_HOME")
        .env_remove("WORKRAIL_STORE")
        .current_dir(data_dir.parent().unwrap())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("workrail mcp started on a data directory it must refuse");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A data directory with one session in it, made by a real server.
fn data_dir_with_a_session() -> (tempfile::TempDir, std::path::PathBuf) {
    let scratch = tempfile::tempdir().unwrap();
    let data_dir = scratch.path().join("data");
    run_a_session_under_umask("022", &data_dir);
    (scratch, data_dir)
}

/// lock: L-DATADIR-OWNED, L-TOKEN-KEY-MATERIAL
#[test]
fn a_data_directory_owned_by_another_user_is_refused_by_the_server_and_the_cli() {
    let scratch = tempfile::tempdir().unwrap();
    let data_dir = scratch.path().join("data");
    std::fs::create_dir(&data_dir).unwrap();
    set_mode(&data_dir, 0o755);
    if !give_to_another_user(
        &data_dir,
        "a_data_directory_owned_by_another_user_is_refused",
    ) {
        return;
    }
    let out = mcp_exits_by_itself(&data_dir);
    assert!(!out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty(), "stdout carries MCP only: {out:?}");
    let stderr = stderr_of(&out);
    let shown = data_dir.display().to_string();
    for needle in [
        shown.as_str(),
        "owned by uid 65534",
        "not by this user (uid 0)",
        &format!("`chown -R 0 {shown}`"),
        "WORKRAIL_DATA_DIR",
    ] {
        assert!(stderr.contains(needle), "{needle:?} missing from: {stderr}");
    }
    for args in [&["sessions"][..], &["keys", "rotate"], &["gc", "--dry-run"]] {
        let out = workrail(&data_dir, args);
        assert!(!out.status.success(), "{args:?}: {out:?}");
        assert!(
            stderr_of(&out).contains("owned by uid 65534"),
            "{args:?}: {out:?}"
        );
    }
    let config = workrail(&data_dir, &["config"]);
    assert!(!config.status.success(), "{config:?}");
    assert!(
        stderr_of(&config).contains("owned by uid 65534"),
        "{config:?}"
    );
    // Nothing was created or changed in it: no keyring, no session, the mode as it was.
    assert_eq!(std::fs::read_dir(&data_dir).unwrap().count(), 0);
    let meta = std::fs::metadata(&data_dir).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (OTHER_UID, 0o755));
}

/// lock: L-DATADIR-OWNED
#[test]
fn an_entry_of_another_user_in_the_data_directory_is_refused() {
    let (_scratch, data_dir) = data_dir_with_a_session();
    let sessions = data_dir.join("sessions");
    if !give_to_another_user(&sessions, "an_entry_of_another_user_is_refused") {
        return;
    }
    let out = workrail(&data_dir, &["sessions"]);
    assert!(!out.status.success(), "{out:?}");
    let stderr = stderr_of(&out);
    assert!(
        stderr.contains(&format!(
            "{} in the WorkRail data directory",
            sessions.display()
        )) && stderr.contains("owned by uid 65534")
            && stderr.contains(&format!("`chown -R 0 {}`", data_dir.display())),
        "{stderr}"
    );
}

/// lock: L-DATADIR-OWNED
#[test]
fn a_directory_in_the_data_directory_that_others_may_write_is_refused() {
    let (_scratch, data_dir) = data_dir_with_a_session();
    let sessions = data_dir.join("sessions");
    set_mode(&sessions, 0o777);
    let out = workrail(&data_dir, &["sessions"]);
    assert!(!out.status.success(), "{out:?}");
    let stderr = stderr_of(&out);
    assert!(
        stderr.contains(&sessions.display().to_string())
            && stderr.contains("writable by other users (mode 0777)")
            && stderr.contains(&format!("`chmod -R go-rwx {}`", data_dir.display())),
        "{stderr}"
    );
    // Readable (not writable) by others, as data directories made before D52 are: used.
    set_mode(&sessions, 0o755);
    let out = workrail(&data_dir, &["sessions"]);
    assert!(out.status.success(), "{out:?}");
}

/// The signing key's bytes: a server must never have signed with a refused keyring, nor
/// replaced it.
fn keyring_bytes(data_dir: &Path) -> Vec<u8> {
    std::fs::read(data_dir.join("keys/keyring.json")).unwrap()
}

/// lock: L-TOKEN-KEY-MATERIAL
#[test]
fn a_keyring_open_to_others_is_never_used_and_the_server_says_how_to_fix_it() {
    let (_scratch, data_dir) = data_dir_with_a_session();
    let keyring = data_dir.join("keys/keyring.json");
    set_mode(&keyring, 0o644);
    let before = keyring_bytes(&data_dir);
    let out = mcp_exits_by_itself(&data_dir);
    assert!(!out.status.success(), "{out:?}");
    assert!(out.stdout.is_empty(), "stdout carries MCP only: {out:?}");
    let stderr = stderr_of(&out);
    for needle in [
        keyring.display().to_string(),
        "mode 0644".to_owned(),
        format!("`chmod 600 {}`", keyring.display()),
        "workrail keys rotate".to_owned(),
    ] {
        assert!(
            stderr.contains(&needle),
            "{needle:?} missing from: {stderr}"
        );
    }
    let inspect = workrail(&data_dir, &["sessions"]);
    assert!(!inspect.status.success(), "{inspect:?}");
    assert!(stderr_of(&inspect).contains("chmod 600"), "{inspect:?}");
    assert_eq!(
        keyring_bytes(&data_dir),
        before,
        "the keyring was left as found"
    );
    // The fix it names works.
    set_mode(&keyring, 0o600);
    assert!(workrail(&data_dir, &["sessions"]).status.success());
}

/// A keyring planted before the first start (the data directory's owner never made one) is
/// refused as well, and not replaced: the person decides.
///
/// lock: L-TOKEN-KEY-MATERIAL
#[test]
fn a_planted_keyring_with_mode_0644_is_never_adopted() {
    let scratch = tempfile::tempdir().unwrap();
    let data_dir = scratch.path().join("data");
    std::fs::create_dir_all(data_dir.join("keys")).unwrap();
    set_mode(&data_dir.join("keys"), 0o700);
    let planted = br#"{"v":1,"current":{"keyId":"k_planted","secret":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}"#;
    std::fs::write(data_dir.join("keys/keyring.json"), planted).unwrap();
    set_mode(&data_dir.join("keys/keyring.json"), 0o644);
    let out = mcp_exits_by_itself(&data_dir);
    assert!(!out.status.success(), "{out:?}");
    assert!(stderr_of(&out).contains("chmod 600"), "{out:?}");
    assert_eq!(keyring_bytes(&data_dir), planted);
    assert!(!data_dir.join("sessions").exists(), "nothing was started");
}

/// lock: L-TOKEN-KEY-MATERIAL
#[test]
fn a_keys_directory_open_to_others_is_refused() {
    let (_scratch, data_dir) = data_dir_with_a_session();
    let keys = data_dir.join("keys");
    set_mode(&keys, 0o755);
    let out = workrail(&data_dir, &["sessions"]);
    assert!(!out.status.success(), "{out:?}");
    let stderr = stderr_of(&out);
    assert!(
        stderr.contains("mode 0755") && stderr.contains(&format!("`chmod 700 {}`", keys.display())),
        "{stderr}"
    );
}

/// lock: L-TOKEN-KEY-MATERIAL
#[test]
fn a_keyring_of_another_user_is_refused_even_with_mode_0600() {
    let (_scratch, data_dir) = data_dir_with_a_session();
    let keyring = data_dir.join("keys/keyring.json");
    if !give_to_another_user(&keyring, "a_keyring_of_another_user_is_refused") {
        return;
    }
    let out = mcp_exits_by_itself(&data_dir);
    assert!(!out.status.success(), "{out:?}");
    let stderr = stderr_of(&out);
    assert!(
        stderr.contains("owned by uid 65534")
            && stderr.contains(&format!("`rm {}`", keyring.display()))
            && stderr.contains(&format!("`chown 0 {}`", keyring.display())),
        "{stderr}"
    );
}

//! The Console's config data (locks §6 "Desired vs applied", "Restart-required triggers"), with
//! real `workrail mcp` processes.
//!
//! Guards against: a server that does not record the config it applies, or records a hash the
//! control plane does not reproduce; a killed server's record read as live; two servers on one
//! data directory hiding each other; a tool-gating flag change that does not surface as a
//! restart requirement naming it, or a preference change that does; a config edit that corrupts
//! or half-writes `config/features.json`; and reads that write anything (decision D69).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::console_support;

use console_support::fingerprint;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use workrail::control::servers::{Liveness, list_servers};
use workrail::control::{
    LaunchEnvironment, RestartTrigger, RuntimeSafeChange, config_overview, desired_config,
    set_feature, set_preference, set_setting,
};
use workrail_spec::error::ErrorCode;

/// A data directory, a home and a working directory under one temp dir.
struct Place {
    _root: tempfile::TempDir,
    data: PathBuf,
    home: PathBuf,
    work: PathBuf,
}

impl Place {
    fn new() -> Place {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        let (data, home, work) = (base.join("data"), base.join("home"), base.join("work"));
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        Place {
            _root: root,
            data,
            home,
            work,
        }
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_workrail"));
        cmd.env("WORKRAIL_DATA_DIR", &self.data)
            .env("HOME", &self.home)
            .env_remove("USERPROFILE")
            .env_remove("WORKRAIL_WORKFLOW_DIRS")
            .env_remove("WORKRAIL_FEATURES")
            .env_remove("XDG_DATA_HOME")
            .env_remove("WORKRAIL_LOG")
            .current_dir(&self.work);
        cmd
    }

    /// `workrail mcp`, its stdin held open so it keeps serving.
    fn spawn_server(&self) -> Child {
        self.command()
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// The launch environment of [`Place::spawn_server`].
    fn launch(&self) -> LaunchEnvironment {
        LaunchEnvironment {
            cwd: self.work.display().to_string(),
            home: Some(self.home.display().to_string()),
            workflow_dirs: None,
            features_env: None,
        }
    }

    /// Waits until `n` live server records are listed.
    fn wait_for_live(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let live = list_servers(&self.data)
                .map(|l| l.live().count())
                .unwrap_or(0);
            if live == n {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "expected {n} live servers, see {live}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        self.command()
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }
}

/// Ends a server as a client does: closes its stdin and waits.
fn close(mut child: Child) {
    drop(child.stdin.take());
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// A started server records the config it applies, with the hash the control plane computes
/// for the same launch, in a private file, and reads as live while it runs.
/// lock: L-CONSOLE-APPLIED-CONFIG
#[test]
fn a_started_server_records_the_applied_config_hash_the_control_plane_computes() {
    let place = Place::new();
    let server = place.spawn_server();
    place.wait_for_live(1);
    let list = list_servers(&place.data).unwrap();
    let entry = &list.servers[0];
    assert_eq!(entry.liveness, Liveness::Live);
    let record = &entry.record;
    assert_eq!(record.launch, place.launch());
    assert_eq!(
        record.applied_config.hash().unwrap(),
        record.applied_config_hash
    );
    let desired = desired_config(&place.data, &place.launch()).unwrap();
    assert_eq!(desired.hash().unwrap(), record.applied_config_hash);
    let names: Vec<&str> = record
        .applied_config
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert!(
        names.contains(&"resume_session") && !names.contains(&"start_session"),
        "{names:?}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let file = place
            .data
            .join("servers")
            .join(format!("{}.json", record.server_id));
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    let overview = config_overview(&place.data).unwrap();
    assert_eq!(overview.servers.len(), 1);
    let comparison = overview.servers[0].comparison.as_ref().unwrap();
    assert!(comparison.in_sync && !comparison.restart_required);
    // A clean exit removes the record.
    close(server);
    assert!(list_servers(&place.data).unwrap().servers.is_empty());
}

/// Two servers on one data directory are both listed; after `kill -9` the killed one's record
/// stays and reads as dead, and only the live one is compared.
/// lock: L-CONSOLE-APPLIED-CONFIG
#[test]
fn two_servers_are_listed_and_a_killed_one_reads_as_dead() {
    let place = Place::new();
    let first = place.spawn_server();
    let mut second = place.spawn_server();
    place.wait_for_live(2);
    let killed_pid = second.id();
    second.kill().unwrap();
    second.wait().unwrap();
    let list = list_servers(&place.data).unwrap();
    assert_eq!(list.servers.len(), 2);
    for entry in &list.servers {
        let expected = if entry.record.pid == killed_pid {
            Liveness::Dead
        } else {
            Liveness::Live
        };
        assert_eq!(entry.liveness, expected, "{}", entry.record.server_id);
    }
    let overview = config_overview(&place.data).unwrap();
    assert_eq!(overview.servers.len(), 1);
    assert_eq!(overview.dead_records, 1);
    assert_ne!(overview.servers[0].pid, killed_pid);
    close(first);
    // The killed server's record outlives it (gc removes it after the grace period).
    let list = list_servers(&place.data).unwrap();
    assert_eq!(list.servers.len(), 1);
    assert_eq!(list.servers[0].liveness, Liveness::Dead);
}

/// Switching a tool's flag off while a server runs makes the restart requirement appear,
/// naming the flag and the tool; `workrail config --json` says the same.
/// lock: L-CONSOLE-RESTART-TRIGGERS, L-CONSOLE-APPLIED-CONFIG
#[test]
fn a_tool_gating_flag_change_requires_a_restart_naming_the_trigger() {
    let place = Place::new();
    let server = place.spawn_server();
    place.wait_for_live(1);
    let change = set_feature(&place.data, "resume_session", false).unwrap();
    assert!(change.restart_required);
    let overview = config_overview(&place.data).unwrap();
    assert!(overview.restart_required());
    let comparison = overview.servers[0].comparison.clone().unwrap();
    assert_eq!(
        comparison.triggers,
        vec![
            RestartTrigger::ToolSetChanged {
                added: vec![],
                removed: vec!["resume_session".to_owned()],
            },
            RestartTrigger::ToolGatingFlagChanged {
                flag: "resume_session".to_owned(),
                applied: true,
                desired: false,
            },
        ]
    );
    let out = place.cli(&["config", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let triggers = &json["servers"][0]["comparison"]["triggers"];
    assert_eq!(triggers[1]["kind"], "tool_gating_flag_changed");
    assert_eq!(triggers[1]["flag"], "resume_session");
    assert_eq!(json["servers"][0]["comparison"]["restartRequired"], true);
    let text = place.cli(&["config"]);
    let text = String::from_utf8(text.stdout).unwrap();
    assert!(
        text.contains("RESTART REQUIRED") && text.contains("resume_session: on -> off"),
        "{text}"
    );
    close(server);
}

/// Preference defaults and retention apply without a restart: shown as changed, never as a
/// restart requirement.
/// lock: L-CONSOLE-RESTART-TRIGGERS
#[test]
fn a_presentation_or_retention_change_does_not_require_a_restart() {
    let place = Place::new();
    let server = place.spawn_server();
    place.wait_for_live(1);
    let change = set_preference(&place.data, "autonomy", "full_auto_never_stop").unwrap();
    assert!(!change.restart_required);
    std::fs::write(
        place.data.join("config/retention.json"),
        r#"{"ttlDays": 7, "keep": []}"#,
    )
    .unwrap();
    let overview = config_overview(&place.data).unwrap();
    assert!(!overview.restart_required());
    let comparison = overview.servers[0].comparison.clone().unwrap();
    assert!(!comparison.in_sync);
    assert!(comparison.triggers.is_empty());
    assert_eq!(
        comparison.runtime_safe_changes,
        vec![
            RuntimeSafeChange::PreferenceDefaults,
            RuntimeSafeChange::Retention
        ]
    );
    close(server);
}

/// `config set` validates the key, the value and the file already there; a refused edit leaves
/// the file byte-identical, an accepted one replaces it whole.
/// lock: L-CONSOLE-APPLIED-CONFIG
#[test]
fn config_set_validates_and_never_corrupts_the_flags_file() {
    let place = Place::new();
    let file = place.data.join("config/features.json");
    set_feature(&place.data, "start_session", true).unwrap();
    let before = std::fs::read(&file).unwrap();
    let unknown = set_feature(&place.data, "resume_sessions", true).unwrap_err();
    assert_eq!(unknown.code, ErrorCode::ValidationError);
    assert!(
        unknown.suggestion.contains("resume_session"),
        "{}",
        unknown.suggestion
    );
    let bad_value = set_setting(&place.data, "resume_session", "maybe").unwrap_err();
    assert_eq!(bad_value.code, ErrorCode::ValidationError);
    assert!(bad_value.suggestion.contains("on") && bad_value.suggestion.contains("off"));
    let bad_preference = set_setting(&place.data, "autonomy", "reckless").unwrap_err();
    assert!(bad_preference.suggestion.contains("full_auto_never_stop"));
    assert_eq!(std::fs::read(&file).unwrap(), before);
    // A broken file already there is left alone and named.
    std::fs::write(&file, br#"{"resume_session": "no"}"#).unwrap();
    let broken = set_feature(&place.data, "resume_session", false).unwrap_err();
    assert!(
        broken.message.contains("features.json") || broken.suggestion.contains("features.json")
    );
    assert_eq!(
        std::fs::read(&file).unwrap(),
        br#"{"resume_session": "no"}"#
    );
    std::fs::remove_file(&file).unwrap();
    // Through the CLI: the self-correcting error, exit 1, nothing written.
    let out = place.cli(&["config", "set", "bogus", "on"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("VALIDATION_ERROR"));
    assert!(!file.exists());
    let out = place.cli(&["config", "set", "resume_session", "off"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(written, serde_json::json!({"resume_session": false}));
}

/// Reading the config (library and CLI, text and JSON) leaves the data directory
/// byte-identical, lock files included, with a live server and a dead record in it.
/// lock: L-CONSOLE-APPLIED-CONFIG
#[test]
fn reading_the_config_writes_nothing() {
    let place = Place::new();
    let live = place.spawn_server();
    let mut dead = place.spawn_server();
    place.wait_for_live(2);
    dead.kill().unwrap();
    dead.wait().unwrap();
    set_feature(&place.data, "resume_session", false).unwrap();
    let before = fingerprint(&place.data);
    list_servers(&place.data).unwrap();
    config_overview(&place.data).unwrap();
    for args in [&["config"][..], &["config", "--json"][..]] {
        let out = place.cli(args);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(fingerprint(&place.data), before);
    // A data directory that does not exist stays absent.
    let missing = place.data.with_file_name("never-created");
    let overview = config_overview(&missing).unwrap();
    assert!(overview.servers.is_empty());
    assert!(!missing.exists());
    close(live);
}

/// The clock of a `workrail gc` run two hours from now (past the grace period).
#[derive(Debug)]
struct Later(workrail::gc::OsRetentionClock);

impl workrail::gc::RetentionClock for Later {
    fn now(&self) -> std::time::SystemTime {
        std::time::SystemTime::now() + Duration::from_secs(2 * 60 * 60)
    }
    fn modified(&self, path: &Path) -> std::io::Result<Option<std::time::SystemTime>> {
        self.0.modified(path)
    }
}

/// `workrail gc` removes a killed server's record (and lock file) once past the grace period,
/// never a live server's, and a dry run removes nothing.
/// lock: L-CONSOLE-APPLIED-CONFIG
#[test]
fn gc_removes_dead_server_records_past_the_grace_period() {
    let place = Place::new();
    let live = place.spawn_server();
    let mut dead = place.spawn_server();
    place.wait_for_live(2);
    let dead_pid = dead.id();
    dead.kill().unwrap();
    dead.wait().unwrap();
    let wr = workrail::protocol::Workrail::open(workrail::protocol::WorkrailConfig {
        data_dir: place.data.clone(),
        sources: workrail::sources::SourceConfig::new(Some(&place.home), &place.work, None),
        entropy: std::sync::Arc::new(workrail::entropy::OsEntropy),
        features: Default::default(),
        workspace: std::sync::Arc::new(workrail::workspace::NoWorkspace),
    })
    .unwrap();
    let now = workrail::gc::OsRetentionClock::new(place.data.clone());
    let report = wr
        .gc(&Default::default(), &now, &workrail::bundle::NoProgress)
        .unwrap();
    assert!(
        report.deleted_server_records.is_empty(),
        "within the grace period"
    );
    let later = Later(workrail::gc::OsRetentionClock::new(place.data.clone()));
    let dry = workrail::gc::GcOptions {
        dry_run: true,
        ttl_days: None,
    };
    let before = fingerprint(&place.data);
    let report = wr.gc(&dry, &later, &workrail::bundle::NoProgress).unwrap();
    assert_eq!(report.deleted_server_records.len(), 1);
    assert_eq!(fingerprint(&place.data), before);
    let report = wr
        .gc(&Default::default(), &later, &workrail::bundle::NoProgress)
        .unwrap();
    assert_eq!(report.deleted_server_records.len(), 1, "{report:?}");
    let list = list_servers(&place.data).unwrap();
    assert_eq!(list.servers.len(), 1);
    assert_eq!(list.servers[0].liveness, Liveness::Live);
    assert_ne!(list.servers[0].record.pid, dead_pid);
    let leftovers: Vec<String> = std::fs::read_dir(place.data.join("servers"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        leftovers.len(),
        2,
        "the live server's record and lock: {leftovers:?}"
    );
    close(live);
}

/// A server that applied other tool schemas and other sources (as one running an older binary
/// in another layout would) is compared with what a restart would apply now: the schema and
/// the source registration are both named as restart triggers, and the record is live exactly
/// while its registration holds the lock.
/// lock: L-CONSOLE-RESTART-TRIGGERS, L-CONSOLE-APPLIED-CONFIG
#[test]
fn schema_and_source_changes_are_restart_triggers() {
    let place = Place::new();
    let launch = place.launch();
    let mut applied = desired_config(&place.data, &launch).unwrap();
    let tool = applied.tools[1].name.clone();
    applied.tools[1].input_schema = workrail_spec::jcs::sha256(b"an older schema");
    let dropped = applied.sources.pop().unwrap();
    let fs: std::sync::Arc<dyn workrail::store::fs::StoreFs> =
        std::sync::Arc::new(workrail::store::fs::OsFs::new(&place.data));
    std::fs::create_dir_all(&place.data).unwrap();
    let registration = workrail::control::ServerRegistration::start(
        fs,
        &workrail::entropy::OsEntropy,
        applied.clone(),
        launch,
    )
    .unwrap();
    let overview = config_overview(&place.data).unwrap();
    assert_eq!(overview.servers.len(), 1);
    let server = &overview.servers[0];
    assert_eq!(server.server_id, registration.record().server_id);
    let comparison = server.comparison.clone().unwrap();
    assert!(comparison.restart_required);
    let desired = server.desired.config.clone().unwrap();
    assert_eq!(
        comparison.triggers,
        vec![
            RestartTrigger::ToolSchemaChanged {
                tool,
                input: true,
                output: false,
            },
            RestartTrigger::SourceRegistrationChanged {
                applied: applied.sources.clone(),
                desired: desired.sources.clone(),
            },
        ]
    );
    assert_eq!(desired.sources.last(), Some(&dropped));
    drop(registration);
    assert!(list_servers(&place.data).unwrap().servers.is_empty());
}

//! Workflows from git repositories (decision D178), against repositories served on 127.0.0.1 by
//! `git daemon` and by `file://`, driven with the real `git` program.
//!
//! Guards against a sync that blocks a tool call, a failed or rewritten sync that drops the
//! last good copy, a token that leaks into a message, a command line or the cache's git config,
//! and a pushed change that neither shows as drift for running sessions nor reaches new runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use workrail::entropy::OsEntropy;
use workrail::protocol::{Workrail, WorkrailConfig};
use workrail::sources::SourceConfig;
use workrail::sources::git::{RepoCache, RepoSpec, auth_token, parse_repos};
use workrail_spec::closed::WorkflowSourceKind;
use workrail_spec::tools::{ContinueWorkflowInput, ListWorkflowsInput, StartWorkflowInput};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.com")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.com")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn workflow(prompt: &str) -> String {
    format!(
        r#"{{"id": "team.review", "name": "Team review", "description": "The team's review.",
  "steps": [{{"id": "look", "title": "Look", "prompt": "{prompt}"}}, {{"id": "done", "title": "Done", "prompt": "Wrap up."}}]}}"#
    )
}

/// A bare repository `origin.git` under `root` with one commit of `flows/review.json`, and the
/// working clone that pushes to it.
struct Origin {
    root: tempfile::TempDir,
}

impl Origin {
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        git(r, &["init", "-q", "--bare", "-b", "main", "origin.git"]);
        git(r, &["clone", "-q", "origin.git", "work"]);
        let work = r.join("work");
        git(&work, &["checkout", "-q", "-b", "main"]);
        std::fs::create_dir_all(work.join("flows")).unwrap();
        let origin = Self { root };
        origin.push("Look at the diff.", "first");
        origin
    }

    fn work(&self) -> PathBuf {
        self.root.path().join("work")
    }

    fn bare(&self) -> PathBuf {
        self.root.path().join("origin.git")
    }

    fn push(&self, prompt: &str, message: &str) -> String {
        let work = self.work();
        std::fs::write(work.join("flows").join("review.json"), workflow(prompt)).unwrap();
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-q", "-m", message]);
        git(&work, &["push", "-q", "origin", "main"]);
        git(&work, &["rev-parse", "HEAD"]).trim().to_owned()
    }

    /// Replaces the branch with an unrelated history.
    fn rewrite(&self) {
        let work = self.work();
        git(&work, &["checkout", "-q", "--orphan", "other"]);
        std::fs::write(
            work.join("flows").join("review.json"),
            workflow("Rewritten."),
        )
        .unwrap();
        git(&work, &["add", "-A"]);
        git(&work, &["commit", "-q", "-m", "rewritten"]);
        git(&work, &["push", "-q", "-f", "origin", "other:main"]);
    }
}

/// `git daemon` serving `base` on a free port of 127.0.0.1.
struct Daemon {
    child: Child,
    port: u16,
}

impl Daemon {
    fn start(base: &Path) -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // The daemon itself, not the `git` wrapper, so that killing the child stops it.
        let exec_path = git(base, &["--exec-path"]).trim().to_owned();
        let child = Command::new(Path::new(&exec_path).join("git-daemon"))
            .args([
                "--export-all",
                "--reuseaddr",
                "--listen=127.0.0.1",
                &format!("--port={port}"),
                &format!("--base-path={}", base.display()),
                &base.display().to_string(),
            ])
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "git daemon did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, port }
    }

    fn url(&self) -> String {
        format!("git://127.0.0.1:{}/origin.git", self.port)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn open(data: &Path, specs: Vec<RepoSpec>) -> Workrail {
    let empty = data.join("no-project");
    Workrail::open(WorkrailConfig {
        data_dir: data.to_path_buf(),
        sources: SourceConfig::new(None, &empty, None)
            .with_repos(specs, RepoCache::of_data_dir(data)),
        entropy: Arc::new(OsEntropy),
        features: Default::default(),
        workspace: Arc::new(workrail::workspace::NoWorkspace),
    })
    .unwrap()
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn start(wr: &Workrail) -> workrail_spec::tools::ExecutionOutput {
    wr.start_workflow(StartWorkflowInput {
        workflow_id: "team.review".into(),
        context: None,
        preferences: vec![],
        preset: None,
    })
    .unwrap()
}

/// decision: D178
#[test]
fn a_repository_served_by_git_daemon_is_synced_pinned_by_commit_and_a_push_shows_as_drift() {
    let origin = Origin::new();
    let daemon = Daemon::start(origin.root.path());
    let data = tempfile::tempdir().unwrap();
    let specs = parse_repos(&format!(
        r#"[{{"url": "{}", "branch": "main", "path": "flows"}}]"#,
        daemon.url()
    ))
    .unwrap();
    let wr = open(data.path(), specs.clone());
    // Not synced yet: nothing to list, and the problem says why and what to do.
    let listed = wr.list_workflows(ListWorkflowsInput::default()).unwrap();
    assert!(
        listed
            .workflows
            .iter()
            .all(|w| w.workflow_id.as_str() != "team.review")
    );
    let problem = listed
        .problems
        .iter()
        .find(|p| p.source_ref == "repo/origin")
        .expect("an unsynced repository is reported");
    let text = problem.errors.join(" ");
    assert!(text.contains("not synced yet"), "{problem:?}");

    let cache = RepoCache::of_data_dir(data.path());
    let first = cache.sync(&specs[0], &no_env, 1);
    assert_eq!(first.last_error, None);
    let commit = first.commit.clone().unwrap();
    let listed = wr.list_workflows(ListWorkflowsInput::default()).unwrap();
    let summary = listed
        .workflows
        .iter()
        .find(|w| w.workflow_id.as_str() == "team.review")
        .expect("the synced workflow is listed");
    assert_eq!(summary.source_kind, WorkflowSourceKind::Remote);
    assert!(
        listed
            .problems
            .iter()
            .all(|p| p.source_ref != "repo/origin")
    );

    // A run pins the workflow; its recorded source ref names the commit.
    let run = start(&wr);
    let events = wr
        .sessions()
        .load(&run.session.session_id)
        .unwrap()
        .events()
        .all()
        .unwrap()
        .into_owned();
    let source_ref = events
        .iter()
        .find_map(|e| match e.data() {
            workrail_spec::event::EventData::RunStarted(r) => Some(r.workflow_source_ref.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        source_ref,
        format!("repo/origin@{}/review.json", &commit[..12])
    );

    // A push: the running session sees drift, a new run gets the new version.
    origin.push("Look at the diff and the tests.", "second");
    let second = cache.sync(&specs[0], &no_env, 2);
    assert_ne!(second.commit, first.commit);
    let again = wr
        .continue_workflow(ContinueWorkflowInput {
            state_token: Some(run.state_token.clone()),
            ack_token: None,
            context: None,
            output: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    assert!(
        again
            .warnings
            .iter()
            .any(|w| w.code == "pinned_workflow_drift"),
        "{:?}",
        again.warnings
    );
    assert!(again.pending.unwrap().prompt.contains("Look at the diff."));
    let fresh = start(&wr);
    assert!(
        fresh
            .pending
            .unwrap()
            .prompt
            .contains("Look at the diff and the tests.")
    );

    // Unreachable: the last good copy stays, and the problem names the repository.
    drop(daemon);
    let failed = cache.sync(&specs[0], &no_env, 3);
    assert_eq!(failed.commit, second.commit);
    assert!(failed.last_error.is_some());
    let listed = wr.list_workflows(ListWorkflowsInput::default()).unwrap();
    assert!(
        listed
            .workflows
            .iter()
            .any(|w| w.workflow_id.as_str() == "team.review")
    );
    let problem = listed
        .problems
        .iter()
        .find(|p| p.source_ref == "repo/origin")
        .expect("a failed sync is reported");
    let text = problem.errors.join(" ");
    assert!(
        text.contains("failed") && text.contains("Still serving"),
        "{problem:?}"
    );
}

/// decision: D178
#[test]
fn a_rewritten_history_is_not_followed_and_the_last_good_copy_stays() {
    let origin = Origin::new();
    let data = tempfile::tempdir().unwrap();
    let url = format!("file://{}", origin.bare().display());
    let specs = parse_repos(&url).unwrap();
    let cache = RepoCache::of_data_dir(data.path());
    let good = cache.sync(&specs[0], &no_env, 1);
    assert_eq!(good.last_error, None, "{good:?}");
    origin.rewrite();
    let after = cache.sync(&specs[0], &no_env, 2);
    assert_eq!(after.commit, good.commit);
    let error = after.last_error.unwrap();
    assert!(error.contains("rewritten"), "{error}");
    assert!(
        error.contains("delete"),
        "says how to follow the new history: {error}"
    );
}

/// A one-shot HTTP server that answers 401 and hands back the request it got.
fn capture_one_request() -> (u16, std::thread::JoinHandle<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        while !request.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        let _ = stream.write_all(
            b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"x\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        String::from_utf8_lossy(&request).into_owned()
    });
    (port, handle)
}

/// decision: D178
#[test]
fn a_token_reaches_git_only_as_a_header_and_never_shows_in_messages_or_the_cache() {
    use base64::Engine as _;
    let (port, server) = capture_one_request();
    let data = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{port}/team/flows.git");
    let specs = parse_repos(&url).unwrap();
    let secret = "s3cr3t-t0ken-value";
    let env = |name: &str| (name == "GIT_127_0_0_1_TOKEN").then(|| secret.to_owned());
    let cache = RepoCache::of_data_dir(data.path());
    let state = cache.sync(&specs[0], &env, 1);
    let request = server.join().unwrap();
    let expected =
        base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{secret}"));
    assert!(
        request.contains(&format!("Authorization: Basic {expected}")),
        "{request}"
    );
    let error = state.last_error.expect("a 401 fails the sync");
    assert!(!error.contains(secret), "{error}");
    assert!(
        error.contains("token"),
        "says which variable to set: {error}"
    );
    // Nothing under the cache holds the token.
    for entry in walk(data.path()) {
        if entry.is_file() {
            let bytes = std::fs::read(&entry).unwrap();
            assert!(
                !String::from_utf8_lossy(&bytes).contains(secret),
                "{} holds the token",
                entry.display()
            );
        }
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// decision: D178
#[test]
fn repository_lists_and_tokens_are_read_as_the_reference_reads_them() {
    let specs =
        parse_repos("https://github.com/acme/flows.git, https://git.acme.io/team/flows.git")
            .unwrap();
    assert_eq!(specs.len(), 2);
    assert_eq!(specs[0].name, "flows");
    assert_eq!(specs[1].name, "flows-2", "two repositories, two names");
    let json = parse_repos(
        r#"[{"repositoryUrl": "https://gitlab.com/a/b.git", "branch": "dev", "path": "workflows/"}]"#,
    )
    .unwrap();
    assert_eq!(json[0].branch.as_deref(), Some("dev"));
    assert_eq!(json[0].path.as_deref(), Some("workflows"));
    // A token in the configuration value is refused with the fix.
    let err = parse_repos(r#"[{"url": "https://x/y.git", "authToken": "abc"}]"#).unwrap_err();
    assert!(err.contains("GITHUB_TOKEN"), "{err}");
    assert!(!err.contains("abc"));
    assert!(parse_repos(r#"[{"url": "https://x/y.git", "path": "../up"}]"#).is_err());
    assert!(parse_repos("--upload-pack=evil").is_err());
    let env = |name: &str| match name {
        "GITHUB_TOKEN" => Some("gh".to_owned()),
        "GIT_GIT_ACME_IO_TOKEN" => Some("acme".to_owned()),
        "WORKFLOW_GIT_AUTH_TOKEN" => Some("generic".to_owned()),
        _ => None,
    };
    assert_eq!(
        auth_token("https://github.com/a/b.git", &env).as_deref(),
        Some("gh")
    );
    assert_eq!(
        auth_token("https://git.acme.io/a/b.git", &env).as_deref(),
        Some("acme")
    );
    assert_eq!(
        auth_token("https://other.io/a/b.git", &env).as_deref(),
        Some("generic")
    );
    assert_eq!(
        auth_token("git@github.com:a/b.git", &env),
        None,
        "SSH uses keys"
    );
}

/// decision: D178
#[test]
fn a_server_syncs_its_repositories_in_the_background_and_repos_sync_syncs_now() {
    use std::io::BufRead;
    let origin = Origin::new();
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("data");
    let url = format!("file://{}", origin.bare().display());
    let repos = format!(r#"[{{"url": "{url}", "path": "flows"}}]"#);
    let workrail = env!("CARGO_BIN_EXE_workrail");
    // `workrail repos sync`: fetches now, prints the commit.
    let out = Command::new(workrail)
        .args(["repos", "sync"])
        .env("WORKRAIL_DATA_DIR", &data)
        .env("WORKFLOW_GIT_REPOS", &repos)
        .env("HOME", home.path())
        .current_dir(home.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("origin:"));
    // A push, then a server: its background sync brings the new commit without any call
    // waiting for it.
    origin.push("Look at the diff, second version.", "second");
    let mut server = Command::new(workrail)
        .arg("mcp")
        .env("WORKRAIL_DATA_DIR", &data)
        .env("WORKRAIL_WORKFLOW_REPOS", &repos)
        .env("HOME", home.path())
        .current_dir(home.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(server.stdout.take().unwrap());
    let mut call = |id: u64, method: &str, params: serde_json::Value| -> serde_json::Value {
        let line =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stdin, "{line}").unwrap();
        loop {
            let mut text = String::new();
            stdout.read_line(&mut text).unwrap();
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            if value["id"] == id {
                return value;
            }
        }
    };
    call(
        1,
        "initialize",
        serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut id = 2;
    loop {
        let started = call(
            id,
            "tools/call",
            serde_json::json!({"name": "start_workflow", "arguments": {"workflowId": "team.review"}}),
        );
        id += 1;
        let prompt = started["result"]["structuredContent"]["pending"]["prompt"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if prompt.contains("second version") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server never served the pushed version: {started}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(stdin);
    let _ = server.wait();
}

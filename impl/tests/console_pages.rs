//! The Console's Workflows and Config pages over plain HTTP/1.1: the built `workrail console`
//! on a data directory with one user workflow.
//!
//! Guards against: a state-changing POST (a source save, a copy, a flag edit) accepted from
//! another origin or without the per-launch secret, or writing anything when refused; a source
//! save the compiler rejects that writes anything or comes back without the field's pointer; a
//! bundled `wr.*` workflow that offers an edit form or accepts a save; a compiled snapshot that
//! any form posts; and pages that miss the elements of the DOM contract.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::console_support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use console_support::{
    Console, USER_WORKFLOW_ID, build_demo_data_dir, new_root, user_workflow_source, user_workflows,
};

/// One reply: status, lowercased headers, body (de-chunked).
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: BTreeMap<String, String>,
    body: String,
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        out.push_str(&rest[..size]);
        body = &rest[size + 2..];
    }
    out
}

/// Sends one request to the Console (`body`: an `application/x-www-form-urlencoded` form).
fn send(
    console: &Console,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let host = console.site.strip_prefix("http://").unwrap();
    let mut stream = TcpStream::connect(host).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    // Paths are the launch's (decision D184): under its prefix.
    let path = format!("{}{path}", console.prefix);
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if method != "GET" {
        request.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
        request.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: BTreeMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_lowercase(), v.trim().to_owned()))
        .collect();
    let body = if headers
        .get("transfer-encoding")
        .is_some_and(|t| t.contains("chunked"))
    {
        dechunk(body)
    } else {
        body.to_owned()
    };
    // Links and redirects read as plain paths.
    let body = console.unprefixed(&body);
    let headers = headers
        .into_iter()
        .map(|(k, v)| {
            let v = if k == "location" {
                v.strip_prefix(&console.prefix)
                    .map_or(v.clone(), str::to_owned)
            } else {
                v
            };
            (k, v)
        })
        .collect();
    Reply {
        status,
        headers,
        body,
    }
}

fn form_encode(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| {
            format!(
                "{}={}",
                percent_encoding::utf8_percent_encode(k, percent_encoding::NON_ALPHANUMERIC),
                percent_encoding::utf8_percent_encode(v, percent_encoding::NON_ALPHANUMERIC)
            )
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A data directory with the user workflow, and its Console.
struct Fixture {
    _root: tempfile::TempDir,
    data: PathBuf,
    console: Console,
    /// `Cookie: workrail_console_<port>=<secret>`.
    cookie: String,
}

impl Fixture {
    fn new() -> Fixture {
        let (root, data) = new_root();
        let user = user_workflows(&data);
        std::fs::create_dir_all(&user).unwrap();
        std::fs::write(
            user.join("release_check.json"),
            user_workflow_source("Run the smoke tests."),
        )
        .unwrap();
        let console = Console::start(&data);
        let cookie = console.cookie();
        Fixture {
            _root: root,
            data,
            console,
            cookie,
        }
    }

    fn source_file(&self) -> PathBuf {
        user_workflows(&self.data).join("release_check.json")
    }

    fn get(&self, path: &str) -> Reply {
        send(&self.console, "GET", path, &[("Cookie", &self.cookie)], "")
    }

    /// A POST from the Console's own pages (cookie and `Origin`).
    fn post(&self, path: &str, form: &[(&str, &str)]) -> Reply {
        send(
            &self.console,
            "POST",
            path,
            &[("Cookie", &self.cookie), ("Origin", &self.console.site)],
            &form_encode(form),
        )
    }
}

/// Every path under `root` with its modification time and contents (what a refused request or
/// a read must leave unchanged).
fn fingerprint(root: &Path) -> BTreeMap<PathBuf, (Option<std::time::SystemTime>, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let modified = std::fs::metadata(&path).unwrap().modified().ok();
            if path.is_dir() {
                out.insert(path.clone(), (modified, Vec::new()));
                stack.push(path);
            } else {
                out.insert(path.clone(), (modified, std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

/// lock: L-CONSOLE-EDIT-SOURCE
#[test]
fn state_changing_posts_from_another_origin_or_without_the_secret_are_refused_and_write_nothing() {
    let f = Fixture::new();
    let root = f.data.parent().unwrap().to_path_buf();
    let before = fingerprint(&root);
    let good = user_workflow_source("Changed by a forged request.");
    let posts: [(&str, Vec<(&str, &str)>); 4] = [
        (
            "/workflows/user.release_check",
            vec![("source", good.as_str())],
        ),
        (
            "/workflows/wr.mr_review/copy",
            vec![("newId", "user.forged")],
        ),
        ("/config/flags", vec![("start_session", "on")]),
        (
            "/config/preferences",
            vec![("autonomy", "full_auto_never_stop")],
        ),
    ];
    for (path, form) in &posts {
        let body = form_encode(form);
        // Another origin, with the cookie.
        let r = send(
            &f.console,
            "POST",
            path,
            &[("Cookie", &f.cookie), ("Origin", "http://evil.example")],
            &body,
        );
        assert_eq!(r.status, 403, "{path}: {r:?}");
        assert!(r.body.contains("Cross-origin request refused"), "{path}");
        // `Origin: null` (a sandboxed or opaque context).
        let r = send(
            &f.console,
            "POST",
            path,
            &[("Cookie", &f.cookie), ("Origin", "null")],
            &body,
        );
        assert_eq!(r.status, 403, "{path}: {r:?}");
        // Neither Origin nor Referer.
        let r = send(&f.console, "POST", path, &[("Cookie", &f.cookie)], &body);
        assert_eq!(r.status, 403, "{path}: {r:?}");
        // The Console's origin but no secret, then a wrong one.
        let r = send(
            &f.console,
            "POST",
            path,
            &[("Origin", &f.console.site)],
            &body,
        );
        assert_eq!(r.status, 403, "{path}: {r:?}");
        assert!(r.body.contains("This Console needs its link"), "{path}");
        let wrong = format!("{}={}", f.console.cookie_name, "0".repeat(64));
        let r = send(
            &f.console,
            "POST",
            path,
            &[("Cookie", &wrong), ("Origin", &f.console.site)],
            &body,
        );
        assert_eq!(r.status, 403, "{path}: {r:?}");
        assert!(r.body.contains("This Console needs its link"), "{path}");
    }
    assert_eq!(fingerprint(&root), before, "a refused request wrote");
}

/// lock: L-CONSOLE-EDIT-SOURCE
#[test]
fn an_invalid_source_is_422_with_its_pointers_and_writes_nothing_then_a_valid_one_is_saved() {
    let f = Fixture::new();
    let file = f.source_file();
    let before = std::fs::read(&file).unwrap();
    let mut broken: serde_json::Value =
        serde_json::from_str(&user_workflow_source("Run the smoke tests.")).unwrap();
    broken["steps"][1].as_object_mut().unwrap().remove("prompt");
    let broken = serde_json::to_string_pretty(&broken).unwrap();
    let r = f.post(
        &format!("/workflows/{USER_WORKFLOW_ID}"),
        &[("source", &broken)],
    );
    assert_eq!(r.status, 422, "{r:?}");
    assert!(r.body.contains("id=\"errors\""), "{}", r.body);
    assert!(
        r.body.contains("class=\"error\" data-pointer=\"/steps/1"),
        "{}",
        r.body
    );
    assert!(r.body.contains("Smoke test"), "the submitted text is kept");
    assert_eq!(std::fs::read(&file).unwrap(), before, "nothing written");

    // Not JSON at all: refused the same way.
    let r = f.post(
        &format!("/workflows/{USER_WORKFLOW_ID}"),
        &[("source", "{ not json")],
    );
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(std::fs::read(&file).unwrap(), before, "nothing written");

    let good = user_workflow_source("Run the smoke tests on staging.");
    let r = f.post(
        &format!("/workflows/{USER_WORKFLOW_ID}"),
        &[("source", &good)],
    );
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(
        r.headers.get("location").map(String::as_str),
        Some("/workflows/user.release_check?saved=1")
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), good);
    let page = f.get("/workflows/user.release_check?saved=1");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("id=\"saved\""), "{}", page.body);
}

/// lock: L-CONSOLE-EDIT-SOURCE, L-CONSOLE-INSPECT
#[test]
fn bundled_workflows_are_read_only_with_a_copy_and_no_form_posts_a_snapshot() {
    let f = Fixture::new();
    let list = f.get("/workflows");
    assert_eq!(list.status, 200);
    assert!(list.body.contains("id=\"workflows\""));
    assert!(
        list.body
            .contains("data-workflow-id=\"user.release_check\"")
    );
    assert!(list.body.contains("href=\"/workflows/wr.mr_review\""));
    // A workflow in a directory shows its file on this machine, its source ref on hover.
    let file = user_workflows(&f.data)
        .join("release_check.json")
        .display()
        .to_string();
    assert!(
        list.body.contains(&format!("<code>{file}</code>")),
        "the list names the file {file}: {}",
        list.body
    );

    let page = f.get("/workflows/wr.mr_review");
    assert_eq!(page.status, 200);
    for needle in [
        "id=\"read-only\"",
        "id=\"copy\"",
        "action=\"/workflows/wr.mr_review/copy\"",
        "name=\"newId\"",
        "value=\"user.mr_review\"",
        "id=\"source\"",
        "id=\"compiled\"",
        "class=\"workflow-hash\">sha256:",
        "id=\"pinned\"",
        "id=\"no-pinned-runs\"",
    ] {
        assert!(page.body.contains(needle), "{needle} missing");
    }
    assert!(!page.body.contains("id=\"edit\""), "no edit form");
    assert!(!page.body.contains("<textarea"), "no editable text");

    // Every form of an editable workflow posts its source, never a compiled snapshot.
    let page = f.get("/workflows/user.release_check");
    assert_eq!(page.body.matches("<form").count(), 1, "{}", page.body);
    assert!(page.body.contains("name=\"source\""));

    // A save of a bundled workflow is refused and writes nothing.
    let before = fingerprint(f.data.parent().unwrap());
    let source = f.get("/workflows/wr.mr_review");
    let r = f.post("/workflows/wr.mr_review", &[("source", &source.body)]);
    assert_eq!(r.status, 422, "{r:?}");
    assert!(r.body.contains("workrail workflows copy"), "{}", r.body);
    assert_eq!(fingerprint(f.data.parent().unwrap()), before);

    // The copy lands in the user directory and the browser goes to it.
    let r = f.post(
        "/workflows/wr.mr_review/copy",
        &[("newId", "user.my_review")],
    );
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(
        r.headers.get("location").map(String::as_str),
        Some("/workflows/user.my_review")
    );
    assert!(user_workflows(&f.data).join("my_review.json").is_file());
    // A second copy under the same id is refused (422), writing nothing.
    let before = fingerprint(f.data.parent().unwrap());
    let r = f.post(
        "/workflows/wr.mr_review/copy",
        &[("newId", "user.my_review")],
    );
    assert_eq!(r.status, 422, "{r:?}");
    assert!(r.body.contains("id=\"errors\""));
    assert_eq!(fingerprint(f.data.parent().unwrap()), before);

    let missing = f.get("/workflows/user.nothing_here");
    assert_eq!(missing.status, 404);
    assert!(missing.body.contains("user.nothing_here"));
    assert!(missing.body.contains("href=\"/workflows\""));
}

/// lock: L-CONSOLE-APPLIED-CONFIG
#[test]
fn the_config_page_shows_the_desired_hash_and_the_flags_form_writes_only_the_flags_file() {
    let f = Fixture::new();
    let page = f.get("/config");
    assert_eq!(page.status, 200);
    for needle in [
        "id=\"desired\"",
        "id=\"desired-hash\">sha256:",
        "id=\"flags\"",
        "action=\"/config/flags\"",
        "name=\"start_session\"",
        "id=\"save-flags\"",
        "id=\"servers\"",
        "id=\"no-servers\"",
    ] {
        assert!(page.body.contains(needle), "{needle} missing");
    }
    // The defaults as shown: checkpoint_workflow and resume_session on, start_session off.
    let r = f.post(
        "/config/flags",
        &[
            ("checkpoint_workflow", "on"),
            ("resume_session", "on"),
            ("start_session", "on"),
        ],
    );
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(
        r.headers.get("location").map(String::as_str),
        Some("/config?saved=1")
    );
    let features: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(f.data.join("config").join("features.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(features, serde_json::json!({"start_session": true}));
    let page = f.get("/config?saved=1");
    assert!(page.body.contains("id=\"saved\""));
    assert!(
        page.body
            .contains("name=\"start_session\" value=\"on\" checked")
    );
}

/// The preference defaults form writes only the changed keys into `config/preferences.json`,
/// refuses a value outside the closed set without writing, and the page shows what was saved.
#[test]
fn the_preferences_form_writes_only_the_changed_defaults() {
    let f = Fixture::new();
    let page = f.get("/config");
    for needle in [
        "id=\"preferences\"",
        "action=\"/config/preferences\"",
        "<option value=\"guided\" selected>",
        "<option value=\"conservative\" selected>",
    ] {
        assert!(page.body.contains(needle), "{needle} missing");
    }
    let r = f.post(
        "/config/preferences",
        &[
            ("autonomy", "full_auto_never_stop"),
            ("riskPolicy", "conservative"),
        ],
    );
    assert_eq!(r.status, 303, "{r:?}");
    let file = f.data.join("config").join("preferences.json");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(saved["autonomy"], "full_auto_never_stop", "{saved}");
    assert!(
        saved.get("riskPolicy").is_none(),
        "unchanged keys are not written: {saved}"
    );
    let page = f.get("/config?saved=1");
    assert!(
        page.body
            .contains("<option value=\"full_auto_never_stop\" selected>"),
        "{}",
        page.body
    );
    // A value outside the closed set is refused and writes nothing.
    let before = std::fs::read(&file).unwrap();
    let r = f.post("/config/preferences", &[("autonomy", "yolo")]);
    assert_eq!(r.status, 422, "{r:?}");
    assert!(r.body.contains("yolo"), "the error names the value");
    assert_eq!(std::fs::read(&file).unwrap(), before);
}

/// lock: L-CONSOLE-INSPECT
#[test]
fn the_workflow_and_config_pages_show_source_compiled_and_pinned_and_write_nothing() {
    let (root, data) = new_root();
    let demo = build_demo_data_dir(&data);
    let before = fingerprint(root.path());
    let console = Console::start(&data);
    let cookie = console.cookie();
    let get = |path: &str| send(&console, "GET", path, &[("Cookie", &cookie)], "");

    let list = get("/workflows");
    assert_eq!(list.status, 200);
    let page = get("/workflows/user.release_check");
    assert_eq!(page.status, 200);
    let (session, run) = &demo.user_run;
    let link = format!("/workflows/user.release_check?session={session}&amp;run={run}");
    assert!(page.body.contains("class=\"pinned-run\""), "{}", page.body);
    assert!(page.body.contains(&link), "{link} missing");
    let pinned = get(&format!(
        "/workflows/user.release_check?session={session}&run={run}"
    ));
    assert_eq!(pinned.status, 200);
    assert!(pinned.body.contains("class=\"pinned-hash\">sha256:"));
    assert!(pinned.body.contains("class=\"workflow-hash\">sha256:"));
    assert!(!pinned.body.contains("drift-warning"), "in sync");
    for id in ["wr.mr_review", "wr.coding_task", "wr.bug_investigation"] {
        assert_eq!(get(&format!("/workflows/{id}")).status, 200, "{id}");
    }
    let unknown_run = get("/workflows/user.release_check?run=run_nothing");
    assert_eq!(unknown_run.status, 200);
    assert!(unknown_run.body.contains("id=\"pinned-error\""));
    assert_eq!(get("/config").status, 200);
    drop(console);
    assert_eq!(fingerprint(root.path()), before, "a page wrote");
}

/// lock: L-CONSOLE-INSPECT
#[test]
fn a_source_that_no_longer_compiles_is_listed_with_its_error_and_can_be_fixed() {
    let f = Fixture::new();
    let file = user_workflows(&f.data).join("broken.json");
    std::fs::write(
        &file,
        r#"{"id": "user.broken", "name": "Broken", "steps": [{"id": "a", "title": "A"}]}"#,
    )
    .unwrap();
    let list = f.get("/workflows");
    assert!(
        list.body.contains("data-workflow-id=\"user.broken\""),
        "{}",
        list.body
    );
    assert!(list.body.contains("class=\"hash error\""), "{}", list.body);
    let page = f.get("/workflows/user.broken");
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("class=\"compile-error\""),
        "{}",
        page.body
    );
    assert!(!page.body.contains("class=\"workflow-hash\""));
    assert!(page.body.contains("id=\"edit\""));
    let fixed = r#"{"id": "user.broken", "name": "Broken", "description": "Fixed.", "steps": [{"id": "a", "title": "A", "prompt": "Do A."}]}"#;
    let r = f.post("/workflows/user.broken", &[("source", fixed)]);
    assert_eq!(r.status, 303, "{r:?}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), fixed);
    assert!(
        f.get("/workflows/user.broken")
            .body
            .contains("class=\"workflow-hash\">sha256:")
    );
}

/// An invalid `config/features.json` is named on the page, and the flags form leaves it as it is.
#[test]
fn an_invalid_flags_file_is_shown_and_never_overwritten() {
    let f = Fixture::new();
    let config = f.data.join("config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(
        config.join("features.json"),
        "{\"start_session\": \"maybe\"}",
    )
    .unwrap();
    let page = f.get("/config");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("id=\"desired-error\""), "{}", page.body);
    let before = fingerprint(f.data.parent().unwrap());
    let r = f.post("/config/flags", &[("start_session", "on")]);
    assert_eq!(r.status, 422, "{r:?}");
    assert_eq!(fingerprint(f.data.parent().unwrap()), before);
}

//! The Console end to end: the built `workrail console` over a data directory that `workrail
//! mcp` wrote (a fork, a blocked attempt, a never-stop run with a gap), spoken to over plain
//! HTTP/1.1.
//!
//! Guards against: pages that miss the elements of the Console's DOM contract for real data (a
//! fork as two outgoing edges, exactly one preferred tip, the blocked attempt count); a Console
//! reachable without its per-launch secret or with a wrong one; a link that does not become a
//! cookie and a clean redirect; state-changing requests from other origins; a corrupt session
//! shown without its salvage banner; a live version that does not move after an advance; a
//! Console that writes to the data directory while it reads; notes whose `<script>` reaches the
//! page as markup; and projections leaking into the MCP tool list.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::console_support;

use console_support::Mcp;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{Value, json};
use workrail_spec::tools::TOOL_NAMES;

const TIMEOUT: Duration = Duration::from_secs(60);
const MARKER: &str = "console-notes-marker";

// ---------------------------------------------------------------------------------------------
// Driving `workrail mcp` over stdio.

/// `workrail mcp` on `data_dir`, which is also its home and working directory.
fn start_mcp(data_dir: &Path) -> Mcp {
    let mut command = Command::new(env!("CARGO_BIN_EXE_workrail"));
    command
        .arg("mcp")
        .env("WORKRAIL_DATA_DIR", data_dir)
        .env("HOME", data_dir)
        .env_remove("WORKRAIL_WORKFLOW_DIRS")
        .env_remove("XDG_DATA_HOME")
        .current_dir(data_dir);
    Mcp::spawn(command)
}

fn ack(out: &Value, notes: &str) -> Value {
    json!({
        "stateToken": out["stateToken"],
        "ackToken": out["ackToken"],
        "output": {"notesMarkdown": notes},
    })
}

/// What the fixture holds.
struct Fixture {
    dir: tempfile::TempDir,
    /// A guided run with a fork at its root and a blocked attempt at its tip.
    forked: String,
    /// A never-stop run driven to completion without the required report (a gap).
    never_stop: String,
}

/// Drives `workrail mcp` to build the fixture's sessions.
fn build(dir: &Path) -> (String, String) {
    let mut mcp = start_mcp(dir);
    let s0 = mcp.exec("start_workflow", json!({"workflowId": "wr.mr_review"}));
    let s1 = mcp.exec("continue_workflow", ack(&s0, "context gathered"));
    let notes = format!(
        "## Survey\n\n{MARKER}: **bold** and `code`\n\n<script>alert('owned')</script>\n\n<img src=x onerror=alert(1)>"
    );
    let s2 = mcp.exec("continue_workflow", ack(&s1, &notes));
    // Rewind to the first response and acknowledge it again: a fork at the root.
    let back = mcp.exec("continue_workflow", json!({"stateToken": s0["stateToken"]}));
    let _fork = mcp.exec("continue_workflow", ack(&back, "forked branch"));
    // Back on the original branch up to the step that needs a report, acknowledged without it.
    let s3 = mcp.exec("continue_workflow", ack(&s2, "correctness checked"));
    let s4 = mcp.exec("continue_workflow", ack(&s3, "design checked"));
    let blocked = mcp.exec("continue_workflow", ack(&s4, "verified, no report"));
    assert_eq!(blocked["kind"], "blocked", "{blocked}");
    let forked = s0["session"]["sessionId"].as_str().unwrap().to_owned();

    let mut out = mcp.exec(
        "start_workflow",
        json!({"workflowId": "wr.mr_review", "preferences": {"autonomy": "full_auto_never_stop"}}),
    );
    let never_stop = out["session"]["sessionId"].as_str().unwrap().to_owned();
    // A checkpoint on the first node; the run goes on from the checkpoint node.
    out = mcp.exec(
        "checkpoint_workflow",
        json!({
            "stateToken": out["stateToken"],
            "checkpointToken": out["checkpointToken"],
            "output": {"notesMarkdown": "halfway"},
        }),
    );
    for n in 0..50 {
        if out["isComplete"] == true {
            break;
        }
        out = mcp.exec("continue_workflow", ack(&out, &format!("step {n}")));
    }
    assert_eq!(out["isComplete"], true, "{out}");
    mcp.close();
    (forked, never_stop)
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let (forked, never_stop) = build(dir.path());
        Fixture {
            dir,
            forked,
            never_stop,
        }
    })
}

// ---------------------------------------------------------------------------------------------
// The Console and a minimal HTTP client.

struct Console {
    child: Child,
    port: u16,
    secret: String,
    /// Where this launch's pages live, `/c/<nonce>` (decision D184).
    prefix: String,
    line: String,
}

impl Console {
    fn start(data_dir: &Path) -> Console {
        Console::start_with(data_dir, &[], None)
    }

    /// `workrail console` with extra arguments, and optionally its `PATH`.
    fn start_with(data_dir: &Path, args: &[&str], path: Option<&Path>) -> Console {
        Console::launch(data_dir, args, path, &[])
    }

    /// `workrail console` with extra environment variables.
    fn start_with_env(data_dir: &Path, env: &[(&str, &str)]) -> Console {
        Console::launch(data_dir, &[], None, env)
    }

    fn launch(
        data_dir: &Path,
        args: &[&str],
        path: Option<&Path>,
        env: &[(&str, &str)],
    ) -> Console {
        let mut command = Command::new(env!("CARGO_BIN_EXE_workrail"));
        if let Some(path) = path {
            command.env("PATH", path);
        }
        command.envs(env.iter().copied());
        let mut child = command
            .arg("--data-dir")
            .arg(data_dir)
            .arg("console")
            .args(args)
            .env("HOME", data_dir)
            .env_remove("WORKRAIL_DATA_DIR")
            .env_remove("WORKRAIL_WORKFLOW_DIRS")
            .env_remove("XDG_DATA_HOME")
            .current_dir(data_dir.parent().unwrap())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn workrail console");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        let line = line.trim_end().to_owned();
        let rest = line
            .strip_prefix("WorkRail Console: http://127.0.0.1:")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        let (base, secret) = rest.split_once("/?token=").unwrap();
        let (port, prefix) = base.split_once('/').unwrap();
        Console {
            child,
            port: port.parse().unwrap(),
            secret: secret.to_owned(),
            prefix: format!("/{prefix}"),
            line,
        }
    }

    fn cookie(&self) -> String {
        format!("workrail_console_{}={}", self.port, self.secret)
    }

    fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A request with the cookie.
    fn get(&self, path: &str) -> Reply {
        self.send("GET", path, &[("Cookie", &self.cookie())])
    }

    /// A page that must render: status 200, the body.
    fn page(&self, path: &str) -> String {
        let reply = self.get(path);
        assert_eq!(reply.status, 200, "{path}: {}", reply.body);
        reply.body
    }

    /// A request to a path of this launch (under its prefix); links and redirects in the reply
    /// read as plain paths.
    fn send(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut reply = self.send_raw(method, &format!("{}{path}", self.prefix), headers);
        reply.body = reply.body.replace(&format!("=\"{}/", self.prefix), "=\"/");
        if let Some(location) = reply.headers.get_mut("location")
            && let Some(rest) = location.strip_prefix(&self.prefix)
        {
            *location = rest.to_owned();
        }
        reply
    }

    /// A request to `path` as it is.
    fn send_raw(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        stream.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut request = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n",
            self.port
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        if method != "GET" {
            request.push_str("Content-Length: 0\r\n");
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).unwrap();
        Reply::parse(&raw)
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
struct Reply {
    status: u16,
    /// Lowercased names; repeated headers joined with "\n".
    headers: BTreeMap<String, String>,
    body: String,
}

impl Reply {
    fn parse(raw: &[u8]) -> Reply {
        let text = String::from_utf8_lossy(raw).into_owned();
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
        let mut headers: BTreeMap<String, String> = BTreeMap::new();
        for line in lines {
            let (name, value) = line.split_once(':').unwrap();
            headers
                .entry(name.trim().to_lowercase())
                .and_modify(|v| {
                    v.push('\n');
                    v.push_str(value.trim());
                })
                .or_insert_with(|| value.trim().to_owned());
        }
        let body = if headers
            .get("transfer-encoding")
            .is_some_and(|t| t.contains("chunked"))
        {
            dechunk(body)
        } else {
            body.to_owned()
        };
        Reply {
            status,
            headers,
            body,
        }
    }

    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        body = &rest[n + 2..];
    }
    out
}

/// Every value of `attr="…"` in `html`.
fn attr_values<'h>(html: &'h str, attr: &str) -> Vec<&'h str> {
    let needle = format!("{attr}=\"");
    html.match_indices(&needle)
        .map(|(i, _)| {
            let rest = &html[i + needle.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect()
}

/// The opening tags of `tag` elements whose class list has `class`.
fn tags_with_class<'h>(html: &'h str, tag: &str, class: &str) -> Vec<&'h str> {
    html.match_indices(&format!("<{tag} "))
        .map(|(i, _)| &html[i..i + html[i..].find('>').unwrap()])
        .filter(|t| {
            attr_values(t, "class")
                .first()
                .is_some_and(|c| c.split(' ').any(|c| c == class))
        })
        .collect()
}

/// Paths, kinds, lengths, modes, modification times and contents of everything under `root`.
fn fingerprint(root: &Path) -> BTreeMap<PathBuf, String> {
    use std::os::unix::fs::MetadataExt;
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let content = if meta.is_file() {
                format!("{:?}", std::fs::read(&path).unwrap())
            } else {
                String::new()
            };
            out.insert(
                path.strip_prefix(root).unwrap().to_path_buf(),
                format!(
                    "dir={} len={} mode={:o} mtime={}.{} {content}",
                    meta.is_dir(),
                    meta.len(),
                    meta.mode(),
                    meta.mtime(),
                    meta.mtime_nsec()
                ),
            );
            if meta.is_dir() {
                stack.push(path);
            }
        }
    }
    out
}

/// Copies a data directory as `cp -r` does, modes included (`keys/` stays private, D136).
/// The committed event segments of `session` under `data`, in order (a writer's temp files,
/// named with a leading dot, left out).
fn segments_of(data: &Path, session: &str) -> Vec<PathBuf> {
    let events = data.join("sessions").join(session).join("events");
    let mut segments: Vec<PathBuf> = std::fs::read_dir(&events)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    segments.sort();
    segments
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    std::fs::set_permissions(to, std::fs::metadata(from).unwrap().permissions()).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tests.

#[test]
fn the_link_line_names_loopback_and_a_fresh_secret() {
    let f = fixture();
    let a = Console::start(f.dir.path());
    let b = Console::start(f.dir.path());
    for c in [&a, &b] {
        assert_eq!(c.secret.len(), 64, "{}", c.line);
        assert!(
            c.secret
                .chars()
                .all(|ch| ch.is_ascii_digit() || ('a'..='f').contains(&ch)),
            "{}",
            c.line
        );
        assert_eq!(
            c.line,
            format!(
                "WorkRail Console: http://127.0.0.1:{}{}/?token={}",
                c.port, c.prefix, c.secret
            )
        );
    }
    assert_ne!(a.secret, b.secret, "a new secret on every launch");
}

#[test]
fn the_port_is_the_one_asked_for_and_a_failed_open_is_only_a_warning() {
    let f = fixture();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // No browser launcher can be found on an empty PATH.
    let empty = tempfile::tempdir().unwrap();
    let mut c = Console::start_with(
        f.dir.path(),
        &["--port", &port.to_string(), "--open"],
        Some(empty.path()),
    );
    assert_eq!(c.port, port, "{}", c.line);
    assert!(c.page("/").contains("<table id=\"sessions\">"));
    let mut stderr = c.child.stderr.take().unwrap();
    let _ = c.child.kill();
    let _ = c.child.wait();
    let mut warning = String::new();
    stderr.read_to_string(&mut warning).unwrap();
    assert!(
        warning.contains("warning: cannot open a browser"),
        "{warning}"
    );
}

#[test]
fn without_the_secret_or_with_a_wrong_one_every_request_is_refused() {
    let f = fixture();
    let c = Console::start(f.dir.path());
    let wrong = "0".repeat(64);
    for path in [
        "/".to_owned(),
        format!("/sessions/{}", f.forked),
        "/assets/console.css".to_owned(),
        "/assets/console.js".to_owned(),
        format!("/?token={wrong}"),
        format!("/?token={}", &c.secret[..63]),
    ] {
        let reply = c.send("GET", &path, &[]);
        assert_eq!(reply.status, 403, "{path}");
        assert!(
            reply.body.contains("<h1>This Console needs its link</h1>"),
            "{path}: {}",
            reply.body
        );
        assert!(reply.body.contains("workrail console"), "{}", reply.body);
    }
    let reply = c.send(
        "GET",
        "/",
        &[("Cookie", &format!("workrail_console_{}={wrong}", c.port))],
    );
    assert_eq!(reply.status, 403);
    assert_eq!(
        reply.header("set-cookie"),
        "",
        "no cookie for a wrong secret"
    );
}

#[test]
fn the_link_sets_the_cookie_and_redirects_to_the_same_address_without_the_token() {
    let f = fixture();
    let c = Console::start(f.dir.path());
    let reply = c.send("GET", &format!("/?q=review&token={}&page=1", c.secret), &[]);
    assert_eq!(reply.status, 303);
    assert_eq!(reply.header("location"), "/?q=review&page=1");
    assert_eq!(
        reply.header("set-cookie"),
        format!(
            "workrail_console_{}={}; HttpOnly; SameSite=Strict; Path={}/",
            c.port, c.secret, c.prefix
        )
    );
    let reply = c.send(
        "GET",
        &format!("/sessions/{}?token={}", f.forked, c.secret),
        &[],
    );
    assert_eq!(reply.status, 303);
    assert_eq!(reply.header("location"), format!("/sessions/{}", f.forked));
    // The cookie alone lets every page and asset in, with the security headers.
    for path in ["/", "/assets/console.css", "/assets/console.js"] {
        let reply = c.get(path);
        assert_eq!(reply.status, 200, "{path}");
        assert_eq!(
            reply.header("content-security-policy"),
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'"
        );
        assert_eq!(reply.header("x-content-type-options"), "nosniff");
        assert_eq!(reply.header("referrer-policy"), "no-referrer");
        assert_eq!(reply.header("cache-control"), "no-store");
    }
    // A refusal carries them too.
    let refused = c.send("GET", "/", &[]);
    assert!(
        refused
            .header("content-security-policy")
            .starts_with("default-src 'self'")
    );
}

#[test]
fn state_changing_requests_need_the_consoles_own_origin() {
    let f = fixture();
    let c = Console::start(f.dir.path());
    let cookie = c.cookie();
    let origin = c.origin();
    let evil_referer = format!("{origin}0/x");
    let refusals: [Vec<(&str, &str)>; 4] = [
        vec![("Cookie", &cookie)],
        vec![("Cookie", &cookie), ("Origin", "http://evil.example")],
        vec![("Cookie", &cookie), ("Referer", "http://evil.example/")],
        vec![("Cookie", &cookie), ("Referer", &evil_referer)],
    ];
    for headers in &refusals {
        for method in ["POST", "PUT", "DELETE"] {
            let reply = c.send(method, "/", headers);
            assert_eq!(reply.status, 403, "{method} {headers:?}");
            assert!(
                reply.body.contains("Cross-origin request refused"),
                "{}",
                reply.body
            );
        }
    }
    // Same origin passes the access rules (and meets the router: no page takes a POST).
    let referer = format!("{origin}/sessions");
    for headers in [
        vec![("Cookie", cookie.as_str()), ("Origin", origin.as_str())],
        vec![("Cookie", cookie.as_str()), ("Referer", referer.as_str())],
    ] {
        let reply = c.send("POST", "/", &headers);
        assert_eq!(reply.status, 405, "{headers:?}: {}", reply.body);
    }
    // Without the secret, the origin does not help.
    let reply = c.send("POST", "/", &[("Origin", origin.as_str())]);
    assert_eq!(reply.status, 403);
    assert!(reply.body.contains("This Console needs its link"));
}

/// decision: D182
#[test]
fn the_sessions_page_lists_every_session_with_its_status_health_and_gaps() {
    let f = fixture();
    let c = Console::start(f.dir.path());
    let html = c.page("/");
    assert!(html.contains("<nav id=\"nav\" aria-label=\"Console\">"));
    for href in ["href=\"/\"", "href=\"/workflows\"", "href=\"/config\""] {
        assert!(html.contains(href), "{href}");
    }
    assert!(html.contains("<form id=\"filter\" method=\"get\""));
    assert!(html.contains("<table id=\"sessions\">"));
    let rows = tags_with_class(&html, "tr", "session");
    assert_eq!(rows.len(), 2, "{html}");
    let row = |id: &str| {
        let start = html
            .find(&format!("data-session-id=\"{id}\""))
            .unwrap_or_else(|| panic!("no row for {id}"));
        &html[start..start + html[start..].find("</tr>").unwrap()]
    };
    let forked = row(&f.forked);
    // A blocked attempt alone leaves a guided run in progress (only a critical gap at the tip
    // blocks it, locks §2.1); the Console badges it blocked, the attempt being the latest at
    // the tip with nothing after it (decision D182).
    assert!(
        forked.contains("<td class=\"status\" data-console-blocked=\"true\">in_progress <span class=\"badge blocked\""),
        "{forked}"
    );
    assert!(
        forked.contains("<td class=\"workflow\">wr.mr_review</td>"),
        "{forked}"
    );
    assert!(forked.contains(">healthy</td>"), "{forked}");
    assert!(forked.contains(&format!(
        "class=\"session-link\" href=\"/sessions/{}\"",
        f.forked
    )));
    let never_stop = row(&f.never_stop);
    assert!(
        never_stop.contains(
            "<td class=\"status\" data-console-blocked=\"false\">complete_with_gaps</td>"
        ),
        "{never_stop}"
    );
    assert!(
        !never_stop.contains("<td class=\"gaps\">0</td>"),
        "{never_stop}"
    );
    // Filters.
    let gapped = c.page("/?status=complete_with_gaps");
    assert_eq!(tags_with_class(&gapped, "tr", "session").len(), 1);
    assert!(gapped.contains(&f.never_stop));
    // No run has the locked `blocked` status; the one blocked at its tip is found (D182).
    let blocked = c.page("/?status=blocked");
    let found = tags_with_class(&blocked, "tr", "session");
    assert_eq!(found.len(), 1, "{blocked}");
    assert!(found[0].contains(&f.forked), "{blocked}");
    let by_id = c.page(&format!("/?q={}", f.never_stop));
    assert_eq!(tags_with_class(&by_id, "tr", "session").len(), 1);
    let none = c.page("/?q=no-such-thing");
    assert!(none.contains("<p id=\"no-sessions\">"));
}

#[test]
fn an_empty_data_directory_shows_how_to_start_and_is_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let c = Console::start(&data);
    let html = c.page("/");
    assert!(html.contains("<p id=\"no-sessions\">"), "{html}");
    assert!(html.contains("start_workflow"), "{html}");
    assert!(!data.exists(), "the Console created the data directory");
}

#[test]
fn the_session_page_draws_the_fork_the_tip_and_the_blocked_attempt() {
    let f = fixture();
    let c = Console::start(f.dir.path());
    let html = c.page(&format!("/sessions/{}", f.forked));
    assert!(
        html.contains(&format!("<h1>Session <code>{}</code></h1>", f.forked)),
        "{html}"
    );
    assert!(!html.contains("salvage-banner"));
    assert!(html.contains("<ul class=\"legend\">"));
    let runs = tags_with_class(&html, "section", "run");
    assert_eq!(runs.len(), 1, "{html}");
    // The locked status, and the Console's word for an attempt blocked at the tip (D182).
    assert!(
        html.contains("<dd class=\"run-status\">in_progress <span class=\"badge blocked\">blocked at its tip</span></dd>"),
        "{html}"
    );
    assert!(html.contains("<svg class=\"dag\""));
    let nodes = tags_with_class(&html, "g", "node");
    // Root, its two children (original and fork), then three more on the original branch.
    assert_eq!(nodes.len(), 6, "{nodes:#?}");
    let tips = tags_with_class(&html, "g", "tip");
    assert_eq!(tips.len(), 1, "exactly one preferred tip: {tips:#?}");
    let blocked = tags_with_class(&html, "g", "blocked-attempt");
    assert_eq!(blocked.len(), 1, "{blocked:#?}");
    assert_eq!(attr_values(blocked[0], "data-blocked-attempts"), ["1"]);
    assert_eq!(
        attr_values(blocked[0], "data-node-id"),
        attr_values(tips[0], "data-node-id"),
        "the blocked attempt is at the tip"
    );
    for node in &nodes {
        assert!(
            matches!(attr_values(node, "data-kind")[..], ["step"]),
            "{node}"
        );
        let id = attr_values(node, "data-node-id")[0];
        assert!(html.contains(&format!("<a href=\"/sessions/{}/nodes/{id}\"", f.forked)));
    }
    let edges = tags_with_class(&html, "path", "edge");
    assert_eq!(edges.len(), 5, "{edges:#?}");
    let mut outgoing: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &edges {
        assert_eq!(attr_values(e, "data-kind"), ["acked_step"], "{e}");
        assert_eq!(attr_values(e, "data-cause").len(), 1, "{e}");
        *outgoing.entry(attr_values(e, "data-from")[0]).or_default() += 1;
    }
    assert_eq!(
        outgoing.values().filter(|&&n| n >= 2).count(),
        1,
        "one fork: {outgoing:?}"
    );
    // A node's title names its step.
    assert!(html.contains("<text class=\"title\""), "{html}");
}

#[test]
fn unknown_sessions_and_nodes_are_404_pages_that_link_home() {
    let f = fixture();
    let c = Console::start(f.dir.path());
    for path in [
        "/sessions/sess_aaaaaaaaaaaaaaaa".to_owned(),
        "/sessions/not-an-id".to_owned(),
        format!("/sessions/{}/nodes/node_aaaaaaaaaaaaaaaa", f.forked),
        "/sessions/sess_aaaaaaaaaaaaaaaa/version".to_owned(),
        "/nowhere".to_owned(),
    ] {
        let reply = c.get(&path);
        assert_eq!(reply.status, 404, "{path}");
        assert!(reply.body.contains("href=\"/\""), "{path}");
    }
    let reply = c.get("/sessions/sess_aaaaaaaaaaaaaaaa");
    assert!(
        reply.body.contains("sess_aaaaaaaaaaaaaaaa"),
        "{}",
        reply.body
    );
}

/// Every node page of a session, by node id.
fn node_pages(c: &Console, session: &str) -> BTreeMap<String, String> {
    let html = c.page(&format!("/sessions/{session}"));
    tags_with_class(&html, "g", "node")
        .iter()
        .map(|g| {
            let id = attr_values(g, "data-node-id")[0].to_owned();
            let page = c.page(&format!("/sessions/{session}/nodes/{id}"));
            (id, page)
        })
        .collect()
}

#[test]
fn node_pages_show_notes_safely_and_every_section() {
    let f = fixture();
    let c = Console::start(f.dir.path());
    let pages = node_pages(&c, &f.forked);
    assert_eq!(pages.len(), 6);
    for (id, html) in &pages {
        assert!(html.contains("<dl id=\"node-facts\">"), "{id}");
        assert!(html.contains(id.as_str()));
        for section in [
            "notes",
            "artifacts",
            "gaps",
            "blockers",
            "preferences",
            "capabilities",
            "divergences",
            "decisions",
        ] {
            assert!(
                html.contains(&format!("<section id=\"{section}\">")),
                "{id}: {section}"
            );
        }
        assert!(html.contains("<dd class=\"autonomy\">guided</dd>"), "{id}");
    }
    let noted: Vec<&String> = pages.values().filter(|p| p.contains(MARKER)).collect();
    assert_eq!(noted.len(), 1);
    let html = noted[0];
    assert!(html.contains("<strong>bold</strong>"), "{html}");
    assert!(
        html.contains("&lt;script&gt;"),
        "the script is shown as text: {html}"
    );
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(!html.contains("<img"), "{html}");
    // The one script element of the page is the Console's own.
    assert_eq!(html.matches("<script").count(), 1, "{html}");
    // The blocked attempt's blockers.
    let blocked: Vec<&String> = pages
        .values()
        .filter(|p| p.contains("class=\"attempt blocked\""))
        .collect();
    assert_eq!(blocked.len(), 1);
    let blockers = tags_with_class(blocked[0], "li", "blocker");
    assert!(!blockers.is_empty());
    assert!(
        blockers
            .iter()
            .all(|b| attr_values(b, "data-code")[0] == "MISSING_REQUIRED_OUTPUT"),
        "{blockers:?}"
    );
}

#[test]
fn a_never_stop_gap_is_listed_unresolved_on_its_node() {
    let f = fixture();
    let c = Console::start(f.dir.path());
    let pages = node_pages(&c, &f.never_stop);
    let gaps: Vec<&str> = pages
        .values()
        .flat_map(|p| tags_with_class(p, "li", "gap"))
        .collect();
    assert!(!gaps.is_empty(), "no gap shown");
    for g in &gaps {
        assert_eq!(attr_values(g, "data-resolved"), ["false"], "{g}");
        assert_eq!(attr_values(g, "data-severity").len(), 1, "{g}");
    }
    assert!(
        pages
            .values()
            .any(|p| p.contains("<dd class=\"autonomy\">full_auto_never_stop</dd>"))
    );
    // The checkpoint: a checkpoint node behind a checkpoint edge.
    let html = c.page(&format!("/sessions/{}", f.never_stop));
    let checkpoints: Vec<&str> = tags_with_class(&html, "g", "node")
        .into_iter()
        .filter(|g| attr_values(g, "data-kind") == ["checkpoint"])
        .collect();
    assert_eq!(checkpoints.len(), 1, "{html}");
    let to_checkpoint: Vec<&str> = tags_with_class(&html, "path", "edge")
        .into_iter()
        .filter(|e| attr_values(e, "data-kind") == ["checkpoint"])
        .collect();
    assert_eq!(to_checkpoint.len(), 1, "{html}");
    assert_eq!(
        attr_values(to_checkpoint[0], "data-to"),
        attr_values(checkpoints[0], "data-node-id")
    );
    assert_eq!(
        attr_values(to_checkpoint[0], "data-cause"),
        ["checkpoint_created"]
    );
    assert_eq!(tags_with_class(&html, "g", "tip").len(), 1);
}

/// lock: L-HEALTH-SALVAGE-READ-ONLY
/// decision: D183
#[test]
fn a_corrupt_tail_shows_the_salvage_banner_over_the_validated_prefix() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    copy_dir(f.dir.path(), &data);
    let segments = segments_of(&data, &f.forked);
    let last = segments.last().unwrap();
    let mut bytes = std::fs::read(last).unwrap();
    let i = bytes.len() / 2;
    bytes[i] ^= 0x01;
    std::fs::write(last, bytes).unwrap();

    let c = Console::start(&data);
    let html = c.page(&format!("/sessions/{}", f.forked));
    let start = html
        .find("<div id=\"salvage-banner\" role=\"alert\"")
        .unwrap_or_else(|| panic!("no banner: {html}"));
    let banner = &html[start..start + html[start..].find("</div>").unwrap()];
    for needle in [
        "corrupt_tail".to_owned(),
        "segment_digest_mismatch".to_owned(),
        "validated prefix".to_owned(),
        format!("workrail export {}", f.forked),
        format!("href=\"/sessions/{}/export.json\"", f.forked),
    ] {
        assert!(banner.contains(&needle), "{needle} missing from {banner}");
    }
    // Said once, and no `repair`: it restores snapshot pins only, not a damaged segment.
    assert_eq!(banner.matches("Salvage view").count(), 1, "{banner}");
    assert_eq!(
        banner
            .matches("<code>segment_digest_mismatch</code>")
            .count(),
        1,
        "{banner}"
    );
    assert_eq!(banner.matches("workrail export").count(), 1, "{banner}");
    assert!(!banner.contains("workrail repair"), "{banner}");
    // The download is the salvage bundle of the validated prefix.
    let bundle = c.get(&format!("/sessions/{}/export.json", f.forked));
    assert_eq!(bundle.status, 200);
    let bundle: serde_json::Value = serde_json::from_str(&bundle.body).unwrap();
    assert!(bundle.to_string().contains("salvage"), "a salvage bundle");
    // The prefix is shown: the DAG without the last segment (the blocked attempt).
    let nodes = tags_with_class(&html, "g", "node");
    assert_eq!(nodes.len(), 6);
    assert!(!html.contains("data-blocked-attempts"), "{html}");
    assert!(html.contains("in the validated prefix"), "{html}");
    let list = c.page("/?status=corrupt");
    assert_eq!(tags_with_class(&list, "tr", "session").len(), 1);
    assert!(list.contains(">corrupt_tail</td>"), "{list}");
}

/// A long session's older events are read again from their segments when the Console shows
/// them (D225), after the page was first shown. When one cannot be read, the page says why in
/// words and the timeline download fails rather than hand over part of the history; when one
/// is gone, the page shows what a fresh load finds (the salvage view), not an error about the
/// view the Console held before.
/// decision: D225
/// decision: D236
#[test]
fn a_history_that_cannot_be_read_again_is_said_in_words_and_a_lost_one_is_salvaged() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut mcp = start_mcp(&data);
    let s0 = mcp.exec("start_workflow", json!({"workflowId": "wr.mr_review"}));
    // The first step acknowledged again and again from its first response: one session of
    // many forks, far more events than the Console below keeps parsed.
    for n in 0..40 {
        let back = mcp.exec("continue_workflow", json!({"stateToken": s0["stateToken"]}));
        mcp.exec("continue_workflow", ack(&back, &format!("fork {n}")));
    }
    mcp.close();
    let session = s0["session"]["sessionId"].as_str().unwrap();
    let c = Console::start_with_env(&data, &[("WORKRAIL_RESIDENT_EVENTS", "64")]);
    let first = c.page(&format!("/sessions/{session}"));
    assert!(!first.contains("salvage-banner"), "{first}");
    assert!(
        tags_with_class(&first, "tr", "event").len() > 128,
        "{first}"
    );

    // The first segment cannot be read (a directory in its place): an I/O error, said in words.
    let segments = segments_of(&data, session);
    std::fs::remove_file(&segments[0]).unwrap();
    std::fs::create_dir(&segments[0]).unwrap();
    let unreadable = c.get(&format!("/sessions/{session}"));
    assert_eq!(unreadable.status, 500, "{}", unreadable.body);
    assert!(
        unreadable.body.contains("filesystem operation failed")
            && unreadable.body.contains("Retry"),
        "{}",
        unreadable.body
    );
    assert!(
        !unreadable.body.contains("Corruption {"),
        "{}",
        unreadable.body
    );
    let download = c.get(&format!("/sessions/{session}/timeline.json"));
    assert_eq!(download.status, 500, "{}", download.body);

    // Gone: the page is the salvage view a fresh load shows.
    std::fs::remove_dir(&segments[0]).unwrap();
    let html = c.page(&format!("/sessions/{session}"));
    let start = html
        .find("<div id=\"salvage-banner\" role=\"alert\"")
        .unwrap_or_else(|| panic!("no banner: {html}"));
    let banner = &html[start..start + html[start..].find("</div>").unwrap()];
    assert!(banner.contains("segment_missing"), "{banner}");
}

#[test]
fn the_version_moves_with_the_log_and_the_console_reads_beside_a_writer() {
    let dir = tempfile::tempdir().unwrap();
    let mut mcp = start_mcp(dir.path());
    let s0 = mcp.exec("start_workflow", json!({"workflowId": "wr.mr_review"}));
    let session = s0["session"]["sessionId"].as_str().unwrap().to_owned();
    let c = Console::start(dir.path());
    let url = format!("/sessions/{session}/version");
    let v1 = c.get(&url);
    assert_eq!(v1.status, 200);
    assert!(
        v1.header("content-type").starts_with("text/plain"),
        "{v1:?}"
    );
    assert_eq!(c.get(&url).body, v1.body, "stable while nothing changes");
    let page = c.page(&format!("/sessions/{session}"));
    assert!(
        page.contains(&format!("data-version=\"{}\"", v1.body)),
        "{page}"
    );
    assert!(
        page.contains(&format!("data-version-url=\"{url}\"")),
        "{page}"
    );
    // The writer goes on while the Console is up.
    let s1 = mcp.exec("continue_workflow", ack(&s0, "context"));
    let v2 = c.get(&url);
    assert_ne!(v2.body, v1.body);
    let _s2 = mcp.exec("continue_workflow", ack(&s1, "survey"));
    assert_ne!(c.get(&url).body, v2.body);
    assert_eq!(
        tags_with_class(&c.page(&format!("/sessions/{session}")), "g", "node").len(),
        3
    );
    mcp.close();
    let js = c.page("/assets/console.js");
    assert!(
        js.contains("data-version-url") && js.contains("2000"),
        "{js}"
    );
}

/// lock: L-HEALTH-SALVAGE-READ-ONLY
#[test]
fn a_full_crawl_writes_nothing_to_the_data_directory() {
    let f = fixture();
    let before = fingerprint(f.dir.path());
    let c = Console::start(f.dir.path());
    let _ = c.page("/");
    for session in [&f.forked, &f.never_stop] {
        let _ = c.page(&format!("/sessions/{session}/version"));
        let _ = node_pages(&c, session);
    }
    let _ = c.page("/?status=blocked&q=wr&page=2");
    drop(c);
    let after = fingerprint(f.dir.path());
    assert_eq!(before.len(), after.len(), "files appeared or vanished");
    for (path, print) in &before {
        assert_eq!(after.get(path), Some(print), "{} changed", path.display());
    }
}

/// lock: L-MCP-NO-PROJECTION-TOOLS
#[test]
fn the_console_adds_no_mcp_tool() {
    let dir = tempfile::tempdir().unwrap();
    let mut mcp = start_mcp(dir.path());
    let list = mcp.request("tools/list", json!({}));
    let mut names: Vec<String> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    // Under the default flags: every tool but the opt-in `start_session`, and nothing else.
    let mut expected: Vec<String> = TOOL_NAMES
        .iter()
        .filter(|name| **name != "start_session")
        .map(|s| (*s).to_owned())
        .collect();
    expected.sort();
    assert_eq!(names, expected);
    mcp.close();
}

/// decision: D171
/// A session with a three-lane parallel step under `fail-on-conflict`: the list shows one run
/// and its lanes (not four runs); the session page draws one run section, marks the parallel
/// node, and groups the lanes under that node with each lane's status, summary and files, the
/// conflicting file in a conflict line naming both lanes, and each lane run's own DAG.
#[test]
fn lanes_are_shown_under_their_parallel_step_with_the_conflict() {
    let (_root, data) = console_support::new_root();
    let demo = console_support::lanes::build_lanes_data_dir(&data);
    let c = Console::start(&data);
    let list = c.page("/");
    let row = list
        .split("<tr class=\"session\"")
        .find(|r| r.contains(&demo.session))
        .unwrap();
    assert!(
        row.contains("data-runs=\"1\"") && row.contains("data-lanes=\"3\""),
        "{row}"
    );
    assert!(row.contains("(+3 lanes)"), "{row}");
    assert!(!row.contains("project.routine-inspect"), "{row}");

    let page = c.page(&format!("/sessions/{}", demo.session));
    assert_eq!(
        tags_with_class(&page, "section", "run").len(),
        1,
        "lanes are no run sections of their own"
    );
    assert!(page.contains("1 run(s) · 3 lane(s)"), "{page}");
    let parallel = tags_with_class(&page, "g", "parallel");
    assert_eq!(parallel.len(), 1, "{page}");
    assert!(parallel[0].contains("data-lanes=\"3\""), "{}", parallel[0]);
    let groups = tags_with_class(&page, "section", "lanes");
    assert_eq!(groups.len(), 1, "{page}");
    assert!(
        groups[0].contains("data-step-id=\"fan-out\"")
            && groups[0].contains("data-merge-strategy=\"fail-on-conflict\""),
        "{}",
        groups[0]
    );
    let lanes = tags_with_class(&page, "li", "lane");
    assert_eq!(lanes.len(), 3, "{page}");
    for (i, (lane, status)) in lanes
        .iter()
        .zip(["completed", "partial", "completed"])
        .enumerate()
    {
        assert!(
            lane.contains(&format!("data-lane-index=\"{}\"", i + 1)),
            "{lane}"
        );
        assert!(
            lane.contains(&format!("data-run-id=\"{}\"", demo.lanes[i])),
            "{lane}"
        );
        assert!(
            lane.contains(&format!("data-status=\"{status}\"")),
            "{lane}"
        );
    }
    assert!(
        page.contains("Store half done: the index is untouched."),
        "{page}"
    );
    let conflicts = tags_with_class(&page, "li", "conflict");
    assert_eq!(conflicts.len(), 1, "{page}");
    assert!(
        conflicts[0].contains(&format!(
            "data-file=\"{}\"",
            console_support::lanes::CONFLICTING_FILE
        )) && conflicts[0].contains("data-lanes=\"3 1\"")
            && conflicts[0].contains("data-resolution=\"user-resolved\""),
        "{}",
        conflicts[0]
    );
    assert!(
        page.contains(
            "was changed by lanes 3 and 1 (user-resolved): the user decides which change to keep."
        ),
        "{page}"
    );
    assert_eq!(
        page.matches("<code class=\"file conflicting\">src/shared.rs</code>")
            .count(),
        2,
        "the conflicting file is marked in both lanes' files"
    );
    // Each lane's own run is drawn inside its lane.
    assert_eq!(tags_with_class(&page, "details", "lane-run").len(), 3);
    assert_eq!(page.matches("<svg class=\"dag\"").count(), 4, "{page}");
    // A lane's node page says whose lane it is and links back to the group.
    let parent_node = attr_values(groups[0], "data-parent-node")[0];
    let lane_nodes: Vec<&str> = tags_with_class(&page, "g", "node")
        .into_iter()
        .map(|t| attr_values(t, "data-node-id")[0])
        .filter(|n| *n != parent_node)
        .collect();
    let lane_node = lane_nodes.last().unwrap();
    let node_page = c.page(&format!("/sessions/{}/nodes/{lane_node}", demo.session));
    assert!(
        node_page.contains(&format!("lane 3 of run <code>{}</code>", demo.parent_run))
            && node_page.contains(&format!("#lanes-{parent_node}\"")),
        "{node_page}"
    );
}

/// decision: D183
/// Every read model a page is drawn from downloads as a JSON file, and the session as its
/// export bundle; each behind the secret like the pages.
#[test]
fn sessions_timelines_nodes_and_bundles_download_as_json() {
    let f = fixture();
    let c = Console::start(f.dir.path());
    let html = c.page(&format!("/sessions/{}", f.forked));
    let nodes = tags_with_class(&html, "g", "node");
    let node = attr_values(nodes[0], "data-node-id")[0].to_owned();
    for (path, file) in [
        ("/sessions.json".to_owned(), "sessions.json".to_owned()),
        (
            format!("/sessions/{}/session.json", f.forked),
            format!("{}.session.json", f.forked),
        ),
        (
            format!("/sessions/{}/timeline.json", f.forked),
            format!("{}.timeline.json", f.forked),
        ),
        (
            format!("/sessions/{}/export.json", f.forked),
            format!("{}.bundle.json", f.forked),
        ),
        (
            format!("/sessions/{}/nodes/{node}/node.json", f.forked),
            format!("{node}.node.json"),
        ),
    ] {
        assert!(
            html.contains(&path) || path == "/sessions.json" || path.contains("/nodes/"),
            "{path} linked"
        );
        let r = c.get(&path);
        assert_eq!(r.status, 200, "{path}: {r:?}");
        assert_eq!(r.header("content-type"), "application/json", "{path}");
        assert_eq!(
            r.header("content-disposition"),
            format!("attachment; filename=\"{file}\""),
            "{path}"
        );
        let value: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        assert!(!value.is_null(), "{path}");
    }
    let view: serde_json::Value =
        serde_json::from_str(&c.get(&format!("/sessions/{}/session.json", f.forked)).body).unwrap();
    assert_eq!(view["sessionId"], f.forked.as_str());
    let timeline: serde_json::Value =
        serde_json::from_str(&c.get(&format!("/sessions/{}/timeline.json", f.forked)).body)
            .unwrap();
    assert_eq!(timeline[0]["kind"], "session_created");
    assert_eq!(
        c.get("/sessions/sess_nosuchsession0000/session.json")
            .status,
        404
    );
}

/// decision: D184
/// The secret reaches no other server: the cookie is scoped to this launch's path (and named
/// after its port), every path outside that prefix is refused even with the cookie, and a
/// request addressed to another host name (DNS rebinding) is refused.
#[test]
fn the_cookie_is_scoped_to_the_launch_path_and_other_hosts_are_refused() {
    let f = fixture();
    let c = Console::start(f.dir.path());
    assert!(
        c.prefix.starts_with("/c/") && c.prefix.len() == 3 + 16,
        "{}",
        c.prefix
    );
    let reply = c.send("GET", &format!("/?token={}", c.secret), &[]);
    let cookie = reply.header("set-cookie");
    assert!(cookie.contains(&format!("Path={}/", c.prefix)), "{cookie}");
    assert!(
        !cookie.contains("Path=/;") && !cookie.ends_with("Path=/"),
        "{cookie}"
    );
    assert!(!cookie.contains("Domain"), "{cookie}");
    for path in [
        "/".to_owned(),
        format!("/sessions/{}", f.forked),
        "/c/".to_owned(),
    ] {
        let reply = c.send_raw("GET", &path, &[("Cookie", &c.cookie())]);
        assert_eq!(reply.status, 403, "{path} outside the launch's prefix");
        assert!(!reply.body.contains(&f.forked), "{path}");
    }
    // Another launch's prefix with this secret is refused too.
    let reply = c.send_raw(
        "GET",
        &format!("/c/0000000000000000/?token={}", c.secret),
        &[],
    );
    assert_eq!(reply.status, 403);
    // Another host name that resolves here.
    let mut stream = TcpStream::connect(("127.0.0.1", c.port)).unwrap();
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    stream
        .write_all(
            format!(
                "GET {}/ HTTP/1.1\r\nHost: rebound.example:{}\r\nCookie: {}\r\nConnection: close\r\n\r\n",
                c.prefix,
                c.port,
                c.cookie()
            )
            .as_bytes(),
        )
        .unwrap();
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).unwrap();
    let reply = Reply::parse(&raw);
    assert_eq!(reply.status, 421, "{reply:?}");
    assert!(!reply.body.contains(&f.forked));
}

/// decision: D184
/// `--open` hands the browser launcher a 0600 redirect file, never the tokened link: the
/// launcher's command line carries only the file's path.
#[test]
fn open_hands_the_launcher_a_private_redirect_file_not_the_token() {
    let f = fixture();
    let bin = tempfile::tempdir().unwrap();
    let runtime = tempfile::tempdir().unwrap();
    let args_file = bin.path().join("args");
    let launcher = bin.path().join("xdg-open");
    std::fs::write(
        &launcher,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > '{}'\n",
            args_file.display()
        ),
    )
    .unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut command = Command::new(env!("CARGO_BIN_EXE_workrail"));
    let mut child = command
        .arg("--data-dir")
        .arg(f.dir.path())
        .args(["console", "--port", "0", "--open"])
        .env("PATH", bin.path())
        .env("XDG_RUNTIME_DIR", runtime.path())
        .env("HOME", f.dir.path())
        .env_remove("WORKRAIL_DATA_DIR")
        .env_remove("WORKRAIL_WORKFLOW_DIRS")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("WorkRail Console: ")
        .unwrap()
        .to_owned();
    let secret = url.split_once("?token=").unwrap().1.to_owned();
    let deadline = std::time::Instant::now() + TIMEOUT;
    while !args_file.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the launcher never ran"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(100));
    let _ = child.kill();
    let _ = child.wait();
    let args = std::fs::read_to_string(&args_file).unwrap();
    assert!(
        !args.contains(&secret),
        "the token is on the launcher's command line: {args}"
    );
    let file = PathBuf::from(args.trim());
    assert!(file.starts_with(runtime.path()), "{args}");
    let page = std::fs::read_to_string(&file).unwrap();
    assert!(
        page.contains(&url),
        "the redirect file leads to the link: {page}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "only this user reads it");
    }
}

//! The Console in a real browser: headless Chromium driven over WebDriver (chromedriver), over a
//! data directory built by the real `workrail mcp` (a fork, a blocked attempt, a never-stop gap).
//!
//! Needs the Debian packages `chromium` and `chromium-driver` (`.ci/run` installs them). Where
//! they are missing the tests say so and pass, except under `CI` or
//! `WORKRAIL_BROWSER_TESTS=1`, where a missing browser fails them.
//!
//! Every page visited is saved as a PNG under `$CARGO_TARGET_TMPDIR/console-screenshots/`, and
//! also under `$WORKRAIL_SCREENSHOTS_DIR` when set (how `impl/docs/console/*.png` are made:
//! `WORKRAIL_SCREENSHOTS_DIR=impl/docs/console cargo test -p workrail --test suite console_browser::`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::console_support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use console_support::{
    Console, Demo, Mcp, USER_WORKFLOW_ID, build_demo_data_dir, copy_dir, corrupt_last_segment,
    new_root, user_workflow_source, user_workflows,
};
use serde_json::{Value, json};

const CHROMEDRIVER: &str = "chromedriver";
const CHROMIUM_CANDIDATES: [&str; 3] = [
    "/usr/lib/chromium/chromium",
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
];

/// The browser binary, or `None` (and a note) where the tests may be skipped.
fn chromium() -> Option<PathBuf> {
    let found = CHROMIUM_CANDIDATES
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file());
    let driver = Command::new(CHROMEDRIVER)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    match (found, driver) {
        (Some(binary), true) => Some(binary),
        _ => {
            let required = std::env::var_os("CI").is_some()
                || std::env::var("WORKRAIL_BROWSER_TESTS").is_ok_and(|v| v == "1");
            let message = "headless Chromium and chromedriver are needed for the Console's browser tests: install the Debian packages `chromium` and `chromium-driver` (`apt-get install -y chromium chromium-driver`)";
            assert!(!required, "{message}");
            eprintln!("skipped: {message}");
            None
        }
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A chromedriver process and one headless Chromium session driven through it.
struct Browser {
    runtime: tokio::runtime::Runtime,
    client: Option<fantoccini::Client>,
    driver: Child,
    _profile: tempfile::TempDir,
    shots: Vec<PathBuf>,
}

impl Browser {
    fn start(binary: &Path) -> Browser {
        Browser::start_with(binary, &[])
    }

    /// A browser with extra command-line switches (a colour scheme, say).
    fn start_with(binary: &Path, extra: &[&str]) -> Browser {
        let port = free_port();
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn chromedriver");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let profile = tempfile::tempdir().unwrap();
        let mut capabilities = serde_json::Map::new();
        let mut args = vec![
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--no-first-run".to_owned(),
            "--hide-scrollbars".to_owned(),
            "--window-size=1280,800".to_owned(),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": binary,
                "args": args,
            }),
        );
        let webdriver = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(30);
        let client = loop {
            let connector = hyper_util::client::legacy::connect::HttpConnector::new();
            let attempt = runtime.block_on(
                fantoccini::ClientBuilder::new(connector)
                    .capabilities(capabilities.clone())
                    .connect(&webdriver),
            );
            match attempt {
                Ok(client) => break client,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("no WebDriver session from chromedriver: {e}"),
            }
        };
        let browser = Browser {
            runtime,
            client: Some(client),
            driver,
            _profile: profile,
            shots: Vec::new(),
        };
        browser.resize(1280, 800);
        browser
    }

    fn client(&self) -> &fantoccini::Client {
        self.client.as_ref().unwrap()
    }

    fn goto(&self, url: &str) {
        self.runtime
            .block_on(self.client().goto(url))
            .unwrap_or_else(|e| panic!("goto {url}: {e}"));
    }

    fn url(&self) -> String {
        self.runtime
            .block_on(self.client().current_url())
            .unwrap()
            .to_string()
    }

    /// Runs `script` (a function body) in the page and returns its JSON result.
    fn js(&self, script: &str) -> Value {
        self.runtime
            .block_on(self.client().execute(script, Vec::new()))
            .unwrap_or_else(|e| panic!("script failed ({e}): {script}"))
    }

    /// Every element matching `selector`: its text, and the attributes named in `attrs`.
    fn all(&self, selector: &str) -> Vec<Value> {
        let script = format!(
            "return Array.from(document.querySelectorAll({})).map(e => {{
                const attrs = {{}};
                for (const a of e.attributes) attrs[a.name] = a.value;
                return {{text: (e.textContent || '').trim(), attrs, classes: Array.from(e.classList)}};
            }});",
            json!(selector)
        );
        match self.js(&script) {
            Value::Array(items) => items,
            other => panic!("querySelectorAll({selector}) gave {other}"),
        }
    }

    fn text(&self, selector: &str) -> String {
        let found = self.all(selector);
        assert!(
            !found.is_empty(),
            "no `{selector}` on {}:\n{}",
            self.url(),
            self.body_text()
        );
        found[0]["text"].as_str().unwrap().to_owned()
    }

    fn body_text(&self) -> String {
        self.js("return document.body ? document.body.innerText : '';")
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    fn resize(&self, width: u32, height: u32) {
        self.runtime
            .block_on(self.client().set_window_size(width, height))
            .unwrap();
    }

    fn delete_cookies(&self) {
        self.runtime
            .block_on(self.client().delete_all_cookies())
            .unwrap();
    }

    /// Saves a screenshot of the whole page as `<name>.png`: the window grows to the page's
    /// height (at most 4000 px) for the shot and then gets its size back.
    fn shot(&mut self, name: &str) {
        let (width, height) = self
            .runtime
            .block_on(self.client().get_window_size())
            .unwrap();
        let page = self
            .js("return Math.ceil(document.documentElement.scrollHeight);")
            .as_u64()
            .unwrap_or(height);
        // The window is taller than its viewport by the browser's own bars.
        let viewport = self
            .js("return window.innerHeight;")
            .as_u64()
            .unwrap_or(height);
        let bars = height.saturating_sub(viewport);
        let (width, height) = (width as u32, height as u32);
        let tall = u32::try_from(page + bars)
            .unwrap_or(4000)
            .clamp(height, 4000);
        if tall > height {
            self.resize(width, tall);
            // The viewport follows the window a moment later.
            let deadline = Instant::now() + Duration::from_secs(2);
            while self.js("return window.innerHeight;").as_u64().unwrap_or(0)
                < page.min(u64::from(tall))
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let png = self
            .runtime
            .block_on(self.client().screenshot())
            .expect("screenshot");
        if tall > height {
            self.resize(width, height);
        }
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        let mut dirs = vec![PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots")];
        if let Some(extra) = std::env::var_os("WORKRAIL_SCREENSHOTS_DIR") {
            let extra = PathBuf::from(extra);
            dirs.push(if extra.is_absolute() {
                extra
            } else {
                // Relative to the workspace root, where the documented command runs.
                Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(extra)
            });
        }
        for dir in dirs {
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join(format!("{name}.png"));
            std::fs::write(&path, &png).unwrap();
            self.shots.push(path);
        }
    }

    /// The page body is no wider than the viewport (wide parts scroll inside themselves).
    fn assert_no_horizontal_scroll(&self) {
        let widths = self.js(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth];",
        );
        let (scroll, client) = (widths[0].as_u64().unwrap(), widths[1].as_u64().unwrap());
        assert!(
            scroll <= client + 1,
            "{} scrolls sideways at {client}px wide (content {scroll}px)",
            self.url()
        );
    }

    /// Polls `check` for up to `secs` seconds.
    fn eventually(&self, secs: u64, what: &str, check: impl Fn(&Browser) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !check(self) {
            assert!(
                Instant::now() < deadline,
                "{what} did not happen within {secs}s on {}",
                self.url()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let _ = self.runtime.block_on(client.close());
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// A demo data directory, its Console, and a browser signed in with the printed link.
struct Setup {
    _root: tempfile::TempDir,
    data: PathBuf,
    demo: Demo,
    console: Console,
    browser: Browser,
}

fn setup() -> Option<Setup> {
    let binary = chromium()?;
    let (root, data) = new_root();
    let demo = build_demo_data_dir(&data);
    let console = Console::start(&data);
    let browser = Browser::start(&binary);
    browser.goto(&console.url);
    Some(Setup {
        _root: root,
        data,
        demo,
        console,
        browser,
    })
}

fn session_url(console: &Console, session: &str) -> String {
    format!("{}/sessions/{session}", console.origin)
}

#[test]
fn the_printed_link_signs_in_and_the_session_list_shows_every_run() {
    let Some(mut s) = setup() else { return };
    let b = &s.browser;
    // The secret leaves the address bar: the cookie carries it from now on.
    let url = b.url();
    assert!(
        !url.contains("token="),
        "redirected without the token: {url}"
    );
    let rows = b.all("table#sessions tr.session");
    let ids: Vec<&str> = rows
        .iter()
        .map(|r| r["attrs"]["data-session-id"].as_str().unwrap())
        .collect();
    assert_eq!(rows.len(), 3, "{ids:?}");
    for session in [
        &s.demo.forked_session,
        &s.demo.gap_session,
        &s.demo.user_run.0,
    ] {
        assert!(ids.contains(&session.as_str()), "{ids:?}");
    }
    // Newest first: the user workflow's run started last.
    assert_eq!(ids[0], s.demo.user_run.0, "{ids:?}");
    for session in [&s.demo.forked_session, &s.demo.gap_session] {
        let cell = b.text(&format!(
            "tr.session[data-session-id=\"{session}\"] td.workflow"
        ));
        assert!(cell.contains("wr.mr_review"), "{cell}");
    }
    for cell in b.all("table#sessions tr.session td.health") {
        assert_eq!(cell["text"], "healthy");
    }
    let statuses: Vec<String> = b
        .all("table#sessions tr.session td.status")
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_owned())
        .collect();
    for status in &statuses {
        assert!(
            ["in_progress", "blocked", "complete", "complete_with_gaps"].contains(&status.as_str()),
            "{statuses:?}"
        );
    }
    // The never-stop run's gap is counted.
    let gap_row = b.all(&format!(
        "tr.session[data-session-id=\"{}\"] td.gaps",
        s.demo.gap_session
    ));
    assert!(
        gap_row[0]["text"].as_str().unwrap().parse::<u32>().unwrap() >= 1,
        "{gap_row:?}"
    );
    s.browser.shot("sessions");
    // Filtering by text narrows the list to nothing for a word no run has.
    let b = &s.browser;
    b.goto(&format!("{}/?q=no-such-run-anywhere", s.console.origin));
    assert!(b.all("table#sessions tr.session").is_empty());
    // At phone width the list still fits.
    b.goto(&format!("{}/", s.console.origin));
    b.resize(390, 844);
    b.assert_no_horizontal_scroll();
    s.browser.shot("sessions-390");
}

/// The run DAG of a forked run: two branches out of the first step, exactly one preferred tip,
/// and the blocked attempt marked on its node.
#[test]
fn a_fork_is_drawn_with_two_branches_the_tip_marked_and_the_blocked_attempt() {
    let Some(mut s) = setup() else { return };
    let b = &s.browser;
    b.goto(&session_url(&s.console, &s.demo.forked_session));
    assert!(b.text("h1").contains(&s.demo.forked_session));
    let nodes = b.all("section.run svg.dag g.node");
    assert_eq!(
        nodes.len(),
        6,
        "five steps on the original branch and the fork: {nodes:?}"
    );
    let tips = b.all("section.run svg.dag g.node.tip");
    assert_eq!(tips.len(), 1, "exactly one preferred tip");
    let edges = b.all("section.run svg.dag path.edge[data-kind=\"acked_step\"]");
    let mut out_degree = std::collections::BTreeMap::<String, usize>::new();
    for e in &edges {
        *out_degree
            .entry(e["attrs"]["data-from"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert!(
        out_degree.values().any(|n| *n == 2),
        "a node with two outgoing acked_step edges: {out_degree:?}"
    );
    let blocked = b.all("section.run svg.dag g.node.blocked-attempt");
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    assert_eq!(blocked[0]["attrs"]["data-blocked-attempts"], "1");
    let titles: Vec<String> = b
        .all("section.run svg.dag g.node text.title")
        .iter()
        .map(|t| t["text"].as_str().unwrap().to_owned())
        .collect();
    assert!(titles.iter().all(|t| !t.is_empty()), "{titles:?}");
    s.browser.shot("session-fork");

    // The blocked attempt's node page lists its blockers.
    let blocked_node = blocked[0]["attrs"]["data-node-id"].as_str().unwrap();
    let b = &s.browser;
    b.goto(&format!(
        "{}/nodes/{blocked_node}",
        session_url(&s.console, &s.demo.forked_session)
    ));
    let blockers = b.all("#blockers div.attempt.blocked li.blocker");
    assert!(!blockers.is_empty(), "{}", b.body_text());
    assert_eq!(blockers[0]["attrs"]["data-code"], "MISSING_REQUIRED_OUTPUT");
    assert!(!blockers[0]["text"].as_str().unwrap().is_empty());
    s.browser.shot("node-blocked");

    // At phone width the graph scrolls inside its own box, not the page.
    let b = &s.browser;
    b.goto(&session_url(&s.console, &s.demo.forked_session));
    b.resize(390, 844);
    b.assert_no_horizontal_scroll();
    s.browser.shot("session-fork-390");
}

/// Notes are rendered Markdown, and a script in them never runs.
#[test]
fn notes_render_as_markdown_and_a_script_in_them_never_runs() {
    let Some(mut s) = setup() else { return };
    let b = &s.browser;
    b.goto(&session_url(&s.console, &s.demo.forked_session));
    let nodes: Vec<String> = b
        .all("section.run svg.dag g.node")
        .iter()
        .map(|n| n["attrs"]["data-node-id"].as_str().unwrap().to_owned())
        .collect();
    // The node that shows the first step's notes.
    let shown = nodes.iter().any(|node| {
        b.goto(&format!(
            "{}/nodes/{node}",
            session_url(&s.console, &s.demo.forked_session)
        ));
        b.text("#notes").contains("the diff")
    });
    assert!(shown, "no node page shows the first step's notes");
    let notes = b.all("#notes strong");
    assert!(
        notes.iter().any(|n| n["text"] == "the diff"),
        "bold text is rendered: {}",
        b.body_text()
    );
    assert_eq!(b.all("#notes li").len(), 2, "the list is rendered");
    assert!(b.all("#notes script").is_empty(), "no script element");
    assert_eq!(
        b.js("return typeof window.__workrailPwned;"),
        "undefined",
        "the script in the notes did not run"
    );
    assert!(!b.all("#preferences").is_empty());
    s.browser.shot("node-notes");
}

/// A never-stop run shows its gap on the node, unresolved.
#[test]
fn a_never_stop_gap_is_shown_on_its_node() {
    let Some(mut s) = setup() else { return };
    let b = &s.browser;
    b.goto(&session_url(&s.console, &s.demo.gap_session));
    let nodes: Vec<String> = b
        .all("section.run svg.dag g.node")
        .iter()
        .map(|n| n["attrs"]["data-node-id"].as_str().unwrap().to_owned())
        .collect();
    assert!(nodes.len() >= 4, "{nodes:?}");
    let mut found = None;
    for node in &nodes {
        b.goto(&format!(
            "{}/nodes/{node}",
            session_url(&s.console, &s.demo.gap_session)
        ));
        let gaps = b.all("#gaps li.gap");
        if !gaps.is_empty() {
            found = Some(gaps);
            break;
        }
    }
    let gaps = found.expect("a node of the never-stop run shows a gap");
    assert_eq!(gaps[0]["attrs"]["data-resolved"], "false", "{gaps:?}");
    assert!(gaps[0]["attrs"]["data-severity"].is_string(), "{gaps:?}");
    s.browser.shot("node-gap");
}

/// A damaged copy shows its validated prefix under a banner that names the damage and the way
/// out.
#[test]
fn a_corrupted_copy_shows_the_salvage_banner() {
    let Some(binary) = chromium() else { return };
    let (_root, data) = new_root();
    let demo = build_demo_data_dir(&data);
    let (_copy_root, copy) = new_root();
    copy_dir(&data, &copy);
    corrupt_last_segment(&copy, &demo.forked_session);
    let console = Console::start(&copy);
    let mut browser = Browser::start(&binary);
    browser.goto(&console.url);
    let health = browser.all(&format!(
        "tr.session[data-session-id=\"{}\"] td.health",
        demo.forked_session
    ));
    assert_eq!(health[0]["text"], "corrupt_tail", "{health:?}");
    browser.goto(&session_url(&console, &demo.forked_session));
    let banner = browser.text("#salvage-banner");
    for words in [
        "corrupt_tail",
        "validated prefix",
        &format!("workrail export {}", demo.forked_session),
    ] {
        assert!(banner.contains(words), "{words:?} missing from {banner:?}");
    }
    assert!(
        !browser.all("section.run svg.dag g.node").is_empty(),
        "the validated prefix is still shown"
    );
    browser.shot("session-salvage");
}

/// Without the printed link nothing is shown; a wrong secret is refused the same way.
#[test]
fn a_request_without_the_secret_is_refused() {
    let Some(mut s) = setup() else { return };
    let b = &s.browser;
    b.delete_cookies();
    b.goto(&format!("{}/", s.console.origin));
    assert!(b.text("h1").contains("This Console needs its link"));
    assert!(b.all("table#sessions").is_empty());
    assert!(!b.body_text().contains(&s.demo.forked_session));
    s.browser.shot("refused");
    let b = &s.browser;
    b.goto(&format!("{}/?token={}", s.console.origin, "0".repeat(64)));
    assert!(b.text("h1").contains("This Console needs its link"));
    b.goto(&session_url(&s.console, &s.demo.forked_session));
    assert!(b.text("h1").contains("This Console needs its link"));
    // The printed link still works afterwards.
    b.goto(&s.console.url);
    assert_eq!(b.all("table#sessions tr.session").len(), 3);
}

/// The session page follows an agent's progress without a reload.
#[test]
fn the_session_page_follows_new_advances_without_a_reload() {
    let Some(s) = setup() else { return };
    let b = &s.browser;
    b.goto(&session_url(&s.console, &s.demo.forked_session));
    let before = b.all("section.run svg.dag g.node").len();
    let mut mcp = Mcp::start(&s.data);
    mcp.ack(
        &s.demo.forked_tip,
        "The agent goes on while the page is open.",
    );
    mcp.close();
    b.eventually(15, "the new node appearing", |b| {
        b.all("section.run svg.dag g.node").len() == before + 1
    });
}

/// The Workflows page lists every source with its access; the bundled ones are read-only with a
/// copy to an editable namespace.
#[test]
fn workflows_are_listed_and_bundled_ones_are_read_only_with_a_copy() {
    let Some(mut s) = setup() else { return };
    let b = &s.browser;
    b.goto(&format!("{}/workflows", s.console.origin));
    let rows = b.all("table#workflows tr.workflow");
    let ids: Vec<&str> = rows
        .iter()
        .map(|r| r["attrs"]["data-workflow-id"].as_str().unwrap())
        .collect();
    for id in ["wr.mr_review", "wr.coding_task", USER_WORKFLOW_ID] {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
    }
    let access = |id: &str| b.text(&format!("tr.workflow[data-workflow-id=\"{id}\"] td.access"));
    assert_eq!(access("wr.mr_review"), "read-only");
    assert_eq!(access(USER_WORKFLOW_ID), "editable");
    s.browser.shot("workflows");

    let b = &s.browser;
    b.goto(&format!("{}/workflows/wr.mr_review", s.console.origin));
    assert!(!b.all("p#read-only").is_empty(), "{}", b.body_text());
    assert!(
        b.all("form#edit").is_empty(),
        "a bundled workflow has no edit form"
    );
    assert!(b.text("section#source pre").contains("\"wr.mr_review\""));
    assert!(
        b.text("section#compiled code.workflow-hash")
            .starts_with("sha256:")
    );
    b.js(
        "document.querySelector('form#copy input[name=newId]').value = 'user.my_review'; \
         document.querySelector('form#copy').submit(); return null;",
    );
    b.eventually(10, "the copy's page", |b| {
        b.url().ends_with("/workflows/user.my_review")
    });
    assert!(!b.all("form#edit textarea[name=source]").is_empty());
    let copied = user_workflows(&s.data).join("my_review.json");
    let copied = std::fs::read_dir(user_workflows(&s.data))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .contains("\"user.my_review\"")
        })
        .unwrap_or_else(|| panic!("no copy in the user directory (expected like {copied:?})"));
    assert!(copied.starts_with(user_workflows(&s.data)));
    s.browser.shot("workflow-bundled");
}

/// lock: L-CONSOLE-EDIT-SOURCE, L-CONSOLE-INSPECT
/// An edit that does not compile is refused at its field and writes nothing; a good one is
/// saved into the source file; the run that pinned the old version then shows the drift, with
/// its pinned snapshot beside the new compiled one.
#[test]
fn an_edit_is_rejected_with_its_pointer_then_saved_and_the_pinned_run_shows_drift() {
    let Some(mut s) = setup() else { return };
    let file = user_workflows(&s.data).join("release_check.json");
    let before = std::fs::read_to_string(&file).unwrap();
    let (session, run) = s.demo.user_run.clone();
    let page = format!("{}/workflows/{USER_WORKFLOW_ID}", s.console.origin);
    let pinned_page = format!("{page}?session={session}&run={run}");
    let b = &s.browser;
    b.goto(&pinned_page);
    assert!(
        b.all("#drift-warning").is_empty(),
        "in sync before the edit"
    );
    let pinned_hash = b.text("section#pinned code.pinned-hash");
    assert_eq!(b.text("section#compiled code.workflow-hash"), pinned_hash);

    // A step without a prompt: refused with the pointer at that field, nothing written.
    let mut broken: Value = serde_json::from_str(&before).unwrap();
    broken["steps"][1].as_object_mut().unwrap().remove("prompt");
    let set_and_save = |b: &Browser, text: &str| {
        b.js(&format!(
            "document.querySelector('form#edit textarea[name=source]').value = {}; \
             document.querySelector('form#edit button#save').click(); return null;",
            json!(text)
        ));
    };
    b.goto(&page);
    set_and_save(b, &serde_json::to_string_pretty(&broken).unwrap());
    b.eventually(10, "the errors", |b| {
        !b.all("ul#errors li.error").is_empty()
    });
    let errors = b.all("ul#errors li.error");
    assert!(
        errors.iter().any(|e| e["attrs"]["data-pointer"]
            .as_str()
            .unwrap()
            .starts_with("/steps/1")),
        "{errors:?}"
    );
    assert!(
        b.js("return document.querySelector('form#edit textarea[name=source]').value;")
            .as_str()
            .unwrap()
            .contains("Smoke test"),
        "the submitted text is kept"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        before,
        "nothing written"
    );
    s.browser.shot("workflow-edit-rejected");

    // Fixed: saved into the source file.
    let b = &s.browser;
    set_and_save(
        b,
        &user_workflow_source("Run the smoke tests on staging first."),
    );
    b.eventually(10, "the saved notice", |b| !b.all("p#saved").is_empty());
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains("on staging first")
    );

    // The run pinned the old version: drift, both hashes named, the pinned snapshot unchanged.
    b.goto(&pinned_page);
    let warning = b.all("#drift-warning");
    assert_eq!(warning.len(), 1, "{}", b.body_text());
    assert_eq!(warning[0]["attrs"]["data-status"], "changed");
    let current_hash = b.text("section#compiled code.workflow-hash");
    assert_ne!(current_hash, pinned_hash);
    let text = warning[0]["text"].as_str().unwrap();
    assert!(
        text.contains(&pinned_hash) && text.contains(&current_hash),
        "{text}"
    );
    assert_eq!(b.text("section#pinned code.pinned-hash"), pinned_hash);
    assert!(
        b.text("section#pinned pre")
            .contains("Run the smoke tests.")
    );
    s.browser.shot("workflow-drift");
    let b = &s.browser;
    b.resize(390, 844);
    b.assert_no_horizontal_scroll();
    s.browser.shot("workflow-drift-390");
}

/// lock: L-CONSOLE-APPLIED-CONFIG, L-CONSOLE-RESTART-TRIGGERS
/// A running server's applied config is shown against the desired one; switching on a flag
/// that gates a tool makes that server restart-required, naming the trigger.
#[test]
fn desired_versus_applied_after_a_flag_change() {
    let Some(mut s) = setup() else { return };
    let server = Mcp::start(&s.data);
    let b = &s.browser;
    b.goto(&format!("{}/config", s.console.origin));
    b.eventually(10, "the running server", |b| {
        !b.all("div.server").is_empty()
    });
    let servers = b.all("div.server");
    assert_eq!(servers.len(), 1, "{servers:?}");
    assert_eq!(servers[0]["attrs"]["data-restart-required"], "false");
    assert_eq!(
        servers[0]["attrs"]["data-applied-hash"].as_str().unwrap(),
        b.text("code#desired-hash"),
        "in sync: applied is desired"
    );
    assert!(b.all("span.restart-badge").is_empty());
    s.browser.shot("config-in-sync");

    // `start_session` is off by default and gates its tool.
    let b = &s.browser;
    b.js(
        "document.querySelector('form#flags input[name=start_session]').checked = true; \
         document.querySelector('form#flags button#save-flags').click(); return null;",
    );
    b.eventually(10, "the restart badge", |b| {
        !b.all("div.server[data-restart-required=\"true\"] span.restart-badge")
            .is_empty()
    });
    let kinds: Vec<String> = b
        .all("div.server li.trigger")
        .iter()
        .map(|t| t["attrs"]["data-kind"].as_str().unwrap().to_owned())
        .collect();
    assert!(kinds.contains(&"tool_set_changed".to_owned()), "{kinds:?}");
    assert!(
        kinds.contains(&"tool_gating_flag_changed".to_owned()),
        "{kinds:?}"
    );
    let features = std::fs::read_to_string(s.data.join("config").join("features.json")).unwrap();
    assert!(
        features.contains("\"start_session\": true") || features.contains("\"start_session\":true"),
        "{features}"
    );
    s.browser.shot("config-restart-required");

    // A preference default is runtime-safe: listed as such, no new trigger.
    let b = &s.browser;
    b.js(
        "document.querySelector('form#preferences select[name=autonomy]').value = 'full_auto_never_stop'; \
         document.querySelector('form#preferences button#save-preferences').click(); return null;",
    );
    b.eventually(10, "the runtime-safe change", |b| {
        !b.all("div.server li.runtime-safe").is_empty()
    });
    let after: Vec<String> = b
        .all("div.server li.trigger")
        .iter()
        .map(|t| t["attrs"]["data-kind"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(after, kinds, "a preference default adds no restart trigger");
    server.close();
}

/// decision: D171
/// A session whose parallel step ran three lanes under `fail-on-conflict`, two of them
/// changing the same file: the browser shows one run, the parallel node marked in its graph,
/// and under it the three lanes with their statuses and summaries and the conflict naming the
/// file and both lanes; a lane's own run opens in place; nothing scrolls sideways.
#[test]
fn lanes_and_their_conflict_are_shown_under_the_parallel_step() {
    let Some(binary) = chromium() else { return };
    let (_root, data) = new_root();
    let demo = console_support::lanes::build_lanes_data_dir(&data);
    let console = Console::start(&data);
    let mut browser = Browser::start(&binary);
    let b = &browser;
    b.goto(&console.url);
    // The list shows the session as one run with three lanes.
    let label = b.text(&format!(
        "tr.session[data-session-id=\"{}\"] td.label",
        demo.session
    ));
    assert!(label.contains("(+3 lanes)"), "{label}");
    b.goto(&session_url(&console, &demo.session));
    assert_eq!(b.all("section.run").len(), 1, "{}", b.body_text());
    let parallel = b.all("section.run svg.dag g.node.parallel");
    assert_eq!(parallel.len(), 1, "{parallel:?}");
    let node = parallel[0]["attrs"]["data-node-id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The group hangs under that node, inside the run's section.
    let group = format!("section.run section.lanes[data-parent-node=\"{node}\"]");
    assert_eq!(b.all(&group).len(), 1, "{}", b.body_text());
    assert!(
        b.text(&format!("{group} h3"))
            .contains("Inspect in parallel")
    );
    let lanes = b.all(&format!("{group} li.lane"));
    let seen: Vec<(String, String)> = lanes
        .iter()
        .map(|l| {
            (
                l["attrs"]["data-run-id"].as_str().unwrap().to_owned(),
                l["attrs"]["data-status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (demo.lanes[0].clone(), "completed".to_owned()),
            (demo.lanes[1].clone(), "partial".to_owned()),
            (demo.lanes[2].clone(), "completed".to_owned()),
        ]
    );
    assert!(
        b.text(&format!(
            "{group} li.lane[data-lane-index=\"2\"] .lane-summary"
        ))
        .contains("Store half done")
    );
    let file = console_support::lanes::CONFLICTING_FILE;
    let conflict = b.all(&format!("{group} li.conflict[data-file=\"{file}\"]"));
    assert_eq!(conflict.len(), 1, "{}", b.body_text());
    let words = conflict[0]["text"].as_str().unwrap();
    assert!(
        words.contains(file)
            && words.contains("lanes 3 and 1")
            && words.contains("the user decides"),
        "{words}"
    );
    // The conflict is on screen, not hidden: it has a box.
    let size = b.js(&format!(
        "const r = document.querySelector({}).getBoundingClientRect(); return [r.width, r.height];",
        json!(format!("{group} li.conflict"))
    ));
    assert!(
        size[0].as_f64().unwrap() > 100.0 && size[1].as_f64().unwrap() > 10.0,
        "{size}"
    );
    assert_eq!(b.all(&format!("{group} code.file.conflicting")).len(), 2);
    // A lane's run opens in place with its own graph.
    b.js(&format!(
        "document.querySelector({}).open = true; return null;",
        json!(format!(
            "{group} li.lane[data-lane-index=\"1\"] details.lane-run"
        ))
    ));
    let lane_nodes = b.all(&format!(
        "{group} li.lane[data-lane-index=\"1\"] details.lane-run svg.dag g.node"
    ));
    assert_eq!(
        lane_nodes.len(),
        3,
        "look, lane-report, complete: {lane_nodes:?}"
    );
    b.assert_no_horizontal_scroll();
    browser.shot("session-lanes");
    let b = &browser;
    b.resize(390, 844);
    b.assert_no_horizontal_scroll();
    browser.shot("session-lanes-390");
}

/// decision: D181
/// The never-stop run went to its end (seven layers) and was forked at its first step. After
/// "fit", at 1,280x800 and at 390x844, every layer's nodes lie inside the graph's box, edges
/// carry arrowheads, the fork is labelled, the tip's path is marked, and nothing scrolls
/// sideways; on the phone the run is drawn top to bottom. Zoom changes the view and "fit"
/// brings the whole run back.
#[test]
fn the_graph_fits_its_box_at_every_width_with_every_layer_after_fit() {
    let Some(mut s) = setup() else { return };
    let url = session_url(&s.console, &s.demo.gap_session);
    for (width, height, name) in [
        (1280, 800, "session-graph"),
        (390, 844, "session-graph-390"),
    ] {
        let b = &s.browser;
        b.resize(width, height);
        b.goto(&url);
        b.eventually(5, "the graph's tools", |b| {
            !b.all("figure.graph .graph-tools:not([hidden]) button.fit")
                .is_empty()
        });
        b.js("document.querySelector('figure.graph button.zoom-in').click(); return null;");
        let zoomed =
            b.js("return document.querySelector('figure.graph svg.dag').getAttribute('viewBox');");
        b.js("document.querySelector('figure.graph button.fit').click(); return null;");
        let fitted =
            b.js("return document.querySelector('figure.graph svg.dag').getAttribute('viewBox');");
        assert_ne!(zoomed, fitted, "zoom changed the view and fit restored it");
        let layers: std::collections::BTreeSet<String> = b
            .all("section.run svg.dag g.node")
            .iter()
            .map(|n| n["attrs"]["data-layer"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(layers.len(), 7, "{layers:?}");
        let outside = b.js(
            "const box = document.querySelector('section.run .graph-box').getBoundingClientRect();
             return Array.from(document.querySelectorAll('section.run svg.dag g.node rect'))
               .map(r => r.getBoundingClientRect())
               .filter(r => r.width < 20 || r.left < box.left - 1 || r.right > box.right + 1
                 || r.top < box.top - 1 || r.bottom > box.bottom + 1).length;",
        );
        assert_eq!(outside, 0, "every node inside the box at {width}px");
        let edges = b.all("section.run svg.dag path.edge");
        assert!(edges.iter().all(|e| {
            e["attrs"]["marker-end"]
                .as_str()
                .is_some_and(|m| m.starts_with("url(#arrow"))
        }));
        let forks = b.all("section.run svg.dag text.edge-label");
        assert_eq!(forks.len(), 1, "{forks:?}");
        assert!(forks[0]["text"].as_str().unwrap().contains("fork"));
        assert!(!b.all("section.run svg.dag g.node.tip.on-path").is_empty());
        let subs: Vec<String> = b
            .all("section.run svg.dag g.node text.sub")
            .iter()
            .map(|t| t["text"].as_str().unwrap().to_owned())
            .collect();
        assert!(
            subs.iter()
                .all(|t| t.starts_with("step ") && !t.contains('#')),
            "{subs:?}"
        );
        if width < 600 {
            assert_eq!(
                b.all("section.run svg.dag")[0]["attrs"]["data-orientation"],
                "down"
            );
        }
        b.assert_no_horizontal_scroll();
        s.browser.shot(name);
    }
}

/// decision: D182
/// The list at 1,280 px: it fits; a run blocked at its tip (its locked status stays
/// `in_progress`) is found by the `blocked` filter and badged, while the forked run whose
/// blocked branch was left for a newer one is not; counts per status; relative times with the
/// absolute time on hover; search finds a session by a word of its notes only.
#[test]
fn the_list_fits_finds_blocked_runs_counts_statuses_and_searches_notes() {
    let Some(mut s) = setup() else { return };
    let blocked = console_support::build_blocked_run(&s.data, "Context: the zanzibar migration.");
    let b = &s.browser;
    b.resize(1280, 800);
    b.goto(&format!("{}/", s.console.origin));
    b.assert_no_horizontal_scroll();
    let overflow = b.js(
        "const d = document.querySelector('div.scroll'); return d.scrollWidth - d.clientWidth;",
    );
    assert!(
        overflow.as_i64().unwrap() <= 0,
        "the table fits: {overflow}"
    );
    let row = format!("tr.session[data-session-id=\"{blocked}\"]");
    assert_eq!(b.text(&format!("{row} td.status")), "in_progress blocked");
    let time = b.all(&format!("{row} td.activity time"));
    assert!(
        time[0]["text"].as_str().unwrap().ends_with(" ago"),
        "{time:?}"
    );
    assert!(
        time[0]["attrs"]["title"].as_str().unwrap().ends_with('Z'),
        "{time:?}"
    );
    let counts: std::collections::BTreeMap<String, u64> = b
        .all("#status-counts li[data-status]")
        .iter()
        .map(|li| {
            let status = li["attrs"]["data-status"].as_str().unwrap().to_owned();
            let n = li["text"]
                .as_str()
                .unwrap()
                .rsplit(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            (status, n)
        })
        .collect();
    assert_eq!(counts["blocked"], 1, "{counts:?}");
    assert_eq!(counts["corrupt"], 0, "{counts:?}");
    s.browser.shot("sessions-blocked");

    let b = &s.browser;
    b.goto(&format!("{}/?status=blocked", s.console.origin));
    let ids: Vec<String> = b
        .all("table#sessions tr.session")
        .iter()
        .map(|r| r["attrs"]["data-session-id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        ids,
        vec![blocked.clone()],
        "the forked run moved on past its block"
    );
    b.goto(&format!("{}/?q=ZANZIBAR", s.console.origin));
    let ids: Vec<String> = b
        .all("table#sessions tr.session")
        .iter()
        .map(|r| r["attrs"]["data-session-id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, vec![blocked], "found by its notes");
}

/// decision: D183
/// A run's timeline lists every committed event in order with its commit time, kind and one
/// line; the kind filter narrows it in place; a row's link lights its node up in the graph.
#[test]
fn the_timeline_lists_every_event_filters_by_kind_and_links_to_the_graph() {
    let Some(mut s) = setup() else { return };
    let b = &s.browser;
    b.goto(&session_url(&s.console, &s.demo.forked_session));
    let rows = b.all("table#events tr.event");
    let facts = b.text("p.facts");
    let events: usize = facts
        .split(" committed events")
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(rows.len(), events, "{facts}");
    let indexes: Vec<u64> = rows
        .iter()
        .map(|r| r["attrs"]["data-index"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(
        indexes,
        (0..events as u64).collect::<Vec<_>>(),
        "in log order"
    );
    let kinds: std::collections::BTreeSet<&str> = rows
        .iter()
        .map(|r| r["attrs"]["data-kind"].as_str().unwrap())
        .collect();
    for kind in [
        "session_created",
        "run_started",
        "node_created",
        "edge_created",
        "advance_recorded",
        "node_output_appended",
    ] {
        assert!(kinds.contains(kind), "{kind} in {kinds:?}");
    }
    let times = b.all("table#events tr.event td.at time");
    assert_eq!(times.len(), events, "each event has its commit time");
    let blocked = b.text("table#events tr.event[data-kind=advance_recorded] td.summary");
    assert!(!blocked.is_empty());
    assert!(
        b.all("table#events td.summary").iter().any(|t| t["text"]
            .as_str()
            .unwrap()
            .starts_with("Blocked (1 blocker): MISSING_REQUIRED_OUTPUT")),
        "the blocked attempt in one line"
    );
    // Filter in place.
    b.js(
        "const s = document.querySelector('form#timeline-filter select[name=kind]'); \
         s.value = 'advance_recorded'; s.dispatchEvent(new Event('change')); return null;",
    );
    let shown = b.js(
        "return Array.from(document.querySelectorAll('table#events tr.event'))
           .filter(r => !r.hidden).map(r => r.getAttribute('data-kind'));",
    );
    let shown: Vec<&str> = shown
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        !shown.is_empty() && shown.iter().all(|k| *k == "advance_recorded"),
        "{shown:?}"
    );
    assert!(b.url().contains("kind=advance_recorded"), "{}", b.url());
    // The filter is in the address: a reload keeps it.
    b.goto(&b.url());
    assert!(
        b.all("table#events tr.event:not([hidden])")
            .iter()
            .all(|r| r["attrs"]["data-kind"] == "advance_recorded")
    );
    s.browser.shot("session-timeline");
    // A row's node link lights the node up in the graph.
    let b = &s.browser;
    let node =
        b.all("table#events tr.event[data-kind=advance_recorded]")[0]["attrs"]["data-node-id"]
            .as_str()
            .unwrap()
            .to_owned();
    b.js(&format!(
        "document.querySelector('table#events tr.event[data-node-id=\"{node}\"] td.node a').click(); return null;"
    ));
    b.eventually(5, "the node lit up", |b| {
        !b.all(&format!("svg.dag g.node.focused[data-node-id=\"{node}\"]"))
            .is_empty()
    });
}

/// decision: D183
/// A broken workflow's compile errors are readable in full on the list; a run that pinned an
/// older version is marked drifted on the workflow's own page, and its link opens the line diff
/// of the pinned and the current compiled workflow.
#[test]
fn compile_errors_show_in_full_and_drift_opens_a_line_diff_from_the_workflow_page() {
    let Some(mut s) = setup() else { return };
    let dir = user_workflows(&s.data);
    std::fs::write(
        dir.join("release_check.json"),
        user_workflow_source("Run the smoke tests on staging first."),
    )
    .unwrap();
    let long_prompt_less = json!({
        "id": "user.broken_one",
        "name": "Broken",
        "description": "A workflow whose steps each lack their prompt, so its errors are many and long.",
        "steps": (0..6).map(|i| json!({"id": format!("a_rather_long_step_identifier_number_{i}"), "title": "No prompt here"})).collect::<Vec<_>>(),
    });
    std::fs::write(dir.join("broken_one.json"), long_prompt_less.to_string()).unwrap();
    let b = &s.browser;
    b.resize(1280, 800);
    b.goto(&format!("{}/workflows", s.console.origin));
    let errors = b.all("tr.workflow-errors[data-workflow-id=\"user.broken_one\"] li.compile-error");
    assert!(errors.len() >= 5, "{errors:?}");
    let clipped = b.js(
        "return Array.from(document.querySelectorAll('li.compile-error'))
           .filter(e => e.scrollWidth > e.clientWidth + 1).length;",
    );
    assert_eq!(clipped, 0, "no compile error is clipped");
    b.assert_no_horizontal_scroll();
    s.browser.shot("workflows-broken");

    let b = &s.browser;
    b.goto(&format!(
        "{}/workflows/{USER_WORKFLOW_ID}",
        s.console.origin
    ));
    let (session, run) = &s.demo.user_run;
    let link = b.all(&format!(
        "li.pinned-run[data-run-id=\"{run}\"] a.drift-link"
    ));
    assert_eq!(link.len(), 1, "{}", b.body_text());
    b.js(&format!(
        "document.querySelector('li.pinned-run[data-run-id=\"{run}\"] a.drift-link').click(); return null;"
    ));
    b.eventually(10, "the drift view", |b| {
        !b.all("section#drift-diff table.diff").is_empty()
    });
    assert!(
        b.url().contains(&format!("session={session}")),
        "{}",
        b.url()
    );
    let removed: Vec<String> = b
        .all("section#drift-diff tr.del td.text")
        .iter()
        .map(|t| t["text"].as_str().unwrap().to_owned())
        .collect();
    let added: Vec<String> = b
        .all("section#drift-diff tr.ins td.text")
        .iter()
        .map(|t| t["text"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        removed.iter().any(|l| l.contains("Run the smoke tests.")),
        "{removed:?}"
    );
    assert!(
        added.iter().any(|l| l.contains("on staging first")),
        "{added:?}"
    );
    assert!(!b.all("#drift-warning a[href=\"#drift-diff\"]").is_empty());
    s.browser.shot("workflow-drift-diff");
    let b = &s.browser;
    b.resize(390, 844);
    b.assert_no_horizontal_scroll();
}

/// decision: D183
/// Every page follows the data directory in place: the session page takes a new advance (its
/// graph and timeline grow) with its scroll position and the page itself kept (no reload); the
/// list takes a new session; the Workflows list a new workflow file.
#[test]
fn pages_follow_changes_in_place_keeping_the_scroll_position() {
    let Some(s) = setup() else { return };
    let b = &s.browser;
    b.resize(1280, 800);
    b.goto(&session_url(&s.console, &s.demo.forked_session));
    let before = b.all("section.run svg.dag g.node").len();
    let events = b.all("table#events tr.event").len();
    let y = b.js("window.__samePage = true; window.scrollTo(0, 420); return window.scrollY;");
    assert_eq!(y, 420, "the page is tall enough to scroll");
    // The reader zooms every graph in twice; the graph that gains a node is redrawn and must
    // keep that view (decision D183: a zoomed graph stays as it is).
    let zoomed = b.js("var views = [];
         document.querySelectorAll('figure.graph').forEach(function (f) {
           f.__before = true;
           f.querySelector('.zoom-in').click();
           f.querySelector('.zoom-in').click();
           views.push(f.querySelector('svg.dag').getAttribute('viewBox'));
         });
         return views;");
    let mut mcp = Mcp::start(&s.data);
    mcp.ack(
        &s.demo.forked_tip,
        "The agent goes on while the page is open.",
    );
    b.eventually(15, "the new node appearing", |b| {
        b.all("section.run svg.dag g.node").len() == before + 1
    });
    assert!(
        b.all("table#events tr.event").len() > events,
        "the timeline grew"
    );
    assert_eq!(
        b.js("return window.__samePage === true;"),
        true,
        "no reload"
    );
    assert_eq!(
        b.js("return window.scrollY;"),
        420,
        "the scroll position is kept"
    );
    // The new graph still has its tools.
    assert!(!b.all("figure.graph .graph-tools:not([hidden])").is_empty());
    let after = b.js(
        "var out = {redrawn: 0, views: []};
         document.querySelectorAll('figure.graph').forEach(function (f) {
           if (!f.__before) { out.redrawn += 1; }
           out.views.push([f.querySelector('svg.dag').getAttribute('viewBox'), f.getAttribute('data-zoomed')]);
         });
         return out;",
    );
    assert!(
        after["redrawn"].as_u64().unwrap_or(0) >= 1,
        "the graph with the new node was redrawn: {after}"
    );
    let kept: Vec<Value> = zoomed
        .as_array()
        .unwrap()
        .iter()
        .map(|v| json!([v, "true"]))
        .collect();
    assert_eq!(
        after["views"],
        Value::Array(kept),
        "every graph, the redrawn one included, keeps the reader's zoomed view"
    );

    b.goto(&format!("{}/", s.console.origin));
    b.js("window.__samePage = true; return null;");
    let rows = b.all("table#sessions tr.session").len();
    mcp.exec("start_workflow", json!({"workflowId": "wr.mr_review"}));
    b.eventually(15, "the new session's row", |b| {
        b.all("table#sessions tr.session").len() == rows + 1
    });
    assert_eq!(
        b.js("return window.__samePage === true;"),
        true,
        "no reload"
    );
    mcp.close();

    b.goto(&format!("{}/workflows", s.console.origin));
    b.js("window.__samePage = true; return null;");
    std::fs::write(
        user_workflows(&s.data).join("late_arrival.json"),
        json!({
            "id": "user.late_arrival",
            "name": "Late arrival",
            "description": "Written while the page was open.",
            "steps": [{"id": "one", "title": "One", "prompt": "Do the one thing."}],
        })
        .to_string(),
    )
    .unwrap();
    b.eventually(15, "the new workflow's row", |b| {
        !b.all("tr.workflow[data-workflow-id=\"user.late_arrival\"]")
            .is_empty()
    });
    assert_eq!(
        b.js("return window.__samePage === true;"),
        true,
        "no reload"
    );
}

/// decision: D183
/// Dark mode follows the browser's preference: the page and the graph's nodes take the dark
/// palette, and the preference form is styled (its fields in a grid, in the page's colours).
#[test]
fn dark_mode_follows_the_browser_preference_and_forms_are_styled() {
    let Some(binary) = chromium() else { return };
    let (_root, data) = new_root();
    let demo = build_demo_data_dir(&data);
    let console = Console::start(&data);
    let mut browser = Browser::start_with(
        &binary,
        &[
            "--force-dark-mode",
            "--blink-settings=preferredColorScheme=0",
        ],
    );
    let b = &browser;
    b.goto(&console.url);
    assert_eq!(
        b.js("return matchMedia('(prefers-color-scheme: dark)').matches;"),
        true,
        "the browser prefers dark"
    );
    let colour = |b: &Browser, selector: &str, property: &str| -> String {
        b.js(&format!(
            "return getComputedStyle(document.querySelector({})).{property};",
            json!(selector)
        ))
        .as_str()
        .unwrap()
        .to_owned()
    };
    assert_eq!(colour(b, "body", "backgroundColor"), "rgb(13, 17, 23)");
    assert_eq!(colour(b, "body", "color"), "rgb(230, 237, 243)");
    b.goto(&session_url(&console, &demo.forked_session));
    assert_eq!(
        colour(b, "svg.dag g.node:not(.blocked-attempt) rect", "fill"),
        "rgb(13, 17, 23)"
    );
    browser.shot("session-dark");
    let b = &browser;
    b.goto(&format!("{}/config", console.origin));
    assert_eq!(
        colour(b, "form#preferences label.preference", "display"),
        "grid"
    );
    assert_eq!(
        colour(b, "form#preferences select", "backgroundColor"),
        "rgb(13, 17, 23)"
    );
    browser.shot("config-dark");
}

/// decision: D184
/// Another web server on 127.0.0.1 that the signed-in browser visits receives no Console
/// secret: neither the token nor the cookie (scoped to the launch's path), at its root, at a
/// path like the Console's, or under `localhost`.
#[test]
fn another_server_on_127_0_0_1_receives_no_console_secret() {
    use std::io::{Read as _, Write as _};
    use std::sync::{Arc, Mutex};
    let Some(s) = setup() else { return };
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = Arc::clone(&seen);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = vec![0u8; 64 * 1024];
            let n = stream.read(&mut buf).unwrap_or(0);
            log.lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            let _ = stream.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 20\r\nConnection: close\r\n\r\n<p>another site</p>\n",
            );
        }
    });
    let b = &s.browser;
    // Signed in: the Console's pages open with the cookie alone.
    b.goto(&session_url(&s.console, &s.demo.forked_session));
    assert!(b.text("h1").contains(&s.demo.forked_session));
    for url in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://127.0.0.1:{port}/c/"),
        format!(
            "http://127.0.0.1:{port}{}/",
            s.console.prefix.rsplit_once('/').unwrap().0
        ),
        format!("http://localhost:{port}/sessions/{}", s.demo.forked_session),
    ] {
        b.goto(&url);
        assert!(b.body_text().contains("another site"), "{url}");
    }
    let requests = seen.lock().unwrap().clone();
    assert!(requests.len() >= 4, "{requests:?}");
    for request in &requests {
        assert!(
            !request.contains(&s.console.secret),
            "the secret leaked: {request}"
        );
        assert!(
            !request.contains("workrail_console"),
            "a Console cookie leaked: {request}"
        );
    }
    // The Console still knows the browser.
    b.goto(&format!("{}/", s.console.origin));
    assert!(!b.all("table#sessions").is_empty(), "{}", b.body_text());
}

/// axe-core's script: `$WORKRAIL_AXE_CORE` (`.ci/run` installs it from the npm registry), or
/// `None` (and a note) where the check may be skipped.
fn axe_core() -> Option<String> {
    let path = std::env::var_os("WORKRAIL_AXE_CORE").map(PathBuf::from);
    match path.as_deref().map(std::fs::read_to_string) {
        Some(Ok(script)) => Some(script),
        found => {
            let required = std::env::var_os("CI").is_some();
            let message = format!(
                "the accessibility check needs axe-core: set WORKRAIL_AXE_CORE to its axe.min.js (`npm install --prefix DIR axe-core@4`, as .ci/run does){}",
                match found {
                    Some(Err(e)) => format!("; reading it failed: {e}"),
                    _ => String::new(),
                }
            );
            assert!(!required, "{message}");
            eprintln!("skipped: {message}");
            None
        }
    }
}

/// axe-core's violations on the page shown: `(id, impact, help, targets)`.
fn axe_violations(b: &Browser, axe: &str) -> Vec<Value> {
    b.js(&format!("{axe}\n;return typeof axe;"));
    let script = "const done = arguments[arguments.length - 1];
        axe.run(document, {resultTypes: ['violations']})
          .then(r => done(r.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
            targets: v.nodes.slice(0, 5).map(n => n.target.join(' '))}))))
          .catch(e => done([{id: 'axe-error', impact: 'critical', help: String(e), targets: []}]));";
    match b
        .runtime
        .block_on(b.client().execute_async(script, Vec::new()))
        .unwrap_or_else(|e| panic!("axe.run failed: {e}"))
    {
        Value::Array(items) => items,
        other => panic!("axe.run gave {other}"),
    }
}

/// decision: D183
/// axe-core finds no serious or critical violation on any page, light and dark, wide and
/// narrow: names, labels, landmarks, contrast, keyboard reach. Moderate and minor findings are
/// printed.
#[test]
fn axe_core_finds_no_serious_violation_on_any_page() {
    let Some(axe) = axe_core() else { return };
    let Some(binary) = chromium() else { return };
    let (_root, data) = new_root();
    let demo = build_demo_data_dir(&data);
    let console = Console::start(&data);
    let (session, run) = &demo.user_run;
    let mut pages = vec![
        format!("{}/", console.origin),
        session_url(&console, &demo.forked_session),
        session_url(&console, &demo.gap_session),
        format!("{}/workflows", console.origin),
        format!("{}/workflows/{USER_WORKFLOW_ID}", console.origin),
        format!(
            "{}/workflows/{USER_WORKFLOW_ID}?session={session}&run={run}",
            console.origin
        ),
        format!("{}/config", console.origin),
    ];
    let mut serious = Vec::new();
    for (scheme, args) in [
        ("light", &[][..]),
        (
            "dark",
            &[
                "--force-dark-mode",
                "--blink-settings=preferredColorScheme=0",
            ][..],
        ),
    ] {
        let browser = Browser::start_with(&binary, args);
        browser.goto(&console.url);
        // A node page, found from the forked run's graph.
        browser.goto(&session_url(&console, &demo.forked_session));
        let node = browser.all("svg.dag g.node")[0]["attrs"]["data-node-id"]
            .as_str()
            .unwrap()
            .to_owned();
        pages.push(format!(
            "{}/nodes/{node}",
            session_url(&console, &demo.forked_session)
        ));
        for (width, height) in [(1280, 800), (390, 844)] {
            browser.resize(width, height);
            for page in &pages {
                browser.goto(page);
                for v in axe_violations(&browser, &axe) {
                    let impact = v["impact"].as_str().unwrap_or("unknown").to_owned();
                    let line = format!(
                        "{scheme} {width}px {page}: {impact} {} ({}) at {}",
                        v["id"], v["help"], v["targets"]
                    );
                    if impact == "serious" || impact == "critical" {
                        serious.push(line);
                    } else {
                        eprintln!("axe: {line}");
                    }
                }
            }
        }
        pages.pop();
    }
    assert!(
        serious.is_empty(),
        "serious accessibility violations:\n{}",
        serious.join("\n")
    );
}

//! `workrail console`: binds 127.0.0.1, prints its link, routes requests through the access
//! rules and serves the pages. Pages are built on blocking threads from the store's read path.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Form, Path, Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use maud::Markup;

use super::pages::{config, layout, node, session, sessions, workflows};
use super::{auth, history};
use crate::projections::console::SessionRow;
use crate::protocol::{ConsoleLookup, Workrail, WorkrailConfig};

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

/// Every response's security headers.
const CSP: &str = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'";

/// What `workrail console` was asked for.
#[derive(Debug, Clone)]
pub struct ConsoleOptions {
    pub config: WorkrailConfig,
    /// The store the sessions live in.
    pub store: crate::protocol::StoreChoice,
    /// 0: any free port.
    pub port: u16,
    /// Launch the default browser on the link (best effort).
    pub open: bool,
}

struct Shared {
    secret: String,
    origin: String,
    /// The path every page of this launch lives under: `/c/<nonce>` (decision D184).
    prefix: String,
    /// The cookie's name (`workrail_console_<port>`).
    cookie: String,
    port: u16,
    config: WorkrailConfig,
    store: crate::protocol::StoreChoice,
    /// Opened on first use once the data directory holds a keyring (nothing is created).
    workrail: Mutex<Option<Arc<Workrail>>>,
}

impl Shared {
    fn workrail(&self) -> Result<Option<Arc<Workrail>>, String> {
        let mut held = self.workrail.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = held.as_ref() {
            return Ok(Some(Arc::clone(w)));
        }
        let opened = Workrail::open_existing_on(self.config.clone(), &self.store)
            .map_err(|e| e.message)?
            .map(Arc::new);
        held.clone_from(&opened);
        Ok(opened)
    }
}

type App = Arc<Shared>;

/// Runs the Console until the process is killed.
pub fn run(options: ConsoleOptions) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| format!("cannot start the Console's runtime: {e}"))?;
    runtime.block_on(serve(options))
}

async fn serve(options: ConsoleOptions) -> Result<(), String> {
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, options.port)))
            .await
            .map_err(|e| format!("cannot listen on 127.0.0.1:{}: {e}", options.port))?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("cannot read the Console's address: {e}"))?
        .port();
    let secret = auth::new_secret(options.config.entropy.as_ref())?;
    let nonce = auth::new_secret(options.config.entropy.as_ref())?;
    let prefix = format!("/c/{}", nonce.get(..16).unwrap_or(&nonce));
    let origin = format!("http://127.0.0.1:{port}");
    let url = format!("{origin}{prefix}/?token={secret}");
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        writeln!(out, "WorkRail Console: {url}")
            .and_then(|()| out.flush())
            .map_err(|e| format!("cannot print the Console's link: {e}"))?;
    }
    if options.open {
        open_browser(&url, port);
    }
    let app: App = Arc::new(Shared {
        secret,
        origin,
        prefix,
        cookie: auth::cookie_name(port),
        port,
        config: options.config,
        store: options.store,
        workrail: Mutex::new(None),
    });
    axum::serve(listener, router(app))
        .await
        .map_err(|e| format!("the Console stopped: {e}"))
}

/// Best effort: a failure is a warning on stderr. The browser is handed a redirect file that
/// only this user can read (as Jupyter does), never the tokened link on a command line, where
/// other local users could read it (decision D184).
fn open_browser(url: &str, port: u16) {
    let dir = open_file_dir();
    let opened = write_redirect_file(&dir, port, url).and_then(|file| {
        let (program, args) = open_command(&file);
        std::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .map(drop)
            .map_err(|e| format!("cannot start {program}: {e}"))
    });
    if let Err(e) = opened {
        eprintln!("workrail: warning: cannot open a browser ({e}); open the link above yourself");
    }
}

/// Where the redirect file goes: the user's runtime directory when there is one (0700 by
/// definition), else the system's temporary directory (the file itself is 0600).
fn open_file_dir() -> std::path::PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(std::path::PathBuf::from)
        .filter(|d| d.is_dir())
        .unwrap_or_else(std::env::temp_dir)
}

/// Writes `workrail-console-<port>-<pid>-open.html` into `dir`, readable by this user only,
/// holding a page that sends the browser on to `url`.
pub(super) fn write_redirect_file(
    dir: &std::path::Path,
    port: u16,
    url: &str,
) -> Result<std::path::PathBuf, String> {
    use std::io::Write as _;
    let path = dir.join(format!(
        "workrail-console-{port}-{}-open.html",
        std::process::id()
    ));
    let escaped = maud::html! { (url) }.into_string();
    let page = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<meta http-equiv=\"refresh\" content=\"0;url={escaped}\">\n<title>WorkRail Console</title></head>\n<body><p>Opening the WorkRail Console: <a href=\"{escaped}\">continue</a>.</p></body></html>\n"
    );
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        options.mode(0o600);
    }
    // A file left by an earlier launch with this port and pid is replaced, never followed.
    let _ = std::fs::remove_file(&path);
    let mut file = options
        .open(&path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("cannot restrict {}: {e}", path.display()))?;
    }
    file.write_all(page.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// The program that opens `file` in the default browser, and its arguments: the file's path,
/// which carries no secret.
pub(super) fn open_command(file: &std::path::Path) -> (&'static str, Vec<String>) {
    let file = file.display().to_string();
    if cfg!(target_os = "macos") {
        ("open", vec![file])
    } else if cfg!(windows) {
        (
            "cmd",
            vec!["/C".into(), "start".into(), String::new(), file],
        )
    } else {
        ("xdg-open", vec![file])
    }
}

fn router(app: App) -> Router {
    // Every page of this launch lives under its prefix (decision D184); `at` spells a route.
    let p = app.prefix.clone();
    let at = |path: &str| format!("{p}{path}");
    Router::new()
        .route(&at("/"), get(sessions_page))
        .route(&at("/sessions.json"), get(sessions_json))
        .route(&at("/sessions/{session}"), get(session_page))
        .route(&at("/sessions/{session}/session.json"), get(session_json))
        .route(&at("/sessions/{session}/timeline.json"), get(timeline_json))
        .route(&at("/sessions/{session}/export.json"), get(export_json))
        .route(
            &at("/sessions/{session}/nodes/{node}/node.json"),
            get(node_json),
        )
        .route(&at("/sessions/{session}/version"), get(version))
        .route(&at("/sessions/{session}/nodes/{node}"), get(node_page))
        .route(&at("/workflows"), get(workflows_page))
        .route(
            &at("/workflows/{id}"),
            get(workflow_page).post(save_workflow),
        )
        .route(&at("/workflows/{id}/copy"), post(copy_workflow))
        .route(&at("/config"), get(config_page))
        .route(&at("/config/flags"), post(save_flags))
        .route(&at("/config/preferences"), post(save_preferences))
        .route(
            &at("/assets/console.css"),
            get(|| async { asset("text/css; charset=utf-8", CSS) }),
        )
        .route(
            &at("/assets/console.js"),
            get(|| async { asset("text/javascript; charset=utf-8", JS) }),
        )
        .fallback(|| async {
            html(
                StatusCode::NOT_FOUND,
                layout::not_found("No page has this address."),
            )
        })
        .route(&p, get(move || async move { see_other("/") }))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&app),
            under_prefix,
        ))
        .layer(middleware::from_fn_with_state(Arc::clone(&app), guard))
        .layer(middleware::map_response(security_headers))
        .with_state(app)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

fn html(status: StatusCode, markup: Markup) -> Response {
    (status, Html(markup.into_string())).into_response()
}

async fn security_headers(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The access rules (decision D184): this Console's `Host`, a path under the launch's prefix,
/// the secret (link or cookie), then same-origin for state changes.
async fn guard(State(app): State<App>, request: Request, next: Next) -> Response {
    if !auth::host_matches(request.headers(), app.port) {
        return html(StatusCode::MISDIRECTED_REQUEST, layout::wrong_host());
    }
    let path = request.uri().path();
    let inside = path == app.prefix || path.starts_with(&format!("{}/", app.prefix));
    let query = request.uri().query();
    let from_link = auth::query_token(query);
    let presented = from_link
        .clone()
        .or_else(|| auth::cookie_token(request.headers(), &app.cookie));
    if !inside || !presented.is_some_and(|p| auth::secret_matches(&app.secret, &p)) {
        return html(StatusCode::FORBIDDEN, layout::needs_link());
    }
    let cookie = from_link
        .is_some()
        .then(|| auth::set_cookie(&app.cookie, &app.secret, &app.prefix));
    if let Some(cookie) = &cookie
        && matches!(*request.method(), Method::GET | Method::HEAD)
    {
        let location = match auth::query_without_token(query) {
            Some(rest) => format!("{path}?{rest}"),
            None => path.to_owned(),
        };
        return Response::builder()
            .status(StatusCode::SEE_OTHER)
            .header(header::LOCATION, location)
            .header(header::SET_COOKIE, cookie)
            .body(Body::empty())
            .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
    }
    if auth::is_state_changing(request.method())
        && !auth::same_origin(request.headers(), &app.origin)
    {
        return html(StatusCode::FORBIDDEN, layout::cross_origin());
    }
    let mut response = next.run(request).await;
    if let Some(cookie) = cookie
        && let Ok(value) = HeaderValue::from_str(&cookie)
    {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

/// Pages are written with plain paths (`/sessions/…`); this puts their links and redirects
/// under the launch's prefix.
async fn under_prefix(State(app): State<App>, request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let (mut parts, body) = response.into_parts();
    if let Some(location) = parts
        .headers
        .get(header::LOCATION)
        .and_then(|l| l.to_str().ok())
        .map(|l| auth::prefixed(l, &app.prefix))
        && let Ok(value) = HeaderValue::from_str(&location)
    {
        parts.headers.insert(header::LOCATION, value);
    }
    let is_html = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|c| c.to_str().ok())
        .is_some_and(|c| c.starts_with("text/html"));
    if !is_html {
        return Response::from_parts(parts, body);
    }
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => {
            let text = auth::prefix_links(&String::from_utf8_lossy(&bytes), &app.prefix);
            parts.headers.remove(header::CONTENT_LENGTH);
            Response::from_parts(parts, Body::from(text))
        }
        Err(e) => html(
            StatusCode::INTERNAL_SERVER_ERROR,
            layout::unreadable(&e.to_string()),
        ),
    }
}

/// Runs a read on a blocking thread with the opened WorkRail (`None`: nothing stored yet).
async fn read<T: Send + 'static>(
    app: &App,
    f: impl FnOnce(Option<&Workrail>) -> T + Send + 'static,
) -> Result<T, Response> {
    let app = Arc::clone(app);
    tokio::task::spawn_blocking(move || match app.workrail() {
        Ok(w) => Ok(f(w.as_deref())),
        Err(e) => Err(e),
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r)
    .map_err(|e| html(StatusCode::INTERNAL_SERVER_ERROR, layout::unreadable(&e)))
}

fn lookup_response<T>(
    found: ConsoleLookup<T>,
    what: &str,
    render: impl FnOnce(T) -> Response,
) -> Response {
    match found {
        ConsoleLookup::Found(v) => render(v),
        ConsoleLookup::NotFound => html(StatusCode::NOT_FOUND, layout::not_found(what)),
        ConsoleLookup::Unreadable(e) => {
            html(StatusCode::INTERNAL_SERVER_ERROR, layout::unreadable(&e))
        }
    }
}

async fn sessions_page(State(app): State<App>, Query(filter): Query<sessions::Filter>) -> Response {
    let data_dir = app.config.data_dir.clone();
    type Listed = (
        Vec<SessionRow>,
        std::collections::HashMap<String, history::SessionFacts>,
    );
    let rows = read(&app, move |w| -> Result<Listed, String> {
        let Some(w) = w else {
            return Ok(Default::default());
        };
        use crate::gc::RetentionClock as _;
        let clock = crate::gc::OsRetentionClock::new(data_dir);
        let rows = w.console_sessions(&|p| clock.modified(p).ok().flatten())?;
        let facts = rows
            .iter()
            .filter_map(|r| {
                history::session_facts(w, &r.session_id).map(|f| (r.session_id.clone(), f))
            })
            .collect::<std::collections::HashMap<_, _>>();
        Ok((rows, facts))
    })
    .await;
    match rows {
        Ok(Ok((rows, facts))) => html(
            StatusCode::OK,
            sessions::render(&rows, &facts, &filter, std::time::SystemTime::now()),
        ),
        Ok(Err(e)) => html(StatusCode::INTERNAL_SERVER_ERROR, layout::unreadable(&e)),
        Err(response) => response,
    }
}

/// The session page's query: the timeline's kind filter.
#[derive(Debug, Default, serde::Deserialize)]
struct SessionQuery {
    kind: Option<String>,
}

/// A session's view with what the Console reads beside it: its timeline and blocked runs.
fn session_extras(
    w: &Workrail,
    data_dir: &std::path::Path,
    key: &str,
) -> ConsoleLookup<(crate::projections::console::SessionView, session::Extras)> {
    use crate::gc::RetentionClock as _;
    let clock = crate::gc::OsRetentionClock::new(data_dir.to_owned());
    // One read and one projection of the log for the view and what is shown beside it (D236).
    w.console_session_with(key, |facts, loaded, events| {
        let (timeline, timeline_cut) =
            history::timeline(loaded, events, &|p| clock.modified(p).ok().flatten());
        session::Extras {
            blocked_runs: history::blocked_runs_of(facts),
            timeline,
            timeline_cut,
        }
    })
}

async fn session_page(
    State(app): State<App>,
    Path(id): Path<String>,
    Query(query): Query<SessionQuery>,
) -> Response {
    let key = id.clone();
    let data_dir = app.config.data_dir.clone();
    let found = read(&app, move |w| match w {
        Some(w) => session_extras(w, &data_dir, &key),
        None => ConsoleLookup::NotFound,
    })
    .await;
    match found {
        Ok(found) => lookup_response(
            found,
            &format!("No session {id} in this data directory."),
            |(view, extras)| {
                html(
                    StatusCode::OK,
                    session::render(&view, &extras, query.kind.as_deref()),
                )
            },
        ),
        Err(response) => response,
    }
}

async fn version(State(app): State<App>, Path(id): Path<String>) -> Response {
    let key = id.clone();
    let found = read(&app, move |w| match w {
        Some(w) => w.console_version(&key),
        None => ConsoleLookup::NotFound,
    })
    .await;
    match found {
        Ok(found) => lookup_response(
            found,
            &format!("No session {id} in this data directory."),
            |v| ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], v).into_response(),
        ),
        Err(response) => response,
    }
}

async fn node_page(
    State(app): State<App>,
    Path((id, node_id)): Path<(String, String)>,
) -> Response {
    let (key, node_key) = (id.clone(), node_id.clone());
    let found = read(&app, move |w| match w {
        Some(w) => w.console_node(&key, &node_key),
        None => ConsoleLookup::NotFound,
    })
    .await;
    match found {
        Ok(found) => lookup_response(
            found,
            &format!("No node {node_id} in session {id} of this data directory."),
            |view| html(StatusCode::OK, node::render(&view)),
        ),
        Err(response) => response,
    }
}

// ---------------------------------------------------------------------------------------------
// JSON downloads (decision D183): the export bundle of a session, and each read model the pages
// are drawn from, as files named after what they hold.

/// A JSON body offered as the file `name`.
fn json_file(name: &str, body: String) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"{name}\""),
        )
        .body(Body::from(body))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

fn pretty_json<T: serde::Serialize>(value: &T) -> Result<String, String> {
    serde_json::to_string_pretty(value).map_err(|e| format!("cannot write the JSON: {e}"))
}

/// Ids only ever hold `[a-z0-9_]`, but a file name is built from what the request said.
fn file_stem(id: &str) -> String {
    id.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

async fn sessions_json(State(app): State<App>) -> Response {
    let data_dir = app.config.data_dir.clone();
    let rows = read(&app, move |w| -> Result<String, String> {
        let Some(w) = w else {
            return pretty_json(&Vec::<SessionRow>::new());
        };
        use crate::gc::RetentionClock as _;
        let clock = crate::gc::OsRetentionClock::new(data_dir);
        pretty_json(&w.console_sessions(&|p| clock.modified(p).ok().flatten())?)
    })
    .await;
    match rows {
        Ok(Ok(body)) => json_file("sessions.json", body),
        Ok(Err(e)) => html(StatusCode::INTERNAL_SERVER_ERROR, layout::unreadable(&e)),
        Err(response) => response,
    }
}

/// Runs `f` on the session `id`'s read models and offers its JSON as `<id>.<suffix>`.
async fn session_download(
    app: App,
    id: String,
    suffix: &'static str,
    f: impl FnOnce(&Workrail, &std::path::Path, &str) -> ConsoleLookup<Result<String, String>>
    + Send
    + 'static,
) -> Response {
    let key = id.clone();
    let data_dir = app.config.data_dir.clone();
    let found = read(&app, move |w| match w {
        Some(w) => f(w, &data_dir, &key),
        None => ConsoleLookup::NotFound,
    })
    .await;
    match found {
        Ok(found) => lookup_response(
            found,
            &format!("No session {id} in this data directory."),
            |body| match body {
                Ok(body) => json_file(&format!("{}.{suffix}", file_stem(&id)), body),
                Err(e) => html(StatusCode::INTERNAL_SERVER_ERROR, layout::unreadable(&e)),
            },
        ),
        Err(response) => response,
    }
}

async fn session_json(State(app): State<App>, Path(id): Path<String>) -> Response {
    session_download(app, id, "session.json", |w, _, key| {
        match w.console_session(key) {
            ConsoleLookup::Found(view) => ConsoleLookup::Found(pretty_json(&view)),
            ConsoleLookup::NotFound => ConsoleLookup::NotFound,
            ConsoleLookup::Unreadable(e) => ConsoleLookup::Unreadable(e),
        }
    })
    .await
}

async fn timeline_json(State(app): State<App>, Path(id): Path<String>) -> Response {
    session_download(
        app,
        id,
        "timeline.json",
        |w, data_dir, key| match session_extras(w, data_dir, key) {
            ConsoleLookup::Found((_, extras)) => {
                ConsoleLookup::Found(pretty_json(&extras.timeline))
            }
            ConsoleLookup::NotFound => ConsoleLookup::NotFound,
            ConsoleLookup::Unreadable(e) => ConsoleLookup::Unreadable(e),
        },
    )
    .await
}

/// The session's export bundle, exactly as `workrail export` writes it (a damaged session's
/// validated prefix, as a salvage bundle).
async fn export_json(State(app): State<App>, Path(id): Path<String>) -> Response {
    session_download(app, id, "bundle.json", |w, _, key| {
        if workrail_spec::ids::SessionId::parse(key).is_err() {
            return ConsoleLookup::NotFound;
        }
        match w.export_session(key, &crate::bundle::NoProgress) {
            Ok(exported) => ConsoleLookup::Found(Ok(exported.text)),
            Err(e) if e.code == workrail_spec::error::ErrorCode::SessionNotFound => {
                ConsoleLookup::NotFound
            }
            Err(e) => ConsoleLookup::Found(Err(format!("{} {}", e.message, e.suggestion))),
        }
    })
    .await
}

async fn node_json(
    State(app): State<App>,
    Path((id, node_id)): Path<(String, String)>,
) -> Response {
    let stem = file_stem(&node_id);
    let (key, node_key) = (id.clone(), node_id.clone());
    let found = read(&app, move |w| match w {
        Some(w) => w.console_node(&key, &node_key),
        None => ConsoleLookup::NotFound,
    })
    .await;
    match found {
        Ok(found) => lookup_response(
            found,
            &format!("No node {node_id} in session {id} of this data directory."),
            |view| match pretty_json(&view) {
                Ok(body) => json_file(&format!("{stem}.node.json"), body),
                Err(e) => html(StatusCode::INTERNAL_SERVER_ERROR, layout::unreadable(&e)),
            },
        ),
        Err(response) => response,
    }
}

// ---------------------------------------------------------------------------------------------
// Workflows and Config (locks §6): the data and every write come from `crate::control`, over
// the sources of the Console's own environment (decision D87). Every POST has passed `guard`.

/// 303 to `location`, after a successful POST.
fn see_other(location: &str) -> Response {
    Response::builder()
        .status(StatusCode::SEE_OTHER)
        .header(header::LOCATION, location)
        .body(Body::empty())
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Runs `f` on a blocking thread.
async fn blocking<T: Send + 'static>(
    app: &App,
    f: impl FnOnce(&Shared) -> T + Send + 'static,
) -> Result<T, Response> {
    let app = Arc::clone(app);
    tokio::task::spawn_blocking(move || f(&app))
        .await
        .map_err(|e| {
            html(
                StatusCode::INTERNAL_SERVER_ERROR,
                layout::unreadable(&e.to_string()),
            )
        })
}

/// The value of `name` in a submitted form.
fn field<'f>(form: &'f [(String, String)], name: &str) -> Option<&'f str> {
    form.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

fn error_status(e: &workrail_spec::error::ErrorEnvelope) -> StatusCode {
    use workrail_spec::error::ErrorCode;
    match e.code {
        ErrorCode::WorkflowNotFound => StatusCode::NOT_FOUND,
        ErrorCode::ValidationError | ErrorCode::WorkflowInvalid => StatusCode::UNPROCESSABLE_ENTITY,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

async fn workflows_page(State(app): State<App>) -> Response {
    match blocking(&app, |app| {
        crate::control::list_workflows(&app.config.sources)
    })
    .await
    {
        Ok(list) => html(StatusCode::OK, workflows::list(&list)),
        Err(response) => response,
    }
}

/// The workflow page's query: a selected run, and the notice after a save.
#[derive(Debug, Default, serde::Deserialize)]
struct WorkflowQuery {
    session: Option<String>,
    run: Option<String>,
    saved: Option<String>,
}

/// The runs of this data directory whose workflow is `id` (read path only).
fn pinned_runs(app: &Shared, id: &str) -> (Vec<workflows::PinnedRun>, bool) {
    let Ok(Some(w)) = app.workrail() else {
        return (Vec::new(), false);
    };
    let Ok(rows) = w.console_sessions(&|_| None) else {
        return (Vec::new(), false);
    };
    let mut runs = Vec::new();
    for row in rows.iter().filter(|r| r.workflows.iter().any(|w| w == id)) {
        let ConsoleLookup::Found(view) = w.console_session(&row.session_id) else {
            continue;
        };
        for run in view.runs.iter().filter(|r| r.workflow_id == id) {
            if runs.len() == crate::projections::console::LIST_MAX {
                return (runs, true);
            }
            runs.push(workflows::PinnedRun {
                session_id: view.session_id.clone(),
                run_id: run.run_id.clone(),
                label: run.label.clone(),
                status: run.status.clone(),
                workflow_hash: pinned_hash(&w, &view.session_id, &run.run_id),
            });
        }
    }
    (runs, false)
}

/// The workflow hash `run` of `session` pinned (its `run_started`), when the log is readable.
fn pinned_hash(w: &Workrail, session: &str, run: &str) -> Option<String> {
    let loaded = w
        .sessions()
        .load(&workrail_spec::ids::SessionId::parse(session).ok()?)
        .ok()?;
    loaded
        .events()
        .all()
        .ok()?
        .iter()
        .find_map(|e| match e.data() {
            workrail_spec::event::EventData::RunStarted(started)
                if e.scope().run_id().is_some_and(|r| r.as_str() == run) =>
            {
                Some(started.workflow_hash.to_string())
            }
            _ => None,
        })
}

/// Renders one workflow's page (with `form` after a refused POST) with `status`.
fn workflow_response(
    app: &Shared,
    id: &str,
    query: &WorkflowQuery,
    form: &workflows::FormState,
    status: StatusCode,
) -> Response {
    let detail = match crate::control::show_workflow(&app.config.sources, id) {
        Ok(detail) => detail,
        Err(e) => {
            let status = match error_status(&e) {
                StatusCode::INTERNAL_SERVER_ERROR => StatusCode::INTERNAL_SERVER_ERROR,
                _ => StatusCode::NOT_FOUND,
            };
            return html(status, workflows::not_found(id, &e));
        }
    };
    let pinned = match &query.run {
        Some(run) if !run.is_empty() => {
            workflows::Pinned::Run(Box::new(crate::control::pinned_for_run(
                &app.config.data_dir,
                &app.config.sources,
                run,
                query.session.as_deref().filter(|s| !s.is_empty()),
            )))
        }
        _ => {
            let (runs, cut) = pinned_runs(app, detail.workflow_id.as_str());
            workflows::Pinned::Runs(runs, cut)
        }
    };
    html(status, workflows::detail(&detail, &pinned, form))
}

async fn workflow_page(
    State(app): State<App>,
    Path(id): Path<String>,
    Query(query): Query<WorkflowQuery>,
) -> Response {
    blocking(&app, move |app| {
        let form = workflows::FormState {
            saved: query.saved.as_deref() == Some("1"),
            ..workflows::FormState::default()
        };
        workflow_response(app, &id, &query, &form, StatusCode::OK)
    })
    .await
    .unwrap_or_else(|response| response)
}

/// `POST /workflows/<id>`: compiles the submitted source and writes it into the workflow's own
/// source file (`control::save_source`), or shows the compiler's errors with the text kept.
async fn save_workflow(
    State(app): State<App>,
    Path(id): Path<String>,
    Form(form): Form<Vec<(String, String)>>,
) -> Response {
    blocking(&app, move |app| {
        let Some(text) = field(&form, "source") else {
            let state = workflows::FormState {
                errors: vec![(String::new(), "The form carried no source text.".to_owned())],
                ..workflows::FormState::default()
            };
            return workflow_response(
                app,
                &id,
                &WorkflowQuery::default(),
                &state,
                StatusCode::UNPROCESSABLE_ENTITY,
            );
        };
        match crate::control::save_source(&app.config.sources, &id, text) {
            Ok(saved) => see_other(&format!(
                "{}?saved=1",
                workflows::workflow_href(saved.workflow_id.as_str())
            )),
            Err(e) => {
                let state = workflows::FormState {
                    submitted: Some(text.to_owned()),
                    errors: workflows::error_items(&e),
                    ..workflows::FormState::default()
                };
                workflow_response(
                    app,
                    &id,
                    &WorkflowQuery::default(),
                    &state,
                    error_status(&e),
                )
            }
        }
    })
    .await
    .unwrap_or_else(|response| response)
}

/// `POST /workflows/<id>/copy`: writes a copy under a `user.*` id into the user workflow
/// directory (`control::copy_to_editable`), then shows the copy.
async fn copy_workflow(
    State(app): State<App>,
    Path(id): Path<String>,
    Form(form): Form<Vec<(String, String)>>,
) -> Response {
    blocking(&app, move |app| {
        let new_id = field(&form, "newId")
            .map(str::trim)
            .filter(|v| !v.is_empty());
        match crate::control::copy_to_editable(&app.config.sources, &id, new_id) {
            Ok(saved) => see_other(&workflows::workflow_href(saved.workflow_id.as_str())),
            Err(e) => {
                let state = workflows::FormState {
                    errors: workflows::error_items(&e),
                    copy_id: new_id.map(str::to_owned),
                    ..workflows::FormState::default()
                };
                workflow_response(
                    app,
                    &id,
                    &WorkflowQuery::default(),
                    &state,
                    error_status(&e),
                )
            }
        }
    })
    .await
    .unwrap_or_else(|response| response)
}

#[derive(Debug, Default, serde::Deserialize)]
struct ConfigQuery {
    saved: Option<String>,
}

fn config_response(
    app: &Shared,
    saved: bool,
    error: Option<&workrail_spec::error::ErrorEnvelope>,
    status: StatusCode,
) -> Response {
    match crate::control::config_overview(&app.config.data_dir) {
        Ok(overview) => html(status, config::render(&overview, saved, error)),
        Err(e) => html(
            StatusCode::INTERNAL_SERVER_ERROR,
            layout::unreadable(&format!("{} {}", e.message, e.suggestion)),
        ),
    }
}

async fn config_page(State(app): State<App>, Query(query): Query<ConfigQuery>) -> Response {
    blocking(&app, move |app| {
        config_response(
            app,
            query.saved.as_deref() == Some("1"),
            None,
            StatusCode::OK,
        )
    })
    .await
    .unwrap_or_else(|response| response)
}

/// Runs a Config form's writes against the desired config of this environment: `write` gets
/// it and the data directory and returns the first refusal; then the browser goes back to the
/// page (303), or the page comes back with the refusal.
async fn save_config(
    app: App,
    write: impl FnOnce(
        &workrail_spec::config::AppliedConfigV1,
        &std::path::Path,
    ) -> Result<(), workrail_spec::error::ErrorEnvelope>
    + Send
    + 'static,
) -> Response {
    blocking(&app, move |app| {
        let data_dir = &app.config.data_dir;
        let overview = match crate::control::config_overview(data_dir) {
            Ok(overview) => overview,
            Err(e) => return config_response(app, false, Some(&e), error_status(&e)),
        };
        let Some(desired) = overview.desired_here.config else {
            return match overview.desired_here.error {
                Some(e) => config_response(app, false, Some(&e), StatusCode::UNPROCESSABLE_ENTITY),
                None => config_response(app, false, None, StatusCode::UNPROCESSABLE_ENTITY),
            };
        };
        match write(&desired, data_dir) {
            Ok(()) => see_other("/config?saved=1"),
            Err(e) => config_response(app, false, Some(&e), error_status(&e)),
        }
    })
    .await
    .unwrap_or_else(|response| response)
}

/// `POST /config/flags`: one checkbox per flag (checked = on); each flag whose value differs
/// from the desired config is written through `control::set_feature`.
async fn save_flags(State(app): State<App>, Form(form): Form<Vec<(String, String)>>) -> Response {
    save_config(app, move |desired, data_dir| {
        for flag in &desired.features {
            let on = field(&form, &flag.name).is_some();
            if on != flag.on {
                crate::control::set_feature(data_dir, &flag.name, on)?;
            }
        }
        Ok(())
    })
    .await
}

/// `POST /config/preferences`: each preference default whose value differs from the desired
/// config is written through `control::set_preference` (`config/preferences.json`;
/// runtime-safe: read when a run starts).
async fn save_preferences(
    State(app): State<App>,
    Form(form): Form<Vec<(String, String)>>,
) -> Response {
    save_config(app, move |desired, data_dir| {
        let current = [
            ("autonomy", desired.preferences.autonomy.as_str()),
            ("riskPolicy", desired.preferences.risk_policy.as_str()),
        ];
        for (key, now) in current {
            if let Some(value) = field(&form, key).filter(|v| *v != now) {
                crate::control::set_preference(data_dir, key, value)?;
            }
        }
        Ok(())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// decision: D184
    /// `--open` writes the tokened link into a file only this user can read and hands the
    /// browser that file's path: the token is on no command line.
    #[test]
    fn open_hands_the_browser_a_private_redirect_file() {
        let dir = std::env::temp_dir().join(format!("workrail-open-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let url = "http://127.0.0.1:4000/c/0123456789abcdef/?token=feedface";
        let file = write_redirect_file(&dir, 4000, url).unwrap_or_else(|e| panic!("{e}"));
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{e}"));
        assert!(text.contains(&format!("content=\"0;url={url}\"")), "{text}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&file)
                .unwrap_or_else(|e| panic!("{e}"))
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let (_, args) = open_command(&file);
        assert!(args.iter().all(|a| !a.contains("feedface")), "{args:?}");
        assert!(args.iter().any(|a| a.ends_with("-open.html")), "{args:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

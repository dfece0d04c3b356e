//! `workrail console`: binds 127.0.0.1, prints its link, routes requests through the access
//! rules and serves the pages. Pages are built on blocking threads from the store's read path.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use maud::Markup;

use super::auth;
use super::pages::{layout, node, session, sessions};
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
    /// 0: any free port.
    pub port: u16,
    /// Launch the default browser on the link (best effort).
    pub open: bool,
}

struct Shared {
    secret: String,
    origin: String,
    config: WorkrailConfig,
    /// Opened on first use once the data directory holds a keyring (nothing is created).
    workrail: Mutex<Option<Arc<Workrail>>>,
}

impl Shared {
    fn workrail(&self) -> Result<Option<Arc<Workrail>>, String> {
        let mut held = self.workrail.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(w) = held.as_ref() {
            return Ok(Some(Arc::clone(w)));
        }
        let opened = Workrail::open_existing(self.config.clone())
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
    let origin = format!("http://127.0.0.1:{port}");
    let url = format!("{origin}/?token={secret}");
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        writeln!(out, "WorkRail Console: {url}")
            .and_then(|()| out.flush())
            .map_err(|e| format!("cannot print the Console's link: {e}"))?;
    }
    if options.open {
        open_browser(&url);
    }
    let app: App = Arc::new(Shared {
        secret,
        origin,
        config: options.config,
        workrail: Mutex::new(None),
    });
    axum::serve(listener, router(app))
        .await
        .map_err(|e| format!("the Console stopped: {e}"))
}

/// Best effort: a failure is a warning on stderr.
fn open_browser(url: &str) {
    let mut command = if cfg!(target_os = "macos") {
        std::process::Command::new("open")
    } else if cfg!(windows) {
        let mut c = std::process::Command::new("cmd");
        c.args(["/C", "start", ""]);
        c
    } else {
        std::process::Command::new("xdg-open")
    };
    let spawned = command
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Err(e) = spawned {
        eprintln!("workrail: warning: cannot open a browser ({e}); open the link above yourself");
    }
}

fn router(app: App) -> Router {
    Router::new()
        .route("/", get(sessions_page))
        .route("/sessions/{session}", get(session_page))
        .route("/sessions/{session}/version", get(version))
        .route("/sessions/{session}/nodes/{node}", get(node_page))
        .route(
            "/assets/console.css",
            get(|| async { asset("text/css; charset=utf-8", CSS) }),
        )
        .route(
            "/assets/console.js",
            get(|| async { asset("text/javascript; charset=utf-8", JS) }),
        )
        .fallback(|| async {
            html(
                StatusCode::NOT_FOUND,
                layout::not_found("No page has this address."),
            )
        })
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

/// The access rules: the secret (link or cookie), then same-origin for state changes.
async fn guard(State(app): State<App>, request: Request, next: Next) -> Response {
    let query = request.uri().query();
    let from_link = auth::query_token(query);
    let presented = from_link
        .clone()
        .or_else(|| auth::cookie_token(request.headers()));
    if !presented.is_some_and(|p| auth::secret_matches(&app.secret, &p)) {
        return html(StatusCode::FORBIDDEN, layout::needs_link());
    }
    let cookie = from_link.is_some().then(|| auth::set_cookie(&app.secret));
    if let Some(cookie) = &cookie
        && matches!(*request.method(), Method::GET | Method::HEAD)
    {
        let path = request.uri().path();
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
    let rows = read(&app, move |w| -> Result<Vec<SessionRow>, String> {
        let Some(w) = w else {
            return Ok(Vec::new());
        };
        use crate::gc::RetentionClock as _;
        let clock = crate::gc::OsRetentionClock::new(data_dir);
        w.console_sessions(&|p| clock.modified(p).ok().flatten())
    })
    .await;
    match rows {
        Ok(Ok(rows)) => html(StatusCode::OK, sessions::render(&rows, &filter)),
        Ok(Err(e)) => html(StatusCode::INTERNAL_SERVER_ERROR, layout::unreadable(&e)),
        Err(response) => response,
    }
}

async fn session_page(State(app): State<App>, Path(id): Path<String>) -> Response {
    let key = id.clone();
    let found = read(&app, move |w| match w {
        Some(w) => w.console_session(&key),
        None => ConsoleLookup::NotFound,
    })
    .await;
    match found {
        Ok(found) => lookup_response(
            found,
            &format!("No session {id} in this data directory."),
            |view| html(StatusCode::OK, session::render(&view)),
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

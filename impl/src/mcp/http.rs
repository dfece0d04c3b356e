//! `workrail serve --http`: the same tools over MCP Streamable HTTP (rmcp's server transport on
//! axum), stateless, answering each POST with `application/json` (decision D180).
//!
//! In front of rmcp, before a byte of the body is read, every request must pass, in order:
//! 1. **Origin** (MCP: servers must validate it against DNS rebinding): absent, or the server's
//!    own (`http://127.0.0.1:<port>`, `http://localhost:<port>`, `http://[::1]:<port>`, or the
//!    bound address), else 403;
//! 2. **a client key**: `Authorization: Bearer <key>` held by a client of `keys/clients.json`
//!    ([`crate::control::client_keys`], re-read when it changes), else 401;
//! 3. **the client's share**: at most [`MAX_IN_FLIGHT_PER_CLIENT`] requests of one client at
//!    once, else 429 with `Retry-After`.
//!
//! rmcp then checks `Host` (loopback names unless the server is bound elsewhere), reads the body
//! up to [`MAX_BODY_BYTES`] (413 beyond) and runs the call. A tool call runs on the blocking pool
//! only once its whole request has arrived, and the session lock is taken and released inside
//! it, so a slow or vanished client never holds a lock: the answer is written after the call.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::sync::Semaphore;

use super::backend::ToolBackend;
use super::server::{CallThread, WorkrailServer};
use crate::control::client_keys::{ClientKeys, Refusal};

/// The MCP endpoint's path.
pub const ENDPOINT: &str = "/mcp";
/// The largest request body read (the largest legitimate arguments are far below it: context is
/// at most 256 KiB, notes 4 KiB); rmcp answers 413 beyond it.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// Requests one client may have in flight at once.
pub const MAX_IN_FLIGHT_PER_CLIENT: usize = 8;

/// The default address: loopback only, any free port.
pub const DEFAULT_ADDR: &str = "127.0.0.1:0";

struct Gate {
    origins: Vec<String>,
    keys: Arc<ClientKeys>,
    in_flight: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Gate {
    fn share_of(&self, client: &str) -> Arc<Semaphore> {
        let mut held = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(
            held.entry(client.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(MAX_IN_FLIGHT_PER_CLIENT))),
        )
    }
}

/// The origins a browser page of this server itself would send.
pub fn own_origins(bound: SocketAddr) -> Vec<String> {
    let port = bound.port();
    let mut origins = vec![
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
        format!("http://[::1]:{port}"),
    ];
    let ip = bound.ip();
    if !ip.is_loopback() && !ip.is_unspecified() {
        origins.push(match ip {
            IpAddr::V4(v4) => format!("http://{v4}:{port}"),
            IpAddr::V6(v6) => format!("http://[{v6}]:{port}"),
        });
    }
    origins
}

/// rmcp's `Host` check: loopback names on a loopback address, plus the address itself when one
/// is named; none when bound to every interface (clients then reach it by names this server
/// cannot know, and the client key is the guard).
fn allowed_hosts(bound: SocketAddr) -> Option<Vec<String>> {
    let ip = bound.ip();
    if ip.is_unspecified() {
        return None;
    }
    let mut hosts = vec![
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "::1".to_owned(),
    ];
    if !ip.is_loopback() {
        hosts.push(ip.to_string());
    }
    Some(hosts)
}

/// The router serving MCP at [`ENDPOINT`] for the server bound at `bound`.
pub fn router<B: ToolBackend>(backend: Arc<B>, keys: Arc<ClientKeys>, bound: SocketAddr) -> Router {
    let server = WorkrailServer::new(backend).with_calls_on(CallThread::BlockingPool);
    let mut config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .with_max_request_body_bytes(MAX_BODY_BYTES);
    config = match allowed_hosts(bound) {
        Some(hosts) => config.with_allowed_hosts(hosts),
        None => config.disable_allowed_hosts(),
    };
    let mcp = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let gate = Arc::new(Gate {
        origins: own_origins(bound),
        keys,
        in_flight: Mutex::new(HashMap::new()),
    });
    Router::new()
        .route_service(ENDPOINT, mcp)
        .fallback(|| async {
            refusal(
                StatusCode::NOT_FOUND,
                &format!("Not found: WorkRail serves MCP at {ENDPOINT}."),
            )
        })
        .layer(middleware::from_fn_with_state(gate, guard))
}

fn refusal(status: StatusCode, text: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{text}\n"),
    )
        .into_response()
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, key) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| key.trim())
        .filter(|k| !k.is_empty())
}

async fn guard(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        let own = origin
            .to_str()
            .is_ok_and(|o| gate.origins.iter().any(|own| own == o));
        if !own {
            tracing::info!(origin = ?origin, "refused a request from a foreign Origin");
            return refusal(
                StatusCode::FORBIDDEN,
                &format!(
                    "Forbidden: the Origin {origin:?} is not this server's ({}). Browser pages of other sites may not call WorkRail; clients that are not browsers send no Origin.",
                    gate.origins.join(", ")
                ),
            );
        }
    }
    let keys = Arc::clone(&gate.keys);
    let presented = bearer(request.headers()).map(str::to_owned);
    // A stat (and a small read when the file changed): off the async workers all the same.
    let admitted = tokio::task::spawn_blocking(move || keys.admit(presented.as_deref()))
        .await
        .unwrap_or_else(|e| Err(Refusal::Unreadable(e.to_string())));
    let client = match admitted {
        Ok(client) => client,
        Err(why) => return unauthorized(&why),
    };
    let Ok(_share) = gate.share_of(&client).try_acquire_owned() else {
        tracing::info!(%client, "refused a request over the client's in-flight bound");
        let mut response = refusal(
            StatusCode::TOO_MANY_REQUESTS,
            &format!(
                "Too many requests: client {client:?} already has {MAX_IN_FLIGHT_PER_CLIENT} requests in flight; retry when one is answered."
            ),
        );
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return response;
    };
    tracing::debug!(%client, method = %request.method(), "admitted");
    next.run(request).await
}

fn unauthorized(why: &Refusal) -> Response {
    let (text, challenge) = match why {
        Refusal::Missing => (
            "Unauthorized: send `Authorization: Bearer <key>`. The server's operator makes a key with `workrail keys client add <name>`.".to_owned(),
            r#"Bearer realm="workrail""#,
        ),
        Refusal::Unknown => (
            "Unauthorized: this key is not (or no longer) a client key of this server. Ask its operator for a key (`workrail keys client list` shows the clients).".to_owned(),
            r#"Bearer realm="workrail", error="invalid_token""#,
        ),
        Refusal::Unreadable(detail) => {
            tracing::error!(%detail, "the client key file cannot be read: every request is refused");
            return refusal(
                StatusCode::SERVICE_UNAVAILABLE,
                "Unavailable: the server cannot read its client keys; its operator must fix keys/clients.json in its data directory (the server's log names the problem).",
            );
        }
    };
    tracing::info!(refusal = ?why, "refused a request without a valid client key");
    let mut response = refusal(StatusCode::UNAUTHORIZED, &text);
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    response
}

/// Serves `router` on `listener` until the process ends.
pub async fn serve_on<B: ToolBackend>(
    backend: Arc<B>,
    keys: Arc<ClientKeys>,
    listener: tokio::net::TcpListener,
) -> Result<(), String> {
    let bound = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    axum::serve(listener, router(backend, keys, bound))
        .await
        .map_err(|e| format!("the HTTP server stopped: {e}"))
}

/// Builds a multi-threaded runtime, binds `addr`, prints `WorkRail MCP over HTTP:
/// http://<addr>/mcp` on stdout, and serves until the process is killed.
pub fn run_http<B: ToolBackend>(
    backend: Arc<B>,
    keys: Arc<ClientKeys>,
    addr: SocketAddr,
) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        let bound = listener
            .local_addr()
            .map_err(|e| format!("cannot read the bound address: {e}"))?;
        {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            writeln!(out, "WorkRail MCP over HTTP: http://{bound}{ENDPOINT}")
                .and_then(|()| out.flush())
                .map_err(|e| format!("cannot print the server's address: {e}"))?;
        }
        serve_on(backend, keys, listener).await
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// decision: D180
    #[test]
    fn own_origins_name_the_port_and_any_named_address() {
        let loopback: SocketAddr = "127.0.0.1:4100".parse().unwrap_or_else(|_| unreachable!());
        assert_eq!(
            own_origins(loopback),
            [
                "http://127.0.0.1:4100",
                "http://localhost:4100",
                "http://[::1]:4100"
            ]
        );
        let lan: SocketAddr = "10.1.2.3:80".parse().unwrap_or_else(|_| unreachable!());
        assert!(own_origins(lan).contains(&"http://10.1.2.3:80".to_owned()));
        let any: SocketAddr = "0.0.0.0:80".parse().unwrap_or_else(|_| unreachable!());
        assert_eq!(own_origins(any).len(), 3);
        assert!(allowed_hosts(any).is_none());
        assert_eq!(
            allowed_hosts(loopback).map(|h| h.len()),
            Some(3),
            "loopback names only"
        );
    }

    #[test]
    fn the_bearer_key_is_read_from_the_authorization_header() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer wrc_abc"),
        );
        assert_eq!(bearer(&h), Some("wrc_abc"));
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  wrc_abc "),
        );
        assert_eq!(bearer(&h), Some("wrc_abc"));
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic x"));
        assert_eq!(bearer(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer(&h), None);
    }
}

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
//!
//! With a certificate and key ([`HttpOptions::tls`], decision D190) it serves HTTPS with rustls;
//! a non-loopback address without TLS is refused unless plain HTTP is asked for by name
//! ([`HttpOptions::check`], decision D191).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
/// How long a client may take over its TLS handshake before its connection is dropped.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The certificate chain and private key `serve --http` presents (PEM files).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// How `serve --http` listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpOptions {
    pub addr: SocketAddr,
    /// HTTPS with these files; `None`: plain HTTP.
    pub tls: Option<TlsFiles>,
    /// Plain HTTP on a non-loopback address, asked for by name (`--allow-plain-http`), e.g.
    /// behind a TLS reverse proxy on a private network.
    pub allow_plain_http: bool,
}

impl HttpOptions {
    /// Refuses plain HTTP on an address other machines can reach unless it was asked for
    /// (decision D191): client keys and tokens would cross the network in the clear.
    pub fn check(&self) -> Result<(), String> {
        if self.tls.is_none() && !self.addr.ip().is_loopback() && !self.allow_plain_http {
            return Err(format!(
                "refusing to serve plain HTTP on {}: other machines can reach it, and client keys and tokens would cross the network unencrypted. Give a certificate (`--tls-cert cert.pem --tls-key key.pem`, or WORKRAIL_HTTP_TLS_CERT and WORKRAIL_HTTP_TLS_KEY), or put a TLS reverse proxy in front and add `--allow-plain-http`, or listen on 127.0.0.1.",
                self.addr
            ));
        }
        Ok(())
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }
}

/// The rustls server configuration of `files`: every problem names the file and the fix.
pub fn tls_config(files: &TlsFiles) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls_pki_types::pem::PemObject as _;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let unreadable = |path: &Path, what: &str, e: &dyn std::fmt::Display| {
        format!(
            "cannot read the TLS {what} {}: {e}. Give a PEM file (`--tls-cert` the certificate chain, server certificate first; `--tls-key` its private key).",
            path.display()
        )
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| unreadable(&files.cert, "certificate", &e))?
        .collect::<Result<_, _>>()
        .map_err(|e| unreadable(&files.cert, "certificate", &e))?;
    if certs.is_empty() {
        return Err(unreadable(
            &files.cert,
            "certificate",
            &"it holds no CERTIFICATE block",
        ));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| unreadable(&files.key, "private key", &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!(
                "the TLS certificate {} and key {} do not make a usable pair: {e}. Check that the key is the certificate's.",
                files.cert.display(),
                files.key.display()
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Accepted connections whose TLS handshake completed. Handshakes run on their own tasks with
/// [`TLS_HANDSHAKE_TIMEOUT`], so a client that stalls in one delays no other.
struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(
        tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
        SocketAddr,
    )>,
    local: SocketAddr,
}

impl TlsListener {
    fn new(
        tcp: tokio::net::TcpListener,
        config: Arc<rustls::ServerConfig>,
    ) -> Result<Self, String> {
        let local = tcp
            .local_addr()
            .map_err(|e| format!("cannot read the bound address: {e}"))?;
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = match tcp.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors and the like: pause rather than spin.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
                    {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::info!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::info!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self { ready, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accepting task never ends while the runtime runs.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

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

/// The origins a browser page of this server itself would send (`scheme` `http` or `https`).
pub fn own_origins(bound: SocketAddr, scheme: &str) -> Vec<String> {
    let port = bound.port();
    let mut origins = vec![
        format!("{scheme}://127.0.0.1:{port}"),
        format!("{scheme}://localhost:{port}"),
        format!("{scheme}://[::1]:{port}"),
    ];
    let ip = bound.ip();
    if !ip.is_loopback() && !ip.is_unspecified() {
        origins.push(match ip {
            IpAddr::V4(v4) => format!("{scheme}://{v4}:{port}"),
            IpAddr::V6(v6) => format!("{scheme}://[{v6}]:{port}"),
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

/// The router serving MCP at [`ENDPOINT`] for the server bound at `bound` (`scheme` `http`
/// or `https`, for the origins it accepts).
pub fn router<B: ToolBackend>(
    backend: Arc<B>,
    keys: Arc<ClientKeys>,
    bound: SocketAddr,
    scheme: &str,
) -> Router {
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
        origins: own_origins(bound, scheme),
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
    axum::serve(listener, router(backend, keys, bound, "http"))
        .await
        .map_err(|e| format!("the HTTP server stopped: {e}"))
}

/// Serves `router` over TLS on `listener` until the process ends.
pub async fn serve_tls_on<B: ToolBackend>(
    backend: Arc<B>,
    keys: Arc<ClientKeys>,
    listener: tokio::net::TcpListener,
    config: Arc<rustls::ServerConfig>,
) -> Result<(), String> {
    let tls = TlsListener::new(listener, config)?;
    let bound = tls.local;
    axum::serve(tls, router(backend, keys, bound, "https"))
        .await
        .map_err(|e| format!("the HTTPS server stopped: {e}"))
}

/// Checks `options` ([`HttpOptions::check`]) and the TLS files, builds a multi-threaded
/// runtime, binds the address, prints `WorkRail MCP over HTTP: http(s)://<addr>/mcp` on
/// stdout, and serves until the process is killed.
pub fn run_http<B: ToolBackend>(
    backend: Arc<B>,
    keys: Arc<ClientKeys>,
    options: &HttpOptions,
) -> Result<(), String> {
    options.check()?;
    let tls = options.tls.as_ref().map(tls_config).transpose()?;
    let addr = options.addr;
    let scheme = options.scheme();
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
            writeln!(out, "WorkRail MCP over HTTP: {scheme}://{bound}{ENDPOINT}")
                .and_then(|()| out.flush())
                .map_err(|e| format!("cannot print the server's address: {e}"))?;
        }
        match tls {
            Some(config) => serve_tls_on(backend, keys, listener, config).await,
            None => serve_on(backend, keys, listener).await,
        }
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
            own_origins(loopback, "http"),
            [
                "http://127.0.0.1:4100",
                "http://localhost:4100",
                "http://[::1]:4100"
            ]
        );
        let lan: SocketAddr = "10.1.2.3:80".parse().unwrap_or_else(|_| unreachable!());
        assert!(own_origins(lan, "http").contains(&"http://10.1.2.3:80".to_owned()));
        assert!(own_origins(lan, "https").contains(&"https://10.1.2.3:80".to_owned()));
        let any: SocketAddr = "0.0.0.0:80".parse().unwrap_or_else(|_| unreachable!());
        assert_eq!(own_origins(any, "http").len(), 3);
        assert!(allowed_hosts(any).is_none());
        assert_eq!(
            allowed_hosts(loopback).map(|h| h.len()),
            Some(3),
            "loopback names only"
        );
    }

    /// decision: D191
    #[test]
    fn plain_http_beyond_loopback_must_be_asked_for_by_name() {
        let options = |addr: &str, tls: bool, allow: bool| HttpOptions {
            addr: addr.parse().unwrap_or_else(|_| unreachable!()),
            tls: tls.then(|| TlsFiles {
                cert: "c.pem".into(),
                key: "k.pem".into(),
            }),
            allow_plain_http: allow,
        };
        assert!(options("127.0.0.1:0", false, false).check().is_ok());
        assert!(options("[::1]:0", false, false).check().is_ok());
        let refused = options("0.0.0.0:8080", false, false).check();
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("--tls-cert") && e.contains("--allow-plain-http")),
            "{refused:?}"
        );
        assert!(options("10.0.0.5:80", false, false).check().is_err());
        assert!(options("0.0.0.0:8080", true, false).check().is_ok());
        assert!(options("0.0.0.0:8080", false, true).check().is_ok());
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

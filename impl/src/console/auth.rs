//! The Console's access rules (decision D184): the per-launch secret, presented once in the
//! printed link's `token` query and then in a cookie that no other server can receive, compared
//! in constant time; the `Host` check; and the same-origin check for state-changing requests.
//!
//! Cookies are scoped to a host, not to a port: any other web server on 127.0.0.1 that the
//! browser visits would receive a cookie set with `Path=/`. So every page of a launch lives under
//! a per-launch path (`/c/<nonce>/`) and the cookie is scoped to that path (and named after the
//! port), so the browser sends it to no other path and so to no other server's pages.

use axum::http::{HeaderMap, Method, header};
use subtle::ConstantTimeEq;

use crate::entropy::Entropy;

/// The cookie that carries the secret after the first visit: named after the Console's port,
/// so two Consoles of one browser keep theirs apart.
pub fn cookie_name(port: u16) -> String {
    format!("workrail_console_{port}")
}

/// The per-launch secret: 32 bytes from the entropy source, as lowercase hex.
pub fn new_secret(entropy: &dyn Entropy) -> Result<String, String> {
    let mut bytes = [0u8; 32];
    entropy
        .fill(&mut bytes)
        .map_err(|e| format!("cannot draw the Console secret: {}", e.0))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Constant-time equality of a presented secret with the launch secret.
pub fn secret_matches(secret: &str, presented: &str) -> bool {
    secret.len() == presented.len() && bool::from(secret.as_bytes().ct_eq(presented.as_bytes()))
}

/// The raw query split into `(name, decoded value, raw pair)`.
fn pairs(query: &str) -> impl Iterator<Item = (String, String, &str)> {
    query.split('&').filter(|p| !p.is_empty()).map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(&s.replace('+', " "))
                .decode_utf8_lossy()
                .into_owned()
        };
        (decode(k), decode(v), pair)
    })
}

/// The `token` query parameter, if any.
pub fn query_token(query: Option<&str>) -> Option<String> {
    pairs(query?)
        .find(|(k, _, _)| k == "token")
        .map(|(_, v, _)| v)
}

/// The query without its `token` parameters (`None` when nothing else is left).
pub fn query_without_token(query: Option<&str>) -> Option<String> {
    let rest: Vec<&str> = pairs(query?)
        .filter(|(k, _, _)| k != "token")
        .map(|(_, _, raw)| raw)
        .collect();
    (!rest.is_empty()).then(|| rest.join("&"))
}

/// The secret presented in the cookie `name`, if any.
pub fn cookie_token(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value.to_owned())
}

/// The `Set-Cookie` value that keeps the secret for this launch's pages only: scoped to their
/// path (`prefix`, `/c/<nonce>`), HttpOnly, SameSite=Strict.
pub fn set_cookie(name: &str, secret: &str, prefix: &str) -> String {
    format!("{name}={secret}; HttpOnly; SameSite=Strict; Path={prefix}/")
}

/// Whether the request was addressed to this Console (`127.0.0.1:<port>` or
/// `localhost:<port>`): a page of another name that resolves to 127.0.0.1 (DNS rebinding) is
/// refused.
pub fn host_matches(headers: &HeaderMap, port: u16) -> bool {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|h| h == format!("127.0.0.1:{port}") || h == format!("localhost:{port}"))
}

/// The attributes whose site-absolute paths get the launch's prefix.
const LINK_ATTRIBUTES: [&str; 4] = ["href=\"/", "action=\"/", "src=\"/", "data-version-url=\"/"];

/// `html` with every site-absolute link (`href="/…"`, `action`, `src`, `data-version-url`) under
/// the launch's `prefix`, so pages are written with plain paths and served under the prefix.
pub fn prefix_links(html: &str, prefix: &str) -> String {
    let mut out = html.to_owned();
    for attr in LINK_ATTRIBUTES {
        let with = format!("{}{}/", &attr[..attr.len() - 1], prefix);
        out = out.replace(attr, &with);
    }
    // A protocol-relative `//host` link was never ours to prefix.
    out.replace(&format!("=\"{prefix}//"), "=\"//")
}

/// A site-absolute `location` under the launch's `prefix` (unchanged when already under it).
pub fn prefixed(location: &str, prefix: &str) -> String {
    if location.starts_with(&format!("{prefix}/"))
        || location == prefix
        || !location.starts_with('/')
    {
        location.to_owned()
    } else {
        format!("{prefix}{location}")
    }
}

/// Whether a request changes state and so must come from the Console's own pages.
pub fn is_state_changing(method: &Method) -> bool {
    matches!(
        *method,
        Method::POST | Method::PUT | Method::DELETE | Method::PATCH
    )
}

/// A state-changing request is same-origin when its `Origin` is the Console's, or, without an
/// `Origin`, its `Referer` starts with the Console's origin.
pub fn same_origin(headers: &HeaderMap, origin: &str) -> bool {
    if let Some(o) = headers.get(header::ORIGIN) {
        return o.to_str().is_ok_and(|o| o == origin);
    }
    headers
        .get(header::REFERER)
        .and_then(|r| r.to_str().ok())
        .is_some_and(|r| {
            r.strip_prefix(origin)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_found_and_removed_from_the_query() {
        assert_eq!(query_token(Some("q=a&token=abc")), Some("abc".to_owned()));
        assert_eq!(
            query_without_token(Some("q=a%20b&token=abc&page=2")),
            Some("q=a%20b&page=2".to_owned())
        );
        assert_eq!(query_without_token(Some("token=abc")), None);
        assert!(secret_matches("abcd", "abcd"));
        assert!(!secret_matches("abcd", "abce"));
        assert!(!secret_matches("abcd", "abc"));
    }

    /// decision: D184
    #[test]
    fn links_move_under_the_launch_prefix_and_the_cookie_stays_there() {
        let prefix = "/c/0123abcd";
        assert_eq!(
            prefix_links(
                r##"<a href="/sessions/x">s</a><form action="/config/flags"><a href="//e.example/">e</a><a href="https://e.example/">f</a><a href="#n">g</a>"##,
                prefix
            ),
            r##"<a href="/c/0123abcd/sessions/x">s</a><form action="/c/0123abcd/config/flags"><a href="//e.example/">e</a><a href="https://e.example/">f</a><a href="#n">g</a>"##
        );
        assert_eq!(
            prefixed("/workflows/a?saved=1", prefix),
            "/c/0123abcd/workflows/a?saved=1"
        );
        assert_eq!(prefixed("/c/0123abcd/x", prefix), "/c/0123abcd/x");
        let cookie = set_cookie(&cookie_name(4000), "s3cret", prefix);
        assert_eq!(
            cookie,
            "workrail_console_4000=s3cret; HttpOnly; SameSite=Strict; Path=/c/0123abcd/"
        );
        let mut h = HeaderMap::new();
        assert!(!host_matches(&h, 4000));
        for (host, ok) in [
            ("127.0.0.1:4000", true),
            ("localhost:4000", true),
            ("127.0.0.1:4001", false),
            ("evil.example:4000", false),
        ] {
            h.insert(
                header::HOST,
                host.parse().unwrap_or_else(|_| unreachable!()),
            );
            assert_eq!(host_matches(&h, 4000), ok, "{host}");
        }
    }

    #[test]
    fn origin_or_referer_must_name_the_console() {
        let origin = "http://127.0.0.1:4000";
        let mut h = HeaderMap::new();
        assert!(!same_origin(&h, origin));
        h.insert(
            header::REFERER,
            "http://127.0.0.1:4000/x"
                .parse()
                .unwrap_or_else(|_| unreachable!()),
        );
        assert!(same_origin(&h, origin));
        h.insert(
            header::REFERER,
            "http://127.0.0.1:40000/x"
                .parse()
                .unwrap_or_else(|_| unreachable!()),
        );
        assert!(!same_origin(&h, origin));
        h.insert(
            header::ORIGIN,
            "http://evil.example"
                .parse()
                .unwrap_or_else(|_| unreachable!()),
        );
        assert!(!same_origin(&h, origin));
    }
}

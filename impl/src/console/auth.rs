//! The Console's access rules: the per-launch secret (from a link's `token` query or the
//! `workrail_console` cookie), compared in constant time, and the same-origin check for
//! state-changing requests.

use axum::http::{HeaderMap, Method, header};
use subtle::ConstantTimeEq;

use crate::entropy::Entropy;

/// The cookie that carries the secret after the first visit.
pub const COOKIE: &str = "workrail_console";

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

/// The secret presented in the `workrail_console` cookie, if any.
pub fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

/// The `Set-Cookie` value that keeps the secret for this origin.
pub fn set_cookie(secret: &str) -> String {
    format!("{COOKIE}={secret}; HttpOnly; SameSite=Strict; Path=/")
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

//! `serve --http` over TLS (decision D190) with a self-signed certificate made here, and the
//! refusal of plain HTTP beyond loopback (decision D191), with the built binary.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::http_support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use http_support::{HttpServer, add_key, bearer, call_body, cli, parse_answer, request_head};
use serde_json::json;

fn tls_post(
    port: u16,
    roots: rustls::RootCertStore,
    key: &str,
    body: &[u8],
) -> Result<http_support::Answer, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let conn = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(request_head(port, &[("Authorization", &bearer(key))], body.len()).as_bytes())
        .map_err(|e| e.to_string())?;
    tls.write_all(body).map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    match tls.read_to_end(&mut raw) {
        Ok(_) => {}
        // The server may close without a TLS close_notify once the answer is written.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e.to_string()),
    }
    parse_answer(&raw)
}

/// decision: D190
#[test]
fn a_client_that_trusts_the_certificate_is_served_over_https() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let made =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap();
    let (cert, key_file) = (data.join("cert.pem"), data.join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key_file, made.signing_key.serialize_pem()).unwrap();
    let key = add_key(data, "tls");
    let server = HttpServer::start_args(
        data,
        &[],
        &[
            "serve",
            "--http",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key_file.to_str().unwrap(),
        ],
    );
    assert!(
        server.url.starts_with("https://127.0.0.1:"),
        "{}",
        server.url
    );
    let mut roots = rustls::RootCertStore::empty();
    roots.add(made.cert.der().clone()).unwrap();
    let body = call_body("start_workflow", &json!({"workflowId": "wr.coding_task"}));
    let answer = tls_post(server.port, roots, &key, &body).unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.json()["result"]["isError"], json!(false));

    // A client that does not trust the certificate gets no answer; plain HTTP gets none either.
    let untrusting = tls_post(server.port, rustls::RootCertStore::empty(), &key, &body);
    assert!(untrusting.is_err(), "{untrusting:?}");
    let plain = http_support::try_post(server.port, &[("Authorization", &bearer(&key))], &body);
    assert!(plain.is_err(), "{plain:?}");
    assert_eq!(std::fs::read_dir(data.join("sessions")).unwrap().count(), 1);
}

/// decision: D190
/// decision: D191
#[test]
fn plain_http_beyond_loopback_and_a_bad_certificate_are_refused_before_serving() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path();
    let out = cli(data, &[], &["serve", "--http", "0.0.0.0:0"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("--allow-plain-http") && text.contains("--tls-cert"),
        "{text}"
    );
    std::fs::write(data.join("bad.pem"), "not a certificate").unwrap();
    let bad = data.join("bad.pem");
    let out = cli(
        data,
        &[],
        &[
            "serve",
            "--http",
            "--tls-cert",
            bad.to_str().unwrap(),
            "--tls-key",
            bad.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.pem"));
    let only_cert = cli(
        data,
        &[("WORKRAIL_HTTP_TLS_CERT".to_owned(), "c.pem".to_owned())],
        &["serve", "--http"],
    );
    assert_eq!(only_cert.status.code(), Some(1));
}

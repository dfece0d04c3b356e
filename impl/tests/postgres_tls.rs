//! TLS to PostgreSQL as the URL's `sslmode` asks (decision D114): `require` encrypts (the
//! server sees the backend's connections as SSL) and runs the protocol; `verify-full` with the
//! server's CA in `sslrootcert` and the host the certificate names connects; `verify-full`
//! against another CA and an unknown `sslmode` are refused with a clear error that never shows
//! the password.
//!
//! Guards against: a connector that ignores `sslmode` (plain connections under `require`), a
//! verifier that accepts any certificate under `verify-full`, and a URL whose libpq-only
//! parameters break the client's parser.
//!
//! Needs `WORKRAIL_TEST_POSTGRES=postgres://…` and `WORKRAIL_TEST_POSTGRES_CA` (`source
//! .ci/postgres.sh`: a cluster with `ssl=on`); without them the tests say why and pass, except
//! under `CI`, where they fail. Each test uses a schema of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use std::path::PathBuf;
use std::process::Command;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use protocol_support::{ack, catalog};
use workrail::entropy::SeededEntropy;
use workrail::protocol::Workrail;
use workrail::store::Store;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail::store::postgres::PostgresBackend;
use workrail::store::postgres::tls;
use workrail_spec::tools::StartWorkflowInput;

/// The database under test and its server's CA, or `None` (and why) outside CI; under CI their
/// absence fails.
fn postgres(test: &str) -> Option<(String, String)> {
    let url = std::env::var("WORKRAIL_TEST_POSTGRES").unwrap_or_default();
    let ca = std::env::var("WORKRAIL_TEST_POSTGRES_CA").unwrap_or_default();
    if !url.is_empty() && !ca.is_empty() {
        return Some((url, ca));
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but WORKRAIL_TEST_POSTGRES or WORKRAIL_TEST_POSTGRES_CA is not: the PostgreSQL TLS tests must run in CI (source .ci/postgres.sh to start a throwaway cluster with TLS)"
    );
    eprintln!(
        "{test}: skipped, WORKRAIL_TEST_POSTGRES and WORKRAIL_TEST_POSTGRES_CA are not both set (`source .ci/postgres.sh` sets them)"
    );
    None
}

/// `url` with `params` added to its query.
fn with(url: &str, params: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{params}")
}

/// `url` with a password the trust-authenticated test cluster ignores, to look for in errors.
fn with_password(url: &str) -> String {
    url.replacen("postgres://postgres@", "postgres://postgres:s3cret@", 1)
}

/// Runs `sql` through a client of its own on the TLS settings of `url`; the rows' first column.
fn query_bools(url: &str, sql: &str) -> Vec<bool> {
    let (plain, settings) = tls::split_url(url).unwrap();
    let connector = tls::connector(&settings).unwrap();
    let mut config = tokio_postgres::Config::from_str(&plain).unwrap();
    config.ssl_mode(settings.mode.negotiation());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, connection) = config.connect(connector).await.unwrap();
        let task = tokio::spawn(connection);
        let rows = client.query(sql, &[]).await.unwrap();
        drop(client);
        let _ = task.await;
        rows.iter().map(|row| row.get::<_, bool>(0)).collect()
    })
}

static SCHEMAS: AtomicUsize = AtomicUsize::new(0);

fn schema_name(test: &str) -> String {
    format!(
        "wrtls_{test}_{}_{}",
        std::process::id(),
        SCHEMAS.fetch_add(1, Ordering::SeqCst)
    )
}

/// Drops the schema at the end.
struct Dropped(String, String);

impl Drop for Dropped {
    fn drop(&mut self) {
        query_bools(
            &self.0,
            &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.1),
        );
    }
}

fn workrail(url: &str, schema: &str) -> Workrail {
    let backend = PostgresBackend::connect(url, schema).unwrap();
    let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
    Workrail::with_store(
        fs,
        Store::postgres(backend),
        catalog(),
        Arc::new(SeededEntropy::new(7)),
    )
    .unwrap()
}

/// A start and an ack through `wr`.
fn start_and_ack(wr: &Workrail) {
    let started = wr
        .start_workflow(StartWorkflowInput {
            workflow_id: "wr.coding_task".into(),
            context: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    wr.continue_workflow(ack(&started, "Done.", vec![]))
        .unwrap();
}

/// The error connecting to `url` with `schema`, which must fail (`why`).
fn refused(url: &str, schema: &str, why: &str) -> String {
    match PostgresBackend::connect(url, schema) {
        Ok(_) => panic!("connected, but {why}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn sslmode_require_encrypts_every_connection() {
    let Some((url, _)) = postgres("sslmode_require_encrypts_every_connection") else {
        return;
    };
    let url = with(&url, "sslmode=require");
    let schema = schema_name("require");
    let _drop = Dropped(url.clone(), schema.clone());
    let wr = workrail(&url, &schema);
    start_and_ack(&wr);
    // The client on the same settings is on TLS…
    assert_eq!(
        query_bools(
            &url,
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        ),
        vec![true]
    );
    // …and so is the backend's own connection.
    let seen = query_bools(
        &url,
        &format!(
            "SELECT s.ssl FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'workrail-main:{schema}'"
        ),
    );
    assert!(!seen.is_empty(), "the backend's connection is not listed");
    assert!(seen.iter().all(|ssl| *ssl), "{seen:?}");
    // `disable` stays plain.
    let plain = with(
        &std::env::var("WORKRAIL_TEST_POSTGRES").unwrap(),
        "sslmode=disable",
    );
    assert_eq!(
        query_bools(
            &plain,
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        ),
        vec![false]
    );
}

#[test]
fn verify_full_with_the_servers_ca_connects() {
    let Some((url, ca)) = postgres("verify_full_with_the_servers_ca_connects") else {
        return;
    };
    let url = with(
        &url.replacen("127.0.0.1", "localhost", 1),
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let schema = schema_name("verify_full");
    let _drop = Dropped(url.clone(), schema.clone());
    let wr = workrail(&url, &schema);
    start_and_ack(&wr);
    assert_eq!(
        query_bools(
            &url,
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        ),
        vec![true]
    );
    // verify-ca checks the chain only.
    let ca_only = with(
        &std::env::var("WORKRAIL_TEST_POSTGRES").unwrap(),
        &format!("sslmode=verify-ca&sslrootcert={ca}"),
    );
    assert_eq!(
        query_bools(
            &ca_only,
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        ),
        vec![true]
    );
}

/// A CA of the test's own, unrelated to the server's: the directory holding it (removed on
/// drop; one per test, as tests run in parallel) and its certificate's path.
fn another_ca() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("workrail-other-ca-")
        .tempdir()
        .unwrap();
    let cert = dir.path().join("ca.crt");
    let status = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=another CA"])
        .arg("-keyout")
        .arg(dir.path().join("ca.key"))
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl runs");
    assert!(status.status.success(), "{status:?}");
    (dir, cert)
}

#[test]
fn verify_full_against_another_ca_is_refused_clearly() {
    let Some((url, _)) = postgres("verify_full_against_another_ca_is_refused_clearly") else {
        return;
    };
    let (_other_dir, other) = another_ca();
    let url = with(
        &with_password(&url).replacen("127.0.0.1", "localhost", 1),
        &format!("sslmode=verify-full&sslrootcert={}", other.display()),
    );
    let err = refused(
        &url,
        &schema_name("wrong_ca"),
        "a server certificate from another CA is refused",
    );
    assert!(err.contains("TLS"), "{err}");
    assert!(err.contains("sslrootcert"), "{err}");
    assert!(err.contains("sslmode=verify-full"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
    eprintln!("refused as: {err}");
}

#[test]
fn an_unknown_sslmode_or_a_missing_root_certificate_is_refused_clearly() {
    let Some((url, _)) = postgres("an_unknown_sslmode_is_refused_clearly") else {
        return;
    };
    let url = with_password(&url);
    let err = refused(
        &with(&url, "sslmode=bogus"),
        &schema_name("bogus"),
        "sslmode=bogus is refused",
    );
    assert!(err.contains("sslmode=\"bogus\""), "{err}");
    assert!(err.contains("verify-full"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
    let err = refused(
        &with(&url, "sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem"),
        &schema_name("missing"),
        "a missing root certificate is refused",
    );
    assert!(err.contains("/nonexistent/ca.pem"), "{err}");
    assert!(err.contains("cannot read"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
}

/// The client certificate and key of the role `wr_client_cert` (`.ci/postgres.sh`), or `None`
/// (and why) outside CI; under CI their absence fails.
fn client_certificate(test: &str) -> Option<(String, String)> {
    let cert = std::env::var("WORKRAIL_TEST_POSTGRES_CLIENT_CERT").unwrap_or_default();
    let key = std::env::var("WORKRAIL_TEST_POSTGRES_CLIENT_KEY").unwrap_or_default();
    if !cert.is_empty() && !key.is_empty() {
        return Some((cert, key));
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI is set but WORKRAIL_TEST_POSTGRES_CLIENT_CERT or _KEY is not: source .ci/postgres.sh"
    );
    eprintln!("{test}: skipped, no client certificate (`source .ci/postgres.sh` makes one)");
    None
}

/// `url` logging in as the role that must present a client certificate.
fn as_cert_role(url: &str) -> String {
    url.replacen("postgres://postgres@", "postgres://wr_client_cert@", 1)
}

#[test]
fn a_client_certificate_logs_in_a_role_that_requires_one() {
    let test = "a_client_certificate_logs_in_a_role_that_requires_one";
    let (Some((url, ca)), Some((cert, key))) = (postgres(test), client_certificate(test)) else {
        return;
    };
    let url = with(
        &as_cert_role(&url).replacen("127.0.0.1", "localhost", 1),
        &format!("sslmode=verify-full&sslrootcert={ca}&sslcert={cert}&sslkey={key}"),
    );
    let schema = schema_name("client_cert");
    let _drop = Dropped(url.clone(), schema.clone());
    let wr = workrail(&url, &schema);
    start_and_ack(&wr);
    // The server saw the certificate, and the session is the role it names.
    assert_eq!(
        query_bools(
            &url,
            "SELECT s.ssl AND s.client_dn LIKE '%wr_client_cert%' AND current_user = 'wr_client_cert' FROM pg_stat_ssl s WHERE s.pid = pg_backend_pid()"
        ),
        vec![true]
    );
    // Under `require` too (the server's certificate unverified, the client's presented).
    let require = with(
        &as_cert_role(&std::env::var("WORKRAIL_TEST_POSTGRES").unwrap()),
        &format!("sslmode=require&sslcert={cert}&sslkey={key}"),
    );
    assert_eq!(
        query_bools(&require, "SELECT current_user = 'wr_client_cert'"),
        vec![true]
    );
}

#[test]
fn a_missing_or_unsafe_client_certificate_is_refused_clearly() {
    let test = "a_missing_or_unsafe_client_certificate_is_refused_clearly";
    let (Some((url, ca)), Some((cert, key))) = (postgres(test), client_certificate(test)) else {
        return;
    };
    let url = with_password(&as_cert_role(&url)).replacen(
        "postgres://wr_client_cert@",
        "postgres://wr_client_cert:s3cret@",
        1,
    );
    // Without a certificate the server refuses the role, and the error says so.
    let err = refused(
        &with(&url, &format!("sslmode=verify-ca&sslrootcert={ca}")),
        &schema_name("no_cert"),
        "the role requires a client certificate",
    );
    eprintln!("refused as: {err}");
    assert!(err.contains("certificate"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
    // A key open to others is refused before connecting, with the fix.
    let dir = std::env::temp_dir().join(format!("workrail-client-key-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let open_key = dir.join("client.key");
    std::fs::copy(&key, &open_key).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&open_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let err = refused(
        &with(
            &url,
            &format!(
                "sslmode=require&sslcert={cert}&sslkey={}",
                open_key.display()
            ),
        ),
        &schema_name("open_key"),
        "a key file others may read is refused",
    );
    assert!(err.contains("chmod 600"), "{err}");
    assert!(err.contains(&open_key.display().to_string()), "{err}");
    // A certificate file that is not there, and a key without its certificate.
    let err = refused(
        &with(
            &url,
            &format!("sslmode=require&sslcert=/nonexistent/client.crt&sslkey={key}"),
        ),
        &schema_name("no_cert_file"),
        "a missing certificate file is refused",
    );
    assert!(err.contains("/nonexistent/client.crt"), "{err}");
    assert!(err.contains("cannot read"), "{err}");
    let err = refused(
        &with(&url, &format!("sslmode=require&sslkey={key}")),
        &schema_name("key_only"),
        "a key without its certificate is refused",
    );
    assert!(err.contains("no sslcert"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn require_with_a_root_certificate_verifies_the_chain() {
    let Some((url, ca)) = postgres("require_with_a_root_certificate_verifies_the_chain") else {
        return;
    };
    // The right CA: connects (and the server's name is not checked, as under verify-ca).
    let good = with(&url, &format!("sslmode=require&sslrootcert={ca}"));
    assert_eq!(
        query_bools(
            &good,
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"
        ),
        vec![true]
    );
    // Another CA: refused, where plain `require` (no sslrootcert) accepts the same server.
    let (_other_dir, other) = another_ca();
    let err = refused(
        &with(
            &with_password(&url),
            &format!("sslmode=require&sslrootcert={}", other.display()),
        ),
        &schema_name("require_other_ca"),
        "require with sslrootcert verifies the chain",
    );
    assert!(err.contains("TLS"), "{err}");
    assert!(!err.contains("s3cret"), "{err}");
}

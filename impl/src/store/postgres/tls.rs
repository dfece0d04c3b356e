//! TLS for the PostgreSQL backend (D114): the URL's `sslmode` as libpq reads it, over rustls
//! with the ring provider.
//!
//! - `disable`: plain connections only.
//! - `prefer` (the default, as in libpq): TLS when the server offers it, without verifying its
//!   certificate; plain otherwise.
//! - `require`: TLS or no connection, without verifying the certificate (as libpq does when no
//!   root certificate is given).
//! - `verify-ca`: TLS, the server's certificate chain must lead to a trusted root: the PEM file
//!   named by `sslrootcert=<path>`, or the system's roots when it is absent.
//! - `verify-full`: as `verify-ca`, and the certificate must name the host connected to.
//!
//! As in libpq, `require` with an `sslrootcert` verifies the chain as `verify-ca` does. A
//! client certificate (`sslcert=<PEM chain>` with `sslkey=<PEM private key>`, both or neither)
//! is presented in every mode that encrypts; the key file must be private to its owner (no
//! group or other permission bits), as libpq demands (D126).
//!
//! `tokio_postgres::Config` knows only `disable`, `prefer` and `require` and none of the file
//! parameters, so they are all taken out of the URL here before it is handed over.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};
use tokio_postgres::config::SslMode as PgSslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// What the URL's `sslmode` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    fn parse(value: &str) -> Result<Self, String> {
        Ok(match value {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode={other:?} is not supported; use one of disable, prefer (the default), require, verify-ca or verify-full"
                ));
            }
        })
    }

    /// The name as the URL spells it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    fn verifies(self) -> bool {
        matches!(self, Self::VerifyCa | Self::VerifyFull)
    }

    fn encrypts(self) -> bool {
        self != Self::Disable
    }

    /// The mode `tokio_postgres` negotiates with (it verifies nothing itself).
    pub fn negotiation(self) -> PgSslMode {
        match self {
            Self::Disable => PgSslMode::Disable,
            Self::Prefer => PgSslMode::Prefer,
            Self::Require | Self::VerifyCa | Self::VerifyFull => PgSslMode::Require,
        }
    }
}

/// The TLS settings a URL asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsSettings {
    pub mode: SslMode,
    pub root_cert: Option<PathBuf>,
    /// `sslcert`: the client's certificate chain (PEM).
    pub client_cert: Option<PathBuf>,
    /// `sslkey`: the client certificate's private key (PEM).
    pub client_key: Option<PathBuf>,
}

impl TlsSettings {
    /// Whether the server's chain is verified: `verify-*`, or `require` with an `sslrootcert`
    /// (libpq's rule).
    fn verifies_chain(&self) -> bool {
        self.mode.verifies() || (self.mode == SslMode::Require && self.root_cert.is_some())
    }
}

/// Splits `url` into the URL `tokio_postgres` can parse (without `sslmode`, `sslrootcert`,
/// `sslcert` and `sslkey`) and the TLS settings those asked for. The error never repeats the
/// URL (it may hold a password).
pub fn split_url(url: &str) -> Result<(String, TlsSettings), String> {
    let mut settings = TlsSettings {
        mode: SslMode::Prefer,
        root_cert: None,
        client_cert: None,
        client_key: None,
    };
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), settings));
    };
    let mut kept = Vec::new();
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "sslmode" => settings.mode = SslMode::parse(&percent_decode(value)?)?,
            "sslrootcert" => settings.root_cert = Some(PathBuf::from(percent_decode(value)?)),
            "sslcert" => settings.client_cert = Some(PathBuf::from(percent_decode(value)?)),
            "sslkey" => settings.client_key = Some(PathBuf::from(percent_decode(value)?)),
            _ => kept.push(pair),
        }
    }
    match (&settings.client_cert, &settings.client_key) {
        (Some(_), None) => {
            return Err("the URL names sslcert but no sslkey; add sslkey=<path to the certificate's private key (PEM)>, or drop sslcert".to_owned());
        }
        (None, Some(_)) => {
            return Err("the URL names sslkey but no sslcert; add sslcert=<path to the client certificate (PEM)>, or drop sslkey".to_owned());
        }
        _ => {}
    }
    let url = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, settings))
}

fn percent_decode(value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    "a %-escape in the URL's sslmode, sslrootcert, sslcert or sslkey is not valid"
                        .to_owned()
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out)
        .map_err(|_| "the URL's sslrootcert, sslcert or sslkey is not valid UTF-8".to_owned())
}

/// The connector for `settings`: reads the root certificates and the client certificate now,
/// so a missing or unreadable file is a start-up error.
pub fn connector(settings: &TlsSettings) -> Result<MakeRustlsConnect, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("could not set up TLS: {e}"))?;
    let verifier: Arc<dyn ServerCertVerifier> = if settings.verifies_chain() {
        let roots = Arc::new(root_store(settings)?);
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| format!("could not set up TLS certificate verification: {e}"))?;
        if settings.mode == SslMode::VerifyFull {
            webpki
        } else {
            Arc::new(ChainOnly(webpki))
        }
    } else {
        Arc::new(NoVerification(provider))
    };
    let builder = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match (&settings.client_cert, &settings.client_key) {
        (Some(cert_file), Some(key_file)) if settings.mode.encrypts() => {
            let (chain, key) = client_identity(settings.mode, cert_file, key_file)?;
            builder.with_client_auth_cert(chain, key).map_err(|e| {
                format!(
                    "sslcert={} and sslkey={} do not make a usable client certificate ({e}); check that the key is the certificate's own and that the certificate is X.509 version 3 (`openssl x509 -req` makes version 1 unless given extensions with -extfile, and version 1 is not accepted)",
                    cert_file.display(),
                    key_file.display()
                )
            })?
        }
        _ => builder.with_no_client_auth(),
    };
    Ok(MakeRustlsConnect::new(config))
}

/// The client certificate chain and its private key, read from their PEM files. The key file
/// must not be readable by group or others (libpq's rule).
fn client_identity(
    mode: SslMode,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let mode = mode.name();
    let (cert_shown, key_shown) = (cert.display(), key.display());
    let bytes = std::fs::read(cert).map_err(|e| {
        format!(
            "sslmode={mode}: cannot read the client certificate file sslcert={cert_shown} ({e}); point sslcert at a readable PEM file"
        )
    })?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| {
            format!(
                "sslmode={mode}: sslcert={cert_shown} is not a PEM certificate file ({e}); point it at the client certificate in PEM form"
            )
        })?;
    if chain.is_empty() {
        return Err(format!(
            "sslmode={mode}: sslcert={cert_shown} holds no certificate; point it at the client certificate in PEM form"
        ));
    }
    key_is_private(key)?;
    let bytes = std::fs::read(key).map_err(|e| {
        format!(
            "sslmode={mode}: cannot read the client key file sslkey={key_shown} ({e}); point sslkey at a readable PEM file"
        )
    })?;
    if bytes
        .windows(b"ENCRYPTED PRIVATE KEY".len())
        .any(|w| w == b"ENCRYPTED PRIVATE KEY")
    {
        return Err(format!(
            "sslmode={mode}: sslkey={key_shown} is encrypted, and WorkRail reads only unencrypted keys; write a decrypted copy readable only by you (`openssl pkey -in <key> -out <new key>`, then `chmod 600 <new key>`) and name it in sslkey"
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
        format!(
            "sslmode={mode}: sslkey={key_shown} holds no PEM private key ({e}); point it at the client certificate's private key in PEM form (PKCS#8, PKCS#1 or SEC1)"
        )
    })?;
    Ok((chain, key))
}

/// libpq refuses a key file that group or others may read or write; so does WorkRail.
#[cfg(unix)]
fn key_is_private(key: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let shown = key.display();
    let meta = std::fs::metadata(key).map_err(|e| {
        format!(
            "cannot read the client key file sslkey={shown} ({e}); point sslkey at a readable PEM file"
        )
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "the client key file sslkey={shown} has permissions {mode:o}, open to group or others; make it private to you with `chmod 600 {shown}`"
        ));
    }
    Ok(())
}

#[cfg(not(unix))]
fn key_is_private(_key: &std::path::Path) -> Result<(), String> {
    Ok(())
}

fn root_store(settings: &TlsSettings) -> Result<RootCertStore, String> {
    let mode = settings.mode.name();
    let mut roots = RootCertStore::empty();
    match &settings.root_cert {
        Some(path) => {
            let shown = path.display();
            let bytes = std::fs::read(path).map_err(|e| {
                format!(
                    "sslmode={mode}: cannot read the root certificate file sslrootcert={shown} ({e}); point sslrootcert at a readable PEM file holding the CA that signed the server's certificate"
                )
            })?;
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
                .collect::<Result<_, _>>()
                .map_err(|e| {
                    format!(
                        "sslmode={mode}: sslrootcert={shown} is not a PEM certificate file ({e}); point it at the CA certificate in PEM form"
                    )
                })?;
            let (added, _) = roots.add_parsable_certificates(certs);
            if added == 0 {
                return Err(format!(
                    "sslmode={mode}: sslrootcert={shown} holds no usable certificate; point it at the CA certificate in PEM form"
                ));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
            if roots.is_empty() {
                return Err(format!(
                    "sslmode={mode}: no sslrootcert in the URL and no system root certificates found; add sslrootcert=<path to the CA's PEM file> to the URL"
                ));
            }
        }
    }
    Ok(roots)
}

/// `verify-ca`: the chain must lead to a trusted root; the name in the certificate is not
/// checked.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // The chain is checked before the name: a name mismatch means the chain was good.
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` and `require`: encryption without verifying whom to (libpq's behaviour without a
/// root certificate). Handshake signatures are still checked against the presented key.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A hint for a connection error under `mode` whose text mentions TLS.
pub(crate) fn handshake_hint(mode: SslMode) -> &'static str {
    match mode {
        SslMode::VerifyCa | SslMode::VerifyFull => {
            "the TLS handshake failed: check that the server has TLS on (ssl=on), that sslrootcert names the CA that signed its certificate, and for verify-full that the certificate names the host in the URL; with sslcert, that the server trusts the CA that signed it; sslmode=require without sslrootcert encrypts without verifying, sslmode=disable connects in plain"
        }
        _ => {
            "the TLS handshake failed: check that the server has TLS on (ssl=on); with sslrootcert (sslmode=require then verifies the chain, as libpq does), that it names the CA that signed the server's certificate; with sslcert, that the server trusts the CA that signed it; or use sslmode=disable for a plain connection"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_and_sslrootcert_are_taken_out() {
        let (url, tls) = split_url(
            "postgres://u:p@h/db?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem&connect_timeout=3",
        )
        .unwrap();
        assert_eq!(url, "postgres://u:p@h/db?connect_timeout=3");
        assert_eq!(tls.mode, SslMode::VerifyFull);
        assert_eq!(tls.root_cert, Some(PathBuf::from("/tmp/ca.pem")));
        let (url, tls) = split_url("postgres://h/db?sslmode=disable").unwrap();
        assert_eq!(url, "postgres://h/db");
        assert_eq!(tls.mode, SslMode::Disable);
        let (_, tls) = split_url("postgres://h/db").unwrap();
        assert_eq!(tls.mode, SslMode::Prefer);
    }

    #[test]
    fn sslcert_and_sslkey_are_taken_out_and_come_in_pairs() {
        let (url, tls) = split_url(
            "postgres://u@h/db?sslmode=require&sslcert=%2Fk%2Fc.pem&application_name=x&sslkey=/k/k.pem",
        )
        .unwrap();
        assert_eq!(url, "postgres://u@h/db?application_name=x");
        assert_eq!(tls.client_cert, Some(PathBuf::from("/k/c.pem")));
        assert_eq!(tls.client_key, Some(PathBuf::from("/k/k.pem")));
        let err = split_url("postgres://u:s3cret@h/db?sslcert=/k/c.pem").unwrap_err();
        assert!(err.contains("no sslkey"), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
        let err = split_url("postgres://h/db?sslkey=/k/k.pem").unwrap_err();
        assert!(err.contains("no sslcert"), "{err}");
    }

    #[test]
    fn require_with_a_root_certificate_verifies_the_chain_as_libpq_does() {
        let (_, tls) = split_url("postgres://h/db?sslmode=require&sslrootcert=/ca.pem").unwrap();
        assert!(tls.verifies_chain());
        let (_, tls) = split_url("postgres://h/db?sslmode=require").unwrap();
        assert!(!tls.verifies_chain());
        let (_, tls) = split_url("postgres://h/db?sslmode=prefer&sslrootcert=/ca.pem").unwrap();
        assert!(!tls.verifies_chain());
    }

    #[test]
    fn an_unknown_sslmode_is_refused_without_the_url() {
        let err = split_url("postgres://u:s3cret@h/db?sslmode=bogus").unwrap_err();
        assert!(err.contains("sslmode=\"bogus\""), "{err}");
        assert!(err.contains("verify-full"), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
    }

    #[test]
    fn a_missing_root_certificate_is_a_clear_error() {
        let err = connector(&TlsSettings {
            mode: SslMode::VerifyFull,
            root_cert: Some(PathBuf::from("/nonexistent/ca.pem")),
            client_cert: None,
            client_key: None,
        })
        .err()
        .unwrap();
        assert!(
            err.contains("cannot read the root certificate file"),
            "{err}"
        );
        assert!(err.contains("/nonexistent/ca.pem"), "{err}");
    }
}

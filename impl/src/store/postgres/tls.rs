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
//! `tokio_postgres::Config` knows only `disable`, `prefer` and `require` and no `sslrootcert`,
//! so both parameters are taken out of the URL here before it is handed over.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
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
}

/// Splits `url` into the URL `tokio_postgres` can parse (without `sslmode` and `sslrootcert`)
/// and the TLS settings those asked for. The error never repeats the URL (it may hold a
/// password).
pub fn split_url(url: &str) -> Result<(String, TlsSettings), String> {
    let mut settings = TlsSettings {
        mode: SslMode::Prefer,
        root_cert: None,
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
            _ => kept.push(pair),
        }
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
                    "a %-escape in the URL's sslmode or sslrootcert is not valid".to_owned()
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the URL's sslrootcert is not valid UTF-8".to_owned())
}

/// The connector for `settings`: reads the root certificates now, so a missing or unreadable
/// file is a start-up error.
pub fn connector(settings: &TlsSettings) -> Result<MakeRustlsConnect, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("could not set up TLS: {e}"))?;
    let config = if settings.mode.verifies() {
        let roots = Arc::new(root_store(settings)?);
        let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider)
            .build()
            .map_err(|e| format!("could not set up TLS certificate verification: {e}"))?;
        let verifier: Arc<dyn ServerCertVerifier> = if settings.mode == SslMode::VerifyFull {
            webpki
        } else {
            Arc::new(ChainOnly(webpki))
        };
        builder
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth()
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
            .with_no_client_auth()
    };
    Ok(MakeRustlsConnect::new(config))
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
            "the TLS handshake failed: check that the server has TLS on (ssl=on), that sslrootcert names the CA that signed its certificate, and for verify-full that the certificate names the host in the URL; sslmode=require encrypts without verifying, sslmode=disable connects in plain"
        }
        _ => {
            "the TLS handshake failed: check that the server has TLS on (ssl=on), or use sslmode=disable for a plain connection"
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

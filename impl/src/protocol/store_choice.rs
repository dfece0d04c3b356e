//! Which store a process opens (decision D102): `--store <url>` or `WORKRAIL_STORE` names a
//! PostgreSQL database (`postgres://…` or `postgresql://…`); unset or empty is the file store in
//! the data directory. A URL's password never appears in output or logs ([`redact`]).

use std::fmt;
use std::str::FromStr;

use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};

use crate::store::postgres::{DEFAULT_SCHEMA, PostgresBackend, valid_schema_name};

/// The environment variable selecting the store.
pub const STORE_ENV: &str = "WORKRAIL_STORE";

/// The environment variable naming the PostgreSQL schema (default `workrail`).
pub const STORE_SCHEMA_ENV: &str = "WORKRAIL_STORE_SCHEMA";

/// The store a process runs on.
#[derive(Clone, PartialEq, Eq, Default)]
pub enum StoreChoice {
    /// The file store in the data directory.
    #[default]
    Files,
    /// A PostgreSQL database (plain connection) and the schema in it.
    Postgres { url: String, schema: String },
}

impl fmt::Debug for StoreChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl StoreChoice {
    /// `--store` when given, else `WORKRAIL_STORE`; the schema from `WORKRAIL_STORE_SCHEMA`.
    pub fn resolve(flag: Option<&str>) -> Result<Self, String> {
        let schema = match std::env::var(STORE_SCHEMA_ENV) {
            Ok(s) if !s.trim().is_empty() => s.trim().to_owned(),
            Ok(_) | Err(std::env::VarError::NotPresent) => DEFAULT_SCHEMA.to_owned(),
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(format!("{STORE_SCHEMA_ENV} is not valid UTF-8"));
            }
        };
        match flag {
            Some(value) => Self::parse(value, "--store", &schema),
            None => match std::env::var(STORE_ENV) {
                Ok(value) => Self::parse(&value, STORE_ENV, &schema),
                Err(std::env::VarError::NotPresent) => Ok(StoreChoice::Files),
                Err(std::env::VarError::NotUnicode(_)) => Err(format!(
                    "{STORE_ENV} is not valid UTF-8; set it to a postgres:// URL, or unset it for the file store"
                )),
            },
        }
    }

    /// Parses a store URL given by `source` (`--store` or `WORKRAIL_STORE`).
    pub fn parse(value: &str, source: &str, schema: &str) -> Result<Self, String> {
        let value = value.trim();
        if value.is_empty() {
            return Ok(StoreChoice::Files);
        }
        let how = format!(
            "set {source} to postgres://USER:PASSWORD@HOST:PORT/DATABASE, or leave it unset (or empty) for the file store in the data directory"
        );
        if !(value.starts_with("postgres://") || value.starts_with("postgresql://")) {
            return Err(format!(
                "{source} is {:?}, which is not a postgres:// or postgresql:// URL: {how}",
                redact(value)
            ));
        }
        let parsed = crate::store::postgres::tls::split_url(value).and_then(|(url, _)| {
            tokio_postgres::Config::from_str(&url)
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        if let Err(e) = parsed {
            return Err(format!(
                "{source} is {:?}, which is not a valid PostgreSQL URL ({e}): {how}",
                redact(value)
            ));
        }
        if !valid_schema_name(schema) {
            return Err(format!(
                "{STORE_SCHEMA_ENV} is {schema:?}, not a lower-case SQL identifier ([a-z_][a-z0-9_]*); set it to e.g. workrail, or unset it"
            ));
        }
        Ok(StoreChoice::Postgres {
            url: value.to_owned(),
            schema: schema.to_owned(),
        })
    }

    /// For messages and logs: `file store` or the URL without its password, and the schema.
    pub fn describe(&self) -> String {
        match self {
            StoreChoice::Files => "the file store".to_owned(),
            StoreChoice::Postgres { url, schema } => {
                format!("PostgreSQL {} (schema {schema})", redact(url))
            }
        }
    }

    /// Connects to PostgreSQL (`None` for the file store). An unreachable server or a refused
    /// schema is an error naming the store and what to do.
    pub(crate) fn connect(&self) -> Result<Option<PostgresBackend>, ErrorEnvelope> {
        let StoreChoice::Postgres { url, schema } = self else {
            return Ok(None);
        };
        PostgresBackend::connect(url, schema)
            .map(Some)
            .map_err(|e| {
                let detail = redact(&e.to_string());
                let suggestion = connect_suggestion(&detail);
                ErrorEnvelope::new(
                    ErrorCode::StoreIoError,
                    format!("cannot open {}: {detail}", self.describe()),
                    suggestion,
                    Retry::NotRetryable,
                )
            })
    }
}

/// What to do about a failed connection, by what failed (the SQLSTATE the server sent, or the
/// client's own error), so the fix is named rather than every possible one.
fn connect_suggestion(detail: &str) -> String {
    let fallback = format!("or unset {STORE_ENV} to use the file store in the data directory.");
    let has = |needle: &str| detail.contains(needle);
    let what = if has("SQLSTATE 28P01") {
        format!(
            "The server refused the password: fix the user or password in {STORE_ENV} (or --store), then retry;"
        )
    } else if has("SQLSTATE 28000") {
        format!(
            "The server refused this login (no pg_hba.conf rule admits it, or the role must present a client certificate): check the user and host in {STORE_ENV} (or --store), add sslcert=<file>&sslkey=<file> for a role that logs in with a certificate, or ask the database's administrator to admit it;"
        )
    } else if has("SQLSTATE 3D000") {
        format!(
            "The database in {STORE_ENV} (or --store) does not exist: create it (createdb) or name an existing one;"
        )
    } else if has("SQLSTATE 42501") {
        "The role may not create or use the schema: grant it CREATE on the database (or USAGE and CREATE on the schema), or set WORKRAIL_STORE_SCHEMA to a schema it owns;".to_owned()
    } else if has("SQLSTATE 53300") {
        "The server has no free connection slot: retry in a moment, or raise max_connections;"
            .to_owned()
    } else if has("SQLSTATE 57P03") {
        "The server is starting up or shutting down: retry in a moment;".to_owned()
    } else if has("newer than this WorkRail") {
        "Upgrade WorkRail to the version that wrote this schema, or set WORKRAIL_STORE_SCHEMA to another schema;".to_owned()
    } else if has("Connection refused") {
        format!(
            "Nothing accepts connections at the host and port in {STORE_ENV} (or --store): start PostgreSQL there, or fix the host or port;"
        )
    } else if has("TLS") || has("sslmode") || has("sslrootcert") || has("sslcert") || has("sslkey")
    {
        format!("Fix the TLS settings in {STORE_ENV} (or --store) as the message says;")
    } else {
        format!(
            "Check that the PostgreSQL server is running and reachable and that the URL in {STORE_ENV} (or --store) is right;"
        )
    };
    format!("{what} {fallback}")
}

/// `text` with the password of any `scheme://user:password@` URL in it replaced by `***`, and
/// any `password=` value too.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c == '/' || c == '?' || c.is_whitespace() || c == '"')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(amp) => {
                let userinfo = &authority[..amp];
                match userinfo.find(':') {
                    Some(colon) => {
                        out.push_str(&userinfo[..colon]);
                        out.push_str(":***");
                    }
                    None => out.push_str(userinfo),
                }
                out.push_str(&authority[amp..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    // `password=…` in a query string or a key/value connection string.
    let mut redacted = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(at) = rest.find("password=") {
        let (head, tail) = rest.split_at(at + "password=".len());
        redacted.push_str(head);
        redacted.push_str("***");
        let end = tail
            .find(|c: char| c == '&' || c.is_whitespace() || c == '"')
            .unwrap_or(tail.len());
        rest = &tail[end..];
    }
    redacted.push_str(rest);
    redacted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_connection_names_its_fix() {
        let cases = [
            (
                "password authentication failed for user \"me\" (SQLSTATE 28P01)",
                "refused the password",
            ),
            (
                "connection requires a valid client certificate (SQLSTATE 28000)",
                "sslcert=<file>&sslkey=<file>",
            ),
            (
                "database \"nope\" does not exist (SQLSTATE 3D000)",
                "does not exist: create it",
            ),
            (
                "permission denied for database w (SQLSTATE 42501)",
                "grant it CREATE",
            ),
            (
                "the PostgreSQL schema w is at version 9, newer than this WorkRail knows",
                "Upgrade WorkRail",
            ),
            (
                "error connecting to server: Connection refused (os error 111)",
                "start PostgreSQL there",
            ),
            ("something else entirely", "running and reachable"),
        ];
        for (detail, fix) in cases {
            let suggestion = connect_suggestion(detail);
            assert!(suggestion.contains(fix), "{detail}: {suggestion}");
            assert!(suggestion.contains("file store"), "{suggestion}");
        }
    }

    #[test]
    fn passwords_never_show() {
        assert_eq!(
            redact("postgres://me:s3cret@db:5432/w?sslmode=disable"),
            "postgres://me:***@db:5432/w?sslmode=disable"
        );
        assert_eq!(redact("postgresql://db/w"), "postgresql://db/w");
        assert_eq!(
            redact("postgres://db/w?password=s3cret&x=1"),
            "postgres://db/w?password=***&x=1"
        );
        let err =
            StoreChoice::parse("mysql://me:s3cret@db/w", "WORKRAIL_STORE", "workrail").unwrap_err();
        assert!(
            !err.contains("s3cret") && err.contains("WORKRAIL_STORE"),
            "{err}"
        );
        assert_eq!(
            StoreChoice::parse("  ", "--store", "workrail").unwrap(),
            StoreChoice::Files
        );
    }
}

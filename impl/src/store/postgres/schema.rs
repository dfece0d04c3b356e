//! The PostgreSQL schema: versioned, additive migrations recorded in `schema_version`
//! (decision D96). A database whose schema is newer than this build knows is refused, never
//! written to.

use tokio_postgres::Client;

use super::sql_error;
use crate::store::error::StoreError;

/// The migrations in order; migration `n` (1-based) brings the schema to version `n`. Only ever
/// append to this list: a released migration never changes.
pub const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_sessions.sql"),
    include_str!("migrations/0002_artifacts.sql"),
    include_str!("migrations/0003_activity.sql"),
    include_str!("migrations/0004_derived.sql"),
];

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// Every migration runs under this transaction-level advisory lock, so two processes starting
/// on an empty database never migrate at once (the key spells `WRschema` in ASCII).
const MIGRATION_LOCK: i64 = 0x5752_7363_6865_6d61;

/// Whether `name` is a plain lower-case SQL identifier (it is spliced into statements).
pub fn valid_schema_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit()
}

/// Creates `schema` if needed and brings it to [`SCHEMA_VERSION`] in one transaction. Returns
/// the version found before migrating (0 for a new schema).
pub async fn migrate(client: &mut Client, schema: &str) -> Result<i32, StoreError> {
    let op = "migrate the PostgreSQL schema";
    let tx = client.transaction().await.map_err(sql_error(op))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(sql_error(op))?;
    tx.batch_execute(&format!(
        "CREATE SCHEMA IF NOT EXISTS {schema};
         SET LOCAL search_path TO {schema};
         CREATE TABLE IF NOT EXISTS schema_version (
             version    integer PRIMARY KEY CHECK (version > 0),
             applied_at timestamptz NOT NULL DEFAULT now()
         );"
    ))
    .await
    .map_err(sql_error(op))?;
    let found: i32 = tx
        .query_one("SELECT coalesce(max(version), 0) FROM schema_version", &[])
        .await
        .map_err(sql_error(op))?
        .get(0);
    if found > SCHEMA_VERSION {
        return Err(StoreError::Io {
            session: None,
            op,
            detail: format!(
                "the PostgreSQL schema {schema} is at version {found}, newer than this WorkRail knows (version {SCHEMA_VERSION}); upgrade WorkRail, or point it at another schema"
            ),
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = i as i32 + 1;
        tx.batch_execute(sql).await.map_err(sql_error(op))?;
        tx.execute(
            "INSERT INTO schema_version (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(sql_error(op))?;
    }
    tx.commit().await.map_err(sql_error(op))?;
    Ok(found)
}

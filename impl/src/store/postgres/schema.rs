//! The PostgreSQL schema: versioned, additive migrations recorded in `schema_version`
//! (decision D96). A database whose schema is newer than this build knows is used only when
//! each migration this build does not know admits builds of its version (`oldest_build`,
//! D128), and is never migrated by it; otherwise it is refused, never written to.

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
    include_str!("migrations/0005_manifest_totals.sql"),
];

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// Per migration from version 4 on (where `schema_version.oldest_build` exists): the oldest
/// schema version a build may know and still use a schema with that migration applied
/// (decision D128). `None` would mean only builds that know the migration. Only ever append.
const OLDEST_BUILD: &[(i32, Option<i32>)] = &[
    // `derived` is a table older builds never read: they may keep working beside it.
    (4, Some(3)),
    // The manifest totals are kept by a trigger, whichever build inserts the rows.
    (5, Some(3)),
];

/// The oldest build version a schema at `version` (applied by this build) admits.
fn oldest_build(version: i32) -> Option<i32> {
    OLDEST_BUILD
        .iter()
        .find(|(v, _)| *v == version)
        .and_then(|(_, oldest)| *oldest)
}

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
        // Newer than this build: usable only when every migration it does not know admits
        // builds of its version (D128). Nothing is migrated or written either way.
        let needed: i32 = tx
            .query_one(
                "SELECT coalesce(max(coalesce(oldest_build, version)), 0) FROM schema_version WHERE version > $1",
                &[&SCHEMA_VERSION],
            )
            .await
            .map_err(sql_error(op))?
            .get(0);
        if needed > SCHEMA_VERSION {
            return Err(StoreError::Io {
                session: None,
                op,
                detail: format!(
                    "the PostgreSQL schema {schema} is at version {found}, newer than this WorkRail knows (version {SCHEMA_VERSION}), and needs a WorkRail that knows version {needed} or later; upgrade WorkRail, or point it at another schema"
                ),
            });
        }
        tx.commit().await.map_err(sql_error(op))?;
        return Ok(found);
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = i as i32 + 1;
        tx.batch_execute(sql).await.map_err(sql_error(op))?;
        if version >= 4 {
            tx.execute(
                "INSERT INTO schema_version (version, oldest_build) VALUES ($1, $2)",
                &[&version, &oldest_build(version)],
            )
            .await
            .map_err(sql_error(op))?;
        } else {
            tx.execute(
                "INSERT INTO schema_version (version) VALUES ($1)",
                &[&version],
            )
            .await
            .map_err(sql_error(op))?;
        }
    }
    tx.commit().await.map_err(sql_error(op))?;
    Ok(found)
}

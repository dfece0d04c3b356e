//! What the PostgreSQL test files share: the database under test (`WORKRAIL_TEST_POSTGRES`,
//! required under `CI`) and a schema of a test's own, dropped at the end.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use workrail::entropy::SeededEntropy;
use workrail::protocol::Workrail;
use workrail::store::Store;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail::store::postgres::PostgresBackend;

use crate::protocol_support::catalog;

/// The database under test, or `None` (and why, on stderr) outside CI; under `CI` its absence
/// fails the test, so CI never skips the PostgreSQL half silently. `suite` names the tests in
/// that message.
pub fn postgres_url(test: &str, suite: &str) -> Option<String> {
    match std::env::var("WORKRAIL_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but WORKRAIL_TEST_POSTGRES is not: the PostgreSQL {suite} tests must run in CI (source .ci/postgres.sh to start a throwaway cluster)"
            );
            eprintln!(
                "{test}: skipped, WORKRAIL_TEST_POSTGRES is not set (set it to a postgres:// URL, e.g. from `source .ci/postgres.sh`)"
            );
            None
        }
    }
}

static SCHEMAS: AtomicUsize = AtomicUsize::new(0);

/// A schema of one test's own, dropped at the end (also when the test fails).
pub struct Schema {
    pub url: String,
    pub name: String,
}

impl Schema {
    /// A fresh schema named `<prefix>_<pid>_<n>`.
    pub fn new(url: &str, prefix: &str) -> Self {
        let name = format!(
            "{prefix}_{}_{}",
            std::process::id(),
            SCHEMAS.fetch_add(1, Ordering::SeqCst)
        );
        let schema = Self {
            url: url.to_owned(),
            name,
        };
        schema.run(&format!("DROP SCHEMA IF EXISTS {} CASCADE", schema.name));
        schema
    }

    /// Runs `work` with a plain client of its own.
    pub fn with_client<T>(&self, work: impl AsyncFnOnce(&tokio_postgres::Client) -> T) -> T {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (client, connection) = tokio_postgres::connect(&self.url, tokio_postgres::NoTls)
                .await
                .unwrap();
            let task = tokio::spawn(connection);
            let out = work(&client).await;
            drop(client);
            let _ = task.await;
            out
        })
    }

    pub fn run(&self, sql: &str) {
        self.with_client(async |c| c.batch_execute(sql).await.unwrap());
    }

    /// One `bigint` from `sql`.
    pub fn count(&self, sql: &str) -> i64 {
        self.with_client(async |c| c.query_one(sql, &[]).await.unwrap().get(0))
    }

    pub fn backend(&self) -> PostgresBackend {
        PostgresBackend::connect(&self.url, &self.name).unwrap()
    }

    /// A `Workrail` on this schema with seeded ids and an in-memory data directory.
    pub fn workrail(&self) -> Workrail {
        self.workrail_in(Arc::new(MemFs::new()))
    }

    /// A `Workrail` on this schema whose data directory is `fs`.
    pub fn workrail_in(&self, fs: Arc<dyn StoreFs>) -> Workrail {
        Workrail::with_store(
            fs,
            Store::postgres(self.backend()),
            catalog(),
            Arc::new(SeededEntropy::new(7)),
        )
        .unwrap()
    }

    /// Every row count of the session tables: what a read or a refusal must leave unchanged.
    pub fn rows(&self) -> Vec<i64> {
        ["sessions", "events", "manifest", "snapshots", "workflows"]
            .iter()
            .map(|t| self.count(&format!("SELECT count(*) FROM {}.{t}", self.name)))
            .collect()
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        self.run(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name));
    }
}

//! Maintenance on PostgreSQL: `workrail repair` checks a session instead of refusing
//! (decision D111), and `workrail gc` applies the file store's retention rules (D112).
//!
//! Guards against: a repair that writes to a PostgreSQL session or calls a damaged one healthy,
//! and the maintenance commands refusing a PostgreSQL store they can serve.
//!
//! Needs `WORKRAIL_TEST_POSTGRES=postgres://…` (`source .ci/postgres.sh`); without it the tests
//! say why and pass, except under `CI`, where they fail. Each test uses a schema of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod protocol_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use protocol_support::{ack, catalog, start};
use workrail::entropy::SeededEntropy;
use workrail::protocol::Workrail;
use workrail::store::Store;
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail::store::postgres::PostgresBackend;
use workrail_spec::error::{ErrorCode, Retry};

fn postgres_url(test: &str) -> Option<String> {
    match std::env::var("WORKRAIL_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but WORKRAIL_TEST_POSTGRES is not: the PostgreSQL maintenance tests must run in CI (source .ci/postgres.sh to start a throwaway cluster)"
            );
            eprintln!(
                "{test}: skipped, WORKRAIL_TEST_POSTGRES is not set (set it to a postgres:// URL, e.g. from `source .ci/postgres.sh`)"
            );
            None
        }
    }
}

static SCHEMAS: AtomicUsize = AtomicUsize::new(0);

/// A schema of this test's own, dropped at the end.
struct Schema {
    url: String,
    name: String,
}

impl Schema {
    fn new(url: &str) -> Self {
        let name = format!(
            "wrg_{}_{}",
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

    fn with_client<T>(&self, work: impl AsyncFnOnce(&tokio_postgres::Client) -> T) -> T {
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

    fn run(&self, sql: &str) {
        self.with_client(async |c| c.batch_execute(sql).await.unwrap());
    }

    /// One `bigint` from `sql`.
    fn count(&self, sql: &str) -> i64 {
        self.with_client(async |c| c.query_one(sql, &[]).await.unwrap().get(0))
    }

    fn workrail(&self) -> Workrail {
        let backend = PostgresBackend::connect(&self.url, &self.name).unwrap();
        let fs: Arc<dyn StoreFs> = Arc::new(MemFs::new());
        Workrail::with_store(
            fs,
            Store::postgres(backend),
            catalog(),
            Arc::new(SeededEntropy::new(7)),
        )
        .unwrap()
    }

    /// Every row count of the session tables: what a check must leave unchanged.
    fn rows(&self) -> Vec<i64> {
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

#[test]
fn repair_on_postgres_says_a_healthy_session_is_healthy_and_writes_nothing() {
    let Some(url) = postgres_url("repair_on_postgres_says_a_healthy_session_is_healthy") else {
        return;
    };
    let schema = Schema::new(&url);
    let wr = schema.workrail();
    let first = start(&wr, "wr.coding_task");
    wr.continue_workflow(ack(&first, "Step 0 done.", vec![]))
        .unwrap();
    let session = first.session.session_id.to_string();
    let before = schema.rows();
    let report = wr.repair_session(&session).unwrap();
    assert!(
        report.contains(&format!("Session {session} is healthy; nothing to repair")),
        "{report}"
    );
    assert!(report.contains("one transaction"), "{report}");
    assert_eq!(schema.rows(), before, "repair wrote to a healthy session");

    let missing = wr.repair_session("sess_aaaaaaaaaaaaaaaa").unwrap_err();
    assert_eq!(missing.code, ErrorCode::SessionNotFound, "{missing:?}");
}

#[test]
fn repair_on_postgres_names_the_verdict_of_a_damaged_session_and_the_way_back() {
    let Some(url) = postgres_url("repair_on_postgres_names_the_verdict") else {
        return;
    };
    let schema = Schema::new(&url);
    let wr = schema.workrail();
    let first = start(&wr, "wr.coding_task");
    wr.continue_workflow(ack(&first, "Step 0 done.", vec![]))
        .unwrap();
    let session = first.session.session_id.to_string();
    // An event row's text changed by hand, same length: `segment_digest_mismatch`.
    schema.run(&format!(
        "UPDATE {}.events SET body = replace(body, 'Step 0 done.', 'Step 9 done.') WHERE body LIKE '%Step 0 done.%'",
        schema.name
    ));
    let before = schema.rows();
    let refused = wr.repair_session(&session).unwrap_err();
    assert_eq!(refused.code, ErrorCode::SessionCorrupt, "{refused:?}");
    assert_eq!(refused.retry, Retry::NotRetryable, "{refused:?}");
    assert!(
        refused.message.contains("segment_digest_mismatch")
            && refused.message.contains("was not repaired")
            && refused.message.contains("nothing was written"),
        "{}",
        refused.message
    );
    assert!(
        refused
            .suggestion
            .contains(&format!("workrail export {session}")),
        "the way back is not named: {}",
        refused.suggestion
    );
    assert_eq!(schema.rows(), before, "repair wrote to a damaged session");
}

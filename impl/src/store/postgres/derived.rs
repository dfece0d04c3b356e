//! Derived rows (D115, table `derived` of schema version 4): data derived from the sessions and
//! shared by every process on the schema, never truth. Today one row, the persisted
//! `resume_session` index.

use super::worker::{Request, Worker};
use super::{PostgresBackend, sql_error};
use crate::store::error::StoreError;

/// The `derived` row holding the persisted `resume_session` index (D115): the bytes of
/// `cache/resume-index.v1.jsonl`, shared by every process on the schema.
pub const RESUME_INDEX_ROW: &str = "resume-index.v1";

impl PostgresBackend {
    /// The bytes of the derived row `name` (D115), `None` when there is none.
    pub fn derived(&self, name: &'static str) -> Result<Option<Vec<u8>>, StoreError> {
        self.call(|reply| Request::ReadDerived { name, reply })
    }

    /// Replaces the derived row `name` with `bytes` in one statement (the last writer wins).
    pub fn put_derived(&self, name: &'static str, bytes: &[u8]) -> Result<(), StoreError> {
        let bytes = bytes.to_vec();
        self.call(|reply| Request::WriteDerived { name, bytes, reply })
    }
}

impl Worker {
    pub(super) async fn read_derived(&mut self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT bytes FROM derived WHERE name = $1", &[&name])
            .await
            .map_err(sql_error("read derived data"))?;
        Ok(row.map(|r| r.get(0)))
    }

    pub(super) async fn write_derived(
        &mut self,
        name: &str,
        bytes: &[u8],
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO derived (name, bytes) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET bytes = EXCLUDED.bytes, written_at = now()",
                &[&name, &bytes],
            )
            .await
            .map_err(sql_error("write derived data"))?;
        Ok(())
    }
}

//! Reading rows: a session's rows (whole, or past a cached view) in one read-only snapshot, the
//! manifest's freshness key, the list of sessions and every session's manifest length.

use std::collections::BTreeSet;

use tokio_postgres::GenericClient;
use workrail_spec::event::{EventData, SessionEvent};
use workrail_spec::ids::SessionId;

use super::worker::{Request, Worker};
use super::{PostgresBackend, sql_error};
use crate::store::error::StoreError;

/// A session's rows, read in one transaction: what load validates.
#[derive(Debug, Default)]
pub(super) struct Image {
    /// Manifest record texts in `manifest_index` order.
    pub(super) manifest: Vec<String>,
    /// Event texts with their `event_index`, ascending.
    pub(super) events: Vec<(i64, String)>,
    /// The referenced snapshots and workflows that exist: (digest, text).
    pub(super) snapshots: Vec<(String, String)>,
    pub(super) workflows: Vec<(String, String)>,
}

impl Worker {
    /// A session's rows in one snapshot of the database (see [`fetch_rows`]).
    pub(super) async fn rows(
        &mut self,
        session: &SessionId,
        from: Option<(i64, i64)>,
    ) -> Result<Option<Image>, StoreError> {
        let op = "load session";
        let client = self.client().await?;
        // One snapshot of the database: an append is one transaction, so a reader sees it
        // whole or not at all, and never waits for a writer.
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(sql_error(op))?;
        let image = fetch_rows(&tx, session, from).await;
        if let Err(e) = tx.rollback().await {
            // What was read is one snapshot and stands; the connection's state does not: it is
            // closed, so no later request runs inside this transaction, and the next one
            // connects afresh.
            if image.is_ok() {
                tracing::warn!(error = %e, "ending a read-only transaction failed; its connection was closed");
            } else {
                tracing::debug!(error = %e, "ending a failed read's transaction failed too; its connection was closed");
            }
            self.client = None;
        }
        image
    }

    /// The event rows `[first, last]` of `session`, in order, with their index: the segments
    /// in those bounds as validation lays them out (D227). One statement, so one snapshot.
    pub(super) async fn event_rows(
        &mut self,
        session: &SessionId,
        first: i64,
        last: i64,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let client = self.client().await?;
        Ok(client
            .query(
                "SELECT event_index, body FROM events
                 WHERE session_id = $1 AND event_index BETWEEN $2 AND $3
                 ORDER BY event_index",
                &[&session.as_str(), &first, &last],
            )
            .await
            .map_err(sql_error("read an earlier segment"))?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect())
    }

    /// The bodies of the manifest rows `[first, first + count)` of `session`, in order (D235).
    /// One statement, so one snapshot.
    pub(super) async fn manifest_rows(
        &mut self,
        session: &SessionId,
        first: i64,
        count: i64,
    ) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        Ok(client
            .query(
                "SELECT body FROM manifest
                 WHERE session_id = $1 AND manifest_index >= $2 AND manifest_index < $2 + $3
                 ORDER BY manifest_index",
                &[&session.as_str(), &first, &count],
            )
            .await
            .map_err(sql_error("read earlier manifest records"))?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    pub(super) async fn list(&mut self) -> Result<Vec<String>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query("SELECT session_id FROM sessions ORDER BY session_id", &[])
            .await
            .map_err(sql_error("list sessions"))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    pub(super) async fn manifest_bytes(&mut self) -> Result<Vec<(String, i64)>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT session_id, manifest_bytes FROM sessions ORDER BY session_id",
                &[],
            )
            .await
            .map_err(sql_error("read the manifest lengths"))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }
}

impl PostgresBackend {
    /// Each session's manifest length in bytes, by session id (one query).
    pub fn manifest_lengths_by_id(&self) -> Result<Vec<(String, i64)>, StoreError> {
        self.call(|reply| Request::ManifestBytes { reply })
    }

    /// Every session's manifest length as its rows spell `manifest.jsonl` (each record's text
    /// plus a newline), by session id.
    pub fn manifest_lengths(&self) -> Result<Vec<(SessionId, u64)>, StoreError> {
        let rows = self.manifest_lengths_by_id()?;
        Ok(rows
            .into_iter()
            .filter_map(|(id, len)| Some((SessionId::parse(&id).ok()?, len.max(0) as u64)))
            .collect())
    }
}

/// The session's manifest as (records, bytes of `manifest.jsonl` they spell), from the totals
/// on its row (kept by a trigger, D129); (0, 0) without one.
pub(super) async fn freshness(
    client: &impl GenericClient,
    session: &SessionId,
) -> Result<(i64, i64), StoreError> {
    let row = client
        .query_opt(
            "SELECT manifest_rows, manifest_bytes FROM sessions WHERE session_id = $1",
            &[&session.as_str()],
        )
        .await
        .map_err(sql_error("check the session for changes"))?;
    Ok(row.map_or((0, 0), |row| (row.get(0), row.get(1))))
}

/// Reads a session's rows and the objects its events reference: all of them (`from` = `None`;
/// `None` without a session row), or those past a cached view of `from` = (records, events)
/// with the objects the new events reference (`None` when the rows before those positions are
/// not all there: then only a full read can judge).
pub(super) async fn fetch_rows(
    client: &impl GenericClient,
    session: &SessionId,
    from: Option<(i64, i64)>,
) -> Result<Option<Image>, StoreError> {
    let op = "load session";
    let id = session.as_str();
    let (manifest_from, event_from) = from.unwrap_or((0, 0));
    if from.is_none() {
        let exists = client
            .query_opt("SELECT 1 FROM sessions WHERE session_id = $1", &[&id])
            .await
            .map_err(sql_error(op))?;
        if exists.is_none() {
            return Ok(None);
        }
    } else {
        let prefix = client
            .query_one(
                "SELECT (SELECT count(*) FROM manifest WHERE session_id = $1 AND manifest_index < $2),
                        (SELECT count(*) FROM events WHERE session_id = $1 AND event_index < $3)",
                &[&id, &manifest_from, &event_from],
            )
            .await
            .map_err(sql_error(op))?;
        if prefix.get::<_, i64>(0) != manifest_from || prefix.get::<_, i64>(1) != event_from {
            return Ok(None);
        }
    }
    // Indices are never negative (a check of the tables), so a full read is the rows from 0.
    let manifest = client
        .query(
            "SELECT body FROM manifest WHERE session_id = $1 AND manifest_index >= $2
             ORDER BY manifest_index",
            &[&id, &manifest_from],
        )
        .await
        .map_err(sql_error(op))?
        .iter()
        .map(|r| r.get::<_, String>(0))
        .collect();
    let events: Vec<(i64, String)> = client
        .query(
            "SELECT event_index, body FROM events WHERE session_id = $1 AND event_index >= $2
             ORDER BY event_index",
            &[&id, &event_from],
        )
        .await
        .map_err(sql_error(op))?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let (snapshots, workflows) = fetch_objects(client, &events).await?;
    Ok(Some(Image {
        manifest,
        events,
        snapshots,
        workflows,
    }))
}

/// The snapshots and workflows `events` reference that exist: (digest, text) each.
type Objects = (Vec<(String, String)>, Vec<(String, String)>);

async fn fetch_objects(
    client: &impl GenericClient,
    events: &[(i64, String)],
) -> Result<Objects, StoreError> {
    let op = "load session";
    let mut snapshots = BTreeSet::new();
    let mut workflows = BTreeSet::new();
    for (_, body) in events {
        // An event that does not parse is reported by the validator.
        let Ok(event) = SessionEvent::from_json_str(body) else {
            continue;
        };
        match event.data() {
            EventData::NodeCreated(n) => {
                snapshots.insert(n.snapshot_ref.digest().as_str().to_owned());
            }
            EventData::RunStarted(r) => {
                workflows.insert(r.workflow_hash.digest().as_str().to_owned());
            }
            _ => {}
        }
    }
    let objects = |table: &'static str, digests: BTreeSet<String>| async move {
        let digests: Vec<String> = digests.into_iter().collect();
        let sql = format!("SELECT digest, body FROM {table} WHERE digest = ANY($1)");
        client
            .query(&sql, &[&digests])
            .await
            .map(|rows| {
                rows.iter()
                    .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)))
                    .collect::<Vec<_>>()
            })
            .map_err(sql_error(op))
    };
    let snapshots = objects("snapshots", snapshots).await?;
    let workflows = objects("workflows", workflows).await?;
    Ok((snapshots, workflows))
}

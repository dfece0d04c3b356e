//! GC's queries on PostgreSQL (D112; the rules are in `crate::gc::postgres`): each session's
//! last activity, deleting one session under its lock when it is still as judged, and the sweep
//! of unreferenced objects in one statement.

use std::time::Duration;

use workrail_spec::ids::SessionId;

use super::append::try_lock;
use super::objects::ObjectTable;
use super::read::freshness;
use super::worker::{Request, Worker};
use super::{PostgresBackend, lock_key, sql_error};
use crate::store::error::StoreError;

/// What [`PostgresBackend::delete_session`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    /// The session's rows are gone.
    Yes,
    /// Another process held its lock past the wait: nothing was deleted.
    Locked,
    /// Its manifest rows are not what GC validated: nothing was deleted.
    Changed,
    /// Its rows were already gone (another GC, or by hand).
    Gone,
}

/// What [`PostgresBackend::sweep`] deleted (or, in a dry run, would delete): digests per table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    pub snapshots: Vec<String>,
    pub workflows: Vec<String>,
    pub artifacts: Vec<String>,
    /// Unreferenced objects kept because they are younger than the grace.
    pub young: usize,
}

impl PostgresBackend {
    /// Each session's last activity (the time of its last committed append), in milliseconds
    /// since the Unix epoch, by session id (D112); `None` where it cannot be read (NULL, or not
    /// a finite time): GC then retains the session as of unknown age.
    pub fn last_activity(&self) -> Result<Vec<(String, Option<i64>)>, StoreError> {
        self.call(|reply| Request::Activity { reply })
    }

    /// Deletes `session`'s rows (events, manifest, session) in one transaction under its
    /// advisory lock, when its manifest still holds `expect` = (records, bytes): never while
    /// another process appends, never a session that changed since it was judged (D112).
    pub fn delete_session(
        &self,
        session: &SessionId,
        expect: (i64, i64),
    ) -> Result<Deleted, StoreError> {
        let wait = self.lock_wait;
        let id = session.clone();
        let deleted = self.call(|reply| Request::DeleteSession {
            session: id,
            expect,
            wait,
            reply,
        })?;
        self.forget_cached(session);
        Ok(deleted)
    }

    /// Deletes, in one statement, the snapshots, workflows and artifacts whose digests are not
    /// in `roots` (snapshots, workflows, artifacts) and that were stored more than `grace` ago
    /// by the database's clock; with `dry_run` only lists them (D112).
    pub fn sweep(
        &self,
        roots: [Vec<String>; 3],
        grace: Duration,
        dry_run: bool,
    ) -> Result<Swept, StoreError> {
        self.call(|reply| Request::Sweep {
            roots,
            grace,
            dry_run,
            reply,
        })
    }
}

impl Worker {
    pub(super) async fn activity(&mut self) -> Result<Vec<(String, Option<i64>)>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT session_id,
                        CASE WHEN isfinite(last_activity)
                             THEN (extract(epoch FROM last_activity) * 1000)::bigint END
                 FROM sessions ORDER BY session_id",
                &[],
            )
            .await
            .map_err(sql_error("read the sessions' last activity"))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    pub(super) async fn delete_session(
        &mut self,
        session: &SessionId,
        expect: (i64, i64),
        wait: Duration,
    ) -> Result<Deleted, StoreError> {
        let op = "delete a session";
        let key = lock_key(&self.schema, session);
        let client = self.client().await?;
        let tx = client.transaction().await.map_err(sql_error(op))?;
        if !try_lock(&tx, key, wait).await.map_err(sql_error(op))? {
            return Ok(Deleted::Locked);
        }
        // Under the lock nothing else commits to this session: the check is authoritative.
        let exists = tx
            .query_opt(
                "SELECT 1 FROM sessions WHERE session_id = $1",
                &[&session.as_str()],
            )
            .await
            .map_err(sql_error(op))?
            .is_some();
        if !exists {
            return Ok(Deleted::Gone);
        }
        if freshness(&tx, session).await? != expect {
            return Ok(Deleted::Changed);
        }
        for table in ["events", "manifest", "sessions"] {
            tx.execute(
                &format!("DELETE FROM {table} WHERE session_id = $1"),
                &[&session.as_str()],
            )
            .await
            .map_err(sql_error(op))?;
        }
        // Derived rows summarize sessions, notes included (the resume index): they go with the
        // session, and the next `resume_session` writes the index again (D115, as D64 on files).
        tx.execute("DELETE FROM derived", &[])
            .await
            .map_err(sql_error(op))?;
        tx.commit().await.map_err(sql_error(op))?;
        Ok(Deleted::Yes)
    }

    pub(super) async fn sweep(
        &mut self,
        roots: &[Vec<String>; 3],
        grace: Duration,
        dry_run: bool,
    ) -> Result<Swept, StoreError> {
        let op = "sweep unreferenced objects";
        let client = self.client().await?;
        let tables = [
            ObjectTable::Snapshots,
            ObjectTable::Workflows,
            ObjectTable::Artifacts,
        ];
        // One statement: one snapshot of the database, each table's old unreferenced rows
        // deleted (or listed) and the young ones counted.
        let mut parts = Vec::new();
        let mut selects = Vec::new();
        for (i, table) in tables.iter().enumerate() {
            let t = table.name();
            let p = i + 1;
            let old = format!(
                "{t} WHERE NOT (digest = ANY(${p}::text[])) AND created_at < now() - make_interval(secs => $4)"
            );
            parts.push(if dry_run {
                format!("g{p} AS (SELECT digest FROM {old})")
            } else {
                format!("g{p} AS (DELETE FROM {old} RETURNING digest)")
            });
            parts.push(format!(
                "y{p} AS (SELECT count(*) AS n FROM {t} WHERE NOT (digest = ANY(${p}::text[])) AND created_at >= now() - make_interval(secs => $4))"
            ));
            selects.push(format!("SELECT {p}, digest FROM g{p}"));
            selects.push(format!("SELECT -{p}, n::text FROM y{p}"));
        }
        let sql = format!("WITH {} {}", parts.join(", "), selects.join(" UNION ALL "));
        let secs = grace.as_secs_f64();
        let rows = client
            .query(&sql, &[&roots[0], &roots[1], &roots[2], &secs])
            .await
            .map_err(sql_error(op))?;
        let mut swept = Swept::default();
        for row in rows {
            let which: i32 = row.get(0);
            let text: String = row.get(1);
            match which {
                1 => swept.snapshots.push(text),
                2 => swept.workflows.push(text),
                3 => swept.artifacts.push(text),
                _ => swept.young += text.parse::<usize>().unwrap_or(0),
            }
        }
        for list in [
            &mut swept.snapshots,
            &mut swept.workflows,
            &mut swept.artifacts,
        ] {
            list.sort();
        }
        Ok(swept)
    }
}

//! Writing a session: the append transaction (D97), the append gate's lock and commits, and
//! the lock guards maintenance holds, as the backend's thread runs them; the file store's
//! append rules over a validated session ([`prepare`]).

use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_postgres::{Client, GenericClient};
use workrail_spec::event::SessionEvent;
use workrail_spec::ids::{ManifestIndex, SessionId, SnapshotRef};
use workrail_spec::jcs::{sha256, to_canonical_string};
use workrail_spec::manifest::{ManifestRecord, SegmentClosed, SnapshotPinned, segment_rel_path};

use super::health::validate;
use super::read::{Image, fetch_rows, freshness};
use super::worker::{Request, Worker};
use super::{describe, lock_key, sql_error};
use crate::store::error::{Committed, StoreError};
use crate::store::event_log::Residency;
use crate::store::load::{LoadedSession, introduced_snapshots};
use crate::store::session::{AppendPlan, AppendedEvent, NumberedPlan, SegmentLimits, number_plan};

/// What an append writes: the results in plan order, the new events, and their records.
pub(super) struct Prepared {
    pub(super) results: Vec<AppendedEvent>,
    pub(super) fresh: Vec<(SessionEvent, String)>,
    pub(super) records: Vec<(ManifestRecord, String)>,
}

/// The file store's append rules over a validated session: plan checks, dedupeKey no-ops,
/// numbering, the segment's `segment_closed` and the pins of the snapshots it introduces.
pub(super) fn prepare(
    loaded: &LoadedSession,
    plan: AppendPlan,
    limits: SegmentLimits,
) -> Result<Prepared, StoreError> {
    let session_id = &loaded.session_id;
    let NumberedPlan {
        results,
        fresh,
        segment,
    } = number_plan(loaded, plan, &limits)?;
    if fresh.is_empty() {
        return Ok(Prepared {
            results,
            fresh: Vec::new(),
            records: Vec::new(),
        });
    }
    // Each event's text is its segment line without the newline.
    let lines: Vec<String> = segment.split_terminator('\n').map(str::to_owned).collect();
    let index = |value: u64| {
        ManifestIndex::new(value).ok_or(StoreError::Internal {
            detail: "manifestIndex would exceed 2^53-1".into(),
        })
    };
    let first_index = fresh[0].event_index();
    let last_index = fresh[fresh.len() - 1].event_index();
    let mut next = loaded.manifest.len() as u64;
    let mut records = vec![ManifestRecord::SegmentClosed(SegmentClosed {
        manifest_index: index(next)?,
        session_id: session_id.clone(),
        first_event_index: first_index,
        last_event_index: last_index,
        segment_rel_path: segment_rel_path(first_index, last_index),
        sha256: sha256(segment.as_bytes()),
        bytes: segment.len() as u64,
    })];
    next += 1;
    let mut newly_pinned: Vec<SnapshotRef> = Vec::new();
    for (snapshot, i) in introduced_snapshots(&fresh) {
        if loaded.is_pinned(&snapshot)? || newly_pinned.contains(&snapshot) {
            continue;
        }
        records.push(ManifestRecord::SnapshotPinned(SnapshotPinned {
            manifest_index: index(next)?,
            session_id: session_id.clone(),
            event_index: fresh[i].event_index(),
            snapshot_ref: snapshot.clone(),
            created_by_event_id: fresh[i].event_id().clone(),
        }));
        next += 1;
        newly_pinned.push(snapshot);
    }
    let records = records
        .into_iter()
        .map(|r| {
            let text = to_canonical_string(&r).map_err(|e| StoreError::Internal {
                detail: format!("manifest record is not canonicalizable: {e}"),
            })?;
            Ok((r, text))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    Ok(Prepared {
        results,
        fresh: fresh.into_iter().zip(lines).collect(),
        records,
    })
}

/// What a gate read under its lock.
pub(super) enum GateRead {
    /// The manifest is as the caller's cached view has it.
    Unchanged,
    /// The session's rows (`None`: no session row yet).
    Image(Option<Image>),
    /// The rows past the caller's cached view, with the objects their events reference (D222).
    Tail(Image),
}

/// Hands out lock guards: dropping one asks the worker to end its transaction.
pub(super) struct HeldLock {
    pub(super) id: u64,
    pub(super) requests: mpsc::UnboundedSender<Request>,
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        let (reply, answer) = std_mpsc::channel();
        if self
            .requests
            .send(Request::Unlock { id: self.id, reply })
            .is_ok()
        {
            // Wait for the release, so a lock dropped is a lock free. No answer means the
            // worker is gone, and its connections (with their locks) with it; a failed release
            // is reported and its connection closed by the worker (D138).
            if answer.recv().is_err() {
                tracing::debug!("the store's worker ended before it released a session lock");
            }
        }
    }
}

impl Worker {
    pub(super) async fn append(
        &mut self,
        session: &SessionId,
        plan: AppendPlan,
        wait: Duration,
    ) -> Result<Vec<AppendedEvent>, StoreError> {
        let op = "append to the session";
        let key = lock_key(&self.schema, session);
        let schema = self.schema.clone();
        let client = self.client().await?;
        let tx = client.transaction().await.map_err(sql_error(op))?;
        if !try_lock(&tx, key, wait).await.map_err(sql_error(op))? {
            return Err(StoreError::Locked {
                session: session.clone(),
            });
        }
        // Under the lock nothing else commits to this session: this load is authoritative.
        // It runs on this worker's thread and lives for this call only, so it keeps every
        // event parsed: reading one again would ask a worker, perhaps this one (D227).
        let loaded = match fetch_rows(&tx, session, None).await? {
            Some(image) => validate(session, &image, Residency::default())?,
            None => None,
        }
        .unwrap_or_else(|| LoadedSession::empty(session.clone(), Default::default()));
        if !loaded.health.is_healthy() {
            return Err(StoreError::Unhealthy {
                session: session.clone(),
                health: loaded.health.clone(),
            });
        }
        let prepared = prepare(&loaded, plan, SegmentLimits::default())?;
        if prepared.fresh.is_empty() {
            return Ok(prepared.results);
        }
        insert_prepared(&tx, session, &prepared).await?;
        commit(tx, session, &schema).await?;
        Ok(prepared.results)
    }

    pub(super) async fn lock(
        &mut self,
        session: &SessionId,
        wait: Duration,
    ) -> Result<u64, StoreError> {
        let op = "lock session";
        let client = self.connect("lock").await?;
        // A guard is held by maintenance for as long as it needs: its idle transaction is not
        // ended by the server (the statements stay bounded).
        client
            .batch_execute("SET idle_in_transaction_session_timeout = 0; BEGIN")
            .await
            .map_err(sql_error(op))?;
        let key = lock_key(&self.schema, session);
        if !try_lock(&client, key, wait).await.map_err(sql_error(op))? {
            return Err(StoreError::Locked {
                session: session.clone(),
            });
        }
        let id = self.next_id();
        self.locks.insert(id, client);
        Ok(id)
    }

    pub(super) async fn gate_open(
        &mut self,
        session: &SessionId,
        wait: Duration,
        known: Option<((i64, i64), (i64, i64))>,
    ) -> Result<(u64, GateRead), StoreError> {
        let op = "lock session";
        let client = match self.idle.take(Client::is_closed) {
            Some(client) => client,
            None => self.connect("gate").await?,
        };
        let key = lock_key(&self.schema, session);
        if !try_lock_as(&client, Lock::Session, key, wait)
            .await
            .map_err(sql_error(op))?
        {
            self.idle.give(client, Instant::now());
            return Err(StoreError::Locked {
                session: session.clone(),
            });
        }
        // Under the lock nothing else commits to this session: this read is authoritative.
        let read = match known {
            Some((known, from)) => match freshness(&client, session).await {
                Ok(now) if now == known => Ok(GateRead::Unchanged),
                // Only the rows past the view, when the rows before its end are all there.
                Ok(_) => match fetch_rows(&client, session, Some(from)).await {
                    Ok(Some(tail)) => Ok(GateRead::Tail(tail)),
                    Ok(None) => fetch_rows(&client, session, None)
                        .await
                        .map(GateRead::Image),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            },
            None => fetch_rows(&client, session, None)
                .await
                .map(GateRead::Image),
        };
        let id = self.next_id();
        self.gates.insert(id, (client, key));
        Ok((id, read?))
    }

    pub(super) async fn gate_append(
        &mut self,
        id: u64,
        session: &SessionId,
        prepared: &Prepared,
    ) -> Result<(), StoreError> {
        let op = "append to the session";
        let schema = self.schema.clone();
        let (client, _) = self
            .gates
            .get_mut(&id)
            .ok_or_else(|| StoreError::Internal {
                detail: "an append gate was used after it closed".into(),
            })?;
        if client.is_closed() {
            return Err(StoreError::Database {
                session: Some(session.clone()),
                op,
                detail: "the connection holding the session lock closed; nothing was committed"
                    .into(),
            });
        }
        let tx = client.transaction().await.map_err(sql_error(op))?;
        insert_prepared(&tx, session, prepared).await?;
        commit(tx, session, &schema).await
    }
}

/// Inserts a prepared plan's rows (the session row on its first append, the events, then its
/// manifest records) in `tx`.
async fn insert_prepared(
    tx: &tokio_postgres::Transaction<'_>,
    session: &SessionId,
    prepared: &Prepared,
) -> Result<(), StoreError> {
    let op = "append to the session";
    let write = |e: tokio_postgres::Error| StoreError::Database {
        session: Some(session.clone()),
        op,
        detail: format!("{}; nothing was committed", describe(&e)),
    };
    tx.execute(
        // The session's last activity (GC's retention, D112) moves with every commit.
        "INSERT INTO sessions (session_id) VALUES ($1)
         ON CONFLICT (session_id) DO UPDATE SET last_activity = now()",
        &[&session.as_str()],
    )
    .await
    .map_err(write)?;
    let insert_event = tx
        .prepare(
            "INSERT INTO events (session_id, event_index, event_id, dedupe_key, body)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .await
        .map_err(write)?;
    for (event, body) in &prepared.fresh {
        let index = event.event_index().get() as i64;
        tx.execute(
            &insert_event,
            &[
                &session.as_str(),
                &index,
                &event.event_id().as_str(),
                &event.dedupe_key().as_str(),
                body,
            ],
        )
        .await
        .map_err(write)?;
    }
    let insert_record = tx
        .prepare(
            "INSERT INTO manifest (session_id, manifest_index, kind, body)
             VALUES ($1, $2, $3, $4)",
        )
        .await
        .map_err(write)?;
    for (record, body) in &prepared.records {
        let index = record.manifest_index().get() as i64;
        tx.execute(
            &insert_record,
            &[&session.as_str(), &index, &record.kind().as_str(), body],
        )
        .await
        .map_err(write)?;
    }
    Ok(())
}

/// Commits an append transaction: a failed `COMMIT` may have reached the server, so what it
/// committed is unknown (the next load decides; a retry is idempotent by dedupeKey).
async fn commit(
    tx: tokio_postgres::Transaction<'_>,
    session: &SessionId,
    schema: &str,
) -> Result<(), StoreError> {
    tx.commit().await.map_err(|e| StoreError::Database {
        session: Some(session.clone()),
        op: "commit the append transaction",
        detail: format!(
            "{} on schema {schema}; {}",
            describe(&e),
            Committed::Unknown
        ),
    })
}

/// Which advisory lock of a session: the append transaction's, or a gate's held by its
/// connection across transactions (the same key, so each excludes the other).
#[derive(Clone, Copy)]
enum Lock {
    Transaction,
    Session,
}

/// Tries the session's advisory lock until it is taken or `wait` has passed.
pub(super) async fn try_lock(
    client: &impl GenericClient,
    key: i64,
    wait: Duration,
) -> Result<bool, tokio_postgres::Error> {
    try_lock_as(client, Lock::Transaction, key, wait).await
}

/// [`try_lock`] of either kind, retried with backoff (1 to 20 ms).
async fn try_lock_as(
    client: &impl GenericClient,
    lock: Lock,
    key: i64,
    wait: Duration,
) -> Result<bool, tokio_postgres::Error> {
    let sql = match lock {
        Lock::Transaction => "SELECT pg_try_advisory_xact_lock($1)",
        Lock::Session => "SELECT pg_try_advisory_lock($1)",
    };
    let deadline = Instant::now() + wait;
    let mut pause = Duration::from_millis(1);
    loop {
        let taken: bool = client.query_one(sql, &[&key]).await?.get(0);
        if taken {
            return Ok(true);
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}

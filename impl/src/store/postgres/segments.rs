//! Where a loaded session's forgotten events are read again on PostgreSQL (D227): a segment's
//! text is its event rows in its bounds, one per line, exactly as validation lays the rows out
//! (`health`), so the digest the load checked is the one a read checks again.

use std::fmt;

use tokio::sync::mpsc;
use workrail_spec::ids::SessionId;
use workrail_spec::manifest::SegmentClosed;

use super::worker::Request;
use super::{lock_key, spread_id, stopped};
use crate::store::error::StoreError;
use crate::store::event_log::{ManifestPage, SegmentSource};

/// The backend's workers, asked for a session's rows on the worker that serves the session.
pub(super) struct PgSegments {
    pub(super) requests: Vec<mpsc::UnboundedSender<Request>>,
    pub(super) schema: String,
}

impl fmt::Debug for PgSegments {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgSegments")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl PgSegments {
    fn call<T>(
        &self,
        session: &SessionId,
        make: impl FnOnce(super::worker::Reply<T>) -> Request,
    ) -> Result<T, StoreError> {
        let (reply, answer) = std::sync::mpsc::channel();
        let worker = spread_id(lock_key(&self.schema, session) as u64, self.requests.len());
        self.requests
            .get(worker)
            .ok_or_else(stopped)?
            .send(make(reply))
            .map_err(|_| stopped())?;
        answer.recv().map_err(|_| stopped())?
    }
}

impl SegmentSource for PgSegments {
    fn read(
        &self,
        session: &SessionId,
        segment: &SegmentClosed,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.read_many(session, &[segment])?.pop().flatten())
    }

    fn rereads_manifest(&self) -> bool {
        true
    }

    /// The page's manifest rows, each body a line, as validation lays them out (`health`), so
    /// the records the load checked are the ones a read checks again (D235).
    fn read_manifest(
        &self,
        session: &SessionId,
        page: &ManifestPage,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let (first, count) = (page.first as i64, page.count as i64);
        let rows = self.call(session, |reply| Request::ManifestRows {
            session: session.clone(),
            first,
            count,
            reply,
        })?;
        if rows.is_empty() && !self.has_manifest(session)? {
            return Ok(None);
        }
        let mut text = String::new();
        for body in rows {
            text.push_str(&body);
            text.push('\n');
        }
        Ok(Some(text.into_bytes()))
    }

    fn has_manifest(&self, session: &SessionId) -> Result<bool, StoreError> {
        let (records, _) = self.call(session, |reply| Request::Freshness {
            session: session.clone(),
            reply,
        })?;
        Ok(records > 0)
    }

    /// One query for the rows of every segment, split by their bounds.
    fn read_many(
        &self,
        session: &SessionId,
        segments: &[&SegmentClosed],
    ) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        let (Some(first), Some(last)) = (segments.first(), segments.last()) else {
            return Ok(Vec::new());
        };
        let (first, last) = (
            first.first_event_index.get() as i64,
            last.last_event_index.get() as i64,
        );
        let rows = self.call(session, |reply| Request::Segment {
            session: session.clone(),
            first,
            last,
            reply,
        })?;
        Ok(segments
            .iter()
            .map(|segment| {
                let (from, to) = (
                    segment.first_event_index.get() as i64,
                    segment.last_event_index.get() as i64,
                );
                let start = rows.partition_point(|(index, _)| *index < from);
                let end = rows.partition_point(|(index, _)| *index <= to);
                let rows = &rows[start..end.max(start)];
                (!rows.is_empty()).then(|| {
                    let mut text = String::new();
                    for (_, body) in rows {
                        text.push_str(body);
                        text.push('\n');
                    }
                    text.into_bytes()
                })
            })
            .collect())
    }
}

//! What the Console reads from a session's log beyond the internal projections: which runs a
//! person would call blocked (decision D182), the text of the notes for search, and the run's
//! event timeline (decision D183). Read path only, like the projections: a loaded session and
//! the files' modification times, nothing written.

use std::collections::HashSet;
use std::path::Path;
use std::time::SystemTime;

use serde::Serialize;
use workrail_spec::event::{AdvanceOutcome, EventData, OutputPayload, SessionEvent};
use workrail_spec::ids::SessionId;

use crate::projections::console::{LIST_MAX, TITLE_MAX_BYTES, bounded};
use crate::protocol::{Facts, Workrail};
use crate::store::LoadedSession;

/// The notes searched per session are cut to this many bytes.
pub const SEARCH_NOTES_MAX_BYTES: usize = 256 * 1024;
/// The timeline shows at most this many events (the newest), like every other Console list.
pub const TIMELINE_MAX: usize = 4 * LIST_MAX;

/// A session's facts for the sessions list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionFacts {
    /// Runs (lanes included) whose preferred tip's latest attempt was blocked with nothing
    /// after it at that node (decision D182).
    pub blocked_runs: HashSet<String>,
    /// Every note recorded in the session, lowercased, for the list's search.
    pub notes: String,
}

/// Whether the Console shows `run` as blocked (decision D182): the latest acknowledgement
/// attempt at its preferred tip was blocked, and no event at that node was committed after it.
/// The locked run status is left as it is; this is what a person means by "blocked".
pub fn run_blocked(facts: &Facts<'_>, run: &crate::projections::RunView) -> bool {
    let Some(tip) = run.preferred_tip.as_ref() else {
        return false;
    };
    let Some((at, last)) = facts
        .advance_records(tip)
        .ok()
        .and_then(|mut records| records.pop())
    else {
        return false;
    };
    if !matches!(last.outcome, AdvanceOutcome::Blocked { .. }) {
        return false;
    }
    let Ok(after) = facts.events.range(at.saturating_add(1)..facts.events.len()) else {
        return false;
    };
    !after.iter().any(|e| e.scope().node_id() == Some(tip))
}

/// The runs of a loaded session that the Console shows as blocked.
pub fn blocked_runs(events: &[SessionEvent]) -> HashSet<String> {
    blocked_runs_of(&Facts::new(events))
}

/// [`blocked_runs`] of a session's facts, projected already.
pub fn blocked_runs_of(facts: &Facts<'_>) -> HashSet<String> {
    facts
        .projection
        .runs
        .iter()
        .filter(|(_, run)| run_blocked(facts, run))
        .map(|(id, _)| id.to_string())
        .collect()
}

/// The facts of one session for the list, or `None` when it cannot be read (the list still
/// shows its row from the projection).
pub fn session_facts(w: &Workrail, session_id: &str) -> Option<SessionFacts> {
    let id = SessionId::parse(session_id).ok()?;
    let loaded = w.sessions().load(&id).ok()?;
    let events = loaded.events().all().ok()?;
    let mut notes = String::new();
    for event in events.iter() {
        if let EventData::NodeOutputAppended(o) = event.data()
            && let OutputPayload::Notes { notes_markdown } = &o.payload
            && notes.len() < SEARCH_NOTES_MAX_BYTES
        {
            notes.push_str(&notes_markdown.as_str().to_lowercase());
            notes.push('\n');
        }
    }
    Some(SessionFacts {
        blocked_runs: blocked_runs(&events),
        notes,
    })
}

/// One event of a session's timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TimelineRow {
    pub index: u64,
    /// The event kind (`node_created`, `advance_recorded`, …).
    pub kind: String,
    pub run_id: Option<String>,
    pub node_id: Option<String>,
    /// One line saying what happened.
    pub summary: String,
    /// When the event's segment was committed (RFC 3339 UTC), when the store keeps files
    /// (decision D183).
    pub committed_at: Option<String>,
}

fn first_line(text: &str) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    bounded(line.trim(), TITLE_MAX_BYTES)
}

/// One line about an event, from its payload.
pub fn summary(event: &SessionEvent) -> String {
    let text = match event.data() {
        EventData::SessionCreated(_) => "Session created".to_owned(),
        EventData::ObservationRecorded(o) => format!("Observed {}", o.key.as_str()),
        EventData::RunStarted(r) => match &r.lane {
            Some(l) => format!(
                "Lane {} started: {} (of node {})",
                l.lane_index, r.workflow_id, l.parent_node_id
            ),
            None => format!("Run started: {}", r.workflow_id),
        },
        EventData::NodeCreated(n) => format!("{} node created", n.node_kind.as_str()),
        EventData::EdgeCreated(e) => format!(
            "{} edge {} → {} ({})",
            e.edge_kind.as_str(),
            e.from_node_id,
            e.to_node_id,
            e.cause.kind.as_str().replace('_', " ")
        ),
        EventData::AdvanceRecorded(a) => match &a.outcome {
            AdvanceOutcome::Blocked { blockers, .. } => {
                let list = blockers.blockers();
                match list.first() {
                    Some(b) => format!(
                        "Blocked ({} blocker{}): {} {}",
                        list.len(),
                        if list.len() == 1 { "" } else { "s" },
                        b.code.as_str(),
                        b.message.as_str()
                    ),
                    None => "Blocked".to_owned(),
                }
            }
            AdvanceOutcome::Advanced { to_node_id } => format!("Advanced to {to_node_id}"),
        },
        EventData::NodeOutputAppended(o) => match &o.payload {
            OutputPayload::Notes { notes_markdown } => {
                format!("Notes: {}", first_line(notes_markdown.as_str()))
            }
            OutputPayload::ArtifactRef {
                content_type,
                byte_length,
                ..
            } => format!("Artifact: {content_type}, {byte_length} bytes"),
        },
        EventData::PreferencesChanged(p) => format!(
            "Preferences: autonomy {}, risk policy {}",
            p.effective.autonomy.as_str(),
            p.effective.risk_policy.as_str()
        ),
        EventData::CapabilityObserved(c) => {
            format!(
                "Capability {}: {}",
                c.capability.as_str(),
                c.status.as_str()
            )
        }
        EventData::GapRecorded(g) => {
            format!("{} gap: {}", g.severity.as_str(), g.summary.as_str())
        }
        EventData::DivergenceRecorded(d) => {
            format!("Divergence ({}): {}", d.reason.as_str(), d.summary.as_str())
        }
        EventData::DecisionTraceAppended(t) => match t.entries.first() {
            Some(e) => format!(
                "Decision trace ({} entr{}): {}",
                t.entries.len(),
                if t.entries.len() == 1 { "y" } else { "ies" },
                e.summary
            ),
            None => "Decision trace".to_owned(),
        },
        EventData::ContextSet(c) => {
            let keys: Vec<&str> = c.context.keys().map(String::as_str).collect();
            format!("Context set: {}", keys.join(", "))
        }
    };
    first_line(&text)
}

/// The session's events in log order (the newest [`TIMELINE_MAX`] of `events`, its log as the
/// page's view read it), each with the time its segment was committed where `modified` knows
/// it (paths relative to the data directory). Rows whose segments' records cannot be read
/// again show no time.
pub fn timeline(
    loaded: &LoadedSession,
    events: &[SessionEvent],
    modified: &dyn Fn(&Path) -> Option<SystemTime>,
) -> (Vec<TimelineRow>, bool) {
    let count = events.len();
    let cut = count > TIMELINE_MAX;
    // Only the segments of the rows shown: their files' times are looked up, not every one's.
    // Records that cannot be read again leave the rows without times.
    let mut segments: Vec<(u64, u64, Option<String>)> = Vec::new();
    for s in loaded
        .segments_from(count.saturating_sub(TIMELINE_MAX))
        .unwrap_or_default()
    {
        let path = crate::store::layout::segment_path(
            &loaded.session_id,
            s.first_event_index,
            s.last_event_index,
        );
        segments.push((
            s.first_event_index.get(),
            s.last_event_index.get(),
            modified(&path).map(crate::time::rfc3339_utc),
        ));
    }
    let newest = &events[count.saturating_sub(TIMELINE_MAX)..];
    let rows = newest
        .iter()
        .map(|event| {
            let index = event.event_index().get();
            let committed_at = segments
                .iter()
                .find(|(first, last, _)| (*first..=*last).contains(&index))
                .and_then(|(_, _, at)| at.clone());
            TimelineRow {
                index,
                kind: event.kind().as_str().to_owned(),
                run_id: event.scope().run_id().map(ToString::to_string),
                node_id: event.scope().node_id().map(ToString::to_string),
                summary: summary(event),
                committed_at,
            }
        })
        .collect();
    (rows, cut)
}

/// How long ago `at` (RFC 3339) was, in words: `12 s ago`, `5 min ago`, `3 h ago`, `2 days ago`.
pub fn ago(at: &str, now: SystemTime) -> Option<String> {
    let then: jiff::Timestamp = at.parse().ok()?;
    let now = jiff::Timestamp::try_from(now).ok()?;
    let secs = now.as_second().saturating_sub(then.as_second()).max(0);
    Some(match secs {
        0..60 => format!("{secs} s ago"),
        60..3_600 => format!("{} min ago", secs / 60),
        3_600..86_400 => format!("{} h ago", secs / 3_600),
        _ => {
            let days = secs / 86_400;
            format!("{days} day{} ago", if days == 1 { "" } else { "s" })
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn ages_read_in_the_largest_whole_unit() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let at = |secs_ago: u64| crate::time::rfc3339_utc(now - Duration::from_secs(secs_ago));
        assert_eq!(ago(&at(5), now).as_deref(), Some("5 s ago"));
        assert_eq!(ago(&at(300), now).as_deref(), Some("5 min ago"));
        assert_eq!(ago(&at(7_200), now).as_deref(), Some("2 h ago"));
        assert_eq!(ago(&at(86_400), now).as_deref(), Some("1 day ago"));
        assert_eq!(ago(&at(3 * 86_400), now).as_deref(), Some("3 days ago"));
        assert_eq!(ago("not a time", now), None);
    }
}

//! The run's durable context (locks §18.2): the latest `context_set` of the run, empty when none.

use serde_json::{Map, Value};
use workrail_spec::event::{EventData, SessionEvent};
use workrail_spec::ids::RunId;

/// The context of `run`: the payload of its last `context_set` in log order.
pub fn run_context(events: &[SessionEvent], run: &RunId) -> Map<String, Value> {
    events
        .iter()
        .rev()
        .find_map(|e| match e.data() {
            EventData::ContextSet(c) if e.scope().run_id() == Some(run) => Some(c.context.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

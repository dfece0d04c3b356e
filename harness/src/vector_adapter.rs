//! The vector adapter for WorkRail-rs (`workrail-vector-adapter`): answers the offline vectors'
//! adapter protocol (`conformance/README.md`, "Vectors and the adapter protocol") for our
//! implementation. The projection ops are answered by the production crate `workrail`:
//!
//! - `preferred_tip`: [`project`] of the events (the incremental projector the server uses,
//!   with its two-pass fallback), the run's `preferred_tip` and `tip_last_activity`; each leaf's
//!   last activity is the highest own activity of the nodes [`RunView::upwards`] walks;
//! - `run_status`: [`RunView::status`] with the tip's effective autonomy from
//!   [`effective_preferences`] (the request's session baseline and global defaults);
//! - `resume_ranking`: [`summarize`] and [`rank_summaries`] over the `healthy` sessions (the
//!   server offers no other, `L-RESUME-HEALTHY-ONLY`), each candidate's snippet from
//!   [`snippet`] as `resume_session` builds it.
//!
//! Every other op goes to the reference adapter over `workrail-spec`
//! ([`workrail_conformance::adapter::answer`]): the pure rules are the spec's, which the
//! production crate uses as they are.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use workrail::projections::resume::{
    ResumeQuery, ResumeSource, rank_summaries, snippet, summarize,
};
use workrail::projections::{
    RunView, SessionProjection, TipPolicy, effective_preferences, project,
};
use workrail::store::Events;
use workrail_spec::closed::SessionHealthKind;
use workrail_spec::event::{EffectivePreferences, SessionEvent};
use workrail_spec::ids::{RunId, SessionId, SnapshotRef, WorkflowHash};

/// Answers one request line with one answer line.
pub fn answer_line(line: &str) -> String {
    match serde_json::from_str::<Value>(line) {
        Ok(request) => answer(&request),
        Err(e) => json!({"error": format!("the request is not JSON: {e}")}),
    }
    .to_string()
}

/// Answers one request.
pub fn answer(request: &Value) -> Value {
    let outcome = match request.get("op").and_then(Value::as_str) {
        Some("preferred_tip") => preferred_tip(request),
        Some("run_status") => run_status(request),
        Some("resume_ranking") => resume_ranking(request),
        _ => return workrail_conformance::adapter::answer(request),
    };
    match outcome {
        Ok(result) => json!({ "result": result }),
        Err(e) => json!({ "error": e }),
    }
}

fn field<'a>(request: &'a Value, name: &str) -> Result<&'a Value, String> {
    request
        .get(name)
        .ok_or_else(|| format!("the request has no `{name}`"))
}

fn text<'a>(value: &'a Value, name: &str) -> Result<&'a str, String> {
    field(value, name)?
        .as_str()
        .ok_or_else(|| format!("`{name}` is not a string"))
}

/// Parses a vector's events with the canonical reader (envelope, scope, dedupeKey, payload).
fn events(value: &Value) -> Result<Vec<SessionEvent>, String> {
    value
        .as_array()
        .ok_or("`events` is not an array")?
        .iter()
        .enumerate()
        .map(|(i, e)| {
            SessionEvent::from_value(e.clone()).map_err(|err| format!("event {i}: {err}"))
        })
        .collect()
}

fn run_id(request: &Value) -> Result<RunId, String> {
    let raw = text(request, "runId")?;
    RunId::parse(raw).map_err(|e| format!("runId {raw:?}: {e}"))
}

/// The run's view in the production projection of `events`.
fn run_view<'p>(projection: &'p SessionProjection, run: &RunId) -> Result<&'p RunView, String> {
    projection
        .runs
        .get(run)
        .ok_or_else(|| format!("the events have no run {run}"))
}

fn preferred_tip(request: &Value) -> Result<Value, String> {
    let events = events(field(request, "events")?)?;
    let run = run_id(request)?;
    let projection = project(&events, TipPolicy::Latest);
    let view = run_view(&projection, &run)?;
    let tip = view
        .preferred_tip
        .as_ref()
        .ok_or_else(|| format!("run {run} has no preferred tip"))?;
    // Leaves in NodeId order (the vectors' order; the DAG holds them in creation order), each
    // with the activity of its reachable history: itself and every ancestor.
    let mut leaves: Vec<_> = view
        .dag
        .nodes
        .values()
        .filter(|n| n.children.is_empty())
        .collect();
    leaves.sort_by(|a, b| a.node_id.cmp(&b.node_id));
    let leaves: Vec<Value> = leaves
        .into_iter()
        .map(|leaf| {
            let last_activity = view
                .upwards(&leaf.node_id)
                .filter_map(|id| view.dag.nodes.get(id))
                .map(|n| n.own_activity)
                .max()
                .unwrap_or(leaf.own_activity);
            json!({
                "nodeId": leaf.node_id.as_str(),
                "lastActivity": last_activity,
                "createdAt": leaf.created_index,
            })
        })
        .collect();
    Ok(json!({
        "nodeId": tip.as_str(),
        "lastActivity": view.tip_last_activity,
        "leaves": leaves,
    }))
}

fn preferences(value: &Value, name: &str) -> Result<Option<EffectivePreferences>, String> {
    if value.is_null() {
        return Ok(None);
    }
    serde_json::from_value(value.clone())
        .map(Some)
        .map_err(|e| format!("`{name}` is not effective preferences: {e}"))
}

fn run_status(request: &Value) -> Result<Value, String> {
    let events = events(field(request, "events")?)?;
    let run = run_id(request)?;
    let complete = field(request, "completeSnapshots")?
        .as_array()
        .ok_or("`completeSnapshots` is not an array")?
        .iter()
        .map(|s| {
            let raw = s.as_str().ok_or("a complete snapshot is not a string")?;
            SnapshotRef::parse(raw).map_err(|e| format!("snapshot {raw:?}: {e}"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let baseline = preferences(field(request, "sessionBaseline")?, "sessionBaseline")?;
    let global = preferences(field(request, "globalDefaults")?, "globalDefaults")?
        .ok_or("`globalDefaults` is null")?;
    let projection = project(&events, TipPolicy::Latest);
    let view = run_view(&projection, &run)?;
    let autonomy = match &view.preferred_tip {
        Some(tip) => effective_preferences(view, tip, baseline, global).autonomy,
        None => baseline.unwrap_or(global).autonomy,
    };
    let status = view.status(|s| complete.contains(s), autonomy);
    Ok(json!({ "status": status.as_str() }))
}

fn resume_ranking(request: &Value) -> Result<Value, String> {
    let mut healthy: Vec<(SessionId, Vec<SessionEvent>)> = Vec::new();
    for (i, s) in field(request, "sessions")?
        .as_array()
        .ok_or("`sessions` is not an array")?
        .iter()
        .enumerate()
    {
        let raw = text(s, "sessionId").map_err(|e| format!("session {i}: {e}"))?;
        let id = SessionId::parse(raw).map_err(|e| format!("sessionId {raw:?}: {e}"))?;
        let health = text(s, "health").map_err(|e| format!("session {raw}: {e}"))?;
        let health = SessionHealthKind::parse(health)
            .ok_or_else(|| format!("session {raw}: unknown health {health:?}"))?;
        if health == SessionHealthKind::Healthy {
            let events = events(field(s, "events")?).map_err(|e| format!("session {raw}: {e}"))?;
            healthy.push((id, events));
        }
    }
    let names: BTreeMap<WorkflowHash, String> = field(request, "workflowNames")?
        .as_object()
        .ok_or("`workflowNames` is not an object")?
        .iter()
        .map(|(hash, name)| {
            let hash =
                WorkflowHash::parse(hash).map_err(|e| format!("workflow hash {hash:?}: {e}"))?;
            let name = name
                .as_str()
                .ok_or_else(|| format!("the name of {hash} is not a string"))?;
            Ok((hash, name.to_owned()))
        })
        .collect::<Result<_, String>>()?;
    let query = field(request, "query")?;
    let query_field = |key: &str| query.get(key).and_then(Value::as_str).map(str::to_owned);
    let query = ResumeQuery {
        text: query_field("text"),
        git_head_sha: query_field("gitHeadSha"),
        git_branch: query_field("gitBranch"),
    };
    let projections: Vec<SessionProjection> = healthy
        .iter()
        .map(|(_, events)| project(events, TipPolicy::Latest))
        .collect();
    let mut workflow_name = |hash: &WorkflowHash| names.get(hash).cloned();
    let summaries: Vec<_> = healthy
        .iter()
        .zip(&projections)
        .map(|((session_id, events), projection)| {
            summarize(
                &ResumeSource {
                    session_id,
                    projection,
                },
                &mut workflow_name,
                &mut |position| {
                    Events::Slice(events)
                        .notes_at(position)
                        .map(|notes| notes.map(|n| n.into_owned()))
                },
            )
        })
        .collect::<Result<_, _>>()
        .map_err(|e| format!("resume summary: {e}"))?;
    let refs: Vec<_> = summaries.iter().collect();
    let candidates: Vec<Value> = rank_summaries(&refs, &query)
        .into_iter()
        .map(|tip| {
            json!({
                "sessionId": tip.session_id.as_str(),
                "runId": tip.run_id.as_str(),
                "nodeId": tip.node_id.as_str(),
                "lastActivityEventIndex": tip.last_activity,
                "whyMatched": tip.why_matched.iter().map(|w| w.as_str()).collect::<Vec<_>>(),
                "snippet": snippet(tip.notes.as_deref()),
            })
        })
        .collect();
    Ok(json!({ "candidates": candidates }))
}

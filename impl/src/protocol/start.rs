//! `start_workflow`: resolve and pin the compiled workflow, start the interpreter, and commit
//! `session_created`, the workspace's `observation_recorded` events (git branch, HEAD, repo root
//! hash, when the server runs inside a git repository), `run_started`, the root `node_created`
//! (plus initial context, preferences and decision trace) as one append plan.

use workrail_spec::closed::{ContextSource, NodeKind, PreferenceSource};
use workrail_spec::context::ContextError;
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::event::{
    ContextSet, EventData, EventScope, NodeCreated, RunStarted, SessionCreated,
};
use workrail_spec::ids::{ChangeId, ContextId, NodeId, RunId, SessionId, TraceId};
use workrail_spec::snapshot::{EnginePayloadV1, EngineState, ExecutionSnapshotFileV1};
use workrail_spec::tools::{ExecutionOutput, StartWorkflowInput};

use super::advance::{Moment, respond_at};
use super::derive::{self, start_scoped};
use super::preferences::{change_event, requested, warning_event, warning_payload};
use super::{NodeContext, Workrail, invariant};
use crate::engine;
use crate::store::{AppendPlan, SessionIntent};

/// The run would start at a loop that reads its iterations from a context value that is missing
/// or of the wrong type: nothing is recorded, and the caller passes it in `context`.
pub(super) fn missing_loop_context(problem: &engine::LoopContextProblem) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::ValidationError,
        format!(
            "start_workflow: {}; nothing was started.",
            problem.describe()
        ),
        format!(
            "Call start_workflow again with `context: {}` ({} {}) and the same other arguments.",
            problem.example(),
            if problem.expected == "array" {
                "an"
            } else {
                "a"
            },
            problem.expected
        ),
        Retry::NotRetryable,
    )
    .with_details(serde_json::json!({
        "loopId": problem.loop_id,
        "contextKey": problem.key,
        "expectedType": problem.expected,
        "foundType": problem.found,
    }))
}

fn entropy_error(e: crate::entropy::EntropyError) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::StoreIoError,
        e.to_string(),
        "Retry the call; if it keeps failing, the system's random source is unavailable.",
        Retry::RetryableImmediate,
    )
}

/// The keys where `to` differs from `from`, as a preference delta.
fn preference_diff(
    from: workrail_spec::event::EffectivePreferences,
    to: workrail_spec::event::EffectivePreferences,
) -> Vec<workrail_spec::event::PreferenceDelta> {
    use workrail_spec::event::PreferenceDelta;
    let mut delta = Vec::new();
    if from.autonomy != to.autonomy {
        delta.push(PreferenceDelta::Autonomy(to.autonomy));
    }
    if from.risk_policy != to.risk_policy {
        delta.push(PreferenceDelta::RiskPolicy(to.risk_policy));
    }
    delta
}

pub(super) fn start(
    wr: &Workrail,
    input: StartWorkflowInput,
) -> Result<ExecutionOutput, ErrorEnvelope> {
    start_in(wr, &(wr.catalog)(), input)
}

/// Starts a run of a workflow of `catalog` (the configured sources, or WorkRail's own
/// checkpoint-only workflow for `start_session`).
pub(super) fn start_in(
    wr: &Workrail,
    catalog: &crate::sources::Catalog,
    input: StartWorkflowInput,
) -> Result<ExecutionOutput, ErrorEnvelope> {
    if let Some(context) = &input.context {
        workrail_spec::context::check_context_map(context).map_err(|e| match e {
            ContextError::OverBudget { measured_bytes, .. } => {
                ErrorEnvelope::context_over_budget("start_workflow", measured_bytes)
            }
            other => ErrorEnvelope::new(
                ErrorCode::ValidationError,
                format!("start_workflow: {other}"),
                "Pass `context` as a JSON object of external inputs (ids, paths, parameters) without the keys __proto__, constructor or prototype.",
                Retry::NotRetryable,
            ),
        })?;
    }
    let requested = requested("start_workflow", input.preset, &input.preferences)?;
    let resolved = catalog.resolve(&input.workflow_id).ok_or_else(|| {
        super::inspect::workflow_not_found("start_workflow", catalog, &input.workflow_id)
    })?;
    let workflow = resolved.workflow;
    let compiled = &workflow.compiled.snapshot;
    let workflow_hash = wr
        .store
        .put_workflow_canonical(compiled, &workflow.compiled.canonical)
        .map_err(|e| e.to_envelope(true))?;
    let initial = input.context.clone().unwrap_or_default();
    let transition =
        engine::start_with(compiled, &EngineState::Init, &initial).map_err(|e| match e {
            engine::EngineError::MissingContext(problem) => missing_loop_context(&problem),
            e => invariant(format!("the interpreter cannot start this workflow: {e}")),
        })?;
    let snapshot = ExecutionSnapshotFileV1 {
        workflow_hash: workflow_hash.clone(),
        engine_payload: EnginePayloadV1::new(transition.state.clone())
            .map_err(|e| invariant(e.to_string()))?,
    };
    let snapshot_ref = wr
        .store
        .put_snapshot(&snapshot)
        .map_err(|e| e.to_envelope(true))?;

    let bytes = |wr: &Workrail| wr.entropy.id_bytes().map_err(entropy_error);
    let session = SessionId::from_entropy(&bytes(wr)?);
    let run = RunId::from_entropy(&bytes(wr)?);
    let root = NodeId::from_entropy(&bytes(wr)?);
    let root_scope = EventScope::Node(run.clone(), root.clone());
    // Global defaults are copied into the run at its start, so later changes to the global
    // config never rewrite past runs (locks §4 "Durability + precedence").
    let global = wr.global_preferences()?;
    let prefs = global.apply(&requested);
    let (delta, source) = if requested.is_empty() {
        (
            preference_diff(super::GLOBAL_DEFAULTS, global),
            PreferenceSource::System,
        )
    } else {
        let mut delta = preference_diff(super::GLOBAL_DEFAULTS, global)
            .into_iter()
            .filter(|d| !requested.iter().any(|u| u.key() == d.key()))
            .collect::<Vec<_>>();
        delta.extend(requested.iter().copied());
        (delta, PreferenceSource::User)
    };

    let mut events = vec![wr.event(
        &session,
        EventScope::Session,
        EventData::SessionCreated(SessionCreated {}),
    )?];
    // Workspace anchors for resume ranking, session-scoped, committed with the session itself
    // (never recorded later: rehydrate writes nothing).
    if let Some(identity) = wr.workspace.git_identity() {
        for observation in crate::workspace::observations(&identity) {
            events.push(wr.event(
                &session,
                EventScope::Session,
                EventData::ObservationRecorded(observation),
            )?);
        }
    }
    events.extend([
        wr.event(
            &session,
            EventScope::Run(run.clone()),
            EventData::run_started(RunStarted {
                workflow_id: workflow.workflow_id.clone(),
                workflow_hash: workflow_hash.clone(),
                workflow_source_kind: workflow.source_kind,
                workflow_source_ref: workflow.source_ref.clone(),
                lane: None,
            }),
        )?,
        wr.event(
            &session,
            root_scope.clone(),
            EventData::NodeCreated(NodeCreated {
                node_kind: NodeKind::Step,
                parent_node_id: None,
                workflow_hash: workflow_hash.clone(),
                snapshot_ref,
            }),
        )?,
    ]);
    if !delta.is_empty() {
        events.push(change_event(
            wr,
            &session,
            &root_scope,
            ChangeId::from_digest(&start_scoped(&root, "preferences")),
            source,
            delta,
            prefs,
        )?);
    }
    // The run's snapshot exceeding the recommendation is recorded on the root (L-PREF-WARNINGS).
    if let Some(payload) = warning_payload(wr, compiled, prefs)? {
        events.push(warning_event(
            wr,
            &session,
            &root_scope,
            derive::preference_warning(root.as_str()),
            payload,
        )?);
    }
    if let Some(context) = input.context.clone().filter(|c| !c.is_empty()) {
        events.push(wr.event(
            &session,
            EventScope::Run(run.clone()),
            EventData::ContextSet(ContextSet {
                context_id: ContextId::from_digest(&start_scoped(&root, "context")),
                context,
                source: ContextSource::Initial,
            }),
        )?);
    }
    // A workflow whose first step is a parallel step starts its lanes with it (D168).
    let started = RunStarted {
        workflow_id: workflow.workflow_id.clone(),
        workflow_hash: workflow_hash.clone(),
        workflow_source_kind: workflow.source_kind,
        workflow_source_ref: workflow.source_ref.clone(),
        lane: None,
    };
    events.extend(super::lanes::start_events(
        wr,
        &session,
        &started,
        &run,
        &root,
        compiled,
        &transition.state,
        &initial,
    )?);
    if let Some(trace) = transition.trace_event(TraceId::from_digest(&start_scoped(&root, "trace")))
    {
        events.push(wr.event(
            &session,
            root_scope,
            EventData::DecisionTraceAppended(trace),
        )?);
    }

    let mut output = wr
        .store
        .with_append_gate(&session, SessionIntent::Create, |gate| {
            gate.append(AppendPlan { events })?;
            Ok::<_, crate::store::StoreError>(gate.shared())
        })
        .map_err(|e| e.to_envelope(true))
        .and_then(|loaded| {
            let ctx = NodeContext {
                loaded,
                compiled: std::sync::Arc::new(compiled.clone()),
                workflow_hash,
                state: transition.state.clone(),
            };
            respond_at(
                wr,
                ctx.loaded.events(),
                &session,
                &run,
                &root,
                &ctx,
                &transition.state,
                Vec::new(),
                Moment::Arrival,
                None,
            )
        })?;
    output
        .warnings
        .extend(resolved.warnings.iter().map(|w| w.to_warning()));
    Ok(output)
}

//! Preferences on the execution path (locks §4, §5; D43, D44): what a call requests (a preset
//! and explicit keys), what an ack does to its node's snapshot, and the durable recommendation
//! warning recorded beside every new snapshot that exceeds the pinned recommendation.
//!
//! - A start records the run's snapshot on the root; an ack records a delta only when it changes
//!   the attempted node's snapshot: on the new node when it advances, on the attempted node
//!   (before `advance_recorded`) when it is blocked, so the judgement is explained by the log.
//! - Beside each recorded snapshot that exceeds the recommendation, the same plan appends a
//!   `node_output_appended` on the `artifact` channel referencing a [`PreferenceWarningV1`] in the
//!   artifact CAS (RFC 8785 bytes, derived output id), so replays are byte-identical.
//! - Responses show the warning of the node's snapshot; it is a pure function of that snapshot
//!   and the pinned recommendation, so it always equals the recorded artifact.

use workrail_spec::closed::{OutputChannel, PreferenceSource};
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::event::{
    EffectivePreferences, EventData, EventScope, NodeOutputAppended, OutputPayload,
    PreferenceDelta, PreferencesChanged, SessionEvent,
};
use workrail_spec::ids::{AttemptId, ChangeId, NodeId, OutputId, RunId, SessionId};
use workrail_spec::preferences::{
    ModePreset, PREFERENCE_WARNING_CONTENT_TYPE, PreferenceWarningV1, requested_delta,
};
use workrail_spec::tools::Warning;

use super::Workrail;
use super::derive;
use super::facts::Facts;

/// The delta a `tool` call requests (`preset`, then `preferences` overriding it per key), or a
/// `VALIDATION_ERROR` naming the repeated key. Pure: checked before any I/O.
pub(super) fn requested(
    tool: &str,
    preset: Option<ModePreset>,
    explicit: &[PreferenceDelta],
) -> Result<Vec<PreferenceDelta>, ErrorEnvelope> {
    requested_delta(preset, explicit).map_err(|e| {
        ErrorEnvelope::new(
            ErrorCode::ValidationError,
            format!("{tool}: {e}."),
            "Send each of `autonomy` and `riskPolicy` at most once in `preferences`, e.g. [{\"key\": \"autonomy\", \"value\": \"guided\"}]; or send only `preset` (guided | full_auto_stop_on_user_deps | full_auto_never_stop).",
            Retry::NotRetryable,
        )
        .with_details(serde_json::json!({"duplicateKey": e.0}))
    })
}

/// What an ack does to the preferences of the node it acknowledges.
#[derive(Debug, Clone)]
pub(super) struct AckPreferences {
    /// The node's snapshot before the ack.
    pub before: EffectivePreferences,
    /// The resolved delta the ack sent (possibly empty).
    pub delta: Vec<PreferenceDelta>,
    /// The snapshot the ack is judged under.
    pub effective: EffectivePreferences,
}

impl AckPreferences {
    pub fn new(facts: &Facts<'_>, run: &RunId, node: &NodeId, delta: Vec<PreferenceDelta>) -> Self {
        let before = facts.preferences(run, node);
        Self {
            before,
            effective: before.apply(&delta),
            delta,
        }
    }

    /// Whether the ack changes the snapshot; only then is anything recorded (D43).
    pub fn changes(&self) -> bool {
        !self.delta.is_empty() && self.effective != self.before
    }

    /// The `preferences_changed` to record at `scope` when the ack changes the snapshot.
    pub fn change_event(
        &self,
        wr: &Workrail,
        session: &SessionId,
        scope: &EventScope,
        attempt: &AttemptId,
    ) -> Result<Option<SessionEvent>, ErrorEnvelope> {
        if !self.changes() {
            return Ok(None);
        }
        change_event(
            wr,
            session,
            scope,
            derive::change(attempt),
            PreferenceSource::User,
            self.delta.clone(),
            self.effective,
        )
        .map(Some)
    }

    /// The warning output to record beside the change when the new snapshot exceeds the
    /// recommendation (its artifact is stored now, before the plan that references it).
    pub fn warning(
        &self,
        wr: &Workrail,
        compiled: &CompiledWorkflowSnapshotV1,
        attempt: &AttemptId,
    ) -> Result<Option<(OutputId, OutputPayload)>, ErrorEnvelope> {
        if !self.changes() {
            return Ok(None);
        }
        let id = derive::preference_warning(attempt.as_str());
        warning_payload(wr, compiled, self.effective).map(|p| p.map(|p| (id, p)))
    }

    /// What a blocked attempt records before its `advance_recorded` at the attempted node: the
    /// change that judged it and its warning (D43).
    pub fn blocked_records(
        &self,
        wr: &Workrail,
        session: &SessionId,
        node_scope: &EventScope,
        attempt: &AttemptId,
        compiled: &CompiledWorkflowSnapshotV1,
    ) -> Result<Vec<SessionEvent>, ErrorEnvelope> {
        let mut events = Vec::new();
        events.extend(self.change_event(wr, session, node_scope, attempt)?);
        if let Some((id, payload)) = self.warning(wr, compiled, attempt)? {
            events.push(warning_event(wr, session, node_scope, id, payload)?);
        }
        Ok(events)
    }
}

/// A `preferences_changed` event.
pub(super) fn change_event(
    wr: &Workrail,
    session: &SessionId,
    scope: &EventScope,
    change_id: ChangeId,
    source: PreferenceSource,
    delta: Vec<PreferenceDelta>,
    effective: EffectivePreferences,
) -> Result<SessionEvent, ErrorEnvelope> {
    wr.event(
        session,
        scope.clone(),
        EventData::PreferencesChanged(PreferencesChanged {
            change_id,
            source,
            delta,
            effective,
        }),
    )
}

/// Stores the warning for `effective` under the pinned recommendation in the artifact CAS and
/// returns its `artifact_ref`, or `None` when nothing exceeds the recommendation.
pub(super) fn warning_payload(
    wr: &Workrail,
    compiled: &CompiledWorkflowSnapshotV1,
    effective: EffectivePreferences,
) -> Result<Option<OutputPayload>, ErrorEnvelope> {
    let Some(warning) = PreferenceWarningV1::evaluate(effective, &compiled.body.recommendations)
    else {
        return Ok(None);
    };
    let value = warning
        .to_value()
        .map_err(|e| super::invariant(format!("a preference warning does not serialize: {e}")))?;
    let (sha256, byte_length) = wr
        .store
        .put_artifact(
            value
                .as_object()
                .ok_or_else(|| super::invariant("a preference warning is not a JSON object"))?,
        )
        .map_err(|e| e.to_envelope(true))?;
    Ok(Some(OutputPayload::ArtifactRef {
        sha256,
        content_type: PREFERENCE_WARNING_CONTENT_TYPE.to_owned(),
        byte_length,
    }))
}

/// The `node_output_appended` of a warning at `scope`.
pub(super) fn warning_event(
    wr: &Workrail,
    session: &SessionId,
    scope: &EventScope,
    output_id: OutputId,
    payload: OutputPayload,
) -> Result<SessionEvent, ErrorEnvelope> {
    wr.event(
        session,
        scope.clone(),
        EventData::node_output_appended(NodeOutputAppended {
            output_id,
            supersedes_output_id: None,
            output_channel: OutputChannel::Artifact,
            payload,
        }),
    )
}

/// The response warnings of a node: its snapshot's warning under the pinned recommendation
/// (never blocking; identical to the recorded artifact).
pub(super) fn response_warnings(
    compiled: &CompiledWorkflowSnapshotV1,
    prefs: EffectivePreferences,
) -> Vec<Warning> {
    PreferenceWarningV1::evaluate(prefs, &compiled.body.recommendations)
        .map(Warning::preferences)
        .into_iter()
        .collect()
}

//! Payloads of the locked session event kinds (locks §1 "Event payload contracts").
//!
//! Node and run references live in the envelope `scope`, never inside payloads. Every payload
//! rejects unknown fields (locks §14: unknown fields fail fast unless explicitly optional).

use std::borrow::Cow;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::artifact::{ArtifactError, ArtifactKind};
use crate::blocker::BlockerReport;
use crate::budget::{
    BoundedText, NOTES_MARKDOWN_MAX_BYTES, OBSERVATION_SHORT_STRING_MAX_BYTES, SUMMARY_MAX_BYTES,
    TRACE_MAX_ENTRIES, TRACE_MAX_REFS_PER_ENTRY, TRACE_MAX_TOTAL_BYTES, TRACE_SUMMARY_MAX_BYTES,
    truncate_with_marker,
};
use crate::closed::{
    AdvanceIntent, AdvanceOutcomeKind, AttemptContext, AttemptFailureCode, Autonomy, Capability,
    CapabilityStatus, ClaimValue, ClaimedBy, Confidence, ContextSource, DecisionTraceKind,
    DivergenceReason, EdgeCauseKind, EdgeKind, EnforcementGrade, GapSeverity, NodeKind,
    ObservationKey, OutputChannel, PreferenceKey, PreferenceSource, ProbeResult, ProvenanceKind,
    RiskPolicy, WorkflowSourceKind,
};
use crate::ids::{
    AttemptId, CapObsId, ChangeId, ConditionId, ContextId, DivergenceId, EventId, GapId, LoopId,
    NodeId, OutputId, RunId, Sha256Digest, SnapshotRef, StepId, TraceId, WorkflowHash, WorkflowId,
};
use crate::reason::GapReason;

const EVENT: ArtifactKind = ArtifactKind::SessionEvent;

/// `session_created`: a marker event with an empty payload.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionCreated {}

/// A tagged scalar observation value (locks §1 "observation_recorded").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ObservationValue {
    /// At most 80 bytes.
    ShortString {
        value: BoundedText<OBSERVATION_SHORT_STRING_MAX_BYTES>,
    },
    GitSha1 {
        value: GitSha1,
    },
    Sha256 {
        value: Sha256Digest,
    },
}

impl crate::jcs::CanonicalArtifact for ObservationValue {}

/// A git SHA-1 object name: 40 lowercase hex characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct GitSha1(String);

impl GitSha1 {
    pub fn parse(value: &str) -> Option<Self> {
        (value.len() == 40
            && value
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| Self(value.to_owned()))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for GitSha1 {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Cow::<'de, str>::deserialize(d)?;
        Self::parse(&raw)
            .ok_or_else(|| serde::de::Error::custom("git sha1 must be 40 lowercase hex characters"))
    }
}

impl JsonSchema for GitSha1 {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("GitSha1")
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "pattern": "^[0-9a-f]{40}$"})
    }
}

/// `observation_recorded`: a workspace identity anchor for resume ranking.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObservationRecorded {
    pub key: ObservationKey,
    pub value: ObservationValue,
    pub confidence: Confidence,
}

/// `run_started`: introduces a run pinned to a compiled workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunStarted {
    pub workflow_id: WorkflowId,
    /// The execution authority of the run.
    pub workflow_hash: WorkflowHash,
    pub workflow_source_kind: WorkflowSourceKind,
    /// Opaque; its meaning is scoped by `workflowSourceKind`. Never an absolute path.
    pub workflow_source_ref: String,
    /// Present only on a lane of a parallel step (decision D168): the parent run, the node of
    /// the parallel step that started it, and the lane's index (from 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane: Option<LaneLink>,
}

/// A lane's link to the parallel step that started it (decision D168).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LaneLink {
    pub parent_run_id: RunId,
    pub parent_node_id: NodeId,
    pub lane_index: u32,
}

/// `node_created`: a DAG node linked to its rehydration snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeCreated {
    pub node_kind: NodeKind,
    /// `null` only for the run's root node.
    pub parent_node_id: Option<NodeId>,
    /// Must equal the run's pinned workflowHash.
    pub workflow_hash: WorkflowHash,
    pub snapshot_ref: SnapshotRef,
}

/// Why an edge was created, with the event that explains it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EdgeCause {
    pub kind: EdgeCauseKind,
    pub event_id: EventId,
}

/// `edge_created`: a DAG edge (advancement or checkpoint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EdgeCreated {
    pub edge_kind: EdgeKind,
    pub from_node_id: NodeId,
    pub to_node_id: NodeId,
    pub cause: EdgeCause,
}

/// The outcome of an ack attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum AdvanceOutcome {
    #[serde(rename_all = "camelCase")]
    Blocked {
        blockers: BlockerReport,
        /// The digest of the `output` the blocked call sent ([`crate::tools::OutputInput::digest`])
        /// when it carried work, so a later call with the same ackToken can tell whether it
        /// resends that output or new work (decision D163). Nothing of the output itself is
        /// recorded: the attempt was blocked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output_digest: Option<crate::ids::Sha256Digest>,
    },
    #[serde(rename_all = "camelCase")]
    Advanced { to_node_id: NodeId },
}

impl AdvanceOutcome {
    /// The outcome's `kind` tag.
    pub const fn kind(&self) -> AdvanceOutcomeKind {
        match self {
            Self::Blocked { .. } => AdvanceOutcomeKind::Blocked,
            Self::Advanced { .. } => AdvanceOutcomeKind::Advanced,
        }
    }
}

/// `advance_recorded`: the durable record of an ack attempt (blocked or advanced).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AdvanceRecorded {
    pub attempt_id: AttemptId,
    pub intent: AdvanceIntent,
    pub outcome: AdvanceOutcome,
}

/// The payload of an output (locks §1 "node_output_appended payload").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "payloadKind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum OutputPayload {
    /// Per-step fresh notes (locks §18.1 DECISION), at most 4096 bytes.
    Notes {
        notes_markdown: BoundedText<NOTES_MARKDOWN_MAX_BYTES>,
    },
    /// A reference to an artifact in the durable artifact store.
    ArtifactRef {
        sha256: Sha256Digest,
        content_type: String,
        byte_length: u64,
    },
}

impl OutputPayload {
    /// Notes truncated to the locked budget with the canonical marker.
    pub fn notes(text: &str) -> Self {
        Self::Notes {
            notes_markdown: BoundedText::truncating(text),
        }
    }
}

/// `node_output_appended`: the single durable write path for progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeOutputAppended {
    pub output_id: OutputId,
    /// Node- and channel-scoped correction linkage (checked against history by projections).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supersedes_output_id: Option<OutputId>,
    pub output_channel: OutputChannel,
    pub payload: OutputPayload,
}

/// One preference change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "key", content = "value", deny_unknown_fields)]
pub enum PreferenceDelta {
    #[serde(rename = "autonomy")]
    Autonomy(Autonomy),
    #[serde(rename = "riskPolicy")]
    RiskPolicy(RiskPolicy),
}

impl PreferenceDelta {
    pub fn key(self) -> PreferenceKey {
        match self {
            Self::Autonomy(_) => PreferenceKey::Autonomy,
            Self::RiskPolicy(_) => PreferenceKey::RiskPolicy,
        }
    }
}

/// A full effective preference snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EffectivePreferences {
    pub autonomy: Autonomy,
    pub risk_policy: RiskPolicy,
}

impl EffectivePreferences {
    /// Guided preset (locks §4 "Mode presets").
    pub const GUIDED: Self = Self {
        autonomy: Autonomy::Guided,
        risk_policy: RiskPolicy::Conservative,
    };
    /// Full-auto, stop on user deps preset.
    pub const FULL_AUTO_STOP_ON_USER_DEPS: Self = Self {
        autonomy: Autonomy::FullAutoStopOnUserDeps,
        risk_policy: RiskPolicy::Balanced,
    };
    /// Full-auto, never stop preset.
    pub const FULL_AUTO_NEVER_STOP: Self = Self {
        autonomy: Autonomy::FullAutoNeverStop,
        risk_policy: RiskPolicy::Conservative,
    };

    /// Applies a delta.
    pub fn apply(mut self, delta: &[PreferenceDelta]) -> Self {
        for d in delta {
            match *d {
                PreferenceDelta::Autonomy(a) => self.autonomy = a,
                PreferenceDelta::RiskPolicy(r) => self.risk_policy = r,
            }
        }
        self
    }
}

/// `preferences_changed`: a node-attached delta and the effective snapshot after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreferencesChanged {
    pub change_id: ChangeId,
    pub source: PreferenceSource,
    /// Non-empty, no duplicate keys.
    pub delta: Vec<PreferenceDelta>,
    pub effective: EffectivePreferences,
}

/// Details of a capability observation's provenance, by kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProvenanceDetail {
    ProbeStep {
        probe_template_id: String,
        probe_step_id: StepId,
        result: ProbeResult,
    },
    AttemptedUse {
        attempt_context: AttemptContext,
        result: ProbeResult,
        /// Required iff `result == failure`.
        failure_code: Option<AttemptFailureCode>,
    },
    ManualClaim {
        claimed_by: ClaimedBy,
        claim: ClaimValue,
    },
}

impl ProvenanceDetail {
    pub fn kind(&self) -> ProvenanceKind {
        match self {
            Self::ProbeStep { .. } => ProvenanceKind::ProbeStep,
            Self::AttemptedUse { .. } => ProvenanceKind::AttemptedUse,
            Self::ManualClaim { .. } => ProvenanceKind::ManualClaim,
        }
    }
}

#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ProbeStepDetail {
    probe_template_id: String,
    probe_step_id: StepId,
    result: ProbeResult,
}

#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AttemptedUseDetail {
    attempt_context: AttemptContext,
    result: ProbeResult,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    failure_code: Option<AttemptFailureCode>,
}

#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ManualClaimDetail {
    claimed_by: ClaimedBy,
    claim: ClaimValue,
}

/// Closed-set provenance: `{kind, enforcementGrade, detail}`; the grade is derived from the kind
/// and must match it (locks §1 "capability_observed").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    pub detail: ProvenanceDetail,
}

impl Provenance {
    pub fn enforcement_grade(&self) -> EnforcementGrade {
        self.detail.kind().enforcement_grade()
    }

    fn to_value(&self) -> Result<Value, serde_json::Error> {
        let detail = match &self.detail {
            ProvenanceDetail::ProbeStep {
                probe_template_id,
                probe_step_id,
                result,
            } => serde_json::to_value(ProbeStepDetail {
                probe_template_id: probe_template_id.clone(),
                probe_step_id: probe_step_id.clone(),
                result: *result,
            })?,
            ProvenanceDetail::AttemptedUse {
                attempt_context,
                result,
                failure_code,
            } => serde_json::to_value(AttemptedUseDetail {
                attempt_context: *attempt_context,
                result: *result,
                failure_code: *failure_code,
            })?,
            ProvenanceDetail::ManualClaim { claimed_by, claim } => {
                serde_json::to_value(ManualClaimDetail {
                    claimed_by: *claimed_by,
                    claim: *claim,
                })?
            }
        };
        Ok(serde_json::json!({
            "kind": self.detail.kind(),
            "enforcementGrade": self.enforcement_grade(),
            "detail": detail,
        }))
    }

    fn from_value(value: Value) -> Result<Self, ArtifactError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        struct Wire {
            kind: ProvenanceKind,
            enforcement_grade: EnforcementGrade,
            detail: Value,
        }
        let wire: Wire = crate::artifact::from_value(EVENT, "provenance", value)?;
        if wire.enforcement_grade != wire.kind.enforcement_grade() {
            return Err(ArtifactError::invariant(
                EVENT,
                "provenance.enforcementGrade derived from kind",
                format!(
                    "kind {} has grade {}, got {}",
                    wire.kind,
                    wire.kind.enforcement_grade(),
                    wire.enforcement_grade
                ),
            ));
        }
        let detail = match wire.kind {
            ProvenanceKind::ProbeStep => {
                let d: ProbeStepDetail =
                    crate::artifact::from_value(EVENT, "provenance.detail", wire.detail)?;
                ProvenanceDetail::ProbeStep {
                    probe_template_id: d.probe_template_id,
                    probe_step_id: d.probe_step_id,
                    result: d.result,
                }
            }
            ProvenanceKind::AttemptedUse => {
                let d: AttemptedUseDetail =
                    crate::artifact::from_value(EVENT, "provenance.detail", wire.detail)?;
                if (d.result == ProbeResult::Failure) != d.failure_code.is_some() {
                    return Err(ArtifactError::invariant(
                        EVENT,
                        "attempted_use.failureCode iff result=failure",
                        format!(
                            "result {} with failureCode {:?}",
                            d.result,
                            d.failure_code.map(|c| c.as_str())
                        ),
                    ));
                }
                ProvenanceDetail::AttemptedUse {
                    attempt_context: d.attempt_context,
                    result: d.result,
                    failure_code: d.failure_code,
                }
            }
            ProvenanceKind::ManualClaim => {
                let d: ManualClaimDetail =
                    crate::artifact::from_value(EVENT, "provenance.detail", wire.detail)?;
                ProvenanceDetail::ManualClaim {
                    claimed_by: d.claimed_by,
                    claim: d.claim,
                }
            }
        };
        Ok(Self { detail })
    }
}

crate::artifact::artifact_serde!(Provenance);

impl JsonSchema for Provenance {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("Provenance")
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let probe = generator.subschema_for::<ProbeStepDetail>();
        let attempted = generator.subschema_for::<AttemptedUseDetail>();
        let manual = generator.subschema_for::<ManualClaimDetail>();
        let variant = |kind: &str, grade: &str, detail: schemars::Schema| {
            serde_json::json!({
                "type": "object",
                "properties": {
                    "kind": {"const": kind},
                    "enforcementGrade": {"const": grade},
                    "detail": detail,
                },
                "required": ["kind", "enforcementGrade", "detail"],
                "additionalProperties": false,
            })
        };
        schemars::json_schema!({
            "oneOf": [
                variant("probe_step", "strong", probe),
                variant("attempted_use", "strong", attempted),
                variant("manual_claim", "weak", manual),
            ]
        })
    }
}

/// `capability_observed`: observed status with provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CapabilityObserved {
    pub cap_obs_id: CapObsId,
    pub capability: Capability,
    pub status: CapabilityStatus,
    pub provenance: Provenance,
}

/// Gap resolution is linkage, never mutation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum GapResolution {
    Unresolved,
    #[serde(rename_all = "camelCase")]
    Resolves {
        resolves_gap_id: GapId,
    },
}

/// Evidence a gap points at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum EvidenceRef {
    Event { event_id: EventId },
    Output { output_id: OutputId },
}

/// `gap_recorded`: an immutable disclosure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GapRecorded {
    pub gap_id: GapId,
    pub severity: GapSeverity,
    pub reason: GapReason,
    pub summary: BoundedText<SUMMARY_MAX_BYTES>,
    pub resolution: GapResolution,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence_refs: Option<Vec<EvidenceRef>>,
    /// Structured details where the reason's lock asks for them (e.g. a loop limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<crate::blocker::ReasonDetails>,
}

/// `divergence_recorded`: intentional off-script behaviour.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DivergenceRecorded {
    pub divergence_id: DivergenceId,
    pub reason: DivergenceReason,
    /// Non-empty, bounded.
    pub summary: BoundedText<SUMMARY_MAX_BYTES>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub related_step_id: Option<StepId>,
}

/// A typed decision trace reference (closed union by `kind`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum TraceRef {
    StepId {
        step_id: StepId,
    },
    LoopId {
        loop_id: LoopId,
    },
    ConditionId {
        condition_id: ConditionId,
    },
    /// A 0-based loop iteration.
    Iteration {
        value: u32,
    },
}

/// One decision trace entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TraceEntry {
    pub kind: DecisionTraceKind,
    // The summary and the refs are shared values: a loop's traces repeat the same ones every
    // iteration, and a parsed log holds each once (decision D224, `IdPool`).
    /// At most 512 bytes (truncated with the marker when built through `bounded`).
    pub summary: Arc<str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refs: Option<Arc<[TraceRef]>>,
}

/// `decision_trace_appended`: a bounded "why" trace; never required for correctness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DecisionTraceAppended {
    pub trace_id: TraceId,
    pub entries: Vec<TraceEntry>,
}

impl DecisionTraceAppended {
    /// Builds a trace within the locked budgets: entries past 25 and refs past 10 are dropped from
    /// the end; each summary is truncated to 512 bytes with the marker; if the event would still
    /// exceed 8192 bytes even with minimal summaries, trailing entries are dropped (never out of
    /// order); then summaries are truncated further from the last entry backwards until it fits.
    pub fn bounded(trace_id: TraceId, mut entries: Vec<TraceEntry>) -> Self {
        entries.truncate(TRACE_MAX_ENTRIES);
        for entry in &mut entries {
            if entry.summary.len() > TRACE_SUMMARY_MAX_BYTES {
                entry.summary = shorten(&entry.summary, TRACE_SUMMARY_MAX_BYTES).into();
            }
            if let Some(refs) = &mut entry.refs
                && refs.len() > TRACE_MAX_REFS_PER_ENTRY
            {
                *refs = refs[..TRACE_MAX_REFS_PER_ENTRY].into();
            }
        }
        let mut trace = Self { trace_id, entries };
        let marker_len = crate::budget::TRUNCATION_MARKER.len();
        // Keep the longest prefix of entries that can fit once summaries are shortened.
        while trace.entries.len() > 1 {
            let mut minimal = trace.clone();
            for entry in &mut minimal.entries {
                if entry.summary.len() > marker_len {
                    entry.summary = shorten(&entry.summary, marker_len).into();
                }
            }
            if minimal.total_bytes() <= TRACE_MAX_TOTAL_BYTES {
                break;
            }
            trace.entries.pop();
        }
        // Then shorten summaries from the last entry backwards until the event fits.
        let mut index = trace.entries.len();
        while trace.total_bytes() > TRACE_MAX_TOTAL_BYTES && index > 0 {
            index -= 1;
            let over = trace.total_bytes() - TRACE_MAX_TOTAL_BYTES;
            let summary = &trace.entries[index].summary;
            let target = summary.len().saturating_sub(over).max(marker_len);
            if target < summary.len() {
                trace.entries[index].summary = shorten(summary, target).into();
            }
        }
        trace
    }

    /// The measured size: JCS bytes of the payload.
    pub fn total_bytes(&self) -> usize {
        crate::jcs::to_canonical_bytes(self).map_or(usize::MAX, |b| b.len())
    }

    pub(crate) fn check(&self) -> Result<(), ArtifactError> {
        let rule = "decision trace budgets";
        if self.entries.is_empty() || self.entries.len() > TRACE_MAX_ENTRIES {
            return Err(ArtifactError::invariant(
                EVENT,
                rule,
                format!(
                    "1 to {TRACE_MAX_ENTRIES} entries, got {}",
                    self.entries.len()
                ),
            ));
        }
        for (i, entry) in self.entries.iter().enumerate() {
            if entry.summary.len() > TRACE_SUMMARY_MAX_BYTES {
                return Err(ArtifactError::invariant(
                    EVENT,
                    rule,
                    format!(
                        "entries[{i}].summary is {} bytes, max {TRACE_SUMMARY_MAX_BYTES}",
                        entry.summary.len()
                    ),
                ));
            }
            if entry
                .refs
                .as_ref()
                .is_some_and(|r| r.len() > TRACE_MAX_REFS_PER_ENTRY)
            {
                return Err(ArtifactError::invariant(
                    EVENT,
                    rule,
                    format!("entries[{i}].refs holds more than {TRACE_MAX_REFS_PER_ENTRY} refs"),
                ));
            }
        }
        let total = self.total_bytes();
        if total > TRACE_MAX_TOTAL_BYTES {
            return Err(ArtifactError::invariant(
                EVENT,
                rule,
                format!("event data is {total} JCS bytes, max {TRACE_MAX_TOTAL_BYTES}"),
            ));
        }
        Ok(())
    }
}

fn shorten(text: &str, max: usize) -> String {
    truncate_with_marker(text, max).map_or_else(
        |_| text[..crate::budget::floor_char_boundary(text, max)].to_owned(),
        |t| t.text.into_owned(),
    )
}

/// `context_set`: the run's full effective context after a merge (locks §18.2 DECISION).
///
/// **Decision.** Each record stores the complete merged context (not only the delta), so the
/// latest record of a run is its current context without replaying merges.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContextSet {
    pub context_id: ContextId,
    pub context: Map<String, Value>,
    pub source: ContextSource,
}

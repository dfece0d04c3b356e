//! The session event envelope and the closed set of event kinds (locks §1 "Minimal internal
//! event union", "Event payload contracts"; §18.2 DECISION adds `context_set`).
//!
//! Wire shape: `{v, eventId, eventIndex, sessionId, kind, scope?, dedupeKey, data}`. The scope
//! rules per kind and the dedupeKey recipe per kind are checked on construction and on parse,
//! so no invalid event can be built or read.

mod payload;

use std::borrow::Cow;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use payload::*;

use crate::artifact::{self, ArtifactError, ArtifactKind};
use crate::closed::closed_set;
use crate::dedupe::DedupeKey;
use crate::ids::{EventId, EventIndex, NodeId, RunId, SessionId};
use crate::reason::GapReason;

/// The only session event schema version this build reads and writes.
pub const SESSION_EVENT_VERSION: u64 = 1;

const EVENT: ArtifactKind = ArtifactKind::SessionEvent;

closed_set!(
    /// The closed set of session event kinds.
    EventKind {
        SessionCreated = "session_created",
        ObservationRecorded = "observation_recorded",
        RunStarted = "run_started",
        NodeCreated = "node_created",
        EdgeCreated = "edge_created",
        AdvanceRecorded = "advance_recorded",
        NodeOutputAppended = "node_output_appended",
        PreferencesChanged = "preferences_changed",
        CapabilityObserved = "capability_observed",
        GapRecorded = "gap_recorded",
        DivergenceRecorded = "divergence_recorded",
        DecisionTraceAppended = "decision_trace_appended",
        ContextSet = "context_set",
    }
);

/// Which scopes a kind admits (locks §1 "Envelope requirements").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeRule {
    /// `scope` must be absent.
    SessionOnly,
    /// `scope.runId` present, `scope.nodeId` absent.
    RunOnly,
    /// `scope.runId` and `scope.nodeId` present.
    Node,
    /// Session-first: absent, or node-scoped (rare, high-signal).
    SessionOrNode,
}

impl EventKind {
    pub const fn scope_rule(self) -> ScopeRule {
        match self {
            Self::SessionCreated => ScopeRule::SessionOnly,
            Self::ObservationRecorded => ScopeRule::SessionOrNode,
            Self::RunStarted | Self::EdgeCreated | Self::ContextSet => ScopeRule::RunOnly,
            Self::NodeCreated
            | Self::AdvanceRecorded
            | Self::NodeOutputAppended
            | Self::PreferencesChanged
            | Self::CapabilityObserved
            | Self::GapRecorded
            | Self::DivergenceRecorded
            | Self::DecisionTraceAppended => ScopeRule::Node,
        }
    }
}

/// The scope of an event: session-wide, a run, or a node of a run.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EventScope {
    Session,
    Run(RunId),
    Node(RunId, NodeId),
}

impl EventScope {
    pub fn run_id(&self) -> Option<&RunId> {
        match self {
            Self::Session => None,
            Self::Run(run) | Self::Node(run, _) => Some(run),
        }
    }

    pub fn node_id(&self) -> Option<&NodeId> {
        match self {
            Self::Node(_, node) => Some(node),
            _ => None,
        }
    }

    fn satisfies(&self, rule: ScopeRule) -> bool {
        matches!(
            (rule, self),
            (ScopeRule::SessionOnly, Self::Session)
                | (ScopeRule::RunOnly, Self::Run(_))
                | (ScopeRule::Node, Self::Node(..))
                | (ScopeRule::SessionOrNode, Self::Session | Self::Node(..))
        )
    }

    fn to_wire(&self) -> Option<ScopeWire> {
        match self {
            Self::Session => None,
            Self::Run(run) => Some(ScopeWire {
                run_id: run.clone(),
                node_id: None,
            }),
            Self::Node(run, node) => Some(ScopeWire {
                run_id: run.clone(),
                node_id: Some(node.clone()),
            }),
        }
    }
}

/// Wire form of `scope`: `runId` is required whenever `scope` is present.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ScopeWire {
    run_id: RunId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    node_id: Option<NodeId>,
}

/// The typed payload of an event; the variant determines `kind`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum EventData {
    SessionCreated(SessionCreated),
    ObservationRecorded(ObservationRecorded),
    /// Boxed, as `GapRecorded`: the two largest payloads, rare in a log, would otherwise set
    /// the size of every event (decision D210).
    RunStarted(Box<RunStarted>),
    NodeCreated(NodeCreated),
    EdgeCreated(EdgeCreated),
    AdvanceRecorded(AdvanceRecorded),
    /// Shared, not boxed: a projection keeps each node's current outputs, and sharing them with
    /// the log holds each output's text once (decision D210).
    NodeOutputAppended(std::sync::Arc<NodeOutputAppended>),
    PreferencesChanged(PreferencesChanged),
    CapabilityObserved(CapabilityObserved),
    GapRecorded(Box<GapRecorded>),
    DivergenceRecorded(DivergenceRecorded),
    DecisionTraceAppended(DecisionTraceAppended),
    ContextSet(ContextSet),
}

impl EventData {
    /// A `run_started` payload (boxed in the enum).
    pub fn run_started(started: RunStarted) -> Self {
        Self::RunStarted(Box::new(started))
    }

    /// A `node_output_appended` payload (shared in the enum).
    pub fn node_output_appended(output: NodeOutputAppended) -> Self {
        Self::NodeOutputAppended(std::sync::Arc::new(output))
    }

    /// A `gap_recorded` payload (boxed in the enum).
    pub fn gap_recorded(gap: GapRecorded) -> Self {
        Self::GapRecorded(Box::new(gap))
    }

    pub fn kind(&self) -> EventKind {
        match self {
            Self::SessionCreated(_) => EventKind::SessionCreated,
            Self::ObservationRecorded(_) => EventKind::ObservationRecorded,
            Self::RunStarted(_) => EventKind::RunStarted,
            Self::NodeCreated(_) => EventKind::NodeCreated,
            Self::EdgeCreated(_) => EventKind::EdgeCreated,
            Self::AdvanceRecorded(_) => EventKind::AdvanceRecorded,
            Self::NodeOutputAppended(_) => EventKind::NodeOutputAppended,
            Self::PreferencesChanged(_) => EventKind::PreferencesChanged,
            Self::CapabilityObserved(_) => EventKind::CapabilityObserved,
            Self::GapRecorded(_) => EventKind::GapRecorded,
            Self::DivergenceRecorded(_) => EventKind::DivergenceRecorded,
            Self::DecisionTraceAppended(_) => EventKind::DecisionTraceAppended,
            Self::ContextSet(_) => EventKind::ContextSet,
        }
    }

    /// The locked dedupeKey recipe for this payload in `scope` (locks §1 "Initial v2 recipes";
    /// `context_set` follows the same pattern, keyed by run and contextId). Built only from
    /// stable identifiers; observation values enter as the hex SHA-256 of their JCS form.
    pub fn dedupe_key(
        &self,
        session: &SessionId,
        scope: &EventScope,
    ) -> Result<DedupeKey, ArtifactError> {
        let kind = self.kind();
        let missing = |what: &str| {
            ArtifactError::invariant(
                EVENT,
                "scope rules",
                format!("{kind} needs scope.{what} for its dedupeKey"),
            )
        };
        let needs_run = matches!(
            self,
            Self::RunStarted(_) | Self::NodeCreated(_) | Self::EdgeCreated(_) | Self::ContextSet(_)
        );
        let needs_node = matches!(self, Self::NodeCreated(_) | Self::AdvanceRecorded(_));
        if needs_run && scope.run_id().is_none() {
            return Err(missing("runId"));
        }
        if needs_node && scope.node_id().is_none() {
            return Err(missing("nodeId"));
        }
        let observed = match self {
            Self::ObservationRecorded(o) => Some(
                crate::jcs::jcs_digest(&o.value)
                    .map_err(|e| ArtifactError::malformed(EVENT, e))?
                    .0,
            ),
            _ => None,
        };
        DedupeKey::parse(&self.key_text(session, scope, observed.as_ref()))
            .map_err(|e| ArtifactError::invariant(EVENT, "dedupeKey pattern", e))
    }

    /// The recipe's text: `<kind>:<part>:<part>...`. Unchecked: [`EventData::dedupe_key`]
    /// checks it, and an event's fields never change after that check (decision D210).
    /// `observed` is the digest of an observation's value (other kinds ignore it).
    fn key_text(
        &self,
        session: &SessionId,
        scope: &EventScope,
        observed: Option<&crate::ids::Sha256Digest>,
    ) -> String {
        let run = scope.run_id().map_or("", RunId::as_str);
        let node = scope.node_id().map_or("", NodeId::as_str);
        let mut key = String::with_capacity(96);
        key.push_str(self.kind().as_str());
        let mut push = |part: &str| {
            key.push(':');
            key.push_str(part);
        };
        push(session.as_str());
        match self {
            Self::SessionCreated(_) => {}
            Self::ObservationRecorded(o) => {
                push(o.key.as_str());
                push(observed.map_or("", |d| d.hex()));
            }
            Self::RunStarted(_) => push(run),
            Self::NodeCreated(_) => {
                push(run);
                push(node);
            }
            Self::EdgeCreated(e) => {
                push(run);
                push(&format!("{}->{}", e.from_node_id, e.to_node_id));
                push(e.edge_kind.as_str());
            }
            Self::AdvanceRecorded(a) => {
                push(node);
                push(a.attempt_id.as_str());
            }
            Self::NodeOutputAppended(o) => push(o.output_id.as_str()),
            Self::PreferencesChanged(p) => push(p.change_id.as_str()),
            Self::CapabilityObserved(c) => push(c.cap_obs_id.as_str()),
            Self::GapRecorded(g) => push(g.gap_id.as_str()),
            Self::DivergenceRecorded(d) => push(d.divergence_id.as_str()),
            Self::DecisionTraceAppended(t) => push(t.trace_id.as_str()),
            Self::ContextSet(c) => {
                push(run);
                push(c.context_id.as_str());
            }
        }
        key
    }

    /// Payload invariants that a single event can check on its own.
    fn check(&self) -> Result<(), ArtifactError> {
        match self {
            Self::EdgeCreated(e) => {
                if !e.cause.kind.allowed_for(e.edge_kind) {
                    return Err(ArtifactError::invariant(
                        EVENT,
                        "edge_created cause allowed for edgeKind",
                        format!(
                            "edgeKind {} cannot have cause {}",
                            e.edge_kind, e.cause.kind
                        ),
                    ));
                }
                if e.from_node_id == e.to_node_id {
                    return Err(ArtifactError::invariant(
                        EVENT,
                        "edge_created links two distinct nodes",
                        format!("fromNodeId and toNodeId are both {}", e.from_node_id),
                    ));
                }
            }
            Self::PreferencesChanged(p) => {
                if p.delta.is_empty() {
                    return Err(ArtifactError::invariant(
                        EVENT,
                        "preferences_changed.delta non-empty",
                        "delta is empty",
                    ));
                }
                let mut keys: Vec<_> = p.delta.iter().map(|d| d.key()).collect();
                keys.sort();
                keys.dedup();
                if keys.len() != p.delta.len() {
                    return Err(ArtifactError::invariant(
                        EVENT,
                        "preferences_changed.delta has no duplicate keys",
                        "a key appears twice in delta",
                    ));
                }
                if p.effective.apply(&p.delta) != p.effective {
                    return Err(ArtifactError::invariant(
                        EVENT,
                        "preferences_changed.effective reflects delta",
                        "effective disagrees with a delta value",
                    ));
                }
            }
            Self::GapRecorded(g) => {
                if g.summary.as_str().is_empty() {
                    return Err(ArtifactError::invariant(
                        EVENT,
                        "gap_recorded.summary non-empty",
                        "summary is empty",
                    ));
                }
                if let GapResolution::Resolves { resolves_gap_id } = &g.resolution
                    && *resolves_gap_id == g.gap_id
                {
                    return Err(ArtifactError::invariant(
                        EVENT,
                        "gap resolution links another gap",
                        "a gap cannot resolve itself",
                    ));
                }
                // Keep the reason well-typed: the category/detail pair is closed by construction.
                let _: GapReason = g.reason;
            }
            Self::DivergenceRecorded(d) if d.summary.as_str().is_empty() => {
                return Err(ArtifactError::invariant(
                    EVENT,
                    "divergence_recorded.summary non-empty",
                    "summary is empty",
                ));
            }
            Self::NodeOutputAppended(o) => {
                if let OutputPayload::ArtifactRef {
                    content_type,
                    byte_length,
                    ..
                } = &o.payload
                {
                    if content_type.is_empty() || content_type.len() > 255 {
                        return Err(ArtifactError::invariant(
                            EVENT,
                            "artifact_ref.contentType is 1 to 255 bytes",
                            format!("contentType is {} bytes", content_type.len()),
                        ));
                    }
                    if *byte_length > crate::ids::MAX_JSON_SAFE_INTEGER {
                        return Err(ArtifactError::invariant(
                            EVENT,
                            "integers are JCS-safe",
                            format!("byteLength {byte_length} exceeds 2^53-1"),
                        ));
                    }
                }
                if o.supersedes_output_id.as_ref() == Some(&o.output_id) {
                    return Err(ArtifactError::invariant(
                        EVENT,
                        "supersede links an earlier output",
                        "an output cannot supersede itself",
                    ));
                }
            }
            Self::DecisionTraceAppended(t) => t.check()?,
            Self::ContextSet(c) => crate::context::check_context_map(&c.context)
                .map_err(|e| ArtifactError::invariant(EVENT, "context budget", e))?,
            _ => {}
        }
        Ok(())
    }

    fn from_kind_and_value(kind: EventKind, data: Value) -> Result<Self, ArtifactError> {
        let context = format!("data of {kind}");
        let ctx = context.as_str();
        Ok(match kind {
            EventKind::SessionCreated => {
                Self::SessionCreated(artifact::from_value(EVENT, ctx, data)?)
            }
            EventKind::ObservationRecorded => {
                Self::ObservationRecorded(artifact::from_value(EVENT, ctx, data)?)
            }
            EventKind::RunStarted => Self::RunStarted(artifact::from_value(EVENT, ctx, data)?),
            EventKind::NodeCreated => Self::NodeCreated(artifact::from_value(EVENT, ctx, data)?),
            EventKind::EdgeCreated => Self::EdgeCreated(artifact::from_value(EVENT, ctx, data)?),
            EventKind::AdvanceRecorded => {
                Self::AdvanceRecorded(artifact::from_value(EVENT, ctx, data)?)
            }
            EventKind::NodeOutputAppended => {
                Self::NodeOutputAppended(artifact::from_value(EVENT, ctx, data)?)
            }
            EventKind::PreferencesChanged => {
                Self::PreferencesChanged(artifact::from_value(EVENT, ctx, data)?)
            }
            EventKind::CapabilityObserved => {
                Self::CapabilityObserved(artifact::from_value(EVENT, ctx, data)?)
            }
            EventKind::GapRecorded => Self::GapRecorded(artifact::from_value(EVENT, ctx, data)?),
            EventKind::DivergenceRecorded => {
                Self::DivergenceRecorded(artifact::from_value(EVENT, ctx, data)?)
            }
            EventKind::DecisionTraceAppended => {
                Self::DecisionTraceAppended(artifact::from_value(EVENT, ctx, data)?)
            }
            EventKind::ContextSet => Self::ContextSet(artifact::from_value(EVENT, ctx, data)?),
        })
    }
}

/// The ids a parsed log repeats, held once (see [`SessionEvent::share_ids`]).
#[derive(Debug, Clone, Default)]
pub struct IdPool {
    pub sessions: crate::ids::Shared<SessionId>,
    pub runs: crate::ids::Shared<RunId>,
    pub nodes: crate::ids::Shared<NodeId>,
    pub workflows: crate::ids::Shared<crate::ids::WorkflowHash>,
    /// The step, loop and condition ids decision traces name (a workflow's few, repeated in
    /// every trace).
    pub steps: crate::ids::Shared<crate::ids::StepId>,
    pub loops: crate::ids::Shared<crate::ids::LoopId>,
    pub conditions: crate::ids::Shared<crate::ids::ConditionId>,
    /// Decision trace summaries and refs: a loop's iterations repeat them (decision D224).
    pub trace_summaries: crate::ids::Shared<std::sync::Arc<str>>,
    pub trace_refs: crate::ids::Shared<std::sync::Arc<[TraceRef]>>,
}

/// A validated session event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEvent {
    event_id: EventId,
    event_index: EventIndex,
    session_id: SessionId,
    scope: EventScope,
    /// The dedupeKey of an observation (its recipe hashes the observed value, which is too
    /// costly to repeat); every other kind's key is derived from its fields when asked for
    /// (decision D210), so a loaded log does not hold each key's text.
    observation_key: Option<Box<DedupeKey>>,
    data: EventData,
}

impl crate::jcs::CanonicalArtifact for SessionEvent {}

impl SessionEvent {
    /// Builds an event: checks the scope rule and payload invariants, derives the dedupeKey.
    pub fn new(
        event_id: EventId,
        event_index: EventIndex,
        session_id: SessionId,
        scope: EventScope,
        data: EventData,
    ) -> Result<Self, ArtifactError> {
        let kind = data.kind();
        if !scope.satisfies(kind.scope_rule()) {
            return Err(ArtifactError::invariant(
                EVENT,
                "scope rules",
                format!(
                    "{kind} requires {:?} scope, got {scope:?}",
                    kind.scope_rule()
                ),
            ));
        }
        data.check()?;
        let dedupe_key = data.dedupe_key(&session_id, &scope)?;
        let observation_key =
            matches!(data, EventData::ObservationRecorded(_)).then(|| Box::new(dedupe_key));
        Ok(Self {
            event_id,
            event_index,
            session_id,
            scope,
            observation_key,
            data,
        })
    }

    pub fn event_id(&self) -> &EventId {
        &self.event_id
    }
    pub fn event_index(&self) -> EventIndex {
        self.event_index
    }
    pub fn session_id(&self) -> &SessionId {
        &self.session_id
    }
    pub fn scope(&self) -> &EventScope {
        &self.scope
    }
    /// The event's dedupeKey. Derived from the event's fields by the recipe `new` checked
    /// them with (the fields never change afterwards), so it is the key `new` validated.
    pub fn dedupe_key(&self) -> DedupeKey {
        match &self.observation_key {
            Some(key) => DedupeKey::clone(key),
            None => DedupeKey::trusted(self.data.key_text(&self.session_id, &self.scope, None)),
        }
    }
    pub fn data(&self) -> &EventData {
        &self.data
    }
    pub fn kind(&self) -> EventKind {
        self.data.kind()
    }

    /// Points this event's session id, scope ids and the ids and digests of its payload's
    /// links at equal values held by `pool`, so a parsed log holds each repeated id once.
    /// Nothing observable changes: the values are equal.
    pub fn share_ids(&mut self, pool: &mut IdPool) {
        pool.sessions.share(&mut self.session_id);
        match &mut self.scope {
            EventScope::Session => {}
            EventScope::Run(run) => pool.runs.share(run),
            EventScope::Node(run, node) => {
                pool.runs.share(run);
                pool.nodes.share(node);
            }
        }
        match &mut self.data {
            EventData::NodeCreated(n) => {
                if let Some(parent) = &mut n.parent_node_id {
                    pool.nodes.share(parent);
                }
                pool.workflows.share(&mut n.workflow_hash);
            }
            EventData::EdgeCreated(e) => {
                pool.nodes.share(&mut e.from_node_id);
                pool.nodes.share(&mut e.to_node_id);
            }
            EventData::AdvanceRecorded(a) => {
                if let AdvanceOutcome::Advanced { to_node_id } = &mut a.outcome {
                    pool.nodes.share(to_node_id);
                }
            }
            EventData::DecisionTraceAppended(t) => {
                for entry in &mut t.entries {
                    pool.trace_summaries.share(&mut entry.summary);
                    let Some(refs) = &mut entry.refs else {
                        continue;
                    };
                    if pool.trace_refs.share_held(refs) {
                        continue;
                    }
                    // Refs not seen before join the pool. Their ids point at the pool's when
                    // this event alone holds them (just parsed or built); refs other events
                    // share were pooled so before, and are kept as they are.
                    if let Some(owned) = std::sync::Arc::get_mut(refs) {
                        for reference in owned {
                            match reference {
                                TraceRef::StepId { step_id } => pool.steps.share(step_id),
                                TraceRef::LoopId { loop_id } => pool.loops.share(loop_id),
                                TraceRef::ConditionId { condition_id } => {
                                    pool.conditions.share(condition_id)
                                }
                                TraceRef::Iteration { .. } => {}
                            }
                        }
                    }
                    pool.trace_refs.share(refs);
                }
            }
            _ => {}
        }
    }

    /// The same event built again under `session_id` (its dedupeKey derived again), consuming
    /// this one so nothing is copied (an import under a new session id).
    pub fn into_session(self, session_id: SessionId) -> Result<Self, ArtifactError> {
        Self::new(
            self.event_id,
            self.event_index,
            session_id,
            self.scope,
            self.data,
        )
    }

    /// The same event at another index (plans are built before their indices are known).
    pub fn with_event_index(mut self, index: EventIndex) -> Self {
        self.event_index = index;
        self
    }

    /// Parses one JSON line (a segment line or a bundle entry).
    pub fn from_json_str(text: &str) -> Result<Self, ArtifactError> {
        Self::from_value(artifact::parse_value(EVENT, text)?)
    }

    pub fn from_value(value: Value) -> Result<Self, ArtifactError> {
        let mut map = artifact::into_object(EVENT, value)?;
        artifact::take_version(EVENT, &mut map, "v", SESSION_EVENT_VERSION)?;
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        struct Wire {
            event_id: EventId,
            event_index: EventIndex,
            session_id: SessionId,
            kind: EventKind,
            #[serde(default)]
            scope: Option<ScopeWire>,
            dedupe_key: DedupeKey,
            data: Value,
        }
        let wire: Wire = artifact::from_value(EVENT, "envelope", Value::Object(map))?;
        if EventIndex::new(wire.event_index.get()).is_none() {
            return Err(ArtifactError::invariant(
                EVENT,
                "eventIndex is JCS-safe",
                format!("eventIndex {} exceeds 2^53-1", wire.event_index),
            ));
        }
        let scope = match wire.scope {
            None => EventScope::Session,
            Some(ScopeWire {
                run_id,
                node_id: None,
            }) => EventScope::Run(run_id),
            Some(ScopeWire {
                run_id,
                node_id: Some(node),
            }) => EventScope::Node(run_id, node),
        };
        let data = EventData::from_kind_and_value(wire.kind, wire.data)?;
        let event = Self::new(
            wire.event_id,
            wire.event_index,
            wire.session_id,
            scope,
            data,
        )?;
        let derived = event.dedupe_key();
        if derived != wire.dedupe_key {
            return Err(ArtifactError::invariant(
                EVENT,
                "dedupeKey recipe",
                format!(
                    "stored dedupeKey {} differs from the recipe {derived}",
                    wire.dedupe_key
                ),
            ));
        }
        Ok(event)
    }

    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Wire<'a> {
            v: u64,
            event_id: &'a EventId,
            event_index: EventIndex,
            session_id: &'a SessionId,
            kind: EventKind,
            #[serde(skip_serializing_if = "Option::is_none")]
            scope: Option<ScopeWire>,
            dedupe_key: DedupeKey,
            data: &'a EventData,
        }
        serde_json::to_value(Wire {
            v: SESSION_EVENT_VERSION,
            event_id: &self.event_id,
            event_index: self.event_index,
            session_id: &self.session_id,
            kind: self.kind(),
            scope: self.scope.to_wire(),
            dedupe_key: self.dedupe_key(),
            data: &self.data,
        })
    }
}

artifact::artifact_serde!(SessionEvent);

impl JsonSchema for SessionEvent {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("SessionEvent")
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let event_id = generator.subschema_for::<EventId>();
        let event_index = generator.subschema_for::<EventIndex>();
        let session_id = generator.subschema_for::<SessionId>();
        let dedupe_key = generator.subschema_for::<DedupeKey>();
        let run_id = generator.subschema_for::<RunId>();
        let node_id = generator.subschema_for::<NodeId>();
        let mut variants = Vec::new();
        for kind in EventKind::ALL {
            let data = match kind {
                EventKind::SessionCreated => generator.subschema_for::<SessionCreated>(),
                EventKind::ObservationRecorded => generator.subschema_for::<ObservationRecorded>(),
                EventKind::RunStarted => generator.subschema_for::<RunStarted>(),
                EventKind::NodeCreated => generator.subschema_for::<NodeCreated>(),
                EventKind::EdgeCreated => generator.subschema_for::<EdgeCreated>(),
                EventKind::AdvanceRecorded => generator.subschema_for::<AdvanceRecorded>(),
                EventKind::NodeOutputAppended => generator.subschema_for::<NodeOutputAppended>(),
                EventKind::PreferencesChanged => generator.subschema_for::<PreferencesChanged>(),
                EventKind::CapabilityObserved => generator.subschema_for::<CapabilityObserved>(),
                EventKind::GapRecorded => generator.subschema_for::<GapRecorded>(),
                EventKind::DivergenceRecorded => generator.subschema_for::<DivergenceRecorded>(),
                EventKind::DecisionTraceAppended => {
                    generator.subschema_for::<DecisionTraceAppended>()
                }
                EventKind::ContextSet => generator.subschema_for::<ContextSet>(),
            };
            let run_scope = serde_json::json!({
                "type": "object",
                "properties": {"runId": run_id},
                "required": ["runId"],
                "additionalProperties": false,
            });
            let node_scope = serde_json::json!({
                "type": "object",
                "properties": {"runId": run_id, "nodeId": node_id},
                "required": ["runId", "nodeId"],
                "additionalProperties": false,
            });
            let mut properties = serde_json::json!({
                "v": {"const": SESSION_EVENT_VERSION},
                "eventId": event_id,
                "eventIndex": event_index,
                "sessionId": session_id,
                "kind": {"const": kind.as_str()},
                "dedupeKey": dedupe_key,
                "data": data,
            });
            let mut required = vec![
                "v",
                "eventId",
                "eventIndex",
                "sessionId",
                "kind",
                "dedupeKey",
                "data",
            ];
            match kind.scope_rule() {
                ScopeRule::SessionOnly => {}
                ScopeRule::RunOnly => {
                    properties["scope"] = run_scope;
                    required.push("scope");
                }
                ScopeRule::Node => {
                    properties["scope"] = node_scope;
                    required.push("scope");
                }
                ScopeRule::SessionOrNode => properties["scope"] = node_scope,
            }
            variants.push(serde_json::json!({
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": false,
            }));
        }
        schemars::json_schema!({ "oneOf": variants })
    }
}

//! Execution snapshots: the minimal typed interpreter state behind a node (locks §1 "Snapshot
//! execution payload boundary").
//!
//! Snapshots are rehydration-only (no cached projections), content-addressed in a global CAS
//! (`SnapshotRef = sha256(JCS(file))`) and versioned twice: the file (`v`) and the engine payload
//! (`enginePayload.v`). Impossible states are rejected on construction and on parse.

use std::borrow::Cow;
use std::collections::BTreeSet;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::artifact::{self, ArtifactError, ArtifactKind};
use crate::ids::{LoopId, SnapshotRef, StepId, WorkflowHash};
use crate::jcs::{JcsError, jcs_digest};
use crate::manifest::tagged_object_schema;
use crate::skey::{LoopPathEntry, StepInstanceKey};

/// The only execution snapshot file version this build reads and writes.
pub const EXECUTION_SNAPSHOT_VERSION: u64 = 1;
/// The only engine payload version this build reads and writes.
pub const ENGINE_PAYLOAD_VERSION: u64 = 1;

const SNAPSHOT: ArtifactKind = ArtifactKind::ExecutionSnapshot;
const ENGINE: ArtifactKind = ArtifactKind::EnginePayload;

/// The pending step: its id and the loop path it runs in.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PendingStep {
    pub step_id: StepId,
    pub loop_path: Vec<LoopPathEntry>,
    /// The context values the step's prompt reads (its `contextReads` and the enclosing loops'
    /// variables), frozen when the step became pending, so the prompt a node shows never changes
    /// (decision D139). Absent when the step reads nothing.
    #[serde(default, skip_serializing_if = "Bindings::is_empty")]
    pub bindings: Bindings,
}

/// Context values frozen into a pending step, by key.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct Bindings(pub serde_json::Map<String, Value>);

impl Bindings {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::hash::Hash for Bindings {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // A map serializes in key order, so equal bindings hash equally.
        serde_json::to_string(&self.0)
            .unwrap_or_default()
            .hash(state);
    }
}

impl PendingStep {
    pub fn instance_key(&self) -> StepInstanceKey {
        StepInstanceKey::new(self.loop_path.clone(), self.step_id.clone())
    }
}

/// Explicit pending presence: never a nullable field.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Pending {
    None,
    Some { step: PendingStep },
}

/// One frame of the runtime loop stack.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LoopFrame {
    pub loop_id: LoopId,
    /// 0-based; increments only when the next iteration starts.
    pub iteration: u32,
    /// Position in the loop's authored `body[]`.
    pub body_index: u32,
}

/// The top-level items the walk passed because their `runCondition` did not hold, and how far
/// the forward walk got (decision D154). The language selects at the top level the first item
/// not done whose condition holds, so a passed item runs later, out of order, once a call makes
/// its condition true. Present from the run's first such pass on; a snapshot without it walks
/// forward only.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Revisit {
    /// The passed items not taken since, in the top-level sequence's order.
    pub skipped: Vec<crate::compiled::SequenceItem>,
    /// The index in the top-level sequence of the first item the forward walk has not reached.
    pub frontier: u32,
}

/// The completed step instances: an explicit set wrapper, sorted lexicographically, unique.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct CompletedSet(Vec<StepInstanceKey>);

impl CompletedSet {
    pub fn new(keys: impl IntoIterator<Item = StepInstanceKey>) -> Self {
        let set: BTreeSet<StepInstanceKey> = keys.into_iter().collect();
        Self(set.into_iter().collect())
    }

    pub fn contains(&self, key: &StepInstanceKey) -> bool {
        self.0.binary_search(key).is_ok()
    }

    pub fn keys(&self) -> &[StepInstanceKey] {
        &self.0
    }

    /// A new set with `key` added.
    pub fn with(&self, key: StepInstanceKey) -> Self {
        let mut set = self.clone();
        set.insert(key);
        set
    }

    /// Adds `key` in place, keeping the set sorted and unique.
    pub fn insert(&mut self, key: StepInstanceKey) {
        if let Err(at) = self.0.binary_search(&key) {
            self.0.insert(at, key);
        }
    }

    /// Keeps only the keys `keep` accepts (order and uniqueness are preserved).
    pub fn retain(&mut self, keep: impl FnMut(&StepInstanceKey) -> bool) {
        self.0.retain(keep);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[derive(Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename = "CompletedSet", deny_unknown_fields)]
enum CompletedSetWire {
    #[serde(rename = "set")]
    Set { values: Vec<StepInstanceKey> },
}

impl Serialize for CompletedSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        CompletedSetWire::Set {
            values: self.0.clone(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for CompletedSet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let CompletedSetWire::Set { values } = CompletedSetWire::deserialize(d)?;
        if values.windows(2).any(|w| w[0] >= w[1]) {
            return Err(serde::de::Error::custom(
                "completed.values must be sorted lexicographically and unique",
            ));
        }
        Ok(Self(values))
    }
}

impl JsonSchema for CompletedSet {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("CompletedSet")
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        CompletedSetWire::json_schema(generator)
    }
}

/// The interpreter state.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum EngineState {
    /// Before the first step was selected.
    Init,
    #[serde(rename_all = "camelCase")]
    Running {
        completed: CompletedSet,
        loop_stack: Vec<LoopFrame>,
        pending: Pending,
        /// Absent until a top-level item is passed by its `runCondition` (decision D154).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        revisit: Option<Revisit>,
    },
    /// The workflow finished; `isComplete` is derived from this state.
    Complete,
}

impl EngineState {
    pub fn is_complete(&self) -> bool {
        matches!(self, Self::Complete)
    }

    pub fn pending_step(&self) -> Option<&PendingStep> {
        match self {
            Self::Running {
                pending: Pending::Some { step },
                ..
            } => Some(step),
            _ => None,
        }
    }

    /// Rejects the locked impossible states.
    pub fn check(&self) -> Result<(), ArtifactError> {
        let Self::Running {
            completed,
            loop_stack,
            pending,
            revisit,
        } = self
        else {
            return Ok(());
        };
        if let Some(revisit) = revisit {
            let unique: BTreeSet<String> = revisit
                .skipped
                .iter()
                .map(|item| format!("{item:?}"))
                .collect();
            if unique.len() != revisit.skipped.len() {
                return Err(ArtifactError::invariant(
                    ENGINE,
                    "revisit lists each skipped item once",
                    "an item is listed twice in revisit.skipped".to_owned(),
                ));
            }
        }
        let mut seen = BTreeSet::new();
        for frame in loop_stack {
            if !seen.insert(&frame.loop_id) {
                return Err(ArtifactError::invariant(
                    ENGINE,
                    "loop stack has unique loopIds",
                    format!("loop {} appears twice", frame.loop_id),
                ));
            }
        }
        if let Pending::Some { step } = pending {
            if completed.contains(&step.instance_key()) {
                return Err(ArtifactError::invariant(
                    ENGINE,
                    "pending step is not completed",
                    format!("{} is both pending and completed", step.instance_key()),
                ));
            }
            let stack_path: Vec<LoopPathEntry> = loop_stack
                .iter()
                .map(|f| LoopPathEntry {
                    loop_id: f.loop_id.clone(),
                    iteration: f.iteration,
                })
                .collect();
            if stack_path != step.loop_path {
                return Err(ArtifactError::invariant(
                    ENGINE,
                    "pending loopPath equals the loop stack",
                    format!(
                        "pending {} but loop stack is {:?}",
                        step.instance_key(),
                        stack_path
                            .iter()
                            .map(|e| format!("{}@{}", e.loop_id, e.iteration))
                            .collect::<Vec<_>>()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// `enginePayload`: versioned interpreter state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EnginePayloadV1 {
    pub engine_state: EngineState,
}

impl EnginePayloadV1 {
    pub fn new(engine_state: EngineState) -> Result<Self, ArtifactError> {
        engine_state.check()?;
        Ok(Self { engine_state })
    }

    pub fn from_value(value: Value) -> Result<Self, ArtifactError> {
        let mut map = artifact::into_object(ENGINE, value)?;
        artifact::take_version(ENGINE, &mut map, "v", ENGINE_PAYLOAD_VERSION)?;
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        struct Wire {
            engine_state: EngineState,
        }
        let wire: Wire = artifact::from_value(ENGINE, "enginePayload", Value::Object(map))?;
        Self::new(wire.engine_state)
    }

    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        Ok(serde_json::json!({
            "v": ENGINE_PAYLOAD_VERSION,
            "engineState": serde_json::to_value(&self.engine_state)?,
        }))
    }
}

artifact::artifact_serde!(EnginePayloadV1);

impl JsonSchema for EnginePayloadV1 {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("EnginePayloadV1")
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let state = generator.subschema_for::<EngineState>();
        schemars::json_schema!({
            "type": "object",
            "properties": {
                "v": {"const": ENGINE_PAYLOAD_VERSION},
                "engineState": state,
            },
            "required": ["v", "engineState"],
            "additionalProperties": false,
        })
    }
}

/// The CAS file behind a `SnapshotRef`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExecutionSnapshotFileV1 {
    /// Links the snapshot to the pinned compiled workflow it is verifiable against.
    pub workflow_hash: WorkflowHash,
    pub engine_payload: EnginePayloadV1,
}

impl crate::jcs::CanonicalArtifact for ExecutionSnapshotFileV1 {}

impl ExecutionSnapshotFileV1 {
    /// The content address: `sha256(JCS(file))`.
    pub fn snapshot_ref(&self) -> Result<SnapshotRef, JcsError> {
        jcs_digest(self).map(|(digest, _)| SnapshotRef::from_digest(digest))
    }

    pub fn from_json_str(text: &str) -> Result<Self, ArtifactError> {
        Self::from_value(artifact::parse_value(SNAPSHOT, text)?)
    }

    pub fn from_value(value: Value) -> Result<Self, ArtifactError> {
        let mut map = artifact::into_object(SNAPSHOT, value)?;
        artifact::take_version(SNAPSHOT, &mut map, "v", EXECUTION_SNAPSHOT_VERSION)?;
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase", deny_unknown_fields)]
        struct Wire {
            workflow_hash: WorkflowHash,
            engine_payload: Value,
        }
        let wire: Wire = artifact::from_value(SNAPSHOT, "snapshot", Value::Object(map))?;
        Ok(Self {
            workflow_hash: wire.workflow_hash,
            engine_payload: EnginePayloadV1::from_value(wire.engine_payload)?,
        })
    }

    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        Ok(serde_json::json!({
            "v": EXECUTION_SNAPSHOT_VERSION,
            "workflowHash": self.workflow_hash,
            "enginePayload": self.engine_payload.to_value()?,
        }))
    }
}

artifact::artifact_serde!(ExecutionSnapshotFileV1);

impl JsonSchema for ExecutionSnapshotFileV1 {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("ExecutionSnapshotFileV1")
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let hash = generator.subschema_for::<WorkflowHash>();
        let payload = generator.subschema_for::<EnginePayloadV1>();
        let schema = schemars::json_schema!({
            "type": "object",
            "properties": {
                "workflowHash": hash,
                "enginePayload": payload,
            },
            "required": ["workflowHash", "enginePayload"],
            "additionalProperties": false,
        });
        tagged_object_schema(schema, "v", EXECUTION_SNAPSHOT_VERSION, None)
    }
}

//! Shared builders for the model's tests: hand-written event logs with short ids, and small
//! compiled workflows.

#![allow(dead_code)]

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};
use workrail_spec::blocker::{Blocker, BlockerCode, BlockerPointer, BlockerReport};
use workrail_spec::closed::{
    AdvanceIntent, Autonomy, Capability, CapabilityStatus, ClaimValue, ClaimedBy, Confidence,
    DivergenceReason, EdgeCauseKind, EdgeKind, GapSeverity, NodeKind, ObservationKey,
    OutputChannel, PreferenceSource, ProbeResult, RiskPolicy, StepSource, WorkflowSourceKind,
};
use workrail_spec::compiled::{
    CompiledCondition, CompiledContract, CompiledLoop, CompiledStep, CompiledWorkflowBody,
    CompiledWorkflowSnapshotV1, LoopWhile, Recommendations, SequenceItem, StepOutputSpec,
    StepProvenance,
};
use workrail_spec::event::{
    AdvanceOutcome, AdvanceRecorded, CapabilityObserved, DivergenceRecorded, EdgeCause,
    EdgeCreated, EffectivePreferences, EventData, EventScope, GapRecorded, GapResolution,
    NodeCreated, NodeOutputAppended, ObservationRecorded, ObservationValue, OutputPayload,
    PreferenceDelta, PreferencesChanged, Provenance, ProvenanceDetail, RunStarted, SessionCreated,
    SessionEvent,
};
use workrail_spec::ids::{
    AttemptId, CapObsId, ChangeId, ConditionId, DivergenceId, EventId, EventIndex, GapId, LoopId,
    NodeId, OutputId, RunId, SessionId, SnapshotRef, StepId, WorkflowHash, WorkflowId,
};
use workrail_spec::reason::GapReason;
use workrail_spec::tools::OutputInput;

pub fn sid(s: &str) -> SessionId {
    SessionId::parse(&format!("sess_{s}")).unwrap()
}
pub fn rid(s: &str) -> RunId {
    RunId::parse(&format!("run_{s}")).unwrap()
}
pub fn nid(s: &str) -> NodeId {
    NodeId::parse(&format!("node_{s}")).unwrap()
}
pub fn oid(s: &str) -> OutputId {
    OutputId::parse(&format!("out_{s}")).unwrap()
}
pub fn gid(s: &str) -> GapId {
    GapId::parse(&format!("gap_{s}")).unwrap()
}
pub fn step_id(s: &str) -> StepId {
    StepId::parse(s).unwrap()
}
pub fn loop_id(s: &str) -> LoopId {
    LoopId::parse(s).unwrap()
}

/// `sha256:` followed by `n` as 64 hex digits: a readable stand-in digest.
fn digest_str(n: u32) -> String {
    format!("sha256:{n:064x}")
}
pub fn snap(n: u32) -> SnapshotRef {
    SnapshotRef::parse(&digest_str(n)).unwrap()
}
pub fn wf_hash(n: u32) -> WorkflowHash {
    WorkflowHash::parse(&digest_str(0x1000 + n)).unwrap()
}

pub const GUIDED: EffectivePreferences = EffectivePreferences::GUIDED;
pub const NEVER_STOP: EffectivePreferences = EffectivePreferences::FULL_AUTO_NEVER_STOP;
pub const STOP_ON_DEPS: EffectivePreferences = EffectivePreferences::FULL_AUTO_STOP_ON_USER_DEPS;

/// A hand-written session log: each helper appends one event at the next index.
#[derive(Debug, Clone)]
pub struct Log {
    pub session: SessionId,
    pub events: Vec<SessionEvent>,
}

impl Log {
    /// A log whose event 0 is `session_created`.
    pub fn new(session: &str) -> Self {
        let mut log = Self {
            session: sid(session),
            events: Vec::new(),
        };
        log.push(
            EventScope::Session,
            EventData::SessionCreated(SessionCreated {}),
        );
        log
    }

    pub fn next_index(&self) -> u64 {
        self.events.len() as u64
    }

    pub fn push(&mut self, scope: EventScope, data: EventData) -> u64 {
        let index = self.next_index();
        let event = SessionEvent::new(
            EventId::parse(&format!("evt_{index}")).unwrap(),
            EventIndex::new(index).unwrap(),
            self.session.clone(),
            scope,
            data,
        )
        .unwrap();
        self.events.push(event);
        index
    }

    fn node_scope(run: &str, node: &str) -> EventScope {
        EventScope::Node(rid(run), nid(node))
    }

    pub fn run(&mut self, run: &str, workflow_id: &str, hash: u32) -> u64 {
        self.push(
            EventScope::Run(rid(run)),
            EventData::run_started(RunStarted {
                workflow_id: WorkflowId::parse(workflow_id).unwrap(),
                workflow_hash: wf_hash(hash),
                workflow_source_kind: WorkflowSourceKind::Project,
                workflow_source_ref: "workflows/x.json".into(),
                lane: None,
            }),
        )
    }

    /// `node_created` only.
    pub fn node(
        &mut self,
        run: &str,
        node: &str,
        parent: Option<&str>,
        kind: NodeKind,
        snapshot: u32,
    ) -> u64 {
        self.push(
            Self::node_scope(run, node),
            EventData::NodeCreated(NodeCreated {
                node_kind: kind,
                parent_node_id: parent.map(nid),
                workflow_hash: wf_hash(0),
                snapshot_ref: snap(snapshot),
            }),
        )
    }

    pub fn edge(
        &mut self,
        run: &str,
        from: &str,
        to: &str,
        kind: EdgeKind,
        cause: EdgeCauseKind,
    ) -> u64 {
        self.push(
            EventScope::Run(rid(run)),
            EventData::EdgeCreated(EdgeCreated {
                edge_kind: kind,
                from_node_id: nid(from),
                to_node_id: nid(to),
                cause: EdgeCause {
                    kind: cause,
                    event_id: EventId::parse("evt_0").unwrap(),
                },
            }),
        )
    }

    /// The root: `node_created` without parent.
    pub fn root(&mut self, run: &str, node: &str, snapshot: u32) -> u64 {
        self.node(run, node, None, NodeKind::Step, snapshot)
    }

    /// A step child: `node_created` then its `acked_step` edge. Returns the node's index.
    pub fn step(&mut self, run: &str, node: &str, parent: &str, snapshot: u32) -> u64 {
        let at = self.node(run, node, Some(parent), NodeKind::Step, snapshot);
        self.edge(
            run,
            parent,
            node,
            EdgeKind::AckedStep,
            EdgeCauseKind::IdempotentReplay,
        );
        at
    }

    /// A checkpoint child: `node_created` then its `checkpoint` edge.
    pub fn checkpoint(&mut self, run: &str, node: &str, parent: &str, snapshot: u32) -> u64 {
        let at = self.node(run, node, Some(parent), NodeKind::Checkpoint, snapshot);
        self.edge(
            run,
            parent,
            node,
            EdgeKind::Checkpoint,
            EdgeCauseKind::CheckpointCreated,
        );
        at
    }

    pub fn notes(
        &mut self,
        run: &str,
        node: &str,
        out: &str,
        text: &str,
        supersedes: Option<&str>,
    ) -> u64 {
        self.output(
            run,
            node,
            out,
            OutputChannel::Recap,
            OutputPayload::notes(text),
            supersedes,
        )
    }

    pub fn artifact(&mut self, run: &str, node: &str, out: &str, supersedes: Option<&str>) -> u64 {
        let payload = OutputPayload::ArtifactRef {
            sha256: workrail_spec::ids::Sha256Digest::parse(&digest_str(7)).unwrap(),
            content_type: "application/json".into(),
            byte_length: 2,
        };
        self.output(run, node, out, OutputChannel::Artifact, payload, supersedes)
    }

    pub fn output(
        &mut self,
        run: &str,
        node: &str,
        out: &str,
        channel: OutputChannel,
        payload: OutputPayload,
        supersedes: Option<&str>,
    ) -> u64 {
        self.push(
            Self::node_scope(run, node),
            EventData::node_output_appended(NodeOutputAppended {
                output_id: oid(out),
                supersedes_output_id: supersedes.map(oid),
                output_channel: channel,
                payload,
            }),
        )
    }

    pub fn gap(
        &mut self,
        run: &str,
        node: &str,
        gap: &str,
        severity: GapSeverity,
        reason: GapReason,
        resolves: Option<&str>,
    ) -> u64 {
        self.push(
            Self::node_scope(run, node),
            EventData::gap_recorded(GapRecorded {
                gap_id: gid(gap),
                severity,
                reason,
                summary: workrail_spec::budget::BoundedText::new("a gap").unwrap(),
                resolution: match resolves {
                    None => GapResolution::Unresolved,
                    Some(g) => GapResolution::Resolves {
                        resolves_gap_id: gid(g),
                    },
                },
                evidence_refs: None,
                details: None,
            }),
        )
    }

    /// A `preferences_changed` whose delta sets both keys to `effective`.
    pub fn prefs(
        &mut self,
        run: &str,
        node: &str,
        change: &str,
        effective: EffectivePreferences,
    ) -> u64 {
        self.push(
            Self::node_scope(run, node),
            EventData::PreferencesChanged(PreferencesChanged {
                change_id: ChangeId::parse(&format!("prefchg_{change}")).unwrap(),
                source: PreferenceSource::User,
                delta: vec![
                    PreferenceDelta::Autonomy(effective.autonomy),
                    PreferenceDelta::RiskPolicy(effective.risk_policy),
                ],
                effective,
            }),
        )
    }

    /// A capability observation: strong (`probe_step`) or weak (`manual_claim`).
    pub fn cap(
        &mut self,
        run: &str,
        node: &str,
        obs: &str,
        capability: Capability,
        status: CapabilityStatus,
        strong: bool,
    ) -> u64 {
        let detail = if strong {
            ProvenanceDetail::ProbeStep {
                probe_template_id: "wr.templates.capability_probe".into(),
                probe_step_id: step_id("probe"),
                result: if status == CapabilityStatus::Available {
                    ProbeResult::Success
                } else {
                    ProbeResult::Failure
                },
            }
        } else {
            ProvenanceDetail::ManualClaim {
                claimed_by: ClaimedBy::Agent,
                claim: if status == CapabilityStatus::Available {
                    ClaimValue::Available
                } else {
                    ClaimValue::Unavailable
                },
            }
        };
        self.push(
            Self::node_scope(run, node),
            EventData::CapabilityObserved(CapabilityObserved {
                cap_obs_id: CapObsId::parse(&format!("capobs_{obs}")).unwrap(),
                capability,
                status,
                provenance: Provenance { detail },
            }),
        )
    }

    pub fn divergence(&mut self, run: &str, node: &str, div: &str) -> u64 {
        self.push(
            Self::node_scope(run, node),
            EventData::DivergenceRecorded(DivergenceRecorded {
                divergence_id: DivergenceId::parse(&format!("div_{div}")).unwrap(),
                reason: DivergenceReason::EfficiencySkip,
                summary: workrail_spec::budget::BoundedText::new("skipped").unwrap(),
                related_step_id: None,
            }),
        )
    }

    pub fn advanced(&mut self, run: &str, node: &str, attempt: &str, to: &str) -> u64 {
        self.advance_record(
            run,
            node,
            attempt,
            AdvanceOutcome::Advanced {
                to_node_id: nid(to),
            },
        )
    }

    pub fn blocked(&mut self, run: &str, node: &str, attempt: &str) -> u64 {
        let blockers = BlockerReport::new(vec![
            Blocker::new(
                BlockerCode::MissingRequiredOutput,
                BlockerPointer::WorkflowStep {
                    step_id: step_id("a"),
                },
                "missing",
                None,
            )
            .unwrap(),
        ])
        .unwrap();
        self.advance_record(
            run,
            node,
            attempt,
            AdvanceOutcome::Blocked {
                blockers,
                output_digest: None,
            },
        )
    }

    fn advance_record(
        &mut self,
        run: &str,
        node: &str,
        attempt: &str,
        outcome: AdvanceOutcome,
    ) -> u64 {
        self.push(
            Self::node_scope(run, node),
            EventData::AdvanceRecorded(AdvanceRecorded {
                attempt_id: AttemptId::parse(&format!("att_{attempt}")).unwrap(),
                intent: AdvanceIntent::AckPending,
                outcome,
            }),
        )
    }

    pub fn observe(&mut self, key: ObservationKey, value: ObservationValue) -> u64 {
        self.push(
            EventScope::Session,
            EventData::ObservationRecorded(ObservationRecorded {
                key,
                value,
                confidence: Confidence::High,
            }),
        )
    }

    pub fn branch(&mut self, name: &str) -> u64 {
        self.observe(
            ObservationKey::GitBranch,
            ObservationValue::ShortString {
                value: workrail_spec::budget::BoundedText::new(name).unwrap(),
            },
        )
    }

    pub fn head(&mut self, sha: &str) -> u64 {
        self.observe(
            ObservationKey::GitHeadSha,
            ObservationValue::GitSha1 {
                value: workrail_spec::event::GitSha1::parse(sha).unwrap(),
            },
        )
    }
}

pub fn prefs(autonomy: Autonomy, risk_policy: RiskPolicy) -> EffectivePreferences {
    EffectivePreferences {
        autonomy,
        risk_policy,
    }
}

// -------------------------------------------------------------------------------------------
// Compiled workflows
// -------------------------------------------------------------------------------------------

pub fn compiled_step(id: &str, contract: Option<&str>) -> CompiledStep {
    CompiledStep {
        step_id: step_id(id),
        title: format!("Step {id}"),
        require_confirmation: false,
        agent_role: None,
        prompt_blocks: None,
        prompt: format!("Do {id}."),
        output: contract.map(|c| StepOutputSpec {
            contract_ref: Some(c.to_owned()),
            hints: BTreeMap::new(),
        }),
        provenance: StepProvenance {
            source: StepSource::Authored,
            origin_id: None,
        },
        injected_refs: Vec::new(),
        non_assumable_choices: Vec::new(),
        functions: Vec::new(),
        language: Default::default(),
    }
}

pub fn s(id: &str) -> SequenceItem {
    SequenceItem::Step {
        step_id: step_id(id),
    }
}
pub fn l(id: &str) -> SequenceItem {
    SequenceItem::Loop {
        loop_id: loop_id(id),
    }
}

pub fn compiled_loop(
    id: &str,
    condition: &str,
    max_iterations: u32,
    body: Vec<SequenceItem>,
) -> CompiledLoop {
    CompiledLoop {
        loop_id: loop_id(id),
        while_: LoopWhile::ConditionRef {
            condition_id: ConditionId::parse(condition).unwrap(),
        },
        max_iterations,
        body,
        run_condition: None,
        vars: Default::default(),
        kept: Default::default(),
    }
}

pub fn loop_control_contract() -> CompiledContract {
    CompiledContract {
        contract_ref: "wr.contracts.loop_control".into(),
        artifact_kind: "wr.loop_control".into(),
        schema: json!({"type": "object"}),
        example: json!({"kind": "wr.loop_control", "loopId": "x", "decision": "stop"}),
    }
}

pub fn findings_contract() -> CompiledContract {
    CompiledContract {
        contract_ref: "wr.contracts.findings".into(),
        artifact_kind: "wr.findings".into(),
        schema: json!({"type": "object"}),
        example: json!({"kind": "wr.findings"}),
    }
}

/// The three conditions every test workflow declares: `always`, `never`, `ctl` (loop_control,
/// continue when `continue`).
pub fn conditions() -> Vec<CompiledCondition> {
    vec![
        CompiledCondition::AlwaysTrue {
            condition_id: ConditionId::parse("always").unwrap(),
        },
        CompiledCondition::LoopControl {
            condition_id: ConditionId::parse("ctl").unwrap(),
            continue_when: workrail_spec::closed::LoopDecision::Continue,
        },
        CompiledCondition::AlwaysFalse {
            condition_id: ConditionId::parse("never").unwrap(),
        },
    ]
}

/// A compiled workflow from its parts (loops are sorted by id here).
pub fn workflow(
    steps: Vec<CompiledStep>,
    sequence: Vec<SequenceItem>,
    mut loops: Vec<CompiledLoop>,
) -> CompiledWorkflowSnapshotV1 {
    loops.sort_by(|a, b| a.loop_id.cmp(&b.loop_id));
    CompiledWorkflowSnapshotV1::new(CompiledWorkflowBody {
        workflow_id: WorkflowId::parse("project.model_test").unwrap(),
        name: Some("Model test".into()),
        description: None,
        agent_role: None,
        recommendations: Recommendations::default(),
        capabilities: BTreeMap::new(),
        features: Vec::new(),
        contracts: vec![findings_contract(), loop_control_contract()],
        steps,
        sequence,
        conditions: conditions(),
        loops,
        compiled_warnings: Vec::new(),
        assessments: Vec::new(),
        kept: Default::default(),
    })
    .unwrap()
}

/// `a`, `b`, `c` in sequence.
pub fn linear() -> CompiledWorkflowSnapshotV1 {
    workflow(
        vec![
            compiled_step("a", None),
            compiled_step("b", None),
            compiled_step("c", None),
        ],
        vec![s("a"), s("b"), s("c")],
        vec![],
    )
}

/// `intro`, then loop `pass` (loop_control, max 3) over `work` and `decide` (which must emit
/// `wr.loop_control`), then `outro`.
pub fn looping(max_iterations: u32) -> CompiledWorkflowSnapshotV1 {
    workflow(
        vec![
            compiled_step("intro", None),
            compiled_step("work", None),
            compiled_step("decide", Some("wr.contracts.loop_control")),
            compiled_step("outro", None),
        ],
        vec![s("intro"), l("pass"), s("outro")],
        vec![compiled_loop(
            "pass",
            "ctl",
            max_iterations,
            vec![s("work"), s("decide")],
        )],
    )
}

pub fn notes(text: &str) -> OutputInput {
    OutputInput {
        notes_markdown: Some(text.to_owned()),
        artifacts: Vec::new(),
    }
}

pub fn artifact(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

pub fn loop_decision(loop_name: &str, decision: &str) -> OutputInput {
    OutputInput {
        notes_markdown: None,
        artifacts: vec![artifact(
            json!({"kind": "wr.loop_control", "loopId": loop_name, "decision": decision}),
        )],
    }
}

pub fn no_output() -> OutputInput {
    OutputInput::default()
}

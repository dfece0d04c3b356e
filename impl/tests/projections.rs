//! Projections follow the locked policies: preferred tip (leaves, last activity over reachable
//! history, tie-breaks), run status, current outputs (node- and channel-scoped supersede),
//! unresolved gaps, capability status with provenance, effective preference precedence.
//!
//! Guards against "latest by accident" projections: wall-clock ordering, supersedes across
//! nodes, weak capability claims unlocking required paths.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use workrail::projections::{TipPolicy, effective_preferences, project, project_in_two_passes};
use workrail_spec::budget::BoundedText;
use workrail_spec::closed::*;
use workrail_spec::event::*;
use workrail_spec::ids::*;
use workrail_spec::reason::{ContractViolationReason, GapReason, UnexpectedReason};

struct Log {
    events: Vec<SessionEvent>,
}

fn session() -> SessionId {
    SessionId::from_entropy(&[1; 10])
}
fn run() -> RunId {
    RunId::from_entropy(&[2; 10])
}
fn node(n: u8) -> NodeId {
    NodeId::from_entropy(&[n; 10])
}
fn snap(n: u8) -> SnapshotRef {
    SnapshotRef::from_digest(Sha256Digest::from_bytes(&[n; 32]))
}
fn hash() -> WorkflowHash {
    WorkflowHash::from_digest(Sha256Digest::from_bytes(&[99; 32]))
}

impl Log {
    fn new() -> Self {
        let mut log = Self { events: Vec::new() };
        log.push(
            EventScope::Session,
            EventData::SessionCreated(SessionCreated {}),
        );
        log.push(
            EventScope::Run(run()),
            EventData::run_started(RunStarted {
                workflow_id: WorkflowId::parse("project.x").unwrap(),
                workflow_hash: hash(),
                workflow_source_kind: WorkflowSourceKind::Project,
                workflow_source_ref: "x.json".into(),
                lane: None,
            }),
        );
        log
    }

    fn push(&mut self, scope: EventScope, data: EventData) -> u64 {
        let index = self.events.len() as u64;
        let mut id = [0u8; 10];
        id[..8].copy_from_slice(&index.to_le_bytes());
        self.events.push(
            SessionEvent::new(
                EventId::from_entropy(&id),
                EventIndex::new(index).unwrap(),
                session(),
                scope,
                data,
            )
            .unwrap(),
        );
        index
    }

    fn node(&mut self, n: u8, parent: Option<u8>) -> u64 {
        self.push(
            EventScope::Node(run(), node(n)),
            EventData::NodeCreated(NodeCreated {
                node_kind: NodeKind::Step,
                parent_node_id: parent.map(node),
                workflow_hash: hash(),
                snapshot_ref: snap(n),
            }),
        )
    }

    fn output(&mut self, on: u8, id: u8, supersedes: Option<u8>, channel: OutputChannel) -> u64 {
        self.push(
            EventScope::Node(run(), node(on)),
            EventData::node_output_appended(NodeOutputAppended {
                output_id: OutputId::from_entropy(&[id; 10]),
                supersedes_output_id: supersedes.map(|s| OutputId::from_entropy(&[s; 10])),
                output_channel: channel,
                payload: OutputPayload::notes(&format!("output {id}")),
            }),
        )
    }

    fn gap(
        &mut self,
        on: u8,
        id: u8,
        severity: GapSeverity,
        reason: GapReason,
        resolves: Option<u8>,
    ) {
        self.push(
            EventScope::Node(run(), node(on)),
            EventData::gap_recorded(GapRecorded {
                gap_id: GapId::from_entropy(&[id; 10]),
                severity,
                reason,
                summary: BoundedText::new("gap").unwrap(),
                resolution: match resolves {
                    Some(r) => GapResolution::Resolves {
                        resolves_gap_id: GapId::from_entropy(&[r; 10]),
                    },
                    None => GapResolution::Unresolved,
                },
                evidence_refs: None,
                details: None,
            }),
        );
    }
}

fn tip(log: &Log) -> NodeId {
    project(&log.events, TipPolicy::Latest).runs[&run()]
        .preferred_tip
        .clone()
        .unwrap()
}

/// lock: L-TIP-PER-RUN, L-TIP-LAST-ACTIVITY, L-TIP-TIE-BREAK, L-DAG-NO-BRANCH-ID
#[test]
fn the_preferred_tip_is_the_leaf_with_the_latest_reachable_activity() {
    let mut log = Log::new();
    log.node(1, None);
    log.node(2, Some(1));
    log.node(3, Some(1)); // fork: 3 is newer than 2
    assert_eq!(tip(&log), node(3));
    // Activity on the older branch makes it preferred again.
    log.output(2, 50, None, OutputChannel::Recap);
    assert_eq!(tip(&log), node(2));
    // Activity on the shared ancestor touches both branches equally: the tie goes to the later
    // node_created.
    log.output(1, 51, None, OutputChannel::Recap);
    assert_eq!(tip(&log), node(3));
    // A non-leaf never is the tip, however active.
    log.node(4, Some(3));
    log.output(3, 52, None, OutputChannel::Recap);
    assert_eq!(tip(&log), node(4));
    let view = &project(&log.events, TipPolicy::Latest).runs[&run()];
    assert_eq!(view.tip_last_activity, log.events.len() as u64 - 1);
    assert_eq!(view.ancestry(&node(4)), vec![node(1), node(3), node(4)]);
}

/// lock: L-OUTPUT-CURRENT, L-OUTPUT-SUPERSEDE-SAME-NODE, L-OUTPUT-SUPERSEDE-SAME-CHANNEL
#[test]
fn current_outputs_honour_node_and_channel_scoped_supersede() {
    let mut log = Log::new();
    log.node(1, None);
    log.node(2, Some(1));
    log.output(1, 10, None, OutputChannel::Recap);
    log.output(1, 11, Some(10), OutputChannel::Recap); // corrects 10
    log.output(1, 12, None, OutputChannel::Artifact);
    log.output(2, 13, Some(12), OutputChannel::Artifact); // other node: ignored
    log.output(1, 14, Some(12), OutputChannel::Recap); // other channel: ignored
    let projection = project(&log.events, TipPolicy::Latest);
    let view = &projection.runs[&run()];
    let current = |n: u8, c: OutputChannel| {
        // The projection holds where the output is; the log holds the output (D226).
        view.current_output(&node(n), c)
            .map(|o| match log.events[o.position].data() {
                EventData::NodeOutputAppended(appended) => appended.output_id.clone(),
                other => panic!("a current output points at {other:?}"),
            })
    };
    assert_eq!(
        current(1, OutputChannel::Recap),
        Some(OutputId::from_entropy(&[14; 10]))
    );
    assert_eq!(
        current(1, OutputChannel::Artifact),
        Some(OutputId::from_entropy(&[12; 10]))
    );
    assert_eq!(
        current(2, OutputChannel::Artifact),
        Some(OutputId::from_entropy(&[13; 10]))
    );
    assert_eq!(projection.anomalies.len(), 2, "{:?}", projection.anomalies);
}

/// lock: L-STATUS-CLOSED-SET, L-STATUS-FROM-TIP, L-STATUS-COMPLETE, L-STATUS-BLOCKED, L-GAP-RESOLVED-PROJECTION
#[test]
fn run_status_follows_the_tip_and_unresolved_critical_gaps() {
    let missing = GapReason::ContractViolation(ContractViolationReason::MissingRequiredOutput);
    let mut log = Log::new();
    log.node(1, None);
    let status = |log: &Log, complete: bool, autonomy| {
        project(&log.events, TipPolicy::Latest).runs[&run()].status(|_| complete, autonomy)
    };
    assert_eq!(status(&log, false, Autonomy::Guided), RunStatus::InProgress);
    assert_eq!(status(&log, true, Autonomy::Guided), RunStatus::Complete);
    log.gap(1, 20, GapSeverity::Critical, missing, None);
    assert_eq!(status(&log, false, Autonomy::Guided), RunStatus::Blocked);
    assert_eq!(
        status(&log, false, Autonomy::FullAutoStopOnUserDeps),
        RunStatus::Blocked
    );
    assert_eq!(
        status(&log, false, Autonomy::FullAutoNeverStop),
        RunStatus::InProgress
    );
    assert_eq!(
        status(&log, true, Autonomy::Guided),
        RunStatus::CompleteWithGaps
    );
    // An unexpected-category gap never blocks, but still marks completion.
    let mut other = Log::new();
    other.node(1, None);
    other.gap(
        1,
        30,
        GapSeverity::Critical,
        GapReason::Unexpected(UnexpectedReason::InvariantViolation),
        None,
    );
    assert_eq!(
        status(&other, false, Autonomy::Guided),
        RunStatus::InProgress
    );
    // Warnings never count.
    let mut warn = Log::new();
    warn.node(1, None);
    warn.gap(1, 31, GapSeverity::Warning, missing, None);
    assert_eq!(status(&warn, true, Autonomy::Guided), RunStatus::Complete);
    // Resolution is linkage from a later gap.
    log.gap(1, 21, GapSeverity::Info, missing, Some(20));
    assert_eq!(status(&log, false, Autonomy::Guided), RunStatus::InProgress);
    assert_eq!(status(&log, true, Autonomy::Guided), RunStatus::Complete);
    // A gap on a non-tip node does not block the tip.
    let mut branch = Log::new();
    branch.node(1, None);
    branch.gap(1, 40, GapSeverity::Critical, missing, None);
    branch.node(2, Some(1));
    assert_eq!(
        status(&branch, false, Autonomy::Guided),
        RunStatus::InProgress
    );
}

/// lock: L-CAP-WEAK-NO-UNLOCK, L-CAP-CURRENT-STATUS
#[test]
fn only_strong_observations_unlock_a_capability_and_the_latest_wins() {
    let mut log = Log::new();
    log.node(1, None);
    let observe = |log: &mut Log, status, detail| {
        let n = log.events.len() as u8;
        log.push(
            EventScope::Node(run(), node(1)),
            EventData::CapabilityObserved(CapabilityObserved {
                cap_obs_id: CapObsId::from_entropy(&[n; 10]),
                capability: Capability::WebBrowsing,
                status,
                provenance: Provenance { detail },
            }),
        );
    };
    observe(
        &mut log,
        CapabilityStatus::Available,
        ProvenanceDetail::ManualClaim {
            claimed_by: ClaimedBy::Agent,
            claim: ClaimValue::Available,
        },
    );
    let unlocked = |log: &Log| {
        project(&log.events, TipPolicy::Latest).runs[&run()]
            .capability_unlocked(&node(1), Capability::WebBrowsing)
    };
    assert!(!unlocked(&log), "an agent's claim is weak");
    observe(
        &mut log,
        CapabilityStatus::Available,
        ProvenanceDetail::ProbeStep {
            probe_template_id: "wr.templates.capability_probe".into(),
            probe_step_id: StepId::parse("probe").unwrap(),
            result: ProbeResult::Success,
        },
    );
    assert!(unlocked(&log));
    observe(
        &mut log,
        CapabilityStatus::Unavailable,
        ProvenanceDetail::AttemptedUse {
            attempt_context: AttemptContext::WorkflowStep,
            result: ProbeResult::Failure,
            failure_code: Some(AttemptFailureCode::ToolMissing),
        },
    );
    assert!(!unlocked(&log), "the latest strong observation wins");
    observe(
        &mut log,
        CapabilityStatus::Available,
        ProvenanceDetail::ManualClaim {
            claimed_by: ClaimedBy::User,
            claim: ClaimValue::Available,
        },
    );
    assert!(!unlocked(&log), "a weak claim never unlocks");
    // Descendants inherit the latest observation on their ancestry.
    log.node(2, Some(1));
    let view = &project(&log.events, TipPolicy::Latest).runs[&run()];
    let status = view
        .capability_status(&node(2), Capability::WebBrowsing)
        .unwrap();
    assert_eq!(
        status.status,
        CapabilityStatus::Available,
        "the latest claim is shown (UX)"
    );
    assert_eq!(
        status.provenance.enforcement_grade(),
        EnforcementGrade::Weak
    );
    assert!(
        !view.capability_unlocked(&node(2), Capability::WebBrowsing),
        "but never enforced"
    );
}

/// lock: L-PREF-NODE-ATTACHED, L-PREF-PRECEDENCE
#[test]
fn effective_preferences_come_from_the_node_then_session_then_global() {
    let mut log = Log::new();
    log.node(1, None);
    log.node(2, Some(1));
    log.node(3, Some(1));
    let global = EffectivePreferences::GUIDED;
    let baseline = EffectivePreferences::FULL_AUTO_STOP_ON_USER_DEPS;
    let view = project(&log.events, TipPolicy::Latest).runs[&run()].clone();
    assert_eq!(effective_preferences(&view, &node(2), None, global), global);
    assert_eq!(
        effective_preferences(&view, &node(2), Some(baseline), global),
        baseline
    );
    log.push(
        EventScope::Node(run(), node(2)),
        EventData::PreferencesChanged(PreferencesChanged {
            change_id: ChangeId::from_entropy(&[5; 10]),
            source: PreferenceSource::User,
            delta: vec![PreferenceDelta::Autonomy(Autonomy::FullAutoNeverStop)],
            effective: EffectivePreferences::FULL_AUTO_NEVER_STOP,
        }),
    );
    log.node(4, Some(2));
    let view = project(&log.events, TipPolicy::Latest).runs[&run()].clone();
    let at = |n: u8| effective_preferences(&view, &node(n), Some(baseline), global);
    assert_eq!(at(2), EffectivePreferences::FULL_AUTO_NEVER_STOP);
    assert_eq!(
        at(4),
        EffectivePreferences::FULL_AUTO_NEVER_STOP,
        "descendants inherit"
    );
    assert_eq!(
        at(3),
        baseline,
        "a sibling branch is untouched (rewind-safe)"
    );
}

/// A preferences change of `effective` on node `n`.
fn preferences_changed(log: &mut Log, n: u8, seed: u8, effective: EffectivePreferences) {
    log.push(
        EventScope::Node(run(), node(n)),
        EventData::PreferencesChanged(PreferencesChanged {
            change_id: ChangeId::from_entropy(&[seed; 10]),
            source: PreferenceSource::User,
            delta: vec![PreferenceDelta::Autonomy(effective.autonomy)],
            effective,
        }),
    );
}

/// A node's preferences are its own latest change, else what its parent had when the node was
/// created, kept on each node as the projection grows (decision D213): a change recorded on a
/// node after it had children reaches only the children created afterwards, and a node far
/// below a change finds it without walking its ancestry, in the incremental projection and the
/// two-pass one alike.
/// decision: D213
/// lock: L-PREF-NODE-ATTACHED
#[test]
fn a_nodes_preferences_are_what_its_parent_had_when_it_was_created() {
    let (never_stop, stop_on_deps) = (
        EffectivePreferences::FULL_AUTO_NEVER_STOP,
        EffectivePreferences::FULL_AUTO_STOP_ON_USER_DEPS,
    );
    let mut log = Log::new();
    log.node(1, None);
    preferences_changed(&mut log, 1, 1, never_stop);
    log.node(2, Some(1));
    preferences_changed(&mut log, 1, 2, stop_on_deps);
    log.node(3, Some(1));
    for n in 4..=250 {
        log.node(n, Some(if n == 4 { 2 } else { n - 1 }));
    }
    let global = EffectivePreferences::GUIDED;
    for view in [
        project(&log.events, TipPolicy::Latest).runs[&run()].clone(),
        project_in_two_passes(&log.events, TipPolicy::Latest).runs[&run()].clone(),
    ] {
        let at = |n: u8| effective_preferences(&view, &node(n), None, global);
        assert_eq!(at(1), stop_on_deps, "a node's own latest change");
        assert_eq!(
            at(2),
            never_stop,
            "created before the second change: keeps the first"
        );
        assert_eq!(at(3), stop_on_deps, "created after it: inherits the second");
        assert_eq!(
            at(250),
            never_stop,
            "246 nodes down the first child's branch"
        );
    }
}

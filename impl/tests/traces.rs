//! Decision traces as production records them: step selection, loop entry / condition / exit,
//! and non-tip advances, within the locked budgets, and never needed for correctness.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use std::collections::BTreeSet;

use protocol_support::*;
use workrail::projections::{TipPolicy, project};
use workrail::store::memfs::MemFs;
use workrail_spec::budget::{
    TRACE_MAX_ENTRIES, TRACE_MAX_REFS_PER_ENTRY, TRACE_MAX_TOTAL_BYTES, TRACE_SUMMARY_MAX_BYTES,
};
use workrail_spec::closed::DecisionTraceKind;
use workrail_spec::event::{DecisionTraceAppended, EventData, SessionEvent, TraceRef};

fn id_is_delimiter_safe(id: &str) -> bool {
    !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// Runs the demo through its loop twice, completes it, then forks from the first step.
fn traced_session() -> (MemFs, Vec<SessionEvent>) {
    let fs = MemFs::new();
    let wr = open(&fs);
    let start = start(&wr, "project.demo");
    let mut out = wr
        .continue_workflow(ack(&start, "Planned.", vec![]))
        .unwrap();
    for decision in ["continue", "stop"] {
        out = wr
            .continue_workflow(ack(&out, "Implemented a slice.", vec![]))
            .unwrap();
        out = wr
            .continue_workflow(ack(&out, "Decided.", vec![loop_control(decision)]))
            .unwrap();
    }
    assert_eq!(pending(&out), "wrap");
    let done = wr.continue_workflow(ack(&out, "Wrapped.", vec![])).unwrap();
    assert!(done.is_complete);
    // A rewind: the first step's state token again, acked with its fresh attempt.
    let rewound = wr.continue_workflow(rehydrate(&start.state_token)).unwrap();
    wr.continue_workflow(ack(&rewound, "Planned again.", vec![]))
        .unwrap();
    let events = wr
        .sessions()
        .load(&start.session.session_id)
        .unwrap()
        .events()
        .all()
        .unwrap()
        .into_owned();
    (fs, events)
}

fn traces(events: &[SessionEvent]) -> Vec<&DecisionTraceAppended> {
    events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::DecisionTraceAppended(t) => Some(t),
            _ => None,
        })
        .collect()
}

/// lock: L-TRACE-PAYLOAD, L-TRACE-ENTRY-KINDS, L-TRACE-REF-IDS, L-TRACE-BUDGETS, L-TRACE-LOOP-ENTERED, L-TRACE-LOOP-CONDITION, L-TRACE-LOOP-EXITED
#[test]
fn traces_cover_selection_loops_and_forks_within_budgets() {
    let (_fs, events) = traced_session();
    let traces = traces(&events);
    assert!(!traces.is_empty());
    let mut kinds = BTreeSet::new();
    let mut trace_ids = BTreeSet::new();
    for trace in &traces {
        assert!(
            trace_ids.insert(trace.trace_id.clone()),
            "trace ids are unique"
        );
        assert!(!trace.entries.is_empty(), "a trace has at least one entry");
        assert!(trace.entries.len() <= TRACE_MAX_ENTRIES);
        let total: usize = trace.entries.iter().map(|e| e.summary.len()).sum();
        assert!(total <= TRACE_MAX_TOTAL_BYTES);
        for entry in &trace.entries {
            kinds.insert(entry.kind);
            assert!(!entry.summary.is_empty());
            assert!(entry.summary.len() <= TRACE_SUMMARY_MAX_BYTES);
            let refs = entry.refs.as_deref().unwrap_or_default();
            assert!(refs.len() <= TRACE_MAX_REFS_PER_ENTRY);
            for r in refs {
                let id = match r {
                    TraceRef::StepId { step_id } => step_id.as_str(),
                    TraceRef::LoopId { loop_id } => loop_id.as_str(),
                    TraceRef::ConditionId { condition_id } => condition_id.as_str(),
                    TraceRef::Iteration { value } => {
                        assert!(*value < 3, "0-based iteration within maxIterations");
                        continue;
                    }
                };
                assert!(id_is_delimiter_safe(id), "{id}");
            }
        }
    }
    assert_eq!(
        kinds,
        BTreeSet::from([
            DecisionTraceKind::SelectedNextStep,
            DecisionTraceKind::EvaluatedCondition,
            DecisionTraceKind::EnteredLoop,
            DecisionTraceKind::ExitedLoop,
            DecisionTraceKind::DetectedNonTipAdvance,
        ]),
        "every locked kind shows up in a run with a loop and a fork"
    );
    // The loop ran twice on the first branch (one entry, a condition evaluation per decision, one
    // exit), and the forked branch entered it once more.
    let count = |kind| {
        traces
            .iter()
            .flat_map(|t| &t.entries)
            .filter(|e| e.kind == kind)
            .count()
    };
    assert_eq!(count(DecisionTraceKind::EnteredLoop), 2);
    assert_eq!(count(DecisionTraceKind::EvaluatedCondition), 2);
    assert_eq!(count(DecisionTraceKind::ExitedLoop), 1);
    assert_eq!(count(DecisionTraceKind::DetectedNonTipAdvance), 1);
}

/// lock: L-TRACE-NOT-CORRECTNESS
#[test]
fn the_projections_are_the_same_without_any_trace() {
    let (_fs, events) = traced_session();
    let without: Vec<SessionEvent> = events
        .iter()
        .filter(|e| !matches!(e.data(), EventData::DecisionTraceAppended(_)))
        .cloned()
        .collect();
    assert!(without.len() < events.len());
    let with = project(&events, TipPolicy::Latest);
    let bare = project(&without, TipPolicy::Latest);
    assert_eq!(with.runs.len(), bare.runs.len());
    for (run, view) in &with.runs {
        let other = &bare.runs[run];
        // Structure only: a trace is activity (it moves `own_activity`), never structure.
        assert_eq!(
            view.dag.edges().collect::<Vec<_>>(),
            other.dag.edges().collect::<Vec<_>>(),
            "the DAG does not depend on traces"
        );
        assert_eq!(view.dag.root, other.dag.root);
        let shape = |dag: &workrail::projections::RunDag| {
            dag.nodes
                .values()
                .map(|n| {
                    (
                        n.node_id.clone(),
                        n.kind,
                        n.parent.clone(),
                        n.children.clone(),
                        n.snapshot_ref(),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(shape(&view.dag), shape(&other.dag));
        assert_eq!(view.preferred_tip, other.preferred_tip);
        // Current outputs point into their own log (D226): the outputs they point at are equal.
        assert_eq!(
            current_outputs(view, &events),
            current_outputs(other, &without)
        );
        assert_eq!(view.unresolved_gaps, other.unresolved_gaps);
        assert_eq!(view.capabilities, other.capabilities);
    }
    assert_eq!(with.anomalies, bare.anomalies);
}

/// Each current output with the event it points at in `log`.
fn current_outputs(
    view: &workrail::projections::RunView,
    log: &[SessionEvent],
) -> Vec<(String, bool, EventData)> {
    view.current_outputs()
        .map(|(node, channel, o)| {
            (
                format!("{node} {channel:?}"),
                o.notes,
                log[o.position].data().clone(),
            )
        })
        .collect()
}

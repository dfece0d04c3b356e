//! Hand-computed examples for every projection of the model.
//!
//! Guards against projections that drift from the lock text: a preferred tip that counts a
//! sibling branch's activity or breaks ties the wrong way, a supersede link honoured across nodes
//! or channels, a gap treated as resolved by an earlier record, a weak capability claim that
//! unlocks a required capability, a preference change on an ancestor that rewrites an existing
//! branch, a run status read from the wrong node, and resume ranking that mixes tiers, ignores
//! NFKC or searches superseded notes. Every expected value below was worked out by hand from the
//! event indices noted in the comments.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::*;
use workrail_model::projections::*;
use workrail_spec::closed::UserOnlyDependencyReason;
use workrail_spec::closed::{
    Autonomy, Capability, CapabilityStatus, EdgeCauseKind, EdgeKind, GapSeverity, NodeKind,
    OutputChannel, RiskPolicy, RunStatus, SessionHealthKind, WhyMatched,
};
use workrail_spec::event::AdvanceOutcome;
use workrail_spec::ids::{AttemptId, EventIndex, SessionId, SnapshotRef, WorkflowHash};
use workrail_spec::reason::{ContractViolationReason, GapReason, UnexpectedReason};

fn ix(n: u64) -> EventIndex {
    EventIndex::new(n).unwrap()
}

fn tip_of(log: &Log, run: &str) -> PreferredTip {
    let dag = RunDag::build(&log.events, &rid(run));
    preferred_tip(&log.events, &dag).unwrap()
}

/// 0 session, 1 run, 2 root, 3 a, 4 root->a, 5 b, 6 root->b.
fn two_leaves() -> Log {
    let mut log = Log::new("t");
    log.run("r", "project.demo", 0);
    log.root("r", "root", 1);
    log.step("r", "a", "root", 2);
    log.step("r", "b", "root", 3);
    log
}

/// lock: L-DAG-RUN-IS-DAG, L-DAG-NO-BRANCH-ID
#[test]
fn the_run_dag_holds_nodes_edges_children_and_ancestry() {
    let mut log = two_leaves();
    log.checkpoint("r", "k", "a", 2); // 7 node k, 8 edge a->k
    let dag = RunDag::build(&log.events, &rid("r"));
    assert_eq!(dag.nodes.len(), 4);
    assert_eq!(dag.root().unwrap().node_id, nid("root"));
    assert_eq!(
        dag.node(&nid("root")).unwrap().children,
        vec![nid("a"), nid("b")]
    );
    assert_eq!(dag.node(&nid("a")).unwrap().children, vec![nid("k")]);
    let k = dag.node(&nid("k")).unwrap();
    assert_eq!(
        (k.kind, k.parent.clone(), k.created_at),
        (NodeKind::Checkpoint, Some(nid("a")), ix(7))
    );
    assert_eq!(
        dag.ancestry(&nid("k")),
        vec![nid("k"), nid("a"), nid("root")]
    );
    let leaves: Vec<_> = dag
        .leaves()
        .into_iter()
        .map(|n| n.node_id.clone())
        .collect();
    assert_eq!(leaves, vec![nid("b"), nid("k")]);
    // A checkpoint child is a child, but not a step child.
    assert!(dag.step_children(&nid("a")).is_empty());
    assert_eq!(dag.step_children(&nid("root")).len(), 2);
    let kinds: Vec<_> = dag
        .edges
        .iter()
        .map(|e| (e.kind, e.cause, e.created_at))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (EdgeKind::AckedStep, EdgeCauseKind::IdempotentReplay, ix(4)),
            (EdgeKind::AckedStep, EdgeCauseKind::IdempotentReplay, ix(6)),
            (
                EdgeKind::Checkpoint,
                EdgeCauseKind::CheckpointCreated,
                ix(8)
            ),
        ]
    );
    assert_eq!(dag.pin.unwrap().workflow_hash, wf_hash(0));
    assert_eq!(run_ids(&log.events), vec![rid("r")]);
}

/// lock: L-TIP-PER-RUN, L-TIP-LAST-ACTIVITY
#[test]
fn the_leaf_with_the_latest_activity_in_its_own_history_wins() {
    let mut log = two_leaves();
    // a: {2, 3, 4} -> 4; b: {2, 5, 6} -> 6. The edge root->b (6) is not in a's history.
    let dag = RunDag::build(&log.events, &rid("r"));
    assert_eq!(last_activity(&log.events, &dag, &nid("a")), Some(ix(4)));
    assert_eq!(last_activity(&log.events, &dag, &nid("b")), Some(ix(6)));
    assert_eq!(tip_of(&log, "r").node_id, nid("b"));
    // 7: notes on a -> a: 7 > 6.
    log.notes("r", "a", "x", "more work", None);
    let tip = tip_of(&log, "r");
    assert_eq!(
        (tip.node_id, tip.last_activity, tip.created_at),
        (nid("a"), ix(7), ix(3))
    );
}

/// lock: L-TIP-LAST-ACTIVITY
#[test]
fn every_node_scoped_kind_and_incoming_edges_count_as_activity() {
    type Touch = fn(&mut Log) -> u64;
    let touches: [(&str, Touch); 6] = [
        ("gap", |l| {
            l.gap(
                "r",
                "a",
                "g",
                GapSeverity::Info,
                GapReason::Unexpected(UnexpectedReason::InvariantViolation),
                None,
            )
        }),
        ("capability", |l| {
            l.cap(
                "r",
                "a",
                "c",
                Capability::Delegation,
                CapabilityStatus::Available,
                true,
            )
        }),
        ("preferences", |l| l.prefs("r", "a", "p", GUIDED)),
        ("divergence", |l| l.divergence("r", "a", "d")),
        ("advance", |l| l.blocked("r", "a", "x")),
        ("output", |l| l.artifact("r", "a", "o", None)),
    ];
    for (what, touch) in touches {
        let mut log = two_leaves();
        assert_eq!(touch(&mut log), 7, "{what}");
        let tip = tip_of(&log, "r");
        assert_eq!(
            (tip.node_id, tip.last_activity),
            (nid("a"), ix(7)),
            "{what}"
        );
    }
    // An edge written late into a's history: 3 a, 4 b, 5 root->b, 6 root->a.
    let mut log = Log::new("t");
    log.run("r", "project.demo", 0);
    log.root("r", "root", 1);
    log.node("r", "a", Some("root"), NodeKind::Step, 2);
    log.node("r", "b", Some("root"), NodeKind::Step, 3);
    log.edge(
        "r",
        "root",
        "b",
        EdgeKind::AckedStep,
        EdgeCauseKind::IdempotentReplay,
    );
    log.edge(
        "r",
        "root",
        "a",
        EdgeKind::AckedStep,
        EdgeCauseKind::IdempotentReplay,
    );
    assert_eq!(tip_of(&log, "r").node_id, nid("a"));
}

/// lock: L-TIP-TIE-BREAK
#[test]
fn ties_go_to_the_later_created_leaf() {
    let mut log = two_leaves();
    // 7: a gap on the shared root touches both histories: a = b = 7; b was created later (5 > 3).
    log.gap(
        "r",
        "root",
        "g",
        GapSeverity::Info,
        GapReason::Unexpected(UnexpectedReason::InvariantViolation),
        None,
    );
    let dag = RunDag::build(&log.events, &rid("r"));
    let leaves = leaf_activities(&log.events, &dag);
    assert_eq!(
        leaves
            .iter()
            .map(|l| (l.node_id.clone(), l.last_activity, l.created_at))
            .collect::<Vec<_>>(),
        vec![(nid("a"), ix(7), ix(3)), (nid("b"), ix(7), ix(5))]
    );
    assert_eq!(tip_of(&log, "r").node_id, nid("b"));

    // Same shape with b created first: 3 b, 4 root->b, 5 a, 6 root->a, 7 gap on root -> a.
    let mut log = Log::new("t");
    log.run("r", "project.demo", 0);
    log.root("r", "root", 1);
    log.step("r", "b", "root", 3);
    log.step("r", "a", "root", 2);
    log.gap(
        "r",
        "root",
        "g",
        GapSeverity::Info,
        GapReason::Unexpected(UnexpectedReason::InvariantViolation),
        None,
    );
    assert_eq!(tip_of(&log, "r").node_id, nid("a"));
}

/// lock: L-TIP-PER-RUN
#[test]
fn tips_are_per_run_and_a_run_without_nodes_has_none() {
    let mut log = two_leaves();
    log.run("s", "project.other", 1); // 7
    let dag_s = RunDag::build(&log.events, &rid("s"));
    assert!(preferred_tip(&log.events, &dag_s).is_none());
    log.root("s", "sroot", 9); // 8: a later node of another run does not touch run r
    assert_eq!(tip_of(&log, "r").node_id, nid("b"));
    assert_eq!(tip_of(&log, "s").node_id, nid("sroot"));
}

/// lock: L-OUTPUT-CURRENT, L-OUTPUT-SUPERSEDE-SAME-NODE, L-OUTPUT-SUPERSEDE-SAME-CHANNEL
#[test]
fn current_outputs_follow_node_and_channel_scoped_supersede_links() {
    let mut log = two_leaves();
    log.notes("r", "a", "o1", "first", None); // 7
    log.notes("r", "a", "o2", "second", Some("o1")); // 8: supersedes o1
    log.artifact("r", "a", "o3", None); // 9
    log.artifact("r", "a", "o4", Some("o2")); // 10: other channel -> ignored
    log.notes("r", "b", "o5", "on b", Some("o2")); // 11: other node -> ignored (on b)
    log.notes("r", "a", "o6", "early link", Some("o7")); // 12: names a later output -> ignored
    log.notes("r", "a", "o7", "third", None); // 13
    log.notes("r", "a", "o8", "dangling", Some("zz")); // 14: unknown -> ignored

    let a = node_outputs(&log.events, &rid("r"), &nid("a"));
    let ids = |v: Vec<&OutputRecord>| {
        v.into_iter()
            .map(|o| o.output_id.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(a.history.len(), 7);
    assert_eq!(a.superseded, vec![oid("o1")]);
    assert_eq!(
        ids(a.current_set()),
        vec![
            oid("o2"),
            oid("o3"),
            oid("o4"),
            oid("o6"),
            oid("o7"),
            oid("o8")
        ]
    );
    assert_eq!(
        a.current(OutputChannel::Recap).unwrap().output_id,
        oid("o8")
    );
    assert_eq!(
        a.current(OutputChannel::Artifact).unwrap().output_id,
        oid("o4")
    );
    assert_eq!(a.current_recap_notes(), Some("dangling"));
    let problems: Vec<_> = a
        .ignored_supersedes
        .iter()
        .map(|p| (p.output_id.clone(), p.problem))
        .collect();
    assert_eq!(
        problems,
        vec![
            (oid("o4"), SupersedeProblem::OtherChannel),
            (oid("o6"), SupersedeProblem::NotEarlier),
            (oid("o8"), SupersedeProblem::UnknownOutput),
        ]
    );
    let b = node_outputs(&log.events, &rid("r"), &nid("b"));
    assert_eq!(b.ignored_supersedes[0].problem, SupersedeProblem::OtherNode);
    assert!(b.superseded.is_empty());
    // History stays visible: o1 is still there.
    assert!(a.history.iter().any(|o| o.output_id == oid("o1")));
    assert!(
        node_outputs(&log.events, &rid("r"), &nid("root"))
            .current(OutputChannel::Recap)
            .is_none()
    );
}

/// lock: L-GAP-RESOLVED-PROJECTION
#[test]
fn a_gap_is_resolved_only_by_a_later_record_that_names_it() {
    let cv = GapReason::ContractViolation(ContractViolationReason::MissingRequiredOutput);
    let mut log = two_leaves();
    log.gap("r", "a", "g1", GapSeverity::Critical, cv, None); // 7
    log.gap("r", "b", "g2", GapSeverity::Info, cv, Some("g1")); // 8: resolves g1 (other node is fine)
    log.gap("r", "a", "g3", GapSeverity::Warning, cv, Some("g4")); // 9: names a later gap
    log.gap("r", "a", "g4", GapSeverity::Critical, cv, None); // 10: not resolved by 9
    let all = gap_records(&log.events);
    assert_eq!(all.len(), 4);
    let resolved: Vec<bool> = all.iter().map(|g| is_resolved(&log.events, g)).collect();
    assert_eq!(resolved, vec![true, false, false, false]);
    let open = |v: Vec<GapRecord>| v.into_iter().map(|g| g.gap_id).collect::<Vec<_>>();
    assert_eq!(
        open(unresolved_gaps_in_run(&log.events, &rid("r"))),
        vec![gid("g2"), gid("g3"), gid("g4")]
    );
    assert_eq!(
        open(unresolved_gaps_at_node(&log.events, &rid("r"), &nid("a"))),
        vec![gid("g3"), gid("g4")]
    );
    assert!(unresolved_gaps_in_run(&log.events, &rid("other")).is_empty());
}

/// lock: L-CAP-CURRENT-STATUS, L-CAP-WEAK-NO-UNLOCK, L-CAP-OBSERVED-ONLY
#[test]
fn capability_status_is_the_latest_observation_and_only_strong_ones_unlock() {
    let (r, a) = (rid("r"), nid("a"));
    let web = Capability::WebBrowsing;
    let mut log = two_leaves();
    assert_eq!(
        capability_status(&log.events, &r, &a, web),
        CapabilityStatus::Unknown
    );
    assert!(!capability_unlocked(&log.events, &r, &a, web));
    log.cap("r", "a", "c1", web, CapabilityStatus::Available, false); // weak claim
    assert_eq!(
        capability_status(&log.events, &r, &a, web),
        CapabilityStatus::Available
    );
    assert!(
        !capability_unlocked(&log.events, &r, &a, web),
        "a manual claim never unlocks"
    );
    log.cap("r", "a", "c2", web, CapabilityStatus::Available, true); // strong probe
    assert!(capability_unlocked(&log.events, &r, &a, web));
    log.cap("r", "a", "c3", web, CapabilityStatus::Unavailable, false); // weak claim after
    assert_eq!(
        capability_status(&log.events, &r, &a, web),
        CapabilityStatus::Unavailable
    );
    assert!(
        capability_unlocked(&log.events, &r, &a, web),
        "weak claims do not re-lock either"
    );
    log.cap("r", "a", "c4", web, CapabilityStatus::Unavailable, true);
    assert!(!capability_unlocked(&log.events, &r, &a, web));
    // Per (node, capability): other capability and other node see nothing.
    assert_eq!(
        capability_status(&log.events, &r, &a, Capability::Delegation),
        CapabilityStatus::Unknown
    );
    assert_eq!(
        capability_status(&log.events, &r, &nid("b"), web),
        CapabilityStatus::Unknown
    );
}

/// lock: L-PREF-PRECEDENCE, L-PREF-NODE-ATTACHED
#[test]
fn effective_preferences_are_node_attached_and_inherited_when_in_effect() {
    let balanced = prefs(Autonomy::FullAutoStopOnUserDeps, RiskPolicy::Aggressive);
    let with_baseline = PreferenceDefaults {
        session_baseline: Some(STOP_ON_DEPS),
        global: GUIDED,
    };
    let global_only = PreferenceDefaults {
        session_baseline: None,
        global: GUIDED,
    };
    let mut log = two_leaves(); // a created at 3, b at 5
    let dag = RunDag::build(&log.events, &rid("r"));
    let at = |log: &Log, node: &str, d: &PreferenceDefaults| {
        let dag = RunDag::build(&log.events, &rid("r"));
        effective_preferences(&log.events, &dag, &nid(node), d)
    };
    // No node-attached change: session baseline, else global defaults.
    assert_eq!(at(&log, "a", &with_baseline), STOP_ON_DEPS);
    assert_eq!(at(&log, "a", &global_only), GUIDED);
    drop(dag);
    // 7: a change on a applies to a.
    log.prefs("r", "a", "p1", NEVER_STOP);
    assert_eq!(at(&log, "a", &with_baseline), NEVER_STOP);
    assert_eq!(at(&log, "b", &with_baseline), STOP_ON_DEPS);
    // 8: a change on the root after a and b exist does not rewrite them...
    log.prefs("r", "root", "p2", balanced);
    assert_eq!(at(&log, "root", &with_baseline), balanced);
    assert_eq!(at(&log, "a", &with_baseline), NEVER_STOP);
    assert_eq!(at(&log, "b", &with_baseline), STOP_ON_DEPS);
    // ...but reaches a branch created after it: 9 node c (child of root), 10 edge.
    log.step("r", "c", "root", 4);
    assert_eq!(at(&log, "c", &with_baseline), balanced);
    // 11 d under c: inherits through c; 13: a later change on d wins for d.
    log.step("r", "d", "c", 5);
    assert_eq!(at(&log, "d", &global_only), balanced);
    log.prefs("r", "d", "p3", GUIDED);
    assert_eq!(at(&log, "d", &global_only), GUIDED);
}

/// lock: L-EVENT-ADVANCE-RECORDED
#[test]
fn advance_records_are_listed_per_node_by_attempt() {
    let mut log = two_leaves();
    log.blocked("r", "root", "k0"); // 7
    log.advanced("r", "root", "k1", "a"); // 8
    log.advanced("r", "a", "k0", "b"); // 9: same attemptId on another node is another record
    let at_root = advance_records(&log.events, &rid("r"), &nid("root"));
    let summary: Vec<_> = at_root
        .iter()
        .map(|r| (r.attempt_id.as_str().to_owned(), r.recorded_at))
        .collect();
    assert_eq!(
        summary,
        vec![("att_k0".to_owned(), ix(7)), ("att_k1".to_owned(), ix(8))]
    );
    let k1 = AttemptId::parse("att_k1").unwrap();
    let record = advance_outcome(&log.events, &rid("r"), &nid("root"), &k1).unwrap();
    assert_eq!(
        record.outcome,
        AdvanceOutcome::Advanced {
            to_node_id: nid("a")
        }
    );
    let k0 = AttemptId::parse("att_k0").unwrap();
    let on_a = advance_outcome(&log.events, &rid("r"), &nid("a"), &k0).unwrap();
    assert_eq!(
        on_a.outcome,
        AdvanceOutcome::Advanced {
            to_node_id: nid("b")
        }
    );
    assert!(advance_outcome(&log.events, &rid("r"), &nid("b"), &k0).is_none());
}

fn status(log: &Log, complete: &[u32], defaults: PreferenceDefaults) -> RunStatus {
    let dag = RunDag::build(&log.events, &rid("r"));
    let complete: Vec<SnapshotRef> = complete.iter().map(|n| snap(*n)).collect();
    run_status(&log.events, &dag, &|s| complete.contains(s), &defaults).unwrap()
}

/// lock: L-STATUS-FROM-TIP, L-STATUS-COMPLETE, L-STATUS-CLOSED-SET
#[test]
fn a_complete_tip_is_complete_or_complete_with_gaps() {
    let guided = PreferenceDefaults {
        session_baseline: None,
        global: GUIDED,
    };
    let cv = GapReason::ContractViolation(ContractViolationReason::MissingRequiredOutput);
    let mut log = two_leaves(); // tip b (snapshot 3)
    assert_eq!(status(&log, &[3], guided), RunStatus::Complete);
    assert_eq!(
        status(&log, &[2], guided),
        RunStatus::InProgress,
        "a's snapshot is not the tip's"
    );
    // 7: a critical gap anywhere in the run (on root) -> complete_with_gaps; tip is still b (7 on root touches both; b created later).
    log.gap("r", "root", "g1", GapSeverity::Critical, cv, None);
    assert_eq!(tip_of(&log, "r").node_id, nid("b"));
    assert_eq!(status(&log, &[3], guided), RunStatus::CompleteWithGaps);
    // 8: resolved by an info gap -> complete again.
    log.gap("r", "root", "g2", GapSeverity::Info, cv, Some("g1"));
    assert_eq!(status(&log, &[3], guided), RunStatus::Complete);
    // 9: a warning gap does not count.
    log.gap("r", "b", "g3", GapSeverity::Warning, cv, None);
    assert_eq!(status(&log, &[3], guided), RunStatus::Complete);
}

/// lock: L-STATUS-BLOCKED, L-STATUS-FROM-TIP
#[test]
fn an_incomplete_tip_is_blocked_only_by_its_own_blocking_gaps_outside_never_stop() {
    let guided = PreferenceDefaults {
        session_baseline: Some(GUIDED),
        global: GUIDED,
    };
    let never = PreferenceDefaults {
        session_baseline: Some(NEVER_STOP),
        global: GUIDED,
    };
    let user = GapReason::UserOnlyDependency(UserOnlyDependencyReason::NeedsUserApproval);
    let unexpected = GapReason::Unexpected(UnexpectedReason::InvariantViolation);
    let mut log = two_leaves(); // tip b
    assert_eq!(status(&log, &[], guided), RunStatus::InProgress);
    // 7: a critical unexpected gap on b: not a blocking category.
    log.gap("r", "b", "g1", GapSeverity::Critical, unexpected, None);
    assert_eq!(status(&log, &[], guided), RunStatus::InProgress);
    // 8: a critical user-only dependency on b: blocked in guided, in progress in never-stop.
    log.gap("r", "b", "g2", GapSeverity::Critical, user, None);
    assert_eq!(status(&log, &[], guided), RunStatus::Blocked);
    assert_eq!(status(&log, &[], never), RunStatus::InProgress);
    // 9: never-stop attached to the tip node itself also wins over a guided baseline.
    log.prefs("r", "b", "p", NEVER_STOP);
    assert_eq!(status(&log, &[], guided), RunStatus::InProgress);

    // The same gap on an ancestor (root) does not block the tip.
    let mut log = two_leaves();
    log.gap("r", "root", "g", GapSeverity::Critical, user, None); // 7: tip b by tie-break
    assert_eq!(tip_of(&log, "r").node_id, nid("b"));
    assert_eq!(status(&log, &[], guided), RunStatus::InProgress);
    // Resolved: no longer blocks.
    let mut log = two_leaves();
    log.gap(
        "r",
        "b",
        "g",
        GapSeverity::Critical,
        GapReason::CapabilityMissing(
            workrail_spec::reason::CapabilityMissingReason::RequiredCapabilityUnknown,
        ),
        None,
    );
    assert_eq!(status(&log, &[], guided), RunStatus::Blocked);
    log.gap("r", "b", "h", GapSeverity::Info, user, Some("g"));
    assert_eq!(status(&log, &[], guided), RunStatus::InProgress);
}

// ---------------------------------------------------------------------------------------------
// Resume ranking
// ---------------------------------------------------------------------------------------------

const SHA_A: &str = "4f3c2a1b0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a";
const SHA_B: &str = "0000000000000000000000000000000000000001";

/// A session with one run whose tip carries `notes`: 0 session, 1..=obs observations, then run,
/// root, and a recap output on the root.
fn session_with(
    name: &str,
    branch: Option<&str>,
    head: Option<&str>,
    notes: Option<&str>,
    wf: &str,
) -> Log {
    let mut log = Log::new(name);
    if let Some(b) = branch {
        log.branch(b);
    }
    if let Some(h) = head {
        log.head(h);
    }
    // The bug-investigation workflow is pinned as hash 1, named "Bug Investigation" by `rank`.
    log.run("r", wf, u32::from(wf == "project.bug_investigation"));
    log.root("r", "root", 1);
    if let Some(n) = notes {
        log.notes("r", "root", "n1", n, None);
    }
    log
}

fn rank(logs: &[(&Log, SessionHealthKind)], query: &ResumeQuery) -> Vec<ResumeCandidate> {
    let candidates: Vec<SessionCandidate<'_>> = logs
        .iter()
        .map(|(log, health)| SessionCandidate {
            session_id: &log.session,
            health: *health,
            events: &log.events,
        })
        .collect();
    let names = |h: &WorkflowHash| (h == &wf_hash(1)).then(|| "Bug Investigation".to_owned());
    resume_ranking(&candidates, &names, query)
}

fn order(ranked: &[ResumeCandidate]) -> Vec<(SessionId, WhyMatched)> {
    ranked
        .iter()
        .map(|c| (c.session_id.clone(), c.why_matched[0]))
        .collect()
}

/// lock: L-RESUME-NORMALIZE
#[test]
fn text_is_normalized_with_nfkc_then_lowercase_then_ascii_tokens() {
    let tokens: Vec<String> = text_tokens("Fix ＦＯＯ-bar_baz in Ｖ2; café ﬁle x.y")
        .into_iter()
        .collect();
    // Fullwidth letters fold to ASCII (NFKC), the `ﬁ` ligature to `fi`; `é` is not in the token
    // alphabet and splits `café` into `caf`; `.` and `;` split.
    assert_eq!(
        tokens,
        ["caf", "file", "fix", "foo-bar_baz", "in", "v2", "x", "y"]
    );
    assert!(text_tokens("  ").is_empty());
}

/// lock: L-RESUME-TIERS, L-RESUME-WHY-MATCHED, L-RESUME-TIE-ORDER
#[test]
fn candidates_rank_by_tier_then_recency_then_session_id() {
    let s1 = session_with(
        "s1",
        Some("feature/auth-tokens"),
        Some(SHA_A),
        Some("Fixed the login flow"),
        "project.auth",
    );
    let s2 = session_with(
        "s2",
        Some("main"),
        Some(SHA_B),
        Some("Investigating the ＦＯＯ bug"),
        "project.auth",
    );
    let s3 = session_with("s3", None, None, None, "project.bug_investigation");
    let s4 = session_with("s4", Some("feature/auth"), None, None, "project.auth");
    let all = [
        (&s1, SessionHealthKind::Healthy),
        (&s2, SessionHealthKind::Healthy),
        (&s3, SessionHealthKind::Healthy),
        (&s4, SessionHealthKind::Healthy),
    ];
    // Last activities: s1 (2 observations, run 3, root 4, notes 5) -> 5; s2 -> 5;
    // s4 (1 observation, run 2, root 3) -> 3; s3 (run 1, root 2) -> 2.
    let recency = rank(&all, &ResumeQuery::default());
    assert_eq!(
        order(&recency),
        vec![
            (sid("s1"), WhyMatched::RecencyFallback),
            (sid("s2"), WhyMatched::RecencyFallback),
            (sid("s4"), WhyMatched::RecencyFallback),
            (sid("s3"), WhyMatched::RecencyFallback),
        ]
    );
    assert_eq!(
        recency
            .iter()
            .map(|c| c.last_activity_event_index.get())
            .collect::<Vec<_>>(),
        vec![5, 5, 3, 2]
    );

    let query = ResumeQuery {
        git_head_sha: Some(SHA_B.into()),
        git_branch: Some("feature/auth".into()),
        text: Some("foo BUG".into()),
    };
    let ranked = rank(&all, &query);
    // s2: head sha (tier 1) and notes; s1, s4: branch prefix (tier 2), s1 more recent; s3: recency.
    assert_eq!(
        order(&ranked),
        vec![
            (sid("s2"), WhyMatched::MatchedHeadSha),
            (sid("s1"), WhyMatched::MatchedBranch),
            (sid("s4"), WhyMatched::MatchedBranch),
            (sid("s3"), WhyMatched::RecencyFallback),
        ]
    );
    assert_eq!(
        ranked[0].why_matched,
        vec![WhyMatched::MatchedHeadSha, WhyMatched::MatchedNotes]
    );
    assert_eq!(ranked[0].tier, ResumeTier::HeadSha);

    // Workflow id / name tokens: "bug investigation" is s3's name; "auth" is in three ids.
    let by_name = rank(
        &all,
        &ResumeQuery {
            text: Some("Bug Investigation".into()),
            ..Default::default()
        },
    );
    assert_eq!(by_name[0].session_id, sid("s3"));
    assert_eq!(by_name[0].why_matched, vec![WhyMatched::MatchedWorkflowId]);
    let by_id = rank(
        &all,
        &ResumeQuery {
            text: Some("auth".into()),
            ..Default::default()
        },
    );
    assert_eq!(
        order(&by_id),
        vec![
            (sid("s1"), WhyMatched::MatchedWorkflowId),
            (sid("s2"), WhyMatched::MatchedWorkflowId),
            (sid("s4"), WhyMatched::MatchedWorkflowId),
            (sid("s3"), WhyMatched::RecencyFallback),
        ]
    );
}

/// lock: L-RESUME-TIERS
#[test]
fn branch_matches_exactly_or_by_query_prefix_only() {
    let s1 = session_with("s1", Some("feature/auth-tokens"), None, None, "project.a");
    let all = [(&s1, SessionHealthKind::Healthy)];
    let why = |branch: &str| {
        rank(
            &all,
            &ResumeQuery {
                git_branch: Some(branch.into()),
                ..Default::default()
            },
        )[0]
        .why_matched
        .clone()
    };
    assert_eq!(why("feature/auth-tokens"), vec![WhyMatched::MatchedBranch]);
    assert_eq!(why("feature/"), vec![WhyMatched::MatchedBranch]);
    assert_eq!(
        why("feature/auth-tokens-v2"),
        vec![WhyMatched::RecencyFallback]
    );
    assert_eq!(why("auth"), vec![WhyMatched::RecencyFallback]);
    assert_eq!(why(""), vec![WhyMatched::RecencyFallback]);
    // The latest observation wins: a later branch observation replaces the first.
    let mut s2 = session_with("s2", Some("feature/auth-tokens"), None, None, "project.a");
    s2.branch("main");
    let all = [(&s2, SessionHealthKind::Healthy)];
    let ranked = rank(
        &all,
        &ResumeQuery {
            git_branch: Some("feature".into()),
            ..Default::default()
        },
    );
    assert_eq!(ranked[0].why_matched, vec![WhyMatched::RecencyFallback]);
}

/// lock: L-RESUME-TOKEN-MATCH, L-RESUME-CORPUS
#[test]
fn notes_match_on_all_tokens_of_the_current_tip_recap_only() {
    let mut s1 = session_with(
        "s1",
        None,
        None,
        Some("Refactor token signing"),
        "project.a",
    );
    let all = |s: &Log| {
        rank(
            &[(s, SessionHealthKind::Healthy)],
            &ResumeQuery {
                text: Some("token signing".into()),
                ..Default::default()
            },
        )
    };
    assert_eq!(all(&s1)[0].why_matched, vec![WhyMatched::MatchedNotes]);
    // Every token must be present, as a whole token (not a substring).
    let partial = rank(
        &[(&s1, SessionHealthKind::Healthy)],
        &ResumeQuery {
            text: Some("token rotation".into()),
            ..Default::default()
        },
    );
    assert_eq!(partial[0].why_matched, vec![WhyMatched::RecencyFallback]);
    let substring = rank(
        &[(&s1, SessionHealthKind::Healthy)],
        &ResumeQuery {
            text: Some("sign".into()),
            ..Default::default()
        },
    );
    assert_eq!(substring[0].why_matched, vec![WhyMatched::RecencyFallback]);
    // A correction supersedes the old notes: they are no longer searchable.
    s1.notes("r", "root", "n2", "Rewrote the keyring", Some("n1"));
    assert_eq!(all(&s1)[0].why_matched, vec![WhyMatched::RecencyFallback]);
    // Notes on a non-tip node are not searched: 7 child c becomes the tip.
    let mut s2 = session_with("s2", None, None, Some("token signing"), "project.a");
    s2.step("r", "c", "root", 2);
    assert_eq!(all(&s2)[0].why_matched, vec![WhyMatched::RecencyFallback]);
    // The canonical truncation marker is not part of the corpus.
    let long = format!("{} tail", "word ".repeat(900));
    let s3 = session_with("s3", None, None, Some(&long), "project.a");
    let truncated = rank(
        &[(&s3, SessionHealthKind::Healthy)],
        &ResumeQuery {
            text: Some("truncated".into()),
            ..Default::default()
        },
    );
    assert_eq!(truncated[0].why_matched, vec![WhyMatched::RecencyFallback]);
    let word = rank(
        &[(&s3, SessionHealthKind::Healthy)],
        &ResumeQuery {
            text: Some("WORD".into()),
            ..Default::default()
        },
    );
    assert_eq!(word[0].why_matched, vec![WhyMatched::MatchedNotes]);
}

/// lock: L-RESUME-BUDGET, L-RESUME-HEALTHY-ONLY, L-RESUME-TIP-ONLY
#[test]
fn at_most_five_tip_candidates_from_healthy_sessions_with_bounded_snippets() {
    let long = "é".repeat(600); // 1200 bytes
    let logs: Vec<Log> = (0..7)
        .map(|i| session_with(&format!("s{i}"), None, None, Some(&long), "project.a"))
        .collect();
    let mut all: Vec<(&Log, SessionHealthKind)> = logs
        .iter()
        .map(|l| (l, SessionHealthKind::Healthy))
        .collect();
    all[0].1 = SessionHealthKind::CorruptTail;
    all[1].1 = SessionHealthKind::UnknownVersion;
    let ranked = rank(&all, &ResumeQuery::default());
    assert_eq!(ranked.len(), 5);
    assert_eq!(
        ranked
            .iter()
            .map(|c| c.session_id.clone())
            .collect::<Vec<_>>(),
        vec![sid("s2"), sid("s3"), sid("s4"), sid("s5"), sid("s6")]
    );
    for c in &ranked {
        assert_eq!(c.node_id, nid("root"));
        assert!(c.snippet.len() <= 1024);
        // 1011 bytes of text rounded down to a code point boundary (1010 = 505 x "é"), then the marker.
        assert_eq!(c.snippet, format!("{}\n\n[TRUNCATED]", "é".repeat(505)));
    }
    // A short recap is returned whole; a tip without notes has an empty snippet.
    let short = session_with("q", None, None, Some("short"), "project.a");
    let none = session_with("z", None, None, None, "project.a");
    let ranked = rank(
        &[
            (&short, SessionHealthKind::Healthy),
            (&none, SessionHealthKind::Healthy),
        ],
        &ResumeQuery::default(),
    );
    assert_eq!(ranked[0].snippet, "short");
    assert_eq!(ranked[1].snippet, "");
}

/// lock: L-RESUME-TIP-ONLY, L-RESUME-TIE-ORDER
#[test]
fn every_run_contributes_its_tip() {
    let mut log = Log::new("m");
    log.run("r2", "project.a", 0); // 1
    log.root("r2", "x", 1); // 2
    log.run("r1", "project.a", 0); // 3
    log.root("r1", "y", 2); // 4
    log.step("r1", "y2", "y", 3); // 5 node, 6 edge
    log.gap(
        "r2",
        "x",
        "g",
        GapSeverity::Info,
        GapReason::Unexpected(UnexpectedReason::InvariantViolation),
        None,
    ); // 7
    log.notes("r1", "y2", "o", "z", None); // 8
    // Two runs of one session never tie (their events have distinct indices): r1 (8) before r2 (7).
    let ranked = rank(
        &[(&log, SessionHealthKind::Healthy)],
        &ResumeQuery::default(),
    );
    let got: Vec<_> = ranked
        .iter()
        .map(|c| {
            (
                c.run_id.clone(),
                c.node_id.clone(),
                c.last_activity_event_index.get(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![(rid("r1"), nid("y2"), 8), (rid("r2"), nid("x"), 7)]
    );
}

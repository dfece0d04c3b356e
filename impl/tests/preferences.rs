//! Preferences through the protocol (locks §4 "Preferences + modes", §5 "Workflow
//! recommendations + warnings"; contract "Preferences & modes", "Mode safety, warnings, and
//! recommendations"; D43, D44).
//!
//! Guards against preferences that live only in responses (lost on restart, different on a
//! replay), a rewind that judges an old node under today's mode, a blocked ack whose mode change
//! is used but never recorded, a change that rewrites existing branches, global config changes
//! that reach past runs, presets drifting from the locked mapping, `riskPolicy` bending
//! contracts or disclosure, and recommendation warnings that block or vanish.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use std::path::Path;
use std::sync::Arc;

use protocol_support::{ack, loop_control, pending, rehydrate};
use serde_json::Value;
use workrail::entropy::SeededEntropy;
use workrail::protocol::{CatalogLoader, Workrail};
use workrail::sources::bundled::BundledSource;
use workrail::sources::memory::MemorySource;
use workrail::sources::{Catalog, WorkflowSource};
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail_spec::blocker::BlockerCode;
use workrail_spec::closed::{
    Autonomy, OutputChannel, PreferenceKey, RiskPolicy, WorkflowSourceKind,
};
use workrail_spec::error::ErrorCode;
use workrail_spec::event::{
    EffectivePreferences, EventData, EventKind, OutputPayload, PreferenceDelta, SessionEvent,
};
use workrail_spec::preferences::{
    ModePreset, PREFERENCE_WARNING_CODE, PREFERENCE_WARNING_CONTENT_TYPE, PreferenceWarningV1,
};
use workrail_spec::tools::{
    ContinueWorkflowInput, ExecutionKind, ExecutionOutput, StartWorkflowInput,
};

/// A loop workflow that recommends at most full-auto (stop on user deps) with `balanced`.
const RECS: &str = r#"{
  "id": "project.recs",
  "name": "Recs",
  "description": "Plan, then a bounded build loop, then wrap up; recommends at most stop-on-user-deps.",
  "recommendations": {"recommendedAutonomy": "full_auto_stop_on_user_deps", "recommendedRiskPolicy": "balanced"},
  "conditions": [{"id": "again", "kind": "loop_control", "continueWhen": "continue"}],
  "steps": [
    {"id": "plan", "title": "Plan", "prompt": "Plan the work."},
    {"type": "loop", "loopId": "build", "while": {"kind": "condition_ref", "conditionId": "again"}, "maxIterations": 3,
     "body": [
       {"id": "implement", "title": "Implement", "prompt": "Implement the next slice."},
       {"id": "decide", "title": "Decide", "prompt": "Decide whether another iteration is needed.", "output": {"contractRef": "wr.contracts.loop_control"}}
     ]},
    {"id": "wrap", "title": "Wrap up", "prompt": "Summarize what was done."}
  ]
}"#;

fn catalog_with(extra: &'static [(&'static str, &'static str)]) -> CatalogLoader {
    Arc::new(move || {
        let bundled = BundledSource;
        let mut project = MemorySource::new(WorkflowSourceKind::Project)
            .with("project/workflows/recs.json", RECS);
        for (path, text) in extra {
            project = project.with(path, text);
        }
        let sources: Vec<&dyn WorkflowSource> = vec![&bundled, &project];
        Arc::new(Catalog::load(&sources))
    })
}

/// A WorkRail over `fs`; each `seed` is a separate process (its own random ids).
fn open(fs: &MemFs, seed: u64) -> Workrail {
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    Workrail::with_parts(
        shared,
        catalog_with(&[]),
        Arc::new(SeededEntropy::new(seed)),
    )
    .unwrap()
}

fn start_with(
    wr: &Workrail,
    preset: Option<ModePreset>,
    preferences: Vec<PreferenceDelta>,
) -> Result<ExecutionOutput, workrail_spec::error::ErrorEnvelope> {
    wr.start_workflow(StartWorkflowInput {
        workflow_id: "project.recs".into(),
        context: None,
        preferences,
        preset,
    })
}

fn with_prefs(
    mut input: ContinueWorkflowInput,
    prefs: Vec<PreferenceDelta>,
) -> ContinueWorkflowInput {
    input.preferences = prefs;
    input
}

fn log(wr: &Workrail, out: &ExecutionOutput) -> Vec<SessionEvent> {
    wr.sessions()
        .load(&out.session.session_id)
        .unwrap()
        .events()
        .all()
        .unwrap()
        .into_owned()
}

fn json(out: &ExecutionOutput) -> String {
    serde_json::to_string(out).unwrap()
}

fn node_of(out: &ExecutionOutput) -> workrail_spec::ids::NodeId {
    match workrail_spec::token::TokenParts::parse(&out.state_token)
        .unwrap()
        .payload()
        .unwrap()
    {
        workrail_spec::token::TokenPayload::State(s) => s.node_id,
        _ => unreachable!("a state token"),
    }
}

/// The preference warnings recorded at `node`, read back from the artifact CAS.
fn recorded_warnings(
    fs: &MemFs,
    events: &[SessionEvent],
    node: &workrail_spec::ids::NodeId,
) -> Vec<PreferenceWarningV1> {
    events
        .iter()
        .filter(|e| e.scope().node_id() == Some(node))
        .filter_map(|e| match e.data() {
            EventData::NodeOutputAppended(o) => match &o.payload {
                OutputPayload::ArtifactRef {
                    sha256,
                    content_type,
                    ..
                } if content_type == PREFERENCE_WARNING_CONTENT_TYPE => {
                    assert_eq!(o.output_channel, OutputChannel::Artifact);
                    let bytes = fs
                        .read(&workrail::store::layout::artifact_path(sha256))
                        .unwrap()
                        .expect("the referenced warning artifact is stored");
                    Some(
                        PreferenceWarningV1::from_json_str(std::str::from_utf8(&bytes).unwrap())
                            .unwrap(),
                    )
                }
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn prefs(autonomy: Autonomy, risk_policy: RiskPolicy) -> EffectivePreferences {
    EffectivePreferences {
        autonomy,
        risk_policy,
    }
}

/// The structured warning of a response, if any.
fn response_warning(out: &ExecutionOutput) -> Option<PreferenceWarningV1> {
    out.warnings
        .iter()
        .find(|w| w.code == PREFERENCE_WARNING_CODE)
        .map(|w| *w.preference_warning.clone().expect("structured"))
}

/// lock: L-PREF-WARNINGS
#[test]
fn warnings_are_recorded_on_the_node_shown_in_responses_and_never_block() {
    let fs = MemFs::new();
    let wr = open(&fs, 1);
    // Never-stop is above the recommended stop-on-user-deps: warned, not blocked.
    let root = start_with(&wr, Some(ModePreset::FullAutoNeverStop), vec![]).unwrap();
    assert_eq!(root.kind, ExecutionKind::Ok);
    assert_eq!(root.preferences, EffectivePreferences::FULL_AUTO_NEVER_STOP);
    let shown = response_warning(&root).expect("the response warns");
    assert_eq!(shown.exceeded, [PreferenceKey::Autonomy]);
    assert_eq!(
        shown.highest_safe,
        prefs(Autonomy::FullAutoStopOnUserDeps, RiskPolicy::Conservative)
    );
    assert!(json(&root).contains("\"preferenceWarning\""));
    assert!(workrail::protocol::render_text(&root).contains(&format!(
        "Warning ({PREFERENCE_WARNING_CODE}): {}",
        shown.message
    )));
    // Recorded durably on the root, in the start plan: the same record the response shows.
    let events = log(&wr, &root);
    assert_eq!(
        recorded_warnings(&fs, &events, &node_of(&root)),
        std::slice::from_ref(&shown)
    );

    // The agent keeps going; the recap carries only its own notes.
    let a = wr
        .continue_workflow(ack(&root, "Planned the slices.", vec![]))
        .unwrap();
    // Decision D175: the warning is news where the preferences changed, not on every step; a
    // rehydrate (maybe from a new chat) shows it again.
    assert_eq!(
        response_warning(&a),
        None,
        "an unchanged step repeats no warning"
    );
    assert_eq!(
        response_warning(&wr.continue_workflow(rehydrate(&a.state_token)).unwrap()),
        Some(shown.clone()),
        "a rehydrate shows the warning in force"
    );
    assert!(
        recorded_warnings(&fs, &log(&wr, &a), &node_of(&a)).is_empty(),
        "an unchanged snapshot records no new warning"
    );
    // Raising riskPolicy too: a new snapshot on the new node, with its own warning.
    let raise = with_prefs(
        ack(
            &a,
            "Implemented slice 1.",
            vec![serde_json::json!({"kind": "note", "n": 1})],
        ),
        vec![PreferenceDelta::RiskPolicy(RiskPolicy::Aggressive)],
    );
    let b = wr.continue_workflow(raise.clone()).unwrap();
    assert_eq!(b.kind, ExecutionKind::Ok);
    let both = response_warning(&b).unwrap();
    assert_eq!(
        both.exceeded,
        [PreferenceKey::Autonomy, PreferenceKey::RiskPolicy]
    );
    assert_eq!(
        both.highest_safe,
        EffectivePreferences::FULL_AUTO_STOP_ON_USER_DEPS
    );
    let events = log(&wr, &b);
    assert_eq!(
        recorded_warnings(&fs, &events, &node_of(&b)),
        std::slice::from_ref(&both)
    );
    // L-OUTPUT-ORDER holds with the warning among the artifacts: recap first, then by
    // (sha256, contentType).
    let outputs: Vec<_> = events
        .iter()
        .filter(|e| e.scope().node_id() == Some(&node_of(&b)))
        .filter_map(|e| match e.data() {
            EventData::NodeOutputAppended(o) => Some(o.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(outputs.len(), 3);
    assert_eq!(outputs[0].output_channel, OutputChannel::Recap);
    let keys: Vec<_> = outputs[1..]
        .iter()
        .map(|o| match &o.payload {
            OutputPayload::ArtifactRef {
                sha256,
                content_type,
                ..
            } => (sha256.to_string(), content_type.clone()),
            OutputPayload::Notes { .. } => panic!("notes on the artifact channel"),
        })
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    // Recaps and resume text read notes only: the warning never leaks into them.
    let recap = wr
        .continue_workflow(rehydrate(&b.state_token))
        .unwrap()
        .recap
        .unwrap();
    assert!(recap.text.contains("Implemented slice 1."));
    assert!(!recap.text.contains("exceed"), "{}", recap.text);

    // A replay is byte-identical, and a restarted process shows the same warning.
    assert_eq!(
        json(&wr.continue_workflow(raise.clone()).unwrap()),
        json(&b)
    );
    drop(wr);
    let wr = open(&fs, 2);
    assert_eq!(json(&wr.continue_workflow(raise).unwrap()), json(&b));
    let again = wr.continue_workflow(rehydrate(&b.state_token)).unwrap();
    assert_eq!(response_warning(&again), Some(both));
    // Within the recommendation: no warning at all.
    let calm = start_with(&wr, Some(ModePreset::FullAutoStopOnUserDeps), vec![]).unwrap();
    assert!(calm.warnings.is_empty(), "{:?}", calm.warnings);
    assert!(recorded_warnings(&fs, &log(&wr, &calm), &node_of(&calm)).is_empty());
}

/// Acks `plan` and `implement`, returning the response pending `decide`.
fn to_decide(wr: &Workrail, out: &ExecutionOutput) -> ExecutionOutput {
    let a = wr.continue_workflow(ack(out, "Planned.", vec![])).unwrap();
    let b = wr.continue_workflow(ack(&a, "Slice 1.", vec![])).unwrap();
    assert_eq!(pending(&b), "decide");
    b
}

/// lock: L-PREF-NODE-ATTACHED, L-PREF-WARNINGS
#[test]
fn a_blocked_ack_records_its_preferences_on_the_attempted_node() {
    let fs = MemFs::new();
    let wr = open(&fs, 1);
    let root = start_with(&wr, None, vec![]).unwrap();
    let decide = to_decide(&wr, &root);
    let n = node_of(&decide);
    let before = log(&wr, &decide).len();
    // Guided plus aggressive, and no loop decision: blocked, judged under the new snapshot.
    let attempt = with_prefs(
        ack(&decide, "No decision yet.", vec![]),
        vec![PreferenceDelta::RiskPolicy(RiskPolicy::Aggressive)],
    );
    let blocked = wr.continue_workflow(attempt.clone()).unwrap();
    assert_eq!(blocked.kind, ExecutionKind::Blocked);
    assert_eq!(blocked.blockers[0].code, BlockerCode::MissingRequiredOutput);
    assert_eq!(
        blocked.preferences,
        prefs(Autonomy::Guided, RiskPolicy::Aggressive)
    );
    // The plan: the change and its warning on the attempted node, then the attempt's record.
    let events = log(&wr, &blocked);
    let plan: Vec<_> = events[before..]
        .iter()
        .map(|e| (e.kind(), e.scope().node_id().cloned()))
        .collect();
    assert_eq!(
        plan,
        [
            (EventKind::PreferencesChanged, Some(n.clone())),
            (EventKind::NodeOutputAppended, Some(n.clone())),
            (EventKind::AdvanceRecorded, Some(n.clone())),
        ]
    );
    assert!(
        matches!(events[before].data(), EventData::PreferencesChanged(p)
        if p.effective == blocked.preferences && p.source.as_str() == "user")
    );
    let warned = recorded_warnings(&fs, &events, &n);
    assert_eq!(warned.len(), 1);
    assert_eq!(warned[0].exceeded, [PreferenceKey::RiskPolicy]);
    assert_eq!(response_warning(&blocked).as_ref(), Some(&warned[0]));
    // Replaying the blocked ack is byte-identical (also after a restart).
    assert_eq!(
        json(&wr.continue_workflow(attempt.clone()).unwrap()),
        json(&blocked)
    );
    let wr = open(&fs, 2);
    assert_eq!(
        json(&wr.continue_workflow(attempt).unwrap()),
        json(&blocked)
    );
    // The change stays on the node: the retry from it (no delta) and its child use it.
    let retry = ack(&blocked, "Decided: stop.", vec![loop_control("stop")]);
    let next = wr.continue_workflow(retry).unwrap();
    assert_eq!(pending(&next), "wrap");
    assert_eq!(
        next.preferences,
        prefs(Autonomy::Guided, RiskPolicy::Aggressive)
    );
    // A delta that changes nothing records nothing, blocked or not.
    let b2 = to_decide(&wr, &start_with(&wr, None, vec![]).unwrap());
    let len = log(&wr, &b2).len();
    let same = wr
        .continue_workflow(with_prefs(
            ack(&b2, "Still deciding.", vec![]),
            vec![PreferenceDelta::Autonomy(Autonomy::Guided)],
        ))
        .unwrap();
    assert_eq!(same.kind, ExecutionKind::Blocked);
    let kinds: Vec<_> = log(&wr, &same)[len..]
        .iter()
        .map(SessionEvent::kind)
        .collect();
    assert_eq!(kinds, [EventKind::AdvanceRecorded]);
}

/// lock: L-PREF-NODE-ATTACHED
#[test]
fn older_tokens_restarts_and_later_changes_keep_each_nodes_preferences() {
    let fs = MemFs::new();
    let wr = open(&fs, 1);
    let root = start_with(&wr, None, vec![]).unwrap();
    // R -> A with a switch to never-stop: A carries it, R keeps guided.
    let a = wr
        .continue_workflow(with_prefs(
            ack(&root, "Planned.", vec![]),
            vec![PreferenceDelta::Autonomy(Autonomy::FullAutoNeverStop)],
        ))
        .unwrap();
    assert_eq!(a.preferences.autonomy, Autonomy::FullAutoNeverStop);
    // Durable across a restart: a new process sees each node's own snapshot.
    drop(wr);
    let wr = open(&fs, 2);
    let again_a = wr.continue_workflow(rehydrate(&a.state_token)).unwrap();
    assert_eq!(again_a.preferences.autonomy, Autonomy::FullAutoNeverStop);
    // Rewind: R's older token replays with R's preferences, and a fork from it inherits them.
    let old_r = wr.continue_workflow(rehydrate(&root.state_token)).unwrap();
    assert_eq!(old_r.preferences, EffectivePreferences::GUIDED);
    let fork = wr
        .continue_workflow(ack(&old_r, "Planned again.", vec![]))
        .unwrap();
    assert_ne!(fork.state_token, a.state_token);
    assert_eq!(fork.preferences, EffectivePreferences::GUIDED);

    // A later change on a node that already has children applies from then on only.
    let decide = to_decide(&wr, &root_of_new_run(&wr));
    let first = ack(&decide, "Stop.", vec![loop_control("stop")]);
    let child = wr.continue_workflow(first.clone()).unwrap();
    assert_eq!(pending(&child), "wrap");
    let fresh = wr
        .continue_workflow(rehydrate(&decide.state_token))
        .unwrap();
    let blocked = wr
        .continue_workflow(with_prefs(
            ack(&fresh, "Undecided.", vec![]),
            vec![PreferenceDelta::RiskPolicy(RiskPolicy::Balanced)],
        ))
        .unwrap();
    assert_eq!(blocked.kind, ExecutionKind::Blocked);
    assert_eq!(blocked.preferences.risk_policy, RiskPolicy::Balanced);
    let child_now = wr.continue_workflow(rehydrate(&child.state_token)).unwrap();
    assert_eq!(
        child_now.preferences,
        EffectivePreferences::GUIDED,
        "an existing child keeps the snapshot it was created with"
    );
    assert_eq!(
        json(&wr.continue_workflow(first).unwrap()),
        json(&child),
        "an older ack replays with the preferences of its time"
    );
    let decide_now = wr
        .continue_workflow(rehydrate(&decide.state_token))
        .unwrap();
    assert_eq!(decide_now.preferences.risk_policy, RiskPolicy::Balanced);
}

fn root_of_new_run(wr: &Workrail) -> ExecutionOutput {
    start_with(wr, None, vec![]).unwrap()
}

/// lock: L-PREF-PRECEDENCE, L-PREF-GLOBAL-COPIED
#[test]
fn node_changes_beat_the_run_baseline_which_beats_global_defaults() {
    let fs = MemFs::new();
    let config = Path::new("config/preferences.json");
    // No config: the global defaults (the guided preset).
    let wr = open(&fs, 1);
    assert_eq!(
        start_with(&wr, None, vec![]).unwrap().preferences,
        EffectivePreferences::GUIDED
    );
    // A global config (a preset plus an override) is copied into each new run's baseline ...
    fs.create_dir_all(Path::new("config")).unwrap();
    fs.write_new(
        config,
        br#"{"preset": "full_auto_stop_on_user_deps", "riskPolicy": "conservative"}"#,
    )
    .unwrap();
    let run = start_with(&wr, None, vec![]).unwrap();
    let baseline = prefs(Autonomy::FullAutoStopOnUserDeps, RiskPolicy::Conservative);
    assert_eq!(run.preferences, baseline);
    // ... a call's own choice wins over it for the keys it sets ...
    let mine = start_with(
        &wr,
        None,
        vec![PreferenceDelta::RiskPolicy(RiskPolicy::Balanced)],
    )
    .unwrap();
    assert_eq!(
        mine.preferences,
        prefs(Autonomy::FullAutoStopOnUserDeps, RiskPolicy::Balanced)
    );
    // ... and a node-attached change wins over the baseline from that node on.
    let node = wr
        .continue_workflow(with_prefs(
            ack(&run, "Planned.", vec![]),
            vec![PreferenceDelta::Autonomy(Autonomy::Guided)],
        ))
        .unwrap();
    assert_eq!(
        node.preferences,
        prefs(Autonomy::Guided, RiskPolicy::Conservative)
    );
    // Changing the global config later never rewrites existing runs, even after a restart.
    fs.write_new(
        config,
        br#"{"preset": "full_auto_never_stop", "riskPolicy": "aggressive"}"#,
    )
    .unwrap();
    drop(wr);
    let wr = open(&fs, 2);
    assert_eq!(
        wr.continue_workflow(rehydrate(&run.state_token))
            .unwrap()
            .preferences,
        baseline
    );
    assert_eq!(
        wr.continue_workflow(rehydrate(&node.state_token))
            .unwrap()
            .preferences,
        prefs(Autonomy::Guided, RiskPolicy::Conservative)
    );
    let next = wr.continue_workflow(ack(&node, "Slice.", vec![])).unwrap();
    assert_eq!(
        next.preferences,
        prefs(Autonomy::Guided, RiskPolicy::Conservative)
    );
    // New runs take the new config.
    assert_eq!(
        start_with(&wr, None, vec![]).unwrap().preferences,
        prefs(Autonomy::FullAutoNeverStop, RiskPolicy::Aggressive)
    );
}

/// lock: L-PREF-PRESETS
#[test]
fn presets_select_the_locked_pairs_and_explicit_keys_override_them() {
    let fs = MemFs::new();
    let wr = open(&fs, 1);
    for (preset, expected) in [
        (ModePreset::Guided, EffectivePreferences::GUIDED),
        (
            ModePreset::FullAutoStopOnUserDeps,
            prefs(Autonomy::FullAutoStopOnUserDeps, RiskPolicy::Balanced),
        ),
        (
            ModePreset::FullAutoNeverStop,
            prefs(Autonomy::FullAutoNeverStop, RiskPolicy::Conservative),
        ),
    ] {
        assert_eq!(
            start_with(&wr, Some(preset), vec![]).unwrap().preferences,
            expected
        );
    }
    let mixed = start_with(
        &wr,
        Some(ModePreset::FullAutoNeverStop),
        vec![PreferenceDelta::RiskPolicy(RiskPolicy::Balanced)],
    )
    .unwrap();
    assert_eq!(
        mixed.preferences,
        prefs(Autonomy::FullAutoNeverStop, RiskPolicy::Balanced)
    );
    // On an ack, a preset switches mode from the new node on.
    let mut input = ack(&mixed, "Planned.", vec![]);
    input.preset = Some(ModePreset::Guided);
    let guided = wr.continue_workflow(input).unwrap();
    assert_eq!(guided.preferences, EffectivePreferences::GUIDED);
    // The same key twice is refused before anything is written; so is a preset on a rehydrate.
    let err = start_with(
        &wr,
        None,
        vec![
            PreferenceDelta::Autonomy(Autonomy::Guided),
            PreferenceDelta::Autonomy(Autonomy::FullAutoNeverStop),
        ],
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::ValidationError);
    assert!(
        err.message.contains("`autonomy` more than once"),
        "{}",
        err.message
    );
    let before = log(&wr, &guided).len();
    let dup = with_prefs(
        ack(&guided, "Slice.", vec![]),
        vec![
            PreferenceDelta::RiskPolicy(RiskPolicy::Balanced),
            PreferenceDelta::RiskPolicy(RiskPolicy::Aggressive),
        ],
    );
    assert_eq!(
        wr.continue_workflow(dup).unwrap_err().code,
        ErrorCode::ValidationError
    );
    assert_eq!(log(&wr, &guided).len(), before, "nothing was written");
    let mut look = rehydrate(&guided.state_token);
    look.preset = Some(ModePreset::FullAutoNeverStop);
    let err = wr.continue_workflow(look).unwrap_err();
    assert_eq!(err.code, ErrorCode::ValidationError);
    assert!(err.message.contains("`preset`"), "{}", err.message);
}

/// Runs `plan`, `implement`, then an ack of `decide` without a decision under `start`
/// preferences; returns (that response, the log without preference records).
/// The response to acknowledging `decide` without a decision, the recorded shape of the log, and
/// the preference warning the run's start showed (decision D175: shown where preferences change).
fn guardrail_run(
    start: EffectivePreferences,
) -> (ExecutionOutput, Vec<Value>, Option<PreferenceWarningV1>) {
    let fs = MemFs::new();
    let wr = open(&fs, 1);
    let root = start_with(
        &wr,
        None,
        vec![
            PreferenceDelta::Autonomy(start.autonomy),
            PreferenceDelta::RiskPolicy(start.risk_policy),
        ],
    )
    .unwrap();
    let decide = to_decide(&wr, &root);
    let out = wr
        .continue_workflow(ack(&decide, "No decision.", vec![]))
        .unwrap();
    let shape = log(&wr, &out)
        .iter()
        .filter(|e| match e.data() {
            EventData::PreferencesChanged(_) => false,
            EventData::NodeOutputAppended(o) => !matches!(&o.payload,
                OutputPayload::ArtifactRef { content_type, .. } if content_type == PREFERENCE_WARNING_CONTENT_TYPE),
            _ => true,
        })
        .map(|e| {
            let mut v = serde_json::to_value(e.data()).unwrap();
            // Ids are random per process; what happened is what must match.
            for key in ["gapId", "outputId", "attemptId", "eventId", "toNodeId", "fromNodeId", "snapshotRef", "traceId", "workflowHash"] {
                strip(&mut v, key);
            }
            serde_json::json!({"kind": e.kind(), "data": v})
        })
        .collect();
    (out, shape, response_warning(&root))
}

fn strip(v: &mut Value, key: &str) {
    match v {
        Value::Object(map) => {
            map.remove(key);
            for child in map.values_mut() {
                strip(child, key);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|c| strip(c, key)),
        _ => {}
    }
}

/// lock: L-PREF-RISK-GUARDRAILS
#[test]
fn risk_policy_never_bends_contracts_tokens_or_disclosure() {
    for autonomy in [Autonomy::Guided, Autonomy::FullAutoNeverStop] {
        let (careful, careful_log, careful_warned) =
            guardrail_run(prefs(autonomy, RiskPolicy::Conservative));
        let (bold, bold_log, bold_warned) = guardrail_run(prefs(autonomy, RiskPolicy::Aggressive));
        // The missing decision is judged the same way: the same blockers (blocking mode) or the
        // same disclosed gap (never-stop); the same step, intent and token kinds.
        assert_eq!(careful.kind, bold.kind, "{autonomy}");
        assert_eq!(careful.blockers, bold.blockers, "{autonomy}");
        assert_eq!(careful.pending, bold.pending, "{autonomy}");
        assert_eq!(careful.next_intent, bold.next_intent, "{autonomy}");
        assert_eq!(careful.run.status, bold.run.status, "{autonomy}");
        assert_eq!(
            (
                careful.ack_token.is_some(),
                careful.checkpoint_token.is_some()
            ),
            (bold.ack_token.is_some(), bold.checkpoint_token.is_some())
        );
        // The durable record is the same, apart from the preference records themselves: same
        // events, edges and causes, outputs, gaps and advance outcomes.
        assert_eq!(careful_log, bold_log, "{autonomy}");
        // Aggressive is above this workflow's recommendation: it only adds to the warning.
        let risk_warned = |warned: &Option<PreferenceWarningV1>| {
            warned
                .as_ref()
                .is_some_and(|w| w.exceeded.contains(&PreferenceKey::RiskPolicy))
        };
        assert!(
            !risk_warned(&careful_warned) && risk_warned(&bold_warned),
            "{autonomy}"
        );
    }
    let (blocked, _, _) = guardrail_run(prefs(Autonomy::Guided, RiskPolicy::Aggressive));
    assert_eq!(
        blocked.kind,
        ExecutionKind::Blocked,
        "aggressive never bypasses a contract"
    );
    let (gapped, log, _) =
        guardrail_run(prefs(Autonomy::FullAutoNeverStop, RiskPolicy::Aggressive));
    assert_eq!(gapped.kind, ExecutionKind::Ok);
    assert!(
        log.iter()
            .any(|e| e["kind"] == "gap_recorded" && e["data"]["severity"] == "critical"),
        "aggressive never suppresses disclosure"
    );
}

/// lock: L-PREF-CLOSED-SET
#[test]
fn workflows_and_callers_cannot_add_preference_keys() {
    const EXTRA: &str = r#"{
      "id": "project.verbose",
      "name": "Verbose",
      "description": "Tries to recommend a preference WorkRail does not have.",
      "recommendations": {"recommendedAutonomy": "guided", "recommendedVerbosity": "high"},
      "steps": [{"id": "only", "title": "Only", "prompt": "Do it."}]
    }"#;
    let catalog = catalog_with(&[("project/workflows/verbose.json", EXTRA)])();
    assert!(catalog.resolve("project.verbose").is_none());
    let problem = catalog
        .problems()
        .iter()
        .find(|p| p.workflow_id.as_deref() == Some("project.verbose"))
        .expect("the workflow is rejected");
    let envelope = problem.to_envelope();
    assert!(
        format!("{} {}", envelope.message, envelope.suggestion).contains("recommendedVerbosity"),
        "{envelope:?}"
    );
    // Callers: an unknown key or value never reaches the protocol.
    for bad in [
        serde_json::json!({"workflowId": "project.recs", "preferences": [{"key": "verbosity", "value": "high"}]}),
        serde_json::json!({"workflowId": "project.recs", "preferences": [{"key": "autonomy", "value": "turbo"}]}),
        serde_json::json!({"workflowId": "project.recs", "preset": "turbo"}),
    ] {
        assert!(
            serde_json::from_value::<StartWorkflowInput>(bad.clone()).is_err(),
            "{bad}"
        );
    }
}

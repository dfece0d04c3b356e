//! Output contracts at advance time: loop-control and other contract artifacts are validated
//! against the schema embedded in the compiled snapshot (with the `jsonschema` crate), and a
//! missing or invalid output blocks in blocking modes or becomes a critical gap in never-stop,
//! where a loop fails safe to "stop". Never an implicit loop exit in blocking modes.
//!
//! Guards against the silent loop no-op class (missing control output read as "exit"), against
//! contracts checked by hand-written code that drifts from the pinned schema, and against
//! blockers whose pointer or code the protocol layer would have to guess.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use workrail::builtins::contracts::CONTRACTS;
use workrail::compiler::{CompileContext, compile};
use workrail::engine::{self, AdvanceOutcome, Blocked, FindingDetail, Transition};
use workrail_spec::blocker::{BlockerCode, BlockerPointer};
use workrail_spec::closed::{Autonomy, Capability, GapSeverity};
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::snapshot::{EngineState, Pending};
use workrail_spec::tools::OutputInput;

const BLOCKING: [Autonomy; 2] = [Autonomy::Guided, Autonomy::FullAutoStopOnUserDeps];
const NEVER_STOP: Autonomy = Autonomy::FullAutoNeverStop;

fn compiled(src: Value) -> CompiledWorkflowSnapshotV1 {
    compile(&src, &CompileContext::load("project"))
        .unwrap_or_else(|e| panic!("{e}"))
        .snapshot
}

fn loop_workflow() -> CompiledWorkflowSnapshotV1 {
    compiled(json!({
        "id": "project.loop", "name": "Loop", "description": "A loop.",
        "conditions": [{"id": "go", "kind": "loop_control", "continueWhen": "continue"}],
        "steps": [
            {"type": "loop", "loopId": "pass", "while": {"kind": "condition_ref", "conditionId": "go"}, "maxIterations": 3, "body": [
                {"id": "decide", "title": "Decide", "prompt": "Decide.", "output": {"contractRef": "wr.contracts.loop_control"}}
            ]},
            {"id": "after", "title": "After", "prompt": "Wrap up."}
        ]
    }))
}

fn artifacts(items: Vec<Value>) -> OutputInput {
    OutputInput {
        notes_markdown: None,
        artifacts: items
            .into_iter()
            .map(|v| v.as_object().unwrap().clone())
            .collect(),
    }
}

fn at(state: &EngineState) -> String {
    match state {
        EngineState::Complete => "complete".into(),
        EngineState::Running {
            pending: Pending::Some { step },
            ..
        } => step.instance_key().to_string(),
        other => panic!("unexpected {other:?}"),
    }
}

fn blocked(outcome: AdvanceOutcome) -> Blocked {
    match outcome {
        AdvanceOutcome::Blocked(b) => b,
        other => panic!("expected blocked, got {other:?}"),
    }
}

fn moved(outcome: AdvanceOutcome) -> Transition {
    match outcome {
        AdvanceOutcome::Advanced(t) | AdvanceOutcome::Complete(t) => t,
        AdvanceOutcome::Blocked(b) => panic!("unexpectedly blocked: {b:?}"),
    }
}

fn start(c: &CompiledWorkflowSnapshotV1) -> EngineState {
    engine::start(c, &EngineState::Init).unwrap().state
}

/// lock: L-LOOP-MISSING-CONTROL-BLOCKING, L-AUTHOR-CONTRACT-ENFORCED, L-REASON-BLOCKING-MODES
#[test]
fn missing_loop_control_blocks_in_blocking_modes_and_never_exits() {
    let c = loop_workflow();
    let state = start(&c);
    for autonomy in BLOCKING {
        let b = blocked(engine::advance(&c, &state, &OutputInput::default(), autonomy).unwrap());
        let report = b.blocker_report().unwrap();
        let blocker = &report.blockers()[0];
        assert_eq!(blocker.code, BlockerCode::MissingRequiredOutput);
        assert_eq!(
            blocker.pointer,
            BlockerPointer::OutputContract {
                contract_ref: "wr.contracts.loop_control".into()
            }
        );
        assert!(
            blocker.message.as_str().contains("'wr.loop_control'"),
            "{}",
            blocker.message.as_str()
        );
        // The fix carries an example with the enclosing loop's id.
        assert!(
            blocker
                .suggested_fix
                .as_ref()
                .unwrap()
                .as_str()
                .contains("\"loopId\":\"pass\"")
        );
        assert_eq!(
            b.findings[0].reason.to_string(),
            "contract_violation:missing_required_output"
        );
        assert_eq!(
            b.gaps().count(),
            0,
            "contract blockers are accounted for by advance_recorded"
        );
    }
}

/// lock: L-LOOP-MISSING-CONTROL-NEVER-STOP, L-REASON-NEVER-STOP, L-LOOP-TERMINATION-REASON
#[test]
fn missing_loop_control_in_never_stop_is_a_critical_gap_and_the_loop_stops() {
    let c = loop_workflow();
    let t = moved(engine::advance(&c, &start(&c), &OutputInput::default(), NEVER_STOP).unwrap());
    assert_eq!(at(&t.state), "after");
    assert_eq!(t.gaps.len(), 1);
    assert_eq!(
        t.gaps[0].reason.to_string(),
        "contract_violation:missing_required_output"
    );
    assert_eq!(t.gaps[0].gap_severity(), Some(GapSeverity::Critical));
    assert!(!t.gaps[0].disposition.blocks);
    assert!(
        t.trace[0].summary.contains("treated as stop"),
        "{}",
        t.trace[0].summary
    );
}

/// lock: L-LOOP-CONTROL-ARTIFACT, L-LOOP-MISSING-CONTROL-BLOCKING
#[test]
fn invalid_loop_control_is_an_invalid_required_output_with_the_field() {
    let c = loop_workflow();
    let state = start(&c);
    let cases = [
        (
            json!({"kind": "wr.loop_control", "loopId": "pass", "decision": "maybe"}),
            "/decision",
        ),
        (json!({"kind": "wr.loop_control", "loopId": "pass"}), ""),
        (
            json!({"kind": "wr.loop_control", "loopId": "pass", "decision": "stop", "extra": 1}),
            "",
        ),
        (
            json!({"kind": "wr.loop_control", "loopId": "other", "decision": "stop"}),
            "/loopId",
        ),
        // 300 two-byte characters: under 512 characters, over 512 bytes.
        (
            json!({"kind": "wr.loop_control", "loopId": "pass", "decision": "stop", "summary": "é".repeat(300)}),
            "/summary",
        ),
    ];
    for (artifact, path) in cases {
        let b = blocked(
            engine::advance(
                &c,
                &state,
                &artifacts(vec![artifact.clone()]),
                Autonomy::Guided,
            )
            .unwrap(),
        );
        let f = &b.findings[0];
        assert_eq!(
            f.reason.to_string(),
            "contract_violation:invalid_required_output",
            "{artifact}"
        );
        let FindingDetail::Contract {
            problems, example, ..
        } = &f.detail
        else {
            panic!()
        };
        assert_eq!(problems[0].instance_path, path, "{artifact}: {problems:?}");
        assert_eq!(example["loopId"], "pass");
        assert_eq!(
            b.blocker_report().unwrap().blockers()[0].code,
            BlockerCode::InvalidRequiredOutput
        );
    }
    // A 512-byte summary is exactly within budget.
    let ok = json!({"kind": "wr.loop_control", "loopId": "pass", "decision": "stop", "summary": "é".repeat(256)});
    assert_eq!(
        at(
            &moved(engine::advance(&c, &state, &artifacts(vec![ok]), Autonomy::Guided).unwrap())
                .state
        ),
        "after"
    );
}

/// lock: L-LOOP-MISSING-CONTROL-NEVER-STOP
#[test]
fn invalid_loop_control_in_never_stop_stops_the_loop_with_a_gap() {
    let c = loop_workflow();
    let bad = artifacts(vec![
        json!({"kind": "wr.loop_control", "loopId": "pass", "decision": "continue", "summary": 5}),
    ]);
    let t = moved(engine::advance(&c, &start(&c), &bad, NEVER_STOP).unwrap());
    assert_eq!(at(&t.state), "after");
    assert_eq!(
        t.gaps[0].reason.to_string(),
        "contract_violation:invalid_required_output"
    );
}

/// lock: L-LOOP-CONTINUE-RULE, L-LOOP-CONTRACT-CONTROL
#[test]
fn the_most_recent_valid_artifact_decides_and_other_kinds_are_ignored() {
    let c = loop_workflow();
    let output = artifacts(vec![
        json!({"kind": "wr.loop_control", "loopId": "pass", "decision": "stop"}),
        json!({"kind": "workflow_divergence", "reason": "efficiency_skip", "summary": "skipped"}),
        json!({"kind": "wr.loop_control", "loopId": "pass", "decision": "continue"}),
    ]);
    let t = moved(engine::advance(&c, &start(&c), &output, Autonomy::Guided).unwrap());
    assert_eq!(at(&t.state), "pass@1::decide");
    // Only other kinds: the loop-control output is still missing.
    let other = artifacts(vec![json!({"kind": "notes", "text": "continue"})]);
    let b = blocked(engine::advance(&c, &t.state, &other, Autonomy::Guided).unwrap());
    assert_eq!(
        b.findings[0].reason.to_string(),
        "contract_violation:missing_required_output"
    );
}

fn report_workflow() -> CompiledWorkflowSnapshotV1 {
    compiled(json!({
        "id": "project.report", "name": "Report", "description": "Verify.",
        "steps": [
            {"id": "verify", "title": "Verify", "prompt": "Verify.", "output": {"contractRef": "wr.contracts.verification_report"}},
            {"id": "done", "title": "Done", "prompt": "Done."}
        ]
    }))
}

/// lock: L-AUTHOR-CONTRACT-ENFORCED, L-REASON-GAP-MAPPING, L-REASON-SINGLE-MODEL
#[test]
fn any_contract_step_blocks_or_records_a_gap_per_mode() {
    let c = report_workflow();
    let state = start(&c);
    let invalid = artifacts(vec![
        json!({"kind": "wr.verification_report", "checks": [{"check": "tests", "status": "pass"}]}),
    ]);
    for autonomy in BLOCKING {
        let b = blocked(engine::advance(&c, &state, &invalid, autonomy).unwrap());
        let FindingDetail::Contract { problems, .. } = &b.findings[0].detail else {
            panic!()
        };
        assert_eq!(problems[0].instance_path, "/checks/0");
        assert!(
            problems[0].message.contains("evidence"),
            "{}",
            problems[0].message
        );
        assert_eq!(
            b.blocker_report().unwrap().blockers()[0].code,
            BlockerCode::InvalidRequiredOutput
        );
        let missing =
            blocked(engine::advance(&c, &state, &OutputInput::default(), autonomy).unwrap());
        assert_eq!(
            missing.blocker_report().unwrap().blockers()[0].code,
            BlockerCode::MissingRequiredOutput
        );
    }
    let t = moved(engine::advance(&c, &state, &invalid, NEVER_STOP).unwrap());
    assert_eq!(at(&t.state), "done");
    let gap = &t.gaps[0];
    assert_eq!(gap.gap_severity(), Some(GapSeverity::Critical));
    assert_eq!(
        gap.reason.gap_reason(),
        workrail_spec::reason::GapReason::ContractViolation(
            workrail_spec::reason::ContractViolationReason::InvalidRequiredOutput
        )
    );
    let valid = artifacts(vec![
        json!({"kind": "wr.verification_report", "checks": [{"check": "tests", "status": "pass", "evidence": "42 passed"}]}),
    ]);
    let t = moved(engine::advance(&c, &state, &valid, Autonomy::Guided).unwrap());
    assert!(t.gaps.is_empty());
    assert_eq!(at(&t.state), "done");
}

/// lock: L-AUTHOR-CONTRACT-ENFORCED, L-AUTHOR-CONTRACT-PACKS
#[test]
fn the_example_in_a_blocked_response_satisfies_the_contract() {
    let c = report_workflow();
    let state = start(&c);
    let b =
        blocked(engine::advance(&c, &state, &OutputInput::default(), Autonomy::Guided).unwrap());
    let FindingDetail::Contract { example, .. } = &b.findings[0].detail else {
        panic!()
    };
    let t = moved(
        engine::advance(
            &c,
            &state,
            &artifacts(vec![example.clone()]),
            Autonomy::Guided,
        )
        .unwrap(),
    );
    assert_eq!(at(&t.state), "done");
}

/// lock: L-AUTHOR-CONTRACT-PACKS
#[test]
fn every_pack_example_validates_against_its_schema_and_the_schemas_reject_junk() {
    for pack in CONTRACTS {
        let validator = engine::contract::validator(&pack.schema())
            .unwrap_or_else(|e| panic!("{}: {e}", pack.contract_ref));
        assert!(
            validator.is_valid(&pack.example()),
            "{} example is invalid",
            pack.contract_ref
        );
        assert_eq!(pack.example()["kind"], pack.artifact_kind);
        assert!(
            !validator.is_valid(&json!({"kind": pack.artifact_kind})),
            "{} accepts an empty artifact",
            pack.contract_ref
        );
        let mut extra = pack.example();
        extra
            .as_object_mut()
            .unwrap()
            .insert("unexpected".into(), json!(1));
        assert!(
            !validator.is_valid(&extra),
            "{} accepts unknown fields",
            pack.contract_ref
        );
    }
}

fn probe_workflow(requirement: &str) -> CompiledWorkflowSnapshotV1 {
    compiled(json!({
        "id": "project.probe", "name": "Probe", "description": "Needs the web.",
        "capabilities": {"web_browsing": requirement},
        "steps": [
            {"type": "template_call", "templateId": "wr.templates.capability_probe", "args": {"capability": "web_browsing", "when": "early_if_required"}},
            {"id": "research", "title": "Research", "prompt": "Research."}
        ]
    }))
}

fn observation(status: &str) -> OutputInput {
    artifacts(vec![
        json!({"kind": "wr.capability_observation", "capability": "web_browsing", "status": status, "evidence": "Tried to fetch example.com.", "remediation": "Enable a browsing tool."}),
    ])
}

/// lock: L-CAP-OBSERVED-ONLY, L-REASON-BLOCKING-MODES, L-REASON-NEVER-STOP
#[test]
fn a_required_capability_reported_unavailable_blocks_or_records_a_gap() {
    let c = probe_workflow("required");
    let state = start(&c);
    assert_eq!(at(&state), "capability_probe_web_browsing");
    for autonomy in BLOCKING {
        let b =
            blocked(engine::advance(&c, &state, &observation("unavailable"), autonomy).unwrap());
        let blocker = &b.blocker_report().unwrap().blockers()[0].clone();
        assert_eq!(blocker.code, BlockerCode::RequiredCapabilityUnavailable);
        assert_eq!(
            blocker.pointer,
            BlockerPointer::Capability {
                capability: Capability::WebBrowsing
            }
        );
        assert!(
            blocker
                .suggested_fix
                .as_ref()
                .unwrap()
                .as_str()
                .contains("Enable a browsing tool.")
        );
    }
    let t = moved(engine::advance(&c, &state, &observation("unavailable"), NEVER_STOP).unwrap());
    assert_eq!(t.gaps[0].gap_severity(), Some(GapSeverity::Critical));
    assert_eq!(at(&t.state), "research");
    let ok =
        moved(engine::advance(&c, &state, &observation("available"), Autonomy::Guided).unwrap());
    assert!(ok.gaps.is_empty());
}

/// lock: L-REASON-BLOCKING-MODES
#[test]
fn a_preferred_capability_reported_unavailable_is_only_a_warning_gap() {
    let c = probe_workflow("preferred");
    // In every mode, never-stop included: a preferred capability never makes a run "complete
    // with gaps" (decision D39).
    for autonomy in Autonomy::ALL.iter().copied() {
        let t =
            moved(engine::advance(&c, &start(&c), &observation("unavailable"), autonomy).unwrap());
        assert_eq!(at(&t.state), "research", "{autonomy}");
        assert_eq!(t.gaps.len(), 1, "{autonomy}");
        assert_eq!(
            t.gaps[0].gap_severity(),
            Some(GapSeverity::Warning),
            "{autonomy}"
        );
        assert_eq!(
            t.gaps[0].reason.to_string(),
            "capability_missing:required_capability_unavailable"
        );
        // The observation itself is reported for the durable record.
        assert_eq!(t.reports.observations.len(), 1);
    }
}

/// lock: L-CAP-OBSERVED-ONLY, L-REASON-BLOCKING-MODES
#[test]
fn only_steps_after_the_first_probe_depend_on_a_required_capability() {
    use workrail::engine::reports::depends_on;
    let c = compiled(json!({
        "id": "project.deps", "name": "Deps", "description": "A lazy probe in the middle.",
        "capabilities": {"web_browsing": "required", "delegation": "preferred"},
        "steps": [
            {"id": "plan", "title": "Plan", "prompt": "Plan."},
            {"type": "template_call", "templateId": "wr.templates.capability_probe", "args": {"capability": "web_browsing", "when": "lazy_on_first_use"}},
            {"id": "research", "title": "Research", "prompt": "Research."}
        ]
    }));
    let dep = |id: &str, cap: Capability| {
        let step = c
            .step(&workrail_spec::ids::StepId::parse(id).unwrap())
            .unwrap();
        depends_on(&c, step, cap)
    };
    assert!(!dep("plan", Capability::WebBrowsing), "before the probe");
    assert!(
        !dep("capability_probe_web_browsing", Capability::WebBrowsing),
        "the probe learns, it does not depend"
    );
    assert!(dep("research", Capability::WebBrowsing));
    assert!(
        !dep("research", Capability::Delegation),
        "preferred capabilities never gate"
    );
    // Nothing known about the branch: the dependent step is unknown, the earlier one is not.
    let state = start(&c);
    let t = moved(engine::advance(&c, &state, &OutputInput::default(), Autonomy::Guided).unwrap());
    assert_eq!(at(&t.state), "capability_probe_web_browsing");
    let probe = artifacts(vec![
        json!({"kind": "wr.capability_observation", "capability": "web_browsing", "status": "available", "evidence": "Fetched a page."}),
    ]);
    let after_probe = moved(engine::advance(&c, &t.state, &probe, Autonomy::Guided).unwrap());
    assert_eq!(at(&after_probe.state), "research");
    // Without the branch facts (the protocol supplies them) the capability is unknown.
    let b = blocked(
        engine::advance(
            &c,
            &after_probe.state,
            &OutputInput::default(),
            Autonomy::Guided,
        )
        .unwrap(),
    );
    assert_eq!(
        b.blocker_report().unwrap().blockers()[0].code,
        BlockerCode::RequiredCapabilityUnknown
    );
    let branch = workrail::engine::BranchFacts {
        strong_status: [(
            Capability::WebBrowsing,
            workrail_spec::closed::CapabilityStatus::Available,
        )]
        .into_iter()
        .collect(),
        open_gaps: Vec::new(),
        ..Default::default()
    };
    let done = moved(
        engine::advance_on(
            &c,
            &after_probe.state,
            &OutputInput::default(),
            Autonomy::Guided,
            &branch,
        )
        .unwrap(),
    );
    assert!(done.gaps.is_empty());
}

/// lock: L-BLOCKER-BUDGETS, L-BLOCKER-BUDGET-FAIL-FAST
#[test]
fn findings_stay_within_blocker_budgets_even_for_huge_artifacts() {
    let c = report_workflow();
    let huge: Vec<Value> = (0..60)
        .map(|i| json!({"check": "x".repeat(2000), "status": "pass", "evidence": format!("{i}")}))
        .collect();
    let output = artifacts(vec![
        json!({"kind": "wr.verification_report", "checks": huge}),
    ]);
    let b = blocked(engine::advance(&c, &start(&c), &output, Autonomy::Guided).unwrap());
    let f = &b.findings[0];
    assert!(f.message.len() <= 512 && f.suggested_fix.len() <= 1024);
    let FindingDetail::Contract { problems, .. } = &f.detail else {
        panic!()
    };
    assert!(problems.len() <= 10);
    assert!(problems.iter().all(|p| p.message.len() <= 240));
    b.blocker_report().unwrap();
}

fn lane_workflow() -> CompiledWorkflowSnapshotV1 {
    compiled(json!({
        "id": "project.lane", "name": "Lane", "description": "A lane's last step.",
        "steps": [
            {"id": "build", "title": "Build", "prompt": "Build your slice.", "output": {"contractRef": "wr.contracts.block_output"}},
            {"id": "after", "title": "After", "prompt": "Done."}
        ]
    }))
}

fn block(edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> OutputInput {
    let pack = workrail::builtins::contracts::find("wr.contracts.block_output").unwrap();
    let mut artifact = pack.example().as_object().unwrap().clone();
    edit(&mut artifact);
    artifacts(vec![Value::Object(artifact)])
}

/// The block output a lane hands in: a valid one advances; a path that is absolute, leaves the
/// workspace, is not normalized or is listed twice, deliverables of another block type, a
/// timestamp that is not RFC 3339, a status or block type outside the closed sets, and a
/// missing field are each an invalid required output naming the field and saying what to send.
///
/// lock: L-AUTHOR-CONTRACT-ENFORCED, L-AUTHOR-CONTRACT-PACKS
/// decision: D160
#[test]
fn a_block_output_is_checked_for_relative_paths_matching_deliverables_and_closed_sets() {
    let c = lane_workflow();
    let s0 = start(&c);
    let ok = engine::advance(&c, &s0, &block(|_| {}), Autonomy::Guided).unwrap();
    assert_eq!(at(&moved(ok).state), "after");
    let cases: Vec<(&str, OutputInput, &str)> = vec![
        (
            "/filesModified/0",
            block(|a| {
                a.insert("filesModified".into(), json!(["/etc/passwd"]));
            }),
            "absolute",
        ),
        (
            "/filesCreated/1",
            block(|a| {
                a.insert("filesCreated".into(), json!(["docs/a.md", "../outside.md"]));
            }),
            "leaves the workspace",
        ),
        (
            "/filesModified/0",
            block(|a| {
                a.insert("filesModified".into(), json!(["./src/api/retry.rs"]));
            }),
            "not normalized",
        ),
        (
            "/filesModified/0",
            block(|a| {
                a.insert("filesModified".into(), json!(["C:/src/x.rs"]));
            }),
            "drive letter",
        ),
        (
            "/deliverables/filesChanged/1",
            block(|a| {
                a["deliverables"]["filesChanged"] = json!(["src/a.rs", "src/a.rs"]);
            }),
            "listed twice",
        ),
        (
            "/deliverables/blockType",
            block(|a| {
                a.insert("blockType".into(), json!("review"));
            }),
            "a review block delivers \"generic\"",
        ),
        (
            "/timestamp",
            block(|a| {
                a.insert("timestamp".into(), json!("yesterday"));
            }),
            "RFC 3339",
        ),
        (
            "/status",
            block(|a| {
                a.insert("status".into(), json!("done"));
            }),
            "",
        ),
        (
            "",
            block(|a| {
                a.remove("filesCreated");
            }),
            "filesCreated",
        ),
    ];
    for (pointer, output, says) in cases {
        let b = blocked(engine::advance(&c, &s0, &output, Autonomy::Guided).unwrap());
        assert_eq!(b.findings.len(), 1, "{pointer}: {:?}", b.findings);
        let finding = &b.findings[0];
        let FindingDetail::Contract { problems, .. } = &finding.detail else {
            panic!("{pointer}: {:?}", finding.detail)
        };
        let problem = problems
            .iter()
            .find(|p| p.instance_path == pointer)
            .unwrap_or_else(|| panic!("{pointer}: {problems:?}"));
        assert!(
            problem.message.contains(says),
            "{pointer}: {}",
            problem.message
        );
        assert_eq!(
            finding.to_blocker().unwrap().code,
            BlockerCode::InvalidRequiredOutput,
            "{pointer}"
        );
    }
}

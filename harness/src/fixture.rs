//! The workflow the harness drives, the catalog that serves it, and the outputs an agent sends.
//!
//! `project.harness` is small but reaches every branch the protocol has: a plain step, a
//! `loop_control` loop of at most two iterations whose decision step carries the
//! `wr.contracts.loop_control` contract (missing, malformed, `continue`, `stop`, and `continue`
//! at the last iteration, which is a loop-limit failure), a step with the
//! `wr.contracts.verification_report` contract, and a final step, so runs complete. It recommends
//! at most `full_auto_stop_on_user_deps` with `balanced`, so generated preferences above either
//! record preference warnings (`L-PREF-WARNINGS`).

use std::sync::{Arc, OnceLock};

use serde_json::{Map, Value, json};
use workrail::protocol::CatalogLoader;
use workrail::sources::memory::MemorySource;
use workrail::sources::{Catalog, WorkflowSource};
use workrail_spec::closed::WorkflowSourceKind;
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::tools::OutputInput;

/// The id of the harness workflow.
pub const WORKFLOW_ID: &str = "project.harness";

/// Where the catalog says the workflow comes from (the file name the stdio server reads too).
pub const WORKFLOW_FILE: &str = "harness.json";

/// The harness workflow's authoring JSON.
pub const WORKFLOW_JSON: &str = r#"{
  "id": "project.harness",
  "name": "Harness",
  "description": "Plan, then a bounded build loop, then verify and wrap up.",
  "recommendations": {"recommendedAutonomy": "full_auto_stop_on_user_deps", "recommendedRiskPolicy": "balanced"},
  "conditions": [{"id": "again", "kind": "loop_control", "continueWhen": "continue"}],
  "steps": [
    {"id": "plan", "title": "Plan", "prompt": "Plan the work."},
    {"type": "loop", "loopId": "build", "while": {"kind": "condition_ref", "conditionId": "again"}, "maxIterations": 2,
     "body": [
       {"id": "implement", "title": "Implement", "prompt": "Implement the next slice."},
       {"id": "decide", "title": "Decide", "prompt": "Decide whether another iteration is needed.", "output": {"contractRef": "wr.contracts.loop_control"}}
     ]},
    {"id": "verify", "title": "Verify", "prompt": "Verify the result.", "output": {"contractRef": "wr.contracts.verification_report"}},
    {"id": "wrap", "title": "Wrap up", "prompt": "Summarize what was done."}
  ]
}"#;

/// A plain workflow of three steps (no loop, no contract).
pub const LINEAR_ID: &str = "project.linear";
pub const LINEAR_FILE: &str = "linear.json";
pub const LINEAR_JSON: &str = r#"{
  "id": "project.linear",
  "name": "Linear",
  "description": "Gather, draft, publish.",
  "steps": [
    {"id": "gather", "title": "Gather", "prompt": "Gather the facts."},
    {"id": "draft", "title": "Draft", "prompt": "Draft the text."},
    {"id": "publish", "title": "Publish", "prompt": "Publish it."}
  ]
}"#;

/// A workflow whose second step carries an output contract (`wr.contracts.verification_report`).
pub const REVIEW_ID: &str = "project.review";
pub const REVIEW_FILE: &str = "review.json";
pub const REVIEW_JSON: &str = r#"{
  "id": "project.review",
  "name": "Review",
  "description": "Read the change, then report the verification.",
  "steps": [
    {"id": "read", "title": "Read the change", "prompt": "Read the change."},
    {"id": "report", "title": "Report", "prompt": "Report what you verified.", "output": {"contractRef": "wr.contracts.verification_report"}},
    {"id": "close", "title": "Close", "prompt": "Close the review."}
  ]
}"#;

/// The workflows the multi-run harnesses start: `(id, file name, authoring JSON)`. The harness
/// workflow has a loop and contract steps; the other two are a plain one and a contract one.
pub const MULTI_WORKFLOWS: [(&str, &str, &str); 3] = [
    (WORKFLOW_ID, WORKFLOW_FILE, WORKFLOW_JSON),
    (LINEAR_ID, LINEAR_FILE, LINEAR_JSON),
    (REVIEW_ID, REVIEW_FILE, REVIEW_JSON),
];

/// A catalog serving [`MULTI_WORKFLOWS`] (compiled once per test process).
pub fn multi_catalog() -> CatalogLoader {
    static CATALOG: OnceLock<Arc<Catalog>> = OnceLock::new();
    Arc::new(|| {
        CATALOG
            .get_or_init(|| {
                let mut project = MemorySource::new(WorkflowSourceKind::Project);
                for (_, file, json) in MULTI_WORKFLOWS {
                    project = project.with(&format!("workflows/{file}"), json);
                }
                let sources: Vec<&dyn WorkflowSource> = vec![&project];
                let catalog = Catalog::load(&sources);
                assert!(
                    catalog.problems().is_empty(),
                    "the multi-run workflows do not compile: {:?}",
                    catalog.problems()
                );
                Arc::new(catalog)
            })
            .clone()
    })
}

/// The loop id of the harness workflow.
pub const LOOP_ID: &str = "build";

/// The in-memory catalog: the harness workflow as a project workflow (no bundled ones, so the
/// catalog loads fast; the stdio server serves the bundled ones too, which changes nothing here).
/// The catalog is compiled once per test process (the source never changes).
pub fn catalog() -> CatalogLoader {
    static CATALOG: OnceLock<Arc<Catalog>> = OnceLock::new();
    Arc::new(|| {
        CATALOG
            .get_or_init(|| {
                let project = MemorySource::new(WorkflowSourceKind::Project)
                    .with(&format!("workflows/{WORKFLOW_FILE}"), WORKFLOW_JSON);
                let sources: Vec<&dyn WorkflowSource> = vec![&project];
                Arc::new(Catalog::load(&sources))
            })
            .clone()
    })
}

/// The compiled snapshot the model is given: the one the production compiler pins, so both
/// sides run the same `workflowHash`.
pub fn compiled() -> CompiledWorkflowSnapshotV1 {
    static COMPILED: OnceLock<CompiledWorkflowSnapshotV1> = OnceLock::new();
    COMPILED
        .get_or_init(|| {
            let catalog = catalog()();
            match catalog.resolve(WORKFLOW_ID) {
                Some(resolved) => resolved.workflow.compiled.snapshot.clone(),
                None => panic!(
                    "the harness workflow does not compile: {:?}",
                    catalog.problems()
                ),
            }
        })
        .clone()
}

/// An artifact an agent may send with an ack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, arbitrary::Arbitrary)]
pub enum ArtifactSpec {
    /// A valid `wr.loop_control` artifact with `decision: "continue"`.
    LoopContinue,
    /// A valid `wr.loop_control` artifact with `decision: "stop"`.
    LoopStop,
    /// `wr.loop_control` for this loop with a decision outside the closed set (invalid).
    LoopBadDecision,
    /// `wr.loop_control` for this loop with a field the contract does not allow (invalid).
    LoopExtraField,
    /// `wr.loop_control` naming another loop (so, for this loop, missing).
    LoopOtherLoop,
    /// A valid `wr.verification_report` (the contract pack's own example).
    Verification,
    /// An artifact no contract asks for.
    Note(u8),
    /// A valid `wr.capability_observation` (D40).
    Observation(ObservationSpec),
    /// A `wr.capability_observation` the pack refuses, one of a few shapes.
    ObservationInvalid(u8),
    /// A `wr.user_only_dependency` report (D41): `reason` picks the reason (approvals and choices
    /// most often); for `needs_user_choice`, `choice` picks `scope_boundary` (the choice generated
    /// steps mark non-assumable) half the time, else `irreversible_action` (marked nowhere) or
    /// none; `supplied` reports that the user supplied it.
    UserDependency {
        reason: u8,
        choice: u8,
        supplied: bool,
    },
    /// A `wr.user_only_dependency` the pack refuses, one of a few shapes.
    UserDependencyInvalid(u8),
    /// A `workflow_divergence` marker (D42): `reason` picks the reason; `related` names no step,
    /// `s1` (a step of every generated workflow) or a step no workflow has.
    Divergence { reason: u8, related: u8 },
    /// A `workflow_divergence` the pack refuses (an empty summary).
    DivergenceInvalid,
    /// A valid `wr.block_output` (D160), a lane's report: `status` picks `completed` (most
    /// often), `partial` or `failed`; the bits of `files` pick which of three paths it lists
    /// (modified or created), so two lanes often list the same file.
    Block { status: u8, files: u8 },
    /// A `wr.block_output` its contract refuses (D160), one of eight shapes: an absolute path,
    /// a path leaving the workspace, a path listed twice, a status outside the closed set,
    /// deliverables the block type does not deliver, no summary, a summary over its budget,
    /// a timestamp that is not RFC 3339.
    BlockInvalid(u8),
}

/// The paths generated block outputs list: few, so lanes collide.
pub const BLOCK_FILES: [&str; 3] = ["src/lib.rs", "docs/guide.md", "src/parser.rs"];

/// A valid capability observation: which capability, what it says, on which basis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, arbitrary::Arbitrary)]
pub struct ObservationSpec {
    /// `delegation` when even, `web_browsing` when odd.
    pub capability: u8,
    pub available: bool,
    /// 0: an attempt with `basis` absent; 1: `basis: attempt`; 2: a claim (`claimedBy` absent);
    /// 3: a claim by the user.
    pub basis: u8,
    /// A failed attempt's `failureCode`: absent (0) or one of the four codes.
    pub failure: u8,
}

impl ObservationSpec {
    fn to_json(self) -> Value {
        let capability = ["delegation", "web_browsing"][usize::from(self.capability % 2)];
        let status = if self.available {
            "available"
        } else {
            "unavailable"
        };
        let mut a = json!({"kind": "wr.capability_observation", "capability": capability,
            "status": status, "evidence": format!("Tried {capability}.")});
        match self.basis % 4 {
            0 => {}
            1 => a["basis"] = json!("attempt"),
            2 => a["basis"] = json!("claim"),
            _ => {
                a["basis"] = json!("claim");
                a["claimedBy"] = json!("user");
            }
        }
        let codes = ["tool_missing", "tool_error", "policy_blocked", "unknown"];
        if self.basis % 4 < 2
            && !self.available
            && let Some(code) = usize::from(self.failure % 5)
                .checked_sub(1)
                .and_then(|i| codes.get(i))
        {
            a["failureCode"] = json!(code);
        }
        a
    }
}

impl ArtifactSpec {
    pub const ALL_FIXED: [ArtifactSpec; 6] = [
        Self::LoopContinue,
        Self::LoopStop,
        Self::LoopBadDecision,
        Self::LoopExtraField,
        Self::LoopOtherLoop,
        Self::Verification,
    ];

    pub fn to_json(self) -> Map<String, Value> {
        let value = match self {
            Self::LoopContinue => {
                json!({"kind": "wr.loop_control", "loopId": LOOP_ID, "decision": "continue", "summary": "again"})
            }
            Self::LoopStop => {
                json!({"kind": "wr.loop_control", "loopId": LOOP_ID, "decision": "stop"})
            }
            Self::LoopBadDecision => {
                json!({"kind": "wr.loop_control", "loopId": LOOP_ID, "decision": "maybe"})
            }
            Self::LoopExtraField => {
                json!({"kind": "wr.loop_control", "loopId": LOOP_ID, "decision": "stop", "why": "extra"})
            }
            Self::LoopOtherLoop => {
                json!({"kind": "wr.loop_control", "loopId": "elsewhere", "decision": "stop"})
            }
            Self::Verification => workrail::builtins::contracts::find(
                workrail::builtins::contracts::VERIFICATION_REPORT,
            )
            .map_or_else(
                || json!({"kind": "wr.verification_report"}),
                |p| p.example(),
            ),
            Self::Note(n) => json!({"kind": "harness.note", "n": n}),
            Self::Observation(spec) => spec.to_json(),
            Self::UserDependency {
                reason,
                choice,
                supplied,
            } => {
                // Approvals and choices are the common requests (so a `supplied` report often
                // finds the disclosure it resolves); the rest are rare.
                let reasons = [
                    "needs_user_approval",
                    "needs_user_approval",
                    "needs_user_choice",
                    "needs_user_choice",
                    "needs_user_choice",
                    "needs_user_secret_or_token",
                    "needs_user_account_access",
                    "needs_user_artifact",
                    "needs_user_environment_action",
                ];
                let reason = reasons[usize::from(reason) % reasons.len()];
                let mut a = json!({"kind": "wr.user_only_dependency", "reason": reason,
                    "summary": format!("Only the user can help: {reason}.")});
                if reason == "needs_user_choice" {
                    match choice % 4 {
                        0 | 1 => a["nonAssumableChoice"] = json!("scope_boundary"),
                        2 => a["nonAssumableChoice"] = json!("irreversible_action"),
                        _ => {}
                    }
                }
                if supplied {
                    a["status"] = json!("supplied");
                }
                a
            }
            Self::UserDependencyInvalid(n) => match n % 3 {
                0 => json!({"kind": "wr.user_only_dependency", "reason": "needs_user_patience",
                    "summary": "Wait."}),
                1 => json!({"kind": "wr.user_only_dependency", "reason": "needs_user_artifact",
                    "summary": "The spec.", "nonAssumableChoice": "scope_boundary"}),
                _ => json!({"kind": "wr.user_only_dependency", "reason": "needs_user_approval",
                    "summary": "Approve.", "status": "maybe"}),
            },
            Self::Divergence { reason, related } => {
                let reasons = [
                    "missing_user_context",
                    "capability_unavailable",
                    "efficiency_skip",
                    "safety_stop",
                    "policy_constraint",
                ];
                let reason = reasons[usize::from(reason % 5)];
                let mut a = json!({"kind": "workflow_divergence", "reason": reason,
                    "summary": format!("Diverged: {reason}.")});
                match related % 3 {
                    0 => {}
                    1 => a["relatedStepId"] = json!("s1"),
                    _ => a["relatedStepId"] = json!("nowhere"),
                }
                a
            }
            Self::Block { status, files } => {
                let status =
                    ["completed", "completed", "partial", "failed"][usize::from(status % 4)];
                let mut modified = Vec::new();
                let mut created = Vec::new();
                for (i, path) in BLOCK_FILES.iter().enumerate() {
                    if files & (1 << i) != 0 {
                        // The fourth bit moves the last listed path to `filesCreated`: a file one
                        // lane created and another modified collides all the same (D161).
                        modified.push(*path);
                    }
                }
                if files & 8 != 0
                    && let Some(last) = modified.pop()
                {
                    created.push(last);
                }
                json!({"kind": "wr.block_output", "blockId": "lane", "blockType": "review",
                    "status": status,
                    "deliverables": {"blockType": "generic", "summary": "Findings written down."},
                    "summary": format!("The lane's work is {status}."),
                    "filesModified": modified, "filesCreated": created,
                    "timestamp": "2026-11-28T10:00:00Z"})
            }
            Self::BlockInvalid(shape) => {
                let mut block = json!({"kind": "wr.block_output", "blockId": "lane",
                    "blockType": "review", "status": "completed",
                    "deliverables": {"blockType": "generic", "summary": "Findings written down."},
                    "summary": "The lane's work is completed.",
                    "filesModified": ["src/lib.rs"], "filesCreated": [],
                    "timestamp": "2026-11-28T10:00:00Z"});
                match shape % 8 {
                    0 => block["filesModified"] = json!(["/src/lib.rs"]),
                    1 => block["filesCreated"] = json!(["../outside.rs"]),
                    2 => block["filesModified"] = json!(["src/lib.rs", "src/lib.rs"]),
                    3 => block["status"] = json!("done"),
                    4 => {
                        block["deliverables"] = json!({"blockType": "code",
                            "filesChanged": ["src/lib.rs"], "diffSummary": "Changed."})
                    }
                    5 => {
                        if let Some(map) = block.as_object_mut() {
                            map.remove("summary");
                        }
                    }
                    6 => block["summary"] = json!("x".repeat(1025)),
                    _ => block["timestamp"] = json!("yesterday"),
                }
                block
            }
            Self::DivergenceInvalid => {
                json!({"kind": "workflow_divergence", "reason": "efficiency_skip", "summary": ""})
            }
            Self::ObservationInvalid(n) => match n % 4 {
                0 => json!({"kind": "wr.capability_observation", "capability": "web_browsing",
                    "status": "available", "evidence": "Worked.", "failureCode": "tool_error"}),
                1 => json!({"kind": "wr.capability_observation", "capability": "delegation",
                    "status": "unavailable", "evidence": "Failed.", "claimedBy": "agent"}),
                2 => json!({"kind": "wr.capability_observation", "capability": "web_browsing",
                    "status": "maybe", "evidence": "Unsure."}),
                _ => json!({"kind": "wr.capability_observation", "capability": "delegation",
                    "status": "available"}),
            },
        };
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }
}

/// What an agent sends as `output` with an ack.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, arbitrary::Arbitrary)]
pub struct OutputSpec {
    /// `Some(n)`: `notesMarkdown` is a short recap naming `n`.
    pub notes: Option<u8>,
    pub artifacts: Vec<ArtifactSpec>,
    /// The `context` delta sent with the ack (decision D139: the walk reads it).
    pub context: Option<ContextSpec>,
}

/// A context delta over the four keys generated workflows test (`mode`, `flag`, `rounds`,
/// `items`), each absent or one of a few values chosen to exercise the language's lenient
/// comparisons (case and spaces, numbers as text, yes/no as booleans, `null` deleting the key)
/// and the wrong types a loop must refuse.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, arbitrary::Arbitrary)]
pub struct ContextSpec {
    pub mode: Option<u8>,
    pub flag: Option<u8>,
    pub rounds: Option<u8>,
    pub items: Option<u8>,
}

impl ContextSpec {
    /// The delta as a JSON object (`null` values delete their key when merged).
    pub fn to_map(self) -> Map<String, Value> {
        let mut map = Map::new();
        let pick = |values: &[Value], n: u8| values[usize::from(n) % values.len()].clone();
        if let Some(n) = self.mode {
            map.insert(
                "mode".into(),
                pick(
                    &[json!("fast"), json!("slow"), json!(" FAST "), Value::Null],
                    n,
                ),
            );
        }
        if let Some(n) = self.flag {
            map.insert(
                "flag".into(),
                pick(
                    &[
                        json!(true),
                        json!(false),
                        json!("yes"),
                        json!("no"),
                        Value::Null,
                    ],
                    n,
                ),
            );
        }
        if let Some(n) = self.rounds {
            map.insert(
                "rounds".into(),
                pick(&[json!(0), json!(1), json!(2), json!("2"), Value::Null], n),
            );
        }
        if let Some(n) = self.items {
            map.insert(
                "items".into(),
                pick(
                    &[
                        json!([]),
                        json!(["api"]),
                        json!(["api", "ui"]),
                        json!("api"),
                        Value::Null,
                    ],
                    n,
                ),
            );
        }
        map
    }
}

/// The notes an [`OutputSpec`] sends: "Recap N: did the step.", or for `N` from
/// [`JSON_NOTES`] on, notes that are JSON (for the workflow language's `schema` rules): an
/// object, an object of the wrong shape, a JSON string holding an object, an array.
pub fn notes_text(n: u8) -> String {
    match n.checked_sub(JSON_NOTES) {
        Some(0) => r#"{"recap": 1, "done": true}"#.to_owned(),
        Some(1) => r#"{"recap": "one"}"#.to_owned(),
        Some(2) => r#""{\"recap\": 2, \"done\": true}""#.to_owned(),
        Some(3) => "[1, 2]".to_owned(),
        _ => format!("Recap {n}: did the step."),
    }
}

/// The first notes number that renders JSON notes ([`notes_text`]).
pub const JSON_NOTES: u8 = 100;

impl OutputSpec {
    /// The `output` field: `None` when there are neither notes nor artifacts.
    pub fn to_input(&self) -> Option<OutputInput> {
        if self.notes.is_none() && self.artifacts.is_empty() {
            return None;
        }
        Some(OutputInput {
            notes_markdown: self.notes.map(notes_text),
            artifacts: self.artifacts.iter().map(|a| a.to_json()).collect(),
        })
    }

    /// The same output for the model (which has no "absent output": absent is empty).
    pub fn to_model(&self) -> OutputInput {
        self.to_input().unwrap_or_default()
    }
}

/// A workflow in the WorkRail 3.x language (decision D139), spelled as 3.x files spell it: a
/// legacy dot-free id, `version`, a step whose `runCondition` reads the `mode` an earlier ack
/// sent, a `forEach` loop over the context array `items` (with `itemVar` and `indexVar`) whose
/// `runCondition` reads `flag`, and steps with `validationCriteria` (a rule list with a
/// conditional rule, and a rule with a message) listed in their prompts' `## Notes checks`.
///
/// It reads only the keys [`ContextSpec`] sets (`mode`, `flag`, `items`), so the generated
/// agents' context deltas steer it: a `mode` of `slow` adds the deep dive, an `items` of the wrong
/// type blocks the ack that reaches the loop, a falsy `flag` skips the loop. The notes
/// [`OutputSpec`] writes ("Recap N: did the step.") pass the review's checks always and the
/// summary's only for `N = 2`, so both advancing and blocked acks occur. The multi-process
/// clients start it with `items` and `flag` in the `start_workflow` context and send what each
/// pending step asks for (`crate::multiproc`).
pub const LANGUAGE_ID: &str = "language-suite";
pub const LANGUAGE_FILE: &str = "language-suite.json";
pub const LANGUAGE_JSON: &str = r#"{
  "id": "language-suite",
  "name": "Language suite",
  "description": "Survey, an optional deep dive, one review per item, then a checked summary.",
  "version": "2.1.0",
  "steps": [
    {"id": "survey", "title": "Survey", "prompt": "Survey the work on {{items}}. Then choose how to go on: send `context.mode` as `fast` or `slow`."},
    {"id": "deep-dive", "title": "Deep dive", "prompt": "Look deeper, in mode {{mode}}.", "runCondition": {"var": "mode", "equals": "slow"}},
    {"type": "loop", "id": "per-item", "title": "Per item",
     "runCondition": {"var": "flag"},
     "loop": {"type": "forEach", "items": "items", "itemVar": "area", "indexVar": "areaIndex", "maxIterations": 3},
     "body": [
       {"id": "review", "title": "Review {{area}}", "prompt": "Review {{area}} (item {{areaIndex}}).",
        "validationCriteria": [
          {"type": "contains", "value": "Recap"},
          {"type": "contains", "value": "did", "condition": {"var": "mode", "equals": "slow"}}
        ]}
     ]},
    {"id": "summary", "title": "Summary", "prompt": "Summarize what the reviews found.",
     "validationCriteria": {"type": "contains", "value": "Recap 2", "message": "Name the second recap in the summary."}}
  ]
}"#;

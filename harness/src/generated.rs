//! Generated source workflows, so the model-versus-production comparison is not limited to what
//! `project.harness` happens to contain.
//!
//! A generated workflow is valid by construction: plain steps, steps with the
//! `wr.contracts.verification_report` or the `wr.contracts.workflow_divergence` contract, loops nested up to three deep (`loop_control`
//! loops end with their decision step; `always_true` loops run to their limit; `always_false`
//! loops never run), `maxIterations` from 1 to 3, `nonAssumableChoices`, function definitions at
//! every scope, the text-only features (`durable_recap_guidance`, `mode_guidance`,
//! `output_contracts`), recommendations, and capabilities (`required`, `preferred` or `disabled`,
//! with `wr.features.capabilities` and authored `wr.templates.capability_probe` calls; a required
//! capability's probe is injected first when none is authored), so the steps that depend on a
//! required capability are judged `required_capability_unknown` (D40). The first `loop_control` loop is `build`, the loop
//! the generated agent outputs (`ArtifactSpec`) decide; any other `loop_control` loop is decided
//! by nobody, so its decision step is always missing its artifact.
//!
//! The generated agents (`ops::output_strategy`) send, on any step, `wr.capability_observation`
//! artifacts of every basis and status, `wr.user_only_dependency` reports (needed or supplied,
//! choices the step marks and choices it does not) and `workflow_divergence` markers, valid and
//! invalid (D40 to D42, D75 to D77).

use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use workrail::protocol::CatalogLoader;
use workrail::sources::memory::MemorySource;
use workrail::sources::{Catalog, WorkflowSource};
use workrail_spec::closed::WorkflowSourceKind;
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;

use crate::fixture;

/// The id every generated workflow has (one per harness case).
pub const GENERATED_ID: &str = "project.generated";
/// Its file name in the catalog.
pub const GENERATED_FILE: &str = "generated.json";

/// A workflow the harness drives: its id, catalog file, authoring JSON and compiled snapshot.
#[derive(Debug, Clone)]
pub struct WorkflowUnderTest {
    pub id: String,
    pub file: String,
    pub json: String,
    pub compiled: CompiledWorkflowSnapshotV1,
    /// The `context` every `start_workflow` of this workflow sends (empty: none).
    pub start_context: serde_json::Map<String, Value>,
    catalog: Arc<Catalog>,
}

impl WorkflowUnderTest {
    /// `project.harness`.
    pub fn harness() -> Self {
        Self::compile(
            fixture::WORKFLOW_ID,
            fixture::WORKFLOW_FILE,
            fixture::WORKFLOW_JSON,
        )
        .unwrap_or_else(|e| panic!("the harness workflow does not compile: {e}"))
    }

    /// Compiles `json` as the project workflow `file` that must define `id`.
    pub fn compile(id: &str, file: &str, json: &str) -> Result<Self, String> {
        Self::compile_with(id, file, json, &[])
    }

    /// [`Self::compile`], with `others` (`(file, json)`) beside it in the project source: the
    /// routines a parallel step's lanes run (decision D168).
    pub fn compile_with(
        id: &str,
        file: &str,
        json: &str,
        others: &[(&str, &str)],
    ) -> Result<Self, String> {
        let mut project =
            MemorySource::new(WorkflowSourceKind::Project).with(&format!("workflows/{file}"), json);
        for (other, text) in others {
            project = project.with(&format!("workflows/{other}"), text);
        }
        let sources: Vec<&dyn WorkflowSource> = vec![&project];
        let catalog = Arc::new(Catalog::load(&sources));
        let compiled = match catalog.resolve(id) {
            Some(resolved) => resolved.workflow.compiled.snapshot.clone(),
            None => return Err(format!("{id} does not compile: {:?}", catalog.problems())),
        };
        Ok(Self {
            id: id.to_owned(),
            file: file.to_owned(),
            json: json.to_owned(),
            compiled,
            start_context: serde_json::Map::new(),
            catalog,
        })
    }

    /// The same workflow, started with `context`.
    pub fn with_start_context(mut self, context: serde_json::Map<String, Value>) -> Self {
        self.start_context = context;
        self
    }

    /// A catalog serving this workflow alone.
    pub fn catalog(&self) -> CatalogLoader {
        let catalog = Arc::clone(&self.catalog);
        Arc::new(move || Arc::clone(&catalog))
    }
}

/// `project.harness`, compiled once per process.
pub fn harness_workflow() -> Arc<WorkflowUnderTest> {
    static HARNESS: std::sync::OnceLock<Arc<WorkflowUnderTest>> = std::sync::OnceLock::new();
    HARNESS
        .get_or_init(|| Arc::new(WorkflowUnderTest::harness()))
        .clone()
}

/// [`fixture::LANGUAGE_JSON`] (a workflow in the WorkRail 3.x language), its runs started with
/// `items: ["api", "ui"]` and `flag: true`, compiled once per process.
pub fn language_fixture_workflow() -> Arc<WorkflowUnderTest> {
    static LANGUAGE: std::sync::OnceLock<Arc<WorkflowUnderTest>> = std::sync::OnceLock::new();
    LANGUAGE
        .get_or_init(|| {
            let mut context = serde_json::Map::new();
            context.insert("items".into(), json!(["api", "ui"]));
            context.insert("flag".into(), json!(true));
            let workflow = WorkflowUnderTest::compile(
                fixture::LANGUAGE_ID,
                fixture::LANGUAGE_FILE,
                fixture::LANGUAGE_JSON,
            )
            .unwrap_or_else(|e| panic!("the language fixture workflow does not compile: {e}"));
            Arc::new(workflow.with_start_context(context))
        })
        .clone()
}

/// The shape of one generated step list item.
#[derive(Debug, Clone)]
enum Item {
    Plain {
        choices: bool,
        calls_log: bool,
    },
    Verify,
    /// A step whose contract requires a divergence marker (`wr.contracts.workflow_divergence`).
    Diverge,
    /// A `wr.templates.capability_probe` call (each capability probed at most once).
    Probe(u8),
    Loop {
        kind: LoopKind,
        max: u8,
        body: Vec<Item>,
        functions: bool,
    },
}

#[derive(Debug, Clone, Copy)]
enum LoopKind {
    Control,
    AlwaysTrue,
    AlwaysFalse,
}

fn item(depth: u32) -> BoxedStrategy<Item> {
    let leaf = prop_oneof![
        3 => (any::<bool>(), any::<bool>())
            .prop_map(|(choices, calls_log)| Item::Plain { choices, calls_log }),
        1 => Just(Item::Verify),
        1 => Just(Item::Diverge),
        1 => (0u8..2).prop_map(Item::Probe),
    ];
    if depth == 0 {
        return leaf.boxed();
    }
    let kind = prop_oneof![
        4 => Just(LoopKind::Control),
        1 => Just(LoopKind::AlwaysTrue),
        1 => Just(LoopKind::AlwaysFalse),
    ];
    prop_oneof![
        3 => leaf,
        2 => (kind, 1u8..4, prop::collection::vec(item(depth - 1), 1..3), any::<bool>())
            .prop_map(|(kind, max, body, functions)| Item::Loop { kind, max, body, functions }),
    ]
    .boxed()
}

/// Renders items into steps, numbering step and loop ids in document order.
struct Writer {
    probed: Vec<&'static str>,
    steps: usize,
    loops: usize,
    control_loops: usize,
}

impl Writer {
    fn list(&mut self, items: &[Item]) -> Vec<Value> {
        items.iter().map(|i| self.one(i)).collect()
    }

    fn one(&mut self, item: &Item) -> Value {
        match item {
            Item::Plain { choices, calls_log } => {
                let id = self.step_id();
                let prompt = if *calls_log {
                    format!("Do part {id}, then call update_log().")
                } else {
                    format!("Do part {id}.")
                };
                let mut step = json!({"id": id, "title": format!("Step {id}"), "prompt": prompt});
                if *choices {
                    step["nonAssumableChoices"] = json!(["scope_boundary"]);
                }
                step
            }
            Item::Probe(n) => {
                let capability = ["delegation", "web_browsing"][usize::from(*n) % 2];
                if self.probed.contains(&capability) {
                    let id = self.step_id();
                    return json!({"id": id, "title": format!("Step {id}"), "prompt": format!("Do part {id}.")});
                }
                self.probed.push(capability);
                json!({"type": "template_call", "templateId": "wr.templates.capability_probe",
                       "args": {"capability": capability, "when": "lazy_on_first_use"}})
            }
            Item::Verify => {
                let id = self.step_id();
                json!({"id": id, "title": format!("Verify {id}"), "prompt": "Verify the result.",
                       "output": {"contractRef": "wr.contracts.verification_report"}})
            }
            Item::Diverge => {
                let id = self.step_id();
                json!({"id": id, "title": format!("Deviate {id}"),
                       "prompt": "Skip the usual survey and say why.",
                       "output": {"contractRef": "wr.contracts.workflow_divergence"}})
            }
            Item::Loop {
                kind,
                max,
                body,
                functions,
            } => {
                let loop_id = match kind {
                    LoopKind::Control if self.control_loops == 0 => fixture::LOOP_ID.to_owned(),
                    _ => format!("l{}", self.loops),
                };
                self.loops += 1;
                let condition = match kind {
                    LoopKind::Control => {
                        self.control_loops += 1;
                        "again"
                    }
                    LoopKind::AlwaysTrue => "always",
                    LoopKind::AlwaysFalse => "never",
                };
                let mut steps = self.list(body);
                if matches!(kind, LoopKind::Control) {
                    let id = self.step_id();
                    steps.push(json!({"id": id, "title": format!("Decide {id}"),
                        "prompt": "Decide whether another iteration is needed.",
                        "output": {"contractRef": "wr.contracts.loop_control"}}));
                }
                let mut l = json!({"type": "loop", "loopId": loop_id,
                    "while": {"kind": "condition_ref", "conditionId": condition},
                    "maxIterations": max, "body": steps});
                if *functions {
                    l["functionDefinitions"] = json!([{"name": "update_log",
                        "definition": format!("Inside loop {loop_id}: append the iteration's decision to the log.")}]);
                }
                l
            }
        }
    }

    fn step_id(&mut self) -> String {
        self.steps += 1;
        format!("s{}", self.steps)
    }
}

/// A valid source workflow (see the module docs), as authoring JSON.
pub fn workflow_json() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(item(3), 1..5),
        prop::sample::subsequence(
            vec![
                "wr.features.durable_recap_guidance",
                "wr.features.mode_guidance",
                "wr.features.output_contracts",
            ],
            0..=3,
        ),
        0u8..4,
        (0u8..4, 0u8..4),
    )
        .prop_map(|(items, features, recommendation, (delegation, web))| {
            let mut writer = Writer {
                probed: Vec::new(),
                steps: 0,
                loops: 0,
                control_loops: 0,
            };
            let mut steps = writer.list(&items);
            // Every run can end: a final plain step after everything else.
            let last = writer.step_id();
            steps.push(json!({"id": last, "title": "Wrap up", "prompt": "Summarize; update_log() once more."}));
            let recommendations = match recommendation {
                0 => json!({}),
                1 => json!({"recommendedAutonomy": "guided"}),
                2 => json!({"recommendedAutonomy": "full_auto_stop_on_user_deps", "recommendedRiskPolicy": "balanced"}),
                _ => json!({"recommendedRiskPolicy": "conservative"}),
            };
            let requirement = ["required", "preferred", "disabled"];
            let mut capabilities = serde_json::Map::new();
            for (name, pick) in [("delegation", delegation), ("web_browsing", web)] {
                if let Some(r) = requirement.get(usize::from(pick)) {
                    capabilities.insert(name.into(), json!(r));
                }
            }
            let mut features = features;
            if !capabilities.is_empty() {
                features.push("wr.features.capabilities");
            }
            json!({
                "id": GENERATED_ID,
                "capabilities": capabilities,
                "name": "Generated",
                "description": "A workflow generated for the model comparison.",
                "recommendations": recommendations,
                "features": features,
                "conditions": [
                    {"id": "again", "kind": "loop_control", "continueWhen": "continue"},
                    {"id": "always", "kind": "always_true"},
                    {"id": "never", "kind": "always_false"}
                ],
                "functionDefinitions": [{"name": "update_log",
                    "definition": "Append one line to the decision log: what you did and why."}],
                "steps": steps
            })
            .to_string()
        })
}

//! Generated workflows in the workflow language of WorkRail 3.x (decision D139), so the
//! model-versus-production comparison covers what people bring: `runCondition` on steps and
//! loops with every operator, the four loop kinds (`while`, `until`, `for` with a number or a
//! context key, `forEach` with its item, index and iteration), `validationCriteria` of every rule
//! kind and composition, and prompts that read context through `{{key}}` markers.
//!
//! Conditions read four context keys (`mode`, `flag`, `rounds`, `items`) that the run starts with
//! and that the generated agents change with the context deltas of their acks
//! ([`crate::ops::language_ops_strategy`]), including values of the wrong type, so a `for` or
//! `forEach` loop meets a missing or malformed key. Every generated workflow ends with a plain
//! step and every loop is bounded by `maxIterations`, so every run can end.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use crate::fixture::ContextSpec;
use crate::ops::context_strategy;

/// A condition in the language's spelling, over the four generated keys and a loop variable.
#[derive(Debug, Clone, Copy)]
pub struct CondSpec {
    form: u8,
    a: u8,
    b: u8,
}

impl CondSpec {
    fn leaf(form: u8, a: u8) -> Value {
        let word = ["fast", "slow"][usize::from(a) % 2];
        let n = a % 3;
        match form % 13 {
            0 => json!({"var": "flag"}),
            1 => json!({"var": "mode", "equals": word}),
            2 => json!({"var": "mode", "not_equals": word}),
            3 => json!({"var": "rounds", "gt": n}),
            4 => json!({"var": "rounds", "gte": n}),
            5 => json!({"var": "rounds", "lt": n}),
            6 => json!({"var": "rounds", "lte": n}),
            7 => json!({"var": "mode", "in": [word, "other"]}),
            8 => json!({"var": "mode", "contains": "AS"}),
            9 => json!({"var": "mode", "startsWith": "f"}),
            10 => json!({"var": "mode", "endsWith": " w"}),
            11 => json!({"var": "mode", "matches": "^f.st$"}),
            _ => json!({"var": "flag", "equals": a.is_multiple_of(2)}),
        }
    }

    /// The condition object.
    pub fn to_json(self) -> Value {
        match self.form % 17 {
            13 => json!({"and": [Self::leaf(self.a, self.b), Self::leaf(self.b, self.a)]}),
            14 => json!({"or": [Self::leaf(self.a, self.b), Self::leaf(self.b, self.a)]}),
            15 => json!({"not": Self::leaf(self.a, self.b)}),
            // A loop variable: true in the first two iterations, unset outside a loop.
            16 => json!({"var": "currentIteration", "lte": 2}),
            form => Self::leaf(form, self.a),
        }
    }
}

fn cond() -> impl Strategy<Value = CondSpec> {
    (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(form, a, b)| CondSpec { form, a, b })
}

/// One step of a generated list (also the only thing a loop body holds, as in the language).
#[derive(Debug, Clone, Copy)]
enum Leaf {
    Plain,
    When(CondSpec),
    Validated(u8),
    /// A prompt that reads `{{mode}}` and the loop's item.
    Marker,
    /// `requireConfirmation` as `true`, as a condition, or as `{kind, condition?}`.
    Confirm(ConfirmForm),
}

#[derive(Debug, Clone, Copy)]
enum ConfirmForm {
    Always,
    When(CondSpec),
    Kind(bool, Option<CondSpec>),
}

#[derive(Debug, Clone, Copy)]
enum LoopKind {
    While(CondSpec),
    Until(CondSpec),
    Count(u8),
    CountVar,
    ForEach,
}

#[derive(Debug, Clone)]
enum Item {
    Leaf(Leaf),
    Loop {
        kind: LoopKind,
        max: u8,
        body: Vec<Leaf>,
        when: Option<CondSpec>,
    },
}

fn leaf() -> impl Strategy<Value = Leaf> {
    prop_oneof![
        2 => Just(Leaf::Plain),
        3 => cond().prop_map(Leaf::When),
        2 => (0u8..10).prop_map(Leaf::Validated),
        1 => Just(Leaf::Marker),
        1 => prop_oneof![
            Just(ConfirmForm::Always),
            cond().prop_map(ConfirmForm::When),
            (any::<bool>(), prop::option::of(cond())).prop_map(|(k, c)| ConfirmForm::Kind(k, c)),
        ]
        .prop_map(Leaf::Confirm),
    ]
}

fn item() -> impl Strategy<Value = Item> {
    let kind = prop_oneof![
        cond().prop_map(LoopKind::While),
        cond().prop_map(LoopKind::Until),
        (0u8..4).prop_map(LoopKind::Count),
        Just(LoopKind::CountVar),
        Just(LoopKind::ForEach),
    ];
    prop_oneof![
        3 => leaf().prop_map(Item::Leaf),
        2 => (
            kind,
            1u8..4,
            prop::collection::vec(leaf(), 1..3),
            prop_oneof![3 => Just(None), 1 => cond().prop_map(Some)],
        )
            .prop_map(|(kind, max, body, when)| Item::Loop { kind, max, body, when }),
    ]
}

fn validation(n: u8) -> Value {
    if n >= 8 {
        // Notes that are a JSON object with a whole `recap` (a JSON string holding one counts).
        return json!({"type": "schema", "message": "Send the recap as JSON.", "schema": {
            "type": "object",
            "required": ["recap"],
            "properties": {"recap": {"type": "integer"}, "done": {"type": "boolean"}}
        }});
    }
    match n % 8 {
        0 => {
            json!({"type": "contains", "value": "Recap", "message": "Start the notes with a recap."})
        }
        1 => json!({"type": "contains", "value": "Recap 3"}),
        // "Recap N: did the step." is 22 characters long.
        2 => json!({"type": "length", "min": 20, "max": 24}),
        3 => json!({"type": "regex", "pattern": "^recap [0-3]", "flags": "i"}),
        4 => {
            json!({"and": [{"type": "contains", "value": "did"}, {"type": "contains", "value": "Recap 1"}]})
        }
        5 => {
            json!({"or": [{"type": "contains", "value": "Recap 2"}, {"type": "contains", "value": "Recap 5"}]})
        }
        6 => json!({"not": {"type": "contains", "value": "Recap 7"}}),
        _ => json!([{"type": "contains", "value": "step"},
            {"type": "contains", "value": "Recap 4", "condition": {"var": "flag", "equals": true}}]),
    }
}

struct Writer {
    steps: usize,
    loops: usize,
}

impl Writer {
    fn step_id(&mut self) -> String {
        self.steps += 1;
        format!("s{}", self.steps)
    }

    fn leaf(&mut self, leaf: Leaf) -> Value {
        let id = self.step_id();
        let mut step =
            json!({"id": id, "title": format!("Step {id}"), "prompt": format!("Do part {id}.")});
        match leaf {
            Leaf::Plain => {}
            Leaf::When(c) => step["runCondition"] = c.to_json(),
            Leaf::Validated(n) => step["validationCriteria"] = validation(n),
            Leaf::Marker => {
                step["prompt"] = json!(format!(
                    "Do part {id} in mode {{{{mode}}}} for {{{{currentItem}}}}."
                ));
            }
            Leaf::Confirm(form) => {
                step["requireConfirmation"] = match form {
                    ConfirmForm::Always => json!(true),
                    ConfirmForm::When(c) => c.to_json(),
                    ConfirmForm::Kind(human, c) => {
                        let kind = if human {
                            "human_approval"
                        } else {
                            "coordinator_eval"
                        };
                        let mut rule = json!({"kind": kind});
                        if let Some(c) = c {
                            rule["condition"] = c.to_json();
                        }
                        rule
                    }
                };
            }
        }
        step
    }

    fn item(&mut self, item: &Item) -> Value {
        match item {
            Item::Leaf(leaf) => self.leaf(*leaf),
            Item::Loop {
                kind,
                max,
                body,
                when,
            } => {
                self.loops += 1;
                let id = format!("loop{}", self.loops);
                let mut config = match kind {
                    LoopKind::While(c) => json!({"type": "while", "condition": c.to_json()}),
                    LoopKind::Until(c) => json!({"type": "until", "condition": c.to_json()}),
                    LoopKind::Count(n) => json!({"type": "for", "count": n}),
                    LoopKind::CountVar => json!({"type": "for", "count": "rounds"}),
                    LoopKind::ForEach => json!({"type": "forEach", "items": "items"}),
                };
                config["maxIterations"] = json!(max);
                let body: Vec<Value> = body.iter().map(|l| self.leaf(*l)).collect();
                let mut l = json!({"type": "loop", "id": id, "title": format!("Loop {id}"),
                    "loop": config, "body": body});
                if let Some(c) = when {
                    l["runCondition"] = c.to_json();
                }
                l
            }
        }
    }
}

/// The context a run starts with: the spec's values, `null`s left out.
fn start_context(spec: ContextSpec) -> Map<String, Value> {
    spec.to_map()
        .into_iter()
        .filter(|(_, v)| !v.is_null())
        .collect()
}

/// A workflow in the language (as authoring JSON, id [`crate::generated::GENERATED_ID`]) and the
/// context its runs start with.
pub fn workflow() -> impl Strategy<Value = (String, Map<String, Value>)> {
    (
        prop::collection::vec(item(), 1..5),
        context_strategy(),
    )
        .prop_map(|(items, context)| {
            let mut writer = Writer { steps: 0, loops: 0 };
            let mut steps: Vec<Value> = items.iter().map(|i| writer.item(i)).collect();
            let last = writer.step_id();
            steps.push(json!({"id": last, "title": "Wrap up", "prompt": "Summarize."}));
            let json = json!({
                "id": crate::generated::GENERATED_ID,
                "name": "Generated in the language",
                "description": "A workflow in the WorkRail 3.x language, generated for the model comparison.",
                "version": "1.0.0",
                "steps": steps
            })
            .to_string();
            (json, start_context(context))
        })
}

/// Drives one generated workflow in the language (`json`, started with `context`) through `ops`
/// in process, comparing production with the model after every command.
pub fn check_language_case(
    json: &str,
    context: &Map<String, Value>,
    ops: &[crate::ops::Op],
    seed: u64,
) -> Result<crate::driver::Stats, String> {
    use crate::generated::{GENERATED_FILE, GENERATED_ID, WorkflowUnderTest};
    let workflow = std::sync::Arc::new(
        WorkflowUnderTest::compile(GENERATED_ID, GENERATED_FILE, json)
            .map_err(|e| format!("a generated workflow must compile: {e}\n{json}"))?
            .with_start_context(context.clone()),
    );
    let sys = crate::InProcess::with_catalog(
        workrail::store::memfs::MemFs::new(),
        seed,
        workflow.catalog(),
    );
    let mut h = crate::Harness::with_workflow(sys, workflow);
    h.run(ops)
        .map_err(|e| format!("{e}\nworkflow: {json}\nstart context: {context:?}"))?;
    Ok(h.world.stats.clone())
}

/// [`check_language_case`] over generated workflows and command sequences of up to `max_len`
/// commands: the first failure, shrunk, or the summed counts.
pub fn check_language_sequences(
    config: proptest::test_runner::Config,
    max_len: usize,
) -> Result<crate::driver::Stats, String> {
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let total = std::cell::RefCell::new(crate::driver::Stats::default());
    let result = runner.run(
        &(
            workflow(),
            crate::ops::language_ops_strategy(max_len),
            any::<u64>(),
        ),
        |((json, context), ops, seed)| {
            let stats =
                check_language_case(&json, &context, &ops, seed).map_err(TestCaseError::fail)?;
            total.borrow_mut().add(&stats);
            Ok(())
        },
    );
    result.map_err(|e| e.to_string())?;
    Ok(total.into_inner())
}

//! Generated workflows with parallel lanes (decisions D161, D168, D169, D172), so the
//! model-versus-production comparison covers lanes started at a landing, driven like runs,
//! replayed and forked, and fanned in at the parallel step's acknowledgement.
//!
//! Each generated workflow has a parallel step of two or three delegations to one small
//! routine of the same sources (one or two steps, to which the compiler adds `lane-report`,
//! which requires `wr.contracts.block_output`), some delegations with a `runCondition` over the
//! `flag` and `mode` context keys, every merge strategy, sometimes `allowPartialResults` and a
//! `synthesis`; the parallel step is sometimes the first step (so the start lands on it). The
//! generated agents ([`crate::ops::lanes_ops_strategy`]) send block outputs of every status over
//! three paths, so lanes complete in random orders, fail, collide, get redone from an old node,
//! and the parallel step is forked (a fork landing on it starts lanes of its own).

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use crate::generated::{GENERATED_FILE, GENERATED_ID, WorkflowUnderTest};

/// The routine every lane runs, and its file in the catalog.
pub const ROUTINE_ID: &str = "project.routine-check";
pub const ROUTINE_FILE: &str = "routine-check.json";

/// The id of every generated parallel step.
pub const PARALLEL_STEP: &str = "fan-out";

/// What a generated parallel workflow looks like.
#[derive(Debug, Clone)]
pub struct LanesSpec {
    /// 0 `concatenate`, 1 `workspace`, 2 `fail-on-conflict`, 3 the default (absent).
    pub strategy: u8,
    pub allow_partial: bool,
    /// Per delegation, its condition (0: none; 1: `flag` holds; 2: `mode` is `fast`; 3: `mode`
    /// is not `fast`).
    pub conditions: Vec<u8>,
    /// A step before the parallel step (else the start lands on it).
    pub before: bool,
    pub synthesis: bool,
    /// The routine has two steps (else one).
    pub long_routine: bool,
    /// The start context's `flag` and `mode` (`fast` when true).
    pub flag: bool,
    pub fast: bool,
}

fn condition(kind: u8) -> Option<Value> {
    match kind % 4 {
        0 => None,
        1 => Some(json!({"var": "flag"})),
        2 => Some(json!({"var": "mode", "equals": "fast"})),
        _ => Some(json!({"var": "mode", "not_equals": "fast"})),
    }
}

impl LanesSpec {
    /// The routine's authoring JSON.
    pub fn routine_json(&self) -> String {
        let mut steps = vec![json!({"id": "look", "title": "Look at {{area}}",
            "prompt": "Inspect the area you were given."})];
        if self.long_routine {
            steps.push(json!({"id": "note", "title": "Write it down",
                "prompt": "Write down what you found."}));
        }
        json!({"id": ROUTINE_ID, "name": "Check one area", "description": "A lane's routine.",
            "version": "1.0.0", "steps": steps})
        .to_string()
    }

    /// The workflow's authoring JSON.
    pub fn workflow_json(&self) -> String {
        let areas = ["parser", "store", "docs"];
        let delegations: Vec<Value> = self
            .conditions
            .iter()
            .enumerate()
            .map(|(i, kind)| {
                let mut d = json!({"workflowId": "routine-check",
                    "goal": format!("Check the {}", areas[i % 3]),
                    "args": {"area": areas[i % 3]}});
                if i == 0 {
                    d["contextMapping"] = json!({"mode": "parentMode"});
                }
                if let Some(c) = condition(*kind) {
                    d["runCondition"] = c;
                }
                d
            })
            .collect();
        let mut parallel = json!({"type": "parallel", "id": PARALLEL_STEP,
            "title": "Check in parallel", "parallelDelegations": delegations});
        if let Some(strategy) =
            ["concatenate", "workspace", "fail-on-conflict"].get(usize::from(self.strategy % 4))
        {
            parallel["mergeStrategy"] = json!(strategy);
        }
        if self.allow_partial {
            parallel["allowPartialResults"] = json!(true);
        }
        if self.synthesis {
            parallel["synthesis"] = json!({"prompt": "Merge what the lanes found."});
        }
        let mut steps = Vec::new();
        if self.before {
            steps.push(json!({"id": "s1", "title": "Prepare", "prompt": "Prepare."}));
        }
        steps.push(parallel);
        steps.push(json!({"id": "ship", "title": "Ship", "prompt": "Ship it."}));
        json!({"id": GENERATED_ID, "name": "Generated with lanes",
            "description": "A parallel step over a routine, generated for the model comparison.",
            "version": "1.0.0", "steps": steps})
        .to_string()
    }

    /// The context runs start with.
    pub fn start_context(&self) -> Map<String, Value> {
        let mut context = Map::new();
        context.insert("flag".into(), json!(self.flag));
        context.insert(
            "mode".into(),
            json!(if self.fast { "fast" } else { "slow" }),
        );
        context
    }

    /// The compiled workflow under test (its catalog also serves the routine).
    pub fn under_test(&self) -> Result<WorkflowUnderTest, String> {
        let json = self.workflow_json();
        WorkflowUnderTest::compile_with(
            GENERATED_ID,
            GENERATED_FILE,
            &json,
            &[(ROUTINE_FILE, &self.routine_json())],
        )
        .map(|w| w.with_start_context(self.start_context()))
    }
}

/// A generated parallel workflow.
pub fn workflow() -> impl Strategy<Value = LanesSpec> {
    (
        0u8..4,
        prop::bool::weighted(0.3),
        prop::collection::vec(prop_oneof![2 => Just(0u8), 1 => 1u8..4], 2..4),
        prop::bool::weighted(0.7),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(strategy, allow_partial, conditions, before, synthesis, long_routine, flag, fast)| {
                LanesSpec {
                    strategy,
                    allow_partial,
                    conditions,
                    before,
                    synthesis,
                    long_routine,
                    flag,
                    fast,
                }
            },
        )
}

/// Drives one generated parallel workflow through `ops` in process, comparing production with
/// the model after every command.
pub fn check_lanes_case(
    spec: &LanesSpec,
    ops: &[crate::ops::Op],
    seed: u64,
) -> Result<crate::driver::Stats, String> {
    run_lanes_case(spec, ops, seed).map(|h| h.world.stats.clone())
}

/// [`check_lanes_case`], returning the harness (its model, for what a test checks besides).
pub fn run_lanes_case(
    spec: &LanesSpec,
    ops: &[crate::ops::Op],
    seed: u64,
) -> Result<crate::Harness<crate::InProcess>, String> {
    run_lanes_case_on(spec, ops, |workflow| {
        crate::InProcess::with_catalog(
            workrail::store::memfs::MemFs::new(),
            seed,
            workflow.catalog(),
        )
    })
}

/// [`check_lanes_case`] through the built `workrail mcp` server over stdio: the workflow and
/// its routine served from files, restarts as new processes (decision D174).
pub fn check_lanes_case_over_stdio(
    spec: &LanesSpec,
    ops: &[crate::ops::Op],
) -> Result<crate::driver::Stats, String> {
    let (workflow, routine) = (spec.workflow_json(), spec.routine_json());
    run_lanes_case_on(spec, ops, |_| {
        crate::Stdio::with_workflows(&[
            (GENERATED_FILE, workflow.as_str()),
            (ROUTINE_FILE, routine.as_str()),
        ])
    })
    .map(|h| h.world.stats.clone())
}

/// [`check_lanes_case`] on PostgreSQL (a schema of its own, `url` from
/// `crate::postgres::postgres_url`).
pub fn check_lanes_case_on_postgres(
    spec: &LanesSpec,
    ops: &[crate::ops::Op],
    url: &str,
    seed: u64,
) -> Result<crate::driver::Stats, String> {
    run_lanes_case_on(spec, ops, |workflow| {
        crate::postgres::OnPostgres::with_catalog(url, seed, workflow.catalog())
    })
    .map(|h| h.world.stats.clone())
}

/// Drives one generated parallel workflow through `ops` on the system `system` builds from
/// the compiled workflow, comparing production with the model after every command.
pub fn run_lanes_case_on<S: crate::system::System>(
    spec: &LanesSpec,
    ops: &[crate::ops::Op],
    system: impl FnOnce(&WorkflowUnderTest) -> S,
) -> Result<crate::Harness<S>, String> {
    let workflow = std::sync::Arc::new(
        spec.under_test()
            .map_err(|e| format!("a generated workflow must compile: {e}\n{spec:?}"))?,
    );
    if workflow
        .compiled
        .step(&workrail_spec::ids::StepId::parse(PARALLEL_STEP).map_err(|e| e.to_string())?)
        .and_then(|s| s.language.lanes.as_ref())
        .is_none()
    {
        return Err(format!(
            "the generated parallel step compiled without lanes\n{}",
            workflow.json
        ));
    }
    let sys = system(&workflow);
    let mut h = crate::Harness::with_workflow(sys, workflow);
    h.run(ops).map_err(|e| {
        format!(
            "{e}\nworkflow: {}\nroutine: {}",
            spec.workflow_json(),
            spec.routine_json()
        )
    })?;
    Ok(h)
}

/// [`check_lanes_case`] over generated workflows and command sequences of up to `max_len`
/// commands: the first failure, shrunk, or the summed counts.
pub fn check_lanes_sequences(
    config: proptest::test_runner::Config,
    max_len: usize,
) -> Result<crate::driver::Stats, String> {
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let total = std::cell::RefCell::new(crate::driver::Stats::default());
    let result = runner.run(&(case(max_len), any::<u64>()), |((spec, ops), seed)| {
        let stats = check_lanes_case(&spec, &ops, seed).map_err(TestCaseError::fail)?;
        total.borrow_mut().add(&stats);
        Ok(())
    });
    result.map_err(|e| e.to_string())?;
    Ok(total.into_inner())
}

/// A parallel step of three unconditional lanes of a one-step routine under `strategy` (0
/// `concatenate`, 1 `workspace`, 2 `fail-on-conflict`), landed on by the start.
pub fn three_lanes(strategy: u8, allow_partial: bool) -> LanesSpec {
    LanesSpec {
        strategy,
        allow_partial,
        conditions: vec![0, 0, 0],
        before: false,
        synthesis: true,
        long_routine: false,
        flag: true,
        fast: true,
    }
}

/// An ack of the node `node` selects, with notes and, when given, a block output
/// (`(status, files)` as `ArtifactSpec::Block` reads them).
pub fn ack(node: u8, block: Option<(u8, u8)>) -> crate::ops::Op {
    crate::ops::Op::Advance {
        node,
        output: crate::fixture::OutputSpec {
            notes: Some(1),
            artifacts: block
                .map(|(status, files)| crate::fixture::ArtifactSpec::Block { status, files })
                .into_iter()
                .collect(),
            context: None,
        },
        prefs: None,
    }
}

/// Commands that start [`three_lanes`] and finish its lanes in the order 3, 1, 2 (never the
/// index order), each lane's block output `blocks[lane - 1]` (`(status, files)` as
/// `ArtifactSpec::Block` reads them), then acknowledge the parallel step.
///
/// Node selectors count back from the newest node the harness knows: the start registers the
/// parallel step's node and then the three lanes' roots in index order; each lane ack adds the
/// node it creates.
pub fn lanes_out_of_order(blocks: [(u8, u8); 3]) -> Vec<crate::ops::Op> {
    use crate::ops::Op;
    // Known nodes: [parent, lane1, lane2, lane3] = 4.
    vec![
        Op::Start { prefs: None },
        // Lane 3 (newest): its routine step, then its report. 5, then 6 nodes.
        ack(0, None),
        ack(0, Some(blocks[2])),
        // Lane 1's root is node 1: selector 6 - 1 - 1 = 4. 7, then 8 nodes.
        ack(4, None),
        ack(0, Some(blocks[0])),
        // Lane 2's root is node 2: selector 8 - 1 - 2 = 5. 9, then 10 nodes.
        ack(5, None),
        ack(0, Some(blocks[1])),
        // The parallel step (node 0): selector 9.
        ack(9, None),
    ]
}

/// Commands that start [`three_lanes`], send lane 3's block output with its routine step's
/// ack (so it stands at its report step with nothing handed in), finish lanes 1 and 2, then
/// acknowledge the parallel step: the fan-in must wait for lane 3 (decision D193).
pub fn lane_reporting_early() -> Vec<crate::ops::Op> {
    use crate::ops::Op;
    // Known nodes: [parent, lane1, lane2, lane3] = 4.
    vec![
        Op::Start { prefs: None },
        // Lane 3's routine step, with a block output: 5 nodes.
        ack(0, Some((0, 1))),
        // Lane 1 (node 1): selector 5 - 1 - 1 = 3, then its report: 7 nodes.
        ack(3, None),
        ack(0, Some((0, 2))),
        // Lane 2 (node 2): selector 7 - 1 - 2 = 4, then its report: 9 nodes.
        ack(4, None),
        ack(0, Some((0, 4))),
        // The parallel step (node 0): selector 8.
        ack(8, None),
    ]
}

/// Which of `spec`'s lanes the start context activates (their conditions over `flag` and
/// `mode`), as the compiled conditions read them.
pub fn active_lanes(spec: &LanesSpec) -> usize {
    spec.conditions
        .iter()
        .filter(|kind| match *kind % 4 {
            0 => true,
            1 => spec.flag,
            2 => spec.fast,
            _ => !spec.fast,
        })
        .count()
}

/// An agent's first pass over a run of `spec`: start, drive every lane to its report in the
/// order `order` picks (a permutation drawn from its bytes), lane `i` handing in `blocks[i]`
/// (`(status, files)`; `None`: the lane's report is acked without one, so it is blocked), then
/// acknowledge the parallel step. The random commands that follow rewind, fork, replay and
/// redo lanes from there.
pub fn agent_pass(
    spec: &LanesSpec,
    order: &[u8],
    blocks: &[Option<(u8, u8)>],
) -> Vec<crate::ops::Op> {
    let lanes = active_lanes(spec);
    let mut ops = vec![crate::ops::Op::Start { prefs: None }];
    // Known nodes so far, and where the parallel step's node is.
    let mut known: usize = 1;
    let parent = if spec.before {
        ops.push(ack(0, None));
        known += 1;
        1
    } else {
        0
    };
    let first_lane = known;
    known += lanes;
    let mut pending: Vec<usize> = (0..lanes).collect();
    let mut sequence = Vec::new();
    for byte in order.iter().chain(std::iter::repeat(&0)).take(lanes) {
        let pick = usize::from(*byte) % pending.len().max(1);
        if pending.is_empty() {
            break;
        }
        sequence.push(pending.remove(pick));
    }
    let steps = if spec.long_routine { 2 } else { 1 };
    for lane in sequence {
        let root = first_lane + lane;
        let block = blocks.get(lane).copied().flatten();
        // The routine's steps from the lane's root, then its report.
        for step in 0..=steps {
            let sel = if step == 0 { known - 1 - root } else { 0 };
            let last = step == steps;
            ops.push(ack(
                u8::try_from(sel).unwrap_or(0),
                if last { block } else { None },
            ));
            // A blocked report adds no node; every other ack adds one.
            if !(last && block.is_none()) {
                known += 1;
            }
        }
    }
    ops.push(ack(u8::try_from(known - 1 - parent).unwrap_or(0), None));
    ops
}

/// A generated workflow with a command sequence: [`agent_pass`] over it, then random commands.
pub fn case(max_len: usize) -> impl Strategy<Value = (LanesSpec, Vec<crate::ops::Op>)> {
    (
        workflow(),
        prop::collection::vec(any::<u8>(), 3),
        prop::collection::vec(
            // Mostly a report; a failed one one time in six (it blocks the fan-in).
            prop_oneof![
                1 => Just(None),
                5 => (0u8..3, 0u8..16).prop_map(Some),
                1 => (0u8..16).prop_map(|files| Some((3, files))),
            ],
            3,
        ),
        crate::ops::lanes_ops_strategy(max_len),
    )
        .prop_map(|(spec, order, blocks, rest)| {
            let mut ops = agent_pass(&spec, &order, &blocks);
            // The random part's own first start is dropped: the pass started the run.
            ops.extend(rest.into_iter().skip(1));
            (spec, ops)
        })
}

/// Commands over [`three_lanes`]: lane 3 reports `failed`, its report is replayed, then redone
/// from its report's node (a fork in the lane recording a second block output, `completed`);
/// lanes 1 and 2 complete, and the parallel step is acknowledged. Its latest report counts, so
/// the fan-in goes on (D161: a lane's latest block output).
pub fn lane_redone_after_a_replay() -> Vec<crate::ops::Op> {
    use crate::ops::Op;
    vec![
        Op::Start { prefs: None },
        // Known nodes [parent, lane1, lane2, lane3]: lane 3's routine step (5 nodes), its
        // failed report (6).
        ack(0, None),
        ack(0, Some((3, 1))),
        // The failed report sent again: a replay, nothing new.
        Op::ReplayAck {
            ack: 1,
            other_output: false,
        },
        // Lane 3's report step again (node 4, selector 1): a completed report (7 nodes).
        ack(1, Some((0, 1))),
        // Lane 1 (node 1, selector 5), then lane 2 (node 2, selector 6).
        ack(5, None),
        ack(0, Some((0, 2))),
        ack(6, None),
        ack(0, Some((0, 4))),
        // The parallel step (node 0, selector 10).
        ack(10, None),
    ]
}

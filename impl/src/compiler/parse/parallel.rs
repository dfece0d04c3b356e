//! Parallel steps (`{"type": "parallel", "id", "title", "parallelDelegations", "synthesis"?}`),
//! compiled as WorkRail 3.x runs them: a spawn step whose prompt lists each delegation
//! (workflow, goal, model tier, allowed tools, inputs) for the agent to start as parallel
//! subagents, then, when `synthesis` is set, a synthesis step `<id>__synthesis` with the
//! synthesis prompt and contract.
//!
//! A delegation with a `runCondition` is a conditional prompt fragment of the spawn step (shown
//! only when the condition holds over the run's context). When any delegation is conditional,
//! every delegation is a fragment (the others without a condition), so the agent reads them in
//! the authored order; otherwise they are all part of the prompt. The
//! delegations are also kept structured in the spawn step's `kept.parallel` (the authored
//! objects, each with the `resolvedWorkflowId` the sources answered), so server-tracked lanes can
//! find them; the synthesis step's provenance is `template_injected` from `<id>#synthesis`.

use serde_json::{Map, Value, json};
use workrail_spec::closed::StepSource;
use workrail_spec::compiled::{
    CompiledWarning, CompiledWarningCode, Condition, LaneInput, LaneSpec, MergeStrategy,
    ParallelLanes, PromptFragment, StepProvenance,
};

use super::Parser;
use super::content::derived_step;
use super::fields::{Fields, array, non_blank, one_of, string, type_name};
use super::legacy::MODEL_TIERS;
use crate::compiler::error::{CompileError, CompileErrorCode as Code, child, index};
use crate::compiler::source::{SourceStep, StepBody};

const PARALLEL: &[&str] = &[
    "type",
    "id",
    "title",
    "parallelDelegations",
    "synthesis",
    "runCondition",
    "requireConfirmation",
    "notesOptional",
    "mergeStrategy",
    "allowPartialResults",
];
const DELEGATION: &[&str] = &[
    "workflowId",
    "goal",
    "runCondition",
    "contextMapping",
    "args",
    "modelTier",
    "allowedTools",
];

/// One delegation, checked.
struct Delegation {
    workflow_id: String,
    /// The id the workflow sources answered, when found.
    resolved: Option<String>,
    goal: Option<String>,
    condition: Option<Condition>,
    context_mapping: Vec<(String, String)>,
    args: Vec<(String, String)>,
    model_tier: Option<String>,
    allowed_tools: Vec<String>,
    authored: Value,
}

/// A parallel step: the spawn step, then the synthesis step when `synthesis` is set.
pub(super) fn step(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<SourceStep> {
    let f = Fields::new(p, value, pointer, "a parallel step", PARALLEL)?;
    let delegations_at = f.at("parallelDelegations");
    let delegations = f
        .req(
            p,
            "parallelDelegations",
            "Add `parallelDelegations`: a non-empty list of `{workflowId, goal?, ...}`.",
        )
        .and_then(|v| delegations(p, v, &delegations_at));
    let synthesis = f.opt("synthesis");
    if let Some(s) = synthesis {
        let s_at = f.at("synthesis");
        if let Some(sf) = Fields::new(p, s, &s_at, "`synthesis`", &["prompt", "outputContract"]) {
            if sf.opt("prompt").is_none() && sf.opt("outputContract").is_none() {
                p.error(CompileError::new(
                    Code::MissingField,
                    s_at.clone(),
                    "`synthesis` needs a `prompt`, an `outputContract`, or both.",
                    "Add a `prompt` saying how to merge the delegated results.",
                ));
            }
            sf.finish(p);
        }
    }
    let merge_strategy = f.opt("mergeStrategy").map(|v| {
        one_of(
            p,
            v,
            &f.at("mergeStrategy"),
            "`mergeStrategy`",
            &["concatenate", "workspace", "fail-on-conflict"],
        )
        .and_then(MergeStrategy::parse)
    });
    let allow_partial = f.opt("allowPartialResults").map(|v| match v.as_bool() {
        Some(b) => Some(b),
        None => {
            p.error(CompileError::new(
                Code::WrongType,
                f.at("allowPartialResults"),
                format!("`allowPartialResults` must be true or false, found {}.", type_name(v)),
                "Write `\"allowPartialResults\": true` to let the synthesis go on without a failed lane.",
            ));
            None
        }
    });
    let kept_unknown = f.finish_keeping(p);
    let delegations = delegations?;
    let merge_strategy = present(merge_strategy)?.unwrap_or(MergeStrategy::Concatenate);
    let allow_partial = present(allow_partial)?.unwrap_or(false);
    let id = value.get("id").and_then(Value::as_str).unwrap_or_default();
    let synthesis_id = format!("{id}__synthesis");
    let mut spawn = Map::new();
    for key in [
        "id",
        "title",
        "runCondition",
        "requireConfirmation",
        "notesOptional",
    ] {
        if let Some(v) = value.get(key) {
            spawn.insert(key.into(), v.clone());
        }
    }
    // The prompt is set after parsing: its authored parts (goals, inputs) were checked where
    // they are written, and the text around them is the compiler's own.
    spawn.insert("prompt".into(), Value::from("-"));
    let mut spawn = derived_step(p, &Value::Object(spawn), pointer)?;
    spawn.body = StepBody::Prompt(spawn_prompt(&delegations, synthesis.is_some()));
    if any_conditional(&delegations) {
        for (i, d) in delegations.iter().enumerate() {
            spawn.extras.fragments.push(PromptFragment {
                fragment_id: format!("delegation-{}", i + 1),
                when: d.condition.clone(),
                text: delegation_block(i, d),
            });
        }
    }
    let mut kept = json!({
        "delegations": delegations.iter().map(|d| {
            let mut authored = d.authored.clone();
            if let (Some(map), Some(resolved)) = (authored.as_object_mut(), &d.resolved) {
                map.insert("resolvedWorkflowId".into(), Value::from(resolved.as_str()));
            }
            authored
        }).collect::<Vec<_>>(),
    });
    if synthesis.is_some()
        && let Some(map) = kept.as_object_mut()
    {
        map.insert("synthesisStepId".into(), Value::from(synthesis_id.as_str()));
    }
    spawn.extras.kept.insert("parallel".to_owned(), kept);
    spawn.extras.kept.extend(kept_unknown);
    spawn.extras.lanes = lanes(p, &delegations, pointer, merge_strategy, allow_partial);
    let Some(synthesis) = synthesis else {
        return Some(SourceStep::Normal(Box::new(spawn)));
    };
    let title = value
        .get("title")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut s = Map::new();
    s.insert("id".into(), Value::from(synthesis_id));
    s.insert("title".into(), Value::from(format!("Synthesis: {title}")));
    s.insert(
        "prompt".into(),
        synthesis
            .get("prompt")
            .cloned()
            .unwrap_or_else(|| Value::from(SYNTHESIS_PROMPT)),
    );
    s.insert("notesOptional".into(), Value::Bool(true));
    if let Some(condition) = value.get("runCondition") {
        s.insert("runCondition".into(), condition.clone());
    }
    if let Some(contract) = synthesis.get("outputContract") {
        s.insert("outputContract".into(), contract.clone());
    }
    let warnings = p.warnings.len();
    let synthesized = derived_step(p, &Value::Object(s), &child(pointer, "synthesis"));
    // `outputContract` is the authored spelling of the synthesis contract: no v1 warning for it.
    p.warnings.truncate(warnings);
    let mut synthesized = synthesized?;
    synthesized.extras.provenance = Some(StepProvenance {
        source: StepSource::TemplateInjected,
        origin_id: Some(format!("{id}#synthesis")),
    });
    Some(SourceStep::Group(vec![
        SourceStep::Normal(Box::new(spawn)),
        SourceStep::Normal(Box::new(synthesized)),
    ]))
}

/// The lanes of a parallel step (decision D168): one per delegation, each running the routine it
/// names with a last step that requires the block output. Only when every delegation names a
/// routine the sources define (its text is in the library) can every lane be tracked; otherwise
/// the step stays prompt text, as WorkRail 3.x runs it, with a warning saying why.
fn lanes(
    p: &mut Parser<'_>,
    delegations: &[Delegation],
    pointer: &str,
    merge_strategy: MergeStrategy,
    allow_partial_results: bool,
) -> Option<Box<ParallelLanes>> {
    let mut lanes = Vec::new();
    for (i, d) in delegations.iter().enumerate() {
        let at = child(
            &index(&child(pointer, "parallelDelegations"), i),
            "workflowId",
        );
        let Some(resolved) = d.resolved.as_deref() else {
            // `unresolved_delegation` already says why.
            return None;
        };
        let untracked = |p: &mut Parser<'_>, why: String| {
            p.warn(CompiledWarning {
                code: CompiledWarningCode::UntrackedLanes,
                message: format!(
                    "the lanes of this parallel step are not tracked by the server: {why} The delegations stay instructions in the step's prompt."
                ),
                pointer: Some(at.clone()),
            });
        };
        let Some(entry) = p.ctx.library.entry(resolved) else {
            untracked(
                p,
                format!(
                    "delegation {} names `{resolved}`, which is not a routine (`<namespace>.routine-<name>`) of the workflow sources.",
                    i + 1
                ),
            );
            return None;
        };
        let (Some(source), bundled) = (entry.source.clone(), entry.bundled) else {
            untracked(
                p,
                format!(
                    "delegation {} names `{resolved}`, which is not a routine (`<namespace>.routine-<name>`) of the workflow sources.",
                    i + 1
                ),
            );
            return None;
        };
        let workflow = match lane_workflow(p, source, bundled) {
            Ok(w) => w,
            Err(first) => {
                untracked(
                    p,
                    format!(
                        "routine `{resolved}` of delegation {} does not compile as a lane: {first}",
                        i + 1
                    ),
                );
                return None;
            }
        };
        lanes.push(LaneSpec {
            workflow_id: entry.workflow_id.clone(),
            goal: d.goal.clone(),
            when: d.condition.clone(),
            inputs: d
                .context_mapping
                .iter()
                .map(|(from, to)| LaneInput {
                    from: from.clone(),
                    to: to.clone(),
                })
                .collect(),
            args: d.args.iter().cloned().collect(),
            workflow: Box::new(workflow),
        });
    }
    Some(Box::new(ParallelLanes {
        merge_strategy,
        allow_partial_results,
        lanes,
    }))
}

/// The id of the step every lane ends with.
pub const LANE_REPORT_STEP_ID: &str = "lane-report";

const LANE_REPORT_PROMPT: &str = "Hand in this lane's block output: acknowledge this step with one `wr.block_output` artifact saying what this lane did.\n\n- `blockId`: this lane's id (`laneId`, the run id you were given).\n- `blockType`: `plan`, `dev`, `test`, `review` or `devops`, and `deliverables` of the matching shape (see the example).\n- `status`: `completed` when every deliverable was produced, `partial` when some were, `failed` when the lane could not do its work.\n- `summary`: one to three sentences.\n- `filesModified` and `filesCreated`: every file this lane changed or created, as paths relative to the project root (no `..`, no absolute path); empty lists when it changed none.\n- `timestamp`: now, in RFC 3339.";

/// A routine compiled as a lane: its steps, then the report step.
fn lane_workflow(
    p: &Parser<'_>,
    mut source: Value,
    bundled: bool,
) -> Result<workrail_spec::compiled::CompiledWorkflowSnapshotV1, String> {
    let report = json!({
        "id": LANE_REPORT_STEP_ID,
        "title": "Hand in this lane's block output",
        "prompt": LANE_REPORT_PROMPT,
        "notesOptional": true,
        "output": {"contractRef": crate::builtins::contracts::BLOCK_OUTPUT},
    });
    match source.get_mut("steps").and_then(Value::as_array_mut) {
        Some(steps) => steps.push(report),
        None => return Err("it has no `steps` list.".to_owned()),
    }
    let ctx = crate::compiler::CompileContext {
        origin: if bundled {
            crate::compiler::Origin::Bundled
        } else {
            p.ctx.origin.clone()
        },
        legacy_ids: crate::compiler::LegacyIdPolicy::Warn,
        library: std::sync::Arc::clone(&p.ctx.library),
    };
    crate::compiler::compile(&source, &ctx)
        .map(|c| c.snapshot)
        .map_err(|errors| {
            errors
                .0
                .first()
                .map(|e| format!("{} (at `{}`)", e.message, e.pointer))
                .unwrap_or_default()
        })
}

const SYNTHESIS_PROMPT: &str = "Merge the results of the parallel subagents of the previous step into one result: reconcile contradictions explicitly, say how each was resolved, and produce one unified report.";

fn spawn_prompt(delegations: &[Delegation], synthesis: bool) -> String {
    let next = if synthesis {
        "continue this workflow: the next step merges the results"
    } else {
        "continue this workflow"
    };
    let mut text = format!(
        "Run the delegations listed in this step in parallel: start one subagent for each (with your client's subagent tool), each running its own WorkRail session of the named workflow (`start_workflow` with that `workflowId`) toward the goal and with the inputs given.\n\n1. Start every listed delegation at the same time.\n2. Wait until every subagent has finished and written its deliverable.\n3. Check that each deliverable exists, then {next}.\n\nIf this step lists no delegation, none applies to this run: continue at once without starting any.",
    );
    if !any_conditional(delegations) {
        for (i, d) in delegations.iter().enumerate() {
            text.push_str("\n\n");
            text.push_str(&delegation_block(i, d));
        }
    }
    text
}

fn any_conditional(delegations: &[Delegation]) -> bool {
    delegations.iter().any(|d| d.condition.is_some())
}

fn delegation_block(i: usize, d: &Delegation) -> String {
    let id = d.resolved.as_deref().unwrap_or(&d.workflow_id);
    let mut lines = vec![
        format!("### Delegation {}: {id}", i + 1),
        format!("- Workflow: `{id}`"),
        format!(
            "- Goal: {}",
            d.goal
                .clone()
                .unwrap_or_else(|| format!("run `{id}` with the inputs below"))
        ),
    ];
    if let Some(tier) = &d.model_tier {
        lines.push(format!("- Model tier: {tier}"));
    }
    if !d.allowed_tools.is_empty() {
        lines.push(format!("- Allowed tools: {}", d.allowed_tools.join(", ")));
    }
    if d.context_mapping.is_empty() && d.args.is_empty() {
        lines.push("- Inputs: none".to_owned());
    } else {
        lines.push("- Inputs:".to_owned());
        for (parent, child) in &d.context_mapping {
            lines.push(format!(
                "  - `{child}`: the current value of this run's context `{parent}` (skip it when unset)"
            ));
        }
        for (key, value) in &d.args {
            lines.push(format!("  - `{key}`: `{value}`"));
        }
    }
    lines.join("\n")
}

fn delegations(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<Vec<Delegation>> {
    let items = array(p, value, pointer, "`parallelDelegations`")?;
    if items.is_empty() {
        p.error(CompileError::new(
            Code::InvalidValue,
            pointer,
            "`parallelDelegations` is empty; a parallel step delegates at least once.",
            "Add a delegation `{\"workflowId\": \"...\", \"goal\": \"...\"}`, or make it a normal step.",
        ));
        return None;
    }
    let mut out = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        match delegation(p, item, &index(pointer, i)) {
            Some(d) => out.push(d),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn delegation(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<Delegation> {
    let f = Fields::new(p, value, pointer, "a delegation", DELEGATION)?;
    let workflow_id = f
        .req(
            p,
            "workflowId",
            "Add the `workflowId` of the workflow or routine to delegate to.",
        )
        .and_then(|v| non_blank(p, v, &f.at("workflowId"), "`workflowId`"))
        .map(str::to_owned);
    let goal = f
        .opt("goal")
        .map(|v| super::prompt::free_text(p, v, &f.at("goal"), "the delegation `goal`"));
    // The one lowering of the language's conditions; `{}` (always) is no condition.
    let condition = f
        .opt("runCondition")
        .map(|v| super::language::condition(p, v, &f.at("runCondition")));
    let context_mapping = f
        .opt("contextMapping")
        .map(|v| string_map(p, v, &f.at("contextMapping"), "`contextMapping`"));
    let args = f
        .opt("args")
        .map(|v| string_map(p, v, &f.at("args"), "`args`"));
    let model_tier = f
        .opt("modelTier")
        .map(|v| one_of(p, v, &f.at("modelTier"), "`modelTier`", MODEL_TIERS).map(str::to_owned));
    let allowed_tools = f
        .opt("allowedTools")
        .map(|v| allowed_tools(p, v, &f.at("allowedTools")));
    f.finish(p);
    let workflow_id = workflow_id?;
    let resolved = p
        .ctx
        .library
        .resolve_workflow(&workflow_id)
        .map(|id| id.as_str().to_owned());
    if resolved.is_none() {
        p.warn(CompiledWarning {
            code: CompiledWarningCode::UnresolvedDelegation,
            message: format!(
                "delegation workflow `{workflow_id}` was not found in the workflow sources when this workflow compiled; the spawn step names it as written, and starting it fails until a source defines it."
            ),
            pointer: Some(child(pointer, "workflowId")),
        });
    }
    Some(Delegation {
        workflow_id,
        resolved,
        goal: present(goal)?,
        condition: present(condition)?.flatten(),
        context_mapping: present(context_mapping)?.unwrap_or_default(),
        args: present(args)?.unwrap_or_default(),
        model_tier: present(model_tier)?,
        allowed_tools: present(allowed_tools)?.unwrap_or_default(),
        authored: value.clone(),
    })
}

/// An optional field as read: absent is `Some(None)`, present and valid `Some(Some(_))`, present
/// and invalid `None` (its error is already recorded).
fn present<T>(read: Option<Option<T>>) -> Option<Option<T>> {
    read.map_or(Some(None), |value| value.map(Some))
}

fn string_map(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    what: &str,
) -> Option<Vec<(String, String)>> {
    let Some(map) = value.as_object() else {
        p.error(CompileError::new(
            Code::WrongType,
            pointer,
            format!(
                "{what} must be an object of strings, found {}.",
                type_name(value)
            ),
            format!("Write {what} as e.g. `{{\"key\": \"value\"}}`."),
        ));
        return None;
    };
    let mut out = Vec::new();
    let mut ok = true;
    for (key, v) in map {
        match string(p, v, &child(pointer, key), what) {
            Some(s) => out.push((key.clone(), s.to_owned())),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn allowed_tools(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<Vec<String>> {
    let items = array(p, value, pointer, "`allowedTools`")?;
    if items.is_empty() {
        p.error(CompileError::new(
            Code::InvalidValue,
            pointer,
            "`allowedTools` is empty; leave it out to let the subagent use its default tools.",
            "Remove `allowedTools` or name at least one tool.",
        ));
        return None;
    }
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = index(pointer, i);
        let name = string(p, item, &at, "a tool name")?;
        let valid = name.starts_with(|c: char| c.is_ascii_alphabetic())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '-'));
        if !valid {
            p.error(CompileError::new(
                Code::InvalidValue,
                at,
                format!("tool name `{name}` must start with a letter and use only letters, digits, `_`, `:` and `-`."),
                "Write the tool's name as the client lists it.",
            ));
            return None;
        }
        out.push(name.to_owned());
    }
    Some(out)
}

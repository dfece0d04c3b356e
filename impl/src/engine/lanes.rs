//! Judging the fan-in of a parallel step when it is acknowledged (decision D169): every lane
//! must have handed in its block output, a failed lane blocks unless the step allows partial
//! results, and under `fail-on-conflict` each file two lanes touched is a choice only the user
//! can make. All of it is read from recorded facts ([`BranchFacts::lanes`]), through the one
//! reason model, so guided runs block and never-stop runs record gaps.

use workrail_spec::blocker::BlockerPointer;
use workrail_spec::closed::{
    Autonomy, Capability, CapabilityStatus, DivergenceReason, NonAssumableChoiceKind,
    UserOnlyDependencyReason,
};
use workrail_spec::compiled::{CompiledStep, MergeStrategy, ParallelLanes};
use workrail_spec::reason::{ContractViolationReason, GapReason};

use super::fanin::{self, FanIn, Lane};
use super::findings::finding;
use super::outcome::{BranchFacts, Divergence, Finding, FindingDetail, LaneFact, Reports};

/// The fan-in's own strategy type from the compiled one.
pub fn strategy(merge: MergeStrategy) -> fanin::MergeStrategy {
    match merge {
        MergeStrategy::Concatenate => fanin::MergeStrategy::Concatenate,
        MergeStrategy::Workspace => fanin::MergeStrategy::Workspace,
        MergeStrategy::FailOnConflict => fanin::MergeStrategy::FailOnConflict,
    }
}

/// The fan-in of `facts` under the step's strategy.
pub fn fan_in(spec: &ParallelLanes, facts: &[LaneFact]) -> FanIn {
    let lanes: Vec<Lane> = facts.iter().map(|f| f.lane.clone()).collect();
    fanin::fan_in(&lanes, strategy(spec.merge_strategy))
}

/// `lane 2 (run_…)` for each lane id, in the order given.
fn named(facts: &[LaneFact], ids: &[String]) -> (Vec<u32>, String) {
    let mut indexes = Vec::new();
    let mut words = Vec::new();
    for id in ids {
        if let Some(f) = facts.iter().find(|f| &f.lane.lane_id == id) {
            indexes.push(f.index);
            words.push(format!("lane {} (`{id}`)", f.index));
        }
    }
    (indexes, words.join(", "))
}

/// The findings of acknowledging `step`, whose lanes are `facts`.
pub(crate) fn judge(
    step: &CompiledStep,
    spec: &ParallelLanes,
    facts: &[LaneFact],
    autonomy: Autonomy,
) -> Vec<Finding> {
    let result = fan_in(spec, facts);
    let step_id = &step.step_id;
    let pointer = || BlockerPointer::WorkflowStep {
        step_id: step_id.clone(),
    };
    let mut out = Vec::new();
    if !result.missing.is_empty() {
        let (lanes, words) = named(facts, &result.missing);
        out.push(finding(
            GapReason::ContractViolation(ContractViolationReason::MissingRequiredOutput),
            pointer(),
            format!(
                "Step '{step_id}' waits for its lanes: {words} handed in no block output yet."
            ),
            "Let each listed lane finish: its subagent drives the lane with `continue_workflow` and the lane's tokens (the `lanes` of this step's response; rehydrate this step to see them again) until the lane's last step records its `wr.block_output`. Then acknowledge this step again with the new ackToken.".to_owned(),
            FindingDetail::Lanes {
                step_id: step_id.clone(),
                lanes,
                file: None,
                non_assumable_choice: None,
            },
            autonomy,
            true,
        ));
    }
    if !result.failed.is_empty() {
        let (lanes, words) = named(facts, &result.failed);
        let why: Vec<String> = result
            .failed
            .iter()
            .filter_map(|id| facts.iter().find(|f| &f.lane.lane_id == id))
            .filter_map(|f| f.summary.as_ref().map(|s| format!("lane {}: {s}", f.index)))
            .collect();
        // Where the step allows partial results, a failed lane is disclosed (a warning gap),
        // never blocking: the reason is the same, the subject is not required.
        let (message, fix) = if spec.allow_partial_results {
            (
                format!(
                    "Step '{step_id}' goes on without a failed lane ({words} reported `failed`), as it allows partial results. {}",
                    why.join(" ")
                ),
                "Say in the synthesis what the failed lane did not deliver.".to_owned(),
            )
        } else {
            (
                format!(
                    "Step '{step_id}' cannot merge a failed lane: {words} reported `failed`. {}",
                    why.join(" ")
                ),
                "Have the failed lane's subagent redo its work and hand in a new block output (acknowledging the lane's last step again from that step's stateToken records a new attempt; the latest block output counts), or ask the user how to go on without it. Then acknowledge this step again with the new ackToken.".to_owned(),
            )
        };
        out.push(finding(
            GapReason::ContractViolation(ContractViolationReason::InvalidRequiredOutput),
            pointer(),
            message,
            fix,
            FindingDetail::Lanes {
                step_id: step_id.clone(),
                lanes,
                file: None,
                non_assumable_choice: None,
            },
            autonomy,
            !spec.allow_partial_results,
        ));
    }
    for conflict in result
        .conflicts
        .iter()
        .filter(|c| c.resolution == fanin::Resolution::UserResolves)
    {
        let (lanes, words) = named(facts, &conflict.lanes);
        let file = &conflict.conflicting_file;
        out.push(finding(
            GapReason::UserOnlyDependency(UserOnlyDependencyReason::NeedsUserChoice),
            pointer(),
            format!(
                "Step '{step_id}' merges with `fail-on-conflict`, and {words} each changed `{file}`: the user decides which change to keep."
            ),
            format!(
                "Ask the user which lane's change of `{file}` to keep ({words}), or how to combine them; apply that in the project, then acknowledge this step again with the new ackToken, saying in output.notesMarkdown what the user chose."
            ),
            FindingDetail::Lanes {
                step_id: step_id.clone(),
                lanes,
                file: Some(file.clone()),
                non_assumable_choice: Some(NonAssumableChoiceKind::PreferenceTradeoff),
            },
            autonomy,
            true,
        ));
    }
    out
}

/// The divergence a fan-in records when delegation is known unavailable on the branch (decision
/// D172): the lanes cannot have run as parallel subagents, so they ran one after another in the
/// chat (locks §5). Not recorded when the agent reported its own `capability_unavailable`
/// divergence with the acknowledgement, nor when delegation is only `unknown`.
pub(crate) fn sequential_divergence(
    step: &CompiledStep,
    branch: &BranchFacts,
    reports: &Reports,
) -> Option<Divergence> {
    let unavailable =
        branch.strong_status.get(&Capability::Delegation) == Some(&CapabilityStatus::Unavailable);
    let reported = reports
        .divergences
        .iter()
        .any(|d| d.reason == DivergenceReason::CapabilityUnavailable);
    (unavailable && !reported && !branch.lanes.is_empty()).then(|| Divergence {
        reason: DivergenceReason::CapabilityUnavailable,
        summary: format!(
            "Delegation was unavailable: the {} lanes of step '{}' ran one after another in this chat, and their recorded block outputs were fanned in.",
            branch.lanes.len(),
            step.step_id
        ),
        related_step_id: Some(step.step_id.clone()),
    })
}

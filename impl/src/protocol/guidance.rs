//! Capability guidance with the pending step (decision D59): how to use, report or avoid each
//! optional capability the workflow declares (`wr.features.capabilities`), said once per branch
//! rather than in every step's prompt, and never for a capability already observed.
//!
//! It is built from the pinned workflow (its hashed `capabilities` and `features`) and the
//! recorded prefix only, so a replay rebuilds it byte for byte.

use workrail_spec::closed::{Capability, CapabilityRequirement};
use workrail_spec::ids::{NodeId, RunId};
use workrail_spec::snapshot::EngineState;

use super::NodeContext;
use super::Workrail;
use super::advance::Moment;
use super::facts::Facts;
use crate::builtins::features::FeatureId;
use crate::engine::probed_capability;

/// The failure codes an attempted use may report.
const FAILURE_CODES: &str = "`tool_missing`, `tool_error`, `policy_blocked` or `unknown`";

/// The guidance for `node`'s pending step:
/// - none at a probe step (it carries its own instructions) or when the agent stays at a step
///   it has just seen (blocked, checkpoint);
/// - on arrival, only at the branch's first step that is not a probe;
/// - on a rehydrate (maybe a new chat), at any step;
/// - each time, only for capabilities with no observation on the branch.
pub(super) fn capability_guidance(
    wr: &Workrail,
    facts: &Facts<'_>,
    run: &RunId,
    node: &NodeId,
    ctx: &NodeContext,
    state: &EngineState,
    moment: Moment,
) -> Vec<String> {
    let body = &ctx.compiled.body;
    let enabled = body
        .features
        .iter()
        .any(|f| f.feature_id == FeatureId::Capabilities.as_str());
    if !enabled || body.capabilities.is_empty() || moment == Moment::Again {
        return Vec::new();
    }
    let is_probe = |state: &EngineState| {
        state
            .pending_step()
            .and_then(|p| ctx.compiled.step(&p.step_id))
            .is_some_and(|step| probed_capability(step).is_some())
    };
    if state.pending_step().is_none() || is_probe(state) {
        return Vec::new();
    }
    let Some(view) = facts.run(run) else {
        return Vec::new();
    };
    if moment == Moment::Arrival && an_earlier_step_was_shown(wr, facts, run, node, &is_probe) {
        return Vec::new();
    }
    body.capabilities
        .iter()
        .filter(|(capability, _)| view.capability_status(node, **capability).is_none())
        .map(|(capability, requirement)| guidance_line(*capability, *requirement))
        .collect()
}

/// Whether an ancestor of `node` was a step that is not a probe (so the branch has already
/// shown the guidance on arrival there).
fn an_earlier_step_was_shown(
    wr: &Workrail,
    facts: &Facts<'_>,
    run: &RunId,
    node: &NodeId,
    is_probe: &dyn Fn(&EngineState) -> bool,
) -> bool {
    let Some(view) = facts.run(run) else {
        return false;
    };
    // Upwards from the parent: the nearest earlier step is usually not a probe, so this stops
    // at once however deep the branch is.
    view.upwards(node).skip(1).any(|ancestor| {
        facts
            .node(run, ancestor)
            .and_then(|info| wr.store.snapshot(&info.snapshot_ref()).ok())
            .is_some_and(|snapshot| {
                let state = &snapshot.engine_payload.engine_state;
                state.pending_step().is_some() && !is_probe(state)
            })
    })
}

/// One line per declared capability. A preferred capability gets the lazy-attempt pattern
/// (contract "Delegation preferred: lazy attempt + sequential fallback"): try once, fall back to
/// the sequential path, and report the attempt so the observation is durable.
pub(crate) fn guidance_line(capability: Capability, requirement: CapabilityRequirement) -> String {
    // (name, how to use it, what to do without it)
    let (name, use_it, without) = match capability {
        Capability::Delegation => (
            "Delegation (subagents)",
            "delegate independent sub-tasks to subagents",
            "do the sub-tasks yourself one after another",
        ),
        Capability::WebBrowsing => (
            "Web browsing",
            "look up external information on the web",
            "rely on the repository and what the user provided, and list the facts you could not check",
        ),
    };
    let id = capability.as_str();
    match requirement {
        CapabilityRequirement::Required => format!(
            "{name} is required by this workflow: {use_it} where a step needs it. If it does not work, do not guess: add a `wr.capability_observation` artifact to `output.artifacts` with `capability` `{id}`, `status` `unavailable`, a `failureCode` ({FAILURE_CODES}) and the `evidence` of what you tried."
        ),
        CapabilityRequirement::Preferred => format!(
            "{name} is preferred: where a step can use it, try it once ({use_it}). If that fails, fall back ({without}) and add a `wr.capability_observation` artifact to `output.artifacts` with `capability` `{id}`, `status` `unavailable`, a `failureCode` ({FAILURE_CODES}) and the `evidence` of what you tried; the first time it works, report `status` `available` the same way. Once reported, this reminder is not repeated."
        ),
        CapabilityRequirement::Disabled => {
            format!("{name} is disabled for this workflow: do not use it, even if it is available.")
        }
    }
}

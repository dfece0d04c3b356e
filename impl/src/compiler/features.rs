//! Phases 2 and 3: features applied to every step in ascending `featureId` order, then contract
//! requirements resolved into each step's `outputRequired` (locks §5 "Feature application
//! order"; authoring "What happens at compile time").
//!
//! Features only append: injected constraints follow the authored ones, and an injected
//! `outputRequired` entry never replaces one the author wrote.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use workrail_spec::closed::{Capability, CapabilityRequirement, StepSource};

use super::ir::{Item, StepIr, for_each_step_mut};
use super::source::{PromptValue, SourceFeature};
use crate::builtins::contracts::{self, LOOP_CONTROL};
use crate::builtins::features::{
    ARTIFACTS_OUTPUT_KEY, DURABLE_RECAP_NOTES, FeatureId, MODE_GUIDANCE_BRIEF, MODE_GUIDANCE_FULL,
    NOTES_OUTPUT_KEY,
};
use crate::builtins::templates::probe_example_evidence;

/// Features deduped by id and sorted by id (the application order).
pub(crate) fn ordered(features: &[SourceFeature]) -> Vec<&SourceFeature> {
    let mut by_id: BTreeMap<FeatureId, &SourceFeature> = BTreeMap::new();
    for f in features {
        by_id.entry(f.feature).or_insert(f);
    }
    by_id.into_values().collect()
}

fn config_str<'v>(config: &'v Value, field: &str) -> Option<&'v str> {
    config.get(field).and_then(Value::as_str)
}

/// Applies every feature, in order, to every step.
pub(crate) fn apply(
    items: &mut [Item],
    features: &[&SourceFeature],
    capabilities: &BTreeMap<Capability, CapabilityRequirement>,
) {
    for feature in features {
        match feature.feature {
            FeatureId::Capabilities => {
                let lines = capability_lines(capabilities);
                for_each_step_mut(items, &mut |step| {
                    // Probe steps carry their own capability instructions.
                    if step.provenance.source != StepSource::TemplateInjected {
                        push_constraints(step, &lines);
                    }
                });
            }
            FeatureId::DurableRecapGuidance => for_each_step_mut(items, &mut |step| {
                step.blocks
                    .output_required
                    .entry(NOTES_OUTPUT_KEY.to_owned())
                    .or_insert_with(|| DURABLE_RECAP_NOTES.to_owned());
            }),
            FeatureId::ModeGuidance => {
                let lines: Vec<String> = if config_str(&feature.config, "detail") == Some("full") {
                    MODE_GUIDANCE_FULL.iter().map(|l| (*l).to_owned()).collect()
                } else {
                    vec![MODE_GUIDANCE_BRIEF.to_owned()]
                };
                for_each_step_mut(items, &mut |step| push_constraints(step, &lines));
            }
            // Read when contract requirements are rendered (`resolve_contracts`).
            FeatureId::OutputContracts => {}
        }
    }
}

fn push_constraints(step: &mut StepIr, lines: &[String]) {
    step.blocks
        .constraints
        .extend(lines.iter().cloned().map(PromptValue::Text));
}

/// The failure codes an attempted use may report, as the capability lines name them.
const FAILURE_CODES: &str = "`tool_missing`, `tool_error`, `policy_blocked` or `unknown`";

/// One constraint per declared capability. A preferred capability gets the lazy-attempt pattern
/// (contract "Delegation preferred: lazy attempt + sequential fallback"): try once, fall back to
/// the sequential path, and report the attempt so the observation is durable and strong.
fn capability_lines(capabilities: &BTreeMap<Capability, CapabilityRequirement>) -> Vec<String> {
    capabilities
        .iter()
        .map(|(capability, requirement)| {
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
                    "{name} is required by this workflow: {use_it} where this step needs it. If it stops working, do not guess: add a `wr.capability_observation` artifact to `output.artifacts` with `capability` `{id}`, `status` `unavailable`, a `failureCode` ({FAILURE_CODES}) and the `evidence` of what you tried."
                ),
                CapabilityRequirement::Preferred => format!(
                    "{name} is preferred: where this step can use it, try it once ({use_it}). If that fails, fall back ({without}) and add a `wr.capability_observation` artifact to `output.artifacts` with `capability` `{id}`, `status` `unavailable`, a `failureCode` ({FAILURE_CODES}) and the `evidence` of what you tried; the first time it works in this run, report `status` `available` the same way."
                ),
                CapabilityRequirement::Disabled => format!(
                    "{name} is disabled for this workflow: do not use it, even if it is available."
                ),
            }
        })
        .collect()
}

/// Writes each step's contract requirement into `outputRequired.artifacts` and returns the
/// contract refs used (deduped, sorted).
pub(crate) fn resolve_contracts(items: &mut [Item], explain: bool) -> BTreeSet<&'static str> {
    let mut used = BTreeSet::new();
    resolve_list(items, None, explain, &mut used);
    used
}

fn resolve_list(
    items: &mut [Item],
    loop_id: Option<&str>,
    explain: bool,
    used: &mut BTreeSet<&'static str>,
) {
    for item in items {
        match item {
            Item::Step(step) => {
                let Some(contract_ref) = step.contract_ref else {
                    continue;
                };
                let Some(pack) = contracts::find(contract_ref) else {
                    continue;
                };
                used.insert(pack.contract_ref);
                let mut line = format!(
                    "Add one `{}` artifact to `output.artifacts`; WorkRail validates it against `{}` before advancing.",
                    pack.artifact_kind, pack.contract_ref
                );
                let mut example = pack.example();
                if let (Some(capability), Some(map)) =
                    (step.probe_capability, example.as_object_mut())
                {
                    line.push_str(&format!(" Set `capability` to `{}`.", capability.as_str()));
                    map.insert("capability".into(), Value::from(capability.as_str()));
                    map.insert(
                        "evidence".into(),
                        Value::from(probe_example_evidence(capability)),
                    );
                }
                if pack.contract_ref == LOOP_CONTROL
                    && let Some(loop_id) = loop_id
                {
                    line.push_str(&format!(" Set `loopId` to `{loop_id}`."));
                    if let Some(map) = example.as_object_mut() {
                        map.insert("loopId".into(), Value::from(loop_id));
                    }
                }
                if explain {
                    line.push_str(&format!(
                        " Example: `{}`. If it is missing or invalid, `guided` and `full_auto_stop_on_user_deps` block this step until it is fixed; `full_auto_never_stop` records a critical gap and continues.",
                        workrail_spec::jcs::to_canonical_string(&example).unwrap_or_default()
                    ));
                }
                let entry = step
                    .blocks
                    .output_required
                    .entry(ARTIFACTS_OUTPUT_KEY.to_owned())
                    .or_default();
                if entry.is_empty() {
                    *entry = line;
                } else {
                    entry.push(' ');
                    entry.push_str(&line);
                }
            }
            Item::Loop(l) => {
                let id = l.loop_id.as_str().to_owned();
                resolve_list(&mut l.body, Some(&id), explain, used);
            }
        }
    }
}

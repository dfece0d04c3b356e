//! Phases 2 and 3: features applied to every step in ascending `featureId` order, then contract
//! requirements resolved into each step's `outputRequired` (locks §5 "Feature application
//! order"; authoring "What happens at compile time").
//!
//! Features only append: injected constraints follow the authored ones, and an injected
//! `outputRequired` entry never replaces one the author wrote.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

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
pub(crate) fn apply(items: &mut [Item], features: &[&SourceFeature]) {
    for feature in features {
        match feature.feature {
            // Rendered with the pending step at run time, where WorkRail knows what the branch
            // has observed (decision D59), from the hashed `capabilities` and `features`.
            FeatureId::Capabilities => {}
            FeatureId::DurableRecapGuidance => for_each_step_mut(items, &mut |step| {
                // A `notesOptional` step may be acknowledged without notes.
                if step.language.notes_optional {
                    return;
                }
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
            FeatureId::SubagentGuidance => super::content::subagent_guidance(items),
        }
    }
}

fn push_constraints(step: &mut StepIr, lines: &[String]) {
    step.blocks
        .constraints
        .extend(lines.iter().cloned().map(PromptValue::Text));
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

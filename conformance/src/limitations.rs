//! Capabilities a server lacks, declared in its surface file (`limitations`) instead of failed.
//! A limitation excuses steps, not scenarios (decision D166): each takes away a feature
//! ([`Feature`]), and a step that needs it is n/a with the declared reason, as are the steps
//! depending on it, while the rest of the scenario runs. One declaration, `injectsFirstStep`,
//! is also something the runner works around: it acknowledges the injected step right after
//! `start_workflow`, so only the steps that count every stored event of a kind are n/a.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::features::Feature;
use crate::scenario::Step;

/// One declared limitation of a server.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase", deny_unknown_fields)]
pub enum Limitation {
    /// No way to choose an autonomy mode on start. With `defaultMode`, every session runs in
    /// that mode, so a step asking for it runs (without selecting anything); a step asking for
    /// another mode is n/a.
    #[serde(rename_all = "camelCase")]
    AutonomyNotSelectable {
        #[serde(default)]
        default_mode: Option<String>,
        reason: String,
    },
    /// No `export_session` / `import_session` tools.
    NoExportImport { reason: String },
    /// `start_workflow` answers with a step of the server's own before the workflow's first
    /// step, recognised by its `pending.stepId`. The runner acknowledges it (a
    /// `continue_workflow` with the response's tokens and `ackArgs`) and uses that answer as the
    /// start's; steps that count every stored event of a kind are n/a (the history holds the
    /// injected step).
    #[serde(rename_all = "camelCase")]
    InjectsFirstStep {
        step_id: String,
        #[serde(default)]
        ack_args: Map<String, Value>,
        reason: String,
    },
    /// `list_workflows` needs a tag (no untagged discovery).
    DiscoveryNeedsTag { reason: String },
}

impl Limitation {
    /// Why `step`, which needs `feature`, cannot run on a server with this limitation, if it
    /// cannot.
    pub fn lacks(&self, feature: Feature, step: &Step) -> Option<String> {
        match (self, feature) {
            (
                Self::AutonomyNotSelectable {
                    default_mode,
                    reason,
                },
                Feature::ModeSelection,
            ) => {
                let wanted = match step {
                    Step::Call {
                        autonomy: Some(m), ..
                    } => Some(m.as_str()),
                    _ => None,
                };
                let needs = wanted.map_or_else(
                    || "needs to choose an autonomy mode".to_owned(),
                    |m| format!("needs autonomy mode `{m}`"),
                );
                match default_mode {
                    Some(only) if wanted == Some(only.as_str()) => None,
                    Some(only) => Some(format!(
                        "{needs}, and the server cannot select a mode (it runs every session in `{only}`): {reason}"
                    )),
                    None => Some(format!(
                        "{needs}, and the server cannot select a mode: {reason}"
                    )),
                }
            }
            (Self::NoExportImport { reason }, Feature::ExportImport) => Some(format!(
                "needs export/import, and the server has no export/import tools: {reason}"
            )),
            (Self::DiscoveryNeedsTag { reason }, Feature::UntaggedDiscovery) => Some(format!(
                "needs untagged discovery, and the server's discovery needs a tag: {reason}"
            )),
            (
                Self::InjectsFirstStep {
                    step_id, reason, ..
                },
                Feature::ExactHistory,
            ) => Some(format!(
                "counts every stored event of a kind, and the server injects a first step ({step_id}) whose events the scenario did not cause: {reason}"
            )),
            _ => None,
        }
    }
}

/// The first declared limitation that takes `feature` away from `step`, as the reason.
pub fn lacking(limitations: &[Limitation], feature: Feature, step: &Step) -> Option<String> {
    limitations.iter().find_map(|l| l.lacks(feature, step))
}

/// Whether the server can select an autonomy mode (no `autonomyNotSelectable` declared): when
/// it cannot, a step asking for its one mode is sent without selecting anything.
pub fn selects_modes(limitations: &[Limitation]) -> bool {
    !limitations
        .iter()
        .any(|l| matches!(l, Limitation::AutonomyNotSelectable { .. }))
}

/// The injected first step a surface declares, if any: its step id and the extra ack arguments.
pub fn injected_first_step(limitations: &[Limitation]) -> Option<(&str, &Map<String, Value>)> {
    limitations.iter().find_map(|l| match l {
        Limitation::InjectsFirstStep {
            step_id, ack_args, ..
        } => Some((step_id.as_str(), ack_args)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn step(v: Value) -> Step {
        serde_json::from_value(v).unwrap()
    }

    fn limitation(v: Value) -> Limitation {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn each_limitation_takes_away_only_its_feature() {
        let guided = step(
            json!({"do": "call", "tool": "start_workflow", "autonomy": "guided", "expect": "ok"}),
        );
        let never = step(
            json!({"do": "call", "tool": "start_workflow", "autonomy": "full_auto_never_stop", "expect": "ok"}),
        );
        let plain = step(json!({"do": "call", "tool": "start_workflow", "expect": "ok"}));
        let autonomy = limitation(json!({"kind": "autonomyNotSelectable", "reason": "no modes"}));
        let only_guided = limitation(
            json!({"kind": "autonomyNotSelectable", "defaultMode": "guided", "reason": "guided only"}),
        );
        let bundles = limitation(json!({"kind": "noExportImport", "reason": "no bundles"}));
        let tag = limitation(json!({"kind": "discoveryNeedsTag", "reason": "tags only"}));
        let injected = limitation(
            json!({"kind": "injectsFirstStep", "stepId": "wr-system-onboarding",
            "ackArgs": {"notes": "ok"}, "reason": "an intent step"}),
        );
        let why = autonomy.lacks(Feature::ModeSelection, &guided).unwrap();
        assert!(
            why.contains("`guided`") && why.ends_with("no modes"),
            "{why}"
        );
        assert_eq!(only_guided.lacks(Feature::ModeSelection, &guided), None);
        let why = only_guided.lacks(Feature::ModeSelection, &never).unwrap();
        assert!(why.contains("runs every session in `guided`"), "{why}");
        for (l, f, ends) in [
            (&bundles, Feature::ExportImport, "no bundles"),
            (&tag, Feature::UntaggedDiscovery, "tags only"),
            (&injected, Feature::ExactHistory, "an intent step"),
        ] {
            assert!(l.lacks(f, &plain).unwrap().ends_with(ends));
            assert_eq!(l.lacks(Feature::ModeSelection, &guided), None, "{l:?}");
        }
        assert_eq!(autonomy.lacks(Feature::ExportImport, &plain), None);
        let all = [autonomy.clone(), bundles, tag, injected];
        assert!(
            lacking(&all, Feature::UntaggedDiscovery, &plain)
                .unwrap()
                .contains("needs a tag")
        );
        assert_eq!(lacking(&all, Feature::Checkpoint, &plain), None);
        assert!(!selects_modes(&all));
        assert!(selects_modes(&all[1..]));
        let (id, args) = injected_first_step(&all).unwrap();
        assert_eq!(
            (id, args.get("notes")),
            ("wr-system-onboarding", Some(&json!("ok")))
        );
        assert!(injected_first_step(&all[..3]).is_none());
    }

    #[test]
    fn unknown_limitations_are_refused() {
        let e =
            serde_json::from_value::<Limitation>(json!({"kind": "noCheckpoints", "reason": "x"}));
        assert!(e.is_err());
        let e = serde_json::from_value::<Limitation>(json!({"kind": "noExportImport"}));
        assert!(e.is_err(), "a limitation without a reason");
    }
}

//! Features a step needs (test262-style tags, decision D166).
//!
//! Each step of a scenario declares, in `needs`, the server features it relies on beyond the
//! locks' minimum; the surface file declares what the server lacks (its `limitations`, and the
//! tools it lists). A step needing a feature the server lacks is n/a: it is not sent, it neither
//! passes nor fails, and the steps that depend on it (read what it saves, or name it in
//! `dependsOn`) are n/a too; the rest of the scenario runs. The loader refuses a step that does
//! something a feature governs without declaring that feature, so a tag cannot be forgotten.

use std::fmt;

use serde::Deserialize;
use serde_json::Value;

use crate::scenario::Step;

/// A server feature a step may need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Feature {
    /// Choosing the autonomy mode a step names (`autonomy` on a call). A server that cannot
    /// choose but always runs in one mode has this feature for that mode only.
    ModeSelection,
    /// `export_session` / `import_session`.
    ExportImport,
    /// `list_workflows` without a tag.
    UntaggedDiscovery,
    /// `checkpoint_workflow` (feature-flagged in the contract).
    Checkpoint,
    /// A store holding exactly the events of the scenario's own calls, so an upper bound on
    /// the events of a kind means something (a server that injects a step of its own adds
    /// events the scenario did not cause).
    ExactHistory,
}

impl Feature {
    /// The tag as scenario files spell it.
    pub fn tag(self) -> &'static str {
        match self {
            Self::ModeSelection => "modeSelection",
            Self::ExportImport => "exportImport",
            Self::UntaggedDiscovery => "untaggedDiscovery",
            Self::Checkpoint => "checkpoint",
            Self::ExactHistory => "exactHistory",
        }
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.tag())
    }
}

/// Tools of the export/import feature.
pub const EXPORT_IMPORT_TOOLS: [&str; 2] = ["export_session", "import_session"];

/// The features what a step does needs; its `needs` must list each of them.
pub fn implied(step: &Step) -> Vec<Feature> {
    let mut out = Vec::new();
    match step {
        Step::Call { tool, autonomy, .. } => {
            if autonomy.is_some() {
                out.push(Feature::ModeSelection);
            }
            if EXPORT_IMPORT_TOOLS.contains(&tool.as_str()) {
                out.push(Feature::ExportImport);
            }
            if tool == "list_workflows" {
                out.push(Feature::UntaggedDiscovery);
            }
            if tool == "checkpoint_workflow" {
                out.push(Feature::Checkpoint);
            }
        }
        Step::Events {
            pattern,
            at_most: Some(_),
            ..
        } if counts_a_whole_kind(pattern) => out.push(Feature::ExactHistory),
        _ => {}
    }
    out
}

/// Whether an event pattern matches on the event kind alone (so an upper bound on its matches
/// counts every stored event of that kind).
fn counts_a_whole_kind(pattern: &Value) -> bool {
    pattern
        .as_object()
        .is_some_and(|p| p.keys().all(|k| k == "kind"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn step(v: Value) -> Step {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn each_feature_is_implied_by_what_the_step_does() {
        let cases = [
            (
                json!({"do": "call", "tool": "start_workflow", "autonomy": "guided", "expect": "ok"}),
                vec![Feature::ModeSelection],
            ),
            (
                json!({"do": "call", "tool": "export_session", "expect": "ok"}),
                vec![Feature::ExportImport],
            ),
            (
                json!({"do": "call", "tool": "list_workflows", "expect": "ok"}),
                vec![Feature::UntaggedDiscovery],
            ),
            (
                json!({"do": "call", "tool": "checkpoint_workflow", "expect": "ok"}),
                vec![Feature::Checkpoint],
            ),
            (
                json!({"do": "events", "events": "ev", "match": {"kind": "gap_recorded"},
                       "atLeast": 0, "atMost": 0, "what": "none", "lock": []}),
                vec![Feature::ExactHistory],
            ),
            (
                json!({"do": "events", "events": "ev", "match": {"kind": "gap_recorded", "data": {}},
                       "atLeast": 0, "atMost": 0, "what": "none", "lock": []}),
                vec![],
            ),
            (
                json!({"do": "events", "events": "ev", "match": {"kind": "gap_recorded"},
                       "what": "some", "lock": []}),
                vec![],
            ),
            (
                json!({"do": "call", "tool": "continue_workflow", "expect": "ok"}),
                vec![],
            ),
        ];
        for (s, want) in cases {
            assert_eq!(implied(&step(s.clone())), want, "{s}");
        }
    }

    #[test]
    fn tags_round_trip() {
        for f in [
            Feature::ModeSelection,
            Feature::ExportImport,
            Feature::UntaggedDiscovery,
            Feature::Checkpoint,
            Feature::ExactHistory,
        ] {
            let back: Feature = serde_json::from_value(json!(f.tag())).unwrap();
            assert_eq!(back, f);
        }
        assert!(serde_json::from_value::<Feature>(json!("fork")).is_err());
    }
}

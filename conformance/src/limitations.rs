//! Capabilities a server lacks, declared in its surface file (`limitations`) instead of failed:
//! the scenarios that need them are N/A (SKIP) with the declared reason. One declaration,
//! `injectsFirstStep`, is also something the runner can work around: it acknowledges the
//! injected step right after `start_workflow`, so only the scenarios that count every stored
//! event of a kind are N/A.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::scenario::{Scenario, Step};

/// One declared limitation of a server.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase", deny_unknown_fields)]
pub enum Limitation {
    /// No way to choose an autonomy mode on start: scenarios with an `autonomy` call are N/A.
    AutonomyNotSelectable { reason: String },
    /// No `export_session` / `import_session` tools: the scenarios that need them are N/A.
    NoExportImport { reason: String },
    /// `start_workflow` answers with a step of the server's own before the workflow's first
    /// step, recognised by its `pending.stepId`. The runner acknowledges it (a
    /// `continue_workflow` with the response's tokens and `ackArgs`) and uses that answer as the
    /// start's; scenarios that count every stored event of a kind are N/A (the history holds
    /// the injected step).
    #[serde(rename_all = "camelCase")]
    InjectsFirstStep {
        step_id: String,
        #[serde(default)]
        ack_args: Map<String, Value>,
        reason: String,
    },
    /// `list_workflows` needs a tag (no untagged discovery): scenarios calling it are N/A.
    DiscoveryNeedsTag { reason: String },
}

/// Tools of the export/import capability.
const EXPORT_IMPORT_TOOLS: [&str; 2] = ["export_session", "import_session"];

impl Limitation {
    /// Why `s` cannot be judged on a server with this limitation, if it cannot.
    pub fn excuses(&self, s: &Scenario) -> Option<String> {
        let steps = || s.steps.iter().map(|n| &n.step);
        let calls = |wanted: &dyn Fn(&str) -> bool| {
            steps().any(|step| matches!(step, Step::Call { tool, .. } if wanted(tool)))
        };
        match self {
            Self::AutonomyNotSelectable { reason } => steps()
                .any(|step| matches!(step, Step::Call { autonomy: Some(_), .. }))
                .then(|| format!("the server cannot select an autonomy mode: {reason}")),
            Self::NoExportImport { reason } => (s
                .requires_tools
                .iter()
                .any(|t| EXPORT_IMPORT_TOOLS.contains(&t.as_str()))
                || calls(&|t| EXPORT_IMPORT_TOOLS.contains(&t)))
            .then(|| format!("the server has no export/import tools: {reason}")),
            Self::DiscoveryNeedsTag { reason } => calls(&|t| t == "list_workflows")
                .then(|| format!("the server's discovery needs a tag: {reason}")),
            Self::InjectsFirstStep { step_id, reason, .. } => steps()
                .any(|step| match step {
                    Step::Events {
                        pattern,
                        at_most: Some(_),
                        ..
                    } => pattern.as_object().is_some_and(|p| p.keys().all(|k| k == "kind")),
                    _ => false,
                })
                .then(|| {
                    format!(
                        "the server injects a first step ({step_id}) and the scenario counts every stored event of a kind: {reason}"
                    )
                }),
        }
    }
}

/// The first declared limitation that excuses `s`, as its skip reason.
pub fn excused(limitations: &[Limitation], s: &Scenario) -> Option<String> {
    limitations.iter().find_map(|l| l.excuses(s))
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

    fn scenario(steps: Value, requires: &[&str]) -> Scenario {
        let doc = json!({
            "name": "probe",
            "description": "probe",
            "lockIds": ["L-MCP-EXECUTION-RESPONSE"],
            "profile": "core",
            "requiresTools": requires,
            "steps": steps,
        });
        Scenario::parse(&doc.to_string(), std::path::Path::new("probe.json")).unwrap()
    }

    fn limitation(v: Value) -> Limitation {
        serde_json::from_value(v).unwrap()
    }

    fn start(extra: Value) -> Value {
        let mut step = json!({"do": "call", "tool": "start_workflow",
            "args": {"workflowId": "conformance.linear"}, "expect": "ok"});
        if let (Some(s), Some(e)) = (step.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        step
    }

    #[test]
    fn each_limitation_excuses_only_the_scenarios_that_need_it() {
        let plain = scenario(json!([start(json!({}))]), &[]);
        let guided = scenario(json!([start(json!({"autonomy": "guided"}))]), &[]);
        let export = scenario(
            json!([start(json!({}))]),
            &["export_session", "import_session"],
        );
        let listing = scenario(
            json!([{"do": "call", "tool": "list_workflows", "args": {}, "expect": "ok"}]),
            &[],
        );
        let counting = scenario(
            json!([
                start(json!({})),
                {"do": "storeEvents", "save": "ev"},
                {"do": "events", "events": "ev", "match": {"kind": "advance_recorded"},
                 "atLeast": 0, "atMost": 0, "what": "no advance",
                 "lock": ["L-MCP-EXECUTION-RESPONSE"]}
            ]),
            &[],
        );
        let autonomy = limitation(json!({"kind": "autonomyNotSelectable", "reason": "no modes"}));
        let bundles = limitation(json!({"kind": "noExportImport", "reason": "no bundles"}));
        let tag = limitation(json!({"kind": "discoveryNeedsTag", "reason": "tags only"}));
        let injected = limitation(
            json!({"kind": "injectsFirstStep", "stepId": "wr-system-onboarding",
            "ackArgs": {"notes": "ok"}, "reason": "an intent step"}),
        );
        for (l, needs) in [
            (&autonomy, &guided),
            (&bundles, &export),
            (&tag, &listing),
            (&injected, &counting),
        ] {
            let why = l
                .excuses(needs)
                .unwrap_or_else(|| panic!("{l:?} excuses {}", needs.name));
            assert!(
                why.ends_with(match l {
                    Limitation::AutonomyNotSelectable { reason }
                    | Limitation::NoExportImport { reason }
                    | Limitation::DiscoveryNeedsTag { reason }
                    | Limitation::InjectsFirstStep { reason, .. } => reason.as_str(),
                }),
                "{why}"
            );
            assert_eq!(l.excuses(&plain), None, "{l:?} excuses a plain start");
        }
        assert_eq!(autonomy.excuses(&export), None);
        assert_eq!(tag.excuses(&counting), None);
        let all = [autonomy, bundles, tag, injected];
        assert_eq!(excused(&all, &plain), None);
        assert!(excused(&all, &listing).unwrap().contains("needs a tag"));
        let (step, args) = injected_first_step(&all).unwrap();
        assert_eq!(
            (step, args.get("notes")),
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

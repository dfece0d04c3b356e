//! The restart rule between an applied and a desired config (locks §6 "Restart-required
//! triggers"), over generated config pairs.
//!
//! Guards against: a runtime-safe change (preference defaults, retention, a flag that gates no
//! tool) reported as needing a restart; a tool, schema, source or tool-gating flag change that
//! goes unreported; and an `appliedConfigHash` that is not the digest of the canonical form.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use workrail_spec::closed::{Autonomy, RiskPolicy, WorkflowSourceKind};
use workrail_spec::config::{
    AppliedConfigV1, CONFIG_VERSION, FeatureFlagSetting, PreferenceDefaults, RestartTrigger,
    RetentionSettings, SourceRegistration, ToolSchemaDigests, compare,
};
use workrail_spec::ids::{SessionId, Sha256Digest};
use workrail_spec::jcs::sha256;

fn digest(n: u8) -> Sha256Digest {
    sha256(&[n])
}

fn flag() -> impl Strategy<Value = FeatureFlagSetting> {
    (0u8..4, any::<bool>(), any::<bool>()).prop_map(|(n, on, gates)| FeatureFlagSetting {
        name: format!("flag_{n}"),
        on,
        gates: if gates {
            vec![format!("tool_{n}")]
        } else {
            Vec::new()
        },
    })
}

fn config() -> impl Strategy<Value = AppliedConfigV1> {
    (
        proptest::collection::btree_map(0u8..4, (any::<bool>(), 0u8..3), 0..4),
        proptest::collection::vec((0u8..5, 0u8..3, 0u8..3), 0..5),
        proptest::collection::vec((0usize..3, 0u8..3), 0..4),
        (
            0usize..3,
            0usize..3,
            1u64..90,
            proptest::collection::vec(0u8..3, 0..3),
        ),
    )
        .prop_map(|(flags, tools, sources, (autonomy, risk, ttl, keep))| {
            let mut seen = std::collections::BTreeSet::new();
            AppliedConfigV1 {
                v: CONFIG_VERSION,
                features: flags
                    .into_iter()
                    .map(|(n, (on, gates))| FeatureFlagSetting {
                        name: format!("flag_{n}"),
                        on,
                        gates: (0..gates).map(|g| format!("tool_{g}")).collect(),
                    })
                    .collect(),
                tools: tools
                    .into_iter()
                    .filter(|(n, _, _)| seen.insert(*n))
                    .map(|(n, i, o)| ToolSchemaDigests {
                        name: format!("tool_{n}"),
                        input_schema: digest(i),
                        output_schema: digest(10 + o),
                    })
                    .collect(),
                sources: sources
                    .into_iter()
                    .map(|(k, d)| SourceRegistration {
                        kind: [
                            WorkflowSourceKind::Bundled,
                            WorkflowSourceKind::Project,
                            WorkflowSourceKind::User,
                        ][k],
                        label: format!("dir{d}"),
                        directory: Some(format!("/w/{d}")),
                    })
                    .collect(),
                preferences: PreferenceDefaults {
                    autonomy: Autonomy::ALL[autonomy],
                    risk_policy: RiskPolicy::ALL[risk],
                },
                retention: RetentionSettings {
                    ttl_days: ttl,
                    keep: keep
                        .into_iter()
                        .map(|k| SessionId::parse(&format!("sess_{k}")).unwrap())
                        .collect(),
                },
            }
        })
}

/// What a restart decides by, independently of `compare`: the tool names, each tool's schemas,
/// the sources in order, and the value of every flag that gates a tool on either side.
fn restart_relevant(a: &AppliedConfigV1, b: &AppliedConfigV1) -> (bool, bool, bool, bool) {
    let mut na: Vec<&str> = a.tools.iter().map(|t| t.name.as_str()).collect();
    let mut nb: Vec<&str> = b.tools.iter().map(|t| t.name.as_str()).collect();
    na.sort_unstable();
    nb.sort_unstable();
    let tools = na != nb;
    let schemas = a.tools.iter().any(|t| {
        b.tools.iter().any(|u| {
            u.name == t.name
                && (u.input_schema != t.input_schema || u.output_schema != t.output_schema)
        })
    });
    let sources = a.sources != b.sources;
    let gating = |c: &AppliedConfigV1, name: &str| {
        c.features
            .iter()
            .any(|f| f.name == name && !f.gates.is_empty())
    };
    let on = |c: &AppliedConfigV1, name: &str| c.features.iter().any(|f| f.name == name && f.on);
    let flags =
        a.features.iter().chain(&b.features).any(|f| {
            (gating(a, &f.name) || gating(b, &f.name)) && on(a, &f.name) != on(b, &f.name)
        });
    (tools, schemas, sources, flags)
}

proptest! {
    /// lock: L-CONSOLE-RESTART-TRIGGERS
    #[test]
    fn a_restart_is_required_iff_a_trigger_of_the_closed_set_changed(a in config(), b in config()) {
        let comparison = compare(&a, &b);
        let (tools, schemas, sources, flags) = restart_relevant(&a, &b);
        prop_assert_eq!(comparison.restart_required, tools || schemas || sources || flags);
        prop_assert_eq!(comparison.restart_required, !comparison.triggers.is_empty());
        let has = |kind: &str| comparison.triggers.iter().any(|t| t.kind() == kind);
        prop_assert_eq!(has("tool_set_changed"), tools);
        prop_assert_eq!(has("tool_schema_changed"), schemas);
        prop_assert_eq!(has("source_registration_changed"), sources);
        prop_assert_eq!(has("tool_gating_flag_changed"), flags);
        prop_assert_eq!(comparison.in_sync, a == b);
        prop_assert!(compare(&a, &a).in_sync && !compare(&a, &a).restart_required);
    }

    /// lock: L-CONSOLE-RESTART-TRIGGERS
    #[test]
    fn runtime_safe_changes_never_require_a_restart(
        a in config(),
        autonomy in 0usize..3,
        risk in 0usize..3,
        ttl in 1u64..400,
        extra in flag(),
    ) {
        let mut b = a.clone();
        b.preferences = PreferenceDefaults {
            autonomy: Autonomy::ALL[autonomy],
            risk_policy: RiskPolicy::ALL[risk],
        };
        b.retention.ttl_days = ttl;
        b.retention.keep.clear();
        // A flag that gates no tool, flipped.
        let name = format!("{}_ui", extra.name);
        b.features.retain(|f| f.name != name);
        b.features.push(FeatureFlagSetting { name, on: true, gates: Vec::new() });
        let comparison = compare(&a, &b);
        prop_assert!(!comparison.restart_required, "{:?}", comparison.triggers);
        prop_assert_eq!(comparison.in_sync, a == b);
        prop_assert_eq!(comparison.runtime_safe_changes.is_empty(), a == b);
    }

    /// lock: L-CONSOLE-APPLIED-CONFIG
    #[test]
    fn the_applied_config_hash_is_the_digest_of_the_canonical_form(a in config(), b in config()) {
        let bytes = workrail_spec::jcs::to_canonical_bytes(&a).unwrap();
        prop_assert_eq!(a.hash().unwrap(), sha256(&bytes));
        prop_assert_eq!(a.hash().unwrap() == b.hash().unwrap(), a == b);
        let back: AppliedConfigV1 = serde_json::from_slice(&bytes).unwrap();
        prop_assert_eq!(back, a);
    }
}

/// lock: L-CONSOLE-RESTART-TRIGGERS
#[test]
fn a_switched_tool_names_its_flag_and_the_tool() {
    let tool = |name: &str| ToolSchemaDigests {
        name: name.to_owned(),
        input_schema: digest(1),
        output_schema: digest(2),
    };
    let flag = |on| FeatureFlagSetting {
        name: "resume_session".to_owned(),
        on,
        gates: vec!["resume_session".to_owned()],
    };
    let applied = AppliedConfigV1 {
        v: CONFIG_VERSION,
        features: vec![flag(true)],
        tools: vec![tool("list_workflows"), tool("resume_session")],
        sources: Vec::new(),
        preferences: PreferenceDefaults {
            autonomy: Autonomy::Guided,
            risk_policy: RiskPolicy::Conservative,
        },
        retention: RetentionSettings {
            ttl_days: 60,
            keep: Vec::new(),
        },
    };
    let mut desired = applied.clone();
    desired.features = vec![flag(false)];
    desired.tools.pop();
    let comparison = compare(&applied, &desired);
    assert_eq!(
        comparison.triggers,
        vec![
            RestartTrigger::ToolSetChanged {
                added: vec![],
                removed: vec!["resume_session".to_owned()],
            },
            RestartTrigger::ToolGatingFlagChanged {
                flag: "resume_session".to_owned(),
                applied: true,
                desired: false,
            },
        ]
    );
    let wire = serde_json::to_value(&comparison.triggers[1]).unwrap();
    assert_eq!(
        wire,
        serde_json::json!({"kind": "tool_gating_flag_changed", "flag": "resume_session", "applied": true, "desired": false})
    );
}

//! The preference closed sets, the partial orders recommendations compare by, the WorkRail-owned
//! mode presets and the recommendation warning record (locks §4, §5).
//!
//! Guards against a preference bag that grows silently (an unknown key or value accepted), a
//! comparison that is not the locked order (e.g. alphabetical), presets drifting from the locked
//! mapping, and a warning record that is not a pure function of its inputs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use workrail_spec::closed::{Autonomy, PreferenceKey, RiskPolicy};
use workrail_spec::compiled::Recommendations;
use workrail_spec::event::{EffectivePreferences, PreferenceDelta};
use workrail_spec::preferences::{
    ModePreset, PREFERENCE_WARNING_KIND, PreferenceWarningV1, requested_delta,
};
use workrail_spec::tools::{ContinueWorkflowInput, StartWorkflowInput};

/// lock: L-PREF-CLOSED-SET
#[test]
fn preferences_are_two_closed_keys_with_closed_values() {
    assert_eq!(
        Autonomy::ALL.iter().map(|a| a.as_str()).collect::<Vec<_>>(),
        [
            "guided",
            "full_auto_stop_on_user_deps",
            "full_auto_never_stop"
        ]
    );
    assert_eq!(
        RiskPolicy::ALL
            .iter()
            .map(|r| r.as_str())
            .collect::<Vec<_>>(),
        ["conservative", "balanced", "aggressive"]
    );
    assert_eq!(
        PreferenceKey::ALL
            .iter()
            .map(|k| k.as_str())
            .collect::<Vec<_>>(),
        ["autonomy", "riskPolicy"]
    );
    // Every key/value pair of the closed sets is accepted on the wire ...
    for a in Autonomy::ALL {
        let d: PreferenceDelta =
            serde_json::from_value(json!({"key": "autonomy", "value": a.as_str()})).unwrap();
        assert_eq!(d, PreferenceDelta::Autonomy(*a));
    }
    for r in RiskPolicy::ALL {
        let d: PreferenceDelta =
            serde_json::from_value(json!({"key": "riskPolicy", "value": r.as_str()})).unwrap();
        assert_eq!(d, PreferenceDelta::RiskPolicy(*r));
    }
    // ... and nothing else: no new keys, no values of one key under the other, no extra fields.
    for bad in [
        json!({"key": "verbosity", "value": "high"}),
        json!({"key": "autonomy", "value": "yolo"}),
        json!({"key": "autonomy", "value": "balanced"}),
        json!({"key": "riskPolicy", "value": "guided"}),
        json!({"key": "autonomy", "value": "guided", "scope": "global"}),
    ] {
        assert!(
            serde_json::from_value::<PreferenceDelta>(bad.clone()).is_err(),
            "{bad} was accepted"
        );
    }
    assert!(
        serde_json::from_value::<EffectivePreferences>(
            json!({"autonomy": "guided", "riskPolicy": "conservative", "verbosity": "high"})
        )
        .is_err()
    );
    // The tool inputs carry exactly these (a workflow or a caller cannot add keys).
    assert!(
        serde_json::from_value::<StartWorkflowInput>(json!({
            "workflowId": "wr.coding_task",
            "preferences": [{"key": "tone", "value": "terse"}]
        }))
        .is_err()
    );
    assert!(
        serde_json::from_value::<ContinueWorkflowInput>(json!({
            "stateToken": "st.v1.x.y",
            "preset": "turbo"
        }))
        .is_err()
    );
    assert!(
        serde_json::from_value::<Recommendations>(json!({"recommendedVerbosity": "high"})).is_err(),
        "recommendations use the preference keys only"
    );
}

/// lock: L-PREF-ORDER
#[test]
fn recommendations_compare_by_the_locked_partial_orders() {
    // Every pair: a warning iff the effective value ranks above the recommendation, where the
    // rank is the locked order (not the alphabetical or declaration-independent one).
    let autonomy_order = [
        Autonomy::Guided,
        Autonomy::FullAutoStopOnUserDeps,
        Autonomy::FullAutoNeverStop,
    ];
    let risk_order = [
        RiskPolicy::Conservative,
        RiskPolicy::Balanced,
        RiskPolicy::Aggressive,
    ];
    for (ei, e) in autonomy_order.iter().enumerate() {
        for (ri, r) in autonomy_order.iter().enumerate() {
            let rec = Recommendations {
                recommended_autonomy: Some(*r),
                recommended_risk_policy: None,
            };
            let prefs = EffectivePreferences {
                autonomy: *e,
                risk_policy: RiskPolicy::Aggressive,
            };
            let warning = PreferenceWarningV1::evaluate(prefs, &rec);
            assert_eq!(
                warning.is_some(),
                ei > ri,
                "autonomy {e} vs recommended {r}"
            );
            if let Some(w) = warning {
                assert_eq!(w.exceeded, [PreferenceKey::Autonomy]);
                assert_eq!(w.highest_safe.autonomy, *r, "capped at the recommendation");
                assert_eq!(
                    w.highest_safe.risk_policy,
                    RiskPolicy::Aggressive,
                    "an unrecommended key is left as chosen"
                );
            }
        }
    }
    for (ei, e) in risk_order.iter().enumerate() {
        for (ri, r) in risk_order.iter().enumerate() {
            let rec = Recommendations {
                recommended_autonomy: None,
                recommended_risk_policy: Some(*r),
            };
            let prefs = EffectivePreferences {
                autonomy: Autonomy::FullAutoNeverStop,
                risk_policy: *e,
            };
            let warning = PreferenceWarningV1::evaluate(prefs, &rec);
            assert_eq!(
                warning.is_some(),
                ei > ri,
                "riskPolicy {e} vs recommended {r}"
            );
            if let Some(w) = warning {
                assert_eq!(w.exceeded, [PreferenceKey::RiskPolicy]);
                assert_eq!(w.highest_safe.risk_policy, *r);
            }
        }
    }
    // Below the recommendation on one key, above on the other: only the exceeded key is
    // capped (the safe suggestion never raises automation).
    let rec = Recommendations {
        recommended_autonomy: Some(Autonomy::FullAutoNeverStop),
        recommended_risk_policy: Some(RiskPolicy::Conservative),
    };
    let w = PreferenceWarningV1::evaluate(
        EffectivePreferences {
            autonomy: Autonomy::Guided,
            risk_policy: RiskPolicy::Balanced,
        },
        &rec,
    )
    .unwrap();
    assert_eq!(w.highest_safe, EffectivePreferences::GUIDED);
    assert!(
        PreferenceWarningV1::evaluate(EffectivePreferences::GUIDED, &Recommendations::default())
            .is_none(),
        "no recommendation, no warning"
    );
}

/// lock: L-PREF-PRESETS
#[test]
fn mode_presets_are_the_locked_workrail_owned_mapping() {
    let mapping: Vec<(&str, &str, Autonomy, RiskPolicy)> = ModePreset::ALL
        .iter()
        .map(|p| {
            (
                p.as_str(),
                p.label(),
                p.preferences().autonomy,
                p.preferences().risk_policy,
            )
        })
        .collect();
    assert_eq!(
        mapping,
        [
            (
                "guided",
                "Guided",
                Autonomy::Guided,
                RiskPolicy::Conservative
            ),
            (
                "full_auto_stop_on_user_deps",
                "Full-auto (stop on user deps)",
                Autonomy::FullAutoStopOnUserDeps,
                RiskPolicy::Balanced
            ),
            (
                "full_auto_never_stop",
                "Full-auto (never stop)",
                Autonomy::FullAutoNeverStop,
                RiskPolicy::Conservative
            ),
        ]
    );
    // A preset sets both keys; an explicit key overrides it; a key twice is refused.
    assert_eq!(
        requested_delta(Some(ModePreset::FullAutoStopOnUserDeps), &[]).unwrap(),
        [
            PreferenceDelta::Autonomy(Autonomy::FullAutoStopOnUserDeps),
            PreferenceDelta::RiskPolicy(RiskPolicy::Balanced)
        ]
    );
    assert_eq!(
        requested_delta(
            Some(ModePreset::FullAutoNeverStop),
            &[PreferenceDelta::RiskPolicy(RiskPolicy::Aggressive)]
        )
        .unwrap(),
        [
            PreferenceDelta::Autonomy(Autonomy::FullAutoNeverStop),
            PreferenceDelta::RiskPolicy(RiskPolicy::Aggressive)
        ]
    );
    let twice = [
        PreferenceDelta::Autonomy(Autonomy::Guided),
        PreferenceDelta::Autonomy(Autonomy::FullAutoNeverStop),
    ];
    assert_eq!(
        requested_delta(None, &twice).unwrap_err().0,
        PreferenceKey::Autonomy
    );
    // Warnings name the preset that is the highest safe combination, when there is one.
    let w = PreferenceWarningV1::evaluate(
        EffectivePreferences {
            autonomy: Autonomy::FullAutoNeverStop,
            risk_policy: RiskPolicy::Aggressive,
        },
        &Recommendations {
            recommended_autonomy: Some(Autonomy::FullAutoStopOnUserDeps),
            recommended_risk_policy: Some(RiskPolicy::Balanced),
        },
    )
    .unwrap();
    assert_eq!(
        ModePreset::matching(w.highest_safe),
        Some(ModePreset::FullAutoStopOnUserDeps)
    );
    assert!(
        w.message.contains("Full-auto (stop on user deps) preset"),
        "{}",
        w.message
    );
}

/// lock: L-PREF-WARNINGS
#[test]
fn a_warning_record_is_structured_text_first_and_deterministic() {
    let rec = Recommendations {
        recommended_autonomy: Some(Autonomy::FullAutoStopOnUserDeps),
        recommended_risk_policy: Some(RiskPolicy::Balanced),
    };
    let prefs = EffectivePreferences {
        autonomy: Autonomy::FullAutoNeverStop,
        risk_policy: RiskPolicy::Aggressive,
    };
    let w = PreferenceWarningV1::evaluate(prefs, &rec).unwrap();
    let value = w.to_value().unwrap();
    assert_eq!(value["v"], 1);
    assert_eq!(value["kind"], PREFERENCE_WARNING_KIND);
    assert_eq!(value["exceeded"], json!(["autonomy", "riskPolicy"]));
    assert_eq!(
        value["highestSafe"],
        json!({"autonomy": "full_auto_stop_on_user_deps", "riskPolicy": "balanced"})
    );
    assert_eq!(
        value["recommended"],
        json!({"recommendedAutonomy": "full_auto_stop_on_user_deps", "recommendedRiskPolicy": "balanced"})
    );
    // Text first: the message states both excesses, the safe combination and that it never blocks.
    for part in [
        "autonomy `full_auto_never_stop` is above the recommended `full_auto_stop_on_user_deps`",
        "riskPolicy `aggressive` is above the recommended `balanced`",
        "never blocks",
    ] {
        assert!(w.message.contains(part), "{}", w.message);
    }
    // Deterministic: the same inputs give the same RFC 8785 bytes.
    let again = PreferenceWarningV1::evaluate(prefs, &rec).unwrap();
    assert_eq!(
        workrail_spec::jcs::to_canonical_bytes(&again).unwrap(),
        workrail_spec::jcs::to_canonical_bytes(&w).unwrap()
    );
    // It reads back only as exactly what the inputs derive.
    assert_eq!(PreferenceWarningV1::from_value(value).unwrap(), w);
}

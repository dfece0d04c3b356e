//! Preferences beyond the event payloads: WorkRail's mode presets, how a call's requested
//! preferences resolve, and the durable recommendation warning (locks §4 "Preferences + modes",
//! §5 "Workflow recommendations + warnings"; contract "Preferences & modes", "Mode safety,
//! warnings, and recommendations").
//!
//! Everything here is pure, so production and the reference model record byte-identical
//! warnings for the same effective snapshot and recommendation.

use std::borrow::Cow;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::artifact::{self, ArtifactError, ArtifactKind};
use crate::closed::{Autonomy, PreferenceKey, RiskPolicy, closed_set};
use crate::compiled::Recommendations;
use crate::event::{EffectivePreferences, PreferenceDelta};
use crate::manifest::tagged_object_schema;

closed_set!(
    /// WorkRail-owned mode presets (locks §4 "Mode presets"): display-friendly names for full
    /// preference snapshots. Workflows and users pick among them; nobody adds to them.
    ModePreset {
        Guided = "guided",
        FullAutoStopOnUserDeps = "full_auto_stop_on_user_deps",
        FullAutoNeverStop = "full_auto_never_stop",
    }
);

impl ModePreset {
    /// The snapshot the preset stands for (locked mapping).
    pub const fn preferences(self) -> EffectivePreferences {
        match self {
            Self::Guided => EffectivePreferences::GUIDED,
            Self::FullAutoStopOnUserDeps => EffectivePreferences::FULL_AUTO_STOP_ON_USER_DEPS,
            Self::FullAutoNeverStop => EffectivePreferences::FULL_AUTO_NEVER_STOP,
        }
    }

    /// The display label (contract "Modes (presets)": WorkRail owns the labels).
    pub const fn label(self) -> &'static str {
        match self {
            Self::Guided => "Guided",
            Self::FullAutoStopOnUserDeps => "Full-auto (stop on user deps)",
            Self::FullAutoNeverStop => "Full-auto (never stop)",
        }
    }

    /// The preset whose snapshot is exactly `prefs`, if any.
    pub fn matching(prefs: EffectivePreferences) -> Option<Self> {
        Self::ALL.iter().copied().find(|p| p.preferences() == prefs)
    }
}

/// A call asked for the same preference key twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "`preferences` sets `{0}` more than once; send each key at most once (a `preset` sets both keys, and an entry in `preferences` overrides the preset for its key)"
)]
pub struct DuplicatePreferenceKey(pub PreferenceKey);

/// The delta a call requests: the preset's values (when given), each overridden by the explicit
/// entry for the same key. A key may appear at most once in `explicit`. The result has no
/// duplicate keys; with a preset it lists `autonomy` then `riskPolicy`.
pub fn requested_delta(
    preset: Option<ModePreset>,
    explicit: &[PreferenceDelta],
) -> Result<Vec<PreferenceDelta>, DuplicatePreferenceKey> {
    for (i, d) in explicit.iter().enumerate() {
        if explicit[..i].iter().any(|e| e.key() == d.key()) {
            return Err(DuplicatePreferenceKey(d.key()));
        }
    }
    let Some(preset) = preset else {
        return Ok(explicit.to_vec());
    };
    let p = preset.preferences().apply(explicit);
    Ok(vec![
        PreferenceDelta::Autonomy(p.autonomy),
        PreferenceDelta::RiskPolicy(p.risk_policy),
    ])
}

/// The `contentType` of a recorded [`PreferenceWarningV1`] artifact.
pub const PREFERENCE_WARNING_CONTENT_TYPE: &str =
    "application/vnd.workrail.preference-warning+json";

/// The artifact `kind` of a [`PreferenceWarningV1`].
pub const PREFERENCE_WARNING_KIND: &str = "wr.preference_warning";

/// The only preference warning version this build reads and writes.
pub const PREFERENCE_WARNING_VERSION: u64 = 1;

/// The response warning code of a preference warning.
pub const PREFERENCE_WARNING_CODE: &str = "preferences_exceed_recommendation";

const WARNING: ArtifactKind = ArtifactKind::PreferenceWarning;

/// The durable record that a node's effective preferences exceed the pinned workflow's
/// recommendation (`L-PREF-WARNINGS`): structured fields plus the text-first `message`, stored in
/// the artifact CAS and referenced from a `node_output_appended` on the `artifact` channel of the
/// node whose snapshot it judges. Wire form: `{v: 1, kind: "wr.preference_warning", effective,
/// recommended, exceeded, highestSafe, message}`.
///
/// It is a pure function of `(effective, recommended)` ([`PreferenceWarningV1::evaluate`]), so a
/// replay, another implementation, or the reference model records the same bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreferenceWarningV1 {
    /// The node's effective snapshot.
    pub effective: EffectivePreferences,
    /// The pinned workflow's recommendation (the keys it sets).
    pub recommended: Recommendations,
    /// The keys whose effective value is above the recommendation, in key order; never empty.
    pub exceeded: Vec<PreferenceKey>,
    /// The highest automation WorkRail considers safe here: each effective value capped at the
    /// recommendation (so it never raises a key above the user's choice).
    pub highest_safe: EffectivePreferences,
    /// What happened and what to do, in one paragraph.
    pub message: String,
}

/// A recorded preference warning: a node's effective preferences exceed the pinned workflow's
/// recommendation (`L-PREF-WARNINGS`); every field derives from `effective` and `recommended`.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Wire {
    effective: EffectivePreferences,
    recommended: Recommendations,
    exceeded: Vec<PreferenceKey>,
    highest_safe: EffectivePreferences,
    message: String,
}

impl PreferenceWarningV1 {
    /// The warning for `effective` under `recommended`, or `None` when no key exceeds it by the
    /// locked partial orders (`L-PREF-ORDER`).
    pub fn evaluate(
        effective: EffectivePreferences,
        recommended: &Recommendations,
    ) -> Option<Self> {
        let autonomy_cap = recommended.recommended_autonomy;
        let risk_cap = recommended.recommended_risk_policy;
        let mut exceeded = Vec::new();
        if autonomy_cap.is_some_and(|cap| autonomy_exceeds(effective.autonomy, cap)) {
            exceeded.push(PreferenceKey::Autonomy);
        }
        if risk_cap.is_some_and(|cap| risk_exceeds(effective.risk_policy, cap)) {
            exceeded.push(PreferenceKey::RiskPolicy);
        }
        if exceeded.is_empty() {
            return None;
        }
        let highest_safe = EffectivePreferences {
            autonomy: autonomy_cap
                .filter(|cap| autonomy_exceeds(effective.autonomy, *cap))
                .unwrap_or(effective.autonomy),
            risk_policy: risk_cap
                .filter(|cap| risk_exceeds(effective.risk_policy, *cap))
                .unwrap_or(effective.risk_policy),
        };
        let message = message(effective, recommended, &exceeded, highest_safe);
        Some(Self {
            effective,
            recommended: recommended.clone(),
            exceeded,
            highest_safe,
            message,
        })
    }

    pub fn from_json_str(text: &str) -> Result<Self, ArtifactError> {
        Self::from_value(artifact::parse_value(WARNING, text)?)
    }

    /// Reads the artifact: version first, then shape, then the invariant that every field is
    /// what [`Self::evaluate`] derives from `effective` and `recommended`.
    pub fn from_value(value: Value) -> Result<Self, ArtifactError> {
        let mut map = artifact::into_object(WARNING, value)?;
        artifact::take_version(WARNING, &mut map, "v", PREFERENCE_WARNING_VERSION)?;
        let kind = artifact::take_tag(WARNING, &mut map, "kind")?;
        if kind != PREFERENCE_WARNING_KIND {
            return Err(ArtifactError::malformed(
                WARNING,
                format!("`kind` is {kind:?}, expected {PREFERENCE_WARNING_KIND:?}"),
            ));
        }
        let wire: Wire = artifact::from_value(WARNING, "preference warning", Value::Object(map))?;
        let parsed = Self {
            effective: wire.effective,
            recommended: wire.recommended,
            exceeded: wire.exceeded,
            highest_safe: wire.highest_safe,
            message: wire.message,
        };
        match Self::evaluate(parsed.effective, &parsed.recommended) {
            Some(derived) if derived == parsed => Ok(parsed),
            Some(_) => Err(ArtifactError::invariant(
                WARNING,
                "preference warning is derived from effective and recommended",
                "exceeded, highestSafe or message differ from what the snapshot and recommendation give",
            )),
            None => Err(ArtifactError::invariant(
                WARNING,
                "preference warning is derived from effective and recommended",
                "the effective preferences do not exceed the recommendation",
            )),
        }
    }

    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        Ok(serde_json::json!({
            "v": PREFERENCE_WARNING_VERSION,
            "kind": PREFERENCE_WARNING_KIND,
            "effective": self.effective,
            "recommended": self.recommended,
            "exceeded": self.exceeded,
            "highestSafe": self.highest_safe,
            "message": self.message,
        }))
    }
}

artifact::artifact_serde!(PreferenceWarningV1);

impl JsonSchema for PreferenceWarningV1 {
    fn schema_name() -> Cow<'static, str> {
        Cow::Borrowed("PreferenceWarningV1")
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        tagged_object_schema(
            Wire::json_schema(generator),
            "v",
            PREFERENCE_WARNING_VERSION,
            Some(("kind", PREFERENCE_WARNING_KIND)),
        )
    }
}

/// `value` is above `cap` in `guided < full_auto_stop_on_user_deps < full_auto_never_stop`.
pub const fn autonomy_exceeds(value: Autonomy, cap: Autonomy) -> bool {
    value.rank() > cap.rank()
}

/// `value` is above `cap` in `conservative < balanced < aggressive`.
pub const fn risk_exceeds(value: RiskPolicy, cap: RiskPolicy) -> bool {
    value.rank() > cap.rank()
}

fn message(
    effective: EffectivePreferences,
    recommended: &Recommendations,
    exceeded: &[PreferenceKey],
    highest_safe: EffectivePreferences,
) -> String {
    let above: Vec<String> = exceeded
        .iter()
        .map(|key| match key {
            PreferenceKey::Autonomy => format!(
                "autonomy `{}` is above the recommended `{}`",
                effective.autonomy,
                recommended
                    .recommended_autonomy
                    .unwrap_or(effective.autonomy)
            ),
            PreferenceKey::RiskPolicy => format!(
                "riskPolicy `{}` is above the recommended `{}`",
                effective.risk_policy,
                recommended
                    .recommended_risk_policy
                    .unwrap_or(effective.risk_policy)
            ),
        })
        .collect();
    let preset = ModePreset::matching(highest_safe)
        .map(|p| format!(" (the {} preset)", p.label()))
        .unwrap_or_default();
    format!(
        "The effective preferences exceed this workflow's recommendation: {}. The highest automation WorkRail considers safe for this workflow is autonomy `{}` with riskPolicy `{}`{preset}; to switch, send `preferences` (or a `preset`) with your next ack. Continuing as chosen: this warning never blocks.",
        above.join("; "),
        highest_safe.autonomy,
        highest_safe.risk_policy,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_warning_roundtrips_and_rejects_a_forged_message() {
        let rec = Recommendations {
            recommended_autonomy: Some(Autonomy::FullAutoStopOnUserDeps),
            recommended_risk_policy: None,
        };
        let w = PreferenceWarningV1::evaluate(EffectivePreferences::FULL_AUTO_NEVER_STOP, &rec)
            .unwrap();
        let text = serde_json::to_string(&w).unwrap();
        assert_eq!(PreferenceWarningV1::from_json_str(&text).unwrap(), w);
        let mut forged = w.to_value().unwrap();
        forged["message"] = Value::from("all fine");
        assert!(matches!(
            PreferenceWarningV1::from_value(forged),
            Err(ArtifactError::Invariant { .. })
        ));
        let mut future = w.to_value().unwrap();
        future["v"] = Value::from(2);
        assert!(matches!(
            PreferenceWarningV1::from_value(future),
            Err(ArtifactError::UnsupportedVersion { .. })
        ));
    }
}

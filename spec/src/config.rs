//! The config a server applies, and the restart rule between two of them (locks §6 "Desired vs
//! applied", "Restart-required triggers").
//!
//! [`AppliedConfigV1`] is the config actually in effect in one `workrail mcp` process: its
//! feature flags, the tools it serves with a digest of each tool's schemas, the workflow sources
//! it reads, and the runtime-safe settings (preference defaults, retention). Its
//! `appliedConfigHash` is the `sha256:` digest of its RFC 8785 form (decision D72). The *desired*
//! config is the same type, computed from what the files say now (decision D87).
//!
//! [`compare`] is the pure rule: a difference requires a restart iff it is one of the closed set
//! of [`RestartTrigger`]s; every other difference is a [`RuntimeSafeChange`].
//!
//! [`ServerRecordV1`] is the durable record a server writes at start (`servers/<serverId>.json`,
//! decision D85).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::closed::{Autonomy, RiskPolicy, WorkflowSourceKind};
use crate::ids::{ServerId, SessionId, Sha256Digest};
use crate::jcs::{Canonical, CanonicalArtifact, JcsError};

/// The version of [`AppliedConfigV1`] and [`ServerRecordV1`].
pub const CONFIG_VERSION: u32 = 1;

/// The config in effect in one server (or desired for it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppliedConfigV1 {
    pub v: u32,
    /// Every feature flag with its resolved value, sorted by name.
    pub features: Vec<FeatureFlagSetting>,
    /// The tools `tools/list` serves, in catalog order.
    pub tools: Vec<ToolSchemaDigests>,
    /// The workflow sources discovery reads, in precedence order.
    pub sources: Vec<SourceRegistration>,
    /// Preference defaults for new runs (`config/preferences.json`; runtime-safe: read at each
    /// start of a run).
    pub preferences: PreferenceDefaults,
    /// Session retention (`config/retention.json`; runtime-safe: read by each `workrail gc`).
    pub retention: RetentionSettings,
}

impl CanonicalArtifact for AppliedConfigV1 {}

impl AppliedConfigV1 {
    /// `appliedConfigHash`: `sha256:` of the RFC 8785 form.
    pub fn hash(&self) -> Result<Sha256Digest, JcsError> {
        Canonical::of(self).map(|c| c.digest().clone())
    }

    /// The value of a flag, if the config has it.
    pub fn flag(&self, name: &str) -> Option<bool> {
        self.features.iter().find(|f| f.name == name).map(|f| f.on)
    }
}

/// One feature flag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FeatureFlagSetting {
    pub name: String,
    pub on: bool,
    /// The tools the flag switches on and off (empty: the flag gates no tool).
    pub gates: Vec<String>,
}

/// One served tool and the digests of its schemas (`sha256:` of each schema's RFC 8785 form).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolSchemaDigests {
    pub name: String,
    pub input_schema: Sha256Digest,
    pub output_schema: Sha256Digest,
}

/// One workflow source as discovery reads it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SourceRegistration {
    pub kind: WorkflowSourceKind,
    /// The prefix of its documents' source refs (`bundled`, `project/workflows`, `dir0`,
    /// `user`).
    pub label: String,
    /// The directory on this machine (absent for the bundled source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
}

/// Preference defaults for new runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreferenceDefaults {
    pub autonomy: Autonomy,
    pub risk_policy: RiskPolicy,
}

/// Session retention.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RetentionSettings {
    pub ttl_days: u64,
    pub keep: Vec<SessionId>,
}

/// Why a config change needs a restart (closed set, locks §6 "Restart-required triggers").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum RestartTrigger {
    /// Tools would be added to or removed from `tools/list`.
    ToolSetChanged {
        added: Vec<String>,
        removed: Vec<String>,
    },
    /// A tool served by both would have another input or output schema.
    ToolSchemaChanged {
        tool: String,
        input: bool,
        output: bool,
    },
    /// The workflow sources discovery reads (or their precedence) would change.
    SourceRegistrationChanged {
        applied: Vec<SourceRegistration>,
        desired: Vec<SourceRegistration>,
    },
    /// A flag that switches tools would change.
    ToolGatingFlagChanged {
        flag: String,
        applied: bool,
        desired: bool,
    },
}

impl RestartTrigger {
    /// The trigger's kind (its `kind` on the wire).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::ToolSetChanged { .. } => "tool_set_changed",
            Self::ToolSchemaChanged { .. } => "tool_schema_changed",
            Self::SourceRegistrationChanged { .. } => "source_registration_changed",
            Self::ToolGatingFlagChanged { .. } => "tool_gating_flag_changed",
        }
    }
}

/// A difference that takes effect without a restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(
    tag = "kind",
    rename_all = "snake_case",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum RuntimeSafeChange {
    /// Preference defaults (read when a run starts).
    PreferenceDefaults,
    /// Projection retention (read by `workrail gc`).
    Retention,
    /// A flag that gates no tool.
    Flag {
        flag: String,
        applied: bool,
        desired: bool,
    },
}

/// Applied versus desired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ConfigComparison {
    /// Nothing differs.
    pub in_sync: bool,
    /// `triggers` is not empty.
    pub restart_required: bool,
    pub triggers: Vec<RestartTrigger>,
    pub runtime_safe_changes: Vec<RuntimeSafeChange>,
}

/// Compares the config a server applied with the desired one (locks §6): the triggers in the
/// order tool set, tool schemas (catalog order), sources, flags (by name), then the runtime-safe
/// differences.
pub fn compare(applied: &AppliedConfigV1, desired: &AppliedConfigV1) -> ConfigComparison {
    let mut triggers = Vec::new();
    let names = |c: &AppliedConfigV1| -> Vec<String> {
        let mut n: Vec<String> = c.tools.iter().map(|t| t.name.clone()).collect();
        n.sort();
        n.dedup();
        n
    };
    let (was, will) = (names(applied), names(desired));
    let added: Vec<String> = will.iter().filter(|n| !was.contains(n)).cloned().collect();
    let removed: Vec<String> = was.iter().filter(|n| !will.contains(n)).cloned().collect();
    if !added.is_empty() || !removed.is_empty() {
        triggers.push(RestartTrigger::ToolSetChanged { added, removed });
    }
    for tool in &desired.tools {
        if let Some(old) = applied.tools.iter().find(|t| t.name == tool.name) {
            let input = old.input_schema != tool.input_schema;
            let output = old.output_schema != tool.output_schema;
            if input || output {
                triggers.push(RestartTrigger::ToolSchemaChanged {
                    tool: tool.name.clone(),
                    input,
                    output,
                });
            }
        }
    }
    if applied.sources != desired.sources {
        triggers.push(RestartTrigger::SourceRegistrationChanged {
            applied: applied.sources.clone(),
            desired: desired.sources.clone(),
        });
    }
    let mut runtime_safe_changes = Vec::new();
    let mut flags: Vec<&str> = applied
        .features
        .iter()
        .chain(&desired.features)
        .map(|f| f.name.as_str())
        .collect();
    flags.sort_unstable();
    flags.dedup();
    for flag in flags {
        let find = |c: &AppliedConfigV1| c.features.iter().find(|f| f.name == flag).cloned();
        let (old, new) = (find(applied), find(desired));
        // A flag one side does not know is off there.
        let was_on = old.as_ref().is_some_and(|f| f.on);
        let is_on = new.as_ref().is_some_and(|f| f.on);
        if was_on == is_on {
            continue;
        }
        let gates = old.iter().chain(new.iter()).any(|f| !f.gates.is_empty());
        if gates {
            triggers.push(RestartTrigger::ToolGatingFlagChanged {
                flag: flag.to_owned(),
                applied: was_on,
                desired: is_on,
            });
        } else {
            runtime_safe_changes.push(RuntimeSafeChange::Flag {
                flag: flag.to_owned(),
                applied: was_on,
                desired: is_on,
            });
        }
    }
    if applied.preferences != desired.preferences {
        runtime_safe_changes.push(RuntimeSafeChange::PreferenceDefaults);
    }
    if applied.retention != desired.retention {
        runtime_safe_changes.push(RuntimeSafeChange::Retention);
    }
    ConfigComparison {
        in_sync: applied == desired,
        restart_required: !triggers.is_empty(),
        triggers,
        runtime_safe_changes,
    }
}

/// The environment a server was launched with: what its config depends on besides the data
/// directory's files, so the desired config of that server can be computed by another process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LaunchEnvironment {
    /// The working directory (its project workflow directories).
    pub cwd: String,
    /// The home directory (its user workflow directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
    /// `WORKRAIL_WORKFLOW_DIRS`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_dirs: Option<String>,
    /// `WORKRAIL_FEATURES`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features_env: Option<String>,
}

/// `servers/<serverId>.json`: written once, atomically, when a server starts (decision D85).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ServerRecordV1 {
    pub v: u32,
    pub server_id: ServerId,
    pub pid: u32,
    /// RFC 3339 UTC, for people.
    pub started_at: String,
    /// The WorkRail version that served.
    pub version: String,
    pub applied_config_hash: Sha256Digest,
    pub applied_config: AppliedConfigV1,
    pub launch: LaunchEnvironment,
}

impl CanonicalArtifact for ServerRecordV1 {}

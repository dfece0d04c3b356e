//! Feature flags for the tools the contract marks optional (contract "Tool Set"; locks
//! "Rollout flags: unflag criteria").
//!
//! A flag switches one MCP tool on or off: an off tool is absent from `tools/list` and a call to
//! it is a `VALIDATION_ERROR` that names the flag. Sources, later ones winning:
//!
//! 1. the defaults ([`Feature::default_on`]);
//! 2. `config/features.json` in the data directory: `{"resume_session": false}` (every key
//!    optional, unknown keys refused);
//! 3. the environment variable `WORKRAIL_FEATURES` (read by `WorkrailConfig::from_env`): a
//!    comma-separated list of `name` or `+name` (on) and `-name` (off), e.g.
//!    `WORKRAIL_FEATURES=-resume_session`.
//!
//! Flags are read once when WorkRail opens; change them and restart the server.

use std::collections::BTreeMap;
use std::path::Path;

use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};

use crate::store::fs::StoreFs;

/// The flags file, relative to the data directory.
pub const FEATURES_FILE: &str = "config/features.json";

/// The environment variable with flag overrides.
pub const FEATURES_ENV: &str = "WORKRAIL_FEATURES";

/// A feature-flagged tool (closed set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    /// `checkpoint_workflow` (on by default).
    CheckpointWorkflow,
    /// `resume_session` (on by default).
    ResumeSession,
    /// `start_session` (off by default: checkpoint-only sessions are opt-in, decision D48).
    StartSession,
}

impl Feature {
    pub const ALL: [Feature; 3] = [
        Feature::CheckpointWorkflow,
        Feature::ResumeSession,
        Feature::StartSession,
    ];

    /// The flag's name: the tool's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Feature::CheckpointWorkflow => "checkpoint_workflow",
            Feature::ResumeSession => "resume_session",
            Feature::StartSession => "start_session",
        }
    }

    pub fn parse(name: &str) -> Option<Feature> {
        Feature::ALL.into_iter().find(|f| f.as_str() == name)
    }

    /// Whether the flag is on when nothing configures it. `checkpoint_workflow` and
    /// `resume_session` meet their unflag gates (locks "Rollout flags"), so they ship on; the
    /// flag remains the way to switch one off. `start_session` is opt-in: the contract keeps
    /// WorkRail from "checkpointing every chat" unless a user asks for it.
    pub fn default_on(self) -> bool {
        match self {
            Feature::CheckpointWorkflow | Feature::ResumeSession => true,
            Feature::StartSession => false,
        }
    }

    fn names() -> String {
        Feature::ALL
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl std::fmt::Display for Feature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Explicit flag settings (from the file or the environment), applied over the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureOverrides(BTreeMap<Feature, bool>);

impl FeatureOverrides {
    pub fn set(&mut self, feature: Feature, on: bool) {
        self.0.insert(feature, on);
    }

    /// Parses `WORKRAIL_FEATURES`: `name`, `+name` (on) or `-name` (off), comma-separated;
    /// blanks are ignored.
    pub fn parse_env(value: &str) -> Result<FeatureOverrides, String> {
        let mut overrides = FeatureOverrides::default();
        for item in value.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (on, name) = if let Some(name) = item.strip_prefix('-') {
                (false, name)
            } else {
                (true, item.strip_prefix('+').unwrap_or(item))
            };
            let feature = Feature::parse(name.trim()).ok_or_else(|| {
                format!(
                    "{FEATURES_ENV}: unknown feature {name:?}; the feature flags are {} (write `name` or `+name` to switch one on, `-name` to switch it off, comma-separated)",
                    Feature::names()
                )
            })?;
            overrides.set(feature, on);
        }
        Ok(overrides)
    }

    /// Parses the contents of `config/features.json`: `{"<feature>": true | false, ...}`.
    pub fn parse_file(bytes: &[u8]) -> Result<FeatureOverrides, String> {
        let raw: BTreeMap<String, bool> = serde_json::from_slice(bytes).map_err(|e| {
            format!(
                "{FEATURES_FILE} in the data directory is invalid ({e}); write a JSON object of booleans such as {{\"resume_session\": false}}"
            )
        })?;
        let mut overrides = FeatureOverrides::default();
        for (name, on) in raw {
            let feature = Feature::parse(&name).ok_or_else(|| {
                format!(
                    "{FEATURES_FILE} in the data directory names an unknown feature {name:?}; the feature flags are {}",
                    Feature::names()
                )
            })?;
            overrides.set(feature, on);
        }
        Ok(overrides)
    }
}

/// The effective flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Features(BTreeMap<Feature, bool>);

impl Default for Features {
    fn default() -> Self {
        Features(Feature::ALL.map(|f| (f, f.default_on())).into())
    }
}

impl Features {
    pub fn enabled(&self, feature: Feature) -> bool {
        self.0
            .get(&feature)
            .copied()
            .unwrap_or(feature.default_on())
    }

    /// These flags with `overrides` applied.
    pub fn with(mut self, overrides: &FeatureOverrides) -> Features {
        self.0
            .extend(overrides.0.iter().map(|(feature, on)| (*feature, *on)));
        self
    }

    /// The defaults with `config/features.json` of the data directory applied.
    pub fn load(fs: &dyn StoreFs) -> Result<Features, ErrorEnvelope> {
        let invalid = |message: String| {
            ErrorEnvelope::new(
                ErrorCode::ValidationError,
                message,
                format!(
                    "Fix or delete {FEATURES_FILE} in the data directory (flags: {}), then restart WorkRail.",
                    Feature::names()
                ),
                Retry::NotRetryable,
            )
        };
        let bytes = fs.read(Path::new(FEATURES_FILE)).map_err(|e| {
            ErrorEnvelope::new(
                ErrorCode::StoreIoError,
                format!("cannot read {FEATURES_FILE}: {e}"),
                "Check the data directory's permissions.",
                Retry::RetryableImmediate,
            )
        })?;
        match bytes {
            None => Ok(Features::default()),
            Some(bytes) => FeatureOverrides::parse_file(&bytes)
                .map(|o| Features::default().with(&o))
                .map_err(invalid),
        }
    }
}

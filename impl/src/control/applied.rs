//! The applied and the desired config (locks §6 "Desired vs applied"; decisions D85, D87).
//!
//! Both are [`AppliedConfigV1`] values made by [`applied_config`] from the same inputs: the
//! effective feature flags, the workflow source directories, and the runtime-safe settings of
//! the data directory. A server computes its applied config at start from what it actually
//! loaded; [`desired_config`] computes what that server would apply if it restarted now: the
//! data directory's files as they are now, the server's own launch environment (working
//! directory, home, `WORKRAIL_WORKFLOW_DIRS`, `WORKRAIL_FEATURES`, which a restart by the same
//! client repeats) and this binary's tool catalog.

use std::ffi::OsStr;
use std::path::Path;

use workrail_spec::closed::WorkflowSourceKind;
use workrail_spec::config::{
    AppliedConfigV1, CONFIG_VERSION, FeatureFlagSetting, LaunchEnvironment, PreferenceDefaults,
    RetentionSettings, SourceRegistration, ToolSchemaDigests,
};
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::ids::Sha256Digest;
use workrail_spec::jcs::Canonical;

use crate::features::{FEATURES_ENV, Feature, FeatureOverrides, Features};
use crate::mcp::tools::{ToolName, enabled_tool_defs};
use crate::sources::SourceConfig;
use crate::sources::config::WORKFLOW_DIRS_ENV;
use crate::store::fs::{OsFs, StoreFs};

pub(crate) fn internal(message: String) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::InternalError,
        message,
        "This is a WorkRail bug, not something the caller did; report it.",
        Retry::NotRetryable,
    )
}

fn schema_digest(
    schema: &serde_json::Map<String, serde_json::Value>,
) -> Result<Sha256Digest, ErrorEnvelope> {
    Canonical::of(schema)
        .map(|c| c.digest().clone())
        .map_err(|e| internal(format!("a tool schema has no canonical form: {e}")))
}

/// The config of a server with these effective flags and sources, reading the runtime-safe
/// settings (`config/preferences.json`, `config/retention.json`) from `data`.
pub fn applied_config(
    features: &Features,
    sources: &SourceConfig,
    data: &dyn StoreFs,
) -> Result<AppliedConfigV1, ErrorEnvelope> {
    let mut flags: Vec<FeatureFlagSetting> = Feature::ALL
        .iter()
        .map(|&feature| FeatureFlagSetting {
            name: feature.as_str().to_owned(),
            on: features.enabled(feature),
            gates: ToolName::ALL
                .iter()
                .filter(|t| t.feature() == Some(feature))
                .map(|t| t.as_str().to_owned())
                .collect(),
        })
        .collect();
    flags.sort_by(|a, b| a.name.cmp(&b.name));
    let mut tools = Vec::new();
    for def in enabled_tool_defs(features) {
        tools.push(ToolSchemaDigests {
            name: def.name.as_str().to_owned(),
            input_schema: schema_digest(&def.input_schema)?,
            output_schema: schema_digest(&def.output_schema)?,
        });
    }
    let preferences = crate::protocol::read_global_preferences(data)?;
    let retention = crate::gc::RetentionConfig::load(data)?.unwrap_or_default();
    Ok(AppliedConfigV1 {
        v: CONFIG_VERSION,
        features: flags,
        tools,
        sources: registrations(sources),
        preferences: PreferenceDefaults {
            autonomy: preferences.autonomy,
            risk_policy: preferences.risk_policy,
        },
        retention: RetentionSettings {
            ttl_days: retention.ttl_days,
            keep: retention.keep,
        },
    })
}

/// The sources discovery reads, in precedence order (bundled first).
pub fn registrations(sources: &SourceConfig) -> Vec<SourceRegistration> {
    let dir = |kind, path: &Path, label: &str| SourceRegistration {
        kind,
        label: label.to_owned(),
        directory: Some(path.display().to_string()),
    };
    let mut out = vec![SourceRegistration {
        kind: WorkflowSourceKind::Bundled,
        label: "bundled".to_owned(),
        directory: None,
    }];
    for (path, label) in &sources.project_dirs {
        out.push(dir(WorkflowSourceKind::Project, path, label));
    }
    for (path, label) in &sources.extra_dirs {
        out.push(dir(WorkflowSourceKind::User, path, label));
    }
    if let Some(path) = &sources.user_dir {
        out.push(dir(WorkflowSourceKind::User, path, "user"));
    }
    out
}

/// This process's launch environment (what `WorkrailConfig::from_env` reads besides the data
/// directory).
pub fn launch_from_process() -> Result<LaunchEnvironment, ErrorEnvelope> {
    let cwd = std::env::current_dir().map_err(|e| {
        ErrorEnvelope::new(
            ErrorCode::StoreIoError,
            format!("cannot read the current directory: {e}"),
            "Run WorkRail from an existing directory.",
            Retry::NotRetryable,
        )
    })?;
    let text = |v: std::ffi::OsString| v.to_string_lossy().into_owned();
    Ok(LaunchEnvironment {
        cwd: cwd.display().to_string(),
        home: std::env::var_os("HOME")
            .or_else(|| std::env::var_os("USERPROFILE"))
            .map(text),
        workflow_dirs: std::env::var_os(WORKFLOW_DIRS_ENV).map(text),
        features_env: std::env::var_os(FEATURES_ENV).map(text),
    })
}

/// The source directories of a launch environment.
pub fn sources_of(launch: &LaunchEnvironment) -> SourceConfig {
    SourceConfig::new(
        launch.home.as_deref().map(Path::new),
        Path::new(&launch.cwd),
        launch.workflow_dirs.as_deref().map(OsStr::new),
    )
}

/// What a server of `launch` would apply if it started now on `data_dir` (decision D87). Reads
/// only: a missing data directory reads as the defaults.
pub fn desired_config(
    data_dir: &Path,
    launch: &LaunchEnvironment,
) -> Result<AppliedConfigV1, ErrorEnvelope> {
    let fs = OsFs::new(data_dir);
    let overrides = match &launch.features_env {
        Some(value) => FeatureOverrides::parse_env(value).map_err(|message| {
            ErrorEnvelope::new(
                ErrorCode::ValidationError,
                message,
                format!("Fix {FEATURES_ENV} in the server's environment."),
                Retry::NotRetryable,
            )
        })?,
        None => FeatureOverrides::default(),
    };
    let features = Features::load(&fs)?.with(&overrides);
    applied_config(&features, &sources_of(launch), &fs)
}

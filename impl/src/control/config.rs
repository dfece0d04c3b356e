//! Desired versus applied config for every live server, and the config edits (locks §6
//! "Desired vs applied", "Restart-required triggers"; decisions D87, D88, D89).
//!
//! Edits write one file of the data directory's `config/` whole and atomically (temp file,
//! fsync, rename, directory fsync; 0600), after validating the edit and the file's current
//! contents: an invalid request or an invalid file already there writes nothing.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use serde_json::{Value, json};
use workrail_spec::closed::{Autonomy, RiskPolicy};
use workrail_spec::config::{AppliedConfigV1, ConfigComparison, compare};
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::ids::{ServerId, Sha256Digest};
use workrail_spec::preferences::ModePreset;

use super::applied::{desired_config, launch_from_process};
use super::servers::{Liveness, ServerList, list_servers};
use crate::features::{FEATURES_FILE, Feature, FeatureOverrides};
use crate::protocol::GLOBAL_PREFERENCES_FILE;
use crate::store::fs::{OsFs, StoreFs};

/// A config with its hash, or why it cannot be computed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigView {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_hash: Option<Sha256Digest>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config: Option<AppliedConfigV1>,
    /// Why the desired config cannot be computed (an invalid config file): the server would not
    /// start with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorEnvelope>,
}

impl ConfigView {
    fn of(result: Result<AppliedConfigV1, ErrorEnvelope>) -> ConfigView {
        match result.and_then(|c| {
            c.hash()
                .map(|h| (h, c))
                .map_err(|e| super::applied::internal(format!("no canonical form: {e}")))
        }) {
            Ok((hash, config)) => ConfigView {
                config_hash: Some(hash),
                config: Some(config),
                error: None,
            },
            Err(e) => ConfigView {
                config_hash: None,
                config: None,
                error: Some(e),
            },
        }
    }
}

/// One live server: applied, desired, and what differs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerConfigView {
    pub server_id: ServerId,
    pub pid: u32,
    pub started_at: String,
    pub version: String,
    pub applied_config_hash: Sha256Digest,
    pub applied: AppliedConfigV1,
    pub desired: ConfigView,
    /// Absent when the desired config cannot be computed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison: Option<ConfigComparison>,
}

/// What the Config page shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigOverview {
    /// The config a server started now from this process's environment would apply.
    pub desired_here: ConfigView,
    /// Every live server, oldest first.
    pub servers: Vec<ServerConfigView>,
    /// Records of servers that ended without removing them (killed); `workrail gc` removes
    /// them after the grace period.
    pub dead_records: usize,
    /// Record files that did not parse.
    pub unreadable_records: usize,
}

impl ConfigOverview {
    /// Whether any live server needs a restart.
    pub fn restart_required(&self) -> bool {
        self.servers
            .iter()
            .any(|s| s.comparison.as_ref().is_some_and(|c| c.restart_required))
    }
}

/// Desired versus applied for every live server of `data_dir`. Writes nothing (decision D69).
pub fn config_overview(data_dir: &Path) -> Result<ConfigOverview, ErrorEnvelope> {
    let list: ServerList = list_servers(data_dir)?;
    let desired_here =
        ConfigView::of(launch_from_process().and_then(|l| desired_config(data_dir, &l)));
    let mut servers = Vec::new();
    let mut dead_records = 0;
    for entry in list.servers {
        if entry.liveness != Liveness::Live {
            dead_records += 1;
            continue;
        }
        let record = entry.record;
        let desired = ConfigView::of(desired_config(data_dir, &record.launch));
        let comparison = desired
            .config
            .as_ref()
            .map(|d| compare(&record.applied_config, d));
        servers.push(ServerConfigView {
            server_id: record.server_id,
            pid: record.pid,
            started_at: record.started_at,
            version: record.version,
            applied_config_hash: record.applied_config_hash,
            applied: record.applied_config,
            desired,
            comparison,
        });
    }
    Ok(ConfigOverview {
        desired_here,
        servers,
        dead_records,
        unreadable_records: list.unreadable.len(),
    })
}

/// What an edit changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SettingChange {
    /// The file, relative to the data directory.
    pub file: String,
    pub key: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous: Option<Value>,
    pub value: Value,
    /// Whether running servers need a restart to apply it (tool-gating flags do; preference
    /// defaults apply to the next run started).
    pub restart_required: bool,
}

fn invalid(message: String, suggestion: String, details: Value) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::ValidationError,
        message,
        suggestion,
        Retry::NotRetryable,
    )
    .with_details(details)
}

fn io_envelope(what: &str, e: impl std::fmt::Display) -> ErrorEnvelope {
    ErrorEnvelope::new(
        ErrorCode::StoreIoError,
        format!("{what}: {e}"),
        "Check free disk space and the permissions of the WorkRail data directory, then retry; the file was left as it was.",
        Retry::RetryableImmediate,
    )
}

fn flag_names() -> Vec<&'static str> {
    Feature::ALL.iter().map(|f| f.as_str()).collect()
}

/// Parses `on` / `off` (also `true` / `false`).
pub fn parse_switch(value: &str) -> Result<bool, ErrorEnvelope> {
    match value.trim().to_ascii_lowercase().as_str() {
        "on" | "true" => Ok(true),
        "off" | "false" => Ok(false),
        _ => Err(invalid(
            format!("{value:?} is not a flag value"),
            "Write `on` or `off`.".to_owned(),
            json!({"field": "value", "value": value, "allowed": ["on", "off"]}),
        )),
    }
}

/// Reads a `config/` JSON object file (`None` when missing).
fn read_object(
    fs: &dyn StoreFs,
    file: &str,
) -> Result<Option<serde_json::Map<String, Value>>, ErrorEnvelope> {
    let Some(bytes) = fs
        .read(Path::new(file))
        .map_err(|e| io_envelope(&format!("cannot read {file}"), e))?
    else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        invalid(
            format!(
                "{file} in the data directory is not a JSON object ({e}); it was left as it is"
            ),
            format!("Fix or delete {file} in the data directory, then run the edit again."),
            json!({"file": file}),
        )
    })
}

fn write_object(
    data_dir: &Path,
    file: &str,
    object: &serde_json::Map<String, Value>,
) -> Result<(), ErrorEnvelope> {
    crate::store::fs::create_private_root(data_dir).map_err(|e| e.to_envelope(data_dir))?;
    let fs = OsFs::new(data_dir);
    let mut text = serde_json::to_string_pretty(object)
        .map_err(|e| io_envelope(&format!("cannot serialize {file}"), e))?;
    text.push('\n');
    let path = Path::new(file);
    fs.create_dir_durable(path.parent().unwrap_or(Path::new("")))
        .and_then(|()| fs.write_private(path, text.as_bytes()))
        .map_err(|e| io_envelope(&format!("cannot write {file}"), e))
}

/// Sets a feature flag in `config/features.json` (validated; the file is replaced whole and
/// atomically, or left as it was).
pub fn set_feature(data_dir: &Path, flag: &str, on: bool) -> Result<SettingChange, ErrorEnvelope> {
    let feature = Feature::parse(flag.trim()).ok_or_else(|| {
        invalid(
            format!("unknown feature flag {flag:?}"),
            format!("Use one of the feature flags: {}.", flag_names().join(", ")),
            json!({"field": "flag", "value": flag, "allowed": flag_names()}),
        )
    })?;
    let fs = OsFs::new(data_dir);
    let mut object = read_object(&fs, FEATURES_FILE)?.unwrap_or_default();
    // The file as it is must be valid too: an edit never builds on (or hides) a broken file.
    let current = serde_json::to_vec(&object).map_err(|e| io_envelope("cannot read flags", e))?;
    FeatureOverrides::parse_file(&current).map_err(|message| {
        invalid(
            message,
            format!(
                "Fix or delete {FEATURES_FILE} in the data directory (flags: {}), then run the edit again.",
                flag_names().join(", ")
            ),
            json!({"file": FEATURES_FILE}),
        )
    })?;
    let previous = object.insert(feature.as_str().to_owned(), Value::Bool(on));
    write_object(data_dir, FEATURES_FILE, &object)?;
    Ok(SettingChange {
        file: FEATURES_FILE.to_owned(),
        key: feature.as_str().to_owned(),
        restart_required: previous
            .as_ref()
            .and_then(Value::as_bool)
            .unwrap_or(feature.default_on())
            != on,
        previous,
        value: Value::Bool(on),
    })
}

/// The keys of `config/preferences.json`.
pub const PREFERENCE_KEYS: [&str; 3] = ["preset", "autonomy", "riskPolicy"];

fn allowed_values(key: &str) -> Vec<&'static str> {
    match key {
        "preset" => ModePreset::ALL.iter().map(|p| p.as_str()).collect(),
        "autonomy" => Autonomy::ALL.iter().map(|a| a.as_str()).collect(),
        _ => RiskPolicy::ALL.iter().map(|r| r.as_str()).collect(),
    }
}

/// Sets a preference default in `config/preferences.json` (`preset`, `autonomy` or
/// `riskPolicy`; runtime-safe: the next run started reads it).
pub fn set_preference(
    data_dir: &Path,
    key: &str,
    value: &str,
) -> Result<SettingChange, ErrorEnvelope> {
    let Some(key) = PREFERENCE_KEYS.iter().find(|k| **k == key) else {
        return Err(invalid(
            format!("unknown preference key {key:?}"),
            format!("Use one of: {}.", PREFERENCE_KEYS.join(", ")),
            json!({"field": "key", "value": key, "allowed": PREFERENCE_KEYS}),
        ));
    };
    let allowed = allowed_values(key);
    if !allowed.contains(&value) {
        return Err(invalid(
            format!("{value:?} is not a value of {key}"),
            format!("Use one of: {}.", allowed.join(", ")),
            json!({"field": key, "value": value, "allowed": allowed}),
        ));
    }
    let fs = OsFs::new(data_dir);
    let mut object = read_object(&fs, GLOBAL_PREFERENCES_FILE)?.unwrap_or_default();
    crate::protocol::read_global_preferences(&fs)?;
    let previous = object.insert((*key).to_owned(), Value::String(value.to_owned()));
    write_object(data_dir, GLOBAL_PREFERENCES_FILE, &object)?;
    Ok(SettingChange {
        file: GLOBAL_PREFERENCES_FILE.to_owned(),
        key: (*key).to_owned(),
        previous,
        value: Value::String(value.to_owned()),
        restart_required: false,
    })
}

/// `workrail config set <key> <value>`: a feature flag (`on` / `off`) or a preference key.
pub fn set_setting(
    data_dir: &Path,
    key: &str,
    value: &str,
) -> Result<SettingChange, ErrorEnvelope> {
    if Feature::parse(key).is_some() {
        return set_feature(data_dir, key, parse_switch(value)?);
    }
    if PREFERENCE_KEYS.contains(&key) {
        return set_preference(data_dir, key, value);
    }
    let mut keys: Vec<&str> = flag_names();
    keys.extend(PREFERENCE_KEYS);
    Err(invalid(
        format!("unknown setting {key:?}"),
        format!(
            "Use a feature flag ({}) with on|off, or a preference default ({}) with its value.",
            flag_names().join(", "),
            PREFERENCE_KEYS.join(", ")
        ),
        json!({"field": "key", "value": key, "allowed": keys}),
    ))
}

/// Every flag's value as the file sets it (for display).
pub fn features_file(data_dir: &Path) -> Result<BTreeMap<String, bool>, ErrorEnvelope> {
    let fs = OsFs::new(data_dir);
    let object = read_object(&fs, FEATURES_FILE)?.unwrap_or_default();
    Ok(object
        .into_iter()
        .filter_map(|(k, v)| v.as_bool().map(|b| (k, b)))
        .collect())
}

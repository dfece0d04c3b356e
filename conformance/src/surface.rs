//! The server surface file (`--surface <file.json>`): how to adapt the suite to a server whose tool
//! surface differs from the names the contract uses, which optional scenario profiles to enable,
//! and which scenarios are disabled for that server, each with a reason.
//!
//! Scenarios are written against the canonical surface (the contract's tool and field names).
//! The surface maps them in both directions: tool names and object keys are renamed on the way
//! out (arguments) and back (structured results).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Map, Value, json};

/// Default environment variable for the data directory (locks §13: configurable root).
pub const DEFAULT_DATA_DIR_ENV: &str = "WORKRAIL_DATA_DIR";
/// Default environment variable for extra workflow directories.
pub const DEFAULT_WORKFLOW_DIRS_ENV: &str = "WORKRAIL_WORKFLOW_DIRS";

/// A server surface description. Every field is optional; `{}` is the canonical surface.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Surface {
    /// A label for reports.
    #[serde(default)]
    pub name: Option<String>,
    /// Free text for humans.
    #[serde(default)]
    pub description: Option<String>,
    /// Canonical tool name -> the server's tool name.
    #[serde(default)]
    pub tools: BTreeMap<String, String>,
    /// Canonical object key -> the server's key, applied recursively to arguments and, reversed,
    /// to structured results and error envelopes.
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
    /// The arguments that select an autonomy mode on `start_workflow`; every string equal to
    /// `"$autonomy"` is replaced by the mode. Default: WorkRail-rs's
    /// `{"preferences": [{"key": "autonomy", "value": "$autonomy"}]}`.
    #[serde(default = "default_autonomy_args")]
    pub autonomy_args: Value,
    /// The variable that points the server at its data directory.
    #[serde(default = "default_data_dir_env")]
    pub data_dir_env: String,
    /// The variable that lists extra workflow directories (the fixture workflows go there).
    #[serde(default = "default_workflow_dirs_env")]
    pub workflow_dirs_env: String,
    /// Extra environment for the server.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Optional scenario profiles to run besides `core`.
    #[serde(default)]
    pub profiles: Vec<String>,
    /// Disabled scenarios (by name or lock id) and why. Printed as SKIP with the reason.
    #[serde(default)]
    pub disabled: BTreeMap<String, String>,
}

fn default_autonomy_args() -> Value {
    json!({"preferences": [{"key": "autonomy", "value": "$autonomy"}]})
}

fn default_data_dir_env() -> String {
    DEFAULT_DATA_DIR_ENV.to_owned()
}

fn default_workflow_dirs_env() -> String {
    DEFAULT_WORKFLOW_DIRS_ENV.to_owned()
}

impl Default for Surface {
    fn default() -> Self {
        Self {
            name: None,
            description: None,
            tools: BTreeMap::new(),
            fields: BTreeMap::new(),
            autonomy_args: default_autonomy_args(),
            data_dir_env: default_data_dir_env(),
            workflow_dirs_env: default_workflow_dirs_env(),
            env: BTreeMap::new(),
            profiles: Vec::new(),
            disabled: BTreeMap::new(),
        }
    }
}

impl Surface {
    /// Reads a surface file.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read surface {}: {e}", path.display()))?;
        serde_json::from_str(&text).map_err(|e| format!("surface {}: {e}", path.display()))
    }

    /// The server's name for a canonical tool.
    pub fn server_tool<'a>(&'a self, canonical: &'a str) -> &'a str {
        self.tools.get(canonical).map_or(canonical, String::as_str)
    }

    /// The canonical name of a server tool.
    pub fn canonical_tool<'a>(&'a self, server: &'a str) -> &'a str {
        self.tools
            .iter()
            .find(|(_, s)| s.as_str() == server)
            .map_or(server, |(c, _)| c.as_str())
    }

    /// Renames keys of canonical arguments to the server's spelling.
    pub fn to_server(&self, value: &Value) -> Value {
        rename_keys(value, &|k| self.fields.get(k).cloned())
    }

    /// Renames keys of a server result to the canonical spelling.
    pub fn to_canonical(&self, value: &Value) -> Value {
        rename_keys(value, &|k| {
            self.fields
                .iter()
                .find(|(_, s)| s.as_str() == k)
                .map(|(c, _)| c.clone())
        })
    }

    /// The arguments that select `autonomy`.
    pub fn autonomy_arguments(&self, autonomy: &str) -> Value {
        replace_placeholder(&self.autonomy_args, autonomy)
    }

    /// Why a scenario is disabled, if it is (matched by name or by one of its lock ids).
    pub fn disabled_reason(&self, name: &str, lock_ids: &[String]) -> Option<String> {
        if let Some(r) = self.disabled.get(name) {
            return Some(r.clone());
        }
        lock_ids
            .iter()
            .find_map(|id| self.disabled.get(id).map(|r| format!("{id}: {r}")))
    }
}

fn rename_keys(value: &Value, rename: &dyn Fn(&str) -> Option<String>) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::new();
            for (k, v) in map {
                let key = rename(k).unwrap_or_else(|| k.clone());
                out.insert(key, rename_keys(v, rename));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| rename_keys(v, rename)).collect()),
        other => other.clone(),
    }
}

fn replace_placeholder(value: &Value, autonomy: &str) -> Value {
    match value {
        Value::String(s) if s == "$autonomy" => Value::String(autonomy.to_owned()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), replace_placeholder(v, autonomy)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| replace_placeholder(v, autonomy))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Merges `extra` into `args` (objects only, top level; arrays are concatenated).
pub fn merge_args(args: &mut Value, extra: &Value) {
    let (Value::Object(target), Value::Object(source)) = (args, extra) else {
        return;
    };
    for (k, v) in source {
        match (target.get_mut(k), v) {
            (Some(Value::Array(existing)), Value::Array(more)) => {
                existing.extend(more.iter().cloned());
            }
            (Some(Value::Object(_)), Value::Object(_)) => {
                if let Some(t) = target.get_mut(k) {
                    merge_args(t, v);
                }
            }
            _ => {
                target.insert(k.clone(), v.clone());
            }
        }
    }
}

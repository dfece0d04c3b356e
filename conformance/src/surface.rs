//! The server surface file (`--surface <file.json>`): how to adapt the suite to a server whose tool
//! surface differs from the names the contract uses, which optional scenario profiles to enable,
//! and which scenarios are disabled for that server, each with a reason.
//!
//! Scenarios are written against the canonical surface (the contract's tool and field names).
//! The surface maps them in both directions: tool names and object keys are renamed on the way
//! out (arguments) and back (structured results). It also says where a result's structured
//! answer is read (`structuredContent` or JSON text), which arguments every call of a tool gets
//! (templated with the scenario's directory and name), which JSON-pointer moves bring a result
//! into the canonical shape, where the server's own fixture workflows are, how tokens travel
//! (the locks' state + ack pair, or one token plus an intent) and whether they can be decoded,
//! and which capabilities the server lacks ([`crate::limitations`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::limitations::Limitation;
use crate::mcp::ToolResult;
pub use crate::token_model::{OPAQUE_TOKENS_REASON, TokenFormat, TokenModel};

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
    /// Extra environment for the server; values are templates (see [`Template`]).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Where a tool result's structured answer is read from.
    #[serde(default)]
    pub results: ResultSource,
    /// Canonical tool name -> arguments added to every call of it when the scenario does not
    /// give them; string values are templates (see [`Template`]).
    #[serde(default)]
    pub extra_args: BTreeMap<String, Map<String, Value>>,
    /// Directories (templates) created in the scenario's temporary directory before the server
    /// starts, e.g. `$tmp/home` for `HOME` or `$tmp/ws` for a workspace argument.
    #[serde(default)]
    pub create_dirs: Vec<String>,
    /// JSON-pointer moves applied, in order, to every structured result in the server's spelling
    /// before the key renames of `fields`.
    #[serde(default)]
    pub response_map: Vec<PointerMove>,
    /// Canonical tool name -> JSON-pointer moves applied, in order, to its canonical arguments
    /// before the key renames (e.g. `{"from": "/query/text", "to": "/query"}` for a server whose
    /// `resume_session` takes the query as a string).
    #[serde(default)]
    pub argument_map: BTreeMap<String, Vec<PointerMove>>,
    /// The spelling of the workflows the server reads, for the workflow files scenarios write
    /// (`writeWorkflow`, written in the v2 authoring spelling).
    #[serde(default)]
    pub workflow_dialect: WorkflowDialect,
    /// How the server's tokens are shaped in requests and responses.
    #[serde(default)]
    pub token_model: TokenModel,
    /// Whether the server's tokens can be decoded as the locks' `<kind>.v1.<payload>.<sig>`.
    #[serde(default)]
    pub token_format: TokenFormat,
    /// The fixture workflows in the server's authoring dialect, instead of the suite's own;
    /// a relative path is resolved against the surface file's directory.
    #[serde(default)]
    pub workflows_dir: Option<PathBuf>,
    /// Capabilities the server lacks; the scenarios that need them are skipped with the reason.
    #[serde(default)]
    pub limitations: Vec<Limitation>,
    /// Optional scenario profiles to run besides `core`.
    #[serde(default)]
    pub profiles: Vec<String>,
    /// Disabled scenarios (by name or lock id) and why. Printed as SKIP with the reason.
    #[serde(default)]
    pub disabled: BTreeMap<String, String>,
    /// How the suite reads the server's durable truth (decision D194). Absent: the locked file
    /// layout under the data directory. Given: two commands run beside the server with its
    /// environment, for a server whose store is not files (PostgreSQL, its own storage).
    #[serde(default)]
    pub truth: Option<TruthAdapter>,
    /// Files of the data directory a read may change without writing state, by path relative
    /// to the data directory (a trailing `/` names a directory), each with why: left out of the
    /// store digest (decision D194). Everything else a read changes fails its purity check.
    #[serde(default)]
    pub log_files: BTreeMap<String, String>,
}

/// Commands that dump a server's durable truth (decision D194), each split like a shell and
/// templated like `env` (`$tmp`, `$dataDir`, `$scenario`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TruthAdapter {
    /// Prints the session ids: a JSON array of ids, or of objects with `sessionId`.
    pub sessions: String,
    /// Prints one session's truth as JSON, `$session` standing for its id: a WorkRail export
    /// bundle (`session.events`, `session.manifest`) or `{events, manifest}`.
    pub export: String,
    /// Holds one session's writer lock, `$session` standing for its id (decision D204): prints
    /// a line once the lock is held and keeps it until its stdin closes. Absent: the suite
    /// holds the locked layout's lock file itself (`sessions/<sessionId>/.lock`).
    #[serde(default)]
    pub lock: Option<String>,
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
            results: ResultSource::default(),
            extra_args: BTreeMap::new(),
            create_dirs: Vec::new(),
            response_map: Vec::new(),
            argument_map: BTreeMap::new(),
            workflow_dialect: WorkflowDialect::default(),
            workflows_dir: None,
            token_model: TokenModel::default(),
            token_format: TokenFormat::default(),
            limitations: Vec::new(),
            profiles: Vec::new(),
            disabled: BTreeMap::new(),
            truth: None,
            log_files: BTreeMap::new(),
        }
    }
}

impl Surface {
    /// Reads a surface file.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read surface {}: {e}", path.display()))?;
        let mut surface: Self =
            serde_json::from_str(&text).map_err(|e| format!("surface {}: {e}", path.display()))?;
        for m in surface
            .response_map
            .iter()
            .chain(surface.argument_map.values().flatten())
        {
            for pointer in std::iter::once(&m.from).chain(m.to.as_ref()) {
                if !pointer.starts_with('/') {
                    return Err(format!(
                        "surface {}: responseMap/argumentMap pointer {pointer:?} is not a JSON pointer (it must start with `/`)",
                        path.display()
                    ));
                }
            }
        }
        if let Some(dir) = &surface.workflows_dir
            && dir.is_relative()
        {
            let base = path.parent().unwrap_or(Path::new("."));
            surface.workflows_dir = Some(base.join(dir));
        }
        Ok(surface)
    }

    /// The extra arguments of a tool, templated, added to `args` where it has no such key.
    pub fn add_extra_args(&self, tool: &str, args: &mut Value, template: &Template) {
        let (Some(extra), Value::Object(target)) = (self.extra_args.get(tool), args) else {
            return;
        };
        for (k, v) in extra {
            if !target.contains_key(k) {
                target.insert(k.clone(), template.expand_value(v));
            }
        }
    }

    /// A server's tool result in the canonical spelling: the structured answer read where the
    /// surface says, the pointer moves applied, the keys renamed.
    pub fn adapt_result(&self, mut r: ToolResult) -> ToolResult {
        if r.structured.is_null() && self.results == ResultSource::TextJson {
            // Text that is not JSON stays unread: the response checks then report it.
            if let Ok(v) = serde_json::from_str::<Value>(&r.text) {
                r.structured = v;
            }
        }
        for m in &self.response_map {
            m.apply(&mut r.structured);
        }
        r.structured = self.to_canonical(&r.structured);
        self.token_model.response_to_canonical(&mut r.structured);
        r
    }

    /// Canonical arguments of a tool in the server's token model and spelling.
    pub fn request_to_server(&self, tool: &str, args: &Value) -> Value {
        let mut args = args.clone();
        for m in self.argument_map.get(tool).into_iter().flatten() {
            m.apply(&mut args);
        }
        match tool {
            "continue_workflow" => self.token_model.request_to_server(&mut args),
            "checkpoint_workflow" => self.token_model.checkpoint_to_server(&mut args),
            _ => {}
        }
        self.to_server(&args)
    }

    /// A workflow a scenario writes, in the spelling the server reads.
    pub fn workflow_for_server(&self, workflow: &Value) -> Value {
        self.workflow_dialect.translate(workflow)
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

/// Where the structured answer of a tool result is read from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ResultSource {
    /// `structuredContent` only.
    #[default]
    StructuredContent,
    /// `structuredContent`, or when it is absent the JSON in `content[0].text`.
    TextJson,
}

/// A JSON-pointer move in a structured result: when `from` exists, its value is taken out and
/// written at `to` (replacing what is there, creating missing objects on the way).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PointerMove {
    pub from: String,
    /// Absent: the value is dropped (an argument the server does not take).
    #[serde(default)]
    pub to: Option<String>,
}

impl PointerMove {
    /// Applies the move to `value`; does nothing when `from` is absent.
    pub fn apply(&self, value: &mut Value) {
        let Some(moved) = take_pointer(value, &self.from) else {
            return;
        };
        if let Some(to) = &self.to {
            set_pointer(value, to, moved);
        }
    }
}

/// The spelling of the workflows a server reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum WorkflowDialect {
    /// The v2 authoring spelling the scenarios write (WorkRail-rs reads it).
    #[default]
    V2,
    /// The WorkRail 3.x spelling (TS WorkRail): a `version` is required, and a step's notes are
    /// required unless it says `notesOptional`; the suite's acks of written workflows do not
    /// always send notes, as the v2 spelling lets them.
    Workrail3,
}

impl WorkflowDialect {
    /// `workflow` (v2 spelling) in this dialect: for WorkRail 3.x, `version` `1.0.0` when absent
    /// and `notesOptional: true` on every step that does not say.
    pub fn translate(self, workflow: &Value) -> Value {
        let mut out = workflow.clone();
        if self == Self::V2 {
            return out;
        }
        if let Some(o) = out.as_object_mut() {
            o.entry("version")
                .or_insert_with(|| Value::String("1.0.0".into()));
        }
        fn steps(list: &mut Value) {
            let Some(list) = list.as_array_mut() else {
                return;
            };
            for step in list {
                let Some(o) = step.as_object_mut() else {
                    continue;
                };
                // A loop or a group: its own steps, not notes of its own.
                let mut nested = false;
                for key in ["body", "steps"] {
                    if let Some(inner) = o.get_mut(key) {
                        steps(inner);
                        nested = true;
                    }
                }
                if !nested {
                    o.entry("notesOptional").or_insert(Value::Bool(true));
                }
            }
        }
        if let Some(list) = out.get_mut("steps") {
            steps(list);
        }
        out
    }
}

/// Splits a JSON pointer into its unescaped tokens (RFC 6901).
fn pointer_tokens(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect()
}

fn take_pointer(value: &mut Value, pointer: &str) -> Option<Value> {
    let tokens = pointer_tokens(pointer);
    let (last, parents) = tokens.split_last()?;
    let mut current = value;
    for t in parents {
        current = match current {
            Value::Object(o) => o.get_mut(t)?,
            Value::Array(a) => a.get_mut(t.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    match current {
        Value::Object(o) => o.remove(last),
        Value::Array(a) => {
            let i = last.parse::<usize>().ok()?;
            (i < a.len()).then(|| a.remove(i))
        }
        _ => None,
    }
}

fn set_pointer(value: &mut Value, pointer: &str, new: Value) {
    let tokens = pointer_tokens(pointer);
    let Some((last, parents)) = tokens.split_last() else {
        *value = new;
        return;
    };
    let mut current = value;
    for t in parents {
        if !current.is_object() {
            *current = Value::Object(Map::new());
        }
        let Value::Object(o) = current else {
            return;
        };
        current = o
            .entry(t.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !current.is_object() {
        *current = Value::Object(Map::new());
    }
    if let Value::Object(o) = current {
        o.insert(last.clone(), new);
    }
}

/// The values a surface template may use: `$tmp` (the scenario's temporary directory, the
/// server's working directory), `$dataDir` (the data directory), `$scenario` (the scenario's
/// name) and `$unique` (lowercase letters and digits naming this run of the scenario, e.g. for
/// a database schema of its own).
#[derive(Debug, Clone)]
pub struct Template {
    pub tmp: String,
    pub data_dir: String,
    pub scenario: String,
}

impl Template {
    /// Replaces every `$tmp`, `$dataDir`, `$scenario` and `$unique` in `text`.
    pub fn expand(&self, text: &str) -> String {
        text.replace("$dataDir", &self.data_dir)
            .replace("$scenario", &self.scenario)
            .replace("$unique", &self.unique())
            .replace("$tmp", &self.tmp)
    }

    /// The letters and digits of the temporary directory's own name, lowercased: unique per
    /// run of a scenario.
    pub fn unique(&self) -> String {
        let name = self.tmp.rsplit(['/', '\\']).next().unwrap_or_default();
        let name = name.strip_prefix("workrail-conformance-").unwrap_or(name);
        name.chars()
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
            .collect()
    }

    /// Expands every string in a JSON value (object keys stay as they are).
    pub fn expand_value(&self, value: &Value) -> Value {
        match value {
            Value::String(s) => Value::String(self.expand(s)),
            Value::Array(items) => {
                Value::Array(items.iter().map(|v| self.expand_value(v)).collect())
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), self.expand_value(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> Template {
        Template {
            tmp: "/t".into(),
            data_dir: "/t/data".into(),
            scenario: "replay_identity".into(),
        }
    }

    fn surface(json: Value) -> Surface {
        serde_json::from_value(json).unwrap()
    }

    fn result(text: &str, structured: Value) -> ToolResult {
        ToolResult {
            is_error: false,
            text: text.into(),
            text_first: true,
            structured,
        }
    }

    #[test]
    fn text_json_is_read_only_when_structured_content_is_absent() {
        let s = surface(json!({"results": "textJson"}));
        let r = s.adapt_result(result(r#"{"isComplete": false}"#, Value::Null));
        assert_eq!(r.structured, json!({"isComplete": false}));
        let r = s.adapt_result(result(
            r#"{"isComplete": false}"#,
            json!({"isComplete": true}),
        ));
        assert_eq!(r.structured, json!({"isComplete": true}));
        let r = s.adapt_result(result("Step one: do it", Value::Null));
        assert_eq!(r.structured, Value::Null);
        // The default reads structuredContent only.
        let r = Surface::default().adapt_result(result(r#"{"a": 1}"#, Value::Null));
        assert_eq!(r.structured, Value::Null);
    }

    #[test]
    fn extra_args_are_templated_and_never_override_the_scenario() {
        let s = surface(json!({"extraArgs": {"start_workflow": {
            "workspacePath": "$tmp/ws", "goal": "conformance: $scenario", "workflowId": "other"
        }}}));
        let mut args = json!({"workflowId": "conformance.linear"});
        s.add_extra_args("start_workflow", &mut args, &template());
        assert_eq!(
            args,
            json!({"workflowId": "conformance.linear", "workspacePath": "/t/ws", "goal": "conformance: replay_identity"})
        );
        let mut other = json!({"stateToken": "x"});
        s.add_extra_args("continue_workflow", &mut other, &template());
        assert_eq!(other, json!({"stateToken": "x"}));
    }

    #[test]
    fn templates_expand_every_variable() {
        let t = template();
        assert_eq!(t.expand("HOME=$tmp/home"), "HOME=/t/home");
        assert_eq!(
            t.expand("$dataDir/x $scenario"),
            "/t/data/x replay_identity"
        );
        assert_eq!(
            t.expand_value(&json!({"$tmp": ["$tmp", 1]})),
            json!({"$tmp": ["/t", 1]})
        );
    }

    #[test]
    fn pointer_moves_lift_nested_values_before_renames() {
        let s = surface(json!({
            "responseMap": [
                {"from": "/blockers/blockers", "to": "/blockers"},
                {"from": "/details/suggestion", "to": "/suggestion"},
                {"from": "/absent", "to": "/nowhere"}
            ],
            "fields": {"code": "errorCode"}
        }));
        let r = s.adapt_result(result(
            "",
            json!({"kind": "blocked", "blockers": {"blockers": [{"code": "X"}]}}),
        ));
        assert_eq!(
            r.structured,
            json!({"kind": "blocked", "blockers": [{"code": "X"}]})
        );
        let r = s.adapt_result(result(
            "",
            json!({"errorCode": "E", "details": {"suggestion": "retry", "n": 1}}),
        ));
        // Moved in the server's spelling, then renamed to the canonical one.
        assert_eq!(
            r.structured,
            json!({"code": "E", "details": {"n": 1}, "suggestion": "retry"})
        );
        let mut v = json!({"a": [1, 2]});
        PointerMove {
            from: "/a/0".into(),
            to: Some("/b/c".into()),
        }
        .apply(&mut v);
        assert_eq!(v, json!({"a": [2], "b": {"c": 1}}));
    }

    /// decision: D196
    #[test]
    fn a_profile_reshapes_arguments_checkpoints_and_written_workflows() {
        let s = surface(json!({
            "tokenModel": {"kind": "singleToken", "checkpointAlone": true},
            "argumentMap": {
                "resume_session": [{"from": "/query/text", "to": "/query"}],
                "checkpoint_workflow": [{"from": "/output"}]
            },
            "workflowDialect": "workrail3"
        }));
        assert_eq!(
            s.request_to_server("resume_session", &json!({"query": {"text": "zebra"}})),
            json!({"query": "zebra"})
        );
        assert_eq!(
            s.request_to_server(
                "checkpoint_workflow",
                &json!({"stateToken": "S", "checkpointToken": "C", "output": {"notesMarkdown": "n"}})
            ),
            json!({"checkpointToken": "C"})
        );
        // Other tools keep their arguments.
        assert_eq!(
            s.request_to_server("list_workflows", &json!({"query": {"text": "x"}})),
            json!({"query": {"text": "x"}})
        );
        let written = s.workflow_for_server(&json!({"id": "a.b", "steps": [
            {"id": "one", "prompt": "P"},
            {"id": "two", "prompt": "P", "notesOptional": false},
            {"type": "loop", "id": "l", "body": [{"id": "in", "prompt": "P"}]}
        ]}));
        assert_eq!(written["version"], "1.0.0");
        assert_eq!(written["steps"][0]["notesOptional"], true);
        assert_eq!(written["steps"][1]["notesOptional"], false);
        assert_eq!(written["steps"][2]["body"][0]["notesOptional"], true);
        assert!(written["steps"][2].get("notesOptional").is_none());
        // The v2 spelling is left as written.
        let v2 = surface(json!({}));
        let wf = json!({"id": "a.b", "steps": [{"id": "one", "prompt": "P"}]});
        assert_eq!(v2.workflow_for_server(&wf), wf);
    }

    #[test]
    fn single_token_requests_carry_the_intent() {
        let s =
            surface(json!({"tokenModel": {"kind": "singleToken"}, "fields": {"notes": "output"}}));
        let advance = s.request_to_server(
            "continue_workflow",
            &json!({"stateToken": "S", "ackToken": "A", "notes": "n"}),
        );
        assert_eq!(
            advance,
            json!({"continueToken": "A", "intent": "advance", "output": "n"})
        );
        let rehydrate = s.request_to_server("continue_workflow", &json!({"stateToken": "S"}));
        assert_eq!(
            rehydrate,
            json!({"continueToken": "S", "intent": "rehydrate"})
        );
        // No token: left for the server to refuse; other tools are not rewritten.
        assert_eq!(
            s.request_to_server("continue_workflow", &json!({})),
            json!({})
        );
        assert_eq!(
            s.request_to_server("checkpoint_workflow", &json!({"stateToken": "S"})),
            json!({"stateToken": "S"})
        );
        let custom = surface(json!({"tokenModel": {
            "kind": "singleToken", "field": "token", "intentField": "mode",
            "advance": "next", "rehydrate": "resume"
        }}));
        assert_eq!(
            custom.request_to_server("continue_workflow", &json!({"ackToken": "A"})),
            json!({"token": "A", "mode": "next"})
        );
    }

    #[test]
    fn a_single_token_response_feeds_both_tokens() {
        let s = surface(json!({"tokenModel": {"kind": "singleToken"}}));
        let r = s.adapt_result(result(
            "",
            json!({"continueToken": "T", "isComplete": false}),
        ));
        assert_eq!(
            r.structured,
            json!({"stateToken": "T", "ackToken": "T", "isComplete": false})
        );
        let r = s.adapt_result(result(
            "",
            json!({"continueToken": "T", "isComplete": true}),
        ));
        assert_eq!(r.structured, json!({"stateToken": "T", "isComplete": true}));
        // The canonical model leaves results alone.
        let r = Surface::default().adapt_result(result("", json!({"continueToken": "T"})));
        assert_eq!(r.structured, json!({"continueToken": "T"}));
        let e = serde_json::from_value::<Surface>(json!({"tokenModel": {"kind": "twoTokens"}}));
        assert!(e.is_err());
    }

    #[test]
    fn workflows_dir_is_resolved_against_the_surface_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.json");
        std::fs::write(&path, r#"{"workflowsDir": "ts-workflows"}"#).unwrap();
        let s = Surface::load(&path).unwrap();
        assert_eq!(s.workflows_dir, Some(dir.path().join("ts-workflows")));
        std::fs::write(&path, r#"{"responseMap": [{"from": "a", "to": "/b"}]}"#).unwrap();
        let e = Surface::load(&path).unwrap_err();
        assert!(e.contains("is not a JSON pointer"), "{e}");
    }
}

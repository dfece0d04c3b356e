//! The scenario file format (`fixtures/conformance/scenarios/*.json`), documented in
//! `conformance/README.md`.
//!
//! A scenario is data: a name, the lock ids it checks, the profile it belongs to and a list of
//! steps. Steps either talk to the server (`call`, `listTools`, `storeDigest`) or check what came
//! back (every other step kind); each check names the lock ids it asserts.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::expr::references;
use crate::features::{self, Feature};
use crate::store::CLOSED_SET_LOCKS;

/// The profile every server is judged by: only what the locks fix.
pub const CORE_PROFILE: &str = "core";
/// Optional profile: decisions WorkRail-rs made where the locks leave a choice.
pub const WORKRAIL_RS_PROFILE: &str = "workrail-rs";
/// Every profile a scenario may name.
pub const PROFILES: [&str; 2] = [CORE_PROFILE, WORKRAIL_RS_PROFILE];

/// Locks the runner asserts on every response of every `call` step (the error envelope on every
/// error, the execution response shape on every start/continue/checkpoint result). A scenario
/// with calls may cite them without a dedicated check step.
pub const AUTO_LOCKS: [&str; 11] = [
    "L-ERR-ENVELOPE",
    "L-ERR-RETRY-UNION",
    "L-ERR-SELF-CORRECTING",
    "L-ERR-NO-PANIC",
    "L-MCP-EXECUTION-RESPONSE",
    "L-MCP-TEXT-FIRST",
    "L-MCP-NEXT-INTENT",
    "L-TOKEN-FORMAT",
    "L-TOKEN-PAYLOAD-FIELDS",
    "L-TOKEN-SCOPED",
    "L-ID-DELIMITER-SAFE",
];

/// The always-on locks judged on an error result (the envelope, its `retry`, its suggestion,
/// errors as data).
pub const ERROR_RESPONSE_LOCKS: [&str; 4] = [
    "L-ERR-ENVELOPE",
    "L-ERR-RETRY-UNION",
    "L-ERR-SELF-CORRECTING",
    "L-ERR-NO-PANIC",
];

/// The always-on locks judged on a non-error result of an execution tool.
pub const EXECUTION_RESPONSE_LOCKS: [&str; 7] = [
    "L-MCP-EXECUTION-RESPONSE",
    "L-MCP-TEXT-FIRST",
    "L-MCP-NEXT-INTENT",
    "L-TOKEN-FORMAT",
    "L-TOKEN-PAYLOAD-FIELDS",
    "L-TOKEN-SCOPED",
    "L-ID-DELIMITER-SAFE",
];

/// The always-on locks that need a decodable token: not applicable to a server whose surface
/// declares opaque tokens (unless a step of the scenario names them itself).
pub const TOKEN_FORMAT_LOCKS: [&str; 3] =
    ["L-TOKEN-FORMAT", "L-TOKEN-PAYLOAD-FIELDS", "L-TOKEN-SCOPED"];

/// One scenario file.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub lock_ids: Vec<String>,
    pub profile: String,
    /// Canonical tool names the scenario needs; without them it is skipped.
    pub requires_tools: Vec<String>,
    /// The skip reason printed when a required tool is missing.
    pub skip_reason: Option<String>,
    pub steps: Vec<NotedStep>,
    /// `featuresUnderTest`: features this scenario exists to check. A step needing one of them
    /// runs even on a server that declares it lacks it, and fails there with the declaration
    /// as the evidence (the locks require the feature; other scenarios only use it).
    pub features_under_test: Vec<Feature>,
    pub file: PathBuf,
}

/// A step with its optional human note and the earlier steps whose effect it relies on.
#[derive(Debug, Clone)]
pub struct NotedStep {
    pub note: Option<String>,
    /// `dependsOn`: names saved by earlier steps whose *effect on the server* this step relies
    /// on, beside the values it reads (e.g. a store check that the fork is an `acked_step` edge
    /// relies on the fork call having been made, though it reads only the stored events). When
    /// such a step failed or was skipped, this step is not reached.
    pub depends_on: Vec<String>,
    /// `needs`: the server features this step relies on (decision D166); on a server lacking
    /// one the step is n/a, and so are the steps that depend on it.
    pub needs: Vec<Feature>,
    pub step: Step,
}

impl NotedStep {
    /// Every saved name this step depends on: the values it reads and its `dependsOn`.
    pub fn dependencies(&self) -> BTreeSet<String> {
        let mut out = self.step.reads();
        out.extend(self.depends_on.iter().cloned());
        out
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ScenarioFile {
    name: String,
    description: String,
    lock_ids: Vec<String>,
    profile: String,
    #[serde(default)]
    requires_tools: Vec<String>,
    #[serde(default)]
    skip_reason: Option<String>,
    #[serde(default)]
    features_under_test: Vec<Feature>,
    steps: Vec<Value>,
}

/// What a `call` step expects back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Expect {
    /// A tool result that is not an error and not `kind: "blocked"`.
    Ok,
    /// A tool result with `kind: "blocked"`.
    Blocked,
    /// Not an error; blocked or not.
    NotError,
    /// A tool result with `isError: true` and an error envelope.
    Error,
}

/// One step. `lock` lists the lock ids a check asserts (each must be in the scenario's
/// `lockIds`).
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "do", rename_all = "camelCase", deny_unknown_fields)]
pub enum Step {
    /// Calls a tool (canonical name) with `args` (expressions), optionally selecting an
    /// autonomy mode through the surface's `autonomyArgs`.
    #[serde(rename_all = "camelCase")]
    Call {
        tool: String,
        #[serde(default = "empty_object")]
        args: Value,
        #[serde(default)]
        autonomy: Option<String>,
        #[serde(default)]
        save: Option<String>,
        expect: Expect,
        /// Allowed error codes when `expect` is `error` (any code when empty).
        #[serde(default)]
        code: Vec<String>,
        #[serde(default)]
        lock: Vec<String>,
    },
    /// Saves `tools/list` (canonical names) under `save`.
    ListTools { save: String },
    /// Saves a digest of the durable store (`sessions/*/events/*`, `sessions/*/manifest.jsonl`)
    /// under `save` as `{digest, sessions, eventFiles}`.
    #[serde(rename_all = "camelCase")]
    StoreDigest {
        save: String,
        /// Fail when no `sessions/<id>/events/*.jsonl` exists (so digests cannot be vacuous).
        #[serde(default)]
        require_events: bool,
        #[serde(default)]
        lock: Vec<String>,
    },
    /// Saves every event of the durable store (`sessions/*/events/*.jsonl`, locked layout and
    /// envelope) under `save` as an array; fails when there is none.
    StoreEvents {
        save: String,
        #[serde(default)]
        lock: Vec<String>,
    },
    /// Counts the saved events that contain `match` (objects by subset of keys): at least
    /// `atLeast` (default 1), at most `atMost` when given.
    #[serde(rename_all = "camelCase")]
    Events {
        events: String,
        #[serde(rename = "match")]
        pattern: Value,
        #[serde(default = "one")]
        at_least: u64,
        #[serde(default)]
        at_most: Option<u64>,
        what: String,
        lock: Vec<String>,
    },
    /// Invariants of the saved events (see `checks::store_invariants`); `strict` also parses
    /// each event with `workrail-spec` (`workrail-rs` profile).
    StoreInvariants {
        events: String,
        #[serde(default)]
        strict: bool,
        lock: Vec<String>,
    },
    /// Binds `name` to the value of an expression.
    Let { name: String, value: Value },
    /// The tool set: every `required` tool, nothing outside `required` + `optional`.
    ToolSet {
        tools: String,
        required: Vec<String>,
        #[serde(default)]
        optional: Vec<String>,
        lock: Vec<String>,
    },
    /// The tool's `inputSchema` accepts `example`.
    SchemaAccepts {
        tools: String,
        tool: String,
        example: Value,
        lock: Vec<String>,
    },
    /// The tool's `inputSchema` lists `fields` as required.
    SchemaRequires {
        tools: String,
        tool: String,
        fields: Vec<String>,
        lock: Vec<String>,
    },
    /// Two expressions are equal.
    Same {
        a: Value,
        b: Value,
        what: String,
        lock: Vec<String>,
    },
    /// Two expressions differ.
    Differ {
        a: Value,
        b: Value,
        what: String,
        lock: Vec<String>,
    },
    /// A number is at most `max` (use `$len` for array lengths and string byte lengths).
    AtMost {
        value: Value,
        max: u64,
        what: String,
        lock: Vec<String>,
    },
    /// Two saved responses are identical: `structuredContent`, `content[0].text`, `isError`.
    SameResponse {
        a: String,
        b: String,
        lock: Vec<String>,
    },
    /// A blocked response carries a valid, ordered, bounded blocker list.
    Blockers {
        result: String,
        /// Allowed codes (any locked code when empty).
        #[serde(default)]
        codes: Vec<String>,
        /// Fields the first blocker's pointer must have.
        #[serde(default)]
        pointer: Option<Value>,
        lock: Vec<String>,
    },
    /// An error reports a context budget violation with measured bytes, max bytes and method.
    #[serde(rename_all = "camelCase")]
    ContextBudget {
        result: String,
        measured_bytes: Value,
        max_bytes: Vec<u64>,
        lock: Vec<String>,
    },
    /// The text is in neither `content[0].text` nor the serialized `structuredContent`.
    Absent {
        result: String,
        text: Value,
        lock: Vec<String>,
    },
    /// The text is in `content[0].text` or in a string of `structuredContent`.
    Present {
        result: String,
        text: Value,
        lock: Vec<String>,
    },
    /// Every value occurs in the response: as structured data (a JSON value anywhere in
    /// `structuredContent` outside prose strings) when `structured`, else anywhere as text.
    Mentions {
        result: String,
        values: Vec<Value>,
        #[serde(default)]
        structured: bool,
        lock: Vec<String>,
    },
    /// `list_workflows` rows: closed discovery fields, locked sort order, listed ids present.
    Discovery {
        result: String,
        includes: Vec<String>,
        lock: Vec<String>,
    },
    /// The envelope of an error, strictly: exactly `{code, message, suggestion, retry,
    /// details?}` and a code from WorkRail-rs's closed set (`workrail-rs` profile).
    StrictErrorEnvelope { result: String, lock: Vec<String> },
    /// Writes `workflow` (an expression) as `file` in the scenario's own workflow directory,
    /// which the server is given beside the fixture workflows when a scenario has this step
    /// (so a scenario can change a workflow's source after a run started).
    WriteWorkflow { file: String, workflow: Value },
    /// Takes the exclusive OS lock of `sessions/<session>/.lock` in the data directory and
    /// holds it until `releaseSessionLock` or the end of the scenario (another writer).
    HoldSessionLock {
        session: Value,
        #[serde(default)]
        lock: Vec<String>,
    },
    /// Releases the lock `holdSessionLock` took.
    ReleaseSessionLock {},
}

fn one() -> u64 {
    1
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

impl Step {
    /// The lock ids this step asserts.
    pub fn locks(&self) -> &[String] {
        match self {
            Self::Call { lock, .. }
            | Self::StoreDigest { lock, .. }
            | Self::ToolSet { lock, .. }
            | Self::SchemaAccepts { lock, .. }
            | Self::SchemaRequires { lock, .. }
            | Self::Same { lock, .. }
            | Self::Differ { lock, .. }
            | Self::SameResponse { lock, .. }
            | Self::AtMost { lock, .. }
            | Self::StoreEvents { lock, .. }
            | Self::Events { lock, .. }
            | Self::StoreInvariants { lock, .. }
            | Self::Blockers { lock, .. }
            | Self::ContextBudget { lock, .. }
            | Self::Absent { lock, .. }
            | Self::Present { lock, .. }
            | Self::Mentions { lock, .. }
            | Self::Discovery { lock, .. }
            | Self::StrictErrorEnvelope { lock, .. }
            | Self::HoldSessionLock { lock, .. } => lock,
            Self::ListTools { .. }
            | Self::Let { .. }
            | Self::WriteWorkflow { .. }
            | Self::ReleaseSessionLock {} => &[],
        }
    }

    /// The saved values this step reads (by `${name}` in its expressions or by naming them in
    /// `events`, `tools`, `result`, `a`/`b`): it depends on the steps that saved them.
    pub fn reads(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut named = |n: &String| {
            out.insert(n.clone());
        };
        match self {
            Self::Call { args, .. } => references(args, &mut out),
            Self::ListTools { .. } | Self::StoreDigest { .. } | Self::StoreEvents { .. } => {}
            Self::Events {
                events, pattern, ..
            } => {
                named(events);
                references(pattern, &mut out);
            }
            Self::StoreInvariants { events, .. } => named(events),
            Self::Let { value, .. } => references(value, &mut out),
            Self::ToolSet { tools, .. } | Self::SchemaRequires { tools, .. } => named(tools),
            Self::SchemaAccepts { tools, example, .. } => {
                named(tools);
                references(example, &mut out);
            }
            Self::Same { a, b, .. } | Self::Differ { a, b, .. } => {
                references(a, &mut out);
                references(b, &mut out);
            }
            Self::AtMost { value, .. } => references(value, &mut out),
            Self::SameResponse { a, b, .. } => {
                named(a);
                named(b);
            }
            Self::Blockers {
                result, pointer, ..
            } => {
                named(result);
                if let Some(p) = pointer {
                    references(p, &mut out);
                }
            }
            Self::ContextBudget {
                result,
                measured_bytes,
                ..
            } => {
                named(result);
                references(measured_bytes, &mut out);
            }
            Self::Absent { result, text, .. } | Self::Present { result, text, .. } => {
                named(result);
                references(text, &mut out);
            }
            Self::Mentions { result, values, .. } => {
                named(result);
                values.iter().for_each(|v| references(v, &mut out));
            }
            Self::Discovery { result, .. } | Self::StrictErrorEnvelope { result, .. } => {
                named(result)
            }
            Self::WriteWorkflow { workflow, .. } => references(workflow, &mut out),
            Self::HoldSessionLock { session, .. } => references(session, &mut out),
            Self::ReleaseSessionLock {} => {}
        }
        out
    }

    /// The expressions this step evaluates.
    pub fn expressions(&self) -> Vec<&Value> {
        match self {
            Self::Call { args, .. } => vec![args],
            Self::Events { pattern, .. } => vec![pattern],
            Self::Let { value, .. } => vec![value],
            Self::SchemaAccepts { example, .. } => vec![example],
            Self::Same { a, b, .. } | Self::Differ { a, b, .. } => vec![a, b],
            Self::AtMost { value, .. } => vec![value],
            Self::Blockers { pointer, .. } => pointer.iter().collect(),
            Self::ContextBudget { measured_bytes, .. } => vec![measured_bytes],
            Self::Absent { text, .. } | Self::Present { text, .. } => vec![text],
            Self::Mentions { values, .. } => values.iter().collect(),
            Self::WriteWorkflow { workflow, .. } => vec![workflow],
            Self::HoldSessionLock { session, .. } => vec![session],
            Self::ListTools { .. }
            | Self::StoreDigest { .. }
            | Self::StoreEvents { .. }
            | Self::StoreInvariants { .. }
            | Self::ToolSet { .. }
            | Self::SchemaRequires { .. }
            | Self::SameResponse { .. }
            | Self::Discovery { .. }
            | Self::StrictErrorEnvelope { .. }
            | Self::ReleaseSessionLock {} => Vec::new(),
        }
    }

    /// The name this step saves a value under, if any.
    pub fn writes(&self) -> Option<&str> {
        match self {
            Self::Call { save, .. } => save.as_deref(),
            Self::ListTools { save }
            | Self::StoreDigest { save, .. }
            | Self::StoreEvents { save, .. } => Some(save),
            Self::Let { name, .. } => Some(name),
            _ => None,
        }
    }

    /// The lock ids this step would check when it runs: its own, for a call the locks the
    /// runner checks on every response, for a read of the store the closed-set locks.
    pub fn checked_locks(&self) -> Vec<String> {
        let mut out = self.locks().to_vec();
        let auto: &[&str] = match self {
            Self::Call { .. } => &AUTO_LOCKS,
            Self::StoreDigest { .. } | Self::StoreEvents { .. } => &CLOSED_SET_LOCKS,
            _ => &[],
        };
        for id in auto {
            if !out.iter().any(|o| o == id) {
                out.push((*id).to_owned());
            }
        }
        out
    }

    /// Whether the step only checks saved values (it talks to neither the server nor its data
    /// directory).
    pub fn is_check(&self) -> bool {
        !matches!(
            self,
            Self::Call { .. }
                | Self::ListTools { .. }
                | Self::StoreDigest { .. }
                | Self::StoreEvents { .. }
                | Self::Let { .. }
                | Self::WriteWorkflow { .. }
                | Self::HoldSessionLock { .. }
                | Self::ReleaseSessionLock {}
        )
    }

    /// A short label for reports, e.g. `call continue_workflow`.
    pub fn label(&self) -> String {
        match self {
            Self::Call { tool, .. } => format!("call {tool}"),
            Self::ListTools { .. } => "listTools".into(),
            Self::StoreDigest { .. } => "storeDigest".into(),
            Self::StoreEvents { .. } => "storeEvents".into(),
            Self::Events { what, .. } => format!("events: {what}"),
            Self::StoreInvariants { events, .. } => format!("store invariants of {events}"),
            Self::Let { name, .. } => format!("let {name}"),
            Self::ToolSet { .. } => "toolSet".into(),
            Self::SchemaAccepts { tool, .. } => format!("schemaAccepts {tool}"),
            Self::SchemaRequires { tool, .. } => format!("schemaRequires {tool}"),
            Self::Same { what, .. } => format!("same: {what}"),
            Self::Differ { what, .. } => format!("differ: {what}"),
            Self::SameResponse { a, b, .. } => format!("sameResponse {a} {b}"),
            Self::AtMost { what, .. } => format!("atMost: {what}"),
            Self::Blockers { result, .. } => format!("blockers of {result}"),
            Self::ContextBudget { result, .. } => format!("contextBudget of {result}"),
            Self::Absent { result, .. } => format!("absent from {result}"),
            Self::Present { result, .. } => format!("present in {result}"),
            Self::Mentions { result, .. } => format!("mentions in {result}"),
            Self::Discovery { result, .. } => format!("discovery rows of {result}"),
            Self::StrictErrorEnvelope { result, .. } => format!("strict envelope of {result}"),
            Self::WriteWorkflow { file, .. } => format!("writeWorkflow {file}"),
            Self::HoldSessionLock { .. } => "holdSessionLock".into(),
            Self::ReleaseSessionLock {} => "releaseSessionLock".into(),
        }
    }
}

impl Scenario {
    /// Parses one scenario file.
    pub fn parse(text: &str, file: &Path) -> Result<Self, String> {
        let raw: ScenarioFile =
            serde_json::from_str(text).map_err(|e| format!("{}: {e}", file.display()))?;
        let mut steps = Vec::with_capacity(raw.steps.len());
        for (i, value) in raw.steps.into_iter().enumerate() {
            let mut value = value;
            let note = value
                .as_object_mut()
                .and_then(|m| m.remove("note"))
                .and_then(|n| n.as_str().map(str::to_owned));
            let depends_on = match value.as_object_mut().and_then(|m| m.remove("dependsOn")) {
                None => Vec::new(),
                Some(v) => serde_json::from_value::<Vec<String>>(v).map_err(|e| {
                    format!(
                        "{}: step {}: dependsOn must be a list of saved names: {e}",
                        file.display(),
                        i + 1
                    )
                })?,
            };
            let needs = match value.as_object_mut().and_then(|m| m.remove("needs")) {
                None => Vec::new(),
                Some(v) => serde_json::from_value::<Vec<Feature>>(v).map_err(|e| {
                    format!(
                        "{}: step {}: needs must be a list of feature tags (modeSelection, exportImport, untaggedDiscovery, checkpoint, exactHistory): {e}",
                        file.display(),
                        i + 1
                    )
                })?,
            };
            let step: Step = serde_json::from_value(value)
                .map_err(|e| format!("{}: step {}: {e}", file.display(), i + 1))?;
            steps.push(NotedStep {
                note,
                depends_on,
                needs,
                step,
            });
        }
        let scenario = Self {
            name: raw.name,
            description: raw.description,
            lock_ids: raw.lock_ids,
            profile: raw.profile,
            requires_tools: raw.requires_tools,
            skip_reason: raw.skip_reason,
            steps,
            features_under_test: raw.features_under_test,
            file: file.to_owned(),
        };
        scenario.validate()?;
        Ok(scenario)
    }

    /// Structural rules every scenario obeys.
    fn validate(&self) -> Result<(), String> {
        let at = self.file.display();
        if !self
            .name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            || self.name.is_empty()
        {
            return Err(format!("{at}: name {:?} must match [a-z0-9_]+", self.name));
        }
        if !PROFILES.contains(&self.profile.as_str()) {
            return Err(format!(
                "{at}: profile {:?} is not one of {PROFILES:?}",
                self.profile
            ));
        }
        if self.lock_ids.is_empty() {
            return Err(format!("{at}: lockIds is empty"));
        }
        if self.steps.is_empty() {
            return Err(format!("{at}: steps is empty"));
        }
        let mut asserted = std::collections::BTreeSet::new();
        if self
            .steps
            .iter()
            .any(|s| matches!(s.step, Step::Call { .. }))
        {
            asserted.extend(AUTO_LOCKS.iter().map(|s| (*s).to_owned()));
        }
        if self
            .steps
            .iter()
            .any(|s| matches!(s.step, Step::StoreDigest { .. } | Step::StoreEvents { .. }))
        {
            asserted.extend(CLOSED_SET_LOCKS.iter().map(|s| (*s).to_owned()));
        }
        // Names saved so far, and those among them that hold what the server produced (a
        // response, the tool list, a read of the store, or a value computed from one).
        let mut saved: BTreeSet<String> = BTreeSet::new();
        let mut from_server: BTreeSet<String> = BTreeSet::new();
        for (i, s) in self.steps.iter().enumerate() {
            // Tags are declared, and checked against what the step does, so none is forgotten.
            let undeclared: Vec<String> = features::implied(&s.step)
                .into_iter()
                .filter(|f| !s.needs.contains(f))
                .map(|f| format!("\"{f}\""))
                .collect();
            if !undeclared.is_empty() {
                return Err(format!(
                    "{at}: step {} ({}) needs a feature it does not declare: add \"needs\": [{}]",
                    i + 1,
                    s.step.label(),
                    undeclared.join(", ")
                ));
            }
            // A step whose missing feature is the finding must say which lock it fails.
            if s.step.locks().is_empty()
                && let Some(f) = s
                    .needs
                    .iter()
                    .find(|f| self.features_under_test.contains(f))
            {
                return Err(format!(
                    "{at}: step {} needs `{f}`, which the scenario checks (featuresUnderTest), so it must cite the lock a server without it fails",
                    i + 1
                ));
            }
            for name in &s.depends_on {
                if !saved.contains(name) {
                    return Err(format!(
                        "{at}: step {}: dependsOn names `{name}`, which no earlier step saves",
                        i + 1
                    ));
                }
            }
            // A check of the scenario's own values (e.g. that an expected string has the
            // intended length) can hold whatever the server does: it may not cite a lock, or
            // the lock would pass on a server that did nothing.
            if s.step.is_check()
                && !s.step.locks().is_empty()
                && s.step.reads().is_disjoint(&from_server)
            {
                return Err(format!(
                    "{at}: step {} checks only the scenario's own values (it reads nothing the server produced), so it cannot cite a lock",
                    i + 1
                ));
            }
            if let Some(w) = s.step.writes() {
                saved.insert(w.to_owned());
                let derived = match &s.step {
                    Step::Let { .. } => !s.step.reads().is_disjoint(&from_server),
                    _ => true,
                };
                if derived {
                    from_server.insert(w.to_owned());
                } else {
                    from_server.remove(w);
                }
            }
            if let Step::WriteWorkflow { file, .. } = &s.step
                && !is_workflow_file_name(file)
            {
                return Err(format!(
                    "{at}: step {}: workflow file {file:?} must match [a-z0-9_-]+.json",
                    i + 1
                ));
            }
            if let Step::Call {
                expect: Expect::Error | Expect::Blocked,
                lock,
                ..
            } = &s.step
                && lock.is_empty()
            {
                return Err(format!(
                    "{at}: step {} expects an error or a block, so it must name the lock ids that expectation checks",
                    i + 1
                ));
            }
            for id in s.step.locks() {
                if !self.lock_ids.contains(id)
                    && !AUTO_LOCKS.contains(&id.as_str())
                    && !CLOSED_SET_LOCKS.contains(&id.as_str())
                {
                    return Err(format!(
                        "{at}: step {} asserts {id}, which is not in lockIds",
                        i + 1
                    ));
                }
                asserted.insert(id.clone());
            }
        }
        for id in &self.lock_ids {
            if !asserted.contains(id) {
                return Err(format!(
                    "{at}: lockIds names {id} but no step asserts it (cite only checked locks)"
                ));
            }
        }
        Ok(())
    }
}

/// A plain file name for `writeWorkflow`: `[a-z0-9_-]+.json`.
fn is_workflow_file_name(file: &str) -> bool {
    file.strip_suffix(".json").is_some_and(|stem| {
        !stem.is_empty()
            && stem
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
    })
}

impl Scenario {
    /// Whether the scenario writes workflow sources (and so needs its own workflow directory).
    pub fn writes_workflows(&self) -> bool {
        self.steps
            .iter()
            .any(|s| matches!(s.step, Step::WriteWorkflow { .. }))
    }
}

/// Loads every `*.json` scenario in `dir`, sorted by file name; names must be unique.
pub fn load_dir(dir: &Path) -> Result<Vec<Scenario>, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read scenario directory {}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    let mut out: Vec<Scenario> = Vec::with_capacity(files.len());
    for file in files {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let scenario = Scenario::parse(&text, &file)?;
        if out.iter().any(|s| s.name == scenario.name) {
            return Err(format!(
                "{}: duplicate scenario name {}",
                file.display(),
                scenario.name
            ));
        }
        out.push(scenario);
    }
    if out.is_empty() {
        return Err(format!("no scenarios in {}", dir.display()));
    }
    Ok(out)
}

//! Runs scenarios against a server: one fresh server process and data directory per scenario,
//! steps interpreted in order, every failed expectation recorded with its lock ids.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::checks::execution_response_judged;
use crate::checks::{self, Problem, brief, brief_json};
use crate::expr::{Var, Vars, decoding_operator};
use crate::features::{EXPORT_IMPORT_TOOLS, Feature};
use crate::limitations;
use crate::mcp::{CallOutcome, Launch, McpClient, path_string};
use crate::report::{Failure, LockVerdict, Status, Unrun, Verdict};
use crate::scenario::{
    CORE_PROFILE, ERROR_RESPONSE_LOCKS, EXECUTION_RESPONSE_LOCKS, Expect, Scenario, Step,
    TOKEN_FORMAT_LOCKS,
};
use crate::schema;
use crate::store;
use crate::surface::{
    OPAQUE_TOKENS_REASON, Surface, Template, TokenFormat, TokenModel, merge_args,
};

/// Tools whose non-error results are execution responses.
pub const EXECUTION_TOOLS: [&str; 3] =
    ["start_workflow", "continue_workflow", "checkpoint_workflow"];

/// Tools whose responses `L-MCP-EXECUTION-RESPONSE` fixes the shape of: the lock names
/// `start_workflow` and `continue_workflow` only, so a checkpoint's answer is judged by what the
/// checkpoint locks say (its node and edge, its replay), not by this shape.
const EXECUTION_RESPONSE_TOOLS: [&str; 2] = ["start_workflow", "continue_workflow"];

/// Everything a run needs besides the scenarios.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The server command, split into words.
    pub server: Vec<String>,
    pub surface: Surface,
    /// `--env K=V` pairs (override the surface's env).
    pub env: Vec<(String, String)>,
    /// Optional profiles enabled besides `core`.
    pub profiles: Vec<String>,
    /// `--only`: names or lock ids; empty runs everything.
    pub only: Vec<String>,
    /// `--skip`: name or lock id, and the reason.
    pub skip: Vec<(String, String)>,
    pub timeout: Duration,
    /// The fixture workflow directory given to the server.
    pub workflows_dir: PathBuf,
    /// Keep the MCP transcript for failing scenarios.
    pub verbose: bool,
}

impl RunConfig {
    fn selected(&self, s: &Scenario) -> bool {
        self.only.is_empty()
            || self
                .only
                .iter()
                .any(|o| *o == s.name || s.lock_ids.contains(o))
    }

    fn skip_reason(&self, s: &Scenario) -> Option<String> {
        if let Some((_, reason)) = self
            .skip
            .iter()
            .find(|(sel, _)| *sel == s.name || s.lock_ids.contains(sel))
        {
            return Some(reason.clone());
        }
        if let Some(reason) = self.surface.disabled_reason(&s.name, &s.lock_ids) {
            return Some(format!("disabled by the surface file: {reason}"));
        }
        if s.profile != CORE_PROFILE && !self.profiles.contains(&s.profile) {
            return Some(format!(
                "optional profile `{}` is not enabled (use --profile {})",
                s.profile, s.profile
            ));
        }
        None
    }
}

/// Runs the selected scenarios in order, calling `each` with every verdict as it comes.
pub fn run(
    scenarios: &[Scenario],
    config: &RunConfig,
    each: &mut dyn FnMut(&Verdict),
) -> Vec<Verdict> {
    let mut out = Vec::new();
    for s in scenarios.iter().filter(|s| config.selected(s)) {
        let verdict = match config.skip_reason(s) {
            Some(reason) => verdict_of(s, Status::Skip(reason), Vec::new(), 0, Vec::new()),
            None => run_one(s, config),
        };
        each(&verdict);
        out.push(verdict);
    }
    out
}

fn verdict_of(
    s: &Scenario,
    status: Status,
    failures: Vec<Failure>,
    duration_ms: u128,
    transcript: Vec<String>,
) -> Verdict {
    Verdict {
        name: s.name.clone(),
        profile: s.profile.clone(),
        lock_ids: s.lock_ids.clone(),
        status,
        failures,
        not_reached: Vec::new(),
        skipped_steps: Vec::new(),
        not_applicable_steps: Vec::new(),
        not_applicable: Vec::new(),
        also_checked: Vec::new(),
        unjudged: Vec::new(),
        ran: false,
        duration_ms,
        note: None,
        transcript,
    }
}

fn setup_failure(s: &Scenario, what: &str, error: String, started: Instant) -> Verdict {
    let mut v = verdict_of(
        s,
        Status::Fail,
        vec![Failure {
            step: 0,
            action: "set-up".into(),
            lock: Vec::new(),
            expected: what.to_owned(),
            got: error,
        }],
        started.elapsed().as_millis(),
        Vec::new(),
    );
    v.not_reached.push(Unrun {
        step: 0,
        action: "every step".into(),
        lock: s.lock_ids.clone(),
        reason: "the scenario could not start (see the set-up failure)".into(),
    });
    v
}

/// Runs one scenario against a fresh server and data directory.
pub fn run_one(s: &Scenario, config: &RunConfig) -> Verdict {
    let started = Instant::now();
    let tmp = match tempfile::Builder::new()
        .prefix("workrail-conformance-")
        .tempdir()
    {
        Ok(t) => t,
        Err(e) => return setup_failure(s, "a temporary directory", e.to_string(), started),
    };
    let data_dir = tmp.path().join("data");
    if let Err(e) = std::fs::create_dir_all(&data_dir) {
        return setup_failure(s, "a data directory", e.to_string(), started);
    }
    let template = Template {
        tmp: path_string(tmp.path()),
        data_dir: path_string(&data_dir),
        scenario: s.name.clone(),
    };
    for dir in &config.surface.create_dirs {
        let dir = template.expand(dir);
        if let Err(e) = std::fs::create_dir_all(&dir) {
            return setup_failure(
                s,
                "the directories of the surface's createDirs",
                format!("cannot create {dir}: {e}"),
                started,
            );
        }
    }
    let mut env: Vec<(String, String)> = config
        .surface
        .env
        .iter()
        .map(|(k, v)| (k.clone(), template.expand(v)))
        .collect();
    env.push((config.surface.data_dir_env.clone(), path_string(&data_dir)));
    // A scenario that writes workflow sources gets its own directory beside the fixtures.
    let own_workflows = s.writes_workflows().then(|| tmp.path().join("workflows"));
    let workflow_dirs = match &own_workflows {
        Some(own) => {
            if let Err(e) = std::fs::create_dir_all(own) {
                return setup_failure(s, "a workflow directory", e.to_string(), started);
            }
            match std::env::join_paths([&config.workflows_dir, own]) {
                Ok(list) => list.to_string_lossy().into_owned(),
                Err(e) => {
                    return setup_failure(s, "a workflow directory list", e.to_string(), started);
                }
            }
        }
        None => path_string(&config.workflows_dir),
    };
    env.push((config.surface.workflow_dirs_env.clone(), workflow_dirs));
    env.extend(
        config
            .env
            .iter()
            .map(|(k, v)| (k.clone(), template.expand(v))),
    );
    let launch = Launch {
        argv: config.server.clone(),
        env: env.clone(),
        cwd: Some(tmp.path().to_owned()),
        stderr: Some(tmp.path().join("server.stderr")),
        timeout: config.timeout,
    };
    let mut client = match McpClient::spawn(&launch) {
        Ok(c) => c,
        Err(e) => return setup_failure(s, "a server process", e, started),
    };
    if let Err(e) = client.initialize() {
        return setup_failure(s, "an answer to `initialize`", e, started);
    }
    let tools = match client.list_tools() {
        Ok(t) => t,
        Err(e) => return setup_failure(s, "an answer to `tools/list`", e, started),
    };
    let names: Vec<String> = tools
        .iter()
        .filter_map(|t| t.get("name").and_then(Value::as_str))
        .map(|n| config.surface.canonical_tool(n).to_owned())
        .collect();
    let missing: Vec<&String> = s
        .requires_tools
        .iter()
        .filter(|t| !names.contains(t))
        .collect();
    if !missing.is_empty() {
        let reason = s.skip_reason.clone().unwrap_or_else(|| {
            format!(
                "server does not expose {}",
                missing
                    .iter()
                    .map(|m| m.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        });
        return verdict_of(
            s,
            Status::Skip(reason),
            Vec::new(),
            started.elapsed().as_millis(),
            Vec::new(),
        );
    }
    let opaque = config.surface.token_format == TokenFormat::Opaque;
    // Why this server lacks a feature a step needs, if it does: a declared limitation, or a
    // feature-flagged tool it does not list.
    let lacks = |feature: Feature, step: &Step| -> Option<String> {
        if let Some(why) = limitations::lacking(&config.surface.limitations, feature, step) {
            return Some(format!("declared by the surface file: {why}"));
        }
        let unlisted = |tools: &[&str]| {
            tools
                .iter()
                .filter(|t| !names.iter().any(|n| n == *t))
                .map(|t| format!("`{t}`"))
                .collect::<Vec<_>>()
        };
        let missing = match feature {
            Feature::Checkpoint => unlisted(&["checkpoint_workflow"]),
            Feature::ExportImport => unlisted(&EXPORT_IMPORT_TOOLS),
            _ => Vec::new(),
        };
        (!missing.is_empty()).then(|| {
            format!(
                "needs {feature}, and the server does not list {}",
                missing.join(", ")
            )
        })
    };
    let mut interp = Interp {
        config,
        client,
        has_checkpoint: names.iter().any(|n| n == "checkpoint_workflow"),
        vars: if opaque {
            Vars::opaque_tokens()
        } else {
            Vars::default()
        },
        data_dir,
        failures: Vec::new(),
        step: 0,
        action: String::new(),
        judged: BTreeSet::new(),
        closed_sets_judged: BTreeSet::new(),
        closed_set_reported: BTreeSet::new(),
        own_workflows,
        held_lock: None,
        template,
        env,
        cwd: tmp.path().to_owned(),
        digests: std::collections::BTreeMap::new(),
        deficient: BTreeSet::new(),
    };
    // A saved value a step did not produce -> the step that should have, and why (it failed,
    // or it was skipped on this server). Steps that read such a value, or depend on that
    // step's effect (`dependsOn`), are not reached; every other step runs whatever failed or
    // was skipped before it.
    let mut unproduced: BTreeMap<String, (usize, Missing)> = BTreeMap::new();
    let mut not_reached = Vec::new();
    // Steps that need a feature this server lacks, and the steps depending on them: n/a, each
    // with the reason (decision D166).
    let mut na_steps: Vec<Unrun> = Vec::new();
    // Steps that cannot apply to this server (they decode an opaque token, or have no
    // single-token form), each with the reason; the scenario goes on.
    let mut skipped_steps: Vec<Unrun> = Vec::new();
    // The locks a step checks when it runs. With opaque tokens the token-format locks are not
    // this server's (the surface declares its tokens opaque): they are left out of the locks a
    // skipped or unreached step would have checked, and are n/a unless a step that ran judged
    // them; a step may still name them itself and run.
    let checked = |step: &Step| -> Vec<String> {
        let own = step.locks();
        step.checked_locks()
            .into_iter()
            .filter(|id| {
                !(opaque && TOKEN_FORMAT_LOCKS.contains(&id.as_str()) && !own.contains(id))
            })
            .collect()
    };
    let unrun_locks = |step: &Step| -> Vec<String> {
        checked(step)
            .into_iter()
            .filter(|id| !(opaque && TOKEN_FORMAT_LOCKS.contains(&id.as_str())))
            .collect()
    };
    for (i, noted) in s.steps.iter().enumerate() {
        interp.step = i + 1;
        interp.action = noted.step.label();
        // A step needing what the server lacks is n/a whatever it depends on: it would not
        // run on this server anyway.
        let lacking = noted
            .needs
            .iter()
            .find_map(|f| lacks(*f, &noted.step).map(|why| (*f, why)));
        if let Some((feature, why)) = lacking {
            if s.features_under_test.contains(&feature) {
                // The scenario checks the feature itself: its absence is the finding.
                interp.fail(
                    noted.step.locks(),
                    format!("a server with the feature `{feature}`, which this scenario checks"),
                    why,
                );
                if let Some(w) = noted.step.writes() {
                    unproduced.insert(w.to_owned(), (i + 1, Missing::Failed));
                }
            } else {
                na_steps.push(Unrun {
                    step: i + 1,
                    action: interp.action.clone(),
                    lock: unrun_locks(&noted.step),
                    reason: why,
                });
                if let Some(w) = noted.step.writes() {
                    unproduced.insert(w.to_owned(), (i + 1, Missing::NotApplicable));
                }
            }
            continue;
        }
        // A dependency that failed or was skipped outranks one that is n/a: the step is then
        // not reached, not excused.
        let mut missing_deps: Vec<(String, (usize, Missing))> = noted
            .dependencies()
            .into_iter()
            .filter_map(|name| unproduced.get(&name).map(|m| (name, *m)))
            .collect();
        missing_deps.sort_by_key(|(_, (_, why))| *why == Missing::NotApplicable);
        let missing = missing_deps.into_iter().next();
        if let Some((name, (at, Missing::NotApplicable))) = missing {
            let read = noted.step.reads().contains(&name);
            na_steps.push(Unrun {
                step: i + 1,
                action: interp.action.clone(),
                lock: unrun_locks(&noted.step),
                reason: Missing::NotApplicable.reason(&name, at, read),
            });
            if let Some(w) = noted.step.writes() {
                unproduced.insert(w.to_owned(), (at, Missing::NotApplicable));
            }
            continue;
        }
        if let Some((name, (at, why))) = missing {
            let read = noted.step.reads().contains(&name);
            not_reached.push(Unrun {
                step: i + 1,
                action: interp.action.clone(),
                lock: unrun_locks(&noted.step),
                reason: why.reason(&name, at, read),
            });
            if let Some(w) = noted.step.writes() {
                unproduced.insert(w.to_owned(), (at, why));
            }
            continue;
        }
        let skip = opaque
            .then(|| {
                noted
                    .step
                    .expressions()
                    .into_iter()
                    .find_map(decoding_operator)
            })
            .flatten()
            .map(|op| {
                format!("needs a decodable token ({op}), and the surface declares opaque tokens")
            })
            .or_else(|| interp.inexpressible(&noted.step));
        if let Some(reason) = skip {
            skipped_steps.push(Unrun {
                step: i + 1,
                action: interp.action.clone(),
                lock: unrun_locks(&noted.step)
                    .into_iter()
                    .filter(|id| noted.step.locks().contains(id))
                    .collect(),
                reason,
            });
            if let Some(w) = noted.step.writes() {
                unproduced.insert(w.to_owned(), (i + 1, Missing::Skipped));
            }
            continue;
        }
        let missing = match interp.run_step(&noted.step) {
            Ok(missing) => missing,
            // A value the step reads is absent from an answer already failed by its shape
            // check (a response that lacked a locked field): that failure is reported where the
            // answer came, so this step is not reached, never failed again. A field no answer
            // was checked for (a scenario's typo) still fails.
            Err(abort) if reads_deficient(&abort, &interp.deficient) => {
                not_reached.push(Unrun {
                    step: i + 1,
                    action: interp.action.clone(),
                    lock: unrun_locks(&noted.step),
                    reason: format!(
                        "reads a value an answer whose shape check failed lacks: {abort}"
                    ),
                });
                Some(Missing::Failed)
            }
            Err(abort) => {
                let got = format!("{abort}{}", interp.client.stderr_tail());
                interp.fail(
                    &[],
                    "the step to run (steps that use what it saves are not run)",
                    got,
                );
                // The step checked nothing: its locks are not reached.
                let lock = unrun_locks(&noted.step);
                if !lock.is_empty() {
                    not_reached.push(Unrun {
                        step: i + 1,
                        action: interp.action.clone(),
                        lock,
                        reason: "the step could not run (see its failure)".into(),
                    });
                }
                Some(Missing::Failed)
            }
        };
        match (noted.step.writes(), missing) {
            (Some(w), Some(why)) => {
                unproduced.insert(w.to_owned(), (i + 1, why));
            }
            (Some(w), None) => {
                unproduced.remove(w);
            }
            (None, _) => {}
        }
    }
    let mut not_applicable: Vec<(String, String)> = Vec::new();
    let has_calls = s.steps.iter().any(|n| matches!(n.step, Step::Call { .. }));
    if opaque && has_calls {
        for id in TOKEN_FORMAT_LOCKS {
            if !interp.judged.contains(id) && !not_applicable.iter().any(|(l, _)| l == id) {
                not_applicable.push((id.to_owned(), OPAQUE_TOKENS_REASON.to_owned()));
            }
        }
    }
    // Through a truth adapter the store's file layout is not seen, so its lock is not judged.
    if config.surface.truth.is_some() && s.lock_ids.iter().any(|id| id == DATADIR_LAYOUT_LOCK) {
        interp.judged.remove(DATADIR_LAYOUT_LOCK);
        not_applicable.push((
            DATADIR_LAYOUT_LOCK.to_owned(),
            "the surface reads durable truth through a truth adapter, not the locked file layout"
                .to_owned(),
        ));
    }
    // Cited locks only n/a steps check (none that ran judged them): n/a, with the first reason.
    for id in &s.lock_ids {
        if interp.judged.contains(id)
            || interp.failures.iter().any(|f| f.lock.contains(id))
            || not_reached
                .iter()
                .chain(&skipped_steps)
                .any(|u| u.lock.contains(id))
            || not_applicable.iter().any(|(l, _)| l == id)
        {
            continue;
        }
        if let Some(u) = na_steps.iter().find(|u| u.lock.contains(id)) {
            not_applicable.push((
                id.clone(),
                format!(
                    "every step that checks it is n/a on this server (step {}: {})",
                    u.step, u.reason
                ),
            ));
        }
    }
    // Cited locks that no step which ran judged on something the server produced: not
    // reached, unless a step that did not run or was skipped already says why.
    let unjudged: Vec<(String, String)> = s
        .lock_ids
        .iter()
        .filter(|id| {
            !interp.judged.contains(*id)
                && !not_applicable.iter().any(|(l, _)| l == *id)
                && !interp.failures.iter().any(|f| f.lock.contains(id))
                && !not_reached
                    .iter()
                    .chain(&skipped_steps)
                    .any(|u| u.lock.contains(id))
        })
        .map(|id| (id.clone(), unjudged_reason(id)))
        .collect();
    let failures = std::mem::take(&mut interp.failures);
    let also_checked: Vec<String> = store::CLOSED_SET_LOCKS
        .iter()
        .filter(|id| interp.closed_sets_judged.contains(**id))
        .map(|id| (*id).to_owned())
        .collect();
    let transcript_wanted = config.verbose && !failures.is_empty();
    let transcript = if transcript_wanted {
        std::mem::take(&mut interp.client.transcript)
    } else {
        Vec::new()
    };
    interp.client.shutdown();
    drop(interp);
    drop(tmp);
    let mut verdict = verdict_of(
        s,
        Status::Pass,
        failures,
        started.elapsed().as_millis(),
        transcript,
    );
    verdict.ran = true;
    verdict.not_reached = not_reached;
    verdict.skipped_steps = skipped_steps;
    verdict.not_applicable_steps = na_steps;
    verdict.not_applicable = not_applicable;
    verdict.unjudged = unjudged;
    verdict.also_checked = also_checked;
    // A scenario passes when nothing failed and at least one of its cited locks passed; when
    // none could be judged on this server it is skipped, with why (decision D159).
    verdict.status = if !verdict.failures.is_empty() {
        Status::Fail
    } else if verdict
        .lock_verdicts()
        .iter()
        .any(|(id, v)| *v == LockVerdict::Pass && s.lock_ids.contains(id))
    {
        Status::Pass
    } else {
        Status::Skip(format!(
            "none of its locks could be judged on this server ({})",
            first_unjudged_reason(&verdict)
        ))
    };
    verdict
}

/// Whether a step's evaluation error is a field missing from a saved answer in `deficient`
/// (`` `${name.path}`: no `field` in ... ``).
fn reads_deficient(abort: &str, deficient: &BTreeSet<String>) -> bool {
    let Some(rest) = abort.strip_prefix("`${") else {
        return false;
    };
    let name: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    abort.contains("`: no `") && deficient.contains(&name)
}

/// The lock of the data directory's file layout, judged only when the suite reads the files.
const DATADIR_LAYOUT_LOCK: &str = "L-DATADIR-LAYOUT";

/// Why a step did not produce the value it saves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Missing {
    /// The step ran and did not behave as the scenario expects (or could not run).
    Failed,
    /// The step was skipped on this server (it cannot apply).
    Skipped,
    /// A digest of a store that held no event segment: there is nothing to compare it with.
    EmptyStore,
    /// The step needs a feature the server lacks, or depends on such a step: n/a, and so are
    /// the steps that depend on it.
    NotApplicable,
}

impl Missing {
    /// Why a step that reads `name` (or depends on the step that saves it) was not reached.
    fn reason(self, name: &str, at: usize, read: bool) -> String {
        match (self, read) {
            (Self::Failed, true) => {
                format!("uses `{name}`, which step {at} did not produce as expected")
            }
            (Self::Skipped, true) => {
                format!("uses `{name}`, which step {at} (skipped) did not save")
            }
            (Self::Failed, false) => format!(
                "depends on what step {at} (`{name}`) did, and that step did not behave as expected"
            ),
            (Self::Skipped, false) => {
                format!("depends on what step {at} (`{name}`) did, and that step was skipped")
            }
            (Self::NotApplicable, true) => {
                format!("uses `{name}`, which step {at} (n/a on this server) did not save")
            }
            (Self::NotApplicable, false) => format!(
                "depends on what step {at} (`{name}`) did, and that step is n/a on this server"
            ),
            (Self::EmptyStore, _) => format!(
                "uses `{name}`, which step {at} read from a store holding no event segment (nothing to compare)"
            ),
        }
    }
}

/// Why a cited lock was judged by nothing that ran.
fn unjudged_reason(id: &str) -> String {
    if store::CLOSED_SET_LOCKS.contains(&id) {
        return "no read of the store found anything this closed set governs (an empty store holds no kind outside any set)".into();
    }
    if ERROR_RESPONSE_LOCKS.contains(&id) {
        return "no error response came back to judge".into();
    }
    if EXECUTION_RESPONSE_LOCKS.contains(&id) {
        return "no execution response carried what this lock governs".into();
    }
    "no step that ran examined anything the server produced for it".into()
}

/// The first reason a skipped-after-running scenario gives: a skipped step's, else a step not
/// reached, else an unjudged lock's.
fn first_unjudged_reason(v: &Verdict) -> String {
    if let Some(u) = v.skipped_steps.first() {
        return format!("step {} skipped: {}", u.step, u.reason);
    }
    if let Some(u) = v.not_reached.first() {
        return format!("step {} not reached: {}", u.step, u.reason);
    }
    if let Some(u) = v.not_applicable_steps.first() {
        return format!("step {} n/a: {}", u.step, u.reason);
    }
    if let Some((id, why)) = v.unjudged.first() {
        return format!("{id}: {why}");
    }
    if let Some((id, why)) = v.not_applicable.first() {
        return format!("{id}: {why}");
    }
    "nothing was judged".into()
}

struct Interp<'a> {
    config: &'a RunConfig,
    client: McpClient,
    has_checkpoint: bool,
    vars: Vars,
    data_dir: PathBuf,
    failures: Vec<Failure>,
    step: usize,
    action: String,
    /// Locks a step that ran judged on something the server produced: a response, the tool
    /// list, what the store holds. A lock passes only when it is here (decision D158).
    judged: BTreeSet<String>,
    /// The closed-set locks a read of the store found something to check for.
    closed_sets_judged: BTreeSet<&'static str>,
    /// Closed-set problems already reported in this scenario.
    closed_set_reported: BTreeSet<String>,
    /// The scenario's own workflow directory (when it writes workflow sources).
    own_workflows: Option<PathBuf>,
    /// The session lock `holdSessionLock` took.
    held_lock: Option<HeldLock>,
    /// The values of the surface's templates in this scenario.
    template: Template,
    /// The server's environment and working directory, for the truth adapter's commands.
    env: Vec<(String, String)>,
    /// Saved responses whose automatic shape checks failed.
    deficient: BTreeSet<String>,
    /// The entries of every store digest taken, by digest, to name what changed between two.
    digests: std::collections::BTreeMap<String, Vec<(String, String)>>,
    cwd: PathBuf,
}

impl Interp<'_> {
    fn fail(&mut self, lock: &[String], expected: impl Into<String>, got: impl Into<String>) {
        self.failures.push(Failure {
            step: self.step,
            action: self.action.clone(),
            lock: lock.to_vec(),
            expected: expected.into(),
            got: got.into(),
        });
    }

    fn problem(&mut self, p: Problem) {
        self.fail(&p.lock, p.expected, p.got);
    }

    fn mismatches(&mut self, lock: &[String], found: Vec<checks::Mismatch>) {
        for (expected, got) in found {
            self.fail(lock, expected, got);
        }
    }

    /// Runs one step. `Ok(Some(why))` when the step ran but did not produce what it saves as the
    /// scenario expects (a call whose expectation failed, a store read that found nothing):
    /// steps that read it are then not run.
    fn run_step(&mut self, step: &Step) -> Result<Option<Missing>, String> {
        let surface = &self.config.surface;
        let failures_before = self.failures.len();
        let mut missing = None;
        // Whether the step examined something the server produced for its own locks (a read
        // of the store that found no event examined nothing).
        let mut examined = true;
        match step {
            Step::Call {
                tool,
                args,
                autonomy,
                save,
                expect,
                code,
                lock,
            } => {
                let mut args = self.vars.eval(args)?;
                // A server that cannot select a mode gets no selection: the step runs only when
                // the mode it asks for is the one the server always uses (see `needs`).
                if let Some(mode) = autonomy
                    && limitations::selects_modes(&surface.limitations)
                {
                    merge_args(&mut args, &surface.autonomy_arguments(mode));
                }
                surface.add_extra_args(tool, &mut args, &self.template);
                let server_args = surface.request_to_server(tool, &args);
                let outcome = self
                    .client
                    .call_tool(surface.server_tool(tool), &server_args)?;
                let mut outcome = match outcome {
                    CallOutcome::Result(r) => CallOutcome::Result(surface.adapt_result(r)),
                    other => other,
                };
                if tool == "start_workflow"
                    && let Some(after) = self.pass_injected_step(&outcome)?
                {
                    // The start's own response is checked too, then replaced by the answer past
                    // the injected step.
                    self.auto_checks(tool, &outcome);
                    outcome = after;
                }
                let before_checks = self.failures.len();
                self.auto_checks(tool, &outcome);
                if self.failures.len() > before_checks
                    && let Some(name) = save
                {
                    self.deficient.insert(name.clone());
                }
                if !self.expectation(tool, *expect, code, lock, &outcome) {
                    missing = Some(Missing::Failed);
                }
                if let Some(name) = save {
                    self.vars.insert(name, Var::Call { outcome });
                }
            }
            Step::ListTools { save } => {
                let tools = self.client.list_tools()?;
                let canonical: Vec<Value> = tools
                    .into_iter()
                    .map(|mut t| {
                        if let Some(name) = t.get("name").and_then(Value::as_str) {
                            let c = self.config.surface.canonical_tool(name).to_owned();
                            if let Some(o) = t.as_object_mut() {
                                o.insert("name".into(), Value::String(c));
                            }
                        }
                        t
                    })
                    .collect();
                self.vars.insert(save, Var::Value(Value::Array(canonical)));
            }
            Step::StoreDigest {
                save,
                require_events,
                lock,
            } => {
                let dump = self.read_truth()?;
                let d = store::digest(&dump);
                if let Some(digest) = d["digest"].as_str() {
                    self.digests
                        .insert(digest.to_owned(), dump.entries().to_vec());
                }
                if *require_events && d["eventFiles"].as_u64() == Some(0) {
                    self.fail(
                        lock,
                        format!(
                            "the durable store in the locked layout under the data directory (`{}`): sessions/<sessionId>/events/*.jsonl and manifest.jsonl",
                            self.config.surface.data_dir_env
                        ),
                        format!("no event segment under {}/sessions", self.data_dir.display()),
                    );
                }
                examined = d["eventFiles"].as_u64().is_some_and(|n| n > 0);
                // A digest of a store without events compares nothing: a server that never
                // wrote would keep it equal forever.
                if self.failures.len() != failures_before {
                    missing = Some(Missing::Failed);
                } else if !examined {
                    missing = Some(Missing::EmptyStore);
                }
                self.vars.insert(save, Var::Value(d));
                self.check_closed_sets(&dump);
            }
            Step::StoreEvents { save, lock } => {
                let dump = self.read_truth()?;
                let events = store::events(&dump);
                if events.is_empty() {
                    self.fail(
                        lock,
                        "session events in the locked layout: sessions/<sessionId>/events/*.jsonl, one JSON event per line",
                        format!("no event under {}/sessions", self.data_dir.display()),
                    );
                }
                if self.failures.len() != failures_before {
                    missing = Some(Missing::Failed);
                }
                examined = !events.is_empty();
                self.vars.insert(save, Var::Value(Value::Array(events)));
                self.check_closed_sets(&dump);
            }
            Step::Events {
                events,
                pattern,
                at_least,
                at_most,
                what,
                lock,
            } => {
                let list = self.vars.value(events)?;
                let pattern = self.vars.eval(pattern)?;
                let n = list.as_array().map_or(0, |a| {
                    a.iter().filter(|e| store::matches(e, &pattern)).count()
                }) as u64;
                let too_many = at_most.is_some_and(|m| n > m);
                if n < *at_least || too_many {
                    let range = match at_most {
                        Some(m) => format!("{at_least} to {m}"),
                        None => format!("at least {at_least}"),
                    };
                    let kinds: Vec<&str> = list
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .filter_map(|e| e.get("kind").and_then(Value::as_str))
                                .collect()
                        })
                        .unwrap_or_default();
                    self.fail(
                        lock,
                        format!("{what}: {range} events matching {}", brief_json(&pattern)),
                        format!(
                            "{n} matching; event kinds in the store: {}",
                            brief(&kinds.join(", "))
                        ),
                    );
                }
            }
            Step::StoreInvariants {
                events,
                strict,
                lock,
            } => {
                let list = self.vars.value(events)?;
                let found =
                    checks::store_invariants(list.as_array().map_or(&[], Vec::as_slice), *strict);
                self.mismatches(lock, found);
            }
            Step::Let { name, value } => {
                let v = self.vars.eval(value)?;
                self.vars.insert(name, Var::Value(v));
            }
            Step::ToolSet {
                tools,
                required,
                optional,
                lock,
            } => {
                let list = self.vars.value(tools)?;
                let names: Vec<String> = list
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|t| {
                                t.get("name").and_then(Value::as_str).map(str::to_owned)
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                let found = checks::tool_set(&names, required, optional);
                self.mismatches(lock, found);
            }
            Step::SchemaAccepts {
                tools,
                tool,
                example,
                lock,
            } => {
                let schema = self.input_schema(tools, tool)?;
                // The example as the suite would send it: with the surface's extra arguments.
                let mut example = self.vars.eval(example)?;
                self.config
                    .surface
                    .add_extra_args(tool, &mut example, &self.template);
                let example = self.config.surface.request_to_server(tool, &example);
                let problems = schema::validate(&example, &schema);
                if !problems.is_empty() {
                    self.fail(
                        lock,
                        format!(
                            "the inputSchema of {tool} to accept {}",
                            brief_json(&example)
                        ),
                        problems.join("; "),
                    );
                }
            }
            Step::SchemaRequires {
                tools,
                tool,
                fields,
                lock,
            } => {
                let schema = self.input_schema(tools, tool)?;
                let required: Vec<&str> = schema
                    .get("required")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                for f in fields {
                    // A server whose checkpoint token carries the node takes it alone.
                    if tool == "checkpoint_workflow"
                        && f == "stateToken"
                        && self.config.surface.token_model.checkpoint_alone()
                    {
                        continue;
                    }
                    let server_name = self.config.surface.fields.get(f).unwrap_or(f);
                    if !required.contains(&server_name.as_str()) {
                        self.fail(
                            lock,
                            format!("the inputSchema of {tool} to require `{server_name}`"),
                            format!("required: {required:?}"),
                        );
                    }
                }
            }
            Step::Same { a, b, what, lock } => {
                let (va, vb) = (self.vars.eval(a)?, self.vars.eval(b)?);
                if va != vb {
                    // Two store digests: name what was written in between, not two hashes.
                    let changed = match (va.as_str(), vb.as_str()) {
                        (Some(da), Some(db)) => self
                            .digests
                            .get(da)
                            .zip(self.digests.get(db))
                            .map(|(ea, eb)| store::changed_entries(ea, eb)),
                        _ => None,
                    };
                    let got = match changed {
                        Some(changed) => format!(
                            "the store changed in between: {}",
                            brief(&changed.join(", "))
                        ),
                        None => {
                            let diff = first_difference(&va, &vb, "").unwrap_or_default();
                            format!("{} vs {}{diff}", brief_json(&va), brief_json(&vb))
                        }
                    };
                    self.fail(lock, format!("{what}: equal values"), got);
                }
            }
            Step::Differ { a, b, what, lock } => {
                let (va, vb) = (self.vars.eval(a)?, self.vars.eval(b)?);
                if va == vb {
                    self.fail(
                        lock,
                        format!("{what}: different values"),
                        format!("both {}", brief_json(&va)),
                    );
                }
            }
            Step::AtMost {
                value,
                max,
                what,
                lock,
            } => {
                let v = self.vars.eval(value)?;
                match v.as_u64() {
                    Some(n) if n <= *max => {}
                    _ => self.fail(lock, format!("{what}: at most {max}"), brief_json(&v)),
                }
            }
            Step::SameResponse { a, b, lock } => {
                let (ra, rb) = (self.vars.result(a)?, self.vars.result(b)?);
                for (name, r) in [(a, &ra), (b, &rb)] {
                    if checks::is_empty_result(r) {
                        return Err(format!(
                            "`{name}` is an empty response (no text, no structuredContent): two empty responses are identical whatever the server did"
                        ));
                    }
                }
                if ra.is_error != rb.is_error {
                    self.fail(
                        lock,
                        format!("{a} and {b} both errors or both not"),
                        format!("isError {} vs {}", ra.is_error, rb.is_error),
                    );
                }
                if ra.structured != rb.structured {
                    let diff =
                        first_difference(&ra.structured, &rb.structured, "").unwrap_or_default();
                    self.fail(
                        lock,
                        format!("byte-identical structuredContent in {a} and {b}"),
                        format!("they differ{diff}"),
                    );
                }
                if ra.text != rb.text {
                    let at = ra
                        .text
                        .bytes()
                        .zip(rb.text.bytes())
                        .position(|(x, y)| x != y)
                        .unwrap_or(ra.text.len().min(rb.text.len()));
                    self.fail(
                        lock,
                        format!("byte-identical content[0].text in {a} and {b}"),
                        format!("they differ from byte {at}"),
                    );
                }
            }
            Step::Blockers {
                result,
                codes,
                pointer,
                lock,
            } => {
                let r = self.vars.result(result)?;
                let pointer = pointer.as_ref().map(|p| self.vars.eval(p)).transpose()?;
                let found = checks::blockers(&r.structured, codes, pointer.as_ref());
                self.mismatches(lock, found);
            }
            Step::ContextBudget {
                result,
                measured_bytes,
                max_bytes,
                lock,
            } => {
                let r = self.vars.result(result)?;
                let measured = self
                    .vars
                    .eval(measured_bytes)?
                    .as_u64()
                    .ok_or_else(|| "measuredBytes is not a non-negative integer".to_owned())?;
                let found = checks::context_budget(&r.structured, measured, max_bytes);
                self.mismatches(lock, found);
            }
            Step::Absent { result, text, lock } => {
                let r = self.vars.result(result)?;
                if checks::is_empty_result(&r) {
                    return Err(format!(
                        "`{result}` is an empty response (no text, no structuredContent): nothing is present in it whatever the server did"
                    ));
                }
                let needle = self.vars.eval_string(text)?;
                if checks::occurs(&r, &needle) {
                    self.fail(
                        lock,
                        format!("{} absent from {result}", brief(&needle)),
                        format!("present: {}", brief(&r.text)),
                    );
                }
            }
            Step::Present { result, text, lock } => {
                let r = self.vars.result(result)?;
                let needle = self.vars.eval_string(text)?;
                if !checks::occurs(&r, &needle) {
                    self.fail(
                        lock,
                        format!("{} present in {result}", brief(&needle)),
                        format!(
                            "text: {}; structuredContent: {}",
                            brief(&r.text),
                            brief_json(&r.structured)
                        ),
                    );
                }
            }
            Step::Mentions {
                result,
                values,
                structured,
                lock,
            } => {
                let r = self.vars.result(result)?;
                let values = values
                    .iter()
                    .map(|v| self.vars.eval(v))
                    .collect::<Result<Vec<_>, _>>()?;
                let found = checks::mentions(&r, &values, *structured);
                self.mismatches(lock, found);
            }
            Step::Discovery {
                result,
                includes,
                lock,
            } => {
                let r = self.vars.result(result)?;
                let found = checks::discovery(&r.structured, includes);
                self.mismatches(lock, found);
            }
            Step::StrictErrorEnvelope { result, lock } => {
                let r = self.vars.result(result)?;
                if r.is_error {
                    let found = checks::strict_error_envelope(&r.structured);
                    self.mismatches(lock, found);
                } else {
                    self.fail(lock, "an error result", describe(&CallOutcome::Result(r)));
                }
            }
            Step::WriteWorkflow { file, workflow } => {
                let dir = self
                    .own_workflows
                    .as_ref()
                    .ok_or("the scenario has no workflow directory of its own")?;
                let doc = self
                    .config
                    .surface
                    .workflow_for_server(&self.vars.eval(workflow)?);
                let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
                let path = dir.join(file);
                std::fs::write(&path, text + "\n")
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            }
            Step::HoldSessionLock { session, lock } => {
                let id = self.vars.eval_string(session)?;
                if id.is_empty()
                    || !id
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                {
                    return Err(format!("session id {id:?} is not a plain identifier"));
                }
                if self.held_lock.is_some() {
                    return Err("a session lock is already held".into());
                }
                if let Some(command) = self
                    .config
                    .surface
                    .truth
                    .as_ref()
                    .and_then(|t| t.lock.clone())
                {
                    match self.hold_with_command(&command, &id)? {
                        Ok(child) => self.held_lock = Some(HeldLock::Command(child)),
                        Err(refusal) => {
                            self.fail(
                                lock,
                                "the session lock free between calls (a server holds it only while it writes)",
                                refusal,
                            );
                            return Ok(Some(Missing::Failed));
                        }
                    }
                    return Ok(None);
                }
                let dir = self.data_dir.join("sessions").join(&id);
                if !dir.is_dir() {
                    self.fail(
                        lock,
                        "the session's directory in the locked layout: sessions/<sessionId>/",
                        format!("no directory {}", dir.display()),
                    );
                    return Ok(Some(Missing::Failed));
                }
                let path = dir.join(".lock");
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
                    .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
                match file.try_lock() {
                    Ok(()) => self.held_lock = Some(HeldLock::File(file)),
                    Err(std::fs::TryLockError::WouldBlock) => {
                        self.fail(
                            lock,
                            "the session lock free between calls (a server holds it only while it writes)",
                            format!("{} is locked by another process", path.display()),
                        );
                        return Ok(Some(Missing::Failed));
                    }
                    Err(std::fs::TryLockError::Error(e)) => {
                        return Err(format!("cannot lock {}: {e}", path.display()));
                    }
                }
            }
            Step::ReleaseSessionLock {} => {
                let held = self
                    .held_lock
                    .take()
                    .ok_or("no session lock is held (holdSessionLock first)")?;
                held.release()?;
            }
        }
        // Every check step reads something the server produced (the scenario loader refuses a
        // check of the scenario's own values that cites a lock), so a check that ran judged
        // its locks; a call judged its own through its expectation.
        if examined {
            let own: Vec<&str> = step.locks().iter().map(String::as_str).collect();
            self.judge(&own);
        }
        Ok(missing)
    }

    /// Why a step cannot be sent to this server at all, if it cannot: a `continue_workflow`
    /// with a `stateToken` and an `ackToken` that differ (tokens of different responses, or one
    /// altered) has no single-token form.
    fn inexpressible(&self, step: &Step) -> Option<String> {
        let Step::Call { tool, args, .. } = step else {
            return None;
        };
        if tool == "checkpoint_workflow" && self.config.surface.token_model.checkpoint_alone() {
            // Only the checkpoint token is sent: a state token of another response has no form.
            let source = |field: &str| {
                let text = args.get(field)?.to_string();
                let start = text.find("${")? + 2;
                let name: String = text[start..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                Some(name)
            };
            return match (source("stateToken"), source("checkpointToken")) {
                (Some(state), Some(checkpoint)) if state != checkpoint => Some(
                    "sends a stateToken and a checkpointToken of different responses, and the surface's checkpoint_workflow takes the checkpoint token alone (tokenModel: checkpointAlone)"
                        .into(),
                ),
                _ => None,
            };
        }
        if tool != "continue_workflow"
            || !matches!(
                self.config.surface.token_model,
                TokenModel::SingleToken { .. }
            )
        {
            return None;
        }
        // A token of one kind where the other belongs: one kind of token has no such mix-up.
        let names = |field: &str, kind: &str| {
            args.get(field)
                .and_then(Value::as_str)
                .is_some_and(|e| e.contains(&format!(".{kind}}}")))
        };
        if names("ackToken", "stateToken") || names("stateToken", "ackToken") {
            return Some(
                "puts a token of one kind where the other belongs, which a single-token server cannot tell apart (tokenModel: singleToken)"
                    .into(),
            );
        }
        let args = self.vars.eval(args).ok()?;
        match (args.get("stateToken"), args.get("ackToken")) {
            (Some(state), Some(ack)) if state != ack => Some(
                "sends a stateToken and an ackToken that differ, which a single-token server cannot take (tokenModel: singleToken)"
                    .into(),
            ),
            _ => None,
        }
    }

    /// When the surface declares an injected first step and `start` is pending on it: the
    /// answer to acknowledging it (with the declared `ackArgs`), in the canonical surface.
    fn pass_injected_step(&mut self, start: &CallOutcome) -> Result<Option<CallOutcome>, String> {
        let surface = &self.config.surface;
        let Some((step_id, ack_args)) = limitations::injected_first_step(&surface.limitations)
        else {
            return Ok(None);
        };
        let CallOutcome::Result(r) = start else {
            return Ok(None);
        };
        let pending = r
            .structured
            .get("pending")
            .and_then(|p| p.get("stepId"))
            .and_then(Value::as_str);
        if r.is_error || pending != Some(step_id) {
            return Ok(None);
        }
        let token = |f: &str| {
            r.structured.get(f).cloned().ok_or_else(|| {
                format!(
                    "the injected first step `{step_id}` came without a `{f}` to acknowledge it"
                )
            })
        };
        let mut args = Value::Object(ack_args.clone());
        if let Value::Object(map) = &mut args {
            map.insert("stateToken".into(), token("stateToken")?);
            map.insert("ackToken".into(), token("ackToken")?);
        }
        surface.add_extra_args("continue_workflow", &mut args, &self.template);
        let server_args = surface.request_to_server("continue_workflow", &args);
        let outcome = self
            .client
            .call_tool(surface.server_tool("continue_workflow"), &server_args)?;
        Ok(Some(match outcome {
            CallOutcome::Result(r) => CallOutcome::Result(surface.adapt_result(r)),
            other => other,
        }))
    }

    /// The closed sets of everything in the store, on every read of it; each problem is
    /// reported once per scenario.
    /// Starts the truth adapter's lock command for session `id` and waits for its first line
    /// (decision D204). `Ok(Err(why))`: the command ran and did not hold the lock (its exit
    /// status and what it said), a finding about the server; `Err`: it could not be run.
    fn hold_with_command(
        &self,
        command: &str,
        id: &str,
    ) -> Result<Result<std::process::Child, String>, String> {
        use std::io::BufRead;
        let server = self.config.server.first().cloned().unwrap_or_default();
        let line = self
            .template
            .expand(command)
            .replace("$server", &server)
            .replace("$session", id);
        let argv = crate::mcp::split_command(&line)?;
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| format!("the truth adapter's lock command {line:?} is empty"))?;
        let mut child = std::process::Command::new(program)
            .args(args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&self.cwd)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("the truth adapter's lock command {line:?} did not start: {e}"))?;
        let stdout = child
            .stdout
            .take()
            .ok_or("the lock command's stdout was not captured")?;
        let mut first = String::new();
        // The command prints its line once the lock is held, or exits without one.
        let read = std::io::BufReader::new(stdout).read_line(&mut first);
        if matches!(read, Ok(n) if n > 0) {
            return Ok(Ok(child));
        }
        drop(child.stdin.take());
        let out = child
            .wait_with_output()
            .map_err(|e| format!("the truth adapter's lock command {line:?} failed: {e}"))?;
        Ok(Err(format!(
            "the lock command {line:?} exited ({}) without holding the lock: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }

    /// The server's durable truth now: the locked file layout, or what the surface's truth
    /// adapter prints (decision D194), run with the server's environment.
    fn read_truth(&self) -> Result<store::Dump, String> {
        let Some(adapter) = &self.config.surface.truth else {
            let logs: Vec<&str> = self
                .config
                .surface
                .log_files
                .keys()
                .map(String::as_str)
                .collect();
            return store::Dump::files(&self.data_dir, &logs);
        };
        let server = self.config.server.first().cloned().unwrap_or_default();
        let run = |line: &str| -> Result<Value, String> {
            let line = self.template.expand(line).replace("$server", &server);
            let argv = crate::mcp::split_command(&line)?;
            let (program, args) = argv
                .split_first()
                .ok_or_else(|| format!("the truth adapter's command {line:?} is empty"))?;
            let out = std::process::Command::new(program)
                .args(args)
                .envs(self.env.iter().map(|(k, v)| (k, v)))
                .current_dir(&self.cwd)
                .stdin(std::process::Stdio::null())
                .output()
                .map_err(|e| format!("the truth adapter's command {line:?} did not start: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "the truth adapter's command {line:?} failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            serde_json::from_slice(&out.stdout)
                .map_err(|e| format!("the truth adapter's command {line:?} printed no JSON: {e}"))
        };
        let listed = run(&adapter.sessions)?;
        let ids: Vec<String> = listed
            .as_array()
            .ok_or_else(|| {
                format!(
                    "the truth adapter's sessions command printed {}, not a JSON array",
                    crate::checks::brief_json(&listed)
                )
            })?
            .iter()
            .filter_map(|item| {
                item.as_str()
                    .or_else(|| item.get("sessionId").and_then(Value::as_str))
                    .map(str::to_owned)
            })
            .collect();
        let mut sessions = Vec::new();
        for id in ids {
            if !id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            {
                return Err(format!(
                    "the truth adapter listed a session id {id:?} that is not a plain identifier"
                ));
            }
            let exported = run(&adapter.export.replace("$session", &id))?;
            sessions.push((id, exported));
        }
        store::Dump::adapter(sessions)
    }

    fn check_closed_sets(&mut self, dump: &store::Dump) {
        let found = store::closed_sets_judged(dump);
        for id in &found.judged {
            self.judged.insert((*id).to_owned());
        }
        self.closed_sets_judged.extend(found.judged);
        for p in found.problems {
            if self.closed_set_reported.insert(p.got.clone()) {
                self.problem(p);
            }
        }
    }

    fn judge(&mut self, locks: &[&str]) {
        self.judged.extend(locks.iter().map(|l| (*l).to_owned()));
    }

    /// Checks that hold for every response, whatever the step expects; each judges its locks
    /// only on a response it governs (the envelope on an error, the token format on a token).
    fn auto_checks(&mut self, tool: &str, outcome: &CallOutcome) {
        match outcome {
            CallOutcome::RpcError { code, message } => {
                self.judge(&["L-ERR-NO-PANIC"]);
                self.problem(Problem::new(
                    &["L-ERR-NO-PANIC"],
                    "a tool result (errors are data: isError with the error envelope), never a JSON-RPC error",
                    format!("JSON-RPC error {code}: {message}"),
                ));
            }
            CallOutcome::Result(r) if r.is_error => {
                self.judge(&ERROR_RESPONSE_LOCKS);
                for p in checks::error_envelope(&r.structured) {
                    self.problem(p);
                }
            }
            CallOutcome::Result(r) if EXECUTION_RESPONSE_TOOLS.contains(&tool) => {
                let format = self.config.surface.token_format;
                let judged = execution_response_judged(r, format);
                self.judge(&judged);
                for p in checks::execution_response(r, self.has_checkpoint, format) {
                    self.problem(p);
                }
            }
            CallOutcome::Result(_) => {}
        }
    }

    /// Checks a call's expectation; whether it held.
    fn expectation(
        &mut self,
        tool: &str,
        expect: Expect,
        codes: &[String],
        lock: &[String],
        outcome: &CallOutcome,
    ) -> bool {
        let got = describe(outcome);
        let CallOutcome::Result(r) = outcome else {
            self.fail(lock, expected_text(expect, codes), got);
            return false;
        };
        let blocked = r.structured.get("kind").and_then(Value::as_str) == Some("blocked");
        // A start, continue or checkpoint that succeeded answers with an execution response;
        // a success with no structured answer at all (a server that did nothing) is not ok.
        let answered = !EXECUTION_TOOLS.contains(&tool) || r.structured.is_object();
        let ok = match expect {
            Expect::Ok => !r.is_error && !blocked && answered,
            Expect::Blocked => !r.is_error && blocked,
            Expect::NotError => !r.is_error && answered,
            Expect::Error => {
                let code = r
                    .structured
                    .get("code")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                r.is_error && (codes.is_empty() || codes.iter().any(|c| c == code))
            }
        };
        if !ok {
            self.fail(lock, expected_text(expect, codes), got);
        }
        ok
    }

    fn input_schema(&self, tools: &str, tool: &str) -> Result<Value, String> {
        let list = self.vars.value(tools)?;
        let def = list
            .as_array()
            .and_then(|a| {
                a.iter()
                    .find(|t| t.get("name").and_then(Value::as_str) == Some(tool))
            })
            .ok_or_else(|| format!("tools/list has no tool `{tool}`"))?;
        def.get("inputSchema")
            .cloned()
            .ok_or_else(|| format!("tool `{tool}` has no inputSchema"))
    }
}

fn expected_text(expect: Expect, codes: &[String]) -> String {
    match expect {
        Expect::Ok => "an ok result (not an error, not blocked)".into(),
        Expect::Blocked => "a result with kind \"blocked\"".into(),
        Expect::NotError => "a result that is not an error".into(),
        Expect::Error if codes.is_empty() => "an error result (isError: true)".into(),
        Expect::Error => format!("an error result with code {}", codes.join(" or ")),
    }
}

/// A one-line description of an outcome for reports.
pub fn describe(outcome: &CallOutcome) -> String {
    match outcome {
        CallOutcome::RpcError { code, message } => format!("JSON-RPC error {code}: {message}"),
        CallOutcome::Result(r) if r.is_error => format!(
            "error {}: {}",
            r.structured
                .get("code")
                .and_then(Value::as_str)
                .unwrap_or("<no code>"),
            brief_json(&r.structured)
        ),
        CallOutcome::Result(r) => {
            let kind = r
                .structured
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("ok");
            let step = r
                .structured
                .get("pending")
                .and_then(|p| p.get("stepId"))
                .and_then(Value::as_str)
                .unwrap_or("-");
            format!(
                "{kind} (pending step {step}): {}",
                brief_json(&r.structured)
            )
        }
    }
}

/// The first JSON path where two values differ, for reports.
fn first_difference(a: &Value, b: &Value, at: &str) -> Option<String> {
    if a == b {
        return None;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()) {
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => {
                        if let Some(d) = first_difference(p, q, &format!("{at}/{k}")) {
                            return Some(d);
                        }
                    }
                    _ => return Some(format!(" at {at}/{k}: present in only one")),
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, &format!("{at}/{i}"))),
        _ => Some(format!(
            " at {}: {} vs {}",
            if at.is_empty() { "/" } else { at },
            brief_json(a),
            brief_json(b)
        )),
    }
}

/// The default fixture root: `fixtures/conformance` of this repository when it exists,
/// else `./fixtures/conformance`.
pub fn default_fixtures() -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/conformance");
    if repo.is_dir() {
        repo
    } else {
        PathBuf::from("fixtures/conformance")
    }
}

/// A session lock the suite holds for `holdSessionLock`: the layout's lock file, or a truth
/// adapter's lock command keeping it until its stdin closes (decision D204).
#[derive(Debug)]
enum HeldLock {
    File(std::fs::File),
    Command(std::process::Child),
}

impl HeldLock {
    /// Releases the lock; a lock command must end within 30 s of its stdin closing.
    fn release(self) -> Result<(), String> {
        match self {
            HeldLock::File(file) => file
                .unlock()
                .map_err(|e| format!("cannot release the session lock: {e}")),
            HeldLock::Command(mut child) => {
                drop(child.stdin.take());
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
                loop {
                    match child.try_wait() {
                        Ok(Some(_)) => return Ok(()),
                        Ok(None) if std::time::Instant::now() < deadline => {
                            std::thread::sleep(std::time::Duration::from_millis(20));
                        }
                        Ok(None) => {
                            let _ = child.kill();
                            let _ = child.wait();
                            return Err(
                                "the lock command did not end within 30 s of its stdin closing; it was killed".into(),
                            );
                        }
                        Err(e) => return Err(format!("cannot wait for the lock command: {e}")),
                    }
                }
            }
        }
    }
}

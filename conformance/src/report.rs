//! Verdicts, the console lines and the JSON report.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value, json};

/// The verdict of one scenario (or one vector file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    Pass,
    Fail,
    Skip(String),
}

impl Status {
    pub fn word(&self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Fail => "FAIL",
            Self::Skip(_) => "SKIP",
        }
    }
}

/// One failed expectation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// 1-based step number (0: before the first step, e.g. starting the server).
    pub step: usize,
    /// What the step did, e.g. `call continue_workflow`.
    pub action: String,
    /// The lock ids the expectation checks (empty for set-up problems).
    pub lock: Vec<String>,
    pub expected: String,
    pub got: String,
}

/// A step that did not run because it uses a value a failed step did not produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unrun {
    /// 1-based step number (0: every step, when the scenario could not start).
    pub step: usize,
    pub action: String,
    /// The lock ids the step would have checked.
    pub lock: Vec<String>,
    pub reason: String,
}

/// What one run says about one lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LockVerdict {
    /// A failed expectation cites it.
    Fail,
    /// Some check of it did not run (a step it depends on failed or was skipped, or the step
    /// was skipped on this server), or nothing the server produced was examined for it; and
    /// none failed.
    NotReached,
    /// Every check of it ran and held, and at least one examined what the server produced.
    Pass,
    /// Not judged: the scenario or file was skipped (profile, missing tool, skip list,
    /// declared limitation), or the surface declares the server lacks what the lock is about
    /// (the token format of opaque tokens).
    NotApplicable,
}

impl LockVerdict {
    /// The JSON word.
    pub fn word(self) -> &'static str {
        match self {
            Self::Fail => "fail",
            Self::NotReached => "not_reached",
            Self::Pass => "pass",
            Self::NotApplicable => "n/a",
        }
    }

    /// The word in the text lock table.
    pub fn label(self) -> &'static str {
        match self {
            Self::Fail => "FAIL",
            Self::NotReached => "NOT REACHED",
            Self::Pass => "PASS",
            Self::NotApplicable => "N/A",
        }
    }

    /// All four, worst first.
    pub const ALL: [Self; 4] = [
        Self::Fail,
        Self::NotReached,
        Self::Pass,
        Self::NotApplicable,
    ];
}

/// The outcome of one scenario or vector file.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub name: String,
    pub profile: String,
    pub lock_ids: Vec<String>,
    pub status: Status,
    pub failures: Vec<Failure>,
    /// Steps that did not run, each with the reason.
    pub not_reached: Vec<Unrun>,
    /// Steps not run because they cannot apply to this server (e.g. they need a decodable
    /// token and the surface declares opaque tokens), each with the reason.
    pub skipped_steps: Vec<Unrun>,
    /// Steps not run because they need a feature the server lacks (its surface declares a
    /// limitation, or it does not list a feature-flagged tool), or depend on such a step: n/a,
    /// never pass, never fail (decision D166). A lock only such steps check is in
    /// `not_applicable`.
    pub not_applicable_steps: Vec<Unrun>,
    /// Locks this server cannot be judged on in this scenario, each with the reason; a lock
    /// here was checked by no step that ran.
    pub not_applicable: Vec<(String, String)>,
    /// Locks judged by an always-on check beside the cited `lockIds` (the closed sets of the
    /// store, when a read of it found something they govern).
    pub also_checked: Vec<String>,
    /// Cited locks no step that ran examined anything the server produced for, each with the
    /// reason (e.g. no error response came back to judge the envelope on): not reached.
    pub unjudged: Vec<(String, String)>,
    /// Whether the scenario ran against the server. A scenario skipped before it ran (profile,
    /// missing tool, skip list, declared limitation) judges nothing: every lock is n/a. One
    /// that ran and could judge none of its locks is skipped too, but its locks keep what the
    /// run found (not reached, n/a).
    pub ran: bool,
    pub duration_ms: u128,
    /// Extra text for humans (e.g. the number of vector cases).
    pub note: Option<String>,
    /// The MCP transcript, kept for failures when asked for.
    pub transcript: Vec<String>,
}

impl Verdict {
    /// The verdict on each lock this run judged: the cited `lockIds`, then the always-on checks'
    /// locks, then any other lock a failure names (e.g. a response check every call runs).
    ///
    /// A lock passes only when every step that checks it ran and held, and a step that ran
    /// examined something the server produced for it (decision D158): a step that did not run
    /// (it depends on a step that failed or was skipped) or was skipped on this server, or a
    /// cited lock nothing examined, makes it not reached.
    pub fn lock_verdicts(&self) -> Vec<(String, LockVerdict)> {
        let mut ids = self.lock_ids.clone();
        let extra = self
            .also_checked
            .iter()
            .chain(self.not_applicable.iter().map(|(id, _)| id))
            .chain(self.unjudged.iter().map(|(id, _)| id))
            .chain(self.failures.iter().flat_map(|f| &f.lock));
        for id in extra {
            if !ids.contains(id) {
                ids.push(id.clone());
            }
        }
        ids.into_iter()
            .map(|id| {
                let verdict = if matches!(self.status, Status::Skip(_)) && !self.ran {
                    LockVerdict::NotApplicable
                } else if self.failures.iter().any(|f| f.lock.contains(&id)) {
                    LockVerdict::Fail
                } else if self
                    .not_reached
                    .iter()
                    .chain(&self.skipped_steps)
                    .any(|u| u.lock.contains(&id))
                {
                    LockVerdict::NotReached
                } else if self.not_applicable.iter().any(|(l, _)| *l == id) {
                    LockVerdict::NotApplicable
                } else if self.unjudged.iter().any(|(l, _)| *l == id) {
                    LockVerdict::NotReached
                } else {
                    LockVerdict::Pass
                };
                (id, verdict)
            })
            .collect()
    }

    /// The console block: one line, then the failures.
    pub fn render(&self, verbose: bool) -> String {
        let mut out = format!(
            "{}  {}  [{}]",
            self.status.word(),
            self.name,
            self.lock_ids.join(", ")
        );
        if let Some(note) = &self.note {
            let _ = write!(out, "  ({note})");
        }
        if let Status::Skip(reason) = &self.status {
            let _ = write!(out, "  reason: {reason}");
        }
        for f in &self.failures {
            let locks = if f.lock.is_empty() {
                "no lock (a precondition of the scenario)".to_owned()
            } else {
                format!("lock {}", f.lock.join(", "))
            };
            let at = if f.action.starts_with("case ") {
                f.action.clone()
            } else {
                format!("step {} ({})", f.step, f.action)
            };
            let _ = write!(
                out,
                "\n      {at}: {locks}\n        expected: {}\n        got:      {}",
                indent(&f.expected),
                indent(&f.got)
            );
        }
        for u in &self.not_reached {
            let at = if u.step == 0 {
                "every step".to_owned()
            } else {
                format!("step {} ({})", u.step, u.action)
            };
            let _ = write!(out, "\n      {at}: not reached: {}", u.reason);
        }
        for u in &self.skipped_steps {
            let _ = write!(
                out,
                "\n      step {} ({}): skipped: {}",
                u.step, u.action, u.reason
            );
        }
        for u in &self.not_applicable_steps {
            let _ = write!(
                out,
                "\n      step {} ({}): n/a: {}",
                u.step, u.action, u.reason
            );
        }
        for (reason, locks) in by_reason(&self.unjudged) {
            let _ = write!(out, "\n      not reached {}: {reason}", locks.join(", "));
        }
        for (reason, locks) in self.not_applicable_by_reason() {
            let _ = write!(out, "\n      n/a {}: {reason}", locks.join(", "));
        }
        if verbose && self.status == Status::Fail && !self.transcript.is_empty() {
            out.push_str("\n      transcript:");
            for line in &self.transcript {
                let _ = write!(out, "\n        {}", crate::checks::brief(line));
            }
        }
        out
    }

    /// The not-applicable locks grouped by reason, in order of first appearance.
    pub fn not_applicable_by_reason(&self) -> Vec<(&str, Vec<&str>)> {
        by_reason(&self.not_applicable)
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "name": self.name,
            "profile": self.profile,
            "lockIds": self.lock_ids,
            "status": self.status.word().to_ascii_lowercase(),
            "durationMs": u64::try_from(self.duration_ms).unwrap_or(u64::MAX),
            "failures": self.failures.iter().map(|f| json!({
                "step": f.step,
                "action": f.action,
                "lockIds": f.lock,
                "expected": f.expected,
                "got": f.got,
            })).collect::<Vec<_>>(),
            "notReached": self.not_reached.iter().map(|u| json!({
                "step": u.step,
                "action": u.action,
                "lockIds": u.lock,
                "reason": u.reason,
            })).collect::<Vec<_>>(),
            "skippedSteps": self.skipped_steps.iter().map(|u| json!({
                "step": u.step,
                "action": u.action,
                "lockIds": u.lock,
                "reason": u.reason,
            })).collect::<Vec<_>>(),
            "notApplicableSteps": self.not_applicable_steps.iter().map(|u| json!({
                "step": u.step,
                "action": u.action,
                "lockIds": u.lock,
                "reason": u.reason,
            })).collect::<Vec<_>>(),
            "notApplicable": self.not_applicable.iter()
                .map(|(id, reason)| (id.clone(), Value::String(reason.clone())))
                .collect::<Map<String, Value>>(),
            "notJudged": self.unjudged.iter()
                .map(|(id, reason)| (id.clone(), Value::String(reason.clone())))
                .collect::<Map<String, Value>>(),
            "locks": self.lock_verdicts().into_iter()
                .map(|(id, v)| (id, Value::String(v.word().to_owned())))
                .collect::<Map<String, Value>>(),
        });
        if let (Status::Skip(reason), Some(obj)) = (&self.status, v.as_object_mut()) {
            obj.insert("reason".into(), Value::String(reason.clone()));
        }
        if let (Some(note), Some(obj)) = (&self.note, v.as_object_mut()) {
            obj.insert("note".into(), Value::String(note.clone()));
        }
        v
    }
}

/// `(lock, reason)` pairs grouped by reason, in order of first appearance.
fn by_reason(pairs: &[(String, String)]) -> Vec<(&str, Vec<&str>)> {
    let mut out: Vec<(&str, Vec<&str>)> = Vec::new();
    for (lock, reason) in pairs {
        match out.iter_mut().find(|(r, _)| r == reason) {
            Some((_, locks)) => locks.push(lock),
            None => out.push((reason, vec![lock])),
        }
    }
    out
}

fn indent(text: &str) -> String {
    text.replace('\n', "\n                  ")
}

/// Counts of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

impl Summary {
    pub fn of(verdicts: &[Verdict]) -> Self {
        let mut s = Self::default();
        for v in verdicts {
            match v.status {
                Status::Pass => s.passed += 1,
                Status::Fail => s.failed += 1,
                Status::Skip(_) => s.skipped += 1,
            }
        }
        s
    }

    /// The closing line: `N passed, N failed, N skipped`.
    pub fn line(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.passed, self.failed, self.skipped
        )
    }
}

/// One lock across a run: its overall verdict (the worst of its scenarios' verdicts, N/A only
/// when no scenario judged it) and each scenario's verdict, in run order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRow {
    pub id: String,
    pub verdict: LockVerdict,
    pub by: Vec<(String, LockVerdict)>,
}

/// Every lock any verdict names, sorted by id.
pub fn lock_rows(verdicts: &[Verdict]) -> Vec<LockRow> {
    let mut by_lock: BTreeMap<String, Vec<(String, LockVerdict)>> = BTreeMap::new();
    for v in verdicts {
        for (id, lv) in v.lock_verdicts() {
            by_lock.entry(id).or_default().push((v.name.clone(), lv));
        }
    }
    by_lock
        .into_iter()
        .map(|(id, by)| {
            let verdict = by
                .iter()
                .map(|(_, v)| *v)
                .min()
                .unwrap_or(LockVerdict::NotApplicable);
            LockRow { id, verdict, by }
        })
        .collect()
}

/// The text lock table: one line per lock (verdict, id, where it was judged), then a count per
/// verdict.
pub fn lock_table(verdicts: &[Verdict]) -> String {
    let rows = lock_rows(verdicts);
    let width = rows.iter().map(|r| r.id.len()).max().unwrap_or(0);
    let mut out = String::from("Locks:");
    for r in &rows {
        let mut parts = Vec::new();
        for lv in LockVerdict::ALL {
            let names: Vec<&str> =
                r.by.iter()
                    .filter(|(_, v)| *v == lv)
                    .map(|(n, _)| n.as_str())
                    .collect();
            if names.is_empty() {
                continue;
            }
            // Passes are the common case: counted, not listed, when there are many.
            if lv == LockVerdict::Pass && names.len() > 3 {
                parts.push(format!("pass: {} scenarios", names.len()));
            } else {
                parts.push(format!("{}: {}", lv.word(), names.join(", ")));
            }
        }
        let _ = write!(
            out,
            "\n  {:<11}  {:<width$}  {}",
            r.verdict.label(),
            r.id,
            brief_list(&parts.join("; "))
        );
        // What the lock says, beside the ones to act on.
        if matches!(r.verdict, LockVerdict::Fail | LockVerdict::NotReached)
            && let Some(text) = crate::locks::text(&r.id)
        {
            let _ = write!(
                out,
                "\n  {:<11}  {:<width$}  {}",
                "",
                "",
                crate::locks::brief(text, 150)
            );
        }
    }
    let count = |lv: LockVerdict| rows.iter().filter(|r| r.verdict == lv).count();
    let _ = write!(
        out,
        "\n  locks: {} pass, {} fail, {} not reached, {} n/a",
        count(LockVerdict::Pass),
        count(LockVerdict::Fail),
        count(LockVerdict::NotReached),
        count(LockVerdict::NotApplicable)
    );
    out
}

fn brief_list(text: &str) -> String {
    const MAX: usize = 160;
    if text.len() <= MAX {
        return text.to_owned();
    }
    let cut = workrail_spec::budget::floor_char_boundary(text, MAX);
    format!("{}…", &text[..cut])
}

/// The JSON report written by `--json`.
pub fn report_json(kind: &str, target: &str, profiles: &[String], verdicts: &[Verdict]) -> Value {
    let s = Summary::of(verdicts);
    json!({
        "suite": "workrail-conformance",
        "version": env!("CARGO_PKG_VERSION"),
        "locksVersion": crate::locks::version(),
        "causes": causes(verdicts).into_iter().map(|c| json!({
            "lock": c.lock,
            "expected": c.expected,
            "seen": c.seen.into_iter()
                .map(|(n, step)| json!({"name": n, "step": step}))
                .collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "kind": kind,
        "target": target,
        "profiles": profiles,
        "summary": {"passed": s.passed, "failed": s.failed, "skipped": s.skipped, "line": s.line()},
        "results": verdicts.iter().map(Verdict::to_json).collect::<Vec<_>>(),
        "locks": lock_rows(verdicts).into_iter().map(|r| json!({
            "text": crate::locks::text(&r.id),
            "id": r.id,
            "verdict": r.verdict.word(),
            "by": r.by.into_iter()
                .map(|(n, v)| json!({"name": n, "verdict": v.word()}))
                .collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// One root cause: failures that expected the same thing of the same locks, across scenarios
/// (decision D195). The suite's automatic checks (the error envelope, the token format, the
/// closed sets of the store) fail alike in every scenario they run in; one line says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub lock: Vec<String>,
    pub expected: String,
    /// `(scenario, step)` in run order.
    pub seen: Vec<(String, usize)>,
}

/// The failures of a run grouped by root cause, the widest first.
pub fn causes(verdicts: &[Verdict]) -> Vec<Cause> {
    let mut by: Vec<Cause> = Vec::new();
    for v in verdicts {
        for f in &v.failures {
            let mut lock = f.lock.clone();
            lock.sort();
            match by
                .iter_mut()
                .find(|c| c.lock == lock && c.expected == f.expected)
            {
                Some(c) => {
                    if !c.seen.iter().any(|(n, s)| n == &v.name && *s == f.step) {
                        c.seen.push((v.name.clone(), f.step));
                    }
                }
                None => by.push(Cause {
                    lock,
                    expected: f.expected.clone(),
                    seen: vec![(v.name.clone(), f.step)],
                }),
            }
        }
    }
    let scenarios = |c: &Cause| {
        let mut names: Vec<&str> = c.seen.iter().map(|(n, _)| n.as_str()).collect();
        names.dedup();
        names.len()
    };
    by.sort_by_key(|c| std::cmp::Reverse(scenarios(c)));
    by
}

/// The text of [`causes`]: one line per cause, with the scenarios (and steps) it explains.
pub fn causes_text(verdicts: &[Verdict]) -> Option<String> {
    let causes = causes(verdicts);
    if causes.is_empty() {
        return None;
    }
    let failures: usize = causes.iter().map(|c| c.seen.len()).sum();
    let mut out = format!(
        "Causes ({failures} failed expectations, {} causes):",
        causes.len()
    );
    for c in &causes {
        let seen: Vec<String> = c
            .seen
            .iter()
            .map(|(n, s)| format!("{n} step {s}"))
            .collect();
        let _ = write!(
            out,
            "\n  [{}] expected {}\n      in {}",
            c.lock.join(", "),
            crate::locks::brief(&c.expected, 140),
            brief_list(&seen.join(", "))
        );
    }
    Some(out)
}

/// What changed against a baseline report (an earlier `--json` of the same kind), lock by lock
/// and scenario by scenario (decision D195).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BaselineDiff {
    /// Locks that fail now and did not then.
    pub new_failures: Vec<String>,
    /// Locks that pass now and did not then.
    pub newly_passing: Vec<String>,
    /// Locks whose verdict changed otherwise: `(id, then, now)`.
    pub other_changes: Vec<(String, String, String)>,
    /// Scenarios that fail now and did not then, and that pass now and did not then.
    pub new_failing_scenarios: Vec<String>,
    pub newly_passing_scenarios: Vec<String>,
    /// The baseline was judged by another lock catalog.
    pub other_catalog: Option<String>,
}

impl BaselineDiff {
    /// Compares this run with `baseline` (a parsed `--json` report).
    pub fn of(verdicts: &[Verdict], baseline: &Value) -> Result<Self, String> {
        let then_locks: BTreeMap<&str, &str> = baseline["locks"]
            .as_array()
            .ok_or("the baseline has no `locks` array: give a report written by --json")?
            .iter()
            .filter_map(|r| Some((r["id"].as_str()?, r["verdict"].as_str()?)))
            .collect();
        let then_results: BTreeMap<&str, &str> = baseline["results"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| Some((r["name"].as_str()?, r["status"].as_str()?)))
            .collect();
        let mut diff = BaselineDiff {
            other_catalog: baseline["locksVersion"]
                .as_str()
                .filter(|v| *v != crate::locks::version())
                .map(str::to_owned),
            ..BaselineDiff::default()
        };
        for row in lock_rows(verdicts) {
            let now = row.verdict.word();
            let then = then_locks.get(row.id.as_str()).copied().unwrap_or("absent");
            if now == then {
                continue;
            }
            match now {
                "fail" => diff.new_failures.push(row.id),
                "pass" => diff.newly_passing.push(row.id),
                _ => diff
                    .other_changes
                    .push((row.id, then.to_owned(), now.to_owned())),
            }
        }
        for v in verdicts {
            let then = then_results
                .get(v.name.as_str())
                .copied()
                .unwrap_or("absent");
            let now = v.status.word().to_ascii_lowercase();
            match now.as_str() {
                "fail" if then != "fail" => diff.new_failing_scenarios.push(v.name.clone()),
                "pass" if then != "pass" => diff.newly_passing_scenarios.push(v.name.clone()),
                _ => {}
            }
        }
        Ok(diff)
    }

    /// The text section: nothing changed, or each change.
    pub fn text(&self, baseline: &str) -> String {
        let mut out = format!("Against the baseline {baseline}:");
        if let Some(other) = &self.other_catalog {
            let _ = write!(
                out,
                "\n  the baseline was judged by another lock catalog ({other})"
            );
        }
        let mut any = false;
        for (what, list) in [
            ("new lock failures", &self.new_failures),
            ("newly passing locks", &self.newly_passing),
            ("newly failing scenarios", &self.new_failing_scenarios),
            ("newly passing scenarios", &self.newly_passing_scenarios),
        ] {
            if !list.is_empty() {
                any = true;
                let _ = write!(out, "\n  {what}: {}", list.join(", "));
            }
        }
        if !self.other_changes.is_empty() {
            any = true;
            let changes: Vec<String> = self
                .other_changes
                .iter()
                .map(|(id, then, now)| format!("{id} {then} -> {now}"))
                .collect();
            let _ = write!(out, "\n  other lock changes: {}", changes.join(", "));
        }
        if !any {
            out.push_str("\n  no change");
        }
        out
    }

    pub fn to_json(&self) -> Value {
        json!({
            "newFailures": self.new_failures,
            "newlyPassing": self.newly_passing,
            "otherChanges": self.other_changes.iter()
                .map(|(id, then, now)| json!({"id": id, "then": then, "now": now}))
                .collect::<Vec<_>>(),
            "newlyFailingScenarios": self.new_failing_scenarios,
            "newlyPassingScenarios": self.newly_passing_scenarios,
            "otherCatalog": self.other_catalog,
        })
    }
}

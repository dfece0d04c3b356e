//! Verdicts, the console lines and the JSON report.

use std::fmt::Write as _;

use serde_json::{Value, json};

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

/// The outcome of one scenario or vector file.
#[derive(Debug, Clone)]
pub struct Verdict {
    pub name: String,
    pub profile: String,
    pub lock_ids: Vec<String>,
    pub status: Status,
    pub failures: Vec<Failure>,
    pub duration_ms: u128,
    /// Extra text for humans (e.g. the number of vector cases).
    pub note: Option<String>,
    /// The MCP transcript, kept for failures when asked for.
    pub transcript: Vec<String>,
}

impl Verdict {
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
        if verbose && self.status == Status::Fail && !self.transcript.is_empty() {
            out.push_str("\n      transcript:");
            for line in &self.transcript {
                let _ = write!(out, "\n        {}", crate::checks::brief(line));
            }
        }
        out
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

    /// The closing line: `N passed, N failed` plus `, N skipped` when some were skipped.
    pub fn line(&self) -> String {
        let mut line = format!("{} passed, {} failed", self.passed, self.failed);
        if self.skipped > 0 {
            let _ = write!(line, ", {} skipped", self.skipped);
        }
        line
    }
}

/// The JSON report written by `--json`.
pub fn report_json(kind: &str, target: &str, profiles: &[String], verdicts: &[Verdict]) -> Value {
    let s = Summary::of(verdicts);
    json!({
        "suite": "workrail-conformance",
        "version": env!("CARGO_PKG_VERSION"),
        "kind": kind,
        "target": target,
        "profiles": profiles,
        "summary": {"passed": s.passed, "failed": s.failed, "skipped": s.skipped, "line": s.line()},
        "results": verdicts.iter().map(Verdict::to_json).collect::<Vec<_>>(),
    })
}

//! `workrail-conformance vectors`: checks an implementation's pure rules against the golden
//! vectors in `fixtures/vectors/*.json` through the adapter protocol (one JSON request per line
//! on the adapter's stdin, one JSON answer per line on its stdout; see `conformance/README.md`).
//!
//! Answers are `{"result": ...}`, `{"rejected": "<class>"}` (the input must be refused),
//! `{"unsupported": "<reason>"}` (the adapter does not implement the op: the file is skipped
//! with that reason) or `{"error": "<text>"}` (a failure).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::checks::{brief, brief_json};
use crate::mcp::{Launch, Pipe};
use crate::report::{Failure, Status, Verdict};

/// An adapter's answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Result(Value),
    Rejected(String),
    Unsupported(String),
    Error(String),
}

/// The implementation under test, behind the adapter protocol.
#[derive(Debug)]
pub struct Adapter {
    pipe: Pipe,
    timeout: Duration,
}

impl Adapter {
    pub fn spawn(argv: Vec<String>, timeout: Duration) -> Result<Self, String> {
        let launch = Launch {
            argv,
            env: Vec::new(),
            cwd: None,
            stderr: None,
            timeout,
        };
        Ok(Self {
            pipe: Pipe::spawn(&launch)?,
            timeout,
        })
    }

    /// Sends one request and reads one answer.
    pub fn ask(&mut self, request: &Value) -> Reply {
        if let Err(e) = self.pipe.send(&request.to_string()) {
            return Reply::Error(e);
        }
        let line = match self.pipe.recv(Instant::now() + self.timeout) {
            Ok(l) => l,
            Err(e) => return Reply::Error(e),
        };
        let Ok(answer) = serde_json::from_str::<Value>(&line) else {
            return Reply::Error(format!("the answer is not JSON: {}", brief(&line)));
        };
        let text = |v: &Value| v.as_str().unwrap_or("").to_owned();
        match answer.as_object() {
            Some(o) if o.len() == 1 => {
                if let Some(v) = o.get("result") {
                    Reply::Result(v.clone())
                } else if let Some(v) = o.get("rejected") {
                    Reply::Rejected(text(v))
                } else if let Some(v) = o.get("unsupported") {
                    Reply::Unsupported(text(v))
                } else if let Some(v) = o.get("error") {
                    Reply::Error(text(v))
                } else {
                    Reply::Error(format!("unknown answer {}", brief(&line)))
                }
            }
            _ => Reply::Error(format!(
                "an answer has exactly one of result/rejected/unsupported/error: {}",
                brief(&line)
            )),
        }
    }
}

/// One vector file's run.
struct FileRun<'a> {
    adapter: &'a mut Adapter,
    lock_ids: Vec<String>,
    failures: Vec<Failure>,
    unsupported: Option<String>,
    cases: usize,
}

impl FileRun<'_> {
    fn fail(&mut self, case: &str, expected: impl Into<String>, got: impl Into<String>) {
        self.failures.push(Failure {
            step: self.cases,
            action: format!("case {case}"),
            lock: self.lock_ids.clone(),
            expected: expected.into(),
            got: got.into(),
        });
    }

    /// Asks and returns the result, recording rejections, unsupported ops and errors.
    fn result(&mut self, case: &str, request: Value) -> Option<Value> {
        match self.adapter.ask(&request) {
            Reply::Result(v) => Some(v),
            Reply::Unsupported(reason) => {
                self.unsupported.get_or_insert(reason);
                None
            }
            Reply::Rejected(class) => {
                self.fail(
                    case,
                    format!("a result for {}", brief_json(&request)),
                    format!("rejected: {class}"),
                );
                None
            }
            Reply::Error(e) => {
                self.fail(
                    case,
                    format!("a result for {}", brief_json(&request)),
                    format!("adapter error: {e}"),
                );
                None
            }
        }
    }

    /// Asks and expects a rejection (of `class` when given).
    fn rejection(&mut self, case: &str, request: Value, class: Option<&str>) {
        let expected = match class {
            Some(c) => format!("rejected: {c}"),
            None => "rejected".to_owned(),
        };
        match self.adapter.ask(&request) {
            Reply::Rejected(got) if class.is_none_or(|c| c == got) => {}
            Reply::Rejected(got) => self.fail(case, expected, format!("rejected: {got}")),
            Reply::Unsupported(reason) => {
                self.unsupported.get_or_insert(reason);
            }
            Reply::Result(v) => self.fail(case, expected, format!("accepted: {}", brief_json(&v))),
            Reply::Error(e) => self.fail(case, expected, format!("adapter error: {e}")),
        }
    }

    /// Compares `got[field]` with `want` for each field.
    fn fields(&mut self, case: &str, got: &Value, want: &[(&str, &Value)]) {
        for (field, expected) in want {
            let actual = got.get(*field).unwrap_or(&Value::Null);
            if actual != *expected {
                self.fail(
                    case,
                    format!("{field} = {}", brief_json(expected)),
                    brief_json(actual),
                );
            }
        }
    }
}

type Checker = fn(&mut FileRun<'_>, &Value);

/// Every vector file this suite knows, with its checker.
const CHECKERS: &[(&str, Checker)] = &[
    ("jcs.json", jcs),
    ("sha256.json", sha256),
    ("dedupe_keys.json", dedupe_keys),
    ("step_instance_keys.json", step_instance_keys),
    ("truncation.json", truncation),
    ("blocker_order.json", blocker_order),
    ("reason_mapping.json", reason_mapping),
    ("tokens.json", tokens),
    ("preferred_tip.json", preferred_tip),
    ("run_status.json", run_status),
    ("resume_ranking.json", resume_ranking),
];

/// Options of a vectors run.
#[derive(Debug, Clone)]
pub struct VectorConfig {
    pub dir: PathBuf,
    pub adapter: Vec<String>,
    pub only: Vec<String>,
    pub skip: Vec<(String, String)>,
    pub timeout: Duration,
}

/// Runs every selected vector file through one adapter process.
pub fn run(config: &VectorConfig, each: &mut dyn FnMut(&Verdict)) -> Result<Vec<Verdict>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(&config.dir)
        .map_err(|e| format!("cannot read {}: {e}", config.dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("no vector files in {}", config.dir.display()));
    }
    let mut adapter = Adapter::spawn(config.adapter.clone(), config.timeout)?;
    let mut out = Vec::new();
    for path in files {
        let verdict = run_file(&path, config, &mut adapter);
        if let Some(v) = verdict {
            each(&v);
            out.push(v);
        }
    }
    Ok(out)
}

fn run_file(path: &Path, config: &VectorConfig, adapter: &mut Adapter) -> Option<Verdict> {
    let started = Instant::now();
    let name = path.file_name()?.to_string_lossy().into_owned();
    let doc: Value = match std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(d) => d,
        Err(e) => {
            return Some(verdict(
                &name,
                Vec::new(),
                Status::Fail,
                vec![Failure {
                    step: 0,
                    action: "read".into(),
                    lock: Vec::new(),
                    expected: "a JSON vector file".into(),
                    got: e,
                }],
                started,
                None,
            ));
        }
    };
    let lock_ids: Vec<String> = doc["lockIds"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let selected = config.only.is_empty()
        || config
            .only
            .iter()
            .any(|o| *o == name || lock_ids.contains(o));
    if !selected {
        return None;
    }
    if let Some((_, reason)) = config
        .skip
        .iter()
        .find(|(s, _)| *s == name || lock_ids.contains(s))
    {
        return Some(verdict(
            &name,
            lock_ids,
            Status::Skip(reason.clone()),
            Vec::new(),
            started,
            None,
        ));
    }
    let Some((_, checker)) = CHECKERS.iter().find(|(f, _)| *f == name) else {
        return Some(verdict(
            &name,
            lock_ids,
            Status::Skip("no checker for this file in this version of the suite".into()),
            Vec::new(),
            started,
            None,
        ));
    };
    let mut run = FileRun {
        adapter,
        lock_ids: lock_ids.clone(),
        failures: Vec::new(),
        unsupported: None,
        cases: 0,
    };
    checker(&mut run, &doc);
    let status = if !run.failures.is_empty() {
        Status::Fail
    } else if let Some(reason) = run.unsupported.take() {
        Status::Skip(format!("the adapter does not answer this op: {reason}"))
    } else {
        Status::Pass
    };
    let note = Some(format!("{} cases", run.cases));
    let failures = std::mem::take(&mut run.failures);
    Some(verdict(&name, lock_ids, status, failures, started, note))
}

fn verdict(
    name: &str,
    lock_ids: Vec<String>,
    status: Status,
    failures: Vec<Failure>,
    started: Instant,
    note: Option<String>,
) -> Verdict {
    Verdict {
        name: name.to_owned(),
        profile: "vectors".into(),
        lock_ids,
        failures,
        not_reached: Vec::new(),
        skipped_steps: Vec::new(),
        not_applicable_steps: Vec::new(),
        not_applicable: Vec::new(),
        also_checked: Vec::new(),
        unjudged: Vec::new(),
        // A skipped file (the adapter does not answer its op) judged nothing.
        ran: !matches!(status, Status::Skip(_)),
        duration_ms: started.elapsed().as_millis(),
        note,
        transcript: Vec::new(),
        status,
    }
}

fn list<'a>(doc: &'a Value, key: &str) -> &'a [Value] {
    doc.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn name(case: &Value) -> String {
    case["name"].as_str().unwrap_or("?").to_owned()
}

fn jcs(run: &mut FileRun<'_>, doc: &Value) {
    for case in list(doc, "cases") {
        run.cases += 1;
        let n = name(case);
        if let Some(got) = run.result(&n, json!({"op": "jcs", "input": case["input"]})) {
            run.fields(
                &n,
                &got,
                &[
                    ("canonical", &case["canonical"]),
                    ("sha256", &case["sha256"]),
                ],
            );
        }
        // The canonical form is a fixed point.
        if let Some(got) = run.result(&n, json!({"op": "jcs", "input": case["canonical"]})) {
            run.fields(&n, &got, &[("canonical", &case["canonical"])]);
        }
    }
    for case in list(doc, "rejectCases") {
        run.cases += 1;
        run.rejection(
            &name(case),
            json!({"op": "jcs", "input": case["input"]}),
            None,
        );
    }
}

fn sha256(run: &mut FileRun<'_>, doc: &Value) {
    for case in list(doc, "cases") {
        run.cases += 1;
        let n = name(case);
        if let Some(got) = run.result(&n, json!({"op": "sha256", "utf8": case["utf8"]})) {
            run.fields(&n, &got, &[("sha256", &case["sha256"])]);
        }
    }
}

fn dedupe_keys(run: &mut FileRun<'_>, doc: &Value) {
    for case in list(doc, "cases") {
        run.cases += 1;
        let n = name(case);
        if let Some(got) = run.result(&n, json!({"op": "dedupe_key", "event": case["event"]})) {
            run.fields(&n, &got, &[("dedupeKey", &case["dedupeKey"])]);
        }
    }
    for case in list(doc, "patternCases") {
        run.cases += 1;
        let n = name(case);
        if let Some(got) = run.result(
            &n,
            json!({"op": "dedupe_key_valid", "value": case["value"]}),
        ) {
            run.fields(&n, &got, &[("valid", &case["valid"])]);
        }
    }
}

fn step_instance_keys(run: &mut FileRun<'_>, doc: &Value) {
    for case in list(doc, "cases") {
        run.cases += 1;
        let n = name(case);
        let request = json!({"op": "step_instance_key", "key": case["key"]});
        if case["valid"] != Value::Bool(true) {
            run.rejection(&n, request, None);
            continue;
        }
        if let Some(got) = run.result(&n, request) {
            run.fields(
                &n,
                &got,
                &[("loopPath", &case["loopPath"]), ("stepId", &case["stepId"])],
            );
        }
        let format = json!({"op": "format_step_instance_key", "loopPath": case["loopPath"], "stepId": case["stepId"]});
        if let Some(got) = run.result(&n, format) {
            run.fields(&n, &got, &[("key", &case["key"])]);
        }
    }
}

fn truncation(run: &mut FileRun<'_>, doc: &Value) {
    for case in list(doc, "cases") {
        run.cases += 1;
        let n = name(case);
        let request = json!({"op": "truncate", "text": case["text"], "maxBytes": case["maxBytes"]});
        if let Some(got) = run.result(&n, request) {
            run.fields(
                &n,
                &got,
                &[
                    ("text", &case["expected"]),
                    ("truncated", &case["truncated"]),
                ],
            );
        }
    }
}

fn blocker_order(run: &mut FileRun<'_>, doc: &Value) {
    for case in list(doc, "cases") {
        run.cases += 1;
        let n = name(case);
        if let Some(got) = run.result(
            &n,
            json!({"op": "sort_blockers", "blockers": case["input"]}),
        ) {
            run.fields(&n, &got, &[("blockers", &case["expected"])]);
        }
        // The order never depends on the input order.
        let mut reversed = list(case, "input").to_vec();
        reversed.reverse();
        if let Some(got) = run.result(&n, json!({"op": "sort_blockers", "blockers": reversed})) {
            run.fields(&n, &got, &[("blockers", &case["expected"])]);
        }
    }
    for case in list(doc, "budgetCases") {
        run.cases += 1;
        let n = name(case);
        let class = case["error"].as_str().map(str::to_owned);
        run.rejection(
            &n,
            json!({"op": "sort_blockers", "blockers": case["blockers"]}),
            class.as_deref(),
        );
    }
}

fn reason_mapping(run: &mut FileRun<'_>, doc: &Value) {
    for case in list(doc, "cases") {
        run.cases += 1;
        let n = name(case);
        for d in list(case, "dispositions") {
            let required: Vec<bool> = match d.get("subjectRequired").and_then(Value::as_bool) {
                Some(r) => vec![r],
                None => vec![true, false],
            };
            for req in required {
                let request = json!({
                    "op": "reason_mapping",
                    "reasonCode": case["reasonCode"],
                    "autonomy": d["autonomy"],
                    "subjectRequired": req,
                });
                let label = format!(
                    "{n} ({}, subjectRequired={req})",
                    d["autonomy"].as_str().unwrap_or("?")
                );
                if let Some(got) = run.result(&label, request) {
                    run.fields(
                        &label,
                        &got,
                        &[
                            ("blockerCode", &case["blockerCode"]),
                            ("gapReason", &case["gapReason"]),
                            ("blocks", &d["blocks"]),
                            ("gapSeverity", &d["gapSeverity"]),
                        ],
                    );
                }
            }
        }
    }
}

fn tokens(run: &mut FileRun<'_>, doc: &Value) {
    for case in list(doc, "cases") {
        run.cases += 1;
        let n = name(case);
        let encode = json!({"op": "token_encode", "payload": case["payload"], "hmacKeyHex": doc["hmacKeyHex"]});
        if let Some(got) = run.result(&n, encode) {
            run.fields(
                &n,
                &got,
                &[
                    ("canonical", &case["canonical"]),
                    ("payloadSegment", &case["payloadSegment"]),
                    ("signature", &case["signature"]),
                    ("token", &case["token"]),
                ],
            );
        }
        if let Some(got) = run.result(&n, json!({"op": "token_parse", "token": case["token"]})) {
            run.fields(&n, &got, &[("payload", &case["payload"])]);
        }
    }
    for case in list(doc, "invalidTokens") {
        run.cases += 1;
        let n = name(case);
        let code = case["errorCode"].as_str().map(str::to_owned);
        run.rejection(
            &n,
            json!({"op": "token_parse", "token": case["token"]}),
            code.as_deref(),
        );
    }
}

fn preferred_tip(run: &mut FileRun<'_>, doc: &Value) {
    for case in list(doc, "cases") {
        run.cases += 1;
        let n = name(case);
        let request =
            json!({"op": "preferred_tip", "events": case["events"], "runId": case["runId"]});
        if let Some(got) = run.result(&n, request) {
            run.fields(
                &n,
                &got,
                &[
                    ("nodeId", &case["expected"]["nodeId"]),
                    ("lastActivity", &case["expected"]["lastActivity"]),
                    ("leaves", &case["leaves"]),
                ],
            );
        }
    }
}

fn run_status(run: &mut FileRun<'_>, doc: &Value) {
    for case in list(doc, "cases") {
        run.cases += 1;
        let n = name(case);
        let request = json!({
            "op": "run_status",
            "events": case["events"],
            "runId": case["runId"],
            "completeSnapshots": case["completeSnapshots"],
            "sessionBaseline": case["sessionBaseline"],
            "globalDefaults": case["globalDefaults"],
        });
        if let Some(got) = run.result(&n, request) {
            run.fields(&n, &got, &[("status", &case["expected"])]);
        }
    }
}

fn resume_ranking(run: &mut FileRun<'_>, doc: &Value) {
    for case in list(doc, "cases") {
        run.cases += 1;
        let n = name(case);
        let request = json!({
            "op": "resume_ranking",
            "sessions": case["sessions"],
            "workflowNames": case["workflowNames"],
            "query": case["query"],
        });
        if let Some(got) = run.result(&n, request) {
            run.fields(&n, &got, &[("candidates", &case["expected"])]);
        }
    }
}

//! Same answers as the reference (issue 31, item 7): every script of `fixtures/language/scripts/`
//! runs against the built `workrail mcp` through the driver that recorded the reference's
//! answers (`harness/reference/langref.py`, Python 3 standard library), and the sequence it
//! records (per call: the pending step, the outcome, a blocked call's blocker codes, pointer kinds
//! and the authored messages it quotes, the markers its prompts render) must equal the committed
//! `*.expected.json`. A script whose difference a decision explains is listed, with that
//! decision, in `fixtures/language/allowed-differences.json`; an entry whose script no longer
//! differs must be removed. The fixtures themselves are checked to cover every construct and
//! condition operator of the language, so the yardstick cannot quietly shrink.
//!
//! Guards against: a construct or operator of the workflow language that we run differently from
//! the reference (a condition's lenient rule, a loop's count, which step comes next, a validation
//! rule that does not block), silently.
//!
//! Without `python3` the comparison says why and passes, except under `CI`, where it fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use workrail_harness::system::workrail_binary;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn fixtures() -> PathBuf {
    repo().join("fixtures/language")
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Script names (`<workflow>.<name>`) to their files.
fn scripts() -> BTreeMap<String, PathBuf> {
    let dir = fixtures().join("scripts");
    std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".script.json")
                .map(|n| (n.to_owned(), e.path()))
        })
        .collect()
}

fn workflows() -> BTreeMap<String, Value> {
    std::fs::read_dir(fixtures().join("workflows"))
        .unwrap()
        .flatten()
        .map(|e| {
            let v = read_json(&e.path());
            (v["id"].as_str().unwrap().to_owned(), v)
        })
        .collect()
}

/// The allow-list: script name to the decision id its entry names.
fn allowed() -> BTreeMap<String, String> {
    let list = read_json(&fixtures().join("allowed-differences.json"));
    list["allowed"]
        .as_array()
        .expect("allowed-differences.json: `allowed` is a list")
        .iter()
        .map(|a| {
            let script = a["script"].as_str().expect("an entry names its `script`");
            let decision = a["decision"]
                .as_str()
                .expect("an entry names its `decision`");
            let why = a["why"].as_str().unwrap_or_default();
            assert!(
                !why.trim().is_empty(),
                "allowed-differences.json: the entry for {script} must say `why` it differs"
            );
            (script.to_owned(), decision.to_owned())
        })
        .collect()
}

fn python() -> Option<PathBuf> {
    let found = Command::new("python3").arg("--version").output();
    match found {
        Ok(out) if out.status.success() => Some(PathBuf::from("python3")),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI is set but python3 is not installed: the language comparison needs it"
            );
            eprintln!(
                "language_reference: python3 not found; the comparison with the reference is skipped (install python3 to run it)"
            );
            None
        }
    }
}

/// One readable line per position where the sequences differ.
fn diff(expected: &[Value], actual: &[Value]) -> Vec<String> {
    let show = |v: Option<&Value>| v.map_or("(nothing)".to_owned(), Value::to_string);
    (0..expected.len().max(actual.len()))
        .filter(|&i| expected.get(i) != actual.get(i))
        .flat_map(|i| {
            [
                format!("    - expected {}", show(expected.get(i))),
                format!("    + got      {}", show(actual.get(i))),
            ]
        })
        .collect()
}

/// decision: D150
#[test]
fn every_script_answers_as_the_reference_did() {
    let Some(python) = python() else { return };
    let binary = workrail_binary();
    let out = tempfile::tempdir().unwrap();
    let server = format!("'{}' mcp", binary.display());
    let run = Command::new(python)
        .arg(repo().join("harness/reference/langref.py"))
        .args(["run", "--jobs", "2", "--server", &server, "--out"])
        .arg(out.path())
        .output()
        .expect("python3 runs the driver");
    let report = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "the driver could not finish every script against {server}:\n{report}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );

    let allowed = allowed();
    let mut differing = Vec::new();
    let mut still_allowed = BTreeSet::new();
    for (name, path) in scripts() {
        let expected_path = path.with_file_name(format!("{name}.expected.json"));
        let expected = read_json(&expected_path);
        let actual = read_json(&out.path().join(format!("{name}.expected.json")));
        let lines = diff(
            expected["steps"].as_array().unwrap(),
            actual["steps"].as_array().unwrap(),
        );
        match (lines.is_empty(), allowed.get(&name)) {
            (true, None) => {}
            (true, Some(decision)) => differing.push(format!(
                "{name} is allowed to differ ({decision}) but now answers as the reference: remove its entry from allowed-differences.json"
            )),
            (false, Some(_)) => {
                still_allowed.insert(name);
            }
            (false, None) => {
                // What our server said when it refused a call (never compared).
                let said = std::fs::read_to_string(out.path().join(format!("{name}.errors.txt")))
                    .unwrap_or_default()
                    .lines()
                    .map(|l| format!("    ! {l}"))
                    .collect::<Vec<_>>();
                differing.push(format!("{name}\n{}", [lines, said].concat().join("\n")));
            }
        }
    }
    eprintln!(
        "language_reference: {} scripts, {} differ, {} allowed",
        scripts().len(),
        differing.len(),
        still_allowed.len()
    );
    assert!(
        differing.is_empty(),
        "{} of {} scripts do not answer as the reference did (expected = the reference's committed answer; \
         rerun one with `python3 harness/reference/langref.py check --server '{} mcp' <script>`):\n{}",
        differing.len(),
        scripts().len(),
        binary.display(),
        differing.join("\n")
    );
}

/// decision: D150
#[test]
fn every_script_has_the_references_answer_and_every_allowance_a_decision() {
    let scripts = scripts();
    let workflows = workflows();
    for (name, path) in &scripts {
        let script = read_json(path);
        let workflow = script["workflow"]
            .as_str()
            .expect("a script names its workflow");
        assert!(
            workflows.contains_key(workflow),
            "{name}: no workflow {workflow} in fixtures/language/workflows"
        );
        assert!(
            name.starts_with(&format!("{workflow}.")),
            "{name}: a script is named <workflow>.<name>"
        );
        let expected = read_json(&path.with_file_name(format!("{name}.expected.json")));
        assert_eq!(
            expected["script"],
            Value::from(name.as_str()),
            "{name}: expected file names another script"
        );
        assert_eq!(
            expected["workflow"],
            Value::from(workflow),
            "{name}: expected file names another workflow"
        );
        let steps = expected["steps"].as_array().expect("steps");
        assert_eq!(
            steps.first().map(|s| &s["call"]),
            Some(&Value::from("start")),
            "{name}: starts with the start"
        );
    }
    let expected_files: BTreeSet<String> = std::fs::read_dir(fixtures().join("scripts"))
        .unwrap()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_string_lossy()
                .strip_suffix(".expected.json")
                .map(str::to_owned)
        })
        .collect();
    let script_names: BTreeSet<String> = scripts.keys().cloned().collect();
    assert_eq!(
        expected_files, script_names,
        "every expected file belongs to a script"
    );

    let locks = std::fs::read_to_string(repo().join("spec/LOCKS.md")).unwrap();
    for (script, decision) in allowed() {
        assert!(
            scripts.contains_key(&script),
            "allowed-differences.json names no script {script}"
        );
        assert!(
            locks.contains(&format!("\n| {decision} |")),
            "allowed-differences.json: {script} cites {decision}, which is not in the Decisions table of spec/LOCKS.md"
        );
    }
}

/// What the fixture workflows use, collected by one walk over their JSON.
#[derive(Default)]
struct Coverage {
    /// Keys met inside conditions (runConditions, loop conditions, fragment `when`s,
    /// confirmations, validation rule conditions), walked into `and`/`or`/`not`.
    operators: BTreeSet<String>,
    /// Loop kinds (`for-number`, `for-variable`, ...) and loop fields used.
    loops: BTreeSet<String>,
    /// Validation rule kinds.
    rules: BTreeSet<String>,
    /// `and`/`or`/`not` at the top of a `validationCriteria`.
    compositions: BTreeSet<String>,
    /// The `requireConfirmation` forms.
    confirmations: BTreeSet<&'static str>,
    /// Other constructs, by name.
    constructs: BTreeSet<&'static str>,
}

impl Coverage {
    fn conditions(&mut self, value: &Value, in_condition: bool) {
        match value {
            Value::Object(map) => {
                for (key, v) in map {
                    if in_condition {
                        self.operators.insert(key.clone());
                    }
                    let opens = matches!(
                        key.as_str(),
                        "runCondition" | "condition" | "when" | "requireConfirmation"
                    );
                    let nested = in_condition && matches!(key.as_str(), "and" | "or" | "not");
                    self.conditions(v, opens || nested);
                }
            }
            Value::Array(items) => items.iter().for_each(|i| self.conditions(i, in_condition)),
            _ => {}
        }
    }

    fn constructs(&mut self, value: &Value) {
        match value {
            Value::Object(map) => {
                if let Some(l) = map.get("loop") {
                    self.a_loop(map, l);
                }
                let kind = map.get("type").and_then(Value::as_str);
                if let Some(rule) = kind.filter(|_| map.contains_key("message")) {
                    self.rules.insert(rule.to_owned());
                    if map.contains_key("condition") {
                        self.constructs.insert("a validation rule with a condition");
                    }
                }
                if let Some(c) = map.get("validationCriteria") {
                    for k in ["and", "or", "not"]
                        .into_iter()
                        .filter(|k| c.get(k).is_some())
                    {
                        self.compositions.insert(k.to_owned());
                    }
                }
                if let Some(form) = map.get("requireConfirmation").and_then(confirmation_form) {
                    self.confirmations.insert(form);
                }
                if map.contains_key("assessmentConsequences") {
                    self.constructs.insert("assessments with a consequence");
                }
                if map.contains_key("promptFragments") {
                    self.constructs.insert("promptFragments");
                }
                if kind == Some("parallel") {
                    self.constructs.insert("a parallel step");
                }
                map.values().for_each(|v| self.constructs(v));
            }
            Value::Array(items) => items.iter().for_each(|v| self.constructs(v)),
            _ => {}
        }
    }

    fn a_loop(&mut self, step: &serde_json::Map<String, Value>, l: &Value) {
        let kind = l["type"].as_str().unwrap_or_default();
        let count = match &l["count"] {
            Value::Number(_) => "-number",
            Value::String(_) => "-variable",
            _ => "",
        };
        self.loops.insert(format!("{kind}{count}"));
        for field in ["itemVar", "indexVar", "iterationVar", "conditionSource"] {
            if l.get(field).is_some() {
                self.loops.insert(field.to_owned());
            }
        }
        if step.get("body").is_some_and(Value::is_string) {
            self.constructs.insert("body as a step id");
        }
        if step.get("runCondition").is_some() {
            self.constructs.insert("runCondition on a loop");
        }
    }
}

fn confirmation_form(value: &Value) -> Option<&'static str> {
    match value {
        Value::Bool(_) => Some("boolean"),
        Value::Object(o) if o.contains_key("kind") && o.contains_key("condition") => {
            Some("kind and condition")
        }
        Value::Object(o) if o.contains_key("kind") => Some("kind"),
        Value::Object(_) => Some("condition"),
        _ => None,
    }
}

/// decision: D150
#[test]
fn the_fixtures_cover_every_construct_and_operator() {
    let workflows = workflows();
    let mut seen = Coverage::default();
    for w in workflows.values() {
        seen.conditions(w, false);
        seen.constructs(w);
    }
    let wanted: [(&str, &BTreeSet<String>, &[&str]); 4] = [
        (
            "condition operator",
            &seen.operators,
            &[
                "var",
                "equals",
                "not_equals",
                "gt",
                "gte",
                "lt",
                "lte",
                "in",
                "contains",
                "startsWith",
                "endsWith",
                "matches",
                "and",
                "or",
                "not",
            ],
        ),
        (
            "loop kind or field",
            &seen.loops,
            &[
                "while",
                "until",
                "for-number",
                "for-variable",
                "forEach",
                "itemVar",
                "indexVar",
                "iterationVar",
                "conditionSource",
            ],
        ),
        (
            "validation rule kind",
            &seen.rules,
            &["contains", "regex", "length", "schema"],
        ),
        (
            "validationCriteria composition",
            &seen.compositions,
            &["and", "or", "not"],
        ),
    ];
    for (what, found, names) in wanted {
        for name in names {
            assert!(found.contains(*name), "no fixture uses the {what} `{name}`");
        }
    }
    for form in ["boolean", "condition", "kind", "kind and condition"] {
        assert!(
            seen.confirmations.contains(form),
            "no fixture requireConfirmation in the {form} form"
        );
    }
    for construct in [
        "body as a step id",
        "runCondition on a loop",
        "a validation rule with a condition",
        "assessments with a consequence",
        "promptFragments",
        "a parallel step",
    ] {
        assert!(
            seen.constructs.contains(construct),
            "no fixture has {construct}"
        );
    }
    let text = serde_json::to_string(&workflows).unwrap();
    assert!(
        text.contains("{{"),
        "no fixture prompt has a {{key}} marker"
    );
    assert!(
        workflows.contains_key("lang-loop-max"),
        "the fixture that reaches maxIterations is gone"
    );
    let used: BTreeSet<String> = scripts()
        .values()
        .map(|p| read_json(p)["workflow"].as_str().unwrap().to_owned())
        .collect();
    for id in workflows.keys() {
        assert!(used.contains(id), "workflow {id} has no script");
    }
}

//! Judging an acknowledgement against the step's workflow-language requirements (decision
//! D139): its `validationCriteria` over the notes, and its assessments (`assessmentRefs`) with
//! their consequences (`assessmentConsequences`). Each failure is a finding of the one reason
//! model (decision D143 maps them), so it blocks in blocking modes and is a gap in never-stop.
//!
//! The criteria are checked as the language checks them: against `output.notesMarkdown` exactly
//! as sent; `contains` is case-sensitive; `regex` takes the language's flags (`i`, `m`, `s`; `g`
//! and `u` change nothing for one test; `y` anchors at the start); `length` counts UTF-16 code
//! units; `schema` parses the whole notes as JSON (a JSON string holding an object or array is
//! decoded once more when the schema wants one). A rule whose `condition` is false passes. A step
//! with an output contract or assessments is judged by those, not by its criteria, as in the
//! language.

use serde_json::{Map, Value};
use workrail_spec::closed::Autonomy;
use workrail_spec::compiled::{
    AssessmentDefinition, CompiledStep, CompiledWorkflowSnapshotV1, Condition, ValidationCriterion,
};
use workrail_spec::snapshot::LoopFrame;
use workrail_spec::tools::OutputInput;

use super::findings;
use super::outcome::{AssessmentFollowup, Finding};
use super::walk::{loop_overlay, values_of};

/// The most validation issues reported as separate blockers; the rest join the last one.
const MAX_VALIDATION_FINDINGS: usize = 6;

/// The artifact kind of an assessment.
pub const ASSESSMENT_KIND: &str = "wr.assessment";

/// Where rule conditions are evaluated: the context plus the pending step's loop variables.
pub(crate) struct Scope<'a> {
    pub compiled: &'a CompiledWorkflowSnapshotV1,
    pub frames: &'a [LoopFrame],
    pub context: &'a Map<String, Value>,
}

impl Scope<'_> {
    fn holds(&self, condition: &Condition, overlay: &Map<String, Value>) -> bool {
        condition.evaluate(&values_of(overlay, self.context, condition.reads()))
    }
}

/// A regular expression of a `regex` rule with the language's flags (`gimsuy`, each once).
pub fn regex(pattern: &str, flags: Option<&str>) -> Result<regex::Regex, String> {
    let flags = flags.unwrap_or_default();
    let mut seen = std::collections::BTreeSet::new();
    for flag in flags.chars() {
        if !"gimsuy".contains(flag) {
            return Err(format!("unknown flag `{flag}`"));
        }
        if !seen.insert(flag) {
            return Err(format!("flag `{flag}` is given twice"));
        }
    }
    // `y` (sticky) matches only at the start of a fresh test.
    let source = if seen.contains(&'y') {
        format!(r"\A(?:{pattern})")
    } else {
        pattern.to_owned()
    };
    regex::RegexBuilder::new(&source)
        .case_insensitive(seen.contains(&'i'))
        .multi_line(seen.contains(&'m'))
        .dot_matches_new_line(seen.contains(&'s'))
        .build()
        .map_err(|e| e.to_string())
}

/// Every finding of the step's language requirements for this acknowledgement.
pub(crate) fn judge(
    compiled: &CompiledWorkflowSnapshotV1,
    step: &CompiledStep,
    output: &OutputInput,
    scope: &Scope<'_>,
    autonomy: Autonomy,
) -> Result<Vec<Finding>, String> {
    let lang = &step.language;
    let mut out = Vec::new();
    if !lang.assessment_refs.is_empty() {
        out.extend(assessments(compiled, step, output, autonomy)?);
    }
    let governed = step
        .output
        .as_ref()
        .is_some_and(|o| o.contract_ref.is_some())
        || !lang.assessment_refs.is_empty();
    if let (Some(criterion), false) = (&lang.validation, governed) {
        let notes = output.notes_markdown.as_deref().unwrap_or_default();
        if notes.is_empty() {
            out.push(findings::validation(&step.step_id, None, autonomy));
        } else {
            let overlay = loop_overlay(scope.compiled, scope.context, scope.frames)
                .map_err(|e| e.to_string())?;
            let mut issues = Vec::new();
            check(criterion, notes, scope, &overlay, &mut issues)?;
            if issues.len() > MAX_VALIDATION_FINDINGS {
                let rest = issues.split_off(MAX_VALIDATION_FINDINGS - 1);
                issues.push(format!(
                    "{} more rule(s) failed: {}",
                    rest.len(),
                    rest.join(" | ")
                ));
            }
            out.extend(
                issues
                    .iter()
                    .map(|issue| findings::validation(&step.step_id, Some(issue), autonomy)),
            );
        }
    }
    Ok(out)
}

/// A failed rule in words: the author's message, then the rule itself, which the message may
/// only hint at ("a line 'version: vN.N'" for a pattern with its flags).
fn issue(message: &Option<String>, rule: String) -> String {
    match message {
        Some(message) => format!("{message} (the rule: {rule})"),
        None => rule,
    }
}

/// Whether `criterion` holds for `notes`; the issues of what failed are appended.
fn check(
    criterion: &ValidationCriterion,
    notes: &str,
    scope: &Scope<'_>,
    overlay: &Map<String, Value>,
    issues: &mut Vec<String>,
) -> Result<bool, String> {
    use ValidationCriterion as V;
    let skipped =
        |when: &Option<Condition>| when.as_ref().is_some_and(|c| !scope.holds(c, overlay));
    let leaf = |ok: bool, message: &Option<String>, default: String, issues: &mut Vec<String>| {
        if !ok {
            issues.push(issue(message, default));
        }
        Ok(ok)
    };
    match criterion {
        V::Contains {
            value,
            message,
            when,
        } => {
            if skipped(when) {
                return Ok(true);
            }
            leaf(
                notes.contains(value.as_str()),
                message,
                format!("the notes must contain \"{value}\" (exact case)."),
                issues,
            )
        }
        V::Regex {
            pattern,
            flags,
            message,
            when,
        } => {
            if skipped(when) {
                return Ok(true);
            }
            let re = regex(pattern, flags.as_deref())?;
            leaf(
                re.is_match(notes),
                message,
                format!(
                    "the notes must match /{pattern}/{}.",
                    flags.as_deref().unwrap_or_default()
                ),
                issues,
            )
        }
        V::Length {
            min,
            max,
            message,
            when,
        } => {
            if skipped(when) {
                return Ok(true);
            }
            let len = notes.encode_utf16().count() as u64;
            let mut ok = true;
            if let Some(min) = min
                && len < *min
            {
                ok = false;
                issues.push(issue(
                    message,
                    format!(
                        "the notes are {len} characters long, shorter than the {min} required."
                    ),
                ));
            }
            if let Some(max) = max
                && len > *max
            {
                ok = false;
                issues.push(issue(
                    message,
                    format!("the notes are {len} characters long, longer than the {max} allowed."),
                ));
            }
            Ok(ok)
        }
        V::Schema {
            schema,
            message,
            when,
        } => {
            if skipped(when) {
                return Ok(true);
            }
            let verdict = match decode_for_schema(notes, schema) {
                None => Err(
                    "the notes must be JSON for this rule, and they do not parse as JSON."
                        .to_owned(),
                ),
                Some(value) => {
                    let validator = super::contract::validator(schema)?;
                    match validator.iter_errors(&value).next() {
                        None => Ok(()),
                        Some(e) => Err(format!(
                            "the notes' JSON does not satisfy the rule's schema at '{}': {e}",
                            e.instance_path().as_str()
                        )),
                    }
                }
            };
            match verdict {
                Ok(()) => Ok(true),
                Err(default) => leaf(false, message, default, issues),
            }
        }
        V::All { all } => {
            let mut ok = true;
            for c in all {
                ok &= check(c, notes, scope, overlay, issues)?;
            }
            Ok(ok)
        }
        V::Any { any } => {
            let mut failed = Vec::new();
            for c in any {
                if check(c, notes, scope, overlay, &mut failed)? {
                    return Ok(true);
                }
            }
            issues.push(format!("none of these held: {}", failed.join(" | ")));
            Ok(false)
        }
        V::Not { criterion } => {
            let mut ignored = Vec::new();
            if check(criterion, notes, scope, overlay, &mut ignored)? {
                issues.push(format!("this must not hold: {}", describe(criterion)));
                Ok(false)
            } else {
                Ok(true)
            }
        }
    }
}

/// A criterion in words, for a prompt's requirement list and a `not` failure.
pub fn describe(criterion: &ValidationCriterion) -> String {
    use ValidationCriterion as V;
    let when = |w: &Option<Condition>| {
        w.as_ref()
            .map(|c| format!(" (when {})", c.describe()))
            .unwrap_or_default()
    };
    match criterion {
        V::Contains { value, when: w, .. } => format!("the notes contain \"{value}\"{}", when(w)),
        V::Regex {
            pattern,
            flags,
            when: w,
            ..
        } => format!(
            "the notes match /{pattern}/{}{}",
            flags.as_deref().unwrap_or_default(),
            when(w)
        ),
        V::Length {
            min, max, when: w, ..
        } => {
            let range = match (min, max) {
                (Some(a), Some(b)) => format!("{a} to {b} characters"),
                (Some(a), None) => format!("at least {a} characters"),
                (None, Some(b)) => format!("at most {b} characters"),
                (None, None) => "any length".to_owned(),
            };
            format!("the notes are {range} long{}", when(w))
        }
        V::Schema { when: w, .. } => {
            format!("the notes are JSON satisfying the rule's schema{}", when(w))
        }
        V::All { all } if all.is_empty() => "the notes are present".to_owned(),
        V::All { all } => all.iter().map(describe).collect::<Vec<_>>().join(", and "),
        V::Any { any } => format!(
            "one of: {}",
            any.iter().map(describe).collect::<Vec<_>>().join("; or ")
        ),
        V::Not { criterion } => format!("not: {}", describe(criterion)),
    }
}

/// Whether a schema wants an object or an array (its `type`, `properties`, `required`, or a
/// branch of `oneOf`/`anyOf`/`allOf` that does).
fn wants_structure(schema: &Value) -> bool {
    let Some(s) = schema.as_object() else {
        return false;
    };
    let typed = |t: &Value| matches!(t.as_str(), Some("object" | "array"));
    match s.get("type") {
        Some(Value::Array(types)) if types.iter().any(typed) => return true,
        Some(t) if typed(t) => return true,
        _ => {}
    }
    if s.get("properties").is_some_and(Value::is_object)
        || s.get("required")
            .and_then(Value::as_array)
            .is_some_and(|r| !r.is_empty())
    {
        return true;
    }
    ["oneOf", "anyOf", "allOf"].iter().any(|k| {
        s.get(*k)
            .and_then(Value::as_array)
            .is_some_and(|branches| branches.iter().any(wants_structure))
    })
}

/// The notes as JSON for a `schema` rule; a JSON string that itself holds an object or array is
/// decoded once more when the schema wants one.
fn decode_for_schema(notes: &str, schema: &Value) -> Option<Value> {
    let parsed: Value = serde_json::from_str(notes).ok()?;
    if let Value::String(inner) = &parsed
        && wants_structure(schema)
    {
        let trimmed = inner.trim();
        if (trimmed.starts_with('{') || trimmed.starts_with('['))
            && let Ok(value @ (Value::Object(_) | Value::Array(_))) =
                serde_json::from_str::<Value>(trimmed)
        {
            return Some(value);
        }
    }
    Some(parsed)
}

/// A recorded assessment: its definition and the canonical level of each rated dimension, in
/// the definition's order.
struct Recorded<'d> {
    definition: &'d AssessmentDefinition,
    levels: Vec<(&'d str, &'d str)>,
}

/// A valid example artifact for `definition`.
pub fn assessment_example(definition: &AssessmentDefinition) -> Value {
    let dimensions: Map<String, Value> = definition
        .dimensions
        .iter()
        .map(|d| {
            (
                d.dimension_id.clone(),
                Value::from(d.levels.first().cloned().unwrap_or_default()),
            )
        })
        .collect();
    serde_json::json!({
        "kind": ASSESSMENT_KIND,
        "assessmentId": definition.assessment_id,
        "dimensions": dimensions,
    })
}

fn fix_for(definitions: &[&AssessmentDefinition]) -> String {
    let examples: Vec<String> = definitions
        .iter()
        .map(|d| {
            workrail_spec::jcs::to_canonical_string(&assessment_example(d)).unwrap_or_default()
        })
        .collect();
    format!(
        "Acknowledge again with one `wr.assessment` artifact per assessment in output.artifacts, rating every required dimension with one of its levels, e.g. {}",
        examples.join(" and ")
    )
}

/// The shape problems of a `wr.assessment` artifact (the language's artifact shape).
fn shape_issues(artifact: &Map<String, Value>) -> Vec<String> {
    let mut issues = Vec::new();
    for key in artifact.keys() {
        if !matches!(
            key.as_str(),
            "kind" | "assessmentId" | "dimensions" | "summary"
        ) {
            issues.push(format!("unknown field `{key}`."));
        }
    }
    match artifact.get("assessmentId") {
        None => {}
        Some(Value::String(s)) if !s.is_empty() && s.chars().count() <= 64 => {}
        Some(_) => issues.push("`assessmentId` must be a string of 1 to 64 characters.".to_owned()),
    }
    match artifact.get("summary") {
        None => {}
        Some(Value::String(s)) if s.chars().count() <= 1024 => {}
        Some(_) => issues.push("`summary` must be a string of at most 1024 characters.".to_owned()),
    }
    match artifact.get("dimensions") {
        Some(Value::Object(dims)) if !dims.is_empty() => {
            for (id, value) in dims {
                let ok = match value {
                    Value::String(s) => !s.is_empty(),
                    Value::Object(o) => {
                        o.keys().all(|k| k == "level" || k == "rationale")
                            && o.get("level")
                                .and_then(Value::as_str)
                                .is_some_and(|l| !l.is_empty())
                            && o.get("rationale").is_none_or(|r| {
                                r.as_str()
                                    .is_some_and(|r| !r.is_empty() && r.chars().count() <= 512)
                            })
                    }
                    _ => false,
                };
                if !ok {
                    issues.push(format!(
                        "dimension `{id}` must be a level string or `{{level, rationale?}}`."
                    ));
                }
            }
        }
        _ => {
            issues.push("`dimensions` must be a non-empty object of dimension ratings.".to_owned())
        }
    }
    issues
}

/// The level submitted for a dimension (a string, or `{level}`).
fn submitted_level(value: &Value) -> Option<&str> {
    match value {
        Value::String(s) => Some(s),
        Value::Object(o) => o.get("level").and_then(Value::as_str),
        _ => None,
    }
}

/// One assessment judged against its definition: the recorded levels, or the issues.
fn judge_one<'d>(
    definition: &'d AssessmentDefinition,
    artifact: &Map<String, Value>,
) -> Result<Recorded<'d>, Vec<String>> {
    let mut issues = shape_issues(artifact);
    if !issues.is_empty() {
        return Err(issues);
    }
    if let Some(target) = artifact.get("assessmentId").and_then(Value::as_str)
        && target != definition.assessment_id
    {
        return Err(vec![format!(
            "the artifact names assessment '{target}', but this step expects '{}'.",
            definition.assessment_id
        )]);
    }
    let submitted = artifact
        .get("dimensions")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut levels = Vec::new();
    for dimension in &definition.dimensions {
        let Some(level) = submitted
            .get(&dimension.dimension_id)
            .and_then(submitted_level)
        else {
            if dimension.required {
                issues.push(format!(
                    "dimension '{}' is not rated (levels: {}).",
                    dimension.dimension_id,
                    dimension.levels.join(", ")
                ));
            }
            continue;
        };
        // An exact level, else the one level equal to it ignoring case and surrounding space.
        let folded = level.trim().to_lowercase();
        let matches: Vec<&String> = dimension
            .levels
            .iter()
            .filter(|l| l.as_str() == level || l.to_lowercase() == folded)
            .collect();
        let exact = dimension.levels.iter().find(|l| l.as_str() == level);
        match exact.or(match matches.as_slice() {
            [one] => Some(*one),
            _ => None,
        }) {
            Some(l) => levels.push((dimension.dimension_id.as_str(), l.as_str())),
            None => issues.push(format!(
                "dimension '{}' is rated '{level}', which is not one of its levels: {}.",
                dimension.dimension_id,
                dimension.levels.join(", ")
            )),
        }
    }
    for id in submitted.keys() {
        if !definition.dimensions.iter().any(|d| &d.dimension_id == id) {
            issues.push(format!(
                "'{id}' is not a dimension of '{}' (its dimensions: {}).",
                definition.assessment_id,
                definition
                    .dimensions
                    .iter()
                    .map(|d| d.dimension_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    if issues.is_empty() {
        Ok(Recorded { definition, levels })
    } else {
        Err(issues)
    }
}

/// The step's assessments (one `wr.assessment` artifact per referenced assessment; with one
/// reference the first such artifact counts, with several each is matched by `assessmentId`),
/// then, when all are valid, the consequences they fire.
fn assessments(
    compiled: &CompiledWorkflowSnapshotV1,
    step: &CompiledStep,
    output: &OutputInput,
    autonomy: Autonomy,
) -> Result<Vec<Finding>, String> {
    let lang = &step.language;
    let definitions: Vec<&AssessmentDefinition> = lang
        .assessment_refs
        .iter()
        .map(|r| {
            compiled
                .body
                .assessments
                .iter()
                .find(|a| &a.assessment_id == r)
                .ok_or_else(|| format!("assessment {r} is not declared"))
        })
        .collect::<Result<_, _>>()?;
    let submitted: Vec<&Map<String, Value>> = output
        .artifacts
        .iter()
        .filter(|a| a.get("kind").and_then(Value::as_str) == Some(ASSESSMENT_KIND))
        .collect();
    if submitted.is_empty() {
        let names: Vec<String> = definitions
            .iter()
            .map(|d| format!("'{}'", d.assessment_id))
            .collect();
        return Ok(vec![findings::assessment(
            &step.step_id,
            None,
            true,
            vec![format!(
                "no `wr.assessment` artifact was sent (this step assesses {}).",
                names.join(", ")
            )],
            fix_for(&definitions),
            autonomy,
        )]);
    }
    let single = definitions.len() == 1;
    let mut out = Vec::new();
    let mut recorded = Vec::new();
    for definition in &definitions {
        let candidate = if single {
            submitted.first().copied()
        } else {
            submitted.iter().copied().find(|a| {
                a.get("assessmentId").and_then(Value::as_str)
                    == Some(definition.assessment_id.as_str())
            })
        };
        let Some(artifact) = candidate else {
            out.push(findings::assessment(
                &step.step_id,
                Some(&definition.assessment_id),
                true,
                vec![format!(
                    "no `wr.assessment` artifact has assessmentId '{}' (with several assessments, each artifact names its own).",
                    definition.assessment_id
                )],
                fix_for(&[definition]),
                autonomy,
            ));
            continue;
        };
        match judge_one(definition, artifact) {
            Ok(r) => recorded.push(r),
            Err(issues) => out.push(findings::assessment(
                &step.step_id,
                Some(&definition.assessment_id),
                false,
                issues,
                fix_for(&[definition]),
                autonomy,
            )),
        }
    }
    if !out.is_empty() {
        return Ok(out);
    }
    for consequence in &lang.assessment_consequences {
        let fired = recorded
            .iter()
            .filter(|r| {
                consequence
                    .for_assessment
                    .as_ref()
                    .is_none_or(|only| &r.definition.assessment_id == only)
            })
            .find_map(|r| {
                r.levels
                    .iter()
                    .find(|(_, level)| *level == consequence.any_equals_level)
                    .map(|(dimension, level)| (r.definition, *dimension, *level))
            });
        if let Some((definition, dimension, level)) = fired {
            out.push(findings::followup(
                &step.step_id,
                &definition.assessment_id,
                AssessmentFollowup {
                    dimension_id: dimension.to_owned(),
                    level: level.to_owned(),
                    guidance: consequence.guidance.clone(),
                },
                autonomy,
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn regex_flags_follow_the_language() {
        assert!(regex("abc", Some("i")).unwrap().is_match("xABCx"));
        assert!(!regex("abc", None).unwrap().is_match("ABC"));
        assert!(regex("^b", Some("m")).unwrap().is_match("a\nb"));
        assert!(!regex("^b", None).unwrap().is_match("a\nb"));
        assert!(regex("a.b", Some("s")).unwrap().is_match("a\nb"));
        assert!(!regex("b", Some("y")).unwrap().is_match("ab"));
        assert!(regex("a", Some("gy")).unwrap().is_match("ab"));
        assert!(regex("a", Some("ii")).is_err());
        assert!(regex("a", Some("x")).is_err());
        assert!(regex("(?=a)", None).is_err());
    }

    #[test]
    fn schema_rules_decode_double_encoded_json_only_when_structure_is_wanted() {
        let object = json!({"type": "object"});
        let string = json!({"type": "string"});
        assert_eq!(
            decode_for_schema("\"{\\\"a\\\": 1}\"", &object),
            Some(json!({"a": 1}))
        );
        assert_eq!(
            decode_for_schema("\"{\\\"a\\\": 1}\"", &string),
            Some(json!("{\"a\": 1}"))
        );
        assert_eq!(decode_for_schema("not json", &object), None);
        assert!(wants_structure(&json!({"anyOf": [{"required": ["x"]}]})));
    }
}

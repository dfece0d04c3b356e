//! Validating output artifacts against a contract schema embedded in the compiled snapshot,
//! with the `jsonschema` crate (draft 2020-12, no remote or file references) plus WorkRail's
//! `maxUtf8Bytes` keyword, so byte budgets are exact.

use std::sync::{Arc, Mutex};

use jsonschema::paths::Location;
use jsonschema::{Draft, Keyword, ValidationError, Validator};
use serde_json::{Map, Value};
use workrail_spec::compiled::CompiledContract;

use crate::builtins::contracts::MAX_UTF8_BYTES_KEYWORD;

/// `maxUtf8Bytes: N`: a string is at most N UTF-8 bytes (non-strings pass, like `maxLength`).
struct MaxUtf8Bytes(u64);

impl<'i> Keyword<'i> for MaxUtf8Bytes {
    fn validate(&self, instance: &'i Value) -> Result<(), ValidationError<'i>> {
        if Keyword::is_valid(self, instance) {
            return Ok(());
        }
        let len = instance.as_str().map_or(0, str::len);
        Err(ValidationError::custom(format!(
            "string is {len} UTF-8 bytes, longer than {} bytes",
            self.0
        )))
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        instance.as_str().is_none_or(|s| s.len() as u64 <= self.0)
    }
}

fn max_utf8_bytes_factory<'a>(
    _parent: &'a Map<String, Value>,
    value: &'a Value,
    _path: Location,
) -> Result<Box<dyn for<'i> Keyword<'i>>, ValidationError<'a>> {
    match value.as_u64() {
        Some(max) => Ok(Box::new(MaxUtf8Bytes(max))),
        None => Err(ValidationError::schema(format!(
            "`{MAX_UTF8_BYTES_KEYWORD}` must be a non-negative integer"
        ))),
    }
}

/// Builds the validator for an embedded schema. Only bundled drafts are known and nothing is
/// fetched: `jsonschema` is built without its HTTP and file resolvers.
fn build_validator(schema: &Value) -> Result<Validator, String> {
    jsonschema::options()
        .with_draft(Draft::Draft202012)
        .with_keyword(MAX_UTF8_BYTES_KEYWORD, max_utf8_bytes_factory)
        .build(schema)
        .map_err(|e| e.to_string())
}

/// How many compiled validators a process keeps (a run's contracts are a handful of schemas).
const KEPT_VALIDATORS: usize = 32;

/// The validator for an embedded schema. Building one costs more than the rest of an advance's
/// judging, and the same few schemas come back on every acknowledgement, so the validators of
/// the most recently used schemas are kept, by equality of the schema itself.
pub fn validator(schema: &Value) -> Result<Arc<Validator>, String> {
    static KEPT: Mutex<Vec<(Value, Arc<Validator>)>> = Mutex::new(Vec::new());
    let kept = || KEPT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(found) = kept().iter().find(|(s, _)| s == schema) {
        return Ok(Arc::clone(&found.1));
    }
    let built = Arc::new(build_validator(schema)?);
    let mut kept = kept();
    if kept.len() >= KEPT_VALIDATORS {
        kept.remove(0);
    }
    kept.push((schema.clone(), Arc::clone(&built)));
    Ok(built)
}

/// One schema violation of one artifact.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ContractProblem {
    /// Index of the artifact in `output.artifacts`.
    pub artifact_index: usize,
    /// JSON pointer inside the artifact.
    pub instance_path: String,
    pub message: String,
}

/// The result of checking a step's output against its contract.
#[derive(Debug, Clone, PartialEq)]
pub enum ContractCheck {
    /// No artifact of the contract's kind.
    Missing,
    /// At least one artifact of the kind violates the schema.
    Invalid(Vec<ContractProblem>),
    /// Every artifact of the kind is valid; listed as `(index, artifact)` in input order.
    Valid(Vec<(usize, Map<String, Value>)>),
}

/// Max problems reported per check (bounded details).
pub const MAX_PROBLEMS: usize = 10;

/// Max UTF-8 bytes of one problem message (schema errors may quote the offending value).
pub const PROBLEM_MESSAGE_MAX_BYTES: usize = 240;

/// Cuts `text` to at most `max` bytes on a char boundary, marking the cut with `…`.
pub(crate) fn bounded(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let ellipsis = "…";
    let cut = workrail_spec::budget::floor_char_boundary(text, max.saturating_sub(ellipsis.len()));
    format!("{}{ellipsis}", &text[..cut])
}

/// The schema violations of one artifact (`index` is its place in `output.artifacts`).
pub fn problems_of(
    validator: &Validator,
    index: usize,
    artifact: &Map<String, Value>,
) -> Vec<ContractProblem> {
    let instance = Value::Object(artifact.clone());
    validator
        .iter_errors(&instance)
        .map(|error| ContractProblem {
            artifact_index: index,
            instance_path: error.instance_path().as_str().to_owned(),
            message: bounded(&error.to_string(), PROBLEM_MESSAGE_MAX_BYTES),
        })
        .collect()
}

/// Checks every artifact whose `kind` is the contract's artifact kind. Other artifacts are not
/// this contract's business.
pub fn check(
    contract: &CompiledContract,
    artifacts: &[Map<String, Value>],
) -> Result<ContractCheck, String> {
    let matching: Vec<(usize, &Map<String, Value>)> = artifacts
        .iter()
        .enumerate()
        .filter(|(_, a)| {
            a.get("kind").and_then(Value::as_str) == Some(contract.artifact_kind.as_str())
        })
        .collect();
    if matching.is_empty() {
        return Ok(ContractCheck::Missing);
    }
    let validator = validator(&contract.schema)?;
    let mut problems = Vec::new();
    for (index, artifact) in &matching {
        problems.extend(problems_of(&validator, *index, artifact));
    }
    if problems.is_empty() {
        Ok(ContractCheck::Valid(
            matching.into_iter().map(|(i, a)| (i, a.clone())).collect(),
        ))
    } else {
        problems.truncate(MAX_PROBLEMS);
        Ok(ContractCheck::Invalid(problems))
    }
}

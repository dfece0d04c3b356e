//! The `wr.loop_control` artifact as the workflow language reads it (decision D209), for steps
//! whose loop-control contract was written as the language's `outputContract`.
//!
//! Workflows written for the WorkRail 3.x language show agents the decision as
//! `{"kind": "wr.loop_control", "decision": ...}`, often with a `metadata` object, and name the
//! loop, where they name it at all, by the loop's `conditionSource.loopId`. The language takes
//! any of these as the enclosing loop's decision. The native contract (locks: `loopId` equal to
//! the enclosing loop's id, no other field) is unchanged: the artifacts are read into that form
//! before the contract checks them, and what the agent sent is what is recorded.

use serde_json::{Map, Value};
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::ids::{LoopId, StepId};

use super::contract::ContractProblem;

const KIND: &str = "wr.loop_control";
/// The language's bound on `metadata.reason`, in characters.
const REASON_MAX_CHARS: usize = 1024;

/// `artifacts` with each `wr.loop_control` one read in the native form: a missing `loopId`
/// names the enclosing loop (outside any loop, where the decision decides nothing, the step),
/// the loop's `conditionSource.loopId` is read as its id, and a well-formed `metadata` object
/// is set aside. A malformed `metadata` is a problem of its own, at its pointer.
pub(super) fn read(
    compiled: &CompiledWorkflowSnapshotV1,
    artifacts: &[Map<String, Value>],
    enclosing: Option<&str>,
    step: &StepId,
) -> (Vec<Map<String, Value>>, Vec<ContractProblem>) {
    let label = enclosing
        .and_then(|id| LoopId::parse(id).ok())
        .and_then(|id| compiled.loop_def(&id))
        .and_then(|l| l.kept.get("conditionSourceLoopId"))
        .and_then(Value::as_str);
    let mut problems = Vec::new();
    let read = artifacts
        .iter()
        .enumerate()
        .map(|(index, artifact)| {
            if artifact.get("kind").and_then(Value::as_str) != Some(KIND) {
                return artifact.clone();
            }
            let mut artifact = artifact.clone();
            let named = artifact.get("loopId").and_then(Value::as_str);
            if named.is_none() || (named.is_some() && named == label) {
                let id = enclosing.unwrap_or(step.as_str());
                artifact.insert("loopId".to_owned(), Value::from(id));
            }
            if let Some(metadata) = artifact.remove("metadata") {
                problems.extend(metadata_problem(&metadata).map(|message| ContractProblem {
                    artifact_index: index,
                    instance_path: "/metadata".to_owned(),
                    message,
                }));
            }
            artifact
        })
        .collect();
    (read, problems)
}

/// What is wrong with a `metadata` object, in the language's shape: `reason` (text up to 1,024
/// characters), `issuesFound` and `iterationIndex` (whole numbers from 0), `confidence` (a whole
/// number from 0 to 100), nothing else.
fn metadata_problem(metadata: &Value) -> Option<String> {
    let Some(map) = metadata.as_object() else {
        return Some(
            "metadata must be an object: {\"reason\", \"issuesFound\", \"iterationIndex\", \"confidence\"}, each optional".to_owned(),
        );
    };
    let whole =
        |v: &Value, max: Option<u64>| v.as_u64().is_some_and(|n| max.is_none_or(|m| n <= m));
    for (key, value) in map {
        let ok = match key.as_str() {
            "reason" => value
                .as_str()
                .is_some_and(|r| r.chars().count() <= REASON_MAX_CHARS),
            "issuesFound" | "iterationIndex" => whole(value, None),
            "confidence" => whole(value, Some(100)),
            _ => {
                return Some(format!(
                    "metadata.{key} is not a field of loop-control metadata; use reason, issuesFound, iterationIndex or confidence (or leave it out)"
                ));
            }
        };
        if !ok {
            return Some(match key.as_str() {
                "reason" => {
                    format!("metadata.reason must be text of at most {REASON_MAX_CHARS} characters")
                }
                "confidence" => {
                    "metadata.confidence must be a whole number from 0 to 100".to_owned()
                }
                _ => format!("metadata.{key} must be a whole number from 0"),
            });
        }
    }
    None
}

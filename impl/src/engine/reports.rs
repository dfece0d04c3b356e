//! Reports an agent may attach to any acknowledgement, whatever the step requires (decisions
//! D40 to D42): capability observations (`wr.capability_observation`), divergence markers
//! (`workflow_divergence`) and user-only dependencies (`wr.user_only_dependency`).
//!
//! Each report is judged against its pack: the schema pinned in the compiled snapshot when the
//! workflow embeds the pack, else the built-in one, plus the rules a schema cannot state because
//! they depend on the step (a divergence names a step of this workflow; `needs_user_choice`
//! names a choice the step marks non-assumable; a probe reports an attempt, not a claim). Valid
//! reports become records (observations, divergences) and findings (a capability unavailable, a
//! user-only dependency); invalid optional ones are disclosed as warnings and not recorded.
//!
//! A step that *depends* on a required capability is checked against the capability's
//! enforcement-grade status on the branch: a step depends on capability `c` iff `c` is
//! `required`, the step is not a capability probe, and it comes after the first probe of `c` in
//! the compiled step order (document order). Steps an author placed before a lazy probe do not
//! count on the capability yet; every required capability has a probe (authored or injected
//! first), so without an authored one every other step depends on it.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};
use workrail_spec::blocker::ReasonDetails;
use workrail_spec::closed::{
    AttemptContext, AttemptFailureCode, Autonomy, Capability, CapabilityRequirement,
    CapabilityStatus, ClaimValue, ClaimedBy, DivergenceReason, NonAssumableChoiceKind, ProbeResult,
    UserOnlyDependencyReason,
};
use workrail_spec::compiled::{CompiledContract, CompiledStep, CompiledWorkflowSnapshotV1};
use workrail_spec::event::{Provenance, ProvenanceDetail};
use workrail_spec::ids::{GapId, StepId};
use workrail_spec::reason::GapReason;

use super::contract::{self, ContractProblem, MAX_PROBLEMS};
use super::findings;
use super::outcome::{
    BranchFacts, Divergence, Finding, FindingDetail, ObservedCapability, Reports, Resolution,
};
use crate::builtins::contracts::{
    self as packs, BLOCK_OUTPUT, CAPABILITY_OBSERVATION, USER_ONLY_DEPENDENCY, WORKFLOW_DIVERGENCE,
};
use crate::builtins::templates::{CAPABILITY_PROBE, probe_step_id};

/// Artifacts that passed their pack, with their index in `output.artifacts`.
pub(crate) type Accepted = Vec<(usize, Map<String, Value>)>;

/// The packs WorkRail reads on every step, in the order they are judged.
pub(crate) const REPORT_PACKS: [&str; 3] = [
    CAPABILITY_OBSERVATION,
    WORKFLOW_DIVERGENCE,
    USER_ONLY_DEPENDENCY,
];

#[cfg(feature = "test-mutations")]
thread_local! {
    static CLAIM_JUDGED_AS_ATTEMPT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// TEST-ONLY (feature `test-mutations`): while on, for the calling thread, an acknowledgement's
/// weak claims are judged like attempts (a claim of `available` unlocks a dependent step, a
/// claim of `unavailable` blocks it), which D27 forbids; the claim is still recorded weak, so
/// only a comparison of the judgement sees it.
#[cfg(feature = "test-mutations")]
pub fn plant_claim_judged_as_attempt(on: bool) {
    CLAIM_JUDGED_AS_ATTEMPT.with(|c| c.set(on));
}

#[cfg(feature = "test-mutations")]
fn planted_claim_judged_as_attempt() -> bool {
    CLAIM_JUDGED_AS_ATTEMPT.with(std::cell::Cell::get)
}

#[cfg(not(feature = "test-mutations"))]
#[inline(always)]
fn planted_claim_judged_as_attempt() -> bool {
    false
}

#[cfg(feature = "test-mutations")]
thread_local! {
    static UNMARKED_CHOICE_ACCEPTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// TEST-ONLY (feature `test-mutations`): while on, for the calling thread, a
/// `needs_user_choice` report naming a choice the step does not mark non-assumable is accepted
/// as a user-only dependency, which D41 and locks §3 forbid (the choice is the agent's to make).
#[cfg(feature = "test-mutations")]
pub fn plant_unmarked_choice_accepted(on: bool) {
    UNMARKED_CHOICE_ACCEPTED.with(|c| c.set(on));
}

#[cfg(feature = "test-mutations")]
fn planted_unmarked_choice_accepted() -> bool {
    UNMARKED_CHOICE_ACCEPTED.with(std::cell::Cell::get)
}

#[cfg(not(feature = "test-mutations"))]
#[inline(always)]
fn planted_unmarked_choice_accepted() -> bool {
    false
}

/// The capability a `wr.templates.capability_probe` step probes.
pub(crate) fn probed_capability(step: &CompiledStep) -> Option<Capability> {
    if step.provenance.origin_id.as_deref() != Some(CAPABILITY_PROBE) {
        return None;
    }
    Capability::ALL
        .iter()
        .copied()
        .find(|c| step.step_id.as_str() == probe_step_id(*c))
}

/// Whether `step` depends on `capability` (see the module docs).
pub fn depends_on(
    compiled: &CompiledWorkflowSnapshotV1,
    step: &CompiledStep,
    capability: Capability,
) -> bool {
    if compiled.body.capabilities.get(&capability) != Some(&CapabilityRequirement::Required)
        || probed_capability(step).is_some()
    {
        return false;
    }
    let steps = &compiled.body.steps;
    let first_probe = steps
        .iter()
        .position(|s| probed_capability(s) == Some(capability));
    let here = steps.iter().position(|s| s.step_id == step.step_id);
    match (first_probe, here) {
        (Some(probe), Some(here)) => here > probe,
        (None, _) => true,
        (Some(_), None) => false,
    }
}

/// The pack a report is judged with: pinned in the snapshot when embedded, else built in.
fn pack(compiled: &CompiledWorkflowSnapshotV1, contract_ref: &str) -> Option<CompiledContract> {
    compiled.contract(contract_ref).cloned().or_else(|| {
        packs::find(contract_ref).map(|p| {
            let mut schema = p.schema();
            crate::compiler::normalize_schema(&mut schema);
            CompiledContract {
                contract_ref: p.contract_ref.to_owned(),
                artifact_kind: p.artifact_kind.to_owned(),
                schema,
                example: p.example(),
            }
        })
    })
}

fn text<'a>(artifact: &'a Map<String, Value>, field: &str) -> Option<&'a str> {
    artifact.get(field).and_then(Value::as_str)
}

/// Rules of a report that depend on the step or the workflow, beyond its pack's schema.
pub(crate) fn semantic_problems(
    compiled: &CompiledWorkflowSnapshotV1,
    step: &CompiledStep,
    contract_ref: &str,
    index: usize,
    artifact: &Map<String, Value>,
) -> Vec<ContractProblem> {
    let problem = |path: &str, message: String| ContractProblem {
        artifact_index: index,
        instance_path: path.to_owned(),
        message,
    };
    match contract_ref {
        WORKFLOW_DIVERGENCE => match text(artifact, "relatedStepId") {
            Some(related)
                if !compiled
                    .body
                    .steps
                    .iter()
                    .any(|s| s.step_id.as_str() == related) =>
            {
                vec![problem(
                    "/relatedStepId",
                    format!(
                        "'{related}' is not a step of this workflow; name the step you deviated from (this one is '{}') or leave relatedStepId out",
                        step.step_id
                    ),
                )]
            }
            _ => Vec::new(),
        },
        USER_ONLY_DEPENDENCY => {
            let choice =
                text(artifact, "nonAssumableChoice").and_then(NonAssumableChoiceKind::parse);
            match choice {
                Some(choice)
                    if !step.non_assumable_choices.contains(&choice)
                        && !planted_unmarked_choice_accepted() =>
                {
                    let declared: Vec<&str> = step
                        .non_assumable_choices
                        .iter()
                        .map(|c| c.as_str())
                        .collect();
                    vec![problem(
                        "/nonAssumableChoice",
                        if declared.is_empty() {
                            format!(
                                "step '{}' marks no choice non-assumable, so '{choice}' is yours to make: choose, state the assumption in output.notesMarkdown, and leave this artifact out",
                                step.step_id
                            )
                        } else {
                            format!(
                                "step '{}' marks only {} non-assumable; '{choice}' is yours to make: choose and state the assumption in output.notesMarkdown",
                                step.step_id,
                                declared.join(", ")
                            )
                        },
                    )]
                }
                _ => Vec::new(),
            }
        }
        BLOCK_OUTPUT => super::block_output::problems(artifact)
            .into_iter()
            .map(|(path, message)| problem(&path, message))
            .collect(),
        CAPABILITY_OBSERVATION => {
            let probed = probed_capability(step);
            let about = text(artifact, "capability").and_then(Capability::parse);
            if probed.is_some() && probed == about && text(artifact, "basis") == Some("claim") {
                vec![problem(
                    "/basis",
                    "this probe records what an attempt showed, and a claim is not an attempt: try the capability once and report `basis` `attempt` (or leave `basis` out)".to_owned(),
                )]
            } else {
                Vec::new()
            }
        }
        _ => Vec::new(),
    }
}

/// The step, the agent's artifacts and the branch, as the judge reads them.
pub(crate) struct Judge<'a> {
    pub compiled: &'a CompiledWorkflowSnapshotV1,
    pub step: &'a CompiledStep,
    pub artifacts: &'a [Map<String, Value>],
    pub autonomy: Autonomy,
    pub branch: &'a BranchFacts,
    /// The step's required contract and, when it validated, its artifacts `(index, artifact)`.
    pub required: Option<(&'a str, Option<&'a Accepted>)>,
}

impl Judge<'_> {
    /// Judges every report of the ack: the findings to add, and what to record.
    pub(crate) fn run(&self) -> Result<(Vec<Finding>, Reports), String> {
        let mut findings = Vec::new();
        let mut valid: BTreeMap<&str, Accepted> = BTreeMap::new();
        for contract_ref in REPORT_PACKS {
            let accepted = match self.required {
                // The step requires this pack: its contract check already judged the artifacts.
                Some((required, artifacts)) if required == contract_ref => {
                    artifacts.cloned().unwrap_or_default()
                }
                _ => self.optional(contract_ref, &mut findings)?,
            };
            valid.insert(contract_ref, accepted);
        }
        let mut reports = Reports::default();
        let empty = Vec::new();
        let latest = self.observations(
            valid.get(CAPABILITY_OBSERVATION).unwrap_or(&empty),
            &mut reports,
            &mut findings,
        );
        self.dependencies(&latest, &mut findings);
        self.user_only(
            valid.get(USER_ONLY_DEPENDENCY).unwrap_or(&empty),
            &mut reports,
            &mut findings,
        );
        for (_, artifact) in valid.get(WORKFLOW_DIVERGENCE).unwrap_or(&empty) {
            let reason = text(artifact, "reason").and_then(DivergenceReason::parse);
            let summary = text(artifact, "summary");
            if let (Some(reason), Some(summary)) = (reason, summary) {
                reports.divergences.push(Divergence {
                    reason,
                    summary: summary.to_owned(),
                    related_step_id: text(artifact, "relatedStepId")
                        .and_then(|id| StepId::parse(id).ok()),
                });
            }
        }
        Ok((findings, reports))
    }

    /// Validates the artifacts of an optional pack one by one; returns the valid ones and adds
    /// one finding for the invalid ones.
    fn optional(
        &self,
        contract_ref: &str,
        findings: &mut Vec<Finding>,
    ) -> Result<Accepted, String> {
        // Most steps carry no report: the artifact kind decides that before any schema is built.
        let kind = match self.compiled.contract(contract_ref) {
            Some(pinned) => Some(pinned.artifact_kind.as_str()),
            None => packs::find(contract_ref).map(|p| p.artifact_kind),
        };
        let Some(kind) = kind else {
            return Ok(Vec::new());
        };
        let matching: Vec<(usize, &Map<String, Value>)> = self
            .artifacts
            .iter()
            .enumerate()
            .filter(|(_, a)| text(a, "kind") == Some(kind))
            .collect();
        if matching.is_empty() {
            return Ok(Vec::new());
        }
        let Some(pack) = pack(self.compiled, contract_ref) else {
            return Ok(Vec::new());
        };
        let validator = contract::validator(&pack.schema)?;
        let mut accepted = Vec::new();
        let mut problems = Vec::new();
        for (index, artifact) in matching {
            let mut found = contract::problems_of(&validator, index, artifact);
            if found.is_empty() {
                found = semantic_problems(self.compiled, self.step, contract_ref, index, artifact);
            }
            if found.is_empty() {
                accepted.push((index, artifact.clone()));
            } else {
                problems.extend(found);
            }
        }
        if !problems.is_empty() {
            problems.truncate(MAX_PROBLEMS);
            findings.push(findings::invalid_report(
                &pack,
                &self.step.step_id,
                problems,
                self.autonomy,
                contract_ref == USER_ONLY_DEPENDENCY,
            ));
        }
        Ok(accepted)
    }

    /// Whether the branch already disclosed a missing `capability` that nothing resolved.
    fn disclosed(&self, capability: Capability) -> bool {
        self.branch.open_gaps.iter().any(|g| {
            matches!(g.reason, GapReason::CapabilityMissing(_))
                && g.details == Some(ReasonDetails::Capability { capability })
        })
    }

    /// Adds a capability finding unless it merely repeats, without blocking, a disclosure the
    /// branch already holds (one disclosure per capability and branch until it is resolved).
    fn push_capability(&self, finding: Finding, capability: Capability, out: &mut Vec<Finding>) {
        if finding.disposition.blocks || !self.disclosed(capability) {
            out.push(finding);
        }
    }

    /// Records each observation with its provenance (decision D40) and judges the latest
    /// enforcement-grade one per capability. Returns that latest strong status per capability.
    fn observations(
        &self,
        valid: &[(usize, Map<String, Value>)],
        reports: &mut Reports,
        findings: &mut Vec<Finding>,
    ) -> BTreeMap<Capability, (usize, CapabilityStatus, Option<String>)> {
        let probed = probed_capability(self.step);
        let mut latest = BTreeMap::new();
        for (_, artifact) in valid {
            let Some(capability) = text(artifact, "capability").and_then(Capability::parse) else {
                continue;
            };
            let available = text(artifact, "status") == Some("available");
            let status = if available {
                CapabilityStatus::Available
            } else {
                CapabilityStatus::Unavailable
            };
            let result = if available {
                ProbeResult::Success
            } else {
                ProbeResult::Failure
            };
            let claim = text(artifact, "basis") == Some("claim");
            let detail = if claim {
                ProvenanceDetail::ManualClaim {
                    claimed_by: text(artifact, "claimedBy")
                        .and_then(ClaimedBy::parse)
                        .unwrap_or(ClaimedBy::Agent),
                    claim: if available {
                        ClaimValue::Available
                    } else {
                        ClaimValue::Unavailable
                    },
                }
            } else if probed == Some(capability) {
                ProvenanceDetail::ProbeStep {
                    probe_template_id: CAPABILITY_PROBE.to_owned(),
                    probe_step_id: self.step.step_id.clone(),
                    result,
                }
            } else {
                ProvenanceDetail::AttemptedUse {
                    attempt_context: AttemptContext::WorkflowStep,
                    result,
                    failure_code: (!available).then(|| {
                        text(artifact, "failureCode")
                            .and_then(AttemptFailureCode::parse)
                            .unwrap_or(AttemptFailureCode::Unknown)
                    }),
                }
            };
            let index = reports.observations.len();
            reports.observations.push(ObservedCapability {
                capability,
                status,
                provenance: Provenance { detail },
            });
            // Weak claims inform, never unlock or re-lock (decision D27).
            if !claim || planted_claim_judged_as_attempt() {
                latest.insert(
                    capability,
                    (
                        index,
                        status,
                        text(artifact, "remediation").map(str::to_owned),
                    ),
                );
            }
        }
        let mut resolved = BTreeSet::new();
        for (capability, (index, status, remediation)) in &latest {
            let requirement = self.compiled.body.capabilities.get(capability);
            if *status == CapabilityStatus::Unavailable {
                let required = match requirement {
                    Some(CapabilityRequirement::Required) => true,
                    Some(CapabilityRequirement::Preferred) => false,
                    // Undeclared or disabled: nothing depends on it; the observation is kept.
                    _ => continue,
                };
                let finding = findings::capability_unavailable(
                    *capability,
                    &self.step.step_id,
                    required,
                    remediation.as_deref(),
                    self.autonomy,
                );
                self.push_capability(finding, *capability, findings);
                continue;
            }
            for gap in &self.branch.open_gaps {
                let about = gap.details
                    == Some(ReasonDetails::Capability {
                        capability: *capability,
                    });
                if matches!(gap.reason, GapReason::CapabilityMissing(_))
                    && about
                    && resolved.insert(gap.gap_id.clone())
                {
                    reports.resolutions.push(Resolution {
                        resolves: gap.gap_id.clone(),
                        reason: gap.reason,
                        details: gap.details.clone(),
                        summary: format!(
                            "'{capability}' was observed available in step '{}', which resolves the earlier disclosure that it was missing.",
                            self.step.step_id
                        ),
                        observation: Some(*index),
                    });
                }
            }
        }
        latest
    }

    /// Steps that depend on a required capability need it `available` (strong) on the branch.
    fn dependencies(
        &self,
        latest: &BTreeMap<Capability, (usize, CapabilityStatus, Option<String>)>,
        findings: &mut Vec<Finding>,
    ) {
        for capability in self.compiled.body.capabilities.keys() {
            if !depends_on(self.compiled, self.step, *capability) {
                continue;
            }
            let judged = findings.iter().any(|f| {
                matches!(f.detail, FindingDetail::Capability { capability: c, .. } if c == *capability)
            });
            if judged {
                continue;
            }
            let status = latest
                .get(capability)
                .map(|(_, s, _)| *s)
                .or_else(|| self.branch.strong_status.get(capability).copied())
                .unwrap_or(CapabilityStatus::Unknown);
            if status == CapabilityStatus::Available {
                continue;
            }
            let finding = findings::capability_dependency(
                *capability,
                &self.step.step_id,
                status,
                self.autonomy,
            );
            // A never-stop disclosure already on the branch is not repeated at every step.
            self.push_capability(finding, *capability, findings);
        }
    }

    /// `needed` reports are findings (one per reason and choice); `supplied` ones resolve the
    /// branch's open gaps of the same reason (and choice).
    fn user_only(
        &self,
        valid: &[(usize, Map<String, Value>)],
        reports: &mut Reports,
        findings: &mut Vec<Finding>,
    ) {
        let mut seen = BTreeSet::new();
        let mut resolved = BTreeSet::<GapId>::new();
        for (_, artifact) in valid {
            let Some(reason) = text(artifact, "reason").and_then(UserOnlyDependencyReason::parse)
            else {
                continue;
            };
            let choice =
                text(artifact, "nonAssumableChoice").and_then(NonAssumableChoiceKind::parse);
            let summary = text(artifact, "summary").unwrap_or_default();
            if text(artifact, "status") == Some("supplied") {
                for gap in &self.branch.open_gaps {
                    let same_choice = match choice {
                        Some(choice) => {
                            gap.details == Some(ReasonDetails::NonAssumableChoice { choice })
                        }
                        None => true,
                    };
                    if gap.reason == GapReason::UserOnlyDependency(reason)
                        && same_choice
                        && resolved.insert(gap.gap_id.clone())
                    {
                        reports.resolutions.push(Resolution {
                            resolves: gap.gap_id.clone(),
                            reason: gap.reason,
                            details: gap.details.clone(),
                            summary: format!(
                                "The user supplied what was needed ({reason}), reported at step '{}': {summary}",
                                self.step.step_id
                            ),
                            observation: None,
                        });
                    }
                }
                continue;
            }
            if seen.insert((reason, choice)) {
                findings.push(findings::user_only_dependency(
                    &self.step.step_id,
                    reason,
                    choice,
                    summary,
                    self.autonomy,
                ));
            }
        }
    }
}

//! The workflow-level fields of the WorkRail 3.x spelling, and the v1-era fields of both
//! levels: a field whose v2 spelling differs (or that v2 does without) loads with a `v1_field`
//! warning naming its v2 equivalent, never an error (locks §7: existing workflows keep loading).
//! `workrail validate --strict` turns these warnings into errors; `workrail migrate` writes the
//! v2 spelling where one exists ([`V1_FIELDS`] is the table both use).

use std::collections::BTreeMap;

use serde_json::Value;
use workrail_spec::compiled::{CompiledWarning, CompiledWarningCode, Recommendations};

use super::Parser;
use super::fields::{Fields, array, one_of, string, type_name};
use crate::compiler::content::{MetricsProfile, WorkflowExtras, WorkflowReference};
use crate::compiler::error::{CompileError, CompileErrorCode as Code, index};
use crate::compiler::source::SourceOutput;

/// Where a v1-era field is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldLevel {
    Workflow,
    Step,
    Loop,
}

/// One v1-era field and what v2 writes instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct V1Field {
    pub level: FieldLevel,
    pub name: &'static str,
    /// The v2 spelling, or `None` when v2 has none (the field is kept verbatim).
    pub v2: Option<&'static str>,
    /// What the warning says about it.
    pub advice: &'static str,
}

/// Every v1-era field.
pub const V1_FIELDS: &[V1Field] = &[
    V1Field {
        level: FieldLevel::Workflow,
        name: "version",
        v2: None,
        advice: "v2 pins a run to the compiled `workflowHash`, not to a version string; it is kept for display only",
    },
    V1Field {
        level: FieldLevel::Workflow,
        name: "recommendedPreferences",
        v2: Some("recommendations"),
        advice: "the v2 spelling is `recommendations` (same fields)",
    },
    V1Field {
        level: FieldLevel::Step,
        name: "guidance",
        v2: Some("promptBlocks.constraints"),
        advice: "the v2 spelling is `promptBlocks.constraints` (for a step written with `prompt`, v2 has none); it is shown as the step's `## Guidance`",
    },
    V1Field {
        level: FieldLevel::Step,
        name: "outputContract",
        v2: Some("output.contractRef"),
        advice: "the v2 spelling is `output.contractRef`",
    },
    V1Field {
        level: FieldLevel::Step,
        name: "hasValidation",
        v2: None,
        advice: "v2 has no such flag: a step's checks are its `validationCriteria` or its `output.contractRef`; it is kept for display only",
    },
    V1Field {
        level: FieldLevel::Loop,
        name: "id",
        v2: Some("loopId"),
        advice: "the v2 spelling of a loop's id is `loopId`",
    },
];

/// The entry of a v1-era field.
pub fn v1_field(level: FieldLevel, name: &str) -> Option<&'static V1Field> {
    V1_FIELDS
        .iter()
        .find(|f| f.level == level && f.name == name)
}

/// Records the `v1_field` warning of `name` at `pointer`.
pub(super) fn warn_v1(p: &mut Parser<'_>, level: FieldLevel, name: &str, pointer: &str) {
    let Some(field) = v1_field(level, name) else {
        return;
    };
    p.warn(CompiledWarning {
        code: CompiledWarningCode::V1Field,
        message: format!("`{name}` is a WorkRail 3.x field: {}.", field.advice),
        pointer: Some(pointer.to_owned()),
    });
}

/// The top-level fields of the 3.x spelling (the control-flow fields `assessments` and
/// `extensionPoints` are read elsewhere or kept).
pub(super) const WORKFLOW_FIELDS: &[&str] = &[
    "version",
    "modelTier",
    "preconditions",
    "clarificationPrompts",
    "metaGuidance",
    "recommendedPreferences",
    "assessments",
    "extensionPoints",
    "references",
    "validatedAgainstSpecVersion",
    "about",
    "examples",
    "metricsProfile",
    "maxAttempts",
];

/// Fields kept verbatim (checked for shape, no run-time effect).
const KEPT: &[&str] = &[
    "version",
    "modelTier",
    "extensionPoints",
    "validatedAgainstSpecVersion",
    "about",
    "examples",
];

/// Reads the top-level 3.x fields. `recommendations` is the v2 field's value, to which
/// `recommendedPreferences` contributes when the v2 field is absent.
pub(super) fn workflow(
    p: &mut Parser<'_>,
    f: &Fields<'_>,
    recommendations: &mut Recommendations,
) -> WorkflowExtras {
    let mut extras = WorkflowExtras::default();
    for name in KEPT {
        let Some(value) = f.opt(name) else { continue };
        let at = f.at(name);
        let before = p.errors.len();
        let mut ok = match *name {
            "version" | "about" => string(p, value, &at, &format!("`{name}`")).is_some(),
            "modelTier" => one_of(p, value, &at, "`modelTier`", MODEL_TIERS).is_some(),
            "validatedAgainstSpecVersion" => positive_integer(p, value, &at, name),
            "examples" => strings(p, value, &at, "`examples`").is_some(),
            _ => array(p, value, &at, &format!("`{name}`")).is_some(),
        };
        if !ok && p.lenient {
            // A legacy workflow keeps a display-only field of another shape (it has no effect).
            let problems: Vec<String> = p.errors.drain(before..).map(|e| e.message).collect();
            p.warn(CompiledWarning {
                code: CompiledWarningCode::UnknownFieldKept,
                message: format!(
                    "`{name}` does not have the shape WorkRail 3.x gives it ({}); this legacy-id workflow keeps it verbatim for display, with no effect.",
                    problems.join(" ")
                ),
                pointer: Some(at.clone()),
            });
            ok = true;
        }
        if ok {
            extras.kept.insert((*name).to_owned(), value.clone());
        }
        if *name == "version" {
            warn_v1(p, FieldLevel::Workflow, name, &at);
        }
    }
    let list = |p: &mut Parser<'_>, name: &str| -> Vec<String> {
        f.opt(name)
            .and_then(|v| strings(p, v, &f.at(name), &format!("`{name}`")))
            .unwrap_or_default()
    };
    extras.meta_guidance = list(p, "metaGuidance");
    extras.preconditions = list(p, "preconditions");
    extras.clarification_prompts = list(p, "clarificationPrompts");
    extras.references = f
        .opt("references")
        .map(|v| references(p, v, &f.at("references")))
        .unwrap_or_default();
    if let Some(v) = f.opt("metricsProfile") {
        let names: Vec<&str> = MetricsProfile::ALL.iter().map(|(s, _)| *s).collect();
        extras.metrics_profile = one_of(p, v, &f.at("metricsProfile"), "`metricsProfile`", &names)
            .and_then(MetricsProfile::parse);
        if let Some(raw) = v.as_str() {
            extras
                .kept
                .insert("metricsProfile".to_owned(), Value::from(raw));
        }
    }
    if let Some(v) = f.opt("recommendedPreferences") {
        let at = f.at("recommendedPreferences");
        warn_v1(p, FieldLevel::Workflow, "recommendedPreferences", &at);
        if let Some(parsed) = super::recommendations(p, v, &at) {
            if f.opt("recommendations").is_some() && &parsed != recommendations {
                p.error(CompileError::new(
                    Code::InvalidValue,
                    at.clone(),
                    "`recommendedPreferences` and `recommendations` are the same field in two spellings and they disagree.",
                    "Keep `recommendations` (the v2 spelling) and remove `recommendedPreferences`.",
                ));
            } else {
                *recommendations = parsed;
            }
        }
    }
    extras
}

/// The model tiers of `modelTier`.
pub(super) const MODEL_TIERS: &[&str] = &["heavy", "lightweight", "mid"];

fn positive_integer(p: &mut Parser<'_>, value: &Value, pointer: &str, name: &str) -> bool {
    if value.as_u64().is_some_and(|n| n >= 1) {
        return true;
    }
    p.error(CompileError::new(
        Code::WrongType,
        pointer,
        format!("`{name}` must be a whole number of at least 1, found {value}."),
        "Write a whole number such as 1.",
    ));
    false
}

/// A list of non-blank strings.
pub(super) fn strings(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    what: &str,
) -> Option<Vec<String>> {
    let items = array(p, value, pointer, what)?;
    let mut out = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        match super::prompt::free_text(p, item, &index(pointer, i), what) {
            Some(text) => out.push(text),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

const REFERENCE: &[&str] = &[
    "id",
    "title",
    "source",
    "purpose",
    "authoritative",
    "resolveFrom",
];

fn references(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Vec<WorkflowReference> {
    let Some(items) = array(p, value, pointer, "`references`") else {
        return Vec::new();
    };
    let mut out: Vec<WorkflowReference> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = index(pointer, i);
        let Some(r) = Fields::new(p, item, &at, "a reference", REFERENCE) else {
            continue;
        };
        let text = |p: &mut Parser<'_>, key: &str| {
            r.req(p, key, &format!("Add the reference's `{key}`."))
                .and_then(|v| super::fields::non_blank(p, v, &r.at(key), &format!("`{key}`")))
                .map(str::to_owned)
        };
        let (id, title, source, purpose) = (
            text(p, "id"),
            text(p, "title"),
            text(p, "source"),
            text(p, "purpose"),
        );
        let authoritative = match r.req(
            p,
            "authoritative",
            "Add `\"authoritative\": true` or `false`.",
        ) {
            Some(Value::Bool(b)) => Some(*b),
            Some(other) => {
                p.error(CompileError::new(
                    Code::WrongType,
                    r.at("authoritative"),
                    format!(
                        "`authoritative` must be true or false, found {}.",
                        type_name(other)
                    ),
                    "Write `true` or `false`.",
                ));
                None
            }
            None => None,
        };
        let from_package = match r.opt("resolveFrom") {
            None => Some(false),
            Some(v) => one_of(
                p,
                v,
                &r.at("resolveFrom"),
                "`resolveFrom`",
                &["package", "workspace"],
            )
            .map(|s| s == "package"),
        };
        r.finish(p);
        let (
            Some(id),
            Some(title),
            Some(source),
            Some(purpose),
            Some(authoritative),
            Some(from_package),
        ) = (id, title, source, purpose, authoritative, from_package)
        else {
            continue;
        };
        if out.iter().any(|x| x.id == id) {
            p.error(CompileError::new(
                Code::DuplicateId,
                format!("{at}/id"),
                format!("reference id `{id}` is declared twice."),
                "Give each reference a unique id.",
            ));
            continue;
        }
        out.push(WorkflowReference {
            id,
            title,
            source,
            purpose,
            authoritative,
            from_package,
        });
    }
    out
}

/// A step's `outputContract` (`{contractRef, required?}`), the 3.x spelling of
/// `output.contractRef`, merged into `output`. `required: false` (an artifact the step asks for
/// but does not enforce) has no v2 spelling: the contract is then shown as an output hint and the
/// field is kept.
pub(super) fn output_contract(
    p: &mut Parser<'_>,
    f: &Fields<'_>,
    output: Option<Option<SourceOutput>>,
    kept: &mut BTreeMap<String, Value>,
) -> Option<Option<SourceOutput>> {
    let Some(value) = f.opt("outputContract") else {
        return output;
    };
    let at = f.at("outputContract");
    warn_v1(p, FieldLevel::Step, "outputContract", &at);
    let c = Fields::new(
        p,
        value,
        &at,
        "`outputContract`",
        &["contractRef", "required"],
    )?;
    let contract = c
        .req(
            p,
            "contractRef",
            "Add `contractRef`, e.g. `wr.contracts.loop_control`.",
        )
        .and_then(|v| super::prompt::contract_ref(p, v, &c.at("contractRef")));
    let required = match c.opt("required") {
        None => Some(true),
        Some(Value::Bool(b)) => Some(*b),
        Some(other) => {
            p.error(CompileError::new(
                Code::WrongType,
                c.at("required"),
                format!(
                    "`required` must be true or false, found {}.",
                    type_name(other)
                ),
                "Write `true` or `false`.",
            ));
            None
        }
    };
    c.finish(p);
    let (contract, required) = (contract?, required?);
    let mut merged = match output {
        Some(Some(o)) => o,
        Some(None) => return Some(None),
        None => SourceOutput::default(),
    };
    if required {
        if merged.contract_ref.is_some_and(|c| c != contract) {
            p.error(CompileError::new(
                Code::InvalidValue,
                at,
                "`outputContract.contractRef` and `output.contractRef` name different contracts; a step has one.",
                "Keep `output.contractRef` (the v2 spelling) and remove `outputContract`.",
            ));
            return Some(None);
        }
        merged.contract_ref = Some(contract);
    } else {
        kept.insert("outputContract".to_owned(), value.clone());
        merged.hints.insert(
            "artifact".to_owned(),
            format!("If you can, add one artifact that satisfies `{contract}` to `output.artifacts` (asked for, not enforced)."),
        );
    }
    Some(Some(merged))
}

/// Which field holds a v2 loop's id: `loopId`, or the 3.x `id` when only that is written (a
/// `v1_field` warning). Both written and different is an error.
pub(super) fn loop_id_field(p: &mut Parser<'_>, f: &Fields<'_>) -> &'static str {
    match (f.opt("loopId"), f.opt("id")) {
        (None, Some(_)) => {
            warn_v1(p, FieldLevel::Loop, "id", &f.at("id"));
            "id"
        }
        (Some(a), Some(b)) if a != b => {
            p.error(CompileError::new(
                Code::InvalidValue,
                f.at("id"),
                "a loop's `id` and `loopId` are the same field in two spellings and they disagree.",
                "Keep `loopId` (the v2 spelling) and remove `id`.",
            ));
            "loopId"
        }
        _ => "loopId",
    }
}

/// A loop's fields kept verbatim (`title`).
pub(super) fn loop_kept(p: &mut Parser<'_>, f: &Fields<'_>) -> BTreeMap<String, Value> {
    let mut kept = BTreeMap::new();
    if let Some(v) = f.opt("title")
        && super::fields::non_blank(p, v, &f.at("title"), "loop `title`").is_some()
    {
        kept.insert("title".to_owned(), v.clone());
    }
    kept
}

/// `{{wr.bindings.<slotId>}}` in the steps' text is the default of the declared extension point
/// `slotId` (3.x also reads a project's `.workrail/bindings.json` for overrides: the compiler
/// reads no files, so the declared default is what is pinned). An undeclared slot is an error
/// at the string that names it. Returns the steps with every binding replaced, or `None` when
/// nothing needed replacing.
pub(super) fn bind_extension_points(
    p: &mut Parser<'_>,
    steps: &Value,
    extension_points: Option<&Value>,
    pointer: &str,
) -> Option<Value> {
    const OPEN: &str = "{{wr.bindings.";
    let slots: BTreeMap<String, String> = extension_points
        .and_then(Value::as_array)
        .map(|points| {
            points
                .iter()
                .filter_map(|e| {
                    Some((
                        e.get("slotId")?.as_str()?.to_owned(),
                        e.get("default")?.as_str()?.to_owned(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    fn walk(
        p: &mut Parser<'_>,
        value: &mut Value,
        at: &str,
        slots: &BTreeMap<String, String>,
        changed: &mut bool,
    ) {
        match value {
            Value::String(text) if text.contains(OPEN) => {
                let mut out = String::new();
                let mut rest = text.as_str();
                while let Some(start) = rest.find(OPEN) {
                    let after = &rest[start + OPEN.len()..];
                    let Some(end) = after.find("}}") else { break };
                    let slot = &after[..end];
                    out.push_str(&rest[..start]);
                    match slots.get(slot) {
                        Some(default) => out.push_str(default),
                        None => {
                            p.error(CompileError::new(
                                Code::InvalidValue,
                                at,
                                format!("`{{{{wr.bindings.{slot}}}}}` names no declared extension point."),
                                if slots.is_empty() {
                                    format!("Declare it: add `\"extensionPoints\": [{{\"slotId\": \"{slot}\", \"purpose\": \"...\", \"default\": \"<routine or workflow id>\"}}]`.")
                                } else {
                                    format!("Use a declared slot: {}.", slots.keys().cloned().collect::<Vec<_>>().join(", "))
                                },
                            ));
                            out.push_str(&rest[start..start + OPEN.len() + end + 2]);
                        }
                    }
                    rest = &after[end + 2..];
                    *changed = true;
                }
                out.push_str(rest);
                *text = out;
            }
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    walk(p, item, &index(at, i), slots, changed);
                }
            }
            Value::Object(map) => {
                for (key, item) in map.iter_mut() {
                    walk(
                        p,
                        item,
                        &crate::compiler::error::child(at, key),
                        slots,
                        changed,
                    );
                }
            }
            _ => {}
        }
    }
    let mut bound = steps.clone();
    let mut changed = false;
    walk(p, &mut bound, pointer, &slots, &mut changed);
    changed.then_some(bound)
}

//! Parsing a source workflow (`serde_json::Value`) into the authoring model, collecting every
//! problem instead of stopping at the first (each with pointer, message, suggestion and fix).

mod config;
mod content;
mod fields;
pub(crate) mod functions;
mod language;
pub(crate) mod legacy;
pub(crate) mod parallel;
mod prompt;
mod routine;
mod step;

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use workrail_spec::closed::{
    Autonomy, Capability, CapabilityRequirement, LoopDecision, RiskPolicy,
};
use workrail_spec::compiled::{CompiledWarning, FunctionScope, Recommendations};
use workrail_spec::ids::{ConditionId, IdStatus, WorkflowId};

use self::fields::{Fields, array, non_blank, one_of, string};
use super::error::{AutoFix, CompileError, CompileErrorCode as Code, child, index};
use super::ids::{suggest_loop_id, suggest_workflow_id};
use super::source::{ConditionKind, SourceCondition, SourceFeature, SourceWorkflow};
use super::{CompileContext, LegacyIdPolicy, Origin};
use crate::builtins::features::{FEATURE_PREFIX, FeatureId};
use workrail_spec::ids::RESERVED_NAMESPACE;

/// Collects errors while parsing.
pub(crate) struct Parser<'c> {
    pub(crate) errors: Vec<CompileError>,
    /// Warnings of the 3.x spelling (v1-era fields, kept unknown fields, delegations, ignored
    /// operators and fields of the language).
    pub(crate) warnings: Vec<CompiledWarning>,
    /// A legacy-id workflow: fields neither spelling defines are kept with a warning.
    pub(crate) lenient: bool,
    ctx: &'c CompileContext,
    /// Declared condition ids (even those whose kind failed to parse, to avoid cascades).
    conditions: BTreeMap<String, Option<ConditionKind>>,
    /// The workflow id is a legacy (dot-free) id: text the reference language leaves alone
    /// (a `{{ }}` span that is not a marker) is accepted as written.
    pub(crate) legacy_id: bool,
}

impl<'c> Parser<'c> {
    pub(crate) fn error(&mut self, error: CompileError) {
        self.errors.push(error);
    }

    pub(crate) fn warn(&mut self, warning: CompiledWarning) {
        self.warnings.push(warning);
    }

    fn condition(&self, id: &str) -> Option<&Option<ConditionKind>> {
        self.conditions.get(id)
    }
}

const TOP_LEVEL: &[&str] = &[
    "id",
    "name",
    "description",
    "agentRole",
    "recommendations",
    "capabilities",
    "features",
    "conditions",
    "functionDefinitions",
    "steps",
    "assessments",
    "maxAttempts",
];

/// Parses a source workflow. Returns the (possibly partial) model and every problem found, in
/// document order. Items that fail to parse are left out of the model and scalar fields that fail
/// keep a neutral value, so later checks (duplicate ids) still run on everything that did parse;
/// the model is only compiled when the error list is empty.
pub(crate) fn parse(
    source: &Value,
    ctx: &CompileContext,
) -> (Option<SourceWorkflow>, Vec<CompileError>) {
    let mut p = Parser {
        errors: Vec::new(),
        warnings: Vec::new(),
        lenient: false,
        ctx,
        conditions: BTreeMap::new(),
        legacy_id: false,
    };
    let mut parsed = parse_workflow(&mut p, source);
    if let Some(w) = &mut parsed {
        w.language.warnings = std::mem::take(&mut p.warnings);
    }
    (parsed, p.errors)
}

fn parse_workflow(p: &mut Parser<'_>, source: &Value) -> Option<SourceWorkflow> {
    let allowed: Vec<&str> = TOP_LEVEL
        .iter()
        .chain(legacy::WORKFLOW_FIELDS)
        .copied()
        .collect();
    let f = Fields::new(p, source, "", "the workflow", &allowed)?;
    let id = f
        .req(
            p,
            "id",
            "Add `\"id\": \"<namespace>.<name>\"`, e.g. `project.bug_investigation`.",
        )
        .and_then(|v| workflow_id(p, v, &f.at("id")));
    p.lenient = id
        .as_ref()
        .is_some_and(|id| id.id_status() == IdStatus::Legacy);
    let name = f
        .req(p, "name", "Add a short human-readable `name`.")
        .and_then(|v| non_blank(p, v, &f.at("name"), "`name`"))
        .map(str::to_owned);
    let description = f
        .req(
            p,
            "description",
            "Add a one-sentence `description` of what the workflow does.",
        )
        .and_then(|v| non_blank(p, v, &f.at("description"), "`description`"))
        .map(str::to_owned);
    let agent_role = f
        .opt("agentRole")
        .and_then(|v| prompt::free_text(p, v, &f.at("agentRole"), "`agentRole`"));
    let mut recommendations = f
        .opt("recommendations")
        .and_then(|v| recommendations(p, v, &f.at("recommendations")))
        .unwrap_or_default();
    let mut extras = legacy::workflow(p, &f, &mut recommendations);
    let capabilities = f
        .opt("capabilities")
        .map(|v| capabilities(p, v, &f.at("capabilities")))
        .unwrap_or_default();
    let features = f
        .opt("features")
        .map(|v| features(p, v, &f.at("features")))
        .unwrap_or_default();
    // Conditions first: loops refer to them.
    let mut conditions = f
        .opt("conditions")
        .map(|v| conditions(p, v, &f.at("conditions")))
        .unwrap_or_default();
    let functions = f
        .opt("functionDefinitions")
        .and_then(|v| {
            functions::definitions(p, v, &f.at("functionDefinitions"), FunctionScope::Workflow)
        })
        .unwrap_or_default();
    let language = language::workflow_fields(p, &f);
    let mut steps = f
        .req(p, "steps", "Add a non-empty `steps` array.")
        .map(|v| {
            let bound =
                legacy::bind_extension_points(p, v, f.opt("extensionPoints"), &f.at("steps"));
            step::steps(p, bound.as_ref().unwrap_or(v), &f.at("steps"), "`steps`")
        })
        .unwrap_or_default();
    language::finish(p, &mut steps, f.opt("steps"), &mut conditions, &language);
    extras.kept.extend(f.finish_keeping(p));
    // Every warning of the parse (the 3.x spelling's and the language's) travels once.
    extras.warnings = std::mem::take(&mut p.warnings);
    Some(SourceWorkflow {
        id,
        name: name.unwrap_or_default(),
        description: description.unwrap_or_default(),
        agent_role,
        recommendations,
        capabilities,
        features,
        conditions,
        functions,
        steps,
        language,
        extras,
    })
}

fn workflow_id(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<WorkflowId> {
    let raw = string(p, value, pointer, "`id`")?;
    let namespace = match &p.ctx.origin {
        Origin::Bundled => RESERVED_NAMESPACE.to_owned(),
        Origin::NonCore { namespace } => namespace.clone(),
    };
    let fix = |ns: &str| AutoFix::Replace {
        path: pointer.to_owned(),
        value: Value::from(suggest_workflow_id(ns, raw)),
    };
    let Ok(id) = WorkflowId::parse(raw) else {
        p.error(
            CompileError::new(
                Code::InvalidId,
                pointer,
                format!("workflow id `{raw}` is invalid: use `namespace.name` with exactly one dot, each segment matching [a-z][a-z0-9_-]*."),
                format!("Use `{}`.", suggest_workflow_id(&namespace, raw)),
            )
            .with_fix(fix(&namespace)),
        );
        return None;
    };
    match (&p.ctx.origin, id.id_status()) {
        (Origin::Bundled, _) if !id.is_reserved() => {
            p.error(
                CompileError::new(
                    Code::InvalidId,
                    pointer,
                    format!(
                        "bundled workflow id `{raw}` is outside the reserved `wr.*` namespace."
                    ),
                    format!(
                        "Bundled workflows use `wr.*`: use `{}`.",
                        suggest_workflow_id(RESERVED_NAMESPACE, raw)
                    ),
                )
                .with_fix(fix(RESERVED_NAMESPACE)),
            );
            None
        }
        (Origin::NonCore { .. }, _) if id.is_reserved() => {
            p.error(
                CompileError::new(
                    Code::ReservedNamespace,
                    pointer,
                    format!("workflow id `{raw}` uses the `wr.*` namespace, which is reserved for bundled WorkRail workflows (no overrides or shadowing)."),
                    format!("Fork it into your own namespace: use `{}`.", suggest_workflow_id(&namespace, raw)),
                )
                .with_fix(fix(&namespace)),
            );
            None
        }
        (_, IdStatus::Legacy) if p.ctx.legacy_ids == LegacyIdPolicy::Reject => {
            p.error(
                CompileError::new(
                    Code::LegacyId,
                    pointer,
                    format!("workflow id `{raw}` is a legacy (dot-free) id; new and saved workflows must use `namespace.name`."),
                    format!("Use `{}`.", suggest_workflow_id(&namespace, raw)),
                )
                .with_fix(fix(&namespace)),
            );
            None
        }
        (_, status) => {
            p.legacy_id = status == IdStatus::Legacy;
            Some(id)
        }
    }
}

fn recommendations(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<Recommendations> {
    let f = Fields::new(
        p,
        value,
        pointer,
        "`recommendations`",
        &["recommendedAutonomy", "recommendedRiskPolicy"],
    )?;
    let autonomy: Vec<&str> = Autonomy::ALL.iter().map(|a| a.as_str()).collect();
    let risk: Vec<&str> = RiskPolicy::ALL.iter().map(|r| r.as_str()).collect();
    let recommended_autonomy = f.opt("recommendedAutonomy").map(|v| {
        one_of(
            p,
            v,
            &f.at("recommendedAutonomy"),
            "`recommendedAutonomy`",
            &autonomy,
        )
        .and_then(Autonomy::parse)
    });
    let recommended_risk_policy = f.opt("recommendedRiskPolicy").map(|v| {
        one_of(
            p,
            v,
            &f.at("recommendedRiskPolicy"),
            "`recommendedRiskPolicy`",
            &risk,
        )
        .and_then(RiskPolicy::parse)
    });
    f.finish(p);
    Some(Recommendations {
        recommended_autonomy: match recommended_autonomy {
            Some(a) => Some(a?),
            None => None,
        },
        recommended_risk_policy: match recommended_risk_policy {
            Some(r) => Some(r?),
            None => None,
        },
    })
}

fn capabilities(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
) -> BTreeMap<Capability, CapabilityRequirement> {
    let Some(map) = value.as_object() else {
        p.error(CompileError::new(
            Code::WrongType,
            pointer,
            "`capabilities` must be an object mapping a capability to required, preferred or disabled.",
            "Write e.g. `\"capabilities\": {\"web_browsing\": \"preferred\"}`.",
        ));
        return BTreeMap::new();
    };
    let requirements: Vec<&str> = CapabilityRequirement::ALL
        .iter()
        .map(|r| r.as_str())
        .collect();
    let mut out = BTreeMap::new();
    for (key, v) in map {
        let at = child(pointer, key);
        let Some(capability) = Capability::parse(key) else {
            p.error(
                CompileError::new(
                    Code::UnknownField,
                    at.clone(),
                    format!("`{key}` is not a WorkRail capability; the closed set is delegation, web_browsing (baseline tools such as file access or a terminal are never declared)."),
                    "Remove it, or use `delegation` or `web_browsing`.",
                )
                .with_fix(AutoFix::Remove { path: at }),
            );
            continue;
        };
        if let Some(r) = one_of(p, v, &at, "a capability requirement", &requirements)
            .and_then(CapabilityRequirement::parse)
        {
            out.insert(capability, r);
        }
    }
    out
}

fn features(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Vec<SourceFeature> {
    let Some(items) = array(p, value, pointer, "`features`") else {
        return Vec::new();
    };
    let mut out: Vec<SourceFeature> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = index(pointer, i);
        match feature(p, item, &at) {
            Some(f) => {
                if let Some(first) = out.iter().find(|x| x.feature == f.feature) {
                    // Duplicates dedupe by featureId; only a conflicting config is an error.
                    if first.config != f.config {
                        p.error(
                            CompileError::new(
                                Code::ConflictingFeature,
                                at.clone(),
                                format!(
                                    "`{}` is listed twice with different configs (first at {}).",
                                    f.feature.as_str(),
                                    first.pointer
                                ),
                                "Keep one entry with the config you want.",
                            )
                            .with_fix(AutoFix::Remove { path: at }),
                        );
                    }
                    continue;
                }
                out.push(f);
            }
            None => continue,
        }
    }
    out
}

fn feature(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<SourceFeature> {
    let (raw_id, config, id_pointer) = match value {
        Value::String(s) => (s.as_str(), None, pointer.to_owned()),
        Value::Object(_) => {
            let f = Fields::new(p, value, pointer, "a feature entry", &["id", "config"])?;
            let id = f
                .req(
                    p,
                    "id",
                    "Add the feature's `id`, e.g. `wr.features.capabilities`.",
                )
                .and_then(|v| string(p, v, &f.at("id"), "the feature `id`"));
            let config = f.opt("config");
            let id_pointer = f.at("id");
            f.finish(p);
            (id?, config, id_pointer)
        }
        other => {
            p.error(CompileError::new(
                Code::WrongType,
                pointer,
                format!(
                    "a feature entry must be a feature id string or `{{id, config}}`, found {}.",
                    fields::type_name(other)
                ),
                "Write e.g. `\"wr.features.mode_guidance\"`.",
            ));
            return None;
        }
    };
    let Some(feature) = FeatureId::parse(raw_id) else {
        let known: Vec<&str> = FeatureId::ALL.iter().map(|f| f.as_str()).collect();
        let tail = raw_id.rsplit('.').next().unwrap_or(raw_id);
        let near = FeatureId::ALL
            .iter()
            .find(|f| f.as_str() == format!("{FEATURE_PREFIX}{tail}"));
        let mut err = CompileError::new(
            Code::UnknownFeature,
            id_pointer.clone(),
            format!("`{raw_id}` is not a WorkRail feature."),
            format!("Use one of: {}.", known.join(", ")),
        );
        if let Some(near) = near {
            err = err.with_fix(AutoFix::Replace {
                path: id_pointer,
                value: Value::from(near.as_str()),
            });
        }
        p.error(err);
        return None;
    };
    let config = config::validate(p, feature, config, pointer)?;
    Some(SourceFeature {
        feature,
        config,
        pointer: pointer.to_owned(),
    })
}

fn conditions(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Vec<SourceCondition> {
    let Some(items) = array(p, value, pointer, "`conditions`") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        let at = index(pointer, i);
        let parsed = condition(p, item, &at);
        // Record the id (even when the kind is bad) so loops do not report it as unknown.
        if let Some(raw) = item.get("id").and_then(Value::as_str) {
            if !seen.insert(raw.to_owned()) {
                p.error(
                    CompileError::new(
                        Code::DuplicateId,
                        child(&at, "id"),
                        format!("condition id `{raw}` is declared twice."),
                        "Give each condition a unique id.",
                    )
                    .with_fix(AutoFix::Replace {
                        path: child(&at, "id"),
                        value: Value::from(format!("{raw}_{i}")),
                    }),
                );
            }
            p.conditions
                .insert(raw.to_owned(), parsed.as_ref().map(|c| c.kind));
        }
        out.extend(parsed);
    }
    out
}

fn condition(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<SourceCondition> {
    let f = Fields::new(
        p,
        value,
        pointer,
        "a condition",
        &["id", "kind", "continueWhen"],
    )?;
    let id = f
        .req(p, "id", "Add a condition `id` matching [a-z0-9_-]+.")
        .and_then(|v| delimiter_safe(p, v, &f.at("id"), "condition id"))
        .and_then(|raw| ConditionId::parse(&raw).ok());
    let kind = f
        .req(
            p,
            "kind",
            "Add `kind`: always_true, always_false or loop_control.",
        )
        .and_then(|v| {
            one_of(
                p,
                v,
                &f.at("kind"),
                "condition `kind`",
                &["always_false", "always_true", "loop_control"],
            )
        });
    let continue_when = f.opt("continueWhen");
    let kind = match kind {
        Some("loop_control") => match continue_when {
            Some(v) => one_of(
                p,
                v,
                &f.at("continueWhen"),
                "`continueWhen`",
                &["continue", "stop"],
            )
            .and_then(LoopDecision::parse)
            .map(|continue_when| ConditionKind::LoopControl { continue_when }),
            None => {
                p.error(CompileError::new(
                    Code::MissingField,
                    f.at("continueWhen"),
                    "a `loop_control` condition needs `continueWhen` (continue or stop): the loop continues while the latest loop decision equals it.",
                    "Add `\"continueWhen\": \"continue\"`.",
                )
                .with_fix(AutoFix::Add { path: f.at("continueWhen"), value: Value::from("continue") }));
                None
            }
        },
        Some(other) => {
            if continue_when.is_some() {
                p.error(
                    CompileError::new(
                        Code::UnknownField,
                        f.at("continueWhen"),
                        format!("`continueWhen` only applies to `loop_control` conditions, not `{other}`."),
                        "Remove `continueWhen`.",
                    )
                    .with_fix(AutoFix::Remove { path: f.at("continueWhen") }),
                );
                None
            } else if other == "always_true" {
                Some(ConditionKind::AlwaysTrue)
            } else {
                Some(ConditionKind::AlwaysFalse)
            }
        }
        None => None,
    };
    let pointer = f.pointer().to_owned();
    f.finish(p);
    Some(SourceCondition {
        id: id?,
        kind: kind?,
        pointer,
    })
}

/// Reads a delimiter-safe id (`[a-z0-9_-]+`, at most 64 bytes); reports `invalid_id` with the
/// deterministic auto-fix otherwise.
pub(super) fn delimiter_safe(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    what: &str,
) -> Option<String> {
    let raw = string(p, value, pointer, what)?;
    if ConditionId::parse(raw).is_ok() {
        return Some(raw.to_owned());
    }
    let fixed = suggest_loop_id(raw);
    p.error(
        CompileError::new(
            Code::InvalidId,
            pointer,
            format!(
                "{what} `{raw}` must match [a-z0-9_-]+ (1 to 64 characters; no `@`, `/` or `:`)."
            ),
            format!("Use `{fixed}`."),
        )
        .with_fix(AutoFix::Replace {
            path: pointer.to_owned(),
            value: Value::from(fixed),
        }),
    );
    None
}

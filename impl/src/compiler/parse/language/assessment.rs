//! Workflow `assessments`, a step's `assessmentRefs` and `assessmentConsequences`, and the
//! checks that tie them together once the whole workflow is parsed (decision D143).

use std::collections::BTreeSet;

use serde_json::Value;

use crate::compiler::error::{AutoFix, CompileError, CompileErrorCode as Code, child, index};
use crate::compiler::parse::Parser;
use crate::compiler::parse::fields::{Fields, array, non_blank, one_of};
use workrail_spec::compiled::{AssessmentConsequence, AssessmentDefinition, AssessmentDimension};

use super::boolean;
use crate::compiler::source::{NormalStep, SourceStep};

pub(crate) fn string_list(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    what: &str,
) -> Option<Vec<String>> {
    let items = array(p, value, pointer, what)?;
    let mut out: Vec<String> = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        let at = index(pointer, i);
        match non_blank(p, item, &at, what) {
            Some(s) if out.iter().any(|o| o == s) => {
                p.error(
                    CompileError::new(
                        Code::DuplicateId,
                        at.clone(),
                        format!("{what} lists `{s}` twice."),
                        "Remove the repeat.",
                    )
                    .with_fix(AutoFix::Remove { path: at }),
                );
                ok = false;
            }
            Some(s) => out.push(s.to_owned()),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

pub(crate) fn assessment_refs(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
) -> Option<Vec<String>> {
    let refs = string_list(p, value, pointer, "`assessmentRefs`")?;
    if refs.is_empty() {
        p.error(
            CompileError::new(
                Code::InvalidValue,
                pointer,
                "`assessmentRefs` is empty.",
                "Name at least one assessment declared in the workflow's `assessments`, or remove the field.",
            )
            .with_fix(AutoFix::Remove {
                path: pointer.to_owned(),
            }),
        );
        return None;
    }
    Some(refs)
}

pub(crate) fn consequences(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
) -> Option<Vec<AssessmentConsequence>> {
    let items = array(p, value, pointer, "`assessmentConsequences`")?;
    let mut out = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        match consequence(p, item, &index(pointer, i)) {
            Some(c) => out.push(c),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn consequence(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<AssessmentConsequence> {
    let f = Fields::new(
        p,
        value,
        pointer,
        "an assessment consequence",
        &["when", "effect"],
    )?;
    let when = f
        .req(p, "when", "Add `when: {\"anyEqualsLevel\": \"<level>\"}`.")
        .and_then(|v| {
            let w = Fields::new(
                p,
                v,
                &f.at("when"),
                "a consequence's `when`",
                &["anyEqualsLevel", "forAssessment"],
            )?;
            let level = w
                .req(
                    p,
                    "anyEqualsLevel",
                    "Add the level that triggers the follow-up.",
                )
                .and_then(|v| non_blank(p, v, &w.at("anyEqualsLevel"), "`anyEqualsLevel`"))
                .map(str::to_owned);
            let scoped = w.opt("forAssessment").map(|v| {
                non_blank(p, v, &w.at("forAssessment"), "`forAssessment`").map(str::to_owned)
            });
            w.finish(p);
            Some((
                level?,
                match scoped {
                    Some(s) => Some(s?),
                    None => None,
                },
            ))
        });
    let guidance = f
        .req(
            p,
            "effect",
            "Add `effect: {\"kind\": \"require_followup\", \"guidance\": \"...\"}`.",
        )
        .and_then(|v| {
            let e = Fields::new(
                p,
                v,
                &f.at("effect"),
                "a consequence's `effect`",
                &["kind", "guidance"],
            )?;
            let kind = e
                .req(p, "kind", "Add `\"kind\": \"require_followup\"`.")
                .and_then(|v| {
                    one_of(
                        p,
                        v,
                        &e.at("kind"),
                        "a consequence's `effect.kind`",
                        &["require_followup"],
                    )
                });
            let guidance = e
                .req(p, "guidance", "Add the follow-up `guidance` for the agent.")
                .and_then(|v| non_blank(p, v, &e.at("guidance"), "`guidance`"))
                .map(str::to_owned);
            e.finish(p);
            kind?;
            guidance
        });
    f.finish(p);
    let (level, scoped) = when?;
    Some(AssessmentConsequence {
        any_equals_level: level,
        for_assessment: scoped,
        guidance: guidance?,
    })
}

pub(crate) fn assessments(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
) -> Option<Vec<AssessmentDefinition>> {
    let items = array(p, value, pointer, "`assessments`")?;
    let mut out: Vec<AssessmentDefinition> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = index(pointer, i);
        let Some(a) = assessment(p, item, &at) else {
            continue;
        };
        if out.iter().any(|o| o.assessment_id == a.assessment_id) {
            p.error(CompileError::new(
                Code::DuplicateId,
                child(&at, "id"),
                format!("assessment id `{}` is declared twice.", a.assessment_id),
                "Give each assessment its own id.",
            ));
            continue;
        }
        out.push(a);
    }
    out.sort_by(|a, b| a.assessment_id.cmp(&b.assessment_id));
    Some(out)
}

fn bounded_text(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    what: &str,
    max_chars: usize,
) -> Option<String> {
    let s = non_blank(p, value, pointer, what)?;
    if s.chars().count() > max_chars {
        p.error(CompileError::new(
            Code::InvalidValue,
            pointer,
            format!("{what} is longer than {max_chars} characters."),
            format!("Shorten {what} to at most {max_chars} characters."),
        ));
        return None;
    }
    Some(s.to_owned())
}

fn assessment(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<AssessmentDefinition> {
    let f = Fields::new(
        p,
        value,
        pointer,
        "an assessment",
        &["id", "purpose", "dimensions"],
    )?;
    let id = f
        .req(p, "id", "Add the assessment's `id`.")
        .and_then(|v| bounded_text(p, v, &f.at("id"), "an assessment `id`", 64));
    let purpose = f
        .req(
            p,
            "purpose",
            "Add what the assessment is for, as `purpose`.",
        )
        .and_then(|v| bounded_text(p, v, &f.at("purpose"), "an assessment's `purpose`", 256));
    let dimensions = f
        .req(p, "dimensions", "Add at least one dimension.")
        .and_then(|v| {
            let at = f.at("dimensions");
            let items = array(p, v, &at, "`dimensions`")?;
            if items.is_empty() {
                p.error(CompileError::new(
                    Code::InvalidValue,
                    at.clone(),
                    "an assessment needs at least one dimension.",
                    "Add a dimension `{id, purpose, levels}`.",
                ));
                return None;
            }
            let mut out: Vec<AssessmentDimension> = Vec::new();
            let mut ok = true;
            for (i, item) in items.iter().enumerate() {
                let at = index(&at, i);
                match dimension(p, item, &at) {
                    Some(d) if out.iter().any(|o| o.dimension_id == d.dimension_id) => {
                        p.error(CompileError::new(
                            Code::DuplicateId,
                            child(&at, "id"),
                            format!("dimension id `{}` is used twice.", d.dimension_id),
                            "Give each dimension of an assessment its own id.",
                        ));
                        ok = false;
                    }
                    Some(d) => out.push(d),
                    None => ok = false,
                }
            }
            ok.then_some(out)
        });
    f.finish(p);
    Some(AssessmentDefinition {
        assessment_id: id?,
        purpose: purpose?,
        dimensions: dimensions?,
    })
}

fn dimension(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<AssessmentDimension> {
    let f = Fields::new(
        p,
        value,
        pointer,
        "an assessment dimension",
        &["id", "purpose", "levels", "required"],
    )?;
    let id = f
        .req(p, "id", "Add the dimension's `id`.")
        .and_then(|v| bounded_text(p, v, &f.at("id"), "a dimension `id`", 64));
    let purpose = f
        .req(p, "purpose", "Add what the dimension rates, as `purpose`.")
        .and_then(|v| bounded_text(p, v, &f.at("purpose"), "a dimension's `purpose`", 256));
    let levels = f
        .req(
            p,
            "levels",
            "Add at least two `levels`, e.g. [\"low\", \"high\"].",
        )
        .and_then(|v| string_list(p, v, &f.at("levels"), "`levels`"));
    let levels = match levels {
        Some(l) if l.len() < 2 => {
            p.error(CompileError::new(
                Code::InvalidValue,
                f.at("levels"),
                "a dimension needs at least two levels.",
                "Add the levels an agent chooses from, e.g. [\"low\", \"medium\", \"high\"].",
            ));
            None
        }
        other => other,
    };
    let required = f
        .opt("required")
        .map(|v| boolean(p, v, &f.at("required"), "a dimension's `required`"));
    f.finish(p);
    Some(AssessmentDimension {
        dimension_id: id?,
        purpose: purpose?,
        levels: levels?,
        required: required.unwrap_or(Some(true))?,
    })
}

pub(crate) fn check_assessments(
    p: &mut Parser<'_>,
    steps: &[SourceStep],
    declared: &[AssessmentDefinition],
) {
    for step in steps {
        match step {
            SourceStep::Normal(n) => check_step_assessments(p, n, declared),
            SourceStep::Loop(l) => check_assessments(p, &l.body, declared),
            SourceStep::Group(steps) => check_assessments(p, steps, declared),
            SourceStep::TemplateCall(_) => {}
        }
    }
}

fn check_step_assessments(p: &mut Parser<'_>, n: &NormalStep, declared: &[AssessmentDefinition]) {
    let lang = &n.language;
    let at = |field: &str| child(&n.pointer, field);
    let names: Vec<&str> = declared.iter().map(|a| a.assessment_id.as_str()).collect();
    for (i, r) in lang.assessment_refs.iter().enumerate() {
        if !names.contains(&r.as_str()) {
            p.error(CompileError::new(
                Code::InvalidValue,
                index(&at("assessmentRefs"), i),
                format!("step `{}` references assessment `{r}`, which the workflow's `assessments` does not declare.", n.id),
                if names.is_empty() {
                    "Declare it in the workflow's `assessments`, or remove the reference.".to_owned()
                } else {
                    format!("Use one of: {}.", names.join(", "))
                },
            ));
        }
    }
    if lang.assessment_consequences.is_empty() {
        return;
    }
    if lang.assessment_refs.is_empty() {
        p.error(CompileError::new(
            Code::MissingField,
            at("assessmentRefs"),
            format!("step `{}` declares `assessmentConsequences` but no `assessmentRefs`: nothing would be assessed.", n.id),
            "Add `assessmentRefs` naming the assessment the consequences read.",
        ));
        return;
    }
    let mut seen = BTreeSet::new();
    for (i, c) in lang.assessment_consequences.iter().enumerate() {
        let c_at = index(&at("assessmentConsequences"), i);
        let scope: Vec<&AssessmentDefinition> = declared
            .iter()
            .filter(|a| match &c.for_assessment {
                Some(only) => &a.assessment_id == only,
                None => lang.assessment_refs.contains(&a.assessment_id),
            })
            .collect();
        if let Some(only) = &c.for_assessment
            && !lang.assessment_refs.contains(only)
        {
            p.error(CompileError::new(
                Code::InvalidValue,
                child(&child(&c_at, "when"), "forAssessment"),
                format!("`forAssessment` `{only}` is not one of this step's `assessmentRefs`."),
                format!("Use one of: {}.", lang.assessment_refs.join(", ")),
            ));
            continue;
        }
        let levels: BTreeSet<&str> = scope
            .iter()
            .flat_map(|a| a.dimensions.iter().flat_map(|d| d.levels.iter()))
            .map(String::as_str)
            .collect();
        if !levels.contains(c.any_equals_level.as_str()) {
            p.error(CompileError::new(
                Code::InvalidValue,
                child(&child(&c_at, "when"), "anyEqualsLevel"),
                format!(
                    "level `{}` is not a level of any dimension of the assessments this consequence reads.",
                    c.any_equals_level
                ),
                format!(
                    "Use one of: {}.",
                    levels.iter().copied().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        if !seen.insert((c.any_equals_level.clone(), c.for_assessment.clone())) {
            p.error(
                CompileError::new(
                    Code::DuplicateId,
                    c_at.clone(),
                    "this consequence repeats the trigger (level and assessment) of an earlier one.",
                    "Merge the two consequences' guidance into one.",
                )
                .with_fix(AutoFix::Remove { path: c_at }),
            );
        }
    }
}

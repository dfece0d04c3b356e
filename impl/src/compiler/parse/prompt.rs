//! Prompt values, prompt blocks and step outputs: where refs may appear (locks §9 "Allowed
//! placements"), no `{{ }}` templating beyond context markers (decision D140), and only
//! WorkRail-owned refs and contract packs.

use std::collections::BTreeMap;

use serde_json::Value;

use super::Parser;
use super::fields::{Fields, array, string, type_name};
use crate::builtins::contracts::{self, CONTRACT_PREFIX};
use crate::builtins::refs::{self, REF_PREFIX};
use crate::compiler::error::{AutoFix, CompileError, CompileErrorCode as Code, child, index};
use crate::compiler::source::{PromptPart, PromptValue, SourceBlocks, SourceOutput};

const BLOCKS: &[&str] = &[
    "goal",
    "constraints",
    "procedure",
    "outputRequired",
    "verify",
];

/// Reports `{{ ... }}` spans other than context markers (`{{key}}`, `{{key.path}}`, rendered
/// from the pending step's frozen bindings, decision D140): WorkRail evaluates no expressions and
/// includes nothing, so such a span would reach the agent literally. A legacy-id workflow keeps
/// them as written, as the language it comes from does.
fn check_templating(p: &mut Parser<'_>, text: &str, pointer: &str) -> bool {
    let Some(span) = crate::engine::render::non_marker_span(text) else {
        return true;
    };
    if p.legacy_id {
        return true;
    }
    p.error(CompileError::new(
        Code::Templating,
        pointer,
        format!("`{span}` is not a context marker: WorkRail substitutes only `{{{{key}}}}` and `{{{{key.path}}}}` (a context key or a loop variable, dot paths into objects) and evaluates no expressions, so it would reach the agent literally."),
        "Write a plain marker such as `{{ticketId}}`, name the value in words, or embed canonical WorkRail text with a `{\"kind\": \"ref\", \"refId\": \"wr.refs.*\"}` part in promptBlocks.",
    ));
    false
}

/// Agent-visible text where refs are not allowed (`agentRole`, `outputRequired`, hints, titles).
pub(super) fn free_text(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    what: &str,
) -> Option<String> {
    if let Some(items) = value.as_array()
        && items
            .iter()
            .any(|part| part.get("kind").and_then(Value::as_str) == Some("ref"))
    {
        p.error(placement_error(pointer, what));
        return None;
    }
    let text = string(p, value, pointer, what)?;
    if text.trim().is_empty() {
        p.error(CompileError::new(
            Code::InvalidValue,
            pointer,
            format!("{what} must not be empty."),
            format!("Write a non-empty {what} or remove the field."),
        ));
        return None;
    }
    check_templating(p, text, pointer).then(|| text.to_owned())
}

fn placement_error(pointer: &str, what: &str) -> CompileError {
    CompileError::new(
        Code::RefPlacement,
        pointer,
        format!(
            "refs are not allowed in {what}: they belong only in promptBlocks goal, constraints, procedure and verify (to keep prompts instruction-first)."
        ),
        "Move the `{\"kind\": \"ref\"}` part into `promptBlocks.constraints`, `procedure`, `verify` or `goal`, and write plain text here.",
    )
}

/// `PromptValue = string | [PromptPart, ...]` (non-empty). With `refs_allowed == false` a ref
/// part is a placement error.
pub(super) fn prompt_value(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    what: &str,
    refs_allowed: bool,
) -> Option<PromptValue> {
    match value {
        Value::String(_) => free_text(p, value, pointer, what).map(PromptValue::Text),
        Value::Array(items) => {
            if items.is_empty() {
                p.error(CompileError::new(
                    Code::InvalidValue,
                    pointer,
                    format!("{what} is an empty list of prompt parts."),
                    "Write a string, or a non-empty list of `{\"kind\": \"text\", \"text\": \"...\"}` and `{\"kind\": \"ref\", \"refId\": \"wr.refs.*\"}` parts.",
                ));
                return None;
            }
            let mut parts = Vec::new();
            let mut ok = true;
            for (i, item) in items.iter().enumerate() {
                match prompt_part(p, item, &index(pointer, i), what, refs_allowed) {
                    Some(part) => parts.push(part),
                    None => ok = false,
                }
            }
            ok.then_some(PromptValue::Parts(parts))
        }
        other => {
            p.error(CompileError::new(
                Code::WrongType,
                pointer,
                format!("{what} must be a string or a list of prompt parts, found {}.", type_name(other)),
                "Write a string, or a list of `{\"kind\": \"text\", ...}` / `{\"kind\": \"ref\", ...}` parts.",
            ));
            None
        }
    }
}

fn prompt_part(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    what: &str,
    refs_allowed: bool,
) -> Option<PromptPart> {
    let f = Fields::new(
        p,
        value,
        pointer,
        "a prompt part",
        &["kind", "text", "refId"],
    )?;
    let kind = f
        .req(
            p,
            "kind",
            "Add `\"kind\": \"text\"` or `\"kind\": \"ref\"`.",
        )
        .and_then(|v| {
            super::fields::one_of(p, v, &f.at("kind"), "prompt part `kind`", &["ref", "text"])
        });
    let part = match kind {
        Some("text") => {
            if f.opt("refId").is_some() {
                p.error(
                    CompileError::new(
                        Code::UnknownField,
                        f.at("refId"),
                        "a text part has no `refId`.",
                        "Remove `refId`, or make the part `\"kind\": \"ref\"`.",
                    )
                    .with_fix(AutoFix::Remove {
                        path: f.at("refId"),
                    }),
                );
            }
            f.req(p, "text", "Add the part's `text`.")
                .and_then(|v| free_text(p, v, &f.at("text"), "a text part"))
                .map(PromptPart::Text)
        }
        Some(_) => {
            if f.opt("text").is_some() {
                p.error(
                    CompileError::new(
                        Code::UnknownField,
                        f.at("text"),
                        "a ref part has no `text`: the text comes from the ref.",
                        "Remove `text`, or make the part `\"kind\": \"text\"`.",
                    )
                    .with_fix(AutoFix::Remove { path: f.at("text") }),
                );
            }
            if !refs_allowed {
                p.error(placement_error(pointer, what));
                None
            } else {
                f.req(p, "refId", "Add the `refId` (`wr.refs.*`).")
                    .and_then(|v| ref_id(p, v, &f.at("refId")))
                    .map(PromptPart::Ref)
            }
        }
        None => None,
    };
    f.finish(p);
    part
}

fn ref_id(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<&'static str> {
    let raw = string(p, value, pointer, "`refId`")?;
    if raw.contains("{{") || raw.contains("}}") {
        p.error(CompileError::new(
            Code::Templating,
            pointer,
            format!("`refId` `{raw}` contains `{{{{ }}}}` templating; ref ids are fixed `wr.refs.*` names."),
            "Name one ref from the builtins catalog, e.g. `wr.refs.append_only_truth`.",
        ));
        return None;
    }
    if let Some(snippet) = refs::find(raw) {
        return Some(snippet.ref_id);
    }
    let known: Vec<&str> = refs::REFS.iter().map(|r| r.ref_id).collect();
    let is_include = !raw.starts_with(REF_PREFIX)
        && (raw.contains('/') || raw.contains('\\') || raw.contains(':') || raw.ends_with(".md"));
    let message = if is_include {
        format!(
            "`{raw}` looks like a file path or URL; refs cannot include files or URLs, only WorkRail-owned `wr.refs.*` snippets."
        )
    } else {
        format!("`{raw}` is not a WorkRail ref.")
    };
    let tail = raw.rsplit(['.', '/']).next().unwrap_or(raw);
    let mut err = CompileError::new(
        Code::UnknownRef,
        pointer,
        message,
        format!("Use one of: {}.", known.join(", ")),
    );
    if let Some(near) = refs::find(&format!("{REF_PREFIX}{tail}")) {
        err = err.with_fix(AutoFix::Replace {
            path: pointer.to_owned(),
            value: Value::from(near.ref_id),
        });
    }
    p.error(err);
    None
}

fn value_list(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    what: &str,
) -> Option<Vec<PromptValue>> {
    let items = array(p, value, pointer, what)?;
    let mut out = Vec::new();
    let mut ok = true;
    for (i, item) in items.iter().enumerate() {
        match prompt_value(p, item, &index(pointer, i), what, true) {
            Some(v) => out.push(v),
            None => ok = false,
        }
    }
    ok.then_some(out)
}

fn text_map(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
    what: &str,
) -> Option<BTreeMap<String, String>> {
    let Some(map) = value.as_object() else {
        p.error(CompileError::new(
            Code::WrongType,
            pointer,
            format!(
                "{what} must be an object of strings, found {}.",
                type_name(value)
            ),
            format!("Write {what} as e.g. `{{\"notesMarkdown\": \"...\"}}`."),
        ));
        return None;
    };
    let mut out = BTreeMap::new();
    let mut ok = true;
    for (key, v) in map {
        match free_text(p, v, &child(pointer, key), what) {
            Some(text) => {
                out.insert(key.clone(), text);
            }
            None => ok = false,
        }
    }
    ok.then_some(out)
}

/// `promptBlocks`.
pub(super) fn blocks(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<SourceBlocks> {
    let f = Fields::new(p, value, pointer, "`promptBlocks`", BLOCKS)?;
    if BLOCKS.iter().all(|b| f.opt(b).is_none()) {
        p.error(CompileError::new(
            Code::MissingField,
            pointer,
            "`promptBlocks` has no blocks.",
            "Add at least `goal` (and usually `procedure`), or use a plain `prompt` string.",
        ));
    }
    let goal = f
        .opt("goal")
        .map(|v| prompt_value(p, v, &f.at("goal"), "`promptBlocks.goal`", true));
    let constraints = f
        .opt("constraints")
        .map(|v| value_list(p, v, &f.at("constraints"), "`promptBlocks.constraints`"));
    let procedure = f
        .opt("procedure")
        .map(|v| value_list(p, v, &f.at("procedure"), "`promptBlocks.procedure`"));
    let output_required = f.opt("outputRequired").map(|v| {
        text_map(
            p,
            v,
            &f.at("outputRequired"),
            "`promptBlocks.outputRequired`",
        )
    });
    let verify = f
        .opt("verify")
        .map(|v| value_list(p, v, &f.at("verify"), "`promptBlocks.verify`"));
    let pointer = f.pointer().to_owned();
    f.finish(p);
    Some(SourceBlocks {
        goal: match goal {
            Some(g) => Some(g?),
            None => None,
        },
        constraints: constraints.unwrap_or(Some(Vec::new()))?,
        procedure: procedure.unwrap_or(Some(Vec::new()))?,
        output_required: output_required.unwrap_or(Some(BTreeMap::new()))?,
        verify: verify.unwrap_or(Some(Vec::new()))?,
        pointer,
    })
}

/// A step's `output`.
pub(super) fn output(p: &mut Parser<'_>, value: &Value, pointer: &str) -> Option<SourceOutput> {
    let f = Fields::new(
        p,
        value,
        pointer,
        "a step `output`",
        &["contractRef", "hints"],
    )?;
    let contract_ref = f
        .opt("contractRef")
        .map(|v| contract_ref(p, v, &f.at("contractRef")));
    let hints = f
        .opt("hints")
        .map(|v| text_map(p, v, &f.at("hints"), "`output.hints`"));
    f.finish(p);
    Some(SourceOutput {
        contract_ref: match contract_ref {
            Some(c) => Some(c?),
            None => None,
        },
        hints: hints.unwrap_or(Some(BTreeMap::new()))?,
    })
}

pub(super) fn contract_ref(
    p: &mut Parser<'_>,
    value: &Value,
    pointer: &str,
) -> Option<&'static str> {
    let raw = string(p, value, pointer, "`contractRef`")?;
    if let Some(pack) = contracts::find(raw) {
        if !pack.requirable {
            p.error(
                CompileError::new(
                    Code::InvalidValue,
                    pointer,
                    format!(
                        "`{raw}` cannot be required: agents report a `{}` artifact on any step when it happens, and a step cannot demand one on every acknowledgement.",
                        pack.artifact_kind
                    ),
                    "Remove `contractRef`; to mark a decision that only the user may take, list it in the step's `nonAssumableChoices`.",
                )
                .with_fix(AutoFix::Remove {
                    path: pointer.to_owned(),
                }),
            );
            return None;
        }
        return Some(pack.contract_ref);
    }
    let known: Vec<&str> = contracts::CONTRACTS
        .iter()
        .map(|c| c.contract_ref)
        .collect();
    let (code, message) = if raw.starts_with(CONTRACT_PREFIX) {
        (
            Code::UnknownContract,
            format!("`{raw}` is not a WorkRail contract pack."),
        )
    } else {
        (
            Code::InlineSchema,
            format!(
                "`contractRef` `{raw}` points outside the WorkRail contract packs; schemas from project files, URLs or registries are not allowed."
            ),
        )
    };
    let tail = raw.rsplit(['.', '/']).next().unwrap_or(raw);
    let mut err = CompileError::new(
        code,
        pointer,
        message,
        format!("Use one of: {}.", known.join(", ")),
    );
    if let Some(near) = contracts::find(&format!("{CONTRACT_PREFIX}{tail}")) {
        err = err.with_fix(AutoFix::Replace {
            path: pointer.to_owned(),
            value: Value::from(near.contract_ref),
        });
    }
    p.error(err);
    None
}

//! Phase 4: refs resolved and embedded (with provenance and byte budgets), then the
//! deterministic text-first `pending.prompt` rendered from the resolved blocks.
//!
//! Render format (the exact bytes are part of `workflowHash`):
//! sections in the order Role, the authored `prompt` text (no heading), Goal, Constraints,
//! Procedure, Output required, Verify; each present section is `## <Heading>\n<body>`;
//! sections are separated by one blank line; no trailing newline. List bodies: constraints,
//! output and verify items are `- item`, procedure items are `1. item`; continuation lines of a
//! multi-line item are indented to the item text. Output lists `outputRequired` entries
//! (`- key: text`, keys in lexical order) and then `output.hints` (`- hint (key): text`).
//! A prompt value made of parts joins the parts with one space. A step that references function
//! definitions ends with `## Functions` (see `functions.rs`).

use std::collections::BTreeMap;

use workrail_spec::compiled::{RefProvenance, ResolvedPromptBlocks};

use super::error::{CompileError, CompileErrorCode as Code};
use super::ir::StepIr;
use super::source::{PromptPart, PromptValue};
use crate::builtins::refs::{self, REF_SNIPPET_MAX_BYTES, REF_STEP_MAX_BYTES, RefSnippet};

/// A step's resolved blocks, rendered prompt and ref provenance.
pub(crate) struct Rendered {
    pub blocks: Option<ResolvedPromptBlocks>,
    pub prompt: String,
    pub refs: Vec<RefProvenance>,
}

/// Tracks the refs one step embeds.
struct RefUse {
    injected_bytes: usize,
    by_id: BTreeMap<&'static str, &'static RefSnippet>,
}

/// Checks one snippet against the per-snippet budget (compiler enforced, locks §9).
pub(crate) fn check_snippet(
    snippet: &RefSnippet,
    max_bytes: usize,
    pointer: &str,
) -> Result<(), Box<CompileError>> {
    if snippet.bytes() > max_bytes {
        return Err(Box::new(CompileError::new(
            Code::RefBudgetExceeded,
            pointer,
            format!(
                "ref `{}` is {} bytes, over the per-snippet budget of {max_bytes} bytes.",
                snippet.ref_id,
                snippet.bytes()
            ),
            "This is a WorkRail builtins defect; use another ref until it is fixed.",
        )));
    }
    Ok(())
}

fn resolve_value(value: &PromptValue, uses: &mut RefUse) -> String {
    match value {
        PromptValue::Text(text) => text.clone(),
        PromptValue::Parts(parts) => parts
            .iter()
            .map(|part| match part {
                PromptPart::Text(text) => text.clone(),
                PromptPart::Ref(id) => match refs::find(id) {
                    Some(snippet) => {
                        uses.injected_bytes += snippet.bytes();
                        uses.by_id.insert(snippet.ref_id, snippet);
                        snippet.text.to_owned()
                    }
                    // Parsing admits only known ids; an unknown one contributes nothing.
                    None => String::new(),
                },
            })
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// Resolves and renders one step.
pub(crate) fn render_step(step: &StepIr) -> Result<Rendered, Vec<CompileError>> {
    let mut uses = RefUse {
        injected_bytes: 0,
        by_id: BTreeMap::new(),
    };
    let b = &step.blocks;
    let mut list = |values: &[PromptValue]| -> Vec<String> {
        values.iter().map(|v| resolve_value(v, &mut uses)).collect()
    };
    let constraints = list(&b.constraints);
    let procedure = list(&b.procedure);
    let verify = list(&b.verify);
    let goal = b.goal.as_ref().map(|g| resolve_value(g, &mut uses));
    let blocks = ResolvedPromptBlocks {
        goal,
        constraints,
        procedure,
        output_required: b.output_required.clone(),
        verify,
    };
    let mut errors = Vec::new();
    for snippet in uses.by_id.values() {
        if let Err(e) = check_snippet(snippet, REF_SNIPPET_MAX_BYTES, &b.pointer) {
            errors.push(*e);
        }
    }
    if uses.injected_bytes > REF_STEP_MAX_BYTES {
        errors.push(CompileError::new(
            Code::RefBudgetExceeded,
            b.pointer.clone(),
            format!(
                "step `{}` embeds {} bytes of `wr.refs.*` text, over the per-step cap of {REF_STEP_MAX_BYTES} bytes.",
                step.step_id, uses.injected_bytes
            ),
            "Use fewer refs in this step (each use counts), or split the step.",
        ));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let body = render_prompt(None, step.text.as_deref(), &blocks, &step.hints);
    let mut prompt = super::content::compose(step.agent_role.as_deref(), body, &step.extras);
    // The referenced function definitions close the prompt (locks §5): every response that shows
    // the step, a rehydration's included, carries what its function calls mean.
    let functions = super::functions::step_section(&step.functions);
    if !functions.is_empty() {
        if !prompt.is_empty() {
            prompt.push_str("\n\n");
        }
        prompt.push_str(&functions);
    }
    let refs = uses
        .by_id
        .values()
        .map(|s| RefProvenance {
            ref_id: s.ref_id.to_owned(),
            ref_content_hash: s.content_hash(),
            bytes: s.bytes() as u64,
        })
        .collect();
    let empty = blocks == ResolvedPromptBlocks::default();
    Ok(Rendered {
        blocks: (!empty).then_some(blocks),
        prompt,
        refs,
    })
}

fn item(prefix: &str, text: &str) -> String {
    let indent = " ".repeat(prefix.len());
    let mut out = String::new();
    for (i, line) in text.lines().enumerate() {
        if i == 0 {
            out.push_str(prefix);
        } else {
            out.push('\n');
            if !line.is_empty() {
                out.push_str(&indent);
            }
        }
        out.push_str(line);
    }
    if out.is_empty() {
        out.push_str(prefix.trim_end());
    }
    out
}

/// Renders the text-first prompt (see the module docs for the exact format).
pub fn render_prompt(
    agent_role: Option<&str>,
    text: Option<&str>,
    blocks: &ResolvedPromptBlocks,
    hints: &BTreeMap<String, String>,
) -> String {
    let mut sections: Vec<String> = Vec::new();
    if let Some(role) = agent_role {
        sections.push(format!("## Role\n{role}"));
    }
    if let Some(text) = text {
        sections.push(text.to_owned());
    }
    if let Some(goal) = &blocks.goal {
        sections.push(format!("## Goal\n{goal}"));
    }
    let bullets = |items: &[String]| -> String {
        items
            .iter()
            .map(|i| item("- ", i))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if !blocks.constraints.is_empty() {
        sections.push(format!("## Constraints\n{}", bullets(&blocks.constraints)));
    }
    if !blocks.procedure.is_empty() {
        let numbered: Vec<String> = blocks
            .procedure
            .iter()
            .enumerate()
            .map(|(i, p)| item(&format!("{}. ", i + 1), p))
            .collect();
        sections.push(format!("## Procedure\n{}", numbered.join("\n")));
    }
    let mut outputs: Vec<String> = blocks
        .output_required
        .iter()
        .map(|(k, v)| item("- ", &format!("{k}: {v}")))
        .collect();
    outputs.extend(
        hints
            .iter()
            .map(|(k, v)| item("- ", &format!("hint ({k}): {v}"))),
    );
    if !outputs.is_empty() {
        sections.push(format!("## Output required\n{}", outputs.join("\n")));
    }
    if !blocks.verify.is_empty() {
        sections.push(format!("## Verify\n{}", bullets(&blocks.verify)));
    }
    sections.join("\n\n")
}

//! Function definitions (locks §5 "Function definitions in rewind/resumption context"): which
//! definitions a step references, resolved through its scopes, and their bounded rendering into
//! `pending.prompt`.
//!
//! A step references a function when it lists it in `functionReferences` or when its own prompt
//! text calls it as `name()`. The name resolves to the nearest definition: the step's own, then
//! the enclosing loops' (innermost first), then the workflow's. Included definitions are ordered
//! by `(scope precedence step, loop, workflow; name)`.

use std::collections::{BTreeMap, BTreeSet};

use workrail_spec::budget::{
    FUNCTION_DEFINITIONS_MAX_BYTES, TRUNCATION_MARKER, truncate_with_marker,
};
use workrail_spec::compiled::{CompiledFunction, CompiledWarning, CompiledWarningCode};

use super::error::{CompileError, CompileErrorCode as Code};
use super::source::{FunctionRef, SourceFunction};

/// The definitions visible at one point of the step tree, nearest scope first.
#[derive(Default, Clone)]
pub(crate) struct Scopes<'a> {
    /// Outermost first: the workflow's, then each enclosing loop's.
    layers: Vec<&'a [SourceFunction]>,
}

impl<'a> Scopes<'a> {
    pub(crate) fn workflow(functions: &'a [SourceFunction]) -> Self {
        Self {
            layers: vec![functions],
        }
    }

    pub(crate) fn enter(&self, functions: &'a [SourceFunction]) -> Self {
        let mut inner = self.clone();
        inner.layers.push(functions);
        inner
    }

    /// The nearest definition of `name` for a step with `own` definitions.
    fn lookup(&self, own: &'a [SourceFunction], name: &str) -> Option<&'a SourceFunction> {
        std::iter::once(own)
            .chain(self.layers.iter().rev().copied())
            .flat_map(|layer| layer.iter())
            .find(|f| f.function.name == name)
    }

    /// Every visible name (nearest definition), for suggestions.
    fn visible_names(&self, own: &[SourceFunction]) -> BTreeSet<String> {
        std::iter::once(own)
            .chain(self.layers.iter().copied())
            .flat_map(|layer| layer.iter().map(|f| f.function.name.clone()))
            .collect()
    }
}

/// Whether `text` calls `name()`: the name followed by `(`, not preceded by an identifier
/// character (so `reupdate_log()` does not call `update_log`).
fn calls(text: &str, name: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    text.match_indices(name).any(|(at, _)| {
        let before_ok = text[..at].chars().next_back().is_none_or(|c| !ident(c));
        before_ok && text[at + name.len()..].starts_with('(')
    })
}

/// The functions one step references, resolved and ordered; records which definitions were used
/// (by pointer) for the unused-definition warnings.
pub(crate) fn resolve(
    scopes: &Scopes<'_>,
    own: &[SourceFunction],
    refs: &[FunctionRef],
    texts: &[&str],
    used: &mut BTreeSet<String>,
    errors: &mut Vec<CompileError>,
) -> Vec<CompiledFunction> {
    let mut chosen: BTreeMap<String, &SourceFunction> = BTreeMap::new();
    for r in refs {
        match scopes.lookup(own, &r.name) {
            Some(def) => {
                chosen.insert(r.name.clone(), def);
            }
            None => {
                let visible = scopes.visible_names(own);
                let suggestion = if visible.is_empty() {
                    "Define it in `functionDefinitions` (of this step, an enclosing loop or the workflow), or remove the reference.".to_owned()
                } else {
                    format!(
                        "Reference one of the functions visible here ({}), or define `{}` in `functionDefinitions` of this step, an enclosing loop or the workflow.",
                        visible
                            .iter()
                            .map(|n| format!("`{n}()`"))
                            .collect::<Vec<_>>()
                            .join(", "),
                        r.name
                    )
                };
                errors.push(CompileError::new(
                    Code::UnknownFunction,
                    r.pointer.clone(),
                    format!(
                        "`{}()` is not defined in this step's scope (the step's, its loops' or the workflow's `functionDefinitions`).",
                        r.name
                    ),
                    suggestion,
                ));
            }
        }
    }
    for name in scopes.visible_names(own) {
        if chosen.contains_key(&name) || !texts.iter().any(|t| calls(t, &name)) {
            continue;
        }
        if let Some(def) = scopes.lookup(own, &name) {
            chosen.insert(name, def);
        }
    }
    let mut out: Vec<CompiledFunction> = chosen
        .into_values()
        .map(|def| {
            used.insert(def.pointer.clone());
            def.function.clone()
        })
        .collect();
    out.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
    out
}

/// A warning per definition no step references (in document order of their pointers).
pub(crate) fn unused<'a>(
    all: impl IntoIterator<Item = &'a SourceFunction>,
    used: &BTreeSet<String>,
) -> Vec<CompiledWarning> {
    all.into_iter()
        .filter(|def| !used.contains(&def.pointer))
        .map(|def| CompiledWarning {
            code: CompiledWarningCode::UnusedFunction,
            message: format!(
                "function `{}` is defined but no step references it (in `functionReferences` or as `{}()` in its prompt); agents never see it.",
                def.function.name, def.function.name
            ),
            pointer: Some(def.pointer.clone()),
        })
        .collect()
}

/// One definition as a prompt entry: `- name(a: string, b?: number): definition`, then one line
/// per documented parameter.
fn entry(f: &CompiledFunction) -> String {
    let signature: Vec<String> = f
        .parameters
        .iter()
        .map(|p| {
            format!(
                "{}{}: {}",
                p.name,
                if p.required { "" } else { "?" },
                p.param_type.as_str()
            )
        })
        .collect();
    let mut out = format!("- {}({}): ", f.name, signature.join(", "));
    for (i, line) in f.definition.lines().enumerate() {
        if i > 0 {
            out.push_str("\n  ");
        }
        out.push_str(line);
    }
    for p in &f.parameters {
        let mut notes = Vec::new();
        if let Some(d) = &p.description {
            notes.push(d.clone());
        }
        if !p.allowed.is_empty() {
            let values: Vec<String> = p.allowed.iter().map(|v| v.to_string()).collect();
            notes.push(format!("one of {}", values.join(", ")));
        }
        if let Some(default) = &p.default {
            notes.push(format!("default {default}"));
        }
        if !notes.is_empty() {
            out.push_str(&format!("\n  - {}: {}", p.name, notes.join("; ")));
        }
    }
    out
}

/// Renders definitions under `heading` within `budget` bytes: whole when they fit; otherwise cut
/// by UTF-8 bytes with the canonical truncation marker and a deterministic omission note
/// ("Omitted N function definitions.", N counting every definition not shown in full). Empty
/// when there is nothing to render or no room for even the heading.
pub fn render_section(heading: &str, functions: &[&CompiledFunction], budget: usize) -> String {
    if functions.is_empty() {
        return String::new();
    }
    let mut text = format!("## {heading}");
    let mut ends = Vec::with_capacity(functions.len());
    for f in functions {
        text.push('\n');
        text.push_str(&entry(f));
        ends.push(text.len());
    }
    if text.len() <= budget {
        return text;
    }
    // Room for the note with the largest count it can hold.
    let note = |n: usize| format!("\nOmitted {n} function definitions.");
    let room = budget.saturating_sub(note(functions.len()).len());
    let Ok(cut) = truncate_with_marker(&text, room) else {
        return String::new();
    };
    let kept = cut.text.len() - TRUNCATION_MARKER.len();
    let shown = ends.iter().filter(|end| **end <= kept).count();
    format!("{}{}", cut.text, note(functions.len() - shown))
}

/// The section a step's own referenced definitions add to its prompt.
pub fn step_section(functions: &[CompiledFunction]) -> String {
    let refs: Vec<&CompiledFunction> = functions.iter().collect();
    render_section("Functions", &refs, FUNCTION_DEFINITIONS_MAX_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_needs_the_whole_name_and_parentheses() {
        assert!(calls("then update_log() again", "update_log"));
        assert!(calls("update_log(x)", "update_log"));
        assert!(!calls("reupdate_log()", "update_log"));
        assert!(!calls("update_log is a function", "update_log"));
        assert!(!calls("update_logs()", "update_log"));
    }
}

//! Rendering a pending step from its compiled form and its frozen bindings only (decision D139):
//! `{{key}}` / `{{key.path}}` markers substituted, conditional prompt fragments appended, and
//! whether the step needs confirmation. Nothing here reads the run's context: a node shows the
//! same prompt whatever happened on other branches since it became pending.

use serde_json::{Map, Value};
use workrail_spec::compiled::{CompiledStep, ConfirmationKind};
use workrail_spec::snapshot::Bindings;

/// One `{{identifier(.identifier)*}}` marker (not in the reserved `wr.` namespace): its byte
/// range in the text and its dot path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker<'t> {
    pub start: usize,
    pub end: usize,
    pub path: &'t str,
}

impl<'t> Marker<'t> {
    /// The context key the marker reads (its first path segment).
    pub fn root(&self) -> &'t str {
        self.path.split('.').next().unwrap_or(self.path)
    }
}

fn identifier_len(text: &[u8]) -> usize {
    match text.first() {
        Some(b) if b.is_ascii_alphabetic() || *b == b'_' => text
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
            .count(),
        _ => 0,
    }
}

/// The length of a dot path of identifiers at the start of `text` (0 when there is none).
fn path_len(text: &[u8]) -> usize {
    let mut len = identifier_len(text);
    if len == 0 {
        return 0;
    }
    while text.get(len) == Some(&b'.') {
        let next = identifier_len(&text[len + 1..]);
        if next == 0 {
            return len;
        }
        len += 1 + next;
    }
    len
}

/// Every marker of `text`, in order. `{{ }}` spans that are not a plain dot path (an expression
/// such as `{{index + 1}}`, a `{{wr.*}}` token) are not markers and stay as written.
pub fn markers(text: &str) -> Vec<Marker<'_>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(found) = text[at..].find("{{") {
        let start = at + found;
        let inner = start + 2;
        let len = path_len(&bytes[inner..]);
        let end = inner + len;
        if len > 0 && bytes[end..].starts_with(b"}}") {
            let path = &text[inner..end];
            if !path.starts_with("wr.") {
                out.push(Marker {
                    start,
                    end: end + 2,
                    path,
                });
            }
            at = end + 2;
        } else {
            at = inner;
        }
    }
    out
}

/// The context keys the markers of `text` read.
pub fn marker_roots(text: &str) -> impl Iterator<Item = &str> {
    markers(text).into_iter().map(|m| m.root())
}

/// Whether `text` has a `{{ ... }}` span that is not a marker (reported by the compiler).
pub fn non_marker_span(text: &str) -> Option<&str> {
    let mut at = 0;
    let found = markers(text);
    while let Some(open) = text[at..].find("{{") {
        let start = at + open;
        let close = text[start..].find("}}")?;
        let end = start + close + 2;
        if !found.iter().any(|m| m.start == start) {
            return Some(&text[start..end]);
        }
        at = end;
    }
    None
}

/// A value as a prompt shows it: a string as written, a number or boolean as its JSON text, an
/// object or array as compact canonical JSON; `null` is unset.
fn shown(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Bool(_) | Value::Number(_) => Some(workrail_spec::condition::js_string(Some(value))),
        Value::Array(_) | Value::Object(_) => workrail_spec::jcs::to_canonical_string(value).ok(),
    }
}

/// The value at a dot path, walking into objects.
fn lookup<'v>(scope: &'v Map<String, Value>, path: &str) -> Option<&'v Value> {
    let mut segments = path.split('.');
    let mut current = scope.get(segments.next()?)?;
    for segment in segments {
        current = current.as_object()?.get(segment)?;
    }
    Some(current)
}

/// `text` with every marker replaced by its value in `scope` (`[unset: path]` when it has none).
pub fn substitute(text: &str, scope: &Map<String, Value>) -> String {
    let found = markers(text);
    if found.is_empty() {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for m in found {
        out.push_str(&text[at..m.start]);
        match lookup(scope, m.path).and_then(shown) {
            Some(value) => out.push_str(&value),
            None => {
                out.push_str("[unset: ");
                out.push_str(m.path);
                out.push(']');
            }
        }
        at = m.end;
    }
    out.push_str(&text[at..]);
    out
}

/// A pending step's title as its node shows it (markers substituted from its bindings).
pub fn title(step: &CompiledStep, bindings: &Bindings) -> String {
    substitute(&step.title, &bindings.0)
}

/// What the agent is shown for a pending step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedStep {
    pub title: String,
    pub prompt: String,
    pub require_confirmation: bool,
    pub confirmation_kind: Option<ConfirmationKind>,
}

/// The heading of the last section of a compiled prompt (see `compiler::functions`).
const FUNCTIONS_HEADING: &str = "\n\n## Functions\n";

/// `prompt` with `extra` as its own paragraphs at the end, or before the `## Functions` section
/// when the step has one (that section is always the prompt's last).
pub fn insert_before_functions(prompt: &str, has_functions: bool, extra: &str) -> String {
    let split = has_functions
        .then(|| prompt.rfind(FUNCTIONS_HEADING))
        .flatten();
    match split {
        Some(at) => format!("{}\n\n{extra}{}", &prompt[..at], &prompt[at..]),
        None if prompt.is_empty() => extra.to_owned(),
        None => format!("{prompt}\n\n{extra}"),
    }
}

/// Renders `step` with its frozen `bindings`: the markers of the title, the prompt and the
/// fragments substituted; the fragments whose `when` holds appended after the authored text and
/// its sections, before the step's `## Functions` section (always the last one); confirmation
/// required when the step asks for it and its `confirmWhen`, if any, holds.
pub fn render_step(step: &CompiledStep, bindings: &Bindings) -> RenderedStep {
    let scope = &bindings.0;
    let lang = &step.language;
    let fragments: Vec<String> = lang
        .prompt_fragments
        .iter()
        .filter(|f| f.when.as_ref().is_none_or(|c| c.evaluate(scope)))
        .map(|f| substitute(&f.text, scope))
        .collect();
    let mut prompt = substitute(&step.prompt, scope);
    if !fragments.is_empty() {
        prompt =
            insert_before_functions(&prompt, !step.functions.is_empty(), &fragments.join("\n\n"));
    }
    let require_confirmation =
        step.require_confirmation && lang.confirm_when.as_ref().is_none_or(|c| c.evaluate(scope));
    RenderedStep {
        title: substitute(&step.title, scope),
        prompt,
        require_confirmation,
        confirmation_kind: lang
            .confirmation_kind
            .filter(|_| require_confirmation)
            .filter(|k| *k != ConfirmationKind::User),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn scope(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn markers_are_dot_paths_outside_the_wr_namespace() {
        let text = "{{a}} {{b.c_d}} {{wr.bindings.x}} {{x + 1}} {{ spaced }} {{e.}} {{1x}}";
        let paths: Vec<&str> = markers(text).iter().map(|m| m.path).collect();
        assert_eq!(paths, ["a", "b.c_d"]);
        assert_eq!(non_marker_span(text), Some("{{wr.bindings.x}}"));
        assert_eq!(non_marker_span("plain {{ok}} text"), None);
        assert_eq!(non_marker_span("open {{ only"), None);
    }

    #[test]
    fn substitution_walks_paths_and_marks_what_is_unset() {
        let s = scope(json!({
            "name": "Ada", "n": 3, "f": 2.5, "ok": true, "none": null,
            "item": {"title": "Auth", "tags": ["a", "b"]}
        }));
        assert_eq!(
            substitute(
                "{{name}} {{n}} {{f}} {{ok}} {{none}} {{item.title}} {{item.tags}} {{item.missing}} {{name.x}} {{gone}}",
                &s
            ),
            "Ada 3 2.5 true [unset: none] Auth [\"a\",\"b\"] [unset: item.missing] [unset: name.x] [unset: gone]"
        );
        assert_eq!(
            substitute("{{item}}", &s),
            "{\"tags\":[\"a\",\"b\"],\"title\":\"Auth\"}"
        );
    }
}

//! Applying the compiler's auto-fixes (one RFC 6902 operation each) to a source document, for
//! `workrail validate --fix`. Pure: the caller reads and writes the file.

use std::cmp::Ordering;

use serde_json::Value;

use super::error::{AutoFix, CompileError};

/// One auto-fix and what applying it did.
#[derive(Debug, Clone, PartialEq)]
pub struct Applied {
    pub fix: AutoFix,
    /// `None` when applied; otherwise why it could not be (the document is left as it was for
    /// this operation).
    pub skipped: Option<String>,
}

/// Applies the fix of every error that has one, deepest and last pointers first (so an array
/// index another fix refers to is not shifted before that fix runs). Returns what happened to
/// each, in the order applied.
pub fn apply_fixes(document: &mut Value, errors: &[CompileError]) -> Vec<Applied> {
    let mut fixes: Vec<&AutoFix> = errors.iter().filter_map(|e| e.fix.as_ref()).collect();
    fixes.sort_by(|a, b| compare_pointers(target(b), target(a)));
    fixes.dedup();
    fixes
        .into_iter()
        .map(|fix| Applied {
            fix: fix.clone(),
            skipped: apply(document, fix).err(),
        })
        .collect()
}

fn target(fix: &AutoFix) -> &str {
    match fix {
        AutoFix::Replace { path, .. }
        | AutoFix::Remove { path }
        | AutoFix::Add { path, .. }
        | AutoFix::Move { path, .. } => path,
    }
}

/// Document order of two pointers: segment by segment, array indexes numerically.
fn compare_pointers(a: &str, b: &str) -> Ordering {
    let (sa, sb) = (segments(a), segments(b));
    for (x, y) in sa.iter().zip(&sb) {
        let order = match (x.parse::<u64>(), y.parse::<u64>()) {
            (Ok(i), Ok(j)) => i.cmp(&j),
            _ => x.cmp(y),
        };
        if order != Ordering::Equal {
            return order;
        }
    }
    sa.len().cmp(&sb.len())
}

/// RFC 6901 reference tokens (`~1` is `/`, `~0` is `~`).
fn segments(pointer: &str) -> Vec<String> {
    if pointer.is_empty() {
        return Vec::new();
    }
    pointer
        .split('/')
        .skip(1)
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// Applies one operation (RFC 6902 semantics for `replace`, `remove`, `add`, `move`).
pub fn apply(document: &mut Value, fix: &AutoFix) -> Result<(), String> {
    match fix {
        AutoFix::Replace { path, value } => {
            let slot = document
                .pointer_mut(path)
                .ok_or_else(|| format!("{path} does not exist"))?;
            *slot = value.clone();
            Ok(())
        }
        AutoFix::Remove { path } => remove(document, path).map(|_| ()),
        AutoFix::Add { path, value } => add(document, path, value.clone()),
        AutoFix::Move { from, path } => {
            if path.starts_with(&format!("{from}/")) {
                return Err(format!("cannot move {from} into itself ({path})"));
            }
            let value = remove(document, from)?;
            add(document, path, value)
        }
    }
}

fn split(path: &str) -> Result<(String, String), String> {
    let Some(cut) = path.rfind('/') else {
        return Err(format!("{path:?} is not a JSON pointer to a member"));
    };
    let last = path[cut + 1..].replace("~1", "/").replace("~0", "~");
    Ok((path[..cut].to_owned(), last))
}

fn remove(document: &mut Value, path: &str) -> Result<Value, String> {
    let (parent, key) = split(path)?;
    let missing = || format!("{path} does not exist");
    match document.pointer_mut(&parent).ok_or_else(missing)? {
        Value::Object(map) => map.remove(&key).ok_or_else(missing),
        Value::Array(items) => {
            let i: usize = key.parse().map_err(|_| missing())?;
            (i < items.len())
                .then(|| items.remove(i))
                .ok_or_else(missing)
        }
        _ => Err(missing()),
    }
}

fn add(document: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *document = value;
        return Ok(());
    }
    let (parent, key) = split(path)?;
    match document
        .pointer_mut(&parent)
        .ok_or_else(|| format!("the parent of {path} does not exist"))?
    {
        Value::Object(map) => {
            map.insert(key, value);
            Ok(())
        }
        Value::Array(items) => {
            let i = if key == "-" {
                items.len()
            } else {
                key.parse::<usize>()
                    .map_err(|_| format!("{path}: `{key}` is not an array index"))?
            };
            if i > items.len() {
                return Err(format!("{path}: index {i} is past the end"));
            }
            items.insert(i, value);
            Ok(())
        }
        _ => Err(format!("the parent of {path} is not an object or array")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::compiler::error::CompileErrorCode;

    fn error(fix: AutoFix) -> CompileError {
        CompileError::new(CompileErrorCode::InvalidValue, "", "m", "s").with_fix(fix)
    }

    #[test]
    fn fixes_apply_last_first_so_indexes_stay_valid() {
        let mut doc = json!({"id": "wr.x", "steps": [{"a": 1}, {"b": 2}, {"c": 3}], "x~y": 1});
        let applied = apply_fixes(
            &mut doc,
            &[
                error(AutoFix::Remove {
                    path: "/steps/0".into(),
                }),
                error(AutoFix::Remove {
                    path: "/steps/2".into(),
                }),
                error(AutoFix::Replace {
                    path: "/id".into(),
                    value: json!("project.x"),
                }),
                error(AutoFix::Move {
                    from: "/x~0y".into(),
                    path: "/xy".into(),
                }),
                error(AutoFix::Add {
                    path: "/steps/-".into(),
                    value: json!({"d": 4}),
                }),
            ],
        );
        assert!(applied.iter().all(|a| a.skipped.is_none()), "{applied:?}");
        assert_eq!(
            doc,
            json!({"id": "project.x", "steps": [{"b": 2}, {"d": 4}], "xy": 1})
        );
    }

    #[test]
    fn a_fix_whose_target_is_gone_is_reported_and_changes_nothing() {
        let mut doc = json!({"id": "a"});
        let applied = apply_fixes(
            &mut doc,
            &[error(AutoFix::Replace {
                path: "/steps/0/id".into(),
                value: json!("b"),
            })],
        );
        assert_eq!(applied.len(), 1);
        assert!(
            applied[0]
                .skipped
                .as_deref()
                .unwrap_or("")
                .contains("does not exist")
        );
        assert_eq!(doc, json!({"id": "a"}));
    }
}

/// A JSON value's place in the source text.
#[derive(Debug, Clone)]
enum Node {
    Scalar {
        start: usize,
        end: usize,
    },
    Object {
        start: usize,
        end: usize,
        /// `(key, start of the key's opening quote, value)`.
        members: Vec<(String, usize, Node)>,
        /// The end (after the closing quote) of each member's key.
        key_ends: Vec<usize>,
    },
    Array {
        start: usize,
        end: usize,
        items: Vec<Node>,
    },
}

impl Node {
    fn start(&self) -> usize {
        match self {
            Self::Scalar { start, .. } | Self::Object { start, .. } | Self::Array { start, .. } => {
                *start
            }
        }
    }

    fn end(&self) -> usize {
        match self {
            Self::Scalar { end, .. } | Self::Object { end, .. } | Self::Array { end, .. } => *end,
        }
    }

    fn get(&self, segment: &str) -> Option<&Node> {
        match self {
            Self::Object { members, .. } => members
                .iter()
                .rev()
                .find(|(k, _, _)| k == segment)
                .map(|(_, _, v)| v),
            Self::Array { items, .. } => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
            Self::Scalar { .. } => None,
        }
    }
}

/// Finds where every value of `text` (valid JSON) is.
struct Scanner<'t> {
    text: &'t [u8],
    at: usize,
}

impl Scanner<'_> {
    fn skip_ws(&mut self) {
        while self.at < self.text.len() && self.text[self.at].is_ascii_whitespace() {
            self.at += 1;
        }
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        self.skip_ws();
        (self.text.get(self.at) == Some(&byte)).then(|| self.at += 1)
    }

    fn string_end(&mut self) -> Option<usize> {
        // At the opening quote.
        self.at += 1;
        while let Some(&b) = self.text.get(self.at) {
            self.at += 1;
            match b {
                b'\\' => self.at += 1,
                b'"' => return Some(self.at),
                _ => {}
            }
        }
        None
    }

    fn value(&mut self) -> Option<Node> {
        self.skip_ws();
        let start = self.at;
        match self.text.get(self.at)? {
            b'{' => {
                self.at += 1;
                let mut members = Vec::new();
                let mut key_ends = Vec::new();
                self.skip_ws();
                if self.text.get(self.at) == Some(&b'}') {
                    self.at += 1;
                    return Some(Node::Object {
                        start,
                        end: self.at,
                        members,
                        key_ends,
                    });
                }
                loop {
                    self.skip_ws();
                    let key_start = self.at;
                    let key_end = self.string_end()?;
                    let key: String =
                        serde_json::from_slice(&self.text[key_start..key_end]).ok()?;
                    self.expect(b':')?;
                    let value = self.value()?;
                    members.push((key, key_start, value));
                    key_ends.push(key_end);
                    self.skip_ws();
                    match self.text.get(self.at)? {
                        b',' => self.at += 1,
                        b'}' => {
                            self.at += 1;
                            return Some(Node::Object {
                                start,
                                end: self.at,
                                members,
                                key_ends,
                            });
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                self.skip_ws();
                if self.text.get(self.at) == Some(&b']') {
                    self.at += 1;
                    return Some(Node::Array {
                        start,
                        end: self.at,
                        items,
                    });
                }
                loop {
                    items.push(self.value()?);
                    self.skip_ws();
                    match self.text.get(self.at)? {
                        b',' => self.at += 1,
                        b']' => {
                            self.at += 1;
                            return Some(Node::Array {
                                start,
                                end: self.at,
                                items,
                            });
                        }
                        _ => return None,
                    }
                }
            }
            b'"' => {
                let end = self.string_end()?;
                Some(Node::Scalar { start, end })
            }
            _ => {
                while self.at < self.text.len()
                    && !matches!(self.text[self.at], b',' | b'}' | b']')
                    && !self.text[self.at].is_ascii_whitespace()
                {
                    self.at += 1;
                }
                Some(Node::Scalar {
                    start,
                    end: self.at,
                })
            }
        }
    }
}

fn scan(text: &str) -> Result<Node, String> {
    Scanner {
        text: text.as_bytes(),
        at: 0,
    }
    .value()
    .ok_or_else(|| "the document is not valid JSON".to_owned())
}

fn node_at<'n>(root: &'n Node, path: &str) -> Option<&'n Node> {
    segments(path).iter().try_fold(root, |node, s| node.get(s))
}

/// Applies the fix of every error that has one to the source text, in the order of
/// [`apply_fixes`], editing only the bytes each operation touches (the author's formatting and
/// key order stay as written). Returns the new text and what happened to each fix.
pub fn apply_fixes_to_text(text: &str, errors: &[CompileError]) -> (String, Vec<Applied>) {
    let mut fixes: Vec<&AutoFix> = errors.iter().filter_map(|e| e.fix.as_ref()).collect();
    fixes.sort_by(|a, b| compare_pointers(target(b), target(a)));
    fixes.dedup();
    apply_ops_to_text(text, fixes.into_iter().cloned())
}

/// Applies operations in order to the source text (each on the result of the previous one).
pub fn apply_ops_to_text(
    text: &str,
    ops: impl IntoIterator<Item = AutoFix>,
) -> (String, Vec<Applied>) {
    let mut out = text.to_owned();
    let mut applied = Vec::new();
    for fix in ops {
        let skipped = match edit(&out, &fix) {
            Ok(new) => {
                out = new;
                None
            }
            Err(e) => Some(e),
        };
        applied.push(Applied { fix, skipped });
    }
    (out, applied)
}

fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

fn splice(text: &str, start: usize, end: usize, with: &str) -> String {
    format!("{}{with}{}", &text[..start], &text[end..])
}

fn edit(text: &str, fix: &AutoFix) -> Result<String, String> {
    let root = scan(text)?;
    match fix {
        AutoFix::Replace { path, value } => {
            let node = node_at(&root, path).ok_or_else(|| format!("{path} does not exist"))?;
            Ok(splice(text, node.start(), node.end(), &compact(value)))
        }
        AutoFix::Remove { path } => remove_text(text, &root, path).map(|(t, _)| t),
        AutoFix::Add { path, value } => add_text(text, &root, path, &compact(value)),
        AutoFix::Move { from, path } => {
            if path.starts_with(&format!("{from}/")) {
                return Err(format!("cannot move {from} into itself ({path})"));
            }
            // A rename within one object edits the key where it stands.
            let ((from_parent, from_key), (to_parent, to_key)) = (split(from)?, split(path)?);
            if from_parent == to_parent
                && let Some(Node::Object {
                    members, key_ends, ..
                }) = node_at(&root, &from_parent)
                && !members.iter().any(|(k, _, _)| *k == to_key)
                && let Some(i) = members.iter().rposition(|(k, _, _)| *k == from_key)
            {
                return Ok(splice(
                    text,
                    members[i].1,
                    key_ends[i],
                    &compact(&Value::from(to_key)),
                ));
            }
            let (removed, value_text) = remove_text(text, &root, from)?;
            add_text(&removed, &scan(&removed)?, path, &value_text)
        }
    }
}

/// Removes the member or item at `path`, with its separator; returns the text and the removed
/// value's own text.
fn remove_text(text: &str, root: &Node, path: &str) -> Result<(String, String), String> {
    let (parent_path, key) = split(path)?;
    let missing = || format!("{path} does not exist");
    let parent = node_at(root, &parent_path).ok_or_else(missing)?;
    // (start of each entry, end of its value) in order.
    let spans: Vec<(usize, usize)> = match parent {
        Node::Object { members, .. } => members.iter().map(|(_, s, v)| (*s, v.end())).collect(),
        Node::Array { items, .. } => items.iter().map(|v| (v.start(), v.end())).collect(),
        Node::Scalar { .. } => return Err(missing()),
    };
    let i = match parent {
        Node::Object { members, .. } => members
            .iter()
            .rposition(|(k, _, _)| *k == key)
            .ok_or_else(missing)?,
        _ => key
            .parse::<usize>()
            .ok()
            .filter(|i| *i < spans.len())
            .ok_or_else(missing)?,
    };
    let value = node_at(root, path).ok_or_else(missing)?;
    let value_text = text[value.start()..value.end()].to_owned();
    let (start, end) = if i + 1 < spans.len() {
        (spans[i].0, spans[i + 1].0)
    } else if i > 0 {
        (spans[i - 1].1, spans[i].1)
    } else {
        spans[i]
    };
    Ok((splice(text, start, end, ""), value_text))
}

fn add_text(text: &str, root: &Node, path: &str, value: &str) -> Result<String, String> {
    if path.is_empty() {
        return Ok(value.to_owned());
    }
    let (parent_path, key) = split(path)?;
    let parent = node_at(root, &parent_path)
        .ok_or_else(|| format!("the parent of {path} does not exist"))?;
    match parent {
        Node::Object { start, members, .. } => {
            if let Some(existing) = parent.get(&key) {
                return Ok(splice(text, existing.start(), existing.end(), value));
            }
            let member = format!("{}: {value}", compact(&Value::from(key)));
            Ok(match members.last() {
                Some((_, key_start, last)) => {
                    // On its own line, indented like the last member, when that one is.
                    let line_start = text[..*key_start].rfind('\n').map_or(0, |i| i + 1);
                    let indent = &text[line_start..*key_start];
                    let separator = if line_start > 0 && indent.trim().is_empty() {
                        format!(",\n{indent}")
                    } else {
                        ", ".to_owned()
                    };
                    splice(
                        text,
                        last.end(),
                        last.end(),
                        &format!("{separator}{member}"),
                    )
                }
                None => splice(text, start + 1, start + 1, &member),
            })
        }
        Node::Array { start, items, .. } => {
            let i = if key == "-" {
                items.len()
            } else {
                key.parse::<usize>()
                    .map_err(|_| format!("{path}: `{key}` is not an array index"))?
            };
            Ok(match (items.get(i), items.last()) {
                (Some(item), _) => splice(text, item.start(), item.start(), &format!("{value}, ")),
                (None, Some(last)) if i == items.len() => {
                    splice(text, last.end(), last.end(), &format!(", {value}"))
                }
                (None, None) if i == 0 => splice(text, start + 1, start + 1, value),
                _ => return Err(format!("{path}: index {i} is past the end")),
            })
        }
        Node::Scalar { .. } => Err(format!("the parent of {path} is not an object or array")),
    }
}

#[cfg(test)]
mod text_tests {
    use serde_json::json;

    use super::*;

    const DOC: &str = "{\n  \"id\": \"wr.x\",\n  \"name\": \"N\",\n  \"steps\": [\n    {\"id\": \"a\", \"legacy\": 1},\n    {\"id\": \"b\"}\n  ],\n  \"tail\": {}\n}\n";

    fn run(ops: Vec<AutoFix>) -> (String, Vec<Applied>) {
        apply_ops_to_text(DOC, ops)
    }

    #[test]
    fn text_edits_keep_the_rest_of_the_document_byte_for_byte() {
        let (text, applied) = run(vec![AutoFix::Replace {
            path: "/id".into(),
            value: json!("project.x"),
        }]);
        assert!(applied[0].skipped.is_none());
        assert_eq!(text, DOC.replace("\"wr.x\"", "\"project.x\""));
    }

    #[test]
    fn text_edits_agree_with_the_value_edits() {
        let ops = vec![
            AutoFix::Remove {
                path: "/steps/0/legacy".into(),
            },
            AutoFix::Move {
                from: "/name".into(),
                path: "/title".into(),
            },
            AutoFix::Add {
                path: "/tail/k".into(),
                value: json!([1, 2]),
            },
            AutoFix::Add {
                path: "/steps/1".into(),
                value: json!({"id": "m"}),
            },
            AutoFix::Add {
                path: "/steps/-".into(),
                value: json!({"id": "z"}),
            },
            AutoFix::Remove {
                path: "/steps/0".into(),
            },
        ];
        let mut value: Value = serde_json::from_str(DOC).unwrap();
        for op in &ops {
            apply(&mut value, op).unwrap();
        }
        let (text, applied) = run(ops);
        assert!(applied.iter().all(|a| a.skipped.is_none()), "{applied:?}");
        let reparsed: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(reparsed, value);
        assert!(text.starts_with("{\n  \"id\": \"wr.x\","), "{text}");
    }

    #[test]
    fn a_text_edit_whose_target_is_missing_changes_nothing() {
        let (text, applied) = run(vec![AutoFix::Remove {
            path: "/nope".into(),
        }]);
        assert_eq!(text, DOC);
        assert!(applied[0].skipped.is_some());
    }
}

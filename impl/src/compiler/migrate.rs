//! `workrail migrate`: rewrites a workflow of the WorkRail 3.x spelling into the native v2
//! spelling where one exists, and lists, per pointer, what has none (pure; the CLI reads and
//! writes the file).
//!
//! Rewrites (the `v2` column of [`V1_FIELDS`], and the namespace rules of locks §7):
//! - a legacy (dot-free) id or a `wr.*` id outside the bundled source: `<namespace>.<name>`;
//! - `recommendedPreferences` -> `recommendations`;
//! - a step's `outputContract: {contractRef}` -> `output.contractRef` (`required: false` has no
//!   v2 spelling);
//! - a step's `guidance` -> appended to `promptBlocks.constraints` when the step has
//!   `promptBlocks` (a step written with `prompt` has no v2 spelling for it);
//! - a v2 loop's `id` -> `loopId`.
//!
//! What is left is whatever still compiles with a `v1_field` or `unknown_field_kept` warning
//! (or does not compile): the migrated document is compiled to find out, so the list is exactly
//! what `workrail validate` would still say.

use serde_json::{Map, Value};
use workrail_spec::compiled::CompiledWarningCode;
use workrail_spec::ids::{IdStatus, WorkflowId};

use super::error::{AutoFix, CompileError, CompileErrorCode, CompileErrors, child, index};
use super::ids::suggest_workflow_id;
use super::patch::apply_ops_to_text;
use super::{CompileContext, Origin};

/// One rewrite applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub pointer: String,
    pub description: String,
}

/// Something left in the 3.x spelling (no v2 spelling exists), or a problem of the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    pub pointer: String,
    pub reason: String,
}

/// The outcome of a migration.
#[derive(Debug, Clone, PartialEq)]
pub struct Migration {
    /// The migrated source text: the original with only the rewritten fields edited.
    pub text: String,
    pub changes: Vec<Change>,
    /// Fields with no v2 spelling (kept as written), in pointer order.
    pub leftovers: Vec<Leftover>,
    /// Errors of the migrated document (empty when it compiles).
    pub errors: Vec<CompileError>,
}

impl Migration {
    /// The result compiles and nothing is left in the 3.x spelling.
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty() && self.leftovers.is_empty()
    }
}

/// Migrates the source `text`, compiled afterwards with `ctx` (its origin's namespace names
/// the new id). `Err` when the text is not JSON.
pub fn migrate(text: &str, ctx: &CompileContext) -> Result<Migration, CompileErrors> {
    let source: Value =
        serde_json::from_str(text).map_err(|_| match super::compile_str(text, ctx) {
            Err(errors) => errors,
            Ok(_) => CompileErrors(Vec::new()),
        })?;
    let full = run(text, &source, ctx, true);
    if full.errors.is_empty() || !full.changes.iter().any(|c| c.pointer == "/id") {
        return Ok(full);
    }
    // A legacy workflow that keeps fields neither spelling defines loads only under its legacy
    // id (namespaced workflows refuse such fields): keep the id, and say why.
    let mut kept_id = run(text, &source, ctx, false);
    if !kept_id.errors.is_empty() {
        return Ok(full);
    }
    kept_id.leftovers.insert(
        0,
        Leftover {
            pointer: "/id".to_owned(),
            reason: "the legacy id stays: with a namespaced id the fields kept below would be errors (a namespaced workflow accepts only fields of the two spellings); move their content into the workflow's fields, then migrate again".to_owned(),
        },
    );
    Ok(kept_id)
}

fn run(text: &str, source: &Value, ctx: &CompileContext, rename_id: bool) -> Migration {
    let mut plan = Plan::default();
    let namespace = match &ctx.origin {
        Origin::Bundled => "wr",
        Origin::NonCore { namespace } => namespace.as_str(),
    };
    if let Some(map) = source.as_object() {
        if rename_id {
            plan.id(map, namespace, ctx);
        }
        plan.rename(map, "", "recommendedPreferences", "recommendations");
        if let Some(Value::Array(steps)) = map.get("steps") {
            plan.steps(steps, "/steps");
        }
    }
    let (text, applied) = apply_ops_to_text(text, plan.ops);
    // The plan is computed on the same document, so every operation applies; one that does
    // not is a bug, reported as data (and nothing is written).
    let unapplied: Vec<CompileError> = applied
        .iter()
        .filter_map(|a| {
            a.skipped.as_ref().map(|why| {
                CompileError::new(
                    CompileErrorCode::Internal,
                    "",
                    format!("the migration could not apply {:?}: {why}", a.fix),
                    "This is a WorkRail bug; report it with the workflow source.",
                )
            })
        })
        .collect();
    if !unapplied.is_empty() {
        return Migration {
            text,
            changes: plan.changes,
            leftovers: Vec::new(),
            errors: unapplied,
        };
    }
    let changes = plan.changes;
    let (leftovers, errors) = match super::compile_str(&text, ctx) {
        Ok(compiled) => {
            let mut leftovers: Vec<Leftover> = compiled
                .snapshot
                .body
                .compiled_warnings
                .iter()
                .filter(|w| {
                    matches!(
                        w.code,
                        CompiledWarningCode::V1Field | CompiledWarningCode::UnknownFieldKept
                    )
                })
                .map(|w| Leftover {
                    pointer: w.pointer.clone().unwrap_or_default(),
                    reason: w.message.clone(),
                })
                .collect();
            leftovers.sort_by(|a, b| a.pointer.cmp(&b.pointer));
            (leftovers, Vec::new())
        }
        Err(errors) => (Vec::new(), errors.0),
    };
    Migration {
        text,
        changes,
        leftovers,
        errors,
    }
}

/// The operations a migration applies (computed on the original document; none of them moves
/// an array element, so they apply in order).
#[derive(Default)]
struct Plan {
    ops: Vec<AutoFix>,
    changes: Vec<Change>,
}

impl Plan {
    fn change(&mut self, pointer: String, description: String) {
        self.changes.push(Change {
            pointer,
            description,
        });
    }

    fn id(&mut self, map: &Map<String, Value>, namespace: &str, ctx: &CompileContext) {
        let Some(raw) = map.get("id").and_then(Value::as_str) else {
            return;
        };
        let needs = match WorkflowId::parse(raw) {
            Ok(id) => {
                id.id_status() == IdStatus::Legacy
                    || (id.is_reserved() && ctx.origin != Origin::Bundled)
            }
            Err(_) => false,
        };
        if !needs {
            return;
        }
        let new = suggest_workflow_id(namespace, raw);
        self.change(
            "/id".to_owned(),
            format!("id `{raw}` -> `{new}` (namespaced ids, locks §7)"),
        );
        self.ops.push(AutoFix::Replace {
            path: "/id".to_owned(),
            value: Value::from(new),
        });
    }

    /// Renames `from` to `to` unless `to` is already written (then both stay, and the compile
    /// says whether they agree).
    fn rename(&mut self, map: &Map<String, Value>, at: &str, from: &str, to: &str) {
        if map.contains_key(to) || !map.contains_key(from) {
            return;
        }
        self.change(child(at, from), format!("`{from}` -> `{to}`"));
        self.ops.push(AutoFix::Move {
            from: child(at, from),
            path: child(at, to),
        });
    }

    fn steps(&mut self, steps: &[Value], at: &str) {
        for (i, step) in steps.iter().enumerate() {
            let at = index(at, i);
            let Some(map) = step.as_object() else {
                continue;
            };
            let is_loop = map.get("type").and_then(Value::as_str) == Some("loop");
            if is_loop && map.contains_key("while") {
                self.rename(map, &at, "id", "loopId");
            }
            if let Some(Value::Array(body)) = map.get("body") {
                self.steps(body, &child(&at, "body"));
            }
            if !is_loop {
                self.output_contract(map, &at);
                self.guidance(map, &at);
            }
        }
    }

    fn output_contract(&mut self, map: &Map<String, Value>, at: &str) {
        let Some(Value::Object(contract)) = map.get("outputContract") else {
            return;
        };
        if contract.get("required") == Some(&Value::Bool(false)) {
            return;
        }
        let Some(contract_ref) = contract.get("contractRef").cloned() else {
            return;
        };
        match map.get("output") {
            Some(Value::Object(output)) => {
                if output
                    .get("contractRef")
                    .is_some_and(|existing| existing != &contract_ref)
                {
                    return;
                }
                self.ops.push(AutoFix::Add {
                    path: child(&child(at, "output"), "contractRef"),
                    value: contract_ref,
                });
            }
            Some(_) => return,
            None => self.ops.push(AutoFix::Add {
                path: child(at, "output"),
                value: serde_json::json!({"contractRef": contract_ref}),
            }),
        }
        self.ops.push(AutoFix::Remove {
            path: child(at, "outputContract"),
        });
        self.change(
            child(at, "outputContract"),
            "`outputContract.contractRef` -> `output.contractRef`".to_owned(),
        );
    }

    fn guidance(&mut self, map: &Map<String, Value>, at: &str) {
        let Some(Value::Array(lines)) = map.get("guidance") else {
            return;
        };
        let Some(Value::Object(blocks)) = map.get("promptBlocks") else {
            return;
        };
        let constraints = child(&child(at, "promptBlocks"), "constraints");
        match blocks.get("constraints") {
            Some(Value::Array(_)) => {
                for line in lines {
                    self.ops.push(AutoFix::Add {
                        path: child(&constraints, "-"),
                        value: line.clone(),
                    });
                }
            }
            Some(_) => return,
            None => self.ops.push(AutoFix::Add {
                path: constraints,
                value: Value::Array(lines.clone()),
            }),
        }
        self.ops.push(AutoFix::Remove {
            path: child(at, "guidance"),
        });
        self.change(
            child(at, "guidance"),
            "`guidance` -> appended to `promptBlocks.constraints`".to_owned(),
        );
    }
}

//! The function definitions a rewind's recovery context adds to `pending.prompt` (locks §5
//! "Function definitions in rewind/resumption context", `L-COMPILE-FUNCTIONS-REHYDRATE`,
//! `L-COMPILE-FUNCTIONS-ORDER`).
//!
//! The pending step's own definitions are part of its compiled prompt. At a node that already
//! has children, the recap also shows the preferred branch downstream and the other branches;
//! the definitions their steps reference follow, after the pending step's, in
//! `(scope precedence, name)` order. Notes on a node describe the step acknowledged at its
//! parent (outputs attach to the node the acknowledgement created), so a downstream entry's step
//! is its parent's pending step, and a branch summary's step (a child of the rewound node) is
//! the pending step itself: the branch summaries add nothing beyond it.

use workrail_spec::compiled::{CompiledFunction, CompiledWorkflowSnapshotV1};
use workrail_spec::ids::{NodeId, RunId, StepId};
use workrail_spec::tools::RecapView;

use super::Workrail;
use super::facts::Facts;

/// Definitions referenced by the downstream recap entries `recap` shows, minus those the pending
/// step already shows; empty at a tip or when the workflow defines no functions.
pub(super) fn branch_context(
    wr: &Workrail,
    facts: &Facts<'_>,
    run: &RunId,
    node: &NodeId,
    compiled: &CompiledWorkflowSnapshotV1,
    pending: Option<&StepId>,
    recap: Option<&RecapView>,
) -> Vec<CompiledFunction> {
    if compiled.body.steps.iter().all(|s| s.functions.is_empty()) {
        return Vec::new();
    }
    let (Some(view), Some(recap)) = (facts.run(run), recap) else {
        return Vec::new();
    };
    if view
        .dag
        .nodes
        .get(node)
        .is_none_or(|n| n.children.is_empty())
    {
        return Vec::new();
    }
    let own: &[CompiledFunction] = pending
        .and_then(|s| compiled.step(s))
        .map_or(&[], |s| &s.functions);
    // The noted nodes of the preferred branch below `node`, as the recap walks them: it keeps
    // the newest entries and counts the older ones it omits.
    let (count, noted) = view.noted_on_preferred_branch_below(node);
    let shown = count.saturating_sub(recap.omitted_entries as usize);
    let mut shown: Vec<&NodeId> = noted.take(shown).collect();
    shown.reverse();
    let mut out: Vec<CompiledFunction> = Vec::new();
    for entry in &shown {
        let Some(step) = view
            .dag
            .nodes
            .get(entry)
            .and_then(|n| n.parent.as_ref())
            .and_then(|parent| view.dag.nodes.get(parent))
            .and_then(|parent| wr.store.snapshot(&parent.snapshot_ref()).ok())
            .and_then(|s| {
                s.engine_payload
                    .engine_state
                    .pending_step()
                    .map(|p| p.step_id.clone())
            })
            .and_then(|id| compiled.step(&id))
        else {
            continue;
        };
        for f in &step.functions {
            if !own.contains(f) && !out.contains(f) {
                out.push(f.clone());
            }
        }
    }
    out.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
    out
}

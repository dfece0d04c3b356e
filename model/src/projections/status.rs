//! Run status (locks §2.1 "Run status projection"; `L-STATUS-*`).
//!
//! From the preferred tip T of the run:
//! - `isComplete` is whether T's snapshot is `complete` (given by the caller, who holds the
//!   snapshots);
//! - `hasUnresolvedCriticalGaps` is whether the *run* has any unresolved `critical` gap;
//! - `autonomy` is the effective autonomy at T.
//!
//! | isComplete | condition | status |
//! |---|---|---|
//! | yes | run has an unresolved critical gap | `complete_with_gaps` |
//! | yes | otherwise | `complete` |
//! | no | autonomy != `full_auto_never_stop` and T itself has an unresolved critical gap in `user_only_dependency`, `contract_violation` or `capability_missing` | `blocked` |
//! | no | otherwise | `in_progress` |

use workrail_spec::closed::{Autonomy, GapSeverity, RunStatus};
use workrail_spec::event::SessionEvent;
use workrail_spec::ids::SnapshotRef;
use workrail_spec::reason::GapReason;

use super::dag::RunDag;
use super::gaps::{unresolved_gaps_at_node, unresolved_gaps_in_run};
use super::preferences::{PreferenceDefaults, effective_preferences};
use super::tip::preferred_tip;

/// The status of the run, or `None` when it has no nodes (so no preferred tip).
pub fn run_status(
    events: &[SessionEvent],
    dag: &RunDag,
    is_complete: &dyn Fn(&SnapshotRef) -> bool,
    defaults: &PreferenceDefaults,
) -> Option<RunStatus> {
    let tip = preferred_tip(events, dag)?;
    let tip_node = dag.node(&tip.node_id)?;
    let critical = |g: &super::gaps::GapRecord| g.severity == GapSeverity::Critical;
    if is_complete(&tip_node.snapshot_ref) {
        let has_gaps = unresolved_gaps_in_run(events, &dag.run_id)
            .iter()
            .any(critical);
        return Some(if has_gaps {
            RunStatus::CompleteWithGaps
        } else {
            RunStatus::Complete
        });
    }
    let autonomy = effective_preferences(events, dag, &tip.node_id, defaults).autonomy;
    let blocking_gap = unresolved_gaps_at_node(events, &dag.run_id, &tip.node_id)
        .iter()
        .any(|g| {
            critical(g)
                && matches!(
                    g.reason,
                    GapReason::UserOnlyDependency(_)
                        | GapReason::ContractViolation(_)
                        | GapReason::CapabilityMissing(_)
                )
        });
    Some(if autonomy != Autonomy::FullAutoNeverStop && blocking_gap {
        RunStatus::Blocked
    } else {
        RunStatus::InProgress
    })
}

//! The Console's read models (locks §6 "Projections API is internal-only"): one list row per
//! session, one view per session (runs, nodes, edges, preferred tips, blocked attempts) and one
//! view per node (notes, artifacts, gaps, blockers, preferences, capabilities, divergences,
//! decision trace).
//!
//! Plain data, deterministic given the data directory, and bounded: every text taken from
//! durable data is cut to a budget with the canonical truncation marker of `workrail-spec`, and
//! every list to [`LIST_MAX`] items. Built by `Workrail::console_*` (the read path only: no
//! session lock, no write); rendered by the Console and usable by the CLI alike. Salvage-aware:
//! an unhealthy session carries its [`SalvageNotice`] and only its validated prefix.

use serde::Serialize;
use workrail_spec::budget::truncate_with_marker;

/// Rendered notes are cut to this many bytes (64 KiB).
pub const NOTES_MAX_BYTES: usize = 64 * 1024;
/// Titles, labels and one-line texts are cut to this many bytes.
pub const TITLE_MAX_BYTES: usize = 200;
/// Longer texts (messages, summaries, details) are cut to this many bytes.
pub const TEXT_MAX_BYTES: usize = 2048;
/// Lists (sessions aside, which are paged) hold at most this many items.
pub const LIST_MAX: usize = 500;

/// `text` within `max` bytes, with the canonical marker where cut.
pub fn bounded(text: &str, max: usize) -> String {
    match truncate_with_marker(text, max) {
        Ok(t) => t.text.into_owned(),
        // Every budget here holds the marker; an impossible one keeps nothing rather than all.
        Err(_) => String::new(),
    }
}

/// `lane 2`, `lanes 1 and 3`, `lanes 1, 2 and 3`.
pub fn lane_list(indexes: &[u32]) -> String {
    let words: Vec<String> = indexes.iter().map(ToString::to_string).collect();
    match words.as_slice() {
        [] => "no lane".to_owned(),
        [one] => format!("lane {one}"),
        [init @ .., last] => format!("lanes {} and {last}", init.join(", ")),
    }
}

/// The first [`LIST_MAX`] items, and whether any were left out.
pub fn bounded_list<T>(mut items: Vec<T>) -> (Vec<T>, bool) {
    let cut = items.len() > LIST_MAX;
    items.truncate(LIST_MAX);
    (items, cut)
}

/// Why a session is shown as salvage, and how to get it out of the way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SalvageNotice {
    /// `corrupt_tail`, `corrupt_head`, `unknown_version` or `unreadable`.
    pub health: String,
    pub reason: String,
    pub detail: String,
    pub manifest_index: Option<u64>,
    /// What a person runs (`workrail repair …` / `workrail export …`).
    pub how_to_clear: String,
}

/// One row of the sessions list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRow {
    pub session_id: String,
    /// `healthy`, `corrupt_tail`, `corrupt_head`, `unknown_version` or `unreadable`.
    pub health: String,
    /// The workflow ids of its runs, each once, in run order.
    pub workflows: Vec<String>,
    /// Its runs' labels.
    pub labels: Vec<String>,
    /// The preferred run's status token (the run with the latest tip activity; lanes are not
    /// runs of their own here, decision D171).
    pub status: Option<String>,
    /// The session's runs, not counting lanes (decision D171).
    pub runs: usize,
    /// The lane runs that parallel steps of those runs started.
    pub lanes: usize,
    /// The last change of the session's manifest (RFC 3339 UTC), when known.
    pub last_activity: Option<String>,
    pub unresolved_gaps: usize,
}

impl SessionRow {
    /// The status a filter matches: the preferred run's status, or `corrupt` for any session
    /// that is not healthy.
    pub fn matches_status(&self, status: &str) -> bool {
        if status == "corrupt" {
            return self.health != "healthy";
        }
        self.status.as_deref() == Some(status)
    }

    /// Case-insensitive text filter over session id, workflow ids and labels.
    pub fn matches_text(&self, query: &str) -> bool {
        let q = query.trim().to_lowercase();
        q.is_empty()
            || self.session_id.to_lowercase().contains(&q)
            || self
                .workflows
                .iter()
                .chain(&self.labels)
                .any(|s| s.to_lowercase().contains(&q))
    }
}

/// A session: its health and each run's DAG.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    pub session_id: String,
    /// The live-update version of the log this view was built from (see
    /// `Workrail::console_version`).
    pub version: String,
    pub health: String,
    pub salvage: Option<SalvageNotice>,
    pub events: usize,
    pub runs: Vec<RunView>,
}

/// A run's DAG as the Console draws it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunView {
    pub run_id: String,
    pub workflow_id: String,
    pub label: String,
    pub status: String,
    pub preferred_tip: Option<String>,
    pub unresolved_gaps: usize,
    /// Every node of the run, drawn or not.
    pub node_count: usize,
    /// In `node_created` order (the newest [`LIST_MAX`], and the preferred tip).
    pub nodes: Vec<NodeSummary>,
    pub edges: Vec<EdgeView>,
    /// True when the run has more nodes than [`LIST_MAX`] (the newest are kept).
    pub nodes_cut: bool,
    /// When this run is a lane: the parallel step's node that started it (decision D168).
    pub lane_of: Option<LaneOf>,
    /// The lanes this run's parallel steps started, one group per node that started any, in
    /// `node_created` order (decision D171).
    pub lane_groups: Vec<LaneGroupView>,
}

/// Where a lane run hangs: its parent run's node of the parallel step, and its index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LaneOf {
    pub parent_run_id: String,
    pub parent_node_id: String,
    /// From 1, in the authored order of the delegations.
    pub index: u32,
}

/// The lanes one node of a parallel step started, and their fan-in as it stands now (decision
/// D171): computed from the recorded block outputs under the step's merge strategy, exactly as
/// the acknowledgement of the step judges them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LaneGroupView {
    /// The node of the parallel step that started the lanes.
    pub node_id: String,
    /// The parallel step, when the node's snapshot and pinned workflow are readable.
    pub step_id: Option<String>,
    pub step_title: Option<String>,
    /// `concatenate`, `workspace` or `fail-on-conflict`; `None` when the step is unreadable.
    pub merge_strategy: Option<String>,
    /// A failed lane is disclosed instead of blocking the fan-in.
    pub allow_partial_results: bool,
    /// By lane index.
    pub lanes: Vec<LaneView>,
    /// Lane indexes in the order their block outputs were recorded.
    pub completed_order: Vec<u32>,
    /// The files two or more lanes touched, by path (none under `concatenate`).
    pub conflicts: Vec<LaneConflictView>,
}

/// One lane of a parallel step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LaneView {
    pub index: u32,
    /// The lane's run id (its `laneId`).
    pub run_id: String,
    pub workflow_id: String,
    pub label: String,
    /// From the latest block output: `in_progress` (none yet), `completed`, `partial` or
    /// `failed`.
    pub status: String,
    /// The latest block output's `summary`.
    pub summary: Option<String>,
    /// Its `filesModified` and `filesCreated`.
    pub files: Vec<String>,
    /// The lane run's own status (locks' run-status projection).
    pub run_status: String,
    pub preferred_tip: Option<String>,
    pub node_count: usize,
}

/// A file two or more lanes touched.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LaneConflictView {
    pub file: String,
    /// Lane indexes, in completion order.
    pub lanes: Vec<u32>,
    /// `first-complete-wins` (`workspace`) or `user-resolved` (`fail-on-conflict`).
    pub resolution: String,
    /// The lane whose change applies (`workspace` only).
    pub applied_from: Option<u32>,
}

/// A node of a run's DAG.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSummary {
    pub node_id: String,
    /// `step` or `checkpoint`.
    pub kind: String,
    pub parent: Option<String>,
    pub created_index: u64,
    /// The step the node waits at (its snapshot's pending step), or `complete`.
    pub step_id: Option<String>,
    pub title: String,
    pub blocked_attempts: usize,
    pub is_tip: bool,
    /// How many lanes the node started (a node of a parallel step), else 0.
    pub lanes: usize,
}

/// An edge of a run's DAG.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EdgeView {
    pub from: String,
    pub to: String,
    /// `acked_step` or `checkpoint`.
    pub kind: String,
    /// `idempotent_replay`, `intentional_fork`, `non_tip_advance` or `checkpoint_created`.
    pub cause: String,
}

/// Everything the Console shows about one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
    pub session_id: String,
    pub salvage: Option<SalvageNotice>,
    pub run_id: String,
    pub workflow_id: String,
    /// When the node's run is a lane: the parallel step's node that started it.
    pub lane_of: Option<LaneOf>,
    pub node: NodeSummary,
    /// The current recap notes (Markdown source, bounded).
    pub notes: Option<String>,
    pub artifacts: Vec<ArtifactView>,
    pub gaps: Vec<GapView>,
    pub blocked_attempts: Vec<BlockedAttempt>,
    pub autonomy: String,
    pub risk_policy: String,
    pub capabilities: Vec<CapabilityView>,
    pub divergences: Vec<DivergenceView>,
    pub decisions: Vec<DecisionView>,
}

/// An artifact output of the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactView {
    /// The artifact's own `kind` when it is readable and has one, else `artifact`.
    pub kind: String,
    pub content_type: String,
    pub bytes: u64,
    pub sha256: String,
}

/// A gap recorded at the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GapView {
    pub gap_id: String,
    pub severity: String,
    /// `<category>:<detail>`.
    pub reason_code: String,
    pub summary: String,
    /// A later gap record resolves it.
    pub resolved: bool,
}

/// A blocked acknowledgement attempt at the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockedAttempt {
    pub attempt_id: String,
    pub blockers: Vec<BlockerView>,
}

/// One blocker of a blocked attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BlockerView {
    pub code: String,
    pub message: String,
    /// The blocker's pointer as compact JSON.
    pub pointer: String,
    pub suggested_fix: Option<String>,
}

/// A capability observation on the node's ancestry (latest first per capability is up to the
/// reader; all are listed in log order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CapabilityView {
    pub capability: String,
    pub status: String,
    /// Provenance as compact JSON (`kind`, `enforcementGrade`, `detail`).
    pub provenance: String,
    /// The node it was observed at.
    pub node_id: String,
}

/// A divergence recorded at the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DivergenceView {
    pub reason: String,
    pub summary: String,
    pub related_step_id: Option<String>,
}

/// A decision trace entry recorded at the node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionView {
    pub kind: String,
    pub summary: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_texts_end_with_the_canonical_marker() {
        let long = "é".repeat(300);
        let cut = bounded(&long, TITLE_MAX_BYTES);
        assert!(cut.len() <= TITLE_MAX_BYTES);
        assert!(cut.ends_with(workrail_spec::budget::TRUNCATION_MARKER));
        assert_eq!(bounded("short", TITLE_MAX_BYTES), "short");
        let (items, cut) = bounded_list((0..LIST_MAX + 1).collect::<Vec<_>>());
        assert!(cut && items.len() == LIST_MAX);
    }
}

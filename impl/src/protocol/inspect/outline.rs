//! `workrail inspect <session>`: the session's runs as an outline (text) or as data (`--json`),
//! with the lanes of each parallel step under the node that started them (decision D170).
//!
//! A run's DAG is a tree drawn with glyphs: an unbranched stretch stays at one indentation,
//! and each branch of a fork opens under `├─` / `└─`, so two branches never read as one line
//! of work. Under a node come its blocked attempts (each with its first blocker) and, for a
//! node of a parallel step, its lanes: index, run, workflow, status and summary from the latest
//! block output, the files it lists, the lane run's own outline, and the conflicts of the
//! fan-in under the step's merge strategy. Lane runs are never listed as runs of their own,
//! except a lane whose parent node is not in the session (a damaged log's prefix).

use std::collections::HashSet;
use std::fmt::Write as _;

use serde::Serialize;
use workrail_spec::compiled::CompiledWorkflowSnapshotV1;
use workrail_spec::ids::{NodeId, RunId};
use workrail_spec::tools::LaneState;

use super::{NodeStep, RunSummary, node_step};
use crate::engine::fanin::{self, LaneStatus};
use crate::engine::{self, LaneFact};
use crate::projections::NodeInfo;
use crate::projections::console::{
    BlockedAttempt, LaneConflictView, LaneGroupView, LaneView, NodeSummary, SalvageNotice,
    TEXT_MAX_BYTES, bounded, lane_list,
};
use crate::protocol::Workrail;
use crate::protocol::facts::Facts;

/// How many nodes of one unbranched stretch of a run `workrail inspect` shows without `--all`:
/// its first [`CHAIN_HEAD`] and last [`CHAIN_TAIL`] (the newest, where the tip is). A node
/// that started lanes is always shown.
const CHAIN_HEAD: usize = 2;
const CHAIN_TAIL: usize = 8;
/// How much of a note or a blocker's message one outline line shows.
const LINE_CHARS: usize = 100;

/// Where a lane stands, from its latest block output.
pub(in crate::protocol) fn lane_state(fact: &LaneFact) -> LaneState {
    match fact.lane.output.as_ref().map(|o| o.status) {
        None => LaneState::InProgress,
        Some(LaneStatus::Completed) => LaneState::Completed,
        Some(LaneStatus::Partial) => LaneState::Partial,
        Some(LaneStatus::Failed) => LaneState::Failed,
    }
}

/// The lanes `info` started and their fan-in as it stands now, under the step's merge strategy
/// (decision D171): the same facts and the same judgement as the acknowledgement of the step.
/// `None` for a node that started no lane. `compiled` is the node's run's pinned workflow;
/// `runs` the session's run summaries (for each lane run's label and status).
pub(in crate::protocol) fn lane_group(
    wr: &Workrail,
    facts: &Facts<'_>,
    compiled: Option<&CompiledWorkflowSnapshotV1>,
    info: &NodeInfo,
    runs: &[RunSummary],
) -> Option<LaneGroupView> {
    let recorded = crate::protocol::lanes::lane_facts(wr, facts, &info.node_id);
    if recorded.is_empty() {
        return None;
    }
    let (step_id, step_title) = match node_step(wr, compiled, info) {
        NodeStep::Pending { step_id, title } => (Some(step_id.to_string()), title),
        _ => (None, None),
    };
    let spec = compiled.and_then(|c| {
        let snapshot = wr.store.snapshot(&info.snapshot_ref()).ok()?;
        crate::protocol::lanes::pending_lanes(c, &snapshot.engine_payload.engine_state)
    });
    // Without the step (an unreadable snapshot) there is no strategy to judge conflicts by:
    // the order and statuses still stand, and no conflict is claimed.
    let fan = match spec {
        Some(spec) => engine::lanes::fan_in(spec, &recorded),
        None => {
            let lanes: Vec<fanin::Lane> = recorded.iter().map(|f| f.lane.clone()).collect();
            fanin::fan_in(&lanes, fanin::MergeStrategy::Concatenate)
        }
    };
    let index_of = |id: &String| {
        recorded
            .iter()
            .find(|f| &f.lane.lane_id == id)
            .map(|f| f.index)
    };
    let lanes = recorded
        .iter()
        .map(|f| {
            let run = runs.iter().find(|r| r.run_id.as_str() == f.lane.lane_id);
            LaneView {
                index: f.index,
                run_id: f.lane.lane_id.clone(),
                workflow_id: run.map_or_else(String::new, |r| r.workflow_id.to_string()),
                label: run.map_or_else(|| f.lane.lane_id.clone(), |r| r.label.clone()),
                status: lane_state(f).as_str().to_owned(),
                summary: f.summary.as_deref().map(|s| bounded(s, TEXT_MAX_BYTES)),
                files: f
                    .lane
                    .output
                    .as_ref()
                    .map(|o| o.files.clone())
                    .unwrap_or_default(),
                run_status: run.map_or_else(String::new, |r| r.status.as_str().to_owned()),
                preferred_tip: run.and_then(|r| r.preferred_tip.as_ref().map(ToString::to_string)),
                node_count: run.map_or(0, |r| r.nodes),
            }
        })
        .collect();
    Some(LaneGroupView {
        node_id: info.node_id.to_string(),
        step_id,
        step_title,
        merge_strategy: spec.map(|s| s.merge_strategy.to_string()),
        allow_partial_results: spec.is_some_and(|s| s.allow_partial_results),
        lanes,
        completed_order: fan.completed_order.iter().filter_map(index_of).collect(),
        conflicts: fan
            .conflicts
            .iter()
            .map(|c| LaneConflictView {
                file: c.conflicting_file.clone(),
                lanes: c.lanes.iter().filter_map(index_of).collect(),
                resolution: c.resolution.as_str().to_owned(),
                applied_from: c.applied_from.as_ref().and_then(index_of),
            })
            .collect(),
    })
}

/// What a conflict means, in words.
pub(in crate::protocol) fn conflict_words(c: &LaneConflictView) -> String {
    let outcome = match c.applied_from {
        Some(winner) => {
            format!(
                "lane {winner} completed first, so its change applies; check that the other change is not lost"
            )
        }
        None => "the user decides which change to keep".to_owned(),
    };
    format!(
        "`{}` was changed by {} ({}): {outcome}",
        c.file,
        lane_list(&c.lanes),
        c.resolution
    )
}

/// One line of free text: whitespace collapsed, cut at [`LINE_CHARS`] with `…`.
fn one_line(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let cut = workrail_spec::budget::floor_char_boundary(&line, LINE_CHARS);
    if cut < line.len() {
        format!("{}…", &line[..cut])
    } else {
        line
    }
}

/// A session seen whole: shared by the text and the JSON of `workrail inspect`.
pub(in crate::protocol) struct Outline<'a, 'f> {
    pub wr: &'a Workrail,
    pub facts: &'a Facts<'f>,
    pub runs: &'a [RunSummary],
    pub all: bool,
    /// The runs already shown (a lane is shown once, under its parent's node).
    shown: HashSet<RunId>,
    /// The nodes that started lanes.
    parents: HashSet<NodeId>,
}

impl<'a, 'f> Outline<'a, 'f> {
    pub fn new(wr: &'a Workrail, facts: &'a Facts<'f>, runs: &'a [RunSummary], all: bool) -> Self {
        let parents = runs
            .iter()
            .filter_map(|r| r.lane.as_ref().map(|l| l.parent_node_id.clone()))
            .collect();
        Outline {
            wr,
            facts,
            runs,
            all,
            shown: HashSet::new(),
            parents,
        }
    }

    /// The runs shown at the top: every run but the lanes whose parent node is in the session.
    fn top_level(&self) -> Vec<&'a RunSummary> {
        let nodes_of_session = |node: &NodeId| {
            self.facts
                .projection
                .runs
                .values()
                .any(|v| v.dag.nodes.contains_key(node))
        };
        self.runs
            .iter()
            .filter(|r| {
                r.lane
                    .as_ref()
                    .is_none_or(|l| !nodes_of_session(&l.parent_node_id))
            })
            .collect()
    }

    fn compiled(&self, run: &RunId) -> Option<std::sync::Arc<CompiledWorkflowSnapshotV1>> {
        let view = self.facts.run(run)?;
        self.wr.store.workflow(&view.dag.started.workflow_hash).ok()
    }

    /// The text outline of every run.
    pub fn text(&mut self, out: &mut String) {
        for run in self.top_level() {
            if !self.shown.insert(run.run_id.clone()) {
                continue;
            }
            let _ = writeln!(
                out,
                "\nrun {} \"{}\" workflow {}\n  status: {}\n  nodes: {}, unresolved gaps: {}",
                run.run_id, run.label, run.workflow_id, run.status, run.nodes, run.unresolved_gaps
            );
            if let Some(link) = &run.lane {
                let _ = writeln!(
                    out,
                    "  lane {} of run {} (its parent node {} is not in this session)",
                    link.lane_index, link.parent_run_id, link.parent_node_id
                );
            }
            self.run_text(out, run, "  ");
        }
    }

    /// A run's DAG as a tree under `prefix` (see the module doc). Iterative over the run's
    /// nodes, so a deep run cannot exhaust the stack; lanes recurse once per nesting level.
    fn run_text(&mut self, out: &mut String, run: &RunSummary, prefix: &str) {
        let Some(view) = self.facts.run(&run.run_id) else {
            return;
        };
        let Some(root) = view.dag.root.clone() else {
            return;
        };
        let compiled = self.compiled(&run.run_id);
        let tip = run.preferred_tip.clone();
        let on_tip_path: HashSet<NodeId> = tip
            .as_ref()
            .map(|t| view.ancestry(t).into_iter().collect())
            .unwrap_or_default();
        // (first node of a stretch, the line that opens its branch, the prefix of its lines)
        let mut branches: Vec<(NodeId, Option<String>, String)> =
            vec![(root, None, prefix.to_owned())];
        while let Some((start, header, prefix)) = branches.pop() {
            if let Some(header) = header {
                out.push_str(&header);
                out.push('\n');
            }
            let mut stretch = vec![start];
            let mut last = self.facts.node(&run.run_id, &stretch[0]);
            while let Some(info) = last
                && let [only] = info.children.as_slice()
            {
                stretch.push(only.clone());
                last = self.facts.node(&run.run_id, only);
            }
            let children = last.map(|l| l.children.clone()).unwrap_or_default();
            let len = stretch.len();
            let keep = |i: usize, node: &NodeId| {
                self.all
                    || len <= CHAIN_HEAD + CHAIN_TAIL + 1
                    || i < CHAIN_HEAD
                    || i >= len - CHAIN_TAIL
                    || self.parents.contains(node)
            };
            let kept: Vec<bool> = stretch
                .iter()
                .enumerate()
                .map(|(i, n)| keep(i, n))
                .collect();
            let mut i = 0;
            while i < len {
                if kept[i] {
                    self.node_text(out, run, compiled.as_deref(), &stretch[i], &prefix);
                    i += 1;
                    continue;
                }
                let hidden = kept[i..].iter().take_while(|k| !**k).count();
                if hidden == 1 {
                    // Hiding a single node would cost the line that says so.
                    self.node_text(out, run, compiled.as_deref(), &stretch[i], &prefix);
                } else {
                    let _ = writeln!(
                        out,
                        "{prefix}… {hidden} more nodes on this stretch (`workrail inspect --all` lists every node)"
                    );
                }
                i += hidden;
            }
            let n = children.len();
            // Branches in order: the first is shown first, so pushed last.
            for (k, child) in children.iter().enumerate().rev() {
                let (glyph, rail) = if k + 1 == n {
                    ("└─", "   ")
                } else {
                    ("├─", "│  ")
                };
                let toward_tip = if on_tip_path.contains(child) {
                    " (leads to the preferred tip)"
                } else {
                    ""
                };
                branches.push((
                    child.clone(),
                    Some(format!(
                        "{prefix}{glyph} branch {} of {n}{toward_tip}",
                        k + 1
                    )),
                    format!("{prefix}{rail}"),
                ));
            }
        }
    }

    /// One node's line, its blocked attempts and its lanes.
    fn node_text(
        &mut self,
        out: &mut String,
        run: &RunSummary,
        compiled: Option<&CompiledWorkflowSnapshotV1>,
        node: &NodeId,
        prefix: &str,
    ) {
        let Some(info) = self.facts.node(&run.run_id, node) else {
            return;
        };
        let step = match node_step(self.wr, compiled, info) {
            NodeStep::Pending { step_id, title } => {
                let title = title.map(|t| format!("\"{t}\" ")).unwrap_or_default();
                format!("at step {title}[{step_id}]")
            }
            other => other.label().to_owned(),
        };
        // An acknowledgement's notes attach to the node it creates (D22), so they tell of the
        // step the parent waited at, not of the step this node waits at: named, so the line
        // does not read as notes of the wrong step.
        // Inspection's facts are of a whole log read once, so this read cannot fail.
        let notes = self
            .facts
            .recap_notes(&run.run_id, node)
            .ok()
            .flatten()
            .map(|n| match self.step_before(run, compiled, info) {
                Some(done) => format!(" — recap of {done}: {}", one_line(&n)),
                None => format!(" — {}", one_line(&n)),
            })
            .unwrap_or_default();
        let tip = if run.preferred_tip.as_ref() == Some(node) {
            " [preferred tip]"
        } else {
            ""
        };
        let _ = writeln!(out, "{prefix}- {node} ({}, {step}){tip}{notes}", info.kind);
        let attempts = blocked_attempts(self.facts, node);
        let count = attempts.len();
        for (k, attempt) in attempts.iter().enumerate() {
            let first = attempt.blockers.first();
            let more = attempt.blockers.len().saturating_sub(1);
            let _ = writeln!(
                out,
                "{prefix}    blocked attempt {} of {count}: {}{}",
                k + 1,
                first.map_or_else(
                    || "no blocker recorded".to_owned(),
                    |b| format!("{} — {}", b.code, one_line(&b.message))
                ),
                if more > 0 {
                    format!(" (+{more} more)")
                } else {
                    String::new()
                }
            );
        }
        if self.parents.contains(node)
            && let Some(group) = lane_group(self.wr, self.facts, compiled, info, self.runs)
        {
            self.lanes_text(out, &group, &format!("{prefix}    "));
        }
    }

    /// The step `info`'s parent waited at, as `"Title" [step-id]`: the step whose
    /// acknowledgement created `info`.
    fn step_before(
        &self,
        run: &RunSummary,
        compiled: Option<&CompiledWorkflowSnapshotV1>,
        info: &crate::projections::NodeInfo,
    ) -> Option<String> {
        let parent = self.facts.node(&run.run_id, info.parent.as_ref()?)?;
        match node_step(self.wr, compiled, parent) {
            NodeStep::Pending { step_id, title } => Some(match title {
                Some(t) => format!("\"{t}\" [{step_id}]"),
                None => format!("[{step_id}]"),
            }),
            _ => None,
        }
    }

    fn lanes_text(&mut self, out: &mut String, group: &LaneGroupView, prefix: &str) {
        let step = match (&group.step_title, &group.step_id) {
            (Some(title), Some(id)) => format!(" of step \"{title}\" [{id}]"),
            (None, Some(id)) => format!(" of step [{id}]"),
            _ => String::new(),
        };
        let strategy = group
            .merge_strategy
            .as_deref()
            .map_or_else(String::new, |s| format!(", merge strategy {s}"));
        let order = if group.completed_order.is_empty() {
            "no block output recorded yet".to_owned()
        } else {
            format!(
                "block outputs recorded in the order {}",
                lane_list(&group.completed_order)
            )
        };
        let _ = writeln!(
            out,
            "{prefix}{} lane(s){step}{strategy}; {order}",
            group.lanes.len()
        );
        for lane in &group.lanes {
            let summary = lane
                .summary
                .as_deref()
                .map(|s| format!(" — {}", one_line(s)))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "{prefix}lane {} {} \"{}\" workflow {}: {}{summary}",
                lane.index,
                lane.run_id,
                lane.label,
                lane.workflow_id,
                lane.status.replace('_', " ")
            );
            if !lane.files.is_empty() {
                let _ = writeln!(out, "{prefix}    files: {}", lane.files.join(", "));
            }
            let Some(run) = self.runs.iter().find(|r| r.run_id.as_str() == lane.run_id) else {
                continue;
            };
            if self.shown.insert(run.run_id.clone()) {
                self.run_text(out, run, &format!("{prefix}    "));
            }
        }
        for conflict in &group.conflicts {
            let _ = writeln!(out, "{prefix}conflict: {}", conflict_words(conflict));
        }
    }

    /// Every top-level run as data.
    pub fn json(&mut self) -> Vec<RunInspection> {
        let mut out = Vec::new();
        for run in self.top_level() {
            if self.shown.insert(run.run_id.clone()) {
                out.push(self.run_json(run));
            }
        }
        out
    }

    fn run_json(&mut self, run: &RunSummary) -> RunInspection {
        let compiled = self.compiled(&run.run_id);
        let mut infos: Vec<NodeInfo> = self
            .facts
            .run(&run.run_id)
            .map(|v| v.dag.nodes.values().cloned().collect())
            .unwrap_or_default();
        infos.sort_by_key(|i| i.created_index);
        let mut nodes = Vec::with_capacity(infos.len());
        for info in &infos {
            let summary = self.wr.console_node_summary(
                self.facts,
                compiled.as_deref(),
                info,
                run.preferred_tip.as_ref(),
            );
            let lanes = if self.parents.contains(&info.node_id) {
                lane_group(self.wr, self.facts, compiled.as_deref(), info, self.runs).map(|group| {
                    let runs = group
                        .lanes
                        .iter()
                        .filter_map(|l| {
                            let run = self.runs.iter().find(|r| r.run_id.as_str() == l.run_id)?;
                            self.shown
                                .insert(run.run_id.clone())
                                .then(|| self.run_json(run))
                        })
                        .collect();
                    LaneGroupInspection { group, runs }
                })
            } else {
                None
            };
            nodes.push(NodeInspection {
                node: summary,
                notes: self
                    .facts
                    .recap_notes(&run.run_id, &info.node_id)
                    .ok()
                    .flatten()
                    .map(|n| bounded(&n, TEXT_MAX_BYTES)),
                blocked: blocked_attempts(self.facts, &info.node_id),
                lane_group: lanes,
            });
        }
        RunInspection {
            run_id: run.run_id.to_string(),
            workflow_id: run.workflow_id.to_string(),
            label: run.label.clone(),
            status: run.status.as_str().to_owned(),
            preferred_tip: run.preferred_tip.as_ref().map(ToString::to_string),
            unresolved_gaps: run.unresolved_gaps,
            node_count: run.nodes,
            lane_of: run
                .lane
                .as_ref()
                .map(|l| crate::projections::console::LaneOf {
                    parent_run_id: l.parent_run_id.to_string(),
                    parent_node_id: l.parent_node_id.to_string(),
                    index: l.lane_index,
                }),
            nodes,
        }
    }
}

/// The blocked attempts recorded at `node`, with their blockers.
pub(in crate::protocol) fn blocked_attempts(
    facts: &Facts<'_>,
    node: &NodeId,
) -> Vec<BlockedAttempt> {
    use crate::projections::console::BlockerView;
    use workrail_spec::event::AdvanceOutcome;
    // Inspection's facts are of a whole log read once, so this read cannot fail.
    facts
        .advance_records(node)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(_, a)| match &a.outcome {
            AdvanceOutcome::Blocked { blockers, .. } => Some(BlockedAttempt {
                attempt_id: a.attempt_id.to_string(),
                blockers: blockers
                    .blockers()
                    .iter()
                    .map(|b| BlockerView {
                        code: b.code.as_str().to_owned(),
                        message: bounded(b.message.as_str(), TEXT_MAX_BYTES),
                        pointer: bounded(
                            &serde_json::to_string(&b.pointer).unwrap_or_default(),
                            TEXT_MAX_BYTES,
                        ),
                        suggested_fix: b
                            .suggested_fix
                            .as_ref()
                            .map(|f| bounded(f.as_str(), TEXT_MAX_BYTES)),
                    })
                    .collect(),
            }),
            AdvanceOutcome::Advanced { .. } => None,
        })
        .collect()
}

/// `workrail inspect --json`: the session and its runs (lanes under the nodes that started
/// them).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInspection {
    pub session_id: String,
    pub events: usize,
    pub health: String,
    pub salvage: Option<SalvageNotice>,
    /// The runs of the session that are no lane (and any lane whose parent node is missing).
    pub runs: Vec<RunInspection>,
}

/// One run: its facts and every node, in `node_created` order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunInspection {
    pub run_id: String,
    pub workflow_id: String,
    pub label: String,
    pub status: String,
    pub preferred_tip: Option<String>,
    pub unresolved_gaps: usize,
    pub node_count: usize,
    /// When the run is a lane: the parallel step's node that started it.
    pub lane_of: Option<crate::projections::console::LaneOf>,
    pub nodes: Vec<NodeInspection>,
}

/// One node: its summary (`parent` gives the tree), notes, blocked attempts, and the lanes it
/// started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeInspection {
    #[serde(flatten)]
    pub node: NodeSummary,
    /// The node's current recap notes (bounded).
    pub notes: Option<String>,
    /// Each blocked acknowledgement attempt at the node, with its blockers.
    pub blocked: Vec<BlockedAttempt>,
    /// For a node of a parallel step: its lanes, their fan-in, and each lane's run.
    pub lane_group: Option<LaneGroupInspection>,
}

/// A node's lanes and their runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LaneGroupInspection {
    #[serde(flatten)]
    pub group: LaneGroupView,
    /// Each lane's run, in lane order.
    pub runs: Vec<RunInspection>,
}

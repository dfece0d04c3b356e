//! A run's DAG as server-rendered SVG: a layered layout where a node's layer is its distance
//! from the root and each branch of a fork takes a lane of its own. A short run is drawn
//! across (layers are columns); a deep one top to bottom (layers are rows), so a long loop
//! scrolls with the page instead of sideways.

use std::collections::HashMap;

use maud::{Markup, html};

use crate::projections::console::RunView;

const ROW: u32 = 64;
const NODE_H: u32 = 40;
const PAD: u32 = 12;
/// The gap between columns.
const GUTTER: u32 = 36;
/// Node boxes are as wide as the run's longest title needs, within these bounds.
const NODE_W_MIN: u32 = 150;
const NODE_W_MAX: u32 = 420;
/// About how wide one character of a title is drawn (12 px sans-serif).
const CHAR_W: u32 = 7;
/// Runs with more layers than this are drawn top to bottom.
const ACROSS_MAX_LAYERS: u32 = 8;

/// About how wide one character of a node's second line is drawn (11 px).
const SUB_CHAR_W: u32 = 6;

/// A node's second line: kind, position, tip, blocked attempts, lanes.
fn sub_text(n: &crate::projections::console::NodeSummary) -> String {
    let mut text = format!("{} · #{}", n.kind, n.created_index);
    if n.is_tip {
        text.push_str(" · tip");
    }
    if n.blocked_attempts > 0 {
        text.push_str(&format!(" · {} blocked", n.blocked_attempts));
    }
    if n.lanes > 0 {
        text.push_str(&format!(" · {} lanes", n.lanes));
    }
    text
}

/// The width of the run's node boxes: room for its longest title and second line, within
/// bounds.
fn node_width(run: &RunView) -> u32 {
    let chars = |text: &str| u32::try_from(text.chars().count()).unwrap_or(u32::MAX);
    let longest = run
        .nodes
        .iter()
        .map(|n| {
            chars(&n.title)
                .saturating_mul(CHAR_W)
                .max(chars(&sub_text(n)).saturating_mul(SUB_CHAR_W))
        })
        .max()
        .unwrap_or(0);
    longest.saturating_add(16).clamp(NODE_W_MIN, NODE_W_MAX)
}

/// Column (depth) and lane of every node, by node id.
pub fn layout(run: &RunView) -> HashMap<String, (u32, u32)> {
    let ids: HashMap<&str, usize> = run
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.node_id.as_str(), i))
        .collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); run.nodes.len()];
    let mut roots = Vec::new();
    for (i, node) in run.nodes.iter().enumerate() {
        match node.parent.as_deref().and_then(|p| ids.get(p)) {
            Some(&p) => children[p].push(i),
            None => roots.push(i),
        }
    }
    // Depth-first, iteratively: a node's first child stays on its lane, every further child
    // opens the next free lane below everything drawn so far.
    let mut place = HashMap::new();
    let mut next_lane = 0u32;
    let mut stack: Vec<(usize, u32, u32)> = Vec::new();
    for &root in roots.iter().rev() {
        stack.push((root, 0, u32::MAX));
    }
    while let Some((i, depth, lane)) = stack.pop() {
        let lane = if lane == u32::MAX {
            next_lane += 1;
            next_lane - 1
        } else {
            lane
        };
        place.insert(run.nodes[i].node_id.clone(), (depth, lane));
        for (k, &c) in children[i].iter().enumerate().rev() {
            stack.push((c, depth + 1, if k == 0 { lane } else { u32::MAX }));
        }
    }
    place
}

fn node_class(n: &crate::projections::console::NodeSummary) -> String {
    let mut class = format!("node {}", n.kind);
    if n.is_tip {
        class.push_str(" tip");
    }
    if n.blocked_attempts > 0 {
        class.push_str(" blocked-attempt");
    }
    if n.lanes > 0 {
        class.push_str(" parallel");
    }
    class
}

/// The run's DAG; nodes link to their node page under `/sessions/<session>/nodes/`.
pub fn render(session_id: &str, run: &RunView) -> Markup {
    let place = layout(run);
    let node_w = node_width(run);
    let col = node_w + GUTTER;
    let cols = place.values().map(|p| p.0).max().map_or(1, |m| m + 1);
    let lanes = place.values().map(|p| p.1).max().map_or(1, |m| m + 1);
    let down = cols > ACROSS_MAX_LAYERS;
    let (width, height) = if down {
        (lanes * col - GUTTER + 2 * PAD, cols * ROW + 2 * PAD)
    } else {
        (cols * col - GUTTER + 2 * PAD, lanes * ROW + 2 * PAD)
    };
    let at = |id: &str| {
        place.get(id).map(|&(layer, lane)| {
            if down {
                (PAD + lane * col, PAD + layer * ROW)
            } else {
                (PAD + layer * col, PAD + lane * ROW)
            }
        })
    };
    // An edge leaves its parent's right side (across) or bottom (down) for the child's left
    // side or top, as a smooth curve.
    let edge_path = |(x1, y1): (u32, u32), (x2, y2): (u32, u32)| {
        if down {
            let (sx, sy, tx, ty) = (x1 + node_w / 2, y1 + NODE_H, x2 + node_w / 2, y2);
            let mid = (sy + ty) / 2;
            format!("M{sx},{sy} C{sx},{mid} {tx},{mid} {tx},{ty}")
        } else {
            let (sx, sy, tx, ty) = (x1 + node_w, y1 + NODE_H / 2, x2, y2 + NODE_H / 2);
            let mid = (sx + tx) / 2;
            format!("M{sx},{sy} C{mid},{sy} {mid},{ty} {tx},{ty}")
        }
    };
    html! {
        svg class="dag" xmlns="http://www.w3.org/2000/svg" width=(width) height=(height)
            viewBox=(format!("0 0 {width} {height}")) role="img"
            data-orientation=(if down { "down" } else { "across" })
            aria-label=(format!("DAG of run {}", run.run_id)) {
            @for e in &run.edges {
                @if let (Some(from), Some(to)) = (at(&e.from), at(&e.to)) {
                    path class=(format!("edge {}", e.kind)) data-from=(e.from) data-to=(e.to)
                        data-kind=(e.kind) data-cause=(e.cause)
                        d=(edge_path(from, to)) {}
                }
            }
            @for n in &run.nodes {
                @if let Some((x, y)) = at(&n.node_id) {
                    g class=(node_class(n)) data-node-id=(n.node_id) data-kind=(n.kind)
                        data-blocked-attempts=[(n.blocked_attempts > 0).then_some(n.blocked_attempts)]
                        data-lanes=[(n.lanes > 0).then_some(n.lanes)] {
                        title { (n.title) " (" (n.kind) ", " (n.node_id) ")"
                            @if n.is_tip { ", preferred tip" }
                            @if n.blocked_attempts > 0 { ", " (n.blocked_attempts) " blocked attempt(s)" }
                            @if n.lanes > 0 { ", started " (n.lanes) " lane(s), listed under the graph" } }
                        a href=(format!("/sessions/{session_id}/nodes/{}", n.node_id)) {
                            rect x=(x) y=(y) width=(node_w) height=(NODE_H) rx="6" {}
                            text class="title" x=(x + 8) y=(y + 17) { (n.title) }
                            text class="sub" x=(x + 8) y=(y + 32) { (sub_text(n)) }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::projections::console::NodeSummary;

    fn node(id: &str, parent: Option<&str>, created: u64) -> NodeSummary {
        NodeSummary {
            node_id: id.to_owned(),
            kind: "step".to_owned(),
            parent: parent.map(str::to_owned),
            created_index: created,
            step_id: None,
            title: id.to_owned(),
            blocked_attempts: 0,
            is_tip: false,
            lanes: 0,
        }
    }

    #[test]
    fn a_fork_opens_a_second_lane() {
        let run = RunView {
            run_id: "run".into(),
            workflow_id: "a.b".into(),
            label: String::new(),
            status: "in_progress".into(),
            preferred_tip: None,
            unresolved_gaps: 0,
            node_count: 4,
            nodes: vec![
                node("r", None, 0),
                node("a", Some("r"), 1),
                node("b", Some("a"), 2),
                node("c", Some("r"), 3),
            ],
            edges: Vec::new(),
            nodes_cut: false,
            lane_of: None,
            lane_groups: Vec::new(),
        };
        let place = layout(&run);
        assert_eq!(place["r"], (0, 0));
        assert_eq!(place["a"], (1, 0));
        assert_eq!(place["b"], (2, 0));
        assert_eq!(place["c"], (1, 1));
        let svg = render("sess", &run).into_string();
        assert!(svg.contains("data-orientation=\"across\""), "{svg}");
    }

    /// A long loop is drawn top to bottom: the drawing grows down, not sideways.
    #[test]
    fn a_deep_run_is_drawn_top_to_bottom() {
        let ids: Vec<String> = (0..40).map(|i| format!("n{i}")).collect();
        let nodes = ids
            .iter()
            .enumerate()
            .map(|(i, id)| node(id, i.checked_sub(1).map(|p| ids[p].as_str()), i as u64))
            .collect();
        let run = RunView {
            run_id: "run".into(),
            workflow_id: "a.b".into(),
            label: String::new(),
            status: "in_progress".into(),
            preferred_tip: None,
            unresolved_gaps: 0,
            node_count: 40,
            nodes,
            edges: Vec::new(),
            nodes_cut: false,
            lane_of: None,
            lane_groups: Vec::new(),
        };
        let svg = render("sess", &run).into_string();
        assert!(svg.contains("data-orientation=\"down\""), "{svg}");
        let attr = |name: &str| -> u32 {
            let start = svg.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
            svg[start..].split('"').next().unwrap().parse().unwrap()
        };
        assert!(attr("height") > 10 * attr("width"), "{svg}");
    }
}

//! A run's DAG as server-rendered SVG: a layered layout where a node's layer is its distance
//! from the root and each branch of a fork takes a lane of its own (decision D181).
//!
//! Every run is a tree (a node has one parent), so placing lanes depth-first, a node's first
//! child on its own lane and every further child on the next free lane below everything drawn
//! so far, draws no two edges crossing; `crossings` counts them so tests can hold that.
//!
//! The drawing carries both orientations: across (layers are columns) and down (layers are
//! rows). The SVG is drawn across for short runs and down for deep ones; `console.js` then picks
//! the orientation that shows the whole run largest in its container (down on a phone), and
//! adds pan, zoom and "fit". Without script the drawing still scales to its container's width.

use std::collections::{HashMap, HashSet};

use maud::{Markup, html};

use crate::projections::console::{NodeSummary, RunView};

const ROW: u32 = 72;
const NODE_H: u32 = 44;
const PAD: u32 = 16;
/// The gap between columns (room for an arrowhead and a fork label).
const GUTTER: u32 = 48;
/// Node boxes are as wide as the run's longest title needs, within these bounds; longer titles
/// are cut with an ellipsis on the drawing and given whole in the node's tooltip.
const NODE_W_MIN: u32 = 150;
const NODE_W_MAX: u32 = 280;
/// About how wide one character of a title is drawn (12 px sans-serif).
const CHAR_W: u32 = 7;
/// About how wide one character of a node's second line is drawn (11 px).
const SUB_CHAR_W: u32 = 6;
/// Runs with more layers than this are drawn top to bottom before any script runs.
const ACROSS_MAX_LAYERS: u32 = 8;

/// Where a node sits: its layer (distance from the root) and its lane.
pub type Place = (u32, u32);

/// The position of a node along its path: how many step nodes lead to it, itself included
/// (decision D181). A checkpoint node is not a step of its own: it shows the position of the
/// step it was recorded at.
pub fn positions(run: &RunView) -> HashMap<String, u32> {
    let by_id: HashMap<&str, &NodeSummary> =
        run.nodes.iter().map(|n| (n.node_id.as_str(), n)).collect();
    let mut out: HashMap<String, u32> = HashMap::new();
    // `nodes` is in creation order, so a parent comes before its children.
    for n in &run.nodes {
        let parent = n
            .parent
            .as_deref()
            .filter(|p| by_id.contains_key(p))
            .and_then(|p| out.get(p).copied())
            .unwrap_or(0);
        let own = u32::from(n.kind == "step");
        out.insert(n.node_id.clone(), parent + own);
    }
    out
}

/// A node's second line: its position, kind, tip, blocked attempts, lanes.
fn sub_text(n: &NodeSummary, position: u32) -> String {
    let mut text = if n.kind == "checkpoint" {
        format!("checkpoint at step {position}")
    } else {
        format!("step {position}")
    };
    if n.is_tip {
        text.push_str(" · tip");
    }
    if n.blocked_attempts > 0 {
        text.push_str(&format!(" · ⊘ {} blocked", n.blocked_attempts));
    }
    if n.lanes > 0 {
        text.push_str(&format!(" · {} lanes", n.lanes));
    }
    text
}

fn chars(text: &str) -> u32 {
    u32::try_from(text.chars().count()).unwrap_or(u32::MAX)
}

/// The width of the run's node boxes: room for its longest title and second line, within
/// bounds.
fn node_width(run: &RunView, pos: &HashMap<String, u32>) -> u32 {
    let longest = run
        .nodes
        .iter()
        .map(|n| {
            let p = pos.get(&n.node_id).copied().unwrap_or(0);
            chars(&n.title)
                .saturating_mul(CHAR_W)
                .max(chars(&sub_text(n, p)).saturating_mul(SUB_CHAR_W))
        })
        .max()
        .unwrap_or(0);
    longest.saturating_add(20).clamp(NODE_W_MIN, NODE_W_MAX)
}

/// `text` cut to what `width` px hold at `char_w` px a character, with an ellipsis when cut.
fn fit(text: &str, width: u32, char_w: u32) -> String {
    let room = (width.saturating_sub(16) / char_w.max(1)) as usize;
    if text.chars().count() <= room {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(room.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Layer and lane of every node, by node id.
pub fn layout(run: &RunView) -> HashMap<String, Place> {
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
    let mut stack: Vec<(usize, u32, Option<u32>)> = Vec::new();
    for &root in roots.iter().rev() {
        stack.push((root, 0, None));
    }
    while let Some((i, depth, lane)) = stack.pop() {
        let lane = lane.unwrap_or_else(|| {
            next_lane += 1;
            next_lane - 1
        });
        place.insert(run.nodes[i].node_id.clone(), (depth, lane));
        for (k, &c) in children[i].iter().enumerate().rev() {
            stack.push((c, depth + 1, (k == 0).then_some(lane)));
        }
    }
    place
}

/// How many pairs of parent-to-child links cross when drawn between their layers as straight
/// segments (both links leave the same layer; they cross when their lane order flips).
pub fn crossings(run: &RunView, place: &HashMap<String, Place>) -> usize {
    let links: Vec<(Place, Place)> = run
        .nodes
        .iter()
        .filter_map(|n| {
            let to = *place.get(&n.node_id)?;
            let from = *place.get(n.parent.as_deref()?)?;
            Some((from, to))
        })
        .collect();
    let mut count = 0;
    for (i, a) in links.iter().enumerate() {
        for b in &links[i + 1..] {
            let same_layers = a.0.0 == b.0.0 && a.1.0 == b.1.0;
            let flips =
                (i64::from(a.0.1) - i64::from(b.0.1)) * (i64::from(a.1.1) - i64::from(b.1.1)) < 0;
            if same_layers && flips {
                count += 1;
            }
        }
    }
    count
}

/// The preferred tip and its ancestors: the path the run actually took.
fn tip_path(run: &RunView) -> HashSet<&str> {
    let parent: HashMap<&str, &str> = run
        .nodes
        .iter()
        .filter_map(|n| Some((n.node_id.as_str(), n.parent.as_deref()?)))
        .collect();
    let mut on = HashSet::new();
    let mut at = run.preferred_tip.as_deref();
    while let Some(id) = at {
        if !on.insert(id) {
            break;
        }
        at = parent.get(id).copied();
    }
    on
}

fn node_class(n: &NodeSummary, on_path: bool) -> String {
    let mut class = format!("node {}", n.kind);
    if n.is_tip {
        class.push_str(" tip");
    }
    if on_path {
        class.push_str(" on-path");
    }
    if n.blocked_attempts > 0 {
        class.push_str(" blocked-attempt");
    }
    if n.lanes > 0 {
        class.push_str(" parallel");
    }
    class
}

/// Both drawings' geometry: node boxes' top-left corners by orientation.
struct Geometry {
    node_w: u32,
    across: (u32, u32),
    down: (u32, u32),
}

impl Geometry {
    fn corner(&self, (layer, lane): Place, down: bool) -> (u32, u32) {
        let col = self.node_w + GUTTER;
        if down {
            (PAD + lane * col, PAD + layer * ROW)
        } else {
            (PAD + layer * col, PAD + lane * ROW)
        }
    }

    /// An edge leaves its parent's right side (across) or bottom (down) for the child's left
    /// side or top, as a smooth curve ending where the arrowhead points in.
    fn edge(&self, from: Place, to: Place, down: bool) -> (String, (u32, u32)) {
        let ((x1, y1), (x2, y2)) = (self.corner(from, down), self.corner(to, down));
        let w = self.node_w;
        if down {
            let (sx, sy, tx, ty) = (x1 + w / 2, y1 + NODE_H, x2 + w / 2, y2);
            let mid = (sy + ty) / 2;
            (
                format!("M{sx},{sy} C{sx},{mid} {tx},{mid} {tx},{ty}"),
                ((sx + tx) / 2 + 4, mid + 4),
            )
        } else {
            let (sx, sy, tx, ty) = (x1 + w, y1 + NODE_H / 2, x2, y2 + NODE_H / 2);
            let mid = (sx + tx) / 2;
            (
                format!("M{sx},{sy} C{mid},{sy} {mid},{ty} {tx},{ty}"),
                (mid - 12, (sy + ty) / 2 - 4),
            )
        }
    }
}

/// Whether an edge is a fork: a second way out of a node (a rewind that went another way).
fn is_fork(cause: &str) -> bool {
    matches!(cause, "intentional_fork" | "non_tip_advance")
}

/// The run's DAG with its controls; nodes link to their node page under
/// `/sessions/<session>/nodes/`.
pub fn render(session_id: &str, run: &RunView) -> Markup {
    let place = layout(run);
    let pos = positions(run);
    let on_path = tip_path(run);
    let node_w = node_width(run, &pos);
    let col = node_w + GUTTER;
    let layers = place.values().map(|p| p.0).max().map_or(1, |m| m + 1);
    let lanes = place.values().map(|p| p.1).max().map_or(1, |m| m + 1);
    let g = Geometry {
        node_w,
        across: (
            layers * col - GUTTER + 2 * PAD,
            lanes * ROW - (ROW - NODE_H) + 2 * PAD,
        ),
        down: (
            lanes * col - GUTTER + 2 * PAD,
            layers * ROW - (ROW - NODE_H) + 2 * PAD,
        ),
    };
    let down = layers > ACROSS_MAX_LAYERS;
    let (width, height) = if down { g.down } else { g.across };
    let marker = format!("arrow-{}", run.run_id);
    let marker_path = format!("arrow-path-{}", run.run_id);
    let xy = |(x, y): (u32, u32)| format!("{x} {y}");
    let forks = run.edges.iter().filter(|e| is_fork(&e.cause)).count();
    html! {
        figure class="graph" data-run-id=(run.run_id) {
            div class="graph-tools" role="toolbar" aria-label=(format!("Graph of run {}", run.run_id)) hidden {
                button type="button" class="zoom-in" aria-label="Zoom in" { "+" }
                button type="button" class="zoom-out" aria-label="Zoom out" { "−" }
                button type="button" class="fit" { "Fit" }
                span class="graph-hint" { "Drag to pan; Ctrl + wheel to zoom." }
            }
            div class="graph-box" {
                svg class="dag" xmlns="http://www.w3.org/2000/svg" width=(width) height=(height)
                    viewBox=(format!("0 0 {width} {height}")) role="group"
                    data-orientation=(if down { "down" } else { "across" })
                    data-layers=(layers) data-lanes=(lanes) data-crossings=(crossings(run, &place))
                    data-size-across=(xy(g.across)) data-size-down=(xy(g.down))
                    aria-label=(format!("Graph of run {}: {} node(s) in {} layer(s), {} fork(s)", run.run_id, run.nodes.len(), layers, forks)) {
                    defs {
                        marker id=(marker) viewBox="0 0 10 10" refX="10" refY="5"
                            markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" orient="auto-start-reverse" {
                            path class="arrowhead" d="M0,0 L10,5 L0,10 z" {}
                        }
                        marker id=(marker_path) viewBox="0 0 10 10" refX="10" refY="5"
                            markerUnits="userSpaceOnUse" markerWidth="9" markerHeight="9" orient="auto-start-reverse" {
                            path class="arrowhead on-path" d="M0,0 L10,5 L0,10 z" {}
                        }
                    }
                    @for e in &run.edges {
                        @if let (Some(&from), Some(&to)) = (place.get(&e.from), place.get(&e.to)) {
                            @let ((d_across, l_across), (d_down, l_down)) = (g.edge(from, to, false), g.edge(from, to, true));
                            @let path_edge = on_path.contains(e.from.as_str()) && on_path.contains(e.to.as_str());
                            @let (d, label) = if down { (&d_down, l_down) } else { (&d_across, l_across) };
                            path class=(format!("edge {}{}{}", e.kind, if path_edge { " on-path" } else { "" }, if is_fork(&e.cause) { " fork" } else { "" }))
                                data-from=(e.from) data-to=(e.to)
                                data-kind=(e.kind) data-cause=(e.cause)
                                data-d-across=(d_across) data-d-down=(d_down)
                                marker-end=(format!("url(#{})", if path_edge { &marker_path } else { &marker }))
                                d=(d) {}
                            @if is_fork(&e.cause) {
                                text class="edge-label" data-from=(e.from) data-to=(e.to)
                                    data-xy-across=(xy(l_across)) data-xy-down=(xy(l_down))
                                    x=(label.0) y=(label.1) {
                                    title { "Fork: " (e.cause.replace('_', " ")) }
                                    "fork"
                                }
                            }
                        }
                    }
                    @for n in &run.nodes {
                        @if let Some(&p) = place.get(&n.node_id) {
                            @let (x, y) = g.corner(p, down);
                            @let position = pos.get(&n.node_id).copied().unwrap_or(0);
                            g class=(node_class(n, on_path.contains(n.node_id.as_str())))
                                id=(format!("node-{}", n.node_id))
                                data-node-id=(n.node_id) data-kind=(n.kind)
                                data-layer=(p.0) data-lane=(p.1) data-position=(position)
                                data-xy-across=(xy(g.corner(p, false))) data-xy-down=(xy(g.corner(p, true)))
                                transform=(format!("translate({x},{y})"))
                                data-blocked-attempts=[(n.blocked_attempts > 0).then_some(n.blocked_attempts)]
                                data-lanes=[(n.lanes > 0).then_some(n.lanes)] {
                                title { (n.title) " — " (sub_text(n, position))
                                    @if n.is_tip { ", the preferred tip" }
                                    @if n.lanes > 0 { "; its lanes are listed under the graph" } }
                                // Named by its visible text; the whole title is in the tooltip.
                                a href=(format!("/sessions/{session_id}/nodes/{}", n.node_id)) {
                                    rect width=(node_w) height=(NODE_H) rx="6" {}
                                    text class="title" x="8" y="18" { (fit(&n.title, node_w, CHAR_W)) }
                                    text class="sub" x="8" y="35" { (fit(&sub_text(n, position), node_w, SUB_CHAR_W)) }
                                }
                            }
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
    use crate::projections::console::EdgeView;

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

    fn run_of(nodes: Vec<NodeSummary>, tip: Option<&str>) -> RunView {
        let edges = nodes
            .iter()
            .filter_map(|n| {
                let parent = n.parent.clone()?;
                let first = nodes
                    .iter()
                    .find(|m| m.parent.as_deref() == Some(parent.as_str()))
                    .is_some_and(|m| m.node_id == n.node_id);
                Some(EdgeView {
                    from: parent,
                    to: n.node_id.clone(),
                    kind: "acked_step".into(),
                    cause: if first {
                        "idempotent_replay".into()
                    } else {
                        "intentional_fork".into()
                    },
                })
            })
            .collect();
        RunView {
            run_id: "run".into(),
            workflow_id: "a.b".into(),
            label: String::new(),
            status: "in_progress".into(),
            preferred_tip: tip.map(str::to_owned),
            unresolved_gaps: 0,
            node_count: nodes.len(),
            nodes,
            edges,
            nodes_cut: false,
            lane_of: None,
            lane_groups: Vec::new(),
        }
    }

    #[test]
    fn a_fork_opens_a_second_lane() {
        let run = run_of(
            vec![
                node("r", None, 0),
                node("a", Some("r"), 1),
                node("b", Some("a"), 2),
                node("c", Some("r"), 3),
            ],
            Some("b"),
        );
        let place = layout(&run);
        assert_eq!(place["r"], (0, 0));
        assert_eq!(place["a"], (1, 0));
        assert_eq!(place["b"], (2, 0));
        assert_eq!(place["c"], (1, 1));
        let svg = render("sess", &run).into_string();
        assert!(svg.contains("data-orientation=\"across\""), "{svg}");
    }

    /// decision: D181
    /// A fork-heavy run (every step node forks twice, three layers deep, with a rewind from a
    /// deep node back to the root): seven layers, no crossings, a fork label per fork edge,
    /// arrowheads on every edge, the tip's path marked, and no event index in any label.
    #[test]
    fn a_fork_heavy_run_is_drawn_in_seven_layers_without_crossings() {
        let mut nodes = vec![node("n0", None, 0)];
        let mut frontier = vec!["n0".to_owned()];
        let mut created = 1;
        for _ in 0..3 {
            let mut next = Vec::new();
            for parent in &frontier {
                for _ in 0..2 {
                    let id = format!("n{created}");
                    nodes.push(node(&id, Some(parent), created));
                    next.push(id);
                    created += 1;
                }
            }
            frontier = next;
        }
        // A long branch out of the root, to seven layers.
        let mut parent = "n0".to_owned();
        for _ in 0..6 {
            let id = format!("n{created}");
            nodes.push(node(&id, Some(&parent), created));
            parent = id;
            created += 1;
        }
        let tip = parent.clone();
        for n in &mut nodes {
            n.is_tip = n.node_id == tip;
        }
        nodes[3].kind = "checkpoint".into();
        nodes[2].blocked_attempts = 2;
        let run = run_of(nodes, Some(&tip));
        let place = layout(&run);
        let layers = place.values().map(|p| p.0).max().unwrap() + 1;
        assert_eq!(layers, 7);
        assert_eq!(crossings(&run, &place), 0);
        // Lanes are as few as the leaves: one per branch end.
        let leaves = run
            .nodes
            .iter()
            .filter(|n| {
                !run.nodes
                    .iter()
                    .any(|m| m.parent.as_ref() == Some(&n.node_id))
            })
            .count();
        let lanes = place.values().map(|p| p.1).max().unwrap() + 1;
        assert_eq!(lanes as usize, leaves);

        let svg = render("sess", &run).into_string();
        let forks = run.edges.iter().filter(|e| is_fork(&e.cause)).count();
        assert!(forks >= 8, "{forks}");
        assert_eq!(svg.matches("class=\"edge-label\"").count(), forks);
        assert_eq!(
            svg.matches("marker-end=\"url(#arrow").count(),
            run.edges.len()
        );
        // The tip's path: the root and the six nodes of the long branch, and its six edges.
        assert_eq!(svg.matches("on-path").count() - 1, 7 + 6, "{svg}");
        assert!(svg.contains("data-layers=\"7\""));
        assert!(svg.contains("checkpoint at step"), "{svg}");
        assert!(svg.contains("⊘ 2 blocked"), "{svg}");
        assert!(!svg.contains(" · #"), "no event index: {svg}");
        assert!(svg.contains("data-d-down=") && svg.contains("data-xy-down="));
    }

    /// decision: D181
    /// A crossing is counted when two links between the same layers swap their lanes.
    #[test]
    fn crossings_count_swapped_lanes() {
        let run = run_of(
            vec![
                node("r", None, 0),
                node("a", Some("r"), 1),
                node("b", Some("r"), 2),
                node("a1", Some("a"), 3),
                node("b1", Some("b"), 4),
            ],
            None,
        );
        let mut place = layout(&run);
        assert_eq!(crossings(&run, &place), 0);
        place.insert("a1".into(), (2, 1));
        place.insert("b1".into(), (2, 0));
        assert_eq!(crossings(&run, &place), 1);
    }

    /// decision: D181
    /// A step's position counts the step nodes on its path; a checkpoint keeps its step's.
    #[test]
    fn positions_count_steps_on_the_path() {
        let mut nodes = vec![
            node("r", None, 0),
            node("a", Some("r"), 1),
            node("cp", Some("a"), 2),
            node("b", Some("cp"), 3),
        ];
        nodes[2].kind = "checkpoint".into();
        let pos = positions(&run_of(nodes, None));
        assert_eq!((pos["r"], pos["a"], pos["cp"], pos["b"]), (1, 2, 2, 3));
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
        let run = run_of(nodes, None);
        let svg = render("sess", &run).into_string();
        assert!(svg.contains("data-orientation=\"down\""), "{svg}");
        let attr = |name: &str| -> u32 {
            let start = svg.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
            svg[start..].split('"').next().unwrap().parse().unwrap()
        };
        assert!(attr("height") > 10 * attr("width"), "{svg}");
    }
}

//! The run DAG and the policies over it: preferred tip, run status, current outputs, gaps,
//! capabilities, effective preferences, advance outcomes.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;

use workrail_spec::closed::{
    Autonomy, Capability, CapabilityStatus, EdgeCauseKind, EdgeKind, EnforcementGrade, GapSeverity,
    NodeKind, ObservationKey, OutputChannel, RunStatus,
};
use workrail_spec::event::{
    CapabilityObserved, EdgeCreated, EffectivePreferences, EventData, GapRecorded, GapResolution,
    NodeCreated, NodeOutputAppended, OutputPayload, RunStarted, SessionEvent,
};
use workrail_spec::ids::{GapId, NodeId, OutputId, RunId, Sha256Digest, SnapshotRef};
use workrail_spec::reason::GapReason;

use crate::growth::reserve_bounded;

/// One node of a run DAG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub node_id: NodeId,
    pub kind: NodeKind,
    pub parent: Option<NodeId>,
    /// Its snapshot's raw digest (see [`NodeInfo::snapshot_ref`]): 32 bytes in place, where the
    /// ref's text takes 87 on the heap (D233).
    snapshot: [u8; 32],
    /// EventIndex of its `node_created`.
    pub created_index: u64,
    /// Children in creation order.
    pub children: Children,
    /// The highest EventIndex of any event touching this node itself.
    pub own_activity: u64,
    /// The latest `preferences_changed` recorded on this node.
    pub own_preferences: Option<EffectivePreferences>,
    /// The preferences its parent had when this node was created (its parent's own, else what
    /// its parent inherited), so a node's preferences are found without walking its ancestry.
    pub inherited_preferences: Option<EffectivePreferences>,
    /// Positions (in the projected log) of the `advance_recorded` events at this node, ascending
    /// (see [`SessionProjection::advance_positions`]).
    pub advances: Positions,
    /// Its current output on each channel (see [`RunView::current_output`]).
    pub outputs: NodeOutputs,
}

impl NodeInfo {
    /// The snapshot it was created with.
    pub fn snapshot_ref(&self) -> SnapshotRef {
        SnapshotRef::from_digest(Sha256Digest::from_bytes(&self.snapshot))
    }
}

/// A node's current output on each channel, in 8 bytes each: the position of its
/// `node_output_appended` in the log, shifted left by one, with the low bit set when it is
/// notes, or `u64::MAX` for none (D230). A log position is far below 2^62: each event takes
/// more than a byte of disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeOutputs {
    recap: u64,
    artifact: u64,
}

impl Default for NodeOutputs {
    fn default() -> Self {
        Self {
            recap: u64::MAX,
            artifact: u64::MAX,
        }
    }
}

impl NodeOutputs {
    /// The current output on `channel`.
    pub fn get(&self, channel: OutputChannel) -> Option<CurrentOutput> {
        let packed = match channel {
            OutputChannel::Recap => self.recap,
            OutputChannel::Artifact => self.artifact,
        };
        (packed != u64::MAX).then_some(CurrentOutput {
            position: (packed >> 1) as usize,
            notes: packed & 1 == 1,
        })
    }

    /// The current outputs, recap first.
    pub fn iter(&self) -> impl Iterator<Item = (OutputChannel, CurrentOutput)> + '_ {
        [OutputChannel::Recap, OutputChannel::Artifact]
            .into_iter()
            .filter_map(|channel| self.get(channel).map(|output| (channel, output)))
    }

    fn set(&mut self, channel: OutputChannel, output: CurrentOutput) {
        let packed = ((output.position as u64) << 1) | u64::from(output.notes);
        match channel {
            OutputChannel::Recap => self.recap = packed,
            OutputChannel::Artifact => self.artifact = packed,
        }
    }
}

/// A short list held without an allocation of its own while it has at most one item: a long
/// run has one child per node and one advance per node, and a `Vec` of one costs an allocation
/// each (D229). A longer list is boxed, so the list itself is two words, not four (D232).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Few<T> {
    #[default]
    None,
    One(T),
    #[allow(
        clippy::box_collection,
        reason = "the box keeps the list two words: a list of many is rare, one of one is not"
    )]
    Many(Box<Vec<T>>),
}

impl<T> Few<T> {
    fn push_front(&mut self, item: T) {
        *self = match std::mem::take(self) {
            Self::None => Self::One(item),
            Self::One(first) => Self::Many(Box::new(vec![item, first])),
            Self::Many(mut all) => {
                all.insert(0, item);
                Self::Many(all)
            }
        };
    }

    fn push(&mut self, item: T) {
        *self = match std::mem::take(self) {
            Self::None => Self::One(item),
            Self::One(first) => Self::Many(Box::new(vec![first, item])),
            Self::Many(mut all) => {
                all.push(item);
                Self::Many(all)
            }
        };
    }

    pub fn as_slice(&self) -> &[T] {
        match self {
            Self::None => &[],
            Self::One(item) => std::slice::from_ref(item),
            Self::Many(all) => all,
        }
    }
}

impl<T> std::ops::Deref for Few<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

/// A node's children in creation order.
pub type Children = Few<NodeId>;

/// A node's `advance_recorded` positions in the log, ascending.
pub type Positions = Few<usize>;

/// An edge of a run DAG: what its `edge_created` records but the id of its cause's event, which
/// nothing reads from the projection (the log keeps it). Its node ids are the run's own (D229).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DagEdge {
    pub edge_kind: EdgeKind,
    pub from_node_id: NodeId,
    pub to_node_id: NodeId,
    pub cause: EdgeCauseKind,
}

/// A run's edges in recorded order (see [`RunDag::edges`]): 12 bytes each, its ends held as
/// slots of the run's nodes, not ids (D234).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct EdgeList {
    packed: Vec<PackedEdge>,
    /// The edges that named an id that was not a node of the run when they were recorded (a
    /// log no WorkRail wrote), whole: an entry of `packed` whose `from` is [`FOREIGN_EDGE`]
    /// holds its place here in `to`.
    foreign: Vec<DagEdge>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PackedEdge {
    from: u32,
    to: u32,
    kind: EdgeKind,
    cause: EdgeCauseKind,
}

/// `PackedEdge::from` of an edge kept whole in `EdgeList::foreign`.
const FOREIGN_EDGE: u32 = u32::MAX;

/// A run: its pin and its DAG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDag {
    pub run_id: RunId,
    pub started: RunStarted,
    pub nodes: NodeTable,
    edges: EdgeList,
    pub root: Option<NodeId>,
    /// What walks up a deep branch need of each node, by slot (see [`NodeTable`]), so they
    /// follow indexes instead of looking every id up.
    pub slots: SlotIndex,
}

/// A run's nodes in creation order: a node's "slot" is its place in that order, and its id
/// finds its slot in one lookup. A parent's slot is lower than its children's. A slot costs
/// its node alone (no tree of entries keyed by id, and the table grows by an eighth at a
/// time), D230. The lookup holds slots alone, 4 bytes each, hashed by the text of the id their
/// node holds (D232): the id is not held twice.
///
/// A log no WorkRail wrote may create one node id twice: both are kept, by slot, and the id
/// names the later one, as a map replacing the earlier would.
#[derive(Debug, Clone, Default)]
pub struct NodeTable {
    hasher: RandomState,
    /// The slot each id names (one per id: the later of a node created twice).
    slot_of: HashTable<u32>,
    by_slot: Vec<NodeInfo>,
}

impl PartialEq for NodeTable {
    fn eq(&self, other: &Self) -> bool {
        // The lookup follows from the nodes and their order.
        self.by_slot == other.by_slot
    }
}

impl Eq for NodeTable {}

impl NodeTable {
    fn hash(hasher: &RandomState, id: &NodeId) -> u64 {
        hasher.hash_one(id.as_str())
    }

    /// The node named `id`.
    pub fn get(&self, id: &NodeId) -> Option<&NodeInfo> {
        self.slot(id).map(|slot| &self.by_slot[slot as usize])
    }

    pub fn get_mut(&mut self, id: &NodeId) -> Option<&mut NodeInfo> {
        self.slot(id).map(|slot| &mut self.by_slot[slot as usize])
    }

    pub fn contains_key(&self, id: &NodeId) -> bool {
        self.slot(id).is_some()
    }

    /// How many node ids the run has.
    pub fn len(&self) -> usize {
        self.slot_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slot_of.is_empty()
    }

    /// The nodes in creation order (each id once: the later of a node created twice).
    pub fn values(&self) -> impl Iterator<Item = &NodeInfo> + '_ {
        let unique = self.is_unique();
        self.by_slot
            .iter()
            .enumerate()
            .filter(move |(slot, info)| unique || self.slot(&info.node_id) == Some(*slot as u32))
            .map(|(_, info)| info)
    }

    /// The node ids in creation order.
    pub fn keys(&self) -> impl Iterator<Item = &NodeId> + '_ {
        self.values().map(|info| &info.node_id)
    }

    /// The slot of the node named `id`.
    pub fn slot(&self, id: &NodeId) -> Option<u32> {
        let by_slot = &self.by_slot;
        self.slot_of
            .find(Self::hash(&self.hasher, id), |&slot| {
                by_slot[slot as usize].node_id == *id
            })
            .copied()
    }

    /// The node in `slot`.
    fn at(&self, slot: u32) -> &NodeInfo {
        &self.by_slot[slot as usize]
    }

    /// Every slot holds a node of its own id (no node was created twice).
    fn is_unique(&self) -> bool {
        self.by_slot.len() == self.slot_of.len()
    }

    /// How many slots there are.
    fn slots(&self) -> usize {
        self.by_slot.len()
    }

    /// Adds `info` in the next slot; its id now names it. A node created again keeps the
    /// advances recorded at its id before (a map keyed by id would have kept them).
    fn push(&mut self, mut info: NodeInfo) -> u32 {
        let slot = self.by_slot.len() as u32;
        let hash = Self::hash(&self.hasher, &info.node_id);
        let Self {
            hasher,
            slot_of,
            by_slot,
        } = self;
        match slot_of.find_mut(hash, |&s| by_slot[s as usize].node_id == info.node_id) {
            Some(named) => {
                let earlier = std::mem::take(&mut by_slot[*named as usize].advances);
                if info.advances.is_empty() {
                    info.advances = earlier;
                } else {
                    for &position in earlier.iter().rev() {
                        info.advances.push_front(position);
                    }
                }
                *named = slot;
            }
            None => {
                slot_of.insert_unique(hash, slot, |&s| {
                    Self::hash(hasher, &by_slot[s as usize].node_id)
                });
            }
        }
        reserve_bounded(by_slot, 1);
        by_slot.push(info);
        slot
    }
}

impl std::ops::Index<&NodeId> for NodeTable {
    type Output = NodeInfo;

    fn index(&self, id: &NodeId) -> &NodeInfo {
        match self.get(id) {
            Some(info) => info,
            None => panic!("{id} is not a node of the run"),
        }
    }
}

/// One step of [`RunView::upwards`].
enum Step<'v> {
    Id(&'v NodeId),
    Slot(u32),
}

/// Dense per-run node indexes by slot (see [`NodeTable`]).
///
/// Beside each slot's parent it keeps what a walk from that slot up to the root would find:
/// the root-most slot, how many nodes on the way have recap notes, and the nearest one of
/// them. A parent's slot is lower than its children's, so these are filled in slot order. A
/// recap change marks every slot from the changed one on as stale until [`SlotIndex::settle`]
/// refills them (usually only the newest few slots); a query on a stale slot walks instead.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlotIndex {
    /// The parent's slot, when the parent is a node of the run.
    parents: Vec<OptSlot>,
    /// Whether the node's current recap output is notes (its position is the node's,
    /// `NodeInfo::outputs`).
    recap_notes: Vec<bool>,
    /// The root-most slot above (or at) each slot.
    top: Vec<u32>,
    /// How many slots on the path root -> slot (inclusive) have recap notes.
    noted_count: Vec<u32>,
    /// The nearest slot on the path slot -> root (inclusive) with recap notes.
    nearest_noted: Vec<OptSlot>,
    /// The first slot whose `top`, `noted_count` and `nearest_noted` are out of date.
    stale_from: Option<u32>,
    /// How many slots lie above each slot (0 for a root-most one). Depends on parents only, so
    /// never stale.
    depth: Vec<u32>,
    /// The edges at each slot (D216), so a response asks no question of every edge.
    edges_at: Vec<SlotEdges>,
    /// An edge named a node that was not (yet) a node of the run (a log no WorkRail wrote):
    /// the edge questions then scan the edges instead.
    edges_unindexed: bool,
    /// A slot above each slot (itself at depth 0), chosen by the skew-binary rule (Myers, "An
    /// applicative random-access stack", 1983) so that the ancestor at any depth is found in
    /// O(log depth) steps: a rewind to an old node asks whether it lies on the preferred branch.
    jump: Vec<u32>,
}

/// A slot or none, in 4 bytes (`Option<u32>` takes 8): no run has 2^32 - 1 nodes (D234).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OptSlot(u32);

impl OptSlot {
    const NONE: Self = Self(u32::MAX);

    fn get(self) -> Option<u32> {
        (self != Self::NONE).then_some(self.0)
    }
}

impl From<Option<u32>> for OptSlot {
    fn from(slot: Option<u32>) -> Self {
        slot.map_or(Self::NONE, Self)
    }
}

/// How many `acked_step` and `checkpoint` edges leave a slot, and the log position of the first
/// edge entering it (`u32::MAX`: none yet), in 8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SlotEdges {
    step_out: u16,
    checkpoint_out: u16,
    first_in: u32,
}

impl Default for SlotEdges {
    fn default() -> Self {
        Self {
            step_out: 0,
            checkpoint_out: 0,
            first_in: u32::MAX,
        }
    }
}

/// The slots of the nodes with recap notes on a path, newest first (see
/// [`SlotIndex::noted_upwards`]).
#[derive(Debug)]
pub struct NotedUpwards<'v> {
    slots: &'v SlotIndex,
    next: Option<u32>,
    /// Walking every slot (the index is stale there) rather than jumping between noted ones.
    walking: bool,
    /// Stop at the first slot at this depth or above (the walk then covers only the slots
    /// strictly below a node).
    floor: Option<u32>,
}

impl<'v> NotedUpwards<'v> {
    fn unbounded_next_slot(&mut self) -> Option<u32> {
        let slots = self.slots;
        if self.walking {
            while let Some(slot) = self.next {
                self.next = slots.parents[slot as usize].get();
                if slots.recap_notes[slot as usize] {
                    return Some(slot);
                }
            }
            return None;
        }
        let slot = self.next?;
        self.next = slots.parents[slot as usize]
            .get()
            .and_then(|p| slots.nearest_noted[p as usize].get());
        Some(slot)
    }

    /// The same walk, yielding where each noted node's recap notes are in the log (`nodes` is
    /// the run's table, whose nodes hold where their outputs are).
    pub fn positions(mut self, nodes: &'v NodeTable) -> impl Iterator<Item = usize> + 'v {
        std::iter::from_fn(move || {
            loop {
                let slot = self.next()?;
                if let Some(output) = nodes.at(slot).outputs.get(OutputChannel::Recap)
                    && output.notes
                {
                    return Some(output.position);
                }
            }
        })
    }
}

impl Iterator for NotedUpwards<'_> {
    type Item = u32;

    fn next(&mut self) -> Option<u32> {
        let slot = self.unbounded_next_slot()?;
        if self
            .floor
            .is_some_and(|floor| self.slots.depth[slot as usize] <= floor)
        {
            self.next = None;
            return None;
        }
        Some(slot)
    }
}

/// A node's current output on one channel: where its `node_output_appended` event is in the
/// log, and whether its payload is notes. The payload itself stays in the log, read when asked
/// for, so a long session's notes are not all held in memory (D226).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CurrentOutput {
    pub position: usize,
    pub notes: bool,
}

impl CurrentOutput {
    fn of(position: usize, output: &NodeOutputAppended) -> Self {
        Self {
            position,
            notes: matches!(output.payload, OutputPayload::Notes { .. }),
        }
    }
}

impl SlotIndex {
    /// Adds the next slot, under `parent`'s slot when its parent is a node of the run.
    fn push(&mut self, parent: Option<u32>) -> u32 {
        let slot = self.parents.len() as u32;
        reserve_bounded(&mut self.parents, 1);
        self.parents.push(OptSlot::from(parent));
        reserve_bounded(&mut self.recap_notes, 1);
        self.recap_notes.push(false);
        reserve_bounded(&mut self.top, 1);
        self.top.push(slot);
        reserve_bounded(&mut self.noted_count, 1);
        self.noted_count.push(0);
        reserve_bounded(&mut self.nearest_noted, 1);
        self.nearest_noted.push(OptSlot::NONE);
        let (depth, jump) = match parent {
            Some(p) => {
                let jp = self.jump[p as usize];
                let jjp = self.jump[jp as usize];
                let (dp, djp, djjp) = (
                    self.depth[p as usize],
                    self.depth[jp as usize],
                    self.depth[jjp as usize],
                );
                (dp + 1, if dp - djp == djp - djjp { jjp } else { p })
            }
            None => (0, slot),
        };
        reserve_bounded(&mut self.depth, 1);
        self.depth.push(depth);
        reserve_bounded(&mut self.jump, 1);
        self.jump.push(jump);
        reserve_bounded(&mut self.edges_at, 1);
        self.edges_at.push(SlotEdges::default());
        self.fill(slot);
        slot
    }

    /// How many slots there are.
    fn len(&self) -> usize {
        self.parents.len()
    }

    /// The slot at `depth` on the path root -> `slot`, if `slot` is that deep.
    fn ancestor_at(&self, mut slot: u32, depth: u32) -> Option<u32> {
        while self.depth[slot as usize] > depth {
            let jump = self.jump[slot as usize];
            slot = if self.depth[jump as usize] >= depth {
                jump
            } else {
                self.parents[slot as usize].get()?
            };
        }
        (self.depth[slot as usize] == depth).then_some(slot)
    }

    /// Whether slot `ancestor` is slot `node` or lies on its path to the root, in O(log depth)
    /// steps.
    fn is_on_path(&self, ancestor: u32, node: u32) -> bool {
        self.ancestor_at(node, self.depth[ancestor as usize]) == Some(ancestor)
    }

    /// The noted slots strictly below `above` on the path root -> `tip`, newest first, and how
    /// many there are; `None` when `above` is not on that path. Only the ones a caller takes
    /// are visited, so a rewind far up a long branch costs what its recap shows.
    fn noted_below(&self, above: u32, tip: u32) -> Option<(usize, NotedUpwards<'_>)> {
        if !self.is_on_path(above, tip) {
            return None;
        }
        let floor = Some(self.depth[above as usize]);
        if self.is_fresh(tip) {
            let walk = NotedUpwards {
                slots: self,
                next: self.nearest_noted[tip as usize].get(),
                walking: false,
                floor,
            };
            let count = self.noted_count[tip as usize] - self.noted_count[above as usize];
            return Some((count as usize, walk));
        }
        let walk = || NotedUpwards {
            slots: self,
            next: Some(tip),
            walking: true,
            floor,
        };
        Some((walk().count(), walk()))
    }

    /// Computes slot's derived entries from its parent's (which must be up to date).
    fn fill(&mut self, slot: u32) {
        let i = slot as usize;
        let own = self.recap_notes[i];
        let (top, count, nearest) = match self.parents[i].get() {
            Some(p) => {
                let p = p as usize;
                (
                    self.top[p],
                    self.noted_count[p],
                    self.nearest_noted[p].get(),
                )
            }
            None => (slot, 0, None),
        };
        self.top[i] = top;
        self.noted_count[i] = count + u32::from(own);
        self.nearest_noted[i] = OptSlot::from(if own { Some(slot) } else { nearest });
    }

    /// Records whether the current recap output of the node in `slot` is notes.
    fn set_recap_notes(&mut self, slot: u32, notes: bool) {
        if self.recap_notes[slot as usize] != notes {
            self.recap_notes[slot as usize] = notes;
            self.stale_from = Some(self.stale_from.map_or(slot, |s| s.min(slot)));
        }
    }

    /// Brings every slot's derived entries up to date (the slots from the first changed one on).
    pub(crate) fn settle(&mut self) {
        if let Some(from) = self.stale_from.take() {
            for slot in from..self.len() as u32 {
                self.fill(slot);
            }
        }
    }

    fn is_fresh(&self, slot: u32) -> bool {
        self.stale_from.is_none_or(|s| slot < s)
    }

    /// How many slots on the path root -> `slot` are noted, and those slots newest first:
    /// jumping between noted slots, so only the ones a caller takes are visited.
    fn noted_upwards(&self, slot: Option<u32>) -> (usize, NotedUpwards<'_>) {
        let Some(slot) = slot else {
            let none = NotedUpwards {
                slots: self,
                next: None,
                walking: false,
                floor: None,
            };
            return (0, none);
        };
        if self.is_fresh(slot) {
            let walk = NotedUpwards {
                slots: self,
                next: self.nearest_noted[slot as usize].get(),
                walking: false,
                floor: None,
            };
            return (self.noted_count[slot as usize] as usize, walk);
        }
        let walk = || NotedUpwards {
            slots: self,
            next: Some(slot),
            walking: true,
            floor: None,
        };
        (walk().count(), walk())
    }

    /// The root-most slot on the path root -> `slot` (following slots).
    fn top_of(&self, mut slot: u32) -> u32 {
        if self.is_fresh(slot) {
            return self.top[slot as usize];
        }
        while let Some(parent) = self.parents[slot as usize].get() {
            slot = parent;
        }
        slot
    }
}

impl RunDag {
    /// The node of `root`'s subtree (`root` included) created last, which has no children.
    ///
    /// Two searches run in lockstep and the first to finish answers: a walk of the subtree, and
    /// a scan of the run's nodes from the newest down, asking of each whether `root` is on its
    /// path (O(log depth), D215). An old node's subtree can be most of the run, but its newest
    /// node is then among the run's newest; an abandoned branch is old but small. Either way
    /// the cost is twice the smaller of the two.
    pub fn newest_in_subtree(&self, root: &NodeId) -> Option<&NodeInfo> {
        let start = self.nodes.get(root)?;
        // The scan reads slots, which name each node once; a log with a node created twice (one
        // no WorkRail wrote) is only walked.
        let mut scan = match self.nodes.slot(root) {
            Some(slot) if self.nodes.is_unique() => Some((slot, self.nodes.slots() as u32)),
            _ => None,
        };
        let mut newest = start;
        let mut stack = vec![start];
        loop {
            let Some(node) = stack.pop() else {
                return Some(newest);
            };
            if node.created_index > newest.created_index {
                newest = node;
            }
            stack.extend(node.children.iter().filter_map(|c| self.nodes.get(c)));
            if let Some((floor, next)) = &mut scan
                && *next > *floor
            {
                *next -= 1;
                if self.slots.is_on_path(*floor, *next) {
                    return Some(self.nodes.at(*next));
                }
            }
        }
    }

    /// Adds the edge an `edge_created` at `position` of the log records.
    fn add_edge(&mut self, edge: &EdgeCreated, position: usize) {
        let slots = &mut self.slots;
        match (
            self.nodes.slot(&edge.from_node_id),
            self.nodes.slot(&edge.to_node_id),
            u32::try_from(position),
        ) {
            (Some(from), Some(to), Ok(position)) if position != u32::MAX => {
                let out = &mut slots.edges_at[from as usize];
                let count = match edge.edge_kind {
                    EdgeKind::AckedStep => &mut out.step_out,
                    EdgeKind::Checkpoint => &mut out.checkpoint_out,
                };
                match count.checked_add(1) {
                    Some(more) => *count = more,
                    // 65,535 edges of one kind from one node: counted by scanning from now on.
                    None => slots.edges_unindexed = true,
                }
                let first_in = &mut slots.edges_at[to as usize].first_in;
                if *first_in == u32::MAX {
                    *first_in = position;
                }
            }
            _ => slots.edges_unindexed = true,
        }
        let ends = (
            self.nodes.slot(&edge.from_node_id),
            self.nodes.slot(&edge.to_node_id),
        );
        let packed = match ends {
            (Some(from), Some(to)) if from != FOREIGN_EDGE => PackedEdge {
                from,
                to,
                kind: edge.edge_kind,
                cause: edge.cause.kind,
            },
            _ => {
                let to = self.edges.foreign.len() as u32;
                self.edges.foreign.push(DagEdge {
                    edge_kind: edge.edge_kind,
                    from_node_id: self.own_id(&edge.from_node_id),
                    to_node_id: self.own_id(&edge.to_node_id),
                    cause: edge.cause.kind,
                });
                PackedEdge {
                    from: FOREIGN_EDGE,
                    to,
                    kind: edge.edge_kind,
                    cause: edge.cause.kind,
                }
            }
        };
        reserve_bounded(&mut self.edges.packed, 1);
        self.edges.packed.push(packed);
    }

    /// The run's edges in recorded order, their node ids the run's own.
    pub fn edges(&self) -> impl Iterator<Item = DagEdge> + '_ {
        self.edges.packed.iter().map(|edge| match edge.from {
            FOREIGN_EDGE => self.edges.foreign[edge.to as usize].clone(),
            from => DagEdge {
                edge_kind: edge.kind,
                from_node_id: self.nodes.at(from).node_id.clone(),
                to_node_id: self.nodes.at(edge.to).node_id.clone(),
                cause: edge.cause,
            },
        })
    }

    /// How many edges the run has.
    pub fn edge_count(&self) -> usize {
        self.edges.packed.len()
    }

    /// Records an `advance_recorded` at `position` of the log at `node`; false when `node` is
    /// not a node of the run.
    fn record_advance(&mut self, node: &NodeId, position: usize) -> bool {
        match self.nodes.get_mut(node) {
            Some(info) => {
                info.advances.push(position);
                true
            }
            None => false,
        }
    }

    /// Records the current output on `channel` of the node in `slot`.
    fn set_output(&mut self, slot: u32, channel: OutputChannel, output: CurrentOutput) {
        self.nodes.by_slot[slot as usize]
            .outputs
            .set(channel, output);
        if channel == OutputChannel::Recap {
            self.slots.set_recap_notes(slot, output.notes);
        }
    }

    /// `id` as the run holds it when it is one of its nodes (the same shared text), else a copy:
    /// an id parsed from a later event is a text of its own, which the projection would keep
    /// once the log forgets the event (D225, D229).
    pub fn own_id(&self, id: &NodeId) -> NodeId {
        match self.nodes.get(id) {
            Some(info) => info.node_id.clone(),
            None => id.clone(),
        }
    }

    /// How many edges of `kind` leave `node`.
    pub fn edges_out(&self, node: &NodeId, kind: EdgeKind) -> usize {
        let slots = &self.slots;
        if slots.edges_unindexed {
            return self
                .edges()
                .filter(|e| e.edge_kind == kind && &e.from_node_id == node)
                .count();
        }
        self.nodes.slot(node).map_or(0, |slot| {
            let at = slots.edges_at[slot as usize];
            usize::from(match kind {
                EdgeKind::AckedStep => at.step_out,
                EdgeKind::Checkpoint => at.checkpoint_out,
            })
        })
    }

    /// Whether every edge named nodes of the run when it was recorded, so the edge questions
    /// are answered from the slots.
    pub fn edges_indexed(&self) -> bool {
        !self.slots.edges_unindexed
    }

    /// The log position of the first edge entering `node`, when every edge is indexed (`None`
    /// otherwise, or when none enters it): a caller confirms the event and scans when unsure.
    pub fn first_edge_in(&self, node: &NodeId) -> Option<usize> {
        let slots = &self.slots;
        if slots.edges_unindexed {
            return None;
        }
        self.nodes
            .slot(node)
            .map(|slot| slots.edges_at[slot as usize].first_in)
            .filter(|&p| p != u32::MAX)
            .map(|p| p as usize)
    }

    /// Adds the node a `node_created` at `index` introduces, under its parent.
    fn add_node(&mut self, node_id: NodeId, created: &NodeCreated, index: u64) {
        if created.parent_node_id.is_none() {
            self.root.get_or_insert(node_id.clone());
        }
        let mut inherited_preferences = None;
        if let Some(parent) = created
            .parent_node_id
            .as_ref()
            .and_then(|p| self.nodes.get_mut(p))
        {
            parent.children.push(node_id.clone());
            inherited_preferences = parent.own_preferences.or(parent.inherited_preferences);
        }
        let parent = created.parent_node_id.as_ref().map(|p| self.own_id(p));
        let parent_slot = created
            .parent_node_id
            .as_ref()
            .and_then(|p| self.nodes.slot(p));
        self.slots.push(parent_slot);
        self.nodes.push(NodeInfo {
            node_id,
            kind: created.node_kind,
            parent,
            snapshot: created.snapshot_ref.digest().bytes(),
            created_index: index,
            children: Few::None,
            own_activity: index,
            own_preferences: None,
            inherited_preferences,
            advances: Few::None,
            outputs: NodeOutputs::default(),
        });
    }
}

/// Which way the preferred-tip tie-breakers point (locks §2 names the keys, not the direction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TipPolicy {
    /// Highest last-activity; ties to the later `node_created`, then the greater NodeId: "the
    /// latest branch" in every key.
    Latest,
}

/// Everything derived for one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunView {
    pub dag: RunDag,
    pub preferred_tip: Option<NodeId>,
    /// Last-activity EventIndex of the preferred tip's reachable history.
    pub tip_last_activity: u64,
    /// Current (non-superseded) outputs on ids that are not nodes of the run (a log no
    /// WorkRail wrote), per id and channel; a node's own are in its `NodeInfo::outputs`. See
    /// [`RunView::current_output`].
    pub stray_outputs: BTreeMap<(NodeId, OutputChannel), CurrentOutput>,
    /// Gaps of this run that no later gap resolves, with their node.
    pub unresolved_gaps: Vec<(NodeId, GapRecorded)>,
    /// Latest capability status per (node, capability).
    pub capabilities: BTreeMap<(NodeId, Capability), CapabilityObserved>,
    /// Latest strong (enforcement-grade) observation per (node, capability).
    pub strong_capabilities: BTreeMap<(NodeId, Capability), CapabilityObserved>,
    /// Positions of this run's `context_set` events, ascending.
    pub context_sets: Vec<usize>,
}

impl RunView {
    /// The current (non-superseded) output of `node` on `channel`.
    pub fn current_output(&self, node: &NodeId, channel: OutputChannel) -> Option<CurrentOutput> {
        match self.dag.nodes.get(node) {
            Some(info) => info.outputs.get(channel),
            None if self.stray_outputs.is_empty() => None,
            None => self.stray_outputs.get(&(node.clone(), channel)).copied(),
        }
    }

    /// Every current output: the nodes' in creation order, then the strays'.
    pub fn current_outputs(
        &self,
    ) -> impl Iterator<Item = (&NodeId, OutputChannel, CurrentOutput)> + '_ {
        self.dag
            .nodes
            .values()
            .flat_map(|info| {
                info.outputs
                    .iter()
                    .map(move |(channel, output)| (&info.node_id, channel, output))
            })
            .chain(
                self.stray_outputs
                    .iter()
                    .map(|((node, channel), output)| (node, *channel, *output)),
            )
    }

    /// Where the current recap notes of `node` are in the log, if it has any.
    pub fn recap_notes_position(&self, node: &NodeId) -> Option<usize> {
        self.current_output(node, OutputChannel::Recap)
            .filter(|o| o.notes)
            .map(|o| o.position)
    }

    /// `node`, then its parent, and so on up to the root (no allocation of the whole chain, so
    /// a lookup that stops at the first hit does not pay for a deep branch).
    pub fn upwards<'v>(&'v self, node: &'v NodeId) -> impl Iterator<Item = &'v NodeId> + 'v {
        let (nodes, slots) = (&self.dag.nodes, &self.dag.slots);
        let mut next = Some(Step::Id(node));
        std::iter::from_fn(move || {
            let id = match next.take()? {
                Step::Id(id) => id,
                Step::Slot(slot) => &nodes.at(slot).node_id,
            };
            next = match nodes.slot(id) {
                Some(slot) => match slots.parents[slot as usize].get() {
                    Some(parent) => Some(Step::Slot(parent)),
                    // A parent that is not a node of the run (a log no WorkRail wrote) ends
                    // the walk after it is named.
                    None => self
                        .dag
                        .nodes
                        .get(id)
                        .and_then(|n| n.parent.as_ref())
                        .map(Step::Id),
                },
                None => None,
            };
            Some(id)
        })
    }

    /// How many nodes on the path root -> `node` have notes as their current recap output, and
    /// those nodes newest first (only the ones taken are visited).
    pub fn noted_upwards<'v>(
        &'v self,
        node: &'v NodeId,
    ) -> (usize, impl Iterator<Item = &'v NodeId> + 'v) {
        let (count, noted) = self.dag.slots.noted_upwards(self.dag.nodes.slot(node));
        let dangling = self.dangling_noted_parent(node);
        (
            count + usize::from(dangling.is_some()),
            noted.map(|slot| self.id_at(slot)).chain(dangling),
        )
    }

    /// [`RunView::noted_upwards`], yielding where each noted node's recap notes are in the log
    /// instead of its id.
    pub fn noted_notes_upwards<'v>(
        &'v self,
        node: &'v NodeId,
    ) -> (usize, impl Iterator<Item = usize> + 'v) {
        let (count, noted) = self.dag.slots.noted_upwards(self.dag.nodes.slot(node));
        let dangling = self.dangling_noted_parent(node);
        (
            count + usize::from(dangling.is_some()),
            noted
                .positions(&self.dag.nodes)
                .chain(dangling.and_then(|p| self.recap_notes_position(p))),
        )
    }

    /// Whether `ancestor` is `node` or lies on its path to the root, in O(log depth) steps.
    pub fn is_on_path(&self, ancestor: &NodeId, node: &NodeId) -> bool {
        match (self.dag.nodes.slot(ancestor), self.dag.nodes.slot(node)) {
            (Some(ancestor), Some(node)) => self.dag.slots.is_on_path(ancestor, node),
            _ => false,
        }
    }

    /// The node id in `slot`.
    fn id_at(&self, slot: u32) -> &NodeId {
        &self.dag.nodes.at(slot).node_id
    }

    /// The noted slots on the preferred branch strictly below `node`, newest first, and how
    /// many there are; `None` when the preferred tip is not below `node`.
    fn noted_below_on_preferred_branch(&self, node: &NodeId) -> Option<(usize, NotedUpwards<'_>)> {
        let tip = self.dag.nodes.slot(self.preferred_tip.as_ref()?)?;
        self.dag.slots.noted_below(self.dag.nodes.slot(node)?, tip)
    }

    /// The nodes with recap notes on the preferred branch strictly below `node`, newest first,
    /// and how many there are (none when the preferred tip is not below `node`).
    pub fn noted_on_preferred_branch_below<'v>(
        &'v self,
        node: &'v NodeId,
    ) -> (usize, impl Iterator<Item = &'v NodeId> + 'v) {
        match self.noted_below_on_preferred_branch(node) {
            Some((count, noted)) => (
                count,
                Some(noted.map(|slot| self.id_at(slot)))
                    .into_iter()
                    .flatten(),
            ),
            None => (0, None.into_iter().flatten()),
        }
    }

    /// [`RunView::noted_on_preferred_branch_below`], yielding where each noted node's recap
    /// notes are in the log.
    pub fn noted_notes_on_preferred_branch_below<'v>(
        &'v self,
        node: &'v NodeId,
    ) -> (usize, impl Iterator<Item = usize> + 'v) {
        match self.noted_below_on_preferred_branch(node) {
            Some((count, noted)) => (
                count,
                Some(noted.positions(&self.dag.nodes)).into_iter().flatten(),
            ),
            None => (0, None.into_iter().flatten()),
        }
    }

    /// The walk over slots stops below a parent that is not a node of the run (a log no
    /// WorkRail wrote); the one-lookup-per-node walk names that parent too when it has notes.
    fn dangling_noted_parent<'v>(&'v self, node: &NodeId) -> Option<&'v NodeId> {
        let top = self.dag.slots.top_of(self.dag.nodes.slot(node)?);
        self.dag
            .nodes
            .get(self.id_at(top))
            .and_then(|n| n.parent.as_ref())
            .filter(|p| !self.dag.nodes.contains_key(p))
            .filter(|p| self.recap_notes_position(p).is_some())
    }

    /// Nodes on the path root -> `node`.
    pub fn ancestry(&self, node: &NodeId) -> Vec<NodeId> {
        let mut chain = Vec::new();
        let mut current = Some(node.clone());
        while let Some(id) = current {
            current = self.dag.nodes.get(&id).and_then(|n| n.parent.clone());
            chain.push(id);
        }
        chain.reverse();
        chain
    }

    /// Whether a required capability is unlocked at `node`: the latest *strong* observation on
    /// its ancestry says available. Weak claims (e.g. an agent's say-so) never unlock and never
    /// re-lock (locks appendix "capability observation provenance").
    pub fn capability_unlocked(&self, node: &NodeId, capability: Capability) -> bool {
        self.strong_status(node, capability) == Some(CapabilityStatus::Available)
    }

    /// The enforcement-grade status of `capability` at `node`: the latest strong observation of
    /// the nearest node on its ancestry that has one (the node itself first), or `None` when no
    /// strong observation exists (`unknown`). Weak claims never count (decision D27).
    pub fn strong_status(&self, node: &NodeId, capability: Capability) -> Option<CapabilityStatus> {
        if self.strong_capabilities.is_empty() {
            return None;
        }
        self.upwards(node)
            .find_map(|n| self.strong_capabilities.get(&(n.clone(), capability)))
            .map(|o| o.status)
    }

    /// Unresolved gaps recorded on the path root -> `node`, in log order.
    pub fn open_gaps_on(&self, node: &NodeId) -> Vec<&GapRecorded> {
        if self.unresolved_gaps.is_empty() {
            return Vec::new();
        }
        let lineage: HashSet<&NodeId> = self.upwards(node).collect();
        self.unresolved_gaps
            .iter()
            .filter(|(n, _)| lineage.contains(n))
            .map(|(_, g)| g)
            .collect()
    }

    /// The latest observation on the node's ancestry (status is derived, never stored).
    pub fn capability_status(
        &self,
        node: &NodeId,
        capability: Capability,
    ) -> Option<&CapabilityObserved> {
        if self.capabilities.is_empty() {
            return None;
        }
        self.upwards(node)
            .find_map(|n| self.capabilities.get(&(n.clone(), capability)))
    }

    /// The run status (locks §2.1), given whether a snapshot is complete and the effective
    /// autonomy at the tip.
    pub fn status(
        &self,
        is_complete: impl Fn(&SnapshotRef) -> bool,
        autonomy: Autonomy,
    ) -> RunStatus {
        let Some(tip) = &self.preferred_tip else {
            return RunStatus::InProgress;
        };
        let critical = |g: &GapRecorded| g.severity == GapSeverity::Critical;
        let complete = self
            .dag
            .nodes
            .get(tip)
            .is_some_and(|n| is_complete(&n.snapshot_ref()));
        if complete {
            return if self.unresolved_gaps.iter().any(|(_, g)| critical(g)) {
                RunStatus::CompleteWithGaps
            } else {
                RunStatus::Complete
            };
        }
        let blocking_gap_at_tip = self.unresolved_gaps.iter().any(|(n, g)| {
            n == tip
                && critical(g)
                && matches!(
                    g.reason,
                    GapReason::UserOnlyDependency(_)
                        | GapReason::ContractViolation(_)
                        | GapReason::CapabilityMissing(_)
                )
        });
        if autonomy != Autonomy::FullAutoNeverStop && blocking_gap_at_tip {
            RunStatus::Blocked
        } else {
            RunStatus::InProgress
        }
    }
}

/// Projections of a whole session.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionProjection {
    pub runs: BTreeMap<RunId, RunView>,
    /// Where events were inconsistent with the DAG (e.g. a supersede across nodes): reported,
    /// never fatal for a read model.
    pub anomalies: Vec<String>,
    /// Positions (in the projected log) of the `advance_recorded` events whose node was not a
    /// node of their run when they were recorded (a log no WorkRail wrote), ascending; the
    /// others are their node's (`NodeInfo::advances`).
    pub stray_advances: HashMap<NodeId, Positions>,
    /// The latest recorded value of each workspace observation (git HEAD, branch), so nothing
    /// reads the whole log for them (D225).
    pub observations: BTreeMap<ObservationKey, String>,
}

impl SessionProjection {
    /// Positions (in the projected log) of the `advance_recorded` events at `node`, ascending.
    pub fn advance_positions(&self, node: &NodeId) -> std::borrow::Cow<'_, [usize]> {
        let mut lists = self
            .runs
            .values()
            .filter_map(|view| view.dag.nodes.get(node))
            .map(|info| info.advances.as_slice())
            .chain(self.stray_advances.get(node).map(Few::as_slice))
            .filter(|list| !list.is_empty());
        let Some(first) = lists.next() else {
            return std::borrow::Cow::Borrowed(&[]);
        };
        match lists.next() {
            None => std::borrow::Cow::Borrowed(first),
            Some(second) => {
                let mut all: Vec<usize> = first.iter().chain(second).copied().collect();
                all.extend(lists.flatten());
                all.sort_unstable();
                std::borrow::Cow::Owned(all)
            }
        }
    }
}

/// Effective preferences at `node` (locks §4): node-attached, else the session baseline, else
/// the global defaults. The node-attached snapshot is the latest `preferences_changed` on the
/// node itself, else the one its parent had when the node was created, and so on up (D43): a
/// change recorded on a node after it already had children (a blocked ack's delta) applies to
/// later acks from it and to children created afterwards, never to existing descendants.
pub fn effective_preferences(
    run: &RunView,
    node: &NodeId,
    session_baseline: Option<EffectivePreferences>,
    global_defaults: EffectivePreferences,
) -> EffectivePreferences {
    // Each node carries its own latest change and what its parent had when it was created, both
    // kept in log order as the projection grows, so this is one lookup, not a walk to the root.
    let found = run.dag.nodes.get(node).and_then(|n| {
        // TEST-ONLY planted bug: a node does not inherit its ancestors' preferences.
        if planted(PlantedProjectionBug::NoInheritedPreferences) {
            n.own_preferences
        } else {
            n.own_preferences.or(n.inherited_preferences)
        }
    });
    found.or(session_baseline).unwrap_or(global_defaults)
}

/// TEST-ONLY planted projection bugs (feature `test-mutations`): each breaks one projection so
/// the model-versus-production harness can prove it compares that projection. Off unless a test
/// turns it on, for its own thread only; without the feature they compile away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlantedProjectionBug {
    /// The first output of a node's channel stays its current one (locks §2.1 say the latest).
    FirstOutputWins,
    /// The unresolved-gaps projection lists a gap on its node's parent.
    GapOnParent,
    /// A node's effective preferences ignore what its ancestors recorded (D43).
    NoInheritedPreferences,
    /// `resume_session` ranks the least recently active tip first within a tier (locks §2.3
    /// say the most recent).
    ResumeOldestFirst,
    /// A weak observation (a manual claim) counts as enforcement-grade, so a claim unlocks
    /// (locks appendix "capability observation provenance", D27 say it never does).
    WeakObservationUnlocks,
}

#[cfg(feature = "test-mutations")]
thread_local! {
    static PLANTED_PROJECTION_BUGS: std::cell::Cell<[bool; 5]> = const { std::cell::Cell::new([false; 5]) };
}

/// TEST-ONLY (feature `test-mutations`): switches `bug` on or off for the calling thread.
#[cfg(feature = "test-mutations")]
pub fn plant(bug: PlantedProjectionBug, on: bool) {
    PLANTED_PROJECTION_BUGS.with(|c| {
        let mut bugs = c.get();
        bugs[bug as usize] = on;
        c.set(bugs);
    });
}

#[cfg(feature = "test-mutations")]
pub(super) fn planted(bug: PlantedProjectionBug) -> bool {
    PLANTED_PROJECTION_BUGS.with(|c| c.get()[bug as usize])
}

#[cfg(not(feature = "test-mutations"))]
#[inline(always)]
pub(super) fn planted(_: PlantedProjectionBug) -> bool {
    false
}

/// Whether an observation is enforcement-grade: strong provenance only (D27).
fn is_enforcement_grade(observation: &CapabilityObserved) -> bool {
    observation.provenance.enforcement_grade() == EnforcementGrade::Strong
        || planted(PlantedProjectionBug::WeakObservationUnlocks)
}

/// Builds every projection of a session: incrementally from nothing (see [`Projector`]), or in
/// two linear passes when the log has something the incremental path does not handle.
pub fn project(events: &[SessionEvent], policy: TipPolicy) -> SessionProjection {
    let mut projector = Projector::default();
    match projector.extend(events) {
        Ok(()) => Arc::unwrap_or_clone(projector.projection),
        Err(Unsupported) => project_in_two_passes(events, policy),
    }
}

/// Builds every projection of a session in two linear passes (the reference the incremental
/// [`Projector`] must equal).
pub fn project_in_two_passes(events: &[SessionEvent], _policy: TipPolicy) -> SessionProjection {
    let mut runs: BTreeMap<RunId, RunDag> = BTreeMap::new();
    let mut anomalies = Vec::new();
    let mut outputs: HashMap<RunId, Vec<(NodeId, usize, &NodeOutputAppended)>> = HashMap::new();
    let mut gaps: HashMap<RunId, Vec<(NodeId, GapRecorded)>> = HashMap::new();
    let mut capabilities: HashMap<RunId, BTreeMap<(NodeId, Capability), CapabilityObserved>> =
        HashMap::new();
    let mut strong: HashMap<RunId, BTreeMap<(NodeId, Capability), CapabilityObserved>> =
        HashMap::new();
    let mut context_sets: HashMap<RunId, Vec<usize>> = HashMap::new();
    let mut stray_advances: HashMap<NodeId, Positions> = HashMap::new();
    // Pass 1: index every event by run and node.
    for (position, event) in events.iter().enumerate() {
        let index = event.event_index().get();
        let Some(run_id) = event.scope().run_id().cloned() else {
            continue;
        };
        let node_id = event.scope().node_id().cloned();
        match event.data() {
            EventData::ContextSet(_) => {
                context_sets
                    .entry(run_id.clone())
                    .or_default()
                    .push(position);
            }
            EventData::AdvanceRecorded(_) => {
                if let Some(node) = &node_id
                    && !runs
                        .get_mut(&run_id)
                        .is_some_and(|dag| dag.record_advance(node, position))
                {
                    record_stray_advance(&mut stray_advances, node.clone(), position);
                }
            }
            _ => {}
        }
        match event.data() {
            EventData::RunStarted(started) => {
                runs.insert(
                    run_id.clone(),
                    RunDag {
                        run_id,
                        started: RunStarted::clone(started),
                        nodes: NodeTable::default(),
                        edges: EdgeList::default(),
                        root: None,
                        slots: SlotIndex::default(),
                    },
                );
                continue;
            }
            EventData::NodeCreated(created) => {
                let (Some(dag), Some(node_id)) = (runs.get_mut(&run_id), node_id.clone()) else {
                    anomalies.push(format!("node_created at {index} outside a started run"));
                    continue;
                };
                dag.add_node(node_id, created, index);
                continue;
            }
            EventData::EdgeCreated(edge) => {
                if let Some(dag) = runs.get_mut(&run_id) {
                    if let Some(to) = dag.nodes.get_mut(&edge.to_node_id) {
                        to.own_activity = to.own_activity.max(index);
                    }
                    dag.add_edge(edge, position);
                }
                continue;
            }
            _ => {}
        }
        let Some(node_id) = node_id else { continue };
        if let Some(node) = runs
            .get_mut(&run_id)
            .and_then(|d| d.nodes.get_mut(&node_id))
        {
            node.own_activity = node.own_activity.max(index);
            if let EventData::PreferencesChanged(p) = event.data() {
                node.own_preferences = Some(p.effective);
            }
        }
        match event.data() {
            EventData::NodeOutputAppended(o) => {
                outputs
                    .entry(run_id)
                    .or_default()
                    .push((node_id, position, &**o));
            }
            EventData::GapRecorded(g) => gaps
                .entry(run_id)
                .or_default()
                .push((node_id, GapRecorded::clone(g))),
            EventData::CapabilityObserved(c) => {
                // Later events replace earlier ones: the latest by EventIndex wins.
                if is_enforcement_grade(c) {
                    strong
                        .entry(run_id.clone())
                        .or_default()
                        .insert((node_id.clone(), c.capability), c.clone());
                }
                capabilities
                    .entry(run_id)
                    .or_default()
                    .insert((node_id, c.capability), c.clone());
            }
            _ => {}
        }
    }
    // Pass 2: derive per run.
    let mut views = BTreeMap::new();
    for (run_id, mut dag) in runs {
        let (preferred_tip, tip_last_activity) = preferred_tip(&dag);
        let current_outputs =
            current_outputs(outputs.remove(&run_id).unwrap_or_default(), &mut anomalies);
        let mut stray_outputs = BTreeMap::new();
        for ((node, channel), output) in current_outputs {
            match dag.nodes.slot(&node) {
                Some(slot) => dag.set_output(slot, channel, output),
                None => {
                    stray_outputs.insert((node, channel), output);
                }
            }
        }
        dag.slots.settle();
        let unresolved_gaps = unresolved(gaps.remove(&run_id).unwrap_or_default());
        views.insert(
            run_id.clone(),
            RunView {
                dag,
                preferred_tip,
                tip_last_activity,
                stray_outputs,
                unresolved_gaps,
                capabilities: capabilities.remove(&run_id).unwrap_or_default(),
                strong_capabilities: strong.remove(&run_id).unwrap_or_default(),
                context_sets: context_sets.remove(&run_id).unwrap_or_default(),
            },
        );
    }
    SessionProjection {
        runs: views,
        anomalies,
        stray_advances,
        observations: super::resume::latest_observations(events),
    }
}

/// Adds an `advance_recorded` at `position` to the strays of `node`.
fn record_stray_advance(strays: &mut HashMap<NodeId, Positions>, node: NodeId, position: usize) {
    match strays.entry(node) {
        std::collections::hash_map::Entry::Occupied(mut at) => at.get_mut().push(position),
        std::collections::hash_map::Entry::Vacant(at) => {
            at.insert(Few::One(position));
        }
    }
}

/// The log has something the incremental path leaves to [`project_in_two_passes`] (an event
/// outside a started run, a node or run created twice, an output superseding one that is not an
/// earlier output of the same node and channel): only possible in a log no WorkRail wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unsupported;

/// What the incremental path keeps beside the views of one run.
#[derive(Debug, Clone, Default)]
struct RunAux {
    /// The node the run's latest activity touched since the preferred tip was last settled.
    latest_active: Option<NodeId>,
    /// Every output's node (by slot) and channel (see [`OutputIndex`]).
    outputs: OutputIndex,
    /// Gap ids some gap resolves.
    resolved: HashSet<GapId>,
}

/// Every output of a run: its node's slot and its channel, found by the first 96 bits of its
/// id's SHA-256 (`output_key`), 16 bytes an output (D234; D230 kept 128 bits in a map entry of
/// 24 and a hash of them). The ids' text would be most of what a long run's projector holds. Two
/// ids with the same key are as unlikely as a collision of 96 bits of SHA-256 (about one in
/// 10^16 among a million outputs, even for a log someone crafted); one could only send a log to
/// the two-pass projection (exact) or take a supersede of another output of the same node and
/// channel as valid where the two passes would report an anomaly.
#[derive(Debug, Clone, Default)]
struct OutputIndex(HashTable<OutputEntry>);

#[derive(Debug, Clone, Copy)]
struct OutputEntry {
    key: [u32; 3],
    /// The node's slot shifted left by one, with the low bit set for the artifact channel.
    place: u32,
}

impl OutputIndex {
    /// The key's first bits are already uniform: they are the table's hash as they are.
    fn hash(key: &[u32; 3]) -> u64 {
        u64::from(key[0]) | (u64::from(key[1]) << 32)
    }

    fn place(slot: u32, channel: OutputChannel) -> Option<u32> {
        let bit = match channel {
            OutputChannel::Recap => 0,
            OutputChannel::Artifact => 1,
        };
        slot.checked_mul(2).map(|s| s | bit)
    }

    /// The place of the output with `key`, if one was indexed.
    fn get(&self, key: &[u32; 3]) -> Option<u32> {
        self.0
            .find(Self::hash(key), |e| e.key == *key)
            .map(|e| e.place)
    }

    /// Indexes the output with `key` (which the caller found absent) at `place`.
    fn insert(&mut self, key: [u32; 3], place: u32) {
        self.0
            .insert_unique(Self::hash(&key), OutputEntry { key, place }, |e| {
                Self::hash(&e.key)
            });
    }
}

/// The first 96 bits of an output id's SHA-256 (see [`OutputIndex`]): deterministic, as a
/// projection is, and collision-resistant even for a log someone crafted.
fn output_key(id: &OutputId) -> [u32; 3] {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(id.as_str().as_bytes());
    let word = |at: usize| {
        let mut bytes = [0u8; 4];
        bytes.copy_from_slice(&digest[at..at + 4]);
        u32::from_le_bytes(bytes)
    };
    [word(0), word(4), word(8)]
}

/// A session projection extended event by event as the log grows, so a call on a long session
/// projects only what was appended since the last call (plus the preferred tip of the runs the
/// new events touched, within the subtree of the node last active). Equal to
/// [`project_in_two_passes`] on every log it accepts (tested on generated logs).
#[derive(Debug, Clone, Default)]
pub struct Projector {
    projection: Arc<SessionProjection>,
    aux: HashMap<RunId, RunAux>,
    applied: usize,
}

impl Projector {
    /// How many events of the log are projected.
    pub fn applied(&self) -> usize {
        self.applied
    }

    /// The projection of the events applied so far.
    pub fn projection(&self) -> &Arc<SessionProjection> {
        &self.projection
    }

    /// Applies `events[self.applied()..]` (`events` is the whole log, of which the first
    /// `applied()` were applied before). On `Unsupported` the projector must not be used again.
    pub fn extend(&mut self, events: &[SessionEvent]) -> Result<(), Unsupported> {
        self.extend_chunk(0, events)
    }

    /// Applies the events of `chunk` not applied yet; `chunk[0]` is the log's event `start`,
    /// which is at most `applied()` (a chunk cannot skip events). On `Unsupported` the
    /// projector must not be used again.
    pub fn extend_chunk(
        &mut self,
        start: usize,
        chunk: &[SessionEvent],
    ) -> Result<(), Unsupported> {
        let end = start + chunk.len();
        if end <= self.applied {
            return Ok(());
        }
        if start > self.applied {
            return Err(Unsupported);
        }
        let projection = Arc::make_mut(&mut self.projection);
        let mut touched: HashSet<RunId> = HashSet::new();
        for (offset, event) in chunk.iter().enumerate().skip(self.applied - start) {
            apply(
                projection,
                &mut self.aux,
                &mut touched,
                start + offset,
                event,
            )?;
        }
        for run_id in &touched {
            if let Some(view) = projection.runs.get_mut(run_id) {
                view.dag.slots.settle();
            }
            if let (Some(view), Some(aux)) =
                (projection.runs.get_mut(run_id), self.aux.get_mut(run_id))
                && let Some(active) = aux.latest_active.take()
            {
                let (tip, activity) = preferred_tip_after_activity(&view.dag, &active);
                view.preferred_tip = tip;
                view.tip_last_activity = activity;
            }
        }
        self.applied = end;
        Ok(())
    }
}

fn apply(
    projection: &mut SessionProjection,
    aux: &mut HashMap<RunId, RunAux>,
    touched: &mut HashSet<RunId>,
    position: usize,
    event: &SessionEvent,
) -> Result<(), Unsupported> {
    let index = event.event_index().get();
    if index != position as u64 {
        return Err(Unsupported);
    }
    if let EventData::ObservationRecorded(o) = event.data() {
        projection
            .observations
            .insert(o.key, super::resume::observation_text(&o.value).to_owned());
    }
    let Some(run_id) = event.scope().run_id() else {
        return Ok(());
    };
    let node_id = event.scope().node_id();
    if let EventData::RunStarted(started) = event.data() {
        if projection.runs.contains_key(run_id) {
            return Err(Unsupported);
        }
        projection.runs.insert(
            run_id.clone(),
            RunView {
                dag: RunDag {
                    run_id: run_id.clone(),
                    started: RunStarted::clone(started),
                    nodes: NodeTable::default(),
                    edges: EdgeList::default(),
                    root: None,
                    slots: SlotIndex::default(),
                },
                preferred_tip: None,
                tip_last_activity: 0,
                stray_outputs: BTreeMap::new(),
                unresolved_gaps: Vec::new(),
                capabilities: BTreeMap::new(),
                strong_capabilities: BTreeMap::new(),
                context_sets: Vec::new(),
            },
        );
        aux.insert(run_id.clone(), RunAux::default());
        touched.insert(run_id.clone());
        return Ok(());
    }
    // Events of a run that never started are dropped by the two-pass projection too, except
    // the ones it reports.
    let Some(view) = projection.runs.get_mut(run_id) else {
        return match event.data() {
            EventData::NodeCreated(_) => Err(Unsupported),
            EventData::AdvanceRecorded(_) => Err(Unsupported),
            _ => Ok(()),
        };
    };
    let run_aux = aux.entry(run_id.clone()).or_default();
    touched.insert(run_id.clone());
    match event.data() {
        EventData::ContextSet(_) => view.context_sets.push(position),
        EventData::AdvanceRecorded(_) => {
            if let Some(node) = node_id
                && !view.dag.record_advance(node, position)
            {
                record_stray_advance(&mut projection.stray_advances, node.clone(), position);
            }
        }
        _ => {}
    }
    let dag = &mut view.dag;
    match event.data() {
        EventData::NodeCreated(created) => {
            let Some(node_id) = node_id else {
                return Err(Unsupported);
            };
            if dag.nodes.contains_key(node_id) {
                return Err(Unsupported);
            }
            dag.add_node(node_id.clone(), created, index);
            run_aux.latest_active = Some(node_id.clone());
            return Ok(());
        }
        EventData::EdgeCreated(edge) => {
            if let Some(to) = dag.nodes.get_mut(&edge.to_node_id) {
                to.own_activity = to.own_activity.max(index);
                run_aux.latest_active = Some(edge.to_node_id.clone());
            }
            dag.add_edge(edge, position);
            return Ok(());
        }
        _ => {}
    }
    let Some(node_id) = node_id else {
        return Ok(());
    };
    let node_id = &dag.own_id(node_id);
    if let Some(node) = dag.nodes.get_mut(node_id) {
        node.own_activity = node.own_activity.max(index);
        if let EventData::PreferencesChanged(p) = event.data() {
            node.own_preferences = Some(p.effective);
        }
        run_aux.latest_active = Some(node_id.clone());
    }
    match event.data() {
        EventData::NodeOutputAppended(o) => {
            // An output on an id that is not (yet) a node of the run is left to the two passes.
            let Some(slot) = view.dag.nodes.slot(node_id) else {
                return Err(Unsupported);
            };
            // A run of 2^31 nodes is left to the two passes too.
            let Some(place) = OutputIndex::place(slot, o.output_channel) else {
                return Err(Unsupported);
            };
            let id = output_key(&o.output_id);
            if run_aux.outputs.get(&id).is_some() {
                return Err(Unsupported);
            }
            if let Some(target) = &o.supersedes_output_id
                && run_aux.outputs.get(&output_key(target)) != Some(place)
            {
                return Err(Unsupported);
            }
            run_aux.outputs.insert(id, place);
            // The latest output of a node and channel is its current one: an earlier one is
            // either superseded by it or older. Only where it is is kept (D226).
            let output = CurrentOutput::of(position, o);
            // TEST-ONLY planted bug: the first output of a channel stays current.
            if planted(PlantedProjectionBug::FirstOutputWins)
                && view
                    .dag
                    .nodes
                    .at(slot)
                    .outputs
                    .get(o.output_channel)
                    .is_some()
            {
                return Ok(());
            }
            view.dag.set_output(slot, o.output_channel, output);
        }
        EventData::GapRecorded(g) => {
            if let GapResolution::Resolves { resolves_gap_id } = &g.resolution {
                run_aux.resolved.insert(resolves_gap_id.clone());
                view.unresolved_gaps
                    .retain(|(_, open)| &open.gap_id != resolves_gap_id);
            }
            // TEST-ONLY planted bug: a gap is listed on its node's parent.
            let listed_on = match view.dag.nodes.get(node_id).and_then(|n| n.parent.clone()) {
                Some(parent) if planted(PlantedProjectionBug::GapOnParent) => parent,
                _ => node_id.clone(),
            };
            if !run_aux.resolved.contains(&g.gap_id) {
                view.unresolved_gaps
                    .push((listed_on, GapRecorded::clone(g)));
            }
        }
        EventData::CapabilityObserved(c) => {
            if is_enforcement_grade(c) {
                view.strong_capabilities
                    .insert((node_id.clone(), c.capability), c.clone());
            }
            view.capabilities
                .insert((node_id.clone(), c.capability), c.clone());
        }
        _ => {}
    }
    Ok(())
}

/// [`preferred_tip`] after events whose latest activity touched `active`, given the tip before
/// them. Event indexes only grow, so that activity is the highest of the run: the reachable
/// activity of every node in `active`'s subtree is now exactly it, and of every other node
/// lower. The tip is therefore the best leaf of that subtree by the remaining keys (the later
/// `node_created`; creation indexes are unique), found without looking at the rest of the run.
fn preferred_tip_after_activity(dag: &RunDag, active: &NodeId) -> (Option<NodeId>, u64) {
    let Some(start) = dag.nodes.get(active) else {
        return preferred_tip(dag);
    };
    let activity = start.own_activity;
    // A node is created after its parent, so the subtree's newest node has no children: it is
    // the subtree's best leaf.
    let best = dag.newest_in_subtree(active);
    (best.map(|n| n.node_id.clone()), activity)
}

/// Preferred tip (locks §2): among leaves, the highest last-activity over the reachable
/// history (the node and its ancestors); ties to the later `node_created`, then the greater
/// NodeId. Reachable activity is computed top-down once per node (linear).
fn preferred_tip(dag: &RunDag) -> (Option<NodeId>, u64) {
    let mut reach: HashMap<&NodeId, u64> = HashMap::with_capacity(dag.nodes.len());
    // Nodes are created after their parents, so creation order is a topological order.
    let mut by_creation: Vec<&NodeInfo> = dag.nodes.values().collect();
    by_creation.sort_by_key(|n| n.created_index);
    for node in &by_creation {
        let inherited = node
            .parent
            .as_ref()
            .and_then(|p| reach.get(p).copied())
            .unwrap_or(0);
        reach.insert(&node.node_id, node.own_activity.max(inherited));
    }
    by_creation
        .iter()
        .filter(|n| n.children.is_empty())
        .max_by(|a, b| {
            (reach[&a.node_id], a.created_index, &a.node_id).cmp(&(
                reach[&b.node_id],
                b.created_index,
                &b.node_id,
            ))
        })
        .map_or((None, 0), |n| (Some(n.node_id.clone()), reach[&n.node_id]))
}

/// Current output per (node, channel): the latest output not superseded by a later output of
/// the same node and channel (locks §2.1 "Current outputs projection").
fn current_outputs(
    outputs: Vec<(NodeId, usize, &NodeOutputAppended)>,
    anomalies: &mut Vec<String>,
) -> BTreeMap<(NodeId, OutputChannel), CurrentOutput> {
    let location: HashMap<&OutputId, (&NodeId, OutputChannel)> = outputs
        .iter()
        .map(|(n, _, o)| (&o.output_id, (n, o.output_channel)))
        .collect();
    let mut superseded: HashSet<OutputId> = HashSet::new();
    for (node, _, o) in &outputs {
        if let Some(target) = &o.supersedes_output_id {
            match location.get(target) {
                Some((n, c)) if *n == node && *c == o.output_channel => {
                    superseded.insert(target.clone());
                }
                _ => anomalies.push(format!(
                    "output {} supersedes {target}, which is not an output of the same node and channel",
                    o.output_id
                )),
            }
        }
    }
    let mut current = BTreeMap::new();
    for (node, position, o) in outputs {
        if !superseded.contains(&o.output_id) {
            current.insert((node, o.output_channel), CurrentOutput::of(position, o));
        }
    }
    current
}

/// Gaps that no later gap resolves (locks §3 "Gaps").
fn unresolved(gaps: Vec<(NodeId, GapRecorded)>) -> Vec<(NodeId, GapRecorded)> {
    let resolved: HashSet<GapId> = gaps
        .iter()
        .filter_map(|(_, g)| match &g.resolution {
            GapResolution::Resolves { resolves_gap_id } => Some(resolves_gap_id.clone()),
            GapResolution::Unresolved => None,
        })
        .collect();
    gaps.into_iter()
        .filter(|(_, g)| !resolved.contains(&g.gap_id))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(n: usize) -> u32 {
        u32::try_from(n).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The path queries a rewind's recap asks (is a node on the path to the tip; which noted
    /// nodes lie below it) answer as walking every parent does, on chains, forks and forests,
    /// settled or stale.
    /// decision: D214
    #[test]
    fn jumps_up_a_branch_agree_with_walking_it() {
        let mut seed: u64 = 0x5eed;
        let mut next = |bound: usize| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((seed >> 33) as usize) % bound.max(1)
        };
        for shape in 0..40 {
            let len = 1 + next(300);
            // Mostly the newest node's child (long chains, as loops make), sometimes any
            // earlier node (forks), sometimes a new root.
            let parents: Vec<Option<usize>> = (0..len)
                .map(|n| match (n, next(10)) {
                    (0, _) => None,
                    (_, 0) if shape % 3 == 0 => None,
                    (_, 1 | 2) => Some(next(n)),
                    _ => Some(n - 1),
                })
                .collect();
            let mut slots = SlotIndex::default();
            for (n, parent) in parents.iter().enumerate() {
                assert_eq!(slots.push(parent.map(slot)), slot(n));
            }
            let path = |n: usize| -> Vec<usize> {
                let mut out = vec![n];
                while let Some(p) = parents[*out.last().unwrap_or(&n)] {
                    out.push(p);
                }
                out
            };
            for n in 0..len {
                if next(3) == 0 {
                    slots.set_recap_notes(slot(n), true);
                }
            }
            for settled in [false, true] {
                if settled {
                    slots.settle();
                }
                for _ in 0..200 {
                    let (a, b) = (next(len), next(len));
                    let on_path = path(b).contains(&a);
                    assert_eq!(slots.is_on_path(slot(a), slot(b)), on_path, "{a} above {b}");
                    let naive: Option<Vec<u32>> = on_path.then(|| {
                        path(b)
                            .into_iter()
                            .take_while(|&n| n != a)
                            .filter(|&n| slots.recap_notes[n])
                            .map(slot)
                            .collect()
                    });
                    let fast = slots
                        .noted_below(slot(a), slot(b))
                        .map(|(count, walk)| (count, walk.collect::<Vec<_>>()));
                    assert_eq!(
                        fast,
                        naive.map(|v| (v.len(), v)),
                        "noted below {a} towards {b}"
                    );
                }
            }
        }
    }

    /// The jumps between noted slots (settled) and the plain walk (stale) name the same nodes,
    /// whatever order the recap flags change in, children first included.
    #[test]
    fn noted_walks_agree_settled_or_stale() {
        // A tree: each node's parent is an earlier node.
        let parents = [
            None,
            Some(0),
            Some(1),
            Some(1),
            Some(2),
            Some(4),
            Some(3),
            Some(6),
        ];
        let mut slots = SlotIndex::default();
        for (n, parent) in parents.iter().enumerate() {
            assert_eq!(slots.push(parent.map(slot)), slot(n));
        }
        let naive = |slots: &SlotIndex, n: usize| -> Vec<u32> {
            let mut out = Vec::new();
            let mut at = Some(n);
            while let Some(i) = at {
                if slots.recap_notes[i] {
                    out.push(slot(i));
                }
                at = parents[i];
            }
            out
        };
        let changes = [
            (5, true),
            (1, true),
            (3, true),
            (1, false),
            (7, true),
            (0, true),
            (3, false),
        ];
        for (node, flag) in changes {
            slots.set_recap_notes(slot(node), flag);
            for n in 0..parents.len() {
                let (count, stale) = slots.noted_upwards(Some(slot(n)));
                let stale: Vec<u32> = stale.collect();
                assert_eq!((count, &stale), (naive(&slots, n).len(), &naive(&slots, n)));
            }
            slots.settle();
            for n in 0..parents.len() {
                let (count, settled) = slots.noted_upwards(Some(slot(n)));
                let settled: Vec<u32> = settled.collect();
                assert_eq!(
                    (count, &settled),
                    (naive(&slots, n).len(), &naive(&slots, n))
                );
                assert_eq!(slots.top_of(slot(n)), 0);
            }
        }
    }
}

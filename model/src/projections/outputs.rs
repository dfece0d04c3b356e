//! Current outputs of a node (locks §1 "Durable outputs", §2.1 "Current outputs projection";
//! `L-OUTPUT-CURRENT`, `L-OUTPUT-SUPERSEDE-SAME-NODE`, `L-OUTPUT-SUPERSEDE-SAME-CHANNEL`).
//!
//! An output X of node N is *superseded* iff a later output of N in the same channel names X in
//! `supersedesOutputId`. A `supersedesOutputId` that names an unknown output, an output of another
//! node, an output of another channel, or an output that is not earlier supersedes nothing: it is
//! ignored and reported in [`OutputsView::ignored_supersedes`]. The *current* output of a channel
//! is the latest output of that channel that is not superseded; the *current set* is every output
//! that is not superseded. History stays visible in [`OutputsView::history`].

use std::collections::BTreeMap;

use workrail_spec::closed::OutputChannel;
use workrail_spec::event::{EventData, OutputPayload, SessionEvent};
use workrail_spec::ids::{EventIndex, NodeId, OutputId, RunId};

/// One `node_output_appended`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputRecord {
    pub output_id: OutputId,
    pub channel: OutputChannel,
    pub payload: OutputPayload,
    pub supersedes: Option<OutputId>,
    pub appended_at: EventIndex,
}

/// Why a `supersedesOutputId` was ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SupersedeProblem {
    /// No output with that id exists in the session.
    UnknownOutput,
    /// The named output belongs to another node (supersede is node-scoped).
    OtherNode,
    /// The named output is in another channel (supersede is channel-scoped).
    OtherChannel,
    /// The named output is not earlier than the superseding one.
    NotEarlier,
}

/// A supersede link that was ignored, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoredSupersede {
    /// The output that carries the link.
    pub output_id: OutputId,
    /// What it tried to supersede.
    pub target: OutputId,
    pub problem: SupersedeProblem,
}

/// The outputs of one node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OutputsView {
    /// Every output of the node, in `EventIndex` order.
    pub history: Vec<OutputRecord>,
    /// Ids of the outputs superseded by a later output of the node in the same channel.
    pub superseded: Vec<OutputId>,
    pub ignored_supersedes: Vec<IgnoredSupersede>,
}

impl OutputsView {
    pub fn is_superseded(&self, output_id: &OutputId) -> bool {
        self.superseded.contains(output_id)
    }

    /// The latest output of `channel` that is not superseded.
    pub fn current(&self, channel: OutputChannel) -> Option<&OutputRecord> {
        self.history
            .iter()
            .filter(|o| o.channel == channel && !self.is_superseded(&o.output_id))
            .max_by_key(|o| o.appended_at)
    }

    /// Every output that is not superseded, in `EventIndex` order.
    pub fn current_set(&self) -> Vec<&OutputRecord> {
        self.history
            .iter()
            .filter(|o| !self.is_superseded(&o.output_id))
            .collect()
    }

    /// The notes text of the current recap output, if it is a notes payload.
    pub fn current_recap_notes(&self) -> Option<&str> {
        match &self.current(OutputChannel::Recap)?.payload {
            OutputPayload::Notes { notes_markdown } => Some(notes_markdown.as_str()),
            OutputPayload::ArtifactRef { .. } => None,
        }
    }
}

/// The outputs of node `node_id` of run `run_id`.
pub fn node_outputs(events: &[SessionEvent], run_id: &RunId, node_id: &NodeId) -> OutputsView {
    // Every output of the session, by id, with the node it belongs to (to judge links).
    let mut owners: BTreeMap<&OutputId, (Option<&NodeId>, OutputChannel, EventIndex)> =
        BTreeMap::new();
    let mut view = OutputsView::default();
    for event in events {
        let EventData::NodeOutputAppended(output) = event.data() else {
            continue;
        };
        owners.entry(&output.output_id).or_insert((
            event.scope().node_id(),
            output.output_channel,
            event.event_index(),
        ));
        if event.scope().run_id() == Some(run_id) && event.scope().node_id() == Some(node_id) {
            view.history.push(OutputRecord {
                output_id: output.output_id.clone(),
                channel: output.output_channel,
                payload: output.payload.clone(),
                supersedes: output.supersedes_output_id.clone(),
                appended_at: event.event_index(),
            });
        }
    }
    for record in &view.history {
        let Some(target) = &record.supersedes else {
            continue;
        };
        let problem = match owners.get(target) {
            None => Some(SupersedeProblem::UnknownOutput),
            Some((owner, channel, at)) => {
                if *owner != Some(node_id) {
                    Some(SupersedeProblem::OtherNode)
                } else if *channel != record.channel {
                    Some(SupersedeProblem::OtherChannel)
                } else if *at >= record.appended_at {
                    Some(SupersedeProblem::NotEarlier)
                } else {
                    None
                }
            }
        };
        match problem {
            Some(problem) => view.ignored_supersedes.push(IgnoredSupersede {
                output_id: record.output_id.clone(),
                target: target.clone(),
                problem,
            }),
            None if !view.superseded.contains(target) => view.superseded.push(target.clone()),
            None => {}
        }
    }
    view
}

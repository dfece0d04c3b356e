//! Fan-in of parallel lanes (decision D161): from the block outputs the lanes of a parallel step
//! recorded (`wr.contracts.block_output`, D160), which lanes completed, failed, handed in part
//! of their work or are missing, and which files two lanes both touched, judged under the
//! step's merge strategy.
//!
//! Everything is decided from recorded facts: lanes are ordered by where their block output
//! was recorded in the session log (`recorded_at`), never by a clock or by arrival at this
//! process, so every server, a replay and an imported bundle judge a fan-in alike.

use std::collections::BTreeMap;

/// How a fan-in combines the lanes' work (the stateless block contract's merge strategies).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MergeStrategy {
    /// Outputs only (review and analysis lanes): nothing is merged, nothing conflicts.
    Concatenate,
    /// File changes apply in completion order: the first lane to complete wins a file two
    /// lanes touched, and the conflict is a warning.
    Workspace,
    /// A file two lanes touched stops the fan-in until the user decides.
    FailOnConflict,
}

impl MergeStrategy {
    pub const ALL: [Self; 3] = [Self::Concatenate, Self::Workspace, Self::FailOnConflict];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Concatenate => "concatenate",
            Self::Workspace => "workspace",
            Self::FailOnConflict => "fail-on-conflict",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// A block output's `status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LaneStatus {
    Completed,
    Failed,
    Partial,
}

impl LaneStatus {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "completed" => Some(Self::Completed),
            "failed" => Some(Self::Failed),
            "partial" => Some(Self::Partial),
            _ => None,
        }
    }
}

/// What one lane handed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneOutput {
    /// Where the lane's block output was recorded in the session log.
    pub recorded_at: u64,
    pub status: LaneStatus,
    /// `filesModified` and `filesCreated` (relative, normalized paths, D160).
    pub files: Vec<String>,
}

/// One lane of the fan-in: its id and what it handed in (`None`: nothing yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lane {
    pub lane_id: String,
    pub output: Option<LaneOutput>,
}

/// How a conflict is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// `workspace`: the lane that completed first is applied.
    FirstCompleteWins,
    /// `fail-on-conflict`: the user decides.
    UserResolves,
}

impl Resolution {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FirstCompleteWins => "first-complete-wins",
            Self::UserResolves => "user-resolved",
        }
    }
}

/// Two or more lanes touched one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneConflict {
    pub conflicting_file: String,
    /// The lanes that touched it, in completion order.
    pub lanes: Vec<String>,
    pub resolution: Resolution,
    /// The lane whose change is applied (`workspace` only).
    pub applied_from: Option<String>,
}

/// The fan-in of a parallel step's lanes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FanIn {
    /// Lanes that handed in a block output, in completion order.
    pub completed_order: Vec<String>,
    /// Lanes with no block output yet, by lane id.
    pub missing: Vec<String>,
    /// Lanes whose block output says `failed`, in completion order.
    pub failed: Vec<String>,
    /// Lanes whose block output says `partial`, in completion order.
    pub partial: Vec<String>,
    /// Files two or more lanes touched, by path.
    pub conflicts: Vec<LaneConflict>,
}

impl FanIn {
    /// Whether a conflict waits for the user (`fail-on-conflict` found one).
    pub fn needs_user(&self) -> bool {
        self.conflicts
            .iter()
            .any(|c| c.resolution == Resolution::UserResolves)
    }
}

/// Judges the fan-in of `lanes` under `strategy`. The order of `lanes` does not matter: lanes
/// are ordered by `recorded_at` (then lane id). A failed lane's files are not merged, so they
/// conflict with nothing.
pub fn fan_in(lanes: &[Lane], strategy: MergeStrategy) -> FanIn {
    let mut handed: Vec<(&Lane, &LaneOutput)> = lanes
        .iter()
        .filter_map(|lane| lane.output.as_ref().map(|o| (lane, o)))
        .collect();
    if !super::planted::lane_bug(super::planted::PlantedLaneBug::ArrivalOrder) {
        handed.sort_by(|(a, x), (b, y)| {
            (x.recorded_at, &a.lane_id).cmp(&(y.recorded_at, &b.lane_id))
        });
    }
    let mut missing: Vec<String> = lanes
        .iter()
        .filter(|lane| lane.output.is_none())
        .map(|lane| lane.lane_id.clone())
        .collect();
    missing.sort();
    missing.dedup();
    let with = |status: LaneStatus| -> Vec<String> {
        handed
            .iter()
            .filter(|(_, o)| o.status == status)
            .map(|(lane, _)| lane.lane_id.clone())
            .collect()
    };
    let mut out = FanIn {
        completed_order: handed.iter().map(|(l, _)| l.lane_id.clone()).collect(),
        missing,
        failed: with(LaneStatus::Failed),
        partial: with(LaneStatus::Partial),
        conflicts: Vec::new(),
    };
    let resolution = match strategy {
        MergeStrategy::Concatenate => return out,
        MergeStrategy::Workspace => Resolution::FirstCompleteWins,
        MergeStrategy::FailOnConflict => Resolution::UserResolves,
    };
    let mut touched: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (lane, output) in &handed {
        if output.status == LaneStatus::Failed {
            continue;
        }
        for file in &output.files {
            let by = touched.entry(file.as_str()).or_default();
            if !by.contains(&lane.lane_id.as_str()) {
                by.push(lane.lane_id.as_str());
            }
        }
    }
    out.conflicts = touched
        .into_iter()
        .filter(|(_, by)| by.len() > 1)
        .map(|(file, by)| LaneConflict {
            conflicting_file: file.to_owned(),
            applied_from: (resolution == Resolution::FirstCompleteWins).then(|| by[0].to_owned()),
            lanes: by.into_iter().map(str::to_owned).collect(),
            resolution,
        })
        .collect();
    out
}

//! TEST-ONLY planted bugs of the workflow language (feature `test-mutations`), each switched on
//! for the calling thread only: the model comparison over generated workflows in the language
//! must catch every one of them (issue 31, item 6), else it proves nothing.

/// A bug in how the engine reads the workflow language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlantedLanguageBug {
    /// An advance walks over the run's context from before the call's delta: a condition, a
    /// loop rule or a frozen binding reads stale values.
    StaleContext,
    /// A `for` loop with a fixed count runs one iteration too many.
    ForOffByOne,
    /// A step passed by its `runCondition` leaves no decision-trace entry.
    SkipNotTraced,
}

#[cfg(feature = "test-mutations")]
thread_local! {
    static PLANTED: std::cell::Cell<[bool; 4]> = const { std::cell::Cell::new([false; 4]) };
}

#[cfg(feature = "test-mutations")]
fn slot(bug: PlantedLanguageBug) -> usize {
    match bug {
        PlantedLanguageBug::StaleContext => 0,
        PlantedLanguageBug::ForOffByOne => 1,
        PlantedLanguageBug::SkipNotTraced => 2,
    }
}

/// TEST-ONLY (feature `test-mutations`): switches `bug` on or off for the calling thread.
#[cfg(feature = "test-mutations")]
pub fn plant_language_bug(bug: PlantedLanguageBug, on: bool) {
    PLANTED.with(|p| {
        let mut all = p.get();
        all[slot(bug)] = on;
        p.set(all);
    });
}

#[cfg(feature = "test-mutations")]
pub fn planted(bug: PlantedLanguageBug) -> bool {
    PLANTED.with(|p| p.get()[slot(bug)])
}

#[cfg(not(feature = "test-mutations"))]
#[inline(always)]
pub fn planted(_bug: PlantedLanguageBug) -> bool {
    false
}

/// A bug in how the engine fans parallel lanes in (issue 32, item 7): the model comparison over
/// generated workflows with lanes must catch each (decisions D161, D169).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlantedLaneBug {
    /// The fan-in takes the lanes in the order they are listed (by index), not in the order
    /// their block outputs were recorded: the completion order and a `workspace` conflict's
    /// winner follow the lane index.
    ArrivalOrder,
    /// Every block output a lane recorded counts as a lane of its own, not only its latest: a
    /// lane that handed in again (its report acknowledged again after a rewind) is counted
    /// twice, and a failed report it redid still blocks.
    CountedTwice,
    /// The lanes of a node are every lane its run started, not only the lanes its own landing
    /// started: after a fork lands on the parallel step again, each branch counts the other's
    /// lanes as its own.
    SharedAcrossForks,
    /// A block output sent with any step's acknowledgement is the lane's report, not only one
    /// its report step took (decision D193): a lane that sent one early counts as handed in
    /// while it still stands before its report step.
    EarlyReport,
}

#[cfg(feature = "test-mutations")]
thread_local! {
    static PLANTED_LANES: std::cell::Cell<[bool; 4]> = const { std::cell::Cell::new([false; 4]) };
}

#[cfg(feature = "test-mutations")]
fn lane_slot(bug: PlantedLaneBug) -> usize {
    match bug {
        PlantedLaneBug::ArrivalOrder => 0,
        PlantedLaneBug::CountedTwice => 1,
        PlantedLaneBug::SharedAcrossForks => 2,
        PlantedLaneBug::EarlyReport => 3,
    }
}

/// TEST-ONLY (feature `test-mutations`): switches `bug` on or off for the calling thread.
#[cfg(feature = "test-mutations")]
pub fn plant_lane_bug(bug: PlantedLaneBug, on: bool) {
    PLANTED_LANES.with(|p| {
        let mut all = p.get();
        all[lane_slot(bug)] = on;
        p.set(all);
    });
}

#[cfg(feature = "test-mutations")]
pub fn lane_bug(bug: PlantedLaneBug) -> bool {
    PLANTED_LANES.with(|p| p.get()[lane_slot(bug)])
}

#[cfg(not(feature = "test-mutations"))]
#[inline(always)]
pub fn lane_bug(_bug: PlantedLaneBug) -> bool {
    false
}

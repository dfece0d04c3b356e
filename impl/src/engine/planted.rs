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
    static PLANTED: std::cell::Cell<[bool; 3]> = const { std::cell::Cell::new([false; 3]) };
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

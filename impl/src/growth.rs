//! How the vectors a long session keeps grow: by an eighth of their length, not by doubling
//! (D164). A session's parsed log, its manifest records and its run tables are most of what a
//! server holds for it, and doubling would leave up to half of each unused.

/// Makes room for `more` elements in `v`, growing it by an eighth (at least 16 elements, at
/// least `more`) when it is full.
pub(crate) fn reserve_bounded<T>(v: &mut Vec<T>, more: usize) {
    if v.capacity() - v.len() < more {
        v.reserve_exact(more.max(v.len() / 8).max(16));
    }
}

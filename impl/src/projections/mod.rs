//! Projections: pure, deterministic read models derived from committed events (locks §2, §2.1,
//! §6 "Projections API is internal-only"). Nothing here is truth and nothing here writes.
//!
//! Every function is linear in the number of events (one pass to index, one pass to derive),
//! so loading and projecting a 100k-event session stays linear.

mod dag;
pub mod resume;

pub use dag::{
    NodeInfo, RunDag, RunView, SessionProjection, TipPolicy, effective_preferences, project,
};

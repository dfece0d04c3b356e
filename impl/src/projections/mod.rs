//! Projections: pure, deterministic read models derived from committed events (locks §2, §2.1,
//! §6 "Projections API is internal-only"). Nothing here is truth and nothing here writes.
//!
//! Projecting a log from nothing is linear in the number of events; a [`Projector`] extends a
//! projection with appended events only, so a long session is not projected again per call.

pub mod console;
mod dag;
pub mod resume;

#[cfg(feature = "test-mutations")]
pub use dag::plant;
pub use dag::{
    CurrentOutput, DagEdge, NodeInfo, NodeTable, PlantedProjectionBug, Projector, RunDag, RunView,
    SessionProjection, TipPolicy, Unsupported, effective_preferences, project,
    project_in_two_passes,
};

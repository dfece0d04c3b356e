//! `workrail-model`: the executable reference model of the WorkRail v2 locks.
//!
//! A small, pure, in-memory model of sessions, runs and their DAGs, written from the spec for
//! clarity rather than speed. The harness drives it and the production system with the same
//! command sequences and compares every observable. It depends on `workrail-spec` (plus
//! `unicode-normalization` for NFKC, and `regex` and `jsonschema`, without their I/O features,
//! for the workflow language's `validationCriteria`) and does no I/O (no filesystem, clock,
//! randomness or environment): ids and entropy come in as arguments or are derived from stable
//! identifiers.
//!
//! - [`projections`]: pure functions over a session's committed events (run DAG, preferred tip,
//!   current outputs, gaps, capabilities, effective preferences, advance records, run status,
//!   resume ranking).
//! - [`interpreter`]: the model's own interpreter over a compiled workflow (pending step, loops,
//!   conditions, loop control, required outputs).
//! - [`language`]: the workflow language's run-time rules (condition scope, context-driven loops,
//!   frozen bindings, `validationCriteria`), decision D139.
//! - [`lanes`]: parallel lanes (decisions D161, D168, D169, D172, D173): lane runs started at a
//!   landing on a parallel step, what each handed in, and the fan-in at its acknowledgement.
//! - [`model`]: the operations (start, rehydrate, advance, replay, fork, checkpoint, preference
//!   changes) as pure transitions `Model::apply(&self, &Command) -> Result<(Model, Observation),
//!   ModelError>`, with the mapping from each operation to the lock ids it embodies.
//! - [`pgcheck`]: an exhaustive check of the PostgreSQL store's advisory-lock and transaction
//!   protocol, backends killed at any statement (decisions D201, D202).
//! - [`derive`]: the deterministic ids, including the attempt-id scheme.

#![forbid(unsafe_code)]

pub mod capabilities;
pub mod derive;
pub mod interpreter;
pub mod lanes;
pub mod language;
pub mod model;
pub mod pgcheck;
pub mod projections;
pub mod reports;
pub mod storecheck;

pub use model::{
    AckAt, AttemptAt, Command, LaneView, Model, ModelError, NodeRef, Observation, PreferenceChange,
    StartRun,
};

//! `workrail-harness`: drives `workrail-model` and the production `workrail` crate with the same
//! generated command sequences and compares every observable result.
//!
//! - [`ops`]: the generated commands (proptest strategies; `arbitrary` with feature `fuzzing`).
//! - [`fixture`]: the workflow the harness drives and the outputs an agent sends.
//! - [`generated`]: generated source workflows for the same comparison.
//! - [`lanes`]: generated workflows with parallel lanes (D168, D169) for the same comparison.
//! - [`system`]: the systems under test: the use-cases over `MemFs`, and the stdio MCP server.
//! - [`driver`]: applies each command to the model and a system and compares every observable.
//! - [`truth`]: the durable truth of a run, in model ids through an id bijection.
//! - [`crash`]: crash at every mutating I/O point of a command, restart, and classify.
//! - [`multirun`]: several runs in one data directory, with tokens mixed at random across
//!   runs and nodes, and the payload-only oracle of what each call must do.
//! - [`mangle`]: tokens mangled the way agents mangle them, and the tolerated-or-refused oracle.
//! - [`postgres`]: throwaway PostgreSQL schemas, table fingerprints, and the use-cases on a
//!   schema ([`postgres::OnPostgres`]) for the same comparison.
//! - [`pg_cluster`]: a PostgreSQL cluster of a test's own, to crash and restart.
//! - [`vector_adapter`]: the offline vectors' adapter protocol answered by the production crate
//!   (the `workrail-vector-adapter` binary).
//! - [`fuzzing`]: the entry points of the cargo-fuzz targets in `fuzz/` (also used by the
//!   regression tests of their findings).

#![forbid(unsafe_code)]

pub mod concurrency;
pub mod crash;
pub mod driver;
pub mod fixture;
pub mod fuzzing;
pub mod generated;
pub mod lanes;
pub mod language;
pub mod mangle;
pub mod multiproc;
pub mod multirun;
pub mod ops;
pub mod pg_cluster;
pub mod postgres;
pub mod system;
pub mod truth;
pub mod vector_adapter;

pub use driver::{Harness, Stats, World};
pub use ops::Op;
pub use system::{InProcess, Stdio, System};

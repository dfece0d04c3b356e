//! `workrail-spec`: the canonical types and pure rules of the WorkRail v2 locks.
//!
//! This crate is the single source of truth for everything durable or on the wire: identifiers,
//! closed sets, session events, manifest records, execution snapshots, compiled workflow
//! snapshots, export bundles, token payloads, tool inputs and outputs, the error envelope. It also
//! holds the pure rules that must not drift between implementations: RFC 8785 canonical JSON and
//! `sha256:<hex>` digests, dedupeKey recipes, StepInstanceKeys, UTF-8 byte budgets and the
//! canonical truncation marker, blocker ordering, and the reason-code mapping table.
//!
//! **Purity.** Nothing here touches the filesystem, a clock, randomness or the environment:
//! ids are minted from entropy passed in, timestamps are arguments (locks §17). JSON Schemas of
//! every type are generated from these definitions into `spec/schemas/` and verified by a test.
//!
//! Lock ids (`L-…`) are catalogued in `spec/LOCKS.md`; tests cite the ids they check.

#![forbid(unsafe_code)]

pub mod artifact;
pub mod blocker;
pub mod budget;
pub mod bundle;
pub mod closed;
pub mod compiled;
pub mod condition;
pub mod config;
pub mod context;
pub mod dedupe;
pub mod error;
pub mod event;
pub mod ids;
pub mod jcs;
pub mod manifest;
pub mod preferences;
pub mod reason;
pub mod schema_catalog;
pub mod skey;
pub mod snapshot;
pub mod token;
pub mod tools;

//! The builtins registry: the one source of truth for every WorkRail-owned closed set a workflow
//! can name (templates, features, contract packs, refs).
//!
//! The compiler resolves ids against these definitions and the builtins catalog
//! (`impl/builtins/catalog.json`) is generated from the same definitions, so the catalog can never
//! drift from what the compiler accepts (locks §9 "Builtins discoverability").

pub mod block_output;
pub mod catalog;
pub mod contracts;
pub mod features;
mod handoffs;
pub mod refs;
pub mod routines;
pub mod templates;

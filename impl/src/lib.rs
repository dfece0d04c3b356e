//! `workrail`: the production WorkRail v2 system.
//!
//! Compiler, engine, durable store, tokens, protocol use-cases, the MCP server and the CLI, all
//! built on the canonical types of `workrail-spec`. Side effects (filesystem, locks, clock,
//! entropy, keyring) sit behind traits so tests can inject faults and determinism.

#![forbid(unsafe_code)]

pub mod builtins;
pub mod bundle;
pub mod cli;
pub mod compiler;
pub mod console;
pub mod control;
pub mod engine;
pub mod entropy;
pub mod features;
pub mod gc;
mod growth;
pub mod mcp;
pub mod projections;
pub mod protocol;
pub mod sources;
pub mod store;
pub mod time;
pub mod tokens;
pub mod workspace;

//! `workrail-conformance`: judges any WorkRail v2 server through its MCP stdio surface and any
//! implementation's pure rules through the offline vectors in `fixtures/vectors/`. It depends on
//! `workrail-spec` only, never on the production crate.
//!
//! - [`scenario`]: the scenario file format (`fixtures/conformance/scenarios/*.json`);
//! - [`runner`]: one fresh server and data directory per scenario, steps interpreted in order;
//! - [`checks`]: the checkers, each citing the lock ids it asserts;
//! - [`expr`]: scenario expressions (`${name.path}`, `$operator` objects);
//! - [`store`]: reads of the data directory: digests, events, the closed sets of everything
//!   stored;
//! - [`report`]: verdicts per scenario and per lock, the console lines and the JSON report;
//! - [`features`]: the feature tags a step needs (test262-style), n/a where the server lacks
//!   one;
//! - [`limitations`]: capabilities a server lacks, declared in its surface file, and the
//!   steps they make n/a;
//! - [`surface`]: adapts the suite to a server whose tool surface differs, enables optional
//!   profiles and disables scenarios with a reason;
//! - [`token_model`]: single-token servers and opaque tokens;
//! - [`vectors`]: the offline vectors against an implementation's adapter process;
//! - [`adapter`]: the reference adapter over `workrail-spec`;
//! - [`mcp`]: a tiny MCP stdio client with a deadline per request.
//!
//! How to run it and how to read its output: `conformance/README.md`.

#![forbid(unsafe_code)]

pub mod adapter;
pub mod checks;
pub mod expr;
pub mod features;
pub mod limitations;
pub mod locks;
pub mod mcp;
pub mod report;
pub mod runner;
pub mod scenario;
pub mod schema;
pub mod store;
pub mod surface;
pub mod token_model;
pub mod vectors;

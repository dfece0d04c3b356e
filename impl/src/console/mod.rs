//! The Console: a loopback web UI over the data directory (`workrail console`).
//!
//! Read-only observability (locks §6): every page is rendered on the server from the internal
//! projections (`crate::projections::console`, built by `Workrail::console_*`), never through an
//! MCP tool. Reads take the store's read path and write nothing. The Workflows and Config pages
//! are built on the control plane (`crate::control`), and their four forms write only through
//! it (a workflow's source file, `config/features.json`, `config/preferences.json`). Access needs the per-launch secret
//! (`auth`), and every POST the Console's own origin; `server` routes, `pages` render, `svg`
//! lays out run DAGs, `markdown` turns notes into sanitized HTML.

mod auth;
pub mod history;
mod markdown;
mod pages;
mod server;
mod svg;

pub use server::{ConsoleOptions, run};

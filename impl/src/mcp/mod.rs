//! The MCP server: the locked tools over stdio (flagged ones per `crate::features`), text-first `content` plus a JSON `structuredContent`
//! backbone (contract "Tool Set", "Recorded decisions"; locks §6, §8, §12).
//!
//! - [`tools`]: the one canonical source of tool names, titles, descriptions and schemas;
//! - [`catalog`]: the generated `impl/tools/catalog.json` and the tool list of `impl/docs/mcp.md`;
//! - [`dispatch`]: argument validation and error mapping for `tools/call` (never panics);
//! - [`opening`]: a backend opened on first use, for a store unreachable at start (D127);
//! - [`server`]: the rmcp stdio server calling a [`backend::ToolBackend`] on the blocking pool;
//! - [`transport`]: the stdin/stdout guard in front of rmcp, so every line gets an answer;
//! - [`http`]: the same server over Streamable HTTP, behind Origin and client-key checks.
//!
//! There are no projection tools (locks §6): projections stay internal (CLI, Console).

pub mod backend;
pub mod catalog;
pub mod dispatch;
pub mod http;
mod opening;
pub mod render;
pub mod server;
pub mod tools;
mod transport;

pub use backend::ToolBackend;
pub use http::run_http;
pub use opening::OpeningBackend;
pub use server::{CallThread, WorkrailServer, run_stdio, serve_stdio};

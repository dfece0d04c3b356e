//! impl's integration tests in one binary (one link instead of one per file); each file
//! is a module of it, named as the file is. The memory tests, which count the allocations
//! of their whole process, and the snapshot tests, whose snapshot names follow their module
//! path, stay binaries of their own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../advance_only.rs"]
mod advance_only;
#[path = "../bundle.rs"]
mod bundle;
#[path = "../bundle_cli.rs"]
mod bundle_cli;
#[path = "../bundle_properties.rs"]
mod bundle_properties;
#[path = "../bundle_support/mod.rs"]
mod bundle_support;
#[path = "../bundle_text.rs"]
mod bundle_text;
#[path = "../caches.rs"]
mod caches;
#[path = "../cli.rs"]
mod cli;
#[path = "../compiler_builtins.rs"]
mod compiler_builtins;
#[path = "../compiler_dialect.rs"]
mod compiler_dialect;
#[path = "../compiler_golden.rs"]
mod compiler_golden;
#[path = "../compiler_language.rs"]
mod compiler_language;
#[path = "../compiler_pipeline.rs"]
mod compiler_pipeline;
#[path = "../compiler_properties.rs"]
mod compiler_properties;
#[path = "../compiler_purity.rs"]
mod compiler_purity;
#[path = "../compiler_reject.rs"]
mod compiler_reject;
#[path = "../console_browser.rs"]
mod console_browser;
#[path = "../console_config.rs"]
mod console_config;
#[path = "../console_http.rs"]
mod console_http;
#[path = "../console_layers.rs"]
mod console_layers;
#[path = "../console_pages.rs"]
mod console_pages;
#[path = "../console_support/mod.rs"]
mod console_support;
#[path = "../console_views.rs"]
mod console_views;
#[path = "../console_workflows.rs"]
mod console_workflows;
#[path = "../context.rs"]
mod context;
#[path = "../engine_contracts.rs"]
mod engine_contracts;
#[path = "../engine_loops.rs"]
mod engine_loops;
#[path = "../engine_properties.rs"]
mod engine_properties;
#[path = "../event_log.rs"]
mod event_log;
#[path = "../functions.rs"]
mod functions;
#[path = "../gc.rs"]
mod gc;
#[path = "../gc_properties.rs"]
mod gc_properties;
#[path = "../gc_races.rs"]
mod gc_races;
#[path = "../health_objects.rs"]
mod health_objects;
#[path = "../http_support/mod.rs"]
mod http_support;
#[path = "../inspect.rs"]
mod inspect;
#[path = "../io_faults.rs"]
mod io_faults;
#[path = "../lanes_fanin.rs"]
mod lanes_fanin;
#[path = "../lanes_runtime.rs"]
mod lanes_runtime;
#[path = "../language_runtime.rs"]
mod language_runtime;
#[path = "../log_invariants.rs"]
mod log_invariants;
#[path = "../mcp_catalog.rs"]
mod mcp_catalog;
#[path = "../mcp_http.rs"]
mod mcp_http;
#[path = "../mcp_http_faults.rs"]
mod mcp_http_faults;
#[path = "../mcp_http_tls.rs"]
mod mcp_http_tls;
#[path = "../mcp_server.rs"]
mod mcp_server;
#[path = "../mcp_stdio.rs"]
mod mcp_stdio;
#[path = "../migrate.rs"]
mod migrate;
#[path = "../nested_support/mod.rs"]
mod nested_support;
#[path = "../permissions.rs"]
mod permissions;
#[path = "../ports.rs"]
mod ports;
#[path = "../postgres_event_log.rs"]
mod postgres_event_log;
#[path = "../postgres_gc.rs"]
mod postgres_gc;
#[path = "../postgres_protocol.rs"]
mod postgres_protocol;
#[path = "../postgres_resume.rs"]
mod postgres_resume;
#[path = "../postgres_stall.rs"]
mod postgres_stall;
#[path = "../postgres_support/mod.rs"]
mod postgres_support;
#[path = "../postgres_tls.rs"]
mod postgres_tls;
#[path = "../postgres_unreachable.rs"]
mod postgres_unreachable;
#[path = "../preferences.rs"]
mod preferences;
#[path = "../projection_incremental.rs"]
mod projection_incremental;
#[path = "../projections.rs"]
mod projections;
#[path = "../protocol.rs"]
mod protocol;
#[path = "../protocol_support/mod.rs"]
mod protocol_support;
#[path = "../reasons.rs"]
mod reasons;
#[path = "../recap.rs"]
mod recap;
#[path = "../repair.rs"]
mod repair;
#[path = "../replay_notice.rs"]
mod replay_notice;
#[path = "../response_text.rs"]
mod response_text;
#[path = "../resume.rs"]
mod resume;
#[path = "../resume_index.rs"]
mod resume_index;
#[path = "../resume_lanes.rs"]
mod resume_lanes;
#[path = "../resume_support/mod.rs"]
mod resume_support;
#[path = "../self_sufficient.rs"]
mod self_sufficient;
#[path = "../sources_catalog.rs"]
mod sources_catalog;
#[path = "../sources_fs.rs"]
mod sources_fs;
#[path = "../sources_git.rs"]
mod sources_git;
#[path = "../start_session.rs"]
mod start_session;
#[path = "../store.rs"]
mod store;
#[path = "../store_backends.rs"]
mod store_backends;
#[path = "../store_crash.rs"]
mod store_crash;
#[path = "../store_support/mod.rs"]
mod store_support;
#[path = "../teams_done_when.rs"]
mod teams_done_when;
#[path = "../tokens.rs"]
mod tokens;
#[path = "../traces.rs"]
mod traces;
#[path = "../witness_lifetime.rs"]
mod witness_lifetime;

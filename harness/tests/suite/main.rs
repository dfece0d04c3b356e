//! The harness's tests in one binary (one link instead of one per file); each file is a module
//! of it, named as the file is. Binaries of their own: the multi-process storms, run by name, and
//! the tests that plant a bug in-process (the planted switches are process-wide).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../crash_states.rs"]
mod crash_states;
#[path = "../disagreements.rs"]
mod disagreements;
#[path = "../fuzz_regressions.rs"]
mod fuzz_regressions;
#[path = "../interleaved_runs.rs"]
mod interleaved_runs;
#[path = "../language_reference.rs"]
mod language_reference;
#[path = "../mangled_tokens.rs"]
mod mangled_tokens;
#[path = "../mangled_tokens_postgres.rs"]
mod mangled_tokens_postgres;
#[path = "../model_vs_generated.rs"]
mod model_vs_generated;
#[path = "../model_vs_inprocess.rs"]
mod model_vs_inprocess;
#[path = "../model_vs_lanes.rs"]
mod model_vs_lanes;
#[path = "../model_vs_language.rs"]
mod model_vs_language;
#[path = "../model_vs_postgres.rs"]
mod model_vs_postgres;
#[path = "../model_vs_stdio.rs"]
mod model_vs_stdio;
#[path = "../postgres_faults.rs"]
mod postgres_faults;
#[path = "../postgres_protocol_trace.rs"]
mod postgres_protocol_trace;
#[path = "../replay_fork.rs"]
mod replay_fork;
#[path = "../store_protocol_trace.rs"]
mod store_protocol_trace;

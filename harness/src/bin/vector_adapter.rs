//! `workrail-vector-adapter`: the vector adapter for WorkRail-rs (one JSON request per line on
//! stdin, one JSON answer per line on stdout; `conformance/README.md`). The projection ops are
//! answered by the production crate, the pure rules by `workrail-spec`
//! ([`workrail_harness::vector_adapter`]).
//!
//! `workrail-conformance vectors --impl target/debug/workrail-vector-adapter`

#![forbid(unsafe_code)]

fn main() {
    workrail_conformance::adapter::serve_stdio(workrail_harness::vector_adapter::answer_line);
}

//! `workrail-conformance-adapter`: the reference implementation of the vector adapter protocol
//! over `workrail-spec` (one JSON request per line on stdin, one JSON answer per line on
//! stdout). Protocol: `conformance/README.md`.

#![forbid(unsafe_code)]

fn main() {
    workrail_conformance::adapter::serve_stdio(workrail_conformance::adapter::answer_line);
}

//! `workrail-vector-adapter`: the vector adapter for WorkRail-rs (one JSON request per line on
//! stdin, one JSON answer per line on stdout; `conformance/README.md`). The projection ops are
//! answered by the production crate, the pure rules by `workrail-spec`
//! ([`workrail_harness::vector_adapter`]).
//!
//! `workrail-conformance vectors --impl target/debug/workrail-vector-adapter`

#![forbid(unsafe_code)]

use std::io::{BufRead, Write};

fn main() {
    let stdin = std::io::stdin();
    let mut stdout = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else {
            return;
        };
        if line.trim().is_empty() {
            continue;
        }
        let answer = workrail_harness::vector_adapter::answer_line(&line);
        if writeln!(stdout, "{answer}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return;
        }
    }
}

//! `workrail-conformance-adapter`: the reference implementation of the vector adapter protocol
//! over `workrail-spec` (one JSON request per line on stdin, one JSON answer per line on
//! stdout). Protocol: `conformance/README.md`.

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
        let answer = workrail_conformance::adapter::answer_line(&line);
        if writeln!(stdout, "{answer}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            return;
        }
    }
}

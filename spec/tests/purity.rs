//! The functional core stays pure: `workrail-spec` and `workrail-model` touch no filesystem,
//! clock, randomness, environment, network or process (locks §17, ARCHITECTURE "Dependency
//! direction").
//!
//! Guards against the slow drift where a "quick" `std::fs` read or `SystemTime::now()` slips into
//! the canonical rules and makes hashing or projections depend on the machine they run on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

/// Paths and names whose use means I/O, a clock, randomness or ambient configuration.
const FORBIDDEN: &[&str] = &[
    "std::fs",
    "std::env",
    "std::net",
    "std::process",
    "std::io::stdin",
    "std::io::stdout",
    "SystemTime",
    "Instant::now",
    "thread::sleep",
    "rand::",
    "getrandom",
    "tokio",
    "println!",
    "eprintln!",
];

/// Crates a pure crate may not depend on.
/// (`workrail` is the production crate: the model is written from the spec, never from `impl`.)
const FORBIDDEN_DEPENDENCIES: &[&str] =
    &["rand", "getrandom", "tokio", "chrono", "time", "workrail"];

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// lock: L-PURE-CORE
#[test]
fn spec_and_model_sources_do_no_io() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut violations = Vec::new();
    for krate in ["spec", "model"] {
        for file in rust_files(&root.join(krate).join("src")) {
            let text = fs::read_to_string(&file).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for needle in FORBIDDEN {
                    if code.contains(needle) {
                        violations.push(format!("{}:{}: uses `{needle}`", file.display(), n + 1));
                    }
                }
            }
        }
        let manifest = fs::read_to_string(root.join(krate).join("Cargo.toml")).unwrap();
        let deps = manifest
            .split("[dependencies]")
            .nth(1)
            .unwrap_or("")
            .split("\n[")
            .next()
            .unwrap_or("");
        for line in deps.lines().filter(|l| l.contains('=')) {
            // `name = ...`, `name.workspace = true` or `name = { ... }`.
            let name = line.split(['=', '.']).next().unwrap().trim();
            if FORBIDDEN_DEPENDENCIES.contains(&name) {
                violations.push(format!("{krate}/Cargo.toml depends on `{name}`"));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "pure crates must not do I/O:\n{}",
        violations.join("\n")
    );
}

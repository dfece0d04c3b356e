//! The compiler, the builtins and the interpreter are pure: no filesystem, environment, clock or
//! randomness (locks §17 "Side effects live at the edges"). Workflow sources reach the
//! filesystem and the environment only in their edge modules (`fs.rs`, `config.rs`, and `git.rs`,
//! which runs `git` and keeps the repository cache, D178).
//!
//! Guards against a convenience `std::fs::read_to_string` or `SystemTime::now()` creeping into a
//! module whose output is hashed and pinned.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

const FORBIDDEN: &[&str] = &[
    "std::fs",
    "std::env",
    "std::time",
    "SystemTime",
    "Instant::now",
    "getrandom",
    "std::process",
    "std::net",
];

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// lock: L-COMPILE-PURE, L-PURE-EDGES
#[test]
fn pure_modules_touch_no_filesystem_environment_clock_or_entropy() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = ["sources/fs.rs", "sources/config.rs", "sources/git.rs"];
    let mut offenders = Vec::new();
    let mut checked = 0;
    for module in ["compiler", "builtins", "engine", "sources"] {
        for file in rust_files(&src.join(module)) {
            let rel = file
                .strip_prefix(&src)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if edges.contains(&rel.as_str()) {
                continue;
            }
            checked += 1;
            let text = fs::read_to_string(&file).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                for word in FORBIDDEN {
                    if code.contains(word) {
                        offenders.push(format!("{rel}:{}: {word}", n + 1));
                    }
                }
            }
        }
    }
    assert!(
        checked >= 20,
        "only {checked} files checked; did the layout change?"
    );
    assert!(
        offenders.is_empty(),
        "side effects outside the edge modules:\n{}",
        offenders.join("\n")
    );
}

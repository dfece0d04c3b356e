//! Helpers the suite's own tests share: the workspace, the reference server, and one run of the
//! suite with a fixture root and a surface file.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The workspace root (the parent of the `conformance` crate).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

/// The reference server, `<workspace>/target/debug/workrail`, built first unless it is newer than
/// every source it is built from. `cargo test --workspace` has built it already, with the
/// workspace's unified features; building it again with `cargo build -p workrail` would resolve
/// other features and compile its dependencies a second time.
pub fn server() -> PathBuf {
    let bin = workspace().join("target/debug/workrail");
    if built_after_sources(&bin) {
        return bin;
    }
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "-p", "workrail", "--bin", "workrail"])
        .current_dir(workspace())
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo build -p workrail failed");
    assert!(bin.is_file(), "{} was not built", bin.display());
    bin
}

/// Whether `bin` exists and was built after the last change to the server's sources.
fn built_after_sources(bin: &Path) -> bool {
    fn newest(path: &Path) -> Option<std::time::SystemTime> {
        let meta = std::fs::metadata(path).ok()?;
        if !meta.is_dir() {
            return meta.modified().ok();
        }
        std::fs::read_dir(path)
            .ok()?
            .flatten()
            .filter_map(|entry| newest(&entry.path()))
            .max()
    }
    let Some(built) = std::fs::metadata(bin).and_then(|m| m.modified()).ok() else {
        return false;
    };
    let root = workspace();
    [
        "impl/src",
        "impl/builtins",
        "impl/workflows",
        "impl/Cargo.toml",
        "spec/src",
        "spec/Cargo.toml",
        "Cargo.lock",
    ]
    .iter()
    .filter_map(|source| newest(&root.join(source)))
    .all(|changed| changed <= built)
}

/// Runs the suite against `workrail mcp` with the scenarios under `fixtures` and `surface`;
/// requires it to succeed and returns its text report and its `--json` report.
pub fn run_suite(fixtures: &Path, surface: &Path) -> (String, Value) {
    let json_path = fixtures.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_workrail-conformance"))
        .args(["--server", &format!("{} mcp", server().display())])
        .arg("--fixtures")
        .arg(fixtures)
        .arg("--surface")
        .arg(surface)
        .arg("--json")
        .arg(&json_path)
        .current_dir(workspace())
        .output()
        .expect("the suite runs");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{stdout}");
    let report = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    (stdout, report)
}

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

/// The workspace crates a crate's `[dependencies]` name (dev-dependencies excluded).
fn workspace_dependencies(root: &Path, krate: &str) -> Vec<String> {
    let manifest = fs::read_to_string(root.join(krate).join("Cargo.toml")).unwrap();
    let deps = manifest
        .split("\n[dependencies]")
        .nth(1)
        .unwrap_or("")
        .split("\n[")
        .next()
        .unwrap_or("");
    deps.lines()
        .filter(|l| l.contains('='))
        .map(|l| l.split(['=', '.']).next().unwrap().trim().to_owned())
        .filter(|name| name.starts_with("workrail"))
        .collect()
}

/// What in production code means filesystem, stream or network I/O.
const IO: &[&str] = &[
    "std::fs",
    "File::",
    "OpenOptions",
    "std::net",
    "io::stdin",
    "io::stdout",
    "process::Command",
];

/// The adapter modules of `impl` that may do that I/O: the filesystem behind the store's,
/// the workflow sources' and the workspace's ports, GC's clock, the check of who owns the data
/// directory (`lstat` of its root and top-level entries at open, D136), the PostgreSQL
/// connector (the CA file a URL's `sslrootcert` names, read once at start), and the process's
/// edges (the
/// command line, the MCP server's stdio and HTTP listener with its printed address, and the
/// Console's loopback listener, printed link and browser launch).
const IO_ADAPTERS: &[&str] = &[
    "store/fs.rs",
    "store/owner.rs",
    "store/postgres/tls.rs",
    "sources/fs.rs",
    // Git workflow sources: the `git` program and the repository cache (D178).
    "sources/git.rs",
    "workspace/fs.rs",
    "gc/os.rs",
    "cli/mod.rs",
    "mcp/server.rs",
    "mcp/http.rs",
    "console/server.rs",
    "main.rs",
];

/// The layers point one way: the core (`workrail-spec`) depends on no other crate of the
/// workspace, the model only on the core, production (`workrail`) only on the core (never on
/// the model it is checked against); and inside production only the adapter modules do I/O,
/// everything else reaches it through the ports (`StoreFs`, `WorkflowSource`, `Workspace`,
/// `RetentionClock`).
///
/// lock: L-PURE-LAYERING
#[test]
fn layers_depend_one_way_and_only_adapters_do_io() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    assert_eq!(workspace_dependencies(root, "spec"), Vec::<String>::new());
    assert_eq!(workspace_dependencies(root, "model"), ["workrail-spec"]);
    assert_eq!(workspace_dependencies(root, "impl"), ["workrail-spec"]);
    let src = root.join("impl").join("src");
    let mut violations = Vec::new();
    for file in rust_files(&src) {
        let relative = file
            .strip_prefix(&src)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if IO_ADAPTERS.contains(&relative.as_str()) {
            continue;
        }
        let text = fs::read_to_string(&file).unwrap();
        // Unit tests may use the real filesystem (temp dirs); production code may not.
        let production = text.split("#[cfg(test)]").next().unwrap_or("");
        for (n, line) in production.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for needle in IO {
                if code.contains(needle) {
                    violations.push(format!("impl/src/{relative}:{}: uses `{needle}`", n + 1));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "I/O outside the adapter modules:\n{}",
        violations.join("\n")
    );
    // The check sees what it must: the adapters themselves do I/O.
    let store_fs = fs::read_to_string(src.join("store/fs.rs")).unwrap();
    assert!(IO.iter().any(|needle| store_fs.contains(needle)));
}

/// Production modules an MCP handler must not reach around the use-case facade.
const BELOW_USE_CASES: &[&str] = &[
    "crate::store",
    "crate::engine",
    "crate::projections",
    "crate::compiler",
    "crate::bundle",
    "crate::gc",
    "crate::sources",
    "crate::tokens",
    "crate::workspace",
];

/// The MCP layer maps requests to use cases and results to responses, nothing else: its modules
/// never reach the store, engine, compiler, projections, tokens or sources, the use cases are
/// named in one place (the `ToolBackend` implementation in `mcp/backend.rs`), and every tool's
/// handler arm is one call of its use case.
///
/// lock: L-PURE-THIN-HANDLERS
#[test]
fn mcp_handlers_only_map_requests_to_use_cases() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mcp = root.join("impl/src/mcp");
    let mut violations = Vec::new();
    for file in rust_files(&mcp) {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let text = fs::read_to_string(&file).unwrap();
        let production = text.split("#[cfg(test)]").next().unwrap_or("");
        for (n, line) in production.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for needle in BELOW_USE_CASES {
                if code.contains(needle) {
                    violations.push(format!("impl/src/mcp/{name}:{}: uses `{needle}`", n + 1));
                }
            }
            if code.contains("crate::protocol") && name != "backend.rs" {
                violations.push(format!(
                    "impl/src/mcp/{name}:{}: reaches `crate::protocol` outside the backend",
                    n + 1
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "MCP handlers must stay thin:\n{}",
        violations.join("\n")
    );
    // Each execution tool's arm parses its input and calls the one use case of the same name.
    let dispatch = fs::read_to_string(mcp.join("dispatch.rs")).unwrap();
    for tool in [
        "start_workflow",
        "continue_workflow",
        "checkpoint_workflow",
        "list_workflows",
        "inspect_workflow",
        "start_session",
        "resume_session",
    ] {
        assert!(
            dispatch.contains(&format!("backend.{tool}(")),
            "dispatch.rs does not hand `{tool}` to its use case"
        );
    }
}

/// Projections are functions of durable truth alone: the projection modules (production's and
/// the model's) read no store, file, clock, randomness or environment, so the same events give
/// the same projection on any machine at any time. (Their equality under any chunking of the
/// log is `impl/tests/projection_incremental.rs`; their budgets are in `workrail_spec::budget`.)
///
/// lock: L-PURE-PROJECTIONS
#[test]
fn projections_read_nothing_but_the_events_they_are_given() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut violations = Vec::new();
    let mut files = rust_files(&root.join("impl/src/projections"));
    files.extend(rust_files(&root.join("model/src/projections")));
    assert!(files.len() >= 4, "the projection modules moved: {files:?}");
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        let production = text.split("#[cfg(test)]").next().unwrap_or("");
        for (n, line) in production.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for needle in FORBIDDEN
                .iter()
                .chain(BELOW_USE_CASES)
                .chain(["crate::protocol", "Mutex", "RefCell", "static mut"].iter())
            {
                if code.contains(needle) {
                    violations.push(format!("{}:{}: uses `{needle}`", file.display(), n + 1));
                }
            }
        }
    }
    assert!(
        violations.is_empty(),
        "projections must be pure functions of events:\n{}",
        violations.join("\n")
    );
}

//! The Console and the CLI both stand on the control plane: `control` imports neither, and the
//! Console does not import the CLI (issue 34, item 9; `cli`, `console` and `control` used to
//! import each other, so none could be read or changed alone).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// Every `crate::<module>` path of `dir`'s sources that names one of `forbidden`.
fn uses(dir: &str, forbidden: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir);
    let mut found = Vec::new();
    for file in sources(&root) {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for module in forbidden {
                if code.contains(&format!("crate::{module}::"))
                    || code.contains(&format!("crate::{module};"))
                {
                    found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn the_control_plane_imports_neither_the_cli_nor_the_console() {
    let found = uses("control", &["cli", "console"]);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn the_console_does_not_import_the_cli() {
    let found = uses("console", &["cli"]);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

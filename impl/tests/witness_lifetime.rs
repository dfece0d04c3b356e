//! The append witness cannot outlive the gate that lent it, checked by the compiler itself and
//! by its message (not by "some compile error happened").
//!
//! A `compile_fail` doctest passes on any compile error, and stable rustdoc does not check the
//! error code it is given, so it cannot tell this lock's error from a typo. Here the same two
//! programs are type-checked with `rustc` against the `workrail` library this test was built
//! with: the one that uses the witness inside its closure must compile, and the one that keeps it
//! for later must fail with E0521 ("borrowed data escapes outside of closure").

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

const USES_INSIDE: &str = r#"
use workrail::store::{AppendGate, LoadedSession, SessionIntent, SessionStore};
pub fn use_inside(store: &SessionStore, loaded: &LoadedSession) {
    let _ = store.with_append_gate(&loaded.session_id, SessionIntent::Create, |gate: &mut AppendGate<'_>| {
        let _committed = gate.session().event_count();
        Ok::<_, workrail::store::StoreError>(())
    });
}
"#;

const KEEPS_FOR_LATER: &str = r#"
use workrail::store::{AppendGate, LoadedSession, SessionIntent, SessionStore};
pub fn stash(store: &SessionStore, loaded: &LoadedSession) {
    let mut kept = None;
    let _ = store.with_append_gate(&loaded.session_id, SessionIntent::Create, |gate: &mut AppendGate<'_>| {
        kept = Some(gate);
        Ok::<_, workrail::store::StoreError>(())
    });
    drop(kept);
}
"#;

/// The directory holding this test's dependencies (`target/<profile>/deps`).
fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().to_path_buf()
}

/// Type-checks `source` as a library against `rlib`; the compiler's stderr on failure.
fn check(source: &str, rlib: &Path, scratch: &Path) -> Result<(), String> {
    let file = scratch.join("snippet.rs");
    std::fs::write(&file, source).unwrap();
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let out = Command::new(rustc)
        .args([
            "--edition",
            "2024",
            "--crate-type",
            "lib",
            "--emit",
            "metadata",
        ])
        .arg("--crate-name")
        .arg("snippet")
        .arg("-L")
        .arg(format!("dependency={}", deps_dir().display()))
        .arg("--extern")
        .arg(format!("workrail={}", rlib.display()))
        .arg("--out-dir")
        .arg(scratch)
        .arg(&file)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// lock: L-TOKEN-WITNESS-LIFETIME
#[test]
fn a_witness_kept_past_its_gate_is_refused_by_the_compiler_with_the_escape_error() {
    let scratch = tempfile::tempdir().unwrap();
    // The deps directory may hold older builds of the library; the newest one that compiles the
    // legitimate use is the one this test was built with.
    let mut rlibs: Vec<PathBuf> = std::fs::read_dir(deps_dir())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libworkrail-") && n.ends_with(".rlib"))
        })
        .collect();
    rlibs.sort_by_key(|p| std::cmp::Reverse(p.metadata().and_then(|m| m.modified()).ok()));
    let mut tried = Vec::new();
    let rlib = rlibs
        .iter()
        .find(|rlib| match check(USES_INSIDE, rlib, scratch.path()) {
            Ok(()) => true,
            Err(e) => {
                tried.push(format!("{}: {e}", rlib.display()));
                false
            }
        })
        .unwrap_or_else(|| panic!("no workrail library compiles the legitimate use: {tried:#?}"));
    let refused = check(KEEPS_FOR_LATER, rlib, scratch.path())
        .expect_err("keeping the witness past its closure must not compile");
    assert!(
        refused.contains("E0521") && refused.contains("escapes"),
        "the refusal is not the escape error:\n{refused}"
    );
}

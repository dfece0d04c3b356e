//! Directory sources and their configuration: which directories are read, in which precedence,
//! with opaque relative source refs (never absolute paths), and a missing directory is simply
//! empty.
//!
//! Guards against absolute paths leaking into durable `workflowSourceRef`s, nondeterministic
//! file order, and an env var that silently adds nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::json;
use workrail::sources::fs::DirSource;
use workrail::sources::{Catalog, SourceConfig, WorkflowSource};
use workrail_spec::closed::WorkflowSourceKind as Kind;

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("workrail-sources-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }
    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn write(dir: &Path, file: &str, id: &str) {
    fs::create_dir_all(dir).unwrap();
    let text = json!({"id": id, "name": id, "description": "A workflow.", "steps": [{"id": "a", "title": "A", "prompt": "Do A."}]});
    fs::write(dir.join(file), text.to_string()).unwrap();
}

#[test]
fn a_directory_source_reads_json_files_in_name_order_with_relative_refs() {
    let tmp = TempDir::new("dir");
    write(tmp.path(), "b.json", "team.b");
    write(tmp.path(), "a.json", "team.a");
    fs::write(tmp.path().join("notes.txt"), "not a workflow").unwrap();
    fs::create_dir_all(tmp.path().join("nested.json")).unwrap();
    let source = DirSource::new(Kind::Project, tmp.path().to_path_buf(), "project/workflows");
    let docs: Vec<_> = source.documents().into_iter().map(Result::unwrap).collect();
    let refs: Vec<&str> = docs.iter().map(|d| d.source_ref.as_str()).collect();
    assert_eq!(
        refs,
        ["project/workflows/a.json", "project/workflows/b.json"]
    );
    let missing = DirSource::new(Kind::User, tmp.path().join("absent"), "user");
    assert!(missing.documents().is_empty());
}

#[test]
fn the_configuration_lists_sources_in_precedence_order() {
    let home = Path::new("/home/dev");
    let cwd = Path::new("/work/repo");
    let dirs = std::env::join_paths(["/opt/flows", "/srv/team"]).unwrap();
    let config = SourceConfig::new(Some(home), cwd, Some(&dirs));
    assert_eq!(
        config.user_dir.as_deref(),
        Some(Path::new("/home/dev/.workrail/workflows"))
    );
    assert_eq!(
        config.project_dirs[0].0,
        Path::new("/work/repo/.workrail/workflows")
    );
    assert_eq!(config.project_dirs[1].0, Path::new("/work/repo/workflows"));
    assert_eq!(
        config.extra_dirs,
        vec![
            (PathBuf::from("/opt/flows"), "dir0".to_owned()),
            (PathBuf::from("/srv/team"), "dir1".to_owned())
        ]
    );
    let kinds: Vec<Kind> = config.sources().iter().map(|s| s.kind()).collect();
    assert_eq!(
        kinds,
        [
            Kind::Bundled,
            Kind::Project,
            Kind::Project,
            Kind::User,
            Kind::User,
            Kind::User
        ]
    );
    let none = SourceConfig::new(None, cwd, Some(&OsString::new()));
    assert!(none.extra_dirs.is_empty() && none.user_dir.is_none());
}

/// lock: L-NS-NO-SHADOWING, L-NS-WR-RESERVED
#[test]
fn project_user_and_extra_directories_load_end_to_end() {
    let home = TempDir::new("home");
    let cwd = TempDir::new("cwd");
    let extra = TempDir::new("extra");
    write(
        &home.path().join(".workrail/workflows"),
        "mine.json",
        "user.mine",
    );
    write(
        &home.path().join(".workrail/workflows"),
        "shared.json",
        "team.shared",
    );
    write(&cwd.path().join("workflows"), "shared.json", "team.shared");
    write(
        &cwd.path().join(".workrail/workflows"),
        "legacy.json",
        "old-flow",
    );
    write(extra.path(), "x.json", "wr.fake");
    let config = SourceConfig::new(
        Some(home.path()),
        cwd.path(),
        Some(extra.path().as_os_str()),
    );
    let sources = config.sources();
    let refs: Vec<&dyn WorkflowSource> = sources.iter().map(|s| s.as_ref()).collect();
    let catalog = Catalog::load(&refs);
    assert_eq!(
        catalog.get("user.mine").unwrap().source_ref,
        "user/mine.json"
    );
    let shared = catalog.get("team.shared").unwrap();
    assert_eq!(
        (shared.source_kind, shared.source_ref.as_str()),
        (Kind::Project, "project/workflows/shared.json")
    );
    assert_eq!(
        catalog
            .get("old-flow")
            .unwrap()
            .suggested_id
            .as_ref()
            .unwrap()
            .as_str(),
        "project.old_flow"
    );
    assert_eq!(catalog.get("wr.fake"), None);
    let problem_refs: Vec<&str> = catalog
        .problems()
        .iter()
        .map(|p| p.source_ref.as_str())
        .collect();
    assert_eq!(problem_refs, ["dir0/x.json", "user/shared.json"]);
    for w in catalog.workflows() {
        assert!(!Path::new(&w.source_ref).is_absolute(), "{}", w.source_ref);
    }
}

/// A cached catalog sees every change to a directory source: an edit of the same size made
/// right after the first load, a new file, a removed file.
#[test]
fn the_catalog_cache_sees_every_edit_even_within_one_timestamp_tick() {
    use workrail::sources::CatalogCache;
    let dir = tempfile::tempdir().unwrap();
    let source = DirSource::new(Kind::Project, dir.path().to_path_buf(), "p");
    let doc = |name: &str| {
        serde_json::json!({
            "id": "project.flow", "name": name, "description": "d",
            "steps": [{"id": "one", "title": "One", "prompt": "Do it."}],
        })
        .to_string()
    };
    let cache = CatalogCache::new();
    let name_of = |cache: &CatalogCache| {
        let sources: Vec<&dyn WorkflowSource> = vec![&source];
        let catalog = cache.load(&sources);
        catalog
            .get("project.flow")
            .and_then(|w| w.compiled.snapshot.body.name.clone())
    };
    std::fs::write(dir.path().join("flow.json"), doc("AAAA")).unwrap();
    assert_eq!(name_of(&cache).as_deref(), Some("AAAA"));
    // Same size, same instant (to the filesystem's granularity).
    std::fs::write(dir.path().join("flow.json"), doc("BBBB")).unwrap();
    assert_eq!(name_of(&cache).as_deref(), Some("BBBB"));
    std::fs::remove_file(dir.path().join("flow.json")).unwrap();
    assert_eq!(name_of(&cache), None);
    std::fs::write(dir.path().join("again.json"), doc("CCCC")).unwrap();
    assert_eq!(name_of(&cache).as_deref(), Some("CCCC"));
}

/// Old files are vouched for by their fingerprint, so an unchanged directory is not re-read.
#[test]
fn an_unchanged_directory_reuses_the_cached_catalog() {
    use workrail::sources::CatalogCache;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("flow.json");
    std::fs::write(
        &file,
        r#"{"id": "project.flow", "name": "F", "description": "d", "steps": [{"id": "one", "title": "One", "prompt": "Do it."}]}"#,
    )
    .unwrap();
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let source = DirSource::new(Kind::Project, dir.path().to_path_buf(), "p");
    let sources: Vec<&dyn WorkflowSource> = vec![&source];
    let cache = CatalogCache::new();
    let first = cache.load(&sources);
    let second = cache.load(&sources);
    assert!(std::sync::Arc::ptr_eq(&first, &second));
    // A change of modification time alone is a change.
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(old + std::time::Duration::from_secs(1))
        .unwrap();
    assert!(!std::sync::Arc::ptr_eq(&first, &cache.load(&sources)));
}

/// A file written a moment ago is vouched for by its content instead of its time: unchanged, the
/// cached catalog is reused; rewritten with the same size and time, it is a change.
#[test]
fn a_just_written_file_is_fingerprinted_by_its_content() {
    use workrail::sources::CatalogCache;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("flow.json");
    let doc = |name: &str| {
        format!(
            r#"{{"id": "project.flow", "name": "{name}", "description": "d", "steps": [{{"id": "one", "title": "One", "prompt": "Do it."}}]}}"#
        )
    };
    std::fs::write(&file, doc("AAAA")).unwrap();
    let written = std::fs::metadata(&file).unwrap().modified().unwrap();
    let source = DirSource::new(Kind::Project, dir.path().to_path_buf(), "p");
    let sources: Vec<&dyn WorkflowSource> = vec![&source];
    let cache = CatalogCache::new();
    let first = cache.load(&sources);
    assert!(std::sync::Arc::ptr_eq(&first, &cache.load(&sources)));
    std::fs::write(&file, doc("BBBB")).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&file)
        .unwrap()
        .set_modified(written)
        .unwrap();
    let changed = cache.load(&sources);
    assert!(!std::sync::Arc::ptr_eq(&first, &changed));
    assert_eq!(
        changed
            .get("project.flow")
            .and_then(|w| w.compiled.snapshot.body.name.clone())
            .as_deref(),
        Some("BBBB")
    );
}

//! Directory sources: every `*.json` file directly inside one directory (the only module of the
//! compiler side that touches the filesystem).

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use workrail_spec::ids::Sha256Digest;

use workrail_spec::closed::WorkflowSourceKind;

use super::{SourceDocument, SourceIoError, WorkflowSource};

/// How recent a modification time must not be for a fingerprint to vouch for the file (the
/// coarsest common timestamp granularity, with a margin).
const RACY_WINDOW: std::time::Duration = std::time::Duration::from_secs(3);

/// The `*.json` files of one directory, read in file-name order. A missing directory is an
/// empty source, not an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirSource {
    kind: WorkflowSourceKind,
    root: PathBuf,
    /// Prefix of every source ref, e.g. `project/workflows` (never an absolute path).
    label: String,
}

impl DirSource {
    pub fn new(kind: WorkflowSourceKind, root: PathBuf, label: &str) -> Self {
        Self {
            kind,
            root,
            label: label.trim_end_matches('/').to_owned(),
        }
    }

    pub fn label(&self) -> &str {
        &self.label
    }
}

impl WorkflowSource for DirSource {
    fn kind(&self) -> WorkflowSourceKind {
        self.kind
    }

    fn documents(&self) -> Vec<Result<SourceDocument, SourceIoError>> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
            Err(e) => {
                return vec![Err(SourceIoError {
                    source_ref: self.label.clone(),
                    message: e.to_string(),
                    path: Some(self.root.display().to_string()),
                })];
            }
        };
        let mut files: Vec<(String, PathBuf)> = Vec::new();
        let mut out = Vec::new();
        for entry in entries {
            match entry {
                Ok(entry) => {
                    let path = entry.path();
                    let is_json = path.extension().is_some_and(|e| e == "json");
                    if is_json && path.is_file() {
                        files.push((entry.file_name().to_string_lossy().into_owned(), path));
                    }
                }
                Err(e) => out.push(Err(SourceIoError {
                    source_ref: self.label.clone(),
                    message: e.to_string(),
                    path: Some(self.root.display().to_string()),
                })),
            }
        }
        files.sort();
        for (name, path) in files {
            let source_ref = format!("{}/{name}", self.label);
            let shown = Some(path.display().to_string());
            out.push(match std::fs::read_to_string(&path) {
                Ok(text) => Ok(SourceDocument {
                    source_ref,
                    text,
                    path: shown,
                }),
                Err(e) => Err(SourceIoError {
                    source_ref,
                    message: e.to_string(),
                    path: shown,
                }),
            });
        }
        out
    }

    /// Each `*.json` entry's name, size and modification time (nanoseconds), in name order; for
    /// a file modified in the last few seconds, its size and content digest instead.
    fn fingerprint(&self) -> Option<String> {
        use std::fmt::Write as _;
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some("absent".to_owned()),
            Err(_) => return None,
        };
        let mut files = Vec::new();
        for entry in entries {
            let entry = entry.ok()?;
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            // Follows symlinks, like `documents` (which reads through them).
            let meta = std::fs::metadata(&path).ok()?;
            if !meta.is_file() {
                continue;
            }
            let modified_at = meta.modified().ok()?;
            let modified = modified_at
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?
                .as_nanos();
            // A file modified within the filesystem's timestamp granularity may change again
            // without its time changing ("racy" timestamps): its size and time do not vouch for
            // it yet, so its content's digest stands in for them (read before the documents
            // are, like the rest of the fingerprint).
            let age = std::time::SystemTime::now().duration_since(modified_at);
            let stamp = if age.map_or(true, |age| age < RACY_WINDOW) {
                let bytes = std::fs::read(&path).ok()?;
                let digest = Sha256Digest::from_bytes(&Sha256::digest(&bytes).into());
                format!("{}|{digest}", bytes.len())
            } else {
                format!("{}|{modified}", meta.len())
            };
            files.push((entry.file_name(), stamp));
        }
        files.sort();
        let mut print = String::new();
        for (name, stamp) in files {
            let _ = write!(print, "{}|{stamp}/", name.to_string_lossy());
        }
        Some(print)
    }
}

/// Reads a workflow source text given on the command line: a file, or stdin for `-`.
pub fn read_source_text(path: &Path) -> std::io::Result<String> {
    if path.as_os_str() == "-" {
        return std::io::read_to_string(std::io::stdin());
    }
    std::fs::read_to_string(path)
}

/// Reads a workflow source file (a document that did not compile, shown for editing; a file
/// `workrail validate` or `migrate` works on).
pub fn read_source_file(path: &Path) -> std::io::Result<String> {
    std::fs::read_to_string(path)
}

/// Writes a workflow source file whole and atomically: a temp file beside it (its mode copied
/// from the file it replaces), fsync, rename, fsync of the directory, which is created first
/// when missing. A failure leaves the old file as it was and removes the temp file.
pub fn write_source_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(crate::store::layout::temp_file_name(&name));
    let mode = std::fs::metadata(path).ok().map(|m| m.permissions());
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        if let Some(mode) = mode {
            file.set_permissions(mode)?;
        }
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    std::fs::File::open(dir)?.sync_all()
}

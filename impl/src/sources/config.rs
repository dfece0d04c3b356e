//! Which directories are workflow sources (locks §7; contract "Workflow pinning"):
//!
//! - bundled: embedded in the binary (`wr.*` only);
//! - project: `<cwd>/.workrail/workflows` and `<cwd>/workflows`;
//! - extra: each directory of `WORKRAIL_WORKFLOW_DIRS` (a platform path list), kind `user`;
//! - user: `~/.workrail/workflows`.
//!
//! Precedence for non-`wr.*` ids is that order: project, then extra dirs (in list order), then
//! user; the first definition wins and later copies are reported as shadowed.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use workrail_spec::closed::WorkflowSourceKind;

use super::WorkflowSource;
use super::bundled::BundledSource;
use super::fs::DirSource;

/// The environment variable with extra workflow directories.
pub const WORKFLOW_DIRS_ENV: &str = "WORKRAIL_WORKFLOW_DIRS";

/// The configured directory sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceConfig {
    pub project_dirs: Vec<(PathBuf, String)>,
    pub extra_dirs: Vec<(PathBuf, String)>,
    pub user_dir: Option<PathBuf>,
}

impl SourceConfig {
    /// The configuration for a home directory, a working directory and the value of
    /// `WORKRAIL_WORKFLOW_DIRS` (all passed in, so this stays testable and pure).
    pub fn new(home: Option<&Path>, cwd: &Path, workflow_dirs: Option<&OsStr>) -> Self {
        let project_dirs = vec![
            (
                cwd.join(".workrail").join("workflows"),
                "project/.workrail/workflows".to_owned(),
            ),
            (cwd.join("workflows"), "project/workflows".to_owned()),
        ];
        let extra_dirs = workflow_dirs
            .map(|dirs| {
                std::env::split_paths(dirs)
                    .filter(|p| !p.as_os_str().is_empty())
                    .enumerate()
                    .map(|(i, p)| (p, format!("dir{i}")))
                    .collect()
            })
            .unwrap_or_default();
        Self {
            project_dirs,
            extra_dirs,
            user_dir: home.map(|h| h.join(".workrail").join("workflows")),
        }
    }

    /// The configuration of this process (`HOME`, the current directory, the env variable).
    pub fn from_process_env() -> std::io::Result<Self> {
        let home = std::env::var_os("HOME").or_else(|| std::env::var_os("USERPROFILE"));
        let cwd = std::env::current_dir()?;
        let dirs = std::env::var_os(WORKFLOW_DIRS_ENV);
        Ok(Self::new(
            home.as_deref().map(Path::new),
            &cwd,
            dirs.as_deref(),
        ))
    }

    /// Every source in precedence order, bundled first.
    pub fn sources(&self) -> Vec<Box<dyn WorkflowSource>> {
        let mut out: Vec<Box<dyn WorkflowSource>> = vec![Box::new(BundledSource)];
        for (dir, label) in &self.project_dirs {
            out.push(Box::new(DirSource::new(
                WorkflowSourceKind::Project,
                dir.clone(),
                label,
            )));
        }
        for (dir, label) in &self.extra_dirs {
            out.push(Box::new(DirSource::new(
                WorkflowSourceKind::User,
                dir.clone(),
                label,
            )));
        }
        if let Some(dir) = &self.user_dir {
            out.push(Box::new(DirSource::new(
                WorkflowSourceKind::User,
                dir.clone(),
                "user",
            )));
        }
        out
    }
}

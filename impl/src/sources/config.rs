//! Which directories are workflow sources (locks §7; contract "Workflow pinning"):
//!
//! - bundled: embedded in the binary (`wr.*` only);
//! - project: `<cwd>/.workrail/workflows` and `<cwd>/workflows`;
//! - extra: each directory of `WORKRAIL_WORKFLOW_DIRS` (a platform path list), kind `user`;
//! - user: `~/.workrail/workflows`;
//! - remote: each repository of `WORKRAIL_WORKFLOW_REPOS`, synced into the data directory's cache
//!   (`git.rs`, decision D178).
//!
//! Precedence for non-`wr.*` ids: project, then the repositories (in list order), then extra dirs
//! (in list order), then user, as the reference implementation orders its sources; the first
//! definition wins and later copies are reported as shadowed. The reference's variables are
//! accepted too: `WORKFLOW_STORAGE_PATH` (more extra dirs), `WORKFLOW_INCLUDE_BUNDLED`,
//! `WORKFLOW_INCLUDE_USER` and `WORKFLOW_INCLUDE_PROJECT` (`false` or `0` leaves a kind out).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use workrail_spec::closed::WorkflowSourceKind;

use super::WorkflowSource;
use super::bundled::BundledSource;
use super::fs::DirSource;
use super::git::{GitRepoSource, RepoCache, RepoSpec};

/// The environment variable with extra workflow directories.
pub const WORKFLOW_DIRS_ENV: &str = "WORKRAIL_WORKFLOW_DIRS";

/// The reference implementation's extra directories (a platform path list), an alias.
pub const STORAGE_PATH_ALIAS_ENV: &str = "WORKFLOW_STORAGE_PATH";

/// The configured sources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceConfig {
    pub project_dirs: Vec<(PathBuf, String)>,
    pub extra_dirs: Vec<(PathBuf, String)>,
    pub user_dir: Option<PathBuf>,
    /// Git repositories and the cache they are synced into.
    pub repos: Vec<RepoSpec>,
    pub repo_cache: Option<RepoCache>,
    /// `WORKFLOW_INCLUDE_BUNDLED=false` leaves the bundled workflows out.
    pub include_bundled: bool,
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
            repos: Vec::new(),
            repo_cache: None,
            include_bundled: true,
        }
    }

    /// The same configuration with the repositories `repos`, synced into `cache`.
    pub fn with_repos(mut self, repos: Vec<RepoSpec>, cache: RepoCache) -> Self {
        self.repos = repos;
        self.repo_cache = Some(cache);
        self
    }

    /// The reference implementation's variables over this configuration: `WORKFLOW_STORAGE_PATH`
    /// adds extra dirs; `WORKFLOW_INCLUDE_*` set to `false` or `0` leave a kind of source out.
    pub fn with_reference_aliases(mut self, env: &dyn Fn(&str) -> Option<String>) -> Self {
        if let Some(paths) = env(STORAGE_PATH_ALIAS_ENV) {
            let start = self.extra_dirs.len();
            self.extra_dirs.extend(
                std::env::split_paths(&paths)
                    .filter(|p| !p.as_os_str().is_empty())
                    .enumerate()
                    .map(|(i, p)| (p, format!("dir{}", start + i))),
            );
        }
        let off =
            |name: &str| env(name).is_some_and(|v| !(v.eq_ignore_ascii_case("true") || v == "1"));
        if off("WORKFLOW_INCLUDE_BUNDLED") {
            self.include_bundled = false;
        }
        if off("WORKFLOW_INCLUDE_USER") {
            self.user_dir = None;
        }
        if off("WORKFLOW_INCLUDE_PROJECT") {
            self.project_dirs.clear();
        }
        self
    }

    /// The configuration of this process (`HOME`, the current directory, the env variable).
    pub fn from_process_env() -> std::io::Result<Self> {
        let home = std::env::var_os("HOME").or_else(|| std::env::var_os("USERPROFILE"));
        let cwd = std::env::current_dir()?;
        let dirs = std::env::var_os(WORKFLOW_DIRS_ENV);
        Ok(
            Self::new(home.as_deref().map(Path::new), &cwd, dirs.as_deref())
                .with_reference_aliases(&|name| std::env::var(name).ok()),
        )
    }

    /// Every source in precedence order, bundled first.
    pub fn sources(&self) -> Vec<Box<dyn WorkflowSource>> {
        let mut out: Vec<Box<dyn WorkflowSource>> = Vec::new();
        if self.include_bundled {
            out.push(Box::new(BundledSource));
        }
        for (dir, label) in &self.project_dirs {
            out.push(Box::new(DirSource::new(
                WorkflowSourceKind::Project,
                dir.clone(),
                label,
            )));
        }
        if let Some(cache) = &self.repo_cache {
            for spec in &self.repos {
                out.push(Box::new(GitRepoSource::new(spec.clone(), cache.clone())));
            }
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

//! Workspace identity for `observation_recorded` (locks §1 "observation_recorded"; contract
//! "Environment observations").
//!
//! When a run starts inside a git repository, WorkRail records the branch, the HEAD commit and a
//! hash of the repository root, so `resume_session` can later rank that session by them. Git
//! state is read from files only (no `git` subprocess): the `.git` directory, or the `gitdir:`
//! file of a linked worktree, its `HEAD`, `commondir`, loose refs under `refs/` and
//! `packed-refs`. Anything unexpected (a reftable repository, SHA-256 object names, an
//! unreadable file) just leaves that observation out: observations are evidence, never required.
//!
//! [`Workspace`] is the port: production reads the process's working directory
//! ([`fs::ProcessWorkspace`]), tests inject a directory ([`fs::DirWorkspace`]) or a fixed
//! identity, and [`NoWorkspace`] records nothing.

pub mod fs;

use std::io;
use std::path::{Component, Path, PathBuf};

use workrail_spec::budget::{BoundedText, OBSERVATION_SHORT_STRING_MAX_BYTES};
use workrail_spec::closed::{Confidence, ObservationKey};
use workrail_spec::event::{GitSha1, ObservationRecorded, ObservationValue};
use workrail_spec::jcs::sha256;

/// What WorkRail found out about the git repository it runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitIdentity {
    /// The working tree's top-level directory (what `git rev-parse --show-toplevel` prints).
    pub repo_root: PathBuf,
    /// The checked-out branch (`refs/heads/<branch>`); `None` when HEAD is detached.
    pub branch: Option<String>,
    /// The commit HEAD points at; `None` on an unborn branch or when it cannot be resolved.
    pub head_sha: Option<String>,
}

/// Where WorkRail runs (the port for `observation_recorded`).
pub trait Workspace: Send + Sync + std::fmt::Debug {
    /// The git identity of the workspace now, or `None` outside a git repository.
    fn git_identity(&self) -> Option<GitIdentity>;
}

/// A workspace that is never inside a repository: nothing is observed.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoWorkspace;

impl Workspace for NoWorkspace {
    fn git_identity(&self) -> Option<GitIdentity> {
        None
    }
}

/// A workspace with a fixed identity (tests and harnesses).
#[derive(Debug, Clone)]
pub struct FixedWorkspace(pub Option<GitIdentity>);

impl Workspace for FixedWorkspace {
    fn git_identity(&self) -> Option<GitIdentity> {
        self.0.clone()
    }
}

/// The session-scoped observations of an identity, in key order: `git_branch` (skipped when
/// detached or over the 80-byte budget), `git_head_sha` (skipped unless a 40-hex SHA-1), and
/// `repo_root_hash`, all with confidence `high` (read from git's own files).
pub fn observations(identity: &GitIdentity) -> Vec<ObservationRecorded> {
    let mut out = Vec::new();
    let mut push = |key, value| {
        out.push(ObservationRecorded {
            key,
            value,
            confidence: Confidence::High,
        });
    };
    if let Some(branch) = identity
        .branch
        .as_deref()
        .filter(|b| !b.is_empty())
        .and_then(|b| BoundedText::<OBSERVATION_SHORT_STRING_MAX_BYTES>::new(b).ok())
    {
        push(
            ObservationKey::GitBranch,
            ObservationValue::ShortString { value: branch },
        );
    }
    if let Some(sha) = identity.head_sha.as_deref().and_then(GitSha1::parse) {
        push(
            ObservationKey::GitHeadSha,
            ObservationValue::GitSha1 { value: sha },
        );
    }
    push(
        ObservationKey::RepoRootHash,
        ObservationValue::Sha256 {
            value: sha256(&path_bytes(&identity.repo_root)),
        },
    );
    out
}

/// The bytes a path is hashed from: the OS bytes on Unix, UTF-8 (lossy) elsewhere.
fn path_bytes(path: &Path) -> Vec<u8> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        path.as_os_str().as_bytes().to_vec()
    }
    #[cfg(not(unix))]
    {
        path.to_string_lossy().into_owned().into_bytes()
    }
}

/// What kind of entry a path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    Missing,
    File,
    Dir,
}

/// The read-only file access git discovery needs (absolute paths).
pub trait WorkspaceFs {
    fn kind(&self, path: &Path) -> io::Result<EntryKind>;
    /// A whole file; `Ok(None)` when missing.
    fn read(&self, path: &Path) -> io::Result<Option<Vec<u8>>>;
}

/// How many symbolic refs discovery follows before giving up (git itself stops at 5).
const MAX_SYMREF_DEPTH: usize = 5;

/// Finds the repository containing `start` (an absolute, canonical directory) the way git
/// does: the nearest ancestor with a `.git` directory, or a `.git` file saying `gitdir: <path>`
/// (linked worktrees and submodules). `None` outside a repository.
pub fn discover(fs: &dyn WorkspaceFs, start: &Path) -> Option<GitIdentity> {
    for dir in start.ancestors() {
        let dot_git = dir.join(".git");
        let git_dir = match fs.kind(&dot_git).ok()? {
            EntryKind::Missing => continue,
            EntryKind::Dir => dot_git,
            EntryKind::File => {
                let text = String::from_utf8(fs.read(&dot_git).ok()??).ok()?;
                let target = text.trim().strip_prefix("gitdir:")?.trim();
                dir.join(target)
            }
        };
        let Some(head) = read_text(fs, &git_dir.join("HEAD")) else {
            // Not a usable git directory: keep looking upwards, as git does.
            continue;
        };
        let common_dir = read_text(fs, &git_dir.join("commondir"))
            .map_or_else(|| git_dir.clone(), |c| git_dir.join(c));
        let repo = Repo {
            fs,
            git_dir: &git_dir,
            common_dir: &common_dir,
        };
        let (branch, head_sha) = match head.strip_prefix("ref:") {
            Some(target) => {
                let target = target.trim();
                (
                    target.strip_prefix("refs/heads/").map(str::to_owned),
                    repo.resolve(target, 0),
                )
            }
            None => (None, is_sha1(&head).then_some(head)),
        };
        return Some(GitIdentity {
            repo_root: dir.to_path_buf(),
            branch,
            head_sha,
        });
    }
    None
}

struct Repo<'a> {
    fs: &'a dyn WorkspaceFs,
    git_dir: &'a Path,
    common_dir: &'a Path,
}

impl Repo<'_> {
    /// The object a ref names: a loose ref file (possibly symbolic), else `packed-refs`.
    fn resolve(&self, refname: &str, depth: usize) -> Option<String> {
        if depth > MAX_SYMREF_DEPTH || !safe_refname(refname) {
            return None;
        }
        // Per-worktree refs live in the worktree's git dir, shared ones in the common dir.
        let per_worktree = refname == "HEAD"
            || ["refs/bisect/", "refs/worktree/", "refs/rewritten/"]
                .iter()
                .any(|p| refname.starts_with(p));
        let base = if per_worktree {
            self.git_dir
        } else {
            self.common_dir
        };
        if let Some(content) = read_text(self.fs, &base.join(refname)) {
            return match content.strip_prefix("ref:") {
                Some(next) => self.resolve(next.trim(), depth + 1),
                None => is_sha1(&content).then_some(content),
            };
        }
        let packed = read_text(self.fs, &self.common_dir.join("packed-refs"))?;
        packed
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with('^'))
            .filter_map(|l| l.split_once(' '))
            .find(|(_, name)| name.trim() == refname)
            .map(|(sha, _)| sha.to_owned())
            .filter(|sha| is_sha1(sha))
    }
}

/// A ref name that stays inside the git directory when joined to it.
fn safe_refname(name: &str) -> bool {
    (name == "HEAD" || name.starts_with("refs/"))
        && !name.contains('\\')
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

fn is_sha1(s: &str) -> bool {
    GitSha1::parse(s).is_some()
}

/// A small text file, trimmed; `None` when missing, unreadable or not UTF-8.
fn read_text(fs: &dyn WorkspaceFs, path: &Path) -> Option<String> {
    let bytes = fs.read(path).ok()??;
    String::from_utf8(bytes).ok().map(|s| s.trim().to_owned())
}

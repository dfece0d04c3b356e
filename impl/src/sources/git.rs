//! Workflows from git repositories (source kind `remote`, decision D178).
//!
//! `WORKRAIL_WORKFLOW_REPOS` (or the reference's `WORKFLOW_GIT_REPOS`) names repositories: a
//! comma-separated list of URLs, or a JSON array of `{url, branch?, path?}` (the reference's
//! `repositoryUrl` is read as `url`). Each is synced by the `git` program into a cache under the
//! data directory, on start and every few minutes, by a background thread: a tool call never
//! waits for the network, it reads the last synced copy.
//!
//! Cache layout, per repository (`<data dir>/cache/repos/<key>/`): `mirror.git` (a bare clone of
//! the branch), `trees/<commit>/` (the files of a synced commit, never changed once renamed into
//! place) and `state.json` (the commit served, when it was synced, the last sync's failure). A
//! sync that fails, a branch whose history was rewritten, or a repository that became
//! unreachable or unauthorized leaves the last good copy served, and the source reports the
//! problem (named repository, what failed, what to do) beside its workflows.
//!
//! Tokens come from the environment per host, as the reference reads them (`GITHUB_TOKEN`,
//! `GITLAB_TOKEN`, `BITBUCKET_TOKEN`, `GIT_<HOST>_TOKEN`, then `WORKFLOW_GIT_AUTH_TOKEN` or
//! `GIT_TOKEN`), and reach `git` only through its environment (`GIT_CONFIG_*`): never on a
//! command line other users can read, never in the cache's git config, never in a log or a
//! message.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use workrail_spec::closed::WorkflowSourceKind;

use super::fs::DirSource;
use super::{SourceDocument, SourceIoError, WorkflowSource};

/// The repositories to load workflows from.
pub const REPOS_ENV: &str = "WORKRAIL_WORKFLOW_REPOS";
/// The reference implementation's name for [`REPOS_ENV`], accepted as an alias.
pub const REPOS_ALIAS_ENV: &str = "WORKFLOW_GIT_REPOS";
/// Minutes between two syncs (default [`DEFAULT_SYNC_MINUTES`]).
pub const SYNC_MINUTES_ENV: &str = "WORKRAIL_WORKFLOW_REPOS_SYNC_MINUTES";
/// The reference implementation's name for [`SYNC_MINUTES_ENV`], accepted as an alias.
pub const SYNC_ALIAS_ENV: &str = "WORKFLOW_GIT_SYNC_INTERVAL";
/// The default minutes between two syncs.
pub const DEFAULT_SYNC_MINUTES: u64 = 5;
/// How long one `git` command may run before it is stopped (a hung server must not pin a sync
/// thread forever).
const GIT_TIMEOUT: Duration = Duration::from_secs(120);

/// One configured repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoSpec {
    pub url: String,
    /// `None`: the remote's default branch.
    pub branch: Option<String>,
    /// The directory inside the repository that holds the workflow files (default: the root).
    pub path: Option<String>,
    /// A short name, from the URL: `repo/<name>/...` source refs and messages use it.
    pub name: String,
}

impl RepoSpec {
    /// The cache directory name: a digest of what the repository is.
    pub fn key(&self) -> String {
        let text = format!(
            "{}\n{}\n{}",
            self.url,
            self.branch.as_deref().unwrap_or(""),
            self.path.as_deref().unwrap_or("")
        );
        let digest = Sha256::digest(text.as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("{}-{}", self.name, &hex[..16])
    }

    /// The URL with any user info removed, for messages.
    pub fn shown_url(&self) -> String {
        match self.url.split_once("://") {
            Some((scheme, rest)) => match rest.split_once('@') {
                Some((_, host)) if !rest.split('/').next().unwrap_or("").is_empty() => {
                    format!("{scheme}://{host}")
                }
                _ => self.url.clone(),
            },
            None => self.url.clone(),
        }
    }
}

/// Parses [`REPOS_ENV`]: a JSON array, or comma-separated URLs.
pub fn parse_repos(value: &str) -> Result<Vec<RepoSpec>, String> {
    let value = value.trim();
    let mut specs = Vec::new();
    if value.starts_with('[') {
        let items: Vec<Value> = serde_json::from_str(value).map_err(|e| {
            format!("{REPOS_ENV} is not a valid JSON array ({e}); write it as e.g. [{{\"url\": \"https://git.example.com/team/workflows.git\", \"branch\": \"main\"}}] or as comma-separated URLs.")
        })?;
        for (i, item) in items.iter().enumerate() {
            let Some(object) = item.as_object() else {
                return Err(format!(
                    "{REPOS_ENV}[{i}] is not an object; write {{\"url\": \"...\", \"branch\": \"...\", \"path\": \"...\"}}."
                ));
            };
            for key in object.keys() {
                if !matches!(
                    key.as_str(),
                    "url"
                        | "repositoryUrl"
                        | "branch"
                        | "path"
                        | "name"
                        | "authToken"
                        | "syncInterval"
                        | "localPath"
                ) {
                    return Err(format!(
                        "{REPOS_ENV}[{i}] has an unknown field `{key}`; the fields are `url`, `branch` and `path` (the directory inside the repository)."
                    ));
                }
            }
            if object.contains_key("authToken") {
                return Err(format!(
                    "{REPOS_ENV}[{i}] carries `authToken`: a token in a configuration value ends up in client configs and process listings. Remove it and set the host's token variable instead (GITHUB_TOKEN, GITLAB_TOKEN, BITBUCKET_TOKEN, GIT_<HOST>_TOKEN or WORKFLOW_GIT_AUTH_TOKEN)."
                ));
            }
            let text = |key: &str| object.get(key).and_then(Value::as_str).map(str::to_owned);
            let Some(url) = text("url").or_else(|| text("repositoryUrl")) else {
                return Err(format!("{REPOS_ENV}[{i}] has no `url`."));
            };
            specs.push(spec(&url, text("branch"), text("path"), text("name"))?);
        }
    } else {
        for url in value.split(',').map(str::trim).filter(|u| !u.is_empty()) {
            specs.push(spec(url, None, None, None)?);
        }
    }
    // Two repositories with one name get distinct names, in order.
    for i in 0..specs.len() {
        let taken = specs[..i]
            .iter()
            .filter(|s| s.name == specs[i].name)
            .count();
        if taken > 0 {
            specs[i].name = format!("{}-{}", specs[i].name, taken + 1);
        }
    }
    Ok(specs)
}

fn spec(
    url: &str,
    branch: Option<String>,
    path: Option<String>,
    name: Option<String>,
) -> Result<RepoSpec, String> {
    if url.starts_with('-') || url.chars().any(char::is_control) {
        return Err(format!(
            "{REPOS_ENV}: `{url}` is not a repository URL; write e.g. https://git.example.com/team/workflows.git."
        ));
    }
    if let Some(branch) = &branch
        && (branch.starts_with('-') || branch.is_empty() || branch.contains(".."))
    {
        return Err(format!(
            "{REPOS_ENV}: branch `{branch}` of {url} is not a branch name."
        ));
    }
    if let Some(path) = &path
        && (path.starts_with('/') || path.split('/').any(|p| p == ".."))
    {
        return Err(format!(
            "{REPOS_ENV}: path `{path}` of {url} must be a directory inside the repository (relative, without `..`)."
        ));
    }
    let derived = url
        .trim_end_matches('/')
        .rsplit(['/', ':'])
        .next()
        .unwrap_or("repo")
        .trim_end_matches(".git")
        .to_ascii_lowercase();
    let name: String = name
        .unwrap_or(derived)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    Ok(RepoSpec {
        url: url.to_owned(),
        branch,
        path: path
            .map(|p| p.trim_matches('/').to_owned())
            .filter(|p| !p.is_empty()),
        name: if name.is_empty() { "repo".into() } else { name },
    })
}

/// The token for `url` from `env`, as the reference resolves it; SSH URLs use SSH keys.
pub fn auth_token(url: &str, env: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    if url.starts_with("git@") || url.starts_with("ssh://") || url.starts_with("file://") {
        return None;
    }
    let host = url
        .split_once("://")
        .map(|(_, rest)| rest)
        .unwrap_or(url)
        .split(['/', ':'])
        .next()
        .unwrap_or("")
        .rsplit('@')
        .next()
        .unwrap_or("")
        .to_ascii_lowercase();
    let named = if host.contains("github.com") {
        env("GITHUB_TOKEN")
    } else if host.contains("gitlab.com") {
        env("GITLAB_TOKEN")
    } else if host.contains("bitbucket.org") {
        env("BITBUCKET_TOKEN")
    } else if host.is_empty() {
        None
    } else {
        env(&format!(
            "GIT_{}_TOKEN",
            host.replace(['.', '-'], "_").to_ascii_uppercase()
        ))
    };
    named
        .or_else(|| env("WORKFLOW_GIT_AUTH_TOKEN"))
        .or_else(|| env("GIT_TOKEN"))
        .filter(|t| !t.is_empty())
}

/// What the cache serves for one repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct RepoState {
    /// The commit whose files are served (`trees/<commit>`), if one was ever synced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// When that commit was synced (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synced_at: Option<u64>,
    /// The last sync's failure, when the last sync failed (the commit above is still served).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When the last sync was tried (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tried_at: Option<u64>,
}

/// The repository cache under a data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoCache {
    root: PathBuf,
}

impl RepoCache {
    /// The cache of the data directory `data_dir`.
    pub fn of_data_dir(data_dir: &Path) -> Self {
        Self {
            root: data_dir.join("cache").join("repos"),
        }
    }

    fn dir(&self, spec: &RepoSpec) -> PathBuf {
        self.root.join(spec.key())
    }

    /// What is served for `spec` now.
    pub fn state(&self, spec: &RepoSpec) -> RepoState {
        std::fs::read(self.dir(spec).join("state.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    /// The directory of workflow files served for `spec` (inside the synced tree).
    pub fn served_dir(&self, spec: &RepoSpec) -> Option<(PathBuf, String)> {
        let commit = self.state(spec).commit?;
        let mut dir = self.dir(spec).join("trees").join(&commit);
        if let Some(path) = &spec.path {
            dir = dir.join(path);
        }
        Some((dir, commit))
    }

    fn write_state(&self, spec: &RepoSpec, state: &RepoState) -> Result<(), String> {
        let dir = self.dir(spec);
        let bytes = serde_json::to_vec_pretty(state).map_err(|e| e.to_string())?;
        let tmp = dir.join(crate::store::layout::temp_file_name("state.json"));
        std::fs::write(&tmp, bytes)
            .and_then(|()| std::fs::rename(&tmp, dir.join("state.json")))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                format!("cannot write {}: {e}", dir.join("state.json").display())
            })
    }

    /// Syncs `spec` now: fetches the branch, and serves its newest commit unless the fetch
    /// failed or the branch's history was rewritten (then the last good copy stays served and
    /// the failure is recorded). Several processes may sync one cache: a lock serializes them.
    pub fn sync(
        &self,
        spec: &RepoSpec,
        env: &dyn Fn(&str) -> Option<String>,
        now: u64,
    ) -> RepoState {
        let dir = self.dir(spec);
        let result = std::fs::create_dir_all(dir.join("trees"))
            .map_err(|e| format!("cannot create the cache {}: {e}", dir.display()))
            .and_then(|()| {
                let lock = std::fs::File::create(dir.join(".lock"))
                    .map_err(|e| format!("cannot create the cache lock: {e}"))?;
                // Another process syncing this repository: its result is as good as ours.
                if lock.try_lock().is_err() {
                    return Ok(None);
                }
                self.sync_locked(spec, env, now).map(Some)
            });
        let mut state = self.state(spec);
        state.tried_at = Some(now);
        match result {
            Ok(None) => return state,
            Ok(Some(commit)) => {
                if state.commit.as_ref() != Some(&commit) {
                    state.commit = Some(commit);
                    state.synced_at = Some(now);
                }
                state.last_error = None;
            }
            Err(e) => state.last_error = Some(e),
        }
        if let Err(e) = self.write_state(spec, &state) {
            state.last_error = Some(e);
        }
        if state.last_error.is_none() {
            self.remove_old_trees(spec, state.commit.as_deref());
        }
        state
    }

    fn sync_locked(
        &self,
        spec: &RepoSpec,
        env: &dyn Fn(&str) -> Option<String>,
        _now: u64,
    ) -> Result<String, String> {
        let dir = self.dir(spec);
        let mirror = dir.join("mirror.git");
        let token = auth_token(&spec.url, env);
        let git = |args: &[&str]| run_git(args, token.as_deref(), &spec.url);
        if !mirror.join("HEAD").exists() {
            let tmp = dir.join(crate::store::layout::temp_file_name("mirror.git"));
            let tmp_s = tmp.to_string_lossy().into_owned();
            let mut args = vec!["clone", "--bare", "--single-branch", "--no-tags"];
            if let Some(branch) = &spec.branch {
                args.extend(["--branch", branch.as_str()]);
            }
            args.extend(["--", spec.url.as_str(), tmp_s.as_str()]);
            if let Err(e) = git(&args) {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(e);
            }
            std::fs::rename(&tmp, &mirror).map_err(|e| {
                let _ = std::fs::remove_dir_all(&tmp);
                format!("cannot move the clone into the cache: {e}")
            })?;
        } else {
            let m = mirror.to_string_lossy().into_owned();
            let branch = match &spec.branch {
                Some(b) => b.clone(),
                None => git(&["--git-dir", &m, "symbolic-ref", "--short", "HEAD"])?
                    .trim()
                    .to_owned(),
            };
            let refspec = format!("+refs/heads/{branch}:refs/heads/{branch}");
            git(&[
                "--git-dir",
                &m,
                "fetch",
                "--no-tags",
                "--",
                &spec.url,
                &refspec,
            ])?;
        }
        let m = mirror.to_string_lossy().into_owned();
        let commit = git(&["--git-dir", &m, "rev-parse", "--verify", "HEAD^{commit}"])?
            .trim()
            .to_owned();
        if !commit.chars().all(|c| c.is_ascii_hexdigit()) || commit.len() < 40 {
            return Err(format!("git named an odd commit `{commit}`"));
        }
        // A rewritten branch (the served commit is no ancestor of the new one) is not followed
        // silently: the served copy stays until someone decides.
        if let Some(served) = self.state(spec).commit
            && served != commit
            && git(&[
                "--git-dir",
                &m,
                "merge-base",
                "--is-ancestor",
                &served,
                &commit,
            ])
            .is_err()
        {
            return Err(format!(
                "the history of {} was rewritten (commit {} is not an ancestor of {}); still serving {}. To follow the new history, delete {} and start WorkRail again.",
                spec.shown_url(),
                &served[..12],
                &commit[..12],
                &served[..12],
                dir.display()
            ));
        }
        let tree = dir.join("trees").join(&commit);
        if !tree.exists() {
            let tmp = dir
                .join("trees")
                .join(crate::store::layout::temp_file_name(&commit));
            std::fs::create_dir_all(&tmp)
                .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
            let t = tmp.to_string_lossy().into_owned();
            let checkout = git(&[
                "--git-dir",
                &m,
                "--work-tree",
                &t,
                "checkout",
                "-f",
                &commit,
                "--",
                ".",
            ]);
            if let Err(e) = checkout {
                let _ = std::fs::remove_dir_all(&tmp);
                return Err(e);
            }
            std::fs::rename(&tmp, &tree).map_err(|e| {
                let _ = std::fs::remove_dir_all(&tmp);
                format!("cannot move the checkout into the cache: {e}")
            })?;
        }
        Ok(commit)
    }

    /// Trees other than the served one and the one before it (a reader may still be listing
    /// it) are removed, best effort.
    fn remove_old_trees(&self, spec: &RepoSpec, keep: Option<&str>) {
        let trees = self.dir(spec).join("trees");
        let Ok(entries) = std::fs::read_dir(&trees) else {
            return;
        };
        let mut others: Vec<(std::time::SystemTime, PathBuf)> = entries
            .flatten()
            .filter(|e| Some(e.file_name().to_string_lossy().as_ref()) != keep)
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        others.sort();
        others.pop();
        for (_, path) in others {
            if let Err(e) = std::fs::remove_dir_all(&path) {
                tracing::debug!(
                    "an old workflow tree was not removed ({}): {e}",
                    path.display()
                );
            }
        }
    }
}

/// Runs `git` with no prompt, the token (if any) in its environment only, and a time bound.
/// Returns its stdout, or a message naming the repository and what to do (never the token).
fn run_git(args: &[&str], token: Option<&str>, url: &str) -> Result<String, String> {
    use base64::Engine as _;
    let mut command = Command::new("git");
    command
        .args(args)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_ASKPASS", "")
        .env("SSH_ASKPASS", "")
        .env("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(token) = token {
        let basic =
            base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{token}"));
        command
            .env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "http.extraHeader")
            .env(
                "GIT_CONFIG_VALUE_0",
                format!("Authorization: Basic {basic}"),
            );
    }
    let mut child = command.spawn().map_err(|e| {
        format!("cannot run `git` ({e}); install git and make sure it is on the PATH of WorkRail's process.")
    })?;
    let deadline = std::time::Instant::now() + GIT_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "git gave no answer from {url} within {} s; check that the server is reachable.",
                    GIT_TIMEOUT.as_secs()
                ));
            }
            Err(e) => return Err(format!("cannot wait for git: {e}")),
        }
    };
    let output = child
        .wait_with_output()
        .map_err(|e| format!("cannot read git's output: {e}"))?;
    if status.success() {
        return Ok(String::from_utf8_lossy(&output.stdout).into_owned());
    }
    let mut stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
    if let Some(token) = token {
        stderr = stderr.replace(token, "<token>");
    }
    let first = stderr.lines().last().unwrap_or("git failed").to_owned();
    let hint = if stderr.contains("Authentication failed")
        || stderr.contains("could not read Username")
        || stderr.contains("403")
        || stderr.contains("401")
    {
        "the repository refused the credentials: set the host's token variable (GITHUB_TOKEN, GITLAB_TOKEN, BITBUCKET_TOKEN, GIT_<HOST>_TOKEN or WORKFLOW_GIT_AUTH_TOKEN) for WorkRail's process"
    } else if stderr.contains("Remote branch") || stderr.contains("couldn't find remote ref") {
        "the branch does not exist there: fix `branch` in WORKRAIL_WORKFLOW_REPOS"
    } else {
        "check the URL in WORKRAIL_WORKFLOW_REPOS and that the server is reachable"
    };
    Err(format!("{first} ({hint})"))
}

/// The workflows of one synced repository.
#[derive(Debug, Clone)]
pub struct GitRepoSource {
    spec: RepoSpec,
    cache: RepoCache,
}

impl GitRepoSource {
    pub fn new(spec: RepoSpec, cache: RepoCache) -> Self {
        Self { spec, cache }
    }

    pub fn spec(&self) -> &RepoSpec {
        &self.spec
    }

    /// The label of its source refs: `repo/<name>@<commit, 12 hex>`, so a run's recorded source
    /// ref says which commit it pinned.
    fn label(commit: &str, name: &str) -> String {
        format!("repo/{name}@{}", &commit[..commit.len().min(12)])
    }

    /// The problem of the last sync, as a source error beside the served workflows.
    fn problem(&self, state: &RepoState) -> Option<SourceIoError> {
        let source_ref = format!("repo/{}", self.spec.name);
        match (&state.commit, &state.last_error) {
            (_, Some(error)) => Some(SourceIoError {
                source_ref,
                message: match &state.commit {
                    Some(commit) => format!(
                        "the last sync of {} failed: {error}. Still serving commit {} from the last good sync.",
                        self.spec.shown_url(),
                        &commit[..commit.len().min(12)]
                    ),
                    None => format!(
                        "{} was never synced: {error}. Its workflows are not available until a sync succeeds.",
                        self.spec.shown_url()
                    ),
                },
                path: None,
            }),
            (None, None) => Some(SourceIoError {
                source_ref,
                message: format!(
                    "{} is not synced yet: its workflows appear after the first sync (a few seconds after WorkRail starts; `workrail repos sync` syncs now).",
                    self.spec.shown_url()
                ),
                path: None,
            }),
            (Some(_), None) => None,
        }
    }
}

impl WorkflowSource for GitRepoSource {
    fn kind(&self) -> WorkflowSourceKind {
        WorkflowSourceKind::Remote
    }

    fn documents(&self) -> Vec<Result<SourceDocument, SourceIoError>> {
        let state = self.cache.state(&self.spec);
        let mut out = Vec::new();
        if let Some((dir, commit)) = self.cache.served_dir(&self.spec) {
            let source = DirSource::new(
                WorkflowSourceKind::Remote,
                dir,
                &Self::label(&commit, &self.spec.name),
            );
            out.extend(source.documents());
        }
        out.extend(self.problem(&state).map(Err));
        out
    }

    fn fingerprint(&self) -> Option<String> {
        let state = self.cache.state(&self.spec);
        Some(format!(
            "{}|{}",
            state.commit.unwrap_or_default(),
            state.last_error.unwrap_or_default()
        ))
    }
}

/// The minutes between syncs from `env` ([`SYNC_MINUTES_ENV`], else [`SYNC_ALIAS_ENV`]).
pub fn sync_interval(env: &dyn Fn(&str) -> Option<String>) -> Result<Duration, String> {
    let Some((name, value)) = env(SYNC_MINUTES_ENV)
        .map(|v| (SYNC_MINUTES_ENV, v))
        .or_else(|| env(SYNC_ALIAS_ENV).map(|v| (SYNC_ALIAS_ENV, v)))
    else {
        return Ok(Duration::from_secs(DEFAULT_SYNC_MINUTES * 60));
    };
    match value.trim().parse::<u64>() {
        Ok(minutes) if minutes > 0 => Ok(Duration::from_secs(minutes * 60)),
        _ => Err(format!(
            "{name}={value:?} is not a whole number of minutes above 0; set it to e.g. {DEFAULT_SYNC_MINUTES}."
        )),
    }
}

/// Syncs every repository once (in order), returning each one's state.
pub fn sync_all(
    specs: &[RepoSpec],
    cache: &RepoCache,
    env: &dyn Fn(&str) -> Option<String>,
) -> Vec<(RepoSpec, RepoState)> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    specs
        .iter()
        .map(|spec| (spec.clone(), cache.sync(spec, env, now)))
        .collect()
}

/// Starts the background thread that syncs `specs` now and then every `interval`, for the life
/// of the process. Tool calls never wait for it.
pub fn spawn_sync_thread(specs: Vec<RepoSpec>, cache: RepoCache, interval: Duration) {
    if specs.is_empty() {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("workrail-repo-sync".into())
        .spawn(move || {
            let env = |name: &str| std::env::var(name).ok();
            loop {
                for (spec, state) in sync_all(&specs, &cache, &env) {
                    match &state.last_error {
                        Some(error) => tracing::warn!(repo = %spec.name, "workflow repository sync failed: {error}"),
                        None => tracing::info!(repo = %spec.name, commit = ?state.commit, "workflow repository synced"),
                    }
                }
                std::thread::sleep(interval);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!("the workflow repository sync thread did not start: {e}");
    }
}

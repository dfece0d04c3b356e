//! Who may have written the data directory (decision D136). WorkRail refuses a data directory
//! that another local user could have written instead of trusting what it holds: sessions, the
//! config and, above all, the token signing key, whose holder can mint tokens WorkRail accepts.
//!
//! - The root must be owned by the effective user (root on a root-owned directory is fine);
//!   opening it for writing tightens it to 0700 (D52), a read-only open refuses a root that
//!   group or others may write.
//! - Every entry directly in the root (`sessions/`, `keys/`, `config/`, ...) must be owned by
//!   the effective user and not writable by group or others. With the root private from then
//!   on, nobody else can add or replace anything below it; what this cannot see is an entry
//!   deeper down planted while a top-level directory was open and tightened since.
//! - `keys/` and `keys/keyring.json` must be owned by the effective user, not a symbolic link,
//!   and carry no group or other permission bit at all: a key others could read is no secret.
//!
//! Each refusal names the path, the owner found and expected or the mode, and the command that
//! fixes it.

use std::io;
use std::path::{Path, PathBuf};

use serde_json::json;
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};

/// What `lstat` says about who may have written an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ownership {
    pub uid: u32,
    /// The permission bits (`mode & 0o777`).
    pub mode: u32,
    pub is_symlink: bool,
}

impl Ownership {
    #[cfg(unix)]
    pub fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            uid: meta.uid(),
            mode: meta.mode() & 0o777,
            is_symlink: meta.file_type().is_symlink(),
        }
    }
}

/// The effective user id of this process.
#[cfg(unix)]
pub fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// What makes an entry untrustworthy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// Another user owns it.
    Owner { found: u32, expected: u32 },
    /// Group or others may write it (plant entries in a directory, rewrite a file).
    Writable { mode: u32 },
    /// It holds the signing key, and group or others have some permission on it.
    Exposed { mode: u32 },
    /// The keyring or its directory is a symbolic link (its target is anyone's guess).
    Link,
}

/// What in the data directory a refusal is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The data directory itself.
    Root,
    /// An entry directly in it.
    Entry,
    /// `keys/`.
    KeysDir,
    /// `keys/keyring.json`.
    Keyring,
}

/// Why WorkRail does not use a data directory, with the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The data directory.
    pub data_dir: PathBuf,
    /// The entry refused (absolute, or as given).
    pub path: PathBuf,
    pub part: Part,
    pub problem: Problem,
}

/// A path as a shell command takes it: quoted unless it is plain.
fn shell(path: &Path) -> String {
    let text = path.display().to_string();
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+:@%,=".contains(c));
    if plain {
        text
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

impl Refusal {
    /// What is wrong and why WorkRail does not go on.
    pub fn message(&self) -> String {
        let path = self.path.display();
        let what = match self.part {
            Part::Root => format!("The WorkRail data directory {path}"),
            Part::Entry => format!("{path} in the WorkRail data directory"),
            Part::KeysDir => format!("The token signing key directory {path}"),
            Part::Keyring => format!("The token signing keyring {path}"),
        };
        let consequence = match self.part {
            Part::Keyring | Part::KeysDir => "so WorkRail does not use it to sign or verify tokens",
            Part::Root | Part::Entry => "so WorkRail does not use the data directory",
        };
        match self.problem {
            Problem::Owner { found, expected } => format!(
                "{what} is owned by uid {found}, not by this user (uid {expected}): that user controls what it holds (sessions, the token signing key), {consequence}."
            ),
            Problem::Writable { mode } => format!(
                "{what} is writable by other users (mode {mode:04o}): they could have planted sessions or a signing key in it, {consequence}."
            ),
            Problem::Exposed { mode } => {
                let could = if mode & 0o022 != 0 {
                    "read the signing key or put their own in its place"
                } else {
                    "read the signing key"
                };
                format!(
                    "{what} has mode {mode:04o}, open to group or others: they may have {could}, {consequence}."
                )
            }
            Problem::Link => format!(
                "{what} is a symbolic link: the signing key must be a file of this user's in the data directory, {consequence}."
            ),
        }
    }

    /// The exact command (or choice) that fixes it.
    pub fn fix(&self) -> String {
        let path = shell(&self.path);
        let root = shell(&self.data_dir);
        let elsewhere = "or set WORKRAIL_DATA_DIR (or --data-dir) to a directory of your own";
        match (self.part, self.problem) {
            (Part::Root, Problem::Owner { found, expected }) => format!(
                "If the directory is yours, give it to this user: `chown -R {expected} {root}` (as root); {elsewhere}, or run WorkRail as uid {found}."
            ),
            (Part::Entry, Problem::Owner { expected, .. }) => format!(
                "If everything in the data directory is yours, `chown -R {expected} {root}` (as root); otherwise move {path} away, {elsewhere}."
            ),
            (Part::Root | Part::Entry, _) => format!(
                "If everything in the data directory is yours, make it private: `chmod -R go-rwx {root}`; otherwise move {path} away, {elsewhere}."
            ),
            (Part::KeysDir, Problem::Owner { expected, .. }) => format!(
                "If you did not put it there, remove it (`rm -r {path}`): WorkRail then creates a new keyring; sessions stay intact, tokens issued before stop verifying and resume_session mints fresh ones. If it is yours, `chown -R {expected} {path}` (as root) and `chmod 700 {path}`."
            ),
            (Part::Keyring, Problem::Owner { expected, .. }) => format!(
                "If you did not put it there, remove it (`rm {path}`): WorkRail then creates a new keyring; sessions stay intact, tokens issued before stop verifying and resume_session mints fresh ones. If it is yours, `chown {expected} {path}` (as root) and `chmod 600 {path}`."
            ),
            (Part::KeysDir, Problem::Link) | (Part::Keyring, Problem::Link) => format!(
                "Replace the link {path} with a copy of what it points to, if that is yours, readable only by you; or remove it and WorkRail creates a new keyring (tokens issued before stop verifying; resume_session mints fresh ones)."
            ),
            (Part::KeysDir, _) => format!(
                "`chmod 700 {path}`; if other users could read the key, also run `workrail keys rotate` twice, so tokens signed with it stop verifying."
            ),
            (Part::Keyring, _) => format!(
                "`chmod 600 {path}`; if other users could read the key, also run `workrail keys rotate` twice, so tokens signed with it stop verifying."
            ),
        }
    }

    /// Error details: the path, the owners or the mode.
    pub fn details(&self) -> serde_json::Value {
        let mut details = json!({
            "problem": match self.problem {
                Problem::Owner { .. } => "not_owned_by_this_user",
                Problem::Writable { .. } => "writable_by_others",
                Problem::Exposed { .. } => "open_to_others",
                Problem::Link => "symbolic_link",
            },
            "path": self.path.display().to_string(),
            "dataDir": self.data_dir.display().to_string(),
        });
        match self.problem {
            Problem::Owner { found, expected } => {
                details["ownerUid"] = json!(found);
                details["expectedUid"] = json!(expected);
            }
            Problem::Writable { mode } | Problem::Exposed { mode } => {
                details["mode"] = json!(format!("{mode:04o}"));
            }
            Problem::Link => {}
        }
        details
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.message(), self.fix())
    }
}

/// Judges `keys/` or `keys/keyring.json`: this user's, not a link, nothing for group or others.
pub fn judge_secret(found: Ownership, euid: u32) -> Option<Problem> {
    if found.uid != euid {
        Some(Problem::Owner {
            found: found.uid,
            expected: euid,
        })
    } else if found.is_symlink {
        Some(Problem::Link)
    } else if found.mode & 0o077 != 0 {
        Some(Problem::Exposed { mode: found.mode })
    } else {
        None
    }
}

/// Judges the root or an entry in it: this user's, and nobody else may write it. A symbolic
/// link's own mode means nothing; its target is judged separately.
pub fn judge_entry(found: Ownership, euid: u32) -> Option<Problem> {
    if found.uid != euid {
        Some(Problem::Owner {
            found: found.uid,
            expected: euid,
        })
    } else if !found.is_symlink && found.mode & 0o022 != 0 {
        Some(Problem::Writable { mode: found.mode })
    } else {
        None
    }
}

/// Why a data directory could not be opened.
#[derive(Debug)]
pub enum DataDirError {
    /// Creating, tightening or reading it failed.
    Io(io::Error),
    /// Another user could have written it.
    Refused(Refusal),
}

impl From<io::Error> for DataDirError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

impl std::fmt::Display for DataDirError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(e) => e.fmt(f),
            Self::Refused(r) => r.fmt(f),
        }
    }
}

impl DataDirError {
    /// The error envelope: a refusal as [`super::StoreError::Refused`] says it, a failed
    /// filesystem operation naming `dir`.
    pub fn to_envelope(&self, dir: &Path) -> ErrorEnvelope {
        match self {
            Self::Refused(refusal) => {
                super::StoreError::Refused(Box::new(refusal.clone())).to_envelope(false)
            }
            Self::Io(e) => ErrorEnvelope::new(
                ErrorCode::StoreIoError,
                format!(
                    "cannot create or open the WorkRail data directory {}: {e}",
                    dir.display()
                ),
                "Set WORKRAIL_DATA_DIR (or --data-dir) to a directory this user can write.",
                Retry::NotRetryable,
            ),
        }
    }
}

/// Checks an existing data directory `root` (see the module docs). With `tighten`, a root with
/// group or other bits is made 0700 first (it is this user's); without, a root others may write
/// is refused and nothing changes. A missing root passes (there is nothing in it to trust).
#[cfg(unix)]
pub fn check_data_dir(root: &Path, tighten: bool) -> Result<(), DataDirError> {
    use std::os::unix::fs::PermissionsExt;
    let euid = effective_uid();
    let refuse = |path: PathBuf, part: Part, problem: Problem| {
        DataDirError::Refused(Refusal {
            data_dir: root.to_path_buf(),
            path,
            part,
            problem,
        })
    };
    // Followed: a data directory reached through a link is the directory it leads to.
    let meta = match std::fs::metadata(root) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound && !tighten => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    let found = Ownership::of(&meta);
    if found.uid != euid {
        return Err(refuse(
            root.to_path_buf(),
            Part::Root,
            Problem::Owner {
                found: found.uid,
                expected: euid,
            },
        ));
    }
    if found.mode & 0o077 != 0 {
        if tighten {
            std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))?;
        } else if let Some(problem) = judge_entry(found, euid) {
            return Err(refuse(root.to_path_buf(), Part::Root, problem));
        }
    }
    let mut entries: Vec<_> = std::fs::read_dir(root)?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for path in entries {
        let meta = match std::fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            // Removed meanwhile (a temp file renamed): nothing to judge.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e.into()),
        };
        let found = Ownership::of(&meta);
        if let Some(problem) = judge_entry(found, euid) {
            return Err(refuse(path, Part::Entry, problem));
        }
        if found.is_symlink {
            // A link of this user's to a directory elsewhere: the directory must pass too.
            match std::fs::metadata(&path) {
                Ok(target) => {
                    if let Some(problem) = judge_entry(Ownership::of(&target), euid) {
                        let shown = std::fs::canonicalize(&path).unwrap_or(path);
                        return Err(refuse(shown, Part::Entry, problem));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(())
}

/// Without Unix owners and modes there is nothing to check.
#[cfg(not(unix))]
pub fn check_data_dir(_root: &Path, _tighten: bool) -> Result<(), DataDirError> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(uid: u32, mode: u32) -> Ownership {
        Ownership {
            uid,
            mode,
            is_symlink: false,
        }
    }

    #[test]
    fn secrets_must_be_this_users_and_closed_to_everyone_else() {
        assert_eq!(judge_secret(owned(1000, 0o600), 1000), None);
        assert_eq!(judge_secret(owned(1000, 0o700), 1000), None);
        assert_eq!(
            judge_secret(owned(1000, 0o640), 1000),
            Some(Problem::Exposed { mode: 0o640 })
        );
        assert_eq!(
            judge_secret(owned(1000, 0o604), 1000),
            Some(Problem::Exposed { mode: 0o604 })
        );
        assert_eq!(
            judge_secret(owned(65534, 0o600), 0),
            Some(Problem::Owner {
                found: 65534,
                expected: 0
            })
        );
        let link = Ownership {
            is_symlink: true,
            ..owned(1000, 0o777)
        };
        assert_eq!(judge_secret(link, 1000), Some(Problem::Link));
    }

    #[test]
    fn entries_must_be_this_users_and_unwritable_by_others() {
        assert_eq!(judge_entry(owned(0, 0o755), 0), None);
        assert_eq!(
            judge_entry(owned(0, 0o775), 0),
            Some(Problem::Writable { mode: 0o775 })
        );
        assert!(
            judge_entry(owned(0, 0o777), 0).is_some(),
            "a world-writable directory is open to planting"
        );
        assert_eq!(
            judge_entry(owned(1000, 0o700), 0),
            Some(Problem::Owner {
                found: 1000,
                expected: 0
            })
        );
        let link = Ownership {
            is_symlink: true,
            ..owned(0, 0o777)
        };
        assert_eq!(
            judge_entry(link, 0),
            None,
            "a link's own mode means nothing"
        );
    }

    #[test]
    fn every_refusal_names_the_path_the_owners_or_mode_and_the_command() {
        let refusal = Refusal {
            data_dir: PathBuf::from("/home/a b/workrail"),
            path: PathBuf::from("/home/a b/workrail"),
            part: Part::Root,
            problem: Problem::Owner {
                found: 65534,
                expected: 1000,
            },
        };
        let text = refusal.to_string();
        assert!(text.contains("/home/a b/workrail"), "{text}");
        assert!(
            text.contains("uid 65534") && text.contains("uid 1000"),
            "{text}"
        );
        assert!(
            text.contains("`chown -R 1000 '/home/a b/workrail'`"),
            "{text}"
        );
        assert!(text.contains("WORKRAIL_DATA_DIR"), "{text}");
        let keyring = Refusal {
            data_dir: PathBuf::from("/d"),
            path: PathBuf::from("/d/keys/keyring.json"),
            part: Part::Keyring,
            problem: Problem::Exposed { mode: 0o644 },
        };
        let text = keyring.to_string();
        assert!(text.contains("0644"), "{text}");
        assert!(text.contains("`chmod 600 /d/keys/keyring.json`"), "{text}");
        assert_eq!(keyring.details()["mode"], "0644");
        assert_eq!(keyring.details()["problem"], "open_to_others");
    }
}

//! A real full disk under real `workrail mcp` servers (file store): the kill storm's servers,
//! clients and killer on a data directory that lives on a small tmpfs of its own, while a filler
//! fills that filesystem to `ENOSPC` at seeded moments, holds it full, and frees it again.
//! Writes fail wherever they happen to be: a segment half written, a manifest line torn, a
//! snapshot's temporary file, a lock file, a server's start-up.
//!
//! Beside the oracle of every scenario ([`super::finish`]), the full disk's own:
//!
//! - a call refused for want of space answers `STORE_IO_ERROR`, retryable, naming `ENOSPC` and
//!   saying to free disk space ([`disk_error_problem`]; otherwise `unclear_disk_errors`); the
//!   client sends the same call again until it is answered. An ack retried that way answers once
//!   (a replay of what had committed, or its commit now): the ledger's `duplicate_attempts` and
//!   `lost_events` judge it (`outage_retried_acks` counts them);
//! - a rehydrate reads and writes nothing, so a full disk never refuses it (`reads_refused`);
//! - once the disk is free for good, every client's latest node is acknowledged at the first try
//!   on the server that lived through the full disk (`not_continuable`): a failed write leaves a
//!   session healthy and continuable, never "corrupt by design".
//!
//! Mounting a tmpfs needs root: where the harness may not mount, [`disk_full`] says so in its
//! error, and the test skips with that message.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};

use super::{Answer, Config, Lab, Report, Rng, Slot, finish, killer, lock, slots, storm_client};

/// The size of the data directory's filesystem: far more than a run writes, so only the filler
/// fills it.
const DISK_BYTES: u64 = 512 * 1024 * 1024;
/// Free time before each fill and full time before each release, in milliseconds.
const FREE_MS: (u64, u64) = (300, 1200);
const FULL_MS: (u64, u64) = (100, 800);
/// No fill starts later than this before the driving ends.
const LAST_FILL_BEFORE_END: Duration = Duration::from_millis(1500);
/// How long a client waits before sending a call refused for want of space again.
const RETRY_PAUSE: Duration = Duration::from_millis(40);

/// A tmpfs mounted for one run, unmounted (lazily) when dropped.
#[derive(Debug)]
pub(super) struct Tmpfs {
    mount_point: PathBuf,
}

impl Tmpfs {
    fn mount(mount_point: &Path, bytes: u64) -> Result<Self, String> {
        std::fs::create_dir_all(mount_point)
            .map_err(|e| format!("cannot create {}: {e}", mount_point.display()))?;
        let output = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={bytes},mode=0700"),
                "tmpfs",
            ])
            .arg(mount_point)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "cannot mount a tmpfs (the disk-full storm needs root): {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(Self {
            mount_point: mount_point.to_owned(),
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.mount_point)
            .stderr(Stdio::null())
            .status();
    }
}

/// Why a `STORE_IO_ERROR` answered on a full disk is not the clear, retryable error a client
/// can act on: retryable, naming `ENOSPC` (in its details or its message) and saying to free
/// disk space. `None` when it is.
pub fn disk_error_problem(envelope: &ErrorEnvelope) -> Option<String> {
    let mut problems = Vec::new();
    if envelope.code != ErrorCode::StoreIoError {
        problems.push(format!("code {} (STORE_IO_ERROR expected)", envelope.code));
    }
    if matches!(envelope.retry, Retry::NotRetryable) {
        problems.push("marked not retryable".to_owned());
    }
    let errno = envelope
        .details
        .as_ref()
        .and_then(|d| d.get("errno"))
        .and_then(|e| e.as_str());
    let text = format!("{} {}", envelope.message, envelope.suggestion);
    if errno != Some("ENOSPC") && !text.contains("ENOSPC") && !text.contains("No space left") {
        problems.push("it does not say the disk is full (ENOSPC)".to_owned());
    }
    if !envelope.suggestion.to_lowercase().contains("disk space") {
        problems.push("the suggestion does not say to free disk space".to_owned());
    }
    (!problems.is_empty()).then(|| {
        format!(
            "{}: {:?} / {:?} / {}",
            problems.join(", "),
            envelope.message,
            envelope.suggestion,
            envelope.details.clone().unwrap_or_default()
        )
    })
}

impl Lab {
    /// Counts a storage error on a full disk; how long to wait before sending the same call
    /// again, or `None` (counted) when it is unclear or refused a read.
    pub(super) fn disk_error(
        &self,
        tool: &str,
        args: &serde_json::Value,
        envelope: &ErrorEnvelope,
    ) -> Option<Duration> {
        let mut book = self.book();
        if let Some(problem) = disk_error_problem(envelope) {
            book.report.unclear_disk_errors += 1;
            book.report
                .sample(format!("{tool} on a full disk: {problem}"));
            return None;
        }
        if tool == "continue_workflow" && args.get("ackToken").is_none() {
            book.report.reads_refused += 1;
            book.report.sample(format!(
                "a rehydrate was refused on a full disk: {}",
                envelope.message
            ));
            return None;
        }
        book.report.disk_full_errors += 1;
        Some(RETRY_PAUSE)
    }

    /// Moves the (still empty) data directory onto a tmpfs of its own and takes storage errors
    /// as the disk being full from now on. Also used by [`super::gc_storm_on_a_full_disk`].
    pub(super) fn put_data_on_a_tmpfs(&mut self) -> Result<(), String> {
        self.disk = Some(Tmpfs::mount(&self.dir.path().join("disk"), DISK_BYTES)?);
        std::fs::create_dir_all(self.data_dir())
            .map_err(|e| format!("cannot create the data directory on the tmpfs: {e}"))?;
        self.disk_faults = true;
        Ok(())
    }

    /// The filler's file, on the data directory's filesystem.
    fn ballast(&self) -> PathBuf {
        self.dir.path().join("disk").join("ballast")
    }
}

/// Scenario 5 (file store only): the kill storm on a disk filled and freed under it; see the
/// module docs.
pub fn disk_full(config: &Config) -> Result<Report, String> {
    if config.postgres.is_some() {
        return Err("disk_full runs on the file store only".to_owned());
    }
    let n = config.half();
    let mut lab = Lab::new(config, "disk_full", n)?;
    lab.put_data_on_a_tmpfs()?;
    let slots = slots(n, &lab)?;
    lab.start_driving(config.run_for);
    let mut rng = Rng::new(config.seed);
    kill_storm_beside(&lab, &slots, &mut rng, fill_and_free);
    // From here a storage error is a failure like in any scenario.
    lab.disk_faults = false;
    continue_after_the_faults(&lab, &slots, &mut rng);
    finish(&lab, &slots)
}

/// The kill storm with a fault thread beside it: `faults` fills the disk or injects errors, and
/// leaves them off before the driving ends; its own failure is reported as one. Also used by
/// [`super::io_errors`].
pub(super) fn kill_storm_beside(
    lab: &Lab,
    slots: &[Slot],
    rng: &mut Rng,
    faults: fn(&Lab, &mut Rng) -> Result<(), String>,
) {
    let faulted = std::thread::scope(|scope| {
        let mut fault_rng = rng.split();
        let fault_thread = scope.spawn(move || faults(lab, &mut fault_rng));
        let mut killer_rng = rng.split();
        scope.spawn(move || killer(lab, slots, &mut killer_rng));
        for (client, slot) in slots.iter().enumerate() {
            let mut rng = rng.split();
            scope.spawn(move || storm_client(lab, client, slot, &mut rng));
        }
        fault_thread.join()
    });
    match faulted {
        Ok(Ok(())) => {}
        Ok(Err(e)) => lab.other(e),
        Err(_) => lab.other("the fault thread panicked".to_owned()),
    }
}

/// The filler: fills the disk and frees it until shortly before the driving ends, and leaves
/// it free. Also used by [`super::gc_storm_on_a_full_disk`].
pub(super) fn fill_and_free(lab: &Lab, rng: &mut Rng) -> Result<(), String> {
    let millis =
        |rng: &mut Rng, (lo, hi): (u64, u64)| Duration::from_millis(lo + rng.below(hi - lo));
    let ballast = lab.ballast();
    loop {
        std::thread::sleep(millis(rng, FREE_MS));
        if lab.deadline.saturating_duration_since(Instant::now()) < LAST_FILL_BEFORE_END {
            return Ok(());
        }
        let written = fill(&ballast)?;
        {
            let mut book = lab.book();
            book.report.disk_fills += 1;
            book.report.disk_filled_bytes += written;
        }
        std::thread::sleep(millis(rng, FULL_MS));
        std::fs::remove_file(&ballast)
            .map_err(|e| format!("cannot remove the ballast {}: {e}", ballast.display()))?;
    }
}

/// Writes `path` until its filesystem says `ENOSPC` (large writes, then page-sized ones for
/// the last bytes); returns what it wrote.
fn fill(path: &Path) -> Result<u64, String> {
    let mut file = match File::create(path) {
        Ok(file) => file,
        // Already full to the last inode or page.
        Err(e) if e.raw_os_error() == Some(28) => return Ok(0),
        Err(e) => return Err(format!("cannot create the ballast {}: {e}", path.display())),
    };
    let chunk = vec![0u8; 4 << 20];
    let mut size = chunk.len();
    let mut written = 0u64;
    loop {
        match file.write(&chunk[..size]) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) if e.raw_os_error() == Some(28) => {
                if size <= 4096 {
                    break;
                }
                size /= 16;
            }
            Err(e) => return Err(format!("cannot write the ballast: {e}")),
        }
    }
    Ok(written)
}

/// With the faults over for good (the disk free, no error injected), each client's latest node
/// is acknowledged (or, when complete, rehydrated) on the server that lived through them, at the
/// first try. Also used by [`super::io_errors`].
pub(super) fn continue_after_the_faults(lab: &Lab, slots: &[Slot], rng: &mut Rng) {
    for (client, slot) in slots.iter().enumerate() {
        let token = lab
            .book()
            .latest
            .iter()
            .rev()
            .find(|((c, _), _)| *c == client)
            .map(|(_, token)| token.clone());
        let Some(token) = token else {
            continue;
        };
        let conn = lock(&slot.conn).clone();
        let Some(conn) = conn.filter(|c| !c.is_dead()) else {
            not_continuable(lab, format!("server {client} is not running at the end"));
            continue;
        };
        lab.book().report.calls += 1;
        let at = match conn.call("continue_workflow", &json!({"stateToken": token})) {
            Ok(Answer::Ok(result)) => lab.saw(client, result),
            Ok(Answer::Err(e)) => {
                not_continuable(
                    lab,
                    format!("a rehydrate answered {}: {}", e.code, e.message),
                );
                continue;
            }
            Err(e) => {
                not_continuable(lab, format!("a rehydrate got no answer: {e:?}"));
                continue;
            }
        };
        let Some(at) = at else {
            not_continuable(lab, "a rehydrate's answer was not understood".to_owned());
            continue;
        };
        if at.complete {
            continue;
        }
        let errors_before = lab.book().report.failures();
        if lab.ack(client, slot, &at, rng).is_none() || lab.book().report.failures() > errors_before
        {
            not_continuable(
                lab,
                format!("the ack of node {} of client {client} failed", at.node),
            );
        }
    }
}

fn not_continuable(lab: &Lab, text: String) {
    let mut book = lab.book();
    book.report.not_continuable += 1;
    book.report
        .sample(format!("after the faults ended: {text}"));
}

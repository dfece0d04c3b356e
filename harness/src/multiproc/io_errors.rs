//! Injected `EIO` under real `workrail mcp` servers (file store): the kill storm's servers,
//! clients and killer, each server loaded with a small preloaded library (`eio_shim.c`, built
//! with the system C compiler) that, while the harness holds its switch on, fails a share of the
//! reads, writes and syncs of files in the data directory with `EIO`, wherever they happen to
//! be: a manifest read during a load, a segment write, the fsync that would attest a commit, a
//! snapshot's temporary file. Pipes (the MCP stdio) and other files are never touched.
//!
//! Beside the oracle of every scenario ([`super::finish`]), the faults' own:
//!
//! - a call failed by an I/O error answers `STORE_IO_ERROR`, retryable, naming the error
//!   ([`io_error_problem`]; otherwise `unclear_io_errors`); a failed read never claims damage
//!   (the oracle's `false_corruption`); the client sends the same call again until it is
//!   answered, and an ack retried that way answers once (`outage_retried_acks` counts them);
//! - once the faults stop, every client's latest node is acknowledged at the first try
//!   (`not_continuable`): a failed read or write leaves a session healthy and continuable.
//!
//! Where no C compiler is found, [`io_errors`] says so in its error, and the test skips with
//! that message.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};

use super::disk_full::{continue_after_the_faults, kill_storm_beside};
use super::{Config, Lab, Report, Rng, finish, slots};

/// The preloaded library's source.
const SHIM_SOURCE: &str = include_str!("eio_shim.c");
/// Calls (read, write, sync) failed per thousand while the switch is on.
const PER_MILLE: u32 = 30;
/// Quiet time before each burst of errors and the burst's length, in milliseconds.
const QUIET_MS: (u64, u64) = (300, 1200);
const BURST_MS: (u64, u64) = (100, 800);
/// No burst starts later than this before the driving ends.
const LAST_BURST_BEFORE_END: Duration = Duration::from_millis(1500);
/// How long a client waits before sending a failed call again that may be retried at once, and
/// the longest wait an error may ask for.
const RETRY_PAUSE: Duration = Duration::from_millis(20);
const LONGEST_RETRY_WAIT: Duration = Duration::from_secs(3);

/// The preloaded library of one run and the switch that turns its faults on.
#[derive(Debug)]
pub(super) struct Shim {
    library: PathBuf,
    switch: PathBuf,
}

impl Shim {
    /// Builds the library into `dir` with `cc`.
    pub(super) fn build(dir: &Path) -> Result<Self, String> {
        let source = dir.join("eio_shim.c");
        let library = dir.join("eio_shim.so");
        std::fs::write(&source, SHIM_SOURCE)
            .map_err(|e| format!("cannot write {}: {e}", source.display()))?;
        let output = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&library)
            .arg(&source)
            .arg("-ldl")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run cc (the I/O error storm needs a C compiler): {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "cc failed to build the I/O error library: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(Self {
            library,
            switch: dir.join("eio-on"),
        })
    }

    /// The environment a server gets: the library, the data directory whose files fail, the
    /// switch and the rate.
    pub(super) fn environment(&self, data_dir: &Path) -> Vec<(&'static str, String)> {
        vec![
            ("LD_PRELOAD", self.library.display().to_string()),
            ("WORKRAIL_EIO_ROOT", data_dir.display().to_string()),
            ("WORKRAIL_EIO_SWITCH", self.switch.display().to_string()),
            ("WORKRAIL_EIO_PER_MILLE", PER_MILLE.to_string()),
        ]
    }

    pub(super) fn set(&self, on: bool) -> Result<(), String> {
        let result = if on {
            std::fs::write(&self.switch, b"on")
        } else {
            match std::fs::remove_file(&self.switch) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        };
        result.map_err(|e| format!("cannot switch the I/O errors {}: {e}", on_off(on)))
    }
}

fn on_off(on: bool) -> &'static str {
    if on { "on" } else { "off" }
}

/// Why a `STORE_IO_ERROR` answered while I/O errors are injected is not the clear, retryable
/// error a client can act on: retryable and naming the failure (`EIO`, or an earlier failure
/// that stopped the operation). `None` when it is.
pub fn io_error_problem(envelope: &ErrorEnvelope) -> Option<String> {
    let mut problems = Vec::new();
    if envelope.code != ErrorCode::StoreIoError {
        problems.push(format!("code {} (STORE_IO_ERROR expected)", envelope.code));
    }
    if matches!(envelope.retry, Retry::NotRetryable) {
        problems.push("marked not retryable".to_owned());
    }
    let details = envelope.details.clone().unwrap_or_default();
    let text = format!("{} {} {details}", envelope.message, envelope.suggestion);
    if !text.contains("EIO")
        && !text.contains("Input/output error")
        && !text.contains("earlier filesystem failure")
    {
        problems.push("it does not name the I/O error".to_owned());
    }
    if !envelope.suggestion.to_lowercase().contains("retry") {
        problems.push("the suggestion does not say to retry".to_owned());
    }
    (!problems.is_empty()).then(|| {
        format!(
            "{}: {:?} / {:?} / {details}",
            problems.join(", "),
            envelope.message,
            envelope.suggestion,
        )
    })
}

impl Lab {
    /// Counts a storage error while I/O errors are injected; how long to wait before sending
    /// the same call again, or `None` (counted) when it is unclear.
    pub(super) fn injected_io_error(
        &self,
        tool: &str,
        envelope: &ErrorEnvelope,
    ) -> Option<Duration> {
        let mut book = self.book();
        if let Some(problem) = io_error_problem(envelope) {
            book.report.unclear_io_errors += 1;
            book.report
                .sample(format!("{tool} under injected I/O errors: {problem}"));
            return None;
        }
        book.report.io_fault_errors += 1;
        Some(match envelope.retry {
            Retry::RetryableAfterMs { after_ms } => {
                Duration::from_millis(after_ms).min(LONGEST_RETRY_WAIT)
            }
            Retry::RetryableImmediate | Retry::NotRetryable => RETRY_PAUSE,
        })
    }
}

/// Scenario 6 (file store only): the kill storm with `EIO` injected into its servers; see the
/// module docs.
pub fn io_errors(config: &Config) -> Result<Report, String> {
    if config.postgres.is_some() {
        return Err("io_errors runs on the file store only".to_owned());
    }
    let n = config.half();
    let mut lab = Lab::new(config, "io_errors", n)?;
    lab.shim = Some(Shim::build(lab.dir.path())?);
    lab.io_faults = true;
    let slots = slots(n, &lab)?;
    lab.start_driving(config.run_for);
    let mut rng = Rng::new(config.seed);
    kill_storm_beside(&lab, &slots, &mut rng, bursts);
    if let Some(shim) = &lab.shim
        && let Err(e) = shim.set(false)
    {
        lab.other(e);
    }
    // From here a storage error is a failure like in any scenario.
    lab.io_faults = false;
    continue_after_the_faults(&lab, &slots, &mut rng);
    finish(&lab, &slots)
}

/// The fault thread: switches the errors on and off until shortly before the driving ends,
/// and leaves them off. Also used by [`super::gc_storm_with_io_errors`].
pub(super) fn bursts(lab: &Lab, rng: &mut Rng) -> Result<(), String> {
    let millis =
        |rng: &mut Rng, (lo, hi): (u64, u64)| Duration::from_millis(lo + rng.below(hi - lo));
    let Some(shim) = &lab.shim else {
        return Err("io_errors: no shim".to_owned());
    };
    loop {
        std::thread::sleep(millis(rng, QUIET_MS));
        if lab.deadline.saturating_duration_since(Instant::now()) < LAST_BURST_BEFORE_END {
            return Ok(());
        }
        shim.set(true)?;
        lab.book().report.io_bursts += 1;
        std::thread::sleep(millis(rng, BURST_MS));
        shim.set(false)?;
    }
}

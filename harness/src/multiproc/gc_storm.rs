//! Garbage collection under the kill storm: the storm's servers and clients (advance,
//! rehydrate, replay an old ack, fork, new runs; a killer `kill -9`ing servers), and beside them
//! a loop of `workrail gc --ttl-days 0` processes, one at a time and now and then two at once,
//! some of them `kill -9`ed at a random moment of their run. With a TTL of 0 every session that
//! nobody holds locked at that instant is expired, so sessions are deleted under the clients
//! that use them all the time. No deletion starts in the last 2 s of driving (at most a sixth of
//! it), so the sessions in use at the end are there to be judged.
//!
//! Beside the oracle of every scenario ([`super::finish`]), the deletions' own:
//!
//! - a call about a session that was deleted answers `SESSION_NOT_FOUND`; the client counts the
//!   session as deleted (`sessions_deleted_under_use`, allowed), forgets it and starts a new
//!   run. Any other error about a session that is gone at the end (`INTERNAL_ERROR`,
//!   `TOKEN_UNKNOWN_NODE`, `SESSION_CORRUPT`, `STORE_IO_ERROR`, …), `SESSION_NOT_FOUND` about a
//!   session that still exists, and an answer for a session after it answered
//!   `SESSION_NOT_FOUND` count in `gc_race_errors`. An error about a session that still exists
//!   counts in the usual buckets;
//! - every gc process the harness did not kill exits 0 (else `gc_failures`, with its stderr in
//!   `gc_samples`);
//! - afterwards every session directory is healthy or wholly absent: a directory of a session
//!   some response named that holds no committed truth (a deletion left it behind, or a server
//!   made it again), or one that is not healthy, is `half_deleted`. A directory without
//!   committed truth that no response named is a start killed before its first commit, allowed
//!   as in every scenario (`uncommitted_dirs`; it may hold an orphan segment). Directories named
//!   with a leading `.` are gc's own deletions in progress: allowed only when a gc was killed
//!   (`gc_leftovers`), and `workrail sessions` must not list what they hold;
//! - lost events and stale tokens are judged for the sessions that still exist; a few deleted
//!   sessions' latest stateTokens must answer exactly `SESSION_NOT_FOUND` on a fresh server,
//!   with a message that says the session no longer exists (`gc_race_errors`);
//! - a last `workrail gc --ttl-days 0` with every server stopped exits 0, out of safe mode, and
//!   leaves no session with committed truth (nobody holds a lock any more) and, on files, none of
//!   gc's own directories (each gc removes what a killed one left), else `gc_failures`.
//!
//! On PostgreSQL the gc processes run on a machine of their own (a data directory where gc keeps
//! its retention config) and the directories are rows: a session row some response named
//! without committed records, or event rows without a `segment_closed` record, is
//! `half_deleted`.
//!
//! [`gc_storm_with_a_buggy_deleter`] plants a bug the checks must catch: instead of `workrail
//! gc`, the harness itself deletes sessions in the old order (under the session's lock, the
//! manifest, then the whole directory, lock file included), which lets a server waiting for
//! the lock make the lock file, and so an empty session, again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use workrail_spec::error::ErrorCode;

use super::{
    Answer, Book, CLI_TIMEOUT, CliChild, Committed, Config, Conn, Lab, MAX_SAMPLES, PgTruth,
    Report, Rng, classify, files_under, finish, has_committed_record, killer, session_of, slots,
    storm_client,
};

/// Pause between gc rounds, in milliseconds.
const GC_PAUSE_MS: (u64, u64) = (20, 300);
/// One round in this many starts two gc processes at once.
const TWO_AT_ONCE: u64 = 5;
/// One gc in this many is killed at a random moment of its run.
const KILLED_GC: u64 = 3;
/// Pause between the planted deleter's deletions, in milliseconds.
const PLANTED_PAUSE_MS: (u64, u64) = (5, 60);
/// No deletion starts later than this before the driving ends (at most a sixth of the driving),
/// so the sessions in use at the end are still there for the checks of what they committed.
const QUIET_END: Duration = Duration::from_secs(2);
/// Deleted sessions whose latest stateToken is sent to a fresh server at the end.
const DELETED_TOKEN_CHECKS: usize = 8;
/// Samples kept of each error code about deleted sessions (of the deleted-token checks, and of
/// each kind of gc failure).
const SAMPLES_PER_CODE: usize = 3;

/// Who deletes sessions beside the clients.
#[derive(Debug, Clone, Copy)]
enum Deleter {
    /// `workrail gc --ttl-days 0` processes.
    Gc,
    /// The same, every process of the lab with `EIO` injected in bursts.
    GcUnderIoErrors,
    /// The same on a disk filled and freed under it.
    GcOnFullDisk,
    /// The harness, in the old order (planted).
    Planted,
}

/// Scenario 5: the kill storm with `workrail gc --ttl-days 0` deleting sessions under the
/// clients; see the module docs.
pub fn gc_storm(config: &Config) -> Result<Report, String> {
    storm(config, Deleter::Gc)
}

/// The gc storm with a deleter of the harness's own in place of `workrail gc` (file store only):
/// for a random session it takes the OS exclusive lock on `sessions/<id>/.lock`, waits a few
/// milliseconds, removes `manifest.jsonl`, then removes the whole directory while holding the
/// lock, and releases it. A server waiting for that lock makes the lock file again (an empty
/// session), so the checks must count failures.
pub fn gc_storm_with_a_buggy_deleter(config: &Config) -> Result<Report, String> {
    if config.postgres.is_some() {
        return Err("the planted deleter works on the file store only".to_owned());
    }
    storm(config, Deleter::Planted)
}

/// The gc storm with `EIO` injected into every process of it, the gc processes included (file
/// store only; see `io_errors.rs`): servers answer calls it fails with a clear retryable error
/// and clients send them again; a gc whose run it fails exits non-zero saying so, which is
/// allowed (`gc_io_refusals`), while everything the gc storm checks still holds, and the last gc
/// (faults off) deletes every session.
pub fn gc_storm_with_io_errors(config: &Config) -> Result<Report, String> {
    if config.postgres.is_some() {
        return Err("gc_storm_with_io_errors runs on the file store only".to_owned());
    }
    storm(config, Deleter::GcUnderIoErrors)
}

/// The gc storm on a disk filled to `ENOSPC` and freed under it (file store only; see
/// `disk_full.rs`): gc processes meet a full disk mid-deletion as the servers meet it
/// mid-commit. A gc may stop on it, saying so (`gc_io_refusals`, allowed), while everything
/// the gc storm checks still holds.
pub fn gc_storm_on_a_full_disk(config: &Config) -> Result<Report, String> {
    if config.postgres.is_some() {
        return Err("gc_storm_on_a_full_disk runs on the file store only".to_owned());
    }
    storm(config, Deleter::GcOnFullDisk)
}

fn storm(config: &Config, deleter: Deleter) -> Result<Report, String> {
    let n = config.half();
    let scenario = match deleter {
        Deleter::Gc => "gc_storm",
        Deleter::GcUnderIoErrors => "gc_storm_io",
        Deleter::GcOnFullDisk => "gc_storm_disk_full",
        Deleter::Planted => "gc_storm_planted",
    };
    let mut lab = Lab::new(config, scenario, n)?;
    lab.deletions = true;
    if matches!(deleter, Deleter::GcUnderIoErrors) {
        lab.shim = Some(super::io_errors::Shim::build(lab.dir.path())?);
        lab.io_faults = true;
    }
    if matches!(deleter, Deleter::GcOnFullDisk) {
        lab.put_data_on_a_tmpfs()?;
    }
    let slots = slots(n, &lab)?;
    lab.start_driving(config.run_for);
    let mut rng = Rng::new(config.seed);
    let last_deletion = lab.deadline - QUIET_END.min(config.run_for / 6);
    std::thread::scope(|scope| {
        let (lab, slots) = (&lab, &slots);
        let mut killer_rng = rng.split();
        scope.spawn(move || killer(lab, slots, &mut killer_rng));
        let mut deleter_rng = rng.split();
        scope.spawn(move || match deleter {
            Deleter::Gc | Deleter::GcUnderIoErrors | Deleter::GcOnFullDisk => {
                gc_loop(lab, last_deletion, &mut deleter_rng)
            }
            Deleter::Planted => planted_loop(lab, last_deletion, &mut deleter_rng),
        });
        if lab.disk.is_some() {
            let mut fault_rng = rng.split();
            scope.spawn(move || {
                if let Err(e) = super::disk_full::fill_and_free(lab, &mut fault_rng) {
                    lab.other(e);
                }
            });
        }
        if lab.shim.is_some() {
            let mut fault_rng = rng.split();
            scope.spawn(move || {
                if let Err(e) = super::io_errors::bursts(lab, &mut fault_rng) {
                    lab.other(e);
                }
            });
        }
        for (client, slot) in slots.iter().enumerate() {
            let mut rng = rng.split();
            scope.spawn(move || storm_client(lab, client, slot, &mut rng));
        }
    });
    if let Some(shim) = &lab.shim
        && let Err(e) = shim.set(false)
    {
        lab.other(e);
    }
    // From here a storage error is a failure like in any scenario.
    lab.io_faults = false;
    lab.disk_faults = false;
    let mut report = finish(&lab, &slots)?;
    last_gc(&lab, &mut report);
    Ok(report)
}

fn millis(rng: &mut Rng, (lo, hi): (u64, u64)) -> Duration {
    Duration::from_millis(lo + rng.below(hi - lo))
}

// -------------------------------------------------------------------------------------------
// The deleters
// -------------------------------------------------------------------------------------------

/// One gc process of a round.
#[derive(Debug)]
struct GcRun {
    child: CliChild,
    started: Instant,
    /// When the harness kills it, if it is still running then.
    kill_after: Option<Duration>,
}

/// Rounds of `workrail gc --ttl-days 0` until `last`: one process, or now and then two at once;
/// some killed at a random moment within the time a gc took lately.
fn gc_loop(lab: &Lab, last: Instant, rng: &mut Rng) {
    let dir = match lab.gc_dir() {
        Ok(dir) => dir,
        Err(e) => {
            lab.other(e);
            return;
        }
    };
    // How long a whole gc run took lately (a moving average): kills land within it.
    let mut typical = Duration::from_millis(40);
    // Under injected I/O faults, every other round's gc runs without them: a gc that meets a
    // fault refuses to delete (as it must), and one reading every session's segments meets
    // one in most rounds of a busy machine, so without these the storm may delete nothing
    // beside the faulted servers it is there to race.
    let mut round = 0u64;
    loop {
        round += 1;
        let pause = millis(rng, GC_PAUSE_MS);
        std::thread::sleep(pause.min(last.saturating_duration_since(Instant::now())));
        if Instant::now() >= last {
            break;
        }
        let at_once = if rng.below(TWO_AT_ONCE) == 0 { 2 } else { 1 };
        let mut runs = Vec::new();
        for _ in 0..at_once {
            let window = typical.as_micros() as u64 * 5 / 4;
            let kill_after =
                (rng.below(KILLED_GC) == 0).then(|| Duration::from_micros(rng.below(window + 1)));
            match lab.spawn_cli_with(&dir, &["gc", "--ttl-days", "0"], round.is_multiple_of(2)) {
                Ok(child) => runs.push(GcRun {
                    child,
                    started: Instant::now(),
                    kill_after,
                }),
                Err(e) => lab.other(e),
            }
        }
        lab.book().report.gc_runs += runs.len() as u64;
        wait_for_gc(lab, runs, &mut typical);
    }
}

/// Waits for the runs of one round, killing each chosen one at its moment, and judges them.
fn wait_for_gc(lab: &Lab, mut runs: Vec<GcRun>, typical: &mut Duration) {
    while !runs.is_empty() {
        let mut running = Vec::new();
        for mut run in runs {
            let took = run.started.elapsed();
            match run.child.exited() {
                Ok(Some(status)) => {
                    let output = run.child.output(status.success());
                    if status.success() {
                        *typical = (*typical * 3 + took) / 4;
                        lab.book().report.gc_deleted += deleted_count(&output.stdout);
                    } else if (lab.io_faults && names_an_io_error(&output.stderr))
                        || (lab.disk_faults && names_a_full_disk(&output.stderr))
                    {
                        lab.book().report.gc_io_refusals += 1;
                    } else {
                        let mut book = lab.book();
                        book.report.gc_failures += 1;
                        gc_failure_sample(
                            &mut book.report,
                            format!(
                                "workrail gc exited with {status} after {} ms: {}",
                                took.as_millis(),
                                gc_problem(&output.stdout, &output.stderr)
                            ),
                        );
                    }
                }
                Ok(None) if run.kill_after.is_some_and(|at| took >= at) => {
                    run.child.kill();
                    let _ = run.child.output(false);
                    lab.book().report.gc_killed += 1;
                }
                Ok(None) if took >= CLI_TIMEOUT => {
                    run.child.kill();
                    let output = run.child.output(false);
                    let mut book = lab.book();
                    book.report.gc_failures += 1;
                    gc_failure_sample(
                        &mut book.report,
                        format!(
                            "workrail gc ran longer than {CLI_TIMEOUT:?}: {}",
                            gc_problem(&output.stdout, &output.stderr)
                        ),
                    );
                }
                Ok(None) => running.push(run),
                Err(e) => lab.other(e),
            }
        }
        runs = running;
        if !runs.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Whether a failed gc's stderr says an injected I/O error stopped it (its safe mode or its
/// error names `EIO`) and passes no verdict of damage on anything.
fn names_an_io_error(stderr: &str) -> bool {
    (stderr.contains("Input/output error") || stderr.contains("os error 5"))
        && !["corrupt", "damaged", "missing"]
            .iter()
            .any(|verdict| stderr.contains(verdict))
}

/// Whether a failed gc's stderr says a full disk stopped it and passes no verdict of damage.
fn names_a_full_disk(stderr: &str) -> bool {
    (stderr.contains("No space left") || stderr.contains("ENOSPC"))
        && !["corrupt", "damaged", "missing"]
            .iter()
            .any(|verdict| stderr.contains(verdict))
}

/// Keeps a gc failure's sample unless [`SAMPLES_PER_CODE`] of its kind (the same text but for
/// numbers and session ids) are kept already: a gc in safe mode stays there and says so again.
fn gc_failure_sample(report: &mut Report, text: String) {
    fn kind(text: &str) -> String {
        text.split_whitespace()
            .map(|w| if w.contains("sess_") { "sess_" } else { w })
            .flat_map(|w| w.chars().filter(|c| !c.is_ascii_digit()))
            .collect()
    }
    let this = kind(&text);
    let same = report.gc_samples.iter().filter(|s| kind(s) == this).count();
    if same < SAMPLES_PER_CODE {
        report.gc_sample(text);
    }
}

/// `sessions deleted: N` of a gc report.
fn deleted_count(stdout: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("sessions deleted: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// What a failed gc said: its stderr without the warnings of an ordinary run, and its report's
/// first line when that says safe mode.
fn gc_problem(stdout: &str, stderr: &str) -> String {
    let ordinary = [
        "warning[session_locked]",
        "warning[session_changed]",
        "warning[sweep_skipped]",
    ];
    let mut lines: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.trim().is_empty() && !ordinary.iter().any(|w| l.starts_with(w)))
        .collect();
    if let Some(first) = stdout.lines().next().filter(|l| l.contains("SAFE MODE")) {
        lines.insert(0, first);
    }
    let mut text = lines.join(" | ");
    if text.len() > 800 {
        let mut end = 800;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    if text.is_empty() {
        "(nothing on stderr)".to_owned()
    } else {
        text
    }
}

/// The planted deleter: a random session every few milliseconds until `last`, deleted in the
/// old order.
fn planted_loop(lab: &Lab, last: Instant, rng: &mut Rng) {
    let sessions_dir = lab.data_dir().join("sessions");
    loop {
        let pause = millis(rng, PLANTED_PAUSE_MS);
        std::thread::sleep(pause.min(last.saturating_duration_since(Instant::now())));
        if Instant::now() >= last {
            break;
        }
        let names: Vec<String> = std::fs::read_dir(&sessions_dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|name| name.starts_with("sess_"))
                    .collect()
            })
            .unwrap_or_default();
        let Some(name) = rng.pick(&names) else {
            continue;
        };
        if delete_in_the_old_order(&sessions_dir.join(name), rng) {
            lab.book().report.planted_deletions += 1;
        }
    }
}

/// Planted: under the session's OS lock, the manifest goes, then the whole directory with the
/// lock file in it, and only then is the lock released. A server polling for the lock meanwhile
/// opens (creates) `.lock` again, in the directory being removed or in a new one.
fn delete_in_the_old_order(dir: &Path, rng: &mut Rng) -> bool {
    let Ok(lock) = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(".lock"))
    else {
        return false;
    };
    if lock.try_lock().is_err() {
        return false;
    }
    std::thread::sleep(Duration::from_millis(1 + rng.below(5)));
    let _ = std::fs::remove_file(dir.join("manifest.jsonl"));
    let _ = std::fs::remove_dir_all(dir);
    drop(lock);
    true
}

// -------------------------------------------------------------------------------------------
// The checks
// -------------------------------------------------------------------------------------------

impl Lab {
    /// Where gc runs: the data directory, or on PostgreSQL a machine of its own (gc keeps its
    /// retention config there).
    pub(super) fn gc_data_dir(&self) -> PathBuf {
        match self.postgres {
            Some(_) => self.dir.path().join("machines").join("gc"),
            None => self.data_dir(),
        }
    }

    /// [`Lab::gc_data_dir`], created.
    fn gc_dir(&self) -> Result<PathBuf, String> {
        let dir = self.gc_data_dir();
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(dir)
    }

    /// An error about `session` while sessions are being deleted: its client gives up on the
    /// session; `SESSION_NOT_FOUND` says it was deleted (allowed), anything else is judged at
    /// the end by whether the session still exists.
    pub(super) fn failed_on_session(
        &self,
        what: &str,
        session: &str,
        code: ErrorCode,
        message: &str,
    ) {
        let text = format!("{what}: {code}: {message}");
        let mut book = self.book();
        if book.dropped.insert(session.to_owned()) {
            // Its acks are replayed no more.
            for sent in book.sent_acks.values_mut() {
                sent.retain(|args| {
                    args["ackToken"].as_str().and_then(session_of).as_deref() != Some(session)
                });
            }
        }
        if code == ErrorCode::SessionNotFound {
            if book.gone.insert(session.to_owned()) {
                book.report.sessions_deleted_under_use += 1;
                if book.report.deleted_samples.len() < MAX_SAMPLES {
                    book.report.deleted_samples.push(text);
                }
            }
        } else {
            book.session_errors.push((session.to_owned(), code, text));
        }
    }

    /// What is left of a session without committed truth, for a sample.
    pub(super) fn remains_of(&self, session: &str, pg: Option<&PgTruth>) -> String {
        if let Some(pg) = pg {
            return pg.remains_of(session);
        }
        let dir = self.data_dir().join("sessions").join(session);
        let mut files = Vec::new();
        files_under(&dir, &mut files);
        let mut names: Vec<String> = files
            .iter()
            .filter_map(|f| f.strip_prefix(&dir).ok())
            .map(|f| f.to_string_lossy().into_owned())
            .collect();
        names.sort();
        if names.is_empty() {
            "an empty directory".to_owned()
        } else {
            format!("a directory holding {}", names.join(", "))
        }
    }

    /// What deletions left outside the session directories: gc's own directories (a leading
    /// `.`) under `sessions/`, and on PostgreSQL events without a `segment_closed` record.
    pub(super) fn judge_leftovers(&self, book: &Book, pg: Option<&PgTruth>, report: &mut Report) {
        if let Some(pg) = pg {
            for session in pg.events_without_close() {
                // A session some response named is judged with the sessions.
                if !book.nodes.contains_key(&session) {
                    report.half_deleted += 1;
                    report.sample(format!(
                        "session {session} holds events without a segment_closed record: {}",
                        pg.remains_of(&session)
                    ));
                }
            }
            return;
        }
        let sessions_dir = self.data_dir().join("sessions");
        let leftovers = gc_directories(&sessions_dir);
        report.gc_leftovers = leftovers.len() as u64;
        if leftovers.is_empty() {
            return;
        }
        if report.gc_killed == 0 {
            report.half_deleted += leftovers.len() as u64;
            report.sample(format!(
                "no gc was killed, yet sessions/ holds gc's own directories {leftovers:?}"
            ));
        }
        // They hold no session: every session listed lives in a directory of its own.
        match self.cli(&["sessions", "--json"]) {
            Ok(out) if out.success => {
                let listed: Vec<Value> = serde_json::from_str(&out.stdout).unwrap_or_default();
                for row in &listed {
                    let Some(id) = row["sessionId"].as_str() else {
                        continue;
                    };
                    if !sessions_dir.join(id).is_dir() {
                        report.half_deleted += 1;
                        report.sample(format!(
                            "workrail sessions lists {id}, which has no directory of its own (gc's leftovers: {leftovers:?})"
                        ));
                    }
                }
            }
            Ok(out) => {
                report.other_errors += 1;
                report.sample(format!("workrail sessions failed: {}", out.stderr.trim()));
            }
            Err(e) => {
                report.other_errors += 1;
                report.sample(e);
            }
        }
    }
}

/// gc's own directories under `sessions/` (a leading `.`): deletions in progress, or left by a
/// killed gc.
fn gc_directories(sessions_dir: &Path) -> Vec<String> {
    std::fs::read_dir(sessions_dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with('.'))
                .collect()
        })
        .unwrap_or_default()
}

/// Whether an error message says the session no longer exists.
fn says_deleted(message: &str) -> bool {
    let text = message.to_lowercase();
    ["no longer exist", "deleted", "removed"]
        .iter()
        .any(|w| text.contains(w))
}

/// The latest stateTokens of a few deleted sessions, on a fresh server: exactly
/// `SESSION_NOT_FOUND`, saying the session no longer exists.
pub(super) fn check_deleted_tokens(check: &Conn, tokens: &[(String, String)], report: &mut Report) {
    let mut asked = HashSet::new();
    let mut failed = 0;
    for (session, token) in tokens {
        if asked.len() >= DELETED_TOKEN_CHECKS {
            break;
        }
        if !asked.insert(session.clone()) {
            continue;
        }
        let problem = match check.call("continue_workflow", &json!({"stateToken": token})) {
            Ok(Answer::Err(e)) if e.code == ErrorCode::SessionNotFound => (!says_deleted(
                &e.message,
            ))
            .then(|| {
                format!(
                    "SESSION_NOT_FOUND with a message that does not say it no longer exists: {}",
                    e.message
                )
            }),
            Ok(Answer::Err(e)) => Some(format!("{}: {}", e.code, e.message)),
            Ok(Answer::Ok(result)) => Some(format!(
                "an answer: {}",
                result["structuredContent"]["session"]
            )),
            Err(e) => Some(format!("{e:?}")),
        };
        if let Some(problem) = problem {
            report.gc_race_errors += 1;
            failed += 1;
            if failed > SAMPLES_PER_CODE {
                continue;
            }
            report.sample(format!(
                "the latest stateToken of deleted session {session} (SESSION_NOT_FOUND expected) answered {problem}"
            ));
        }
    }
}

/// Judges the errors about sessions by whether each session still exists at the end.
pub(super) fn judge_session_errors(
    book: &mut Book,
    committed: &HashMap<String, Committed>,
    report: &mut Report,
) {
    let mut gone: Vec<&String> = book.gone.iter().collect();
    gone.sort();
    for session in gone {
        if committed.contains_key(session) {
            report.gc_race_errors += 1;
            report.sample(format!(
                "session {session} answered SESSION_NOT_FOUND but still exists at the end"
            ));
        }
    }
    let errors = std::mem::take(&mut book.session_errors);
    let mut by_code: BTreeMap<String, u64> = BTreeMap::new();
    for (session, code, _) in &errors {
        if !committed.contains_key(session) {
            *by_code.entry(code.to_string()).or_default() += 1;
        }
    }
    if !by_code.is_empty() {
        report.sample(format!(
            "errors about deleted sessions (SESSION_NOT_FOUND expected), by code: {by_code:?}"
        ));
    }
    // A few samples of each code, so one frequent code does not hide the others.
    let mut sampled: HashMap<ErrorCode, usize> = HashMap::new();
    for (session, code, text) in errors {
        if committed.contains_key(&session) {
            classify(report, &mut book.corruption, Some(&session), code, text);
            continue;
        }
        report.gc_race_errors += 1;
        let seen = sampled.entry(code).or_default();
        *seen += 1;
        if *seen <= SAMPLES_PER_CODE {
            report.sample(format!("{text} (session {session} was deleted)"));
        }
    }
}

/// A last `workrail gc --ttl-days 0` with every server stopped: it exits 0, out of safe mode,
/// and deletes every session with committed truth (nobody holds a lock now).
fn last_gc(lab: &Lab, report: &mut Report) {
    let output = lab
        .gc_dir()
        .and_then(|dir| lab.spawn_cli(&dir, &["gc", "--ttl-days", "0"]))
        .and_then(|child| child.wait(CLI_TIMEOUT));
    let output = match output {
        Ok(output) => output,
        Err(e) => {
            report.gc_failures += 1;
            report.gc_samples.push(format!("the last gc: {e}"));
            return;
        }
    };
    let safe_mode = output
        .stdout
        .lines()
        .next()
        .is_some_and(|l| l.contains("SAFE MODE"));
    if !output.success || safe_mode {
        report.gc_failures += 1;
        report.gc_samples.push(format!(
            "the last gc (every server stopped) failed{}: {}",
            if safe_mode { " in safe mode" } else { "" },
            gc_problem(&output.stdout, &output.stderr)
        ));
        return;
    }
    report.gc_samples.push(format!(
        "the last gc (every server stopped): sessions deleted: {}",
        deleted_count(&output.stdout)
    ));
    let left: Vec<String> = match &lab.postgres {
        Some(target) => {
            let pg = PgTruth::new(target);
            pg.sessions()
                .into_iter()
                .filter(|s| pg.has_committed_record(s))
                .collect()
        }
        None => {
            let sessions_dir = lab.data_dir().join("sessions");
            std::fs::read_dir(&sessions_dir)
                .map(|entries| {
                    entries
                        .flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|name| {
                            name.starts_with("sess_")
                                && has_committed_record(&sessions_dir.join(name))
                        })
                        .collect()
                })
                .unwrap_or_default()
        }
    };
    if !left.is_empty() {
        report.gc_failures += 1;
        report.gc_samples.push(format!(
            "the last gc (every server stopped, TTL 0) left {} session(s) with committed truth: {:?}",
            left.len(),
            &left[..left.len().min(5)]
        ));
    }
    // Every gc removes what a killed gc left half deleted; the last one runs alone.
    if lab.postgres.is_none() {
        let leftovers = gc_directories(&lab.data_dir().join("sessions"));
        if !leftovers.is_empty() {
            report.gc_failures += 1;
            report.gc_samples.push(format!(
                "the last gc (every server stopped) left gc's own directories {leftovers:?}: a gc removes what a killed one left"
            ));
        }
    }
}

impl PgTruth {
    /// Sessions with event rows but no `segment_closed` record (an append is one transaction:
    /// never in a sound store).
    fn events_without_close(&self) -> Vec<String> {
        self.sql
            .rows(&format!(
                "SELECT DISTINCT e.session_id FROM \"{s}\".events e WHERE NOT EXISTS \
                 (SELECT 1 FROM \"{s}\".manifest m \
                  WHERE m.session_id = e.session_id AND m.kind = 'segment_closed') \
                 ORDER BY 1",
                s = self.schema
            ))
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect()
    }

    /// A session's rows, counted, for a sample.
    fn remains_of(&self, session: &str) -> String {
        if !session
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return "(an unexpected session id)".to_owned();
        }
        let rows = self.sql.rows(&format!(
            "SELECT (SELECT count(*) FROM \"{s}\".events WHERE session_id = '{session}'), \
                    (SELECT count(*) FROM \"{s}\".manifest WHERE session_id = '{session}')",
            s = self.schema
        ));
        format!(
            "a session row with {} event rows and {} manifest rows",
            rows[0].get::<_, i64>(0),
            rows[0].get::<_, i64>(1)
        )
    }
}

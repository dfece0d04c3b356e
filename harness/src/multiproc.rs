//! Real `workrail mcp` processes on one data directory, as users run them: one server per chat
//! window, several windows on the same data, and clients that kill their server on quit.
//!
//! Every scenario spawns the built binary ([`workrail_binary`]) several times on ONE temporary
//! data directory, drives it over MCP stdio with the plain three-step workflow
//! ([`fixture::LINEAR_ID`]; the storm clients also with a workflow in the 3.x language), stops,
//! and then judges the data with fresh processes.
//!
//! - [`race`]: N servers (default 8). Every client first calls `start_workflow` at the same
//!   instant on the empty data directory, and again halfway with a workflow nobody started yet,
//!   so the same new pinned workflow and root snapshot are written concurrently. Half of the
//!   clients then advance the SAME run (client 0's), every one holding that run's latest tokens
//!   (so they send the same ackToken at the same time: one commits, the others must get the
//!   recorded response), retrying on `SESSION_LOCKED`; the others advance their own runs. A
//!   completed run forks from an earlier node (rehydrate it, acknowledge its fresh attempt), so
//!   runs never run out of steps.
//! - [`readers`]: one writer advancing a run continuously while reader servers loop over a
//!   rehydrate with only a stateToken, `resume_session`, and the CLI's `workrail export` and
//!   `workrail inspect` as separate processes. A healthy session never exports as salvage, and
//!   every read sees every node committed before it started.
//! - [`kill_storm`]: servers each driving their own client (advance, rehydrate, replay an old
//!   ack, fork from an older node, now and then a new run) while a killer `kill -9`s a random
//!   server every 50–300 ms and starts a new one. A client whose server died mid-call sends the
//!   same call to the new server: a replay of a committed ack must return the recorded response,
//!   an uncommitted one commits now. Half the clients' first runs, and about half the later
//!   ones, are of a workflow in the WorkRail 3.x language ([`fixture::LANGUAGE_ID`], `language.rs`):
//!   started with a context array its `forEach` loop walks, and acknowledged with the notes and
//!   context each pending step asks for; an answer that strays from the workflow's control flow
//!   counts in `language_mismatches`.
//! - [`db_outage`] (PostgreSQL only, `db_outage.rs`): the kill storm's clients while the
//!   database server itself is killed and brought back under servers that keep running; calls
//!   during an outage must answer a clear retryable error and are sent again.
//! - [`disk_full`] (file store only, `disk_full.rs`): the kill storm on a data directory whose
//!   filesystem (a tmpfs of its own) is filled to `ENOSPC` and freed at seeded moments; calls
//!   refused for want of space must answer a clear retryable error and are sent again, and
//!   every session is continuable once the disk is free.
//! - [`io_errors`] (file store only, `io_errors.rs`): the kill storm with `EIO` injected into a
//!   share of its servers' reads, writes and syncs of data files in seeded bursts (a preloaded
//!   library); calls failed that way must answer a clear retryable error and are sent again,
//!   and every session is continuable once the bursts stop. [`gc_storm_with_io_errors`] does
//!   the same to the gc storm, its gc processes included, and [`gc_storm_on_a_full_disk`] runs
//!   the gc storm on the disk-full storm's filesystem.
//! - [`gc_storm`] (`gc_storm.rs`): the kill storm (its servers, clients and killer) while a loop
//!   of `workrail gc --ttl-days 0` processes, one at a time or now and then two at once, some of
//!   them `kill -9`ed mid-run, deletes every session nobody holds locked. A client whose session
//!   answers `SESSION_NOT_FOUND` forgets it and starts a new run.
//!   [`gc_storm_with_a_buggy_deleter`] plants a deleter of the harness's own (the old deletion
//!   order: manifest, then the directory with its lock file, under the lock) the checks must
//!   catch.
//!
//! **The oracle.** Every response a client receives goes into a [`Report`] ledger. After a
//! scenario, with every server stopped, a fresh `workrail inspect` judges each session's health,
//! the committed event log (the segments the manifest attests, read independently of the
//! server's loader) is compared with the ledger, every content-addressed object is hashed, and a
//! fresh server rehydrates every client's latest stateToken of every session. Counted:
//!
//! - `lost_events`: a node some response named, or an acknowledged attempt with its resulting
//!   node, missing from the committed log;
//! - `duplicate_attempts`: an attemptId recorded by more than one `advance_recorded`, or two
//!   responses to one ackToken naming different nodes;
//! - `replay_mismatches`: an ackToken answered twice with responses that differ in any byte;
//! - `false_corruption`: `SESSION_CORRUPT` / `STORE_CORRUPTION_DETECTED`, a non-healthy
//!   `inspect`, a salvage export or a skipped unhealthy session, seen while the session turns out
//!   healthy at the end;
//! - `store_io_errors`: `STORE_IO_ERROR` answers;
//! - `unhealthy_sessions`: sessions not `healthy` afterwards (a directory without committed
//!   truth, left by a start killed before its first commit, is no session: `uncommitted_dirs`);
//! - `stale_tokens`: latest stateTokens that no longer rehydrate (or answer for another node);
//! - `damaged_objects`: CAS objects whose bytes do not hash to their name;
//! - `other_errors`: any other error, a server that exited by itself or hung, a read that missed
//!   a committed node;
//! - `locked_not_retryable`: a lock-busy error not marked retryable;
//! - `language_mismatches` (storm clients): an answer on a run of the language workflow other
//!   than its control flow says for what the client sent (a blocked ack included);
//! - `lanes_lost`, `lane_mismatches` ([`lane_storm`]): a lane answered complete that the fan-in
//!   then missed; an answer on a run with lanes other than its workflow says;
//! - `session_locked`: lock-busy errors (allowed: retried as their `retry` says).
//!
//! **On PostgreSQL** ([`Config::on_postgres`]): every process gets `WORKRAIL_STORE` and
//! `WORKRAIL_STORE_SCHEMA`, and each server runs in a data directory of its own (a restarted
//! server on its old one), like servers on several machines sharing one database. The oracle is
//! the same; the committed log is the schema's event rows and the objects are its
//! content-addressed rows, both read with plain SQL; a file in any data directory afterwards,
//! other than the machine's records of running servers (`servers/`), is counted in
//! `other_errors` (the database is all the servers may share).
//!
//! **With deletions** ([`gc_storm`], see `gc_storm.rs` for the whole list): an error about a
//! session is judged at the end. `SESSION_NOT_FOUND` about a session that is gone is allowed
//! (`sessions_deleted_under_use`); any other error about a gone session, `SESSION_NOT_FOUND`
//! about one that exists, and an answer after `SESSION_NOT_FOUND` count in `gc_race_errors`;
//! errors about sessions that exist count as above. `lost_events` and `stale_tokens` are judged
//! for the sessions that exist at the end; a few gone ones' tokens must answer
//! `SESSION_NOT_FOUND` saying so on a fresh server. A session directory neither healthy nor
//! wholly absent is `half_deleted`; a gc not killed by the harness that exits non-zero, and a
//! last gc (servers stopped) that fails, is in safe mode, or leaves a session or (on files) one
//! of gc's own directories, is `gc_failures`.
//!
//! Everything but `session_locked` (and the allowed counts of [`db_outage`], [`disk_full`] and
//! [`gc_storm`]) must be 0. Loops are bounded in time and count; every child process is killed
//! when its handle drops (also on panic).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::token::TokenPayload;

use crate::fixture;
use crate::multirun::payload;
use crate::system::workrail_binary;

mod db_outage;
mod disk_full;
mod gc_storm;
mod io_errors;
mod lanes;
mod language;
pub use db_outage::{DatabaseFaults, Outages, db_outage, outage_error_problem};
pub use disk_full::{disk_error_problem, disk_full};
pub use gc_storm::{
    gc_storm, gc_storm_on_a_full_disk, gc_storm_with_a_buggy_deleter, gc_storm_with_io_errors,
};
pub use io_errors::{io_error_problem, io_errors};
pub use lanes::{lane_storm, lane_storm_with_an_undriven_lane};

/// Seconds each scenario drives its servers (default [`Config::DEFAULT_SECS`]).
pub const SECS_ENV: &str = "WORKRAIL_MULTIPROC_SECS";
/// Servers of the race (default [`Config::DEFAULT_SERVERS`]); the other scenarios use half.
pub const SERVERS_ENV: &str = "WORKRAIL_MULTIPROC_SERVERS";
/// The PRNG seed (default: from the clock; every report prints it).
pub const SEED_ENV: &str = "WORKRAIL_MULTIPROC_SEED";
/// Set to `1` to keep the data directory (and server logs) for a post-mortem.
pub const KEEP_ENV: &str = "WORKRAIL_MULTIPROC_KEEP";
/// Another `workrail` binary to judge (default: [`workrail_binary`], rebuilt when its sources
/// changed), e.g. one built from an older commit.
pub const BINARY_ENV: &str = "WORKRAIL_MULTIPROC_BINARY";

/// The longest a server may take to answer one call; longer counts as a hang.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a CLI process (`export`, `inspect`) may run.
const CLI_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stopped server may take to exit after its stdin closes.
const EXIT_TIMEOUT: Duration = Duration::from_secs(10);
/// Retries after the drive phase: enough for a few lock waits, never unbounded.
const GRACE: Duration = Duration::from_secs(20);
/// Tries of one call (lock-busy answers and dead servers) before the client gives up.
const MAX_TRIES: u32 = 40;
/// Operations per client, a bound beside the time bound.
const MAX_OPS_PER_CLIENT: u64 = 100_000;
/// Answered acks each client keeps for replays.
const SENT_ACKS: usize = 256;
/// Failure samples kept per report.
const MAX_SAMPLES: usize = 24;
/// Samples of lost nodes (and of lost attempts) kept per session, so one session does not hide
/// the others.
const LOST_SAMPLES_PER_SESSION: usize = 3;

// -------------------------------------------------------------------------------------------
// Configuration and randomness
// -------------------------------------------------------------------------------------------

/// How long, how wide and with which seed the scenarios run, and on which store.
#[derive(Debug, Clone)]
pub struct Config {
    /// Servers of the race; the readers and the kill storm use half of it (at least one).
    pub servers: usize,
    /// How long each scenario drives its servers (checks come after).
    pub run_for: Duration,
    pub seed: u64,
    /// `None`: every process on one data directory (the file store). `Some`: every process
    /// on this PostgreSQL schema (`WORKRAIL_STORE`), each server in a data directory of its own,
    /// like servers on several machines sharing one database.
    pub postgres: Option<PgTarget>,
}

/// A PostgreSQL database and schema the processes share.
#[derive(Debug, Clone)]
pub struct PgTarget {
    pub url: String,
    pub schema: String,
}

impl Config {
    pub const DEFAULT_SECS: u64 = 15;
    pub const DEFAULT_SERVERS: usize = 8;

    /// The bounded defaults, overridden by [`SECS_ENV`], [`SERVERS_ENV`] and [`SEED_ENV`].
    pub fn from_env() -> Result<Self, String> {
        fn var<T: std::str::FromStr>(name: &str) -> Result<Option<T>, String> {
            match std::env::var(name) {
                Ok(text) if !text.trim().is_empty() => text
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| format!("{name}={text:?} is not a number")),
                _ => Ok(None),
            }
        }
        let secs = var::<u64>(SECS_ENV)?.unwrap_or(Self::DEFAULT_SECS).max(1);
        let servers = var::<usize>(SERVERS_ENV)?
            .unwrap_or(Self::DEFAULT_SERVERS)
            .max(2);
        let seed = match var::<u64>(SEED_ENV)? {
            Some(seed) => seed,
            None => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
        };
        Ok(Self {
            servers,
            run_for: Duration::from_secs(secs),
            seed,
            postgres: None,
        })
    }

    /// The same scenarios with every process on a PostgreSQL schema.
    pub fn on_postgres(mut self, url: &str, schema: &str) -> Self {
        self.postgres = Some(PgTarget {
            url: url.to_owned(),
            schema: schema.to_owned(),
        });
        self
    }

    /// Servers of the readers scenario (besides the writer) and of the kill storm.
    pub fn half(&self) -> usize {
        (self.servers / 2).max(1)
    }
}

/// splitmix64: small, seedable, good enough to pick operations and delays.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// An independent stream for another thread.
    pub fn split(&mut self) -> Self {
        Self::new(self.next_u64())
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        items.get(self.below(items.len() as u64) as usize)
    }
}

// -------------------------------------------------------------------------------------------
// The report
// -------------------------------------------------------------------------------------------

/// The counts of one scenario run (see the module docs for what each one means).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub scenario: &'static str,
    pub seed: u64,
    pub servers: usize,
    pub secs: u64,
    /// Tool calls sent (every try counts).
    pub calls: u64,
    /// CLI processes run during the drive phase (`export`, `inspect`).
    pub cli_runs: u64,
    /// Sessions in the data directory at the end.
    pub sessions: u64,
    /// Session directories without committed truth (a start killed before its first commit):
    /// no session, allowed.
    pub uncommitted_dirs: u64,
    /// Servers killed with SIGKILL.
    pub kills: u64,
    /// Calls cut off by a kill and sent again to the new server.
    pub interrupted_calls: u64,
    /// Distinct ack attempts answered.
    pub acks: u64,
    /// Answers to an attempt that had been answered before (the same ackToken sent again by a
    /// racing client, a replay, or a retry after a kill).
    pub ack_replays: u64,
    pub lost_events: u64,
    pub duplicate_attempts: u64,
    pub replay_mismatches: u64,
    /// Storm clients: answered acks sent again with other notes, as an agent that rewound and
    /// redid a step sends its old ackToken with new work.
    pub changed_resends: u64,
    /// Such resends answered without a replay notice that names `output.notesMarkdown` as not
    /// recorded and gives the recorded notes back (the agent would believe its new work kept).
    pub silent_resends: u64,
    pub false_corruption: u64,
    pub store_io_errors: u64,
    pub unhealthy_sessions: u64,
    pub stale_tokens: u64,
    pub damaged_objects: u64,
    pub other_errors: u64,
    pub locked_not_retryable: u64,
    /// Allowed: lock-busy answers, each retried as its `retry` says.
    pub session_locked: u64,
    /// [`db_outage`]: database kills, each followed by a restart or its own recovery.
    pub db_kills: u64,
    /// [`db_outage`], allowed: `STORE_IO_ERROR` answers that are retryable and say to retry
    /// (and that the database is the cause), each retried with the same arguments.
    pub outage_errors: u64,
    /// [`db_outage`], [`disk_full`]: acks answered after an outage or full-disk error on the
    /// same call (the same arguments sent again: a replay of what had committed, or the commit).
    pub outage_retried_acks: u64,
    /// [`db_outage`]: storage errors during an outage that are not retryable or do not say what
    /// to do (see [`outage_error_problem`]).
    pub unclear_outage_errors: u64,
    /// [`db_outage`]: servers that died or were started again (the database going away must
    /// not end a server), or that did not answer at the first try once the database was back.
    pub servers_down: u64,
    /// [`db_outage`]: what each database kill was.
    pub faults: Vec<String>,
    /// [`disk_full`]: times the filler filled the disk, and what it wrote to do so.
    pub disk_fills: u64,
    pub disk_filled_bytes: u64,
    /// [`disk_full`], allowed: `STORE_IO_ERROR` answers that are retryable, name `ENOSPC` and
    /// say to free disk space, each retried with the same arguments.
    pub disk_full_errors: u64,
    /// [`disk_full`]: storage errors on a full disk that are not clear (see
    /// [`disk_error_problem`]).
    pub unclear_disk_errors: u64,
    /// [`disk_full`]: rehydrates refused on a full disk (a read needs no space).
    pub reads_refused: u64,
    /// [`disk_full`], [`io_errors`]: clients whose latest node could not be acknowledged at the
    /// first try once the faults were over, on the server that lived through them.
    pub not_continuable: u64,
    /// [`io_errors`]: bursts of injected errors.
    pub io_bursts: u64,
    /// [`io_errors`], allowed: `STORE_IO_ERROR` answers that are retryable and name the I/O
    /// error, each retried with the same arguments.
    pub io_fault_errors: u64,
    /// [`io_errors`]: storage errors under injected faults that are not clear (see
    /// [`io_error_problem`]).
    pub unclear_io_errors: u64,
    /// [`gc_storm_with_io_errors`], [`gc_storm_on_a_full_disk`], allowed: gc processes that
    /// exited non-zero saying an injected I/O error or the full disk stopped them.
    pub gc_io_refusals: u64,
    /// [`gc_storm`]: `workrail gc` processes run beside the clients.
    pub gc_runs: u64,
    /// [`gc_storm`]: gc processes the harness killed with SIGKILL mid-run.
    pub gc_killed: u64,
    /// [`gc_storm`]: gc processes not killed by the harness that exited non-zero or hung, and
    /// a last gc (every server stopped) that failed, was in safe mode, or left a session or (on
    /// files) one of gc's own directories.
    pub gc_failures: u64,
    /// [`gc_storm`]: sessions the gc processes reported deleted.
    pub gc_deleted: u64,
    /// [`gc_storm`] with the planted deleter: sessions it deleted.
    pub planted_deletions: u64,
    /// [`gc_storm`], allowed: sessions a client was using that answered `SESSION_NOT_FOUND`
    /// (deleted under it); the client forgot them and started a new run.
    pub sessions_deleted_under_use: u64,
    /// [`gc_storm`]: sessions some response named that are gone at the end.
    pub sessions_deleted: u64,
    /// [`gc_storm`]: session directories left neither healthy nor wholly absent (a session some
    /// response named without committed truth, one not healthy, a directory of gc's own left by
    /// a gc nobody killed), and on PostgreSQL rows of a session without its session row or
    /// events without manifest rows.
    pub half_deleted: u64,
    /// [`gc_storm`], allowed when a gc was killed: directories of gc's own in-progress
    /// deletions (named with a leading `.`) left under `sessions/`.
    pub gc_leftovers: u64,
    /// [`gc_storm`]: errors other than `SESSION_NOT_FOUND` about a session that is gone at the
    /// end, `SESSION_NOT_FOUND` about one that still exists, an answer for a session after it
    /// answered `SESSION_NOT_FOUND`, and a deleted session's token that does not answer exactly
    /// `SESSION_NOT_FOUND` saying so on a fresh server.
    pub gc_race_errors: u64,
    /// [`gc_storm`]: the first gc failures of each kind, each with its stderr, then what the
    /// last gc (every server stopped) said.
    pub gc_samples: Vec<String>,
    /// [`gc_storm`], allowed: the first `SESSION_NOT_FOUND` answers of deleted sessions.
    pub deleted_samples: Vec<String>,
    /// The first failures, for the assertion message.
    pub samples: Vec<String>,
    /// The first lock-busy answers (allowed), to see which operations met a held lock.
    pub locked_samples: Vec<String>,
    /// Storm clients: runs of the workflow in the 3.x language started (`language.rs`).
    pub language_runs: u64,
    /// Storm clients: acks of such runs answered (each sending what its step asked for).
    pub language_acks: u64,
    /// Storm clients: answers on such runs other than the workflow's control flow says (a
    /// blocked ack, another next step, a first step that is not the survey of the run's items).
    pub language_mismatches: u64,
    /// [`lane_storm`]: lanes handed out by a parallel step.
    pub lane_runs: u64,
    /// [`lane_storm`]: runs with lanes driven to completion.
    pub lane_runs_completed: u64,
    /// [`lane_storm`]: a lane whose last step was answered complete and that the fan-in then
    /// missed (the parallel step blocked, or its synthesis does not list the lane completed).
    pub lanes_lost: u64,
    /// [`lane_storm`]: answers other than the workflow says (not three lanes, other lanes on a
    /// rehydrate, a lane that does not end at its report step).
    pub lane_mismatches: u64,
}

impl Report {
    /// One line in a fixed format.
    pub fn line(&self) -> String {
        format!(
            "multiprocess {}: servers={} secs={} calls={} acks={} ack_replays={} cli_runs={} sessions={} uncommitted_dirs={} kills={} interrupted_calls={} lost_events={} duplicate_attempts={} replay_mismatches={} false_corruption={} store_io_errors={} unhealthy_sessions={} stale_tokens={} damaged_objects={} other_errors={} locked_not_retryable={} session_locked={} seed={}",
            self.scenario,
            self.servers,
            self.secs,
            self.calls,
            self.acks,
            self.ack_replays,
            self.cli_runs,
            self.sessions,
            self.uncommitted_dirs,
            self.kills,
            self.interrupted_calls,
            self.lost_events,
            self.duplicate_attempts,
            self.replay_mismatches,
            self.false_corruption,
            self.store_io_errors,
            self.unhealthy_sessions,
            self.stale_tokens,
            self.damaged_objects,
            self.other_errors,
            self.locked_not_retryable,
            self.session_locked,
            self.seed,
        ) + &self.language_counts()
            + &self.outage_counts()
            + &self.disk_counts()
            + &self.io_counts()
            + &self.gc_counts()
            + &self.lane_counts()
    }

    /// The counts of [`lane_storm`] (empty for the other scenarios).
    fn lane_counts(&self) -> String {
        if self.scenario != "lane_storm" {
            return String::new();
        }
        format!(
            " lane_runs={} lane_runs_completed={} lanes_lost={} lane_mismatches={}",
            self.lane_runs, self.lane_runs_completed, self.lanes_lost, self.lane_mismatches,
        )
    }

    /// Whether the scenario's clients are storm clients ([`storm_client`]).
    fn has_storm_clients(&self) -> bool {
        matches!(
            self.scenario,
            "kill_storm" | "db_outage" | "disk_full" | "io_errors"
        ) || self.scenario.starts_with("gc_storm")
    }

    /// The counts of the storm clients' language runs and changed resends (empty for the other
    /// scenarios).
    fn language_counts(&self) -> String {
        if !self.has_storm_clients() {
            return String::new();
        }
        format!(
            " language_runs={} language_acks={} language_mismatches={} changed_resends={} silent_resends={}",
            self.language_runs,
            self.language_acks,
            self.language_mismatches,
            self.changed_resends,
            self.silent_resends,
        )
    }

    /// The counts of [`db_outage`] (empty for the other scenarios).
    fn outage_counts(&self) -> String {
        if self.scenario != "db_outage" {
            return String::new();
        }
        format!(
            " db_kills={} outage_errors={} outage_retried_acks={} unclear_outage_errors={} servers_down={}",
            self.db_kills,
            self.outage_errors,
            self.outage_retried_acks,
            self.unclear_outage_errors,
            self.servers_down,
        )
    }

    /// The counts of [`disk_full`] (empty for the other scenarios).
    fn disk_counts(&self) -> String {
        if !matches!(self.scenario, "disk_full" | "gc_storm_disk_full") {
            return String::new();
        }
        format!(
            " disk_fills={} disk_filled_mib={} disk_full_errors={} retried_acks={} unclear_disk_errors={} reads_refused={} not_continuable={}",
            self.disk_fills,
            self.disk_filled_bytes >> 20,
            self.disk_full_errors,
            self.outage_retried_acks,
            self.unclear_disk_errors,
            self.reads_refused,
            self.not_continuable,
        )
    }

    /// The counts of [`io_errors`] (empty for the other scenarios).
    fn io_counts(&self) -> String {
        if !matches!(self.scenario, "io_errors" | "gc_storm_io") {
            return String::new();
        }
        format!(
            " io_bursts={} io_fault_errors={} retried_acks={} unclear_io_errors={} not_continuable={}",
            self.io_bursts,
            self.io_fault_errors,
            self.outage_retried_acks,
            self.unclear_io_errors,
            self.not_continuable,
        )
    }

    /// The counts of [`gc_storm`] (empty for the other scenarios).
    fn gc_counts(&self) -> String {
        if !self.scenario.starts_with("gc_storm") {
            return String::new();
        }
        format!(
            " gc_runs={} gc_killed={} gc_failures={} gc_io_refusals={} gc_deleted={} planted_deletions={} sessions_deleted_under_use={} sessions_deleted={} half_deleted={} gc_leftovers={} gc_race_errors={}",
            self.gc_runs,
            self.gc_killed,
            self.gc_failures,
            self.gc_io_refusals,
            self.gc_deleted,
            self.planted_deletions,
            self.sessions_deleted_under_use,
            self.sessions_deleted,
            self.half_deleted,
            self.gc_leftovers,
            self.gc_race_errors,
        )
    }

    /// The sum of every count that must be 0 (all but `session_locked`, and the allowed counts
    /// of [`db_outage`], [`disk_full`] and [`gc_storm`]).
    pub fn failures(&self) -> u64 {
        self.lost_events
            + self.duplicate_attempts
            + self.replay_mismatches
            + self.silent_resends
            + self.false_corruption
            + self.store_io_errors
            + self.unhealthy_sessions
            + self.stale_tokens
            + self.damaged_objects
            + self.other_errors
            + self.locked_not_retryable
            + self.unclear_outage_errors
            + self.servers_down
            + self.unclear_disk_errors
            + self.reads_refused
            + self.not_continuable
            + self.unclear_io_errors
            + self.gc_failures
            + self.half_deleted
            + self.gc_race_errors
            + self.language_mismatches
            + self.lanes_lost
            + self.lane_mismatches
    }

    fn sample(&mut self, text: String) {
        if self.samples.len() < MAX_SAMPLES {
            self.samples.push(text);
        }
    }

    fn gc_sample(&mut self, text: String) {
        if self.gc_samples.len() < MAX_SAMPLES {
            self.gc_samples.push(text);
        }
    }

    fn locked(&mut self, text: String) {
        self.session_locked += 1;
        if self.locked_samples.len() < MAX_SAMPLES {
            self.locked_samples.push(text);
        }
    }
}

// -------------------------------------------------------------------------------------------
// The ledger: what clients were told
// -------------------------------------------------------------------------------------------

/// The first response to an acknowledged attempt.
#[derive(Debug, Clone)]
struct AckSeen {
    session: String,
    node: String,
    result: Value,
}

/// Everything clients saw, shared by every client thread of a scenario.
#[derive(Debug, Default)]
struct Book {
    report: Report,
    /// attemptId -> its first successful response.
    acks: HashMap<String, AckSeen>,
    /// session -> every node a successful response named.
    nodes: HashMap<String, HashSet<String>>,
    /// (client, session) -> the latest stateToken that client received for that session.
    latest: BTreeMap<(usize, String), String>,
    /// One entry per corruption report: the session it was about, if known.
    corruption: Vec<(Option<String>, String)>,
    /// client -> arguments of acks it sent that were answered (recent ones), to replay.
    sent_acks: HashMap<usize, Vec<Value>>,
    /// [`gc_storm`]: sessions that answered `SESSION_NOT_FOUND` (deleted under their client).
    gone: HashSet<String>,
    /// [`gc_storm`]: sessions whose client gave up on them after an error (it starts a new run).
    dropped: HashSet<String>,
    /// [`gc_storm`]: errors other than `SESSION_NOT_FOUND` about a session, judged at the end by
    /// whether the session still exists: (session, code, `what: CODE: message`).
    session_errors: Vec<(String, ErrorCode, String)>,
    /// Sessions of the language workflow's runs, with what each started with.
    lang_runs: HashMap<String, language::LangRun>,
}

impl Book {
    fn other(&mut self, text: String) {
        self.report.other_errors += 1;
        self.report.sample(text);
    }

    /// Records an error answer by its class.
    fn classify(&mut self, session: Option<&str>, code: ErrorCode, text: String) {
        classify(&mut self.report, &mut self.corruption, session, code, text);
    }
}

/// Counts an error answer by its class; a corruption report waits for the session's health at
/// the end.
fn classify(
    report: &mut Report,
    corruption: &mut Vec<(Option<String>, String)>,
    session: Option<&str>,
    code: ErrorCode,
    text: String,
) {
    match code {
        // Lock-busy here only when it was not retryable (already counted).
        ErrorCode::SessionLocked | ErrorCode::TokenSessionLocked => {}
        ErrorCode::SessionCorrupt | ErrorCode::StoreCorruptionDetected => {
            corruption.push((session.map(str::to_owned), text));
        }
        ErrorCode::StoreIoError => {
            report.store_io_errors += 1;
            report.sample(text);
        }
        _ => {
            report.other_errors += 1;
            report.sample(text);
        }
    }
}

/// A successful execution response, with what the oracle needs of it.
#[derive(Debug, Clone)]
struct Resp {
    state_token: String,
    ack_token: Option<String>,
    session: String,
    node: String,
    complete: bool,
    /// The whole tool result (text and structuredContent), for byte-for-byte replay checks;
    /// a replay notice (D57: the same ack sent with other notes) is set apart, and the text
    /// that carries it is left out, so the recorded answer itself is what is compared.
    result: Value,
}

/// Whether two answers to one ackToken differ: their structured answers, and their texts when
/// both are the plain recorded text (a replay notice's text is set apart, see [`Resp`]).
fn differs(first: &Value, again: &Value) -> bool {
    first["structuredContent"] != again["structuredContent"]
        || first["isError"] != again["isError"]
        || (!first["content"].is_null()
            && !again["content"].is_null()
            && first["content"] != again["content"])
}

impl Resp {
    fn parse(mut result: Value) -> Result<Self, String> {
        if let Some(notice) = result["structuredContent"]
            .as_object_mut()
            .and_then(|o| o.remove("replay"))
        {
            if notice["forkAckToken"].as_str().is_none() {
                return Err(format!("a malformed replay notice: {notice}"));
            }
            // The text carries the notice; the structured answer is compared alone.
            result["content"] = Value::Null;
        }
        let structured = &result["structuredContent"];
        let text = |v: &Value| v.as_str().map(str::to_owned);
        let state_token = text(&structured["stateToken"])
            .ok_or_else(|| format!("a response without stateToken: {structured}"))?;
        let node = payload(&state_token)?.node_id().to_string();
        let session = text(&structured["session"]["sessionId"])
            .ok_or_else(|| format!("a response without session.sessionId: {structured}"))?;
        Ok(Self {
            ack_token: text(&structured["ackToken"]),
            complete: structured["isComplete"] == json!(true),
            state_token,
            session,
            node,
            result,
        })
    }
}

/// The attempt id an ackToken names.
fn attempt_of(ack_token: &str) -> Result<String, String> {
    match payload(ack_token)? {
        TokenPayload::Ack(p) => Ok(p.attempt_id.to_string()),
        other => Err(format!("not an ackToken: {other:?}")),
    }
}

fn session_of(token: &str) -> Option<String> {
    payload(token).ok().map(|p| p.session_id().to_string())
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking client thread fails the test anyway; its data stays readable for the report.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

// -------------------------------------------------------------------------------------------
// Server processes
// -------------------------------------------------------------------------------------------

/// Why a call got no MCP answer.
#[derive(Debug)]
enum Transport {
    /// The process is gone (stdout closed or stdin broken).
    Died,
    /// No answer within [`CALL_TIMEOUT`].
    Hung,
    /// An answer that is not a tool result.
    Protocol(String),
}

/// A tool result: the result object, or the error envelope it carried.
#[derive(Debug)]
enum Answer {
    Ok(Value),
    Err(ErrorEnvelope),
}

#[derive(Debug)]
struct Io {
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: i64,
}

/// One running `workrail mcp` process. Dropping it kills the process.
#[derive(Debug)]
struct Conn {
    child: Mutex<Child>,
    io: Mutex<Io>,
    /// Set by the harness before it kills the process, so a death it did not cause is reported.
    killed: AtomicBool,
}

impl Conn {
    fn spawn(lab: &Lab, name: &str) -> Result<Self, String> {
        let log = File::create(lab.logs().join(format!("{name}.log")))
            .map_err(|e| format!("cannot create the server log: {e}"))?;
        let mut child = lab
            .command_in(&lab.machine_dir(name)?)
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot spawn {}: {e}", lab.binary.display()))?;
        let (tx, rx) = channel();
        if let Some(stdout) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let conn = Self {
            io: Mutex::new(Io {
                stdin: child.stdin.take(),
                lines: rx,
                next_id: 0,
            }),
            child: Mutex::new(child),
            killed: AtomicBool::new(false),
        };
        let init = conn
            .request(
                "initialize",
                json!({
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "workrail-multiproc", "version": "0"},
                }),
            )
            .map_err(|e| format!("{name}: initialize failed: {e:?}"))?;
        if init["result"]["serverInfo"]["name"] != "workrail" {
            return Err(format!("{name}: unexpected initialize answer: {init}"));
        }
        conn.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .map_err(|e| format!("{name}: {e:?}"))?;
        Ok(conn)
    }

    fn send(&self, message: &Value) -> Result<(), Transport> {
        let mut io = lock(&self.io);
        Self::send_on(&mut io, message)
    }

    fn send_on(io: &mut Io, message: &Value) -> Result<(), Transport> {
        let stdin = io.stdin.as_mut().ok_or(Transport::Died)?;
        let mut line = message.to_string();
        line.push('\n');
        stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|_| Transport::Died)
    }

    fn request(&self, method: &str, params: Value) -> Result<Value, Transport> {
        let mut io = lock(&self.io);
        io.next_id += 1;
        let id = io.next_id;
        Self::send_on(
            &mut io,
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
        )?;
        let deadline = Instant::now() + CALL_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match io.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => return Err(Transport::Hung),
                Err(RecvTimeoutError::Disconnected) => return Err(Transport::Died),
            };
            let value: Value = serde_json::from_str(&line).map_err(|e| {
                Transport::Protocol(format!("stdout carried a non-JSON line ({e}): {line:?}"))
            })?;
            if value["id"] == json!(id) {
                return Ok(value);
            }
        }
    }

    fn call(&self, tool: &str, arguments: &Value) -> Result<Answer, Transport> {
        let response = self.request("tools/call", json!({"name": tool, "arguments": arguments}))?;
        if let Some(error) = response.get("error") {
            return Err(Transport::Protocol(format!(
                "{tool} became a JSON-RPC error: {error}"
            )));
        }
        let result = response["result"].clone();
        if result["isError"] == json!(true) {
            serde_json::from_value::<ErrorEnvelope>(result["structuredContent"].clone())
                .map(Answer::Err)
                .map_err(|e| {
                    Transport::Protocol(format!(
                        "{tool}: an error without an envelope ({e}): {result}"
                    ))
                })
        } else {
            Ok(Answer::Ok(result))
        }
    }

    fn is_dead(&self) -> bool {
        matches!(lock(&self.child).try_wait(), Ok(Some(_)) | Err(_))
    }

    /// SIGKILL (`Child::kill`), and reap.
    fn kill(&self) {
        self.killed.store(true, Ordering::SeqCst);
        let mut child = lock(&self.child);
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Closes stdin and waits for a clean exit (the way a client quits politely).
    fn close(&self) -> Result<(), String> {
        drop(lock(&self.io).stdin.take());
        let deadline = Instant::now() + EXIT_TIMEOUT;
        loop {
            let status = lock(&self.child).try_wait();
            match status {
                Ok(Some(status)) if status.success() || self.killed.load(Ordering::SeqCst) => {
                    return Ok(());
                }
                Ok(Some(status)) => return Err(format!("a server exited with {status}")),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok(None) => {
                    self.kill();
                    return Err(format!(
                        "a server did not exit within {EXIT_TIMEOUT:?} of stdin EOF"
                    ));
                }
                Err(e) => return Err(format!("cannot wait for a server: {e}")),
            }
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Ok(None) = child.try_wait() {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

/// A server position: the process currently serving it, replaced when it dies or is killed.
#[derive(Debug)]
struct Slot {
    index: usize,
    conn: Mutex<Option<Arc<Conn>>>,
    spawns: AtomicU64,
}

impl Slot {
    fn new(index: usize) -> Self {
        Self {
            index,
            conn: Mutex::new(None),
            spawns: AtomicU64::new(0),
        }
    }

    fn spawn(&self, lab: &Lab) -> Result<Arc<Conn>, String> {
        let n = self.spawns.fetch_add(1, Ordering::SeqCst);
        Conn::spawn(lab, &format!("server-{}-{n}", self.index)).map(Arc::new)
    }

    /// The live server, starting one when there is none or it died.
    fn get(&self, lab: &Lab) -> Result<Arc<Conn>, String> {
        let mut current = lock(&self.conn);
        if let Some(conn) = current.as_ref()
            && !conn.is_dead()
        {
            return Ok(Arc::clone(conn));
        }
        let conn = self.spawn(lab)?;
        *current = Some(Arc::clone(&conn));
        Ok(conn)
    }

    /// `kill -9` the current server and start a new one in its place.
    fn kill_and_restart(&self, lab: &Lab) -> Result<bool, String> {
        let mut current = lock(&self.conn);
        let killed = match current.take() {
            Some(conn) if !conn.is_dead() => {
                conn.kill();
                true
            }
            _ => false,
        };
        *current = Some(self.spawn(lab)?);
        Ok(killed)
    }

    fn stop(&self) -> Result<(), String> {
        match lock(&self.conn).take() {
            Some(conn) => conn.close(),
            None => Ok(()),
        }
    }
}

// -------------------------------------------------------------------------------------------
// The lab: one data directory, its processes and the ledger
// -------------------------------------------------------------------------------------------

/// What a CLI process printed.
#[derive(Debug)]
struct CliOutput {
    success: bool,
    stdout: String,
    stderr: String,
}

/// A running CLI process, its output going to files. Dropping it kills the process.
#[derive(Debug)]
struct CliChild {
    child: Child,
    what: String,
    out_path: PathBuf,
    err_path: PathBuf,
}

impl CliChild {
    /// Whether it has exited (reaping it), without waiting.
    fn exited(&mut self) -> Result<Option<std::process::ExitStatus>, String> {
        self.child
            .try_wait()
            .map_err(|e| format!("cannot wait for {}: {e}", self.what))
    }

    /// SIGKILL (`Child::kill`), and reap.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits at most `timeout` for the process to exit (then kills it), and reads its output.
    fn wait(mut self, timeout: Duration) -> Result<CliOutput, String> {
        let deadline = Instant::now() + timeout;
        let status = loop {
            match self.exited()? {
                Some(status) => break status,
                None if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(2));
                }
                None => {
                    self.kill();
                    return Err(format!("{} ran longer than {timeout:?}", self.what));
                }
            }
        };
        Ok(self.output(status.success()))
    }

    /// What it printed (the files are removed).
    fn output(&self, success: bool) -> CliOutput {
        let read = |path: &Path| std::fs::read_to_string(path).unwrap_or_default();
        let output = CliOutput {
            success,
            stdout: read(&self.out_path),
            stderr: read(&self.err_path),
        };
        let _ = std::fs::remove_file(&self.out_path);
        let _ = std::fs::remove_file(&self.err_path);
        output
    }
}

impl Drop for CliChild {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

#[derive(Debug)]
struct Lab {
    /// [`disk_full`]: the data directory's own filesystem (before `dir`: it is unmounted before
    /// the temporary directory is removed).
    disk: Option<disk_full::Tmpfs>,
    dir: tempfile::TempDir,
    binary: PathBuf,
    book: Mutex<Book>,
    /// Clients start no new operation after this.
    deadline: Instant,
    /// Retries of an operation in flight stop here.
    hard_deadline: Instant,
    cli_seq: AtomicU64,
    postgres: Option<PgTarget>,
    /// [`db_outage`]: storage errors are the database going away, retried when they say so.
    outages: bool,
    /// [`gc_storm`]: sessions may be deleted under their clients; an error about a session is
    /// judged at the end by whether it still exists.
    deletions: bool,
    /// [`disk_full`]: storage errors are the disk being full, retried when they say so.
    disk_faults: bool,
    /// [`io_errors`]: the library every process of the lab preloads.
    shim: Option<io_errors::Shim>,
    /// [`io_errors`]: storage errors are injected ones, retried when they say so.
    io_faults: bool,
}

impl Lab {
    fn new(config: &Config, scenario: &'static str, servers: usize) -> Result<Self, String> {
        let mut dir = tempfile::Builder::new()
            .prefix("workrail-multiproc-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        if std::env::var(KEEP_ENV).is_ok_and(|v| v == "1") {
            dir.disable_cleanup(true);
            eprintln!("multiprocess {scenario}: keeping {}", dir.path().display());
        }
        for sub in ["data", "workflows", "home", "logs", "cli"] {
            std::fs::create_dir_all(dir.path().join(sub))
                .map_err(|e| format!("cannot create {sub}/: {e}"))?;
        }
        for (file, json) in [
            (fixture::LINEAR_FILE, fixture::LINEAR_JSON),
            (fixture::REVIEW_FILE, fixture::REVIEW_JSON),
            (fixture::LANGUAGE_FILE, fixture::LANGUAGE_JSON),
        ] {
            std::fs::write(dir.path().join("workflows").join(file), json)
                .map_err(|e| format!("cannot write the workflow {file}: {e}"))?;
        }
        let now = Instant::now();
        Ok(Self {
            disk: None,
            dir,
            binary: std::env::var_os(BINARY_ENV).map_or_else(workrail_binary, PathBuf::from),
            book: Mutex::new(Book {
                report: Report {
                    scenario,
                    seed: config.seed,
                    servers,
                    secs: config.run_for.as_secs(),
                    ..Report::default()
                },
                ..Book::default()
            }),
            deadline: now + config.run_for,
            hard_deadline: now + config.run_for + GRACE,
            cli_seq: AtomicU64::new(0),
            postgres: config.postgres.clone(),
            outages: false,
            deletions: false,
            disk_faults: false,
            shim: None,
            io_faults: false,
        })
    }

    fn data_dir(&self) -> PathBuf {
        match self.disk {
            Some(_) => self.dir.path().join("disk").join("data"),
            None => self.dir.path().join("data"),
        }
    }

    fn logs(&self) -> PathBuf {
        self.dir.path().join("logs")
    }

    fn running(&self) -> bool {
        Instant::now() < self.deadline
    }

    /// Starts the driving time now: the servers' start-up (slow on a loaded machine) does not
    /// eat into it, so a scenario always drives for `run_for`.
    fn start_driving(&mut self, run_for: Duration) {
        let now = Instant::now();
        self.deadline = now + run_for;
        self.hard_deadline = now + run_for + GRACE;
    }

    /// A server's data directory: the lab's one, or on PostgreSQL one per machine (a server's
    /// name without its restart count: a restarted server comes back on its machine).
    fn machine_dir(&self, name: &str) -> Result<PathBuf, String> {
        if self.postgres.is_none() {
            return Ok(self.data_dir());
        }
        let machine = match name.rsplit_once('-') {
            Some((machine, n)) if n.chars().all(|c| c.is_ascii_digit()) => machine,
            _ => name,
        };
        let dir = self.dir.path().join("machines").join(machine);
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        Ok(dir)
    }

    /// The binary with this lab's environment on `data_dir`: that data directory, the lab's
    /// workflow directory, a private HOME, the default lock wait (what users get) and the
    /// fewest resident events (so forgotten events are read back); on
    /// PostgreSQL with `WORKRAIL_STORE` and `WORKRAIL_STORE_SCHEMA` set (else both removed).
    fn command_in(&self, data_dir: &Path) -> Command {
        self.command_in_with(data_dir, true)
    }

    /// [`Self::command_in`], without the injected I/O faults when `faults` is false.
    fn command_in_with(&self, data_dir: &Path, faults: bool) -> Command {
        let mut command = Command::new(&self.binary);
        match &self.postgres {
            Some(pg) => command
                .env("WORKRAIL_STORE", &pg.url)
                .env("WORKRAIL_STORE_SCHEMA", &pg.schema),
            None => command
                .env_remove("WORKRAIL_STORE")
                .env_remove("WORKRAIL_STORE_SCHEMA"),
        };
        command
            .env("WORKRAIL_DATA_DIR", data_dir)
            .env("WORKRAIL_WORKFLOW_DIRS", self.dir.path().join("workflows"))
            .env("HOME", self.dir.path().join("home"))
            .env_remove("XDG_DATA_HOME")
            .env_remove("WORKRAIL_LOG")
            .env_remove("WORKRAIL_LOCK_WAIT_MS")
            .env_remove("WORKRAIL_FEATURES")
            // The fewest events a server may keep parsed: a storm's sessions then outgrow it,
            // and every reader and writer also reads forgotten events back from segments that
            // other servers, kills and gc act on (D225).
            .env("WORKRAIL_RESIDENT_EVENTS", "64")
            .current_dir(self.dir.path().join("home"));
        if let Some(shim) = self.shim.as_ref().filter(|_| faults) {
            command.envs(shim.environment(data_dir));
        }
        command
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        lock(&self.book)
    }

    fn other(&self, text: String) {
        self.book().other(text);
    }

    // ---------------------------------------------------------------------------------------
    // Calls
    // ---------------------------------------------------------------------------------------

    /// One tool call as a careful client makes it: a lock-busy answer is retried after the
    /// delay its `retry` names; a server that died mid-call is replaced and the same call is
    /// sent again. Any other error is recorded and ends the call.
    fn call(&self, slot: &Slot, tool: &str, args: &Value, session: Option<&str>) -> Option<Value> {
        // In [`db_outage`], a clear storage error is retried too, as often as the hard
        // deadline allows (an outage lasts longer than a lock wait).
        let mut outage_tries = 0u32;
        let mut tries = 0;
        while tries < MAX_TRIES {
            if Instant::now() > self.hard_deadline {
                self.other(format!("{tool}: still unanswered at the hard deadline"));
                return None;
            }
            let conn = match slot.get(self) {
                Ok(conn) => conn,
                Err(e) => {
                    self.other(format!("server {}: {e}", slot.index));
                    std::thread::sleep(Duration::from_millis(50));
                    tries += 1;
                    continue;
                }
            };
            self.book().report.calls += 1;
            match conn.call(tool, args) {
                Ok(Answer::Ok(result)) => {
                    if outage_tries > 0 && args.get("ackToken").is_some() {
                        self.book().report.outage_retried_acks += 1;
                    }
                    return Some(result);
                }
                Ok(Answer::Err(envelope))
                    if self.outages && envelope.code == ErrorCode::StoreIoError =>
                {
                    match self.outage_error(tool, &envelope) {
                        Some(wait) => {
                            outage_tries += 1;
                            std::thread::sleep(wait);
                            continue;
                        }
                        None => return None,
                    }
                }
                Ok(Answer::Err(envelope))
                    if self.disk_faults && envelope.code == ErrorCode::StoreIoError =>
                {
                    match self.disk_error(tool, args, &envelope) {
                        Some(wait) => {
                            outage_tries += 1;
                            std::thread::sleep(wait);
                            continue;
                        }
                        None => return None,
                    }
                }
                Ok(Answer::Err(envelope))
                    if self.io_faults && envelope.code == ErrorCode::StoreIoError =>
                {
                    match self.injected_io_error(tool, &envelope) {
                        Some(wait) => {
                            outage_tries += 1;
                            std::thread::sleep(wait);
                            continue;
                        }
                        None => return None,
                    }
                }
                Ok(Answer::Err(envelope)) => {
                    if !self.lock_busy(tool, &envelope) {
                        self.failed(tool, session, &envelope);
                        return None;
                    }
                }
                Err(Transport::Died) => {
                    if conn.killed.load(Ordering::SeqCst) {
                        self.book().report.interrupted_calls += 1;
                    } else {
                        self.other(format!(
                            "server {} exited by itself during {tool}",
                            slot.index
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(Transport::Hung) => {
                    self.other(format!("{tool}: no answer within {CALL_TIMEOUT:?}"));
                    conn.kill();
                }
                Err(Transport::Protocol(text)) => {
                    self.other(text);
                    return None;
                }
            }
            tries += 1;
            if tries == MAX_TRIES {
                self.other(format!("{tool}: gave up after {MAX_TRIES} tries"));
            }
        }
        None
    }

    /// Counts a lock-busy answer and waits as it says; false when the error is something else
    /// or must not be retried.
    fn lock_busy(&self, tool: &str, envelope: &ErrorEnvelope) -> bool {
        if !matches!(
            envelope.code,
            ErrorCode::SessionLocked | ErrorCode::TokenSessionLocked
        ) {
            return false;
        }
        let wait = {
            let mut book = self.book();
            book.report
                .locked(format!("{tool}: {}: {}", envelope.code, envelope.message));
            match envelope.retry {
                Retry::RetryableAfterMs { after_ms } => Duration::from_millis(after_ms),
                Retry::RetryableImmediate => Duration::ZERO,
                Retry::NotRetryable => {
                    book.report.locked_not_retryable += 1;
                    book.report.sample(format!(
                        "{tool}: {} marked not retryable: {}",
                        envelope.code, envelope.message
                    ));
                    return false;
                }
            }
        };
        std::thread::sleep(wait.min(self.hard_deadline.saturating_duration_since(Instant::now())));
        true
    }

    /// Records an error answer by its class.
    fn failed(&self, what: &str, session: Option<&str>, envelope: &ErrorEnvelope) {
        self.failed_code(what, session, envelope.code, &envelope.message);
    }

    fn failed_code(&self, what: &str, session: Option<&str>, code: ErrorCode, message: &str) {
        if self.deletions
            && let Some(session) = session
            && !matches!(
                code,
                ErrorCode::SessionLocked | ErrorCode::TokenSessionLocked
            )
        {
            self.failed_on_session(what, session, code, message);
            return;
        }
        let text = format!("{what}: {code}: {message}");
        self.book().classify(session, code, text);
    }

    /// Records a successful execution response of `client`.
    fn saw(&self, client: usize, result: Value) -> Option<Resp> {
        let resp = match Resp::parse(result) {
            Ok(resp) => resp,
            Err(e) => {
                self.other(e);
                return None;
            }
        };
        let mut book = self.book();
        if self.deletions && book.gone.contains(&resp.session) {
            // A deleted session never comes back.
            book.report.gc_race_errors += 1;
            book.report.sample(format!(
                "session {} answered for node {} after it had answered SESSION_NOT_FOUND",
                resp.session, resp.node
            ));
        }
        book.nodes
            .entry(resp.session.clone())
            .or_default()
            .insert(resp.node.clone());
        book.latest
            .insert((client, resp.session.clone()), resp.state_token.clone());
        Some(resp)
    }

    fn start(&self, client: usize, slot: &Slot, workflow_id: &str) -> Option<Resp> {
        let args = json!({"workflowId": workflow_id});
        let result = self.call(slot, "start_workflow", &args, None)?;
        self.saw(client, result)
    }

    /// `continue_workflow` with only a stateToken: it must answer for the token's node.
    fn rehydrate(&self, client: usize, slot: &Slot, state_token: &str) -> Option<Resp> {
        let session = session_of(state_token);
        let args = json!({"stateToken": state_token});
        let result = self.call(slot, "continue_workflow", &args, session.as_deref())?;
        let resp = self.saw(client, result)?;
        let asked = payload(state_token).map(|p| p.node_id().to_string());
        if asked.as_ref() != Ok(&resp.node) {
            self.other(format!(
                "a rehydrate of {asked:?} answered for node {}",
                resp.node
            ));
        }
        Some(resp)
    }

    /// Acknowledges the pending step of `at` (with or without its stateToken); on a run of the
    /// language workflow, with what the step asks for ([`language`]).
    fn ack(&self, client: usize, slot: &Slot, at: &Resp, rng: &mut Rng) -> Option<Resp> {
        let Some(ack_token) = at.ack_token.clone() else {
            self.other(format!("node {} has no ackToken to acknowledge", at.node));
            return None;
        };
        let language_run = self.book().lang_runs.get(&at.session).cloned();
        if let Some(run) = language_run {
            return self.ack_language(client, slot, at, &run, ack_token, rng);
        }
        let mut args = json!({
            "ackToken": ack_token,
            "output": {"notesMarkdown": format!("Recap from client {client}: did the step.")},
        });
        if rng.below(2) == 0 {
            args["stateToken"] = json!(at.state_token);
        }
        self.send_ack(client, slot, &args)
    }

    /// Sends an ack (first time or replay) and checks it against every earlier answer to the
    /// same attempt.
    fn send_ack(&self, client: usize, slot: &Slot, args: &Value) -> Option<Resp> {
        let ack_token = args["ackToken"].as_str().unwrap_or_default();
        let attempt = match attempt_of(ack_token) {
            Ok(attempt) => attempt,
            Err(e) => {
                self.other(e);
                return None;
            }
        };
        let session = session_of(ack_token);
        let result = self.call(slot, "continue_workflow", args, session.as_deref())?;
        self.answered_ack(client, attempt, args, result)
    }

    /// Sends an answered plain-workflow ack again with other notes: the answer must be the
    /// recorded one (checked as any replay is), with a replay notice saying the new notes were
    /// not recorded and giving back the ones that were. With `follow`, the agent then does what
    /// the notice says: it sends the new notes with the notice's `forkAckToken`, which must
    /// record them on a new branch.
    fn resend_with_other_notes(
        &self,
        client: usize,
        slot: &Slot,
        args: &Value,
        follow: bool,
    ) -> Option<Resp> {
        let ack_token = args["ackToken"].as_str().unwrap_or_default();
        let recorded = args["output"]["notesMarkdown"].as_str().unwrap_or_default();
        let attempt = match attempt_of(ack_token) {
            Ok(attempt) => attempt,
            Err(e) => {
                self.other(e);
                return None;
            }
        };
        let mut changed = args.clone();
        changed["output"]["notesMarkdown"] = json!(format!("{recorded} Redone after a rewind."));
        let session = session_of(ack_token);
        let result = self.call(slot, "continue_workflow", &changed, session.as_deref())?;
        let notice = &result["structuredContent"]["replay"];
        let flagged = notice["notRecorded"]
            .as_array()
            .is_some_and(|fields| fields.iter().any(|f| f == "output.notesMarkdown"))
            && notice["recordedNotesMarkdown"] == json!(recorded);
        {
            let mut book = self.book();
            book.report.changed_resends += 1;
            if !flagged && result["isError"] != json!(true) {
                book.report.silent_resends += 1;
                book.report.sample(format!(
                    "attempt {attempt} sent again with other notes: no notice that they were not recorded ({notice})"
                ));
            }
        }
        let fork_ack = notice["forkAckToken"].as_str().map(str::to_owned);
        let recorded_answer = self.answered_ack(client, attempt, args, result)?;
        let Some(fork_ack) = fork_ack.filter(|_| follow) else {
            return Some(recorded_answer);
        };
        let redone = json!({"ackToken": fork_ack, "output": changed["output"]});
        let branch = self.send_ack(client, slot, &redone)?;
        if branch.node == recorded_answer.node {
            self.other(format!(
                "the forkAckToken of a replay notice answered the recorded node {}, not a new branch",
                branch.node
            ));
        }
        Some(branch)
    }

    /// Checks an ack's answer against every earlier answer to the same attempt and records it.
    fn answered_ack(
        &self,
        client: usize,
        attempt: String,
        args: &Value,
        result: Value,
    ) -> Option<Resp> {
        let resp = self.saw(client, result)?;
        let mut book = self.book();
        match book.acks.get(&attempt).cloned() {
            None => {
                book.report.acks += 1;
                book.acks.insert(
                    attempt,
                    AckSeen {
                        session: resp.session.clone(),
                        node: resp.node.clone(),
                        result: resp.result.clone(),
                    },
                );
                let sent = book.sent_acks.entry(client).or_default();
                sent.push(args.clone());
                if sent.len() > SENT_ACKS {
                    sent.remove(0);
                }
            }
            Some(first) => {
                book.report.ack_replays += 1;
                if first.node != resp.node {
                    book.report.duplicate_attempts += 1;
                    book.report.sample(format!(
                        "attempt {attempt} answered with node {} and with node {}",
                        first.node, resp.node
                    ));
                } else if differs(&first.result, &resp.result) {
                    book.report.replay_mismatches += 1;
                    book.report.sample(format!(
                        "attempt {attempt}: a replay differs from the recorded response:\n  first: {}\n  again: {}",
                        first.result, resp.result
                    ));
                }
            }
        }
        drop(book);
        Some(resp)
    }

    /// Whether `args` acknowledge a step of a plain-workflow run with notes.
    fn plain_run_ack(&self, args: &Value) -> bool {
        let session = args["ackToken"].as_str().and_then(session_of);
        args["output"]["notesMarkdown"].is_string()
            && session.is_some_and(|s| !self.book().lang_runs.contains_key(&s))
    }

    /// Runs the CLI as its own process, output into files (a bundle may be large).
    fn cli(&self, args: &[&str]) -> Result<CliOutput, String> {
        self.spawn_cli(&self.data_dir(), args)?.wait(CLI_TIMEOUT)
    }

    /// Starts the CLI on `data_dir` (see [`Lab::command_in`]) without waiting for it.
    fn spawn_cli(&self, data_dir: &Path, args: &[&str]) -> Result<CliChild, String> {
        self.spawn_cli_with(data_dir, args, true)
    }

    /// [`Self::spawn_cli`], without the injected I/O faults when `faults` is false.
    fn spawn_cli_with(
        &self,
        data_dir: &Path,
        args: &[&str],
        faults: bool,
    ) -> Result<CliChild, String> {
        let n = self.cli_seq.fetch_add(1, Ordering::SeqCst);
        let out_path = self.dir.path().join("cli").join(format!("{n}.out"));
        let err_path = self.dir.path().join("cli").join(format!("{n}.err"));
        let out = File::create(&out_path).map_err(|e| format!("cli stdout file: {e}"))?;
        let err = File::create(&err_path).map_err(|e| format!("cli stderr file: {e}"))?;
        let child = self
            .command_in_with(data_dir, faults)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot spawn workrail {args:?}: {e}"))?;
        Ok(CliChild {
            child,
            what: format!("workrail {args:?}"),
            out_path,
            err_path,
        })
    }

    /// A failed CLI run: its `CODE: message` on stderr, classified like a tool error.
    fn cli_failed(&self, what: &str, session: &str, output: &CliOutput) {
        let line = output.stderr.lines().find(|l| l.starts_with("workrail: "));
        let code = line
            .and_then(|l| l.trim_start_matches("workrail: ").split(':').next())
            .and_then(ErrorCode::parse);
        match code {
            Some(ErrorCode::SessionLocked | ErrorCode::TokenSessionLocked) => {
                self.book()
                    .report
                    .locked(format!("{what}: {}", line.unwrap_or_default()));
            }
            Some(code) => self.failed_code(what, Some(session), code, line.unwrap_or_default()),
            None => self.other(format!("{what} failed: {}", output.stderr.trim())),
        }
    }

    fn corruption(&self, session: Option<&str>, text: String) {
        self.book()
            .corruption
            .push((session.map(str::to_owned), text));
    }
}

// -------------------------------------------------------------------------------------------
// Driving runs
// -------------------------------------------------------------------------------------------

/// A run's latest response as its clients know it, and where to fork once it is complete.
#[derive(Debug, Clone)]
struct Board {
    latest: Resp,
    /// The stateToken of an earlier node to branch from once `latest` is complete.
    fork_from: Option<String>,
    /// StateTokens of incomplete nodes seen on this board (recent ones), fork candidates.
    points: Vec<String>,
}

impl Board {
    const POINTS: usize = 256;

    fn new(first: Resp) -> Self {
        let mut board = Self {
            latest: first.clone(),
            fork_from: None,
            points: Vec::new(),
        };
        board.moved_to(first, &mut Rng::new(0));
        board
    }

    fn moved_to(&mut self, next: Resp, rng: &mut Rng) {
        if next.complete {
            self.fork_from = rng.pick(&self.points).cloned();
        } else {
            self.points.push(next.state_token.clone());
            if self.points.len() > Self::POINTS {
                self.points.remove(0);
            }
        }
        self.latest = next;
    }
}

impl Lab {
    /// One step of a run on `board`: acknowledge the latest pending step, or, when the run is
    /// complete, rehydrate the fork point and acknowledge its fresh attempt (a new branch).
    /// The board moves only if nobody moved it meanwhile, so every client holding it sends the
    /// same ackToken next.
    fn drive(&self, client: usize, slot: &Slot, board: &Mutex<Board>, rng: &mut Rng) -> bool {
        let (from, fork_from) = {
            let board = lock(board);
            (board.latest.clone(), board.fork_from.clone())
        };
        let at = if from.complete {
            let Some(fork_from) = fork_from else {
                self.other("a complete run without a fork point".to_owned());
                return false;
            };
            match self.rehydrate(client, slot, &fork_from) {
                Some(resp) => resp,
                None => return false,
            }
        } else {
            from.clone()
        };
        let Some(next) = self.ack(client, slot, &at, rng) else {
            return false;
        };
        let mut board = lock(board);
        if board.latest.node == from.node {
            board.moved_to(next, rng);
        }
        true
    }
}

fn pause_after_failure(ok: bool) {
    if !ok {
        // A client whose call failed for good tries its next step a moment later.
        std::thread::sleep(Duration::from_millis(20));
    }
}

// -------------------------------------------------------------------------------------------
// Scenarios
// -------------------------------------------------------------------------------------------

fn slots(n: usize, lab: &Lab) -> Result<Vec<Slot>, String> {
    let slots: Vec<Slot> = (0..n).map(Slot::new).collect();
    for slot in &slots {
        slot.get(lab)?;
    }
    Ok(slots)
}

/// A meeting point for `n` threads that gives up after `timeout`, so a thread that never comes
/// cannot hang the others.
#[derive(Debug)]
struct Gate {
    arrived: Mutex<usize>,
    all_here: Condvar,
    n: usize,
}

impl Gate {
    const TIMEOUT: Duration = Duration::from_secs(5);

    fn new(n: usize) -> Self {
        Self {
            arrived: Mutex::new(0),
            all_here: Condvar::new(),
            n,
        }
    }

    fn wait(&self) {
        let deadline = Instant::now() + Self::TIMEOUT;
        let mut arrived = lock(&self.arrived);
        *arrived += 1;
        if *arrived >= self.n {
            self.all_here.notify_all();
            return;
        }
        while *arrived < self.n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            arrived = match self.all_here.wait_timeout(arrived, left) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }
}

/// Scenario 1: N servers racing on one run, on their own runs, and on `start_workflow`.
pub fn race(config: &Config) -> Result<Report, String> {
    let n = config.servers;
    let mut lab = Lab::new(config, "race", n)?;
    let slots = slots(n, &lab)?;
    lab.start_driving(config.run_for);
    let mut rng = Rng::new(config.seed);
    // At least two clients share a run, so there is a race even with two servers.
    let sharing = (n / 2).max(2).min(n);
    // Client 0's first run, once it started.
    let shared: OnceLock<Mutex<Board>> = OnceLock::new();
    let (first_starts, shared_known, second_starts) = (Gate::new(n), Gate::new(n), Gate::new(n));
    let halfway = lab.deadline - config.run_for / 2;
    std::thread::scope(|scope| {
        for (client, slot) in slots.iter().enumerate() {
            let mut rng = rng.split();
            let (lab, shared) = (&lab, &shared);
            let (first_starts, shared_known, second_starts) =
                (&first_starts, &shared_known, &second_starts);
            scope.spawn(move || {
                // Every server starts the same workflow at the same instant, on a data
                // directory that holds none of its objects yet.
                first_starts.wait();
                let own = lab
                    .start(client, slot, fixture::LINEAR_ID)
                    .map(|r| Mutex::new(Board::new(r)));
                if client == 0
                    && let Some(own) = own.as_ref()
                {
                    let _ = shared.set(Mutex::new(lock(own).clone()));
                }
                shared_known.wait();
                let board = match (client < sharing, shared.get(), own.as_ref()) {
                    (true, Some(shared), _) => shared,
                    (_, _, Some(own)) => own,
                    _ => return,
                };
                let mut started_again = false;
                for _ in 0..MAX_OPS_PER_CLIENT {
                    if !lab.running() {
                        break;
                    }
                    if !started_again && Instant::now() >= halfway {
                        // Again at one instant, with a workflow nobody started yet: its pinned
                        // workflow and root snapshot are new objects written concurrently.
                        started_again = true;
                        second_starts.wait();
                        lab.start(client, slot, fixture::REVIEW_ID);
                    }
                    pause_after_failure(lab.drive(client, slot, board, &mut rng));
                }
            });
        }
    });
    finish(&lab, &slots)
}

/// Scenario 2: one writer, readers rehydrating, resuming, exporting and inspecting meanwhile.
pub fn readers(config: &Config) -> Result<Report, String> {
    let readers = config.half();
    let mut lab = Lab::new(config, "readers", readers + 1)?;
    let slots = slots(readers + 1, &lab)?;
    lab.start_driving(config.run_for);
    let mut rng = Rng::new(config.seed);
    let first = lab
        .start(0, &slots[0], fixture::LINEAR_ID)
        .ok_or_else(|| format!("the run did not start: {:?}", lab.book().report.samples))?;
    let board = Mutex::new(Board::new(first));
    std::thread::scope(|scope| {
        let (lab, board) = (&lab, &board);
        let mut writer_rng = rng.split();
        let writer = &slots[0];
        scope.spawn(move || {
            for _ in 0..MAX_OPS_PER_CLIENT {
                if !lab.running() {
                    break;
                }
                pause_after_failure(lab.drive(0, writer, board, &mut writer_rng));
            }
        });
        for (client, slot) in slots.iter().enumerate().skip(1) {
            let mut rng = rng.split();
            scope.spawn(move || {
                for op in 0..MAX_OPS_PER_CLIENT {
                    if !lab.running() {
                        break;
                    }
                    let view = lock(board).clone();
                    let ok = match (op + client as u64) % 4 {
                        0 => read_by_rehydrate(lab, client, slot, &view, &mut rng),
                        1 => read_by_resume(lab, client, slot, &view),
                        2 => read_by_export(lab, &view),
                        _ => read_by_inspect(lab, &view),
                    };
                    pause_after_failure(ok);
                }
            });
        }
    });
    finish(&lab, &slots)
}

/// A rehydrate with only a stateToken: the latest one, sometimes an earlier one.
fn read_by_rehydrate(lab: &Lab, client: usize, slot: &Slot, view: &Board, rng: &mut Rng) -> bool {
    let token = if rng.below(4) == 0 {
        rng.pick(&view.points)
            .cloned()
            .unwrap_or_else(|| view.latest.state_token.clone())
    } else {
        view.latest.state_token.clone()
    };
    lab.rehydrate(client, slot, &token).is_some()
}

/// `resume_session`: the live session is offered and no session is skipped as unhealthy.
fn read_by_resume(lab: &Lab, client: usize, slot: &Slot, view: &Board) -> bool {
    let session = &view.latest.session;
    let Some(result) = lab.call(slot, "resume_session", &json!({}), Some(session)) else {
        return false;
    };
    let structured = &result["structuredContent"];
    let skipped = structured["skippedUnhealthySessions"].as_u64().unwrap_or(0);
    if skipped > 0 {
        lab.corruption(
            None,
            format!("resume_session skipped {skipped} unhealthy session(s)"),
        );
    }
    let candidates = structured["candidates"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut offered = false;
    for candidate in &candidates {
        let (Some(sid), Some(token), Some(node)) = (
            candidate["sessionId"].as_str(),
            candidate["stateToken"].as_str(),
            candidate["nodeId"].as_str(),
        ) else {
            lab.other(format!("a resume candidate without ids: {candidate}"));
            continue;
        };
        offered |= sid == session;
        let mut book = lab.book();
        book.nodes
            .entry(sid.to_owned())
            .or_default()
            .insert(node.to_owned());
        book.latest
            .insert((client, sid.to_owned()), token.to_owned());
    }
    if !offered && skipped == 0 {
        lab.other(format!(
            "resume_session did not offer the live session {session}: {structured}"
        ));
    }
    offered
}

/// `workrail export`: a whole bundle (never salvage) holding every node committed before.
fn read_by_export(lab: &Lab, view: &Board) -> bool {
    let session = &view.latest.session;
    let n = lab.cli_seq.fetch_add(1, Ordering::SeqCst);
    let path = lab.dir.path().join("cli").join(format!("bundle-{n}.json"));
    let path_text = path.to_string_lossy().into_owned();
    let output = lab.cli(&["export", session, "-o", &path_text]);
    lab.book().report.cli_runs += 1;
    let output = match output {
        Ok(output) => output,
        Err(e) => {
            lab.other(e);
            return false;
        }
    };
    if !output.success {
        lab.cli_failed("workrail export", session, &output);
        return false;
    }
    let bundle = std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|text| serde_json::from_str::<Value>(&text).map_err(|e| e.to_string()));
    let _ = std::fs::remove_file(&path);
    let bundle = match bundle {
        Ok(bundle) => bundle,
        Err(e) => {
            lab.other(format!("workrail export wrote no readable bundle: {e}"));
            return false;
        }
    };
    if bundle.get("salvage").is_some() || output.stderr.contains("salvage") {
        lab.corruption(
            Some(session),
            format!(
                "a healthy session exported as salvage: {} {}",
                bundle["salvage"],
                output.stderr.trim()
            ),
        );
        return false;
    }
    let has_node = bundle["session"]["events"]
        .as_array()
        .is_some_and(|events| {
            events.iter().any(|e| {
                e["kind"] == "node_created" && e["scope"]["nodeId"] == json!(view.latest.node)
            })
        });
    if !has_node {
        lab.other(format!(
            "an export of {session} lacks node {}, committed before it started",
            view.latest.node
        ));
    }
    has_node
}

/// `workrail inspect`: healthy, and showing every node committed before it started.
fn read_by_inspect(lab: &Lab, view: &Board) -> bool {
    let session = &view.latest.session;
    let output = lab.cli(&["inspect", session]);
    lab.book().report.cli_runs += 1;
    let output = match output {
        Ok(output) => output,
        Err(e) => {
            lab.other(e);
            return false;
        }
    };
    if !output.success {
        lab.cli_failed("workrail inspect", session, &output);
        return false;
    }
    match health_of(&output.stdout) {
        Some("healthy") => {}
        health => {
            lab.corruption(
                Some(session),
                format!("workrail inspect {session} said health {health:?} mid-run"),
            );
            return false;
        }
    }
    if !output.stdout.contains(view.latest.node.as_str()) {
        lab.other(format!(
            "workrail inspect {session} lacks node {}, committed before it started",
            view.latest.node
        ));
        return false;
    }
    true
}

/// The health word of `workrail inspect`'s first line (`session …: N events, health X`).
fn health_of(inspect_stdout: &str) -> Option<&str> {
    let first = inspect_stdout.lines().next()?;
    let (_, health) = first.rsplit_once("health ")?;
    Some(health.trim())
}

/// A kill-storm client's current run and its responses (fork points).
#[derive(Debug, Default)]
struct StormClient {
    board: Option<Mutex<Board>>,
    history: Vec<Resp>,
    /// Runs it started.
    starts: u64,
}

impl StormClient {
    const HISTORY: usize = 128;

    fn remember(&mut self, resp: &Resp) {
        self.history.push(resp.clone());
        if self.history.len() > Self::HISTORY {
            self.history.remove(0);
        }
    }

    /// [`gc_storm`]: forgets the current run when its session was deleted or answered an error
    /// (the next step starts a new run).
    fn forget_dropped(&mut self, lab: &Lab) {
        let session = match &self.board {
            Some(board) => lock(board).latest.session.clone(),
            None => return,
        };
        if lab.book().dropped.contains(&session) {
            self.board = None;
            self.history.clear();
        }
    }
}

/// Scenario 3: servers killed with SIGKILL and restarted while their clients keep going.
pub fn kill_storm(config: &Config) -> Result<Report, String> {
    let n = config.half();
    let mut lab = Lab::new(config, "kill_storm", n)?;
    let slots = slots(n, &lab)?;
    lab.start_driving(config.run_for);
    let mut rng = Rng::new(config.seed);
    std::thread::scope(|scope| {
        let (lab, slots) = (&lab, &slots);
        let mut killer_rng = rng.split();
        scope.spawn(move || killer(lab, slots, &mut killer_rng));
        for (client, slot) in slots.iter().enumerate() {
            let mut rng = rng.split();
            scope.spawn(move || storm_client(lab, client, slot, &mut rng));
        }
    });
    finish(&lab, &slots)
}

/// The storm's killer: `kill -9` a random server every 50–300 ms and start a new one in its
/// place, until the driving ends.
fn killer(lab: &Lab, slots: &[Slot], rng: &mut Rng) {
    for _ in 0..MAX_OPS_PER_CLIENT {
        let pause = Duration::from_millis(50 + rng.below(251));
        std::thread::sleep(pause.min(lab.deadline.saturating_duration_since(Instant::now())));
        if !lab.running() {
            break;
        }
        let Some(slot) = rng.pick(slots) else {
            break;
        };
        match slot.kill_and_restart(lab) {
            Ok(true) => lab.book().report.kills += 1,
            Ok(false) => {}
            Err(e) => lab.other(format!("server {}: {e}", slot.index)),
        }
    }
}

/// One client of the storm: mostly advances, sometimes rehydrates, replays an answered ack,
/// forks from an older node, or starts another run.
fn storm_client(lab: &Lab, client: usize, slot: &Slot, rng: &mut Rng) {
    let mut me = StormClient::default();
    for _ in 0..MAX_OPS_PER_CLIENT {
        if !lab.running() {
            break;
        }
        let roll = rng.below(100);
        let ok = match (&me.board, roll) {
            (None, _) | (Some(_), 97..) => {
                match lab.start_storm_run(client, slot, me.starts == 0, rng) {
                    Some(resp) => {
                        me.starts += 1;
                        me.history.clear();
                        me.remember(&resp);
                        me.board = Some(Mutex::new(Board::new(resp)));
                        true
                    }
                    None => false,
                }
            }
            (Some(board), 0..55) => {
                let ok = lab.drive(client, slot, board, rng);
                if ok {
                    let latest = lock(board).latest.clone();
                    me.remember(&latest);
                }
                ok
            }
            (Some(board), 55..70) => {
                let token = lock(board).latest.state_token.clone();
                lab.rehydrate(client, slot, &token).is_some()
            }
            (Some(_), 70..85) => {
                let sent = lab
                    .book()
                    .sent_acks
                    .get(&client)
                    .cloned()
                    .unwrap_or_default();
                match rng.pick(&sent) {
                    // Half the time with other notes, on the plain workflow's runs (a language
                    // step's attempt may have been blocked, and recorded no notes).
                    Some(args) if rng.below(2) == 0 && lab.plain_run_ack(args) => {
                        let follow = rng.below(2) == 0;
                        lab.resend_with_other_notes(client, slot, args, follow)
                            .is_some()
                    }
                    Some(args) => lab.send_ack(client, slot, args).is_some(),
                    None => true,
                }
            }
            (Some(board), _) => {
                let ok = fork(lab, client, slot, board, &me, rng);
                if ok {
                    let latest = lock(board).latest.clone();
                    me.remember(&latest);
                }
                ok
            }
        };
        if !ok && lab.deletions {
            me.forget_dropped(lab);
        }
        pause_after_failure(ok);
    }
}

/// Rehydrates an older node of the current run and acknowledges its fresh attempt: a new
/// branch, which becomes the client's current one.
fn fork(
    lab: &Lab,
    client: usize,
    slot: &Slot,
    board: &Mutex<Board>,
    me: &StormClient,
    rng: &mut Rng,
) -> bool {
    let Some(old) = rng.pick(&me.history).cloned() else {
        return true;
    };
    let Some(at) = lab.rehydrate(client, slot, &old.state_token) else {
        return false;
    };
    if at.complete {
        return true;
    }
    let Some(next) = lab.ack(client, slot, &at, rng) else {
        return false;
    };
    lock(board).moved_to(next, rng);
    true
}

// -------------------------------------------------------------------------------------------
// The checks, with every server stopped
// -------------------------------------------------------------------------------------------

/// What the manifest attests of one session: its nodes and its recorded ack attempts.
#[derive(Debug, Default)]
struct Committed {
    nodes: HashSet<String>,
    /// attemptId -> the node each of its `advance_recorded` events advanced to (None: blocked).
    attempts: HashMap<String, Vec<Option<String>>>,
}

/// Reads the committed events: the segments named by the complete `segment_closed` lines of
/// the manifest, independently of the server's loader (whose health verdict `inspect` gives).
fn read_committed(session_dir: &Path) -> Result<Committed, String> {
    let manifest = std::fs::read_to_string(session_dir.join("manifest.jsonl"))
        .map_err(|e| format!("cannot read the manifest: {e}"))?;
    let mut committed = Committed::default();
    // Only `\n`-terminated lines are records; a torn tail is not.
    let complete = manifest.rsplit_once('\n').map_or("", |(whole, _)| whole);
    for line in complete.lines() {
        let record: Value = serde_json::from_str(line)
            .map_err(|e| format!("an unreadable manifest record ({e}): {line}"))?;
        if record["kind"] != "segment_closed" {
            continue;
        }
        let rel = record["segmentRelPath"].as_str().unwrap_or_default();
        let segment = std::fs::read_to_string(session_dir.join(rel))
            .map_err(|e| format!("cannot read the attested segment {rel}: {e}"))?;
        for line in segment.lines() {
            let event: Value = serde_json::from_str(line)
                .map_err(|e| format!("an unreadable event in {rel} ({e}): {line}"))?;
            committed.note(&event);
        }
    }
    Ok(committed)
}

impl Committed {
    /// Takes in one committed event.
    fn note(&mut self, event: &Value) {
        match event["kind"].as_str() {
            Some("node_created") => {
                if let Some(node) = event["scope"]["nodeId"].as_str() {
                    self.nodes.insert(node.to_owned());
                }
            }
            Some("advance_recorded") => {
                let data = &event["data"];
                let attempt = data["attemptId"].as_str().unwrap_or_default().to_owned();
                let to = data["outcome"]["toNodeId"].as_str().map(str::to_owned);
                self.attempts.entry(attempt).or_default().push(to);
            }
            _ => {}
        }
    }
}

/// The committed truth on PostgreSQL, read with plain SQL beside the servers' backend: an
/// append is one transaction, so every event row is committed truth.
struct PgTruth {
    sql: crate::postgres::Sql,
    schema: String,
}

impl PgTruth {
    fn new(target: &PgTarget) -> Self {
        Self {
            sql: crate::postgres::Sql::connect(&target.url),
            schema: target.schema.clone(),
        }
    }

    /// Every session row (a session id is `sess_` and base32: safe to quote as a literal).
    fn sessions(&self) -> Vec<String> {
        self.sql
            .rows(&format!(
                "SELECT session_id FROM \"{}\".sessions ORDER BY session_id",
                self.schema
            ))
            .iter()
            .map(|r| r.get::<_, String>(0))
            .filter(|s| s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
            .collect()
    }

    fn has_committed_record(&self, session: &str) -> bool {
        let rows = self.sql.rows(&format!(
            "SELECT count(*) FROM \"{}\".manifest WHERE session_id = '{session}' AND kind = 'segment_closed'",
            self.schema
        ));
        rows[0].get::<_, i64>(0) > 0
    }

    fn read_committed(&self, session: &str) -> Result<Committed, String> {
        let mut committed = Committed::default();
        for row in self.sql.rows(&format!(
            "SELECT body FROM \"{}\".events WHERE session_id = '{session}' ORDER BY event_index",
            self.schema
        )) {
            let body: String = row.get(0);
            let event: Value = serde_json::from_str(&body)
                .map_err(|e| format!("an unreadable event row ({e}): {body}"))?;
            committed.note(&event);
        }
        Ok(committed)
    }

    /// Content-addressed rows whose text does not hash to their key.
    fn damaged_objects(&self) -> (u64, Vec<String>) {
        let mut names = Vec::new();
        for table in ["snapshots", "workflows", "artifacts"] {
            for row in self.sql.rows(&format!(
                "SELECT digest FROM \"{}\".{table} \
                 WHERE regexp_replace(digest, '^sha256:', '') \
                       <> encode(sha256(convert_to(body, 'UTF8')), 'hex')",
                self.schema
            )) {
                names.push(format!("{table}/{}", row.get::<_, String>(0)));
            }
        }
        (names.len() as u64, names)
    }
}

/// Every file below `dir` (none when it does not exist).
fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// Whether the manifest holds at least one complete record.
fn has_committed_record(session_dir: &Path) -> bool {
    std::fs::read(session_dir.join("manifest.jsonl")).is_ok_and(|bytes| bytes.contains(&b'\n'))
}

/// Content-addressed objects whose bytes do not hash to their file name (temp files skipped).
fn damaged_objects(data_dir: &Path) -> (u64, Vec<String>) {
    let mut damaged = 0;
    let mut names = Vec::new();
    for dir in ["snapshots", "workflows/pinned", "artifacts"] {
        let Ok(entries) = std::fs::read_dir(data_dir.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(hex) = name.strip_suffix(".json") else {
                continue;
            };
            if name.starts_with(".tmp-") {
                continue;
            }
            let ok = std::fs::read(entry.path())
                .is_ok_and(|bytes| workrail_spec::jcs::sha256(&bytes).hex() == hex);
            if !ok {
                damaged += 1;
                names.push(format!("{dir}/{name}"));
            }
        }
    }
    (damaged, names)
}

/// Stops every server, then judges the data directory with fresh processes.
fn finish(lab: &Lab, slots: &[Slot]) -> Result<Report, String> {
    for slot in slots {
        if let Err(e) = slot.stop() {
            lab.other(format!("server {}: {e}", slot.index));
        }
    }
    let mut book = std::mem::take(&mut *lab.book());
    let mut report = std::mem::take(&mut book.report);

    // Health, by a fresh `workrail inspect` per session.
    let sessions_dir = lab.data_dir().join("sessions");
    let pg = lab.postgres.as_ref().map(PgTruth::new);
    let mut sessions: Vec<String> = match &pg {
        Some(pg) => pg.sessions(),
        None => std::fs::read_dir(&sessions_dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|name| name.starts_with("sess_"))
                    .collect()
            })
            .unwrap_or_default(),
    };
    sessions.sort();

    let mut healthy: HashMap<String, bool> = HashMap::new();
    let mut committed: HashMap<String, Committed> = HashMap::new();
    // [`gc_storm`]: directories of sessions some response named, without committed truth.
    let mut half_gone = 0;
    for session in &sessions {
        let dir = sessions_dir.join(session);
        let verdict = match lab.cli(&["inspect", session]) {
            Ok(out) if out.success => health_of(&out.stdout).map(str::to_owned),
            // A start killed before its first commit leaves a directory without committed
            // truth, which is no session (no response ever named it: the ledger checks that).
            Ok(out)
                if out.stderr.contains("SESSION_NOT_FOUND")
                    && !match &pg {
                        Some(pg) => pg.has_committed_record(session),
                        None => has_committed_record(&dir),
                    } =>
            {
                if lab.deletions && book.nodes.contains_key(session) {
                    // It had committed truth (a response named it): a deletion left it behind,
                    // or a server made it again.
                    half_gone += 1;
                    report.half_deleted += 1;
                    report.sample(format!(
                        "session {session} was deleted but left {}",
                        lab.remains_of(session, pg.as_ref())
                    ));
                } else {
                    report.uncommitted_dirs += 1;
                }
                continue;
            }
            Ok(out) => Some(format!("(inspect failed: {})", out.stderr.trim())),
            Err(e) => Some(format!("(inspect did not run: {e})")),
        };
        let is_healthy = verdict.as_deref() == Some("healthy");
        if !is_healthy {
            report.unhealthy_sessions += 1;
            report.sample(format!("session {session} afterwards: health {verdict:?}"));
            if lab.deletions {
                // Neither healthy nor wholly absent.
                report.half_deleted += 1;
            }
        }
        healthy.insert(session.clone(), is_healthy);
        let read = match &pg {
            Some(pg) => pg.read_committed(session),
            None => read_committed(&dir),
        };
        match read {
            Ok(c) => {
                committed.insert(session.clone(), c);
            }
            Err(e) => {
                report.sample(format!("session {session}: {e}"));
                committed.insert(session.clone(), Committed::default());
            }
        }
    }
    report.sessions = sessions.len() as u64 - report.uncommitted_dirs - half_gone;
    if lab.deletions {
        lab.judge_leftovers(&book, pg.as_ref(), &mut report);
    }
    // On PostgreSQL the database is all the servers share: no server writes a file into its
    // data directory (sessions, objects and keys are rows; caches stay in memory) but the
    // records of the machine's running servers (`servers/`, decision D85), which a killed
    // server leaves behind.
    if pg.is_some() {
        let mut written = Vec::new();
        for root in [lab.data_dir(), lab.dir.path().join("machines")] {
            files_under(&root, &mut written);
        }
        let server_record = |path: &Path| {
            path.parent()
                .and_then(Path::file_name)
                .is_some_and(|d| d == workrail::store::layout::SERVERS_DIR)
        };
        // [`gc_storm`]: the retention config gc creates in the data directory it runs in.
        let gc_config = lab.gc_data_dir().join(workrail::gc::RETENTION_CONFIG_PATH);
        for path in written
            .into_iter()
            .filter(|p| !server_record(p) && *p != gc_config)
        {
            report.other_errors += 1;
            report.sample(format!(
                "a server on PostgreSQL wrote {} into a data directory",
                path.display()
            ));
        }
    }
    let (damaged, damaged_names) = match &pg {
        Some(pg) => pg.damaged_objects(),
        None => damaged_objects(&lab.data_dir()),
    };
    report.damaged_objects = damaged;
    for name in damaged_names {
        report.sample(format!("damaged object {name}"));
    }

    // Lost events: every node a client was shown and every answered attempt is committed (in
    // [`gc_storm`], of every session that still exists).
    let empty = Committed::default();
    for (session, nodes) in &book.nodes {
        let log = match committed.get(session) {
            Some(log) => log,
            None if lab.deletions => {
                report.sessions_deleted += 1;
                continue;
            }
            None => &empty,
        };
        let mut lost = 0;
        for node in nodes {
            if !log.nodes.contains(node) {
                report.lost_events += 1;
                lost += 1;
                if lost <= LOST_SAMPLES_PER_SESSION {
                    report.sample(format!(
                        "node {node} of {session} was answered but is not committed"
                    ));
                }
            }
        }
        if lost > LOST_SAMPLES_PER_SESSION {
            report.sample(format!(
                "… {lost} answered nodes of {session} are not committed (of {} answered, {} committed)",
                nodes.len(),
                log.nodes.len()
            ));
        }
    }
    let mut lost_attempts: HashMap<&str, u64> = HashMap::new();
    for (attempt, seen) in &book.acks {
        let log = match committed.get(&seen.session) {
            Some(log) => log,
            None if lab.deletions => continue,
            None => &empty,
        };
        let recorded = log
            .attempts
            .get(attempt)
            .is_some_and(|to| to.iter().any(|t| t.as_deref() == Some(seen.node.as_str())));
        if !recorded {
            report.lost_events += 1;
            let lost = lost_attempts.entry(seen.session.as_str()).or_default();
            *lost += 1;
            if *lost <= LOST_SAMPLES_PER_SESSION as u64 {
                report.sample(format!(
                    "attempt {attempt} of {} was answered with node {} but that advance is not committed",
                    seen.session, seen.node
                ));
            }
        }
    }
    // Duplicate attempts: one advance_recorded per attemptId.
    for (session, log) in &committed {
        for (attempt, records) in &log.attempts {
            if records.len() > 1 {
                report.duplicate_attempts += records.len() as u64 - 1;
                report.sample(format!(
                    "attempt {attempt} of {session} recorded {records:?}"
                ));
            }
        }
    }

    // Every client's latest stateToken of every session rehydrates on a fresh server (in
    // [`gc_storm`], of every session that still exists; a few of the deleted ones must answer
    // that they are gone).
    let check = Conn::spawn(lab, "check")?;
    let mut deleted_tokens = Vec::new();
    for ((client, session), token) in &book.latest {
        if lab.deletions && !committed.contains_key(session) {
            deleted_tokens.push((session.clone(), token.clone()));
            continue;
        }
        let asked = payload(token)
            .map(|p| p.node_id().to_string())
            .unwrap_or_default();
        let answer = check.call("continue_workflow", &json!({"stateToken": token}));
        let problem = match answer {
            Ok(Answer::Ok(result)) => match Resp::parse(result) {
                Ok(resp) if resp.node == asked => None,
                Ok(resp) => Some(format!("answered for node {}", resp.node)),
                Err(e) => Some(e),
            },
            Ok(Answer::Err(e)) => Some(format!("{}: {}", e.code, e.message)),
            Err(e) => Some(format!("{e:?}")),
        };
        if let Some(problem) = problem {
            report.stale_tokens += 1;
            report.sample(format!(
                "client {client}'s latest stateToken of {session} (node {asked}) does not rehydrate: {problem}"
            ));
        }
    }
    if lab.deletions {
        gc_storm::check_deleted_tokens(&check, &deleted_tokens, &mut report);
        gc_storm::judge_session_errors(&mut book, &committed, &mut report);
    }
    if let Err(e) = check.close() {
        report.other_errors += 1;
        report.sample(format!("the check server: {e}"));
    }

    // Corruption reports are false when the session turned out healthy (a report without a
    // session: when every session is healthy and every object intact).
    let all_sound = report.unhealthy_sessions == 0 && report.damaged_objects == 0;
    for (session, text) in &book.corruption {
        let sound = match session {
            Some(session) => healthy.get(session).copied().unwrap_or(false),
            None => all_sound,
        };
        if sound {
            report.false_corruption += 1;
            report.sample(format!("false corruption: {text}"));
        } else {
            report.sample(format!("corruption (the session is damaged): {text}"));
        }
    }
    Ok(report)
}

/// A short walk on one server, then the last committed transaction is cut from the manifest
/// (as if it had never been written), then the checks: they must count the answered advance
/// as lost and its token as stale. Proves the oracle sees a lost commit.
pub fn lost_commit_is_caught(config: &Config) -> Result<Report, String> {
    let mut lab = Lab::new(config, "lost_commit", 1)?;
    let slots = slots(1, &lab)?;
    lab.start_driving(config.run_for);
    let mut rng = Rng::new(config.seed);
    let first = lab
        .start(0, &slots[0], fixture::LINEAR_ID)
        .ok_or_else(|| format!("the run did not start: {:?}", lab.book().report.samples))?;
    let board = Mutex::new(Board::new(first));
    for _ in 0..2 {
        if !lab.drive(0, &slots[0], &board, &mut rng) {
            return Err(format!("the walk failed: {:?}", lab.book().report.samples));
        }
    }
    for slot in &slots {
        slot.stop()?;
    }
    let session = lock(&board).latest.session.clone();
    if let Some(target) = &lab.postgres {
        cut_last_transaction(target, &session)?;
        return finish(&lab, &slots);
    }
    let manifest = lab
        .data_dir()
        .join("sessions")
        .join(&session)
        .join("manifest.jsonl");
    let text = std::fs::read_to_string(&manifest).map_err(|e| e.to_string())?;
    // Keep every record before the last segment_closed (so its pins go too).
    let lines: Vec<&str> = text.lines().collect();
    let last_close = lines
        .iter()
        .rposition(|l| l.contains("\"kind\":\"segment_closed\""))
        .ok_or("no segment_closed record")?;
    let kept: String = lines[..last_close]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&manifest, kept).map_err(|e| e.to_string())?;
    finish(&lab, &slots)
}

/// On PostgreSQL: the last `segment_closed` record of `session`, every manifest record after
/// it, its events, and the session's next indices set back, as if that append had never
/// committed.
fn cut_last_transaction(target: &PgTarget, session: &str) -> Result<(), String> {
    if !session
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(format!("an unexpected session id {session:?}"));
    }
    let sql = crate::postgres::Sql::connect(&target.url);
    let schema = &target.schema;
    let rows = sql.rows(&format!(
        "SELECT manifest_index, body FROM \"{schema}\".manifest \
         WHERE session_id = '{session}' AND kind = 'segment_closed' \
         ORDER BY manifest_index DESC LIMIT 1"
    ));
    let row = rows.first().ok_or("no segment_closed record")?;
    let close: i64 = row.get(0);
    let body: String = row.get(1);
    let record: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    let first = record["firstEventIndex"]
        .as_i64()
        .ok_or("a segment_closed record without firstEventIndex")?;
    sql.run(&format!(
        "BEGIN; \
         DELETE FROM \"{schema}\".manifest WHERE session_id = '{session}' AND manifest_index >= {close}; \
         DELETE FROM \"{schema}\".events WHERE session_id = '{session}' AND event_index >= {first}; \
         UPDATE \"{schema}\".sessions SET next_event_index = {first}, next_manifest_index = {close} \
          WHERE session_id = '{session}'; \
         COMMIT;"
    ));
    Ok(())
}

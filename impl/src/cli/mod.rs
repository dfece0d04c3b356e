//! The `workrail` command line: the MCP server over stdio and a few operator commands.
//!
//! ```text
//! workrail                      serve MCP over stdio (same as `workrail mcp`)
//! workrail mcp                  serve MCP over stdio
//! workrail serve --http [ADDR]  serve MCP over Streamable HTTP (default 127.0.0.1:0; prints its URL; --tls-cert/--tls-key)
//! workrail validate <file>      compile a workflow source: its errors, or its workflowHash (--fix, --strict)
//! workrail migrate <file>       rewrite a workflow of the 3.x spelling in the v2 spelling
//! workrail inspect <sessionId>  print a session's runs (status, preferred tip, the DAG as a tree with notes, blocked attempts and lanes; --all: every node; --json)
//! workrail repair <sessionId>   append snapshot pins a torn write left missing (audited; PostgreSQL: check)
//! workrail keys rotate          rotate the token signing key
//! workrail keys client add|revoke|list   client keys of `serve --http` (stored hashed)
//! workrail export <sessionId> [-o file]   export a session as one JSON bundle (stdout by default)
//! workrail import <file>        import a bundle; prints the session id and fresh per-run tokens
//! workrail gc [--dry-run] [--ttl-days N]  delete expired sessions, then unreachable CAS objects
//! workrail config [--json] | config set <key> <value>   desired vs applied config, restart triggers; edits
//! workrail workflows list|show|save|copy   workflows, sources, compiled and pinned snapshots (see `control_plane`)
//! workrail console [--port N] [--open]    serve the read-only Console on 127.0.0.1 (prints its link)
//! ```
//!
//! Exit codes: 0 success; 1 the command ran and failed (invalid workflow, unknown session,
//! storage or configuration error); 2 bad command-line usage. stdout carries only the command's
//! result (for `mcp`: only MCP messages); diagnostics and logs go to stderr.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use workrail_spec::error::ErrorEnvelope;

mod authoring;
mod control_plane;

use crate::bundle::Progress as _;
use crate::protocol::{Workrail, WorkrailConfig};

/// The environment variable holding the log filter (`tracing` env-filter syntax).
pub const LOG_ENV: &str = "WORKRAIL_LOG";
/// The log filter when `WORKRAIL_LOG` is unset.
pub const DEFAULT_LOG_FILTER: &str = "warn";

/// Exit code when the command ran and reported a failure.
pub const EXIT_FAILURE: u8 = 1;
/// Exit code for command-line usage errors (clap's convention).
pub const EXIT_USAGE: u8 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "workrail",
    version,
    about = "WorkRail v2: a durable, rewind-safe workflow engine that agents drive over MCP.",
    long_about = "WorkRail v2: a durable, rewind-safe workflow engine that agents drive over MCP.\n\nWithout a command, `workrail` serves MCP over stdio (same as `workrail mcp`).\n\nEnvironment:\n  WORKRAIL_DATA_DIR       where sessions, snapshots and keys live (default: the platform data dir, e.g. ~/.local/share/workrail); created on first use\n  WORKRAIL_WORKFLOW_DIRS  extra workflow directories (a platform path list, like PATH)\n  WORKRAIL_WORKFLOW_REPOS  git repositories of workflows: comma-separated URLs, or a JSON array of {url, branch, path}; synced on start and every WORKRAIL_WORKFLOW_REPOS_SYNC_MINUTES (default 5)\n  WORKRAIL_LOG            log filter for stderr, e.g. `info` or `workrail=debug` (default: warn)\n  WORKRAIL_BUNDLE_MAX_BYTES  the largest bundle `import` reads (default: 268435456, 256 MiB)\n  WORKRAIL_CACHE_MB       memory for caches of sessions, snapshots and workflows, in MiB (default: 64; 0 caches nothing)\n  WORKRAIL_RESIDENT_EVENTS  how many of a session's newest events a server keeps parsed; older ones are read again from disk or PostgreSQL when needed (default: 1024, at least 64)\n  WORKRAIL_STORE          a postgres:// URL to keep sessions, objects and keys in PostgreSQL (default: the file store in the data directory)\n  WORKRAIL_STORE_SCHEMA   the PostgreSQL schema (default: workrail)\n  WORKRAIL_STORE_TIMEOUT_MS  how long one PostgreSQL call may wait for the database, in ms (default: 10000)\n  WORKRAIL_STORE_WORKERS  PostgreSQL worker threads: requests of different sessions run side by side (default: 8)"
)]
struct Cli {
    /// Data directory (overrides WORKRAIL_DATA_DIR).
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// The store: a postgres:// or postgresql:// URL (overrides WORKRAIL_STORE); empty or
    /// unset: the file store in the data directory.
    #[arg(long, global = true, value_name = "URL")]
    store: Option<String>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the MCP protocol over stdin/stdout (the default command).
    ///
    /// stdout carries only MCP messages; logs go to stderr. Exits with code 0 when the client
    /// closes stdin.
    Mcp,
    /// Serve the same MCP tools over Streamable HTTP, to any number of clients at once.
    ///
    /// Prints one line, `WorkRail MCP over HTTP: http://<address>/mcp`, then serves until
    /// killed. Every request must carry `Authorization: Bearer <key>` with a key from
    /// `workrail keys client add <name>`; a request with an `Origin` other than the server's
    /// own is refused. With `--tls-cert` and `--tls-key` it serves HTTPS; a non-loopback
    /// address without them is refused unless `--allow-plain-http` says a TLS reverse proxy
    /// (or a private network) is in front.
    Serve {
        /// Listen on ADDR (ip:port); without a value, or without the flag's value,
        /// 127.0.0.1 on a free port.
        #[arg(
            long,
            value_name = "ADDR",
            num_args = 0..=1,
            default_missing_value = crate::mcp::http::DEFAULT_ADDR,
            required = true
        )]
        http: SocketAddr,
        /// The server's certificate chain (PEM): serve HTTPS. Also WORKRAIL_HTTP_TLS_CERT.
        #[arg(long, value_name = "FILE", requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// The certificate's private key (PEM). Also WORKRAIL_HTTP_TLS_KEY.
        #[arg(long, value_name = "FILE", requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// Serve plain HTTP on a non-loopback address (refused otherwise): only behind a TLS
        /// reverse proxy or on a network where clear-text keys are acceptable.
        #[arg(long)]
        allow_plain_http: bool,
    },
    /// Compile a workflow source file and report its errors or its workflowHash.
    ///
    /// Prints every problem (JSON pointer, message, fix) and exits 1 when the workflow is
    /// invalid; prints the workflowHash and exits 0 when it compiles, with its warnings (fields
    /// of the WorkRail 3.x spelling name their v2 equivalent) and whether `workrail migrate`
    /// would rewrite it cleanly. Routines and delegation targets are looked up in the configured
    /// workflow sources (bundled, `<cwd>/workflows`, WORKRAIL_WORKFLOW_DIRS, the user directory).
    Validate {
        /// The workflow JSON file.
        file: PathBuf,
        /// Validate as a bundled workflow (the reserved `wr.*` namespace) instead of a project
        /// workflow.
        #[arg(long)]
        bundled: bool,
        /// Apply the auto-fixes of the errors to the file (written atomically; only the bytes a
        /// fix touches change), print each one, then validate the result.
        #[arg(long)]
        fix: bool,
        /// Treat warnings as errors (exit 1 when there is any).
        #[arg(long)]
        strict: bool,
    },
    /// Rewrite a workflow of the WorkRail 3.x spelling in the native v2 spelling where one
    /// exists (a namespaced id, `outputContract` -> `output.contractRef`, ...), and list, per
    /// JSON pointer, the fields that have none.
    ///
    /// The file is rewritten atomically, editing only the migrated fields; nothing is written
    /// when the result would not compile.
    Migrate {
        /// The workflow JSON file.
        file: PathBuf,
        /// Migrate as a bundled workflow (keeps the reserved `wr.*` namespace).
        #[arg(long)]
        bundled: bool,
        /// Print the migrated workflow to stdout instead of writing the file.
        #[arg(long)]
        dry_run: bool,
    },
    /// List the sessions of the data directory, newest first: id, last activity, health, and
    /// each run's workflow, label and status.
    Sessions {
        /// Print JSON (an array, newest first) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print a session's run DAG, preferred tip, status and outputs.
    Inspect {
        /// The session id (`session.sessionId` in any execution response).
        session_id: String,
        /// List every node (by default the middle of a long unbranched stretch is one line).
        #[arg(long)]
        all: bool,
        /// Print JSON instead of text: every run that is no lane, each with every node, and
        /// each parallel step's node with its lanes, their fan-in and their runs.
        #[arg(long)]
        json: bool,
    },
    /// Restore the snapshot pins a session's last write lacks (after a write torn by a power
    /// cut), when every snapshot to pin is intact in the snapshot store.
    ///
    /// Never automatic: load reports such a session as corrupt until this is run. Prints what it
    /// appended; refuses, writing nothing, for any other damage and names what is missing.
    Repair {
        /// The session id (`session.sessionId` in any execution response, or the one a
        /// `SESSION_CORRUPT` error names).
        session_id: String,
    },
    /// Hold a session's writer lock until stdin closes, for maintenance by hand.
    ///
    /// Prints `locked <sessionId>` once the lock is held. Meanwhile every server's
    /// acknowledgement on the session answers TOKEN_SESSION_LOCKED (retryable) and writes
    /// nothing; reads, rehydrates and other sessions go on. Closing stdin (Ctrl-D) or ending the
    /// process releases it. On PostgreSQL the database ends an idle lock holder after six times
    /// WORKRAIL_STORE_TIMEOUT_MS, so there the command releases the lock itself after five
    /// times (50 s by default), says so and exits 1.
    Lock {
        /// The session id (`session.sessionId` in any execution response).
        session_id: String,
    },
    /// Export a session as one self-verifying JSON bundle (no tokens).
    ///
    /// Writes the bundle to stdout, or to FILE with -o. A corrupt_tail session exports its
    /// validated prefix flagged as salvage (with a warning on stderr); corrupt_head and
    /// unknown_version sessions are refused.
    Export {
        /// The session id (`session.sessionId` in any execution response).
        session_id: String,
        /// Write the bundle to this file instead of stdout.
        #[arg(short = 'o', long = "output", value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Import a bundle written by `workrail export`.
    ///
    /// Validates the whole bundle before writing anything; a session id that already exists here
    /// is imported as a new session. Prints the session id and, for every run, fresh tokens for
    /// its preferred tip, so `continue_workflow` works right away.
    Import {
        /// The bundle file (`-` reads stdin).
        file: PathBuf,
        /// Import a salvage bundle (the validated prefix of a corrupt session) as a normal,
        /// continuable session; without it salvage bundles are refused.
        #[arg(long)]
        allow_salvage: bool,
    },
    /// Delete sessions older than the retention TTL, then unreachable snapshots, pinned
    /// workflows and artifacts.
    ///
    /// Retention lives in <data dir>/config/retention.json (`{"ttlDays": 60, "keep":
    /// ["sess_..."]}`, created on first use). Any corrupt session puts gc in safe mode: nothing is
    /// deleted and the command exits 1.
    Gc {
        /// Report what would be deleted without deleting anything.
        #[arg(long)]
        dry_run: bool,
        /// Override the configured TTL (days since a session's last change) for this run.
        #[arg(long, value_name = "N")]
        ttl_days: Option<u64>,
    },
    /// Desired versus applied config of the running servers, with restart triggers; `config set`
    /// edits a feature flag or a preference default.
    Config(control_plane::ConfigArgs),
    /// List workflows, show a source, compiled or pinned snapshot, save a source, copy a wr.*
    /// workflow to an editable namespace.
    Workflows(control_plane::WorkflowsArgs),
    /// Serve the Console: a read-only web view of the sessions, their run DAGs and nodes, on
    /// 127.0.0.1 only.
    ///
    /// Prints one line, `WorkRail Console: http://127.0.0.1:<port>/?token=<secret>`, then serves
    /// until killed. The secret is new on every launch; only a browser that opened that link
    /// (or holds its cookie) is let in. Writes nothing to the data directory.
    Console {
        /// The port to listen on (0 or absent: a free port).
        #[arg(long, value_name = "N", default_value_t = 0)]
        port: u16,
        /// Also open the link in the default browser (best effort).
        #[arg(long)]
        open: bool,
    },
    /// Workflow repositories (`WORKRAIL_WORKFLOW_REPOS`): `sync` fetches each one now into the
    /// data directory's cache (a running server also syncs on start and every
    /// WORKRAIL_WORKFLOW_REPOS_SYNC_MINUTES, default 5).
    Repos {
        #[command(subcommand)]
        action: ReposAction,
    },
    /// Manage the token signing keyring.
    Keys {
        #[command(subcommand)]
        action: KeysAction,
    },
}

#[derive(Debug, Subcommand)]
enum ReposAction {
    /// Fetch every configured repository now; exits 1 when one failed (its last good copy stays).
    Sync,
}

#[derive(Debug, Subcommand)]
enum KeysAction {
    /// Generate a new signing key; the previous key stays valid for verification.
    Rotate,
    /// The keys clients of `workrail serve --http` present (the data directory keeps only
    /// their SHA-256, in keys/clients.json).
    Client {
        #[command(subcommand)]
        action: ClientAction,
    },
}

#[derive(Debug, Subcommand)]
enum ClientAction {
    /// Make a key for a new client and print it on stdout: it is shown this once.
    Add {
        /// The client's name (letters, digits, '.', '_', '-'; at most 64).
        name: String,
    },
    /// Revoke a client's key: a running server refuses it from its next request.
    Revoke {
        /// The client's name (as `workrail keys client list` shows it).
        name: String,
    },
    /// List the clients that hold a key (never the keys).
    List {
        /// Print JSON (an array of {name, keySha256, createdAt}).
        #[arg(long)]
        json: bool,
    },
}

/// Where `workrail mcp` and `workrail serve` speak MCP.
#[derive(Debug, Clone)]
enum Transport {
    Stdio,
    Http(crate::mcp::http::HttpOptions),
}

/// The TLS files of `serve --http`: the flags, else WORKRAIL_HTTP_TLS_CERT and
/// WORKRAIL_HTTP_TLS_KEY (both or neither; decision D190).
fn http_tls_files(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<Option<crate::mcp::http::TlsFiles>, String> {
    let from_env = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let (cert, key) = match (cert, key) {
        (Some(cert), Some(key)) => (Some(cert), Some(key)),
        _ => (
            from_env("WORKRAIL_HTTP_TLS_CERT"),
            from_env("WORKRAIL_HTTP_TLS_KEY"),
        ),
    };
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(crate::mcp::http::TlsFiles { cert, key })),
        (None, None) => Ok(None),
        (Some(_), None) | (None, Some(_)) => Err(
            "WORKRAIL_HTTP_TLS_CERT and WORKRAIL_HTTP_TLS_KEY go together: set both (the certificate chain and its private key, PEM) or neither.".to_owned(),
        ),
    }
}

/// The process entry point: parses `std::env::args_os()` and runs the command.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // `--help` and `--version` print to stdout and succeed; usage errors exit 2.
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    init_logging();
    match run(cli) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("workrail: {message}");
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// Logs to stderr only (stdout belongs to MCP), filtered by `WORKRAIL_LOG` (default `warn`).
fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var(LOG_ENV) {
        Ok(spec) if !spec.trim().is_empty() => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            eprintln!(
                "workrail: ignoring invalid {LOG_ENV}={spec:?} ({e}); using `{DEFAULT_LOG_FILTER}`"
            );
            EnvFilter::new(DEFAULT_LOG_FILTER)
        }),
        _ => EnvFilter::new(DEFAULT_LOG_FILTER),
    };
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter)
        .with_target(true)
        .try_init();
}

fn run(cli: Cli) -> Result<ExitCode, String> {
    let store = crate::protocol::StoreChoice::resolve(cli.store.as_deref())?;
    let open = |data_dir: Option<PathBuf>| open(data_dir, &store);
    match cli.command.unwrap_or(Command::Mcp) {
        Command::Mcp => serve_mcp(cli.data_dir, &store, Transport::Stdio),
        Command::Serve {
            http,
            tls_cert,
            tls_key,
            allow_plain_http,
        } => {
            let options = crate::mcp::http::HttpOptions {
                addr: http,
                tls: http_tls_files(tls_cert, tls_key)?,
                allow_plain_http,
            };
            // Before the store opens: a refused address or an unreadable certificate is
            // reported at once.
            options.check()?;
            if let Some(files) = &options.tls {
                crate::mcp::http::tls_config(files)?;
            }
            serve_mcp(cli.data_dir, &store, Transport::Http(options))
        }
        Command::Validate {
            file,
            bundled,
            fix,
            strict,
        } => Ok(authoring::validate(
            &file,
            authoring::ValidateOptions {
                bundled,
                fix,
                strict,
            },
        )),
        Command::Migrate {
            file,
            bundled,
            dry_run,
        } => Ok(authoring::migrate(&file, bundled, dry_run)),
        Command::Config(args) => control_plane::config(cli.data_dir, args),
        Command::Workflows(args) => control_plane::workflows(cli.data_dir, args),
        Command::Sessions { json } => {
            let data_dir = match &cli.data_dir {
                Some(dir) => dir.clone(),
                None => WorkrailConfig::from_env()?.data_dir,
            };
            let workrail = open(cli.data_dir)?;
            use crate::gc::RetentionClock as _;
            let clock = crate::gc::OsRetentionClock::new(data_dir);
            let rows = workrail
                .sessions_by_activity(&|p| clock.modified(p).ok().flatten())
                .map_err(|e| envelope_text(&e))?;
            let blocked = blocked_runs(&workrail, &rows);
            print_stdout(&sessions_text(rows, &blocked, json)?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Inspect {
            session_id,
            all,
            json,
        } => {
            let workrail = open(cli.data_dir)?;
            let inspected = if json {
                workrail.inspect_session_json(&session_id).and_then(|view| {
                    serde_json::to_string_pretty(&view).map_err(|e| {
                        crate::protocol::invariant(format!(
                            "the inspection cannot be written as JSON: {e}"
                        ))
                    })
                })
            } else {
                workrail.inspect_session(&session_id, all)
            };
            // The process ends here: freeing a large session's caches one allocation at a time
            // buys nothing, and a read command holds no lock and buffers no write.
            std::mem::forget(workrail);
            match inspected {
                Ok(text) => {
                    print_stdout(&text);
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => Err(envelope_text(&e)),
            }
        }
        Command::Repair { session_id } => {
            let workrail = open(cli.data_dir)?;
            let report = workrail
                .repair_session(&session_id)
                .map_err(|e| envelope_text(&e))?;
            print_stdout(&report);
            Ok(ExitCode::SUCCESS)
        }
        Command::Lock { session_id } => {
            let workrail = open(cli.data_dir)?;
            let held = workrail
                .hold_session_lock(&session_id)
                .map_err(|e| envelope_text(&e))?;
            print_stdout(&format!("locked {session_id}"));
            let limit = workrail.lock_hold_limit();
            let (closed, stdin_closed) = std::sync::mpsc::channel::<()>();
            std::thread::spawn(move || {
                // Any end of stdin (EOF or an error) ends the hold.
                let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
                let _ = closed.send(());
            });
            let outcome = match limit {
                Some(limit) => stdin_closed.recv_timeout(limit).map_err(|_| limit),
                None => stdin_closed.recv().map_err(|_| std::time::Duration::ZERO),
            };
            drop(held);
            match outcome {
                Ok(()) => {
                    eprintln!("released {session_id}");
                    Ok(ExitCode::SUCCESS)
                }
                Err(limit) => Err(format!(
                    "released {session_id} after {} s (five times WORKRAIL_STORE_TIMEOUT_MS): PostgreSQL ends an idle lock holder soon after; raise WORKRAIL_STORE_TIMEOUT_MS to hold it longer",
                    limit.as_secs()
                )),
            }
        }
        Command::Export { session_id, output } => {
            let workrail = open(cli.data_dir)?;
            let bar = StderrProgress::new();
            let exported = crate::bundle::export_bundle(
                &workrail,
                &session_id,
                std::time::SystemTime::now(),
                &bar,
            );
            bar.finish();
            let exported = exported.map_err(|e| envelope_text(&e))?;
            print_bundle_warnings(&exported.warnings);
            // The bundle is written part by part, then a newline: its text is never held whole.
            let write = |out: &mut dyn Write| -> std::io::Result<()> {
                let mut out = std::io::BufWriter::new(out);
                exported.write_to(&mut out)?;
                out.write_all(b"\n")?;
                out.flush()
            };
            match output {
                Some(path) => {
                    std::fs::File::create(&path)
                        .and_then(|mut f| write(&mut f))
                        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                    eprintln!(
                        "exported session {session_id} to {}{}",
                        path.display(),
                        if exported.is_salvage() {
                            " (salvage: validated prefix only)"
                        } else {
                            ""
                        }
                    );
                }
                None => write(&mut std::io::stdout().lock())
                    .map_err(|e| format!("cannot write the bundle to stdout: {e}"))?,
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Import {
            file,
            allow_salvage,
        } => {
            let cap = crate::bundle::max_bundle_bytes()?;
            let read = if file.as_os_str() == "-" {
                crate::bundle::read_capped(
                    std::io::stdin().lock(),
                    None,
                    cap,
                    "the bundle on stdin",
                )
            } else {
                let what = file.display().to_string();
                let f =
                    std::fs::File::open(&file).map_err(|e| format!("cannot read {what}: {e}"))?;
                // Only a regular file's length is its content's size (`/dev/zero` says 0).
                let size = f
                    .metadata()
                    .ok()
                    .filter(std::fs::Metadata::is_file)
                    .map(|m| m.len());
                crate::bundle::read_capped(f, size, cap, &what)
            };
            let text = read.map_err(|e| envelope_text(&e))?;
            let workrail = open(cli.data_dir)?;
            let bar = StderrProgress::new();
            // Given by value: the text is freed once the bundle is parsed.
            let report =
                workrail.import_bundle(text, &crate::bundle::ImportOptions { allow_salvage }, &bar);
            bar.finish();
            let report = report.map_err(|e| envelope_text(&e))?;
            print_bundle_warnings(&report.warnings);
            print_stdout(&import_text(&report));
            Ok(ExitCode::SUCCESS)
        }
        Command::Gc { dry_run, ttl_days } => {
            let workrail = open(cli.data_dir.clone())?;
            let data_dir = match cli.data_dir {
                Some(dir) => dir,
                None => WorkrailConfig::from_env()?.data_dir,
            };
            let clock = crate::gc::OsRetentionClock::new(data_dir);
            // What each session holds, read before anything is deleted, so the report can say
            // which work a deleted session held.
            let held: std::collections::HashMap<_, _> = workrail
                .sessions_overview()
                .unwrap_or_default()
                .into_iter()
                .map(|row| (row.session_id.clone(), held_runs_text(&row.runs)))
                .collect();
            let bar = StderrProgress::new();
            let report = workrail.gc(&crate::gc::GcOptions { dry_run, ttl_days }, &clock, &bar);
            bar.finish();
            let report = report.map_err(|e| envelope_text(&e))?;
            for w in &report.warnings {
                eprintln!(
                    "warning[{}]: {}",
                    serde_json::to_value(w.code)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned))
                        .unwrap_or_default(),
                    w.message
                );
            }
            print_stdout(&gc_text(&report, &held));
            if report.safe_mode {
                return Err(safe_mode_text(&report));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Console { port, open } => {
            // Read-only: the data directory is not created, and nothing in it is written.
            let mut config = WorkrailConfig::from_env()?;
            if let Some(dir) = cli.data_dir {
                config.data_dir = dir;
            }
            let config = config.with_repos_from_env()?;
            crate::console::run(crate::console::ConsoleOptions {
                config,
                store,
                port,
                open,
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Repos {
            action: ReposAction::Sync,
        } => {
            let (specs, cache) = repos(cli.data_dir)?;
            if specs.is_empty() {
                print_stdout(&format!(
                    "No workflow repositories are configured: set {} (comma-separated URLs, or a JSON array of {{url, branch, path}}).",
                    crate::sources::git::REPOS_ENV
                ));
                return Ok(ExitCode::SUCCESS);
            }
            let env = |name: &str| std::env::var(name).ok();
            let mut failed = false;
            for (spec, state) in crate::sources::git::sync_all(&specs, &cache, &env) {
                let commit = state
                    .commit
                    .as_deref()
                    .map_or("none", |c| &c[..c.len().min(12)]);
                match &state.last_error {
                    None => {
                        print_stdout(&format!("{}: {} at {commit}", spec.name, spec.shown_url()))
                    }
                    Some(e) => {
                        failed = true;
                        eprintln!(
                            "{}: {} sync failed (serving {commit}): {e}",
                            spec.name,
                            spec.shown_url()
                        );
                    }
                }
            }
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Keys {
            action: KeysAction::Rotate,
        } => {
            let workrail = open(cli.data_dir)?;
            workrail.rotate_keys().map_err(|e| envelope_text(&e))?;
            print_stdout(
                "Rotated the token signing key: new tokens are signed with the new key; tokens signed with the previous key still verify.",
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Keys {
            action: KeysAction::Client { action },
        } => client_keys(cli.data_dir, action),
    }
}

/// `workrail keys client ...`.
fn client_keys(data_dir: Option<PathBuf>, action: ClientAction) -> Result<ExitCode, String> {
    use crate::control::client_keys as keys;
    let dir = control_plane::data_dir(data_dir)?;
    match action {
        ClientAction::Add { name } => {
            let made = keys::add_client(
                &dir,
                &name,
                &crate::entropy::OsEntropy,
                std::time::SystemTime::now(),
            )
            .map_err(|e| envelope_text(&e))?;
            // stdout: the key alone, so `key=$(workrail keys client add ci)` works.
            print_stdout(&made.key);
            eprintln!(
                "Made a key for client {name:?}: it is shown only now (the data directory keeps its SHA-256). Clients send it as `Authorization: Bearer <key>` to `workrail serve --http`; `workrail keys client revoke {name}` stops it."
            );
        }
        ClientAction::Revoke { name } => {
            keys::revoke_client(&dir, &name).map_err(|e| envelope_text(&e))?;
            print_stdout(&format!(
                "Revoked the key of client {name:?}: running servers refuse it from its next request."
            ));
        }
        ClientAction::List { json } => {
            let clients = keys::list_clients(&dir).map_err(|e| envelope_text(&e))?;
            if json {
                print_stdout(&serde_json::to_string_pretty(&clients).map_err(|e| e.to_string())?);
            } else if clients.is_empty() {
                print_stdout("No client keys; `workrail keys client add <name>` makes one.");
            } else {
                let lines: Vec<String> = clients
                    .iter()
                    .map(|c| format!("{}  created {}", c.name, c.created_at))
                    .collect();
                print_stdout(&lines.join("\n"));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `workrail mcp` and `workrail serve --http`: WorkRail opened as `mcp` always opened it.
fn serve_mcp(
    data_dir: Option<PathBuf>,
    store: &crate::protocol::StoreChoice,
    transport: Transport,
) -> Result<ExitCode, String> {
    let dir = control_plane::data_dir(data_dir.clone())?;
    let workrail = match open_store(data_dir.clone(), store) {
        Ok(workrail) => workrail,
        // A database unreachable at start does not stop the server: it opens the
        // store on a later call (decision D127). Nor does a file store that failed to open
        // for a passing I/O error (an EIO reading the keyring): a configuration error, or
        // a data directory that must not be used, still does (decision D221).
        Err(why)
            if *store != crate::protocol::StoreChoice::Files || why.is_retryable_store_io() =>
        {
            return serve_until_the_store_opens(
                dir,
                data_dir,
                store.clone(),
                &why.text(),
                transport,
            );
        }
        Err(why) => return Err(why.text()),
    };
    // Recorded (with its lock held) until the server exits (decisions D85, D220).
    let _record = crate::control::servers::keep_this_server_registered(&dir, workrail.features());
    start_repo_sync(data_dir)?;
    run_transport(Arc::new(workrail), &dir, transport)?;
    Ok(ExitCode::SUCCESS)
}

fn run_transport<B: crate::mcp::ToolBackend>(
    backend: Arc<B>,
    data_dir: &Path,
    transport: Transport,
) -> Result<(), String> {
    match transport {
        Transport::Stdio => {
            tracing::info!("serving MCP over stdio");
            crate::mcp::run_stdio(backend)
        }
        Transport::Http(options) => {
            let keys = Arc::new(crate::control::client_keys::ClientKeys::new(data_dir));
            match keys.count() {
                Some(0) => eprintln!(
                    "workrail: warning: no client keys yet, so every request is refused; `workrail keys client add <name>` makes one (no restart needed)"
                ),
                None => eprintln!(
                    "workrail: warning: {} cannot be read, so every request is refused until it is fixed",
                    data_dir
                        .join(crate::control::client_keys::CLIENT_KEYS_FILE)
                        .display()
                ),
                Some(_) => {}
            }
            tracing::info!(addr = %options.addr, tls = options.tls.is_some(), "serving MCP over Streamable HTTP");
            crate::mcp::run_http(backend, keys, &options)
        }
    }
}

/// `workrail mcp` when its PostgreSQL store could not be opened at start (decision D127): the
/// server runs, lists its tools, and opens the store on the first tool call that can.
fn serve_until_the_store_opens(
    dir: PathBuf,
    data_dir: Option<PathBuf>,
    store: crate::protocol::StoreChoice,
    why: &str,
    transport: Transport,
) -> Result<ExitCode, String> {
    crate::store::fs::create_private_root(&dir).map_err(|e| envelope_text(&e.to_envelope(&dir)))?;
    let fs = crate::store::fs::OsFs::new(&dir);
    let features = crate::features::Features::load(&fs).map_err(|e| envelope_text(&e))?;
    eprintln!(
        "workrail: serving MCP without its store for now; each tool call tries to open it again:\n{why}"
    );
    let _record = crate::control::servers::keep_this_server_registered(&dir, &features);
    let described = store.describe();
    let backend = crate::mcp::OpeningBackend::new(
        move || {
            let mut config = WorkrailConfig::from_env().map_err(|detail| {
                ErrorEnvelope::new(
                    workrail_spec::error::ErrorCode::ValidationError,
                    detail,
                    "Fix the environment the server was started with, then restart it.",
                    workrail_spec::error::Retry::NotRetryable,
                )
            })?;
            if let Some(dir) = &data_dir {
                config.data_dir = dir.clone();
            }
            let config = config.with_repos_from_env().map_err(|detail| {
                ErrorEnvelope::new(
                    workrail_spec::error::ErrorCode::ValidationError,
                    detail,
                    "Fix WORKRAIL_WORKFLOW_REPOS, then restart the server.",
                    workrail_spec::error::Retry::NotRetryable,
                )
            })?;
            Workrail::open_on(config, &store)
        },
        features,
        described,
        crate::protocol::render_text,
    );
    run_transport(Arc::new(backend), &dir, transport)?;
    Ok(ExitCode::SUCCESS)
}

/// The configured repositories and their cache.
fn repos(
    data_dir: Option<PathBuf>,
) -> Result<
    (
        Vec<crate::sources::git::RepoSpec>,
        crate::sources::git::RepoCache,
    ),
    String,
> {
    let mut config = WorkrailConfig::from_env()?;
    if let Some(dir) = data_dir {
        config.data_dir = dir;
    }
    let config = config.with_repos_from_env()?;
    let cache = crate::sources::git::RepoCache::of_data_dir(&config.data_dir);
    Ok((config.sources.repos, cache))
}

/// Starts syncing the configured repositories in the background (nothing when none are).
fn start_repo_sync(data_dir: Option<PathBuf>) -> Result<(), String> {
    let (specs, cache) = repos(data_dir)?;
    let interval = crate::sources::git::sync_interval(&|name| std::env::var(name).ok())?;
    crate::sources::git::spawn_sync_thread(specs, cache, interval);
    Ok(())
}

/// Opens WorkRail with the process configuration, creating the data directory if needed.
fn open(
    data_dir: Option<PathBuf>,
    store: &crate::protocol::StoreChoice,
) -> Result<Workrail, String> {
    open_store(data_dir, store).map_err(|why| why.text())
}

/// Why WorkRail did not open: its configuration, or its store (with the store's error).
enum OpenFailure {
    Config(String),
    Store(ErrorEnvelope),
}

impl OpenFailure {
    fn text(&self) -> String {
        match self {
            Self::Config(text) => text.clone(),
            Self::Store(e) => envelope_text(e),
        }
    }

    /// A storage error that says to retry (an I/O error, not a refusal or damage).
    fn is_retryable_store_io(&self) -> bool {
        matches!(self, Self::Store(e) if e.code == workrail_spec::error::ErrorCode::StoreIoError
            && e.retry != workrail_spec::error::Retry::NotRetryable)
    }
}

/// [`open`], keeping the store's error.
fn open_store(
    data_dir: Option<PathBuf>,
    store: &crate::protocol::StoreChoice,
) -> Result<Workrail, OpenFailure> {
    let mut config = WorkrailConfig::from_env().map_err(OpenFailure::Config)?;
    if let Some(dir) = data_dir {
        config.data_dir = dir;
    }
    let config = config.with_repos_from_env().map_err(OpenFailure::Config)?;
    crate::store::fs::create_private_root(&config.data_dir)
        .map_err(|e| OpenFailure::Store(e.to_envelope(&config.data_dir)))?;
    tracing::debug!(data_dir = %config.data_dir.display(), store = %store.describe(), "opening WorkRail");
    Workrail::open_on(config, store).map_err(OpenFailure::Store)
}

/// A progress bar on stderr; indicatif hides it when stderr is not a terminal.
struct StderrProgress(indicatif::ProgressBar);

impl StderrProgress {
    fn new() -> Self {
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(0),
            indicatif::ProgressDrawTarget::stderr(),
        );
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{msg:28} [{bar:32}] {pos}/{len}")
        {
            bar.set_style(style.progress_chars("=> "));
        }
        Self(bar)
    }
}

impl crate::bundle::Progress for StderrProgress {
    fn begin(&self, phase: &str, total: u64) {
        self.0.set_message(phase.to_owned());
        self.0.set_length(total);
        self.0.set_position(0);
    }

    fn advance(&self, n: u64) {
        self.0.inc(n);
    }

    fn finish(&self) {
        self.0.finish_and_clear();
    }
}

fn print_bundle_warnings(warnings: &[crate::bundle::BundleWarning]) {
    for w in warnings {
        eprintln!(
            "warning[{}]: {}",
            serde_json::to_value(w.code)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default(),
            w.message
        );
    }
}

/// The session id, then every run's fresh tokens (the rehydrate response at its preferred tip).
fn import_text(report: &crate::bundle::ImportReport) -> String {
    let mut out = format!("Imported session {}", report.session_id);
    if report.remapped {
        out.push_str(&format!(
            " (bundle session {} already exists here, so it was imported as a new session)",
            report.source_session_id
        ));
    }
    out.push_str(&format!(
        ": {} events, {} snapshots, {} pinned workflows, {} artifacts.\n",
        report.events, report.snapshots, report.pinned_workflows, report.artifacts
    ));
    if let Some(salvage) = &report.salvage {
        out.push_str(&format!(
            "Salvage: only the validated prefix of the source session was imported ({} at manifest record {}).\n",
            salvage.reason, salvage.manifest_index
        ));
    }
    for run in &report.runs {
        out.push_str(&format!(
            "\n# Run {} (preferred tip {})\n",
            run.run_id, run.preferred_tip
        ));
        match &run.resume {
            Some(resume) => out.push_str(&crate::protocol::render_text(resume)),
            None => out.push_str("(tokens unavailable; see the warnings)\n"),
        }
    }
    out
}

/// The runs still in progress whose last acknowledgement at the preferred tip was blocked
/// (what the Console calls blocked, D182), per session: a person looking for the run that waits
/// on them finds it in the list, not only with `inspect`.
fn blocked_runs(
    workrail: &Workrail,
    dated: &[(
        Option<std::time::SystemTime>,
        crate::protocol::SessionOverview,
    )],
) -> std::collections::HashMap<String, std::collections::HashSet<String>> {
    dated
        .iter()
        .filter(|(_, row)| {
            row.runs
                .iter()
                .any(|r| r.status == workrail_spec::closed::RunStatus::InProgress)
        })
        .filter_map(|(_, row)| {
            let loaded = workrail.sessions().load(&row.session_id).ok()?;
            let runs = crate::console::history::blocked_runs(&loaded.events().all().ok()?);
            (!runs.is_empty()).then(|| (row.session_id.to_string(), runs))
        })
        .collect()
}

/// `workrail sessions`: newest first by the last change of each session's manifest (the
/// control stream changes with every commit).
fn sessions_text(
    dated: Vec<(
        Option<std::time::SystemTime>,
        crate::protocol::SessionOverview,
    )>,
    blocked: &std::collections::HashMap<String, std::collections::HashSet<String>>,
    json: bool,
) -> Result<String, String> {
    let when = |at: Option<std::time::SystemTime>| at.map(crate::time::rfc3339_utc);
    let is_blocked = |session: &workrail_spec::ids::SessionId,
                      run: &crate::protocol::RunSummary| {
        run.status == workrail_spec::closed::RunStatus::InProgress
            && blocked
                .get(session.as_str())
                .is_some_and(|runs| runs.contains(run.run_id.as_str()))
    };
    if json {
        let items: Vec<serde_json::Value> = dated
            .iter()
            .map(|(at, row)| {
                let mut value = serde_json::to_value(row).unwrap_or_default();
                value["lastActivity"] = serde_json::json!(when(*at));
                let blocked: Vec<&str> = row
                    .runs
                    .iter()
                    .filter(|r| is_blocked(&row.session_id, r))
                    .map(|r| r.run_id.as_str())
                    .collect();
                value["blockedRuns"] = serde_json::json!(blocked);
                value
            })
            .collect();
        return serde_json::to_string_pretty(&items).map_err(|e| e.to_string());
    }
    if dated.is_empty() {
        return Ok("No sessions yet in this data directory.".to_owned());
    }
    let waiting = dated
        .iter()
        .filter(|(_, row)| row.runs.iter().any(|r| is_blocked(&row.session_id, r)))
        .count();
    let mut out = format!(
        "{} session(s), newest first{}:",
        dated.len(),
        match waiting {
            0 => String::new(),
            n => format!(" ({n} with a blocked run: `workrail inspect <sessionId>` shows why)"),
        }
    );
    for (at, row) in &dated {
        let health = match &row.reason {
            Some(reason) => format!("{} ({reason})", row.health),
            None => row.health.clone(),
        };
        out.push_str(&format!(
            "\n{}  {}  {health}",
            row.session_id,
            when(*at).unwrap_or_else(|| "last activity unknown".to_owned())
        ));
        let mark = |run: &crate::protocol::RunSummary| {
            if is_blocked(&row.session_id, run) {
                " (blocked: its last attempt was refused)"
            } else {
                ""
            }
        };
        // Lanes (D168) are listed under the run whose parallel step started them.
        for run in row.runs.iter().filter(|r| !r.is_lane()) {
            out.push_str(&format!(
                "\n  {} \"{}\" ({}): {}{}, {} node(s)",
                run.run_id,
                run.label,
                run.workflow_id,
                run.status,
                mark(run),
                run.nodes
            ));
            for lane in row.runs.iter().filter(|l| {
                l.lane
                    .as_ref()
                    .is_some_and(|k| k.parent_run_id == run.run_id)
            }) {
                let index = lane.lane.as_ref().map_or(0, |k| k.lane_index);
                out.push_str(&format!(
                    "\n    lane {index}: {} ({}): {}{}, {} node(s)",
                    lane.run_id,
                    lane.workflow_id,
                    lane.status,
                    mark(lane),
                    lane.nodes
                ));
            }
        }
    }
    out.push_str("\n\n`workrail inspect <sessionId>` shows a session's runs, branches and notes.");
    Ok(out)
}

/// The sessions that hold gc in safe mode, each with what clears it.
fn safe_mode_text(report: &crate::gc::GcReport) -> String {
    let holders: Vec<&crate::gc::GcWarning> = report
        .warnings
        .iter()
        .filter(|w| {
            matches!(
                w.code,
                crate::gc::GcWarningCode::SafeModeCorruptSession
                    | crate::gc::GcWarningCode::SafeModeUnknownVersion
                    | crate::gc::GcWarningCode::SafeModeUnreadableSession
            )
        })
        .collect();
    let mut out = format!(
        "gc is in safe mode, so nothing was deleted: {} session{} failed validation:",
        holders.len(),
        if holders.len() == 1 { "" } else { "s" }
    );
    for w in holders {
        let Some(session) = &w.session_id else {
            continue;
        };
        let health = w
            .health
            .unwrap_or(workrail_spec::closed::SessionHealthKind::Healthy);
        let what = match (&w.health, &w.reason) {
            (Some(h), Some(r)) => format!("{h}: {r}"),
            (Some(h), None) => h.to_string(),
            _ => "unreadable".to_owned(),
        };
        out.push_str(&format!(
            "\n  {session} ({what})\n    to clear: {}",
            crate::store::how_to_clear(session, health, w.reason.as_deref())
        ));
    }
    out.push_str("\n  suggestion: `workrail inspect <sessionId>` shows each one; clear them as above, then run `workrail gc` again");
    out
}

/// What a session holds, for gc's report: its runs, each with how many lanes its parallel
/// steps ran (lanes are runs of the session, D168, but not work a person started).
fn held_runs_text(runs: &[crate::protocol::RunSummary]) -> String {
    runs.iter()
        .filter(|r| !r.is_lane())
        .map(|run| {
            let lanes = runs
                .iter()
                .filter(|l| {
                    l.lane
                        .as_ref()
                        .is_some_and(|k| k.parent_run_id == run.run_id)
                })
                .count();
            let lanes = match lanes {
                0 => String::new(),
                1 => " (and 1 lane)".to_owned(),
                n => format!(" (and {n} lanes)"),
            };
            format!(
                "{} \"{}\" {}{lanes}",
                run.workflow_id, run.label, run.status
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn gc_text(
    report: &crate::gc::GcReport,
    held: &std::collections::HashMap<workrail_spec::ids::SessionId, String>,
) -> String {
    let verb = if report.dry_run {
        "that would be deleted"
    } else {
        "deleted"
    };
    let mut out = format!(
        "gc{}: ttl {} days{}\n",
        if report.dry_run { " (dry run)" } else { "" },
        report.ttl_days,
        if report.safe_mode {
            ", SAFE MODE (nothing deleted)"
        } else {
            ""
        }
    );
    for s in &report.sessions {
        let decision = serde_json::to_value(s.decision)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        out.push_str(&format!(
            "  {} {decision}{}{}{}\n",
            s.session_id,
            s.age_days
                .map(|d| format!(" (age {d} days)"))
                .unwrap_or_default(),
            if s.deleted { ", deleted" } else { "" },
            held.get(&s.session_id)
                .filter(|runs| !runs.is_empty())
                .map(|runs| format!(" — {runs}"))
                .unwrap_or_default()
        ));
    }
    out.push_str(&format!(
        "sessions {verb}: {}\nsnapshots {verb}: {}\npinned workflows {verb}: {}\nartifacts {verb}: {}\nunreachable objects kept as too recent: {}\nleft by crashed writers, {verb}: {} uncommitted session directories, {} temp files\nrecords of servers no longer running, {verb}: {}\n",
        report.deleted_sessions.len(),
        report.deleted_snapshots.len(),
        report.deleted_pinned_workflows.len(),
        report.deleted_artifacts.len(),
        report.young_objects_kept,
        report.deleted_uncommitted_sessions.len(),
        report.deleted_temp_files.len(),
        report.deleted_server_records.len()
    ));
    out
}

/// `CODE: message` and the suggestion on a second line.
fn envelope_text(e: &ErrorEnvelope) -> String {
    format!("{}: {}\n  suggestion: {}", e.code, e.message, e.suggestion)
}

pub(crate) fn print_stdout(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", text.trim_end_matches('\n'));
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::held_runs_text;
    use crate::protocol::RunSummary;

    fn run(id: &str, workflow: &str, lane_of: Option<(&str, u32)>) -> RunSummary {
        serde_json::from_value(serde_json::json!({
            "runId": id,
            "workflowId": workflow,
            "label": format!("{workflow} #{}", &id[id.len() - 4..]),
            "status": "complete",
            "nodes": 3,
            "preferredTip": null,
            "tipLastActivity": 0,
            "unresolvedGaps": 0,
            "lane": lane_of.map(|(parent, index)| serde_json::json!({
                "parentRunId": parent,
                "parentNodeId": "node_aaaaaaaaaaaaaaaa",
                "laneIndex": index,
            })),
        }))
        .unwrap()
    }

    /// decision: D168
    /// gc's report names the runs a person started, each with a count of the lanes its parallel
    /// steps ran, rather than listing the lanes as runs of their own, in no useful order.
    #[test]
    fn gc_report_counts_lanes_under_their_run() {
        let parent = "run_pppppppppppppppp";
        let runs = vec![
            run("run_llllllllllll0001", "project.routine", Some((parent, 1))),
            run(parent, "project.fan", None),
            run("run_llllllllllll0002", "project.routine", Some((parent, 2))),
            run("run_oooooooooooooooo", "project.other", None),
        ];
        assert_eq!(
            held_runs_text(&runs),
            "project.fan \"project.fan #pppp\" complete (and 2 lanes); project.other \"project.other #oooo\" complete"
        );
    }
}

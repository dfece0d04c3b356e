//! `workrail-conformance`: runs the conformance scenarios against a WorkRail v2 server over MCP
//! stdio, or the offline vectors against an implementation's adapter. See `conformance/README.md`.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use workrail_conformance::mcp::split_command;
use workrail_conformance::report::{
    BaselineDiff, Summary, Verdict, causes_text, lock_table, report_json,
};
use workrail_conformance::runner::{self, RunConfig, default_fixtures};
use workrail_conformance::scenario::{self, CORE_PROFILE, PROFILES};
use workrail_conformance::surface::Surface;
use workrail_conformance::vectors::{self, VectorConfig};

#[derive(Debug, Parser)]
#[command(
    name = "workrail-conformance",
    version,
    about = "Conformance suite for WorkRail v2 servers (MCP stdio) and offline vectors",
    long_about = "Runs the conformance scenarios against a WorkRail v2 server: one fresh server process and data directory per scenario, one line per scenario (PASS/FAIL/SKIP, name, lock ids), then a table of every lock's verdict (pass, fail, not reached, n/a) and `N passed, N failed, N skipped`. Exits non-zero when a scenario fails.\n\nExamples:\n  workrail-conformance --server \"target/debug/workrail mcp\"\n  workrail-conformance --server \"my-server --stdio\" --surface my-surface.json --json report.json\n  workrail-conformance vectors --impl \"target/debug/workrail-conformance-adapter\"",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Check an implementation's pure rules against fixtures/vectors/*.json through an adapter.
    Vectors(VectorArgs),
    /// List the scenarios (name, profile, lock ids, description).
    List {
        /// Fixture root holding scenarios/ and workflows/.
        #[arg(long)]
        fixtures: Option<PathBuf>,
    },
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The server command, e.g. "target/debug/workrail mcp" (split like a shell, quotes allowed).
    #[arg(long, value_name = "COMMAND")]
    server: Option<String>,
    /// Surface file: renames, autonomy arguments, result source, extra arguments, env, response
    /// moves, fixture workflows, token model, limitations, profiles, disabled scenarios.
    #[arg(long, value_name = "FILE")]
    surface: Option<PathBuf>,
    /// Enable an optional scenario profile besides `core` (repeatable), e.g. workrail-rs.
    #[arg(long, value_name = "NAME")]
    profile: Vec<String>,
    /// Extra server environment, K=V (repeatable).
    #[arg(long, value_name = "K=V")]
    env: Vec<String>,
    /// Run only scenarios with this name or lock id (repeatable).
    #[arg(long, value_name = "NAME|LOCK-ID")]
    only: Vec<String>,
    /// Skip scenarios with this name or lock id, optionally with a reason: NAME=REASON (repeatable).
    #[arg(long, value_name = "NAME|LOCK-ID[=REASON]")]
    skip: Vec<String>,
    /// Write a JSON report.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// A JSON report of an earlier run (--json) to compare with: new failures and newly
    /// passing locks and scenarios are listed after the lock table.
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// Fixture root holding scenarios/ and workflows/ (default: this repository's
    /// fixtures/conformance, else ./fixtures/conformance).
    #[arg(long, value_name = "DIR")]
    fixtures: Option<PathBuf>,
    /// Seconds allowed for each request before the scenario fails.
    #[arg(long, value_name = "SECS", default_value_t = 20)]
    timeout: u64,
    /// Print the MCP transcript of failing scenarios.
    #[arg(long)]
    verbose: bool,
}

#[derive(Debug, Args)]
struct VectorArgs {
    /// Directory of vector files.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The adapter command (reads one JSON request per line, answers one JSON line each).
    #[arg(long = "impl", value_name = "COMMAND")]
    implementation: String,
    /// Check only this file or lock id (repeatable).
    #[arg(long, value_name = "FILE|LOCK-ID")]
    only: Vec<String>,
    /// Skip this file or lock id, optionally with a reason: FILE=REASON (repeatable).
    #[arg(long, value_name = "FILE|LOCK-ID[=REASON]")]
    skip: Vec<String>,
    /// Write a JSON report.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// A JSON report of an earlier run (--json) to compare with.
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// Seconds allowed for each answer.
    #[arg(long, value_name = "SECS", default_value_t = 20)]
    timeout: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Cmd::Vectors(args)) => run_vectors(args),
        Some(Cmd::List { fixtures }) => list(fixtures),
        None => run_scenarios(cli.run),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("workrail-conformance: {e}");
            ExitCode::from(2)
        }
    }
}

fn parse_skips(raw: &[String]) -> Vec<(String, String)> {
    raw.iter()
        .map(|s| match s.split_once('=') {
            Some((sel, reason)) => (sel.to_owned(), reason.to_owned()),
            None => (s.clone(), "skipped on the command line (--skip)".to_owned()),
        })
        .collect()
}

/// Prints a line; a closed stdout (e.g. `| head`) is not an error worth a panic.
fn say(line: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

fn print_verdict(v: &Verdict, verbose: bool) {
    say(&v.render(verbose));
}

/// Reads a baseline report, before anything runs (a wrong path fails fast).
fn read_baseline(path: Option<PathBuf>) -> Result<Option<(PathBuf, serde_json::Value)>, String> {
    let Some(path) = path else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "cannot read the baseline {}: {e} (give a report written by --json)",
            path.display()
        )
    })?;
    let value = serde_json::from_str(&text).map_err(|e| {
        format!(
            "the baseline {} is not a JSON report: {e} (give a report written by --json)",
            path.display()
        )
    })?;
    Ok(Some((path, value)))
}

fn finish(
    kind: &str,
    target: &str,
    profiles: &[String],
    verdicts: &[Verdict],
    json: Option<PathBuf>,
    baseline: Option<(PathBuf, serde_json::Value)>,
) -> Result<ExitCode, String> {
    let summary = Summary::of(verdicts);
    let diff = match &baseline {
        Some((_, value)) => Some(BaselineDiff::of(verdicts, value)?),
        None => None,
    };
    if let Some(path) = json {
        let mut report = report_json(kind, target, profiles, verdicts);
        if let (Some(diff), Some(o)) = (&diff, report.as_object_mut()) {
            o.insert("baseline".into(), diff.to_json());
        }
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(&path, text + "\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    say(&lock_table(verdicts));
    if let Some(causes) = causes_text(verdicts) {
        say(&causes);
    }
    if let (Some(diff), Some((path, _))) = (&diff, &baseline) {
        say(&diff.text(&path.display().to_string()));
    }
    say(&summary.line());
    Ok(if summary.failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn run_scenarios(args: RunArgs) -> Result<ExitCode, String> {
    let server_line = args.server.ok_or(
        "--server <COMMAND> is required (or use the `vectors` or `list` subcommand); see --help",
    )?;
    let mut server = split_command(&server_line)?;
    if server.is_empty() {
        return Err("--server is empty".into());
    }
    // Scenarios run the server in a temporary working directory: anchor a relative program path
    // (one with a directory part) to the current directory.
    let program = PathBuf::from(&server[0]);
    if program.is_relative() && program.components().count() > 1 {
        let cwd = std::env::current_dir().map_err(|e| e.to_string())?;
        server[0] = cwd.join(program).to_string_lossy().into_owned();
    }
    let surface = match &args.surface {
        Some(path) => Surface::load(path)?,
        None => Surface::default(),
    };
    let mut profiles = surface.profiles.clone();
    profiles.extend(args.profile.iter().cloned());
    for p in &profiles {
        if !PROFILES.contains(&p.as_str()) || p == CORE_PROFILE {
            return Err(format!(
                "unknown optional profile {p:?}; optional profiles: {:?}",
                &PROFILES[1..]
            ));
        }
    }
    let env = args
        .env
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| format!("--env {kv:?} is not K=V"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let fixtures = args.fixtures.unwrap_or_else(default_fixtures);
    let scenarios = scenario::load_dir(&fixtures.join("scenarios"))?;
    let workflows_dir = surface
        .workflows_dir
        .clone()
        .unwrap_or_else(|| fixtures.join("workflows"));
    let workflows_dir = workflows_dir
        .canonicalize()
        .map_err(|e| format!("fixture workflows {}: {e}", workflows_dir.display()))?;
    let config = RunConfig {
        server,
        surface,
        env,
        profiles: profiles.clone(),
        only: args.only,
        skip: parse_skips(&args.skip),
        timeout: Duration::from_secs(args.timeout.max(1)),
        workflows_dir,
        verbose: args.verbose,
    };
    let verbose = args.verbose;
    let baseline = read_baseline(args.baseline)?;
    say(&workrail_conformance::locks::banner());
    let verdicts = runner::run(&scenarios, &config, &mut |v| print_verdict(v, verbose));
    finish(
        "scenarios",
        &server_line,
        &profiles,
        &verdicts,
        args.json,
        baseline,
    )
}

fn run_vectors(args: VectorArgs) -> Result<ExitCode, String> {
    let dir = args.dir.unwrap_or_else(|| {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/vectors");
        if repo.is_dir() {
            repo
        } else {
            PathBuf::from("fixtures/vectors")
        }
    });
    let adapter = split_command(&args.implementation)?;
    if adapter.is_empty() {
        return Err("--impl is empty".into());
    }
    let config = VectorConfig {
        dir,
        adapter,
        only: args.only,
        skip: parse_skips(&args.skip),
        timeout: Duration::from_secs(args.timeout.max(1)),
    };
    let baseline = read_baseline(args.baseline)?;
    say(&workrail_conformance::locks::banner());
    let verdicts = vectors::run(&config, &mut |v| print_verdict(v, false))?;
    finish(
        "vectors",
        &args.implementation,
        &[],
        &verdicts,
        args.json,
        baseline,
    )
}

fn list(fixtures: Option<PathBuf>) -> Result<ExitCode, String> {
    let fixtures = fixtures.unwrap_or_else(default_fixtures);
    for s in scenario::load_dir(&fixtures.join("scenarios"))? {
        say(&format!(
            "{}  ({})  [{}]\n    {}",
            s.name,
            s.profile,
            s.lock_ids.join(", "),
            s.description
        ));
    }
    Ok(ExitCode::SUCCESS)
}

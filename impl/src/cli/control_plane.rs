//! `workrail config` and `workrail workflows`: the command-line front end of the control plane
//! (`crate::control`), calling the same functions as the Console; like the Console it stands on
//! the control plane, which imports neither.
//!
//! ```text
//! workrail config [--json]                      desired vs applied config of each live server, restart triggers
//! workrail config set <key> <value>             a feature flag (on|off) or a preference default
//! workrail workflows list [--json]              every workflow with its source (wr.* read-only)
//! workrail workflows show <id> [--compiled] [--run <runId> [--session <sessionId>]] [--json]
//! workrail workflows save <id> <file|->         validate, then write the workflow's own source file
//! workrail workflows copy <id> [--as user.<name>]   copy to an editable namespace
//! ```

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde::Serialize;
use workrail_spec::error::ErrorEnvelope;

use crate::control::config::{ConfigOverview, ConfigView, config_overview, set_setting};
use crate::control::workflows::{
    copy_to_editable, list_workflows, pinned_for_run, save_source, show_workflow,
};
use crate::protocol::WorkrailConfig;
use crate::sources::SourceConfig;

/// `workrail config`.
#[derive(Debug, Args)]
#[command(
    long_about = "Show the config each running `workrail mcp` applied (recorded at its start, with its appliedConfigHash) beside the desired config (what it would apply if restarted now: the data directory's config files, the server's own launch environment, this binary's tools), and the restart triggers that differ: tool set, tool schema, workflow source registration, tool-gating feature flag. Preference defaults and retention apply without a restart. Reads only.\n\n`workrail config set <key> <value>` edits config/features.json (a feature flag: on|off) or config/preferences.json (preset, autonomy, riskPolicy), validated and written atomically."
)]
pub struct ConfigArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    action: Option<ConfigAction>,
}

#[derive(Debug, Subcommand)]
enum ConfigAction {
    /// Set a feature flag (`checkpoint_workflow`, `resume_session`, `start_session`: on|off) or a
    /// preference default (`preset`, `autonomy`, `riskPolicy`).
    Set {
        /// The flag or preference key.
        key: String,
        /// `on` / `off` for a flag; the value for a preference.
        value: String,
    },
}

/// `workrail workflows`.
#[derive(Debug, Args)]
pub struct WorkflowsArgs {
    #[command(subcommand)]
    action: WorkflowsAction,
}

#[derive(Debug, Subcommand)]
enum WorkflowsAction {
    /// List every workflow with its source (bundled wr.* workflows are read-only).
    List {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print a workflow's source; --compiled: its current compiled snapshot and workflowHash;
    /// --run: the snapshot a run pinned, with a drift warning when today's source compiles to
    /// another hash.
    Show {
        /// The workflow id.
        id: String,
        /// Print the compiled snapshot instead of the source.
        #[arg(long)]
        compiled: bool,
        /// Print the snapshot this run pinned (read from the data directory by workflowHash).
        #[arg(long, value_name = "RUN_ID")]
        run: Option<String>,
        /// The run's session (default: search every session).
        #[arg(long, value_name = "SESSION_ID", requires = "run")]
        session: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Validate new source text with the compiler and write it to the workflow's own source
    /// file; on errors print them (with JSON pointers) and write nothing. wr.* is refused: copy
    /// it first.
    Save {
        /// The workflow id.
        id: String,
        /// The new source (`-` reads stdin).
        file: PathBuf,
    },
    /// Copy a workflow (e.g. a bundled wr.* one) to an editable id in the user workflow
    /// directory, validated first.
    Copy {
        /// The workflow to copy.
        id: String,
        /// The new id (default: user.<name>).
        #[arg(long = "as", value_name = "NEW_ID")]
        new_id: Option<String>,
    },
}

/// `CODE: message`, the suggestion, and each compiler error with its pointer.
pub fn envelope_text(e: &ErrorEnvelope) -> String {
    let mut out = format!("{}: {}\n  suggestion: {}", e.code, e.message, e.suggestion);
    if let Some(errors) = e
        .details
        .as_ref()
        .and_then(|d| d.get("errors"))
        .and_then(|v| v.as_array())
    {
        for error in errors {
            let field = |k: &str| error.get(k).and_then(|v| v.as_str()).unwrap_or_default();
            let pointer = field("pointer");
            out.push_str(&format!(
                "\n  error[{}] at {}: {}",
                field("code"),
                if pointer.is_empty() {
                    "(document)"
                } else {
                    pointer
                },
                field("message")
            ));
        }
    }
    out
}

/// The data directory: `--data-dir`, else the process configuration's.
pub fn data_dir(given: Option<PathBuf>) -> Result<PathBuf, String> {
    match given {
        Some(dir) => Ok(dir),
        None => Ok(WorkrailConfig::from_env()?.data_dir),
    }
}

/// [`data_dir`] for a command that only reads it: refused when another user could have written
/// it (decision D136), and left exactly as it is (a read never tightens its mode).
fn readable_data_dir(given: Option<PathBuf>) -> Result<PathBuf, String> {
    let dir = data_dir(given)?;
    crate::store::owner::check_data_dir(&dir, false)
        .map_err(|e| envelope_text(&e.to_envelope(&dir)))?;
    Ok(dir)
}

fn to_json<T: Serialize>(value: &T) -> Result<String, String> {
    serde_json::to_string_pretty(value).map_err(|e| e.to_string())
}

fn print(text: &str) {
    super::print_stdout(text);
}

/// Runs `workrail config`.
pub fn config(data_dir_arg: Option<PathBuf>, args: ConfigArgs) -> Result<ExitCode, String> {
    let dir = data_dir(data_dir_arg)?;
    match args.action {
        Some(ConfigAction::Set { key, value }) => {
            let change = set_setting(&dir, &key, &value).map_err(|e| envelope_text(&e))?;
            if args.json {
                print(&to_json(&change)?);
            } else {
                let value = match &change.value {
                    serde_json::Value::Bool(true) => "on".to_owned(),
                    serde_json::Value::Bool(false) => "off".to_owned(),
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                print(&format!(
                    "{} = {value} in {}{}",
                    change.key,
                    change.file,
                    if change.restart_required {
                        "; running servers need a restart to apply it (`workrail config` shows which)"
                    } else {
                        "; it applies without a restart"
                    }
                ));
            }
        }
        None => {
            let dir = readable_data_dir(Some(dir))?;
            let overview = config_overview(&dir).map_err(|e| envelope_text(&e))?;
            print(&if args.json {
                to_json(&overview)?
            } else {
                overview_text(&overview)
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn config_summary(view: &ConfigView) -> String {
    match (&view.config, &view.config_hash, &view.error) {
        (Some(c), Some(hash), _) => {
            let flags: Vec<String> = c
                .features
                .iter()
                .map(|f| format!("{} {}", f.name, if f.on { "on" } else { "off" }))
                .collect();
            let tools: Vec<&str> = c.tools.iter().map(|t| t.name.as_str()).collect();
            let sources: Vec<String> = c
                .sources
                .iter()
                .map(|s| match &s.directory {
                    Some(d) => format!("{} ({}: {d})", s.label, s.kind),
                    None => format!("{} ({})", s.label, s.kind),
                })
                .collect();
            format!(
                "{hash}\n    flags: {}\n    tools: {}\n    sources: {}\n    preference defaults: autonomy {}, riskPolicy {}\n    retention: {} days, {} kept session(s)",
                flags.join(", "),
                tools.join(", "),
                sources.join("; "),
                c.preferences.autonomy,
                c.preferences.risk_policy,
                c.retention.ttl_days,
                c.retention.keep.len()
            )
        }
        (_, _, Some(e)) => format!("cannot be computed: {}", envelope_text(e)),
        _ => "unknown".to_owned(),
    }
}

fn overview_text(overview: &ConfigOverview) -> String {
    let mut out = format!(
        "Desired config (a server started here now): {}\n",
        config_summary(&overview.desired_here)
    );
    if overview.servers.is_empty() {
        out.push_str("\nNo running server (`workrail mcp`) uses this data directory.\n");
    }
    for server in &overview.servers {
        out.push_str(&format!(
            "\nServer {} (pid {}, started {}, version {})\n  applied: {}\n  desired: {}\n",
            server.server_id,
            server.pid,
            server.started_at,
            server.version,
            server.applied_config_hash,
            config_summary(&server.desired)
        ));
        let Some(comparison) = &server.comparison else {
            continue;
        };
        if comparison.in_sync {
            out.push_str("  in sync: applied equals desired\n");
            continue;
        }
        if comparison.restart_required {
            out.push_str("  RESTART REQUIRED:\n");
            for trigger in &comparison.triggers {
                out.push_str(&format!(
                    "    {}: {}\n",
                    trigger.kind(),
                    trigger_text(trigger)
                ));
            }
        }
        for change in &comparison.runtime_safe_changes {
            let what = match change {
                crate::control::RuntimeSafeChange::PreferenceDefaults => {
                    "preference defaults".to_owned()
                }
                crate::control::RuntimeSafeChange::Retention => "retention".to_owned(),
                crate::control::RuntimeSafeChange::Flag { flag, .. } => format!("flag {flag}"),
            };
            out.push_str(&format!("  changed, applies without a restart: {what}\n"));
        }
    }
    if overview.dead_records > 0 {
        out.push_str(&format!(
            "\n{} record(s) of servers that are no longer running (`workrail gc` removes them after an hour).\n",
            overview.dead_records
        ));
    }
    out
}

fn trigger_text(trigger: &crate::control::RestartTrigger) -> String {
    use crate::control::RestartTrigger as T;
    let onoff = |b: &bool| if *b { "on" } else { "off" };
    match trigger {
        T::ToolSetChanged { added, removed } => {
            format!(
                "added [{}], removed [{}]",
                added.join(", "),
                removed.join(", ")
            )
        }
        T::ToolSchemaChanged {
            tool,
            input,
            output,
        } => format!(
            "{tool} ({})",
            match (input, output) {
                (true, true) => "input and output schema",
                (true, false) => "input schema",
                _ => "output schema",
            }
        ),
        T::SourceRegistrationChanged { applied, desired } => {
            format!(
                "{} source(s) applied, {} desired",
                applied.len(),
                desired.len()
            )
        }
        T::ToolGatingFlagChanged {
            flag,
            applied,
            desired,
        } => format!("{flag}: {} -> {}", onoff(applied), onoff(desired)),
    }
}

fn sources_here() -> Result<SourceConfig, String> {
    SourceConfig::from_process_env().map_err(|e| format!("cannot read the current directory: {e}"))
}

fn read_text(file: &Path) -> Result<String, String> {
    crate::sources::fs::read_source_text(file)
        .map_err(|e| format!("cannot read {}: {e}", file.display()))
}

/// Runs `workrail workflows`.
pub fn workflows(data_dir_arg: Option<PathBuf>, args: WorkflowsArgs) -> Result<ExitCode, String> {
    let sources = sources_here()?;
    match args.action {
        WorkflowsAction::List { json } => {
            let list = list_workflows(&sources);
            if json {
                print(&to_json(&list)?);
            } else {
                let mut out = String::new();
                for row in &list.workflows {
                    out.push_str(&format!(
                        "{}  {} ({}, {}){}  {}\n",
                        row.workflow_id,
                        row.name,
                        row.source_kind,
                        row.path.as_deref().unwrap_or(&row.source_ref),
                        if row.editable { "" } else { " read-only" },
                        row.workflow_hash
                    ));
                }
                for p in &list.problems {
                    out.push_str(&format!(
                        "not loaded: {} ({}): {}\n",
                        p.source_ref,
                        p.problem,
                        p.errors.join("; ")
                    ));
                }
                print(&out);
            }
        }
        WorkflowsAction::Show {
            id,
            compiled,
            run,
            session,
            json,
        } => {
            if let Some(run) = run {
                let dir = readable_data_dir(data_dir_arg)?;
                let view = pinned_for_run(&dir, &sources, &run, session.as_deref())
                    .map_err(|e| envelope_text(&e))?;
                if view.workflow_id.as_str() != id {
                    return Err(format!(
                        "run {run} runs workflow {}, not {id}",
                        view.workflow_id
                    ));
                }
                if let Some(warning) = &view.warning {
                    eprintln!("warning[{}]: {}", warning.code, warning.message);
                }
                print(&if json {
                    to_json(&view)?
                } else {
                    to_json(&view.pinned)?
                });
                return Ok(ExitCode::SUCCESS);
            }
            let detail = show_workflow(&sources, &id).map_err(|e| envelope_text(&e))?;
            if json {
                print(&to_json(&detail)?);
            } else if compiled {
                match (&detail.compiled, &detail.errors) {
                    (Some(snapshot), _) => {
                        if let Some(hash) = &detail.workflow_hash {
                            eprintln!("workflowHash: {hash}");
                        }
                        print(&to_json(snapshot)?);
                    }
                    (None, Some(e)) => return Err(envelope_text(e)),
                    (None, None) => return Err(format!("{id} has no compiled snapshot")),
                }
            } else {
                eprintln!(
                    "{} from {} ({}){}",
                    detail.workflow_id,
                    detail.source_ref,
                    detail.source_kind,
                    if detail.editable { "" } else { ", read-only" }
                );
                print(&detail.source_text);
            }
        }
        WorkflowsAction::Save { id, file } => {
            let text = read_text(&file)?;
            let saved = save_source(&sources, &id, &text).map_err(|e| envelope_text(&e))?;
            print(&format!(
                "saved {} to {} ({}); a run started now pins {}",
                saved.workflow_id, saved.path, saved.source_ref, saved.workflow_hash
            ));
        }
        WorkflowsAction::Copy { id, new_id } => {
            let saved = copy_to_editable(&sources, &id, new_id.as_deref())
                .map_err(|e| envelope_text(&e))?;
            print(&format!(
                "copied {id} to {} at {}; edit it there (`workrail workflows save {} <file>`)",
                saved.workflow_id, saved.path, saved.workflow_id
            ));
        }
    }
    Ok(ExitCode::SUCCESS)
}

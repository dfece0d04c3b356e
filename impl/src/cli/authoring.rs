//! `workrail validate` and `workrail migrate`: the text of the authoring commands (the work is
//! `control::authoring`'s).

use std::path::Path;
use std::process::ExitCode;

use crate::compiler::error::{AutoFix, CompileError};
use crate::compiler::migrate::Migration;
use crate::control::authoring::{context, library_of, migrate_file, validate_file};
use crate::sources::SourceConfig;

use super::{EXIT_FAILURE, print_stdout};

/// The options of `workrail validate`.
#[derive(Debug, Clone, Copy)]
pub(super) struct ValidateOptions {
    pub bundled: bool,
    pub fix: bool,
    pub strict: bool,
}

fn sources() -> SourceConfig {
    SourceConfig::from_process_env()
        .unwrap_or_else(|_| SourceConfig::new(None, Path::new("."), None))
}

fn fix_text(fix: &AutoFix) -> String {
    match fix {
        AutoFix::Replace { path, value } => format!("replace {path} with {value}"),
        AutoFix::Remove { path } => format!("remove {path}"),
        AutoFix::Add { path, value } => format!("add {path} = {value}"),
        AutoFix::Move { from, path } => format!("move {from} to {path}"),
    }
}

fn errors_text(file: &Path, list: &[CompileError], what: &str) -> String {
    let mut out = format!(
        "{}: {what}, {} problem{}\n",
        file.display(),
        list.len(),
        if list.len() == 1 { "" } else { "s" }
    );
    for e in list {
        let at = if e.pointer.is_empty() {
            "(document)"
        } else {
            e.pointer.as_str()
        };
        out.push_str(&format!(
            "\nerror[{}] at {at}: {}\n  fix: {}\n",
            e.code.as_str(),
            e.message,
            e.suggestion
        ));
        if let Some(fix) = &e.fix
            && let Ok(patch) = serde_json::to_string(fix)
        {
            out.push_str(&format!("  auto-fix (RFC 6902): {patch}\n"));
        }
    }
    out
}

/// `workrail validate`: exit 0 with the workflowHash, or 1 with every problem (with `--strict`,
/// warnings count as problems).
pub(super) fn validate(file: &Path, options: ValidateOptions) -> ExitCode {
    let ctx = context(options.bundled, library_of(&sources()));
    let validation = match validate_file(file, &ctx, options.fix) {
        Ok(v) => v,
        Err(message) => {
            eprintln!("workrail: {message}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    for applied in &validation.fixed {
        match &applied.skipped {
            None => eprintln!("fixed {}: {}", file.display(), fix_text(&applied.fix)),
            Some(why) => eprintln!(
                "not fixed {}: {} ({why})",
                file.display(),
                fix_text(&applied.fix)
            ),
        }
    }
    if options.fix && validation.fixed.is_empty() {
        eprintln!("{}: no auto-fix to apply", file.display());
    }
    let compiled = match validation.result {
        Ok(compiled) => compiled,
        Err(errors) => {
            print_stdout(&errors_text(file, errors.errors(), "invalid workflow"));
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let body = &compiled.snapshot.body;
    if options.strict && !body.compiled_warnings.is_empty() {
        let mut out = format!(
            "{}: warnings are errors (--strict), {} problem{}\n",
            file.display(),
            body.compiled_warnings.len(),
            if body.compiled_warnings.len() == 1 {
                ""
            } else {
                "s"
            }
        );
        for w in &body.compiled_warnings {
            out.push_str(&format!(
                "\nerror[{}] at {}: {}\n",
                w.code.as_str(),
                w.pointer.as_deref().unwrap_or("(document)"),
                w.message
            ));
        }
        print_stdout(&out);
        return ExitCode::from(EXIT_FAILURE);
    }
    for warning in &body.compiled_warnings {
        let at = warning.pointer.as_deref().unwrap_or("(document)");
        eprintln!(
            "warning[{}] at {at}: {}",
            warning.code.as_str(),
            warning.message
        );
    }
    eprintln!(
        "{}: ok, workflow {} ({} steps)",
        file.display(),
        body.workflow_id,
        body.steps.len()
    );
    if let Some(migration) = &validation.migration {
        eprintln!("{}", migration_note(file, migration));
    }
    print_stdout(&compiled.workflow_hash.to_string());
    ExitCode::SUCCESS
}

/// What `validate` says about migrating a file that uses the 3.x spelling.
fn migration_note(file: &Path, m: &Migration) -> String {
    let command = format!("`workrail migrate {}`", file.display());
    if !m.errors.is_empty() {
        return format!(
            "migration: {command} would not compile ({} problem(s)); it would write nothing",
            m.errors.len()
        );
    }
    if m.changes.is_empty() {
        return format!(
            "migration: nothing to rewrite; {} field(s) have no v2 spelling and stay as written: {}",
            m.leftovers.len(),
            m.leftovers
                .iter()
                .map(|l| l.pointer.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    if m.is_clean() {
        return format!(
            "migration: migrates cleanly: {command} rewrites {} field(s) into the v2 spelling and leaves nothing in the 3.x spelling",
            m.changes.len()
        );
    }
    format!(
        "migration: {command} would rewrite {} field(s); {} have no v2 spelling and stay as written: {}",
        m.changes.len(),
        m.leftovers.len(),
        m.leftovers
            .iter()
            .map(|l| l.pointer.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// `workrail migrate`: rewrites the file in the v2 spelling (or prints it with `--dry-run`),
/// listing each change and each field that has no v2 spelling.
pub(super) fn migrate(file: &Path, bundled: bool, dry_run: bool) -> ExitCode {
    let ctx = context(bundled, library_of(&sources()));
    let m = match migrate_file(file, &ctx, dry_run) {
        Ok(m) => m,
        Err(message) => {
            eprintln!("workrail: {message}");
            return ExitCode::from(EXIT_FAILURE);
        }
    };
    let mut report = String::new();
    for c in &m.changes {
        report.push_str(&format!("changed {}: {}\n", c.pointer, c.description));
    }
    for l in &m.leftovers {
        report.push_str(&format!("no v2 spelling {}: {}\n", l.pointer, l.reason));
    }
    if !m.errors.is_empty() {
        report.push_str(&errors_text(
            file,
            &m.errors,
            "the migrated workflow does not compile (nothing written)",
        ));
        print_stdout(&report);
        return ExitCode::from(EXIT_FAILURE);
    }
    let verdict = match (m.changes.is_empty(), dry_run, m.leftovers.is_empty()) {
        (true, _, true) => "already in the v2 spelling; nothing to do".to_owned(),
        (true, _, false) => "nothing to rewrite; the fields above have no v2 spelling".to_owned(),
        (false, true, _) => format!("{} change(s) (dry run: nothing written)", m.changes.len()),
        (false, false, _) => format!("{} change(s) written", m.changes.len()),
    };
    report.push_str(&format!("{}: {verdict}", file.display()));
    if dry_run {
        eprintln!("{report}");
        print_stdout(&m.text);
    } else {
        print_stdout(&report);
    }
    ExitCode::SUCCESS
}

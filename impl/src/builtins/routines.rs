//! `wr.templates.routine.<name>`: the routine templates. A routine is an ordinary workflow whose
//! id names it a routine (`<namespace>.routine-<name>`, or a legacy `routine-<name>`); calling
//! its template expands the routine's steps in place at compile time (locks §5, like any
//! `template_call`), with the call's `args` substituted for `{arg}` placeholders.
//!
//! The family is open (any routine in the workflow sources answers), so the catalog lists its
//! shape rather than its members. Names compare after the legacy-id normalization (lowercase,
//! `-` and other characters outside `[a-z0-9_]` as `_`), so `wr.routine-design-review`, renamed to
//! `project.routine_design_review` by the namespace rules, still answers
//! `wr.templates.routine.design-review`.

/// The prefix of every routine template id.
pub const ROUTINE_TEMPLATE_PREFIX: &str = "wr.templates.routine.";

/// One line for the builtins catalog.
pub const ROUTINE_TEMPLATE_SUMMARY: &str = "Expands the steps of the routine workflow `<namespace>.routine-<name>` (bundled first, then the other sources in precedence order) in place of the calling step; `{arg}` placeholders in the routine's step titles and prompts take the call's `args`, and the routine's `metaGuidance` becomes guidance of every expanded step.";

/// The routine name a template id asks for (`wr.templates.routine.design-review` ->
/// `design-review`), if it is a routine template id.
pub fn template_routine_name(template_id: &str) -> Option<&str> {
    template_id
        .strip_prefix(ROUTINE_TEMPLATE_PREFIX)
        .filter(|name| !name.is_empty())
}

//! `wr.templates.*`: the closed set of WorkRail-owned step templates.
//!
//! A `template_call` expands in place into the template's steps (locks §5). Templates take typed
//! arguments (closed sets of strings) and may imply an output contract, so authors get a
//! validated artifact without naming the pack.

use workrail_spec::closed::Capability;

use super::contracts::CAPABILITY_OBSERVATION;

/// The namespace every template lives in.
pub const TEMPLATE_PREFIX: &str = "wr.templates.";

/// `wr.templates.capability_probe`.
pub const CAPABILITY_PROBE: &str = "wr.templates.capability_probe";

/// One argument of a template: a closed set of strings, always required.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemplateArg {
    pub name: &'static str,
    pub allowed: &'static [&'static str],
    pub summary: &'static str,
}

/// One template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TemplateDef {
    pub template_id: &'static str,
    pub summary: &'static str,
    pub args: &'static [TemplateArg],
    pub implied_contract: Option<&'static str>,
}

/// Every template, sorted by id.
pub const TEMPLATES: &[TemplateDef] = &[TemplateDef {
    template_id: CAPABILITY_PROBE,
    summary: "A step that tries a capability once and records a wr.capability_observation.",
    args: &[
        TemplateArg {
            name: "capability",
            allowed: &["delegation", "web_browsing"],
            summary: "The capability to probe.",
        },
        TemplateArg {
            name: "when",
            allowed: &["early_if_required", "lazy_on_first_use"],
            summary: "`early_if_required`: try it now with a minimal action; `lazy_on_first_use`: report the first real attempt, or try now if there was none.",
        },
    ],
    implied_contract: Some(CAPABILITY_OBSERVATION),
}];

pub fn find(template_id: &str) -> Option<&'static TemplateDef> {
    TEMPLATES.iter().find(|t| t.template_id == template_id)
}

/// When a probe runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProbeWhen {
    EarlyIfRequired,
    LazyOnFirstUse,
}

impl ProbeWhen {
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "early_if_required" => Some(Self::EarlyIfRequired),
            "lazy_on_first_use" => Some(Self::LazyOnFirstUse),
            _ => None,
        }
    }
}

/// The text of one template-expanded step, before the compiler applies features.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateStep {
    pub step_id: String,
    pub title: String,
    pub goal: String,
    pub constraints: Vec<String>,
    pub procedure: Vec<String>,
    pub notes: String,
    pub verify: Vec<String>,
    pub contract_ref: &'static str,
}

/// The step id a probe of `capability` expands to (stable, so StepInstanceKeys are too).
pub fn probe_step_id(capability: Capability) -> String {
    format!("capability_probe_{}", capability.as_str())
}

fn capability_phrase(capability: Capability) -> (&'static str, &'static str) {
    match capability {
        Capability::Delegation => (
            "delegation (subagents or parallel workers)",
            "Delegate one trivial, read-only task to a subagent (for example: list the files in the repository root) and check that its answer comes back.",
        ),
        Capability::WebBrowsing => (
            "web browsing",
            "Fetch one small public page or run one web search (for example: fetch https://example.com) and read something specific from the result.",
        ),
    }
}

/// The `evidence` of the example observation shown on a probe step of `capability`.
pub fn probe_example_evidence(capability: Capability) -> &'static str {
    match capability {
        Capability::Delegation => {
            "Delegated 'list the files in the repository root' to a subagent; it returned the list."
        }
        Capability::WebBrowsing => "Fetched https://example.com and read its title.",
    }
}

/// Expands `wr.templates.capability_probe`.
pub fn capability_probe(capability: Capability, when: ProbeWhen) -> TemplateStep {
    let (name, attempt) = capability_phrase(capability);
    let mut procedure = Vec::new();
    match when {
        ProbeWhen::EarlyIfRequired => procedure.push(attempt.to_owned()),
        ProbeWhen::LazyOnFirstUse => {
            procedure.push(format!(
                "If you already tried {name} earlier in this run, report that attempt and its result; do not repeat it."
            ));
            procedure.push(format!("Otherwise: {attempt}"));
        }
    }
    procedure.push(
        "Record the result as a `wr.capability_observation` artifact: `status` is `available` only if the attempt worked; `evidence` says what you tried and what happened.".to_owned(),
    );
    procedure.push(
        "If it is unavailable, add `remediation`: what the user can do (for example: install or enable a tool that provides it, or supply the needed material manually).".to_owned(),
    );
    TemplateStep {
        step_id: probe_step_id(capability),
        title: format!("Probe capability: {}", capability.as_str()),
        goal: format!("Find out whether {name} actually works in this agent environment."),
        constraints: vec![
            "Do not claim a capability works because a tool is listed; only an attempt that returned a result counts.".to_owned(),
            "Keep the attempt minimal and side-effect free.".to_owned(),
        ],
        procedure,
        notes: format!("One line: whether {name} worked and how you know."),
        verify: vec!["The observation's `evidence` names the concrete attempt and its result.".to_owned()],
        contract_ref: CAPABILITY_OBSERVATION,
    }
}

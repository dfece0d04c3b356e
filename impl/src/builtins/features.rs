//! `wr.features.*`: the closed set of compiler middleware a workflow can switch on.
//!
//! A feature is applied to every compiled step, in ascending lexical `featureId` order (locks §5).
//! Configurable features take a typed config whose fields are closed sets of strings; the
//! compiler validates it and writes every default explicitly into the compiled config, so the
//! hash never depends on an implicit default.

/// The namespace every feature lives in.
pub const FEATURE_PREFIX: &str = "wr.features.";

/// One closed-set string field of a feature config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigField {
    pub name: &'static str,
    /// Allowed values, sorted.
    pub allowed: &'static [&'static str],
    pub default: &'static str,
    pub summary: &'static str,
}

/// The closed set of features.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FeatureId {
    Capabilities,
    DurableRecapGuidance,
    ModeGuidance,
    OutputContracts,
    SubagentGuidance,
}

impl FeatureId {
    /// Every feature, in ascending lexical id order (the application order).
    pub const ALL: &'static [Self] = &[
        Self::Capabilities,
        Self::DurableRecapGuidance,
        Self::ModeGuidance,
        Self::OutputContracts,
        Self::SubagentGuidance,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Capabilities => "wr.features.capabilities",
            Self::DurableRecapGuidance => "wr.features.durable_recap_guidance",
            Self::ModeGuidance => "wr.features.mode_guidance",
            Self::OutputContracts => "wr.features.output_contracts",
            Self::SubagentGuidance => "wr.features.subagent_guidance",
        }
    }

    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|f| f.as_str() == value)
    }

    /// One line for the builtins catalog.
    pub const fn summary(self) -> &'static str {
        match self {
            Self::Capabilities => {
                "Shows guidance (use, fallback and report, or do-not-use) for each declared capability with the pending step: when a run first reaches a step that is not a probe, and on every rehydrate, until the capability is observed on the branch."
            }
            Self::DurableRecapGuidance => {
                "Asks every step for a fresh, bounded notesMarkdown recap unless the step already says what notes to write."
            }
            Self::ModeGuidance => {
                "Adds a constraint to every step on how to handle ambiguity in the selected autonomy mode."
            }
            Self::OutputContracts => {
                "Adds the contract's example artifact and its enforcement rule to every step that declares output.contractRef."
            }
            Self::SubagentGuidance => {
                "Adds rules for delegating to subagents (the main agent keeps synthesis and every decision) to every step written with promptBlocks."
            }
        }
    }

    /// Whether the feature accepts `{id, config}` (authoring "Whitelist of configurable features").
    pub const fn configurable(self) -> bool {
        !matches!(self, Self::DurableRecapGuidance | Self::SubagentGuidance)
    }

    /// The config field names, in table order (the allowed keys of `config`).
    pub const fn config_field_names(self) -> &'static [&'static str] {
        match self {
            Self::Capabilities => &["probeVisibility", "recordObservationsAs"],
            Self::DurableRecapGuidance => &[],
            Self::ModeGuidance => &["detail"],
            Self::OutputContracts => &["enforce"],
            Self::SubagentGuidance => &[],
        }
    }

    /// The config fields (empty for toggle-only features).
    pub const fn config_fields(self) -> &'static [ConfigField] {
        match self {
            Self::Capabilities => CAPABILITIES_CONFIG,
            Self::DurableRecapGuidance => &[],
            Self::ModeGuidance => MODE_GUIDANCE_CONFIG,
            Self::OutputContracts => OUTPUT_CONTRACTS_CONFIG,
            Self::SubagentGuidance => &[],
        }
    }
}

const CAPABILITIES_CONFIG: &[ConfigField] = &[
    ConfigField {
        name: "probeVisibility",
        allowed: &["collapsed", "expanded"],
        default: "collapsed",
        summary: "How Studio shows injected probe steps (collapsed by default).",
    },
    ConfigField {
        name: "recordObservationsAs",
        allowed: &["artifact"],
        default: "artifact",
        summary: "How probe results are recorded: a `wr.capability_observation` artifact (the only v2 option).",
    },
];

const MODE_GUIDANCE_CONFIG: &[ConfigField] = &[ConfigField {
    name: "detail",
    allowed: &["brief", "full"],
    default: "brief",
    summary: "`brief`: one constraint line; `full`: a line per autonomy mode.",
}];

const OUTPUT_CONTRACTS_CONFIG: &[ConfigField] = &[ConfigField {
    name: "enforce",
    allowed: &["block_in_blocking_modes_gap_in_never_stop"],
    default: "block_in_blocking_modes_gap_in_never_stop",
    summary: "Enforcement rule stated to the agent; the locked mode mapping is the only v2 option.",
}];

/// `wr.features.mode_guidance`, `detail: brief`.
pub const MODE_GUIDANCE_BRIEF: &str = "Follow the selected autonomy mode: in `guided`, ask the user \
when a decision is ambiguous; in full-auto modes, make the most reasonable assumption, state it \
explicitly in output.notesMarkdown, and continue.";

/// `wr.features.mode_guidance`, `detail: full` (one constraint per mode, in mode order).
pub const MODE_GUIDANCE_FULL: &[&str] = &[
    "In `guided` mode: when a decision is ambiguous, ask the user one concise question and wait.",
    "In `full_auto_stop_on_user_deps` mode: decide on your own and disclose each assumption, but \
stop when only the user can unblock (secrets, account access, approvals, irreversible actions).",
    "In `full_auto_never_stop` mode: never stop; disclose every assumption and every skipped item \
in output.notesMarkdown so WorkRail can record the gap.",
];

/// `wr.features.durable_recap_guidance`: the `outputRequired.notesMarkdown` it fills in.
pub const DURABLE_RECAP_NOTES: &str = "A fresh recap of this step only (at most 10 lines): what \
you did, what you found with evidence, and what comes next. Do not repeat earlier notes.";

/// The `outputRequired` key a step's contract requirement is rendered under.
pub const ARTIFACTS_OUTPUT_KEY: &str = "artifacts";

/// The `outputRequired` key recap guidance is rendered under.
pub const NOTES_OUTPUT_KEY: &str = "notesMarkdown";

/// `wr.features.subagent_guidance`: the constraints it appends (the last one is a ref part).
pub const SUBAGENT_GUIDANCE_CONSTRAINTS: &[&str] = &[
    "Delegate only to generic WorkRail executors (a subagent running a WorkRail workflow or routine); do not rely on named specialist personas.",
    "You, the main agent, own the strategy, every decision, the synthesis and the final outputs; subagents contribute independent perspectives only.",
];

/// The ref `wr.features.subagent_guidance` appends as its last constraint.
pub const SUBAGENT_GUIDANCE_REF: &str = "wr.refs.parallelize_cognition_serialize_synthesis";

/// `wr.features.subagent_guidance`: the procedure items it appends.
pub const SUBAGENT_GUIDANCE_PROCEDURE: &[&str] = &[
    "When you delegate, give each subagent one distinct, non-overlapping focus and the same shared facts as its starting truth.",
    "When the parallel results come back, synthesize them yourself; never adopt one result as the answer without your own review.",
];

/// `wr.features.subagent_guidance`: the checks it appends to `verify`.
pub const SUBAGENT_GUIDANCE_VERIFY: &[&str] = &[
    "Every delegated result was reviewed and merged by the main agent, none adopted verbatim.",
    "No subagent made a final decision about findings, recommendations or deliverables.",
];

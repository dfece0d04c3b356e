//! The closed sets of the locks (locks §16.3 and the sections it indexes), as enums with their
//! exact wire spelling.
//!
//! A closed set never grows silently: adding a value is a schema change that regenerates
//! `spec/schemas/` (and a version bump when meaning changes, locks §14).

/// Defines a closed set: an enum whose variants serialize as the given wire strings, with
/// `ALL`, `as_str` and `parse`.
macro_rules! closed_set {
    (
        $(#[$meta:meta])*
        $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, ::serde::Serialize,
            ::serde::Deserialize, ::schemars::JsonSchema,
        )]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $wire)] $variant ),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// The exact wire spelling.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $wire ),+
                }
            }

            /// Parses the exact wire spelling.
            pub fn parse(value: &str) -> Option<Self> {
                match value {
                    $( $wire => Some(Self::$variant), )+
                    _ => None,
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use closed_set;

closed_set!(
    /// How far the agent may go without the user (locks §4).
    Autonomy {
        Guided = "guided",
        FullAutoStopOnUserDeps = "full_auto_stop_on_user_deps",
        FullAutoNeverStop = "full_auto_never_stop",
    }
);

impl Autonomy {
    /// Position in the locked partial order `guided < full_auto_stop_on_user_deps <
    /// full_auto_never_stop` (locks §5 "Warnings").
    pub const fn rank(self) -> u8 {
        match self {
            Self::Guided => 0,
            Self::FullAutoStopOnUserDeps => 1,
            Self::FullAutoNeverStop => 2,
        }
    }

    /// Blocking modes may return `blocked`; never-stop records gaps instead (locks §3).
    pub const fn is_blocking(self) -> bool {
        !matches!(self, Self::FullAutoNeverStop)
    }
}

closed_set!(
    /// Warning thresholds and defaults between correct paths; never bypasses contracts (locks §4).
    RiskPolicy {
        Conservative = "conservative",
        Balanced = "balanced",
        Aggressive = "aggressive",
    }
);

impl RiskPolicy {
    /// Position in the locked partial order `conservative < balanced < aggressive`.
    pub const fn rank(self) -> u8 {
        match self {
            Self::Conservative => 0,
            Self::Balanced => 1,
            Self::Aggressive => 2,
        }
    }
}

closed_set!(
    /// What the agent should do next (locks §16.3 "Next intent").
    NextIntent {
        PerformPendingThenContinue = "perform_pending_then_continue",
        AwaitUserConfirmation = "await_user_confirmation",
        RehydrateOnly = "rehydrate_only",
        Complete = "complete",
    }
);

closed_set!(
    /// Optional agent capabilities WorkRail plans for (locks §1 "capability_observed").
    Capability {
        Delegation = "delegation",
        WebBrowsing = "web_browsing",
    }
);

closed_set!(
    /// What a workflow declares about a capability (authoring "Capabilities").
    CapabilityRequirement {
        Required = "required",
        Preferred = "preferred",
        Disabled = "disabled",
    }
);

closed_set!(
    /// Observed capability status.
    CapabilityStatus {
        Unknown = "unknown",
        Available = "available",
        Unavailable = "unavailable",
    }
);

closed_set!(
    /// Kind of a run DAG node (locks §1 "node_created").
    NodeKind {
        Step = "step",
        Checkpoint = "checkpoint",
    }
);

closed_set!(
    /// Kind of a run DAG edge (locks §1 "edge_created").
    EdgeKind {
        AckedStep = "acked_step",
        Checkpoint = "checkpoint",
    }
);

closed_set!(
    /// Why an edge exists (locks §1 "edge_created").
    EdgeCauseKind {
        IdempotentReplay = "idempotent_replay",
        IntentionalFork = "intentional_fork",
        NonTipAdvance = "non_tip_advance",
        CheckpointCreated = "checkpoint_created",
    }
);

closed_set!(
    /// The `kind` of an `advance_recorded` outcome (locks §1 "advance_recorded"): the tag of
    /// [`crate::event::AdvanceOutcome`].
    AdvanceOutcomeKind {
        Blocked = "blocked",
        Advanced = "advanced",
    }
);

impl EdgeCauseKind {
    /// Causes allowed for each edge kind (locks §1 "edge_created" invariants).
    pub const fn allowed_for(self, edge: EdgeKind) -> bool {
        match edge {
            EdgeKind::AckedStep => matches!(
                self,
                Self::IdempotentReplay | Self::IntentionalFork | Self::NonTipAdvance
            ),
            EdgeKind::Checkpoint => matches!(self, Self::CheckpointCreated),
        }
    }
}

closed_set!(
    /// Token payload kinds (locks §1.2).
    TokenKind {
        State = "state",
        Ack = "ack",
        Checkpoint = "checkpoint",
    }
);

impl TokenKind {
    /// The token string prefix: `st`, `ack` or `chk` (locks §1.2 "Token string encoding").
    pub const fn prefix(self) -> &'static str {
        match self {
            Self::State => "st",
            Self::Ack => "ack",
            Self::Checkpoint => "chk",
        }
    }

    pub fn from_prefix(prefix: &str) -> Option<Self> {
        match prefix {
            "st" => Some(Self::State),
            "ack" => Some(Self::Ack),
            "chk" => Some(Self::Checkpoint),
            _ => None,
        }
    }
}

closed_set!(
    /// Run status projection (locks §2.1).
    RunStatus {
        InProgress = "in_progress",
        Blocked = "blocked",
        Complete = "complete",
        CompleteWithGaps = "complete_with_gaps",
    }
);

closed_set!(
    /// Session health classification (locks §10 "Session health + tool gating").
    SessionHealthKind {
        Healthy = "healthy",
        CorruptTail = "corrupt_tail",
        CorruptHead = "corrupt_head",
        UnknownVersion = "unknown_version",
    }
);

closed_set!(
    /// Where a workflow came from (locks §1 "run_started", §7 discovery fields).
    WorkflowSourceKind {
        Bundled = "bundled",
        User = "user",
        Project = "project",
        Remote = "remote",
        Plugin = "plugin",
    }
);

closed_set!(
    /// Who changed preferences (locks §1 "preferences_changed").
    PreferenceSource {
        User = "user",
        WorkflowRecommendation = "workflow_recommendation",
        System = "system",
    }
);

closed_set!(
    /// Why only the user can unblock (locks §3 "User-only dependencies").
    UserOnlyDependencyReason {
        NeedsUserSecretOrToken = "needs_user_secret_or_token",
        NeedsUserAccountAccess = "needs_user_account_access",
        NeedsUserArtifact = "needs_user_artifact",
        /// Only when the workflow marks the choice non-assumable ([`NonAssumableChoiceKind`]).
        NeedsUserChoice = "needs_user_choice",
        NeedsUserApproval = "needs_user_approval",
        NeedsUserEnvironmentAction = "needs_user_environment_action",
    }
);

closed_set!(
    /// Choices a workflow may mark as non-assumable (locks §3).
    NonAssumableChoiceKind {
        PreferenceTradeoff = "preference_tradeoff",
        ScopeBoundary = "scope_boundary",
        IrreversibleAction = "irreversible_action",
        ExternalSideEffect = "external_side_effect",
        PolicyOrCompliance = "policy_or_compliance",
    }
);

closed_set!(
    /// Gap severity (locks §1 "gap_recorded").
    GapSeverity {
        Info = "info",
        Warning = "warning",
        Critical = "critical",
    }
);

closed_set!(
    /// Intentional off-script behaviour (locks §1 "divergence_recorded").
    DivergenceReason {
        MissingUserContext = "missing_user_context",
        CapabilityUnavailable = "capability_unavailable",
        EfficiencySkip = "efficiency_skip",
        SafetyStop = "safety_stop",
        PolicyConstraint = "policy_constraint",
    }
);

closed_set!(
    /// Decision trace entry kinds (locks §1 "decision_trace_appended").
    DecisionTraceKind {
        SelectedNextStep = "selected_next_step",
        EvaluatedCondition = "evaluated_condition",
        EnteredLoop = "entered_loop",
        ExitedLoop = "exited_loop",
        DetectedNonTipAdvance = "detected_non_tip_advance",
    }
);

closed_set!(
    /// Workspace identity anchors (locks §1 "observation_recorded").
    ObservationKey {
        GitBranch = "git_branch",
        GitHeadSha = "git_head_sha",
        RepoRootHash = "repo_root_hash",
    }
);

closed_set!(
    /// Observation confidence.
    Confidence {
        Low = "low",
        Med = "med",
        High = "high",
    }
);

closed_set!(
    /// Output channels (locks §1 "node_output_appended").
    OutputChannel {
        Recap = "recap",
        Artifact = "artifact",
    }
);

closed_set!(
    /// Capability observation provenance kinds (locks §1 "capability_observed").
    ProvenanceKind {
        ProbeStep = "probe_step",
        AttemptedUse = "attempted_use",
        ManualClaim = "manual_claim",
    }
);

closed_set!(
    /// Whether an observation may unlock a required capability (locks appendix).
    EnforcementGrade {
        Strong = "strong",
        Weak = "weak",
    }
);

impl ProvenanceKind {
    /// The grade is derived deterministically from the kind (locks §1 "capability_observed").
    pub const fn enforcement_grade(self) -> EnforcementGrade {
        match self {
            Self::ProbeStep | Self::AttemptedUse => EnforcementGrade::Strong,
            Self::ManualClaim => EnforcementGrade::Weak,
        }
    }
}

closed_set!(
    /// Result of a probe or attempted use.
    ProbeResult {
        Success = "success",
        Failure = "failure",
    }
);

closed_set!(
    /// Where an attempted use happened.
    AttemptContext {
        WorkflowStep = "workflow_step",
        SystemProbe = "system_probe",
    }
);

closed_set!(
    /// Why an attempted use failed.
    AttemptFailureCode {
        ToolMissing = "tool_missing",
        ToolError = "tool_error",
        PolicyBlocked = "policy_blocked",
        Unknown = "unknown",
    }
);

closed_set!(
    /// Who made a manual capability claim.
    ClaimedBy {
        Agent = "agent",
        User = "user",
    }
);

closed_set!(
    /// What a manual claim says.
    ClaimValue {
        Available = "available",
        Unavailable = "unavailable",
    }
);

closed_set!(
    /// Intent of an ack attempt (locks §1 "advance_recorded").
    AdvanceIntent {
        AckPending = "ack_pending",
    }
);

closed_set!(
    /// Origin of a `context_set` record (locks §18.2 DECISION).
    ContextSource {
        Initial = "initial",
        AgentDelta = "agent_delta",
        Merge = "merge",
    }
);

closed_set!(
    /// Discovery row kind (contract "Workflow identity and namespaces").
    WorkflowKind {
        Workflow = "workflow",
        Routine = "routine",
    }
);

closed_set!(
    /// How a recap was cut to its budget (contract "Recap budgets and truncation").
    RecapTruncationPolicy {
        /// Whole entries were kept, newest first, while they fit; older ones were omitted.
        KeptMostRecent = "kept_most_recent",
        /// The newest entry alone exceeds the budget: its beginning is kept, marked.
        CutNewestEntry = "cut_newest_entry",
    }
);

closed_set!(
    /// Why a resume candidate matched (locks §2.3 "Match explanations").
    WhyMatched {
        MatchedHeadSha = "matched_head_sha",
        MatchedBranch = "matched_branch",
        MatchedNotes = "matched_notes",
        MatchedWorkflowId = "matched_workflow_id",
        RecencyFallback = "recency_fallback",
    }
);

closed_set!(
    /// Where a compiled step came from (locks §5 "CompiledWorkflowSnapshotV1").
    StepSource {
        Authored = "authored",
        TemplateInjected = "template_injected",
        FeatureInjected = "feature_injected",
    }
);

closed_set!(
    /// A loop-control decision (authoring "wr.contracts.loop_control").
    LoopDecision {
        Continue = "continue",
        Stop = "stop",
    }
);

closed_set!(
    /// Preference keys (locks §1 "preferences_changed").
    PreferenceKey {
        Autonomy = "autonomy",
        RiskPolicy = "riskPolicy",
    }
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_spelling_roundtrips_through_serde() {
        for v in Autonomy::ALL {
            let json = serde_json::to_string(v).unwrap();
            assert_eq!(json, format!("\"{}\"", v.as_str()));
            assert_eq!(serde_json::from_str::<Autonomy>(&json).unwrap(), *v);
            assert_eq!(Autonomy::parse(v.as_str()), Some(*v));
        }
        assert!(serde_json::from_str::<Autonomy>("\"Guided\"").is_err());
    }

    #[test]
    fn edge_causes_follow_edge_kinds() {
        assert!(EdgeCauseKind::NonTipAdvance.allowed_for(EdgeKind::AckedStep));
        assert!(!EdgeCauseKind::CheckpointCreated.allowed_for(EdgeKind::AckedStep));
        assert!(EdgeCauseKind::CheckpointCreated.allowed_for(EdgeKind::Checkpoint));
        assert!(!EdgeCauseKind::IntentionalFork.allowed_for(EdgeKind::Checkpoint));
    }
}

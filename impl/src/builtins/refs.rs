//! `wr.refs.*`: the closed set of canonical WorkRail snippets a workflow may embed inline.
//!
//! Refs are resolved at compile time only and their full text is embedded in the compiled
//! snapshot (locks §9 "Prompt references"), so editing a snippet changes the `workflowHash` of
//! every workflow that uses it. Snippets are byte-budgeted; the compiler enforces both budgets
//! as validation errors, never by truncating.

use workrail_spec::ids::Sha256Digest;
use workrail_spec::jcs::sha256;

/// The namespace every ref id lives in.
pub const REF_PREFIX: &str = "wr.refs.";

/// Max UTF-8 bytes of one snippet (locks §9 "per referenced snippet max bytes").
pub const REF_SNIPPET_MAX_BYTES: usize = 1024;

/// Max UTF-8 bytes of ref text injected into one step, counting every usage
/// (locks §9 "per step injected bytes cap").
pub const REF_STEP_MAX_BYTES: usize = 2048;

/// One canonical snippet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefSnippet {
    pub ref_id: &'static str,
    /// One line for the builtins catalog.
    pub summary: &'static str,
    pub text: &'static str,
}

impl RefSnippet {
    /// `sha256` of the snippet's UTF-8 bytes (the `refContentHash` of its provenance).
    pub fn content_hash(&self) -> Sha256Digest {
        sha256(self.text.as_bytes())
    }

    pub fn bytes(&self) -> usize {
        self.text.len()
    }
}

/// Every snippet, sorted by `ref_id`.
pub const REFS: &[RefSnippet] = &[
    RefSnippet {
        ref_id: "wr.refs.adversarial_challenge_rules",
        summary: "How to challenge a leading position honestly: try to break it, then record what survives.",
        text: "Challenge the leading position instead of confirming it: build the strongest case \
that a different answer is right, and for each finding name the evidence that would disprove it \
and whether that evidence exists. A position that survives a serious attempt is stronger; a \
weakness the attempt exposes is a finding, recorded with its real severity, and the position \
changes. Do not soften findings to keep the peace, and do not inflate them either: a false alarm \
costs attention just as a missed problem costs quality. When two independent challengers raise \
the same serious concern, treat it as blocking until it is resolved.",
    },
    RefSnippet {
        ref_id: "wr.refs.append_only_truth",
        summary: "What you record is kept: corrections are added, never edited in place.",
        text: "WorkRail keeps everything you record with a step, and nothing is edited in place: \
to correct something, record the correction in a later step; the earlier record stays visible. \
Anything not recorded through WorkRail (chat memory, scratch files, your own summary of earlier \
turns) may be gone after a rewind or a new chat, so put what matters in `output` before you \
acknowledge a step.",
    },
    RefSnippet {
        ref_id: "wr.refs.divergence_reporting",
        summary: "How to report an intentional deviation as a workflow_divergence artifact.",
        text: "If you intentionally deviate from these instructions (skip an item, change the \
order, stop early), add a `workflow_divergence` artifact to `output.artifacts` with `reason` \
(one of missing_user_context, capability_unavailable, efficiency_skip, safety_stop, \
policy_constraint), a short `summary` of what you did instead and why, and `relatedStepId`. A \
silent deviation is a defect; a disclosed one is a decision.",
    },
    RefSnippet {
        ref_id: "wr.refs.evidence_over_flags",
        summary: "Verify with evidence (commands, files, tests), never with completion flags.",
        text: "Verify with evidence, not flags: cite the command you ran and what it printed, \
the file and line you inspected, or the test that now passes and failed before. \"Done\", \
\"looks good\" or a boolean is not evidence. If you could not verify something, say so \
explicitly and say why, instead of implying success.",
    },
    RefSnippet {
        ref_id: "wr.refs.jcs_hashing",
        summary: "Hashes are sha256 over RFC 8785 (JCS) canonical JSON, written sha256:<hex>.",
        text: "Hashes in WorkRail are SHA-256 over the RFC 8785 (JCS) canonical form of typed \
JSON: object keys sorted by UTF-16 code units, no insignificant whitespace, numbers in their \
shortest ECMAScript form, strings with minimal escaping. Digests are written \
`sha256:<64 lowercase hex>`. Never hash pretty-printed or hand-concatenated JSON: two values \
with the same meaning must produce the same bytes and the same hash.",
    },
    RefSnippet {
        ref_id: "wr.refs.minimal_change",
        summary: "Keep changes minimal, reversible and reviewable.",
        text: "Keep the change minimal and focused on the task: no drive-by refactors, no \
reformatting of untouched code, no new dependencies unless the plan names them and says why. \
Prefer the smallest change that a reviewer can verify in one reading; if a larger change is \
needed, split it into steps that each leave the build green.",
    },
    RefSnippet {
        ref_id: "wr.refs.modes_semantics",
        summary: "What guided, full_auto_stop_on_user_deps and full_auto_never_stop mean.",
        text: "Autonomy modes: `guided`: ask the user when a decision is ambiguous and wait for \
the answer. `full_auto_stop_on_user_deps`: proceed on your own, make the most reasonable \
assumption and disclose it in `output.notesMarkdown`, but stop when only the user can unblock \
(secrets, account access, approvals, irreversible or external actions). \
`full_auto_never_stop`: never stop; WorkRail records a gap for anything that would have \
blocked, and you disclose every assumption and skipped item.",
    },
    RefSnippet {
        ref_id: "wr.refs.notes_first_durability",
        summary: "The step's notes and context are the durable record; side files are for readers only.",
        text: "Keep the record of the work in what WorkRail stores: `output.notesMarkdown` for \
each step (what you decided, found and why) and explicit context values for facts later steps \
need. Documents you write for people (plans, reviews, reports) are welcome, but they are not the \
workflow's memory: after a rewind or in a new chat the notes and context are what remains, and \
a side file may be stale or gone. Before you advance, make sure every decision and finding that \
matters is in the notes.",
    },
    RefSnippet {
        ref_id: "wr.refs.notes_per_step",
        summary: "notesMarkdown is a fresh recap of this step only.",
        text: "`output.notesMarkdown` is a fresh recap of this step only, at most 10 lines: what \
you did, what you found (with evidence), what is next. Do not copy or extend earlier notes; \
WorkRail assembles the recap across steps and returns it when a chat is rewound or resumed.",
    },
    RefSnippet {
        ref_id: "wr.refs.parallelize_cognition_serialize_synthesis",
        summary: "Run independent thinking in parallel; keep synthesis and every decision with the main agent.",
        text: "Parallelize thinking that does not depend on other thinking: gathering context, \
generating hypotheses or options, and independent reviews can run at the same time, each with a \
distinct focus and the same shared facts. Serialize everything that decides: the main agent reads \
every parallel result, reconciles them, makes the decision and writes the canonical output. No \
single delegated result becomes the answer without that review, and delegated work never edits \
the shared deliverable directly.",
    },
    RefSnippet {
        ref_id: "wr.refs.synthesis_under_disagreement",
        summary: "How to merge parallel results that disagree, without hiding the disagreement.",
        text: "When parallel results disagree, the disagreement is work to do, not noise. An issue \
two or more results raise at the same severity is confirmed; raised at different severities, take \
the higher one unless the lower comes with specific counter-evidence. An issue only one result \
raises gets investigated, not adopted or dropped by default. When one result calls something a \
false positive and another a real problem, decide explicitly and say why in the notes. Until a \
material disagreement is settled, the findings outweigh any earlier recommendation; record how \
each contradiction was resolved.",
    },
    RefSnippet {
        ref_id: "wr.refs.v2_definition",
        summary: "What WorkRail v2 is, in one paragraph.",
        text: "WorkRail v2 is a durable, rewind-safe workflow engine that agents drive over MCP. \
It hands the agent one step at a time through opaque, signed tokens; keeps the record of the \
work itself (never in the chat transcript); pins every run to a compiled workflow by hash; and turns \
missing required information into structured blockers or recorded gaps, depending on the \
autonomy mode the user chose.",
    },
];

/// Looks a snippet up by id.
pub fn find(ref_id: &str) -> Option<&'static RefSnippet> {
    REFS.binary_search_by(|r| r.ref_id.cmp(ref_id))
        .ok()
        .map(|i| &REFS[i])
}

//! `resume_session` and the workspace observations it ranks by, through the MCP dispatch layer
//! over the crash-model filesystem.
//!
//! Guards against: a tier out of order, a `whyMatched` that omits or invents a criterion, ties
//! broken some other way than recency then sessionId, more than five candidates or an unbounded
//! snippet, text matching that is not NFKC + lowercase + whole-token, a corrupt session offered
//! as a candidate (or dropped without saying so), a non-tip node offered after a fork, a state
//! token that does not rehydrate the tip, a resume call or a rehydrate that writes, git fields
//! filled in from the server's own directory, resume results that change across export/import,
//! a switched-off tool that is still listed or callable; and, at `start_workflow`, git state
//! read wrongly (branch, detached HEAD, packed refs, linked worktrees, unborn branches, over
//! budget branches, not a repository).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use protocol_support::{ack, catalog, rehydrate, start};
use serde_json::{Value, json};
use workrail::bundle::{ImportOptions, NoProgress};
use workrail::entropy::SeededEntropy;
use workrail::features::{Feature, FeatureOverrides};
use workrail::mcp::WorkrailServer;
use workrail::mcp::dispatch::call_tool;
use workrail::protocol::Workrail;
use workrail::store::fs::StoreFs;
use workrail::store::layout;
use workrail::store::memfs::MemFs;
use workrail::workspace::fs::DirWorkspace;
use workrail::workspace::{FixedWorkspace, GitIdentity, Workspace};
use workrail_spec::budget::{RESUME_SNIPPET_MAX_BYTES, TRUNCATION_MARKER};
use workrail_spec::closed::{Confidence, ObservationKey, WhyMatched};
use workrail_spec::error::{ErrorCode, ErrorEnvelope};
use workrail_spec::event::{EventData, EventScope, ObservationRecorded, ObservationValue};
use workrail_spec::ids::SessionId;
use workrail_spec::tools::{ExecutionOutput, ResumeCandidateView, ResumeSessionOutput};

const SHA_A: &str = "4f3c2a1b0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a";
const SHA_B: &str = "0123456789abcdef0123456789abcdef01234567";

/// A process with its own entropy stream (distinct seeds mint distinct session ids) that
/// observes `identity` when runs start.
fn open_at(fs: &MemFs, seed: u64, identity: Option<GitIdentity>) -> Workrail {
    open_in(fs, seed, Arc::new(FixedWorkspace(identity)))
}

fn open_in(fs: &MemFs, seed: u64, workspace: Arc<dyn Workspace>) -> Workrail {
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    Workrail::with_parts(shared, catalog(), Arc::new(SeededEntropy::new(seed)))
        .unwrap()
        .with_workspace(workspace)
}

fn identity(root: &str, branch: Option<&str>, sha: Option<&str>) -> GitIdentity {
    GitIdentity {
        repo_root: PathBuf::from(root),
        branch: branch.map(str::to_owned),
        head_sha: sha.map(str::to_owned),
    }
}

/// Starts the demo workflow and acknowledges one step per note.
fn session(wr: &Workrail, notes: &[&str]) -> ExecutionOutput {
    let mut out = start(wr, "project.demo");
    for note in notes {
        out = wr.continue_workflow(ack(&out, note, vec![])).unwrap();
    }
    out
}

fn resume_outcome(wr: &Workrail, args: Value) -> workrail::mcp::dispatch::ToolOutcome {
    call_tool(wr, "resume_session", Some(args))
}

fn resume(wr: &Workrail, query: Value) -> ResumeSessionOutput {
    let outcome = resume_outcome(wr, json!({ "query": query }));
    assert!(!outcome.is_error, "{}", outcome.text);
    serde_json::from_value(outcome.structured).unwrap()
}

fn sessions_of(out: &ResumeSessionOutput) -> Vec<SessionId> {
    out.candidates
        .iter()
        .map(|c| c.session_id.clone())
        .collect()
}

fn candidate<'a>(out: &'a ResumeSessionOutput, session: &SessionId) -> &'a ResumeCandidateView {
    out.candidates
        .iter()
        .find(|c| &c.session_id == session)
        .unwrap_or_else(|| panic!("{session} is not a candidate: {out:#?}"))
}

fn id(out: &ExecutionOutput) -> SessionId {
    out.session.session_id.clone()
}

/// Every candidate list is ordered by tier (first `whyMatched`), then last activity descending,
/// then sessionId ascending.
fn assert_locked_order(out: &ResumeSessionOutput) {
    for pair in out.candidates.windows(2) {
        let key = |c: &ResumeCandidateView| {
            (
                c.why_matched[0],
                std::cmp::Reverse(c.last_activity_event_index),
                c.session_id.clone(),
            )
        };
        assert!(key(&pair[0]) < key(&pair[1]), "out of order: {out:#?}");
    }
}

/// Three sessions: `a` in repo A on `feature/auth-tokens`, `b` in repo B on `main`, `c`
/// outside any repository.
fn three_sessions(fs: &MemFs) -> (Workrail, SessionId, SessionId, SessionId) {
    let a = session(
        &open_at(
            fs,
            11,
            Some(identity(
                "/repo/a",
                Some("feature/auth-tokens"),
                Some(SHA_A),
            )),
        ),
        &["Investigated the zebracorn billing bug in the demo."],
    );
    let b = session(
        &open_at(fs, 12, Some(identity("/repo/b", Some("main"), Some(SHA_B)))),
        &["Refactored the login form."],
    );
    let c = session(&open_at(fs, 13, None), &["Zebracorn sighting only."]);
    (open_at(fs, 14, None), id(&a), id(&b), id(&c))
}

/// lock: L-RESUME-TIERS, L-RESUME-WHY-MATCHED
#[test]
fn each_tier_ranks_first_and_explains_every_criterion_met() {
    use WhyMatched::*;
    let fs = MemFs::new();
    let (wr, a, b, c) = three_sessions(&fs);

    let by_sha = resume(&wr, json!({"gitHeadSha": SHA_A}));
    assert_eq!(by_sha.candidates[0].session_id, a);
    assert_eq!(by_sha.candidates[0].why_matched, vec![MatchedHeadSha]);
    for other in [&b, &c] {
        assert_eq!(candidate(&by_sha, other).why_matched, vec![RecencyFallback]);
    }

    // The query is the prefix of the recorded branch, never the other way round.
    let by_branch = resume(&wr, json!({"gitBranch": "feature/auth"}));
    assert_eq!(by_branch.candidates[0].session_id, a);
    assert_eq!(by_branch.candidates[0].why_matched, vec![MatchedBranch]);
    let infix = resume(&wr, json!({"gitBranch": "auth-tokens"}));
    assert!(
        infix
            .candidates
            .iter()
            .all(|c| c.why_matched == vec![RecencyFallback])
    );
    let longer = resume(&wr, json!({"gitBranch": "feature/auth-tokens-v2"}));
    assert_eq!(candidate(&longer, &a).why_matched, vec![RecencyFallback]);

    let by_notes = resume(&wr, json!({"text": "zebracorn billing"}));
    assert_eq!(by_notes.candidates[0].session_id, a);
    assert_eq!(by_notes.candidates[0].why_matched, vec![MatchedNotes]);
    // `c` has "zebracorn" but not "billing": every token must be there.
    assert_eq!(candidate(&by_notes, &c).why_matched, vec![RecencyFallback]);

    // The workflow id (project.demo) and name (Demo) match every run; the notes tier wins.
    let by_workflow = resume(&wr, json!({"text": "demo"}));
    assert_eq!(by_workflow.candidates[0].session_id, a);
    assert_eq!(
        by_workflow.candidates[0].why_matched,
        vec![MatchedNotes, MatchedWorkflowId]
    );
    for other in [&b, &c] {
        assert_eq!(
            candidate(&by_workflow, other).why_matched,
            vec![MatchedWorkflowId]
        );
    }
    let by_id = resume(&wr, json!({"text": "PROJECT"}));
    assert!(
        by_id
            .candidates
            .iter()
            .all(|c| c.why_matched == vec![MatchedWorkflowId])
    );

    let everything = resume(
        &wr,
        json!({"gitHeadSha": SHA_A, "gitBranch": "feature", "text": "demo"}),
    );
    assert_eq!(everything.candidates[0].session_id, a);
    assert_eq!(
        everything.candidates[0].why_matched,
        vec![
            MatchedHeadSha,
            MatchedBranch,
            MatchedNotes,
            MatchedWorkflowId
        ]
    );

    // No query (or empty fields): recency only.
    for query in [
        json!({}),
        json!({"text": "", "gitBranch": "", "gitHeadSha": ""}),
        json!({"text": "  ,;  "}),
    ] {
        let out = resume(&wr, query);
        assert_eq!(out.candidates.len(), 3);
        assert!(
            out.candidates
                .iter()
                .all(|c| c.why_matched == vec![RecencyFallback])
        );
    }
    let no_query = resume_outcome(&wr, json!({}));
    assert!(!no_query.is_error, "{}", no_query.text);

    for out in [by_sha, by_branch, by_notes, by_workflow, by_id, everything] {
        assert_locked_order(&out);
    }
}

/// lock: L-RESUME-TIE-ORDER
#[test]
fn ties_go_to_recent_activity_then_the_smaller_session_id() {
    let fs = MemFs::new();
    let s1 = id(&session(&open_at(&fs, 21, None), &[]));
    let s2 = id(&session(&open_at(&fs, 22, None), &[]));
    let busy = id(&session(
        &open_at(&fs, 23, None),
        &["Planned.", "Implemented."],
    ));
    let wr = open_at(&fs, 24, None);
    let out = resume(&wr, json!({}));
    let (lo, hi) = if s1 < s2 { (s1, s2) } else { (s2, s1) };
    assert_eq!(sessions_of(&out), vec![busy, lo, hi]);
    assert_eq!(
        out.candidates[1].last_activity_event_index, out.candidates[2].last_activity_event_index,
        "two fresh runs tie on recency"
    );
    assert!(
        out.candidates[0].last_activity_event_index > out.candidates[1].last_activity_event_index
    );
    assert_locked_order(&out);
    // Deterministic for an unchanged store, tokens included.
    assert_eq!(resume(&wr, json!({})), out);
}

/// lock: L-RESUME-BUDGET, L-RESUME-CORPUS
#[test]
fn at_most_five_candidates_with_bounded_snippets() {
    let fs = MemFs::new();
    for seed in 0..6 {
        session(&open_at(&fs, 30 + seed, None), &[]);
    }
    // Notes over the 4096-byte budget are stored with the truncation marker.
    let long = "alpha ".repeat(1000);
    let long_session = id(&session(&open_at(&fs, 40, None), &[&long]));
    let wr = open_at(&fs, 41, None);
    let out = resume(&wr, json!({}));
    assert_eq!(out.candidates.len(), 5, "7 runs, 5 candidates");
    let c = candidate(&out, &long_session);
    assert!(c.snippet.len() <= RESUME_SNIPPET_MAX_BYTES);
    assert!(c.snippet.ends_with(TRUNCATION_MARKER), "{:?}", c.snippet);
    assert!(c.snippet.starts_with("alpha alpha"));
    // The marker is not part of the searchable corpus; the notes are.
    let marker = resume(&wr, json!({"text": "TRUNCATED"}));
    assert!(
        marker
            .candidates
            .iter()
            .all(|c| !c.why_matched.contains(&WhyMatched::MatchedNotes)),
        "{marker:#?}"
    );
    let alpha = resume(&wr, json!({"text": "alpha"}));
    assert_eq!(alpha.candidates[0].session_id, long_session);
    assert_eq!(alpha.candidates[0].why_matched[0], WhyMatched::MatchedNotes);
    // A short recap is the snippet as is; a fresh run has none.
    let short = id(&session(&open_at(&fs, 42, None), &["Short recap."]));
    let out = resume(&wr, json!({"text": "short recap"}));
    assert_eq!(candidate(&out, &short).snippet, "Short recap.");
    let fresh = resume(&wr, json!({}));
    assert!(
        fresh
            .candidates
            .iter()
            .filter(|c| c.session_id != short && c.session_id != long_session)
            .all(|c| c.snippet.is_empty())
    );
}

/// lock: L-RESUME-NORMALIZE, L-RESUME-TOKEN-MATCH
#[test]
fn text_matches_whole_tokens_after_nfkc_and_lowercasing() {
    let fs = MemFs::new();
    // Fullwidth letters and the "fi" ligature normalize (NFKC) to ASCII.
    let s = id(&session(
        &open_at(&fs, 50, None),
        &["Ｚｅｂｒａｃｏｒｎ ﬁle_name-x, done."],
    ));
    let wr = open_at(&fs, 51, None);
    for query in ["ZEBRACORN", "file_name-x zebracorn", "Done!", "ｄｏｎｅ"] {
        let out = resume(&wr, json!({ "text": query }));
        assert_eq!(
            candidate(&out, &s).why_matched[0],
            WhyMatched::MatchedNotes,
            "{query}"
        );
    }
    // Set membership, not substrings: "zebra" is not a token of the notes, nor is "file".
    for query in ["zebra", "file", "name", "zebracorn extra"] {
        let out = resume(&wr, json!({ "text": query }));
        assert_eq!(
            candidate(&out, &s).why_matched,
            vec![WhyMatched::RecencyFallback],
            "{query}"
        );
    }
    assert_eq!(
        workrail::projections::resume::text_tokens("Ａ-b_C ｄ.e")
            .into_iter()
            .collect::<Vec<_>>(),
        vec!["a-b_c", "d", "e"]
    );
}

/// Corrupts the last committed segment of `session` (a byte flip keeps its length).
fn corrupt_last_segment(fs: &MemFs, session: &SessionId) {
    let dir = layout::events_dir(session);
    let last = fs
        .list_dir(&dir)
        .unwrap()
        .into_iter()
        .rfind(|n| !n.starts_with('.'))
        .unwrap();
    fs.corrupt(&dir.join(last), |bytes| {
        let i = bytes.len() / 2;
        bytes[i] ^= 0x01;
    });
}

/// lock: L-RESUME-HEALTHY-ONLY
#[test]
fn corrupt_sessions_are_never_candidates_and_are_counted() {
    let fs = MemFs::new();
    let good = id(&session(&open_at(&fs, 60, None), &["zebracorn one"]));
    let bad = id(&session(&open_at(&fs, 61, None), &["zebracorn two"]));
    corrupt_last_segment(&fs, &bad);
    let wr = open_at(&fs, 62, None); // a fresh process: nothing cached
    assert!(!wr.sessions().load(&bad).unwrap().health.is_healthy());
    let outcome = resume_outcome(&wr, json!({"query": {"text": "zebracorn"}}));
    let out: ResumeSessionOutput = serde_json::from_value(outcome.structured).unwrap();
    assert_eq!(sessions_of(&out), vec![good]);
    assert_eq!(out.skipped_unhealthy_sessions, 1);
    assert!(
        outcome.text.contains("1 session was left out"),
        "{}",
        outcome.text
    );
}

/// lock: L-RESUME-TIP-ONLY, L-TOKEN-REHYDRATE-PURE
#[test]
fn after_a_fork_only_the_preferred_tip_is_offered_and_its_token_rehydrates() {
    let fs = MemFs::new();
    let wr = open_at(
        &fs,
        70,
        Some(identity("/repo/a", Some("main"), Some(SHA_A))),
    );
    let x0 = start(&wr, "project.demo");
    let x1 = wr
        .continue_workflow(ack(&x0, "first pass", vec![]))
        .unwrap();
    wr.continue_workflow(ack(&x1, "second pass", vec![]))
        .unwrap();
    // Back to the root: a new branch from there becomes the latest activity.
    let again = wr.continue_workflow(rehydrate(&x0.state_token)).unwrap();
    let forked = wr
        .continue_workflow(ack(&again, "forked pass", vec![]))
        .unwrap();
    // It changes nothing but its derived index (decision D64), and nothing at all when that
    // is already current.
    let mut before = fs.snapshot();
    let out = resume(&wr, json!({"gitHeadSha": SHA_A}));
    let mut after = fs.snapshot();
    assert!(after.remove(Path::new(layout::RESUME_INDEX_FILE)).is_some());
    before.remove(Path::new(layout::RESUME_INDEX_FILE));
    assert_eq!(
        after, before,
        "resume_session wrote something besides its index"
    );
    let before = fs.snapshot();
    assert_eq!(resume(&wr, json!({"gitHeadSha": SHA_A})), out);
    assert_eq!(
        fs.snapshot(),
        before,
        "resume_session rewrote a current index"
    );
    assert_eq!(out.candidates.len(), 1, "one run, one tip: {out:#?}");
    let tip = &out.candidates[0];
    assert_eq!(tip.session_id, id(&forked));
    assert_eq!(tip.run_id, forked.session.run_id);
    assert_eq!(tip.snippet, "forked pass");
    assert_eq!(tip.run_label, forked.run.label);
    assert_eq!(tip.status, forked.run.status);
    assert_eq!(tip.workflow_id.as_str(), "project.demo");
    assert!(!tip.is_complete);
    let pending = tip.pending.as_ref().unwrap();
    assert_eq!(pending.step_id, forked.pending.as_ref().unwrap().step_id);
    assert_eq!(pending.title, forked.pending.as_ref().unwrap().title);
    // The offered token is the tip's: rehydrating with it returns the fork's pending step,
    // writes nothing and records no observation.
    let before = fs.snapshot();
    let back = wr.continue_workflow(rehydrate(&tip.state_token)).unwrap();
    assert_eq!(fs.snapshot(), before, "rehydrate wrote something");
    assert_eq!(back.pending, forked.pending);
    assert_eq!(back.session, forked.session);
    assert_eq!(back.state_token, tip.state_token);
    let observations = wr
        .sessions()
        .load(&tip.session_id)
        .unwrap()
        .events()
        .all()
        .unwrap()
        .iter()
        .filter(|e| matches!(e.data(), EventData::ObservationRecorded(_)))
        .count();
    assert_eq!(observations, 3, "observed once, at start");
}

/// The server's own repository never stands in for the caller's: a text query is not buried
/// under head-sha matches of every session started in the same checkout.
/// lock: L-RESUME-TIERS
#[test]
fn git_fields_are_never_filled_in_from_the_server_workspace() {
    let fs = MemFs::new();
    let here = Some(identity("/repo/a", Some("main"), Some(SHA_A)));
    let old = id(&session(
        &open_at(&fs, 80, here.clone()),
        &["Zebracorn investigation."],
    ));
    session(
        &open_at(&fs, 81, here.clone()),
        &["Planned.", "Implemented."],
    );
    let wr = open_at(&fs, 82, here);
    let out = resume(&wr, json!({"text": "zebracorn"}));
    assert_eq!(out.candidates[0].session_id, old);
    assert_eq!(
        out.candidates[0].why_matched,
        vec![WhyMatched::MatchedNotes]
    );
    assert!(out.candidates.iter().all(|c| {
        !c.why_matched
            .iter()
            .any(|w| matches!(w, WhyMatched::MatchedHeadSha | WhyMatched::MatchedBranch))
    }));
}

/// A later observation of a key replaces the earlier one for ranking (appended here through
/// the store directly: WorkRail itself observes only at start).
/// lock: L-EVENT-OBSERVATION-LATEST
#[test]
fn the_latest_observation_of_a_key_is_the_one_ranked() {
    use workrail::store::{AppendPlan, SessionStore};
    use workrail_spec::budget::BoundedText;
    use workrail_spec::ids::{EventId, EventIndex};

    let fs = MemFs::new();
    let s = id(&session(
        &open_at(
            &fs,
            95,
            Some(identity("/repo/a", Some("old-branch"), Some(SHA_A))),
        ),
        &[],
    ));
    let store = SessionStore::new(Arc::new(fs.clone()));
    let moved = |key, value, n: u8| {
        workrail_spec::event::SessionEvent::new(
            EventId::from_entropy(&[n; 10]),
            EventIndex::ZERO,
            s.clone(),
            EventScope::Session,
            EventData::ObservationRecorded(ObservationRecorded {
                key,
                value,
                confidence: Confidence::High,
            }),
        )
        .unwrap()
    };
    store
        .with_append_gate(&s, workrail::store::SessionIntent::Create, |gate| {
            gate.append(AppendPlan {
                events: vec![
                    moved(
                        ObservationKey::GitBranch,
                        ObservationValue::ShortString {
                            value: BoundedText::new("new-branch").unwrap(),
                        },
                        1,
                    ),
                    moved(
                        ObservationKey::GitHeadSha,
                        ObservationValue::GitSha1 {
                            value: workrail_spec::event::GitSha1::parse(SHA_B).unwrap(),
                        },
                        2,
                    ),
                ],
            })
            .map(|_| ())
        })
        .unwrap();
    let wr = open_at(&fs, 96, None);
    let why = |query: Value| resume(&wr, query).candidates[0].why_matched.clone();
    assert_eq!(
        why(json!({"gitBranch": "new"})),
        vec![WhyMatched::MatchedBranch]
    );
    assert_eq!(
        why(json!({"gitBranch": "old"})),
        vec![WhyMatched::RecencyFallback]
    );
    assert_eq!(
        why(json!({"gitHeadSha": SHA_B})),
        vec![WhyMatched::MatchedHeadSha]
    );
    assert_eq!(
        why(json!({"gitHeadSha": SHA_A})),
        vec![WhyMatched::RecencyFallback]
    );
}

#[test]
fn an_empty_store_returns_no_candidates_with_guidance() {
    let wr = open_at(&MemFs::new(), 90, None);
    let outcome = resume_outcome(&wr, json!({"query": {"text": "anything"}}));
    assert!(!outcome.is_error);
    let out: ResumeSessionOutput = serde_json::from_value(outcome.structured).unwrap();
    assert!(out.candidates.is_empty());
    assert_eq!(out.skipped_unhealthy_sessions, 0);
    assert!(outcome.text.contains("start_workflow"), "{}", outcome.text);
    assert!(
        outcome.text.contains("continue_workflow"),
        "{}",
        outcome.text
    );
}

/// lock: L-ERR-SELF-CORRECTING
#[test]
fn bad_queries_are_validation_errors_naming_the_field() {
    let wr = open_at(&MemFs::new(), 91, None);
    for (args, field) in [
        (
            json!({"query": {"gitHeadSha": "4f3c2a1"}}),
            "query.gitHeadSha",
        ),
        (
            json!({"query": {"gitHeadSha": SHA_A.to_uppercase()}}),
            "query.gitHeadSha",
        ),
        (json!({"query": {"txt": "x"}}), "query.txt"),
        (json!({"text": "x"}), "text"),
        (json!({"query": "zebracorn"}), "query"),
    ] {
        let outcome = resume_outcome(&wr, args.clone());
        assert!(outcome.is_error, "{args}");
        let e: ErrorEnvelope = serde_json::from_value(outcome.structured).unwrap();
        assert_eq!(e.code, ErrorCode::ValidationError, "{args}");
        assert_eq!(e.details.as_ref().unwrap()["field"], field, "{args}: {e:?}");
        assert!(e.message.contains("resume_session"), "{e:?}");
        assert!(!e.suggestion.is_empty());
        if field == "query.gitHeadSha" {
            assert!(e.suggestion.contains("git rev-parse HEAD"), "{e:?}");
        }
    }
}

/// The same store contents give the same candidates in the same order after export/import
/// (tokens aside: they are signed by each data directory's own key).
/// lock: L-BUNDLE-RESUMABLE
#[test]
fn export_then_import_preserves_resume_results() {
    let source_fs = MemFs::new();
    let (source, a, b, c) = three_sessions(&source_fs);
    let target_fs = MemFs::new();
    let target = open_at(&target_fs, 99, None);
    for session in [&a, &b, &c] {
        let bundle = source
            .export_session(session.as_str(), &NoProgress)
            .unwrap();
        let report = target
            .import_bundle(&bundle.text, &ImportOptions::default(), &NoProgress)
            .unwrap();
        assert_eq!(&report.session_id, session);
    }
    let without_tokens = |out: ResumeSessionOutput| {
        out.candidates
            .into_iter()
            .map(|mut c| {
                c.state_token.clear();
                c
            })
            .collect::<Vec<_>>()
    };
    for query in [
        json!({}),
        json!({"gitHeadSha": SHA_A}),
        json!({"gitBranch": "ma"}),
        json!({"text": "zebracorn billing"}),
        json!({"text": "demo"}),
    ] {
        let before = resume(&source, query.clone());
        let after = resume(&target, query.clone());
        assert_eq!(
            without_tokens(before),
            without_tokens(after.clone()),
            "{query}"
        );
        // The imported tips continue from the re-minted tokens.
        for c in &after.candidates {
            let back = target.continue_workflow(rehydrate(&c.state_token)).unwrap();
            assert_eq!(back.session.session_id, c.session_id);
        }
    }
}

/// lock: L-MCP-TOOL-SET
#[test]
fn the_feature_flag_switches_resume_session_off_and_on() {
    let fs = MemFs::new();
    fs.create_dir_all(Path::new("config")).unwrap();
    fs.write_new(
        Path::new(workrail::features::FEATURES_FILE),
        br#"{"resume_session": false}"#,
    )
    .unwrap();
    let wr = open_at(&fs, 100, None);
    assert!(!wr.features().enabled(Feature::ResumeSession));
    assert!(wr.features().enabled(Feature::CheckpointWorkflow));
    let server = WorkrailServer::new(Arc::new(open_at(&fs, 101, None)));
    let listed: Vec<String> = server.tools().iter().map(|t| t.name.to_string()).collect();
    assert_eq!(
        listed,
        [
            "list_workflows",
            "inspect_workflow",
            "start_workflow",
            "continue_workflow",
            "checkpoint_workflow"
        ]
    );
    let outcome = resume_outcome(&wr, json!({}));
    assert!(outcome.is_error);
    let e: ErrorEnvelope = serde_json::from_value(outcome.structured).unwrap();
    assert_eq!(e.code, ErrorCode::ValidationError);
    let details = e.details.unwrap();
    assert_eq!(details["problem"], "tool_switched_off");
    assert_eq!(details["feature"], "resume_session");
    assert!(
        !details["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("resume_session"))
    );
    assert!(e.suggestion.contains("WORKRAIL_FEATURES=+resume_session"));

    // The environment wins over the file, in both directions.
    let on = open_at(&fs, 102, None)
        .with_feature_overrides(&FeatureOverrides::parse_env("+resume_session").unwrap());
    assert!(!resume_outcome(&on, json!({})).is_error);
    let off = open_at(&MemFs::new(), 103, None)
        .with_feature_overrides(&FeatureOverrides::parse_env(" -resume_session ,").unwrap());
    assert!(resume_outcome(&off, json!({})).is_error);
    let off_server = WorkrailServer::new(Arc::new(off));
    assert!(
        off_server
            .tools()
            .iter()
            .all(|t| t.name != "resume_session")
    );
    let checkpoint_off = open_at(&MemFs::new(), 104, None)
        .with_feature_overrides(&FeatureOverrides::parse_env("-checkpoint_workflow").unwrap());
    let refused = call_tool(&checkpoint_off, "checkpoint_workflow", Some(json!({})));
    assert!(refused.is_error);
    assert!(
        refused
            .text
            .contains("feature flag `checkpoint_workflow` is off")
    );

    // Unknown flags are refused with the list of flags, never ignored.
    let err = FeatureOverrides::parse_env("start_sesion").unwrap_err();
    assert!(err.contains("checkpoint_workflow, resume_session"), "{err}");
    let bad = MemFs::new();
    bad.create_dir_all(Path::new("config")).unwrap();
    bad.write_new(
        Path::new(workrail::features::FEATURES_FILE),
        br#"{"resume": true}"#,
    )
    .unwrap();
    let shared: Arc<dyn StoreFs> = Arc::new(bad);
    let e = Workrail::with_parts(shared, catalog(), Arc::new(SeededEntropy::new(1))).unwrap_err();
    assert_eq!(e.code, ErrorCode::ValidationError);
    assert!(e.message.contains("unknown feature"), "{}", e.message);
}

// ---------------------------------------------------------------------------------------------
// Observations at start_workflow, from git's files
// ---------------------------------------------------------------------------------------------

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A minimal `.git` directory with HEAD `head`.
fn git_dir(root: &Path, head: &str) -> PathBuf {
    let git = root.join(".git");
    write(&git.join("HEAD"), head);
    std::fs::create_dir_all(git.join("objects")).unwrap();
    std::fs::create_dir_all(git.join("refs/heads")).unwrap();
    git
}

/// The observations `start_workflow` records when the server runs in `dir`, checking that
/// each is session-scoped, high-confidence and committed right after `session_created`.
fn observed_at(dir: &Path) -> Vec<ObservationRecorded> {
    let fs = MemFs::new();
    let wr = open_in(&fs, 110, Arc::new(DirWorkspace::new(dir)));
    let out = start(&wr, "project.demo");
    let events = wr
        .sessions()
        .load(&id(&out))
        .unwrap()
        .events()
        .all()
        .unwrap()
        .into_owned();
    assert!(matches!(events[0].data(), EventData::SessionCreated(_)));
    let mut observations = Vec::new();
    for event in &events[1..] {
        let EventData::ObservationRecorded(o) = event.data() else {
            break;
        };
        assert_eq!(event.scope(), &EventScope::Session);
        assert_eq!(o.confidence, Confidence::High);
        observations.push(o.clone());
    }
    assert!(matches!(
        events[1 + observations.len()].data(),
        EventData::RunStarted(_)
    ));
    observations
}

fn branch_of(obs: &[ObservationRecorded]) -> Option<String> {
    obs.iter().find_map(|o| match (&o.key, &o.value) {
        (ObservationKey::GitBranch, ObservationValue::ShortString { value }) => {
            Some(value.as_str().to_owned())
        }
        _ => None,
    })
}

fn head_of(obs: &[ObservationRecorded]) -> Option<String> {
    obs.iter().find_map(|o| match (&o.key, &o.value) {
        (ObservationKey::GitHeadSha, ObservationValue::GitSha1 { value }) => {
            Some(value.as_str().to_owned())
        }
        _ => None,
    })
}

#[cfg(unix)]
fn root_hash(root: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let canonical = std::fs::canonicalize(root).unwrap();
    workrail_spec::jcs::sha256(canonical.as_os_str().as_bytes())
        .as_str()
        .to_owned()
}

#[cfg(unix)]
fn root_hash_of(obs: &[ObservationRecorded]) -> Option<String> {
    obs.iter().find_map(|o| match (&o.key, &o.value) {
        (ObservationKey::RepoRootHash, ObservationValue::Sha256 { value }) => {
            Some(value.as_str().to_owned())
        }
        _ => None,
    })
}

/// lock: L-EVENT-OBSERVATION, L-EVENT-OBSERVATION-SHORT-STRING
#[cfg(unix)]
#[test]
fn start_records_branch_head_and_root_hash_read_from_git_files() {
    let tmp = tempfile::tempdir().unwrap();

    // A branch with a loose ref, started from a subdirectory: the root is the top level.
    let repo = tmp.path().join("repo");
    let git = git_dir(&repo, "ref: refs/heads/feature/x\n");
    write(&git.join("refs/heads/feature/x"), &format!("{SHA_A}\n"));
    std::fs::create_dir_all(repo.join("src/deep")).unwrap();
    let obs = observed_at(&repo.join("src/deep"));
    let keys: Vec<ObservationKey> = obs.iter().map(|o| o.key).collect();
    assert_eq!(
        keys,
        [
            ObservationKey::GitBranch,
            ObservationKey::GitHeadSha,
            ObservationKey::RepoRootHash
        ]
    );
    assert_eq!(branch_of(&obs).as_deref(), Some("feature/x"));
    assert_eq!(head_of(&obs).as_deref(), Some(SHA_A));
    assert_eq!(root_hash_of(&obs), Some(root_hash(&repo)));

    // Detached HEAD: the commit, no branch.
    let detached = tmp.path().join("detached");
    git_dir(&detached, &format!("{SHA_B}\n"));
    let obs = observed_at(&detached);
    assert_eq!(branch_of(&obs), None);
    assert_eq!(head_of(&obs).as_deref(), Some(SHA_B));
    assert_eq!(root_hash_of(&obs), Some(root_hash(&detached)));

    // Packed refs (comments and peeled tag lines skipped), no loose ref.
    let packed = tmp.path().join("packed");
    let git = git_dir(&packed, "ref: refs/heads/main\n");
    write(
        &git.join("packed-refs"),
        &format!(
            "# pack-refs with: peeled fully-peeled sorted \n{SHA_B} refs/heads/mainline\n{SHA_A} refs/heads/main\n^{SHA_B}\n{SHA_B} refs/tags/v1\n"
        ),
    );
    let obs = observed_at(&packed);
    assert_eq!(branch_of(&obs).as_deref(), Some("main"));
    assert_eq!(head_of(&obs).as_deref(), Some(SHA_A));

    // An unborn branch (no commit yet): the branch, no head.
    let unborn = tmp.path().join("unborn");
    git_dir(&unborn, "ref: refs/heads/main\n");
    let obs = observed_at(&unborn);
    assert_eq!(branch_of(&obs).as_deref(), Some("main"));
    assert_eq!(head_of(&obs), None);
    assert!(root_hash_of(&obs).is_some());

    // A branch over the 80-byte short_string budget is left out, the rest is recorded.
    let long = tmp.path().join("long");
    let branch = format!("feature/{}", "x".repeat(73));
    assert_eq!(branch.len(), 81);
    let git = git_dir(&long, &format!("ref: refs/heads/{branch}\n"));
    write(&git.join("refs/heads").join(&branch), SHA_A);
    let obs = observed_at(&long);
    assert_eq!(branch_of(&obs), None);
    assert_eq!(head_of(&obs).as_deref(), Some(SHA_A));
    let exactly = format!("feature/{}", "x".repeat(72));
    write(&git.join("HEAD"), &format!("ref: refs/heads/{exactly}\n"));
    write(&git.join("refs/heads").join(&exactly), SHA_B);
    assert_eq!(branch_of(&observed_at(&long)), Some(exactly));

    // A ref name that would leave the git directory is not followed.
    let escape = tmp.path().join("escape");
    let git = git_dir(&escape, "ref: refs/heads/../../../outside\n");
    write(&git.join("outside"), SHA_A);
    assert_eq!(head_of(&observed_at(&escape)), None);
}

/// lock: L-EVENT-OBSERVATION
#[cfg(unix)]
#[test]
fn linked_worktrees_read_their_own_head_and_the_shared_refs() {
    let tmp = tempfile::tempdir().unwrap();
    let main = tmp.path().join("main");
    let git = git_dir(&main, "ref: refs/heads/main\n");
    write(&git.join("refs/heads/main"), SHA_A);
    write(
        &git.join("packed-refs"),
        &format!("{SHA_B} refs/heads/topic\n"),
    );
    let admin = git.join("worktrees/wt");
    write(&admin.join("HEAD"), "ref: refs/heads/topic\n");
    write(&admin.join("commondir"), "../..\n");
    let wt = tmp.path().join("wt");
    write(
        &wt.join(".git"),
        &format!(
            "gitdir: {}\n",
            std::fs::canonicalize(&admin).unwrap().display()
        ),
    );
    let obs = observed_at(&wt);
    assert_eq!(branch_of(&obs).as_deref(), Some("topic"));
    assert_eq!(head_of(&obs).as_deref(), Some(SHA_B));
    assert_eq!(root_hash_of(&obs), Some(root_hash(&wt)));
    // A relative gitdir resolves against the worktree.
    write(&wt.join(".git"), "gitdir: ../main/.git/worktrees/wt\n");
    assert_eq!(head_of(&observed_at(&wt)).as_deref(), Some(SHA_B));
    // The main checkout is unaffected.
    let obs = observed_at(&main);
    assert_eq!(branch_of(&obs).as_deref(), Some("main"));
    assert_eq!(head_of(&obs).as_deref(), Some(SHA_A));
}

/// lock: L-EVENT-OBSERVATION
#[test]
fn outside_a_repository_nothing_is_observed() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(observed_at(tmp.path()).is_empty());
    // A .git file that is not a gitdir pointer, or a .git without HEAD, is not a repository.
    let odd = tmp.path().join("odd");
    write(&odd.join(".git"), "not a pointer\n");
    assert!(observed_at(&odd).is_empty());
    let headless = tmp.path().join("headless");
    std::fs::create_dir_all(headless.join(".git/refs")).unwrap();
    assert!(observed_at(&headless).is_empty());
    // A directory that does not exist (deleted under the server) observes nothing either.
    assert!(observed_at(&tmp.path().join("gone")).is_empty());
}

/// "best match first" only when something matched; a recency fallback says so, and says what the
/// search looks at (not `context`) and what to pass instead.
///
/// lock: L-RESUME-WHY-MATCHED
#[test]
fn a_recency_fallback_says_nothing_matched_and_what_the_search_covers() {
    let fs = MemFs::new();
    let wr = open_at(&fs, 91, None);
    session(&wr, &["wired the billing retry loop"]);
    let matched = resume_outcome(&wr, json!({"query": {"text": "billing"}}));
    assert!(
        matched.text.contains("best match first"),
        "{}",
        matched.text
    );
    let fallback = resume_outcome(&wr, json!({"query": {"text": "JIRA-4711"}}));
    let out: ResumeSessionOutput = serde_json::from_value(fallback.structured).unwrap();
    assert_eq!(out.candidates.len(), 1);
    assert!(
        !fallback.text.contains("best match first"),
        "{}",
        fallback.text
    );
    assert!(
        fallback.text.contains("No run matched")
            && fallback.text.contains("does not search `context`")
            && fallback.text.contains("query.gitBranch"),
        "{}",
        fallback.text
    );
}

//! Per-step notes and the bounded recap built from them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod protocol_support;

use protocol_support::*;
use workrail::store::memfs::MemFs;
use workrail_spec::budget::TRUNCATION_MARKER;
use workrail_spec::closed::RecapTruncationPolicy;
use workrail_spec::event::{EventData, OutputPayload};
use workrail_spec::tools::ExecutionOutput;

/// Acks the demo's steps with the given notes (plan, implement, decide, ...), continuing the loop
/// while there are notes left; returns the last response.
fn walk(wr: &workrail::protocol::Workrail, notes: &[String]) -> ExecutionOutput {
    let mut out = start(wr, "project.demo");
    for (i, note) in notes.iter().enumerate() {
        let artifacts = if pending(&out) == "decide" {
            let more = notes.len() - i > 2;
            vec![loop_control(if more { "continue" } else { "stop" })]
        } else {
            vec![]
        };
        out = wr.continue_workflow(ack(&out, note, artifacts)).unwrap();
    }
    out
}

/// lock: L-OUTPUT-PER-STEP-FRESH
#[test]
fn each_step_stores_only_its_own_notes_and_the_recap_aggregates_them() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let notes: Vec<String> = [
        "Planned the cache.",
        "Implemented the LRU.",
        "Decided to stop.",
    ]
    .map(String::from)
    .to_vec();
    let out = walk(&wr, &notes);
    let loaded = wr.sessions().load(&out.session.session_id).unwrap();
    let stored: Vec<String> = loaded
        .events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::NodeOutputAppended(o) => match &o.payload {
                OutputPayload::Notes { notes_markdown } => Some(notes_markdown.as_str().to_owned()),
                OutputPayload::ArtifactRef { .. } => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(
        stored, notes,
        "one fresh output per step, never appended to"
    );
    let recap = wr
        .continue_workflow(rehydrate(&out.state_token))
        .unwrap()
        .recap
        .unwrap();
    assert!(!recap.truncated);
    assert_eq!(recap.policy, None);
    assert_eq!(
        recap.text,
        "[1] Planned the cache.\n\n[2] Implemented the LRU.\n\n[3] Decided to stop."
    );
}

/// lock: L-OUTPUT-RECAP-BUDGET, L-OUTPUT-RECAP-MARKER
#[test]
fn a_long_history_keeps_the_most_recent_entries_and_says_so() {
    let fs = MemFs::new();
    let wr = open(&fs);
    // Eight steps of ~900 bytes: more than the 4096-byte recap budget.
    let notes: Vec<String> = (1..=8)
        .map(|i| format!("Step {i}: {}", "detail ".repeat(128)))
        .collect();
    let out = walk(&wr, &notes);
    assert!(out.is_complete);
    let recap = wr
        .continue_workflow(rehydrate(&out.state_token))
        .unwrap()
        .recap
        .unwrap();
    assert!(recap.text.len() <= 4096, "{}", recap.text.len());
    assert!(recap.truncated);
    assert_eq!(recap.policy, Some(RecapTruncationPolicy::KeptMostRecent));
    assert!(recap.omitted_entries > 0);
    // The kept entries are the most recent ones, in order, and the text says what was dropped.
    let kept = 8 - recap.omitted_entries as usize;
    assert!(recap.text.starts_with(&format!(
        "[recap truncated: policy kept_most_recent; {} earlier entries omitted]\n",
        recap.omitted_entries
    )));
    for i in (8 - kept + 1)..=8 {
        assert!(
            recap.text.contains(&format!("Step {i}:")),
            "step {i} is kept"
        );
    }
    assert!(!recap.text.contains("Step 1:"));
    // Deterministic: the same node always recaps the same way.
    let again = wr
        .continue_workflow(rehydrate(&out.state_token))
        .unwrap()
        .recap
        .unwrap();
    assert_eq!(again, recap);
}

/// lock: L-OUTPUT-RECAP-BUDGET, L-OUTPUT-RECAP-MARKER, L-BUDGET-TRUNCATION-MARKER
#[test]
fn a_newest_entry_over_the_budget_is_cut_with_the_canonical_marker() {
    let fs = MemFs::new();
    let wr = open(&fs);
    // Notes are capped at 4096 bytes when stored; with its `[n] ` prefix the entry no longer fits.
    let notes = vec!["Short plan.".to_owned(), "x".repeat(5000)];
    let out = walk(&wr, &notes);
    let recap = wr
        .continue_workflow(rehydrate(&out.state_token))
        .unwrap()
        .recap
        .unwrap();
    assert!(recap.text.len() <= 4096);
    assert!(recap.truncated);
    assert_eq!(recap.policy, Some(RecapTruncationPolicy::CutNewestEntry));
    assert!(recap.text.ends_with(TRUNCATION_MARKER));
    assert!(
        recap
            .text
            .starts_with("[recap truncated: policy cut_newest_entry; 1 earlier entries omitted]\n")
    );
    assert_eq!(
        recap.omitted_entries, 1,
        "the older entry did not fit either"
    );
}

//! Per-step notes and the bounded recap built from them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

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
        .events()
        .all()
        .unwrap()
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

/// A rewind far up a long branch recaps as before the jumps (D214): the preferred branch is
/// marked among the node's branches, and the newest notes below the node are kept, numbered
/// from the first note below it, with the older ones counted as omitted; after a fork from
/// there, only the fork's own notes are the preferred branch's.
/// decision: D214
/// lock: L-OUTPUT-RECAP-BUDGET
#[test]
fn a_rewind_up_a_long_branch_recaps_the_newest_notes_below_it() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let first = start(&wr, "project.long");
    let mut out = first.clone();
    let mut noted = Vec::new();
    for i in 0..240 {
        let artifacts = if pending(&out) == "decide" {
            vec![loop_control("continue")]
        } else {
            vec![]
        };
        let note = format!("Unit {i:03} done; nothing else to add here at all.");
        noted.push(note.clone());
        out = wr.continue_workflow(ack(&out, &note, artifacts)).unwrap();
    }
    let recap = wr
        .continue_workflow(rehydrate(&first.state_token))
        .unwrap()
        .recap
        .unwrap();
    assert!(recap.text.len() <= 4096, "{}", recap.text.len());
    assert!(
        recap
            .text
            .starts_with("This step was already completed 1 time(s) from here")
    );
    assert!(recap.text.contains("- branch 1 (preferred): Unit 000 done"));
    assert!(recap.truncated, "{}", recap.text);
    let omitted = recap.omitted_entries as usize;
    assert!(omitted > 0 && omitted < noted.len(), "{omitted} omitted");
    assert!(recap.text.contains(&format!(
        "Preferred branch since here:\n[recap truncated: policy kept_most_recent; {omitted} earlier entries omitted]\n"
    )));
    // The kept entries are the newest, numbered from the first note below the node.
    for (number, note) in noted.iter().enumerate().skip(omitted) {
        assert!(
            recap.text.contains(&format!("[{}] {note}", number + 1)),
            "entry {} is kept: {}",
            number + 1,
            recap.text
        );
    }
    assert!(!recap.text.contains(&noted[omitted - 1]));
    // A fork from the first node becomes the preferred branch: its notes alone are recapped.
    let back = wr.continue_workflow(rehydrate(&first.state_token)).unwrap();
    wr.continue_workflow(ack(&back, "Planned it again.", vec![]))
        .unwrap();
    let recap = wr
        .continue_workflow(rehydrate(&first.state_token))
        .unwrap()
        .recap
        .unwrap();
    assert!(
        recap.text.contains("- branch 1: Unit 000 done"),
        "{}",
        recap.text
    );
    assert!(
        recap
            .text
            .contains("- branch 2 (preferred): Planned it again.")
    );
    assert!(
        recap
            .text
            .ends_with("Preferred branch since here:\n[1] Planned it again."),
        "{}",
        recap.text
    );
    assert!(!recap.truncated);
}

/// A rewind to a node with many branches lists the preferred branch and the newest others
/// within a share of the budget, counts the older ones it leaves out, and still recaps the
/// preferred branch's newest notes: before, every branch took a line of up to 256 bytes, and
/// past about 15 long-noted branches the list filled the budget and the preferred branch's
/// notes were cut (locks: downstream recap before other branch summaries).
/// decision: D218
/// lock: L-OUTPUT-RECAP-BUDGET
#[test]
fn a_rewind_to_a_node_of_many_branches_keeps_the_preferred_notes() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let first = start(&wr, "project.long");
    let filler = "and a long account of what was tried, why, and what came of it ".repeat(4);
    for b in 1..=40 {
        let back = wr.continue_workflow(rehydrate(&first.state_token)).unwrap();
        wr.continue_workflow(ack(&back, &format!("Branch {b:02} {filler}"), vec![]))
            .unwrap();
    }
    // Branch 41 becomes the preferred one and goes on.
    let back = wr.continue_workflow(rehydrate(&first.state_token)).unwrap();
    let mut out = wr
        .continue_workflow(ack(&back, &format!("Branch 41 {filler}"), vec![]))
        .unwrap();
    for i in 0..30 {
        let artifacts = if pending(&out) == "decide" {
            vec![loop_control("continue")]
        } else {
            vec![]
        };
        out = wr
            .continue_workflow(ack(
                &out,
                &format!("Step {i:02} of the preferred branch."),
                artifacts,
            ))
            .unwrap();
    }
    let recap = wr
        .continue_workflow(rehydrate(&first.state_token))
        .unwrap()
        .recap
        .unwrap();
    let text = &recap.text;
    assert!(text.len() <= 4096, "{}", text.len());
    assert!(text.starts_with("This step was already completed 41 time(s) from here"));
    assert!(
        text.contains("- branch 41 (preferred): Branch 41 "),
        "{text}"
    );
    // The newest other branches are listed, the oldest counted.
    assert!(text.contains("- branch 40: Branch 40 "), "{text}");
    assert!(!text.contains("- branch 1: "), "{text}");
    let listed = text.matches("\n- branch ").count();
    let closing = format!("- {} older branch(es) not listed\n", 41 - listed);
    assert!(
        text.contains(&closing),
        "{listed} listed, expected {closing:?}: {text}"
    );
    // Every step of the preferred branch fits: the whole downstream recap is there, uncut.
    assert!(
        text.contains("Preferred branch since here:\n[1] Branch 41 "),
        "{text}"
    );
    assert!(text.ends_with("Step 29 of the preferred branch."), "{text}");
    assert!(!recap.truncated, "{text}");
}

/// A rewind to a node of a few branches lists them all, as before D218.
/// decision: D218
#[test]
fn a_rewind_to_a_node_of_a_few_branches_lists_them_all() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let first = start(&wr, "project.long");
    let filler = "and a long account of what was tried, why, and what came of it ".repeat(4);
    for b in 1..=6 {
        let back = wr.continue_workflow(rehydrate(&first.state_token)).unwrap();
        wr.continue_workflow(ack(&back, &format!("Branch {b:02} {filler}"), vec![]))
            .unwrap();
    }
    let recap = wr
        .continue_workflow(rehydrate(&first.state_token))
        .unwrap()
        .recap
        .unwrap();
    for b in 1..=5 {
        assert!(
            recap
                .text
                .contains(&format!("- branch {b}: Branch {b:02} ")),
            "{}",
            recap.text
        );
    }
    assert!(recap.text.contains("- branch 6 (preferred): Branch 06 "));
    assert!(!recap.text.contains("not listed"), "{}", recap.text);
}

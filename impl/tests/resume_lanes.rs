//! `resume_session` finds a lane by its notes (decision D170): a lane is a run of the session
//! with its own tip and notes, so a new chat can pick up a lane that a subagent left half done,
//! and the candidate's label names the lane and the run whose parallel step started it.
//!
//! Guards against lane runs skipped by the ranking (they are no runs of a workflow the user
//! started), and against a lane offered with a label that reads like an unrelated run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::console_support;

use console_support::lanes::*;
use workrail::store::memfs::MemFs;
use workrail_spec::closed::WhyMatched;
use workrail_spec::tools::{ContinueWorkflowInput, ResumeQueryInput, ResumeSessionInput};

fn query(text: &str) -> ResumeSessionInput {
    ResumeSessionInput {
        query: Some(ResumeQueryInput {
            text: Some(text.to_owned()),
            git_head_sha: None,
            git_branch: None,
        }),
    }
}

/// decision: D170
#[test]
fn a_lane_is_found_by_its_notes_and_named_as_a_lane_of_its_parent_run() {
    let fs = MemFs::new();
    let wr = open_memory(&fs, "concatenate");
    let fan = to_fan_out(&wr);
    finish_lane(
        &wr,
        &fan.lanes[1],
        &LaneEnd {
            status: "partial",
            summary: "Half the store reviewed.",
            files: &[],
            notes: "Stopped at the zebracorn compaction routine; the index is next.",
        },
    );
    let found = wr.resume_session(query("zebracorn compaction")).unwrap();
    let best = &found.candidates[0];
    assert_eq!(best.run_id, fan.lanes[1].lane_id, "{found:#?}");
    assert_eq!(best.why_matched[0], WhyMatched::MatchedNotes);
    assert!(best.snippet.contains("zebracorn"), "{}", best.snippet);
    let parent = fan.session.run_id.as_str();
    assert!(
        best.run_label.contains(&format!(
            "lane 2 of \"Fan #{}\" (run {parent})",
            &parent[parent.len() - 4..]
        )),
        "{}",
        best.run_label
    );
    assert!(
        best.run_label.starts_with("Inspect #"),
        "{}",
        best.run_label
    );
    // The parent run is a candidate too, with its plain label.
    let parent_candidate = found
        .candidates
        .iter()
        .find(|c| c.run_id == fan.session.run_id)
        .unwrap();
    assert!(!parent_candidate.run_label.contains("lane"));
    // Its state token drives the lane: it rehydrates the lane's complete tip.
    let again = wr
        .continue_workflow(ContinueWorkflowInput {
            state_token: Some(best.state_token.clone()),
            ack_token: None,
            context: None,
            output: None,
            preferences: vec![],
            preset: None,
        })
        .unwrap();
    assert_eq!(again.session.run_id, fan.lanes[1].lane_id);
    assert!(again.is_complete);
}

//! A rewound chat never loses work (decision D57): an ackToken that was already answered comes
//! back with different output. The answer stays the recorded one, byte for byte where the call
//! is identical, but a call whose output differs gets a `replay` notice (in structure and text)
//! saying the new output was NOT recorded, showing what was, and carrying a fresh ackToken for
//! the same step; sending the new output with it records the new work as a new branch.
//!
//! Before: the server returned the recorded response byte for byte, the new notes were silently
//! dropped, no fork was made, and nothing said "replay". The same holds for the ackToken of a
//! blocked attempt sent again with a fix (decision D163): the notice names the step's next
//! ackToken, where an unchanged answer made agents send the used token again and again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use protocol_support::*;
use serde_json::json;
use workrail::protocol::render_text;
use workrail_spec::event::{EventData, OutputPayload};
use workrail_spec::tools::{ContinueWorkflowInput, ExecutionOutput};

fn with_ack(ack_token: &str, notes: &str) -> ContinueWorkflowInput {
    ContinueWorkflowInput {
        state_token: None,
        ack_token: Some(ack_token.into()),
        context: None,
        output: Some(workrail_spec::tools::OutputInput {
            notes_markdown: Some(notes.into()),
            artifacts: vec![],
        }),
        preferences: vec![],
        preset: None,
    }
}

/// The recap notes recorded on `node` of the response's session.
fn notes_on(wr: &workrail::protocol::Workrail, out: &ExecutionOutput, node: &str) -> Vec<String> {
    session_events(wr, out)
        .iter()
        .filter(|e| e.scope().node_id().is_some_and(|n| n.as_str() == node))
        .filter_map(|e| match e.data() {
            EventData::NodeOutputAppended(o) => match &o.payload {
                OutputPayload::Notes { notes_markdown } => Some(notes_markdown.as_str().to_owned()),
                OutputPayload::ArtifactRef { .. } => None,
            },
            _ => None,
        })
        .collect()
}

/// lock: L-TOKEN-REPLAY-FACTS, L-TOKEN-ACK-IDEMPOTENT
#[test]
fn an_identical_replay_is_byte_identical_and_carries_no_notice() {
    let fs = workrail::store::memfs::MemFs::new();
    let wr = open(&fs);
    let s0 = start(&wr, "project.demo");
    let first = wr.continue_workflow(ack(&s0, "planned", vec![])).unwrap();
    let again = wr.continue_workflow(ack(&s0, "planned", vec![])).unwrap();
    assert_eq!(again, first);
    assert!(again.replay.is_none());
    assert_eq!(render_text(&again), render_text(&first));
    // A repeat without any output is a plain replay too.
    let bare = wr
        .continue_workflow(ContinueWorkflowInput {
            output: None,
            ..ack(&s0, "", vec![])
        })
        .unwrap();
    assert_eq!(bare, first);
}

/// lock: L-TOKEN-REPLAY-FACTS, L-DAG-NON-TIP-AUTO-FORK
#[test]
fn a_rewound_ack_with_new_notes_says_so_and_one_call_records_them_as_a_fork() {
    let fs = workrail::store::memfs::MemFs::new();
    let wr = open(&fs);
    let s0 = start(&wr, "project.demo");
    let first = wr.continue_workflow(ack(&s0, "planned A", vec![])).unwrap();
    let events_before = session_events(&wr, &s0).len();

    // The user rewinds; the agent redoes the step and sends its old ackToken with new notes.
    let replayed = wr.continue_workflow(ack(&s0, "planned B", vec![])).unwrap();
    assert_eq!(
        session_events(&wr, &s0).len(),
        events_before,
        "a replay writes nothing"
    );
    let notice = replayed.replay.clone().expect("a replay notice");
    assert_eq!(notice.not_recorded, vec!["output.notesMarkdown"]);
    assert_eq!(notice.recorded_notes_markdown.as_deref(), Some("planned A"));
    assert_eq!(notice.step_id.as_str(), "plan");
    // Everything else is the recorded response.
    assert_eq!(
        ExecutionOutput {
            replay: None,
            ..replayed.clone()
        },
        first
    );
    let text = render_text(&replayed);
    assert!(
        text.contains("REPLAY") && text.contains("NOT recorded"),
        "{text}"
    );
    assert!(text.contains(&notice.fork_ack_token), "{text}");
    assert!(text.contains("> planned A"), "{text}");

    // One call with the fresh ack records the new notes on a new branch from the same step.
    let forked = wr
        .continue_workflow(with_ack(&notice.fork_ack_token, "planned B"))
        .unwrap();
    assert!(forked.replay.is_none());
    // The fork says it forked, from which step, what the other branch holds, and which branch
    // is preferred now.
    let fork = forked
        .warnings
        .iter()
        .find(|w| w.code == "forked")
        .expect("a fork notice");
    assert!(
        fork.message.contains("step \"Plan\"")
            && fork.message.contains("\"planned A\"")
            && fork.message.contains("preferred tip"),
        "{}",
        fork.message
    );
    assert!(render_text(&forked).contains("Forked:"));
    let tip = |out: &ExecutionOutput| -> String {
        let parts = workrail_spec::token::TokenParts::parse(&out.state_token).unwrap();
        match parts.payload().unwrap() {
            workrail_spec::token::TokenPayload::State(p) => p.node_id.to_string(),
            other => panic!("not a state token: {other:?}"),
        }
    };
    let (a, b) = (tip(&first), tip(&forked));
    assert_ne!(a, b, "a new node");
    assert_eq!(notes_on(&wr, &forked, &a), vec!["planned A"]);
    assert_eq!(notes_on(&wr, &forked, &b), vec!["planned B"]);
    assert_eq!(
        pending(&forked),
        pending(&first),
        "the same next step on the new branch"
    );
    // Both branches stay; the same fork ack again is a replay of the fork, without a notice.
    let again = wr
        .continue_workflow(with_ack(&notice.fork_ack_token, "planned B"))
        .unwrap();
    assert_eq!(again, forked);
}

/// lock: L-TOKEN-REPLAY-FACTS
#[test]
fn different_artifacts_are_named_as_not_recorded() {
    let fs = workrail::store::memfs::MemFs::new();
    let wr = open(&fs);
    let s0 = start(&wr, "project.demo");
    let artifact = |text: &str| json!({"kind": "wr.note", "text": text});
    wr.continue_workflow(ack(&s0, "planned", vec![artifact("one")]))
        .unwrap();
    let same = wr
        .continue_workflow(ack(&s0, "planned", vec![artifact("one")]))
        .unwrap();
    assert!(same.replay.is_none());
    let other = wr
        .continue_workflow(ack(&s0, "planned", vec![artifact("two")]))
        .unwrap();
    let notice = other.replay.expect("a notice");
    assert_eq!(notice.not_recorded, vec!["output.artifacts"]);
    assert_eq!(notice.recorded_artifacts, 1);
}

/// lock: L-TOKEN-REPLAY-FACTS, L-DAG-NON-TIP-AUTO-FORK
#[test]
fn a_replay_after_the_run_completed_still_offers_the_fork() {
    let fs = workrail::store::memfs::MemFs::new();
    let wr = open(&fs);
    let mut out = start(&wr, "project.demo");
    out = wr.continue_workflow(ack(&out, "planned", vec![])).unwrap();
    out = wr
        .continue_workflow(ack(&out, "implemented", vec![]))
        .unwrap();
    out = wr
        .continue_workflow(ack(&out, "decided", vec![loop_control("stop")]))
        .unwrap();
    let last = out.clone();
    let done = wr
        .continue_workflow(ack(&last, "wrapped up", vec![]))
        .unwrap();
    assert!(done.is_complete);
    let replayed = wr
        .continue_workflow(ack(&last, "wrapped up, better", vec![]))
        .unwrap();
    let notice = replayed.replay.clone().expect("a notice");
    assert!(replayed.is_complete, "the recorded answer: complete");
    assert_eq!(notice.step_id.as_str(), "wrap");
    let forked = wr
        .continue_workflow(with_ack(&notice.fork_ack_token, "wrapped up, better"))
        .unwrap();
    assert!(forked.is_complete && forked.replay.is_none());
    assert_ne!(forked.state_token, done.state_token);
}

/// The ackToken of a blocked attempt sent again with a fix: the answer is still the recorded
/// blocked one, but now with a `replay` notice (in structure and text) saying the new output was
/// NOT recorded and handing over the step's next ackToken; the same call as the blocked one
/// stays byte-identical with no notice; sending the fix with the notice's token advances.
///
/// decision: D163; lock: L-TOKEN-REPLAY-FACTS, L-TOKEN-ACK-IDEMPOTENT
#[test]
fn a_fix_sent_with_a_blocked_attempt_s_used_ack_token_gets_a_notice_naming_the_next_token() {
    let fs = workrail::store::memfs::MemFs::new();
    let wr = open(&fs);
    let s0 = start(&wr, "project.demo");
    let s1 = wr.continue_workflow(ack(&s0, "planned", vec![])).unwrap();
    let s2 = wr
        .continue_workflow(ack(&s1, "implemented", vec![]))
        .unwrap();
    assert_eq!(pending(&s2), "decide");
    // No wr.loop_control artifact: blocked.
    let blocked = wr.continue_workflow(ack(&s2, "decided", vec![])).unwrap();
    assert!(!blocked.blockers.is_empty(), "{blocked:?}");
    assert!(blocked.replay.is_none());

    // The same call again: the recorded answer, byte for byte, and no notice.
    let same = wr.continue_workflow(ack(&s2, "decided", vec![])).unwrap();
    assert_eq!(same, blocked);
    assert_eq!(render_text(&same), render_text(&blocked));

    // The fix, sent with the used ackToken.
    let control =
        serde_json::json!({"kind": "wr.loop_control", "loopId": "build", "decision": "stop"});
    let fix = ack(&s2, "decided: stop", vec![control.clone()]);
    let events = session_events(&wr, &s2).len();
    let resent = wr.continue_workflow(fix.clone()).unwrap();
    assert_eq!(
        session_events(&wr, &s2).len(),
        events,
        "a replay writes nothing"
    );
    let notice = resent.replay.clone().expect("a notice");
    assert!(notice.attempt_blocked);
    assert_eq!(
        notice.not_recorded,
        ["output.notesMarkdown", "output.artifacts"]
    );
    assert_eq!(notice.recorded_artifacts, 0);
    assert!(notice.recorded_notes_markdown.is_none());
    assert_eq!(
        Some(&notice.fork_ack_token),
        blocked.ack_token.as_ref(),
        "the step's next attempt is the one the blocked answer handed out"
    );
    let mut without = resent.clone();
    without.replay = None;
    assert_eq!(without, blocked, "otherwise the recorded answer");
    let text = render_text(&resent);
    assert!(
        text.contains("its attempt was blocked")
            && text.contains("NOT recorded")
            && text.contains(&format!("ackToken: {}", notice.fork_ack_token)),
        "{text}"
    );

    // The fix with the notice's token advances.
    let done = wr
        .continue_workflow(ContinueWorkflowInput {
            ack_token: Some(notice.fork_ack_token.clone()),
            ..fix
        })
        .unwrap();
    assert!(done.blockers.is_empty(), "{:?}", done.blockers);
    assert_eq!(pending(&done), "wrap");
}

//! The text-first rendering of execution responses is deterministic and stays as reviewed
//! (contract "text-first + JSON backbone"): snapshots of `content[0].text` for a start, a
//! blocked attempt, a rewind and a completion, with a seeded data directory so ids and tokens
//! are stable.
//!
//! Guards against accidental changes of what agents read: a reordered section, a lost token
//! line, a missing fix under a blocker. Review changes with `cargo insta review` (or
//! `INSTA_UPDATE=always cargo test -p workrail --test render_snapshots` and read the diff).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod protocol_support;

use protocol_support::*;
use workrail::protocol::render_text;
use workrail::store::memfs::MemFs;

/// lock: L-MCP-TEXT-FIRST, L-MCP-EXECUTION-RESPONSE
#[test]
fn execution_responses_render_deterministically() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let started = start(&wr, "project.demo");
    // Rendering is a pure function of the response.
    assert_eq!(render_text(&started), render_text(&started.clone()));
    insta::assert_snapshot!("start", render_text(&started));

    let planned = wr
        .continue_workflow(ack(&started, "Planned three slices.", vec![]))
        .unwrap();
    let sliced = wr
        .continue_workflow(ack(&planned, "Slice 1 done.", vec![]))
        .unwrap();
    let blocked = wr
        .continue_workflow(ack(&sliced, "No decision yet.", vec![]))
        .unwrap();
    insta::assert_snapshot!("blocked", render_text(&blocked));

    let rewound = wr
        .continue_workflow(rehydrate(&started.state_token))
        .unwrap();
    insta::assert_snapshot!("rewind", render_text(&rewound));

    let wrapped = wr
        .continue_workflow(ack(&blocked, "Stopping here.", vec![loop_control("stop")]))
        .unwrap();
    let done = wr
        .continue_workflow(ack(&wrapped, "Summarized.", vec![]))
        .unwrap();
    insta::assert_snapshot!("complete", render_text(&done));
}

/// lock: L-MCP-TEXT-FIRST
#[test]
fn resume_results_render_deterministically() {
    use workrail::mcp::render::resume_text;
    use workrail_spec::tools::{ResumeQueryInput, ResumeSessionInput};

    let fs = MemFs::new();
    let wr = open(&fs);
    insta::assert_snapshot!(
        "resume_empty",
        resume_text(&wr.resume_session(ResumeSessionInput::default()).unwrap())
    );
    let started = start(&wr, "project.demo");
    wr.continue_workflow(ack(
        &started,
        "Planned the billing fix.\nNext: reproduce the zebracorn bug.",
        vec![],
    ))
    .unwrap();
    let out = wr
        .resume_session(ResumeSessionInput {
            query: Some(ResumeQueryInput {
                text: Some("zebracorn".into()),
                ..Default::default()
            }),
        })
        .unwrap();
    assert_eq!(resume_text(&out), resume_text(&out.clone()));
    insta::assert_snapshot!("resume", resume_text(&out));
}

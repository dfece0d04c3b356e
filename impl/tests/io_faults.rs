//! One failed I/O operation (ENOSPC or EIO, with or without a short write) at any mutating step
//! of a whole protocol call (the CAS writes of snapshots, artifacts and pinned workflows, the
//! segment, the manifest, the directory fsyncs): the agent gets `STORE_IO_ERROR` naming the OS
//! error and the path, retryable, and saying honestly what was committed; the session stays
//! healthy; the same call sent again succeeds and records the step exactly once, durably.
//!
//! Before: EIO on the pin's fsync said nothing was committed while it was, and the retry got
//! `SESSION_CORRUPT`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use protocol_support::*;
use serde_json::json;
use workrail::store::memfs::{MemFs, UnsyncedData};
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::event::EventKind;
use workrail_spec::tools::{ContinueWorkflowInput, ExecutionOutput};

const ENOSPC: i32 = 28;
const EIO: i32 = 5;

/// The call under test: acknowledge `plan` of the demo with notes and an artifact (new node, new
/// snapshot, an artifact object, a segment and manifest records).
fn setup(fs: &MemFs) -> (ExecutionOutput, ContinueWorkflowInput) {
    let wr = open(fs);
    let first = start(&wr, "project.demo");
    let call = ack(
        &first,
        "planned the work",
        vec![json!({"kind": "wr.note", "text": "an artifact output"})],
    );
    (first, call)
}

fn advances(fs: &MemFs, out: &ExecutionOutput) -> usize {
    open(fs)
        .sessions()
        .load(&out.session.session_id)
        .unwrap()
        .events()
        .all()
        .unwrap()
        .iter()
        .filter(|e| e.kind() == EventKind::AdvanceRecorded)
        .count()
}

fn assert_honest(error: &ErrorEnvelope, errno: &str, context: &str) {
    assert_eq!(error.code, ErrorCode::StoreIoError, "{error:?} ({context})");
    assert_eq!(error.retry, Retry::RetryableImmediate, "{context}");
    let details = error.details.as_ref().unwrap();
    assert_eq!(details["errno"], errno, "{details} ({context})");
    assert!(
        details["path"]
            .as_str()
            .is_some_and(|p| !p.is_empty() && !p.starts_with('/')),
        "the path, relative to the data directory: {details} ({context})"
    );
    assert!(
        error.message.contains(errno) && error.message.contains("committed"),
        "{} ({context})",
        error.message
    );
}

/// lock: L-STORE-ATOMIC-WRITE, L-TOKEN-ACK-IDEMPOTENT, L-ERR-SELF-CORRECTING
#[test]
fn a_failed_write_anywhere_in_an_advance_is_honest_and_the_retry_records_it_once() {
    failed_write_sweep(MemFs::new);
}

/// The same sweep with the snapshot and the segment written at once, as on the real filesystem
/// (decision D65): whichever write the failure hits, and whatever the other one did meanwhile,
/// nothing is attested, the session stays healthy and the retry records the step once.
///
/// lock: L-STORE-ATOMIC-WRITE, L-TOKEN-ACK-IDEMPOTENT
#[test]
fn a_failed_write_while_the_snapshot_and_segment_overlap_is_honest_too() {
    failed_write_sweep(|| MemFs::new().overlapping_writes());
}

fn failed_write_sweep(new_fs: fn() -> MemFs) {
    // Count the mutating operations of the call on a clean run.
    let fs = new_fs();
    let (_, call) = setup(&fs);
    let before = fs.ops();
    let clean = open(&fs).continue_workflow(call).unwrap();
    let ops = fs.ops() - before;
    assert!(
        ops >= 10,
        "an advance writes objects, a segment and the manifest: {ops}"
    );

    let mut checked = 0;
    for k in 1..=ops {
        for (errno, name) in [(ENOSPC, "ENOSPC"), (EIO, "EIO")] {
            for written in [0, 500, 1000] {
                let context = format!("{name} at mutating op {k} of {ops}, {written}/1000 written");
                let fs = new_fs();
                let (first, call) = setup(&fs);
                let wr = open(&fs);
                fs.fail_at_with(k, errno, written);
                let error = wr.continue_workflow(call.clone()).expect_err(&context);
                assert_honest(&error, name, &context);
                let committed = error.details.as_ref().unwrap()["committed"].clone();
                // "Nothing" is the truth, now and after a power cut.
                if committed == "nothing" {
                    assert_eq!(advances(&fs, &first), 0, "{context}");
                    assert_eq!(
                        advances(&fs.after_crash(UnsyncedData::Kept), &first),
                        0,
                        "{context}"
                    );
                }
                // The session is healthy and the pending step is still there to retry.
                let back = wr.continue_workflow(rehydrate(&first.state_token)).unwrap();
                assert_eq!(pending(&back), "plan", "{context}");
                // The same call again records the step once, like the clean run.
                let retried = wr
                    .continue_workflow(call.clone())
                    .unwrap_or_else(|e| panic!("the retry failed: {e:?} ({context})"));
                assert_eq!(pending(&retried), pending(&clean), "{context}");
                assert_eq!(advances(&fs, &first), 1, "{context}");
                // Durable: a power cut right after the answer keeps it.
                let cut = fs.after_crash(UnsyncedData::Lost);
                assert_eq!(advances(&cut, &first), 1, "{context}");
                let after_cut = open(&cut)
                    .continue_workflow(rehydrate(&retried.state_token))
                    .unwrap_or_else(|e| panic!("{e:?} ({context})"));
                assert_eq!(pending(&after_cut), pending(&clean), "{context}");
                // And a third send is a replay of the recorded answer.
                let replay = wr.continue_workflow(call.clone()).unwrap();
                assert_eq!(replay, retried, "{context}");
                checked += 1;
            }
        }
    }
    assert!(checked >= 60, "only {checked} failure points");
}

/// A resend answered from its record makes the record durable first (decision D207): a failed
/// fsync there is answered honestly, retryable, records nothing more, and the next resend gets
/// the first answer.
///
/// decision: D207
/// lock: L-TOKEN-ACK-IDEMPOTENT
#[test]
fn a_failed_sync_of_a_resend_is_honest_and_the_next_resend_answers_the_same() {
    let fs = MemFs::new();
    let (first, call) = setup(&fs);
    let wr = open(&fs);
    let answered = wr.continue_workflow(call.clone()).unwrap();
    let before = fs.ops();
    assert_eq!(wr.continue_workflow(call.clone()).unwrap(), answered);
    let ops = fs.ops() - before;
    assert!(ops >= 1, "a resend syncs the manifest: {ops} mutating ops");
    for k in 1..=ops {
        for (errno, name) in [(ENOSPC, "ENOSPC"), (EIO, "EIO")] {
            let context = format!("{name} at op {k} of {ops} of a resend");
            fs.fail_at_with(k, errno, 0);
            let error = wr.continue_workflow(call.clone()).expect_err(&context);
            assert_honest(&error, name, &context);
            assert_eq!(
                error.details.as_ref().unwrap()["committed"],
                "unknown",
                "the record is an earlier call's, not confirmed on disk ({context})"
            );
            assert_eq!(advances(&fs, &first), 1, "{context}");
            let again = wr.continue_workflow(call.clone()).unwrap();
            assert_eq!(again, answered, "{context}");
        }
    }
}

//! What one call costs as a session of nested loops grows, counted by an instrumenting global
//! allocator: the most heap a call needs above what the server holds (deterministic, unlike its
//! time on a shared machine). A binary of its own, with one test, so no other test's
//! allocations are counted.
//!
//! Guards issue 30's flat cost: a rehydrate of the tip, a rewind to an early node, a resent
//! early acknowledgement, `resume_session` and an advance each need about as much at 2,000
//! advances as at 100. A call that projects, reads or copies the whole log again needs memory
//! that grows with it, and fails here.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod memory_support;

use std::sync::Arc;

use memory_support::{HEAP, advance, advance_input, catalog, rehydrate, start_nested};
use peakmem_alloc::PeakMemAllocTrait;
use workrail::entropy::SeededEntropy;
use workrail::protocol::Workrail;
use workrail::store::fs::{OsFs, StoreFs};
use workrail_spec::tools::{ExecutionOutput, ResumeQueryInput, ResumeSessionInput};

/// The most heap `call` needs above what was held before it, on its second run (the first
/// fills the caches a repeated call finds filled, as an agent's rehydrates and resends do).
fn cost<T>(mut call: impl FnMut() -> T) -> usize {
    drop(call());
    measure(call)
}

/// The most heap `call` needs above what was held before it, on one run.
fn measure<T>(call: impl FnOnce() -> T) -> usize {
    HEAP.reset_peak_memory();
    let out = call();
    let peak = HEAP.get_peak_memory();
    drop(out);
    peak
}

/// What each call costs at one length of the session.
#[derive(Debug, Clone, Copy)]
struct Costs {
    rehydrate: usize,
    rewind: usize,
    resend: usize,
    resume: usize,
    advance: usize,
}

/// How much more heap a call may need at 2,000 advances than at 100 (issue 30: within 1.2x),
/// beyond a little for numbers that gain digits.
const GROWTH: f64 = 1.2;
const SLACK: usize = 1024;

#[test]
fn each_call_costs_about_as_much_at_2000_advances_as_at_100() {
    // A real directory: the in-memory filesystem copies a file's bytes to make them durable,
    // which a real fsync does not.
    let dir = tempfile::tempdir().unwrap();
    let fs: Arc<dyn StoreFs> = Arc::new(OsFs::new(dir.path()));
    let wr =
        Workrail::with_parts(Arc::clone(&fs), catalog(), Arc::new(SeededEntropy::new(7))).unwrap();
    let mut out = start_nested(&wr);
    let mut early: Option<(ExecutionOutput, ExecutionOutput)> = None;
    let mut measured = Vec::new();
    for i in 0..2000 {
        let next = advance(&wr, out.clone(), i);
        if i == 49 {
            early = Some((out.clone(), next.clone()));
        }
        out = next;
        if i + 1 == 100 || i + 1 == 2000 {
            let (early_input, early_answer) = early.clone().unwrap();
            let query = ResumeSessionInput {
                query: Some(ResumeQueryInput {
                    text: Some("unit done".into()),
                    ..Default::default()
                }),
            };
            let costs = Costs {
                rehydrate: cost(|| rehydrate(&wr, &out)),
                rewind: cost(|| rehydrate(&wr, &early_answer)),
                resend: cost(|| {
                    advance(&wr, early_input.clone(), 49);
                }),
                resume: cost(|| wr.resume_session(query.clone()).unwrap()),
                // An advance is measured once: a second would be a replay. Its state is kept.
                advance: {
                    let input =
                        advance_input(&out, format!("Unit {i:06} done; nothing else to add."));
                    let mut next = None;
                    let used = measure(|| next = Some(wr.continue_workflow(input).unwrap()));
                    out = next.unwrap();
                    used
                },
            };
            measured.push((i + 1, costs));
        }
    }
    let [(short_len, short), (long_len, long)] = measured[..] else {
        panic!("two measurements expected");
    };
    println!("heap bytes a call needs at {short_len} advances: {short:?}");
    println!("heap bytes a call needs at {long_len} advances: {long:?}");
    for (what, at_short, at_long) in [
        ("rehydrate of the tip", short.rehydrate, long.rehydrate),
        ("rewind to advance 50's node", short.rewind, long.rewind),
        (
            "resend of advance 50's acknowledgement",
            short.resend,
            long.resend,
        ),
        ("resume_session", short.resume, long.resume),
        ("advance", short.advance, long.advance),
    ] {
        assert!(
            at_long as f64 <= at_short as f64 * GROWTH + SLACK as f64,
            "a {what} needs {at_long} bytes of heap at {long_len} advances against {at_short} at {short_len}: over {GROWTH}x (issue 30)"
        );
    }
}

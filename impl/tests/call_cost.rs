//! What one call costs as a session of nested loops grows, counted by an instrumenting global
//! allocator (deterministic, unlike its time on a shared machine): the most heap a call needs
//! above what the server holds, how many allocations it makes and how many bytes they ask for.
//! A binary of its own, with one test, so no other test's allocations are counted.
//!
//! Guards issue 30's flat cost: a rehydrate of the tip, a rewind to an early node, a resent
//! early acknowledgement, `resume_session` and an advance each cost about as much at 2,000
//! advances as at 100. A call that projects, reads, clones or copies the whole log or the whole
//! run again allocates more with every advance (the allocations and bytes grow even where the
//! peak does not), and fails here.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod memory_support;

use std::sync::Arc;

use memory_support::{COUNTS, HEAP, advance, advance_input, catalog, rehydrate, start_nested};
use peakmem_alloc::PeakMemAllocTrait;
use stats_alloc::Region;
use workrail::entropy::SeededEntropy;
use workrail::protocol::Workrail;
use workrail::store::fs::{OsFs, StoreFs};
use workrail_spec::tools::{ExecutionOutput, ResumeQueryInput, ResumeSessionInput};

/// What one run of a call allocated.
#[derive(Debug, Clone, Copy)]
struct Cost {
    /// The most heap it needed above what was held before it.
    peak: usize,
    /// Allocations and reallocations it made: its work, in the unit a copy, a clone or a
    /// parse is paid in.
    allocations: usize,
    /// The bytes those asked for.
    bytes: usize,
}

/// What `call` costs on its second run (the first fills the caches a repeated call finds
/// filled, as an agent's rehydrates and resends do).
fn cost<T>(mut call: impl FnMut() -> T) -> Cost {
    drop(call());
    measure(call)
}

/// What `call` costs on one run.
fn measure<T>(call: impl FnOnce() -> T) -> Cost {
    HEAP.reset_peak_memory();
    let region = Region::new(&COUNTS);
    let out = call();
    let change = region.change();
    let peak = HEAP.get_peak_memory();
    drop(out);
    Cost {
        peak,
        allocations: change.allocations + change.reallocations,
        bytes: change.bytes_allocated + change.bytes_reallocated.max(0) as usize,
    }
}

/// What each call costs at one length of the session.
#[derive(Debug, Clone, Copy)]
struct Costs {
    rehydrate: Cost,
    rewind: Cost,
    resend: Cost,
    resume: Cost,
    advance: Cost,
}

/// How much more a call may cost at 2,000 advances than at 100 (issue 30: within 1.2x), beyond a
/// little for numbers that gain digits.
const GROWTH: f64 = 1.2;
const SLACK: usize = 1024;
const ALLOCATIONS_SLACK: usize = 16;

/// The advance whose node is rewound to and whose acknowledgement is resent: early enough that
/// the rewind's recap of the branch since it is cut at its budget at 100 advances as at 2,000,
/// so the two answer the same length and differ by the session's alone.
const EARLY_ADVANCE: usize = 10;

/// decision: D228
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
        if i + 1 == EARLY_ADVANCE {
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
                    advance(&wr, early_input.clone(), EARLY_ADVANCE - 1);
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
        ("rewind to advance 10's node", short.rewind, long.rewind),
        (
            "resend of advance 10's acknowledgement",
            short.resend,
            long.resend,
        ),
        ("resume_session", short.resume, long.resume),
        ("advance", short.advance, long.advance),
    ] {
        for (unit, at_short, at_long, slack) in [
            ("bytes of heap at most", at_short.peak, at_long.peak, SLACK),
            (
                "allocations",
                at_short.allocations,
                at_long.allocations,
                ALLOCATIONS_SLACK,
            ),
            ("bytes allocated", at_short.bytes, at_long.bytes, SLACK),
        ] {
            assert!(
                at_long as f64 <= at_short as f64 * GROWTH + slack as f64,
                "a {what} needs {at_long} {unit} at {long_len} advances against {at_short} at {short_len}: over {GROWTH}x (issue 30)"
            );
        }
    }
}

//! Several workflows in one chat: K runs (2..=5, of a looping workflow with contract steps, a
//! plain one and a contract one) share one data directory, and every call takes its tokens at
//! random from ALL responses seen so far: paired as they came, mixed across runs or across
//! nodes of one run, old or new, an ackToken alone (D34), a stateToken alone, checkpoints.
//! The oracle decodes only the payload part of the tokens it sends (no key needed) and checks
//! that a correctly paired call acts on exactly the run and node its tokens name (responses,
//! bytes written, events appended, the new node's parent), that replays and rehydrates write
//! nothing, and that a mixed pair is `TOKEN_SCOPE_MISMATCH`, writes nothing, and names each
//! token's run and step and what to send instead (see `workrail_harness::multirun`).
//!
//! Guards against: a call advancing the wrong run (an ack applied to the run of the state
//! token, or the other way round), a mismatch detected after something was written, responses
//! that do not say which run they belong to, and mismatch errors an agent cannot act on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use workrail::store::memfs::MemFs;
use workrail_harness::fixture::{self, MULTI_WORKFLOWS};
use workrail_harness::multirun::{Agent, Call, JuggleStats, Juggler, Partner, Pick, check_walks};
use workrail_harness::ops;
use workrail_harness::system::{InProcess, Stdio, System};

fn in_process(seed: u64) -> Juggler<InProcess> {
    Juggler::new(InProcess::with_catalog(
        MemFs::new(),
        seed,
        fixture::multi_catalog(),
    ))
}

fn walk<S: System>(j: &mut Juggler<S>, starts: &[u8], calls: &[Call]) {
    if let Err(e) = j.walk(starts, calls).and_then(|()| j.check_runs_intact()) {
        panic!("{e}\n{j:?}");
    }
}

fn cont(state: Pick, ack: Partner) -> Call {
    Call::Continue {
        state,
        ack,
        agent: Agent::Good,
    }
}

/// A fixed walk that reaches every kind of call: three runs of the three workflows, advances
/// on each, an ack without its required artifact (blocked), acks of run A sent with state tokens of run B and C, an old ack of run A with its
/// newest state, an ack alone, replays, a checkpoint mixed across runs, a rehydrate.
fn scripted() -> (Vec<u8>, Vec<Call>) {
    use Partner::{Other, Same};
    use Pick::{Any, Recent};
    let calls = vec![
        cont(Any(0), Same), // run 0 advances
        cont(Any(1), Same), // run 1 advances
        cont(Any(2), Same), // run 2 advances
        Call::Continue {
            // run 2 at its contract step, acked without the required artifact: blocked
            state: Recent(0),
            ack: Same,
            agent: Agent::Sloppy,
        },
        cont(Recent(0), Other(Any(0))), // state of run 2, ack of run 0's first response: across runs
        cont(Recent(0), Other(Recent(2))), // state of run 2, ack of run 0's latest: across runs
        cont(Any(3), Other(Any(0))),    // run 0's newest state with its old, used ack: within a run
        Call::AckAlone {
            ack: Recent(2),
            agent: Agent::Good,
        },
        cont(Any(0), Same), // run 0's first pair again: a replay
        Call::Checkpoint {
            state: Recent(0),
            checkpoint: Same,
        },
        Call::Checkpoint {
            state: Recent(0),
            checkpoint: Other(Any(1)),
        },
        Call::Rehydrate { state: Any(1) },
        Call::Start { workflow: 0 },
        cont(Recent(0), Other(Any(0))),
        cont(Recent(0), Same),
    ];
    (vec![0, 1, 2], calls)
}

fn assert_reached(stats: &JuggleStats) {
    assert!(
        stats.advances > 0
            && stats.replays > 0
            && stats.mismatches_across_runs > 0
            && stats.mismatches_within_run > 0
            && stats.ack_alone > 0
            && stats.checkpoints > 0
            && stats.rehydrates > 0
            && stats.blocked > 0,
        "{stats:?}"
    );
}

/// lock: L-TOKEN-SCOPED, L-TOKEN-ERRORS, L-ERR-SELF-CORRECTING, L-TOKEN-REHYDRATE-PURE, L-TOKEN-ACK-IDEMPOTENT
#[test]
fn a_scripted_interleaving_never_advances_the_wrong_run() {
    let mut j = in_process(21);
    let (starts, calls) = scripted();
    walk(&mut j, &starts, &calls);
    assert_reached(&j.stats);
}

/// The same walk over the real stdio server (what an agent sees: argument parsing, result
/// mapping, text rendering with the run named beside its tokens).
/// lock: L-TOKEN-SCOPED, L-TOKEN-ERRORS
#[test]
fn a_scripted_interleaving_over_stdio_never_advances_the_wrong_run() {
    let files: Vec<(&str, &str)> = MULTI_WORKFLOWS.iter().map(|(_, f, j)| (*f, *j)).collect();
    let mut j = Juggler::new(Stdio::with_workflows(&files));
    let (starts, calls) = scripted();
    walk(&mut j, &starts, &calls);
    assert_reached(&j.stats);
}

/// K runs, random calls over every token ever seen; every call is judged from the token
/// payloads alone, and across the cases every kind of call happens.
/// lock: L-TOKEN-SCOPED, L-TOKEN-ERRORS, L-TOKEN-REHYDRATE-PURE, L-TOKEN-ACK-IDEMPOTENT, L-TOKEN-CHECKPOINT-IDEMPOTENT
#[test]
fn random_interleavings_never_advance_the_wrong_run() {
    let stats = match check_walks(ops::config(2), 8..24, |seed| {
        InProcess::with_catalog(MemFs::new(), seed, fixture::multi_catalog())
    }) {
        Ok(stats) => stats,
        Err(e) => panic!("{e}"),
    };
    // Coverage of every kind of call, blocked ones included, is the scripted walks' job: a few
    // random cases may well draw no sloppy ack at a contract step.
    assert!(
        stats.advances > 0 && stats.mismatches_across_runs > 0,
        "{stats:?}"
    );
}

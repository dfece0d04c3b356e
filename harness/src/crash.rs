//! The crash-state harness (redb's `crash_consistency.rs` habit): run a command sequence, then
//! crash the last command at every mutating I/O point (`MemFs::crash_at_torn(k, tear)` for
//! k = 1.. until nothing crashes, the write at the crash point landing a fraction drawn from the
//! seed), rebuild what each unsynced-data policy leaves (`MemFs::after_crash`, see [`policies`]),
//! reopen WorkRail on it, and classify what the new process finds:
//!
//! - **old truth**: everything equals the model *before* the interrupted command;
//! - **new truth**: everything equals the model *after* it (the new nodes are matched
//!   structurally, since the response that would have named them was lost);
//! - **torn, then repaired**: exactly the locked state "segment attested, pins missing", which
//!   close and pins in one write (D49) leave only when a power cut tears that write (a `Torn`
//!   policy): the session is `corrupt_tail`/`corrupt_head` with `missing_snapshot_pins`, its
//!   validated prefix is the old log, every execution call on it is `SESSION_CORRUPT`, every
//!   other run is untouched, and then `workrail repair` (D51) must bring back exactly the new
//!   truth.
//!
//! Anything else (partial truth, a lost acknowledged write, a session that is neither) fails.
//! After old or new truth (repaired or not) the interrupted call is sent again with the same
//! tokens and must end in the model's after-state (a fresh advance, or a replay of the recorded
//! one): the session is healthy and continuable.
//!
//! Before crashing anything, a power cut right after the prefix (every unsynced byte lost) must
//! lose nothing a response acknowledged.
//!
//! [`check_crashes`] starts the harness workflow; [`check_crashes_on`] any workflow under test
//! (a workflow in the 3.x language with its start context, say), which every simulated process,
//! restarted or not, serves.

use std::sync::Arc;

use workrail::store::memfs::{MemFs, UnsyncedData};
use workrail::store::{CorruptionReason, SessionHealth};
use workrail_model::Observation;
use workrail_spec::error::ErrorCode;
use workrail_spec::event::EventData;
use workrail_spec::ids::SessionId;

use crate::driver::{Expect, Harness, Mode, Prepared, RunIds, World, check_truth};
use crate::generated::{WorkflowUnderTest, harness_workflow};
use crate::ops::Op;
use crate::system::{InProcess, System};

/// The unsynced-data policies of a run: lost, kept, torn at a point drawn from `seed`, and torn
/// just before the end (which splits a close+pins write whenever its pins come last).
pub fn policies(seed: u64) -> [UnsyncedData; 4] {
    [
        UnsyncedData::Lost,
        UnsyncedData::Kept,
        UnsyncedData::Torn {
            keep_per_mille: (mix(seed, 0x7EA2) % 1001) as u16,
        },
        UnsyncedData::Torn {
            keep_per_mille: 999,
        },
    ]
}

/// No command does more mutating operations than this; a loop past it is a harness bug.
const MAX_CRASH_POINTS: u64 = 500;

/// What a restart found after a crash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovered {
    OldTruth,
    NewTruth,
    /// A torn close+pins write failed fast until `repair` restored the new truth.
    TornThenRepaired,
}

/// What one crash check saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CrashReport {
    /// Mutating operations of the last command (crash points).
    pub points: u64,
    pub old_truth: u32,
    pub new_truth: u32,
    pub torn_then_repaired: u32,
    /// Every crash point with its policy and outcome.
    pub outcomes: Vec<(u64, UnsyncedData, Recovered)>,
}

fn mix(seed: u64, salt: u64) -> u64 {
    // splitmix64: distinct, well-spread entropy seeds per simulated process.
    let mut z = seed ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The run a prepared call acts on (none for a start: its session is new).
pub(crate) fn run_of(world: &World, prepared: &Prepared) -> Option<usize> {
    match &prepared.expect {
        Expect::Start { .. } => None,
        Expect::Rehydrate { node }
        | Expect::Advance { node, .. }
        | Expect::Checkpoint { node, .. } => Some(world.nodes[*node].run),
        Expect::ReplayAck { index, .. } => Some(world.nodes[world.acks[*index].node].run),
        Expect::ReplayCheckpoint { index } => Some(world.nodes[world.checkpoints[*index].node].run),
    }
}

/// Runs `prefix` (fully checked), then crashes `last` at every mutating I/O point under each of
/// `policies`, on the harness workflow (`project.harness`). `Ok` when every crash state is one
/// of the locked outcomes.
pub fn check_crashes(
    prefix: &[Op],
    last: &Op,
    seed: u64,
    policies: &[UnsyncedData],
) -> Result<CrashReport, String> {
    check_crashes_on(harness_workflow(), prefix, last, seed, policies)
}

/// [`check_crashes`] with every `Start` starting `workflow` (with its start context), served by
/// every simulated process, the restarted ones included.
pub fn check_crashes_on(
    workflow: Arc<WorkflowUnderTest>,
    prefix: &[Op],
    last: &Op,
    seed: u64,
    policies: &[UnsyncedData],
) -> Result<CrashReport, String> {
    let catalog = workflow.catalog();
    let process = |fs: MemFs, seed: u64| InProcess::with_catalog(fs, seed, catalog.clone());
    let mut base = Harness::with_workflow(process(MemFs::new(), seed), workflow);
    base.run(prefix)?;
    let mut report = CrashReport::default();
    // A power cut between commands loses nothing a response acknowledged.
    for policy in [UnsyncedData::Lost, UnsyncedData::Kept] {
        let image = base.sys.fs.after_crash(policy);
        let cut = process(image, mix(seed, 1));
        check_truth(&cut, &base.world, None, None)
            .map_err(|e| format!("a power cut after {prefix:?} ({policy:?}) lost truth: {e}"))?;
    }
    let image = base.sys.fs.after_crash(UnsyncedData::Kept);
    for k in 1..=MAX_CRASH_POINTS {
        let mut crashed_any = false;
        for (p, &policy) in policies.iter().enumerate() {
            let salt = k * 16 + p as u64 + 2;
            let mut trial = Harness {
                sys: process(image.after_crash(UnsyncedData::Kept), mix(seed, salt)),
                world: base.world.clone(),
                workflow: base.workflow.clone(),
            };
            let Some(prepared) = trial.prepare(last)? else {
                return Ok(report);
            };
            let context = |e: String| {
                format!(
                    "{e}\n  crash at mutating op {k} of {last:?} with {policy:?} (seed {seed}), after {prefix:?}"
                )
            };
            // The write at the crash point lands a fraction of its bytes drawn per point.
            let tear = (mix(seed, salt ^ 0x7EA2) % 1001) as u16;
            match crash_once(&mut trial, &prepared, k, tear, policy).map_err(context)? {
                None => {}
                Some(outcome) => {
                    crashed_any = true;
                    report.outcomes.push((k, policy, outcome));
                    match outcome {
                        Recovered::OldTruth => report.old_truth += 1,
                        Recovered::NewTruth => report.new_truth += 1,
                        Recovered::TornThenRepaired => report.torn_then_repaired += 1,
                    }
                }
            }
        }
        if !crashed_any {
            report.points = k - 1;
            return Ok(report);
        }
    }
    Err(format!(
        "{last:?} did more than {MAX_CRASH_POINTS} mutating operations"
    ))
}

/// One crash point: `None` when the call finished before operation `k` (checked as a normal
/// call), else how the restarted process found the data.
fn crash_once(
    trial: &mut Harness<InProcess>,
    prepared: &Prepared,
    k: u64,
    tear: u16,
    policy: UnsyncedData,
) -> Result<Option<Recovered>, String> {
    let run = run_of(&trial.world, prepared);
    let old_len = match run {
        Some(r) => trial
            .sys
            .load(&trial.world.runs[r].impl_session)
            .map(|l| l.event_count())
            .map_err(|e| format!("cannot load the session before the crash: {e}"))?,
        None => 0,
    };
    let known_sessions: Vec<SessionId> = trial.sys.sessions();
    trial.sys.fs.crash_at_torn(k, tear);
    let reply = trial.call(prepared);
    if !trial.sys.fs.has_crashed() {
        trial.settle(prepared, &reply, Mode::Fresh)?;
        trial.check_truth()?;
        return Ok(None);
    }
    let recovered: MemFs = trial.sys.fs.after_crash(policy);
    trial
        .sys
        .reopen_on(recovered)
        .map_err(|e| format!("WorkRail does not reopen after the crash: {e:?}"))?;

    let old = check_truth(&trial.sys, &trial.world, None, None);
    if old.is_ok() {
        // Old truth: the same call again is a fresh call.
        let again = trial.call(prepared);
        trial.settle(prepared, &again, Mode::Fresh)?;
        trial.check_truth()?;
        return Ok(Some(Recovered::OldTruth));
    }
    let mut after = trial.world.clone();
    let new = advance_model(&mut after, prepared, &trial.sys, &known_sessions)
        .and_then(|()| check_truth(&trial.sys, &after, None, None));
    if new.is_ok() {
        trial.world = after;
        if !matches!(prepared.expect, Expect::Start { .. }) {
            // New truth: the same call again is a replay of what was recorded.
            let again = trial.call(prepared);
            trial.settle(prepared, &again, Mode::Repeat)?;
            trial.check_truth()?;
        }
        return Ok(Some(Recovered::NewTruth));
    }
    if let Some(session) = fails_fast(trial, prepared, run, old_len, &known_sessions)? {
        // Only a torn write can split close from its pins: the write at the crash point landed
        // in part (and the crash kept unsynced bytes), or the crash tore unsynced bytes.
        let torn_at_crash = policy != UnsyncedData::Lost && tear != 0 && tear != 1000;
        if !torn_at_crash && !matches!(policy, UnsyncedData::Torn { .. }) {
            return Err(format!(
                "pins missing although no write was torn ({policy:?}, {tear}/1000 of the write at the crash landed): close and pins are one write (D49)"
            ));
        }
        let repaired = trial
            .sys
            .workrail
            .repair_session(session.as_str())
            .map_err(|e| format!("workrail repair refused a torn close+pins write: {e:?}"))?;
        if !repaired.contains("repaired") {
            return Err(format!("repair did not repair: {repaired}"));
        }
        let mut after = trial.world.clone();
        advance_model(&mut after, prepared, &trial.sys, &known_sessions)
            .and_then(|()| check_truth(&trial.sys, &after, None, None))
            .map_err(|e| format!("after repair the session is not the new truth: {e}"))?;
        trial.world = after;
        if !matches!(prepared.expect, Expect::Start { .. }) {
            let again = trial.call(prepared);
            trial.settle(prepared, &again, Mode::Repeat)?;
            trial.check_truth()?;
        }
        return Ok(Some(Recovered::TornThenRepaired));
    }
    Err(format!(
        "the restarted process found neither the old truth, nor the new truth, nor the locked fail-fast state\n  as old truth: {}\n  as new truth: {}",
        old.err().unwrap_or_default(),
        new.err().unwrap_or_default()
    ))
}

/// Applies the model side of `prepared` and pairs the nodes it created with the production
/// nodes that appeared (the lost response would have named them).
pub(crate) fn advance_model(
    world: &mut World,
    prepared: &Prepared,
    sys: &InProcess,
    known_sessions: &[SessionId],
) -> Result<(), String> {
    let apply = |world: &mut World, c: &workrail_model::Command| -> Result<Observation, String> {
        let (next, obs) = world
            .model
            .apply(c)
            .map_err(|e| format!("the model refused {c:?}: {e}"))?;
        world.model = next;
        Ok(obs)
    };
    match &prepared.expect {
        Expect::Start {
            command,
            model_session,
            model_run,
        } => {
            let Observation::Started { root, .. } = apply(world, command)? else {
                return Err("the model answered a start with another observation".into());
            };
            let fresh: Vec<SessionId> = sys
                .sessions()
                .into_iter()
                .filter(|s| !known_sessions.contains(s))
                .filter(|s| sys.load(s).is_ok_and(|l| l.event_count() > 0))
                .collect();
            let [session] = fresh.as_slice() else {
                return Err(format!("expected one new session, found {fresh:?}"));
            };
            let loaded = sys.load(session).map_err(|e| e.to_string())?;
            let events = loaded.events().all().map_err(|e| e.to_string())?;
            let mut run = None;
            let mut imp_root = None;
            for e in events.iter() {
                match e.data() {
                    EventData::RunStarted(_) => run = e.scope().run_id().cloned(),
                    EventData::NodeCreated(n) if n.parent_node_id.is_none() => {
                        imp_root = e.scope().node_id().cloned();
                    }
                    _ => {}
                }
            }
            let (Some(run), Some(imp_root)) = (run, imp_root) else {
                return Err("the new session has no run or no root".into());
            };
            world.runs.push(RunIds {
                model_session: model_session.clone(),
                model_run: model_run.clone(),
                impl_session: session.clone(),
                impl_run: run,
            });
            world.bij.nodes.link(&root, &imp_root)?;
            world.nodes.push(crate::driver::NodeIds {
                run: world.runs.len() - 1,
                model: root,
                imp: imp_root,
            });
        }
        Expect::Advance { node, command, .. } => {
            let obs = apply(world, command)?;
            if let Observation::Advanced { to_node_id, .. } = obs {
                pair_new_child(world, *node, &to_node_id, sys)?;
            }
        }
        Expect::Checkpoint { node, command } => {
            if let Observation::Checkpointed {
                checkpoint_node_id, ..
            } = apply(world, command)?
            {
                pair_new_child(world, *node, &checkpoint_node_id, sys)?;
            }
        }
        // Reads and replays change nothing: their after-state is the old truth.
        Expect::Rehydrate { .. } | Expect::ReplayAck { .. } | Expect::ReplayCheckpoint { .. } => {}
    }
    Ok(())
}

/// Pairs the model's new child of `parent` with the one production node that is a child of the
/// paired production node and not yet paired.
fn pair_new_child(
    world: &mut World,
    parent: usize,
    model_child: &workrail_spec::ids::NodeId,
    sys: &InProcess,
) -> Result<(), String> {
    let run = world.nodes[parent].run;
    let imp_parent = world.nodes[parent].imp.clone();
    let loaded = sys
        .load(&world.runs[run].impl_session)
        .map_err(|e| e.to_string())?;
    let events = loaded.events().all().map_err(|e| e.to_string())?;
    let dag = workrail_model::projections::RunDag::build(&events, &world.runs[run].impl_run);
    let fresh: Vec<_> = dag
        .nodes
        .values()
        .filter(|n| n.parent.as_ref() == Some(&imp_parent))
        .filter(|n| world.bij.nodes.to_model(&n.node_id).is_none())
        .map(|n| n.node_id.clone())
        .collect();
    let [imp_child] = fresh.as_slice() else {
        return Err(format!(
            "expected one new production child, found {fresh:?}"
        ));
    };
    world.bij.nodes.link(model_child, imp_child)?;
    world.nodes.push(crate::driver::NodeIds {
        run,
        model: model_child.clone(),
        imp: imp_child.clone(),
    });
    Ok(())
}

/// The locked fail-fast state (segment attested, pins missing): the session in that state.
fn fails_fast(
    trial: &mut Harness<InProcess>,
    prepared: &Prepared,
    run: Option<usize>,
    old_len: usize,
    known_sessions: &[SessionId],
) -> Result<Option<SessionId>, String> {
    let missing_pins = |health: &SessionHealth| match health {
        SessionHealth::CorruptTail(c) | SessionHealth::CorruptHead(c) => {
            c.reason == CorruptionReason::MissingSnapshotPins
        }
        _ => false,
    };
    match run {
        Some(r) => {
            let session = trial.world.runs[r].impl_session.clone();
            let Ok(loaded) = trial.sys.load(&session) else {
                return Ok(None);
            };
            if !missing_pins(&loaded.health) || loaded.event_count() != old_len {
                return Ok(None);
            }
            // Every other run is untouched.
            check_truth(&trial.sys, &trial.world, Some(r), None)?;
            // Execution calls on the session fail fast, never with partial truth.
            let again = trial.call(prepared);
            match &again {
                Err(e) if e.code == ErrorCode::SessionCorrupt => {}
                other => {
                    return Err(format!(
                        "the session lost its pins, but the interrupted call again returned {other:?}, not SESSION_CORRUPT"
                    ));
                }
            }
            let root = trial
                .world
                .nodes
                .iter()
                .find(|n| n.run == r)
                .map(|n| n.imp.clone());
            if let Some(token) = root.and_then(|n| trial.world.state_tokens.get(&n).cloned()) {
                let rehydrate =
                    trial
                        .sys
                        .continue_workflow(&workrail_spec::tools::ContinueWorkflowInput {
                            state_token: Some(token),
                            ack_token: None,
                            context: None,
                            output: None,
                            preferences: vec![],
                            preset: None,
                        });
                if !matches!(&rehydrate, Err(e) if e.code == ErrorCode::SessionCorrupt) {
                    return Err(format!(
                        "a rehydrate on a session without its pins returned {rehydrate:?}, not SESSION_CORRUPT"
                    ));
                }
            }
            Ok(Some(session))
        }
        None => {
            // An interrupted start: the one new session is the fail-fast one, with no usable
            // prefix; everything else is untouched.
            let fresh: Vec<SessionId> = trial
                .sys
                .sessions()
                .into_iter()
                .filter(|s| !known_sessions.contains(s))
                .filter(|s| trial.sys.load(s).is_ok())
                .collect();
            let [session] = fresh.as_slice() else {
                return Ok(None);
            };
            let Ok(loaded) = trial.sys.load(session) else {
                return Ok(None);
            };
            if !missing_pins(&loaded.health) || loaded.event_count() > 0 {
                return Ok(None);
            }
            check_truth(&trial.sys, &trial.world, None, Some(session))?;
            Ok(Some(session.clone()))
        }
    }
}

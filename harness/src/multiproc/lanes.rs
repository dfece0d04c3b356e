//! Scenario: parallel lanes under `kill -9` (issue 32, decision D168).
//!
//! Each client runs a workflow with a three-lane parallel step (`mergeStrategy: workspace`,
//! lanes 1 and 3 touching one file): it acknowledges the first step, then drives the three lanes
//! in a random order, each lane from a randomly chosen server (as three subagents with their own
//! servers would), handing in each lane's block output at its last step; then it acknowledges
//! the parallel step, the synthesis and the last step. Beside the clients, the storm's killer
//! `kill -9`s a random server every 50–300 ms and starts a new one; a call cut off by a kill is
//! sent again with the same arguments (a replay when it had committed).
//!
//! The oracle, beside the storm's own checks (health of every session, no damaged object, no
//! lost event): a lane whose last acknowledgement was answered "complete" is never missing from
//! the fan-in (`lanes_lost`: the parallel step answered blocked, or its synthesis prompt does not
//! list all three lanes as completed), the parallel step always hands out exactly three lanes,
//! and a repeated landing never hands out other lanes (`lane_mismatches`).

use serde_json::{Value, json};

use super::{Config, Lab, Report, Rng, Slot, finish, killer, pause_after_failure, slots};

/// The workflow's file and id.
const FILE: &str = "lane-storm.json";
const WORKFLOW_ID: &str = "project.lane_storm";
const ROUTINE_FILE: &str = "lane-storm-routine.json";

const ROUTINE: &str = r#"{
  "id": "project.routine-storm-probe", "name": "Probe", "description": "Probe one area.",
  "steps": [{"id": "probe", "title": "Probe {area}", "prompt": "Probe the area you were given."}]
}"#;

const WORKFLOW: &str = r#"{
  "id": "project.lane_storm", "name": "Lane storm", "description": "Three lanes under kill -9.",
  "version": "1.0.0",
  "steps": [
    {"id": "prepare", "title": "Prepare", "prompt": "Prepare."},
    {"type": "parallel", "id": "fan-out", "title": "Probe in parallel", "mergeStrategy": "workspace",
     "parallelDelegations": [
       {"workflowId": "routine-storm-probe", "goal": "Probe the api", "args": {"area": "api"}},
       {"workflowId": "routine-storm-probe", "goal": "Probe the ui", "args": {"area": "ui"}},
       {"workflowId": "routine-storm-probe", "goal": "Probe the db", "args": {"area": "db"}}
     ],
     "synthesis": {"prompt": "Merge what the lanes found."}},
    {"id": "ship", "title": "Ship", "prompt": "Ship."}
  ]
}"#;

/// The file lanes 1 and 3 both change.
const SHARED: &str = "src/shared.rs";

/// Runs the scenario.
pub fn lane_storm(config: &Config) -> Result<Report, String> {
    storm(config, false)
}

/// The oracle is not blind: clients that leave one lane of each run undriven, yet acknowledge
/// the parallel step as if every lane were in, must see `lanes_lost` counted.
pub fn lane_storm_with_an_undriven_lane(config: &Config) -> Result<Report, String> {
    storm(config, true)
}

fn storm(config: &Config, skip_one: bool) -> Result<Report, String> {
    let n = config.half().max(2);
    let mut lab = Lab::new(config, "lane_storm", n)?;
    let workflows = lab.dir.path().join("workflows");
    for (file, json) in [(FILE, WORKFLOW), (ROUTINE_FILE, ROUTINE)] {
        std::fs::write(workflows.join(file), json)
            .map_err(|e| format!("cannot write the workflow {file}: {e}"))?;
    }
    let slots = slots(n, &lab)?;
    lab.start_driving(config.run_for);
    let mut rng = Rng::new(config.seed);
    std::thread::scope(|scope| {
        let (lab, slots) = (&lab, &slots);
        let mut killer_rng = rng.split();
        scope.spawn(move || killer(lab, slots, &mut killer_rng));
        for client in 0..slots.len() {
            let mut rng = rng.split();
            scope.spawn(move || {
                while lab.running() {
                    let ok = lane_run(lab, client, slots, &mut rng, skip_one);
                    pause_after_failure(ok);
                }
            });
        }
    });
    finish(&lab, &slots)
}

/// The structured content of an answered acknowledgement, recorded in the lab's ledger (so the
/// storm's own checks judge it too); None: no answer, already counted by the lab.
fn ack(lab: &Lab, client: usize, slot: &Slot, args: Value) -> Option<Value> {
    lab.send_ack(client, slot, &args)
        .map(|resp| resp.result["structuredContent"].clone())
}

fn ack_args(at: &Value, notes: &str, artifacts: Vec<Value>) -> Value {
    json!({
        "stateToken": at["stateToken"],
        "ackToken": at["ackToken"],
        "output": {"notesMarkdown": notes, "artifacts": artifacts},
    })
}

fn mismatch(lab: &Lab, session: &str, what: String) {
    let mut book = lab.book();
    book.report.lane_mismatches += 1;
    book.report.sample(format!("lane_storm {session}: {what}"));
}

fn lost(lab: &Lab, session: &str, what: String) {
    let mut book = lab.book();
    book.report.lanes_lost += 1;
    book.report.sample(format!("lane_storm {session}: {what}"));
}

/// One run of the workflow, start to end; false when a call got no answer.
fn lane_run(lab: &Lab, client: usize, slots: &[Slot], rng: &mut Rng, skip_one: bool) -> bool {
    let home = &slots[client];
    let Some(first) = lab
        .start(client, home, WORKFLOW_ID)
        .map(|resp| resp.result["structuredContent"].clone())
    else {
        return false;
    };
    let session = first["session"]["sessionId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let Some(fan) = ack(lab, client, home, ack_args(&first, "Prepared.", vec![])) else {
        return false;
    };
    if fan["pending"]["stepId"] != "fan-out" {
        mismatch(lab, &session, format!("after the first step: {fan}"));
        return false;
    }
    let lanes: Vec<Value> = fan["lanes"].as_array().cloned().unwrap_or_default();
    if lanes.len() != 3 {
        mismatch(lab, &session, format!("{} lanes handed out", lanes.len()));
        return false;
    }
    lab.book().report.lane_runs += 3;
    // Driving the lanes in a random order, each from a random server.
    let mut order: Vec<usize> = (0..3).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for &i in order.iter().skip(usize::from(skip_one)) {
        let Some(slot) = rng.pick(slots) else {
            return false;
        };
        if !drive_lane(lab, client, slot, &session, &lanes[i], i) {
            return false;
        }
    }
    // Sometimes the parallel step is asked for again (a rehydrate): the same lanes.
    if rng.below(4) == 0 {
        let Some(again) = lab
            .rehydrate(client, home, fan["stateToken"].as_str().unwrap_or_default())
            .map(|resp| resp.result["structuredContent"].clone())
        else {
            return false;
        };
        let ids = |v: &Value| -> Vec<Value> {
            v["lanes"]
                .as_array()
                .map(|l| l.iter().map(|x| x["laneId"].clone()).collect())
                .unwrap_or_default()
        };
        if ids(&again) != ids(&fan) {
            mismatch(lab, &session, "a rehydrate handed out other lanes".into());
        }
    }
    let Some(synthesis) = ack(
        lab,
        client,
        home,
        ack_args(&fan, "Every lane is in.", vec![]),
    ) else {
        return false;
    };
    if synthesis["kind"] == "blocked" {
        lost(
            lab,
            &session,
            format!(
                "the fan-in blocked after every lane completed: {}",
                synthesis["blockers"]
            ),
        );
        return true;
    }
    let prompt = synthesis["pending"]["prompt"].as_str().unwrap_or_default();
    let completed = prompt.matches("): completed.").count();
    if synthesis["pending"]["stepId"] != "fan-out__synthesis" || completed != 3 {
        lost(
            lab,
            &session,
            format!("the synthesis lists {completed} completed lanes: {prompt}"),
        );
        return true;
    }
    let Some(ship) = ack(lab, client, home, ack_args(&synthesis, "Merged.", vec![])) else {
        return false;
    };
    let Some(done) = ack(lab, client, home, ack_args(&ship, "Shipped.", vec![])) else {
        return false;
    };
    if done["isComplete"] != true {
        mismatch(
            lab,
            &session,
            format!("the last step did not complete the run: {done}"),
        );
    } else {
        lab.book().report.lane_runs_completed += 1;
    }
    true
}

/// Drives lane `i` to its end from `slot`; false when a call got no answer.
fn drive_lane(
    lab: &Lab,
    client: usize,
    slot: &Slot,
    session: &str,
    lane: &Value,
    i: usize,
) -> bool {
    let Some(probe) = ack(lab, client, slot, ack_args(lane, "Probed.", vec![])) else {
        return false;
    };
    if probe["pending"]["stepId"] != "lane-report" {
        mismatch(
            lab,
            session,
            format!("lane {} after its first step: {probe}", i + 1),
        );
        return true;
    }
    let files: Vec<&str> = if i == 1 {
        vec!["src/ui.rs"]
    } else {
        vec![SHARED]
    };
    let output = json!({
        "kind": "wr.block_output",
        "blockId": lane["laneId"],
        "blockType": "review",
        "status": "completed",
        "deliverables": {"blockType": "generic", "summary": "Probe notes."},
        "summary": format!("Lane {} probed its area.", i + 1),
        "filesModified": files,
        "filesCreated": [],
        "timestamp": "2026-11-28T10:00:00Z",
    });
    let Some(done) = ack(
        lab,
        client,
        slot,
        ack_args(&probe, "Reported.", vec![output]),
    ) else {
        return false;
    };
    if done["isComplete"] != true {
        mismatch(
            lab,
            session,
            format!("lane {} did not complete: {done}", i + 1),
        );
    }
    true
}

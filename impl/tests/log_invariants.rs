//! Invariants of the event log that production writes, checked over one rich session: a loop,
//! a blocked attempt, a replay, a checkpoint, a fork and rehydrates.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::protocol_support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use protocol_support::*;
use serde_json::{Value, json};
use workrail::store::fs::StoreFs;
use workrail::store::memfs::MemFs;
use workrail::store::{ArtifactStore, PinnedWorkflowStore, SnapshotStore};
use workrail_spec::event::{EventData, EventScope, OutputPayload, SessionEvent};
use workrail_spec::ids::{NodeId, RunId, SessionId};
use workrail_spec::tools::{CheckpointWorkflowInput, OutputInput};

struct Session {
    fs: MemFs,
    session: SessionId,
    /// The committed log after each call, in call order.
    logs: Vec<Vec<SessionEvent>>,
    /// How many calls carried an ackToken (each records exactly one attempt, replays none).
    distinct_acks: usize,
}

fn load(wr: &workrail::protocol::Workrail, session: &SessionId) -> Vec<SessionEvent> {
    wr.sessions()
        .load(session)
        .unwrap()
        .events()
        .all()
        .unwrap()
        .into_owned()
}

fn rich_session() -> Session {
    let fs = MemFs::new();
    let wr = open(&fs);
    let start = start(&wr, "project.demo");
    let session = start.session.session_id.clone();
    let mut logs = vec![load(&wr, &session)];
    let mut distinct_acks = 0;
    let mut step = |input, fresh_ack: bool, logs: &mut Vec<Vec<SessionEvent>>| {
        let out = wr.continue_workflow(input).unwrap();
        distinct_acks += usize::from(fresh_ack);
        logs.push(load(&wr, &session));
        out
    };
    let planned = step(ack(&start, "Planned.", vec![]), true, &mut logs);
    let built = step(ack(&planned, "Implemented.", vec![]), true, &mut logs);
    // A blocked attempt (no loop decision), then its fix with the fresh ack of the blocked response.
    let blocked = step(ack(&built, "Decided?", vec![]), true, &mut logs);
    assert!(!blocked.blockers.is_empty());
    // Rehydrate and replay write nothing.
    step(rehydrate(&blocked.state_token), false, &mut logs);
    step(ack(&built, "Decided?", vec![]), false, &mut logs);
    let decided = step(
        ack(&blocked, "Decided.", vec![loop_control("stop")]),
        true,
        &mut logs,
    );
    let checkpoint = wr
        .checkpoint_workflow(CheckpointWorkflowInput {
            state_token: decided.state_token.clone(),
            checkpoint_token: decided.checkpoint_token.clone().unwrap(),
            output: OutputInput {
                notes_markdown: Some("Explored outside the steps.".into()),
                artifacts: vec![],
            },
        })
        .unwrap();
    logs.push(load(&wr, &session));
    step(ack(&checkpoint, "Wrapped.", vec![]), true, &mut logs);
    // A rewind to the first step forks a new branch.
    let rewound = step(rehydrate(&start.state_token), false, &mut logs);
    step(ack(&rewound, "Planned again.", vec![]), true, &mut logs);
    Session {
        fs,
        session,
        logs,
        distinct_acks,
    }
}

fn data_json(event: &SessionEvent) -> Value {
    serde_json::to_value(event).unwrap()["data"].clone()
}

fn keys(value: &Value) -> BTreeSet<String> {
    value.as_object().unwrap().keys().cloned().collect()
}

/// lock: L-EVENT-SESSION-CREATED, L-EVENT-INDEX-ORDERING
#[test]
fn the_log_opens_with_an_empty_session_marker_and_indexes_are_dense() {
    let s = rich_session();
    let events = s.logs.last().unwrap();
    assert!(matches!(events[0].data(), EventData::SessionCreated(_)));
    assert_eq!(
        data_json(&events[0]),
        json!({}),
        "a marker carries no fields"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e.data(), EventData::SessionCreated(_)))
            .count(),
        1
    );
    for (i, event) in events.iter().enumerate() {
        assert_eq!(event.event_index().get(), i as u64, "dense, in log order");
    }
    // Events carry no wall-clock time at all, so nothing but the index can order them.
    for event in events {
        let value = serde_json::to_value(event).unwrap();
        let text = value.to_string();
        assert!(
            !text.contains("timestamp") && !text.contains("createdAt"),
            "{text}"
        );
    }
}

/// lock: L-OUTPUT-APPEND-ONLY, L-EVENT-ADVANCE-ACK-ONLY
#[test]
fn every_call_only_appends_and_each_ack_records_exactly_one_attempt() {
    let s = rich_session();
    for pair in s.logs.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        assert!(after.len() >= before.len());
        assert_eq!(
            &after[..before.len()],
            &before[..],
            "nothing is edited in place"
        );
    }
    let events = s.logs.last().unwrap();
    let attempts = events
        .iter()
        .filter(|e| matches!(e.data(), EventData::AdvanceRecorded(_)))
        .count();
    assert_eq!(
        attempts, s.distinct_acks,
        "one advance_recorded per ack attempt, none for rehydrates, replays or checkpoints"
    );
    // Every advance_recorded is node-scoped.
    for event in events {
        if let EventData::AdvanceRecorded(_) = event.data() {
            assert!(matches!(event.scope(), EventScope::Node(..)));
        }
    }
}

/// lock: L-EVENT-NODE-CREATED, L-EVENT-NODE-HASH-MATCH, L-EVENT-RUN-HASH-AUTHORITY, L-DAG-EDGE-SAME-RUN
#[test]
fn nodes_and_edges_stay_inside_their_run_and_its_pinned_workflow() {
    let s = rich_session();
    let events = s.logs.last().unwrap();
    let shared: Arc<dyn StoreFs> = Arc::new(s.fs.clone());
    let pinned = PinnedWorkflowStore::new(Arc::clone(&shared));
    let snapshots = SnapshotStore::new(shared);
    let mut run_hash = BTreeMap::new();
    let mut node_run: BTreeMap<NodeId, RunId> = BTreeMap::new();
    for event in events {
        match (event.data(), event.scope()) {
            (EventData::RunStarted(started), EventScope::Run(run)) => {
                // The hash, not the source ref, is the authority: it resolves to the pinned
                // compiled workflow.
                pinned.get(&started.workflow_hash).unwrap();
                run_hash.insert(run.clone(), started.workflow_hash.clone());
            }
            (EventData::NodeCreated(node), EventScope::Node(run, id)) => {
                assert_eq!(
                    keys(&data_json(event)),
                    ["nodeKind", "parentNodeId", "snapshotRef", "workflowHash"]
                        .map(String::from)
                        .into()
                );
                assert_eq!(node.workflow_hash, run_hash[run], "node hash = run pin");
                let snapshot = snapshots.get(&node.snapshot_ref).unwrap();
                assert_eq!(snapshot.workflow_hash, run_hash[run]);
                if let Some(parent) = &node.parent_node_id {
                    assert_eq!(&node_run[parent], run, "a parent is in the same run");
                }
                node_run.insert(id.clone(), run.clone());
            }
            (EventData::EdgeCreated(edge), EventScope::Run(run)) => {
                assert_eq!(&node_run[&edge.from_node_id], run);
                assert_eq!(&node_run[&edge.to_node_id], run);
            }
            _ => {}
        }
    }
    assert!(node_run.len() >= 6);
}

/// lock: L-OUTPUT-PAYLOAD, L-OUTPUT-ARTIFACT-REF
#[test]
fn outputs_are_typed_and_artifacts_are_referenced_by_their_digest() {
    let s = rich_session();
    let events = s.logs.last().unwrap();
    let artifacts = ArtifactStore::new(Arc::new(s.fs.clone()));
    let mut seen_artifact = false;
    for event in events {
        let EventData::NodeOutputAppended(output) = event.data() else {
            continue;
        };
        let data = data_json(event);
        let allowed: BTreeSet<String> =
            ["outputId", "supersedesOutputId", "outputChannel", "payload"]
                .map(String::from)
                .into();
        assert!(keys(&data).is_subset(&allowed), "{data}");
        match &output.payload {
            OutputPayload::Notes { .. } => {
                assert_eq!(data["payload"]["payloadKind"], "notes");
                assert_eq!(data["outputChannel"], "recap");
            }
            OutputPayload::ArtifactRef {
                sha256,
                byte_length,
                ..
            } => {
                seen_artifact = true;
                assert_eq!(data["payload"]["payloadKind"], "artifact_ref");
                let stored = artifacts.get(sha256).unwrap();
                let bytes = workrail_spec::jcs::to_canonical_bytes(&stored).unwrap();
                assert_eq!(&workrail_spec::jcs::sha256(&bytes), sha256);
                assert_eq!(bytes.len() as u64, *byte_length);
                // The content lives in the artifact store, not in the event.
                assert!(!data.to_string().contains("\"decision\""), "{data}");
            }
        }
    }
    assert!(seen_artifact, "the loop decision was stored as an artifact");
    let _ = s.session;
}

/// The files of `session`'s directory, relative to it.
fn session_files(s: &Session) -> Vec<String> {
    let dir = std::path::PathBuf::from("sessions").join(s.session.as_str());
    s.fs.files()
        .into_iter()
        .filter_map(|f| {
            f.strip_prefix(&dir)
                .ok()
                .map(|r| r.to_string_lossy().into_owned())
        })
        .collect()
}

fn session_text(s: &Session, relative: &str) -> String {
    let path = std::path::PathBuf::from("sessions")
        .join(s.session.as_str())
        .join(relative);
    String::from_utf8(s.fs.read(&path).unwrap().unwrap()).unwrap()
}

/// Truth is two streams: domain events in segment files named by their first and last
/// `EventIndex` (never a timestamp, never one growing file), each holding exactly that range in
/// order, and `manifest.jsonl`, which attests each segment and pins snapshots without taking a
/// domain `EventIndex` of its own.
///
/// lock: L-STORE-TWO-STREAMS, L-STORE-SEGMENT-FILES, L-STORE-SEGMENT-COVERAGE, L-MANIFEST-NO-EVENT-INDEX
#[test]
fn events_live_in_index_named_segments_and_the_manifest_only_attests() {
    use workrail_spec::manifest::ManifestRecord;
    let s = rich_session();
    let events = s.logs.last().unwrap();
    let files = session_files(&s);
    let mut segments: Vec<(u64, u64, String)> = Vec::new();
    for file in &files {
        match file.as_str() {
            "manifest.jsonl" | ".lock" => {}
            other => {
                let name = other
                    .strip_prefix("events/")
                    .and_then(|n| n.strip_suffix(".jsonl"))
                    .unwrap_or_else(|| panic!("unexpected file {other} in {files:?}"));
                let (first, last) = name.split_once('-').unwrap();
                assert!(
                    first.len() == 8 && last.len() == 8,
                    "zero-padded indexes: {other}"
                );
                segments.push((first.parse().unwrap(), last.parse().unwrap(), other.into()));
            }
        }
    }
    segments.sort();
    assert!(segments.len() > 5, "one segment per plan: {segments:?}");
    // Each segment holds exactly first..=last, in order; together they are the log, dense.
    let mut next = 0u64;
    let mut stored = Vec::new();
    for (first, last, file) in &segments {
        assert_eq!(*first, next, "contiguous segments: {segments:?}");
        let indexes: Vec<u64> = session_text(&s, file)
            .lines()
            .map(|line| {
                let event: SessionEvent = serde_json::from_str(line).unwrap();
                stored.push(event.clone());
                event.event_index().get()
            })
            .collect();
        assert_eq!(indexes, (*first..=*last).collect::<Vec<_>>(), "{file}");
        next = last + 1;
    }
    assert_eq!(&stored, events, "the segments are the log");
    // The manifest: segment attestations (one per file, same bounds) and pins, densely numbered
    // in their own index; the domain indexes stay dense whatever the manifest holds.
    let manifest: Vec<ManifestRecord> = session_text(&s, "manifest.jsonl")
        .lines()
        .map(|l| ManifestRecord::from_json_str(l).unwrap())
        .collect();
    let mut attested = Vec::new();
    let mut pins = 0;
    for (i, record) in manifest.iter().enumerate() {
        assert_eq!(record.manifest_index().get(), i as u64);
        match record {
            ManifestRecord::SegmentClosed(c) => attested.push((
                c.first_event_index.get(),
                c.last_event_index.get(),
                c.segment_rel_path.clone(),
            )),
            ManifestRecord::SnapshotPinned(p) => {
                pins += 1;
                let at = &events[p.event_index.get() as usize];
                assert!(
                    matches!(at.data(), EventData::NodeCreated(n) if n.snapshot_ref == p.snapshot_ref),
                    "a pin references the domain stream by eventIndex: {p:?}"
                );
            }
        }
    }
    assert_eq!(attested, segments);
    assert!(pins > 0 && manifest.len() > segments.len());
    assert_eq!(events.len() as u64, next);
}

/// Pins are append-only and may repeat: a second pin of a snapshot (another writer's, or one
/// written twice) leaves the session healthy, counts once, and execution goes on.
///
/// lock: L-MANIFEST-PIN-DUPLICATES
#[test]
fn a_duplicate_pin_is_accepted_and_counted_once() {
    use workrail_spec::ids::ManifestIndex;
    use workrail_spec::manifest::ManifestRecord;
    let s = rich_session();
    let manifest_path = std::path::PathBuf::from("sessions")
        .join(s.session.as_str())
        .join("manifest.jsonl");
    let text = session_text(&s, "manifest.jsonl");
    let records: Vec<ManifestRecord> = text
        .lines()
        .map(|l| ManifestRecord::from_json_str(l).unwrap())
        .collect();
    let ManifestRecord::SnapshotPinned(mut pin) = records
        .iter()
        .find(|r| matches!(r, ManifestRecord::SnapshotPinned(_)))
        .unwrap()
        .clone()
    else {
        unreachable!()
    };
    pin.manifest_index = ManifestIndex::new(records.len() as u64).unwrap();
    let duplicated = pin.snapshot_ref.clone();
    let mut line =
        workrail_spec::jcs::to_canonical_string(&ManifestRecord::SnapshotPinned(pin)).unwrap();
    line.push('\n');
    s.fs.append(&manifest_path, line.as_bytes()).unwrap();

    // A fresh process loads it healthy, with the pin counted once.
    let wr = open(&s.fs);
    let loaded = wr.sessions().load(&s.session).unwrap();
    assert!(loaded.health.is_healthy(), "{:?}", loaded.health);
    assert_eq!(loaded.manifest.len(), records.len() + 1);
    assert!(loaded.is_pinned(&duplicated).unwrap());
    let resumed = wr
        .resume_session(workrail_spec::tools::ResumeSessionInput { query: None })
        .unwrap();
    let token = resumed.candidates[0].state_token.clone();
    let back = wr.continue_workflow(rehydrate(&token)).unwrap();
    let next = wr.continue_workflow(ack(&back, "After the duplicate.", vec![]));
    assert!(next.is_ok(), "{next:?}");
    let after = wr.sessions().load(&s.session).unwrap();
    assert!(after.health.is_healthy());
    let pins_of_duplicated = after
        .manifest_records()
        .unwrap()
        .into_iter()
        .filter(|r| matches!(r, ManifestRecord::SnapshotPinned(p) if p.snapshot_ref == duplicated))
        .count();
    assert_eq!(pins_of_duplicated, 2, "the commit added no third pin");
}

/// Every key and value of a JSON tree, depth first.
fn walk<'v>(value: &'v Value, keys: &mut Vec<&'v str>, leaves: &mut Vec<&'v Value>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                keys.push(k);
                walk(v, keys, leaves);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| walk(v, keys, leaves)),
        leaf => leaves.push(leaf),
    }
}

/// Each node's snapshot is the interpreter's state and its link to the pinned workflow, nothing
/// else: no recap, notes, outputs, context or preferences (those are projections of the log),
/// no booleans standing for states (every variant is a `kind`), every step and loop it names is
/// one of the pinned workflow's, and it stays small whatever the session holds.
///
/// lock: L-SNAPSHOT-PAYLOAD-SCOPE, L-SNAPSHOT-NO-BOOL-STATE, L-SNAPSHOT-MINIMAL
#[test]
fn snapshots_hold_only_the_interpreter_state_and_its_workflow_link() {
    let s = rich_session();
    let events = s.logs.last().unwrap();
    let shared: Arc<dyn StoreFs> = Arc::new(s.fs.clone());
    let pinned = PinnedWorkflowStore::new(shared);
    let notes: Vec<&str> = events
        .iter()
        .filter_map(|e| match e.data() {
            EventData::NodeOutputAppended(o) => match &o.payload {
                OutputPayload::Notes { notes_markdown } => Some(notes_markdown.as_str()),
                OutputPayload::ArtifactRef { .. } => None,
            },
            _ => None,
        })
        .collect();
    assert!(notes.len() > 3);
    let mut checked = 0;
    for event in events {
        let EventData::NodeCreated(node) = event.data() else {
            continue;
        };
        let raw =
            s.fs.read(&workrail::store::layout::snapshot_path(&node.snapshot_ref))
                .unwrap()
                .unwrap();
        let text = String::from_utf8(raw.clone()).unwrap();
        let snapshot: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            keys(&snapshot),
            ["enginePayload", "v", "workflowHash"]
                .map(String::from)
                .into(),
            "{text}"
        );
        assert_eq!(
            keys(&snapshot["enginePayload"]),
            ["engineState", "v"].map(String::from).into(),
            "{text}"
        );
        assert_eq!(snapshot["workflowHash"], node.workflow_hash.to_string());
        let (mut names, mut leaves) = (Vec::new(), Vec::new());
        walk(&snapshot, &mut names, &mut leaves);
        for forbidden in [
            "recap",
            "notes",
            "notesMarkdown",
            "outputs",
            "context",
            "preferences",
        ] {
            assert!(!names.contains(&forbidden), "{forbidden} in {text}");
        }
        for text_of_notes in &notes {
            assert!(!text.contains(text_of_notes), "notes in {text}");
        }
        assert!(
            !leaves.iter().any(|v| v.is_boolean()),
            "no booleans as state: {text}"
        );
        assert!(snapshot["enginePayload"]["engineState"]["kind"].is_string());
        // Verifiable against the pinned workflow: every step and loop it names is there.
        let compiled = pinned.get(&node.workflow_hash).unwrap();
        let compiled_text = serde_json::to_string(&compiled).unwrap();
        let state = &snapshot["enginePayload"]["engineState"];
        if let Some(step) = state["pending"]["step"]["stepId"].as_str() {
            assert!(
                compiled.step(&step.parse().unwrap()).is_some(),
                "{step} is not a step of the pinned workflow"
            );
        }
        for frame in state["loopStack"].as_array().into_iter().flatten() {
            let loop_id = frame["loopId"].as_str().unwrap();
            assert!(compiled_text.contains(&format!("\"loopId\":\"{loop_id}\"")));
        }
        for key in state["completed"]["values"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let step = key.as_str().unwrap().rsplit("::").next().unwrap();
            assert!(compiled.step(&step.parse().unwrap()).is_some(), "{key}");
        }
        assert!(raw.len() < 512, "{} bytes: {text}", raw.len());
        checked += 1;
    }
    assert!(checked > 5);
}

/// Re-canonicalizes `bytes` (parsed, then written by RFC 8785) and returns its sha256.
fn jcs_digest_of(bytes: &[u8]) -> (Vec<u8>, String) {
    let value: Value = serde_json::from_slice(bytes).unwrap();
    let canonical = workrail_spec::jcs::to_canonical_bytes(&value).unwrap();
    let digest = workrail_spec::jcs::sha256(&canonical).to_string();
    (canonical, digest)
}

/// Every content address is `sha256` over the RFC 8785 (JCS) bytes: the pinned workflow's
/// `workflowHash`, each snapshot's `snapshotRef`, each artifact's `sha256`, and each integrity
/// entry of the exported bundle (computed here from the bundle's own JSON text).
///
/// lock: L-JCS-SCOPE
#[test]
fn every_content_address_is_the_sha256_of_jcs_bytes() {
    use workrail::store::layout;
    let s = rich_session();
    let events = s.logs.last().unwrap();
    let stored = |path: std::path::PathBuf| s.fs.read(&path).unwrap().unwrap();
    let mut checked = 0;
    for event in events {
        match event.data() {
            EventData::RunStarted(started) => {
                let bytes = stored(layout::pinned_workflow_path(&started.workflow_hash));
                let (canonical, digest) = jcs_digest_of(&bytes);
                assert_eq!(canonical, bytes, "stored as its JCS bytes");
                assert_eq!(digest, started.workflow_hash.to_string());
                checked += 1;
            }
            EventData::NodeCreated(node) => {
                let bytes = stored(layout::snapshot_path(&node.snapshot_ref));
                let (canonical, digest) = jcs_digest_of(&bytes);
                assert_eq!(canonical, bytes);
                assert_eq!(digest, node.snapshot_ref.to_string());
                checked += 1;
            }
            EventData::NodeOutputAppended(o) => {
                if let OutputPayload::ArtifactRef {
                    sha256,
                    byte_length,
                    ..
                } = &o.payload
                {
                    let bytes = stored(layout::artifact_path(sha256));
                    let (canonical, digest) = jcs_digest_of(&bytes);
                    assert_eq!(canonical, bytes);
                    assert_eq!(digest, sha256.to_string());
                    assert_eq!(*byte_length, bytes.len() as u64);
                    checked += 1;
                }
            }
            _ => {}
        }
    }
    assert!(checked > 5);
    // The bundle's integrity entries, recomputed from its text.
    let wr = open(&s.fs);
    let exported = wr
        .export_session(s.session.as_str(), &workrail::bundle::NoProgress)
        .unwrap();
    let bundle: Value = serde_json::from_str(&exported.text).unwrap();
    let entries = bundle["integrity"]["entries"].as_array().unwrap();
    assert!(entries.len() > 3);
    for entry in entries {
        // `session/events`, `session/snapshots/<ref>`, `artifacts/<sha256>`: a path into the
        // bundle (no key holds a `/`).
        let path = entry["path"].as_str().unwrap();
        let part = path.split('/').fold(&bundle, |at, key| &at[key]);
        assert!(!part.is_null(), "{path} names a part of the bundle");
        let canonical = workrail_spec::jcs::to_canonical_bytes(part).unwrap();
        assert_eq!(
            entry["sha256"],
            workrail_spec::jcs::sha256(&canonical).to_string(),
            "{path}"
        );
        assert_eq!(entry["bytes"], canonical.len() as u64, "{path}");
    }
}

/// Tokens are signed references, never stored: no token, nor any token prefix, appears in any
/// file of the data directory after starting, acknowledging, checkpointing and rehydrating,
/// and a process with nothing but the data directory verifies them (no token table).
///
/// lock: L-TOKEN-SIGNED-REFS
#[test]
fn tokens_are_never_stored_and_verify_from_durable_truth_alone() {
    let fs = MemFs::new();
    let wr = open(&fs);
    let started = start(&wr, "project.demo");
    let planned = wr
        .continue_workflow(ack(&started, "Planned.", vec![]))
        .unwrap();
    let checkpointed = wr
        .checkpoint_workflow(CheckpointWorkflowInput {
            state_token: planned.state_token.clone(),
            checkpoint_token: planned.checkpoint_token.clone().unwrap(),
            output: OutputInput {
                notes_markdown: Some("A checkpoint.".into()),
                artifacts: vec![],
            },
        })
        .unwrap();
    let back = wr
        .continue_workflow(rehydrate(&checkpointed.state_token))
        .unwrap();
    let mut tokens = Vec::new();
    for out in [&started, &planned, &checkpointed, &back] {
        tokens.push(out.state_token.clone());
        tokens.extend(out.ack_token.clone());
        tokens.extend(out.checkpoint_token.clone());
    }
    let prefixes: BTreeSet<String> = tokens
        .iter()
        .map(|t| t.split('.').take(2).collect::<Vec<_>>().join(".") + ".")
        .collect();
    assert!(prefixes.len() >= 3, "{prefixes:?}");
    for (path, bytes) in fs.snapshot() {
        let text = String::from_utf8_lossy(&bytes);
        for needle in tokens.iter().chain(prefixes.iter()) {
            assert!(
                !text.contains(needle.as_str()),
                "{} holds a token ({needle})",
                path.display()
            );
        }
    }
    // A fresh process holding only the data directory accepts them.
    let fresh = open(&fs);
    let again = fresh
        .continue_workflow(rehydrate(&back.state_token))
        .unwrap();
    assert_eq!(pending(&again), pending(&back));
}

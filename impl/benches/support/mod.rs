//! What the benches that drive advances share: the loop workflow they run and the notes each
//! acknowledgement carries.

#![allow(dead_code)]

/// A long loop for latency measurements: `act`, `review`, then `decide`, whose output is a
/// `wr.loop_control` artifact (`continue` keeps the loop going, up to 1,000 iterations).
pub const WORKFLOW: &str = r#"{
  "id": "project.bench",
  "name": "Bench",
  "description": "A long loop for latency measurements.",
  "conditions": [{"id": "again", "kind": "loop_control", "continueWhen": "continue"}],
  "steps": [
    {"type": "loop", "loopId": "work", "while": {"kind": "condition_ref", "conditionId": "again"}, "maxIterations": 1000,
     "body": [
       {"id": "act", "title": "Act", "prompt": "Do one unit of work."},
       {"id": "review", "title": "Review", "prompt": "Review the unit of work."},
       {"id": "decide", "title": "Decide", "prompt": "Decide whether to continue.", "output": {"contractRef": "wr.contracts.loop_control"}}
     ]}
  ]
}"#;

/// Each acknowledgement's notes after "Unit N done.": about 400 bytes, an ordinary agent's
/// notes. Ten of them fill the rehydrate recap's 4 KiB budget, so every growth checkpoint
/// answers a rehydrate of the same size and the rows differ by session length alone.
pub const NOTES_BODY: &str = "Read the module and its tests, changed the parser to keep the byte offset of each token, \
added a regression test for the empty input, and ran the suite: all green. Kept the public API \
as it was; the one behaviour change is that errors now name the line and column. Left the \
formatter alone, since the issue does not ask for it. Next: the review step checks the error \
wording against the existing messages and the docs page that lists them.";

//! What the tests of the persisted `resume_session` index share, on either store: sessions of
//! the demo workflow, queries, and the index bytes with their entries edited and re-sealed.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use workrail::protocol::Workrail;
use workrail_spec::ids::SessionId;
use workrail_spec::tools::{
    ExecutionOutput, ResumeQueryInput, ResumeSessionInput, ResumeSessionOutput,
};

use crate::protocol_support::{ack, start};

/// Starts the demo workflow and acknowledges one step per note.
pub fn session(wr: &Workrail, notes: &[&str]) -> ExecutionOutput {
    let mut out = start(wr, "project.demo");
    for note in notes {
        out = wr.continue_workflow(ack(&out, note, vec![])).unwrap();
    }
    out
}

pub fn id(out: &ExecutionOutput) -> SessionId {
    out.session.session_id.clone()
}

/// `resume_session`'s input for a query written as JSON (`text`, `gitHeadSha`, `gitBranch`).
pub fn input(query: &Value) -> ResumeSessionInput {
    let field = |k: &str| query.get(k).and_then(Value::as_str).map(str::to_owned);
    ResumeSessionInput {
        query: Some(ResumeQueryInput {
            text: field("text"),
            git_head_sha: field("gitHeadSha"),
            git_branch: field("gitBranch"),
        }),
    }
}

pub fn resume(wr: &Workrail, query: &Value) -> ResumeSessionOutput {
    wr.resume_session(input(query)).unwrap()
}

/// The index bytes with their lines edited by `edit` (as `{"workflows": [...], "sessions":
/// [...]}`) and the header fixed up to match, so only the entries' content is wrong.
pub fn re_sealed(bytes: &[u8], edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    let text = std::str::from_utf8(bytes).unwrap();
    let mut lines = text.lines().skip(1);
    let workflows: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let sessions: Vec<Value> = lines.map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut index = json!({"workflows": workflows, "sessions": sessions});
    edit(&mut index);
    let mut body = serde_json::to_vec(&index["workflows"]).unwrap();
    body.push(b'\n');
    for session in index["sessions"].as_array().unwrap() {
        body.extend(serde_json::to_vec(session).unwrap());
        body.push(b'\n');
    }
    let header = json!({
        "v": 1,
        "sessions": index["sessions"].as_array().unwrap().len(),
        "sha256": workrail_spec::jcs::sha256(&body).hex(),
    });
    let mut out = serde_json::to_vec(&header).unwrap();
    out.push(b'\n');
    out.extend_from_slice(&body);
    out
}

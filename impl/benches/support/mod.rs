//! What the benches that drive advances share: the loop workflows they run (in the v2 spelling
//! and in the 3.x spelling of the workflow language) and the notes each acknowledgement carries.

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

/// Nested loops for the loop-heavy growth row: an outer loop of up to 1,000 iterations, each
/// running an inner loop of 3 `act` steps, then `decide` (a `wr.loop_control` for the outer
/// loop). Every iteration ends loops and starts new ones, which a single loop never does.
pub const NESTED_WORKFLOW: &str = r#"{
  "id": "project.nested",
  "name": "Nested",
  "description": "Nested loops for latency measurements.",
  "conditions": [{"id": "again", "kind": "loop_control", "continueWhen": "continue"}, {"id": "yes", "kind": "always_true"}],
  "steps": [
    {"type": "loop", "loopId": "outer", "while": {"kind": "condition_ref", "conditionId": "again"}, "maxIterations": 1000,
     "body": [
       {"type": "loop", "loopId": "inner", "while": {"kind": "condition_ref", "conditionId": "yes"}, "maxIterations": 3,
        "body": [{"id": "act", "title": "Act", "prompt": "Do one unit of work."}]},
       {"id": "decide", "title": "Decide", "prompt": "Decide whether to continue.", "output": {"contractRef": "wr.contracts.loop_control"}}
     ]}
  ]
}"#;

/// A long loop like [`WORKFLOW`]'s in the WorkRail 3.x spelling of the workflow language, for the
/// workflow-language row: a legacy id with a `version`, `metaGuidance`, and a `forEach` loop over
/// the context array `units` given at `start_workflow` (`itemVar`, `indexVar`). Its body: `act`
/// (markers for the item, the index and a context key; a fragment whose condition reads the
/// context; two `validationCriteria` rules that every acknowledgement of the bench satisfies),
/// `review` (its `runCondition` reads the item and the context: code units only) and `record`
/// (its `runCondition` reads the index, and holds). A unit is two or three advances.
pub const DIALECT_WORKFLOW: &str = r#"{
  "id": "bench-dialect",
  "name": "Bench in the workflow language",
  "description": "A forEach loop over the units given at start, for latency measurements.",
  "version": "1.0.0",
  "metaGuidance": ["Keep each unit's change small enough to review in one sitting."],
  "steps": [
    {"id": "units", "type": "loop", "title": "Every unit",
     "loop": {"type": "forEach", "items": "units", "itemVar": "unit", "indexVar": "position", "maxIterations": 1000},
     "body": [
       {"id": "act", "title": "Work on {{unit}}", "prompt": "Do unit {{position}} of {{project}}: {{unit}}.",
        "promptFragments": [{"id": "strict", "when": {"var": "strict", "equals": true}, "text": "Hold {{unit}} to the {{project}} style guide."}],
        "validationCriteria": [
          {"type": "contains", "value": "done", "message": "Say whether the unit is done."},
          {"type": "regex", "pattern": "^Unit \\d+ done\\.", "message": "Start the notes with 'Unit N done.'"}
        ]},
       {"id": "review", "title": "Review {{unit}}", "prompt": "Review the code change of {{unit}}.",
        "runCondition": {"and": [{"var": "unit", "contains": "code"}, {"var": "review", "not_equals": "off"}]}},
       {"id": "record", "title": "Record {{unit}}", "prompt": "Record unit {{position}} ({{unit}}) in the log.",
        "runCondition": {"var": "position", "gte": 0}}
     ]}
  ]
}"#;

/// A `workrail mcp` process driven over its stdio with JSON-RPC, one call at a time.
pub struct StdioServer {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stdout: std::io::BufReader<std::process::ChildStdout>,
    next_id: u64,
}

impl StdioServer {
    /// Starts `workrail mcp` on `data` with the workflows of `workflows`, and initializes it.
    pub fn start(
        data: &std::path::Path,
        workflows: &std::path::Path,
        home: &std::path::Path,
    ) -> Self {
        use std::process::{Command, Stdio};
        let mut child = Command::new(env!("CARGO_BIN_EXE_workrail"))
            .arg("mcp")
            .env("WORKRAIL_DATA_DIR", data)
            .env("WORKRAIL_WORKFLOW_DIRS", workflows)
            .env("HOME", home)
            .current_dir(home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut server = Self {
            child,
            stdin,
            stdout,
            next_id: 0,
        };
        server.call(
            "initialize",
            serde_json::json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}),
        );
        server.call("notifications/initialized", serde_json::Value::Null);
        server
    }

    /// Sends one request and returns its response (a notification gets none: `Null`).
    pub fn call(&mut self, method: &str, params: serde_json::Value) -> serde_json::Value {
        use std::io::{BufRead, Write};
        let stdin = self.stdin.as_mut().unwrap();
        if method.starts_with("notifications/") {
            let line = serde_json::json!({"jsonrpc": "2.0", "method": method}).to_string();
            writeln!(stdin, "{line}").unwrap();
            stdin.flush().unwrap();
            return serde_json::Value::Null;
        }
        self.next_id += 1;
        let id = self.next_id;
        let line =
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
                .to_string();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        loop {
            let mut buf = String::new();
            assert!(
                self.stdout.read_line(&mut buf).unwrap() > 0,
                "server closed stdout"
            );
            let msg: serde_json::Value = serde_json::from_str(&buf).unwrap();
            if msg["id"] == serde_json::json!(id) {
                return msg;
            }
        }
    }

    /// The server's resident memory, in bytes (Linux `/proc`; 0 elsewhere).
    pub fn rss_bytes(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|status| {
                let line = status.lines().find(|l| l.starts_with("VmRSS:"))?.to_owned();
                line.split_whitespace().nth(1)?.parse::<u64>().ok()
            })
            .map_or(0, |kib| kib * 1024)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes stdin (the server exits on EOF) and waits for a clean exit.
    pub fn stop(mut self) {
        drop(self.stdin.take());
        assert!(self.child.wait().unwrap().success());
    }
}

/// The user CPU time process `pid` has used so far, in seconds (Linux `/proc`, in clock ticks of
/// 10 ms; 0 elsewhere): its own computation, without the kernel's share (fsyncs, renames) and
/// without waiting for a busy machine's cores.
pub fn user_cpu_seconds(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // The fields after the command name (which may hold spaces) in parentheses: state
            // is the first, utime the 12th.
            let rest = &stat[stat.rfind(')')? + 1..];
            let ticks = rest.split_whitespace().nth(11)?.parse::<u64>().ok()?;
            // USER_HZ, the unit of these fields, is 100 on x86_64 and aarch64.
            Some(ticks as f64 / 100.0)
        })
        .unwrap_or(0.0)
}

/// The CPU time process `pid` has used so far (all its threads, ended ones included), to the
/// nanosecond: its process CPU-time clock (`clock_getcpuclockid`), `None` where the system
/// does not give it. A call's CPU time leaves out the time its process waits for a core, the
/// noise of a machine shared with the bench and the other servers.
pub fn cpu_time(pid: u32) -> Option<std::time::Duration> {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).ok()?);
    let now = nix::time::clock_getcpuclockid(pid).ok()?.now().ok()?;
    Some(std::time::Duration::from(now))
}

pub mod instructions;

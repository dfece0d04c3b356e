//! Instructions counted per call as a session of nested loops grows: the loop-heavy row's
//! verdict that does not depend on the machine.
//!
//! A sub-millisecond call's time on a shared virtual machine moves by a third between runs of
//! the same code, whatever control it is measured beside (caches, reclaimed pages, other
//! tenants). The number of instructions a call executes does not: it is what the call computes.
//! So the bench runs itself again under Valgrind's callgrind, once per call and session length,
//! in a mode ([`CHILD_ENV`]) that builds a nested-loop session in-process on a real directory,
//! makes the call twice uncounted (filling the caches a repeated call finds filled), then
//! [`COUNTED_ROUNDS`] times inside [`counted_calls`], the only function callgrind counts.
//!
//! Where Valgrind is not installed the count is skipped with a line saying so.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use workrail::entropy::SeededEntropy;
use workrail::protocol::Workrail;
use workrail::store::fs::{OsFs, StoreFs};
use workrail_spec::tools::{ExecutionOutput, ResumeQueryInput, ResumeSessionInput};

#[path = "../../tests/nested_support/mod.rs"]
mod nested_support;
use nested_support::{advance, catalog, rehydrate, start_nested};

/// Set in the child: `<advances>:<call>`.
pub const CHILD_ENV: &str = "WORKRAIL_BENCH_COUNT_CALL";
/// Counted calls per child: the count printed is their mean.
const COUNTED_ROUNDS: usize = 10;
/// The two session lengths compared, as the timed checkpoints compare them.
const LENGTHS: [usize; 2] = [100, 2000];
/// The advance whose node is rewound to and whose acknowledgement is resent (as in the timed
/// row: early enough that the rewind's recap is cut at its budget at both lengths).
const EARLY_ADVANCE: usize = 10;
/// The calls counted.
const CALLS: [Call; 5] = [
    Call::Advance,
    Call::Rehydrate,
    Call::Rewind,
    Call::Resend,
    Call::Resume,
];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Call {
    Advance,
    Rehydrate,
    Rewind,
    Resend,
    Resume,
}

impl Call {
    fn name(self) -> &'static str {
        match self {
            Self::Advance => "advance",
            Self::Rehydrate => "rehydrate",
            Self::Rewind => "rewind",
            Self::Resend => "resend",
            Self::Resume => "resume_session",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        CALLS.into_iter().find(|c| c.name() == name)
    }
}

/// The session the calls are made on, and the states they start from.
struct Session {
    wr: Workrail,
    tip: ExecutionOutput,
    /// The state the early advance acknowledged, and the state it answered.
    early: (ExecutionOutput, ExecutionOutput),
    advances: usize,
}

impl Session {
    fn build(dir: &Path, advances: usize) -> Self {
        let fs: Arc<dyn StoreFs> = Arc::new(OsFs::new(dir));
        let wr = Workrail::with_parts(fs, catalog(), Arc::new(SeededEntropy::new(7))).unwrap();
        let mut out = start_nested(&wr);
        let mut early = None;
        for i in 0..advances {
            let next = advance(&wr, out.clone(), i);
            if i + 1 == EARLY_ADVANCE {
                early = Some((out.clone(), next.clone()));
            }
            out = next;
        }
        Self {
            wr,
            tip: out,
            early: early.unwrap(),
            advances,
        }
    }

    fn call(&mut self, call: Call) {
        let wr = &self.wr;
        match call {
            Call::Advance => {
                self.tip = advance(wr, self.tip.clone(), self.advances);
                self.advances += 1;
            }
            Call::Rehydrate => drop(rehydrate(wr, &self.tip)),
            Call::Rewind => drop(rehydrate(wr, &self.early.1)),
            Call::Resend => drop(advance(wr, self.early.0.clone(), EARLY_ADVANCE - 1)),
            Call::Resume => {
                let query = ResumeSessionInput {
                    query: Some(ResumeQueryInput {
                        text: Some("unit done".into()),
                        ..Default::default()
                    }),
                };
                drop(wr.resume_session(query).unwrap());
            }
        }
    }
}

/// The calls callgrind counts (`--toggle-collect`): nothing else runs inside.
#[inline(never)]
fn counted_calls(session: &mut Session, call: Call) {
    for _ in 0..COUNTED_ROUNDS {
        session.call(call);
    }
}

/// In the child ([`CHILD_ENV`] set): builds the session, makes the counted calls and returns
/// `true`; otherwise `false`.
pub fn run_child() -> bool {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return false;
    };
    let (advances, call) = spec
        .split_once(':')
        .and_then(|(n, c)| Some((n.parse().ok()?, Call::parse(c)?)))
        .unwrap_or_else(|| panic!("{CHILD_ENV}={spec}: expected <advances>:<call>"));
    let dir = tempfile::tempdir().unwrap();
    let mut session = Session::build(dir.path(), advances);
    session.call(call);
    session.call(call);
    counted_calls(&mut session, call);
    true
}

/// Instructions per call of `call` at `advances`, counted by callgrind in a child; `None` when
/// Valgrind cannot run.
fn count(advances: usize, call: Call) -> Option<f64> {
    let out = tempfile::NamedTempFile::new().unwrap();
    let status = Command::new("valgrind")
        .args([
            "--tool=callgrind",
            "--collect-atstart=no",
            "--toggle-collect=*counted_calls*",
        ])
        .arg(format!("--callgrind-out-file={}", out.path().display()))
        .arg(std::env::current_exe().unwrap())
        .env(CHILD_ENV, format!("{advances}:{}", call.name()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?;
    assert!(
        status.success(),
        "the counted child {advances}:{} failed",
        call.name()
    );
    let text = std::fs::read_to_string(out.path()).unwrap();
    let total: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("summary: "))
        .and_then(|n| n.trim().parse().ok())
        .expect("callgrind wrote no summary");
    Some(total as f64 / COUNTED_ROUNDS as f64)
}

/// Counts each call's instructions at 100 and 2,000 advances and prints them with the growth
/// verdict (`target` at most); `false` when Valgrind is not there to count.
pub fn report(target: f64, verdict: fn(bool) -> &'static str) -> bool {
    if Command::new("valgrind").arg("--version").output().is_err() {
        println!(
            "loop-heavy instructions per call: skipped, Valgrind is not installed (apt-get install valgrind)"
        );
        return false;
    }
    println!(
        "loop-heavy instructions per call (callgrind, in-process, mean of {COUNTED_ROUNDS}), {} -> {} advances:",
        LENGTHS[0], LENGTHS[1]
    );
    println!("| call | at {} | at {} | growth |", LENGTHS[0], LENGTHS[1]);
    println!("|---|---|---|---|");
    for call in CALLS {
        let (Some(short), Some(long)) = (count(LENGTHS[0], call), count(LENGTHS[1], call)) else {
            println!("| {} | Valgrind could not run | | |", call.name());
            continue;
        };
        let growth = long / short;
        println!(
            "| {} | {short:.0} | {long:.0} | {growth:.2}x{} |",
            call.name(),
            verdict(growth <= target)
        );
    }
    true
}

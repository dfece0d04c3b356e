//! An exhaustive check of the file store's append protocol (locks §1 "Append transaction
//! protocol", decisions D49, D50): a filesystem whose directory entries and file contents are
//! volatile until fsynced, two writers appending to one session under its exclusive lock, one
//! reader, and a machine crash at any step that drops whatever is volatile and releases every
//! lock. A breadth-first search visits every reachable state, so a violation comes with a
//! shortest trace. Pure: no I/O, no clock.

use std::collections::{BTreeMap, HashMap, VecDeque};

/// A name in the session directory (the events directory is folded into it: one directory fsync
/// stands for `fsync(events/)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Name {
    Manifest,
    /// The segment whose manifest record is the n-th `segment_closed`.
    Segment(u8),
    /// A writer's temp file (one per writer: `temp_file_name` never reuses a name).
    Temp(u8),
    /// The session's lock file (`.lock`): a lock is held on the inode it named when taken.
    Lock,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Inode {
    data: Vec<u8>,
    synced: Vec<u8>,
}

/// Directory entries and file contents, each volatile until synced.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fs {
    inodes: Vec<Inode>,
    live: BTreeMap<Name, usize>,
    durable: BTreeMap<Name, usize>,
    /// The session directory's entry in `sessions/` (GC renames it away, decision D130).
    dir_live: bool,
    dir_durable: bool,
}

impl Fs {
    fn read(&self, name: Name) -> Option<&[u8]> {
        if !self.dir_live {
            return None;
        }
        self.live
            .get(&name)
            .map(|&i| self.inodes[i].data.as_slice())
    }
    fn unlink(&mut self, name: Name) {
        self.live.remove(&name);
    }
    fn create_truncate(&mut self, name: Name) {
        match self.live.get(&name) {
            Some(&i) => self.inodes[i].data.clear(),
            None => {
                self.inodes.push(Inode {
                    data: Vec::new(),
                    synced: Vec::new(),
                });
                self.live.insert(name, self.inodes.len() - 1);
            }
        }
    }
    fn append(&mut self, name: Name, bytes: &[u8]) {
        if !self.live.contains_key(&name) {
            self.create_truncate(name);
        }
        if let Some(&i) = self.live.get(&name) {
            self.inodes[i].data.extend_from_slice(bytes);
        }
    }
    fn sync_file(&mut self, name: Name) {
        if let Some(&i) = self.live.get(&name) {
            self.inodes[i].synced = self.inodes[i].data.clone();
        }
    }
    fn rename(&mut self, from: Name, to: Name) {
        if let Some(i) = self.live.remove(&from) {
            self.live.insert(to, i);
        }
    }
    fn sync_dir(&mut self) {
        self.durable = self.live.clone();
    }
    /// What a machine crash leaves: the durable entries, each file holding what was synced.
    /// Unreachable inodes are dropped so equal disks are equal states.
    fn crashed(&self) -> Fs {
        let mut out = Fs {
            inodes: Vec::new(),
            live: BTreeMap::new(),
            durable: BTreeMap::new(),
            dir_live: self.dir_durable,
            dir_durable: self.dir_durable,
        };
        for (&name, &i) in &self.durable {
            let synced = self.inodes[i].synced.clone();
            out.inodes.push(Inode {
                data: synced.clone(),
                synced,
            });
            out.live.insert(name, out.inodes.len() - 1);
        }
        out.durable = out.live.clone();
        out
    }
}

/// Manifest bytes: `C n ;` closes segment n, `P n ;` pins the snapshot segment n introduced.
const CLOSE: u8 = b'C';
const PIN: u8 = b'P';
const END: u8 = b';';

/// What loading the session finds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Verdict {
    Absent,
    /// The closed segments, in order.
    Healthy(Vec<u8>),
    Corrupt(&'static str),
}

/// Loads a session from `fs` as the store does: the manifest, then every segment it attests.
pub fn load(fs: &Fs) -> Verdict {
    let Some(manifest) = fs.read(Name::Manifest) else {
        // Segments without a manifest are a lost manifest, never "no session" (D131).
        let segments = fs.dir_live && fs.live.keys().any(|n| matches!(n, Name::Segment(_)));
        return if segments {
            Verdict::Corrupt("segments without a manifest")
        } else {
            Verdict::Absent
        };
    };
    let mut closed = Vec::new();
    let mut pinned = Vec::new();
    for rec in manifest.chunks(3) {
        match rec {
            [CLOSE, n, END] => closed.push(*n),
            [PIN, n, END] => pinned.push(*n),
            _ => return Verdict::Corrupt("a torn manifest record"),
        }
    }
    for &n in &closed {
        if fs.read(Name::Segment(n)) != Some(&[n][..]) {
            return Verdict::Corrupt("an attested segment is missing or differs");
        }
        if !pinned.contains(&n) {
            return Verdict::Corrupt("a closed segment's snapshot is not pinned");
        }
    }
    Verdict::Healthy(closed)
}

/// Bugs the checker must find: each breaks one rule of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Planted {
    /// The segment's rename is not made durable by a directory fsync.
    SkipDirectorySync,
    /// The close and the pins are two durable appends (the window decision D49 closed).
    PinsAfterClose,
    /// A reader that sees damage reports it without the shared lock (decision D50).
    UnlockedRead,
    /// GC deletes a session file by file, the lock file first, instead of renaming its
    /// directory away: a waiting writer re-creates the lock file and locks a new inode.
    GcUnlinksLockFile,
}

/// The model's configuration.
#[derive(Debug, Clone, Copy, Default)]
pub struct Config {
    pub writers: u8,
    pub crashes: u8,
    pub planted: Option<Planted>,
    /// Whether GC runs one retention delete of the session.
    pub gc: bool,
}

/// One store operation, as the production store calls its `StoreFs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Lock,
    ReadManifest,
    WriteNew,
    WriteBytes,
    SyncFile,
    Rename,
    SyncDir,
    AppendManifestHalf,
    AppendManifestRest,
    SyncManifest,
    AppendPins,
    SyncPins,
    Unlock,
}

/// The steps of one append, in the production order (`AppendGate::commit`).
pub fn advance_ops(planted: Option<Planted>) -> Vec<Op> {
    let mut ops = vec![
        Op::Lock,
        Op::ReadManifest,
        Op::WriteNew,
        Op::WriteBytes,
        Op::SyncFile,
        Op::Rename,
    ];
    if planted != Some(Planted::SkipDirectorySync) {
        ops.push(Op::SyncDir);
    }
    ops.extend([
        Op::AppendManifestHalf,
        Op::AppendManifestRest,
        Op::SyncManifest,
    ]);
    if planted == Some(Planted::PinsAfterClose) {
        ops.extend([Op::AppendPins, Op::SyncPins]);
    }
    ops.push(Op::Unlock);
    ops
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Writer {
    pc: usize,
    segment: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Reader {
    Start,
    Waiting,
    Done(Verdict),
}

/// One state of the whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    pub fs: Fs,
    writers: Vec<Writer>,
    /// Who holds a lock, by the inode locked: writers by index, GC as [`GC`].
    locks: BTreeMap<usize, u8>,
    gc_pc: usize,
    /// Answered advances when GC judged the session (a delete may take exactly those).
    gc_judged: Option<usize>,
    reader: Reader,
    crashes: u8,
    /// Segments whose advance was answered (acknowledged to the caller).
    pub acked: Vec<u8>,
}

/// One transition, for traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Writer(u8, Op),
    ReaderLoad,
    ReaderRetryLocked,
    /// GC's step: 0 lock, 1 judge, 2 and 3 delete, 4 unlock.
    Gc(usize),
    Crash,
}

/// GC's lock holder id.
pub const GC: u8 = u8::MAX;
const GC_STEPS: usize = 5;

/// GC's retention delete (`FileGc::delete`): lock, judge under the lock, rename the directory
/// away and fsync `sessions/` (or, planted, unlink the lock file and then the manifest), unlock.
fn step_gc(config: &Config, state: &State) -> Option<State> {
    let mut next = state.clone();
    let bug = config.planted == Some(Planted::GcUnlinksLockFile);
    match state.gc_pc {
        0 => {
            let inode = *state
                .fs
                .live
                .get(&Name::Lock)
                .filter(|_| state.fs.dir_live)?;
            if state.locks.contains_key(&inode) {
                return None;
            }
            next.locks.insert(inode, GC);
        }
        1 => {
            if !matches!(load(&state.fs), Verdict::Healthy(_)) {
                next.locks.retain(|_, h| *h != GC);
                next.gc_pc = GC_STEPS;
                return Some(next);
            }
            next.gc_judged = Some(state.acked.len());
        }
        2 if bug => next.fs.unlink(Name::Lock),
        2 => next.fs.dir_live = false,
        3 if bug => {
            next.fs.unlink(Name::Manifest);
            next.fs.sync_dir();
        }
        3 => next.fs.dir_durable = false,
        4 => {
            next.locks.retain(|_, h| *h != GC);
        }
        _ => return None,
    }
    next.gc_pc += 1;
    Some(next)
}

/// The initial state: a session with one committed segment, durable.
pub fn initial(config: &Config) -> State {
    let mut fs = Fs {
        inodes: Vec::new(),
        live: BTreeMap::new(),
        durable: BTreeMap::new(),
        dir_live: true,
        dir_durable: true,
    };
    fs.create_truncate(Name::Lock);
    fs.append(Name::Segment(0), &[0]);
    fs.sync_file(Name::Segment(0));
    fs.append(Name::Manifest, &[CLOSE, 0, END, PIN, 0, END]);
    fs.sync_file(Name::Manifest);
    fs.sync_dir();
    State {
        fs,
        writers: (0..config.writers)
            .map(|_| Writer { pc: 0, segment: 0 })
            .collect(),
        locks: BTreeMap::new(),
        gc_pc: 0,
        gc_judged: None,
        reader: Reader::Start,
        crashes: 0,
        acked: Vec::new(),
    }
}

fn step_writer(state: &State, w: u8, ops: &[Op]) -> Option<State> {
    let writer = &state.writers[usize::from(w)];
    let op = *ops.get(writer.pc)?;
    let mut next = state.clone();
    let n = writer.segment;
    let temp = Name::Temp(w);
    match op {
        Op::Lock => {
            // `lock_to_continue`: never creates a session; re-creates a lock file only beside a
            // manifest (a directory copied by hand).
            if !state.fs.dir_live {
                next.writers[usize::from(w)].pc = ops.len();
                return Some(next);
            }
            if !state.fs.live.contains_key(&Name::Lock) {
                next.fs.create_truncate(Name::Lock);
            }
            let inode = next.fs.live.get(&Name::Lock).copied()?;
            if next.locks.contains_key(&inode) {
                return None;
            }
            next.locks.insert(inode, w);
        }
        Op::ReadManifest => match load(&state.fs) {
            Verdict::Healthy(closed) => {
                next.writers[usize::from(w)].segment = closed.len() as u8;
            }
            // The gate refuses an unhealthy or missing session: the writer gives up.
            _ => {
                next.locks.retain(|_, h| *h != w);
                next.writers[usize::from(w)].pc = ops.len();
                return Some(next);
            }
        },
        Op::WriteNew => next.fs.create_truncate(temp),
        Op::WriteBytes => next.fs.append(temp, &[n]),
        Op::SyncFile => next.fs.sync_file(temp),
        Op::Rename => next.fs.rename(temp, Name::Segment(n)),
        Op::SyncDir => next.fs.sync_dir(),
        Op::AppendManifestHalf => next.fs.append(Name::Manifest, &[CLOSE, n]),
        Op::AppendManifestRest => {
            if state.planted_pins_apart() {
                next.fs.append(Name::Manifest, &[END]);
            } else {
                next.fs.append(Name::Manifest, &[END, PIN, n, END]);
            }
        }
        Op::SyncManifest | Op::SyncPins => next.fs.sync_file(Name::Manifest),
        Op::AppendPins => next.fs.append(Name::Manifest, &[PIN, n, END]),
        Op::Unlock => {
            next.locks.retain(|_, h| *h != w);
            next.acked.push(n);
        }
    }
    next.writers[usize::from(w)].pc += 1;
    Some(next)
}

impl State {
    // Set by `successors` for the one planted bug that changes an op's bytes.
    fn planted_pins_apart(&self) -> bool {
        PINS_APART.with(std::cell::Cell::get)
    }
}

thread_local! {
    static PINS_APART: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Every state one step from `state`.
pub fn successors(config: &Config, state: &State) -> Vec<(Step, State)> {
    PINS_APART.with(|c| c.set(config.planted == Some(Planted::PinsAfterClose)));
    let ops = advance_ops(config.planted);
    let mut out = Vec::new();
    for w in 0..config.writers {
        if let Some(next) = step_writer(state, w, &ops) {
            let op = ops[state.writers[usize::from(w)].pc];
            out.push((Step::Writer(w, op), next));
        }
    }
    match &state.reader {
        Reader::Start => {
            let mut next = state.clone();
            let verdict = load(&state.fs);
            next.reader = match verdict {
                Verdict::Corrupt(_)
                    if !state.locks.is_empty() && config.planted != Some(Planted::UnlockedRead) =>
                {
                    Reader::Waiting
                }
                v => Reader::Done(v),
            };
            out.push((Step::ReaderLoad, next));
        }
        Reader::Waiting if state.locks.is_empty() => {
            let mut next = state.clone();
            next.reader = Reader::Done(load(&state.fs));
            out.push((Step::ReaderRetryLocked, next));
        }
        _ => {}
    }
    if config.gc
        && let Some(next) = step_gc(config, state)
    {
        out.push((Step::Gc(state.gc_pc), next));
    }
    if state.crashes < config.crashes {
        let mut next = state.clone();
        next.fs = state.fs.crashed();
        next.locks.clear();
        next.crashes += 1;
        // GC restarts unfinished; its last judgment stands until it judges again.
        if next.gc_pc < GC_STEPS {
            next.gc_pc = 0;
        }
        // Restarted: an unanswered call is retried from the start; the reader reads again.
        for w in &mut next.writers {
            if w.pc < ops.len() {
                *w = Writer { pc: 0, segment: 0 };
            }
        }
        next.reader = Reader::Start;
        out.push((Step::Crash, next));
    }
    out
}

/// The properties every reachable state must satisfy; `Err` names the one broken.
pub fn check(config: &Config, state: &State) -> Result<(), &'static str> {
    let image = state.fs.crashed();
    let after_crash = load(&image);
    match &after_crash {
        Verdict::Healthy(closed) => {
            if state.acked.iter().any(|a| !closed.contains(a)) {
                return Err("an acknowledged advance is lost after a crash");
            }
        }
        // Deleted by GC: only what GC judged may go with it.
        Verdict::Absent if state.gc_judged == Some(state.acked.len()) => {}
        Verdict::Absent => return Err("an acknowledged advance is lost after a crash"),
        Verdict::Corrupt(_) => {
            return Err("after a crash the session is neither healthy nor wholly absent");
        }
    }
    if let Reader::Done(Verdict::Corrupt(_)) = state.reader {
        return Err("a reader reported a healthy session as corrupt");
    }
    let ops = advance_ops(config.planted);
    let inside = state
        .writers
        .iter()
        .filter(|w| w.pc > 0 && w.pc < ops.len())
        .count();
    let gc_inside = usize::from(state.gc_pc > 0 && state.gc_pc < GC_STEPS);
    if inside + gc_inside > 1 {
        return Err("two writers inside one session's commit");
    }
    Ok(())
}

/// What a search found.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub states: usize,
    /// The broken property and the shortest trace to it.
    pub violation: Option<(&'static str, Vec<Step>)>,
}

/// Breadth-first search of every reachable state (at most `budget` states).
pub fn explore(config: &Config, budget: usize) -> Outcome {
    let start = initial(config);
    let mut index: HashMap<State, usize> = HashMap::new();
    let mut parent: Vec<Option<(usize, Step)>> = vec![None];
    let mut states = vec![start.clone()];
    index.insert(start, 0);
    let mut queue = VecDeque::from([0usize]);
    while let Some(i) = queue.pop_front() {
        if let Err(broken) = check(config, &states[i]) {
            let mut trace = Vec::new();
            let mut at = i;
            while let Some((p, step)) = parent[at] {
                trace.push(step);
                at = p;
            }
            trace.reverse();
            return Outcome {
                states: states.len(),
                violation: Some((broken, trace)),
            };
        }
        if states.len() >= budget {
            continue;
        }
        let current = states[i].clone();
        for (step, next) in successors(config, &current) {
            if !index.contains_key(&next) {
                index.insert(next.clone(), states.len());
                parent.push(Some((i, step)));
                states.push(next);
                queue.push_back(states.len() - 1);
            }
        }
    }
    Outcome {
        states: states.len(),
        violation: None,
    }
}

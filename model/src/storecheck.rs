//! An exhaustive check of the file store's protocol (locks §1 "Append transaction protocol",
//! decisions D49, D50, D130, D133, D185, D198..D200, D206, D207): a filesystem whose directory
//! entries and file contents are volatile until fsynced; two writers that each advance,
//! checkpoint or fork one session under its exclusive lock (or, when configured, one session
//! each, storing the same object), storing the snapshot object an advance introduces in the
//! content-addressed store first, and may resend a call they have the answer to; one reader;
//! one GC that deletes the session (retention) and sweeps unreferenced objects under the object
//! directory's lock. Each actor may be killed once at any step and restarts (a writer's client
//! then sends the same call again); the machine may lose power, which drops whatever is
//! volatile and may keep any prefix of a file's unsynced bytes. A breadth-first search visits
//! every reachable state, so a violation comes with a shortest trace. Pure: no I/O, no clock.

use std::collections::{BTreeMap, HashMap, VecDeque};

/// The directories the model distinguishes: a directory fsync makes durable only its own
/// entries. A session's `events/` directory is folded into its session directory (one fsync
/// stands for `fsync(events/)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    /// Session 0's or session 1's directory.
    Session(u8),
    Objects,
}

/// The most sessions a configuration holds (decision D206).
const SESSIONS: usize = 2;

/// A name in a session's directory (the session is the first field) or in the snapshot
/// objects' directory, which every session shares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Name {
    Manifest(u8),
    /// The segment whose manifest record is the n-th `segment_closed`.
    Segment(u8, u8),
    /// Writer w's temp segment (one per writer: `temp_file_name` never reuses a name).
    Temp(u8, u8),
    /// The session's lock file (`.lock`): a lock is held on the inode it named when taken.
    Lock(u8),
    /// The snapshot object with content `n` (content-addressed: its name is its content).
    Object(u8),
    /// Writer w's temp file for an object (one name shared by every writer when planted).
    ObjectTemp(u8),
}

impl Name {
    fn dir(self) -> Dir {
        match self {
            Name::Object(_) | Name::ObjectTemp(_) => Dir::Objects,
            Name::Manifest(s) | Name::Segment(s, _) | Name::Temp(s, _) | Name::Lock(s) => {
                Dir::Session(s)
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Inode {
    data: Vec<u8>,
    synced: Vec<u8>,
    /// Younger than GC's grace period (its modification time): written or touched in this run.
    young: bool,
}

/// Directory entries and file contents, each volatile until synced.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fs {
    inodes: Vec<Inode>,
    live: BTreeMap<Name, usize>,
    durable: BTreeMap<Name, usize>,
    /// Each session directory's entry in `sessions/` (GC renames it away, decision D130).
    dir_live: [bool; SESSIONS],
    dir_durable: [bool; SESSIONS],
}

impl Fs {
    fn visible(&self, name: Name) -> bool {
        match name.dir() {
            Dir::Objects => true,
            Dir::Session(s) => self.dir_live[usize::from(s)],
        }
    }
    fn inode(&self, name: Name) -> Option<usize> {
        if !self.visible(name) {
            return None;
        }
        self.live.get(&name).copied()
    }
    fn read(&self, name: Name) -> Option<&[u8]> {
        self.inode(name).map(|i| self.inodes[i].data.as_slice())
    }
    fn unlink(&mut self, name: Name) {
        self.live.remove(&name);
    }
    /// `open(O_CREAT | O_TRUNC)`: the inode the name now has (an existing one is emptied).
    fn create_truncate(&mut self, name: Name) -> usize {
        match self.live.get(&name) {
            Some(&i) => {
                self.inodes[i].data.clear();
                self.inodes[i].young = true;
                i
            }
            None => {
                self.inodes.push(Inode {
                    data: Vec::new(),
                    synced: Vec::new(),
                    young: true,
                });
                let i = self.inodes.len() - 1;
                self.live.insert(name, i);
                i
            }
        }
    }
    fn append(&mut self, name: Name, bytes: &[u8]) {
        let i = match self.live.get(&name) {
            Some(&i) => i,
            None => self.create_truncate(name),
        };
        self.inodes[i].data.extend_from_slice(bytes);
    }
    fn sync_inode(&mut self, i: usize) {
        self.inodes[i].synced = self.inodes[i].data.clone();
    }
    fn sync_file(&mut self, name: Name) {
        if let Some(&i) = self.live.get(&name) {
            self.sync_inode(i);
        }
    }
    /// `rename(2)`: false when `from` is gone (`ENOENT`), and nothing changes.
    fn rename(&mut self, from: Name, to: Name) -> bool {
        match self.live.remove(&from) {
            Some(i) => {
                self.live.insert(to, i);
                true
            }
            None => false,
        }
    }
    fn sync_dir(&mut self, dir: Dir) {
        self.durable.retain(|name, _| name.dir() != dir);
        for (&name, &i) in &self.live {
            if name.dir() == dir {
                self.durable.insert(name, i);
            }
        }
    }

    /// Every disk a power cut may leave (decision D198): the durable entries, each file holding
    /// what was synced plus any prefix of what was written after (none, part of a line, all).
    pub fn crash_images(&self) -> Vec<Fs> {
        let mut images = vec![Fs {
            inodes: Vec::new(),
            live: BTreeMap::new(),
            durable: BTreeMap::new(),
            dir_live: self.dir_durable,
            dir_durable: self.dir_durable,
        }];
        for (&name, &i) in &self.durable {
            let inode = &self.inodes[i];
            let mut kept: Vec<Vec<u8>> = Vec::new();
            if inode.data.starts_with(&inode.synced) {
                for k in inode.synced.len()..=inode.data.len() {
                    kept.push(inode.data[..k].to_vec());
                }
            } else {
                // Emptied after its fsync (`O_TRUNC`): the truncation may or may not be kept.
                kept.push(inode.synced.clone());
                kept.push(inode.data.clone());
            }
            let mut next = Vec::with_capacity(images.len() * kept.len());
            for image in &images {
                for bytes in &kept {
                    let mut image = image.clone();
                    image.inodes.push(Inode {
                        data: bytes.clone(),
                        synced: bytes.clone(),
                        young: inode.young,
                    });
                    image.live.insert(name, image.inodes.len() - 1);
                    next.push(image);
                }
            }
            images = next;
        }
        for image in &mut images {
            image.durable = image.live.clone();
        }
        images
    }
}

/// Manifest bytes: `C n ;` closes segment n, `P n ;` pins snapshot object n. A segment's bytes
/// are `[n, r, a]`: its index, the snapshot object its node references, and the attempt it
/// records (the dedupe key of the call that wrote it, [`NO_ATTEMPT`] for the session's start).
const CLOSE: u8 = b'C';
const PIN: u8 = b'P';
const END: u8 = b';';
/// The attempt of the segment every session starts with (no call of the model wrote it).
const NO_ATTEMPT: u8 = u8::MAX;

/// Why a load calls a session corrupt when a closed segment's snapshot has no pin: the state a
/// power cut tearing the close-and-pins write leaves, which D49 accepts and `workrail repair`
/// (D51) restores.
pub const CLOSE_WITHOUT_PINS: &str = "a closed segment's snapshot is not pinned";

/// What loading the session finds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Verdict {
    Absent,
    /// The closed segments, in order.
    Healthy(Vec<u8>),
    Corrupt(&'static str),
}

/// The committed records of a manifest: the closed segments, the pinned objects, and the length
/// of the committed prefix. A final record without its terminator is a torn, uncommitted tail
/// (as the store's loader treats a final line without its newline); damage before it is not.
fn parse_manifest(manifest: &[u8]) -> Result<(Vec<u8>, Vec<u8>, usize), &'static str> {
    let (mut closed, mut pinned) = (Vec::new(), Vec::new());
    let mut at = 0;
    while at < manifest.len() {
        let rest = &manifest[at..];
        match rest {
            [CLOSE, n, END, ..] => closed.push(*n),
            [PIN, n, END, ..] => pinned.push(*n),
            _ if !rest.contains(&END) => break,
            _ => return Err("a damaged manifest record"),
        }
        at += 3;
    }
    Ok((closed, pinned, at))
}

/// Loads session `s` from `fs` as the store does: the manifest, then every segment it attests.
pub fn load(fs: &Fs, s: u8) -> Verdict {
    let Some(manifest) = fs.read(Name::Manifest(s)) else {
        // Segments without a manifest are a lost manifest, never "no session" (D131).
        let segments = fs.dir_live[usize::from(s)]
            && fs
                .live
                .keys()
                .any(|n| matches!(n, Name::Segment(t, _) if *t == s));
        return if segments {
            Verdict::Corrupt("segments without a manifest")
        } else {
            Verdict::Absent
        };
    };
    let (closed, pinned, _) = match parse_manifest(manifest) {
        Ok(parsed) => parsed,
        Err(why) => return Verdict::Corrupt(why),
    };
    for &n in &closed {
        let Some(&[index, snapshot, _]) = fs.read(Name::Segment(s, n)).map(<[u8]>::as_ref) else {
            return Verdict::Corrupt("an attested segment is missing or differs");
        };
        if index != n {
            return Verdict::Corrupt("an attested segment is missing or differs");
        }
        if !pinned.contains(&snapshot) {
            return Verdict::Corrupt(CLOSE_WITHOUT_PINS);
        }
    }
    Verdict::Healthy(closed)
}

/// The committed segments of session `s` that record `attempt` (the dedupe index production
/// builds at load), in order; none when the session is not healthy.
fn records_of(fs: &Fs, s: u8, attempt: u8) -> Vec<u8> {
    let Verdict::Healthy(closed) = load(fs, s) else {
        return Vec::new();
    };
    closed
        .into_iter()
        .filter(|&n| matches!(fs.read(Name::Segment(s, n)), Some(&[_, _, a]) if a == attempt))
        .collect()
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
    /// Every writer stores an object through the same temp name (`.tmp-<object>`): one
    /// truncates the file another is about to rename into place. Writers of one session store
    /// objects inside its lock, so it takes two sessions storing one object (decision D206).
    SharedTempName,
    /// GC's sweep judges an object's age and unlinks it without the object directory's lock
    /// (the race D133 closed): a writer refreshes the object in between and pins it.
    SweepCheckThenUnlink,
    /// GC's sweep deletes objects without first making `sessions/` durable: a session
    /// directory a killed GC renamed away (not yet fsynced) comes back at a power cut without
    /// the objects its manifest pins (decision D200).
    SweepBeforeDeletionDurable,
    /// A resent call ignores the event its dedupe key finds and advances again (decision D207).
    ReplayReappends,
    /// A resent call answers from the session's current head instead of the event its dedupe
    /// key finds (production's `plant_replay_from_current_log`, decision D207).
    ReplayFromCurrentLog,
    /// A call whose record is found (a retry after a kill, or a resend) is answered without
    /// first fsyncing the manifest: the record may be a killed writer's append that was never
    /// fsynced, and a power cut then loses an answered call (decision D207).
    AnswerUnsyncedRecord,
}

/// The model's configuration.
#[derive(Debug, Clone, Copy, Default)]
pub struct Config {
    pub writers: u8,
    /// Calls (advance, checkpoint or fork) each writer makes.
    pub calls: u8,
    /// How many times each actor (each writer, the reader, GC) may be killed and restart.
    pub kills: u8,
    /// How many power cuts the machine may have (every state is judged by every disk a power
    /// cut would leave there in any case, decision D186).
    pub crashes: u8,
    pub planted: Option<Planted>,
    /// Whether GC runs (one retention judgment and delete, then one CAS sweep).
    pub gc: bool,
    /// Sessions: 1, or 2 with writer w on session `w % 2`, both sessions at the same workflow
    /// step, so their advances store the same snapshot object (decision D206). 0 means 1.
    pub sessions: u8,
    /// How many times each writer may resend a call it already has the answer to (same
    /// attempt, same dedupe key; decision D207).
    pub replays: u8,
}

impl Config {
    fn sessions(&self) -> u8 {
        self.sessions.clamp(1, SESSIONS as u8)
    }
    /// The session writer `w` (or GC, or the reader: session 0) works on.
    fn session_of(&self, holder: u8) -> u8 {
        if holder == GC || holder == READER {
            0
        } else {
            holder % self.sessions()
        }
    }
}

/// What a writer's call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Call {
    /// A new node: stores its snapshot object, closes a segment, pins the snapshot.
    Advance,
    /// A checkpoint node: reuses the checkpointed node's snapshot (already pinned), stores no
    /// object, closes a segment (`checkpoint_workflow`: `gate.append`).
    Checkpoint,
    /// An advance from a node that already has a child: its snapshot is one the store holds
    /// already (content-addressed), so storing it refreshes the object and pins nothing new.
    Fork,
}

/// One store operation, as the production store calls its `StoreFs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// A resent call's first step: the session loaded without the lock, the call's dedupe key
    /// looked up (`try_replay` before the gate). Found: the manifest fsynced, then answered
    /// from the record ([`Op::AnswerRecorded`]), nothing written.
    LookupRecorded,
    /// The answer built from a record found without the lock (no filesystem call).
    AnswerRecorded,
    Lock,
    ReadManifest,
    /// `put_durable`: is the object already there?
    ReadObject,
    /// The object directory's lock, shared, to refresh an existing object (D133).
    LockObjects,
    /// Refreshes an existing object's modification time (it may be gone: then it is stored).
    TouchObject,
    WriteObjectNew,
    WriteObjectBytes,
    SyncObject,
    RenameObject,
    SyncObjectDir,
    UnlockObjects,
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

/// How `put_durable` went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Put {
    /// No object there: a temp file, written, fsynced, renamed, the directory fsynced.
    New,
    /// The object there, refreshed under the directory's shared lock, the directory fsynced.
    Refreshed,
    /// The object there when read but gone at the refresh (a sweep took it): stored anew
    /// under the shared lock.
    Vanished,
}

fn put_ops(put: Put) -> Vec<Op> {
    let store = [
        Op::WriteObjectNew,
        Op::WriteObjectBytes,
        Op::SyncObject,
        Op::RenameObject,
        Op::SyncObjectDir,
    ];
    let mut ops = vec![Op::ReadObject];
    match put {
        Put::New => ops.extend(store),
        Put::Refreshed => ops.extend([
            Op::LockObjects,
            Op::TouchObject,
            Op::SyncObjectDir,
            Op::UnlockObjects,
        ]),
        Put::Vanished => {
            ops.extend([Op::LockObjects, Op::TouchObject]);
            ops.extend(store);
            ops.push(Op::UnlockObjects);
        }
    }
    ops
}

/// The steps of one call, in the production order (`AppendGate::commit`, the snapshot stored
/// first by `put_durable`); `put` is `None` for a call that stores no object.
pub fn call_ops(put: Option<Put>, planted: Option<Planted>) -> Vec<Op> {
    let mut ops = vec![Op::Lock, Op::ReadManifest];
    if let Some(put) = put {
        ops.extend(put_ops(put));
    }
    ops.extend([Op::WriteNew, Op::WriteBytes, Op::SyncFile, Op::Rename]);
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

/// The steps of an advance that stores a new snapshot object.
pub fn advance_ops(planted: Option<Planted>) -> Vec<Op> {
    call_ops(Some(Put::New), planted)
}

/// The steps a call starts with (the object branch is settled when the object is read).
fn initial_ops(call: Call, planted: Option<Planted>) -> Vec<Op> {
    match call {
        Call::Advance | Call::Fork => call_ops(Some(Put::New), planted),
        Call::Checkpoint => call_ops(None, planted),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Writer {
    /// The call in flight and its remaining steps (reversed: the next is last).
    call: Option<Call>,
    todo: Vec<Op>,
    /// Calls left to make.
    left: u8,
    kills: u8,
    /// Holds the session's lock (inside a commit).
    locked: bool,
    segment: u8,
    /// The open temp files (segment, object): writes go to the inode opened, not the name.
    seg_fd: Option<usize>,
    obj_fd: Option<usize>,
    /// The attempt (dedupe key) of the call in flight, or of the last one begun.
    attempt: u8,
    /// The call to send again after a kill or power cut took its answer: same call, same
    /// attempt.
    retry: Option<Call>,
    /// The call in flight is a resend of one already answered.
    replaying: bool,
    /// The last call answered and the answer (the segment recording its attempt) it got
    /// first.
    answer: Option<(Call, u8)>,
    /// Resends left.
    replays: u8,
}

impl Writer {
    fn idle(left: u8, replays: u8) -> Writer {
        Writer {
            call: None,
            todo: Vec::new(),
            left,
            kills: 0,
            locked: false,
            segment: 0,
            seg_fd: None,
            obj_fd: None,
            attempt: NO_ATTEMPT,
            retry: None,
            replaying: false,
            answer: None,
            replays,
        }
    }
    fn next_op(&self) -> Option<Op> {
        self.todo.last().copied()
    }
    /// Whether the call's close is followed by a pin in the same write (a new snapshot).
    fn pins(&self, state: &State, s: u8, planted: Option<Planted>) -> bool {
        let snapshot = self.snapshot();
        // The half holds no pin, so both parts give the same answer.
        let pinned = referenced(&state.fs, s).contains(&snapshot);
        planted != Some(Planted::PinsAfterClose) && !pinned
    }
    /// The snapshot object the call's node references.
    fn snapshot(&self) -> u8 {
        match self.call {
            Some(Call::Advance) => self.segment,
            _ => 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Reader {
    Start,
    Waiting,
    Done(Verdict),
}

/// The object directory's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ObjectsLock {
    Free,
    /// Held shared by the writers in the bit set.
    Shared(u8),
    Gc,
}

/// GC's run: a retention judgment and delete, then the CAS sweep.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Gc {
    /// Decide whether the session is old enough to delete.
    Start,
    /// `FileGc::delete`: 0 lock, 1 judge under the lock, 2 and 3 rename the directory away and
    /// fsync `sessions/`, 4 unlock.
    Delete(u8),
    /// The sweep's mark: the objects no committed manifest references.
    Mark,
    /// Sweeping the listed candidates (`ObjectSweeper::sweep`): lock, judge age, unlink.
    Sweep {
        candidates: Vec<u8>,
        step: SweepStep,
        deleted: bool,
    },
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SweepStep {
    /// `fsync(sessions/)`: a deletion a killed GC left half done is durable before any object
    /// its session pinned goes (decision D200).
    SyncSessions,
    Lock,
    Judge,
    Unlink,
    Unlock,
    SyncDir,
}

/// One state of the whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    pub fs: Fs,
    writers: Vec<Writer>,
    /// Who holds a session lock, by the inode locked: writers by index, GC as [`GC`].
    locks: BTreeMap<usize, u8>,
    objects_lock: ObjectsLock,
    gc: Gc,
    gc_kills: u8,
    /// Answered advances when GC judged the session (a delete may take exactly those).
    gc_judged: Option<usize>,
    reader: Reader,
    reader_kills: u8,
    crashes: u8,
    /// A power cut tore a close-and-pins write between its lines (D49's accepted window): the
    /// session is corrupt until `workrail repair` (D51) appends the pin. One flag per session.
    torn: [bool; SESSIONS],
    /// Segments whose call was answered (acknowledged to the caller): (session, segment).
    pub acked: Vec<(u8, u8)>,
    /// A resent call got an answer other than the one its first send got (decision D207).
    replay_differs: bool,
    /// A resend's fsync of the manifest landed between the two parts of another call's write
    /// (which a concurrent fsync may make durable in part, as a power cut may keep a part of
    /// it): until that call's own fsync, the durable manifest may end inside its write, the
    /// torn write D49 accepts. One flag per session.
    half_synced: [bool; SESSIONS],
}

/// One transition, for traces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Writer(u8, Call, Op),
    ReaderLoad,
    ReaderRetryLocked,
    /// GC judges the session too young to delete, or old enough.
    GcKeep,
    GcExpire,
    GcDelete(GcOp),
    GcMark,
    GcSweep(u8, SweepStep),
    /// An actor killed: writer n, or the reader ([`READER`]) or GC ([`GC`]).
    Kill(u8),
    PowerCut,
}

/// GC's retention delete (of session 0) as `FileGc::delete` performs it, step by step
/// ([`Step::GcDelete`] names them): lock, judge under the lock, rename the directory out of
/// `sessions/`, fsync `sessions/`, unlock. The removal of what was renamed away is out of every
/// reader's and writer's reach: the model drops the directory at the rename.
pub const GC_DELETE: [GcOp; 5] = [
    GcOp::Lock,
    GcOp::Judge,
    GcOp::RenameAway,
    GcOp::SyncSessions,
    GcOp::Unlock,
];

/// A step of GC's retention delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcOp {
    Lock,
    Judge,
    RenameAway,
    SyncSessions,
    Unlock,
}

/// The steps of GC's sweep of one object directory that deletes `unlinked` objects, as
/// `ObjectSweeper::sweep` performs them (with the fsync of `sessions/` before, D200).
pub fn sweep_ops(unlinked: usize) -> Vec<SweepStep> {
    let mut ops = vec![SweepStep::SyncSessions, SweepStep::Lock];
    for _ in 0..unlinked {
        ops.extend([SweepStep::Judge, SweepStep::Unlink]);
    }
    ops.extend([SweepStep::Unlock, SweepStep::SyncDir]);
    ops
}

/// GC's lock holder id.
pub const GC: u8 = u8::MAX;
/// The reader's id in [`Step::Kill`].
pub const READER: u8 = u8::MAX - 1;

/// The objects session `s`'s committed manifest references in `fs`.
fn referenced(fs: &Fs, s: u8) -> Vec<u8> {
    fs.read(Name::Manifest(s))
        .and_then(|m| parse_manifest(m).ok())
        .map(|(_, pinned, _)| pinned)
        .unwrap_or_default()
}

/// The objects any session's committed manifest references: the sweep's roots.
fn roots(fs: &Fs) -> Vec<u8> {
    (0..SESSIONS as u8)
        .flat_map(|s| referenced(fs, s))
        .collect()
}

/// How many calls on session 0 were answered (what GC's retention judgment may take).
fn acked_on_first(state: &State) -> usize {
    state.acked.iter().filter(|(s, _)| *s == 0).count()
}

fn step_gc(config: &Config, state: &State) -> Vec<(Step, State)> {
    let bug = config.planted == Some(Planted::GcUnlinksLockFile);
    let mut next = state.clone();
    let step = match &state.gc {
        Gc::Start => {
            // Too young to delete, or old: both are reachable.
            let mut keep = state.clone();
            keep.gc = Gc::Mark;
            next.gc = Gc::Delete(0);
            return vec![(Step::GcKeep, keep), (Step::GcExpire, next)];
        }
        Gc::Delete(0) => {
            let Some(inode) = state.fs.inode(Name::Lock(0)) else {
                next.gc = Gc::Mark;
                return vec![(Step::GcDelete(GcOp::Lock), next)];
            };
            if state.locks.contains_key(&inode) {
                // `Deleted::Locked`: a writer is in it; GC goes on to the sweep.
                next.gc = Gc::Mark;
            } else {
                next.locks.insert(inode, GC);
                next.gc = Gc::Delete(1);
            }
            Step::GcDelete(GC_DELETE[0])
        }
        Gc::Delete(1) => {
            if matches!(load(&state.fs, 0), Verdict::Healthy(_)) {
                next.gc_judged = Some(acked_on_first(state));
                next.gc = Gc::Delete(2);
            } else {
                // Safe mode: GC deletes nothing while a session is unhealthy.
                next.locks.retain(|_, h| *h != GC);
                next.gc = Gc::Done;
            }
            Step::GcDelete(GC_DELETE[1])
        }
        Gc::Delete(2) => {
            if bug {
                next.fs.unlink(Name::Lock(0));
            } else {
                next.fs.dir_live[0] = false;
            }
            next.gc = Gc::Delete(3);
            Step::GcDelete(GC_DELETE[2])
        }
        Gc::Delete(3) => {
            if bug {
                next.fs.unlink(Name::Manifest(0));
                next.fs.sync_dir(Dir::Session(0));
            } else {
                next.fs.dir_durable[0] = false;
            }
            next.gc = Gc::Delete(4);
            Step::GcDelete(GC_DELETE[3])
        }
        Gc::Delete(_) => {
            next.locks.retain(|_, h| *h != GC);
            next.gc = Gc::Mark;
            Step::GcDelete(GC_DELETE[4])
        }
        Gc::Mark => {
            // Safe mode: nothing is swept while a session is damaged.
            if (0..config.sessions()).any(|s| matches!(load(&state.fs, s), Verdict::Corrupt(_))) {
                next.gc = Gc::Done;
                return vec![(Step::GcMark, next)];
            }
            let roots = roots(&state.fs);
            let candidates: Vec<u8> = state
                .fs
                .live
                .keys()
                .filter_map(|n| match n {
                    Name::Object(o) if !roots.contains(o) => Some(*o),
                    _ => None,
                })
                .rev()
                .collect();
            next.gc = Gc::Sweep {
                candidates,
                step: SweepStep::SyncSessions,
                deleted: false,
            };
            Step::GcMark
        }
        Gc::Sweep {
            candidates,
            step,
            deleted,
        } => {
            let unlocked = config.planted == Some(Planted::SweepCheckThenUnlink);
            let object = candidates.last().copied();
            let (mut candidates, mut deleted) = (candidates.clone(), *deleted);
            let here = *step;
            let after = match (here, object) {
                (SweepStep::SyncSessions, _) => {
                    if config.planted != Some(Planted::SweepBeforeDeletionDurable) {
                        next.fs.dir_durable = next.fs.dir_live;
                    }
                    SweepStep::Lock
                }
                (SweepStep::Lock, None) => SweepStep::Unlock,
                (SweepStep::Lock, Some(_)) if unlocked => SweepStep::Judge,
                (SweepStep::Lock, Some(_)) => {
                    if state.objects_lock != ObjectsLock::Free {
                        return Vec::new();
                    }
                    next.objects_lock = ObjectsLock::Gc;
                    SweepStep::Judge
                }
                (SweepStep::Judge, Some(o)) => {
                    let old = state
                        .fs
                        .inode(Name::Object(o))
                        .is_some_and(|i| !state.fs.inodes[i].young);
                    if old {
                        SweepStep::Unlink
                    } else {
                        candidates.pop();
                        SweepStep::Judge
                    }
                }
                (SweepStep::Unlink, Some(o)) => {
                    next.fs.unlink(Name::Object(o));
                    candidates.pop();
                    deleted = true;
                    SweepStep::Judge
                }
                (SweepStep::Judge | SweepStep::Unlink, None) => SweepStep::Unlock,
                (SweepStep::Unlock, _) => {
                    if next.objects_lock == ObjectsLock::Gc {
                        next.objects_lock = ObjectsLock::Free;
                    }
                    SweepStep::SyncDir
                }
                (SweepStep::SyncDir, _) => {
                    if deleted {
                        next.fs.sync_dir(Dir::Objects);
                    }
                    next.gc = Gc::Done;
                    return vec![(Step::GcSweep(object.unwrap_or(0), here), next)];
                }
            };
            // With nothing left to judge, the next step lets the lock go.
            let after = if candidates.is_empty() && after == SweepStep::Judge {
                SweepStep::Unlock
            } else {
                after
            };
            next.gc = Gc::Sweep {
                candidates,
                step: after,
                deleted,
            };
            Step::GcSweep(object.unwrap_or(0), here)
        }
        Gc::Done => return Vec::new(),
    };
    vec![(step, next)]
}

/// The initial state: each session with one committed segment whose node's snapshot is object
/// 0 (two sessions are at the same step of one workflow), and, when GC runs, object 1 left by
/// an earlier, deleted session (the same content an advance stores): all older than GC's grace
/// period, everything durable. Without GC no earlier session left object 1, so an advance of
/// each session stores it new: the race of decision D206.
pub fn initial(config: &Config) -> State {
    let mut fs = Fs {
        inodes: Vec::new(),
        live: BTreeMap::new(),
        durable: BTreeMap::new(),
        dir_live: [false; SESSIONS],
        dir_durable: [false; SESSIONS],
    };
    let mut files = vec![(Name::Object(0), vec![0])];
    if config.gc {
        files.push((Name::Object(1), vec![1]));
    }
    for s in 0..config.sessions() {
        fs.dir_live[usize::from(s)] = true;
        fs.create_truncate(Name::Lock(s));
        files.push((Name::Segment(s, 0), vec![0, 0, NO_ATTEMPT]));
        files.push((Name::Manifest(s), vec![CLOSE, 0, END, PIN, 0, END]));
    }
    for (name, bytes) in files {
        fs.append(name, &bytes);
        fs.sync_file(name);
    }
    for inode in &mut fs.inodes {
        inode.young = false;
    }
    for s in 0..config.sessions() {
        fs.sync_dir(Dir::Session(s));
    }
    fs.sync_dir(Dir::Objects);
    fs.dir_durable = fs.dir_live;
    State {
        fs,
        writers: (0..config.writers)
            .map(|_| Writer::idle(config.calls, config.replays))
            .collect(),
        locks: BTreeMap::new(),
        objects_lock: ObjectsLock::Free,
        gc: if config.gc { Gc::Start } else { Gc::Done },
        gc_kills: 0,
        gc_judged: None,
        reader: Reader::Start,
        reader_kills: 0,
        crashes: 0,
        torn: [false; SESSIONS],
        acked: Vec::new(),
        replay_differs: false,
        half_synced: [false; SESSIONS],
    }
}

/// The writer's call ends without an answer that commits (it gave up, or was refused).
fn give_up(next: &mut State, w: u8) {
    next.locks.retain(|_, h| *h != w);
    release_objects(next, w);
    let writer = &mut next.writers[usize::from(w)];
    writer.locked = false;
    writer.call = None;
    writer.replaying = false;
    writer.todo.clear();
    writer.seg_fd = None;
    writer.obj_fd = None;
}

fn release_objects(next: &mut State, w: u8) {
    if let ObjectsLock::Shared(bits) = next.objects_lock {
        let bits = bits & !(1 << w);
        next.objects_lock = if bits == 0 {
            ObjectsLock::Free
        } else {
            ObjectsLock::Shared(bits)
        };
    }
}

/// Replaces the object steps still to come with those of `put` from `from` on.
fn settle_put(writer: &mut Writer, put: Put, from: Op, planted: Option<Planted>) {
    let call = call_ops(Some(put), planted);
    let Some(at) = call.iter().rposition(|op| *op == from) else {
        return;
    };
    writer.todo = call[at + 1..].iter().rev().copied().collect();
}

/// The steps of a resent call (decision D207), as `advance` performs them: the unlocked
/// lookup of its dedupe key, else the gate's lock, the authoritative read and lookup under it,
/// and the unlock. Wherever the record is found, the manifest is fsynced before the answer
/// ([`resend_answered_ops`]): the record may be a killed writer's append it never fsynced.
/// It writes nothing.
pub fn replay_ops() -> Vec<Op> {
    vec![Op::LookupRecorded, Op::Lock, Op::ReadManifest, Op::Unlock]
}

/// The steps of a resend answered from its record found without the lock (the common case:
/// the first send was answered): the lookup, the manifest's fsync, the answer.
pub fn resend_answered_ops() -> Vec<Op> {
    vec![Op::LookupRecorded, Op::SyncManifest, Op::AnswerRecorded]
}

/// The call of writer `w` ends with an answer built from segment `n`, the one recording its
/// attempt: the first answer is kept, a resend's is compared with it.
fn answer(next: &mut State, config: &Config, w: u8, n: u8) {
    let s = config.session_of(w);
    let idx = usize::from(w);
    let writer = &next.writers[idx];
    let n = match load(&next.fs, s) {
        // The planted bug reads today's head instead of the record the dedupe key found.
        Verdict::Healthy(closed)
            if writer.replaying && config.planted == Some(Planted::ReplayFromCurrentLog) =>
        {
            closed.last().copied().unwrap_or(n)
        }
        _ => n,
    };
    let call = writer.call;
    if writer.replaying {
        if writer.answer.map(|(_, first)| first) != Some(n) {
            next.replay_differs = true;
        }
    } else if let Some(call) = call {
        next.writers[idx].answer = Some((call, n));
    }
    if !next.acked.contains(&(s, n)) {
        next.acked.push((s, n));
    }
    let writer = &mut next.writers[idx];
    writer.locked = false;
    writer.call = None;
    writer.replaying = false;
    writer.todo.clear();
}

fn step_writer(config: &Config, state: &State, w: u8, op: Op) -> Option<State> {
    let mut next = state.clone();
    let planted = config.planted;
    let idx = usize::from(w);
    let s = config.session_of(w);
    next.writers[idx].todo.pop();
    let writer = &state.writers[idx];
    let n = writer.segment;
    let snapshot = writer.snapshot();
    let temp = Name::Temp(s, w);
    // Production names a temp file `.tmp-<pid>-<nonce>-<sequence>-<name>`: no other process
    // and no other call of this one uses it. One name per writer is the same here: a writer's
    // calls run one at a time, and a killed writer's temp file is held by no one.
    let object_temp = Name::ObjectTemp(if planted == Some(Planted::SharedTempName) {
        0
    } else {
        w
    });
    match op {
        Op::LookupRecorded => {
            if planted != Some(Planted::ReplayReappends)
                && let Some(&recorded) = records_of(&state.fs, s, writer.attempt).first()
            {
                next.writers[idx].segment = recorded;
                next.writers[idx].todo = vec![Op::AnswerRecorded, Op::SyncManifest];
                if planted == Some(Planted::AnswerUnsyncedRecord) {
                    next.writers[idx].todo.pop();
                }
            }
        }
        Op::AnswerRecorded => answer(&mut next, config, w, n),
        Op::Lock => {
            // `lock_to_continue`: never creates a session; re-creates a lock file only beside a
            // manifest (a directory copied by hand).
            if !state.fs.dir_live[usize::from(s)] {
                give_up(&mut next, w);
                return Some(next);
            }
            if !state.fs.live.contains_key(&Name::Lock(s)) {
                next.fs.create_truncate(Name::Lock(s));
            }
            let inode = next.fs.live.get(&Name::Lock(s)).copied()?;
            if next.locks.contains_key(&inode) {
                return None;
            }
            next.locks.insert(inode, w);
            next.writers[idx].locked = true;
        }
        Op::ReadManifest => match load(&state.fs, s) {
            Verdict::Healthy(closed) => {
                next.writers[idx].segment = closed.len() as u8;
                // The gate cuts a torn tail back to the committed records (a truncation, then
                // an fsync) before it appends (D50).
                if let Some(i) = next.fs.inode(Name::Manifest(s)) {
                    let committed = parse_manifest(&next.fs.inodes[i].data)
                        .map(|(_, _, len)| len)
                        .unwrap_or(0);
                    if committed < next.fs.inodes[i].data.len() {
                        next.fs.inodes[i].data.truncate(committed);
                        next.fs.sync_inode(i);
                    }
                }
                // The dedupe key looked up under the lock (`try_replay` in the gate): a call
                // already recorded (a retry whose first send committed, or a resend) is
                // answered from its record, which is fsynced first (its writer may have been
                // killed between its append and its fsync), and writes nothing.
                let recorded = records_of(&state.fs, s, writer.attempt).first().copied();
                let ignored = writer.replaying && planted == Some(Planted::ReplayReappends);
                match (recorded, writer.call) {
                    (Some(r), _) if !ignored => {
                        next.writers[idx].segment = r;
                        next.writers[idx].todo = vec![Op::Unlock, Op::SyncManifest];
                        if planted == Some(Planted::AnswerUnsyncedRecord) {
                            next.writers[idx].todo.pop();
                        }
                    }
                    (_, Some(call)) if ignored => {
                        let ops = initial_ops(call, planted);
                        next.writers[idx].todo = ops[2..].iter().rev().copied().collect();
                    }
                    // A resent attempt that is neither recorded nor current: refused.
                    (None, _) if writer.replaying => {
                        give_up(&mut next, w);
                        return Some(next);
                    }
                    _ => {}
                }
            }
            // The gate refuses an unhealthy or missing session: the writer gives up.
            _ => {
                give_up(&mut next, w);
                return Some(next);
            }
        },
        Op::ReadObject => match state.fs.read(Name::Object(snapshot)) {
            None => {}
            Some(bytes) => {
                let put = if bytes == [snapshot] {
                    Put::Refreshed
                } else {
                    Put::Vanished
                };
                settle_put(&mut next.writers[idx], put, Op::ReadObject, planted);
                if put == Put::Vanished {
                    // A damaged object is replaced under the lock: the same steps as one
                    // found gone at its refresh, the refresh skipped.
                    next.writers[idx].todo.retain(|op| *op != Op::TouchObject);
                }
            }
        },
        Op::LockObjects => match state.objects_lock {
            ObjectsLock::Gc => return None,
            ObjectsLock::Free => next.objects_lock = ObjectsLock::Shared(1 << w),
            ObjectsLock::Shared(bits) => next.objects_lock = ObjectsLock::Shared(bits | 1 << w),
        },
        Op::TouchObject => match next.fs.inode(Name::Object(snapshot)) {
            Some(i) => next.fs.inodes[i].young = true,
            None => settle_put(
                &mut next.writers[idx],
                Put::Vanished,
                Op::TouchObject,
                planted,
            ),
        },
        Op::WriteObjectNew => {
            next.writers[idx].obj_fd = Some(next.fs.create_truncate(object_temp));
        }
        Op::WriteObjectBytes => {
            let i = writer.obj_fd?;
            next.fs.inodes[i].data.push(snapshot);
        }
        Op::SyncObject => next.fs.sync_inode(writer.obj_fd?),
        Op::RenameObject => {
            // The temp file gone (another writer renamed it away): `ENOENT`, nothing attested.
            if !next.fs.rename(object_temp, Name::Object(snapshot)) {
                give_up(&mut next, w);
                return Some(next);
            }
            next.writers[idx].obj_fd = None;
        }
        Op::SyncObjectDir => next.fs.sync_dir(Dir::Objects),
        Op::UnlockObjects => release_objects(&mut next, w),
        Op::WriteNew => next.writers[idx].seg_fd = Some(next.fs.create_truncate(temp)),
        Op::WriteBytes => {
            let i = writer.seg_fd?;
            next.fs.inodes[i]
                .data
                .extend_from_slice(&[n, snapshot, writer.attempt]);
        }
        Op::SyncFile => next.fs.sync_inode(writer.seg_fd?),
        Op::Rename => {
            next.fs.rename(temp, Name::Segment(s, n));
            next.writers[idx].seg_fd = None;
        }
        Op::SyncDir => next.fs.sync_dir(Dir::Session(s)),
        // One write of the close line and its pin line, seen by a concurrent reader (and kept
        // by a power cut) in two parts: with a pin, the close line whole and then the pin;
        // without, a close line cut short and then its end.
        Op::AppendManifestHalf => {
            if writer.pins(state, s, planted) {
                next.fs.append(Name::Manifest(s), &[CLOSE, n, END]);
            } else {
                next.fs.append(Name::Manifest(s), &[CLOSE, n]);
            }
        }
        Op::AppendManifestRest => {
            if writer.pins(state, s, planted) {
                next.fs.append(Name::Manifest(s), &[PIN, snapshot, END]);
            } else {
                next.fs.append(Name::Manifest(s), &[END]);
            }
        }
        Op::SyncManifest | Op::SyncPins => {
            next.fs.sync_file(Name::Manifest(s));
            next.half_synced[usize::from(s)] =
                state.writers.iter().enumerate().any(|(v, other)| {
                    config.session_of(v as u8) == s
                        && other.next_op() == Some(Op::AppendManifestRest)
                });
        }
        Op::AppendPins => {
            if !referenced(&state.fs, s).contains(&snapshot) {
                next.fs.append(Name::Manifest(s), &[PIN, snapshot, END]);
            }
        }
        Op::Unlock => {
            next.locks.retain(|_, h| *h != w);
            answer(&mut next, config, w, n);
        }
    }
    Some(next)
}

/// Drops inodes nothing names or holds open and numbers the rest in a fixed order, so two
/// states with equal disks are equal.
fn normalize(state: &mut State) {
    let mut order: Vec<usize> = Vec::new();
    let seen = |i: usize, order: &mut Vec<usize>| {
        if !order.contains(&i) {
            order.push(i);
        }
    };
    for &i in state.fs.live.values() {
        seen(i, &mut order);
    }
    for &i in state.fs.durable.values() {
        seen(i, &mut order);
    }
    for w in &state.writers {
        for i in [w.seg_fd, w.obj_fd].into_iter().flatten() {
            seen(i, &mut order);
        }
    }
    for &i in state.locks.keys() {
        seen(i, &mut order);
    }
    let renumber: HashMap<usize, usize> = order.iter().enumerate().map(|(k, &i)| (i, k)).collect();
    let at = |i: &usize| renumber.get(i).copied().unwrap_or(0);
    state.fs.inodes = order.iter().map(|&i| state.fs.inodes[i].clone()).collect();
    for i in state.fs.live.values_mut() {
        *i = at(i);
    }
    for i in state.fs.durable.values_mut() {
        *i = at(i);
    }
    for w in &mut state.writers {
        w.seg_fd = w.seg_fd.map(|i| at(&i));
        w.obj_fd = w.obj_fd.map(|i| at(&i));
    }
    state.locks = state.locks.iter().map(|(i, h)| (at(i), *h)).collect();
}

/// A writer killed mid-call: the process's locks go with it; the client retries the call.
fn kill_writer(state: &State, w: u8) -> State {
    let mut next = state.clone();
    lose_answer(&mut next, w);
    next.writers[usize::from(w)].kills += 1;
    next
}

/// The call in flight ends unanswered (a kill or a power cut): the client sends it again, the
/// same call with the same attempt. A resend that dies is not sent again.
fn lose_answer(next: &mut State, w: u8) {
    let writer = &next.writers[usize::from(w)];
    let retry = writer.call.filter(|_| !writer.replaying);
    give_up(next, w);
    if retry.is_some() {
        next.writers[usize::from(w)].retry = retry;
    }
}

/// The calls writer `w` may send next: the retry of a call whose answer was lost, else a new
/// call of each kind or a resend of the call last answered.
fn begin(config: &Config, state: &State, w: u8) -> Vec<State> {
    let writer = &state.writers[usize::from(w)];
    let mut starts: Vec<State> = Vec::new();
    let mut start = |call: Call, fresh: bool, resend: bool| {
        let mut begun = state.clone();
        let b = &mut begun.writers[usize::from(w)];
        b.call = Some(call);
        b.retry = None;
        b.replaying = resend;
        let ops = if resend {
            b.replays -= 1;
            replay_ops()
        } else {
            initial_ops(call, config.planted)
        };
        if fresh {
            b.attempt = (w << 4) | (config.calls - b.left);
            b.left -= 1;
            b.answer = None;
        }
        b.todo = ops.into_iter().rev().collect();
        starts.push(begun);
    };
    if let Some(call) = writer.retry {
        start(call, false, false);
        return starts;
    }
    if writer.left > 0 {
        for call in [Call::Advance, Call::Checkpoint, Call::Fork] {
            start(call, true, false);
        }
    }
    if let (true, Some((call, _))) = (writer.replays > 0, writer.answer) {
        start(call, false, true);
    }
    starts
}

/// Every state one step from `state`.
pub fn successors(config: &Config, state: &State) -> Vec<(Step, State)> {
    let mut out = Vec::new();
    for w in 0..config.writers {
        let writer = &state.writers[usize::from(w)];
        match writer.next_op() {
            Some(op) => {
                if let (Some(call), Some(next)) = (writer.call, step_writer(config, state, w, op)) {
                    out.push((Step::Writer(w, call, op), next));
                }
            }
            None => {
                for begun in begin(config, state, w) {
                    let b = &begun.writers[usize::from(w)];
                    if let (Some(call), Some(op)) = (b.call, b.next_op())
                        && let Some(next) = step_writer(config, &begun, w, op)
                    {
                        out.push((Step::Writer(w, call, op), next));
                    }
                }
            }
        }
        // A kill cannot split one `write` call (the two parts of the manifest append).
        let mid_write = writer.next_op() == Some(Op::AppendManifestRest);
        if writer.kills < config.kills && writer.call.is_some() && !mid_write {
            out.push((Step::Kill(w), kill_writer(state, w)));
        }
    }
    // The reader loads session 0: it waits while that session's lock is held.
    let locked = state.locks.values().any(|h| config.session_of(*h) == 0);
    match &state.reader {
        Reader::Start => {
            let mut next = state.clone();
            let verdict = load(&state.fs, 0);
            next.reader = match verdict {
                Verdict::Corrupt(_) if locked && config.planted != Some(Planted::UnlockedRead) => {
                    Reader::Waiting
                }
                v => Reader::Done(v),
            };
            out.push((Step::ReaderLoad, next));
        }
        Reader::Waiting if !locked => {
            let mut next = state.clone();
            next.reader = Reader::Done(load(&state.fs, 0));
            out.push((Step::ReaderRetryLocked, next));
        }
        _ => {}
    }
    if state.reader_kills < config.kills && state.reader == Reader::Waiting {
        let mut next = state.clone();
        next.reader = Reader::Start;
        next.reader_kills += 1;
        out.push((Step::Kill(READER), next));
    }
    out.extend(step_gc(config, state));
    if state.gc_kills < config.kills && !matches!(state.gc, Gc::Start | Gc::Done) {
        let mut next = state.clone();
        next.locks.retain(|_, h| *h != GC);
        if next.objects_lock == ObjectsLock::Gc {
            next.objects_lock = ObjectsLock::Free;
        }
        next.gc = Gc::Start;
        next.gc_kills += 1;
        out.push((Step::Kill(GC), next));
    }
    if state.crashes < config.crashes {
        for image in state.fs.crash_images() {
            let mut next = state.clone();
            next.fs = image;
            next.locks.clear();
            next.objects_lock = ObjectsLock::Free;
            next.crashes += 1;
            for s in 0..config.sessions() {
                next.torn[usize::from(s)] |=
                    load(&next.fs, s) == Verdict::Corrupt(CLOSE_WITHOUT_PINS);
            }
            // GC restarts unfinished; its last judgment stands until it judges again.
            if next.gc != Gc::Done {
                next.gc = Gc::Start;
            }
            // Restarted: an unanswered call is retried from the start; the reader reads again.
            for w in 0..config.writers {
                lose_answer(&mut next, w);
            }
            next.reader = Reader::Start;
            out.push((Step::PowerCut, next));
        }
    }
    for (_, next) in &mut out {
        normalize(next);
    }
    out
}

/// Whether every pinned object of every healthy session in `fs` is there, whole.
fn pinned_objects_whole(fs: &Fs, sessions: u8) -> bool {
    (0..sessions).all(|s| {
        !matches!(load(fs, s), Verdict::Healthy(_))
            || referenced(fs, s)
                .iter()
                .all(|&o| fs.read(Name::Object(o)) == Some(&[o][..]))
    })
}

/// Whether `workrail repair` (D51) restores session `s` in `fs`: every closed segment's
/// snapshot object is there whole, so the missing pins can be appended.
fn repairable(fs: &Fs, s: u8) -> bool {
    let Some((closed, _, _)) = fs
        .read(Name::Manifest(s))
        .and_then(|m| parse_manifest(m).ok())
    else {
        return false;
    };
    closed.iter().all(|&n| match fs.read(Name::Segment(s, n)) {
        Some(&[index, o, _]) => index == n && fs.read(Name::Object(o)) == Some(&[o][..]),
        _ => false,
    })
}

/// Whether some attempt is recorded by two committed segments of a session in `fs`.
fn recorded_twice(fs: &Fs, sessions: u8) -> bool {
    (0..sessions).any(|s| {
        let Verdict::Healthy(closed) = load(fs, s) else {
            return false;
        };
        let attempts: Vec<u8> = closed
            .iter()
            .filter_map(|&n| match fs.read(Name::Segment(s, n)) {
                Some(&[_, _, a]) if a != NO_ATTEMPT => Some(a),
                _ => None,
            })
            .collect();
        attempts
            .iter()
            .enumerate()
            .any(|(i, a)| attempts[i + 1..].contains(a))
    })
}

/// The properties every reachable state must satisfy; `Err` names the one broken.
pub fn check(config: &Config, state: &State) -> Result<(), &'static str> {
    let sessions = config.sessions();
    if state.replay_differs {
        return Err("a resent call's answer differs from its first answer");
    }
    let last_write_torn = |image: &Fs, s: u8| {
        let kept = image.read(Name::Manifest(s)).map(<[u8]>::len);
        // The inode, wherever GC moved its directory: the power cut may bring it back.
        let live = state
            .fs
            .live
            .get(&Name::Manifest(s))
            .map(|&i| state.fs.inodes[i].data.len());
        let synced = state
            .fs
            .durable
            .get(&Name::Manifest(s))
            .map(|&i| state.fs.inodes[i].synced.len());
        // Bytes past the last fsync kept, but not the whole write: the write was torn.
        matches!((kept, live, synced), (Some(k), Some(l), Some(s)) if s < k && k <= l)
            // Or the last fsync itself landed inside another call's write (D207).
            || state.half_synced[usize::from(s)]
    };
    for image in state.fs.crash_images() {
        for s in 0..sessions {
            let mut acked = state.acked.iter().filter(|(t, _)| *t == s).map(|(_, n)| n);
            match load(&image, s) {
                Verdict::Healthy(closed) => {
                    if acked.any(|a| !closed.contains(a)) {
                        return Err("an acknowledged advance is lost after a crash");
                    }
                }
                // Deleted by GC (session 0 only): only what GC judged may go with it.
                Verdict::Absent if s == 0 && state.gc_judged == Some(acked_on_first(state)) => {}
                Verdict::Absent => return Err("an acknowledged advance is lost after a crash"),
                // A power cut tore the close-and-pins write between its lines: the state D49
                // accepts and `workrail repair` restores (its object is stored before the
                // close).
                Verdict::Corrupt(CLOSE_WITHOUT_PINS)
                    if state.torn[usize::from(s)] || last_write_torn(&image, s) =>
                {
                    if !repairable(&image, s) {
                        return Err("after a crash a pinned object is missing or torn");
                    }
                }
                Verdict::Corrupt(_) => {
                    return Err("after a crash the session is neither healthy nor wholly absent");
                }
            }
        }
        if !pinned_objects_whole(&image, sessions) {
            return Err("after a crash a pinned object is missing or torn");
        }
    }
    if !pinned_objects_whole(&state.fs, sessions) {
        return Err("an object a committed manifest references is missing or torn");
    }
    if let Reader::Done(Verdict::Corrupt(why)) = state.reader
        && !(state.torn[0] && why == CLOSE_WITHOUT_PINS)
    {
        return Err("a reader reported a healthy session as corrupt");
    }
    for s in 0..sessions {
        let inside = state
            .writers
            .iter()
            .enumerate()
            .filter(|(w, writer)| writer.locked && config.session_of(*w as u8) == s)
            .count();
        let gc_inside = usize::from(s == 0 && matches!(state.gc, Gc::Delete(1..=4)));
        if inside + gc_inside > 1 {
            return Err("two writers inside one session's commit");
        }
    }
    if recorded_twice(&state.fs, sessions) {
        return Err("a resent call appended again: one attempt is recorded twice");
    }
    Ok(())
}

/// What a search found.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub states: usize,
    /// Whether the search stopped at its budget before visiting every state.
    pub truncated: bool,
    /// The broken property and the shortest trace to it.
    pub violation: Option<(&'static str, Vec<Step>)>,
}

/// Breadth-first search of every reachable state (at most `budget` states). Visited states are
/// kept as 64-bit fingerprints (a collision, odds about n²/2⁶⁵, could only hide a state), so a
/// deep run's memory is its frontier plus a few words a state.
pub fn explore(config: &Config, budget: usize) -> Outcome {
    let fingerprint = |state: &State| {
        let mut h = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(state, &mut h);
        std::hash::Hasher::finish(&h)
    };
    let mut start = initial(config);
    normalize(&mut start);
    let mut seen: std::collections::HashSet<u64> = std::collections::HashSet::new();
    seen.insert(fingerprint(&start));
    let mut parent: Vec<Option<(usize, Step)>> = vec![None];
    let mut queue = VecDeque::from([(start, 0usize)]);
    let mut truncated = false;
    while let Some((current, i)) = queue.pop_front() {
        if let Err(broken) = check(config, &current) {
            let mut trace = Vec::new();
            let mut at = i;
            while let Some((p, step)) = parent[at] {
                trace.push(step);
                at = p;
            }
            trace.reverse();
            return Outcome {
                states: parent.len(),
                truncated,
                violation: Some((broken, trace)),
            };
        }
        if parent.len() >= budget {
            truncated = true;
            continue;
        }
        for (step, next) in successors(config, &current) {
            if seen.insert(fingerprint(&next)) {
                parent.push(Some((i, step)));
                queue.push_back((next, parent.len() - 1));
            }
        }
    }
    Outcome {
        states: parent.len(),
        truncated,
        violation: None,
    }
}

//! An exhaustive check of the PostgreSQL store's protocol (issue 35, item 5; decisions D201,
//! D202): the statements the backend sends for an advance through its append gate (a
//! session-level advisory lock, the read under it, one transaction of inserts, the unlock), a
//! load (one repeatable-read, read-only snapshot) and GC's retention delete (one transaction
//! under the transaction-level advisory lock), at statement granularity, against a server with
//! PostgreSQL's semantics: a transaction's writes are seen by others only once committed, a row
//! another open transaction wrote blocks a write of it, a unique key already committed fails
//! the insert, and a killed backend (the client killed, or its connection dropped) rolls back
//! its open transaction and releases its advisory locks. A postmaster restart does that to
//! every backend and keeps everything committed. A breadth-first search visits every reachable
//! state, so a violation comes with a shortest trace. Pure: no I/O, no clock.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;

/// A row of one session: its `sessions` row, an `events` row or a `manifest` row by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Row {
    Session,
    Event(u8),
    Manifest(u8),
}

/// Committed rows and their values: an event's value is the advance it records; a manifest
/// record's is `event << 1` for the `segment_closed` of that event, `| 1` for its pin.
type Rows = BTreeMap<Row, u8>;

/// One SQL statement kind, as the production backend sends it (see [`Stmt::sql`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stmt {
    /// `SELECT pg_try_advisory_lock($1)`: the append gate's session-level lock.
    TryAdvisoryLock,
    /// `SELECT pg_try_advisory_xact_lock($1)`: GC's (and the seam's append's) lock, released
    /// with the transaction.
    TryAdvisoryXactLock,
    /// `SELECT pg_advisory_unlock($1)`: the gate closes.
    AdvisoryUnlock,
    /// `START TRANSACTION` (read committed): what `Client::transaction` sends.
    Begin,
    /// `START TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY`: a load's snapshot.
    BeginReadOnly,
    Commit,
    Rollback,
    /// `SELECT manifest_rows, manifest_bytes FROM sessions`: a cached view's freshness key.
    SelectFreshness,
    /// `SELECT 1 FROM sessions`: whether the session has its row.
    SelectSessionExists,
    SelectManifest,
    SelectEvents,
    /// The snapshots the events reference (objects are not modelled: a read of nothing).
    SelectSnapshots,
    /// The pinned workflows the events reference (likewise).
    SelectWorkflows,
    /// `INSERT INTO sessions .. ON CONFLICT DO UPDATE`: the session row, its last activity.
    UpsertSession,
    InsertEvent,
    InsertManifest,
    DeleteEvents,
    DeleteManifest,
    DeleteSessions,
    /// `DELETE FROM derived`: the resume index goes with a deleted session (D115).
    DeleteDerived,
}

impl Stmt {
    /// The statement's text as production sends it, normalized: keywords only, no parameters.
    pub fn sql(self) -> &'static str {
        match self {
            Stmt::TryAdvisoryLock => "SELECT pg_try_advisory_lock",
            Stmt::TryAdvisoryXactLock => "SELECT pg_try_advisory_xact_lock",
            Stmt::AdvisoryUnlock => "SELECT pg_advisory_unlock",
            Stmt::Begin => "START TRANSACTION",
            Stmt::BeginReadOnly => "START TRANSACTION REPEATABLE READ READ ONLY",
            Stmt::Commit => "COMMIT",
            Stmt::Rollback => "ROLLBACK",
            Stmt::SelectFreshness => "SELECT manifest_rows FROM sessions",
            Stmt::SelectSessionExists => "SELECT 1 FROM sessions",
            Stmt::SelectManifest => "SELECT FROM manifest",
            Stmt::SelectEvents => "SELECT FROM events",
            Stmt::SelectSnapshots => "SELECT FROM snapshots",
            Stmt::SelectWorkflows => "SELECT FROM workflows",
            Stmt::UpsertSession => "INSERT INTO sessions ON CONFLICT",
            Stmt::InsertEvent => "INSERT INTO events",
            Stmt::InsertManifest => "INSERT INTO manifest",
            Stmt::DeleteEvents => "DELETE FROM events",
            Stmt::DeleteManifest => "DELETE FROM manifest",
            Stmt::DeleteSessions => "DELETE FROM sessions",
            Stmt::DeleteDerived => "DELETE FROM derived",
        }
    }
}

/// One instruction of an actor's program: a statement, or the answer to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Instr {
    Sql(Stmt),
    /// The append returned success: the advance is acknowledged to the agent.
    Ack,
}

/// Bugs the checker must find: each breaks one rule of the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Planted {
    /// The append gate takes no advisory lock: two writers' transactions interleave.
    AppendWithoutLock,
    /// The append answers success before its `COMMIT` has returned.
    AckBeforeCommit,
    /// GC's delete transaction takes no advisory lock.
    GcWithoutLock,
    /// A load reads statement by statement (read committed) instead of in one snapshot.
    LoadWithoutSnapshot,
}

/// The model's configuration.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    /// Writers (server processes), each appending `advances` advances to the session.
    pub writers: u8,
    pub advances: u8,
    /// Whether a reader loads the session once, and GC runs one retention delete.
    pub reader: bool,
    pub gc: bool,
    /// Whether each actor may be killed (its backend gone) once, at any statement.
    pub kills: bool,
    /// Postmaster restarts (every backend killed at once, nothing committed lost).
    pub restarts: u8,
    pub planted: Option<Planted>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            writers: 2,
            advances: 1,
            reader: true,
            gc: true,
            kills: true,
            restarts: 0,
            planted: None,
        }
    }
}

/// How the gate found the session under its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateRead {
    /// No cached view: the rows are read in full.
    Cold,
    /// A cached view whose freshness key still matches: nothing else is read.
    CachedUnchanged,
    /// A cached view whose key moved: the rows are read in full.
    CachedChanged,
}

/// The reads of a session's rows, in `fetch_rows`'s order.
const FULL_READ: [Stmt; 5] = [
    Stmt::SelectSessionExists,
    Stmt::SelectManifest,
    Stmt::SelectEvents,
    Stmt::SelectSnapshots,
    Stmt::SelectWorkflows,
];

/// An advance through the append gate, in production's order (`open_gate`, `gate_open`,
/// `append_alongside`, `gate_append`, `insert_prepared`, `commit`, the gate's drop), writing
/// `events` events and `records` manifest records; `cached` when the writer holds a view.
pub fn writer_program(
    planted: Option<Planted>,
    cached: bool,
    events: usize,
    records: usize,
) -> Vec<Instr> {
    let locked = planted != Some(Planted::AppendWithoutLock);
    let mut p = Vec::new();
    if locked {
        p.push(Instr::Sql(Stmt::TryAdvisoryLock));
    }
    if cached {
        p.push(Instr::Sql(Stmt::SelectFreshness));
    }
    p.extend(FULL_READ.map(Instr::Sql));
    p.push(Instr::Sql(Stmt::Begin));
    p.push(Instr::Sql(Stmt::UpsertSession));
    p.extend(std::iter::repeat_n(Instr::Sql(Stmt::InsertEvent), events));
    p.extend(std::iter::repeat_n(
        Instr::Sql(Stmt::InsertManifest),
        records,
    ));
    if planted == Some(Planted::AckBeforeCommit) {
        p.push(Instr::Ack);
        p.push(Instr::Sql(Stmt::Commit));
    } else {
        p.push(Instr::Sql(Stmt::Commit));
        p.push(Instr::Ack);
    }
    if locked {
        p.push(Instr::Sql(Stmt::AdvisoryUnlock));
    }
    p
}

/// The statements one acknowledged advance sends, as the gate found the session: what the
/// production trace must equal.
pub fn advance_stmts(
    planted: Option<Planted>,
    read: GateRead,
    events: usize,
    records: usize,
) -> Vec<Stmt> {
    let cached = read != GateRead::Cold;
    writer_program(planted, cached, events, records)
        .into_iter()
        .filter_map(|i| match i {
            Instr::Sql(s) => Some(s),
            Instr::Ack => None,
        })
        .filter(|s| read != GateRead::CachedUnchanged || !FULL_READ.contains(s))
        .collect()
}

/// A load (`Worker::rows`): one read-only snapshot of the session's rows.
pub fn load_program() -> Vec<Instr> {
    let mut p = vec![Instr::Sql(Stmt::BeginReadOnly)];
    p.extend(FULL_READ.map(Instr::Sql));
    p.push(Instr::Sql(Stmt::Rollback));
    p
}

/// GC's retention delete of one session (`delete_session`), after a load judged it.
pub fn gc_program(planted: Option<Planted>) -> Vec<Instr> {
    let mut p = load_program();
    p.push(Instr::Sql(Stmt::Begin));
    if planted != Some(Planted::GcWithoutLock) {
        p.push(Instr::Sql(Stmt::TryAdvisoryXactLock));
    }
    p.extend(
        [
            Stmt::SelectSessionExists,
            Stmt::SelectFreshness,
            Stmt::DeleteEvents,
            Stmt::DeleteManifest,
            Stmt::DeleteSessions,
            Stmt::DeleteDerived,
            Stmt::Commit,
        ]
        .map(Instr::Sql),
    );
    p
}

/// What loading the session finds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Verdict {
    Absent,
    /// The advances its closed segments hold, in order.
    Healthy(Vec<u8>),
    Corrupt(&'static str),
}

/// The rows a load has read so far.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct Image {
    exists: bool,
    manifest: Vec<(u8, u8)>,
    events: Vec<(u8, u8)>,
}

/// Judges a session's rows with the store's rules (D99): no session row is no session; the
/// manifest records are in index order from 0; every closed segment's event is there and its
/// snapshot pinned.
fn judge(image: &Image) -> Verdict {
    if !image.exists {
        return Verdict::Absent;
    }
    let mut closed = Vec::new();
    let mut pinned = Vec::new();
    for (position, &(index, value)) in image.manifest.iter().enumerate() {
        if usize::from(index) != position {
            return Verdict::Corrupt("manifest records out of sequence");
        }
        if value & 1 == 0 {
            closed.push(value >> 1);
        } else {
            pinned.push(value >> 1);
        }
    }
    let mut advances = Vec::new();
    for (k, &event) in closed.iter().enumerate() {
        if usize::from(event) != k {
            return Verdict::Corrupt("segments out of order");
        }
        let Some(&(_, advance)) = image.events.iter().find(|(i, _)| *i == event) else {
            return Verdict::Corrupt("an attested event is missing");
        };
        if !pinned.contains(&event) {
            return Verdict::Corrupt("a closed segment's snapshot is not pinned");
        }
        advances.push(advance);
    }
    Verdict::Healthy(advances)
}

fn image_of(rows: &Rows) -> Image {
    Image {
        exists: rows.contains_key(&Row::Session),
        manifest: rows
            .iter()
            .filter_map(|(r, v)| match r {
                Row::Manifest(i) => Some((*i, *v)),
                _ => None,
            })
            .collect(),
        events: rows
            .iter()
            .filter_map(|(r, v)| match r {
                Row::Event(i) => Some((*i, *v)),
                _ => None,
            })
            .collect(),
    }
}

/// An open transaction: its uncommitted writes (`None`: a delete) and, for a repeatable-read
/// one, the snapshot its first statement took.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct Tx {
    writes: BTreeMap<Row, Option<u8>>,
    snapshot: Option<Rows>,
    repeatable: bool,
}

/// Which program an actor runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Writer(u8),
    Reader,
    Gc,
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Role::Writer(w) => write!(f, "writer {w}"),
            Role::Reader => write!(f, "reader"),
            Role::Gc => write!(f, "gc"),
        }
    }
}

/// One process of the model and its backend.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Actor {
    role: Role,
    /// The next instruction; `None`: between runs of its program.
    pc: Option<u8>,
    /// Whether the current run's program reads a cached view first (writers).
    cached: bool,
    tx: Option<Tx>,
    image: Image,
    /// A writer's view of the session, read under its lock (the advances it holds).
    view: Option<Vec<u8>>,
    /// A writer's view kept from its last gate (this process's session cache).
    cache: Option<Vec<u8>>,
    /// Runs finished (advances for a writer, loads for the reader, deletes for GC).
    done: u8,
    killed: bool,
    /// A writer that found its session deleted (it stops; it never re-creates it).
    saw_deleted: bool,
    /// The reader's last verdict; GC's judgment.
    verdict: Option<Verdict>,
}

impl Actor {
    fn new(role: Role) -> Self {
        Actor {
            role,
            pc: None,
            cached: false,
            tx: None,
            image: Image::default(),
            view: None,
            cache: None,
            done: 0,
            killed: false,
            saw_deleted: false,
            verdict: None,
        }
    }
}

/// A state of the whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    rows: Rows,
    /// The session's advisory lock: its holder and whether it ends with the transaction.
    lock: Option<(u8, bool)>,
    actors: Vec<Actor>,
    /// Acknowledged advances, ascending.
    acked: Vec<u8>,
    /// What a committed GC delete took (the advances it judged).
    gc_took: Option<Vec<u8>>,
    restarts: u8,
}

/// The most statements one step runs (see [`is_local`]).
const RAN_MAX: usize = 10;

/// The instructions one step ran: at most one that others can observe, with the local ones
/// around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ran {
    instrs: [Option<Instr>; RAN_MAX],
    len: usize,
}

impl Ran {
    fn push(&mut self, instr: Instr) {
        if let Some(slot) = self.instrs.get_mut(self.len) {
            *slot = Some(instr);
            self.len += 1;
        }
    }

    /// The instructions, in order.
    pub fn instrs(&self) -> impl Iterator<Item = Instr> + '_ {
        self.instrs.iter().flatten().copied()
    }
}

/// Whether an instruction touches nothing another actor or a property can observe, so running
/// it in the same step as its neighbour loses no interleaving (a partial-order reduction): a
/// statement on objects or derived rows (not modelled), a `BEGIN` (nothing happens on the
/// server until the first statement), a read from a snapshot already taken, a `ROLLBACK` of a
/// transaction that wrote nothing and holds no lock. A kill between them leaves the same state
/// as a kill before them.
fn is_local(config: &Config, s: &State, a: usize, instr: Instr) -> bool {
    let Instr::Sql(stmt) = instr else {
        return false;
    };
    let tx = s.actors[a].tx.as_ref();
    match stmt {
        Stmt::SelectSnapshots
        | Stmt::SelectWorkflows
        | Stmt::DeleteDerived
        | Stmt::Begin
        | Stmt::BeginReadOnly => true,
        Stmt::SelectSessionExists
        | Stmt::SelectManifest
        | Stmt::SelectEvents
        | Stmt::SelectFreshness => {
            config.planted != Some(Planted::LoadWithoutSnapshot)
                && tx.is_some_and(|t| t.repeatable && t.snapshot.is_some())
        }
        Stmt::Rollback => tx.is_none_or(|t| t.writes.is_empty()) && s.lock != Some((a as u8, true)),
        _ => false,
    }
}

/// One step of the search: who did what.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Run(Role, Ran),
    /// The actor's lock wait ran out (`StoreError::Locked`, or GC's `Deleted::Locked`).
    TimedOut(Role),
    /// The statement failed (a unique key already committed): the transaction rolls back.
    Failed(Role, Stmt),
    /// The actor's backend is gone (`kill -9` of the client, or the connection dropped).
    Killed(Role),
    PostmasterRestart,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Run(role, ran) => {
                let what: Vec<&str> = ran
                    .instrs()
                    .map(|i| match i {
                        Instr::Sql(s) => s.sql(),
                        Instr::Ack => "acknowledges its advance",
                    })
                    .collect();
                write!(f, "{role}: {}", what.join("; "))
            }
            Step::TimedOut(role) => write!(f, "{role}: lock wait runs out"),
            Step::Failed(role, s) => write!(f, "{role}: {} fails, rolled back", s.sql()),
            Step::Killed(role) => write!(f, "{role}: backend killed"),
            Step::PostmasterRestart => write!(f, "postmaster restarts"),
        }
    }
}

/// Every advance's id: writer `w`'s `k`-th is `1 + w * advances + k` (0 is the first).
fn advance_id(config: &Config, w: u8, k: u8) -> u8 {
    1 + w * config.advances + k
}

/// The initial state: the session holds one committed advance (id 0).
pub fn initial(config: &Config) -> State {
    let mut rows = Rows::new();
    rows.insert(Row::Session, 0);
    rows.insert(Row::Event(0), 0);
    rows.insert(Row::Manifest(0), 0);
    rows.insert(Row::Manifest(1), 1);
    let mut actors: Vec<Actor> = (0..config.writers)
        .map(|w| Actor::new(Role::Writer(w)))
        .collect();
    actors.push(Actor::new(Role::Reader));
    actors.push(Actor::new(Role::Gc));
    State {
        rows,
        lock: None,
        actors,
        acked: Vec::new(),
        gc_took: None,
        restarts: 0,
    }
}

fn program(config: &Config, actor: &Actor) -> Vec<Instr> {
    match actor.role {
        Role::Writer(_) => writer_program(config.planted, actor.cached, 1, 2),
        Role::Reader => load_program(),
        Role::Gc => gc_program(config.planted),
    }
}

/// How many runs an actor makes.
fn runs(config: &Config, role: Role) -> u8 {
    match role {
        Role::Writer(_) => config.advances,
        Role::Reader => u8::from(config.reader),
        Role::Gc => u8::from(config.gc),
    }
}

/// What a statement did.
enum Exec {
    Done(State),
    /// It waits (a lock or a row another open transaction holds).
    Blocked,
    Failed,
}

impl State {
    /// The rows actor `a` sees: its snapshot or the committed rows, with its own writes.
    fn visible(&self, a: usize) -> Rows {
        let Some(tx) = &self.actors[a].tx else {
            return self.rows.clone();
        };
        let mut rows = tx.snapshot.clone().unwrap_or_else(|| self.rows.clone());
        for (row, value) in &tx.writes {
            match value {
                Some(v) => {
                    rows.insert(*row, *v);
                }
                None => {
                    rows.remove(row);
                }
            }
        }
        rows
    }

    /// Whether another actor's open transaction wrote `row`.
    fn held_by_other(&self, a: usize, row: Row) -> bool {
        self.actors
            .iter()
            .enumerate()
            .any(|(b, o)| b != a && o.tx.as_ref().is_some_and(|t| t.writes.contains_key(&row)))
    }

    /// Ends actor `a`'s transaction: committed or rolled back; its transaction lock goes too.
    fn end_tx(&mut self, a: usize, commit: bool) {
        if let Some(tx) = self.actors[a].tx.take()
            && commit
        {
            for (row, value) in tx.writes {
                match value {
                    Some(v) => {
                        self.rows.insert(row, v);
                    }
                    None => {
                        self.rows.remove(&row);
                    }
                }
            }
        }
        if self.lock == Some((a as u8, true)) {
            self.lock = None;
        }
    }

    /// The backend of actor `a` is gone: its transaction rolls back, its locks are released,
    /// and the process starts its run again (a writer's retry of an unacknowledged advance is
    /// the same advance, idempotent by dedupeKey; a new process has no cached view).
    fn kill(&mut self, config: &Config, a: usize) {
        self.end_tx(a, false);
        if self.lock.is_some_and(|(holder, _)| holder as usize == a) {
            self.lock = None;
        }
        let actor = &mut self.actors[a];
        if let Role::Writer(w) = actor.role
            && actor.pc.is_some()
            && self.acked.contains(&advance_id(config, w, actor.done))
        {
            actor.done += 1;
        }
        actor.pc = None;
        actor.image = Image::default();
        actor.view = None;
        actor.cache = None;
    }

    /// Reads into the actor's image, taking a repeatable-read snapshot on the first read.
    fn read(&mut self, config: &Config, a: usize, stmt: Stmt) -> Rows {
        let snapshot_reads = config.planted != Some(Planted::LoadWithoutSnapshot);
        if let Some(tx) = &mut self.actors[a].tx
            && tx.repeatable
            && snapshot_reads
            && tx.snapshot.is_none()
        {
            tx.snapshot = Some(self.rows.clone());
        }
        let rows = self.visible(a);
        let seen = image_of(&rows);
        let image = &mut self.actors[a].image;
        match stmt {
            Stmt::SelectSessionExists => image.exists = seen.exists,
            Stmt::SelectManifest => image.manifest = seen.manifest,
            Stmt::SelectEvents => image.events = seen.events,
            _ => {}
        }
        rows
    }
}

/// Runs statement `stmt` for actor `a` (its effect on the server and on the actor's reads).
fn exec(config: &Config, state: &State, a: usize, stmt: Stmt) -> Exec {
    let mut s = state.clone();
    let me = a as u8;
    match stmt {
        Stmt::TryAdvisoryLock | Stmt::TryAdvisoryXactLock => {
            if s.lock.is_some() {
                return Exec::Blocked;
            }
            s.lock = Some((me, stmt == Stmt::TryAdvisoryXactLock));
        }
        Stmt::AdvisoryUnlock => {
            if s.lock == Some((me, false)) {
                s.lock = None;
            }
        }
        Stmt::Begin => s.actors[a].tx = Some(Tx::default()),
        Stmt::BeginReadOnly => {
            s.actors[a].tx = Some(Tx {
                repeatable: true,
                ..Tx::default()
            });
        }
        Stmt::Commit => s.end_tx(a, true),
        Stmt::Rollback => s.end_tx(a, false),
        Stmt::SelectFreshness
        | Stmt::SelectSessionExists
        | Stmt::SelectManifest
        | Stmt::SelectEvents
        | Stmt::SelectSnapshots
        | Stmt::SelectWorkflows => {
            s.read(config, a, stmt);
        }
        Stmt::UpsertSession | Stmt::InsertEvent | Stmt::InsertManifest => {
            let view = s.actors[a].view.clone().unwrap_or_default();
            let n = view.len() as u8;
            let (row, value) = match stmt {
                Stmt::UpsertSession => (Row::Session, 0),
                Stmt::InsertEvent => {
                    let Role::Writer(w) = s.actors[a].role else {
                        return Exec::Failed;
                    };
                    (Row::Event(n), advance_id(config, w, s.actors[a].done))
                }
                _ => {
                    let written = s.actors[a].tx.as_ref().map_or(0, |t| {
                        t.writes
                            .keys()
                            .filter(|r| matches!(r, Row::Manifest(_)))
                            .count() as u8
                    });
                    (Row::Manifest(2 * n + written), (n << 1) | written.min(1))
                }
            };
            if s.held_by_other(a, row) {
                return Exec::Blocked;
            }
            if stmt != Stmt::UpsertSession && s.visible(a).contains_key(&row) {
                return Exec::Failed;
            }
            if let Some(tx) = &mut s.actors[a].tx {
                tx.writes.insert(row, Some(value));
            }
        }
        Stmt::DeleteEvents | Stmt::DeleteManifest | Stmt::DeleteSessions => {
            let doomed: Vec<Row> = s
                .visible(a)
                .into_keys()
                .filter(|r| match stmt {
                    Stmt::DeleteEvents => matches!(r, Row::Event(_)),
                    Stmt::DeleteManifest => matches!(r, Row::Manifest(_)),
                    _ => *r == Row::Session,
                })
                .collect();
            if doomed.iter().any(|r| s.held_by_other(a, *r)) {
                return Exec::Blocked;
            }
            if let Some(tx) = &mut s.actors[a].tx {
                for row in doomed {
                    tx.writes.insert(row, None);
                }
            }
        }
        Stmt::DeleteDerived => {}
    }
    Exec::Done(s)
}

/// Index of the first instruction equal to `target` at or after `from` in `p`.
fn find(p: &[Instr], from: usize, target: Instr) -> Option<usize> {
    p.iter()
        .skip(from)
        .position(|i| *i == target)
        .map(|k| k + from)
}

/// Where actor `a` goes after instruction `pc` ran: the branches production takes on what it
/// read (an unchanged cached view, no session, a duplicate, GC's checks).
fn next_pc(config: &Config, s: &mut State, a: usize, p: &[Instr], pc: usize) -> Option<usize> {
    let instr = p[pc];
    let actor = &s.actors[a];
    let end_of_run = |s: &mut State| {
        let actor = &mut s.actors[a];
        actor.done += 1;
        None
    };
    let unlock_or_end = |s: &mut State| match find(p, pc, Instr::Sql(Stmt::AdvisoryUnlock)) {
        Some(at) => Some(at),
        None => end_of_run(s),
    };
    match (actor.role, instr) {
        (Role::Writer(w), Instr::Sql(Stmt::SelectFreshness)) => {
            let now = image_of(&s.rows).manifest.len();
            let cache = actor.cache.clone().unwrap_or_default();
            if now == 2 * cache.len() {
                s.actors[a].view = Some(cache);
                return after_read(config, s, a, w, p, pc);
            }
            Some(pc + 1)
        }
        (Role::Writer(w), Instr::Sql(Stmt::SelectWorkflows)) => {
            match judge(&actor.image) {
                Verdict::Absent => {
                    // Deleted while it waited for the lock: it writes nothing (D130).
                    s.actors[a].saw_deleted = true;
                    find(p, pc, Instr::Sql(Stmt::AdvisoryUnlock))
                }
                Verdict::Corrupt(_) => unlock_or_end(s),
                Verdict::Healthy(log) => {
                    s.actors[a].view = Some(log);
                    after_read(config, s, a, w, p, pc)
                }
            }
        }
        (Role::Writer(w), Instr::Sql(Stmt::Commit)) => {
            // The committed view: what the gate hands to the cache when it closes.
            let mine = advance_id(config, w, actor.done);
            if let Some(view) = &mut s.actors[a].view {
                view.push(mine);
            }
            if pc + 1 == p.len() {
                return close_gate(s, a);
            }
            Some(pc + 1)
        }
        (Role::Writer(_), Instr::Sql(Stmt::AdvisoryUnlock)) => {
            if s.actors[a].saw_deleted {
                return None;
            }
            close_gate(s, a)
        }
        (Role::Writer(_), _) if pc + 1 == p.len() => close_gate(s, a),
        (Role::Reader, Instr::Sql(Stmt::SelectSessionExists)) if !actor.image.exists => {
            find(p, pc, Instr::Sql(Stmt::Rollback))
        }
        (Role::Reader, Instr::Sql(Stmt::Rollback)) => {
            let verdict = judge(&actor.image);
            s.actors[a].verdict = Some(verdict);
            end_of_run(s)
        }
        (Role::Gc, Instr::Sql(Stmt::Rollback)) => {
            let verdict = judge(&actor.image);
            s.actors[a].verdict = Some(verdict.clone());
            match verdict {
                Verdict::Healthy(_) => Some(pc + 1),
                // Absent: nothing to delete; damaged: safe mode deletes nothing.
                _ => end_of_run(s),
            }
        }
        (Role::Gc, Instr::Sql(Stmt::SelectSessionExists)) if !actor.image.exists => {
            if p[..pc].contains(&Instr::Sql(Stmt::Begin)) {
                // Gone under the lock (another GC, or by hand): nothing to delete.
                s.end_tx(a, false);
                return end_of_run(s);
            }
            find(p, pc, Instr::Sql(Stmt::Rollback))
        }
        (Role::Gc, Instr::Sql(Stmt::SelectFreshness)) => {
            let judged = match &actor.verdict {
                Some(Verdict::Healthy(log)) => 2 * log.len(),
                _ => usize::MAX,
            };
            if image_of(&s.visible(a)).manifest.len() != judged {
                // Changed since it was judged: retained.
                s.end_tx(a, false);
                return end_of_run(s);
            }
            Some(pc + 1)
        }
        (Role::Gc, Instr::Sql(Stmt::Commit)) => {
            if let Some(Verdict::Healthy(log)) = &actor.verdict {
                s.gc_took = Some(log.clone());
            }
            end_of_run(s)
        }
        _ if pc + 1 == p.len() => end_of_run(s),
        _ => Some(pc + 1),
    }
}

/// The gate closes: its view (unless a failure left it unknown) becomes the process's cache.
fn close_gate(s: &mut State, a: usize) -> Option<usize> {
    let actor = &mut s.actors[a];
    actor.cache = actor.view.take();
    actor.done += 1;
    None
}

/// A writer holds a healthy view: a duplicate is answered without writing (dedupeKey), else
/// the transaction starts.
fn after_read(
    config: &Config,
    s: &mut State,
    a: usize,
    w: u8,
    p: &[Instr],
    pc: usize,
) -> Option<usize> {
    let actor = &s.actors[a];
    let mine = advance_id(config, w, actor.done);
    if actor.view.as_ref().is_some_and(|v| v.contains(&mine)) {
        return find(p, pc, Instr::Ack);
    }
    find(p, pc, Instr::Sql(Stmt::Begin))
}

/// Every step enabled in `state`, with the state it leads to.
pub fn successors(config: &Config, state: &State) -> Vec<(Step, State)> {
    let mut out = Vec::new();
    for a in 0..state.actors.len() {
        let actor = &state.actors[a];
        let role = actor.role;
        let in_progress = actor.pc.is_some();
        if !in_progress && (actor.done >= runs(config, role) || actor.saw_deleted) {
            continue;
        }
        if in_progress && config.kills && !actor.killed {
            let mut s = state.clone();
            s.kill(config, a);
            s.actors[a].killed = true;
            out.push((Step::Killed(role), s));
        }
        let mut s = state.clone();
        if !in_progress {
            s.actors[a].cached = s.actors[a].cache.is_some();
            s.actors[a].pc = Some(0);
            s.actors[a].image = Image::default();
            s.actors[a].view = None;
        }
        let p = program(config, &s.actors[a]);
        let mut ran = Ran::default();
        let mut seen_by_others = false;
        while let Some(pc) = s.actors[a].pc.map(usize::from) {
            let Some(&instr) = p.get(pc) else { break };
            let local = is_local(config, &s, a, instr);
            if (seen_by_others && !local) || ran.len == RAN_MAX {
                break;
            }
            let mut next = match instr {
                Instr::Ack => {
                    let Role::Writer(w) = role else { break };
                    let id = advance_id(config, w, s.actors[a].done);
                    let mut t = s.clone();
                    if !t.acked.contains(&id) {
                        t.acked.push(id);
                        t.acked.sort_unstable();
                    }
                    t
                }
                Instr::Sql(stmt) => match exec(config, &s, a, stmt) {
                    Exec::Done(next) => next,
                    Exec::Blocked if ran.len == 0 => {
                        if matches!(stmt, Stmt::TryAdvisoryLock | Stmt::TryAdvisoryXactLock) {
                            // The bounded wait runs out: nothing written, the run ends.
                            let mut t = s.clone();
                            t.end_tx(a, false);
                            t.actors[a].pc = None;
                            t.actors[a].done += 1;
                            out.push((Step::TimedOut(role), t));
                        }
                        break;
                    }
                    Exec::Failed if ran.len == 0 => {
                        let mut t = s.clone();
                        t.end_tx(a, false);
                        let pc = match find(&p, pc, Instr::Sql(Stmt::AdvisoryUnlock)) {
                            Some(at) => Some(at as u8),
                            None => {
                                t.actors[a].done += 1;
                                None
                            }
                        };
                        t.actors[a].view = None;
                        t.actors[a].pc = pc;
                        out.push((Step::Failed(role, stmt), t));
                        break;
                    }
                    // After local statements: they are a step of their own.
                    Exec::Blocked | Exec::Failed => break,
                },
            };
            let after = next_pc(config, &mut next, a, &p, pc);
            next.actors[a].pc = after.map(|at| at as u8);
            if after.is_none() {
                next.actors[a].image = Image::default();
            }
            ran.push(instr);
            s = next;
            seen_by_others |= !local;
        }
        if ran.len > 0 {
            out.push((Step::Run(role, ran), s));
        }
    }
    if state.restarts < config.restarts {
        let mut s = state.clone();
        for a in 0..s.actors.len() {
            if s.actors[a].pc.is_some() {
                s.kill(config, a);
            }
        }
        s.restarts += 1;
        out.push((Step::PostmasterRestart, s));
    }
    out
}

/// The properties every reachable state must keep.
pub fn check(_config: &Config, state: &State) -> Result<(), &'static str> {
    let committed = image_of(&state.rows);
    match judge(&committed) {
        Verdict::Healthy(log) => {
            if state.acked.iter().any(|a| !log.contains(a)) {
                return Err("an acknowledged advance is not committed");
            }
        }
        Verdict::Absent => {
            if !committed.manifest.is_empty() || !committed.events.is_empty() {
                return Err("the session's rows outlive its session row");
            }
            // Deleted by GC: only what GC judged may go with it.
            let took = state.gc_took.clone().unwrap_or_default();
            if state.acked.iter().any(|a| !took.contains(a)) {
                return Err("an acknowledged advance is not committed");
            }
        }
        Verdict::Corrupt(_) => return Err("the committed session is neither healthy nor absent"),
    }
    for actor in &state.actors {
        if actor.role == Role::Reader && matches!(actor.verdict, Some(Verdict::Corrupt(_))) {
            return Err("a reader reported a healthy session as corrupt");
        }
    }
    let writing = state
        .actors
        .iter()
        .filter(|a| a.tx.as_ref().is_some_and(|t| !t.writes.is_empty()))
        .count();
    if writing > 1 {
        return Err("two transactions write one session at once");
    }
    // A gate's view is authoritative until its commit: nothing else commits to the session
    // between a writer's read and its commit (its own commit extends the view).
    if let Verdict::Healthy(log) = judge(&committed)
        && state.actors.iter().any(|a| {
            matches!(a.role, Role::Writer(_))
                && a.pc.is_some()
                && a.view.as_ref().is_some_and(|v| *v != log)
        })
    {
        return Err("two appends interleaved in one session's log");
    }
    if !committed.exists
        && state.gc_took.is_some()
        && state
            .actors
            .iter()
            .any(|a| matches!(a.role, Role::Writer(_)) && a.pc.is_some() && a.view.is_some())
    {
        return Err("GC deleted a session a live writer was appending to");
    }
    Ok(())
}

/// What a search found.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub states: usize,
    /// What the search reached, so a pass is not vacuous.
    pub reached: Reached,
    /// The broken property and the shortest trace to it.
    pub violation: Option<(&'static str, Vec<Step>)>,
}

/// Milestones some reachable state shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reached {
    /// The most advances acknowledged in one state.
    pub most_acked: usize,
    /// A committed GC delete.
    pub gc_deleted: bool,
    /// A writer that found its session deleted under its lock.
    pub writer_saw_deleted: bool,
    /// A reader's healthy verdict.
    pub reader_healthy: bool,
    /// Every writer and GC killed along one path (a load's kill is the load not made: its
    /// one observable statement is its snapshot).
    pub all_killed: bool,
}

impl Reached {
    fn note(&mut self, state: &State) {
        self.most_acked = self.most_acked.max(state.acked.len());
        self.gc_deleted |= state.gc_took.is_some();
        self.writer_saw_deleted |= state.actors.iter().any(|a| a.saw_deleted);
        self.reader_healthy |= state
            .actors
            .iter()
            .any(|a| a.role == Role::Reader && matches!(a.verdict, Some(Verdict::Healthy(_))));
        self.all_killed |= state
            .actors
            .iter()
            .all(|a| a.killed || a.role == Role::Reader);
    }
}

/// Breadth-first search of every reachable state (at most `budget` states).
pub fn explore(config: &Config, budget: usize) -> Outcome {
    let start = initial(config);
    let mut index: HashMap<State, usize> = HashMap::new();
    let mut parent: Vec<Option<(usize, Step)>> = vec![None];
    let mut states = vec![start.clone()];
    index.insert(start, 0);
    let mut queue = VecDeque::from([0usize]);
    let mut reached = Reached::default();
    while let Some(i) = queue.pop_front() {
        reached.note(&states[i]);
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
                reached,
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
        reached,
        violation: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_initial_session_is_healthy() {
        let s = initial(&Config::default());
        assert_eq!(judge(&image_of(&s.rows)), Verdict::Healthy(vec![0]));
    }
}

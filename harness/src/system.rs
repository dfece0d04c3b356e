//! The systems under test, behind one trait so one check suite runs against each (the rustls
//! habit: the same suite compiled per implementation).
//!
//! - [`InProcess`]: the protocol use-cases (`workrail::protocol::Workrail`) over the crash-model
//!   filesystem `MemFs`, with seeded entropy. Restart is a new `Workrail` on the same `MemFs`;
//!   a second writer is a held `MemFs` lock; "nothing was written" is `MemFs::snapshot`.
//! - [`Stdio`]: the built `workrail mcp` binary spoken to over newline-delimited JSON-RPC, with a
//!   temporary data directory and workflow directory. Restart is a new server process; a second
//!   writer is an OS lock on the session's `.lock` taken by the test process; "nothing was
//!   written" is a byte fingerprint of the data directory.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio as Pipe};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use workrail::entropy::SeededEntropy;
use workrail::protocol::{CatalogLoader, Workrail};
use workrail::store::fs::{OsFs, StoreFs};
use workrail::store::memfs::MemFs;
use workrail::store::{LoadedSession, SessionRead, SessionStore, StoreError, layout};
use workrail_spec::error::{ErrorCode, ErrorEnvelope, Retry};
use workrail_spec::ids::SessionId;
use workrail_spec::tools::{
    CheckpointWorkflowInput, ContinueWorkflowInput, ExecutionOutput, StartWorkflowInput,
};

use crate::fixture;

/// The result of an execution tool call.
pub type Reply = Result<ExecutionOutput, ErrorEnvelope>;

/// Every byte of the data directory, every directory and (on a real filesystem) every mode (path
/// -> bytes), for "nothing was written" checks.
pub type Fingerprint = BTreeMap<PathBuf, Vec<u8>>;

/// A WorkRail implementation the harness can drive and inspect.
pub trait System {
    fn start(&mut self, input: &StartWorkflowInput) -> Reply;
    fn continue_workflow(&mut self, input: &ContinueWorkflowInput) -> Reply;
    fn checkpoint(&mut self, input: &CheckpointWorkflowInput) -> Reply;
    /// The process restarts on the same data.
    fn restart(&mut self);
    /// Another process takes the session's writer lock until the guard is dropped.
    fn hold_lock(&self, session: &SessionId) -> Box<dyn std::any::Any>;
    /// The durable truth of a session as a fresh reader finds it (events, manifest, health).
    fn load(&self, session: &SessionId) -> Result<Arc<LoadedSession>, StoreError>;
    /// Every session directory.
    fn sessions(&self) -> Vec<SessionId>;
    /// Every byte, directory and mode of the data directory.
    fn fingerprint(&self) -> Fingerprint;
    /// A short name for failure messages.
    fn name(&self) -> &'static str;
}

// -------------------------------------------------------------------------------------------
// In process
// -------------------------------------------------------------------------------------------

/// `Workrail` over `MemFs`.
pub struct InProcess {
    pub fs: MemFs,
    pub workrail: Workrail,
    catalog: CatalogLoader,
    seed: u64,
    restarts: u64,
}

impl std::fmt::Debug for InProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InProcess")
            .field("seed", &self.seed)
            .field("restarts", &self.restarts)
            .finish_non_exhaustive()
    }
}

/// Opens a `Workrail` on `fs` (a new process: its own entropy stream).
pub fn open_workrail(fs: &MemFs, seed: u64) -> Result<Workrail, ErrorEnvelope> {
    open_workrail_with(fs, seed, fixture::catalog())
}

/// Opens a `Workrail` on `fs` serving `catalog`.
pub fn open_workrail_with(
    fs: &MemFs,
    seed: u64,
    catalog: CatalogLoader,
) -> Result<Workrail, ErrorEnvelope> {
    let shared: Arc<dyn StoreFs> = Arc::new(fs.clone());
    // One thread drives every simulated process, so a held lock is never released while a
    // call waits for it: a short wait keeps `SecondWriter` cheap.
    Workrail::with_parts(shared, catalog, Arc::new(SeededEntropy::new(seed)))
        .map(|w| w.with_lock_wait(SIMULATED_LOCK_WAIT))
}

/// How long a harness process waits for a session lock another (simulated) process holds.
pub const SIMULATED_LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

impl InProcess {
    /// A fresh data directory.
    pub fn new(seed: u64) -> Self {
        Self::on(MemFs::new(), seed)
    }

    /// A process starting on an existing data directory.
    pub fn on(fs: MemFs, seed: u64) -> Self {
        Self::with_catalog(fs, seed, fixture::catalog())
    }

    /// A process serving another catalog (e.g. [`fixture::multi_catalog`]).
    pub fn with_catalog(fs: MemFs, seed: u64, catalog: CatalogLoader) -> Self {
        let workrail = match open_workrail_with(&fs, seed, catalog.clone()) {
            Ok(w) => w,
            Err(e) => panic!("WorkRail does not open on a MemFs: {e:?}"),
        };
        Self {
            fs,
            workrail,
            catalog,
            seed,
            restarts: 0,
        }
    }

    /// A different entropy stream per process, like a real restart.
    pub fn process_seed(&self) -> u64 {
        self.seed
            .wrapping_mul(1_000_003)
            .wrapping_add(self.restarts)
    }

    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// Continues on a different filesystem image (the one a crash left), as a new process.
    pub fn reopen_on(&mut self, fs: MemFs) -> Result<(), ErrorEnvelope> {
        self.restarts += 1;
        let workrail = open_workrail_with(&fs, self.process_seed(), self.catalog.clone())?;
        self.fs = fs;
        self.workrail = workrail;
        Ok(())
    }
}

impl System for InProcess {
    fn start(&mut self, input: &StartWorkflowInput) -> Reply {
        self.workrail.start_workflow(input.clone())
    }

    fn continue_workflow(&mut self, input: &ContinueWorkflowInput) -> Reply {
        self.workrail.continue_workflow(input.clone())
    }

    fn checkpoint(&mut self, input: &CheckpointWorkflowInput) -> Reply {
        self.workrail.checkpoint_workflow(input.clone())
    }

    fn restart(&mut self) {
        let fs = self.fs.clone();
        if let Err(e) = self.reopen_on(fs) {
            panic!("WorkRail does not reopen on its own data: {e:?}");
        }
    }

    fn hold_lock(&self, session: &SessionId) -> Box<dyn std::any::Any> {
        match self.fs.try_lock(&layout::lock_path(session)) {
            Ok(guard) => Box::new(guard),
            Err(_) => panic!("the harness could not take the lock of {session}"),
        }
    }

    fn load(&self, session: &SessionId) -> Result<Arc<LoadedSession>, StoreError> {
        // Production's own read path (validated, cached while the manifest is unchanged); a
        // restart or a crash opens a new `Workrail`, whose first load validates from bytes.
        self.workrail.sessions().load(session)
    }

    fn sessions(&self) -> Vec<SessionId> {
        self.workrail.sessions().list_sessions().unwrap_or_default()
    }

    fn fingerprint(&self) -> Fingerprint {
        // Every file's bytes and every directory (a read that only creates an empty directory
        // changes it too); the crash model has no modes.
        // Keyed as the real filesystem's walk keys them (`<path>#meta`, `dir <mode>`).
        let mut out = self.fs.snapshot();
        for dir in self.fs.dirs() {
            let mut key = dir.into_os_string();
            key.push("#meta");
            out.insert(key.into(), b"dir (no modes in the crash model)".to_vec());
        }
        out
    }

    fn name(&self) -> &'static str {
        "in-process"
    }
}

// -------------------------------------------------------------------------------------------
// Over MCP stdio
// -------------------------------------------------------------------------------------------

const TIMEOUT: Duration = Duration::from_secs(60);

/// The `workrail` binary beside this test executable (`target/<profile>/workrail`), built with
/// `cargo build -p workrail --bin workrail` when it is missing.
pub fn workrail_binary() -> PathBuf {
    static BUILT: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(path) = built.as_ref() {
        return path.clone();
    }
    let exe = std::env::current_exe().unwrap_or_default();
    // target/<profile>/deps/<test> -> target/<profile>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let binary = profile_dir.join(format!("workrail{}", std::env::consts::EXE_SUFFIX));
    if !binary.is_file() || older_than_sources(&binary) {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
        let mut build = Command::new(cargo);
        build.args([
            "build",
            "-p",
            "workrail",
            "--bin",
            "workrail",
            "--manifest-path",
        ]);
        build.arg(&manifest);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build.status();
        assert!(
            matches!(status, Ok(s) if s.success()) && binary.is_file(),
            "could not build the workrail binary at {} ({status:?})",
            binary.display()
        );
    }
    *built = Some(binary.clone());
    binary
}

/// Whether any source of the binary (impl/, spec/) changed after it was built, so a harness run
/// on its own never talks to a stale server.
fn older_than_sources(binary: &Path) -> bool {
    fn newest(dir: &Path) -> Option<std::time::SystemTime> {
        let mut latest = None;
        for entry in std::fs::read_dir(dir).ok()?.flatten() {
            let path = entry.path();
            let time = if path.is_dir() {
                newest(&path)
            } else {
                entry.metadata().and_then(|m| m.modified()).ok()
            };
            latest = latest.max(time);
        }
        latest
    }
    let Ok(built) = std::fs::metadata(binary).and_then(|m| m.modified()) else {
        return true;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    ["impl/src", "impl/builtins", "impl/workflows", "spec/src"]
        .iter()
        .filter_map(|d| newest(&root.join(d)))
        .chain(std::fs::metadata(root.join("impl/Cargo.toml")).and_then(|m| m.modified()))
        .any(|t| t > built)
}

/// A running `workrail mcp` process.
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    next_id: i64,
}

impl Server {
    fn spawn(binary: &Path, data_dir: &Path, workflow_dir: &Path, home: &Path) -> Server {
        let mut child = match Command::new(binary)
            .arg("mcp")
            .env("WORKRAIL_DATA_DIR", data_dir)
            .env(
                "WORKRAIL_LOCK_WAIT_MS",
                SIMULATED_LOCK_WAIT.as_millis().to_string(),
            )
            .env("WORKRAIL_WORKFLOW_DIRS", workflow_dir)
            .env("HOME", home)
            .env_remove("XDG_DATA_HOME")
            .env_remove("WORKRAIL_LOG")
            .current_dir(home)
            .stdin(Pipe::piped())
            .stdout(Pipe::piped())
            .stderr(Pipe::null())
            .spawn()
        {
            Ok(child) => child,
            Err(e) => panic!("cannot spawn {}: {e}", binary.display()),
        };
        let (tx, rx) = channel();
        if let Some(stdout) = child.stdout.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        let stdin = child.stdin.take();
        let mut server = Server {
            child,
            stdin,
            lines: rx,
            next_id: 0,
        };
        let init = server.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "workrail-harness", "version": "0"},
            }),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "workrail", "{init}");
        server.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        server
    }

    fn send(&mut self, message: &Value) {
        let Some(stdin) = self.stdin.as_mut() else {
            panic!("the server's stdin is closed");
        };
        let mut line = message.to_string();
        line.push('\n');
        if let Err(e) = stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
        {
            panic!("cannot write to the server: {e}");
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match self.lines.recv_timeout(left) {
                Ok(line) => line,
                Err(RecvTimeoutError::Timeout) => panic!("no response to {method} in {TIMEOUT:?}"),
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the server closed stdout during {method}")
                }
            };
            let value: Value = match serde_json::from_str(&line) {
                Ok(v) => v,
                Err(e) => panic!("stdout carried a non-JSON line ({e}): {line:?}"),
            };
            if value["id"] == json!(id) {
                return value;
            }
        }
    }

    /// `tools/call` -> the execution output or the error envelope (never a JSON-RPC error).
    fn call(&mut self, tool: &str, arguments: Value) -> Reply {
        let response = self.request("tools/call", json!({"name": tool, "arguments": arguments}));
        assert!(
            response.get("error").is_none(),
            "{tool} became a JSON-RPC error: {response}"
        );
        let result = &response["result"];
        let structured = result["structuredContent"].clone();
        if result["isError"] == json!(true) {
            match serde_json::from_value::<ErrorEnvelope>(structured) {
                Ok(envelope) => Err(envelope),
                Err(e) => panic!("{tool}: an error result without an envelope ({e}): {result}"),
            }
        } else {
            let output: ExecutionOutput = match serde_json::from_value(structured) {
                Ok(o) => o,
                Err(e) => panic!("{tool}: structuredContent is not an ExecutionOutput ({e})"),
            };
            assert_eq!(
                result["content"][0]["text"].as_str(),
                Some(workrail::protocol::render_text(&output).as_str()),
                "{tool}: content[0].text is not the rendering of structuredContent"
            );
            Ok(output)
        }
    }

    fn close(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + TIMEOUT;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    assert!(status.success(), "the server exited with {status}");
                    return;
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                _ => panic!("the server did not exit after stdin EOF"),
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The stdio server on a temporary data directory.
pub struct Stdio {
    dir: tempfile::TempDir,
    binary: PathBuf,
    server: Option<Server>,
}

impl std::fmt::Debug for Stdio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stdio")
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl Stdio {
    /// The server with the harness workflow.
    pub fn new() -> Self {
        Self::with_workflows(&[(fixture::WORKFLOW_FILE, fixture::WORKFLOW_JSON)])
    }

    /// The server with these workflow files (`(file name, authoring JSON)`) in its workflow
    /// directory, besides the bundled ones.
    pub fn with_workflows(files: &[(&str, &str)]) -> Self {
        let dir = match tempfile::Builder::new()
            .prefix("workrail-harness-")
            .tempdir()
        {
            Ok(d) => d,
            Err(e) => panic!("cannot create a temporary directory: {e}"),
        };
        let workflows = dir.path().join("workflows");
        if let Err(e) = std::fs::create_dir_all(&workflows).and_then(|()| {
            files
                .iter()
                .try_for_each(|(file, json)| std::fs::write(workflows.join(file), json))
        }) {
            panic!("cannot write the harness workflows: {e}");
        }
        std::fs::create_dir_all(dir.path().join("home")).ok();
        let mut this = Self {
            dir,
            binary: workrail_binary(),
            server: None,
        };
        this.spawn();
        this
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn spawn(&mut self) {
        self.server = Some(Server::spawn(
            &self.binary,
            &self.data_dir(),
            &self.dir.path().join("workflows"),
            &self.dir.path().join("home"),
        ));
    }

    fn server(&mut self) -> &mut Server {
        if self.server.is_none() {
            self.spawn();
        }
        match self.server.as_mut() {
            Some(s) => s,
            None => unreachable!("spawned above"),
        }
    }

    fn call<T: serde::Serialize>(&mut self, tool: &str, input: &T) -> Reply {
        let arguments = match serde_json::to_value(input) {
            Ok(v) => v,
            Err(e) => panic!("cannot serialize {tool} arguments: {e}"),
        };
        self.server().call(tool, arguments)
    }

    fn store(&self) -> SessionStore {
        let fs: Arc<dyn StoreFs> = Arc::new(OsFs::new(self.data_dir()));
        SessionStore::new(fs)
    }
}

impl Default for Stdio {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Stdio {
    fn drop(&mut self) {
        if let Some(server) = self.server.take()
            && !std::thread::panicking()
        {
            server.close();
        }
    }
}

/// Every file's bytes, and every entry's kind and permission bits (under `<path>#meta`), so a
/// read that only creates an empty directory or changes a mode is seen too.
fn walk(root: &Path, dir: &Path, out: &mut Fingerprint) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let kind = if meta.is_dir() {
            "dir"
        } else if meta.is_file() {
            "file"
        } else {
            "other"
        };
        let mode = {
            use std::os::unix::fs::PermissionsExt;
            meta.permissions().mode() & 0o7777
        };
        let mut meta_key = rel.clone().into_os_string();
        meta_key.push("#meta");
        out.insert(
            PathBuf::from(meta_key),
            format!("{kind} {mode:o}").into_bytes(),
        );
        if meta.is_dir() {
            walk(root, &path, out);
        } else if let Ok(bytes) = std::fs::read(&path) {
            out.insert(rel, bytes);
        }
    }
}

impl System for Stdio {
    fn start(&mut self, input: &StartWorkflowInput) -> Reply {
        self.call("start_workflow", input)
    }

    fn continue_workflow(&mut self, input: &ContinueWorkflowInput) -> Reply {
        self.call("continue_workflow", input)
    }

    fn checkpoint(&mut self, input: &CheckpointWorkflowInput) -> Reply {
        self.call("checkpoint_workflow", input)
    }

    fn restart(&mut self) {
        if let Some(server) = self.server.take() {
            server.close();
        }
        self.spawn();
    }

    fn hold_lock(&self, session: &SessionId) -> Box<dyn std::any::Any> {
        let path = self.data_dir().join(layout::lock_path(session));
        let file = match std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) => panic!("cannot open {}: {e}", path.display()),
        };
        if let Err(e) = file.try_lock() {
            panic!(
                "the harness could not take the OS lock {}: {e}",
                path.display()
            );
        }
        Box::new(file)
    }

    fn load(&self, session: &SessionId) -> Result<Arc<LoadedSession>, StoreError> {
        self.store().load(session)
    }

    fn sessions(&self) -> Vec<SessionId> {
        self.store().list_sessions().unwrap_or_default()
    }

    fn fingerprint(&self) -> Fingerprint {
        let mut out = Fingerprint::new();
        let root = self.data_dir();
        walk(&root, &root, &mut out);
        out
    }

    fn name(&self) -> &'static str {
        "stdio"
    }
}

/// Whether an envelope is the locked busy-writer error: `TOKEN_SESSION_LOCKED`, retryable after
/// a positive delay (`L-WRITER-BUSY`).
pub fn is_writer_busy(envelope: &ErrorEnvelope) -> bool {
    envelope.code == ErrorCode::TokenSessionLocked
        && matches!(envelope.retry, Retry::RetryableAfterMs { after_ms } if after_ms > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fingerprint_of(root: &Path) -> Fingerprint {
        let mut out = Fingerprint::new();
        walk(root, root, &mut out);
        out
    }

    /// The purity check over real processes sees more than file bytes: an empty directory
    /// created by a read, or a changed mode, is a change.
    #[test]
    fn the_stdio_fingerprint_sees_new_directories_and_modes() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("manifest.jsonl"), b"{}\n").unwrap();
        let before = fingerprint_of(dir.path());
        assert_eq!(fingerprint_of(dir.path()), before, "not deterministic");
        std::fs::create_dir(dir.path().join("cache")).unwrap();
        let with_dir = fingerprint_of(dir.path());
        assert_ne!(with_dir, before, "an empty directory went unseen");
        std::fs::set_permissions(
            dir.path().join("manifest.jsonl"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        std::fs::set_permissions(
            dir.path().join("manifest.jsonl"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let restricted = fingerprint_of(dir.path());
        std::fs::set_permissions(
            dir.path().join("manifest.jsonl"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        assert_ne!(
            fingerprint_of(dir.path()),
            restricted,
            "a mode change went unseen"
        );
    }
}

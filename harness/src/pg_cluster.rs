//! A PostgreSQL cluster of a test's own (issue 19, faults of the database server itself): initdb
//! in a temporary directory, a port of its own, started as `.ci/postgres.sh` starts one (as the
//! `postgres` user, else `nobody`, when the test runs as root), stopped and removed on drop.
//! The test may crash it (`pg_ctl stop -m immediate`, `kill -9` of the postmaster or of one
//! backend) and start it again on the same data directory and port.
//!
//! Needs PostgreSQL's binaries (`/usr/lib/postgresql/*/bin`), not `WORKRAIL_TEST_POSTGRES`:
//! [`own_cluster`] says why a test passes without them, except under CI (`CI` set), where their
//! absence fails.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::multiproc::{DatabaseFaults, Rng};

/// `/usr/lib/postgresql/<highest>/bin`, when PostgreSQL is installed.
pub fn postgres_bin() -> Option<PathBuf> {
    let mut bins: Vec<(Vec<u64>, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry
                .file_name()
                .to_str()?
                .split('.')
                .map(|p| p.parse().ok())
                .collect::<Option<Vec<u64>>>()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    bins.sort();
    bins.pop().map(|(_, bin)| bin)
}

/// A new cluster for `test`, or `None` (and why, on stderr) when PostgreSQL is not installed;
/// under CI its absence panics.
pub fn own_cluster(test: &str) -> Option<Cluster> {
    let Some(bin) = postgres_bin() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but PostgreSQL's initdb is not installed (/usr/lib/postgresql/*/bin): {test} must run in CI"
        );
        eprintln!("{test}: skipped, no /usr/lib/postgresql/*/bin/initdb (install postgresql)");
        return None;
    };
    Some(Cluster::new(bin))
}

/// A throwaway cluster on 127.0.0.1 and a port of its own (trust authentication, `fsync=off`).
#[derive(Debug)]
pub struct Cluster {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    /// The user the server runs as when the test runs as root.
    user: Option<&'static str>,
}

fn ok(status: std::io::Result<std::process::ExitStatus>) -> bool {
    status.is_ok_and(|s| s.success())
}

impl Cluster {
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        match self.user {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(path);
                c
            }
            None => Command::new(path),
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// initdb and a first start, or panics saying why.
    pub fn new(bin: PathBuf) -> Self {
        let dir = match tempfile::tempdir() {
            Ok(dir) => dir,
            Err(e) => panic!("a temporary directory for the cluster: {e}"),
        };
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
        let user = if root {
            let has_postgres = ok(Command::new("id")
                .arg("postgres")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status());
            let user = if has_postgres { "postgres" } else { "nobody" };
            assert!(
                ok(Command::new("chown").arg(user).arg(dir.path()).status()),
                "chown {user} {}",
                dir.path().display()
            );
            Some(user)
        } else {
            None
        };
        let mut cluster = Self {
            bin,
            dir,
            port: 0,
            user,
        };
        let out = cluster
            .command("initdb")
            .arg("-D")
            .arg(cluster.data())
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .output();
        match out {
            Ok(out) if out.status.success() => {}
            Ok(out) => panic!("initdb failed: {}", String::from_utf8_lossy(&out.stderr)),
            Err(e) => panic!("initdb did not run: {e}"),
        }
        for _ in 0..20 {
            cluster.port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_or(0, |a| a.port());
            if cluster.port != 0 && cluster.start() {
                return cluster;
            }
        }
        panic!("the test cluster did not start: {}", cluster.log());
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    fn start(&self) -> bool {
        let options = format!(
            "-c listen_addresses=127.0.0.1 -p {} -c unix_socket_directories={} -c fsync=off -c max_connections=100",
            self.port,
            self.dir.path().display()
        );
        ok(self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-w", "-t", "60", "-o", &options, "start"])
            // Why a start failed is in server.log (a restart retries while the killed
            // server's processes linger).
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status())
    }

    /// A crash of the server: every backend ends at once, no checkpoint; the restart recovers
    /// from the WAL.
    pub fn stop_immediate(&self) {
        let stopped = ok(self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .status());
        assert!(stopped, "pg_ctl stop -m immediate failed: {}", self.log());
    }

    /// The postmaster's pid, from `postmaster.pid`.
    fn postmaster_pid(&self) -> Option<String> {
        let text = std::fs::read_to_string(self.data().join("postmaster.pid")).ok()?;
        Some(text.lines().next()?.trim().to_owned())
    }

    /// Whether the postmaster of `postmaster.pid` runs (a zombie does not).
    fn postmaster_alive(&self) -> bool {
        self.postmaster_pid().is_some_and(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(") ")
                    .is_some_and(|(_, rest)| !rest.starts_with('Z'))
            })
        })
    }

    /// A harder crash: `kill -9` of the postmaster alone (its backends notice and exit).
    pub fn kill_postmaster(&self) {
        let pid = self.postmaster_pid();
        let pid = pid.unwrap_or_else(|| panic!("no postmaster.pid: {}", self.log()));
        assert!(
            ok(Command::new("kill").args(["-9", &pid]).status()),
            "kill -9 {pid}"
        );
    }

    /// Starts the server again, retrying while the killed one's processes linger.
    pub fn restart(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.start() {
            assert!(
                Instant::now() < deadline,
                "the restart failed for 20 s: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The rows of one query as text (`psql -At`, one line a row), or `None` when the server
    /// does not answer.
    pub fn psql(&self, sql: &str) -> Option<String> {
        let out = Command::new(self.bin.join("psql"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-d", "postgres", "-X", "-A", "-t", "-q"])
            .args(["-v", "ON_ERROR_STOP=1", "-c", sql])
            .env("PGCONNECT_TIMEOUT", "2")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Waits until the server accepts connections again (after a crash it recovers by itself
    /// or after [`Cluster::restart`]); false after `limit`.
    pub fn wait_until_up(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            if self.psql("SELECT 1").is_some_and(|t| t.trim() == "1") {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `kill -9` of one backend whose `application_name` starts with `prefix`, preferring one
    /// serving a call (a statement running or a transaction open) seen within `look`; the
    /// postmaster then ends every backend and recovers by itself. The pid and what the backend
    /// was doing, or `None` when no such backend was found.
    pub fn kill_backend(&self, prefix: &str, look: Duration, rng: &mut Rng) -> Option<String> {
        let deadline = Instant::now() + look;
        let query = format!(
            "SELECT pid, state FROM pg_stat_activity \
             WHERE application_name LIKE '{prefix}%' AND pid <> pg_backend_pid() ORDER BY pid"
        );
        let mut idle: Vec<(String, String)> = Vec::new();
        loop {
            let rows: Vec<(String, String)> = self
                .psql(&query)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.split_once('|'))
                .map(|(pid, state)| (pid.to_owned(), state.to_owned()))
                .collect();
            let busy: Vec<&(String, String)> = rows
                .iter()
                .filter(|(_, state)| state == "active" || state.starts_with("idle in transaction"))
                .collect();
            let pick = if busy.is_empty() {
                if !rows.is_empty() {
                    idle = rows.clone();
                }
                None
            } else {
                Some(busy[rng.below(busy.len() as u64) as usize].clone())
            };
            let pick = match pick {
                Some(pick) => Some(pick),
                None if Instant::now() > deadline => {
                    (!idle.is_empty()).then(|| idle[rng.below(idle.len() as u64) as usize].clone())
                }
                None => {
                    std::thread::sleep(Duration::from_millis(2));
                    continue;
                }
            };
            let (pid, state) = pick?;
            return ok(Command::new("kill")
                .args(["-9", &pid])
                .stderr(Stdio::null())
                .status())
            .then(|| format!("backend {pid} ({state})"));
        }
    }

    /// A URL of the cluster's `postgres` database.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The database faults of [`crate::multiproc::db_outage`]: `kill -9` of the postmaster (then a
/// restart on the same data directory and port), or of the backend serving a WorkRail call
/// (the postmaster then recovers by itself), alternating from a seeded first choice.
impl DatabaseFaults for Cluster {
    fn kill(&self, round: u64, rng: &mut Rng) -> Result<String, String> {
        if round.is_multiple_of(2) {
            self.kill_postmaster();
            Ok("kill -9 of the postmaster".to_owned())
        } else {
            match self.kill_backend("workrail-", Duration::from_millis(300), rng) {
                Some(what) => Ok(format!("kill -9 of {what}")),
                None => {
                    // No WorkRail connection was open: the postmaster instead.
                    self.kill_postmaster();
                    Ok("kill -9 of the postmaster (no WorkRail backend was connected)".to_owned())
                }
            }
        }
    }

    fn restore(&self) -> Result<(), String> {
        // After a backend's death the postmaster restarts the others by itself; after its
        // own, it is started again.
        if !self.postmaster_alive() {
            self.restart();
        }
        if self.wait_until_up(Duration::from_secs(30)) {
            Ok(())
        } else {
            Err(format!(
                "the database did not come back within 30 s: {}",
                self.log()
            ))
        }
    }
}

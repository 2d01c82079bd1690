//! One `redis-server` process, and the standalone node built on it.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::external::{not_owned, parse_external_url, redact, refuse_in_external_mode};
use crate::tls::TlsFiles;
use crate::{
    redis_server_path, server_version, AdminConn, ServerVersion, EXTERNAL_CLUSTER_VAR, POLL,
};

const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;
const STARTUP_TIMEOUT: Duration = Duration::from_secs(15);
const START_ATTEMPTS: usize = 8;
const LOG_TAIL_LINES: usize = 50;
/// Client ports are drawn from here; the cluster bus uses `port - CLUSTER_PORT_OFFSET`.
const CLIENT_PORTS: std::ops::Range<u16> = 20000..30000;
/// Client ports of servers without `cluster-port`, whose bus is `port + CLUSTER_PORT_OFFSET`.
const FIXED_BUS_CLIENT_PORTS: std::ops::Range<u16> = 10000..30000;
const CLUSTER_PORT_OFFSET: u16 = 10000;

static COUNTER: AtomicU64 = AtomicU64::new(0);

// ---------------------------------------------------------------------------------------------
// Choosing ports
// ---------------------------------------------------------------------------------------------

fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    if let Ok(elapsed) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        hasher.write_u128(elapsed.as_nanos());
    }
    hasher.finish()
}

/// The kernel's ephemeral port range (`/proc/sys/net/ipv4/ip_local_port_range`).
fn ephemeral_range() -> (u16, u16) {
    let parsed = fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut parts = s.split_whitespace().map(str::parse::<u16>);
            match (parts.next(), parts.next()) {
                (Some(Ok(lo)), Some(Ok(hi))) => Some((lo, hi)),
                _ => None,
            }
        });
    parsed.unwrap_or((32768, 60999))
}

fn port_is_free(port: u16) -> bool {
    TcpListener::bind((LOOPBACK, port)).is_ok()
}

/// Where a cluster node's bus listens, relative to its client port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bus {
    /// `port - CLUSTER_PORT_OFFSET`, set with `cluster-port` (7.0 and later).
    Below,
    /// `port + CLUSTER_PORT_OFFSET`, the fixed default of older servers.
    Above,
}

impl Bus {
    fn for_server(version: ServerVersion) -> Bus {
        if version.has_cluster_port() {
            Bus::Below
        } else {
            Bus::Above
        }
    }

    fn client_ports(self) -> std::ops::Range<u16> {
        match self {
            Bus::Below => CLIENT_PORTS,
            Bus::Above => FIXED_BUS_CLIENT_PORTS,
        }
    }

    fn port(self, client: u16) -> u16 {
        match self {
            Bus::Below => client - CLUSTER_PORT_OFFSET,
            Bus::Above => client + CLUSTER_PORT_OFFSET,
        }
    }
}

/// Picks a client port (and a cluster-bus port when `bus` is given), both outside the
/// ephemeral range, free right now, and never handed out before in this process.
fn pick_ports(bus: Option<Bus>) -> Result<(u16, Option<u16>), String> {
    static HANDED_OUT: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    let (lo, hi) = ephemeral_range();
    let ephemeral = |p: u16| (lo..=hi).contains(&p);
    let range = bus.map_or(CLIENT_PORTS, Bus::client_ports);
    let mut candidates: Vec<u16> = range
        .clone()
        .filter(|&p| !ephemeral(p) && !bus.is_some_and(|b| ephemeral(b.port(p))))
        .collect();
    if candidates.is_empty() {
        // A strange ephemeral range: still bind-check, and rely on the restart-on-failure loop.
        candidates = range.clone().collect();
    }
    let start = (random_u64() % candidates.len() as u64) as usize;
    let mut handed_out = lock(HANDED_OUT.get_or_init(|| Mutex::new(HashSet::new())));
    for i in 0..candidates.len() {
        let port = candidates[(start + i) % candidates.len()];
        let cluster_port = bus.map(|b| b.port(port));
        if handed_out.contains(&port) || cluster_port.is_some_and(|c| handed_out.contains(&c)) {
            continue;
        }
        if !port_is_free(port) || cluster_port.is_some_and(|c| !port_is_free(c)) {
            continue;
        }
        handed_out.insert(port);
        if let Some(c) = cluster_port {
            handed_out.insert(c);
        }
        return Ok((port, cluster_port));
    }
    Err(format!("no free loopback port in {range:?}"))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn keep_dirs() -> bool {
    std::env::var_os("BOTMESH_KEEP_REDIS").is_some_and(|v| !v.is_empty() && v != "0")
}

fn tail(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

// ---------------------------------------------------------------------------------------------
// One redis-server process
// ---------------------------------------------------------------------------------------------

/// An optional ACL user name and a password.
pub(crate) type Credentials = (Option<String>, String);

/// Credentials the harness uses for its own connections, tried in order.
#[derive(Clone, Debug, Default)]
pub(crate) struct AdminAuth {
    pub(crate) candidates: Vec<Credentials>,
}

impl AdminAuth {
    pub(crate) fn connect(&self, addr: SocketAddr, timeout: Duration) -> Result<AdminConn, String> {
        let mut conn = AdminConn::connect_timeout(addr, timeout)?;
        let mut last_error = None;
        for (user, password) in &self.candidates {
            match conn.auth(user.as_deref(), password) {
                Ok(()) => return Ok(conn),
                Err(e) => {
                    last_error = Some(e);
                    // AUTH failures keep the connection usable; I/O failures do not.
                    if conn.is_broken() {
                        conn = AdminConn::connect_timeout(addr, timeout)?;
                    }
                }
            }
        }
        match last_error {
            Some(e) => Err(format!("authenticate to {addr}: {e}")),
            None => Ok(conn),
        }
    }
}

/// Where one server listens: its ports, and whether also on a Unix socket in its directory.
#[derive(Clone, Copy)]
struct Ports {
    port: u16,
    cluster_port: Option<u16>,
    tls_port: Option<u16>,
    unix_socket: bool,
}

/// The Unix socket's file name in a server's directory.
const UNIX_SOCKET: &str = "redis.sock";

struct Processes {
    server: Child,
    /// Holds the write end of the watchdog's stdin: when this process ends, the pipe closes
    /// and the watchdog kills the server.
    watchdog: Option<Child>,
    killed: bool,
}

enum StartFailure {
    /// Lost a port race: try other ports.
    PortTaken(String),
    Fatal(String),
}

/// One `redis-server` process in its own temporary directory, or a node of an external
/// deployment (see [`shared_cluster`](crate::shared_cluster)) that the harness only talks to.
///
/// Dropping it kills the process (`SIGKILL`, by its pid) and deletes the directory, unless the
/// thread is panicking (then the log path and its last lines are printed and the directory is
/// kept) or `BOTMESH_KEEP_REDIS` is set. An external node is left alone; asking for its pid,
/// killing, pausing or resuming it fails with a message that says the test needs a server the
/// harness owns.
pub struct RedisServer {
    addr: SocketAddr,
    cluster_port: Option<u16>,
    tls_port: Option<u16>,
    /// The Unix socket's path, when it listens on one.
    unix_socket: Option<PathBuf>,
    dir: PathBuf,
    pid: u32,
    auth: AdminAuth,
    /// `None` for an external node.
    processes: Option<Mutex<Processes>>,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("addr", &self.addr)
            .field("pid", &self.pid)
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl RedisServer {
    /// Starts a server with `config` lines (the harness adds `bind`, `port`, `dir`, `logfile`,
    /// `cluster-port` when `cluster` and the server has it, `save ""` and `appendonly no`),
    /// retrying on other ports when it loses a port race.
    pub(crate) fn spawn(
        config: &[String],
        cluster: bool,
        tls: bool,
        auth: AdminAuth,
    ) -> Result<RedisServer, String> {
        RedisServer::spawn_binary(None, config, cluster, tls, false, auth)
    }

    /// [`RedisServer::spawn`] with another server binary than the suites' (`binary`), for a
    /// test that needs two server versions at once, and also listening on a Unix socket in its
    /// directory when `unix_socket` (`unixsocket`, `unixsocketperm 700`).
    pub(crate) fn spawn_binary(
        binary: Option<&Path>,
        config: &[String],
        cluster: bool,
        tls: bool,
        unix_socket: bool,
        auth: AdminAuth,
    ) -> Result<RedisServer, String> {
        refuse_in_external_mode()?;
        let binary = match binary {
            Some(path) => path.to_path_buf(),
            None => redis_server_path()?,
        };
        let version = server_version()?;
        let bus = cluster.then(|| Bus::for_server(version));
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let (port, cluster_port) = pick_ports(bus)?;
            // A TLS server keeps its plain port too, for the harness's own (plain) admin
            // connections; clients under test use the TLS port.
            let tls_port = if tls { Some(pick_ports(None)?.0) } else { None };
            let ports = Ports {
                port,
                cluster_port,
                tls_port,
                unix_socket,
            };
            match RedisServer::spawn_on(&binary, ports, config, auth.clone()) {
                Ok(server) => return Ok(server),
                Err(StartFailure::PortTaken(why)) => last = why,
                Err(StartFailure::Fatal(why)) => return Err(why),
            }
        }
        Err(format!(
            "redis-server could not get a free port after {START_ATTEMPTS} attempts: {last}"
        ))
    }

    /// Starts a sentinel (`redis-server <conf> --sentinel`) with `config` lines (its
    /// `sentinel monitor ...`), retrying on other ports when it loses a port race.
    pub(crate) fn spawn_sentinel(
        config: &[String],
        auth: AdminAuth,
    ) -> Result<RedisServer, String> {
        refuse_in_external_mode()?;
        let binary = redis_server_path()?;
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let ports = Ports {
                port: pick_ports(None)?.0,
                cluster_port: None,
                tls_port: None,
                unix_socket: false,
            };
            let args = ["--sentinel"];
            match RedisServer::spawn_with_args(&binary, ports, config, auth.clone(), &args) {
                Ok(server) => return Ok(server),
                Err(StartFailure::PortTaken(why)) => last = why,
                Err(StartFailure::Fatal(why)) => return Err(why),
            }
        }
        Err(format!(
            "a sentinel could not get a free port after {START_ATTEMPTS} attempts: {last}"
        ))
    }

    fn spawn_on(
        binary: &Path,
        ports: Ports,
        config: &[String],
        auth: AdminAuth,
    ) -> Result<RedisServer, StartFailure> {
        RedisServer::spawn_with_args(binary, ports, config, auth, &[])
    }

    /// [`RedisServer::spawn_on`], with `args` after the config file (`--sentinel`).
    fn spawn_with_args(
        binary: &Path,
        ports: Ports,
        config: &[String],
        auth: AdminAuth,
        args: &[&str],
    ) -> Result<RedisServer, StartFailure> {
        let Ports {
            port,
            cluster_port,
            tls_port,
            unix_socket,
        } = ports;
        let fatal = StartFailure::Fatal;
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("botmesh-redis-{}-{n}-{port}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(|e| fatal(format!("create {}: {e}", dir.display())))?;

        let mut lines = vec![
            "bind 127.0.0.1".to_owned(),
            format!("port {port}"),
            format!("dir \"{}\"", dir.display()),
            format!("logfile \"{}\"", dir.join("redis.log").display()),
            "daemonize no".to_owned(),
            "save \"\"".to_owned(),
            "appendonly no".to_owned(),
        ];
        // Older servers know neither line: DEBUG is always on there, and their bus port is
        // fixed at port + 10000 (which `pick_ports` chose free).
        if server_version().is_ok_and(|v| v.has_debug_switch()) {
            lines.push("enable-debug-command yes".to_owned());
        }
        if let Some(cluster_port) =
            cluster_port.filter(|&c| c != port.wrapping_add(CLUSTER_PORT_OFFSET))
        {
            lines.push(format!("cluster-port {cluster_port}"));
        }
        if let Some(tls_port) = tls_port {
            lines.push(format!("tls-port {tls_port}"));
        }
        // In the server's own directory, which is deleted with it; only its user may connect.
        let unix_socket = unix_socket.then(|| dir.join(UNIX_SOCKET));
        if let Some(path) = &unix_socket {
            lines.push(format!("unixsocket \"{}\"", path.display()));
            lines.push("unixsocketperm 700".to_owned());
        }
        lines.extend(config.iter().cloned());
        let conf = dir.join("redis.conf");
        let mut text = lines.join("\n");
        text.push('\n');
        fs::write(&conf, text).map_err(|e| fatal(format!("write {}: {e}", conf.display())))?;

        let stdio_path = dir.join("stdio.log");
        let stdio = fs::File::create(&stdio_path)
            .map_err(|e| fatal(format!("create {}: {e}", stdio_path.display())))?;
        let stderr = stdio
            .try_clone()
            .map_err(|e| fatal(format!("dup stdio log: {e}")))?;
        let server = Command::new(binary)
            .arg(&conf)
            .args(args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(stdio)
            .stderr(stderr)
            .spawn()
            .map_err(|e| fatal(format!("spawn {}: {e}", binary.display())))?;
        let pid = server.id();
        let mut processes = Processes {
            server,
            watchdog: None,
            killed: false,
        };
        match spawn_watchdog(pid, &dir) {
            Ok(watchdog) => processes.watchdog = Some(watchdog),
            Err(e) => {
                let _ = processes.server.kill();
                let _ = processes.server.wait();
                return Err(fatal(e));
            }
        }
        let server = RedisServer {
            addr: SocketAddr::from((LOOPBACK, port)),
            cluster_port,
            tls_port,
            unix_socket,
            dir,
            pid,
            auth,
            processes: Some(Mutex::new(processes)),
        };
        server.wait_ready()?;
        Ok(server)
    }

    /// Waits until the server answers and `INFO server` shows our pid (not another harness's
    /// server that won the port).
    fn wait_ready(&self) -> Result<(), StartFailure> {
        let processes = self.owned("wait for").map_err(StartFailure::Fatal)?;
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            let exited = lock(processes).server.try_wait();
            match exited {
                Ok(Some(status)) => {
                    let log = format!(
                        "{}\n{}",
                        tail(&self.dir.join("stdio.log"), 20),
                        tail(&self.log_path(), 20)
                    );
                    if self.tls_port.is_some() && built_without_tls(&log) {
                        return Err(StartFailure::Fatal(format!(
                            "{WITHOUT_TLS} ({}, {}); the TLS suites need a server built \
                             with TLS (BUILD_TLS=yes). Its log:\n{log}",
                            redis_server_path()
                                .map(|p| p.display().to_string())
                                .unwrap_or_default(),
                            server_version().map(|v| v.to_string()).unwrap_or_default(),
                        )));
                    }
                    let why = format!(
                        "redis-server on {} exited during startup ({status}):\n{log}",
                        self.addr
                    );
                    return Err(
                        if log.contains("Address already in use")
                            || log.contains("Failed listening on port")
                        {
                            StartFailure::PortTaken(why)
                        } else {
                            StartFailure::Fatal(why)
                        },
                    );
                }
                Ok(None) => {}
                Err(e) => return Err(StartFailure::Fatal(format!("wait for redis-server: {e}"))),
            }
            let last = match self.probe_pid() {
                Ok(pid) if pid == self.pid => return Ok(()),
                Ok(pid) => format!("port {} is served by pid {pid}, not ours", self.addr.port()),
                Err(e) => e,
            };
            if Instant::now() > deadline {
                return Err(StartFailure::Fatal(format!(
                    "redis-server on {} (pid {}) not ready after {STARTUP_TIMEOUT:?}: {last}\nlog {}:\n{}",
                    self.addr,
                    self.pid,
                    self.log_path().display(),
                    tail(&self.log_path(), LOG_TAIL_LINES)
                )));
            }
            thread::sleep(POLL);
        }
    }

    fn probe_pid(&self) -> Result<u32, String> {
        let mut conn = self.auth.connect(self.addr, Duration::from_millis(500))?;
        let info = conn.cmd(&["INFO", "server"])?;
        let info = parse_info(info.as_str().unwrap_or_default());
        info.get("process_id")
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| "INFO server has no process_id".to_owned())
    }

    /// The client address, `127.0.0.1:port`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The cluster-bus port, for cluster nodes.
    pub fn cluster_port(&self) -> Option<u16> {
        self.cluster_port
    }

    /// The TLS client port, for servers started with TLS.
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// The path of the Unix socket it also listens on, when started so
    /// ([`ServerOptions::unix_socket`]).
    pub fn unix_socket(&self) -> Option<&Path> {
        self.unix_socket.as_deref()
    }

    /// The server's process id; panics for an external node.
    pub fn pid(&self) -> u32 {
        if let Err(e) = self.owned("read the pid of") {
            panic!("{e}");
        }
        self.pid
    }

    /// A node of an external deployment: the harness talks to it and never steers it.
    pub(crate) fn external(addr: SocketAddr, auth: AdminAuth) -> RedisServer {
        RedisServer {
            addr,
            cluster_port: None,
            tls_port: None,
            unix_socket: None,
            dir: PathBuf::new(),
            pid: 0,
            auth,
            processes: None,
        }
    }

    /// Whether the harness started this process (false for a node of an external deployment).
    pub fn is_owned(&self) -> bool {
        self.processes.is_some()
    }

    fn owned(&self, what: &str) -> Result<&Mutex<Processes>, String> {
        self.processes
            .as_ref()
            .ok_or_else(|| not_owned(&format!("{what} {}", self.addr)))
    }

    /// The node's temporary directory (config, log, `nodes.conf`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The node's log file.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("redis.log")
    }

    /// The last `lines` lines of the node's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log_path(), lines)
    }

    /// A new connection, authenticated as the harness's admin (the `requirepass` password, if
    /// any).
    pub fn connect(&self) -> Result<AdminConn, String> {
        self.auth.connect(self.addr, AdminConn::DEFAULT_TIMEOUT)
    }

    /// Whether the process is still running (it was not killed and has not exited). An
    /// external node counts as running.
    pub fn is_alive(&self) -> bool {
        let Some(processes) = &self.processes else {
            return true;
        };
        let mut processes = lock(processes);
        !processes.killed && matches!(processes.server.try_wait(), Ok(None))
    }

    /// Kills the server with `SIGKILL` (by its pid) and reaps it; idempotent. Panics for an
    /// external node.
    pub fn kill(&self) {
        let processes = match self.owned("kill") {
            Ok(processes) => processes,
            Err(e) => panic!("{e}"),
        };
        let mut processes = lock(processes);
        if processes.killed {
            return;
        }
        processes.killed = true;
        // The watchdog goes first, so that it can never signal a reaped (reusable) pid.
        if let Some(mut watchdog) = processes.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
        let _ = processes.server.kill();
        let _ = processes.server.wait();
    }

    /// Stops the process with `SIGSTOP` (it keeps its sockets but answers nothing).
    pub fn pause(&self) -> Result<(), String> {
        self.signal("STOP")
    }

    /// Resumes a process stopped by [`RedisServer::pause`] (`SIGCONT`).
    pub fn resume(&self) -> Result<(), String> {
        self.signal("CONT")
    }

    fn signal(&self, name: &str) -> Result<(), String> {
        let processes = lock(self.owned(&format!("send SIG{name} to"))?);
        if processes.killed {
            return Err(format!("redis-server {} was killed", self.addr));
        }
        let status = Command::new("sh")
            .args([
                "-c",
                "kill -s \"$1\" \"$2\"",
                "botmesh-signal",
                name,
                &self.pid.to_string(),
            ])
            .status()
            .map_err(|e| format!("run kill: {e}"))?;
        drop(processes);
        if status.success() {
            Ok(())
        } else {
            Err(format!("kill -s {name} {} failed: {status}", self.pid))
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if !self.is_owned() {
            return;
        }
        self.kill();
        if thread::panicking() {
            eprintln!(
                "redis-server {} (pid {}) log kept at {}; last {LOG_TAIL_LINES} lines:\n{}",
                self.addr,
                self.pid,
                self.log_path().display(),
                self.log_tail(LOG_TAIL_LINES)
            );
        } else if !keep_dirs() {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

/// Starts `sh` that blocks reading a pipe whose write end only this process holds. When this
/// process ends (normally, by panic or by `SIGKILL`), the read returns and the watchdog kills the
/// server by pid and removes its directory (unless `BOTMESH_KEEP_REDIS` is set).
fn spawn_watchdog(server_pid: u32, dir: &Path) -> Result<Child, String> {
    const SCRIPT: &str = "read -r _ignored; kill -9 \"$1\" 2>/dev/null; \
                          if [ -z \"$3\" ]; then sleep 0.2; rm -rf \"$2\"; fi";
    Command::new("sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg("botmesh-redis-watchdog")
        .arg(server_pid.to_string())
        .arg(dir)
        .arg(if keep_dirs() { "keep" } else { "" })
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawn the watchdog shell (sh): {e}"))
}

/// Parses `INFO`/`CLUSTER INFO` text into `field -> value`.
pub fn parse_info(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|line| line.trim_end().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Single node
// ---------------------------------------------------------------------------------------------

/// Options of a single node (builder).
#[derive(Clone, Debug, Default)]
pub struct ServerOptions {
    password: Option<String>,
    acl_user: Option<(String, String)>,
    extra_config: Vec<String>,
    cluster_bus: bool,
    tls: Option<Arc<TlsFiles>>,
    unix_socket: bool,
    binary: Option<PathBuf>,
}

impl ServerOptions {
    /// No password, no ACL user, no extra configuration.
    pub fn new() -> ServerOptions {
        ServerOptions::default()
    }

    /// Runs this server binary instead of the suites' `redis-server` (a test that needs another
    /// server version beside the shared ones, for example a newer server's `DUMP` payloads).
    pub fn binary(mut self, path: impl Into<PathBuf>) -> ServerOptions {
        self.binary = Some(path.into());
        self
    }

    /// Sets `requirepass` (the `default` user's password).
    pub fn password(mut self, password: impl Into<String>) -> ServerOptions {
        self.password = Some(password.into());
        self
    }

    /// Adds the ACL user `user NAME on >PASS ~* &* +@all`.
    pub fn acl_user(
        mut self,
        name: impl Into<String>,
        password: impl Into<String>,
    ) -> ServerOptions {
        self.acl_user = Some((name.into(), password.into()));
        self
    }

    /// Adds a raw `redis.conf` line (for example `maxmemory-policy noeviction`, or a
    /// restricted `user` line).
    pub fn config(mut self, line: impl Into<String>) -> ServerOptions {
        self.extra_config.push(line.into());
        self
    }

    /// Gives the node a cluster-bus port chosen for the server's version, as the nodes of a
    /// [`RedisCluster`](crate::RedisCluster) get (`cluster-port` on 7.0 and later, the fixed port + 10000 before);
    /// [`RedisServer::cluster_port`] tells which. For a node started with `cluster-enabled yes`
    /// that joins a cluster later.
    pub fn cluster_bus(mut self) -> ServerOptions {
        self.cluster_bus = true;
        self
    }

    /// Also listens with TLS on a port of its own ([`SingleNode::tls_url`]), with the
    /// certificates of `files`; `auth_clients` is `tls-auth-clients` (`"no"`, `"optional"`,
    /// `"yes"`). The plain port stays open for the harness's admin connections.
    pub fn tls(mut self, files: Arc<TlsFiles>, auth_clients: &str) -> ServerOptions {
        self.extra_config.extend(files.server_config(auth_clients));
        self.tls = Some(files);
        self
    }

    /// Also listens on a Unix socket, `redis.sock` in the server's temporary directory, that
    /// only this user may open (`unixsocketperm 700`); [`SingleNode::unix_url`] names it. The
    /// TCP port stays open for the harness's admin connections.
    pub fn unix_socket(mut self) -> ServerOptions {
        self.unix_socket = true;
        self
    }

    fn config_lines(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(password) = &self.password {
            lines.push(format!("requirepass {password}"));
        }
        if let Some((name, password)) = &self.acl_user {
            lines.push(format!("user {name} on >{password} ~* &* +@all"));
        }
        lines.extend(self.extra_config.iter().cloned());
        lines
    }

    fn admin_auth(&self) -> AdminAuth {
        let mut candidates = Vec::new();
        if let Some(password) = &self.password {
            candidates.push((None, password.clone()));
        }
        if let Some((name, password)) = &self.acl_user {
            candidates.push((Some(name.clone()), password.clone()));
        }
        AdminAuth { candidates }
    }
}

/// A standalone (non-cluster) Redis node.
#[derive(Debug)]
pub struct SingleNode {
    server: RedisServer,
    options: ServerOptions,
    /// The URL of an external node, as given (credentials included).
    external_url: Option<String>,
}

impl SingleNode {
    /// Starts a node; panics with a clear message (e.g. [`MISSING_SERVER`](crate::MISSING_SERVER)) on failure.
    pub fn start(options: ServerOptions) -> SingleNode {
        match SingleNode::try_start(options) {
            Ok(node) => node,
            Err(e) => panic!("cannot start a single redis-server: {e}"),
        }
    }

    /// Starts a node.
    pub fn try_start(options: ServerOptions) -> Result<SingleNode, String> {
        let server = RedisServer::spawn_binary(
            options.binary.as_deref(),
            &options.config_lines(),
            options.cluster_bus,
            options.tls.is_some(),
            options.unix_socket,
            options.admin_auth(),
        )?;
        Ok(SingleNode {
            server,
            options,
            external_url: None,
        })
    }

    /// The standalone node at `url` (`redis://[user[:password]@]host:port`), which the
    /// harness does not own.
    pub(crate) fn external(url: &str) -> Result<SingleNode, String> {
        let (addr, credentials) = parse_external_url(url)?;
        let mut options = ServerOptions::new();
        match &credentials {
            Some((None, password)) => options.password = Some(password.clone()),
            Some((Some(user), password)) => {
                options.acl_user = Some((user.clone(), password.clone()));
            }
            None => {}
        }
        let server = RedisServer::external(
            addr,
            AdminAuth {
                candidates: credentials.into_iter().collect(),
            },
        );
        let info = server.connect()?.cmd(&["INFO", "cluster"])?;
        if parse_info(info.as_str().unwrap_or_default())
            .get("cluster_enabled")
            .is_some_and(|v| v == "1")
        {
            return Err(format!(
                "{} is a cluster node; give a standalone node, or the cluster in \
                 {EXTERNAL_CLUSTER_VAR}",
                redact(url)
            ));
        }
        Ok(SingleNode {
            server,
            options,
            external_url: Some(url.to_owned()),
        })
    }

    /// The client address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// `redis://127.0.0.1:PORT` (no credentials in it); for an external node, its URL as given
    /// (credentials included, so that clients built from it authenticate).
    pub fn url(&self) -> String {
        match &self.external_url {
            Some(url) => url.clone(),
            None => format!("redis://{}", self.addr()),
        }
    }

    /// `rediss://127.0.0.1:TLS_PORT` for a node started with [`ServerOptions::tls`].
    pub fn tls_url(&self) -> Option<String> {
        let port = self.server.tls_port()?;
        Some(format!("rediss://{}:{port}", self.addr().ip()))
    }

    /// `unix:///PATH/redis.sock` for a node started with [`ServerOptions::unix_socket`] (no
    /// credentials in it).
    pub fn unix_url(&self) -> Option<String> {
        let path = self.server.unix_socket()?;
        Some(format!("unix://{}", path.display()))
    }

    /// The `requirepass` password, if any.
    pub fn password(&self) -> Option<&str> {
        self.options.password.as_deref()
    }

    /// The ACL user's name and password, if any.
    pub fn acl_user(&self) -> Option<(&str, &str)> {
        self.options
            .acl_user
            .as_ref()
            .map(|(n, p)| (n.as_str(), p.as_str()))
    }

    /// An admin connection, already authenticated when the node has a password.
    pub fn conn(&self) -> Result<AdminConn, String> {
        self.server.connect()
    }

    /// A connection that has not authenticated.
    pub fn conn_unauthenticated(&self) -> Result<AdminConn, String> {
        AdminConn::connect(self.addr())
    }

    /// The process.
    pub fn server(&self) -> &RedisServer {
        &self.server
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_port_taken_by_someone_else_is_a_lost_race_not_a_failure() {
        let squatter = TcpListener::bind((LOOPBACK, 0)).unwrap();
        let port = squatter.local_addr().unwrap().port();
        let binary = redis_server_path().unwrap();
        let ports = Ports {
            port,
            cluster_port: None,
            tls_port: None,
            unix_socket: false,
        };
        match RedisServer::spawn_on(&binary, ports, &[], AdminAuth::default()) {
            Err(StartFailure::PortTaken(_)) => {}
            Err(StartFailure::Fatal(e)) => panic!("misclassified: {e}"),
            Ok(server) => panic!("started on a taken port: {server:?}"),
        }
    }

    #[test]
    fn bus_ports_stay_outside_the_ephemeral_range() {
        let (lo, hi) = ephemeral_range();
        for bus in [Bus::Below, Bus::Above] {
            let (port, cluster_port) = pick_ports(Some(bus)).unwrap();
            let cluster_port = cluster_port.unwrap();
            assert_eq!(cluster_port, bus.port(port));
            for p in [port, cluster_port] {
                assert!(!(lo..=hi).contains(&p), "{bus:?}: {p} is ephemeral");
            }
        }
        let (port, none) = pick_ports(None).unwrap();
        assert!(none.is_none() && !(lo..=hi).contains(&port));
    }
}

/// The first words of the error a TLS test gets from a server built without TLS.
pub const WITHOUT_TLS: &str = "this redis-server was built without TLS: it cannot serve `tls-port`";

/// Whether a server's startup log says it was built without TLS: Redis refuses the `tls-port`
/// line as a directive it does not know (`>>> 'tls-port N'` then `Bad directive or wrong
/// number of arguments`); Valkey knows the directive but finds no TLS connection type
/// (`Failed finding TLS support`).
fn built_without_tls(log: &str) -> bool {
    (log.contains(">>> 'tls-port") && log.contains("Bad directive"))
        || log.contains("Failed finding TLS support")
}

#[cfg(test)]
mod tls_build_tests {
    use super::built_without_tls;

    #[test]
    fn a_server_built_without_tls_is_told_from_other_startup_failures() {
        // What Redis 6.2.14 built without TLS prints for a config with `tls-port`.
        let without = "*** FATAL CONFIG FILE ERROR (Redis 6.2.14) ***\n\
                       Reading the configuration file, at line 9\n\
                       >>> 'tls-port 24001'\n\
                       Bad directive or wrong number of arguments";
        assert!(built_without_tls(without));
        let port_taken = "# Could not create server TCP listening socket 127.0.0.1:24001: \
                          bind: Address already in use";
        assert!(!built_without_tls(port_taken));
        let other_directive =
            ">>> 'cluster-port 14001'\nBad directive or wrong number of arguments";
        assert!(!built_without_tls(other_directive));
    }
}

//! Real `redis-server` processes for integration tests.
//!
//! The harness starts single nodes and Redis Clusters on loopback, each node in its own temporary
//! directory, and talks to them through a tiny blocking [`AdminConn`]. It is test support: it
//! favours clear failure messages over speed, and it never lets a server outlive the test process.
//!
//! # What it guarantees
//!
//! - `redis-server` is found through `REDIS_SERVER` or `PATH`; when it is missing, starting a
//!   server fails (or panics) with a message that says how to install it. Nothing passes
//!   silently. Redis 6.2, 7.0 and 7.4 and Valkey 8 and 9 are supported: the harness asks the
//!   binary its version once ([`server_version`]) and adapts the configuration to it.
//! - Ports are chosen at random, outside the kernel's ephemeral range, checked free by binding,
//!   and a server that loses a port race is restarted on other ports. Client ports come from
//!   `20000..30000` with the cluster bus on `port - 10000` (`cluster-port`); servers older than
//!   7.0 have no `cluster-port`, so their bus is the fixed `port + 10000` and their client ports
//!   come from `10000..30000`, keeping only those whose bus port is outside the ephemeral range
//!   too. A server is only used once `INFO server` reports *its* pid.
//! - Every server has a watchdog (`sh`, waiting on a pipe held by the test process) that kills the
//!   server with `SIGKILL` by pid when the test process ends, even if the server sits in a
//!   `static` that is never dropped. Dropping a [`RedisServer`] kills it by pid and deletes its
//!   directory; during a panic the directory is kept and the log path and tail are printed. Set
//!   `BOTMESH_KEEP_REDIS=1` to keep every directory.
//! - Cluster helpers synchronise by polling with an overall deadline, never by fixed sleeps:
//!   [`RedisCluster::wait_ok`] checks `CLUSTER INFO`, `CLUSTER NODES`, `CLUSTER SLOTS` and the
//!   replication links of every live node.
//!
//! Tests that change topology (failover, kill, slot moves) must start their own cluster with
//! [`RedisCluster::start`]; other tests share [`shared_cluster`] and [`shared_single`] and keep
//! their keys apart with [`unique_prefix`].
//!
//! # External mode
//!
//! With `BOTMESH_TEST_CLUSTER` or `BOTMESH_TEST_SINGLE` set ([`external_mode`]), the shared
//! instances are a deployment the user gives, and the harness starts and steers nothing: a test
//! that starts its own servers, or moves slots, fails over, kills or pauses nodes, fails with a
//! message saying it needs servers the harness owns. Tests that only use the shared instances
//! therefore run unchanged against a user's own deployment.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::fs;
use std::hash::{BuildHasher, Hasher};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use redis_protocol::resp2::decode::decode_bytes_mut;
use redis_protocol::resp2::encode::extend_encode;
use redis_protocol::resp2::types::BytesFrame;

/// Number of hash slots in a Redis Cluster.
pub const SLOT_COUNT: u16 = 16384;

/// The message given when no `redis-server` binary can be found.
pub const MISSING_SERVER: &str = "redis-server not found: install it with \
     `apt-get update && apt-get install -y redis-server`, or set REDIS_SERVER";

const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;
const POLL: Duration = Duration::from_millis(25);
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
// Values and the admin connection
// ---------------------------------------------------------------------------------------------

/// A decoded RESP2 reply.
#[derive(Clone, PartialEq, Eq)]
pub enum Value {
    /// The null bulk string or null array.
    Nil,
    /// A simple string such as `OK` or `PONG`.
    Simple(String),
    /// An error reply, without the leading `-` (for example `MOVED 3999 127.0.0.1:20001`).
    Error(String),
    /// An integer reply.
    Int(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// An array.
    Array(Vec<Value>),
}

impl Value {
    /// The text of a simple string, or of a bulk string that is valid UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Simple(s) => Some(s),
            Value::Bulk(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The bytes of a bulk or simple string.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::Simple(s) => Some(s.as_bytes()),
            Value::Bulk(b) => Some(b),
            _ => None,
        }
    }

    /// An integer reply, or a string reply that parses as one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Value::Int(i) => Some(*i),
            other => other.as_str().and_then(|s| s.parse().ok()),
        }
    }

    /// The items of an array reply.
    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(items) => Some(items),
            _ => None,
        }
    }

    /// The text of an error reply.
    pub fn as_error(&self) -> Option<&str> {
        match self {
            Value::Error(e) => Some(e),
            _ => None,
        }
    }

    /// Whether this is the simple string `OK`.
    pub fn is_ok(&self) -> bool {
        matches!(self, Value::Simple(s) if s == "OK")
    }

    /// Whether this is [`Value::Nil`].
    pub fn is_nil(&self) -> bool {
        matches!(self, Value::Nil)
    }

    fn from_frame(frame: BytesFrame) -> Value {
        match frame {
            BytesFrame::SimpleString(s) => Value::Simple(String::from_utf8_lossy(&s).into_owned()),
            BytesFrame::Error(e) => Value::Error(e.to_string()),
            BytesFrame::Integer(i) => Value::Int(i),
            BytesFrame::BulkString(b) => Value::Bulk(b.to_vec()),
            BytesFrame::Array(items) => {
                Value::Array(items.into_iter().map(Value::from_frame).collect())
            }
            BytesFrame::Null => Value::Nil,
        }
    }
}

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Nil => f.write_str("nil"),
            Value::Simple(s) => write!(f, "+{s}"),
            Value::Error(e) => write!(f, "-{e}"),
            Value::Int(i) => write!(f, ":{i}"),
            Value::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Value::Array(items) => f.debug_list().entries(items).finish(),
        }
    }
}

/// A small blocking connection for administration and assertions in tests.
///
/// Requests go out one at a time (or as a [`pipeline`](AdminConn::pipeline)) and the connection
/// has read and write timeouts, so a dead or paused node gives an error, not a hang. After an I/O
/// or protocol error the connection is unusable: open a new one.
pub struct AdminConn {
    addr: SocketAddr,
    stream: TcpStream,
    buf: BytesMut,
    broken: Option<String>,
}

impl fmt::Debug for AdminConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminConn")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl AdminConn {
    /// Connect and read timeout used by [`AdminConn::connect`].
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

    /// Connects to `addr` without authenticating, with [`AdminConn::DEFAULT_TIMEOUT`].
    pub fn connect(addr: SocketAddr) -> Result<AdminConn, String> {
        AdminConn::connect_timeout(addr, AdminConn::DEFAULT_TIMEOUT)
    }

    /// Connects to `addr` without authenticating; `timeout` bounds the connect and every read
    /// and write.
    pub fn connect_timeout(addr: SocketAddr, timeout: Duration) -> Result<AdminConn, String> {
        let stream = TcpStream::connect_timeout(&addr, timeout)
            .map_err(|e| format!("connect to {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let mut conn = AdminConn {
            addr,
            stream,
            buf: BytesMut::with_capacity(16 * 1024),
            broken: None,
        };
        conn.set_timeout(timeout)?;
        Ok(conn)
    }

    /// The address this connection talks to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Sets the read and write timeout.
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<(), String> {
        self.stream
            .set_read_timeout(Some(timeout))
            .and_then(|()| self.stream.set_write_timeout(Some(timeout)))
            .map_err(|e| format!("set timeout on {}: {e}", self.addr))
    }

    /// Sends `AUTH [user] password`; fails with the server's error text (e.g. `WRONGPASS ...`).
    pub fn auth(&mut self, user: Option<&str>, password: &str) -> Result<(), String> {
        let reply = match user {
            Some(user) => self.cmd(&["AUTH", user, password])?,
            None => self.cmd(&["AUTH", password])?,
        };
        if reply.is_ok() {
            Ok(())
        } else {
            Err(format!("AUTH on {}: unexpected reply {reply:?}", self.addr))
        }
    }

    /// Sends one command and returns its reply. An error reply is `Ok(Value::Error(..))`;
    /// `Err` means an I/O or protocol failure (the connection is then unusable).
    pub fn call<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Value, String> {
        self.send(&[command_frame(args)])?;
        self.receive()
    }

    /// Sends one command; an error reply becomes `Err` holding its text as the server sent it
    /// (e.g. `MOVED 3999 127.0.0.1:20001`), as does an I/O failure. Use [`AdminConn::call`] to
    /// tell the two apart.
    pub fn cmd<A: AsRef<[u8]>>(&mut self, args: &[A]) -> Result<Value, String> {
        match self.call(args)? {
            Value::Error(e) => Err(e),
            value => Ok(value),
        }
    }

    /// Writes every command at once, then reads one reply per command (error replies are
    /// `Value::Error` items).
    pub fn pipeline<C, A>(&mut self, commands: &[C]) -> Result<Vec<Value>, String>
    where
        C: AsRef<[A]>,
        A: AsRef<[u8]>,
    {
        let frames: Vec<BytesFrame> = commands.iter().map(|c| command_frame(c.as_ref())).collect();
        self.send(&frames)?;
        (0..frames.len()).map(|_| self.receive()).collect()
    }

    fn fail(&mut self, what: String) -> String {
        let message = format!("admin connection to {}: {what}", self.addr);
        self.broken = Some(message.clone());
        message
    }

    fn send(&mut self, frames: &[BytesFrame]) -> Result<(), String> {
        if let Some(broken) = &self.broken {
            return Err(format!("connection already failed: {broken}"));
        }
        let mut out = BytesMut::new();
        for frame in frames {
            if let Err(e) = extend_encode(&mut out, frame, false) {
                return Err(self.fail(format!("encode: {e:?}")));
            }
        }
        if let Err(e) = self.stream.write_all(&out) {
            return Err(self.fail(format!("write: {e}")));
        }
        Ok(())
    }

    fn receive(&mut self) -> Result<Value, String> {
        if let Some(broken) = &self.broken {
            return Err(format!("connection already failed: {broken}"));
        }
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match decode_bytes_mut(&mut self.buf) {
                Ok(Some((frame, _, _))) => return Ok(Value::from_frame(frame)),
                Ok(None) => {}
                Err(e) => return Err(self.fail(format!("malformed reply: {e:?}"))),
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(self.fail("connection closed by the server".to_owned())),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(format!("read: {e}"))),
            }
        }
    }
}

fn command_frame<A: AsRef<[u8]>>(args: &[A]) -> BytesFrame {
    BytesFrame::Array(
        args.iter()
            .map(|a| BytesFrame::BulkString(Bytes::copy_from_slice(a.as_ref())))
            .collect(),
    )
}

// ---------------------------------------------------------------------------------------------
// Finding the binary, choosing ports
// ---------------------------------------------------------------------------------------------

/// The `redis-server` to run: `$REDIS_SERVER` if set, else the first `redis-server` on `PATH`.
/// The error is [`MISSING_SERVER`] (plus the offending value of `REDIS_SERVER`, if any).
pub fn redis_server_path() -> Result<PathBuf, String> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            find_redis_server(std::env::var_os("REDIS_SERVER"), std::env::var_os("PATH"))
        })
        .clone()
}

fn find_redis_server(
    explicit: Option<std::ffi::OsString>,
    path: Option<std::ffi::OsString>,
) -> Result<PathBuf, String> {
    if let Some(explicit) = explicit.filter(|e| !e.is_empty()) {
        let explicit = PathBuf::from(explicit);
        return if explicit.is_file() {
            Ok(explicit)
        } else {
            Err(format!(
                "{MISSING_SERVER} (REDIS_SERVER={} is not a file)",
                explicit.display()
            ))
        };
    }
    path.iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| MISSING_SERVER.to_owned())
}

/// Which server family a binary belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Product {
    /// Redis.
    Redis,
    /// Valkey (forked from Redis 7.2.4; its versions start at 7.2).
    Valkey,
}

/// The product and version of a server, from `redis-server --version` or `INFO server`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerVersion {
    /// Redis or Valkey.
    pub product: Product,
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch level.
    pub patch: u32,
}

impl ServerVersion {
    /// Parses the output of `redis-server --version` (`Redis server v=7.0.15 sha=...`, or
    /// `Valkey server v=8.1.8 ...`).
    pub fn parse(text: &str) -> Option<ServerVersion> {
        let product = if text.starts_with("Valkey") {
            Product::Valkey
        } else if text.starts_with("Redis") {
            Product::Redis
        } else {
            return None;
        };
        let number = text
            .split_whitespace()
            .find_map(|word| word.strip_prefix("v="))?;
        ServerVersion::from_number(product, number)
    }

    fn from_number(product: Product, number: &str) -> Option<ServerVersion> {
        let mut parts = number.split('.').map(str::parse::<u32>);
        let (major, minor, patch) = (
            parts.next()?.ok()?,
            parts.next()?.ok()?,
            parts.next()?.ok()?,
        );
        Some(ServerVersion {
            product,
            major,
            minor,
            patch,
        })
    }

    /// The version a running server reports in `INFO server` (`valkey_version` on Valkey,
    /// whose `redis_version` stays at 7.2.4).
    pub fn from_info(info: &BTreeMap<String, String>) -> Option<ServerVersion> {
        match info.get("valkey_version") {
            Some(number) => ServerVersion::from_number(Product::Valkey, number),
            None => ServerVersion::from_number(Product::Redis, info.get("redis_version")?),
        }
    }

    /// Whether the version is `major.minor` or later. Valkey counts from its own numbers, all
    /// above Redis 7.2.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }

    /// Whether the server knows `cluster-port` (7.0); before, the bus is always port + 10000.
    pub fn has_cluster_port(&self) -> bool {
        self.at_least(7, 0)
    }

    /// Whether `DEBUG` must be switched on with `enable-debug-command` (7.0); before, it is
    /// always available.
    pub fn has_debug_switch(&self) -> bool {
        self.at_least(7, 0)
    }

    /// Whether a multi-key request whose keys a live migration has split between source and
    /// target gets `ASK` from the source (before 7.0) instead of `TRYAGAIN` (the target then
    /// answers `TRYAGAIN` to the `ASKING` retry).
    pub fn asks_on_split_keys(&self) -> bool {
        !self.at_least(7, 0)
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.product {
            Product::Redis => "Redis",
            Product::Valkey => "Valkey",
        };
        write!(f, "{name} {}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The version of the servers the tests run on: of the external deployment in external mode
/// (see [`shared_cluster`]), else of [`redis_server_path`] (`--version`, asked once).
pub fn server_version() -> Result<ServerVersion, String> {
    static FOUND: OnceLock<Result<ServerVersion, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| match external_urls() {
            Some(urls) => external_version(&urls),
            None => binary_version(&redis_server_path()?),
        })
        .clone()
}

fn binary_version(binary: &Path) -> Result<ServerVersion, String> {
    let output = Command::new(binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run {} --version: {e}", binary.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "{} --version failed ({}): {text}{}",
            binary.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    ServerVersion::parse(&text).ok_or_else(|| {
        format!(
            "{} --version printed no Redis or Valkey version: {text:?}",
            binary.display()
        )
    })
}

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
type Credentials = (Option<String>, String);

/// Credentials the harness uses for its own connections, tried in order.
#[derive(Clone, Debug, Default)]
struct AdminAuth {
    candidates: Vec<Credentials>,
}

impl AdminAuth {
    fn connect(&self, addr: SocketAddr, timeout: Duration) -> Result<AdminConn, String> {
        let mut conn = AdminConn::connect_timeout(addr, timeout)?;
        let mut last_error = None;
        for (user, password) in &self.candidates {
            match conn.auth(user.as_deref(), password) {
                Ok(()) => return Ok(conn),
                Err(e) => {
                    last_error = Some(e);
                    // AUTH failures keep the connection usable; I/O failures do not.
                    if conn.broken.is_some() {
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
/// deployment (see [`shared_cluster`]) that the harness only talks to.
///
/// Dropping it kills the process (`SIGKILL`, by its pid) and deletes the directory, unless the
/// thread is panicking (then the log path and its last lines are printed and the directory is
/// kept) or `BOTMESH_KEEP_REDIS` is set. An external node is left alone; asking for its pid,
/// killing, pausing or resuming it fails with a message that says the test needs a server the
/// harness owns.
pub struct RedisServer {
    addr: SocketAddr,
    cluster_port: Option<u16>,
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
    fn spawn(config: &[String], cluster: bool, auth: AdminAuth) -> Result<RedisServer, String> {
        refuse_in_external_mode()?;
        let binary = redis_server_path()?;
        let version = server_version()?;
        let bus = cluster.then(|| Bus::for_server(version));
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            let (port, cluster_port) = pick_ports(bus)?;
            match RedisServer::spawn_on(&binary, port, cluster_port, config, auth.clone()) {
                Ok(server) => return Ok(server),
                Err(StartFailure::PortTaken(why)) => last = why,
                Err(StartFailure::Fatal(why)) => return Err(why),
            }
        }
        Err(format!(
            "redis-server could not get a free port after {START_ATTEMPTS} attempts: {last}"
        ))
    }

    fn spawn_on(
        binary: &Path,
        port: u16,
        cluster_port: Option<u16>,
        config: &[String],
        auth: AdminAuth,
    ) -> Result<RedisServer, StartFailure> {
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

    /// The server's process id; panics for an external node.
    pub fn pid(&self) -> u32 {
        if let Err(e) = self.owned("read the pid of") {
            panic!("{e}");
        }
        self.pid
    }

    /// A node of an external deployment: the harness talks to it and never steers it.
    fn external(addr: SocketAddr, auth: AdminAuth) -> RedisServer {
        RedisServer {
            addr,
            cluster_port: None,
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
}

impl ServerOptions {
    /// No password, no ACL user, no extra configuration.
    pub fn new() -> ServerOptions {
        ServerOptions::default()
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
    /// [`RedisCluster`] get (`cluster-port` on 7.0 and later, the fixed port + 10000 before);
    /// [`RedisServer::cluster_port`] tells which. For a node started with `cluster-enabled yes`
    /// that joins a cluster later.
    pub fn cluster_bus(mut self) -> ServerOptions {
        self.cluster_bus = true;
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
    /// Starts a node; panics with a clear message (e.g. [`MISSING_SERVER`]) on failure.
    pub fn start(options: ServerOptions) -> SingleNode {
        match SingleNode::try_start(options) {
            Ok(node) => node,
            Err(e) => panic!("cannot start a single redis-server: {e}"),
        }
    }

    /// Starts a node.
    pub fn try_start(options: ServerOptions) -> Result<SingleNode, String> {
        let server = RedisServer::spawn(
            &options.config_lines(),
            options.cluster_bus,
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
    fn external(url: &str) -> Result<SingleNode, String> {
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

// ---------------------------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------------------------

/// Options of a cluster (builder).
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    masters: usize,
    replicas_per_master: usize,
    node_timeout: Duration,
    password: Option<String>,
    extra_config: Vec<String>,
    ready_timeout: Duration,
}

impl Default for ClusterOptions {
    /// 3 masters x 1 replica, node timeout 1000 ms, no password, 60 s to become ready.
    fn default() -> ClusterOptions {
        ClusterOptions {
            masters: 3,
            replicas_per_master: 1,
            node_timeout: Duration::from_millis(1000),
            password: None,
            extra_config: Vec::new(),
            ready_timeout: Duration::from_secs(60),
        }
    }
}

impl ClusterOptions {
    /// The defaults (see [`ClusterOptions::default`]).
    pub fn new() -> ClusterOptions {
        ClusterOptions::default()
    }

    /// Sets the number of masters (at least 1).
    pub fn masters(mut self, masters: usize) -> ClusterOptions {
        self.masters = masters;
        self
    }

    /// Sets the number of replicas of each master.
    pub fn replicas_per_master(mut self, replicas: usize) -> ClusterOptions {
        self.replicas_per_master = replicas;
        self
    }

    /// Sets `cluster-node-timeout`.
    pub fn node_timeout(mut self, timeout: Duration) -> ClusterOptions {
        self.node_timeout = timeout;
        self
    }

    /// Sets `requirepass` and `masterauth` on every node.
    pub fn password(mut self, password: impl Into<String>) -> ClusterOptions {
        self.password = Some(password.into());
        self
    }

    /// Adds a raw `redis.conf` line to every node.
    pub fn config(mut self, line: impl Into<String>) -> ClusterOptions {
        self.extra_config.push(line.into());
        self
    }

    /// Sets the deadline of [`RedisCluster::wait_ok`] and of the topology changes.
    pub fn ready_timeout(mut self, timeout: Duration) -> ClusterOptions {
        self.ready_timeout = timeout;
        self
    }
}

/// A slot range as `CLUSTER SLOTS` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRange {
    /// First slot.
    pub start: u16,
    /// Last slot (inclusive).
    pub end: u16,
    /// The master serving the range.
    pub master: SocketAddr,
    /// The master's node id.
    pub master_id: String,
    /// Its replicas that the node reports (Redis omits replicas it deems unavailable).
    pub replicas: Vec<SocketAddr>,
}

struct ClusterNode {
    server: RedisServer,
    id: String,
}

/// Replication role of a live node, from `INFO replication`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Role {
    Master,
    Replica { master: SocketAddr, link_up: bool },
}

/// A Redis Cluster of real processes on loopback.
///
/// All methods take `&self` (the cluster can live in a `static`); topology queries ask the live
/// nodes every time, so they stay right after failovers and slot moves. Node addresses are
/// `127.0.0.1:port`, as the nodes announce themselves.
pub struct RedisCluster {
    nodes: Vec<ClusterNode>,
    options: ClusterOptions,
    /// The root URLs of an external deployment, as given.
    external_seeds: Option<Vec<String>>,
}

impl fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCluster")
            .field(
                "nodes",
                &self
                    .nodes
                    .iter()
                    .map(|n| n.server.addr())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl RedisCluster {
    /// Starts a cluster and waits until it is ready; panics with a clear message on failure.
    pub fn start(options: ClusterOptions) -> RedisCluster {
        match RedisCluster::try_start(options) {
            Ok(cluster) => cluster,
            Err(e) => panic!("cannot start a redis cluster: {e}"),
        }
    }

    /// Starts `masters x (1 + replicas)` nodes, joins them with `CLUSTER MEET`, gives each
    /// master an equal share of the slots (`CLUSTER ADDSLOTSRANGE`), attaches the replicas
    /// (`CLUSTER REPLICATE`, master `i % masters`) and waits for [`RedisCluster::wait_ok`].
    pub fn try_start(options: ClusterOptions) -> Result<RedisCluster, String> {
        if options.masters == 0 || options.masters > usize::from(SLOT_COUNT) {
            return Err(format!(
                "a cluster needs 1..=16384 masters, not {}",
                options.masters
            ));
        }
        let deadline = Instant::now() + options.ready_timeout;
        let timeout_ms = options.node_timeout.as_millis().max(1);
        let mut config = vec![
            "cluster-enabled yes".to_owned(),
            "cluster-config-file nodes.conf".to_owned(),
            format!("cluster-node-timeout {timeout_ms}"),
            // Predictable topology: replicas stay with their master, and any replica may take
            // over however long it was disconnected.
            "cluster-allow-replica-migration no".to_owned(),
            "cluster-replica-validity-factor 0".to_owned(),
            // A fresh master's replication offset stays 0 until its first replication PING, and
            // CLUSTER SLOTS hides replicas at offset 0: ping every second, not every 10 s. And
            // sync replicas at once instead of waiting 5 s for more of them.
            "repl-ping-replica-period 1".to_owned(),
            "repl-diskless-sync-delay 0".to_owned(),
        ];
        let mut auth = AdminAuth::default();
        if let Some(password) = &options.password {
            config.push(format!("requirepass {password}"));
            config.push(format!("masterauth {password}"));
            auth.candidates.push((None, password.clone()));
        }
        config.extend(options.extra_config.iter().cloned());

        let total = options.masters * (1 + options.replicas_per_master);
        let mut nodes = Vec::with_capacity(total);
        for _ in 0..total {
            let server = RedisServer::spawn(&config, true, auth.clone())?;
            let id = server
                .connect()?
                .cmd(&["CLUSTER", "MYID"])?
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("CLUSTER MYID on {}: not a string", server.addr()))?;
            nodes.push(ClusterNode { server, id });
        }
        let cluster = RedisCluster {
            nodes,
            options,
            external_seeds: None,
        };
        cluster.create(deadline)?;
        Ok(cluster)
    }

    fn create(&self, deadline: Instant) -> Result<(), String> {
        let masters = self.options.masters;
        let slots_per = usize::from(SLOT_COUNT);
        for (i, node) in self.nodes[..masters].iter().enumerate() {
            let mut conn = node.server.connect()?;
            conn.cmd(&["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()])
                .map_err(|e| format!("CLUSTER SET-CONFIG-EPOCH on {}: {e}", node.server.addr()))?;
            let start = i * slots_per / masters;
            let end = (i + 1) * slots_per / masters - 1;
            let (start, end) = (start.to_string(), end.to_string());
            if let Err(e) = conn.cmd(&["CLUSTER", "ADDSLOTSRANGE", &start, &end]) {
                // Older servers (< 7.0) lack ADDSLOTSRANGE.
                let mut args = vec!["CLUSTER".to_owned(), "ADDSLOTS".to_owned()];
                args.extend(
                    (i * slots_per / masters..=(i + 1) * slots_per / masters - 1)
                        .map(|s| s.to_string()),
                );
                conn.cmd(&args).map_err(|e2| {
                    format!(
                        "CLUSTER ADDSLOTSRANGE on {}: {e}; ADDSLOTS: {e2}",
                        node.server.addr()
                    )
                })?;
            }
        }
        let first = &self.nodes[0].server;
        let mut conn = first.connect()?;
        for node in &self.nodes[1..] {
            let port = node.server.port().to_string();
            let bus = node.server.cluster_port().unwrap_or_default().to_string();
            conn.cmd(&["CLUSTER", "MEET", "127.0.0.1", &port, &bus])
                .map_err(|e| {
                    format!(
                        "CLUSTER MEET {} from {}: {e}",
                        node.server.addr(),
                        first.addr()
                    )
                })?;
        }
        for (j, replica) in self.nodes[masters..].iter().enumerate() {
            let master = &self.nodes[j % masters];
            poll_until(deadline, "replica attaches to its master", || {
                let mut conn = replica.server.connect()?;
                conn.cmd(&["CLUSTER", "REPLICATE", &master.id])
                    .map(|_| ())
                    .map_err(|e| {
                        format!(
                            "CLUSTER REPLICATE {} on {}: {e}",
                            master.id,
                            replica.server.addr()
                        )
                    })
            })?;
        }
        poll_until(deadline, "cluster ready", || self.check_ok())?;
        // Each master owns its share.
        let ranges = self.slots()?;
        for node in &self.nodes[..masters] {
            if !ranges.iter().any(|r| r.master == node.server.addr()) {
                return Err(format!(
                    "master {} owns no slot after creation",
                    node.server.addr()
                ));
            }
        }
        Ok(())
    }

    fn live(&self) -> impl Iterator<Item = &ClusterNode> {
        self.nodes.iter().filter(|n| n.server.is_alive())
    }

    fn node(&self, addr: SocketAddr) -> Result<&ClusterNode, String> {
        self.nodes
            .iter()
            .find(|n| n.server.addr() == addr)
            .ok_or_else(|| format!("{addr} is not a node of this cluster"))
    }

    /// The options the cluster was started with.
    pub fn options(&self) -> &ClusterOptions {
        &self.options
    }

    /// The password of every node, if any.
    pub fn password(&self) -> Option<&str> {
        self.options.password.as_deref()
    }

    /// Addresses of every live node (masters and replicas).
    pub fn nodes(&self) -> Vec<SocketAddr> {
        self.live().map(|n| n.server.addr()).collect()
    }

    /// Seed addresses for a client: every live node, as `127.0.0.1:port` strings; for an
    /// external deployment, its root URLs as given (credentials included).
    pub fn seeds(&self) -> Vec<String> {
        match &self.external_seeds {
            Some(seeds) => seeds.clone(),
            None => self.nodes().iter().map(SocketAddr::to_string).collect(),
        }
    }

    /// Whether the harness started this cluster (false for an external deployment).
    pub fn is_owned(&self) -> bool {
        self.external_seeds.is_none()
    }

    fn refuse_external(&self, what: &str) -> Result<(), String> {
        if self.is_owned() {
            Ok(())
        } else {
            Err(not_owned(what))
        }
    }

    /// The cluster behind `urls`, which the harness does not own: its nodes as `CLUSTER NODES`
    /// lists them (failed and address-less nodes left out).
    fn external(urls: &[String]) -> Result<RedisCluster, String> {
        let mut credentials = None;
        let mut roots = Vec::new();
        for url in urls {
            let (addr, auth) = parse_external_url(url)?;
            credentials = credentials.or(auth);
            roots.push(addr);
        }
        let auth = AdminAuth {
            candidates: credentials.clone().into_iter().collect(),
        };
        let mut errors = Vec::new();
        let mut listing = None;
        for &root in &roots {
            match auth
                .connect(root, AdminConn::DEFAULT_TIMEOUT)
                .and_then(|mut c| c.cmd(&["CLUSTER", "NODES"]))
            {
                Ok(reply) => {
                    listing = Some(reply.as_str().unwrap_or_default().to_owned());
                    break;
                }
                Err(e) => errors.push(format!("{root}: {e}")),
            }
        }
        let listing =
            listing.ok_or_else(|| format!("no root node gave CLUSTER NODES: {errors:?}"))?;
        let mut nodes = Vec::new();
        for line in parse_cluster_nodes(&listing) {
            if line
                .flags
                .iter()
                .any(|f| matches!(f.as_str(), "fail" | "noaddr" | "handshake"))
            {
                continue;
            }
            // `ip:port@cport[,hostname]`
            let hostport = line.addr.split('@').next().unwrap_or_default();
            let (host, port) = hostport
                .rsplit_once(':')
                .ok_or_else(|| format!("CLUSTER NODES: bad address {:?}", line.addr))?;
            let port = port
                .parse()
                .map_err(|_| format!("CLUSTER NODES: bad port in {:?}", line.addr))?;
            nodes.push(ClusterNode {
                server: RedisServer::external(socket_addr(host, port)?, auth.clone()),
                id: line.id,
            });
        }
        let options = ClusterOptions {
            password: credentials.map(|(_, password)| password),
            ..ClusterOptions::default()
        };
        let cluster = RedisCluster {
            nodes,
            options,
            external_seeds: Some(urls.to_vec()),
        };
        let info = cluster.any_conn()?.cmd(&["CLUSTER", "INFO"])?;
        let state = parse_info(info.as_str().unwrap_or_default())
            .get("cluster_state")
            .cloned()
            .unwrap_or_default();
        if state != "ok" {
            return Err(format!("cluster_state is {state:?}, not ok"));
        }
        Ok(cluster)
    }

    /// The process of a node (live or killed).
    pub fn server(&self, addr: SocketAddr) -> Option<&RedisServer> {
        self.node(addr).ok().map(|n| &n.server)
    }

    /// The node id of a node.
    pub fn node_id(&self, addr: SocketAddr) -> Result<String, String> {
        self.node(addr).map(|n| n.id.clone())
    }

    /// An admin connection to a node (authenticated when the cluster has a password).
    pub fn conn(&self, addr: SocketAddr) -> Result<AdminConn, String> {
        self.node(addr)?.server.connect()
    }

    fn any_conn(&self) -> Result<AdminConn, String> {
        let mut errors = Vec::new();
        for node in self.live() {
            match node.server.connect() {
                Ok(conn) => return Ok(conn),
                Err(e) => errors.push(e),
            }
        }
        Err(format!("no live node answers: {errors:?}"))
    }

    fn role(&self, addr: SocketAddr) -> Result<Role, String> {
        let info = self.conn(addr)?.cmd(&["INFO", "replication"])?;
        let info = parse_info(info.as_str().unwrap_or_default());
        match info.get("role").map(String::as_str) {
            Some("master") => Ok(Role::Master),
            Some("slave") => {
                let host = info.get("master_host").cloned().unwrap_or_default();
                let port: u16 = info
                    .get("master_port")
                    .and_then(|p| p.parse().ok())
                    .ok_or_else(|| format!("{addr}: INFO replication without master_port"))?;
                let master = socket_addr(&host, port)?;
                let link_up = info.get("master_link_status").is_some_and(|s| s == "up");
                Ok(Role::Replica { master, link_up })
            }
            other => Err(format!("{addr}: unexpected role {other:?}")),
        }
    }

    fn roles(&self) -> Result<BTreeMap<SocketAddr, Role>, String> {
        self.live()
            .map(|n| Ok((n.server.addr(), self.role(n.server.addr())?)))
            .collect()
    }

    /// Live nodes that are masters (`INFO replication`), whether or not they own slots.
    pub fn masters(&self) -> Result<Vec<SocketAddr>, String> {
        Ok(self
            .roles()?
            .into_iter()
            .filter(|(_, r)| *r == Role::Master)
            .map(|(a, _)| a)
            .collect())
    }

    /// Live nodes that are replicas.
    pub fn replicas(&self) -> Result<Vec<SocketAddr>, String> {
        Ok(self
            .roles()?
            .into_iter()
            .filter(|(_, r)| *r != Role::Master)
            .map(|(a, _)| a)
            .collect())
    }

    /// Live replicas of `master`.
    pub fn replicas_of(&self, master: SocketAddr) -> Result<Vec<SocketAddr>, String> {
        Ok(self
            .roles()?
            .into_iter()
            .filter(|(_, r)| matches!(r, Role::Replica { master: m, .. } if *m == master))
            .map(|(a, _)| a)
            .collect())
    }

    /// `CLUSTER SLOTS` as seen by the first live node that answers.
    pub fn slots(&self) -> Result<Vec<SlotRange>, String> {
        let mut conn = self.any_conn()?;
        parse_cluster_slots(&conn.cmd(&["CLUSTER", "SLOTS"])?)
    }

    /// The master of `slot`, according to the first live node that answers (after the
    /// harness's own topology changes every node agrees).
    pub fn master_for_slot(&self, slot: u16) -> Result<SocketAddr, String> {
        self.slots()?
            .into_iter()
            .find(|r| (r.start..=r.end).contains(&slot))
            .map(|r| r.master)
            .ok_or_else(|| format!("no master serves slot {slot}"))
    }

    /// The master of the slot of `key`.
    pub fn master_for_key(&self, key: impl AsRef<[u8]>) -> Result<SocketAddr, String> {
        self.master_for_slot(self.key_slot(key)?)
    }

    /// The slot of `key`, computed by the server (`CLUSTER KEYSLOT`).
    pub fn key_slot(&self, key: impl AsRef<[u8]>) -> Result<u16, String> {
        let reply = self
            .any_conn()?
            .cmd(&[b"CLUSTER".as_slice(), b"KEYSLOT", key.as_ref()])?;
        reply
            .as_int()
            .and_then(|s| u16::try_from(s).ok())
            .ok_or_else(|| format!("CLUSTER KEYSLOT: unexpected reply {reply:?}"))
    }

    /// A connection to the master of the slot of `key`.
    pub fn conn_for_key(&self, key: impl AsRef<[u8]>) -> Result<AdminConn, String> {
        self.conn(self.master_for_key(key)?)
    }

    /// `FLUSHALL` on every live master. On a shared cluster this erases other tests' keys too:
    /// prefer [`unique_prefix`] there.
    pub fn flush_all(&self) -> Result<(), String> {
        self.refuse_external("FLUSHALL")?;
        for master in self.masters()? {
            self.conn(master)?.cmd(&["FLUSHALL"])?;
        }
        Ok(())
    }

    /// Waits (until the cluster's `ready_timeout`) for [`RedisCluster::check_ok`].
    pub fn wait_ok(&self) -> Result<(), String> {
        self.wait_ok_within(self.options.ready_timeout)
    }

    /// Waits at most `timeout` for [`RedisCluster::check_ok`]; the error names what was still
    /// wrong.
    pub fn wait_ok_within(&self, timeout: Duration) -> Result<(), String> {
        poll_until(Instant::now() + timeout, "cluster ok", || self.check_ok())
    }

    /// Checks once, on every live node, that:
    /// `CLUSTER INFO` says `cluster_state:ok` with 16384 slots ok; every replica's
    /// `master_link_status` is `up`; `CLUSTER NODES` knows every live node with the right role
    /// and master and without `fail`/`fail?`/`handshake`/`noaddr`; `CLUSTER SLOTS` covers all
    /// slots with live masters, lists exactly the live replicas of each, and is the same
    /// everywhere.
    pub fn check_ok(&self) -> Result<(), String> {
        let roles = self.roles()?;
        let ids: BTreeMap<SocketAddr, &str> = self
            .live()
            .map(|n| (n.server.addr(), n.id.as_str()))
            .collect();
        let mut expected_replicas: BTreeMap<SocketAddr, BTreeSet<SocketAddr>> = BTreeMap::new();
        for (addr, role) in &roles {
            if let Role::Replica { master, link_up } = role {
                if !link_up {
                    return Err(format!("replica {addr}: master_link_status is not up"));
                }
                if roles.get(master) != Some(&Role::Master) {
                    return Err(format!(
                        "replica {addr} follows {master}, which is not a live master"
                    ));
                }
                expected_replicas.entry(*master).or_default().insert(*addr);
            }
        }
        let mut reference: Option<(SocketAddr, SlotOwners)> = None;
        for &addr in roles.keys() {
            let mut conn = self.conn(addr)?;
            let info = conn.cmd(&["CLUSTER", "INFO"])?;
            let info = parse_info(info.as_str().unwrap_or_default());
            let field = |k: &str| info.get(k).map(String::as_str).unwrap_or("?");
            if field("cluster_state") != "ok" || field("cluster_slots_ok") != "16384" {
                return Err(format!(
                    "{addr}: cluster_state:{} cluster_slots_ok:{}",
                    field("cluster_state"),
                    field("cluster_slots_ok")
                ));
            }

            let nodes = conn.cmd(&["CLUSTER", "NODES"])?;
            let nodes = parse_cluster_nodes(nodes.as_str().unwrap_or_default());
            for (&other, role) in &roles {
                let id = ids.get(&other).copied().unwrap_or_default();
                let entry = nodes
                    .iter()
                    .find(|n| n.id == id)
                    .ok_or_else(|| format!("{addr}: CLUSTER NODES does not know {other} yet"))?;
                if let Some(bad) = entry
                    .flags
                    .iter()
                    .find(|f| matches!(f.as_str(), "fail" | "fail?" | "handshake" | "noaddr"))
                {
                    return Err(format!("{addr}: CLUSTER NODES flags {other} as {bad}"));
                }
                let right_role = match role {
                    Role::Master => entry.flags.iter().any(|f| f == "master"),
                    Role::Replica { master, .. } => {
                        entry.flags.iter().any(|f| f == "slave")
                            && ids.get(master).is_some_and(|m| *m == entry.master_id)
                    }
                };
                if !right_role {
                    return Err(format!(
                        "{addr}: CLUSTER NODES shows {other} as {:?} of {:?}, but it is {role:?}",
                        entry.flags, entry.master_id
                    ));
                }
            }

            let ranges = parse_cluster_slots(&conn.cmd(&["CLUSTER", "SLOTS"])?)?;
            let mut covered = 0usize;
            let mut owners = Vec::with_capacity(ranges.len());
            for range in &ranges {
                covered += usize::from(range.end - range.start) + 1;
                if roles.get(&range.master) != Some(&Role::Master) {
                    return Err(format!(
                        "{addr}: CLUSTER SLOTS gives {}-{} to {}, not a live master",
                        range.start, range.end, range.master
                    ));
                }
                let listed: BTreeSet<SocketAddr> = range.replicas.iter().copied().collect();
                let expected = expected_replicas
                    .get(&range.master)
                    .cloned()
                    .unwrap_or_default();
                if listed != expected {
                    return Err(format!(
                        "{addr}: CLUSTER SLOTS lists replicas {listed:?} for {} (slots {}-{}), expected {expected:?}",
                        range.master, range.start, range.end
                    ));
                }
                owners.push((range.start, range.end, range.master));
            }
            if covered != usize::from(SLOT_COUNT) {
                return Err(format!("{addr}: CLUSTER SLOTS covers {covered} slots"));
            }
            owners.sort();
            match &reference {
                None => reference = Some((addr, owners)),
                Some((first, theirs)) if *theirs != owners => {
                    return Err(format!("{addr} and {first} disagree on slot owners"));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Starts moving `slot` to the master `to`: `CLUSTER SETSLOT slot IMPORTING` on `to`, then
    /// `MIGRATING` on the current owner. Keys move with the returned [`Migration`].
    pub fn begin_migration(&self, slot: u16, to: SocketAddr) -> Result<Migration<'_>, String> {
        self.refuse_external(&format!("move slot {slot}"))?;
        if slot >= SLOT_COUNT {
            return Err(format!("slot {slot} out of range"));
        }
        let source = self.master_for_slot(slot)?;
        if source == to {
            return Err(format!("slot {slot} is already served by {to}"));
        }
        if self.role(to)? != Role::Master {
            return Err(format!("{to} is not a master"));
        }
        let source_id = self.node_id(source)?;
        let target_id = self.node_id(to)?;
        let slot_arg = slot.to_string();
        self.conn(to)?
            .cmd(&["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &source_id])
            .map_err(|e| format!("SETSLOT {slot} IMPORTING on {to}: {e}"))?;
        self.conn(source)?
            .cmd(&["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &target_id])
            .map_err(|e| format!("SETSLOT {slot} MIGRATING on {source}: {e}"))?;
        Ok(Migration {
            cluster: self,
            slot,
            source,
            target: to,
            target_id,
        })
    }

    /// Moves `slot` and all its keys to the master `to` (see [`Migration`]); returns the number
    /// of keys moved. When it returns, every live node maps the slot to `to`.
    pub fn move_slot(&self, slot: u16, to: SocketAddr) -> Result<usize, String> {
        self.begin_migration(slot, to)?.finish()
    }

    /// Manual failover of `master` to its first live replica (see
    /// [`RedisCluster::failover_to`]); returns the new master.
    pub fn failover(&self, master: SocketAddr) -> Result<SocketAddr, String> {
        let replica = self
            .replicas_of(master)?
            .into_iter()
            .next()
            .ok_or_else(|| format!("master {master} has no live replica to fail over to"))?;
        self.failover_to(replica)
    }

    /// Sends `CLUSTER FAILOVER` to `replica`, polls `ROLE` until it is a master (re-sending the
    /// failover when it silently timed out), then waits until the cluster agrees
    /// ([`RedisCluster::check_ok`]). Returns `replica`, now a master.
    pub fn failover_to(&self, replica: SocketAddr) -> Result<SocketAddr, String> {
        self.refuse_external(&format!("fail over to {replica}"))?;
        let deadline = Instant::now() + self.options.ready_timeout;
        // A manual failover gives up after 5 s (CLUSTER_MF_TIMEOUT) without telling anyone.
        let attempt_timeout = Duration::from_secs(6);
        let mut last = String::new();
        'attempts: loop {
            if Instant::now() > deadline {
                return Err(format!(
                    "failover to {replica} did not happen in time: {last}"
                ));
            }
            match self
                .conn(replica)
                .and_then(|mut c| c.cmd(&["CLUSTER", "FAILOVER"]))
            {
                Ok(_) => {}
                Err(e) => {
                    last = format!("CLUSTER FAILOVER on {replica}: {e}");
                    thread::sleep(Duration::from_millis(200));
                    continue;
                }
            }
            let attempt_end = Instant::now() + attempt_timeout;
            while Instant::now() < attempt_end.min(deadline) {
                if self.is_master_by_role(replica)? {
                    break 'attempts;
                }
                thread::sleep(POLL);
            }
            last =
                format!("{replica} was still a replica {attempt_timeout:?} after CLUSTER FAILOVER");
        }
        poll_until(deadline, "cluster ok after failover", || self.check_ok())?;
        Ok(replica)
    }

    fn is_master_by_role(&self, addr: SocketAddr) -> Result<bool, String> {
        let role = self.conn(addr)?.cmd(&["ROLE"])?;
        Ok(role
            .as_array()
            .and_then(|items| items.first())
            .and_then(Value::as_str)
            == Some("master"))
    }

    /// Kills `master` with `SIGKILL` (by pid), waits until one of its replicas is promoted and
    /// the cluster is ok again; returns the promoted replica.
    pub fn kill_master(&self, master: SocketAddr) -> Result<SocketAddr, String> {
        self.refuse_external(&format!("kill {master}"))?;
        let deadline = Instant::now() + self.options.ready_timeout;
        let replicas = self.replicas_of(master)?;
        if replicas.is_empty() {
            return Err(format!(
                "master {master} has no live replica: killing it would lose its slots"
            ));
        }
        self.node(master)?.server.kill();
        let promoted = poll_until(
            deadline,
            "a replica of the killed master is promoted",
            || {
                for &replica in &replicas {
                    if self.is_master_by_role(replica)? {
                        return Ok(replica);
                    }
                }
                Err(format!("none of {replicas:?} is a master yet"))
            },
        )?;
        poll_until(deadline, "cluster ok after killing a master", || {
            self.check_ok()
        })?;
        Ok(promoted)
    }
}

/// A slot being moved between two masters; see [`RedisCluster::begin_migration`].
///
/// While it lives, the slot is `MIGRATING` on the source and `IMPORTING` on the target: keys
/// already moved answer `ASK` on the source, and the target answers `MOVED` unless `ASKING`.
#[derive(Debug)]
pub struct Migration<'a> {
    cluster: &'a RedisCluster,
    slot: u16,
    source: SocketAddr,
    target: SocketAddr,
    target_id: String,
}

impl Migration<'_> {
    /// The slot.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The master the slot comes from.
    pub fn source(&self) -> SocketAddr {
        self.source
    }

    /// The master the slot goes to.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// Moves these keys (`MIGRATE ... REPLACE KEYS`); keys that do not exist are skipped.
    pub fn migrate_keys<K: AsRef<[u8]>>(&self, keys: &[K]) -> Result<(), String> {
        if keys.is_empty() {
            return Ok(());
        }
        let host = self.target.ip().to_string();
        let port = self.target.port().to_string();
        let mut args: Vec<&[u8]> = vec![
            b"MIGRATE",
            host.as_bytes(),
            port.as_bytes(),
            b"",
            b"0",
            b"10000",
            b"REPLACE",
        ];
        if let Some(password) = self.cluster.password() {
            args.extend([b"AUTH".as_slice(), password.as_bytes()]);
        }
        args.push(b"KEYS");
        args.extend(keys.iter().map(AsRef::as_ref));
        let reply = self.cluster.conn(self.source)?.cmd(&args).map_err(|e| {
            format!(
                "MIGRATE of {} keys of slot {} from {} to {}: {e}",
                keys.len(),
                self.slot,
                self.source,
                self.target
            )
        })?;
        match reply.as_str() {
            Some("OK" | "NOKEY") => Ok(()),
            _ => Err(format!("MIGRATE: unexpected reply {reply:?}")),
        }
    }

    /// Moves every key still in the slot on the source (`CLUSTER GETKEYSINSLOT` in batches);
    /// returns how many were moved.
    pub fn migrate_all_keys(&self) -> Result<usize, String> {
        let mut conn = self.cluster.conn(self.source)?;
        let slot = self.slot.to_string();
        let mut moved = 0;
        loop {
            let reply = conn.cmd(&["CLUSTER", "GETKEYSINSLOT", &slot, "100"])?;
            let keys: Vec<Vec<u8>> = reply
                .as_array()
                .ok_or_else(|| format!("GETKEYSINSLOT: unexpected reply {reply:?}"))?
                .iter()
                .filter_map(|k| k.as_bytes().map(<[u8]>::to_vec))
                .collect();
            if keys.is_empty() {
                return Ok(moved);
            }
            self.migrate_keys(&keys)?;
            moved += keys.len();
        }
    }

    /// Moves the remaining keys, then assigns the slot with `CLUSTER SETSLOT slot NODE target`
    /// on the target, the source and every other master, and waits until every live node maps
    /// the slot to the target. Returns the number of keys moved by this call.
    pub fn finish(self) -> Result<usize, String> {
        let moved = self.migrate_all_keys()?;
        let slot = self.slot.to_string();
        let assign = |addr: SocketAddr| {
            self.cluster
                .conn(addr)?
                .cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &self.target_id])
                .map(|_| ())
                .map_err(|e| format!("SETSLOT {slot} NODE on {addr}: {e}"))
        };
        assign(self.target)?;
        assign(self.source)?;
        for master in self.cluster.masters()? {
            if master != self.target && master != self.source {
                assign(master)?;
            }
        }
        let deadline = Instant::now() + self.cluster.options.ready_timeout;
        poll_until(
            deadline,
            "every node maps the moved slot to its target",
            || {
                for node in self.cluster.live() {
                    let mut conn = node.server.connect()?;
                    let ranges = parse_cluster_slots(&conn.cmd(&["CLUSTER", "SLOTS"])?)?;
                    let owner = ranges
                        .iter()
                        .find(|r| (r.start..=r.end).contains(&self.slot))
                        .map(|r| r.master);
                    if owner != Some(self.target) {
                        return Err(format!(
                            "{} maps slot {} to {owner:?}",
                            node.server.addr(),
                            self.slot
                        ));
                    }
                }
                Ok(())
            },
        )?;
        Ok(moved)
    }
}

/// `(first slot, last slot, master)` per range, sorted.
type SlotOwners = Vec<(u16, u16, SocketAddr)>;

/// One line of `CLUSTER NODES`.
struct NodeLine {
    id: String,
    addr: String,
    flags: Vec<String>,
    master_id: String,
}

fn parse_cluster_nodes(text: &str) -> Vec<NodeLine> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let id = fields.next()?.to_owned();
            let addr = fields.next()?.to_owned();
            let flags = fields.next()?.split(',').map(str::to_owned).collect();
            let master_id = fields.next()?.to_owned();
            Some(NodeLine {
                id,
                addr,
                flags,
                master_id,
            })
        })
        .collect()
}

fn socket_addr(host: &str, port: u16) -> Result<SocketAddr, String> {
    // Nodes that do not know their own address report an empty host; every node is on
    // loopback here.
    let host = if host.is_empty() || host == "?" {
        "127.0.0.1"
    } else {
        host
    };
    let ip: std::net::IpAddr = host
        .parse()
        .map_err(|_| format!("not an IP address: {host:?}"))?;
    Ok(SocketAddr::new(ip, port))
}

/// Parses a `CLUSTER SLOTS` reply.
pub fn parse_cluster_slots(reply: &Value) -> Result<Vec<SlotRange>, String> {
    let bad = || format!("unexpected CLUSTER SLOTS reply: {reply:?}");
    let node = |v: &Value| -> Result<(SocketAddr, String), String> {
        let items = v.as_array().ok_or_else(bad)?;
        let host = items.first().and_then(Value::as_str).ok_or_else(bad)?;
        let port = items
            .get(1)
            .and_then(Value::as_int)
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(bad)?;
        let id = items
            .get(2)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        Ok((socket_addr(host, port)?, id))
    };
    let mut ranges = Vec::new();
    for entry in reply.as_array().ok_or_else(bad)? {
        let items = entry.as_array().ok_or_else(bad)?;
        let slot = |i: usize| {
            items
                .get(i)
                .and_then(Value::as_int)
                .and_then(|s| u16::try_from(s).ok())
        };
        let (start, end) = slot(0).zip(slot(1)).ok_or_else(bad)?;
        let (master, master_id) = node(items.get(2).ok_or_else(bad)?)?;
        let replicas = items[3..]
            .iter()
            .map(|v| node(v).map(|(a, _)| a))
            .collect::<Result<_, _>>()?;
        ranges.push(SlotRange {
            start,
            end,
            master,
            master_id,
            replicas,
        });
    }
    Ok(ranges)
}

/// Calls `probe` every few milliseconds until it returns `Ok` or `deadline` passes; the error
/// names `what` and the last failure.
pub fn poll_until<T>(
    deadline: Instant,
    what: &str,
    mut probe: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    loop {
        match probe() {
            Ok(value) => return Ok(value),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("timed out waiting for {what}; last: {e}"));
            }
            Err(_) => thread::sleep(POLL * 2),
        }
    }
}

/// Awaits `probe` every 10 ms until it yields `Some`, for at most `within`; panics naming `what`
/// when the time is up. The async [`poll_until`], for conditions that depend on a client that
/// runs meanwhile on the test's tokio runtime.
pub async fn eventually<T, F, Fut>(within: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + within;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what} (within {within:?})"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Shared instances
// ---------------------------------------------------------------------------------------------

/// A lazily started 3 x 1 cluster shared by every test of this process. Do not change its
/// topology (no failover, kill or slot move) and do not flush it; keep keys apart with
/// [`unique_prefix`]. Its processes die with the test process.
///
/// In external mode (see [`external_mode`]) it is the cluster given by
/// `BOTMESH_TEST_CLUSTER=redis://[user:password@]host:port[,host:port...]` instead, and the call
/// panics when that variable is not set.
pub fn shared_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| match external_urls() {
        None => RedisCluster::start(ClusterOptions::default()),
        Some(External {
            cluster: Some(urls),
            ..
        }) => {
            let cluster = RedisCluster::external(&urls).unwrap_or_else(|e| {
                panic!(
                    "{EXTERNAL_CLUSTER_VAR}={}: {e}",
                    urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",")
                )
            });
            eprintln!(
                "shared cluster: the external deployment {EXTERNAL_CLUSTER_VAR} ({} nodes, {})",
                cluster.nodes().len(),
                describe_version()
            );
            cluster
        }
        Some(External { cluster: None, .. }) => panic!(
            "this test uses the shared cluster, but {EXTERNAL_CLUSTER_VAR} is not set while \
             {EXTERNAL_SINGLE_VAR} is (external mode starts no server): set it too"
        ),
    })
}

/// A lazily started single node (no password) shared by every test of this process. Keep keys
/// apart with [`unique_prefix`]; do not flush it.
///
/// In external mode (see [`external_mode`]) it is the standalone node given by
/// `BOTMESH_TEST_SINGLE=redis://[user:password@]host:port` instead, and the call panics when
/// that variable is not set.
pub fn shared_single() -> &'static SingleNode {
    static NODE: OnceLock<SingleNode> = OnceLock::new();
    NODE.get_or_init(|| match external_urls() {
        None => SingleNode::start(ServerOptions::new()),
        Some(External {
            single: Some(url), ..
        }) => {
            let node = SingleNode::external(&url)
                .unwrap_or_else(|e| panic!("{EXTERNAL_SINGLE_VAR}={}: {e}", redact(&url)));
            eprintln!(
                "shared single node: the external node {EXTERNAL_SINGLE_VAR} ({})",
                describe_version()
            );
            node
        }
        Some(External { single: None, .. }) => panic!(
            "this test uses the shared single node, but {EXTERNAL_SINGLE_VAR} is not set while \
             {EXTERNAL_CLUSTER_VAR} is (external mode starts no server): set it too"
        ),
    })
}

// ---------------------------------------------------------------------------------------------
// External mode
// ---------------------------------------------------------------------------------------------

/// Names the cluster that [`shared_cluster`] uses instead of starting one:
/// `redis://[user:password@]host:port[,host:port...]`.
pub const EXTERNAL_CLUSTER_VAR: &str = "BOTMESH_TEST_CLUSTER";

/// Names the standalone node that [`shared_single`] uses instead of starting one:
/// `redis://[user:password@]host:port`.
pub const EXTERNAL_SINGLE_VAR: &str = "BOTMESH_TEST_SINGLE";

#[derive(Clone, Debug)]
struct External {
    cluster: Option<Vec<String>>,
    single: Option<String>,
}

/// Whether the suites run against an external deployment: [`EXTERNAL_CLUSTER_VAR`] or
/// [`EXTERNAL_SINGLE_VAR`] is set (and not empty). Then the harness starts no server at all:
/// the shared instances are the given ones, and a test that needs servers the harness owns
/// (it starts its own, kills, pauses, fails over or re-shards them) fails with a message that
/// says so. Such a deployment's data is not flushed, but the suites write keys under unique
/// prefixes and some flush its script cache (`SCRIPT FLUSH`): use a disposable deployment.
pub fn external_mode() -> bool {
    external_urls().is_some()
}

fn external_urls() -> Option<External> {
    static FOUND: OnceLock<Option<External>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let var = |name: &str| {
                std::env::var(name)
                    .ok()
                    .map(|v| v.trim().to_owned())
                    .filter(|v| !v.is_empty())
            };
            let cluster = var(EXTERNAL_CLUSTER_VAR).map(|list| {
                list.split(',')
                    .map(|u| u.trim().to_owned())
                    .filter(|u| !u.is_empty())
                    .collect()
            });
            let single = var(EXTERNAL_SINGLE_VAR);
            (cluster.is_some() || single.is_some()).then_some(External { cluster, single })
        })
        .clone()
}

fn refuse_in_external_mode() -> Result<(), String> {
    if external_mode() {
        Err(not_owned("start a redis-server"))
    } else {
        Ok(())
    }
}

fn not_owned(what: &str) -> String {
    format!(
        "cannot {what}: this test needs servers the harness owns (it starts its own, or kills, \
         pauses, fails over, re-shards or reconfigures them), and in external mode \
         ({EXTERNAL_CLUSTER_VAR} / {EXTERNAL_SINGLE_VAR} set) the harness starts and steers \
         nothing. Run it without those variables (see \"Checking your deployment\" in \
         docs/operations.md)"
    )
}

/// A URL with its credentials hidden, for messages.
fn redact(url: &str) -> String {
    match url.rsplit_once('@') {
        Some((_, host)) => format!("redis://<credentials>@{host}"),
        None => url.to_owned(),
    }
}

/// `(address, credentials)` of `redis://[user[:password]@]host[:port]` or `host:port`; a host
/// name is resolved here, since the harness's connections use socket addresses.
fn parse_external_url(url: &str) -> Result<(SocketAddr, Option<Credentials>), String> {
    let parsed = botmesh_redis_core::options::parse_url(url).map_err(|e| e.to_string())?;
    let addr = (parsed.addr.host.as_str(), parsed.addr.port)
        .to_socket_addrs()
        .map_err(|e| format!("resolve {}: {e}", redact(url)))?
        .next()
        .ok_or_else(|| format!("{} resolves to no address", redact(url)))?;
    Ok((addr, parsed.auth.map(|a| (a.username, a.password))))
}

fn external_version(external: &External) -> Result<ServerVersion, String> {
    let url = match (&external.cluster, &external.single) {
        (Some(urls), _) if !urls.is_empty() => urls[0].clone(),
        (_, Some(url)) => url.clone(),
        _ => return Err(format!("{EXTERNAL_CLUSTER_VAR} lists no node")),
    };
    let (addr, credentials) = parse_external_url(&url)?;
    let auth = AdminAuth {
        candidates: credentials.into_iter().collect(),
    };
    let info = auth
        .connect(addr, AdminConn::DEFAULT_TIMEOUT)?
        .cmd(&["INFO", "server"])?;
    ServerVersion::from_info(&parse_info(info.as_str().unwrap_or_default()))
        .ok_or_else(|| format!("INFO server of {} has no version", redact(&url)))
}

fn describe_version() -> String {
    match server_version() {
        Ok(version) => version.to_string(),
        Err(e) => format!("version unknown: {e}"),
    }
}

/// `name-PID-N`, unique in this machine's running test processes (N counts calls in this
/// process). `name` is used as given.
pub fn unique_prefix(name: &str) -> String {
    static PREFIXES: AtomicU64 = AtomicU64::new(0);
    format!(
        "{name}-{}-{}",
        std::process::id(),
        PREFIXES.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_is_reported_with_the_install_hint() {
        let none = find_redis_server(None, Some("/nonexistent-dir".into())).unwrap_err();
        assert_eq!(none, MISSING_SERVER);
        let bad = find_redis_server(Some("/nonexistent/redis-server".into()), None).unwrap_err();
        assert!(bad.starts_with(MISSING_SERVER), "{bad}");
        assert!(bad.contains("/nonexistent/redis-server"), "{bad}");
    }

    #[test]
    fn a_port_taken_by_someone_else_is_a_lost_race_not_a_failure() {
        let squatter = TcpListener::bind((LOOPBACK, 0)).unwrap();
        let port = squatter.local_addr().unwrap().port();
        let binary = redis_server_path().unwrap();
        match RedisServer::spawn_on(&binary, port, None, &[], AdminAuth::default()) {
            Err(StartFailure::PortTaken(_)) => {}
            Err(StartFailure::Fatal(e)) => panic!("misclassified: {e}"),
            Ok(server) => panic!("started on a taken port: {server:?}"),
        }
    }

    #[test]
    fn server_versions_parse_from_version_output_and_info() {
        let old = ServerVersion::parse(
            "Redis server v=6.2.14 sha=40305114:0 malloc=libc bits=64 build=dff95a8e7a99d269",
        )
        .unwrap();
        assert_eq!(
            (old.product, old.major, old.minor, old.patch),
            (Product::Redis, 6, 2, 14)
        );
        assert!(!old.has_cluster_port() && !old.has_debug_switch() && old.asks_on_split_keys());
        let debian = ServerVersion::parse("Redis server v=7.0.15 sha=00000000:0").unwrap();
        assert!(debian.has_cluster_port() && !debian.asks_on_split_keys());
        let valkey = ServerVersion::parse("Valkey server v=8.1.8 sha=00000000:1").unwrap();
        assert_eq!(valkey.to_string(), "Valkey 8.1.8");
        assert!(valkey.has_cluster_port() && valkey.has_debug_switch());
        assert_eq!(ServerVersion::parse("KeyDB server v=6.3.4"), None);
        assert_eq!(ServerVersion::parse("Redis server v=7"), None);

        let info = parse_info("# Server\r\nredis_version:7.2.4\r\nvalkey_version:9.1.2\r\n");
        assert_eq!(
            ServerVersion::from_info(&info).unwrap().to_string(),
            "Valkey 9.1.2"
        );
        let info = parse_info("redis_version:7.4.1\r\n");
        assert_eq!(
            ServerVersion::from_info(&info).unwrap().to_string(),
            "Redis 7.4.1"
        );
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

    #[test]
    fn cluster_slots_replies_parse() {
        let node = |port: i64, id: &str| {
            Value::Array(vec![
                Value::Bulk(b"127.0.0.1".to_vec()),
                Value::Int(port),
                Value::Bulk(id.as_bytes().to_vec()),
                Value::Array(vec![]),
            ])
        };
        let reply = Value::Array(vec![Value::Array(vec![
            Value::Int(0),
            Value::Int(5460),
            node(20001, "a"),
            Value::Array(vec![
                Value::Bulk(Vec::new()),
                Value::Int(20004),
                Value::Bulk(b"d".to_vec()),
            ]),
        ])]);
        let ranges = parse_cluster_slots(&reply).unwrap();
        assert_eq!(
            ranges,
            vec![SlotRange {
                start: 0,
                end: 5460,
                master: "127.0.0.1:20001".parse().unwrap(),
                master_id: "a".into(),
                replicas: vec!["127.0.0.1:20004".parse().unwrap()],
            }]
        );
        assert!(parse_cluster_slots(&Value::Int(3)).is_err());
    }
}

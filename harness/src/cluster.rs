//! A Redis Cluster of real processes, its topology as the live nodes report it, and the topology
//! changes tests make (slot moves, failovers, killed masters).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::external::{not_owned, parse_external_url};
use crate::server::AdminAuth;
use crate::tls::TlsFiles;
use crate::{parse_info, poll_until, AdminConn, RedisServer, Value, POLL, SLOT_COUNT};

/// Options of a cluster (builder).
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    masters: usize,
    replicas_per_master: usize,
    node_timeout: Duration,
    password: Option<String>,
    extra_config: Vec<String>,
    ready_timeout: Duration,
    tls: Option<Arc<TlsFiles>>,
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
            tls: None,
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

    /// Every node also listens with TLS on a port of its own, with the certificates of
    /// `files`, and the cluster bus and replication use TLS (`tls-cluster yes`,
    /// `tls-replication yes`); `auth_clients` is `tls-auth-clients`. The plain ports stay open
    /// for the harness's admin connections: a node tells a plain connection the plain ports and
    /// a TLS connection the TLS ports (`CLUSTER SLOTS`, `MOVED`), so clients connected with
    /// TLS ([`RedisCluster::tls_seeds`]) stay on TLS.
    pub fn tls(mut self, files: Arc<TlsFiles>, auth_clients: &str) -> ClusterOptions {
        self.extra_config.extend(files.server_config(auth_clients));
        self.extra_config.push("tls-cluster yes".to_owned());
        self.extra_config.push("tls-replication yes".to_owned());
        self.tls = Some(files);
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
            let server = RedisServer::spawn(&config, true, options.tls.is_some(), auth.clone())?;
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

    /// `rediss://127.0.0.1:TLS_PORT` of every live node, for a cluster started with
    /// [`ClusterOptions::tls`] (empty otherwise).
    pub fn tls_seeds(&self) -> Vec<String> {
        self.live()
            .filter_map(|n| {
                let port = n.server.tls_port()?;
                Some(format!("rediss://{}:{port}", n.server.addr().ip()))
            })
            .collect()
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
    pub(crate) fn external(urls: &[String]) -> Result<RedisCluster, String> {
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
    /// prefer [`unique_prefix`](crate::unique_prefix) there.
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
        // A node takes the target's claim when the target's config epoch is above the
        // source's. `SETSLOT NODE` on the target raises its epoch unless it is the greatest
        // already; but two moves in quick succession can leave two masters on one epoch, and
        // the collision's resolution may raise the source's past it, so that the other nodes
        // keep the source as the owner (seen once in the suite: a replica still mapped the
        // slot to its source after a minute). While a node is stale past a second, the
        // target's epoch is raised past every other (`CLUSTER BUMPEPOCH`), as an operator
        // would.
        let mut bump_at = Instant::now() + STALE_BEFORE_BUMP;
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
                        if Instant::now() >= bump_at {
                            self.cluster
                                .conn(self.target)?
                                .cmd(&["CLUSTER", "BUMPEPOCH"])
                                .map_err(|e| format!("BUMPEPOCH on {}: {e}", self.target))?;
                            bump_at = Instant::now() + STALE_BEFORE_BUMP;
                        }
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

/// How long a node may map a moved slot to its source before the target's config epoch is
/// raised ([`Migration::finish`]): far longer than the news takes between live nodes.
const STALE_BEFORE_BUMP: Duration = Duration::from_secs(1);

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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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

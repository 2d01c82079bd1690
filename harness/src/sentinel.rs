//! A Redis Sentinel deployment on loopback: a master, its replicas (`replicaof`), and three
//! sentinels (`redis-server --sentinel`) that monitor it with a quorum of two and short
//! timeouts, so failovers take a second or two.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::admin::Value;
use crate::server::{parse_info, AdminAuth, RedisServer};
use crate::{poll_until, AdminConn};

/// Options of a Sentinel deployment (builder).
#[derive(Clone, Debug)]
pub struct SentinelOptions {
    master_name: String,
    replicas: usize,
    data_password: Option<String>,
    sentinel_password: Option<String>,
    min_replicas_to_write: bool,
    down_after: Duration,
    failover_timeout: Duration,
    ready_timeout: Duration,
}

impl Default for SentinelOptions {
    fn default() -> Self {
        SentinelOptions::new()
    }
}

impl SentinelOptions {
    /// A master named `botmesh` with one replica; sentinels without a password; a master
    /// down after 1 s, a failover timeout of 5 s.
    pub fn new() -> SentinelOptions {
        SentinelOptions {
            master_name: "botmesh".to_owned(),
            replicas: 1,
            data_password: None,
            sentinel_password: None,
            min_replicas_to_write: false,
            down_after: Duration::from_secs(1),
            failover_timeout: Duration::from_secs(5),
            ready_timeout: Duration::from_secs(30),
        }
    }

    /// The name the sentinels monitor the master under.
    pub fn master_name(mut self, name: impl Into<String>) -> SentinelOptions {
        self.master_name = name.into();
        self
    }

    /// Replicas of the master (default 1).
    pub fn replicas(mut self, replicas: usize) -> SentinelOptions {
        self.replicas = replicas;
        self
    }

    /// `requirepass` (and `masterauth`, and the sentinels' `auth-pass`) of the data nodes.
    pub fn data_password(mut self, password: impl Into<String>) -> SentinelOptions {
        self.data_password = Some(password.into());
        self
    }

    /// `requirepass` of the sentinels.
    pub fn sentinel_password(mut self, password: impl Into<String>) -> SentinelOptions {
        self.sentinel_password = Some(password.into());
        self
    }

    /// `min-replicas-to-write 1` (with `min-replicas-max-lag 2`) on every data node: a master
    /// cut off from its replicas refuses writes.
    pub fn min_replicas_to_write(mut self) -> SentinelOptions {
        self.min_replicas_to_write = true;
        self
    }

    /// `sentinel down-after-milliseconds` (default 1 s).
    pub fn down_after(mut self, d: Duration) -> SentinelOptions {
        self.down_after = d;
        self
    }
}

/// A master, its replicas and three sentinels, each a `redis-server` the harness owns; all die
/// with it.
#[derive(Debug)]
pub struct SentinelDeployment {
    options: SentinelOptions,
    /// The master first, as started; roles change with failovers.
    data: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

impl SentinelDeployment {
    /// Starts the deployment and waits until every sentinel knows the master, its replicas
    /// and the other sentinels; panics with a clear message on failure.
    pub fn start(options: SentinelOptions) -> SentinelDeployment {
        match SentinelDeployment::try_start(options) {
            Ok(d) => d,
            Err(e) => panic!("cannot start a Sentinel deployment: {e}"),
        }
    }

    /// [`SentinelDeployment::start`], with the failure as a value.
    pub fn try_start(options: SentinelOptions) -> Result<SentinelDeployment, String> {
        let data_auth = AdminAuth {
            candidates: options
                .data_password
                .iter()
                .map(|p| (None, p.clone()))
                .collect(),
        };
        // A replica's first sync starts at once (7.0 waits 5 s for more replicas by default).
        let mut common = vec!["repl-diskless-sync-delay 0".to_owned()];
        if let Some(password) = &options.data_password {
            common.push(format!("requirepass {password}"));
            common.push(format!("masterauth {password}"));
        }
        if options.min_replicas_to_write {
            common.push("min-replicas-to-write 1".to_owned());
            common.push("min-replicas-max-lag 2".to_owned());
        }
        let master = RedisServer::spawn(&common, false, false, data_auth.clone())?;
        let mut data = vec![master];
        for _ in 0..options.replicas {
            let mut config = common.clone();
            config.push(format!("replicaof 127.0.0.1 {}", data[0].port()));
            data.push(RedisServer::spawn(
                &config,
                false,
                false,
                data_auth.clone(),
            )?);
        }
        let name = &options.master_name;
        let mut config = vec![
            format!("sentinel monitor {name} 127.0.0.1 {} 2", data[0].port()),
            format!(
                "sentinel down-after-milliseconds {name} {}",
                options.down_after.as_millis()
            ),
            format!(
                "sentinel failover-timeout {name} {}",
                options.failover_timeout.as_millis()
            ),
            format!("sentinel parallel-syncs {name} 1"),
        ];
        if let Some(password) = &options.data_password {
            config.push(format!("sentinel auth-pass {name} {password}"));
        }
        if let Some(password) = &options.sentinel_password {
            config.push(format!("requirepass {password}"));
        }
        let sentinel_auth = AdminAuth {
            candidates: options
                .sentinel_password
                .iter()
                .map(|p| (None, p.clone()))
                .collect(),
        };
        let sentinels = (0..3)
            .map(|_| RedisServer::spawn_sentinel(&config, sentinel_auth.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let deployment = SentinelDeployment {
            options,
            data,
            sentinels,
        };
        deployment.wait_ready(deployment.options.ready_timeout)?;
        Ok(deployment)
    }

    /// The name the sentinels monitor the master under.
    pub fn master_name(&self) -> &str {
        &self.options.master_name
    }

    /// The data nodes' password, if any.
    pub fn data_password(&self) -> Option<&str> {
        self.options.data_password.as_deref()
    }

    /// The sentinels' password, if any.
    pub fn sentinel_password(&self) -> Option<&str> {
        self.options.sentinel_password.as_deref()
    }

    /// The sentinels' addresses.
    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().map(RedisServer::addr).collect()
    }

    /// The sentinel processes.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// The data node processes, the first master first.
    pub fn data_nodes(&self) -> &[RedisServer] {
        &self.data
    }

    /// The data node at `addr`.
    pub fn node(&self, addr: SocketAddr) -> Option<&RedisServer> {
        self.data.iter().find(|s| s.addr() == addr)
    }

    /// `redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/<master name>`, without
    /// credentials.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinel_addrs()
            .iter()
            .map(|a| a.to_string())
            .collect();
        format!(
            "redis+sentinel://{}/{}",
            hosts.join(","),
            self.master_name()
        )
    }

    /// An admin connection to a sentinel, authenticated when they have a password.
    pub fn sentinel_conn(&self, sentinel: &RedisServer) -> Result<AdminConn, String> {
        sentinel.connect()
    }

    /// What one sentinel names master now.
    fn named_by(&self, sentinel: &RedisServer) -> Result<SocketAddr, String> {
        let mut conn = self.sentinel_conn(sentinel)?;
        conn.set_timeout(Duration::from_millis(500))?;
        let reply = conn.cmd(&["SENTINEL", "get-master-addr-by-name", self.master_name()])?;
        let items = reply
            .as_array()
            .ok_or_else(|| format!("get-master-addr-by-name answered {reply:?}"))?;
        let text = |v: &Value| v.as_str().map(str::to_owned);
        match (items.first().and_then(text), items.get(1).and_then(text)) {
            (Some(host), Some(port)) => format!("{host}:{port}")
                .parse()
                .map_err(|e| format!("{host}:{port}: {e}")),
            _ => Err(format!("get-master-addr-by-name answered {reply:?}")),
        }
    }

    /// The master the live sentinels agree on.
    pub fn master_addr(&self) -> Result<SocketAddr, String> {
        let mut named = Vec::new();
        for sentinel in self.sentinels.iter().filter(|s| s.is_alive()) {
            named.push(self.named_by(sentinel)?);
        }
        match named.first() {
            Some(&first) if named.iter().all(|&a| a == first) => Ok(first),
            Some(_) => Err(format!("the sentinels disagree: {named:?}")),
            None => Err("no sentinel is alive".to_owned()),
        }
    }

    /// One `SENTINEL master <name>` field, as one sentinel reports it.
    fn master_field(&self, sentinel: &RedisServer, field: &str) -> Result<String, String> {
        let mut conn = self.sentinel_conn(sentinel)?;
        let reply = conn.cmd(&["SENTINEL", "master", self.master_name()])?;
        let items = reply.as_array().unwrap_or_default();
        items
            .chunks(2)
            .find(|kv| kv[0].as_str() == Some(field))
            .and_then(|kv| kv.get(1).and_then(|v| v.as_str()).map(str::to_owned))
            .ok_or_else(|| format!("SENTINEL master has no {field}: {reply:?}"))
    }

    /// Waits until every live sentinel names the same master, which says it is master, knows
    /// `replicas` replicas (each with its link up) and the other live sentinels.
    fn wait_ready(&self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        poll_until(deadline, "the Sentinel deployment to be ready", || {
            let master = self.master_addr()?;
            let node = self
                .node(master)
                .ok_or_else(|| format!("the sentinels name {master}, not a data node"))?;
            let info = node.connect()?.cmd(&["INFO", "replication"])?;
            let info = parse_info(info.as_str().unwrap_or_default());
            if info.get("role").map(String::as_str) != Some("master") {
                return Err(format!("{master} is not a master: {info:?}"));
            }
            // Every other live data node replicates it, its link up (the first sync done).
            let replicas: Vec<&RedisServer> = self
                .data
                .iter()
                .filter(|s| s.is_alive() && s.addr() != master)
                .collect();
            let live_replicas = replicas.len();
            for replica in &replicas {
                let info = replica.connect()?.cmd(&["INFO", "replication"])?;
                let info = parse_info(info.as_str().unwrap_or_default());
                let following = info.get("master_port") == Some(&master.port().to_string());
                let up = info.get("master_link_status").is_some_and(|s| s == "up");
                if !(following && up) {
                    return Err(format!(
                        "{} does not replicate {master} yet",
                        replica.addr()
                    ));
                }
            }
            let live: Vec<&RedisServer> = self.sentinels.iter().filter(|s| s.is_alive()).collect();
            for sentinel in &live {
                let others = self.master_field(sentinel, "num-other-sentinels")?;
                let slaves = self.master_field(sentinel, "num-slaves")?;
                let flags = self.master_field(sentinel, "flags")?;
                if others.parse::<usize>().unwrap_or(0) < live.len() - 1
                    || slaves.parse::<usize>().unwrap_or(0) < live_replicas
                    || flags != "master"
                {
                    return Err(format!(
                        "sentinel {} sees {others} sentinels, {slaves} replicas, flags {flags}",
                        sentinel.addr()
                    ));
                }
            }
            Ok(())
        })
    }

    /// Waits until the deployment is ready again after a failover (see the start).
    pub fn wait_settled(&self, within: Duration) -> Result<(), String> {
        self.wait_ready(within)
    }

    /// `SENTINEL FAILOVER <name>` on a live sentinel; waits until every live sentinel names
    /// another master and that node says it is master. Returns the new master.
    pub fn failover(&self, within: Duration) -> Result<SocketAddr, String> {
        let old = self.master_addr()?;
        let sentinel = self
            .sentinels
            .iter()
            .find(|s| s.is_alive())
            .ok_or("no sentinel is alive")?;
        let reply =
            self.sentinel_conn(sentinel)?
                .cmd(&["SENTINEL", "FAILOVER", self.master_name()])?;
        if !reply.is_ok() {
            return Err(format!("SENTINEL FAILOVER answered {reply:?}"));
        }
        self.wait_master_change(old, within)
    }

    /// Kills the master (`SIGKILL`) and returns its address; the sentinels promote a replica
    /// once it is down for `down_after` ([`SentinelDeployment::wait_master_change`]).
    pub fn kill_master(&self) -> Result<SocketAddr, String> {
        let master = self.master_addr()?;
        self.node(master)
            .ok_or_else(|| format!("{master} is not a data node"))?
            .kill();
        Ok(master)
    }

    /// Waits until every live sentinel names a master other than `old` and it says it is
    /// master (`ROLE`); returns it.
    pub fn wait_master_change(
        &self,
        old: SocketAddr,
        within: Duration,
    ) -> Result<SocketAddr, String> {
        let deadline = Instant::now() + within;
        poll_until(deadline, "the sentinels to name a new master", || {
            let new = self.master_addr()?;
            if new == old {
                return Err(format!("the sentinels still name {old}"));
            }
            let node = self
                .node(new)
                .ok_or_else(|| format!("{new} is not a data node"))?;
            let role = node.connect()?.cmd(&["ROLE"])?;
            match role
                .as_array()
                .and_then(|r| r.first())
                .and_then(Value::as_str)
            {
                Some("master") => Ok(new),
                other => Err(format!("{new} says ROLE {other:?}")),
            }
        })
    }
}

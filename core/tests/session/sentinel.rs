//! A Redis Sentinel deployment, scripted: the session asks a sentinel for the master, checks
//! it with `ROLE`, and follows a failover announced by `+switch-master`, shown by `READONLY`,
//! or found when the master's connection is lost; a sentinel naming a master of an older
//! configuration (a lower `config-epoch`) is not followed. Every command each node receives is logged,
//! so each test says exactly what went where.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use botmesh_redis_core::driver::session::{
    Auth, Config, ConnId, DialTarget, Endpoints, Event, Output, Session,
};
use botmesh_redis_core::driver::Reply;
use botmesh_redis_core::testing::sim::encode_reply;
use botmesh_redis_core::testing::{set, start, Batch, Ticket, Tickets, Token};
use botmesh_redis_core::{Error, NodeAddr, Value};
use bytes::{Bytes, BytesMut};

/// What a scripted node is and does.
#[derive(Clone, Debug, PartialEq)]
enum Node {
    /// A sentinel naming this master in the configuration of this epoch (none: it monitors no
    /// master of that name).
    Sentinel(Option<(NodeAddr, u64)>),
    /// A sentinel whose ACL refuses `SUBSCRIBE`, naming this master.
    Unsubscribable((NodeAddr, u64)),
    Master,
    /// A replica: `ROLE` says `slave`, writes are refused with `READONLY`.
    Replica,
    /// A master that takes writes and never answers them.
    Silent,
    /// Refuses connections.
    Down,
}

struct Net {
    session: Session<Tickets>,
    now: Instant,
    nodes: BTreeMap<NodeAddr, Node>,
    conns: BTreeMap<ConnId, NodeAddr>,
    /// Connections whose `SUBSCRIBE +switch-master` was answered.
    subscribers: Vec<ConnId>,
    /// `host:port COMMAND args...`, in the order received.
    log: Vec<String>,
    tokens: u64,
    /// The epoch of the sentinels' configuration: each failover (`sentinels_name`) raises it.
    epoch: u64,
    /// Hosts that refuse the password.
    refuse_auth: Vec<&'static str>,
}

fn addr(name: &str) -> NodeAddr {
    NodeAddr::new(name, 1)
}

fn bulk(s: &str) -> Value {
    Value::Bulk(Bytes::copy_from_slice(s.as_bytes()))
}

/// The commands in a client's write: arrays of bulk strings.
fn commands(bytes: &[u8]) -> Vec<Vec<String>> {
    let text = String::from_utf8_lossy(bytes);
    let mut lines = text.split("\r\n");
    let mut out = Vec::new();
    while let Some(head) = lines.next() {
        let Some(n) = head.strip_prefix('*') else {
            continue;
        };
        let n: usize = n.parse().unwrap();
        let args = (0..n)
            .map(|_| {
                lines.next();
                lines.next().unwrap().to_owned()
            })
            .collect();
        out.push(args);
    }
    out
}

impl Net {
    /// Sentinels `s1`, `s2`, `s3` naming master `a`, replica `b`, defaults elsewhere.
    fn new() -> Self {
        Net::with(|_| {})
    }

    fn with(configure: impl FnOnce(&mut Config)) -> Self {
        let now = start();
        let sentinels = vec![addr("s1"), addr("s2"), addr("s3")];
        let mut config = Config::sentinel(sentinels.clone(), "m");
        configure(&mut config);
        let mut nodes: BTreeMap<_, _> = sentinels
            .into_iter()
            .map(|s| (s, Node::Sentinel(Some((addr("a"), 1)))))
            .collect();
        nodes.insert(addr("a"), Node::Master);
        nodes.insert(addr("b"), Node::Replica);
        Net {
            session: Session::new(config, now),
            now,
            nodes,
            conns: BTreeMap::new(),
            subscribers: Vec::new(),
            log: Vec::new(),
            tokens: 0,
            epoch: 1,
            refuse_auth: Vec::new(),
        }
    }

    fn answer(&mut self, conn: ConnId, node: &NodeAddr, args: &[String]) -> Option<Reply> {
        let kind = self.nodes[node].clone();
        let words: Vec<&str> = args.iter().map(String::as_str).collect();
        let err = |text: &str| Err(Error::Server(botmesh_redis_core::ServerError::new(text)));
        Some(match (&kind, words.as_slice()) {
            (_, ["AUTH", ..]) if self.refuse_auth.contains(&node.host.as_str()) => {
                err("WRONGPASS invalid username-password pair or user is disabled.")
            }
            (_, ["AUTH", ..]) => Ok(Value::Status(Bytes::from_static(b"OK"))),
            (_, ["PING"]) => Ok(Value::Status(Bytes::from_static(b"PONG"))),
            (
                Node::Sentinel(Some((a, epoch))) | Node::Unsubscribable((a, epoch)),
                ["SENTINEL", "MASTER", "m"],
            ) => Ok(Value::Array(
                [
                    ("name", "m".to_owned()),
                    ("ip", a.host.clone()),
                    ("port", a.port.to_string()),
                    ("flags", "master".to_owned()),
                    ("config-epoch", epoch.to_string()),
                ]
                .iter()
                .flat_map(|(k, v)| [bulk(k), bulk(v)])
                .collect(),
            )),
            (Node::Sentinel(None), ["SENTINEL", "MASTER", "m"]) => {
                err("ERR No such master with that name")
            }
            (Node::Unsubscribable(_), ["SUBSCRIBE", _]) => {
                err("NOPERM User default has no permissions to access the '+switch-master' channel")
            }
            (Node::Sentinel(_), ["SUBSCRIBE", channel]) => {
                self.subscribers.push(conn);
                Ok(Value::Array(vec![
                    bulk("subscribe"),
                    bulk(channel),
                    Value::Int(1),
                ]))
            }
            (Node::Master | Node::Silent, ["ROLE"]) => Ok(Value::Array(vec![
                bulk("master"),
                Value::Int(0),
                Value::Array(vec![]),
            ])),
            (Node::Replica, ["ROLE"]) => Ok(Value::Array(vec![bulk("slave"), bulk("a")])),
            (Node::Master, ["SET", ..]) => Ok(Value::Status(Bytes::from_static(b"OK"))),
            (Node::Replica, ["SET", ..]) => {
                err("READONLY You can't write against a read only replica.")
            }
            (Node::Silent, _) => return None,
            _ => err(&format!("ERR unexpected {words:?}")),
        })
    }

    /// Carries out outputs until the session waits; returns its deadline.
    fn pump(&mut self) -> Option<Instant> {
        let now = self.now;
        loop {
            match self.session.poll() {
                Output::Connect { conn, dial, .. } => {
                    let DialTarget::Tcp(dial) = dial else {
                        panic!("a sentinel deployment dials over TCP: {dial}");
                    };
                    if self.nodes.get(&dial) == Some(&Node::Down) {
                        self.session
                            .handle_connect_failed(now, conn, "connection refused");
                    } else {
                        self.conns.insert(conn, dial);
                        self.session.handle_connected(now, conn);
                    }
                }
                Output::Transmit { conn, bytes } => {
                    let node = self.conns[&conn].clone();
                    let mut out = BytesMut::new();
                    for args in commands(&bytes) {
                        self.log.push(format!("{} {}", node.host, args.join(" ")));
                        if let Some(reply) = self.answer(conn, &node, &args) {
                            let frame = reply.map_err(|e| e.server().unwrap().clone());
                            encode_reply(&frame, &mut out);
                        }
                    }
                    if !out.is_empty() {
                        self.session.handle_read(now, conn, &out);
                    }
                }
                Output::Close { conn } => {
                    self.conns.remove(&conn);
                    self.subscribers.retain(|&c| c != conn);
                }
                Output::Complete(completion) => {
                    completion.deliver();
                }
                Output::Wait { until, .. } => return until,
            }
        }
    }

    fn submit_set(&mut self, key: &str) -> Ticket<Vec<Reply>> {
        self.tokens += 1;
        let ticket = Ticket::new(Token(self.tokens));
        let batch = Batch::new(vec![set(key, "v")]);
        self.session.submit(self.now, ticket.clone(), batch);
        ticket
    }

    /// Runs the session on its own deadlines until `ticket` is answered.
    fn settle(&mut self, ticket: &Ticket<Vec<Reply>>) -> Reply {
        for _ in 0..10_000 {
            let until = self.pump();
            if ticket.is_delivered() {
                return match ticket.take() {
                    Some(Ok(mut replies)) => replies.remove(0),
                    Some(Err(e)) => Err(e),
                    None => unreachable!(),
                };
            }
            let until = until.expect("the session went idle with a plan open");
            self.now = self.now.max(until);
            self.session.handle_timeout(self.now);
        }
        panic!("no answer within 10,000 deadlines");
    }

    /// Runs the session on its own deadlines until `done` holds.
    fn advance_until(&mut self, done: impl Fn(&Net) -> bool) {
        for _ in 0..10_000 {
            let until = self.pump();
            if done(self) {
                return;
            }
            self.now = self.now.max(until.expect("the session went idle"));
            self.session.handle_timeout(self.now);
        }
        panic!("not done within 10,000 deadlines");
    }

    fn run_set(&mut self, key: &str) -> Reply {
        let ticket = self.submit_set(key);
        self.settle(&ticket)
    }

    /// The commands `host` received, in order.
    fn received(&self, host: &str) -> Vec<String> {
        let prefix = format!("{host} ");
        self.log
            .iter()
            .filter_map(|l| l.strip_prefix(&prefix).map(str::to_owned))
            .collect()
    }

    fn questions(&self) -> usize {
        self.log
            .iter()
            .filter(|l| l.contains("SENTINEL MASTER"))
            .count()
    }

    /// The sentinels fail over to `master`, at the next epoch; the other data node is a
    /// replica.
    fn sentinels_name(&mut self, master: &str) {
        self.epoch += 1;
        let named = (addr(master), self.epoch);
        for node in self.nodes.values_mut() {
            if let Node::Sentinel(conf) = node {
                *conf = Some(named.clone());
            }
        }
        for host in ["a", "b"] {
            let role = if host == master {
                Node::Master
            } else {
                Node::Replica
            };
            self.nodes.insert(addr(host), role);
        }
    }

    /// The node's connections are cut, and it refuses new ones.
    fn kill(&mut self, host: &str) {
        self.nodes.insert(addr(host), Node::Down);
        self.cut(host, "killed");
    }

    /// The node's connections are cut; it takes new ones as before.
    fn cut(&mut self, host: &str, reason: &str) {
        let cut: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, a)| a.host == host)
            .map(|(&c, _)| c)
            .collect();
        for conn in cut {
            self.session.handle_closed(self.now, conn, reason);
        }
    }

    /// Every subscriber hears that `m` moved from `from` to `to`.
    fn switch_master(&mut self, from: &str, to: &str) {
        let payload = format!("m {from} 1 {to} 1");
        let message = Value::Array(vec![
            bulk("message"),
            bulk("+switch-master"),
            bulk(&payload),
        ]);
        let mut out = BytesMut::new();
        encode_reply(&Ok(message), &mut out);
        for conn in self.subscribers.clone() {
            self.session.handle_read(self.now, conn, &out);
        }
    }
}

const OK: Reply = Ok(Value::Status(Bytes::from_static(b"OK")));

#[test]
fn discovery_asks_one_sentinel_checks_the_role_and_subscribes() {
    let mut net = Net::new();
    assert_eq!(net.run_set("k"), OK);
    assert_eq!(
        net.received("s1"),
        [
            "PING",
            "SENTINEL MASTER m",
            "PING",
            "SUBSCRIBE +switch-master"
        ]
    );
    assert_eq!(net.received("a"), ["PING", "ROLE", "SET k v"]);
    assert!(net.received("s2").is_empty() && net.received("s3").is_empty());
    assert!(net.received("b").is_empty());
    assert_eq!(net.session.slot_owner(0), Some(&addr("a")));
}

#[test]
fn sentinels_and_data_nodes_get_their_own_credentials() {
    let mut net = Net::with(|config| {
        config.auth = Some(Auth {
            username: Some("bot".into()),
            password: "data".into(),
        });
        if let Endpoints::Sentinel(s) = &mut config.endpoints {
            s.auth = Some(Auth {
                username: None,
                password: "watch".into(),
            });
        }
    });
    assert_eq!(net.run_set("k"), OK);
    assert_eq!(net.received("s1")[0], "AUTH watch");
    assert_eq!(net.received("a")[..2], ["AUTH bot data", "ROLE"]);
}

/// One sentinel refusing the password (restarted without its ACL file, a password being
/// changed one sentinel after the other) is passed over; the call fails with `Auth` only when
/// every sentinel refuses it.
#[test]
fn a_sentinel_refusing_the_password_is_passed_over_and_all_refusing_is_auth() {
    let with_password = |config: &mut Config| {
        if let Endpoints::Sentinel(s) = &mut config.endpoints {
            s.auth = Some(Auth {
                username: None,
                password: "watch".into(),
            });
        }
    };
    let mut net = Net::with(with_password);
    net.refuse_auth = vec!["s1"];
    assert_eq!(net.run_set("k"), OK);
    assert_eq!(net.received("s2")[..2], ["AUTH watch", "SENTINEL MASTER m"]);

    let mut net = Net::with(with_password);
    net.refuse_auth = vec!["s1", "s2", "s3"];
    let error = net.run_set("k").unwrap_err();
    // The first sentinel asked names the refusal.
    assert!(
        matches!(&error, Error::Auth { addr, .. } if addr.host == "s1"),
        "{error:?}"
    );
    for s in ["s1", "s2", "s3"] {
        assert_eq!(net.received(s), ["AUTH watch"], "{s}");
    }
}

#[test]
fn a_sentinel_down_is_passed_over() {
    let mut net = Net::new();
    net.nodes.insert(addr("s1"), Node::Down);
    assert_eq!(net.run_set("k"), OK);
    assert_eq!(net.received("s2")[1], "SENTINEL MASTER m");
    assert_eq!(net.received("a"), ["PING", "ROLE", "SET k v"]);
}

#[test]
fn a_sentinel_that_knows_no_such_master_is_passed_over() {
    let mut net = Net::new();
    net.nodes.insert(addr("s1"), Node::Sentinel(None));
    assert_eq!(net.run_set("k"), OK);
    assert_eq!(net.questions(), 2);
    assert_eq!(net.received("s2")[1], "SENTINEL MASTER m");
    // Each question is a topology round for the metrics: one failed, one named the master.
    let tally = net.session.tally();
    assert_eq!(
        (
            tally.get(Event::RefreshFailed),
            tally.get(Event::RefreshSucceeded)
        ),
        (1, 1)
    );
}

#[test]
fn every_sentinel_down_is_a_clear_error_and_the_session_keeps_asking() {
    let mut net = Net::new();
    for s in ["s1", "s2", "s3"] {
        net.nodes.insert(addr(s), Node::Down);
    }
    let started = net.now;
    let error = net.run_set("k").unwrap_err();
    let Error::SentinelDiscovery { master, tried } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(master, "m");
    let asked: Vec<_> = tried.iter().map(|t| t.seed.host.clone()).collect();
    assert_eq!(asked, ["s1", "s2", "s3"]);
    assert!(tried
        .iter()
        .all(|t| matches!(t.answer, Error::Connect { .. })));
    let text = error.to_string();
    assert!(text.starts_with("sentinel discovery failed"), "{text}");
    assert!(text.contains("s2:1"), "{text}");
    // The attempts were paced by the backoff, not spent at once.
    assert!(
        net.now - started >= Duration::from_millis(500),
        "{:?}",
        net.now - started
    );
    assert!(net.received("a").is_empty());
    // A sentinel back: the next call finds the master.
    net.nodes
        .insert(addr("s2"), Node::Sentinel(Some((addr("a"), 1))));
    assert_eq!(net.run_set("k"), OK);
    assert_eq!(net.received("a"), ["PING", "ROLE", "SET k v"]);
}

#[test]
fn switch_master_moves_requests_to_the_new_master() {
    let mut net = Net::new();
    assert_eq!(net.run_set("k1"), OK);
    assert_eq!(net.subscribers.len(), 1);
    net.sentinels_name("b");
    net.switch_master("a", "b");
    assert_eq!(net.run_set("k2"), OK);
    assert_eq!(net.received("a"), ["PING", "ROLE", "SET k1 v"]);
    assert_eq!(net.received("b"), ["PING", "ROLE", "SET k2 v"]);
    // The old master's connection was closed when the sentinels named another.
    assert!(net.conns.values().all(|a| a.host != "a"), "{:?}", net.conns);
    assert_eq!(net.session.slot_owner(0), Some(&addr("b")));
}

#[test]
fn readonly_is_retried_on_the_new_master() {
    let mut net = Net::new();
    assert_eq!(net.run_set("k1"), OK);
    // The sentinels failed over without a word to this client: the old master is a replica.
    net.sentinels_name("b");
    assert_eq!(net.run_set("k2"), OK);
    // Refused on a (until the sentinels' answer came, each retry met READONLY), run once on b.
    let on_a = net.received("a");
    assert_eq!(on_a[..3], ["PING", "ROLE", "SET k1 v"]);
    assert!(
        on_a[3..].iter().all(|c| c == "SET k2 v") && on_a.len() > 3,
        "{on_a:?}"
    );
    assert_eq!(net.received("b"), ["PING", "ROLE", "SET k2 v"]);
    assert_eq!(net.questions(), 2);
}

#[test]
fn a_write_in_flight_when_the_master_is_lost_is_reply_lost_and_the_sentinels_are_asked() {
    let mut net = Net::new();
    assert_eq!(net.run_set("k1"), OK);
    net.nodes.insert(addr("a"), Node::Silent);
    let ticket = net.submit_set("k2");
    net.pump();
    assert_eq!(net.received("a").last().unwrap(), "SET k2 v");
    let asked = net.questions();
    net.kill("a");
    let error = net.settle(&ticket).unwrap_err();
    assert!(matches!(error, Error::ReplyLost { .. }), "{error:?}");
    assert!(error.outcome_unknown());
    net.advance_until(|net| net.questions() > asked);
    // The sentinels promote b: the next write goes there.
    net.sentinels_name("b");
    net.nodes.insert(addr("a"), Node::Down);
    assert_eq!(net.run_set("k3"), OK);
    assert_eq!(net.received("b"), ["PING", "ROLE", "SET k3 v"]);
}

#[test]
fn a_write_in_flight_on_a_master_the_sentinels_replace_is_reply_lost() {
    let mut net = Net::new();
    assert_eq!(net.run_set("k1"), OK);
    net.nodes.insert(addr("a"), Node::Silent);
    let ticket = net.submit_set("k2");
    net.pump();
    net.sentinels_name("b");
    net.switch_master("a", "b");
    let error = net.settle(&ticket).unwrap_err();
    assert!(matches!(error, Error::ReplyLost { .. }), "{error:?}");
    assert_eq!(net.received("b"), Vec::<String>::new());
}

#[test]
fn a_master_whose_role_says_replica_is_not_used() {
    let mut net = Net::new();
    // The sentinels still name a, which is already a replica of b.
    net.nodes.insert(addr("a"), Node::Replica);
    net.nodes.insert(addr("b"), Node::Master);
    let ticket = net.submit_set("k");
    net.pump();
    assert_eq!(net.received("a"), ["PING", "ROLE"]);
    // The sentinels catch up.
    net.sentinels_name("b");
    assert_eq!(net.settle(&ticket), OK);
    // a was dialled and asked its role (again while the sentinels still named it), never sent
    // the write.
    let on_a = net.received("a");
    assert!(on_a.iter().all(|c| c == "PING" || c == "ROLE"), "{on_a:?}");
    assert_eq!(net.received("b"), ["PING", "ROLE", "SET k v"]);
}

#[test]
fn the_sentinels_are_asked_again_every_refresh_interval() {
    let mut net = Net::with(|c| c.refresh_interval = Duration::from_millis(200));
    assert_eq!(net.run_set("k1"), OK);
    assert_eq!(net.questions(), 1);
    let asked_at = net.now;
    net.advance_until(|net| net.questions() == 2);
    assert_eq!(net.now - asked_at, Duration::from_millis(200));
    // The next answer names another master: the next write goes there, without a READONLY.
    net.sentinels_name("b");
    net.advance_until(|net| net.questions() == 3);
    assert_eq!(net.run_set("k2"), OK);
    assert_eq!(net.received("a"), ["PING", "ROLE", "SET k1 v"]);
}

#[test]
fn no_sentinel_at_all_fails_at_once() {
    let now = start();
    let mut session = Session::<Tickets>::new(Config::sentinel(Vec::new(), "m"), now);
    let ticket = Ticket::new(Token(1));
    session.submit(now, ticket.clone(), Batch::new(vec![set("k", "v")]));
    loop {
        match session.poll() {
            Output::Complete(completion) => {
                completion.deliver();
            }
            Output::Wait { .. } => break,
            other => panic!("nothing to connect to, yet {other:?}"),
        }
    }
    let replies = ticket.take().unwrap().unwrap();
    assert_eq!(
        replies[0].clone().unwrap_err(),
        Error::SentinelDiscovery {
            master: "m".into(),
            tried: Vec::new()
        }
    );
}

#[test]
fn a_lagging_sentinel_does_not_take_the_client_back_to_the_replaced_master() {
    let mut net = Net::new();
    assert_eq!(net.run_set("k1"), OK);
    // The leader announces b; the other two sentinels still name a, which stays a master
    // until the sentinels convert it (Sentinel's own window): a write there would be lost.
    net.nodes
        .insert(addr("s1"), Node::Sentinel(Some((addr("b"), 2))));
    net.nodes.insert(addr("b"), Node::Master);
    net.switch_master("a", "b");
    assert_eq!(net.run_set("k2"), OK);
    // Rounds ask the lagging sentinels (the refresh interval passes): their answers are stale.
    let asked = net.questions();
    net.advance_until(|net| net.questions() > asked + 3);
    for key in ["k3", "k4"] {
        assert_eq!(net.run_set(key), OK);
    }
    assert_eq!(net.received("a"), ["PING", "ROLE", "SET k1 v"]);
    assert_eq!(
        net.received("b"),
        ["PING", "ROLE", "SET k2 v", "SET k3 v", "SET k4 v"]
    );
}

/// The failover is first heard from a question, not from the subscription: the leader names b,
/// and the next round asks a sentinel that has not heard yet and names a, still a master. The
/// client stays on b (it went back to a, whose writes the sentinels would discard, when only a
/// `+switch-master` marked a as replaced). The subscriber's late message changes nothing.
#[test]
fn a_failover_heard_from_a_question_is_not_undone_by_a_sentinel_that_lags() {
    let mut net = Net::with(|c| c.refresh_interval = Duration::from_millis(200));
    assert_eq!(net.run_set("k1"), OK);
    assert_eq!(
        net.received("s1").last().unwrap(),
        "SUBSCRIBE +switch-master"
    );
    // s2, the leader, switched to b; s1 and s3 lag; a still takes writes.
    net.nodes.insert(addr("b"), Node::Master);
    net.nodes
        .insert(addr("s2"), Node::Sentinel(Some((addr("b"), 2))));
    net.advance_until(|net| net.received("s2").contains(&"SENTINEL MASTER m".to_owned()));
    assert_eq!(net.session.slot_owner(0), Some(&addr("b")));
    // s3 and s1 are asked next, both naming a at epoch 1, for several rounds.
    let asked = net.questions();
    net.advance_until(|net| net.questions() >= asked + 4);
    assert_eq!(net.session.slot_owner(0), Some(&addr("b")));
    assert_eq!(net.run_set("k2"), OK);
    net.switch_master("a", "b");
    assert_eq!(net.run_set("k3"), OK);
    assert_eq!(net.received("a"), ["PING", "ROLE", "SET k1 v"]);
    assert_eq!(net.received("b"), ["PING", "ROLE", "SET k2 v", "SET k3 v"]);
}

/// A failover this client missed, then one it hears of: the message names a master replaced
/// before the one in use, so the client asks, and the answer's epoch decides.
#[test]
fn a_switch_message_about_another_master_makes_the_client_ask() {
    let mut net = Net::new();
    assert_eq!(net.run_set("k1"), OK);
    // The sentinels failed over to b and then, at a higher epoch, back to a; the first
    // message was missed and a late one about the first failover arrives.
    net.sentinels_name("b");
    net.sentinels_name("a");
    let (asked, at) = (net.questions(), net.now);
    net.switch_master("x", "b");
    net.advance_until(|net| net.questions() > asked);
    // Asked within the refresh's rate limit, well before the next refresh interval.
    assert!(
        net.now - at <= Duration::from_millis(100),
        "{:?}",
        net.now - at
    );
    assert_eq!(net.session.slot_owner(0), Some(&addr("a")));
    assert_eq!(net.run_set("k2"), OK);
    assert!(net.received("b").is_empty(), "{:?}", net.received("b"));
}

/// A client that followed the sentinels from a to b, after the sentinels failed back to a
/// without the `+switch-master` reaching it: a failback is a failover, voted at a higher epoch,
/// so the next answer is believed.
fn failed_back_unheard() -> Net {
    let mut net = Net::new();
    assert_eq!(net.run_set("k1"), OK);
    net.sentinels_name("b");
    net.switch_master("a", "b");
    assert_eq!(net.run_set("k2"), OK);
    net.sentinels_name("a");
    net
}

#[test]
fn a_failback_the_subscription_missed_is_followed_when_the_new_master_refuses() {
    let mut net = failed_back_unheard();
    // b answers `READONLY`; the sentinels are asked and name a.
    assert_eq!(net.run_set("k3"), OK);
    assert_eq!(net.received("a").last().unwrap(), "SET k3 v");
    assert!(net.received("b").contains(&"SET k3 v".to_owned()));
}

#[test]
fn a_failback_the_subscription_missed_is_followed_when_the_new_master_says_replica() {
    let mut net = failed_back_unheard();
    // b's connection drops, and on the new one b's `ROLE` says replica.
    net.cut("b", "cut");
    assert_eq!(net.run_set("k3"), OK);
    assert_eq!(net.received("a").last().unwrap(), "SET k3 v");
    assert!(!net.received("b").contains(&"SET k3 v".to_owned()));
}

/// Sentinels set up again (`SENTINEL MONITOR` anew) start at epoch 0: their answer naming
/// another master is not followed while the master in use takes writes, and is once it says
/// it is a replica.
#[test]
fn sentinels_reset_to_a_lower_epoch_are_followed_once_the_master_in_use_says_replica() {
    let mut net = Net::new();
    net.sentinels_name("a");
    net.sentinels_name("a");
    assert_eq!(net.run_set("k1"), OK);
    for s in ["s1", "s2", "s3"] {
        net.nodes
            .insert(addr(s), Node::Sentinel(Some((addr("b"), 0))));
    }
    net.nodes.insert(addr("b"), Node::Master);
    net.cut("a", "restarted");
    assert_eq!(net.run_set("k2"), OK);
    assert_eq!(net.received("a").last().unwrap(), "SET k2 v");
    // a is made a replica of b: its `READONLY` lets the reset sentinels' answer in.
    net.nodes.insert(addr("a"), Node::Replica);
    assert_eq!(net.run_set("k3"), OK);
    assert_eq!(net.received("b"), ["PING", "ROLE", "SET k3 v"]);
}

/// A sentinel whose ACL refuses `SUBSCRIBE`: the client keeps following the master by asking,
/// and tries the subscription again at most once a refresh interval, then less and less often
/// (once, asked again at each answer and at each loss of the subscription, it made a question and
/// a connection ten times a second).
#[test]
fn a_refused_subscription_is_tried_again_seldom_and_the_master_still_followed() {
    let mut net = Net::with(|c| c.refresh_interval = Duration::from_secs(1));
    for s in ["s1", "s2", "s3"] {
        net.nodes
            .insert(addr(s), Node::Unsubscribable((addr("a"), 1)));
    }
    let started = net.now;
    assert_eq!(net.run_set("k1"), OK);
    net.advance_until(|net| net.now >= started + Duration::from_secs(20));
    let subscribes = net
        .log
        .iter()
        .filter(|l| l.ends_with("SUBSCRIBE +switch-master"))
        .count();
    // At 0 s, then after 1, 2, 4 and 8 more seconds: 0, 1, 3, 7, 15.
    assert_eq!(subscribes, 5, "{:?}", net.log);
    // A question each refresh interval, and none more.
    assert!(
        (20..=22).contains(&net.questions()),
        "{} questions",
        net.questions()
    );
    // A failover is followed at the next question.
    net.nodes.insert(addr("b"), Node::Master);
    for s in ["s1", "s2", "s3"] {
        net.nodes
            .insert(addr(s), Node::Unsubscribable((addr("b"), 2)));
    }
    let asked = net.questions();
    net.advance_until(|net| net.questions() > asked);
    assert_eq!(net.run_set("k2"), OK);
    assert_eq!(net.received("b"), ["PING", "ROLE", "SET k2 v"]);
}

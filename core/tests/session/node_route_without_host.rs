//! A request routed to a node whose address has no host (`:port`, how the scan names a master
//! whose `CLUSTER SLOTS` endpoint is `NULL`, empty or `?`) goes to that port on the host of the
//! node that answered the plan's previous request, through the session's simulated cluster.
//!
//! This is the session side of the scan's fix (`core/src/scan.rs`): without it the session
//! would refuse `:port` as not a node address.

use std::collections::BTreeMap;

use botmesh_redis_core::driver::scan::{masters_of, masters_request};
use botmesh_redis_core::driver::session::Config;
use botmesh_redis_core::driver::{Plan, Reply, Step};
use botmesh_redis_core::testing::sim::{Harness, SimCluster};
use botmesh_redis_core::testing::start;
use botmesh_redis_core::NodeAddr;
use botmesh_redis_core::{Access, Request};
use botmesh_redis_core::{Error, Value};

/// Asks for the masters, then reads one key each master owns, on that master by its address
/// as `masters_of` gives it; yields the addresses used and the replies.
struct VisitEveryMaster {
    key_by_port: BTreeMap<u16, String>,
    addrs: Option<Vec<String>>,
}

impl Plan for VisitEveryMaster {
    type Output = Vec<(String, Reply)>;

    fn operation(&self) -> &'static str {
        "visit_every_master"
    }

    fn start(&mut self) -> Step<Self::Output> {
        Step::Send(masters_request().unwrap().into())
    }

    fn resume(&mut self, replies: Vec<Reply>) -> Step<Self::Output> {
        if let Some(addrs) = self.addrs.take() {
            return Step::Done(Ok(addrs.into_iter().zip(replies).collect()));
        }
        let reply = replies.into_iter().next().unwrap();
        let addrs: Vec<String> = match masters_of(reply) {
            Ok(nodes) => nodes.into_iter().map(Option::unwrap).collect(),
            Err(e) => return Step::Done(Err(e)),
        };
        let requests = addrs
            .iter()
            .map(|addr| {
                let port: u16 = addr.rsplit_once(':').unwrap().1.parse().unwrap();
                Request::cmd(Access::Read, "GET")
                    .arg(self.key_by_port[&port].as_str())
                    .to_node(addr.as_str())
                    .build()
                    .unwrap()
            })
            .collect();
        self.addrs = Some(addrs);
        Step::Send(requests)
    }
}

#[test]
fn a_node_address_without_host_is_the_answering_host() {
    let mut sim = SimCluster::cluster(3, 0);
    let masters = sim.masters();
    // Every master announces an empty host, as `CLUSTER SLOTS` does for an unknown endpoint.
    for m in &masters {
        sim.announce_as(m, NodeAddr::new("", m.port));
    }
    let key_by_port: BTreeMap<u16, String> = masters
        .iter()
        .map(|m| (m.port, sim.keys_on(m, 1).remove(0)))
        .collect();
    for m in &masters {
        sim.set_value(key_by_port[&m.port].as_bytes(), format!("v{}", m.port));
    }
    let mut h = Harness::new(start(), sim, Config::cluster(masters.clone()));
    let token = h.submit(VisitEveryMaster {
        key_by_port: key_by_port.clone(),
        addrs: None,
    });
    let visited: Vec<(String, Reply)> = h.wait_for(&token).unwrap();
    let expected: Vec<(String, Reply)> = masters
        .iter()
        .map(|m| {
            (
                format!(":{}", m.port),
                Ok::<Value, Error>(Value::from(format!("v{}", m.port).as_str())),
            )
        })
        .collect();
    assert_eq!(visited, expected);
    // Each read went to its own master, on the host the session dialled for the roots.
    for m in &masters {
        let get = format!("GET {}", key_by_port[&m.port]);
        assert!(
            h.sim.commands_on(m).contains(&get),
            "{m}: {:?}",
            h.sim.commands_on(m)
        );
    }
}

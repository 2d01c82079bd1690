//! The simulated deployment (the `testing` feature): a pure fake of one Redis node or a Redis
//! Cluster, and the harness that steps a session against it on simulated time. (The real
//! `redis-server` processes of the integration suites are another crate's,
//! `botmesh-redis-harness`.)
//!
//! - [`SimCluster`] (`cluster.rs`): the nodes, shards, slots and data, and what a test changes
//!   between runs (slot moves, failovers, stalls); `wire.rs`: connections and each command as a
//!   node runs it; [`Rule`] and the other faults (`faults.rs`).
//! - [`Harness`] (`harness.rs`): steps a [`Session`](crate::driver::session::Session) and a
//!   `SimCluster` together, as a driver would, and records every connection's writes.

mod cluster;
mod faults;
mod harness;
mod wire;

pub use cluster::{
    render_args, Data, Received, ScriptFn, SimCluster, SimEvent, FIRST_PORT, SIM_HOST,
};
pub use faults::{ConnectMode, Demotion, Rule, RuleAction};
pub use harness::{Chunking, Harness, Wire, HANG};
pub use wire::encode_reply;

use crate::driver::session::Config;

impl Harness {
    /// A harness over a fresh simulated cluster of `masters` shards with `replicas` each, and
    /// the default cluster configuration.
    pub fn cluster(masters: usize, replicas: usize) -> Harness {
        let sim = SimCluster::cluster(masters, replicas);
        let config = Config::cluster(sim.masters());
        Harness::new(super::start(), sim, config)
    }
}

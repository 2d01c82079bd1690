//! Integration-test support for botmesh-redis: the suites' shared code (the chaos load, the
//! conformance runtimes, the migration keyspace generator) over the real-server harness of
//! `botmesh-redis-harness`, re-exported here as [`harness`] so that the suites name one crate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod chaos;
pub mod conformance;
pub mod coord;
pub mod counters;
pub mod keyspace;
pub mod lifecycle;
pub mod store;

pub use botmesh_redis_harness as harness;

pub use conformance::{driver_name, exclusive, AsyncStd, Client, Runtime, Tokio};
pub use harness::{
    eventually, external_mode, parse_cluster_slots, parse_info, poll_until, redis_server_path,
    server_version, shared_cluster, shared_single, unique_prefix, AdminConn, ClusterOptions,
    Migration, Product, RedisCluster, RedisServer, SentinelDeployment, SentinelOptions,
    ServerOptions, ServerVersion, SingleNode, SlotRange, Value, EXTERNAL_CLUSTER_VAR,
    EXTERNAL_SINGLE_VAR, MISSING_SERVER, SLOT_COUNT,
};

/// The repository README's example, compiled as a doctest.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

//! Integration-test support for botmesh-redis: a harness that runs real `redis-server`
//! processes (single nodes and Redis Clusters on loopback) and a small blocking admin
//! connection to inspect and steer them. See [`harness`].
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod chaos;
pub mod conformance;
pub mod harness;
pub mod keyspace;

pub use conformance::{driver_name, exclusive, AsyncStd, Client, Runtime, Tokio};
pub use harness::{
    eventually, external_mode, parse_cluster_slots, parse_info, poll_until, redis_server_path,
    server_version, shared_cluster, shared_single, unique_prefix, AdminConn, ClusterOptions,
    Migration, Product, RedisCluster, RedisServer, ServerOptions, ServerVersion, SingleNode,
    SlotRange, Value, EXTERNAL_CLUSTER_VAR, EXTERNAL_SINGLE_VAR, MISSING_SERVER, SLOT_COUNT,
};

/// The repository README's example, compiled as a doctest.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;

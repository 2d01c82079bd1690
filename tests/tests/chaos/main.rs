//! The chaos suites: masters stopped, killed or partitioned, slots migrated and resharded, under
//! open-loop load on real Redis Clusters (`botmesh_redis_tests::chaos`); one module per fault.
//!
//! One test binary per family (str0m's `tests/bwe/main.rs` is the model): the suites link
//! once, and share the family's servers (`shared_cluster`, `shared_single`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod dead_master_resources_bounded;
mod killed_master;
mod partition;
mod resharding;
mod sentinel_failover;
mod slot_migration;
mod stopped_master;

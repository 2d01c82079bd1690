//! # botmesh-redis-core
//!
//! The sans-IO core of botmesh-redis: everything that decides *what* to send to Redis and *what
//! a reply means*, with no sockets, no clock, no sleeps and no runtime. Drivers
//! (`botmesh-redis-tokio`, `botmesh-redis-async-std`) only move bytes, sleep and spawn.
//!
//! ## The pieces
//!
//! - [`keys`]: the `cluster:v1` primitives: segment encoding ([`keys::enc`]), hash tags, CRC16
//!   slots and FNV-1a buckets. Part of the layout contract.
//! - [`layout`]: the two key layouts, `legacy` and `cluster:v1`; [`layout::Keyspace`] produces
//!   every key of every namespace in either.
//! - [`request`]: a [`request::Request`] is one command or script call with its declared keys,
//!   route and access. A call whose keys span slots cannot be built ([`Error::CrossSlot`]).
//! - [`script`]: a Lua script, embedded and hashed once, sent as `EVALSHA`; [`scripts`]: the
//!   manifest that declares every script of `lua/` once.
//! - [`plan`]: one state machine per store operation, emitting batches of requests and waits.
//! - [`store`]: the plans of the store's operations.
//! - [`migrate`]: inspection, the migration between the layouts and the rollback.
//! - [`value`]: replies, decoded with `redis-protocol`, and typed accessors.
//!
//! ## Layers
//!
//! ```text
//!  typed API (Store, Coordinator, ...)      one async facade, written once
//!        │ builds
//!        ▼
//!  Plan ──Step::Send(batch)──► session ──bytes──► driver ──TCP──► Redis
//!        ◄──replies────────── (routing,  ◄─bytes──        ◄──────
//!                              retries)
//! ```
//!
//! Everything above the driver is in this crate and is tested without a network: plans with
//! scripted replies and snapshots, properties with `proptest`.
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod coord;
pub mod coordinator;
pub mod error;
pub mod executor;
pub mod framing;
pub mod keys;
pub mod layout;
pub mod migrate;
pub mod options;
pub mod plan;
pub mod request;
pub mod retry;
pub mod scan;
pub mod script;
pub mod scripts;
pub mod session;
pub mod shell;
pub mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod topology;
pub mod ttl;
pub mod value;

pub use error::Error;
pub use error::ServerError;
pub use executor::Executor;
pub use keys::Key;
pub use layout::{Keyspace, Layout};
pub use options::ClientOptions;
pub use plan::{Plan, Reply, Step};
pub use request::{Access, Request, Route};
pub use topology::NodeAddr;
pub use value::Value;

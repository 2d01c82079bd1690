//! # botmesh-redis-core
//!
//! The sans-IO core of botmesh-redis: everything that decides *what* to send to Redis and *what
//! a reply means*, with no sockets, no clock, no sleeps and no runtime. Drivers
//! (`botmesh-redis-tokio`, `botmesh-redis-async-std`) only move bytes, sleep and spawn.
//!
//! ## The pieces
//!
//! Keys and layouts:
//!
//! - [`keys`]: the `cluster:v1` primitives: segment encoding ([`keys::enc`]), hash tags, CRC16
//!   slots and FNV-1a buckets. Part of the layout contract.
//! - [`layout`]: the two key layouts, `legacy` and `cluster:v1`; [`layout::Keyspace`] produces
//!   every key of every namespace in either.
//! - [`ttl`]: times to live as Redis takes them.
//!
//! Requests and plans:
//!
//! - [`request`]: a [`request::Request`] is one command or script call with its declared keys,
//!   route and access. A call whose keys span slots cannot be built ([`Error::CrossSlot`]).
//! - [`script`]: a Lua script, embedded and hashed once, sent as `EVALSHA`; [`scripts`]: the
//!   manifest that declares every script of `lua/` once.
//! - [`plan`]: one state machine per store operation, emitting batches of requests and waits.
//! - [`scan`]: `SCAN` over every master, for the legacy listings and the start guard.
//! - [`value`]: replies, decoded with `redis-protocol`, and typed accessors; [`error`]: the one
//!   error type, with the server's error replies.
//!
//! The typed API, written once over any [`Executor`] ([`executor`]):
//!
//! - [`store`]: the store's operations and their plans; [`codec`]: typed records, a user's
//!   own struct stored through a [`codec::Codec`] (`Store::typed`);
//! - [`coord`] (plans) and [`coordinator`] (the async API): locks with fences, per-chat turns,
//!   leaderships, heartbeats, schedules, leases, the durable inbox/outbox;
//! - [`migrate`]: inspection, the migration between the layouts and the rollback.
//!
//! The session, which a driver runs:
//!
//! - [`options`]: what a user configures (URL or root nodes, credentials, timeouts, retries);
//! - [`session`]: the routing state machine: slot map, connections, ops in flight, retries,
//!   refreshes, timers and the caller waiting for each plan; a driver feeds it events and
//!   carries out its outputs, keeping only sockets and tasks;
//! - [`topology`]: node addresses, `CLUSTER SLOTS` and `MOVED`/`ASK` replies; [`retry`]: what a
//!   reply means for routing, and the backoff; [`framing`]: where a reply ends in a buffer;
//! - `testing` (feature `testing`): a simulated cluster and scripted runners for tests.

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
//!
//! ## Features
//!
//! None is on by default; the drivers forward `serde` and `json` under the same names.
//!
//! - `serde`: `Serialize`/`Deserialize` for [`Layout`] (as its name: `"legacy"`, `"cluster"`;
//!   `"cluster:v1"` also reads), and the config structs `options::ClientConfig`,
//!   `options::StoreConfig` and `options::TurnConfig`, so options come from a config file
//!   (`docs/store.md`).
//! - `json`: `serde`, plus `codec::Json`, which stores typed records as JSON with `serde_json`.
//! - `testing`: the `testing` module: a simulated cluster and scripted runners, for
//!   deterministic tests of sessions and plans.
//! - `fuzzing`: `testing`, plus `arbitrary::Arbitrary` for its random inputs and faults (the
//!   fuzz targets in `fuzz/`).
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod codec;
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
pub mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod topology;
pub mod ttl;
pub mod value;

pub use codec::{Codec, CodecError, Typed};
#[cfg(feature = "json")]
pub use codec::Json;
pub use coord::{
    Acked, Begun, Claimed, Schedule, SchedulePage, SkipReason, TurnEvent, TurnGrant, TurnGuard,
    TurnOptions,
};
pub use coordinator::{Coordinator, Durability, Leases, Schedules};
pub use error::ServerError;
pub use error::{ConfigError, Error};
pub use layout::{KeyError, ParseLayoutError};
#[cfg(feature = "serde")]
pub use options::{ClientConfig, StoreConfig, TurnConfig};
pub use store::{
    DeletedChat, Message, MessageCursor, MessagePage, MessageQuery, Record, RecordPage, Started,
    Store, StoreOptions, UserEntry,
};
pub use executor::{Deployment, Executor};
pub use keys::Key;
pub use layout::{Keyspace, Layout};
pub use options::{ClientOptions, TlsOptions};
pub use plan::{Plan, Reply, Step};
pub use request::{Access, NodeTarget, Request, Route};
pub use topology::NodeAddr;
pub use value::Value;

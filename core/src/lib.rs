//! # botmesh-redis-core
//!
//! The sans-IO core of botmesh-redis: everything that decides *what* to send to Redis and *what
//! a reply means*, with no sockets, no clock, no sleeps and no runtime. Drivers
//! (`botmesh-redis-tokio`, `botmesh-redis-async-std`) only move bytes, sleep and spawn.
//!
//! Bot authors depend on a driver crate, which re-exports this crate's public surface; the
//! names below are the same there.
//!
//! ## The public surface
//!
//! At the crate root, the typed API a bot meets, written once over any [`Executor`]:
//!
//! - [`Store`] ([`StoreOptions`]): messages per chat ([`MessageQuery`], [`MessagePage`]), chat,
//!   contact and checkpoint records ([`RecordPage`]), per-user data, conversation state and
//!   cursors; [`Store::typed`] stores a user's own struct through a [`Codec`].
//! - [`Coordinator`] (locks with fences, per-chat turns, leaderships with terms, heartbeats),
//!   [`Schedules`], [`Leases`] and [`Durability`] (the durable inbox/outbox), each built from
//!   the store so they share its prefix and layout.
//! - [`Error`], with [`ConfigError`], [`KeyError`] and [`ServerError`]: every failure typed,
//!   saying whether the outcome is unknown ([`Error::outcome_unknown`]).
//! - [`Layout`] and [`Keyspace`]: the two key layouts, `legacy` and `cluster:v1`;
//!   [`ClientOptions`] and [`TlsOptions`]: what a client connects to; [`Request`] and
//!   [`Value`]: raw commands, for what the typed API does not cover.
//!
//! Modules:
//!
//! - [`keys`]: the `cluster:v1` primitives (segment encoding, hash tags, CRC16 slots, FNV-1a
//!   buckets) and every key name of every namespace ([`keys::Keyspace`]): the layout contract.
//! - [`migrate`]: inspection, the migration between the layouts and the rollback.
//! - [`codec`]: typed records.
//! - [`driver`]: the sans-IO machinery under the typed API, for driver authors: the routing
//!   [`driver::session`], the [`driver::Plan`] of every operation, requests, scripts,
//!   topology and retries. A bot author never needs it.
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
//!   `"cluster:v1"` also reads), and the config structs `ClientConfig` (with `TlsConfig`),
//!   `StoreConfig` and `TurnConfig`, so options come from a config file (`docs/store.md`).
//! - `json`: `serde`, plus `codec::Json`, which stores typed records as JSON with `serde_json`.
//! - `testing`: the `testing` module: a simulated cluster and scripted runners, for
//!   deterministic tests of sessions and plans.
//! - `fuzzing`: `testing`, plus `arbitrary::Arbitrary` for its random inputs and faults (the
//!   fuzz targets in `fuzz/`).
#![forbid(unsafe_code)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod codec;
mod coordinator;
pub mod driver;
mod error;
mod executor;
pub mod keys;
mod layout;
pub mod migrate;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

// The crate's own code names the driver's modules from the root, as before they moved.
use driver::{
    coord, framing, options, plan, request, retry, scan, script, scripts, session, store, topology,
    ttl, value,
};

// The crate root is the typed API a bot author meets; the machinery under it is in `driver`.

// The store and its records.
pub use store::{
    DeletedChat, Message, MessageCursor, MessagePage, MessageQuery, Page, Record, RecordPage,
    Started, Store, StoreOptions, UserDataCursor, UserDataPage, UserEntry, MAX_PAGE,
};
// Coordination.
pub use coord::MIN_IDLE_LIFETIME;
pub use coord::{
    Acked, Begun, Claimed, Schedule, SchedulePage, SkipReason, TurnEvent, TurnGrant, TurnGuard,
    TurnOptions,
};
pub use coordinator::{Coordinator, Durability, Leases, Schedules};
// Typed records.
#[cfg(feature = "json")]
pub use codec::Json;
pub use codec::{Codec, CodecError, Typed};
// Errors.
pub use error::{ConfigError, Error, ServerError};
pub use layout::{KeyError, ParseLayoutError};
// Configuration and the client's side of the seam.
pub use executor::{Deployment, Executor};
pub use layout::{Keyspace, Layout};
#[cfg(feature = "serde")]
pub use options::{ClientConfig, StoreConfig, TlsConfig, TurnConfig};
pub use options::{ClientOptions, Pem, TlsOptions};
// Raw commands, for what the typed API does not cover (`Executor::call`).
/// Record values and message bodies are `Bytes`; re-exported so a caller needs no extra
/// dependency to build one.
pub use bytes::Bytes;
pub use keys::Key;
pub use request::{Access, NodeTarget, Request, Route};
/// A bot's own Lua script, for [`Request::script`] (`static MY_SCRIPT: Script = Script::new(..)`).
pub use script::Script;
pub use topology::NodeAddr;
pub use ttl::MAX_TTL;
pub use value::Value;

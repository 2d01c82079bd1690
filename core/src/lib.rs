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
//! - [`Store`] ([`StoreOptions`]): messages per chat ([`MessagePage`]), chat, contact and
//!   checkpoint records ([`RecordPage`]), per-user data, conversation state and cursors;
//!   [`Store::typed`] ([`Typed`]) stores a user's own struct through a codec
//!   ([`codec::Encode`], [`codec::Decode`]). Every listing has one shape: scope, then
//!   `after: Option<&Cursor>` and a [`Limit`], answered by a [`Page`].
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
//!   buckets), [`keys::Key`], and the names of the record kinds and turn parts: with
//!   [`Keyspace`], which names every key of every namespace, the layout contract.
//! - [`migrate`]: inspection, the migration between the layouts and the rollback.
//! - [`codec`]: typed records.
//! - [`driver`]: the sans-IO machinery under the typed API, for driver authors: the routing
//!   [`driver::session`], the [`driver::Plan`] of every operation, requests, scripts,
//!   topology and retries. A bot author never needs it.
//!
//! Every item has one public path: the crate root, one of these modules, or `driver`. The
//! source files are private modules named after what they hold (`src/session/`,
//! `src/store/`, ...); the paths above are built from them by re-exports.
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

// One file (or folder) per module; every module is private, and the public paths are the
// re-exports below: the typed API at the root, the machinery in `driver`.
mod addr;
mod batch;
mod blocking;
pub mod codec;
mod coord;
mod error;
mod exact;
mod executor;
mod framing;
pub mod keys;
pub mod migrate;
mod one_or_vec;
mod options;
mod page;
mod plan;
mod probe;
mod request;
mod retry;
mod scan;
mod script;
mod scripts;
mod session;
mod store;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod topology;
mod ttl;
mod value;
mod wire;

// The store and its records.
pub use store::{
    DeletedChat, Message, MessageCursor, MessagePage, Record, RecordCursor, RecordPage, Started,
    Store, StoreOptions, Typed, UserDataCursor, UserDataPage, UserEntry,
};
// Listings.
pub use page::{Limit, Page, MAX_PAGE};
// Coordination.
pub use coord::MIN_IDLE_LIFETIME;
pub use coord::{
    Acked, Begun, Claimed, Coordinator, Durability, Keeper, Leadership, Lease, Leases, Lock,
    Released, Schedule, ScheduleCursor, SchedulePage, Schedules, SkipReason, Turn, TurnEvent,
    TurnGrant, TurnGuard, TurnOptions,
};
// Errors.
pub use error::{ConfigError, Error, SeedAnswer, ServerError};
pub use keys::layout::{KeyError, ParseLayoutError};
// Configuration and the client's side of the seam.
pub use executor::{Deployment, Executor, IntoKeyspace};
pub use framing::DEFAULT_MAX_REPLY_ELEMENTS;
pub use keys::layout::{Keyspace, Layout};
#[cfg(feature = "serde")]
pub use options::{ClientConfig, SentinelConfig, StoreConfig, TlsConfig, TurnConfig};
pub use options::{ClientOptions, Pem, TlsOptions, MAX_LANES};
// Raw commands, for what the typed API does not cover (`Executor::call`).
pub use addr::NodeAddr;
/// Record values and message bodies are `Bytes`; re-exported so a caller needs no extra
/// dependency to build one.
pub use bytes::Bytes;
pub use keys::encoding::Key;
pub use request::{Access, NodeTarget, Request, Route};
/// A bot's own Lua script, for [`Request::script`] (`static MY_SCRIPT: Script = Script::new(..)`).
pub use script::Script;
pub use ttl::{MAX_TTL, MIN_TTL};
pub use value::Value;

pub mod driver {
    //! The sans-IO machinery under the typed API, for driver authors and for tests of plans.
    //!
    //! A bot author never needs this module: [`Store`](crate::Store), the coordination types and the driver
    //! crates' `Client` cover everything a bot does. A driver author runs a [`session::Session`]:
    //! it feeds the session bytes, connection events and timeouts, and carries out its
    //! [`session::Output`]s (connect, transmit, close, complete a waiter, wait until). The typed API
    //! reaches the session through [`Executor::run`](crate::Executor::run) with a [`Plan`]: one state machine per store
    //! operation, emitting batches of requests.
    //!
    //! These modules follow the crate's version like the rest, but they are the library's inside:
    //! expect them to change more often than the typed API above them. They hold only what the
    //! crate root does not: [`NodeAddr`](crate::NodeAddr), [`Request`](crate::Request),
    //! [`Value`](crate::Value) and the rest of the typed API keep
    //! their one path at the root.
    //!
    //! - [`session`]: the routing state machine (slot map, connections, ops, retries, timers);
    //! - [`Plan`], [`Step`], [`Reply`]: the plan protocol, and [`plan`]: one-request plans and
    //!   scripted runners;
    //! - [`store`] and [`coord`]: the plan of every store and coordination operation, which the
    //!   typed API runs; useful to test an operation's requests without a server;
    //! - [`request`], [`scripts`]: building requests, and the Lua scripts of the core;
    //! - [`topology`], [`retry`], [`framing`], [`value`]: `CLUSTER SLOTS` and redirects, what a
    //!   reply means for routing and the backoff, where a reply ends in a buffer, decoding replies;
    //! - [`scan`]: `SCAN` over every master; [`options`]: URL parsing.

    pub use crate::plan::{Batch, BatchIter, Plan, Reply, Step};

    pub mod session {
        //! The routing session: the one state machine a driver talks to. Its contract (inputs,
        //! outputs, the drain rule) is written on [`Session`].

        pub use crate::addr::DialTarget;
        pub use crate::session::{
            AddressMap, Auth, Completion, Config, ConnId, Decoded, Endpoints, Event, Output,
            ReplyDecoder, RetryReason, SentinelEndpoints, Session, SlotOwners, Submission, Summary,
            Tally, TimerReason, Waiters, FORGET_AFTER,
        };
    }

    pub mod plan {
        //! One-request plans, the connect check a client runs first ([`connect_check`]: is
        //! the node what the options name?), and a scripted runner for plan snapshots (`Plan`, `Step` and `Reply`
        //! are [`driver`](crate::driver)'s).

        #[cfg(any(test, feature = "testing"))]
        pub use crate::plan::scripted;
        pub use crate::plan::{render_batch, single, Single};
        pub use crate::probe::{connect_check, info_cluster_enabled, ConnectCheck};
    }

    pub mod store {
        //! The plan of every store operation, in either layout (the typed API over them is
        //! [`Store`](crate::Store)).

        pub mod conv {
            //! Conversation state: get, set with TTL, delete.

            pub use crate::store::conv::{delete_conversation, get_conversation, set_conversation};
        }
        pub mod cursor {
            //! Cursors: get, set, set if greater.

            pub use crate::store::cursor::{get_cursor, set_cursor, set_cursor_if_greater};
        }
        pub mod delete_chat {
            //! Deleting a chat: its messages in atomic chunks, then its record.

            pub use crate::store::delete_chat::{delete_chat, DeleteChat};
        }
        pub mod guard {
            //! The `start()` guard of each layout.

            pub use crate::store::guard::{
                eviction_policy, is_legacy_layout_key, start, StartGuard, SCAN_LIMIT,
            };
        }
        pub mod messages {
            //! Messages: save, get, list (by time range, paged), delete.

            pub use crate::store::messages::{
                delete_message, get_message, list_messages, save_message, ListMessages,
            };
        }
        pub mod records {
            //! Chats, contacts and checkpoints.

            pub use crate::store::records::{
                delete_record, get_record, list_records, set_checkpoint, upsert_record, ListRecords,
            };
        }
        pub mod user {
            //! User data (`ctx.user`).

            pub use crate::store::user::{
                check_legacy_ids, clear_user_data, delete_user_data, get_user_data, list_user_data,
                set_user_data, ClearUserData, ListUserData,
            };
        }
    }

    pub mod coord {
        //! The plan of every coordination operation, in either layout (the typed API over them is
        //! [`Coordinator`](crate::Coordinator), [`Schedules`](crate::Schedules),
        //! [`Leases`](crate::Leases) and [`Durability`](crate::Durability)).

        pub use crate::coord::{
            acquire_turn, heartbeat, heartbeat_stop, journal_begin, journal_forget,
            leader_campaign, leader_campaign_replicated, leader_renew, leader_renew_in_term,
            leader_resign, leader_resign_in_term, lease_acquire, lease_acquire_replicated,
            lease_release, lease_renew, live_replicas, lock_acquire, lock_acquire_replicated,
            lock_extend, lock_release, outbox_ack, outbox_claim, outbox_enqueue, outbox_recover,
            replica_alive, schedule_delete, schedule_get, schedule_list, schedule_put, turn_extend,
            turn_release, AcquireTurn, ListSchedules, LiveReplicas, LockAcquire, Replicated,
            DURABLE_PARTS,
        };
    }

    pub mod request {
        //! Building requests ([`Request`](crate::Request) is at the crate root).

        pub use crate::request::{Arg, CommandBuilder};
        pub use crate::wire::encode_args;
    }

    pub mod scripts {
        //! Every Lua script of the core, declared once (the manifest).

        pub use crate::scripts::*;
    }

    pub mod topology {
        //! `CLUSTER SLOTS` replies and `MOVED` / `ASK` redirects, parsed defensively.

        pub use crate::topology::{
            cluster_support_disabled, parse_cluster_slots, parse_cluster_slots_with,
            parse_redirect, Redirect, Shard, Topology, TopologyError, UnknownEndpoint,
        };
    }

    pub mod retry {
        //! What a reply means for routing, and the backoff.

        pub use crate::retry::{
            classify, final_error, handshake, next_attempt, Decision, Handshake, Jitter,
            NextAttempt, RetryPolicy,
        };
    }

    pub mod framing {
        //! Where a reply ends in a read buffer.

        pub use crate::framing::{FrameScan, Scanned, MAX_DEPTH};
    }

    pub mod value {
        //! Decoding replies ([`Value`](crate::Value) is at the crate root).

        pub use crate::value::{from_frame, Frame};
    }

    pub mod scan {
        //! `SCAN` over every master.

        pub use crate::scan::{masters_of, masters_request, scan, Scan};
    }

    pub mod options {
        //! URL parsing ([`ClientOptions`](crate::ClientOptions) is at the crate root).

        pub use crate::options::{parse_sentinel_url, ParsedSentinelUrl, SENTINEL_PORT};
        pub use crate::options::{parse_url, redact_url, ParsedUrl};
    }
}

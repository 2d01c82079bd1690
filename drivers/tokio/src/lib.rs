#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub mod runtime;

pub use botmesh_redis_client::{ClientStats, OPERATION_SPAN};
pub use botmesh_redis_core::*;

/// A client on tokio. Must be started within a tokio runtime (multi-thread or current-thread).
///
/// This is the client crate's `Client` on [`runtime::Tokio`]. Its methods (their full docs follow
/// under "Implementations"):
///
/// - [`Client::connect`](#method.connect): starts the client and checks that a node answers
///   `PING`, so a wrong address or password fails here, within the connect timeout;
/// - [`Client::start`](#method.start): starts it without waiting for any node (the first
///   request connects);
/// - [`Client::close`](#method.close): closes the client, for every clone;
/// - [`Client::stats`](#method.stats): what the driver has done and holds ([`ClientStats`]);
/// - [`Client::is_cluster`](#method.is_cluster): whether it talks to a cluster;
/// - as an [`Executor`]: [`Executor::call`] for a raw command, [`Executor::run`] for a plan,
///   [`Executor::deployment`].
///
/// Clones share the connections. Most bots never build one: [`connect`] does, and
/// [`Store::executor`] gives it back.
pub type Client = botmesh_redis_client::Client<runtime::Tokio>;

/// Connects to Redis and opens the store: the one call a bot makes first.
///
/// `client` is one node's URL (`"redis://..."`, `"rediss://..."` for TLS) or
/// [`ClientOptions`] (a cluster's seeds with [`ClientOptions::cluster`], credentials, TLS,
/// timeouts); `store` is a prefix (`"mybot"`) or [`StoreOptions`]. The layout follows the
/// client: `cluster:v1` on a cluster, legacy on a single node unless the options choose. The
/// store's start guard runs before it is returned ([`Store::start`]); the client is
/// [`Store::executor`], to close it at the end.
pub async fn connect(
    client: impl Into<ClientOptions>,
    store: impl Into<StoreOptions>,
) -> Result<Store<Client>, Error> {
    botmesh_redis_client::connect::<runtime::Tokio>(client.into(), store.into()).await
}

// The user guides' examples, compiled as doctests of this crate: the code a bot that depends on
// `botmesh-redis-tokio` writes. Blocks that need a server are `no_run` (compiled, not run).
// `docs/teloxide.md` is not here: its blocks are the teloxide integration's code.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
mod readme_md {}

#[cfg(doctest)]
#[doc = include_str!("../../../docs/store.md")]
mod store_md {}

#[cfg(doctest)]
#[doc = include_str!("../../../docs/coordination.md")]
mod coordination_md {}

#[cfg(doctest)]
#[doc = include_str!("../../../docs/migration.md")]
mod migration_md {}

#[cfg(doctest)]
#[doc = include_str!("../../../docs/operations.md")]
mod operations_md {}

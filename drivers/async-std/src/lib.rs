#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

pub mod runtime;

pub use botmesh_redis_client::ClientStats;
pub use botmesh_redis_core::*;

/// A client on async-std / smol.
pub type Client = botmesh_redis_client::Client<runtime::AsyncStd>;

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
    botmesh_redis_client::connect::<runtime::AsyncStd>(client.into(), store.into()).await
}

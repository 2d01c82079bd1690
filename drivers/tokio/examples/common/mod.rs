//! What the examples share: where to connect.

use botmesh_redis_tokio::{Client, ClientOptions, Error};

/// Where to connect: `BOTMESH_CLUSTER` (comma-separated seeds), else `BOTMESH_URL`, else a
/// single node at 127.0.0.1:6379.
pub(crate) async fn connect() -> Result<Client, Error> {
    let options = if let Ok(seeds) = std::env::var("BOTMESH_CLUSTER") {
        println!("connecting to the cluster of BOTMESH_CLUSTER");
        ClientOptions::cluster(seeds.split(',').map(str::trim).filter(|s| !s.is_empty()))
    } else if let Ok(url) = std::env::var("BOTMESH_URL") {
        println!("connecting to the single node of BOTMESH_URL");
        ClientOptions::url(url)
    } else {
        println!("BOTMESH_URL and BOTMESH_CLUSTER unset: connecting to redis://127.0.0.1:6379");
        ClientOptions::url("redis://127.0.0.1:6379")
    };
    Client::connect(options).await
}

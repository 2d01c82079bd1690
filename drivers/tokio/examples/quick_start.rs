//! The README's quick start, run by the test suite: the same lines, with the cluster's seeds
//! from `BOTMESH_CLUSTER` (default `127.0.0.1:7000`) and the prefix from `BOTMESH_PREFIX`
//! (default `mybot`), and a summary line that says what came back.
use botmesh_redis_tokio::{connect, ClientOptions, Limit};

#[tokio::main]
async fn main() -> Result<(), botmesh_redis_tokio::Error> {
    let seeds = std::env::var("BOTMESH_CLUSTER").unwrap_or_else(|_| "127.0.0.1:7000".into());
    let prefix = std::env::var("BOTMESH_PREFIX").unwrap_or_else(|_| "mybot".into());
    let store = connect(ClientOptions::cluster(seeds.split(',')), prefix).await?;
    store
        .save_message("chat-1", "m1", 1_700_000_000_000, "hello".into())
        .await?;
    let page = store
        .list_messages("chat-1", .., None, Limit::DEFAULT)
        .await?;
    println!("{:?}", page.items[0].payload);
    println!(
        "summary: {} message(s) listed, layout {}",
        page.items.len(),
        store.layout().name()
    );
    store.close().await; // calls in flight finish, heartbeats are removed, connections close
    Ok(())
}

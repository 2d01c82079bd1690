//! The async-std driver needs no tokio: from a plain thread, under
//! `futures_lite::future::block_on` and with no tokio runtime anywhere, it connects to a real
//! single node and a real cluster, saves and lists messages (100 saves in flight at once),
//! upserts and lists chats, and takes and gives back a lock. This is how async-std and smol
//! users run it.

use std::time::Duration;

use botmesh_redis_async_std::{Client, ClientOptions, Keyspace, Layout};
use botmesh_redis_async_std::{Coordinator, Released};
use botmesh_redis_async_std::{Limit, Message, Store, StoreOptions};
use botmesh_redis_tests::{shared_cluster, shared_single, unique_prefix};
use bytes::Bytes;
use futures_lite::future::block_on;
use futures_util::future::join_all;

/// Runs `body` to its end on this thread, after checking that no tokio runtime is around.
fn without_tokio(body: impl std::future::Future<Output = ()>) {
    block_on(async {
        assert!(
            tokio::runtime::Handle::try_current().is_err(),
            "this test must run outside any tokio runtime"
        );
        body.await;
    });
}

/// The store smoke and a lock, on `client` in `layout`.
async fn store_and_lock(client: Client, layout: Layout) {
    let prefix = unique_prefix("no-tokio");
    let store = Store::new(
        client.clone(),
        StoreOptions::new(prefix.as_str()).layout(layout),
    )
    .unwrap();
    store.start().await.unwrap();

    // Messages: 100 saves in flight at once, then listed back in (time, id) order.
    let chat = "chat:{1} 😀";
    let saved = join_all((0..100i64).map(|i| {
        let store = store.clone();
        async move {
            let id = format!("m{i:03}");
            store
                .save_message(chat, &id, 1_000 + i, Bytes::from(format!("payload {i}")))
                .await
        }
    }))
    .await;
    assert!(saved.into_iter().all(|new| new == Ok(true)));
    let mut listed = Vec::new();
    let mut after = None;
    loop {
        let page = store
            .list_messages(chat, .., after.as_ref(), Limit::of::<30>())
            .await
            .unwrap();
        listed.extend(page.items);
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    let expected: Vec<Message> = (0..100i64)
        .map(|i| Message {
            id: format!("m{i:03}"),
            time_ms: 1_000 + i,
            payload: Bytes::from(format!("payload {i}")),
        })
        .collect();
    assert_eq!(listed, expected);

    // Chats: upserted (one of them twice), listed in id order.
    for id in ["b", "a", "c"] {
        store
            .upsert_chat(id, Bytes::from(format!("chat {id}")))
            .await
            .unwrap();
    }
    store
        .upsert_chat("a", Bytes::from("chat a v2"))
        .await
        .unwrap();
    let chats = store.list_chats(None, Limit::DEFAULT).await.unwrap();
    let chats: Vec<(String, Bytes)> = chats.items.into_iter().map(|r| (r.id, r.value)).collect();
    assert_eq!(
        chats,
        [
            ("a".to_owned(), Bytes::from("chat a v2")),
            ("b".to_owned(), Bytes::from("chat b")),
            ("c".to_owned(), Bytes::from("chat c")),
        ]
    );

    // A lock: taken, refused to another owner, given back, taken again with the next fence.
    let ks = Keyspace::new(layout, prefix.as_str()).unwrap();
    let coord = Coordinator::new(client.clone(), ks, "no-tokio").unwrap();
    let ttl = Duration::from_secs(10);
    assert_eq!(coord.lock("the-lock", "a#1", ttl).await.unwrap(), Some(1));
    assert_eq!(coord.lock("the-lock", "b#1", ttl).await.unwrap(), None);
    assert_eq!(
        coord.unlock("the-lock", "b#1").await.unwrap(),
        Released::Lost
    );
    assert_eq!(
        coord.unlock("the-lock", "a#1").await.unwrap(),
        Released::Held
    );
    assert_eq!(coord.lock("the-lock", "b#1", ttl).await.unwrap(), Some(2));
    assert_eq!(
        coord.unlock("the-lock", "b#1").await.unwrap(),
        Released::Held
    );

    client.close().await;
}

#[test]
fn single_node_without_tokio() {
    // Beside the other tests, not beside the binary's exclusive ones (see `conformance`).
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let node = shared_single();
    without_tokio(async {
        let client = Client::connect(ClientOptions::url(node.url()))
            .await
            .unwrap();
        assert!(!client.is_cluster());
        store_and_lock(client, Layout::Legacy).await;
    });
}

#[test]
fn cluster_without_tokio() {
    // Beside the other tests, not beside the binary's exclusive ones (see `conformance`).
    let _turn = botmesh_redis_tests::conformance::shared_turn_blocking();
    let cluster = shared_cluster();
    without_tokio(async {
        let client = Client::connect(ClientOptions::cluster(cluster.seeds()))
            .await
            .unwrap();
        assert!(client.is_cluster());
        store_and_lock(client, Layout::Cluster).await;
    });
}

//! A durability table's windows: each call deduplicates against its own window, and entries
//! are pruned only past the longest window the calls asked for lately, so a replica with a
//! shorter window (or a deploy that shortens it) cannot remove what the others deduplicate
//! against; and a backlog of stale entries is pruned a hundred a call, not all in one call
//! (a whole window's worth of ids would hold the master that long).

use std::time::Duration;

use bytes::Bytes;

use botmesh_redis_core::{Acked, Begun, Durability, Key, Limit};
use botmesh_redis_tests::both_drivers;
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::coord::{key_cmd, server_ms, Target};
use botmesh_redis_tests::eventually;

const LONG: Duration = Duration::from_secs(600);
const SHORT: Duration = Duration::from_millis(1);
const TABLE: &str = "w";

/// Waits until the server's clock is past the short window from now.
async fn past_the_short_window<R: Runtime>(client: &Client<R>) {
    let from = server_ms(client).await;
    eventually(Duration::from_secs(5), "2 ms of server time", || {
        let client = client.clone();
        async move { (server_ms(&client).await > from + 2).then_some(()) }
    })
    .await;
}

async fn a_short_window_prunes_nothing_a_longer_one_keeps<R: Runtime>(target: Target) {
    let client = target.client::<R>().await;
    let table = Durability::new(client.clone(), target.keyspace("durable-windows"), TABLE).unwrap();

    assert_eq!(table.begin("x", "a", LONG).await.unwrap(), Begun::First);
    past_the_short_window(&client).await;
    assert_eq!(table.begin("y", "b", SHORT).await.unwrap(), Begun::First);
    // b's call pruned x before: c processed it a second time, and a's retry was told it
    // was another instance's.
    assert_eq!(table.begin("x", "c", LONG).await.unwrap(), Begun::Duplicate);
    assert_eq!(
        table.begin("x", "a", LONG).await.unwrap(),
        Begun::ByThisInstance
    );

    assert!(table
        .enqueue("k", Bytes::from_static(b"p"), LONG)
        .await
        .unwrap());
    let claimed = table.claim("a", Limit::ONE, LONG).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(table.ack("k", "a").await.unwrap(), Acked::Now);
    past_the_short_window(&client).await;
    assert!(table
        .enqueue("j", Bytes::from_static(b"q"), SHORT)
        .await
        .unwrap());
    // j's call pruned k's ack before: k was queued and sent again, and a's retried ack was
    // refused.
    assert!(!table
        .enqueue("k", Bytes::from_static(b"p"), LONG)
        .await
        .unwrap());
    assert_eq!(table.ack("k", "a").await.unwrap(), Acked::Already);
    // Past its own window, a short-window call queues k again: a new send, whose ack is not
    // the earlier one's.
    assert!(table
        .enqueue("k", Bytes::from_static(b"p2"), SHORT)
        .await
        .unwrap());
    assert!(table.ack("k", "a").await.is_err());
    client.close().await;
}

async fn a_backlog_is_pruned_a_hundred_a_call<R: Runtime>(target: Target) {
    let client = target.client::<R>().await;
    let ks = target.keyspace("durable-backlog");
    let table = Durability::new(client.clone(), ks.clone(), TABLE).unwrap();
    for i in 0..300 {
        let id = format!("m{i}");
        assert_eq!(table.begin(&id, "a", LONG).await.unwrap(), Begun::First);
    }
    // The long window forgotten (as after two of its windows without a call asking for it),
    // a short-window call finds 300 stale ids.
    let (journal, begun, window): (Key, Key, Key) = (
        ks.durable(TABLE, "journal").unwrap(),
        ks.durable(TABLE, "begun").unwrap(),
        ks.durable(TABLE, "window").unwrap(),
    );
    key_cmd(&client, "DEL", &window, &[]).await;
    past_the_short_window(&client).await;
    let count = |key: Key, command: &'static str| {
        let client = client.clone();
        async move { key_cmd(&client, command, &key, &[]).await.as_i64().unwrap() }
    };
    assert_eq!(table.begin("n1", "a", SHORT).await.unwrap(), Begun::First);
    assert_eq!(count(journal.clone(), "ZCARD").await, 201);
    assert_eq!(count(begun.clone(), "HLEN").await, 201);
    assert_eq!(table.begin("n2", "a", SHORT).await.unwrap(), Begun::First);
    assert_eq!(count(journal.clone(), "ZCARD").await, 102);
    past_the_short_window(&client).await;
    assert_eq!(table.begin("n3", "a", SHORT).await.unwrap(), Begun::First);
    assert_eq!(count(journal, "ZCARD").await, 3);
    assert_eq!(count(begun, "HLEN").await, 3);
    client.close().await;
}

both_drivers!(a_short_window_prunes_nothing_a_longer_one_keeps {
    a_short_window_prunes_nothing_a_longer_one_keeps_single_legacy => Target::SingleLegacy,
    a_short_window_prunes_nothing_a_longer_one_keeps_single_cluster => Target::SingleCluster,
    a_short_window_prunes_nothing_a_longer_one_keeps_cluster => Target::Cluster,
});

both_drivers!(a_backlog_is_pruned_a_hundred_a_call {
    a_backlog_is_pruned_a_hundred_a_call_single_legacy => Target::SingleLegacy,
    a_backlog_is_pruned_a_hundred_a_call_single_cluster => Target::SingleCluster,
    a_backlog_is_pruned_a_hundred_a_call_cluster => Target::Cluster,
});

//! A call whose caller stops waiting (a timeout around it, a `select!` that took another
//! branch) before its request is written is never written: a node that comes back does not
//! receive, behind what the bot did next, a write the bot gave up on. A plan nobody waits
//! for by design (a dropped guard's release) is written all the same.

use std::future::ready;
use std::time::Duration;

use botmesh_redis_core::{
    Access, ClientOptions, Executor, Key, Request, Store, StoreOptions, Value,
};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::coord::lock_when_free;
use botmesh_redis_tests::{both_drivers, eventually, unique_prefix, ServerOptions, SingleNode};

fn set(key: &Key, value: &str) -> Request {
    Request::cmd(Access::Write, "SET")
        .key(key)
        .arg(value)
        .build()
        .unwrap()
}

fn get(key: &Key) -> Request {
    Request::cmd(Access::Read, "GET").key(key).build().unwrap()
}

/// A client of its own node, with one lane (so that every call and every detached plan share
/// the connection that will be opening) and deadlines far past the test's own steps (so that
/// only the caller gives up).
async fn client<R: Runtime>(node: &SingleNode) -> Client<R> {
    let options = ClientOptions::url(node.url())
        .lanes(1)
        .response_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_secs(30))
        .request_timeout(Duration::from_secs(30));
    Client::<R>::connect(options).await.unwrap()
}

/// Stops the node and waits until the client's connection to it is opening again: a read
/// written to the stopped node is unanswered, at the response timeout its connection is closed
/// and the read retried on a new one, whose handshake the stopped node does not answer. Until
/// the node resumes, whatever the client is asked waits for that connection, unwritten. The
/// read's task, which ends with `key`'s value once the node resumes.
async fn stop_and_reconnect<R: Runtime>(
    node: &SingleNode,
    client: &Client<R>,
    key: &Key,
) -> tokio::task::JoinHandle<Result<Value, botmesh_redis_core::Error>> {
    node.server().pause().unwrap();
    let probe = tokio::spawn({
        let (client, key) = (client.clone(), key.clone());
        async move { client.call(get(&key)).await }
    });
    eventually(
        Duration::from_secs(10),
        "the client to dial the stopped node again",
        || ready((client.stats().reconnects >= 1).then_some(())),
    )
    .await;
    probe
}

async fn a_call_given_up_before_it_is_written_is_never_written<R: Runtime>() {
    let node = SingleNode::start(ServerOptions::new());
    let client = client::<R>(&node).await;
    let key = Key::new(unique_prefix("given-up"));
    client.call(set(&key, "before")).await.unwrap();

    let probe = stop_and_reconnect(&node, &client, &key).await;
    // The write waits for that connection; its caller gives up first.
    let given_up = tokio::time::timeout(
        Duration::from_millis(100),
        client.call(set(&key, "given up")),
    )
    .await;
    assert!(given_up.is_err(), "the write ended by itself: {given_up:?}");
    node.server().resume().unwrap();

    assert_eq!(probe.await.unwrap().unwrap(), Value::from("before"));
    assert_eq!(client.call(get(&key)).await.unwrap(), Value::from("before"));
    client.close().await;
}

/// Longer than the test: a lock not given back would still be held at its end.
const LONG: Duration = Duration::from_secs(60);

async fn a_guard_dropped_while_its_connection_opens_is_still_given_back<R: Runtime>() {
    let node = SingleNode::start(ServerOptions::new());
    let client = client::<R>(&node).await;
    let store = Store::open(
        client.clone(),
        StoreOptions::new(unique_prefix("given-back")),
    )
    .await
    .unwrap();
    let a = store.coordinator("a").unwrap();
    let lock = a
        .hold_lock("invoice-7", "a#1", LONG)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lock.fence(), 1);

    let probe = stop_and_reconnect(&node, &client, &Key::new(unique_prefix("probe"))).await;
    // The release is detached: nobody waits for it, and it waits for the connection.
    drop(lock);
    node.server().resume().unwrap();
    assert_eq!(probe.await.unwrap().unwrap(), Value::Nil);

    // Awaited, not asked once: the release goes through the session task's inbox, which a
    // call of this task written by itself could overtake. A release never written would hold
    // the lock for `LONG`.
    let b = store.coordinator("b").unwrap();
    let fence = lock_when_free(&b, "invoice-7", "b#1", LONG, "the dropped lock to be free").await;
    assert_eq!(fence, 2);
    store.close().await;
}

both_drivers!(
    a_call_given_up_before_it_is_written_is_never_written,
    a_guard_dropped_while_its_connection_opens_is_still_given_back,
);

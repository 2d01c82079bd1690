//! An idle connection is sent a `PING` once quiet for `ClientOptions::idle_probe`, and closed
//! by the response timeout when nothing answers: a server that went silent under an idle
//! client (here, every client paused) costs the next call a new connection, not a dead one.

use std::time::Duration;

use botmesh_redis_core::{Access, ClientOptions, Executor, Key, Request, Value};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::{both_drivers, eventually, unique_prefix, ServerOptions, SingleNode};

fn incr(key: &Key) -> Request {
    Request::cmd(Access::Write, "INCR")
        .key(key)
        .build()
        .unwrap()
}

async fn silence_under_an_idle_client<R: Runtime>(probe: Option<Duration>) -> u64 {
    let node = SingleNode::start(ServerOptions::new());
    let options = ClientOptions::url(node.url())
        .lanes(1)
        .idle_probe(probe)
        .response_timeout(Duration::from_millis(300));
    let client = Client::<R>::connect(options).await.unwrap();
    let key = Key::new(unique_prefix("idle-probe"));
    assert_eq!(client.call(incr(&key)).await, Ok(Value::Int(1)));
    let dials = client.stats().dials;
    // Every client's commands, PING included, held for 1.5 s.
    let mut admin = node.conn().unwrap();
    assert!(admin.cmd(&["CLIENT", "PAUSE", "1500"]).unwrap().is_ok());
    if probe.is_some() {
        eventually(
            Duration::from_secs(5),
            "the silent connection closed",
            || std::future::ready((client.stats().connections == 0).then_some(())),
        )
        .await;
    } else {
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        assert_eq!(client.stats().connections, 1, "no probe, no close");
    }
    assert!(admin.cmd(&["CLIENT", "UNPAUSE"]).unwrap().is_ok());
    assert_eq!(client.call(incr(&key)).await, Ok(Value::Int(2)));
    let redialled = client.stats().dials - dials;
    client.close().await;
    redialled
}

async fn a_silent_idle_connection_is_probed_and_closed<R: Runtime>() {
    assert_eq!(
        silence_under_an_idle_client::<R>(Some(Duration::from_millis(100))).await,
        1
    );
    // Without probes the connection is kept through the silence, and used again after it.
    assert_eq!(silence_under_an_idle_client::<R>(None).await, 0);
}

both_drivers!(a_silent_idle_connection_is_probed_and_closed);

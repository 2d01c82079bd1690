//! A client of a Redis Sentinel deployment follows `SENTINEL FAILOVER` on both drivers, even
//! with the sentinel it first asked (and subscribed to) killed beforehand: the lost
//! subscription makes it ask another sentinel and subscribe there, and the writes after the
//! failover land on the new master, every call succeeding.

use std::time::{Duration, Instant};

use botmesh_redis_core::{Access, ClientOptions, Executor, Key, Request, Value};
use botmesh_redis_tests::conformance::{set_get, Client, Runtime};
use botmesh_redis_tests::{both_drivers, unique_prefix, SentinelDeployment, SentinelOptions};

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("the harness panicked")
}

async fn failover_followed_with_the_first_sentinel_down<R: Runtime>() {
    let d = std::sync::Arc::new(
        blocking(|| SentinelDeployment::start(SentinelOptions::new().master_name("followed")))
            .await,
    );
    let client = Client::<R>::connect(ClientOptions::url(d.url()))
        .await
        .unwrap();
    set_get(&client, "followed-before").await;
    // The first round asked the first sentinel, and the client subscribed there.
    d.sentinels()[0].kill();
    let d2 = std::sync::Arc::clone(&d);
    let (old, new) = blocking(move || {
        let old = d2.master_addr().unwrap();
        (old, d2.failover(Duration::from_secs(20)).unwrap())
    })
    .await;
    assert_ne!(old, new);
    // Writes keep succeeding; within seconds they land on the new master.
    let prefix = unique_prefix("followed");
    let deadline = Instant::now() + Duration::from_secs(15);
    for i in 0.. {
        let key = format!("{prefix}:{i}");
        let set = Request::cmd(Access::Write, "SET")
            .key(Key::new(key.clone()))
            .arg("v")
            .build()
            .unwrap();
        assert_eq!(client.call(set).await, Ok(Value::Status("OK".into())));
        let d2 = std::sync::Arc::clone(&d);
        let on_new = blocking(move || {
            let mut conn = d2.node(new).unwrap().connect().unwrap();
            // Read from the new master itself: its own writes, never a replica's copy.
            conn.cmd(&["GET", key.as_str()]).unwrap().as_str() == Some("v")
        })
        .await;
        if on_new {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "writes still miss the new master {new} 15 s after the failover"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    set_get(&client, "followed-after").await;
    client.close().await;
}

both_drivers!(failover_followed_with_the_first_sentinel_down);

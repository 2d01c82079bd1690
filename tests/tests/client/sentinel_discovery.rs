//! A Redis Sentinel deployment (a master, a replica, three sentinels the harness starts), on
//! both drivers: the client asks the sentinels for the master, checks its `ROLE`, and the
//! store and coordination run on it in the legacy layout; the sentinels have credentials of
//! their own; a sentinel down is passed over; with every sentinel down, a call ends with a
//! clear error after the retries, without ever touching a data node.

use std::net::TcpListener;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use botmesh_redis_core::{ClientOptions, Coordinator, Error, Layout, Store, StoreOptions};
use botmesh_redis_tests::conformance::{set_get, Client, Runtime};
use botmesh_redis_tests::{both_drivers, unique_prefix, SentinelDeployment, SentinelOptions};

const DATA_PASSWORD: &str = "data-secret";
const SENTINEL_PASSWORD: &str = "watch-secret";

/// One deployment for the tests here that change nothing in it, with passwords on the data
/// nodes and on the sentinels.
fn shared() -> &'static SentinelDeployment {
    static DEPLOYMENT: OnceLock<SentinelDeployment> = OnceLock::new();
    DEPLOYMENT.get_or_init(|| {
        SentinelDeployment::start(
            SentinelOptions::new()
                .master_name("discovery")
                .data_password(DATA_PASSWORD)
                .sentinel_password(SENTINEL_PASSWORD),
        )
    })
}

async fn deployment_of<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("the harness panicked")
}

/// The URL form, its credentials the data nodes', the sentinels' given beside it.
fn url_options(d: &SentinelDeployment) -> ClientOptions {
    let url = d.url().replacen("://", &format!("://:{DATA_PASSWORD}@"), 1);
    ClientOptions::url(url).sentinel_credentials(None, SENTINEL_PASSWORD)
}

async fn discovery_and_the_store_on_the_master<R: Runtime>() {
    let d = deployment_of(shared).await;
    let client = Client::<R>::connect(url_options(d)).await.unwrap();
    assert!(!client.is_cluster());
    set_get(&client, "sentinel").await;
    // The write went to the master the sentinels name, and replicated to the replica.
    let master = deployment_of(|| shared().master_addr().unwrap()).await;
    let prefix = unique_prefix("sentinel-store");
    let store = Store::new(client.clone(), StoreOptions::new(prefix.clone())).unwrap();
    assert_eq!(store.layout(), Layout::Legacy);
    store.start().await.unwrap();
    assert!(store
        .save_message("chat-1", "m1", 1_700_000_000_000, "hello".into())
        .await
        .unwrap());
    let got = store.get_message("chat-1", "m1").await.unwrap().unwrap();
    assert_eq!(got.payload, botmesh_redis_core::Bytes::from("hello"));
    let coord = Coordinator::new(client.clone(), store.keyspace().clone(), "replica-1").unwrap();
    let fence = coord
        .lock("sentinel-lock", "me", Duration::from_secs(5))
        .await
        .unwrap();
    assert!(fence.is_some());
    let log = store.keyspace().message_log("chat-1");
    let on_master = deployment_of(move || {
        let d = shared();
        let mut conn = d.node(master).unwrap().connect().unwrap();
        conn.cmd(&[b"ZCARD".as_slice(), log.as_bytes()])
            .unwrap()
            .as_int()
    })
    .await;
    assert_eq!(on_master, Some(1));
    client.close().await;
}

async fn sentinel_options_with_their_own_credentials<R: Runtime>() {
    let d = deployment_of(shared).await;
    let sentinels: Vec<String> = d
        .sentinel_addrs()
        .iter()
        .map(|a| format!("redis://:{SENTINEL_PASSWORD}@{a}"))
        .collect();
    let options =
        ClientOptions::sentinel(sentinels, d.master_name()).credentials(None, DATA_PASSWORD);
    let client = Client::<R>::connect(options).await.unwrap();
    set_get(&client, "sentinel-options").await;
    client.close().await;
    // Without the sentinels' password, the sentinels refuse the question: a clear error.
    let options = ClientOptions::url(d.url()).credentials(None, DATA_PASSWORD);
    let error = Client::<R>::connect(options).await.unwrap_err();
    assert!(
        matches!(&error, Error::Auth { .. }) || matches!(&error, Error::SentinelDiscovery { .. }),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains(&d.sentinel_addrs()[0].to_string()),
        "{error}"
    );
}

async fn a_sentinel_down_is_passed_over<R: Runtime>() {
    let d =
        deployment_of(|| SentinelDeployment::start(SentinelOptions::new().master_name("one-down")))
            .await;
    let d = Arc::new(d);
    d.sentinels()[0].kill();
    let client = Client::<R>::connect(ClientOptions::url(d.url()))
        .await
        .unwrap();
    set_get(&client, "sentinel-one-down").await;
    client.close().await;
}

async fn every_sentinel_down_is_a_clear_error_after_the_retries<R: Runtime>() {
    // Three ports nobody listens on.
    let ports: Vec<u16> = (0..3)
        .map(|_| {
            TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        })
        .collect();
    let sentinels: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let options = ClientOptions::sentinel(sentinels, "nobody-home")
        .cluster_retry(5, Duration::from_millis(20))
        .connect_timeout(Duration::from_millis(500));
    let started = Instant::now();
    let error = Client::<R>::connect(options).await.unwrap_err();
    let took = started.elapsed();
    let Error::SentinelDiscovery { master, tried } = &error else {
        panic!("{error:?}");
    };
    assert_eq!(master, "nobody-home");
    let asked: Vec<u16> = tried.iter().map(|t| t.seed.port).collect();
    assert_eq!(asked, ports, "every sentinel was asked, in turn");
    assert!(
        tried
            .iter()
            .all(|t| matches!(t.answer, Error::Connect { .. })),
        "{tried:?}"
    );
    let text = error.to_string();
    assert!(text.starts_with("sentinel discovery failed"), "{text}");
    assert!(text.contains("nobody-home"), "{text}");
    // Five failed rounds backed off 20, 40, 80, 160 ms (with jitter) before the error.
    assert!(took >= Duration::from_millis(150), "{took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

both_drivers!(
    discovery_and_the_store_on_the_master,
    sentinel_options_with_their_own_credentials,
    a_sentinel_down_is_passed_over,
    every_sentinel_down_is_a_clear_error_after_the_retries
);

//! `connect` tells the truth about the deployment: a URL that names a cluster node, and root
//! nodes that name a single node, are refused with the typed error that names the fix, before
//! any request ran and without retrying; a seed nobody answers is a discovery error that names
//! the seed and what it answered.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use botmesh_redis_core::{ClientOptions, ConfigError, Error, NodeAddr, SeedAnswer};
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::{both_drivers, shared_cluster, shared_single};

/// What "at once, not after retries" means for a wrong deployment: the retries alone take
/// about 2.5 s by default.
const PROMPT: Duration = Duration::from_secs(1);

/// Connects and expects an error; the error and how long it took.
async fn refused<R: Runtime>(options: ClientOptions) -> (Error, Duration) {
    let started = Instant::now();
    let error = Client::<R>::connect(options).await.unwrap_err();
    let elapsed = started.elapsed();
    eprintln!("refused after {elapsed:?}: {error}");
    assert!(!error.outcome_unknown(), "{error:?}");
    (error, elapsed)
}

fn node_addr(addr: std::net::SocketAddr) -> NodeAddr {
    NodeAddr::new(addr.ip().to_string(), addr.port())
}

async fn a_url_naming_a_cluster_node_is_refused_with_the_fix<R: Runtime>() {
    let node = shared_cluster().nodes()[0];
    let (error, elapsed) = refused::<R>(ClientOptions::url(format!("redis://{node}"))).await;
    assert_eq!(
        error,
        Error::Config(ConfigError::ClusterNodeForSingleClient {
            addr: node_addr(node)
        })
    );
    assert!(elapsed < PROMPT, "took {elapsed:?}");
    assert!(
        error.to_string().contains("use ClientOptions::cluster(["),
        "{error}"
    );
}

async fn cluster_options_at_a_single_node_are_refused_at_once<R: Runtime>() {
    let node = shared_single().addr();
    let (error, elapsed) = refused::<R>(ClientOptions::cluster([node.to_string()])).await;
    assert_eq!(
        error,
        Error::Config(ConfigError::SingleNodeForClusterClient {
            addr: node_addr(node)
        })
    );
    assert!(elapsed < PROMPT, "took {elapsed:?}");
    assert!(
        error
            .to_string()
            .contains(&format!("use ClientOptions::url(\"redis://{node}\")")),
        "{error}"
    );
}

async fn a_dead_seed_is_a_discovery_error_naming_it<R: Runtime>() {
    // A port that was free a moment ago: nothing listens on it.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let seed = NodeAddr::new("127.0.0.1", port);
    let options = ClientOptions::cluster([seed.to_string()])
        .cluster_retry(2, Duration::from_millis(10))
        .connect_timeout(Duration::from_millis(500));
    let (error, elapsed) = refused::<R>(options).await;
    let Error::Discovery { tried } = &error else {
        panic!("not a discovery error: {error:?}");
    };
    let [SeedAnswer {
        seed: asked,
        answer: Error::Connect { addr, reason },
    }] = tried.as_slice()
    else {
        panic!("not one refused connection: {tried:?}");
    };
    assert_eq!((asked, addr), (&seed, &seed));
    assert!(reason.to_lowercase().contains("refused"), "{reason}");
    let shown = error.to_string();
    assert!(shown.starts_with("cluster discovery failed"), "{shown}");
    assert!(shown.contains(&seed.to_string()), "{shown}");
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
}

async fn a_dead_seed_beside_a_live_one_is_passed_over<R: Runtime>() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut seeds = vec![format!("127.0.0.1:{port}")];
    seeds.extend(shared_cluster().seeds());
    let client = Client::<R>::connect(ClientOptions::cluster(seeds))
        .await
        .unwrap();
    assert!(client.is_cluster());
    client.close().await;
}

async fn the_right_options_still_connect<R: Runtime>() {
    let single = Client::<R>::connect(ClientOptions::url(shared_single().url()))
        .await
        .unwrap();
    assert!(!single.is_cluster());
    single.close().await;
    let cluster = Client::<R>::connect(ClientOptions::cluster(shared_cluster().seeds()))
        .await
        .unwrap();
    assert!(cluster.is_cluster());
    cluster.close().await;
}

both_drivers!(
    a_url_naming_a_cluster_node_is_refused_with_the_fix,
    cluster_options_at_a_single_node_are_refused_at_once,
    a_dead_seed_is_a_discovery_error_naming_it,
    a_dead_seed_beside_a_live_one_is_passed_over,
    the_right_options_still_connect,
);

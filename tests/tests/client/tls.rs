//! TLS (`rediss://`, rustls) on both drivers, against real TLS-enabled servers: a single node
//! and a 3-master cluster whose bus and replication are TLS too, a throwaway CA as custom root,
//! an untrusted CA, and mutual TLS (`tls-auth-clients yes`) with and without a client
//! certificate.
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use botmesh_redis_core::{
    Access, ClientOptions, Error, Executor, Key, Layout, Request, TlsOptions, Value,
};
use botmesh_redis_core::{Limit, Store, StoreOptions};
use botmesh_redis_tests::conformance::{set_get, Client, Runtime};
use botmesh_redis_tests::harness::{
    ClusterOptions, RedisCluster, ServerOptions, SingleNode, TlsFiles,
};
use botmesh_redis_tests::{both_drivers, unique_prefix};
use bytes::Bytes;

/// The CA every TLS server of this file trusts and presents certificates of.
fn files() -> &'static Arc<TlsFiles> {
    static FILES: OnceLock<Arc<TlsFiles>> = OnceLock::new();
    FILES.get_or_init(|| Arc::new(TlsFiles::generate().unwrap()))
}

/// A TLS node that accepts clients with or without a certificate.
fn single() -> &'static SingleNode {
    static NODE: OnceLock<SingleNode> = OnceLock::new();
    NODE.get_or_init(|| SingleNode::start(ServerOptions::new().tls(files().clone(), "optional")))
}

/// A TLS node that requires a client certificate signed by the CA.
fn mutual() -> &'static SingleNode {
    static NODE: OnceLock<SingleNode> = OnceLock::new();
    NODE.get_or_init(|| SingleNode::start(ServerOptions::new().tls(files().clone(), "yes")))
}

/// A 3 x 0 TLS cluster (bus and replication on TLS too).
fn cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        RedisCluster::start(
            ClusterOptions::new()
                .masters(3)
                .replicas_per_master(0)
                .tls(files().clone(), "optional"),
        )
    })
}

fn trust_the_ca() -> TlsOptions {
    TlsOptions::new().root_certificates_pem(files().ca_pem())
}

/// Saves messages in one chat and lists them back through the store.
async fn store_save_and_list<R: Runtime>(client: Client<R>, name: &str) {
    let store = Store::new(
        client,
        StoreOptions::new(unique_prefix(name)).layout(Layout::Cluster),
    )
    .unwrap();
    store.start().await.unwrap();
    for i in 0..20i64 {
        let payload = Bytes::from(format!("message {i}"));
        assert!(store
            .save_message("chat", &format!("m{i:02}"), 1_700_000_000_000 + i, payload)
            .await
            .unwrap());
    }
    let page = store
        .list_messages("chat", .., None, Limit::DEFAULT)
        .await
        .unwrap();
    let ids: Vec<_> = page.items.iter().map(|m| m.id.clone()).collect();
    let want: Vec<_> = (0..20).map(|i| format!("m{i:02}")).collect();
    assert_eq!(ids, want);
    assert_eq!(page.items[7].payload, Bytes::from("message 7"));
}

async fn single_node_over_rediss<R: Runtime>() {
    let url = single().tls_url().unwrap();
    assert!(url.starts_with("rediss://"), "{url}");
    // Only the test CA: the public roots play no part here.
    let options = ClientOptions::url(url).tls(trust_the_ca().only_these_roots());
    let client = Client::<R>::connect(options).await.unwrap();
    set_get(&client, "tls-single").await;
    store_save_and_list(client.clone(), "tls-single-store").await;
    client.close().await;
}

async fn cluster_over_tls<R: Runtime>() {
    let seeds = cluster().tls_seeds();
    assert_eq!(seeds.len(), 3);
    let options = ClientOptions::cluster(seeds).tls(trust_the_ca());
    let client = Client::<R>::connect(options).await.unwrap();
    // Keys on every master: the client follows the TLS ports the nodes announce to it (a
    // plain port would fail the handshake).
    for i in 0..30 {
        set_get(&client, &format!("tls-cluster-{i}")).await;
    }
    store_save_and_list(client.clone(), "tls-cluster-store").await;
    client.close().await;
}

async fn writes_larger_than_the_tls_buffers_keep_their_order<R: Runtime>() {
    let options = ClientOptions::url(single().tls_url().unwrap()).tls(trust_the_ca());
    let client = Client::<R>::connect(options).await.unwrap();
    let prefix = unique_prefix("tls-big");
    let big = "x".repeat(3 << 20);
    let mut calls = Vec::new();
    for i in 0..6 {
        let client = client.clone();
        let key = Key::new(format!("{prefix}:{i}"));
        let value = format!("{i}{big}");
        calls.push(tokio::spawn(async move {
            let set = Request::cmd(Access::Write, "SET")
                .key(&key)
                .arg(value.as_str())
                .build()
                .unwrap();
            client.call(set).await.unwrap();
            let strlen = Request::cmd(Access::Read, "STRLEN")
                .key(&key)
                .build()
                .unwrap();
            client.call(strlen).await.unwrap()
        }));
    }
    for call in calls {
        assert_eq!(call.await.unwrap(), Value::Int((3 << 20) + 1));
    }
    client.close().await;
}

async fn an_untrusted_ca_is_a_connect_error<R: Runtime>() {
    let other = TlsFiles::generate().unwrap();
    let options = ClientOptions::url(single().tls_url().unwrap())
        .tls(TlsOptions::new().root_certificates_pem(other.ca_pem()))
        .connect_timeout(Duration::from_secs(2))
        .request_timeout(Duration::from_secs(3));
    match Client::<R>::connect(options).await {
        Err(Error::Connect { reason, .. }) => {
            assert!(reason.contains("not trusted"), "{reason}");
        }
        other => panic!("expected a connect error, got {other:?}"),
    }
}

async fn the_public_roots_do_not_trust_the_test_ca<R: Runtime>() {
    // `rediss://` alone: webpki-roots, which know nothing of the throwaway CA.
    let options = ClientOptions::url(single().tls_url().unwrap())
        .connect_timeout(Duration::from_secs(2))
        .request_timeout(Duration::from_secs(3));
    match Client::<R>::connect(options).await {
        Err(Error::Connect { reason, .. }) => assert!(reason.contains("not trusted"), "{reason}"),
        other => panic!("expected a connect error, got {other:?}"),
    }
}

async fn mutual_tls_needs_the_client_certificate<R: Runtime>() {
    let url = mutual().tls_url().unwrap();
    let without = ClientOptions::url(url.clone())
        .tls(trust_the_ca())
        .connect_timeout(Duration::from_secs(2))
        .request_timeout(Duration::from_secs(3));
    match Client::<R>::connect(without).await {
        // TLS 1.3 finishes the client's side of the handshake before the server checks the
        // certificate: the server's alert ("client certificate" in the reason) comes when the
        // client reads, unless the server's reset of the socket (it leaves the client's PING
        // unread) arrives first, and then the reason is that reset. Either way it is refused.
        Err(e) => eprintln!("refused without a client certificate: {e}"),
        Ok(_) => panic!("a server requiring client certificates accepted a client without one"),
    }
    let with = ClientOptions::url(url).tls(
        trust_the_ca().client_certificate_pem(files().client_cert_pem(), files().client_key_pem()),
    );
    let client = Client::<R>::connect(with).await.unwrap();
    set_get(&client, "tls-mutual").await;
    client.close().await;
}

/// The CA, the client certificate and its key read from files when the client starts (what a
/// config file's `[tls]` section gives), against a server that requires client certificates;
/// a missing file is a configuration error naming it.
async fn pem_files_are_read_when_the_client_starts<R: Runtime>() {
    let from_files = TlsOptions::new()
        .root_certificates_file(files().path("ca.crt"))
        .only_these_roots()
        .client_certificate_files(files().path("client.crt"), files().path("client.key"));
    let client =
        Client::<R>::connect(ClientOptions::url(mutual().tls_url().unwrap()).tls(from_files))
            .await
            .unwrap();
    set_get(&client, "tls-files").await;
    client.close().await;

    let missing = files().path("no-such-ca.crt");
    let options = ClientOptions::url("rediss://127.0.0.1:1")
        .tls(TlsOptions::new().root_certificates_file(&missing));
    match Client::<R>::start(options) {
        Err(Error::Config(botmesh_redis_core::ConfigError::Tls { reason })) => assert_eq!(
            reason.split(": No such file").next().unwrap(),
            format!(
                "cannot read the root certificate bundle {}",
                missing.display()
            )
        ),
        other => panic!("expected a config error, got {other:?}"),
    }
}

async fn bad_pem_is_a_config_error<R: Runtime>() {
    let bad_root = ClientOptions::url("rediss://127.0.0.1:1")
        .tls(TlsOptions::new().root_certificates_pem(b"not a certificate".to_vec()));
    assert!(matches!(
        Client::<R>::start(bad_root),
        Err(Error::Config(botmesh_redis_core::ConfigError::Tls { .. }))
    ));
    let bad_key = ClientOptions::url("rediss://127.0.0.1:1").tls(
        TlsOptions::new().client_certificate_pem(files().client_cert_pem(), b"no key".to_vec()),
    );
    match Client::<R>::start(bad_key) {
        Err(Error::Config(botmesh_redis_core::ConfigError::Tls { reason })) => {
            assert!(reason.contains("key"), "{reason}")
        }
        other => panic!("expected a config error, got {other:?}"),
    }
    let mixed = ClientOptions::cluster(["rediss://127.0.0.1:1", "redis://127.0.0.1:2"]);
    assert!(matches!(
        Client::<R>::start(mixed),
        Err(Error::Config(
            botmesh_redis_core::ConfigError::MixedTlsSchemes
        ))
    ));
}

both_drivers!(
    single_node_over_rediss,
    cluster_over_tls,
    writes_larger_than_the_tls_buffers_keep_their_order,
    an_untrusted_ca_is_a_connect_error,
    the_public_roots_do_not_trust_the_test_ca,
    mutual_tls_needs_the_client_certificate,
    pem_files_are_read_when_the_client_starts,
    bad_pem_is_a_config_error,
);

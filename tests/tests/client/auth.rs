//! Authentication and unreachable nodes: a password and an ACL user are accepted; a wrong
//! password is `Error::Auth`, a closed port or a node that never answers is `Error::Connect`,
//! each within the connect timeout.

use std::net::TcpListener;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use botmesh_redis_core::{Access, ClientOptions, Error, Executor, Request, Value};
use botmesh_redis_tests::conformance::{set_get, Client, Runtime};
use botmesh_redis_tests::{both_drivers, ServerOptions, SingleNode};

/// URL-special characters on purpose (the harness writes it unquoted into redis.conf, so no
/// spaces).
const PASSWORD: &str = "s3cret:pass@word%";
const USER: &str = "bot";
const USER_PASSWORD: &str = "bot-secret";
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// What "within the connect timeout" means here: the timeout plus generous slack.
const PROMPT: Duration = Duration::from_secs(2);

fn secured() -> &'static SingleNode {
    static NODE: OnceLock<SingleNode> = OnceLock::new();
    NODE.get_or_init(|| {
        SingleNode::start(
            ServerOptions::new()
                .password(PASSWORD)
                .acl_user(USER, USER_PASSWORD),
        )
    })
}

async fn whoami<R: Runtime>(client: &Client<R>) -> Value {
    let request = Request::cmd(Access::Read, "ACL")
        .arg("WHOAMI")
        .build()
        .unwrap();
    client.call(request).await.unwrap()
}

/// Connects and expects an error, within [`PROMPT`].
async fn refused<R: Runtime>(options: ClientOptions) -> Error {
    let started = Instant::now();
    let error = Client::<R>::connect(options.connect_timeout(CONNECT_TIMEOUT))
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(elapsed < PROMPT, "{error:?} took {elapsed:?}");
    assert!(!error.outcome_unknown(), "{error:?}");
    error
}

async fn password_of_the_default_user_is_accepted<R: Runtime>() {
    let node = secured();
    let client = Client::<R>::connect(ClientOptions::url(node.url()).credentials(None, PASSWORD))
        .await
        .unwrap();
    assert_eq!(whoami(&client).await, Value::from("default"));
    set_get(&client, "auth").await;
    client.close().await;

    // The same password in the URL, percent-encoded.
    let url = format!("redis://:{}@{}", "s3cret%3Apass%40word%25", node.addr());
    let client = Client::<R>::connect(ClientOptions::url(url)).await.unwrap();
    assert_eq!(whoami(&client).await, Value::from("default"));
    client.close().await;
}

async fn acl_user_is_accepted<R: Runtime>() {
    let node = secured();
    let client =
        Client::<R>::connect(ClientOptions::url(node.url()).credentials(Some(USER), USER_PASSWORD))
            .await
            .unwrap();
    assert_eq!(whoami(&client).await, Value::from(USER));
    set_get(&client, "auth").await;
    client.close().await;

    let url = format!("redis://{USER}:{USER_PASSWORD}@{}", node.addr());
    let client = Client::<R>::connect(ClientOptions::url(url)).await.unwrap();
    assert_eq!(whoami(&client).await, Value::from(USER));
    client.close().await;
}

async fn wrong_password_is_an_auth_error_within_the_connect_timeout<R: Runtime>() {
    let node = secured();
    for options in [
        ClientOptions::url(node.url()).credentials(None, "wrong"),
        ClientOptions::url(node.url()).credentials(Some(USER), "wrong"),
        ClientOptions::url(node.url()).credentials(Some("nobody"), USER_PASSWORD),
    ] {
        let error = refused::<R>(options).await;
        let Error::Auth { addr, reason } = &error else {
            panic!("not an auth error: {error:?}");
        };
        assert_eq!(addr.to_string(), node.addr().to_string());
        assert!(reason.starts_with("WRONGPASS"), "{reason}");
    }
}

async fn closed_port_is_a_connect_error_within_the_connect_timeout<R: Runtime>() {
    // A port that was free a moment ago: nothing listens on it.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let error = refused::<R>(ClientOptions::url(format!("redis://127.0.0.1:{port}"))).await;
    let Error::Connect { addr, .. } = &error else {
        panic!("not a connect error: {error:?}");
    };
    assert_eq!(addr, &botmesh_redis_core::NodeAddr::new("127.0.0.1", port));
}

async fn silent_node_is_a_connect_error_within_the_connect_timeout<R: Runtime>() {
    // Accepts TCP connections (the kernel completes the handshake) but never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let error =
        refused::<R>(ClientOptions::url(format!("redis://{addr}")).credentials(None, "pw")).await;
    assert!(matches!(error, Error::Connect { .. }), "{error:?}");
    drop(silent);
}

/// Without credentials the handshake is a `PING`, so a node that accepts TCP connections but
/// never answers is a `Connect` error within the connect timeout too, as when `AUTH` is sent.
/// (It used to be noticed only by the response and request timeouts: `Timeout` after 10 s.)
async fn silent_node_without_credentials_is_a_connect_error_within_the_connect_timeout<
    R: Runtime,
>() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let error = refused::<R>(ClientOptions::url(format!("redis://{addr}"))).await;
    assert!(matches!(error, Error::Connect { .. }), "{error:?}");
    drop(silent);
}

both_drivers!(
    password_of_the_default_user_is_accepted,
    acl_user_is_accepted,
    wrong_password_is_an_auth_error_within_the_connect_timeout,
    closed_port_is_a_connect_error_within_the_connect_timeout,
    silent_node_is_a_connect_error_within_the_connect_timeout,
    silent_node_without_credentials_is_a_connect_error_within_the_connect_timeout,
);

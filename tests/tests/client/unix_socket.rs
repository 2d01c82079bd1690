//! A single node over its Unix socket, on both drivers: `unix://` and `redis+unix://` URLs
//! reach it (the connection is a Unix-socket connection, as the server sees it), store
//! operations run on it, the default user's password and an ACL user authenticate in the
//! user-info and in redis-rs's `?user=..&pass=..` form, a wrong password is `Error::Auth`, and
//! a path where no server listens is `Error::Connect` naming the path, within the connect
//! timeout, and TLS over the socket is refused when the client starts.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use botmesh_redis_core::{
    Access, ClientOptions, ConfigError, Error, Executor, Limit, Request, Store, StoreOptions,
    TlsOptions, Value,
};
use botmesh_redis_tests::conformance::{set_get, Client, Runtime};
use botmesh_redis_tests::{both_drivers, unique_prefix, ServerOptions, SingleNode};

const PASSWORD: &str = "sock:pass@word%";
/// `PASSWORD` percent-encoded, for a URL.
const PASSWORD_IN_URL: &str = "sock%3Apass%40word%25";
const USER: &str = "bot";
const USER_PASSWORD: &str = "bot-secret";
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// What "within the connect timeout" means here: the timeout plus generous slack.
const PROMPT: Duration = Duration::from_secs(2);

/// A node that listens on a Unix socket in its temporary directory, with a password for the
/// default user and an ACL user.
fn node() -> &'static SingleNode {
    static NODE: OnceLock<SingleNode> = OnceLock::new();
    NODE.get_or_init(|| {
        SingleNode::start(
            ServerOptions::new()
                .unix_socket()
                .password(PASSWORD)
                .acl_user(USER, USER_PASSWORD),
        )
    })
}

/// The socket's path, as the harness configured it.
fn socket_path() -> String {
    let path = node()
        .server()
        .unix_socket()
        .expect("started with a socket");
    path.display().to_string()
}

/// What the server says about this client's connection: `CLIENT INFO`'s `field=value` pairs.
async fn client_info<R: Runtime>(client: &Client<R>, field: &str) -> String {
    let request = Request::cmd(Access::Read, "CLIENT")
        .arg("INFO")
        .build()
        .unwrap();
    let info = client.call(request).await.unwrap().into_string().unwrap();
    info.split_whitespace()
        .find_map(|pair| pair.strip_prefix(&format!("{field}=")))
        .unwrap_or_else(|| panic!("no {field} in {info}"))
        .to_owned()
}

async fn whoami<R: Runtime>(client: &Client<R>) -> Value {
    let request = Request::cmd(Access::Read, "ACL")
        .arg("WHOAMI")
        .build()
        .unwrap();
    client.call(request).await.unwrap()
}

/// Connects and expects an error, within [`PROMPT`], whose outcome is known (nothing ran).
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

async fn both_url_forms_reach_the_node_over_its_socket<R: Runtime>() {
    let path = socket_path();
    for url in [
        format!("unix://:{PASSWORD_IN_URL}@{path}"),
        format!("redis+unix://:{PASSWORD_IN_URL}@{path}"),
        format!("redis+unix://{path}?db=0&pass={PASSWORD_IN_URL}"),
    ] {
        let client = Client::<R>::connect(ClientOptions::url(url.as_str()))
            .await
            .unwrap();
        // Redis names a Unix-socket peer `path:0` (Valkey 9.1 `[path:0]:0`); a TCP one
        // `127.0.0.1:port`.
        let laddr = client_info(&client, "laddr").await;
        assert!(
            [format!("{path}:0"), format!("[{path}:0]:0")].contains(&laddr),
            "{url}: laddr {laddr}"
        );
        assert_eq!(whoami(&client).await, Value::from("default"), "{url}");
        set_get(&client, "unix-socket").await;
        client.close().await;
    }
}

async fn store_operations_run_over_the_socket<R: Runtime>() {
    let url = format!("unix://{USER}:{USER_PASSWORD}@{}", socket_path());
    let client = Client::<R>::connect(ClientOptions::url(url)).await.unwrap();
    let prefix = unique_prefix("unix-store");
    let store = Store::open(client.clone(), StoreOptions::new(prefix))
        .await
        .unwrap();
    for (i, id) in ["m1", "m2", "m3"].into_iter().enumerate() {
        let payload = format!("payload of {id}");
        assert!(store
            .save_message("chat", id, i as i64, payload.into())
            .await
            .unwrap());
    }
    let page = store
        .list_messages("chat", .., None, Limit::DEFAULT)
        .await
        .unwrap();
    let ids: Vec<&str> = page.items.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["m1", "m2", "m3"]);
    assert_eq!(page.items[1].payload, "payload of m2");
    store.upsert_chat("chat", "record".into()).await.unwrap();
    assert_eq!(store.get_chat("chat").await.unwrap(), Some("record".into()));
    assert_eq!(store.delete_chat("chat").await.unwrap().messages, 3);
    assert_eq!(store.get_chat("chat").await.unwrap(), None);
    store.close().await;
}

async fn an_acl_user_authenticates_in_both_credential_forms<R: Runtime>() {
    let path = socket_path();
    for options in [
        ClientOptions::url(format!("redis+unix://{USER}:{USER_PASSWORD}@{path}")),
        ClientOptions::url(format!(
            "redis+unix://{path}?user={USER}&pass={USER_PASSWORD}"
        )),
        ClientOptions::url(format!("unix://{path}")).credentials(Some(USER), USER_PASSWORD),
    ] {
        let client = Client::<R>::connect(options).await.unwrap();
        assert_eq!(whoami(&client).await, Value::from(USER));
        set_get(&client, "unix-acl").await;
        client.close().await;
    }
}

async fn a_wrong_password_is_an_auth_error_naming_the_socket<R: Runtime>() {
    let path = socket_path();
    for url in [
        format!("unix://:wrong-secret@{path}"),
        format!("unix://{path}?user={USER}&pass=wrong-secret"),
    ] {
        let error = refused::<R>(ClientOptions::url(url.as_str())).await;
        let Error::Auth { addr, reason } = &error else {
            panic!("{url}: not an auth error: {error:?}");
        };
        assert_eq!(addr.to_string(), format!("{path}:0"));
        assert!(reason.starts_with("WRONGPASS"), "{reason}");
        assert!(
            !format!("{error} {error:?}").contains("wrong-secret"),
            "{error:?}"
        );
    }
}

async fn a_path_without_a_server_is_a_connect_error_naming_it<R: Runtime>() {
    // A path in the node's own directory where nothing listens.
    let dir = node().server().dir();
    let missing = dir.join("nobody-listens-here.sock").display().to_string();
    let error = refused::<R>(ClientOptions::url(format!("unix://{missing}"))).await;
    let Error::Connect { addr, reason } = &error else {
        panic!("not a connect error: {error:?}");
    };
    assert_eq!(addr.to_string(), format!("{missing}:0"));
    assert!(reason.contains("No such file or directory"), "{reason}");
    let shown = error.to_string();
    assert!(shown.contains(&missing), "{shown}");
}

async fn tls_over_the_socket_is_refused_when_the_client_starts<R: Runtime>() {
    let path = socket_path();
    let options = ClientOptions::url(format!("unix://{path}")).tls(TlsOptions::new());
    let error = Client::<R>::start(options).unwrap_err();
    assert_eq!(
        error,
        Error::Config(ConfigError::TlsOverUnixSocket { path: path.into() })
    );
}

both_drivers!(
    both_url_forms_reach_the_node_over_its_socket,
    tls_over_the_socket_is_refused_when_the_client_starts,
    store_operations_run_over_the_socket,
    an_acl_user_authenticates_in_both_credential_forms,
    a_wrong_password_is_an_auth_error_naming_the_socket,
    a_path_without_a_server_is_a_connect_error_naming_it,
);

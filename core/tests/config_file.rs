//! Options read from a config file (feature `serde`): `Layout` by name, and the config structs
//! of `options` turned into the real options, in TOML and JSON, with their refusals.
#![cfg(feature = "serde")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use botmesh_redis_core::driver::session::{Auth, Endpoints};
use botmesh_redis_core::{ClientConfig, StoreConfig, TlsOptions, TurnConfig};
use botmesh_redis_core::{ConfigError, Deployment, Error, Layout, NodeAddr};
use serde::Deserialize;

/// How a bot would nest the library's sections in its own config.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct BotConfig {
    redis: ClientConfig,
    store: StoreConfig,
    #[serde(default)]
    turns: TurnConfig,
}

const BOT_TOML: &str = r#"
# The bot's Redis Cluster.
[redis]
nodes = ["redis://10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"]
username = "bot"
password = "s3cret"
connect_timeout_ms = 1500
request_timeout_ms = 8000
retry_attempts = 5

[store]
prefix = "mybot"
layout = "cluster:v1"

[turns]
ttl_ms = 20000
wait_timeout_ms = 30000
"#;

#[test]
fn a_realistic_toml_file() {
    let bot: BotConfig = toml::from_str(BOT_TOML).unwrap();

    let config = bot.redis.into_options().unwrap().to_config(7).unwrap();
    match &config.endpoints {
        Endpoints::Cluster(roots) => assert_eq!(roots.len(), 3),
        other => panic!("not a cluster: {other:?}"),
    }
    assert_eq!(
        config.auth,
        Some(Auth {
            username: Some("bot".into()),
            password: "s3cret".into()
        })
    );
    assert_eq!(config.connect_timeout, Duration::from_millis(1500));
    assert_eq!(config.request_timeout, Duration::from_secs(8));
    assert_eq!(config.retry.attempts, 5);
    // Left out: the defaults.
    let defaults = botmesh_redis_core::ClientOptions::cluster(["h:1"])
        .to_config(7)
        .unwrap();
    assert_eq!(config.retry.base, defaults.retry.base);
    assert_eq!(config.response_timeout, defaults.response_timeout);
    assert_eq!(config.refresh_interval, defaults.refresh_interval);

    let store = bot.store.into_options();
    assert_eq!(store.resolved_layout(Deployment::Cluster), Layout::Cluster);

    let turns = bot.turns.into_options().unwrap();
    assert_eq!(turns.ttl, Duration::from_secs(20));
    assert_eq!(turns.wait_timeout, Duration::from_secs(30));
    assert_eq!(turns.poll_interval, Duration::from_millis(50));
}

#[test]
fn a_json_file_for_one_node() {
    let json = r#"{
        "redis": { "url": "redis://:pw@127.0.0.1:6379", "response_timeout_ms": 2500 },
        "store": { "prefix": "bot", "allow_legacy_data": true }
    }"#;
    let bot: BotConfig = serde_json::from_str(json).unwrap();
    assert_eq!(bot.turns, TurnConfig::default());
    let config = bot.redis.into_options().unwrap().to_config(1).unwrap();
    assert_eq!(
        config.endpoints,
        Endpoints::Single(NodeAddr::new("127.0.0.1", 6379))
    );
    assert_eq!(config.auth.unwrap().password, "pw");
    assert_eq!(config.response_timeout, Duration::from_millis(2500));
    let store = bot.store.into_options();
    assert_eq!(store.resolved_layout(Deployment::Single), Layout::Legacy);
}

#[test]
fn idle_probes_are_set_or_turned_off() {
    let probe = |json: &str| {
        let config: ClientConfig = serde_json::from_str(json).unwrap();
        config
            .into_options()
            .unwrap()
            .to_config(1)
            .unwrap()
            .idle_probe
    };
    assert_eq!(
        probe(r#"{ "url": "redis://h:1" }"#),
        Some(Duration::from_secs(30))
    );
    assert_eq!(
        probe(r#"{ "url": "redis://h:1", "idle_probe_ms": 1500 }"#),
        Some(Duration::from_millis(1500))
    );
    assert_eq!(
        probe(r#"{ "url": "redis://h:1", "idle_probe_ms": 0 }"#),
        None
    );
}

#[test]
fn layouts_read_by_name() {
    for (text, layout) in [
        ("\"legacy\"", Layout::Legacy),
        ("\"cluster\"", Layout::Cluster),
        ("\"cluster:v1\"", Layout::Cluster),
    ] {
        assert_eq!(serde_json::from_str::<Layout>(text).unwrap(), layout);
    }
    for layout in [Layout::Legacy, Layout::Cluster] {
        let written = serde_json::to_string(&layout).unwrap();
        assert_eq!(written, format!("\"{}\"", layout.name()));
        assert_eq!(serde_json::from_str::<Layout>(&written).unwrap(), layout);
    }
    let err = serde_json::from_str::<Layout>("\"Cluster\"").unwrap_err();
    let message = err.to_string();
    assert!(message.contains("\"Cluster\""), "{message}");
    assert!(message.contains("\"legacy\""), "{message}");
    assert!(serde_json::from_str::<Layout>("1").is_err());
}

#[test]
fn store_config_writes_back() {
    let config: StoreConfig = toml::from_str("prefix = \"bot\"\nlayout = \"cluster\"\n").unwrap();
    let written = toml::to_string(&config).unwrap();
    assert_eq!(toml::from_str::<StoreConfig>(&written).unwrap(), config);
    // Without a layout, none is written, so the default still follows the client.
    let written = toml::to_string(&StoreConfig::new("bot")).unwrap();
    assert!(!written.contains("layout"), "{written}");
}

#[test]
fn unknown_fields_are_refused() {
    let err = toml::from_str::<ClientConfig>("url = \"h:1\"\nconect_timeout_ms = 10\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("conect_timeout_ms"), "{err}");
    assert!(toml::from_str::<StoreConfig>("prefix = \"p\"\nlayuot = \"legacy\"\n").is_err());
    assert!(toml::from_str::<TurnConfig>("ttl = 5\n").is_err());
    // The prefix has no default.
    assert!(toml::from_str::<StoreConfig>("layout = \"legacy\"\n").is_err());
    // A bad layout names the accepted ones.
    let err = toml::from_str::<StoreConfig>("prefix = \"p\"\nlayout = \"cluster-v1\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"cluster:v1\""), "{err}");
}

fn refused(toml_text: &str) -> String {
    let config: ClientConfig = toml::from_str(toml_text).unwrap();
    match config.into_options() {
        Err(Error::Config(error)) => error.to_string(),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn client_configs_that_are_refused() {
    assert!(refused("url = \"h:1\"\nnodes = [\"h:2\"]\n").contains("not both"));
    assert!(refused("").contains("neither"));
    assert!(refused("nodes = []\n").contains("neither"));
    assert!(refused("url = \"h:1\"\nusername = \"u\"\n").contains("without `password`"));
    assert!(refused("url = \"h:1\"\nconnect_timeout_ms = 0\n").contains("connect_timeout_ms"));
    assert!(refused("url = \"h:1\"\nretry_base_ms = 0\n").contains("retry_base_ms"));
    assert!(refused("nodes = [\"h:1\", \"http://h:2\"]\n").contains("unsupported scheme"));
    assert!(refused("url = \"redis://h:1/3\"\n").contains("database 0"));
    assert!(refused("url = \"h:1\"\n[tls]\nonly_these_roots = true\n")
        .contains("only_these_roots needs ca_file"));
    assert!(refused("url = \"h:1\"\n[tls]\ncert_file = \"c.crt\"\n")
        .contains("cert_file and key_file go together"));
}

#[test]
fn a_tls_section_turns_tls_on_with_its_files() {
    let plain: ClientConfig = toml::from_str("url = \"redis://h:1\"\n").unwrap();
    assert_eq!(plain.into_options().unwrap().tls_settings().unwrap(), None);
    let empty: ClientConfig = toml::from_str("url = \"redis://h:1\"\n[tls]\n").unwrap();
    assert_eq!(
        empty.into_options().unwrap().tls_settings().unwrap(),
        Some(TlsOptions::new())
    );
    let full: ClientConfig = toml::from_str(
        "nodes = [\"h:1\"]\n[tls]\nca_file = \"/ca.crt\"\nonly_these_roots = true\n\
         cert_file = \"/c.crt\"\nkey_file = \"/c.key\"\nserver_name = \"redis.internal\"\n",
    )
    .unwrap();
    assert_eq!(
        full.into_options().unwrap().tls_settings().unwrap(),
        Some(
            TlsOptions::new()
                .root_certificates_file("/ca.crt")
                .only_these_roots()
                .client_certificate_files("/c.crt", "/c.key")
                .server_name("redis.internal")
        )
    );
    assert!(toml::from_str::<ClientConfig>("url = \"h:1\"\n[tls]\nca = \"x\"\n").is_err());
}

#[test]
fn turn_configs_that_are_refused() {
    let short: TurnConfig = toml::from_str("idle_lifetime_ms = 1000\n").unwrap();
    assert!(matches!(short.into_options(), Err(Error::Config(_))));
    let zero: TurnConfig = toml::from_str("poll_interval_ms = 0\n").unwrap();
    match zero.into_options() {
        Err(Error::Config(ConfigError::ZeroDuration { field })) => {
            assert_eq!(field, "poll_interval_ms")
        }
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn debug_hides_the_password() {
    let config: ClientConfig =
        toml::from_str("url = \"redis://u:hunter2@h:1\"\npassword = \"hunter2\"\n").unwrap();
    let shown = format!("{config:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
}

#[test]
fn a_sentinel_section_names_a_sentinel_deployment() {
    let toml = r#"
password = "data"
refresh_interval_ms = 1000

[sentinel]
sentinels = ["10.0.0.1:26379", "10.0.0.2"]
master_name = "bots"
username = "watcher"
password = "watch"
"#;
    let config: ClientConfig = toml::from_str(toml).unwrap();
    let options = config.into_options().unwrap();
    assert_eq!(options.deployment(), Deployment::Single);
    let config = options.to_config(1).unwrap();
    let Endpoints::Sentinel(s) = &config.endpoints else {
        panic!("not a sentinel deployment: {:?}", config.endpoints);
    };
    assert_eq!(
        s.sentinels,
        [
            NodeAddr::new("10.0.0.1", 26379),
            NodeAddr::new("10.0.0.2", 26379)
        ]
    );
    assert_eq!(s.master_name, "bots");
    assert_eq!(
        s.auth,
        Some(Auth {
            username: Some("watcher".into()),
            password: "watch".into()
        })
    );
    assert_eq!(config.auth.unwrap().password, "data");
    assert_eq!(config.refresh_interval, Duration::from_secs(1));

    let refused = |json: &str| {
        serde_json::from_str::<ClientConfig>(json)
            .unwrap()
            .into_options()
            .unwrap_err()
    };
    assert_eq!(
        refused(
            r#"{ "url": "redis://h:1", "sentinel": { "sentinels": ["s:1"], "master_name": "m" } }"#
        ),
        Error::Config(ConfigError::BothEndpoints)
    );
    assert_eq!(
        refused(
            r#"{ "nodes": ["h:1"], "sentinel": { "sentinels": ["s:1"], "master_name": "m" } }"#
        ),
        Error::Config(ConfigError::BothEndpoints)
    );
    assert_eq!(
        refused(r#"{ "sentinel": { "sentinels": ["s:1"], "master_name": "m", "username": "u" } }"#),
        Error::Config(ConfigError::UsernameWithoutPassword)
    );
    assert!(matches!(
        refused(r#"{ "sentinel": { "sentinels": [], "master_name": "m" } }"#),
        Error::Config(ConfigError::BadSentinel { .. })
    ));
    // The passwords stay out of Debug.
    let config: ClientConfig = toml::from_str(toml).unwrap();
    let debug = format!("{config:?}");
    assert!(
        !debug.contains("watch\"") && !debug.contains("\"data\""),
        "{debug}"
    );
}

#[test]
fn the_reply_element_bound_is_set_by_name_and_zero_is_refused() {
    let config: ClientConfig = serde_json::from_str(
        r#"{ "url": "redis://127.0.0.1:6379", "max_reply_elements": 100000 }"#,
    )
    .unwrap();
    let session = config.into_options().unwrap().to_config(7).unwrap();
    assert_eq!(session.max_reply_elements, 100_000);
    let default: ClientConfig = serde_json::from_str(r#"{ "url": "127.0.0.1:6379" }"#).unwrap();
    assert_eq!(
        default
            .into_options()
            .unwrap()
            .to_config(7)
            .unwrap()
            .max_reply_elements,
        botmesh_redis_core::DEFAULT_MAX_REPLY_ELEMENTS
    );
    let zero: ClientConfig =
        serde_json::from_str(r#"{ "url": "127.0.0.1:6379", "max_reply_elements": 0 }"#).unwrap();
    assert_eq!(
        zero.into_options().unwrap_err(),
        Error::Config(ConfigError::ZeroReplyElements { default: 4 << 20 })
    );
}

#[test]
fn lanes_default_by_deployment_are_set_by_name_and_bounded() {
    let lanes = |json: &str| {
        serde_json::from_str::<ClientConfig>(json)
            .unwrap()
            .into_options()
            // 5 stands for the driver's count for one node (`Runtime::one_node_lanes`).
            .map(|options| options.lane_count(5))
    };
    assert_eq!(lanes(r#"{ "url": "redis://127.0.0.1:6379" }"#), Ok(5));
    assert_eq!(lanes(r#"{ "url": "unix:///run/redis.sock" }"#), Ok(5));
    assert_eq!(
        lanes(r#"{ "sentinel": { "sentinels": ["10.0.0.1"], "master_name": "bots" } }"#),
        Ok(5)
    );
    assert_eq!(lanes(r#"{ "nodes": ["10.0.0.1:7000"] }"#), Ok(1));
    assert_eq!(
        lanes(r#"{ "nodes": ["10.0.0.1:7000"], "lanes": 3 }"#),
        Ok(3)
    );
    assert_eq!(lanes(r#"{ "url": "127.0.0.1:6379", "lanes": 1 }"#), Ok(1));
    for given in [0, botmesh_redis_core::MAX_LANES + 1] {
        let json = format!(r#"{{ "url": "127.0.0.1:6379", "lanes": {given} }}"#);
        assert_eq!(
            lanes(&json),
            Err(Error::Config(ConfigError::LaneCount { given, max: 64 })),
            "{json}"
        );
    }
}

#[test]
fn a_unix_socket_in_a_file_with_its_password_hidden() {
    let config: ClientConfig =
        toml::from_str("url = \"redis+unix:///run/redis.sock?user=bot&pass=hunter2\"\n").unwrap();
    let shown = format!("{config:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("/run/redis.sock"), "{shown}");
    let options = config.into_options().unwrap();
    assert!(!format!("{options:?}").contains("hunter2"));
    let config = options.to_config(1).unwrap();
    assert_eq!(
        config.endpoints,
        Endpoints::UnixSocket("/run/redis.sock".into())
    );
    assert_eq!(
        config.auth,
        Some(Auth {
            username: Some("bot".into()),
            password: "hunter2".into()
        })
    );
}

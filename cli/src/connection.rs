//! The connection flags every subcommand shares, and the target side's credentials.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use botmesh_redis_tokio::driver::options::{parse_sentinel_url, parse_url};
use botmesh_redis_tokio::driver::session::Auth;
use botmesh_redis_tokio::{ClientOptions, NodeAddr, TlsOptions};
use clap::Args;

/// Where to connect and how: one node (`--url`) or a cluster (`--cluster`), credentials, the
/// address map and timeouts.
#[derive(Args, Clone, Debug, Default)]
pub(crate) struct Connection {
    /// One node: redis://USER:PASSWORD@HOST:PORT, where only the host is required (credentials
    /// are percent-decoded); a Unix socket, unix:///PATH (also redis+unix://, with credentials
    /// as USER:PASSWORD@ before the path or ?user=USER&pass=PASSWORD); or the master of a Redis
    /// Sentinel deployment: redis+sentinel://USER:PASSWORD@HOST:PORT,HOST:PORT/MASTER_NAME (the
    /// credentials are the data nodes'; the sentinels' are --sentinel-password).
    #[arg(long, value_name = "URL", conflicts_with = "cluster")]
    pub(crate) url: Option<String>,

    /// A Redis Cluster, discovered from this root node (HOST:PORT or a redis:// URL);
    /// repeat for more root nodes.
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) cluster: Vec<String>,

    /// The ACL user name (needs --password).
    #[arg(long, value_name = "USER", requires = "password")]
    pub(crate) user: Option<String>,

    /// The password (AUTH); overrides credentials in the URL.
    #[arg(
        long,
        value_name = "PASSWORD",
        env = "BOTMESH_REDIS_PASSWORD",
        hide_env_values = true
    )]
    pub(crate) password: Option<String>,

    /// The sentinels' password, when --url is a redis+sentinel:// URL and the sentinels have
    /// one (often not the data nodes').
    #[arg(
        long,
        value_name = "PASSWORD",
        env = "BOTMESH_REDIS_SENTINEL_PASSWORD",
        hide_env_values = true
    )]
    pub(crate) sentinel_password: Option<String>,

    /// The sentinels' ACL user name (needs --sentinel-password).
    #[arg(long, value_name = "USER", requires = "sentinel_password")]
    pub(crate) sentinel_user: Option<String>,

    /// Dial an announced node address at another address (NAT, Docker), for example
    /// --map 10.0.0.5:7000=127.0.0.1:7000; repeatable.
    #[arg(long = "map", value_name = "ANNOUNCED=DIAL", value_parser = parse_mapping)]
    pub(crate) map: Vec<(NodeAddr, NodeAddr)>,

    /// TCP connect plus AUTH deadline, for example 2s or 500ms (default 2s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) connect_timeout: Option<Duration>,

    /// Deadline of one batch of requests, for example 10s (default 10s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) request_timeout: Option<Duration>,

    #[command(flatten)]
    pub(crate) tls: TlsFlags,
}

/// TLS, with the flags redis-cli names the same way. Without any, TLS follows the URLs'
/// scheme (`rediss://`), trusting the public roots.
#[derive(Args, Clone, Debug, Default)]
pub(crate) struct TlsFlags {
    /// TLS to every node, trusting the public (Mozilla) roots, whatever the URLs' scheme; a
    /// rediss:// URL and each flag below turn it on too.
    #[arg(long)]
    pub(crate) tls: bool,

    /// Also trust the CA certificates of this PEM file: a private CA.
    #[arg(long, value_name = "FILE")]
    pub(crate) cacert: Option<PathBuf>,

    /// Trust only --cacert, not the public roots.
    #[arg(long, requires = "cacert")]
    pub(crate) cacert_only: bool,

    /// The client certificate chain (PEM) for servers that require one (mutual TLS, Redis's
    /// tls-auth-clients); needs --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub(crate) cert: Option<PathBuf>,

    /// The client certificate's private key (PEM); needs --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub(crate) key: Option<PathBuf>,

    /// The name the servers' certificates must carry, when it is not the host dialled (an IP
    /// address, a --map entry).
    #[arg(long, value_name = "NAME")]
    pub(crate) sni: Option<String>,
}

impl TlsFlags {
    /// The TLS settings the flags ask for, or `None` when none was given.
    fn options(&self) -> Option<TlsOptions> {
        let given = self.tls
            || self.cacert.is_some()
            || self.cert.is_some()
            || self.key.is_some()
            || self.sni.is_some();
        if !given {
            return None;
        }
        let mut tls = TlsOptions::new();
        if let Some(path) = &self.cacert {
            tls = tls.root_certificates_file(path);
        }
        if self.cacert_only {
            tls = tls.only_these_roots();
        }
        // clap makes --cert and --key come together.
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            tls = tls.client_certificate_files(cert, key);
        }
        if let Some(name) = &self.sni {
            tls = tls.server_name(name.clone());
        }
        Some(tls)
    }

    /// What a target without TLS flags of its own takes over: what to trust and the client
    /// certificate, not the server name (the source's host).
    fn for_another_server(&self) -> TlsFlags {
        TlsFlags {
            sni: None,
            ..self.clone()
        }
    }
}

/// The target side's credentials and address map; each defaults to the source's. The commands
/// that flatten it name their target flags in an `ArgGroup` called `target_server`.
#[derive(Args, Clone, Debug, Default)]
pub(crate) struct TargetCredentials {
    /// The target's ACL user name (default: --user).
    #[arg(long, value_name = "USER", requires = "target_server")]
    pub(crate) target_user: Option<String>,

    /// The target's password (default: --password); used only with a target server.
    #[arg(
        long,
        value_name = "PASSWORD",
        env = "BOTMESH_REDIS_TARGET_PASSWORD",
        hide_env_values = true
    )]
    pub(crate) target_password: Option<String>,

    /// The target's address map (default: the --map entries); repeatable.
    #[arg(
        long = "target-map",
        value_name = "ANNOUNCED=DIAL",
        value_parser = parse_mapping,
        requires = "target_server"
    )]
    pub(crate) target_map: Vec<(NodeAddr, NodeAddr)>,

    /// TLS to the target with the public roots (default: the target URL's scheme; a
    /// rediss:// target takes the source's --cacert, --cacert-only, --cert and --key unless
    /// a --target-* TLS flag is given).
    #[arg(long, requires = "target_server")]
    pub(crate) target_tls: bool,

    /// The target's private CA (PEM), instead of --cacert.
    #[arg(long, value_name = "FILE", requires = "target_server")]
    pub(crate) target_cacert: Option<PathBuf>,

    /// Trust only --target-cacert on the target.
    #[arg(long, requires = "target_cacert")]
    pub(crate) target_cacert_only: bool,

    /// The client certificate (PEM) the target requires, instead of --cert; needs
    /// --target-key.
    #[arg(
        long,
        value_name = "FILE",
        requires = "target_key",
        requires = "target_server"
    )]
    pub(crate) target_cert: Option<PathBuf>,

    /// Its private key (PEM); needs --target-cert.
    #[arg(long, value_name = "FILE", requires = "target_cert")]
    pub(crate) target_key: Option<PathBuf>,

    /// The name the target's certificates must carry, when it is not the host dialled.
    #[arg(long, value_name = "NAME", requires = "target_server")]
    pub(crate) target_sni: Option<String>,
}

impl TargetCredentials {
    /// The target's own TLS flags.
    fn tls(&self) -> TlsFlags {
        TlsFlags {
            tls: self.target_tls,
            cacert: self.target_cacert.clone(),
            cacert_only: self.target_cacert_only,
            cert: self.target_cert.clone(),
            key: self.target_key.clone(),
            sni: self.target_sni.clone(),
        }
    }
}

impl Connection {
    /// The client options, or `None` when neither `--url` nor `--cluster` was given.
    pub(crate) fn options(&self) -> Option<ClientOptions> {
        let base = match (&self.url, self.cluster.is_empty()) {
            (Some(url), _) => ClientOptions::url(url.clone()),
            (None, false) => ClientOptions::cluster(self.cluster.clone()),
            (None, true) => return None,
        };
        let options = self.tune(
            base,
            self.user.as_deref(),
            self.password.as_deref(),
            &self.map,
        );
        Some(match self.tls.options() {
            Some(tls) => options.tls(tls),
            None => options,
        })
    }

    /// The options of another server, with the target's credentials and map where given and
    /// the source's otherwise, and the source's timeouts.
    pub(crate) fn target_options(
        &self,
        base: ClientOptions,
        target: &TargetCredentials,
    ) -> ClientOptions {
        let url_auth = url_credentials(&base);
        let url_user = url_auth.as_ref().and_then(|auth| auth.username.clone());
        let (user, password) = match &target.target_password {
            // The user: --target-user, else the target URL's, else --user (as the help says).
            Some(password) => (
                target
                    .target_user
                    .as_deref()
                    .or(url_user.as_deref())
                    .or(self.user.as_deref()),
                Some(password.as_str()),
            ),
            // Credentials written in the target's own URL win over the source's.
            None if url_auth.is_some() => (None, None),
            None => (
                target.target_user.as_deref().or(self.user.as_deref()),
                self.password.as_deref(),
            ),
        };
        let map = if target.target_map.is_empty() {
            &self.map
        } else {
            &target.target_map
        };
        let options = self.tune(base, user, password, map);
        // A target of its own TLS flags takes them; a rediss:// target the source's trust, so
        // that a move between two servers of one private CA needs --cacert once.
        let tls = match target.tls().options() {
            Some(own) => Some(own),
            None if matches!(options.tls_settings(), Ok(Some(_))) => {
                self.tls.for_another_server().options()
            }
            None => None,
        };
        match tls {
            Some(tls) => options.tls(tls),
            None => options,
        }
    }

    fn tune(
        &self,
        mut options: ClientOptions,
        user: Option<&str>,
        password: Option<&str>,
        map: &[(NodeAddr, NodeAddr)],
    ) -> ClientOptions {
        if let Some(password) = password {
            // A password alone (--password, its environment variable) keeps the user the URL
            // names: `redis://bot@host` with the password from the environment is user `bot`.
            let url_user = match user {
                Some(_) => None,
                None => url_credentials(&options).and_then(|auth| auth.username),
            };
            options = options.credentials(user.or(url_user.as_deref()), password);
        }
        if !map.is_empty() {
            let map: BTreeMap<NodeAddr, NodeAddr> = map.iter().cloned().collect();
            options = options.node_address_map(move |announced| {
                map.get(announced)
                    .cloned()
                    .unwrap_or_else(|| announced.clone())
            });
        }
        if let Some(password) = &self.sentinel_password {
            options = options.sentinel_credentials(self.sentinel_user.as_deref(), password);
        }
        if let Some(d) = self.connect_timeout {
            options = options.connect_timeout(d);
        }
        if let Some(d) = self.request_timeout {
            options = options.request_timeout(d);
        }
        options
    }

    /// Where this connects, for the report's first line: addresses only, never credentials.
    pub(crate) fn describe(&self) -> String {
        match &self.url {
            Some(url) => describe_url(url),
            None => describe_cluster(&self.cluster),
        }
    }
}

/// The credentials the options' URL (or first seed) carries.
fn url_credentials(options: &ClientOptions) -> Option<Auth> {
    options.to_config(0).ok().and_then(|config| config.auth)
}

/// `cluster` and the seeds' addresses, never their credentials.
pub(crate) fn describe_cluster(seeds: &[String]) -> String {
    let seeds: Vec<String> = seeds.iter().map(|seed| describe_url(seed)).collect();
    format!("cluster {}", seeds.join(" "))
}

/// The `host:port` of a URL (a Unix socket's path); a URL that does not parse is shown as `<bad url>`, since it may
/// still hold a password (the connection reports the parse error itself).
pub(crate) fn describe_url(url: &str) -> String {
    if let Some(parsed) = parse_sentinel_url(url) {
        return parsed.map_or_else(
            |_| "<bad url>".to_owned(),
            |p| {
                let sentinels: Vec<String> = p.sentinels.iter().map(|s| s.to_string()).collect();
                format!(
                    "master {:?} of sentinels {}",
                    p.master_name,
                    sentinels.join(",")
                )
            },
        );
    }
    parse_url(url).map_or_else(|_| "<bad url>".to_owned(), |p| p.target.to_string())
}

/// Parses `ANNOUNCED=DIAL`, each side `host:port`.
pub(crate) fn parse_mapping(text: &str) -> Result<(NodeAddr, NodeAddr), String> {
    let (from, to) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not ANNOUNCED=DIAL (host:port=host:port)"))?;
    let addr = |side: &str| {
        NodeAddr::parse(side, "").ok_or_else(|| format!("{side:?} is not a host:port address"))
    };
    Ok((addr(from)?, addr(to)?))
}

/// Parses a duration such as `5s`, `500ms`, `2m`, `1h` or `1m30s`: whole numbers, each with a
/// unit (`ms`, `s`, `m`, `h`). A bare number is refused, since its unit would be a guess.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration such as 5s, 500ms, 2m or 1m30s");
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
        let n: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            _ => return Err(bad()),
        };
        total = total.saturating_add(part);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        for bad in ["", "5", "s", "5x", "1.5s", "-1s", "5 s", "ms5"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn mappings() {
        assert_eq!(
            parse_mapping("10.0.0.5:7000=127.0.0.1:17000"),
            Ok((
                NodeAddr::new("10.0.0.5", 7000),
                NodeAddr::new("127.0.0.1", 17000)
            ))
        );
        assert_eq!(
            parse_mapping("[::1]:7000=h:1"),
            Ok((NodeAddr::new("::1", 7000), NodeAddr::new("h", 1)))
        );
        for bad in ["a:1", "a:1=", "=a:1", "a=b", ":1=a:1", "a:0=a:1"] {
            assert!(parse_mapping(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn descriptions_hide_credentials() {
        let c = Connection {
            url: Some("redis://bot:secret@10.0.0.1:7000".into()),
            ..Connection::default()
        };
        assert_eq!(c.describe(), "10.0.0.1:7000");
        let c = Connection {
            cluster: vec!["redis://:pw@h:1".into(), "h:2".into()],
            ..Connection::default()
        };
        assert_eq!(c.describe(), "cluster h:1 h:2");
        assert_eq!(describe_url("redis://u:p@h:1/5"), "<bad url>");
        // The other side of a cleanup, named by seeds with credentials, was printed as given.
        let seeds = [
            "redis://:s3cret@10.0.0.5:7000".to_owned(),
            "h:7001".to_owned(),
        ];
        assert_eq!(describe_cluster(&seeds), "cluster 10.0.0.5:7000 h:7001");
    }

    #[test]
    fn the_target_reuses_the_source_credentials_unless_given() {
        let source = Connection {
            user: Some("u".into()),
            password: Some("p".into()),
            ..Connection::default()
        };
        let auth = |o: ClientOptions| o.to_config(1).ok().and_then(|c| c.auth);
        let expected = |user: &str, password: &str| Auth {
            username: Some(user.into()),
            password: password.into(),
        };
        let reused =
            source.target_options(ClientOptions::url("h:1"), &TargetCredentials::default());
        assert_eq!(auth(reused), Some(expected("u", "p")));
        let own = source.target_options(
            ClientOptions::url("h:1"),
            &TargetCredentials {
                target_user: Some("t".into()),
                target_password: Some("q".into()),
                ..TargetCredentials::default()
            },
        );
        assert_eq!(auth(own), Some(expected("t", "q")));
        // A target password alone takes --user; a target URL's own credentials win over the
        // source's password.
        let password_only = TargetCredentials {
            target_password: Some("q".into()),
            ..TargetCredentials::default()
        };
        let with_user = source.target_options(ClientOptions::url("h:1"), &password_only);
        assert_eq!(auth(with_user), Some(expected("u", "q")));
        let url_user =
            source.target_options(ClientOptions::url("redis://admin:old@h:1"), &password_only);
        assert_eq!(auth(url_user), Some(expected("admin", "q")));
        let in_url = source.target_options(
            ClientOptions::url("redis://admin:newpw@h:1"),
            &TargetCredentials::default(),
        );
        assert_eq!(auth(in_url), Some(expected("admin", "newpw")));
    }

    /// A password alone (the flag or its environment variable) keeps the URL's user.
    #[test]
    fn a_password_alone_keeps_the_user_the_url_names() {
        let auth = |o: ClientOptions| o.to_config(1).ok().and_then(|c| c.auth);
        let connection = Connection {
            url: Some("redis://bot:old@h:1".into()),
            password: Some("p".into()),
            ..Connection::default()
        };
        assert_eq!(
            connection.options().and_then(auth),
            Some(Auth {
                username: Some("bot".into()),
                password: "p".into()
            })
        );
    }

    /// The TLS flags of each side, and what a target without its own takes from the source.
    #[test]
    fn tls_follows_the_flags_and_a_tls_target_takes_the_source_trust() {
        let tls = |o: &ClientOptions| o.tls_settings().map_err(|e| e.to_string());
        let ca = TlsOptions::new().root_certificates_file("ca.pem");
        let source = Connection {
            url: Some("redis://h:1".into()),
            tls: TlsFlags {
                cacert: Some("ca.pem".into()),
                sni: Some("db.internal".into()),
                ..TlsFlags::default()
            },
            ..Connection::default()
        };
        // A flag turns TLS on whatever the scheme.
        assert_eq!(
            source.options().as_ref().map(tls),
            Some(Ok(Some(ca.clone().server_name("db.internal"))))
        );
        let plain = Connection {
            url: Some("redis://h:1".into()),
            ..Connection::default()
        };
        assert_eq!(plain.options().as_ref().map(tls), Some(Ok(None)));
        let defaults = TargetCredentials::default();
        // A plain target stays plain; a rediss:// one trusts the source's CA, without its
        // server name.
        let target = source.target_options(ClientOptions::url("redis://t:1"), &defaults);
        assert_eq!(tls(&target), Ok(None));
        let target = source.target_options(ClientOptions::url("rediss://t:1"), &defaults);
        assert_eq!(tls(&target), Ok(Some(ca)));
        // The target's own flags replace the source's, and turn TLS on.
        let own = TargetCredentials {
            target_cacert: Some("other.pem".into()),
            target_cacert_only: true,
            target_cert: Some("c.pem".into()),
            target_key: Some("k.pem".into()),
            ..TargetCredentials::default()
        };
        let target = source.target_options(ClientOptions::url("redis://t:1"), &own);
        assert_eq!(
            tls(&target),
            Ok(Some(
                TlsOptions::new()
                    .root_certificates_file("other.pem")
                    .only_these_roots()
                    .client_certificate_files("c.pem", "k.pem")
            ))
        );
        let public = TargetCredentials {
            target_tls: true,
            ..TargetCredentials::default()
        };
        let target = source.target_options(ClientOptions::url("rediss://t:1"), &public);
        assert_eq!(tls(&target), Ok(Some(TlsOptions::new())));
        // A plain source's target follows its own URL.
        let target = plain.target_options(ClientOptions::url("rediss://t:1"), &defaults);
        assert_eq!(tls(&target), Ok(Some(TlsOptions::new())));
    }
}

//! Redis Sentinel options: [`ClientOptions::sentinel`], the sentinels' own credentials, and the
//! URL form `redis+sentinel://[user:password@]host:port[,host:port...]/<master name>`
//! (`rediss+sentinel://` for TLS), which [`ClientOptions::url`] accepts.

use percent_encoding::percent_decode_str;

use super::url::{parse_url_with_port, redact_url, ParsedUrl};
use super::ClientOptions;
use crate::addr::{DialTarget, NodeAddr};
use crate::error::{ConfigError, Error};
use crate::session::{Auth, Config, Endpoints};

/// The port sentinels listen on when an address names none.
pub const SENTINEL_PORT: u16 = 26379;

/// A parsed `redis+sentinel://` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedSentinelUrl {
    /// The sentinels (default port 26379).
    pub sentinels: Vec<NodeAddr>,
    /// The name the sentinels monitor the master under.
    pub master_name: String,
    /// Credentials from the user-info part: the data nodes' (the sentinels' are
    /// [`ClientOptions::sentinel_credentials`]).
    pub auth: Option<Auth>,
    /// Whether the scheme was `rediss+sentinel` (TLS to every node and sentinel).
    pub tls: bool,
}

/// Parses `redis+sentinel://[user[:password]@]host[:port][,host[:port]...]/<master name>`
/// (`rediss+sentinel://` for TLS); `None` when `url` has another scheme.
pub fn parse_sentinel_url(url: &str) -> Option<Result<ParsedSentinelUrl, Error>> {
    let (tls, rest) = match url.split_once("://")? {
        ("redis+sentinel", rest) => (false, rest),
        ("rediss+sentinel", rest) => (true, rest),
        _ => return None,
    };
    let bad = |why: &str| {
        Error::Config(ConfigError::BadUrl {
            url: redact_url(url),
            reason: why.to_owned(),
        })
    };
    let parse = || {
        let (authority, name) = rest
            .split_once('/')
            .ok_or_else(|| bad("no master name: add /<master name> after the sentinels"))?;
        if name.contains(['?', '#']) {
            return Err(bad(
                "a query or fragment after the master name (percent-encode a `?` or `#` of the name)",
            ));
        }
        let master_name = percent_decode_str(name)
            .decode_utf8()
            .map_err(|_| bad("the master name is not UTF-8"))?
            .into_owned();
        if master_name.is_empty() || master_name.contains('/') {
            return Err(bad(
                "no master name: add /<master name> after the sentinels",
            ));
        }
        // The credentials are parsed as a one-node URL's are, with the first sentinel.
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let mut auth = None;
        let mut sentinels = Vec::new();
        for (i, host) in hosts.split(',').enumerate() {
            let one = match (i, userinfo) {
                (0, Some(u)) => format!("redis://{u}@{host}"),
                _ => format!("redis://{host}"),
            };
            let parsed = parse_url_with_port(&one, SENTINEL_PORT)
                .map_err(|_| bad("a sentinel is not host:port"))?;
            if i == 0 {
                auth = parsed.auth;
            }
            let DialTarget::Tcp(addr) = parsed.target else {
                return Err(bad("a sentinel is not host:port"));
            };
            sentinels.push(addr);
        }
        Ok(ParsedSentinelUrl {
            sentinels,
            master_name,
            auth,
            tls,
        })
    };
    Some(parse())
}

impl ClientOptions {
    /// A Redis Sentinel deployment: the master that `sentinels` (`host:port`, port 26379 when
    /// left out, or `redis://` / `rediss://` URLs) name `master_name`. It is one node for the
    /// store (the legacy layout by default); the client asks the sentinels for the master,
    /// checks it with `ROLE`, and follows failovers.
    ///
    /// Credentials in a sentinel's URL are the sentinels' (as
    /// [`ClientOptions::sentinel_credentials`]); the data nodes' are
    /// [`ClientOptions::credentials`]. TLS, when on, is used to the sentinels and the nodes.
    pub fn sentinel<S: Into<String>>(
        sentinels: impl IntoIterator<Item = S>,
        master_name: &str,
    ) -> Self {
        let mut addrs = Vec::new();
        let (mut auth, mut url_tls, mut invalid) = (None, None::<Option<bool>>, None);
        for sentinel in sentinels {
            let text: String = sentinel.into();
            match parse_url_with_port(&text, SENTINEL_PORT) {
                Ok(ParsedUrl {
                    target: DialTarget::Tcp(addr),
                    auth: url_auth,
                    tls,
                }) => {
                    addrs.push(addr);
                    if auth.is_none() {
                        auth = url_auth;
                    }
                    url_tls = Some(match url_tls {
                        None => Some(tls),
                        Some(all) => all.filter(|&t| t == tls),
                    });
                }
                Ok(ParsedUrl {
                    target: DialTarget::Unix(path),
                    ..
                }) => {
                    invalid.get_or_insert(
                        ConfigError::BadSentinel {
                            reason: format!(
                                "a sentinel is reached over TCP, not the Unix socket {}",
                                path.display()
                            ),
                        }
                        .into(),
                    );
                }
                Err(e) => {
                    invalid.get_or_insert(e);
                }
            }
        }
        let missing = match (addrs.is_empty(), master_name.is_empty()) {
            (true, _) => Some("no sentinel is given"),
            (false, true) => Some("the master name is empty"),
            (false, false) => None,
        };
        if let (Some(reason), None) = (missing, &invalid) {
            invalid = Some(
                ConfigError::BadSentinel {
                    reason: reason.to_owned(),
                }
                .into(),
            );
        }
        let mut config = Config::sentinel(addrs, master_name);
        if let Endpoints::Sentinel(s) = &mut config.endpoints {
            s.auth = auth;
        }
        let options = ClientOptions::with(config, url_tls.unwrap_or(Some(false)));
        match invalid {
            Some(e) => options.invalid(e),
            None => options,
        }
    }

    /// A `redis+sentinel://` URL, parsed: its credentials are the data nodes'.
    pub(super) fn sentinel_url(parsed: ParsedSentinelUrl) -> Self {
        let mut config = Config::sentinel(parsed.sentinels, parsed.master_name);
        config.auth = parsed.auth;
        ClientOptions::with(config, Some(parsed.tls))
    }

    /// Credentials for the sentinels of [`ClientOptions::sentinel`] (or a `redis+sentinel://`
    /// URL), which are often not the data nodes'. Without them, no `AUTH` is sent to the
    /// sentinels; other options ignore this.
    pub fn sentinel_credentials(mut self, username: Option<&str>, password: &str) -> Self {
        if let Endpoints::Sentinel(s) = &mut self.config.endpoints {
            s.auth = Some(Auth {
                username: username.map(str::to_owned),
                password: password.to_owned(),
            });
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::Deployment;
    use crate::session::SentinelEndpoints;

    fn endpoints(options: &ClientOptions) -> SentinelEndpoints {
        match options.to_config(0).unwrap().endpoints {
            Endpoints::Sentinel(s) => s,
            other => panic!("not a sentinel deployment: {other:?}"),
        }
    }

    #[test]
    fn sentinel_urls() {
        let p = parse_sentinel_url("redis+sentinel://bot:p%40ss@h1:26380,h2,[::1]:7/mymaster")
            .unwrap()
            .unwrap();
        assert_eq!(
            p.sentinels,
            [
                NodeAddr::new("h1", 26380),
                NodeAddr::new("h2", SENTINEL_PORT),
                NodeAddr::new("::1", 7)
            ]
        );
        assert_eq!(p.master_name, "mymaster");
        assert_eq!(
            p.auth,
            Some(Auth {
                username: Some("bot".into()),
                password: "p@ss".into()
            })
        );
        assert!(!p.tls);
        assert!(
            parse_sentinel_url("rediss+sentinel://h/m")
                .unwrap()
                .unwrap()
                .tls
        );
        assert_eq!(parse_sentinel_url("redis://h:1"), None);
        assert_eq!(parse_sentinel_url("h:1"), None);
        for bad in [
            "redis+sentinel://h:1",
            "redis+sentinel://h:1/",
            "redis+sentinel://h:1/a/b",
            "redis+sentinel://h:x/m",
            "redis+sentinel://h:1,,h:2/m",
            "redis+sentinel:///m",
        ] {
            let e = parse_sentinel_url(bad).unwrap().unwrap_err();
            assert!(
                matches!(e, Error::Config(ConfigError::BadUrl { .. })),
                "{bad}: {e}"
            );
        }
        // The credentials never show in the error.
        let e = parse_sentinel_url("redis+sentinel://u:secret@h:1").unwrap();
        assert!(!e.unwrap_err().to_string().contains("secret"));
    }

    #[test]
    fn the_url_form_is_accepted_where_a_url_is() {
        let options = ClientOptions::url("redis+sentinel://:pw@s1:1,s2:2/m");
        assert_eq!(options.deployment(), Deployment::Single);
        let s = endpoints(&options);
        assert_eq!(
            s.sentinels,
            [NodeAddr::new("s1", 1), NodeAddr::new("s2", 2)]
        );
        assert_eq!(s.master_name, "m");
        // The URL's credentials are the data nodes'; the sentinels have their own.
        assert_eq!(s.auth, None);
        let config = options.to_config(0).unwrap();
        assert_eq!(config.auth.unwrap().password, "pw");
        let options = options.sentinel_credentials(Some("watch"), "spw");
        assert_eq!(endpoints(&options).auth.unwrap().password, "spw");
        assert!(ClientOptions::url("redis+sentinel://h")
            .to_config(0)
            .is_err());
        assert!(ClientOptions::url("rediss+sentinel://h/m")
            .tls_settings()
            .unwrap()
            .is_some());
    }

    #[test]
    fn sentinel_options() {
        let options = ClientOptions::sentinel(["s1", "redis://:spw@s2:2"], "m");
        let s = endpoints(&options);
        assert_eq!(
            s.sentinels,
            [NodeAddr::new("s1", SENTINEL_PORT), NodeAddr::new("s2", 2)]
        );
        assert_eq!(s.auth.unwrap().password, "spw");
        assert!(options.to_config(0).unwrap().auth.is_none());
        assert!(!options.is_cluster());
        let refused = |options: ClientOptions| options.to_config(0).unwrap_err();
        assert!(matches!(
            refused(ClientOptions::sentinel(Vec::<String>::new(), "m")),
            Error::Config(ConfigError::BadSentinel { .. })
        ));
        assert!(matches!(
            refused(ClientOptions::sentinel(["s1"], "")),
            Error::Config(ConfigError::BadSentinel { .. })
        ));
        assert!(matches!(
            refused(ClientOptions::sentinel(["s1:x"], "m")),
            Error::Config(ConfigError::BadUrl { .. })
        ));
        assert!(matches!(
            ClientOptions::sentinel(["redis://a:1", "rediss://b:1"], "m").tls_settings(),
            Err(Error::Config(ConfigError::MixedTlsSchemes))
        ));
    }

    /// A sentinel address without a port means 26379 in every form: a URL's credentials and
    /// path are not a port (`redis://:spw@s2` dialled 6379, a data node's port, and
    /// `redis://s3/` was refused as a database number).
    #[test]
    fn a_sentinel_without_a_port_is_26379_in_every_form() {
        let options = ClientOptions::sentinel(
            [
                "redis://:spw@s1",
                "redis://s2/",
                "redis://w:p@s3/0",
                "[::1]",
                "s4",
            ],
            "m",
        );
        let s = endpoints(&options);
        assert_eq!(
            s.sentinels,
            [
                NodeAddr::new("s1", SENTINEL_PORT),
                NodeAddr::new("s2", SENTINEL_PORT),
                NodeAddr::new("s3", SENTINEL_PORT),
                NodeAddr::new("::1", SENTINEL_PORT),
                NodeAddr::new("s4", SENTINEL_PORT),
            ]
        );
        assert_eq!(s.auth.unwrap().password, "spw");
        let url = parse_sentinel_url("redis+sentinel://:pw@h1,h2:5/m")
            .unwrap()
            .unwrap();
        assert_eq!(
            url.sentinels,
            [NodeAddr::new("h1", SENTINEL_PORT), NodeAddr::new("h2", 5)]
        );
    }

    /// An IPv6 address goes in brackets; unbracketed, its last group was read as a port.
    #[test]
    fn an_unbracketed_ipv6_sentinel_and_a_query_after_the_name_are_refused() {
        for text in ["fe80::1", "::1", "redis://fe80::1:26379"] {
            let e = ClientOptions::sentinel([text], "m")
                .to_config(0)
                .unwrap_err();
            assert!(
                matches!(e, Error::Config(ConfigError::BadUrl { .. })),
                "{text}: {e}"
            );
        }
        for url in [
            "redis+sentinel://fe80::1/m",
            "redis+sentinel://h/m?x=1",
            "redis+sentinel://h/m#f",
        ] {
            let e = parse_sentinel_url(url).unwrap().unwrap_err();
            assert!(
                matches!(e, Error::Config(ConfigError::BadUrl { .. })),
                "{url}: {e}"
            );
        }
        assert_eq!(
            parse_sentinel_url("redis+sentinel://h/m%3Fx")
                .unwrap()
                .unwrap()
                .master_name,
            "m?x"
        );
    }
}

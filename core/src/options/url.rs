//! Redis URLs: `redis://[user[:password]@]host[:port][/db]`, `rediss://` for TLS, or a bare
//! `host:port`, parsed once when [`ClientOptions`](crate::ClientOptions) are made.

use percent_encoding::percent_decode_str;

use crate::addr::NodeAddr;
use crate::error::{ConfigError, Error};
use crate::session::Auth;

/// A parsed `redis://` or `rediss://` address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedUrl {
    /// Host and port (default port 6379).
    pub addr: NodeAddr,
    /// Credentials from the user-info part.
    pub auth: Option<Auth>,
    /// Whether the scheme was `rediss` (TLS).
    pub tls: bool,
}

/// Parses `redis://[user[:password]@]host[:port][/db]`, the same with `rediss://` (TLS), or a
/// bare `host:port` (plain TCP). User and password are percent-decoded. A database number other
/// than 0 is refused: Redis Cluster has only 0.
pub fn parse_url(url: &str) -> Result<ParsedUrl, Error> {
    let bad = |why: &str| {
        Error::Config(ConfigError::BadUrl {
            url: redact_url(url),
            reason: why.to_owned(),
        })
    };
    let (tls, rest) = match url.split_once("://") {
        Some(("redis", rest)) => (false, rest),
        Some(("rediss", rest)) => (true, rest),
        Some((scheme, _)) => return Err(bad(&format!("unsupported scheme {scheme:?}"))),
        None => (false, url),
    };
    let (authority, path) = match rest.split_once('/') {
        Some((a, p)) => (a, p),
        None => (rest, ""),
    };
    if !(path.is_empty() || path == "0") {
        return Err(bad("only database 0 is supported"));
    }
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let decode = |s: &str| {
        percent_decode_str(s)
            .decode_utf8()
            .map(|c| c.into_owned())
            .map_err(|_| bad("credentials are not UTF-8"))
    };
    let auth = match userinfo {
        None => None,
        Some(info) => {
            let (user, password) = match info.split_once(':') {
                Some((u, p)) => (decode(u)?, decode(p)?),
                None => (String::new(), decode(info)?),
            };
            Some(Auth {
                username: (!user.is_empty()).then_some(user),
                password,
            })
        }
    };
    // The port is optional; a bracketed IPv6 host has colons of its own.
    let has_port = match hostport.strip_prefix('[') {
        Some(v6) => v6.contains("]:"),
        None => hostport.contains(':'),
    };
    let hostport = if has_port {
        hostport.to_owned()
    } else {
        format!("{hostport}:6379")
    };
    let addr = NodeAddr::parse(&hostport, "").ok_or_else(|| bad("no usable host:port"))?;
    Ok(ParsedUrl { addr, auth, tls })
}

/// The URL with its credentials replaced, for errors and `Debug`.
pub(crate) fn redact_url(url: &str) -> String {
    let scheme = match url.split_once("://") {
        Some(("rediss", _)) => "rediss",
        _ => "redis",
    };
    match url.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://<credentials>@{host}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let p = parse_url("redis://127.0.0.1:7000").unwrap();
        assert_eq!(p.addr, NodeAddr::new("127.0.0.1", 7000));
        assert_eq!(p.auth, None);
        let p = parse_url("redis://bot:p%40ss@h:1/0").unwrap();
        assert_eq!(
            p.auth,
            Some(Auth {
                username: Some("bot".into()),
                password: "p@ss".into()
            })
        );
        let p = parse_url("redis://:secret@h").unwrap();
        assert_eq!(p.addr, NodeAddr::new("h", 6379));
        assert_eq!(p.auth.unwrap().username, None);
        assert_eq!(parse_url("h:5").unwrap().addr, NodeAddr::new("h", 5));
        assert_eq!(
            parse_url("redis://[::1]:7000").unwrap().addr,
            NodeAddr::new("::1", 7000)
        );
        assert!(parse_url("http://h:1").is_err());
        assert!(parse_url("redis://h:1/3").is_err());
        assert!(parse_url("redis://h:notaport").is_err());
    }

    #[test]
    fn rediss_urls_mean_tls() {
        let p = parse_url("rediss://bot:pw@cache.example.com:6380").unwrap();
        assert!(p.tls);
        assert_eq!(
            p.addr,
            NodeAddr::parse("cache.example.com:6380", "").unwrap()
        );
        assert_eq!(p.auth.unwrap().password, "pw");
        assert_eq!(parse_url("rediss://h").unwrap().addr.port, 6379);
        assert!(!parse_url("redis://h:1").unwrap().tls);
        assert!(!parse_url("h:1").unwrap().tls);
        assert!(parse_url("redisss://h:1").is_err());
        // The scheme survives redaction, the credentials do not.
        assert_eq!(redact_url("rediss://u:p@h:1"), "rediss://<credentials>@h:1");
    }
}

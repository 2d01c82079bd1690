//! Redis URLs, parsed once when [`ClientOptions`](crate::ClientOptions) are made:
//! `redis://[user[:password]@]host[:port][/db]`, `rediss://` for TLS, a bare `host:port`, and
//! a Unix socket as redis-rs writes it, `unix:///run/redis.sock` or
//! `redis+unix:///run/redis.sock` (credentials in the user-info or as `?user=..&pass=..`).

use std::path::PathBuf;

use percent_encoding::percent_decode_str;

use crate::addr::{DialTarget, NodeAddr};
use crate::error::{ConfigError, Error};
use crate::session::Auth;

/// A parsed Redis URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedUrl {
    /// Where the node is: host and port (default port 6379), or a Unix socket's path.
    pub target: DialTarget,
    /// Credentials from the user-info part (or, for a Unix socket, the query).
    pub auth: Option<Auth>,
    /// Whether the scheme was `rediss` (TLS).
    pub tls: bool,
}

/// Parses `redis://[user[:password]@]host[:port][/db]`, the same with `rediss://` (TLS), a
/// bare `host:port` (plain TCP), or `unix://[user[:password]@]/path[?db=0&user=..&pass=..]`
/// (`redis+unix://` alike). User and password are percent-decoded. A database number other
/// than 0 is refused: Redis Cluster has only 0, and the layouts are the same on one node.
pub fn parse_url(url: &str) -> Result<ParsedUrl, Error> {
    parse_url_with_port(url, 6379)
}

/// [`parse_url`], with `default_port` for a host that names none (a sentinel's is 26379).
pub(crate) fn parse_url_with_port(url: &str, default_port: u16) -> Result<ParsedUrl, Error> {
    let bad = |why: &str| {
        Error::Config(ConfigError::BadUrl {
            url: redact_url(url),
            reason: why.to_owned(),
        })
    };
    let (tls, rest) = match url.split_once("://") {
        Some(("redis", rest)) => (false, rest),
        Some(("rediss", rest)) => (true, rest),
        Some(("unix" | "redis+unix", rest)) => return parse_unix(rest).map_err(|why| bad(&why)),
        Some((scheme, _)) => return Err(bad(&format!("unsupported scheme {scheme:?}"))),
        None => (false, url),
    };
    let (authority, path) = match rest.split_once('/') {
        Some((a, p)) => (a, p),
        None => (rest, ""),
    };
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    // A query (`?password=..`, `?ssl_cert_reqs=..`, other clients' forms) was read as part of
    // the host or the port, and so printed in logs and errors. Not quoted: it may hold a
    // password.
    if hostport.contains(['?', '#']) || path.contains(['?', '#']) {
        return Err(bad(
            "a query or fragment (after ? or #) is not read: give credentials in the user-info \
             (redis://user:password@host) or as options, TLS with rediss:// or ClientOptions::tls",
        ));
    }
    if !(path.is_empty() || path == "0") {
        return Err(bad("only database 0 is supported"));
    }
    let auth = userinfo
        .map(user_info)
        .transpose()
        .map_err(|why| bad(&why))?;
    let addr = host_port(hostport, default_port).map_err(|why| bad(&why))?;
    Ok(ParsedUrl {
        target: DialTarget::Tcp(addr),
        auth,
        tls,
    })
}

/// `host[:port]` or `[v6][:port]`, the port `default_port` when left out. An IPv6 host goes in
/// brackets: unbracketed, its last group read as a port (`fe80::1` as host `fe80:`, port 1).
fn host_port(text: &str, default_port: u16) -> Result<NodeAddr, String> {
    let (host, port) = match text.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, port)) => match port.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(format!("{text:?} is not [v6 host]:port")),
            },
            None => return Err(format!("{text:?} opens a bracket it does not close")),
        },
        None => match text.split_once(':') {
            Some((_, port)) if port.contains(':') => {
                return Err(format!(
                    "{text:?}: an IPv6 host goes in brackets, as [{text}] or [host]:port"
                ))
            }
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        },
    };
    if host.is_empty() {
        return Err("no host".to_owned());
    }
    let port = match port {
        None => default_port,
        Some(port) => port
            .parse()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| format!("{port:?} is not a port (1-65535)"))?,
    };
    Ok(NodeAddr::new(host, port))
}

/// What follows `unix://`: `[user[:password]@][localhost]/path[?query]`, where the query may
/// say `db=0`, `user=..` and `pass=..` (redis-rs's form), not together with a user-info.
fn parse_unix(rest: &str) -> Result<ParsedUrl, String> {
    let (location, query) = match rest.split_once('?') {
        Some((l, q)) => (l, Some(q)),
        None => (rest, None),
    };
    let slash = location
        .find('/')
        .ok_or("no socket path (unix:///path/to/redis.sock)")?;
    let (authority, path) = location.split_at(slash);
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    // A file URL's host: none, or this machine.
    if !(host.is_empty() || host == "localhost") {
        return Err(format!(
            "a Unix socket is on this machine: unix:///path, not host {host:?}"
        ));
    }
    let path = decode(path, "the socket path")?;
    if path.trim_end_matches('/').is_empty() {
        return Err("no socket path (unix:///path/to/redis.sock)".to_owned());
    }
    let mut auth = userinfo.map(user_info).transpose()?;
    let (mut user, mut pass) = (None, None);
    for pair in query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        // The query is form-encoded, as redis-rs reads it: `+` is a space.
        let value = decode(&value.replace('+', " "), key)?;
        match key {
            "db" if value == "0" => {}
            "db" => return Err("only database 0 is supported".to_owned()),
            "user" => user = Some(value),
            "pass" => pass = Some(value),
            _ => return Err(format!("unknown query parameter {key:?} (db, user, pass)")),
        }
    }
    match (user, pass) {
        (None, None) => {}
        (Some(_), None) => return Err("`user` is given without `pass`".to_owned()),
        (_, Some(_)) if auth.is_some() => {
            return Err("credentials are given twice (user-info and query)".to_owned())
        }
        (username, Some(password)) => auth = Some(Auth { username, password }),
    }
    Ok(ParsedUrl {
        target: DialTarget::Unix(PathBuf::from(path)),
        auth,
        tls: false,
    })
}

/// The credentials of a user-info, `[user:]password`.
fn user_info(info: &str) -> Result<Auth, String> {
    let (user, password) = match info.split_once(':') {
        Some((u, p)) => (decode(u, "the credentials")?, decode(p, "the credentials")?),
        None => (String::new(), decode(info, "the credentials")?),
    };
    Ok(Auth {
        username: (!user.is_empty()).then_some(user),
        password,
    })
}

fn decode(text: &str, what: &str) -> Result<String, String> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| format!("{what} is not UTF-8"))
}

/// The URL with its credentials replaced, for errors, `Debug` and logs: the user-info, and
/// every query value but the database and the user name (`pass=..`, and whatever else a query
/// holds). A password with an unencoded `@` still goes whole: everything before the last `@`
/// is hidden.
pub fn redact_url(url: &str) -> String {
    // A fragment after the host may hold anything; one before the last `@` is a password's.
    let host_from = url.rfind('@').unwrap_or(0);
    if let Some(at) = url[host_from..].find('#') {
        return format!("{}#<redacted>", redact_url(&url[..host_from + at]));
    }
    let (scheme, rest) = match url.split_once("://") {
        Some((s @ ("rediss" | "unix" | "redis+unix"), rest)) => (Some(s), rest),
        // Text before `://` that is no scheme of ours may be anything, a password included.
        Some((_, rest)) => (Some("redis"), rest),
        None => (None, url),
    };
    match (rest.rsplit_once('@'), scheme) {
        (Some((before, after)), scheme) => {
            // An `@` after a `?` may be inside a query value: what follows it up to the next
            // pair is that value's tail.
            let after = match (before.contains('?'), after.split_once('&')) {
                (false, _) => redact_query(after),
                (true, Some((_, pairs))) => format!("<redacted>&{}", redact_pairs(pairs)),
                (true, None) => "<redacted>".to_owned(),
            };
            format!("{}://<credentials>@{after}", scheme.unwrap_or("redis"))
        }
        (None, Some(_)) if !url.contains('?') => url.to_owned(),
        (None, Some(scheme)) => format!("{scheme}://{}", redact_query(rest)),
        (None, None) => redact_query(url),
    }
}

/// `location?query` with the query's pairs redacted.
fn redact_query(text: &str) -> String {
    match text.split_once('?') {
        Some((location, query)) => format!("{location}?{}", redact_pairs(query)),
        None => text.to_owned(),
    }
}

/// `key=value&..` with each value replaced but those of `db` and `user`.
fn redact_pairs(query: &str) -> String {
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some(("db" | "user", _)) => pair.to_owned(),
            Some((key, _)) => format!("{key}=<redacted>"),
            None => "<redacted>".to_owned(),
        })
        .collect();
    pairs.join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16) -> DialTarget {
        DialTarget::Tcp(NodeAddr::new(host, port))
    }

    fn unix(path: &str) -> DialTarget {
        DialTarget::Unix(PathBuf::from(path))
    }

    fn auth(username: Option<&str>, password: &str) -> Option<Auth> {
        Some(Auth {
            username: username.map(str::to_owned),
            password: password.to_owned(),
        })
    }

    #[test]
    fn urls() {
        let p = parse_url("redis://127.0.0.1:7000").unwrap();
        assert_eq!(p.target, tcp("127.0.0.1", 7000));
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
        assert_eq!(p.target, tcp("h", 6379));
        assert_eq!(p.auth.unwrap().username, None);
        assert_eq!(parse_url("h:5").unwrap().target, tcp("h", 5));
        assert_eq!(
            parse_url("redis://[::1]:7000").unwrap().target,
            tcp("::1", 7000)
        );
        assert!(parse_url("http://h:1").is_err());
        assert!(parse_url("redis://h:1/3").is_err());
        assert!(parse_url("redis://h:notaport").is_err());
        // An IPv6 host goes in brackets: unbracketed, `::1` was host `:`, port 1.
        for bad in [
            "redis://::1",
            "redis://fe80::1:6379",
            "::1",
            "redis://[::1",
            "redis://[::1]x",
            "redis://h:0",
            "redis://:1",
        ] {
            let e = parse_url(bad).unwrap_err();
            assert!(
                matches!(e, Error::Config(ConfigError::BadUrl { .. })),
                "{bad}: {e}"
            );
        }
        assert_eq!(parse_url("[::1]").unwrap().target, tcp("::1", 6379));
    }

    /// A query was read as part of the host (`h?password=..` dialled as a host of that name,
    /// printed in logs) or of the port (its text quoted in the error).
    #[test]
    fn a_query_is_refused_without_quoting_it() {
        for url in [
            "redis://h?password=s3cret",
            "redis://h:6379?password=s3cret",
            "redis://h/0?password=s3cret",
            "rediss://u:p@h:1#s3cret",
            "h:1?password=s3cret",
        ] {
            let e = parse_url(url).unwrap_err();
            assert!(!e.to_string().contains("s3cret"), "{url}: {e}");
            assert!(e.to_string().contains("query or fragment"), "{url}: {e}");
        }
        // A password with a `?` in the user-info is still the password.
        let p = parse_url("redis://:pa?ss@h:1").unwrap();
        assert_eq!(p.auth.unwrap().password, "pa?ss");
    }

    #[test]
    fn rediss_urls_mean_tls() {
        let p = parse_url("rediss://bot:pw@cache.example.com:6380").unwrap();
        assert!(p.tls);
        assert_eq!(p.target, tcp("cache.example.com", 6380));
        assert_eq!(p.auth.unwrap().password, "pw");
        assert_eq!(parse_url("rediss://h").unwrap().target, tcp("h", 6379));
        assert!(!parse_url("redis://h:1").unwrap().tls);
        assert!(!parse_url("h:1").unwrap().tls);
        assert!(parse_url("redisss://h:1").is_err());
        // The scheme survives redaction, the credentials do not.
        assert_eq!(redact_url("rediss://u:p@h:1"), "rediss://<credentials>@h:1");
    }

    #[test]
    fn unix_socket_urls_in_redis_rs_forms() {
        let cases: &[(&str, DialTarget, Option<Auth>)] = &[
            ("unix:///run/redis.sock", unix("/run/redis.sock"), None),
            (
                "redis+unix:///run/redis.sock",
                unix("/run/redis.sock"),
                None,
            ),
            (
                "unix://localhost/run/redis.sock",
                unix("/run/redis.sock"),
                None,
            ),
            (
                "redis+unix:///run/redis.sock?db=0",
                unix("/run/redis.sock"),
                None,
            ),
            (
                "unix:///tmp/my%20dir/r.sock",
                unix("/tmp/my dir/r.sock"),
                None,
            ),
            (
                "redis+unix://bot:p%40ss@/run/redis.sock",
                unix("/run/redis.sock"),
                auth(Some("bot"), "p@ss"),
            ),
            (
                "unix://:secret@localhost/run/redis.sock",
                unix("/run/redis.sock"),
                auth(None, "secret"),
            ),
            (
                "redis+unix:///run/redis.sock?db=0&user=bot&pass=p%26w+d",
                unix("/run/redis.sock"),
                auth(Some("bot"), "p&w d"),
            ),
            (
                "unix:///run/redis.sock?pass=secret",
                unix("/run/redis.sock"),
                auth(None, "secret"),
            ),
        ];
        for (url, target, credentials) in cases {
            let parsed = parse_url(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(&parsed.target, target, "{url}");
            assert_eq!(&parsed.auth, credentials, "{url}");
            assert!(!parsed.tls, "{url}");
        }
    }

    #[test]
    fn unusable_unix_socket_urls_say_why_without_the_password() {
        let cases: &[(&str, &str)] = &[
            ("unix://", "no socket path"),
            ("unix:///", "no socket path"),
            (
                "redis+unix://redis.example.com/run/redis.sock",
                "on this machine",
            ),
            ("unix:///run/redis.sock?db=3&pass=secret", "only database 0"),
            (
                "unix:///run/redis.sock?user=bot",
                "`user` is given without `pass`",
            ),
            (
                "unix://u:secret@/run/redis.sock?pass=secret",
                "credentials are given twice",
            ),
            (
                "unix:///run/redis.sock?password=secret",
                "unknown query parameter",
            ),
            ("unix:///run/%ff.sock", "not UTF-8"),
        ];
        for (url, why) in cases {
            let Err(Error::Config(ConfigError::BadUrl { url: shown, reason })) = parse_url(url)
            else {
                panic!("{url} was not refused as a bad URL");
            };
            assert!(reason.contains(why), "{url}: {reason}");
            assert!(!shown.contains("secret"), "{url} shown as {shown}");
        }
    }

    #[test]
    fn redaction_hides_user_info_and_query_credentials() {
        let cases: &[(&str, &str)] = &[
            ("redis://bot:secret@h:1", "redis://<credentials>@h:1"),
            ("bot:secret@h:1", "redis://<credentials>@h:1"),
            ("redis://h:1", "redis://h:1"),
            ("redis://h:1/3", "redis://h:1/3"),
            ("unix:///run/r.sock", "unix:///run/r.sock"),
            (
                "redis+unix://bot:secret@/run/r.sock",
                "redis+unix://<credentials>@/run/r.sock",
            ),
            (
                "redis+unix:///run/r.sock?db=0&user=bot&pass=secret",
                "redis+unix:///run/r.sock?db=0&user=bot&pass=<redacted>",
            ),
            (
                "unix:///r.sock?passwd=secret&secret",
                "unix:///r.sock?passwd=<redacted>&<redacted>",
            ),
            // A password with an unencoded `@` or `?`: everything before the last `@` goes.
            ("redis://u:secr@et@h:1", "redis://<credentials>@h:1"),
            ("redis://u:se?cr@et@h:1", "redis://<credentials>@<redacted>"),
            (
                "unix:///r.sock?pass=se@cret",
                "unix://<credentials>@<redacted>",
            ),
            (
                "unix:///r.sock?pass=se@cret&db=0",
                "unix://<credentials>@<redacted>&db=0",
            ),
            // Text before `://` that is not a scheme of ours is not echoed.
            ("secret://u:p@h:1", "redis://<credentials>@h:1"),
        ];
        for (url, shown) in cases {
            assert_eq!(&redact_url(url), shown, "{url}");
        }
    }
}

//! What stands in for TLS when the `tls` feature is off: a [`TlsConnector`] type without
//! values, so the [`Runtime`](crate::Runtime) trait keeps one signature and a runtime's
//! `connect` is never handed one; and the refusal of a client asked for TLS.

use std::io;

use botmesh_redis_core::{ClientOptions, ConfigError, Error};

/// The TLS configuration of a client, in a build without the `tls` feature: no value of it
/// exists (a client asked for TLS refuses to start with
/// [`ConfigError::TlsNotBuilt`]), so a runtime's `connect` is always given `None`.
#[derive(Clone, Debug)]
pub enum TlsConnector {}

/// Plain TCP, or the refusal of TLS (a `rediss://` URL, [`ClientOptions::tls`]): this build
/// has none.
pub(crate) fn connector(options: &ClientOptions) -> Result<Option<TlsConnector>, Error> {
    match options.tls_settings()? {
        Some(_) => Err(ConfigError::TlsNotBuilt.into()),
        None => Ok(None),
    }
}

/// Says why a connect or a read failed, for [`Error::Connect`]'s reason.
pub(crate) fn describe_failure(e: &io::Error) -> String {
    e.to_string()
}

/// Run by `cargo test -p botmesh-redis-client --no-default-features` (`scripts/test`).
#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use botmesh_redis_core::TlsOptions;

    #[test]
    fn plain_tcp_needs_no_tls() {
        assert!(connector(&ClientOptions::url("redis://h:1"))
            .unwrap()
            .is_none());
    }

    #[test]
    fn tls_asked_of_a_build_without_it_is_refused_at_start() {
        for options in [
            ClientOptions::url("rediss://h:1"),
            ClientOptions::cluster(["rediss://h:1", "rediss://h:2"]),
            ClientOptions::url("redis://h:1").tls(TlsOptions::new()),
        ] {
            let error = connector(&options).unwrap_err();
            assert_eq!(error, Error::Config(ConfigError::TlsNotBuilt));
            let shown = error.to_string();
            assert!(shown.contains("enable the `tls` feature"), "{shown}");
        }
    }
}

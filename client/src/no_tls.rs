//! What stands in for TLS when the `tls` feature is off: a [`TlsConnector`] type without
//! values, so the [`Runtime`](crate::Runtime) trait keeps one signature and a runtime's
//! `connect` is never handed one.

/// The TLS configuration of a client, in a build without the `tls` feature: no value of it
/// exists (a client asked for TLS refuses to start with
/// [`ConfigError::TlsNotBuilt`](botmesh_redis_core::ConfigError::TlsNotBuilt)), so a
/// runtime's `connect` is always given `None`.
#[derive(Clone, Debug)]
pub enum TlsConnector {}

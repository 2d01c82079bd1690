//! TLS for every driver: the rustls client configuration, built once per client from the
//! core's [`TlsOptions`], and the names a connection checks its server's certificate against.
//! The drivers only run the handshake over their own TCP stream.

use std::io;
use std::sync::Arc;

use rustls::crypto::ring;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};

use botmesh_redis_core::{ClientOptions, ConfigError, Error, NodeAddr, Pem, TlsOptions};

pub use rustls;

/// What a driver needs to open TLS connections: the shared rustls configuration and the
/// server-name override. Cheap to clone.
#[derive(Clone, Debug)]
pub struct TlsConnector {
    config: Arc<ClientConfig>,
    server_name: Option<ServerName<'static>>,
}

impl TlsConnector {
    /// Builds the configuration: parses the PEM roots and client certificate, so a bad one is
    /// an [`Error::Config`] when the client starts, not a failure at every connect.
    pub fn new(options: &TlsOptions) -> Result<Self, Error> {
        let bad = |what: &str, e: &dyn std::fmt::Display| tls_error(format!("{what}: {e}"));
        let mut roots = RootCertStore::empty();
        if !options.trusts_only_given_roots() {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        }
        for pem in options.roots_pem() {
            let pem = read(pem, "the root certificate bundle")?;
            let mut found = 0;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| bad("a root certificate is not valid PEM", &e))?;
                roots
                    .add(cert)
                    .map_err(|e| bad("a root certificate was refused", &e))?;
                found += 1;
            }
            if found == 0 {
                return Err(tls_error(
                    "a root certificate bundle holds no PEM CERTIFICATE block".to_owned(),
                ));
            }
        }
        if roots.is_empty() {
            return Err(tls_error(
                "no root certificate to trust (only_these_roots without any)".to_owned(),
            ));
        }
        // `ring` explicitly, so the process-wide default provider (which another crate of the
        // application may have chosen, or left unset) does not matter.
        let builder = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("no protocol version", &e))?
            .with_root_certificates(roots);
        let config = match options.client_certificate() {
            None => builder.with_no_client_auth(),
            Some((chain_pem, key_pem)) => {
                let chain_pem = read(chain_pem, "the client certificate")?;
                let key_pem = read(key_pem, "the client key")?;
                let chain = CertificateDer::pem_slice_iter(&chain_pem)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| bad("the client certificate is not valid PEM", &e))?;
                if chain.is_empty() {
                    return Err(tls_error(
                        "the client certificate holds no PEM CERTIFICATE block".to_owned(),
                    ));
                }
                let key = PrivateKeyDer::from_pem_slice(&key_pem)
                    .map_err(|e| bad("the client key is not a valid PEM private key", &e))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| bad("the client certificate and key were refused", &e))?
            }
        };
        let server_name = match options.server_name_override() {
            None => None,
            Some(name) => Some(
                ServerName::try_from(name.to_owned())
                    .map_err(|e| bad(&format!("bad server name {name:?}"), &e))?,
            ),
        };
        Ok(TlsConnector {
            config: Arc::new(config),
            server_name,
        })
    }

    /// The rustls configuration, shared by every connection of the client.
    pub fn config(&self) -> &Arc<ClientConfig> {
        &self.config
    }

    /// The name the certificate of the node at `addr` must carry: the override, else the host
    /// dialled (a DNS name, or an IP address matched against the certificate's IP SANs).
    pub fn server_name(&self, addr: &NodeAddr) -> io::Result<ServerName<'static>> {
        if let Some(name) = &self.server_name {
            return Ok(name.clone());
        }
        let host = addr.host.trim_start_matches('[').trim_end_matches(']');
        ServerName::try_from(host.to_owned()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("TLS: {host:?} is not a valid server name: {e}"),
            )
        })
    }
}

/// The TLS configuration for every connection of a client with these options, or `None` for
/// plain TCP.
pub(crate) fn connector(options: &ClientOptions) -> Result<Option<TlsConnector>, Error> {
    match options.tls_settings()? {
        Some(settings) => Ok(Some(TlsConnector::new(&settings)?)),
        None => Ok(None),
    }
}

/// Says what a failed TLS connect means, for [`Error::Connect`]'s reason: rustls's own words
/// ("invalid peer certificate: UnknownIssuer") behind a sentence an operator can act on.
pub(crate) fn describe_failure(e: &io::Error) -> String {
    let Some(tls) = e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) else {
        return e.to_string();
    };
    let what = match tls {
        rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer) => {
            "the server's certificate is not trusted (its issuer is not among the roots)"
        }
        rustls::Error::InvalidCertificate(rustls::CertificateError::BadSignature) => {
            "the server's certificate is not trusted (a root of that name did not sign it: \
             another CA of the same name?)"
        }
        rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidForName
            | rustls::CertificateError::NotValidForNameContext { .. },
        ) => {
            "the server's certificate does not name the host dialled (see TlsOptions::server_name)"
        }
        rustls::Error::InvalidCertificate(_) => "the server's certificate was refused",
        rustls::Error::AlertReceived(_) => {
            "the server refused the handshake (does it require a client certificate?)"
        }
        _ => "the TLS handshake failed",
    };
    format!("TLS handshake failed: {what}: {tls}")
}

/// The PEM text of `pem`, reading its file (once, when the client starts); `what` names it in
/// the error.
fn read<'a>(pem: &'a Pem, what: &str) -> Result<std::borrow::Cow<'a, [u8]>, Error> {
    match pem {
        Pem::Bytes(bytes) => Ok(std::borrow::Cow::Borrowed(bytes)),
        Pem::File(path) => std::fs::read(path)
            .map(std::borrow::Cow::Owned)
            .map_err(|e| tls_error(format!("cannot read {what} {}: {e}", path.display()))),
        _ => Err(tls_error(format!("{what}: an unknown PEM source"))),
    }
}

/// A TLS setting that cannot be used, as a configuration error.
fn tls_error(reason: String) -> Error {
    Error::Config(ConfigError::Tls { reason })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn tls_is_built_when_asked_for_and_only_then() {
        assert!(connector(&ClientOptions::url("redis://h:1"))
            .unwrap()
            .is_none());
        assert!(connector(&ClientOptions::url("rediss://h:1"))
            .unwrap()
            .is_some());
    }
}

//! TLS settings: what to trust and what to present, kept as PEM bytes or file names; the
//! driver parses them and speaks TLS.

use std::fmt;

/// TLS settings (see [`ClientOptions::tls`](crate::ClientOptions::tls)): what to trust and what to present. The core keeps
/// only the PEM bytes and names; the driver parses them and speaks TLS (rustls), so the core
/// stays free of I/O and of a TLS dependency.
///
/// By default the server's certificate must chain to the Mozilla root store as shipped by
/// `webpki-roots` (the same roots on every machine, whatever the system has installed), and
/// name the host dialled: a DNS name, or an IP address that the certificate carries as an IP
/// subject alternative name.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TlsOptions {
    roots: Vec<Pem>,
    only_given_roots: bool,
    client_cert: Option<(Pem, Pem)>,
    server_name: Option<String>,
}

/// PEM text for [`TlsOptions`]: given in memory, or a file the driver reads when the client
/// starts (the core reads no files), so a bad path is a configuration error at start.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pem {
    /// The PEM text itself.
    Bytes(Vec<u8>),
    /// A file holding it.
    File(std::path::PathBuf),
}

impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // PEM may be a private key: only its size is shown.
            Pem::Bytes(bytes) => write!(f, "Pem::Bytes({} bytes)", bytes.len()),
            Pem::File(path) => f.debug_tuple("Pem::File").field(path).finish(),
        }
    }
}

impl fmt::Debug for TlsOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The client key is a secret: only whether there is one is shown.
        f.debug_struct("TlsOptions")
            .field("roots", &self.roots.len())
            .field("only_given_roots", &self.only_given_roots)
            .field("client_cert", &self.client_cert.is_some())
            .field("server_name", &self.server_name)
            .finish()
    }
}

impl TlsOptions {
    /// TLS trusting the `webpki-roots` (Mozilla) root store: what a managed service with a
    /// publicly trusted certificate needs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also trusts the certificates of this PEM bundle (one or more `CERTIFICATE` blocks), for
    /// a private CA. The public roots stay trusted unless [`TlsOptions::only_these_roots`] is
    /// set.
    pub fn root_certificates_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.roots.push(Pem::Bytes(pem.into()));
        self
    }

    /// [`TlsOptions::root_certificates_pem`] from a file, read when the client starts.
    pub fn root_certificates_file(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.roots.push(Pem::File(path.into()));
        self
    }

    /// Trusts only the roots given with [`TlsOptions::root_certificates_pem`], not the public
    /// ones: a private deployment then accepts no certificate a public CA issued.
    pub fn only_these_roots(mut self) -> Self {
        self.only_given_roots = true;
        self
    }

    /// Presents this certificate chain (PEM, leaf first) and private key (PEM: PKCS#8, PKCS#1
    /// or SEC1) to servers that ask for one (`tls-auth-clients yes` / mutual TLS).
    pub fn client_certificate_pem(
        mut self,
        chain: impl Into<Vec<u8>>,
        key: impl Into<Vec<u8>>,
    ) -> Self {
        self.client_cert = Some((Pem::Bytes(chain.into()), Pem::Bytes(key.into())));
        self
    }

    /// [`TlsOptions::client_certificate_pem`] from two files, read when the client starts.
    pub fn client_certificate_files(
        mut self,
        chain: impl Into<std::path::PathBuf>,
        key: impl Into<std::path::PathBuf>,
    ) -> Self {
        self.client_cert = Some((Pem::File(chain.into()), Pem::File(key.into())));
        self
    }

    /// Checks every server's certificate against this name (DNS name or IP address) instead of
    /// the host dialled, and sends it as SNI when it is a DNS name. For a cluster whose nodes
    /// announce IP addresses while their certificate names one DNS name (a wildcard or a shared
    /// name); a certificate that carries the nodes' IP addresses as SANs needs no override.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// The extra root certificates, as given.
    pub fn roots_pem(&self) -> &[Pem] {
        &self.roots
    }

    /// Whether only [`TlsOptions::roots_pem`] are trusted.
    pub fn trusts_only_given_roots(&self) -> bool {
        self.only_given_roots
    }

    /// The client certificate chain and key, if any.
    pub fn client_certificate(&self) -> Option<(&Pem, &Pem)> {
        self.client_cert.as_ref().map(|(chain, key)| (chain, key))
    }

    /// The server-name override, if any.
    pub fn server_name_override(&self) -> Option<&str> {
        self.server_name.as_deref()
    }
}

//! Throwaway TLS material for TLS-enabled servers: a CA, a server certificate for loopback and
//! a client certificate, made by the `openssl` command line (no TLS crate in the harness).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// A throwaway CA and the certificates it signed, in a temporary directory deleted on drop.
///
/// The server certificate names `127.0.0.1` (IP SAN) and `localhost` (DNS SAN), as every
/// harness node listens on loopback, and is valid for client authentication too, since the
/// nodes of a `tls-cluster` present it to each other. Keys are P-256.
#[derive(Debug)]
pub struct TlsFiles {
    dir: PathBuf,
}

impl TlsFiles {
    /// Generates a new CA, server certificate and client certificate (valid two days).
    pub fn generate() -> Result<TlsFiles, String> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("botmesh-tls-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let files = TlsFiles { dir };
        files.make()?;
        Ok(files)
    }

    fn make(&self) -> Result<(), String> {
        let ca_subject = format!(
            "/CN=botmesh-redis test CA {}",
            self.dir
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
        );
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        self.openssl(&[
            &["req", "-x509"],
            &ec[..],
            &["-keyout", "ca.key", "-out", "ca.crt", "-days", "2"],
            // A name of its own, so that two throwaway CAs never pass for each other.
            &["-subj", &ca_subject],
            &["-addext", "basicConstraints=critical,CA:TRUE"],
            &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        ])?;
        for (name, cn, ext) in [
            (
                "server",
                "localhost",
                "subjectAltName=IP:127.0.0.1,DNS:localhost\n\
                 extendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n",
            ),
            (
                "client",
                "botmesh-redis test client",
                "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n",
            ),
        ] {
            let ext_file = format!("{name}.ext");
            fs::write(self.dir.join(&ext_file), ext)
                .map_err(|e| format!("write {ext_file}: {e}"))?;
            let (key, csr, crt) = (
                format!("{name}.key"),
                format!("{name}.csr"),
                format!("{name}.crt"),
            );
            let subj = format!("/CN={cn}");
            self.openssl(&[
                &["req"],
                &ec[..],
                &["-keyout", &key, "-out", &csr, "-subj", &subj],
            ])?;
            self.openssl(&[
                &[
                    "x509", "-req", "-in", &csr, "-CA", "ca.crt", "-CAkey", "ca.key",
                ],
                &[
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-out",
                    &crt,
                    "-extfile",
                    &ext_file,
                ],
            ])?;
        }
        Ok(())
    }

    fn openssl(&self, args: &[&[&str]]) -> Result<(), String> {
        let args: Vec<&str> = args.concat();
        let out = Command::new("openssl")
            .args(&args)
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("run openssl (is it installed?): {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "openssl {}: {}\n{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// The directory holding `ca.crt`, `server.crt`/`.key` and `client.crt`/`.key`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of one of the files (`"ca.crt"`, `"server.key"`, ...).
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn read(&self, name: &str) -> Vec<u8> {
        // The files were written by `generate`; a missing one is a broken test machine.
        fs::read(self.path(name)).unwrap_or_else(|e| panic!("read {name}: {e}"))
    }

    /// The CA certificate (PEM): the root a client must trust.
    pub fn ca_pem(&self) -> Vec<u8> {
        self.read("ca.crt")
    }

    /// The client certificate (PEM).
    pub fn client_cert_pem(&self) -> Vec<u8> {
        self.read("client.crt")
    }

    /// The client private key (PEM, PKCS#8).
    pub fn client_key_pem(&self) -> Vec<u8> {
        self.read("client.key")
    }

    /// The `redis.conf` lines of a TLS server using these files (the harness adds
    /// `tls-port`). `auth_clients` is `tls-auth-clients`: `"no"`, `"optional"` or `"yes"`.
    pub(crate) fn server_config(&self, auth_clients: &str) -> Vec<String> {
        vec![
            format!("tls-cert-file \"{}\"", self.path("server.crt").display()),
            format!("tls-key-file \"{}\"", self.path("server.key").display()),
            format!("tls-ca-cert-file \"{}\"", self.path("ca.crt").display()),
            format!("tls-auth-clients {auth_clients}"),
        ]
    }
}

impl Drop for TlsFiles {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

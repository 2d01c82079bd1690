//! Lua scripts: each `lua/*.lua` file is embedded at build time and hashed once.
//!
//! Calls go out as `EVALSHA`; a `NOSCRIPT` reply (after a failover, restart or `SCRIPT FLUSH`)
//! makes the session resend the call as `EVAL` with the source on the node that said it, which
//! also loads the script there.

use bytes::Bytes;
use std::sync::OnceLock;

/// A Lua script of the `lua/` folder.
#[derive(Debug)]
pub struct Script {
    name: &'static str,
    source: &'static str,
    sha1: OnceLock<Bytes>,
}

impl Script {
    /// Declares a script; every script of the core is declared in the manifest, `scripts.rs`.
    pub const fn new(name: &'static str, source: &'static str) -> Self {
        Script {
            name,
            source,
            sha1: OnceLock::new(),
        }
    }

    /// The file stem, e.g. `save_message`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The Lua source.
    pub fn source(&self) -> &'static str {
        self.source
    }

    /// The SHA1 of the source in lowercase hex, as `EVALSHA` wants it; computed once.
    pub fn sha1(&self) -> &Bytes {
        self.sha1
            .get_or_init(|| Bytes::from(sha1_smol::Sha1::from(self.source).digest().to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_is_lowercase_hex_of_the_source() {
        let script = Script::new("t", "return 1");
        assert_eq!(
            script.sha1().as_ref(),
            b"e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
    }
}

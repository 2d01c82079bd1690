//! The `cluster:v1` primitives: segment encoding, hash tags, slots and buckets, and [`Key`].
//!
//! These four functions are part of the layout contract (`docs/key-layout.md`): changing any of
//! them moves existing data out of reach, so each one is pinned by test vectors. They depend on
//! nothing else of the crate: the layouts (`layout.rs`) build on them, never the reverse.

use bytes::Bytes;
use percent_encoding::{percent_encode, AsciiSet, NON_ALPHANUMERIC};
use std::fmt;

/// Number of hash slots of a Redis Cluster.
pub const SLOT_COUNT: u16 = 16384;

/// Number of buckets per record kind in the `cluster:v1` layout.
pub const BUCKET_COUNT: u8 = 32;

/// Bytes that survive [`enc`] unchanged: the RFC 3986 unreserved set.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Encodes one variable key segment (`enc` of the layout contract).
///
/// Every byte of the UTF-8 form outside `A-Z a-z 0-9 - . _ ~` becomes `%XX` (uppercase hex), so
/// no `:`, `{`, `}`, `%` or glob character survives and the encoding is injective: an id can never
/// end a hash tag early or alias another key.
pub fn enc(segment: &str) -> String {
    enc_bytes(segment.as_bytes()).to_string()
}

/// Appends [`enc`] of `segment` to `text`, without a `String` of its own. The segment need not
/// be UTF-8: every byte outside the unreserved set is written as `%XX`, so the text stays ASCII.
pub(crate) fn push_enc(text: &mut String, segment: &[u8]) {
    text.extend(percent_encode(segment, SEGMENT));
}

/// [`enc`] as a `Display`, of raw bytes, which need not be UTF-8 (message ids read back from a
/// log another program wrote): the same byte-by-byte rule, so it is [`enc`] for UTF-8 input.
/// For writing a segment straight into a text being formatted (a user index's member); keys
/// push theirs with [`push_enc`].
pub(crate) fn enc_bytes(segment: &[u8]) -> impl fmt::Display + '_ {
    percent_encode(segment, SEGMENT)
}

/// The hash tag of `key`: the bytes between the first `{` and the first `}` after it, when that
/// span is non-empty. Redis hashes only the tag when there is one.
pub fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// The hash slot of `key`: CRC16/XMODEM of its hash tag (or of the whole key), modulo 16384.
pub fn slot(key: &[u8]) -> u16 {
    let hashed = hash_tag(key).unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(hashed) % SLOT_COUNT
}

/// The bucket of a record id: 32-bit FNV-1a of its raw UTF-8 bytes, modulo 32.
///
/// The `fnv` crate computes the 64-bit variant. Reducing modulo 32 keeps only the low five bits,
/// and those agree between the 32- and 64-bit variants: the offset bases (`…c5`, `…25`) and the
/// primes (`…93`, `…b3`) share their low five bits, and the low bits of a product or an xor depend
/// only on the low bits of the operands. A property test checks this against a 32-bit reference.
pub fn bucket(id: &str) -> u8 {
    use std::hash::Hasher;
    let mut hasher = fnv::FnvHasher::default();
    hasher.write(id.as_bytes());
    // The remainder is below 32, so the narrowing cannot truncate.
    (hasher.finish() % u64::from(BUCKET_COUNT)) as u8
}

/// A complete Redis key, as bytes. Its slot is computed when asked ([`Key::slot`]): a
/// single-key request on a single node never asks, and its caller pays no CRC.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    bytes: Bytes,
}

impl Key {
    /// Wraps raw key bytes.
    pub fn new(bytes: impl Into<Bytes>) -> Self {
        Key {
            bytes: bytes.into(),
        }
    }

    /// The key's bytes, as sent to Redis.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The key's bytes as a cheap clone.
    pub fn to_bytes(&self) -> Bytes {
        self.bytes.clone()
    }

    /// The key's hash slot, computed on each call (a CRC of the key or its hash tag): a
    /// caller that needs it more than once keeps it.
    pub fn slot(&self) -> u16 {
        slot(&self.bytes)
    }
}

/// A clone: what [`CommandBuilder::key`](crate::driver::request::CommandBuilder::key) holds when given a
/// reference.
impl From<&Key> for Key {
    fn from(key: &Key) -> Key {
        key.clone()
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(&self.bytes))
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({self})")
    }
}

/// Escapes the glob characters of `raw` so that a `SCAN MATCH` pattern matches it literally.
pub fn glob_escape(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_vectors_from_the_cluster_spec() {
        assert_eq!(slot(b"123456789"), 12739);
        assert_eq!(slot(b"{user1000}.following"), 3443);
        assert_eq!(slot(b"{user1000}.followers"), 3443);
        assert_eq!(slot(b"foo{}{bar}"), slot(b"foo{}{bar}".as_slice()));
        assert_eq!(slot(b"foo{}{bar}"), 8363);
        assert_eq!(slot(b"foo{{bar}}zap"), 4015);
        assert_eq!(slot(b"foo{{bar}}zap"), slot(b"{bar"));
        assert_eq!(slot(b"foo{bar}{zap}"), 5061);
        assert_eq!(slot(b"foo{bar}{zap}"), slot(b"bar"));
    }

    #[test]
    fn hash_tag_rules() {
        assert_eq!(hash_tag(b"a{b}c"), Some(&b"b"[..]));
        assert_eq!(hash_tag(b"a{}c"), None);
        assert_eq!(hash_tag(b"a{bc"), None);
        assert_eq!(hash_tag(b"a}b{c}"), Some(&b"c"[..]));
        assert_eq!(hash_tag(b""), None);
    }

    #[test]
    fn bucket_vectors() {
        assert_eq!(bucket(""), 5);
        assert_eq!(bucket("a"), 12);
        assert_eq!(bucket("chat-1"), 25);
        assert_eq!(bucket("5511999999999@s.whatsapp.net"), 14);
    }

    #[test]
    fn enc_vectors() {
        assert_eq!(enc("chat-1"), "chat-1");
        assert_eq!(enc("a:b"), "a%3Ab");
        assert_eq!(enc("{x}"), "%7Bx%7D");
        assert_eq!(enc("50%"), "50%25");
        assert_eq!(enc("*?[]\\"), "%2A%3F%5B%5D%5C");
        assert_eq!(enc("a b~_."), "a%20b~_.");
        assert_eq!(enc("😀"), "%F0%9F%98%80");
        assert_eq!(enc(""), "");
    }

    #[test]
    fn glob_escape_escapes_only_glob_bytes() {
        assert_eq!(glob_escape("a*b?[c]\\d:e"), "a\\*b\\?\\[c\\]\\\\d:e");
    }
}

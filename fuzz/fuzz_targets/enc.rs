//! Fuzzes the `cluster:v1` key primitives: `enc`, `hash_tag`, `slot` and `bucket`.
//!
//! The input bytes are split at the first 0xFF byte (never part of valid UTF-8) into two
//! strings, decoded lossily. For both, `enc` must emit only `A-Za-z0-9-._~%` with every `%`
//! followed by two uppercase hex digits, must round-trip through percent-decoding, and
//! `enc(a) == enc(b)` must hold exactly when `a == b`. `slot`, `hash_tag` and `bucket` must not
//! panic on the raw strings, on their encodings, or on a tagged key built from them, and the
//! tagged key must hash to the slot of its tag.
#![no_main]

use botmesh_redis_core::keys::{bucket, enc, hash_tag, slot, BUCKET_COUNT, SLOT_COUNT};
use libfuzzer_sys::fuzz_target;

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Checks the alphabet and decodes; panics (a fuzz finding) on any violation.
fn check_and_decode(encoded: &str) -> Vec<u8> {
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hi = bytes.get(i + 1).and_then(|&h| hex(h));
            let lo = bytes.get(i + 2).and_then(|&l| hex(l));
            match (hi, lo) {
                (Some(hi), Some(lo)) => out.push(hi << 4 | lo),
                _ => panic!("% not followed by two uppercase hex digits in {encoded:?}"),
            }
            i += 3;
        } else {
            assert!(
                b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~'),
                "forbidden byte {b:#04x} in {encoded:?}"
            );
            out.push(b);
            i += 1;
        }
    }
    out
}

fn check_hashing(raw: &str, encoded: &str) {
    assert!(bucket(raw) < BUCKET_COUNT);
    for key in [raw.as_bytes(), encoded.as_bytes()] {
        assert!(slot(key) < SLOT_COUNT);
        let _ = hash_tag(key);
    }
    let tagged = format!("bot:{{m:{encoded}}}:z");
    let tag = format!("m:{encoded}");
    assert_eq!(hash_tag(tagged.as_bytes()), Some(tag.as_bytes()));
    assert_eq!(slot(tagged.as_bytes()), slot(tag.as_bytes()));
}

fuzz_target!(|data: &[u8]| {
    let (left, right) = match data.iter().position(|&b| b == 0xFF) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let a = String::from_utf8_lossy(left);
    let b = String::from_utf8_lossy(right);
    let (ea, eb) = (enc(&a), enc(&b));
    assert_eq!(check_and_decode(&ea), a.as_bytes());
    assert_eq!(check_and_decode(&eb), b.as_bytes());
    assert_eq!(ea == eb, a == b, "enc not injective on {a:?} / {b:?}");
    check_hashing(&a, &ea);
    check_hashing(&b, &eb);
});

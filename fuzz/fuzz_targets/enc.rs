//! Fuzzes the `cluster:v1` key primitives: `enc`, `hash_tag`, `slot` and `bucket`.
//!
//! The input bytes are split at the first 0xFF byte (never part of valid UTF-8) into two
//! strings, decoded lossily. For both, `enc` must emit only `A-Za-z0-9-._~%` with every `%`
//! followed by two uppercase hex digits, must round-trip through percent-decoding, and
//! `enc(a) == enc(b)` must hold exactly when `a == b`. `slot`, `hash_tag` and `bucket` must not
//! panic on the raw strings, on their encodings, or on a tagged key built from them, and the
//! tagged key must hash to the slot of its tag.
//!
//! The body is `botmesh_redis_core::testing::fuzz::enc`, shared with the replay of the
//! committed corpus in `core/tests/fuzz_corpora.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| botmesh_redis_core::testing::fuzz::enc(data));

//! Fuzzes redirect and endpoint parsing: `MOVED`/`ASK` texts, `host:port` endpoints and
//! `redis://` URLs. Nothing panics; whatever is accepted is usable (a slot below 16384, a
//! non-empty host, a non-zero port).
//!
//! The body is `botmesh_redis_core::testing::fuzz::redirect`, shared with the replay of the
//! committed corpus in `core/tests/fuzz_corpora.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| botmesh_redis_core::testing::fuzz::redirect(data));

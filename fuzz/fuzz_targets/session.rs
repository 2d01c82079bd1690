//! Fuzzes the session with arbitrary driver inputs: submits, connects, failed connects,
//! closes, raw bytes, well-formed replies cut anywhere, and time passing, in a single-node or
//! cluster configuration, with normal or degenerate (zero, tiny) durations.
//!
//! The inputs and the checks are `testing::chaos` (shared with the property tests): the
//! session never panics, never busy-loops, completes each plan at most once, keeps
//! `in_flight` equal to what is pending, and completes every plan on `close()`.
//!
//! The body is `botmesh_redis_core::testing::fuzz::session`, shared with the replay of the
//! committed corpus in `core/tests/fuzz_corpora.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| botmesh_redis_core::testing::fuzz::session(data));

//! Fuzzes the session against the simulated cluster (the model) under arbitrary faults:
//! errors, dropped connections before or after a command ran, stalls, failovers, slot moves
//! and migrations, latency, refused or hanging connects.
//!
//! The faults and the checks are `testing::chaos` (shared with the property tests): every
//! write increments a fresh key, so the model's value tells how often it ran; the session's
//! report must be true, a read is never reported lost, and once the faults heal every master
//! is reachable again.
//!
//! The body is `botmesh_redis_core::testing::fuzz::session_model`, shared with the replay of the
//! committed corpus in `core/tests/fuzz_corpora.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| botmesh_redis_core::testing::fuzz::session_model(data));

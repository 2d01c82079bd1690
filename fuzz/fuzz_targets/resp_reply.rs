//! Fuzzes RESP decoding into the core's reply type, and a session reading arbitrary bytes.
//!
//! The input is decoded frame by frame as the session does (`decode_bytes_mut`), each frame is
//! turned into a [`Value`] and read with every typed accessor; none may panic. Then the same
//! bytes, cut at an arbitrary point, are the replies a single-node session receives to a
//! handshake and three pipelined requests: the session must not panic, must not busy-loop, and
//! must complete every plan once it is closed.
//!
//! The body is `botmesh_redis_core::testing::fuzz::resp_reply`, shared with the replay of the
//! committed corpus in `core/tests/fuzz_corpora.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| botmesh_redis_core::testing::fuzz::resp_reply(data));

//! Fuzzes the session with arbitrary driver inputs: submits, connects, failed connects,
//! closes, raw bytes, well-formed replies cut anywhere, and time passing, in a single-node or
//! cluster configuration, with normal or degenerate (zero, tiny) durations.
//!
//! The inputs and the checks are `testing::chaos` (shared with the property tests): the
//! session never panics, never busy-loops, completes each plan at most once, keeps
//! `in_flight` equal to what is pending, and completes every plan on `close()`.
#![no_main]

use botmesh_redis_core::testing::chaos::{config, Driver, Input};
use botmesh_redis_core::testing::start;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Case {
    cluster: bool,
    short: bool,
    inputs: Vec<Input>,
}

fuzz_target!(|case: Case| {
    let mut d = Driver::new(config(case.cluster, case.short), start());
    for input in case.inputs.iter().take(80) {
        d.apply(input);
    }
    d.close_and_check();
});

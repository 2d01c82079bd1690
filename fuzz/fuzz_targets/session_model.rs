//! Fuzzes the session against the simulated cluster (the model) under arbitrary faults:
//! errors, dropped connections before or after a command ran, stalls, failovers, slot moves
//! and migrations, latency, refused or hanging connects.
//!
//! The faults and the checks are `testing::chaos` (shared with the property tests): every
//! write increments a fresh key, so the model's value tells how often it ran; the session's
//! report must be true, a read is never reported lost, and once the faults heal every master
//! is reachable again.
#![no_main]

use std::time::Duration;

use botmesh_redis_core::session::Config;
use botmesh_redis_core::testing::chaos::{inject, Fault, Model};
use botmesh_redis_core::testing::{start, Harness, SimCluster};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Case {
    seed: u64,
    steps: Vec<(u16, Fault, u8)>,
}

fuzz_target!(|case: Case| {
    if case.steps.is_empty() {
        return;
    }
    let sim = SimCluster::cluster(3, 2);
    let mut config = Config::cluster(sim.masters());
    config.seed = case.seed;
    let mut h = Harness::new(start(), sim, config);
    let mut model = Model::default();
    for (pause, fault, n) in case.steps.iter().take(10) {
        inject(&mut h, fault);
        model.submit(&mut h, *n);
        h.run_for(Duration::from_millis(u64::from(pause % 400)));
    }
    model.check(&mut h);
});

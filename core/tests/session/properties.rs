//! Properties of the session under arbitrary inputs (the inputs, faults and checks are
//! `testing::chaos`, shared with the fuzz targets; this file draws them with proptest).
//!
//! - Fed any sequence of inputs (submits, connects, reads of random or plausible bytes,
//!   closes, timeouts at random times), the session never panics, never busy-loops (after
//!   `handle_timeout(t)` the next deadline is later than `t`), completes each plan at most
//!   once, and `close()` completes every plan.
//! - Against the simulated cluster under random faults, a write never runs twice, every
//!   outcome the session reports is true (known-not-run means not run), every plan ends, and
//!   the session recovers once the faults heal.

use std::time::Duration;

use botmesh_redis_core::driver::session::Config;
use botmesh_redis_core::keys::SLOT_COUNT;
use botmesh_redis_core::testing::chaos::{
    config, inject, BareSession, Fault, Frame, Input, Model, Req, CODES,
};
use botmesh_redis_core::testing::sim::{Harness, SimCluster};
use botmesh_redis_core::testing::start;
use proptest::prelude::*;

fn req() -> impl Strategy<Value = Req> {
    prop_oneof![
        any::<u8>().prop_map(Req::Get),
        any::<u8>().prop_map(Req::Set),
        any::<u8>().prop_map(Req::Incr),
        any::<u8>().prop_map(Req::Mget),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![
        Just(Frame::Ok),
        any::<i64>().prop_map(Frame::Int),
        Just(Frame::Nil),
        proptest::collection::vec(any::<u8>(), 0..8).prop_map(Frame::Bulk),
        (0..SLOT_COUNT + 2, any::<u8>()).prop_map(|(s, p)| Frame::Moved(s, p)),
        (0..SLOT_COUNT, any::<u8>()).prop_map(|(s, p)| Frame::Ask(s, p)),
        (0..CODES.len() as u8).prop_map(Frame::Code),
        proptest::collection::vec((0..SLOT_COUNT, 0..SLOT_COUNT, any::<u8>()), 0..4)
            .prop_map(Frame::Slots),
        Just(Frame::FullSlots),
    ]
}

fn input() -> impl Strategy<Value = Input> {
    prop_oneof![
        3 => proptest::collection::vec(req(), 0..4).prop_map(Input::Submit),
        3 => any::<u8>().prop_map(Input::Connected),
        1 => any::<u8>().prop_map(Input::ConnectFailed),
        1 => any::<u8>().prop_map(Input::Closed),
        1 => (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..24))
            .prop_map(|(c, b)| Input::Raw(c, b)),
        6 => (any::<u8>(), proptest::collection::vec(frame(), 1..4), any::<u16>())
            .prop_map(|(c, f, cut)| Input::Reply(c, f, cut)),
        2 => (0u16..300).prop_map(Input::Advance),
        1 => (0u16..2000).prop_map(Input::AdvanceLong),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_inputs_never_panic_nor_busy_loop(
        cluster in any::<bool>(),
        short in any::<bool>(),
        inputs in proptest::collection::vec(input(), 0..60),
    ) {
        let mut d = BareSession::new(config(cluster, short), start());
        for input in &inputs {
            d.apply(input);
        }
        d.close_and_check();
    }
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        (0u8..9, 0u8..7, 0u8..3).prop_map(|(n, e, t)| Fault::Error(n, e, t)),
        (0u8..9, any::<bool>()).prop_map(|(n, a)| Fault::Drop(n, a)),
        (0u8..9).prop_map(Fault::StallCommand),
        (0u8..9, 1u16..8000).prop_map(|(n, d)| Fault::StallNode(n, d)),
        (0u8..3, 0u8..4).prop_map(|(s, d)| Fault::Failover(s, d)),
        (any::<u8>(), 0u8..3).prop_map(|(k, s)| Fault::MoveSlot(k, s)),
        (any::<u8>(), 0u8..3, 1u16..500).prop_map(|(k, s, d)| Fault::Migrate(k, s, d)),
        (0u8..9, 0u8..50).prop_map(|(n, l)| Fault::Latency(n, l)),
        (0u8..9).prop_map(Fault::DropConnections),
        (0u8..9, any::<bool>(), 1u16..6000).prop_map(|(n, h, d)| Fault::Refuse(n, h, d)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn under_random_faults_writes_run_at_most_once_and_outcomes_are_true(
        steps in proptest::collection::vec(
            (0u64..400, fault(), 0u8..4, proptest::bool::weighted(0.3)),
            1..12,
        ),
        seed in any::<u64>(),
    ) {
        let sim = SimCluster::cluster(3, 2);
        let mut config = Config::cluster(sim.masters());
        config.seed = seed;
        let mut h = Harness::new(start(), sim, config);
        let mut model = Model::default();
        for (pause, fault, n, given_up) in &steps {
            inject(&mut h, fault);
            model.submit(&mut h, *n);
            if *given_up {
                model.abandon_last();
            }
            h.run_for(Duration::from_millis(*pause));
        }
        model.check(&mut h);
    }
}

//! Fuzzes the session against the simulated cluster (the model) under arbitrary faults:
//! errors, dropped connections before or after a command ran, stalls, failovers, slot moves
//! and migrations, latency, refused or hanging connects.
//!
//! Every write increments a fresh key, so the model's value tells how often it ran. The
//! session's report must be true: a success ran exactly once, an unknown outcome ran at most
//! once, any other error did not run; a read is never reported lost; and once the faults
//! heal, every master is reachable again.
#![no_main]

use std::time::{Duration, Instant};

use botmesh_redis_core::error::Error;
use botmesh_redis_core::keys::{slot, SLOT_COUNT};
use botmesh_redis_core::session::Config;
use botmesh_redis_core::testing::{get, incr, ConnectMode, Demotion, Harness, Rule, SimCluster};
use botmesh_redis_core::topology::NodeAddr;
use botmesh_redis_core::{Reply, Value};
use bytes::Bytes;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug, Clone)]
enum Fault {
    Error(u8, u8, u8),
    Drop(u8, bool),
    StallCommand(u8),
    StallNode(u8, u16),
    Failover(u8, u8),
    MoveSlot(u8, u8),
    Migrate(u8, u8, u16),
    Latency(u8, u8),
    DropConnections(u8),
    Refuse(u8, bool, u16),
}

#[derive(Arbitrary, Debug)]
struct Case {
    seed: u64,
    steps: Vec<(u16, Fault, u8)>,
}

fn nodes(sim: &SimCluster) -> Vec<NodeAddr> {
    let mut all = sim.masters();
    for s in 0..3 {
        all.extend(sim.replicas(s));
    }
    all.sort();
    all
}

fn key(i: u32) -> String {
    format!("w{i}")
}

fn inject(h: &mut Harness, fault: &Fault) {
    let all = nodes(&h.sim);
    let pick = |n: u8| all[usize::from(n) % all.len()].clone();
    let now = h.now();
    let elapsed = h.elapsed();
    let at = |d: u16| elapsed + Duration::from_millis(u64::from(d % 8000) + 1);
    match fault.clone() {
        Fault::Error(n, e, times) => {
            let s = slot(key(u32::from(n)).as_bytes());
            let other = pick(n.wrapping_add(1));
            let text = match e % 7 {
                0 => "TRYAGAIN x".to_owned(),
                1 => "CLUSTERDOWN x".to_owned(),
                2 => "LOADING x".to_owned(),
                3 => "READONLY x".to_owned(),
                4 => format!("MOVED {s} {other}"),
                5 => format!("ASK {s} {other}"),
                _ => "NOSCRIPT x".to_owned(),
            };
            h.sim
                .add_rule(Rule::error(text).on(&pick(n)).times(u32::from(times % 3) + 1));
        }
        Fault::Drop(n, applied) => h
            .sim
            .add_rule(Rule::drop_connection(applied).on(&pick(n)).times(1)),
        Fault::StallCommand(n) => h.sim.add_rule(Rule::stall().on(&pick(n)).times(1)),
        Fault::StallNode(n, d) => {
            let node = pick(n);
            h.sim.stall(&node);
            h.schedule(at(d), move |sim, now| sim.unstall(now, &node));
        }
        Fault::Failover(s, d) => {
            let demotion = [Demotion::Moved, Demotion::Down, Demotion::Stale, Demotion::ReadOnly]
                [usize::from(d % 4)];
            let master = h.sim.master(usize::from(s % 3));
            h.sim.failover(now, &master, demotion);
        }
        Fault::MoveSlot(k, s) => {
            let to = h.sim.master(usize::from(s % 3));
            h.sim.move_slot(slot(key(u32::from(k)).as_bytes()), &to);
        }
        Fault::Migrate(k, s, d) => {
            let to = h.sim.master(usize::from(s % 3));
            let name = key(u32::from(k));
            let moving = slot(name.as_bytes());
            h.sim.begin_migration(moving, &to);
            h.sim.migrate_key(name.as_bytes());
            h.schedule(at(d % 500), move |sim, _| sim.finish_migration(moving));
        }
        Fault::Latency(n, l) => h
            .sim
            .set_latency(&pick(n), Duration::from_millis(u64::from(l % 50))),
        Fault::DropConnections(n) => h.sim.drop_connections(now, &pick(n), "reset"),
        Fault::Refuse(n, hang, d) => {
            let node = pick(n);
            let mode = if hang { ConnectMode::Hang } else { ConnectMode::Refuse };
            h.sim.set_connect_mode(&node, mode);
            h.schedule(at(d), move |sim, _| sim.set_connect_mode(&node, ConnectMode::Accept));
        }
    }
}

fuzz_target!(|case: Case| {
    if case.steps.is_empty() {
        return;
    }
    let sim = SimCluster::cluster(3, 2);
    let mut config = Config::cluster(sim.masters());
    config.seed = case.seed;
    let mut h = Harness::new(Instant::now(), sim, config);
    let mut next_key = 0u32;
    let mut writes = Vec::new();
    let mut reads = Vec::new();
    for (pause, fault, n) in case.steps.iter().take(10) {
        inject(&mut h, fault);
        let n = u32::from(n % 4) + 1;
        let batch: Vec<_> = (0..n)
            .map(|_| {
                next_key += 1;
                incr(&key(next_key))
            })
            .collect();
        let names: Vec<_> = (next_key + 1 - n..=next_key).map(key).collect();
        writes.push((h.submit_batch(batch), names));
        reads.push(h.submit_batch(vec![get("w1"), get(&key(next_key))]));
        h.run_for(Duration::from_millis(u64::from(pause % 400)));
    }
    for (token, names) in writes {
        let replies = h.wait_for::<Vec<Reply>>(token).unwrap();
        for (reply, name) in replies.iter().zip(&names) {
            let stored = h.sim.value(name.as_bytes());
            match reply {
                Ok(v) => {
                    assert_eq!(v, &Value::Int(1), "{name}");
                    assert_eq!(stored, Some(Bytes::from_static(b"1")), "{name}");
                }
                Err(e) if e.outcome_unknown() => assert!(
                    stored.is_none() || stored == Some(Bytes::from_static(b"1")),
                    "{name} ran twice: {stored:?}"
                ),
                Err(e) => assert_eq!(stored, None, "{name} ran but reported {e:?}"),
            }
        }
    }
    for token in reads {
        for reply in h.wait_for::<Vec<Reply>>(token).unwrap() {
            assert!(
                !matches!(
                    reply,
                    Err(Error::ReplyLost { .. }) | Err(Error::Timeout { outcome_unknown: true })
                ),
                "a read reported lost: {reply:?}"
            );
        }
    }
    h.sim.clear_rules();
    for node in nodes(&h.sim) {
        h.sim.unstall(h.now(), &node);
        h.sim.set_latency(&node, Duration::ZERO);
        h.sim.set_connect_mode(&node, ConnectMode::Accept);
    }
    for s in 0..SLOT_COUNT {
        h.sim.finish_migration(s);
    }
    h.run_for(Duration::from_secs(10));
    for m in h.sim.masters() {
        let fresh = format!("{{{}}}:healed", h.sim.keys_on(&m, 1).remove(0));
        assert_eq!(h.run_one(incr(&fresh)), Ok(Value::Int(1)), "{}", h.trace());
    }
});

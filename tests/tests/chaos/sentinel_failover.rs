//! Redis Sentinel failovers under open-loop store and coordination load, on both drivers: the
//! client follows the master the sentinels name (`+switch-master`, `READONLY`, a lost
//! connection, `docs/reliability.md`).
//!
//! - `SENTINEL FAILOVER` (a master and one replica, asynchronous replication): the replica is
//!   promoted and the old master demoted. Calls in flight on the old master when the client
//!   switches end as outcome unknown, never as success; a write the old master acknowledged
//!   after the promotion and before the client heard `+switch-master` may be missing (the
//!   demoted master's data is replaced by the new master's), and only those; fences, terms
//!   and tickets go backwards only inside that window.
//! - `SENTINEL FAILOVER` with `WAIT 1` on grants: a grant the old master makes in that window
//!   is not acknowledged (its replica is gone), so no acknowledged grant is lost and no
//!   number goes backwards; saves, which do not wait, are lost as above.
//! - `kill -9` of the master (two replicas, `min-replicas-to-write 1`, `WAIT 1` on grants): a
//!   replica is promoted once the sentinels agree the master is down. No grant acknowledged
//!   through `WAIT` is lost (the promoted master's counters are at least every acknowledged
//!   number), no number goes backwards at all; a save the killed master acknowledged before
//!   it died may be missing (asynchronous replication), and only those.
//!
//! The sentinels may fail over again on their own (a loaded machine can starve a node past
//! `down-after-milliseconds`; CI once saw the promoted master replaced a second later). A
//! thread watches the master they name for the whole run; each switch it sees after the
//! test's own is judged as that one is: calls in flight on the replaced master may end
//! outcome unknown, saves it acknowledged in its term may be missing, grants acknowledged
//! through `WAIT` may not go backwards.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use botmesh_redis_core::{ClientOptions, TurnOptions};
use botmesh_redis_tests::chaos::{
    assert_no_failures, check_acknowledged_writes, check_monotonic, open_loop, started_store,
    turn_options, Clock, Fault, Grant, Kind, Op, Outcome, Recorder, Report, Scale, Workload,
};
use botmesh_redis_tests::conformance::{driver_name, Runtime};
use botmesh_redis_tests::{
    both_drivers, AdminConn, SentinelDeployment, SentinelOptions, SlotRange, SLOT_COUNT,
};

static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How the master goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failover {
    /// `SENTINEL FAILOVER`: promoted and demoted while both run.
    Forced,
    /// `SENTINEL FAILOVER` with `WAIT 1` on grants.
    ForcedWithWait,
    /// `kill -9`, promoted by the sentinels' agreement, with `min-replicas-to-write 1` and
    /// `WAIT 1` on grants.
    Killed,
}

/// The slack between the sentinels naming the new master (as the harness polls it) and the
/// client hearing `+switch-master` on its subscription under load.
const SWITCH_SLACK: Duration = Duration::from_millis(250);

/// `GET key` on `addr`, as a number (0 when missing).
fn counter(addr: SocketAddr, key: &[u8]) -> u64 {
    let value = AdminConn::connect(addr)
        .unwrap()
        .cmd(&[b"GET".as_slice(), key])
        .unwrap();
    value
        .as_str()
        .and_then(|v| v.parse().ok())
        .or(value.as_int().map(|v| v as u64))
        .unwrap_or(0)
}

/// One change of the master the sentinels name.
#[derive(Clone, Copy, Debug)]
struct Switch {
    old: SocketAddr,
    new: SocketAddr,
    /// When the watch first saw every live sentinel name `new`, on the test's clock.
    named: Duration,
}

/// The master the sentinels name, polled from a thread of its own for the whole run, so that
/// a failover the test did not make is seen and judged rather than taken for a fault of the
/// client.
struct MasterWatch {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Vec<Switch>>,
}

impl MasterWatch {
    /// How often the sentinels are asked: well inside [`SWITCH_SLACK`].
    const EVERY: Duration = Duration::from_millis(50);

    fn start(d: Arc<SentinelDeployment>, clock: Clock, first: SocketAddr) -> MasterWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut switches = Vec::new();
            let mut current = first;
            while !stopped.load(Ordering::Relaxed) {
                // Mid-switch the sentinels disagree: no master is named until they agree.
                if let Ok(named) = d.master_addr() {
                    if named != current {
                        switches.push(Switch {
                            old: current,
                            new: named,
                            named: clock.now(),
                        });
                        current = named;
                    }
                }
                std::thread::sleep(Self::EVERY);
            }
            switches
        });
        MasterWatch { stop, thread }
    }

    /// Every switch seen since the start, in order.
    fn finish(self) -> Vec<Switch> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the master watch panicked")
    }
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("a harness call panicked")
}

async fn sentinel_failover<R: Runtime>(failover: Failover) {
    let _turn = TURN.lock().await;
    let scale = Scale::from_env();
    let mut options = SentinelOptions::new().master_name("chaos");
    if failover == Failover::Killed {
        options = options.replicas(2).min_replicas_to_write();
    }
    let d = Arc::new(blocking(move || SentinelDeployment::start(options)).await);
    // The sentinels take a second to agree a killed master is down and a second or two to
    // promote a replica: 40 retries from 10 ms (about 17.6 s of backoff) ride that out.
    let request_timeout = Duration::from_secs(30);
    let client_options = ClientOptions::url(d.url()).cluster_retry(40, Duration::from_millis(10));
    let store = started_store::<R>(client_options, request_timeout, "sentinel").await;
    let clock = Clock::new();
    let recorder = Recorder::new(clock);
    let mut workload = Workload::new(store, recorder.clone(), 24, request_timeout)
        .with_turn_options(TurnOptions {
            wait_timeout: Duration::from_secs(20),
            ..turn_options()
        });
    if failover != Failover::Forced {
        workload.wait_replicas = Some((1, Duration::from_millis(200)));
        workload.mix = vec![
            Op::Lock,
            Op::Save,
            Op::Leader,
            Op::Save,
            Op::Lock,
            Op::Upsert,
            Op::Leader,
            Op::Heartbeat,
        ];
    }
    workload.prepare().await.unwrap();
    let ks = workload.store.keyspace().clone();
    let workload = Arc::new(workload);

    let w = Arc::clone(&workload);
    let load = open_loop(scale, move |n| w.request(n));
    tokio::time::sleep(scale.settle).await;

    let d2 = Arc::clone(&d);
    let old = blocking(move || d2.master_addr()).await.unwrap();
    let watch = MasterWatch::start(Arc::clone(&d), clock, old);
    // The fault begins when the command is sent; for the kill, its figures count from when
    // the killed master is reaped (`at`), its errors from when the kill began.
    let began = clock.now();
    let d2 = Arc::clone(&d);
    let (at, new) = match failover {
        Failover::Forced | Failover::ForcedWithWait => {
            let at = began;
            let new = blocking(move || d2.failover(Duration::from_secs(20))).await;
            (at, new.unwrap())
        }
        Failover::Killed => {
            blocking(move || d2.kill_master()).await.unwrap();
            let at = clock.now();
            let d2 = Arc::clone(&d);
            let new = blocking(move || d2.wait_master_change(old, Duration::from_secs(20))).await;
            (at, new.unwrap())
        }
    };
    let healed = clock.now();
    tokio::time::sleep(scale.settle * 2).await;
    let summary = load.stop().await;
    let outcomes = recorder.outcomes();
    // The switches after the test's own: the sentinels' doing, not the test's.
    let mut switches = blocking(move || watch.finish()).await;
    let planned = switches.iter().position(|s| s.new == new);
    let unasked: Vec<Switch> = match planned {
        Some(i) => switches.split_off(i + 1),
        None => Vec::new(),
    };
    for s in &unasked {
        eprintln!(
            "the sentinels failed over on their own: {} replaced by {} (named at {:.3} s); \
             judged as the test's own switch",
            s.old,
            s.new,
            s.named.as_secs_f64()
        );
    }
    let last = unasked.last().map_or(new, |s| s.new);
    // Around a switch the test did not make: from the end of the test's own (the replaced
    // master's term began there) to the switch heard by the client.
    let unasked_window = |t: Duration| -> Option<&Switch> {
        unasked
            .iter()
            .find(|s| t >= healed && t <= s.named + SWITCH_SLACK)
    };

    // One master holds every key now.
    let ranges = vec![SlotRange {
        start: 0,
        end: SLOT_COUNT - 1,
        master: last,
        master_id: String::new(),
        replicas: Vec::new(),
    }];
    let losses = tokio::task::block_in_place(|| {
        check_acknowledged_writes(&ks, &ranges, &outcomes, |o| {
            match failover {
                Failover::Forced | Failover::ForcedWithWait => {
                    (o.ended >= at && o.ended <= healed + SWITCH_SLACK).then(|| {
                        format!(
                            "acknowledged {} ms after SENTINEL FAILOVER, before the switch",
                            (o.ended - at).as_millis()
                        )
                    })
                }
                Failover::Killed => (o.ended <= at).then(|| {
                    format!(
                        "acknowledged by the killed master {} ms before the kill",
                        (at - o.ended).as_millis()
                    )
                }),
            }
            .or_else(|| {
                unasked_window(o.ended).map(|s| {
                    format!(
                        "acknowledged in {}'s term, before the sentinels replaced it by {}",
                        s.old, s.new
                    )
                })
            })
        })
    })
    .unwrap();
    let mut faults = vec![Fault {
        what: match failover {
            Failover::Forced | Failover::ForcedWithWait => {
                format!("SENTINEL FAILOVER: {old} demoted, {new} promoted")
            }
            Failover::Killed => format!("kill -9 {old}, {new} promoted"),
        },
        at,
        healed: Some(healed),
        slots: Default::default(),
    }];
    faults.extend(unasked.iter().map(|s| Fault {
        what: format!(
            "the sentinels' own failover: {} replaced by {}",
            s.old, s.new
        ),
        at: s.named,
        healed: Some(s.named),
        slots: Default::default(),
    }));
    let title = format!(
        "Sentinel, {}, {}",
        match failover {
            Failover::Forced => "SENTINEL FAILOVER, asynchronous replication",
            Failover::ForcedWithWait => "SENTINEL FAILOVER, WAIT 1 on grants",
            Failover::Killed =>
                "killed master, min-replicas-to-write 1 and WAIT 1 on grants, two replicas",
        },
        driver_name::<R>()
    );
    let every = |_: &Outcome| true;
    let report = Report {
        title,
        scale,
        load: summary,
        outcomes: &outcomes,
        faults: &faults,
        affected: &every,
        losses: &losses,
    };
    report.print();
    let recovered = report.recoveries()[0];
    eprintln!(
        "recovery: {recovered:?} after the fault; the sentinels named {new} after {:?}",
        healed - at
    );

    let mut failures: Vec<String> = Vec::new();
    let during = |o: &Outcome| {
        (o.ended >= began && o.sent <= healed + SWITCH_SLACK)
            || (o.ended >= healed && unasked_window(o.sent).is_some())
    };
    // The master a call was in flight on when the sentinels replaced it.
    let replaced = |o: &Outcome| {
        o.detail.starts_with(&old.to_string())
            || unasked
                .iter()
                .any(|s| o.detail.starts_with(&s.old.to_string()))
    };
    for o in &outcomes {
        let fine = match (o.kind, failover) {
            (Kind::Ok, _) => true,
            // In flight on the old master when it went or the client switched.
            (Kind::ReplyLost, _) => o.write && during(o) && replaced(o),
            (Kind::TimeoutUnknown, _) => o.write && during(o),
            // A turn whose wait spanned the failover.
            (Kind::TimeoutNotRun, _) => o.op == "turn" && during(o),
            // A lock, turn or leadership the failover lost: its release finds it gone.
            (Kind::NotHolder, _) => o.sent >= began,
            // The promoted master had no replica yet: it refused writes before running them.
            (Kind::Server, Failover::Killed) => o.detail == "NOREPLICAS" && o.ended >= began,
            // WAIT could not reach a replica of a grant made around the failover: given back.
            (Kind::NotReplicated, Failover::Killed | Failover::ForcedWithWait) => o.ended >= began,
            (Kind::ReplicationUnknown, Failover::Killed | Failover::ForcedWithWait) => during(o),
            _ => false,
        };
        if !fine {
            failures.push(format!("unexpected outcome: {o:?}"));
        }
    }
    for l in &losses.unexplained {
        failures.push(format!("lost outside the window: {l}"));
    }

    let mut grants = Grant::of(&outcomes, "lock");
    grants.extend(Grant::of(&outcomes, "campaign"));
    grants.extend(Grant::of(&outcomes, "turn"));
    let (allowed, bad) = check_monotonic(&grants, |earlier, _later| {
        failover == Failover::Forced
            && ((earlier.granted >= at && earlier.granted <= healed + SWITCH_SLACK)
                || unasked_window(earlier.granted).is_some())
    });
    eprintln!(
        "history: {} grants checked, {} went backwards inside the switch window, {} outside",
        grants.len(),
        allowed.len(),
        bad.len()
    );
    failures.extend(bad.into_iter().map(|b| format!("went backwards: {b}")));

    if failover != Failover::Forced {
        // Every grant acknowledged through WAIT survived the failover: the promoted master's
        // counters are at least the largest number acknowledged for each name.
        let mut largest: BTreeMap<(&str, String), u64> = BTreeMap::new();
        let settled = unasked.last().map_or(healed, |s| s.named);
        for o in outcomes.iter().filter(|o| o.ok() && o.ended <= settled) {
            if let (Some(v), "lock" | "campaign") = (o.value, o.op) {
                let e = largest.entry((o.op, o.target.clone())).or_default();
                *e = (*e).max(v);
            }
        }
        assert!(!largest.is_empty(), "grants were made before the failover");
        for ((op, name), acked) in largest {
            let key = if op == "lock" {
                ks.lock_fence(&name)
            } else {
                ks.leader_term(&name)
            };
            let stored = tokio::task::block_in_place(|| counter(last, key.as_bytes()));
            if stored < acked {
                failures.push(format!(
                    "{op} {name}: {acked} was acknowledged through WAIT, the promoted master {last}'s counter is {stored}"
                ));
            }
        }
    }
    // The load ran through the failover and recovered on the new master.
    assert!(recovered.is_some(), "no call succeeded after the failover");
    assert!(
        outcomes
            .iter()
            .any(|o| o.ok() && o.write && o.sent > healed),
        "no write succeeded on the new master"
    );
    assert!(losses.checked > 0);
    assert_no_failures(&failures);
    workload.store.executor().close().await;
}

both_drivers!(sentinel_failover {
    sentinel_failover_under_load_loses_only_the_switch_window => Failover::Forced,
    sentinel_failover_with_wait_loses_no_grant => Failover::ForcedWithWait,
    sentinel_killed_master_with_min_replicas_and_wait_loses_no_grant => Failover::Killed,
});

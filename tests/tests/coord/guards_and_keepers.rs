//! Held things give themselves back, keepers keep them, and the store closes gracefully, on
//! real servers and both drivers.
//!
//! Every TTL here is far longer than the test waits for the next holder: a hold that was not
//! given back on drop would block the next one for the whole TTL, and the `eventually` bounds
//! (a few seconds) would fail.

use std::time::{Duration, Instant};

use botmesh_redis_core::{Access, Executor, Request, Value};
use botmesh_redis_core::{Coordinator, Error, Released, Store, StoreOptions};
use botmesh_redis_tests::both_drivers;
use botmesh_redis_tests::conformance::{Client, Runtime};
use botmesh_redis_tests::coord::{lock_when_free, Target};
use botmesh_redis_tests::{eventually, unique_prefix};

/// Longer than any wait below: a hold still there after a drop would outlast the test.
const LONG: Duration = Duration::from_secs(60);

async fn store<R: Runtime>(target: Target, name: &str) -> Store<Client<R>> {
    let options = StoreOptions::new(unique_prefix(name)).layout(target.layout());
    Store::open(target.client::<R>().await, options)
        .await
        .unwrap()
}

/// Takes the lock, then fails before giving it back, as a handler's `?` does.
async fn locked_then_failed<R: Runtime>(coord: &Coordinator<Client<R>>) -> Result<u64, Error> {
    let lock = coord.hold_lock("invoice-7", "a#1", LONG).await?.unwrap();
    let fence = lock.fence();
    Err::<(), _>(Error::NotSent {
        reason: format!("the handler failed holding fence {fence}"),
    })?;
    Ok(fence)
}

async fn a_lock_dropped_on_an_early_return_is_given_back<R: Runtime>(target: Target) {
    let store = store::<R>(target, "guard-lock").await;
    let coord = store.coordinator("a").unwrap();
    assert!(matches!(
        locked_then_failed(&coord).await,
        Err(Error::NotSent { .. })
    ));
    let other = store.coordinator("b").unwrap();
    let fence = lock_when_free(
        &other,
        "invoice-7",
        "b#1",
        LONG,
        "the dropped lock to be free",
    )
    .await;
    assert_eq!(fence, 2);
    store.close().await;
}

async fn a_turn_dropped_by_a_panic_serves_the_next_waiter<R: Runtime>(target: Target) {
    let store = store::<R>(target, "guard-turn").await;
    let a = store.coordinator("a").unwrap();
    let b = store.coordinator("b").unwrap();
    a.keep_alive(LONG).await.unwrap();
    b.keep_alive(LONG).await.unwrap();
    let first = a.turn("chat-1").await.unwrap().fence();
    let holder = a.clone();
    let panicked = tokio::spawn(async move {
        let turn = holder.turn("chat-1").await.unwrap();
        assert_eq!(turn.fence(), first + 1);
        panic!("the handler panicked holding turn {}", turn.fence());
    })
    .await;
    assert!(panicked.unwrap_err().is_panic());
    // Both earlier turns were dropped (the first at once, the second by the panic): the next
    // waiter is served without waiting out a turn TTL.
    let started = Instant::now();
    let turn = b.turn("chat-1").await.unwrap();
    assert_eq!(turn.fence(), first + 2);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(turn.release().await.unwrap(), Released::Held);
    store.close().await;
}

async fn every_release_says_whether_it_was_still_held<R: Runtime>(target: Target) {
    let store = store::<R>(target, "guard-release").await;
    let coord = store.coordinator("r").unwrap();
    coord.keep_alive(LONG).await.unwrap();
    let lock = coord.hold_lock("k", "r#1", LONG).await.unwrap().unwrap();
    assert_eq!(lock.release().await.unwrap(), Released::Held);
    let lead = coord.lead("scheduler", LONG).await.unwrap().unwrap();
    assert_eq!(lead.term(), 1);
    assert_eq!(lead.release().await.unwrap(), Released::Held);
    let turn = coord.turn("chat").await.unwrap();
    assert_eq!(turn.release().await.unwrap(), Released::Held);
    let leases = store.leases().unwrap();
    let lease = leases.hold("tick", "h1", LONG).await.unwrap().unwrap();
    assert_eq!(lease.release().await.unwrap(), Released::Held);

    // Held things whose TTL ran out: the release finds them gone, and says so.
    let short = Duration::from_millis(50);
    let lock = coord.hold_lock("k", "r#2", short).await.unwrap().unwrap();
    let lease = leases.hold("tick", "h2", short).await.unwrap().unwrap();
    lock_when_free(&coord, "k", "probe", LONG, "the short holds to expire").await;
    assert!(matches!(lock.renew().await, Err(Error::NotHolder { .. })));
    assert_eq!(lock.release().await.unwrap(), Released::Lost);
    assert_eq!(lease.release().await.unwrap(), Released::Lost);
    assert_eq!(coord.unlock("k", "probe").await.unwrap(), Released::Held);
    store.close().await;
}

/// A store whose client has one lane: a guard's release, detached as it drops, goes out before
/// the calls the task makes after the drop, so that a release that should not be sent would be
/// seen by the next call.
async fn one_lane_store<R: Runtime>(target: Target, name: &str) -> Store<Client<R>> {
    let client = Client::<R>::connect(target.options().lanes(1))
        .await
        .unwrap();
    let options = StoreOptions::new(unique_prefix(name)).layout(target.layout());
    Store::open(client, options).await.unwrap()
}

/// A leader that campaigns again (as a loop keeping its leadership does:
/// `self.leader = coord.lead(..)`) gets a second guard of the same term; a lease taken again by
/// its holder a second guard of the same token. The first one dropped leaves the hold to the
/// second (it resigned it before). A guard of a term the replica lost and then won again renews
/// and resigns nothing of the later term (it renewed it, and resigned it when dropped, before).
async fn guards_of_one_hold_and_of_an_earlier_term<R: Runtime>(target: Target) {
    let store = one_lane_store::<R>(target, "guard-shared").await;
    let coord = store.coordinator("r").unwrap();
    let other = store.coordinator("o").unwrap();

    let first = coord.lead("scheduler", LONG).await.unwrap().unwrap();
    let second = coord.lead("scheduler", LONG).await.unwrap().unwrap();
    assert_eq!(second.term(), first.term());
    drop(first);
    second.renew().await.unwrap();
    assert_eq!(other.campaign("scheduler", LONG).await.unwrap(), None);
    drop(second);
    eventually(Duration::from_secs(5), "the last guard's resign", || {
        let other = other.clone();
        async move { other.campaign("scheduler", LONG).await.unwrap() }
    })
    .await;

    let leases = store.leases().unwrap();
    let first = leases.hold("tick", "h", LONG).await.unwrap().unwrap();
    let second = leases.hold("tick", "h", LONG).await.unwrap().unwrap();
    assert_eq!(second.token(), first.token());
    drop(first);
    second.renew().await.unwrap();
    assert_eq!(second.release().await.unwrap(), Released::Held);
    // Two holds that read the same with their names joined by spaces (lease `a` of `b c` and
    // lease `a b` of `c`, both token 1) are two: the first dropped is given back (it counted
    // as the other's second guard before, and stayed held for its TTL).
    let spaced = leases.hold("a", "b c", LONG).await.unwrap().unwrap();
    let joined = leases.hold("a b", "c", LONG).await.unwrap().unwrap();
    assert_eq!((spaced.token(), joined.token()), (1, 1));
    drop(spaced);
    let next = leases.hold("a", "d", LONG).await.unwrap();
    assert_eq!(next.map(|lease| lease.token()), Some(2));
    assert_eq!(joined.release().await.unwrap(), Released::Held);

    // The term lost: its holder key expires.
    let old = coord
        .lead("jobs", Duration::from_millis(100))
        .await
        .unwrap()
        .unwrap();
    let holder = store.keyspace().leader("jobs");
    eventually(Duration::from_secs(5), "the short term to expire", || {
        let (exec, holder) = (store.executor().clone(), holder.clone());
        async move {
            let exists = Request::cmd(Access::Read, "EXISTS")
                .key(holder)
                .build()
                .unwrap();
            (exec.call(exists).await.unwrap() == Value::Int(0)).then_some(())
        }
    })
    .await;
    let new = coord.lead("jobs", LONG).await.unwrap().unwrap();
    assert_eq!(new.term(), old.term() + 1);
    assert!(matches!(old.renew().await, Err(Error::NotHolder { .. })));
    drop(old);
    new.renew().await.unwrap();
    assert_eq!(other.campaign("jobs", LONG).await.unwrap(), None);
    assert_eq!(new.release().await.unwrap(), Released::Held);
    store.close().await;
}

async fn a_kept_lock_outlives_its_ttl<R: Runtime>(target: Target) {
    let store = store::<R>(target, "guard-kept").await;
    let coord = store.coordinator("a").unwrap();
    let ttl = Duration::from_millis(300);
    let lock = coord
        .hold_lock("k", "a#1", ttl)
        .await
        .unwrap()
        .unwrap()
        .keep_renewed();
    let keeper = lock.keeper().unwrap();
    eventually(Duration::from_secs(10), "three renewals", || {
        let renewals = keeper.renewals();
        async move { (renewals >= 3).then_some(()) }
    })
    .await;
    // Three renewals a third of the TTL apart: without them the lock would have expired.
    assert!(keeper.is_held());
    assert_eq!(coord.lock("k", "b#1", ttl).await.unwrap(), None);
    assert_eq!(lock.release().await.unwrap(), Released::Held);
    assert_eq!(coord.lock("k", "b#1", LONG).await.unwrap(), Some(2));
    store.close().await;
}

async fn a_turn_without_a_heartbeat_is_refused<R: Runtime>(target: Target) {
    let store = store::<R>(target, "guard-heartbeat").await;
    let coord = store.coordinator("forgetful").unwrap();
    assert_eq!(
        coord.turn("chat").await.unwrap_err(),
        Error::NoHeartbeat {
            replica: "forgetful".into()
        }
    );
    assert_eq!(coord.heartbeat_kept(), None);
    coord.keep_alive(Duration::from_millis(500)).await.unwrap();
    assert_eq!(coord.heartbeat_kept(), Some(true));
    // Twice the TTL later the heartbeat is still there: the keeper rewrote it.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(coord.is_alive("forgetful").await.unwrap());
    let turn = coord.turn("chat").await.unwrap();
    assert_eq!(turn.release().await.unwrap(), Released::Held);
    store.close().await;
}

async fn close_stops_keepers_and_removes_heartbeats<R: Runtime>(target: Target) {
    let store = store::<R>(target, "guard-close").await;
    let coord = store.coordinator("leaving").unwrap();
    coord.keep_alive(LONG).await.unwrap();
    let observer = Store::new(
        target.client::<R>().await,
        StoreOptions::new(store.keyspace().prefix()).layout(target.layout()),
    )
    .unwrap();
    let watcher = observer.coordinator("watcher").unwrap();
    assert!(watcher.is_alive("leaving").await.unwrap());
    store.close().await;
    // The heartbeat is gone at once, not a TTL later: other replicas skip this one's turns.
    assert!(!watcher.is_alive("leaving").await.unwrap());
    assert_eq!(coord.heartbeat_kept(), Some(false));
    assert_eq!(
        coord.lock("k", "late", LONG).await.unwrap_err(),
        Error::Closed
    );
    observer.executor().close().await;
}

async fn close_lets_a_call_in_flight_finish<R: Runtime>(target: Target) {
    let store = store::<R>(target, "guard-grace").await;
    let client = store.executor().clone();
    // `WAIT` for more replicas than the node has: it blocks for its whole timeout.
    let slow = Request::cmd(Access::Write, "WAIT")
        .arg("16")
        .arg("300")
        .build()
        .unwrap();
    let call = tokio::spawn({
        let client = client.clone();
        async move { client.call(slow).await }
    });
    // The call is out once the server blocks on it: a second connection sees it.
    let watcher = target.client::<R>().await;
    eventually(Duration::from_secs(5), "WAIT to block", || {
        let watcher = watcher.clone();
        async move {
            let list = Request::cmd(Access::Read, "CLIENT")
                .arg("LIST")
                .build()
                .unwrap();
            let reply = watcher.call(list).await.unwrap();
            let text = match reply {
                Value::Bulk(b) | Value::Status(b) => String::from_utf8_lossy(&b).into_owned(),
                other => panic!("CLIENT LIST answered {other:?}"),
            };
            text.contains("cmd=wait").then_some(())
        }
    })
    .await;
    store.close().await;
    // Before graceful close, the call ended as ReplyLost: its outcome unknown.
    assert!(
        matches!(call.await.unwrap(), Ok(Value::Int(_))),
        "the call in flight was not let finish"
    );
    assert_eq!(
        client
            .call(Request::cmd(Access::Read, "PING").build().unwrap())
            .await,
        Err(Error::Closed)
    );
    watcher.close().await;
}

both_drivers!(a_lock_dropped_on_an_early_return_is_given_back {
    lock_dropped_single_node_legacy => Target::SingleLegacy,
    lock_dropped_cluster => Target::Cluster,
});

both_drivers!(a_turn_dropped_by_a_panic_serves_the_next_waiter {
    turn_dropped_single_node_legacy => Target::SingleLegacy,
    turn_dropped_cluster => Target::Cluster,
});

both_drivers!(every_release_says_whether_it_was_still_held {
    releases_single_node_legacy => Target::SingleLegacy,
    releases_cluster => Target::Cluster,
});

both_drivers!(guards_of_one_hold_and_of_an_earlier_term {
    shared_holds_single_node_legacy => Target::SingleLegacy,
    shared_holds_cluster => Target::Cluster,
});

both_drivers!(a_kept_lock_outlives_its_ttl {
    kept_lock_single_node_legacy => Target::SingleLegacy,
    kept_lock_cluster => Target::Cluster,
});

both_drivers!(a_turn_without_a_heartbeat_is_refused {
    no_heartbeat_single_node_legacy => Target::SingleLegacy,
    no_heartbeat_cluster => Target::Cluster,
});

both_drivers!(close_stops_keepers_and_removes_heartbeats {
    close_keepers_single_node_legacy => Target::SingleLegacy,
    close_keepers_cluster => Target::Cluster,
});

both_drivers!(close_lets_a_call_in_flight_finish {
    close_grace_single_node => Target::SingleLegacy,
});

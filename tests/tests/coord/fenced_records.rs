//! Schedules with fencing tokens and leases with tokens that never go backwards, against real
//! servers in every layout, on both drivers.

use std::time::Duration;

use bytes::Bytes;

use botmesh_redis_core::keys::RecordKind;
use botmesh_redis_core::Error;
use botmesh_redis_core::{Leases, Released, Schedules};
use botmesh_redis_core::{Limit, Schedule, ScheduleCursor};
use botmesh_redis_tests::both_drivers;
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::coord::{key_cmd, Target};
use botmesh_redis_tests::eventually;

/// The holder of a token: one per grant, as a lease or a leadership hands them out.
fn holder(token: u64) -> String {
    format!("holder-{token}")
}

fn stale(id: &str, token: u64, stored: u64) -> Error {
    Error::Stale {
        what: format!("schedule {id:?}"),
        token,
        stored,
    }
}

/// A stale writer (lower token) can neither overwrite a schedule nor resurrect a deleted one;
/// it learns the stored token. The owner of the current token can rewrite; a newer one can
/// bring a deleted schedule back.
async fn stale_schedule_writers_are_refused<R: Runtime>(target: Target) {
    let client = target.client::<R>().await;
    let schedules = Schedules::new(client.clone(), target.keyspace("coord-schedules")).unwrap();
    let id = "daily:{report} 😀";
    let data = |s: &'static str| Bytes::from_static(s.as_bytes());

    assert_eq!(schedules.get(id).await.unwrap(), None);
    schedules.put(id, 5, &holder(5), data("v5")).await.unwrap();
    assert_eq!(
        schedules
            .put(id, 4, &holder(4), data("v4"))
            .await
            .unwrap_err(),
        stale(id, 4, 5)
    );
    // The same token is the same writer: it may rewrite.
    schedules.put(id, 5, &holder(5), data("v5b")).await.unwrap();
    assert_eq!(
        schedules.get(id).await.unwrap(),
        Some(Schedule {
            token: 5,
            data: data("v5b"),
            holder: Some(holder(5)),
        })
    );
    // A stale delete is refused too.
    assert_eq!(
        schedules.delete(id, 3, &holder(3)).await.unwrap_err(),
        stale(id, 3, 5)
    );
    schedules.delete(id, 6, &holder(6)).await.unwrap();
    assert_eq!(schedules.get(id).await.unwrap(), None);
    // Writers older than the delete cannot resurrect it.
    assert_eq!(
        schedules
            .put(id, 5, &holder(5), data("zombie"))
            .await
            .unwrap_err(),
        stale(id, 5, 6)
    );
    assert_eq!(
        schedules
            .put(id, 1, &holder(1), data("zombie"))
            .await
            .unwrap_err(),
        stale(id, 1, 6)
    );
    assert_eq!(schedules.get(id).await.unwrap(), None);
    // A newer writer can.
    schedules.put(id, 7, &holder(7), data("v7")).await.unwrap();
    assert_eq!(
        schedules.get(id).await.unwrap(),
        Some(Schedule {
            token: 7,
            data: data("v7"),
            holder: Some(holder(7)),
        })
    );
    // Tokens read back exactly, up to 2^53.
    let big = 1_u64 << 53;
    schedules
        .put(id, big, &holder(big), data("big"))
        .await
        .unwrap();
    assert_eq!(schedules.get(id).await.unwrap().unwrap().token, big);
    assert_eq!(
        schedules
            .put(id, big - 1, &holder(big - 1), data("x"))
            .await
            .unwrap_err(),
        stale(id, big - 1, big)
    );
    // Listings hide deleted markers.
    for n in 0..40 {
        schedules
            .put(
                &format!("s:{n}"),
                1,
                &holder(1),
                Bytes::from(format!("d{n}")),
            )
            .await
            .unwrap();
    }
    for n in (0..40).step_by(3) {
        schedules
            .delete(&format!("s:{n}"), 2, &holder(2))
            .await
            .unwrap();
    }
    let listed = schedules.list(None, Limit::MAX).await.unwrap();
    let mut expected: Vec<(String, Schedule)> = (0..40)
        .filter(|n| n % 3 != 0)
        .map(|n| {
            (
                format!("s:{n}"),
                Schedule {
                    token: 1,
                    data: Bytes::from(format!("d{n}")),
                    holder: Some(holder(1)),
                },
            )
        })
        .chain([(
            id.to_owned(),
            Schedule {
                token: big,
                data: data("big"),
                holder: Some(holder(big)),
            },
        )])
        .collect();
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(listed.items, expected);
    assert_eq!(listed.next, None);
    // Pages of 5, each from the cursor of the one before, cover the listing exactly once.
    let mut paged = Vec::new();
    let mut after: Option<ScheduleCursor> = None;
    loop {
        let page = schedules
            .list(after.as_ref(), Limit::of::<5>())
            .await
            .unwrap();
        assert!(page.items.len() <= 5);
        paged.extend(page.items);
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(paged, expected);
    let first = schedules.list(None, Limit::of::<5>()).await.unwrap();
    assert_eq!(first.items, expected[..5].to_vec());
    assert_eq!(
        first.next,
        Some(ScheduleCursor::after(expected[4].0.as_str()))
    );
    // Schedules deleted between two pages are left out, and the pages after them still cover
    // the rest exactly once (the next page's first candidates are gone).
    for (id, _) in &expected[5..8] {
        schedules.delete(id, 3, &holder(3)).await.unwrap();
    }
    let mut rest = Vec::new();
    let mut after = first.next;
    while let Some(cursor) = after {
        let page = schedules
            .list(Some(&cursor), Limit::of::<5>())
            .await
            .unwrap();
        assert!(page.items.len() <= 5);
        rest.extend(page.items);
        after = page.next;
    }
    assert_eq!(rest, expected[8..].to_vec());
    client.close().await;
}

async fn stale_schedule_writers_are_refused_all_targets<R: Runtime>() {
    for target in [Target::SingleLegacy, Target::SingleCluster, Target::Cluster] {
        stale_schedule_writers_are_refused::<R>(target).await;
    }
}

/// A schedule record written before holders were stored (a hash without `holder`) stays
/// readable, with no holder; the next write by a holder stores one, and reads give it back.
async fn schedules_written_before_holders_read_without_one<R: Runtime>(target: Target) {
    let client = target.client::<R>().await;
    let ks = target.keyspace("coord-schedule-holder");
    let schedules = Schedules::new(client.clone(), ks.clone()).unwrap();
    let id = "old:{1}";
    let record = ks.record(RecordKind::Schedule, id);
    key_cmd(
        &client,
        "HSET",
        &record,
        &["token", "4", "data", "old", "deleted", "0"],
    )
    .await;
    let old = Schedule {
        token: 4,
        data: Bytes::from_static(b"old"),
        holder: None,
    };
    assert_eq!(schedules.get(id).await.unwrap(), Some(old));
    schedules
        .put(id, 4, "leader-a", Bytes::from_static(b"new"))
        .await
        .unwrap();
    let new = Schedule {
        token: 4,
        data: Bytes::from_static(b"new"),
        holder: Some("leader-a".into()),
    };
    assert_eq!(schedules.get(id).await.unwrap(), Some(new));
    client.close().await;
}

async fn schedules_written_before_holders_read_without_one_all_targets<R: Runtime>() {
    for target in [Target::SingleLegacy, Target::SingleCluster, Target::Cluster] {
        schedules_written_before_holders_read_without_one::<R>(target).await;
    }
}

/// Many writers race on one schedule with their own tokens: whatever the interleaving, the
/// stored token is the largest one written, and every refusal names a larger stored token.
async fn racing_schedule_writers_keep_the_largest_token<R: Runtime>(target: Target) {
    let client = target.client::<R>().await;
    let schedules = Schedules::new(client.clone(), target.keyspace("coord-schedule-race")).unwrap();
    let mut tasks = Vec::new();
    for token in 1..=200_u64 {
        let schedules = schedules.clone();
        tasks.push(tokio::spawn(async move {
            let result = if token % 10 == 0 {
                schedules.delete("s", token, &holder(token)).await
            } else {
                schedules
                    .put("s", token, &holder(token), Bytes::from(token.to_string()))
                    .await
            };
            match result {
                Ok(()) => None,
                Err(Error::Stale { stored, .. }) => {
                    assert!(stored > token, "refused {token} for stored {stored}");
                    Some(())
                }
                Err(e) => panic!("{e}"),
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // Token 200 was a delete: the schedule is deleted, and its marker keeps 200.
    assert_eq!(schedules.get("s").await.unwrap(), None);
    assert_eq!(
        schedules
            .put("s", 199, &holder(199), Bytes::new())
            .await
            .unwrap_err(),
        stale("s", 199, 200)
    );
    client.close().await;
}

async fn racing_schedule_writers_keep_the_largest_token_all_targets<R: Runtime>() {
    for target in [Target::SingleLegacy, Target::SingleCluster, Target::Cluster] {
        racing_schedule_writers_keep_the_largest_token::<R>(target).await;
    }
}

/// A lease has one holder at a time; its token never goes backwards, even after it expires or
/// is released; renew and release work only for the holder with its token.
async fn lease_tokens_never_go_backwards<R: Runtime>(target: Target) {
    let client = target.client::<R>().await;
    let leases = Leases::new(client.clone(), target.keyspace("coord-leases")).unwrap();
    let ttl = Duration::from_millis(150);
    let long = Duration::from_secs(10);

    let t1 = leases.acquire("tick", "a", ttl).await.unwrap().unwrap();
    assert_eq!(t1, 1);
    assert_eq!(leases.acquire("tick", "b", ttl).await.unwrap(), None);
    // The holder taking its live lease again keeps its token.
    assert_eq!(leases.acquire("tick", "a", ttl).await.unwrap(), Some(t1));
    leases.renew("tick", "a", t1, ttl).await.unwrap();
    // Not the holder, or not its token: refused.
    assert!(matches!(
        leases.renew("tick", "b", t1, ttl).await,
        Err(Error::NotHolder { .. })
    ));
    assert!(matches!(
        leases.renew("tick", "a", t1 + 1, ttl).await,
        Err(Error::NotHolder { .. })
    ));
    assert_eq!(
        leases.release("tick", "b", t1).await.unwrap(),
        Released::Lost
    );

    // After expiry, another holder gets a larger token.
    let t2 = eventually(Duration::from_secs(5), "a's lease to expire", || {
        let leases = leases.clone();
        async move { leases.acquire("tick", "b", long).await.unwrap() }
    })
    .await;
    assert_eq!(t2, t1 + 1);
    // The expired holder can neither renew nor release b's lease.
    assert_eq!(
        leases.renew("tick", "a", t1, ttl).await.unwrap_err(),
        Error::NotHolder {
            what: "lease \"tick\"".into()
        }
    );
    assert_eq!(
        leases.release("tick", "a", t1).await.unwrap(),
        Released::Lost
    );
    leases.renew("tick", "b", t2, long).await.unwrap();

    // Released: the next acquire, even by the same holder, gets a larger token.
    assert_eq!(
        leases.release("tick", "b", t2).await.unwrap(),
        Released::Held
    );
    assert_eq!(
        leases.release("tick", "b", t2).await.unwrap(),
        Released::Lost
    );
    let t3 = leases.acquire("tick", "b", ttl).await.unwrap().unwrap();
    assert_eq!(t3, t2 + 1);
    // The old token of the same holder cannot renew the new lease.
    assert!(matches!(
        leases.renew("tick", "b", t2, ttl).await,
        Err(Error::NotHolder { .. })
    ));

    // Expired and taken again by the same holder: a new token as well. (Taking a live lease
    // again renews it, so the poll asks for 1 ms: the lease lapses between two polls.)
    let t4 = eventually(Duration::from_secs(5), "b's lease to expire", || {
        let leases = leases.clone();
        async move {
            let token = leases
                .acquire("tick", "b", Duration::from_millis(1))
                .await
                .unwrap()
                .unwrap();
            (token != t3).then_some(token)
        }
    })
    .await;
    assert_eq!(t4, t3 + 1);
    // Once that lapses too, a newcomer continues from the counter.
    let t5 = eventually(Duration::from_secs(5), "b's 1 ms lease to expire", || {
        let leases = leases.clone();
        async move { leases.acquire("tick", "c", long).await.unwrap() }
    })
    .await;
    assert_eq!(t5, t4 + 1);
    assert_eq!(
        leases.release("tick", "b", t4).await.unwrap(),
        Released::Lost
    );
    assert_eq!(
        leases.release("tick", "c", t5).await.unwrap(),
        Released::Held
    );
    client.close().await;
}

async fn lease_tokens_never_go_backwards_all_targets<R: Runtime>() {
    for target in [Target::SingleLegacy, Target::SingleCluster, Target::Cluster] {
        lease_tokens_never_go_backwards::<R>(target).await;
    }
}

/// 8 contenders race for a lease 100 times in total: tokens handed out are exactly 1..=100,
/// each once.
async fn contended_lease_tokens_are_unique<R: Runtime>(target: Target) {
    let client = target.client::<R>().await;
    let leases = Leases::new(client.clone(), target.keyspace("coord-lease-race")).unwrap();
    let mut tasks = Vec::new();
    for c in 0..8 {
        let leases = leases.clone();
        tasks.push(tokio::spawn(async move {
            let holder = format!("h{c}");
            let mut tokens = Vec::new();
            while tokens.len() < 100 / 8 + usize::from(c < 100 % 8) {
                match leases
                    .acquire("l", &holder, Duration::from_secs(5))
                    .await
                    .unwrap()
                {
                    Some(token) => {
                        tokens.push(token);
                        assert_eq!(
                            leases.release("l", &holder, token).await.unwrap(),
                            Released::Held
                        );
                    }
                    None => tokio::time::sleep(Duration::from_millis(1)).await,
                }
            }
            tokens
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let tokens = task.await.unwrap();
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
        all.extend(tokens);
    }
    all.sort_unstable();
    assert_eq!(all, (1..=100).collect::<Vec<u64>>());
    client.close().await;
}

async fn contended_lease_tokens_are_unique_all_targets<R: Runtime>() {
    for target in [Target::SingleLegacy, Target::SingleCluster, Target::Cluster] {
        contended_lease_tokens_are_unique::<R>(target).await;
    }
}

both_drivers!(
    stale_schedule_writers_are_refused_all_targets,
    schedules_written_before_holders_read_without_one_all_targets,
    racing_schedule_writers_keep_the_largest_token_all_targets,
    lease_tokens_never_go_backwards_all_targets,
    contended_lease_tokens_are_unique_all_targets,
);

//! A schedule write is fenced by its token *and* its holder: an equal token from another holder
//! is refused, as every protected write must refuse it (a grant has one owner), while the
//! holder itself may write again. Tokens are compared exactly over the whole `i64` range, also
//! where Lua numbers (doubles) would round them. Against real servers in every layout, on both
//! drivers.

use bytes::Bytes;

use botmesh_redis_core::Error;
use botmesh_redis_core::Schedule;
use botmesh_redis_core::Schedules;
use botmesh_redis_tests::both_drivers;
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::coord::Target;

fn taken(id: &str, token: u64) -> Error {
    Error::NotHolder {
        what: format!("schedule {id:?} fencing token {token}"),
    }
}

fn stale(id: &str, token: u64, stored: u64) -> Error {
    Error::Stale {
        what: format!("schedule {id:?}"),
        token,
        stored,
    }
}

fn schedule(token: u64, holder: &str, data: &'static str) -> Option<Schedule> {
    Some(Schedule {
        token,
        data: Bytes::from_static(data.as_bytes()),
        holder: Some(holder.to_owned()),
    })
}

/// Two holders with one token: the first to write keeps it; the other is refused for puts and
/// deletes, before and after the first holder's delete, until it writes with a higher token.
async fn equal_token_from_another_holder_is_refused<R: Runtime>(target: Target) {
    let client = target.client::<R>().await;
    let schedules =
        Schedules::new(client.clone(), target.keyspace("coord-schedule-equal")).unwrap();
    let id = "nightly:{x} 😀";
    let data = |s: &'static str| Bytes::from_static(s.as_bytes());

    schedules.put(id, 5, "leader-a", data("a1")).await.unwrap();
    assert_eq!(
        schedules
            .put(id, 5, "leader-b", data("b1"))
            .await
            .unwrap_err(),
        taken(id, 5)
    );
    assert_eq!(
        schedules.delete(id, 5, "leader-b").await.unwrap_err(),
        taken(id, 5)
    );
    assert_eq!(
        schedules.get(id).await.unwrap(),
        schedule(5, "leader-a", "a1")
    );
    // The holder of the token writes again.
    schedules.put(id, 5, "leader-a", data("a2")).await.unwrap();
    assert_eq!(
        schedules.get(id).await.unwrap(),
        schedule(5, "leader-a", "a2")
    );
    // The deleted marker keeps the token and its holder: the other holder still cannot write
    // with that token, and the holder can bring the schedule back.
    schedules.delete(id, 5, "leader-a").await.unwrap();
    assert_eq!(schedules.get(id).await.unwrap(), None);
    assert_eq!(
        schedules
            .put(id, 5, "leader-b", data("b2"))
            .await
            .unwrap_err(),
        taken(id, 5)
    );
    assert_eq!(schedules.get(id).await.unwrap(), None);
    schedules.put(id, 5, "leader-a", data("a3")).await.unwrap();
    assert_eq!(
        schedules.get(id).await.unwrap(),
        schedule(5, "leader-a", "a3")
    );
    // A higher token wins whoever holds it; then the earlier holder is stale.
    schedules.put(id, 6, "leader-b", data("b3")).await.unwrap();
    assert_eq!(
        schedules
            .put(id, 6, "leader-a", data("a4"))
            .await
            .unwrap_err(),
        taken(id, 6)
    );
    assert_eq!(
        schedules
            .put(id, 5, "leader-a", data("a4"))
            .await
            .unwrap_err(),
        stale(id, 5, 6)
    );
    assert_eq!(
        schedules.get(id).await.unwrap(),
        schedule(6, "leader-b", "b3")
    );
    client.close().await;
}

/// Tokens past 2^53, where neighbours collapse to one double, still order exactly; so do
/// tokens past `i64::MAX`, up to `u64::MAX` (the range of every fence, term and lease token).
async fn tokens_compare_exactly_as_64_bit_integers<R: Runtime>(target: Target) {
    let client = target.client::<R>().await;
    let schedules = Schedules::new(client.clone(), target.keyspace("coord-schedule-u64")).unwrap();
    let data = |s: &'static str| Bytes::from_static(s.as_bytes());
    let two_53 = 1_u64 << 53;

    // 2^53 + 1 reads as 2^53 when turned into a double.
    schedules
        .put("big", two_53 + 1, "h1", data("x"))
        .await
        .unwrap();
    assert_eq!(
        schedules
            .put("big", two_53, "h0", data("y"))
            .await
            .unwrap_err(),
        stale("big", two_53, two_53 + 1)
    );
    assert_eq!(
        schedules
            .put("big", two_53 + 1, "h2", data("y"))
            .await
            .unwrap_err(),
        taken("big", two_53 + 1)
    );

    // Across i64::MAX: 9223372036854775808 is above 9223372036854775807, same length.
    let i64_max = i64::MAX as u64;
    schedules
        .put("big", i64_max, "h3", data("z"))
        .await
        .unwrap();
    schedules
        .put("big", i64_max + 1, "h4", data("w"))
        .await
        .unwrap();
    assert_eq!(
        schedules
            .put("big", i64_max, "h3", data("again"))
            .await
            .unwrap_err(),
        stale("big", i64_max, i64_max + 1)
    );
    schedules
        .put("big", u64::MAX, "h5", data("v"))
        .await
        .unwrap();
    assert_eq!(
        schedules
            .put("big", u64::MAX - 1, "h6", data("u"))
            .await
            .unwrap_err(),
        stale("big", u64::MAX - 1, u64::MAX)
    );
    assert_eq!(
        schedules.get("big").await.unwrap(),
        schedule(u64::MAX, "h5", "v")
    );
    // Shorter is smaller: 10 is below 9, compared as numbers, not as text.
    schedules.put("short", 9, "s0", data("a")).await.unwrap();
    schedules.put("short", 10, "s1", data("b")).await.unwrap();
    assert_eq!(
        schedules
            .put("short", 9, "s0", data("c"))
            .await
            .unwrap_err(),
        stale("short", 9, 10)
    );
    assert_eq!(
        schedules.get("short").await.unwrap(),
        schedule(10, "s1", "b")
    );
    client.close().await;
}

async fn equal_token_all_targets<R: Runtime>() {
    for target in [Target::SingleLegacy, Target::SingleCluster, Target::Cluster] {
        equal_token_from_another_holder_is_refused::<R>(target).await;
        tokens_compare_exactly_as_64_bit_integers::<R>(target).await;
    }
}

both_drivers!(equal_token_all_targets,);

//! Fences, terms and lease tokens are exact 64-bit integers, also past 2^53 where Lua numbers
//! (doubles) round them: an operator raised the counter, or a migration copied a large one.
//! A grant is exactly the stored value plus one, a re-entry exactly the stored value; at the
//! `i64` maximum the next grant is a typed server error and nothing is taken. Turn tickets stay
//! below 2^53 by construction, and a counter pushed to 2^53 - 1 refuses the next take. Against
//! real servers in every layout, on both drivers.

use std::time::Duration;

use botmesh_redis_core::keys::TurnPart;
use botmesh_redis_core::TurnOptions;
use botmesh_redis_core::{Coordinator, Leases, Released};
use botmesh_redis_core::{Error, Value};
use botmesh_redis_tests::both_drivers;
use botmesh_redis_tests::conformance::Runtime;
use botmesh_redis_tests::coord::{exists, key_cmd, Target};

const TWO_53: u64 = 1 << 53;
const MAX: u64 = i64::MAX as u64;
const TTL: Duration = Duration::from_secs(30);

/// Counter values whose successor a double cannot hold (2^53 + 1, 2^53 + 3) or that sit at the
/// top of the `i64` range.
const STARTS: [u64; 4] = [TWO_53, TWO_53 + 2, MAX - 3, MAX - 2];

/// Asserts a typed server error saying the counter would overflow.
fn assert_overflow<T: std::fmt::Debug>(got: Result<T, Error>, what: &str) {
    match got {
        Err(Error::Server(e)) if e.text().contains("overflow") => {}
        other => panic!("{what}: wanted the server's overflow error, got {other:?}"),
    }
}

fn text(value: Value) -> Option<String> {
    value
        .into_opt_bytes()
        .unwrap()
        .map(|b| String::from_utf8(b.to_vec()).unwrap())
}

async fn locks_hand_out_exact_fences<R: Runtime>(target: Target) {
    let client = target.client::<R>().await;
    let ks = target.keyspace("coord-fence-2-53");
    let coord = Coordinator::new(client.clone(), ks.clone(), "replica-1").unwrap();
    let fence = ks.lock_fence("k");
    for (n, start) in STARTS.into_iter().enumerate() {
        key_cmd(&client, "SET", &fence, &[&start.to_string()]).await;
        let owner = format!("o#{n}");
        assert_eq!(
            coord.lock("k", &owner, TTL).await.unwrap(),
            Some(start + 1),
            "the fence after {start}"
        );
        assert_eq!(coord.unlock("k", &owner).await.unwrap(), Released::Held);
    }
    // The fence is at the maximum: the next grant fails, and leaves nothing held.
    key_cmd(&client, "SET", &fence, &[&(MAX - 1).to_string()]).await;
    assert_eq!(coord.lock("k", "o#max", TTL).await.unwrap(), Some(MAX));
    assert_eq!(coord.unlock("k", "o#max").await.unwrap(), Released::Held);
    assert_overflow(coord.lock("k", "o#over", TTL).await, "lock past i64::MAX");
    assert!(
        !exists(&client, &ks.lock("k")).await,
        "a lock held after the error"
    );
    assert_eq!(
        text(key_cmd(&client, "GET", &fence, &[]).await),
        Some(MAX.to_string())
    );
    assert_overflow(coord.lock("k", "o#over", TTL).await, "the same error again");
    client.close().await;
}

async fn leaderships_hand_out_exact_terms<R: Runtime>(target: Target) {
    let client = target.client::<R>().await;
    let ks = target.keyspace("coord-term-2-53");
    let coord = Coordinator::new(client.clone(), ks.clone(), "replica-1").unwrap();
    let term = ks.leader_term("l");
    for start in STARTS {
        key_cmd(&client, "SET", &term, &[&start.to_string()]).await;
        assert_eq!(coord.campaign("l", TTL).await.unwrap(), Some(start + 1));
        // Re-entry: the leader keeps its term, to the last digit.
        assert_eq!(coord.campaign("l", TTL).await.unwrap(), Some(start + 1));
        assert_eq!(coord.resign("l").await.unwrap(), Released::Held);
    }
    key_cmd(&client, "SET", &term, &[&(MAX - 1).to_string()]).await;
    assert_eq!(coord.campaign("l", TTL).await.unwrap(), Some(MAX));
    assert_eq!(coord.campaign("l", TTL).await.unwrap(), Some(MAX));
    assert_eq!(coord.resign("l").await.unwrap(), Released::Held);
    assert_overflow(coord.campaign("l", TTL).await, "campaign past i64::MAX");
    assert!(
        !exists(&client, &ks.leader("l")).await,
        "a leader after the error"
    );
    // A leader whose term counter is gone keeps leading with term 0 (never an error).
    key_cmd(&client, "DEL", &term, &[]).await;
    assert_eq!(coord.campaign("l", TTL).await.unwrap(), Some(1));
    key_cmd(&client, "DEL", &term, &[]).await;
    assert_eq!(coord.campaign("l", TTL).await.unwrap(), Some(0));
    assert!(
        !exists(&client, &term).await,
        "re-entry created the counter"
    );
    assert_eq!(coord.resign("l").await.unwrap(), Released::Held);
    client.close().await;
}

async fn leases_hand_out_exact_tokens<R: Runtime>(target: Target) {
    let client = target.client::<R>().await;
    let ks = target.keyspace("coord-lease-2-53");
    let leases = Leases::new(client.clone(), ks.clone()).unwrap();
    let lease = ks.lease("tick");
    for start in STARTS {
        key_cmd(&client, "HSET", &lease, &["token", &start.to_string()]).await;
        let token = start + 1;
        assert_eq!(
            leases.acquire("tick", "h1", TTL).await.unwrap(),
            Some(token)
        );
        // The holder takes its live lease again: the same token, to the last digit.
        assert_eq!(
            leases.acquire("tick", "h1", TTL).await.unwrap(),
            Some(token)
        );
        assert_eq!(leases.acquire("tick", "h2", TTL).await.unwrap(), None);
        leases.renew("tick", "h1", token, TTL).await.unwrap();
        // The token before it is another grant, even where both are one double.
        assert!(matches!(
            leases.renew("tick", "h1", token - 1, TTL).await,
            Err(Error::NotHolder { .. })
        ));
        assert_eq!(
            leases.release("tick", "h1", token - 1).await.unwrap(),
            Released::Lost
        );
        assert_eq!(
            leases.release("tick", "h1", token).await.unwrap(),
            Released::Held
        );
    }
    key_cmd(&client, "HSET", &lease, &["token", &(MAX - 1).to_string()]).await;
    assert_eq!(leases.acquire("tick", "h1", TTL).await.unwrap(), Some(MAX));
    assert_eq!(leases.acquire("tick", "h1", TTL).await.unwrap(), Some(MAX));
    assert_eq!(
        leases.release("tick", "h1", MAX).await.unwrap(),
        Released::Held
    );
    assert_overflow(
        leases.acquire("tick", "h2", TTL).await,
        "lease past i64::MAX",
    );
    let fields = key_cmd(&client, "HMGET", &lease, &["holder", "token"]).await;
    let fields: Vec<Option<String>> = fields.into_array().unwrap().into_iter().map(text).collect();
    assert_eq!(
        fields,
        vec![None, Some(MAX.to_string())],
        "the lease changed"
    );
    client.close().await;
}

/// A ticket counter pushed to the last integer a double holds exactly hands out that ticket,
/// then refuses the next take with a typed error instead of rounding.
async fn turn_tickets_stop_below_2_53<R: Runtime>(target: Target) {
    let client = target.client::<R>().await;
    let ks = target.keyspace("coord-ticket-2-53");
    let options = TurnOptions {
        poll_interval: Duration::from_millis(10),
        ..TurnOptions::default()
    };
    let coord = Coordinator::new(client.clone(), ks.clone(), "replica-1")
        .unwrap()
        .with_turn_options(options);
    // Turns need a live heartbeat.
    coord.heartbeat(Duration::from_secs(60)).await.unwrap();
    let seq = ks.turn("chat", TurnPart::Seq);
    key_cmd(&client, "SET", &seq, &[&(TWO_53 - 2).to_string()]).await;
    let grant = coord.acquire_turn("chat").await.unwrap();
    assert_eq!(grant.guard.ticket, TWO_53 - 1);
    coord.extend_turn(&grant.guard).await.unwrap();
    coord.release_turn(&grant.guard).await.unwrap();
    match coord.acquire_turn("chat").await {
        Err(Error::Server(e)) if e.text().contains("2^53") => {}
        other => panic!("a ticket past 2^53 - 1: {other:?}"),
    }
    let queued = key_cmd(&client, "ZCARD", &ks.turn("chat", TurnPart::Tix), &[]).await;
    assert_eq!(
        queued.as_i64().unwrap(),
        0,
        "the refused take queued a ticket"
    );
    client.close().await;
}

async fn tokens_all_targets<R: Runtime>() {
    for target in [Target::SingleLegacy, Target::SingleCluster, Target::Cluster] {
        locks_hand_out_exact_fences::<R>(target).await;
        leaderships_hand_out_exact_terms::<R>(target).await;
        leases_hand_out_exact_tokens::<R>(target).await;
        turn_tickets_stop_below_2_53::<R>(target).await;
    }
}

both_drivers!(tokens_all_targets,);

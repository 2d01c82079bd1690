//! Calls on a slot that is being migrated: a single-key call whose key has already moved
//! follows `ASK` (and leaves the slot map alone); a multi-key script whose keys are split
//! between source and target gets `TRYAGAIN`, backs off and retries until the move ends, then
//! succeeds. (Before 7.0 the source answers such a script with `ASK` as soon as one key is
//! missing, and the target refuses the `ASKING` retry with `TRYAGAIN`.)

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use botmesh_redis_core::driver::store::messages;
use botmesh_redis_core::{Access, ClientOptions, Executor, Key, Keyspace, Layout, Request, Value};
use botmesh_redis_tests::conformance::{driver_name, Client, Runtime};
use botmesh_redis_tests::counters::{cmdstat, errorstat};
use botmesh_redis_tests::{
    both_drivers, poll_until, server_version, unique_prefix, ClusterOptions, RedisCluster,
};
use bytes::Bytes;

/// Slot migrations change the topology: this file owns its cluster. Its tests, on both
/// drivers, take turns, so that the counters each one reads are its own.
fn cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::start(ClusterOptions::new()))
}
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn other_master(cluster: &RedisCluster, than: std::net::SocketAddr) -> std::net::SocketAddr {
    cluster
        .masters()
        .unwrap()
        .into_iter()
        .find(|&m| m != than)
        .unwrap()
}

async fn call<R: Runtime>(
    client: &Client<R>,
    access: Access,
    name: &'static str,
    key: &Key,
    arg: Option<&str>,
) -> Value {
    let mut request = Request::cmd(access, name).key(key);
    if let Some(arg) = arg {
        request = request.arg(arg);
    }
    client.call(request.build().unwrap()).await.unwrap()
}

async fn single_key_call_on_a_half_migrated_slot_follows_ask<R: Runtime>() {
    let _turn = TURN.lock().await;
    let cluster = cluster();
    let client = Client::<R>::connect(ClientOptions::cluster(cluster.seeds()))
        .await
        .unwrap();
    let tag = format!("{{{}}}", unique_prefix("ask-one"));
    let moved = Key::new(format!("{tag}:moved"));
    let staying = Key::new(format!("{tag}:staying"));
    let fresh = Key::new(format!("{tag}:fresh"));
    let ok = Value::Status(Bytes::from_static(b"OK"));
    for key in [&moved, &staying] {
        assert_eq!(
            call(&client, Access::Write, "SET", key, Some("v")).await,
            ok
        );
    }
    let slot = moved.slot();
    let source = cluster.master_for_slot(slot).unwrap();
    let target = other_master(cluster, source);
    let (mut on_source, mut on_target) =
        (cluster.conn(source).unwrap(), cluster.conn(target).unwrap());

    let migration = cluster.begin_migration(slot, target).unwrap();
    migration.migrate_keys(&[moved.as_bytes()]).unwrap();
    let asks = errorstat(&mut on_source, "ASK");
    let target_moved = errorstat(&mut on_target, "MOVED");
    let askings = cmdstat(&mut on_target, "asking").calls;

    // The moved key: ASK from the source, then ASKING + GET on the target.
    assert_eq!(
        call(&client, Access::Read, "GET", &moved, None).await,
        Value::from("v")
    );
    // A key still on the source: served there, so ASK did not repoint the slot (a repointed
    // slot would send it to the target, which answers MOVED without ASKING).
    assert_eq!(
        call(&client, Access::Read, "GET", &staying, None).await,
        Value::from("v")
    );
    // A new key: the source does not have it, so ASK again; it is created on the target.
    assert_eq!(
        call(&client, Access::Write, "SET", &fresh, Some("new")).await,
        ok
    );
    assert_eq!(errorstat(&mut on_source, "ASK") - asks, 2);
    assert_eq!(cmdstat(&mut on_target, "asking").calls - askings, 2);
    assert_eq!(errorstat(&mut on_target, "MOVED"), target_moved);
    let created = on_target
        .pipeline(&[vec![&b"ASKING"[..]], vec![&b"GET"[..], fresh.as_bytes()]])
        .unwrap();
    assert_eq!(created[1].as_str(), Some("new"));

    tokio::task::spawn_blocking(move || migration.finish())
        .await
        .unwrap()
        .unwrap();
    for (key, value) in [(&moved, "v"), (&staying, "v"), (&fresh, "new")] {
        assert_eq!(
            call(&client, Access::Read, "GET", key, None).await,
            Value::from(value)
        );
    }
    client.close().await;
}

async fn script_on_keys_split_by_a_migration_retries_tryagain_until_the_move_ends<R: Runtime>() {
    let _turn = TURN.lock().await;
    let cluster = cluster();
    // The call keeps getting TRYAGAIN until the migration ends, and ending it (the harness's
    // `Migration::finish`) moves the remaining keys and then waits until all six nodes agree
    // on the new owner: on a busy two-core machine that can take longer than the default
    // budget of about 2.6 s. 30 attempts from 10 ms, capped at 500 ms, give about 12 s; the
    // request deadline is raised to match.
    let options = ClientOptions::cluster(cluster.seeds())
        .cluster_retry(30, Duration::from_millis(10))
        .request_timeout(Duration::from_secs(30));
    let client = Client::<R>::connect(options).await.unwrap();
    let prefix = unique_prefix("ask-two");
    let ks = Keyspace::new(Layout::Cluster, prefix.as_str()).unwrap();
    let chat = format!("{prefix}-chat");
    let save = |time: i64, payload: &'static str| {
        messages::save_message(
            &ks,
            &chat,
            "m1",
            time,
            Bytes::from_static(payload.as_bytes()),
        )
        .unwrap()
    };
    assert_eq!(client.run(save(1, "first")).await, Ok(true));

    let (log, item) = (ks.message_log(&chat), ks.message_item(&chat, "m1"));
    let slot = log.slot();
    let source = cluster.master_for_slot(slot).unwrap();
    let target = other_master(cluster, source);
    let asks_first = server_version().unwrap().asks_on_split_keys();
    // The node that answers TRYAGAIN: the source, or before 7.0 the target (after the source's
    // ASK).
    let refuser = if asks_first { target } else { source };
    let mut on_source = cluster.conn(source).unwrap();
    let mut on_refuser = cluster.conn(refuser).unwrap();
    let migration = cluster.begin_migration(slot, target).unwrap();
    // Split: the item is on the target, the log still on the source.
    migration.migrate_keys(&[item.as_bytes()]).unwrap();
    let tryagain_before = errorstat(&mut on_refuser, "TRYAGAIN");
    let asks_before = errorstat(&mut on_source, "ASK");

    let started = Instant::now();
    let updating = tokio::spawn({
        let (client, plan) = (client.clone(), save(2, "second"));
        async move { client.run(plan).await }
    });
    // Finish the move once the call has been refused twice (so it has retried at least once),
    // from another thread, while the call keeps retrying.
    let finishing = tokio::task::spawn_blocking(move || {
        let mut on_refuser = cluster.conn(refuser).unwrap();
        poll_until(
            Instant::now() + Duration::from_secs(10),
            "two TRYAGAIN replies",
            || {
                let n = errorstat(&mut on_refuser, "TRYAGAIN") - tryagain_before;
                if n >= 2 {
                    Ok(())
                } else {
                    Err(format!("{n} so far"))
                }
            },
        )
        .unwrap();
        migration.finish()
    });
    assert_eq!(
        finishing.await.unwrap(),
        Ok(1),
        "the log was the key left to move"
    );
    // The message existed, so it is updated, not new.
    assert_eq!(updating.await.unwrap(), Ok(false));
    eprintln!(
        "{}: the call completed {:?} after it started",
        driver_name::<R>(),
        started.elapsed()
    );
    let tryagains = errorstat(&mut on_refuser, "TRYAGAIN") - tryagain_before;
    assert!(tryagains >= 2, "{tryagains} TRYAGAIN replies");
    let asks = errorstat(&mut on_source, "ASK") - asks_before;
    if asks_first {
        // Every refused attempt went through the source's ASK first.
        assert!(asks >= tryagains, "{asks} ASK for {tryagains} TRYAGAIN");
    } else {
        // The source refused with TRYAGAIN itself while it held the log. Once the log has moved
        // too, and before the slot is reassigned, it holds none of the keys and answers ASK:
        // the attempt that lands in that window is the last one, it succeeds on the target.
        assert!(
            asks <= 1,
            "{asks} ASK: the source refused with TRYAGAIN itself"
        );
    }

    let mut on_target = cluster.conn(target).unwrap();
    let payload = on_target.cmd(&[&b"GET"[..], item.as_bytes()]).unwrap();
    assert_eq!(payload.as_str(), Some("second"));
    let score = on_target
        .cmd(&[&b"ZSCORE"[..], log.as_bytes(), b"m1"])
        .unwrap();
    assert_eq!(score.as_int(), Some(2));
    client.close().await;
}

both_drivers!(
    single_key_call_on_a_half_migrated_slot_follows_ask,
    script_on_keys_split_by_a_migration_retries_tryagain_until_the_move_ends,
);

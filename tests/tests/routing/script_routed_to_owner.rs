//! A script call goes straight to the master that owns its keys' slot: no `MOVED`, no `ASK`,
//! nothing sent to the other masters or to replicas (counted with `INFO commandstats` and
//! `INFO errorstats` on every node). Both drivers' runs count on the same nodes, so they take
//! turns.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use botmesh_redis_core::driver::scripts::SAVE_MESSAGE;
use botmesh_redis_core::driver::store::messages;
use botmesh_redis_core::{ClientOptions, Executor, Keyspace, Layout};
use botmesh_redis_tests::conformance::{exclusive, Client, Runtime};
use botmesh_redis_tests::counters::{cmdstat, errorstat, owner, CmdStat};
use botmesh_redis_tests::{both_drivers, shared_cluster, unique_prefix};
use bytes::Bytes;

#[derive(Debug, PartialEq, Eq)]
struct Counters {
    evalsha: CmdStat,
    eval: CmdStat,
    moved: u64,
    ask: u64,
}

fn counters(cluster: &botmesh_redis_tests::RedisCluster) -> BTreeMap<SocketAddr, Counters> {
    cluster
        .nodes()
        .into_iter()
        .map(|node| {
            let mut conn = cluster.conn(node).unwrap();
            let counters = Counters {
                evalsha: cmdstat(&mut conn, "evalsha"),
                eval: cmdstat(&mut conn, "eval"),
                moved: errorstat(&mut conn, "MOVED"),
                ask: errorstat(&mut conn, "ASK"),
            };
            (node, counters)
        })
        .collect()
}

async fn save_message_runs_on_the_owner_of_its_slot_without_redirects<R: Runtime>() {
    let _turn = exclusive().await;
    let cluster = shared_cluster();
    let client = Client::<R>::connect(ClientOptions::cluster(cluster.seeds()))
        .await
        .unwrap();
    let prefix = unique_prefix("routed");
    let ks = Keyspace::new(Layout::Cluster, prefix.as_str()).unwrap();
    let ranges = cluster.slots().unwrap();
    let masters = cluster.masters().unwrap();
    // Loaded everywhere beforehand, so that every call is exactly one EVALSHA on one node.
    for &master in &masters {
        let sha = cluster
            .conn(master)
            .unwrap()
            .cmd(&["SCRIPT", "LOAD", SAVE_MESSAGE.source()])
            .unwrap();
        assert_eq!(sha.as_bytes(), Some(SAVE_MESSAGE.sha1().as_ref()));
    }

    // Chats in every master's slots; the chat name holds the unique prefix, because the slot
    // of a message key depends on the chat only.
    let chats: Vec<String> = (0..90).map(|i| format!("{prefix}-chat{i}")).collect();
    let mut expected: BTreeMap<SocketAddr, u64> = masters.iter().map(|&m| (m, 0)).collect();
    for chat in &chats {
        *expected
            .get_mut(&owner(&ranges, ks.message_log(chat).slot()))
            .unwrap() += 1;
    }
    assert!(expected.values().all(|&n| n > 0), "{expected:?}");

    let before = counters(cluster);
    let mut calls = Vec::new();
    for (i, chat) in chats.iter().enumerate() {
        let plan =
            messages::save_message(&ks, chat, "m1", 1_000 + i as i64, Bytes::from(chat.clone()))
                .unwrap();
        let client = client.clone();
        calls.push(tokio::spawn(async move { client.run(plan).await }));
    }
    for call in calls {
        assert_eq!(call.await.unwrap(), Ok(true), "a new message");
    }
    let after = counters(cluster);

    for (node, after) in &after {
        let before = &before[node];
        let sent_here = expected.get(node).copied().unwrap_or(0);
        assert_eq!(
            after.evalsha.calls - before.evalsha.calls,
            sent_here,
            "EVALSHA calls on {node}"
        );
        assert_eq!(after.evalsha.failed, before.evalsha.failed, "on {node}");
        assert_eq!(after.evalsha.rejected, before.evalsha.rejected, "on {node}");
        assert_eq!(after.eval, before.eval, "no EVAL fallback on {node}");
        assert_eq!(after.moved, before.moved, "no MOVED from {node}");
        assert_eq!(after.ask, before.ask, "no ASK from {node}");
    }

    // The data is where the slot map says, both keys of each call.
    for (i, chat) in chats.iter().enumerate() {
        let log = ks.message_log(chat);
        let item = ks.message_item(chat, "m1");
        let mut conn = cluster.conn(owner(&ranges, log.slot())).unwrap();
        let score = conn.cmd(&[&b"ZSCORE"[..], log.as_bytes(), b"m1"]).unwrap();
        assert_eq!(score.as_int(), Some(1_000 + i as i64), "{chat}");
        let payload = conn.cmd(&[&b"GET"[..], item.as_bytes()]).unwrap();
        assert_eq!(payload.as_str(), Some(chat.as_str()));
    }
    client.close().await;
}

both_drivers!(exclusive: save_message_runs_on_the_owner_of_its_slot_without_redirects);

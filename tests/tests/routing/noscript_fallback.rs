//! After `SCRIPT FLUSH` on every master, script calls still succeed: the first `EVALSHA` on
//! each master gets `NOSCRIPT`, is resent as `EVAL` to that same master (which loads the script
//! there), and later calls are plain `EVALSHA` again. Both drivers' runs flush and count on
//! the same masters, so they take turns.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use botmesh_redis_core::driver::scripts::SAVE_MESSAGE;
use botmesh_redis_core::driver::store::messages;
use botmesh_redis_core::{ClientOptions, Executor, Keyspace, Layout};
use botmesh_redis_tests::conformance::{exclusive, Client, Runtime};
use botmesh_redis_tests::counters::{cmdstat, errorstat, owner, CmdStat};
use botmesh_redis_tests::{both_drivers, shared_cluster, unique_prefix, RedisCluster};
use bytes::Bytes;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Counters {
    noscript: u64,
    evalsha: CmdStat,
    eval: CmdStat,
}

fn counters(cluster: &RedisCluster, masters: &[SocketAddr]) -> BTreeMap<SocketAddr, Counters> {
    masters
        .iter()
        .map(|&m| {
            let mut conn = cluster.conn(m).unwrap();
            let c = Counters {
                noscript: errorstat(&mut conn, "NOSCRIPT"),
                evalsha: cmdstat(&mut conn, "evalsha"),
                eval: cmdstat(&mut conn, "eval"),
            };
            (m, c)
        })
        .collect()
}

fn flush_scripts(cluster: &RedisCluster, masters: &[SocketAddr]) {
    let sha = String::from_utf8(SAVE_MESSAGE.sha1().to_vec()).unwrap();
    for &m in masters {
        let mut conn = cluster.conn(m).unwrap();
        assert!(conn.cmd(&["SCRIPT", "FLUSH"]).unwrap().is_ok());
        let exists = conn.cmd(&["SCRIPT", "EXISTS", sha.as_str()]).unwrap();
        assert_eq!(exists.as_array().unwrap()[0].as_int(), Some(0), "{m}");
    }
}

async fn script_calls_succeed_after_script_flush_on_every_master<R: Runtime>() {
    const CALLS_PER_MASTER: usize = 3;
    let _turn = exclusive().await;
    let cluster = shared_cluster();
    let client = Client::<R>::connect(ClientOptions::cluster(cluster.seeds()))
        .await
        .unwrap();
    let prefix = unique_prefix("noscript");
    let ks = Keyspace::new(Layout::Cluster, prefix.as_str()).unwrap();
    let ranges = cluster.slots().unwrap();
    let masters = cluster.masters().unwrap();

    // CALLS_PER_MASTER chats in the slots of each master.
    let mut chats: BTreeMap<SocketAddr, Vec<String>> = BTreeMap::new();
    for i in 0.. {
        let chat = format!("{prefix}-chat{i}");
        let list = chats
            .entry(owner(&ranges, ks.message_log(&chat).slot()))
            .or_default();
        if list.len() < CALLS_PER_MASTER {
            list.push(chat);
        }
        if chats.len() == masters.len() && chats.values().all(|l| l.len() == CALLS_PER_MASTER) {
            break;
        }
    }
    let save = |chat: &str, id: &str| {
        messages::save_message(&ks, chat, id, 7, Bytes::from(format!("{chat}/{id}"))).unwrap()
    };

    // Sequential calls after a flush: exactly one NOSCRIPT and one EVAL per master.
    flush_scripts(cluster, &masters);
    let before = counters(cluster, &masters);
    for list in chats.values() {
        for chat in list {
            assert_eq!(client.run(save(chat, "m1")).await, Ok(true), "{chat}");
        }
    }
    let after = counters(cluster, &masters);
    for &m in &masters {
        let (b, a) = (before[&m], after[&m]);
        assert_eq!(a.noscript - b.noscript, 1, "NOSCRIPT replies from {m}");
        assert_eq!(a.eval.calls - b.eval.calls, 1, "EVAL fallbacks on {m}");
        assert_eq!(a.eval.failed, b.eval.failed, "failed EVALs on {m}");
        assert_eq!(
            a.evalsha.calls - b.evalsha.calls,
            CALLS_PER_MASTER as u64,
            "EVALSHA calls on {m}: the refused one, then plain ones"
        );
        assert_eq!(a.evalsha.failed - b.evalsha.failed, 1, "on {m}");
    }

    // Concurrent calls after another flush: pipelined EVALSHAs all get NOSCRIPT, each falls
    // back on its own, and every call succeeds exactly once.
    flush_scripts(cluster, &masters);
    let before = counters(cluster, &masters);
    let mut calls = Vec::new();
    for list in chats.values() {
        for chat in list {
            for n in 0..20 {
                let (client, plan) = (client.clone(), save(chat, &format!("m{}", n + 2)));
                calls.push(tokio::spawn(async move { client.run(plan).await }));
            }
        }
    }
    for call in calls {
        assert_eq!(call.await.unwrap(), Ok(true));
    }
    let after = counters(cluster, &masters);
    for &m in &masters {
        let (b, a) = (before[&m], after[&m]);
        assert!(a.noscript > b.noscript, "the flush on {m} was noticed");
        assert_eq!(a.noscript - b.noscript, a.eval.calls - b.eval.calls, "{m}");
    }
    for (&m, list) in &chats {
        let mut conn = cluster.conn(m).unwrap();
        for chat in list {
            let log = ks.message_log(chat);
            let count = conn.cmd(&[&b"ZCARD"[..], log.as_bytes()]).unwrap();
            assert_eq!(count.as_int(), Some(21), "{chat}");
            let item = ks.message_item(chat, "m21");
            let payload = conn.cmd(&[&b"GET"[..], item.as_bytes()]).unwrap();
            assert_eq!(payload.as_str(), Some(format!("{chat}/m21").as_str()));
        }
    }
    client.close().await;
}

both_drivers!(exclusive: script_calls_succeed_after_script_flush_on_every_master);
